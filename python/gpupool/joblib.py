"""gpupool as a joblib backend: Parallel's items run on gpupool's pinned
workers, one GPU each (docs/python.md, "joblib").

    import gpupool.joblib                   # registers "gpupool"
    with joblib.parallel_config(backend="gpupool", n_jobs=4):
        Parallel()(delayed(f)(x) for x in xs)

scikit-learn's n_jobs goes through the same backend. Keywords given to
parallel_config(backend="gpupool", **kw) are gpupool.Pool's (gpus=,
per_gpu=, timeout=, retries=, initializer=, fake_gpus=, ...), plus
idle_timeout= (seconds an unused pool is kept; default 300, None: until
exit). Needs joblib 1.5 or later (its submit/retrieve_result_callback
API); `import gpupool` never imports this module, nor joblib.

n_jobs counts workers of a pool of every GPU (x per_gpu): None or -1 all
of them, -2 all but one, ..., and a positive n at most n items at once,
never more than there are workers (n_jobs=16 on 4 GPUs is 4: one item per
GPU; per_gpu=4 asks for more). Pools are kept between calls, as loky
keeps its executor; an abort (the first error, joblib's timeout, a
generator closed early) stops the call's running items with their pool.
"""

import math
import os
import threading

# Absolute: this module is gpupool.joblib, the package is joblib.
import joblib as _joblib
from joblib._parallel_backends import (AutoBatchingMixin, FallbackToBackend,
                                       ParallelBackendBase, SequentialBackend)
from joblib.parallel import register_parallel_backend

from . import _gpupool, _task
from ._options import _ROWS, _gpus_arg
from ._pool import Pool

if not hasattr(ParallelBackendBase, "retrieve_result_callback"):
    raise ImportError("gpupool.joblib needs joblib 1.5 or later (the "
                      "submit/retrieve_result_callback API); this is "
                      "joblib %s: pip install -U joblib"
                      % getattr(_joblib, "__version__", "?"))

__all__ = ["GpupoolBackend", "register", "shutdown"]

# What Parallel passes to every backend for loky's memmapping and its
# multiprocessing context (always mp.get_context(), fork on Linux, which
# would force fork where gpupool chooses spawn): not the pool's.
_JOBLIB_ONLY = frozenset(("max_nbytes", "mmap_mode", "temp_folder",
                          "verbose", "context"))
# Pool()'s keywords that decide how many workers it has, for a plan
# (no worker started) of its GPUs: fake_gpus and the pool options (the
# library's rows, gpus apart; a plan leaves those that act later alone).
_PLAN = ("fake_gpus",) + tuple(k for k in _ROWS if k != "gpus")
_IDLE_TIMEOUT = 300.0  # loky's idle_worker_timeout

_lock = threading.Lock()
_idle = {}      # key -> [(pool, timer)], pools no call is using
_sizes = {}     # key -> the worker count of such a pool


class _Initializer:
    """Each worker's initializer: registers the backend there (a clean
    worker has not imported this module: Parallel(backend="gpupool") in
    an item would be an invalid backend), then the user's."""

    def __init__(self, fn, args):
        self.fn, self.args = fn, tuple(args)

    def __call__(self):
        register()
        if self.fn is not None:
            self.fn(*self.args)

    def __repr__(self):
        return repr(self.fn)


def _pool_kwargs(kw):
    """The backend's keywords less joblib's own: (Pool's, idle_timeout)."""
    kw = {k: v for k, v in kw.items() if k not in _JOBLIB_ONLY}
    for name in ("processes", "max_workers"):
        if name in kw:
            raise TypeError("parallel_config(backend='gpupool', %s=...): "
                            "the worker count is n_jobs" % name)
    idle = kw.pop("idle_timeout", _IDLE_TIMEOUT)
    if idle is not None and not (isinstance(idle, (int, float)) and
                                 not isinstance(idle, bool) and idle >= 0
                                 and not math.isnan(idle)):
        raise ValueError("idle_timeout=%r: seconds (0 or more) or None"
                         % (idle,))
    return kw, idle


def _key(kw):
    env = None if "fake_gpus" in kw else os.environ.get("GPUPOOL_FAKE_GPUS")
    try:
        key = (env,) + tuple(sorted(kw.items()))
        hash(key)
    except TypeError:       # an unhashable keyword (a list of GPUs)
        key = repr((env, sorted(kw.items())))
    return key


def _gpus(kw):
    """How many GPUs (or groups of gpus_per_worker) a pool of kw has,
    without starting one."""
    key = _key(kw)
    with _lock:
        if key in _sizes:
            return _sizes[key]
    plan = _gpupool.Pool(_task.worker_entry, gpus=_gpus_arg(kw.get("gpus")),
                         plan=True, **{k: kw[k] for k in _PLAN if k in kw})
    try:
        g = len(plan.info())
    finally:
        plan.close()
    with _lock:
        _sizes[key] = g
    return g


def _count(n, kw):
    """The workers of a call of n_jobs=n (n > 0): n, at most every
    worker (the GPUs x per_gpu), and a count gpupool spreads evenly (at
    most one per GPU, or the same number on each): the largest such."""
    g = _gpus(kw)
    n = min(n, g * (kw.get("per_gpu") or 1))
    return n if n <= g else n - n % g


