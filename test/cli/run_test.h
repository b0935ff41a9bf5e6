/*
 * run_test.h: what the end-to-end programs that were check_cli.c share
 * beyond cli_test.h: tasks that record what they saw, each Seq run once,
 * processes dead in time, waiting on a condition, a refused run (BAD()),
 * one more variable for gpupool-run, a joblog of n done tasks.
 */
#ifndef GP_RUN_TEST_H
#define GP_RUN_TEST_H

#include "cli_test.h"

/* Tasks "PROBE record LOG ms" n times. */
static inline char *
record_tasks(const char *name, const char *log, int n, long ms)
{
	char	*p = pathf("%s", name);
	FILE	*f = fopen(p, "w");
	int	 i;

	ck_assert_ptr_nonnull(f);
	for (i = 0; i < n; i++)
		fprintf(f, "%s record %s %ld\n", PROBE, log, ms);
	fclose(f);
	return p;
}

/* Each Seq 1..n exactly once among the records. */
static inline void
check_once(const struct rec *r, int nrec, int n)
{
	int	*seen = calloc((size_t)n + 1, sizeof(int)), i;

	ck_assert_int_eq(nrec, n);
	for (i = 0; i < nrec; i++) {
		ck_assert_int_ge(r[i].seq, 1);
		ck_assert_int_le(r[i].seq, n);
		ck_assert_msg(seen[r[i].seq]++ == 0, "task %ld ran twice",
		    r[i].seq);
	}
	free(seen);
}

/* /proc says the process is gone or a zombie. */
static inline int
dead(long pid)
{
	char	 p[64], *b, *c;
	int	 z;

	snprintf(p, sizeof(p), "/proc/%ld/stat", pid);
	if ((b = slurp(p, NULL)) == NULL)
		return 1;
	c = strrchr(b, ')');
	z = c == NULL || c[2] == 'Z' || c[2] == 'X';
	free(b);
	return z;
}

/* Every pid dead within limit seconds. */
static inline void
check_dead(const long *pids, int n, double limit)
{
	double	 t0 = now_s();
	int	 i;

	for (i = 0; i < n; i++)
		while (!dead(pids[i])) {
			ck_assert_msg(now_s() - t0 < limit, "task process %ld "
			    "outlived gpupool-run", pids[i]);
			nap(20);
		}
}

static inline void
wait_for(const char *what, double limit, int (*cond)(void *), void *arg)
{
	double	 t0 = now_s();

	while (!cond(arg)) {
		ck_assert_msg(now_s() - t0 < limit, "timed out waiting for %s",
		    what);
		nap(20);
	}
}

/* Exit 255, one line on stderr that contains want, and no task ran. */
static inline void
bad(const char *want, const char *log, const char *const *args)
{
	run_refused(want, log, NULL, NULL, args);
}

#define BAD(want, log, ...) \
	bad((want), (log), (const char *const []){ __VA_ARGS__, NULL })

/* Runs gpupool-run with one more variable in its environment (start()
 * clears GPUPOOL_FAKE_GPUS and GPUPOOL_TOPOLOGY): env(1) sets it, ahead
 * of any GPUPOOL_TEST_WRAP tool. Returns the wrap to restore. */
static inline char *
wrap_env(const char *assign)
{
	char	*old = getenv("GPUPOOL_TEST_WRAP"), *w;

	old = old != NULL ? strdup(old) : NULL;
	ck_assert_int_ge(asprintf(&w, "env %s %s", assign, old != NULL ? old :
	    ""), 0);
	setenv("GPUPOOL_TEST_WRAP", w, 1);
	free(w);
	return old;
}

static inline void
unwrap_env(char *old)
{
	if (old != NULL)
		setenv("GPUPOOL_TEST_WRAP", old, 1);
	else
		unsetenv("GPUPOOL_TEST_WRAP");
	free(old);
}

static inline void
joblog_upto(const char *path, long n)
{
	FILE	*f = fopen(path, "w");
	long	 i;

	ck_assert_ptr_nonnull(f);
	fprintf(f, "Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\tExitval\t"
	    "Signal\tCommand\tGPU\n");
	for (i = 1; i <= n; i++)
		fprintf(f, "%ld\t:\t1700000000.000\t0.001\t0\t0\t0\t0\ttrue\t"
		    "fake0\n", i);
	fclose(f);
}

#endif /* GP_RUN_TEST_H */
