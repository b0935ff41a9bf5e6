/*
 * loop.c: the master. gp_loop_run() is the only place the master blocks
 * in a call: one poll() over the workers' channels (and the cancel and
 * feed fds), woken by I/O or by the earliest real deadline, never by a
 * fixed tick. Around it: dispatch (dispatch.c sends the batches), the
 * message handlers (READY, RESULT: a big result is copied out of the
 * worker's region), deadlines (STOP, then a kill) and cancel.
 * What becomes of items is job.c's; forking, killing and reaping (only
 * one by one, after a channel reports EOF: no SIGCHLD handler, no
 * waitpid(-1)) are proc.c's. Runs only in the master.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "msg.h"

static void
queue_stop(struct gp_pool *p, struct gp_worker *w, uint64_t id, int timeout,
    int64_t now)
{
	size_t	 at;

	atomic_store(&w->shm->stop, 1);
	if (gp_msg_begin(&w->wbuf, GP_MSG_STOP, &at) == 0)
		gp_msg_finish(&w->wbuf, at, id);
	(void)gp_buf_send(w->wfd, &w->wbuf);
	w->stop_id = id ? id : UINT64_MAX;
	w->stop_timeout = timeout;
	w->kill_at = now + (int64_t)p->o.grace_ms * 1000000;
}

/* Stop everything not yet ended: pending items are canceled, running
 * ones are asked to stop and killed after the grace period. */
static void
cancel(struct gp_pool *p, struct gp_job *job)
{
	int64_t		 now = gp_now_ns(), started;
	int		 i;

	gp_job_cancel(job);
	for (i = 0; i < p->nw; i++)
		if (p->w[i].state == GP_W_BUSY && p->w[i].stop_id == 0)
			queue_stop(p, &p->w[i],
			    gp_proc_current(&p->w[i], &started), 0, now);
}

/* What feed->ctl() asked for. */
static void
control(struct gp_pool *p, struct gp_job *job, int what)
{
	int	 i;

	if (what == GP_CTL_CANCEL || what == GP_CTL_KILL)
		job->cancel_req = 1;
	if (what != GP_CTL_KILL)
		return;
	if (!job->canceled)
		cancel(p, job);
	for (i = 0; i < p->nw; i++)
		if (p->w[i].state == GP_W_BUSY)
			gp_proc_kill(&p->w[i]);
}

/* w holds no batch any more: nothing in flight, no stop or kill aimed at
 * an item of it. */
static void
batch_reset(struct gp_worker *w)
{
	w->nfl = w->nres = 0;
	w->stop_id = 0;
	w->kill_at = 0;
}

static int
on_results(struct gp_pool *p, struct gp_job *job, struct gp_worker *w,
    const uint8_t *pos, const uint8_t *end)
{
	struct gp_rec_result	 r;
	struct gp_item		*it;
	struct gp_res		 res;
	const uint8_t		*data;
	int			 rc;

	if (p->o.timeout_ms > 0)
		w->heard = gp_now_ns();
	while ((rc = gp_msg_result_next(&pos, end, &r, &data)) == 1) {
		if (job == NULL || w->nres >= w->nfl ||
		    w->fl[w->nres].id != r.id)
			return -EPROTO;
		if ((r.flags & GP_REC_SHM) &&
		    (data = gp_data_bytes(w, 1, &w->roff, r.len,
		    p->o.window)) == NULL)
			return -EPROTO;
		res = (struct gp_res){ data, r.len, NULL };
		/* Pieces only where there are some: this loop runs per
		 * item, a million times a second on tiny ones. */
		if (((r.flags & GP_REC_PIECED) || w->pres.id != 0 ||
		    w->pitem.id != 0) && gp_data_result(w, &r, &res) < 0)
			return -EPROTO;
		it = w->fl[w->nres++].item;
		rc = gp_job_result(job, it, &r, &res,
		    w->stop_id == r.id && w->stop_timeout, p->o.retries);
		if (res.own != NULL)
			free(res.own);	/* pieces the item did not keep */
		if (rc < 0)
			return rc;
	}
	if (rc < 0)
		return -EPROTO;
	if (w->nres == w->nfl) {
		/* It is the next to get work (dispatch() starts at p->rr):
		 * the most recently idle worker is the one whose pages are
		 * in cache and whose CPU is awake. With one item in flight
		 * the same worker runs every item (bench_pool's round trip
		 * measures it: docs/benchmarks.md). */
		p->rr = w->idx;
		gp_watch_end(p, w);
		batch_reset(w);
		w->state = GP_W_IDLE;
		if (p->o.max_tasks > 0 && w->ntasks >= p->o.max_tasks) {
			size_t	 at;

			/* Recycle: it leaves; lost() replaces it. Its fini
			 * gets the grace period, as a stopping item does: a
			 * hung one must not hold the slot for ever. */
			if ((rc = gp_msg_begin(&w->wbuf, GP_MSG_QUIT, &at)) < 0)
				return rc;
			gp_msg_finish(&w->wbuf, at, 0);
			(void)gp_buf_send(w->wfd, &w->wbuf);
			w->state = GP_W_QUITTING;
			w->kill_at = gp_now_ns() +
			    (int64_t)p->o.grace_ms * 1000000;
		}
	}
	return 0;
}

