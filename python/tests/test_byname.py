"""How the functions of __main__ reach workers that start clean: by name,
as multiprocessing's spawn sends them, where the script run again there
defines them; by value (cloudpickle) where it cannot, said when big; and
a __main__ that cannot be run again (python -, python -c) (docs/python.md,
"Functions and pickling"). Each case is a script in a process of its own,
its pool's start chosen there, whatever the pass's default."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from test_start import PKG_DIR

CLOUDPICKLE = importlib.util.find_spec("cloudpickle") is not None


def _py(tmp_path, body, how="file", timeout=180, name="job"):
    """body run by this interpreter from tmp_path: as the script name.py
    ("file"), as python -m name ("m"), read from standard input
    (python -, "stdin") or as python -c ("c")."""
    body = textwrap.dedent(body)
    (tmp_path / (name + ".py")).write_text(body)
    env = dict(os.environ, PYTHONPATH=PKG_DIR)
    env.pop("GPUPOOL_FAKE_GPUS", None)
    env.pop("GPUPOOL_START_METHOD", None)
    args = {"file": [str(tmp_path / (name + ".py"))], "m": ["-m", name],
            "stdin": ["-"], "c": ["-c", body]}[how]
    return subprocess.run([sys.executable] + args, cwd=str(tmp_path),
                          input=body if how == "stdin" else None, env=env,
                          capture_output=True, text=True, timeout=timeout)


_LOCK_AND_BIG = """
    import sys, threading, gpupool
    from gpupool import _task
    LOCK = threading.Lock()
    BIG = bytes(8 << 20)
    def work(x):
        with LOCK:
            return x + len(BIG), \\
                work.__globals__ is sys.modules["__main__"].__dict__
    if __name__ == "__main__":
        stop = threading.Event()
        threading.Thread(target=stop.wait, name="loader").start()
        try:
            with gpupool.Pool(fake_gpus=2) as p:  # a thread: clean start
                print(p.start_method, len(_task.dumps_fn(work)) < 4096)
                print(p.map(work, range(16), chunksize=1) ==
                      [(i + (8 << 20), True) for i in range(16)])
        finally:
            stop.set()
