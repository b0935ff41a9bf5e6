/*
 * check_rproto.c: the payloads of the rank messages (src/cli/common/rproto.c):
 * each encoded and parsed back, and the malformed ones a rank must
 * refuse (truncated, a length past the end, a missing NUL, a slot on a
 * GPU it does not have), each with -EPROTO.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "master/master.h"
#include "check_main.h"

/* Rank 1 of a run: 3 slots on 2 GPUs. */
static void
peer_make(struct peer *p)
{
	static int	 w_gpu[] = { 0, 1, 1 };
	static char	*ids[] = { "GPU-a", "7" };

	memset(p, 0, sizeof(*p));
	p->host = "node-17";
	p->nw = 3;
	p->ngpu = 2;
	p->w_gpu = w_gpu;
	p->gpu_id = ids;
}

START_TEST(hello_roundtrip)
{
	struct peer	 p;
	struct rp_hello	 h;
	uint8_t		*b;
	size_t		 len;
	int32_t		 g;

	peer_make(&p);
	ck_assert_ptr_nonnull(b = rp_hello_encode(p.nw, p.ngpu, p.w_gpu,
	    p.host, p.gpu_id, &len));
	ck_assert_uint_eq(len, sizeof(struct rhello) + 3 * 4 + 8 + 6 + 2);
	ck_assert_int_eq(rp_hello_parse(b, len, &h), 0);
	ck_assert_uint_eq(h.nw, 3);
	ck_assert_uint_eq(h.ngpu, 2);
	memcpy(&g, h.w_gpu + 2 * sizeof(g), sizeof(g));
	ck_assert_int_eq(g, 1);
	ck_assert_str_eq(h.host, "node-17");
	ck_assert_str_eq(h.gpu_id, "GPU-a");
	ck_assert_str_eq(h.gpu_id + strlen(h.gpu_id) + 1, "7");
	free(b);
}
END_TEST

START_TEST(hello_malformed)
{
	struct peer	 p;
	struct rp_hello	 h;
	struct rhello	 rh;
	uint8_t		*b;
	size_t		 len, n;
	int32_t		 g;

	peer_make(&p);
	ck_assert_ptr_nonnull(b = rp_hello_encode(p.nw, p.ngpu, p.w_gpu,
	    p.host, p.gpu_id, &len));
	/* Every truncation: short header, slots, host, ids, last NUL. */
	for (n = 0; n < len; n++)
		ck_assert_int_eq(rp_hello_parse(b, n, &h), -EPROTO);
	/* The last GPU id without its NUL. */
	b[len - 1] = 'x';
	ck_assert_int_eq(rp_hello_parse(b, len, &h), -EPROTO);
	b[len - 1] = '\0';
	/* A slot on GPU 2 of 2, then on GPU -1. */
	g = 2;
	memcpy(b + sizeof(rh), &g, sizeof(g));
	ck_assert_int_eq(rp_hello_parse(b, len, &h), -EPROTO);
	g = -1;
	memcpy(b + sizeof(rh), &g, sizeof(g));
	ck_assert_int_eq(rp_hello_parse(b, len, &h), -EPROTO);
	g = 0;
	memcpy(b + sizeof(rh), &g, sizeof(g));
	ck_assert_int_eq(rp_hello_parse(b, len, &h), 0);
	/* No slots; more GPUs than slots; slots past the payload. */
	memcpy(&rh, b, sizeof(rh));
	rh.nw = 0;
	memcpy(b, &rh, sizeof(rh));
	ck_assert_int_eq(rp_hello_parse(b, len, &h), -EPROTO);
	rh.nw = 1;
	memcpy(b, &rh, sizeof(rh));
	ck_assert_int_eq(rp_hello_parse(b, len, &h), -EPROTO);
	rh.nw = 1u << 16;
	memcpy(b, &rh, sizeof(rh));
	ck_assert_int_eq(rp_hello_parse(b, len, &h), -EPROTO);
	rh.nw = 3;
	rh.ngpu = 3;	/* one id more than the payload has */
	memcpy(b, &rh, sizeof(rh));
	ck_assert_int_eq(rp_hello_parse(b, len, &h), -EPROTO);
	free(b);
}
END_TEST

/* A task as feed_hand() builds it: header, command, NUL. */
static size_t
task_make(uint8_t *b, uint64_t seq, uint32_t attempt, const char *cmd)
{
	struct task_hdr	 h = { .seq = seq, .attempt = attempt };
	size_t		 len = sizeof(h) + strlen(cmd) + 1;

	memcpy(b + sizeof(h), cmd, strlen(cmd) + 1);
	rp_task_encode(b, len, &h);
	return len;
}

START_TEST(tasks_roundtrip)
{
	struct task_hdr	 h;
	uint8_t		 b[256];
	size_t		 len, n1;
	ssize_t		 n;

	n1 = task_make(b, 41, 1, "echo hi");
	len = n1 + task_make(b + n1, 42, 3, "sleep 1; true");
	n = rp_tasks_next(b, len, 0, &h);
	ck_assert_int_eq(n, (ssize_t)n1);
	ck_assert_uint_eq(h.seq, 41);
	ck_assert_uint_eq(h.attempt, 1);
	ck_assert_uint_eq(h.cmdlen, 8);
	ck_assert_str_eq((char *)b + sizeof(h), "echo hi");
	n = rp_tasks_next(b, len, n1, &h);
	ck_assert_int_eq(n, (ssize_t)(len - n1));
	ck_assert_uint_eq(h.seq, 42);
	ck_assert_uint_eq(h.attempt, 3);
	ck_assert_str_eq((char *)b + n1 + sizeof(h), "sleep 1; true");
}
END_TEST

