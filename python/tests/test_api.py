"""The Python API (gpupool.Pool and friends) over fake GPUs.

No test synchronises by timing: a worker that must wait blocks on a FIFO
or an Event that never fires (then a timeout or a cancel ends it), and a
subprocess is driven by the lines it prints. The only durations are the
pool's own timeout/grace, set small so those tests stay short.
"""

import ctypes
import inspect
import itertools
import os
import pickle
import pydoc
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time
import types
from concurrent.futures import CancelledError

import pytest

import gpupool

try:
    import numpy
except ImportError:
    numpy = None

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(gpupool.__file__)))


@pytest.fixture
def pool():
    with gpupool.Pool(fake_gpus=2) as p:
        yield p


def children():
    """Pids of this process's children, from /proc."""
    me, out = os.getpid(), set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                    out.add(int(d))
        except (OSError, ValueError, IndexError):
            pass
    return out


# Worker functions: module level, so they travel by reference.

class Boom(Exception):
    pass


def double(x):
    return 2 * x


def raise_boom(x):
    if x == 3:
        raise Boom("item %d went boom" % x)
    return x


def segv_on_3(x):
    if x == 3:
        ctypes.string_at(0)  # SIGSEGV in this worker
    return x


def exit_on_3(x):
    if x == 3:
        os._exit(7)
    return x


def hang_on_1(x):
    if x == 1:
        threading.Event().wait()
    return x


def imported():
    """An initializer that does nothing: a clean worker, unpickling it,
    imports this module at its start, before any item's timeout runs."""


