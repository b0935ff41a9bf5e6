"""Host-wide GPU claims from Python: claim() for a script that is not a
pool, claims() to see who holds and who waits (the C library's
gp_claim(), gp_unclaim(), gp_claims_list(); docs/python.md, "Claims").

A claim belongs to the process that took it and lasts until that process
exits (the kernel drops it then, SIGKILL included) or release(). A
process that a claiming process started (a fork, a multiprocessing
child, a subprocess), a gpupool.Pool's worker or a gpupool-run task has
its GPUs held for it already: there claim() returns them, waiting for
nothing (waiting would be waiting for itself).
"""

import datetime
import os
import re

from . import _gpupool
from ._options import _claim_timeout, _claims_dir, _gpu_mem, _gpus_arg

_ENV = "GPUPOOL_CLAIMED"  # the pid of the process whose claim() set it
_last = None  # this process's last Claim


def _ancestors():
    """This process's parent, grandparent, ... (as /proc says), up to
    init: their pids."""
    pid = os.getppid()
    seen = []
    while pid > 1 and len(seen) < 256:
        seen.append(pid)
        try:
            with open("/proc/%d/stat" % pid, "rb") as f:
                stat = f.read()
        except OSError:
            break
        # "pid (comm) state ppid ...": comm may hold spaces and ")".
        pid = int(stat[stat.rindex(b")") + 2:].split()[1])
    return seen


def _given():
    """Why this process's GPUs are held for it by another (its
    CUDA_VISIBLE_DEVICES are those GPUs), or None."""
    if _gpupool.current() is not None:
        return "held by the gpupool.Pool this worker belongs to"
    if "GPUPOOL_TASK" in os.environ:
        return "held by the gpupool-run that runs this task"
    owner = os.environ.get(_ENV, "")
    if owner.isdigit() and int(owner) != os.getpid() and \
            int(owner) in _ancestors():
        return "held by process %s, which claimed them and started " \
            "this one" % owner
    return None


class Claim:
    """GPUs claimed by claim(): gpus, their ids as CUDA_VISIBLE_DEVICES
    says them (UUIDs; fake GPUs "fakeK"); held until this process exits,
    or release(). given: None when this process claimed them, else who
    holds them for it (a parent that claimed them, a Pool, gpupool-run):
    then release() does nothing."""

    def __init__(self, gpus, given=None):
        self.gpus = gpus
        self.given = given
        self._pid = os.getpid()
        self._held = given is None

    @property
    def held(self):
        """Whether this process holds them (not given, not released, and
        this is the process that claimed them, not a fork of it)."""
        return self._held and self._pid == os.getpid()

    def release(self):
        """Give the GPUs back now, for the next waiter. Refused
        (RuntimeError) once CUDA was loaded in this process: what it
        allocated stays on the GPUs until the process exits, and the next
        holder would find them full. In a fork of the claiming process:
        RuntimeError (its copy holds them until it exits or execs).
        Returns whether anything was given back (False: given, or
        released before)."""
        if not self._held:
            return False
        if self._pid != os.getpid():
            raise RuntimeError(
                "gpupool: this claim belongs to process %d; this is a fork "
                "of it (process %d), whose copy holds the GPUs until it "
                "exits or execs" % (self._pid, os.getpid()))
        _gpupool.unclaim()  # RuntimeError once libcuda is mapped
        self._held = False
        if os.environ.get(_ENV) == str(self._pid):
            del os.environ[_ENV]
        return True

    def __repr__(self):
        return "<gpupool.Claim gpus=%r %s>" % (
            self.gpus, "held" if self.held else "given: " + self.given
            if self.given else "released")


