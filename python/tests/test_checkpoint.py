"""Checkpoints: map(fn, items, checkpoint=PATH) and resuming from one.

Runs of a driver are counted through a side file: every item appends
"index driver-pid" to it when it starts (one O_APPEND write, atomic), so
a test knows which items ran, in which run, and how often. Drivers that
must be killed or interrupted are subprocesses, killed once the side
file shows them past a point (never after a sleep); their waits are
bounded generously (a loaded 2-core machine).
"""

import hashlib
import os
import pickle
import random
import shutil
import signal
import stat
import struct
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest

import gpupool
from gpupool import _checkpoint

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(gpupool.__file__)))
WAIT = 300  # seconds: a bound, never a pace


@pytest.fixture
def pool(side):
    """Forked after the side file is named: workers see $GP_SIDE."""
    with gpupool.Pool(fake_gpus=2) as p:
        yield p


# Worker functions: module level, so they travel by reference. Each
# appends "index pid-of-its-driver" to $GP_SIDE when it starts.

def _mark(i):
    fd = os.open(os.environ["GP_SIDE"], os.O_WRONLY | os.O_APPEND |
                 os.O_CREAT, 0o644)
    try:
        os.write(fd, b"%d %d\n" % (i, os.getppid()))
    finally:
        os.close(fd)


def triple(i):
    _mark(i)
    return 3 * i + 1


def flaky(i):
    """Fails for multiples of 7 unless $GP_FIXED is set."""
    _mark(i)
    if i % 7 == 0 and not os.environ.get("GP_FIXED"):
        raise ValueError("item %d failed" % i)
    return -i


def unpicklable(i):
    _mark(i)
    return threading.Lock() if i == 2 else i


def add(a, b):
    _mark(a)
    return a + b


def side_lines(path):
    try:
        with open(path) as f:
            return [tuple(map(int, line.split())) for line in f
                    if line.endswith("\n")]
    except FileNotFoundError:
        return []


def ran(path):
    """How often each item ran, by the side file."""
    counts = {}
    for i, _ in side_lines(path):
        counts[i] = counts.get(i, 0) + 1
    return counts


def covered(path):
    """Item -> how many chunk records cover it."""
    _, recs = _checkpoint.records(path)
    out = {}
    for start, count, _ in recs:
        for i in range(start, start + count):
            out[i] = out.get(i, 0) + 1
    return out


@pytest.fixture
def side(tmp_path, monkeypatch):
    p = str(tmp_path / "side")
    monkeypatch.setenv("GP_SIDE", p)
    monkeypatch.delenv("GP_FIXED", raising=False)
    return p


# -- map: resume, failures, changes -----------------------------------------

def test_second_call_runs_nothing_and_new_items_only(pool, tmp_path, side):
    ck = str(tmp_path / "ck")
    want = [3 * i + 1 for i in range(500)]
    assert pool.map(triple, range(500), checkpoint=ck) == want
    assert ran(side) == dict.fromkeys(range(500), 1)
    assert pool.map(triple, range(500), checkpoint=ck) == want
    assert ran(side) == dict.fromkeys(range(500), 1)
    # A longer list: only the new items run; a shorter one runs nothing.
    assert pool.map(triple, list(range(520)), checkpoint=ck) == \
        [3 * i + 1 for i in range(520)]
    assert ran(side) == dict.fromkeys(range(520), 1)
    # A shorter list: what it cuts at a recorded chunk's end runs
    # nothing; a chunk it cuts in the middle cannot be checked (its
    # digest is of all its items), so its items in the list run again.
    assert pool.map(triple, range(126), checkpoint=ck) == want[:126]
    assert ran(side) == dict.fromkeys(range(520), 1)
    assert pool.map(triple, range(100), checkpoint=ck) == want[:100]
    c = ran(side)
    assert [i for i in c if c[i] == 2] == list(range(63, 100))


def test_empty_map_and_chunks_of_one(pool, tmp_path, side):
    ck = str(tmp_path / "ck")
    assert pool.map(triple, [], checkpoint=ck) == []
    assert pool.map(triple, range(30), chunksize=1, checkpoint=ck) == \
        [3 * i + 1 for i in range(30)]
    _, recs = _checkpoint.records(ck)
    assert sorted(r[:2] for r in recs) == [(i, 1) for i in range(30)]


def test_big_items_are_recorded_a_chunk_each(pool, tmp_path):
    # The default chunk of 1 MiB elements is one element, so is a record
    # (24 items over 2 workers were chunks of 3 by count alone).
    ck = str(tmp_path / "ck")
    big = [bytes([i]) * (1 << 20) for i in range(24)]
    assert pool.map(len, big, checkpoint=ck) == [1 << 20] * 24
    _, recs = _checkpoint.records(ck)
    assert sorted(r[:2] for r in recs) == [(i, 1) for i in range(24)]