def crash_once(path):
    """Crashes the first time it sees path, succeeds after."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return "second attempt"
    os.close(fd)
    os._exit(1)


_init_seen = None


def record_env(tag):
    global _init_seen
    _init_seen = (tag, os.environ.get("CUDA_VISIBLE_DEVICES"))


def report_env(_):
    c = gpupool.current()
    return (_init_seen, os.environ.get("CUDA_VISIBLE_DEVICES"), c.gpu,
            c.visible, c.pid == os.getpid())


def bad_init():
    raise ValueError("bad init for this test")


def read_fifo(path):
    with open(path, "rb") as f:
        return f.read(1)


def sized(b):
    return len(b)


# -- results --------------------------------------------------------------

def test_map_order_and_values_1e5(pool):
    n = 10 ** 5
    assert pool.map(double, range(n)) == [2 * i for i in range(n)]


def test_map_empty_and_chunksize(pool):
    assert pool.map(double, []) == []
    assert pool.map(double, range(7), chunksize=3) == [0, 2, 4, 6, 8, 10, 12]
    assert pool.starmap(pow, [(2, 3), (3, 2)]) == [8, 9]


def test_default_chunks_of_big_elements_stay_near_a_mib(pool):
    # Trivial items: len / (4 x workers), at most 16384, as before.
    assert pool._chunksize(1000, 7) == 125
    assert pool._chunksize(10 ** 6, 7) == 16384
    assert pool._chunksize(1000, "a string: not a buffer") == 125
    # Big ones, by the first element's bytes: about 1 MiB a chunk.
    assert pool._chunksize(128, bytes(1 << 20)) == 1
    assert pool._chunksize(128, bytearray(3 << 20)) == 1
    assert pool._chunksize(128, memoryview(bytes(256 << 10))) == 4
    assert pool._chunksize(1000, bytes(100)) == 125
    if numpy is not None:
        assert pool._chunksize(128, numpy.zeros(1 << 15)) == 4  # 256 KiB
    big = [bytes([i]) * (1 << 20) for i in range(9)]
    assert pool.map(sized, big) == [1 << 20] * 9


def test_imap_ordered_and_unordered(pool):
    assert list(pool.imap(double, iter(range(1000)), chunksize=7)) == \
        [2 * i for i in range(1000)]
    assert sorted(pool.imap_unordered(double, range(1000))) == \
        [2 * i for i in range(1000)]


def test_imap_early_break_then_pool_goes_on(pool):
    got = []
    for r in pool.imap(double, itertools.count()):  # endless input
        got.append(r)
        if len(got) == 5:
            break
    assert got == [0, 2, 4, 6, 8]
    assert pool.map(double, range(10)) == [2 * i for i in range(10)]


def test_imap_unordered_1e6_from_generator_bounded_rss(pool):
    def rss_kib():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])

    n = 10 ** 6
    # 1e6 items of ~130 bytes: held at once they would take > 130 MB.
    gen = (b"%099d" % i for i in range(n))
    before = rss_kib()
    peak, count, total = before, 0, 0
    for r in pool.imap_unordered(sized, gen, chunksize=1000):
        count += 1
        total += r
        if count % 10000 == 0:
            peak = max(peak, rss_kib())
    assert count == n and total == 99 * n
    assert peak - before < 40 * 1024, "caller grew %d KiB" % (peak - before)


def test_imap_input_error_reaches_caller(pool):
    def gen():
        yield 1
        yield 2
        raise KeyError("input broke")

    it = pool.imap(double, gen())
    assert next(it) == 2
    assert next(it) == 4
    with pytest.raises(KeyError, match="input broke"):
        next(it)


def test_submit_futures_beside_map(pool):
    futs = [pool.submit(pow, 2, i) for i in range(20)]
    assert pool.map(double, range(100)) == [2 * i for i in range(100)]
    assert [f.result() for f in futs] == [2 ** i for i in range(20)]
    f = pool.submit(raise_boom, 3)
    with pytest.raises(Boom):
        f.result()
    assert isinstance(f.exception().__cause__, gpupool.RemoteTraceback)


# -- errors ---------------------------------------------------------------

def test_exception_type_and_remote_traceback(pool):
    with pytest.raises(Boom, match="item 3 went boom") as ei:
        pool.map(raise_boom, range(10), chunksize=1)
    cause = ei.value.__cause__
    assert isinstance(cause, gpupool.RemoteTraceback)
    assert "raise_boom" in cause.tb and "Boom" in cause.tb
    import traceback
    shown = "".join(traceback.format_exception(ei.value))
    assert "RemoteTraceback" in shown and "raise_boom" in shown


def test_return_exceptions_gives_outcomes(pool):
    res = pool.map(raise_boom, range(6), chunksize=1, return_exceptions=True)
    assert res[:3] == [0, 1, 2] and res[4:] == [4, 5]
    assert isinstance(res[3], Boom)


def test_segfault_fails_one_item_and_pool_goes_on(pool):
    res = pool.map(segv_on_3, range(8), chunksize=1, return_exceptions=True)
    assert [r for i, r in enumerate(res) if i != 3] == [0, 1, 2, 4, 5, 6, 7]
    assert isinstance(res[3], gpupool.WorkerCrashed)
    assert res[3].signal == signal.SIGSEGV
    with pytest.raises(gpupool.WorkerCrashed):
        pool.map(segv_on_3, range(8), chunksize=1)
    assert pool.map(double, range(100)) == [2 * i for i in range(100)]
    assert len(pool.info()) == 2 and all(w.pid > 0 for w in pool.info())


def test_os_exit_is_worker_crashed_with_code(pool):
    res = pool.map(exit_on_3, range(5), chunksize=1, return_exceptions=True)
    assert isinstance(res[3], gpupool.WorkerCrashed)
    assert res[3].exitcode == 7 and res[3].signal is None
    assert res[4] == 4
    assert pool.map(double, [1]) == [2]


def test_timeout():
    # A clean worker would import this module to unpickle hang_on_1 in
    # its first item's 0.5 s (0.4 s of it under load): the initializer has
    # each worker, and the one replacing the worker stopped, import it
    # before taking an item.
    with gpupool.Pool(fake_gpus=2, timeout=0.5, grace=0.1,
                      initializer=imported) as p:
        res = p.map(hang_on_1, range(4), return_exceptions=True)
        assert res[0] == 0 and res[2:] == [2, 3]
        assert isinstance(res[1], gpupool.Timeout)
        assert isinstance(res[1], TimeoutError)
        assert p.map(double, [5]) == [10]


@pytest.mark.parametrize("kw", [dict(timeout=0), dict(timeout=-5),
                                dict(timeout=float("nan")), dict(grace=0),
                                dict(grace=-1), dict(timeout=float("inf")),
                                dict(timeout=1e300), dict(grace="1")])
def test_timeout_and_grace_must_be_positive(kw):
    before = children()
    with pytest.raises(ValueError, match="positive number of seconds"):
        gpupool.Pool(fake_gpus=1, **kw)
    assert children() == before  # refused before forking anything


def test_retries(tmp_path):
    with gpupool.Pool(fake_gpus=1, retries=2) as p:
        assert p.map(crash_once, [str(tmp_path / "a")]) == ["second attempt"]
    with gpupool.Pool(fake_gpus=1) as p:
        with pytest.raises(gpupool.WorkerCrashed):
            p.map(crash_once, [str(tmp_path / "b")])


def test_unpicklable_result_is_an_item_error(pool):
    res = pool.map(_make_lock, [0, 1], chunksize=1, return_exceptions=True)
    assert all(isinstance(r, pickle.PicklingError) for r in res)


def _make_lock(_):
    return threading.Lock()


# -- environment, initializer, placement ------------------------------------

def test_environ_in_worker_and_initializer():
    with gpupool.Pool(fake_gpus=2, initializer=record_env,
                      initargs=("tag",)) as p:
        res = p.map(report_env, range(8), chunksize=1)
        assert {r[2] for r in res} <= {0, 1}
        for (tag, init_env), env, gpu, visible, own in res:
            assert tag == "tag" and own
            assert env is not None and init_env == env == visible
        assert sorted(w.gpu for w in p.info()) == [0, 1]
    assert gpupool.current() is None


def test_initializer_that_raises_is_clear_at_pool():
    with pytest.raises(gpupool.InitError) as ei:
        gpupool.Pool(fake_gpus=1, initializer=bad_init)
    assert "bad_init" in str(ei.value)
    assert "bad init for this test" in str(ei.value)


def niceness(_):
    return os.getpriority(os.PRIO_PROCESS, 0)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_nice_is_the_workers_niceness(method):
    """nice=N: every worker, and so every item, runs at niceness N
    (absolute, as os.setpriority takes it); this process stays at its
    own."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert own < 19, "at niceness 19 already: the case cannot tell"
    want = min(own + 3, 19)
    with gpupool.Pool(fake_gpus=2, nice=want, start_method=method) as p:
        assert p.map(niceness, range(8), chunksize=1) == [want] * 8
    assert os.getpriority(os.PRIO_PROCESS, 0) == own


