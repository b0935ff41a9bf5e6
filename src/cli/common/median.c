/*
 * median.c: the running median of a stream of values, for --timeout N%
 * (N% of the median runtime of the tasks that succeeded so far). Two
 * heaps: the lower half in a max-heap, the upper half negated in another
 * max-heap, kept within one of each other in size, so that adding is
 * O(log n) and the median is the lower heap's top. Exact, unlike GNU
 * parallel's remedian, and 16 bytes per value: a million tasks, 16 MB.
 * Pure: no I/O, nothing printed.
 */
#include <errno.h>
#include <stdlib.h>

#include "common/cli.h"

static void
heap_push(double *h, size_t *n, double v)
{
	size_t	 i = (*n)++, up;

	for (; i > 0 && h[up = (i - 1) / 2] < v; i = up)
		h[i] = h[up];
	h[i] = v;
}

/* Take the top (the largest) off a heap that is not empty. */
static double
heap_pop(double *h, size_t *n)
{
	double	 top = h[0], v = h[--(*n)];
	size_t	 i = 0, c;

	while ((c = 2 * i + 1) < *n) {
		if (c + 1 < *n && h[c + 1] > h[c])
			c++;
		if (h[c] <= v)
			break;
		h[i] = h[c];
		i = c;
	}
	h[i] = v;
	return top;
}

int
median_add(struct median *m, double v)
{
	size_t	 cap;
	double	*lo, *hi;

	/* Room for one more in either heap, and for the move that evens
	 * them out. */
	if (m->nlo + 2 > m->cap || m->nhi + 2 > m->cap) {
		cap = m->cap ? 2 * m->cap : 16;
		if ((lo = realloc(m->lo, cap * sizeof(*lo))) == NULL)
			return -ENOMEM;
		m->lo = lo;
		if ((hi = realloc(m->hi, cap * sizeof(*hi))) == NULL)
			return -ENOMEM;
		m->hi = hi;
		m->cap = cap;
	}
	if (m->nlo == 0 || v <= m->lo[0])
		heap_push(m->lo, &m->nlo, v);
	else
		heap_push(m->hi, &m->nhi, -v);
	/* The lower half holds the median: as many as the upper, or one
	 * more. */
	if (m->nlo > m->nhi + 1)
		heap_push(m->hi, &m->nhi, -heap_pop(m->lo, &m->nlo));
	else if (m->nhi > m->nlo)
		heap_push(m->lo, &m->nlo, -heap_pop(m->hi, &m->nhi));
	return 0;
}

double
median_get(const struct median *m)
{
	return m->nlo > 0 ? m->lo[0] : -1;
}

void
median_release(struct median *m)
{
	free(m->lo);
	free(m->hi);
	m->lo = m->hi = NULL;
	m->nlo = m->nhi = m->cap = 0;
}
