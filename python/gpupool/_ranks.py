"""One Pool over every rank of an MPI job: rank 0's side (the other ranks'
is _serve.py; the link to MPI, the messages and their payloads are
_link.py's; `python -m gpupool` sets it up, __main__.py).

Under `python -m gpupool SCRIPT` with several ranks, rank 0 runs the
script and `world` is its World. A Pool made there (ranks=True, the
default) becomes a Cluster: its own C pool, as on one machine, plus a
part on every other rank, made there with the same keyword arguments
(POOL; the rank answers HELLO with its workers, or why it could not).
The Cluster stands where the C pool stood (Pool._c): Pool's jobs and
submit queue drive it through run(next, done) as they drive a C pool,
so every promise of the one-machine pool is kept by the same code.

run() drives the local C pool with next() and done() of its own, and a
ctl() the C pool calls whenever the MPI process has something (and on a
tick): ctl() takes in the ranks' results (done() for each, in this
thread) and hands items to the ranks with room in their window (a few
per worker, more when items are short, as gpupool-run's coord.c). An
item a rank holds when it is lost (dead, left, or silent for
rank_timeout) runs again elsewhere while retries= allows, else it fails
with RankLost naming the rank and host. Items travel as the C pool's
own items: the same bytes a local worker gets; to a rank on this host
that maps rank 0's out ring (HELLO's "ref"), an item pickled there goes
as where it lies (_link.Link.send_ref()).
"""

import collections
import pickle
import select
import socket
import sys
import threading
import time

from . import _errors
from . import _gpupool
from . import _link
from ._link import (C_CANCEL, C_CLOSE, C_END, C_END_LOST, C_KILL, CTLREC,
                    TASK)

world = None  # rank 0's World under `python -m gpupool` with ranks

_TICK_MS = 250
_QUEUE_S = 0.02  # work queued per worker on a rank, as coord.c
_QUEUE_MAX = 64


def _ring_bytes(n):
    """What an item of n bytes takes of a rank's in ring (its TASKS
    record, 64-byte aligned), or 0: it is small, it takes the socket."""
    n += TASK.size
    return 0 if n < _link.RING_MIN else (n + 63) & ~63


class _Item:
    """An item of a Cluster's call: the C pool's key and payload, and where
    it went (rank), how often it ran again (tries), when it was sent."""
    __slots__ = ("key", "data", "rank", "tries", "sent", "k")

    def __init__(self, key, data):
        self.key, self.data = key, data
        self.rank, self.tries, self.sent = 0, 0, 0.0
        self.k = 0  # the bytes of its rank's in ring it takes


def spread(c, kw, start_method, max_tasks):
    """A Pool made with ranks=True under `python -m gpupool` spans every
    rank: kw (its __init__'s arguments) goes to the others, with the
    start method it chose and its max_tasks, functions travel as to
    workers that started clean (by name, or by value), and the Cluster
    returned, over its C pool c and the other ranks, takes c's place."""
    from . import _task
    init_fn, init_args = kw.get("initializer"), kw.get("initargs")
    for k in ("self", "context", "ranks", "initializer", "initargs",
              "maxtasksperchild"):
        kw.pop(k, None)
    kw["start_method"] = start_method
    kw["max_tasks_per_worker"] = max_tasks
    if init_fn is not None:
        kw["_init"] = (_task.dumps_fn(init_fn), _task.dumps_value(init_args))
    return Cluster(world, c, _task.dumps_value(kw), kw["rank_timeout"],
                   kw["retries"])


