/*
 * _gpupool.c: gpupool._gpupool, a thin CPython wrapper of libgpupool (the
 * static library, linked in: the installed package needs no
 * libgpupool.so). The caller's side: Pool(), run(), info(),
 * close(); the worker's side is in _worker.c, big objects in _buf.c.
 *
 * Rules it keeps:
 * - The GIL is released around every library call that waits
 *   (gp_pool_create, gp_pool_run, gp_pool_destroy), so other
 *   threads of the caller run meanwhile. Forks made inside those calls
 *   take it back for CPython's fork protocol (gpy_fork_hook).
 * - Ctrl-C: while a run waits in the main thread, Python's wakeup fd
 *   (signal.set_wakeup_fd, the old one restored after) is the write end
 *   of a pipe of the pool's, the feed's ctl_fd, so any signal with a
 *   Python handler wakes the library up: ctl() runs the handlers at once;
 *   if one raises, the run is canceled (GP_CTL_CANCEL) and the exception
 *   propagates once it ended; else the run goes on undisturbed.
 *   In other threads there is no wakeup fd: Python runs signal handlers
 *   in the main thread only.
 * - Waits for claims (host-wide: gp_pool_create() waits its turn for the
 *   pool's GPUs, claim() for its own) run with the same wakeup fd, the
 *   write end of a cancel pipe the library's wait watches: a signal ends
 *   the wait, its handlers run; one that raises (Ctrl-C) propagates, and
 *   if none did, the wait begins again (at the back of the queue).
 * - One map or run at a time per pool (RuntimeError otherwise, the
 *   library's -EBUSY rule); close() refuses while one runs.
 * - No child is left: close() (also __exit__, dealloc, and at interpreter
 *   exit for pools never closed) destroys the pool, which reaps every
 *   worker. A pool is usable only in the process that created it.
 * - Pools must be created while no other thread of the caller could hold
 *   a lock the workers need (the library's rule: create pools from a
 *   single-threaded process); replacements forked during a map run the
 *   fork protocol, so CPython's own locks are safe there.
 */
#include "_gpupool.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

PyObject	*gpy_InitError;
PyObject	*gpy_NoWorkerError;

/* Pools not closed yet, destroyed at interpreter exit (Py_AtExit: after
 * finalisation, which may never deallocate them). Changed with the GIL. */
#define MAX_LIVE	1024
static PoolObject	*live[MAX_LIVE];

static void
live_add(PoolObject *self)
{
	int	 i;

	for (i = 0; i < MAX_LIVE; i++)
		if (live[i] == NULL) {
			live[i] = self;
			return;
		}
}

static void
live_del(PoolObject *self)
{
	int	 i;

	for (i = 0; i < MAX_LIVE; i++)
		if (live[i] == self)
			live[i] = NULL;
}

static void
close_fds(PoolObject *self)
{
	int	 i;

	for (i = 0; i < 2; i++) {
		if (self->cancel[i] >= 0)
			(void)close(self->cancel[i]);
		if (self->sig[i] >= 0)
			(void)close(self->sig[i]);
		if (self->initerr[i] >= 0)
			(void)close(self->initerr[i]);
		self->cancel[i] = self->sig[i] = self->initerr[i] = -1;
	}
	if (self->epfd >= 0)
		(void)close(self->epfd);
	if (self->tfd >= 0)
		(void)close(self->tfd);
	self->epfd = self->tfd = self->kept_fd = -1;
}

/* Destroy the C pool. No Python runs, so the GIL may be released around
 * it; its caller took the pool off live[] before, with the GIL. */
static void
destroy(PoolObject *self)
{
	struct gp_pool	*p = self->pool;

	self->pool = NULL;
	gp_pool_destroy(p);
	close_fds(self);
}

/* Py_AtExit: Python is finalised, no other thread runs Python. */
static void
destroy_all(void)
{
	int	 i;

	for (i = 0; i < MAX_LIVE; i++)
		if (live[i] != NULL) {
			if (live[i]->pool != NULL)
				destroy(live[i]);
			live[i] = NULL;
		}
}

