"""Checkpoints for maps: map(fn, items, checkpoint=PATH) records each
finished chunk in PATH as it ends; a later call with the same PATH takes
the chunks recorded there instead of running them, and runs the rest.

An item is identified by its position and the digest of its chunk: a
record counts for this call only when the same positions of this call's
items digest the same (BLAKE2b-128 of their list's pickle, protocol 5,
out-of-band buffers digested in place). The map's function is identified
by its module and qualified name, in the description record.

The file, its lock and the options (Checkpoint) are _ckfile.py's.
"""

import functools
import hashlib
import os
import pickle
import types
import warnings
from array import array
from bisect import bisect_left

from . import _errors
from . import _jobs
from . import _pickles
from . import _progress
from . import _task

# FORMAT, _HLEN, _LINE, _MAGIC and records: what python/tests read of a
# checkpoint's file, from here.
from ._ckfile import (  # noqa: F401
    FORMAT, _CHUNK, _HLEN, _LINE, _MAGIC, Checkpoint, CheckpointError,
    CheckpointWarning, _changed, _File, _Rec, _spans_text, records)


def _options(checkpoint):
    if isinstance(checkpoint, Checkpoint):
        return checkpoint
    if isinstance(checkpoint, (str, bytes, os.PathLike)):
        return Checkpoint(checkpoint)
    raise TypeError("checkpoint=%r: a path or a gpupool.Checkpoint"
                    % (checkpoint,))


# -- what identifies a call's items and function ----------------------------

def digest(elements):
    """BLAKE2b-128 of the pickle of list(elements), as _task pickles a
    chunk: protocol 5, out-of-band buffers (a numpy array's memory)
    digested where they lie, memoryviews as _task sends them, and what
    plain pickle refuses (a lambda in an argument) as cloudpickle pickles
    it."""
    if type(elements) is not list:
        elements = list(elements)
    try:
        return _digest(elements, False)
    except Exception:
        if _task.cloudpickle is None:
            raise
        return _digest(elements, True)


def _digest(elements, cp):
    """The digest of elements' pickle (cp: cloudpickle's), its out-of-band
    buffers first as pickle hands them out, then the pickle from its
    parts (_pickles._parts(): big bytes whole, the rest in frames), so that
    even a call's items of many MiB are digested without a pickle of
    them all in memory: the same digest as of pickle.dumps()'s bytes."""
    h = [None]

    def oob(pb):
        try:
            with pb.raw() as m:
                h[0].update(m)
        except BufferError:  # not contiguous
            h[0].update(memoryview(pb).tobytes())
        return False

    def parts(cls):
        h[0] = hashlib.blake2b(digest_size=16)
        for x in _pickles._parts(elements, cls, oob):
            h[0].update(x)
        return h[0].digest()

    if cp:
        return parts(_pickles._CloudPickler)
    try:
        return parts(pickle.Pickler)
    except TypeError:  # a memoryview
        return parts(_pickles._Pickler)


def fn_identity(fn):
    """What names fn in a checkpoint: module:qualname (of the function
    of a bound method, of the class of a callable instance); starmap's
    wrapper and functools.partial say so, a partial with its arguments'
    digest."""
    from ._task import _Star
    if isinstance(fn, _Star):
        return "*" + fn_identity(fn.fn)
    if isinstance(fn, functools.partial):
        return "partial(%s)#%s" % (fn_identity(fn.func), digest(
            [fn.args, fn.keywords]).hex())
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    name = getattr(fn, "__qualname__", None)
    if not isinstance(name, str):
        fn = type(fn)
        name = fn.__qualname__
    return "%s:%s" % (getattr(fn, "__module__", None), name)



# -- map --------------------------------------------------------------------

class _Load:
    """A map's items against its checkpoint, record by record in file
    order: each record whose items digest the same gives their results,
    the later record winning where two cover an item."""

    def __init__(self, ck, fn, items):
        self.ck, self.fn, self.items = ck, fn, items
        n = self.n = len(items)
        self.results = [None] * n
        self.done = bytearray(n)
        self.failed = {}  # index -> (seq, exception)
        self.bad = []     # spans recorded for other items
        for r in ck.records():
            self.apply(r)
        ck.trim()

    def apply(self, r):
        start, end = r.start, r.start + r.count
        if end > self.n:
            return  # the list is shorter now: it does not apply
        if digest(self.items[start:end]) != r.digest:
            self.bad.append((start, end))
            return
        got = self.ck.outcome(self.fn, r)
        if got is None:
            return
        values, excs = got
        self.results[start:end] = values
        self.done[start:end] = b"\x01" * r.count
        if self.failed:
            for i in [i for i in self.failed if start <= i < end]:
                del self.failed[i]
        for i, e in (excs or {}).items():
            self.results[start + i] = e
            self.failed[start + i] = (r.seq, e)

    def changed(self):
        """The spans recorded for other items and not recorded since."""
        return [s for s in self.bad if self.done[s[0]:s[1]].count(0)]

    def gaps(self):
        out, d = [], self.done
        i = d.find(0)
        while i != -1:
            j = d.find(1, i)
            j = self.n if j == -1 else j
            out.append((i, j))
            i = d.find(0, j)
        return out


