/*
 * run.c: one run of gpupool-run in the master process: a single gp_run()
 * call whose feed streams the tasks file (next), records each attempt in
 * the joblog, retries failures and has each task's output printed as a
 * block (done), and turns SIGINT, SIGTERM and SIGHUP, read from a
 * signalfd, into cancel and kill requests (ctl); rank 0's side of the
 * ranks protocol; the exit status. Nothing here runs in a worker (but
 * worker_init()) or in a signal handler: the signals are blocked once the
 * pool is up, right before the signalfd that reads them is polled
 * (workers reset their own mask). What the run writes goes through
 * output.c.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define POOL_GRACE_EXTRA_MS	2000	/* the worker kills first */
#define BACKSTOP_EXTRA_MS	5000
#define BAR_TICK_MS		1000	/* redraw while the run goes */
#define QUEUE_WORK_S		0.02	/* work queued per slot on a rank */
#define QUEUE_MAX		64	/* tasks queued per slot on a rank */

/* In each worker: a SIGTERM or SIGHUP sent to the whole process group
 * (a launcher ending an MPI job, systemd, a closed terminal) is the
 * master's to act on, as ^C is: it stops the tasks (TERM, grace, KILL)
 * and records them. Workers still leave with the master (EOF on their
 * stop fd); tasks start with every signal at its default. The joblog and
 * --results DIR are locked before the pool forks (nothing may wait on a
 * lock once ranks are up): the worker's copies of the locked fds go, or
 * the locks would outlive a SIGKILLed master for as long as its workers
 * (a second run told to wait for a dead pid). An OFD lock stays with the
 * master's descriptor. arg is the run (NULL: none, no pool that forks). */
static int
worker_init(struct gp_ctx *ctx, void *arg)
{
	struct run	*r = arg;

	(void)signal(SIGTERM, SIG_IGN);
	(void)signal(SIGHUP, SIG_IGN);
	if (r != NULL && r->jl.fd > STDERR_FILENO) {
		close(r->jl.fd);
		r->jl.fd = -1;
	}
	if (r != NULL && r->rlock >= 0) {
		close(r->rlock);
		r->rlock = -1;
	}
	return 0;
}

/* hwloc reads the whole of a topology file: /dev/zero would never end,
 * a FIFO with no writer never start. Only a regular file will do. */
