#!/usr/bin/env python3
"""The Python package gpupool against Python's process pools, for the
benchmark harness's `python` section. One measurement per call, one JSON
line out. Run with an interpreter that can import gpupool (the harness
installs the package from this tree into a venv).

    python3 py_gpupool.py peers                  which optional peers import
    python3 py_gpupool.py trivial IMPL N         x * 2 on the ints 0..N-1
    python3 py_gpupool.py roundtrip IMPL N       N sequential one-item calls
    python3 py_gpupool.py warm IMPL TASKS SETUP WORK [GPUPOOL_RUN]
    python3 py_gpupool.py payload IMPL KIND SIZE N  echo N items of SIZE B
    python3 py_gpupool.py start IMPL IMPORT      a pool's start-up, first item
    python3 py_gpupool.py checkpoint KIND IMPL N    a map with checkpoint=

Always 4 workers (gpupool: 4 fake GPUs). For trivial and roundtrip the pool
is created and warmed up before the clock starts (startup_s says what that
took); results are checked.

trivial IMPL: gpupool (gpupool.Pool.map, default chunks), map
    (multiprocessing.Pool.map, default chunks: len / (4 x workers)), ppe
    (ProcessPoolExecutor.map, chunksize=1000: its default of 1 sends one
    item a message, so people pass a large round chunksize, as its docs
    advise), loky (get_reusable_executor(4).map, chunksize=1000, as ppe),
    mpire (WorkerPool(4).map, its default chunks).
roundtrip IMPL: gpupool (Pool.submit(f, x).result()), gpupool-map1
    (Pool.map(f, [x])), ppe (submit(f, x).result()), apply
    (multiprocessing.Pool.apply(f, (x,))), loky (submit(...).result()),
    mpire (WorkerPool.apply(f, (x,))). caller_cpu_us, worker_cpu_us:
    CPU per round trip of this process (every thread) and of all its
    descendants (the workers, summed), from the kernel's per-thread
    run time (/proc/PID/task/*/sched) before and after the loop;
    processes: how many descendants; cpus: the CPUs this process and
    they may run on (one under the harness's pinned variant); aslr:
    whether its addresses are randomized (false under setarch -R, the
    pinned variant's gpupool-clean-norand row: a clean worker's code
    then lies at the caller's addresses, as a forked one's does).
    In both, gpupool-clean is gpupool with workers that start clean
    (start_method="spawn"); gpupool's own rows fork (start_method="fork").
start IMPL IMPORT: the caller imports IMPORT first (none; numpy, with a
    matrix product, so OpenBLAS has started its threads; jax, with one
    computation, so XLA runs), then the clock: startup_s is the pool's
    creation (gpupool: every worker ready), first_s from before it to the
    first result of submit(f, 1) (what a user waits for). IMPL:
    gpupool-fork, gpupool-clean (start_method fork, spawn), loky
    (get_reusable_executor(4), which execs its workers).
payload IMPL KIND: gpupool (gpupool.Pool.map) or map
    (multiprocessing.Pool.map), default chunks both, echoing N distinct
    items of SIZE bytes each: KIND bytes, or numpy (uint8 arrays; pickle
    protocol 5 hands their memory out of band). Pool created and warmed
    up before the clock, items made before it; every result checked
    after it. mb_per_s: item bytes a second (10^6 B), each way.
checkpoint KIND IMPL: the cost of map(..., checkpoint=PATH), PATH a new
    file in a fresh directory of TMPDIR. KIND trivial: x * 2 on N ints,
    default chunks; ms: time.sleep(0.001) on N items, default chunks; ms1:
    the same, chunksize=1 (a record per item); IMPL plain (no checkpoint),
    ckpt (a new checkpoint: every chunk recorded), resume (trivial only:
    the checkpoint written by an untimed map first, then the timed map
    reads every result from it and runs nothing), mp
    (multiprocessing.Pool(4).map, no checkpoint). KIND read1, IMPL resume:
    a checkpoint of N records of one item each, written untimed by the
    checkpoint's own writer as a map with chunksize=1 would (each record
    what a worker answers for one item), then the timed map reads them.
    rss_growth_mib: the process's peak RSS growth over the timed call
    (what the returned list and its reading took).
warm IMPL: TASKS tasks on 4 slots, each needing a set-up SETUP (a module
    to import, e.g. scipy.stats: a real heavy import, standing for `import
    torch` + a CUDA context; or a number: seconds of sleep) and then WORK
    seconds of work (a sleep). setup_s: one set-up's cost (the import
    timed in a fresh interpreter). The clock runs from before anything is
    created to after everything is reaped: what a user's script costs.
    pool: gpupool.Pool(fake_gpus=4, initializer=setup).map(work, tasks,
        chunksize=1): set-up once per worker; one task a message, as for
        any long task (examples/python_sweep.py's imap_unordered does the
        same); default chunks (len / 16) would add their imbalance (100
        tasks: 15 chunks of 7 on 4 workers, 0.3 s here).
    run: gpupool-run --fake-gpus 4 --quiet FILE, one `python3 -c` per task
        doing set-up then work (GPUPOOL_RUN: the binary).
    semaphore: a multiprocessing.Process per task, all started at once,
        each entering a Semaphore(4), popping a free GPU id from a
        Manager().list(), doing set-up then work, giving the id back.
"""
import concurrent.futures as cf
import json
import multiprocessing as mp
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