def claim(n=1, *, gpus=None, gpu_mem=None, timeout=None, claims=None,
          fake_gpus=None):
    """Wait this process's turn for n GPUs, host-wide, then hold them
    until it exits (or Claim.release()): for a script that is not a pool,
    at its top, before CUDA is used:

        import gpupool
        gpupool.claim()        # waits for a GPU no other gpupool holds
        import torch           # sees that GPU alone

    Sets os.environ's CUDA_VISIBLE_DEVICES (the GPUs' UUIDs) and
    CUDA_DEVICE_ORDER, and returns a Claim. Waiters are served in the
    order they came; a GPU is exclusive unless gpu_mem (bytes, or "20G")
    is declared, which shares it with other declared claims while the sum
    fits. gpus: which GPUs may be taken (as Pool's gpus=; None: every GPU
    found); fake_gpus: N fake GPUs (None: GPUPOOL_FAKE_GPUS). timeout:
    seconds to wait (0: do not wait; None: as long as it takes), then
    TimeoutError; Ctrl-C ends the wait. claims: the claims directory
    (None: GPUPOOL_CLAIMS, else /run/lock/gpupool; "none" turns claims
    off, and then claim() raises ValueError). Waiting, it says so once on
    stderr, naming who holds the GPUs.

    In a process whose GPUs are held for it (a Pool's worker, a
    gpupool-run task, a child started by a process that claimed: fork,
    multiprocessing, subprocess), it returns those GPUs at once (Claim.
    given says who holds them). A second claim() in the claiming process
    is a RuntimeError (release() first)."""
    _claim_timeout("timeout", timeout)
    why = _given()
    if why is not None:
        visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES",
                                             "").split(",") if v]
        if not isinstance(n, int) or isinstance(n, bool) or n < 1 or \
                n > len(visible):
            raise ValueError("gpupool.claim(%r): this process has %d GPUs "
                             "(%s)" % (n, len(visible), why))
        return Claim(visible, why)
    kw = dict(gpus=_gpus_arg(gpus), gpu_mem=_gpu_mem(gpu_mem),
              fake_gpus=fake_gpus, claims=_claims_dir(claims),
              claim_timeout=timeout)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError("gpupool.claim(%r): n must be an int, 1 or more"
                         % (n,))
    global _last
    if _last is not None and _last.held:
        raise RuntimeError("gpupool.claim(): this process holds %s "
                           "already (Claim.release() first)"
                           % ",".join(_last.gpus))
    visible = _gpupool.claim(n, **{k: v for k, v in kw.items()
                                   if v is not None})
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    os.environ["CUDA_VISIBLE_DEVICES"] = visible
    os.environ[_ENV] = str(os.getpid())
    _last = Claim(visible.split(","))
    return _last


class ClaimInfo:
    """One holder or waiter of a GPU's claim (claims()): gpu (its key:
    UUID, bus id or "fakeK"), queue (0: holds it; k: k-th in line), user
    (a name, or the uid as text), uid, pid (as this process's pid
    namespace sees it; 0 if it does not), command (its command line, cut
    to 39 bytes), since (a datetime, local time: claimed, or came to
    wait), mem (bytes declared; None: the whole GPU, exclusive), total
    (the GPU's memory in bytes; None: unknown)."""

    __slots__ = ("gpu", "queue", "user", "uid", "pid", "command", "since",
                 "mem", "total")

    def __init__(self, d):
        self.gpu = d["gpu"]
        self.queue = d["queue"]
        self.uid = d["uid"]
        self.user = d["user"] or str(d["uid"])
        self.pid = d["pid"]
        # The command line's arguments, one space between them (a -c
        # script's newlines included).
        self.command = " ".join(d["cmd"].split())
        self.since = datetime.datetime.fromtimestamp(
            d["since_ms"] / 1000).astimezone()
        self.mem = d["mem"] or None
        self.total = d["total"] or None

    @property
    def holds(self):
        """Whether it holds the GPU (else it waits)."""
        return self.queue == 0

    def __repr__(self):
        return "<gpupool.ClaimInfo %s %s: %s, pid %d, %s, since %s%s>" % (
            self.gpu, "held" if self.holds else "waiter %d" % self.queue,
            self.user, self.pid, self.command,
            self.since.strftime("%H:%M:%S"), "" if self.mem is None else
            ", %.1f GiB declared" % (self.mem / (1 << 30)))


def _gpu_order(key):
    """fake2 before fake10: digit runs compare as numbers."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", key)]


def claims(claims=None):
    """Who holds each GPU's claim on this host, and who waits for it, in
    order: a list of ClaimInfo, by GPU, each GPU's holders first (queue
    0), then its waiters (queue 1, 2, ...). claims: the claims directory
    (None: as a Pool finds it, GPUPOOL_CLAIMS, else /run/lock/gpupool;
    "none": claims are off, and the list is empty). OSError when the
    table cannot be read, saying why."""
    rows = [ClaimInfo(d) for d in
            _gpupool.claims_list(_claims_dir(claims))]
    rows.sort(key=lambda c: (_gpu_order(c.gpu), c.queue))
    return rows