START_TEST(tasks_malformed)
{
	struct task_hdr	 h;
	uint8_t		 b[256];
	size_t		 len, n;

	len = task_make(b, 1, 1, "true");
	/* Truncated: in the header, in the command, before the NUL. */
	for (n = 1; n < len; n++)
		ck_assert_int_eq(rp_tasks_next(b, n, 0, &h), -EPROTO);
	/* No NUL where the command ends. */
	b[len - 1] = 'x';
	ck_assert_int_eq(rp_tasks_next(b, len, 0, &h), -EPROTO);
	b[len - 1] = '\0';
	/* An empty command (not even its NUL), a length past the end. */
	memset(&h, 0, sizeof(h));
	rp_task_encode(b, sizeof(h), &h);
	ck_assert_int_eq(rp_tasks_next(b, len, 0, &h), -EPROTO);
	rp_task_encode(b, len + 1, &h);
	ck_assert_int_eq(rp_tasks_next(b, len, 0, &h), -EPROTO);
	rp_task_encode(b, sizeof(h) + UINT32_MAX, &h);
	ck_assert_int_eq(rp_tasks_next(b, len, 0, &h), -EPROTO);
	/* off past len is refused, not read. */
	ck_assert_int_eq(rp_tasks_next(b, len, len + 1, &h), -EPROTO);
}
END_TEST

START_TEST(results_roundtrip)
{
	struct rresult	 rr, got;
	const uint8_t	*out;
	uint8_t		 b[256];
	size_t		 n1;
	ssize_t		 n;

	memset(&rr, 0, sizeof(rr));
	rr.seq = 7;
	rr.attempt = 2;
	rr.status = GP_CRASHED;
	rr.code = 137;
	rr.attempts = 1;
	rr.worker = 3;
	rr.outlen = 5;
	rp_result_encode(b, &rr, "reply");
	n1 = sizeof(rr) + 5;
	rr.seq = 8;
	rr.outlen = 0;
	rp_result_encode(b + n1, &rr, NULL);
	n = rp_results_next(b, n1 + sizeof(rr), 0, &got, &out);
	ck_assert_int_eq(n, (ssize_t)n1);
	ck_assert_uint_eq(got.seq, 7);
	ck_assert_uint_eq(got.attempt, 2);
	ck_assert_int_eq(got.status, GP_CRASHED);
	ck_assert_int_eq(got.code, 137);
	ck_assert_int_eq(got.worker, 3);
	ck_assert_uint_eq(got.outlen, 5);
	ck_assert_ptr_eq(out, b + sizeof(rr));
	ck_assert_int_eq(memcmp(out, "reply", 5), 0);
	n = rp_results_next(b, n1 + sizeof(rr), n1, &got, &out);
	ck_assert_int_eq(n, (ssize_t)sizeof(rr));
	ck_assert_uint_eq(got.seq, 8);
	ck_assert_uint_eq(got.outlen, 0);
}
END_TEST

START_TEST(results_malformed)
{
	struct rresult	 rr, got;
	const uint8_t	*out;
	uint8_t		 b[256];
	size_t		 len, n;

	memset(&rr, 0, sizeof(rr));
	rr.outlen = 3;
	rp_result_encode(b, &rr, "abc");
	len = sizeof(rr) + 3;
	/* Truncated: in the record, in its reply bytes. */
	for (n = 0; n < len; n++)
		ck_assert_int_eq(rp_results_next(b, n, 0, &got, &out),
		    -EPROTO);
	/* A reply length past the end, and one that would wrap. */
	rr.outlen = 4;
	memcpy(b, &rr, sizeof(rr));
	ck_assert_int_eq(rp_results_next(b, len, 0, &got, &out), -EPROTO);
	rr.outlen = UINT64_MAX;
	memcpy(b, &rr, sizeof(rr));
	ck_assert_int_eq(rp_results_next(b, len, 0, &got, &out), -EPROTO);
}
END_TEST

START_TEST(ctl_roundtrip_and_size)
{
	uint8_t	 b[RP_CTL_LEN + 1];
	int	 how = 0;

	rp_ctl_encode(b, RC_END_LOST);
	ck_assert_int_eq(rp_ctl_parse(b, RP_CTL_LEN, &how), 0);
	ck_assert_int_eq(how, RC_END_LOST);
	ck_assert_int_eq(rp_ctl_parse(b, RP_CTL_LEN - 1, &how), -EPROTO);
	ck_assert_int_eq(rp_ctl_parse(b, RP_CTL_LEN + 1, &how), -EPROTO);
	ck_assert_int_eq(rp_ctl_parse(b, 0, &how), -EPROTO);
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("rproto");
	TCase	*tc = tcase_create("payloads");

	tcase_add_test(tc, hello_roundtrip);
	tcase_add_test(tc, hello_malformed);
	tcase_add_test(tc, tasks_roundtrip);
	tcase_add_test(tc, tasks_malformed);
	tcase_add_test(tc, results_roundtrip);
	tcase_add_test(tc, results_malformed);
	tcase_add_test(tc, ctl_roundtrip_and_size);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
