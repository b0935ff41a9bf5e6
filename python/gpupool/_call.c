/*
 * _call.c: gpupool._gpupool's call that runs items: Pool.run() (through
 * gp_pool_run), with the GIL released while the library waits, and the
 * signal handling around it (the wakeup fd: see _gpupool.c's opening
 * comment for the rules). The extension has no map of its own: the
 * package's Pool.map() and everything else stream through run().
 */
#include "_gpupool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* Around a run: checks, the wakeup fd, the signals after. */

struct call {
	PyObject	*wakeup;	/* the old wakeup fd, NULL: not set */
	const int	*wake;		/* the pipe that is the wakeup fd */
};

/* How many forks this process is from the one that loaded the module
 * (a pthread_atfork child handler counts them): a pool is usable where
 * it was made, which costs no getpid() a call. */
static unsigned long	gpy_forks;
static pthread_once_t	forks_once = PTHREAD_ONCE_INIT;

static void
forked(void)
{
	gpy_forks++;
}

static void
forks_count(void)
{
	(void)pthread_atfork(NULL, NULL, forked);
}

/* The pool being made belongs to this process. */
void
gpy_own(PoolObject *self)
{
	(void)pthread_once(&forks_once, forks_count);
	self->forks = gpy_forks;
}

static int
usable(PoolObject *self)
{
	if (self->pool == NULL) {
		PyErr_SetString(PyExc_ValueError, "Pool is closed");
		return -1;
	}
	if (self->forks != gpy_forks) {
		PyErr_SetString(PyExc_RuntimeError, "Pool belongs to the "
		    "process that created it (this is a fork of it)");
		return -1;
	}
	if (self->busy) {
		PyErr_SetString(PyExc_RuntimeError, "a map or run is already "
		    "in progress on this pool (-EBUSY)");
		return -1;
	}
	return 0;
}

/* Empty a non-blocking pipe: whether it held anything. A short read
 * empties it, so an empty pipe costs one read. */
static int
drain(int fd)
{
	char	 buf[256];
	ssize_t	 n;
	int	 any = 0;

	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		any = 1;
		if ((size_t)n < sizeof(buf))
			break;
	}
	return any;
}

/* signal.set_wakeup_fd(fd), returning the old value as an object; NULL
 * with no exception when this is not the main thread. */
PyObject *
gpy_set_wakeup(PyObject *fd)
{
	PyObject	*sig, *old;

	if ((sig = PyImport_ImportModule("signal")) == NULL)
		return NULL;
	old = PyObject_CallMethod(sig, "set_wakeup_fd", "O", fd);
	Py_DECREF(sig);
	if (old == NULL && PyErr_ExceptionMatches(PyExc_ValueError))
		PyErr_Clear();	/* not the main thread */
	return old;
}

/* Before the call (usable() said yes): pending signals run first (one
 * may raise). The wake pipe is empty: call_end() drained it after the
 * last call gave the wakeup fd back. */
static int
call_begin(PoolObject *self, struct call *c, const int *wake)
{
	PyObject	*fd;

	c->wake = wake;
	if ((fd = PyLong_FromLong(wake[1])) == NULL)
		return -1;
	c->wakeup = gpy_set_wakeup(fd);
	Py_DECREF(fd);
	if (c->wakeup == NULL && PyErr_Occurred())
		return -1;
	if (self->cancel_sent) {	/* a cancel() between calls */
		(void)drain(self->cancel[0]);
		self->cancel_sent = 0;
	}
	self->busy = 1;
	self->busy_thread = PyThread_get_thread_ident();
	if (PyErr_CheckSignals() < 0) {
		self->busy = 0;
		if (c->wakeup != NULL) {
			PyObject	*e, *v, *tb, *r;

			PyErr_Fetch(&e, &v, &tb);
			r = gpy_set_wakeup(c->wakeup);
			Py_XDECREF(r);
			Py_CLEAR(c->wakeup);
			PyErr_Restore(e, v, tb);
		}
		(void)drain(wake[0]);
		return -1;
	}
	return 0;
}

