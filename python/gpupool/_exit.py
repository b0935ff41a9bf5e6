"""Every pool not yet joined, and what becomes of it when the interpreter
exits (joined, as concurrent.futures joins its executors) or this process
forks (forgotten in the child: its copies are the parent's)."""

import os
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


def forget_in_child():
    """A fork of this process (os.fork(), a multiprocessing child, a
    ProcessPoolExecutor's worker, one of our own workers) has copies of
    the pools, not the pools: their workers, threads and locks are the
    parent's. Its exit stops and joins none of them (design.md,
    invariant 75), and a call on a copy says whose it is (Pool._mine())."""
    global exiting
    exiting = False
    live.clear()


os.register_at_fork(after_in_child=forget_in_child)

try:
    threading._register_atexit(python_exit)
except AttributeError:  # not CPython's threading
    import atexit
    atexit.register(python_exit)
