"""Functions of __main__ by name, to workers whose __main__ is the script
run again, and what is said when a function must go by value and is big.

A worker that starts clean (gpupool._spawn), or another rank's (python
-m gpupool), runs the caller's script again as __mp_main__, as
multiprocessing's spawn does: what its top level defines is there, what
its if __name__ == "__main__": part does is not. So a function of
__main__ goes there as spawn sends it, by name (dumps()), when that run
defines it as the caller has it: the name holds it in the caller, and a
def (or class) statement of the script's top level made it (read from
the script's syntax tree, _top). Its globals are then the worker's own:
a module lock is a fresh lock there, a big table is built there once,
and neither travels. The names it reads that the worker's run does not
set (what the guarded part set: args, a config) go along by value and
are set in the worker's __main__ where it lacks them (given()), as a
function sent by value would have them (gpupool._task._rebind). The
worker checks that the name gives the same code (its first line and
code's checksum: the script unchanged since). Anything else of __main__
(a lambda, a nested function, one defined under the guard or made at
run time, any function where there is no script to run again: python
-c, a script read from standard input, a notebook) goes by value with
cloudpickle, and when that pickle is big, one line on stderr says so
(say_big()), naming what it carries.
"""

import binascii
import io
import pickle
import sys
import types

_PROTO = 5  # gpupool._task's


class Ref:
    """Pickles as func(*args): in a worker, what the caller named."""

    def __init__(self, func, *args):
        self.reduced = (func, args)

    def __reduce__(self):
        return self.reduced


# In a worker, per module dict: the names set there by inject() (the
# caller's, refreshed at each call), as opposed to the worker's own.
injected = {}


def inject(g, items, convert=None):
    """Set in the module dict g each (name, value) of items that g lacks
    or that was set this way before (the worker's own names win), the
    value through convert when given."""
    mine = injected.setdefault(id(g), set())
    for k, v in items:
        if k in g and k not in mine:
            continue
        g[k] = v if convert is None else convert(v)
        mine.add(k)


def names(code):
    """The names (globals, attributes) that code and the code nested in
    it use, in a fixed order."""
    out, codes = [], [code]
    while codes:
        co = codes.pop()
        out.extend(co.co_names)
        codes.extend(c for c in co.co_consts if type(c) is types.CodeType)
    return out


def _chain(fn):
    """fn, then what it wraps (functools.wraps' __wrapped__), in turn."""
    for _ in range(100):
        yield fn
        fn = getattr(fn, "__wrapped__", None)
        if fn is None:
            return


def _crc(code):
    """A checksum of what code does: its bytecode, names and constants
    (nested code by its own checksum; a frozenset's items in an order
    that string hashing, seeded per process, does not change)."""
    parts = [code.co_code, code.co_names]
    for c in code.co_consts:
        parts.append(_crc(c) if type(c) is types.CodeType else
                     sorted(map(repr, c)) if type(c) is frozenset else c)
    return binascii.crc32(repr(parts).encode())


def _resolve_main(qualname, line, crc):
    """In a worker whose __main__ is the script run again (or a fork of
    the caller): __main__.<qualname>, checked to be what the caller sent:
    a function with the same code (the line it starts on, _crc), its own
    or one it wraps; a class (line None)."""
    obj = sys.modules.get("__main__")
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if isinstance(obj, type) if line is None else any(
            type(f) is types.FunctionType and
            f.__code__.co_firstlineno == line and _crc(f.__code__) == crc
            for f in _chain(obj)):
        return obj
    raise AttributeError(
        "__main__.%s, in the script as the worker ran it again, is not "
        "what the caller sent by name (was the script changed since it "
        "started?)" % qualname)


def _given(names, obj):
    """In a worker: obj, once the globals sent with it are set in its
    __main__ where the worker lacks them."""
    inject(sys.modules["__main__"].__dict__, names.items())
    return obj


# In the caller: a script's path -> what a worker's run of it defines.
_scripts = {}


def _top(path):
    """What the script at path defines when a worker runs it again (its
    if __name__ == "__main__": part skipped, and, to be safe, both
    branches of any if that tests __name__): ({name: [(first line, last
    line) of each def or class statement that binds it]}, every name its
    statements bind)."""
    hit = _scripts.get(path)
    if hit is not None:
        return hit
    import ast  # here, not in a worker's start-up
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
              ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
              ast.GeneratorExp)
    with io.open_code(path) as f:
        todo = list(ast.parse(f.read()).body)
    defs, bound = {}, set()
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and any(
                isinstance(x, ast.Name) and x.id == "__name__"
                for x in ast.walk(node.test)):
            continue
        if isinstance(node, scopes):  # what is inside binds nothing here
            if isinstance(node, scopes[:3]):
                first = min([node.lineno] +
                            [d.lineno for d in node.decorator_list])
                defs.setdefault(node.name, []).append(
                    (first, node.end_lineno))
                bound.add(node.name)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0]
                         for a in node.names)
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        for a in ("name", "rest"):  # except ... as name, match patterns
            v = getattr(node, a, None)
            if isinstance(v, str):
                bound.add(v)
        todo.extend(ast.iter_child_nodes(node))
    _scripts[path] = hit = (defs, bound)
    return hit


