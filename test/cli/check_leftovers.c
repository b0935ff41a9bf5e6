/*
 * check_leftovers.c: gpupool-run end to end, processes a task leaves
 * behind: they die with their task, at its timeout, on SIGINT (once
 * and twice), when the master or the worker dies; orphans reaped while
 * the task runs; inherited children survive; an unreapable leftover
 * does not hang the run.
 *
 * Each test runs the built binary (GPUPOOL_RUN) with tasks that are the
 * probe helper (PROBE); assertions are made on the logs the tasks
 * write, the joblog, the output and the exit status. Timings only bound
 * how long something may take, generously, for a loaded 2-core box. The
 * helpers are cli_test.h's and run_test.h's.
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

#include "check_main.h"
#include "cli_test.h"
#include "run_test.h"

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

static Suite *
leftovers_suite(void)
{
	Suite	*s = suite_create("cli");
	TCase	*tc = tcase_create("leftovers");

	tcase_set_timeout(tc, getenv("GPUPOOL_TEST_SLOW") ? 400 : 90);
	tcase_add_test(tc, leftovers_die_with_their_task);
	tcase_add_test(tc, timeout_reaches_leftovers);
	tcase_add_test(tc, sigint_reaches_leftovers);
	tcase_add_test(tc, master_death_reaches_leftovers);
	tcase_add_test(tc, second_sigint_reaches_leftovers);
	tcase_add_test(tc, worker_death_reaches_leftovers);
	tcase_add_test(tc, orphans_are_reaped_while_the_task_runs);
	tcase_add_test(tc, inherited_children_survive);
	tcase_add_test(tc, unreapable_leftover_does_not_hang);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return gp_check_run(leftovers_suite());
}
