"""One call's end is its own (issue 33): a map that fails, an imap left
early, a pool stopped from a callback, a pool that loses every worker.

No test synchronises by timing. Where a call must be caught at one point
(a submit running while a map fails), the workers block on FIFOs and the
caller releases them; where the release must come from the thread that
drives the pool at a given moment, it comes from the unpickling (or
pickling) of an object there, which happens in that thread at that
point. Scripts that could hang run in a subprocess with a timeout.
"""

import errno
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import gpupool
from test_api import _guarded, _script

DEADLINE = 120  # seconds: only a broken build waits this long


def until(cond, what):
    end = time.monotonic() + DEADLINE
    while not cond():
        assert time.monotonic() < end, "never: " + what
        time.sleep(0.01)


def fifo(tmp_path, name):
    path = str(tmp_path / name)
    os.mkfifo(path)
    return path


def release(path):
    """Let the worker blocked on the FIFO at path go on (once it has
    opened it)."""
    end = time.monotonic() + DEADLINE
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO or time.monotonic() > end:
                raise
            time.sleep(0.01)
            continue
        os.write(fd, b"go")
        os.close(fd)
        return


# Worker functions: module level, so they travel by reference.

class Boom(Exception):
    pass


def double(x):
    return 2 * x


def wait_on(path, started=None):
    """Block on the FIFO at path, once the file started (default: path
    and ".in") is made: the caller sees it run."""
    open(path + ".in" if started is None else started, "w").close()
    with open(path) as f:
        return f.read()


class Releaser:
    """Unpickled in the caller (in a result, or an exception's
    arguments), it releases the FIFO at path: the release then happens in
    the thread that drives the pool, while it handles that outcome."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (_released, (self.path,))


def _released(path):
    release(path)
    return "released"


class Unpicklable:
    """An item that cannot be pickled: the first try to pickle it (in the
    thread that drives the pool, as it sends the item) releases the FIFO
    at path."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        if self.path is not None:  # (gpupool tries more than one pickler)
            release(self.path)
            self.path = None
        raise TypeError("Unpicklable cannot be pickled")


def item(x):
    """x = (what, path): "wait" blocks on path; "raise" blocks on path,
    then raises Boom carrying a Releaser of the FIFO that follows; "give"
    blocks on path, then returns a Releaser of the FIFO that follows."""
    what, path = x[0], x[1]
    if what == "now":
        return "now"
    wait_on(path)
    if what == "raise":
        raise Boom(Releaser(x[2]))
    if what == "give":
        return Releaser(x[2])
    return what


# -- 2. One call's failure is its own -----------------------------------

def _carried_submit(tmp_path, pool, start_call, release_last):
    """A submit that the call running in another thread carries: the
    call's first two items block on go0 and go1 (one per worker); the
    submit is queued and go1 released, so that the call sends the submit
    to that worker, where it blocks on sub. Then go0 is released: the
    call ends (a failure, its reader gone), and only while the call
    handles that is sub released. Returns the submit's future and what
    the call's thread left in out."""
    go0, go1, sub = (fifo(tmp_path, n) for n in ("go0", "go1", "sub"))
    started = str(tmp_path / "started")
    out = {}
    t = threading.Thread(target=start_call, args=(go0, go1, sub, out))
    t.start()
    until(lambda: os.path.exists(go0 + ".in") and
          os.path.exists(go1 + ".in"), "both workers busy")
    fut = pool.submit(wait_on, sub, started)
    release(go1)
    until(lambda: os.path.exists(started), "the submit started")
    release_last(go0, out)
    t.join(DEADLINE)
    assert not t.is_alive()
    return fut, out


def _release_go0(go0, out):
    release(go0)


def test_a_failing_map_leaves_a_submit_it_carried_to_finish(tmp_path):
    """Before: the submit failed with Canceled (the map's C call, which
    had taken it, was canceled by the map's failure)."""
    with gpupool.Pool(fake_gpus=2) as p:
        def call(go0, go1, sub, out):
            try:
                p.map(item, [("raise", go0, sub), ("wait", go1)],
                      chunksize=1)
            except Boom as e:
                out["raised"] = e
        fut, out = _carried_submit(tmp_path, p, call, _release_go0)
        assert isinstance(out["raised"], Boom)
        assert fut.result(DEADLINE) == "go"
        assert p.map(double, range(4)) == [0, 2, 4, 6]


