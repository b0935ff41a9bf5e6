"""gpupool: long-lived worker processes pinned one per GPU (or per_gpu per
GPU), over libgpupool.

    import gpupool
    with gpupool.Pool(initializer=load_model) as pool:
        for r in pool.imap_unordered(score, batches):
            ...
    gpupool.map(abs, [-1, -2])          # a default pool: every GPU found
    gpupool.claim()     # a script that is not a pool: waits for a GPU
    with gpupool.Executor(max_workers=4) as ex:   # concurrent.futures
        print(ex.submit(pow, 2, 8).result())

The pool is libgpupool's C pool (extension module gpupool._gpupool); this
package adds pickling, chunking, errors as Python exceptions, streaming and
futures. See docs/python.md.
"""

import atexit
import importlib
import os
import threading

from . import _gpupool

# The rest is imported on first use (PEP 562): a worker that starts clean
# imports this package to run its items, and needs none of the caller's
# side; it halves such a worker's start-up.
_LAZY = {"AsyncResult": "_async", "Executor": "_executor",
         "GpuState": "_pool", "Pool": "_pool", "WorkerInfo": "_pool",
         "current": "_pool"}
_LAZY.update(dict.fromkeys(("Canceled", "EncodingError", "Error",
                            "InitError", "NotRun", "PoolError", "RankLost",
                            "RemoteTraceback", "Timeout", "WorkerCrashed"),
                           "_errors"))
_LAZY.update(dict.fromkeys(("Checkpoint", "CheckpointError",
                            "CheckpointWarning"), "_checkpoint"))
_LAZY.update(dict.fromkeys(("claim", "claims", "Claim", "ClaimInfo"),
                           "_claims"))


def __getattr__(name):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError("module 'gpupool' has no attribute %r" % name)
    value = getattr(importlib.import_module("." + mod, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))

__all__ = [
    "Pool", "Executor", "AsyncResult", "WorkerInfo", "GpuState", "current",
    "map", "imap", "imap_unordered", "submit", "shutdown", "Error",
    "WorkerCrashed", "Timeout", "Canceled", "NotRun", "PoolError", "RankLost",
    "EncodingError", "InitError", "RemoteTraceback", "Checkpoint",
    "CheckpointError", "CheckpointWarning", "claim", "claims", "Claim",
    "ClaimInfo",
]

_default = None
_default_lock = threading.Lock()


def _default_in_child():
    """A fork makes its own default pool on first use: the parent's is
    the parent's (and its lock may have been held by another thread)."""
    global _default, _default_lock
    _default = None
    _default_lock = threading.Lock()


os.register_at_fork(after_in_child=_default_in_child)


def _default_pool():
    """The module-level pool: every GPU found (or GPUPOOL_FAKE_GPUS fake
    ones), created on first use, stopped at interpreter exit. The first
    call forks: make it before starting threads or initialising CUDA."""
    global _default
    with _default_lock:
        if _default is None:
            from ._pool import Pool
            _default = Pool()
            atexit.register(shutdown)
        return _default


def shutdown():
    """Stop the default pool now (a later module-level call makes a new
    one). Registered with atexit."""
    global _default
    with _default_lock:
        p, _default = _default, None
    if p is not None:
        p.terminate()


def map(fn, iterable, chunksize=None, **kw):
    """Pool.map on the default pool."""
    return _default_pool().map(fn, iterable, chunksize, **kw)


def imap(fn, iterable, chunksize=None, **kw):
    """Pool.imap on the default pool."""
    return _default_pool().imap(fn, iterable, chunksize, **kw)


def imap_unordered(fn, iterable, chunksize=None, **kw):
    """Pool.imap_unordered on the default pool."""
    return _default_pool().imap_unordered(fn, iterable, chunksize, **kw)


def submit(fn, /, *args, **kwargs):
    """Pool.submit on the default pool."""
    return _default_pool().submit(fn, *args, **kwargs)


OK = _gpupool.OK
FAILED = _gpupool.FAILED
CRASHED = _gpupool.CRASHED
TIMEDOUT = _gpupool.TIMEDOUT
CANCELED = _gpupool.CANCELED
ERROR = _gpupool.ERROR
NOTRUN = _gpupool.NOTRUN
strerror = _gpupool.strerror
