"""Exceptions of the gpupool package, and how a C outcome becomes one.

An item's outcome comes back from the C pool as (status, code, out). For
GP_OK, out holds what the worker encoded (see _task.py): a pickled list of
per-element outcomes, where fn's own exception travels with its formatted
traceback. Any other status is a fate of the whole C item (a chunk): the
worker died (CRASHED), ran past the timeout (TIMEDOUT), the call was
canceled (CANCELED), or the library failed the item (ERROR, NOTRUN).
"""

from . import _gpupool


class Error(Exception):
    """Base class of the errors gpupool raises for an item or a pool."""


class WorkerCrashed(Error):
    """The worker running the item died (segfault, os._exit, OOM killer).

    ``code`` is the C library's value: the exit status, or 128 + the
    signal number, or -1 when unknown (the caller ignores SIGCHLD).
    ``signal`` is the signal number (code > 128) or None; ``exitcode`` the
    exit status (0 <= code <= 128) or None. An exit status above 128 reads
    as a signal: the C pool reports both in one number, as shells do.
    The worker is replaced; the pool goes on.
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


class Canceled(Error):
    """The call was canceled before the item ended (Ctrl-C, terminate())."""


class NotRun(Error):
    """The item never ran: the pool lost all its workers."""


class PoolError(Error):
    """The library failed the item (e.g. an item or result over the
    pool's max_msg)."""


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


def from_status(status, code):
    """The exception for a C item that did not end OK (every element of
    its chunk shares it)."""
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
