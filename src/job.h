/*
 * job.h: one call's items (job.c, with no system call): struct gp_job,
 * what gp_pool_map() and gp_pool_run() hand the master's loop, and the
 * calls that take its items, end them and say when it is done. Included
 * by internal.h, where a worker's batch (struct gp_worker) and a
 * result's bytes (struct gp_res) are. Never installed.
 */
#ifndef GP_JOB_H
#define GP_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "gpupool.h"
#include "msg.h"

struct gp_worker;
struct gp_res;

/* One gp_pool_map() or gp_pool_run() call. */
struct gp_job {
	uint64_t		 gen;
	gp_fn			*fn;
	const void		*arg;
	size_t			 arglen;
	struct gp_item		*items;		/* gp_pool_map: the array */
	size_t			 n, next;
	const struct gp_feed	*feed;		/* gp_pool_run: the stream */
	int			 feed_wait;	/* next() said "not yet" */
	int			 feed_nofd;	/* ... and not to poll in_fd */
	int			 feed_end;
	struct gp_item		*held;		/* taken from next(), not sent */
	int			 cancel_req;	/* cancel_fd or done() asked */
	struct gp_item		**requeue;	/* to run again first */
	size_t			 nrq, caprq;
	size_t			 running;	/* items in batches */
	int			 canceled;
	int64_t			 est_ns;	/* estimated item time, 0: none */
	int			 outbufs;	/* GP_POOL_OUT_BUFFERS: out is the
						   caller's, outlen its room */
	int			 outview;	/* GP_POOL_OUT_VIEW: out points at
						   the result where it lies,
						   until done() returns */
	const struct gp_item	*need_for;	/* the item need was asked for */
	struct gp_need		 need;		/* its answer (watch.c) */
};

/*
 * job.c: a call's items, with no system call. "Ends" means the item has
 * its final status and the feed's done() was called for it (which may set
 * job->cancel_req); job->running counts the items taken and not ended.
 */
/* NOTRUN, no output (with keep_out, out and outlen as they are: the
 * caller's buffer, GP_POOL_OUT_BUFFERS). */
void	gp_job_item_init(struct gp_item *it, int keep_out);
/* -EINVAL for an item the pool cannot take: bytes that are not there (in
 * NULL, inlen > 0) or, with the caller's buffers (outbufs), room without
 * a buffer (out NULL, outlen > 0); else 0. */
int	gp_job_item_check(const struct gp_item *it, int outbufs);
/* The next item to start, without taking it; NULL if none now. A
 * requeued item comes first, the last requeued first; then items[] in
 * order, or what feed->next() gives (held until taken). */
struct gp_item *gp_job_peek(struct gp_job *job);
/* Take what gp_job_peek() returned: it is running from now on. */
void	gp_job_take(struct gp_job *job);
/* Items for a worker's next batch: 1 with a feed or no estimate yet;
 * else GP_BATCH_TARGET_NS of estimated work, at most a 1/(2 x live) share
 * of what remains and GP_BATCH_MAX, and no more than the worker has left
 * before max_tasks recycles it (0: no limit). Never 0. */
size_t	gp_job_batch_size(const struct gp_job *job, int live,
	    unsigned max_tasks, unsigned ntasks);
/* A running item ends GP_ERROR with rc (a negative errno). Returns rc;
 * allocates nothing. */
int	gp_job_fail(struct gp_job *job, struct gp_item *it, int rc);
/* A running item did not run, or its result was lost: it runs again
 * (status GP_NOTRUN, first in line), or, in a canceled call, ends
 * GP_CANCELED. Returns 0, or the -ENOMEM it ended GP_ERROR with. */
int	gp_job_again(struct gp_job *job, struct gp_item *it);
/* A running item ended badly, as status (GP_CRASHED with the worker's
 * code, GP_TIMEDOUT with fn's return or -1, GP_ERROR with -errno). A
 * crash or a timeout runs again, its output freed, while attempts <=
 * retries and the call is not canceled; a crash in a canceled call ends
 * GP_CANCELED; anything else ends as status with code. Returns 0, or
 * the -ENOMEM it ended GP_ERROR with. */
int	gp_job_end_bad(struct gp_job *job, struct gp_item *it, int status,
	    int code, int retries);
/* A running item's result record r, its bytes in res (copied, or
 * res->own taken over), which came after a STOP for a timeout if
 * timed_out. A reply the worker cut because the item was stopped
 * (GP_REC_ERROR, -ECANCELED) ends it as the stop did: timed out, or
 * canceled. Returns 0, or the -ENOMEM it ended GP_ERROR with (then the
 * call fails). */
int	gp_job_result(struct gp_job *job, struct gp_item *it,
	    const struct gp_rec_result *r, struct gp_res *res, int timed_out,
	    int retries);
/* w died with its batch unfinished (w->fl from w->nres on), running item
 * id cur (0: between items), its wait status code code (gp_wstatus_code()).
 * The item that was running ended badly (gp_job_end_bad(): -EPROTO if
 * w->proto_err, a timeout if w's STOP named it for one, else a crash);
 * the others run again. Leaves w's batch as it is. Returns 0, or the
 * last -ENOMEM an item ended GP_ERROR with. */
int	gp_job_lost(struct gp_job *job, struct gp_worker *w, uint64_t cur,
	    int code, int retries);
/* Cancel the call: every item not yet running ends GP_CANCELED, and
 * none starts from then on (gp_job_peek() gives NULL: gp_job_again() and
 * gp_job_end_bad() requeue nothing in a canceled call). */
void	gp_job_cancel(struct gp_job *job);
/* The call failed: items not running end as they are (GP_NOTRUN). */
void	gp_job_abandon(struct gp_job *job);
/* Every item ended (or, canceled, every started one), and no more come. */
int	gp_job_done(const struct gp_job *job);

#endif /* GP_JOB_H */
