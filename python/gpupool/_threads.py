"""gpupool's own threads (the dispatcher, an imap's driver, the result
and checkpoint threads), made by thread() and started by start(), so
that a waiting result() can tell cheaply whether another thread exists
that could submit meanwhile (alone(); see Driver._help)."""

import os
import threading

_lock = threading.Lock()
# gpupool's threads counted: never more than those threading lists, as
# each is counted once started (listed) and uncounted before it ends.
_ours = 0


def thread(target, name, args=()):
    """A daemon thread of gpupool's, named name, running target(*args):
    start it with start()."""
    return threading.Thread(target=_run, args=(target, args), name=name,
                            daemon=True)


def start(t):
    global _ours
    t.start()
    with _lock:
        _ours += 1


def _run(target, args):
    global _ours
    try:
        target(*args)
    finally:
        with _lock:
            _ours -= 1


def _in_child():
    """A fork has none of gpupool's threads (the forking one goes on, and
    uncounts itself if it is one: the count stays under what threading
    lists), and another thread may have held the lock."""
    global _lock, _ours
    _lock = threading.Lock()
    _ours = 0


os.register_at_fork(after_in_child=_in_child)


def alone():
    """Whether every thread but this one is gpupool's: where this is the
    main thread and threading counts no more threads than gpupool's and
    this one, without a walk over them (a round trip's cost)."""
    cur = threading.current_thread()
    if (cur is threading.main_thread() and
            threading.active_count() == 1 + _ours):
        return True
    return not any(t is not cur and not t.name.startswith("gpupool-")
                   for t in threading.enumerate())
