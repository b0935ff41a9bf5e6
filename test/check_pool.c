/*
 * check_pool.c: map semantics of the public API on fake GPUs: results in
 * item order, any item size, workers that live across calls, GPU identity
 * seen from inside a worker, real CPU binding, streaming, recycling.
 * Assertions run in the test process, on what workers send back.
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

/*
 * Allocation failures on demand: this program is linked with
 * -Wl,--wrap=malloc, --wrap=realloc and --wrap=mmap64 (test/meson.build;
 * with 64-bit file offsets, glibc's mmap is mmap64), so every malloc,
 * realloc and mmap of the library and of this file comes here. Armed, the fail_at-th malloc or realloc made by the arming
 * process fails; workers (forked copies) never fail. With no_regions,
 * the library's regions (data.c, the only MAP_NORESERVE mappings) cannot
 * be mapped: big items and results go through the pipes.
 */
void	*__real_malloc(size_t);
void	*__real_realloc(void *, size_t);
void	*__real_mmap64(void *, size_t, int, int, int, off_t);
void	*__wrap_malloc(size_t);
void	*__wrap_realloc(void *, size_t);
void	*__wrap_mmap64(void *, size_t, int, int, int, off_t);

static int	 no_regions;
/* The window make_pool() gives its pools (0: the default). */
static uint64_t	 make_window;

void *
__wrap_mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (no_regions && (flags & MAP_NORESERVE)) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	return __real_mmap64(addr, len, prot, flags, fd, off);
}

static pid_t	 fail_pid;
static long	 fail_at;
static int	 failed;
/* Set, only reallocs of at least fail_big bytes count, mallocs never:
 * a failure aimed at one growing buffer, whatever the timing. */
static size_t	 fail_big;

static int
fail_now(void)
{
	if (fail_pid == 0 || fail_pid != getpid() || --fail_at != 0)
		return 0;
	failed = 1;
	return 1;
}

void *
__wrap_malloc(size_t n)
{
	return (fail_big == 0 && fail_now()) ? NULL : __real_malloc(n);
}

void *
__wrap_realloc(void *p, size_t n)
{
	return ((fail_big == 0 || n >= fail_big) && fail_now()) ? NULL :
	    __real_realloc(p, n);
}

static struct gp_pool *
make_pool(int fake, int per_gpu)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { 0 };
	char			 err[256];

	o.fake_gpus = fake;
	o.per_gpu = per_gpu;
	o.window = make_window;
	o.errbuf = err;
	o.errlen = sizeof(err);
	ck_assert_msg(gp_pool_create(&p, &o) == 0, "create: %s", err);
	return p;
}

static int
twice(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int	 x;

	if (len != sizeof(x))
		return 99;
	memcpy(&x, in, sizeof(x));
	x = arg ? x * *(int *)arg : x * 2;
	return gp_ctx_reply(ctx, &x, sizeof(x));
}

static struct gp_item *
int_items(int *vals, size_t n)
{
	struct gp_item	*it = calloc(n, sizeof(*it));
	size_t		 i;

	for (i = 0; i < n; i++) {
		vals[i] = (int)i;
		it[i].in = &vals[i];
		it[i].inlen = sizeof(int);
	}
	return it;
}

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

/* Echo the input, reversed, so a copy that ignores the data fails. */
static int
echo_rev(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	uint8_t	*b = malloc(len ? len : 1);
	size_t	 i;
	int	 rc;

	for (i = 0; i < len; i++)
		b[i] = ((const uint8_t *)in)[len - 1 - i];
	if (len == 0 && in != NULL)
		rc = 98;	/* zero bytes must arrive as NULL */
	else
		rc = gp_ctx_reply(ctx, b, len);
	free(b);
	return rc;
}

/* Items of each size from none to 3 MiB echoed by p, exact. */
static void
echo_sizes(struct gp_pool *p)
{
	const size_t	 sz[] = { 0, 1, 16, 4096, 16 << 10, (16 << 10) + 1,
			     65537, 1 << 20, 3 << 20 };
	const size_t	 n = sizeof(sz) / sizeof(sz[0]);
	struct gp_item	 it[sizeof(sz) / sizeof(sz[0])];
	uint8_t		*buf[sizeof(sz) / sizeof(sz[0])];
	size_t		 i, j, bad;

	memset(it, 0, sizeof(it));
	for (i = 0; i < n; i++) {
		buf[i] = malloc(sz[i] + 1);
		for (j = 0; j < sz[i]; j++)
			buf[i][j] = (uint8_t)(j * 7 + i);
		it[i].in = sz[i] ? buf[i] : NULL;
		it[i].inlen = sz[i];
	}
	ck_assert_int_eq(gp_pool_map(p, echo_rev, NULL, 0, it, n), 0);
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		ck_assert_uint_eq(it[i].outlen, sz[i]);
		if (sz[i] == 0)
			ck_assert_ptr_null(it[i].out);
		for (j = 0, bad = 0; j < sz[i]; j++)
			bad += ((uint8_t *)it[i].out)[j] != buf[i][sz[i] - 1 - j];
		ck_assert_msg(bad == 0, "item %zu: %zu bytes differ", i, bad);
		free(buf[i]);
	}
	gp_items_release(it, n);
}

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

/* Every 50th item replies 70,000 bytes of its number (the master's read
 * buffer grows, its result is allocated); the others reply nothing. */
#define FEW_BIG		70000

static int
few_big(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	static uint8_t	 big[FEW_BIG];
	int		 x;

	memcpy(&x, in, sizeof(x));
	if (x % 50 != 0)
		return 0;
	memset(big, x & 0xff, sizeof(big));
	return gp_ctx_reply(ctx, big, sizeof(big));
}

/* Items that read GP_OK have their result; no other status but GP_NOTRUN
 * or (after a failed call) GP_ERROR with its code. Returns the bad ones. */
static size_t
few_big_bad(const struct gp_item *it, size_t n, int rc)
{
	size_t		 i, bad = 0;
	int		 x;

	for (i = 0; i < n; i++) {
		memcpy(&x, it[i].in, sizeof(x));
		if (it[i].status == GP_OK)
			bad += it[i].outlen != (x % 50 ? 0 : FEW_BIG) ||
			    (it[i].outlen && (((uint8_t *)it[i].out)[0] !=
			    (x & 0xff) || ((uint8_t *)it[i].out)[FEW_BIG - 1] !=
			    (x & 0xff)));
		else
			bad += rc == 0 || (it[i].status != GP_NOTRUN &&
			    (it[i].status != GP_ERROR || it[i].code != rc));
	}
	return bad;
}

/* The items of a few_big call (fb_a), and of the one after it (fb_b). */
enum { FB_N = 400 };
static int		 fb_v[FB_N];
static struct gp_item	 fb_a[FB_N], fb_b[FB_N];

static void
few_big_items(struct gp_item *a)
{
	size_t	 i;

	for (i = 0; i < FB_N; i++) {
		fb_v[i] = (int)i;
		a[i].in = &fb_v[i];
		a[i].inlen = sizeof(int);
	}
}

/*
 * After a gp_pool_map() of few_big on fb_a that returned rc with an
 * allocation failure injected (allocation k): the call failed with -ENOMEM
 * and left every item as the header says, and the pool stays usable: the
 * next call runs every item, and nothing touches the failed call's items
 * once it has returned (no worker kept a batch of them, no half-built
 * message was sent).
 */
static void
few_big_after_failure(struct gp_pool *p, long k, int rc)
{
	static uint8_t	 canary[sizeof(fb_a)];
	size_t		 bad;

	memset(canary, 0xa5, sizeof(canary));
	bad = few_big_bad(fb_a, FB_N, -ENOMEM);
	ck_assert_msg(rc == -ENOMEM, "allocation %ld failed: "
	    "gp_pool_map returned %d", k, rc);
	ck_assert_msg(bad == 0, "allocation %ld failed: %zu items "
	    "with a wrong status or result", k, bad);
	/* The caller reuses the memory of the failed call's items. */
	gp_items_release(fb_a, FB_N);
	memset(fb_a, 0xa5, sizeof(fb_a));
	few_big_items(fb_b);
	ck_assert_int_eq(gp_pool_map(p, few_big, NULL, 0, fb_b, FB_N), 0);
	ck_assert_msg(few_big_bad(fb_b, FB_N, 0) == 0, "allocation %ld "
	    "failed: the next call went wrong", k);
	ck_assert_msg(memcmp(fb_a, canary, sizeof(fb_a)) == 0, "allocation "
	    "%ld failed: the failed call's items were written later", k);
	gp_items_release(fb_b, FB_N);
}

/*
 * gp_pool_map() failing with -ENOMEM at each allocation it makes in turn:
 * the call fails cleanly, and the pool stays usable
 * (few_big_after_failure()). Which allocation the k-th is depends on
 * timing; receive_alloc_fail_fails_the_call aims at the read buffer.
 */
