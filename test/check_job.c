/*
 * check_job.c: a call's item bookkeeping (src/job.c) with no pool and no
 * fork: jobs, items and a worker's batch are built by hand the way
 * loop.c builds them, and driven through the same calls: which item
 * starts next, what a result, a crash, a timeout, a lost worker or a
 * cancel does to an item, how big a batch is, and when the call is over.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "check_main.h"
#include "feed_test.h"

#define N	8

static struct gp_item	 items[N];

/* A gp_pool_map() job over items[0..n), as gp_pool_map() sets it up. */
static void
map_job(struct gp_job *job, size_t n)
{
	size_t	 i;

	memset(job, 0, sizeof(*job));
	for (i = 0; i < n; i++) {
		memset(&items[i], 0x5a, sizeof(items[i]));
		items[i].in = &items[i];
		items[i].inlen = 1;
		gp_job_item_init(&items[i], 0);
	}
	job->items = items;
	job->n = n;
}

/* gp_job_result() of record r, its r->len bytes at data (copied). */
static int
result(struct gp_job *job, struct gp_item *it, const struct gp_rec_result *r,
    const char *data, int timed_out, int retries)
{
	struct gp_res	 res = { (const uint8_t *)data, r->len, NULL };

	return gp_job_result(job, it, r, &res, timed_out, retries);
}

/* What dispatch_one() does to the item it sends. */
static struct gp_item *
start(struct gp_job *job)
{
	struct gp_item	*it = gp_job_peek(job);

	ck_assert_ptr_nonnull(it);
	gp_job_take(job);
	it->attempts++;
	return it;
}

static void
done_ok(struct gp_job *job, struct gp_item *it)
{
	struct gp_rec_result	 r = { .kind = GP_REC_DONE };

	ck_assert_int_eq(result(job, it, &r, NULL, 0, 0), 0);
}

START_TEST(item_init_resets_the_result)
{
	struct gp_item	 it;

	memset(&it, 0x5a, sizeof(it));
	gp_job_item_init(&it, 0);
	ck_assert_ptr_null(it.out);
	ck_assert_uint_eq(it.outlen, 0);
	ck_assert_int_eq(it.status, GP_NOTRUN);
	ck_assert_int_eq(it.code, 0);
	ck_assert_int_eq(it.worker, -1);
	ck_assert_int_eq(it.attempts, 0);
}
END_TEST

START_TEST(items_start_in_order)
{
	struct gp_job	 job;
	size_t		 i;

	map_job(&job, 4);
	for (i = 0; i < 4; i++) {
		ck_assert_ptr_eq(gp_job_peek(&job), &items[i]);
		/* peek does not take */
		ck_assert_ptr_eq(gp_job_peek(&job), &items[i]);
		ck_assert_ptr_eq(start(&job), &items[i]);
		ck_assert_uint_eq(job.running, i + 1);
	}
	ck_assert_ptr_null(gp_job_peek(&job));
	ck_assert_int_eq(gp_job_done(&job), 0);
}
END_TEST

START_TEST(a_retried_item_runs_before_new_ones)
{
	struct gp_job	 job;
	struct gp_item	*a, *b;

	map_job(&job, 4);
	a = start(&job);
	b = start(&job);
	ck_assert_int_eq(gp_job_end_bad(&job, a, GP_CRASHED, 139, 5), 0);
	ck_assert_int_eq(a->status, GP_NOTRUN);
	ck_assert_uint_eq(job.running, 1);
	ck_assert_int_eq(gp_job_end_bad(&job, b, GP_TIMEDOUT, -1, 5), 0);
	/* The last requeued first, then items[2]. */
	ck_assert_ptr_eq(start(&job), b);
	ck_assert_ptr_eq(start(&job), a);
	ck_assert_ptr_eq(start(&job), &items[2]);
	ck_assert_int_eq(a->attempts, 2);
	ck_assert_int_eq(items[2].attempts, 1);
	free(job.requeue);
}
END_TEST

