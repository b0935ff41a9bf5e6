/*
 * _worker.c: the worker's side of gpupool._gpupool.
 *
 * A worker is a fork of the caller's interpreter, or, started clean, a
 * fresh one that gpupool._spawn hands to the library (gpy_worker_main(),
 * gpy_spawn_init(): see there); the rest is the same for both. The fork
 * hook runs
 * CPython's fork protocol around every fork the library makes for a
 * worker (the first ones and every replacement forked during a map): in
 * the parent it takes the GIL (PyGILState_Ensure) and calls
 * PyOS_BeforeFork(), then PyOS_AfterFork_Parent() and gives the GIL back;
 * in the child it calls PyOS_AfterFork_Child(), then releases the GIL
 * (PyEval_SaveThread) while the library's C code runs: the worker's
 * Python runs in the library's callbacks below (init, fn, fini), each of
 * which takes the GIL back for its call (ENTER/LEAVE), so threads the
 * worker's own code starts (a data loader, a monitor) run between items
 * too. The worker never returns into the Python frame that
 * called the library: it leaves by _exit() (the library's), so Python is
 * never finalised there; fini flushes sys.stdout and sys.stderr.
 */
#include "_gpupool.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

/* In a worker: where it runs (the library's memory, valid for the
 * worker's life). NULL in the caller. */
static const struct gp_worker_info	*self_info;

/* The fork hook's GIL state, from BEFORE to PARENT: the same thread makes
 * both calls, and two pools may fork at once from two threads. */
static __thread PyGILState_STATE	 fork_gil;

/* In a worker that started clean: what the caller's Pool object gives a
 * forked one (its worker callable, view, the initerr pipe's write end).
 * Not a Python object: only these fields are read. worker NULL
 * elsewhere. */
static PoolObject			 spawned;

/* In a worker: its Python thread state, saved while the library runs. */
static PyThreadState			*worker_ts;
#define ENTER()	PyEval_RestoreThread(worker_ts)
#define LEAVE()	(worker_ts = PyEval_SaveThread())

/* Python's sys.stdout and sys.stderr, then C's stdio. */
static void
flush_all(void)
{
	PyObject	*f;
	const char	*names[] = { "stdout", "stderr" };
	size_t		 i;

	for (i = 0; i < 2; i++) {
		if ((f = PySys_GetObject(names[i])) == NULL || f == Py_None)
			continue;
		if ((f = PyObject_CallMethod(f, "flush", NULL)) == NULL)
			PyErr_Clear();
		Py_XDECREF(f);
	}
	fflush(NULL);
}

/* In a new worker: signal.set_wakeup_fd(-1) (PySignal_SetWakeupFd() is
 * not exported by every build). The forking thread is the child's main
 * thread, as signal wants. */
static void
clear_wakeup(void)
{
	PyObject	*sig, *r = NULL;

	if ((sig = PyImport_ImportModule("signal")) != NULL)
		r = PyObject_CallMethod(sig, "set_wakeup_fd", "i", -1);
	Py_XDECREF(sig);
	Py_XDECREF(r);
	PyErr_Clear();
}

void
gpy_fork_hook(int phase, void *arg)
{
	PoolObject	*self = arg;

	switch (phase) {
	case GP_FORK_BEFORE:
		fork_gil = PyGILState_Ensure();
		/* Else the worker inherits what sys.stdout holds and writes
		 * it again when it leaves (fini flushes). */
		flush_all();
		PyOS_BeforeFork();
		break;
	case GP_FORK_PARENT:
		PyOS_AfterFork_Parent();
		PyGILState_Release(fork_gil);
		break;
	case GP_FORK_CHILD:
		/* The GIL stays taken: this thread is the worker's Python. */
		PyOS_AfterFork_Child();
		/* A replacement forked during a map inherits the caller's
		 * wakeup fd (our pipe, see _gpupool.c): a signal handler the
		 * worker's code installs must not write to it. */
		clear_wakeup();
		(void)close(self->cancel[1]);
		(void)close(self->sig[0]);
		(void)close(self->sig[1]);
		(void)close(self->initerr[0]);
		LEAVE();
		break;
	}
}

/* Set os.environ from the C environment (the library set
 * CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER with setenv() after the
 * fork; os.environ is a copy made at interpreter start-up): every
 * variable of environ that differs is set, every key environ lacks is
 * removed. */
