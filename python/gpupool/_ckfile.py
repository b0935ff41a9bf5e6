"""A checkpoint's file, its lock, and the options that say how a call
uses it (Checkpoint); the maps that read and record it are
_checkpoint.py's.

The file (little-endian, format 1):

    b"gpupool checkpoint 1 little\\n"     the header line (version, the
                                         byte order of the frames inside)
    record*                              appended, one writev(2) each

A record is a 64-byte header and a payload: magic "GPR1", kind (1: the
map's description, JSON, always the first; 2: a chunk), start, count
(the chunk's items), payload length, the C item's status and code, a
digest of the chunk's items, the payload's CRC-32, the header's CRC-32.
A chunk's payload is the worker's answer as it came (_task's pickle of
values and errors, or a frame with out-of-band buffers); a chunk that
crashed, timed out or failed in the library has none. What a record says
is checked before it is believed: a header that fails its CRC is skipped
up to the next one that passes (a power cut can leave zeros or a torn
record in the middle of what was not yet synced); a torn tail is cut
off, under the lock, before anything is appended; a payload that fails
its CRC is as if never recorded. Nothing recorded is ever rewritten.

One call at a time per file: an OFD lock on the file itself, over bytes
0 to the holder's pid (so a refusal can name it: F_OFD_GETLK gives no
pid), as gpupool-run's joblog. Replacement workers forked during a call
inherit the descriptor; an after-fork hook closes it in the child, so
only the caller ever holds the lock.
"""

import errno
import fcntl
import json
import os
import socket
import stat
import struct
import sys
import threading
import time
import zlib

from . import _errors
from . import _gpupool
from . import _jobs
from . import _threads


FORMAT = 1
_LINE = b"gpupool checkpoint %d %s\n" % (FORMAT, sys.byteorder.encode())
_PREFIX = b"gpupool checkpoint "
_REC = struct.Struct("<4sBxxxQQQii16sI")  # the header less its own CRC
_HLEN = _REC.size + 4
_MAGIC = b"GPR1"
_META, _CHUNK = 1, 2
_BLOCK = 1 << 20
# What a chunk that ended this way says about its items: recorded. A
# cancel (Ctrl-C, a failure elsewhere in the map) or a pool that lost its
# workers says nothing: those items run again.
_RECORDED = frozenset((_gpupool.OK, _gpupool.FAILED, _gpupool.CRASHED,
                       _gpupool.TIMEDOUT, _gpupool.ERROR))


class CheckpointError(_errors.Error):
    """A checkpoint cannot be used: in use by another call (``pid`` says
    whose), not a gpupool checkpoint, of a newer format, of another
    function, of other items (changed="error"), or a write, sync or lock
    failed. ``path`` names the file; what was recorded there is kept."""

    def __init__(self, msg, path, pid=None):
        super().__init__(msg)
        self.path = path
        self.pid = pid


class CheckpointWarning(UserWarning):
    """changed="rerun": chunks recorded for other items run again."""


class Checkpoint:
    """Where and how a map records its results (checkpoint=PATH is
    Checkpoint(PATH)).

    rerun_failed: items recorded as failed run again (else a failure
    comes back as map would give it: raised, or in its place with
    return_exceptions). changed: what to do with chunks recorded for
    items that differ from this call's ("error": CheckpointError naming
    the first, before anything runs in a map; "rerun": run them again,
    with a CheckpointWarning). wait: another call holds the file: False
    raises CheckpointError naming its pid, True waits, a number waits
    that many seconds. sync: seconds between fdatasync()s while the call
    runs (0: after every chunk; None: only at its end); every chunk is
    written (so survives the process) as soon as it ends, and everything
    is synced when the call ends."""

    def __init__(self, path, *, rerun_failed=False, changed="error",
                 wait=False, sync=1.0):
        self.path = os.fspath(path)
        if not isinstance(self.path, str):
            self.path = os.fsdecode(self.path)
        if changed not in ("error", "rerun"):
            raise ValueError("changed=%r: 'error' or 'rerun'" % (changed,))
        if wait is not True and wait is not False and not (
                isinstance(wait, (int, float)) and wait >= 0):
            raise ValueError("wait=%r: True, False or seconds" % (wait,))
        if sync is not None and not (isinstance(sync, (int, float)) and
                                     sync >= 0):
            raise ValueError("sync=%r: seconds (0: every chunk) or None"
                             % (sync,))
        self.rerun_failed = bool(rerun_failed)
        self.changed = changed
        self.wait = wait
        self.sync = sync

    def __repr__(self):
        return "Checkpoint(%r, rerun_failed=%r, changed=%r, wait=%r, " \
            "sync=%r)" % (self.path, self.rerun_failed, self.changed,
                          self.wait, self.sync)