/* Fail each allocation of a few_big call on p in turn, until one runs
 * without a failure; how many there were. */
static long
fail_each_allocation(struct gp_pool *p)
{
	long	 k;
	int	 rc;

	for (k = 1; ; k++) {
		ck_assert_msg(k < 2000, "gp_pool_map allocates without end");
		few_big_items(fb_a);
		failed = 0;
		fail_at = k;
		fail_pid = getpid();
		rc = gp_pool_map(p, few_big, NULL, 0, fb_a, FB_N);
		fail_pid = 0;
		if (!failed) {
			ck_assert_int_eq(rc, 0);
			ck_assert_uint_eq(few_big_bad(fb_a, FB_N, 0), 0);
			gp_items_release(fb_a, FB_N);
			break;
		}
		few_big_after_failure(p, k, rc);
	}
	return k;
}

START_TEST(alloc_fail_leaves_the_pool_usable)
{
	struct gp_pool	*p = make_pool(2, 2);

	/* Failures were injected, in the loop's several allocations. */
	ck_assert_int_gt(fail_each_allocation(p), 4);
	gp_pool_destroy(p);
}
END_TEST

/*
 * The master's read buffer cannot grow for a result (its first 70,000-byte
 * one: in a new pool every worker's buffer is 64 KiB at most, and nothing
 * else the call allocates is over 100,000 bytes): gp_pool_map() returns
 * -ENOMEM, as for any other allocation; it must not take the failed read
 * for the worker's EOF, kill it and rerun its items (a call that
 * succeeds). The pool stays usable. Its regions could not be mapped, so
 * the big results come through the pipes, as the next test's do.
 */
START_TEST(receive_alloc_fail_fails_the_call)
{
	struct gp_pool	*p;
	int		 rc;

	no_regions = 1;
	p = make_pool(2, 2);
	no_regions = 0;

	few_big_items(fb_a);
	failed = 0;
	fail_at = 1;
	fail_big = 100000;
	fail_pid = getpid();
	rc = gp_pool_map(p, few_big, NULL, 0, fb_a, FB_N);
	fail_pid = 0;
	fail_big = 0;
	ck_assert_msg(failed, "no read buffer grew past 100,000 bytes");
	few_big_after_failure(p, 1, rc);
	gp_pool_destroy(p);
}
END_TEST

/* A pool whose regions could not be mapped (a strict overcommit policy,
 * an address-space limit) still carries big items and results, through
 * the pipes. */
START_TEST(pipes_carry_big_results_without_regions)
{
	struct gp_pool	*p;

	no_regions = 1;
	p = make_pool(2, 1);
	no_regions = 0;
	few_big_items(fb_a);
	ck_assert_int_eq(gp_pool_map(p, few_big, NULL, 0, fb_a, FB_N), 0);
	ck_assert_uint_eq(few_big_bad(fb_a, FB_N, 0), 0);
	gp_items_release(fb_a, FB_N);
	gp_pool_destroy(p);
}
END_TEST

/*
 * A 16 KiB window: items and results past it go in pieces, through the
 * region or, in a pool whose regions could not be mapped, each in its
 * message through the pipes: every size exact both ways. Then every
 * allocation of a call fails in turn, few_big's 70,000-byte results in
 * pieces (the master's buffer for one is among them): each failed call
 * is clean, and the pool goes on.
 */
START_TEST(pieces_with_and_without_regions)
{
	struct gp_pool	*p;
	int		 nr;

	for (nr = 0; nr < 2; nr++) {
		no_regions = nr;
		make_window = 16 << 10;
		p = make_pool(2, 2);
		no_regions = 0;
		make_window = 0;
		echo_sizes(p);
		ck_assert_int_gt(fail_each_allocation(p), 4);
		gp_pool_destroy(p);
	}
}
END_TEST

/* A stream of growing items (the master's write buffer grows for each),
 * each replying 64 bytes (its result is allocated); item 3 crashes its
 * worker once (its retry is queued). */
enum { GROW_N = 8 };
static struct gp_item	 grow_it[GROW_N];
static int		 grow_given, grow_dones[GROW_N];
static _Atomic int	*grow_crashed;	/* shared with the workers */

static int
grow_next(void *arg, struct gp_item **out)
{
	if (grow_given == GROW_N)
		return GP_FEED_END;
	*out = &grow_it[grow_given++];
	return GP_FEED_ITEM;
}

static int
grow_done(void *arg, struct gp_item *it)
{
	grow_dones[it - grow_it]++;
	return 0;
}

static int
grow_fn(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	uint8_t	 r[64];

	if (len == 1000u << 3 && !atomic_exchange(grow_crashed, 1))
		_exit(3);
	memset(r, (int)(len >> 10), sizeof(r));
	return gp_ctx_reply(ctx, r, sizeof(r));
}

/*
 * gp_pool_run() failing with -ENOMEM at each allocation it makes in turn:
 * done() is called once for every item next() gave, never twice (an
 * item in flight and still queued), never not at all (an item whose
 * result or retry could not be kept); such an item ends GP_ERROR with
 * the call's code, the others as they are.
 */
START_TEST(run_alloc_fail_ends_each_item_once)
{
	static uint8_t		 in[1000u << (GROW_N - 1)];
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 1, .retries = 1 };
	struct gp_feed		 feed = { .next = grow_next, .done = grow_done,
				       .in_fd = -1, .ctl_fd = -1 };
	long			 k;
	int			 i, rc, st;

	grow_crashed = mmap(NULL, sizeof(*grow_crashed), PROT_READ |
	    PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(grow_crashed, MAP_FAILED);
	for (k = 1; ; k++) {
		ck_assert_msg(k < 500, "gp_pool_run allocates without end");
		ck_assert_int_eq(gp_pool_create(&p, &o), 0);
		for (i = 0; i < GROW_N; i++) {
			grow_it[i].in = in;
			grow_it[i].inlen = 1000u << i;
			grow_dones[i] = 0;
		}
		grow_given = 0;
		*grow_crashed = 0;
		failed = 0;
		fail_at = k;
		fail_pid = getpid();
		rc = gp_pool_run(p, grow_fn, NULL, 0, &feed);
		fail_pid = 0;
		ck_assert_msg(rc == (failed ? -ENOMEM : 0), "allocation %ld "
		    "failed: gp_pool_run returned %d", k, rc);
		for (i = 0; i < GROW_N; i++) {
			st = grow_it[i].status;
			ck_assert_msg(grow_dones[i] == (i < grow_given),
			    "allocation %ld failed: item %d given %d, done() "
			    "called %d times", k, i, i < grow_given,
			    grow_dones[i]);
			ck_assert_msg(i >= grow_given || st == GP_OK ||
			    (failed && (st == GP_NOTRUN || (st == GP_ERROR &&
			    grow_it[i].code == -ENOMEM))), "allocation %ld "
			    "failed: item %d status %d code %d", k, i, st,
			    grow_it[i].code);
		}
		gp_items_release(grow_it, GROW_N);
		gp_pool_destroy(p);
		if (!failed)
			break;
	}
	ck_assert_int_eq(grow_given, GROW_N);
	ck_assert_int_eq(*grow_crashed, 1);
	ck_assert_int_gt(k, GROW_N);
	munmap(grow_crashed, sizeof(*grow_crashed));
}
END_TEST

/* A recycled worker's fini that never returns; the worker whose death
 * an item waits for (its pid is the item). */
static void
hang_fini(struct gp_ctx *ctx, void *arg)
{
	for (;;)
		pause();
}

/* Returns 0 once the process in the item is dead (a zombie, or reaped),
 * 1 if it still lives after 20 s. */
static int
wait_dead(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	struct timespec	 ts = { 0, 2000000 };
	char		 path[64], buf[256], *rp;
	pid_t		 pid;
	int		 fd, i;
	ssize_t		 n;

	memcpy(&pid, in, sizeof(pid));
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	for (i = 0; i < 10000; i++) {
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			return 0;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		buf[n > 0 ? n : 0] = '\0';
		if ((rp = strrchr(buf, ')')) == NULL || rp[1] == '\0' ||
		    rp[2] == 'Z' || rp[2] == 'X')
			return 0;
		nanosleep(&ts, NULL);
	}
	return 1;
}

/* A call that fails (-ENOMEM) while a recycled worker's fini hangs: the
 * failure does not cancel that worker's deadline, it is still killed
 * after grace_ms (and its slot replaced). */
