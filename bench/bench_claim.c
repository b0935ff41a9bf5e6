/*
 * bench_claim.c: what a host-wide GPU claim costs a task (issue 34), for
 * the benchmark harness's `claims` section. One claimer claims one GPU
 * ("fake0") and gives it back, ITERS times a block, through the
 * library's own claims table (src/claim.h, as gpupool-run's per-task
 * claims use it), in the claims directory DIR:
 *
 *	bench_claim DIR ITERS BLOCKS
 *
 * Two cases, BLOCKS blocks each, one JSON line a block:
 *   alone	nothing else in the table;
 *   others	other processes' live slots in it: one child holds fake1 to
 *		fake8 (8 HOLD slots), two more each wait for all 8 (2 WAIT
 *		slots), as when other runs hold and queue for other GPUs.
 * Each line: "us" (claim + release, microseconds an iteration), and
 * "try_us", "drop_us" (gp_claim_try() and gp_claim_drop() alone; the
 * clock read between them is in neither), "cpu_us" (this thread's CPU
 * time an iteration: on a loaded machine the wall includes waits for a
 * CPU). The children die with this
 * process (PR_SET_PDEATHSIG) and are reaped by pid.
 *
 * Exit status: 0, or 1 with a message on stderr (a claim refused, a
 * child that could not claim).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "claim.h"

#define OTHER_GPUS	8
#define WAITERS		2

static const char	*dir;

static void
die(const char *what, const char *why)
{
	fprintf(stderr, "bench_claim: %s: %s\n", what, why);
	exit(1);
}

static uint64_t
clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t
now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

/* A child's claimer on fake1..fake8: all 8 claimed (hold) or queued for
 * (wait). Says so on ready, then waits for go's EOF; exits 0. */
static void
child(int hold, int ready, int go)
{
	struct gp_claimer	*c;
	struct gp_claim_req	 r;
	char			 err[512], key[16];
	int			 set[OTHER_GPUS], got[OTHER_GPUS], i, n;

	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() == 1)
		_exit(1);
	if (gp_claim_open(&c, dir, err, sizeof(err)) < 0 || c == NULL)
		die("child: gp_claim_open", err);
	for (i = 0; i < OTHER_GPUS; i++) {
		snprintf(key, sizeof(key), "fake%d", i + 1);
		set[i] = gp_claim_gpu(c, key, 0);
	}
	memset(&r, 0, sizeof(r));
	r.n = OTHER_GPUS;
	r.set = set;
	r.nset = OTHER_GPUS;
	n = gp_claim_try(c, &r, got, err, sizeof(err));
	if (hold ? n != OTHER_GPUS : n != 0)
		die(hold ? "child: the 8 GPUs not granted" :
		    "child: a waiter was granted", err);
	if (write(ready, "k", 1) != 1)
		_exit(1);
	while (read(go, key, sizeof(key)) > 0)
		;
	gp_claim_close(c);
	_exit(0);
}

/* BLOCKS blocks of ITERS claims and drops of fake0, a JSON line each. */
static void
measure(struct gp_claimer *c, int g, const char *name, int others,
    long iters, int blocks)
{
	struct gp_claim_req	 r;
	char			 why[512];
	uint64_t		 t0, t1, t2, t_try, t_drop, start, cpu;
	long			 k;
	int			 b, got;

	memset(&r, 0, sizeof(r));
	r.n = 1;
	r.set = &g;
	r.nset = 1;
	for (b = 0; b < blocks; b++) {
		t_try = t_drop = 0;
		cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		start = now_ns();
		for (k = 0; k < iters; k++) {
			t0 = now_ns();
			if (gp_claim_try(c, &r, &got, why, sizeof(why)) != 1)
				die("gp_claim_try", why);
			t1 = now_ns();
			gp_claim_drop(c, g, 0);
			t2 = now_ns();
			t_try += t1 - t0;
			t_drop += t2 - t1;
		}
		printf("{\"case\": \"%s\", \"block\": %d, \"iters\": %ld, "
		    "\"others\": %d, \"us\": %.4f, \"try_us\": %.4f, "
		    "\"drop_us\": %.4f, \"cpu_us\": %.4f}\n", name, b, iters,
		    others,
		    (double)(now_ns() - start) / 1e3 / (double)iters,
		    (double)t_try / 1e3 / (double)iters,
		    (double)t_drop / 1e3 / (double)iters,
		    (double)(clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu) / 1e3 /
		    (double)iters);
		fflush(stdout);
	}
}

int
main(int argc, char **argv)
{
	struct gp_claimer	*c;
	pid_t			 kids[1 + WAITERS];
	char			 err[512], b;
	long			 iters;
	int			 blocks, ready[2], go[2], g, i, st, bad = 0;

	if (argc != 4 || (iters = atol(argv[2])) < 1 ||
	    (blocks = atoi(argv[3])) < 1) {
		fprintf(stderr, "usage: bench_claim DIR ITERS BLOCKS\n");
		return 2;
	}
	dir = argv[1];
	if (gp_claim_open(&c, dir, err, sizeof(err)) < 0)
		die("gp_claim_open", err);
	if (c == NULL)
		die(dir, "claims are off (none)");
	if ((g = gp_claim_gpu(c, "fake0", 0)) < 0)
		die("gp_claim_gpu", strerror(-g));
	/* One claim before the clock: the table made, the key added. */
	measure(c, g, "warm-up", 0, 1000, 1);
	measure(c, g, "alone", 0, iters, blocks);

	if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0)
		die("pipe2", strerror(errno));
	for (i = 0; i < 1 + WAITERS; i++) {
		if ((kids[i] = fork()) < 0)
			die("fork", strerror(errno));
		if (kids[i] == 0) {
			close(go[1]);
			close(ready[0]);
			child(i == 0, ready[1], go[0]);
		}
		/* In turn: the holder first, so the others queue. */
		if (read(ready[0], &b, 1) != 1)
			die("a child", "exited before it was ready");
	}
	close(go[0]);
	close(ready[1]);
	measure(c, g, "others", OTHER_GPUS + WAITERS, iters, blocks);
	close(go[1]);
	for (i = 0; i < 1 + WAITERS; i++)
		if (waitpid(kids[i], &st, 0) != kids[i] || !WIFEXITED(st) ||
		    WEXITSTATUS(st) != 0)
			bad = 1;
	gp_claim_close(c);
	if (bad)
		die("a child", "did not exit 0");
	return 0;
}
