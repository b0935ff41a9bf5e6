/*
 * _ring.c: a rank's rings from Python (gpupool/_link.py): Ring, the
 * extents of its out ring (src/cli/ranks/ring.c's allocator, the one its
 * MPI process uses for the in ring), and Extent, a message its MPI
 * process received into the in ring, read in place, or, writable, an
 * item rank 0 pickled straight into its out ring (gpupool/_link.Arena).
 *
 * An Extent exports its bytes read-only and holds a buffer of the ring's
 * mapping (the mapping outlives it). When the last reference to it goes
 * (the memoryviews of its records, an item the C pool holds), its
 * dealloc appends its tag to the link's freed list, and the link tells
 * the MPI process that extent is free: the only free on the reader's
 * side, so a byte of the in ring is never reused while anything here
 * can still read it.
 */
#include "_gpupool.h"

#include <stdint.h>

#include "ranks/ranks.h"

/* ------------------------------------------------------------------ */
/* Ring: first fit, 64-byte aligned */

typedef struct {
	PyObject_HEAD
	struct ring	 r;
} RingObject;

static PyObject *
Ring_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
	RingObject	*self;
	Py_ssize_t	 size;

	if (!PyArg_ParseTuple(args, "n:Ring", &size))
		return NULL;
	if (size < 0) {
		PyErr_SetString(PyExc_ValueError, "Ring(size): size < 0");
		return NULL;
	}
	if ((self = (RingObject *)PyType_GenericAlloc(tp, 0)) == NULL)
		return NULL;
	ring_init(&self->r, (size_t)size);
	return (PyObject *)self;
}

static void
Ring_dealloc(RingObject *self)
{
	PyTypeObject	*tp = Py_TYPE((PyObject *)self);
	freefunc	 tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);

	ring_release(&self->r);
	tp_free(self);
	Py_DECREF(tp);
}

static PyObject *
Ring_alloc(RingObject *self, PyObject *arg)
{
	Py_ssize_t	 n = PyLong_AsSsize_t(arg);

	if (n == -1 && PyErr_Occurred())
		return NULL;
	return PyLong_FromLongLong(n <= 0 ? -1 :
	    (long long)ring_alloc(&self->r, (size_t)n));
}

static PyObject *
Ring_free(RingObject *self, PyObject *arg)
{
	unsigned long long	 off = PyLong_AsUnsignedLongLong(arg);

	if (off == (unsigned long long)-1 && PyErr_Occurred())
		return NULL;
	return PyBool_FromLong(ring_free(&self->r, off) == 0);
}

static PyObject *
Ring_used(RingObject *self, PyObject *unused)
{
	return PyLong_FromSize_t(self->r.used);
}

static PyMethodDef Ring_methods[] = {
	{ "alloc", (PyCFunction)Ring_alloc, METH_O,
	  "alloc(n): the offset of n free bytes, now taken (the lowest "
	  "that fits, 64-byte aligned), or -1" },
	{ "free", (PyCFunction)Ring_free, METH_O,
	  "free(off): give back the extent at off; False if none starts "
	  "there" },
	{ "used", (PyCFunction)Ring_used, METH_NOARGS,
	  "used(): the bytes taken" },
	{ NULL, NULL, 0, NULL }
};

static PyType_Slot Ring_slots[] = {
	{ Py_tp_doc, (void *)"Ring(size): the extents of a rank's out ring" },
	{ Py_tp_new, (void *)Ring_new },
	{ Py_tp_dealloc, (void *)Ring_dealloc },
	{ Py_tp_methods, Ring_methods },
	{ 0, NULL }
};

static PyType_Spec Ring_spec = {
	.name = "gpupool._gpupool.Ring",
	.basicsize = sizeof(RingObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
	.slots = Ring_slots,
};

/* ------------------------------------------------------------------ */
/* Extent: in-ring bytes, read in place until the last reference goes */

typedef struct {
	PyObject_HEAD
	Py_buffer	 map;		/* the ring's mapping, held */
	char		*p;
	Py_ssize_t	 len;
	PyObject	*freed;		/* a list: tag appended at dealloc */
	PyObject	*tag;
	int		 writable;	/* an item pickled into the out ring */
} ExtentObject;

static PyObject *
Extent_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
	ExtentObject	*self;
	PyObject	*map, *freed, *tag;
	Py_ssize_t	 off, len;
	int		 writable = 0;

	if (!PyArg_ParseTuple(args, "OnnO!O|p:Extent", &map, &off, &len,
	    &PyList_Type, &freed, &tag, &writable))
		return NULL;
	if ((self = (ExtentObject *)PyType_GenericAlloc(tp, 0)) == NULL)
		return NULL;
	if (PyObject_GetBuffer(map, &self->map, PyBUF_SIMPLE) < 0) {
		Py_DECREF(self);
		return NULL;
	}
	if (off < 0 || len < 0 || off > self->map.len ||
	    len > self->map.len - off) {
		PyErr_SetString(PyExc_ValueError, "Extent: past the mapping");
		Py_DECREF(self);
		return NULL;
	}
	self->p = (char *)self->map.buf + off;
	self->len = len;
	self->freed = Py_NewRef(freed);
	self->tag = Py_NewRef(tag);
	self->writable = writable;
	return (PyObject *)self;
}