START_TEST(failed_call_keeps_the_fini_deadline)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 2, .max_tasks = 1,
				       .grace_ms = 50, .fini = hang_fini };
	struct gp_worker_info	 wi;
	struct gp_item		 it;
	int			 v = 1;
	pid_t			 a;

	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_info(p, 0, &wi), 0);
	a = wi.pid;
	/* Worker 0 runs it and leaves: its fini hangs. */
	memset(&it, 0, sizeof(it));
	it.in = &v;
	it.inlen = sizeof(v);
	ck_assert_int_eq(gp_pool_map(p, twice, NULL, 0, &it, 1), 0);
	ck_assert_int_eq(it.worker, 0);
	gp_items_release(&it, 1);
	/* The next call fails at its first allocation (worker 1's first
	 * message). */
	failed = 0;
	fail_at = 1;
	fail_pid = getpid();
	ck_assert_int_eq(gp_pool_map(p, twice, NULL, 0, &it, 1), -ENOMEM);
	fail_pid = 0;
	ck_assert_int_eq(failed, 1);
	/* Worker 1 waits for worker 0's end: grace_ms, not for ever. */
	it.in = &a;
	it.inlen = sizeof(a);
	ck_assert_int_eq(gp_pool_map(p, wait_dead, NULL, 0, &it, 1), 0);
	ck_assert_int_eq(it.worker, 1);
	ck_assert_msg(it.status == GP_OK, "worker 0 (pid %d) still runs "
	    "its fini", (int)a);
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

struct seen {
	int	 worker, gpu, slot;
	pid_t	 pid;
	char	 visible[96];
	char	 env[96];
	char	 order[32];
	int	 init_ran;
};

static int	 init_count;	/* per worker process */

static int
count_init(struct gp_ctx *ctx, void *arg)
{
	const char	*v = getenv("CUDA_VISIBLE_DEVICES");

	/* No item to reply to: refused, and nothing is corrupted. */
	if (gp_ctx_reply(ctx, "junk", 4) != -EINVAL)
		return 2;

	/* CUDA_VISIBLE_DEVICES is set before init runs. */
	if (v == NULL || strcmp(v, gp_ctx_info(ctx)->visible) != 0)
		return 1;
	init_count++;
	return 0;
}

/*
 * The first item of each worker in a round writes a byte to the test's
 * "arrived" pipe and blocks on the "go" pipe, which a helper fills once
 * every worker has arrived: so every worker gets items, whatever the
 * machine's load (a sleep in the item only made it likely).
 */
struct barrier {
	int	 arrived;	/* write end */
	int	 go;		/* read end */
	int	 round;
};

static int	 last_round = -1;	/* per worker process */

static pid_t
barrier_helper(int arrived, int go, int n)
{
	pid_t	 pid;
	char	 c;
	int	 i;

	if ((pid = fork()) != 0)
		return pid;
	for (i = 0; i < n; i++)
		if (read(arrived, &c, 1) != 1)
			_exit(1);
	for (i = 0; i < n; i++)
		if (write(go, "g", 1) != 1)
			_exit(1);
	_exit(0);
}

static int
where(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	const struct gp_worker_info	*i = gp_ctx_info(ctx);
	const struct barrier		*b = arg;
	struct seen			 s = { 0 };
	const char			*e;
	char				 c;

	if (b->round != last_round) {
		last_round = b->round;
		if (write(b->arrived, "a", 1) != 1 || read(b->go, &c, 1) != 1)
			return 1;
	}
	s.worker = i->worker;
	s.gpu = i->gpu;
	s.slot = i->slot;
	s.pid = getpid();
	s.init_ran = init_count;
	snprintf(s.visible, sizeof(s.visible), "%s", i->visible);
	if ((e = getenv("CUDA_VISIBLE_DEVICES")) != NULL)
		snprintf(s.env, sizeof(s.env), "%s", e);
	if ((e = getenv("CUDA_DEVICE_ORDER")) != NULL)
		snprintf(s.order, sizeof(s.order), "%s", e);
	return gp_ctx_reply(ctx, &s, sizeof(s));
}

START_TEST(workers_see_their_gpu_and_live_across_maps)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 3, .per_gpu = 2,
				       .init = count_init };
	struct gp_worker_info	 wi;
	struct gp_item		 it[60];
	struct seen		 s;
	struct barrier		 b;
	pid_t			 pids[6] = { 0 }, helper;
	int			 i, round, arrived[2], go[2], st, used;

	ck_assert_int_eq(pipe2(arrived, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(go, O_CLOEXEC), 0);
	b.arrived = arrived[1];
	b.go = go[0];
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_size(p), 6);
	for (round = 0; round < 2; round++) {
		memset(it, 0, sizeof(it));
		b.round = round;
		helper = barrier_helper(arrived[0], go[1], 6);
		ck_assert_int_gt(helper, 0);
		ck_assert_int_eq(gp_pool_map(p, where, &b, sizeof(b), it, 60), 0);
		ck_assert_int_eq(waitpid(helper, &st, 0), helper);
		ck_assert_int_eq(st, 0);	/* all six arrived */
		used = 0;
		for (i = 0; i < 60; i++) {
			ck_assert_int_eq(it[i].status, GP_OK);
			memcpy(&s, it[i].out, sizeof(s));
			ck_assert_int_eq(s.worker, it[i].worker);
			ck_assert_int_eq(s.gpu, s.worker % 3);
			ck_assert_int_eq(s.slot, s.worker / 3);
			ck_assert_str_eq(s.env, s.visible);
			ck_assert_str_eq(s.order, "PCI_BUS_ID");
			ck_assert_int_eq(s.init_ran, 1);
			ck_assert_int_eq(gp_pool_info(p, s.worker, &wi), 0);
			ck_assert_str_eq(wi.visible, s.visible);
			ck_assert_int_eq(wi.pid, s.pid);
			if (round == 0 && pids[s.worker] == 0) {
				pids[s.worker] = s.pid;
				used++;
			}
			/* Same processes in the second map. */
			ck_assert_int_eq(pids[s.worker], s.pid);
		}
		if (round == 0)
			ck_assert_int_eq(used, 6);
		gp_items_release(it, 60);
	}
	for (i = 0; i < 2; i++) {
		close(arrived[i]);
		close(go[i]);
	}
	/* Fake GPU g is "fake<g>": never a CUDA id of a real device. */
	ck_assert_int_eq(gp_pool_info(p, 4, &wi), 0);
	ck_assert_str_eq(wi.visible, "fake1");
	ck_assert_int_eq(wi.fake, 1);
	ck_assert_int_eq(gp_pool_info(p, 6, &wi), -EINVAL);
	gp_pool_destroy(p);
}
END_TEST

extern char	**environ;

/* Every copy in environ of the variables the pool sets, one a line. */
static int
env_copies(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	static const char *const set[] = { "CUDA_VISIBLE_DEVICES=",
	    "CUDA_DEVICE_ORDER=", NULL };
	char		 buf[1024] = "";
	size_t		 n = 0;
	int		 i, k;

	for (k = 0; set[k] != NULL; k++)
		for (i = 0; environ[i] != NULL; i++)
			if (strncmp(environ[i], set[k], strlen(set[k])) == 0)
				n += (size_t)snprintf(buf + n, n < sizeof(buf) ?
				    sizeof(buf) - n : 0, "%s\n", environ[i]);
	return gp_ctx_reply(ctx, buf, strlen(buf) + 1);
}

/* A launcher can leave a variable twice in environ: setenv() replaces
 * the first copy, while a shell or Python reads the last. A worker's
 * environment has one copy of each variable the pool sets, its own. */
START_TEST(set_variables_replace_every_copy)
{
	static char		*twice[] = {
		"CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7",
		"CUDA_DEVICE_ORDER=FASTEST_FIRST",
		"CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7",
		"CUDA_DEVICE_ORDER=FASTEST_FIRST" };
	struct gp_pool		*p;
	struct gp_item		 it[8];
	char			**env, **old = environ, want[128];
	size_t			 n, i;

	for (n = 0; environ[n] != NULL; n++)
		;
	env = calloc(n + 5, sizeof(*env));
	ck_assert_ptr_nonnull(env);
	memcpy(env, environ, n * sizeof(*env));
	memcpy(env + n, twice, sizeof(twice));
	environ = env;
	p = make_pool(2, 1);
	memset(it, 0, sizeof(it));
	ck_assert_int_eq(gp_pool_map(p, env_copies, NULL, 0, it, 8), 0);
	for (i = 0; i < 8; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		snprintf(want, sizeof(want), "CUDA_VISIBLE_DEVICES=fake%d\n"
		    "CUDA_DEVICE_ORDER=PCI_BUS_ID\n", it[i].worker);
		ck_assert_str_eq(it[i].out, want);
	}
	gp_items_release(it, 8);
	gp_pool_destroy(p);
	environ = old;
	free(env);
}
END_TEST

