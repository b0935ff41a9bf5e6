/*
 * loop.c: the master. gp_loop_run() is the only place the master blocks:
 * one poll() over the workers' channels (and the cancel and feed fds),
 * woken by I/O or by the earliest real deadline, never by a fixed tick.
 * Children are reaped only one by one (through their pidfd, else by pid),
 * after their channel reports EOF; there is no SIGCHLD handler and no
 * waitpid(-1). Runs only in the master.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "msg.h"

static int	lost(struct gp_pool *, struct gp_job *, struct gp_worker *);

/* Signal a worker through its pidfd where it has one: its pid may name
 * another process by now when the host ignores SIGCHLD (no zombie holds
 * the pid), and a deadline can fire long after a recycled worker left. */
static void
signal_worker(struct gp_worker *w, int sig)
{
	if (w->pidfd >= 0)
		(void)syscall(SYS_pidfd_send_signal, w->pidfd, sig, NULL, 0);
	else
		(void)kill(w->pid, sig);
}

/* SIGKILL a worker and the process group its item declared (a task the
 * worker started): nothing it began may outlive it. */
static void
hard_kill(struct gp_worker *w)
{
	int	 pg = atomic_exchange(&w->shm->pgid, 0);

	if (pg > 0)
		kill(-pg, SIGKILL);
	signal_worker(w, SIGKILL);
}

