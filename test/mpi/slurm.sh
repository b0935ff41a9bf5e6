#!/bin/bash
# test/mpi/slurm.sh - run one command under a throwaway single-node Slurm.
#
# Usage: test/mpi/slurm.sh COMMAND [ARGS...]
#   e.g. test/mpi/slurm.sh srun -n 3 --mpi=pmix ./prog
#
# In a fresh `mktemp -d` dir it starts a private munged (own key and socket;
# the system munged and /etc/munge are untouched), slurmctld and slurmd (own
# slurm.conf via SLURM_CONF, spool/state/tmp dirs, logs, free TCP ports),
# waits until the node is idle, runs COMMAND with SLURM_CONF exported, then
# kills exactly the daemons it started, by pid, and removes the dir.  Exits
# with COMMAND's status, 1 if Slurm does not come up within 20 s (log tails
# on stderr), 77 (meson's skip) if not root or a Slurm/munge tool is missing.
# Startup + teardown take ~1.5 s; concurrent instances do not interfere.
#
# Oversubscription: the node is declared with CPUs=max(nproc,8) plus
# SlurmdParameters=config_overrides (else the node goes INVAL), so `srun -n 3`
# works on 2 CPUs without --overcommit.  (OverSubscribe=FORCE does not help:
# it only lets *jobs* share CPUs; srun --overcommit would.)  With
# EnforcePartLimits=ALL, -n 9+ fails at once instead of pending forever.
# --mpi=pmix with OpenMPI 4.1 needs no extra env, not even for root.
# ^C / group kills reach COMMAND directly (daemons run under setsid); a signal
# to this script alone takes effect once COMMAND returns.
set -u

skip() { echo "slurm.sh: SKIP: $*" >&2; exit 77; }
[ "$#" -gt 0 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
[ "${EUID:-$(id -u)}" -eq 0 ] || skip "must run as root (slurmd/munged as root)"
PATH=$PATH:/usr/sbin:/sbin                # daemons live in sbin on Debian
for b in slurmctld slurmd munged mungekey srun sinfo squeue setsid; do
    command -v "$b" >/dev/null 2>&1 || skip "$b not found"
done

dir=$(mktemp -d /tmp/gpupool-slurm.XXXXXX) || exit 1
chmod 711 "$dir"                     # munged wants the socket dir traversable
pids=""                              # daemons we started, newest first

# shellcheck disable=SC2317,SC2086  # trap handler; $jobs is split on purpose
cleanup() {
    trap - EXIT INT TERM
    # Cancel leftover jobs while the daemons are still up (kills stray steps).
    if [ -n "$pids" ] && jobs=$(squeue -h -o %i 2>/dev/null) && [ -n "$jobs" ]; then
        scancel $jobs 2>/dev/null
        for _ in $(seq 50); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.1; done
    fi
    # Stop slurmd, slurmctld, munged in that order: 5 s each, then SIGKILL.
    for p in $pids; do
        kill "$p" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# First TCP port >= $1 that nobody listens on (per ss, if present) and that
# is not $2 (the port already picked for slurmctld).
free_port() {
    p=$1
    while [ "$p" = "${2:-}" ] || ss -Htln "sport = :$p" 2>/dev/null | grep -q .; do
        p=$((p + 1))
    done
    echo "$p"
}
# Start from a pid-derived port rather than 6817/6818 so that concurrent
# runs (e.g. parallel meson tests) do not race for the same free port.
base=$((6817 + $$ % 1000 * 2))
ctld_port=$(free_port "$base")
slurmd_port=$(free_port $((ctld_port + 1)) "$ctld_port")

host=$(hostname)
cpus=$(nproc)
[ "$cpus" -ge 8 ] || cpus=8

# --- munge: private daemon, private key and socket --------------------------
mungekey -c -k "$dir/munge.key" || exit 1
# Daemons run in the foreground (-F/-D) but backgrounded, so $! is their pid,
# and under setsid so that a ^C / group kill aimed at COMMAND leaves them up
# until cleanup() (srun needs munged and slurmctld to cancel its job).  setsid
# does not fork here: a non-interactive shell's background job leads no group.
setsid munged -F --force --socket="$dir/munge.sock" --key-file="$dir/munge.key" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" \
    --seed-file="$dir/munged.seed" 2>>"$dir/munged.log" &
pids="$! $pids"

# --- slurm.conf -------------------------------------------------------------
mkdir -p "$dir/ctld" "$dir/slurmd" "$dir/tmp"
export SLURM_CONF="$dir/slurm.conf"
cat > "$SLURM_CONF" <<EOF
ClusterName=gpupooltest
# Private TmpFS (the pmix plugin puts /tmp/spmix_appdir_<uid>_<job>.<step>
# there) and pid-derived job ids keep concurrent instances apart.
TmpFS=$dir/tmp
FirstJobId=$(($$ % 60000 * 1000 + 1))
SlurmctldHost=$host
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/slurmd
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
EnforcePartLimits=ALL
ReturnToService=2
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=main Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF

# Wait for munged's socket before starting Slurm.
for _ in $(seq 50); do [ -S "$dir/munge.sock" ] && break; sleep 0.1; done

# --- Slurm daemons -----------------------------------------------------------
setsid slurmctld -D -i >"$dir/slurmctld.out" 2>&1 &
pids="$! $pids"
setsid slurmd -D >"$dir/slurmd.out" 2>&1 &
pids="$! $pids"

up=""
for _ in $(seq 100); do                     # up to 20 s
    state=$(sinfo -h -o %t 2>/dev/null)
    [ "$state" = idle ] && { up=1; break; }
    sleep 0.2
done
if [ -z "$up" ]; then
    echo "slurm.sh: node not idle after 20 s (state: '${state:-}')" >&2
    for f in munged.log slurmctld.log slurmctld.out slurmd.log slurmd.out; do
        [ -s "$dir/$f" ] && { echo "--- $f" >&2; tail -n 20 "$dir/$f" >&2; }
    done
    exit 1
fi

"$@"
exit $?                                     # cleanup() runs from the EXIT trap
