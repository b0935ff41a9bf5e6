/*
 * check_results.c: gpupool-run end to end, --results DIR: its layout,
 * the old exitval goes first, files planted in DIR.
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

static Suite *
results_suite(void)
{
	Suite	*s = suite_create("cli");
	TCase	*tc = tcase_create("results");

	tcase_set_timeout(tc, getenv("GPUPOOL_TEST_SLOW") ? 400 : 90);
	tcase_add_test(tc, results_layout);
	tcase_add_test(tc, results_exitval_goes_first);
	tcase_add_test(tc, results_planted_files);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return gp_check_run(results_suite());
}