/* Crash until the retries run out: one first attempt, then retries more. */
START_TEST(crash_retries_stop_at_the_limit)
{
	struct gp_job	 job;
	struct gp_item	*it;
	int		 k;

	map_job(&job, 1);
	for (k = 1; k <= 3; k++) {
		it = start(&job);
		ck_assert_ptr_eq(it, &items[0]);
		ck_assert_int_eq(it->attempts, k);
		ck_assert_int_eq(gp_job_end_bad(&job, it, GP_CRASHED, 128 + 9,
		    2), 0);
		ck_assert_int_eq(gp_job_done(&job), k == 3);
	}
	ck_assert_int_eq(items[0].status, GP_CRASHED);
	ck_assert_int_eq(items[0].code, 137);
	ck_assert_int_eq(items[0].attempts, 3);
	ck_assert_ptr_null(gp_job_peek(&job));
	free(job.requeue);
}
END_TEST

START_TEST(no_retries_means_final_at_once)
{
	struct gp_job	 job;
	struct gp_item	*a, *b, *c;

	map_job(&job, 3);
	a = start(&job);
	b = start(&job);
	c = start(&job);
	ck_assert_int_eq(gp_job_end_bad(&job, a, GP_CRASHED, -1, 0), 0);
	ck_assert_int_eq(gp_job_end_bad(&job, b, GP_TIMEDOUT, -1, 0), 0);
	/* A protocol error is never retried. */
	ck_assert_int_eq(gp_job_end_bad(&job, c, GP_ERROR, -EPROTO, 9), 0);
	ck_assert_int_eq(a->status, GP_CRASHED);
	ck_assert_int_eq(a->code, -1);
	ck_assert_int_eq(b->status, GP_TIMEDOUT);
	ck_assert_int_eq(b->code, -1);
	ck_assert_int_eq(c->status, GP_ERROR);
	ck_assert_int_eq(c->code, -EPROTO);
	ck_assert_int_eq(gp_job_done(&job), 1);
}
END_TEST

/* fn returned after the STOP of its timeout: its return is the code and
 * its output is dropped when it runs again, kept when final. */
START_TEST(a_late_result_of_a_timeout)
{
	struct gp_job		 job;
	struct gp_rec_result	 r = { .kind = GP_REC_DONE, .rc = 3,
				       .len = 2 };
	struct gp_item		*it;

	map_job(&job, 1);
	it = start(&job);
	ck_assert_int_eq(result(&job, it, &r, "hi",
	    1, 1), 0);
	ck_assert_int_eq(it->status, GP_NOTRUN);
	ck_assert_ptr_null(it->out);
	ck_assert_uint_eq(it->outlen, 0);
	ck_assert_ptr_eq(start(&job), it);
	ck_assert_int_eq(result(&job, it, &r, "hi",
	    1, 1), 0);
	ck_assert_int_eq(it->status, GP_TIMEDOUT);
	ck_assert_int_eq(it->code, 3);
	ck_assert_uint_eq(it->outlen, 2);
	ck_assert_mem_eq(it->out, "hi", 2);
	ck_assert_int_eq(gp_job_done(&job), 1);
	free(it->out);
	free(job.requeue);
}
END_TEST

START_TEST(results_end_items)
{
	struct gp_job		 job;
	struct gp_rec_result	 ok = { .kind = GP_REC_DONE, .len = 3 };
	struct gp_rec_result	 bad = { .kind = GP_REC_DONE, .rc = 7 };
	struct gp_rec_result	 err = { .kind = GP_REC_ERROR,
				       .rc = -EMSGSIZE };
	struct gp_rec_result	 skip = { .kind = GP_REC_SKIPPED };
	struct gp_item		*a, *b, *c, *d;

	map_job(&job, 4);
	a = start(&job);
	b = start(&job);
	c = start(&job);
	d = start(&job);
	ck_assert_int_eq(result(&job, a, &ok, "abc",
	    0, 0), 0);
	ck_assert_int_eq(result(&job, b, &bad, NULL, 0, 0), 0);
	ck_assert_int_eq(result(&job, c, &err, NULL, 0, 0), 0);
	ck_assert_int_eq(result(&job, d, &skip, NULL, 0, 0), 0);
	ck_assert_int_eq(a->status, GP_OK);
	ck_assert_int_eq(a->code, 0);
	ck_assert_mem_eq(a->out, "abc", 3);
	ck_assert_int_eq(b->status, GP_FAILED);
	ck_assert_int_eq(b->code, 7);
	ck_assert_ptr_null(b->out);
	ck_assert_int_eq(c->status, GP_ERROR);
	ck_assert_int_eq(c->code, -EMSGSIZE);
	/* Skipped: not an attempt, and first in line again. */
	ck_assert_int_eq(d->status, GP_NOTRUN);
	ck_assert_int_eq(d->attempts, 0);
	ck_assert_int_eq(gp_job_done(&job), 0);
	ck_assert_ptr_eq(start(&job), d);
	done_ok(&job, d);
	ck_assert_int_eq(gp_job_done(&job), 1);
	free(a->out);
	free(job.requeue);
}
END_TEST