static int
topology_check(const char *path, const char *what)
{
	struct stat	 st;

	if (path == NULL || *path == '\0')
		return 0;
	if (stat(path, &st) == -1) {
		cli_err("%s: cannot read '%s': %s", what, path,
		    strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		cli_err("%s: '%s' is not a regular file (an hwloc XML "
		    "topology)", what, path);
		return -1;
	}
	return 0;
}

static void
pool_opts(const struct opts *o, struct gp_pool_opts *po, unsigned flags,
    char *err, size_t errlen)
{
	uint64_t	 b;

	memset(po, 0, sizeof(*po));
	po->gpus = o->gpus;
	po->fake_gpus = o->fake_gpus;
	po->per_gpu = o->per_gpu;
	po->topology_xml = o->topology;
	po->fake_busids = o->fake_busids;
	/* The worker stops its task itself (TERM, grace, KILL); the pool's
	 * own limits are only a backstop for a worker that does not. */
	b = o->grace_ms + POOL_GRACE_EXTRA_MS;
	po->grace_ms = b <= UINT_MAX ? (unsigned)b : UINT_MAX;
	b = o->timeout_ms ? o->timeout_ms + o->grace_ms + BACKSTOP_EXTRA_MS : 0;
	po->timeout_ms = b <= UINT_MAX ? (unsigned)b : 0;
	po->max_msg = 2 * (size_t)OUTPUT_MAX + LINE_MAX_BYTES + 65536;
	po->init = worker_init;
	po->flags = GP_POOL_NO_PDEATHSIG | flags;
	po->errbuf = err;
	po->errlen = errlen;
}

/* The pool of run r (NULL: of no run, as run_pool_create() makes). */
static int
pool_create(const struct opts *o, struct run *r, unsigned flags,
    struct gp_pool **pool)
{
	struct gp_pool_opts	 po;
	char			 err[512];
	int			 rc;

	/* Here, not in main(): with ranks, the one that cannot start says
	 * so to rank 0, which then stops them all. */
	if (topology_check(o->topology, "--topology") < 0 ||
	    (o->topology == NULL && topology_check(getenv("GPUPOOL_TOPOLOGY"),
	    "GPUPOOL_TOPOLOGY") < 0))
		return -EINVAL;
	pool_opts(o, &po, flags, err, sizeof(err));
	po.init_arg = r;
	if ((rc = gp_pool_create(pool, &po)) < 0) {
		cli_err("%s", err[0] ? err : gp_strerror(rc));
		return rc;
	}
	return 0;
}

int
run_pool_create(const struct opts *o, unsigned flags, struct gp_pool **pool)
{
	return pool_create(o, NULL, flags, pool);
}

/* Resume: is seq recorded (as succeeded, for --resume-failed), and with
 * --results, is its exitval there (else its results are incomplete)?
 * Warns once when the joblog has another command under the same Seq. */
int
run_skip(void *arg, unsigned long seq, const char *cmd)
{
	struct run	*r = arg;
	char		*ev;
	int		 have;

	if (!joblog_done(&r->jl, seq, r->o->resume_failed))
		return 0;
	if (r->o->results != NULL) {
		if (asprintf(&ev, "%s/%lu/exitval", r->o->results, seq) == -1)
			return 0;	/* run it rather than guess */
		have = access(ev, F_OK) == 0;
		free(ev);
		if (!have)
			return 0;
	}
	if (joblog_changed(&r->jl, seq, cmd)) {
		r->changed++;
		if (!r->warned_change++)
			cli_warn("task %lu is '%s' but the joblog has another "
			    "command for it: was %s edited? (resume matches "
			    "tasks by number)", seq, cmd, r->o->file);
	}
	return 1;
}

static struct task *
task_new(struct run *r)
{
	struct task_hdr	 h;
	struct task	*t;
	size_t		 need = sizeof(h) + r->in.llen + 1;
	uint8_t		*b;

	if ((t = r->free) != NULL)
		r->free = t->next;
	else if ((t = calloc(1, sizeof(*t))) == NULL)
		return NULL;
	if (need > t->cap) {
		if ((b = realloc(t->buf, need)) == NULL) {
			t->next = r->free;
			r->free = t;
			return NULL;
		}
		t->buf = b;
		t->cap = need;
	}
	memcpy(t->buf + sizeof(h), r->in.line, r->in.llen + 1);
	t->item.in = t->buf;
	t->item.inlen = need;
	t->seq = r->in.seq;
	t->line = r->in.first;
	t->attempt = 1;
	t->rank = 0;
	t->lost = 0;
	t->next = NULL;
	r->handed++;
	if (r->total >= 0 && r->handed > (unsigned long)r->total)
		r->total = (long)r->handed;	/* the file grew */
	return t;
}

static void
task_free(struct run *r, struct task *t)
{
	/* Keep few large buffers: a 1 MiB task line must not pin 1 MiB in
	 * every pooled task. */
	if (t->cap > 4096) {
		free(t->buf);
		t->buf = NULL;
		t->cap = 0;
	}
	t->next = r->free;
	r->free = t;
}

static const char *
task_cmd(const struct task *t)
{
	return (const char *)t->buf + sizeof(struct task_hdr);
}

/* Fill in the header and stamp a task as handed out to rank. */
static void
hand(struct run *r, struct task *t, int rank)
{
	rp_task_hdr(t->buf, t->item.inlen, t->seq, t->attempt);
	t->item.out = NULL;
	t->item.outlen = 0;
	t->item.status = GP_NOTRUN;
	t->item.code = 0;
	t->item.worker = -1;
	t->item.attempts = 0;
	t->rank = rank;
	t->lost = 0;
	t->real_ns = gp_clock_ns(CLOCK_REALTIME);
	t->mono_ns = gp_now_ns();
	r->inflight++;
	bar_draw(r, 0);
}

static void	ranks_ctl(struct run *, int);

/* Read no more input: EOF, an error, or halting. */
static void
input_stop(struct run *r)
{
	if (r->input_done)
		return;
	r->input_done = 1;
}

/* Queued retries end as the failures they were. */
static void
requeue_fail(struct run *r)
{
	struct task	*t;

	while ((t = r->rq) != NULL) {
		r->rq = t->next;
		r->failed++;
		task_free(r, t);
	}
	r->rq_tail = NULL;
}

/* Start nothing new. Queued retries end as the failures they were; the
 * other ranks are told to stop (how, the caller says). */
static void
halt_start(struct run *r, int how)
{
	r->halting = 1;
	input_stop(r);
	requeue_fail(r);
	if (how)
		ranks_ctl(r, how);
}

/* The next task to run anywhere: a retry first, then the input.
 * GP_FEED_ITEM (*tp), GP_FEED_AGAIN (pollable input, no whole line yet),
 * or GP_FEED_END (no more input; retries may still come). */
static int
source(struct run *r, struct task **tp)
{
	struct task	*t;
	int		 rc;

	if (!r->halting && (t = r->rq) != NULL) {
		if ((r->rq = t->next) == NULL)
			r->rq_tail = NULL;
		*tp = t;
		return GP_FEED_ITEM;
	}
	while (!r->halting && !r->input_done) {
		rc = tasks_next(&r->in);
		if (rc == TASKS_AGAIN)
			return GP_FEED_AGAIN;
		if (rc == TASKS_LINE) {
			if (run_skip(r, r->in.seq, r->in.line)) {
				r->skipped++;
				continue;
			}
			if ((*tp = task_new(r)) != NULL)
				return GP_FEED_ITEM;
			cli_err("out of memory");
		} else if (rc < 0)
			cli_err("%s", r->in.err);
		if (rc != TASKS_EOF) {
			/* Run no more; let the running ones finish. */
			r->fatal = 1;
			halt_start(r, RC_CANCEL);
		}
		input_stop(r);
	}
	return GP_FEED_END;
}

static int
feed_next(void *arg, struct gp_item **item)
{
	struct run	*r = arg;
	struct task	*t;
	int		 rc;

	/* Until stdout takes more (EV_OUT wakes the pool's poll). */
	if (out_backlog(r))
		return GP_FEED_WAIT;
	if ((rc = source(r, &t)) == GP_FEED_ITEM) {
		hand(r, t, 0);
		*item = &t->item;
		return GP_FEED_ITEM;
	}
	if (rc == GP_FEED_AGAIN)
		return GP_FEED_AGAIN;	/* the pool polls in_fd */
	/* Nothing new will come, but a running task may fail and be
	 * retried, here or on another rank: the end is only when none is
	 * out. */
	return r->inflight > 0 ? GP_FEED_WAIT : GP_FEED_END;
}

static const char *
gpu_of(const struct run *r, int rank, int worker)
{
	const struct peer	*p = &r->peer[rank];

	if (worker < 0 || worker >= p->nw)
		return "-";
	return p->gpu_id[p->w_gpu[worker]];
}

static void
requeue(struct run *r, struct task *t, int front)
{
	t->next = NULL;
	if (front) {
		t->next = r->rq;
		r->rq = t;
		if (r->rq_tail == NULL)
			r->rq_tail = t;
		return;
	}
	if (r->rq_tail != NULL)
		r->rq_tail->next = t;
	else
		r->rq = t;
	r->rq_tail = t;
}

/* One attempt ended, here or on another rank: record it, print its
 * output, retry it or count it. Returns nonzero to cancel the rest. */
static int
finish(struct run *r, struct task *t)
{
	struct gp_item	*it = &t->item;
	struct peer	*p = &r->peer[t->rank];
	struct attempt	 oc;
	struct jl_rec	 jr;
	char		 why[256];
	int		 rc, cancel = 0;

	r->inflight--;
	if (t->rank > 0)
		r->remote--;
	outcome(r, t, &oc);
	if (oc.kind == K_NOTRUN) {
		if (t->rank > 0 && !r->halting) {
			/* A rank gave it back unstarted: it runs elsewhere,
			 * as the same attempt. */
			gp_items_release(it, 1);
			requeue(r, t, 1);
			return 0;
		}
		if (t->attempt > 1)
			r->failed++;	/* its last run failed */
		else
			r->notrun++;
		goto out;
	}
	jr.seq = t->seq;
	jr.start = oc.start;
	jr.runtime = oc.runtime;
	jr.exitval = oc.exitval;
	jr.signal = oc.signal;
	jr.cmd = task_cmd(t);
	jr.gpu = gpu_of(r, t->rank, oc.worker);
	jr.host = r->npeer > 1 ? p->host : ":";
	if ((rc = joblog_append(&r->jl, &jr)) < 0 && !r->jl_broken) {
		/* Without its record a resume would run it again: stop. */
		cli_err("cannot write joblog '%s': %s", r->jl.path,
		    strerror(-rc));
		r->fatal = r->jl_broken = 1;
		halt_start(r, RC_CANCEL);
		cancel = 1;
	}
	if (oc.worker >= 0 && oc.worker < p->nw)
		p->busy_ns[p->w_gpu[oc.worker]] += (int64_t)(oc.runtime * 1e9);
	r->rt_sum += oc.runtime;
	r->rt_n++;
	p->ran++;
	describe(r, &oc, why, sizeof(why));
	if (oc.kind == K_FAILED && (int)t->attempt <= r->o->retries &&
	    !r->halting) {
		note(r, "task %lu failed (%s); retrying, attempt %u of %d",
		    t->seq, why, t->attempt + 1, r->o->retries + 1);
		t->attempt++;
		gp_items_release(it, 1);
		requeue(r, t, 0);
		bar_draw(r, 0);
		return cancel;
	}
	print_output(r, t, &oc);
	if (oc.msglen > 0 && oc.kind == K_OK)
		cli_warn("task %lu: %.*s", t->seq, (int)oc.msglen, oc.msg);
	switch (oc.kind) {
	case K_OK:
		r->ok++;
		break;
	case K_STOPPED:
		r->stopped++;
		break;
	default:
		r->failed++;
		note(r, "task %lu (%s:%lu) failed: %s", t->seq, r->in.name,
		    t->line, why);
		if (r->o->halt != HALT_NEVER && !r->halting &&
		    r->failed >= (unsigned long)r->o->halt_fail) {
			note(r, "halting after %lu failed task%s: %s",
			    r->failed, r->failed == 1 ? "" : "s",
			    r->o->halt == HALT_NOW ? "stopping the running "
			    "ones" : "letting the running ones finish");
			halt_start(r, r->o->halt == HALT_NOW ? RC_CANCEL : 0);
			if (r->o->halt == HALT_NOW)
				cancel = 1;	/* the pool stops the rest */
		}
		break;
	}
out:
	gp_items_release(it, 1);
	task_free(r, t);
	bar_draw(r, 0);
	return cancel | out_halted(r);
}

static int
feed_done(void *arg, struct gp_item *it)
{
	/* The gp_item is the first member of its task. */
	return finish(arg, (struct task *)it);
}

/* Tell every rank still with us what to do now (every rank, before the
 * run knows them: bad input, --dry-run). */
static void
ranks_ctl(struct run *r, int how)
{
	uint8_t	 v[RP_CTL_LEN];
	int	 i;

	rp_ctl_encode(v, how);
	for (i = 1; i < ranks_size(r->rk); i++)
		if (i >= r->npeer || (!r->peer[i].lost && !r->peer[i].bye))
			(void)ranks_send(r->rk, i, RM_CTL, v, sizeof(v));
	if (how == RC_END || how == RC_END_LOST)
		r->ended = 1;
}

/* Tasks a rank may hold: one per slot, plus, when tasks are short, a
 * queue per slot of about QUEUE_WORK_S of work (at most QUEUE_MAX tasks),
 * so that the round trip to rank 0 does not leave its slots idle. Tasks
 * as long as QUEUE_WORK_S never queue behind each other there, so skewed
 * work balances as well as on one machine. */
static size_t
window(const struct run *r, const struct peer *p)
{
	double	 mean, q;

	if (r->rt_n == 0)
		return (size_t)p->nw;
	mean = r->rt_sum / (double)r->rt_n;
	q = mean > 0 ? QUEUE_WORK_S / mean : QUEUE_MAX;
	if (q > QUEUE_MAX)
		q = QUEUE_MAX;
	return (size_t)p->nw * (1 + (size_t)q);
}

static void
input_arm(struct run *r)
{
	struct epoll_event	 ev;

	if (r->in_armed || !r->in.pollable || r->input_done)
		return;
	ev.events = EPOLLIN | EPOLLONESHOT;
	ev.data.u32 = EV_INPUT;
	if (epoll_ctl(r->epfd, EPOLL_CTL_MOD, r->in.fd, &ev) == 0)
		r->in_armed = 1;
}

/* Hand tasks to the ranks with room, the emptiest first. Rank 0's own
 * workers take theirs through feed_next(). */
static void
dispatch(struct run *r)
{
	struct peer	*p, *best;
	struct task	*t;
	size_t		 room, most;
	int		 i, bi, rc;

	if (r->npeer == 1 || r->t0 == 0)
		return;
	while (!out_backlog(r)) {
		best = NULL;
		most = 0;
		bi = 0;
		for (i = 1; i < r->npeer; i++) {
			p = &r->peer[i];
			if (!p->hello || p->bye || p->lost)
				continue;
			room = window(r, p);
			room = room > p->nout ? room - p->nout : 0;
			if (room > most) {
				most = room;
				best = p;
				bi = i;
			}
		}
		if (best == NULL)
			return;
		if ((rc = source(r, &t)) != GP_FEED_ITEM) {
			if (rc == GP_FEED_AGAIN)
				input_arm(r);
			return;
		}
		hand(r, t, bi);
		t->next = best->out;
		best->out = t;
		best->nout++;
		r->remote++;
		if (ranks_send(r->rk, bi, RM_TASKS, t->buf, t->item.inlen) < 0) {
			cli_err("out of memory");
			r->fatal = 1;
			halt_start(r, RC_CANCEL);
		}
	}
}

/* Take back what rank i holds: lost (they fail, or run again when
 * --retries allows) or given back unstarted (they run elsewhere). */
static int
reclaim(struct run *r, int i, int lost)
{
	struct peer	*p = &r->peer[i];
	struct task	*t;
	int		 cancel = 0;

	while ((t = p->out) != NULL) {
		p->out = t->next;
		p->nout--;
		t->lost = lost;
		cancel |= finish(r, t);
	}
	return cancel;
}

static int
lose(struct run *r, int i, const char *why)
{
	struct peer	*p = &r->peer[i];

	if (p->lost || p->bye)
		return 0;
	p->lost = 1;
	r->nlost++;
	ranks_forget(r->rk, i);
	cli_err("rank %d (%s) is lost: %s; %zu of its tasks %s", i,
	    p->host != NULL ? p->host : "?", why, p->nout, r->o->retries > 0 &&
	    !r->halting ? "run again elsewhere if --retries allows" :
	    "are counted failed");
	return reclaim(r, i, 1);
}

static int
on_hello(struct run *r, const struct rmsg *m)
{
	struct peer	*p = &r->peer[m->peer];
	struct rp_hello	 h;
	const char	*s;
	int		 g;

	if (p->hello || rp_hello_parse(m->data, m->len, &h) < 0)
		return -EPROTO;
	p->nw = (int)h.nw;
	p->ngpu = (int)h.ngpu;
	if ((p->w_gpu = calloc(h.nw, sizeof(*p->w_gpu))) == NULL ||
	    (p->gpu_id = calloc(h.ngpu, sizeof(*p->gpu_id))) == NULL ||
	    (p->busy_ns = calloc(h.ngpu, sizeof(*p->busy_ns))) == NULL)
		return -ENOMEM;
	memcpy(p->w_gpu, h.w_gpu, h.nw * sizeof(int32_t));
	if ((p->host = strdup(h.host)) == NULL)
		return -ENOMEM;
	for (g = 0, s = h.gpu_id; g < p->ngpu; g++, s += strlen(s) + 1)
		if ((p->gpu_id[g] = strdup(s)) == NULL)
			return -ENOMEM;
	p->hello = 1;
	return 0;
}

static int
on_results(struct run *r, const struct rmsg *m, int *cancel)
{
	struct peer	*p = &r->peer[m->peer];
	struct rresult	 rr;
	struct task	*t, **tp;
	const uint8_t	*out;
	size_t		 off = 0;
	ssize_t		 n;

	while (off < m->len) {
		if ((n = rp_results_next(m->data, m->len, off, &rr,
		    &out)) < 0)
			return (int)n;
		for (tp = &p->out; (t = *tp) != NULL; tp = &t->next)
			if (t->seq == rr.seq && t->attempt == rr.attempt)
				break;
		if (t != NULL) {	/* else a rank written off spoke */
			*tp = t->next;
			p->nout--;
			t->item.status = rr.status;
			t->item.code = rr.code;
			t->item.attempts = (unsigned)rr.attempts;
			t->item.worker = rr.worker;
			if (rr.outlen > 0) {
				if ((t->item.out = malloc(rr.outlen)) == NULL)
					return -ENOMEM;
				memcpy(t->item.out, out, rr.outlen);
				t->item.outlen = rr.outlen;
			}
			*cancel |= finish(r, t);
		}
		off += (size_t)n;
	}
	return 0;
}

/* Messages from the other ranks. */
static int
on_ranks(struct run *r)
{
	struct rmsg	*m;
	struct peer	*p;
	char		 err[256], why[300];
	int		 rc = 0, cancel = 0, i;

	while ((m = ranks_recv(r->rk, err, sizeof(err))) != NULL) {
		p = &r->peer[m->peer];
		if (p->lost || p->bye) {
			/* Written off, yet it speaks: it must stop. */
			if (p->lost && m->type != RM_BYE && m->type != RM_BEAT) {
				uint8_t v[RP_CTL_LEN];

				rp_ctl_encode(v, RC_KILL);
				(void)ranks_send(r->rk, m->peer, RM_CTL, v,
				    sizeof(v));
			}
			free(m);
			continue;
		}
		switch (m->type) {
		case RM_HELLO:
			rc = on_hello(r, m);
			break;
		case RM_RESULTS:
			rc = on_results(r, m, &cancel);
			break;
		case RM_BYE:
			if (!p->hello)
				cli_err("rank %d could not start (its own "
				    "message says why)", m->peer);
			p->bye = 1;
			ranks_forget(r->rk, m->peer);
			cancel |= reclaim(r, m->peer, 0);
			break;
		case RM_BEAT:
			break;
		default:
			rc = -EPROTO;
			break;
		}
		if (rc < 0) {
			snprintf(why, sizeof(why), "a bad message from it "
			    "(type %d, %zu bytes): %s", m->type, m->len,
			    strerror(-rc));
			cancel |= lose(r, m->peer, why);
			rc = 0;
		}
		free(m);
	}
	if (err[0] != '\0') {
		/* MPI is gone: the run goes on with this rank's slots. */
		cli_err("%s", err);
		r->fatal = 1;
		(void)epoll_ctl(r->epfd, EPOLL_CTL_DEL, ranks_fd(r->rk), NULL);
		for (i = 1; i < r->npeer; i++)
			cancel |= lose(r, i, "MPI failed");
	}
	return cancel ? GP_CTL_CANCEL : GP_CTL_GO_ON;
}

static int
on_timer(struct run *r)
{
	uint64_t	 n;
	char		 why[96];
	int		 i, cancel = 0;

	(void)!read(r->tfd, &n, sizeof(n));
	for (i = 1; i < r->npeer; i++) {
		if (r->peer[i].lost || r->peer[i].bye || !run_silent(r, i))
			continue;
		snprintf(why, sizeof(why), "no word from it for %.1f s "
		    "(--rank-timeout)", (double)r->o->rank_timeout_ms / 1000);
		cancel |= lose(r, i, why);
	}
	bar_draw(r, 0);
	return cancel ? GP_CTL_CANCEL : GP_CTL_GO_ON;
}

int
run_silent(const struct run *r, int peer)
{
	return ranks_silent(r->rk, peer) >= (int64_t)r->o->rank_timeout_ms *
	    1000000;
}

static int
on_signals(struct run *r)
{
	int	 got = run_signals(r);

	bar_winch(r);
	if (got == 0)
		return GP_CTL_GO_ON;
	if (r->nsig == 1) {
		halt_start(r, RC_CANCEL);
		/* No count: a task handed to a worker may not have started
		 * yet, and the summary counts it apart. */
		cli_err("got SIG%s: stopping the running tasks (again to kill "
		    "them now)", sigabbrev_np(r->sig));
		return GP_CTL_CANCEL;
	}
	halt_start(r, RC_KILL);
	cli_err("got SIG%s again: killing the running tasks",
	    sigabbrev_np(r->sig));
	return GP_CTL_KILL;
}

static int
feed_ctl(void *arg)
{
	struct run		*r = arg;
	struct epoll_event	 ev[4];
	struct outq		*q;
	int			 n, i, a, act = GP_CTL_GO_ON;

	n = epoll_wait(r->epfd, ev, 4, 0);
	for (i = 0; i < n; i++) {
		switch (ev[i].data.u32) {
		case EV_SIG:
			a = on_signals(r);
			break;
		case EV_RANKS:
			a = on_ranks(r);
			break;
		case EV_TIMER:
			a = on_timer(r);
			break;
		case EV_OUT:
		case EV_ERR:
			q = ev[i].data.u32 == EV_OUT ? &r->oq : &r->eq;
			q->armed = 0;	/* one shot */
			out_flush(r, q);
			a = out_halted(r) ? GP_CTL_CANCEL : GP_CTL_GO_ON;
			break;
		default:
			r->in_armed = 0;	/* one shot */
			a = GP_CTL_GO_ON;
			break;
		}
		if (a > act)
			act = a;
	}
	dispatch(r);
	return act;
}

/* Open the joblog for appending: --resume keeps it, +FILE too. */
static int
joblog_start(struct run *r)
{
	const char	*path = r->o->joblog;
	char		 err[512];
	int		 keep = r->o->resume || r->o->resume_failed;

	if (path == NULL)
		return 0;
	if (path[0] == '+' && path[1] != '\0') {
		path++;		/* GNU parallel's "append" */
		keep = 1;
	}
	if (joblog_open(&r->jl, path, keep, err, sizeof(err)) < 0) {
		cli_err("%s", err);
		return -1;
	}
	return 0;
}

/* This rank's slots and GPUs, in peer[0]. */
static int
map_workers(struct run *r, struct gp_pool *pool)
{
	struct gp_worker_info	 wi;
	struct peer		*p;
	int			 w;

	r->npeer = ranks_size(r->rk);
	if ((r->peer = calloc((size_t)r->npeer, sizeof(*r->peer))) == NULL)
		return -ENOMEM;
	p = &r->peer[0];
	p->nw = gp_pool_size(pool);
	if ((p->host = strdup(r->rk != NULL ? ranks_host(r->rk) : ":")) ==
	    NULL || (p->w_gpu = calloc((size_t)p->nw, sizeof(*p->w_gpu))) ==
	    NULL || (p->gpu_id = calloc((size_t)p->nw,
	    sizeof(*p->gpu_id))) == NULL || (p->busy_ns = calloc((size_t)p->nw,
	    sizeof(*p->busy_ns))) == NULL)
		return -ENOMEM;
	for (w = 0; w < p->nw; w++) {
		(void)gp_pool_info(pool, w, &wi);
		p->w_gpu[w] = wi.gpu;
		if (wi.gpu >= p->ngpu)
			p->ngpu = wi.gpu + 1;
		if (p->gpu_id[wi.gpu] == NULL &&
		    (p->gpu_id[wi.gpu] = strdup(wi.visible)) == NULL)
			return -ENOMEM;
	}
	p->hello = 1;
	return 0;
}

/* mpirun binds each rank to a core (two ranks or fewer) or a socket by
 * default, and its workers inherit that: say so when it leaves fewer
 * CPUs than slots. */
static void
bound_warn(const struct run *r)
{
	cpu_set_t	 cs;
	long		 online = sysconf(_SC_NPROCESSORS_ONLN);
	int		 n;

	if (sched_getaffinity(0, sizeof(cs), &cs) == -1)
		return;
	n = CPU_COUNT(&cs);
	if (n >= r->peer[0].nw || n >= online)
		return;
	cli_warn("the launcher bound this rank to %d of %ld CPUs: its %d "
	    "slots share them (mpirun --bind-to none, or give srun "
	    "--cpus-per-task; see docs/cluster.md)", n, online, r->peer[0].nw);
}

/*
 * The feed's control fd, an epoll set of: the signalfd; a timer for
 * silent ranks and for the bar; stdout and stderr, one shot each, when
 * a write to it would wait (rank 0); with ranks, the socket to the MPI process and
 * (one shot) a pollable input.
 */
static int
ctl_setup(struct run *r, const sigset_t *set)
{
	struct epoll_event	 ev;
	struct itimerspec	 its;
	struct stat		 so, se;
	struct outq		*q;
	int64_t			 ms = BAR_TICK_MS;
	int			 i;

	if ((r->sfd = signalfd(-1, set, SFD_CLOEXEC | SFD_NONBLOCK)) == -1 ||
	    (r->epfd = epoll_create1(EPOLL_CLOEXEC)) == -1)
		return -errno;
	ev.events = EPOLLIN;
	ev.data.u32 = EV_SIG;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->sfd, &ev) == -1)
		return -errno;
	if (ranks_rank(r->rk) == 0) {
		r->out_same = fstat(STDOUT_FILENO, &so) == 0 &&
		    fstat(STDERR_FILENO, &se) == 0 && so.st_dev == se.st_dev &&
		    so.st_ino == se.st_ino;
		for (i = 0; i < (r->out_same ? 1 : 2); i++) {
			q = i == 0 ? &r->oq : &r->eq;
			/* epoll refuses what never makes a write wait
			 * (EPERM): a regular file, /dev/null. */
			ev.events = EPOLLONESHOT;	/* armed when wanted */
			ev.data.u32 = (uint32_t)q->ev;
			if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, q->fd, &ev) == 0)
				q->poll = 1;
			else if (errno != EPERM)
				return -errno;
		}
		bar_size(r);
	}
	if (r->npeer > 1) {
		ms = (int64_t)r->o->rank_timeout_ms / 4;
		if (ms > 1000)
			ms = 1000;
		if (ms < 10)
			ms = 10;
	} else if (!r->bar)
		return 0;
	if ((r->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC |
	    TFD_NONBLOCK)) == -1)
		return -errno;
	memset(&its, 0, sizeof(its));
	its.it_interval.tv_sec = ms / 1000;
	its.it_interval.tv_nsec = (ms % 1000) * 1000000;
	its.it_value = its.it_interval;
	ev.events = EPOLLIN;
	ev.data.u32 = EV_TIMER;
	if (timerfd_settime(r->tfd, 0, &its, NULL) == -1 ||
	    epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->tfd, &ev) == -1)
		return -errno;
	if (r->npeer == 1)
		return 0;
	ev.data.u32 = EV_RANKS;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, ranks_fd(r->rk), &ev) == -1)
		return -errno;
	if (r->in.pollable) {
		ev.events = EPOLLONESHOT;	/* armed when wanted */
		ev.data.u32 = EV_INPUT;
		if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->in.fd, &ev) == -1)
			return -errno;
	}
	return 0;
}

