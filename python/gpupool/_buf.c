/*
 * _buf.c: big objects between the caller and the workers, with as few
 * copies as pickle protocol 5 allows: the frame that carries a pickle and
 * its out-of-band buffers in one item (frame(), unframe()), and Out, the
 * object that owns a result's malloc'd bytes so the caller reads them in
 * place (no copy into a bytes object).
 *
 * A frame, host byte order (both ends are forks of one process):
 *	"GPB5" | u32 nbuf | u64 pickle length | nbuf x u64 (length << 1 |
 *	read only) | pickle | each buffer at the next multiple of 64
 * (from the frame's start: a buffer is then as aligned as the payload,
 * 16 bytes or more from malloc, which numpy's dtypes need at most).
 * A plain pickle (protocol 2 or later) starts with 0x80, never 'G', so a
 * payload without buffers stays a plain pickle, as before frames.
 */
#include "_gpupool.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC		"GPB5"
#define HEAD		16		/* magic, nbuf, pickle length */
#define ALIGN		64		/* buffer offsets in a frame */
#define MAX_BUFS	(1 << 20)

static size_t
align_up(size_t n)
{
	return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
}

/* ------------------------------------------------------------------ */
/* Out: a result's bytes, owned */

typedef struct {
	PyObject_HEAD
	void		*p;		/* the library's malloc, ours */
	Py_ssize_t	 len;
} OutObject;

static int
Out_getbuffer(OutObject *self, Py_buffer *view, int flags)
{
	return PyBuffer_FillInfo(view, (PyObject *)self, self->p, self->len,
	    0, flags);
}

/* A heap type: each Out holds a reference to it (PyObject_New took
 * one), given back here. */
static void
Out_dealloc(OutObject *self)
{
	PyTypeObject	*tp = Py_TYPE((PyObject *)self);
	freefunc	 tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);

	free(self->p);
	tp_free(self);
	Py_DECREF(tp);
}

static Py_ssize_t
Out_length(OutObject *self)
{
	return self->len;
}

/* Not a base type, no instances but gpy_out_take()'s (as the static
 * type was: Out() raises TypeError), attributes fixed. */
static PyType_Slot Out_slots[] = {
	{ Py_tp_doc, (void *)"a result's bytes, read in place (the buffer "
	  "protocol: memoryview(out), bytes(out)); freed with the last "
	  "reference" },
	{ Py_tp_dealloc, (void *)Out_dealloc },
	{ Py_bf_getbuffer, (void *)Out_getbuffer },
	{ Py_sq_length, (void *)Out_length },
	{ 0, NULL }
};