START_TEST(results_measure_the_items)
{
	struct gp_job		 job;
	struct gp_rec_result	 r = { .kind = GP_REC_DONE };

	map_job(&job, 3);
	r.ns = 0;		/* not measured */
	ck_assert_int_eq(result(&job, start(&job), &r, NULL, 0, 0), 0);
	ck_assert_int_eq(job.est_ns, 0);
	r.ns = 800;
	ck_assert_int_eq(result(&job, start(&job), &r, NULL, 0, 0), 0);
	ck_assert_int_eq(job.est_ns, 800);
	r.ns = 1600;
	ck_assert_int_eq(result(&job, start(&job), &r, NULL, 0, 0), 0);
	ck_assert_int_eq(job.est_ns, (800 * 7 + 1600) / 8);
}
END_TEST

/* A worker died with a batch of four: the first's result came, the
 * second's was done but unsent, the third was running, the fourth never
 * started. */
static void
lost_batch(struct gp_job *job, struct gp_worker *w, struct gp_flight *fl)
{
	int	 i;

	map_job(job, 4);
	memset(w, 0, sizeof(*w));
	w->idx = 3;
	w->fl = fl;
	w->nfl = 4;
	for (i = 0; i < 4; i++) {
		fl[i].item = start(job);
		fl[i].id = 100 + (uint64_t)i;
	}
	done_ok(job, fl[0].item);
	w->nres = 1;
}

START_TEST(lost_worker_settles_its_batch)
{
	struct gp_job		 job;
	struct gp_worker	 w;
	struct gp_flight	 fl[4];

	lost_batch(&job, &w, fl);
	ck_assert_int_eq(gp_job_lost(&job, &w, 102, 128 + 11, 0), 0);
	ck_assert_int_eq(items[0].status, GP_OK);
	/* Unsent result: runs again, still one attempt made. */
	ck_assert_int_eq(items[1].status, GP_NOTRUN);
	ck_assert_int_eq(items[1].attempts, 1);
	/* Running: crashed, no retries left. */
	ck_assert_int_eq(items[2].status, GP_CRASHED);
	ck_assert_int_eq(items[2].code, 139);
	ck_assert_int_eq(items[2].worker, 3);
	/* Never started: not an attempt. */
	ck_assert_int_eq(items[3].status, GP_NOTRUN);
	ck_assert_int_eq(items[3].attempts, 0);
	ck_assert_uint_eq(job.running, 0);
	ck_assert_uint_eq(job.nrq, 2);
	ck_assert_int_eq(gp_job_done(&job), 0);
	ck_assert_ptr_eq(start(&job), &items[3]);
	ck_assert_ptr_eq(start(&job), &items[1]);
	ck_assert_ptr_null(gp_job_peek(&job));
	free(job.requeue);
}
END_TEST

START_TEST(lost_worker_timeout_and_protocol)
{
	struct gp_job		 job;
	struct gp_worker	 w;
	struct gp_flight	 fl[4];

	/* Its STOP named the running item for a timeout: retried once. */
	lost_batch(&job, &w, fl);
	w.stop_id = 102;
	w.stop_timeout = 1;
	ck_assert_int_eq(gp_job_lost(&job, &w, 102, 9, 1), 0);
	ck_assert_int_eq(items[2].status, GP_NOTRUN);
	ck_assert_uint_eq(job.nrq, 3);
	ck_assert_ptr_eq(job.requeue[1], &items[2]);
	free(job.requeue);

	lost_batch(&job, &w, fl);
	w.stop_id = 102;
	w.stop_timeout = 1;
	ck_assert_int_eq(gp_job_lost(&job, &w, 102, 9, 0), 0);
	ck_assert_int_eq(items[2].status, GP_TIMEDOUT);
	ck_assert_int_eq(items[2].code, -1);
	free(job.requeue);

	/* A STOP for a cancel is not a timeout. */
	lost_batch(&job, &w, fl);
	w.stop_id = 102;
	ck_assert_int_eq(gp_job_lost(&job, &w, 102, 9, 0), 0);
	ck_assert_int_eq(items[2].status, GP_CRASHED);
	ck_assert_int_eq(items[2].code, 9);
	free(job.requeue);

	/* It broke the protocol: the running item is an error, even with
	 * retries left. */
	lost_batch(&job, &w, fl);
	w.proto_err = -EPROTO;
	ck_assert_int_eq(gp_job_lost(&job, &w, 102, 9, 5), 0);
	ck_assert_int_eq(items[2].status, GP_ERROR);
	ck_assert_int_eq(items[2].code, -EPROTO);
	free(job.requeue);
}
END_TEST

