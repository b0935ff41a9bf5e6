/*
 * rank.c: gpupool-run on a rank other than 0. Its pool is up (run.c made
 * it); it says hello to rank 0 with its slots and GPUs, runs the tasks
 * rank 0 sends on its own workers through one gp_pool_run() call, sends each
 * result back as it ends, and says bye when rank 0 says the run is over,
 * when a signal stops it, or when rank 0 falls silent (--rank-timeout).
 * It reads no tasks file and writes no joblog: rank 0 does both.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "master/master.h"

/* A task from rank 0; the gp_item comes first (done() casts back). */
struct stask {
	struct gp_item	 item;
	struct stask	*next;
	uint8_t		 in[];		/* task_hdr, command, NUL */
};

struct serve {
	struct run	*r;
	struct stask	*q, **qtail;	/* received, not started */
	int		 end;		/* rank 0: no more tasks */
	int		 fatal;
	uint8_t		*buf;		/* a result being encoded */
	size_t		 cap;
};

/* This rank's slots, GPUs and host, for rank 0's joblog and summary. */
static int
hello(struct serve *s)
{
	const struct peer	*me = &s->r->peer[0];
	uint8_t			*b;
	size_t			 len;
	int			 rc;

	if ((b = rp_hello_encode(me->nw, me->ngpu, me->w_gpu,
	    me->host, me->gpu_id, &len)) == NULL)
		return -ENOMEM;
	rc = ranks_send(s->r->rk, 0, RM_HELLO, b, len);
	free(b);
	return rc;
}

static int
result(struct serve *s, const struct gp_item *it)
{
	struct task_hdr	 h;
	struct rresult	 rr;
	size_t		 need = sizeof(rr) + it->outlen;
	uint8_t		*b;

	if (need > s->cap) {
		if ((b = realloc(s->buf, need)) == NULL)
			return -ENOMEM;
		s->buf = b;
		s->cap = need;
	}
	if (rp_task_decode(it->in, it->inlen, &h) < 0)
		return -EPROTO;	/* ours: on_tasks() checked it */
	memset(&rr, 0, sizeof(rr));
	rr.seq = h.seq;
	rr.attempt = h.attempt;
	rr.status = it->status;
	rr.code = it->code;
	rr.attempts = (int32_t)it->attempts;
	rr.worker = it->worker;
	rr.outlen = it->outlen;
	rp_result_encode(s->buf, &rr, it->out);
	return ranks_send(s->r->rk, 0, RM_RESULTS, s->buf, need);
}

static int
serve_next(void *arg, struct gp_item **item)
{
	struct serve	*s = arg;
	struct stask	*t;

	if ((t = s->q) != NULL) {
		if ((s->q = t->next) == NULL)
			s->qtail = &s->q;
		*item = &t->item;
		return GP_FEED_ITEM;
	}
	/* More comes with a message, which wakes ctl(). */
	return s->end ? GP_FEED_END : GP_FEED_WAIT;
}

static void
serve_need(void *arg, const struct gp_item *it, struct gp_need *need)
{
	const struct opts	*o = ((struct serve *)arg)->r->o;

	need_for_item(o->mem, o->gpus_per_task, it, need);
}

static int
serve_done(void *arg, struct gp_item *it)
{
	struct serve	*s = arg;

	outcome_usage(s->r->pool, it);
	if (result(s, it) < 0) {
		out_err("out of memory");
		s->fatal = 1;
	}
	gp_items_release(it, 1);
	free(it);	/* the stask it starts */
	return s->fatal;
}

static int
on_tasks(struct serve *s, const struct rmsg *m)
{
	struct task_hdr	 h;
	struct stask	*t;
	size_t		 off = 0, n;
	ssize_t		 k;

	while (off < m->len) {
		if ((k = rp_tasks_next(m->data, m->len, off, &h)) < 0)
			return (int)k;
		n = (size_t)k;
		if ((t = calloc(1, sizeof(*t) + n)) == NULL)
			return -ENOMEM;
		memcpy(t->in, m->data + off, n);
		t->item.in = t->in;
		t->item.inlen = n;
		t->item.worker = -1;
		*s->qtail = t;
		s->qtail = &t->next;
		off += n;
	}
	return 0;
}

