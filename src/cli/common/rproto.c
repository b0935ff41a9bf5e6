/*
 * rproto.c: the payloads of the rank messages (enum rmsg_type), encoded
 * and parsed: RM_HELLO (rank.c sends, coord.c reads), RM_TASKS (coord.c
 * sends, rank.c reads), RM_RESULTS (rank.c sends, coord.c reads) and
 * RM_CTL (coord.c sends, rank.c reads). Host byte order, as src/msg.c:
 * every rank runs the same binary. No I/O and no globals, so that it can
 * be fuzzed alone (test/fuzz/fuzz_rproto.c): a parser reads nothing past
 * the length it is given and returns -EPROTO for a payload that breaks
 * a rule of docs/cluster.md. What a payload means (a second hello, a
 * result for a task the rank does not hold) is for its reader to judge.
 *
 * It also owns the bytes between a master and its workers, which
 * RM_TASKS and RM_RESULTS carry as they are: a task (struct task_hdr,
 * its line, a NUL: rp_task_encode(), rp_task_decode()) and its reply
 * (struct task_reply and the bytes it counts: rp_reply_encode(),
 * rp_reply_decode(), and rp_reply_usage() for the figures the master
 * adds).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"

uint8_t *
rp_hello_encode(int nw, int ngpu, const int *w_gpu, const char *host,
    char *const *gpu_id, size_t *lenp)
{
	struct rhello	 h;
	size_t		 len, off;
	uint8_t		*b;
	int32_t		 g32;
	int		 g, w;

	len = sizeof(h) + (size_t)nw * sizeof(int32_t) + strlen(host) +
	    1;
	for (g = 0; g < ngpu; g++)
		len += strlen(gpu_id[g]) + 1;
	if ((b = malloc(len)) == NULL)
		return NULL;
	h.nw = (uint32_t)nw;
	h.ngpu = (uint32_t)ngpu;
	memcpy(b, &h, sizeof(h));
	off = sizeof(h);
	for (w = 0; w < nw; w++, off += sizeof(g32)) {
		g32 = w_gpu[w];
		memcpy(b + off, &g32, sizeof(g32));
	}
	memcpy(b + off, host, strlen(host) + 1);
	off += strlen(host) + 1;
	for (g = 0; g < ngpu; g++) {
		memcpy(b + off, gpu_id[g], strlen(gpu_id[g]) + 1);
		off += strlen(gpu_id[g]) + 1;
	}
	*lenp = len;
	return b;
}

int
rp_hello_parse(const uint8_t *b, size_t len, struct rp_hello *hp)
{
	struct rhello	 h;
	const char	*s, *end = (const char *)b + len;
	size_t		 off;
	int32_t		 g32;
	uint32_t	 g;

	if (len < sizeof(h))
		return -EPROTO;
	memcpy(&h, b, sizeof(h));
	off = sizeof(h) + (size_t)h.nw * sizeof(int32_t);
	if (h.nw == 0 || h.nw > 1u << 16 || h.ngpu == 0 || h.ngpu > h.nw ||
	    off >= len || end[-1] != '\0')
		return -EPROTO;
	for (g = 0; g < h.nw; g++) {
		memcpy(&g32, b + sizeof(h) + g * sizeof(g32), sizeof(g32));
		if (g32 < 0 || (uint32_t)g32 >= h.ngpu)
			return -EPROTO;
	}
	s = (const char *)b + off;
	hp->host = s;
	for (g = 0; g < h.ngpu; g++) {
		s += strlen(s) + 1;
		if (s >= end)
			return -EPROTO;
		if (g == 0)
			hp->gpu_id = s;
	}
	hp->nw = h.nw;
	hp->ngpu = h.ngpu;
	hp->w_gpu = b + sizeof(h);
	return 0;
}

void
rp_task_encode(uint8_t *b, size_t len, const struct task_hdr *h)
{
	struct task_hdr	 e = *h;

	e.cmdlen = (uint32_t)(len - sizeof(e));
	memcpy(b, &e, sizeof(e));
}

ssize_t
rp_task_decode(const uint8_t *b, size_t len, struct task_hdr *hp)
{
	struct task_hdr	 h;
	size_t		 n;

	if (len < sizeof(h))
		return -EPROTO;
	memcpy(&h, b, sizeof(h));
	n = sizeof(h) + h.cmdlen;
	if (h.cmdlen == 0 || h.cmdlen > len - sizeof(h) || b[n - 1] != '\0')
		return -EPROTO;
	*hp = h;
	return (ssize_t)n;
}

ssize_t
rp_tasks_next(const uint8_t *b, size_t len, size_t off, struct task_hdr *hp)
{
	if (off > len)
		return -EPROTO;
	return rp_task_decode(b + off, len - off, hp);
}

void
rp_reply_encode(uint8_t *b, const struct task_reply *rp)
{
	memcpy(b, rp, sizeof(*rp));
}

int
rp_reply_decode(const void *b, size_t len, struct task_reply *rp)
{
	struct task_reply	 h;
	size_t			 rest;

	if (b == NULL || len < sizeof(h))
		return -EPROTO;
	memcpy(&h, b, sizeof(h));
	/* Each length within what is left, so that the sum cannot wrap. */
	rest = len - sizeof(h);
	if (h.outlen > rest || h.errlen > rest - h.outlen ||
	    h.msglen > rest - h.outlen - h.errlen ||
	    h.gpuslen != rest - h.outlen - h.errlen - h.msglen)
		return -EPROTO;
	*rp = h;
	return 0;
}

void
rp_reply_usage(void *b, size_t len, const struct gp_usage *u)
{
	struct task_reply	 rp;

	if (rp_reply_decode(b, len, &rp) < 0)
		return;
	rp.gpu_mem = u->mem_peak;
	rp.gpu_util = u->util;
	rp.gpu_samples = u->samples;
	rp_reply_encode(b, &rp);
}

void
rp_result_encode(uint8_t *b, const struct rresult *rr, const void *out)
{
	memcpy(b, rr, sizeof(*rr));
	if (rr->outlen > 0)
		memcpy(b + sizeof(*rr), out, rr->outlen);
}

ssize_t
rp_results_next(const uint8_t *b, size_t len, size_t off,
    struct rresult *rr, const uint8_t **out)
{
	if (off > len || len - off < sizeof(*rr))
		return -EPROTO;
	memcpy(rr, b + off, sizeof(*rr));
	off += sizeof(*rr);
	if (rr->outlen > len - off)
		return -EPROTO;
	*out = b + off;
	return (ssize_t)(sizeof(*rr) + rr->outlen);
}

void
rp_ctl_encode(uint8_t *b, int how)
{
	int32_t	 v = how;

	memcpy(b, &v, sizeof(v));
}

int
rp_ctl_parse(const uint8_t *b, size_t len, int *how)
{
	int32_t	 v;

	if (len != sizeof(v))
		return -EPROTO;
	memcpy(&v, b, sizeof(v));
	*how = v;
	return 0;
}
