/*
 * feed.c: the feed of rank 0's run and its finish policy. Tasks come
 * from the retry queue first, then the tasks file (feed_source()), skipping
 * what the joblog has for --resume; each is handed out here or to a rank
 * (feed_hand()). Each attempt that ends, here or on a rank (coord.c), is
 * recorded in the joblog, retried while --retries allows, printed and
 * counted, and may halt the run (feed_finish()). Halting starts nothing new
 * and tells the other ranks (feed_halt_start(), feed_ranks_ctl()). The joblog
 * record of an attempt is written before its output is printed and
 * before it is counted: a resume never runs twice what the log has.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "master/master.h"

/* The exit status DIR/SEQ/exitval holds, or -1: none (not ended, or its
 * results incomplete), -2: not a status. */
static int
exitval_of(const char *dir, unsigned long seq)
{
	char	*ev, buf[16];
	ssize_t	 n;
	int	 fd, v;

	if (asprintf(&ev, "%s/%lu/exitval", dir, seq) == -1)
		return -2;	/* run it rather than guess */
	fd = open(ev, O_RDONLY | O_CLOEXEC);
	free(ev);
	if (fd == -1)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -2;
	buf[n] = '\0';
	return sscanf(buf, "%d", &v) == 1 && v >= 0 ? v : -2;
}

/* Resume: is seq recorded (as succeeded, for --resume-failed), and with
 * --results, is its exitval there (else its results are incomplete)?
 * Without a joblog, --results DIR alone says it, as GNU parallel reads
 * it. Warns once when the joblog has another command under the same
 * Seq. --retry-failed's tasks are the joblog's own: none is skipped. */
int
feed_skip(void *arg, unsigned long seq, const char *cmd)
{
	struct run	*r = arg;
	int		 ev;

	if (r->o->retry_failed || !(r->o->resume || r->o->resume_failed))
		return 0;
	if (r->o->joblog != NULL && !joblog_done(&r->jl, seq,
	    r->o->resume_failed))
		return 0;
	if (r->o->results != NULL) {
		ev = exitval_of(r->o->results, seq);
		if (ev < 0 || (r->o->joblog == NULL && r->o->resume_failed &&
		    ev != 0))
			return 0;
	}
	if (r->o->joblog != NULL && joblog_changed(&r->jl, seq, cmd)) {
		r->changed++;
		if (!r->warned_change++)
			out_warn("task %lu is '%s' but the joblog has another "
			    "command for it: was %s edited? (resume matches "
			    "tasks by number)", seq, cmd, r->in.grid != NULL ?
			    "the grid" : r->o->file);
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
	t->nth = r->in.nth;
	t->cmd = r->in.cmd;
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

void
feed_task_free(struct run *r, struct task *t)
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

/* Its command, without the tag of its line. */
static const char *
task_cmd(const struct task *t)
{
	return (const char *)t->buf + sizeof(struct task_hdr) + t->cmd;
}

/*
 * The most an attempt needing memory on each of m GPUs could be given:
 * the m-th largest of the GPUs' totals less what others hold there (the
 * driver's share, other users' processes), as the last sample saw them;
 * 0 when no GPU's size is known (or no memory for the count).
 */
static uint64_t
room_for(struct gp_pool *pool, int m)
{
	struct gp_gpu_state	 st;
	uint64_t		*room, best = 0;
	int			 i, k, c, n;

	n = pool != NULL ? gp_pool_gpus(pool) : 0;
	if (n == 0 || (room = calloc((size_t)n, sizeof(*room))) == NULL)
		return 0;
	for (i = 0; i < n; i++)
		if (gp_pool_gpu_state(pool, i, &st) == 0 &&
		    st.mem_total > st.mem_foreign)
			room[i] = st.mem_total - st.mem_foreign;
	for (i = 0; i < n; i++) {
		for (k = 0, c = 0; k < n; k++)
			c += room[k] >= room[i];
		if (c >= m && room[i] > best)
			best = room[i];
	}
	free(room);
	return best;
}

/* After a GPU out-of-memory failure: the next attempt declares more
 * memory, twice what it declared or a quarter over the peak it reached,
 * whichever is more, but no more than others leave free of the GPUs here
 * (room_for()): a need that cannot start would wait for ever. Nothing
 * known of either, or no more to ask: as it was. 0, or -ENOMEM (it
 * retries as it was). */
static int
task_more_mem(struct run *r, struct task *t, const struct attempt *oc)
{
	struct gp_need	 nd;
	const char	*line = (const char *)t->buf + sizeof(struct task_hdr);
	uint64_t	 mem, top;
	size_t		 cap = t->item.inlen + 64;
	uint8_t		*b;
	int		 n;

	need_for_item(r->o->mem, r->o->gpus_per_task, &t->item, &nd);
	mem = 2 * nd.mem;
	if (oc->gpu_mem + oc->gpu_mem / 4 > mem)
		mem = oc->gpu_mem + oc->gpu_mem / 4;
	top = room_for(r->pool, nd.gpus > 1 ? nd.gpus : 1);
	if (top > 0 && mem > top)
		mem = top;
	if (mem == 0 || mem <= nd.mem)
		return 0;
	if ((b = malloc(cap)) == NULL)
		return -ENOMEM;
	if ((n = need_retag(line, mem, (char *)b + sizeof(struct task_hdr),
	    cap - sizeof(struct task_hdr))) < 0) {
		free(b);
		return n;
	}
	out_note(r, "task %lu ran out of GPU memory; its next attempt declares "
	    "%.1f GiB", t->seq, (double)mem / (1u << 30));
	free(t->buf);
	t->buf = b;
	t->cap = cap;
	t->item.in = b;
	t->item.inlen = sizeof(struct task_hdr) + (size_t)n + 1;
	t->cmd = (size_t)(strchr((char *)b + sizeof(struct task_hdr), ']') -
	    ((char *)b + sizeof(struct task_hdr))) + 2;
	return 0;
}

void
feed_need(void *arg, const struct gp_item *it, struct gp_need *need)
{
	const struct opts	*o = ((struct run *)arg)->o;

	need_for_item(o->mem, o->gpus_per_task, it, need);
}

int
feed_pace_setup(struct run *r)
{
	struct epoll_event	 ev;

	if (r->o->delay_ms == 0)
		return 0;
	if ((r->dfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC |
	    TFD_NONBLOCK)) == -1)
		return -errno;
	ev.events = EPOLLIN;
	ev.data.u32 = EV_DELAY;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->dfd, &ev) == -1)
		return -errno;
	return 0;
}