static int
sync_environ(void)
{
	PyObject	*os, *env, *seen, *k = NULL, *v = NULL, *cur, *keys;
	Py_ssize_t	 i, n;
	char		**e, *eq;
	int		 rc = -1, same;

	if ((os = PyImport_ImportModule("os")) == NULL)
		return -1;
	env = PyObject_GetAttrString(os, "environ");
	Py_DECREF(os);
	if (env == NULL || (seen = PySet_New(NULL)) == NULL) {
		Py_XDECREF(env);
		return -1;
	}
	for (e = environ; *e != NULL; e++) {
		if ((eq = strchr(*e, '=')) == NULL || eq == *e)
			continue;
		k = PyUnicode_DecodeFSDefaultAndSize(*e, eq - *e);
		v = PyUnicode_DecodeFSDefault(eq + 1);
		if (k == NULL || v == NULL || PySet_Add(seen, k) < 0)
			goto out;
		if ((cur = PyObject_GetItem(env, k)) == NULL) {
			if (!PyErr_ExceptionMatches(PyExc_KeyError))
				goto out;
			PyErr_Clear();
		}
		same = cur != NULL && PyObject_RichCompareBool(cur, v, Py_EQ) == 1;
		Py_XDECREF(cur);
		if (!same && PyObject_SetItem(env, k, v) < 0)
			goto out;
		Py_CLEAR(k);
		Py_CLEAR(v);
	}
	if ((keys = PySequence_List(env)) == NULL)
		goto out;
	if ((n = PyList_Size(keys)) < 0) {
		Py_DECREF(keys);
		goto out;
	}
	for (i = 0; i < n; i++) {
		PyObject	*key = PyList_GetItem(keys, i);

		if (key == NULL || (PySet_Contains(seen, key) == 0 &&
		    PyObject_DelItem(env, key) < 0)) {
			Py_DECREF(keys);
			goto out;
		}
	}
	Py_DECREF(keys);
	rc = 0;
out:
	Py_XDECREF(k);
	Py_XDECREF(v);
	Py_DECREF(seen);
	Py_DECREF(env);
	return rc;
}

/* Print the pending exception to stderr (no sys.last_* kept) and flush. */
static void
print_exc(void)
{
	PyErr_PrintEx(0);
	fflush(stderr);
}

/* An exception type's name as its tp_name (which the limited API does
 * not show) says it: a static type's is module.name, a builtin's only its
 * name; a class's (a heap type) its __name__. A type another extension
 * made from a spec, whose tp_name has its module, is named without it
 * here. A new str, or NULL with an exception set. */
static PyObject *
type_name(PyObject *t)
{
	PyObject	*name, *mod, *r;

	if ((name = PyObject_GetAttrString(t, "__name__")) == NULL ||
	    (PyType_GetFlags((PyTypeObject *)t) & Py_TPFLAGS_HEAPTYPE))
		return name;
	if ((mod = PyObject_GetAttrString(t, "__module__")) == NULL) {
		Py_DECREF(name);
		return NULL;
	}
	if (PyUnicode_Check(mod) &&
	    PyUnicode_CompareWithASCIIString(mod, "builtins") != 0)
		r = PyUnicode_FromFormat("%U.%U", mod, name);
	else {
		r = name;
		Py_INCREF(r);
	}
	Py_DECREF(mod);
	Py_DECREF(name);
	return r;
}

/* init raised: send "Type: message" to the caller (one write, atomic
 * under PIPE_BUF, so workers failing at once do not mix), then print the
 * traceback here. */
static void
report_init_error(PoolObject *self)
{
	PyObject	*t, *v, *tb, *s, *tn;
	const char	*msg, *name;
	char		 buf[1024];
	int		 n;

	PyErr_Fetch(&t, &v, &tb);
	PyErr_NormalizeException(&t, &v, &tb);
	s = v ? PyObject_Str(v) : NULL;
	msg = s ? PyUnicode_AsUTF8AndSize(s, NULL) : NULL;
	if (msg == NULL) {
		PyErr_Clear();
		msg = "?";
	}
	tn = t && PyType_Check(t) ? type_name(t) : NULL;
	name = tn ? PyUnicode_AsUTF8AndSize(tn, NULL) : NULL;
	if (name == NULL) {
		PyErr_Clear();
		name = "error";
	}
	n = snprintf(buf, sizeof(buf), "%s: %s", name, msg);
	if (n > (int)sizeof(buf) - 1)
		n = sizeof(buf) - 1;
	(void)write(self->initerr[1], buf, (size_t)n + 1);
	Py_XDECREF(tn);
	Py_XDECREF(s);
	PyErr_Restore(t, v, tb);
	print_exc();
}

