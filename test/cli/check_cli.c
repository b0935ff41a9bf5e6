/*
 * check_cli.c: gpupool-run end to end. Each test runs the built binary
 * (GPUPOOL_RUN) on fake GPUs or explicit ids, with tasks that are the
 * probe helper (PROBE): the tasks write what they saw (their GPU, slot,
 * start and end) to a log, and the assertions are made here, on that log,
 * on the joblog, on the output and on the exit status. Timings only bound
 * how long something may take, generously, for a loaded 2-core box. The
 * helpers (running it, reading the logs) are cli_test.h's.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MANPAGE
#error "build with -DMANPAGE=path of docs/gpupool-run.1"
#endif

#include "cli_test.h"

/* Tasks "PROBE record LOG ms" n times. */
static char *
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
static void
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

/* Most intervals [start, end) alive at once among those matching. */
static int
max_overlap(const struct rec *r, int n, const char *cvd, int slot)
{
	int	 i, j, best = 0, c;

	for (i = 0; i < n; i++) {
		if ((cvd && strcmp(r[i].cvd, cvd)) || (slot >= 0 &&
		    r[i].slot != slot))
			continue;
		for (j = 0, c = 0; j < n; j++) {
			if ((cvd && strcmp(r[j].cvd, cvd)) || (slot >= 0 &&
			    r[j].slot != slot))
				continue;
			c += r[j].start <= r[i].start && r[i].start < r[j].end;
		}
		if (c > best)
			best = c;
	}
	return best;
}

/* No two tasks on one slot at once, at most per_gpu on a GPU, at most
 * gpus x per_gpu in all; CUDA_VISIBLE_DEVICES is ids[GPUPOOL_GPU]. */
static void
check_schedule(const struct rec *r, int n, const char *const *ids, int gpus,
    int per_gpu)
{
	int	 i, s, g;

	for (i = 0; i < n; i++) {
		ck_assert_int_ge(r[i].gpu, 0);
		ck_assert_int_lt(r[i].gpu, gpus);
		ck_assert_str_eq(r[i].cvd, ids[r[i].gpu]);
		ck_assert_int_ge(r[i].slot, 0);
		ck_assert_int_lt(r[i].slot, gpus * per_gpu);
		/* Slots are numbered GPU first (worker i on GPU i % gpus). */
		ck_assert_int_eq(r[i].slot % gpus, r[i].gpu);
		ck_assert_int_le(r[i].start, r[i].end);
	}
	for (s = 0; s < gpus * per_gpu; s++)
		ck_assert_int_le(max_overlap(r, n, NULL, s), 1);
	for (g = 0; g < gpus; g++)
		ck_assert_int_le(max_overlap(r, n, ids[g], -1), per_gpu);
	ck_assert_int_le(max_overlap(r, n, NULL, -1), gpus * per_gpu);
}

/* /proc says the process is gone or a zombie. */
static int
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
static void
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


static void
wait_for(const char *what, double limit, int (*cond)(void *), void *arg)
{
	double	 t0 = now_s();

	while (!cond(arg)) {
		ck_assert_msg(now_s() - t0 < limit, "timed out waiting for %s",
		    what);
		nap(20);
	}
}