class _MapJob(_jobs.MapJob):
    """MapJob over the gaps a checkpoint leaves, each chunk recorded as
    it ends."""

    def __init__(self, load, chunksize, return_exceptions, progress,
                 forked, stop):
        super().__init__(load.fn, load.items, chunksize, return_exceptions,
                         progress, forked)
        self.results = load.results
        self.ck = load.ck
        self.gaps = load.gaps()[::-1]
        self.cur = [0, 0]
        self.sent = {}  # chunk start -> (count, digest)
        self.stop = stop

    def next_item(self):
        while self.cur[0] >= self.cur[1]:
            if not self.gaps:
                return None
            self.cur = list(self.gaps.pop())
        start = self.cur[0]
        end = self.cur[0] = min(start + self.chunksize, self.cur[1])
        chunk = self.slice(start, end)
        self.sent[start] = (end - start, digest(chunk))
        return start, _task.dumps_chunk(self.fn_bytes, 0, chunk)

    def finish(self, start, status, code, out):
        n, dg = self.sent.pop(start)
        try:
            self.ck.record(start, n, dg, status, code, out, self.stop)
        except CheckpointError as e:
            raise _jobs.Abort(e) from None
        self.store(start, n, status, code, out)


def _prepare(load, opts, return_exceptions):
    """What the recorded part decides before anything runs: changed
    chunks (an error, or a warning), failures (raised as the map would
    have, or run again)."""
    bad = load.changed()
    if bad and opts.changed == "error":
        raise CheckpointError(_spans_text(opts.path, bad), opts.path)
    if bad:
        warnings.warn(CheckpointWarning(_changed(opts.path, bad) +
                                        ": they run again"), stacklevel=4)
    if opts.rerun_failed:
        for i in load.failed:
            load.done[i] = 0
    elif load.failed and not return_exceptions:
        # The first failure to have completed, as map raises it.
        i = min(load.failed, key=lambda i: (load.failed[i][0], i))
        raise load.failed[i][1]


def run_map(fn, items, chunksize, return_exceptions, progress, checkpoint,
            forked, stop, chunksize_for, run_job):
    """Pool.map(..., checkpoint=...): the recorded results, and those of
    the rest, run now and recorded: a _MapJob over what is pending (of
    chunksize, or chunksize_for(pending, the first pending item)), run by
    run_job(job, bar) (the pool's, as a map without a checkpoint)."""
    opts = _options(checkpoint)
    ck = _File(opts, fn_identity(fn))
    try:
        load = _Load(ck, fn, items)
        _prepare(load, opts, return_exceptions)
        pending = load.done.count(0)
        if pending and ck.readonly:
            raise CheckpointError("checkpoint %r is read-only and %d items "
                                  "are not recorded there" % (opts.path,
                                                              pending),
                                  opts.path)
        if pending:
            bar = _progress.make(progress, load.n)
            if bar is not None:
                bar.update(load.n - pending)
            first = load.items[load.done.index(0)]
            job = _MapJob(load, chunksize or chunksize_for(pending, first),
                          return_exceptions, bar, forked, stop)
            run_job(job, bar)
    except BaseException:
        ck.close(quiet=True)
        raise
    ck.close()
    return load.results


# -- imap -------------------------------------------------------------------

class _Index:
    """The chunk records of a checkpoint, for a stream that meets its
    items one by one: compact arrays (about 60 bytes a record), sorted by
    start, then file order."""

    def __init__(self, ck):
        cols = {k: array(t) for k, t in (("start", "Q"), ("count", "Q"),
                                         ("off", "Q"), ("plen", "Q"),
                                         ("status", "i"), ("code", "i"),
                                         ("pcrc", "I"))}
        dgs = bytearray()
        for r in ck.records():
            for k, a in cols.items():
                a.append(getattr(r, k))
            dgs += r.digest
        ck.trim()
        order = sorted(range(len(cols["start"])),
                       key=cols["start"].__getitem__)
        self.cols, self.dgs = cols, dgs
        self.order = array("Q", order)
        self.starts = array("Q", (cols["start"][i] for i in order))

    def rec(self, i):
        r = _Rec()
        for k, a in self.cols.items():
            setattr(r, k, a[i])
        r.kind, r.seq = _CHUNK, i
        r.digest = bytes(self.dgs[16 * i:16 * i + 16])
        return r

    def at(self, p):
        """(end, [records in file order]) of the records starting at p
        and of those starting inside them, or None; else the next start
        after p (None: none)."""
        s = self.starts
        j = bisect_left(s, p)
        if j == len(s) or s[j] != p:
            return None, (s[j] if j < len(s) else None)
        end, recs = p + 1, []
        while j < len(s) and s[j] < end:
            r = self.rec(self.order[j])
            end = max(end, r.start + r.count)
            recs.append(r)
            j += 1
        recs.sort(key=lambda r: r.seq)
        return (end, recs), None