START_TEST(explicit_ids_and_inherited_visible_devices)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .gpus = "0,1,2,3" };
	struct gp_worker_info	 wi;
	char			 err[256];
	int			 i;
	char			 want[8];

	/* No driver here: explicit ids are used as given. */
	o.errbuf = err;
	o.errlen = sizeof(err);
	ck_assert_msg(gp_pool_create(&p, &o) == 0, "%s", err);
	ck_assert_int_eq(gp_pool_size(p), 4);
	for (i = 0; i < 4; i++) {
		ck_assert_int_eq(gp_pool_info(p, i, &wi), 0);
		snprintf(want, sizeof(want), "%d", i);
		ck_assert_str_eq(wi.visible, want);
		ck_assert_int_eq(wi.fake, 0);
	}
	gp_pool_destroy(p);

	/* Slurm gave us 5 and 7: index 1 is GPU 7, index 2 does not exist. */
	setenv("CUDA_VISIBLE_DEVICES", "5,7", 1);
	o.gpus = "1";
	o.flags = GP_POOL_PLAN_ONLY;
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_info(p, 0, &wi), 0);
	ck_assert_str_eq(wi.visible, "7");
	gp_pool_destroy(p);
	o.gpus = "2";
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "CUDA_VISIBLE_DEVICES=5,7"));
	o.gpus = "1,1";
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "twice"));
	unsetenv("CUDA_VISIBLE_DEVICES");
	o.gpus = "0,,1";
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "empty"));
}
END_TEST

/* Ids taken as given (no driver) still never name a GPU outside an
 * inherited CUDA_VISIBLE_DEVICES, nor one GPU twice. */
START_TEST(given_ids_stay_inside_what_is_visible)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .flags = GP_POOL_PLAN_ONLY };
	struct gp_worker_info	 wi;
	char			 err[256];
	int			 driver;

	o.errbuf = err;
	o.errlen = sizeof(err);
	unsetenv("CUDA_VISIBLE_DEVICES");
	if ((driver = gp_pool_create(&p, &o) == 0))	/* a GPU is seen */
		gp_pool_destroy(p);
	o.gpus = "0,00";		/* one index, two spellings */
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "'00' is listed twice"));
	o.gpus = "GPU-8932f937,gpu-8932F937";
	if (!driver) {
		ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
		ck_assert_ptr_nonnull(strstr(err, "listed twice"));
	}

	/* Set but empty: no GPU at all, whatever is asked for. */
	setenv("CUDA_VISIBLE_DEVICES", "", 1);
	o.gpus = "0";
	ck_assert_int_eq(gp_pool_create(&p, &o), GP_ENOGPU);
	ck_assert_ptr_nonnull(strstr(err, "set but empty"));
	/* The usual ways of saying "no GPU", and, as in CUDA, a list ends
	 * at its first entry that names no GPU. */
	setenv("CUDA_VISIBLE_DEVICES", "-1", 1);
	ck_assert_int_eq(gp_pool_create(&p, &o), GP_ENOGPU);
	ck_assert_ptr_nonnull(strstr(err, "CUDA_VISIBLE_DEVICES='-1' names "
	    "none"));
	setenv("CUDA_VISIBLE_DEVICES", "NoDevFiles", 1);
	ck_assert_int_eq(gp_pool_create(&p, &o), GP_ENOGPU);
	setenv("CUDA_VISIBLE_DEVICES", "90,-1,91", 1);
	o.gpus = "1";
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_msg(strstr(err, "no GPU '1' among CUDA_VISIBLE_DEVICES=90")
	    != NULL && strstr(err, "-1") == NULL, "%s", err);
	o.gpus = "0";
	ck_assert_msg(gp_pool_create(&p, &o) == 0, "%s", err);
	ck_assert_int_eq(gp_pool_info(p, 0, &wi), 0);
	ck_assert_str_eq(wi.visible, "90");
	gp_pool_destroy(p);

	/* A UUID outside the inherited set is refused, one inside it is
	 * taken (with or without GPU-, or a prefix), as is its index. (No
	 * machine has these GPUs: the probe sees none.) */
	setenv("CUDA_VISIBLE_DEVICES", "90,91", 1);
	o.gpus = "GPU-8932f937";
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "'GPU-8932f937' among "
	    "CUDA_VISIBLE_DEVICES=90,91"));
	setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa1111,GPU-8932f937", 1);
	o.gpus = "8932f9";
	ck_assert_msg(gp_pool_create(&p, &o) == 0, "%s", err);
	ck_assert_int_eq(gp_pool_info(p, 0, &wi), 0);
	ck_assert_str_eq(wi.visible, "GPU-8932f937");
	gp_pool_destroy(p);
	o.gpus = "1,GPU-8932f937";
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "listed twice"));
	o.gpus = "GPU-bbbb2222";
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "among CUDA_VISIBLE_DEVICES="));
	unsetenv("CUDA_VISIBLE_DEVICES");
}
END_TEST

START_TEST(no_gpu_is_a_clear_error)
{
	struct gp_pool		*p = NULL;
	struct gp_pool_opts	 o = { 0 };
	char			 err[256];
	int			 rc;

	o.errbuf = err;
	o.errlen = sizeof(err);
	rc = gp_pool_create(&p, &o);
	if (rc == 0) {
		/* A machine with a GPU: the probe must have named it. */
		struct gp_worker_info	 wi;

		ck_assert_int_eq(gp_pool_info(p, 0, &wi), 0);
		ck_assert_int_eq(strncmp(wi.visible, "GPU-", 4), 0);
		gp_pool_destroy(p);
		return;
	}
	ck_assert_int_eq(rc, GP_ENOGPU);
	ck_assert_ptr_null(p);
	ck_assert_ptr_nonnull(strstr(err, "no GPU found"));
	ck_assert_ptr_nonnull(strstr(err, "GPUPOOL_FAKE_GPUS"));
	ck_assert_ptr_nonnull(strstr(gp_strerror(rc), "no GPU"));
}
END_TEST

START_TEST(pool_map_default_pool_from_environment)
{
	int		 v[50], r, i;
	struct gp_item	*it = int_items(v, 50);
	struct gp_item	 one[1];

	setenv("GPUPOOL_FAKE_GPUS", "3", 1);
	ck_assert_int_eq(pool_map(twice, it, 50), 0);
	for (i = 0; i < 50; i++) {
		memcpy(&r, it[i].out, sizeof(r));
		ck_assert_int_eq(r, 2 * i);
		ck_assert(it[i].worker >= 0 && it[i].worker < 3);
	}
	gp_items_release(it, 50);
	gp_default_pool_destroy();
	setenv("GPUPOOL_FAKE_GPUS", "three", 1);
	memset(one, 0, sizeof(one));
	ck_assert_int_eq(pool_map(twice, one, 1), -EINVAL);
	unsetenv("GPUPOOL_FAKE_GPUS");
	free(it);
}
END_TEST

/* An array as a gp_pool_run() feed. */
struct arrfeed {
	struct gp_item	*items;
	size_t		 n, next, ndone;
};

static int
arr_next(void *arg, struct gp_item **item)
{
	struct arrfeed	*f = arg;

	if (f->next == f->n)
		return GP_FEED_END;
	*item = &f->items[f->next++];
	return GP_FEED_ITEM;
}

static int
arr_done(void *arg, struct gp_item *item)
{
	((struct arrfeed *)arg)->ndone++;
	return 0;
}

/* in NULL with bytes to read is the caller's bug: refused, never read
 * (the master used to copy from NULL and die), and no item reads GP_OK. */
START_TEST(missing_input_is_refused)
{
	struct gp_pool	*p = make_pool(1, 1);
	int		 v[3] = { 1, 2, 3 }, i, r;
	struct gp_item	 it[3];
	struct arrfeed	 af = { .items = it, .n = 3 };
	struct gp_feed	 f = { .next = arr_next, .done = arr_done,
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
	ck_assert_uint_eq(af.ndone, 3);
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

START_TEST(plan_on_dgx2_fixture)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 16,
		.fake_busids = "0000:34:00.0,0000:36:00.0,0000:39:00.0,"
		    "0000:3b:00.0,0000:57:00.0,0000:59:00.0,0000:5c:00.0,"
		    "0000:5e:00.0,0000:b7:00.0,0000:b9:00.0,0000:bc:00.0,"
		    "0000:be:00.0,0000:e0:00.0,0000:e2:00.0,0000:e5:00.0,"
		    "0000:e7:00.0",
		.topology_xml = GP_FIXTURES "/nvidiaDGX2.xml",
		.flags = GP_POOL_PLAN_ONLY };
	struct gp_worker_info	 wi;
	struct gp_item		 it[1];
	int			 i, per[2] = { 0, 0 };

	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_size(p), 16);
	for (i = 0; i < 16; i++) {
		ck_assert_int_eq(gp_pool_info(p, i, &wi), 0);
		ck_assert_int_eq(wi.pid, 0);
		ck_assert(wi.numa == 0 || wi.numa == 1);
		per[wi.numa]++;
		ck_assert_str_eq(wi.cpuset, wi.numa == 0 ? "0-1" : "24-25");
		ck_assert_int_eq(wi.numa, i < 8 ? 0 : 1);
	}
	ck_assert_int_eq(per[0], 8);
	ck_assert_int_eq(per[1], 8);
	memset(it, 0, sizeof(it));
	ck_assert_int_eq(gp_pool_map(p, twice, NULL, 0, it, 1), GP_EPLAN);
	gp_pool_destroy(p);
}
END_TEST

