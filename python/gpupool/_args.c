/*
 * _args.c: Pool()'s keyword arguments. The extension's own (the worker,
 * per_gpu, timeouts, init, view, ...) from one table (name, kind, where
 * in struct gpy_args); every other keyword is a pool option's, found by
 * its row's py in gp_pool_opt_info() (src/opts.def) and taken by the
 * row's kind, then given to the library as text (gp_pool_opts_set()), the
 * judge of it: a bad value raises ValueError naming the keyword. A new
 * option is a row of opts.def, nothing here. pool_options() lists the
 * rows to _options.py (Pool's signature and docstring); parse_size().
 */
#include "_gpupool.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

enum kind {
	A_OBJ,		/* the object itself, borrowed (PyObject *) */
	A_INT,		/* an int (as "i") */
	A_BOOL,		/* truth, 0 or 1 (as "p") */
	A_UINT,		/* 0 .. UINT32_MAX, None: left (unsigned) */
};

#define AT(f)	offsetof(struct gpy_args, f)
static const struct arg {
	const char	*name;
	enum kind	 kind;
	size_t		 off;
} args[] = {
	{ "worker", A_OBJ, AT(worker) },
	{ "per_gpu", A_INT, AT(o.per_gpu) },
	{ "fake_gpus", A_OBJ, AT(fake) },
	{ "timeout_ms", A_UINT, AT(o.timeout_ms) },
	{ "grace_ms", A_UINT, AT(o.grace_ms) },
	{ "retries", A_INT, AT(o.retries) },
	{ "max_tasks", A_UINT, AT(o.max_tasks) },
	{ "init", A_OBJ, AT(init) },
	{ "view", A_BOOL, AT(view) },
	{ "max_msg", A_OBJ, AT(maxm) },
	{ "plan", A_BOOL, AT(plan) },
	{ "spawn", A_OBJ, AT(spec) },
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

/* A GP_OPT_GPUS value: a string ("0,2", "free:0,2", UUIDs, bus ids) or
 * a sequence of ints or strings, joined with commas. A new reference to
 * a str. */
static PyObject *
gpus_text(PyObject *gpus)
{
	PyObject	*strs, *sep, *joined;

	if (PyUnicode_Check(gpus)) {
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

/* A GP_OPT_SIZE value: a str as it is, or an int, bytes, as a size the
 * library reads: in the largest unit that divides it, else in K with the
 * exact fraction (a byte is 0.0009765625K: ten digits). A new str, or
 * NULL with ValueError. */
static PyObject *
size_text(const struct gp_opt_info *r, PyObject *v)
{
	static const char	*const unit[] = { "", "K", "M", "G", "T" };
	unsigned long long	 b = 0;
	char			 t[64];
	int			 u = 0;

	if (PyUnicode_Check(v)) {
		Py_INCREF(v);
		return v;
	}
	if (PyLong_Check(v) && !PyBool_Check(v))
		b = PyLong_AsUnsignedLongLong(v);
	else
		PyErr_SetNone(PyExc_TypeError);
	if (PyErr_Occurred()) {
		PyErr_Clear();
		PyErr_Format(PyExc_ValueError, "%s=%R: must be a number of "
		    "bytes (an integer 0 or more) or a size such as '20G'",
		    r->py, v);
		return NULL;
	}
	while (b != 0 && u < 4 && b % (1ull << (10 * (u + 1))) == 0)
		u++;
	if (b == 0 || u > 0)
		(void)snprintf(t, sizeof(t), "%llu%s", b >> (10 * u), unit[u]);
	else
		(void)snprintf(t, sizeof(t), "%llu.%010lluK", b >> 10,
		    (b & 1023) * 9765625ull);
	return PyUnicode_FromString(t);
}

/* A GP_OPT_COUNT or GP_OPT_INT value: an int of the row's range, not a
 * bool or a float (numpy's ints too: anything with __index__), in
 * decimal; else ValueError in _options._int_in's words. */
static PyObject *
int_text(const struct gp_opt_info *r, PyObject *v)
{
	PyObject	*n = PyBool_Check(v) ? NULL : PyNumber_Index(v);
	long		 l = -1;

	if (n != NULL) {
		l = PyLong_AsLong(n);
		Py_DECREF(n);
	}
	if (n == NULL || PyErr_Occurred() || l < r->lo || l > r->hi) {
		PyErr_Clear();
		PyErr_Format(PyExc_ValueError, "%s=%R: must be an int from %ld "
		    "to %ld", r->py, v, r->lo, r->hi);
		return NULL;
	}
	return PyUnicode_FromFormat("%ld", l);
}

/* A GP_OPT_SECS value: an int or a float, 0 to the row's hi, as str()
 * writes it (the library reads the decimal). */
static PyObject *
secs_text(const struct gp_opt_info *r, PyObject *v)
{
	double	 d = -1;

	if ((PyLong_Check(v) && !PyBool_Check(v)) || PyFloat_Check(v))
		d = PyFloat_AsDouble(v);
	if (PyErr_Occurred() || !(d >= 0 && d <= (double)r->hi)) {
		PyErr_Clear();
		PyErr_Format(PyExc_ValueError, "%s=%R: must be a number of "
		    "seconds, 0 (do not wait) to %ld, or None (as long as it "
		    "takes)", r->py, v, r->hi);
		return NULL;
	}
	return PyObject_Str(v);
}

/* A GP_OPT_PATH value: os.fspath(v), a str, not empty. */
static PyObject *
path_text(const struct gp_opt_info *r, PyObject *v)
{
	PyObject	*p = PyOS_FSPath(v);

	if (p == NULL || !PyUnicode_Check(p) || PyUnicode_GetLength(p) == 0) {
		Py_XDECREF(p);
		PyErr_Clear();
		PyErr_Format(PyExc_ValueError, "%s=%R: must be a path (a str or "
		    "an os.PathLike, not empty) or None (%s)", r->py, v,
		    r->help);
		return NULL;
	}
	return p;
}

/* v as the text of row r's kind: a new str, or NULL with an exception. */
static PyObject *
row_text(const struct gp_opt_info *r, PyObject *v)
{
	int	 t;

	switch (r->kind) {
	case GP_OPT_FLAG:
		if ((t = PyObject_IsTrue(v)) < 0)
			return NULL;
		return PyUnicode_FromString(t ? "1" : "0");
	case GP_OPT_GPUS:
		return gpus_text(v);
	case GP_OPT_SIZE:
		return size_text(r, v);
	case GP_OPT_PATH:
		return path_text(r, v);
	case GP_OPT_SECS:
		return secs_text(r, v);
	default:
		return int_text(r, v);
	}
}

/* The row whose Python keyword is name into *r: 0, or -1 (none). */
static int
row_of(const char *name, struct gp_opt_info *r)
{
	int	 i;

	for (i = 0; gp_pool_opt_info(i, r) == 0; i++)
		if (r->py != NULL && strcmp(r->py, name) == 0)
			return 0;
	return -1;
}

/* Keyword name as a pool option: v (None: left unset) as its row's
 * kind takes it, to gp_pool_opts_set(). 0; 1, no row has that keyword;
 * -1 with an exception set. */
static int
row_opt(const char *name, PyObject *v, struct gpy_args *g)
{
	struct gp_opt_info	 r;
	PyObject		*t;
	const char		*s;
	char			 err[256];

	if (row_of(name, &r) < 0)
		return 1;
	if (v == Py_None)
		return 0;
	if (g->keep == NULL && (g->keep = PyList_New(0)) == NULL)
		return -1;
	if ((t = row_text(&r, v)) == NULL ||
	    (s = PyUnicode_AsUTF8AndSize(t, NULL)) == NULL)
		goto fail;
	if (gp_pool_opts_set(&g->o, r.name, s, err, sizeof(err)) < 0) {
		PyErr_Format(PyExc_ValueError, "%s=%R: %s", name, v, err);
		goto fail;
	}
	/* o may point into s (GP_OPT_GPUS, GP_OPT_PATH) until
	 * gp_pool_create(): s lives as long as g. */
	if (PyList_Append(g->keep, t) < 0)
		goto fail;
	Py_DECREF(t);
	return 0;
fail:
	Py_XDECREF(t);
	return -1;
}

/* pool_options() -> ((name, py, kind, lo, hi, dflt, help), ...): the
 * library's option rows, py None where Python has no keyword. */
PyObject *
gpy_pool_options(PyObject *mod, PyObject *noargs)
{
	static const char	*const kinds[] = {
		[GP_OPT_GPUS] = "gpus", [GP_OPT_COUNT] = "count",
		[GP_OPT_INT] = "int", [GP_OPT_SIZE] = "size",
		[GP_OPT_FLAG] = "flag", [GP_OPT_PATH] = "path",
		[GP_OPT_SECS] = "secs",
	};
	struct gp_opt_info	 r;
	PyObject		*l, *t, *row;
	const char		*k;
	int			 i;

	if ((l = PyList_New(0)) == NULL)
		return NULL;
	for (i = 0; gp_pool_opt_info(i, &r) == 0; i++) {
		k = r.kind > 0 && (size_t)r.kind < sizeof(kinds) /
		    sizeof(kinds[0]) && kinds[r.kind] ? kinds[r.kind] : "?";
		row = Py_BuildValue("(szslllz)", r.name, r.py, k, r.lo, r.hi,
		    r.dflt, r.help);
		if (row == NULL || PyList_Append(l, row) < 0) {
			Py_XDECREF(row);
			Py_DECREF(l);
			return NULL;
		}
		Py_DECREF(row);
	}
	t = PyList_AsTuple(l);
	Py_DECREF(l);
	return t;
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
	}
	return -1;
}

int
gpy_args_parse(PyObject *pos, PyObject *kw, struct gpy_args *g)
{
	PyObject	*k, *v;
	Py_ssize_t	 i = 0, npos = PyTuple_Size(pos);
	const char	*name;
	size_t		 j;
	int		 rc;

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
		if (j == 0 && npos == 1)
			rc = 1;		/* a second worker */
		else if (j < NARGS)
			rc = one(&args[j], v, g);
		else
			rc = row_opt(name, v, g);
		if (rc > 0)
			PyErr_Format(PyExc_TypeError, "Pool() got %s keyword "
			    "argument '%s'", j ? "an unexpected" : "a second "
			    "worker as", name);
		if (rc != 0)
			return -1;
	}
	if (g->worker == NULL) {
		PyErr_SetString(PyExc_TypeError, "Pool() needs worker");
		return -1;
	}
	gpy_ring_extern(&g->o);	/* a rank's in ring, if set (_serve.py) */
	return 0;
}

void
gpy_args_release(struct gpy_args *g)
{
	Py_CLEAR(g->keep);
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
