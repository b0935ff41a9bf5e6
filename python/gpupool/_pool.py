"""gpupool.Pool: the Python API over the C pool (_gpupool.Pool).

Who runs the C pool. The C pool runs one call at a time; here every call
goes through Pool._drive(), under self._runner (a lock, with the owning
thread recorded so that a re-entrant call is an error, not a deadlock):

- map() drives in the caller's thread: the GIL is released while the C
  call waits, and Ctrl-C in the main thread reaches the C call, which
  cancels the items and raises KeyboardInterrupt.
- imap()/imap_unordered() drive in a helper thread (the results are a
  generator the caller pulls at its own pace); the caller blocks on a
  Condition, which Ctrl-C interrupts: the generator's cleanup cancels the
  C call at its next callback.
- submit() queues the call; every C call serves that queue first while
  it still asks for items (so a future does not wait for a long map to
  end, unless that map has sent its last item), and a dispatcher thread
  drives the queue when no other call runs. The dispatcher gives way
  (ends its C call) when another thread waits for the runner lock.

States: open -> closed (close(): no new work; queued work still runs) ->
joined (join(): helpers ended, workers stopped and reaped); terminate()
cancels what is queued and running and then joins.
"""

import errno
import math
import os
import socket
import threading

from . import _async
from . import _checkpoint
from . import _errors
from . import _exit
from . import _gpupool
from . import _jobs
from . import _progress
from . import _ranks
from . import _start
from . import _threads
from . import _task
from ._drive import Driver, _Future
# WorkerInfo, GpuState, current: gpupool's names, found here.
from ._info import GpuState, WorkerInfo, current  # noqa: F401
from ._options import (_check_call, _check_counts,  # noqa: F401
                       _check_options, _check_processes,
                       _check_rank_timeout, _gpu_mem, _gpus_arg,
                       _max_tasks, _spread, pool_signature)


_MAX_CHUNK = 16384  # map's default chunks: len / (4 x workers), capped
_CHUNK_BYTES = 1 << 20  # and, for big elements, at about this many bytes


def _nbytes(x):
    """An element's bytes as the default chunk estimates them: len() of
    bytes, bytearray and memoryview, .nbytes of another buffer exporter
    (a numpy array), 0 for anything else (its size is not known cheaply)."""
    if type(x) in (bytes, bytearray):
        return len(x)
    try:
        with memoryview(x) as m:
            return m.nbytes
    except (TypeError, ValueError, BufferError):
        return 0


def _read_report(fd):
    chunks = []
    while True:
        try:
            b = os.read(fd, 65536)
        except (BlockingIOError, OSError):
            break
        if not b:
            break
        chunks.append(b)
    return b"".join(chunks).decode(errors="replace")


