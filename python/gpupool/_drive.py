"""Who runs the C pool: the runner lock and the one C call at a time that
serves a job and the submit queue (Pool._drive()), the dispatcher thread
that drives the queue when no other call runs, and a submit's future,
which drives it in the waiting thread (see _pool.py's docstring)."""

import threading
from concurrent.futures import Future

from . import _errors
from . import _gpupool
from . import _jobs


class Driver:
    """Pool's methods that drive the C pool (self._c) under
    self._runner."""

    def _acquire_runner(self):
        if self._owner == threading.get_ident():
            raise RuntimeError("gpupool: a map on this pool was started "
                               "from inside one of its own callbacks")
        with self._cv:
            self._waiting += 1
        try:
            self._runner.acquire()
        finally:
            with self._cv:
                self._waiting -= 1
        self._owner = threading.get_ident()

    def _release_runner(self):
        self._owner = None
        self._runner.release()
        with self._cv:
            self._cv.notify_all()  # a dispatcher that gave way goes on

    def _drive(self, job, serve_submits=True, locked=False):
        """One C call over job (None: submits only) and the submit queue,
        in this thread. Returns when job has nothing more to send now and
        the items in flight have ended; raises what the call raised.
        locked: the caller holds the runner lock already (it is released
        here all the same)."""
        subs = self._sub_inflight

        def send(item):
            """Count item in flight, unless terminate() came first: under
            self._cv, so that terminate() sees either no item sent after
            its stop or the count of those that were."""
            with self._cv:
                if self._stop.is_set():
                    raise _jobs.Abort(_errors.Canceled("the pool was "
                                                       "terminated"))
                self._inflight += 1
            return item

        def next_item():
            if self._refresh:
                self._refresh_pids()
            if serve_submits:
                with self._cv:  # as send(), with the pop in the same hold
                    if self._stop.is_set():
                        raise _jobs.Abort(_errors.Canceled(
                            "the pool was terminated"))
                    if job is None and self._waiting:
                        return None  # the dispatcher gives way
                    s = self._subq.next_item()
                    if s is not None:
                        self._inflight += 1
                        subs.add(s[0][0])
                        return (None, s[0]), s[1]
            if job is None:
                return None
            j = job.next_item()
            return None if j is None else send(((job, j[0]), j[1]))

        def done(key, status, code, out):
            with self._cv:
                self._inflight -= 1
            if status in (_gpupool.CRASHED, _gpupool.TIMEDOUT):
                self._refresh = True  # a replacement has a new pid
            src, k = key
            if src is None:
                subs.discard(k[0])
                _jobs.SubmitQueue.finish(k, status, code, out)
            else:
                src.finish(k, status, code, out)
            if self._stop.is_set():
                raise _jobs.Abort(_errors.Canceled("the pool was "
                                                   "terminated"))

        if not locked:
            self._acquire_runner()
        try:
            self._check_usable()
            self._c.run(next_item, done)
        except BaseException as e:
            # The call ended without done() for its items in flight (an
            # exception of a callback, Ctrl-C): their futures fail too.
            if subs:
                exc = e
                if isinstance(e, _jobs.Abort) or not isinstance(e, Exception):
                    exc = _errors.Canceled(
                        "the C call that ran it ended early (%r)"
                        % (getattr(e, "exc", e),))
                for fut in list(subs):
                    if not fut.done():
                        fut.set_exception(exc)
                subs.clear()
            raise
        finally:
            with self._cv:
                self._inflight = 0
            # A worker's pid changes only when it is replaced: after a
            # crash or timeout, or after max_tasks_per_worker items.
            if self._refresh or self._max_tasks:
                self._refresh_pids()
            self._release_runner()

    def _help(self):
        """A wait without a timeout on a submitted call (Future.result(),
        AsyncResult.get()): when no call runs, drive the submit queue in
        this thread, rather than waiting for the dispatcher thread to wake
        and do it (one thread hop each way less a round trip). Whoever
        takes the runner lock first drives; the other finds the queue
        served."""
        me = threading.get_ident()
        if self._owner == me or not self._subq.q:
            return
        if not self._runner.acquire(blocking=False):
            return
        self._owner = me
        if not self._subq.q:
            self._release_runner()
            return
        try:
            self._drive(None, locked=True)
        except _jobs.Abort:
            pass
        except Exception as e:  # the pool failed: fail the rest
            with self._cv:
                self._subq.cancel_all(e)

    def _refresh_pids(self):
        """The workers' pids, for terminate() to kill while a call runs in
        another thread (info() is not allowed then). In the driving thread
        only. Kept marked stale while a dead worker is not yet replaced
        (pid 0)."""
        try:
            pids = [i["pid"] for i in self._c.info()]
        except Exception:
            return
        self._pids = pids
        self._refresh = 0 in pids

    def _check_usable(self):
        if self._state == "joined":
            raise ValueError("gpupool: the pool is closed and joined")
        if self._stop.is_set():
            raise _errors.Canceled("the pool was terminated")

    def _interrupt(self):
        """Ctrl-C reached a thread waiting on this pool's results
        (result(), get(), an imap loop): queued calls are canceled
        (cancelled() is True), and the C call running, whichever thread
        drives it, is canceled now (its items stop: grace, then SIGKILL),
        as Ctrl-C during map() does."""
        with self._cv:
            self._subq.cancel_pending()
            running = self._owner is not None
        if running:
            self._c.cancel()

    def _dispatch(self):
        while True:
            with self._cv:
                # Not while another thread drives (a map, or a result()
                # helping, Pool._help): that call serves the queue, and its
                # end notifies.
                while (not self._subq.q or self._waiting
                       or self._owner is not None):
                    if self._state != "open" and not self._subq.q:
                        self._dispatcher = None
                        self._cv.notify_all()
                        return
                    self._cv.wait()
            try:
                self._drive(None)
            except _jobs.Abort:
                pass
            except BaseException as e:  # the pool failed: fail the rest
                with self._cv:
                    self._subq.cancel_all(e)


class _Future(Future):
    """Pool.submit's future: result() and exception() without a timeout
    first offer to drive the pool in the calling thread (Pool._help);
    Ctrl-C while they wait stops the pool's work (Pool._interrupt)."""

    def __init__(self, pool):
        super().__init__()
        self._gp_pool = pool

    def _waiting(self, wait, timeout):
        try:
            if timeout is None and not self.done():
                self._gp_pool._help()
            return wait(timeout)
        except KeyboardInterrupt:
            self._gp_pool._interrupt()
            raise

    def result(self, timeout=None):
        return self._waiting(super().result, timeout)

    def exception(self, timeout=None):
        return self._waiting(super().exception, timeout)
