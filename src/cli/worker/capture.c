/*
 * capture.c: a task's standard output and error, captured through a
 * nonblocking pipe each, kept up to OUTPUT_MAX bytes (the rest counted,
 * not kept), and the reply that carries them to the master with the
 * task's outcome. Runs in a worker; never blocks (spawn.c polls the
 * pipes and calls cap_drain() when one is readable). Buffers are kept
 * across tasks, but for those over KEEP_BUF: one chatty task must not pin
 * tens of MiB in every worker. With live output the bytes go on to the
 * master as they come (cap_forward()), at most LIVE_HOLD of them held
 * here per stream: past that the pipe is not read, and the task waits on
 * its own writes, never the worker (it still sees its deadline and the
 * stop fd); what is left when the task ends goes with the reply.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "worker/worker.h"

#define CAP_CHUNK	65536
#define KEEP_BUF	(1u << 20)	/* buffers above this are freed */

static char		*reply;
static size_t		 reply_cap;

/* Read what the pipe holds. Returns 1 once it is closed, else 0. */
int
cap_drain(struct cap *c)
{
	static char	 junk[CAP_CHUNK];
	size_t		 want, ncap;
	ssize_t		 r;
	char		*d;
	int		 i;

	for (i = 0; i < 64; i++) {	/* then let the other pipe in */
		if (cap_full(c) && (cap_forward(c), cap_full(c)))
			return 0;	/* live: the channel first */
		if (c->len < OUTPUT_MAX && c->cap - c->len < CAP_CHUNK &&
		    c->cap < OUTPUT_MAX) {
			ncap = c->cap ? c->cap * 2 : CAP_CHUNK;
			if (ncap > OUTPUT_MAX)
				ncap = OUTPUT_MAX;
			if ((d = realloc(c->data, ncap)) != NULL) {
				c->data = d;
				c->cap = ncap;
			}
		}
		want = c->cap - c->len;
		if (c->len < OUTPUT_MAX && want > 0)
			r = read(c->fd, c->data + c->len, want);
		else if ((r = read(c->fd, junk, sizeof(junk))) > 0)
			c->cut += (uint64_t)r;
		if (r > 0) {
			if (c->len < OUTPUT_MAX && want > 0)
				c->len += (size_t)r;
			continue;
		}
		if (r == -1 && errno == EINTR)
			continue;
		if (r == -1 && errno == EAGAIN)
			break;
		close(c->fd);
		c->fd = -1;
		(void)cap_forward(c);
		return 1;
	}
	(void)cap_forward(c);
	return 0;
}

int
cap_forward(struct cap *c)
{
	struct live_hdr	 h;
	struct iovec	 iov[2];
	struct msghdr	 m;
	size_t		 off = 0, n;
	ssize_t		 w;

	if (c->live_fd < 0)
		return 0;
	h.seq = c->seq;
	h.worker = c->worker;
	h.stream = c->stream;
	memset(&m, 0, sizeof(m));
	m.msg_iov = iov;
	m.msg_iovlen = 2;
	iov[0].iov_base = &h;
	iov[0].iov_len = sizeof(h);
	while (off < c->len) {
		n = c->len - off < LIVE_REC ? c->len - off : LIVE_REC;
		iov[1].iov_base = c->data + off;
		iov[1].iov_len = n;
		/* A record is one send, whole or not at all: the other
		 * workers' records never cut into it. */
		w = sendmsg(c->live_fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w == -1 && errno == EINTR)
			continue;
		if (w == -1) {
			if (errno != EAGAIN) {
				/* The reply has it, kept as grouped. */
				c->live_fd = -1;
				c->hold = OUTPUT_MAX;
			}
			break;
		}
		off += n;
	}
	if (off > 0) {
		memmove(c->data, c->data + off, c->len - off);
		c->len -= off;
	}
	return c->live_fd >= 0 && c->len > 0;
}

int
cap_full(const struct cap *c)
{
	return c->live_fd >= 0 && c->hold < OUTPUT_MAX && c->len >= c->hold;
}

int
cap_open(struct cap *c, int *wfd)
{
	int	 p[2];

	c->len = 0;
	c->cut = 0;
	c->hold = c->live_fd >= 0 ? LIVE_HOLD : OUTPUT_MAX;
	if (pipe2(p, O_CLOEXEC) == -1)
		return -errno;
	if (fcntl(p[0], F_SETFL, O_NONBLOCK) == -1) {
		close(p[0]);
		close(p[1]);
		return -errno;
	}
	c->fd = p[0];
	*wfd = p[1];
	return 0;
}

void
cap_close(struct cap *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

void
cap_reply(struct gp_ctx *ctx, struct task_reply *rp, const char *msg,
    struct cap *out, struct cap *err)
{
	const char	*gpus = gp_ctx_item_visible(ctx);
	uint8_t		 hdr[sizeof(*rp)];
	size_t		 need;
	char		*p;

	rp->gpuslen = strcmp(gpus, gp_ctx_info(ctx)->visible) ?
	    strlen(gpus) : 0;
	rp->outlen = out->len;
	rp->errlen = err->len;
	rp->outcut = out->cut;
	rp->errcut = err->cut;
	rp->msglen = strlen(msg);
	if (rp->outcut)
		rp->flags |= R_OUTCUT;
	if (rp->errcut)
		rp->flags |= R_ERRCUT;
	need = sizeof(*rp) + out->len + err->len + rp->msglen + rp->gpuslen;
	if (need > reply_cap) {
		if ((p = realloc(reply, need)) == NULL) {
			/* Keep the outcome, drop the output. */
			rp->outcut += rp->outlen;
			rp->errcut += rp->errlen;
			rp->outlen = rp->errlen = rp->msglen = 0;
			rp->gpuslen = 0;
			rp_reply_encode(hdr, rp);
			(void)gp_ctx_reply(ctx, hdr, sizeof(hdr));
			return;
		}
		reply = p;
		reply_cap = need;
	}
	p = reply;
	rp_reply_encode((uint8_t *)p, rp);
	p += sizeof(*rp);
	if (out->len > 0)	/* data is NULL when nothing was captured */
		memcpy(p, out->data, out->len);
	p += out->len;
	if (err->len > 0)
		memcpy(p, err->data, err->len);
	p += err->len;
	memcpy(p, msg, rp->msglen);
	p += rp->msglen;
	memcpy(p, gpus, rp->gpuslen);
	(void)gp_ctx_reply(ctx, reply, need);
	/* One chatty task must not pin tens of MiB in every worker. */
	if (reply_cap > KEEP_BUF) {
		free(reply);
		reply = NULL;
		reply_cap = 0;
	}
	if (out->cap > KEEP_BUF) {
		free(out->data);
		out->data = NULL;
		out->cap = 0;
	}
	if (err->cap > KEEP_BUF) {
		free(err->data);
		err->data = NULL;
		err->cap = 0;
	}
}
