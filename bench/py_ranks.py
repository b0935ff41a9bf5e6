#!/usr/bin/env python3
"""gpupool.Pool across MPI ranks against mpi4py.futures.MPIPoolExecutor,
and MPI's own point-to-point bandwidth, for the benchmark harness's
`ranks` section (issue 27). Each job prints JSON lines, one a
measurement; run it under mpirun with an interpreter where gpupool is
pip-installed from this tree (with its MPI process gpupool/_mpiproc) and
mpi4py imports:

    mpirun -np 3 PY -m gpupool py_ranks.py gpupool TRIV_N MS_N MIB_N KINDS
    mpirun -np 3 PY -m mpi4py.futures py_ranks.py futures TRIV_N C1_N \\
        MS_N MIB_N KINDS CHUNKS
    mpirun -np 2 PY py_ranks.py p2p SIZE N PASSES
    PY py_ranks.py probe         what this interpreter has (no MPI started)

Every job warms its pool up (a map of 64 trivial items, and a few 1 MiB
items before the 1 MiB maps) before any clock starts, then times one map
per case and checks every result; the 1 MiB items are mapped 1 +
MIB_PASSES times, as p2p sends (an untimed pass, then timed ones): the
line gives the median pass and the first's MB/s (first_mb_per_s, the
rings' pages and the workers' buffers taken then). The same items for
every contender:

    trivial  x * 2 on the ints 0..TRIV_N-1
    ms       time.sleep(0.001) on the ints 0..MS_N-1 (1 ms items)
    mib      MIB_N distinct 1 MiB items (KIND bytes, or numpy uint8
             arrays: KINDS is bytes or bytes,numpy), the function returns
             their len() (gpupool: with the rank it ran on, to count the
             bytes that went over MPI); its line's chunk is the chunk
             size of that map (gpupool's default, as Pool.map computed
             it; null if this gpupool does not say)

A case of N = 0 is not run. gpupool: gpupool.Pool(fake_gpus=1) made on rank 0 spans the job's ranks:
one worker per rank, rank 0's included (3 workers with -np 3); Pool.map
with its default chunks (len / (4 x workers)).

futures: mpi4py.futures.MPIPoolExecutor() under `python -m
mpi4py.futures`: rank 0 is the master, every other rank a worker (2
workers with -np 3); executor.map with chunksize=1 (its default) on the
first C1_N trivial items only (it sends one item a message), and with
each chunk size of CHUNKS (a comma list; "auto" is len / (4 x workers),
as gpupool's and multiprocessing's default). 1 ms items: chunksize=1 and
auto; 1 MiB items: chunksize=1.

p2p: comm.Send of one SIZE-byte buffer (a bytearray) N times from rank 0 to rank
1 (comm.Recv into one buffer there), then a one-byte reply; PASSES timed
passes after an untimed one of N / 8 sends; MB/s of each pass (10^6 B).
"""
import json
import os
import sys
import time

MIB = 1 << 20
MIB_PASSES = 5  # timed maps of the 1 MiB items after the first, as p2p


def twice(x):
    return x * 2


def nap(x):
    time.sleep(0.001)
    return x


def size_at(x):
    return (len(x), int(os.environ.get("GPUPOOL_RANK") or 0))


def out(**kw):
    print(json.dumps(kw), flush=True)


