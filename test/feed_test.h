/*
 * feed_test.h: the gp_pool_run() feed the tests share (check_pool.c,
 * check_feed.c, check_data.c, check_job.c ...): items it[0..n) in
 * order, done() counting what ended. Optional: once, next() says "not
 * yet" (GP_FEED_AGAIN) before item again_at (again set), and done()
 * asks to stop (returns 1) for item stop_at.
 */
#ifndef GP_FEED_TEST_H
#define GP_FEED_TEST_H

#include <stddef.h>

#include "gpupool.h"

struct test_feed {
	struct gp_item	*it;
	size_t		 n, next, done;
	int		 again;		/* next() says "not yet" once ... */
	size_t		 again_at;	/* ... before this item */
	struct gp_item	*stop_at;	/* done() on it asks to stop */
};

static inline int
test_feed_next(void *arg, struct gp_item **item)
{
	struct test_feed	*f = arg;

	if (f->again && f->next == f->again_at) {
		f->again = 0;
		return GP_FEED_AGAIN;
	}
	if (f->next >= f->n)
		return GP_FEED_END;
	*item = &f->it[f->next++];
	return GP_FEED_ITEM;
}

static inline int
test_feed_done(void *arg, struct gp_item *item)
{
	struct test_feed	*f = arg;

	f->done++;
	return f->stop_at != NULL && item == f->stop_at;
}

#endif /* GP_FEED_TEST_H */