/* Raise for a library error code: -EINVAL ValueError, -EBUSY
 * RuntimeError, GP_ENOWORKER NoWorkerError (a RuntimeError), -ENOMEM
 * MemoryError, GP_EINIT InitError, GP_ECLAIM TimeoutError (GPUs not
 * claimed in claim_timeout), others OSError;
 * with msg (errbuf) when there is one. */
PyObject *
gpy_raise_code(int rc, const char *msg)
{
	const char	*text = (msg && *msg) ? msg : gp_strerror(rc);
	PyObject	*a;

	if (rc == -ENOMEM)
		return PyErr_NoMemory();
	if (rc == -EINVAL)
		PyErr_SetString(PyExc_ValueError, text);
	else if (rc == -EBUSY || rc == GP_EPLAN)
		PyErr_SetString(PyExc_RuntimeError, text);
	else if (rc == GP_ENOWORKER)
		PyErr_SetString(gpy_NoWorkerError, text);
	else if (rc == GP_EINIT)
		PyErr_SetString(gpy_InitError, text);
	else if ((a = Py_BuildValue("(is)", rc == GP_ENOGPU ? ENODEV :
	    rc == GP_ECLAIM ? ETIMEDOUT : -rc, text)) != NULL) {
		PyErr_SetObject(PyExc_OSError, a);
		Py_DECREF(a);
	}
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Pool() */

/* max_msg: None (or absent) for the library's own limit, the machine's
 * memory; else a number of bytes, 1 or more. 0, or -1 with a ValueError
 * naming it. */
static int
opt_max_msg(PyObject *o, size_t *out)
{
	size_t	 v;

	if (o == NULL || o == Py_None)
		return 0;
	v = PyBool_Check(o) || !PyLong_Check(o) ? 0 : PyLong_AsSize_t(o);
	if (PyErr_Occurred() || v == 0) {
		PyErr_Clear();
		PyErr_Format(PyExc_ValueError, "max_msg=%R: must be a number "
		    "of bytes, 1 or more, or None (the machine's memory)", o);
		return -1;
	}
	*out = v;
	return 0;
}

static int
pipes(PoolObject *self)
{
	if (pipe2(self->cancel, O_CLOEXEC | O_NONBLOCK) < 0 ||
	    pipe2(self->sig, O_CLOEXEC | O_NONBLOCK) < 0 ||
	    pipe2(self->initerr, O_CLOEXEC | O_NONBLOCK) < 0) {
		PyErr_SetFromErrno(PyExc_OSError);
		return -1;
	}
	return 0;
}

/* After GP_EINIT: errbuf plus the first worker's exception text. */
static void
init_failed(PoolObject *self, const char *err)
{
	char		 buf[1100];
	ssize_t		 n;

	n = read(self->initerr[0], buf, sizeof(buf) - 1);
	buf[n > 0 ? n : 0] = '\0';
	if (n > 0)
		PyErr_Format(gpy_InitError, "%s: %s", err, buf);
	else
		PyErr_SetString(gpy_InitError, *err ? err : gp_strerror(GP_EINIT));
}

/* The flags every pool of this module has: the cancel pipe, threads
 * fitted to the CPUs, and the monitor, as gpupool-run asks for it
 * (without NVML it costs a fork and a failed dlopen, and gpus() has
 * figures with it); a plan (plan=True: which GPUs, where each worker
 * would go) needs the monitor only to tell free GPUs from busy ones. */
static void
flags(struct gpy_args *a)
{
	a->o.flags |= GP_POOL_CANCEL_FD | GP_POOL_FIT_THREADS;
	if (!a->plan || (a->o.flags & GP_POOL_GPUS_FREE))
		a->o.flags |= GP_POOL_MONITOR;
	if (a->plan)
		a->o.flags |= GP_POOL_PLAN_ONLY;
}

static int
Pool_init(PoolObject *self, PyObject *args, PyObject *kw)
{
	struct gpy_args		 a = { .init = Py_None, .o.per_gpu = 1 };
	struct gp_pool		*p;
	struct gpy_spawn	 sp;
	PyObject		*old;
	char			 err[512];
	int			 rc = 0, came;

	if (self->pool != NULL || self->worker != NULL) {
		PyErr_SetString(PyExc_RuntimeError, "Pool already set up");
		return -1;
	}
	if (gpy_args_parse(args, kw, &a) < 0)
		goto fail;
	if (!PyCallable_Check(a.worker) || (a.init != Py_None &&
	    !PyCallable_Check(a.init))) {
		PyErr_SetString(PyExc_TypeError, "worker and init must be "
		    "callable (init may be None)");
		goto fail;
	}
	if (gpy_fake_gpus(&a) < 0)
		goto fail;
	if (opt_max_msg(a.maxm, &a.o.max_msg) < 0 || pipes(self) < 0)
		goto fail;
	Py_INCREF(a.worker);
	Py_INCREF(a.init);
	self->worker = a.worker;
	self->init = a.init;
	self->view = a.view;
	a.o.init = gpy_worker_init;
	a.o.fini = gpy_worker_fini;
	a.o.init_arg = self;
	a.o.fork_hook = gpy_fork_hook;
	a.o.fork_arg = self;
	flags(&a);
	a.o.cancel_fd = self->cancel[0];
	a.o.errbuf = err;
	a.o.errlen = sizeof(err);
	gpy_own(self);
	if (gpy_spawn_opts(self, a.spec, &sp, &a.o) < 0) {
		gpy_spawn_release(&sp);
		close_fds(self);
		goto fail;
	}
	do {
		if (gpy_wait_begin(self->cancel, &old) < 0) {
			came = -1;
			break;
		}
		Py_BEGIN_ALLOW_THREADS
		rc = gp_pool_create(&p, &a.o);
		Py_END_ALLOW_THREADS
		if ((came = gpy_wait_end(self->cancel, old)) < 0 && rc >= 0)
			gp_pool_destroy(p);	/* Ctrl-C: no pool */
	} while (rc == GP_ECLAIM && came > 0);
	gpy_spawn_release(&sp);
	if (came < 0) {
		close_fds(self);
		goto fail;
	}
	if (rc < 0) {
		if (rc == GP_EINIT)
			init_failed(self, err);
		else
			gpy_raise_code(rc, err);
		close_fds(self);
		goto fail;
	}
	self->pool = p;
	live_add(self);
	gpy_args_release(&a);
	return 0;
fail:
	gpy_args_release(&a);
	return -1;
}

static PyObject *
Pool_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	allocfunc	 tp_alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
	PoolObject	*self = (PoolObject *)tp_alloc(type, 0);

	if (self != NULL)
		self->cancel[0] = self->cancel[1] = self->sig[0] =
		    self->sig[1] = self->initerr[0] = self->initerr[1] =
		    self->epfd = self->tfd = self->kept_fd = -1;
	return (PyObject *)self;
}