def test_failures_come_back_as_map_gives_them(pool, tmp_path, side):
    ck = str(tmp_path / "ck")
    r = pool.map(flaky, range(50), checkpoint=ck, return_exceptions=True)
    bad = [i for i, v in enumerate(r) if isinstance(v, ValueError)]
    assert bad == [0, 7, 14, 21, 28, 35, 42, 49]
    # Not run again: the same exception, in its place or raised, with
    # the worker's traceback.
    r = pool.map(flaky, range(50), checkpoint=ck, return_exceptions=True)
    assert [str(v) for v in r if isinstance(v, ValueError)] == \
        ["item %d failed" % i for i in bad]
    with pytest.raises(ValueError, match=r"item \d+ failed") as ei:
        pool.map(flaky, range(50), checkpoint=ck)
    assert isinstance(ei.value.__cause__, gpupool.RemoteTraceback)
    assert "raise ValueError" in ei.value.__cause__.tb
    assert ran(side) == dict.fromkeys(range(50), 1)
    # rerun_failed: only the failed items run, and now succeed.
    os.environ["GP_FIXED"] = "1"
    with gpupool.Pool(fake_gpus=2) as fixed:
        r = fixed.map(flaky, range(50), checkpoint=gpupool.Checkpoint(
            ck, rerun_failed=True))
    assert r == [-i for i in range(50)]
    counts = ran(side)
    assert [i for i in range(50) if counts[i] == 2] == bad
    assert max(counts.values()) == 2
    # The later record wins from now on, without rerun_failed.
    assert pool.map(flaky, range(50), checkpoint=ck) == r
    assert ran(side) == counts


def test_first_failure_raised_is_the_first_recorded(pool, tmp_path, side):
    """Without return_exceptions the first run raises its first failure
    and records what ended before; the next raises a failure at once,
    running nothing."""
    ck = str(tmp_path / "ck")
    with pytest.raises(ValueError):
        pool.map(flaky, range(1, 200), chunksize=1, checkpoint=ck)
    before = ran(side)
    with pytest.raises(ValueError, match=r"item \d+ failed"):
        pool.map(flaky, range(1, 200), chunksize=1, checkpoint=ck)
    assert ran(side) == before


def test_unpicklable_result_is_recorded_as_its_error(pool, tmp_path, side):
    ck = str(tmp_path / "ck")
    r = pool.map(unpicklable, range(5), checkpoint=ck,
                 return_exceptions=True)
    assert isinstance(r[2], gpupool.EncodingError) and r[:2] == [0, 1]
    r = pool.map(unpicklable, range(5), checkpoint=ck,
                 return_exceptions=True)
    assert isinstance(r[2], gpupool.EncodingError) and r[3:] == [3, 4]
    assert ran(side) == dict.fromkeys(range(5), 1)


def test_changed_items_are_refused_naming_them(pool, tmp_path, side):
    ck = str(tmp_path / "ck")
    pool.map(triple, range(100), checkpoint=ck)
    pool.starmap(add, [(i, 1) for i in range(100)], chunksize=10,
                 checkpoint=str(tmp_path / "star"))
    changed = [(i, 1) for i in range(100)]
    changed[42] = (42, 2)
    size = os.path.getsize(tmp_path / "star")
    with pytest.raises(gpupool.CheckpointError) as ei:
        pool.starmap(add, changed, chunksize=10,
                     checkpoint=str(tmp_path / "star"))
    assert "items 40-49 of this call differ" in str(ei.value)
    assert str(tmp_path / "star") in str(ei.value)
    assert os.path.getsize(tmp_path / "star") == size  # nothing written
    # changed="rerun": that chunk runs again, with a warning; then the
    # default mode accepts the file (the change is recorded).
    before = ran(side)
    with pytest.warns(gpupool.CheckpointWarning, match="items 40-49"):
        r = pool.starmap(add, changed, chunksize=10, checkpoint=gpupool.
                         Checkpoint(str(tmp_path / "star"),
                                    changed="rerun"))
    assert r == [a + b for a, b in changed]
    after = ran(side)
    assert {i for i in after if after[i] != before.get(i)} == \
        set(range(40, 50))
    assert pool.starmap(add, changed, chunksize=10,
                        checkpoint=str(tmp_path / "star")) == r
    # A different function on the same file: refused.
    with pytest.raises(gpupool.CheckpointError, match="records the "
                       "results of .*:triple, not of .*:flaky"):
        pool.map(flaky, range(100), checkpoint=ck)


def test_digest_rule(tmp_path):
    """Equal pickles, equal digests; what pickles differently (a dict in
    another order, a list for a tuple) is another item; ranges and lists
    of the same ints are the same elements."""
    d = _checkpoint.digest
    assert d([{"a": 1, "b": 2}]) == d([{"a": 1, "b": 2}])
    assert d([{"a": 1, "b": 2}]) != d([{"b": 2, "a": 1}])
    assert d([(1, 2)]) != d([[1, 2]])
    assert d(range(5)) == d([0, 1, 2, 3, 4])
    assert d([1.0]) != d([1])
    assert d([memoryview(b"abc")]) == d([memoryview(b"abc")])
    assert d([memoryview(b"abc")]) != d([memoryview(b"abd")])


