"""A rank's link to its MPI process, for `python -m gpupool` under an MPI
launcher (gpupool/_ranks.py and _serve.py use it).

MPI lives in a process of its own, gpupool/_mpiproc (src/cli/ranks/mpi_proc.c,
the same as gpupool-run's), started here before anything else: MPI_Init
starts threads, and the process that forks a pool's workers must not have
MPI's. It inherits the launcher's wire-up variables, so it is the rank as
far as MPI is concerned, and it dies with this process (PR_SET_PDEATHSIG).
The two talk over a socketpair, one frame per message: a header (type,
peer, length: src/cli/ranks/ranks.h's struct frame), then its bytes; when each
peer was last heard from, and which peers to beat every second, they
share through a memfd (int64 heard[size], then uint8 talk[size]).
Consecutive TASKS or RESULTS frames for one peer travel as one MPI
message, so their payloads are records that can be joined end to end.

A message of RING_MIN bytes or more travels through the rings, a second
memfd of 2 x GPUPOOL_RANKS_RING MiB (default 64; 0: no rings) shared with
the MPI process: written into the out ring (an extent of Ring, taken
here, given back when FR_RING_SENT says MPI sent it), sent alone from
there; received into the in ring and read in place as an Extent, whose
last reference gone frees it (FR_RING_FREE, flushed by send() and
recv()). A message the rings have no room for takes the socket. On
rank 0, a chunk's big pickle is written into the out ring as it is made
(arena(), gpupool._pickles.arena) and sent from there, one copy less.

A rank on rank 0's host needs no MPI for such an item: it maps rank 0's
out ring read only (map_ring0(): /proc/PID/fd of rank 0's memfd, checked
to be that memfd), its pools read items there in place, and rank 0 sends
it only where the item lies (TASKREF, send_ref()), keeping the item till
the rank says it is done with it (REFFREE, when the Extent made for it
there is gone). GPUPOOL_RANKS_SHARE=0 turns that off.
"""

import mmap
import os
import select
import socket
import struct
import subprocess
import time

# src/cli/ranks/ranks.h: enum rmsg_type (RM_POOL is the Python side's own) and
# enum frame_type.
HELLO, TASKS, RESULTS, CTL, BEAT, BYE, POOL = 1, 2, 3, 4, 5, 6, 7
TASKREF, REFFREE = 8, 9  # the Python side's own too (see the payloads)
FR_READY, FR_ERR, FR_START, FR_END, FR_DONE = 100, 101, 102, 103, 104
FR_RING_SEND, FR_RING_SENT, FR_RING_RECV, FR_RING_FREE = 105, 106, 107, 108
_HDR = struct.Struct("=iiQ")
_RING = struct.Struct("=iiQQ")  # struct fr_ring: type, peer, off, len
_OFF = struct.Struct("=Q")
_READ = 1 << 20
RING_MIN = 64 << 10  # ranks.h RANKS_RING_MIN
_PRE = 64  # out-ring bytes kept before an item pickled there: its header
_RING_MIB = 64       # GPUPOOL_RANKS_RING's default

# The variables an MPI launcher sets (src/cli/ranks/launcher.c).
_WIRE = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE")
_PROCS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS")


class LinkError(OSError):
    """MPI could not start, or its process is gone."""


def launcher():
    """(wired, procs, var): whether an MPI launcher's wire-up variables
    are set, and how many processes its variables claim (1: none)."""
    wired = any(v in os.environ for v in _WIRE)
    most, var = 1, ""
    for v in _PROCS:
        try:
            n = int(os.environ.get(v, ""))
        except ValueError:
            continue
        if n > most:
            most, var = n, v
    return wired, most, var


def ring_bytes():
    """Each ring's bytes: GPUPOOL_RANKS_RING MiB (default 64; 0: none)."""
    v = os.environ.get("GPUPOOL_RANKS_RING", "").strip()
    try:
        mib = int(v) if v else _RING_MIB
    except ValueError:
        mib = -1
    if mib < 0:
        raise LinkError("GPUPOOL_RANKS_RING=%r: not a number of MiB (an "
                        "integer 0 or more; 0: no rings)" % v)
    return mib << 20


def share_on():
    """Whether ranks on rank 0's host read its out ring in place:
    GPUPOOL_RANKS_SHARE, 1 (the default) or 0."""
    v = os.environ.get("GPUPOOL_RANKS_SHARE", "").strip()
    if v not in ("", "0", "1"):
        raise LinkError("GPUPOOL_RANKS_SHARE=%r: 1 (ranks on rank 0's "
                        "host read its items where it pickled them, the "
                        "default) or 0 (through MPI)" % v)
    return v != "0"