void
gp_loop_close_fds(struct gp_worker *w)
{
	int	*fds[] = { &w->fd, &w->wfd, &w->tfd, &w->pidfd };
	size_t	 i;

	for (i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
}

/*
 * Two pipes per worker: tasks down, results up. The master also keeps the
 * read end of the task pipe, unused: a write to a worker that died then
 * fills a buffer instead of raising SIGPIPE in a host whose signals are
 * not ours, and the death is seen on the result pipe and the pidfd.
 */
int
gp_loop_spawn(struct gp_pool *p, struct gp_worker *w)
{
	int	 task[2], res[2], rc;
	pid_t	 pid;

	if (pipe2(task, O_CLOEXEC) == -1)
		return -errno;
	if (pipe2(res, O_CLOEXEC) == -1) {
		rc = -errno;
		close(task[0]);
		close(task[1]);
		return rc;
	}
	atomic_store(&w->shm->cur, 0);
	atomic_store(&w->shm->stop, 0);
	atomic_store(&w->shm->pgid, 0);
	/* Unflushed host output would be written twice otherwise. */
	fflush(NULL);
	if ((pid = fork()) == -1) {
		rc = -errno;
		close(task[0]);
		close(task[1]);
		close(res[0]);
		close(res[1]);
		return rc;
	}
	if (pid == 0) {
		close(task[1]);
		close(res[0]);
		gp_worker_main(p, w, task[0], res[1]);
		/* NOTREACHED */
	}
	close(res[1]);
	/* Only the master's own ends: the worker's are other descriptions. */
	(void)fcntl(task[1], F_SETFL, O_NONBLOCK);
	(void)fcntl(res[0], F_SETFL, O_NONBLOCK);
	w->fd = res[0];
	w->wfd = task[1];
	w->tfd = task[0];
	/* Death is seen on the pidfd even when a process the worker forked
	 * still holds its end of the channel open. */
	w->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	w->pid = pid;
	w->state = GP_W_STARTING;
	w->job = 0;
	w->ntasks = 0;
	w->nfl = w->nres = 0;
	w->stop_id = 0;
	w->kill_at = 0;
	w->proto_err = 0;
	w->rbuf.off = w->rbuf.len = 0;
	w->wbuf.off = w->wbuf.len = 0;
	return 0;
}

/* The item w is running and when it began, read consistently. */
static uint64_t
current(struct gp_worker *w, int64_t *started)
{
	uint64_t	 a, b;

	do {
		a = atomic_load_explicit(&w->shm->cur, memory_order_acquire);
		*started = atomic_load_explicit(&w->shm->started,
		    memory_order_acquire);
		b = atomic_load_explicit(&w->shm->cur, memory_order_acquire);
	} while (a != b);
	return a;
}

static int
live_workers(const struct gp_pool *p)
{
	int	 i, n = 0;

	for (i = 0; i < p->nw; i++)
		if (!p->w[i].retired)
			n++;
	return n;
}

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
send_job(struct gp_worker *w, const struct gp_job *job)
{
	uint64_t	 addr = (uint64_t)(uintptr_t)job->fn;
	size_t		 at;
	int		 rc;

	if ((rc = gp_msg_begin(&w->wbuf, GP_MSG_JOB, &at)) < 0 ||
	    (rc = gp_buf_add(&w->wbuf, &addr, sizeof(addr))) < 0 ||
	    (rc = gp_buf_add(&w->wbuf, job->arg, job->arglen)) < 0)
		return rc;
	gp_msg_finish(&w->wbuf, at, 0);
	w->job = job->gen;
	return 0;
}

/* Give one idle worker its next batch. Returns 1 if it got one, 0 if no
 * work is ready, or a negative errno. */
static int
dispatch_one(struct gp_pool *p, struct gp_job *job, struct gp_worker *w)
{
	struct gp_rec_task	 rec = { 0 };
	struct gp_item		*it;
	size_t			 want, bytes = 0, at, lim;
	int			 rc;

	if ((it = gp_job_peek(job)) == NULL)
		return 0;
	if (w->job != job->gen && (rc = send_job(w, job)) < 0)
		return rc;
	want = gp_job_batch_size(job, live_workers(p), p->o.max_tasks,
	    w->ntasks);
	/* Payload bytes, records included: never more than the worker
	 * accepts, which one item of max_msg bytes always fits. */
	lim = GP_MSG_MAX(p->o.max_msg);
	if (lim > GP_BATCH_BYTES)
		lim = GP_BATCH_BYTES;
	if ((rc = gp_msg_begin(&w->wbuf, GP_MSG_TASK, &at)) < 0)
		return rc;
	while (w->nfl < want && (it = gp_job_peek(job)) != NULL) {
		if (it->inlen > p->o.max_msg ||
		    (it->in == NULL && it->inlen > 0)) {
			gp_job_take(job);
			(void)gp_job_fail(job, it,
			    it->in == NULL ? -EINVAL : -EMSGSIZE);
			continue;
		}
		if (w->nfl > 0 && bytes + sizeof(rec) + it->inlen > lim)
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
		if ((rc = gp_buf_add(&w->wbuf, &rec, sizeof(rec))) < 0 ||
		    (rc = gp_buf_add(&w->wbuf, it->in, it->inlen)) < 0)
			return rc;
		bytes += sizeof(rec) + it->inlen;
	}
	if (w->nfl == 0) {
		w->wbuf.len = w->wbuf.off + at;	/* drop the empty header */
		return 0;
	}
	gp_msg_finish(&w->wbuf, at, w->nfl);
	w->nres = 0;
	w->ntasks += (unsigned)w->nfl;
	atomic_store(&w->shm->stop, 0);
	w->state = GP_W_BUSY;
	w->heard = gp_now_ns();
	/* Most batches fit the pipe buffer: send now, skip a poll turn.
	 * A failure means a dead worker: its pidfd or result pipe says so. */
	(void)gp_buf_send(w->wfd, &w->wbuf);
	return 1;
}

/* Idle workers in turn from where the last dispatch stopped, so the
 * stragglers and retries of a run do not all land on GPU 0. */
static int
dispatch(struct gp_pool *p, struct gp_job *job)
{
	int	 k, i, rc, start = p->rr;

	for (k = 0; k < p->nw; k++) {
		i = (start + k) % p->nw;
		if (p->w[i].state != GP_W_IDLE)
			continue;
		if ((rc = dispatch_one(p, job, &p->w[i])) <= 0)
			return rc;
		p->rr = i + 1;
	}
	return 0;
}

/* Replace workers that died, now that there is work for them: a
 * canceled call does not fork what it will not use. */
static void
respawn(struct gp_pool *p)
{
	int	 i;

	for (i = 0; i < p->nw; i++)
		if (p->w[i].state == GP_W_DEAD && !p->w[i].retired &&
		    gp_loop_spawn(p, &p->w[i]) < 0)
			p->w[i].retired = 1;
}

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
			queue_stop(p, &p->w[i], current(&p->w[i], &started),
			    0, now);
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
			hard_kill(&p->w[i]);
}

