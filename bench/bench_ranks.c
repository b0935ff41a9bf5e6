/*
 * bench_ranks.c: how many tasks a second rank 0 dispatches across MPI
 * ranks: gpupool-run's own run (run.c, rank.c, mpi.c: the tasks file,
 * the windows, the protocol, each rank's pool and workers, the results
 * back) with one thing changed: a worker answers each task at once, as if
 * the command had exited 0 with no output, instead of starting it. So the
 * figure is the ceiling the coordinator puts on a run, not a task rate.
 *
 *	mpirun -np 3 bench_ranks [TASKS [GPUS_PER_RANK [ROUNDS]]]
 *
 * Rank 0 prints one line per round: tasks, seconds, tasks/s in all and
 * those that went over MPI (to ranks other than 0), and how many each
 * rank ran, then the same as a JSON line (for bench/run.py); the last
 * line has the medians. No joblog (it would
 * measure fdatasync): see docs/cluster.md.
 *
 * gpupool-run has one run per MPI job, and rank 0 drops what a rank says
 * after its bye; here each round is a run, so the ranks start one only on
 * rank 0's word (round_start()).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "master/master.h"

/* What spawn_task() replies for a command that exited 0 silently. */
static int
null_task(struct gp_ctx *ctx, const void *in, size_t inlen, void *arg)
{
	struct task_reply	 rp;

	memset(&rp, 0, sizeof(rp));
	rp.start_ns = gp_clock_ns(CLOCK_REALTIME);
	return gp_ctx_reply(ctx, &rp, sizeof(rp)) < 0;
}

/* Rank 0's word before each round, an RM_CTL outside enum rctl: a rank
 * that went on by itself would say hello while rank 0 still waits for a
 * slower rank's bye in the round before, which drops it, and waits for
 * that hello for good. */
#define ROUND_GO	(-1)
#define ROUND_STOP	(-2)

/* Rank 0 says whether a round follows (go), the others hear it: 1 when
 * one does, 0 when not, -1 on an error (err says why). Each round is a
 * run of its own: rank 0 beats every rank again (it stopped at each
 * bye), and the others count rank 0's silence from now. */
static int
round_start(struct ranks *rk, int go, char *err, size_t errlen)
{
	struct pollfd	 pfd;
	struct rmsg	*m;
	int32_t		 v = go ? ROUND_GO : ROUND_STOP;
	int		 i, rc;

	if (ranks_rank(rk) == 0) {
		for (i = 1; i < ranks_size(rk); i++)
			if ((rc = ranks_send(rk, i, RM_CTL, &v,
			    sizeof(v))) < 0) {
				snprintf(err, errlen, "MPI: %s",
				    strerror(-rc));
				return -1;
			}
	} else {
		pfd.fd = ranks_fd(rk);
		pfd.events = POLLIN;
		for (v = 0; v != ROUND_GO && v != ROUND_STOP; free(m)) {
			while ((m = ranks_recv(rk, err, errlen)) == NULL) {
				if (err[0] != '\0')
					return -1;
				if (poll(&pfd, 1, -1) == -1 && errno != EINTR) {
					snprintf(err, errlen, "poll: %s",
					    strerror(errno));
					return -1;
				}
			}
			/* Else what rank 0 sent us in the last round after
			 * our bye: a beat, a late word. */
			if (m->type == RM_CTL && m->len == sizeof(v))
				memcpy(&v, m->data, sizeof(v));
		}
	}
	if (v == ROUND_STOP)
		return 0;
	return ranks_start(rk, err, errlen) < 0 ? -1 : 1;
}

