"""What the C pool says of its workers and GPUs, as read-only records:
WorkerInfo (Pool.info(), current()) and GpuState (Pool.gpus())."""

from . import _gpupool


class _Record:
    """A read-only record: attribute access over a dict from the C
    pool."""

    __slots__ = ("_d",)

    def __init__(self, d):
        object.__setattr__(self, "_d", dict(d))

    def __getattr__(self, name):
        try:
            return self._d[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        raise AttributeError("%s is read-only" % type(self).__name__)

    def __getitem__(self, name):
        return self._d[name]

    def as_dict(self):
        return dict(self._d)

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join(
            "%s=%r" % kv for kv in self._d.items()))


class WorkerInfo(_Record):
    """Where a worker runs: attribute access over the C library's
    gp_worker_info (worker, gpu, slot, pid, fake, visible, uuid, busid,
    name, mem_bytes, numa, nodeset, cpuset, ...)."""

    __slots__ = ()


class GpuState(_Record):
    """A GPU of the pool as it was last seen (Pool.gpus()), over the C
    library's gp_gpu_state: gpu (index in the pool's GPU list), uuid,
    busid, known (NVML reports it), busy (someone else uses it, or who
    does cannot be told), why ("free", "pid 4242 is not ours (3.0 GiB)",
    "others use 7.0 of 8.0 GiB (over 10%)", "no NVML: ..."), util (%, -1
    unknown), mem_total, mem_foreign (bytes used by processes not of this
    pool), mem_ours (what this pool's running items declared or use,
    whichever is more), running (this pool's items on it), nforeign
    (compute processes not ours), held (by an item holding several
    GPUs)."""

    __slots__ = ()


def current():
    """In a worker: its WorkerInfo (gpu, uuid, busid, numa, cpuset, ...).
    In the caller, outside any worker: None."""
    d = _gpupool.current()
    return None if d is None else WorkerInfo(d)
