"""joblib's own tests of its process backends, run with backend="gpupool"
(gpupool.joblib), and gpupool's own cases of the backend.

joblib ships its tests in the wheel (joblib/test/test_parallel.py); they
are imported at run time, not copied, as test_cpython.py does with
CPython's. "gpupool" is registered in joblib.parallel.BACKENDS *before*
that import, so every list test_parallel builds from BACKENDS at import
(ALL_VALID_BACKENDS, RETURN_GENERATOR_BACKENDS, parametrize("backend",
BACKENDS)) holds it. Its hard-coded lists (PROCESS_BACKENDS, ["loky",
"threading"], ...) do not: for each test whose backend parameter holds a
process backend ("loky" or "multiprocessing"), a copy of the test is made
here, under its own name, with the backend values cut to the gpupool ones
(in a tuple of parameters, the process backend becomes "gpupool" and the
rest is kept). loky's and threading's cases stay joblib's business. The
tests in CHANGED run with the values said; LEFT_OUT ones are not run (and
why). Every case runs on 4 fake GPUs (GPUPOOL_FAKE_GPUS), so n_jobs=-1 is
4 workers.
"""

import importlib.util
import os
import signal
import subprocess
import sys
import time
import types

import pytest

joblib = pytest.importorskip(
    "joblib", reason="joblib is not installed (pip install joblib)")
if not hasattr(joblib.parallel.ParallelBackendBase,
               "retrieve_result_callback"):
    pytest.skip("joblib %s is older than 1.5" % joblib.__version__,
                allow_module_level=True)

import gpupool  # noqa: E402
import gpupool.joblib as gj  # noqa: E402 (registers "gpupool" first)

jtp = pytest.importorskip("joblib.test.test_parallel")

from joblib import Parallel, delayed, parallel_config  # noqa: E402

if importlib.util.find_spec("pytest_timeout") is not None:
    # A hung abort must fail its case, not the whole run; the signal
    # method cannot interrupt a wait on a lock in a C call.
    pytestmark = pytest.mark.timeout(300, method="thread")

FAKE = 4
# Parameters of joblib's tests that name a backend.
BACKEND_ARGS = {"backend", "parent_backend", "child_backend",
                "outer_backend", "inner_backend"}
PROCESS = {"loky", "multiprocessing"}

# joblib tests whose parameters carry an expectation that is loky's: the
# values gpupool runs with instead, and why (deliberate differences).
CHANGED = {
    "test_multiple_generator_call_separated_gc": (
        "backend, error", [("gpupool", False)],
        "loky's shared executor is shut down when a generator is "
        "collected, failing the next call; gpupool's next call gets a "
        "pool and runs (as threading's)"),
    "test_nested_parallel_warnings": (
        "parent_backend,child_backend,expected",
        [("gpupool", "multiprocessing", False), ("gpupool", "loky", False)],
        "gpupool's workers are not daemonic: a process pool inside one "
        "starts with no warning (a data loader's workers beside the GPU "
        "job)"),
}

# joblib tests with gpupool in their parameters that are not run, and why.
LEFT_OUT = {
    "test_auto_memmap_on_arrays_from_generator":
        "asserts that large numpy arguments arrive as np.memmap: joblib's "
        "memmapping reducer is loky's and multiprocessing's only; gpupool "
        "sends arrays through its own buffers (python.md, \"Big objects\")",
    "test_memmapping_leaks":
        "the same: counts loky's memmapped temporary folders",
}


def _names(argnames):
    if isinstance(argnames, str):
        return [a.strip() for a in argnames.split(",")]
    return list(argnames)


def _is_gpupool(v):
    return v == "gpupool" or isinstance(v, gj.GpupoolBackend)


def _rewrite(mark):
    """The parametrize mark with its backend values cut to gpupool's;
    None when the mark has no backend parameter, False when none of its
    values is a process backend (a threading or sequential case)."""
    argnames, values = mark.args[0], list(mark.args[1])
    names = _names(argnames)
    idx = [i for i, n in enumerate(names) if n in BACKEND_ARGS]
    if not idx:
        return None
    i, single = idx[0], len(names) == 1
    out = []
    for v in values:
        bv = v if single else v[i]
        if _is_gpupool(bv):
            out.append(v)
        elif isinstance(bv, str) and bv in PROCESS and not single:
            out.append(tuple(v[:i]) + ("gpupool",) + tuple(v[i + 1:]))
        elif isinstance(bv, str) and bv in PROCESS and "gpupool" not in out:
            out.append("gpupool")
    ded = []
    for v in out:
        if repr(v) not in map(repr, ded):
            ded.append(v)
    if not ded:
        return False
    return pytest.mark.parametrize(argnames, ded, **mark.kwargs).mark


def _copy(fn, marks):
    # The same code with joblib's globals: it reads test_parallel's names.
    g = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__,
                           fn.__defaults__, fn.__closure__)
    g.__dict__.update(fn.__dict__)
    g.pytestmark = marks
    return g


