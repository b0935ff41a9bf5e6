/*
 * check_pieces.c: items and results past the window (issue 21), as a
 * user sees them. They travel through a worker's region in pieces of the
 * window; every byte comes back, checked against its item's pattern (as
 * in check_data.c), in each of the three result modes, through
 * pool_map()'s default pool and at a GiB each way. Then the faults in
 * pieces: a worker killed, a timeout or a cancel mid-piece, a small
 * window that carries everything in pieces, workers that lie about
 * their pieces, and an item a worker cannot hold.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpupool.h"
#include "msg.h"	/* GP_SHM_MIN */
#include "check_main.h"
#include "data_test.h"

/* The workers' crashes so far (shared_counter()): the first one dies. */
static unsigned	*crash_count;

/*
 * Items and results past the window (issue 21): bigger than one piece of
 * a worker's region (64 MiB unless the pool says otherwise), with the
 * library's own limits (max_msg 0: the machine's memory). They travel in
 * pieces; every byte comes back, in each of the three result modes and
 * through pool_map()'s default pool.
 */
#define WIN		win()
#define BIG		(WIN / 64 * 100 + 3)	/* 100 MiB and 3 bytes */

/* A small item before and after, one of exactly the window (one piece,
 * read in place), one a byte over it (a second piece of one byte) and
 * one of 100 MiB: each replied twice (echo_flip's decoy first). */
#define BIG_N		5

static const size_t *
big_lengths(void)
{
	static size_t	 len[BIG_N];

	len[0] = 100;
	len[1] = BIG;
	len[2] = WIN;
	len[3] = WIN + 1;
	len[4] = 3;
	return len;
}

START_TEST(items_and_results_past_the_window)
{
	struct gp_pool_opts o = { .fake_gpus = 2 };
	struct gp_pool	*p = make_pool_as_is(&o);
	struct gp_item	*it = items_make(big_lengths(), BIG_N);

	ck_assert_int_eq(gp_pool_map(p, echo_flip, NULL, 0, it, BIG_N), 0);
	assert_flipped(it, BIG_N, -1, "past the window");
	items_free(it, BIG_N, 0);
	gp_pool_destroy(p);
}
END_TEST

/* Into the caller's buffers: exact where they fit; a buffer a byte short
 * of a pieced result ends GP_ERROR, -ENOBUFS, outlen the room it needs,
 * its bytes untouched. */
START_TEST(pieces_land_in_the_callers_buffers)
{
	const size_t	 room[] = { 100, BIG, WIN, WIN, 3 };	/* one short */
	struct gp_pool_opts o = { .fake_gpus = 2,
				  .flags = GP_POOL_OUT_BUFFERS };
	struct gp_pool	*p = make_pool_as_is(&o);
	struct gp_item	*it = items_make(big_lengths(), BIG_N);
	struct arena	 a;
	size_t		 i;

	arena_give(&a, it, room, BIG_N);
	ck_assert_int_eq(gp_pool_map(p, echo_flip, NULL, 0, it, BIG_N), 0);
	arena_check(&a, it, BIG_N);
	for (i = 0; i < BIG_N; i++) {
		if (i != 3) {
			ck_assert_msg(flipped_ok(&it[i], i), "item %zu", i);
			continue;
		}
		ck_assert_int_eq(it[i].status, GP_ERROR);
		ck_assert_int_eq(it[i].code, -ENOBUFS);
		ck_assert_uint_eq(it[i].outlen, WIN + 1);
	}
	items_free(it, BIG_N, 1);
	free(a.b);
	gp_pool_destroy(p);
}
END_TEST

/* Lent to done(): a pieced result is exact where it lies. */
START_TEST(pieces_are_lent_to_done)
{
	struct gp_pool_opts o = { .fake_gpus = 2, .flags = GP_POOL_OUT_VIEW };
	struct gp_pool	*p = make_pool_as_is(&o);
	struct gp_item	*it = items_make(big_lengths(), BIG_N);
	struct view_feed f = { .f = { .it = it, .n = BIG_N } };
	struct gp_feed	 feed = { .next = test_feed_next, .done = view_done,
				  .in_fd = -1, .arg = &f, .ctl_fd = -1 };

	ck_assert_int_eq(gp_pool_run(p, echo_flip, NULL, 0, &feed), 0);
	ck_assert_uint_eq(f.f.done, BIG_N);
	ck_assert_uint_eq(f.viewed, BIG_N);
	items_free(it, BIG_N, 1);
	gp_pool_destroy(p);
}
END_TEST

