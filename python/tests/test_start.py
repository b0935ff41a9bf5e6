"""Start methods: fork, clean (spawn), and the choice between them; each
worker's thread pools fitted to its CPUs (docs/python.md, "Start
methods")."""

import mmap
import os
import signal
import subprocess
import sys
import threading

import pytest

import gpupool
from gpupool import _start
from test_api import _guarded

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(gpupool.__file__)))


@pytest.fixture(autouse=True)
def _no_default(monkeypatch):
    """Each case chooses for itself, whatever the pass's default."""
    monkeypatch.delenv("GPUPOOL_START_METHOD", raising=False)


def _run(tmp_path, body, timeout=120):
    path = tmp_path / "script.py"
    path.write_text(body)
    env = dict(os.environ, PYTHONPATH=PKG_DIR)
    env.pop("GPUPOOL_FAKE_GPUS", None)
    env.pop("GPUPOOL_START_METHOD", None)
    return subprocess.run([sys.executable, str(path)], env=env,
                          capture_output=True, text=True, timeout=timeout)


def pid(_=None):
    return os.getpid()


def test_jax_in_the_caller_gives_clean_workers_that_use_it(tmp_path):
    """Before: the first jnp call in a forked worker hung for ever (XLA's
    threads held locks at the fork)."""
    pytest.importorskip("jax")
    out = _run(tmp_path, _guarded("""
        import os
        os.environ["JAX_PLATFORMS"] = "cpu"
        import jax.numpy as jnp
        import gpupool
        def total(n):
            import jax.numpy as jnp
            return float(jnp.sum(jnp.arange(n)))
        print(float(jnp.sum(jnp.arange(4))), flush=True)
        with gpupool.Pool(fake_gpus=2) as p:
            print(p.start_method, p.map(total, [10, 100], chunksize=1))
    """))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["6.0", "spawn [45.0, 4950.0]"]
    assert out.stderr.splitlines() == [
        "gpupool: workers start clean (spawn), not forked: JAX has "
        "started XLA (backends: cpu)"]


def test_a_cuda_context_chooses_a_clean_start(tmp_path, monkeypatch,
                                              capfd):
    """A descriptor open onto the driver's control device (a stand-in
    file, in a directory the probe is pointed at): CUDA is initialised
    here, whichever framework did it. fork is refused, the choice is a
    clean start, and the line names what was seen."""
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidiactl").write_text("")
    monkeypatch.setattr(_start, "DEV", str(dev))
    assert _start.fork_unsafe() is None
    fd = os.open(str(dev / "nvidiactl"), os.O_RDONLY)
    try:
        why = "CUDA is initialised in this process: %s is open (fd %d)" % (
            dev / "nvidiactl", fd)
        assert _start.fork_unsafe() == why
        with pytest.raises(RuntimeError) as ei:
            gpupool.Pool(fake_gpus=1, start_method="fork")
        assert why in str(ei.value)
        capfd.readouterr()
        with gpupool.Pool(fake_gpus=1) as p:
            assert p.start_method == "spawn"
            assert p.start_reason == why
            assert p.apply(pid) != os.getpid()
        assert capfd.readouterr().err == \
            "gpupool: workers start clean (spawn), not forked: %s\n" % why
    finally:
        os.close(fd)
    with gpupool.Pool(fake_gpus=1) as p:
        assert p.start_method == "fork"


def test_libcuda_mapped_chooses_a_clean_start(tmp_path):
    lib = tmp_path / "libcuda.so.1"
    lib.write_bytes(b"\0" * mmap.PAGESIZE)
    with open(lib, "rb") as f:
        m = mmap.mmap(f.fileno(), mmap.PAGESIZE, prot=mmap.PROT_READ)
    try:
        assert _start.fork_unsafe() == \
            "CUDA is initialised in this process: %s is loaded" % lib
    finally:
        m.close()
    assert _start.fork_unsafe() is None


def test_a_thread_of_the_callers_chooses_a_clean_start():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="loader")
    t.start()
    try:
        assert _start.fork_unsafe() == "1 thread started here (loader)"
        with gpupool.Pool(fake_gpus=1) as p:
            assert p.start_method == "spawn"
    finally:
        stop.set()
        t.join()


