/*
 * live.c: a task's output as the master prints it. Grouped (the
 * default), a task's stdout and stderr come with its reply and are
 * printed as a block each when it ends. With --line-buffer or --ungroup
 * its worker sends them on as they come (capture.c) through a channel
 * that every worker shares: a SOCK_SEQPACKET socketpair made before the
 * pool forks, whose records (a struct live_hdr, then bytes) are each one
 * send, so that the workers' records never cut into one another. The
 * master stays the only writer of stdout and stderr: records go through
 * output.c's queues, and while those hold over OUT_BACKLOG the channel
 * is not read, so the workers hold what they have (LIVE_HOLD), then
 * their tasks wait on their own writes. --line-buffer keeps each
 * worker's unfinished line until its newline comes; --ungroup prints
 * the bytes as they are.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "master/master.h"

#define LIVE_READS	64	/* records read per wake-up, at most */

int
live_setup(struct run *r, struct run_conf *conf)
{
	socklen_t	 sl;
	int		 sv[2], sb;

	conf->live_fd = -1;
	/* -k prints each task whole in its turn: grouped. */
	if (r->o->out_mode == OUT_GROUP || r->o->results != NULL ||
	    r->o->keep_order || ranks_rank(r->rk) > 0)
		return 0;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == -1) {
		out_err("cannot create the live output channel: %s",
		    strerror(errno));
		return -1;
	}
	/* The master keeps the workers' end: a worker respawned later is
	 * forked with it. */
	r->live.rfd = sv[0];
	r->live.wfd = sv[1];
	conf->live_fd = sv[1];
	/* The workers' records wait charged to their end's send buffer:
	 * what the channel holds is under it (and one record over). */
	sl = sizeof(sb);
	if (getsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sb, &sl) == -1 || sb <= 0)
		sb = 1 << 20;
	r->live.queued = (size_t)sb + sizeof(struct live_hdr) + LIVE_REC;
	return 0;
}

void
live_worker(struct run *r)
{
	if (r->live.rfd >= 0)
		close(r->live.rfd);
	r->live.rfd = -1;
}

int
live_watch(struct run *r)
{
	struct epoll_event	 ev;

	if (r->live.rfd < 0)
		return 0;
	ev.events = EPOLLIN | EPOLLONESHOT;
	ev.data.u32 = EV_LIVE;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->live.rfd, &ev) == -1)
		return -errno;
	r->live.armed = 1;
	return 0;
}

void
live_arm(struct run *r)
{
	struct epoll_event	 ev;

	if (r->live.rfd < 0 || r->live.armed || out_backlog(r))
		return;
	ev.events = EPOLLIN | EPOLLONESHOT;
	ev.data.u32 = EV_LIVE;
	if (epoll_ctl(r->epfd, EPOLL_CTL_MOD, r->live.rfd, &ev) == 0)
		r->live.armed = 1;
}

size_t
live_tag(const struct run *r, unsigned long seq, int rank, int worker,
    char *buf, size_t len)
{
	const struct peer	*p = &r->peer[rank];
	struct repl_args	 a;
	struct gp_buf		 b = { 0 };
	char			 err[8];
	int			 n, g = -1;

	if (worker >= 0 && worker < p->nw)
		g = p->w_gpu[worker];
	/* --tagstring: its replacement strings, unquoted; a tasks file's
	 * task has no arguments, only {#} and {%}. */
	if (r->o->tagstring != NULL && r->in.grid != NULL)
		return grid_tag(r->in.grid, seq, r->o->tagstring, worker + 1, buf,
		    len);
	if (r->o->tagstring != NULL) {
		memset(&a, 0, sizeof(a));
		a.seq = seq;
		a.flags = REPL_RAW;
		a.slot = worker + 1;
		n = repl_expand(r->o->tagstring, &a, &b, err, sizeof(err)) == 0 ?
		    snprintf(buf, len, "%s", (char *)b.data) : 0;
		gp_buf_release(&b);
	} else if (r->in.grid != NULL)
		/* A grid's task: its arguments, as GNU parallel tags it. */
		return grid_args(r->in.grid, seq, buf, len);
	else if (r->npeer > 1)
		n = snprintf(buf, len, "task %lu rank %d GPU %d", seq, rank, g);
	else
		n = snprintf(buf, len, "task %lu GPU %d", seq, g);
	if (n < 0)
		return 0;
	return (size_t)n < len ? (size_t)n : len - 1;
}

