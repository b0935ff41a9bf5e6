"""The program of a worker that starts clean (start_method="spawn").

Run as  python -c "...; from gpupool import _spawn; _spawn.main()"  by
the library's exec'd worker (gp_pool_opts.exec; gpupool._start.argv()).
main() hands the process to the library (_gpupool.worker_main(), which
never returns): it checks the pool's protocol and version, maps the
worker's shared memory, and calls init() below, through the C init, with
the bytes gpupool._start.payload() made, before the first item:

1. multiprocessing's preparation, as its spawn start method does: the
   caller's sys.path and working directory, then its __main__ run again
   under the name __mp_main__ (what the script does under
   if __name__ == "__main__" is not run again), with
   current_process()._inheriting set, so that a Pool created at the top
   level of the script fails clearly instead of starting workers of its
   own. Unlike spawn (runpy), the script runs in the namespace of the
   module it becomes: its functions, found by name, and those sent by
   value (rebound to sys.modules["__main__"]) see one dict.
2. the Initializer (gpupool._task), unpickled once the caller's modules
   can be found, and run: the pid report, then initializer(*initargs).
   A function of __main__ sent by value sees this worker's __main__ (the
   script run again, and what the initializer sets there, which from
   then on is the worker's, as a fork's globals are).
"""

# What init() needs, imported before it puts the caller's sys.path in
# place: a script beside it named like one of these (pkgutil.py) would
# be taken for it there.
import importlib.util
import io
import pickle
import pkgutil
import sys
import types
from multiprocessing import process, spawn

from . import _byname, _task


def main():
    from . import _gpupool
    _gpupool.worker_main()


def run_main(key, value):
    """The caller's __main__ run again as __mp_main__, as spawn.prepare()
    would for key ("init_main_from_name" or "init_main_from_path",
    gpupool._start.main_source()), but in the namespace of the module that
    becomes sys.modules["__main__"]: runpy runs it in a temporary module
    and keeps a copy, so the functions defined there would read and write
    a dict the module does not show."""
    main = types.ModuleType("__mp_main__")
    if key == "init_main_from_name":
        spec = importlib.util.find_spec(value)
        if spec is None or spec.loader is None:
            raise ImportError("no module named %r to run as __mp_main__"
                              % value, name=value)
        code = spec.loader.get_code(value)
        main.__dict__.update(__file__=spec.origin, __spec__=spec,
                             __loader__=spec.loader,
                             __package__=spec.parent)
    else:
        with io.open_code(value) as f:
            code = pkgutil.read_code(f)  # a .pyc given as the script
        if code is None:
            with io.open_code(value) as f:
                code = compile(f.read(), value, "exec")
        main.__file__ = value
    spawn.old_main_modules.append(sys.modules["__main__"])
    sys.modules["__main__"] = sys.modules["__mp_main__"] = main
    exec(code, main.__dict__)


def init(payload):
    prep, init_bytes = pickle.loads(payload)
    main = [(k, prep.pop(k)) for k in ("init_main_from_name",
                                       "init_main_from_path") if k in prep]
    me = process.current_process()
    me._inheriting = True
    try:
        spawn.prepare(prep)
        if main:
            run_main(*main[0])
    finally:
        me._inheriting = False
    _task.clean = True
    _task.load_init(init_bytes)()
    # What __main__ holds now (the script's names, what the initializer
    # set, the caller's values it was sent with) is the worker's own:
    # functions sent later see it, never the caller's copies again.
    _byname.injected.clear()
