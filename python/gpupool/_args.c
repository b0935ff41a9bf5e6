/*
 * _args.c: Pool()'s keyword arguments, from one table (name, kind,
 * where in struct gpy_args), and parse_size(). The options the library
 * owns go to it as text (gp_pool_opts_set()), the judge of them: a bad
 * value raises ValueError naming the argument, with the library's
 * reason. Adding an option: a row here, and its field if it has one.
 */
#include "_gpupool.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>

enum kind {
	A_OBJ,		/* the object itself, borrowed (PyObject *) */
	A_INT,		/* an int (as "i") */
	A_BOOL,		/* truth, 0 or 1 (as "p") */
	A_UINT,		/* 0 .. UINT32_MAX, None: left (unsigned) */
	A_TEXT,		/* str(value) to the library's option lib */
	A_PATH,		/* the same, kept as long as g (cstr): the
			   library keeps the pointer */
	A_FLAG,		/* truth as "1" or "0" to lib */
	A_SIZE,		/* an int (bytes) into o.item_mem, or a str to lib */
	A_GPUS,		/* None, a str or a sequence (joined with ',') */
};

#define AT(f)	offsetof(struct gpy_args, f)
static const struct arg {
	const char	*name;
	enum kind	 kind;
	size_t		 off;
	const char	*lib;		/* gp_pool_opts_set()'s name */
} args[] = {
	{ "worker", A_OBJ, AT(worker), NULL },
	{ "gpus", A_GPUS, 0, "gpus" },
	{ "per_gpu", A_INT, AT(o.per_gpu), NULL },
	{ "fake_gpus", A_OBJ, AT(fake), NULL },
	{ "timeout_ms", A_UINT, AT(o.timeout_ms), NULL },
	{ "grace_ms", A_UINT, AT(o.grace_ms), NULL },
	{ "retries", A_INT, AT(o.retries), NULL },
	{ "max_tasks", A_UINT, AT(o.max_tasks), NULL },
	{ "init", A_OBJ, AT(init), NULL },
	{ "wait_free", A_FLAG, 0, "wait_free" },
	{ "busy_pct", A_TEXT, 0, "busy_pct" },
	{ "busy_util", A_TEXT, 0, "busy_util" },
	{ "gpu_mem", A_SIZE, 0, "item_mem" },
	{ "gpus_per_worker", A_TEXT, 0, "gpus_per_worker" },
	{ "nice", A_TEXT, 0, "nice" },
	{ "view", A_BOOL, AT(view), NULL },
	{ "max_msg", A_OBJ, AT(maxm), NULL },
	{ "plan", A_BOOL, AT(plan), NULL },
	{ "spawn", A_OBJ, AT(spec), NULL },
	{ "claims", A_PATH, 0, "claims" },
	{ "claim_timeout", A_TEXT, 0, "claim_timeout" },
};
#define NARGS	(sizeof(args) / sizeof(args[0]))

/* An integer lo .. hi into *out; None (or absent) leaves *out. 0, or -1
 * with a ValueError naming it. */
static int
opt_uint(PyObject *o, const char *name, unsigned lo, unsigned hi,
    unsigned *out)
{
	unsigned long	 v;

	if (o == NULL || o == Py_None)
		return 0;
	v = PyBool_Check(o) ? ULONG_MAX : PyLong_AsUnsignedLong(o);
	if (PyErr_Occurred() || v < lo || v > hi) {
		PyErr_Clear();
		PyErr_Format(PyExc_ValueError, "%s=%R: must be an integer "
		    "%u .. %u", name, o, lo, hi);
		return -1;
	}
	*out = (unsigned)v;
	return 0;
}

/* gpus: None, a string ("0,2", "free:0,2", UUIDs, bus ids) or a
 * sequence of ints or strings, joined with commas. A new reference to a
 * str, or Py_None. */
static PyObject *
gpus_string(PyObject *gpus)
{
	PyObject	*strs, *sep, *joined;

	if (gpus == Py_None || PyUnicode_Check(gpus)) {
		Py_INCREF(gpus);
		return gpus;
	}
	strs = PyObject_CallFunction((PyObject *)&PyMap_Type, "OO",
	    &PyUnicode_Type, gpus);
	if (strs == NULL)
		return NULL;
	sep = PyUnicode_FromString(",");
	joined = sep ? PyUnicode_Join(sep, strs) : NULL;
	Py_XDECREF(sep);
	Py_DECREF(strs);
	return joined;
}

/* The text of v for a's library option (NULL with an exception set):
 * *keep is a new reference that holds it. */
static const char *
text_of(const struct arg *a, PyObject *v, PyObject **keep)
{
	int	 t;

	*keep = NULL;
	if (a->kind == A_FLAG)
		return (t = PyObject_IsTrue(v)) < 0 ? NULL : t ? "1" : "0";
	*keep = a->kind == A_GPUS ? gpus_string(v) : PyObject_Str(v);
	return *keep != NULL ? PyUnicode_AsUTF8AndSize(*keep, NULL) : NULL;
}

/* An option of the library's, v as its text (gpu_mem: an int is bytes).
 * 0, or -1 with an exception set. */