static int
on_ready(struct gp_worker *w, const uint8_t *pl)
{
	if (w->state != GP_W_STARTING)
		return -EPROTO;
	memcpy(&w->ready, pl, sizeof(w->ready));
	w->info.cpubind_rc = w->ready.cpubind_rc;
	w->info.membind_rc = w->ready.membind_rc;
	if (w->ready.fatal)
		w->retired = 1;	/* it leaves; never respawned */
	else {
		w->state = GP_W_IDLE;
		w->start_deaths = 0;
	}
	return 0;
}

/* Read what w sent and act on each whole message. Returns 0, 1 on EOF
 * (or a failed read: a dead peer), -ENOMEM (the call fails; the caller
 * abandons it), or another negative errno for a protocol violation (the
 * caller kills w). */
static int
on_readable(struct gp_pool *p, struct gp_job *job, struct gp_worker *w)
{
	struct gp_msg_hdr	 h;
	const uint8_t		*pl;
	size_t			 max = GP_MSG_MAX(p->o.window);
	size_t			 want = 65536;
	ssize_t			 r;
	long			 m;
	int			 rc, full;

	for (;;) {
		r = gp_buf_recv(w->fd, &w->rbuf, want);
		if (r == -EAGAIN)
			return 0;
		/* No room for the read is our failure, not w's: nothing was
		 * read, the stream is intact, and the call fails as any
		 * other allocation failure does. Taken for EOF, w would be
		 * killed and its items rerun: a call that succeeds. */
		if (r == -ENOMEM)
			return -ENOMEM;
		if (r <= 0)
			return 1;
		full = w->rbuf.len == w->rbuf.cap;
		while ((m = gp_msg_parse(w->rbuf.data + w->rbuf.off,
		    w->rbuf.len - w->rbuf.off, max, &h)) > 0) {
			pl = w->rbuf.data + w->rbuf.off + sizeof(h);
			if (h.type == GP_MSG_READY)
				rc = on_ready(w, pl);
			else if (w->state != GP_W_BUSY)
				rc = -EPROTO;
			else if (h.type == GP_MSG_RESULT)
				rc = on_results(p, job, w, pl, pl + h.len);
			else if (h.type == GP_MSG_PIECE)
				rc = gp_data_result_piece(p, job, w, &h, pl);
			else if (h.type == GP_MSG_ACK)
				rc = gp_data_item_acked(p, w, &h, pl);
			else
				rc = -EPROTO;
			if (rc < 0)
				return rc;
			gp_buf_consume(&w->rbuf, (size_t)m);
		}
		if (m < 0)
			return (int)m;
		/* Room for the rest of a large message in one go. */
		want = (w->rbuf.len - w->rbuf.off >= sizeof(h)) ?
		    sizeof(h) + h.len : 65536;
		if (!full)
			return 0;	/* a short read drained the pipe */
	}
}

