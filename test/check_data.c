/*
 * check_data.c: the data plane (data.c) as a user sees it. Items and
 * results of GP_SHM_MIN bytes or more travel through each worker's region
 * of shared memory, the rest through the pipes, and results may land in
 * the caller's own buffers (GP_POOL_OUT_BUFFERS). Every result is checked
 * byte for byte against a pattern that depends on its item, transformed
 * by fn, so that a stale, misplaced or torn result fails. Then the
 * faults: a worker killed half way through writing a big result, a
 * timeout during a big item, a cancel, each followed by big items on the
 * same pool; and the regions' mappings, in the master and in a worker.
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
#include "feed_test.h"

#define MiB		((size_t)1 << 20)
#define MAX_MSG		(4 * MiB)	/* the pools' max_msg, unless said */
#define FLIP		0xa5c3a5c3a5c3a5c3ull	/* fn's transformation */

/* Word k of seed's pattern: no period a misplaced copy could hide in. */
static uint64_t
pat_word(uint64_t seed, size_t k)
{
	uint64_t	 x;

	x = (seed + 1) * 0x9e3779b97f4a7c15ull + k * 0xd1b54a32d192ed03ull;
	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	return x ^ (x >> 32);
}

/* len bytes of seed's pattern at b, each word xor'd with x. */
static void
pat_fill(uint8_t *b, size_t len, uint64_t seed, uint64_t x)
{
	uint64_t	 w;
	size_t		 k;

	for (k = 0; k + 8 <= len; k += 8) {
		w = pat_word(seed, k / 8) ^ x;
		memcpy(b + k, &w, 8);
	}
	if (k < len) {
		w = pat_word(seed, k / 8) ^ x;
		memcpy(b + k, &w, len - k);
	}
}

/* The first of len bytes at b that differs from seed's pattern xor'd
 * with x; len when none does. */
static size_t
pat_diff(const uint8_t *b, size_t len, uint64_t seed, uint64_t x)
{
	uint64_t	 w;
	size_t		 k, n, j;

	for (k = 0; k < len; k += 8) {
		w = pat_word(seed, k / 8) ^ x;
		n = len - k < 8 ? len - k : 8;
		if (n == 8 ? memcmp(b + k, &w, 8) == 0 :
		    memcmp(b + k, &w, n) == 0)
			continue;
		for (j = 0; j < n && b[k + j] == ((uint8_t *)&w)[j]; j++)
			;
		return k + j;
	}
	return len;
}

/* In a worker: reply the item's bytes, every word xor'd with FLIP. */
static int
reply_flipped(struct gp_ctx *ctx, const void *in, size_t len)
{
	uint8_t		*b = malloc(len ? len : 1);
	uint64_t	 w;
	size_t		 k;
	int		 rc;

	if (b == NULL)
		return 90;
	for (k = 0; k + 8 <= len; k += 8) {
		memcpy(&w, (const uint8_t *)in + k, 8);
		w ^= FLIP;
		memcpy(b + k, &w, 8);
	}
	if (k < len) {
		w = 0;
		memcpy(&w, (const uint8_t *)in + k, len - k);
		w ^= FLIP;
		memcpy(b + k, &w, len - k);
	}
	rc = gp_ctx_reply(ctx, b, len);
	free(b);
	return rc;
}

/* n items, item i of len[i] bytes of pattern i (in NULL when empty),
 * no result yet. Free with items_free(). */
static struct gp_item *
items_make(const size_t *len, size_t n)
{
	struct gp_item	*it = calloc(n, sizeof(*it));
	uint8_t		*b;
	size_t		 i;

	ck_assert_ptr_nonnull(it);
	for (i = 0; i < n; i++) {
		b = NULL;
		if (len[i] > 0) {
			ck_assert_ptr_nonnull(b = malloc(len[i]));
			pat_fill(b, len[i], i, 0);
		}
		gp_item_init(&it[i], b, len[i]);
	}
	return it;
}

/* Inputs, results (unless they are the caller's buffers) and the array. */
static void
items_free(struct gp_item *it, size_t n, int outbufs)
{
	size_t	 i;

	for (i = 0; i < n; i++)
		free((void *)it[i].in);
	if (!outbufs)
		gp_items_release(it, n);
	free(it);
}

/* Whether item i ended GP_OK with its input flipped, byte for byte. */
static int
flipped_ok(const struct gp_item *it, size_t i)
{
	return it->status == GP_OK && it->outlen == it->inlen &&
	    (it->outlen == 0 || it->out != NULL) &&
	    pat_diff(it->out, it->outlen, i, FLIP) == it->outlen;
}

/* Each of items[0..n-1] but skip (or all, skip < 0) ended GP_OK with its
 * input flipped: one assertion for the lot, naming the first that did
 * not, as Check writes a record per assertion. */
