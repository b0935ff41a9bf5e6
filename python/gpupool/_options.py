"""gpupool.Pool's arguments checked and turned into the C pool's:
gpus= as text, gpu_mem= as bytes, maxtasksperchild, and processes=N
spread over the GPUs the pool would use; Pool's signature and docstring
from the library's option rows (pool_signature())."""

import inspect
import operator
import os

from . import _gpupool
from . import _task


def _gpus_arg(gpus):
    if gpus is None or isinstance(gpus, str):
        return gpus
    if isinstance(gpus, int):
        raise TypeError("gpus= takes a list of GPU ids or a string like "
                        "'0,2', not an int (for N fake GPUs: fake_gpus=N)")
    return ",".join(str(g) for g in gpus)



def _gpu_mem(v):
    """gpu_mem= as bytes: None, an int, or a size as the library reads it
    (gp_parse_size(), as gpupool-run's --mem): digits with at most one
    '.', then K, M, G or T (powers of 1024, either case) and nothing,
    "i", "B" or "iB" ("20G", "1.5GiB", "512M"); "0" alone needs no
    unit. Rounded up to a whole byte."""
    if v is None or (isinstance(v, int) and not isinstance(v, bool)):
        return v  # the C pool checks the range
    if not isinstance(v, str):
        raise ValueError("gpu_mem=%r: bytes (an int) or a size such as "
                         "'20G'" % (v,))
    try:
        return _gpupool.parse_size(v)
    except ValueError as e:
        raise ValueError("gpu_mem=%r: %s" % (v, e)) from None


def _check_processes(processes):
    if processes is None:
        return
    if not isinstance(processes, int) or isinstance(processes, bool):
        raise TypeError("processes=%r: a number of workers (an int) or "
                        "None" % (processes,))
    if processes < 1:
        raise ValueError("Number of processes must be at least 1")


def _max_tasks(maxtasksperchild, max_tasks_per_worker):
    """maxtasksperchild (multiprocessing's name: a positive int or None)
    and max_tasks_per_worker (gpupool's: 0 or None for never) as the C
    pool's count (0: never)."""
    if maxtasksperchild is not None:
        if not isinstance(maxtasksperchild, int) or \
                isinstance(maxtasksperchild, bool) or maxtasksperchild <= 0:
            raise ValueError("maxtasksperchild must be a positive int or "
                             "None")
        if max_tasks_per_worker not in (None, maxtasksperchild):
            raise ValueError("maxtasksperchild=%r and max_tasks_per_worker="
                             "%r disagree (they are one setting)"
                             % (maxtasksperchild, max_tasks_per_worker))
        return maxtasksperchild
    return max_tasks_per_worker or 0


def _unit_id(info):
    """The id gpus= takes for the GPU a planned worker sits on: its UUID,
    else its bus id, else (a fake GPU, "fakeK") K."""
    if info["uuid"]:
        return info["uuid"]
    if info["busid"]:
        return info["busid"]
    return info["visible"][4:] if info["visible"].startswith("fake") \
        else str(info["gpu"])


def _spread(processes, gpus, per_gpu, plan_kw):
    """processes=N over the G GPUs (or groups of gpus_per_worker) the
    pool would use: (gpus, per_gpu). N a multiple of G: per_gpu = N / G
    on every GPU. N under G: one worker on each of the first N. Anything
    else, or a per_gpu that disagrees, is a ValueError: the C pool gives
    every GPU the same number of workers."""
    plan = _gpupool.Pool(_task.worker_entry, gpus=gpus, plan=True, **plan_kw)
    try:
        info = plan.info()
    finally:
        plan.close()
    g = len(info)
    if per_gpu is not None:
        if processes != g * per_gpu:
            raise ValueError("processes=%d with per_gpu=%d: the pool has %d "
                             "GPUs, so %d workers (leave one of them out)"
                             % (processes, per_gpu, g, g * per_gpu))
        return gpus, per_gpu
    if processes % g == 0:
        return gpus, processes // g
    one = (plan_kw.get("gpus_per_worker") or 1) == 1  # None: 1
    if processes < g and one:
        free = gpus is not None and gpus.startswith("free")
        ids = ",".join(_unit_id(i) for i in info[:processes])
        return ("free:" if free else "") + ids, 1
    raise ValueError(
        "processes=%d: the pool has %d %s, and each takes the same number "
        "of workers: ask for a multiple of %d, or at most %d (one each on "
        "the first ones), or choose the GPUs with gpus=" % (
            processes, g, "GPUs" if one else "groups of GPUs", g, g))



# Pool()'s whole-number keywords: the range each takes (hi None: no
# bound of ours; the library's, where it has one, says more). A bool, a
# str or a float is refused as CPython's Pool refuses
# maxtasksperchild="2": ValueError, naming the keyword.
_INT_MAX = (1 << 31) - 1  # the C pool's int fields
_COUNTS = {"per_gpu": (1, _INT_MAX), "retries": (0, _INT_MAX),
           "fake_gpus": (0, _INT_MAX), "max_tasks_per_worker": (0, None)}
