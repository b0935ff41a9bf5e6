/*
 * job.c: the bookkeeping of one gp_pool_map() or gp_pool_run() call (struct
 * gp_job): which item starts next, what a result, a crash, a timeout or a
 * cancel does to an item, and when the call is over. Pure functions on
 * the job, its items and a worker's batch: no system call, no fork, no
 * message; loop.c calls them and test/check_job.c tests them by hand.
 * The only calls out are the caller's feed (next(), done()) and malloc.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "msg.h"

/* An item has its final status. */
static void
item_end(struct gp_job *job, struct gp_item *it)
{
	job->running--;
	if (job->feed != NULL && job->feed->done(job->feed->arg, it) != 0)
		job->cancel_req = 1;
}

/* An item ends GP_ERROR with rc, which the call then returns: it needs
 * no allocation, so an item is never lost to a failed one. */
int
gp_job_fail(struct gp_job *job, struct gp_item *it, int rc)
{
	it->status = GP_ERROR;
	it->code = rc;
	item_end(job, it);
	return rc;
}

static int
requeue(struct gp_job *job, struct gp_item *it)
{
	struct gp_item	**q;
	size_t		 cap;

	if (job->nrq == job->caprq) {
		cap = job->caprq ? job->caprq * 2 : 16;
		if ((q = realloc(job->requeue, cap * sizeof(*q))) == NULL)
			return -ENOMEM;
		job->requeue = q;
		job->caprq = cap;
	}
	job->requeue[job->nrq++] = it;
	job->running--;
	it->status = GP_NOTRUN;
	return 0;
}

void
gp_job_item_init(struct gp_item *it, int keep_out)
{
	if (!keep_out) {
		it->out = NULL;
		it->outlen = 0;
	}
	it->status = GP_NOTRUN;
	it->code = 0;
	it->worker = -1;
	it->attempts = 0;
}

int
gp_job_item_check(const struct gp_item *it, int outbufs)
{
	if ((it->in == NULL && it->inlen > 0) ||
	    (outbufs && it->out == NULL && it->outlen > 0))
		return -EINVAL;
	return 0;
}

struct gp_item *
gp_job_peek(struct gp_job *job)
{
	struct gp_item	*it;
	int		 r;

	if (job->nrq > 0)
		return job->requeue[job->nrq - 1];
	if (job->canceled)
		return NULL;
	if (job->feed == NULL)
		return job->next < job->n ? &job->items[job->next] : NULL;
	if (job->held != NULL)
		return job->held;
	if (job->feed_end || job->feed_wait)
		return NULL;
	r = job->feed->next(job->feed->arg, &it);
	if (r < 0)
		job->feed_end = 1;
	else if (r == GP_FEED_AGAIN || r == GP_FEED_WAIT) {
		job->feed_wait = 1;
		job->feed_nofd = r == GP_FEED_WAIT;
	} else {
		gp_job_item_init(it, job->outbufs);
		job->held = it;
	}
	return job->held;
}

void
gp_job_take(struct gp_job *job)
{
	if (job->nrq > 0)
		job->nrq--;
	else if (job->feed == NULL)
		job->next++;
	else
		job->held = NULL;
	job->running++;
}

/* Items per batch: enough measured work to amortise a round trip
 * (GP_BATCH_TARGET_NS), never more than a 1/(2 x workers) share of what
 * remains (factoring), so the tail stays balanced. */
size_t
gp_job_batch_size(const struct gp_job *job, int live, unsigned max_tasks,
    unsigned ntasks)
{
	size_t	 b, rem, share, two_w;

	if (job->feed != NULL || job->est_ns == 0)
		return 1;
	b = (size_t)(GP_BATCH_TARGET_NS / job->est_ns);
	rem = job->n - job->next + job->nrq;
	two_w = 2 * (size_t)live;
	share = (rem + two_w - 1) / two_w;
	if (b > share)
		b = share;
	if (b > GP_BATCH_MAX)
		b = GP_BATCH_MAX;
	if (max_tasks > 0 && b > max_tasks - ntasks)
		b = max_tasks - ntasks;
	return b > 0 ? b : 1;
}

/* A pending item is canceled: it was never running. */
static void
cancel_item(struct gp_job *job, struct gp_item *it)
{
	job->running++;
	it->status = GP_CANCELED;
	item_end(job, it);
}

void
gp_job_cancel(struct gp_job *job)
{
	job->canceled = 1;
	while (job->nrq > 0)
		cancel_item(job, job->requeue[--job->nrq]);
	if (job->held != NULL) {
		cancel_item(job, job->held);
		job->held = NULL;
	}
	while (job->feed == NULL && job->next < job->n)
		cancel_item(job, &job->items[job->next++]);
}

static void
est_update(struct gp_job *job, uint64_t ns)
{
	if (ns == 0)
		return;		/* not measured (worker.c run_batch()) */
	job->est_ns = job->est_ns ? (job->est_ns * 7 + (int64_t)ns) / 8 :
	    (int64_t)ns;
}

int
gp_job_again(struct gp_job *job, struct gp_item *it)
{
	int	 rc;

	if (job->canceled) {
		it->status = GP_CANCELED;
		item_end(job, it);
	} else if ((rc = requeue(job, it)) < 0)
		return gp_job_fail(job, it, rc);
	return 0;
}

/* A crash or a timeout of it runs again. */
static int
may_retry(const struct gp_job *job, const struct gp_item *it, int retries)
{
	return it->attempts <= retries && !job->canceled;
}