/* After the call: restore the wakeup fd, then run the signal handlers.
 * Returns -1 if one raised, 1 if a signal came (the call was canceled)
 * and every handler returned, 0 if none came. */
static int
call_end(PoolObject *self, struct call *c)
{
	PyObject	*r;
	int		 came;

	self->busy = 0;
	if (c->wakeup != NULL) {
		r = gpy_set_wakeup(c->wakeup);
		Py_CLEAR(c->wakeup);
		if (r == NULL && PyErr_Occurred())
			return -1;
		Py_XDECREF(r);
	}
	came = drain(c->wake[0]);
	if (PyErr_CheckSignals() < 0)
		return -1;
	return came;
}

/* ------------------------------------------------------------------ */
/* run: streaming */

/* An item's result: bytes; None when it has none (not GP_OK). The
 * worker always replies for an item that ends GP_OK, but the library
 * keeps an empty reply as out NULL: that is b''. With view set, a big
 * result is an Out that takes over the item's out (no copy). */
static PyObject *
out_bytes(struct gp_item *it, int view)
{
	if (it->out != NULL && view && it->outlen >= GPY_VIEW_MIN)
		return gpy_out_take(it);
	if (it->out != NULL)
		return PyBytes_FromStringAndSize(it->out,
		    (Py_ssize_t)it->outlen);
	if (it->status == GP_OK)
		return PyBytes_FromStringAndSize("", 0);
	Py_RETURN_NONE;
}

struct slot {
	struct gp_item	 it;		/* first: the library's pointer */
	PyObject	*key;
	Py_buffer	 view;		/* the item's bytes, held until done */
};

struct stream {
	PoolObject	*self;
	PyObject	*next, *done;
	PyObject	*ctl;		/* run()'s ctl, or NULL */
	int		 epfd;		/* with ctl: sig[0], its fd, tick */
	int		 tfd;		/* the tick's timerfd, or -1 */
	int		 fd;		/* ctl's fd in epfd for this run, or -1 */
	int		 tick;		/* tfd armed for this run */
	PyThreadState	*ts;		/* saved while the library runs */
	PyObject	*et, *ev, *etb;	/* the first exception of next/done */
};

/* Keep the first exception; cancel the rest of the run. */
static void
stream_fail(struct stream *s)
{
	char	 b = 0;

	if (s->et == NULL)
		PyErr_Fetch(&s->et, &s->ev, &s->etb);
	else
		PyErr_Clear();
	(void)write(s->self->cancel[1], &b, 1);
	s->self->cancel_sent = 1;
}

static int
feed_next(void *arg, struct gp_item **item)
{
	struct stream	*s = arg;
	struct slot	*sl;
	PyObject	*r, *key, *data;
	int		 ret = GP_FEED_END;

	PyEval_RestoreThread(s->ts);
	if (s->et != NULL || (r = PyObject_CallNoArgs(s->next)) == NULL)
		goto out;
	if (r == Py_None)
		goto out_r;
	if (r == Py_Ellipsis) {
		ret = GP_FEED_WAIT;
		goto out_r;
	}
	/* Any C-contiguous buffer (bytes, or a view of a rank's ring). Its
	 * buffer is held until feed_done(), so a retry
	 * after a crash reads the same bytes, and a ring extent stays
	 * taken while the library may copy from it. */
	if (!PyTuple_Check(r) || !PyArg_ParseTuple(r, "OO", &key, &data) ||
	    !PyObject_CheckBuffer(data)) {
		PyErr_Clear();
		PyErr_Format(PyExc_TypeError, "next() must return (key, "
		    "bytes-like), ... or None, not %.100R", r);
		goto out_r;
	}
	/* Freed by feed_done(), which holds the GIL too. */
	if ((sl = PyMem_Malloc(sizeof(*sl))) == NULL) {
		PyErr_NoMemory();
		goto out_r;
	}
	if (PyObject_GetBuffer(data, &sl->view, PyBUF_SIMPLE) < 0) {
		PyMem_Free(sl);
		goto out_r;
	}
	Py_INCREF(key);
	sl->key = key;
	gp_item_init(&sl->it, sl->view.buf, (size_t)sl->view.len);
	*item = &sl->it;
	ret = GP_FEED_ITEM;
out_r:
	Py_DECREF(r);
out:
	if (PyErr_Occurred())
		stream_fail(s);
	s->ts = PyEval_SaveThread();
	return ret;
}