static int
cmp(const void *a, const void *b)
{
	double	 x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Rank 0: n null tasks in a new file at path (a mkstemp template). */
static int
write_tasks(char *path, long n)
{
	FILE	*f;
	long	 i;
	int	 fd;

	if ((fd = mkstemp(path)) == -1 || (f = fdopen(fd, "w")) == NULL) {
		perror("bench_ranks: tasks file");
		return -1;
	}
	for (i = 0; i < n; i++)
		fputs("true\n", f);
	return fclose(f) != 0 ? -1 : 0;
}

/* Rank 0, after round k: its figures, and the tasks per second the
 * other ranks ran (returned). */
static double
round_report(struct run *r, int k, double secs, int gpus)
{
	double	 far = 0;
	int	 i;

	for (i = 1; i < r->npeer; i++)
		far += (double)r->peer[i].ran;
	far /= secs;
	printf("round %d: %lu tasks in %.3f s: %.0f tasks/s, "
	    "%.0f/s of them over MPI; per rank:", k + 1, r->ok,
	    secs, (double)r->ok / secs, far);
	for (i = 0; i < r->npeer; i++)
		printf(" %lu", r->peer[i].ran);
	printf("\n{\"tasks\": %lu, \"secs\": %.6f, "
	    "\"per_s\": %.1f, \"mpi_per_s\": %.1f, "
	    "\"ranks\": %d, \"gpus\": %d}\n", r->ok, secs,
	    (double)r->ok / secs, far, r->npeer, gpus);
	return far;
}

int
main(int argc, char **argv)
{
	struct ranks	*rk;
	struct opts	 o;
	struct run	 r;
	sigset_t	 set;
	char		 path[] = "/tmp/bench_ranks.XXXXXX", err[512] = "";
	double		 secs[64], far[64];
	long		 n = argc > 1 ? atol(argv[1]) : 200000;
	int		 gpus = argc > 2 ? atoi(argv[2]) : 2;
	int		 rounds = argc > 3 ? atoi(argv[3]) : 3;
	int		 i, k, go, rc = 0;

	if (n <= 0 || gpus <= 0 || rounds <= 0 || rounds > 64) {
		fprintf(stderr, "usage: bench_ranks [TASKS [GPUS [ROUNDS]]]\n");
		return 2;
	}
	if (signals_block(&set) < 0 || ranks_init(&rk, &set, err,
	    sizeof(err)) < 0) {
		fprintf(stderr, "bench_ranks: %s\n", err);
		return 1;
	}
	if (ranks_rank(rk) == 0) {
		if (write_tasks(path, n) < 0)
			return 1;
		printf("bench_ranks: %d ranks x %d fake GPUs, %ld null tasks "
		    "a round\n", ranks_size(rk), gpus, n);
	}
	for (k = 0; (go = round_start(rk, k < rounds && rc == 0, err,
	    sizeof(err))) > 0; k++) {
		memset(&o, 0, sizeof(o));
		o.file = path;
		o.fake_gpus = gpus;
		o.per_gpu = 1;
		o.grace_ms = DEFAULT_GRACE_MS;
		o.rank_timeout_ms = DEFAULT_RANK_TIMEOUT_MS;
		o.quiet = 1;
		run_init(&r, &o);
		r.fn = null_task;
		r.rk = rk;
		if (ranks_rank(rk) == 0 && tasks_open(&r.in, path, err,
		    sizeof(err)) < 0) {
			fprintf(stderr, "bench_ranks: %s\n", err);
			return 1;
		}
		/* A rank's first failure stays its exit status. */
		if ((i = run_tasks(&r)) != 0 && rc == 0)
			rc = i;
		secs[k] = (double)(gp_now_ns() - r.t0) / 1e9;
		if (ranks_rank(rk) == 0) {
			far[k] = round_report(&r, k, secs[k], gpus);
			if (r.ok != (unsigned long)n)
				rc = 1;
		}
		/* The ranks part at the end of the last round only. */
		r.rk = NULL;
		run_release(&r);
	}
	if (go < 0) {
		fprintf(stderr, "bench_ranks: %s\n", err);
		rc = 1;
	}
	if (ranks_rank(rk) == 0 && k > 0) {
		qsort(secs, (size_t)k, sizeof(secs[0]), cmp);
		qsort(far, (size_t)k, sizeof(far[0]), cmp);
		printf("median: %.0f tasks/s, %.0f tasks/s over MPI (to ranks "
		    "1-%d)\n", (double)n / secs[k / 2], far[k / 2],
		    ranks_size(rk) - 1);
		unlink(path);
	}
	r.rk = rk;
	r.ended = 1;	/* ROUND_STOP was the word */
	return run_ranks_end(&r, rc);
}