def test_a_pool_made_off_the_main_thread_counts_it(tmp_path):
    """Pool() from another thread while the main thread holds a lock the
    items take: the workers start clean (the lock is theirs, not a held
    copy) and the map works. Before: the main thread was not counted,
    the pool forked with the lock held, and every item ended in
    Timeout."""
    out = _run(tmp_path, """
import threading, gpupool
LOCK = threading.Lock()
def take(x):
    with LOCK:
        return x + 1
if __name__ == "__main__":
    got = []
    def run():
        with gpupool.Pool(fake_gpus=2, timeout=10) as p:
            got.append((p.start_method, p.map(take, range(4), chunksize=1,
                                              return_exceptions=True)))
    with LOCK:
        t = threading.Thread(target=run, name="maker")
        t.start()
        t.join()
    print(got)
""")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[('spawn', [1, 2, 3, 4])]"]
    assert out.stderr.splitlines() == [
        "gpupool: workers start clean (spawn), not forked: Pool() is called "
        "from thread maker, not the main thread, which runs on"]


def test_off_the_main_thread_a_kernels_threads_still_do_not_count():
    """A notebook kernel's threads (their class's or target's module is
    ipykernel's, zmq's ...) do not count, from the main thread or from
    another; from another, the main thread does."""
    class IOPubThread(threading.Thread):
        pass
    IOPubThread.__module__ = "ipykernel.iostream"
    stop = threading.Event()
    kernel = IOPubThread(target=stop.wait, name="IOPub")
    kernel.start()
    got = []
    try:
        assert _start.fork_unsafe() is None
        cell = threading.Thread(
            target=lambda: got.append(_start.fork_unsafe()), name="cell")
        cell.start()
        cell.join()
    finally:
        stop.set()
        kernel.join()
    assert got == ["Pool() is called from thread cell, not the main "
                   "thread, which runs on"]


def test_openblas_threads_alone_keep_fork():
    """numpy's OpenBLAS starts its threads at import: native threads, safe
    across fork (its atfork handlers): still forked, nothing said."""
    np = pytest.importorskip("numpy")
    np.ones((64, 64)) @ np.ones((64, 64))
    with gpupool.Pool(fake_gpus=1) as p:
        assert p.start_method == "fork"
        assert p.start_reason is None


def blas_threads(_):
    import numpy  # noqa: F401 (a clean worker loads its BLAS now)
    from threadpoolctl import threadpool_info
    return (sorted({i["num_threads"] for i in threadpool_info()
                    if i["user_api"] == "blas"}),
            len(os.sched_getaffinity(0)), gpupool.current().threads)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_blas_threads_are_the_workers_cpus(method):
    """numpy imported in the caller: each worker's BLAS threads are as
    many as its CPUs (2 workers on 2 CPUs: 1 each), not the machine's.
    Before: a forked worker kept the caller's count."""
    pytest.importorskip("threadpoolctl")
    np = pytest.importorskip("numpy")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: every worker has them all")
    np.ones(1)
    with gpupool.Pool(fake_gpus=2, start_method=method) as p:
        got = p.map(blas_threads, range(6), chunksize=1)
    for blas, cpus, threads in got:
        assert cpus < len(os.sched_getaffinity(0))
        assert blas == [cpus] and threads == cpus


def test_the_users_thread_setting_wins(monkeypatch):
    """OPENBLAS_NUM_THREADS set: a forked worker's BLAS (loaded in the
    caller, with all the CPUs) is left as it is."""
    pytest.importorskip("threadpoolctl")
    np = pytest.importorskip("numpy")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: every worker has them all")
    np.ones(1)
    from threadpoolctl import threadpool_info
    mine = sorted({i["num_threads"] for i in threadpool_info()
                   if i["user_api"] == "blas"})
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    with gpupool.Pool(fake_gpus=2, start_method="fork") as p:
        got = p.map(blas_threads, range(2), chunksize=1)
    assert mine != [1]
    assert [blas for blas, _, _ in got] == [mine, mine]


def die_on_3(x):
    if x == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return x, os.getpid()