START_TEST(workers_are_really_bound)
{
	int			 ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
	struct gp_pool		*p = make_pool(ncpu >= 2 ? 2 : 1, 1);
	struct gp_worker_info	 wi[2];
	struct gp_item		 it[40];
	char			 want[256];
	int			 i;

	memset(it, 0, sizeof(it));
	for (i = 0; i < gp_pool_size(p); i++) {
		ck_assert_int_eq(gp_pool_info(p, i, &wi[i]), 0);
		ck_assert_int_eq(wi[i].cpubind_rc, 0);
	}
	ck_assert_int_eq(gp_pool_map(p, affinity, NULL, 0, it, 40), 0);
	for (i = 0; i < 40; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		expand(wi[it[i].worker].cpuset, want, sizeof(want));
		ck_assert_str_eq((char *)it[i].out, want);
	}
	if (gp_pool_size(p) == 2)	/* disjoint cores on one locality */
		ck_assert_str_ne(wi[0].cpuset, wi[1].cpuset);
	gp_items_release(it, 40);
	gp_pool_destroy(p);
}
END_TEST

START_TEST(placement_stays_inside_inherited_affinity)
{
	cpu_set_t		 one;
	struct gp_pool		*p;
	struct gp_worker_info	 wi;
	struct gp_item		 it[8];
	int			 i;

	/* main() runs this only with two CPUs or more: one leaves nothing
	 * to narrow, and the case says SKIP there. */
	ck_assert_int_ge(sysconf(_SC_NPROCESSORS_ONLN), 2);
	/* As taskset -c 1 or a Slurm binding would leave us. */
	CPU_ZERO(&one);
	CPU_SET(1, &one);
	ck_assert_int_eq(sched_setaffinity(0, sizeof(one), &one), 0);
	p = make_pool(2, 1);
	for (i = 0; i < 2; i++) {
		ck_assert_int_eq(gp_pool_info(p, i, &wi), 0);
		ck_assert_str_eq(wi.cpuset, "1");
	}
	memset(it, 0, sizeof(it));
	ck_assert_int_eq(gp_pool_map(p, affinity, NULL, 0, it, 8), 0);
	for (i = 0; i < 8; i++)
		ck_assert_str_eq((char *)it[i].out, "1");
	gp_items_release(it, 8);
	gp_pool_destroy(p);
}
END_TEST

/*
 * gp_pool_run: items arrive through a pipe from another process, ten at a
 * time, and the writer goes on only once the pool has run the ten it has:
 * the byte on go, written by next() when it finds the pipe empty with
 * every item given so far done. So the pool must run items as they arrive
 * (the writer never reaches EOF otherwise), and twice it hears "not yet"
 * with nothing running, when only in_fd can wake it. Decided by what the
 * pool did, not by how fast the writer runs: the same on a busy machine.
 */
struct stream {
	int		 fd;
	int		 go;		/* write end: a byte per ten done */
	int		 ngo;		/* bytes written on go */
	int		 nagain;	/* next() said "not yet" */
	char		 line[64];
	size_t		 len;
	struct gp_item	 items[30];
	int		 nitems, ndone, order[30];
	int		 eof;
};

static int
stream_next(void *arg, struct gp_item **item)
{
	struct stream	*s = arg;
	ssize_t		 r;
	char		 c;

	for (;;) {
		r = read(s->fd, &c, 1);
		if (r == 0)
			return -1;
		if (r < 0 && errno == EAGAIN) {
			s->nagain++;
			/* The writer waits for us: all its items ran. */
			if (s->ndone == s->nitems &&
			    s->nitems == 10 * (s->ngo + 1) && s->ngo < 2) {
				if (write(s->go, "", 1) != 1)
					return -1;
				s->ngo++;
			}
		}
		if (r < 0)
			return errno == EAGAIN ? 0 : -1;
		if (c != '\n') {
			s->line[s->len++] = c;
			continue;
		}
		s->line[s->len] = '\0';
		struct gp_item *it = &s->items[s->nitems++];
		it->in = strdup(s->line);
		it->inlen = s->len + 1;
		s->len = 0;
		*item = it;
		return 1;
	}
}

static int
stream_done(void *arg, struct gp_item *item)
{
	struct stream	*s = arg;

	s->order[s->ndone++] = (int)(item - s->items);
	return 0;
}

START_TEST(run_streams_from_a_pipe)
{
	struct gp_pool	*p = make_pool(2, 1);
	struct stream	 s = { 0 };
	struct gp_feed	 f = { .next = stream_next, .done = stream_done,
			       .in_fd = -1, .arg = &s, .ctl_fd = -1 };
	int		 fds[2], go[2], i, st;
	pid_t		 pid;
	char		 buf[32];

	ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(go, O_CLOEXEC), 0);
	if ((pid = fork()) == 0) {
		close(go[1]);
		for (i = 0; i < 30; i++) {
			snprintf(buf, sizeof(buf), "item %d\n", i);
			if (write(fds[1], buf, strlen(buf)) < 0)
				_exit(1);
			if (i % 10 == 9 && i < 29 && read(go[0], buf, 1) != 1)
				_exit(1);
		}
		_exit(0);
	}
	close(fds[1]);
	close(go[0]);
	s.go = go[1];
	fcntl(fds[0], F_SETFL, O_NONBLOCK);
	s.fd = f.in_fd = fds[0];
	ck_assert_int_eq(gp_pool_run(p, echo_rev, NULL, 0, &f), 0);
	ck_assert_int_eq(s.nitems, 30);
	ck_assert_int_eq(s.ndone, 30);
	for (i = 0; i < 30; i++) {
		ck_assert_int_eq(s.items[i].status, GP_OK);
		ck_assert_uint_eq(s.items[i].outlen, s.items[i].inlen);
		free((void *)s.items[i].in);
		free(s.items[i].out);
	}
	/* Twice the pool waited on in_fd alone and woke for the next ten. */
	ck_assert_int_eq(s.ngo, 2);
	/* It asks again only after a poll turn woken by a result (30 at
	 * most, one item per dispatch) or by the writer (30 lines and EOF),
	 * not in a busy loop. */
	ck_assert_int_le(s.nagain, 30 + 31 + 1);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "writer: %#x", st);
	close(fds[0]);
	close(go[1]);
	gp_pool_destroy(p);
}
END_TEST

static int
whoami(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	pid_t	 pid = getpid();

	return gp_ctx_reply(ctx, &pid, sizeof(pid));
}

START_TEST(recycle_after_max_tasks)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 2, .max_tasks = 10,
				       .respawn_max = -1 };
	struct gp_item		 it[200];
	pid_t			 pid[200];
	int			 i, j, same;

	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	memset(it, 0, sizeof(it));
	ck_assert_int_eq(gp_pool_map(p, whoami, NULL, 0, it, 200), 0);
	for (i = 0; i < 200; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		memcpy(&pid[i], it[i].out, sizeof(pid_t));
	}
	/* No process ran more than 10 items. */
	for (i = 0; i < 200; i++) {
		for (j = 0, same = 0; j < 200; j++)
			same += pid[j] == pid[i];
		ck_assert_int_le(same, 10);
	}
	gp_items_release(it, 200);
	gp_pool_destroy(p);
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
	struct arrfeed	 af = { .items = it, .n = 20 };
	struct gp_feed	 f = { .next = arr_next, .done = arr_done,
			       .in_fd = -1, .ctl_fd = -1, .arg = &af };

	ck_assert_int_eq(gp_map(p, twice_old, NULL, 0, it, 20), 0);
	for (i = 0; i < 20; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		memcpy(&r, it[i].out, sizeof(r));
		ck_assert_int_eq(r, 2 * i);
	}
	gp_items_release(it, 20);
	ck_assert_int_eq(gp_run(p, twice_old, NULL, 0, &f), 0);
	ck_assert_uint_eq(af.ndone, 20);
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

/*
 * Threads. Pipes made before the pool, so workers hold them: an item
 * writes 'S' on started when it begins and blocks until it reads a byte
 * from release; the test thread releases items one by one. Nothing waits
 * on a clock: an item stays running until the test lets it go.
 */
#define NTHREADS	4
#define THREAD_ITEMS	4

struct threads {
	int		 started[2], release[2];
	struct gp_pool	*p;
	pthread_barrier_t bar;
	sem_t		 returned;
	int		 rc[NTHREADS];
	int		 tag[NTHREADS];
	struct gp_item	 it[NTHREADS][THREAD_ITEMS];
	/* Shared with the workers: items running per calling thread, and
	 * whether two calls' items ever ran at once. */
	struct overlap {
		_Atomic int	 active[NTHREADS];
		_Atomic int	 mixed;
	}		*ov;
};