def _boot_id():
    """This boot of this host's kernel, or None where it cannot be read."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


def program():
    """The package's MPI process: GPUPOOL_MPIPROC, else gpupool/_mpiproc
    (built when MPI was found at install time), else None."""
    p = os.environ.get("GPUPOOL_MPIPROC") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "_mpiproc")
    return p if os.access(p, os.X_OK) else None


class Link:
    """This rank's MPI process: start() it, then send() and recv()
    messages; end() it."""

    def __init__(self):
        self.rank = self.size = 0
        self.proc = None
        self.sock = None
        self.shm = None
        self.buf = bytearray()
        self.big = None  # a big message being read: type, peer, body, got
        self.start_ns = time.monotonic_ns()
        self.ring = None   # the rings' mapping: out ring, then in ring
        self.ringfd = -1   # its memfd, for clean workers (share_ring)
        self.rsize = 0     # bytes of each
        self.out = None    # the out ring's extents (a _gpupool.Ring)
        self.held = {}     # in-ring extents delivered: off -> bytes
        self.freed = []    # in-ring offsets whose Extent is gone
        self.out_freed = []  # the same for items pickled in the out ring
        self.sending = {}  # out-ring offset -> such an item MPI sends
        self.in_place = 0  # items sent from where they were pickled
        self.share = False  # rank 0: ranks on its host may read its ring
        self.refs = {}     # rank 0: peer -> {off: item it reads in place}
        self.by_ref = 0    # rank 0: items sent so (TASKREF)
        self.ring0 = None  # another rank: rank 0's out ring, read only
        self.ring0fd = -1  # its memfd here (map_ring0)
        self.ring0id = None
        self.ref_freed = []  # offsets in it whose Extent is gone
        self.busy_now = False

    def start(self):
        prog = program()
        if prog is None:
            raise LinkError(
                "this gpupool was installed without MPI, so it cannot run "
                "across ranks: install MPI's headers (Debian: apt-get "
                "install libopenmpi-dev) and pip install gpupool again")
        rsize = ring_bytes()
        self.share = share_on()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        memfd = os.memfd_create("gpupool-ranks")
        ringfd = -1
        try:
            if rsize:
                # Pages are taken as the rings are first written, and kept.
                ringfd = os.memfd_create("gpupool-ring")
                os.ftruncate(ringfd, 2 * rsize)
                self._map_rings(ringfd, rsize)
            fds = (theirs.fileno(), memfd) + ((ringfd,) if rsize else ())
            self.proc = subprocess.Popen(
                [prog, str(theirs.fileno()), str(memfd), str(os.getpid()),
                 str(ringfd)],
                pass_fds=fds, stdin=subprocess.DEVNULL)
        except BaseException:
            os.close(memfd)
            mine.close()
            if ringfd >= 0:
                os.close(ringfd)
            raise
        finally:
            theirs.close()
        self.ringfd = ringfd
        self.sock = mine
        try:
            t, _, d = self._first()
            if t != FR_READY or len(d) != 8:
                raise LinkError("MPI did not start: a bad frame (type %d) "
                                "from its process" % t)
            self.rank, self.size = struct.unpack("=ii", d)
            self.shm = mmap.mmap(memfd, self.size * 9 + 1)
        except BaseException:
            self.close()
            raise
        finally:
            os.close(memfd)
        self.sock.setblocking(False)
        self.fd = self.sock.fileno()
        self._frame(FR_START, 0, b"")

    def _map_rings(self, fd, rsize):
        from . import _gpupool
        self.ring = mmap.mmap(fd, 2 * rsize)
        # Not in the workers forked later: they neither carry the
        # mapping nor can write it; but for the ring this rank's pools
        # read items in (share_ring()).
        if hasattr(mmap, "MADV_DONTFORK"):
            self.ring.madvise(mmap.MADV_DONTFORK)
        self.rsize = rsize
        self.out = _gpupool.Ring(rsize)

    def share_ring(self, out):
        """A ring as the extern mapping of the Pools made from now on
        (gp_pool_opts.ext_base): out, rank 0's, where it pickles big
        chunks (arena()); else the in ring, where MPI receives a rank's
        items. Their workers read an item that lies there in place,
        forked ones in the mapping they inherit (read only there), clean
        ones mapping the memfd."""
        if self.ring is not None and self.ringfd >= 0:
            from . import _gpupool
            off = 0 if out else self.rsize
            if hasattr(mmap, "MADV_DOFORK"):
                self.ring.madvise(mmap.MADV_DOFORK, off, self.rsize)
            _gpupool.ring_extern(self.ring, off, self.rsize, self.ringfd)

    def ring_id(self):
        """What another rank needs to map this rank's out ring (rank 0's,
        sent with POOL), or None: no rings, or sharing is off. The boot
        and the memfd's device and inode name it: a rank elsewhere may
        find a process with that pid and fd, even a memfd, but not that
        one."""
        if self.ring is None or self.ringfd < 0 or not self.share:
            return None
        boot = _boot_id()
        if boot is None:
            return None
        st = os.fstat(self.ringfd)
        return {"pid": os.getpid(), "fd": self.ringfd, "size": self.rsize,
                "boot": boot, "dev": st.st_dev, "ino": st.st_ino}

    def map_ring0(self, rid):
        """Map rank 0's out ring (rid: its ring_id()) read only, as the
        extern mapping of the Pools made from now on: True when this rank
        reads rank 0's items there (on its host, the memfd reachable and
        the one rid names), False when they come through MPI."""
        if self.ring0 is not None:
            return rid == self.ring0id
        if not rid or not self.share or rid.get("boot") != _boot_id():
            return False  # off, or another host
        from . import _gpupool
        try:
            fd = os.open("/proc/%d/fd/%d" % (rid["pid"], rid["fd"]),
                         os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False  # not ours to open (another pid namespace)
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != (rid["dev"], rid["ino"]) or \
                    st.st_size < rid["size"]:
                raise OSError("not rank 0's ring")
            m = mmap.mmap(fd, rid["size"], flags=mmap.MAP_SHARED,
                          prot=mmap.PROT_READ)
            _gpupool.ring_extern(m, 0, rid["size"], fd)
        except (OSError, ValueError):
            os.close(fd)
            return False
        if self.ring is not None and hasattr(mmap, "MADV_DONTFORK"):
            # The in ring is no pool's extern mapping now: out of the
            # workers again (share_ring() let them have it).
            self.ring.madvise(mmap.MADV_DONTFORK, self.rsize, self.rsize)
        self.ring0, self.ring0fd, self.ring0id = m, fd, rid
        return True

    def ref_extent(self, off, n):
        """An item rank 0 sent by reference: its n bytes at off of rank
        0's out ring, read in place; REFFREE gives it back once the
        Extent is gone."""
        from . import _gpupool
        return _gpupool.Extent(self.ring0, off, n, self.ref_freed, off)

    def is_arena(self, data):
        """Whether data is an item arena() made (it lies in the out
        ring)."""
        return getattr(data, "freed", None) is self.out_freed

    def send_ref(self, peer, data, pool, item):
        """Item data (arena()'s) to peer, which maps the out ring
        (map_ring0()), by where it lies: kept here till peer's REFFREE
        for it."""
        self._flush_freed()
        off = data.tag + _PRE
        self.refs.setdefault(peer, {})[off] = data
        self.in_place += 1
        self.by_ref += 1
        self._frame(TASKREF, peer, REF.pack(pool, item, off,
                                            memoryview(data).nbytes))

    def arena(self, n):
        """n writable bytes of the out ring for an item to be pickled
        into (gpupool._pickles.arena on rank 0), as an Extent: send() then
        sends it from there, writing its record's header in the _PRE
        bytes before it; the extent is free once MPI sent it and the
        last reference is gone. None when n is small or there is no
        room (the item is then a bytes, copied into the ring to go)."""
        if n < RING_MIN or self.out is None:
            return None
        off = self.out.alloc(n + _PRE)
        if off < 0:
            return None
        from . import _gpupool
        return _gpupool.Extent(self.ring, off + _PRE, n, self.out_freed,
                               off, True)

    def ring_used(self):
        """Bytes of the rings taken: the out ring's sends MPI has not
        finished and its items pickled there still referred to, the in
        ring's messages not yet given back (an Extent gone counts as
        given back)."""
        if self.out is None:
            return 0
        self._free_out()
        held = sum(k for off, k in self.held.items()
                   if off not in self.freed)
        return self.out.used() + held

    def busy(self, on):
        """This rank has items out (on): its MPI process naps short."""
        if on != self.busy_now:
            self.busy_now = on
            self.shm[self.size * 9] = 1 if on else 0

    def _ended(self):
        """Why the MPI process ended before its first frame."""
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            rc = None
        if rc == 127:
            try:
                from ._mpilib import MPI_WHAT
            except ImportError:
                MPI_WHAT = ""
            if MPI_WHAT:
                return ("MPI did not start: gpupool's MPI process needs the "
                        "machine's MPI library %s, which cannot be loaded "
                        "(the loader's message is above): install that MPI "
                        "or load its module, or pip install gpupool from "
                        "source against this machine's MPI" % MPI_WHAT)
        return "MPI did not start: its process (pid %d) ended" % self.proc.pid

    def _first(self):
        """The MPI process's first frame, waited for (FR_ERR raises);
        what follows it stays in buf for recv()."""
        out = []
        while not out:
            b = self.sock.recv(_READ)
            if not b:
                raise LinkError(self._ended())
            self.buf += b
            self._parse(out, most=1)
        return out[0]

    def _frame(self, t, peer, data, head=b""):
        hdr = _HDR.pack(t, peer, len(head) + len(data))
        self.sock.setblocking(True)
        try:
            if len(data) < 4096:
                self.sock.sendall(hdr + head + bytes(data))
            else:  # a big one goes from where it is
                self.sock.sendall(hdr + head)
                self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # recv() says it is gone
        finally:
            self.sock.setblocking(False)

    def send(self, peer, t, data=b"", head=b""):
        """One message: head (a record's header), then data (any
        buffer); from where it lies when arena() made it (unless a send
        of it to a rank since lost is still pending: MPI owns those
        bytes), else through the out ring when it is big and fits."""
        self._flush_freed()
        h = len(head)
        if self.is_arena(data) and h <= _PRE:
            off = data.tag + _PRE - h
            if off not in self.sending:
                self.ring[off:off + h] = head
                self.sending[off] = data
                self.in_place += 1
                self._frame(FR_RING_SEND, 0,
                            _RING.pack(t, peer, off, h + len(data)))
                return
        n = h + memoryview(data).nbytes
        if n >= RING_MIN and self.out is not None:
            off = self.out.alloc(n)
            if off >= 0:
                h = len(head)
                self.ring[off:off + h] = head
                self.ring[off + h:off + n] = data
                self._frame(FR_RING_SEND, 0, _RING.pack(t, peer, off, n))
                return
        self._frame(t, peer, data, head)

    def _free_out(self):
        """Take back the out-ring extents of items pickled there that
        are gone (after MPI sent them: send() held them till then)."""
        while self.out_freed:
            self.out.free(self.out_freed.pop())

    def _flush_freed(self):
        """Give the MPI process back the in-ring extents read here, and
        rank 0 the items of its out ring read here in place."""
        self._free_out()
        if self.ref_freed:
            offs = self.ref_freed[:]
            del self.ref_freed[:len(offs)]
            self._frame(REFFREE, 0, b"".join(_OFF.pack(o) for o in offs))
        if not self.freed:
            return
        offs = self.freed[:]
        del self.freed[:len(offs)]
        for off in offs:
            self.held.pop(off, None)
            self._frame(FR_RING_FREE, 0, _OFF.pack(off))

    def recv(self):
        """The messages that have come: a list of (type, peer, bytes-like).
        Raises LinkError when the MPI process failed or is gone. A big
        message is read straight into a buffer of its own, or comes as
        an Extent of the in ring."""
        self._flush_freed()
        out = []
        while True:
            if self.big is not None:
                t, peer, body, got = self.big
                n = self._recv(self.sock.recv_into, memoryview(body)[got:])
                if n is None:
                    break
                got += n
                self.big = (t, peer, body, got) if got < len(body) else None
                if self.big is None:
                    self._deliver(out, t, peer, body)
                continue
            b = self._recv(self.sock.recv, _READ)
            if b is None:
                break
            self.buf += b
            self._parse(out)
            if self.big is None and len(b) < _READ:
                break
        return out

    def _recv(self, how, arg):
        """how(arg) (sock.recv or sock.recv_into) once: what it gave, or
        None when nothing waits; LinkError when the MPI process is gone."""
        try:
            r = how(arg)
        except BlockingIOError:
            return None
        except ConnectionResetError:
            r = 0
        if not r:
            raise LinkError("the MPI process of this rank is gone")
        return r

    def _parse(self, out, most=None):
        """The whole frames at the head of buf into out (at most `most`);
        without a limit, a big one begun continues in a buffer of its
        own."""
        buf, off, n = self.buf, 0, len(self.buf)
        while n - off >= _HDR.size and (most is None or len(out) < most):
            t, peer, k = _HDR.unpack_from(buf, off)
            start = off + _HDR.size
            if n - start < k:
                if k >= _READ and most is None:
                    body = bytearray(k)
                    body[:n - start] = buf[start:]
                    self.big = (t, peer, body, n - start)
                    off = n
                break
            self._deliver(out, t, peer, bytes(buf[start:start + k]))
            off = start + k
        del buf[:off]

    def _deliver(self, out, t, peer, d):
        if t == FR_ERR:
            raise LinkError(bytes(d[4:]).rstrip(b"\0").decode(
                errors="replace"))
        if t == FR_RING_SENT:
            off = _OFF.unpack(d)[0]
            if self.sending.pop(off, None) is None:
                self.out.free(off)
            return
        if t == FR_RING_RECV:
            from . import _gpupool
            t, peer, off, k = _RING.unpack(d)
            self.held[off] = k
            d = _gpupool.Extent(self.ring, self.rsize + off, k, self.freed,
                                off)
        if t == REFFREE:
            held = self.refs.get(peer, {})
            for (off,) in _OFF.iter_unpack(d):
                held.pop(off, None)
            return
        out.append((t, peer, d))

    def wait(self, secs):
        """Wait up to secs for something from the MPI process."""
        try:
            select.select([self.fd], [], [], secs)
        except InterruptedError:
            pass

    def talk(self, peer, on):
        """Beat peer every second (on), or stop: it is done or lost."""
        self.shm[self.size * 8 + peer] = 1 if on else 0

    def silent(self, peer):
        """Seconds since peer was last heard from (since start if never)."""
        heard, = struct.unpack_from("=q", self.shm, 8 * peer)
        return (time.monotonic_ns() - max(heard, self.start_ns)) / 1e9

    def end(self, clean, rc):
        """MPI_Finalize if clean (every rank said bye), else, on rank 0,
        MPI_Abort(rc): the launcher ends the job. Waits for the MPI
        process."""
        self._frame(FR_END, 0, struct.pack("=ii", 1 if clean else 0, rc))
        if clean:
            deadline = time.monotonic() + 30
            done = False
            while not done and time.monotonic() < deadline:
                self.wait(0.5)
                try:
                    done = any(t == FR_DONE for t, _, _ in self.recv())
                except LinkError:
                    break
        self.close()

    def close(self):
        """Wait for the MPI process (it ends on FR_END, or dies with us),
        then close our end: closed first, it would see the rank gone."""
        if self.proc is not None:
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.ringfd >= 0:
            os.close(self.ringfd)
            self.ringfd = -1
        if self.ring0fd >= 0:
            os.close(self.ring0fd)
            self.ring0fd = -1


# The payloads (host byte order; every record can follow another):
#   TASKS   0 -> r: per item: pool id, item id, length, then the C item
#   TASKREF 0 -> r: per item: pool id, item id, offset, length: the C item
#                   lies there in rank 0's out ring, which r maps
#   REFFREE r -> 0: offsets of such items: r is done with them
#   RESULTS r -> 0: per item: pool id, item id, status, code, length, out
#   CTL     0 -> r: pool id, what (below); pool id 0 with C_END: leave,
#                   C_END_LOST: leave without MPI_Finalize (a rank was
#                   lost, and MPI_Finalize would wait for it)
#   POOL    0 -> r: a pickle: {"id", "kw"}: make the pool's part there
#   HELLO   r -> 0: a pickle: {"id", "host", "info"} or {"id", "host",
#                   "error"}: its part is up, or could not start
#   BYE     r -> 0: empty: it leaves (every result sent)
C_CANCEL, C_KILL, C_CLOSE, C_END, C_END_LOST = 1, 2, 3, 4, 5
TASK = struct.Struct("=IQQ")
REF = struct.Struct("=IQQQ")
RESULT = struct.Struct("=IQiiQ")
CTLREC = struct.Struct("=Ii")


def task_records(d):
    """(pool, item, payload) for each record of a TASKS payload: bytes of
    its own, or, from the in ring (an Extent), a view of it read in place
    (the extent is freed when the last view is gone)."""
    m = memoryview(d)
    off, n = 0, m.nbytes
    ring = not isinstance(d, (bytes, bytearray))
    while off < n:
        pool, item, k = TASK.unpack_from(m, off)
        off += TASK.size
        yield pool, item, m[off:off + k] if ring else bytes(m[off:off + k])
        off += k


def ref_records(d):
    """(pool, item, off, length) for each record of a TASKREF payload."""
    return REF.iter_unpack(d)


def result_records(d):
    """(pool, item, status, code, out) for each record of RESULTS; out a
    memoryview of d."""
    off, n = 0, len(d)
    m = memoryview(d)
    while off < n:
        pool, item, status, code, k = RESULT.unpack_from(d, off)
        off += RESULT.size
        yield pool, item, status, code, m[off:off + k]
        off += k