class World:
    """Rank 0's view of the job: the link, the other ranks, the pools.
    Messages are read by whichever pool's thread asks (pump()) and kept
    for the pool they belong to."""

    def __init__(self, link):
        from . import _pickles
        self.link = link
        if link.out is not None:
            # Big chunks are pickled into the out ring, and rank 0's own
            # workers read them there.
            _pickles.arena = link.arena
            link.share_ring(out=True)
        self.lock = threading.RLock()
        self.ring_id = link.ring_id()  # for the ranks on this host
        self.host = socket.gethostname()
        self.hosts = {0: self.host}
        self.lost = {}        # rank -> why
        self.gone = set()     # ranks that said bye
        self.pools = {}       # id -> Cluster
        self.next_id = 1
        self.timeout = None   # the shortest rank_timeout of the pools
        for r in self.others():
            link.talk(r, True)

    def others(self):
        return [r for r in range(1, self.link.size)
                if r not in self.lost and r not in self.gone]

    def name(self, r):
        return "rank %d (%s)" % (r, self.hosts.get(r, "?"))

    def send(self, r, t, data=b"", head=b""):
        with self.lock:
            self.link.send(r, t, data, head)

    def send_ref(self, r, data, pool, item):
        with self.lock:
            self.link.send_ref(r, data, pool, item)

    def pump(self):
        """Read what came; route it to its pool; write off the silent."""
        with self.lock:
            try:
                msgs = self.link.recv()
            except _link.LinkError as e:
                for r in self.others():
                    self.lose(r, str(e))
                return
            for t, peer, d in msgs:
                self._route(t, peer, d)
            if self.timeout is not None:
                for r in self.others():
                    s = self.link.silent(r)
                    if s >= self.timeout:
                        self.lose(r, "no word from it for %.1f s "
                                  "(rank_timeout)" % s)

    def _route(self, t, peer, d):
        if isinstance(d, _gpupool.Extent):
            # Into memory of its own, and the in ring's extent free at
            # once: a result the caller keeps (or a view of it that
            # unpickling keeps) must not pin the ring.
            d = bytes(d)
        if peer in self.lost or peer in self.gone:
            return
        if t == _link.HELLO:
            m = pickle.loads(d)
            self.hosts[peer] = m["host"]
            p = self.pools.get(m["id"])
            if p is not None:
                p.inbox.append(("hello", peer, m))
        elif t == _link.RESULTS:
            for rec in _link.result_records(d):
                p = self.pools.get(rec[0])
                if p is not None:
                    p.inbox.append(("result", peer, rec))
        elif t == _link.BYE:
            self.gone.add(peer)
            self.link.talk(peer, False)
            self._tell(peer, "it left the job")

    def lose(self, r, why):
        if r in self.lost or r in self.gone:
            return
        self.lost[r] = why
        self.link.talk(r, False)
        print("gpupool: %s is lost: %s" % (self.name(r), why),
              file=sys.stderr, flush=True)
        self._tell(r, why)

    def _tell(self, r, why):
        for p in self.pools.values():
            p.inbox.append(("lost", r, why))

    def finish(self, rc):
        """The script is over: every rank leaves (C_END, then its BYE), and
        MPI ends: MPI_Finalize when all left, else MPI_Abort(rc)."""
        from . import _pickles
        _pickles.arena = None
        how = C_END_LOST if self.lost else C_END
        for r in self.others():
            self.send(r, _link.CTL, CTLREC.pack(0, how))
        deadline = time.monotonic() + (self.timeout or 10.0)
        while self.others() and time.monotonic() < deadline:
            self.link.wait(0.2)
            self.pump()
        clean = not self.others() and not self.lost
        self.link.end(clean, rc)


