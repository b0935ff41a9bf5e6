/*
 * ring.c: the extents of a ring, the memory a rank shares with its MPI
 * process for big messages (its out ring, which the rank writes and MPI
 * sends from, and its in ring, which MPI receives into and the rank
 * reads in place). The writer of a ring allocates here; the reader says
 * when it is done with an extent, by a frame, and the writer frees it.
 *
 * First fit from the lowest offset, RING_ALIGN-byte aligned; the free
 * space is the gaps between taken extents, so freed neighbours are one
 * gap at once. Deliberately not circular: under a steady load the same
 * low extents come back, and their bytes are often still in cache, where
 * a circular ring would walk all of it. An extent that is never freed (a
 * send to a lost peer) keeps only its own bytes. Pure: no system call,
 * no output, so that the MPI process and the Python extension share it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ranks/ranks.h"

void
ring_init(struct ring *r, size_t size)
{
	memset(r, 0, sizeof(*r));
	r->size = size & ~(size_t)(RING_ALIGN - 1);
}

void
ring_release(struct ring *r)
{
	free(r->ext);
	memset(r, 0, sizeof(*r));
}

/* The index of the first taken extent at or past off. */
static size_t
ring_find(const struct ring *r, uint64_t off)
{
	size_t	 lo = 0, hi = r->n, mid;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (r->ext[mid].off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int64_t
ring_alloc(struct ring *r, size_t len)
{
	struct ring_ext	*e;
	uint64_t	 at = 0;
	size_t		 i, cap;

	if (len == 0 || len > r->size)
		return -1;
	len = (len + RING_ALIGN - 1) & ~(size_t)(RING_ALIGN - 1);
	/* The first gap, from offset 0, that len fits. */
	for (i = 0; i < r->n; i++) {
		if (r->ext[i].off - at >= len)
			break;
		at = r->ext[i].off + r->ext[i].len;
	}
	if (at > r->size || r->size - at < len)
		return -1;
	if (r->n == r->cap) {
		cap = r->cap ? 2 * r->cap : 16;
		if ((e = realloc(r->ext, cap * sizeof(*e))) == NULL)
			return -1;
		r->ext = e;
		r->cap = cap;
	}
	memmove(&r->ext[i + 1], &r->ext[i], (r->n - i) * sizeof(*r->ext));
	r->ext[i].off = at;
	r->ext[i].len = len;
	r->n++;
	r->used += len;
	return (int64_t)at;
}

int
ring_free(struct ring *r, uint64_t off)
{
	size_t	 i = ring_find(r, off);

	if (i == r->n || r->ext[i].off != off)
		return -ENOENT;
	r->used -= r->ext[i].len;
	memmove(&r->ext[i], &r->ext[i + 1], (r->n - i - 1) * sizeof(*r->ext));
	r->n--;
	return 0;
}