static int
feed_done(void *arg, struct gp_item *item)
{
	struct stream	*s = arg;
	struct slot	*sl = (struct slot *)item;
	PyObject	*out, *r;
	int		 ret = 0;

	PyEval_RestoreThread(s->ts);
	if (s->et == NULL) {
		out = out_bytes(item, s->self->view);
		r = out ? PyObject_CallFunction(s->done, "OiiN", sl->key,
		    item->status, item->code, out) : NULL;
		Py_XDECREF(r);
		if (r == NULL) {
			stream_fail(s);
			ret = 1;
		}
	}
	free(item->out);
	Py_DECREF(sl->key);
	PyBuffer_Release(&sl->view);
	PyMem_Free(sl);
	s->ts = PyEval_SaveThread();
	return ret;
}

/* The wakeup fd turned readable: a signal came; run its handlers now.
 * With run()'s ctl, ctl_fd is an epoll set: the wakeup fd, and ctl's fd
 * or tick, which call ctl(). */
static int
feed_ctl(void *arg)
{
	struct stream		*s = arg;
	struct epoll_event	 ev[3];
	PyObject		*r;
	uint64_t		 n;
	int			 i, k = 1, call = 0, ret = GP_CTL_GO_ON;

	if (s->ctl != NULL) {
		k = epoll_wait(s->epfd, ev, 3, 0);
		for (i = 0; i < k; i++) {
			if (ev[i].data.u32 == 2)
				(void)!read(s->tfd, &n, sizeof(n));
			call |= ev[i].data.u32 != 0;
		}
	}
	PyEval_RestoreThread(s->ts);
	(void)drain(s->self->sig[0]);
	if (PyErr_CheckSignals() < 0) {
		stream_fail(s);
		ret = GP_CTL_CANCEL;
	} else if (call && s->et == NULL) {
		if ((r = PyObject_CallNoArgs(s->ctl)) == NULL) {
			stream_fail(s);
			ret = GP_CTL_CANCEL;
		} else {
			if (PyLong_Check(r))
				ret = (int)PyLong_AsLong(r);
			if (ret != GP_CTL_CANCEL && ret != GP_CTL_KILL)
				ret = GP_CTL_GO_ON;
			Py_DECREF(r);
		}
	}
	s->ts = PyEval_SaveThread();
	return ret;
}

/* run()'s ctl: one epoll set over the wakeup fd (0), fd (1) and a tick
 * every tick_ms (2), the pool's for its life (made at its first run with
 * a ctl; a submit-per-call loop runs one per call): fd is in it for this
 * run only (the caller's; it may close it after), or with keep until the
 * pool closes or another fd is kept (the caller keeps it open that long:
 * a submit loop's wake eventfd, two system calls less a call); the tick
 * armed for this run only. 0, or -1 with an exception. */
static int
ctl_open(struct stream *s, int fd, int keep, int tick_ms)
{
	PoolObject		*self = s->self;
	struct epoll_event	 ev = { .events = EPOLLIN };
	struct itimerspec	 it = { { tick_ms / 1000,
				    (long)(tick_ms % 1000) * 1000000 },
				    { tick_ms / 1000,
				    (long)(tick_ms % 1000) * 1000000 } };

	if (self->epfd < 0) {
		if ((self->epfd = epoll_create1(EPOLL_CLOEXEC)) == -1)
			goto fail;
		ev.data.u32 = 0;
		if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, self->sig[0],
		    &ev) == -1) {
			(void)close(self->epfd);
			self->epfd = -1;
			goto fail;
		}
	}
	s->epfd = self->epfd;
	ev.data.u32 = 1;
	if (fd >= 0 && fd != self->kept_fd) {
		if (keep && self->kept_fd >= 0) {
			(void)epoll_ctl(s->epfd, EPOLL_CTL_DEL, self->kept_fd,
			    NULL);
			self->kept_fd = -1;
		}
		if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) == -1)
			goto fail;
		if (keep)
			self->kept_fd = fd;
		else
			s->fd = fd;
	}
	if (tick_ms > 0) {
		if (self->tfd < 0) {
			if ((self->tfd = timerfd_create(CLOCK_MONOTONIC,
			    TFD_CLOEXEC | TFD_NONBLOCK)) == -1)
				goto fail;
			ev.data.u32 = 2;
			if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, self->tfd,
			    &ev) == -1) {
				(void)close(self->tfd);
				self->tfd = -1;
				goto fail;
			}
		}
		s->tfd = self->tfd;
		if (timerfd_settime(s->tfd, 0, &it, NULL) == -1)
			goto fail;
		s->tick = 1;
	}
	return 0;
