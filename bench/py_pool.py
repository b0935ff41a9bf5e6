#!/usr/bin/env python3
"""Python's process pools on the work bench_pool gives pool_map, for the
benchmark harness. One measurement per call, one JSON line out.

    python3 py_pool.py trivial IMPL N        x * 2 on the ints 0..N-1
    python3 py_pool.py skewed IMPL FILE      time.sleep(d) for each d in FILE
    python3 py_pool.py payload IMPL SIZE N   echo SIZE bytes, N items

IMPL: map (Pool.map, default chunking: len / (4 * workers)), map1
(Pool.map, chunksize=1), imap_unordered (its default chunksize, 1),
ppe (ProcessPoolExecutor.map, its default chunksize, 1). Always 4 worker
processes. The pool is created and warmed up (a map of 64 items) before
the clock starts, as bench_pool does with its pool; startup_s says what
creating it took. Results are checked.
"""
import concurrent.futures as cf
import json
import multiprocessing as mp
import sys
import time

WORKERS = 4


def twice(x):
    return x * 2


def nap(d):
    time.sleep(d)
    return 0


def echo(b):
    return b


class Runner:
    def __init__(self, impl):
        self.impl = impl
        t0 = time.perf_counter()
        if impl == "ppe":
            self.pool = cf.ProcessPoolExecutor(max_workers=WORKERS)
        else:
            self.pool = mp.Pool(processes=WORKERS)
        self.map(twice, range(64))
        self.startup = time.perf_counter() - t0

    def map(self, fn, items):
        if self.impl == "map":
            return self.pool.map(fn, items)
        if self.impl == "map1":
            return self.pool.map(fn, items, chunksize=1)
        if self.impl == "imap_unordered":
            return list(self.pool.imap_unordered(fn, items))
        if self.impl == "ppe":
            return list(self.pool.map(fn, items))
        raise SystemExit("unknown IMPL " + self.impl)

    def close(self):
        if self.impl == "ppe":
            self.pool.shutdown()
        else:
            self.pool.close()
            self.pool.join()


def main():
    a = sys.argv[1:]
    if len(a) < 3:
        sys.exit(__doc__)
    what, impl = a[0], a[1]
    r = Runner(impl)
    out = {"bench": what, "impl": impl, "startup_s": round(r.startup, 6)}
    if what == "trivial":
        n = int(a[2])
        items = list(range(n))
        t0 = time.perf_counter()
        res = r.map(twice, items)
        t = time.perf_counter() - t0
        ok = sorted(res) == [2 * x for x in items] if impl == "imap_unordered" \
            else res == [2 * x for x in items]
        out.update(n=n, items_per_s=n / t)
    elif what == "skewed":
        with open(a[2]) as f:
            d = [float(x) for x in f.read().split()]
        t0 = time.perf_counter()
        res = r.map(nap, d)
        t = time.perf_counter() - t0
        ok = len(res) == len(d)
        out.update(n=len(d), makespan_s=t)
    elif what == "payload":
        size, n = int(a[2]), int(a[3])
        buf = bytes((i * 7 + 1) & 0xff for i in range(size))
        # Distinct objects: pickle would send a repeated one only once
        # per chunk (its memo), which no real workload gets.
        items = [bytes(bytearray(buf)) for _ in range(n)]
        t0 = time.perf_counter()
        res = r.map(echo, items)
        t = time.perf_counter() - t0
        ok = len(res) == n and all(x == buf for x in res)
        out.update(size=size, n=n, items_per_s=n / t,
                   mb_per_s=n * size / t / 1e6)
    else:
        sys.exit(__doc__)
    r.close()
    if not ok:
        sys.exit("py_pool: wrong results")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