START_TEST(lost_between_items_blames_none)
{
	struct gp_job		 job;
	struct gp_worker	 w;
	struct gp_flight	 fl[4];

	lost_batch(&job, &w, fl);
	ck_assert_int_eq(gp_job_lost(&job, &w, 0, 139, 0), 0);
	ck_assert_int_eq(items[1].status, GP_NOTRUN);
	ck_assert_int_eq(items[2].status, GP_NOTRUN);
	ck_assert_int_eq(items[3].status, GP_NOTRUN);
	ck_assert_int_eq(items[3].attempts, 1);
	ck_assert_uint_eq(job.nrq, 3);
	free(job.requeue);
}
END_TEST

START_TEST(cancel_ends_what_is_left)
{
	struct gp_job	 job;
	struct gp_item	*a, *b, *c;
	size_t		 i;

	map_job(&job, 6);
	a = start(&job);
	b = start(&job);
	c = start(&job);
	ck_assert_int_eq(gp_job_end_bad(&job, a, GP_CRASHED, 1, 3), 0);
	gp_job_cancel(&job);
	ck_assert_int_eq(job.canceled, 1);
	ck_assert_int_eq(a->status, GP_CANCELED);	/* was requeued */
	for (i = 3; i < 6; i++)
		ck_assert_int_eq(items[i].status, GP_CANCELED);
	ck_assert_ptr_null(gp_job_peek(&job));
	/* Running ones still count. */
	ck_assert_int_eq(gp_job_done(&job), 0);
	/* A crash now is the cancel; a timeout is final, not retried. */
	ck_assert_int_eq(gp_job_end_bad(&job, b, GP_CRASHED, 9, 3), 0);
	ck_assert_int_eq(b->status, GP_CANCELED);
	ck_assert_int_eq(gp_job_done(&job), 0);
	ck_assert_int_eq(gp_job_end_bad(&job, c, GP_TIMEDOUT, -1, 3), 0);
	ck_assert_int_eq(c->status, GP_TIMEDOUT);
	ck_assert_int_eq(gp_job_done(&job), 1);
	ck_assert_uint_eq(job.running, 0);
	free(job.requeue);
}
END_TEST

START_TEST(again_in_a_canceled_call_cancels)
{
	struct gp_job	 job;
	struct gp_item	*a;

	map_job(&job, 2);
	a = start(&job);
	gp_job_cancel(&job);
	ck_assert_int_eq(gp_job_again(&job, a), 0);
	ck_assert_int_eq(a->status, GP_CANCELED);
	ck_assert_uint_eq(job.nrq, 0);
	ck_assert_int_eq(gp_job_done(&job), 1);
}
END_TEST

START_TEST(fail_returns_its_code)
{
	struct gp_job	 job;
	struct gp_item	*a;

	map_job(&job, 2);
	a = start(&job);
	ck_assert_int_eq(gp_job_fail(&job, a, -ENOMEM), -ENOMEM);
	ck_assert_int_eq(a->status, GP_ERROR);
	ck_assert_int_eq(a->code, -ENOMEM);
	ck_assert_int_eq(gp_job_done(&job), 0);	/* items[1] is left */
	done_ok(&job, start(&job));
	ck_assert_int_eq(gp_job_done(&job), 1);
}
END_TEST

