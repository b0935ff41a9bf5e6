/*
 * check_timeouts.c: gpupool-run end to end, tasks that end badly: a
 * timeout kills the task's group, retries keep every attempt, --halt
 * now and soon, and what --halt says was not started.
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

static Suite *
timeouts_suite(void)
{
	Suite	*s = suite_create("cli");
	TCase	*tc = tcase_create("timeouts");

	tcase_set_timeout(tc, getenv("GPUPOOL_TEST_SLOW") ? 400 : 90);
	tcase_add_test(tc, retries_keep_every_attempt);
	tcase_add_test(tc, timeout_kills_the_group);
	tcase_add_test(tc, halt_now_and_soon);
	tcase_add_test(tc, halt_says_not_started);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return gp_check_run(timeouts_suite());
}
