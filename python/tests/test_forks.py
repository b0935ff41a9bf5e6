"""A fork of a process that used a pool (os.fork(), multiprocessing's
children, a ProcessPoolExecutor's workers, a pool started inside an
item): the child exits as it would without gpupool, a call on the
parent's pool there says whose it is, and the module-level functions make
the child a pool of its own (docs/python.md, "Forks of the caller";
design.md, invariant 75).

Each case is a script in a subprocess with a deadline: a regression is a
failure, never a hung test run. The scripts print what they saw; the
deadlines are far above what they need on a loaded machine.
"""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

import gpupool

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(gpupool.__file__)))
DEADLINE = 120


def _run(tmp_path, body):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=PKG_DIR, GPUPOOL_FAKE_GPUS="2")
    # A session of its own: a hung script's forks go with it.
    with subprocess.Popen([sys.executable, str(path)], env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          start_new_session=True) as r:
        try:
            out, err = r.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            os.killpg(r.pid, signal.SIGKILL)
            out, err = r.communicate()
            pytest.fail("the script hung (%d s); it printed:\n%s\n%s"
                        % (DEADLINE, out, err))
    assert r.returncode == 0, out + err
    return out.split("\n")


# Each way the pool is used before the fork: the calls that start the
# pool's helper threads (the submit dispatcher, the result thread).
USES = {
    "submit": "p.submit(abs, -3).result()",
    "apply_async": "p.apply_async(abs, (-3,)).get()",
    "map_async": "p.map_async(abs, [-3]).get()[0]",
    "executor": "ex.submit(abs, -3).result()",
}


@pytest.mark.parametrize("use", sorted(USES))
def test_os_fork_child_exits(tmp_path, use):
    """os.fork() then sys.exit(): the child's exit runs none of the
    parent's pool teardown (it used to join a dispatcher thread the
    child does not have, for ever)."""
    out = _run(tmp_path, """
        import os, sys, gpupool
        if __name__ == "__main__":
            ex = gpupool.Executor()
            p = ex.pool
            print("used", %s)
            pid = os.fork()
            if pid == 0:
                sys.exit(5)
            print("child", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
            print("after", p.map(abs, [-1, -2]))
            ex.shutdown()
    """ % USES[use])
    assert "used 3" in out
    assert "child 5" in out
    assert "after [1, 2]" in out


def test_multiprocessing_children_exit(tmp_path):
    """A multiprocessing.Process and a ProcessPoolExecutor's workers,
    forked after the pool was used, run and exit (multiprocessing runs
    threading's exit hooks in its children)."""
    out = _run(tmp_path, """
        import multiprocessing as mp, gpupool
        from concurrent.futures import ProcessPoolExecutor
        def neg(x):
            return -x
        if __name__ == "__main__":
            with gpupool.Pool() as p:
                print("used", p.apply_async(abs, (-3,)).get())
                ctx = mp.get_context("fork")
                c = ctx.Process(target=neg, args=(1,))
                c.start()
                c.join()
                print("process", c.exitcode)
                with ProcessPoolExecutor(2, mp_context=ctx) as ppe:
                    print("ppe", list(ppe.map(neg, [1, 2, 3])))
                print("after", p.map(abs, [-1, -2]))
    """)
    assert "used 3" in out
    assert "process 0" in out
    assert "ppe [-1, -2, -3]" in out
    assert "after [1, 2]" in out


def test_a_copy_of_the_pool_says_whose_it_is(tmp_path):
    """In the child the parent's pool and executor refuse work, the
    message naming both processes, and close/join/terminate, shutdown
    and the with block end at once: the workers are the parent's."""
    out = _run(tmp_path, """
        import os, gpupool
        if __name__ == "__main__":
            with gpupool.Executor() as ex:
                p = ex.pool
                p.submit(abs, -1).result()
                pid = os.fork()
                if pid == 0:
                    try:
                        p.map(abs, [-1])
                    except RuntimeError as e:
                        print("refused:", e)
                    for call in (p.info, lambda: p.submit(abs, 1)):
                        try:
                            call()
                        except RuntimeError:
                            print("refused too")
                    with p:
                        pass
                    p.close(); p.join(); p.terminate()
                    for call in (lambda: ex.submit(abs, 1),
                                 lambda: ex.map(abs, [1])):
                        try:
                            call()
                        except RuntimeError:
                            print("refused too")
                    ex.shutdown(cancel_futures=True)
                    print("copy ended")
                    os._exit(0)
                os.waitpid(pid, 0)
                print("parent", p.map(abs, [-4]), len(p.info()))
    """)
    msg = [x for x in out if x.startswith("refused:")]
    assert msg and "this is a fork of it" in msg[0], out
    assert out.count("refused too") == 4, out
    assert "copy ended" in out
    assert "parent [4] 2" in out



