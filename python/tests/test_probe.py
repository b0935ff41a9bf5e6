"""Invariant 1 from Python, on a machine whose GPUs the probe finds (the
fake machine of test/fake_libcuda.c, named by GPUPOOL_PROBE, on an XML
topology holding those GPUs): each worker's os.environ has its GPU's
UUID in CUDA_VISIBLE_DEVICES, also under an inherited
CUDA_VISIBLE_DEVICES, where a bare index would name another GPU."""

import os

import pytest

import gpupool

SRC = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
XML = os.path.join(SRC, "test", "fixtures", "32em64t-2n8c2t-pci-wholeio.xml")
UUIDS = ["GPU-0a0b0c0d-1111-2222-3333-444455556666",
         "GPU-8932f937-aaaa-bbbb-cccc-ddddeeeeffff",
         "GPU-8932f9ff-0000-1111-2222-333344445555"]
BUSIDS = ["0000:03:00.0", "0000:83:00.0", "0000:84:00.0"]


@pytest.fixture
def machine(tmp_path, monkeypatch):
    lib = os.environ.get("GP_FAKE_CUDA_LIB")
    if not lib:
        pytest.fail("GP_FAKE_CUDA_LIB is unset: run through meson test, "
                    "in a build with the tests (test/fake_libcuda.c)")
    path = tmp_path / "machine"
    path.write_text("".join("%s %s 16384 Fake GPU %d\n" % (u, b, i)
                            for i, (u, b) in enumerate(zip(UUIDS, BUSIDS))))
    monkeypatch.setenv("GPUPOOL_PROBE", lib)
    monkeypatch.setenv("GP_FAKE_CUDA", str(path))
    monkeypatch.setenv("GPUPOOL_TOPOLOGY", XML)
    monkeypatch.delenv("GPUPOOL_FAKE_GPUS", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def visible(_):
    import time
    time.sleep(0.02)    # so that every worker gets items
    return os.getpid(), os.environ.get("CUDA_VISIBLE_DEVICES")


def check(want):
    with gpupool.Pool() as p:
        info = p.info()
        assert [w.uuid for w in info] == [UUIDS[k] for k in want]
        assert [w.busid for w in info] == [BUSIDS[k] for k in want]
        mine = {w.pid: w.uuid for w in info}
        seen = p.map(visible, range(6 * len(want)), chunksize=1)
    for pid, cvd in seen:
        assert cvd == mine[pid], "worker %d saw CUDA_VISIBLE_DEVICES=%s" % (
            pid, cvd)
    assert {pid for pid, _ in seen} == set(mine)


def test_workers_see_their_gpus_uuid(machine):
    check([0, 1, 2])


def test_inherited_visible_devices_become_uuids(machine, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    check([2, 0])
