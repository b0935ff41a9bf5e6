"""Where a map of big items over ranks spends its CPU, by role.

    mpirun -np 3 PY -m gpupool bench/py_ranks_cpu.py KIND N REPS

Rank 0 maps size_at (bench/py_ranks.py) over N distinct 1 MiB items
(KIND bytes or numpy) REPS times in one Pool(fake_gpus=1), after a
warm-up, and prints one JSON line: MB/s, the items that went to other
ranks, and the CPU seconds of the timed part by role, read from
/proc/PID/stat of every process of the job (all ranks are local):
rank 0's interpreter, MPI process and workers, and the same summed over
the other ranks (supervise.proc_table()). Not a harness section: a profile to read beside
`bench/run.py --sections ranks` (bench/README.md).
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import py_ranks  # noqa: E402
import supervise  # noqa: E402


def roles(t, me):
    """pid -> role, from supervise.proc_table() t: the ranks are rank 0's
    siblings (the launcher's children); a rank's descendant named
    gpupool-mpi is its MPI process, any other one of its workers."""
    out = {}
    for r in (p for p, v in t.items() if v[0] == t[me][0]):
        tag = "rank0" if r == me else "rankN"
        out[r] = tag + " interpreter"
        for p in supervise.descendants(t, r):
            out[p] = tag + (" mpi" if "mpi" in t[p][3] else " workers")
    return out


def main():
    import gpupool
    kind, n, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with gpupool.Pool(fake_gpus=1) as p:
        p.map(py_ranks.size_at, py_ranks.mib_items(kind, 4))
        items = py_ranks.mib_items(kind, n)
        a, t, remote = supervise.proc_table(), time.perf_counter(), 0
        for _ in range(reps):
            res = p.map(py_ranks.size_at, items)
            remote += sum(1 for x in res if x[1] != 0)
        secs, b = time.perf_counter() - t, supervise.proc_table()
    cpu = {}
    for pid, role in roles(b, os.getpid()).items():
        if pid in a:
            cpu[role] = round(cpu.get(role, 0) + (b[pid][4] - a[pid][4]) / \
                os.sysconf("SC_CLK_TCK"), 2)
    print(json.dumps(dict(kind=kind, items=n * reps, remote=remote,
                          secs=secs, mb_per_s=n * reps * py_ranks.MIB /
                          secs / 1e6, cpu_s=cpu,
                          cpu_us_per_item=sum(cpu.values()) / (n * reps) *
                          1e6)), flush=True)


if __name__ == "__main__":
    main()
