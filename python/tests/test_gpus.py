"""gpupool.Pool on shared GPUs: busy GPUs left out or waited for, memory
packing, several GPUs per worker, no NVML, and bad values.

The machine is the fake libnvidia-ml.so.1 of the build (test/fake_nvml.c,
built as BUILD/test/libnvidia-ml.so.1; run.sh installs the package into
BUILD/pyvenv, so BUILD is the venv's parent), loaded through GPUPOOL_NVML
by the pool's monitor child, never by this process. It reads the state
file named by GP_FAKE_NVML, which each test writes (format in
fake_nvml.c's header); fake GPU i is its NVML device i. Both variables
are set in os.environ before the Pool is created, so the monitor child
inherits them. No test synchronises by timing: items sleep only to
overlap, and the packing test checks what overlapped.
"""

import os
import sys
import time

import pytest

import gpupool
from gpupool import _pool
# Every test here leaves no child (the monitor included): test_core's
# autouse fixture, used by this module too.
from test_core import no_child_left  # noqa: F401

GIB = 1 << 30
FAKE_NVML = os.path.join(os.path.dirname(sys.prefix), "test",
                         "libnvidia-ml.so.1")
needs_fake_nvml = pytest.mark.skipif(
    not os.path.exists(FAKE_NVML),
    reason="no fake NVML at %s (built by meson as test/libnvidia-ml.so.1; "
    "run through python/tests/run.sh, which installs into BUILD/pyvenv)"
    % FAKE_NVML)


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """write(text): the fake machine, replaced whole (a monitor mid-read
    never sees half of it)."""
    state = tmp_path / "nvml"
    monkeypatch.setenv("GPUPOOL_NVML", FAKE_NVML)
    monkeypatch.setenv("GP_FAKE_NVML", str(state))

    def write(text):
        tmp = tmp_path / "nvml.tmp"
        tmp.write_text(text)
        os.replace(tmp, state)
    return write


# Worker functions: module level, so they travel by reference.

def visible(_):
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def where(_):
    return os.getpid(), os.environ.get("CUDA_VISIBLE_DEVICES")


def span(ms):
    """When it ran and on which GPU."""
    t0 = time.time()
    time.sleep(ms / 1000)
    return t0, time.time(), os.environ.get("CUDA_VISIBLE_DEVICES")


# -- busy GPUs --------------------------------------------------------------

@needs_fake_nvml
def test_busy_gpu_is_left_out(machine):
    machine("gpu - - 8G 0 0\ngpu - - 8G 3G 50\nproc 1 1 3G\n")
    with gpupool.Pool(gpus="free", fake_gpus=2) as p:
        assert p.monitor is None
        assert p.size() == 1
        assert [w.visible for w in p.info()] == ["fake0"]
        g = p.gpus()
        assert len(g) == 1 and isinstance(g[0], gpupool.GpuState)
        assert (g[0].gpu, g[0].known, g[0].busy, g[0].why) == \
            (0, True, False, "free")
        assert g[0].mem_total == 8 * GIB and g[0].mem_foreign == 0
        assert set(p.map(visible, range(20), chunksize=1)) == {"fake0"}


@needs_fake_nvml
def test_free_list_takes_the_free_ones_of_it(machine):
    machine("gpu - - 8G 0 0\ngpu - - 8G 0 0\n")
    with gpupool.Pool(gpus="free:1", fake_gpus=2) as p:
        assert [w.visible for w in p.info()] == ["fake1"]
        assert [(g.known, g.busy) for g in p.gpus()] == [(True, False)]


@needs_fake_nvml
def test_every_gpu_busy_raises_with_why(machine):
    machine("gpu - - 8G 3G 50\ngpu - - 8G 7G 0\nproc 0 1 3G\n")
    with pytest.raises(OSError) as e:
        gpupool.Pool(gpus="free", fake_gpus=2)
    msg = str(e.value)
    assert "no free GPU" in msg
    assert "GPU 0 (fake0): pid 1 is not ours (3.0 GiB)" in msg
    assert "GPU 1 (fake1): others use 7.0 of 8.0 GiB (over 10%)" in msg
    # A higher threshold makes GPU 1 usable: only pid 1 makes one busy.
    with gpupool.Pool(gpus="free", fake_gpus=2, busy_pct=90) as p:
        assert [w.visible for w in p.info()] == ["fake1"]