/*
 * The one place that decides what becomes of an item that ended badly.
 * A crash of a canceled call's item is its cancel (code kept as it was);
 * a crash or a timeout runs again while attempts <= retries and the call
 * is not canceled (no output was kept: gp_job_result() keeps none for a
 * run that is retried); anything else is final.
 */
int
gp_job_end_bad(struct gp_job *job, struct gp_item *it, int status, int code,
    int retries)
{
	int	 rc;

	if (status == GP_CRASHED && job->canceled)
		status = GP_CANCELED;
	else
		it->code = code;
	if ((status == GP_CRASHED || status == GP_TIMEDOUT) &&
	    may_retry(job, it, retries)) {
		if ((rc = requeue(job, it)) < 0)
			return gp_job_fail(job, it, rc);
		return 0;
	}
	it->status = status;
	item_end(job, it);
	return 0;
}

/* Keep a result's bytes (res) in it: a malloc'd copy (-ENOMEM), or
 * res->own itself, taken; with the caller's buffers (GP_POOL_OUT_BUFFERS)
 * a copy into out (none when the pieces were put there already), or
 * -ENOBUFS when it has less room, outlen then the room it needs; with
 * GP_POOL_OUT_VIEW the bytes where they are, which stay there until
 * done() has returned (the caller's loop.c reads no more until then). */
static int
keep_out(const struct gp_job *job, struct gp_item *it, struct gp_res *res)
{
	size_t	 len = res->len;

	if (job->outview) {
		it->out = len > 0 ? (void *)(uintptr_t)res->data : NULL;
		it->outlen = len;
		return 0;
	}
	if (job->outbufs && len > it->outlen) {
		it->outlen = len;
		return -ENOBUFS;
	}
	if (!job->outbufs && res->own != NULL) {
		it->out = res->own;
		res->own = NULL;
	} else if (!job->outbufs && len > 0 && (it->out = malloc(len)) == NULL)
		return -ENOMEM;
	if (len > 0 && it->out != res->data)
		memcpy(it->out, res->data, len);
	it->outlen = len;
	return 0;
}

int
gp_job_result(struct gp_job *job, struct gp_item *it,
    const struct gp_rec_result *r, struct gp_res *res, int timed_out,
    int retries)
{
	int	 rc;

	switch (r->kind) {
	case GP_REC_DONE:
		est_update(job, r->ns);
		if (timed_out && may_retry(job, it, retries))
			return gp_job_end_bad(job, it, GP_TIMEDOUT, r->rc,
			    retries);
		if ((rc = keep_out(job, it, res)) == -ENOBUFS) {
			(void)gp_job_fail(job, it, rc);
			break;
		}
		if (rc < 0)
			return gp_job_fail(job, it, rc);
		if (timed_out)
			return gp_job_end_bad(job, it, GP_TIMEDOUT, r->rc,
			    retries);
		it->code = r->rc;
		it->status = r->rc == 0 ? GP_OK : GP_FAILED;
		item_end(job, it);
		break;
	case GP_REC_ERROR:
		/* A reply cut short by the stop (worker.c): what fn returned
		 * is lost with it, as when a timed-out fn does not return. */
		if (r->rc == -ECANCELED && timed_out)
			return gp_job_end_bad(job, it, GP_TIMEDOUT, -1, retries);
		if (r->rc == -ECANCELED && job->canceled)
			return gp_job_end_bad(job, it, GP_CANCELED, 0, retries);
		(void)gp_job_fail(job, it, r->rc);
		break;
	case GP_REC_SKIPPED:
		it->attempts--;
		return gp_job_again(job, it);
	}
	return 0;
}

int
gp_job_lost(struct gp_job *job, struct gp_worker *w, uint64_t cur, int code,
    int retries)
{
	struct gp_item	*it;
	size_t		 i, at = w->nfl;
	int		 rc = 0, e;

	for (i = w->nres; i < w->nfl; i++)
		if (w->fl[i].id == cur)
			at = i;
	for (i = w->nres; i < w->nfl; i++) {
		it = w->fl[i].item;
		if (i > at)
			it->attempts--;	/* never started */
		if (i != at) {
			/* Not started, or done with its result unsent:
			 * runs again (at-least-once, design.md). */
			if ((e = gp_job_again(job, it)) < 0)
				rc = e;
			continue;
		}
		it->worker = w->idx;
		if (w->proto_err)
			e = gp_job_end_bad(job, it, GP_ERROR, -EPROTO, retries);
		else if (w->stop_id == cur && w->stop_timeout)
			e = gp_job_end_bad(job, it, GP_TIMEDOUT, -1, retries);
		else
			e = gp_job_end_bad(job, it, GP_CRASHED, code, retries);
		if (e < 0)
			rc = e;
	}
	return rc;
}

void
gp_job_abandon(struct gp_job *job)
{
	/* Not running: they end as they are, GP_NOTRUN. */
	while (job->nrq > 0) {
		job->running++;
		item_end(job, job->requeue[--job->nrq]);
	}
	if (job->held != NULL) {
		job->running++;
		item_end(job, job->held);
		job->held = NULL;
	}
}

int
gp_job_done(const struct gp_job *job)
{
	if (job->running > 0 || job->nrq > 0 || job->held != NULL)
		return 0;
	if (job->canceled)
		return 1;
	return job->feed == NULL ? job->next == job->n : job->feed_end;
}
