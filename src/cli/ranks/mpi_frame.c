/*
 * mpi_frame.c: the frames between a rank and its MPI process (mpi.c,
 * mpi_proc.c): a struct frame, then its bytes, over a socketpair; and the
 * size of the memory they share (when each peer was last heard from,
 * which peers to beat). Pure encoding on struct gp_buf: no system call,
 * no MPI call, no output, so that both sides use the same code.
 */
#include <stdlib.h>
#include <string.h>

#include "ranks/ranks.h"

size_t
frame_shm_len(int size)
{
	return (size_t)size * (sizeof(int64_t) + 1) + 1;
}

/* The whole frame at the head of b, if there is one: its header in *f,
 * its bytes at *data; gp_buf_consume(b, sizeof(*f) + f->len) takes it. */
int
frame_get(struct gp_buf *b, struct frame *f, const uint8_t **data)
{
	size_t	 have = b->len - b->off;

	if (have < sizeof(*f))
		return 0;
	memcpy(f, b->data + b->off, sizeof(*f));
	if (f->len > have - sizeof(*f))
		return 0;
	*data = b->data + b->off + sizeof(*f);
	return 1;
}

/* An MPI message frame as a struct rmsg, or NULL (out of memory). */
struct rmsg *
frame_msg(const struct frame *f, const uint8_t *data)
{
	struct rmsg	*m;

	if ((m = malloc(sizeof(*m) + f->len)) == NULL)
		return NULL;
	m->next = NULL;
	m->peer = f->peer;
	m->type = f->type;
	m->len = f->len;
	m->ring = 0;
	memcpy(m->data, data, f->len);
	return m;
}

int
frame_put(struct gp_buf *b, int type, int peer, const void *data,
    size_t len)
{
	struct frame	 f;
	int		 rc;

	memset(&f, 0, sizeof(f));
	f.type = type;
	f.peer = peer;
	f.len = len;
	if ((rc = gp_buf_reserve(b, sizeof(f) + len)) < 0)
		return rc;
	(void)gp_buf_add(b, &f, sizeof(f));
	(void)gp_buf_add(b, data, len);
	return 0;
}