RUN = []   # the joblib tests copied here
for _name in sorted(dir(jtp)):
    _fn = getattr(jtp, _name)
    if not _name.startswith("test_") or \
            not isinstance(_fn, types.FunctionType):
        continue
    _marks = list(getattr(_fn, "pytestmark", []))
    if _name in CHANGED:
        _an, _vals, _ = CHANGED[_name]
        _marks = [pytest.mark.parametrize(_an, _vals).mark
                  if m.name == "parametrize" and m.args[0] == _an else m
                  for m in _marks]
    _new, _has, _ok = [], False, True
    for _m in _marks:
        _r = _rewrite(_m) if _m.name == "parametrize" else None
        if _r is None:
            _new.append(_m)
            continue
        _has = True
        if _r is False:
            _ok = False
            break
        _new.append(_r)
    if not (_has and _ok) or _name in LEFT_OUT:
        continue
    globals()[_name] = _copy(_fn, _new)
    RUN.append(_name)


@pytest.fixture(autouse=True)
def _fake_gpus_and_scripts(monkeypatch):
    """4 fake GPUs in every case (and in the scripts the subprocess cases
    run); those scripts are joblib's with the registering import, which a
    user's script has."""
    monkeypatch.setenv("GPUPOOL_FAKE_GPUS", str(FAKE))
    for name in ("UNPICKLABLE_CALLABLE_SCRIPT_TEMPLATE_MAIN",
                 "UNPICKLABLE_CALLABLE_SCRIPT_TEMPLATE_NO_MAIN"):
        text = getattr(jtp, name)
        assert "from joblib import Parallel, delayed\n" in text, name
        monkeypatch.setattr(jtp, name, text.replace(
            "from joblib import Parallel, delayed\n",
            "from joblib import Parallel, delayed\nimport gpupool.joblib\n"))


@pytest.fixture(autouse=True, scope="module")
def _stop_kept_pools():
    yield
    gj.shutdown()   # the pools kept for later calls: not past this file


def test_the_tables_name_real_tests_and_nothing_twice():
    """Every CHANGED and LEFT_OUT entry is a joblib test that has gpupool
    among its backends (so the table still means something), and enough
    of joblib's tests run here that a change in their shape shows."""
    for name in list(CHANGED) + list(LEFT_OUT):
        assert isinstance(getattr(jtp, name, None), types.FunctionType), name
    assert not set(CHANGED) & set(LEFT_OUT)
    assert not set(LEFT_OUT) & set(RUN)
    assert set(CHANGED) <= set(RUN)
    assert len(RUN) >= 30, RUN


# gpupool's own cases of the backend -------------------------------------

def _where(x):
    return x, os.environ.get("CUDA_VISIBLE_DEVICES"), os.getpid()


def _meet(barrier, x):
    barrier.wait()      # every item runs at once, or this times out
    return _where(x)


def test_each_job_runs_on_a_gpu_of_its_own():
    import multiprocessing
    with multiprocessing.Manager() as m:
        b = m.Barrier(FAKE, timeout=120)
        with parallel_config(backend="gpupool", n_jobs=FAKE):
            out = Parallel(batch_size=1)(delayed(_meet)(b, x)
                                         for x in range(FAKE))
    assert [x for x, _, _ in out] == list(range(FAKE))
    assert sorted(v for _, v, _ in out) == ["fake%d" % i
                                            for i in range(FAKE)]
    assert len({p for _, _, p in out}) == FAKE


def _count(state, lock, x):
    with lock:
        state["now"] += 1
        state["max"] = max(state["max"], state["now"])
    time.sleep(0.05)
    with lock:
        state["now"] -= 1
    return x


@pytest.mark.parametrize("n_jobs, most", [(1, 1), (2, 2), (3, 3),
                                          (16, FAKE), (-3, FAKE - 2)])
def test_n_jobs_bounds_the_items_running_at_once(n_jobs, most):
    import multiprocessing
    with multiprocessing.Manager() as m:
        state, lock = m.dict(now=0, max=0), m.Lock()
        with parallel_config(backend="gpupool", n_jobs=n_jobs):
            out = Parallel(batch_size=1)(delayed(_count)(state, lock, x)
                                         for x in range(12))
        assert out == list(range(12))
        assert 1 <= state["max"] <= most


def test_n_jobs_rules():
    """None and -1: every worker; -k: all but k - 1; n: at most n, and
    never more than the workers (one per GPU, x per_gpu)."""
    b = gj.GpupoolBackend()
    assert [b.effective_n_jobs(n) for n in (None, -1, -2, -10, 1, 3, 4, 5,
                                            16, 2.0)] == \
        [4, 4, 3, 1, 1, 3, 4, 4, 4, 2]
    # with 2 per GPU a count must spread evenly: the largest that does
    assert [gj.GpupoolBackend(per_gpu=2).effective_n_jobs(n)
            for n in (-1, 3, 5, 7, 8, 9)] == [8, 3, 4, 4, 8, 8]
    assert gj.GpupoolBackend(fake_gpus=2).effective_n_jobs(8) == 2
    with pytest.raises(ValueError, match="n_jobs == 0"):
        b.effective_n_jobs(0)
    with pytest.raises(ValueError, match="n_jobs=2.5"):
        b.effective_n_jobs(2.5)
    with parallel_config(backend="gpupool"):
        assert joblib.effective_n_jobs() == 4
    with pytest.raises(TypeError, match="worker count is n_jobs"):
        with parallel_config(backend="gpupool", processes=2):
            Parallel()(delayed(abs)(1) for _ in range(2))
    with pytest.raises(ValueError, match="idle_timeout"):
        gj.GpupoolBackend(idle_timeout=-1).configure(n_jobs=2)