/*
 * First in a worker's init, forked or clean, before the caller's
 * initializer: the worker leads a process group of its own, declared to
 * the library for its whole life (gp_ctx_set_pgid()). What the
 * initializer and the items start (subprocess, multiprocessing, a shell
 * and its pipeline, their children) is in it unless it leaves it (a new
 * session or group); the master SIGKILLs the group whenever it kills the
 * worker (timeout, cancel, terminate()) or finds it gone (a crash, an
 * exit, the end of a clean QUIT: close(), max_tasks), and the worker
 * takes it down itself when its master dies (wstart.c). A group apart is
 * never the terminal's foreground one, so SIGTTOU and SIGTTIN are
 * ignored first (through the signal module, which keeps its own table):
 * under `stty tostop` its output is written, and a read of the terminal
 * fails (EIO), where either would stop the worker for good (no shell
 * continues a group it does not know). SIGPIPE and SIGXFSZ too, as
 * CPython ignores them at its start (the library reset every signal to
 * its default): a write to a closed pipe raises BrokenPipeError in the
 * item, as in multiprocessing's workers, instead of killing the worker;
 * subprocess gives them back to what it starts. 0, or -1 with an
 * exception.
 */
static int
lead_group(struct gp_ctx *ctx)
{
	PyObject	*sig, *ign, *r = NULL;
	int		 i, sigs[] = { SIGTTOU, SIGTTIN, SIGPIPE, SIGXFSZ };

	if ((sig = PyImport_ImportModule("signal")) == NULL)
		return -1;
	if ((ign = PyObject_GetAttrString(sig, "SIG_IGN")) != NULL)
		for (i = 0; i < (int)(sizeof(sigs) / sizeof(sigs[0])); i++) {
			Py_XDECREF(r);
			if ((r = PyObject_CallMethod(sig, "signal", "iO",
			    sigs[i], ign)) == NULL)
				break;
		}
	Py_XDECREF(ign);
	Py_DECREF(sig);
	if (r == NULL)
		return -1;
	Py_DECREF(r);
	if (setpgid(0, 0) < 0) {
		PyErr_SetFromErrno(PyExc_OSError);
		return -1;
	}
	gp_ctx_set_pgid(ctx, getpid());
	return 0;
}

/* The library's init in every worker: os.environ first, then the
 * caller's init, if any. arg is the Pool in this copy of memory. */
int
gpy_worker_init(struct gp_ctx *ctx, void *arg)
{
	PoolObject	*self = arg;
	PyObject	*r;

	int		 rc = 1;

	self_info = gp_ctx_info(ctx);
	ENTER();
	if (lead_group(ctx) < 0 || sync_environ() < 0)
		goto out;
	if (self->init != Py_None) {
		if ((r = PyObject_CallNoArgs(self->init)) == NULL)
			goto out;
		Py_DECREF(r);
	}
	rc = 0;
out:
	if (rc != 0)
		report_init_error(self);
	LEAVE();
	return rc;
}

/* The caller's side of a clean start: what spawn=(argv, payload, keep)
 * asks for: workers that exec argv
 * (gp_exec), their init gpy_spawn_init() with payload after its header.
 * Strings and buffers live in s until gp_pool_create() returned. */
void
gpy_spawn_release(struct gpy_spawn *s)
{
	Py_XDECREF(s->strs);
	PyMem_Free(s->argv);
	PyMem_Free(s->arg);
}

int
gpy_spawn_opts(PoolObject *self, PyObject *spec, struct gpy_spawn *s,
    struct gp_pool_opts *o)
{
	PyObject		*argv, *keep, *b;
	Py_buffer		 pl;
	Py_ssize_t		 i, n, nk;
	struct gpy_spawn_hdr	 h = { 0 };

