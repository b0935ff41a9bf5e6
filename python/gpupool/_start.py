"""How a pool's workers start: forked from the caller, or clean (spawn).

fork is fast (a worker starts in milliseconds and has what the caller
imported) and safe while the caller runs nothing fork cannot copy. It
cannot copy a CUDA context ("Cannot re-initialize CUDA in forked
subprocess"), the threads of a runtime like JAX's XLA (their locks stay
held in the child: the first jnp call there hangs), or the threads the
user started. fork_unsafe() looks for each without touching CUDA: the
driver's device files open in this process or libcuda mapped, any
framework's; JAX's backends; Python threads that are not gpupool's. A
caller that is merely multithreaded because OpenBLAS started its pool
is fine: OpenBLAS registers pthread_atfork handlers, and its threads are
no Python threads.

spawn is the library's exec'd worker (gp_pool_opts.exec): each worker is
forked, bound, and execs a fresh interpreter running gpupool._spawn,
which re-runs the caller's __main__ as __mp_main__ (as multiprocessing's
spawn does: the script's work belongs under if __name__ == "__main__"),
then the initializer. Its argv and the bytes it gets are made here.
"""

import os
import pickle
import re
import sys
import threading

METHODS = ("fork", "spawn")
# Where the driver's device files are (a test points it elsewhere, with
# a stand-in file held open, to play an initialised CUDA context).
DEV = "/dev"
_NVDEV = re.compile(r"nvidia(ctl|-uvm|-uvm-tools|\d+)$")
# Threads the kernel of a notebook starts: not the user's, and fork
# copies none of them (ipykernel's own output works in forked workers).
_KERNEL_MODULES = ("ipykernel", "zmq", "IPython", "jupyter_client",
                   "tornado")


def _cuda_seen():
    """What shows a CUDA driver at work here, or None: an open descriptor
    onto one of its device files, else libcuda mapped."""
    prefix = DEV.rstrip("/") + "/"
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        fds = []
    for fd in fds:
        try:
            target = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if target.startswith(prefix) and _NVDEV.match(target[len(prefix):]):
            return "%s is open (fd %s)" % (target, fd)
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(None, 5)[5:]
                if path and "/libcuda.so" in path[0]:
                    return "%s is loaded" % path[0].strip()
    except OSError:
        pass
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return "torch.cuda.is_initialized() is True"
    except Exception:
        pass
    return None


def _jax_seen():
    xb = sys.modules.get("jax._src.xla_bridge")
    backends = getattr(xb, "_backends", None)
    if backends:
        return "JAX has started XLA (backends: %s)" % ", ".join(
            sorted(str(b) for b in backends))
    return None


def _threads_seen():
    """Python threads alive beside this one that neither gpupool nor a
    notebook's kernel started; the main thread too when this one is not
    it (it runs on, and may hold any lock, while Pool() forks)."""
    me, main = threading.current_thread(), threading.main_thread()
    names = []
    for t in threading.enumerate():
        if t is me or t is main or t.name.startswith("gpupool-"):
            continue
        mod = (getattr(type(t), "__module__", "") or "").split(".")[0]
        target = getattr(t, "_target", None)
        tmod = (getattr(target, "__module__", "") or "").split(".")[0]
        if mod in _KERNEL_MODULES or tmod in _KERNEL_MODULES:
            continue
        names.append(t.name)
    seen = []
    if me is not main and main.is_alive():
        seen.append("Pool() is called from thread %s, not the main thread, "
                    "which runs on" % me.name)
    if names:
        seen.append("%d thread%s started here (%s)" % (
            len(names), "" if len(names) == 1 else "s",
            ", ".join(sorted(names)[:4])))
    return "; ".join(seen) or None


def fork_unsafe():
    """Why a fork of this process would give broken workers, in a few
    words ("CUDA is initialised: /dev/nvidiactl is open (fd 7)"), or None
    when fork is safe."""
    cuda = _cuda_seen()
    if cuda is not None:
        return "CUDA is initialised in this process: " + cuda
    for seen in (_jax_seen(), _threads_seen()):
        if seen is not None:
            return seen
    return None


def not_in_a_clean_start():
    """A Pool made while a clean worker runs the caller's __main__ again
    (gpupool._spawn): the script creates it at its top level, so every
    worker would start workers of its own."""
    from multiprocessing import process
    if getattr(process.current_process(), "_inheriting", False):
        raise RuntimeError(
            "gpupool.Pool() while a worker that starts clean runs this "
            "script again (as __mp_main__): create the pool under "
            "if __name__ == '__main__': (as multiprocessing's spawn "
            "requires), so that workers do not start pools of their own.")


