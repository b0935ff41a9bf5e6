#!/usr/bin/env python3
"""joblib's Parallel on gpupool's backend and on loky, for the benchmark
harness's `integrations` section. One measurement per call, one JSON line
out. Run with an interpreter that has joblib (and gpupool.joblib for the
gpupool rows).

    python3 py_joblib.py probe                       what imports
    python3 py_joblib.py run BACKEND WORK N CALLS    CALLS timed calls

run: `Parallel(n_jobs=4)` inside `parallel_config(backend=BACKEND)`:
    gpupool (`import gpupool.joblib` registers it; 4 fake GPUs through
    GPUPOOL_FAKE_GPUS=4, set here before gpupool is imported) or loky
    (joblib's default backend: its own copy, joblib.externals.loky). Each
    call is `Parallel(n_jobs=4)(delayed(f)(i) for i in range(N))` with
    joblib's automatic batching. A first call of 100 items starts the
    workers (startup_s); then CALLS calls are timed one by one (their
    median is the figure, min beside it) and each call's results are
    checked. WORK:
    trivial: f returns its argument.
    ms: f sleeps 1 ms (time.sleep(0.001)), then returns its argument. A
        sleep rather than a busy loop, so that 4 workers can run 4 items
        at once whatever the machine's number of cores: on 2 cores a busy
        loop would measure the cores, not the backend.
"""
import json
import os
import statistics
import sys
import time

WORKERS = 4


def trivial(x):
    return x


def one_ms(x):
    time.sleep(0.001)
    return x


WORK = {"trivial": trivial, "ms": one_ms}


def probe():
    """joblib's version, its loky's, and whether gpupool.joblib imports
    (and from where)."""
    out = {"joblib": None, "loky": None, "gpupool_joblib": None}
    try:
        import joblib
        out["joblib"] = joblib.__version__
        from joblib.externals import loky
        out["loky"] = loky.__version__
    except ImportError:
        pass
    if out["joblib"]:
        try:
            import gpupool.joblib
            out["gpupool_joblib"] = gpupool.joblib.__file__
        except ImportError as e:
            out["gpupool_joblib_error"] = str(e)
    print(json.dumps(out))


def run(backend, work, n, calls):
    if backend == "gpupool":
        os.environ["GPUPOOL_FAKE_GPUS"] = str(WORKERS)
        import gpupool.joblib  # noqa: F401  (registers "gpupool")
    from joblib import Parallel, delayed, parallel_config
    f = WORK[work]
    want = list(range(n))
    secs = []
    with parallel_config(backend=backend, n_jobs=WORKERS):
        t = time.perf_counter()
        Parallel()(delayed(f)(i) for i in range(100))
        startup_s = time.perf_counter() - t
        for _ in range(calls):
            t = time.perf_counter()
            r = Parallel()(delayed(f)(i) for i in want)
            secs.append(time.perf_counter() - t)
            if r != want:
                sys.exit("%s: wrong results" % backend)
    s = statistics.median(secs)
    print(json.dumps({"backend": backend, "work": work, "n": n,
                      "calls": calls, "secs": s, "min_s": min(secs),
                      "items_per_s": n / s, "startup_s": startup_s}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["probe"]:
        probe()
    elif len(sys.argv) == 6 and sys.argv[1] == "run" and \
            sys.argv[2] in ("gpupool", "loky") and sys.argv[3] in WORK:
        run(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit(__doc__)
