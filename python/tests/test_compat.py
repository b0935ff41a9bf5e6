"""gpupool as a drop-in for multiprocessing.Pool and concurrent.futures:
the parts of the surface CPython's own tests (test_cpython.py) do not
cover, and the ways gpupool is deliberately safer.

No test synchronises by timing: a worker that must wait blocks on a FIFO
or an Event that never fires, and a subprocess is driven by the lines it
prints. Timeouts below only bound a wait that would otherwise hang on a
bug (a future that never ends).
"""

import concurrent.futures as cf
import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap
import threading

import pytest

import gpupool
from test_api import CLEAN, _guarded

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(gpupool.__file__)))


def double(x):
    return 2 * x


def capture(*args, **kwargs):
    return args, kwargs


def gpu_of_worker(_):
    return gpupool.current().gpu


def pid(_=None):
    return os.getpid()


def read_fifo(path):
    with open(path, "rb") as f:
        return f.read(1)


class Boom(Exception):
    pass


def boom_on_3(x):
    if x == 3:
        raise Boom(x)
    return x


def _in_caller_raise(exc):
    """Unpickling a CallerOnly: fine in a worker, raises in the caller
    (as a CUDA tensor does in a CPU-only caller)."""
    if gpupool.current() is None:
        raise exc
    return CallerOnly(exc)


class CallerOnly:
    def __init__(self, exc):
        self.exc = exc

    def __reduce__(self):
        return _in_caller_raise, (self.exc,)


def make_caller_only(exc):
    return CallerOnly(exc)


def _script(body, tmp_path, env_extra=None, guard=True):
    path = tmp_path / "script.py"
    path.write_text(_guarded(body) if guard else textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=PKG_DIR)
    env.pop("GPUPOOL_FAKE_GPUS", None)
    env.update(env_extra or {})
    return path, env