static int
Extent_getbuffer(ExtentObject *self, Py_buffer *view, int flags)
{
	return PyBuffer_FillInfo(view, (PyObject *)self, self->p, self->len,
	    !self->writable, flags);
}

static PyObject *
Extent_tag(ExtentObject *self, void *unused)
{
	return Py_NewRef(self->tag);
}

static PyObject *
Extent_freed(ExtentObject *self, void *unused)
{
	return Py_NewRef(self->freed);
}

static PyGetSetDef Extent_getset[] = {
	{ "tag", (getter)Extent_tag, NULL, "what dealloc appends", NULL },
	{ "freed", (getter)Extent_freed, NULL, "the list it appends to",
	  NULL },
	{ NULL, NULL, NULL, NULL, NULL }
};

/* Appends the tag (it cannot raise here: on a failure the extent stays
 * taken, which is safe), then lets the mapping go. */
static void
Extent_dealloc(ExtentObject *self)
{
	PyTypeObject	*tp = Py_TYPE((PyObject *)self);
	freefunc	 tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
	PyObject	*et, *ev, *etb;

	if (self->freed != NULL) {
		PyErr_Fetch(&et, &ev, &etb);
		if (PyList_Append(self->freed, self->tag) < 0)
			PyErr_Clear();
		PyErr_Restore(et, ev, etb);
	}
	Py_XDECREF(self->freed);
	Py_XDECREF(self->tag);
	if (self->map.obj != NULL)
		PyBuffer_Release(&self->map);
	tp_free(self);
	Py_DECREF(tp);
}

static Py_ssize_t
Extent_length(ExtentObject *self)
{
	return self->len;
}

static PyType_Slot Extent_slots[] = {
	{ Py_tp_doc, (void *)"Extent(mapping, off, len, freed, tag"
	  "[, writable]): mapping[off:off + len], in place, read-only "
	  "unless writable; tag appended to the list freed when the last "
	  "reference goes" },
	{ Py_tp_getset, Extent_getset },
	{ Py_tp_new, (void *)Extent_new },
	{ Py_tp_dealloc, (void *)Extent_dealloc },
	{ Py_bf_getbuffer, (void *)Extent_getbuffer },
	{ Py_sq_length, (void *)Extent_length },
	{ 0, NULL }
};

static PyType_Spec Extent_spec = {
	.name = "gpupool._gpupool.Extent",
	.basicsize = sizeof(ExtentObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
	.slots = Extent_slots,
};

/* ------------------------------------------------------------------ */
/* The in ring as every later Pool's extern mapping (gp_pool_opts.ext_*):
 * a rank's workers read their items where MPI received them. */

static struct {
	Py_buffer	 view;		/* of the rings' mapping, held */
	int		 set;
	size_t		 off, len;
	int		 fd;
} ext;

/* ring_extern(mapping, off, len, fd): mapping[off:off + len], which is
 * memfd fd from offset off, is the extern mapping of the Pools made from
 * now on; ring_extern(None) ends that. */
static PyObject *
ring_extern(PyObject *mod, PyObject *args)
{
	PyObject	*m;
	Py_ssize_t	 off = 0, len = 0;
	int		 fd = -1;

	(void)mod;
	if (!PyArg_ParseTuple(args, "O|nni:ring_extern", &m, &off, &len, &fd))
		return NULL;
	if (ext.set) {
		PyBuffer_Release(&ext.view);
		ext.set = 0;
	}
	if (m == Py_None)
		Py_RETURN_NONE;
	if (PyObject_GetBuffer(m, &ext.view, PyBUF_SIMPLE) < 0)
		return NULL;
	if (off < 0 || len <= 0 || fd <= 0 || off > ext.view.len ||
	    len > ext.view.len - off) {
		PyBuffer_Release(&ext.view);
		PyErr_SetString(PyExc_ValueError, "ring_extern: off and len "
		    "must lie in the mapping, fd a descriptor");
		return NULL;
	}
	ext.set = 1;
	ext.off = (size_t)off;
	ext.len = (size_t)len;
	ext.fd = fd;
	Py_RETURN_NONE;
}

void
gpy_ring_extern(struct gp_pool_opts *o)
{
	if (!ext.set)
		return;
	o->ext_base = (const char *)ext.view.buf + ext.off;
	o->ext_len = ext.len;
	o->ext_off = ext.off;
	o->ext_fd = ext.fd;
}

static PyMethodDef ring_methods[] = {
	{ "ring_extern", ring_extern, METH_VARARGS,
	  "ring_extern(mapping, off, len, fd) or ring_extern(None): the "
	  "Pools made from now on read items lying in mapping[off:off + len] "
	  "(memfd fd from off) in place" },
	{ NULL, NULL, 0, NULL }
};

int
gpy_ring_add(PyObject *m)
{
	PyObject	*t;
	int		 rc;

	if ((t = PyType_FromSpec(&Ring_spec)) == NULL)
		return -1;
	rc = PyModule_AddObjectRef(m, "Ring", t);
	Py_DECREF(t);
	if (rc < 0 || (t = PyType_FromSpec(&Extent_spec)) == NULL)
		return -1;
	rc = PyModule_AddObjectRef(m, "Extent", t);
	Py_DECREF(t);
	return rc < 0 ? rc : PyModule_AddFunctions(m, ring_methods);
}