/* ------------------------------------------------------------------ */
/* size, info, close, context manager */

static PyObject *
Pool_size(PoolObject *self, PyObject *noargs)
{
	if (self->pool == NULL) {
		PyErr_SetString(PyExc_ValueError, "Pool is closed");
		return NULL;
	}
	return PyLong_FromLong(gp_pool_size(self->pool));
}

/* Whether what (info(), gpus(), monitor) may read the pool now: it is
 * open, and the library's rule holds: from the thread making calls
 * (next, done) or while none runs (a call replaces dead workers and
 * refreshes the GPUs' states). 0, or -1 with an exception set. */
static int
readable(PoolObject *self, const char *what)
{
	if (self->pool == NULL) {
		PyErr_SetString(PyExc_ValueError, "Pool is closed");
		return -1;
	}
	if (self->busy && self->busy_thread != PyThread_get_thread_ident()) {
		PyErr_Format(PyExc_RuntimeError, "%s while a map or run is in "
		    "progress on this pool in another thread", what);
		return -1;
	}
	return 0;
}

/* Worker i's place as a dict (gpy_info_dict()); NULL, maybe with no
 * exception set, on failure. */
static PyObject *
info_one(const struct gp_pool *p, int i)
{
	struct gp_worker_info	 wi;

	if (gp_pool_info(p, i, &wi) < 0)
		return NULL;
	return gpy_info_dict(&wi);
}

