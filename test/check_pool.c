/*
 * check_pool.c: map semantics of the public API on fake GPUs: results in
 * item order, any item size, the message limits both ways, an item's own
 * failure, input the pool refuses, the errors it reports, old names and
 * reserved fields. Assertions run in the test process, on what workers
 * send back. Placement and ids are check_place.c's, feeds check_feed.c's,
 * allocation failures check_alloc.c's, threads and forks check_threads.c's.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hwloc.h>

#include "gpupool.h"
#include "check_main.h"
#include "proc_test.h"
#include "pool_test.h"
#include "feed_test.h"

START_TEST(map_results_in_item_order)
{
	const size_t	 ns[] = { 0, 1, 3, 1000, 100000 };
	struct gp_pool	*p = make_pool(4, 1);
	size_t		 k, i;
	int		 bad, r = 0;

	for (k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
		size_t		 n = ns[k];
		int		*v = calloc(n + 1, sizeof(int));
		struct gp_item	*it = int_items(v, n);

		ck_assert_int_eq(gp_pool_map(p, twice, NULL, 0, it, n), 0);
		/* One assertion per map: Check writes a record per call. */
		for (i = 0, bad = 0; i < n && !bad; i++) {
			if (it[i].outlen == sizeof(int))
				memcpy(&r, it[i].out, sizeof(r));
			bad = it[i].status != GP_OK ||
			    it[i].outlen != sizeof(int) || r != 2 * (int)i ||
			    it[i].attempts != 1 || it[i].worker < 0 ||
			    it[i].worker >= 4;
		}
		ck_assert_msg(!bad, "n=%zu: item %zu: status %d outlen %zu "
		    "value %d attempts %d worker %d", n, i - 1,
		    it[i - 1].status, it[i - 1].outlen, r, it[i - 1].attempts,
		    it[i - 1].worker);
		gp_items_release(it, n);
		free(it);
		free(v);
	}
	gp_pool_destroy(p);
}
END_TEST

START_TEST(arg_is_copied_per_map)
{
	struct gp_pool	*p = make_pool(2, 1);
	int		 v[10], mul = 3, r;
	struct gp_item	*it = int_items(v, 10);

	ck_assert_int_eq(gp_pool_map(p, twice, &mul, sizeof(mul), it, 10), 0);
	memcpy(&r, it[7].out, sizeof(r));
	ck_assert_int_eq(r, 21);
	gp_items_release(it, 10);
	mul = 5;	/* a new value after the workers were forked */
	ck_assert_int_eq(gp_pool_map(p, twice, &mul, sizeof(mul), it, 10), 0);
	memcpy(&r, it[7].out, sizeof(r));
	ck_assert_int_eq(r, 35);
	gp_items_release(it, 10);
	free(it);
	gp_pool_destroy(p);
}
END_TEST

START_TEST(any_item_size_zero_to_megabytes)
{
	struct gp_pool	*p = make_pool(2, 1);

	echo_sizes(p);
	gp_pool_destroy(p);
}
END_TEST

START_TEST(max_msg_enforced_both_ways)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 1, .max_msg = 1024 };
	struct gp_item		 it[3];
	static uint8_t		 big[2048];

	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	memset(it, 0, sizeof(it));
	it[0].in = big;			/* fits */
	it[0].inlen = 1024;
	it[1].in = big;			/* too big to send */
	it[1].inlen = 1025;
	it[2].in = big;
	it[2].inlen = 10;
	ck_assert_int_eq(gp_pool_map(p, echo_rev, NULL, 0, it, 3), 0);
	ck_assert_int_eq(it[0].status, GP_OK);
	ck_assert_uint_eq(it[0].outlen, 1024);
	ck_assert_int_eq(it[1].status, GP_ERROR);
	ck_assert_int_eq(it[1].code, -EMSGSIZE);
	ck_assert_int_eq(it[1].attempts, 0);
	ck_assert_int_eq(it[2].status, GP_OK);
	gp_items_release(it, 3);
	gp_pool_destroy(p);
}
END_TEST