/* The tag of worker's task on this rank, in buf; NULL without --tag. */
static const char *
tag_of(const struct run *r, unsigned long seq, int rank, int worker,
    char *buf, size_t len)
{
	if (!r->o->tag)
		return NULL;
	(void)live_tag(r, seq, rank, worker, buf, len);
	return buf;
}

/* Print worker's unfinished lines, each ended, and forget its task. */
static void
live_flush(struct run *r, int worker)
{
	struct live_task	*lt = &r->live.w[worker];
	struct gp_buf		*b;
	char			 tag[TAG_MAX];
	int			 s;

	for (s = 0; s < 2; s++) {
		b = &lt->part[s];
		if (b->len > b->off)
			out_task(r, s ? STDERR_FILENO : STDOUT_FILENO, tag_of(r,
			    lt->seq, 0, worker, tag, sizeof(tag)),
			    (const char *)b->data + b->off, b->len - b->off, 0);
		gp_buf_release(b);
	}
	lt->seq = 0;
}

/* The worker's state, made when it first sends; NULL: out of memory. */
static struct live_task *
live_task(struct run *r, int worker)
{
	struct live_task	*w;
	int			 n;

	if (worker < r->live.nw)
		return &r->live.w[worker];
	n = worker + 1;
	if ((w = realloc(r->live.w, (size_t)n * sizeof(*w))) == NULL)
		return NULL;
	memset(w + r->live.nw, 0, (size_t)(n - r->live.nw) * sizeof(*w));
	r->live.w = w;
	r->live.nw = n;
	return &w[worker];
}

/* Bytes p[0..n) of stream (1, 2) of task seq on worker: printed as they
 * are (--ungroup), or its whole lines, the unfinished one kept (a line
 * over LIVE_LINE_MAX printed in pieces that size). */
static void
live_bytes(struct run *r, int worker, unsigned long seq, int stream,
    const char *p, size_t n)
{
	struct live_task	*lt;
	struct gp_buf		*b;
	const char		*nl, *d, *e;
	char			 tag[TAG_MAX];
	int			 fd = stream == 2 ? STDERR_FILENO : STDOUT_FILENO;
	size_t			 k, m;

	if (r->o->out_mode == OUT_UNGROUP) {
		out_task(r, fd, NULL, p, n, 1);
		return;
	}
	if (worker < 0 || (lt = live_task(r, worker)) == NULL) {
		out_task(r, fd, tag_of(r, seq, 0, worker, tag, sizeof(tag)), p,
		    n, 0);
		return;
	}
	if (lt->seq != seq && lt->seq != 0)
		live_flush(r, worker);	/* a worker that died mid-task */
	lt->seq = seq;
	b = &lt->part[stream == 2];
	if (gp_buf_add(b, p, n) < 0) {
		live_flush(r, worker);
		out_task(r, fd, NULL, p, n, 0);
		return;
	}
	/* The whole lines, at once; a line over LIVE_LINE_MAX in pieces. */
	while (b->len > b->off) {
		d = (const char *)b->data + b->off;
		k = b->len - b->off;
		for (e = d; (nl = memchr(e, '\n', (size_t)(d + k - e) <=
		    LIVE_LINE_MAX ? (size_t)(d + k - e) : LIVE_LINE_MAX + 1)) !=
		    NULL; e = nl + 1)
			;
		if (e == d && k < LIVE_LINE_MAX)
			break;
		m = e > d ? (size_t)(e - d) : LIVE_LINE_MAX;
		out_task(r, fd, tag_of(r, seq, 0, worker, tag, sizeof(tag)), d,
		    m, 0);
		gp_buf_consume(b, m);
	}
	if (b->len == b->off)
		gp_buf_release(b);
}

/* Read and print records, up to max of them or, when max is 0, until
 * the channel is empty or as many bytes came as it held when called
 * (r->live.queued): every record sent before is then read, and workers
 * that keep sending cannot keep us here. */