def mib_items(kind, n):
    """n distinct 1 MiB items (pickle's memo would send a repeated object
    once a chunk, which no real workload gets)."""
    base = bytes((i * 7 + 1) & 0xff for i in range(256)) * (MIB // 256)
    items = [bytes([i & 0xff]) + base[1:] for i in range(n)]
    if kind == "numpy":
        import numpy
        items = [numpy.frombuffer(b, dtype=numpy.uint8).copy()
                 for b in items]
    return items


def timed(mapf, fn, items):
    t0 = time.perf_counter()
    r = mapf(fn, items)
    return r, time.perf_counter() - t0


def check(impl, case, ok):
    if not ok:
        raise SystemExit("%s %s: wrong results" % (impl, case))


def watch_chunks(p):
    """A list that gets each default chunk size gpupool's Pool p
    computes (its private _chunksize, whatever arguments it takes);
    stays empty where p has none."""
    used = []
    f = getattr(p, "_chunksize", None)
    if callable(f):
        def spy(*a, **kw):
            used.append(f(*a, **kw))
            return used[-1]
        p._chunksize = spy
    return used


def cases(impl, mapf, workers, ranks, plan, kinds, mib_n, used=None):
    """Every case of plan ((case, chunksize, n): case trivial or ms;
    chunksize None: the pool's default, "auto": len / (4 x workers)),
    then the 1 MiB items of each kind; one JSON line each. mapf(fn,
    items, chunksize) returns the results as a list; used: the list
    watch_chunks() gives, for the chunk size a default chunk was (None
    where it is not known)."""
    common = dict(impl=impl, workers=workers, ranks=ranks)
    mapf(twice, list(range(64)), None)
    for case, cs, n in plan:
        if n == 0:
            continue  # (a job for the 1 MiB items only)
        c = auto_chunk(n, workers) if cs == "auto" else cs
        items = list(range(n))
        fn = twice if case == "trivial" else nap
        if used:
            del used[:]
        r, secs = timed(lambda f, xs: mapf(f, xs, c), fn, items)
        check(impl, case, r == ([2 * x for x in items] if fn is twice
                                else items))
        out(case=case, chunksize=cs, n=n, secs=secs,
            chunk=c or (used[-1] if used else None),
            items_per_s=n / secs, **common)
    # gpupool: size_at says where each item ran; futures: len, one item
    # a message (a chunk of 1 MiB items gains nothing).
    fn, cs = (size_at, None) if impl == "gpupool" else (len, 1)
    for kind in kinds:
        mapf(fn, mib_items(kind, 4), cs)
        items = mib_items(kind, mib_n)
        passes = [mib_pass(impl, mapf, fn, cs, items, used)
                  for _ in range(1 + MIB_PASSES)]
        first = passes.pop(0)
        secs, remote, chunk = sorted(passes)[len(passes) // 2]
        out(case="mib", kind=kind, n=mib_n, size=MIB, secs=secs,
            chunk=chunk, mb_per_s=mib_n * MIB / secs / 1e6,
            items_over_mpi=remote,
            mpi_mb_per_s=remote * MIB / secs / 1e6, passes=MIB_PASSES,
            first_mb_per_s=mib_n * MIB / first[0] / 1e6, **common)


def mib_pass(impl, mapf, fn, cs, items, used):
    """One timed map of the 1 MiB items, its results checked: seconds,
    the items that ran on ranks 1-2 (size_at says), the chunk size."""
    if used:
        del used[:]
    r, secs = timed(lambda f, xs: mapf(f, xs, cs), fn, items)
    where = [x[1] for x in r] if fn is size_at else [1] * len(r)
    check(impl, "mib", [x[0] for x in r] == [MIB] * len(items)
          if fn is size_at else r == [MIB] * len(items))
    return secs, sum(1 for x in where if x != 0), cs or (
        used[-1] if used else None)


def auto_chunk(n, workers):
    return max(1, n // (4 * workers))


def run_gpupool(triv_n, ms_n, mib_n, kinds):
    import gpupool
    ranks = int(os.environ.get("GPUPOOL_RANKS") or 1)
    with gpupool.Pool(fake_gpus=1) as p:
        by_rank = sorted(set(w["rank"] for w in p.info()))
        cases("gpupool", lambda f, xs, cs: p.map(f, xs, cs), p.size(),
              ranks, [("trivial", None, triv_n), ("ms", None, ms_n)],
              kinds, mib_n, watch_chunks(p))
    out(case="layout", impl="gpupool", ranks=ranks, worker_ranks=by_rank)


def run_futures(triv_n, c1_n, ms_n, mib_n, kinds, chunks):
    from mpi4py import MPI
    from mpi4py.futures import MPIPoolExecutor
    with MPIPoolExecutor() as ex:
        workers = ex.num_workers
        plan = [("trivial", 1, c1_n)] + [("trivial", c, triv_n)
                                         for c in chunks]
        plan += [("ms", 1, ms_n), ("ms", "auto", ms_n)]
        cases("futures", lambda f, xs, cs: list(ex.map(
            f, xs, chunksize=cs or 1)), workers, MPI.COMM_WORLD.Get_size(),
            plan, kinds, mib_n)


def run_p2p(size, n, passes):
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    me = comm.Get_rank()
    buf = bytearray(b"\x07" * size) if me == 0 else bytearray(size)
    ack = bytearray(1)
    for p in range(passes + 1):
        k = max(1, n // 8) if p == 0 else n
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(k):
            if me == 0:
                comm.Send(buf, dest=1, tag=0)
            elif me == 1:
                comm.Recv(buf, source=0, tag=0)
        if me == 1:
            comm.Send(ack, dest=0, tag=1)
        elif me == 0:
            comm.Recv(ack, source=1, tag=1)
        secs = time.perf_counter() - t0
        if me == 0 and p > 0:
            out(case="p2p", size=size, n=n, secs=secs,
                mb_per_s=n * size / secs / 1e6, ranks=comm.Get_size())
    if me == 1 and buf[-1] != 7:
        raise SystemExit("p2p: wrong bytes")


def probe():
    have = {"python": sys.version.split()[0], "executable": sys.executable}
    for name in ("gpupool", "mpi4py", "numpy"):
        try:
            m = __import__(name)
            have[name] = getattr(m, "__version__", "?")
            have[name + "_file"] = m.__file__
        except Exception:
            have[name] = None
    if have["gpupool"]:
        d = os.path.dirname(have["gpupool_file"])
        have["mpiproc"] = os.access(os.path.join(d, "_mpiproc"), os.X_OK)
        have["main"] = os.path.exists(os.path.join(d, "__main__.py"))
    out(**have)


def main(argv):
    what = argv[1] if len(argv) > 1 else None
    kinds = lambda s: [k for k in s.split(",") if k]  # noqa: E731
    if what == "gpupool":
        run_gpupool(int(argv[2]), int(argv[3]), int(argv[4]),
                    kinds(argv[5]))
    elif what == "futures":
        run_futures(int(argv[2]), int(argv[3]), int(argv[4]), int(argv[5]),
                    kinds(argv[6]), [x if x == "auto" else int(x)
                                     for x in argv[7].split(",")])
    elif what == "p2p":
        run_p2p(int(argv[2]), int(argv[3]), int(argv[4]))
    elif what == "probe":
        probe()
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
