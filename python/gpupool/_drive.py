"""Who runs the C pool: the runner lock and the one C call at a time that
serves a job and the submit queue (Pool._drive()), the dispatcher thread
that drives the queue when no other call runs, and a submit's future,
which drives it in the waiting thread (see _pool.py's docstring)."""

import os
import sys
import threading
import time
from concurrent.futures import Future
from concurrent.futures import _base

from . import _errors
from . import _exit
from . import _gpupool
from . import _jobs
from . import _threads

# How long a submit may wait before the dispatcher thread drives it when
# no thread has offered to (see Driver._push); also how often a
# dispatcher wakes while submits come, before it sleeps until one does.
KICK_S = 0.001

# A future's states that are final (Future.done()).
_ENDED = frozenset((_base.CANCELLED, _base.CANCELLED_AND_NOTIFIED,
                    _base.FINISHED))


class Driver:
    """Pool's methods that drive the C pool (self._c) under
    self._runner."""

    _lost = False  # every worker is gone: the pool can run nothing more
    _driving = None  # the job of the C call running, under self._cv
    _parked = False  # that call waits for a submit (self._wakefd wakes it)
    _shared = False  # a helping call took another's submit: no more helping
    _wakefd = None  # wakes a parked call (_Call.next_item); _driver_init

    def _driver_init(self):
        """The driving state, made by Pool.__init__ once the C pool is
        up (_Call reads it: it is this file's)."""
        # Made once the workers are up: none of them holds it.
        self._wakefd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._lk = threading.RLock()  # the pool's lock: with self._lk (a
        # C call), not with self._cv (a Python one)
        self._cv = threading.Condition(self._lk)
        self._runner = threading.Lock()
        self._owner = None  # the thread holding the runner
        self._waiting = 0
        self._subq = _jobs.SubmitQueue()
        self._sub_inflight = set()  # submits' futures sent, not yet done
        self._dispatcher = None
        self._kick = None    # when the dispatcher drives what is queued
        self._pushes = 0     # submits queued so far (the dispatcher's nap)
        self._asleep = False  # the dispatcher waits for a submit, untimed
        self._inflight = 0     # items sent and not yet done
        self._refresh = False  # self._pids may miss a replacement

    def _gone(self):
        """What a call on a pool that lost every worker raises, and each
        of its items that never ran holds."""
        return _errors.NotRun(
            "gpupool: the item never ran: every worker of the pool is "
            "gone. Workers died (a crash, a timeout, a kill) and none "
            "could be replaced: the respawn budget (64 replacements per "
            "worker over the pool's life) is spent, or a replacement "
            "failed while it started (its initializer raised, say). This "
            "pool can run nothing more: make a new Pool")

    def _own_thread(self):
        """This thread is one that join() waits for: the dispatcher, an
        imap's helper, or the thread in a C call. A done callback of a
        future runs in it (the thread that ended the future)."""
        t = threading.current_thread()
        return (t is self._dispatcher or t in self._helpers or
                self._owner == t.ident)

    def _hand_over(self, stop):
        """join() or terminate() called in a thread it would wait for (a
        future's done callback runs in the thread that ended the future:
        the dispatcher, an imap's helper, the thread in a C call): stop()
        goes on in a thread of its own, and this one returns, sees the
        stop once the callback returns, and ends. (CPython raises
        RuntimeError("cannot join current thread") there.) At interpreter
        exit the main thread joins every pool already."""
        if _exit.exiting or sys.is_finalizing():
            return
        try:
            _threads.start(_threads.thread(stop, "gpupool-stop"))
        except RuntimeError:  # the interpreter is shutting down: as above
            pass

    def _acquire_runner(self):
        if self._owner == threading.get_ident():
            raise RuntimeError("gpupool: a map on this pool was started "
                               "from inside one of its own callbacks")
        with self._lk:
            self._waiting += 1
        try:
            self._runner.acquire()
        finally:
            with self._lk:
                self._waiting -= 1
        self._owner = threading.get_ident()

    def _release_runner(self):
        self._owner = None
        self._runner.release()
        with self._lk:
            if self._subq.q or self._waiting:
                self._cv.notify_all()  # a dispatcher that gave way goes on

    def _drive(self, job, serve_submits=True, locked=False, until=None,
               mine=(), one=False):
        """One C call over job (None: submits only) and the submit queue,
        in this thread (its callbacks: _Call). Returns when job has
        nothing more to send now and the items in flight have ended;
        raises what the call raised, or the job's end (an Abort: its
        first failure, or its reader gone). locked: the caller holds the
        runner lock already (it is released here all the same). until:
        with job None, a waiter's done(): the call ends once it is true
        and its items in flight have ended (None: once nothing is queued
        or in flight); mine: that waiter's futures; one: theirs is the
        one call queued (_One)."""
        call = (_One(self, until, mine) if one else
                _Call(self, job, serve_submits, until, mine))
        if not locked:
            self._acquire_runner()
        try:
            with self._lk:
                self._driving = job
                self._kick = None  # this call serves what is queued
            self._check_usable()
            lost = self._lost
            if not lost:
                try:
                    if job is None:  # parks for submits: see next_item
                        self._c.run(call.next_item, call.done,
                                    ctl=call.woken, ctl_fd=self._wakefd,
                                    ctl_keep=True)
                    else:
                        self._c.run(call.next_item, call.done)
                except _gpupool.NoWorkerError:
                    lost = self._lost = True
            if lost:
                call.not_run()
        except BaseException as e:
            call.fail_submits(e)
            raise
        finally:
            with self._lk:
                self._inflight = 0
                self._driving = None
                self._parked = False
            # A worker's pid changes only when it is replaced: after a
            # crash or timeout, or after max_tasks_per_worker items.
            if self._refresh or self._max_tasks:
                self._refresh_pids()
            self._release_runner()
        if call.ended is not None:
            raise call.ended

    def _push(self, fut, fn, payload, n=None):
        """Queue one call or chunk (a pickle) for the dispatcher; payload
        an exception instead: fut fails with it at once."""
        with self._lk:
            if _exit.exiting:
                raise RuntimeError("cannot schedule new futures after "
                                   "interpreter shutdown")
            self._check_open()
            if isinstance(payload, BaseException):
                fut.set_exception(payload)
                return
            self._subq.push(fut, fn, payload, n)
            self._pushes += 1
            if self._parked:  # the C call waits for submits: this one
                self._parked = False
                os.eventfd_write(self._wakefd, 1)
            # No C call runs: the submitter's result() most likely drives
            # this one (_help), and waking the dispatcher for it would
            # cost each round trip two thread switches. It drives what
            # nobody has driven within KICK_S (futures awaited by
            # concurrent.futures.wait(), as_completed()); _nudge() asks
            # it at once.
            if (self._owner is None and not self._waiting and
                    self._kick is None):
                self._kick = time.monotonic() + KICK_S
            if self._dispatcher is None:
                self._dispatcher = _threads.thread(self._dispatch,
                                                   "gpupool-submit")
                _threads.start(self._dispatcher)
            elif self._asleep:
                self._cv.notify_all()

    def _nudge(self):
        """Whatever is queued is driven now by the dispatcher, not after
        KICK_S: nobody waiting on it will drive it (a wait with a timeout,
        a done callback, a result() that declined to help)."""
        with self._lk:
            if self._subq.q:
                self._kick = None
                self._cv.notify_all()

    def _help(self, until, mine, drive=True):
        """A wait without a timeout on a submitted call (Future.result(),
        AsyncResult.get(); until: its done(), mine: its futures; drive
        False: a wait with a timeout, or a callback, which drive nothing
        and only _nudge()): when no
        call runs, drive the submit queue in this thread, rather than
        waiting for the dispatcher thread to wake and do it (one thread
        hop each way less a round trip), until that call is done. Whoever
        takes the runner lock first drives; the other finds the queue
        served.

        Only where this cannot hold anyone up: the queue holds nothing but
        the waiter's own calls, and no thread but gpupool's own could
        submit meanwhile. Otherwise this thread would take others' calls
        and then wait for them, past its own (and a call of theirs may
        wait for this thread). A submit that comes all the same (from a
        callback) starts at once, and the pool leaves the queue to the
        dispatcher from then on (self._shared). Declining, it asks the
        dispatcher to drive now (_nudge), where no call runs."""
        me = threading.get_ident()
        if self._owner == me or not self._subq.q:
            return
        if not drive or self._shared or not _threads.alone():
            return self._nudge()
        if not self._runner.acquire(blocking=False):
            return  # its holder serves the queue, or its release wakes
        self._owner = me
        with self._lk:
            q = self._subq.q
            one = len(q) == 1 and len(mine) == 1 and q[0][0] is mine[0]
            only = one or self._subq.only(mine)
        if not only:
            with self._lk:
                self._kick = None  # the dispatcher drives at our release
            self._release_runner()
            return
        try:
            self._drive(None, locked=True, until=until, mine=mine, one=one)
        except _jobs.Abort:
            pass
        except Exception as e:  # the pool failed: fail the rest
            with self._lk:
                futs = self._subq.take()
            _jobs.fail(futs, e)

    def _refresh_pids(self):
        """The workers' pids, for terminate() to kill while a call runs in
        another thread (info() is not allowed then). In the driving thread
        only. Kept marked stale while a dead worker is not yet replaced
        (pid 0)."""
        try:
            pids = [i["pid"] for i in self._c.info()]
        except Exception:
            return
        self._pids = pids
        self._refresh = 0 in pids

    def _check_stop(self):
        """In a C call's next() or done(): terminate() ends the call."""
        if self._stop.is_set():
            raise _jobs.Abort(_errors.Canceled("the pool was terminated"))

    def _check_usable(self):
        if self._state == "joined":
            raise ValueError("gpupool: the pool is closed and joined")
        if self._stop.is_set():
            raise _errors.Canceled("the pool was terminated")

    def _cancel_streams_call(self):
        """After _cancel_streams() (the with block or the interpreter
        ends): the C call of an imap nobody reads any more is canceled
        now, its items stopped (one may never end, and join() would wait
        for it). Not while submits it took run: they end first, and
        _drive's done() cancels it after the last."""
        with self._lk:
            job = self._driving
            if (isinstance(job, _jobs.StreamJob) and job.canceled and
                    not self._sub_inflight):
                self._c.cancel()

    def _interrupt(self):
        """Ctrl-C reached a thread waiting on this pool's results
        (result(), get(), an imap loop): queued calls are canceled
        (cancelled() is True), and the C call running, whichever thread
        drives it, is canceled now (its items stop: grace, then SIGKILL),
        as Ctrl-C during map() does."""
        with self._lk:
            futs = self._subq.take()
            running = self._owner is not None
        _jobs.cancel(futs)
        if running:
            self._c.cancel()

    def _dispatch(self):
        seen = -1
        while True:
            with self._lk:
                # Not while another thread drives (a map, or a result()
                # helping, Pool._help): that call serves the queue, and its
                # end notifies. Not before the kick (see _push) while the
                # pool is open: the submitter may drive its call itself.
                while True:
                    q = self._subq.q
                    if self._state != "open" and not q:
                        self._dispatcher = None
                        self._cv.notify_all()
                        return
                    if q and not self._waiting and self._owner is None:
                        left = (0 if self._kick is None or
                                self._state != "open" else
                                self._kick - time.monotonic())
                        if left <= 0:
                            break
                        self._cv.wait(left)
                    elif self._pushes != seen:  # submits come: nap
                        seen = self._pushes
                        self._cv.wait(KICK_S)
                    else:  # none since the last nap: until one comes
                        self._asleep = True
                        try:
                            self._cv.wait()
                        finally:
                            self._asleep = False
                self._kick = None
            try:
                self._drive(None)
            except _jobs.Abort:
                pass
            except BaseException as e:  # the pool failed: fail the rest
                with self._lk:
                    futs = self._subq.take()
                _jobs.fail(futs, e)