void
feed_pace_wake(struct run *r)
{
	uint64_t	 n;

	(void)read(r->dfd, &n, sizeof(n));
}

/*
 * --delay: whether a task may be handed out now, DELAY after the last
 * one. If not, the timer is set to when one may (an absolute time, so
 * that setting it again is harmless) and EV_DELAY wakes the feed then.
 * Paced as they are handed out, on rank 0 for every rank: a task starts
 * as its slot's worker gets it (coord.c's window() queues nothing on a
 * rank with --delay, where a task would wait for a slot).
 */
static int
pace(struct run *r)
{
	struct itimerspec	 its;
	int64_t			 due;

	if (r->o->delay_ms == 0 || r->last_hand == 0)
		return 1;
	due = r->last_hand + (int64_t)r->o->delay_ms * 1000000;
	if (gp_now_ns() >= due)
		return 1;
	memset(&its, 0, sizeof(its));
	its.it_value.tv_sec = due / 1000000000;
	its.it_value.tv_nsec = due % 1000000000;
	if (timerfd_settime(r->dfd, TFD_TIMER_ABSTIME, &its, NULL) == -1)
		return 1;	/* cannot happen; rather early than never */
	return 0;
}

/* --timeout N%: N% of the median runtime of the tasks that succeeded so
 * far, in ms (at least 1); 0 before the first (GNU parallel's rule: no
 * limit until one is known). */
static uint64_t
task_timeout(const struct run *r)
{
	double	 med = median_get(&r->ok_rt), ms;

	if (r->o->timeout_pct <= 0 || med < 0)
		return 0;
	ms = med * r->o->timeout_pct * 10;	/* s x N / 100 x 1000 */
	return ms < 1 ? 1 : (uint64_t)ms + 1;
}

