/*
 * check_data.c: the data plane (data.c) as a user sees it, within the
 * window. Items and results of GP_SHM_MIN bytes or more travel through
 * each worker's region of shared memory, the rest through the pipes, and
 * results may land in the caller's own buffers (GP_POOL_OUT_BUFFERS) or
 * be lent to done() (GP_POOL_OUT_VIEW). Every result is checked byte for
 * byte against a pattern that depends on its item, transformed by fn, so
 * that a stale, misplaced or torn result fails. Then the faults: a worker
 * killed half way through writing a big result, a timeout during a big
 * item, a cancel, each followed by big items on the same pool; and the
 * regions' mappings, in the master and in a worker. Past the window, in
 * pieces: check_pieces.c.
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

#define MAX_MSG		(4 * MiB)	/* the pools' max_msg, unless said */

static struct gp_pool *
make_pool(struct gp_pool_opts *o)
{
	if (o->max_msg == 0)
		o->max_msg = MAX_MSG;
	return make_pool_as_is(o);
}

/* The input flipped; then, for an item of odd length, a result over
 * max_msg (*arg): the last call wins, and it failed. */
static int
reply_over(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	size_t	 max = *(const size_t *)arg;
	uint8_t	*b;
	int	 rc;

	if ((rc = reply_flipped(ctx, in, len)) != 0 || len % 2 == 0)
		return rc;
	if ((b = calloc(1, max + 1)) == NULL)
		return 92;
	rc = gp_ctx_reply(ctx, b, max + 1);
	free(b);
	return rc == -EMSGSIZE ? 0 : 93;
}

/*
 * Sizes at every edge of the data plane in one call, shuffled so that
 * batches mix records through the pipe and through the region and
 * several big items share one batch: empty, one byte, one under the
 * threshold, at it, one over, 100 KiB, 1 MiB and exactly max_msg. Every
 * result is exact. Then an item over max_msg and a result over it end
 * GP_ERROR, -EMSGSIZE, and the pool goes on carrying big items.
 */
START_TEST(round_trip_at_the_edges)
{
	const size_t	 sz[] = { 0, 1, GP_SHM_MIN - 1, GP_SHM_MIN,
			     GP_SHM_MIN + 1, 100 << 10, MiB, MAX_MSG };
	const int	 cnt[] = { 34, 34, 34, 34, 35, 20, 6, 3 };
	const size_t	 over[] = { MAX_MSG + 1, 5 };
	size_t		*len = mixed_lengths(sz, cnt, 8, 200), max = MAX_MSG;
	size_t		 len2[40];
	struct gp_pool_opts o = { .fake_gpus = 2 };
	struct gp_pool	*p = make_pool(&o);
	struct gp_item	*it = items_make(len, 200);
	size_t		 i;

	ck_assert_int_eq(gp_pool_map(p, echo_flip, NULL, 0, it, 200), 0);
	assert_flipped(it, 200, -1, "mixed sizes");
	items_free(it, 200, 0);

	it = items_make(over, 2);
	ck_assert_int_eq(gp_pool_map(p, echo_flip, NULL, 0, it, 2), 0);
	ck_assert_int_eq(it[0].status, GP_ERROR);
	ck_assert_int_eq(it[0].code, -EMSGSIZE);
	ck_assert_ptr_null(it[0].out);
	assert_flipped(it, 2, 0, "beside an item over max_msg");
	items_free(it, 2, 0);

	/* Big results, every other one then replaced by one too big, in
	 * batches of several: a failed one takes no place in the region,
	 * at either end. */
	for (i = 0; i < 40; i++)
		len2[i] = GP_SHM_MIN + i;
	it = items_make(len2, 40);
	ck_assert_int_eq(gp_pool_map(p, reply_over, &max, sizeof(max), it,
	    40), 0);
	for (i = 1; i < 40; i += 2) {
		ck_assert_int_eq(it[i].status, GP_ERROR);
		ck_assert_int_eq(it[i].code, -EMSGSIZE);
		ck_assert_ptr_null(it[i].out);
		ck_assert_uint_eq(it[i].outlen, 0);
	}
	for (i = 0; i < 40; i += 2)
		ck_assert_msg(flipped_ok(&it[i], i), "item %zu", i);
	items_free(it, 40, 0);

	it = items_make(len, 60);
	ck_assert_int_eq(gp_pool_map(p, echo_flip, NULL, 0, it, 60), 0);
	assert_flipped(it, 60, -1, "after the errors");
	items_free(it, 60, 0);
	free(len);
	gp_pool_destroy(p);
}
END_TEST

