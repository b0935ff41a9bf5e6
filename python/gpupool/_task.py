"""What travels to a worker and back, and the code that runs there.

A C item carries one chunk: pickle.dumps((fn_bytes, star, elements)).
fn_bytes is the function, pickled once per call (dumps_fn): a function
the workers already have (importable, or of __main__ and there when the
pool forked) by reference, so it runs as the worker's own, with the
worker's globals; any other by value (cloudpickle), its globals rebound
in the worker to the worker's module (_rebind). Workers that start clean
(gpupool._spawn) have none of the caller's memory but run the script
again: importable functions go by reference, and so do the script's
top-level functions, as multiprocessing's spawn sends them
(gpupool._byname); the others of __main__ by value (rebound to the
worker's __main__), as does the initializer (dumps_fn, load_init).
Without cloudpickle, functions travel by reference only. star is 0 for
fn(x) per element, 1 for fn(*args, **kwargs)
with elements [(args, kwargs)]. The worker answers with
pickle.dumps((values, errors)): values one per element (None where it
failed), errors None when every element succeeded (the common case, kept
cheap: no per-element tuple either side), else {index: (exception,
traceback text)}. worker_entry() never raises: a value or an
exception that cannot be pickled becomes an error outcome, so a C item
ends FAILED only if even that fails.

Big objects, both ways: gpupool._pickles.
"""

import importlib
import os
import pickle
import sys
import traceback
import types

try:
    import cloudpickle
except ImportError:  # optional: gpupool works without it
    cloudpickle = None

from . import _byname, _pickles
from ._pickles import _PROTO, _dumps, loads
_fn_cache = {}  # in a worker: fn_bytes -> function, so a map unpickles once
clean = False  # in a worker that started clean (gpupool._spawn)


class _LostFunction(Exception):
    """In a worker: fn could not be unpickled (by reference, a function
    defined in __main__ after the pool forked). The caller turns it into a
    clear error naming the fix."""


class Forked:
    """In the caller, per pool: the functions of __main__ as the workers
    have them, i.e. as they were when the pool forked, so that such a
    function travels by reference (a name and two ids) and runs in the
    worker as the worker's own. Holding them keeps their ids from being
    reused. Replacement workers fork later, from a __main__ that still
    holds these (or the worker finds another object under the name, and
    the ids say so: _LostFunction)."""

    def __init__(self):
        main = sys.modules.get("__main__")
        self.fns = {}
        for name, v in list(getattr(main, "__dict__", {}).items()):
            if type(v) is types.FunctionType and v.__qualname__ == name \
                    and v.__module__ == "__main__":
                self.fns[id(v)] = [v, v.__code__, None]

    def ref(self, fn):
        """fn's pickle by reference when the workers have it, else None."""
        e = self.fns.get(id(fn))
        if e is None or e[0] is not fn or fn.__code__ is not e[1]:
            return None
        if e[2] is None:
            e[2] = pickle.dumps(_byname.Ref(_resolve_ref, fn.__qualname__,
                                            id(fn), id(fn.__code__)),
                                protocol=_PROTO)
        return e[2]

    def lost(self, fn):
        """Whether fn is a function of __main__ the workers lack (defined
        or changed after the fork): by reference it would not be found,
        or be found as the old one."""
        return (type(fn) is types.FunctionType and fn.__module__ == "__main__"
                and "<" not in fn.__qualname__ and self.ref(fn) is None)


def _resolve_ref(qualname, fid, cid):
    """In a forked worker: __main__'s qualname, if it is the caller's
    object (a fork has it at the same address)."""
    fn = getattr(sys.modules.get("__main__"), qualname, None)
    if fn is None or id(fn) != fid or id(getattr(fn, "__code__", None)) != cid:
        raise AttributeError("__main__.%s is not the function the caller "
                             "sent: defined, deleted or changed in the "
                             "caller after the pool forked" % qualname)
    return fn