/* Fill in the header and stamp a task as handed out to rank. */
void
feed_hand(struct run *r, struct task *t, int rank)
{
	struct task_hdr	 h;

	t->timeout_ms = task_timeout(r);
	memset(&h, 0, sizeof(h));
	h.seq = t->seq;
	h.attempt = t->attempt;
	h.timeout_ms = t->timeout_ms;
	rp_task_encode(t->buf, t->item.inlen, &h);
	gp_item_init(&t->item, t->item.in, t->item.inlen);
	t->rank = rank;
	t->lost = 0;
	t->real_ns = gp_clock_ns(CLOCK_REALTIME);
	t->mono_ns = gp_now_ns();
	r->last_hand = t->mono_ns;
	r->inflight++;
	out_bar_draw(r, 0);
}

/* Read no more input: EOF, an error, or halting. */
static void
input_stop(struct run *r)
{
	if (r->input_done)
		return;
	r->input_done = 1;
}

/* Start nothing new. Queued retries end as the failures they were; the
 * other ranks are told to stop (how, the caller says). */
void
feed_halt_start(struct run *r, int how)
{
	r->halting = 1;
	input_stop(r);
	feed_requeue_fail(r);
	if (how)
		feed_ranks_ctl(r, how);
}

/* Tell every rank still with us what to do now (every rank, before the
 * run knows them: bad input, --dry-run). */
void
feed_ranks_ctl(struct run *r, int how)
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

/* The next task to run anywhere: a retry first, then the input.
 * GP_FEED_ITEM (*tp), GP_FEED_AGAIN (pollable input, no whole line yet),
 * GP_FEED_WAIT (--delay: not yet) or GP_FEED_END (no more input; retries
 * may still come). */
int
feed_source(struct run *r, struct task **tp)
{
	struct task	*t;
	int		 rc;

	if (!r->halting && (r->rq != NULL || !r->input_done) && !pace(r))
		return GP_FEED_WAIT;
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
			if (feed_skip(r, r->in.seq, r->in.line + r->in.cmd)) {
				r->skipped++;
				order_done(r, r->in.nth);	/* holds none */
				continue;
			}
			if ((*tp = task_new(r)) != NULL)
				return GP_FEED_ITEM;
			out_err("out of memory");
		} else if (rc < 0)
			out_err("%s", r->in.err);
		if (rc != TASKS_EOF) {
			/* Run no more; let the running ones finish. */
			r->fatal = 1;
			feed_halt_start(r, RC_CANCEL);
		}
		input_stop(r);
	}
	return GP_FEED_END;
}