static void
assert_flipped(const struct gp_item *it, size_t n, long skip,
    const char *what)
{
	size_t	 i;

	for (i = 0; i < n; i++)
		if ((long)i != skip && !flipped_ok(&it[i], i))
			break;
	ck_assert_msg(i == n, "%s: item %zu of %zu bytes: status %d code %d "
	    "outlen %zu, first wrong byte %zu, attempts %d", what, i,
	    i < n ? it[i].inlen : 0, i < n ? it[i].status : 0,
	    i < n ? it[i].code : 0, i < n ? it[i].outlen : 0,
	    i < n && it[i].out ? pat_diff(it[i].out, it[i].outlen, i, FLIP) :
	    0, i < n ? it[i].attempts : 0);
}

/* Under valgrind (its preload in the environment) a GiB is minutes of
 * shadow memory, and fn runs some 50 times slower. */
static int
under_valgrind(void)
{
	const char	*pre = getenv("LD_PRELOAD");

	return pre != NULL && strstr(pre, "vgpreload") != NULL;
}

/* The window of a pool with its default: 64 MiB, or, under valgrind
 * (50 times slower, and twice the memory), 1 MiB, which a pool of the
 * tests past the window gets (make_pool_as_is()); their sizes scale
 * with it, so the same paths run there in seconds. */
static size_t
win(void)
{
	return under_valgrind() ? MiB : 64 * MiB;
}

/* A pool made with o as given: max_msg 0 stays the library's default
 * (and so does the window then, but under valgrind). */
static struct gp_pool *
make_pool_as_is(struct gp_pool_opts *o)
{
	struct gp_pool	*p;
	char		 err[256];

	if (o->window == 0 && o->max_msg == 0 && under_valgrind())
		o->window = win();
	o->errbuf = err;
	o->errlen = sizeof(err);
	ck_assert_msg(gp_pool_create(&p, o) == 0, "create: %s", err);
	o->errbuf = NULL;
	return p;
}

static struct gp_pool *
make_pool(struct gp_pool_opts *o)
{
	if (o->max_msg == 0)
		o->max_msg = MAX_MSG;
	return make_pool_as_is(o);
}

/* A counter the workers share with the test (made before the pool). */
static unsigned *
shared_counter(void)
{
	unsigned	*c;

	c = mmap(NULL, sizeof(*c), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(c, MAP_FAILED);
	*c = 0;
	return c;
}

/* The last call wins: a big decoy (the input unflipped) is replied
 * first, through the region when it is big, then the real result. */
static int
echo_flip(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	if (len >= GP_SHM_MIN && gp_ctx_reply(ctx, in, len) != 0)
		return 91;
	return reply_flipped(ctx, in, len);
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

/* n lengths: each of sz[j] cnt[j] times, shuffled with a fixed seed. */
static size_t *
mixed_lengths(const size_t *sz, const int *cnt, size_t nsz, size_t n)
{
	size_t		*len = malloc(n * sizeof(*len)), i = 0, j, k, t;
	unsigned	 seed = 15;
	int		 c;

	ck_assert_ptr_nonnull(len);
	for (j = 0; j < nsz; j++)
		for (c = 0; c < cnt[j]; c++)
			len[i++] = sz[j];
	ck_assert_uint_eq(i, n);
	for (i = n - 1; i > 0; i--) {
		k = (size_t)rand_r(&seed) % (i + 1);
		t = len[i];
		len[i] = len[k];
		len[k] = t;
	}
	return len;
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

/* This process's mappings, as /proc/self/maps last said (spans_read()):
 * shared_at() reads it again only for an address in none of them (a new
 * mapping), since reading it for every item makes an item slower than
 * batches of two allow under valgrind (the batch size follows measured
 * item times). */
static struct span {
	uintptr_t	 lo, hi;
	char		 perm[8];
}			 spans[4096];
static size_t		 nspans;

/* 0, or -1 when the file cannot be read or has more lines than spans. */
static int
spans_read(void)
{
	FILE		*f = fopen("/proc/self/maps", "re");
	unsigned long	 lo, hi;
	char		 perm[8], line[4096];
	int		 rc = 0;

	nspans = 0;
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perm) != 3)
			continue;
		if (nspans == sizeof(spans) / sizeof(spans[0])) {
			rc = -1;
			break;
		}
		spans[nspans].lo = lo;
		spans[nspans].hi = hi;
		memcpy(spans[nspans++].perm, perm, sizeof(perm));
	}
	fclose(f);
	return rc;
}

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
	int		 rc;
};

