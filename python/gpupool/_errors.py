"""Exceptions of the gpupool package, and how a C outcome becomes one.

An item's outcome comes back from the C pool as (status, code, out). For
GP_OK, out holds what the worker encoded (see _task.py): a pickled list of
per-element outcomes, where fn's own exception travels with its formatted
traceback. Any other status is a fate of the whole C item (a chunk): the
worker died (CRASHED), ran past the timeout (TIMEDOUT), the call was
canceled (CANCELED), or the library failed the item (ERROR, NOTRUN).
"""

import pickle
from concurrent.futures import CancelledError
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.pool import MaybeEncodingError

from . import _gpupool


class Error(Exception):
    """Base class of the errors gpupool raises for an item or a pool."""


class WorkerCrashed(Error, BrokenProcessPool):
    """The worker running the item died (segfault, os._exit, OOM killer).

    ``code`` is the C library's value: the exit status, or 128 + the
    signal number, or -1 when unknown (the caller ignores SIGCHLD).
    ``signal`` is the signal number (code > 128) or None; ``exitcode`` the
    exit status (0 <= code <= 128) or None. An exit status above 128 reads
    as a signal: the C pool reports both in one number, as shells do.
    The worker is replaced; the pool goes on. A BrokenProcessPool too, so
    that code written for ProcessPoolExecutor catches it (there the whole
    executor breaks; here only this item failed).
    """

    def __init__(self, code, worker=None):
        self.code = code
        self.signal = code - 128 if code > 128 else None
        self.exitcode = code if 0 <= code <= 128 else None
        if self.signal is not None:
            try:
                import signal as _s
                how = "killed by signal %d (%s)" % (
                    self.signal, _s.Signals(self.signal).name)
            except ValueError:
                how = "killed by signal %d" % self.signal
        elif self.exitcode is not None:
            how = "exited with status %d" % self.exitcode
        else:
            how = "died (status unknown: SIGCHLD is ignored)"
        super().__init__("the worker running this item " + how)


class Timeout(Error, TimeoutError):
    """The item ran past the pool's ``timeout`` (seconds) and was stopped."""


class Canceled(Error, CancelledError):
    """The call was canceled before the item ended (Ctrl-C, terminate()).
    A concurrent.futures.CancelledError too."""


class NotRun(Error):
    """The item never ran: the pool lost all its workers."""


class PoolError(Error):
    """The library failed the item (e.g. an item or result over the
    pool's max_msg)."""


class RankLost(PoolError):
    """The MPI rank running the item was lost (it died, left or fell
    silent for rank_timeout), and retries= did not allow another try:
    the message names the rank and its host."""


RANK_LOST = -1000  # a status of gpupool._ranks' own: out is the reason


class EncodingError(Error, pickle.PicklingError, MaybeEncodingError):
    """An item's result (or its exception) could not be pickled in the
    worker: pickle.PicklingError as ProcessPoolExecutor raises, and
    multiprocessing.pool.MaybeEncodingError as Pool raises, with its
    ``exc`` and ``value`` (reprs of the pickling error and of the
    result)."""

    def __init__(self, msg, exc="", value=""):
        Exception.__init__(self, msg)
        self.exc = exc
        self.value = value

    def __str__(self):
        return self.args[0]

    def __reduce__(self):
        return type(self), (self.args[0], self.exc, self.value)


def unpickling_failed(e, what):
    """The exception a future gets when what (an item in a worker, a
    result in the caller) could not be unpickled: e itself when it is an
    Exception, with a note saying where; anything else (SystemExit from a
    __reduce__) wrapped in an UnpicklingError, so that it never escapes
    the thread that unpickled it."""
    where = "gpupool: raised while unpickling %s" % what
    if isinstance(e, Exception):
        e.add_note(where)
        return e
    w = pickle.UnpicklingError("%s could not be unpickled: %r" % (what, e))
    w.__cause__ = e
    return w


def pickling_failed(e):
    """The exception a future gets when its call could not be pickled in
    the caller: e, or (SystemExit, ...) a PicklingError naming it."""
    if isinstance(e, Exception):
        return e
    w = pickle.PicklingError("the call could not be pickled: %r" % (e,))
    w.__cause__ = e
    return w


class RemoteTraceback(Exception):
    """Carries the worker's formatted traceback; set as ``__cause__`` of
    an exception re-raised in the caller, as multiprocessing does."""

    def __init__(self, tb):
        super().__init__(tb)
        self.tb = tb

    def __str__(self):
        return '\n"""\n%s"""' % self.tb


InitError = _gpupool.InitError


def attach_traceback(exc, tb):
    """Return exc with the worker's traceback text as its cause."""
    exc.__cause__ = RemoteTraceback(tb)
    return exc


def from_status(status, code, out=None):
    """The exception for a C item that did not end OK (every element of
    its chunk shares it)."""
    if status == RANK_LOST:
        return RankLost(bytes(out).decode(errors="replace"))
    if status == _gpupool.CRASHED:
        return WorkerCrashed(code)
    if status == _gpupool.TIMEDOUT:
        return Timeout("the item ran past the pool's timeout")
    if status == _gpupool.CANCELED:
        return Canceled("the call was canceled before the item ended")
    if status == _gpupool.NOTRUN:
        return NotRun("the item never ran: the pool lost all its workers")
    if status == _gpupool.FAILED:
        # gpupool's worker function catches everything; reaching this
        # means the encoding itself failed in the worker.
        return PoolError("the worker could not run the item (code %d)"
                         % code)
    return PoolError("the item failed in the library: %s"
                     % _gpupool.strerror(code))
