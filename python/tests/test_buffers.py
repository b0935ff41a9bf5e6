"""Big objects through gpupool.Pool (pickle protocol 5, out-of-band
buffers in one framed item) on fake GPUs: every size and kind comes back
exactly, and what a worker returns or the caller keeps never points into
memory the pool reuses. numpy cases are skipped when numpy is not
importable.
"""

import os
import pickle

import pytest

import gpupool
import gpupool._gpupool as g
from cpool import pmap

try:
    import numpy
except ImportError:
    numpy = None
try:
    import cloudpickle
except ImportError:
    cloudpickle = None

SIZES = [0, 1, 64 << 10, 1 << 20, 16 << 20]
needs_numpy = pytest.mark.skipif(numpy is None, reason="numpy not importable")


@pytest.fixture(scope="module")
def pool():
    with gpupool.Pool(fake_gpus=2) as p:
        yield p


def pattern(n):
    """n bytes that differ from one offset to the next (a shifted or
    truncated copy does not compare equal)."""
    return (bytes(range(251)) * (n // 251 + 1))[:n]


def make(kind, n):
    b = pattern(n)
    if kind == "bytes":
        return b
    if kind == "bytearray":
        return bytearray(b)
    if kind == "memoryview":
        return memoryview(bytearray(b))
    return numpy.frombuffer(b, dtype=numpy.uint8).copy()


def same(kind, x, want):
    if kind == "numpy":
        return (type(x) is numpy.ndarray and x.dtype == want.dtype and
                x.shape == want.shape and x.flags.writeable and
                bool((x == want).all()))
    return type(x) is type(want) and x == want


def echo(x):
    return x


def bump(a):
    """The input array, changed in place and returned (it outlives fn)."""
    a += 1
    return a


KINDS = ["bytes", "bytearray", "memoryview",
         pytest.param("numpy", marks=needs_numpy)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", SIZES)
def test_round_trip_map_and_submit(pool, kind, n):
    want = make(kind, n)
    got = pool.map(echo, [want, want, want], chunksize=1)
    assert all(same(kind, x, want) for x in got)
    assert same(kind, pool.submit(echo, want).result(), want)


def test_memoryview_keeps_format_shape_and_read_only(pool):
    ro = memoryview(pattern(1 << 20)).cast("B").cast("I")
    rw = memoryview(bytearray(pattern(1 << 20))).cast("B").cast("d")
    for m in pool.map(echo, [ro, rw], chunksize=1) + [
            pool.submit(echo, ro).result()]:
        assert m.format in ("I", "d") and m.nbytes == 1 << 20
        assert m.readonly == (m.format == "I")
        assert m == (ro if m.format == "I" else rw)


def apply(f, x):
    return f(x)


@pytest.mark.skipif(cloudpickle is None, reason="cloudpickle not importable")
def test_memoryview_beside_a_lambda(pool):
    # A lambda sends the item through cloudpickle, which would make the
    # memoryview bytes: it stays a memoryview.
    m = memoryview(bytearray(pattern(1 << 20))).cast("B").cast("i")
    x = pool.submit(apply, lambda v: v, m).result()
    assert type(x) is memoryview and x.format == "i" and x == m


def test_results_outlive_fn_bytearray(pool):
    items = [bytearray([i]) * (1 << 20) for i in range(8)]
    got = pool.map(bump_bytes, items, chunksize=1)
    for i, x in enumerate(got):
        assert type(x) is bytearray and x == bytearray([i + 1]) * (1 << 20)


def bump_bytes(b):
    b[:] = bytes([b[0] + 1]) * len(b)
    return b


@needs_numpy
def test_results_outlive_fn_numpy(pool):
    items = [numpy.full(1 << 18, i, dtype=numpy.int32) for i in range(8)]
    got = pool.map(bump, items, chunksize=1)
    # Every result checked after the map: none was overwritten by a
    # later item going through the same worker's memory.
    for i, x in enumerate(got):
        assert x.flags.writeable and bool((x == i + 1).all()), i
    for i, x in enumerate(items):
        assert bool((x == i).all())  # the caller's arrays unchanged


@needs_numpy
def test_mixed_in_and_out_of_band_in_one_item(pool):
    d = {"a": numpy.arange(1 << 17, dtype=numpy.float64),
         "f": numpy.ones((300, 400), dtype=numpy.float32, order="F"),
         "small": numpy.arange(10),
         "b": pattern(200 << 10), "n": 7}
    for x in pool.map(echo, [d, d], chunksize=1) + [
            pool.submit(echo, d).result()]:
        assert set(x) == set(d) and x["n"] == 7 and x["b"] == d["b"]
        for k in ("a", "f", "small"):
            assert x[k].dtype == d[k].dtype and bool((x[k] == d[k]).all())
        assert x["f"].flags.f_contiguous


@needs_numpy
def test_read_only_array_comes_back_read_only(pool):
    a = numpy.arange(1 << 16)
    a.flags.writeable = False
    x = pool.submit(echo, a).result()
    assert not x.flags.writeable and bool((x == a).all())


def test_frame_and_unframe():
    bufs = [bytearray(pattern(100)), pattern(3)]
    f = g.frame(b"pickle", bufs)
    assert f[:4] == b"GPB5"
    p, got = g.unframe(f, True)
    assert bytes(p) == b"pickle" and got == bufs
    assert [type(b) for b in got] == [bytearray, bytes]
    # A plain pickle (0x80 first) is no frame.
    assert g.unframe(pickle.dumps(1, protocol=5), True) is None
    for bad in (f[:10], f[:40], b"GPB5" + b"\xff" * 12):
        with pytest.raises(ValueError):
            g.unframe(bad, True)


def test_big_in_band_pickles_come_out_the_same_either_way(pool):
    # Once a pickle was big, _dumps pickles through the Pickler's parts
    # (joined once) instead of pickle.dumps: the same bytes either way,
    # for what pickle writes out of its buffer (a big bytes whole, a big
    # bytearray as a view of it, a big str encoded) and for small
    # objects after big ones; and items and results that switch the
    # hint back and forth come back exactly.
    from gpupool import _pickles
    objs = [b"small", pattern(1 << 20), bytearray(pattern(300 << 10)),
            pattern(200 << 10).decode("latin-1"), [1, 2, 3],
            (b"k", pattern(1 << 20), 7), {"a": pattern(64 << 10)}]
    for big in (False, True, False, True):
        for o in objs:
            _pickles._big = big
            assert _pickles._dumps(o) == pickle.dumps(o, protocol=5)
    got = pool.map(echo, objs * 2, chunksize=1)
    assert got == objs * 2 and type(got[2]) is bytearray


def test_frame_into_what_alloc_gives():
    # frame(p, bufs, alloc): into alloc(n)'s buffer when it gives one (a
    # rank's out ring), else a bytes; a buffer of the wrong size is an
    # error, not a frame cut short.
    bufs = [bytearray(pattern(100)), pattern(3)]
    want = g.frame(b"pickle", bufs)
    asked = []

    def alloc(n):
        asked.append(n)
        return bytearray(n)

    got = g.frame(b"pickle", bufs, alloc)
    assert type(got) is bytearray and got == want and asked == [len(want)]
    assert g.frame(b"pickle", bufs, lambda n: None) == want
    assert g.frame(b"pickle", bufs, None) == want
    with pytest.raises(ValueError, match="gave"):
        g.frame(b"pickle", bufs, lambda n: bytearray(n - 1))
    with pytest.raises(BufferError):
        g.frame(b"pickle", bufs, lambda n: bytes(n))  # read only


def test_a_chunk_is_pickled_into_the_arena_and_a_fork_forgets_it():
    # dumps_chunk() writes a big chunk where _pickles.arena says (rank 0's
    # out ring: _link.Link.arena), from the second on (the first big one
    # is pickle.dumps()'s, the hint learns from it), and out-of-band
    # buffers' frames too; a small one as bytes; a fork's chunks never go
    # there (the rings are not mapped in it).
    from gpupool import _pickles, _task
    made = []

    def arena(n):
        if n < 64 << 10:
            return None
        made.append(bytearray(n))
        return made[-1]

    _pickles.arena = arena
    try:
        _pickles._big = False
        first = _task.dumps_chunk(b"f", 0, [pattern(1 << 20)])
        big = _task.dumps_chunk(b"f", 0, [pattern(1 << 20)])
        numpy_like = _task.dumps_chunk(b"f", 0, [memoryview(pattern(1 << 20))])
        small = _task.dumps_chunk(b"f", 0, [b"x"])
        pid = os.fork()
        if pid == 0:
            os._exit(0 if _pickles.arena is None else 1)
        assert os.waitpid(pid, 0)[1] == 0
    finally:
        _pickles.arena = None
    assert type(first) is bytes and type(small) is bytes
    assert big is made[0] and numpy_like is made[1] and len(made) == 2
    assert _task.loads(big, True)[2] == [pattern(1 << 20)]
    assert bytes(_task.loads(numpy_like, True)[2][0]) == pattern(1 << 20)


def test_view_pool_gives_memoryview_and_out():
    n = 1 << 20

    def worker(m):
        assert type(m) is memoryview and m.readonly
        return bytes(m) + b"!"

    with g.Pool(worker, fake_gpus=1, view=True) as p:
        (s1, _, small), (s2, _, big) = pmap(p, [b"x", pattern(n)])
    assert s1 == s2 == g.OK and small == b"x!"
    assert type(big) is g.Out and len(big) == n + 1
    assert bytes(big) == pattern(n) + b"!"
    m = memoryview(big)
    del big
    assert m[-1:] == b"!"  # the view keeps the result's memory



kept = []


def keeper(m):
    if m == b"keep":
        kept.append(pickle.PickleBuffer(m))  # an export of the item's view
    return bytes(m)


def test_worker_keeping_the_items_memory_leaves():
    # The item's memory is reused after fn returns: a worker holding a
    # buffer of it must not run on (its item ends CRASHED, exit 70); its
    # replacement runs the next items.
    with g.Pool(keeper, fake_gpus=1, view=True) as p:
        r = pmap(p, [b"keep", b"b"])
    assert r[0][:2] == (g.CRASHED, 70) and r[1] == (g.OK, 0, b"b")


# Items and results past the 64 MiB window of a worker's shared region
# (issue 21): they travel in pieces, with the library's own limit (the
# machine's memory) unless max_msg says otherwise.
BIG = (80 << 20) + 3


@pytest.mark.parametrize("kind", ["bytes",
                                  pytest.param("numpy", marks=needs_numpy)])
def test_items_and_results_past_the_window(pool, kind):
    want = make(kind, BIG)
    assert same(kind, pool.submit(echo, want).result(), want)
    got = pool.map(echo, [want, b"small"], chunksize=1)
    assert same(kind, got[0], want) and got[1] == b"small"


@needs_numpy
def test_big_result_from_a_small_item(pool):
    # 192 MiB made in the worker: three pieces, read in place here.
    x = pool.submit(numpy.arange, 24 << 20, dtype=numpy.int64).result()
    assert x.dtype == numpy.int64 and x.shape == (24 << 20,)
    assert x[0] == 0 and x[-1] == (24 << 20) - 1
    assert bool((x[1:] - x[:-1] == 1).all())


def test_max_msg_bounds_items_and_results():
    with gpupool.Pool(fake_gpus=1, max_msg=1 << 20) as p:
        with pytest.raises(gpupool.PoolError, match="max_msg"):
            p.submit(echo, pattern(2 << 20)).result()
        with pytest.raises(gpupool.PoolError, match="max_msg"):
            p.submit(bytes, 2 << 20).result()
        assert p.submit(echo, pattern(1000)).result() == pattern(1000)
    for bad in (0, -1, "1M", True):
        with pytest.raises(ValueError, match="max_msg"):
            gpupool.Pool(fake_gpus=1, max_msg=bad)