def _run(path, env, timeout=120):
    out = subprocess.run([sys.executable, str(path)], env=env,
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return out.stdout


# -- Pool(): multiprocessing's arguments ------------------------------------

def test_processes_is_spread_evenly_over_the_gpus():
    with gpupool.Pool(4, fake_gpus=2) as p:
        assert p.size() == 4
        assert sorted(w.gpu for w in p.info()) == [0, 0, 1, 1]
    with gpupool.Pool(2, fake_gpus=3) as p:  # under G: the first N GPUs
        assert [w.visible for w in p.info()] == ["fake0", "fake1"]
    with gpupool.Pool(processes=1, fake_gpus=4, gpus="2,3") as p:
        assert [w.visible for w in p.info()] == ["fake2"]


@pytest.mark.parametrize("args, kw, exc", [
    ((3,), {"fake_gpus": 2}, ValueError),     # not a multiple of 2 GPUs
    ((4,), {"fake_gpus": 2, "per_gpu": 3}, ValueError),  # disagree
    ((0,), {"fake_gpus": 2}, ValueError),
    ((-1,), {"fake_gpus": 2}, ValueError),
    (("2",), {"fake_gpus": 2}, TypeError),
    ((1,), {"fake_gpus": 1, "maxtasksperchild": 0}, ValueError),
    ((1,), {"fake_gpus": 1, "maxtasksperchild": 2,
            "max_tasks_per_worker": 3}, ValueError),
    ((1,), {"fake_gpus": 1, "initializer": 1}, TypeError),
    ((1,), {"fake_gpus": 1, "context": "vfork"}, ValueError),
    ((1,), {"fake_gpus": 1, "start_method": "fork",
            "context": multiprocessing.get_context("spawn")}, ValueError),
    # gpupool's own keywords: ValueError naming the keyword, never
    # accepted as something else (issue 33, point 8).
    ((), {"fake_gpus": 1, "per_gpu": 0}, ValueError),
    ((), {"fake_gpus": 1, "nice": "5"}, ValueError),
    ((), {"fake_gpus": 1, "max_msg": 1}, ValueError),
    ((), {"fake_gpus": 1, "retries": "2"}, ValueError),
    ((), {"fake_gpus": 1, "retries": 10 ** 20}, ValueError),
    ((), {"fake_gpus": 2.5}, ValueError),
])
def test_bad_arguments_are_refused_before_any_fork(args, kw, exc):
    before = _fds()
    with pytest.raises(exc) as e:
        gpupool.Pool(*args, **kw)
    assert _fds() == before
    if not args:  # gpupool's keywords: the message names the bad one
        bad = [k for k in kw if k != "fake_gpus"] or ["fake_gpus"]
        assert str(e.value).startswith(bad[0] + "="), str(e.value)


@pytest.mark.parametrize("call", [
    lambda p: p.map(abs, range(10), chunksize=-1),
    lambda p: p.map(abs, range(10), chunksize=0),
    lambda p: p.map(abs, range(10), chunksize=1.5),
    lambda p: p.map_async(abs, range(10), chunksize=-1),
    lambda p: p.starmap_async(abs, [(1,)], chunksize=-1),
    lambda p: p.imap(abs, range(10), chunksize=-1),
    lambda p: p.imap_unordered(abs, range(10), window=-5),
    lambda p: p.imap(abs, range(10), window=0),
])
def test_bad_chunksize_or_window_is_a_value_error(call):
    """As CPython's imap ("Chunksize must be 1+"), at the call: no hang,
    no empty list, no "changed size"."""
    with gpupool.Pool(fake_gpus=1) as p:
        with pytest.raises(ValueError, match="chunksize|window"):
            call(p)
        assert p.map(abs, [-1, -2], chunksize=_np_int(1)) == [1, 2]


def _np_int(n):
    """A numpy int where numpy is installed (chunksize=len(a) // 4 of
    an array): taken as the int it is."""
    try:
        import numpy
    except ImportError:
        return n
    return numpy.int64(n)


def test_positional_arguments_are_multiprocessings(tmp_path):
    seen = tmp_path / "init"
    with gpupool.Pool(2, _touch, (str(seen),), 1, None, fake_gpus=2) as p:
        pids = [p.apply(pid) for _ in range(3)]
    assert seen.exists()
    assert len(set(pids)) == 3  # maxtasksperchild=1: a new worker each


def _touch(path):
    open(path, "a").close()


@pytest.mark.parametrize("name, method", [
    ("fork", "fork"), ("spawn", "spawn"), ("forkserver", "spawn")])
def test_contexts_are_start_methods(name, method):
    with gpupool.Pool(1, context=multiprocessing.get_context(name),
                      fake_gpus=1) as p:
        assert p.start_method == method
        assert p.apply(double, (4,)) == 8


def _fds():
    """Every descriptor of this process, as the file it names."""
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            out[fd] = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            pass  # the listing's own descriptor, closed by now
    return out


@pytest.mark.parametrize("kw", [
    {"gpus": "9", "fake_gpus": 2},            # was: fd 0 closed
    {"gpus": "0,x", "fake_gpus": 2},
    {"fake_gpus": 2, "initializer": lambda: 1 / 0},
    {"fake_gpus": 2, "busy_pct": 5},          # needs gpus="free"
])
def test_a_failed_pool_leaves_every_descriptor_as_it_was(kw):
    before = _fds()
    with pytest.raises(Exception):
        gpupool.Pool(**kw)
    assert _fds() == before
    os.fstat(0)


# -- multiprocessing.Pool's calls -------------------------------------------

def test_with_on_a_closed_or_joined_pool_is_value_error():
    p = gpupool.Pool(fake_gpus=1)
    with p:
        pass
    with pytest.raises(ValueError, match="Pool not running"):
        with p:
            pass
    p = gpupool.Pool(fake_gpus=1)
    p.close()
    with pytest.raises(ValueError):
        p.__enter__()
    p.join()


def test_async_results_and_their_callbacks():
    got, threads = [], []

    def cb(v):
        threads.append(threading.current_thread().name)
        got.append(v)

    with gpupool.Pool(fake_gpus=2) as p:
        r = p.apply_async(double, (21,), callback=cb)
        assert r.get(timeout=60) == 42 and r.successful()
        m = p.map_async(boom_on_3, range(10), chunksize=2, callback=cb,
                        error_callback=cb)
        with pytest.raises(Boom):
            m.get(timeout=60)
        assert m.ready() and not m.successful()
        s = p.starmap_async(pow, [(2, 3), (3, 2)], callback=cb)
        assert s.get(timeout=60) == [8, 9]
        r = p.apply_async(double, (1,))
        r.wait()
        assert r.ready() and r.get() == 2
    assert got[0] == 42 and isinstance(got[1], Boom) and got[2] == [8, 9]
    assert threads == ["gpupool-results"] * 3


def test_not_ready_is_value_error_and_get_times_out(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with gpupool.Pool(fake_gpus=1) as p:
        r = p.apply_async(read_fifo, (str(fifo),))
        with pytest.raises(ValueError):
            r.successful()
        with pytest.raises(multiprocessing.TimeoutError):
            r.get(timeout=0.01)
        with open(fifo, "wb") as f:
            f.write(b"x")
        assert r.get() == b"x"


def test_a_callback_that_raises_does_not_stop_the_pool(capfd):
    def bad(v):
        raise RuntimeError("callback went wrong")

    with gpupool.Pool(fake_gpus=1) as p:
        r = p.apply_async(double, (1,), callback=bad)
        assert r.get(timeout=60) == 2  # ready all the same
        assert p.apply_async(double, (2,), callback=bad).get(timeout=60) == 4
        assert p.map(double, [3]) == [6]
    err = capfd.readouterr().err
    assert err.count("RuntimeError: callback went wrong") == 2


def test_a_callback_may_wait_on_more_work():
    out = []
    with gpupool.Pool(fake_gpus=1) as p:
        r = p.apply_async(double, (1,),
                          callback=lambda v: out.append(p.apply(double, (v,))))
        r.wait(timeout=60)
        assert out == [4]


def test_pool_does_not_pickle():
    with gpupool.Pool(fake_gpus=1) as p:
        with pytest.raises(NotImplementedError):
            pickle.dumps(p)


# -- concurrent.futures ------------------------------------------------------

def test_executor_is_a_concurrent_futures_executor():
    with gpupool.Executor(2, fake_gpus=2) as ex:
        assert isinstance(ex, cf.Executor)
        assert ex.submit(capture, 1, fn=2, self=3).result() == \
            ((1,), {"fn": 2, "self": 3})
        assert list(ex.map(pow, [2, 3], [3, 2], chunksize=5)) == [8, 9]
        fs = [ex.submit(double, i) for i in range(6)]
        assert sorted(f.result() for f in cf.as_completed(fs)) == \
            [0, 2, 4, 6, 8, 10]
        done, _ = cf.wait(fs)
        assert done == set(fs)
        assert ex.pool.size() == 2 and len(ex.info()) == 2
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.submit(double, 1)
    with pytest.raises(RuntimeError):
        ex.map(double, [1])


def test_executor_map_is_lazy_with_a_timeout(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with gpupool.Executor(2, fake_gpus=2) as ex:
        it = ex.map(read_fifo, [str(fifo)], timeout=0.05)
        with pytest.raises(cf.TimeoutError):
            next(it)
        with open(fifo, "wb") as f:  # let the item end: shutdown waits
            f.write(b"x")


def test_shutdown_cancel_futures_cancels_the_queued(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    ex = gpupool.Executor(1, fake_gpus=1)
    first = ex.submit(read_fifo, str(fifo))
    rest = [ex.submit(double, i) for i in range(20)]
    while not first.running():  # sent to the worker: not cancelable
        threading.Event().wait(0.01)
    ex.shutdown(wait=False, cancel_futures=True)
    with open(fifo, "wb") as f:
        f.write(b"x")
    assert first.result(timeout=60) == b"x"
    cancelled = [f for f in rest if f.cancelled()]
    assert cancelled  # at most a batch was taken from the queue
    for f in rest:
        assert f.cancelled() or f.result(timeout=60) == 2 * rest.index(f)


# -- a submitted future always ends ------------------------------------------

@pytest.mark.parametrize("exc, raised", [
    (RuntimeError("no CUDA here"), RuntimeError),
    (SystemExit(3), pickle.UnpicklingError),
])
def test_a_result_that_does_not_unpickle_in_the_caller_fails_its_future(
        exc, raised):
    with gpupool.Pool(fake_gpus=1) as p:
        fut = p.submit(make_caller_only, exc)
        with pytest.raises(raised) as e:
            fut.result(timeout=60)
        assert isinstance(e.value, raised)
        with pytest.raises(raised):
            p.map(make_caller_only, [exc])
        assert p.map(double, [1, 2]) == [2, 4]  # the pool goes on


def test_an_argument_that_does_not_pickle_fails_its_future():
    with gpupool.Pool(fake_gpus=1) as p:
        fut = p.submit(double, threading.Lock())
        with pytest.raises(TypeError):
            fut.result(timeout=60)


def test_work_submitted_before_exit_still_runs(tmp_path):
    path, env = _script("""
        import os, gpupool
        def show(x):
            # One write a line: under PYTHONUNBUFFERED print() writes
            # its pieces one by one, and two workers' lines would mix.
            os.write(1, b"ran %d\\n" % x)
        p = gpupool.Pool(fake_gpus=2)
        for i in range(3):
            p.submit(show, i)
        r = p.apply_async(show, (3,))
        ex = gpupool.Executor(1, fake_gpus=1)
        ex.submit(show, 4)
    """, tmp_path)
    out = _run(path, env)
    assert sorted(out.split("\n")[:-1]) == ["ran %d" % i for i in range(5)]


def test_exit_with_an_unread_imap_over_a_hanging_item_ends(tmp_path):
    """Before: the exit waited for an item of the imap to end, for ever.
    The submit queued behind it runs, or, if the imap's own C call had
    taken it (it serves the submit queue too: 1 run in 5 on a loaded
    machine), ends with gpupool.Canceled when that call is stopped, as
    python.md says; it is never lost, nor waited for for ever."""
    path, env = _script("""
        import atexit, threading, gpupool
        def hang(x):
            if x == 1:
                threading.Event().wait()
            return x
        p = gpupool.Pool(fake_gpus=2, grace=0.1)
        it = p.imap(hang, [0, 1], chunksize=1)
        print(next(it), flush=True)  # 1 never ends: nothing else will
        f = p.submit(print, "submitted ran")
        def outcome():  # after the pool's own exit handler
            e = f.exception(0)
            print("submit", "ok" if e is None else type(e).__name__,
                  flush=True)
        atexit.register(outcome)
    """, tmp_path)
    assert _run(path, env).splitlines() in (
        ["0", "submitted ran", "submit ok"], ["0", "submit Canceled"])


# -- functions and the worker's globals ---------------------------------------

_GLOBALS_SCRIPT = """
    import sys
    {nocp}
    import gpupool
    model = None
    table = {{}}
    def load():                     # the initializer sets the globals
        global model
        model = "worker-model"
        table["k"] = "filled"
    def score(x):                   # there when the pool forks
        return (model, table.get("k"), x)
    with gpupool.Pool(fake_gpus=2, initializer=load) as pool:
        print(pool.map(score, [1, 2]), flush=True)
        def late(x):                # defined after the fork
            return (model, table.get("k"), x)
        try:
            print(pool.map(late, [1, 2]), flush=True)
            print(pool.submit(lambda: (model, table["k"])).result())
        except Exception as e:
            print(type(e).__name__, e)
        def score(x):               # changed after the fork
            return ("new", x)
        try:
            print(pool.map(score, [1]), flush=True)
        except Exception as e:
            print(type(e).__name__, e)
"""


def test_functions_see_the_workers_globals_with_cloudpickle(tmp_path):
    pytest.importorskip("cloudpickle")
    path, env = _script(_GLOBALS_SCRIPT.format(nocp=""), tmp_path)
    lines = _run(path, env).splitlines()
    want = "[('worker-model', 'filled', 1), ('worker-model', 'filled', 2)]"
    assert lines[0] == want  # by reference: the worker's own function
    assert lines[1] == want  # by value, its globals the worker's
    assert lines[2] == "('worker-model', 'filled')"
    assert lines[3] == "[('new', 1)]"  # the caller's new code, by value


@pytest.mark.skipif(CLEAN, reason="by reference a forked worker has the "
                    "caller's functions; a clean one has only what its "
                    "script defines at the top level")
def test_functions_see_the_workers_globals_without_cloudpickle(tmp_path):
    path, env = _script(_GLOBALS_SCRIPT.format(
        nocp='sys.modules["cloudpickle"] = None'), tmp_path)
    lines = _run(path, env).splitlines()
    assert lines[0] == \
        "[('worker-model', 'filled', 1), ('worker-model', 'filled', 2)]"
    # A function the workers lack, or have in an old version: a clear
    # error in the caller, never the old code run.
    assert lines[1].startswith("PicklingError") and \
        "pip install cloudpickle" in lines[1]
    assert lines[2].startswith("PicklingError") and \
        "pip install cloudpickle" in lines[2]


# -- signals in an item --------------------------------------------------------

def write_to_a_closed_pipe(_):
    r, w = os.pipe()
    os.close(r)
    try:
        os.write(w, b"x")
    except BrokenPipeError:
        return "BrokenPipeError"
    finally:
        os.close(w)
    return "written"


def yes_into_head(_):
    return subprocess.run(["sh", "-c", "yes | head -1"], timeout=60,
                          capture_output=True, text=True).stdout


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_sigpipe_is_pythons_in_an_item(start_method):
    """As in multiprocessing's workers (and any Python process): a write
    to a closed pipe raises BrokenPipeError (the worker died of SIGPIPE
    before), and what the item runs gets SIGPIPE back (yes | head ends)."""
    with gpupool.Pool(fake_gpus=1, start_method=start_method) as p:
        assert p.map(write_to_a_closed_pipe, [0, 1]) == ["BrokenPipeError"] * 2
        assert p.map(yes_into_head, [0]) == ["y\n"]


# -- Ctrl-C -------------------------------------------------------------------

_CTRL_C = """
    import os, signal, sys, threading, gpupool
    def hang(x):
        threading.Event().wait()
    def double(x):
        return 2 * x
    def ctrl_c_once_waiting(names):
        # SIGINT to this process once the main thread waits in one of
        # the functions named (its stack says so): Ctrl-C while it waits,
        # on a Condition or in the C call it drives itself (_drive).
        main = threading.main_thread().ident
        while True:
            f, stack = sys._current_frames().get(main), set()
            while f is not None:
                stack.add(f.f_code.co_name)
                f = f.f_back
            if stack & {{"wait", "_drive"}} and stack & names:
                os.kill(os.getpid(), signal.SIGINT)
                return
            threading.Event().wait(0.01)
    if {caller_drives}:
        # The dispatcher thread starts only once some thread drives: the
        # main thread's wait then runs the queue in its own C call.
        dispatch = gpupool.Pool._dispatch
        def late_dispatch(self):
            for _ in range(3000):
                if self._owner is not None:
                    break
                threading.Event().wait(0.01)
            dispatch(self)
        gpupool.Pool._dispatch = late_dispatch
    p = gpupool.Pool(fake_gpus=1, grace=0.1)
    queued = [p.submit(hang, i) for i in range(20)]
    threading.Thread(target=ctrl_c_once_waiting, args=({names},)).start()
    try:
        {wait}
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
    # Nothing of what was queued or running may hold the next call back:
    # every item above hangs for ever.
    print("map", p.map(double, [1, 2]), flush=True)
    print("done", sum(f.done() for f in queued), len(queued))
    print("cancelled", sum(f.cancelled() for f in queued), flush=True)
    p.close()
    p.join()
"""


@pytest.mark.parametrize("caller_drives", [False, True])
@pytest.mark.parametrize("wait, names", [
    ("queued[0].result()", {"result"}),
    ("p.apply_async(hang, (0,)).get()", {"get"}),
    ("next(p.imap(hang, [0]))", {"results"}),
])
def test_ctrl_c_while_waiting_stops_what_is_queued(tmp_path, wait, names,
                                                   caller_drives):
    """Before: the queued futures ran on after Ctrl-C (here, for ever:
    the next map never ran). caller_drives: result() and get() drive the
    queue in the caller's own C call (Pool._help), as they do whenever
    the dispatcher thread has not taken it first (CI's first run)."""
    path, env = _script(_CTRL_C.format(wait=wait, names=names,
                                       caller_drives=caller_drives), tmp_path)
    lines = _run(path, env).splitlines()
    assert lines[:3] == ["KeyboardInterrupt", "map [2, 4]", "done 20 20"]
    # Those still queued are canceled (cancelled() is True); the few the
    # running call had taken fail with gpupool.Canceled.
    assert int(lines[3].split()[1]) > 0


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_workers_outlive_the_thread_that_made_them(start_method,
                                                  monkeypatch):
    """PR_SET_PDEATHSIG fires when the thread that forked a worker ends:
    before, a pool made in a thread (or a worker replaced by imap's
    helper thread) lost its workers when that thread ended, and an item
    of the next call could fail with WorkerCrashed (SIGKILL). (A fork
    off the main thread is refused as unsafe: this case forces it, the
    main thread holding no lock the items take.)"""
    if start_method == "fork":
        monkeypatch.setattr(gpupool._start, "fork_unsafe", lambda: None)
    made = {}

    def make():
        made["tid"] = threading.get_native_id()
        made["pool"] = gpupool.Pool(fake_gpus=2, start_method=start_method)

    t = threading.Thread(target=make)
    t.start()
    t.join()
    task = "/proc/self/task/%d" % made["tid"]
    for _ in range(30000):  # gone from /proc: its exit is over
        if not os.path.exists(task):
            break
        threading.Event().wait(0.001)
    assert not os.path.exists(task)
    with made["pool"] as p:
        pids = {w.pid for w in p.info()}
        assert set(p.map(pid, range(8), chunksize=1)) <= pids
        assert {w.pid for w in p.info()} == pids


# -- real libraries as items and results --------------------------------------

def frame_stats(df):
    return df.describe(), df.sum()


def test_numpy_and_pandas_objects_travel():
    np = pytest.importorskip("numpy")
    pd = pytest.importorskip("pandas")
    frames = [pd.DataFrame({"a": np.arange(i, i + 100),
                            "b": np.linspace(0, 1, 100)}) for i in range(4)]
    with gpupool.Pool(2, fake_gpus=2) as p:
        got = p.map(frame_stats, frames, chunksize=1)
        arrs = p.map_async(np.sqrt, [np.arange(10.0), np.ones((3, 3))]).get()
    for df, (desc, total) in zip(frames, got):
        pd.testing.assert_frame_equal(desc, df.describe())
        pd.testing.assert_series_equal(total, df.sum())
    np.testing.assert_array_equal(arrs[0], np.sqrt(np.arange(10.0)))
    with gpupool.Executor(1, fake_gpus=1) as ex:
        s = ex.submit(pd.Series.cumsum, pd.Series([1, 2, 3])).result()
    assert list(s) == [1, 3, 6]


def _limit_blas():
    global _limits
    from threadpoolctl import threadpool_limits
    _limits = threadpool_limits(1)  # kept: the limit holds while it lives


def blas_threads(_):
    import numpy  # noqa: F401 (its BLAS: a clean worker has not loaded it)
    from threadpoolctl import threadpool_info
    return sorted({i["num_threads"] for i in threadpool_info()
                   if i["user_api"] == "blas"})


def test_threadpoolctl_limit_set_by_the_initializer_holds():
    pytest.importorskip("threadpoolctl")
    pytest.importorskip("numpy")
    with gpupool.Pool(2, initializer=_limit_blas, fake_gpus=2) as p:
        assert p.map(blas_threads, range(4), chunksize=1) == [[1]] * 4


def jax_sum(n):
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax.numpy as jnp
    return float(jnp.sum(jnp.arange(n)))


def test_jax_in_the_workers():
    """JAX initialised in the workers only (the caller never runs it, so
    a replacement forked later is safe): each worker computes."""
    pytest.importorskip("jax")
    with gpupool.Executor(2, fake_gpus=2) as ex:
        assert list(ex.map(jax_sum, [10, 100])) == [45.0, 4950.0]