def test_an_unpicklable_map_item_leaves_a_submit_it_carried(tmp_path):
    """Before: the submit failed with the map's own TypeError."""
    with gpupool.Pool(fake_gpus=2) as p:
        def call(go0, go1, sub, out):
            try:
                p.map(item, [("wait", go0), ("wait", go1),
                             Unpicklable(sub)], chunksize=1)
            except TypeError as e:
                out["raised"] = e
        fut, out = _carried_submit(tmp_path, p, call, _release_go0)
        assert "cannot be pickled" in str(out["raised"])
        assert fut.result(DEADLINE) == "go"


def test_an_imap_left_early_leaves_a_submit_it_carried(tmp_path):
    """Before: the submit failed with Canceled when the imap's C call
    saw its reader gone."""
    with gpupool.Pool(fake_gpus=2) as p:
        def call(go0, go1, sub, out):
            out["it"] = p.imap(item, [("wait", go1), ("give", go0, sub),
                                      ("now", None)], chunksize=1)

        def leave_then_release(go0, out):
            it = out["it"]
            assert next(it) == "wait"
            it.close()  # the loop is left
            release(go0)
        fut, out = _carried_submit(tmp_path, p, call, leave_then_release)
        assert fut.result(DEADLINE) == "go"
        assert p.map(double, range(4)) == [0, 2, 4, 6]


def slow_double(x):
    time.sleep(0.002)  # long enough for calls to overlap
    return 2 * x


def raise_at_5(x):
    if x == 5:
        time.sleep(0.03)  # the other worker takes submits meanwhile
        raise Boom("item 5")
    time.sleep(0.002)
    return x