class _Call:
    """One C call of Driver._drive(): its next() and done(), the items in
    flight, and the end of its job (None: the call serves submits only).

    A job's end is its own: once it has failed or was stopped (an Abort
    from its next_item(), finish() or check()), it sends nothing more and
    the call takes no new submit, but the submits already taken run to
    their end (their callers are others, maybe in other threads); then
    the call is canceled, which stops the job's items still running.

    On a pool that lost every worker, each item (in flight then, or asked
    for since) ends NOTRUN at once, with a NotRun saying why (not_run()),
    so that every call keeps what was computed and fails fast."""

    def __init__(self, pool, job, serve_submits, until=None, mine=()):
        self.pool = pool
        self.job = job
        self.serve_submits = serve_submits
        self.until = until  # a helping call's: see Driver._help()
        self.mine = {id(f) for f in mine}
        self.subs = pool._sub_inflight  # submits' futures in flight
        self.flying = {}  # id(key) -> key: every item sent, not yet done
        self.ended = None  # the job's Abort, once it has ended

    def end_job(self, a):
        if self.ended is None:
            self.ended = a
        if not self.subs:
            raise self.ended

    def job_call(self, method, *args):
        """The job's next_item(), finish() or check(): what it raises ends
        the job, not the call."""
        try:
            return method(*args)
        except _jobs.Abort as a:
            self.end_job(a)
        except Exception as e:
            self.end_job(_jobs.Abort(e))
        return None

    def send(self, key, data):
        """Count an item in flight, unless terminate() came first: under
        the pool's lock, so that terminate() sees either no item sent
        after its stop or the count of those that were."""
        p = self.pool
        with p._lk:
            p._check_stop()
            p._inflight += 1
        self.flying[id(key)] = key
        return key, data

    def next_item(self):
        p, job = self.pool, self.job
        if p._refresh:
            p._refresh_pids()
        if self.serve_submits:
            with p._lk:  # as send(), with the pop in the same hold
                p._check_stop()
                if job is not None and self.ended is None:
                    # Under the lock, as _cancel_streams_call() looks.
                    self.job_call(job.check)
                if self.ended is not None:
                    return None
                if job is None and p._waiting:
                    return None  # the dispatcher gives way
                s = p._subq.next_item()
                if s is not None:
                    if (self.until is not None and
                            id(s[0][0]) not in self.mine):
                        p._shared = True  # see Driver._help()
                    return self.take(s)
                if (job is None and self.flying and
                        (self.until is None or not self.until())):
                    # Nothing queued, items running: park (...: ask
                    # again when one ends or woken() runs), as ending
                    # the call would hold every later submit until they
                    # all end, idle workers or not. _push() wakes it.
                    p._parked = True
                    return ...
        if job is None or self.ended is not None:
            return None
        j = self.job_call(job.next_item)
        return None if j is None else self.send((job, j[0]), j[1])

    def take(self, s):
        """A submit off the queue, under the pool's lock: counted in
        flight, its future among the call's, its item sent."""
        self.pool._inflight += 1
        self.subs.add(s[0][0])
        key = (None, s[0])
        self.flying[id(key)] = key
        return key, s[1]

    def done(self, key, status, code, out):
        p, job = self.pool, self.job
        with p._lk:
            p._inflight -= 1
        self.flying.pop(id(key), None)
        if status in (_gpupool.CRASHED, _gpupool.TIMEDOUT):
            p._refresh = True  # a replacement has a new pid
        src, k = key
        if src is None:
            self.subs.discard(k[0])
            _jobs.SubmitQueue.finish(k, status, code, out)
            if job is not None and self.ended is None:
                self.job_call(job.check)  # its reader left meanwhile
        elif self.ended is None:
            self.job_call(src.finish, k, status, code, out)
        p._check_stop()
        if self.ended is not None and not self.subs:
            raise self.ended  # the job's items still running stop

    def woken(self):
        """The C call's ctl: _push() woke the parked call; next_item()
        runs again after this returns."""
        try:
            os.eventfd_read(self.pool._wakefd)
        except BlockingIOError:  # another wake read it first
            pass

    def not_run(self):
        """run() on a pool that lost every worker: each item in flight
        when the library said so (it calls no done() for them), then each
        item next() gives, ends at once as NOTRUN, as the library ends
        an item it could not run, its out the NotRun that says why."""
        for key in list(self.flying.values()):
            self.done(key, _gpupool.NOTRUN, 0, self.pool._gone())
        while True:
            item = self.next_item()
            if item is None:
                return
            self.done(item[0], _gpupool.NOTRUN, 0, self.pool._gone())

    def fail_submits(self, e):
        """The call ended without done() for its items in flight (the
        pool was terminated, Ctrl-C; never the job's end alone): their
        futures fail too."""
        exc = e
        if not isinstance(e, Exception):
            exc = _errors.Canceled("the C call that ran it ended early "
                                   "(%r)" % (getattr(e, "exc", e),))
        for fut in list(self.subs):
            if not fut.done():
                fut.set_exception(exc)
        self.subs.clear()