def _lease(n, kw):
    """An idle pool of n workers and kw, or a new one: a call has its
    pool to itself, so that an abort may stop it. Pools of one process
    never wait for each other's GPU claims (docs/python.md, "Claims")."""
    key = (n, _key(kw))
    with _lock:
        idle = _idle.get(key)
        if idle:
            pool, timer = idle.pop()
            if timer is not None:
                timer.cancel()
            return pool
    kw = dict(kw)
    kw.pop("per_gpu", None)     # n says it
    kw["initializer"] = _Initializer(kw.get("initializer"),
                                     kw.pop("initargs", ()))
    return Pool(n, **kw)


def _give_back(n, kw, pool, idle):
    if idle == 0:
        _stop(pool)
        return
    key = (n, _key(kw))
    timer = None
    if idle is not None:
        # Named gpupool-*: gpupool's fork check knows it for its own.
        timer = threading.Timer(idle, _expire, (key, pool))
        timer.name = "gpupool-joblib-idle"
        timer.daemon = True
    with _lock:
        _idle.setdefault(key, []).append((pool, timer))
    if timer is not None:
        timer.start()


def _expire(key, pool):
    with _lock:
        idle = _idle.get(key, [])
        for i, (p, _) in enumerate(idle):
            if p is pool:
                del idle[i]
                break
        else:
            return          # leased again meanwhile
    _stop(pool)


def _stop(pool):
    try:
        pool.close()
        pool.join()
    except Exception:
        pass


def shutdown():
    """Stop every pool the backend keeps for later calls now (they hold
    their GPUs' claims while kept); the next call starts new ones."""
    with _lock:
        idle = [pt for lst in _idle.values() for pt in lst]
        _idle.clear()
    for pool, timer in idle:
        if timer is not None:
            timer.cancel()
        _stop(pool)


class GpupoolBackend(AutoBatchingMixin, ParallelBackendBase):
    """joblib's backend "gpupool": each call's batches go to a
    gpupool.Pool of n_jobs workers, one per GPU (or per_gpu per GPU)."""

    supports_retrieve_callback = True
    supports_timeout = True
    supports_return_generator = True
    supports_inner_max_num_threads = False
    default_n_jobs = -1     # every worker: one per GPU (x per_gpu)

    def __init__(self, nesting_level=None, inner_max_num_threads=None,
                 **pool_kwargs):
        super().__init__(nesting_level=nesting_level,
                         inner_max_num_threads=inner_max_num_threads)
        self.pool_kwargs = pool_kwargs
        self._pool = None

    def effective_n_jobs(self, n_jobs):
        if n_jobs == 0:
            raise ValueError("n_jobs == 0 in Parallel has no meaning")
        if _gpupool.current() is not None:
            return 1    # in a worker: the item owns its GPU; no pool here
        if n_jobs is None:
            n_jobs = self.default_n_jobs
        if isinstance(n_jobs, float) and n_jobs == int(n_jobs):
            n_jobs = int(n_jobs)
        if not isinstance(n_jobs, int) or isinstance(n_jobs, bool):
            raise ValueError("n_jobs=%r: an int (-1: every worker)"
                             % (n_jobs,))
        kw = _pool_kwargs(self.pool_kwargs)[0]
        if n_jobs < 0:
            n_jobs = max(_gpus(kw) * (kw.get("per_gpu") or 1) + 1 + n_jobs,
                         1)
        return _count(n_jobs, kw)

    def configure(self, n_jobs=1, parallel=None, prefer=None, require=None,
                  **backend_kwargs):
        if _gpupool.current() is not None:
            # Inside a pinned worker: run there, one after another.
            raise FallbackToBackend(
                SequentialBackend(nesting_level=self.nesting_level))
        self.parallel = parallel
        self._kw, self._idle = _pool_kwargs({**self.pool_kwargs,
                                             **backend_kwargs})
        self._n = self.effective_n_jobs(n_jobs)
        self._pool = _lease(self._n, self._kw)
        return self._n

    def submit(self, func, callback=None):
        fut = self._pool.submit(func)
        if callback is not None:
            fut.add_done_callback(callback)
        return fut

    def retrieve_result_callback(self, out):
        # The worker's exception as it is, its __cause__ the worker's
        # traceback (gpupool.RemoteTraceback), which joblib keeps.
        return out.result()

    def abort_everything(self, ensure_ready=True):
        # Stop this call's work: queued batches canceled and running ones
        # stopped (grace, then SIGKILL) with the call's pool, not kept.
        # (Canceling a future stops only a queued batch.)
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.terminate()
        if ensure_ready:
            self._pool = _lease(self._n, self._kw)

    def terminate(self):
        # The pool goes back for the next call (loky keeps its executor).
        pool, self._pool = self._pool, None
        if pool is not None:
            _give_back(self._n, self._kw, pool, self._idle)
        self.reset_batch_stats()


def register():
    """Register "gpupool" as a joblib backend (importing gpupool.joblib
    already did): parallel_config(backend="gpupool") then selects it."""
    from joblib.parallel import BACKENDS
    if BACKENDS.get("gpupool") is not GpupoolBackend:
        register_parallel_backend("gpupool", GpupoolBackend)


register()
