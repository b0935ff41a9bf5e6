#!/bin/sh
# check-script.sh: keep test/gpu/run.sh sound where there is no GPU (the
# docs suite's gpu-script test): it passes shellcheck, and with no
# nvidia-smi, or one that finds no GPU, it says "no GPU" and exits 77
# at once, building nothing.
#
#	usage: check-script.sh RUN.SH
set -u
script=$1
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

if ! command -v shellcheck >/dev/null 2>&1; then
	echo "check-script: shellcheck is not installed (.ci/setup installs it)"
	exit 1
fi
shellcheck "$script" || exit 1

# What nvidia-smi prints, exit 6, on a machine whose driver finds none.
printf '#!/bin/sh\necho "No devices were found"\nexit 6\n' >"$tmp/nvidia-smi"
chmod +x "$tmp/nvidia-smi"

for smi in "$tmp/absent" "$tmp/nvidia-smi"; do
	# A build would take minutes: 20 s is "at once" with room for a
	# loaded machine.
	out=$(NVIDIA_SMI=$smi GPU_BUILD=$tmp/build timeout 20 "$script" 2>&1)
	rc=$?
	echo "NVIDIA_SMI=$smi: exit $rc: $out"
	if [ "$rc" -ne 77 ]; then
		echo "check-script: expected exit 77"
		exit 1
	fi
	if [ "$(printf '%s\n' "$out" | grep -c .)" -ne 1 ] ||
	    ! printf '%s\n' "$out" | grep -q '^SKIP all: no GPU: '; then
		echo "check-script: expected one line 'SKIP all: no GPU: ...'"
		exit 1
	fi
	if [ -e "$tmp/build" ]; then
		echo "check-script: it made $tmp/build"
		exit 1
	fi
done
