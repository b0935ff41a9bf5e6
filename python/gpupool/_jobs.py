"""The work a Pool hands to the C pool: map, stream (imap) and submit jobs.

The C pool runs one call (gp_pool_run) at a time. Pool._drive() makes that
call with one job and, besides it, the queue of submitted calls: next()
asks the submit queue first, then the job; done() routes each C item back
to the job or future that sent it. The key of a C item is (job, index).

A job's next_item() returns a pickled chunk, or None when it has nothing
to send now (input exhausted, or a stream's window full); None ends the C
call once the items in flight are done. check() raises Abort once the job
was ended from outside (an imap's reader left). Jobs are driven from the thread
that runs the C call and read by the caller's thread: a stream job's
state is under its own Condition.
"""

import collections
import threading

from . import _errors
from . import _gpupool
from . import _task


class Abort(BaseException):
    """A job is over: raised by its next_item(), finish() or check() (its
    first failure, or its reader gone), or by Pool._drive() (the pool
    terminated); carries what the caller then raises. The C call sends
    nothing more of the job and is canceled once no submit it took is
    still running."""

    def __init__(self, exc):
        super().__init__(exc)
        self.exc = exc


def values_of(fn, status, code, out, n):
    """One C item's n values and its errors: (values, None) when all
    succeeded, else (values, {index: exception}), each exception with the
    worker's traceback attached (a crash or timeout: every index). An
    item of a pool that lost every worker is NOTRUN with out the NotRun
    that says why (_drive.py, _Call.not_run())."""
    if status != _gpupool.OK:
        e = (out if isinstance(out, _errors.NotRun) else
             _errors.from_status(status, code, out))
        return [None] * n, dict.fromkeys(range(n), e)
    values, errors = _task.decode(out, n)
    if not errors:
        return values, None
    excs = {}
    for i, (exc, tb) in errors.items():
        if isinstance(exc, _task._LostFunction):
            exc = _task.lost_function_error(fn, exc)
        excs[i] = _errors.attach_traceback(exc, tb) if tb else exc
    return values, excs


def outcomes_of(fn, status, code, out, n):
    """The n element outcomes of one C item: ("ok", value) or
    ("err", exception)."""
    values, excs = values_of(fn, status, code, out, n)
    if not excs:
        return [("ok", v) for v in values]
    return [("err", excs[i]) if i in excs else ("ok", v)
            for i, v in enumerate(values)]


class MapJob:
    """Pool.map: a list, results in order. On the first failure (in
    completion order) done() aborts the C call, unless return_exceptions,
    where the exception takes the result's place."""

    def __init__(self, fn, items, chunksize, return_exceptions, progress,
                 forked):
        self.fn = fn
        self.fn_bytes = _task.dumps_fn(fn, forked)
        self.items = items
        self.chunksize = chunksize
        self.return_exceptions = return_exceptions
        self.progress = progress
        self.n = len(items)
        self.results = [None] * self.n
        self.pos = 0

    def check(self):
        """A map ends by its own failure only (finish())."""

    def next_item(self):
        if self.pos >= self.n:
            return None
        start = self.pos
        self.pos = min(start + self.chunksize, self.n)
        return start, _task.dumps_chunk(self.fn_bytes, 0,
                                        self.slice(start, self.pos))

    def slice(self, start, end):
        """items[start:end], checked: the caller's list, not a copy."""
        chunk = self.items[start:end]
        if len(chunk) != end - start:
            raise Abort(RuntimeError("gpupool: the list given to map() "
                                     "changed size during the map"))
        return chunk

    def finish(self, start, status, code, out):
        self.store(start, min(self.chunksize, self.n - start), status, code,
                   out)

    def store(self, start, n, status, code, out):
        """The n results of the C item at start into their places."""
        values, excs = values_of(self.fn, status, code, out, n)
        if excs:
            if not self.return_exceptions:
                raise Abort(excs[min(excs)])
            for i, e in excs.items():
                values[i] = e
        self.results[start:start + n] = values
        if self.progress is not None:
            self.progress.update(n)


