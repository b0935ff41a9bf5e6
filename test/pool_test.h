/*
 * pool_test.h: what the programs testing the pool on fake GPUs share
 * (check_pool.c, check_feed.c, check_alloc.c, check_place.c,
 * check_threads.c): a pool made with an error buffer, the fns twice() and
 * echo_rev(), every item size echoed, a feed that ends at once (int items:
 * proc_test.h).
 */
#ifndef GP_POOL_TEST_H
#define GP_POOL_TEST_H

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpupool.h"
#include "proc_test.h"	/* int_items() */

/* The window make_pool() gives its pools (0: the default). */
static uint64_t	 make_window;

static inline struct gp_pool *
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

static inline int
twice(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int	 x;

	if (len != sizeof(x))
		return 99;
	memcpy(&x, in, sizeof(x));
	x = arg ? x * *(int *)arg : x * 2;
	return gp_ctx_reply(ctx, &x, sizeof(x));
}

/* Echo the input, reversed, so a copy that ignores the data fails. */
static inline int
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
static inline void
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

static inline int
count_next(void *arg, struct gp_item **item)
{
	(*(int *)arg)++;
	return GP_FEED_END;
}

#endif /* GP_POOL_TEST_H */