@needs_fake_nvml
def test_busy_util_leaves_out_a_gpu_others_compute_on(machine):
    # GPU 0 computes at 80 % with no process listed: another container.
    machine("gpu - - 8G 0 80\ngpu - - 8G 0 5\n")
    with gpupool.Pool(gpus="free", fake_gpus=2) as p:
        assert p.size() == 2
    with gpupool.Pool(gpus="free", fake_gpus=2, busy_util=50) as p:
        assert [w.visible for w in p.info()] == ["fake1"]
    with gpupool.Pool(gpus="free", fake_gpus=2, busy_util=50,
                      wait_free=True) as p:
        g0, g1 = p.gpus()
        assert g0.busy and g0.why == "others use 80% of it (over 50%)"
        assert not g1.busy


@needs_fake_nvml
def test_wait_free_keeps_busy_gpus_and_uses_only_free_ones(machine):
    machine("gpu - - 8G 0 0\ngpu - - 8G 3G 50\nproc 1 1 3G\n")
    with gpupool.Pool(gpus="free", fake_gpus=2, wait_free=True) as p:
        assert p.size() == 2
        g0, g1 = p.gpus()
        assert not g0.busy and g0.why == "free"
        assert g1.busy and g1.why == "pid 1 is not ours (3.0 GiB)"
        assert (g1.mem_foreign, g1.nforeign, g1.util) == (3 * GIB, 1, 50)
        # Items never start on the busy GPU: all run on GPU 0.
        assert set(p.map(visible, range(20), chunksize=1)) == {"fake0"}


@needs_fake_nvml
def test_wait_free_starts_when_a_gpu_frees(machine):
    machine("gpu - - 8G 1G 50\nproc 0 1 1G\n")
    with gpupool.Pool(gpus="free", fake_gpus=1, wait_free=True) as p:
        fut = p.submit(span, 1)
        # Created busy, so the item can only start once a later sample
        # sees the GPU free: never before this moment.
        freed = time.time()
        machine("gpu - - 8G 0 0\n")
        t0, _, _ = fut.result()
        assert t0 >= freed
        assert not p.gpus()[0].busy


# -- memory and several GPUs ------------------------------------------------

@needs_fake_nvml
def test_gpu_mem_packs_without_exceeding_the_gpu(machine):
    """8 GiB GPUs, 4 workers each, items of 3 GiB: never more than two at
    once on a GPU."""
    machine("gpu - - 8G 0 0\ngpu - - 8G 0 0\n")
    with gpupool.Pool(fake_gpus=2, per_gpu=4, gpu_mem="3G") as p:
        assert p.size() == 8
        spans = p.map(span, [40] * 16, chunksize=1)
    for i, (t0, _, vis) in enumerate(spans):
        beside = sum(1 for j, (u0, u1, v) in enumerate(spans)
                     if j != i and v == vis and u0 <= t0 < u1)
        assert beside <= 1, "item %d started beside %d others on %s" % (
            i, beside, vis)


@needs_fake_nvml
def test_gpu_mem_over_every_gpu_is_refused_at_once(machine):
    machine("gpu - - 8G 0 0\ngpu - - 16G 0 0\n")
    with pytest.raises(ValueError, match=r"gpu_mem=17.0 GiB: more than "
                       r"any GPU of the pool has \(16.0 GiB\)"):
        gpupool.Pool(fake_gpus=2, gpu_mem="17G")
    with gpupool.Pool(fake_gpus=2, gpu_mem="9G") as p:
        assert set(p.map(visible, range(4), chunksize=1)) == {"fake1"}


