"""How objects become an item's bytes and back (gpupool._task's chunks
and results, _checkpoint's digests).

Big objects, both ways: pickles are protocol 5 with a buffer_callback,
so a buffer of OOB_MIN bytes or more that pickle hands out (a numpy
array, a PickleBuffer) is not copied into the pickle but once into the
item's frame (_gpupool.frame: pickle and buffers in one item); a pickle
without such buffers is the item as before. The worker gets a memoryview
of the item (valid only during the call: the library reuses that memory)
and unpickles from it; each out-of-band buffer is copied once into a
bytes (read only) or bytearray of its own, so nothing that outlives the
call points into the item. The caller reads a result of 64 KiB or more
in place (an _gpupool.Out owning the library's buffer): its out-of-band
buffers are views of it, alive as long as what was unpickled from them.
bytes and bytearray always travel in band (pickle copies them once into
the item; unpickling copies them once out of it). A big pickle is made
from the Pickler's parts (_pickle_parts), and on rank 0 of a job across
ranks written straight into the out ring (arena: gpupool._link).
"""

import collections
import copyreg
import os
import pickle

try:
    import cloudpickle
except ImportError:  # optional: gpupool works without it
    cloudpickle = None

from . import _gpupool

_PROTO = 5  # out-of-band buffers (Python 3.8 and later)
OOB_MIN = 64 * 1024  # smaller buffers stay in band: a frame costs more


def _view(buf, fmt, shape):
    """A memoryview again, over the buffer that carried it (bytes when it
    was read only, bytearray when writable, or a view of the caller's
    Out); of its bytes only (format B) when cast() refuses its format
    (not native, or a struct)."""
    m = memoryview(buf)
    if fmt == "B" and len(shape) == 1:
        return m
    try:
        return m.cast("B").cast(fmt, shape)
    except (TypeError, ValueError):  # a format cast() does not take
        return m


def _reduce_view(m):
    if not m.c_contiguous:
        m = memoryview(m.tobytes()).cast("B").cast(m.format, m.shape)
    return _view, (pickle.PickleBuffer(m), m.format, m.shape)


class _Pickler(pickle.Pickler):
    """pickle's Pickler, with memoryviews as memoryviews (plain pickle
    refuses them). Pickler reads dispatch_table when it is made."""
    dispatch_table = collections.ChainMap({memoryview: _reduce_view},
                                          copyreg.dispatch_table)


if cloudpickle is not None:
    class _CloudPickler(cloudpickle.Pickler):
        """cloudpickle's, with memoryviews as memoryviews (it makes them
        bytes)."""
        dispatch_table = collections.ChainMap(
            {memoryview: _reduce_view}, cloudpickle.Pickler.dispatch_table)


class _Parts(list):
    """A file for a Pickler that keeps what it is given: a payload of
    64 KiB or more (a big bytes) comes whole, the object itself, and the
    rest in frames of about 64 KiB (pickle's framing)."""
    write = list.append


def _parts(obj, cls, oob):
    """obj pickled by a Pickler of class cls into a _Parts."""
    parts = _Parts()
    cls(parts, protocol=_PROTO, buffer_callback=oob).dump(obj)
    return parts


def _pickle_parts(obj, cls, oob, alloc=None):
    """The pickle of obj by a Pickler of class cls, joined once from its
    parts: one copy into a bytes of its exact size (or alloc's buffer,
    as _dumps says). pickle.dumps instead grows its bytes by half again
    each time it is full, and a pickle past malloc's mmap threshold then
    lands in fresh pages every time (glibc raises the threshold to the
    size last freed, not to the size asked next): 258 page faults and
    about 500 us for a 1 MiB bytes, against none and about 75 us this
    way."""
    parts = _parts(obj, cls, oob)
    if alloc is not None:
        e = alloc(sum(memoryview(x).nbytes for x in parts))
        if e is not None:
            m, off = memoryview(e), 0
            for x in parts:
                k = memoryview(x).nbytes
                m[off:off + k] = x
                off += k
            return e
    return b"".join(parts)


_BIG = 128 * 1024  # glibc's first mmap threshold
_big = False  # the last in-band pickle here was _BIG or more
arena = None  # rank 0's gpupool._link.Link.arena while it has rings


def _forget_arena():
    global arena
    arena = None


os.register_at_fork(after_in_child=_forget_arena)  # the rings stay there


def _dumps(obj, cp=False, alloc=None):
    """obj as one item: its pickle (cp: cloudpickle's), or the frame of
    its pickle and the out-of-band buffers of OOB_MIN bytes or more.
    plain pickle.dumps while pickles are small, _pickle_parts once one
    was big (the hint is this process's, for all threads: a stale one
    costs a few us, never a wrong pickle); _Pickler or _CloudPickler,
    which cost a Pickler, only when pickle.dumps refused obj. alloc(n)
    may give a writable buffer of n bytes for a big pickle or frame to
    be written into instead of a bytes (rank 0's out ring: the item is
    then sent from where it was made), or None."""
    global _big
    bufs = []

    def oob(pb):
        with pb.raw() as m:
            if m.nbytes < OOB_MIN:
                return True
        bufs.append(pb)
        return False

    if cp:
        p = _pickle_parts(obj, _CloudPickler, oob, alloc)
    else:
        try:
            if _big:
                p = _pickle_parts(obj, pickle.Pickler, oob, alloc)
                _big = len(p) >= _BIG
            else:
                p = pickle.dumps(obj, protocol=_PROTO, buffer_callback=oob)
                if len(p) >= _BIG:
                    _big = True
        except TypeError:  # "cannot pickle 'memoryview' object", or not
            del bufs[:]
            p = _pickle_parts(obj, _Pickler, oob, alloc)
    return _gpupool.frame(p, bufs, alloc) if bufs else p


def loads(payload, copy):
    """An item or result back into objects. copy: each out-of-band buffer
    copied into an object of its own (in a worker: payload is reused after
    the call); else views of payload, which must own its memory (the
    caller's Out)."""
    f = _gpupool.unframe(payload, copy)
    if f is None:
        return pickle.loads(payload)
    with f[0] as p:
        return pickle.loads(p, buffers=f[1])