WORKERS = 4
PPE_CHUNK = 1000


def twice(x):
    return x * 2


def ident(x):
    return x


def setup(spec):
    """A worker's (or a task's) set-up: import the module spec names (a
    real heavy import, as import torch + a CUDA context is), or sleep
    spec seconds standing for one."""
    if isinstance(spec, str):
        __import__(spec)
    else:
        time.sleep(spec)


def setup_cost(spec):
    """What one set-up costs: an import timed in a fresh interpreter
    (this one must not import it: the workers fork from it)."""
    if not isinstance(spec, str):
        return spec
    code = ("import time; t = time.perf_counter(); import %s; "
            "print(time.perf_counter() - t)" % spec)
    return float(subprocess.run([sys.executable, "-c", code], check=True,
                                capture_output=True, text=True).stdout)


def work(secs):
    time.sleep(secs)
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def out(**kw):
    print(json.dumps(kw), flush=True)


def peers():
    have = {}
    for name in ("loky", "mpire", "cloudpickle", "numpy", "scipy"):
        try:
            m = __import__(name)
            have[name] = getattr(m, "__version__", "?")
        except Exception:
            have[name] = None
    import gpupool
    import sysconfig
    out(python=sys.version.split()[0], executable=sys.executable,
        libpython_shared=bool(sysconfig.get_config_var("Py_ENABLE_SHARED")),
        gpupool_file=gpupool.__file__,
        gpupool_version=getattr(gpupool, "__version__", None), **have)


def make(impl):
    """(pool, map(fn, items), one(fn, x), close())"""
    if impl.startswith("gpupool"):
        import gpupool
        p = gpupool.Pool(fake_gpus=WORKERS, start_method="spawn" if
                         impl.startswith("gpupool-clean") else "fork")
        return (lambda f, xs: p.map(f, xs),
                lambda f, x: p.submit(f, x).result(),
                lambda f, x: p.map(f, [x])[0],
                p.close)
    if impl in ("map", "apply"):
        p = mp.Pool(processes=WORKERS)
        return (lambda f, xs: p.map(f, xs),
                lambda f, x: p.apply(f, (x,)), None,
                lambda: (p.close(), p.join()))
    if impl == "ppe":
        p = cf.ProcessPoolExecutor(max_workers=WORKERS)
        return (lambda f, xs: list(p.map(f, xs, chunksize=PPE_CHUNK)),
                lambda f, x: p.submit(f, x).result(), None,
                p.shutdown)
    if impl == "loky":
        import loky
        p = loky.get_reusable_executor(max_workers=WORKERS)
        return (lambda f, xs: list(p.map(f, xs, chunksize=PPE_CHUNK)),
                lambda f, x: p.submit(f, x).result(), None,
                p.shutdown)
    if impl == "mpire":
        import mpire
        p = mpire.WorkerPool(n_jobs=WORKERS)
        return (lambda f, xs: p.map(f, xs),
                lambda f, x: p.apply(f, (x,)), None,
                p.terminate)
    raise SystemExit("unknown IMPL " + impl)


def trivial(impl, n):
    t0 = time.perf_counter()
    mapf, _, _, close = make(impl)
    mapf(twice, range(64))
    startup = time.perf_counter() - t0
    items = list(range(n))
    t0 = time.perf_counter()
    r = mapf(twice, items)
    secs = time.perf_counter() - t0
    close()
    if r != [x * 2 for x in items]:
        raise SystemExit("%s: wrong results" % impl)
    out(impl=impl, n=n, secs=secs, items_per_s=n / secs, startup_s=startup)


