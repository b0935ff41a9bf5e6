#!/usr/bin/env bash
# test/gpu/run.sh: the one-shot real-GPU check (issue 12).
#
# On a machine with an NVIDIA GPU, its driver (nvidia-smi) and the CUDA
# toolkit, one command from anywhere in the tree:
#
#	test/gpu/run.sh
#
# configures its own build (build-gpu, with -Dcuda=enabled), builds what
# the checks run, and runs each check, every wait bounded (the checks
# share a budget of under 5 minutes). It prints one line per check,
#
#	PASS name: what it saw	FAIL name: what it saw	SKIP name: why
#
# then a summary, and exits 0 when no check failed, 1 otherwise. Without a
# GPU (no nvidia-smi, or one that lists none) it says so and exits 77 at
# once. Each check's full output stays in build-gpu/gpu-check/.
#
# A GPU machine without the toolkit or the build tools: build elsewhere
# with "run.sh --build" (no GPU needed; it also copies the shared
# libraries the programs need, but the C library's, into build-gpu/lib),
# bring build-gpu over, and run "run.sh --no-build" there.
#
# Environment: NVIDIA_SMI (the nvidia-smi to run), CUDA_HOME (toolkit root;
# default: nvcc's on PATH, else /usr/local/cuda), GPU_BUILD (build dir),
# GPU_CONTEXT_TASKS (tasks of the context-cost check, default 32).
#
# The checks (test/gpu/gpucheck.c does the CUDA side):
#   show-gpus        --show-gpus agrees with nvidia-smi on UUIDs, bus ids
#   worker-device    each worker sees device 0 at its own bus id
#   cuda-kernel      examples/cuda_map computes on the GPU
#   illegal-address  a faulting kernel fails its item; the next succeeds
#   memory-released  a SIGKILLed worker's GPU memory is released
#   busy-gpu         --gpus free and --wait-free with a foreign CUDA process
#   context-cost     a CUDA context per task against one per worker
#   clean-workers    a caller with a CUDA context (the driver's files open)
#                    gets workers that start clean and compute on their GPUs
set -u
mode=${1:-all}
case $mode in
all | --build | --no-build) ;;
*)
	echo "usage: test/gpu/run.sh [--build | --no-build]" >&2
	exit 2
	;;
esac
cd "$(dirname "$0")/../.." || exit 1
unset GPUPOOL_FAKE_GPUS GPUPOOL_TOPOLOGY

smi=${NVIDIA_SMI:-nvidia-smi}
B=${GPU_BUILD:-build-gpu}
W=$B/gpu-check
run=$B/src/cli/gpupool-run
gc=$B/test/gpu/gpucheck
npass=0 nfail=0 nskip=0

# One line: what a command printed, newlines as " | ", cut to 300 bytes.
oneline() {
	tr -s '\n' '|' <<<"$1" | sed 's/|$//; s/|/ | /g' | cut -c1-300
}

pass() { echo "PASS $1: $2"; npass=$((npass + 1)); }
fail() { echo "FAIL $1: $2"; nfail=$((nfail + 1)); }
skip() { echo "SKIP $1: $2"; nskip=$((nskip + 1)); }

# --- A GPU, or exit 77 at once ----------------------------------------
if [ "$mode" != --build ]; then
	if ! command -v "$smi" >/dev/null 2>&1; then
		echo "SKIP all: no GPU: $smi not found"
		exit 77
	fi
	smi_gpus=$(timeout 30 "$smi" --query-gpu=index,uuid,pci.bus_id \
	    --format=csv,noheader 2>&1)
	rc=$?
	if [ "$rc" -ne 0 ] || ! grep -q 'GPU-' <<<"$smi_gpus"; then
		echo "SKIP all: no GPU: $smi lists none (exit $rc: $(oneline "$smi_gpus"))"
		exit 77
	fi
fi