/* GPU i's state (struct gp_gpu_state) as a dict; NULL, maybe with no
 * exception set, on failure. */
static PyObject *
gpu_one(const struct gp_pool *p, int i)
{
	struct gp_gpu_state	 st;

	if (gp_pool_gpu_state(p, i, &st) < 0)
		return NULL;
	return Py_BuildValue("{s:i,s:s,s:s,s:O,s:O,s:s,s:i,s:K,s:K,s:K,s:i,"
	    "s:i,s:O}",
	    "gpu", st.gpu, "uuid", st.uuid, "busid", st.busid,
	    "known", st.known ? Py_True : Py_False,
	    "busy", st.busy ? Py_True : Py_False, "why", st.why,
	    "util", st.util,
	    "mem_total", (unsigned long long)st.mem_total,
	    "mem_foreign", (unsigned long long)st.mem_foreign,
	    "mem_ours", (unsigned long long)st.mem_ours,
	    "running", st.running, "nforeign", st.nforeign,
	    "held", st.held ? Py_True : Py_False);
}

/* info() and gpus(): a new list of count(pool) dicts, one(pool, i)
 * each, or NULL with an exception set. */
static PyObject *
dict_list(PoolObject *self, const char *what,
    int (*count)(const struct gp_pool *),
    PyObject *(*one)(const struct gp_pool *, int))
{
	PyObject	*list, *d;
	int		 i, n;

	if (readable(self, what) < 0)
		return NULL;
	n = count(self->pool);
	if ((list = PyList_New(n)) == NULL)
		return NULL;
	for (i = 0; i < n; i++) {
		if ((d = one(self->pool, i)) == NULL) {
			if (!PyErr_Occurred())
				PyErr_SetString(PyExc_RuntimeError, what);
			Py_DECREF(list);
			return NULL;
		}
		if (PyList_SetItem(list, i, d) < 0) {	/* d stolen */
			Py_DECREF(list);
			return NULL;
		}
	}
	return list;
}

static PyObject *
Pool_info(PoolObject *self, PyObject *noargs)
{
	return dict_list(self, "info()", gp_pool_size, info_one);
}

/* gpus(): each GPU of the pool as the master last saw it (the monitor
 * samples only while a call runs: between calls this is the state at the
 * end of the last one, or at creation). */
static PyObject *
Pool_gpus(PoolObject *self, PyObject *noargs)
{
	return dict_list(self, "gpus()", gp_pool_gpus, gpu_one);
}

/* close(): destroy the pool (every worker asked to leave, then TERM,
 * KILL, reaped), GIL released. Idempotent. */
static PyObject *
Pool_close(PoolObject *self, PyObject *noargs)
{
	if (self->busy) {
		PyErr_SetString(PyExc_RuntimeError, "close() while a map or "
		    "run is in progress on this pool");
		return NULL;
	}
	if (self->pool != NULL) {
		self->busy = 1;
		live_del(self);
		Py_BEGIN_ALLOW_THREADS
		destroy(self);
		Py_END_ALLOW_THREADS
		self->busy = 0;
	}
	Py_RETURN_NONE;
}

/* cancel(): the call in progress, in whichever thread, is canceled (its
 * items stop: grace, then SIGKILL), as a raising next() or done() of a
 * run does (_call.c's stream_fail()): a byte in the pool's cancel_fd.
 * Between calls it does nothing (the next call drains that pipe first:
 * cancel_sent, set under the GIL as every write there is). */