int
feed_next(void *arg, struct gp_item **item)
{
	struct run	*r = arg;
	struct task	*t;
	int		 rc;

	/* Until stdout takes more (EV_OUT wakes the pool's poll). */
	if (out_backlog(r))
		return GP_FEED_WAIT;
	if ((rc = feed_source(r, &t)) == GP_FEED_ITEM) {
		feed_hand(r, t, 0);
		*item = &t->item;
		return GP_FEED_ITEM;
	}
	if (rc == GP_FEED_AGAIN)
		return GP_FEED_AGAIN;	/* the pool polls in_fd */
	if (rc == GP_FEED_WAIT)
		return GP_FEED_WAIT;	/* --delay: EV_DELAY wakes ctl() */
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

void
feed_requeue_fail(struct run *r)
{
	struct task	*t;

	while ((t = r->rq) != NULL) {
		r->rq = t->next;
		r->failed++;
		order_done(r, t->nth);
		feed_task_free(r, t);
	}
	r->rq_tail = NULL;
}

/* The busy time of the GPUs an attempt held: each of the several it held
 * (their CUDA_VISIBLE_DEVICES entries, "fake0,fake1", found among the
 * peer's GPUs), else its worker's. */
static void
busy_add(struct peer *p, const struct attempt *oc)
{
	int64_t		 ns = (int64_t)(oc->runtime * 1e9);
	const char	*s = oc->gpus, *end = oc->gpus + oc->gpuslen, *c;
	size_t		 len;
	int		 g, found = 0;

	for (; oc->gpuslen > 0 && s < end; s = c + 1) {
		if ((c = memchr(s, ',', (size_t)(end - s))) == NULL)
			c = end;
		len = (size_t)(c - s);
		for (g = 0; g < p->ngpu; g++)
			if (p->gpu_id[g] != NULL && strlen(p->gpu_id[g]) ==
			    len && memcmp(p->gpu_id[g], s, len) == 0) {
				p->busy_ns[g] += ns;
				found++;
				break;
			}
	}
	if (found == 0 && oc->worker >= 0 && oc->worker < p->nw)
		p->busy_ns[p->w_gpu[oc->worker]] += ns;
}

/* Record an attempt that ran: its joblog line, then the busy time of
 * its GPU and the runtimes that size the ranks' windows. Returns nonzero
 * to cancel the rest (the joblog cannot be written). */
static int
record(struct run *r, const struct task *t, struct attempt *oc)
{
	struct peer	*p = &r->peer[t->rank];
	int		 rc, cancel = 0;

	/* What the reply cannot tell: the task and where it ran. */
	oc->seq = t->seq;
	oc->cmd = task_cmd(t);
	oc->gpu = gpu_of(r, t->rank, oc->worker);
	if (oc->gpuslen > 0) {	/* several GPUs: the ones it held */
		snprintf(oc->held, sizeof(oc->held), "%.*s",
		    (int)oc->gpuslen, oc->gpus);
		oc->gpu = oc->held;
	}
	oc->host = r->npeer > 1 ? p->host : ":";
	if (oc->gpu_mem > r->gmem_peak) {
		r->gmem_peak = oc->gpu_mem;
		r->gmem_seq = t->seq;
	}
	if (oc->gpu_util >= 0) {
		r->gutil_sum += oc->gpu_util;
		r->gutil_n++;
	}
	r->oom += oc->oom;
	if ((rc = joblog_append(&r->jl, oc)) < 0 && !r->jl_broken) {
		/* Without its record a resume would run it again: stop. */
		out_err("cannot write joblog '%s': %s", r->jl.path,
		    strerror(-rc));
		r->fatal = r->jl_broken = 1;
		feed_halt_start(r, RC_CANCEL);
		cancel = 1;
	}
	if (r->tl != NULL)
		timeline_add(r->tl, oc, t->rank, oc->worker,
		    oc->worker >= 0 && oc->worker < p->nw ?
		    p->w_gpu[oc->worker] : -1);
	busy_add(p, oc);
	r->rt_sum += oc->runtime;
	r->rt_n++;
	p->ran++;
	return cancel;
}

/* How many tasks --halt waits for: N, or N% of all the tasks (counted
 * before the run, which main.c makes sure of, those a resume skips
 * included, as parallel counts them), in GNU parallel's floating point:
 * 7% of 100 is 7.000000000000001, which 7 failures do not reach. */
static double
halt_limit(const struct run *r)
{
	const struct opts	*o = r->o;

	return o->halt_pct ? (double)(r->total + (long)r->resumed) *
	    ((double)o->halt_fail / 100.0) : (double)o->halt_fail;
}

/* Whether --halt's condition is met: N tasks failed, succeeded or ended
 * (parallel counts those a resume skips as ended well), or N% of all
 * the tasks. */
static int
halt_due(const struct run *r, unsigned long *n)
{
	const struct opts	*o = r->o;

	if (o->halt == HALT_NEVER || r->halting)
		return 0;
	*n = o->halt_on == HALT_ON_FAIL ? r->failed : o->halt_on ==
	    HALT_ON_SUCCESS ? r->ok + r->resumed : r->ok + r->failed +
	    r->resumed;
	return (double)*n >= halt_limit(r);
}

/* GNU parallel's exit status for a run --halt halts (should_we_halt()),
 * fixed when the condition is met, whatever ends after it: 0 for
 * success=; when one task was enough (fail=1, done=1, or a percentage
 * that is one task), that task's own status (255 for a timeout, as
 * parallel's exit(-1)); else the tasks failed so
 * far: their share of all the tasks, rounded up, for a percentage, else
 * their number (parallel's 101 for done=N when none failed is its bug:
 * 0 here). */
static int
halt_status(const struct run *r, const struct attempt *oc)
{
	const struct opts	*o = r->o;

	if (o->halt_on == HALT_ON_SUCCESS)
		return 0;
	if (halt_limit(r) == 1.0)	/* a timeout is parallel's Exitval -1 */
		return oc->kind == K_OK ? 0 : oc->flags & R_TIMEDOUT ? 255 :
		    oc->exitval > 0 ? oc->exitval & 0xff : oc->signal > 0 ?
		    128 + oc->signal : 1;
	if (o->halt_pct)
		return (int)ceil((double)r->failed / (double)(r->total +
		    (long)r->resumed) * 100.0);
	return r->failed > 100 ? 101 : (int)r->failed;
}

/* Count an attempt that is final, and halt on --halt's condition.
 * Returns nonzero to cancel the rest (--halt now). */
static int
count(struct run *r, const struct task *t, const struct attempt *oc,
    const char *why)
{
	static const char *const what[] = {
		[HALT_ON_FAIL] = "failed", [HALT_ON_SUCCESS] = "succeeded",
		[HALT_ON_DONE] = "ended",
	};
	unsigned long	 n;
	int		 now = r->o->halt == HALT_NOW;

	switch (oc->kind) {
	case K_OK:
		r->ok++;
		/* Out of memory, the median stays as it was. */
		if (r->o->timeout_pct > 0)
			(void)median_add(&r->ok_rt, oc->runtime);
		break;
	case K_STOPPED:
		r->stopped++;
		return 0;
	default:
		r->failed++;
		out_note(r, "task %lu (%s:%lu) failed: %s", t->seq, r->in.name,
		    t->line, why);
		break;
	}
	if (!halt_due(r, &n))
		return 0;
	r->halt_rc = halt_status(r, oc);
	out_note(r, "halting after %lu %s task%s (--halt %s): %s", n,
	    what[r->o->halt_on], n == 1 ? "" : "s", r->o->halt_arg,
	    now ? "stopping the running ones" : "letting the running ones "
	    "finish");
	feed_halt_start(r, now ? RC_CANCEL : 0);
	return now;	/* the pool stops the rest */
}

/* Done with t: back to the free list. */
static int
retire(struct run *r, struct task *t, int cancel)
{
	gp_items_release(&t->item, 1);
	feed_task_free(r, t);
	out_bar_draw(r, 0);
	return cancel | out_halted(r);
}

int
feed_finish(struct run *r, struct task *t)
{
	struct gp_item	*it = &t->item;
	struct attempt	 oc;
	char		 why[256];
	int		 cancel;

	r->inflight--;
	if (t->rank > 0)
		r->remote--;
	outcome_read(r, t, &oc);
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
		order_done(r, t->nth);
		return retire(r, t, 0);
	}
	cancel = record(r, t, &oc);
	outcome_describe(r, &oc, why, sizeof(why));
	if (oc.kind == K_FAILED && (int)t->attempt <= r->o->retries &&
	    !r->halting) {
		out_note(r, "task %lu failed (%s); retrying, attempt %u of %d",
		    t->seq, why, t->attempt + 1, r->o->retries + 1);
		if (oc.oom && task_more_mem(r, t, &oc) < 0)
			out_warn("task %lu: out of memory for a larger tag; "
			    "it retries as it was", t->seq);
		t->attempt++;
		gp_items_release(it, 1);
		requeue(r, t, 0);
		out_bar_draw(r, 0);
		return cancel;
	}
	live_print(r, t, &oc);
	if (oc.msglen > 0 && oc.kind == K_OK)
		out_warn("task %lu: %.*s", t->seq, (int)oc.msglen, oc.msg);
	cancel |= count(r, t, &oc, why);
	return retire(r, t, cancel);
}

int
feed_done(void *arg, struct gp_item *it)
{
	struct run	*r = arg;

	outcome_usage(r->pool, it);
	(void)out_gpu_notes(r);	/* a stop waits for the next tick */
	/* The gp_item is the first member of its task. */
	return feed_finish(r, (struct task *)it);
}