# --- Build ---------------------------------------------------------------
# Configure and build what the checks run; the build's output goes to $1.
# Says what it built in built, or fails.
build() {
	local root=${CUDA_HOME:-} nv rc setup targets t=$SECONDS
	if [ -z "$root" ]; then
		if nv=$(command -v nvcc); then
			root=$(dirname "$(dirname "$(readlink -f "$nv")")")
		else
			root=/usr/local/cuda
		fi
	fi
	setup=(-Dcuda=enabled -Dtests=enabled -Dmpi=disabled
	    -Dpython=disabled "-Dcudart_root=$root")
	if [ -f "$B/build.ninja" ]; then
		timeout 120 meson setup --reconfigure "$B" "${setup[@]}"
	else
		timeout 120 meson setup "$B" "${setup[@]}"
	fi >"$1" 2>&1
	rc=$?
	targets=(src/cli/gpupool-run test/gpu/gpucheck)
	if [ "$rc" -eq 0 ] && timeout 10 ninja -C "$B" -t query \
	    examples/cuda_map >/dev/null 2>&1; then
		targets+=(examples/cuda_map)
	fi
	[ "$rc" -eq 0 ] && timeout 300 ninja -C "$B" "${targets[@]}" >>"$1" 2>&1
	rc=$?
	built="${targets[*]} in $((SECONDS - t)) s, CUDA root $root"
	if [ "$rc" -ne 0 ]; then
		built="exit $rc, CUDA root $root: $(grep -i -m3 -e error -e fail "$1" | tr '\n' ' ' | cut -c1-300)"
		return 1
	fi
}

# Copy the shared libraries the programs load, but the C and C++
# runtimes', into $B/lib, for a machine that lacks them.
copy_libs() {
	mkdir -p "$B/lib" &&
	    ldd "$run" "$gc" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' |
	    sort -u | grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
	    xargs -r cp -L -t "$B/lib"
}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
if [ "$mode" != --no-build ]; then
	if ! build "$log"; then
		fail build "$built"
		echo "gpu check: 0 passed, 1 failed, 0 skipped: the build failed"
		exit 1
	fi
	if [ "$mode" = --build ]; then
		copy_libs || exit 1
		echo "built $built; libraries to bring:" "$B"/lib/*
		exit 0
	fi
fi
if [ ! -x "$run" ] || [ ! -x "$gc" ]; then
	fail build "$run or $gc is not built (run.sh --build)"
	echo "gpu check: 0 passed, 1 failed, 0 skipped: nothing to run"
	exit 1
fi
[ -d "$B/lib" ] && export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
rm -rf "$W"
mkdir -p "$W"
cp "$log" "$W/build.log"
kernels="with kernels"
[ -e "$B/test/gpu/gpukern.cu.o" ] || kernels="without kernels (no nvcc)"
if [ "$mode" = --no-build ]; then
	skip build "--no-build: the programs in $B as they are, gpucheck $kernels"
else
	pass build "$built, gpucheck $kernels"
fi

# --- Helpers for the checks ---------------------------------------------
T0=$SECONDS
BUDGET=290	# seconds for all the checks together

# Seconds a step may take: its own limit, cut to what the budget has left
# (at least 1: timeout 0 would mean no limit).
limit() {
	local left=$((BUDGET - (SECONDS - T0)))
	[ "$left" -lt 1 ] && left=1
	if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

# Poll until a command succeeds or SECS pass: wait_for SECS CMD ARGS...
wait_for() {
	local end=$((SECONDS + $1))
	shift
	until "$@"; do
		[ "$SECONDS" -ge "$end" ] && return 1
		sleep 0.2
	done
}

# Rows "ID BUSID" of stdin (tab-separated) with the bus id as
# "0000:b7:00.0", from NVML's "00000000:B7:00.0" or CUDA's "0000:B7:00.0",
# sorted.
busids() {
	awk -F'\t' '{
		b = tolower($2); d = b; sub(/:.*/, "", d)
		r = b; sub(/^[^:]*:/, "", r)
		if (length(d) > 4) d = substr(d, length(d) - 3)
		while (length(d) < 4) d = "0" d
		print $1, d ":" r
	}' | sort
}