static int
on_msgs(struct serve *s)
{
	struct rmsg	*m;
	char		 err[256];
	int		 how, act = GP_CTL_GO_ON, rc = 0;

	while ((m = ranks_recv(s->r->rk, err, sizeof(err))) != NULL) {
		if (m->peer != 0)
			rc = -EPROTO;
		else if (m->type == RM_TASKS)
			rc = on_tasks(s, m);
		else if (m->type == RM_CTL &&
		    (rc = rp_ctl_parse(m->data, m->len, &how)) == 0) {
			if (how == RC_END || how == RC_END_LOST)
				s->end = 1;
			if (how == RC_END_LOST)
				s->r->nlost = 1;	/* no MPI_Finalize */
			else if (how == RC_CANCEL && act < GP_CTL_CANCEL)
				act = GP_CTL_CANCEL;
			else if (how == RC_KILL)
				act = GP_CTL_KILL;
		} else if (m->type != RM_BEAT)
			rc = -EPROTO;
		if (rc < 0) {
			out_err("a bad message from rank 0 (type %d, %zu "
			    "bytes): %s", m->type, m->len, strerror(-rc));
			s->fatal = 1;
			act = GP_CTL_KILL;
			rc = 0;
		}
		free(m);
	}
	if (err[0] != '\0') {
		/* MPI is gone, and its socket stays readable: once is
		 * enough. */
		out_err("%s", err);
		s->fatal = 1;
		act = GP_CTL_KILL;
		(void)epoll_ctl(s->r->epfd, EPOLL_CTL_DEL, ranks_fd(s->r->rk),
		    NULL);
	}
	return act;
}

static int
serve_ctl(void *arg)
{
	struct serve		*s = arg;
	struct run		*r = s->r;
	struct epoll_event	 ev[4];
	uint64_t		 n;
	int			 i, k, act = GP_CTL_GO_ON, a;

	k = epoll_wait(r->epfd, ev, 4, 0);
	for (i = 0; i < k; i++) {
		a = GP_CTL_GO_ON;
		if (ev[i].data.u32 == EV_SIG) {
			if (signals_read(r) > 0)
				a = r->nsig > 1 ? GP_CTL_KILL : GP_CTL_CANCEL;
			out_bar_winch(r);
		} else if (ev[i].data.u32 == EV_TIMER) {
			(void)!read(r->tfd, &n, sizeof(n));
			if (!s->fatal && rank_silent(r, 0)) {
				out_err("no word from rank 0 for %.1f s "
				    "(--rank-timeout): stopping",
				    (double)r->o->rank_timeout_ms / 1000);
				s->fatal = 1;
				a = GP_CTL_KILL;
			}
		} else
			a = on_msgs(s);
		if (a > act)
			act = a;
	}
	return act;
}

/* Tell rank 0 about what never started, then say bye. */
static void
bye(struct serve *s)
{
	struct stask	*t;

	while ((t = s->q) != NULL) {
		s->q = t->next;
		t->item.status = GP_NOTRUN;
		(void)result(s, &t->item);
		free(t);
	}
	s->qtail = &s->q;
	(void)ranks_send(s->r->rk, 0, RM_BYE, NULL, 0);
}

int
rank_serve(struct run *r, struct gp_pool *pool, const struct run_conf *conf)
{
	struct serve	 s;
	struct gp_feed	 feed;
	int		 rc;

	memset(&s, 0, sizeof(s));
	s.r = r;
	s.qtail = &s.q;
	if (pool == NULL) {
		/* Bye before hello: it could not start (its own message
		 * says why), and rank 0 stops the run. */
		(void)ranks_send(r->rk, 0, RM_BYE, NULL, 0);
		return EXIT_FATAL;
	}
	if (hello(&s) < 0) {
		out_err("out of memory");
		return EXIT_FATAL;
	}
	memset(&feed, 0, sizeof(feed));
	feed.next = serve_next;
	feed.done = serve_done;
	feed.need = serve_need;
	feed.ctl = serve_ctl;
	feed.ctl_fd = r->epfd;
	feed.in_fd = -1;
	feed.arg = &s;
	rc = gp_pool_run(pool, r->fn, conf, sizeof(*conf), &feed);
	if (rc < 0) {
		out_err("%s", gp_strerror(rc));
		s.fatal = 1;
	}
	bye(&s);
	free(s.buf);
	if (s.fatal)
		r->nlost = 1;	/* no clean MPI end */
	if (r->sig)
		return 128 + r->sig;
	return s.fatal ? EXIT_FATAL : 0;
}

/* Here, for both sides of the protocol: coord.c asks it of each rank,
 * this file of rank 0; rank.c calls nothing of rank 0's side. */
int
rank_silent(const struct run *r, int peer)
{
	return ranks_silent(r->rk, peer) >= (int64_t)r->o->rank_timeout_ms *
	    1000000;
}