def test_digest_is_of_the_whole_pickle_from_its_parts():
    """A checkpoint written before the digest was taken from pickle's
    parts must resume: the digest is still BLAKE2b-128 of pickle.dumps()'s
    bytes, for items that span many of pickle's frames and big bytes it
    hands over whole."""
    big = bytes(range(256)) * 4096
    for items in ([big, big[1:], 7], list(range(100000)),
                  [(i, big[:70000]) for i in range(4)]):
        p = pickle.dumps(items, protocol=5)
        assert _checkpoint.digest(items) == hashlib.blake2b(
            p, digest_size=16).digest()


def test_digest_across_interpreters(tmp_path):
    """What a resumed run relies on: the same items digest the same in
    another interpreter (a lambda in an item included, with cloudpickle);
    what docs/python.md says does not (a set of strings, whose order
    follows the hash seed)."""
    s = tmp_path / "d.py"
    s.write_text(textwrap.dedent("""
        import sys
        from gpupool import _checkpoint as c
        class K:
            def __init__(self, v):
                self.v = v
        out = [c.digest([1, "a", (2.0, b"x"), {"k": [1, None]}, K(3),
                         range(4)])]
        try:  # a chunk plain pickle refuses: all of it by cloudpickle
            out.append(c.digest([(5, lambda x: x + 1), "b"]))
        except Exception:  # no cloudpickle: a lambda cannot travel
            out.append(b"")
        out.append(c.digest([{"a", "b", "c", "d"}]))
        out.append(c.digest([K(3), lambda x: x]) if len(out[1]) else b"")
        print(*[d.hex() or "-" for d in out])
    """))
    outs = [subprocess.run([sys.executable, str(s)], capture_output=True,
                           text=True, timeout=WAIT, env=_env(
                               {"PYTHONHASHSEED": seed})).stdout.split()
            for seed in ("1", "2", "1")]
    stable = [o[:2] for o in outs]
    assert stable[0] == stable[1] == stable[2]
    # A set of strings: as its hash seed; a class of __main__ pickled by
    # value (beside a lambda): a fresh id each run, whatever the seed.
    assert outs[0][2] == outs[2][2] != outs[1][2]
    if outs[0][3] != "-":
        assert outs[0][3] != outs[2][3]


def test_numpy_items_and_results(pool, tmp_path, side):
    np = pytest.importorskip("numpy")
    ck = str(tmp_path / "ck")
    big = [np.full(100_000, i, dtype=np.int64) for i in range(6)]
    r = pool.map(np.negative, big, chunksize=1, checkpoint=ck)
    r2 = pool.map(np.negative, big, chunksize=1, checkpoint=ck)
    assert all((a == -b).all() and (a == c).all()
               for a, b, c in zip(r, big, r2))
    r2[0][0] = 7  # arrays read back are writable, of their own
    big[3][5] = -1  # a changed array is a changed item
    with pytest.raises(gpupool.CheckpointError, match="items 3-3"):
        pool.map(np.negative, big, chunksize=1, checkpoint=ck)


# -- imap -------------------------------------------------------------------

def test_imap_resumes_from_a_generator(pool, tmp_path, side):
    ck = str(tmp_path / "ck")
    it = pool.imap(triple, (i for i in range(200)), checkpoint=ck)
    got = [next(it) for _ in range(50)]
    it.close()  # stopped early: the rest canceled
    assert got == [3 * i + 1 for i in range(50)]
    # (records() waits for the stream to release the file, once its
    # items in flight end.)
    recorded = covered(ck)
    assert set(range(50)) <= set(recorded)
    before = ran(side)
    out = list(pool.imap(triple, (i for i in range(200)), checkpoint=gpupool.
                         Checkpoint(ck, wait=True)))
    assert out == [3 * i + 1 for i in range(200)]
    counts = ran(side)
    assert all(counts[i] == before[i] for i in recorded)
    assert set(counts) == set(range(200))
    # Unordered, and map, read what imap wrote.
    assert sorted(pool.imap_unordered(triple, range(200), checkpoint=ck)) \
        == sorted(out)
    assert pool.map(triple, range(200), checkpoint=ck) == out
    assert ran(side) == counts


def test_imap_failures_and_changes(pool, tmp_path, side):
    ck = str(tmp_path / "ck")
    r = list(pool.imap(flaky, range(30), chunksize=3, checkpoint=ck,
                       return_exceptions=True))
    assert [i for i, v in enumerate(r) if isinstance(v, ValueError)] == \
        [0, 7, 14, 21, 28]
    # (Each stream below ends early: the next waits for it to release
    # the file.)
    wait = gpupool.Checkpoint(ck, wait=True)
    it = pool.imap(flaky, range(30), chunksize=3, checkpoint=wait)
    with pytest.raises(ValueError, match="item 0 failed"):
        next(it)
    changed = list(range(30))
    changed[10] = 99
    it = pool.imap(flaky, changed, chunksize=3, checkpoint=wait,
                   return_exceptions=True)
    assert [repr(next(it)) for _ in range(9)] == [repr(v) for v in r[:9]]
    with pytest.raises(gpupool.CheckpointError, match="items 9-11"):
        next(it)
    assert ran(side) == dict.fromkeys(range(30), 1)