# The column named $1 of a --show-gpus table in file $2, as "ID VALUE"
# rows (the ID column first), one per GPU.
gpu_column() {
	awk -F'\t' -v want="$1" '
	NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "ID") id = i;
		if ($i == want) c = i }; next }
	id && c && $1 ~ /^[0-9]+$/ { print $id "\t" $c }' "$2"
}

# Run gpucheck in one mode as check NAME: gc_check NAME SECS ARGS...
gc_check() {
	local name=$1 secs out err rc
	secs=$(limit "$2")
	shift 2
	if [ "$secs" -le 5 ]; then
		skip "$name" "out of time (the checks' budget is ${BUDGET} s)"
		return
	fi
	out=$W/$name.out err=$W/$name.err
	timeout "$secs" "$gc" "$@" >"$out" 2>"$err"
	rc=$?
	case $rc in
	0) pass "$name" "$(tail -n1 "$out")" ;;
	77) skip "$name" "$(tail -n1 "$out")" ;;
	124) fail "$name" "timed out after $secs s: $(oneline "$(tail -q -n3 "$out" "$err")")" ;;
	*) fail "$name" "exit $rc: $(tail -n1 "$out") [stderr: $(oneline "$(grep -m3 '^gpucheck:' "$err" || tail -n3 "$err")")]" ;;
	esac
}

# --- show-gpus ---------------------------------------------------------
check_show_gpus() {
	local out=$W/show-gpus.out ours theirs extra rc
	timeout "$(limit 60)" "$run" --show-gpus >"$out" 2>"$W/show-gpus.err"
	rc=$?
	if [ "$rc" -ne 0 ]; then
		fail show-gpus "exit $rc: $(oneline "$(cat "$W/show-gpus.err")")"
		return
	fi
	ours=$(gpu_column "BUS ID" "$out" | busids)
	theirs=$(awk -F', *' '{ print $2 "\t" $3 }' <<<"$smi_gpus" | busids)
	if [ -z "$ours" ]; then
		fail show-gpus "no GPU row with ID and BUS ID: $(oneline "$(cat "$out")")"
		return
	fi
	# With CUDA_VISIBLE_DEVICES set, gpupool sees only those GPUs.
	extra=$(comm -23 <(echo "$ours") <(echo "$theirs"))
	if [ -n "$extra" ] || { [ -z "${CUDA_VISIBLE_DEVICES+set}" ] &&
	    [ "$ours" != "$theirs" ]; }; then
		fail show-gpus "gpupool: $(oneline "$ours"); nvidia-smi: $(oneline "$theirs")"
		return
	fi
	pass show-gpus "$(grep -c . <<<"$ours") GPUs as nvidia-smi names them: $(oneline "$ours")"
}

# --- cuda-kernel --------------------------------------------------------
check_cuda_kernel() {
	local out=$W/cuda-kernel.out rc last
	if [ ! -x "$B/examples/cuda_map" ]; then
		skip cuda-kernel "examples/cuda_map not built (no nvcc, or it cannot use the host compiler: see $W/build.log)"
		return
	fi
	timeout "$(limit 120)" "$B/examples/cuda_map" >"$out" 2>&1
	rc=$?
	last=$(grep -m1 'items:' "$out")
	if [ "$rc" -eq 0 ] && grep -q ' 0 on CPU fallback' <<<"$last"; then
		pass cuda-kernel "$last; $(grep -m1 'computed on:' "$out")"
	else
		fail cuda-kernel "exit $rc: $(oneline "$(grep -e 'computed on:' -e 'items:' -e 'cuda_map:' "$out")")"
	fi
}

# --- busy-gpu ------------------------------------------------------------
# The pids of the compute processes nvidia-smi lists, one a line.
compute_pids() {
	timeout 20 "$smi" --query-compute-apps=pid --format=csv,noheader \
	    2>/dev/null | grep -E '^[0-9]+$'
}

