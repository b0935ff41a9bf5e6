/*
 * coord.c: rank 0's side of the ranks protocol (rank.c is the other
 * ranks' side; the messages are in docs/cluster.md, their payloads in
 * rproto.c). It hands tasks to the ranks with room in their window
 * (coord_dispatch()), reads their hellos and results
 * (coord_on_ranks()), writes off a rank that falls silent
 * (coord_on_timer()) or breaks the protocol (lose()), and takes back
 * what a rank held when it leaves (reclaim()). Every attempt that ends
 * on a rank ends through feed.c's feed_finish(), as on this one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "master/master.h"

#define QUEUE_WORK_S		0.02	/* work queued per slot on a rank */
#define QUEUE_MAX		64	/* tasks queued per slot on a rank */

/* Tasks a rank may hold: one per slot, plus, when tasks are short, a
 * queue per slot of about QUEUE_WORK_S of work (at most QUEUE_MAX tasks),
 * so that the round trip to rank 0 does not leave its slots idle. Tasks
 * as long as QUEUE_WORK_S never queue behind each other there, so skewed
 * work balances as well as on one machine. */
static size_t
window(const struct run *r, const struct peer *p)
{
	double	 mean, q;

	/* With --delay, none: a queued task would start when a slot frees,
	 * not DELAY after the last one (feed.c's pace()). */
	if (r->rt_n == 0 || r->o->delay_ms > 0)
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

	if (r->in_armed || !r->in.rd.pollable || r->input_done)
		return;
	ev.events = EPOLLIN | EPOLLONESHOT;
	ev.data.u32 = EV_INPUT;
	if (epoll_ctl(r->epfd, EPOLL_CTL_MOD, r->in.rd.fd, &ev) == 0)
		r->in_armed = 1;
}

/* Hand tasks to the ranks with room, the emptiest first. Rank 0's own
 * workers take theirs through feed_next(). */
void
coord_dispatch(struct run *r)
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
		if ((rc = feed_source(r, &t)) != GP_FEED_ITEM) {
			if (rc == GP_FEED_AGAIN)
				input_arm(r);
			return;
		}
		feed_hand(r, t, bi);
		t->next = best->out;
		best->out = t;
		best->nout++;
		r->remote++;
		if (ranks_send(r->rk, bi, RM_TASKS, t->buf, t->item.inlen) < 0) {
			out_err("out of memory");
			r->fatal = 1;
			feed_halt_start(r, RC_CANCEL);
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
		cancel |= feed_finish(r, t);
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
	out_err("rank %d (%s) is lost: %s; %zu of its tasks %s", i,
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
			*cancel |= feed_finish(r, t);
		}
		off += (size_t)n;
	}
	return 0;
}

/* Messages from the other ranks. */
int
coord_on_ranks(struct run *r)
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
				out_err("rank %d could not start (its own "
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
		out_err("%s", err);
		r->fatal = 1;
		(void)epoll_ctl(r->epfd, EPOLL_CTL_DEL, ranks_fd(r->rk), NULL);
		for (i = 1; i < r->npeer; i++)
			cancel |= lose(r, i, "MPI failed");
	}
	return cancel ? GP_CTL_CANCEL : GP_CTL_GO_ON;
}

int
coord_on_timer(struct run *r)
{
	uint64_t	 n;
	char		 why[96];
	int		 i, cancel = 0;

	(void)!read(r->tfd, &n, sizeof(n));
	for (i = 1; i < r->npeer; i++) {
		if (r->peer[i].lost || r->peer[i].bye || !rank_silent(r, i))
			continue;
		snprintf(why, sizeof(why), "no word from it for %.1f s "
		    "(--rank-timeout)", (double)r->o->rank_timeout_ms / 1000);
		cancel |= lose(r, i, why);
	}
	cancel |= out_gpu_notes(r);
	out_bar_draw(r, 0);
	return cancel ? GP_CTL_CANCEL : GP_CTL_GO_ON;
}

/* Whether every rank is up; says which are not (a rank that could not
 * start said why, in coord_on_ranks(); a lost one, in lose()). */
int
coord_all_hello(const struct run *r)
{
	int	 i, all = !r->fatal;

	for (i = 1; i < r->npeer; i++)
		all &= r->peer[i].hello && !r->peer[i].lost;
	return all;
}