/* pool_map(): the default pool, { 0 } options, takes them too. */
START_TEST(pool_map_takes_items_past_the_window)
{
	struct gp_item	*it = items_make(big_lengths(), BIG_N);

	ck_assert_int_eq(setenv("GPUPOOL_FAKE_GPUS", "2", 1), 0);
	ck_assert_int_eq(pool_map(echo_flip, it, BIG_N), 0);
	assert_flipped(it, BIG_N, -1, "pool_map");
	items_free(it, BIG_N, 0);
	gp_default_pool_destroy();
}
END_TEST

/*
 * A GiB and more each way, without a GiB of pattern on each side: the
 * bytes repeat every REP_PERIOD (one period of a pattern in a memfd,
 * mapped again and again), a length no piece's size is a multiple of, so
 * a piece misplaced by a whole piece still shows.
 */
#define REP_PERIOD	(5 * MiB + 4096)
#define REP_LEN		(((size_t)1 << 30) + 4097)

/* len bytes of seed's pattern repeated every REP_PERIOD, read only; free
 * with rep_unmap(). */
static uint8_t *
rep_map(size_t len, uint64_t seed)
{
	size_t	 n = (len + REP_PERIOD - 1) / REP_PERIOD, k;
	uint8_t	*one, *all;
	int	 fd;

	if ((fd = memfd_create("rep", MFD_CLOEXEC)) < 0 ||
	    ftruncate(fd, REP_PERIOD) != 0)
		return NULL;
	one = mmap(NULL, REP_PERIOD, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	all = mmap(NULL, n * REP_PERIOD, PROT_NONE,
	    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (one == MAP_FAILED || all == MAP_FAILED) {
		close(fd);
		return NULL;
	}
	pat_fill(one, REP_PERIOD, seed, 0);
	(void)munmap(one, REP_PERIOD);
	for (k = 0; k < n; k++)
		if (mmap(all + k * REP_PERIOD, REP_PERIOD, PROT_READ,
		    MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
			close(fd);
			return NULL;
		}
	close(fd);
	return all;
}

static void
rep_unmap(const uint8_t *b, size_t len)
{
	size_t	 n = (len + REP_PERIOD - 1) / REP_PERIOD;

	(void)munmap((void *)b, n * REP_PERIOD);
}

/* The first of len bytes at b that is not rep_map()'s; len if none. */
static size_t
rep_diff(const uint8_t *b, size_t len, uint64_t seed)
{
	size_t	 k, n, d;

	for (k = 0; k < len; k += REP_PERIOD) {
		n = len - k < REP_PERIOD ? len - k : REP_PERIOD;
		if ((d = pat_diff(b + k, n, seed, 0)) != n)
			return k + d;
	}
	return len;
}

#define REP_SEED_IN	98
#define REP_SEED_OUT	99

/* An item of 8 bytes (a size_t) asks for that many bytes of the output
 * pattern; any other item is checked against the input pattern, and the
 * reply is where it first differs (its length: nowhere). */
static int
rep_fn(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	uint8_t	*b;
	size_t	 want, d;
	int	 rc;

	if (len != sizeof(want)) {
		d = rep_diff(in, len, REP_SEED_IN);
		return gp_ctx_reply(ctx, &d, sizeof(d));
	}
	memcpy(&want, in, sizeof(want));
	if ((b = rep_map(want, REP_SEED_OUT)) == NULL)
		return 98;
	rc = gp_ctx_reply(ctx, b, want);
	rep_unmap(b, want);
	return rc;
}

/* Those runs check the same paths at BIG. */
static size_t
gib_or_less(void)
{
	return under_valgrind() ? BIG : REP_LEN;
}

START_TEST(a_gib_each_way)
{
	struct gp_pool_opts o = { .fake_gpus = 1 };
	struct gp_pool	*p = make_pool_as_is(&o);
	size_t		 len = gib_or_less(), d;
	struct gp_item	 it;
	uint8_t		*in = rep_map(len, REP_SEED_IN);

	/* A result: a GiB in the master, a period in the worker. */
	gp_item_init(&it, &len, sizeof(len));
	ck_assert_int_eq(gp_pool_map(p, rep_fn, NULL, 0, &it, 1), 0);
	ck_assert_int_eq(it.status, GP_OK);
	ck_assert_uint_eq(it.outlen, len);
	ck_assert_uint_eq(rep_diff(it.out, len, REP_SEED_OUT), len);
	gp_items_release(&it, 1);

	/* An item: a GiB in the worker, a period in the master. */
	ck_assert_ptr_nonnull(in);
	gp_item_init(&it, in, len);
	ck_assert_int_eq(gp_pool_map(p, rep_fn, NULL, 0, &it, 1), 0);
	ck_assert_int_eq(it.status, GP_OK);
	ck_assert_uint_eq(it.outlen, sizeof(d));
	memcpy(&d, it.out, sizeof(d));
	ck_assert_uint_eq(d, len);
	gp_items_release(&it, 1);
	rep_unmap(in, len);
	gp_pool_destroy(p);
}
END_TEST

/*
 * A worker killed in the middle of a piece of a result: the item of
 * KP_IN bytes replies KP_OUT bytes of pattern KP_SEED, on its first
 * attempt from a buffer that is PROT_NONE from KP_CUT on, so the copy of
 * its third piece into the region dies by SIGSEGV, two pieces received.
 */
#define KP_IN		25
#define KP_OUT		(WIN / 64 * 160)	/* 160 MiB */
#define KP_CUT		(WIN / 64 * 140)
#define KP_SEED		5555

static int
crash_in_piece(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	uint8_t	*b;
	int	 rc, first;

	if (len != KP_IN)
		return reply_flipped(ctx, in, len);
	b = mmap(NULL, KP_OUT, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b == MAP_FAILED)
		return 94;
	first = __atomic_fetch_add(crash_count, 1, __ATOMIC_SEQ_CST) == 0;
	if (first && mprotect(b + KP_CUT, KP_OUT - KP_CUT, PROT_NONE) != 0)
		return 95;
	pat_fill(b, first ? KP_CUT : KP_OUT, KP_SEED, 0);
	rc = gp_ctx_reply(ctx, b, KP_OUT);
	(void)munmap(b, KP_OUT);
	return rc;
}

/* Small and 1 MiB items around the crashing one, then a second call. */
static void
kp_map(int retries)
{
	const size_t	 len[] = { 20, MiB, KP_IN, 64, MiB + 5, 7 };
	struct gp_pool_opts o = { .fake_gpus = 1, .retries = retries };
	struct gp_pool	*p;
	struct gp_item	*it;
	int		 k;

	crash_count = shared_counter();
	p = make_pool_as_is(&o);
	it = items_make(len, 6);
	for (k = 0; k < 2; k++) {
		ck_assert_int_eq(gp_pool_map(p, crash_in_piece, NULL, 0, it,
		    6), 0);
		assert_flipped(it, 6, 2, "beside the crash");
		if (k == 0 && retries == 0) {
			/* Not retried: crashed, nothing kept. */
			ck_assert_int_eq(it[2].status, GP_CRASHED);
			ck_assert_int_eq(it[2].code, 128 + SIGSEGV);
			ck_assert_ptr_null(it[2].out);
			gp_items_release(it, 6);
			continue;
		}
		ck_assert_int_eq(it[2].status, GP_OK);
		ck_assert_int_eq(it[2].attempts, (k == 0 ? 2 : 1));
		ck_assert_uint_eq(it[2].outlen, KP_OUT);
		ck_assert_uint_eq(pat_diff(it[2].out, KP_OUT, KP_SEED, 0),
		    KP_OUT);
		gp_items_release(it, 6);
	}
	items_free(it, 6, 0);
	gp_pool_destroy(p);
	(void)munmap(crash_count, sizeof(*crash_count));
}

START_TEST(killed_mid_piece_of_a_result_then_retried)
{
	kp_map(1);
}
END_TEST

START_TEST(killed_mid_piece_of_a_result_is_crashed)
{
	kp_map(0);
}
END_TEST

/*
 * A worker killed in the middle of a piece of an item: an item of
 * SABOTAGE bytes makes the second half of its worker's items half
 * PROT_NONE (in the worker only: the master's mapping is its own), so
 * the worker dies copying the first piece of the next big item. Its
 * replacement inherits the region whole.
 */
#define SABOTAGE	5

static int
sabotage_or_flip(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	uintptr_t	 start;

	if (len != SABOTAGE)
		return echo_flip(ctx, in, len, arg);
	if (regions(2 * WIN, &start, 1, NULL, NULL) != 1 ||
	    mprotect((uint8_t *)start + WIN / 2, WIN / 2, PROT_NONE) != 0)
		return 99;
	return reply_flipped(ctx, in, len);
}

static void
kill_mid_item(int retries)
{
	const size_t	 first[] = { SABOTAGE }, len[] = { BIG, MiB };
	struct gp_pool_opts o = { .fake_gpus = 1, .retries = retries };
	struct gp_pool	*p = make_pool_as_is(&o);
	struct gp_item	*it = items_make(first, 1);
	int		 k;

	ck_assert_int_eq(gp_pool_map(p, sabotage_or_flip, NULL, 0, it, 1), 0);
	assert_flipped(it, 1, -1, "the sabotage");
	items_free(it, 1, 0);
	it = items_make(len, 2);
	for (k = 0; k < 2; k++) {
		ck_assert_int_eq(gp_pool_map(p, sabotage_or_flip, NULL, 0, it,
		    2), 0);
		assert_flipped(it, 2, k == 0 && retries == 0 ? 0 : -1,
		    "after the sabotage");
		if (k == 0 && retries == 0) {
			/* It died on that item: a crash of that item. */
			ck_assert_int_eq(it[0].status, GP_CRASHED);
			ck_assert_int_eq(it[0].code, 128 + SIGSEGV);
		} else
			ck_assert_int_eq(it[0].attempts, (k == 0 ? 2 : 1));
		gp_items_release(it, 2);
	}
	items_free(it, 2, 0);
	gp_pool_destroy(p);
}

START_TEST(killed_mid_piece_of_an_item_then_retried)
{
	kill_mid_item(1);
}
END_TEST

START_TEST(killed_mid_piece_of_an_item_is_crashed)
{
	kill_mid_item(0);
}
END_TEST

/*
 * A stop (a timeout, a cancel) while a result travels in pieces: fn
 * waits until its stop fd says the stop was sent, then replies 256 MiB.
 * The reply stops at its first piece, -ECANCELED; fn's stop fd turns
 * readable again (the acknowledgement of the piece the master took).
 * stop_seen counts the workers that saw both.
 */
#define STOP_OUT	(4 * WIN)

static unsigned	*stop_seen;

static int
stopped_mid_reply(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	const int	*cancel_fd = arg;
	struct pollfd	 pfd = { gp_ctx_stop_fd(ctx), POLLIN, 0 };
	uint8_t		*b;
	int		 rc;

	if (len != KP_IN)
		return reply_flipped(ctx, in, len);
	if (*cancel_fd >= 0 && write(*cancel_fd, "x", 1) != 1)
		return 96;
	if (poll(&pfd, 1, 20000) != 1 ||
	    (b = rep_map(STOP_OUT, REP_SEED_OUT)) == NULL)
		return 97;
	rc = gp_ctx_reply(ctx, b, STOP_OUT);
	rep_unmap(b, STOP_OUT);
	if (rc != -ECANCELED)
		return 95;
	if (poll(&pfd, 1, 20000) == 1)
		__atomic_fetch_add(stop_seen, 1, __ATOMIC_SEQ_CST);
	return 0;
}

/* The stopped item, then big items on the same pool, all exact. */
static void
stop_mid_reply(struct gp_pool_opts *o, int status)
{
	const size_t	 len[] = { KP_IN }, after[] = { WIN + 4097, 30, MiB };
	int		 fds[2] = { -1, -1 };
	struct gp_pool	*p;
	struct gp_item	*it;
	char		 c;

	stop_seen = shared_counter();
	if (o->flags & GP_POOL_CANCEL_FD) {
		ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);
		o->cancel_fd = fds[0];
	}
	p = make_pool_as_is(o);
	it = items_make(len, 1);
	ck_assert_int_eq(gp_pool_map(p, stopped_mid_reply, &fds[1],
	    sizeof(fds[1]), it, 1), 0);
	ck_assert_msg(it[0].status == status, "status %d code %d",
	    it[0].status, it[0].code);
	ck_assert_ptr_null(it[0].out);
	ck_assert_uint_eq(*stop_seen, 1);
	items_free(it, 1, 0);
	if (fds[0] >= 0)
		ck_assert_int_eq(read(fds[0], &c, 1), 1);
	it = items_make(after, 3);
	ck_assert_int_eq(gp_pool_map(p, stopped_mid_reply, &fds[1],
	    sizeof(fds[1]), it, 3), 0);
	assert_flipped(it, 3, -1, "after the stop");
	items_free(it, 3, 0);
	gp_pool_destroy(p);
	if (fds[0] >= 0) {
		close(fds[0]);
		close(fds[1]);
	}
	(void)munmap(stop_seen, sizeof(*stop_seen));
}

START_TEST(timeout_mid_piece_of_a_result)
{
	/* Time for the items after it to run in (their fn copies 64 MiB). */
	struct gp_pool_opts o = { .fake_gpus = 1, .grace_ms = 20000,
				  .timeout_ms = under_valgrind() ? 15000 : 1500 };

	stop_mid_reply(&o, GP_TIMEDOUT);
}
END_TEST

START_TEST(cancel_mid_piece_of_a_result)
{
	struct gp_pool_opts o = { .fake_gpus = 1, .grace_ms = 20000,
				  .flags = GP_POOL_CANCEL_FD };

	stop_mid_reply(&o, GP_CANCELED);
}
END_TEST

/*
 * A window of 64 KiB: everything over it goes in pieces. Items of every
 * size around it and far past it in one call, shuffled, on workers
 * recycled every 3 items, in each result mode. An item of a length that
 * is a multiple of 7 asks for GROW copies of itself flipped: a result
 * past the window from an item under it, so that its first piece comes
 * after the batch's earlier region results (or, when they leave less
 * than a record's worth of the half, in the message).
 */
#define GROWN_N		90

static size_t *
grow_lengths(void)
{
	const size_t	 sz[] = { 0, 5, GP_SHM_MIN, 7 * 300, 7 * 1500,
			     SMALL_WIN - 1, SMALL_WIN, SMALL_WIN + 1,
			     200 << 10, 3 * MiB + 17 };
	const int	 cnt[] = { 9, 9, 9, 12, 12, 9, 9, 9, 8, 4 };

	return mixed_lengths(sz, cnt, 10, GROWN_N);
}

static void
assert_grown(const struct gp_item *it, size_t n, const char *what)
{
	size_t	 i;

	for (i = 0; i < n && grown_ok(&it[i], i); i++)
		;
	ck_assert_msg(i == n, "%s: item %zu of %zu bytes: status %d code %d "
	    "outlen %zu", what, i, i < n ? it[i].inlen : 0,
	    i < n ? it[i].status : 0, i < n ? it[i].code : 0,
	    i < n ? it[i].outlen : 0);
}

START_TEST(small_window_carries_everything_in_pieces)
{
	struct gp_pool_opts o = { .fake_gpus = 2, .max_tasks = 3,
				  .window = SMALL_WIN };
	size_t		*len = grow_lengths(), room[GROWN_N], i;
	struct gp_pool	*p = make_pool_as_is(&o);
	struct gp_item	*it = items_make(len, GROWN_N);
	struct view_feed f = { .f = { .it = it, .n = GROWN_N } };
	struct gp_feed	 feed = { .next = test_feed_next, .done = view_done,
				  .in_fd = -1, .arg = &f, .ctl_fd = -1 };
	struct arena	 a;

	ck_assert_int_eq(gp_pool_map(p, grow_or_flip, NULL, 0, it, GROWN_N),
	    0);
	assert_grown(it, GROWN_N, "malloc'd");
	gp_items_release(it, GROWN_N);
	gp_pool_destroy(p);

	o.flags = GP_POOL_OUT_BUFFERS;
	p = make_pool_as_is(&o);
	for (i = 0; i < GROWN_N; i++)
		room[i] = len[i] % 7 == 0 && len[i] <= SMALL_WIN ?
		    len[i] * GROW : len[i];
	arena_give(&a, it, room, GROWN_N);
	ck_assert_int_eq(gp_pool_map(p, grow_or_flip, NULL, 0, it, GROWN_N),
	    0);
	assert_grown(it, GROWN_N, "the caller's buffers");
	arena_check(&a, it, GROWN_N);
	free(a.b);
	gp_pool_destroy(p);

	o.flags = GP_POOL_OUT_VIEW;
	p = make_pool_as_is(&o);
	for (i = 0; i < GROWN_N; i++)
		it[i].out = NULL;
	ck_assert_int_eq(gp_pool_run(p, grow_or_flip, NULL, 0, &feed), 0);
	ck_assert_uint_eq(f.f.done, GROWN_N);
	ck_assert_uint_eq(f.viewed, GROWN_N);
	items_free(it, GROWN_N, 1);
	free(len);
	gp_pool_destroy(p);
}
END_TEST

/*
 * Lying workers: fn writes a forged message on its result pipe (the last
 * write-only pipe it holds: the host's stdio come first), then waits to
 * be killed. Each lie is caught before anything is read or allocated
 * for it: the item ends GP_ERROR, -EPROTO, and the pool's next call, on
 * a replacement, is exact. Each pool is fresh, its first item id 1.
 */
#define LIE_MAX		MiB		/* the lying pools' max_msg */
#define LIE_T		100000		/* a total over the window */

enum lie {
	LIE_PAST_THE_HALF, LIE_OVER_MAX_MSG, LIE_NOT_OVER_THE_WINDOW,
	LIE_GAP, LIE_TOTAL_CHANGED, LIE_SHORT_OF_ITS_TOTAL,
	LIE_PIECED_WITH_NONE, LIE_INLINE_LENGTH, LIE_ACK_OF_NOTHING,
	LIE_WRONG_ITEM, LIE_HUGE_TOTAL, LIE_N
};

struct lying {
	enum lie	 lie;
	uint8_t		 host[128];	/* fds 0..1023: write-only pipes the
					   test had before the pool */
};

/* The write-only pipes among fds 0..1023 into set, a bit each; in a
 * worker, not in host (NULL: none), the last of them. */
static int
write_pipes(uint8_t *set, const uint8_t *host)
{
	struct stat	 st;
	int		 fd, fl, last = -1;

	for (fd = 0; fd < 1024; fd++) {
		if ((fl = fcntl(fd, F_GETFL)) == -1 ||
		    (fl & O_ACCMODE) != O_WRONLY || fstat(fd, &st) != 0 ||
		    !S_ISFIFO(st.st_mode))
			continue;
		if (set != NULL)
			set[fd / 8] |= (uint8_t)(1u << fd % 8);
		if (host == NULL || !(host[fd / 8] & (1u << fd % 8)))
			last = fd;
	}
	return last;
}

/* Append a message of type, id and len payload bytes at pl to b (at *n,
 * of room). */
static void
forge(uint8_t *b, size_t *n, uint32_t type, uint64_t id, const void *pl,
    size_t len)
{
	struct gp_msg_hdr	 h = { type, (uint32_t)len, id };

	memcpy(b + *n, &h, sizeof(h));
	memcpy(b + *n + sizeof(h), pl, len);
	*n += sizeof(h) + len;
}

/* A piece of inline bytes (zeros), in a message that says so. */
static void
forge_piece(uint8_t *b, size_t *n, uint64_t id, uint64_t total,
    uint64_t off, uint32_t len)
{
	uint8_t			 pl[sizeof(struct gp_msg_piece) + 256] = { 0 };
	struct gp_msg_piece	 m = { total, off, len, 0 };

	memcpy(pl, &m, sizeof(m));
	forge(b, n, GP_MSG_PIECE, id, pl, sizeof(m) + len);
}

static int
liar(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	const struct lying	*ly = arg;
	enum lie		 lie = ly->lie;
	uint8_t			 b[4096];
	struct gp_msg_piece	 m = { LIE_T, 0, 70000, GP_REC_SHM };
	struct gp_msg_ack	 a = { 0 };
	struct gp_rec_result	 r = { .id = 1, .kind = GP_REC_DONE,
				       .flags = GP_REC_PIECED };
	size_t			 n = 0;
	int			 fd = write_pipes(NULL, ly->host);

	if (len != KP_IN)
		return echo_flip(ctx, in, len, arg);
	switch (lie) {
	case LIE_PAST_THE_HALF:		/* 70,000 bytes of a 64 KiB half */
		forge(b, &n, GP_MSG_PIECE, 1, &m, sizeof(m));
		break;
	case LIE_OVER_MAX_MSG:
		forge_piece(b, &n, 1, 2 * LIE_MAX, 0, 100);
		break;
	case LIE_NOT_OVER_THE_WINDOW:
		forge_piece(b, &n, 1, SMALL_WIN, 0, 100);
		break;
	case LIE_GAP:
		forge_piece(b, &n, 1, LIE_T, 0, 100);
		forge_piece(b, &n, 1, LIE_T, 200, 100);
		break;
	case LIE_TOTAL_CHANGED:
		forge_piece(b, &n, 1, LIE_T, 0, 100);
		forge_piece(b, &n, 1, LIE_T + 1, 100, 100);
		break;
	case LIE_SHORT_OF_ITS_TOTAL:
		forge_piece(b, &n, 1, LIE_T, 0, 100);
		/* FALLTHROUGH */
	case LIE_PIECED_WITH_NONE:
		forge(b, &n, GP_MSG_RESULT, 1, &r, sizeof(r));
		break;
	case LIE_INLINE_LENGTH:		/* says 100 bytes, carries 50 */
		m = (struct gp_msg_piece){ LIE_T, 0, 100, 0 };
		memset(b + 200, 0, 50);
		memcpy(b + 200 - sizeof(m), &m, sizeof(m));
		forge(b, &n, GP_MSG_PIECE, 1, b + 200 - sizeof(m),
		    sizeof(m) + 50);
		break;
	case LIE_ACK_OF_NOTHING:
		forge(b, &n, GP_MSG_ACK, 1, &a, sizeof(a));
		break;
	case LIE_WRONG_ITEM:
		forge_piece(b, &n, 2, LIE_T, 0, 100);
		break;
	case LIE_HUGE_TOTAL:		/* a PiB, past the default max_msg */
		forge_piece(b, &n, 1, (uint64_t)1 << 50, 0, 100);
		break;
	default:
		return 98;
	}
	if (fd < 0 || write(fd, b, n) != (ssize_t)n)
		return 99;
	for (;;)
		pause();
}

START_TEST(lying_pieces_are_protocol_errors)
{
	const size_t	 len[] = { KP_IN }, after[] = { 3 * LIE_T, 20, MiB };
	struct gp_pool_opts o = { .fake_gpus = 1, .window = SMALL_WIN };
	struct lying	 ly = { 0 };
	struct gp_pool	*p;
	struct gp_item	*it;
	enum lie	 lie;

	(void)write_pipes(ly.host, NULL);
	for (lie = 0; lie < LIE_N; lie++) {
		ly.lie = lie;
		o.max_msg = lie == LIE_HUGE_TOTAL ? 0 : LIE_MAX;
		p = make_pool_as_is(&o);
		it = items_make(len, 1);
		ck_assert_int_eq(gp_pool_map(p, liar, &ly, sizeof(ly), it, 1),
		    0);
		ck_assert_msg(it[0].status == GP_ERROR && it[0].code == -EPROTO,
		    "lie %d: status %d code %d", lie, it[0].status,
		    it[0].code);
		ck_assert_int_eq(it[0].attempts, 1);
		items_free(it, 1, 0);
		it = items_make(after, 3);
		ck_assert_int_eq(gp_pool_map(p, liar, &ly, sizeof(ly), it, 3),
		    0);
		assert_flipped(it, 3, -1, "after a lie");
		items_free(it, 3, 0);
		gp_pool_destroy(p);
	}
}
END_TEST

/*
 * An item its worker cannot hold (the item before capped its address
 * space a little over what it uses) fails alone, GP_ERROR, -ENOMEM,
 * without the worker: the same process runs the items after it. Not
 * under ASan or valgrind, whose allocators end the process instead.
 */
static int
cap_or_flip(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	struct rlimit	 rl;
	unsigned long	 pages;
	pid_t		 pid = getpid();
	FILE		*f;

	if (len != SABOTAGE)
		return echo_flip(ctx, in, len, arg);
	if ((f = fopen("/proc/self/statm", "re")) == NULL)
		return 90;
	if (fscanf(f, "%lu", &pages) != 1)
		pages = 0;
	fclose(f);
	rl.rlim_cur = rl.rlim_max = pages * (size_t)sysconf(_SC_PAGESIZE) +
	    32 * MiB;
	if (pages == 0 || setrlimit(RLIMIT_AS, &rl) != 0)
		return 91;
	return gp_ctx_reply(ctx, &pid, sizeof(pid));
}

START_TEST(an_item_the_worker_cannot_hold_fails_alone)
{
	const size_t	 cap[] = { SABOTAGE }, len[] = { BIG, 1000 };
	struct gp_pool_opts o = { .fake_gpus = 1 };
	struct gp_pool	*p;
	struct gp_item	*it;
	pid_t		 pid[2];
	int		 k;

#if defined(__SANITIZE_ADDRESS__)
	return;
#endif
	if (under_valgrind())
		return;
	p = make_pool_as_is(&o);
	for (k = 0; k < 2; k++) {
		it = items_make(cap, 1);
		ck_assert_int_eq(gp_pool_map(p, cap_or_flip, NULL, 0, it, 1),
		    0);
		ck_assert_int_eq(it[0].status, GP_OK);
		memcpy(&pid[k], it[0].out, sizeof(pid[k]));
		items_free(it, 1, 0);
		if (k == 1)
			break;
		it = items_make(len, 2);
		ck_assert_int_eq(gp_pool_map(p, cap_or_flip, NULL, 0, it, 2),
		    0);
		ck_assert_int_eq(it[0].status, GP_ERROR);
		ck_assert_int_eq(it[0].code, -ENOMEM);
		ck_assert_int_eq(it[0].attempts, 1);
		assert_flipped(it, 2, 0, "beside the one too big");
		items_free(it, 2, 0);
	}
	ck_assert_int_eq(pid[0], pid[1]);
	gp_pool_destroy(p);
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("pieces");
	TCase	*tc = tcase_create("pieces");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, items_and_results_past_the_window);
	tcase_add_test(tc, pieces_land_in_the_callers_buffers);
	tcase_add_test(tc, pieces_are_lent_to_done);
	tcase_add_test(tc, pool_map_takes_items_past_the_window);
	tcase_add_test(tc, a_gib_each_way);
	tcase_add_test(tc, killed_mid_piece_of_a_result_then_retried);
	tcase_add_test(tc, killed_mid_piece_of_a_result_is_crashed);
	tcase_add_test(tc, killed_mid_piece_of_an_item_then_retried);
	tcase_add_test(tc, killed_mid_piece_of_an_item_is_crashed);
	tcase_add_test(tc, timeout_mid_piece_of_a_result);
	tcase_add_test(tc, cancel_mid_piece_of_a_result);
	tcase_add_test(tc, small_window_carries_everything_in_pieces);
	tcase_add_test(tc, lying_pieces_are_protocol_errors);
	tcase_add_test(tc, an_item_the_worker_cannot_hold_fails_alone);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