static int
lib_opt(const struct arg *a, PyObject *v, struct gpy_args *g)
{
	PyObject	*keep;
	const char	*t;
	char		 err[256];

	if (v == Py_None)
		return 0;
	if (a->kind == A_SIZE && PyLong_Check(v) && !PyBool_Check(v)) {
		g->o.item_mem = PyLong_AsUnsignedLongLong(v);
		if (!PyErr_Occurred())
			return 0;
	}
	if (a->kind == A_SIZE && !PyUnicode_Check(v)) {
		PyErr_Clear();
		PyErr_Format(PyExc_ValueError, "%s=%R: must be a number of "
		    "bytes (an integer 0 or more) or a size such as '20G'",
		    a->name, v);
		return -1;
	}
	if ((t = text_of(a, v, &keep)) == NULL) {
		Py_XDECREF(keep);
		return -1;
	}
	if (gp_pool_opts_set(&g->o, a->lib, t, err, sizeof(err)) < 0) {
		PyErr_Format(PyExc_ValueError, "%s=%R: %s", a->name, v, err);
		Py_XDECREF(keep);
		return -1;
	}
	/* o.gpus and o.claims point into the text: it lives as long as
	 * g. */
	if (a->kind == A_GPUS)
		g->gstr = keep;
	else if (a->kind == A_PATH)
		g->cstr = keep;
	else
		Py_XDECREF(keep);
	return 0;
}

static int
one(const struct arg *a, PyObject *v, struct gpy_args *g)
{
	char	*at = (char *)g + a->off;
	long	 l;
	int	 t;

	switch (a->kind) {
	case A_OBJ:
		*(PyObject **)(void *)at = v;
		return 0;
	case A_INT:
		if ((l = PyLong_AsLong(v)) == -1 && PyErr_Occurred())
			return -1;
		if (l < INT_MIN || l > INT_MAX) {
			PyErr_Format(PyExc_OverflowError, "%s=%R: out of "
			    "range", a->name, v);
			return -1;
		}
		*(int *)(void *)at = (int)l;
		return 0;
	case A_BOOL:
		if ((t = PyObject_IsTrue(v)) < 0)
			return -1;
		*(int *)(void *)at = t;
		return 0;
	case A_UINT:
		return opt_uint(v, a->name, 0, UINT32_MAX,
		    (unsigned *)(void *)at);
	default:
		return lib_opt(a, v, g);
	}
}

int
gpy_args_parse(PyObject *pos, PyObject *kw, struct gpy_args *g)
{
	PyObject	*k, *v;
	Py_ssize_t	 i = 0, npos = PyTuple_Size(pos);
	const char	*name;
	size_t		 j;

	if (npos < 0)
		return -1;
	if (npos > 1) {
		PyErr_SetString(PyExc_TypeError, "Pool() takes one positional "
		    "argument (worker)");
		return -1;
	}
	if (npos == 1 && (g->worker = PyTuple_GetItem(pos, 0)) == NULL)
		return -1;
	while (kw != NULL && PyDict_Next(kw, &i, &k, &v)) {
		if ((name = PyUnicode_AsUTF8AndSize(k, NULL)) == NULL)
			return -1;
		for (j = 0; j < NARGS && strcmp(args[j].name, name) != 0; j++)
			;
		if (j == NARGS || (j == 0 && npos == 1)) {
			PyErr_Format(PyExc_TypeError, "Pool() got %s keyword "
			    "argument '%s'", j ? "an unexpected" : "a second "
			    "worker as", name);
			return -1;
		}
		if (one(&args[j], v, g) < 0)
			return -1;
	}
	if (g->worker == NULL) {
		PyErr_SetString(PyExc_TypeError, "Pool() needs worker");
		return -1;
	}
	return 0;
}

void
gpy_args_release(struct gpy_args *g)
{
	Py_CLEAR(g->gstr);
	Py_CLEAR(g->cstr);
}

/* parse_size(text) -> bytes, as gp_parse_size() reads it: ValueError
 * with its reason. */
PyObject *
gpy_parse_size(PyObject *mod, PyObject *arg)
{
	const char	*s, *why;
	Py_ssize_t	 n;
	uint64_t	 b;

	if ((s = PyUnicode_AsUTF8AndSize(arg, &n)) == NULL)
		return NULL;
	if (gp_parse_size(s, (size_t)n, &b, &why) < 0 || strlen(s) !=
	    (size_t)n) {
		PyErr_Format(PyExc_ValueError, "bad size %R: %s", arg,
		    why ? why : "not a size");
		return NULL;
	}
	return PyLong_FromUnsignedLongLong(b);
}

/* fake_gpus: None (GPUPOOL_FAKE_GPUS, as the library reads it) or a
 * count into o.fake_gpus (out of range: -1, which the library refuses).
 * 0, or -1 with an exception set. */
int
gpy_fake_gpus(struct gpy_args *a)
{
	long	 v;

	if (a->fake == NULL || a->fake == Py_None)
		return 0;
	if ((v = PyLong_AsLong(a->fake)) == -1 && PyErr_Occurred())
		return -1;
	a->o.fake_gpus = v > INT32_MAX || v < 0 ? -1 : (int)v;
	return 0;
}