static int
on_results(struct gp_pool *p, struct gp_job *job, struct gp_worker *w,
    const uint8_t *pos, const uint8_t *end)
{
	struct gp_rec_result	 r;
	struct gp_item		*it;
	const uint8_t		*data;
	int			 rc;

	w->heard = gp_now_ns();
	while ((rc = gp_msg_result_next(&pos, end, &r, &data)) == 1) {
		if (job == NULL || w->nres >= w->nfl ||
		    w->fl[w->nres].id != r.id)
			return -EPROTO;
		it = w->fl[w->nres++].item;
		if ((rc = gp_job_result(job, it, &r, data,
		    w->stop_id == r.id && w->stop_timeout, p->o.retries)) < 0)
			return rc;
	}
	if (rc < 0)
		return -EPROTO;
	if (w->nres == w->nfl) {
		w->nfl = w->nres = 0;
		w->stop_id = 0;
		w->kill_at = 0;
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

/* Read what w sent and act on each whole message. Returns 0, or a
 * negative errno for a protocol violation (the caller kills w), or 1 on
 * EOF. */
static int
on_readable(struct gp_pool *p, struct gp_job *job, struct gp_worker *w)
{
	struct gp_msg_hdr	 h;
	const uint8_t		*pl;
	size_t			 max = GP_MSG_MAX(p->o.max_msg);
	size_t			 want = 65536;
	ssize_t			 r;
	long			 m;
	int			 rc, full;

	for (;;) {
		r = gp_buf_recv(w->fd, &w->rbuf, want);
		if (r == -EAGAIN)
			return 0;
		if (r <= 0)
			return 1;
		full = w->rbuf.len == w->rbuf.cap;
		while ((m = gp_msg_parse(w->rbuf.data + w->rbuf.off,
		    w->rbuf.len - w->rbuf.off, max, &h)) > 0) {
			pl = w->rbuf.data + w->rbuf.off + sizeof(h);
			if (h.type == GP_MSG_READY)
				rc = on_ready(w, pl);
			else if (h.type == GP_MSG_RESULT &&
			    w->state == GP_W_BUSY)
				rc = on_results(p, job, w, pl, pl + h.len);
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

/* P_PIDFD (Linux 5.4), spelled out for libcs that do not name it. */
#define GP_P_PIDFD	((idtype_t)3)

/*
 * waitpid(w->pid) through the pidfd where there is one: when the host
 * ignores SIGCHLD, the kernel reaps the worker itself and its pid can be
 * a host child's by now, which a wait by pid would take (or block on).
 * Returns as waitpid.
 */
static pid_t
wait_worker(struct gp_worker *w, int *status, int flags)
{
	siginfo_t	 si;
	int		 r;

	if (w->pidfd < 0)
		return gp_waitpid(w->pid, status, flags);
	memset(&si, 0, sizeof(si));
	while ((r = waitid(GP_P_PIDFD, (id_t)w->pidfd, &si, WEXITED | flags))
	    == -1 && errno == EINTR)
		;
	if (r == -1 && errno == EINVAL)	/* a pidfd, but no P_PIDFD */
		return gp_waitpid(w->pid, status, flags);
	if (r == -1)
		return -1;
	if (si.si_pid == 0)
		return 0;	/* WNOHANG: still running */
	*status = si.si_code == CLD_EXITED ? W_EXITCODE(si.si_status, 0) :
	    si.si_status | (si.si_code == CLD_DUMPED ? WCOREFLAG : 0);
	return w->pid;
}

static void
reap(struct gp_worker *w, int *status)
{
	pid_t	 r;
	int	 pg;

	if ((r = wait_worker(w, status, WNOHANG)) == 0) {
		/* EOF but still alive (fn closed its channel?): end it. */
		hard_kill(w);
		r = wait_worker(w, status, 0);
	}
	/* ECHILD: the host ignores SIGCHLD, so the kernel reaped it and its
	 * status is gone. Say "unknown", never a made-up exit 0. */
	if (r != w->pid)
		*status = GP_WSTATUS_UNKNOWN;
	/* It died with a task group of its item still declared. */
	if ((pg = atomic_exchange(&w->shm->pgid, 0)) > 0)
		kill(-pg, SIGKILL);
	gp_loop_close_fds(w);
	w->pid = 0;
	w->state = GP_W_DEAD;
}

/* w's channel closed: reap it, settle its batch, replace it. */
static int
lost(struct gp_pool *p, struct gp_job *job, struct gp_worker *w)
{
	enum gp_wstate	 was = w->state;
	int64_t		 started;
	uint64_t	 cur = current(w, &started);
	int		 status = 0, code, rc = 0;

	reap(w, &status);
	code = gp_wstatus_code(status);
	w->status = status;
	if (job != NULL)
		rc = gp_job_lost(job, w, cur, code, p->o.retries);
	w->nfl = w->nres = 0;
	w->stop_id = 0;
	w->kill_at = 0;
	w->proto_err = 0;
	/* Died in start-up: at pool creation it is never respawned (the
	 * create fails); a replacement that dies before READY is a death
	 * like another (a SIGKILL from outside can land there), unless it
	 * keeps dying in start-up. */
	if (was == GP_W_STARTING &&
	    (job == NULL || ++w->start_deaths >= GP_START_DEATHS_MAX))
		w->retired = 1;
	if (w->retired || rc < 0)
		return rc;
	/* respawn() forks its replacement when there is work. A recycled
	 * worker's replacement is free. */
	if (was != GP_W_QUITTING) {
		if (p->respawns == 0)
			w->retired = 1;
		else if (p->respawns > 0)
			p->respawns--;
	}
	return 0;
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
				hard_kill(w);	/* EOF follows */
				w->kill_at = 0;
				continue;
			}
			t = w->kill_at;
		} else if (w->state == GP_W_BUSY && p->o.timeout_ms > 0 &&
		    w->stop_id == 0) {
			/* Between items the next one starts after the last
			 * message from w at the earliest: wake then, look
			 * again. */
			cur = current(w, &started);
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

static int
job_done(const struct gp_pool *p, const struct gp_job *job)
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

int
gp_loop_run(struct gp_pool *p, struct gp_job *job)
{
	struct pollfd	 pfd[3 * GP_MAX_WORKERS + 3];
	struct gp_worker *map[3 * GP_MAX_WORKERS];
	pid_t		 mpid[3 * GP_MAX_WORKERS];
	int64_t		 dl, now;
	int		 i, n, nw, cfd = -1, ffd = -1, kfd = -1, rc;

	for (;;) {
		if (job != NULL && !job->canceled) {
			respawn(p);
			if ((rc = dispatch(p, job)) < 0)
				return rc;
		}
		if (job_done(p, job))
			return 0;
		if (job != NULL && live_workers(p) == 0)
			return GP_ENOWORKER;
		n = nw = 0;
		for (i = 0; i < p->nw; i++) {
			if (p->w[i].state == GP_W_DEAD)
				continue;
			pfd[n].fd = p->w[i].fd;
			pfd[n].events = POLLIN;
			mpid[n] = p->w[i].pid;
			map[n++] = &p->w[i];
			if (p->w[i].wbuf.len > p->w[i].wbuf.off) {
				pfd[n].fd = p->w[i].wfd;
				pfd[n].events = POLLOUT;
				mpid[n] = p->w[i].pid;
				map[n++] = &p->w[i];
			}
			if (p->w[i].pidfd >= 0) {
				pfd[n].fd = p->w[i].pidfd;
				pfd[n].events = POLLIN;
				mpid[n] = p->w[i].pid;
				map[n++] = &p->w[i];
			}
		}
		nw = n;
		if (job != NULL && !job->canceled &&
		    (p->o.flags & GP_POOL_CANCEL_FD)) {
			cfd = n;
			pfd[n].fd = p->o.cancel_fd;
			pfd[n++].events = POLLIN;
		}
		if (job != NULL && job->feed != NULL && job->feed->ctl != NULL &&
		    job->feed->ctl_fd >= 0) {
			kfd = n;
			pfd[n].fd = job->feed->ctl_fd;
			pfd[n++].events = POLLIN;
		}
		if (job != NULL && job->feed_wait && !job->feed_nofd &&
		    job->feed->in_fd >= 0) {
			ffd = n;
			pfd[n].fd = job->feed->in_fd;
			pfd[n++].events = POLLIN;
		} else if (job != NULL && job->feed_wait && job->running == 0 &&
		    kfd < 0)
			return -EDEADLK;	/* nothing can wake us */
		now = gp_now_ns();
		dl = expire(p, now);
		if (poll(pfd, (nfds_t)n, gp_poll_ms(dl, now)) == -1) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (job != NULL && cfd >= 0 && pfd[cfd].revents)
			job->cancel_req = 1;
		if (job != NULL && ffd >= 0 && pfd[ffd].revents)
			job->feed_wait = 0;
		if (job != NULL && kfd >= 0 && pfd[kfd].revents) {
			control(p, job, job->feed->ctl(job->feed->arg));
			job->feed_wait = 0;	/* ctl() may bring items */
		}
		cfd = ffd = kfd = -1;
		for (i = 0; i < nw; i++) {
			struct gp_worker *w = map[i];

			if (w->pid != mpid[i] || !pfd[i].revents)
				continue;	/* reaped (and replaced) already */
			/* A failed send means a dead peer: its result pipe
			 * or pidfd says so. */
			if (pfd[i].fd == w->wfd) {
				(void)gp_buf_send(w->wfd, &w->wbuf);
				continue;
			}
			rc = on_readable(p, job, w);
			if (rc == 0 && pfd[i].fd == w->pidfd)
				rc = 1;	/* exited; its last words are read */
			if (rc < 0 && rc != -ENOMEM) {
				/* It broke the protocol: it cannot be trusted
				 * with another item. */
				w->proto_err = rc;
				hard_kill(w);
				rc = 1;
			}
			if (rc < 0)
				return rc;
			if (rc == 1 && (rc = lost(p, job, w)) < 0)
				return rc;
			if (job != NULL)
				job->feed_wait = 0;
		}
		if (job != NULL && job->cancel_req && !job->canceled)
			cancel(p, job);
	}
}

/*
 * gp_loop_run() failed (-ENOMEM, a poll error) in the middle of a call.
 * Workers holding a batch, or a half-built one, would later write into the
 * caller's items and read a broken message: kill and reap them (their
 * buffers are dropped when the slot is started again). Their items end
 * GP_ERROR with the call's code, as does an item whose own result or
 * retry could not be kept (on_results(), lost()); queued ones stay
 * GP_NOTRUN (gp_run(): done() is called for each, once). The
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
			hard_kill(w);
			reap(w, &status);	/* buffers: gp_loop_spawn() */
		}
		for (i = w->nres; i < w->nfl; i++)
			(void)gp_job_fail(job, w->fl[i].item, rc);
		w->nfl = w->nres = 0;
		w->stop_id = 0;
		w->kill_at = 0;
	}
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

/* QUIT, then TERM, then KILL, each after grace_ms; every worker reaped. */
void
gp_loop_shutdown(struct gp_pool *p)
{
	struct pollfd	 pfd[GP_MAX_WORKERS];
	struct gp_worker *map[GP_MAX_WORKERS];
	int64_t		 step = (int64_t)p->o.grace_ms * 1000000;
	int64_t		 dl = gp_now_ns() + step, now;
	int		 i, n, phase = 0, status;
	size_t		 at;
	char		 drain[4096];

	for (i = 0; i < p->nw; i++) {
		struct gp_worker *w = &p->w[i];

		if (w->state == GP_W_DEAD)
			continue;
		if (gp_msg_begin(&w->wbuf, GP_MSG_QUIT, &at) == 0)
			gp_msg_finish(&w->wbuf, at, 0);
		(void)gp_buf_send(w->wfd, &w->wbuf);
		w->state = GP_W_QUITTING;
	}
	for (;;) {
		for (i = n = 0; i < p->nw; i++) {
			if (p->w[i].state == GP_W_DEAD)
				continue;
			pfd[n].fd = p->w[i].fd;
			pfd[n].events = POLLIN;
			map[n++] = &p->w[i];
		}
		if (n == 0)
			return;
		now = gp_now_ns();
		if (now >= dl) {
			for (i = 0; i < n; i++)
				if (phase == 0)
					signal_worker(map[i], SIGTERM);
				else
					hard_kill(map[i]);
			phase++;
			dl = now + step;
		}
		if (poll(pfd, (nfds_t)n, gp_poll_ms(dl, now)) == -1 &&
		    errno != EINTR)
			phase = 2;	/* cannot wait: kill and reap below */
		for (i = 0; i < n; i++) {
			if (phase >= 2)
				hard_kill(map[i]);
			else if (!pfd[i].revents ||
			    read(pfd[i].fd, drain, sizeof(drain)) > 0)
				continue;
			reap(map[i], &status);
		}
	}
}