# -- the lock ---------------------------------------------------------------

_open_fds = set()  # checkpoints open in this process


def _close_in_child():
    """In a worker forked during a call: its copy of a checkpoint's
    descriptor would keep the caller's OFD lock alive after the caller
    closed it (or died)."""
    for fd in list(_open_fds):
        try:
            os.close(fd)
        except OSError:
            pass
    _open_fds.clear()


os.register_at_fork(after_in_child=_close_in_child)

_FLOCK = "@hhqqi"  # struct flock: type, whence, start, len, pid


def _holder(fd, kind):
    """Who holds a lock in our way: a pid, 0 unknown, None: nobody now."""
    q = struct.pack(_FLOCK, kind, os.SEEK_SET, 0, os.getpid() + 1, 0)
    r = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_OFD_GETLK, q))
    if r[0] == fcntl.F_UNLCK:
        return None
    if r[4] > 0:  # another program's POSIX lock carries its pid
        return r[4]
    return r[3] - 1 if r[2] == 0 and r[3] > 1 else 0


def _lock(fd, path, shared, wait):
    """Our lock on fd (exclusive to write, shared to read), bytes 0 to
    our pid; refused naming the holder, or waited for (every 0.1 s, so
    Ctrl-C ends the wait)."""
    kind = fcntl.F_RDLCK if shared else fcntl.F_WRLCK
    arg = struct.pack(_FLOCK, kind, os.SEEK_SET, 0, os.getpid() + 1, 0)
    until = None if isinstance(wait, bool) else time.monotonic() + wait
    while True:
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, arg)
            return
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise CheckpointError("cannot lock checkpoint %r: %s"
                                      % (path, e.strerror), path) from e
        if wait and (until is None or time.monotonic() < until):
            time.sleep(0.1)
            continue
        pid = _holder(fd, kind)
        if pid is None:
            continue  # released meanwhile
        raise CheckpointError(
            "checkpoint %r is in use by process %s (a map on it runs "
            "there%s); Checkpoint(path, wait=True) waits for it" % (
                path, pid or "unknown",
                ", in this process" if pid == os.getpid() else ""),
            path, pid)


# -- the file ---------------------------------------------------------------

class _Rec:
    """A record header as read: seq (its place among the chunk records,
    in file order), off (of its header)."""

    __slots__ = ("seq", "off", "kind", "start", "count", "plen", "status",
                 "code", "digest", "pcrc")


def _pack(kind, start, count, status, code, dg, payload, nbytes):
    h = _REC.pack(_MAGIC, kind, start, count, nbytes, status, code, dg,
                  zlib.crc32(payload))
    return h + struct.pack("<I", zlib.crc32(h))


