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
 * region has nothing to close or leak across exec. A pool whose workers
 * exec (exec.c) makes each region a memfd instead, which the master
 * keeps open for the pool's life and each worker maps after its exec.
 *
 * The mapping is MAP_NORESERVE, its pages are taken on first touch and
 * kept (at most its two halves of the window each), and they are bound
 * to the slot's NUMA nodes, as the worker's own memory is, so that fn
 * reads its input from memory near its GPU.
 *
 * What is larger than the window goes through the same half in pieces
 * (msg.h): a GiB result costs the same two copies as a small one, and
 * its region no more than the window, however big the result. The
 * master's side of that is here; the worker's is in worker.c.
 *
 * An item that already lies in shared memory, the caller's extern mapping
 * (gp_pool_opts.ext_base: a rank's in ring, which MPI received it into),
 * is not copied at all: its record (GP_REC_EXT) carries its offset
 * there, and the worker checks it against its own view of the mapping
 * (inherited read only, or mapped from the memfd after an exec:
 * wstart.c) before fn reads the bytes in place.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

/* A half: the window rounded up to a page. */
static size_t
half_size(const struct gp_pool *p)
{
	size_t	 pg = (size_t)sysconf(_SC_PAGESIZE);

	return (p->o.window + pg - 1) / pg * pg;
}

/*
 * len bytes of memory shared with the workers: anonymous for forked ones,
 * which inherit the mapping; for exec'd ones a memfd (*fd), which the
 * worker maps again after its exec, since no mapping survives one. The
 * NUMA policy hwloc sets on the master's mapping belongs to the memfd's
 * pages (a shared policy), so the worker's mapping keeps it. A region's
 * is MAP_NORESERVE (noreserve), as its pages are taken only on use.
 * MAP_FAILED on failure, *fd -1.
 */
void *
gp_data_shared(const struct gp_pool *p, size_t len, int noreserve, int *fd)
{
	int	 nr = noreserve ? MAP_NORESERVE : 0;

	void	*m;

	*fd = -1;
	if (p->xp == NULL)
		return mmap(NULL, len, PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS | nr, -1, 0);
	if ((*fd = memfd_create("gpupool", MFD_CLOEXEC)) < 0)
		return MAP_FAILED;
	if (ftruncate(*fd, (off_t)len) < 0 || (m = mmap(NULL, len,
	    PROT_READ | PROT_WRITE, MAP_SHARED | nr, *fd, 0)) ==
	    MAP_FAILED) {
		close(*fd);
		*fd = -1;
		return MAP_FAILED;
	}
	return m;
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
		r = gp_data_shared(p, 2 * half, 1, &w->regfd);
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

long
gp_data_ext_off(const struct gp_pool *p, const void *in, size_t len)
{
	uintptr_t	 b = (uintptr_t)p->o.ext_base, a = (uintptr_t)in;

	if (b == 0 || len == 0 || a < b || a - b > p->o.ext_len ||
	    len > p->o.ext_len - (a - b))
		return -1;
	return (long)(a - b);
}

const uint8_t *
gp_data_ext(const struct gp_pool *p, const uint8_t *offp, uint32_t len)
{
	uint64_t	 off;

	memcpy(&off, offp, sizeof(off));
	if (p->o.ext_base == NULL)
		return NULL;
	if (off > p->o.ext_len || len > p->o.ext_len - off)
		return NULL;
	return (const uint8_t *)p->o.ext_base + off;
}

void
gp_data_unmap(struct gp_pool *p)
{
	int	 i;

	for (i = 0; i < p->nw; i++) {
		if (p->w[i].reg != NULL)
			(void)munmap(p->w[i].reg, 2 * p->w[i].half);
		if (p->w[i].regfd >= 0)
			close(p->w[i].regfd);
		p->w[i].reg = NULL;
		p->w[i].regfd = -1;
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

int
gp_data_item_send(struct gp_pool *p, struct gp_worker *w)
{
	struct gp_piece		*pc = &w->pitem;
	const uint8_t		*in = w->fl[0].item->in;
	struct gp_msg_piece	 m = { .total = pc->total, .off = pc->sent };
	struct gp_rec_task	 rec = { .id = pc->id, .flags = GP_REC_PIECED };
	size_t			 at, n = pc->total - pc->sent;
	int			 rc;

	if (n == 0 || pc->cut) {
		if ((rc = gp_msg_begin(&w->wbuf, GP_MSG_TASK, &at)) < 0 ||
		    (rc = gp_buf_add(&w->wbuf, &rec, sizeof(rec))) < 0)
			return rc;
		gp_msg_finish(&w->wbuf, at, 1);
		pc->id = 0;	/* an ACK from now on is a lie */
	} else {
		m.len = (uint32_t)(n < p->o.window ? n : p->o.window);
		m.flags = w->reg != NULL ? GP_REC_SHM : 0;
		if ((rc = gp_msg_begin(&w->wbuf, GP_MSG_PIECE, &at)) < 0 ||
		    (rc = gp_buf_add(&w->wbuf, &m, sizeof(m))) < 0 ||
		    (w->reg == NULL && (rc = gp_buf_add(&w->wbuf,
		    in + pc->sent, m.len)) < 0))
			return rc;
		/* The worker took the last piece out (its ACK came): the
		 * half is free. */
		if (w->reg != NULL)
			memcpy(w->reg, in + pc->sent, m.len);
		gp_msg_finish(&w->wbuf, at, pc->id);
		pc->sent += m.len;
	}
	(void)gp_buf_send(w->wfd, &w->wbuf);
	return 0;
}

int
gp_data_item_acked(struct gp_pool *p, struct gp_worker *w,
    const struct gp_msg_hdr *h, const uint8_t *pl)
{
	struct gp_msg_ack	 a;

	memcpy(&a, pl, sizeof(a));
	if (w->pitem.id == 0 || h->id != w->pitem.id ||
	    a.got != w->pitem.sent)
		return -EPROTO;
	w->pitem.got = a.got;
	/* It cannot take the item (its TASK record then says why), or the
	 * call is being stopped (the worker skips it): the TASK now. */
	if (a.rc != 0 || w->stop_id != 0)
		w->pitem.cut = 1;
	return gp_data_item_send(p, w);
}

void
gp_data_prefault(void *p, size_t len)
{
	size_t		 pg = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t	 a = ((uintptr_t)p + pg - 1) / pg * pg;
	uintptr_t	 b = ((uintptr_t)p + len) / pg * pg;

	/* Best effort: before Linux 5.14 the pages fault as written. */
	if (b > a)
		(void)madvise((void *)a, b - a, MADV_POPULATE_WRITE);
}

static void
drop(struct gp_piece *pc)
{
	if (pc->own)
		free(pc->buf);
	memset(pc, 0, sizeof(*pc));
}

/* The first piece of it's result, of total bytes (checked): where the
 * pieces go. The caller's buffer, or none when it is too small (the item
 * then ends -ENOBUFS, its buffer untouched); else a malloc of the whole. */
static int
result_start(const struct gp_job *job, struct gp_piece *pc,
    const struct gp_item *it, uint64_t id, uint64_t total)
{
	drop(pc);
	pc->id = id;
	pc->total = total;
	if (job->outbufs) {
		pc->buf = total <= it->outlen ? it->out : NULL;
		return 0;
	}
	if ((pc->buf = malloc((size_t)total)) == NULL)
		return -ENOMEM;
	pc->own = 1;
	gp_data_prefault(pc->buf, (size_t)total);
	return 0;
}

static int
send_ack(struct gp_worker *w, uint64_t id, uint64_t got)
{
	struct gp_msg_ack	 a = { .got = got };
	size_t			 at;
	int			 rc;

	if ((rc = gp_msg_begin(&w->wbuf, GP_MSG_ACK, &at)) < 0 ||
	    (rc = gp_buf_add(&w->wbuf, &a, sizeof(a))) < 0)
		return rc;
	gp_msg_finish(&w->wbuf, at, id);
	(void)gp_buf_send(w->wfd, &w->wbuf);
	return 0;
}

int
gp_data_result_piece(struct gp_pool *p, struct gp_job *job,
    struct gp_worker *w, const struct gp_msg_hdr *h, const uint8_t *pl)
{
	struct gp_piece		*pc = &w->pres;
	struct gp_msg_piece	 m;
	const uint8_t		*src;
	size_t			 base, room;
	int			 rc;

	/* An item still going out cannot have run: its result is a lie. */
	if (job == NULL || w->nres >= w->nfl || h->id != w->fl[w->nres].id ||
	    w->pitem.id != 0)
		return -EPROTO;
	memcpy(&m, pl, sizeof(m));
	if (m.off != 0 && pc->id != h->id)
		return -EPROTO;
	/* The first piece follows the batch's region results so far; the
	 * others start at 0, the master having taken all before them. */
	base = m.off == 0 ? w->roff : 0;
	room = w->reg != NULL && base < w->half ? w->half - base : 0;
	if (gp_msg_piece_check(&m, h->len, pc->got, pc->total, room,
	    p->o.window, p->o.max_msg) < 0)
		return -EPROTO;
	if (m.off == 0 && (rc = result_start(job, pc, w->fl[w->nres].item,
	    h->id, m.total)) < 0)
		return rc;
	src = (m.flags & GP_REC_SHM) ? w->reg + w->half + base :
	    pl + sizeof(m);
	if (pc->buf != NULL)
		memcpy(pc->buf + m.off, src, m.len);
	pc->got += m.len;
	if (pc->got == pc->total)
		w->roff = 0;
	return send_ack(w, h->id, pc->got);
}

int
gp_data_result(struct gp_worker *w, const struct gp_rec_result *r,
    struct gp_res *res)
{
	if (w->pitem.id != 0)
		return -EPROTO;		/* as in gp_data_result_piece() */
	if (!(r->flags & GP_REC_PIECED)) {
		if (w->pres.id != 0)
			drop(&w->pres);
		return 0;
	}
	if (w->pres.id != r->id || w->pres.got != w->pres.total)
		return -EPROTO;
	res->data = w->pres.buf;
	res->len = (size_t)w->pres.total;
	res->own = w->pres.own ? w->pres.buf : NULL;
	memset(&w->pres, 0, sizeof(w->pres));	/* res has it now */
	return 0;
}

void
gp_data_forget(struct gp_worker *w)
{
	drop(&w->pres);
	memset(&w->pitem, 0, sizeof(w->pitem));
}