/* Whether every rank is up; says which are not (a rank that could not
 * start said why, in on_ranks(); a lost one, in lose()). */
static int
all_hello(const struct run *r)
{
	int	 i, all = !r->fatal;

	for (i = 1; i < r->npeer; i++)
		all &= r->peer[i].hello && !r->peer[i].lost;
	return all;
}

/* Until every other rank has said hello (want_bye 0) or bye (1), or is
 * lost. Returns 0, or -EINTR when a signal ended the wait for hellos. */
static int
ranks_wait(struct run *r, int want_bye)
{
	struct pollfd	 pfd;
	int		 i, all;

	pfd.fd = r->epfd;
	pfd.events = POLLIN;
	for (;;) {
		for (i = 1, all = 1; i < r->npeer && all; i++)
			all = r->peer[i].lost || r->peer[i].bye ||
			    (!want_bye && r->peer[i].hello);
		if (all)
			return 0;
		if (poll(&pfd, 1, -1) == -1 && errno != EINTR)
			return -errno;
		/* No pool runs now: what ctl() asks of one has been done,
		 * or is moot. */
		(void)feed_ctl(r);
		if (!want_bye && r->sig)
			return -EINTR;
	}
}

static int
exit_code(const struct run *r)
{
	if (r->sig)
		return 128 + r->sig;
	if (r->fatal)
		return EXIT_FATAL;
	if (r->failed > 100)
		return 101;
	return (int)r->failed;
}

