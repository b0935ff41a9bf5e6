"""common.py: what every part of bench/run.py shares: where the tree is,
what a full and a --quick run measure, the log, and the statistics of
repeated runs (a median with its min and max, per-round ratios)."""
import os
import random
import statistics
import subprocess
import sys
import time


HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SLOTS = 4
MIB = 1024 * 1024

# What a full run and a --quick run measure. A full run takes about 8 minutes
# on 2 cores, --quick under a minute.
FULL = dict(
    cmd_n=1000, true_rounds=5, sleep_rounds=3,
    skew_xm=0.010, skew_cap=1.0, skew_rounds=3,
    fp_ns=(100, 1000), val_n=24,
    pp_procs=3, pp_blocks=10, pp_n=2000,
    triv_ns=(10**4, 10**5, 10**6), triv_rounds=3, triv_budget_s=8.0,
    pskew_rounds=5,
    payloads=((16, 100000), (4096, 20000), (MIB, 256), (16 * MIB, 32),
              (64 * MIB, 16)), payload_rounds=3, payload_py_s=10.0,
    mpi_n=200000, mpi_rounds=5,
    py_ns=(10**5, 10**6), py_triv_rounds=3, py_rt_n=2000, py_rt_rounds=5,
    py_warm=(100, "scipy.stats", 0.5, 0.1), py_warm_rounds=3,
    py_payloads=((MIB, 128), (16 * MIB, 16)), py_payload_rounds=3,
    py_start_rounds=5,
    py_ck={"trivial": 10**6, "ms": 4000, "ms1": 4000, "read1": 10**6},
    py_ck_rounds=3,
    claim_iters=20000, claim_blocks=5, claims_true_rounds=5,
    sweep_n=200, sweep_rounds=3, beside_long=400, beside_short=10,
    beside_rounds=3,
)
QUICK = dict(
    cmd_n=200, true_rounds=2, sleep_rounds=1,
    skew_xm=0.002, skew_cap=0.2, skew_rounds=1,
    fp_ns=(100,), val_n=12,
    pp_procs=1, pp_blocks=5, pp_n=2000,
    triv_ns=(10**4, 10**5, 10**6), triv_rounds=2, triv_budget_s=1.0,
    pskew_rounds=2,
    payloads=((16, 20000), (4096, 5000), (MIB, 64), (16 * MIB, 16)),
    payload_rounds=1, payload_py_s=5.0,
    mpi_n=50000, mpi_rounds=3,
    py_ns=(10**5,), py_triv_rounds=2, py_rt_n=500, py_rt_rounds=2,
    py_warm=(20, "scipy.stats", 0.2, 0.05), py_warm_rounds=2,
    py_payloads=((MIB, 32), (16 * MIB, 4)), py_payload_rounds=2,
    py_start_rounds=2,
    py_ck={"trivial": 10**5, "ms": 1000, "ms1": 1000, "read1": 10**5},
    py_ck_rounds=2,
    claim_iters=5000, claim_blocks=3, claims_true_rounds=2,
    sweep_n=100, sweep_rounds=1, beside_long=200, beside_short=10,
    beside_rounds=1,
)

# Pareto(alpha 1.5) item durations for pool_map's skewed set (5 ms scale,
# capped at 0.5 s, as bench_pool's own set), 100 items, seed 42.
PSKEW = dict(n=100, xm=0.005, cap=0.5, seed=42)

T0 = time.monotonic()

NOTES = []     # main() points this at the run's notes


def log(msg):
    print("[%6.1fs] %s" % (time.monotonic() - T0, msg), file=sys.stderr,
          flush=True)


def stats(values):
    v = [x for x in values if x is not None]
    if not v:
        return None
    return {"median": statistics.median(v), "min": min(v), "max": max(v),
            "n": len(v), "values": v}


def rotate(seq, k):
    k %= len(seq) if seq else 1
    return list(seq[k:]) + list(seq[:k])


def sh(argv, **kw):
    """Output of a short command, or None."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30,
                           **kw)
        return (r.stdout + r.stderr).strip()
    except (OSError, subprocess.SubprocessError):
        return None


def first_line(s):
    return s.splitlines()[0].strip() if s else None


def greedy(d, w=SLOTS):
    """Greedy list scheduling of durations d, in order, on w machines."""
    load = [0.0] * w
    for x in d:
        i = load.index(min(load))
        load[i] += x
    return max(load)


def pareto(n, xm, cap, seed, ndigits=None):
    r = random.Random(seed)
    d = [min(cap, xm * r.paretovariate(1.5)) for _ in range(n)]
    return [round(x, ndigits) for x in d] if ndigits else d


def ratio_stats(a_runs, b_runs, key):
    """Per-round ratios a/b of interleaved runs."""
    if not b_runs:
        return None
    v = []
    for a, b in zip(a_runs, b_runs):
        if a.get(key) and b.get(key):
            v.append(a[key] / b[key])
    return stats(v)


def pair_ratios(a, b, key):
    """Per-round ratios a/b over runs that both produced key."""
    return stats([x[key] / y[key] for x, y in zip(a, b)
                  if x.get(key) and y.get(key)])


def med(s):
    return s["median"] if s else None