/* A pool made with o echoes n items of len[i] bytes, each exact. */
static void
echo_all(struct gp_pool_opts *o, const size_t *len, size_t n,
    const char *what)
{
	struct gp_pool	*p = make_pool(o);
	struct gp_item	*it = items_make(len, n);

	ck_assert_int_eq(gp_pool_map(p, echo_flip, NULL, 0, it, n), 0);
	assert_flipped(it, n, -1, what);
	items_free(it, n, 0);
	gp_pool_destroy(p);
}

/*
 * A region half is max_msg rounded up to a page, and offsets are 64-byte
 * aligned: with max_msg 64 KiB, a batch of 16,385 and 49,090 bytes fits
 * a message (65,475 bytes) but not the half (16,448 + 49,090), so the
 * second item, and its result, go through the pipe beside the first's
 * region record. One worker, so every batch after the first pairs them.
 */
START_TEST(batch_past_the_region_goes_through_the_pipe)
{
	struct gp_pool_opts o = { .fake_gpus = 1, .max_msg = 64 << 10 };
	size_t		 len[60], i;

	for (i = 0; i < 60; i++)
		len[i] = i % 2 ? 49090 : 16385;
	echo_all(&o, len, 60, "past the region");
}
END_TEST

/*
 * Which way each item of that pool came, seen from fn: an item read in
 * place from the region lies in a shared mapping of the worker (its
 * first half), any other in the worker's own buffer. Both ends place a
 * batch's region bytes from offset 0, 64-byte aligned, so fn can follow
 * the placement: a region item at offset 0 starts a batch, the next one
 * must lie where the last ended, and an item that came by pipe must be
 * one that did not fit the rest of the half.
 */
struct paths {
	unsigned	 region, pipe, bad;
	char		 why[160];
};

static struct paths	*paths;

/* The start of the shared mapping holding p, or NULL. */
static const uint8_t *
shared_at(const void *p)
{
	uintptr_t	 a = (uintptr_t)p;
	size_t		 i;
	int		 read;

	for (read = 0; read < 2; read++) {
		for (i = 0; i < nspans; i++)
			if (a >= spans[i].lo && a < spans[i].hi)
				return spans[i].perm[3] == 's' ?
				    (const uint8_t *)spans[i].lo : NULL;
		if (read == 0)
			spans_read();
	}
	return NULL;
}

static int
echo_noting_path(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	static size_t	 end;	/* where this batch's region bytes end */
	const size_t	 half = 64 << 10;
	const uint8_t	*reg = shared_at(in);
	size_t		 off;

	if (reg != NULL) {
		off = (size_t)((const uint8_t *)in - reg);
		if ((off != 0 && off != end) || off + len > half) {
			snprintf(paths->why, sizeof(paths->why), "%zu bytes "
			    "at region offset %zu: expected %s", len, off,
			    off + len > half ? "inside the half" : "0 or the "
			    "end of the last");
			__atomic_fetch_add(&paths->bad, 1, __ATOMIC_SEQ_CST);
		}
		end = (off + len + GP_SHM_ALIGN - 1) / GP_SHM_ALIGN *
		    GP_SHM_ALIGN;
		__atomic_fetch_add(&paths->region, 1, __ATOMIC_SEQ_CST);
	} else {
		if (len >= GP_SHM_MIN && end + len <= half) {
			snprintf(paths->why, sizeof(paths->why), "%zu bytes "
			    "by pipe that fit the region at %zu", len, end);
			__atomic_fetch_add(&paths->bad, 1, __ATOMIC_SEQ_CST);
		}
		__atomic_fetch_add(&paths->pipe, 1, __ATOMIC_SEQ_CST);
	}
	return reply_flipped(ctx, in, len);
}