/* max_msg bounds one item and one result, not a batch: thousands of tiny
 * items must go in batches and come back in result messages that each
 * peer accepts, down to a max_msg of one item. A message over it would
 * get its worker killed (and the item run again). */
START_TEST(small_max_msg_batches_fit_both_ways)
{
	const size_t		 maxes[] = { 4096, 100, sizeof(int) };
	const size_t		 n = 10000;
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 2 };
	struct gp_worker_info	 wi;
	int			*v = calloc(n, sizeof(*v)), r;
	struct gp_item		*it = int_items(v, n);
	pid_t			 pid[2];
	size_t			 k, i, bad;
	int			 w;

	for (k = 0; k < sizeof(maxes) / sizeof(maxes[0]); k++) {
		o.max_msg = maxes[k];
		ck_assert_int_eq(gp_pool_create(&p, &o), 0);
		for (w = 0; w < 2; w++) {
			ck_assert_int_eq(gp_pool_info(p, w, &wi), 0);
			pid[w] = wi.pid;
		}
		ck_assert_int_eq(gp_pool_map(p, twice, NULL, 0, it, n), 0);
		for (i = 0, bad = 0; i < n; i++) {
			r = -1;
			if (it[i].outlen == sizeof(r))
				memcpy(&r, it[i].out, sizeof(r));
			if (it[i].status != GP_OK || it[i].attempts != 1 ||
			    r != 2 * (int)i)
				bad++;
		}
		ck_assert_msg(bad == 0, "max_msg %zu: %zu items not run "
		    "once with their result", maxes[k], bad);
		/* No worker was killed for an over-long message. */
		for (w = 0; w < 2; w++) {
			ck_assert_int_eq(gp_pool_info(p, w, &wi), 0);
			ck_assert_int_eq(wi.pid, pid[w]);
		}
		gp_items_release(it, n);
		gp_pool_destroy(p);
	}
	free(it);
	free(v);
}
END_TEST

/* Input byte: 0 replies small then too big; 1 too big only; 2 too big
 * then small; 3 too big and returns 5. fn ignores gp_ctx_reply()'s -EMSGSIZE
 * but checks it was returned. */
static int
big_reply(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	static uint8_t	 big[2048];
	int		 mode = *(const uint8_t *)in;

	if (mode == 0 && gp_ctx_reply(ctx, "small", 5) != 0)
		return 90;
	if (gp_ctx_reply(ctx, big, sizeof(big)) != -EMSGSIZE)
		return 91;
	if (mode == 2 && gp_ctx_reply(ctx, "ok", 2) != 0)
		return 92;
	return mode == 3 ? 5 : 0;
}

START_TEST(oversized_reply_is_an_error)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 1, .max_msg = 1024 };
	static const uint8_t	 mode[4] = { 0, 1, 2, 3 };
	struct gp_item		 it[4];
	int			 i;

	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	memset(it, 0, sizeof(it));
	for (i = 0; i < 4; i++) {
		it[i].in = &mode[i];
		it[i].inlen = 1;
	}
	ck_assert_int_eq(gp_pool_map(p, big_reply, NULL, 0, it, 4), 0);
	for (i = 0; i < 4; i++) {
		if (i == 2)
			continue;
		ck_assert_msg(it[i].status == GP_ERROR, "mode %d: status %d "
		    "code %d", i, it[i].status, it[i].code);
		ck_assert_int_eq(it[i].code, -EMSGSIZE);
		ck_assert_ptr_null(it[i].out);
		ck_assert_uint_eq(it[i].outlen, 0);
	}
	/* The last call wins: a good reply after a refused one counts. */
	ck_assert_int_eq(it[2].status, GP_OK);
	ck_assert_uint_eq(it[2].outlen, 2);
	ck_assert_int_eq(memcmp(it[2].out, "ok", 2), 0);
	gp_items_release(it, 4);
	gp_pool_destroy(p);
}
END_TEST