def _boom(x):
    if x == 3:
        raise KeyError("item %d" % x)
    return x


def test_the_error_is_the_workers_with_its_traceback():
    with pytest.raises(KeyError, match="item 3") as info:
        Parallel(n_jobs=2, backend="gpupool")(delayed(_boom)(x)
                                             for x in range(8))
    cause = info.value.__cause__
    assert isinstance(cause, gpupool.RemoteTraceback)
    assert "in _boom" in str(cause) and 'raise KeyError("item %d"' in \
        str(cause)


def _crash(x):
    if x == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def test_a_worker_that_dies_fails_the_call_and_the_next_call_runs():
    with pytest.raises(gpupool.WorkerCrashed) as info:
        Parallel(n_jobs=2, backend="gpupool", batch_size=1)(
            delayed(_crash)(x) for x in range(6))
    assert info.value.signal == signal.SIGKILL
    assert Parallel(n_jobs=2, backend="gpupool")(
        delayed(abs)(-x) for x in range(6)) == list(range(6))


def _pid_then_wait(d, x):
    if x == 0:
        # the others are running (their files are there): now fail
        deadline = time.monotonic() + 120
        while len(os.listdir(d)) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        raise RuntimeError("first")
    with open(os.path.join(d, str(os.getpid())), "w"):
        pass
    time.sleep(600)


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_an_error_stops_the_items_still_running(tmp_path):
    with pytest.raises(RuntimeError, match="first"):
        Parallel(n_jobs=4, backend="gpupool", batch_size=1)(
            delayed(_pid_then_wait)(str(tmp_path), x) for x in range(4))
    pids = [int(p) for p in os.listdir(tmp_path)]
    assert len(pids) == 3
    deadline = time.monotonic() + 60
    while not all(map(_gone, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(map(_gone, pids)), pids


def test_a_generator_closed_early_stops_its_running_items(tmp_path):
    gen = Parallel(n_jobs=4, backend="gpupool", batch_size=1,
                   return_as="generator_unordered")(
        delayed(_pid_then_wait)(str(tmp_path), x + 1) for x in range(3))
    deadline = time.monotonic() + 120
    while len(os.listdir(tmp_path)) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    pids = [int(p) for p in os.listdir(tmp_path)]
    assert len(pids) == 3
    gen.close()
    deadline = time.monotonic() + 60
    while not all(map(_gone, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(map(_gone, pids)), pids


def _nested(x):
    inner = Parallel(n_jobs=4, backend="gpupool")(
        delayed(os.getpid)() for _ in range(4))
    return os.getpid(), inner


def test_a_gpupool_parallel_inside_a_worker_runs_there_one_by_one():
    """A job owns its GPU: Parallel(backend="gpupool") in it starts no
    pool of its own (workers pinned to every GPU) but runs in the job."""
    for pid, inner in Parallel(n_jobs=2, backend="gpupool")(
            delayed(_nested)(x) for x in range(4)):
        assert inner == [pid] * 4


def _set(v):
    global _from_init
    _from_init = v


def _read(x):
    return _from_init + x


def test_the_users_initializer_runs_beside_the_backends():
    with parallel_config(backend="gpupool", initializer=_set,
                         initargs=(100,)):
        assert Parallel(n_jobs=2)(delayed(_read)(x) for x in range(4)) == \
            [100, 101, 102, 103]
        # and the backend is known in the workers (the registering part)
        out = Parallel(n_jobs=2)(delayed(_nested)(x) for x in range(2))
        assert all(inner == [pid] * 4 for pid, inner in out)


def test_pools_are_kept_between_calls_and_shutdown_stops_them():
    gj.shutdown()
    with parallel_config(backend="gpupool", n_jobs=-1):
        a = set(Parallel()(delayed(os.getpid)() for _ in range(8)))
        b = set(Parallel()(delayed(os.getpid)() for _ in range(8)))
    assert a & b     # the second call ran on the first one's workers
    gj.shutdown()
    deadline = time.monotonic() + 60
    while not all(map(_gone, a)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(map(_gone, a))


def test_an_unused_pool_stops_after_idle_timeout():
    with parallel_config(backend="gpupool", n_jobs=2, idle_timeout=0.1):
        pids = set(Parallel()(delayed(os.getpid)() for _ in range(4)))
    deadline = time.monotonic() + 60
    while not all(map(_gone, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(map(_gone, pids))


def test_import_gpupool_does_not_import_joblib():
    code = ("import sys, gpupool; gpupool.Pool; gpupool.Executor; "
            "gpupool.current; gpupool.claims; "
            "bad = [m for m in ('joblib', 'gpupool.joblib', 'optuna', "
            "'hydra', 'sklearn') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