static PyType_Spec Out_spec = {
	.name = "gpupool._gpupool.Out",
	.basicsize = sizeof(OutObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE |
	    Py_TPFLAGS_DISALLOW_INSTANTIATION,
	.slots = Out_slots,
};

PyTypeObject	*gpy_OutType;

int
gpy_out_init(void)
{
	if (gpy_OutType == NULL)
		gpy_OutType = (PyTypeObject *)PyType_FromSpec(&Out_spec);
	return gpy_OutType != NULL ? 0 : -1;
}

PyObject *
gpy_out_take(struct gp_item *it)
{
	OutObject	*o;

	if ((o = PyObject_New(OutObject, gpy_OutType)) == NULL)
		return NULL;
	o->p = it->out;
	o->len = (Py_ssize_t)it->outlen;
	it->out = NULL;
	return (PyObject *)o;
}

/* ------------------------------------------------------------------ */
/* frame(pickle, buffers[, alloc]) -> bytes, or alloc's object */

static void
views_release(Py_buffer *v, Py_ssize_t n)
{
	while (n-- > 0)
		PyBuffer_Release(&v[n]);
	PyMem_Free(v);
}

/* The frame, written at p (total bytes): each buffer is copied once,
 * the only copy on the caller's side. */
static void
build(char *p, const Py_buffer *pk, const Py_buffer *v, Py_ssize_t n)
{
	uint32_t	 nb = (uint32_t)n;
	uint64_t	 u;
	size_t		 off;
	Py_ssize_t	 i;

	memcpy(p, MAGIC, 4);
	memcpy(p + 4, &nb, 4);
	u = (uint64_t)pk->len;
	memcpy(p + 8, &u, 8);
	for (i = 0; i < n; i++) {
		u = (uint64_t)v[i].len << 1 | (v[i].readonly ? 1 : 0);
		memcpy(p + HEAD + 8 * i, &u, 8);
	}
	off = HEAD + 8 * (size_t)n;
	memcpy(p + off, pk->buf, (size_t)pk->len);
	off += (size_t)pk->len;
	for (i = 0; i < n; i++) {
		memset(p + off, 0, align_up(off) - off);
		off = align_up(off);
		memcpy(p + off, v[i].buf, (size_t)v[i].len);
		off += (size_t)v[i].len;
	}
}

/* Where the frame goes: alloc(total)'s object when it gives one (a
 * writable buffer of exactly total bytes: a rank's out ring), else a
 * bytes made for it. */
static PyObject *
place(PyObject *alloc, const Py_buffer *pk, const Py_buffer *v,
    Py_ssize_t n, size_t total)
{
	PyObject	*b;
	Py_buffer	 w;
	char		*p;

	if (alloc != Py_None) {
		if ((b = PyObject_CallFunction(alloc, "n",
		    (Py_ssize_t)total)) == NULL)
			return NULL;
		if (b != Py_None) {
			if (PyObject_GetBuffer(b, &w, PyBUF_WRITABLE) < 0) {
				Py_DECREF(b);
				return NULL;
			}
			if ((size_t)w.len != total) {
				PyBuffer_Release(&w);
				Py_DECREF(b);
				return PyErr_Format(PyExc_ValueError, "frame: "
				    "alloc(%zu) gave %zd bytes", total, w.len);
			}
			build(w.buf, pk, v, n);
			PyBuffer_Release(&w);
			return b;
		}
		Py_DECREF(b);
	}
	if ((b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total)) == NULL)
		return NULL;
	if ((p = PyBytes_AsString(b)) == NULL) {
		Py_DECREF(b);
		return NULL;
	}
	build(p, pk, v, n);
	return b;
}

PyObject *
gpy_frame(PyObject *mod, PyObject *args)
{
	PyObject	*seq, *o, *b = NULL, *alloc = Py_None;
	Py_buffer	 pk, *v;
	Py_ssize_t	 i, n;
	size_t		 total;

	if (!PyArg_ParseTuple(args, "y*O!|O:frame", &pk, &PyList_Type, &seq,
	    &alloc))
		return NULL;
	if ((n = PyList_Size(seq)) < 0) {
		PyBuffer_Release(&pk);
		return NULL;
	}
	if (n > MAX_BUFS || (v = PyMem_Calloc(n ? n : 1, sizeof(*v))) == NULL) {
		PyBuffer_Release(&pk);
		return n > MAX_BUFS ? PyErr_Format(PyExc_ValueError, "frame: "
		    "%zd buffers (at most %d)", n, MAX_BUFS) : PyErr_NoMemory();
	}
	total = HEAD + 8 * (size_t)n + (size_t)pk.len;
	for (i = 0; i < n; i++) {
		/* C or Fortran contiguous: pickle hands out no other. */
		if ((o = PyList_GetItem(seq, i)) == NULL ||
		    PyObject_GetBuffer(o, &v[i], PyBUF_ANY_CONTIGUOUS) < 0)
			goto out;
		total = align_up(total) + (size_t)v[i].len;
	}
	if (total > PY_SSIZE_T_MAX) {
		PyErr_SetString(PyExc_OverflowError, "frame too large");
		goto out;
	}
	b = place(alloc, &pk, v, n, total);
out:
	views_release(v, i);
	PyBuffer_Release(&pk);
	return b;
}