static int
fail_odd(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int	 x;

	memcpy(&x, in, sizeof(x));
	return (x % 2) ? x : 0;
}

START_TEST(item_failure_is_the_items_status)
{
	struct gp_pool	*p = make_pool(3, 1);
	int		 v[101];
	struct gp_item	*it = int_items(v, 101);
	char		 msg[128];
	int		 i;

	ck_assert_int_eq(gp_pool_map(p, fail_odd, NULL, 0, it, 101), 0);
	for (i = 0; i < 101; i++) {
		ck_assert_int_eq(it[i].status, (i % 2) ? GP_FAILED : GP_OK);
		ck_assert_int_eq(it[i].code, (i % 2) ? i : 0);
	}
	ck_assert_str_eq(gp_item_strerror(&it[3], msg, sizeof(msg)),
	    "failed (fn returned 3)");
	ck_assert_str_eq(gp_item_strerror(&it[2], msg, sizeof(msg)), "ok");
	free(it);
	gp_pool_destroy(p);
}
END_TEST

/* in NULL with bytes to read is the caller's bug: refused, never read
 * (the master used to copy from NULL and die), and no item reads GP_OK. */
START_TEST(missing_input_is_refused)
{
	struct gp_pool	*p = make_pool(1, 1);
	int		 v[3] = { 1, 2, 3 }, i, r;
	struct gp_item	 it[3];
	struct test_feed af = { .it = it, .n = 3 };
	struct gp_feed	 f = { .next = test_feed_next, .done = test_feed_done,
			       .in_fd = -1, .arg = &af, .ctl_fd = -1 };

	memset(it, 0, sizeof(it));	/* status 0 is GP_OK */
	for (i = 0; i < 3; i++) {
		it[i].in = &v[i];
		it[i].inlen = sizeof(int);
	}
	it[1].in = NULL;
	it[1].inlen = 100;
	ck_assert_int_eq(gp_pool_map(p, twice, NULL, 0, it, 3), -EINVAL);
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(it[i].status, GP_NOTRUN);
		ck_assert_int_eq(it[i].attempts, 0);
	}
	/* A stream cannot be refused whole: that item is an error. */
	ck_assert_int_eq(gp_pool_run(p, twice, NULL, 0, &f), 0);
	ck_assert_uint_eq(af.done, 3);
	ck_assert_int_eq(it[1].status, GP_ERROR);
	ck_assert_int_eq(it[1].code, -EINVAL);
	ck_assert_int_eq(it[1].attempts, 0);
	for (i = 0; i < 3; i += 2) {
		ck_assert_int_eq(it[i].status, GP_OK);
		memcpy(&r, it[i].out, sizeof(r));
		ck_assert_int_eq(r, 2 * v[i]);
	}
	gp_items_release(it, 3);
	gp_pool_destroy(p);
}
END_TEST

/* pool_map() has no errbuf: gp_last_error() says why it failed, and its
 * items do not read GP_OK. */
START_TEST(pool_map_says_why_it_failed)
{
	int		 v[4] = { 1, 2, 3, 4 }, i;
	struct gp_item	 it[4];

	memset(it, 0, sizeof(it));	/* status 0 is GP_OK */
	for (i = 0; i < 4; i++) {
		it[i].in = &v[i];
		it[i].inlen = sizeof(int);
	}
	setenv("GPUPOOL_FAKE_GPUS", "abc", 1);
	ck_assert_int_eq(pool_map(twice, it, 4), -EINVAL);
	ck_assert_ptr_nonnull(strstr(gp_last_error(),
	    "GPUPOOL_FAKE_GPUS='abc'"));
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(it[i].status, GP_NOTRUN);
	/* A failure of the map itself names its code. */
	setenv("GPUPOOL_FAKE_GPUS", "2", 1);
	ck_assert_int_eq(pool_map(NULL, it, 4), -EINVAL);
	ck_assert_str_eq(gp_last_error(), gp_strerror(-EINVAL));
	ck_assert_int_eq(pool_map(twice, it, 4), 0);
	ck_assert_str_eq(gp_last_error(), "");
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(it[i].status, GP_OK);
	gp_items_release(it, 4);
	gp_default_pool_destroy();
	unsetenv("GPUPOOL_FAKE_GPUS");
}
END_TEST