# Whether nvidia-smi lists pid $1 as a compute process.
smi_has_pid() {
	compute_pids | grep -qx "$1"
}

# The busy-GPU path's three parts, given the holder's pid $1 and whether
# nvidia-smi lists it ($2: yes or no); each sets said to "what: result"
# and fails (1) or not. Not in $(...): busy_wait_free waits for children
# of this shell.
busy_show() {
	local out=$W/busy-show.out states bad rc
	timeout "$(limit 60)" "$run" --gpus free --show-gpus >"$out" 2>&1
	rc=$?
	states=$(gpu_column STATE "$out")
	if [ -z "$states" ]; then
		said="--gpus free --show-gpus: exit $rc, no STATE column: $(oneline "$(cat "$out")")"
		return 1
	fi
	if [ "$2" = yes ]; then
		bad=$(grep -v -E "busy.*pid $1([^0-9]|\$)" <<<"$states")
	else
		bad=$(grep -v busy <<<"$states")
	fi
	said="--show-gpus STATE: $(oneline "$(cut -f2 <<<"$states")")"
	[ -z "$bad" ]
}

busy_refused() {
	local rc
	echo "echo task-ran" >"$W/busy.tasks"
	timeout "$(limit 60)" "$run" --gpus free "$W/busy.tasks" \
	    >"$W/busy-run.out" 2>"$W/busy-run.err"
	rc=$?
	if [ "$rc" -ne 0 ] && grep -qi 'no free GPU' "$W/busy-run.err" &&
	    ! grep -q task-ran "$W/busy-run.out"; then
		said="run refused, exit $rc: $(oneline "$(grep -i -m1 'no free GPU' "$W/busy-run.err")")"
		return 0
	fi
	said="run: exit $rc, expected a 'no free GPU' error: $(oneline "$(cat "$W/busy-run.out" "$W/busy-run.err")")"
	return 1
}

# Whether the --wait-free run (pid $1) started its task or ended.
wait_over() {
	[ -e "$W/started" ] || ! kill -0 "$1" 2>/dev/null
}

# --wait-free: started while the holder ($1, under timeout's pid $2)
# holds, the task must wait, and start once it has gone.
busy_wait_free() {
	local wpid rc killed started
	printf "date +%%s.%%N > '%s'\n" "$W/started" >"$W/wait.tasks"
	timeout "$(limit 120)" "$run" --gpus free --wait-free \
	    "$W/wait.tasks" >"$W/wait.out" 2>"$W/wait.err" &
	wpid=$!
	# Proving that nothing starts needs a window: 5 s is many of the
	# monitor's samples, and the task would start within one.
	wait_for 5 wait_over "$wpid"
	if [ -e "$W/started" ] || ! kill -0 "$wpid" 2>/dev/null; then
		said="--wait-free: while the GPU was busy the run ended or the task started: $(oneline "$(cat "$W/wait.err")")"
		kill "$1" 2>/dev/null
		wait "$wpid"
		return 1
	fi
	killed=$(date +%s.%N)
	kill "$1"
	wait "$2"
	wait "$wpid"
	rc=$?
	started=$(cat "$W/started" 2>/dev/null)
	if [ "$rc" -ne 0 ] || [ -z "$started" ]; then
		said="--wait-free: exit $rc, task started: ${started:-never}: $(oneline "$(cat "$W/wait.err")")"
		return 1
	fi
	said="--wait-free: the task started $(awk -v a="$started" -v b="$killed" 'BEGIN { printf "%.2f", a - b }') s after the holder was killed"
}

no_compute_apps() {
	[ -z "$(compute_pids)" ]
}

# Whether the holder (under timeout's pid $1) holds its memory, or is gone.
holder_ready() {
	grep -qs '^holding' "$W/hold.out" || ! kill -0 "$1" 2>/dev/null
}