class _File:
    """An open, locked checkpoint: its records read, new ones appended."""

    def __init__(self, opts, fn_id, readonly=False):
        self.path = opts.path
        # Its directory, synced once the file is new: resolved now, as
        # the caller may chdir() while the call runs.
        self.dir = os.path.dirname(os.path.abspath(self.path))
        self.sync = opts.sync
        self.fd = -1
        self.buf, self.boff = b"", 0
        self.thread = None
        self.cv = threading.Condition()
        self.dirty = False
        self.dir_synced = True  # the directory entry, once the file is new
        self.closing = False
        self.error = None
        self.fd, self.readonly = self._open(opts.wait, readonly)
        try:
            self.size = os.fstat(self.fd).st_size
            self.first = self._head(fn_id)
            self.end = self.size  # where the next record goes
        except BaseException:
            self._release()
            raise

    def fail(self, what, e):
        return CheckpointError("checkpoint %r: %s: %s" % (
            self.path, what, e.strerror or e), self.path)

    def _open(self, wait, ro):
        path = self.path
        rw = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | \
            os.O_NONBLOCK  # a FIFO must not block open(): refused below
        while True:
            readonly = ro
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW |
                             os.O_NONBLOCK) if ro else os.open(path, rw, 0o666)
            except OSError as e:
                # A read-only file or directory: what is recorded can
                # still be read.
                if e.errno == errno.ELOOP:
                    raise CheckpointError("checkpoint %r is a symbolic link "
                                          "(refused, as gpupool-run refuses "
                                          "one for a joblog): name the file "
                                          "itself" % path, path) from e
                if ro or e.errno not in (errno.EACCES, errno.EROFS,
                                         errno.EPERM):
                    raise self.fail("cannot open it", e) from e
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW |
                                 os.O_NONBLOCK)
                except OSError:
                    raise self.fail("cannot create it", e) from e
                readonly = True
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise CheckpointError("checkpoint %r is not a regular "
                                          "file" % path, path)
                _lock(fd, path, readonly, wait)
                # The call we waited for may have replaced the file.
                now = os.stat(path, follow_symlinks=False)
                if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                    _open_fds.add(fd)
                    return fd, readonly
            except FileNotFoundError:
                pass
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)

    def _head(self, fn_id):
        """Check the header line and the description record (or write
        them, in an empty file); the offset of the first chunk record."""
        head = os.pread(self.fd, 256, 0)
        if self.size and not (_LINE.startswith(head) and
                              self.size < len(_LINE)):
            self._check_line(head)
            first = self._rec(len(_LINE))
            meta = self._payload(first) if first is not None and \
                first.kind == _META else None
            if meta is not None:
                self.meta = meta = json.loads(bytes(meta))
                if fn_id is not None and meta.get("fn") != fn_id:
                    raise CheckpointError(
                        "checkpoint %r records the results of %s, not of "
                        "%s: pass another path (or remove it to start "
                        "again)" % (self.path, meta.get("fn"), fn_id),
                        self.path)
                return first.off + _HLEN + first.plen
            if first is not None or self._resync(len(_LINE)) is not None:
                raise CheckpointError("checkpoint %r is damaged: its first "
                                      "record does not describe the map; "
                                      "nothing was changed" % self.path,
                                      self.path)
        # Empty, or what a call killed while creating it left.
        if self.readonly:
            raise CheckpointError("checkpoint %r is empty and read-only"
                                  % self.path, self.path)
        meta = json.dumps({"fn": fn_id, "host": socket.gethostname(),
                           "pid": os.getpid(), "created": time.strftime(
                               "%Y-%m-%dT%H:%M:%S%z")}).encode()
        rec = _pack(_META, 0, 0, 0, 0, bytes(16), meta, len(meta))
        try:
            os.ftruncate(self.fd, 0)
            self._write(_LINE + rec + meta)
        except OSError as e:
            raise self.fail("cannot write it", e) from e
        # Synced with the first records (the file and its name: a call
        # that ends is durable whole), not now: a sync costs milliseconds.
        self.dirty = True
        self.dir_synced = False
        self.size = len(_LINE) + len(rec) + len(meta)
        return self.size

    def _check_line(self, head):
        line = head.split(b"\n", 1)[0]
        f = line.split()
        if not head.startswith(_PREFIX) or b"\n" not in head or \
                len(f) != 4 or not f[2].isdigit():
            raise CheckpointError(
                "%r is not a gpupool checkpoint (it begins %r): pass "
                "another path; nothing was changed" % (self.path, head[:32]),
                self.path)
        if int(f[2]) > FORMAT:
            raise CheckpointError(
                "checkpoint %r is of format %d, written by a newer gpupool "
                "(this one reads format %d): nothing was changed"
                % (self.path, int(f[2]), FORMAT), self.path)
        if f[3].decode(errors="replace") != sys.byteorder:
            raise CheckpointError(
                "checkpoint %r was written on a %s-endian machine, this one "
                "is %s-endian: nothing was changed" % (
                    self.path, f[3].decode(errors="replace"),
                    sys.byteorder), self.path)

    # reading

    def _get(self, off, n):
        """The file's bytes [off, off + n), through a 1 MiB block."""
        i = off - self.boff
        if i < 0 or i + n > len(self.buf):
            self.buf = os.pread(self.fd, max(_BLOCK, n), off)
            self.boff, i = off, 0
        return self.buf[i:i + n]

    def _rec(self, off):
        """The record whose header is at off if it reads whole, else None."""
        b = self._get(off, _HLEN)
        if len(b) < _HLEN or b[:4] != _MAGIC or \
                zlib.crc32(b[:_REC.size]) != \
                struct.unpack_from("<I", b, _REC.size)[0]:
            return None
        r = _Rec()
        (_, r.kind, r.start, r.count, r.plen, r.status, r.code, r.digest,
         r.pcrc) = _REC.unpack_from(b)
        if off + _HLEN + r.plen > self.size:
            return None  # torn: its payload was never all written
        r.off = off
        return r

    def _resync(self, off):
        """The next offset after off where a whole record reads, or None."""
        while off < self.size:
            b = os.pread(self.fd, _BLOCK + 3, off)
            i = b.find(_MAGIC)
            while i != -1:
                if self._rec(off + i) is not None:
                    return off + i
                i = b.find(_MAGIC, i + 1)
            off += _BLOCK
        return None

    def records(self):
        """The chunk records, in file order (unknown kinds skipped); sets
        self.end to where the last whole record ends."""
        off = end = self.first
        seq = 0
        while off < self.size:
            r = self._rec(off)
            if r is None:
                off = self._resync(off + 1)
                if off is None:
                    break
                continue
            off = end = r.off + _HLEN + r.plen
            if r.kind == _CHUNK:
                r.seq = seq
                seq += 1
                yield r
        self.end = end

    def _payload(self, r):
        """A record's payload (a bytearray: arrays unpickled from it may
        be views of it), or None when it fails its CRC."""
        off = r.off + _HLEN
        if r.plen <= _BLOCK:
            p = bytearray(self._get(off, r.plen))
        else:
            p = bytearray(r.plen)
            got = 0
            while got < r.plen:
                k = os.preadv(self.fd, [memoryview(p)[got:]], off + got)
                if k == 0:
                    return None
                got += k
        return p if len(p) == r.plen and zlib.crc32(p) == r.pcrc else None

    def outcome(self, fn, r):
        """(values, {index: exception} or None) of a chunk record, or
        None when its payload fails its CRC."""
        p = self._payload(r) if r.plen else b""
        if p is None:
            return None
        return _jobs.values_of(fn, r.status, r.code, p, r.count)

    def trim(self):
        """Cut off a torn tail before anything is appended to it."""
        self.buf = b""
        if not self.readonly and self.end < self.size:
            try:
                os.ftruncate(self.fd, self.end)
            except OSError as e:
                raise self.fail("cannot cut its torn end", e) from e
            self.size = self.end

    # writing

    def _write(self, head, payload=b"", nbytes=0):
        """head and payload (nbytes long), appended. A write that fails
        part way leaves a torn record: the next call's trim() cuts it
        off."""
        n = os.writev(self.fd, [head, payload])
        if n == len(head) + nbytes:
            return
        views = [memoryview(head), memoryview(payload).cast("B")]
        while True:  # a short write (a signal, a huge payload)
            while views and n >= len(views[0]):
                n -= len(views[0])
                views.pop(0)
            if not views:
                return
            views[0] = views[0][n:]
            n = os.writev(self.fd, views)

    def record(self, start, n, dg, status, code, out, stop):
        """Append the outcome of the chunk of n items at start (nothing
        for an outcome that says nothing of them, or while the pool is
        being terminated: its kills are not the items' doing)."""
        if status not in _RECORDED or stop.is_set():
            return
        if self.error is not None:
            raise self.error
        payload = out if status == _gpupool.OK else b""
        nbytes = memoryview(payload).nbytes
        head = _pack(_CHUNK, start, n, status, code, dg, payload, nbytes)
        try:
            self._write(head, payload, nbytes)
        except OSError as e:
            raise CheckpointError(
                "checkpoint %r: cannot record items %d-%d: %s (what was "
                "recorded before is kept)" % (self.path, start,
                                               start + n - 1, e.strerror),
                self.path) from e
        self.end += len(head) + nbytes
        self.dirty = True
        if self.sync == 0:
            self._sync()
        elif self.sync is not None and self.thread is None:
            self.thread = _threads.thread(self._syncer, "gpupool-checkpoint")
            _threads.start(self.thread)

    def _sync(self):
        self.dirty = False
        try:
            os.fdatasync(self.fd)
        except OSError as e:
            self.error = self.fail("fdatasync failed (recent records may "
                                   "be lost at a power cut)", e)
            raise self.error from e
        if not self.dir_synced:
            self.dir_synced = True
            try:  # the file's name, durable too
                d = os.open(self.dir, os.O_RDONLY)
                try:
                    os.fsync(d)
                finally:
                    os.close(d)
            except OSError:
                pass  # (an unreadable directory; a file system that
                # refuses a directory's fsync)

    def _syncer(self):
        """Every `sync` seconds while records are written: fdatasync, in
        this thread, so that the call never waits for the disk."""
        with self.cv:
            while not self.closing:
                self.cv.wait(self.sync)
                if self.dirty and not self.closing:
                    try:
                        self._sync()
                    except CheckpointError:
                        return

    def _release(self):
        _open_fds.discard(self.fd)
        os.close(self.fd)  # the lock goes with it
        self.fd = -1

    def close(self, quiet=False):
        """Sync what was written, release the lock. Raises a failure to
        sync (or one the sync thread met) unless quiet."""
        if self.fd < 0:
            return
        if self.thread is not None:
            with self.cv:
                self.closing = True
                self.cv.notify_all()
            self.thread.join()
        err = self.error
        if err is None and self.dirty:
            try:
                self._sync()
            except CheckpointError as e:
                err = e
        self._release()
        if err is not None and not quiet:
            raise err


def records(path):
    """What a checkpoint holds, read under a shared lock (waiting for a
    call that writes it): (its description, [(start, count, status) of
    each chunk record, in file order]). For tests and inspection."""
    ck = _File(Checkpoint(path, wait=True), None, readonly=True)
    try:
        return ck.meta, [(r.start, r.count, r.status) for r in
                         ck.records()]
    finally:
        ck.close()


def _changed(path, spans):
    lo, hi = min(spans)
    return ("checkpoint %r: items %d-%d of this call differ from those it "
            "recorded there (the items changed, or pickle differently now: "
            "a set of strings, a dict in another order)%s" % (
                path, lo, hi - 1, "" if len(spans) == 1 else
                ", and %d more recorded chunks" % (len(spans) - 1)))


def _spans_text(path, spans):
    return _changed(path, spans) + "; pass Checkpoint(path, changed=" \
        "'rerun') to run them again, or another path"