@pytest.mark.parametrize("bad", [20, -21, "x", "5", 2.5, True])
def test_nice_out_of_range_is_a_value_error(bad):
    with pytest.raises(ValueError, match=r"nice=.*: must be an int from "
                       r"-20 to 19"):
        gpupool.Pool(fake_gpus=1, nice=bad)


# A value each kind of row takes, and one it refuses (flags take any
# truth; gpus, any text or list).
_GOOD = {"gpus": "free", "flag": True, "count": None, "int": None,
         "size": "1G", "path": "none", "secs": 0}


def _rows():
    from gpupool import _gpupool
    return [r for r in _gpupool.pool_options() if r[1] is not None]


def test_every_option_row_is_a_pool_keyword(monkeypatch):
    """Each row of the library's options (src/opts.def) that has a
    Python keyword is one of Pool's: in inspect.signature(Pool), keyword
    only, default None; in help(gpupool.Pool) with its help line;
    accepted with a good value; and a bad one is a ValueError naming it.
    A row that Python and the rows disagree on fails here."""
    monkeypatch.setenv("GPUPOOL_NVML", "/nonexistent/libnvidia-ml.so.1")
    params = inspect.signature(gpupool.Pool).parameters
    doc = pydoc.render_doc(gpupool.Pool, renderer=pydoc.plaintext)
    kw = {}
    for name, py, kind, lo, hi, dflt, help_ in _rows():
        assert py in params, py
        assert params[py].kind is inspect.Parameter.KEYWORD_ONLY, py
        assert params[py].default is None, py
        assert "%s: %s" % (py, help_) in doc, py
        kw[py] = _GOOD[kind] if _GOOD[kind] is not None else \
            min(max(0, lo), hi)
        if kind not in ("flag", "gpus"):
            with pytest.raises(ValueError, match="^%s=" % py):
                gpupool.Pool(fake_gpus=1, **{py: object()})
    with gpupool.Pool(fake_gpus=2, **kw) as p:
        assert p.map(double, range(4)) == [0, 2, 4, 6]
    with pytest.raises(TypeError, match="unexpected keyword argument "
                       "'no_such_option'"):
        gpupool.Pool(fake_gpus=1, no_such_option=1)


