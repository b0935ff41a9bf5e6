/*
 * dispatch.c: what the master sends a call's items with: a batch for each
 * idle worker, sized by job.c and cut to what the worker accepts, each
 * item's bytes after its record or, when big, copied into the worker's
 * region (data.c), or, when they lie in the caller's extern mapping,
 * left there, the record saying where; for items that need GPUs (watch.c), one at a time on
 * the worker gp_watch_place() chose, with the GPUs it holds. Master only;
 * loop.c calls gp_dispatch() each turn and reads what comes back.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "msg.h"

static int
fl_push(struct gp_worker *w, struct gp_item *it, uint64_t id)
{
	struct gp_flight	*f;
	size_t			 cap;

	if (w->nfl == w->capfl) {
		cap = w->capfl ? w->capfl * 2 : 16;
		if ((f = realloc(w->fl, cap * sizeof(*f))) == NULL)
			return -ENOMEM;
		w->fl = f;
		w->capfl = cap;
	}
	w->fl[w->nfl].item = it;
	w->fl[w->nfl].id = id;
	w->nfl++;
	return 0;
}

static int
send_job(const struct gp_pool *p, struct gp_worker *w,
    const struct gp_job *job)
{
	uint64_t	 addr = (uint64_t)(uintptr_t)job->fn;
	size_t		 at;
	int		 rc;

	/* A fork has fn where the master has it; an exec'd worker gets its
	 * module and offset (gp_exec_fn()). */
	if ((rc = gp_msg_begin(&w->wbuf, GP_MSG_JOB, &at)) < 0 ||
	    (rc = p->xp == NULL ? gp_buf_add(&w->wbuf, &addr, sizeof(addr)) :
	    gp_buf_add(&w->wbuf, p->xp->fnref.data + p->xp->fnref.off,
	    p->xp->fnref.len - p->xp->fnref.off)) < 0 ||
	    (rc = gp_buf_add(&w->wbuf, job->arg, job->arglen)) < 0)
		return rc;
	gp_msg_finish(&w->wbuf, at, job->feed != NULL && p->o.timeout_ms == 0 ?
	    GP_JOB_UNTIMED : 0);
	w->job = job->gen;
	return 0;
}

/* Add it to w's batch as record rec: its offset in the extern mapping
 * when its bytes lie there (no copy); else its bytes at the next offset
 * of w's region (*ioff: the end of those before it) when it is big and
 * fits, else after the record in the message. 0 or -ENOMEM. */
static int
add_item(const struct gp_pool *p, struct gp_worker *w,
    const struct gp_item *it, struct gp_rec_task *rec, size_t *ioff)
{
	long		 at = gp_data_ext_off(p, it->in, it->inlen);
	uint64_t	 off = (uint64_t)at;
	int		 rc;

	if (at >= 0) {
		rec->flags = GP_REC_EXT;
		if ((rc = gp_buf_add(&w->wbuf, rec, sizeof(*rec))) < 0)
			return rc;
		return gp_buf_add(&w->wbuf, &off, sizeof(off));
	}
	at = gp_data_place(w, ioff, it->inlen);
	rec->flags = at >= 0 ? GP_REC_SHM : 0;
	if ((rc = gp_buf_add(&w->wbuf, rec, sizeof(*rec))) < 0)
		return rc;
	if (at >= 0) {
		memcpy(w->reg + at, it->in, it->inlen);
		return 0;
	}
	return gp_buf_add(&w->wbuf, it->in, it->inlen);
}

/* An item that cannot be sent: in missing, over max_msg, or out missing
 * with room (GP_POOL_OUT_BUFFERS). 0 or the code it ends with. */
static int
item_bad(const struct gp_pool *p, const struct gp_job *job,
    const struct gp_item *it)
{
	int	 rc;

	if ((rc = gp_job_item_check(it, job->outbufs)) < 0)
		return rc;
	return it->inlen > p->o.max_msg ? -EMSGSIZE : 0;
}

/* Give one idle worker its next batch, of at most max items (0: as
 * gp_job_batch_size() says). An item over the window is a batch of its
 * own, sent in pieces (data.c) before its TASK. Returns 1 if it got
 * one, 0 if no work is ready, or a negative errno. */