/* fn through the 0.1 name of gp_ctx_reply(). */
static int
twice_old(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int	 x;

	memcpy(&x, in, sizeof(x));
	x *= 2;
	return gp_reply(ctx, &x, sizeof(x));
}

/* Programs written for 0.1 still build and behave: each old name is the
 * new call (gp_map, gp_run, gp_reply, gp_shutdown). */
START_TEST(old_names_still_work)
{
	struct gp_pool	*p = make_pool(2, 1);
	int		 v[20], r, i;
	struct gp_item	*it = int_items(v, 20);
	struct test_feed af = { .it = it, .n = 20 };
	struct gp_feed	 f = { .next = test_feed_next, .done = test_feed_done,
			       .in_fd = -1, .ctl_fd = -1, .arg = &af };

	ck_assert_int_eq(gp_map(p, twice_old, NULL, 0, it, 20), 0);
	for (i = 0; i < 20; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		memcpy(&r, it[i].out, sizeof(r));
		ck_assert_int_eq(r, 2 * i);
	}
	gp_items_release(it, 20);
	ck_assert_int_eq(gp_run(p, twice_old, NULL, 0, &f), 0);
	ck_assert_uint_eq(af.done, 20);
	for (i = 0; i < 20; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		memcpy(&r, it[i].out, sizeof(r));
		ck_assert_int_eq(r, 2 * i);
	}
	gp_items_release(it, 20);
	ck_assert_int_eq(gp_map(p, NULL, NULL, 0, it, 1), -EINVAL);
	gp_pool_destroy(p);

	setenv("GPUPOOL_FAKE_GPUS", "2", 1);
	ck_assert_int_eq(pool_map(twice_old, it, 20), 0);
	ck_assert_int_eq(it[19].status, GP_OK);
	gp_items_release(it, 20);
	gp_shutdown();
	unsetenv("GPUPOOL_FAKE_GPUS");
	/* The default pool's workers are reaped: no child is left. */
	ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
	ck_assert_int_eq(errno, ECHILD);
	free(it);
}
END_TEST

/* Room to grow: unknown flags and a reserved field set (a newer header,
 * or memory not zeroed) are refused, with nothing run; the library writes
 * zeros in the reserved fields it fills. */