class _NotByName(Exception):
    """Why a function or class of __main__ cannot be found by name in a
    worker that runs the script again."""


class _MainPickler(pickle.Pickler):
    """Plain pickle, where each function and class of __main__ goes by
    name (_resolve_main) if a worker running the script again defines it
    as the caller has it: its name holds it, and a def or class statement
    of the script's top level (defs, from _top) made it. Else, or with
    why (the script cannot be run again), _NotByName says why. sent: the
    functions so sent (the globals they read: _reads)."""

    def __init__(self, f, main, defs, why):
        super().__init__(f, protocol=_PROTO)
        self.main, self.defs, self.why, self.sent = main, defs, why, []

    def reducer_override(self, obj):
        if not (type(obj) is types.FunctionType or isinstance(obj, type)) \
                or getattr(obj, "__module__", None) != "__main__":
            return NotImplemented
        q = obj.__qualname__
        if self.why is not None:
            raise _NotByName(self.why)
        if "<" in q:
            raise _NotByName("%s is %s" % (q, "a lambda" if q.endswith(
                "<lambda>") else "defined inside a function"))
        spans = self.defs.get(q.split(".")[0])
        if not spans:
            raise _NotByName(
                "%s is not defined at the top level of the script (it is "
                "under if __name__ == '__main__':, or made otherwise)" % q)
        cur = self.main
        for part in q.split("."):
            cur = getattr(cur, part, None)
        if cur is not obj:
            raise _NotByName("__main__.%s is another object now "
                             "(redefined, or replaced)" % q)

        def made_there(f):
            line = f.__code__.co_firstlineno
            return any(a <= line <= b for a, b in spans)
        if isinstance(obj, type):
            fns = [f for f in (getattr(v, "__func__", v)
                               for v in vars(obj).values())
                   if type(f) is types.FunctionType and
                   f.__qualname__.startswith(q + ".")]
            if not all(map(made_there, fns)):
                raise _NotByName("class %s is not the one the script's "
                                 "top level defines" % q)
            self.sent.extend(fns)
            return _resolve_main, (q, None, None)
        for f in _chain(obj):
            if type(f) is types.FunctionType and made_there(f):
                self.sent.append(obj)
                return _resolve_main, (q, f.__code__.co_firstlineno,
                                       _crc(f.__code__))
        raise _NotByName("%s is not what the script's top level defines "
                         "under that name (it was made or changed when the "
                         "script ran)" % q)


_ABSENT = object()  # a name _reads() found read but not set


def _reads(fns, g, cells):
    """(name, value) of the globals of the module dict g that fns (and
    what they wrap) read, _ABSENT where g lacks it, following the
    functions and classes of g they name, and with cells, of their
    closure cells: what cloudpickle sends with them by value; without,
    what a worker running the script again must have (it has the cells
    of its own functions)."""
    seen, todo = set(), list(fns)
    while todo:
        for f in _chain(todo.pop()):
            if type(f) is not types.FunctionType or id(f) in seen:
                continue
            seen.add(id(f))
            for name, c in zip(f.__code__.co_freevars,
                               cells and f.__closure__ or ()):
                try:
                    yield name, c.cell_contents
                except ValueError:  # an empty cell
                    pass
            if f.__globals__ is not g:
                continue
            for name in names(f.__code__):
                if name[:2] == "__":
                    continue
                v = g.get(name, _ABSENT)
                yield name, v
                if type(v) is types.FunctionType:
                    todo.append(v)
                elif isinstance(v, type) and \
                        v.__module__ == g.get("__name__"):
                    todo.extend(getattr(m, "__func__", m)
                                for m in vars(v).values())


SCALARS = (int, float, complex, str, bytes, bool, type(None))
# fn -> (what _reads() gave that the worker's run does not set, and the
# pickle when those are scalars or unset: while they are the same, it is)
_kept = {}


def cacheable(fn):
    """Whether fn's pickle by name may be kept: it holds no object whose
    life the cache would extend (a bound method holds its instance)."""
    t = type(fn)
    if t is types.FunctionType or isinstance(fn, type):
        return True
    if t is types.MethodType:  # a classmethod holds only its class
        return isinstance(fn.__self__, type)
    return t is types.BuiltinFunctionType and \
        type(getattr(fn, "__self__", None)) in (types.ModuleType, type(None))


def _hit(fn):
    """What dumps() kept of fn ((globals read, pickle or None)), or None."""
    try:
        return _kept.get(fn)
    except TypeError:  # an unhashable callable
        return None