def inheritable_fds(_=None):
    """The descriptors of this process a program it execs would get,
    past 0, 1 and 2 (what an item's os.system() or os.exec*() keeps)."""
    import fcntl
    out = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and not fcntl.fcntl(fd, fcntl.F_GETFD) & \
                    fcntl.FD_CLOEXEC:
                out.append((fd, os.readlink("/proc/self/fd/" + name)))
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return out


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_worker_holds_no_inheritable_descriptor(method):
    """Every descriptor of a worker is close-on-exec, a clean one's too
    once it runs (its pid and error pipes crossed the exec without it),
    replacements included: what an item execs holds none of the pool's
    pipes."""
    with gpupool.Pool(fake_gpus=2, start_method=method,
                      maxtasksperchild=1) as p:
        # A forked worker has this process's (fork copies them all).
        mine = set(inheritable_fds()) if method == "fork" else set()
        for fds in p.map(inheritable_fds, range(6), chunksize=1):
            assert set(fds) <= mine, fds


def append_to(lst, x):
    lst.append(x)
    return os.getpid()


_shared = None


def keep(lst):
    global _shared
    _shared = lst


def append_kept(x):
    _shared.append(x)
    return x


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_managers_proxies_work_in_every_worker(method):
    """A Manager's proxies, sent with items or given to the initializer,
    reach their manager from forked and clean workers alike: a clean
    worker has the caller's authkey (multiprocessing's preparation data),
    as spawn's processes do, or the manager rejects it."""
    import multiprocessing
    with multiprocessing.Manager() as m:
        items, kept = m.list(), m.list()
        with gpupool.Pool(fake_gpus=2, start_method=method) as p:
            pids = p.starmap(append_to, [(items, i) for i in range(6)])
        assert sorted(items) == list(range(6))
        assert os.getpid() not in pids
        with gpupool.Pool(fake_gpus=2, start_method=method,
                          initializer=keep, initargs=(kept,)) as p:
            assert p.map(append_kept, range(4)) == list(range(4))
        assert sorted(kept) == list(range(4))


def test_clean_worker_killed_mid_item_is_replaced():
    with gpupool.Pool(fake_gpus=2, start_method="spawn") as p:
        first = p.map(die_on_3, range(8), chunksize=1,
                      return_exceptions=True)
        assert isinstance(first[3], gpupool.WorkerCrashed)
        assert [r[0] for i, r in enumerate(first) if i != 3] == \
            [0, 1, 2, 4, 5, 6, 7]
        again = p.map(die_on_3, [0, 1, 2, 4], chunksize=1)
        assert [r[0] for r in again] == [0, 1, 2, 4]
        assert os.getpid() not in {r[1] for r in first[:3] + again}


def test_main_runs_again_without_its_guarded_part(tmp_path):
    """A clean worker runs the script again as __mp_main__: its top level
    (definitions, what they compute) but not what is under the guard; an
    initializer's globals are fn's."""
    out = _run(tmp_path, """
import os, gpupool
TABLE = {"where": "top level"}
model = None
def load():
    global model
    model = "loaded in " + str(os.getpid())
def look(x):
    return TABLE["where"], model == "loaded in " + str(os.getpid()), \\
        __name__
if __name__ == "__main__":
    print("guarded part ran", flush=True)
    TABLE["where"] = "changed under the guard"
    with gpupool.Pool(fake_gpus=2, initializer=load,
                      start_method="spawn") as p:
        print(p.map(look, [1, 2], chunksize=1))
""")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "guarded part ran",
        "[('top level', True, '__mp_main__'), "
        "('top level', True, '__mp_main__')]"]


def test_a_pool_at_the_top_level_of_a_script_is_refused(tmp_path):
    """Without the guard each clean worker would start a pool of its own:
    the worker's start fails, saying what to do."""
    out = _run(tmp_path, """
import gpupool
with gpupool.Pool(fake_gpus=1, start_method="spawn") as p:
    print(p.map(abs, [-1]))
""")
    assert out.returncode != 0
    assert "if __name__ == '__main__'" in out.stderr
    assert "[1]" not in out.stdout
