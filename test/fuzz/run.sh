#!/bin/sh
# test/fuzz/run.sh [SECONDS_EACH [BUILD_DIR]]
#
# Build the libFuzzer harnesses (fuzz_msg, fuzz_tasks, fuzz_joblog,
# fuzz_rproto) with clang, replay every file under
# test/fuzz/regress/<target>/ and the seed corpus, then fuzz each target
# for SECONDS_EACH seconds (default 20) on a scratch copy of
# test/fuzz/corpus/<target>/ (the tree is never written).
#
# Exit status: 0 all clean; 1 a crash, hang, leak or sanitizer report
# (the reproducer is left in the work dir, path printed); 77 clang or its
# libFuzzer runtime (Debian: libclang-rt-14-dev) is missing; 2 usage or
# build error.
#
# Environment: CC (default clang), FUZZ_FLAGS (extra libFuzzer flags),
# KEEP=1 keeps the scratch dir.
set -u

secs=${1:-20}
case $secs in ''|*[!0-9]*) echo "usage: $0 [SECONDS_EACH [BUILD_DIR]]" >&2; exit 2;; esac

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
CC=${CC:-clang}
targets="msg tasks joblog rproto"

if ! command -v "$CC" >/dev/null 2>&1; then
	echo "run.sh: $CC not found; skipping fuzzing (exit 77)" >&2
	exit 77
fi

if [ $# -ge 2 ]; then
	out=$2
	mkdir -p "$out" || exit 2
else
	out=$(mktemp -d "${TMPDIR:-/tmp}/gpupool-fuzz.XXXXXX") || exit 2
	[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$out"' EXIT
fi
out=$(cd "$out" && pwd)

# Is libFuzzer there? (clang without libclang_rt.fuzzer fails to link.)
cat >"$out/probe.c" <<'PROBE'
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }
PROBE
if ! "$CC" -fsanitize=fuzzer,address,undefined "$out/probe.c" \
    -o "$out/probe" >"$out/probe.log" 2>&1; then
	echo "run.sh: $CC cannot link -fsanitize=fuzzer (install" \
	    "libclang-rt-14-dev); skipping fuzzing (exit 77)" >&2
	sed 's/^/  /' "$out/probe.log" >&2
	exit 77
fi

cflags="-g -O1 -std=c11 -D_GNU_SOURCE -fno-omit-frame-pointer
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
    -Wall -Wextra -I$root/include -I$root/src -I$root/src/cli -I$here
    $(pkg-config --cflags hwloc 2>/dev/null)"

for t in $targets; do
	case $t in
	msg)	srcs="$root/src/msg.c $root/src/io.c" ;;
	tasks)	srcs="$root/src/cli/master/tasks.c $root/src/cli/common/need.c
		    $root/src/cli/parallel/grid.c
		    $root/src/opts.c $root/src/err.c
		    $root/src/cli/parallel/gridsrc.c $root/src/cli/common/rdr.c
		    $root/src/cli/parallel/repl.c $root/src/cli/common/files.c $root/src/io.c" ;;
	joblog)	srcs="$root/src/cli/master/joblog.c $root/src/cli/common/files.c
		    $root/src/cli/common/rdr.c $root/src/io.c" ;;
	rproto)	srcs="$root/src/cli/common/rproto.c" ;;
	esac
	# shellcheck disable=SC2086
	if ! "$CC" $cflags "$here/fuzz_$t.c" $srcs -o "$out/fuzz_$t"; then
		echo "run.sh: building fuzz_$t failed" >&2
		exit 2
	fi
done

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# -timeout: a unit that runs 25 s is a hang, a finding. A slow unit is
# not: on a loaded machine a unit can take seconds for no fault of the
# code, so -report_slow_units is set far above -timeout (slow-unit-*
# files, should one appear, are listed as notes, never a failure).
# -rss_limit_mb: libFuzzer's default; what a joblog costs follows its
# rows (regress/joblog/big-seq once took ~670 MB).
# fuzz_joblog makes its scratch dir under TMPDIR: keep it in ours, so a
# crash (no atexit) leaves nothing behind.
TMPDIR=$out
export TMPDIR
common="-rss_limit_mb=2048 -timeout=25 -report_slow_units=3600 -max_len=65536 ${FUZZ_FLAGS:-}"

status=0
for t in $targets; do
	# Regression inputs and seeds: each must run clean.
	files=$(find "$here/regress/$t" "$here/corpus/$t" -type f 2>/dev/null | sort)
	if [ -n "$files" ]; then
		echo "== fuzz_$t: replaying $(echo "$files" | wc -l) regress+seed inputs"
		# shellcheck disable=SC2086
		if ! "$out/fuzz_$t" $common $files >"$out/replay_$t.log" 2>&1; then
			echo "run.sh: fuzz_$t FAILED on a regress/seed input:" >&2
			grep -E 'Running:|ERROR|SUMMARY|runtime error|invariant' \
			    "$out/replay_$t.log" | tail -20 >&2
			status=1
			continue	# no point fuzzing a known crash
		fi
	fi
	[ "$secs" -gt 0 ] || continue
	rm -rf "$out/corpus_$t" "$out/crash_$t"
	mkdir -p "$out/corpus_$t" "$out/crash_$t"
	cp "$here/corpus/$t"/* "$out/corpus_$t"/ 2>/dev/null
	echo "== fuzz_$t: fuzzing for ${secs}s"
	# shellcheck disable=SC2086
	"$out/fuzz_$t" $common -max_total_time="$secs" -print_final_stats=1 \
	    -artifact_prefix="$out/crash_$t/" "$out/corpus_$t" \
	    >"$out/fuzz_$t.log" 2>&1
	rc=$?
	grep -E '^#[0-9]+.*DONE|stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss' \
	    "$out/fuzz_$t.log" | sed 's/^/   /'
	slow=$(find "$out/crash_$t" -type f -name 'slow-unit-*')
	[ -z "$slow" ] || echo "   note: slow units (load?): $slow"
	found=$(find "$out/crash_$t" -type f ! -name 'slow-unit-*')
	if [ $rc -ne 0 ] || [ -n "$found" ]; then
		echo "run.sh: fuzz_$t FOUND A PROBLEM (rc $rc):" >&2
		grep -E 'ERROR|SUMMARY|runtime error|invariant|Test unit written' \
		    "$out/fuzz_$t.log" | tail -20 >&2
		echo "  reproducer(s): $(echo "$found" | tr '\n' ' ')" >&2
		echo "  minimize: $out/fuzz_$t -minimize_crash=1 -runs=10000 FILE;" \
		    "then copy to test/fuzz/regress/$t/ (see README.md)" >&2
		trap - EXIT	# keep the evidence
		status=1
	fi
done
[ $status -eq 0 ] && echo "== fuzz: all clean"
exit $status