START_TEST(every_task_once_fake_gpus)
{
	static const char *const ids[] = { "fake0", "fake1", "fake2", "fake3" };
	struct rec	 r[64];
	struct jrec	 j[64];
	struct res	 res;
	char		*log, *tasks, *jl;
	int		 n, nj, i, k;

	tmp_make();
	log = pathf("log");
	jl = pathf("joblog");
	tasks = record_tasks("tasks", log, 40, 30);
	RUN(&res, "--fake-gpus", "4", "--joblog", jl, "--quiet", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	n = read_log(log, r, NULL, NULL);
	check_once(r, n, 40);
	check_schedule(r, n, ids, 4, 1);
	/* The joblog: one line per task, and its GPU column says where
	 * the task itself found it ran. */
	nj = read_joblog(jl, j, 64, NULL);
	ck_assert_int_eq(nj, 40);
	for (i = 0; i < nj; i++) {
		ck_assert_int_eq(j[i].exitval, 0);
		ck_assert_int_eq(j[i].sig, 0);
		for (k = 0; k < n && r[k].seq != j[i].seq; k++)
			;
		ck_assert_int_lt(k, n);
		ck_assert_str_eq(j[i].gpu, r[k].cvd);
		ck_assert_ptr_nonnull(strstr(j[i].cmd, "record"));
	}
	tmp_remove();
}
END_TEST

START_TEST(every_task_once_gpu_ids)
{
	static const char *const ids[] = { "90", "91", "92", "93" };
	struct rec	 r[64];
	struct res	 res;
	char		*log, *tasks;
	int		 n;

	tmp_make();
	log = pathf("log");
	tasks = record_tasks("tasks", log, 24, 30);
	/* Ids as given (no GPU is seen: no machine has these), each index
	 * taken within the inherited list. */
	inherit_cvd = "90,91,92,93";
	RUN(&res, "--gpus", "0,1,2,3", "--quiet", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	n = read_log(log, r, NULL, NULL);
	check_once(r, n, 24);
	check_schedule(r, n, ids, 4, 1);
	tmp_remove();
}
END_TEST

START_TEST(per_gpu_two)
{
	static const char *const ids[] = { "fake0", "fake1" };
	struct rec	 r[64];
	struct res	 res;
	char		*log, *tasks;
	int		 n;

	tmp_make();
	log = pathf("log");
	tasks = record_tasks("tasks", log, 16, 300);
	RUN(&res, "--fake-gpus", "2", "--per-gpu", "2", "--quiet", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	n = read_log(log, r, NULL, NULL);
	check_once(r, n, 16);
	check_schedule(r, n, ids, 2, 2);
	/* Two slots on a GPU are really used together. */
	ck_assert_int_eq(max_overlap(r, n, "fake0", -1) == 2 ||
	    max_overlap(r, n, "fake1", -1) == 2, 1);
	tmp_remove();
}
END_TEST

START_TEST(resume_after_sigkill)
{
	struct rec	 r[64];
	struct beg	 b[64];
	struct jrec	 j[64];
	struct res	 res;
	struct want_lines w;
	char		*log, *log2, *tasks, *jl, *o, *e, torn[128];
	int		 n, nb, nj, i, k, bad, in1[16] = { 0 }, torn_seq = 0;
	long		 pids[64];
	pid_t		 pid;
	double		 t0;

	tmp_make();
	log = pathf("log");
	log2 = pathf("log2");
	jl = pathf("joblog");
	o = pathf("out");
	e = pathf("err");
	/* Four short tasks, then long ones: it is killed with the first
	 * four recorded and two long ones running. */
	tasks = pathf("tasks");
	{
		FILE	*f = fopen(tasks, "w");

		for (i = 0; i < 10; i++)
			fprintf(f, "%s record %s %d\n", PROBE, log,
			    i < 4 ? 50 : 20000);
		fclose(f);
	}
	t0 = now_s();
	pid = start(-1, o, e, (const char *const []){ "--fake-gpus", "2",
	    "--joblog", jl, "--quiet", tasks, NULL });
	w.path = jl;
	w.n = 1 + 4;	/* the header and four tasks */
	w.c = 0;
	wait_for("4 joblog lines", 30, have_lines, &w);
	w.path = log;
	w.n = 6;	/* four, and two long ones started */
	w.c = 'B';
	wait_for("the long tasks to start", 30, have_lines, &w);
	kill(pid, SIGKILL);
	finish(pid, t0, 10, o, e, &res);
	ck_assert_int_eq(res.code, 128 + SIGKILL);

	/* Nothing it started outlives it. */
	(void)read_log(log, r, b, &nb);
	ck_assert_int_eq(nb, 6);	/* as wait_for() saw */
	for (i = 0; i < nb; i++)
		pids[i] = b[i].pid;
	check_dead(pids, nb, 15);

	nj = read_joblog(jl, j, 64, NULL);
	ck_assert_int_eq(nj, 4);
	for (i = 0; i < nj; i++)
		in1[j[i].seq] = 1;
	/* A crash that tore the last line: that task must still run, and
	 * what follows must start on a line of its own. */
	for (i = 10; i >= 1 && in1[i]; i--)
		;
	torn_seq = i;
	ck_assert_int_ge(torn_seq, 1);
	n = snprintf(torn, sizeof(torn), "%d\t:\t1700000000.000\t0.4\t0\t0\t0",
	    torn_seq);
	{
		int	 fd = open(jl, O_WRONLY | O_APPEND);

		ck_assert_int_eq(write(fd, torn, (size_t)n), n);
		close(fd);
	}

	/* The rerun: the tasks (same file) now log to log2. */
	{
		FILE	*f = fopen(tasks, "w");

		for (i = 0; i < 10; i++)
			fprintf(f, "%s record %s %d\n", PROBE, log2, 50);
		fclose(f);
	}
	RUN(&res, "--fake-gpus", "2", "--joblog", jl, "--resume", "--quiet",
	    tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	/* The rerun changed the commands (another log): one warning. */
	ck_assert_ptr_nonnull(strstr(res.err, "another command"));
	n = read_log(log2, r, NULL, NULL);
	for (i = 0; i < n; i++)
		ck_assert_msg(!in1[r[i].seq], "task %ld ran again", r[i].seq);
	ck_assert_int_eq(n + nj, 10);
	for (k = 1; k <= 10; k++)
		if (!in1[k]) {
			for (i = 0; i < n && r[i].seq != k; i++)
				;
			ck_assert_msg(i < n, "task %d was not rerun", k);
		}
	nj = read_joblog(jl, j, 64, &bad);
	ck_assert_int_eq(nj, 10);
	ck_assert_int_eq(bad, 1);	/* the torn line, on its own */
	tmp_remove();
}
END_TEST

START_TEST(retries_keep_every_attempt)
{
	struct jrec	 j[16];
	struct res	 res;
	char		*tasks, *jl, *dir, line[4200];
	int		 nj;

	tmp_make();
	jl = pathf("joblog");
	dir = pathf("state");
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	tasks = pathf("tasks");
	snprintf(line, sizeof(line), "%s flaky %s 2\n", PROBE, dir);
	puts_file(tasks, line);
	RUN(&res, "--fake-gpus", "2", "--retries", "2", "--joblog", jl,
	    "--quiet", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	/* Only the last attempt's output is printed. */
	ck_assert_str_eq(res.out, "attempt 3 count 3\n");
	nj = read_joblog(jl, j, 16, NULL);
	ck_assert_int_eq(nj, 3);
	ck_assert_int_eq(j[0].seq, 1);
	ck_assert_int_eq(j[1].seq, 1);
	ck_assert_int_eq(j[2].seq, 1);
	ck_assert_int_eq(j[0].exitval, 1);
	ck_assert_int_eq(j[1].exitval, 1);
	ck_assert_int_eq(j[2].exitval, 0);

	/* One retry is not enough: the task fails, both attempts logged. */
	tmp_remove();
	tmp_make();
	jl = pathf("joblog");
	dir = pathf("state");
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	tasks = pathf("tasks");
	snprintf(line, sizeof(line), "%s flaky %s 2\n", PROBE, dir);
	puts_file(tasks, line);
	RUN(&res, "--fake-gpus", "2", "--retries", "1", "--joblog", jl, tasks);
	ck_assert_int_eq(res.code, 1);
	ck_assert_ptr_nonnull(strstr(res.err, "retrying, attempt 2 of 2"));
	ck_assert_int_eq(read_joblog(jl, j, 16, NULL), 2);
	ck_assert_int_eq(j[1].exitval, 1);
	tmp_remove();
}
END_TEST

START_TEST(timeout_kills_the_group)
{
	struct jrec	 j[8];
	struct res	 res;
	char		*tasks, *jl, *pids, *b, buf[8192];
	long		 p[8];
	int		 nj, i, np = 0;

	tmp_make();
	jl = pathf("joblog");
	pids = pathf("pids");
	tasks = pathf("tasks");
	/* A grandchild in the background, one that ignores SIGTERM, and
	 * one left behind by a task that ends well at once. */
	snprintf(buf, sizeof(buf),
	    "sh -c 'sleep 100 & echo $! >> %s; wait'\n"
	    "trap '' TERM; echo $$ >> %s; exec sleep 100\n"
	    "sleep 100 & echo $! >> %s\n", pids, pids, pids);
	puts_file(tasks, buf);
	RUN(&res, "--fake-gpus", "2", "--timeout", "1s", "--grace", "500ms",
	    "--joblog", jl, tasks);
	ck_assert_int_eq(res.code, 2);
	ck_assert_double_lt(res.secs, 20);
	ck_assert_ptr_nonnull(strstr(res.err, "timed out after 1s"));
	nj = read_joblog(jl, j, 8, NULL);
	ck_assert_int_eq(nj, 3);
	for (i = 0; i < nj; i++) {
		if (j[i].seq == 1) {
			ck_assert_int_eq(j[i].exitval, -1);
			ck_assert_int_eq(j[i].sig, SIGTERM);
		} else if (j[i].seq == 2) {
			ck_assert_int_eq(j[i].exitval, -1);
			ck_assert_int_eq(j[i].sig, SIGKILL);
		} else
			ck_assert_int_eq(j[i].exitval + j[i].sig, 0);
	}
	b = slurp(pids, NULL);
	ck_assert_ptr_nonnull(b);
	for (char *s = strtok(b, "\n"); s != NULL && np < 8; s = strtok(NULL,
	    "\n"))
		p[np++] = atol(s);
	ck_assert_int_eq(np, 3);
	check_dead(p, np, 10);
	tmp_remove();
}
END_TEST

/* How many processes have the word mark in their command line (zombies
 * have none); with kill_them, they are SIGKILLed, so that a failing test
 * leaves none behind. */
static int
marked(const char *mark, int kill_them)
{
	struct dirent	*de;
	DIR		*d = opendir("/proc");
	char		 p[300], word[48], *b;
	size_t		 len, i;
	int		 n = 0;

	ck_assert_ptr_nonnull(d);
	snprintf(word, sizeof(word), " %s ", mark);
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(p, sizeof(p), "/proc/%s/cmdline", de->d_name);
		if ((b = slurp(p, &len)) == NULL)
			continue;
		for (i = 0; i < len; i++)	/* words end with a blank */
			if (b[i] == '\0')
				b[i] = ' ';
		if (strstr(b, word) != NULL) {
			if (kill_them)
				kill((pid_t)atol(de->d_name), SIGKILL);
			n++;
		}
		free(b);
	}
	closedir(d);
	return n;
}

/*
 * Tasks whose children leave the task's process group: coreutils timeout
 * (a group of its own), setsid (a session), a job-control shell (a group
 * per job), and a plain background job. Each sleep's command line holds
 * mark; each task waits until its child has left the group (D/N is
 * written from inside it) and ends at once.
 */
static void
escaping_tasks(const char *tasks, const char *mark)
{
	char	 buf[8192];

	snprintf(buf, sizeof(buf),
	    "timeout 120 sh -c 'echo $$ > %s/1; exec sleep %s' & "
	    "until [ -s %s/1 ]; do sleep 0.01; done\n"
	    "setsid sh -c 'echo $$ > %s/2; exec sleep %s' & "
	    "until [ -s %s/2 ]; do sleep 0.01; done\n"
	    "bash -c 'set -m; sleep %s & echo $! > %s/3'\n"
	    "sleep %s & echo $! > %s/4\n",
	    tmp, mark, tmp, tmp, mark, tmp, mark, tmp, mark, tmp);
	puts_file(tasks, buf);
}

/* What a task leaves behind dies when it ends, whatever its group. */
START_TEST(leftovers_die_with_their_task)
{
	struct res	 res;
	char		*tasks, mark[32];
	int		 i, left;

	tmp_make();
	tasks = pathf("tasks");
	snprintf(mark, sizeof(mark), "1000.%ld1", (long)getpid());
	escaping_tasks(tasks, mark);
	RUN(&res, "--fake-gpus", "2", "--quiet", tasks);
	left = marked(mark, 1);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	for (i = 1; i <= 4; i++)	/* each had left when its task ended */
		ck_assert_int_eq(access(pathf("%d", i), F_OK), 0);
	ck_assert_msg(left == 0, "%d processes outlived their task", left);
	tmp_remove();
}
END_TEST

/* --timeout reaches a task's process that left its group (coreutils
 * timeout in a shell line). The task must have started it before the
 * deadline, which a loaded machine can delay: the deadline doubles until
 * it has. */
START_TEST(timeout_reaches_leftovers)
{
	struct res	 res;
	char		*tasks, *up, buf[4096], mark[32], tmo[16];
	int		 t, left;

	tmp_make();
	tasks = pathf("tasks");
	up = pathf("up");
	for (t = 1; t <= 16; t *= 2) {
		snprintf(mark, sizeof(mark), "1000.%ld%d", (long)getpid(), t);
		snprintf(buf, sizeof(buf), "timeout 120 sh -c 'echo $$ > %s; "
		    "exec sleep %s' & until [ -s %s ]; do sleep 0.01; done; "
		    "wait\n", up, mark, up);
		puts_file(tasks, buf);
		snprintf(tmo, sizeof(tmo), "%ds", t);
		RUN(&res, "--fake-gpus", "1", "--timeout", tmo, "--grace",
		    "200ms", tasks);
		left = marked(mark, 1);
		ck_assert_msg(res.code == 1, "exit %d: %s", res.code, res.err);
		ck_assert_ptr_nonnull(strstr(res.err, "timed out"));
		ck_assert_msg(left == 0, "%d processes outlived their task",
		    left);
		if (access(up, F_OK) == 0)
			break;
	}
	ck_assert_msg(t <= 16, "the task never started its child");
	tmp_remove();
}
END_TEST

/* What a test does to gpupool-run once its task's children left. */
enum blow {
	B_SIGINT,		/* ^C: its worker kills them, then exits */
	B_SIGKILL,		/* its death: so do its workers, alone */
	B_SIGINT_TWICE,		/* ^C, ^C: its workers are SIGKILLed */
	B_WORKER_KILLED,	/* the task's worker is SIGKILLed */
};

/* A string in the file at path (a struct want_str). */
/*
 * ^C, or the death of gpupool-run, reaches them too: at once for ^C (the
 * worker is done before gpupool-run exits), within the grace period
 * after a SIGKILL (the workers see their channel close). When the worker
 * itself is SIGKILLed (a second ^C, while the task ignores SIGTERM for a
 * grace period longer than the test; or from outside), it cannot: they
 * become gpupool-run's (its subreaper) and are gone before it exits.
 */
static void
leftovers_stopped_by(enum blow how)
{
	struct res	 res;
	struct want_lines w;
	struct want_str	 ws;
	char		*tasks, *o, *e, *b, buf[4096], mark[32];
	pid_t		 pid;
	double		 t0 = now_s();
	long		 worker;
	int		 i, left, want;

	tmp_make();
	tasks = pathf("tasks");
	o = pathf("out");
	e = pathf("err");
	snprintf(mark, sizeof(mark), "1000.%ld%d", (long)getpid(), how);
	snprintf(buf, sizeof(buf), "%secho $PPID > %s/w; "
	    "timeout 120 sh -c 'echo $$ > %s/1; exec sleep %s' & "
	    "until [ -s %s/1 ]; do sleep 0.01; done; "
	    "setsid sh -c 'echo $$ > %s/2; exec sleep %s' & "
	    "until [ -s %s/2 ]; do sleep 0.01; done; echo up > %s/up; wait\n",
	    how == B_SIGINT_TWICE ? "trap '' TERM; " : "", tmp, tmp, mark, tmp,
	    tmp, mark, tmp, tmp);
	puts_file(tasks, buf);
	pid = start(-1, o, e, (const char *const []){ "--fake-gpus", "1",
	    "--grace", how == B_SIGINT_TWICE ? "600" : "1", tasks, NULL });
	w.path = pathf("up");
	w.n = 1;
	w.c = 0;
	wait_for("the task's children to leave its group", 30, have_lines, &w);
	switch (how) {
	case B_SIGINT:
		kill(pid, SIGINT);
		want = 128 + SIGINT;
		break;
	case B_SIGKILL:
		kill(pid, SIGKILL);
		want = 128 + SIGKILL;
		break;
	case B_SIGINT_TWICE:
		/* Two pending SIGINTs are one: the second only once the
		 * first was read. */
		kill(pid, SIGINT);
		ws.path = e;
		ws.s = "again to kill";
		wait_for("the first SIGINT to be read", 30, have_str, &ws);
		kill(pid, SIGINT);
		want = 128 + SIGINT;
		break;
	default:
		/* The task's shell is the worker's child. */
		ck_assert_ptr_nonnull(b = slurp(pathf("w"), NULL));
		worker = atol(b);
		free(b);
		ck_assert_int_gt(worker, 1);
		ck_assert_int_ne(worker, pid);
		ck_assert_int_eq(kill((pid_t)worker, SIGKILL), 0);
		want = 1;	/* the task failed: its worker died */
		break;
	}
	finish(pid, t0, 30, o, e, &res);
	ck_assert_msg(res.code == want, "exit %d: %s", res.code, res.err);
	if (how == B_SIGKILL)
		for (t0 = now_s(); marked(mark, 0) > 0 && now_s() - t0 < 30; )
			nap(20);
	left = marked(mark, 1);
	for (i = 1; i <= 2; i++)
		ck_assert_int_eq(access(pathf("%d", i), F_OK), 0);
	ck_assert_msg(left == 0, "%d processes outlived their task", left);
	tmp_remove();
}

START_TEST(sigint_reaches_leftovers)
{
	leftovers_stopped_by(B_SIGINT);
}
END_TEST

START_TEST(master_death_reaches_leftovers)
{
	leftovers_stopped_by(B_SIGKILL);
}
END_TEST

START_TEST(second_sigint_reaches_leftovers)
{
	leftovers_stopped_by(B_SIGINT_TWICE);
}
END_TEST

START_TEST(worker_death_reaches_leftovers)
{
	leftovers_stopped_by(B_WORKER_KILLED);
}
END_TEST

/* An orphan that exits while its task runs is reaped then, not left a
 * zombie of the worker (its subreaper) until the task ends: the task
 * orphans a cat blocked on a FIFO (its subshell has exited), lets it
 * exit, and waits for it to be gone, within its timeout. */
START_TEST(orphans_are_reaped_while_the_task_runs)
{
	struct res	 res;
	char		*tasks, buf[4096];

	tmp_make();
	tasks = pathf("tasks");
	ck_assert_int_eq(mkfifo(pathf("f"), 0600), 0);
	snprintf(buf, sizeof(buf), "(cat %s/f > /dev/null & echo $! > %s/o); "
	    "p=$(cat %s/o); echo go > %s/f; "
	    "while [ -e /proc/$p ]; do sleep 0.01; done\n", tmp, tmp, tmp, tmp);
	puts_file(tasks, buf);
	RUN(&res, "--fake-gpus", "1", "--timeout", "30s", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	tmp_remove();
}
END_TEST

/* A process keeps its children across exec: what gpupool-run's parent
 * started before it exec'd gpupool-run (a monitor in a batch script:
 * nvidia-smi dmon -f log & exec gpupool-run ...) is gpupool-run's child
 * but no task's, and outlives the run. */
START_TEST(inherited_children_survive)
{
	struct res	 res;
	char		*tasks, *b, buf[512], mark[32];
	long		 sleeper;
	int		 left;

	tmp_make();
	tasks = pathf("tasks");
	puts_file(tasks, "true\ntrue\n");
	snprintf(mark, sizeof(mark), "1000.%ld5", (long)getpid());
	snprintf(buf, sizeof(buf), "sleep %s & echo $! > %s/s; exec \"$@\"",
	    mark, tmp);
	exec_via = buf;
	RUN(&res, "--fake-gpus", "2", "--quiet", tasks);
	exec_via = NULL;
	left = marked(mark, 0);
	ck_assert_ptr_nonnull(b = slurp(pathf("s"), NULL));
	sleeper = atol(b);
	free(b);
	ck_assert_int_gt(sleeper, 1);
	(void)kill((pid_t)sleeper, SIGKILL);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_msg(left == 1, "the inherited child did not outlive the "
	    "run (%d found)", left);
	tmp_remove();
}
END_TEST

/*
 * A leftover the worker kills but cannot reap does not hold its slot,
 * nor gpupool-run at its end: here one traced by this test (a debugger
 * attached to it), whose exit only its tracer sees until it collects
 * it. The worker gives up on it, the run ends; the test, its tracer,
 * then sees that it was SIGKILLed.
 */
START_TEST(unreapable_leftover_does_not_hang)
{
	struct res	 res;
	char		*tasks, *o, *e, *b, buf[1024], mark[32];
	pid_t		 pid, left;
	double		 t0 = now_s();
	struct want_lines w;
	int		 fd, st;

	tmp_make();
	tasks = pathf("tasks");
	o = pathf("out");
	e = pathf("err");
	ck_assert_int_eq(mkfifo(pathf("go"), 0600), 0);
	snprintf(mark, sizeof(mark), "1000.%ld6", (long)getpid());
	snprintf(buf, sizeof(buf), "sleep %s & echo $! > %s/s; read x < %s/go\n"
	    "true\n", mark, tmp, tmp);
	puts_file(tasks, buf);
	pid = start(-1, o, e, (const char *const []){ "--fake-gpus", "1",
	    tasks, NULL });
	w.path = pathf("s");
	w.n = 1;
	w.c = 0;
	wait_for("the task to start its child", 30, have_lines, &w);
	ck_assert_ptr_nonnull(b = slurp(w.path, NULL));
	left = (pid_t)atol(b);
	free(b);
	ck_assert_int_gt(left, 1);
	ck_assert_msg(ptrace(PTRACE_SEIZE, left, NULL, NULL) == 0,
	    "cannot trace the leftover: %s", strerror(errno));
	/* Let the task end. */
	ck_assert_int_ge(fd = open(pathf("go"), O_WRONLY), 0);
	ck_assert_int_eq(write(fd, "\n", 1), 1);
	close(fd);
	finish(pid, t0, 60, o, e, &res);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(waitpid(left, &st, __WALL), left);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
	    "the leftover was not SIGKILLed (status %#x)", st);
	ck_assert_int_eq(marked(mark, 1), 0);
	tmp_remove();
}
END_TEST

START_TEST(exit_codes)
{
	struct jrec	 j[8];
	struct res	 res;
	char		*tasks, *jl;
	FILE		*f;
	int		 i, nj;

	tmp_make();
	tasks = pathf("tasks");
	jl = pathf("joblog");
	puts_file(tasks, "true\nfalse\nexit 7\nno-such-command-gpupool\ntrue\n");
	RUN(&res, "--fake-gpus", "2", "--joblog", jl, tasks);
	ck_assert_int_eq(res.code, 3);
	ck_assert_ptr_nonnull(strstr(res.err, "2 ok, 3 failed"));
	nj = read_joblog(jl, j, 8, NULL);
	ck_assert_int_eq(nj, 5);
	for (i = 0; i < nj; i++)
		switch (j[i].seq) {
		case 2:
			ck_assert_int_eq(j[i].exitval, 1);
			break;
		case 3:		/* a builtin: through the shell */
			ck_assert_int_eq(j[i].exitval, 7);
			break;
		case 4:		/* not found, as a shell says it */
			ck_assert_int_eq(j[i].exitval, 127);
			break;
		default:
			ck_assert_int_eq(j[i].exitval, 0);
		}

	f = fopen(tasks, "w");
	for (i = 0; i < 102; i++)
		fprintf(f, "false\n");
	fclose(f);
	RUN(&res, "--fake-gpus", "2", "--quiet", tasks);
	ck_assert_int_eq(res.code, 101);

	puts_file(tasks, "true\n# only a comment\n\n");
	RUN(&res, "--fake-gpus", "1", "--quiet", tasks);
	ck_assert_int_eq(res.code, 0);
	ck_assert_str_eq(res.err, "");
	tmp_remove();
}
END_TEST

/* Exit 255, one line on stderr that contains want, and no task ran. */
static void
bad(const char *want, const char *log, const char *const *args)
{
	run_refused(want, log, NULL, NULL, args);
}

#define BAD(want, log, ...) \
	bad((want), (log), (const char *const []){ __VA_ARGS__, NULL })

START_TEST(bad_input)
{
	char	*tasks, *log, *dir, *file, *big, *missing, *want, line[4200];
	size_t	 n;

	tmp_make();
	log = pathf("log");
	tasks = pathf("tasks.txt");
	dir = pathf("adir");
	file = pathf("afile");
	missing = pathf("missing.txt");
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	puts_file(file, "x\n");
	snprintf(line, sizeof(line), "%s record %s 0\n", PROBE, log);
	puts_file(tasks, line);

	ck_assert_int_ge(asprintf(&want, "cannot open '%s': No such file or "
	    "directory", missing), 0);
	BAD(want, NULL, "--fake-gpus", "1", missing);
	ck_assert_int_ge(asprintf(&want, "cannot read '%s': Is a directory",
	    dir), 0);
	BAD(want, NULL, "--fake-gpus", "1", dir);
	if (geteuid() != 0) {	/* root reads it anyway */
		char	*locked = pathf("locked.txt");

		puts_file(locked, line);
		chmod(locked, 0);
		BAD("Permission denied", log, "--fake-gpus", "1", locked);
	}
	BAD("unknown option '--frobnicate'", log, "--frobnicate", tasks);
	BAD("needs a value", log, tasks, "--timeout");
	BAD("bad duration '15x'", log, "--fake-gpus", "1", "--timeout", "15x",
	    tasks);
	BAD("bad duration '-3'", log, "--fake-gpus", "1", "--grace", "-3",
	    tasks);
	BAD("bad policy", log, "--fake-gpus", "1", "--halt", "sometimes",
	    tasks);
	BAD("no GPU '5' among the 2 found", log, "--fake-gpus", "2", "--gpus",
	    "1,5", tasks);
	/* Ids as given: never a GPU outside what is inherited, nor one GPU
	 * twice. */
	BAD("no GPU is visible (CUDA_VISIBLE_DEVICES is set but empty)", log,
	    "--gpus", "0", tasks);
	inherit_cvd = "90,91";
	BAD("no GPU 'GPU-8932f937' among CUDA_VISIBLE_DEVICES=90,91", log,
	    "--gpus", "GPU-8932f937", tasks);
	inherit_cvd = NULL;
	BAD("GPU '00' is listed twice", log, "--gpus", "0,00", tasks);
	inherit_cvd = "";
	BAD("--resume needs --joblog", log, "--fake-gpus", "1", "--resume",
	    tasks);
	BAD("no tasks file given", NULL, "--fake-gpus", "1");
	ck_assert_int_ge(asprintf(&want, "cannot open joblog '%s/no/log'", tmp),
	    0);
	BAD(want, log, "--fake-gpus", "1", "--joblog", pathf("no/log"), tasks);
	BAD("Is a directory", log, "--fake-gpus", "1", "--joblog", dir, tasks);
	BAD("Not a directory", log, "--fake-gpus", "1", "--results",
	    pathf("afile/res"), tasks);
	BAD("--results: empty directory name", log, "--fake-gpus", "1",
	    "--results", "", tasks);
	BAD("--joblog: empty file name", log, "--fake-gpus", "1", "--joblog",
	    "", tasks);
	/* A FIFO whose reader stops would block the run for ever. */
	ck_assert_int_eq(mkfifo(pathf("fifo"), 0644), 0);
	ck_assert_int_ge(asprintf(&want, "joblog '%s' is not a regular file",
	    pathf("fifo")), 0);
	BAD(want, log, "--fake-gpus", "1", "--joblog", pathf("fifo"), tasks);

	/* Input errors name file:line, and nothing runs first. */
	snprintf(line, sizeof(line), "%s record %s 0\n# fine\n", PROBE, log);
	n = strlen(line);
	memcpy(line + n, "echo a\0b\n", 9);
	put(tasks, line, n + 9);
	ck_assert_int_ge(asprintf(&want, "%s:3: NUL byte", tasks), 0);
	BAD(want, log, "--fake-gpus", "1", tasks);

	big = malloc((1u << 20) + 8192);
	snprintf(line, sizeof(line), "%s record %s 0\necho ", PROBE, log);
	n = strlen(line);
	memcpy(big, line, n);
	memset(big + n, 'x', (1u << 20) + 2);
	big[n + (1u << 20) + 2] = '\n';
	put(tasks, big, n + (1u << 20) + 3);
	ck_assert_int_ge(asprintf(&want, "%s:2: task longer than 1 MiB",
	    tasks), 0);
	BAD(want, log, "--fake-gpus", "1", tasks);
	/* Joined lines count as one. */
	snprintf(line, sizeof(line), "%s record %s 0\necho \\\n", PROBE, log);
	n = strlen(line);
	memcpy(big, line, n);
	memset(big + n, 'x', (1u << 19) + 8);
	big[n + (1u << 19) + 8] = '\\';
	big[n + (1u << 19) + 9] = '\n';
	memset(big + n + (1u << 19) + 10, 'y', (1u << 19));
	big[n + (1u << 19) + 10 + (1u << 19)] = '\n';
	put(tasks, big, n + (1u << 20) + 11);
	BAD(want, log, "--fake-gpus", "1", tasks);
	free(big);

	snprintf(line, sizeof(line), "%s record %s 0\necho a \\", PROBE, log);
	puts_file(tasks, line);
	ck_assert_int_ge(asprintf(&want, "%s:2: unterminated '\\' "
	    "continuation", tasks), 0);
	BAD(want, log, "--fake-gpus", "1", tasks);
	tmp_remove();
}
END_TEST

/* The joblog is never the tasks file, by any path, and --results never
 * holds either: refused before anything runs or is written. */
START_TEST(joblog_is_not_the_tasks_file)
{
	char	*tasks, *log, *other, *hard, *res, *in1, *in2, line[4200];
	char	*want, *got;

	tmp_make();
	log = pathf("log");
	tasks = pathf("tasks");
	snprintf(line, sizeof(line), "%s record %s 0\n", PROBE, log);
	puts_file(tasks, line);
	other = pathf("sub/../tasks");
	ck_assert_int_eq(mkdir(pathf("sub"), 0755), 0);
	hard = pathf("hard");
	ck_assert_int_eq(link(tasks, hard), 0);
	BAD("is the tasks file", log, "--fake-gpus", "1", "--joblog", tasks,
	    tasks);
	BAD("is the tasks file", log, "--fake-gpus", "1", "--joblog", tasks,
	    "--resume", tasks);
	BAD("is the tasks file", log, "--fake-gpus", "1", "--joblog", other,
	    tasks);
	ck_assert_int_ge(asprintf(&want, "+%s", hard), 0);
	BAD("is the tasks file", log, "--fake-gpus", "1", "--joblog", want,
	    tasks);
	{
		/* Tasks from standard input that is the joblog. */
		struct res	 r;
		int		 fd = open(tasks, O_RDONLY);

		run_in(fd, 60, &r, (const char *const []){ "--fake-gpus", "1",
		    "--joblog", hard, "-", NULL });
		close(fd);
		ck_assert_msg(r.code == 255, "exit %d: %s", r.code, r.err);
		ck_assert_ptr_nonnull(strstr(r.err, "is the tasks file "
		    "(standard input)"));
		ck_assert_int_eq(access(log, F_OK), -1);
	}
	got = slurp(tasks, NULL);
	ck_assert_str_eq(got, line);

	/* --results DIR: the tasks file or the joblog as DIR/<seq>/stdout
	 * (through a symbolic link too) would be replaced. */
	res = pathf("res");
	ck_assert_int_eq(mkdir(res, 0755), 0);
	ck_assert_int_eq(mkdir(pathf("res/1"), 0755), 0);
	ck_assert_int_eq(mkdir(pathf("res/2"), 0755), 0);
	in1 = pathf("res/1/stdout");
	puts_file(in1, line);
	ck_assert_int_eq(symlink(in1, pathf("link")), 0);
	BAD("would overwrite the tasks file", log, "--fake-gpus", "1",
	    "--results", res, in1);
	BAD("would overwrite the tasks file", log, "--fake-gpus", "1",
	    "--results", res, pathf("link"));
	in2 = pathf("res/2/stdout");
	BAD("would overwrite the joblog", log, "--fake-gpus", "1",
	    "--results", res, "--joblog", in2, tasks);
	ck_assert_int_eq(access(in2, F_OK), -1);
	ck_assert_str_eq(slurp(in1, NULL), line);
	tmp_remove();
}
END_TEST

/* A file that a process has open: wait_for(fd_on, ...). */
struct fd_of {
	pid_t		 pid;
	const char	*path;
};

/* Whether process a->pid has a descriptor on file a->path. */
static int
fd_on(void *arg)
{
	struct fd_of	*a = arg;
	struct dirent	*de;
	struct stat	 want, st;
	char		 p[64];
	DIR		*d;
	int		 found = 0;

	ck_assert_int_eq(stat(a->path, &want), 0);
	snprintf(p, sizeof(p), "/proc/%ld/fd", (long)a->pid);
	ck_assert_ptr_nonnull(d = opendir(p));
	while ((de = readdir(d)) != NULL) {
		snprintf(p, sizeof(p), "/proc/%ld/fd/%s", (long)a->pid,
		    de->d_name);
		if (de->d_name[0] != '.' && stat(p, &st) == 0 &&
		    st.st_dev == want.st_dev && st.st_ino == want.st_ino)
			found = 1;
	}
	closedir(d);
	return found;
}

/* Two runs on one joblog and results directory: the second (with or
 * without --resume, even with no task) is refused at once, naming the
 * first; with --wait-lock it waits, then runs only what the first did
 * not. Each task runs once and every record survives. */
START_TEST(joblog_locked)
{
	struct rec	 r[16];
	struct jrec	 j[16];
	struct res	 res1, res4;
	struct want_lines w;
	struct fd_of	 fo;
	char		*log, *jl, *go, *tasks, *empty, *rdir, *want, *o, *e;
	char		*o4, *e4;
	FILE		*f;
	pid_t		 p1, p4;
	double		 t0;
	int		 i, n;

	tmp_make();
	log = pathf("log");
	jl = pathf("joblog");
	go = pathf("go");
	rdir = pathf("res");
	tasks = pathf("tasks");
	empty = pathf("empty");
	o = pathf("out1");
	e = pathf("err1");
	o4 = pathf("out4");
	e4 = pathf("err4");
	puts_file(empty, "");
	/* Task 3 holds the first run until the test says go. */
	ck_assert_ptr_nonnull(f = fopen(tasks, "w"));
	for (i = 1; i <= 5; i++)
		fprintf(f, "%s record %s 0%s%s%s\n", PROBE, log,
		    i == 3 ? "; while [ ! -e " : "", i == 3 ? go : "",
		    i == 3 ? " ]; do sleep 0.02; done" : "");
	fclose(f);
	t0 = now_s();
	p1 = start(-1, o, e, (const char *const []){ "--fake-gpus", "1",
	    "--joblog", jl, "--results", rdir, "--quiet", tasks, NULL });
	w.path = jl;
	w.n = 1 + 2;
	w.c = 0;
	wait_for("2 joblog lines", 60, have_lines, &w);
	w.path = log;
	w.n = 3;
	w.c = 'E';
	wait_for("task 3 to start", 60, have_lines, &w);

	ck_assert_int_ge(asprintf(&want, "is in use by process %ld",
	    (long)p1), 0);
	BAD(want, NULL, "--fake-gpus", "1", "--joblog", jl, "--resume",
	    "--quiet", tasks);
	BAD(want, NULL, "--fake-gpus", "1", "--joblog", jl, "--quiet", empty);
	BAD(want, NULL, "--fake-gpus", "1", "--results", rdir, "--quiet",
	    empty);
	ck_assert_int_eq(read_joblog(jl, j, 16, NULL), 2);

	/* --wait-lock: it waits (it has the joblog open, and the first
	 * run holds the lock), and starts when the first run ends. */
	p4 = start(-1, o4, e4, (const char *const []){ "--fake-gpus", "1",
	    "--joblog", jl, "--results", rdir, "--resume", "--wait-lock",
	    "--quiet", tasks, NULL });
	fo.pid = p4;
	fo.path = jl;
	wait_for("the second run to wait for the lock", 60, fd_on, &fo);
	ck_assert_int_eq(read_joblog(jl, j, 16, NULL), 2);
	puts_file(go, "");
	finish(p1, t0, 60, o, e, &res1);
	ck_assert_msg(res1.code == 0, "exit %d: %s", res1.code, res1.err);
	finish(p4, t0, 60, o4, e4, &res4);
	ck_assert_msg(res4.code == 0, "exit %d: %s", res4.code, res4.err);
	n = read_log(log, r, NULL, NULL);
	check_once(r, n, 5);
	n = read_joblog(jl, j, 16, NULL);
	ck_assert_int_eq(n, 5);
	for (i = 0; i < n; i++)
		ck_assert_int_eq(j[i].exitval, 0);
	tmp_remove();
}
END_TEST

/* A pipe is checked as it streams: the tasks before the bad line run,
 * then gpupool-run stops and exits 255. */
START_TEST(bad_input_streamed)
{
	struct res	 res;
	char		*log, line[4200];
	struct rec	 r[8];
	int		 p[2];
	size_t		 n;
	pid_t		 pid;
	double		 t0 = now_s();
	char		*o, *e;

	tmp_make();
	log = pathf("log");
	o = pathf("out");
	e = pathf("err");
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid = start(p[0], o, e, (const char *const []){ "--fake-gpus", "1",
	    "-", NULL });
	close(p[0]);
	snprintf(line, sizeof(line), "%s record %s 0\n", PROBE, log);
	n = strlen(line);
	memcpy(line + n, "x\0y\n", 4);
	ck_assert_int_eq(write(p[1], line, n + 4), (ssize_t)(n + 4));
	close(p[1]);
	finish(pid, t0, 60, o, e, &res);
	ck_assert_int_eq(res.code, 255);
	ck_assert_ptr_nonnull(strstr(res.err, "<stdin>:2: NUL byte"));
	ck_assert_int_eq(read_log(log, r, NULL, NULL), 1);
	tmp_remove();
}
END_TEST

/* Runs gpupool-run with one more variable in its environment (start()
 * clears GPUPOOL_FAKE_GPUS and GPUPOOL_TOPOLOGY): env(1) sets it, ahead
 * of any GPUPOOL_TEST_WRAP tool. Returns the wrap to restore. */
static char *
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

static void
unwrap_env(char *old)
{
	if (old != NULL)
		setenv("GPUPOOL_TEST_WRAP", old, 1);
	else
		unsetenv("GPUPOOL_TEST_WRAP");
	free(old);
}

/* A topology that is not a regular file, and durations in odd forms,
 * are refused before anything runs; a tiny duration is not "none". */
START_TEST(bad_topology_and_durations)
{
	static const char *const odd[] = { "0x10", "inf", "nan", "1e3", "+5",
	    " 5", "5 ", ".", "5.5.5", "-0", "0x1p3" };
	struct jrec	 j[4];
	struct res	 res;
	char		*tasks, *log, *fifo, *jl, *want, *old, line[4200];
	size_t		 i;

	tmp_make();
	log = pathf("log");
	jl = pathf("joblog");
	tasks = pathf("tasks.txt");
	fifo = pathf("topo.fifo");
	snprintf(line, sizeof(line), "%s record %s 0\n", PROBE, log);
	puts_file(tasks, line);
	ck_assert_int_eq(mkfifo(fifo, 0600), 0);

	BAD("--topology: '/dev/zero' is not a regular file", log,
	    "--fake-gpus", "1", "--topology", "/dev/zero", tasks);
	ck_assert_int_ge(asprintf(&want, "--topology: '%s' is not a regular "
	    "file", fifo), 0);
	BAD(want, log, "--fake-gpus", "1", "--topology", fifo, tasks);
	BAD(want, NULL, "--fake-gpus", "1", "--topology", fifo, "--show-gpus");
	ck_assert_int_ge(asprintf(&want, "GPUPOOL_TOPOLOGY: '%s' is not a "
	    "regular file", fifo), 0);
	ck_assert_int_ge(asprintf(&old, "GPUPOOL_TOPOLOGY=%s", fifo), 0);
	old = wrap_env(old);
	BAD(want, log, "--fake-gpus", "1", tasks);
	unwrap_env(old);

	for (i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
		ck_assert_int_ge(asprintf(&want, "bad duration '%s'", odd[i]),
		    0);
		BAD(want, log, "--fake-gpus", "1", "--timeout", odd[i], tasks);
		BAD(want, log, "--fake-gpus", "1", "--grace", odd[i], tasks);
		BAD(want, log, "--fake-gpus", "1", "--rank-timeout", odd[i],
		    tasks);
	}

	/* 0.0001 s is 1 ms, not 0 (no timeout): the task is stopped. */
	snprintf(line, sizeof(line), "%s record %s 20000\n", PROBE, log);
	puts_file(tasks, line);
	RUN(&res, "--fake-gpus", "1", "--timeout", "0.0001", "--joblog", jl,
	    tasks);
	ck_assert_msg(res.code == 1, "exit %d: %s", res.code, res.err);
	ck_assert_ptr_nonnull(strstr(res.err, "timed out"));
	ck_assert_double_lt(res.secs, 15);
	ck_assert_int_eq(read_joblog(jl, j, 4, NULL), 1);
	ck_assert_int_eq(j[0].sig, SIGTERM);
	tmp_remove();
}
END_TEST

START_TEST(output_blocks_not_interleaved)
{
	struct res	 res;
	char		*tasks, buf[8192], tag[16], *l, *save = NULL;
	int		 seen[4] = { 0 }, next[4] = { 0 }, cur = -1, blocks = 0;
	int		 t, i;

	tmp_make();
	tasks = pathf("tasks");
	buf[0] = '\0';
	for (t = 0; t < 4; t++)
		snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf),
		    "%s lines 3000 T%d\n", PROBE, t);
	puts_file(tasks, buf);
	RUN(&res, "--fake-gpus", "2", "--quiet", tasks);
	ck_assert_int_eq(res.code, 0);
	ck_assert_int_eq(count_lines(res.out), 4 * 3000);
	for (l = strtok_r(res.out, "\n", &save); l;
	    l = strtok_r(NULL, "\n", &save)) {
		ck_assert_int_eq(sscanf(l, "%15s %d", tag, &i), 2);
		t = tag[1] - '0';
		ck_assert_int_ge(t, 0);
		ck_assert_int_lt(t, 4);
		if (t != cur) {
			ck_assert_msg(!seen[t], "task T%d's output is split", t);
			seen[t] = 1;
			cur = t;
			blocks++;
		}
		ck_assert_int_eq(i, next[t]++);
	}
	ck_assert_int_eq(blocks, 4);
	tmp_remove();
}
END_TEST

/* Open a FIFO's read end without waiting for a writer, so that the
 * gpupool-run started next can open it for writing as its stdout. */
static int
fifo_reader(const char *path)
{
	int	 fd;

	ck_assert_int_eq(mkfifo(path, 0600), 0);
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	return fd;
}

/* A write error on stdout is the run's failure: one line says so, no
 * task starts after it, exit 255; the joblog has what ran. */
START_TEST(stdout_write_error_stops)
{
	struct jrec	 j[8];
	struct res	 res;
	char		*tasks, *jl, *e, *none, *fifo, *sync, buf[8192], *p;
	int		 rfd, fd;
	pid_t		 pid;
	double		 t0;

	tmp_make();
	tasks = pathf("tasks");
	jl = pathf("joblog");
	e = pathf("err");
	none = pathf("no-such-output");
	puts_file(tasks, "echo a\necho b\necho c\n");
	t0 = now_s();
	pid = start(-1, "/dev/full", e, (const char *const []){ "--fake-gpus",
	    "1", "--joblog", jl, tasks, NULL });
	finish(pid, t0, 60, none, e, &res);
	ck_assert_msg(res.code == 255, "exit %d: %s", res.code, res.err);
	ck_assert_ptr_nonnull(p = strstr(res.err, "cannot write standard "
	    "output: No space left on device"));
	ck_assert_ptr_null(strstr(p + 1, "cannot write standard output"));
	ck_assert_ptr_nonnull(strstr(res.err, "1 ok, 0 failed, 2 not started"));
	ck_assert_int_eq(read_joblog(jl, j, 8, NULL), 1);
	ck_assert_int_eq(j[0].seq, 1);
	ck_assert_int_eq(j[0].exitval, 0);

	/* | head -1 with SIGPIPE ignored (inherited through exec): the
	 * reader takes a line and leaves; task 2 writes only then. */
	fifo = pathf("fifo");
	sync = pathf("sync");
	ck_assert_int_eq(mkfifo(sync, 0600), 0);
	snprintf(buf, sizeof(buf), "echo a\ncat %s; echo b\necho c\n", sync);
	puts_file(tasks, buf);
	rfd = fifo_reader(fifo);
	ck_assert_ptr_ne(signal(SIGPIPE, SIG_IGN), SIG_ERR);
	t0 = now_s();
	pid = start(-1, fifo, e, (const char *const []){ "--fake-gpus", "1",
	    "--joblog", jl, tasks, NULL });
	(void)signal(SIGPIPE, SIG_DFL);
	{
		struct pollfd	 pfd = { rfd, POLLIN, 0 };

		ck_assert_int_eq(poll(&pfd, 1, 30000), 1);
		ck_assert_int_eq(read(rfd, buf, sizeof(buf)), 2);
		ck_assert_int_eq(memcmp(buf, "a\n", 2), 0);
	}
	close(rfd);
	/* Task 2 waits in cat until this opens and closes the FIFO. */
	while ((fd = open(sync, O_WRONLY | O_NONBLOCK | O_CLOEXEC)) == -1) {
		ck_assert_int_eq(errno, ENXIO);
		ck_assert_msg(now_s() - t0 < 30, "task 2 did not start");
		nap(10);
	}
	close(fd);
	finish(pid, t0, 60, none, e, &res);
	ck_assert_msg(res.code == 255, "exit %d: %s", res.code, res.err);
	ck_assert_ptr_nonnull(strstr(res.err, "cannot write standard output: "
	    "Broken pipe"));
	ck_assert_ptr_nonnull(strstr(res.err, "2 ok, 0 failed, 1 not started"));
	ck_assert_int_eq(read_joblog(jl, j, 8, NULL), 2);
	ck_assert_int_ne(j[0].seq, 3);
	ck_assert_int_ne(j[1].seq, 3);
	tmp_remove();
}
END_TEST

/*
 * A reader that stops reading (a pager left open, a FIFO, a terminal
 * paused with ^S) on standard output or error (fd) does not make the
 * master deaf: SIGTERM ends the run within the grace period, the running
 * task recorded as stopped. The other stream goes to a file (res).
 */
static void
stuck_stream(int fd, struct res *res)
{
	struct want_lines w;
	struct jrec	 j[4];
	char		*tasks, *jl, *f, *log, *fifo, buf[8192];
	int		 rfd;
	pid_t		 pid;
	double		 t0;

	tasks = pathf("tasks");
	jl = pathf("joblog");
	f = pathf("file");
	log = pathf("log");
	fifo = pathf("fifo");
	/* Over 200 KB on fd (a pipe holds 64 KiB), and a long task. */
	snprintf(buf, sizeof(buf), "%s lines 30000 T >&%d\n"
	    "%s record %s 60000\n", PROBE, fd, PROBE, log);
	puts_file(tasks, buf);
	rfd = fifo_reader(fifo);
	t0 = now_s();
	pid = start(-1, fd == 1 ? fifo : f, fd == 1 ? f : fifo,
	    (const char *const []){ "--fake-gpus", "2", "--grace", "1",
	    "--bar", "--joblog", jl, tasks, NULL });
	/* Task 1 is recorded before its output is written. */
	w.path = jl;
	w.n = 2;
	w.c = 0;
	wait_for("task 1 in the joblog", 30, have_lines, &w);
	w.path = log;
	w.n = 1;
	w.c = 'B';
	wait_for("task 2 to start", 30, have_lines, &w);
	kill(pid, SIGTERM);
	t0 = now_s();
	finish(pid, t0, 30, fd == 1 ? pathf("no-such-output") : f,
	    fd == 1 ? f : pathf("no-such-output"), res);
	close(rfd);
	ck_assert_msg(res->code == 128 + SIGTERM, "exit %d: %s", res->code,
	    res->err);
	ck_assert_double_lt(res->secs, 20);
	ck_assert_int_eq(read_joblog(jl, j, 4, NULL), 2);
	ck_assert_int_eq(j[1].seq, 2);
	ck_assert_int_eq(j[1].sig, SIGTERM);
}

START_TEST(stuck_stdout_still_killable)
{
	struct res	 res;

	tmp_make();
	stuck_stream(1, &res);
	ck_assert_ptr_nonnull(strstr(res.err, "were not written"));
	tmp_remove();
}
END_TEST

/* Task stderr, messages and the bar wait in a queue of their own. */
START_TEST(stuck_stderr_still_killable)
{
	struct res	 res;

	tmp_make();
	stuck_stream(2, &res);
	tmp_remove();
}
END_TEST

/* Workers hold neither the joblog nor DIR's lock file: their copies
 * would keep the locks after a SIGKILLed master for as long as they
 * live, and name a dead pid to the next run. A task lists what its
 * worker (its shell's parent) has open: DIR, but none of those. */
START_TEST(workers_hold_no_lock)
{
	struct res	 res;
	char		*tasks, *jl, *dir, *out, *rdir, *rjl, *rlock;

	tmp_make();
	tasks = pathf("tasks");
	jl = pathf("joblog");
	dir = pathf("res");
	puts_file(tasks, "for f in /proc/$PPID/fd/*; do readlink $f; done\n");
	RUN(&res, "--fake-gpus", "1", "--quiet", "--joblog", jl, "--results",
	    dir, tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_ptr_nonnull(out = slurp(pathf("res/1/stdout"), NULL));
	ck_assert_ptr_nonnull(rdir = realpath(dir, NULL));
	ck_assert_ptr_nonnull(rjl = realpath(jl, NULL));
	ck_assert_int_ge(asprintf(&rlock, "%s/.gpupool-run.lock", rdir), 0);
	ck_assert_msg(strstr(out, rdir) != NULL, "the worker's fds: %s", out);
	ck_assert_msg(strstr(out, rjl) == NULL, "the worker holds the "
	    "joblog: %s", out);
	ck_assert_msg(strstr(out, rlock) == NULL, "the worker holds DIR's "
	    "lock file: %s", out);
	tmp_remove();
}
END_TEST

static void
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

static void
true_tasks(const char *path, long n)
{
	FILE	*f = fopen(path, "w");
	long	 i;

	ck_assert_ptr_nonnull(f);
	for (i = 0; i < n; i++)
		fputs("true\n", f);
	fclose(f);
}

/* Memory does not grow with the tasks run or read: compare the largest
 * RSS (gpupool-run and its workers) of a small and a larger run, and
 * stream a 100,000-line file. Running 100,000 real tasks takes over a
 * minute on 2 cores: set GPUPOOL_TEST_SLOW=1 for that. */
START_TEST(bounded_memory)
{
	struct res	 small, large, res;
	struct jrec	*j;
	char		*tasks, *jl;
	long		 slack = UNDER_ASAN ? 16384 : 2048;
	long		 limit = UNDER_ASAN ? 200 * 1024 : 30 * 1024;

	if (getenv("GPUPOOL_TEST_WRAP") != NULL)
		return;		/* the tool's own memory is not ours */
	char		*seen;
	int		 nj, i;

	tmp_make();
	tasks = pathf("tasks");
	jl = pathf("joblog");
	true_tasks(tasks, 20);
	RUN(&small, "--fake-gpus", "2", "--quiet", tasks);
	ck_assert_int_eq(small.code, 0);
	true_tasks(tasks, 2000);
	RUN(&large, "--fake-gpus", "2", "--quiet", tasks);
	ck_assert_int_eq(large.code, 0);
	ck_assert_msg(large.maxrss_kb <= small.maxrss_kb + slack, "max RSS "
	    "%ld KiB after 2000 tasks, %ld KiB after 20", large.maxrss_kb,
	    small.maxrss_kb);
	ck_assert_int_lt(large.maxrss_kb, limit);

	/* 100,000 lines; the joblog says the first 99,000 are done. */
	true_tasks(tasks, 100000);
	joblog_upto(jl, 99000);
	RUN(&res, "--fake-gpus", "2", "--joblog", jl, "--resume", "--quiet",
	    tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_int_lt(res.maxrss_kb, limit);
	j = calloc(100001, sizeof(*j));
	seen = calloc(100001, 1);
	nj = read_joblog(jl, j, 100001, NULL);
	ck_assert_int_eq(nj, 100000);
	for (i = 99000; i < nj; i++) {	/* the last 1,000, once each */
		ck_assert_int_gt(j[i].seq, 99000);
		ck_assert_int_le(j[i].seq, 100000);
		ck_assert_int_eq(seen[j[i].seq]++, 0);
	}
	free(seen);
	free(j);

	if (getenv("GPUPOOL_TEST_SLOW") != NULL) {
		run_in(-1, 380, &res, (const char *const []){ "--fake-gpus",
		    "2", "--quiet", tasks, NULL });
		ck_assert_int_eq(res.code, 0);
		ck_assert_int_lt(res.maxrss_kb, limit);
	}
	tmp_remove();
}
END_TEST

/* What --resume keeps of a joblog follows its rows, not its largest
 * Seq: 100,000 rows with Seqs up to 99,999,999 (a hand-edited row used
 * to cost ~650 MB). */
START_TEST(resume_memory_sparse_seqs)
{
	struct res	 res;
	struct jrec	*j;
	char		*tasks, *jl;
	long		 limit = UNDER_ASAN ? 200 * 1024 : 64 * 1024, i;
	FILE		*f;
	int		 nj;

	if (getenv("GPUPOOL_TEST_WRAP") != NULL)
		return;		/* the tool's own memory is not ours */
	tmp_make();
	tasks = pathf("tasks");
	jl = pathf("joblog");
	true_tasks(tasks, 3);
	ck_assert_ptr_nonnull(f = fopen(jl, "w"));
	fprintf(f, "Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\tExitval\t"
	    "Signal\tCommand\tGPU\n");
	fprintf(f, "99999999\t:\t1700000000.000\t0.001\t0\t0\t0\t0\ttrue\t"
	    "fake0\n");
	for (i = 1; i < 100000; i++)
		fprintf(f, "%ld\t:\t1700000000.000\t0.001\t0\t0\t0\t0\ttrue\t"
		    "fake0\n", 1000 * i + i % 997);
	fclose(f);
	RUN(&res, "--fake-gpus", "1", "--joblog", jl, "--resume", "--quiet",
	    tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_msg(res.maxrss_kb < limit, "max RSS %ld KiB", res.maxrss_kb);
	/* Tasks 1-3 are not in it: they ran. */
	j = calloc(100004, sizeof(*j));
	ck_assert_ptr_nonnull(j);
	nj = read_joblog(jl, j, 100004, NULL);
	ck_assert_int_eq(nj, 100003);
	for (i = 100000; i < nj; i++)
		ck_assert_int_le(j[i].seq, 3);
	free(j);
	tmp_remove();
}
END_TEST

START_TEST(stdin_streams)
{
	struct res	 res;
	struct rec	 r[8];
	struct want_lines w;
	char		*log, *o, *e, line[4200];
	int		 p[2], n;
	pid_t		 pid;
	double		 t0 = now_s();

	tmp_make();
	log = pathf("log");
	o = pathf("out");
	e = pathf("err");
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid = start(p[0], o, e, (const char *const []){ "--fake-gpus", "2",
	    "--quiet", "-", NULL });
	close(p[0]);
	snprintf(line, sizeof(line), "%s record %s 0\n", PROBE, log);
	ck_assert_int_eq(write(p[1], line, strlen(line)),
	    (ssize_t)strlen(line));
	/* The first task runs while the pipe is still open. */
	w.path = log;
	w.n = 1;
	w.c = 'E';
	wait_for("the first task", 30, have_lines, &w);
	ck_assert_int_eq(waitpid(pid, NULL, WNOHANG), 0);
	ck_assert_int_eq(write(p[1], line, strlen(line)),
	    (ssize_t)strlen(line));
	close(p[1]);
	finish(pid, t0, 60, o, e, &res);
	ck_assert_int_eq(res.code, 0);
	n = read_log(log, r, NULL, NULL);
	check_once(r, n, 2);
	tmp_remove();
}
END_TEST

struct sigcase {
	int	 sig;
	int	 twice;
	int	 group;		/* to the process group, as a launcher does */
};

static void
interrupt(const struct sigcase *sc)
{
	struct res	 res;
	struct beg	 b[16];
	struct rec	 r[16];
	struct jrec	 j[16];
	struct want_lines w;
	struct want_str	 ws;
	char		*log, *jl, *tasks, *o, *e, buf[8192];
	long		 pids[16];
	int		 nb, nj, i;
	pid_t		 pid;
	double		 t0;

	tmp_make();
	log = pathf("log");
	jl = pathf("joblog");
	o = pathf("out");
	e = pathf("err");
	tasks = pathf("tasks");
	if (sc->twice) {
		/* Tasks that ignore SIGTERM: only the second signal ends
		 * them, long before the grace period. */
		for (i = 0, buf[0] = '\0'; i < 3; i++)
			snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf),
			    "trap '' TERM; exec %s record %s 60000\n",
			    PROBE, log);
		puts_file(tasks, buf);
	} else
		tasks = record_tasks("tasks", log, 3, 60000);
	t0 = now_s();
	pid = start(-1, o, e, (const char *const []){ "--fake-gpus", "2",
	    "--grace", "60", "--joblog", jl, tasks, NULL });
	w.path = log;
	w.n = 2;
	w.c = 'B';
	wait_for("two tasks to start", 30, have_lines, &w);
	kill(sc->group ? -pid : pid, sc->sig);
	if (sc->twice) {
		/* Two signals pending at once would be read as one. */
		ws.path = e;
		ws.s = "stopping the running tasks";
		wait_for("the first signal to be read", 30, have_str, &ws);
		kill(pid, sc->sig);
	}
	finish(pid, t0, 30, o, e, &res);
	ck_assert_msg(res.code == 128 + sc->sig, "exit %d: %s", res.code,
	    res.err);
	ck_assert_double_lt(res.secs, 30);
	(void)read_log(log, r, b, &nb);
	ck_assert_int_eq(nb, 2);	/* the third never started */
	for (i = 0; i < nb; i++) {
		ck_assert_int_ne(b[i].seq, 3);
		ck_assert_int_eq(b[i].pid, b[i].pgid);	/* its own group */
		pids[i] = b[i].pid;
	}
	check_dead(pids, nb, 10);
	nj = read_joblog(jl, j, 16, NULL);
	ck_assert_int_eq(nj, 2);
	for (i = 0; i < nj; i++) {
		ck_assert_int_eq(j[i].exitval, -1);
		ck_assert_int_eq(j[i].sig, sc->twice ? SIGKILL : SIGTERM);
	}
	tmp_remove();
}

START_TEST(sigint_stops_tasks)
{
	static const struct sigcase	 c = { SIGINT, 0, 0 };

	interrupt(&c);
}
END_TEST

START_TEST(sigterm_stops_tasks)
{
	static const struct sigcase	 c = { SIGTERM, 0, 0 };

	interrupt(&c);
}
END_TEST

START_TEST(second_sigint_kills)
{
	static const struct sigcase	 c = { SIGINT, 1, 0 };

	interrupt(&c);
}
END_TEST

/* mpirun, Slurm or systemd signal the whole group, workers included:
 * the tasks are still stopped (TERM, grace) and recorded as such. */
START_TEST(sigterm_to_the_group_stops_tasks)
{
	static const struct sigcase	 c = { SIGTERM, 0, 1 };

	interrupt(&c);
}
END_TEST

/* A grace period past 49.7 days (2^32 ms) is not cut down to a few ms
 * on its way to the pool's own backstop: a stopped task that takes a
 * moment to clean up on SIGTERM is not SIGKILLed meanwhile. */
START_TEST(huge_grace_still_terms)
{
	struct want_lines w;
	struct jrec	 j[4];
	struct res	 res;
	char		*tasks, *log, *jl, *o, *e, line[4200];
	pid_t		 pid;
	double		 t0;

	tmp_make();
	log = pathf("log");
	jl = pathf("joblog");
	o = pathf("out");
	e = pathf("err");
	tasks = pathf("tasks");
	snprintf(line, sizeof(line), "trap 'sleep 0.5; exit 7' TERM; "
	    "%s record %s 60000 & wait\n", PROBE, log);
	puts_file(tasks, line);
	t0 = now_s();
	pid = start(-1, o, e, (const char *const []){ "--fake-gpus", "1",
	    "--grace", "4294965297ms", "--joblog", jl, tasks, NULL });
	w.path = log;
	w.n = 1;
	w.c = 'B';
	wait_for("the task to start", 30, have_lines, &w);
	kill(pid, SIGTERM);
	finish(pid, t0, 30, o, e, &res);
	ck_assert_msg(res.code == 128 + SIGTERM, "exit %d: %s", res.code,
	    res.err);
	ck_assert_int_eq(read_joblog(jl, j, 4, NULL), 1);
	/* Stopped, so recorded with the signal it was sent (not 9). */
	ck_assert_int_eq(j[0].sig, SIGTERM);
	tmp_remove();
}
END_TEST

/* The pids of pid's children (its workers). */
static int
children(pid_t pid, long *kids, int max)
{
	char	 p[64], *b, *s, *save = NULL;
	int	 n = 0;

	snprintf(p, sizeof(p), "/proc/%ld/task/%ld/children", (long)pid,
	    (long)pid);
	ck_assert_ptr_nonnull(b = slurp(p, NULL));
	for (s = strtok_r(b, " \n", &save); s != NULL && n < max;
	    s = strtok_r(NULL, " \n", &save))
		kids[n++] = atol(s);
	free(b);
	return n;
}

/* A signal that comes after tasks were handed to workers but before any
 * started: the message promises no count the summary then contradicts,
 * and the summary says they were not started. Workers are held stopped
 * (SIGSTOP) while their tasks arrive, so that none can start first. */
START_TEST(sigint_before_tasks_start)
{
	struct want_lines w;
	struct res	 res;
	char		*log, *jl, *o, *e, line[4200];
	long		 kids[8];
	int		 p[2], i, n, queued;
	pid_t		 pid;
	double		 t0;

	tmp_make();
	log = pathf("log");
	jl = pathf("joblog");
	o = pathf("out");
	e = pathf("err");
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	t0 = now_s();
	pid = start(p[0], o, e, (const char *const []){ "--fake-gpus", "2",
	    "--grace", "60", "--joblog", jl, "-", NULL });
	close(p[0]);
	/* The joblog is created once the pool is up. */
	w.path = jl;
	w.n = 1;
	w.c = 0;
	wait_for("the joblog", 30, have_lines, &w);
	ck_assert_int_eq(n = children(pid, kids, 8), 2);
	for (i = 0; i < n; i++)
		ck_assert_int_eq(kill((pid_t)kids[i], SIGSTOP), 0);
	snprintf(line, sizeof(line), "%s record %s 60000\n", PROBE, log);
	for (i = 0; i < 2; i++)
		ck_assert_int_eq(write(p[1], line, strlen(line)),
		    (ssize_t)strlen(line));
	/* Both read (so both handed out) before the signal. */
	do {
		ck_assert_int_eq(ioctl(p[1], FIONREAD, &queued), 0);
		ck_assert_msg(now_s() - t0 < 30, "tasks not read");
		if (queued > 0)
			nap(10);
	} while (queued > 0);
	kill(pid, SIGINT);
	w.path = e;
	w.n = 1;
	w.c = 0;
	wait_for("the SIGINT message", 30, have_lines, &w);
	for (i = 0; i < n; i++)
		ck_assert_int_eq(kill((pid_t)kids[i], SIGCONT), 0);
	close(p[1]);
	finish(pid, t0, 60, o, e, &res);
	ck_assert_msg(res.code == 128 + SIGINT, "exit %d: %s", res.code,
	    res.err);
	ck_assert_int_eq(access(log, F_OK), -1);	/* nothing ran */
	ck_assert_msg(strstr(res.err, "stopping 2 running") == NULL,
	    "a count the summary contradicts: %s", res.err);
	ck_assert_ptr_null(strstr(res.err, " stopped"));
	/* The pipe was still open: more could have come. */
	ck_assert_msg(strstr(res.err, "0 ok, 0 failed, 2 not started and the "
	    "rest of the input not read (got SIGINT)") != NULL, "%s", res.err);
	tmp_remove();
}
END_TEST

/* GPUPOOL_FAKE_GPUS=4 in the environment, --fake-gpus 0 on the command
 * line: the option wins, and 0 means the real GPUs (none here). */
START_TEST(fake_gpus_zero_beats_env)
{
	struct res	 res;
	char		*old;

	tmp_make();
	old = wrap_env("GPUPOOL_FAKE_GPUS=4");
	RUN(&res, "--show-gpus");
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	/* A header, a line per GPU, the GPU use line (no NVML here), the
	 * task cleanup line. */
	ck_assert_int_eq(count_lines(res.out), 7);
	RUN(&res, "--fake-gpus", "2", "--show-gpus");
	ck_assert_int_eq(res.code, 0);
	ck_assert_int_eq(count_lines(res.out), 5);
	RUN(&res, "--fake-gpus", "0", "--show-gpus");
	unwrap_env(old);
	ck_assert_msg(res.code == 255, "exit %d: %s", res.code, res.err);
	ck_assert_ptr_null(strstr(res.out, "fake"));
	ck_assert_ptr_nonnull(strstr(res.err, "no GPU found"));
	tmp_remove();
}
END_TEST

START_TEST(dry_run_and_show_gpus_run_nothing)
{
	struct res	 res;
	char		*tasks, *log, *jl;

	tmp_make();
	log = pathf("log");
	jl = pathf("joblog");
	tasks = record_tasks("tasks", log, 3, 0);
	RUN(&res, "--fake-gpus", "2", "--dry-run", "--joblog", jl, tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(access(log, F_OK), -1);
	ck_assert_int_eq(access(jl, F_OK), -1);
	ck_assert_int_eq(count_lines(res.out), 4);
	ck_assert_ptr_nonnull(strstr(res.out, "\n1\t0\t0\tfake0\t"));
	ck_assert_ptr_nonnull(strstr(res.out, "\n2\t1\t1\tfake1\t"));
	ck_assert_ptr_nonnull(strstr(res.out, "\n3\t0\t0\tfake0\t"));
	ck_assert_ptr_nonnull(strstr(res.out, " record "));

	/* With --resume it shows only what would still run. */
	joblog_upto(jl, 2);
	RUN(&res, "--fake-gpus", "2", "--dry-run", "--joblog", jl, "--resume",
	    tasks);
	ck_assert_int_eq(res.code, 0);
	ck_assert_int_eq(count_lines(res.out), 2);
	ck_assert_ptr_nonnull(strstr(res.out, "\n3\t0\t0\tfake0\t"));
	ck_assert_int_eq(access(log, F_OK), -1);

	RUN(&res, "--fake-gpus", "2", "--per-gpu", "2", "--show-gpus");
	ck_assert_int_eq(res.code, 0);
	ck_assert_int_eq(count_lines(res.out), 5);
	ck_assert_ptr_nonnull(strstr(res.out, "\ntask cleanup: subreaper\n"));
	ck_assert_ptr_nonnull(strstr(res.out, "\n0\tfake0\tfake GPU 0\t"));
	ck_assert_ptr_nonnull(strstr(res.out, "\n1\tfake1\tfake GPU 1\t"));
	ck_assert_ptr_nonnull(strstr(res.out, " | "));	/* two slots' cores */
	tmp_remove();
}
END_TEST

extern char	**environ;

/* The lines of s that start with pfx. */
static int
lines_with(const char *s, const char *pfx)
{
	int	 n = 0;

	for (; s != NULL && *s != '\0'; s = strchr(s, '\n'), s += s != NULL)
		n += strncmp(s, pfx, strlen(pfx)) == 0;
	return n;
}

/* A launcher can leave a variable twice in the environment: the task
 * gets one copy of each variable gpupool-run sets, its own. */
START_TEST(tasks_see_one_copy_of_each_variable)
{
	static char		*twice[] = {
		"CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7",
		"CUDA_DEVICE_ORDER=FASTEST_FIRST", "GPUPOOL_SLOT=7",
		"CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7",
		"CUDA_DEVICE_ORDER=FASTEST_FIRST", "GPUPOOL_SLOT=7" };
	struct res		 res;
	char			*tasks, **env, **old = environ;
	size_t			 n;

	tmp_make();
	tasks = pathf("tasks");
	puts_file(tasks, "env\n");
	for (n = 0; environ[n] != NULL; n++)
		;
	env = calloc(n + 7, sizeof(*env));
	ck_assert_ptr_nonnull(env);
	memcpy(env, environ, n * sizeof(*env));
	memcpy(env + n, twice, sizeof(twice));
	environ = env;		/* what start() execs gpupool-run with */
	RUN(&res, "--fake-gpus", "1", "--quiet", tasks);
	environ = old;
	free(env);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(lines_with(res.out, "CUDA_VISIBLE_DEVICES="), 1);
	ck_assert_int_eq(lines_with(res.out, "CUDA_VISIBLE_DEVICES=fake0\n"),
	    1);
	ck_assert_int_eq(lines_with(res.out, "CUDA_DEVICE_ORDER="), 1);
	ck_assert_int_eq(lines_with(res.out, "CUDA_DEVICE_ORDER=PCI_BUS_ID\n"),
	    1);
	ck_assert_int_eq(lines_with(res.out, "GPUPOOL_SLOT="), 1);
	ck_assert_int_eq(lines_with(res.out, "GPUPOOL_SLOT=0\n"), 1);
	tmp_remove();
}
END_TEST

/* --threads: by default each task's thread pools are as many as the
 * CPUs it is bound to (2 slots on this machine's CPUs: each its share),
 * a variable in the environment is kept, N sets them, no leaves them. */
START_TEST(tasks_threads_fit_their_cpus)
{
	struct res	 res;
	char		*tasks, want[64];
	cpu_set_t	 cs;
	int		 n;

	ck_assert_int_eq(sched_getaffinity(0, sizeof(cs), &cs), 0);
	n = CPU_COUNT(&cs) >= 2 ? CPU_COUNT(&cs) / 2 : 1;
	tmp_make();
	tasks = pathf("tasks");
	puts_file(tasks, "echo omp=$OMP_NUM_THREADS blas=$OPENBLAS_NUM_THREADS"
	    " mkl=$MKL_NUM_THREADS\n" "echo omp=$OMP_NUM_THREADS\n");
	ck_assert_int_eq(unsetenv("OMP_NUM_THREADS"), 0);
	ck_assert_int_eq(unsetenv("OPENBLAS_NUM_THREADS"), 0);
	ck_assert_int_eq(setenv("MKL_NUM_THREADS", "7", 1), 0);
	RUN(&res, "--fake-gpus", "2", "--quiet", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	snprintf(want, sizeof(want), "omp=%d blas=%d mkl=7\n", n, n);
	ck_assert_msg(lines_with(res.out, want) == 1, "%s", res.out);
	RUN(&res, "--fake-gpus", "2", "--threads", "3", "--quiet", tasks);
	ck_assert_int_eq(lines_with(res.out, "omp=3 blas=3 mkl=7\n"), 1);
	RUN(&res, "--fake-gpus", "2", "--threads", "no", "--quiet", tasks);
	ck_assert_int_eq(lines_with(res.out, "omp= blas= mkl=7\n"), 1);
	ck_assert_int_eq(lines_with(res.out, "omp=\n"), 1);
	RUN(&res, "--threads", "0", tasks);
	ck_assert_int_eq(res.code, 255);
	ck_assert_ptr_nonnull(strstr(res.err, "--threads: '0'"));
	unsetenv("MKL_NUM_THREADS");
	tmp_remove();
}
END_TEST

START_TEST(tasks_see_only_stdio)
{
	struct res	 res;
	char		*tasks, line[4200];

	if (getenv("GPUPOOL_TEST_WRAP") != NULL)
		return;		/* valgrind's log fds reach untraced tasks */
	tmp_make();
	tasks = pathf("tasks");
	snprintf(line, sizeof(line), "%s fds\n", PROBE);
	puts_file(tasks, line);
	RUN(&res, "--fake-gpus", "1", "--quiet", tasks);
	ck_assert_int_eq(res.code, 0);
	ck_assert_str_eq(res.out, "0 1 2\n");
	RUN(&res, "--fake-gpus", "1", "--quiet", "--results", pathf("res"),
	    tasks);
	ck_assert_int_eq(res.code, 0);
	ck_assert_str_eq(slurp(pathf("res/1/stdout"), NULL), "0 1 2\n");
	tmp_remove();
}
END_TEST

START_TEST(results_layout)
{
	struct res	 res;
	char		*tasks, *dir, buf[8192];

	tmp_make();
	tasks = pathf("tasks");
	dir = pathf("out/results");
	snprintf(buf, sizeof(buf), "%s say out1 err1 0\n%s say out2 err2 3\n",
	    PROBE, PROBE);
	puts_file(tasks, buf);
	RUN(&res, "--fake-gpus", "2", "--quiet", "--results", dir, tasks);
	ck_assert_int_eq(res.code, 1);
	ck_assert_str_eq(res.out, "");
	ck_assert_str_eq(slurp(pathf("out/results/1/stdout"), NULL), "out1\n");
	ck_assert_str_eq(slurp(pathf("out/results/1/stderr"), NULL), "err1\n");
	ck_assert_str_eq(slurp(pathf("out/results/1/exitval"), NULL), "0\n");
	ck_assert_str_eq(slurp(pathf("out/results/2/stdout"), NULL), "out2\n");
	ck_assert_str_eq(slurp(pathf("out/results/2/exitval"), NULL), "3\n");
	/* No temporary file is left behind. */
	ck_assert_int_eq(access(pathf("out/results/1/stdout.live"), F_OK), -1);
	ck_assert_int_eq(access(pathf("out/results/2/.exitval.tmp"), F_OK), -1);
	tmp_remove();
}
END_TEST

/* --results: an earlier attempt's exitval goes before anything of the
 * new one is renamed into place, a result that cannot be written fails
 * its task (joblog, exit status, stderr), and --resume runs a task whose
 * exitval is missing again. The failure is forced with a directory
 * where the exitval's temporary file goes. */
START_TEST(results_exitval_goes_first)
{
	struct res	 res;
	struct jrec	 j[16];
	char		*tasks, *jl, *dir, *ev, buf[8192];
	int		 nj, i;

	tmp_make();
	tasks = pathf("tasks");
	jl = pathf("joblog");
	dir = pathf("res");
	snprintf(buf, sizeof(buf), "%s say out1 err1 0\n%s say out1 err1 0\n",
	    PROBE, PROBE);
	puts_file(tasks, buf);
	RUN(&res, "--fake-gpus", "1", "--quiet", "--results", dir, tasks);
	ck_assert_int_eq(res.code, 0);
	ck_assert_str_eq(slurp(pathf("res/1/exitval"), NULL), "0\n");
	ck_assert_int_eq(mkdir(pathf("res/1/.exitval.tmp"), 0755), 0);
	ck_assert_int_eq(mkdir(pathf("res/2/.exitval.tmp"), 0755), 0);
	snprintf(buf, sizeof(buf), "%s say out2 err2 3\n%s say ok2 e2 0\n",
	    PROBE, PROBE);
	puts_file(tasks, buf);
	RUN(&res, "--fake-gpus", "1", "--joblog", jl, "--results", dir,
	    tasks);
	ck_assert_msg(res.code == 2, "exit %d: %s", res.code, res.err);
	ck_assert_ptr_nonnull(strstr(res.err, "cannot write '2' in the "
	    "results directory"));
	/* exitval there => stdout of the same attempt. */
	ev = slurp(pathf("res/1/exitval"), NULL);
	ck_assert_msg(ev == NULL || (strcmp(ev, "3\n") == 0 &&
	    strcmp(slurp(pathf("res/1/stdout"), NULL), "out2\n") == 0),
	    "exitval '%s' beside stdout '%s'", ev,
	    slurp(pathf("res/1/stdout"), NULL));
	ck_assert_ptr_null(slurp(pathf("res/2/exitval"), NULL));
	nj = read_joblog(jl, j, 16, NULL);
	ck_assert_int_eq(nj, 2);
	for (i = 0; i < nj; i++) {
		ck_assert_int_eq(j[i].exitval, -1);
		ck_assert_int_eq(j[i].sig, 0);
	}
	/* Resume: both are recorded, neither has its exitval: both run. */
	ck_assert_int_eq(rmdir(pathf("res/1/.exitval.tmp")), 0);
	ck_assert_int_eq(rmdir(pathf("res/2/.exitval.tmp")), 0);
	RUN(&res, "--fake-gpus", "1", "--joblog", jl, "--resume", "--quiet",
	    "--results", dir, tasks);
	ck_assert_msg(res.code == 1, "exit %d: %s", res.code, res.err);
	ck_assert_str_eq(slurp(pathf("res/1/exitval"), NULL), "3\n");
	ck_assert_str_eq(slurp(pathf("res/1/stdout"), NULL), "out2\n");
	ck_assert_str_eq(slurp(pathf("res/2/exitval"), NULL), "0\n");
	ck_assert_str_eq(slurp(pathf("res/2/stdout"), NULL), "ok2\n");
	ck_assert_int_eq(read_joblog(jl, j, 16, NULL), 4);
	tmp_remove();
}
END_TEST

/* --results opens nothing it did not create: a hard link to a file
 * outside DIR, a FIFO and a symbolic link planted as temporaries are
 * removed, not written through, waited on or renamed into place. */
START_TEST(results_planted_files)
{
	struct res	 res;
	struct stat	 st;
	char		*tasks, *dir, *victim, *victim2, buf[8192];

	tmp_make();
	tasks = pathf("tasks");
	dir = pathf("res");
	victim = pathf("victim");
	victim2 = pathf("victim2");
	puts_file(victim, "precious\n");
	puts_file(victim2, "precious too\n");
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	ck_assert_int_eq(mkdir(pathf("res/1"), 0755), 0);
	ck_assert_int_eq(mkdir(pathf("res/2"), 0755), 0);
	ck_assert_int_eq(mkdir(pathf("res/3"), 0755), 0);
	ck_assert_int_eq(link(victim, pathf("res/1/stdout.live")), 0);
	ck_assert_int_eq(mkfifo(pathf("res/2/stderr.live"), 0644), 0);
	ck_assert_int_eq(symlink(victim2, pathf("res/3/stderr.live")), 0);
	snprintf(buf, sizeof(buf), "%s say out1 err1 0\n%s say out2 err2 0\n"
	    "%s say out3 err3 0\n", PROBE, PROBE, PROBE);
	puts_file(tasks, buf);
	/* A worker blocked in open() would hold the run for ever. */
	run_in(-1, 45, &res, (const char *const []){ "--fake-gpus", "2",
	    "--quiet", "--results", dir, tasks, NULL });
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_str_eq(slurp(victim, NULL), "precious\n");
	ck_assert_str_eq(slurp(victim2, NULL), "precious too\n");
	ck_assert_str_eq(slurp(pathf("res/1/stdout"), NULL), "out1\n");
	ck_assert_str_eq(slurp(pathf("res/2/stderr"), NULL), "err2\n");
	ck_assert_int_eq(lstat(pathf("res/3/stderr"), &st), 0);
	ck_assert_msg(S_ISREG(st.st_mode), "res/3/stderr is not a file");
	ck_assert_str_eq(slurp(pathf("res/3/stderr"), NULL), "err3\n");
	ck_assert_str_eq(slurp(pathf("res/3/exitval"), NULL), "0\n");
	tmp_remove();
}
END_TEST

/* A TAB in a command or a newline in a GPU id does not break the
 * joblog's columns, and a resume still matches the commands. */
START_TEST(joblog_escapes_tabs)
{
	struct res	 res;
	struct jrec	 j[8];
	char		*tasks, *jl, *b, *l, *save = NULL;
	int		 nj, i, tabs, lines = 0;

	tmp_make();
	tasks = pathf("tasks");
	jl = pathf("joblog");
	puts_file(tasks, "echo a\tb\necho c\n");
	/* Ids as given, inside the inherited list (no machine has these
	 * UUIDs; only the driver could say they name no GPU). */
	inherit_cvd = "GPU-g\t1,GPU-h\n2";
	RUN(&res, "--gpus", "0,1", "--joblog", jl, "--quiet", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	b = slurp(jl, NULL);
	ck_assert_ptr_nonnull(b);
	for (l = strtok_r(b, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		for (i = 0, tabs = 0; l[i]; i++)
			tabs += l[i] == '\t';
		ck_assert_msg(tabs == 12, "%d fields in '%s'", tabs + 1, l);
		lines++;
	}
	ck_assert_int_eq(lines, 3);
	nj = read_joblog(jl, j, 8, NULL);
	ck_assert_int_eq(nj, 2);
	for (i = 0; i < nj; i++) {
		ck_assert_str_eq(j[i].cmd, j[i].seq == 1 ? "echo a\\tb" :
		    "echo c");
		ck_assert_msg(strcmp(j[i].gpu, "GPU-g\\t1") == 0 ||
		    strcmp(j[i].gpu, "GPU-h\\n2") == 0, "GPU '%s'", j[i].gpu);
	}
	RUN(&res, "--gpus", "0,1", "--joblog", jl, "--resume", tasks);
	inherit_cvd = "";
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_str_eq(res.out, "");
	ck_assert_ptr_null(strstr(res.err, "another command"));
	ck_assert_ptr_nonnull(strstr(res.err, "2 skipped"));
	tmp_remove();
}
END_TEST

/* --joblog +FILE appends to FILE, as GNU parallel's does: its header
 * once, every run's lines kept. The last --joblog given wins, '+' or
 * not: a plain FILE after +FILE rewrites it. */
START_TEST(joblog_plus_file_appends)
{
	struct res	 res;
	char		*tasks, *jl, *plus, *b;

	tmp_make();
	tasks = pathf("tasks");
	jl = pathf("joblog");
	ck_assert_int_ge(asprintf(&plus, "+%s", jl), 0);
	puts_file(tasks, "true\ntrue\n");
	RUN(&res, "--fake-gpus", "1", "--joblog", jl, "--quiet", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	RUN(&res, "--fake-gpus", "1", "--joblog", plus, "--quiet", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	b = slurp(jl, NULL);
	ck_assert_ptr_nonnull(b);
	ck_assert_msg(count_lines(b) == 5, "joblog:\n%s", b);
	ck_assert_int_eq(strncmp(b, "Seq\t", 4), 0);
	ck_assert_ptr_null(strstr(b + 1, "\nSeq\t"));
	RUN(&res, "--fake-gpus", "1", "--joblog", plus, "--joblog", jl,
	    "--quiet", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	b = slurp(jl, NULL);
	ck_assert_ptr_nonnull(b);
	ck_assert_msg(count_lines(b) == 3, "joblog:\n%s", b);
	free(plus);
	tmp_remove();
}
END_TEST

/* Output past 16 MiB a stream is dropped, and said so; the task is not
 * held up by it and its exit status stands. */
START_TEST(huge_output_is_cut)
{
	struct res	 res;
	char		*tasks;

	tmp_make();
	tasks = pathf("tasks");
	puts_file(tasks, "head -c 17000000 /dev/zero | tr '\\0' a; exit 4\n");
	RUN(&res, "--fake-gpus", "1", tasks);
	ck_assert_int_eq(res.code, 1);
	ck_assert_int_eq(res.outlen, (16u << 20) + 1);
	ck_assert_int_eq(res.out[0], 'a');
	ck_assert_int_eq(res.out[res.outlen - 1], '\n');
	ck_assert_ptr_nonnull(strstr(res.err, "task 1: 222784 bytes of its "
	    "stdout and 0 of its stderr were dropped"));
	ck_assert_ptr_nonnull(strstr(res.err, "exit status 4"));
	tmp_remove();
}
END_TEST

START_TEST(tasks_file_syntax)
{
	struct res	 res;
	char		*tasks, buf[8192];

	tmp_make();
	tasks = pathf("tasks");
	snprintf(buf, sizeof(buf),
	    "# a sweep\r\n"
	    "%s argv one\r\n"
	    "\n"
	    "   # indented comment\n"
	    "%s argv two \\\n"
	    "  three \\\r\n"
	    "four\n"
	    "\t\n"
	    "%s argv caf\xe9 \xff\n"
	    "%s argv last", PROBE, PROBE, PROBE, PROBE);
	puts_file(tasks, buf);
	RUN(&res, "--fake-gpus", "1", "--quiet", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	/* One slot: in file order. Tasks are numbered 1, 2, ... */
	ck_assert_str_eq(res.out, "1|one\n2|two|three|four\n3|caf\xe9|\xff\n"
	    "4|last\n");
	tmp_remove();
}
END_TEST

START_TEST(dead_worker_is_replaced)
{
	struct jrec	 j[8];
	struct res	 res;
	char		*tasks, *jl;
	int		 nj, i;

	tmp_make();
	tasks = pathf("tasks");
	jl = pathf("joblog");
	/* The task's parent is its worker. */
	puts_file(tasks, "true\nkill -9 $PPID; sleep 5\ntrue\ntrue\n");
	RUN(&res, "--fake-gpus", "1", "--joblog", jl, tasks);
	ck_assert_msg(res.code == 1, "exit %d: %s", res.code, res.err);
	ck_assert_double_lt(res.secs, 20);
	ck_assert_ptr_nonnull(strstr(res.err, "its worker was killed by "
	    "signal 9"));
	nj = read_joblog(jl, j, 8, NULL);
	ck_assert_int_eq(nj, 4);
	for (i = 0; i < nj; i++)
		ck_assert_int_eq(j[i].exitval != 0 || j[i].sig != 0,
		    j[i].seq == 2);
	tmp_remove();
}
END_TEST

/* An ignored SIGCHLD survives exec: gpupool-run must still learn how its
 * worker died, not report "exited with status 0". */
START_TEST(ignored_sigchld_keeps_a_dead_workers_status)
{
	static const char tasks[] = "true\nkill -9 $PPID; sleep 5\ntrue\n";
	struct jrec	 j[8];
	struct res	 res;
	char		*jl, *o, *e;
	int		 p[2], nj, i;
	pid_t		 pid;
	double		 t0 = now_s();

	tmp_make();
	jl = pathf("joblog");
	o = pathf("out");
	e = pathf("err");
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	/* Only gpupool-run starts with SIGCHLD ignored: it cannot end
	 * before its tasks arrive, and they come once the test has its
	 * own default back (it must reap gpupool-run itself). */
	ck_assert(signal(SIGCHLD, SIG_IGN) != SIG_ERR);
	pid = start(p[0], o, e, (const char *const []){ "--fake-gpus", "1",
	    "--joblog", jl, "-", NULL });
	ck_assert(signal(SIGCHLD, SIG_DFL) != SIG_ERR);
	close(p[0]);
	ck_assert_int_eq(write(p[1], tasks, strlen(tasks)),
	    (ssize_t)strlen(tasks));
	close(p[1]);
	finish(pid, t0, 60, o, e, &res);
	ck_assert_msg(res.code == 1, "exit %d: %s", res.code, res.err);
	ck_assert_msg(strstr(res.err, "its worker was killed by signal 9") !=
	    NULL, "%s", res.err);
	nj = read_joblog(jl, j, 8, NULL);
	ck_assert_int_eq(nj, 3);
	for (i = 0; i < nj; i++)
		ck_assert_int_eq(j[i].exitval != 0 || j[i].sig != 0,
		    j[i].seq == 2);
	tmp_remove();
}
END_TEST

START_TEST(halt_now_and_soon)
{
	struct res	 res;
	struct beg	 b[8];
	struct rec	 r[8];
	char		*tasks, *log, buf[8192];
	int		 nb;

	tmp_make();
	tasks = pathf("tasks");
	log = pathf("log");
	/* Task 2 fails once task 1 has begun (its B record), not after a
	 * guess at how long that takes. */
	snprintf(buf, sizeof(buf), "%s record %s 60000\n"
	    "sh -c 'until grep -q \"^B 1 \" %s; do sleep 0.01; done; exit 1'\n"
	    "%s record %s 0\n", PROBE, log, log, PROBE, log);
	puts_file(tasks, buf);
	RUN(&res, "--fake-gpus", "2", "--grace", "1", "--halt", "now,fail=1",
	    tasks);
	ck_assert_msg(res.code == 1, "exit %d: %s", res.code, res.err);
	ck_assert_double_lt(res.secs, 30);
	ck_assert_ptr_nonnull(strstr(res.err, "1 stopped"));
	(void)read_log(log, r, b, &nb);
	/* Task 1 began (task 2 waited for it); task 3 never did. */
	ck_assert_int_eq(nb, 1);
	ck_assert_int_eq(b[0].seq, 1);

	/* soon: the running task finishes, nothing new starts. */
	unlink(log);
	snprintf(buf, sizeof(buf), "%s record %s 1500\n"
	    "sh -c 'sleep 0.3; exit 1'\n%s record %s 0\n", PROBE, log, PROBE,
	    log);
	puts_file(tasks, buf);
	RUN(&res, "--fake-gpus", "2", "--halt", "soon,fail=1", tasks);
	ck_assert_msg(res.code == 1, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(read_log(log, r, b, &nb), 1);
	ck_assert_int_eq(r[0].seq, 1);
	tmp_remove();
}
END_TEST

/* The summary says what never started, and why. */
START_TEST(halt_says_not_started)
{
	struct res	 res;
	char		*tasks, *log, buf[8192];

	tmp_make();
	tasks = pathf("tasks");
	log = pathf("log");
	/* Task 1 outlasts task 2 by far, even on a loaded machine: task 2's
	 * failure is what frees the first slot. */
	snprintf(buf, sizeof(buf), "%s record %s 4000\n"
	    "sh -c 'sleep 0.3; exit 1'\n%s record %s 0\n%s record %s 0\n",
	    PROBE, log, PROBE, log, PROBE, log);
	puts_file(tasks, buf);
	RUN(&res, "--fake-gpus", "2", "--halt", "soon,fail=1", tasks);
	ck_assert_msg(res.code == 1, "exit %d: %s", res.code, res.err);
	ck_assert_msg(strstr(res.err, "1 ok, 1 failed, 2 not started (--halt "
	    "soon,fail=1)") != NULL, "%s", res.err);
	tmp_remove();
}
END_TEST

/* Read the terminal's side (master) for up to ms, appending to buf. */
static void
pty_read(int fd, char *buf, size_t *len, size_t cap, int ms)
{
	struct pollfd	 pfd = { fd, POLLIN, 0 };
	ssize_t		 n;

	if (poll(&pfd, 1, ms) != 1)
		return;
	if ((n = read(fd, buf + *len, cap - *len - 1)) > 0)
		*len += (size_t)n;
	buf[*len] = '\0';
}

/* The longest bar drawn from byte from on (segments between \r or \n,
 * less the \033[K that clears the line), and whether one since says a
 * task is running. */
static size_t
bar_widest(const char *buf, size_t from, int *running)
{
	const char	*p = buf + from, *q;
	size_t		 most = 0, n;

	*running = 0;
	while (*p) {
		q = p + strcspn(p, "\r\n");
		if (strncmp(p, "\033[K", 3) == 0)
			p += 3;
		n = q > p ? (size_t)(q - p) : 0;
		if (n > most)
			most = n;
		if (n > 0 && memmem(p, n, "1 running", 9) != NULL)
			*running = 1;
		p = *q ? q + 1 : q;
	}
	return most;
}

/* On a terminal the bar is redrawn while a long task runs (it shows it
 * running), fits the terminal's width, and follows a resize. */
START_TEST(bar_in_a_terminal)
{
	struct winsize	 ws = { .ws_row = 24, .ws_col = 40 };
	char		*tasks, *fifo, *o, *last, buf[65536], line[4200];
	size_t		 len = 0, mark;
	int		 m, fd, run;
	pid_t		 pid;
	double		 t0;

	tmp_make();
	tasks = pathf("tasks");
	fifo = pathf("release");
	o = pathf("out");
	ck_assert_int_eq(mkfifo(fifo, 0600), 0);
	/* The task waits in cat until this opens and closes the FIFO. */
	snprintf(line, sizeof(line), "cat %s\n", fifo);
	puts_file(tasks, line);
	ck_assert_int_ge(m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC), 0);
	ck_assert_int_eq(grantpt(m), 0);
	ck_assert_int_eq(unlockpt(m), 0);
	ck_assert_int_eq(ioctl(m, TIOCSWINSZ, &ws), 0);
	t0 = now_s();
	pid = start(-1, o, ptsname(m), (const char *const []){ "--fake-gpus",
	    "1", tasks, NULL });
	for (run = 0; !run; ) {
		ck_assert_msg(now_s() - t0 < 30, "no bar shows the task "
		    "running: '%s'", buf);
		pty_read(m, buf, &len, sizeof(buf), 100);
		ck_assert_uint_le(bar_widest(buf, 0, &run), 39);
	}
	ws.ws_col = 30;
	ck_assert_int_eq(ioctl(m, TIOCSWINSZ, &ws), 0);
	kill(pid, SIGWINCH);
	/* The last bar drawn is cut to 29 columns (the text is longer). */
	for (mark = len; ; ) {
		ck_assert_msg(now_s() - t0 < 30, "no bar of 29 columns after "
		    "the resize: '%s'", buf + mark);
		pty_read(m, buf, &len, sizeof(buf), 100);
		if ((last = memrchr(buf + mark, '\r', len - mark)) != NULL &&
		    bar_widest(last, 0, &run) == 29)
			break;
	}
	ck_assert_int_ge(fd = open(fifo, O_WRONLY | O_CLOEXEC), 0);
	close(fd);
	while (len < sizeof(buf) - 1 && waitpid(pid, NULL, WNOHANG) == 0) {
		ck_assert_msg(now_s() - t0 < 60, "gpupool-run did not end");
		pty_read(m, buf, &len, sizeof(buf), 100);
	}
	close(m);
	tmp_remove();
}
END_TEST

/* The long options named in text (roff's "\\-\\-name" or "--name"),
 * as " --a --b ... ". */
static char *
long_opts(const char *text, int roff)
{
	const char	*dash = roff ? "\\-\\-" : "--", *p = text, *e;
	size_t		 dl = strlen(dash), cap = 4096, len = 0, n;
	char		*set = calloc(1, cap), name[64], item[72];

	ck_assert_ptr_nonnull(set);
	while ((p = strstr(p, dash)) != NULL) {
		p += dl;
		for (e = p, n = 0; n < sizeof(name) - 1 && ((*e >= 'a' &&
		    *e <= 'z') || *e == '-' || (roff && *e == '\\' &&
		    e[1] == '-')); e++) {
			if (*e == '\\')
				e++;
			name[n++] = *e;
		}
		name[n] = '\0';
		p = e;
		snprintf(item, sizeof(item), " --%s ", name);
		if (n < 3 || strstr(set, item) != NULL)
			continue;
		ck_assert_int_lt(len + strlen(item), cap);
		len += (size_t)snprintf(set + len, cap - len, "%s", item);
	}
	return set;
}

/* --help answers the questions in the issue, and it and the man page
 * name the same options; the page has no groff warning. */
START_TEST(help_and_man_page_agree)
{
	struct res	 res;
	char		*man, *hs, *ms, *ms_text, *p, *q, opt[64];
	int		 st;
	pid_t		 pid;

	tmp_make();
	RUN(&res, "--help");
	ck_assert_int_eq(res.code, 0);
	ck_assert_str_eq(res.err, "");
	ck_assert_ptr_nonnull(strstr(res.out, "usage: gpupool-run"));
	ck_assert_ptr_nonnull(strstr(res.out, "sweep"));
	ck_assert_ptr_nonnull(strstr(res.out, "tail -n +1 -f queue.txt | "
	    "gpupool-run"));
	ck_assert_ptr_nonnull(strstr(res.out, "--resume sweep.txt"));
	ck_assert_ptr_nonnull(strstr(res.out, "--per-gpu 3"));
	man = slurp(MANPAGE, NULL);
	ck_assert_ptr_nonnull(man);
	/* The option lists: --help's up to its notes, the page's OPTIONS
	 * section (their examples use options of other programs). */
	ck_assert_ptr_nonnull(p = strstr(res.out, "\nEach task runs"));
	*p = '\0';
	ck_assert_ptr_nonnull(p = strstr(man, "\n.SH OPTIONS\n"));
	ck_assert_ptr_nonnull(q = strstr(p + 1, "\n.SH "));
	*q = '\0';
	hs = long_opts(res.out, 0);
	ms = long_opts(p, 1);
	ms_text = p;
	for (p = hs; (p = strstr(p, " --")) != NULL; p = q) {
		q = strchr(p + 1, ' ');
		snprintf(opt, sizeof(opt), "%.*s", (int)(q - p + 1), p);
		ck_assert_msg(strstr(ms, opt) != NULL, "man page lacks%s", opt);
	}
	for (p = ms; (p = strstr(p, " --")) != NULL; p = q) {
		q = strchr(p + 1, ' ');
		snprintf(opt, sizeof(opt), "%.*s", (int)(q - p + 1), p);
		ck_assert_msg(strstr(hs, opt) != NULL, "--help lacks%s", opt);
	}
	/* The short options too: each of --help's "  -j N, ..." is one of
	 * the page's (\-j, not the start of a \-\-long one). */
	for (p = strstr(res.out, "\n  -"); p != NULL; p = strstr(p + 1,
	    "\n  -")) {
		char	 c = p[4];

		if (c == '-' || (p[5] != ' ' && p[5] != ',' && p[5] != ')'))
			continue;
		snprintf(opt, sizeof(opt), "\\-%c", c);
		for (q = ms_text; (q = strstr(q, opt)) != NULL; q++)
			if (q[-1] != '-' && !((q[3] >= 'a' && q[3] <= 'z') ||
			    (q[3] >= 'A' && q[3] <= 'Z')))
				break;
		ck_assert_msg(q != NULL, "man page lacks -%c", c);
	}
	RUN(&res, "--version");
	ck_assert_int_eq(res.code, 0);
	ck_assert_ptr_nonnull(strstr(res.out, "gpupool-run 0."));

	if (access("/usr/bin/groff", X_OK) == 0) {
		char	*e = pathf("groff.err");

		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			int	 fd = open(e, O_WRONLY | O_CREAT | O_TRUNC, 0644);

			dup2(fd, 2);
			execl("/usr/bin/groff", "groff", "-t", "-man", "-ww", "-z",
			    MANPAGE, (char *)NULL);
			_exit(127);
		}
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert_int_eq(st, 0);
		ck_assert_str_eq(slurp(e, NULL), "");
	}
	tmp_remove();
}
END_TEST

static Suite *
cli_suite(void)
{
	Suite	*s = suite_create("cli");
	TCase	*tc = tcase_create("run");

	/* GPUPOOL_TEST_SLOW adds 100,000 real tasks (over a minute). */
	tcase_set_timeout(tc, getenv("GPUPOOL_TEST_SLOW") ? 400 : 90);
	tcase_add_test(tc, every_task_once_fake_gpus);
	tcase_add_test(tc, every_task_once_gpu_ids);
	tcase_add_test(tc, per_gpu_two);
	tcase_add_test(tc, resume_after_sigkill);
	tcase_add_test(tc, retries_keep_every_attempt);
	tcase_add_test(tc, timeout_kills_the_group);
	tcase_add_test(tc, leftovers_die_with_their_task);
	tcase_add_test(tc, timeout_reaches_leftovers);
	tcase_add_test(tc, sigint_reaches_leftovers);
	tcase_add_test(tc, master_death_reaches_leftovers);
	tcase_add_test(tc, second_sigint_reaches_leftovers);
	tcase_add_test(tc, worker_death_reaches_leftovers);
	tcase_add_test(tc, orphans_are_reaped_while_the_task_runs);
	tcase_add_test(tc, inherited_children_survive);
	tcase_add_test(tc, unreapable_leftover_does_not_hang);
	tcase_add_test(tc, exit_codes);
	tcase_add_test(tc, bad_input);
	tcase_add_test(tc, joblog_is_not_the_tasks_file);
	tcase_add_test(tc, joblog_locked);
	tcase_add_test(tc, joblog_escapes_tabs);
	tcase_add_test(tc, joblog_plus_file_appends);
	tcase_add_test(tc, bad_input_streamed);
	tcase_add_test(tc, bad_topology_and_durations);
	tcase_add_test(tc, output_blocks_not_interleaved);
	tcase_add_test(tc, stdout_write_error_stops);
	tcase_add_test(tc, stuck_stdout_still_killable);
	tcase_add_test(tc, stuck_stderr_still_killable);
	tcase_add_test(tc, bounded_memory);
	tcase_add_test(tc, resume_memory_sparse_seqs);
	tcase_add_test(tc, stdin_streams);
	tcase_add_test(tc, sigint_stops_tasks);
	tcase_add_test(tc, sigterm_stops_tasks);
	tcase_add_test(tc, sigterm_to_the_group_stops_tasks);
	tcase_add_test(tc, second_sigint_kills);
	tcase_add_test(tc, huge_grace_still_terms);
	tcase_add_test(tc, sigint_before_tasks_start);
	tcase_add_test(tc, fake_gpus_zero_beats_env);
	tcase_add_test(tc, dry_run_and_show_gpus_run_nothing);
	tcase_add_test(tc, tasks_see_only_stdio);
	tcase_add_test(tc, tasks_see_one_copy_of_each_variable);
	tcase_add_test(tc, results_layout);
	tcase_add_test(tc, results_exitval_goes_first);
	tcase_add_test(tc, results_planted_files);
	tcase_add_test(tc, workers_hold_no_lock);
	tcase_add_test(tc, huge_output_is_cut);
	tcase_add_test(tc, tasks_file_syntax);
	tcase_add_test(tc, dead_worker_is_replaced);
	tcase_add_test(tc, ignored_sigchld_keeps_a_dead_workers_status);
	tcase_add_test(tc, halt_now_and_soon);
	tcase_add_test(tc, halt_says_not_started);
	tcase_add_test(tc, bar_in_a_terminal);
	tcase_add_test(tc, help_and_man_page_agree);
	tcase_add_test(tc, tasks_threads_fit_their_cpus);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner	*sr = srunner_create(cli_suite());
	int	 nf;

	srunner_run_all(sr, CK_NORMAL);
	nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nf == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
