"""What an item starts dies with its worker (docs/design.md, invariant
74): each worker leads a process group of its own, and whatever ends the
worker (a timeout, a crash, a SIGKILL from outside, terminate(), close()
and join(), max_tasks_per_worker, the death of this process) SIGKILLs
that group too. Before, a `sleep` an item started outlived its timeout,
its worker and the pool.

Every process an item starts here carries a marker of its test in its
command line (`sleep MARKER`, a number of seconds far longer than any
test), so the test finds exactly its own in /proc, whatever other tests
run beside it; no assertion waits on a sleep, each polls with a deadline
a loaded machine meets. Each case runs with forked and with clean
workers."""

import errno
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import gpupool

DEADLINE = 60.0  # seconds: anything slower is a hang, not a load
METHODS = ["fork", "spawn"]


def marked(marker):
    """Pids of the live processes whose command line holds marker (a
    zombie has none: it holds nothing any more)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if marker.encode() in argv:
            pids.append(int(d))
    return pids


def wait_for(cond, what):
    end = time.monotonic() + DEADLINE
    while not cond():
        assert time.monotonic() < end, "after %.0f s: %s" % (DEADLINE, what)
        time.sleep(0.02)


def seen(marker, n=1):
    wait_for(lambda: len(marked(marker)) >= n,
             "%d process(es) 'sleep %s' never started" % (n, marker))


def gone(marker):
    wait_for(lambda: not marked(marker),
             "'sleep %s' outlived its worker: %s" % (marker, marked(marker)))


@pytest.fixture
def marker():
    """A sleep argument of this test alone: 4747 s and a fraction that
    names this process and a random number. What a failed test leaves is
    SIGKILLed afterwards, by pid."""
    m = "4747.%d%06d" % (os.getpid(), random.randrange(10 ** 6))
    yield m
    for pid in marked(m):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def run_sleep(m):
    """subprocess.run(), as the issue's item: waits for its child."""
    subprocess.run(["sleep", m])


def popen_sleep(m):
    """Starts a child and returns, the child still running."""
    subprocess.Popen(["sleep", m])
    return os.getpid()


def popen_then_exit(m):
    subprocess.Popen(["sleep", m])
    os._exit(3)


def popen_then_wait(m):
    subprocess.Popen(["sleep", m])
    time.sleep(3600)


def exec_sleep(m):
    os.execvp("sleep", ["sleep", m])


def mp_child(m):
    """A multiprocessing.Process (forked) that becomes the sleep, then the
    item waits on it."""
    p = multiprocessing.get_context("fork").Process(target=exec_sleep,
                                                    args=(m,))
    p.start()
    p.join()


def shell_leftovers(m):
    """A shell pipeline, a background job and an orphaned grandchild (its
    parent subshell has exited), all still in the worker's group."""
    subprocess.Popen(["sh", "-c",
                      "(sleep %s &); sleep %s | sleep %s & wait" % (m, m, m)])


def new_session(m):
    """Leaves the worker's group on purpose: outlives it."""
    return subprocess.Popen(["sleep", m], start_new_session=True).pid


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("item", [run_sleep, mp_child])
def test_timeout_kills_what_the_item_started(method, item, marker):
    """The issue's case (and a multiprocessing.Process the item waits
    on): the item times out, its worker is replaced, and its sleep dies
    with it while the pool stays open."""
    with gpupool.Pool(fake_gpus=1, timeout=1, start_method=method) as p:
        r = p.apply_async(item, (marker,))
        seen(marker)
        with pytest.raises(gpupool.Timeout):
            r.get()
        gone(marker)
        assert p.map(abs, [-1]) == [1]  # the replacement works


@pytest.mark.parametrize("method", METHODS)
def test_left_running_until_the_worker_ends(method, marker):
    """An item that ends normally: what it left runs as long as its
    worker (a later item may use it), and close() and join() end it."""
    p = gpupool.Pool(fake_gpus=1, start_method=method)
    try:
        assert p.apply(popen_sleep, (marker,)) > 0
        assert p.apply(shell_leftovers, (marker,)) is None
        seen(marker, 4)
        assert p.map(abs, [-2]) == [2]
        assert len(marked(marker)) == 4
    finally:
        p.close()
        p.join()
    gone(marker)


@pytest.mark.parametrize("method", METHODS)
def test_crash_kills_what_the_item_started(method, marker):
    with gpupool.Pool(fake_gpus=1, start_method=method) as p:
        with pytest.raises(gpupool.WorkerCrashed):
            p.apply(popen_then_exit, (marker,))
        gone(marker)


@pytest.mark.parametrize("method", METHODS)
def test_worker_killed_from_outside(method, marker):
    """A SIGKILL from outside (the OOM killer, a user) while the item
    waits on its child."""
    with gpupool.Pool(fake_gpus=1, start_method=method) as p:
        worker = p.info()[0]["pid"]
        r = p.apply_async(popen_then_wait, (marker,))
        seen(marker)
        os.kill(worker, signal.SIGKILL)
        with pytest.raises(gpupool.WorkerCrashed):
            r.get()
        gone(marker)