START_TEST(batch_size_rules)
{
	struct gp_job	 job;

	map_job(&job, 0);
	job.n = 1000;
	/* Nothing measured yet: one at a time. */
	ck_assert_uint_eq(gp_job_batch_size(&job, 2, 0, 0), 1);
	/* 2 ms of 1 us items, but at most 1000 / (2 x 2) of them. */
	job.est_ns = 1000;
	ck_assert_uint_eq(gp_job_batch_size(&job, 2, 0, 0), 250);
	ck_assert_uint_eq(gp_job_batch_size(&job, 1, 0, 0), 500);
	job.est_ns = 100000;
	ck_assert_uint_eq(gp_job_batch_size(&job, 2, 0, 0), 20);
	/* What remains counts the requeued, not what was taken. */
	job.est_ns = 1000;
	job.next = 996;
	job.nrq = 4;
	ck_assert_uint_eq(gp_job_batch_size(&job, 2, 0, 0), 2);
	job.next = 1000;
	job.nrq = 0;
	ck_assert_uint_eq(gp_job_batch_size(&job, 2, 0, 0), 1);
	/* Never past GP_BATCH_MAX, nor the worker's max_tasks. */
	job.next = 0;
	job.n = 100 * GP_BATCH_MAX;
	job.est_ns = 1;
	ck_assert_uint_eq(gp_job_batch_size(&job, 1, 0, 0), GP_BATCH_MAX);
	ck_assert_uint_eq(gp_job_batch_size(&job, 1, 10, 7), 3);
	/* A stream goes one at a time. */
	job.feed = &(struct gp_feed){ 0 };
	ck_assert_uint_eq(gp_job_batch_size(&job, 1, 0, 0), 1);
}
END_TEST

START_TEST(feed_items_are_held_until_taken)
{
	/* items[0..3), one "not yet" before items[2]; done() of items[1]
	 * asks to stop. */
	struct test_feed f = { .it = items, .n = 3, .again = 1,
			       .again_at = 2, .stop_at = &items[1] };
	struct gp_feed	 feed = { .next = test_feed_next,
			       .done = test_feed_done, .in_fd = -1,
			       .ctl_fd = -1, .arg = &f };
	struct gp_job	 job;
	struct gp_item	*a, *b, *c;

	map_job(&job, 0);
	job.feed = &feed;
	items[0].status = GP_OK;	/* gp_job_peek() resets what it gets */
	ck_assert_ptr_eq(gp_job_peek(&job), &items[0]);
	ck_assert_int_eq(items[0].status, GP_NOTRUN);
	ck_assert_ptr_eq(gp_job_peek(&job), &items[0]);
	ck_assert_uint_eq(f.next, 1);
	a = start(&job);
	b = start(&job);
	ck_assert_ptr_eq(b, &items[1]);
	/* "Not yet": nothing until the loop clears feed_wait. */
	ck_assert_ptr_null(gp_job_peek(&job));
	ck_assert_int_eq(job.feed_wait, 1);
	ck_assert_int_eq(job.feed_nofd, 0);
	ck_assert_ptr_null(gp_job_peek(&job));
	job.feed_wait = 0;
	c = start(&job);
	ck_assert_ptr_eq(c, &items[2]);
	done_ok(&job, a);
	ck_assert_uint_eq(f.done, 1);
	ck_assert_int_eq(job.cancel_req, 0);
	/* done() asks to stop: the loop is told, nothing ends by itself. */
	done_ok(&job, b);
	ck_assert_int_eq(job.cancel_req, 1);
	ck_assert_ptr_null(gp_job_peek(&job));	/* feed ran out */
	ck_assert_int_eq(job.feed_end, 1);
	ck_assert_int_eq(gp_job_done(&job), 0);
	done_ok(&job, c);
	ck_assert_int_eq(gp_job_done(&job), 1);
	ck_assert_uint_eq(f.done, 3);
}
END_TEST

START_TEST(abandon_ends_the_queued_as_they_are)
{
	struct test_feed f = { .it = items, .n = 2 };
	struct gp_feed	 feed = { .next = test_feed_next,
			       .done = test_feed_done, .in_fd = -1,
			       .ctl_fd = -1, .arg = &f };
	struct gp_job	 job;
	struct gp_item	*a;

	map_job(&job, 0);
	job.feed = &feed;
	a = start(&job);
	/* items[1] held (given by next(), not taken), a requeued. */
	ck_assert_ptr_eq(gp_job_peek(&job), &items[1]);
	ck_assert_int_eq(gp_job_end_bad(&job, a, GP_CRASHED, 1, 1), 0);
	ck_assert_uint_eq(job.nrq, 1);
	ck_assert_ptr_eq(job.held, &items[1]);
	ck_assert_uint_eq(f.done, 0);
	gp_job_abandon(&job);
	ck_assert_int_eq(a->status, GP_NOTRUN);
	ck_assert_int_eq(items[1].status, GP_NOTRUN);
	ck_assert_uint_eq(f.done, 2);
	ck_assert_uint_eq(job.nrq, 0);
	ck_assert_ptr_null(job.held);
	ck_assert_uint_eq(job.running, 0);
	free(job.requeue);
}
END_TEST

