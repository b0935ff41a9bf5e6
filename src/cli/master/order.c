/*
 * order.c: -k, GNU parallel's --keep-order: each task's output printed
 * in the order the tasks came in (not the order they ended), whole. A
 * task that ends before those ahead of it has its output kept (what
 * out_task() would print, tag and all) until they are done, then it
 * goes out with them. Tasks that never print (skipped by a resume, not
 * started) are done all the same, so that they hold nothing back. What
 * is kept counts against ORDER_HELD: past it no new task starts
 * (out_backlog()), so that one slow task cannot have memory fill with
 * the output of the thousands after it. At the end of the run
 * (order_flush()) what is kept goes out in order, gaps and all: after a
 * ^C or --halt, the tasks that did end are not lost.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "master/master.h"

/* The slot of task nth in the window, grown to hold it; NULL: out of
 * memory. */
static struct held *
slot(struct order *o, unsigned long nth)
{
	struct held	*q;
	size_t		 k = nth - o->next, n, i;

	if (k >= o->cap) {
		for (n = o->cap ? o->cap : 64; n <= k; n *= 2)
			;
		if ((q = calloc(n, sizeof(*q))) == NULL)
			return NULL;
		/* Unroll the ring into the new array, next first. */
		for (i = 0; i < o->cap; i++)
			q[i] = o->q[(o->head + i) % o->cap];
		free(o->q);
		o->q = q;
		o->head = 0;
		o->cap = n;
	}
	return &o->q[(o->head + k) % o->cap];
}

/* Print what h holds, in the order it was kept, and empty it. */
static void
put(struct run *r, struct held *h)
{
	int	 s;

	for (s = 0; s < 2; s++) {
		if (h->b[s].len > h->b[s].off)
			out_task(r, s ? STDERR_FILENO : STDOUT_FILENO, NULL,
			    (const char *)h->b[s].data + h->b[s].off,
			    h->b[s].len - h->b[s].off, 1);
		r->held -= h->b[s].len - h->b[s].off;
		gp_buf_release(&h->b[s]);
	}
	h->done = 0;
}

/* The tasks done from next on, printed, the window moved past them. */
static void
advance(struct run *r)
{
	struct order	*o = &r->ord;
	struct held	*h;

	while (o->cap > 0 && (h = &o->q[o->head])->done) {
		put(r, h);
		o->head = (o->head + 1) % o->cap;
		o->next++;
	}
}

int
order_hold(struct run *r, unsigned long nth)
{
	struct held	*h;

	if (!r->o->keep_order || nth == r->ord.next)
		return 0;	/* its turn: printed as it comes */
	if ((h = slot(&r->ord, nth)) == NULL)
		return 0;	/* out of memory: print it now */
	r->divert[0] = &h->b[0];
	r->divert[1] = &h->b[1];
	return 1;
}

void
order_done(struct run *r, unsigned long nth)
{
	struct order	*o = &r->ord;
	struct held	*h;

	r->divert[0] = r->divert[1] = NULL;
	if (!r->o->keep_order || nth < o->next)
		return;
	if (nth == o->next) {
		o->next++;
		if (o->cap > 0) {
			put(r, &o->q[o->head]);
			o->head = (o->head + 1) % o->cap;
		}
		advance(r);
		return;
	}
	if ((h = slot(o, nth)) != NULL)
		h->done = 1;
}

void
order_flush(struct run *r)
{
	struct order	*o = &r->ord;
	size_t		 i;

	for (i = 0; i < o->cap; i++)
		put(r, &o->q[(o->head + i) % o->cap]);
	free(o->q);
	memset(o, 0, sizeof(*o));
	o->next = 1;
}