"""


@pytest.mark.parametrize("how", ["file", "m"])
def test_a_module_lock_and_a_big_global_stay_in_the_worker(tmp_path, how):
    """A thread makes the pool start clean by itself: work, a top-level
    function of the script, goes by name (a few bytes, not its 8 MiB
    global with every item) and takes the worker's own lock. Before:
    TypeError: cannot pickle '_thread.lock' object, with cloudpickle;
    without it, the script's functions saw another dict than __main__'s
    (runpy's copy)."""
    out = _py(tmp_path, _LOCK_AND_BIG, how)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["spawn True", "True"]
    assert out.stderr.splitlines() == [
        "gpupool: workers start clean (spawn), not forked: 1 thread "
        "started here (loader)"]


def test_what_the_guarded_part_sets_goes_along(tmp_path):
    """Names the worker's run of the script does not set (set under the
    guard) go with a function sent by name, read by it or by a helper
    it calls, refreshed at each call; a name the worker's run sets keeps
    the worker's value, as with a function sent by value. Before,
    without cloudpickle: NameError."""
    out = _py(tmp_path, """
        import gpupool
        SCALE = 1
        def helper(x):
            return x * SCALE + OFFSET
        def work(x):
            return helper(x), NAME
        if __name__ == "__main__":
            SCALE = 10
            OFFSET, NAME = 5, "run-1"
            with gpupool.Pool(fake_gpus=1, start_method="spawn") as p:
                print(p.map(work, [1, 2]))
                OFFSET = 7
                print(p.map(work, [1]))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[(6, 'run-1'), (7, 'run-1')]",
                                       "[(8, 'run-1')]"]


def test_the_initializer_and_functions_by_value_share_globals(tmp_path):
    """The initializer goes by name and sets a global; a function by name
    and a lambda (by value, rebound to the worker's __main__) calling it
    see it: the script runs again in __main__'s own namespace, not in a
    copy of it (runpy's, which spawn keeps: a function it defined would
    read another dict than the lambda's)."""
    out = _py(tmp_path, """
        import gpupool
        model = None
        def load(tag):
            global model
            model = tag
        def by_name(x):
            return model, x
        if __name__ == "__main__":
            with gpupool.Pool(fake_gpus=1, initializer=load,
                              initargs=("loaded",),
                              start_method="spawn") as p:
                print(p.map(by_name, [1]))
                try:
                    print(p.map(lambda x: by_name(x), [2]))
                except Exception as e:
                    print(type(e).__name__)
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "[('loaded', 1)]",
        "[('loaded', 2)]" if CLOUDPICKLE else "PicklingError"]


_SHAPES = """
    import functools, threading, gpupool
    from gpupool import _task
    LOCK = threading.Lock()
    def deco(f):
        @functools.wraps(f)
        def wrapper(x):
            return f(x) * 10
        return wrapper
    def plain(x):
        return x + 1
    first = plain
    def plain(x):  # shadows the first: first is no longer __main__.plain
        return x + 2
    @deco
    def wrapped(x):
        with LOCK:
            return x + 3
    class Model:
        scale = 2
        def __init__(self, k):
            self.k = k
        def __call__(self, x):
            with LOCK:
                return x * self.k
        def method(self, x):
            return x * self.k + 1
        @classmethod
        def cmethod(cls, x):
            return x * cls.scale
        @staticmethod
        def smethod(x):
            return -x
    def make(k):
        def inner(x):
            return x * k
        return inner
    made = make(7)
    if __name__ != "__main__":
        pass
    else:  # not run again either: any if on __name__ is taken as a guard
        def odd(x):
            return x * 100
    if __name__ == "__main__":
        def guarded(x):
            return x - 1
        cases = [("first", first), ("plain", plain), ("wrapped", wrapped),
                 ("partial", functools.partial(wrapped)),
                 ("smethod", Model.smethod), ("cmethod", Model.cmethod),
                 ("bound", Model(3).method), ("instance", Model(4)),
                 ("made", made), ("guarded", guarded), ("odd", odd),
                 ("lambda", lambda x: x * 5)]
        with gpupool.Pool(fake_gpus=1, start_method="spawn") as p:
            for name, fn in cases:
                try:
                    how = "name" if b"_resolve_main" in _task.dumps_fn(fn) \\
                        else "value"
                    print(name, how, p.map(fn, [1, 2]))
                except Exception as e:
                    print(name, type(e).__name__)
"""


def test_each_shape_of_function_goes_the_way_that_works(tmp_path):
    """By name: a top-level def, one decorated with functools.wraps (its
    lock the worker's own), a partial of one, static and class methods, a
    bound method and a callable instance of a top-level class. By value
    (cloudpickle), or refused in the caller without it: a def shadowed
    by a later one of the same name, a nested function bound to a
    top-level name, one defined under the guard (or under any if on
    __name__), a lambda."""
    out = _py(tmp_path, _SHAPES)
    assert out.returncode == 0, out.stderr

    def value(name, result):
        return "%s value %s" % (name, result) if CLOUDPICKLE else \
            "%s PicklingError" % name
    assert out.stdout.splitlines() == [
        value("first", [2, 3]), "plain name [3, 4]",
        "wrapped name [40, 50]", "partial name [40, 50]",
        "smethod name [-1, -2]", "cmethod name [2, 4]",
        "bound name [4, 7]", "instance name [4, 8]",
        value("made", [7, 14]), value("guarded", [0, 1]),
        value("odd", [100, 200]), value("lambda", [5, 10])]


def test_a_script_changed_on_disk_is_not_run_in_its_new_version(tmp_path):
    """The script changed after it started: the worker's run of it
    defines work otherwise, and says so; the new code never runs."""
    out = _py(tmp_path, """
        import gpupool
        def work(x):
            return "old"
        if __name__ == "__main__":
            src = open(__file__).read()
            open(__file__, "w").write(src.replace('"old"', '"new"'))
            with gpupool.Pool(fake_gpus=1, start_method="spawn") as p:
                try:
                    print(p.map(work, [1]))
                except Exception as e:
                    print(type(e).__name__, "changed since" in str(e))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["PicklingError True"]


@pytest.mark.parametrize("name", ["pkgutil", "runpy"])
def test_a_script_named_like_a_module_the_worker_imports(tmp_path, name):
    """A clean worker imports what it needs before the caller's sys.path
    (the script's directory first) is in place, so a script named like
    one of those is not taken for it. Before, pkgutil.py: Pool() failed
    (InitError), the worker having run the script as pkgutil."""
    out = _py(tmp_path, """
        import gpupool
        def neg(x):
            return -x
        if __name__ == "__main__":
            with gpupool.Pool(fake_gpus=1, start_method="spawn") as p:
                print(p.map(neg, [1, 2]))
    """, name=name)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[-1, -2]"]


_NO_FILE = """
    import threading, gpupool
    BIG = bytes(3 << 20)
    def sq(x):
        return x * x
    def big(x):
        return len(BIG) + x
    stop = threading.Event()
    threading.Thread(target=stop.wait, name="loader").start()
    try:
        with gpupool.Pool(fake_gpus=1) as p:  # a thread: clean start
            print(p.start_method, flush=True)
            print(p.map(sq, range(3)), flush=True)
            print(p.map(big, [0]), p.map(big, [1]), flush=True)
    except Exception as e:
        print(type(e).__name__, e)
    finally:
        stop.set()
"""


@pytest.mark.parametrize("how", ["stdin", "c"])
def test_a_main_without_a_file_starts_clean(tmp_path, how):
    """python - (and python -c): nothing to run again in a clean worker,
    which gpupool chose by itself (a thread). Before, from standard
    input: Pool() failed, FileNotFoundError: '.../<stdin>'. Now the
    functions go by value, and one line says, once, which one is big;
    without cloudpickle the error says what to do."""
    out = _py(tmp_path, _NO_FILE, how)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "spawn"
    said = [x for x in out.stderr.splitlines() if "by value" in x]
    if not CLOUDPICKLE:
        assert len(lines) == 2 and not said
        assert lines[1].startswith("PicklingError gpupool cannot send sq ")
        assert "pip install cloudpickle" in lines[1] and \
            "top level of a script file" in lines[1]
        return
    assert lines[1:] == ["[0, 1, 4]", "[3145728] [3145729]"]
    where = "standard input (python -)" if how == "stdin" else \
        "python -c, an interactive session or a notebook"
    assert len(said) == 1 and said[0].startswith(
        "gpupool: big travels to the workers by value, 3.0 MiB with every "
        "item (not by name: __main__ ")
    assert where in said[0] and "; it carries BIG (3.0 MiB)." in said[0]


def test_a_big_pickle_by_value_is_said_once(tmp_path):
    """The line's threshold: a lambda that carries 1 MiB is said, one
    that carries 512 KiB is not (it costs less per item than the item's
    own overhead)."""
    pytest.importorskip("cloudpickle")
    out = _py(tmp_path, """
        import gpupool
        if __name__ == "__main__":
            SMALL, BIG = bytes(512 << 10), bytes(1 << 20)
            with gpupool.Pool(fake_gpus=1, start_method="spawn") as p:
                for _ in range(3):
                    print(p.map(lambda x: len(SMALL), [0]),
                          p.map(lambda x: len(BIG), [0]))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[524288] [1048576]"] * 3
    said = [x for x in out.stderr.splitlines() if "by value" in x]
    assert len(said) == 1 and said[0].startswith(
        "gpupool: <lambda> travels to the workers by value, 1.0 MiB with "
        "every item (not by name: <lambda> is a lambda); it carries BIG "
        "(1.0 MiB).")