/* ------------------------------------------------------------------ */
/* unframe(payload, copy) -> None | (pickle view, [buffers]) */

static PyObject *
slice(PyObject *mv, size_t off, size_t len)
{
	return PySequence_GetSlice(mv, (Py_ssize_t)off,
	    (Py_ssize_t)(off + len));
}

/* Buffer i of a frame: a copy (bytes when it was read only, else a
 * bytearray: what pickle would have made in band), or a view of the
 * payload when the caller owns it and it is writable. */
static PyObject *
buffer_at(PyObject *mv, const char *p, size_t off, uint64_t d, int copy)
{
	size_t	 len = (size_t)(d >> 1);

	if (!copy)
		return slice(mv, off, len);
	if (d & 1)
		return PyBytes_FromStringAndSize(p + off, (Py_ssize_t)len);
	return PyByteArray_FromStringAndSize(p + off, (Py_ssize_t)len);
}

/* The list of buffers of the frame in v (its header checked). */
static PyObject *
buffers(PyObject *mv, const Py_buffer *v, uint32_t nb, size_t off, int copy)
{
	const char	*p = v->buf;
	PyObject	*list, *o;
	uint64_t	 d;
	uint32_t	 i;

	if ((list = PyList_New(nb)) == NULL)
		return NULL;
	for (i = 0; i < nb; i++) {
		memcpy(&d, p + HEAD + 8 * (size_t)i, 8);
		off = align_up(off);
		if (off > (size_t)v->len || d >> 1 > (uint64_t)v->len - off) {
			Py_DECREF(list);
			return PyErr_Format(PyExc_ValueError, "unframe: "
			    "buffer %u overruns the payload", i);
		}
		/* A view must be writable to stand for a writable buffer. */
		o = buffer_at(mv, p, off, d, copy || (!(d & 1) && v->readonly));
		if (o == NULL) {
			Py_DECREF(list);
			return NULL;
		}
		if (PyList_SetItem(list, i, o) < 0) {	/* o stolen */
			Py_DECREF(list);
			return NULL;
		}
		off += (size_t)(d >> 1);
	}
	return list;
}

PyObject *
gpy_unframe(PyObject *mod, PyObject *args)
{
	PyObject	*obj, *mv = NULL, *pk = NULL, *list = NULL, *r = NULL;
	Py_buffer	 v;
	uint32_t	 nb = 0;
	uint64_t	 plen = 0;
	size_t		 off;
	int		 copy;

	if (!PyArg_ParseTuple(args, "Op:unframe", &obj, &copy) ||
	    PyObject_GetBuffer(obj, &v, PyBUF_SIMPLE) < 0)
		return NULL;
	if (v.len < 4 || memcmp(v.buf, MAGIC, 4) != 0) {
		PyBuffer_Release(&v);
		Py_RETURN_NONE;
	}
	if (v.len >= HEAD) {
		memcpy(&nb, (char *)v.buf + 4, 4);
		memcpy(&plen, (char *)v.buf + 8, 8);
	}
	off = HEAD + 8 * (size_t)nb;
	if (v.len < HEAD || nb > MAX_BUFS || off > (size_t)v.len ||
	    plen > (uint64_t)v.len - off) {
		PyErr_SetString(PyExc_ValueError, "unframe: bad frame header");
		goto out;
	}
	if ((mv = PyMemoryView_FromObject(obj)) == NULL ||
	    (pk = slice(mv, off, (size_t)plen)) == NULL ||
	    (list = buffers(mv, &v, nb, off + (size_t)plen, copy)) == NULL)
		goto out;
	r = PyTuple_Pack(2, pk, list);
out:
	Py_XDECREF(list);
	Py_XDECREF(pk);
	Py_XDECREF(mv);
	PyBuffer_Release(&v);
	return r;
}