def test_six_threads_mix_and_no_unrelated_call_fails():
    """Failing maps and imap loops left early beside submit, apply_async,
    Executor.submit and Executor.map callers (a few calls at a time, now
    and then, so that the failing calls get the workers too): only the
    calls that failed or were left see it. Before: 11 to 16 unrelated
    calls failed with Canceled (5 runs of 1.5 s on 2 cores)."""
    rounds = 25
    bad = []
    ex = gpupool.Executor(fake_gpus=2)
    p = ex.pool

    def failing_map():
        for _ in range(rounds):
            try:
                p.map(raise_at_5, range(12), chunksize=1)
                bad.append("map did not raise")
            except Boom:
                pass

    def imap_left():
        for _ in range(rounds):
            for v in p.imap(slow_double, range(40), chunksize=1):
                if v >= 6:
                    break

    def check(name, call):
        for _ in range(rounds):
            time.sleep(0.02)  # now and then (load, not a wait)
            pending = [(i, call(i)) for i in range(4)]
            for i, get in pending:
                try:
                    if get() != 2 * i:
                        bad.append("%s(%d): wrong value" % (name, i))
                except Exception as e:
                    bad.append("%s(%d): %r" % (name, i, e))

    def ex_map(i):
        it = ex.map(slow_double, [i])
        return lambda: next(it)

    threads = [threading.Thread(target=f, daemon=True)
               for f in (failing_map, imap_left)]
    for name, call in (
            ("submit", lambda i: p.submit(slow_double, i).result),
            ("apply_async",
             lambda i: p.apply_async(slow_double, (i,)).get),
            ("Executor.submit",
             lambda i: ex.submit(slow_double, i).result),
            ("Executor.map", ex_map)):
        threads.append(threading.Thread(target=check, args=(name, call),
                                        daemon=True))
    for t in threads:  # daemons: a hang fails the test, not the run
        t.start()
    end = time.monotonic() + DEADLINE * 4
    for t in threads:
        t.join(max(0, end - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    if hung:
        p.terminate()
    ex.shutdown()
    assert hung == [] and bad == []


# -- 4. Stopping the pool from a callback ---------------------------------

# The scripts' functions, at top level: clean workers find them there.
_FUNCS = """\
import os, sys, threading, time, gpupool

def double(x):
    return 2 * x

def boom(x):
    raise ValueError(x)

"""


def _run_script(tmp_path, body, timeout=60):
    """Run body (guarded, after _FUNCS): it must exit 0 within timeout
    seconds; its CompletedProcess."""
    path, env = _script(_FUNCS + _guarded(body), tmp_path, guard=False)
    try:
        r = subprocess.run([sys.executable, str(path)], env=env,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail("the script hung: %s" % (e.stderr or b"")[-2000:])
    assert r.returncode == 0, r.stderr
    return r


# What a callback does to stop the pool.
_STOPS = {
    "terminate": "p.terminate()",
    "close_join": "p.close(); p.join()",
    "shutdown": "ex.shutdown()",
    "shutdown_nowait": "ex.shutdown(wait=False)",
    "shutdown_cancel": "ex.shutdown(wait=True, cancel_futures=True)",
}
# Who calls it: a future's done callback runs in the thread that ended
# the future (the dispatcher; the caller, whose result() drives the pool;
# a map's thread or an imap's helper, whose C call carried the submit);
# an AsyncResult's in the result thread.
_CARRIED = """
    def later():
        time.sleep(0.2)  # (after the call ended: the dispatcher case)
        ex.submit(double, 1).add_done_callback(cb)
    threading.Thread(target=later).start()
    try:
        %s
    except gpupool.Canceled:
        pass
"""
_CALLERS = {
    "dispatcher": """
        f = ex.submit(double, 1)
        f.add_done_callback(cb)
        f.exception(60)  # with a timeout: only waits
    """,
    # The same, the other worker busy (terminate() has items to stop).
    "dispatcher_busy": """
        ex.submit(time.sleep, 30)
        f = ex.submit(double, 1)
        f.add_done_callback(cb)
        f.exception(60)
    """,
    "result": """
        f = ex.submit(double, 1)
        f.add_done_callback(cb)
        f.exception()
    """,
    "map": _CARRIED % "p.map(time.sleep, [0.05] * 40, chunksize=1)",
    "imap": _CARRIED % "list(p.imap(time.sleep, [0.05] * 40, chunksize=1))",
    "apply_async": "p.apply_async(double, (1,), callback=cb).wait(60)",
    "error_callback": "p.apply_async(boom, (1,), error_callback=cb).wait(60)",
    "map_async": "p.map_async(double, range(8), callback=cb).wait(60)",
}


@pytest.mark.parametrize("caller,stop", [
    ("dispatcher", s) for s in sorted(_STOPS)] + [
    ("dispatcher_busy", "terminate"),
    ("result", "terminate"), ("result", "shutdown"),
    ("map", "terminate"), ("map", "close_join"),
    ("imap", "terminate"), ("imap", "close_join"),
    ("apply_async", "terminate"), ("apply_async", "close_join"),
    ("error_callback", "terminate"),
    ("map_async", "terminate"), ("map_async", "shutdown_cancel")])
def test_stopping_the_pool_from_a_callback_ends_the_program(
        tmp_path, caller, stop):
    """Before: a future's done callback that stopped the pool waited for
    its own thread, and the program never exited."""
    r = _run_script(tmp_path, """
        ex = gpupool.Executor(fake_gpus=2)
        p = ex.pool
        seen = []
        def cb(_):
            try:
                %s
                seen.append("stopped")
            except BaseException as e:
                seen.append(repr(e))
        %s
        end = time.monotonic() + 60
        while not seen and time.monotonic() < end:
            time.sleep(0.01)
        print("callback:", seen, flush=True)
    """ % (_STOPS[stop], textwrap.dedent(_CALLERS[caller]).strip().replace(
        "\n", "\n        ")))
    assert "callback: ['stopped']" in r.stdout, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr


def test_a_stopped_pool_has_no_worker_once_the_callback_returned(tmp_path):
    """The stop a callback asked for is finished (workers stopped and
    reaped) when the callback's thread is done, without a join."""
    r = _run_script(tmp_path, """
        p = gpupool.Pool(fake_gpus=2)
        f = p.submit(double, 1)
        f.add_done_callback(lambda _: p.terminate())
        f.result()
        end = time.monotonic() + 60
        while kids() and time.monotonic() < end:
            time.sleep(0.01)
        print("children", kids(), p._state, flush=True)
    """)
    assert "children 0 joined" in r.stdout


def test_queued_futures_are_canceled_outside_the_pools_lock(tmp_path):
    """terminate() cancels the queued futures once it has let go of the
    pool's lock, so that their callbacks may call the pool (terminate()
    it too). Before: they ran under the lock, and a callback's terminate()
    could wait for a map's thread that needed the lock."""
    block = fifo(tmp_path, "block")
    p = gpupool.Pool(fake_gpus=1, grace=0.1)
    first = p.submit(wait_on, block)
    until(lambda: os.path.exists(block + ".in"), "the first call runs")
    queued = p.submit(double, 1)
    free = []

    def probe():  # another thread takes the pool's lock
        got = p._cv.acquire(timeout=10)
        free.append(got)
        if got:
            p._cv.release()

    def cb(f):
        t = threading.Thread(target=probe)
        t.start()
        t.join()
        p.terminate()
    queued.add_done_callback(cb)
    p.terminate()
    assert free == [True]
    assert queued.cancelled()
    assert isinstance(first.exception(DEADLINE),
                      (gpupool.Canceled, gpupool.WorkerCrashed))


# -- 6. A pool that loses every worker keeps what it computed ------------

def refuse_if(marker):
    """An initializer that fails in a replacement worker (once marker
    exists): a slot whose replacement fails to start is never started
    again."""
    if os.path.exists(marker):
        raise RuntimeError("this replacement refuses to start")


def crash_at_3(arg):
    x, marker = arg
    if x == 3:
        open(marker, "w").close()
        os._exit(1)
    return x


def _doomed(tmp_path):
    """A pool of one worker that a crash at item 3 leaves with none."""
    marker = str(tmp_path / "marker")
    return gpupool.Pool(1, fake_gpus=1, initializer=refuse_if,
                        initargs=(marker,)), marker


def _every_worker_gone(e):
    assert isinstance(e, gpupool.NotRun) and \
        isinstance(e, gpupool.Error), repr(e)
    assert "every worker of the pool is gone" in str(e)


def test_map_on_a_pool_that_loses_every_worker_keeps_its_results(
        tmp_path):
    """Before: map(..., return_exceptions=True) raised RuntimeError
    ("every worker is gone") and every result was lost."""
    p, marker = _doomed(tmp_path)
    with p:
        r = p.map(crash_at_3, [(i, marker) for i in range(8)],
                  chunksize=1, return_exceptions=True)
        assert r[:3] == [0, 1, 2]
        assert isinstance(r[3], gpupool.WorkerCrashed)
        for e in r[4:]:
            _every_worker_gone(e)
        # Later calls fail fast, each as its kind fails.
        with pytest.raises(gpupool.NotRun) as ei:
            p.map(double, range(3))
        _every_worker_gone(ei.value)
        for e in p.map(double, range(3), return_exceptions=True):
            _every_worker_gone(e)
        _every_worker_gone(p.submit(double, 1).exception(DEADLINE))
        with pytest.raises(gpupool.NotRun):
            p.apply_async(double, (1,)).get(DEADLINE)
        with pytest.raises(gpupool.NotRun):
            p.map_async(double, range(3)).get(DEADLINE)
        out = list(p.imap(double, range(3), return_exceptions=True))
        assert len(out) == 3
        for e in out:
            _every_worker_gone(e)
        with pytest.raises(gpupool.NotRun):
            next(p.imap_unordered(double, range(3)))


@pytest.mark.parametrize("ordered", [True, False])
def test_imap_on_a_pool_that_loses_every_worker_keeps_its_results(
        tmp_path, ordered):
    p, marker = _doomed(tmp_path)
    with p:
        f = p.imap if ordered else p.imap_unordered
        r = list(f(crash_at_3, ((i, marker) for i in range(8)),
                   return_exceptions=True))
        assert sorted(x for x in r if isinstance(x, int)) == [0, 1, 2]
        assert sum(isinstance(x, gpupool.WorkerCrashed) for x in r) == 1
        lost = [x for x in r if isinstance(x, gpupool.NotRun)]
        assert len(lost) == 4
        _every_worker_gone(lost[0])


def test_futures_on_a_pool_that_loses_every_worker(tmp_path):
    """Queued futures of a pool that loses its last worker fail with
    NotRun (before: RuntimeError); those that ran keep their values."""
    p, marker = _doomed(tmp_path)
    with p:
        futs = [p.submit(crash_at_3, (i, marker)) for i in range(8)]
        assert [f.result(DEADLINE) for f in futs[:3]] == [0, 1, 2]
        assert isinstance(futs[3].exception(DEADLINE),
                          gpupool.WorkerCrashed)
        for f in futs[4:]:
            _every_worker_gone(f.exception(DEADLINE))


def test_executor_map_on_a_pool_that_loses_every_worker(tmp_path):
    marker = str(tmp_path / "marker")
    with gpupool.Executor(1, fake_gpus=1, initializer=refuse_if,
                          initargs=(marker,)) as ex:
        got = []
        with pytest.raises(gpupool.WorkerCrashed):
            for v in ex.map(crash_at_3, [(i, marker) for i in range(8)]):
                got.append(v)
        assert got == [0, 1, 2]
        with pytest.raises(gpupool.NotRun):
            list(ex.map(double, range(3)))