static struct threads	 th;

/* One item of thread *in: says it started, waits for its release. */
static int
held_item(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int	 t, u;
	pid_t	 pid = getpid();
	char	 c = 'S';

	memcpy(&t, in, sizeof(t));
	atomic_fetch_add(&th.ov->active[t], 1);
	for (u = 0; u < NTHREADS; u++)
		if (u != t && atomic_load(&th.ov->active[u]) > 0)
			atomic_store(&th.ov->mixed, 1);
	if (write(th.started[1], &c, 1) != 1 || read(th.release[0], &c, 1) != 1)
		return 98;
	atomic_fetch_sub(&th.ov->active[t], 1);
	return gp_ctx_reply(ctx, &pid, sizeof(pid));
}

static void
threads_setup(void)
{
	int	 t, i;

	ck_assert_int_eq(pipe(th.started), 0);
	ck_assert_int_eq(pipe(th.release), 0);
	th.ov = mmap(NULL, sizeof(*th.ov), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert(th.ov != MAP_FAILED);
	ck_assert_int_eq(pthread_barrier_init(&th.bar, NULL, NTHREADS), 0);
	ck_assert_int_eq(sem_init(&th.returned, 0, 0), 0);
	for (t = 0; t < NTHREADS; t++) {
		th.tag[t] = t;
		th.rc[t] = 1;	/* not returned */
		for (i = 0; i < THREAD_ITEMS; i++) {
			th.it[t][i].in = &th.tag[t];
			th.it[t][i].inlen = sizeof(int);
		}
	}
}

/* Let one held item go on. */
static void
release_one(void)
{
	char	 c;

	ck_assert_int_eq(read(th.started[0], &c, 1), 1);
	ck_assert_int_eq(c, 'S');
	ck_assert_int_eq(write(th.release[1], "R", 1), 1);
}

static void *
map_thread(void *arg)
{
	int	 t = *(int *)arg;

	pthread_barrier_wait(&th.bar);
	th.rc[t] = gp_pool_map(th.p, held_item, NULL, 0, th.it[t], 1);
	sem_post(&th.returned);
	return NULL;
}

/* Threads that call gp_pool_map() on one pool at once: exactly one call
 * proceeds, every other returns -EBUSY at once and runs nothing. The
 * winner's item is held until all the others have returned, so the
 * calls overlap; two winners would leave one -EBUSY short and hang. */
START_TEST(concurrent_maps_on_one_pool_one_proceeds)
{
	pthread_t	 tid[NTHREADS];
	int		 t, busy = 0, win = -1;

	threads_setup();
	th.p = make_pool(1, 1);
	for (t = 0; t < NTHREADS; t++)
		ck_assert_int_eq(pthread_create(&tid[t], NULL, map_thread,
		    &th.tag[t]), 0);
	for (t = 0; t < NTHREADS - 1; t++)
		ck_assert_int_eq(sem_wait(&th.returned), 0);
	for (t = 0; t < NTHREADS; t++) {
		if (th.rc[t] == -EBUSY) {
			busy++;
			ck_assert_int_eq(th.it[t][0].status, GP_NOTRUN);
			ck_assert_int_eq(th.it[t][0].attempts, 0);
		} else
			win = t;
	}
	ck_assert_int_eq(busy, NTHREADS - 1);
	ck_assert_int_eq(th.rc[win], 1);	/* still running */
	release_one();
	for (t = 0; t < NTHREADS; t++)
		ck_assert_int_eq(pthread_join(tid[t], NULL), 0);
	ck_assert_int_eq(th.rc[win], 0);
	ck_assert_int_eq(th.it[win][0].status, GP_OK);
	gp_items_release(th.it[win], 1);
	/* The pool is idle again: the next call proceeds. */
	ck_assert_int_eq(gp_pool_map(th.p, held_item, NULL, 0, th.it[0], 0),
	    0);
	gp_pool_destroy(th.p);
}
END_TEST

static void *
pool_map_thread(void *arg)
{
	int	 t = *(int *)arg, i, notrun = 0;

	pthread_barrier_wait(&th.bar);
	th.rc[t] = pool_map(held_item, th.it[t], THREAD_ITEMS);
	for (i = 0; i < THREAD_ITEMS; i++)
		notrun += th.it[t][i].attempts == 0;
	/* Items that will never start: 'X' each, so the releaser does not
	 * wait for them (a refused call must fail the test, not hang it). */
	while (notrun-- > 0)
		(void)!write(th.started[1], "X", 1);
	return NULL;
}

/* pool_map() from several threads at once, as gpupool.h says: every call
 * succeeds, on the one default pool (two workers: no item sees a third
 * pid), and each map runs whole, in turn: no two calls' items ever run
 * at the same time. */
START_TEST(pool_map_from_threads_runs_each_map_whole)
{
	pthread_t	 tid[NTHREADS];
	pid_t		 pids[3] = { 0 }, pid;
	int		 t, i, k, npids = 0, left = NTHREADS * THREAD_ITEMS;
	char		 c;

	threads_setup();
	setenv("GPUPOOL_FAKE_GPUS", "2", 1);
	/* Create the default pool while this process has one thread. */
	ck_assert_int_eq(pool_map(held_item, NULL, 0), 0);
	for (t = 0; t < NTHREADS; t++)
		ck_assert_int_eq(pthread_create(&tid[t], NULL,
		    pool_map_thread, &th.tag[t]), 0);
	while (left-- > 0) {
		ck_assert_int_eq(read(th.started[0], &c, 1), 1);
		if (c == 'S')
			ck_assert_int_eq(write(th.release[1], "R", 1), 1);
	}
	for (t = 0; t < NTHREADS; t++)
		ck_assert_int_eq(pthread_join(tid[t], NULL), 0);
	for (t = 0; t < NTHREADS; t++) {
		ck_assert_int_eq(th.rc[t], 0);
		for (i = 0; i < THREAD_ITEMS; i++) {
			ck_assert_int_eq(th.it[t][i].status, GP_OK);
			memcpy(&pid, th.it[t][i].out, sizeof(pid));
			for (k = 0; k < npids && pids[k] != pid; k++)
				;
			ck_assert_int_lt(k, 2);
			if (k == npids)
				pids[npids++] = pid;
		}
		gp_items_release(th.it[t], THREAD_ITEMS);
	}
	ck_assert_int_eq(atomic_load(&th.ov->mixed), 0);
	gp_default_pool_destroy();
	unsetenv("GPUPOOL_FAKE_GPUS");
}
END_TEST

/* fn that maps in turn, on the worker's own default pool: the worker
 * was forked while pool_map() held the default pool's lock. */
static int
nested_pool_map(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int		 v = 21, r;
	struct gp_item	 one = { .in = &v, .inlen = sizeof(v) };

	if (pool_map(twice, &one, 1) != 0 || one.status != GP_OK)
		return 97;
	memcpy(&r, one.out, sizeof(r));
	gp_items_release(&one, 1);
	gp_default_pool_destroy();
	return gp_ctx_reply(ctx, &r, sizeof(r));
}

/* A worker of the default pool is a child forked under its lock: in it,
 * pool_map() starts a fresh lock (and pool) instead of waiting forever
 * for a thread it does not have. */
START_TEST(pool_map_in_a_worker_of_the_default_pool)
{
	int		 v = 0, r;
	struct gp_item	 one = { .in = &v, .inlen = sizeof(v) };

	setenv("GPUPOOL_FAKE_GPUS", "1", 1);
	ck_assert_int_eq(pool_map(nested_pool_map, &one, 1), 0);
	ck_assert_int_eq(one.status, GP_OK);
	memcpy(&r, one.out, sizeof(r));
	ck_assert_int_eq(r, 42);
	gp_items_release(&one, 1);
	gp_default_pool_destroy();
	unsetenv("GPUPOOL_FAKE_GPUS");
}
END_TEST

static int
count_next(void *arg, struct gp_item **item)
{
	(*(int *)arg)++;
	return GP_FEED_END;
}

/* Room to grow: reserved fields set in what the library reads (a newer
 * header, or memory not zeroed) and unknown flags are refused, with
 * nothing run; the library writes zeros in what it fills. */
START_TEST(reserved_fields_leave_room_to_grow)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 1 };
	struct gp_worker_info	 wi;
	struct gp_item		 it[3];
	int			 v[3] = { 1, 2, 3 }, calls = 0, i;
	struct gp_feed		 f = { .next = count_next, .done = arr_done,
				       .in_fd = -1, .ctl_fd = -1,
				       .arg = &calls };
	char			 err[256];

	o.errbuf = err;
	o.errlen = sizeof(err);
	o.reserved[1] = 1;
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_ptr_null(p);
	ck_assert_msg(strstr(err, "reserved fields are not zero") != NULL,
	    "errbuf: %s", err);
	o.reserved[1] = 0;
	o.flags = 1u << 30;
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_msg(strstr(err, "unknown flags 0x40000000") != NULL,
	    "errbuf: %s", err);
	o.flags = 0;
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