def test_nice_under_ours_needs_the_privilege():
    """Under this process's niceness without the privilege (in a child:
    RLIMIT_NICE 0 and, as root, another effective uid, which clears the
    effective capabilities): Pool() raises InitError with the library's
    reason, not blaming an initializer."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert own > -20
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        msg = "no error"
        try:
            resource.setrlimit(resource.RLIMIT_NICE, (0, 0))
            if os.geteuid() == 0:
                os.seteuid(65534)
            gpupool.Pool(fake_gpus=1, nice=own - 1, start_method="fork")
        except BaseException as e:
            msg = "%s: %s" % (type(e).__name__, e)
        finally:
            os.write(w, msg.encode()[:4000])
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        msg = f.read()
    assert os.waitpid(pid, 0)[1] == 0
    assert msg.startswith("InitError: gpupool.Pool(): a worker could not "
                          "start"), msg
    assert ("cannot run at niceness %d: Permission denied" % (own - 1)
            in msg), msg
    assert "CAP_SYS_NICE" in msg, msg


def test_fork_refused_when_torch_initialised_cuda(monkeypatch, capfd):
    """torch says CUDA is initialised: a forced fork is refused before
    anything forks; left to choose, the workers start clean, saying why
    in one line."""
    state = {"init": True}
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_initialized=lambda: state["init"])
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.delenv("GPUPOOL_START_METHOD", raising=False)
    before = children()
    with pytest.raises(RuntimeError, match="torch.cuda.is_initialized"):
        gpupool.Pool(fake_gpus=1, start_method="fork")
    assert children() == before  # refused before forking anything
    capfd.readouterr()
    with gpupool.Pool(fake_gpus=1) as p:
        assert p.start_method == "spawn"
        assert p.map(double, [1]) == [2]
    err = capfd.readouterr().err.splitlines()
    assert err == ["gpupool: workers start clean (spawn), not forked: CUDA "
                   "is initialised in this process: "
                   "torch.cuda.is_initialized() is True"]
    state["init"] = False
    with gpupool.Pool(fake_gpus=1) as p:
        assert p.start_method == "fork"
        assert p.map(double, [1]) == [2]


def test_module_level_map(monkeypatch):
    monkeypatch.setenv("GPUPOOL_FAKE_GPUS", "2")
    try:
        assert gpupool.map(abs, [-1, -2]) == [1, 2]
    finally:
        gpupool.shutdown()


# -- threads, signals, children -----------------------------------------------

def test_caller_thread_runs_during_map(pool, tmp_path):
    """The worker's item reads a FIFO that only a caller thread writes:
    the map ends only if that thread runs while the map waits."""
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    ran = []

    def writer():
        with open(fifo, "wb") as f:
            f.write(b"x")
        ran.append(True)

    t = threading.Thread(target=writer)
    t.start()
    assert pool.map(read_fifo, [fifo]) == [b"x"]
    t.join()
    assert ran == [True]


def test_close_join_terminate_leave_no_child():
    before = children()
    p = gpupool.Pool(fake_gpus=2)
    assert len(children() - before) == 2
    p.close()
    p.join()
    assert children() == before
    p = gpupool.Pool(fake_gpus=2)
    fut = p.submit(hang_on_1, 1)  # never ends by itself
    p.terminate()
    # Still queued: canceled (cancelled() is True); already running: the
    # worker was stopped (Canceled, a CancelledError too, or a crash).
    with pytest.raises((CancelledError, gpupool.WorkerCrashed)):
        fut.result()
    assert children() == before
    with pytest.raises(ValueError):
        p.map(double, [1])


# What a script may call: kids(), how many children this process has now.
_SCRIPT_HEAD = """\
import os


def kids():
    n = 0
    for d in os.listdir("/proc"):
        try:
            st = open("/proc/%s/stat" % d).read()
            n += int(st.rsplit(")", 1)[1].split()[1]) == os.getpid()
        except (OSError, ValueError, IndexError):
            pass
    return n