class StreamJob:
    """Pool.imap / imap_unordered: an iterable of unknown length, read in
    the thread that drives the C pool, at most `window` elements taken
    and not yet consumed by the caller (memory stays bounded however long
    the input is and however slow the consumer)."""

    def __init__(self, fn, iterable, chunksize, window, ordered,
                 return_exceptions, progress, forked, on_interrupt):
        self.fn = fn
        self.fn_bytes = _task.dumps_fn(fn, forked)
        self.on_interrupt = on_interrupt
        self.it = iter(iterable)
        self.chunksize = chunksize
        self.window = window
        self.ordered = ordered
        self.return_exceptions = return_exceptions
        self.progress = progress
        self.cv = threading.Condition()
        self.taken = 0          # elements read from the input
        self.consumed = 0       # elements the caller has received
        self.sizes = {}         # chunk start -> element count, in flight
        self.ready = {} if ordered else collections.deque()
        self.exhausted = False  # the input has ended (or raised)
        self.input_error = None  # what the input raised, for the caller
        self.run_error = None   # what the C call raised, for the caller
        self.canceled = False   # the caller stopped early
        self.finished = False   # the driving thread is done

    def check(self):
        """Abort once the reader has stopped (left its loop, or the with
        block ended): the stream is over. Called under the pool's lock
        too (Pool._drive), so only a bool is read."""
        if self.canceled:
            raise Abort(_errors.Canceled("imap was stopped"))

    def next_item(self):
        with self.cv:
            self.check()
            room = self.window - (self.taken - self.consumed)
            if self.exhausted or room <= 0:
                return None
            start = self.taken
        chunk = self.take(min(self.chunksize, room))
        if not chunk:
            with self.cv:
                self.cv.notify_all()
            return None
        with self.cv:
            self.taken += len(chunk)
            self.sizes[start] = len(chunk)
        return start, _task.dumps_chunk(self.fn_bytes, 0, chunk)

    def take(self, k):
        """Up to k elements from the input (fewer when it ends or raises:
        then exhausted, and input_error for the caller)."""
        chunk = []
        try:
            for _ in range(k):
                chunk.append(next(self.it))
        except StopIteration:
            with self.cv:
                self.exhausted = True
        except BaseException as e:  # the caller's generator raised
            with self.cv:
                self.exhausted = True
                self.input_error = e
        return chunk

    def finish(self, start, status, code, out):
        with self.cv:
            n = self.sizes.pop(start)
        res = outcomes_of(self.fn, status, code, out, n)
        with self.cv:
            if self.ordered:
                for i, r in enumerate(res):
                    self.ready[start + i] = r
            else:
                self.ready.extend(res)
            self.cv.notify_all()
            self.check()
        if self.progress is not None:
            self.progress.update(n)

    def wait_for_room(self, stop):
        """In the driving thread, between C calls: True to call again,
        False when the stream is over (input ended and nothing in flight,
        canceled, or stop set)."""
        with self.cv:
            while True:
                if self.canceled or stop.is_set():
                    return False
                if self.exhausted:
                    return False
                if self.taken - self.consumed < self.window:
                    return True
                self.cv.wait()

    def end(self, error):
        with self.cv:
            self.finished = True
            self.run_error = error
            self.cv.notify_all()

    def _pop(self):
        """Under cv: the next outcome, or None if none is ready."""
        if self.ordered:
            return self.ready.pop(self.consumed, None)
        return self.ready.popleft() if self.ready else None

    def results(self):
        """The caller's generator."""
        try:
            while True:
                with self.cv:
                    r = self._pop()
                    while r is None:
                        if self.finished:  # nothing more will come
                            if self.run_error is not None:
                                raise self.run_error
                            if self.input_error is not None:
                                raise self.input_error
                            if self.consumed < self.taken:
                                raise _errors.PoolError(
                                    "imap lost %d items"
                                    % (self.taken - self.consumed))
                            return
                        self.cv.wait()
                        r = self._pop()
                    self.consumed += 1
                    self.cv.notify_all()
                kind, v = r
                if kind == "err" and not self.return_exceptions:
                    raise v
                yield v
        except KeyboardInterrupt:
            # Ctrl-C while this waited for a result: everything the pool
            # runs stops now (not at the next item that ends).
            with self.cv:
                self.canceled = True
            self.on_interrupt()
            raise
        finally:
            with self.cv:
                if not self.finished:
                    self.canceled = True
                self.cv.notify_all()
            if self.progress is not None:
                self.progress.close()


class SubmitQueue:
    """Calls waiting for a worker, as (future, fn, payload, n): a
    submit() (n None: the future gets fn's value or exception) or a chunk
    of map_async() or Executor.map() (n elements: the future gets their
    outcomes, as outcomes_of() gives them). Every C call serves it; the
    dispatcher thread serves it when no other call runs."""

    def __init__(self):
        self.q = collections.deque()

    def push(self, fut, fn, payload, n=None):
        self.q.append((fut, fn, payload, n))

    def next_item(self):
        """Under the pool's lock: the next entry still wanted, as (key,
        payload)."""
        while self.q:
            fut, fn, payload, n = self.q.popleft()
            if fut.set_running_or_notify_cancel():
                return (fut, fn, n), payload
        return None

    def only(self, futs):
        """Under the pool's lock: whether every queued call is one of
        futs."""
        ids = {id(f) for f in futs}
        return all(id(e[0]) in ids for e in self.q)

    def take(self):
        """Under the pool's lock: every queued future, out of the queue.
        End them with cancel() or fail() once the lock is released: their
        done callbacks run then, and may call the pool (terminate() it)."""
        futs = [e[0] for e in self.q]
        self.q.clear()
        return futs

    @staticmethod
    def finish(key, status, code, out):
        fut, fn, n = key
        if n is not None:
            fut.set_result(outcomes_of(fn, status, code, out, n))
            return
        kind, v = outcomes_of(fn, status, code, out, 1)[0]
        if kind == "ok":
            fut.set_result(v)
        else:
            fut.set_exception(v)


def cancel(futs):
    """Futures taken from the queue are canceled: cancelled() is True
    (terminate(), shutdown(cancel_futures=True), Ctrl-C)."""
    for fut in futs:
        fut.cancel()


def fail(futs, exc):
    """Futures taken from the queue fail with exc (the pool failed)."""
    for fut in futs:
        if fut.set_running_or_notify_cancel():
            fut.set_exception(exc)