static PyObject *
Pool_cancel(PoolObject *self, PyObject *noargs)
{
	char	 b = 0;

	if (self->pool != NULL && self->cancel[1] >= 0) {
		(void)write(self->cancel[1], &b, 1);
		self->cancel_sent = 1;
	}
	Py_RETURN_NONE;
}

static PyObject *
Pool_enter(PoolObject *self, PyObject *noargs)
{
	Py_INCREF((PyObject *)self);
	return (PyObject *)self;
}

static PyObject *
Pool_exit(PoolObject *self, PyObject *args)
{
	PyObject	*r = Pool_close(self, NULL);

	if (r == NULL)
		return NULL;
	Py_DECREF(r);
	Py_RETURN_FALSE;
}

/* A heap type: each Pool holds a reference to its type (tp_alloc took
 * one), given back here, also for a subclass's (whose dealloc leaves it
 * to its heap-type base). */
static void
Pool_dealloc(PoolObject *self)
{
	PyTypeObject	*tp = Py_TYPE((PyObject *)self);
	freefunc	 tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);

	if (self->pool != NULL) {
		live_del(self);
		Py_BEGIN_ALLOW_THREADS
		destroy(self);
		Py_END_ALLOW_THREADS
	}
	close_fds(self);
	Py_XDECREF(self->worker);
	Py_XDECREF(self->init);
	tp_free(self);
	Py_DECREF(tp);
}

static PyMethodDef Pool_methods[] = {
	{ "run", (PyCFunction)(void (*)(void))gpy_run,
	  METH_VARARGS | METH_KEYWORDS,
	  "run(next, done, ctl=None, ctl_fd=-1, tick_ms=0): stream; "
	  "next() -> (key, bytes), ... (none now) or None (the end); "
	  "done(key, status, code, out) as each item ends; ctl() when "
	  "ctl_fd is readable or every tick_ms -> None, CTL_CANCEL or "
	  "CTL_KILL" },
	{ "size", (PyCFunction)Pool_size, METH_NOARGS, "number of workers" },
	{ "info", (PyCFunction)Pool_info, METH_NOARGS,
	  "list of dicts: where each worker runs" },
	{ "gpus", (PyCFunction)Pool_gpus, METH_NOARGS,
	  "list of dicts: each GPU's state (busy, why, memory, util)" },
	{ "close", (PyCFunction)Pool_close, METH_NOARGS,
	  "destroy the pool and reap its workers (idempotent)" },
	{ "cancel", (PyCFunction)Pool_cancel, METH_NOARGS,
	  "cancel the map or run in progress, from any thread" },
	{ "__enter__", (PyCFunction)Pool_enter, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)Pool_exit, METH_VARARGS, NULL },
	{ NULL }
};

static PyObject *
Pool_closed(PoolObject *self, void *unused)
{
	return PyBool_FromLong(self->pool == NULL);
}

/* None when NVML answers, else why the GPUs are not watched. */
static PyObject *
Pool_monitor(PoolObject *self, void *unused)
{
	const char	*why;

	if (readable(self, "monitor") < 0)
		return NULL;
	if ((why = gp_pool_monitor(self->pool)) == NULL)
		Py_RETURN_NONE;
	return PyUnicode_FromString(why);
}

static PyGetSetDef Pool_getset[] = {
	{ "closed", (getter)Pool_closed, NULL, "whether close() ran", NULL },
	{ "monitor", (getter)Pool_monitor, NULL, "None when NVML watches "
	  "the GPUs, else why not", NULL },
	{ NULL }
};

static PyType_Slot Pool_slots[] = {
	{ Py_tp_doc, (void *)"Pool(worker, *, per_gpu=1, fake_gpus=None, "
	  "timeout_ms=0, grace_ms=0, retries=0, max_tasks=0, init=None, "
	  "view=False, plan=False, **pool_options)" },
	{ Py_tp_new, (void *)Pool_new },
	{ Py_tp_init, (void *)Pool_init },
	{ Py_tp_dealloc, (void *)Pool_dealloc },
	{ Py_tp_methods, Pool_methods },
	{ Py_tp_getset, Pool_getset },
	{ 0, NULL }
};