/* w's channel closed: reap it, settle its batch, replace it. */
static int
lost(struct gp_pool *p, struct gp_job *job, struct gp_worker *w)
{
	enum gp_wstate	 was = w->state;
	int64_t		 started;
	uint64_t	 cur = gp_proc_current(w, &started);
	int		 status = 0, code, rc = 0;

	/* An item still going out in pieces is what it was doing: a death
	 * there is that item's (a worker that cannot hold it in memory
	 * must not take it again and again until the budget is spent). */
	if (cur == 0)
		cur = w->pitem.id;
	gp_data_forget(w);
	gp_proc_reap(w, &status);
	gp_watch_end(p, w);
	code = gp_wstatus_code(status);
	w->status = status;
	if (job != NULL)
		rc = gp_job_lost(job, w, cur, code, p->o.retries);
	batch_reset(w);
	w->proto_err = 0;
	gp_proc_lost(p, w, was, job != NULL, rc == 0);
	return rc;
}

/* Earliest deadline in ns, or -1 for none; starts due timeouts. */
static int64_t
expire(struct gp_pool *p, int64_t now)
{
	struct gp_worker	*w;
	int64_t			 dl = -1, t, started;
	uint64_t		 cur;
	int			 i;

	for (i = 0; i < p->nw; i++) {
		w = &p->w[i];
		if (w->state == GP_W_DEAD)
			continue;
		if (w->kill_at > 0) {
			if (now >= w->kill_at) {
				gp_proc_kill(w);	/* EOF follows */
				w->kill_at = 0;
				continue;
			}
			t = w->kill_at;
		} else if (w->state == GP_W_BUSY && p->o.timeout_ms > 0 &&
		    w->stop_id == 0) {
			/* Between items the next one starts after the last
			 * message from w at the earliest: wake then, look
			 * again. */
			cur = gp_proc_current(w, &started);
			if (cur == 0)
				started = w->heard;
			t = started + (int64_t)p->o.timeout_ms * 1000000;
			if (cur != 0 && now >= t) {
				queue_stop(p, w, cur, 1, now);
				t = w->kill_at;
			} else if (t <= now)
				t = now + (int64_t)p->o.timeout_ms * 1000000;
		} else
			continue;
		if (dl < 0 || t < dl)
			dl = t;
	}
	return dl;
}

/* The call is over; at start-up (job NULL), every worker is READY or
 * failed and reaped. */
static int
run_done(const struct gp_pool *p, const struct gp_job *job)
{
	int	 i;

	if (job == NULL) {
		/* Start-up: every worker READY, or failed and reaped. */
		for (i = 0; i < p->nw; i++)
			if (p->w[i].state == GP_W_STARTING ||
			    (p->w[i].retired && p->w[i].state != GP_W_DEAD))
				return 0;
		return 1;
	}
	return gp_job_done(job);
}

/* The loop's poll set, kept with the pool (at most 3 x GP_MAX_WORKERS + 5
 * entries: too much for the stack of every call); freed by
 * gp_loop_release(). */
static int
pollset_alloc(struct gp_pool *p)
{
	size_t	 cap = 3 * (size_t)p->nw + 5;

	if ((p->ps.pfd = calloc(cap, sizeof(*p->ps.pfd))) == NULL)
		return -ENOMEM;
	if ((p->ps.ref = calloc(cap, sizeof(*p->ps.ref))) == NULL) {
		free(p->ps.pfd);
		p->ps.pfd = NULL;
		return -ENOMEM;
	}
	p->ps.spin = -1;
	return 0;
}

void
gp_loop_release(struct gp_pool *p)
{
	free(p->ps.pfd);
	free(p->ps.ref);
	p->ps.pfd = NULL;
	p->ps.ref = NULL;
}

/* Add fd to the poll set, for worker w (NULL: a fd of the call's).
 * Returns its index. */
static int
pollset_add(struct gp_pollset *ps, int fd, short events, struct gp_worker *w)
{
	ps->pfd[ps->n].fd = fd;
	ps->pfd[ps->n].events = events;
	ps->pfd[ps->n].revents = 0;
	ps->ref[ps->n].w = w;
	ps->ref[ps->n].pid = w != NULL ? w->pid : 0;
	return ps->n++;
}

