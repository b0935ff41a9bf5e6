/*
 * data.c: the regions of shared memory that big items and results travel
 * through, one per worker slot. The pipes carry only their framing: a
 * record flagged GP_REC_SHM (msg.h) says "my bytes are next in the
 * region". An item is copied once (in, by the master; fn reads it where
 * it lies), a result twice (in by gp_ctx_reply(), out by the master),
 * against three copies each through a pipe, with a wakeup per 64 KiB of
 * pipe buffer.
 *
 * A region is an anonymous MAP_SHARED mapping made by the master before
 * the slot's first fork and kept until gp_pool_destroy(): a replacement
 * worker inherits the same pages, and a worker that dies
 * mid-write leaves only bytes no record points at (offsets start again
 * at 0 each batch). Each worker unmaps the other slots' regions after
 * fork (gp_data_keep()): it can write to its own only. No descriptor: a
 * region has nothing to close or leak across exec.
 *
 * The mapping is MAP_NORESERVE, its pages are taken on first touch and
 * kept (the largest item and result a slot has carried), and they are
 * bound to the slot's NUMA nodes, as the worker's own memory is, so that
 * fn reads its input from memory near its GPU.
 */
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

/* A half: max_msg rounded up to a page. */
static size_t
half_size(const struct gp_pool *p)
{
	size_t	 pg = (size_t)sysconf(_SC_PAGESIZE);

	return (p->o.max_msg + pg - 1) / pg * pg;
}

void
gp_data_map(struct gp_pool *p)
{
	struct gp_worker	*w;
	size_t			 half = half_size(p);
	void			*r;
	int			 i;

	for (i = 0; i < p->nw; i++) {
		w = &p->w[i];
		r = mmap(NULL, 2 * half, PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (r == MAP_FAILED)
			continue;	/* this slot uses the pipes */
		/* Best effort, like the worker's own binding: a topology
		 * from another machine's XML binds nothing. */
		if (!(p->o.flags & GP_POOL_NO_BIND) && w->place.membind)
			(void)hwloc_set_area_membind(p->topo, r, 2 * half,
			    w->place.nodeset, HWLOC_MEMBIND_BIND,
			    HWLOC_MEMBIND_BYNODESET);
		w->reg = r;
		w->half = half;
	}
}

long
gp_data_place(const struct gp_worker *w, size_t *end, size_t len)
{
	if (w->reg == NULL || len < GP_SHM_MIN)
		return -1;
	return gp_msg_shm_place(end, len, w->half);
}

const uint8_t *
gp_data_bytes(const struct gp_worker *w, int results, size_t *end,
    uint32_t len, size_t max)
{
	long	 at;

	if (w->reg == NULL || len > max ||
	    (at = gp_msg_shm_place(end, len, w->half)) < 0)
		return NULL;
	return w->reg + (results ? w->half : 0) + at;
}

void
gp_data_unmap(struct gp_pool *p)
{
	int	 i;

	for (i = 0; i < p->nw; i++) {
		if (p->w[i].reg != NULL)
			(void)munmap(p->w[i].reg, 2 * p->w[i].half);
		p->w[i].reg = NULL;
	}
}

void
gp_data_keep(struct gp_pool *p, const struct gp_worker *w)
{
	int	 i;

	for (i = 0; i < p->nw; i++)
		if (&p->w[i] != w && p->w[i].reg != NULL) {
			(void)munmap(p->w[i].reg, 2 * p->w[i].half);
			p->w[i].reg = NULL;
		}
}