class Cluster:
    """A Pool's C pool and its parts on the other ranks, with the C pool's
    methods (Pool._c)."""

    def __init__(self, w, local, kw, rank_timeout, retries):
        self.w = w
        self.local = local
        self.retries = retries
        self.inbox = collections.deque()
        self.parts = {}      # rank -> its workers' info (from HELLO)
        self.rings = {}      # rank -> its in ring's bytes (from HELLO)
        self.refs = {}       # rank -> it reads rank 0's out ring (HELLO)
        self.out = {}        # item id -> _Item at another rank
        self.held = collections.defaultdict(set)  # rank -> item ids
        self.bytes = collections.Counter()  # rank -> bytes of those
        self.requeue = collections.deque()
        self.mean = None     # seconds an item takes, from send to result
        self.next_item = 1
        self.stop = 0        # CTL_CANCEL or CTL_KILL from cancel()
        self.ep = None       # run()'s ctl: the link's fd, ctl_fd per run
        with w.lock:
            self.id = w.next_id
            w.next_id += 1
            w.pools[self.id] = self
            if w.timeout is None or rank_timeout < w.timeout:
                w.timeout = rank_timeout
        try:
            self._open(kw)
        except BaseException:
            self.close()
            raise

    def _open(self, kw):
        msg = pickle.dumps({"id": self.id, "kw": kw,
                            "ring0": self.w.ring_id}, protocol=5)
        waiting = set(self.w.others())
        for r in waiting:
            self.w.send(r, _link.POOL, msg)
        failed = []
        while waiting:
            self.w.link.wait(0.2)
            self.w.pump()
            while self.inbox:
                kind, r, m = self.inbox.popleft()
                waiting.discard(r)
                if kind == "hello" and "error" in m:
                    failed.append("%s: %s" % (self.w.name(r), m["error"]))
                elif kind == "hello":
                    self.parts[r] = m["info"]
                    self.rings[r] = m.get("ring", 0)
                    self.refs[r] = bool(m.get("ref"))
                elif kind == "lost":
                    failed.append("%s is lost: %s" % (self.w.name(r), m))
        if failed:
            raise _errors.InitError(
                "gpupool.Pool(): the pool could not start on every rank, "
                "so none was created: " + "; ".join(failed))

    # -- the C pool's methods --------------------------------------------

    def size(self):
        return self.local.size() + sum(len(i) for i in self.parts.values())

    def info(self):
        out = []
        for d in self.local.info():
            d = dict(d)
            d.update(rank=0, host=self.w.host)
            out.append(d)
        for r in sorted(self.parts):
            out.extend(self.parts[r])
        return out

    def gpus(self):
        return self.local.gpus()

    @property
    def monitor(self):
        return self.local.monitor

    def cancel(self):
        self.stop = max(self.stop, _gpupool.CTL_CANCEL)
        self.local.cancel()

    def kill(self):
        """terminate(): the parts' items are killed, not waited for."""
        self.stop = _gpupool.CTL_KILL
        self.local.cancel()

    def close(self):
        with self.w.lock:
            if self.w.pools.pop(self.id, None) is not None:
                for r in self.parts:
                    if r in self.w.others():
                        self.w.send(r, _link.CTL, CTLREC.pack(self.id,
                                                               C_CLOSE))
        self.local.close()
        if self.ep is not None:
            self.ep.close()
            self.ep = None

    # -- run ---------------------------------------------------------------

    def run(self, next_item, done, ctl=None, ctl_fd=-1, ctl_keep=False):
        """The C pool's run() over the ranks: next_item() may also answer
        ... (nothing now: the call goes on), and ctl() runs when ctl_fd
        is readable (Pool._drive's wake for a parked call), as there.
        ctl_keep is taken and changes nothing: ctl_fd is in the Cluster's
        set for this run only."""
        self.stop = 0
        parked = False  # next_item() said ... when last asked

        def take():
            nonlocal parked
            if self.requeue:
                return self.requeue.popleft()
            r = next_item()
            parked = r is ...
            return None if r is None or parked else _Item(r[0], r[1])

        def nxt():
            self._events(done)
            it = take()
            self._fill(take)
            if it is not None:
                return it.key, it.data
            return ... if self.out or parked else None

        def link_ctl():
            if ctl is not None:
                ctl()
            self.w.pump()
            self._events(done)
            self._fill(take)
            return self.stop or None

        # One fd for the C call's ctl: the link's and ctl_fd's, as one
        # epoll set, the Cluster's (the link's fd in it for its life,
        # ctl_fd for this run only: its caller's).
        if self.ep is None:
            self.ep = select.epoll()
            self.ep.register(self.w.link.fd, select.EPOLLIN)
        ep = self.ep
        try:
            if ctl_fd >= 0:
                ep.register(ctl_fd, select.EPOLLIN)
            try:
                self.local.run(nxt, done, ctl=link_ctl, ctl_fd=ep.fileno(),
                               tick_ms=_TICK_MS)
            finally:
                if ctl_fd >= 0:
                    ep.unregister(ctl_fd)
        finally:
            if self.out:
                # The call ended early (a failure, Ctrl-C, terminate()):
                # what the ranks hold stops there; its results, if any
                # come, belong to no one.
                how = C_KILL if self.stop == _gpupool.CTL_KILL else C_CANCEL
                for r in {v.rank for v in self.out.values()}:
                    if r in self.w.others():
                        self.w.send(r, _link.CTL, CTLREC.pack(self.id, how))
                self.out.clear()
                self.held.clear()
                self.bytes.clear()
            self.requeue.clear()
            self.w.link.busy(False)

    def _window(self, r):
        nw = len(self.parts[r])
        if self.mean is None:
            return 2 * nw
        q = _QUEUE_MAX if self.mean <= 0 else min(_QUEUE_MAX,
                                                   _QUEUE_S / self.mean)
        return nw * (1 + int(q))

    def _room(self, r, k):
        """Whether rank r takes another item, of k ring bytes: while under
        its window, and a big one (through the rings) while its in ring
        has room too; always one when it holds nothing."""
        if not self.held[r]:
            return True
        ring = self.rings.get(r, 0)
        return len(self.held[r]) < self._window(r) and (
            not k or not ring or self.bytes[r] + k <= ring)

    def _fill(self, take):
        """Hand items to the ranks with room, the emptiest first."""
        while not self.stop:
            live = [r for r in self.parts if r in self.w.others() and
                    (not self.held[r] or
                     len(self.held[r]) < self._window(r))]
            if not live:
                return
            it = take()
            if it is None:
                return
            k = _ring_bytes(len(it.data))
            ref = k and self.w.link.is_arena(it.data)

            def ks(r):  # by reference it takes none of r's in ring
                return 0 if ref and self.refs.get(r) else k
            live = [r for r in live if self._room(r, ks(r))]
            if not live:
                self.requeue.appendleft(it)
                return
            r = max(live, key=lambda r: self._window(r) - len(self.held[r]))
            i = self.next_item
            self.next_item += 1
            it.rank, it.sent, it.k = r, time.monotonic(), ks(r)
            self.out[i] = it
            self.held[r].add(i)
            self.bytes[r] += it.k
            self.w.link.busy(True)
            if ref and not it.k:
                self.w.send_ref(r, it.data, self.id, i)
            else:
                self.w.send(r, _link.TASKS, it.data,
                            TASK.pack(self.id, i, len(it.data)))

    def _events(self, done):
        while self.inbox:
            kind, r, m = self.inbox.popleft()
            if kind == "result":
                _, i, status, code, out = m
                it = self.out.pop(i, None)
                if it is None:
                    continue
                self.held[r].discard(i)
                self.bytes[r] -= it.k
                if not self.out:
                    self.w.link.busy(False)
                t = time.monotonic() - it.sent
                self.mean = t if self.mean is None else \
                    0.9 * self.mean + 0.1 * t
                key, it = it.key, None  # its bytes go now, whatever
                # done() raises: a traceback would keep this frame, and
                # an item pickled into the out ring with it, till a GC.
                done(key, status, code, out if status == _gpupool.OK or
                     len(out) else None)
            elif kind == "lost":
                self._reclaim(r, m, done)

    def _reclaim(self, r, why, done):
        """Rank r is lost: what it held runs again, or fails."""
        ids = self.held.pop(r, set())
        self.bytes.pop(r, None)
        self.parts.pop(r, None)
        for i in sorted(ids):
            it = self.out.pop(i)
            if it.tries < self.retries and not self.stop:
                it.tries += 1
                self.requeue.append(it)
            else:
                done(it.key, _errors.RANK_LOST, r, (
                    "%s was lost while it ran the item: %s" % (
                        self.w.name(r), why)).encode())