"""


def _guarded(body):
    """The script's body under if __name__ == "__main__": as a script must
    be for workers that start clean (each runs it again). A fork ignores
    the guard."""
    return 'if __name__ == "__main__":\n' + textwrap.indent(
        textwrap.dedent(body), "    ")


# The third pass of run.sh: every pool starts its workers clean.
CLEAN = os.environ.get("GPUPOOL_START_METHOD") == "spawn"


def _script(body, tmp_path, env_extra=None, guard=True):
    path = tmp_path / "script.py"
    path.write_text(_SCRIPT_HEAD + (_guarded(body) if guard else
                                    textwrap.dedent(body)))
    env = dict(os.environ, PYTHONPATH=PKG_DIR)
    env.pop("GPUPOOL_FAKE_GPUS", None)
    env.update(env_extra or {})
    return path, env


def _interrupt(path, env):
    """Run the script, which prints "workers 2", then "started" from an
    item, and on KeyboardInterrupt its children: SIGINT it once the item
    started; it must exit 0 with no child left. Returns what it printed
    after "started"."""
    proc = subprocess.Popen([sys.executable, str(path)], env=env,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().split() == ["workers", "2"]
    assert proc.stdout.readline() == "started\n"
    proc.send_signal(signal.SIGINT)
    rest = proc.stdout.read()
    assert proc.wait(timeout=120) == 0
    assert "KeyboardInterrupt children 0" in rest
    return rest


def test_keyboard_interrupt_during_map_leaves_no_child(tmp_path):
    path, env = _script("""
        import os, sys, threading, gpupool
        def f(x):
            os.write(1, b"started\\n")
            threading.Event().wait()
        try:
            with gpupool.Pool(fake_gpus=2, grace=0.1) as p:
                print("workers", kids(), flush=True)
                p.map(f, range(4), chunksize=1)
        except KeyboardInterrupt:
            print("KeyboardInterrupt children", kids(), flush=True)
    """, tmp_path)
    _interrupt(path, env)


def test_keyboard_interrupt_during_submit_result_leaves_no_child(tmp_path):
    """result() may drive the pool in the main thread (no dispatcher
    hop): Ctrl-C there raises KeyboardInterrupt, the future ends, no child
    is left."""
    path, env = _script("""
        import os, sys, threading, gpupool
        def f(x):
            os.write(1, b"started\\n")
            threading.Event().wait()
        fut = None
        try:
            with gpupool.Pool(fake_gpus=2, grace=0.1) as p:
                print("workers", kids(), flush=True)
                fut = p.submit(f, 1)
                fut.result()
        except KeyboardInterrupt:
            print("KeyboardInterrupt children", kids(), flush=True)
            print("future done", fut.done(), flush=True)
    """, tmp_path)
    rest = _interrupt(path, env)
    assert "future done True" in rest


def test_function_defined_in_main_after_pool(tmp_path):
    pytest.importorskip("cloudpickle")
    path, env = _script("""
        import gpupool
        with gpupool.Pool(fake_gpus=2) as p:
            k = 3
            def late(x):
                return x * k
            print(p.map(late, range(5)), p.submit(lambda: 7).result())
    """, tmp_path)
    out = subprocess.run([sys.executable, str(path)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "[0, 3, 6, 9, 12] 7"


@pytest.mark.skipif(CLEAN, reason="by reference a forked worker has the "
                    "caller's functions; a clean one has only what its "
                    "script defines at the top level")
def test_function_in_main_without_cloudpickle_names_the_fix(tmp_path):
    path, env = _script("""
        import pickle, sys
        sys.modules["cloudpickle"] = None  # as if not installed
        import gpupool
        def early(x):
            return -x
        with gpupool.Pool(fake_gpus=1) as p:
            print(p.map(early, [1]), flush=True)  # by reference: fine
            def late(x):
                return x
            try:
                p.map(late, [1])
            except pickle.PicklingError as e:
                print("late:", e, flush=True)
            try:
                p.map(lambda x: x, [1])
            except pickle.PicklingError as e:
                print("lambda:", e, flush=True)
    """, tmp_path)
    out = subprocess.run([sys.executable, str(path)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "[-1]"
    assert lines[1].startswith("late:") and "pip install cloudpickle" in \
        lines[1]
    assert lines[2].startswith("lambda:") and "pip install cloudpickle" in \
        lines[2]


def test_progress_plain_line(pool, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # as if not installed
    assert pool.map(double, range(50), progress=True) == \
        [2 * i for i in range(50)]
    err = capsys.readouterr().err
    assert "gpupool: 50/50 items" in err


# -- lifecycle details ---------------------------------------------------------

_state = []


def remember(x):
    """Worker state survives between items: what an initializer loads
    (a model) is there for every item the worker runs."""
    _state.append(x)
    return os.getpid(), len(_state)


def test_worker_state_persists_between_items():
    with gpupool.Pool(fake_gpus=1) as p:
        res = p.map(remember, range(5), chunksize=1)
    assert len({pid for pid, _ in res}) == 1
    assert [n for _, n in res] == [1, 2, 3, 4, 5]


def test_fn_exception_is_not_retried(tmp_path):
    with gpupool.Pool(fake_gpus=1, retries=3) as p:
        with pytest.raises(Boom):
            p.map(raise_boom, [3])


def test_leaving_with_block_ends_an_unread_imap():
    before = children()
    with gpupool.Pool(fake_gpus=2) as p:
        it = p.imap(double, itertools.count())
        assert next(it) == 0
    # it is still referenced: join() must not wait for a reader
    assert children() == before
    with pytest.raises(gpupool.Canceled):
        list(it)


def test_terminate_during_imap_reaches_the_reader():
    p = gpupool.Pool(fake_gpus=2)
    it = p.imap(hang_on_1, range(4), chunksize=1)
    assert next(it) == 0  # item 1 hangs: the reader waits on it next
    p.terminate()
    with pytest.raises((gpupool.Canceled, gpupool.WorkerCrashed)):
        next(it)


def test_pool_fds_are_close_on_exec():
    import fcntl

    def inheritable():
        out = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                if not fcntl.fcntl(int(fd), fcntl.F_GETFD) & fcntl.FD_CLOEXEC:
                    out.add(int(fd))
            except OSError:
                pass
        return out

    before = inheritable()
    with gpupool.Pool(fake_gpus=2) as p:
        p.map(double, range(10))
        assert inheritable() <= before
    assert inheritable() <= before


def test_maps_from_two_threads_take_turns(pool):
    out = {}

    def run(tag):
        out[tag] = pool.map(double, range(tag, tag + 2000), chunksize=10)

    ts = [threading.Thread(target=run, args=(t,)) for t in (0, 5000)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert out[0] == [2 * i for i in range(2000)]
    assert out[5000] == [2 * i for i in range(5000, 7000)]


# -- fast paths (py-perf) --------------------------------------------------

def fail_some(x):
    if x % 5 == 2:
        raise Boom("item %d went boom" % x)
    if x == 9:
        raise StopIteration("item 9")
    return x * 10


def test_chunk_with_failures_keeps_every_other_value(pool):
    """A worker runs a chunk in one C loop and resumes after a failure:
    each failure is its own element's, the rest keep their values (a
    StopIteration from fn included, which would end a plain map())."""
    res = pool.map(fail_some, range(23), chunksize=23,
                   return_exceptions=True)
    for x, r in enumerate(res):
        if x % 5 == 2:
            assert isinstance(r, Boom) and str(r) == "item %d went boom" % x
            assert "fail_some" in r.__cause__.tb
        elif x == 9:
            assert isinstance(r, StopIteration)
        else:
            assert r == x * 10
    with pytest.raises(Boom, match="item 2 went boom"):
        pool.map(fail_some, range(23), chunksize=23)


def test_map_reads_lists_tuples_and_ranges_as_given(pool):
    assert pool.map(double, range(3, 1000, 7), chunksize=10) == \
        [2 * i for i in range(3, 1000, 7)]
    assert pool.map(double, tuple(range(50))) == [2 * i for i in range(50)]
    xs = list(range(50))
    assert pool.map(double, xs, chunksize=4) == [2 * i for i in xs]
    assert xs == list(range(50))


def test_submit_result_drives_the_pool_in_the_caller():
    """result() on a pending submit runs the C call in the calling thread
    when no call runs; futures, errors and maps beside it are as before."""
    with gpupool.Pool(fake_gpus=2) as p:
        for i in range(50):
            assert p.submit(pow, 2, i).result() == 2 ** i
            assert p.map(double, [i]) == [2 * i]
        f = p.submit(raise_boom, 3)
        assert isinstance(f.exception(), Boom)
        futs = [p.submit(pow, 3, i) for i in range(20)]
        assert [f.result() for f in reversed(futs)] == \
            [3 ** i for i in reversed(range(20))]
        done = []
        t = threading.Thread(target=lambda: done.append(
            [p.submit(pow, 5, i).result() for i in range(30)]))
        t.start()
        assert [p.submit(pow, 7, i).result() for i in range(30)] == \
            [7 ** i for i in range(30)]
        t.join()
        assert done == [[5 ** i for i in range(30)]]


def wait_for_file(path):
    """Until path exists (60 s at most): whether it came."""
    for _ in range(6000):
        if os.path.exists(path):
            return True
        time.sleep(0.01)
    return False


def touch(path):
    open(path, "w").close()
    return os.getpid()


@pytest.mark.parametrize("waiter", ["main", "thread", "executor"])
def test_a_submit_starts_on_an_idle_worker_while_others_run(tmp_path,
                                                             waiter):
    """A submit made while a submitted item runs starts at once on an
    idle worker, whichever thread drives the pool (the dispatcher, or a
    result() waiting), not after the running item ends: here that item
    ends only once the later submit has run (the old code: it waited 60 s
    for a submit held behind it, and said False)."""
    mark = str(tmp_path / "mark")
    make = gpupool.Executor if waiter == "executor" else gpupool.Pool
    kw = {"max_workers": 4} if waiter == "executor" else {"processes": 4}
    with make(fake_gpus=4, **kw) as p:
        slow = p.submit(wait_for_file, mark)
        if waiter == "thread":  # a result() drives the call, maybe
            got = []
            t = threading.Thread(target=lambda: got.append(slow.result()))
            t.start()
        assert p.submit(pow, 2, 3).result() == 8  # the call is under way
        assert p.submit(touch, mark).result(timeout=60) > 0
        assert slow.result(timeout=120) is True
        if waiter == "thread":
            t.join()
            assert got == [True]


def test_a_submit_nobody_drives_runs_all_the_same():
    """A submit is driven by the thread that waits on its result(), or by
    the dispatcher thread when nobody does: futures awaited only by
    concurrent.futures.wait() or as_completed(), which drive nothing,
    still run (the dispatcher's kick, _drive.py KICK_S)."""
    from concurrent.futures import as_completed, wait
    with gpupool.Pool(fake_gpus=2) as p:
        for _ in range(3):  # each burst after the pool went idle
            futs = [p.submit(double, i) for i in range(100)]
            got = sorted(f.result(timeout=0) for f in
                         as_completed(futs, timeout=60))
            assert got == [2 * i for i in range(100)]
            done, left = wait([p.submit(double, 5)], timeout=60)
            assert not left and done.pop().result(timeout=0) == 10


def test_a_submit_awaited_by_a_callback_only_runs(tmp_path):
    """A submit whose only waiter is a done callback (asyncio's
    wrap_future, joblib, apply_async's callback) runs without a thread
    calling result(), and so does one nobody waits for."""
    ev = threading.Event()
    got = []
    mark = str(tmp_path / "mark")
    with gpupool.Pool(fake_gpus=2) as p:
        p.submit(double, 4).add_done_callback(
            lambda f: (got.append(f.result()), ev.set()))
        assert ev.wait(60) and got == [8]
        ev.clear()
        p.apply_async(double, (6,), callback=lambda v: (got.append(v),
                                                          ev.set()))
        assert ev.wait(60) and got == [8, 12]
        p.submit(touch, mark)  # nobody waits: the dispatcher runs it
        assert wait_for_file(mark)



def signal_then_wait_for(path):
    os.kill(os.getppid(), signal.SIGUSR1)
    return wait_for_file(path)


def test_a_submit_during_a_lone_result_starts_beside_it(tmp_path):
    """result() drives its submit alone (_drive.py, _One) while the queue
    holds nothing else; a submit that comes meanwhile from another thread
    (one a signal handler starts, and the running item waits for it)
    starts at once on an idle worker, not after that item: the call
    parks, and the submit wakes it."""
    mark = str(tmp_path / "mark")
    later = []

    def submit_later():
        time.sleep(0.2)  # the call has parked by then
        later.append(p.submit(touch, mark))

    old = signal.signal(signal.SIGUSR1, lambda *a: threading.Thread(
        target=submit_later).start())
    try:
        with gpupool.Pool(fake_gpus=2) as p:
            assert p.submit(signal_then_wait_for, mark).result() is True
            assert later and later[0].result(timeout=60) > 0
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_a_result_drives_only_where_no_other_thread_could_submit(tmp_path):
    """A waiting result() drives the pool in its own thread only where no
    thread but gpupool's could submit meanwhile (Driver._help,
    _threads.alone()): gpupool's threads (the dispatcher, an imap's
    driver, the result thread) do not count; another thread does, from
    its start to its end; a short-lived one of gpupool's leaves the count
    as it was."""
    path, env = _script("""
        import threading
        import gpupool
        from gpupool import _threads
        def double(x):
            return 2 * x
        with gpupool.Pool(fake_gpus=2) as p:
            print(_threads.alone(), flush=True)
            f = p.submit(double, 1)  # the dispatcher
            it = p.imap(double, range(50))  # its driver thread
            p.apply_async(double, (2,), callback=print).get()  # results
            print(_threads.alone(), f.result(), flush=True)
            ev = threading.Event()
            t = threading.Thread(target=ev.wait)
            t.start()
            print(_threads.alone(), p.submit(double, 3).result(), flush=True)
            ev.set()
            t.join()
            print(_threads.alone(), sum(it), flush=True)
            threading.Thread(target=lambda: print(_threads.alone(),
                                                  flush=True)).start()
    """, tmp_path)
    out = subprocess.run([sys.executable, str(path)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "4", "True", "2", "False", "6",
                                  "True", "2450", "False"]

def test_submits_from_several_threads_each_waiting(pool):
    """Several threads each submitting and waiting on their own results
    (none of them may drive for the others, Driver._help), beside a
    thread that submits nothing and only blocks: every result comes."""
    stop = threading.Event()
    idle = threading.Thread(target=stop.wait)  # a foreign thread, idle
    idle.start()
    try:
        assert pool.submit(double, 21).result() == 42  # _help declines
        out = {}

        def loop(k):
            out[k] = [pool.submit(double, k * 100 + i).result()
                      for i in range(50)]

        ts = [threading.Thread(target=loop, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert out == {k: [2 * (k * 100 + i) for i in range(50)]
                       for k in range(4)}
    finally:
        stop.set()
        idle.join()


SCALE = 2


def test_function_by_value_sees_the_workers_globals_and_its_closure(pool):
    """A function sent by value (a lambda) runs with its module's globals
    as the worker has them: a global the worker had when it forked keeps
    the worker's value (a change in the caller after Pool() is not seen,
    as with any forked worker); one the worker lacks comes from the
    caller, at each call. Closure cells travel with each call."""
    pytest.importorskip("cloudpickle")
    global SCALE, LATE
    f = lambda x: x * SCALE  # noqa: E731 (by value: not importable)
    try:
        assert pool.submit(f, 5).result() == 10
        SCALE = 3
        assert pool.submit(f, 5).result() == 10  # the worker's SCALE
        assert pool.map(f, [1, 2]) == [2, 4]
    finally:
        SCALE = 2
    g = lambda x: x + LATE  # noqa: E731,F821 (LATE: not in the workers)
    try:
        LATE = 1
        assert pool.submit(g, 1).result() == 2
        LATE = 10
        assert pool.submit(g, 1).result() == 11
    finally:
        del LATE
    box = [1]
    g = lambda x: x + box[0]  # noqa: E731 (a mutable cell: never kept)
    assert pool.submit(g, 1).result() == 2
    box[0] = 10
    assert pool.submit(g, 1).result() == 11
    for k in (1, 2):
        h = (lambda k: lambda x: x * k)(k)
        assert pool.submit(h, 7).result() == 7 * k