/* The same sizes, 600 items so that batches of two come whatever the
 * item times measured on a loaded machine (batches start at one item). */
START_TEST(items_past_the_region_are_seen_in_the_pipe)
{
	struct gp_pool_opts o = { .fake_gpus = 1, .max_msg = 64 << 10 };
	struct gp_pool	*p;
	struct gp_item	*it;
	size_t		 len[600], i;

	paths = mmap(NULL, sizeof(*paths), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(paths, MAP_FAILED);
	memset(paths, 0, sizeof(*paths));
	for (i = 0; i < 600; i++)
		len[i] = i % 2 ? 49090 : 16385;
	p = make_pool(&o);
	it = items_make(len, 600);
	ck_assert_int_eq(gp_pool_map(p, echo_noting_path, NULL, 0, it, 600), 0);
	assert_flipped(it, 600, -1, "paths");
	items_free(it, 600, 0);
	gp_pool_destroy(p);
	ck_assert_msg(paths->bad == 0, "%u items misplaced: %s", paths->bad,
	    paths->why);
	ck_assert_uint_eq(paths->region + paths->pipe, 600);
	ck_assert_msg(paths->region > 0 && paths->pipe > 0, "%u items came "
	    "through the region, %u through the pipe: both must", paths->region,
	    paths->pipe);
	munmap(paths, sizeof(*paths));
}
END_TEST

/* Workers recycled every 3 items (max_tasks): each replacement carries
 * big items and results in the region its slot had. */
START_TEST(recycled_workers_carry_big_items)
{
	struct gp_pool_opts o = { .fake_gpus = 2, .max_tasks = 3 };
	size_t		 len[30], i;

	for (i = 0; i < 30; i++)
		len[i] = i % 3 == 0 ? MiB : i % 3 == 1 ? 100 << 10 : 10;
	echo_all(&o, len, 30, "recycled");
}
END_TEST

/*
 * Worker killed mid-write of a big result. The item of CRASH_IN bytes
 * replies CRASH_OUT bytes of pattern CRASH_SEED; on its first attempt
 * only (crash_count, shared with the workers), from a buffer whose
 * second half is PROT_NONE, so the copy into the region dies by SIGSEGV
 * half way. Every other item echoes its input flipped.
 */
#define CRASH_IN	24
#define CRASH_OUT	(2 * MiB)
#define CRASH_SEED	7777

static unsigned	*crash_count;

static int
crash_once(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	uint8_t	*b;
	int	 rc;

	if (len != CRASH_IN)
		return reply_flipped(ctx, in, len);
	b = mmap(NULL, CRASH_OUT, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b == MAP_FAILED)
		return 94;
	pat_fill(b, CRASH_OUT, CRASH_SEED, 0);
	if (__atomic_fetch_add(crash_count, 1, __ATOMIC_SEQ_CST) == 0 &&
	    mprotect(b + CRASH_OUT / 2, CRASH_OUT / 2, PROT_NONE) != 0)
		return 95;
	rc = gp_ctx_reply(ctx, b, CRASH_OUT);
	(void)munmap(b, CRASH_OUT);
	return rc;
}

/* 40 items: 100 KiB, 64 B and 20 KiB in turn, item 10 the crashing one,
 * so that it shares batches with big and small items. */
#define CRASH_N		40
#define CRASH_AT	10

/* A pool of nw workers (*pp), crash_count fresh, and one call over the
 * 40 items, which it returns. */
static struct gp_item *
crash_map(int nw, int retries, struct gp_pool **pp)
{
	const size_t	 kind[] = { 100 << 10, 64, 20 << 10 };
	struct gp_pool_opts o = { .fake_gpus = nw, .retries = retries };
	size_t		 len[CRASH_N], i;
	struct gp_item	*it;

	for (i = 0; i < CRASH_N; i++)
		len[i] = i == CRASH_AT ? CRASH_IN : kind[i % 3];
	crash_count = shared_counter();
	*pp = make_pool(&o);
	it = items_make(len, CRASH_N);
	ck_assert_int_eq(gp_pool_map(*pp, crash_once, NULL, 0, it, CRASH_N),
	    0);
	return it;
}

static void
crash_end(struct gp_pool *p, struct gp_item *it)
{
	items_free(it, CRASH_N, 0);
	gp_pool_destroy(p);
	(void)munmap(crash_count, sizeof(*crash_count));
}

static void
assert_crash_result(const struct gp_item *it)
{
	ck_assert_int_eq(it->status, GP_OK);
	ck_assert_uint_eq(it->outlen, CRASH_OUT);
	ck_assert_uint_eq(pat_diff(it->out, CRASH_OUT, CRASH_SEED, 0),
	    CRASH_OUT);
}

START_TEST(killed_mid_write_then_retried_is_exact)
{
	struct gp_pool	*p;
	struct gp_item	*it = crash_map(2, 1, &p);

	ck_assert_uint_eq(*crash_count, 2);
	assert_crash_result(&it[CRASH_AT]);
	ck_assert_int_eq(it[CRASH_AT].attempts, 2);
	assert_flipped(it, CRASH_N, CRASH_AT, "beside the crash");
	crash_end(p, it);
}
END_TEST

/* Without retries the item ends GP_CRASHED, 128 + SIGSEGV. One worker:
 * the items after it run on its replacement, in the same region, and
 * so does the next call, the crashing item now exact. */
START_TEST(killed_mid_write_is_crashed_and_others_exact)
{
	struct gp_pool	*p;
	struct gp_item	*it = crash_map(1, 0, &p);

	ck_assert_uint_eq(*crash_count, 1);
	ck_assert_int_eq(it[CRASH_AT].status, GP_CRASHED);
	ck_assert_int_eq(it[CRASH_AT].code, 128 + SIGSEGV);
	ck_assert_int_eq(it[CRASH_AT].attempts, 1);
	ck_assert_ptr_null(it[CRASH_AT].out);
	assert_flipped(it, CRASH_N, CRASH_AT, "beside the crash");
	gp_items_release(it, CRASH_N);

	ck_assert_int_eq(gp_pool_map(p, crash_once, NULL, 0, it, CRASH_N), 0);
	assert_crash_result(&it[CRASH_AT]);
	assert_flipped(it, CRASH_N, CRASH_AT, "after the crash");
	crash_end(p, it);
}
END_TEST

/*
 * Timeout and cancel during a big item: every item replies its input
 * flipped; the one of WAIT_IN bytes then writes to the cancel pipe (when
 * there is one), waits for its stop fd (which a timeout or the cancel
 * makes readable) and returns rc, or, deaf, ignores it and is killed
 * after the grace period.
 */
#define WAIT_IN		(MiB + 1)

struct wait_how {
	int		 deaf;
	int		 cancel_fd;	/* -1: none */
	int		 wait_fd;	/* >= 0: the other items reply once it
					   is readable (the cancel written), so
					   that none ends before it however the
					   machine schedules them; -1: at once */
	int		 rc;
};

static int
reply_then_wait(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	const struct wait_how	*how = arg;
	struct pollfd		 pfd = { gp_ctx_stop_fd(ctx), POLLIN, 0 };
	struct pollfd		 wfd = { how->wait_fd, POLLIN, 0 };
	int			 rc;

	if (len != WAIT_IN && how->wait_fd >= 0)
		(void)poll(&wfd, 1, 20000);
	rc = reply_flipped(ctx, in, len);
	if (len != WAIT_IN || rc != 0)
		return rc;
	if (how->cancel_fd >= 0 && write(how->cancel_fd, "x", 1) != 1)
		return 96;
	if (how->deaf)
		pfd.fd = -1;
	return poll(&pfd, 1, 20000) == 1 ? how->rc : 97;
}

#define HANG_N		12
#define HANG_AT		4

START_TEST(timeout_during_a_big_item)
{
	struct gp_pool_opts o = { .fake_gpus = 2, .timeout_ms = 1000 };
	struct gp_pool	*p;
	struct wait_how	 how = { .cancel_fd = -1, .wait_fd = -1, .rc = 7 };
	size_t		 len[HANG_N], i;
	struct gp_item	*it;

	for (how.deaf = 0; how.deaf < 2; how.deaf++) {
		/* Time enough to answer the stop on a loaded machine; the
		 * deaf one is killed sooner. */
		o.grace_ms = how.deaf ? 300 : 10000;
		p = make_pool(&o);
		for (i = 0; i < HANG_N; i++)
			len[i] = i == HANG_AT ? WAIT_IN :
			    i % 2 ? MiB : 20 << 10;
		it = items_make(len, HANG_N);
		ck_assert_int_eq(gp_pool_map(p, reply_then_wait, &how,
		    sizeof(how), it, HANG_N), 0);
		ck_assert_int_eq(it[HANG_AT].status, GP_TIMEDOUT);
		ck_assert_int_eq(it[HANG_AT].code, how.deaf ? -1 : 7);
		assert_flipped(it, HANG_N, HANG_AT, "beside the timeout");
		items_free(it, HANG_N, 0);

		/* The region the timed-out item used carries the next. */
		for (i = 0; i < HANG_N; i++)
			len[i] = MiB + 64 * i;
		it = items_make(len, HANG_N);
		ck_assert_int_eq(gp_pool_map(p, reply_then_wait, &how,
		    sizeof(how), it, HANG_N), 0);
		assert_flipped(it, HANG_N, -1, "after the timeout");
		items_free(it, HANG_N, 0);
		gp_pool_destroy(p);
	}
}
END_TEST

/* Cancel: the item of WAIT_IN bytes, the first of its worker's, writes
 * the cancel pipe and returns 0 once told to stop; the others end only
 * after that write (wait_fd). */
#define CANCEL_N	30
#define CANCEL_AT	0

START_TEST(cancel_during_big_items)
{
	struct gp_pool_opts o = { .fake_gpus = 2, .grace_ms = 10000,
				  .flags = GP_POOL_CANCEL_FD };
	struct gp_pool	*p;
	struct gp_item	*it;
	struct wait_how	 how = { 0 };
	size_t		 len[CANCEL_N], i;
	int		 fds[2], canceled = 0;
	char		 c;

	ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);
	o.cancel_fd = fds[0];
	how.cancel_fd = fds[1];
	how.wait_fd = fds[0];
	p = make_pool(&o);
	for (i = 0; i < CANCEL_N; i++)
		len[i] = i == CANCEL_AT ? WAIT_IN : MiB;
	it = items_make(len, CANCEL_N);
	ck_assert_int_eq(gp_pool_map(p, reply_then_wait, &how, sizeof(how),
	    it, CANCEL_N), 0);
	for (i = 0; i < CANCEL_N; i++) {
		if (it[i].status != GP_CANCELED) {
			ck_assert_msg(flipped_ok(&it[i], i), "item %zu: status "
			    "%d code %d outlen %zu", i, it[i].status,
			    it[i].code, it[i].outlen);
			continue;
		}
		canceled++;
		ck_assert_ptr_null(it[i].out);
		ck_assert_uint_eq(it[i].outlen, 0);
	}
	/* It returned 0 once told to stop: its result is whole. */
	ck_assert_int_eq(it[CANCEL_AT].status, GP_OK);
	ck_assert_int_ge(canceled, CANCEL_N / 2);
	items_free(it, CANCEL_N, 0);

	/* The cancel is read: the next call runs whole, in the regions. */
	ck_assert_int_eq(read(fds[0], &c, 1), 1);
	how.wait_fd = -1;
	for (i = 0; i < 10; i++)
		len[i] = MiB - 64 * i;
	it = items_make(len, 10);
	ck_assert_int_eq(gp_pool_map(p, reply_then_wait, &how, sizeof(how),
	    it, 10), 0);
	assert_flipped(it, 10, -1, "after the cancel");
	items_free(it, 10, 0);
	gp_pool_destroy(p);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

/* What a worker sees of the regions (map_report()). */
struct report {
	int		 n;	/* regions mapped in it */
	int		 in;	/* the item's bytes lie in one */
	uintptr_t	 start;	/* where the (last) one starts */
};

/* Replies a struct report for regions of *arg bytes; an item of 3 bytes
 * kills its worker instead. */
static int
map_report(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	struct report	 r = { 0 };

	if (len == 3)
		_exit(1);
	r.n = regions(*(const size_t *)arg, &r.start, 1, in, &r.in);
	return gp_ctx_reply(ctx, &r, sizeof(r));
}

/* Items: GP_SHM_MIN bytes, one less, none; item 5 kills its worker. */
#define MAPS_N		12
#define MAPS_CRASH	5

static void
assert_reports(const struct gp_item *it, const uintptr_t *st, int crash)
{
	struct report	 r;
	int		 i;

	for (i = 0; i < MAPS_N; i++) {
		if (i == crash) {
			ck_assert_int_eq(it[i].status, GP_CRASHED);
			continue;
		}
		ck_assert_int_eq(it[i].status, GP_OK);
		ck_assert_uint_eq(it[i].outlen, sizeof(r));
		memcpy(&r, it[i].out, sizeof(r));
		/* Its own region only, one the master made. */
		ck_assert_int_eq(r.n, 1);
		ck_assert_msg(r.start == st[0] || r.start == st[1],
		    "item %d: region at %#lx", i, (unsigned long)r.start);
		/* fn reads a big item where the master put it. */
		ck_assert_int_eq(r.in, it[i].inlen >= GP_SHM_MIN);
	}
}

/*
 * Each worker maps its own region only (2 x max_msg rounded up to a
 * page, shared): the other slots' are unmapped after fork. The master
 * holds one per worker, the same ones after a worker's death (its
 * replacement inherits the dead one's), and none after
 * gp_pool_destroy().
 */
START_TEST(one_region_per_worker_and_none_left)
{
	size_t		 pg = (size_t)sysconf(_SC_PAGESIZE), size, len[MAPS_N];
	struct gp_pool_opts o = { .fake_gpus = 2, .max_msg = MiB + 1 };
	struct gp_pool	*p;
	struct gp_item	*it;
	uintptr_t	 st[2], st2[2];
	int		 i;

	size = 2 * ((o.max_msg + pg - 1) / pg * pg);
	ck_assert_int_eq(regions(size, NULL, 0, NULL, NULL), 0);
	p = make_pool(&o);
	ck_assert_int_eq(regions(size, st, 2, NULL, NULL), 2);
	for (i = 0; i < MAPS_N; i++)
		len[i] = i == MAPS_CRASH ? 3 : i % 3 == 0 ? GP_SHM_MIN :
		    i % 3 == 1 ? GP_SHM_MIN - 1 : 0;
	it = items_make(len, MAPS_N);
	ck_assert_int_eq(gp_pool_map(p, map_report, &size, sizeof(size), it,
	    MAPS_N), 0);
	assert_reports(it, st, MAPS_CRASH);
	gp_items_release(it, MAPS_N);
	ck_assert_int_eq(regions(size, st2, 2, NULL, NULL), 2);
	ck_assert_msg((st2[0] == st[0] && st2[1] == st[1]) ||
	    (st2[0] == st[1] && st2[1] == st[0]), "regions moved");

	/* The replacement's region is one of them too. */
	len[MAPS_CRASH] = GP_SHM_MIN;
	items_free(it, MAPS_N, 0);
	it = items_make(len, MAPS_N);
	ck_assert_int_eq(gp_pool_map(p, map_report, &size, sizeof(size), it,
	    MAPS_N), 0);
	assert_reports(it, st, -1);
	items_free(it, MAPS_N, 0);
	gp_pool_destroy(p);
	ck_assert_int_eq(regions(size, NULL, 0, NULL, NULL), 0);
}
END_TEST

/*
 * GP_POOL_OUT_BUFFERS: small and big results land in the caller's
 * buffers, the pointers unchanged and outlen the result's length; a
 * buffer too small ends its item GP_ERROR, -ENOBUFS, outlen the room
 * needed, its bytes untouched; no room and an empty result is GP_OK.
 * The item that crashes mid-write on its first attempt has its retry's
 * result in the same buffer (nothing freed or replaced: ASan and
 * valgrind would see a free of a pointer inside the arena).
 */
START_TEST(results_land_in_the_callers_buffers)
{
	const size_t	 len[] = { 4, MiB, 4, MiB, 0, 20 << 10, GP_SHM_MIN,
			     CRASH_IN };
	const size_t	 room[] = { 12, MiB + 64, 3, MiB - 1, 0, 0,
			     GP_SHM_MIN, CRASH_OUT };
	const int	 fits[] = { 1, 1, 0, 0, 1, 0, 1, 1 };
	struct gp_pool_opts o = { .fake_gpus = 2, .retries = 1,
				  .flags = GP_POOL_OUT_BUFFERS };
	struct gp_pool	*p;
	struct gp_item	*it;
	struct arena	 a;
	size_t		 i;

	crash_count = shared_counter();
	p = make_pool(&o);
	it = items_make(len, 8);
	arena_give(&a, it, room, 8);
	ck_assert_int_eq(gp_pool_map(p, crash_once, NULL, 0, it, 8), 0);
	arena_check(&a, it, 8);
	for (i = 0; i < 7; i++) {
		if (fits[i]) {
			ck_assert_msg(flipped_ok(&it[i], i), "item %zu", i);
			continue;
		}
		ck_assert_int_eq(it[i].status, GP_ERROR);
		ck_assert_int_eq(it[i].code, -ENOBUFS);
		ck_assert_uint_eq(it[i].outlen, len[i]);
	}
	ck_assert_uint_eq(*crash_count, 2);
	ck_assert_int_eq(it[7].attempts, 2);
	assert_crash_result(&it[7]);
	items_free(it, 8, 1);
	free(a.b);
	gp_pool_destroy(p);
	(void)munmap(crash_count, sizeof(*crash_count));
}
END_TEST

/* Room without a buffer: the call refuses, nothing runs, nothing of the
 * caller's changes. */
START_TEST(room_without_a_buffer_is_refused)
{
	const size_t	 len[] = { 4, MiB }, room[] = { 8, 0 };
	struct gp_pool_opts o = { .fake_gpus = 1,
				  .flags = GP_POOL_OUT_BUFFERS };
	struct gp_pool	*p = make_pool(&o);
	struct gp_item	*it = items_make(len, 2);
	struct arena	 a;
	size_t		 i;

	arena_give(&a, it, room, 2);
	it[1].outlen = 5;
	ck_assert_int_eq(gp_pool_map(p, echo_flip, NULL, 0, it, 2), -EINVAL);
	for (i = 0; i < 2; i++) {
		ck_assert_int_eq(it[i].status, GP_NOTRUN);
		ck_assert_int_eq(it[i].attempts, 0);
	}
	ck_assert_uint_eq(it[0].outlen, 8);
	ck_assert_uint_eq(it[1].outlen, 5);
	arena_check(&a, it, 2);
	items_free(it, 2, 1);
	free(a.b);
	gp_pool_destroy(p);
}
END_TEST

/* A feed's items keep out and outlen as the caller set them (the pool
 * resets the rest), and results land there; room without a buffer ends
 * that item GP_ERROR, -EINVAL. */
START_TEST(feed_keeps_the_callers_buffers)
{
	const size_t	 len[] = { 4, MiB, 100, 8 };
	const size_t	 room[] = { 16, MiB, 10, 0 };
	struct gp_pool_opts o = { .fake_gpus = 2,
				  .flags = GP_POOL_OUT_BUFFERS };
	struct gp_pool	*p = make_pool(&o);
	struct gp_item	*it = items_make(len, 4);
	struct test_feed f = { .it = it, .n = 4 };
	struct gp_feed	 feed = { .next = test_feed_next,
				  .done = test_feed_done, .in_fd = -1,
				  .arg = &f, .ctl_fd = -1 };
	struct arena	 a;

	arena_give(&a, it, room, 4);
	it[3].outlen = 8;
	ck_assert_int_eq(gp_pool_run(p, echo_flip, NULL, 0, &feed), 0);
	ck_assert_uint_eq(f.done, 4);
	ck_assert_msg(flipped_ok(&it[0], 0), "small result");
	ck_assert_msg(flipped_ok(&it[1], 1), "big result");
	ck_assert_int_eq(it[2].status, GP_ERROR);
	ck_assert_int_eq(it[2].code, -ENOBUFS);
	ck_assert_uint_eq(it[2].outlen, 100);
	ck_assert_int_eq(it[3].status, GP_ERROR);
	ck_assert_int_eq(it[3].code, -EINVAL);
	arena_check(&a, it, 4);
	items_free(it, 4, 1);
	free(a.b);
	gp_pool_destroy(p);
}
END_TEST

/* GP_POOL_OUT_VIEW: done() reads each result where it lies, big ones in
 * the region and small ones in the master's read buffer, exact; the
 * pool frees nothing of it (items_free() without a release: ASan and
 * valgrind would see a free of the pool's memory). gp_pool_map() on such
 * a pool is refused, and so is a pool with both result flags. */
START_TEST(results_are_lent_to_done_as_views)
{
	const size_t	 len[] = { 4, MiB, 0, 100 << 10, 8, GP_SHM_MIN, 20 };
	struct gp_pool_opts o = { .fake_gpus = 2, .flags = GP_POOL_OUT_VIEW };
	struct gp_pool	*p = make_pool(&o), *q;
	struct gp_item	*it = items_make(len, 7);
	struct view_feed f = { .f = { .it = it, .n = 7 } };
	struct gp_feed	 feed = { .next = test_feed_next, .done = view_done,
				  .in_fd = -1, .arg = &f, .ctl_fd = -1 };

	ck_assert_int_eq(gp_pool_run(p, echo_flip, NULL, 0, &feed), 0);
	ck_assert_uint_eq(f.f.done, 7);
	ck_assert_uint_eq(f.viewed, 7);
	ck_assert_int_eq(gp_pool_map(p, echo_flip, NULL, 0, it, 7), -EINVAL);
	ck_assert_int_eq(it[1].status, GP_OK);
	items_free(it, 7, 1);
	gp_pool_destroy(p);
	o.flags = GP_POOL_OUT_VIEW | GP_POOL_OUT_BUFFERS;
	ck_assert_int_eq(gp_pool_create(&q, &o), -EINVAL);
	ck_assert_ptr_null(q);
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("data");
	TCase	*tc = tcase_create("data");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, round_trip_at_the_edges);
	tcase_add_test(tc, batch_past_the_region_goes_through_the_pipe);
	tcase_add_test(tc, items_past_the_region_are_seen_in_the_pipe);
	tcase_add_test(tc, recycled_workers_carry_big_items);
	tcase_add_test(tc, killed_mid_write_then_retried_is_exact);
	tcase_add_test(tc, killed_mid_write_is_crashed_and_others_exact);
	tcase_add_test(tc, timeout_during_a_big_item);
	tcase_add_test(tc, cancel_during_big_items);
	tcase_add_test(tc, one_region_per_worker_and_none_left);
	tcase_add_test(tc, results_land_in_the_callers_buffers);
	tcase_add_test(tc, room_without_a_buffer_is_refused);
	tcase_add_test(tc, feed_keeps_the_callers_buffers);
	tcase_add_test(tc, results_are_lent_to_done_as_views);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