check_busy_gpu() {
	local others tpid hpid seen ok=1 r1 r2 r3
	# The checks before leave no process on the GPUs, but nvidia-smi
	# may list one a moment longer.
	wait_for 20 no_compute_apps
	others=$(timeout 20 "$smi" --query-compute-apps=pid,process_name \
	    --format=csv,noheader 2>&1 | grep -E '^[0-9]+,')
	if [ -n "$others" ]; then
		skip busy-gpu "the GPUs already run other processes: $(oneline "$others")"
		return
	fi
	timeout "$(limit 200)" "$gc" hold 20 180 >"$W/hold.out" 2>"$W/hold.err" &
	tpid=$!
	wait_for 60 holder_ready "$tpid"
	if ! grep -qs '^holding' "$W/hold.out"; then
		kill "$tpid" 2>/dev/null
		wait "$tpid"
		fail busy-gpu "the holder did not start: $(oneline "$(cat "$W/hold.out" "$W/hold.err")")"
		return
	fi
	hpid=$(sed -n 's/.*, pid \([0-9]*\)$/\1/p' "$W/hold.out")
	seen=no
	wait_for 20 smi_has_pid "$hpid" && seen=yes
	busy_show "$hpid" "$seen" || ok=0
	r1=$said
	busy_refused || ok=0
	r2=$said
	busy_wait_free "$hpid" "$tpid" || ok=0
	r3=$said
	kill "$tpid" 2>/dev/null
	wait "$tpid" 2>/dev/null
	if [ "$ok" -eq 1 ]; then
		pass busy-gpu "holder pid $hpid ($(head -n1 "$W/hold.out"), listed by nvidia-smi: $seen): $r1; $r2; $r3"
	else
		fail busy-gpu "holder pid $hpid (listed by nvidia-smi: $seen): $r1; $r2; $r3"
	fi
}

# --- context-cost -----------------------------------------------------
check_context_cost() {
	local n=${GPU_CONTEXT_TASKS:-32} i t0 t1 rc pool secs
	for ((i = 0; i < n; i++)); do
		printf "'%s' context\n" "$gc"
	done >"$W/context.tasks"
	t0=$(date +%s.%N)
	timeout "$(limit 150)" "$run" --quiet "$W/context.tasks" \
	    >"$W/context-run.out" 2>"$W/context-run.err"
	rc=$?
	t1=$(date +%s.%N)
	if [ "$rc" -ne 0 ]; then
		fail context-cost "process per task: exit $rc: $(oneline "$(tail -q -n3 "$W/context-run.out" "$W/context-run.err")")"
		return
	fi
	timeout "$(limit 120)" "$gc" context-pool "$n" >"$W/context-pool.out" \
	    2>"$W/context-pool.err"
	rc=$?
	pool=$(tail -n1 "$W/context-pool.out")
	secs=$(sed -n 's/.* in \([0-9.]*\) s on .*/\1/p' <<<"$pool")
	if [ "$rc" -ne 0 ] || [ -z "$secs" ]; then
		fail context-cost "once per worker: exit $rc: $pool $(oneline "$(tail -n3 "$W/context-pool.err")")"
		return
	fi
	pass context-cost "$(awk -v n="$n" -v a="$t0" -v b="$t1" -v p="$secs" '
	    BEGIN { t = b - a
		printf "process per task: %d tasks in %.2f s (%.0f ms each); ", n, t, t * 1000 / n
		printf "once per worker: %d items in %.2f s (%.0f ms each); ", n, p, p * 1000 / n
		printf "ratio %.1f", (p > 0 ? t / p : 0) }')"
}

check_show_gpus
gc_check worker-device 120 device
check_cuda_kernel
gc_check illegal-address 120 illegal
gc_check memory-released 180 memory 1024
check_busy_gpu
check_context_cost
gc_check clean-workers 120 clean

echo "gpu check: $npass passed, $nfail failed, $nskip skipped; checks took $((SECONDS - T0)) s; output in $W"
[ "$nfail" -eq 0 ]