def _rebind(fn):
    """In a worker: fn as sent by value (cloudpickle gives it a globals
    dict of its own, with the caller's values) made to see the worker's
    module instead: the worker's values win (what the initializer set,
    what was there at the fork); names the worker lacks are set there
    from the caller's values, and refreshed by later calls. Helper
    functions of the same module sent along are rebound too."""
    if type(fn) is not types.FunctionType:
        return fn
    mod = sys.modules.get(fn.__module__)
    if mod is None and clean:
        # A clean worker has imported none of the caller's modules: the
        # function's own is imported, as a fork would have it.
        try:
            mod = importlib.import_module(fn.__module__)
        except Exception:
            mod = None
    g = getattr(mod, "__dict__", None)
    if g is None or fn.__globals__ is g:
        return fn
    return _rebound(fn, g, {})


def _rebound(fn, g, memo):
    new = memo.get(id(fn))
    if new is not None:
        return new
    new = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__,
                             fn.__closure__)
    memo[id(fn)] = new
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    new.__doc__ = fn.__doc__
    new.__annotations__ = fn.__annotations__
    new.__dict__.update(fn.__dict__)

    def helper(v):  # a function of the same module sent along
        if type(v) is types.FunctionType and v.__module__ == fn.__module__ \
                and v.__globals__ is not g:
            return _rebound(v, g, memo)
        return v
    _byname.inject(g, ((k, v) for k, v in fn.__globals__.items()
                       if k[:2] != "__"), helper)
    return new


_byref = {}    # in the caller: fn -> its pickle, for functions sent by name
_byvalue = {}  # fn -> (state, its pickle), for plain functions by value


def _state(fn):
    """What cloudpickle reads of a plain Python function, as identities,
    when every part of it is immutable (code, scalar defaults, scalar
    closure cells, the scalar or module globals its code names, no
    __dict__): the same state pickles to the same bytes. None when any
    part is mutable or unusual (it is then pickled at each call)."""
    if type(fn) is not types.FunctionType or fn.__dict__:
        return None
    code, g = fn.__code__, fn.__globals__
    parts = [code, fn.__defaults__, fn.__kwdefaults__, fn.__name__,
             fn.__qualname__, fn.__module__, fn.__doc__]
    if fn.__kwdefaults__ is not None:
        return None
    for v in fn.__defaults__ or ():
        if type(v) not in _byname.SCALARS:
            return None
    for c in fn.__closure__ or ():
        try:
            v = c.cell_contents
        except ValueError:  # empty cell
            return None
        if type(v) not in _byname.SCALARS:
            return None
        parts.append(v)
    for name in _byname.names(code):
        if name in g:
            v = g[name]
            if type(v) is types.ModuleType:
                # by name only: importable, not registered by value
                name_ = v.__name__
                if sys.modules.get(name_) is not v or \
                        name_ == "__main__" or name_ in getattr(
                            cloudpickle.cloudpickle,
                            "_PICKLE_BY_VALUE_MODULES", ()):
                    return None
            elif type(v) not in _byname.SCALARS:
                return None
            parts.append(name)
            parts.append(v)
    return parts


def _same(a, b):
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _of_main(fn):
    """Whether fn is, or is a method of, something defined in __main__."""
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType):
        fn = owner if isinstance(owner, type) else type(owner)
    return getattr(fn, "__module__", None) == "__main__"


def _by_name(fn):
    """fn's plain pickle when it is a reference the workers resolve to
    their own object (it loads back here as fn: an importable function,
    builtin, class or classmethod, not of __main__); else None. Such a
    function runs in the worker as the worker's own, with its real code
    (cloudpickle by value would send a copy, and a bound classmethod it
    always sends by value)."""
    if not (type(fn) in (types.FunctionType, types.MethodType,
                         types.BuiltinFunctionType)
            or isinstance(fn, type)) or _of_main(fn):
        return None
    try:
        b = pickle.dumps(fn, protocol=_PROTO)
        return b if pickle.loads(b) == fn else None
    except Exception:
        return None


def _keep(cache, fn, value):
    if len(cache) >= 256:
        cache.clear()
    cache[fn] = value


