/*
 * _claim.c: host-wide GPU claims from Python: waits that Ctrl-C ends
 * (Python's wakeup fd is the write end of the pipe the library's wait
 * watches), claim() and unclaim() for a process that is not a pool,
 * claims_list().
 */
#include "_gpupool.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

/* Before a wait for claims: Python's wakeup fd (main thread only) is
 * cancel[1], the write end of the pipe the library's wait watches.
 * 0 (*old: the wakeup fd to restore, or NULL), or -1 with an
 * exception. */
int
gpy_wait_begin(const int *cancel, PyObject **old)
{
	PyObject	*fd;
	char		 buf[64];

	while (read(cancel[0], buf, sizeof(buf)) > 0)
		;
	if ((fd = PyLong_FromLong(cancel[1])) == NULL)
		return -1;
	*old = gpy_set_wakeup(fd);
	Py_DECREF(fd);
	return *old == NULL && PyErr_Occurred() ? -1 : 0;
}

/* After it: the old wakeup fd back, then the signal handlers. 1: a
 * signal came (it ended the wait) and every handler returned, 0: none
 * came, -1: a handler raised (or the wakeup fd could not be restored). */
int
gpy_wait_end(const int *cancel, PyObject *old)
{
	PyObject	*r;
	char		 buf[64];
	int		 came;

	if (old != NULL) {
		r = gpy_set_wakeup(old);
		Py_DECREF(old);
		if (r == NULL && PyErr_Occurred())
			return -1;
		Py_XDECREF(r);
	}
	came = read(cancel[0], buf, sizeof(buf)) > 0;
	while (read(cancel[0], buf, sizeof(buf)) > 0)
		;
	if (PyErr_CheckSignals() < 0)
		return -1;
	return came;
}

/* claim(n, **kw) -> the claimed GPUs' ids, as CUDA_VISIBLE_DEVICES now
 * says them (the C environment's; os.environ is the caller's to set):
 * gp_claim() with Pool()'s keywords gpus, fake_gpus, gpu_mem, claims
 * and claim_timeout (checked by the same table). The GIL is released
 * while it waits; Ctrl-C ends the wait (gpy_wait_begin()). -EALREADY is a
 * RuntimeError, a timeout TimeoutError. */
PyObject *
gpy_claim(PyObject *mod, PyObject *args, PyObject *kw)
{
	struct gpy_args	 a = { .init = Py_None, .o.per_gpu = 1 };
	PyObject	*pos, *old, *r = NULL;
	char		 err[512], vis[4096];
	int		 n, rc = 0, came, cancel[2] = { -1, -1 };

	if (!PyArg_ParseTuple(args, "i:claim", &n) ||
	    (pos = PyTuple_Pack(1, Py_None)) == NULL)
		return NULL;
	if (gpy_args_parse(pos, kw, &a) < 0 || gpy_fake_gpus(&a) < 0)
		goto out;
	if (pipe2(cancel, O_CLOEXEC | O_NONBLOCK) < 0) {
		PyErr_SetFromErrno(PyExc_OSError);
		goto out;
	}
	a.o.flags |= GP_POOL_CANCEL_FD;
	if (a.o.flags & GP_POOL_GPUS_FREE)
		a.o.flags |= GP_POOL_MONITOR;
	a.o.cancel_fd = cancel[0];
	a.o.errbuf = err;
	a.o.errlen = sizeof(err);
	err[0] = '\0';
	do {
		if (gpy_wait_begin(cancel, &old) < 0)
			goto out;
		Py_BEGIN_ALLOW_THREADS
		rc = gp_claim(&a.o, n, vis, sizeof(vis));
		Py_END_ALLOW_THREADS
		if ((came = gpy_wait_end(cancel, old)) < 0) {
			if (rc >= 0)
				(void)gp_unclaim();	/* Ctrl-C: none */
			goto out;
		}
	} while (rc == GP_ECLAIM && came > 0);
	if (rc == -EALREADY)
		PyErr_SetString(PyExc_RuntimeError, err);
	else if (rc < 0)
		gpy_raise_code(rc, err);
	else
		r = PyUnicode_FromString(vis);
out:
	if (cancel[0] >= 0) {
		(void)close(cancel[0]);
		(void)close(cancel[1]);
	}
	Py_DECREF(pos);
	gpy_args_release(&a);
	return r;
}

/* unclaim() -> True (claim()'s GPUs given back), False (this process
 * holds none: never claimed, given back before, or a fork's copy, which
 * holds its parent's until it exits or execs); RuntimeError once CUDA
 * was loaded here. */
PyObject *
gpy_unclaim(PyObject *mod, PyObject *noargs)
{
	int	 rc = gp_unclaim();

	if (rc == -EBUSY) {
		PyErr_SetString(PyExc_RuntimeError, "CUDA was loaded in this "
		    "process (libcuda is mapped): what it allocated stays on "
		    "the GPUs until the process exits, so they stay claimed "
		    "until then");
		return NULL;
	}
	return PyBool_FromLong(rc == 0);
}

/* claims_list(dir) -> [dict]: gp_claims_list(dir or NULL), holders
 * before waiters, waiters in order. */
PyObject *
gpy_claims_list(PyObject *mod, PyObject *args)
{
	struct gp_claim_info	*ci = NULL;
	const char		*dir = NULL;
	PyObject		*list = NULL, *d;
	char			 err[512] = "";
	int			 i, n, max = 0;

	if (!PyArg_ParseTuple(args, "z:claims_list", &dir))
		return NULL;
	/* Claims come and go between the count and the read: again with
	 * room for more until they fit. */
	for (;;) {
		Py_BEGIN_ALLOW_THREADS
		n = gp_claims_list(dir, ci, max, err, sizeof(err));
		Py_END_ALLOW_THREADS
		if (n < 0 || n <= max)
			break;
		max = n + 16;
		PyMem_Free(ci);
		if ((ci = PyMem_Calloc((size_t)max, sizeof(*ci))) == NULL) {
			PyErr_NoMemory();
			return NULL;
		}
	}
	if (n < 0) {
		PyMem_Free(ci);
		return gpy_raise_code(n, err);
	}
	if ((list = PyList_New(n)) == NULL)
		goto out;
	for (i = 0; i < n; i++) {
		d = Py_BuildValue("{s:s,s:i,s:i,s:k,s:s,s:s,s:L,s:K,s:K}",
		    "gpu", ci[i].gpu, "queue", ci[i].queue, "pid", ci[i].pid,
		    "uid", (unsigned long)ci[i].uid, "user", ci[i].user,
		    "cmd", ci[i].cmd, "since_ms", (long long)ci[i].since_ms,
		    "mem", (unsigned long long)ci[i].mem,
		    "total", (unsigned long long)ci[i].total);
		if (d == NULL || PyList_SetItem(list, i, d) < 0) {
			Py_CLEAR(list);		/* d stolen */
			goto out;
		}
	}
out:
	PyMem_Free(ci);
	return list;
}