def test_the_extensions_pool_refuses_a_fork_before_touching_it(tmp_path):
    """The extension's own Pool (under the package's check) refuses
    run() in a fork of its maker with its own message, before it drains
    a pipe the parent shares or reaches the library; a pool made in the
    fork runs there; the parent's runs on. The extension counts forks
    (a pthread_atfork child handler) instead of asking getpid()."""
    out = _run(tmp_path, """
        import os
        import gpupool._gpupool as g
        def run(p, items):
            it, res = iter(items), []
            p.run(lambda: next(it, None), lambda k, s, c, o: res.append(o))
            return res
        def double(b):
            return str(int(b) * 2).encode()
        if __name__ == "__main__":
            with g.Pool(double, fake_gpus=1) as p:
                print("parent", run(p, [(0, b"1")]))
                pid = os.fork()
                if pid == 0:
                    try:
                        run(p, [(0, b"2")])
                        print("copy ran")
                    except RuntimeError as e:
                        print("refused:", e)
                    with g.Pool(double, fake_gpus=1) as q:
                        print("own", run(q, [(0, b"3")]))
                    os._exit(0)
                os.waitpid(pid, 0)
                print("parent again", run(p, [(0, b"4")]))
    """)
    assert "parent [b'2']" in out
    msg = [x for x in out if x.startswith("refused:")]
    assert msg and "this is a fork of it" in msg[0], out
    assert "copy ran" not in out
    assert "own [b'6']" in out
    assert "parent again [b'8']" in out

def test_module_functions_in_a_fork_make_its_own_pool(tmp_path):
    """gpupool.map() in a forked child uses a default pool of the
    child's own (its workers are the child's children), and the
    parent's default pool goes on."""
    out = _run(tmp_path, """
        import os, gpupool
        def ppid(_):
            return os.getppid()
        if __name__ == "__main__":
            print("parent", gpupool.map(abs, [-1, -2]))
            pid = os.fork()
            if pid == 0:
                mine = set(gpupool.map(ppid, range(8)))
                print("child", gpupool.map(abs, [-5]), mine == {os.getpid()})
                gpupool.shutdown()
                os._exit(0)
            os.waitpid(pid, 0)
            print("parent again", gpupool.map(abs, [-3]))
    """)
    assert "parent [1, 2]" in out
    assert "child [5] True" in out, out
    assert "parent again [3]" in out



def test_a_fork_starts_threads_of_its_own_pools(tmp_path):
    """A fork made while another thread held the lock over gpupool's
    thread count starts its own pools' threads all the same: the count
    and its lock are the child's (_threads._in_child)."""
    out = _run(tmp_path, """
        import os, threading, gpupool
        from gpupool import _threads
        if __name__ == "__main__":
            with gpupool.Pool(fake_gpus=2) as p:
                print("parent", p.submit(abs, -1).result(), flush=True)
                held, go = threading.Event(), threading.Event()
                def hold():
                    with _threads._lock:
                        held.set()
                        go.wait()
                t = threading.Thread(target=hold)
                t.start()
                held.wait()
                pid = os.fork()
                go.set()
                t.join()
                if pid == 0:
                    with gpupool.Pool(fake_gpus=1) as q:
                        f = q.submit(abs, -5)
                        print("child", f.result(), q.apply_async(abs, (-6,))
                              .get(), flush=True)
                    os._exit(0)
                os.waitpid(pid, 0)
                print("parent again", p.submit(abs, -3).result())
    """)
    assert "parent 1" in out
    assert "child 5 6" in out, out
    assert "parent again 3" in out

def _pool_in_item(n):
    """An item that runs a process pool of its own, which joins its
    workers at its end."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(2, mp_context=mp.get_context("fork")) as inner:
        return sum(inner.map(abs, range(-n, 0)))


def test_a_process_pool_inside_an_item(tmp_path):
    """An item in a replacement worker (maxtasksperchild=1: every item
    runs in a new one, forked after the pool was used) starts a
    ProcessPoolExecutor; its workers exit, so the item ends (it used to
    wait until the pool's timeout, and leave them behind)."""
    if os.environ.get("GPUPOOL_START_METHOD") == "spawn":
        pytest.skip("a worker that starts clean has no copy of the pool "
                    "to inherit")
    with gpupool.Pool(fake_gpus=1, maxtasksperchild=1, timeout=60) as p:
        # Submitted: the replacements fork from the dispatcher thread,
        # which their copy of the pool would wait for at exit.
        futs = [p.submit(_pool_in_item, n) for n in (3, 4, 5)]
        assert [f.result() for f in futs] == [6, 10, 15]
        assert p.map(_pool_in_item, [3, 4, 5], 1) == [6, 10, 15]