def descendants():
    """The pids of this process's descendants: its pool's workers,
    whoever started them (and any helper process the pool keeps)."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone, or not ours to read
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [os.getpid()]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def cpu_ns(pid):
    """CPU time of pid's live threads, ns: the sum of their
    se.sum_exec_runtime in /proc/PID/task/*/sched (ms, 6 decimals), or
    of schedstat's first field where the kernel has no sched file;
    None when the process is gone."""
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return None
    t = 0.0
    for tid in tids:
        base = "/proc/%d/task/%s/" % (pid, tid)
        try:
            with open(base + "sched") as f:
                t += next(float(x.split(":")[1]) * 1e6 for x in f
                          if x.startswith("se.sum_exec_runtime"))
        except (OSError, StopIteration, ValueError):
            try:
                with open(base + "schedstat") as f:
                    t += float(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass  # a thread that ended
    return t


def roundtrip(impl, n):
    """n sequential round trips; with the CPU each took in this process
    (all its threads: the caller) and in its descendants (the
    workers), read before and after the loop."""
    t0 = time.perf_counter()
    mapf, one, one_map, close = make(impl)
    call = one_map if impl == "gpupool-map1" else one
    for x in range(32):
        call(ident, x)
    startup = time.perf_counter() - t0
    kids = descendants()
    cpus = set(os.sched_getaffinity(0))
    for k in kids:
        try:
            cpus |= os.sched_getaffinity(k)
        except OSError:
            pass
    before = [cpu_ns(k) for k in kids] + [cpu_ns(os.getpid())]
    bad = 0
    t0 = time.perf_counter()
    for x in range(n):
        bad += call(ident, x) != x
    secs = time.perf_counter() - t0
    after = [cpu_ns(os.getpid())] + [cpu_ns(k) for k in kids]
    close()
    if bad:
        raise SystemExit("%s: %d wrong results" % (impl, bad))
    caller = (after[0] - before[-1]) / n / 1e3
    work = sum(b - a for a, b in zip(before, after[1:])
               if a is not None and b is not None) / n / 1e3
    out(impl=impl, n=n, secs=secs, us=secs / n * 1e6, per_s=n / secs,
        startup_s=startup, caller_cpu_us=caller, worker_cpu_us=work,
        processes=len(kids), cpus=sorted(cpus), aslr=aslr())


def aslr():
    """Whether this process's address space is randomized (no
    ADDR_NO_RANDOMIZE in its personality, as setarch -R sets)."""
    try:
        with open("/proc/self/personality") as f:
            return not int(f.read(), 16) & 0x0040000
    except (OSError, ValueError):
        return None


def payload(impl, kind, size, n):
    if kind == "numpy":
        import numpy  # before the workers fork, as a user's script does
    t0 = time.perf_counter()
    mapf, _, _, close = make(impl)
    mapf(ident, range(64))
    startup = time.perf_counter() - t0
    base = bytes((i * 7 + 1) & 0xff for i in range(256)) * (size // 256 + 1)
    # Distinct objects, each unlike the others (pickle's memo sends a
    # repeated object once a chunk, which no real workload gets).
    items = [bytes([i & 0xff]) + base[1:size] for i in range(n)]
    if kind == "numpy":
        items = [numpy.frombuffer(b, dtype=numpy.uint8).copy()
                 for b in items]
    t0 = time.perf_counter()
    r = mapf(ident, items)
    secs = time.perf_counter() - t0
    close()
    same = (lambda a, b: a.tobytes() == b.tobytes()) if kind == "numpy" \
        else (lambda a, b: a == b)
    if len(r) != n or not all(same(a, b) for a, b in zip(r, items)):
        raise SystemExit("%s: wrong results" % impl)
    out(impl=impl, kind=kind, size=size, n=n, secs=secs,
        mb_per_s=n * size / secs / 1e6, startup_s=startup)


def start(impl, imp):
    if imp == "numpy":
        import numpy
        numpy.ones((256, 256)) @ numpy.ones((256, 256))
    elif imp == "jax":
        os.environ["JAX_PLATFORMS"] = "cpu"
        import jax.numpy as jnp
        float(jnp.ones(4).sum())
    t0 = time.perf_counter()
    if impl.startswith("gpupool"):
        import gpupool
        p = gpupool.Pool(fake_gpus=WORKERS, start_method="spawn" if
                         impl == "gpupool-clean" else "fork")
        close = p.close
    elif impl == "loky":
        import loky
        p = loky.get_reusable_executor(max_workers=WORKERS)
        close = p.shutdown
    else:
        raise SystemExit("unknown IMPL " + impl)
    t1 = time.perf_counter()
    r = p.submit(ident, 1).result()
    t2 = time.perf_counter()
    close()
    if r != 1:
        raise SystemExit("%s: wrong result" % impl)
    out(impl=impl, imported=imp, startup_s=t1 - t0, first_s=t2 - t0)


def nap(x):
    time.sleep(0.001)
    return x


def _one_item_records(path, n):
    """What a map of twice with chunksize=1 leaves: n records, item i's
    answer as its worker sends it."""
    import threading
    from gpupool import _checkpoint, _gpupool, _task
    f = _checkpoint._File(_checkpoint.Checkpoint(path, sync=None),
                          _checkpoint.fn_identity(twice))
    stop = threading.Event()
    for i in range(n):
        f.record(i, 1, _checkpoint.digest([i]), _gpupool.OK, 0,
                 _task._dumps(([twice(i)], None)), stop)
    f.close()


def checkpoint(kind, impl, n):
    import gpupool
    fn = twice if kind in ("trivial", "read1") else nap
    cs = 1 if kind in ("ms1", "read1") else None
    items = list(range(n))
    d = tempfile.mkdtemp(prefix="gpupool-bench-ck-")
    path = os.path.join(d, "ck")
    if impl == "resume":
        # Written by a child, so that what it took is not in our heap.
        pid = os.fork()
        if pid == 0:
            try:
                if kind == "read1":
                    _one_item_records(path, n)
                else:
                    with gpupool.Pool(fake_gpus=WORKERS) as w:
                        w.map(fn, items, cs, checkpoint=path)
            finally:
                os._exit(0)
        if os.waitpid(pid, 0)[1] != 0 or not os.path.exists(path):
            raise SystemExit("checkpoint %s: writing it failed" % kind)
    t0 = time.perf_counter()
    if impl == "mp":
        p = mp.Pool(WORKERS)
    else:
        p = gpupool.Pool(fake_gpus=WORKERS)
    p.map(twice, range(64))
    startup = time.perf_counter() - t0
    kw = {} if impl in ("plain", "mp") else {"checkpoint": path}
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    r = p.map(fn, items, cs, **kw)
    secs = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0
    size = os.path.getsize(path) if os.path.exists(path) else 0
    p.close()
    p.join()
    shutil.rmtree(d)
    if r != ([x * 2 for x in items] if fn is twice else items):
        raise SystemExit("checkpoint %s %s: wrong results" % (kind, impl))
    out(kind=kind, impl=impl, n=n, secs=secs, items_per_s=n / secs,
        startup_s=startup, rss_growth_mib=rss / 1024, file_bytes=size)


def sem_task(i, s, w, sem, free):
    with sem:
        gpu = free.pop()
        try:
            os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
            setup(s)
            work(w)
        finally:
            free.append(gpu)


def warm(impl, tasks, s, w, gpr=None):
    ideal = tasks * w / WORKERS
    cost = setup_cost(s)
    if impl == "pool":
        import gpupool
        t0 = time.perf_counter()
        with gpupool.Pool(fake_gpus=WORKERS, initializer=setup,
                          initargs=(s,)) as p:
            r = p.map(work, [w] * tasks, chunksize=1)
        wall = time.perf_counter() - t0
        if len(r) != tasks or None in r:
            raise SystemExit("pool: wrong results")
    elif impl == "run":
        code = "import time; %s; time.sleep(%r)" % (
            "import " + s if isinstance(s, str) else "time.sleep(%r)" % s,
            w)
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
            for _ in range(tasks):
                f.write("%s -c '%s'\n" % (sys.executable, code))
            f.flush()
            t0 = time.perf_counter()
            rc = subprocess.run([gpr, "--fake-gpus", str(WORKERS),
                                 "--quiet", f.name]).returncode
            wall = time.perf_counter() - t0
        if rc != 0:
            raise SystemExit("gpupool-run: exit %d" % rc)
    elif impl == "semaphore":
        t0 = time.perf_counter()
        sem = mp.Semaphore(WORKERS)
        with mp.Manager() as manager:
            free = manager.list(range(WORKERS))
            procs = [mp.Process(target=sem_task, args=(i, s, w, sem, free))
                     for i in range(tasks)]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
        wall = time.perf_counter() - t0
        bad = [p.exitcode for p in procs if p.exitcode != 0]
        if bad:
            raise SystemExit("semaphore: %d tasks failed" % len(bad))
    else:
        raise SystemExit("unknown IMPL " + impl)
    out(impl=impl, tasks=tasks, setup=s, setup_s=cost, work_s=w, wall_s=wall,
        ideal_s=ideal, overhead_s=wall - ideal)


def main(argv):
    what = argv[1]
    if what == "peers":
        peers()
    elif what == "trivial":
        trivial(argv[2], int(argv[3]))
    elif what == "roundtrip":
        roundtrip(argv[2], int(argv[3]))
    elif what == "start":
        start(argv[2], argv[3])
    elif what == "payload":
        payload(argv[2], argv[3], int(argv[4]), int(argv[5]))
    elif what == "checkpoint":
        checkpoint(argv[2], argv[3], int(argv[4]))
    elif what == "warm":
        try:
            spec = float(argv[4])
        except ValueError:
            spec = argv[4]  # a module to import
        warm(argv[2], int(argv[3]), spec, float(argv[5]),
             argv[6] if len(argv) > 6 else None)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