static void
live_recv(struct run *r, int max)
{
	static char		 rec[sizeof(struct live_hdr) + LIVE_REC];
	struct live_hdr		 h;
	ssize_t			 n;
	size_t			 got = 0;
	int			 i;

	for (i = 0; max == 0 ? got <= r->live.queued : i < max; i++) {
		n = recv(r->live.rfd, rec, sizeof(rec), MSG_DONTWAIT);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)	/* empty, or (cannot be: we hold both ends)
				   closed */
			break;
		got += (size_t)n;
		/* Our own workers' records, checked all the same (ntpd's
		 * size check): a bad one is dropped. */
		if ((size_t)n < sizeof(h))
			continue;
		memcpy(&h, rec, sizeof(h));
		if (h.worker < 0 || h.worker >= r->peer[0].nw ||
		    (h.stream != 1 && h.stream != 2))
			continue;
		live_bytes(r, h.worker, (unsigned long)h.seq, h.stream,
		    rec + sizeof(h), (size_t)n - sizeof(h));
	}
}

int
live_read(struct run *r)
{
	r->live.armed = 0;	/* one shot */
	if (!out_backlog(r))
		live_recv(r, LIVE_READS);
	live_arm(r);
	return out_halted(r) ? GP_CTL_CANCEL : GP_CTL_GO_ON;
}

void
live_release(struct run *r)
{
	int	 i;

	if (r->live.rfd >= 0)
		close(r->live.rfd);
	if (r->live.wfd >= 0)
		close(r->live.wfd);
	r->live.rfd = r->live.wfd = -1;
	for (i = 0; i < r->live.nw; i++) {
		gp_buf_release(&r->live.w[i].part[0]);
		gp_buf_release(&r->live.w[i].part[1]);
	}
	free(r->live.w);
	r->live.w = NULL;
	r->live.nw = 0;
}

/* A finished task's output. Its worker sent each record before its
 * reply, so the channel, read to the end now, holds all it sent: the
 * reply's bytes come after them. */
/* -v (stdout) and --verbose (stderr): the command the task ran, {%}
 * filled in, before its output. */
static void
verbose_line(struct run *r, const struct task *t, const struct attempt *oc,
    const char *tag)
{
	const char	*cmd = (const char *)t->buf + sizeof(struct task_hdr) +
			    t->cmd;
	char		*s = r->in.grid != NULL ? repl_slot(cmd, oc->worker + 1) :
			    NULL;

	out_task(r, r->o->verbose == 2 ? STDERR_FILENO : STDOUT_FILENO, tag,
	    s != NULL ? s : cmd, strlen(s != NULL ? s : cmd), 0);
	free(s);
}

void
live_print(struct run *r, const struct task *t, const struct attempt *oc)
{
	const char	*tg;
	char		 tag[TAG_MAX];
	int		 raw = r->o->out_mode == OUT_UNGROUP;

	if (r->o->results != NULL) {
		order_done(r, t->nth);
		return;
	}
	(void)order_hold(r, t->nth);
	tg = tag_of(r, t->seq, t->rank, oc->worker, tag, sizeof(tag));
	if (r->o->verbose)
		verbose_line(r, t, oc, tg);
	if (t->rank == 0 && r->live.rfd >= 0) {
		live_recv(r, 0);
		live_bytes(r, oc->worker, t->seq, 1, oc->out, oc->outlen);
		live_bytes(r, oc->worker, t->seq, 2, oc->err, oc->errlen);
		if (!raw && oc->worker >= 0 && oc->worker < r->live.nw &&
		    r->live.w[oc->worker].seq == t->seq)
			live_flush(r, oc->worker);
		live_arm(r);
	} else {
		out_task(r, STDOUT_FILENO, tg, oc->out, oc->outlen, raw);
		out_task(r, STDERR_FILENO, tg, oc->err, oc->errlen, raw);
	}
	order_done(r, t->nth);
	if (oc->outcut || oc->errcut)
		out_warn("task %lu: %llu bytes of its stdout and %llu of its "
		    "stderr were dropped (over %u MiB each; --results DIR "
		    "keeps everything)", t->seq,
		    (unsigned long long)oc->outcut,
		    (unsigned long long)oc->errcut, OUTPUT_MAX >> 20);
}
