"""multiprocessing.Pool's asynchronous results over gpupool's futures.

apply_async() is one submitted call (a future of Pool.submit); map_async()
and starmap_async() are chunks submitted the same way, each a future of
its elements' outcomes. The AsyncResult is ready once every future it
waits on has ended and its callback (or error_callback) has run.

Callbacks run in the pool's result thread (gpupool-results), one at a
time in completion order, as multiprocessing runs them in its result
handler: never in the thread that drives the C pool, so a slow callback
holds back no item, and a callback may submit more work. An exception in
a callback is printed to stderr (as threading does for a thread) and the
result is ready all the same: the pool goes on.
"""

import queue
import sys
import threading
import traceback
from concurrent.futures import Future
from multiprocessing import TimeoutError as _MpTimeoutError

from . import _errors
from . import _threads


class Results:
    """The pool's result thread, started when the first callback is
    due; stop() lets it run what is queued, then ends it."""

    def __init__(self):
        self.q = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.thread = None

    def put(self, res):
        with self.lock:
            if self.thread is None:
                self.thread = _threads.thread(self._run, "gpupool-results")
                _threads.start(self.thread)
        self.q.put(res)

    def _run(self):
        while True:
            res = self.q.get()
            if res is None:
                return
            res._run_callback()

    def stop(self):
        """After the last result: the queued callbacks run, the thread
        ends (not waited for when called from a callback)."""
        with self.lock:
            t, self.thread = self.thread, None
        if t is not None:
            self.q.put(None)
            if t is not threading.current_thread():
                t.join()


class Hooks:
    """What a result calls of its pool, given by the pool (Pool._hooks()):
    help(until, mine) drives the pool in the waiting thread
    (Driver._help), interrupt() stops its work on Ctrl-C, put(result)
    queues a callback for the result thread (Results.put)."""
    __slots__ = ("help", "interrupt", "put")

    def __init__(self, help, interrupt, put):
        self.help, self.interrupt, self.put = help, interrupt, put


class AsyncResult:
    """What apply_async(), map_async() and starmap_async() return, as
    multiprocessing.pool.AsyncResult: get(timeout), wait(timeout),
    ready(), successful()."""

    def __init__(self, hooks, callback, error_callback):
        self._hooks = hooks
        self._callback = callback
        self._error_callback = error_callback
        self._event = threading.Event()
        self._ok = None
        self._value = None
        self._mine = ()  # its futures

    def ready(self):
        return self._event.is_set()

    def successful(self):
        if not self.ready():
            raise ValueError("{0!r} not ready".format(self))
        return self._ok

    def wait(self, timeout=None):
        if self._event.is_set():
            return
        hooks = self._hooks
        try:
            if hooks is not None:  # see Driver._help
                hooks.help(self.ready, self._mine, timeout is None)
            self._event.wait(timeout)
        except KeyboardInterrupt:
            if hooks is not None:
                hooks.interrupt()
            raise

    def get(self, timeout=None):
        self.wait(timeout)
        if not self.ready():
            raise _MpTimeoutError
        if self._ok:
            return self._value
        raise self._value

    def _set(self, ok, value):
        """In the thread where the last future ended."""
        self._ok, self._value = ok, value
        cb = self._callback if ok else self._error_callback
        if cb is None:
            self._done()
        else:
            self._hooks.put(self)

    def _run_callback(self):
        """In the result thread."""
        cb = self._callback if self._ok else self._error_callback
        try:
            cb(self._value)
        except BaseException:
            sys.stderr.write("gpupool: exception in %s %r of %r (the "
                             "result is ready all the same):\n"
                             % ("callback" if self._ok else
                                "error_callback", cb, self))
            traceback.print_exc()
        finally:
            self._done()

    def _done(self):
        self._hooks = None  # the result does not keep the pool alive
        self._callback = self._error_callback = None
        self._event.set()


def _failed(fut):
    """The exception of a future that did not give outcomes: canceled
    (shutdown, terminate, Ctrl-C) or failed at submission (pickling)."""
    if fut.cancelled():
        return _errors.Canceled("the item was canceled before it ran")
    return fut.exception()


class ApplyResult(AsyncResult):
    """apply_async(): one submitted call."""

    def __init__(self, hooks, fut, callback, error_callback):
        super().__init__(hooks, callback, error_callback)
        self._mine = (fut,)
        Future.add_done_callback(fut, self._fut_done)  # get() helps
        if callback or error_callback:  # nothing may wait: start it now
            hooks.help(None, (), False)

    def _fut_done(self, fut):
        e = _failed(fut)
        if e is None:
            self._set(True, fut.result())
        else:
            self._set(False, e)


class MapResult(AsyncResult):
    """map_async(): chunk futures, each of its elements' outcomes; ready
    when all have ended, its value the list in input order, or the first
    failure (in completion order), as multiprocessing's MapResult."""

    def __init__(self, hooks, futs, starts, n, callback, error_callback):
        super().__init__(hooks, callback, error_callback)
        self._lock = threading.Lock()
        self._values = [None] * n
        self._err = None
        self._left = len(futs)
        self._mine = tuple(futs)
        if not futs:
            self._set(True, [])
        for fut, start in zip(futs, starts):
            Future.add_done_callback(  # get() helps
                fut, lambda f, start=start: self._chunk_done(start, f))
        if futs and (callback or error_callback):  # as ApplyResult
            hooks.help(None, (), False)

    def _chunk_done(self, start, fut):
        e = _failed(fut)
        if e is None:
            outs = fut.result()
            for i, (kind, v) in enumerate(outs):
                if kind == "err":
                    e = v
                    break
            else:
                self._values[start:start + len(outs)] = [v for _, v in outs]
        with self._lock:
            if e is not None and self._err is None:
                self._err = e
            self._left -= 1
            last = self._left == 0
        if last:
            if self._err is None:
                self._set(True, self._values)
            else:
                self._values = None
                self._set(False, self._err)