def dumps_fn(fn, forked=None):
    """Pickle fn in the caller; a clear error when it cannot travel.
    forked: the pool's Forked (functions of __main__ it has); None for
    workers whose __main__ is the script run again (_byname.dumps).

    Kept between calls (a submit then skips cloudpickle, 2-11 us): the
    pickle of a function sent by name (_by_name, _byname.dumps), and that
    of a plain function sent by value whose state (_state) is unchanged,
    object for object. Anything else is pickled at each call, as what it
    refers to may have changed since."""
    why = None  # why fn cannot go by name, when it goes by value
    if forked is not None:
        b = forked.ref(fn)
        if b is not None:
            return b
        if forked.lost(fn):
            if cloudpickle is None:
                raise _lost_in_caller(fn)
            why = "the workers were forked before it was defined or changed"
        elif cloudpickle is None:
            try:
                return pickle.dumps(fn, protocol=_PROTO)
            except Exception as e:
                raise pickle.PicklingError(
                    "gpupool cannot send %r to the workers (%s): plain "
                    "pickle sends functions by name only, so lambdas, "
                    "closures and functions of an interactive session do "
                    "not travel. Fix: pip install cloudpickle (gpupool then "
                    "sends them by value), or define the function at the "
                    "top level of a module." % (fn, e)) from e
    try:
        b = _byref.get(fn)
    except TypeError:  # an unhashable callable
        b = None
    if b is not None:
        return b
    if forked is None:  # a clean pool's own: kept by _byname.dumps
        b = _byname.kept(fn)
        if b is not None:
            return b
    b = _by_name(fn)
    if b is not None:
        if _byname.cacheable(fn):
            _keep(_byref, fn, b)
        return b
    if forked is None:
        b, why = _byname.dumps(fn)
        if b is not None:
            return b
        if cloudpickle is None:
            raise pickle.PicklingError(
                "gpupool cannot send %s to workers that start clean (or "
                "serve another rank): they find by name only what a module "
                "or the script file's top level defines, and %s; without "
                "cloudpickle functions travel by name only. Fix: pip "
                "install cloudpickle (gpupool then sends it by value), or "
                "define it with def in a module, or at the top level of "
                "a script file (not under if __name__ == '__main__':)."
                % (_byname.name_of(fn), why))
    st = _state(fn)
    if st is not None:
        hit = _byvalue.get(fn)
        if hit is not None and _same(hit[0], st):
            return hit[1]
    try:
        b = cloudpickle.dumps(fn, protocol=_PROTO)
    except Exception as e:
        raise pickle.PicklingError(
            "gpupool cannot send %s to the workers by value (%s: %s)%s"
            % (_byname.name_of(fn), type(e).__name__, e,
               ", nor by name: %s" % why if why else "")) from e
    if len(b) >= _byname.BIG:
        _byname.say_big(fn, len(b), why, lambda v: cloudpickle.dumps(
            v, protocol=_PROTO))
    if st is not None:
        _keep(_byvalue, fn, (st, b))
    return b


def dumps_value(obj):
    """obj for another process that has the caller's modules (another
    rank): by value with cloudpickle where it has one, else plainly."""
    if cloudpickle is not None:
        return cloudpickle.dumps(obj, protocol=_PROTO)
    return pickle.dumps(obj, protocol=_PROTO)


def dumps_chunk(fn_bytes, star, elements):
    """Pickle one chunk; arguments that plain pickle refuses (a lambda in
    an argument) go through cloudpickle when it is installed."""
    msg = (fn_bytes, star, elements)
    try:
        return _dumps(msg, alloc=_pickles.arena)
    except Exception:
        if cloudpickle is None:
            raise
        return _dumps(msg, True, _pickles.arena)


def _load_fn(fn_bytes):
    fn = _fn_cache.get(fn_bytes)
    if fn is None:
        try:
            fn = _rebind(pickle.loads(fn_bytes))
        except (AttributeError, ImportError) as e:
            raise _LostFunction(str(e)) from e
        if len(_fn_cache) >= 64:
            _fn_cache.clear()
        _fn_cache[fn_bytes] = fn
    return fn


def _fail(exc):
    tb = "".join(traceback.format_exception(type(exc), exc,
                                            exc.__traceback__))
    return (exc, tb)


