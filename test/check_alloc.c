/*
 * check_alloc.c: allocations failing at any point of a call (this program
 * alone is linked with the --wrap flags below), and big items and results
 * with and without the library's regions: every item ends once, the pool
 * stays usable, the fini deadline holds.
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

/*
 * Allocation failures on demand: this program is linked with
 * -Wl,--wrap=malloc, --wrap=realloc and --wrap=mmap64 (test/meson.build;
 * with 64-bit file offsets, glibc's mmap is mmap64), so every malloc,
 * realloc and mmap of the library and of this program comes here.
 * Armed, the fail_at-th malloc or realloc made by the arming process
 * fails; workers (forked copies) never fail. With no_regions,
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

int
main(void)
{
	Suite	*s = suite_create("pool");
	TCase	*tc = tcase_create("alloc");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, pieces_with_and_without_regions);
	tcase_add_test(tc, alloc_fail_leaves_the_pool_usable);
	tcase_add_test(tc, receive_alloc_fail_fails_the_call);
	tcase_add_test(tc, pipes_carry_big_results_without_regions);
	tcase_add_test(tc, run_alloc_fail_ends_each_item_once);
	tcase_add_test(tc, failed_call_keeps_the_fini_deadline);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
