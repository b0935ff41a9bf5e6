"""Every pool not yet joined, joined when the interpreter exits, as
concurrent.futures joins its executors (a fork's copies excepted: they
are the parent's, Pool._mine())."""

import threading
import weakref

live = weakref.WeakSet()  # pools not joined, joined at interpreter exit
exiting = False


def python_exit():
    """Before the interpreter waits for its threads (as
    concurrent.futures does): no new work; what was submitted runs to its
    end; then every pool's workers are stopped. Ctrl-C here terminates
    instead."""
    global exiting
    exiting = True
    for p in list(live):
        try:
            p._at_exit()
        except KeyboardInterrupt:
            p.terminate()


try:
    threading._register_atexit(python_exit)
except AttributeError:  # not CPython's threading
    import atexit
    atexit.register(python_exit)
