"""gpupool.Executor: a concurrent.futures.Executor over a gpupool.Pool.

ProcessPoolExecutor's surface: Executor(max_workers, mp_context,
initializer, initargs, *, max_tasks_per_child, ...gpupool's keywords),
submit(fn, /, *args, **kwargs), map(fn, *iterables, timeout, chunksize)
(every call submitted at once, results yielded lazily, the timeout
counted from the call), shutdown(wait, *, cancel_futures). What it adds:
the pool's GPUs (pool, info(), gpus()), and a crash fails only its own
future (WorkerCrashed, a BrokenProcessPool) instead of breaking the
executor.
"""

import threading
import time
from concurrent import futures

from . import _jobs
from ._pool import Pool
from ._task import _Star


class Executor(futures.Executor):
    """max_workers: workers, spread over the GPUs as Pool's processes
    (None: one per GPU, times per_gpu). mp_context: a multiprocessing
    context (its start method: fork, or spawn / forkserver for workers
    that start clean) or None (Pool's choice). Any other keyword is
    Pool's (gpus=, fake_gpus=, per_gpu=, start_method=, timeout=, ...)."""

    def __init__(self, max_workers=None, mp_context=None, initializer=None,
                 initargs=(), *, max_tasks_per_child=None, **pool_kw):
        if max_workers is not None and (
                not isinstance(max_workers, int) or max_workers <= 0):
            raise ValueError("max_workers must be greater than 0")
        self._pool = Pool(max_workers, initializer, initargs,
                          max_tasks_per_child, mp_context, **pool_kw)
        self._lock = threading.Lock()
        self._shutdown = False

    @property
    def pool(self):
        """The gpupool.Pool underneath (info(), gpus(), map(), imap())."""
        return self._pool

    def info(self):
        """Where each worker runs (Pool.info())."""
        return self._pool.info()

    def gpus(self):
        """Each GPU's state (Pool.gpus())."""
        return self._pool.gpus()

    def submit(self, fn, /, *args, **kwargs):
        self._pool._check_mine()  # before a lock a fork may hold
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after "
                                   "shutdown")
            return self._pool.submit(fn, *args, **kwargs)

    def map(self, fn, *iterables, timeout=None, chunksize=1):
        """fn(*args) for args in zip(*iterables), each chunk of chunksize
        calls one item in a worker. Everything is submitted now; the
        results come in order as they are read. Past timeout seconds
        (from this call) the next read raises TimeoutError; leaving the
        loop early, or a failure, cancels the calls not started."""
        self._pool._check_mine()
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        end = None if timeout is None else timeout + time.monotonic()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after "
                                   "shutdown")
            futs, _ = self._pool._submit_chunks(
                _Star(fn), list(zip(*iterables)), chunksize)
        return _results(futs, end)

    def shutdown(self, wait=True, *, cancel_futures=False):
        """No new calls. cancel_futures: the calls not started are
        canceled (cancelled() is True). wait: return once the others have
        ended and the workers are stopped (but at once in a future's done
        callback, which runs in a thread the stop waits for: the stop
        then goes on in a thread of its own); else at once (they are
        stopped when the last call ends, or at interpreter exit). In a
        fork of the process that made it: nothing (its pool is the
        parent's, Pool._mine())."""
        if not self._pool._mine():
            return
        with self._lock:
            self._shutdown = True
        pool = self._pool
        if cancel_futures:
            with pool._lk:
                queued = pool._subq.take()
            _jobs.cancel(queued)
        pool.close()
        if wait:
            pool.join()  # in a done callback: handed over (Pool.join)
        else:
            pool._hand_over(pool.join)


    def __del__(self):
        """Collected without shutdown(): as shutdown(wait=False), as
        ProcessPoolExecutor does (what was submitted still runs)."""
        if not getattr(self, "_shutdown", True):
            try:
                self.shutdown(wait=False)
            except Exception:
                pass


def _results(futs, end):
    """The lazy half of map(). Holds no result after yielding it (a
    caller's weak reference sees it go), and cancels what is left when
    it ends early."""
    try:
        futs.reverse()
        while futs:
            fut = futs.pop()
            try:
                left = None if end is None else end - time.monotonic()
                outs = fut.result(left)
            except BaseException:
                fut.cancel()
                raise
            del fut
            outs.reverse()
            while outs:
                if outs[-1][0] == "err":
                    raise outs.pop()[1]
                yield outs.pop()[1]
    finally:
        for fut in futs:
            fut.cancel()
