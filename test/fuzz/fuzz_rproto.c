/*
 * fuzz_rproto.c: libFuzzer harness for the payloads of the rank messages
 * (src/cli/common/rproto.c), which rank 0 and the other ranks read from MPI.
 *
 * Every input is parsed as each of RM_HELLO, RM_TASKS, RM_RESULTS and
 * RM_CTL, from a malloc'd copy of exactly its length (so that ASan sees
 * any read past it). Invariants:
 *   - a parser returns 0 / a length, or -EPROTO, nothing else;
 *   - a record never runs past the payload and always advances;
 *   - a hello's slots each name one of its GPUs, and its host and GPU ids
 *     lie inside the payload;
 *   - re-encoding what was parsed with rp_*_encode() gives back the same
 *     bytes (for a hello: a prefix of the input, which may carry bytes
 *     after its last GPU id).
 * No state is kept between inputs.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/master.h"

#include "fuzz_common.h"

static void
hello(const uint8_t *b, size_t len)
{
	struct rp_hello	 h;
	struct peer	 p;
	const char	*s;
	uint8_t		*e;
	size_t		 elen;
	uint32_t	 g;
	int		 rc;

	memset(&h, 0, sizeof(h));
	rc = rp_hello_parse(b, len, &h);
	CHECK(rc == 0 || rc == -EPROTO);
	if (rc < 0)
		return;
	CHECK(h.nw > 0 && h.ngpu > 0 && h.ngpu <= h.nw);
	CHECK(h.w_gpu == b + sizeof(struct rhello));
	CHECK((const uint8_t *)h.host > h.w_gpu &&
	    (const uint8_t *)h.host < b + len);
	CHECK((const uint8_t *)h.gpu_id > (const uint8_t *)h.host &&
	    (const uint8_t *)h.gpu_id < b + len);
	memset(&p, 0, sizeof(p));
	p.nw = (int)h.nw;
	p.ngpu = (int)h.ngpu;
	p.host = (char *)h.host;
	p.w_gpu = calloc(h.nw, sizeof(*p.w_gpu));
	p.gpu_id = calloc(h.ngpu, sizeof(*p.gpu_id));
	CHECK(p.w_gpu != NULL && p.gpu_id != NULL);
	memcpy(p.w_gpu, h.w_gpu, h.nw * sizeof(int32_t));
	for (g = 0; g < h.nw; g++)
		CHECK(p.w_gpu[g] >= 0 && (uint32_t)p.w_gpu[g] < h.ngpu);
	for (g = 0, s = h.gpu_id; g < h.ngpu; g++, s += strlen(s) + 1) {
		CHECK((const uint8_t *)s < b + len);
		p.gpu_id[g] = (char *)s;
	}
	e = rp_hello_encode(p.nw, p.ngpu, p.w_gpu, p.host, p.gpu_id,
	    &elen);
	CHECK(e != NULL);
	CHECK(elen <= len && memcmp(e, b, elen) == 0);
	/* What was encoded parses back to the same. */
	CHECK(rp_hello_parse(e, elen, &h) == 0);
	CHECK(h.nw == (uint32_t)p.nw && h.ngpu == (uint32_t)p.ngpu);
	free(e);
	free(p.w_gpu);
	free(p.gpu_id);
}

static void
tasks(const uint8_t *b, size_t len)
{
	struct task_hdr	 h;
	uint8_t		*e;
	size_t		 off = 0;
	ssize_t		 n;

	while (off < len) {
		n = rp_tasks_next(b, len, off, &h);
		CHECK(n == -EPROTO || n > (ssize_t)sizeof(h));
		if (n < 0)
			return;
		CHECK((size_t)n <= len - off);
		CHECK(b[off + (size_t)n - 1] == '\0');
		CHECK(h.cmdlen == (size_t)n - sizeof(h));
		/* The header, re-encoded in front of the same command. */
		CHECK((e = malloc((size_t)n)) != NULL);
		memcpy(e, b + off, (size_t)n);
		memset(e, 0, sizeof(h));
		rp_task_encode(e, (size_t)n, &h);
		CHECK(memcmp(e, b + off, (size_t)n) == 0);
		free(e);
		off += (size_t)n;
	}
}

static void
results(const uint8_t *b, size_t len)
{
	struct rresult	 rr;
	const uint8_t	*out;
	uint8_t		*e;
	size_t		 off = 0;
	ssize_t		 n;

	while (off < len) {
		n = rp_results_next(b, len, off, &rr, &out);
		CHECK(n == -EPROTO || n >= (ssize_t)sizeof(rr));
		if (n < 0)
			return;
		CHECK((size_t)n <= len - off);
		CHECK((size_t)n == sizeof(rr) + rr.outlen);
		CHECK(out == b + off + sizeof(rr));
		CHECK((e = malloc((size_t)n)) != NULL);
		rp_result_encode(e, &rr, out);
		CHECK(memcmp(e, b + off, (size_t)n) == 0);
		free(e);
		off += (size_t)n;
	}
}

static void
ctl(const uint8_t *b, size_t len)
{
	uint8_t	 e[RP_CTL_LEN];
	int	 how, rc;

	rc = rp_ctl_parse(b, len, &how);
	CHECK(rc == 0 || rc == -EPROTO);
	CHECK((rc == 0) == (len == RP_CTL_LEN));
	if (rc < 0)
		return;
	rp_ctl_encode(e, how);
	CHECK(memcmp(e, b, sizeof(e)) == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t	*b;

	/* An exact-size copy: a read one byte past it is a report. */
	if ((b = malloc(size > 0 ? size : 1)) == NULL)
		return 0;
	memcpy(b, data, size);
	hello(b, size);
	tasks(b, size);
	results(b, size);
	ctl(b, size);
	free(b);
	return 0;
}