START_TEST(reserved_fields_leave_room_to_grow)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 1 };
	struct gp_worker_info	 wi;
	struct gp_item		 it[3];
	int			 v[3] = { 1, 2, 3 }, calls = 0, i;
	/* The last reserved word: the first ones become fields. */
	const size_t		 last = sizeof(o.reserved) /
				     sizeof(o.reserved[0]) - 1;
	struct gp_feed		 f = { .next = count_next,
				       .done = test_feed_done, .in_fd = -1,
				       .ctl_fd = -1, .arg = &calls };
	char			 err[256];

	o.errbuf = err;
	o.errlen = sizeof(err);
	o.flags = 1u << 30;
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_ptr_null(p);
	ck_assert_msg(strstr(err, "unknown flags 0x40000000") != NULL,
	    "errbuf: %s", err);
	o.flags = 0;
	o.reserved[last] = 1;
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_ptr_null(p);
	ck_assert_msg(strstr(err, "pool options: a reserved field is set") !=
	    NULL, "errbuf: %s", err);
	o.reserved[last] = 0;
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);

	memset(it, 0, sizeof(it));
	for (i = 0; i < 3; i++) {
		it[i].in = &v[i];
		it[i].inlen = sizeof(int);
	}
	ck_assert_int_eq(gp_pool_map(p, twice, NULL, 0, it, 3), 0);
	for (i = 0; i < 3; i++)
		ck_assert_int_eq(it[i].status, GP_OK);
	gp_items_release(it, 3);

	f.reserved[0] = 1;
	ck_assert_int_eq(gp_pool_run(p, twice, NULL, 0, &f), -EINVAL);
	ck_assert_int_eq(calls, 0);
	f.reserved[0] = 0;
	ck_assert_int_eq(gp_pool_run(p, twice, NULL, 0, &f), 0);
	ck_assert_int_eq(calls, 1);

	memset(&wi, 0xff, sizeof(wi));
	ck_assert_int_eq(gp_pool_info(p, 0, &wi), 0);
	for (i = 0; i < (int)sizeof(wi.reserved); i++)
		ck_assert_int_eq(wi.reserved[i], 0);
	gp_pool_destroy(p);
}
END_TEST

/* gp_item_init() on memory holding anything: the item reads as one that
 * never ran, with the given input, and runs. */
START_TEST(item_init_sets_up_any_memory)
{
	struct gp_pool	*p = make_pool(1, 1);
	struct gp_item	 it;
	int		 v = 7, r;

	memset(&it, 0xa5, sizeof(it));
	gp_item_init(&it, &v, sizeof(v));
	ck_assert_ptr_eq(it.in, &v);
	ck_assert_uint_eq(it.inlen, sizeof(v));
	ck_assert_ptr_null(it.out);
	ck_assert_uint_eq(it.outlen, 0);
	ck_assert_int_eq(it.status, GP_NOTRUN);
	ck_assert_int_eq(it.code, 0);
	ck_assert_int_eq(it.worker, -1);
	ck_assert_int_eq(it.attempts, 0);
	ck_assert_int_eq(gp_pool_map(p, twice, NULL, 0, &it, 1), 0);
	ck_assert_int_eq(it.status, GP_OK);
	memcpy(&r, it.out, sizeof(r));
	ck_assert_int_eq(r, 14);
	gp_items_release(&it, 1);
	gp_item_init(&it, NULL, 0);
	ck_assert_ptr_null(it.in);
	ck_assert_int_eq(it.status, GP_NOTRUN);
	gp_pool_destroy(p);
}
END_TEST

START_TEST(strerror_names_every_code)
{
	const int	 codes[] = { GP_ENOGPU, GP_EINIT, GP_ENOWORKER,
			    GP_EPLAN, -EINVAL, -ECHILD, -EMSGSIZE, -EPROTO };
	size_t		 i;

	for (i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		ck_assert_str_ne(gp_strerror(codes[i]),
		    "unknown gpupool error");
	ck_assert_str_eq(gp_strerror(12345), "unknown gpupool error");
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("pool");
	TCase	*tc = tcase_create("map");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, map_results_in_item_order);
	tcase_add_test(tc, arg_is_copied_per_map);
	tcase_add_test(tc, any_item_size_zero_to_megabytes);
	tcase_add_test(tc, max_msg_enforced_both_ways);
	tcase_add_test(tc, small_max_msg_batches_fit_both_ways);
	tcase_add_test(tc, oversized_reply_is_an_error);
	tcase_add_test(tc, item_failure_is_the_items_status);
	tcase_add_test(tc, missing_input_is_refused);
	tcase_add_test(tc, pool_map_says_why_it_failed);
	tcase_add_test(tc, old_names_still_work);
	tcase_add_test(tc, item_init_sets_up_any_memory);
	tcase_add_test(tc, reserved_fields_leave_room_to_grow);
	tcase_add_test(tc, strerror_names_every_code);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
