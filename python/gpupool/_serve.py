"""A rank other than 0 under `python -m gpupool SCRIPT`: it serves rank 0
(_ranks.py is that side; the messages are _link.py's).

The script was imported as __mp_main__ (its `if __name__ == "__main__":`
part does not run here), so functions sent by name are found. For each
Pool rank 0 makes, POOL brings its keyword arguments: the same Pool is
made here (ranks=False: this node's GPUs only), and HELLO answers with
its workers, or with why it could not start. TASKS bring C items, which
run on that pool through one C call at a time (its run(), as rank 0's
Cluster drives its own), each result sent back as RESULTS as it ends;
retries= and timeout= act here as on one machine. On rank 0's host,
POOL also says where rank 0's out ring is: mapped here (HELLO's "ref"),
the pools made from then on read the items TASKREF points to there, in
place. CTL cancels or kills
what a pool runs (rank 0's call ended early), closes a pool, or ends the
job: every pool is stopped, BYE goes to rank 0, and MPI ends. A rank 0
silent for rank_timeout is written off: everything stops, and MPI ends
without MPI_Finalize (rank 0 would never answer it).
"""

import collections
import os
import pickle
import socket
import sys
import traceback

from . import _gpupool
from . import _link
from ._link import (C_CANCEL, C_CLOSE, C_END, C_END_LOST, C_KILL, CTLREC,
                    RESULT)

_TICK_MS = 250
_DEFAULT_TIMEOUT = 10.0


class _Part:
    """This rank's part of one of rank 0's pools."""

    def __init__(self, pid, pool):
        self.id = pid
        self.pool = pool
        self.q = collections.deque()  # (item id, payload), not started
        self.inflight = 0
        self.stop = 0