def _run_chunk(payload):
    try:
        fn_bytes, star, elements = loads(payload, True)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # an argument's __reduce__ raised, exited
        from . import _errors  # only on failure: a clean worker's start
        return None, _fail(_errors.unpickling_failed(e, "the item in the "
                                                        "worker"))
    n = len(elements)
    try:
        fn = _load_fn(fn_bytes)
    except BaseException as e:
        return [None] * n, dict.fromkeys(range(n), _fail(e))
    values, errors = [], None
    if star:
        for i, (args, kwargs) in enumerate(elements):
            try:
                values.append(fn(*args, **kwargs))
            except BaseException as e:  # SystemExit too: the item only
                values.append(None)
                if errors is None:
                    errors = {}
                errors[i] = _fail(e)
        return values, errors
    # fn(x): list.extend(map()) runs the loop in C. When fn raises,
    # extend() has kept the values before it and the iterator stands just
    # past the failed element: record the error, go on with the rest.
    # A StopIteration from fn ends map() as if the input had ended: the
    # element where values stops short raised it (its traceback is lost).
    it = iter(elements)
    while True:
        try:
            values.extend(map(fn, it))
            if len(values) == n:
                return values, errors
            if errors is None:
                errors = {}
            errors[len(values)] = (StopIteration(
                "fn raised StopIteration"), "StopIteration (raised by fn; "
                "its traceback is not kept)\n")
            values.append(None)
        except BaseException as e:  # SystemExit too: the item fails only
            if errors is None:
                errors = {}
            errors[len(values)] = _fail(e)
            values.append(None)


def _encode_safely(values, errors):
    """Pickle the answer; a value or exception that will not pickle
    becomes an error of its own (the others keep their values)."""
    try:
        return _dumps((values, errors))
    except BaseException:
        pass
    errors = dict(errors or {})
    for i, v in enumerate(values):
        try:
            pickle.dumps(v, protocol=_PROTO)
        except BaseException as e:
            values[i] = None
            errors[i] = _fail_pickling("result", v, e)
    for i, (exc, tb) in list(errors.items()):
        try:
            pickle.dumps(exc, protocol=_PROTO)
        except BaseException as e:
            errors[i] = (_fail_pickling("exception", exc, e)[0], tb)
    return _dumps((values, errors))


def _short_repr(v):
    try:
        r = repr(v)
    except BaseException:
        r = "<%s object>" % type(v).__name__
    return r if len(r) <= 200 else r[:197] + "..."


def _fail_pickling(what, v, e):
    """(EncodingError, traceback text) for a result or an exception v
    that pickle refused with e (SystemExit from a __reduce__ included:
    the item fails, the worker stays)."""
    from . import _errors
    return _fail(_errors.EncodingError(
        "the worker could not send back the item's %s %s: %r"
        % (what, _short_repr(v), e), _short_repr(e), _short_repr(v)))


def worker_entry(payload):
    """The C pool's worker callable: a memoryview of the item in (valid
    during the call only), bytes out, never raises."""
    try:
        values, errors = _run_chunk(payload)
        if values is None:  # the item did not unpickle: errors is its
            try:            # (exception, traceback), for every element
                return _dumps((None, errors))
            except BaseException as e:
                return _dumps((None, (pickle.UnpicklingError(
                    "the worker could not unpickle the item: %s"
                    % _short_repr(errors[0])), errors[1])))
        return _encode_safely(values, errors)
    except BaseException as e:  # gpupool's own failure: say so
        return pickle.dumps((None, (RuntimeError(
            "gpupool worker could not run the item: %r" % (e,)),
            traceback.format_exc())), protocol=_PROTO)


def decode(out, n):
    """The caller's side: a GP_OK item's bytes into (values, errors),
    errors None or {index: (exception, traceback text)}. What the
    unpickling raises (KeyboardInterrupt aside) becomes every element's
    error (unpickling_failed): a result that will not unpickle here (a
    CUDA tensor in a CPU-only caller, a __reduce__ that raises or exits)
    fails its items and nothing else."""
    try:
        values, errors = loads(out, False)
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        from . import _errors
        return [None] * n, dict.fromkeys(range(n), (
            _errors.unpickling_failed(e, "the result in the caller"), ""))
    if values is None:  # the item could not be decoded: every element
        return [None] * n, dict.fromkeys(range(n), errors)
    return values, errors