int
run_tasks(struct run *r)
{
	const struct opts	*o = r->o;
	struct run_conf		 conf;
	struct gp_feed		 feed;
	struct gp_pool		*pool = NULL;
	sigset_t		 set;
	int			 rc, rfd = -1;

	r->tty = isatty(STDERR_FILENO);
	r->bar = o->bar || (r->tty && !o->quiet);
	out_attach(r);
	memset(&conf, 0, sizeof(conf));
	conf.timeout_ms = o->timeout_ms;
	conf.grace_ms = o->grace_ms;
	conf.results_fd = -1;
	conf.rank = ranks_rank(r->rk);
	conf.mpi = r->rk != NULL;
	/* Workers are forked with the results directory open. */
	if (o->results != NULL && (rfd = conf.results_fd =
	    results_dir(r, o->results)) < 0)
		goto fail;

	if (pool_create(o, r, 0, &pool) < 0)
		goto fail;
	if (map_workers(r, pool) < 0) {
		cli_err("out of memory");
		goto fail;
	}
	/* Blocked only now, right before the signalfd that reads them is
	 * polled: until then ^C ends gpupool-run as it ends any program,
	 * whatever may make it wait (its workers see their pipes close and
	 * leave). With ranks, main() blocked them before MPI's threads
	 * started. */
	if (run_block_signals(&set) < 0) {
		cli_err("cannot set up signals: %s", strerror(errno));
		goto fail;
	}
	if ((rc = ctl_setup(r, &set)) < 0) {
		cli_err("cannot set up signals: %s", strerror(-rc));
		goto fail;
	}
	if (r->rk != NULL)
		bound_warn(r);
	if (ranks_rank(r->rk) > 0) {
		rc = rank_serve(r, pool, &conf);
		gp_pool_destroy(pool);
		if (rfd >= 0)
			close(rfd);
		return rc;
	}
	/* Every rank's pool is up before anything runs or the joblog is
	 * touched, as with a bad --gpus on one machine. */
	if (r->npeer > 1 && (ranks_wait(r, 0) < 0 || !all_hello(r))) {
		if (r->sig)
			cli_err("got SIG%s while the ranks started",
			    sigabbrev_np(r->sig));
		goto fail;
	}
	/* Only now that the GPUs are known good is an old joblog
	 * truncated (workers closed their copy: worker_init()). */
	if (joblog_start(r) < 0)
		goto fail;

	memset(&feed, 0, sizeof(feed));
	feed.next = feed_next;
	feed.done = feed_done;
	feed.ctl = feed_ctl;
	feed.ctl_fd = r->epfd;
	/* A regular file or /dev/null never makes a read wait. */
	feed.in_fd = r->in.pollable ? r->in.fd : -1;
	feed.arg = r;
	r->t0 = gp_now_ns();
	r->out_on = 1;
	bar_draw(r, 1);
	dispatch(r);
	rc = gp_run(pool, r->fn, &conf, sizeof(conf), &feed);
	if (rc < 0) {
		cli_err("%s", gp_strerror(rc));
		r->fatal = 1;
	}
	if (r->npeer > 1) {
		/* Canceled: what the other ranks still run ends there and
		 * is recorded here. */
		ranks_ctl(r, r->nlost ? RC_END_LOST : RC_END);
		(void)ranks_wait(r, 1);
	}
	requeue_fail(r);	/* canceled before a retry */
	gp_pool_destroy(pool);
	summary(r);
	if (r->sig && r->stopped && o->joblog != NULL && !o->quiet)
		cli_err("%lu stopped task%s recorded with signal %d: "
		    "--resume-failed runs %s again", r->stopped,
		    r->stopped == 1 ? " is" : "s are", SIGTERM,
		    r->stopped == 1 ? "it" : "them");
	out_drain(r);
	if (rfd >= 0)
		close(rfd);
	return exit_code(r);

fail:
	/* Rank 0 stops the run when a rank could not start. */
	if (ranks_rank(r->rk) > 0)
		(void)rank_serve(r, NULL, &conf);
	gp_pool_destroy(pool);
	if (rfd >= 0)
		close(rfd);
	return EXIT_FATAL;
}