class Server:
    def __init__(self, link, broken=None):
        self.link = link
        self.broken = broken  # why the script could not be imported here
        self.host = socket.gethostname()
        self.parts = {}
        self.leave = False
        self.finalize = True  # MPI_Finalize at the end: no rank was lost
        self.lost0 = None   # why rank 0 was written off
        self.timeout = _DEFAULT_TIMEOUT
        link.talk(0, True)
        # This rank's pools read items in the in ring where MPI put them.
        link.share_ring(out=False)

    def serve(self):
        """Until rank 0 ends the job (0) or is lost or MPI fails (1)."""
        from . import _exit
        try:
            while not self.leave and self.lost0 is None:
                self.link.busy(False)
                self.link.wait(_TICK_MS / 1000)
                self.handle()
                for p in list(self.parts.values()):
                    if p.q and not self.leave and self.lost0 is None:
                        self.link.busy(True)
                        self._drive(p)
        finally:
            for p in list(self.parts.values()):
                self._close(p, kill=not self.leave)
            _exit.python_exit()
            if self.lost0 is None:
                self.link.send(0, _link.BYE)
                if os.environ.get("GPUPOOL_TEST_RING_USED"):
                    # The tests' look at the rings at the end (every
                    # extent given back, by the BYE's flush).
                    print("gpupool: rank %d: ring used %d" % (
                        self.link.rank, self.link.ring_used()),
                        file=sys.stderr, flush=True)
        if self.lost0 is not None:
            print("gpupool: rank %d (%s): stopping: %s" % (
                self.link.rank, self.host, self.lost0), file=sys.stderr,
                flush=True)
            return 1
        return 0

    def handle(self):
        """Act on what came from rank 0; write it off if silent."""
        try:
            msgs = self.link.recv()
        except _link.LinkError as e:
            self.lost0 = str(e)
            return
        for t, peer, d in msgs:
            if peer != 0:
                continue
            if t == _link.POOL:
                self._open(pickle.loads(d))
            elif t == _link.TASKS:
                for pid, i, payload in _link.task_records(d):
                    p = self.parts.get(pid)
                    if p is not None:
                        p.q.append((i, payload))
            elif t == _link.TASKREF:
                for pid, i, off, k in _link.ref_records(d):
                    # Made even for a pool gone: its end gives it back.
                    e = memoryview(self.link.ref_extent(off, k))
                    p = self.parts.get(pid)
                    if p is not None:
                        p.q.append((i, e))
            elif t == _link.CTL:
                pid, how = CTLREC.unpack(d)
                self._ctl(pid, how)
        if self.link.silent(0) >= self.timeout:
            self.lost0 = ("no word from rank 0 for %.1f s (rank_timeout)"
                          % self.link.silent(0))

    def _ctl(self, pid, how):
        if pid == 0 and how in (C_END, C_END_LOST):
            self.leave = True
            self.finalize = how == C_END
            return
        p = self.parts.get(pid)
        if p is None:
            return
        if how in (C_CANCEL, C_KILL):
            # Rank 0 forgot what it sent: what waits here never runs,
            # what runs stops.
            p.q.clear()
            p.stop = max(p.stop, _gpupool.CTL_KILL if how == C_KILL else
                         _gpupool.CTL_CANCEL)
        elif how == C_CLOSE:
            self._close(p, kill=False)

    def _open(self, m):
        from ._pool import Pool
        kw = dict(pickle.loads(m["kw"]) if isinstance(m["kw"], bytes)
                  else m["kw"])
        self.timeout = min(self.timeout, kw.get("rank_timeout") or
                           _DEFAULT_TIMEOUT) if self.parts else \
            kw.get("rank_timeout") or _DEFAULT_TIMEOUT
        kw["ranks"] = False
        try:
            if self.broken is not None:
                raise ImportError("the script could not be imported on "
                                  "this rank: %s" % self.broken)
            # Before the pool: its workers read rank 0's ring.
            ref = self.link.map_ring0(m.get("ring0"))
            init = kw.pop("_init", None)
            if init is not None:
                from . import _task
                kw["initializer"] = _task._load_fn(init[0])
                kw["initargs"] = pickle.loads(init[1])
            pool = Pool(**kw)
            info = []
            for d in pool._c.info():
                d = dict(d)
                d.update(rank=self.link.rank, host=self.host)
                info.append(d)
        except Exception as e:
            msg = "".join(traceback.format_exception_only(type(e), e))
            self.link.send(0, _link.HELLO, pickle.dumps(
                {"id": m["id"], "host": self.host, "error": msg.strip()}))
            return
        self.parts[m["id"]] = _Part(m["id"], pool)
        self.link.send(0, _link.HELLO, pickle.dumps(
            {"id": m["id"], "host": self.host, "info": info,
             "ring": self.link.rsize, "ref": ref}))

    def _close(self, p, kill):
        self.parts.pop(p.id, None)
        try:
            if kill:
                p.pool.terminate()
            else:
                p.pool.close()
                p.pool.join()
        except Exception:
            pass

    def _drive(self, p):
        """One C call on p's pool: until its queue is empty and nothing
        runs while another pool waits, or a CTL stops it."""
        p.stop = 0

        def nxt():
            if p.q and not p.stop:
                p.inflight += 1
                return p.q.popleft()
            if self.leave or self.lost0 is not None or p.stop or \
                    p.id not in self.parts:
                return None
            if p.inflight == 0 and (not p.q) and any(
                    o.q for o in self.parts.values() if o is not p):
                return None
            if p.inflight == 0 and not p.q:
                return None
            return ...

        def done(i, status, code, out):
            p.inflight -= 1
            out = memoryview(b"" if out is None else out).cast("B")
            self.link.send(0, _link.RESULTS, out, RESULT.pack(
                p.id, i, status, code, out.nbytes))

        def ctl():
            self.handle()
            if self.lost0 is not None:
                return _gpupool.CTL_KILL
            return p.stop or None

        p.pool._c.run(nxt, done, ctl=ctl, ctl_fd=self.link.fd,
                      tick_ms=_TICK_MS)


# The job's name, the same in each of its ranks: PMIx (Open MPI, Slurm's
# --mpi=pmix), Open MPI's own, MPICH's Hydra.
_JOB_VARS = ("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "PMI_KVSNAME")


def rank_env(link):
    """GPUPOOL_RANK and GPUPOOL_RANKS, for this process and its workers;
    GPUPOOL_CLAIM_GROUP, the job's, from what its launcher gives every
    rank: the ranks of one job on a host are one claimant for GPU claims
    (each rank's pool holds its GPUs for its life: ranks sharing a host's
    GPUs would otherwise wait for each other for ever)."""
    os.environ["GPUPOOL_RANK"] = str(link.rank)
    os.environ["GPUPOOL_RANKS"] = str(link.size)
    job = next((os.environ[v] for v in _JOB_VARS if os.environ.get(v)), "")
    if not job and os.environ.get("SLURM_JOB_ID"):
        job = "%s.%s" % (os.environ["SLURM_JOB_ID"],
                         os.environ.get("SLURM_STEP_ID", ""))
    if job and not os.environ.get("GPUPOOL_CLAIM_GROUP"):
        os.environ["GPUPOOL_CLAIM_GROUP"] = "ranks:" + job