# -- one call per file ------------------------------------------------------

_HEAD = """
import os, sys, time, gpupool
sys.path.insert(0, %r)
from test_checkpoint import triple, flaky, _mark
""" % os.path.dirname(os.path.abspath(__file__))


def _script(tmp_path, name, body):
    p = tmp_path / name
    p.write_text(_HEAD + textwrap.dedent(body))
    return str(p)


def _env(extra=None):
    env = dict(os.environ, PYTHONPATH=PKG_DIR)
    env.pop("GPUPOOL_FAKE_GPUS", None)
    env.update(extra or {})
    return env


def _ck_and_fifo(tmp_path):
    """A checkpoint path, and a FIFO an item blocks on until the test
    writes it (or for ever)."""
    os.mkfifo(tmp_path / "fifo")
    return str(tmp_path / "ck"), str(tmp_path / "fifo")


def _wait_lines(side, n, proc=None):
    """Until the side file has n lines (or proc ended)."""
    end = time.monotonic() + WAIT
    while len(side_lines(side)) < n:
        if proc is not None and proc.poll() is not None:
            return
        assert time.monotonic() < end, "side file stuck at %d lines" % \
            len(side_lines(side))
        time.sleep(0.01)


def test_second_driver_refused_naming_the_first_then_waits(tmp_path, side):
    ck, fifo = _ck_and_fifo(tmp_path)
    a = _script(tmp_path, "a.py", """
        def gated(i):
            _mark(i)
            if i == 0:
                open(sys.argv[2]).read()  # until the test writes
            return i * 10
        with gpupool.Pool(fake_gpus=2) as p:
            r = p.map(gated, range(40), chunksize=1, checkpoint=sys.argv[1])
        print("a done", r == [i * 10 for i in range(40)], flush=True)
    """)
    # b's pool claims no GPU: this is a test of the checkpoint's lock,
    # which a pool waiting for a's GPUs would reach only once a ended.
    b = _script(tmp_path, "b.py", """
        def gated(i):
            _mark(i)
            return i * 10
        with gpupool.Pool(fake_gpus=2, claims="none") as p:
            try:
                p.map(gated, range(40), checkpoint=sys.argv[1])
            except gpupool.CheckpointError as e:
                print("busy", e.pid, flush=True)
                print(e, flush=True)
            r = p.map(gated, range(40), checkpoint=gpupool.Checkpoint(
                sys.argv[1], wait=True))
        print("b done", r == [i * 10 for i in range(40)], flush=True)
    """)
    pa = subprocess.Popen([sys.executable, a, ck, fifo], env=_env(),
                          stdout=subprocess.PIPE, text=True)
    try:
        _wait_lines(side, 1)
        pb = subprocess.Popen([sys.executable, b, ck], env=_env(),
                              stdout=subprocess.PIPE, text=True)
        busy = pb.stdout.readline().split()
        assert busy == ["busy", str(pa.pid)]
        msg = pb.stdout.readline()
        assert "is in use by process %d" % pa.pid in msg and ck in msg
        with open(fifo, "w") as f:
            f.write("go")
        assert pa.stdout.read() == "a done True\n"
        assert pb.stdout.read() == "b done True\n"
        assert pa.wait(WAIT) == 0 and pb.wait(WAIT) == 0
    finally:
        for p in (pa,):
            if p.poll() is None:
                p.kill()
    # B ran nothing: every item ran once, in A.
    assert {pid for _, pid in side_lines(side)} == {pa.pid}
    assert ran(side) == dict.fromkeys(range(40), 1)


def test_in_process_second_call_is_refused(pool, tmp_path, side):
    ck = str(tmp_path / "ck")
    go = threading.Event()

    def items():
        yield 0
        go.wait()
        yield 1

    # The stream holds the file from imap() on: its input blocks.
    it = pool.imap(triple, items(), checkpoint=ck)
    try:
        with pytest.raises(gpupool.CheckpointError,
                           match="in use by process %d .*in this process"
                           % os.getpid()):
            pool.map(triple, range(10), checkpoint=ck)
    finally:
        go.set()
    assert list(it) == [1, 4]


def segv_on_3(i):
    _mark(i)
    if i == 3:
        import ctypes
        ctypes.string_at(0)
    return i