/* This turn's poll set, rebuilt from the workers' states: each live
 * worker's result pipe and pidfd, its task pipe while bytes wait to go,
 * then the monitor's, the cancel, ctl and feed fds. *due is when the
 * next GPU sample is (-1: none). Returns the number of entries, or
 * -EDEADLK when nothing could wake the poll. */
static int
fill(struct gp_pool *p, struct gp_job *job, int64_t now, int64_t *due)
{
	struct gp_pollset	*ps = &p->ps;
	int64_t			 hdue = -1;
	int			 i, mfd, lfd;

	ps->n = 0;
	ps->cfd = ps->kfd = ps->ffd = ps->mfd = ps->lfd = -1;
	*due = -1;
	for (i = 0; i < p->nw; i++) {
		if (p->w[i].state == GP_W_DEAD)
			continue;
		pollset_add(ps, p->w[i].fd, POLLIN, &p->w[i]);
		if (p->w[i].wbuf.len > p->w[i].wbuf.off)
			pollset_add(ps, p->w[i].wfd, POLLOUT, &p->w[i]);
		if (p->w[i].pidfd >= 0)
			pollset_add(ps, p->w[i].pidfd, POLLIN, &p->w[i]);
	}
	ps->nw = ps->n;
	if (job == NULL)
		return ps->n;
	if ((mfd = gp_watch_fd(p, job, now, due)) >= 0)
		ps->mfd = pollset_add(ps, mfd, POLLIN, NULL);
	if ((lfd = gp_hold_fd(p, now, &hdue)) >= 0)
		ps->lfd = pollset_add(ps, lfd, POLLIN, NULL);
	if (hdue >= 0 && (*due < 0 || hdue < *due))
		*due = hdue;
	if (!job->canceled && (p->o.flags & GP_POOL_CANCEL_FD))
		ps->cfd = pollset_add(ps, p->o.cancel_fd, POLLIN, NULL);
	if (job->feed != NULL && job->feed->ctl != NULL &&
	    job->feed->ctl_fd >= 0)
		ps->kfd = pollset_add(ps, job->feed->ctl_fd, POLLIN, NULL);
	if (job->feed_wait && !job->feed_nofd && job->feed->in_fd >= 0)
		ps->ffd = pollset_add(ps, job->feed->in_fd, POLLIN, NULL);
	else if (job->feed_wait && job->running == 0 && ps->kfd < 0 &&
	    *due < 0 && ps->mfd < 0)
		return -EDEADLK;	/* nothing can wake us */
	return ps->n;
}

/* The call's own fds: cancel_fd, the feed's in_fd and ctl_fd. */
static void
on_call_fds(struct gp_pool *p, struct gp_job *job)
{
	struct gp_pollset	*ps = &p->ps;

	if (ps->mfd >= 0 && ps->pfd[ps->mfd].revents)
		gp_watch_read(p);
	if (ps->lfd >= 0 && ps->pfd[ps->lfd].revents)
		gp_hold_read(p);
	if (ps->cfd >= 0 && ps->pfd[ps->cfd].revents)
		job->cancel_req = 1;
	if (ps->ffd >= 0 && ps->pfd[ps->ffd].revents)
		job->feed_wait = 0;
	if (ps->kfd >= 0 && ps->pfd[ps->kfd].revents) {
		control(p, job, job->feed->ctl(job->feed->arg));
		job->feed_wait = 0;	/* ctl() may bring items */
	}
}

/* Poll entry i, a worker's. Returns 0, or a negative errno: the call
 * fails. */