	memset(s, 0, sizeof(*s));
	if (spec == NULL || spec == Py_None)
		return 0;
	if (!PyArg_ParseTuple(spec, "O!y*O!", &PyList_Type, &argv, &pl,
	    &PyTuple_Type, &keep))
		return -1;
	n = PyList_Size(argv);
	nk = PyTuple_Size(keep);
	if (n < 1 || nk < 0 || nk > 63 ||
	    (s->strs = PyList_New(n)) == NULL ||
	    (s->argv = PyMem_Calloc((size_t)n + 1, sizeof(char *))) == NULL ||
	    (s->arg = PyMem_Malloc(sizeof(h) + (size_t)pl.len)) == NULL) {
		PyBuffer_Release(&pl);
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_ValueError, "spawn: bad argv");
		return -1;
	}
	for (i = 0; i < n; i++) {
		if ((b = PyList_GetItem(argv, i)) == NULL ||
		    (b = PyUnicode_EncodeFSDefault(b)) == NULL) {
			PyBuffer_Release(&pl);
			return -1;
		}
		/* Held by s->strs (b stolen, also when it fails). */
		if (PyList_SetItem(s->strs, i, b) < 0 ||
		    (s->argv[i] = PyBytes_AsString(b)) == NULL) {
			PyBuffer_Release(&pl);
			return -1;
		}
	}
	for (i = 0; i < nk; i++)
		s->keep[i] = (int)PyLong_AsLong(PyTuple_GetItem(keep, i));
	s->keep[i] = self->initerr[1];
	h.len = (uint64_t)pl.len;
	h.initerr = self->initerr[1];
	h.view = self->view;
	memcpy(s->arg, &h, sizeof(h));
	memcpy(s->arg + sizeof(h), pl.buf, (size_t)pl.len);
	PyBuffer_Release(&pl);
	if (PyErr_Occurred())
		return -1;
	s->x.argv = s->argv;
	s->x.keep_fds = s->keep;
	s->x.nkeep = (int)i + 1;
	s->x.init_arglen = sizeof(h) + h.len;
	o->exec = &s->x;
	o->init = gpy_spawn_init;
	o->init_arg = s->arg;
	o->fork_hook = NULL;
	return 0;
}

/* The library's init in a worker that started clean (gp_pool_opts.exec):
 * arg is a struct gpy_spawn_hdr and its payload, which
 * gpupool._spawn.init() turns into the caller's __main__ and
 * initializer. The callable every item runs is gpupool._task's. */
int
gpy_spawn_init(struct gp_ctx *ctx, void *arg)
{
	struct gpy_spawn_hdr	 h;
	PyObject		*m, *r = NULL;
	int			 rc = 1;

	memcpy(&h, arg, sizeof(h));
	/* It crossed the exec: what the items exec must not hold it. */
	(void)fcntl(h.initerr, F_SETFD, FD_CLOEXEC);
	spawned.initerr[1] = h.initerr;
	spawned.view = h.view;
	spawned.init = Py_None;
	self_info = gp_ctx_info(ctx);
	ENTER();
	if (lead_group(ctx) < 0 || sync_environ() < 0 ||
	    (m = PyImport_ImportModule("gpupool._task")) == NULL)
		goto out;
	spawned.worker = PyObject_GetAttrString(m, "worker_entry");
	Py_DECREF(m);
	if (spawned.worker == NULL ||
	    (m = PyImport_ImportModule("gpupool._spawn")) == NULL)
		goto out;
	r = PyObject_CallMethod(m, "init", "y#", (const char *)arg + sizeof(h),
	    (Py_ssize_t)h.len);
	Py_DECREF(m);
	if (r != NULL)
		rc = 0;
	Py_XDECREF(r);
out:
	if (rc != 0)
		report_init_error(&spawned);
	LEAVE();
	return rc;
}

/* _gpupool.worker_main(): this process was exec'd by a pool (the
 * library's GPUPOOL_WORKER is set): it becomes that worker, the GIL
 * released as in a forked one, and never comes back. */
PyObject *
gpy_worker_main(PyObject *mod, PyObject *noargs)
{
	if (getenv("GPUPOOL_WORKER") == NULL) {
		PyErr_SetString(PyExc_RuntimeError, "worker_main(): this "
		    "process was not started by a gpupool pool");
		return NULL;
	}
	worker_ts = PyEval_SaveThread();
	gp_worker_enter();
	_exit(72);	/* not reached: it returns only without the variable */
}

/* The worker is leaving cleanly (destroy, max_tasks): by _exit(), so
 * Python's buffered output is written now. */
void
gpy_worker_fini(struct gp_ctx *ctx, void *arg)
{
	ENTER();
	flush_all();
	LEAVE();
}