/* A heap type (the limited API has no static ones), its attributes
 * fixed as a static type's are. */
static PyType_Spec Pool_spec = {
	.name = "gpupool._gpupool.Pool",
	.basicsize = sizeof(PoolObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE |
	    Py_TPFLAGS_IMMUTABLETYPE,
	.slots = Pool_slots,
};

/* ------------------------------------------------------------------ */
/* The module */

static PyObject *
mod_strerror(PyObject *mod, PyObject *arg)
{
	long	 code = PyLong_AsLong(arg);

	if (code == -1 && PyErr_Occurred())
		return NULL;
	return PyUnicode_FromString(gp_strerror((int)code));
}

static PyMethodDef mod_methods[] = {
	{ "current", gpy_current, METH_NOARGS,
	  "in a worker: a dict of where it runs; None in the caller" },
	{ "worker_main", gpy_worker_main, METH_NOARGS,
	  "in a process a pool exec'd (GPUPOOL_WORKER set): become that "
	  "worker; never returns" },
	{ "strerror", mod_strerror, METH_O, "text of a library error code" },
	{ "claim", (PyCFunction)(void (*)(void))gpy_claim,
	  METH_VARARGS | METH_KEYWORDS, "claim(n, *, gpus, fake_gpus, "
	  "gpu_mem, claims, claim_timeout) -> ids: wait for n GPUs' claims, "
	  "held until the process ends; CUDA_VISIBLE_DEVICES (C's) set" },
	{ "unclaim", gpy_unclaim, METH_NOARGS, "unclaim() -> whether "
	  "claim()'s GPUs were given back (RuntimeError once CUDA is loaded)" },
	{ "claims_list", gpy_claims_list, METH_VARARGS, "claims_list(dir) -> "
	  "[dict]: every claim and waiter of the claims table (dir None: as "
	  "pools find it)" },
	{ "parse_size", gpy_parse_size, METH_O, "parse_size(text) -> bytes: "
	  "a size such as '20G', as the library reads it" },
	{ "pool_options", gpy_pool_options, METH_NOARGS, "pool_options() -> "
	  "((name, py, kind, lo, hi, dflt, help), ...): the library's rows" },
	{ "frame", gpy_frame, METH_VARARGS, "frame(pickle, buffers[, alloc]) "
	  "-> one item: bytes, or alloc(n)'s writable n bytes if not None" },
	{ "unframe", gpy_unframe, METH_VARARGS, "unframe(payload, copy) -> "
	  "None (a plain pickle) or (pickle view, [buffers]): copies (bytes "
	  "or bytearray) or views of payload" },
	{ NULL }
};

static const char mod_doc[] =
"libgpupool's pool, wrapped (the package's C core).\n"
"\n"
"Pool(worker, *, per_gpu=1, fake_gpus=None, timeout_ms=0, grace_ms=0,\n"
"     retries=0, max_tasks=0, init=None, view=False, plan=False,\n"
"     **pool_options)\n"
"  worker(bytes) -> bytes runs in the workers, once per item; if it\n"
"  raises, the item ends FAILED, code 1, its traceback on stderr.\n"
"  init() runs once per worker, after os.environ got the worker's\n"
"  CUDA_VISIBLE_DEVICES etc.; if it raises, Pool() raises InitError.\n"
"  Bad options: ValueError or OSError with the library's reason.\n"
"Pool.run(next, done): next() -> (key, bytes) or None, asked when a\n"
"  worker is idle; done(key, status, code, out) as each item ends.\n"
"  If next or done raises, the run is canceled and that propagates.\n"
"  Both release the GIL while waiting; Ctrl-C cancels (main thread)\n"
"  and raises KeyboardInterrupt once the items stopped.\n"
"  pool_options: the library's rows (pool_options(): gpus, nice, ...),\n"
"  each by its Python keyword, its value as the row's kind takes it.\n"
"  view=True: worker gets a read-only memoryview of the item, valid\n"
"  only during the call; results of 64 KiB or more come as Out (the\n"
"  buffer protocol over the result's own memory, no copy).\n"
"  plan=True: fork nothing, only decide the GPUs and each worker's\n"
"  place, for info(); run() raises RuntimeError.\n"
"  A wait for the GPUs' claims (claim_timeout) ends in TimeoutError;\n"
"  Ctrl-C ends it.\n"
"Pool.cancel(): the map or run in progress (any thread) is canceled.\n"
"Pool.size(), Pool.info() -> [dict], Pool.gpus() -> [dict],\n"
"  Pool.monitor (None, or why NVML does not watch the GPUs),\n"
"  Pool.close(), with Pool(...) as p\n"
"current() -> dict in a worker, None in the caller; strerror(code);\n"
"pool_options(), parse_size(text);\n"
"claim(n, **kw) -> ids, unclaim() -> bool, claims_list(dir) -> [dict]:\n"
"  host-wide claims for a process that is not a pool;\n"
"frame(pickle, buffers), unframe(payload, copy): pickle protocol 5\n"
"  with out-of-band buffers as one item;\n"
"OK FAILED CRASHED TIMEDOUT CANCELED ERROR NOTRUN; CTL_CANCEL CTL_KILL;\n"
"InitError.";

static struct PyModuleDef mod_def = {
	PyModuleDef_HEAD_INIT,
	.m_name = "gpupool._gpupool",
	.m_doc = mod_doc,
	.m_size = -1,
	.m_methods = mod_methods,
};

PyMODINIT_FUNC PyInit__gpupool(void);

PyMODINIT_FUNC
PyInit__gpupool(void)
{
	static const struct { const char *name; int v; } k[] = {
		{ "OK", GP_OK }, { "FAILED", GP_FAILED },
		{ "CRASHED", GP_CRASHED }, { "TIMEDOUT", GP_TIMEDOUT },
		{ "CANCELED", GP_CANCELED }, { "ERROR", GP_ERROR },
		{ "NOTRUN", GP_NOTRUN }, { "CTL_CANCEL", GP_CTL_CANCEL },
		{ "CTL_KILL", GP_CTL_KILL },
	};
	static PyObject	*pool_type;
	PyObject	*m;
	size_t		 i;

	if (pool_type == NULL &&
	    (pool_type = PyType_FromSpec(&Pool_spec)) == NULL)
		return NULL;
	if (gpy_out_init() < 0 || (m = PyModule_Create(&mod_def)) == NULL)
		return NULL;
	for (i = 0; i < sizeof(k) / sizeof(k[0]); i++)
		if (PyModule_AddIntConstant(m, k[i].name, k[i].v) < 0)
			goto fail;
	if (PyModule_AddStringConstant(m, "VERSION", GP_VERSION) < 0)
		goto fail;
	gpy_InitError = PyErr_NewExceptionWithDoc("gpupool._gpupool.InitError",
	    "a worker's init failed (Pool())", PyExc_RuntimeError, NULL);
	gpy_NoWorkerError = PyErr_NewExceptionWithDoc(
	    "gpupool._gpupool.NoWorkerError", "every worker of the pool is "
	    "gone (GP_ENOWORKER)", PyExc_RuntimeError, NULL);
	if (gpy_InitError == NULL || gpy_NoWorkerError == NULL ||
	    PyModule_AddObjectRef(m, "InitError", gpy_InitError) < 0 ||
	    PyModule_AddObjectRef(m, "NoWorkerError", gpy_NoWorkerError) < 0 ||
	    PyModule_AddObjectRef(m, "Pool", pool_type) < 0 ||
	    PyModule_AddObjectRef(m, "Out", (PyObject *)gpy_OutType) < 0 ||
	    gpy_ring_add(m) < 0)
		goto fail;
	/* At most 32 such functions per process: without one, pools never
	 * closed are left to PR_SET_PDEATHSIG, which kills their workers
	 * when this process ends. */
	(void)Py_AtExit(destroy_all);
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
