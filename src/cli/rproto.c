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
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

uint8_t *
rp_hello_encode(const struct peer *p, size_t *lenp)
{
	struct rhello	 h;
	size_t		 len, off;
	uint8_t		*b;
	int32_t		 g32;
	int		 g, w;

	len = sizeof(h) + (size_t)p->nw * sizeof(int32_t) + strlen(p->host) +
	    1;
	for (g = 0; g < p->ngpu; g++)
		len += strlen(p->gpu_id[g]) + 1;
	if ((b = malloc(len)) == NULL)
		return NULL;
	h.nw = (uint32_t)p->nw;
	h.ngpu = (uint32_t)p->ngpu;
	memcpy(b, &h, sizeof(h));
	off = sizeof(h);
	for (w = 0; w < p->nw; w++, off += sizeof(g32)) {
		g32 = p->w_gpu[w];
		memcpy(b + off, &g32, sizeof(g32));
	}
	memcpy(b + off, p->host, strlen(p->host) + 1);
	off += strlen(p->host) + 1;
	for (g = 0; g < p->ngpu; g++) {
		memcpy(b + off, p->gpu_id[g], strlen(p->gpu_id[g]) + 1);
		off += strlen(p->gpu_id[g]) + 1;
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
rp_task_hdr(uint8_t *b, size_t len, uint64_t seq, uint32_t attempt)
{
	struct task_hdr	 h;

	memset(&h, 0, sizeof(h));	/* timeout_ms: the caller's */
	h.seq = seq;
	h.attempt = attempt;
	h.cmdlen = (uint32_t)(len - sizeof(h));
	memcpy(b, &h, sizeof(h));
}

ssize_t
rp_tasks_next(const uint8_t *b, size_t len, size_t off, struct task_hdr *hp)
{
	struct task_hdr	 h;
	size_t		 n;

	if (off > len || len - off < sizeof(h))
		return -EPROTO;
	memcpy(&h, b + off, sizeof(h));
	n = sizeof(h) + h.cmdlen;
	if (h.cmdlen == 0 || h.cmdlen > len - off - sizeof(h) ||
	    b[off + n - 1] != '\0')
		return -EPROTO;
	*hp = h;
	return (ssize_t)n;
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