@pytest.mark.parametrize("method", METHODS)
def test_terminate_kills_what_running_items_started(method, marker):
    p = gpupool.Pool(fake_gpus=2, start_method=method)
    try:
        # Two items: both may go to one worker, the second behind the
        # first, so only one child is sure to start.
        rs = [p.apply_async(popen_then_wait, (marker,)) for _ in range(2)]
        seen(marker)
    finally:
        p.terminate()
    gone(marker)
    for r in rs:
        with pytest.raises(gpupool.Error):
            r.get()


@pytest.mark.parametrize("method", METHODS)
def test_retired_worker_takes_its_leftovers(method, marker):
    """max_tasks_per_worker: the worker that ran its one item leaves
    cleanly, and its item's child with it, while the pool goes on."""
    with gpupool.Pool(fake_gpus=1, max_tasks_per_worker=1,
                      start_method=method) as p:
        first = p.apply(popen_sleep, (marker,))
        assert p.apply(os.getpid) != first
        gone(marker)


def start_sleep(m):
    subprocess.Popen(["sleep", m])


@pytest.mark.parametrize("method", METHODS)
def test_initializer_children_die_with_the_worker(method, marker):
    with gpupool.Pool(fake_gpus=1, initializer=start_sleep,
                      initargs=(marker,), start_method=method):
        seen(marker)
    gone(marker)


@pytest.mark.parametrize("method", METHODS)
def test_a_new_session_outlives_the_pool(method, marker):
    """The documented way to keep a process alive on purpose: out of the
    worker's group (start_new_session=True, process_group=0, setsid)."""
    with gpupool.Pool(fake_gpus=1, start_method=method) as p:
        pid = p.apply(new_session, (marker,))
    assert marked(marker) == [pid]


MASTER = textwrap.dedent("""
    import os, subprocess, sys, time
    import gpupool

    def item(m):
        subprocess.Popen(["sleep", m])
        if sys.argv[2] == "busy":
            time.sleep(3600)

    if __name__ == "__main__":
        p = gpupool.Pool(fake_gpus=1, start_method=sys.argv[1])
        r = p.apply_async(item, (os.environ["MARKER"],))
        time.sleep(3600)
""")


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("state", ["busy", "idle"])
def test_master_death_kills_what_items_started(tmp_path, method, state,
                                               marker):
    """The master SIGKILLed (a time limit, the OOM killer) while its
    worker's item runs (busy: PR_SET_PDEATHSIG's handler) or after it
    returned (idle: the EOF the worker sees first, most often): the
    worker takes its group down as it dies with its master."""
    script = tmp_path / "master.py"
    script.write_text(MASTER)
    # The marker in the environment: the master's (and its forked
    # workers') command line must not carry it.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path),
               MARKER=marker)
    m = subprocess.Popen([sys.executable, str(script), method, state],
                         env=env)
    try:
        seen(marker)
    finally:
        m.kill()
        m.wait()
    gone(marker)


TERMINAL = textwrap.dedent("""
    import os, sys, termios
    import gpupool

    def item(i):
        print("item %d says hello" % i, flush=True)
        try:
            return sys.stdin.readline()
        except OSError as e:
            return "read: errno %d" % e.errno

    if __name__ == "__main__":
        a = termios.tcgetattr(1)
        a[3] |= termios.TOSTOP
        termios.tcsetattr(1, termios.TCSANOW, a)
        with gpupool.Pool(fake_gpus=1, start_method=sys.argv[1]) as p:
            print(p.map(item, [1, 2]), flush=True)
        print("DONE", flush=True)
""")


@pytest.mark.parametrize("method", METHODS)
def test_terminal_io_never_stops_a_worker(tmp_path, method):
    """At a terminal, its own group is never the foreground one: under
    `stty tostop` a worker's output would stop it with SIGTTOU, and a read
    of the terminal with SIGTTIN, for good (no shell continues a group it
    does not know). They are ignored: the output goes through, the read
    fails with EIO, and the map ends."""
    import pty
    import select
    script = tmp_path / "terminal.py"
    script.write_text(TERMINAL)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    pid, fd = pty.fork()
    if pid == 0:  # a session of its own, the pty its terminal
        try:
            os.execve(sys.executable, [sys.executable, str(script), method],
                      env)
        finally:
            os._exit(127)
    out = b""
    end = time.monotonic() + DEADLINE
    try:
        while b"DONE" not in out and time.monotonic() < end:
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    b = os.read(fd, 4096)
                except OSError:  # EIO: the session has ended
                    break
                if not b:
                    break
                out += b
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(pid, 0)
        os.close(fd)
    text = out.decode(errors="replace")
    assert "DONE" in text, "the map never ended:\n" + text
    assert "item 1 says hello" in text and "item 2 says hello" in text
    assert text.count("read: errno %d" % errno.EIO) == 2, text