static int
dispatch_one(struct gp_pool *p, struct gp_job *job, struct gp_worker *w,
    size_t max)
{
	struct gp_rec_task	 rec = { 0 };
	struct gp_item		*it;
	size_t			 want, bytes = 0, at, lim, ioff = 0;
	int			 rc, bad, over, big = 0;

	if ((it = gp_job_peek(job)) == NULL)
		return 0;
	if (w->job != job->gen && (rc = send_job(p, w, job)) < 0)
		return rc;
	want = max ? max : gp_job_batch_size(job, gp_proc_live(p),
	    p->o.max_tasks, w->ntasks);
	/* Payload bytes, records included, wherever they travel: never
	 * more than the worker accepts, which one item of the window's
	 * size always fits. */
	lim = GP_MSG_MAX(p->o.window);
	if (lim > GP_BATCH_BYTES)
		lim = GP_BATCH_BYTES;
	if ((rc = gp_msg_begin(&w->wbuf, GP_MSG_TASK, &at)) < 0)
		return rc;
	while (w->nfl < want && (it = gp_job_peek(job)) != NULL) {
		if ((bad = item_bad(p, job, it)) < 0) {
			gp_job_take(job);
			(void)gp_job_fail(job, it, bad);
			continue;
		}
		over = it->inlen > p->o.window;
		if (w->nfl > 0 && (over ||
		    bytes + sizeof(rec) + it->inlen > lim))
			break;
		rec.id = ++p->ticket;
		rec.len = (uint32_t)it->inlen;
		/* In flight and off the queue at once: an item is in one
		 * place only, so a failure below ends it once
		 * (gp_loop_abandon()). */
		if ((rc = fl_push(w, it, rec.id)) < 0)
			return rc;
		gp_job_take(job);
		it->attempts++;
		it->worker = w->idx;
		if (over) {
			big = 1;
			break;
		}
		if ((rc = add_item(p, w, it, &rec, &ioff)) < 0)
			return rc;
		bytes += sizeof(rec) + it->inlen;
	}
	if (w->nfl == 0 || big)
		w->wbuf.len = w->wbuf.off + at;	/* no TASK (yet) */
	if (w->nfl == 0)
		return 0;
	if (big) {
		w->pitem = (struct gp_piece){ .id = rec.id,
					      .total = it->inlen };
		if ((rc = gp_data_item_send(p, w)) < 0)
			return rc;
	} else
		gp_msg_finish(&w->wbuf, at, w->nfl);
	if ((rc = gp_watch_start(p, w)) < 0)
		return rc;
	w->nres = 0;
	w->roff = 0;
	w->ntasks += (unsigned)w->nfl;
	atomic_store(&w->shm->stop, 0);
	w->state = GP_W_BUSY;
	if (p->o.timeout_ms > 0)
		w->heard = gp_now_ns();
	/* Most batches fit the pipe buffer: send now, skip a poll turn.
	 * A failure means a dead worker: its pidfd or result pipe says so. */
	(void)gp_buf_send(w->wfd, &w->wbuf);
	return 1;
}

/* The GPUs an item holds beyond its worker's own, for the worker to
 * hand on (gp_ctx_item_visible()): sent before its TASK. */
static int
send_gpus(struct gp_worker *w, const int *set, int n)
{
	uint32_t	 g;
	size_t		 at;
	int		 i, rc;

	if ((rc = gp_msg_begin(&w->wbuf, GP_MSG_GPUS, &at)) < 0)
		return rc;
	for (i = 0; i < n; i++) {
		g = (uint32_t)set[i];
		if ((rc = gp_buf_add(&w->wbuf, &g, sizeof(g))) < 0)
			return rc;
	}
	gp_msg_finish(&w->wbuf, at, (uint64_t)n);
	return 0;
}

/* Items that need GPUs (watch.c): one at a time, in order, each on the
 * worker gp_watch_place() chose; the first that must wait holds back
 * the rest. */
static int
dispatch_gated(struct gp_pool *p, struct gp_job *job)
{
	struct gp_worker	*w;
	struct gp_item		*it;
	size_t			 mark;
	int			 i, bad, rc;

	for (;;) {
		for (i = 0; i < p->nw && p->w[i].state != GP_W_IDLE; i++)
			;
		if (i == p->nw || (it = gp_job_peek(job)) == NULL)
			return 0;
		if ((w = gp_watch_place(p, job, it, &bad)) == NULL) {
			if (bad == 0)
				return 0;
			gp_job_take(job);
			(void)gp_job_fail(job, it, bad);
			continue;
		}
		if (w->job != job->gen && (rc = send_job(p, w, job)) < 0)
			return rc;
		mark = w->wbuf.len - w->wbuf.off;
		if (p->wt.npick > 0 &&
		    (rc = send_gpus(w, p->wt.pick, p->wt.npick)) < 0)
			return rc;
		if ((rc = dispatch_one(p, job, w, 1)) <= 0) {
			/* No TASK: no GPUS either. */
			w->wbuf.len = w->wbuf.off + mark;
			if (rc < 0)
				return rc;
			continue;
		}
		p->rr = w->idx + 1;
	}
}

/* Idle workers in turn from p->rr: the worker that became idle last
 * (loop.c), else the one after the last dispatched to. Never from 0
 * each time, so the stragglers and retries of a run do not all land on
 * GPU 0. */
int
gp_dispatch(struct gp_pool *p, struct gp_job *job)
{
	int	 k, i, rc, start = p->rr;

	if (gp_watch_gated(p, job))
		return dispatch_gated(p, job);
	p->wt.npick = 0;
	p->wt.pmem = 0;

	for (k = 0; k < p->nw; k++) {
		i = (start + k) % p->nw;
		if (p->w[i].state != GP_W_IDLE)
			continue;
		if ((rc = dispatch_one(p, job, &p->w[i], 0)) <= 0)
			return rc;
		p->rr = i + 1;
	}
	return 0;
}
