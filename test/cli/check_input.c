/*
 * check_input.c: gpupool-run end to end, what it refuses: bad options,
 * files and GPU ids, bad lines of a streamed input, bad topologies and
 * durations, the tasks file's syntax; --help and gpupool-run(1) agree.
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

#ifndef MANPAGE
#error "build with -DMANPAGE=path of docs/gpupool-run.1"
#endif

#include "check_main.h"
#include "cli_test.h"
#include "run_test.h"

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
input_suite(void)
{
	Suite	*s = suite_create("cli");
	TCase	*tc = tcase_create("input");

	tcase_set_timeout(tc, getenv("GPUPOOL_TEST_SLOW") ? 400 : 90);
	tcase_add_test(tc, bad_input);
	tcase_add_test(tc, bad_input_streamed);
	tcase_add_test(tc, bad_topology_and_durations);
	tcase_add_test(tc, tasks_file_syntax);
	tcase_add_test(tc, help_and_man_page_agree);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return gp_check_run(input_suite());
}
