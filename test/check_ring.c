/*
 * check_ring.c: the extents of a rank's rings (src/cli/ranks/ring.c),
 * built from its source (it calls nothing else): first fit from offset
 * 0, 64-byte aligned, never two taken extents over one byte, freed
 * neighbours one gap again, an extent never freed keeping only its own
 * bytes.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>

#include "ranks/ranks.h"
#include "check_main.h"

START_TEST(first_fit_aligned)
{
	struct ring	 r;

	ring_init(&r, 1000);	/* rounded down to 960 */
	ck_assert_uint_eq(r.size, 960);
	ck_assert_int_eq(ring_alloc(&r, 0), -1);
	ck_assert_int_eq(ring_alloc(&r, 961), -1);
	ck_assert_int_eq(ring_alloc(&r, 1), 0);
	ck_assert_int_eq(ring_alloc(&r, 64), 64);
	ck_assert_int_eq(ring_alloc(&r, 65), 128);
	ck_assert_uint_eq(r.used, 64 + 64 + 128);
	/* The lowest gap that fits: 0's, once freed, for 64 bytes only. */
	ck_assert_int_eq(ring_free(&r, 0), 0);
	ck_assert_int_eq(ring_alloc(&r, 100), 256);
	ck_assert_int_eq(ring_alloc(&r, 64), 0);
	ck_assert_int_eq(ring_free(&r, 0), 0);
	ck_assert_int_eq(ring_free(&r, 0), -ENOENT);
	ck_assert_int_eq(ring_free(&r, 65), -ENOENT);
	ck_assert_int_eq(ring_free(&r, 64), 0);
	ck_assert_int_eq(ring_free(&r, 128), 0);
	ck_assert_int_eq(ring_free(&r, 256), 0);
	ck_assert_uint_eq(r.used, 0);
	ck_assert_uint_eq(r.n, 0);
	/* The whole ring, then nothing more. */
	ck_assert_int_eq(ring_alloc(&r, 960), 0);
	ck_assert_int_eq(ring_alloc(&r, 1), -1);
	ring_release(&r);
}
END_TEST

START_TEST(freed_neighbours_coalesce)
{
	struct ring	 r;
	int		 i;

	ring_init(&r, 64 * 8);
	for (i = 0; i < 8; i++)
		ck_assert_int_eq(ring_alloc(&r, 64), 64 * i);
	ck_assert_int_eq(ring_alloc(&r, 64), -1);
	/* 2, 3 and 4 freed in another order: one gap of 192 bytes. */
	ck_assert_int_eq(ring_free(&r, 64 * 3), 0);
	ck_assert_int_eq(ring_free(&r, 64 * 2), 0);
	ck_assert_int_eq(ring_alloc(&r, 192), -1);
	ck_assert_int_eq(ring_free(&r, 64 * 4), 0);
	ck_assert_int_eq(ring_alloc(&r, 193), -1);
	ck_assert_int_eq(ring_alloc(&r, 192), 64 * 2);
	ck_assert_uint_eq(r.used, 64 * 8);
	ring_release(&r);
}
END_TEST

START_TEST(a_pinned_extent_keeps_its_own_bytes)
{
	struct ring	 r;
	int64_t		 pinned;
	int		 i;

	/* An extent never freed (a send to a lost peer) in the middle: the
	 * rest, below and above it, serves on. */
	ring_init(&r, 4096);
	ck_assert_int_eq(ring_alloc(&r, 1024), 0);
	pinned = ring_alloc(&r, 512);
	ck_assert_int_eq(pinned, 1024);
	ck_assert_int_eq(ring_free(&r, 0), 0);
	for (i = 0; i < 100; i++) {
		ck_assert_int_eq(ring_alloc(&r, 1024), 0);
		ck_assert_int_eq(ring_alloc(&r, 2560), 1536);
		ck_assert_int_eq(ring_free(&r, 0), 0);
		ck_assert_int_eq(ring_free(&r, 1536), 0);
	}
	ck_assert_uint_eq(r.used, 512);
	ck_assert_int_eq(ring_alloc(&r, 3585), -1);
	ring_release(&r);
}
END_TEST

/* Random allocations and frees against a byte map: no byte is ever in
 * two taken extents, and used counts what is taken. */
START_TEST(never_two_extents_over_one_byte)
{
	enum { SIZE = 64 * 256, MAXN = 256 };
	static unsigned char owner[SIZE / 64];
	struct ring	 r;
	int64_t		 off[MAXN], o;
	size_t		 len[MAXN], used = 0, k, j;
	int		 n = 0, i, step;

	srand(38);
	ring_init(&r, SIZE);
	for (step = 0; step < 20000; step++) {
		if (n > 0 && (rand() % 3 == 0 || n == MAXN)) {
			i = rand() % n;
			ck_assert_int_eq(ring_free(&r, (uint64_t)off[i]), 0);
			for (j = 0; j < len[i] / 64; j++)
				owner[off[i] / 64 + j] = 0;
			used -= len[i];
			off[i] = off[n - 1];
			len[i] = len[n - 1];
			n--;
			continue;
		}
		k = 1 + (size_t)(rand() % (64 * 20));
		if ((o = ring_alloc(&r, k)) < 0)
			continue;
		ck_assert_int_eq(o % 64, 0);
		k = (k + 63) / 64 * 64;
		ck_assert_uint_le((size_t)o + k, SIZE);
		for (j = 0; j < k / 64; j++) {
			ck_assert_int_eq(owner[o / 64 + j], 0);
			owner[o / 64 + j] = 1;
		}
		off[n] = o;
		len[n++] = k;
		used += k;
		ck_assert_uint_eq(r.used, used);
	}
	ring_release(&r);
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("ring");
	TCase	*tc = tcase_create("ring");

	tcase_add_test(tc, first_fit_aligned);
	tcase_add_test(tc, freed_neighbours_coalesce);
	tcase_add_test(tc, a_pinned_extent_keeps_its_own_bytes);
	tcase_add_test(tc, never_two_extents_over_one_byte);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