class _One(_Call):
    """A helping wait's call while the queue holds its one submit and
    nothing else (Driver._help; a submit-then-result() loop): _Call's
    rules in fewer steps. The first next_item() sends that submit, the
    next ones park until it ends, then the call ends. A submit that comes
    meanwhile (_push() wakes the parked call) is served as _Call serves
    it."""

    def __init__(self, pool, until, mine):
        super().__init__(pool, None, True, until, mine)
        self.sent = False

    def next_item(self):
        p = self.pool
        if self.sent and not p._subq.q:
            if not self.flying:
                return None
            with p._lk:
                if not p._subq.q:
                    p._parked = True  # _One: as _Call parks
                    return ...
        if self.sent:
            return _Call.next_item(self)
        if p._refresh:
            p._refresh_pids()
        with p._lk:
            p._check_stop()
            if p._waiting:
                return None  # as _Call: the thread that waits serves it
            s = p._subq.next_item()
            if s is None:  # canceled meanwhile
                return None
            self.sent = True
            return self.take(s)


class _Future(Future):
    """Pool.submit's future: result() and exception() without a timeout
    first offer to drive the pool in the calling thread (Pool._help);
    Ctrl-C while they wait stops the pool's work (Pool._interrupt)."""

    def __init__(self, pool):
        super().__init__()
        self._gp_pool = pool

    def done(self):
        """As Future's, without its lock: one read of a state that only
        moves forward (a round trip asks it twice)."""
        return self._state in _ENDED

    def _waiting(self, wait, timeout):
        try:
            if self._state not in _ENDED:
                self._gp_pool._help(self.done, (self,), timeout is None)
            return wait(timeout)
        except KeyboardInterrupt:
            self._gp_pool._interrupt()
            raise

    def result(self, timeout=None):
        return self._waiting(super().result, timeout)

    def exception(self, timeout=None):
        return self._waiting(super().exception, timeout)

    def add_done_callback(self, fn):
        """As Future's; the call starts now (Driver._nudge) if no
        thread drives the pool: a callback drives nothing."""
        super().add_done_callback(fn)
        if not self.done():
            self._gp_pool._nudge()