class _StreamJob(_jobs.StreamJob):
    """StreamJob with a checkpoint: elements at recorded positions are
    taken from the input whole records at a time and their results come
    from the file; the others run, each chunk recorded as it ends."""

    def __init__(self, fn, iterable, chunksize, window, ordered,
                 return_exceptions, progress, forked, on_interrupt,
                 ck, index, opts, stop):
        super().__init__(fn, iterable, chunksize, window, ordered,
                         return_exceptions, progress, forked, on_interrupt)
        self.ck, self.index, self.opts, self.stop = ck, index, opts, stop
        self.todo = []     # chunks to run: (start, elements), last first
        self.digests = {}  # chunk start -> digest, in flight
        self.warned = False

    def next_item(self):
        while True:
            with self.cv:
                if self.canceled:
                    raise _jobs.Abort(_errors.Canceled("imap was stopped"))
                room = self.window - (self.taken - self.consumed)
                if not self.todo and (self.exhausted or room <= 0):
                    return None
                start = self.taken
            if self.todo:
                start, chunk = self.todo.pop()
                return self._send(start, chunk, False)
            here, nxt = self.index.at(start)
            if here is None:
                k = min(self.chunksize, room)
                chunk = self.take(k if nxt is None else min(k, nxt - start))
                if not chunk:
                    with self.cv:
                        self.cv.notify_all()
                    return None
                return self._send(start, chunk, True)
            self._recorded(start, here)

    def _send(self, start, chunk, fresh):
        with self.cv:
            if fresh:
                self.taken += len(chunk)
            self.sizes[start] = len(chunk)
        self.digests[start] = digest(chunk)
        return start, _task.dumps_chunk(self.fn_bytes, 0, chunk)

    def _recorded(self, p, here):
        """The elements of the records at p: outcomes from the file where
        they digest the same, the rest queued to run."""
        end, recs = here
        elems = self.take(end - p)
        with self.cv:
            self.taken += len(elems)
        outs, bad = [None] * len(elems), []
        for r in recs:
            s, e = r.start - p, r.start - p + r.count
            if e > len(elems):
                continue  # the input ended inside it
            if digest(elems[s:e]) != r.digest:
                bad.append((r.start, r.start + r.count))
                continue
            got = self.ck.outcome(self.fn, r)
            if got is not None:
                values, excs = got
                outs[s:e] = [("err", excs[i]) if excs and i in excs else
                             ("ok", v) for i, v in enumerate(values)]
        bad = [b for b in bad if None in outs[b[0] - p:b[1] - p]]
        if bad:
            self._changed(bad)
        if self.opts.rerun_failed:
            outs = [None if o is not None and o[0] == "err" else o
                    for o in outs]
        self._deliver(p, outs)
        i = 0
        while i < len(outs):  # each run of unrecorded elements, chunked
            if outs[i] is not None:
                i += 1
                continue
            j = i
            while j < len(outs) and outs[j] is None and \
                    j - i < self.chunksize:
                j += 1
            self.todo.insert(0, (p + i, elems[i:j]))
            i = j

    def _changed(self, bad):
        if self.opts.changed == "error":
            raise _jobs.Abort(CheckpointError(
                _spans_text(self.opts.path, bad), self.opts.path))
        if not self.warned:
            self.warned = True
            try:
                warnings.warn(CheckpointWarning(
                    _changed(self.opts.path, bad) + ": they run again"))
            except Warning as w:  # warnings made errors
                raise _jobs.Abort(w) from None

    def _deliver(self, p, outs):
        n = 0
        with self.cv:
            for i, o in enumerate(outs):
                if o is None:
                    continue
                n += 1
                if self.ordered:
                    self.ready[p + i] = o
                else:
                    self.ready.append(o)
            self.cv.notify_all()
        if n and self.progress is not None:
            self.progress.update(n)

    def finish(self, start, status, code, out):
        with self.cv:
            n = self.sizes[start]
        try:
            self.ck.record(start, n, self.digests.pop(start), status, code,
                           out, self.stop)
        except CheckpointError as e:
            raise _jobs.Abort(e) from None
        super().finish(start, status, code, out)

    def end(self, error):
        try:
            self.ck.close(quiet=error is not None)
        except CheckpointError as e:
            error = e
        super().end(error)


def stream_job(fn, iterable, chunksize, window, ordered, return_exceptions,
               progress, checkpoint, forked, on_interrupt, stop):
    """imap/imap_unordered's job with a checkpoint, opened (and its
    records indexed) now, in the caller's thread: a checkpoint in use or
    not usable raises from imap() itself. forked, on_interrupt and stop
    are the pool's, as _jobs.StreamJob takes them."""
    opts = _options(checkpoint)
    ck = _File(opts, fn_identity(fn))
    try:
        index = _Index(ck)
        return _StreamJob(fn, iterable, chunksize, window, ordered,
                          return_exceptions, progress, forked,
                          on_interrupt, ck, index, opts, stop)
    except BaseException:
        ck.close(quiet=True)
        raise