static int
on_worker_fd(struct gp_pool *p, struct gp_job *job, int i)
{
	struct gp_worker	*w = p->ps.ref[i].w;
	struct pollfd		*pfd = &p->ps.pfd[i];
	int			 rc;

	if (w->pid != p->ps.ref[i].pid || !pfd->revents)
		return 0;	/* reaped (and replaced) already */
	/* A failed send means a dead peer: its result pipe or pidfd says
	 * so. */
	if (pfd->fd == w->wfd) {
		(void)gp_buf_send(w->wfd, &w->wbuf);
		return 0;
	}
	rc = on_readable(p, job, w);
	if (rc == 0 && pfd->fd == w->pidfd)
		rc = 1;	/* exited; its last words are read */
	if (rc < 0 && rc != -ENOMEM) {
		/* It broke the protocol: it cannot be trusted with another
		 * item. */
		w->proto_err = rc;
		gp_proc_kill(w);
		rc = 1;
	}
	if (rc < 0)
		return rc;
	if (rc == 1 && (rc = lost(p, job, w)) < 0)
		return rc;
	if (job != NULL)
		job->feed_wait = 0;
	return 0;
}

/* Act on what the poll returned. Returns 0 or a negative errno. */
static int
handle(struct gp_pool *p, struct gp_job *job)
{
	int	 i, rc;

	if (job != NULL)
		on_call_fds(p, job);
	for (i = 0; i < p->ps.nw; i++)
		if ((rc = on_worker_fd(p, job, i)) < 0)
			return rc;
	if (job != NULL && job->cancel_req && !job->canceled)
		cancel(p, job);
	return 0;
}

int
gp_loop_run(struct gp_pool *p, struct gp_job *job)
{
	int64_t		 dl, now, due = -1;
	int		 n, rc;

	if (p->ps.pfd == NULL && (rc = pollset_alloc(p)) < 0)
		return rc;
	for (;;) {
		if (job != NULL && !job->canceled) {
			gp_proc_respawn(p);
			if ((rc = gp_dispatch(p, job)) < 0)
				return rc;
		}
		if (run_done(p, job)) {
			if (job != NULL)
				gp_hold_idle(p);
			return 0;
		}
		if (job != NULL && gp_proc_live(p) == 0)
			return GP_ENOWORKER;
		now = gp_now_ns();
		if ((n = fill(p, job, now, &due)) < 0)
			return n;
		dl = expire(p, now);
		if (due >= 0 && (dl < 0 || due < dl))
			dl = due;
		if (gp_poll_spin(p->ps.pfd, (nfds_t)n, gp_poll_ms(dl, now),
		    &p->ps.spin) == -1) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if ((rc = handle(p, job)) < 0)
			return rc;
	}
}

/*
 * gp_loop_run() failed (-ENOMEM, a poll error) in the middle of a call.
 * Workers holding a batch, or a half-built one, would later write into the
 * caller's items and read a broken message: kill and reap them (their
 * buffers are dropped when the slot is started again). Their items end
 * GP_ERROR with the call's code, as does an item whose own result or
 * retry could not be kept (on_results(), lost()); queued ones stay
 * GP_NOTRUN (gp_pool_run(): done() is called for each, once). The
 * slots are replaced by the next call, outside the respawn budget: these
 * deaths are the library's doing.
 */
void
gp_loop_abandon(struct gp_pool *p, struct gp_job *job, int rc)
{
	struct gp_worker	*w;
	size_t			 i;
	int			 k, status;

	for (k = 0; k < p->nw; k++) {
		w = &p->w[k];
		/* A recycled worker holds no item and keeps its deadline:
		 * a hung fini is still killed (expire()). */
		if (w->state == GP_W_QUITTING)
			continue;
		if ((w->state == GP_W_IDLE || w->state == GP_W_BUSY) &&
		    (w->nfl > 0 || w->wbuf.len > w->wbuf.off)) {
			gp_proc_kill(w);
			/* buffers: gp_proc_spawn() */
			gp_proc_reap(w, &status);
		}
		for (i = w->nres; i < w->nfl; i++)
			(void)gp_job_fail(job, w->fl[i].item, rc);
		gp_data_forget(w);
		gp_watch_end(p, w);
		batch_reset(w);
	}
	gp_hold_idle(p);
	gp_job_abandon(job);
}

int
gp_loop_wait_ready(struct gp_pool *p)
{
	int	 rc, i;

	if ((rc = gp_loop_run(p, NULL)) < 0)
		return rc;
	for (i = 0; i < p->nw; i++)
		if (p->w[i].retired)
			return GP_EINIT;
	return 0;
}
