/*
 * check_resume.c: gpupool-run end to end, the joblog: --resume after a
 * SIGKILL, the joblog is not the tasks file, one run per joblog (the
 * lock), tabs escaped, --joblog +FILE appends; memory bounded over long
 * runs and on resume of a sparse joblog. (The joblog's own unit tests
 * are check_need.c's.)
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

static Suite *
resume_suite(void)
{
	Suite	*s = suite_create("cli");
	TCase	*tc = tcase_create("resume");

	/* GPUPOOL_TEST_SLOW adds 100,000 real tasks (over a minute). */
	tcase_set_timeout(tc, getenv("GPUPOOL_TEST_SLOW") ? 400 : 90);
	tcase_add_test(tc, resume_after_sigkill);
	tcase_add_test(tc, joblog_is_not_the_tasks_file);
	tcase_add_test(tc, joblog_locked);
	tcase_add_test(tc, joblog_escapes_tabs);
	tcase_add_test(tc, joblog_plus_file_appends);
	tcase_add_test(tc, bounded_memory);
	tcase_add_test(tc, resume_memory_sparse_seqs);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return gp_check_run(resume_suite());
}
