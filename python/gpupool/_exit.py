"""Every pool not yet joined, joined when the interpreter exits, as
concurrent.futures joins its executors (a fork's copies excepted: they
are the parent's, Pool._mine())."""

import threading
import weakref

# Pools not joined -> what joins each at interpreter exit (register()).
live = weakref.WeakKeyDictionary()
exiting = False


def register(pool, at_exit):
    """pool, until forget(pool): at_exit(pool) runs at interpreter exit
    (pool.terminate() when Ctrl-C comes then)."""
    live[pool] = at_exit


def forget(pool):
    live.pop(pool, None)


def python_exit():
    """Before the interpreter waits for its threads (as
    concurrent.futures does): no new work; what was submitted runs to its
    end; then every pool's workers are stopped. Ctrl-C here terminates
    instead."""
    global exiting
    exiting = True
    for p, at_exit in list(live.items()):
        try:
            at_exit(p)
        except KeyboardInterrupt:
            p.terminate()


try:
    threading._register_atexit(python_exit)
except AttributeError:  # not CPython's threading
    import atexit
    atexit.register(python_exit)