fail:
	PyErr_SetFromErrno(PyExc_OSError);
	return -1;
}

/* The run's fd out of the set, its tick disarmed and its expiries read
 * (the next run's ctl is not called for them). */
static void
ctl_close(struct stream *s)
{
	struct itimerspec	 off = { { 0, 0 }, { 0, 0 } };
	uint64_t		 n;

	if (s->fd >= 0)
		(void)epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->fd, NULL);
	if (s->tick) {
		(void)timerfd_settime(s->tfd, 0, &off, NULL);
		(void)!read(s->tfd, &n, sizeof(n));
	}
	s->fd = -1;
	s->tick = 0;
}

/* run(next, done, ctl=None, ctl_fd=-1, tick_ms=0, ctl_keep=False):
 * next() returns (key, bytes), None (the end, once the items in flight
 * end) or ... (nothing now: ask again after an item ends or ctl() runs);
 * done(key, status, code, out) as each ends; ctl(), when ctl_fd is
 * readable or every tick_ms, returns None (go on), CTL_CANCEL or
 * CTL_KILL. ctl_keep: ctl_fd stays watched after the run (ctl_open()). */
PyObject *
gpy_run(PoolObject *self, PyObject *args, PyObject *kw)
{
	static char	*kwlist[] = { "next", "done", "ctl", "ctl_fd",
			    "tick_ms", "ctl_keep", NULL };
	struct stream	 s = { self, NULL, NULL, NULL, -1, -1, -1, 0, NULL,
			    NULL, NULL, NULL };
	struct gp_feed	 f = { .next = feed_next, .done = feed_done,
			    .in_fd = -1, .ctl_fd = self->sig[0],
			    .ctl = feed_ctl, .arg = &s };
	struct call	 c = { NULL, NULL };
	PyObject	*ref = (PyObject *)self;
	int		 rc, sig, fd = -1, tick = 0, keep = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|Oiip:run", kwlist,
	    &s.next, &s.done, &s.ctl, &fd, &tick, &keep))
		return NULL;
	if (s.ctl == Py_None)
		s.ctl = NULL;
	if (s.ctl != NULL && !PyCallable_Check(s.ctl)) {
		PyErr_SetString(PyExc_TypeError, "ctl must be callable");
		return NULL;
	}
	if (usable(self) < 0)
		return NULL;
	if (s.ctl != NULL && ctl_open(&s, fd, keep, tick) < 0) {
		ctl_close(&s);
		return NULL;
	}
	if (s.ctl != NULL)
		f.ctl_fd = s.epfd;
	if (call_begin(self, &c, self->sig) < 0) {
		ctl_close(&s);
		return NULL;
	}
	s.ts = PyEval_SaveThread();
	rc = gp_pool_run(self->pool, gpy_worker_fn, &ref, sizeof(ref), &f);
	PyEval_RestoreThread(s.ts);
	ctl_close(&s);
	sig = call_end(self, &c);
	if (s.et != NULL) {
		/* next, done or ctl raised first: theirs is the exception. */
		if (sig < 0)
			PyErr_Clear();
		PyErr_Restore(s.et, s.ev, s.etb);
		return NULL;
	}
	if (sig < 0)
		return NULL;
	if (rc < 0)
		return gpy_raise_code(rc, NULL);
	Py_RETURN_NONE;
}