class Pool(Driver):
    """A pool of long-lived worker processes, per_gpu per GPU, each pinned
    to its GPU (CUDA_VISIBLE_DEVICES) and that GPU's NUMA node and CPUs.

    The first arguments are multiprocessing.Pool's: processes (N
    workers: N / G per GPU when N is a multiple of the G GPUs, one on each
    of the first N when N < G, else ValueError; None: per_gpu per GPU),
    initializer(*initargs), run once per worker with os.environ already
    holding the worker's CUDA_VISIBLE_DEVICES: load a model there;
    maxtasksperchild (alias max_tasks_per_worker) replaces a worker after
    N items; context: a multiprocessing context or its name, as
    start_method.

    start_method: "fork" (fast: a worker is a copy of this process, with
    what it imported), "spawn" (each worker starts clean, a fresh
    interpreter: this script's __main__ is run again there as __mp_main__,
    so guard its work with if __name__ == "__main__"; "forkserver" is the
    same here), or None: fork, unless forking this process would break
    the workers (CUDA initialised by any framework, JAX started, threads
    started here, or Pool() called off the main thread), when they start
    clean and one line on stderr says why.
    A forced "fork" in that case is refused, saying why. Env
    GPUPOOL_START_METHOD sets the default. start_method says which was
    taken. Either way each worker's OpenMP/BLAS thread pools are sized to
    its CPUs (current().threads), unless you set their variables.

    gpus: None (every GPU found), a string ("0,2", UUIDs, bus ids) or a
    list. fake_gpus: N fake GPUs (no CUDA needed); None falls back to
    GPUPOOL_FAKE_GPUS. timeout (seconds) stops an item (a chunk) that runs
    longer: gpupool.Timeout. retries re-runs an item whose worker crashed
    or timed out. grace (seconds, default 1) is the time an item gets
    after a timeout or cancel before SIGKILL. max_msg (bytes) bounds one
    item (a chunk, pickled) and one result: larger ones fail with
    PoolError; None: the machine's memory, so anything that fits goes (in
    pieces through the worker's 64 MiB of shared memory when over that).
    The pool options (keyword only, listed at the end) are the library's,
    checked there: a bad value is a ValueError naming the keyword. nice:
    one under this process's needs CAP_SYS_NICE or RLIMIT_NICE, else
    Pool() raises InitError saying so.

    Shared GPUs: gpus="free" (or "free:0,2") uses only GPUs no one else
    computes on or fills over busy_pct % (or, with busy_util, keeps busy
    over that %); none free raises OSError saying why each is busy, unless
    wait_free=True. During calls, a GPU someone takes gets no new item
    until it is free again. With gpu_mem and per_gpu > 1 an item starts
    only where it fits beside what runs there. The GPUs are watched by
    NVML in a monitor child, never in this process; gpus() and monitor
    say what it sees.

    Claims: before its workers start, the pool waits its turn for all its
    GPUs, held for its life against every other gpupool of this host (with
    gpu_mem, declared claims share a GPU while their sum fits); a wait
    past claim_timeout raises TimeoutError. See gpupool.claims().

    Across nodes: in a script run by `python -m gpupool` under an MPI
    launcher, the pool spans every rank (ranks=False: this machine
    only): each rank makes this same pool on its own GPUs and runs the
    items rank 0 hands it; info() says each worker's rank and host. A
    rank silent for rank_timeout seconds (default 10) is written off:
    what it ran runs again elsewhere if retries allows, else fails with
    RankLost (docs/cluster.md, "From Python").

    Forked workers are fastest: create the pool before starting threads
    or using CUDA in this process, and it forks.
    """

    def __init__(self, processes=None, initializer=None, initargs=(),
                 maxtasksperchild=None, context=None, *, gpus=None,
                 per_gpu=None, timeout=None, retries=0,
                 max_tasks_per_worker=None, fake_gpus=None, grace=None,
                 max_msg=None, start_method=None, ranks=True,
                 rank_timeout=10.0, **options):
        _check_options(options)  # the rows' keywords (pool_signature)
        _start.not_in_a_clean_start()
        self._pid = os.getpid()
        _check_rank_timeout(rank_timeout)
        mine = dict(locals())  # the other ranks' same pool (_ranks.spread)
        mine.update(mine.pop("options"))
        _check_processes(processes)
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        method, self.start_reason = _start.choose(start_method, context)
        self.start_method = method
        max_tasks = _max_tasks(maxtasksperchild, max_tasks_per_worker)
        _check_counts(mine)
        gpus = _gpus_arg(gpus)
        plan_kw = dict(options, fake_gpus=fake_gpus)
        if processes is not None:
            gpus, per_gpu = _spread(processes, gpus, per_gpu, plan_kw)
        self._timeout = timeout
        self._retries = retries
        self._init_fn, self._init_args = initializer, initargs
        self._max_tasks = max_tasks
        # The functions of __main__ the workers will have: taken before
        # they fork (a replacement forks later, and has them too).
        self._forked = _task.Forked() if method == "fork" else None
        self._c = self._start_c(method, initializer, initargs, dict(
            gpus=gpus, per_gpu=1 if per_gpu is None else per_gpu,
            timeout_ms=0 if timeout is None else
            max(1, math.ceil(timeout * 1000)),
            grace_ms=0 if grace is None else
            max(1, math.ceil(grace * 1000)),
            retries=retries, max_tasks=max_tasks, view=True,
            max_msg=max_msg, **plan_kw))
        if options.get("gpu_mem"):
            self._refuse_gpu_mem(_gpu_mem(options["gpu_mem"]))
        self._size = self._c.size()
        self._driver_init()
        self._state = "open"
        self._stop = threading.Event()
        self._helpers = {}  # imap threads -> their StreamJob
        self._results = _async.Results()
        self._pids = [i["pid"] for i in self._c.info()]
        if ranks and _ranks.world is not None:
            try:
                self._c = _ranks.spread(self._c, mine, method, max_tasks)
            except BaseException:
                self._close_pipes()
                raise
            self._forked, self._size = None, self._c.size()
        _exit.register(self, type(self)._at_exit)

    def _start_c(self, method, initializer, initargs, c_kw):
        """The C pool, with c_kw its options, its workers started (forked,
        or clean with method "spawn") and their initializer run; the pipes
        the workers report on (the initializer's failure, their pids)."""
        r, w = os.pipe()  # close-on-exec, as every fd Python makes
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        report = [w, r]
        self._pidr, self._pidw = os.pipe()
        os.set_blocking(self._pidr, False)
        os.set_blocking(self._pidw, False)
        self._keep = []  # fds clean workers keep: open until join()
        self._all_pids = set()  # every worker's pid, from the pid pipe
        init = _task.Initializer(initializer, initargs, report, self._pidw)
        spawn = None
        try:
            if method == "spawn":
                # A replacement execs later with the same descriptor
                # numbers: they stay open as long as the pool.
                self._keep = [os.dup(w)]
                init.report = [self._keep[0], None]
                spawn = (_start.argv(),
                         _start.payload(_task.dumps_fn(init)),
                         (self._keep[0], self._pidw))
                init = None
            return _gpupool.Pool(_task.worker_entry, init=init, spawn=spawn,
                                 **c_kw)
        except BaseException as e:
            self._close_pipes()
            if (isinstance(e, OSError) and e.errno == errno.ENODEV and
                    str(e.strerror).startswith("no free GPU") and
                    not c_kw.get("wait_free")):
                raise OSError(e.errno, "%s (wait_free=True waits for one)"
                              % e.strerror) from None
            if not isinstance(e, _gpupool.InitError):
                raise
            why = _read_report(r)
            if not why:
                # No initializer raised: the library's start-up failed
                # (the niceness, say), and its reason says how.
                raise _errors.InitError(
                    "gpupool.Pool(): a worker could not start, so no pool "
                    "was created: %s" % e) from e
            raise _errors.InitError(
                "gpupool.Pool(): initializer %r failed in a worker, so no "
                "pool was created: %s\n%s" % (initializer, e, why)) from e
        finally:
            report[0] = report[1] = None  # replacements never see them
            os.close(w)
            os.close(r)

    def _refuse_gpu_mem(self, need):
        """An item needing more than every GPU of the pool has (all
        totals known) could never start: each would end in an error
        (-E2BIG). Say so now, and leave nothing running."""
        totals = [g["mem_total"] for g in self._c.gpus()]
        if not totals or not all(totals) or need <= max(totals):
            return
        self._c.close()
        self._close_pipes()
        raise ValueError("gpu_mem=%.1f GiB: more than any GPU of the pool "
                         "has (%.1f GiB)" % (need / (1 << 30),
                                             max(totals) / (1 << 30)))

    def _close_pipes(self):
        wake = [] if self._wakefd is None else [self._wakefd]
        for fd in [self._pidr, self._pidw] + wake + self._keep:
            os.close(fd)
        self._keep = []
        self._wakefd = None

    def _mine(self):
        """False in a fork of the process that made the pool: there a
        call gets RuntimeError (_check_mine()), and close(), join() and
        terminate() do nothing: the copy's workers, threads and locks
        are the parent's, and a lock another thread held at the fork
        stays held here."""
        return self._pid == os.getpid()

    def _check_mine(self):
        if not self._mine():
            raise RuntimeError(
                "gpupool: this Pool belongs to process %d, which made it; "
                "this is a fork of it (process %d): make a Pool here"
                % (self._pid, os.getpid()))

    def _check_open(self):
        self._check_mine()
        if self._state != "open":
            raise ValueError("Pool not running (gpupool: the pool is %s: "
                             "no new work)" % self._state)

    def _chunksize(self, n, first=None):
        if self._timeout is not None or self._retries:
            return 1  # a timeout or a retry then concerns one item
        c, extra = divmod(n, self._size * 4)  # as multiprocessing does
        # but at most _MAX_CHUNK items: measured (2 cores, x * 2, 10^6
        # items) 62,500-item chunks ran at 7.4 M/s, 16,000 at 8.9 M/s,
        # 8,000 at 9.0 M/s (smaller pickles stay in cache, and the first
        # and last chunks, when workers wait, are shorter). Big elements,
        # judged by the first, by bytes too: measured (2 cores, 128 items
        # of 1 MiB, 3 workers) 10 MiB chunks moved 1194 MB/s, 1 MiB ones
        # 6535 MB/s (every buffer on the way stays in cache).
        cap = _MAX_CHUNK
        size = _nbytes(first)
        if size:
            cap = min(cap, max(1, _CHUNK_BYTES // size))
        return max(1, min(c + (1 if extra else 0), cap))

    # -- the API -----------------------------------------------------------

    def size(self):
        """Number of workers."""
        return self._size

    def info(self):
        """Where each worker runs: a list of WorkerInfo, with its rank and
        host (rank 0 and this host on one machine). The C library
        allows it only while no call runs (a call replaces dead workers),
        so this waits for a running map to end."""
        self._check_mine()
        self._acquire_runner()
        try:
            info = self._c.info()
        finally:
            self._release_runner()
        host = socket.gethostname()
        for d in info:
            d.setdefault("rank", 0)  # a Cluster's name their rank
            d.setdefault("host", host)
        return [WorkerInfo(d) for d in info]

    def gpus(self):
        """Each GPU of the pool as last seen: a list of GpuState. The
        monitor samples while a call runs (and once at creation), so
        between calls this is the state at the end of the last one. As
        info(), this waits for a running call to end."""
        self._check_mine()
        self._acquire_runner()
        try:
            return [GpuState(d) for d in self._c.gpus()]
        finally:
            self._release_runner()

    @property
    def monitor(self):
        """None while NVML watches the GPUs (in the monitor child), else
        why not: "no NVML: libnvidia-ml.so.1: cannot open shared object
        file ...", or the monitor ended. Waits for a running call to end,
        as info()."""
        self._check_mine()
        self._acquire_runner()
        try:
            return self._c.monitor
        finally:
            self._release_runner()

    def map(self, fn, iterable, chunksize=None, *, return_exceptions=False,
            progress=False, checkpoint=None):
        """[fn(x) for x in iterable], computed by the workers, in order.

        chunksize items travel as one C item (default: automatic, as
        multiprocessing; 1 when timeout or retries is set). A failure
        raises in the caller: fn's exception as its own type with the
        worker's traceback as __cause__, WorkerCrashed, Timeout; the rest
        of the map is canceled. With return_exceptions=True the exception
        takes the item's place in the list instead, and the map goes on.
        A crash or timeout fails every item of its chunk.

        checkpoint (a path or a gpupool.Checkpoint): each chunk's outcome
        is recorded there as it ends, and a later call with the same
        path takes what was recorded instead of running it (see
        docs/python.md, Checkpoints).
        """
        self._check_open()
        _check_call(chunksize)
        # A list, tuple or range is read as it is (no copy; a range's
        # chunks travel as ranges); anything else is read into a list.
        items = (iterable if type(iterable) in (list, tuple, range)
                 else list(iterable))
        if checkpoint is not None:
            return _checkpoint.run_map(fn, items, chunksize,
                                       return_exceptions, progress,
                                       checkpoint, self._forked, self._stop,
                                       self._chunksize, self._run_job)
        if not items:
            return []
        cs = chunksize or self._chunksize(len(items), items[0])
        bar = _progress.make(progress, len(items))
        job = _jobs.MapJob(fn, items, cs, return_exceptions, bar,
                           self._forked)
        self._run_job(job, bar)
        return job.results

    def _run_job(self, job, bar):
        """Drive a map's job to its end; its first failure (or the
        pool's) raised here."""
        err = None
        try:
            self._drive(job)
        except _jobs.Abort as a:
            err = a.exc
        finally:
            if bar is not None:
                bar.close()
        if err is not None:
            raise err  # outside the except: no "during handling" noise

    def starmap(self, fn, iterable, chunksize=None, **kw):
        """map() with fn(*args) for each args in iterable."""
        return self.map(_task._Star(fn), iterable, chunksize, **kw)

    def _stream(self, fn, iterable, chunksize, ordered, return_exceptions,
                progress, window, checkpoint):
        self._check_open()
        _check_call(chunksize, window)
        cs = chunksize or 1
        win = window or max(4 * self._size * cs, 2 * cs)
        bar = _progress.make(progress, None)
        if checkpoint is None:
            job = _jobs.StreamJob(fn, iterable, cs, win, ordered,
                                  return_exceptions, bar, self._forked,
                                  self._interrupt)
        else:
            job = _checkpoint.stream_job(fn, iterable, cs, win, ordered,
                                         return_exceptions, bar, checkpoint,
                                         self._forked, self._interrupt,
                                         self._stop)
        t = _threads.thread(self._stream_driver, "gpupool-imap", (job,))
        with self._lk:
            self._helpers[t] = job
        _threads.start(t)
        return job.results()

    def _stream_driver(self, job):
        err = None
        try:
            while True:
                self._drive(job)
                if not job.wait_for_room(self._stop):
                    break
        except _jobs.Abort as a:
            err = a.exc
        except BaseException as e:
            err = e
        finally:
            if err is None and self._stop.is_set():
                err = _errors.Canceled("the pool was terminated")
            elif err is None and job.canceled:  # the with block ended it
                err = _errors.Canceled("imap was stopped")
            job.end(err)
            with self._lk:
                self._helpers.pop(threading.current_thread(), None)
                self._cv.notify_all()

    def imap(self, fn, iterable, chunksize=None, *, return_exceptions=False,
             progress=False, window=None, checkpoint=None):
        """A generator of fn(x) in input order. iterable may be endless
        or a generator of unknown length: at most `window` items (default
        4 * size() * chunksize) are taken and not yet yielded, so memory
        stays bounded. chunksize defaults to 1 (pass more for tiny items).
        The input is read in the helper thread that drives the C pool:
        while the input blocks (a slow dataset), no result is collected.
        Failures as map(): raised when reached (return_exceptions=True:
        yielded). Leaving the loop early cancels the rest. checkpoint: as
        map()'s (a position's recorded results come as the input reaches
        it; the file is synced and released when the stream ends)."""
        return self._stream(fn, iterable, chunksize, True,
                            return_exceptions, progress, window, checkpoint)

    def imap_unordered(self, fn, iterable, chunksize=None, *,
                       return_exceptions=False, progress=False,
                       window=None, checkpoint=None):
        """imap() in completion order."""
        return self._stream(fn, iterable, chunksize, False,
                            return_exceptions, progress, window, checkpoint)

    def submit(self, fn, /, *args, **kwargs):
        """Run fn(*args, **kwargs) in a worker: a concurrent.futures.Future
        (its exception, if fn raised, carries the remote traceback). If fn
        or an argument cannot be pickled, the future holds that error."""
        fut = _Future(self)
        try:
            payload = _task.dumps_chunk(_task.dumps_fn(fn, self._forked), 1,
                                        [(args, kwargs)])
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # the future always ends
            payload = _errors.pickling_failed(e)
        self._push(fut, fn, payload)
        return fut

    def _submit_chunks(self, fn, items, chunksize):
        """items (a sequence) in chunks of chunksize, each queued as one
        C item: ([futures of each chunk's outcomes], [chunk starts])."""
        try:
            fn_bytes = _task.dumps_fn(fn, self._forked)
        except Exception as e:
            fn_bytes = e
        futs, starts = [], []
        for start in range(0, len(items), chunksize):
            fut = _Future(self)
            chunk = items[start:start + chunksize]
            if isinstance(fn_bytes, Exception):
                payload = fn_bytes
            else:
                try:
                    payload = _task.dumps_chunk(fn_bytes, 0, chunk)
                except Exception as e:
                    payload = e
            self._push(fut, fn, payload, len(chunk))
            futs.append(fut)
            starts.append(start)
        return futs, starts

    # -- multiprocessing.Pool's asynchronous calls -------------------------

    def apply(self, func, args=(), kwds={}):
        """func(*args, **kwds) in a worker; its value, or its exception
        raised here."""
        return self.submit(func, *args, **kwds).result()

    def apply_async(self, func, args=(), kwds={}, callback=None,
                    error_callback=None):
        """apply() without waiting: an AsyncResult. callback(value) or
        error_callback(exception) runs in the pool's result thread."""
        return _async.ApplyResult(self._hooks(),
                                  self.submit(func, *args, **kwds),
                                  callback, error_callback)

    def map_async(self, func, iterable, chunksize=None, callback=None,
                  error_callback=None):
        """map() without waiting: an AsyncResult whose get() is the list,
        or raises the first failure (when every chunk has ended, as
        multiprocessing's)."""
        self._check_open()
        _check_call(chunksize)
        items = (iterable if type(iterable) in (list, tuple, range)
                 else list(iterable))
        cs = (chunksize or self._chunksize(len(items), items[0])
              if items else 1)
        futs, starts = self._submit_chunks(func, items, cs)
        return _async.MapResult(self._hooks(), futs, starts, len(items),
                                callback, error_callback)

    def _hooks(self):
        """What an AsyncResult calls of this pool (not the pool itself:
        it keeps none of it once ready)."""
        return _async.Hooks(self._help, self._interrupt, self._results.put)

    def starmap_async(self, func, iterable, chunksize=None, callback=None,
                      error_callback=None):
        """map_async() with func(*args) for each args in iterable."""
        return self.map_async(_task._Star(func), iterable, chunksize, callback,
                              error_callback)

    def close(self):
        """No new work; what is queued or running goes on (and the
        callbacks of what ends). join() waits for it."""
        if not self._mine():
            return
        with self._lk:
            if self._state == "open":
                self._state = "closed"
            self._cv.notify_all()

    def join(self):
        """Wait for queued and running work (submits, imap generators
        still being read), then stop the workers and reap them. Call
        close() or terminate() first."""
        if not self._mine():
            return
        if self._state == "open":
            raise ValueError("gpupool: close() or terminate() the pool "
                             "before join()")
        if self._own_thread():  # a done callback: see _hand_over()
            return self._hand_over(self.join)
        with self._lk:
            while self._dispatcher is not None or self._helpers:
                self._cv.wait()
        self._acquire_runner()
        try:
            if self._state != "joined":
                self._state = "joined"
                self._c.close()
                self._close_pipes()
                _exit.forget(self)
        finally:
            self._release_runner()
        self._results.stop()

    def terminate(self):
        """Cancel queued work (its futures raise Canceled) and running
        work, stop the workers now and reap them."""
        if not self._mine():
            return
        with self._lk:
            if self._state == "joined":
                return
            self._state = "terminating"
            self._stop.set()
            queued = self._subq.take()
            busy = self._inflight > 0
            self._cv.notify_all()
        _jobs.cancel(queued)
        if self._own_thread():  # a done callback: see _hand_over()
            return self._hand_over(self.terminate)
        me = threading.get_ident()
        with self._lk:
            while busy and (self._dispatcher is not None or self._helpers
                            or self._owner not in (None, me)):
                # Kill again until the call in the other thread ends: the
                # C pool may run a killed worker's item again on its
                # replacement (an item it counts as never started). The
                # wait's timeout paces the kills; it synchronises nothing.
                self._cv.release()
                try:
                    self._kill_workers()
                finally:
                    self._cv.acquire()
                self._cv.wait(0.2)
                busy = self._inflight > 0
        self.join()

    def _cancel_streams(self):
        """Leaving the with block ends the imap generators not read to
        their end: join() would otherwise wait for a reader that may never
        come (their window is full)."""
        with self._lk:
            jobs = list(self._helpers.values())
        for job in jobs:
            with job.cv:
                job.canceled = True
                job.cv.notify_all()

    def _kill_workers(self):
        """Items are in flight: SIGKILL the workers (only our own
        children, checked in /proc) so that an item ends and the call sees
        the stop at its next callback, even if every item hangs. Known
        gap: an item the C pool retries on its own (retries=) goes to a
        replacement whose pid may not be known here yet; terminate() then
        waits for that attempt to end (or time out)."""
        import signal
        me = os.getpid()
        while True:
            try:
                b = os.read(self._pidr, 4096)
            except OSError:
                break
            if not b:
                break
            for i in range(0, len(b) - 3, 4):
                self._all_pids.add(int.from_bytes(b[i:i + 4], "little"))
        for pid in set(self._pids) | self._all_pids:
            try:
                with open("/proc/%d/stat" % pid) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                if pid > 0 and ppid == me:
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError, IndexError):
                pass

    def _at_exit(self):
        """At interpreter exit (_exit.python_exit()): as leaving a with
        block, what was submitted still runs. Not in a fork (invariant
        75): a multiprocessing child runs this hook too."""
        if self._mine() and self._state != "joined":
            self.close()
            self._cancel_streams()
            self._cancel_streams_call()
            self.join()

    def __enter__(self):
        if self._state != "open":
            raise ValueError("Pool not running")
        return self

    def __reduce__(self):
        raise NotImplementedError("pool objects cannot be passed between "
                                  "processes or pickled")

    def __exit__(self, exc_type, exc, tb):
        """Leaving the block normally: close() and join() (queued futures
        complete). On an exception (KeyboardInterrupt included):
        terminate()."""
        if not self._mine():
            return False
        if exc_type is None:
            self.close()
            self._cancel_streams()
            self._cancel_streams_call()
            self.join()
        else:
            self.terminate()
        return False


pool_signature(Pool)  # the pool options by name, from the library's rows