static int
reply_then_wait(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	const struct wait_how	*how = arg;
	struct pollfd		 pfd = { gp_ctx_stop_fd(ctx), POLLIN, 0 };
	int			 rc;

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
	struct wait_how	 how = { .cancel_fd = -1, .rc = 7 };
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

/* Cancel: the item of WAIT_IN bytes writes the cancel pipe and returns
 * 0 once told to stop. */
#define CANCEL_N	30
#define CANCEL_AT	3

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

/*
 * The shared, writable mappings of exactly size bytes in this process
 * (/proc/self/maps): how many, the start of each (the first max in
 * start), and whether p lies in one (*in).
 */
static int
regions(size_t size, uintptr_t *start, int max, const void *p, int *in)
{
	size_t		 i;
	int		 n = 0;

	if (spans_read() != 0)
		return -1;
	if (in != NULL)
		*in = 0;
	for (i = 0; i < nspans; i++) {
		if (strcmp(spans[i].perm, "rw-s") != 0 ||
		    spans[i].hi - spans[i].lo != size)
			continue;
		if (n < max)
			start[n] = spans[i].lo;
		n++;
		if (in != NULL && (uintptr_t)p >= spans[i].lo &&
		    (uintptr_t)p < spans[i].hi)
			*in = 1;
	}
	return n;
}

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

/* Caller's buffers: one arena, each item's room at its offset in it, the
 * rest of the arena a sentinel no result may touch. */
#define SENTINEL	0xee

struct arena {
	uint8_t		*b;
	size_t		 len;
	size_t		 off[128];
	size_t		 room[128];
};

/* Give items[0..n-1] room[i] bytes each (room 0: out NULL, outlen 0). */
static void
arena_give(struct arena *a, struct gp_item *it, const size_t *room, size_t n)
{
	size_t	 i;

	a->len = 0;
	for (i = 0; i < n; i++) {
		a->off[i] = a->len;
		a->room[i] = room[i];
		a->len += room[i];
	}
	ck_assert_ptr_nonnull(a->b = malloc(a->len ? a->len : 1));
	memset(a->b, SENTINEL, a->len);
	for (i = 0; i < n; i++) {
		it[i].out = room[i] ? a->b + a->off[i] : NULL;
		it[i].outlen = room[i];
	}
}

/* Item i's out is still its room in the arena, and none of the arena's
 * bytes past an item's result (all of them unless GP_OK) changed. */
static void
arena_check(const struct arena *a, const struct gp_item *it, size_t n)
{
	size_t	 i, k, from;

	for (i = 0; i < n; i++) {
		ck_assert_ptr_eq(it[i].out,
		    a->room[i] ? a->b + a->off[i] : NULL);
		from = it[i].status == GP_OK ? it[i].outlen : 0;
		for (k = from; k < a->room[i]; k++)
			if (a->b[a->off[i] + k] != SENTINEL)
				break;
		ck_assert_msg(k >= a->room[i], "item %zu: byte %zu of its "
		    "room was written", i, k);
	}
}

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

/* A test_feed whose done() also counts the results that were exact
 * (view_done()): the feed first, test_feed_next() reads it. */
struct view_feed {
	struct test_feed f;
	size_t		 viewed;	/* results exact in done() */
};

static int	grown_ok(const struct gp_item *, size_t);

/* GP_POOL_OUT_VIEW: the result is read in done(), where it is lent
 * (grown_ok(): flipped_ok() but for grow_or_flip()'s grown results). */
static int
view_done(void *arg, struct gp_item *item)
{
	struct view_feed	*f = arg;

	f->f.done++;
	f->viewed += grown_ok(item, (size_t)(item - f->f.it));
	return 0;
}

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
#define SMALL_WIN	(64u << 10)
#define GROW		37

static int
grow_or_flip(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	uint8_t	*b;
	size_t	 k;
	int	 rc;

	if (len == 0 || len % 7 != 0 || len > SMALL_WIN)
		return echo_flip(ctx, in, len, arg);
	if ((b = malloc(len * GROW)) == NULL)
		return 90;
	for (k = 0; k < len; k++)
		b[k] = ((const uint8_t *)in)[k] ^ (uint8_t)FLIP;
	for (k = 1; k < GROW; k++)
		memcpy(b + k * len, b, len);
	rc = gp_ctx_reply(ctx, b, len * GROW);
	free(b);
	return rc;
}

/* Item i's result is what grow_or_flip() makes of it. */
static int
grown_ok(const struct gp_item *it, size_t i)
{
	const uint8_t	*in = it->in, *out = it->out;
	size_t		 k, len = it->inlen;

	if (len == 0 || len % 7 != 0 || len > SMALL_WIN)
		return flipped_ok(it, i);
	if (it->status != GP_OK || it->outlen != len * GROW)
		return 0;
	for (k = 0; k < len * GROW; k++)
		if (out[k] != (in[k % len] ^ (uint8_t)FLIP))
			return 0;
	return 1;
}

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