def kept(fn):
    """The pickle dumps(fn) kept, while the globals it was kept with are
    the same; else None."""
    hit = _hit(fn)
    if hit is not None and hit[1] is not None:
        g = getattr(sys.modules.get("__main__"), "__dict__", {})
        if all(g.get(k, _ABSENT) is v for k, v in hit[0]):
            return hit[1]
    return None


def dumps(fn):
    """(pickle, None) of fn for workers whose __main__ is this script run
    again (started clean, or another rank's), by name as multiprocessing's
    spawn sends it: plain pickle, each function and class of __main__
    checked to be found there (_MainPickler), and with them the globals
    they read that the worker's run of the script does not set (_given
    sets them there). (None, why) when it cannot go so: then by value,
    with cloudpickle. Kept for the next call (a submit then costs a
    microsecond) while those globals are the same scalars, or unset;
    while they are others, their names are, to pickle fn once."""
    b = kept(fn)
    if b is not None:
        return b, None
    main = sys.modules.get("__main__")
    g = getattr(main, "__dict__", {})
    hit = _hit(fn)  # the names of the globals it reads
    from . import _start
    key, src = _start.main_source()
    why, defs, bound = None, {}, set()
    if key is None:
        why = src
    else:
        path = src if key == "init_main_from_path" else \
            getattr(main, "__file__", None)
        try:
            defs, bound = _top(path)
        except (OSError, SyntaxError, ValueError, TypeError) as e:
            why = "the script %s cannot be read (%s)" % (path, e)
    along = {k: g[k] for k, _ in hit[0] if k in g} if hit else {}
    while True:
        f = io.BytesIO()
        p = _MainPickler(f, main, defs, why)
        try:
            p.dump(Ref(_given, along, fn) if along else fn)
        except _NotByName as e:
            return None, str(e)
        except Exception as e:  # not by plain pickle
            return None, "plain pickle refuses it (%s)" % e
        reads = [(k, v) for k, v in _reads(p.sent, g, False)
                 if k not in bound]
        more = {k: v for k, v in reads if v is not _ABSENT}
        if more.keys() <= along.keys():
            if cacheable(fn):
                if len(_kept) >= 256:
                    _kept.clear()
                _kept[fn] = (reads, f.getvalue() if all(
                    v is _ABSENT or type(v) in SCALARS for _, v in reads)
                    else None)
            return f.getvalue(), None
        along.update(more)


# A function whose pickle by value is this big is said, once: it goes
# with every item, where 1 MiB costs about 1.2 ms (a trivial item 30 us,
# 2 cores), more than most items run; smaller closures (a table of a few
# hundred KiB) are left unsaid (test_byname.py:
# test_a_big_pickle_by_value_is_said_once).
BIG = 1 << 20
_told = set()  # the code objects (else names) said so


def name_of(fn):
    """What to call fn in a message."""
    n = getattr(fn, "__qualname__", None)
    if isinstance(n, str):
        return n
    try:
        return repr(fn)[:200]
    except Exception:
        return "<%s object>" % type(fn).__name__


def _mib(n):
    return "%.1f MiB" % (n / 1048576.0)


def _carried(fn):
    """(name, value) of what fn takes along by value: the arguments a
    partial binds, a method's instance, the globals and closure cells its
    code reads (_reads)."""
    import functools
    if isinstance(fn, functools.partial):
        for i, a in enumerate(fn.args):
            yield "argument %d" % i, a
        yield from fn.keywords.items()
        fn = fn.func
    if type(fn) is types.MethodType:
        yield "self", fn.__self__
        fn = fn.__func__
    g = getattr(fn, "__globals__", None)
    if g is not None:
        yield from ((k, v) for k, v in _reads([fn], g, True)
                    if v is not _ABSENT)


def say_big(fn, size, why, dumps_value):
    """One line on stderr, once per function: fn travels by value, size
    bytes with every item (why: why not by name); the three heaviest
    things it carries, weighed by dumps_value."""
    code = getattr(fn, "__code__", None)
    key = code if type(code) is types.CodeType else name_of(fn)
    if key in _told:
        return
    _told.add(key)
    weights = {}
    for name, v in _carried(fn):
        try:
            weights[name] = len(dumps_value(v))
        except Exception:
            pass
    heavy = sorted(((w, n) for n, w in weights.items()
                    if w >= 64 * 1024), reverse=True)[:3]
    sys.stderr.write(
        "gpupool: %s travels to the workers by value, %s with every "
        "item%s%s. By name it would not: define it with def at the top "
        "level of the script file (not under if __name__ == '__main__':), "
        "or load big data once per worker, in initializer=.\n" % (
            name_of(fn), _mib(size),
            " (not by name: %s)" % why if why else "",
            "; it carries " + ", ".join("%s (%s)" % (n, _mib(w))
                                        for w, n in heavy) if heavy else ""))
    sys.stderr.flush()
