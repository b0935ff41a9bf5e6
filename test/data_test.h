/*
 * data_test.h: what the data plane's tests share (check_data.c,
 * check_pieces.c): items of a pattern that depends on their index, the
 * fns that reply them flipped (echo_flip(), grow_or_flip()) and the
 * checks that every byte came back, pools made as the tests need, the
 * regions mapped in this process, the caller's buffers in one arena,
 * and a feed whose done() reads lent results.
 */
#ifndef GP_DATA_TEST_H
#define GP_DATA_TEST_H

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "gpupool.h"
#include "msg.h"	/* GP_SHM_MIN */
#include "feed_test.h"

#define MiB		((size_t)1 << 20)
#define FLIP		0xa5c3a5c3a5c3a5c3ull	/* fn's transformation */

/* Word k of seed's pattern: no period a misplaced copy could hide in. */
static inline uint64_t
pat_word(uint64_t seed, size_t k)
{
	uint64_t	 x;

	x = (seed + 1) * 0x9e3779b97f4a7c15ull + k * 0xd1b54a32d192ed03ull;
	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	return x ^ (x >> 32);
}

/* len bytes of seed's pattern at b, each word xor'd with x. */
static inline void
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
static inline size_t
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
static inline int
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
static inline struct gp_item *
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
static inline void
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
static inline int
flipped_ok(const struct gp_item *it, size_t i)
{
	return it->status == GP_OK && it->outlen == it->inlen &&
	    (it->outlen == 0 || it->out != NULL) &&
	    pat_diff(it->out, it->outlen, i, FLIP) == it->outlen;
}

/* Each of items[0..n-1] but skip (or all, skip < 0) ended GP_OK with its
 * input flipped: one assertion for the lot, naming the first that did
 * not, as Check writes a record per assertion. */
static inline void
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
static inline int
under_valgrind(void)
{
	const char	*pre = getenv("LD_PRELOAD");

	return pre != NULL && strstr(pre, "vgpreload") != NULL;
}

/* The window of a pool with its default: 64 MiB, or, under valgrind
 * (50 times slower, and twice the memory), 1 MiB, which a pool of the
 * tests past the window gets (make_pool_as_is()); their sizes scale
 * with it, so the same paths run there in seconds. */
static inline size_t
win(void)
{
	return under_valgrind() ? MiB : 64 * MiB;
}

/* A pool made with o as given: max_msg 0 stays the library's default
 * (and so does the window then, but under valgrind). */
static inline struct gp_pool *
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

/* A counter the workers share with the test (made before the pool). */
static inline unsigned *
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
static inline int
echo_flip(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	if (len >= GP_SHM_MIN && gp_ctx_reply(ctx, in, len) != 0)
		return 91;
	return reply_flipped(ctx, in, len);
}

/* n lengths: each of sz[j] cnt[j] times, shuffled with a fixed seed. */
static inline size_t *
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
static inline int
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

/*
 * The shared, writable mappings of exactly size bytes in this process
 * (/proc/self/maps): how many, the start of each (the first max in
 * start), and whether p lies in one (*in).
 */
static inline int
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
static inline void
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
static inline void
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

/* grow_or_flip(): an item of a length that is a multiple of 7, up to
 * SMALL_WIN, asks for GROW copies of itself flipped (a result past a
 * small window from an item under it); grown_ok() checks it. */
#define SMALL_WIN	(64u << 10)
#define GROW		37

static inline int
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
static inline int
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

/* A test_feed whose done() also counts the results that were exact
 * (view_done()): the feed first, test_feed_next() reads it. */
struct view_feed {
	struct test_feed f;
	size_t		 viewed;	/* results exact in done() */
};

/* GP_POOL_OUT_VIEW: the result is read in done(), where it is lent
 * (grown_ok(): flipped_ok() but for grow_or_flip()'s grown results). */
static inline int
view_done(void *arg, struct gp_item *item)
{
	struct view_feed	*f = arg;

	f->f.done++;
	f->viewed += grown_ok(item, (size_t)(item - f->f.it));
	return 0;
}

#endif /* GP_DATA_TEST_H */