def test_replacement_workers_do_not_hold_the_lock(tmp_path, side):
    """A worker forked during a call (replacing one that crashed) has
    the checkpoint's descriptor: the after-fork hook closes it, so the
    lock ends with the call."""
    ck = str(tmp_path / "ck")
    with gpupool.Pool(fake_gpus=2) as p:
        r = p.map(segv_on_3, range(8), chunksize=1, checkpoint=ck,
                  return_exceptions=True)
        assert isinstance(r[3], gpupool.WorkerCrashed)
        # The replacement is alive and idle; another process can lock.
        out = subprocess.run(
            [sys.executable, "-c", "import gpupool._checkpoint as c, sys; "
             "c._File(c.Checkpoint(sys.argv[1]), None).close()", ck],
            env=_env(), timeout=WAIT, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        kids = [int(k) for k in os.listdir("/proc") if k.isdigit()]
        for k in kids:
            try:
                fds = os.listdir("/proc/%d/fd" % k)
            except OSError:
                continue
            for fd in fds:
                try:
                    target = os.readlink("/proc/%d/fd/%s" % (k, fd))
                except OSError:
                    continue
                assert not (target == ck and k != os.getpid()), \
                    "process %d holds the checkpoint" % k


def test_terminate_during_a_map_records_no_crash(tmp_path, side):
    """terminate() kills the workers: the items it kills did not fail,
    and run again next time."""
    ck, fifo = _ck_and_fifo(tmp_path)
    s = _script(tmp_path, "t.py", """
        import threading
        def gated(i):
            _mark(i)
            if i >= 4:
                open(sys.argv[2]).read()  # never written
            return i
        p = gpupool.Pool(fake_gpus=2)
        def stop():
            while True:
                try:
                    if sum(1 for _ in open(os.environ["GP_SIDE"])) >= 6:
                        break
                except FileNotFoundError:
                    pass
                time.sleep(0.01)
            p.terminate()
        threading.Thread(target=stop).start()
        try:
            p.map(gated, range(8), chunksize=1, checkpoint=sys.argv[1])
        except (gpupool.Canceled, gpupool.WorkerCrashed):
            # (Which one map raises depends on whether a killed item's
            # end or the stop is seen first.)
            print("canceled", flush=True)
    """)
    out = subprocess.run([sys.executable, s, ck, fifo], env=_env(),
                         timeout=WAIT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "canceled"
    _, recs = _checkpoint.records(ck)
    assert recs and all(status == gpupool.OK and start < 4
                        for start, _, status in recs)


# -- the driver killed ------------------------------------------------------

_KILLED = """
import random
def work(i):
    _mark(i)
    time.sleep(random.Random(i).random() * 0.002)
    return i * i - 1
with gpupool.Pool(fake_gpus=2) as p:
    r = p.map(work, range(2000), chunksize=int(sys.argv[2]),
              checkpoint=sys.argv[1])
assert r == [i * i - 1 for i in range(2000)]
print("done", flush=True)
"""


def _stat(path):
    """A /proc stat file's (state, start time); None once it is gone."""
    try:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], fields[19]


def _stopped_children(pid):
    """Once every thread of pid has stopped: its children, as {pid: start
    time} (the start time tells a reused pid from the child)."""
    end = time.monotonic() + WAIT
    while True:
        try:
            tasks = os.listdir("/proc/%d/task" % pid)
        except OSError:
            return {}
        states = [_stat("/proc/%d/task/%s/stat" % (pid, t)) for t in tasks]
        if all(st is None or st[0] in "tTZX" for st in states):
            break
        assert time.monotonic() < end, "process %d does not stop" % pid
        time.sleep(0.001)
    kids = {}
    for t in tasks:
        try:
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                for k in f.read().split():
                    st = _stat("/proc/%s/stat" % k)
                    if st is not None:
                        kids[int(k)] = st[1]
        except FileNotFoundError:
            pass  # a thread that ended
    return kids


def _kill_driver(proc):
    """SIGKILL the driver proc; return once it and every worker it had
    are gone. Its reaping is not enough: a worker may still be inside
    its mark's write then, or run on a moment before its death signal
    ends it, and the test would count before that mark lands. Stopped
    first, the driver forks no worker unseen."""
    proc.send_signal(signal.SIGSTOP)
    kids = _stopped_children(proc.pid)
    proc.kill()
    proc.wait(WAIT)
    end = time.monotonic() + WAIT
    for k, start in kids.items():
        while True:
            st = _stat("/proc/%d/stat" % k)
            if st is None or st[1] != start or st[0] in "ZX":
                break
            assert time.monotonic() < end, "worker %d outlived its " \
                "driver" % k
            time.sleep(0.001)


@pytest.mark.parametrize("chunksize", [1, 16])
def test_driver_sigkilled_six_times_then_completes(tmp_path, side,
                                                   chunksize):
    """Every item's result ends up recorded exactly once and right; an
    item recorded is never run again; the items a kill makes run again
    are those in flight at it: at most one chunk per worker."""
    ck = str(tmp_path / "ck")
    s = _script(tmp_path, "k.py", _KILLED)
    rnd = random.Random(chunksize)
    recorded, again, kills = set(), 0, 0
    while kills < 6:
        start = len(side_lines(side))
        proc = subprocess.Popen([sys.executable, s, ck, str(chunksize)],
                                env=_env(), stdout=subprocess.PIPE,
                                text=True)
        _wait_lines(side, start + rnd.randrange(1, 300), proc)
        _kill_driver(proc)
        kills += 1
        # This run's marks: the lines it added. A worker that asked
        # getppid() as its driver died has init's pid (or a subreaper's).
        mine = {i for i, _ in side_lines(side)[start:]}
        assert not mine & recorded, "recorded items ran again"
        cov = covered(ck)
        assert set(cov.values()) <= {1}
        lost = mine - set(cov)
        assert len(lost) <= 2 * chunksize, lost
        again += len(lost)
        recorded = set(cov)
    proc = subprocess.run([sys.executable, s, ck, str(chunksize)],
                          env=_env(), capture_output=True, text=True,
                          timeout=WAIT)
    assert proc.returncode == 0 and proc.stdout == "done\n", proc.stderr
    assert covered(ck) == dict.fromkeys(range(2000), 1)
    counts = ran(side)
    assert set(counts) == set(range(2000))
    assert sum(counts.values()) - 2000 == again


def test_ctrl_c_then_rerun(tmp_path, side):
    ck, fifo = _ck_and_fifo(tmp_path)
    s = _script(tmp_path, "c.py", """
        def gated(i):
            _mark(i)
            if i >= 50 and not os.environ.get("GP_FIXED"):
                open(sys.argv[2]).read()  # never written
            return i + 0.5
        try:
            with gpupool.Pool(fake_gpus=2, grace=0.1) as p:
                r = p.map(gated, range(100), chunksize=1,
                          checkpoint=sys.argv[1])
                print("done", r == [i + 0.5 for i in range(100)])
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, s, ck, fifo], env=_env(),
                            stdout=subprocess.PIPE, text=True)
    _wait_lines(side, 52)  # 50 and 51 started: each worker's item
    proc.send_signal(signal.SIGINT)  # before them was recorded
    assert proc.stdout.read() == "interrupted\n"
    assert proc.wait(WAIT) == 0
    assert set(covered(ck)) == set(range(50))
    out = subprocess.run([sys.executable, s, ck, fifo],
                         env=_env({"GP_FIXED": "1"}), capture_output=True,
                         text=True, timeout=WAIT)
    assert out.stdout == "done True\n", out.stderr
    second = [i for i, pid in side_lines(side) if pid != proc.pid]
    assert sorted(second) == list(range(50, 100))


# -- the file: torn, damaged, foreign ---------------------------------------

def test_torn_tail_at_every_cut(pool, tmp_path, side):
    """A checkpoint cut anywhere (a kill or a power cut in the middle of
    a write): what is whole is kept, the rest runs again, the torn tail
    is cut off before anything is appended."""
    ck = str(tmp_path / "ck")
    want = pool.map(triple, range(40), chunksize=4, checkpoint=ck)
    whole = open(ck, "rb").read()
    recs = _checkpoint.records(ck)[1]
    cuts = sorted(set([len(whole) - 1, len(whole) - 30, len(whole) // 2] +
                      random.Random(1).sample(range(len(whole)), 40)))
    for cut in cuts:
        with open(ck, "wb") as f:
            f.write(whole[:cut])
        before = ran(side)
        assert pool.map(triple, range(40), chunksize=4, checkpoint=ck) == \
            want
        assert covered(ck) == dict.fromkeys(range(40), 1), cut
        assert whole_records(ck), "the torn tail was left at %d" % cut
        now = ran(side)
        assert {i for i in now if now[i] != before[i]} == set(range(40)) - \
            set(covered_by(recs, whole, cut)), cut


def whole_records(path):
    """Whether the file is its header line and whole records, end to
    end: nothing torn left inside."""
    b = open(path, "rb").read()
    off = len(_checkpoint._LINE)
    while off < len(b):
        if b[off:off + 4] != _checkpoint._MAGIC:
            return False
        off += _checkpoint._HLEN + struct.unpack_from("<Q", b, off + 24)[0]
    return off == len(b)


def covered_by(recs, whole, cut):
    """Items whose record lies whole within whole[:cut], walking the
    records as written (the description first): header, payload."""
    out, off = [], len(_checkpoint._LINE)
    off += _checkpoint._HLEN + struct.unpack_from(
        "<Q", whole, off + 24)[0]
    for start, count, _ in recs:
        plen = struct.unpack_from("<Q", whole, off + 24)[0]
        end = off + _checkpoint._HLEN + plen
        if end <= cut:
            out.extend(range(start, start + count))
        off = end
    return out


def test_damaged_record_in_the_middle_is_skipped(pool, tmp_path, side):
    ck = str(tmp_path / "ck")
    want = pool.map(triple, range(40), chunksize=4, checkpoint=ck)
    b = bytearray(open(ck, "rb").read())
    recs = _checkpoint.records(ck)[1]
    # The third chunk record's header: zeros, as a power cut leaves.
    off = len(_checkpoint._LINE)
    for k in range(3):
        off += _checkpoint._HLEN + struct.unpack_from("<Q", b, off + 24)[0]
    b[off:off + 20] = bytes(20)
    open(ck, "wb").write(b)
    lost = recs[2]
    assert pool.map(triple, range(40), chunksize=4, checkpoint=ck) == want
    c = ran(side)
    assert [i for i in c if c[i] == 2] == list(range(lost[0],
                                                     lost[0] + lost[1]))
    # A payload that fails its CRC: as if not recorded.
    b = bytearray(open(ck, "rb").read())
    b[-3] ^= 0xff
    open(ck, "wb").write(b)
    assert pool.map(triple, range(40), chunksize=4, checkpoint=ck) == want


@pytest.mark.parametrize("content,match", [
    (b"hello world\n", "is not a gpupool checkpoint"),
    (b"gpupool checkpoint 2 little\n", "of format 2, written by a newer"),
    (b"gpupool checkpoint 1 %s\n" % (b"big" if sys.byteorder == "little"
                                     else b"little"), "-endian machine"),
    (b"\x00" * 100, "is not a gpupool checkpoint"),
])
def test_foreign_and_newer_files_are_refused_untouched(pool, tmp_path, side,
                                                        content, match):
    ck = tmp_path / "ck"
    ck.write_bytes(content + b"more")
    with pytest.raises(gpupool.CheckpointError, match=match) as ei:
        pool.map(triple, range(3), checkpoint=str(ck))
    assert ei.value.path == str(ck)
    assert ck.read_bytes() == content + b"more"
    assert ran(side) == {}


def test_torn_header_starts_afresh(pool, tmp_path, side):
    ck = tmp_path / "ck"
    ck.write_bytes(_checkpoint._LINE[:10])
    assert pool.map(triple, range(3), checkpoint=str(ck)) == [1, 4, 7]
    assert _checkpoint.records(str(ck))[0]["fn"].endswith(":triple")


def test_not_a_regular_file_or_a_link(pool, tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(gpupool.CheckpointError, match="not a regular"):
        pool.map(abs, [1], checkpoint=str(tmp_path / "fifo"))
    os.symlink(tmp_path / "elsewhere", tmp_path / "link")
    with pytest.raises(gpupool.CheckpointError, match="symbolic link"):
        pool.map(abs, [1], checkpoint=str(tmp_path / "link"))
    assert not (tmp_path / "elsewhere").exists()


def test_options_are_checked(pool, tmp_path):
    for kw in ({"changed": "ignore"}, {"wait": -1}, {"sync": "often"}):
        with pytest.raises(ValueError):
            gpupool.Checkpoint(tmp_path / "x", **kw)
    with pytest.raises(TypeError):
        pool.map(abs, [1], checkpoint=3)
    # sync=0 (every chunk) and None (at the end only) both record.
    for s in (0, None):
        p = tmp_path / ("s%s" % s)
        assert pool.map(abs, [-1, -2], checkpoint=gpupool.Checkpoint(
            p, sync=s)) == [1, 2]
        assert pool.map(abs, [-1, -2], checkpoint=p) == [1, 2]


def test_module_level_map_and_imap(tmp_path, side, monkeypatch):
    monkeypatch.setenv("GPUPOOL_FAKE_GPUS", "2")
    ck = str(tmp_path / "ck")
    try:
        assert gpupool.map(triple, range(20), checkpoint=ck) == \
            [3 * i + 1 for i in range(20)]
        assert list(gpupool.imap(triple, range(20), checkpoint=ck)) == \
            [3 * i + 1 for i in range(20)]
        assert sorted(gpupool.imap_unordered(triple, range(20),
                                             checkpoint=ck)) == \
            [3 * i + 1 for i in range(20)]
    finally:
        gpupool.shutdown()
    assert ran(side) == dict.fromkeys(range(20), 1)


# -- full disk, read-only -----------------------------------------------------

_DISK = """
def big(i):
    _mark(i)
    return bytes([i % 256]) * 10000
ck = sys.argv[1]
with gpupool.Pool(fake_gpus=2) as p:
    try:
        p.map(big, range(60), chunksize=1, checkpoint=ck)
        print("no error")
    except gpupool.CheckpointError as e:
        print("error", e.path == ck, flush=True)
        print(e, flush=True)
    recs = gpupool._checkpoint.records(ck)[1]
    print("recorded", *[start for start, _, _ in recs], flush=True)
    free()  # room again
    r = p.map(big, range(60), chunksize=1, checkpoint=ck)
    print("complete", r == [bytes([i % 256]) * 10000 for i in range(60)],
          flush=True)
"""


def _check_disk_run(out, side, word):
    lines = out.stdout.splitlines()
    assert lines[0] == "error True", (out.stdout, out.stderr)
    assert word in lines[1] and "cannot record items" in lines[1]
    recorded = [int(i) for i in lines[2].split()[1:]]
    assert 0 < len(recorded) < 60
    assert lines[3] == "complete True", (out.stdout, out.stderr)
    counts = ran(side)
    assert set(counts) == set(range(60))
    # What was recorded before the error is kept: never run again.
    assert all(counts[i] == 1 for i in recorded)


def _mount_ns():
    """argv prefix running a command in a mount namespace of its own,
    where this process may mount a tmpfs; None when it cannot."""
    if shutil.which("unshare") is None:
        return None
    argv = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-r",
                                                         "-m"]
    try:
        ok = subprocess.run(argv + ["sh", "-c", "mount -t tmpfs none /mnt"],
                            capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return argv if ok else None


def test_full_disk_says_so_and_keeps_what_was_recorded(tmp_path, side):
    ns = _mount_ns()
    if ns is None:
        pytest.skip("cannot mount a tmpfs here (no unshare, or no user "
                    "and mount namespaces): full disk not tested")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    s = _script(tmp_path, "d.py", textwrap.dedent("""
        def free():
            os.unlink(os.path.join(os.path.dirname(sys.argv[1]), "filler"))
    """) + _DISK)
    cmd = ("mount -t tmpfs -o size=1m none %s && "
           "head -c 700000 /dev/zero > %s/filler && exec %s %s %s/ck" % (
               mnt, mnt, sys.executable, s, mnt))
    out = subprocess.run(ns + ["sh", "-c", cmd], env=_env(), timeout=WAIT,
                         capture_output=True, text=True)
    _check_disk_run(out, side, "No space left on device")


def test_file_size_limit_says_so_and_keeps_what_was_recorded(tmp_path,
                                                             side):
    """RLIMIT_FSIZE: writes past it fail (EFBIG), as on a full disk."""
    s = _script(tmp_path, "f.py", textwrap.dedent("""
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (300000, hard))
        def free():
            resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    """) + _DISK)
    out = subprocess.run([sys.executable, s, str(tmp_path / "ck")],
                         env=_env(), timeout=WAIT, capture_output=True,
                         text=True)
    _check_disk_run(out, side, "File too large")


def test_read_only_directory(pool, tmp_path, side):
    """A complete checkpoint in a read-only place still gives its
    results; a new one cannot be made there, an incomplete one cannot
    be completed: both said, naming the file, before anything runs."""
    d = tmp_path / "ro"
    d.mkdir()
    full, part = str(d / "full"), str(d / "part")
    pool.map(triple, range(10), checkpoint=full)
    pool.map(triple, range(5), checkpoint=part)
    s = _script(tmp_path, "r.py", """
        d = sys.argv[1]
        with gpupool.Pool(fake_gpus=2) as p:
            print(p.map(triple, range(10), checkpoint=d + "/full"))
            for name, n in (("new", 3), ("part", 10)):
                try:
                    p.map(triple, range(n), checkpoint=d + "/" + name)
                except gpupool.CheckpointError as e:
                    print(e)
    """)
    if os.geteuid() != 0:
        os.chmod(full, 0o444)
        os.chmod(part, 0o444)
        os.chmod(d, 0o555)
        try:
            out = subprocess.run([sys.executable, s, str(d)], env=_env(),
                                 timeout=WAIT, capture_output=True,
                                 text=True)
        finally:
            os.chmod(d, 0o755)
    else:
        ns = _mount_ns()
        if ns is None:
            pytest.skip("root, and no mount namespace for a read-only "
                        "bind mount: read-only directory not tested")
        cmd = "mount --bind %s %s && mount -o remount,bind,ro %s && " \
            "exec %s %s %s" % (d, d, d, sys.executable, s, d)
        out = subprocess.run(ns + ["sh", "-c", cmd], env=_env(),
                             timeout=WAIT, capture_output=True, text=True)
    lines = out.stdout.splitlines()
    assert out.returncode == 0, out.stderr
    assert lines[0] == str([3 * i + 1 for i in range(10)])
    assert "%s/new" % d in lines[1] and "cannot create it" in lines[1]
    assert "%s/part" % d in lines[2] and "5 items are not recorded" in \
        lines[2]
    assert ran(side) == {i: 2 if i < 5 else 1 for i in range(10)}


def test_sync_policy_and_a_failing_sync(pool, tmp_path, side, monkeypatch):
    """sync=0: an fdatasync after each chunk; None: one when the call
    ends; a sync that fails is the call's error, naming the file."""
    calls = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (calls.append(fd),
                                                     real(fd)))
    ck = tmp_path / "ck"
    pool.map(triple, range(40), chunksize=4, checkpoint=gpupool.Checkpoint(
        ck, sync=0))
    assert len(calls) == 10  # each chunk (the first: the new file too)
    del calls[:]
    pool.map(triple, range(80), chunksize=4, checkpoint=gpupool.Checkpoint(
        ck, sync=None))
    assert len(calls) == 1  # at the end
    del calls[:]
    assert pool.map(triple, range(80), checkpoint=ck) == \
        [3 * i + 1 for i in range(80)]
    assert calls == []  # nothing written, nothing to sync

    def eio(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", eio)
    with pytest.raises(gpupool.CheckpointError, match="fdatasync failed.*"
                       "Input/output error") as ei:
        pool.map(triple, range(90), checkpoint=gpupool.Checkpoint(
            ck, sync=None))
    assert ei.value.path == str(ck)


def test_clean_workers_resume_too(tmp_path, side):
    """Workers that start clean (start_method="spawn") record and resume
    as forked ones do: the checkpoint lives in the caller only."""
    ck = str(tmp_path / "ck")
    with gpupool.Pool(fake_gpus=2, start_method="spawn") as p:
        assert p.map(triple, range(40), chunksize=4, checkpoint=ck) == \
            [3 * i + 1 for i in range(40)]
        r = p.map(triple, range(60), chunksize=4, checkpoint=ck)
    assert r == [3 * i + 1 for i in range(60)]
    assert ran(side) == dict.fromkeys(range(60), 1)