def method_of(start_method, context):
    """start_method= and context= (multiprocessing's, or a name) as
    "fork", "spawn" or None (choose); "forkserver" is a clean start too
    (gpupool has no fork server: it execs each worker). Env
    GPUPOOL_START_METHOD is the default when neither is given."""
    if context is not None:
        m = context if isinstance(context, str) else \
            context.get_start_method()
        if start_method is not None and start_method != m:
            raise ValueError("start_method=%r and context %r disagree"
                             % (start_method, context))
        start_method = m
    if start_method is None:
        start_method = os.environ.get("GPUPOOL_START_METHOD") or None
    if start_method == "forkserver":
        start_method = "spawn"
    if start_method is not None and start_method not in METHODS:
        raise ValueError("start_method=%r: 'fork', 'spawn' (or "
                         "'forkserver', the same here) or None"
                         % (start_method,))
    return start_method


def choose(start_method, context):
    """("fork" or "spawn", why spawn was chosen or None). A forced fork of
    a caller it would break is refused, saying why."""
    m = method_of(start_method, context)
    if m == "spawn":
        return m, None
    why = fork_unsafe()
    if m == "fork" and why is not None:
        raise RuntimeError(
            "gpupool.Pool(start_method='fork') refused: %s, and fork() "
            "cannot copy that: the workers would fail or hang. Leave "
            "start_method unset (gpupool then starts them clean) or pass "
            "start_method='spawn'." % why)
    if why is not None:
        sys.stderr.write("gpupool: workers start clean (spawn), not "
                         "forked: %s\n" % why)
        sys.stderr.flush()
        return "spawn", why
    return "fork", None


def argv():
    """The interpreter a clean worker runs, with the caller's flags
    (-O, -X, -W ...), running gpupool._spawn from this very package."""
    import subprocess
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # sys.path without -c's '' (the working directory) until the
    # caller's is put in place: a script there named like a module the
    # worker imports first (runpy.py) is not taken for it
    prog = ("import sys; sys.path = [%r] + [p for p in sys.path if p]; "
            "from gpupool import _spawn; _spawn.main()" % pkg)
    exe = sys.executable
    if not exe or not os.access(exe, os.X_OK):
        raise RuntimeError("gpupool: no interpreter to start clean workers "
                           "with (sys.executable is %r)" % (exe,))
    return [exe] + subprocess._args_from_interpreter_flags() + ["-c", prog]


def main_source():
    """(key, value) for multiprocessing's preparation data, saying how a
    clean worker runs this process's __main__ again as spawn does:
    ("init_main_from_name", "pkg.mod") under python -m pkg.mod,
    ("init_main_from_path", file) for a script; or (None, why not) when
    there is nothing to run again. Its functions then cannot be found
    by name there: they travel by value."""
    from multiprocessing import process
    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        if name == "__main__" or name.endswith(".__main__"):
            # spawn does not run it again either: such files do their
            # work unguarded
            return None, "__main__ is %s, not run again in a worker" % (
                "pkg/__main__.py (python -m pkg)" if name != "__main__"
                else "a directory's or zip file's __main__.py")
        return "init_main_from_name", name
    path = getattr(main, "__file__", None)
    if not isinstance(path, str):
        return None, ("__main__ has no file (python -c, an interactive "
                      "session or a notebook)")
    if path.startswith("<"):
        return None, "__main__ was read from %s, not a file" % (
            "standard input (python -)" if path == "<stdin>" else path)
    if not os.path.isabs(path) and process.ORIGINAL_DIR is not None:
        path = os.path.join(process.ORIGINAL_DIR, path)
    path = os.path.normpath(path)
    if not os.path.isfile(path):
        return None, "__main__'s file %s is gone" % path
    if os.path.splitext(os.path.basename(path))[0] == "ipython":
        return None, "__main__ is IPython's"  # spawn skips it too
    return "init_main_from_path", path


def payload(initializer_bytes):
    """What gpupool._spawn.init() gets: multiprocessing's preparation data
    for sys.path, the working directory and the caller's __main__ (what
    main_source() says: a script read from standard input is not run
    again, where spawn would fail to find it), plain pickle, as it is
    read before the caller's modules can be found; then the
    Initializer."""
    from multiprocessing import spawn
    # The authkey goes too (spawn.prepare() sets it in the worker): a
    # Manager's proxies, sent with items or to the initializer, prove it
    # to their manager. As plain bytes (an AuthenticationString refuses
    # pickle), in the worker's HELLO on its own channel, never in argv or
    # the environment.
    prep = spawn.get_preparation_data("gpupool-worker")
    prep["authkey"] = bytes(prep["authkey"])
    prep.pop("init_main_from_name", None)
    prep.pop("init_main_from_path", None)
    key, value = main_source()
    if key is not None:
        prep[key] = value
    return pickle.dumps((prep, initializer_bytes), protocol=5)