# The C pool counts in whole milliseconds, 32 bits of them.
_MAX_SECONDS = ((1 << 32) - 1) // 1000
# No item fits in less: the smallest (abs(None), by name) pickles to 54.
_MIN_MSG = 64


def _int_in(name, v, lo, hi, none=""):
    """v None, or an int lo .. hi (hi None: lo or more); else ValueError
    naming it, none saying what None means."""
    if v is None:
        return
    try:  # numpy's ints too, as anything with __index__
        n = None if isinstance(v, bool) else operator.index(v)
    except TypeError:
        n = None
    if n is None or n < lo or (hi is not None and n > hi):
        raise ValueError("%s=%r: must be an int %s%s" % (
            name, v, "from %d to %d" % (lo, hi) if hi is not None
            else "of %d or more" % lo, none))


def _check_counts(kw):
    """Pool()'s numeric keywords, each in its range (kw: their values)."""
    for name, (lo, hi) in _COUNTS.items():
        _int_in(name, kw[name], lo, hi)
    for name in ("timeout", "grace"):
        secs = kw[name]
        if secs is None:
            continue
        # 0, a negative value or NaN would become a 1 ms limit, inf an
        # OverflowError: refused, naming the argument.
        if isinstance(secs, bool) or not isinstance(secs, (int, float)) \
                or not 0 < secs <= _MAX_SECONDS:
            raise ValueError("%s=%r: must be a positive number of seconds, "
                             "at most %d (49 days), or None (no limit)"
                             % (name, secs, _MAX_SECONDS))
    _int_in("max_msg", kw["max_msg"], _MIN_MSG, None,
            " (bytes: no item fits in less), or None (the machine's "
            "memory)")


# The claims' longest wait the library takes (src/opts.c, an int of ms).
_CLAIM_WAIT_MAX = 2000000


def _claim_timeout(name, secs):
    """claim()'s timeout=: seconds to wait for GPUs' claims, 0 (do not
    wait) or more, or None (as long as it takes); else ValueError naming
    it, in the words Pool's claim_timeout= has (_args.c)."""
    if secs is None:
        return
    if isinstance(secs, bool) or not isinstance(secs, (int, float)) or \
            not 0 <= secs <= _CLAIM_WAIT_MAX:
        raise ValueError("%s=%r: must be a number of seconds, 0 (do not "
                         "wait) to %d, or None (as long as it takes)"
                         % (name, secs, _CLAIM_WAIT_MAX))


def _claims_dir(claims):
    """claims= of claim() and claims(): the claims directory as text (a
    str or a path), "none" (claims off) or None (GPUPOOL_CLAIMS, else the
    host's default). Pool's is _args.c's (a path row)."""
    if claims is None:
        return None
    try:
        d = os.fspath(claims)
    except TypeError:
        d = None
    if not isinstance(d, str) or not d:
        raise ValueError("claims=%r: a directory (a str or a path), "
                         "'none' (no claims) or None (GPUPOOL_CLAIMS, else "
                         "/run/lock/gpupool)" % (claims,))
    return d


def _check_call(chunksize, window=None):
    """A map's chunksize and an imap's window: None (automatic) or an
    int, 1 or more, as CPython's imap asks ("Chunksize must be 1+");
    anything else would hang, or read as an empty input."""
    _int_in("chunksize", chunksize, 1, None, ", or None (automatic)")
    _int_in("window", window, 1, None, ", or None (automatic)")


def _check_rank_timeout(secs):
    """Pool(rank_timeout=): seconds a rank may be silent (_ranks.py)."""
    if isinstance(secs, bool) or not isinstance(secs, (int, float)) or \
            not secs > 0:
        raise ValueError("rank_timeout=%r: a positive number of seconds"
                         % (secs,))


# The library's option rows (src/opts.def, gp_pool_opt_info()) that
# Python takes, by keyword: (name, py, kind, lo, hi, dflt, help).
_ROWS = {r[1]: r for r in _gpupool.pool_options() if r[1] is not None}


def pool_signature(cls):
    """cls.__init__ takes the pool options as **options (the C pool
    judges them, by their rows): its __signature__ names each one instead,
    keyword-only, default None (the library's default), and cls's
    docstring ends with a line per row, its help. inspect.signature(cls)
    and help(cls) show them; a new row of opts.def shows there as is."""
    sig = inspect.signature(cls.__init__)
    params = list(sig.parameters.values())
    assert params[-1].kind is inspect.Parameter.VAR_KEYWORD, params[-1]
    params.pop()
    named = {p.name for p in params}
    params += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY,
                                 default=None)
               for k in _ROWS if k not in named]
    cls.__init__.__signature__ = sig.replace(parameters=params)
    cls.__doc__ += ("\n    The pool options (the library's, gpupool(3); None: "
                    "its default):\n\n" + "".join(
                        "    %s: %s\n" % (k, r[6])
                        for k, r in _ROWS.items()))


def _check_options(options):
    """Pool(**options): each a pool option's keyword, else TypeError as
    Python raises it for a keyword a function does not take (before
    anything starts)."""
    for k in options:
        if k not in _ROWS:
            raise TypeError("Pool.__init__() got an unexpected keyword "
                            "argument %r" % (k,))