int
run_ranks_end(struct run *r, int rc)
{
	int	 clean;

	if (r->rk == NULL)
		return rc;
	if (ranks_rank(r->rk) == 0 && !r->ended)
		ranks_ctl(r, RC_END);	/* the other ranks wait for word */
	clean = r->nlost == 0;
	if (ranks_rank(r->rk) == 0 && !clean && !r->o->quiet)
		cli_err("a rank was lost: ending the MPI job (exit status %d)",
		    rc);
	if (ranks_end(r->rk, clean, rc) < 0 && clean && rc == 0)
		rc = EXIT_FATAL;
	r->rk = NULL;
	return rc;
}

void
run_init(struct run *r, const struct opts *o)
{
	memset(r, 0, sizeof(*r));
	r->o = o;
	r->fn = task_run;
	r->total = -1;
	r->sfd = r->epfd = r->tfd = r->rlock = -1;
	r->oq.fd = STDOUT_FILENO;
	r->oq.ev = EV_OUT;
	r->eq.fd = STDERR_FILENO;
	r->eq.ev = EV_ERR;
	r->halt = halt_start;
	joblog_init(&r->jl);
}

static void
peer_release(struct peer *p)
{
	int	 g;

	for (g = 0; g < p->ngpu && p->gpu_id != NULL; g++)
		free(p->gpu_id[g]);
	free(p->gpu_id);
	free(p->w_gpu);
	free(p->busy_ns);
	free(p->host);
}

void
run_release(struct run *r)
{
	struct task	*t;
	int		 i;

	out_detach(r);
	gp_buf_release(&r->oq.buf);
	gp_buf_release(&r->eq.buf);
	tasks_close(&r->in);
	joblog_release(&r->jl);
	if (r->rlock >= 0)
		close(r->rlock);
	if (r->sfd >= 0)
		close(r->sfd);
	if (r->epfd >= 0)
		close(r->epfd);
	if (r->tfd >= 0)
		close(r->tfd);
	for (i = 0; i < r->npeer; i++)
		peer_release(&r->peer[i]);
	free(r->peer);
	r->peer = NULL;
	r->npeer = 0;
	while ((t = r->free) != NULL) {
		r->free = t->next;
		free(t->buf);
		free(t);
	}
}