/* A result assembled from pieces (res->own) becomes the item's out as
 * it is, no copy; one the item does not keep (a retried timeout) stays
 * the caller's to free. */
START_TEST(a_pieced_result_is_taken_not_copied)
{
	struct gp_job		 job;
	struct gp_rec_result	 r = { .kind = GP_REC_DONE };
	struct gp_res		 res;
	struct gp_item		*it;
	uint8_t			*buf = malloc(5);

	ck_assert_ptr_nonnull(buf);
	memcpy(buf, "piece", 5);
	map_job(&job, 2);
	it = start(&job);
	res = (struct gp_res){ buf, 5, buf };
	ck_assert_int_eq(gp_job_result(&job, it, &r, &res, 1, 1), 0);
	ck_assert_ptr_eq(res.own, buf);		/* runs again: not kept */
	ck_assert_int_eq(it->status, GP_NOTRUN);
	ck_assert_ptr_eq(start(&job), it);
	ck_assert_int_eq(gp_job_result(&job, it, &r, &res, 0, 1), 0);
	ck_assert_ptr_null(res.own);
	ck_assert_ptr_eq(it->out, buf);
	ck_assert_uint_eq(it->outlen, 5);
	ck_assert_int_eq(it->status, GP_OK);
	free(it->out);
	free(job.requeue);
}
END_TEST

/* A reply the worker cut because its item was stopped (-ECANCELED) ends
 * the item as the stop: timed out (retried under retries), or canceled;
 * otherwise it is the error it says. */
START_TEST(a_cut_reply_ends_as_its_stop)
{
	struct gp_job		 job;
	struct gp_rec_result	 r = { .kind = GP_REC_ERROR,
				       .rc = -ECANCELED };
	struct gp_item		*a, *b, *c;

	map_job(&job, 3);
	a = start(&job);
	b = start(&job);
	ck_assert_int_eq(result(&job, a, &r, NULL, 1, 1), 0);
	ck_assert_int_eq(a->status, GP_NOTRUN);		/* retried */
	ck_assert_ptr_eq(start(&job), a);
	ck_assert_int_eq(result(&job, a, &r, NULL, 1, 1), 0);
	ck_assert_int_eq(a->status, GP_TIMEDOUT);
	ck_assert_int_eq(a->code, -1);
	ck_assert_int_eq(result(&job, b, &r, NULL, 0, 1), 0);
	ck_assert_int_eq(b->status, GP_ERROR);
	ck_assert_int_eq(b->code, -ECANCELED);
	c = start(&job);
	gp_job_cancel(&job);
	ck_assert_int_eq(result(&job, c, &r, NULL, 0, 1), 0);
	ck_assert_int_eq(c->status, GP_CANCELED);
	ck_assert_int_eq(gp_job_done(&job), 1);
	free(job.requeue);
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("job");
	TCase	*tc = tcase_create("job");

	tcase_add_test(tc, item_init_resets_the_result);
	tcase_add_test(tc, items_start_in_order);
	tcase_add_test(tc, a_retried_item_runs_before_new_ones);
	tcase_add_test(tc, crash_retries_stop_at_the_limit);
	tcase_add_test(tc, no_retries_means_final_at_once);
	tcase_add_test(tc, a_late_result_of_a_timeout);
	tcase_add_test(tc, results_end_items);
	tcase_add_test(tc, results_measure_the_items);
	tcase_add_test(tc, lost_worker_settles_its_batch);
	tcase_add_test(tc, lost_worker_timeout_and_protocol);
	tcase_add_test(tc, lost_between_items_blames_none);
	tcase_add_test(tc, cancel_ends_what_is_left);
	tcase_add_test(tc, again_in_a_canceled_call_cancels);
	tcase_add_test(tc, fail_returns_its_code);
	tcase_add_test(tc, batch_size_rules);
	tcase_add_test(tc, feed_items_are_held_until_taken);
	tcase_add_test(tc, abandon_ends_the_queued_as_they_are);
	tcase_add_test(tc, a_pieced_result_is_taken_not_copied);
	tcase_add_test(tc, a_cut_reply_ends_as_its_stop);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