def _lost_in_caller(fn):
    """Without cloudpickle, a function of __main__ the workers lack."""
    return pickle.PicklingError(
        "the workers do not have %r as it is now: it was defined or "
        "changed in __main__ after the pool forked, and without "
        "cloudpickle functions travel by name only. Fix: pip install "
        "cloudpickle (gpupool then sends such functions by value), or "
        "define the function before creating the Pool."
        % (getattr(fn, "__qualname__", fn),))


def lost_function_error(fn, exc):
    """The clear error for _LostFunction, raised in the caller."""
    return pickle.PicklingError(
        "the workers cannot find %r (%s): it was sent by name, and the "
        "workers do not have it as the caller does: they were forked "
        "before it was defined, or, started clean, the script they ran "
        "again defines it otherwise (changed on disk since it started?) "
        "or its module does not import there. Fix: define the function "
        "at the top level of a module or script, before creating the "
        "Pool%s." % (getattr(fn, "__qualname__", fn), exc,
                     "" if cloudpickle is not None else ", or pip install "
                     "cloudpickle (gpupool then sends the functions of "
                     "__main__ it cannot send by name by value)"))


def load_init(b):
    """In a clean worker: the Initializer, its initializer made to see
    this worker's module (what it sets there, fn sees)."""
    init = pickle.loads(b)
    init.initializer = _rebind(init.initializer)
    init.forked = False
    return init


class Initializer:
    """The C pool's init callable: runs multiprocessing's after-fork hooks,
    then initializer(*initargs), in each worker, after the library has put
    the worker's CUDA_VISIBLE_DEVICES and the rest into os.environ. On failure the traceback is written to
    report_fd (a pipe the caller reads to explain InitError), then the
    exception propagates so the C pool fails with GP_EINIT.

    First, every worker (replacements too) writes its pid, 4 bytes, to
    pid_fd: a non-blocking pipe the caller keeps open until join(), so
    that terminate() can kill a replacement forked during a call running
    in another thread, whose pid the caller cannot ask the C pool for.

    report is [write end, read end] of that pipe while
    Pool() runs; the caller sets it to None once the first workers are
    up, so a replacement worker forked later never touches an fd number
    that may since have been reused."""

    def __init__(self, initializer, initargs, report, pid_fd):
        self.initializer = initializer
        self.initargs = tuple(initargs)
        self.report = report
        self.pid_fd = pid_fd
        self.forked = True  # False in a worker that started clean

    def __call__(self):
        if not self.forked:
            # It crossed the exec: what the items exec must not hold it.
            os.set_inheritable(self.pid_fd, False)
        try:  # tell the caller this worker's pid (terminate() kills by it)
            os.write(self.pid_fd, os.getpid().to_bytes(4, "little"))
        except OSError:  # full (the caller drains it) or closed
            pass
        fd, rfd = self.report if self.report is not None else (None, None)
        if rfd is not None:
            try:
                os.close(rfd)  # the read end is the caller's
            except OSError:
                pass
        try:
            # What multiprocessing runs in each process it forks: its
            # objects given to the initializer (a Queue, a Lock, a
            # Manager's proxies) then work here as in its own workers.
            mpu = sys.modules.get("multiprocessing.util")
            if mpu is not None and self.forked:
                mpu._run_after_forkers()
            if self.initializer is not None:
                self.initializer(*self.initargs)
        except BaseException:
            if fd is not None:
                text = ("worker pid %d: %s" % (os.getpid(),
                        traceback.format_exc())).encode(errors="replace")
                try:  # one write under PIPE_BUF: atomic, never blocks
                    os.write(fd, text[-4000:])
                except OSError:
                    pass
            raise
        finally:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass


class _Star:
    """fn(*args), picklable when fn is (starmap's)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, args):
        return self.fn(*args)