/* Fork rules: in a child the application forks, the inherited pool is a
 * copy: maps return -ECHILD, size and info read the copy, and destroy only
 * closes the child's descriptors: the parent's workers live on and serve
 * the parent's next map. */
START_TEST(forked_child_cannot_use_or_stop_the_pool)
{
	struct gp_pool		*p = make_pool(2, 1);
	struct gp_worker_info	 before[2], after;
	struct gp_item		 it[4];
	struct gp_feed		 f = { .next = count_next, .done = arr_done,
				       .in_fd = -1, .ctl_fd = -1 };
	int			 v[4] = { 1, 2, 3, 4 }, i, st, calls = 0;
	pid_t			 pid;

	f.arg = &calls;
	for (i = 0; i < 2; i++)
		ck_assert_int_eq(gp_pool_info(p, i, &before[i]), 0);
	for (i = 0; i < 4; i++)
		gp_item_init(&it[i], &v[i], sizeof(v[i]));
	if ((pid = fork()) == 0) {
		int	 bad = 0;

		bad |= gp_pool_map(p, twice, NULL, 0, it, 4) != -ECHILD;
		bad |= (gp_pool_run(p, twice, NULL, 0, &f) != -ECHILD) << 1;
		bad |= (calls != 0) << 2;
		bad |= (gp_pool_size(p) != 2) << 3;
		bad |= (gp_pool_info(p, 1, &after) != 0 ||
		    after.pid != before[1].pid) << 4;
		gp_pool_destroy(p);
		_exit(bad);
	}
	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	    "child: status %#x", st);
	ck_assert_int_eq(gp_pool_map(p, twice, NULL, 0, it, 4), 0);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(it[i].status, GP_OK);
	for (i = 0; i < 2; i++) {
		ck_assert_int_eq(gp_pool_info(p, i, &after), 0);
		ck_assert_int_eq(after.pid, before[i].pid);
	}
	gp_items_release(it, 4);
	gp_pool_destroy(p);
}
END_TEST

/*
 * The fork hook: the parent's phases are logged here, in order; each
 * worker writes, from its GP_FORK_CHILD call, its pid and how many parent
 * phases its copy of the log held at the fork (odd: BEFORE, not yet
 * PARENT) to a pipe it inherited.
 */
struct hook_rec {
	pid_t	 pid;
	int	 nlog;
};
static char	 hook_log[16];
static int	 hook_nlog, hook_fd = -1;

static void
hook(int phase, void *arg)
{
	struct hook_rec	 r;

	ck_assert_ptr_eq(arg, &hook_nlog);
	if (phase == GP_FORK_CHILD) {
		r.pid = getpid();
		r.nlog = hook_nlog;
		(void)write(hook_fd, &r, sizeof(r));
		return;
	}
	if (hook_nlog < (int)sizeof(hook_log))
		hook_log[hook_nlog++] = phase == GP_FORK_BEFORE ? 'B' :
		    phase == GP_FORK_PARENT ? 'P' : '?';
}

/* Item 0 kills its worker; the others double. */
static int
crash_on_zero(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int	 x;

	memcpy(&x, in, sizeof(x));
	if (x == 0)
		_exit(7);
	return twice(ctx, in, len, arg);
}