/* The item as worker's argument: bytes (a copy), or with view set a
 * read-only memoryview of in itself, which the caller's code must not
 * keep: in is valid only until fn returns. */
static PyObject *
item_arg(PoolObject *self, const void *in, size_t inlen)
{
	if (self->view)
		return PyMemoryView_FromMemory((char *)in, (Py_ssize_t)inlen,
		    PyBUF_READ);
	return PyBytes_FromStringAndSize(in, (Py_ssize_t)inlen);
}

/* After the call: the memoryview of in released, so that a use of it
 * after fn returns raises instead of reading reused memory. A view still
 * exported (something kept a buffer of it) could read another item's
 * bytes later: the worker leaves (the item ends GP_CRASHED). */
static void
item_done(PoolObject *self, PyObject *b)
{
	PyObject	*t, *v, *tb, *r;

	if (self->view) {
		PyErr_Fetch(&t, &v, &tb);	/* fn's exception, if any */
		if ((r = PyObject_CallMethod(b, "release", NULL)) == NULL) {
			print_exc();
			flush_all();
			_exit(70);
		}
		Py_DECREF(r);
		PyErr_Restore(t, v, tb);
	}
	Py_DECREF(b);
}

/* One item: worker(bytes) -> bytes-like, as the item's result. If it
 * raises (or returns something without the buffer protocol), the
 * traceback goes to stderr and the item ends GP_FAILED, code 1. SystemExit
 * ends the worker with its code, as sys.exit() would (the item then ends
 * GP_CRASHED and the worker is replaced). */
int
gpy_worker_fn(struct gp_ctx *ctx, const void *in, size_t inlen, void *arg)
{
	/* A fork has the caller's Pool at the address the arg bytes hold. */
	PoolObject	*self = spawned.worker != NULL ? &spawned :
			    *(PoolObject **)arg;
	PyObject	*b, *r;
	Py_buffer	 view;
	int		 rc;

	ENTER();
	if ((b = item_arg(self, in, inlen)) == NULL)
		goto fail;
	r = PyObject_CallFunctionObjArgs(self->worker, b, NULL);
	item_done(self, b);
	if (r == NULL)
		goto fail;
	rc = PyObject_GetBuffer(r, &view, PyBUF_SIMPLE);
	Py_DECREF(r);
	if (rc < 0)
		goto fail;
	/* A failed reply ends the item GP_ERROR with its code, whatever
	 * fn returns. */
	(void)gp_ctx_reply(ctx, view.buf, (size_t)view.len);
	PyBuffer_Release(&view);
	LEAVE();
	return 0;
fail:
	if (PyErr_ExceptionMatches(PyExc_SystemExit)) {
		PyObject	*t, *v, *tb, *c;
		long		 code = 1;

		PyErr_Fetch(&t, &v, &tb);
		PyErr_NormalizeException(&t, &v, &tb);
		c = v ? PyObject_GetAttrString(v, "code") : NULL;
		if (c == Py_None)
			code = 0;
		else if (c != NULL && PyLong_Check(c))
			code = PyLong_AsLong(c);
		flush_all();
		_exit((int)code & 0xff);
	}
	print_exc();
	LEAVE();
	return 1;
}

/* A gp_worker_info as a dict: the fields info() and current() show. */
PyObject *
gpy_info_dict(const struct gp_worker_info *wi)
{
	return Py_BuildValue("{s:i,s:i,s:i,s:i,s:O,s:s,s:s,s:s,s:s,s:K,"
	    "s:i,s:s,s:s,s:i}",
	    "worker", wi->worker, "gpu", wi->gpu, "slot", wi->slot,
	    "pid", (int)wi->pid, "fake", wi->fake ? Py_True : Py_False,
	    "visible", wi->visible, "uuid", wi->uuid, "busid", wi->busid,
	    "name", wi->name, "mem_bytes", (unsigned long long)wi->mem_bytes,
	    "numa", wi->numa, "nodeset", wi->nodeset, "cpuset", wi->cpuset,
	    "threads", wi->threads);
}

/* _gpupool.current(): this worker's place, or None in the caller. */
PyObject *
gpy_current(PyObject *mod, PyObject *noargs)
{
	if (self_info == NULL)
		Py_RETURN_NONE;
	return gpy_info_dict(self_info);
}