def test_gpus_per_worker_gives_each_worker_its_gpus():
    with gpupool.Pool(fake_gpus=4, gpus_per_worker=2) as p:
        info = p.info()
        assert len(info) == 2
        own = {w.pid: w.visible for w in info}
        ids = [v.split(",") for v in own.values()]
        assert all(len(v) == 2 for v in ids)
        assert sorted(sum(ids, [])) == ["fake%d" % i for i in range(4)]
        for pid, env in p.map(where, range(20), chunksize=1):
            assert env == own[pid]
    with pytest.raises(ValueError, match="3 GPUs per worker, but the pool "
                       "has 2 GPUs"):
        gpupool.Pool(fake_gpus=2, gpus_per_worker=3)


# -- no NVML, and NVML only in the monitor ----------------------------------

def test_no_nvml_says_why_and_works(monkeypatch):
    monkeypatch.setenv("GPUPOOL_NVML", "/nonexistent/libnvidia-ml.so.1")
    with gpupool.Pool(gpus="free", fake_gpus=2, gpu_mem="1G") as p:
        why = p.monitor
        assert why.startswith("no NVML: ")
        assert "/nonexistent/libnvidia-ml.so.1" in why
        assert p.size() == 2
        assert [(g.known, g.busy) for g in p.gpus()] == [(False, False)] * 2
        assert set(p.map(visible, range(20), chunksize=1)) <= \
            {"fake0", "fake1"}


@needs_fake_nvml
def test_only_the_monitor_loads_nvml(machine, tmp_path, monkeypatch):
    log = tmp_path / "loaded"
    monkeypatch.setenv("GP_FAKE_NVML_LOG", str(log))
    machine("gpu - - 8G 0 0\ngpu - - 8G 0 0\n")
    with gpupool.Pool(gpus="free", fake_gpus=2, gpu_mem="1G") as p:
        workers = {pid for pid, _ in p.map(where, range(20), chunksize=1)}
        assert p.monitor is None
    loaded = {int(x) for x in log.read_text().split()}
    assert len(loaded) == 1, loaded
    assert os.getpid() not in loaded and not loaded & workers


# -- bad values -------------------------------------------------------------

@pytest.mark.parametrize("kw, name", [
    (dict(gpu_mem="20"), "gpu_mem"),
    (dict(gpu_mem="20X"), "gpu_mem"),
    (dict(gpu_mem="1e3G"), "gpu_mem"),
    (dict(gpu_mem=-1), "gpu_mem"),
    (dict(gpu_mem=2.5), "gpu_mem"),
    (dict(gpus="free", busy_pct=0), "busy_pct"),
    (dict(gpus="free", busy_pct=101), "busy_pct"),
    (dict(busy_pct=50), "busy_pct"),
    (dict(busy_util=50), "busy_util"),
    (dict(gpus="free", busy_util=101), "busy_util"),
    (dict(wait_free=True), "wait_free"),
    (dict(gpus="free:"), "free:"),
    (dict(gpus_per_worker=0), "gpus_per_worker"),
])
def test_bad_values_name_the_argument(kw, name, monkeypatch):
    monkeypatch.setenv("GPUPOOL_NVML", "/nonexistent/libnvidia-ml.so.1")
    with pytest.raises(ValueError, match=name):
        gpupool.Pool(fake_gpus=2, **kw)


@pytest.mark.parametrize("bad", [-1, 2.5, True, b"20G"])
def test_gpu_mem_neither_bytes_nor_a_size_says_what_it_takes(bad):
    """gpu_mem= anything but an int of bytes 0 or more or a size text:
    one message, naming the keyword, the value and both forms."""
    with pytest.raises(ValueError) as e:
        gpupool.Pool(fake_gpus=1, gpu_mem=bad)
    assert str(e.value) == ("gpu_mem=%r: must be a number of bytes (an "
                            "integer 0 or more) or a size such as '20G'"
                            % (bad,))


@pytest.mark.parametrize("text, b", [
    ("20G", 20 * GIB), ("1.5GiB", 3 * GIB // 2), ("512M", 512 << 20),
    ("2t", 2 << 40), ("1KB", 1024), ("0", 0), (0, 0), (4096, 4096),
    (None, None),
])
def test_gpu_mem_sizes(text, b):
    assert _pool._gpu_mem(text) == b
