#!/usr/bin/env python3
"""A Hydra sweep of short jobs through one launcher, for the benchmark
harness's `integrations` section. One sweep per call, one JSON line out.
Run with an interpreter that has hydra-core and the launcher.

    python3 py_hydra.py probe                  which launchers import
    python3 py_hydra.py run LAUNCHER N DIR     a sweep of N jobs into DIR

run: this file is itself the @hydra.main app (no config file), started as
    `py_hydra.py -m <the launcher's overrides> +x=range(0,N)
    hydra.sweep.dir=DIR hydra/job_logging=disabled
    hydra/hydra_logging=disabled`. Each job returns at once, with its x,
    its CUDA_VISIBLE_DEVICES and its pid. LAUNCHER:
    gpupool: hydra/launcher=gpupool hydra.launcher.fake_gpus=4
    joblib:  hydra/launcher=joblib hydra.launcher.n_jobs=4 (loky, 4 workers)
launch_s: the time inside the launcher's launch(), every job of the sweep
    in one call: its workers' start, every job's run and its JobReturn
    back. It is timed by wrapping `hydra_plugins.<pkg>._core.launch`, which
    the launcher's launch() looks up at each call. Hydra never re-executes
    a `_` module when it scans its plugins (it re-executes the public ones),
    so the wrapper stays in place. Before launch(), Hydra spends about 40 ms
    a job in the parent (BasicSweeper checks each job's config). That cost
    is the same for every launcher, so it is not counted: it is in
    sweep_s, the time of the whole @hydra.main call.
The sweep is checked after the clock stops: N JobReturns, all COMPLETED,
their x in order, N job directories in DIR.
"""
import importlib
import importlib.util
import json
import os
import sys
import time

WORKERS = 4
LAUNCHERS = {
    "gpupool": ("hydra_plugins.hydra_gpupool_launcher",
                ["hydra/launcher=gpupool",
                 "hydra.launcher.fake_gpus=%d" % WORKERS]),
    "joblib": ("hydra_plugins.hydra_joblib_launcher",
               ["hydra/launcher=joblib", "hydra.launcher.n_jobs=%d" % WORKERS]),
}


def probe():
    """hydra-core's version and, for each launcher, where its package lies
    (None: not installed)."""
    out = {"hydra": None}
    try:
        import hydra
        out["hydra"] = hydra.__version__
    except ImportError:
        pass
    for name, (pkg, _) in LAUNCHERS.items():
        try:
            spec = importlib.util.find_spec(pkg)
        except ImportError:
            spec = None
        out[name] = spec and (spec.origin or list(
            spec.submodule_search_locations)[0])
    try:
        import hydra_plugins.hydra_joblib_launcher as j
        out["joblib_launcher_version"] = j.__version__
    except (ImportError, AttributeError):
        pass
    print(json.dumps(out))


CALLS = []   # (seconds, the returns) of each launch()


def timed(core):
    """Wraps core.launch with a timer."""
    orig = core.launch

    def launch(*a, **k):
        t = time.perf_counter()
        r = orig(*a, **k)
        CALLS.append((time.perf_counter() - t, r))
        return r
    core.launch = launch


def run(launcher, n, sweep_dir):
    import hydra
    from hydra.core.utils import JobStatus
    pkg, overrides = LAUNCHERS[launcher]
    timed(importlib.import_module(pkg + "._core"))

    @hydra.main(version_base=None, config_path=None)
    def app(cfg):
        return (cfg.x, os.environ.get("CUDA_VISIBLE_DEVICES"), os.getpid())

    sys.argv = [sys.argv[0], "-m"] + overrides + [
        "+x=range(0,%d)" % n, "hydra.sweep.dir=%s" % sweep_dir,
        "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"]
    t = time.perf_counter()
    app()
    sweep_s = time.perf_counter() - t
    if len(CALLS) != 1:
        sys.exit("%d launch() calls, expected 1" % len(CALLS))
    launch_s, rets = CALLS[0]
    bad = [r for r in rets if r.status != JobStatus.COMPLETED]
    if len(rets) != n or bad:
        sys.exit("%d JobReturns, %d not COMPLETED%s" % (
            len(rets), len(bad), bad and ": %r" % bad[0]._return_value))
    vals = [r.return_value for r in rets]
    if [v[0] for v in vals] != list(range(n)):
        sys.exit("the jobs' x are not 0..%d in order" % (n - 1))
    dirs = sum(1 for d in os.listdir(sweep_dir) if d.isdigit())
    if dirs != n:
        sys.exit("%d job directories in %s, expected %d" % (dirs, sweep_dir,
                                                            n))
    print(json.dumps({
        "launcher": launcher, "n": n, "launch_s": launch_s,
        "per_job_ms": launch_s / n * 1e3, "sweep_s": sweep_s,
        "workers": len({v[2] for v in vals}),
        "gpus": sorted({v[1] for v in vals if v[1] is not None})}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["probe"]:
        probe()
    elif len(sys.argv) == 5 and sys.argv[1] == "run" and \
            sys.argv[2] in LAUNCHERS:
        run(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(__doc__)