START_TEST(fork_hook_wraps_every_worker_fork)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 2, .fork_hook = hook,
				    .fork_arg = &hook_nlog };
	struct gp_worker_info	 wi;
	struct hook_rec		 r[4];
	struct gp_item		*it;
	int			 fds[2], vals[40], i, pid0, pid1;

	ck_assert_int_eq(pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
	hook_fd = fds[1];
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	/* Each worker wrote before it reported ready. */
	ck_assert_int_eq(read(fds[0], r, sizeof(r)), 2 * sizeof(r[0]));
	ck_assert_int_eq(hook_nlog, 4);
	ck_assert_int_eq(memcmp(hook_log, "BPBP", 4), 0);
	ck_assert_int_eq(gp_pool_info(p, 0, &wi), 0);
	pid0 = wi.pid;
	ck_assert_int_eq(gp_pool_info(p, 1, &wi), 0);
	pid1 = wi.pid;
	/* The workers wrote in either order. */
	if (r[0].nlog == 3) {
		r[2] = r[0];
		r[0] = r[1];
		r[1] = r[2];
	}
	ck_assert_int_eq(r[0].pid, pid0);
	ck_assert_int_eq(r[0].nlog, 1);
	ck_assert_int_eq(r[1].pid, pid1);
	ck_assert_int_eq(r[1].nlog, 3);

	/* A crash during a map: its replacement is forked inside the map,
	 * with the hook. */
	it = int_items(vals, 40);
	ck_assert_int_eq(gp_pool_map(p, crash_on_zero, NULL, 0, it, 40), 0);
	ck_assert_int_eq(it[0].status, GP_CRASHED);
	ck_assert_int_eq(it[0].code, 7);
	for (i = 1; i < 40; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		ck_assert_int_eq(*(int *)it[i].out, 2 * i);
	}
	ck_assert_int_eq(hook_nlog, 6);
	ck_assert_int_eq(memcmp(hook_log, "BPBPBP", 6), 0);
	/* The replacement may not have run yet when the map ends (the other
	 * worker can take every item): wait for its record. */
	ck_assert_int_eq(fcntl(fds[0], F_SETFL, 0), 0);
	ck_assert_int_eq(read(fds[0], r, sizeof(r[0])), sizeof(r[0]));
	ck_assert_int_eq(r[0].nlog, 5);
	ck_assert_int_eq(gp_pool_info(p, it[0].worker, &wi), 0);
	ck_assert_int_eq(r[0].pid, wi.pid);
	ck_assert_int_ne(wi.pid, it[0].worker == 0 ? pid0 : pid1);
	gp_items_release(it, 40);
	free(it);
	gp_pool_destroy(p);
	close(fds[0]);
	close(fds[1]);
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

/*
 * A worker SIGKILLed from outside while its item runs (what Pool.terminate()
 * in Python does): with retries 0 that item ends GP_CRASHED, 128 + 9, after
 * one attempt and never starts again; the items behind it (in its batch,
 * dispatched and never begun, or not yet sent) run once, on the replacement.
 * Shared counters (MAP_SHARED, made before the pool) count each item's
 * starts in every worker; the blocked item tells its pid through a pipe and
 * then reads a pipe nobody writes to; a thread kills that pid. No timing.
 */
#define KILLED_N	401
#define KILLED_K	1	/* item 0 is a batch alone (no estimate yet);
				   item 1 heads the next, with others behind */

struct killed {
	_Atomic int	 starts[KILLED_N];
	int		 report[2];	/* the blocked item's pid, once */
	int		 never[2];	/* read by the blocked item */
};

static struct killed	*killed;

static int
started_then_blocks(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int	 i;
	pid_t	 me = getpid();
	char	 c;

	(void)ctx;
	(void)arg;
	if (len != sizeof(i))
		return 99;
	memcpy(&i, in, sizeof(i));
	if (atomic_fetch_add(&killed->starts[i], 1) == 0 && i == KILLED_K) {
		if (write(killed->report[1], &me, sizeof(me)) != sizeof(me))
			return 98;
		while (read(killed->never[0], &c, 1) != 0)
			;
		return 97;	/* not reached: nobody writes or closes */
	}
	return 0;
}

static void *
kill_reported(void *unused)
{
	pid_t	 pid;

	(void)unused;
	ck_assert_int_eq(read(killed->report[0], &pid, sizeof(pid)),
	    sizeof(pid));
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	return NULL;
}

/* A feed over an array, as the Python package's Pool drives the pool. */
struct array_feed {
	struct gp_item	*it;
	size_t		 n, pos;
};

static int
array_next(void *arg, struct gp_item **item)
{
	struct array_feed	*f = arg;

	if (f->pos == f->n)
		return GP_FEED_END;
	*item = &f->it[f->pos++];
	return GP_FEED_ITEM;
}

static int
array_done(void *arg, struct gp_item *item)
{
	(void)arg;
	(void)item;
	return 0;
}

static void
started_item_killed_from_outside(int per_gpu, int feed)
{
	struct array_feed	 af = { 0 };
	struct gp_feed		 fd = { .next = array_next,
				       .done = array_done, .in_fd = -1,
				       .ctl_fd = -1, .arg = &af };
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 1, .retries = 0 };
	struct gp_item		*it;
	pthread_t		 killer;
	int			 vals[KILLED_N], i;

	killed = mmap(NULL, sizeof(*killed), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(killed, MAP_FAILED);
	memset(killed, 0, sizeof(*killed));
	ck_assert_int_eq(pipe2(killed->report, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(killed->never, O_CLOEXEC), 0);
	o.per_gpu = per_gpu;
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	it = int_items(vals, KILLED_N);
	ck_assert_int_eq(pthread_create(&killer, NULL, kill_reported, NULL),
	    0);
	af.it = it;
	af.n = KILLED_N;
	if (feed)
		ck_assert_int_eq(gp_pool_run(p, started_then_blocks, NULL, 0,
		    &fd), 0);
	else
		ck_assert_int_eq(gp_pool_map(p, started_then_blocks, NULL, 0,
		    it, KILLED_N), 0);
	ck_assert_int_eq(pthread_join(killer, NULL), 0);
	ck_assert_int_eq(it[KILLED_K].status, GP_CRASHED);
	ck_assert_int_eq(it[KILLED_K].code, 128 + SIGKILL);
	ck_assert_int_eq(it[KILLED_K].attempts, 1);
	ck_assert_int_eq(atomic_load(&killed->starts[KILLED_K]), 1);
	for (i = 0; i < KILLED_N; i++) {
		if (i == KILLED_K)
			continue;
		ck_assert_msg(it[i].status == GP_OK && it[i].code == 0,
		    "item %d: status %d code %d", i, it[i].status,
		    it[i].code);
		ck_assert_int_eq(it[i].attempts, 1);
		ck_assert_int_eq(atomic_load(&killed->starts[i]), 1);
	}
	gp_items_release(it, KILLED_N);
	gp_pool_destroy(p);
	close(killed->report[0]);
	close(killed->report[1]);
	close(killed->never[0]);
	close(killed->never[1]);
	munmap(killed, sizeof(*killed));
	free(it);
}

START_TEST(started_item_killed_from_outside_is_not_rerun)
{
	started_item_killed_from_outside(1, 0);	/* items in its batch */
	started_item_killed_from_outside(3, 0);	/* and on other workers */
	started_item_killed_from_outside(1, 1);	/* a feed: batches of 1 */
	started_item_killed_from_outside(3, 1);
}
END_TEST

/*
 * Invariant 30: gated items start in order. Four fake GPUs; item 0 needs
 * one GPU and runs 0.5 s, item 1 needs all four, items 2 to 7 one each.
 * Item 1 cannot start while item 0 runs, and the 1-GPU items behind it
 * must wait too (with any skipping they would take the three idle GPUs
 * at once, and a stream of them could starve item 1 for ever): item 1
 * starts second, after item 0 ended, and the rest after item 1 ended.
 */
struct order_rec {
	unsigned	 seq;		/* this item's place among the starts */
	int64_t		 start, end;	/* CLOCK_MONOTONIC, ns */
};

static unsigned	*order_seq;

static int64_t
mono_ns(void)
{
	struct timespec	 ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int
record_order(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	struct order_rec	 r;
	int			 x;

	memcpy(&x, in, sizeof(x));
	r.seq = __atomic_fetch_add(order_seq, 1, __ATOMIC_SEQ_CST);
	r.start = mono_ns();
	usleep(x == 0 ? 500000 : 20000);
	r.end = mono_ns();
	return gp_ctx_reply(ctx, &r, sizeof(r));
}

struct order_feed {
	struct gp_item	*it;
	int		 n, next, done;
};

static int
order_next(void *arg, struct gp_item **item)
{
	struct order_feed	*f = arg;

	if (f->next == f->n)
		return GP_FEED_END;
	*item = &f->it[f->next++];
	return GP_FEED_ITEM;
}

static int
order_done(void *arg, struct gp_item *item)
{
	((struct order_feed *)arg)->done++;
	return 0;
}

static void
order_need(void *arg, const struct gp_item *item, struct gp_need *need)
{
	need->gpus = item == &((struct order_feed *)arg)->it[1] ? 4 : 1;
}

START_TEST(gated_head_item_holds_back_the_rest)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 4 };
	struct gp_item		 it[8];
	struct order_feed	 f = { it, 8, 0, 0 };
	struct gp_feed		 feed = { .next = order_next, .done = order_done,
				  .need = order_need, .in_fd = -1,
				  .ctl_fd = -1, .arg = &f };
	struct order_rec	 r[8];
	int			 v[8], i;

	order_seq = mmap(NULL, sizeof(*order_seq), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(order_seq, MAP_FAILED);
	*order_seq = 0;
	memset(it, 0, sizeof(it));
	for (i = 0; i < 8; i++) {
		v[i] = i;
		it[i].in = &v[i];
		it[i].inlen = sizeof(int);
	}
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_run(p, record_order, NULL, 0, &feed), 0);
	ck_assert_int_eq(f.done, 8);
	for (i = 0; i < 8; i++) {
		ck_assert_msg(it[i].status == GP_OK, "item %d: status %d code "
		    "%d", i, it[i].status, it[i].code);
		ck_assert_uint_eq(it[i].outlen, sizeof(r[i]));
		memcpy(&r[i], it[i].out, sizeof(r[i]));
	}
	/* The 1-GPU items after it run side by side, so they may start in
	 * any order among themselves; none may start before item 1 ends. */
	ck_assert_uint_eq(r[0].seq, 0);
	ck_assert_uint_eq(r[1].seq, 1);
	ck_assert_msg(r[1].start >= r[0].end, "the 4-GPU item started "
	    "while item 0 held a GPU");
	for (i = 2; i < 8; i++)
		ck_assert_msg(r[i].start >= r[1].end, "item %d started %.3f s "
		    "before the 4-GPU head item ended: the head did not hold "
		    "back the rest", i, (double)(r[1].end - r[i].start) / 1e9);
	gp_items_release(it, 8);
	gp_pool_destroy(p);
	munmap(order_seq, sizeof(*order_seq));
}
END_TEST

int
main(int argc, char **argv)
{
	Suite	*s = suite_create("pool");
	TCase	*tc = tcase_create("map"), *smp = tcase_create("smp");
	const char *tcn = argc > 1 ? argv[1] : "map";

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, map_results_in_item_order);
	tcase_add_test(tc, arg_is_copied_per_map);
	tcase_add_test(tc, any_item_size_zero_to_megabytes);
	tcase_add_test(tc, max_msg_enforced_both_ways);
	tcase_add_test(tc, pieces_with_and_without_regions);
	tcase_add_test(tc, small_max_msg_batches_fit_both_ways);
	tcase_add_test(tc, oversized_reply_is_an_error);
	tcase_add_test(tc, alloc_fail_leaves_the_pool_usable);
	tcase_add_test(tc, receive_alloc_fail_fails_the_call);
	tcase_add_test(tc, pipes_carry_big_results_without_regions);
	tcase_add_test(tc, run_alloc_fail_ends_each_item_once);
	tcase_add_test(tc, failed_call_keeps_the_fini_deadline);
	tcase_add_test(tc, item_failure_is_the_items_status);
	tcase_add_test(tc, workers_see_their_gpu_and_live_across_maps);
	tcase_add_test(tc, set_variables_replace_every_copy);
	tcase_add_test(tc, explicit_ids_and_inherited_visible_devices);
	tcase_add_test(tc, given_ids_stay_inside_what_is_visible);
	tcase_add_test(tc, no_gpu_is_a_clear_error);
	tcase_add_test(tc, pool_map_default_pool_from_environment);
	tcase_add_test(tc, missing_input_is_refused);
	tcase_add_test(tc, pool_map_says_why_it_failed);
	tcase_add_test(tc, plan_on_dgx2_fixture);
	tcase_add_test(tc, workers_are_really_bound);
	tcase_add_test(tc, run_streams_from_a_pipe);
	tcase_add_test(tc, recycle_after_max_tasks);
	tcase_add_test(tc, old_names_still_work);
	tcase_add_test(tc, forked_child_cannot_use_or_stop_the_pool);
	tcase_add_test(tc, item_init_sets_up_any_memory);
	tcase_add_test(tc, reserved_fields_leave_room_to_grow);
	tcase_add_test(tc, concurrent_maps_on_one_pool_one_proceeds);
	tcase_add_test(tc, pool_map_from_threads_runs_each_map_whole);
	tcase_add_test(tc, pool_map_in_a_worker_of_the_default_pool);
	tcase_add_test(tc, fork_hook_wraps_every_worker_fork);
	tcase_add_test(tc, gated_head_item_holds_back_the_rest);
	tcase_add_test(tc, strerror_names_every_code);
	tcase_add_test(tc, started_item_killed_from_outside_is_not_rerun);
	suite_add_tcase(s, tc);
	/* A meson test of its own (check_pool_smp), SKIP on one CPU. */
	tcase_set_timeout(smp, 30);
	tcase_add_test(smp, placement_stays_inside_inherited_affinity);
	suite_add_tcase(s, smp);
	if (strcmp(tcn, "smp") == 0 && sysconf(_SC_NPROCESSORS_ONLN) < 2)
		return gp_check_skip(s, tcn, "one CPU: no affinity to narrow");
	return gp_check_run_case(s, tcn);
}
