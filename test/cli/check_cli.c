/*
 * check_cli.c: gpupool-run end to end, the run itself: every task once
 * on fake GPUs or explicit ids, per-GPU slots, a dead worker replaced
 * (also with SIGCHLD ignored), --fake-gpus against the environment,
 * --dry-run and --show-gpus, what a task sees (one copy of each
 * variable, thread counts fitted to its CPUs, only stdio), workers that
 * hold no lock, exit codes. The other behaviours have programs of their
 * own beside it: check_signals, check_leftovers, check_resume,
 * check_results, check_output, check_timeouts, check_input.
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
	 * task cleanup line, the claims line. */
	ck_assert_int_eq(count_lines(res.out), 8);
	ck_assert_ptr_nonnull(strstr(res.out, "\nclaims: none held\n"));
	RUN(&res, "--fake-gpus", "2", "--show-gpus");
	ck_assert_int_eq(res.code, 0);
	ck_assert_int_eq(count_lines(res.out), 6);
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
	ck_assert_int_eq(count_lines(res.out), 6);
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

static Suite *
cli_suite(void)
{
	Suite	*s = suite_create("cli");
	TCase	*tc = tcase_create("run");

	tcase_set_timeout(tc, getenv("GPUPOOL_TEST_SLOW") ? 400 : 90);
	tcase_add_test(tc, every_task_once_fake_gpus);
	tcase_add_test(tc, every_task_once_gpu_ids);
	tcase_add_test(tc, per_gpu_two);
	tcase_add_test(tc, exit_codes);
	tcase_add_test(tc, fake_gpus_zero_beats_env);
	tcase_add_test(tc, dry_run_and_show_gpus_run_nothing);
	tcase_add_test(tc, tasks_see_only_stdio);
	tcase_add_test(tc, tasks_see_one_copy_of_each_variable);
	tcase_add_test(tc, workers_hold_no_lock);
	tcase_add_test(tc, dead_worker_is_replaced);
	tcase_add_test(tc, ignored_sigchld_keeps_a_dead_workers_status);
	tcase_add_test(tc, tasks_threads_fit_their_cpus);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return gp_check_run(cli_suite());
}
