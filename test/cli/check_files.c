/*
 * check_files.c: what a run reads and what it writes, end to end (issue
 * 21): no output (the joblog, --timeline, --results, standard output)
 * may be a file the run reads (a :::: file, the tasks file, standard
 * input's file, --topology), by any path; a task line over the 128 KiB
 * that Linux allows one argument runs; the joblog tells apart commands
 * that differ only in a backslash, for --resume and for the timeline.
 */
#include "check_main.h"
/* The shared helpers this file has no use for are fine unused. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "cli_test.h"

#define KEEP(...)	(const char *const []){ __VA_ARGS__, NULL }
#define ARGS(...)	(const char *const []){ __VA_ARGS__, NULL }

/* The sweep's values file is never made a joblog, a picture or a result,
 * whatever names it: the path, a hard link, a symbolic link, /dev/stdin,
 * standard input; nor are the topology or the tasks file. */
START_TEST(outputs_never_overwrite_an_input)
{
	struct res	 res;
	char		*vals, *ran, *cmd, *hard, *soft, *topo, *tasks, *res_d;
	char		*in_res, *xml, *line, *jl;
	size_t		 n;

	tmp_make();
	vals = pathf("vals.txt");
	puts_file(vals, "0.1\n0.01\n");
	ran = pathf("ran");
	cmd = cmdf("echo lr={1} >> %s", ran);
	hard = pathf("hard");
	ck_assert_int_eq(link(vals, hard), 0);
	soft = pathf("soft");
	ck_assert_int_eq(symlink(vals, soft), 0);

	run_refused("joblog", ran, KEEP(vals), NULL, ARGS("--fake-gpus", "1",
	    "--joblog", vals, cmd, "::::", vals));
	run_refused("timeline", ran, KEEP(vals), NULL, ARGS("--fake-gpus", "1",
	    "--timeline", vals, cmd, "::::", vals));
	run_refused("joblog", ran, KEEP(vals), NULL, ARGS("--fake-gpus", "1",
	    "--joblog", hard, cmd, "::::", pathf("vals.txt")));
	run_refused("joblog", ran, KEEP(vals), NULL, ARGS("--fake-gpus", "1",
	    "--joblog", soft, "--resume", cmd, "::::", vals));
	run_refused("timeline", ran, KEEP(vals), NULL, ARGS("--fake-gpus", "1",
	    "--timeline", hard, cmd, ":::", "x", "::::", soft));
	/* Standard input's file, as - or /dev/stdin, and twice. */
	run_refused("standard input", ran, KEEP(vals), vals, ARGS("--fake-gpus",
	    "1", "--joblog", hard, cmd, "::::", "-"));
	run_refused("joblog", ran, KEEP(vals), vals, ARGS("--fake-gpus", "1",
	    "--joblog", soft, cmd, "::::", "/dev/stdin"));
	run_refused("timeline", ran, KEEP(vals), vals, ARGS("--fake-gpus", "1",
	    "--timeline", vals, cmd, "::::", vals, "::::", "-"));
	/* --results DIR would write DIR/1/stdout. */
	res_d = pathf("res");
	ck_assert_int_eq(mkdir(res_d, 0755), 0);
	ck_assert_int_eq(mkdir(pathf("res/1"), 0755), 0);
	in_res = pathf("res/1/stdout");
	puts_file(in_res, "a\nb\n");
	run_refused("--results", ran, KEEP(in_res), NULL, ARGS("--fake-gpus", "1",
	    "--results", res_d, cmd, "::::", in_res));

	/* The topology and the tasks file, as joblog and picture. */
	xml = slurp(GP_FIXTURES "/24em64t-2n6c2t-pci.xml", &n);
	ck_assert_ptr_nonnull(xml);
	topo = pathf("topo.xml");
	put(topo, xml, n);
	tasks = pathf("tasks.txt");
	line = cmdf("echo x >> %s\n", ran);
	puts_file(tasks, line);
	run_refused("--topology", ran, KEEP(topo, tasks), NULL,
	    ARGS("--fake-gpus", "1", "--topology", topo, "--joblog", topo,
	    tasks));
	run_refused("--topology", ran, KEEP(topo, tasks), NULL,
	    ARGS("--fake-gpus", "1", "--topology", topo, "--timeline", topo,
	    tasks));
	run_refused("tasks file", ran, KEEP(tasks), tasks, ARGS("--fake-gpus", "1",
	    "--timeline", tasks, "-"));

	/* Inputs given twice are only read: 2 x 2 tasks. */
	jl = pathf("jl");
	RUN(&res, "--fake-gpus", "1", "--quiet", "--joblog", jl, cmd, "::::",
	    vals, "::::", hard);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(count_lines(slurp(ran, NULL)), 4);
	ck_assert_str_eq(slurp(vals, NULL), "0.1\n0.01\n");
	tmp_remove();
}
END_TEST

/* Standard output appended to the tasks file would feed the tasks their
 * own output, for ever: refused, as cat(1) refuses it. */
START_TEST(stdout_is_not_an_input)
{
	char	*tasks, *ran, *line, *via;

	tmp_make();
	tasks = pathf("tasks.txt");
	ran = pathf("ran");
	line = cmdf("echo x; echo x >> %s\n", ran);
	puts_file(tasks, line);
	via = cmdf("exec \"$@\" >> '%s'", tasks);
	exec_via = via;
	run_refused("standard output", ran, KEEP(tasks), NULL,
	    ARGS("--fake-gpus", "1", tasks));
	exec_via = NULL;
	tmp_remove();
}
END_TEST

/* n bytes of c, NUL-terminated. */
static char *
filled(size_t n, char c)
{
	char	*s = malloc(n + 1);

	ck_assert_ptr_nonnull(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

/* Lines over 128 KiB (one argument's limit, MAX_ARG_STRLEN), up to the
 * documented 1 MiB: a shell line, a command without a shell, a grid
 * row. Each runs, sees only 0, 1 and 2, and
 * its joblog line is whole. */
START_TEST(task_lines_over_128k_run)
{
	struct jrec	 j[4];
	struct res	 res;
	char		*tasks, *x, *words, *line, *jl, *out, *vals;
	size_t		 big = 200 << 10, len, i;

	tmp_make();
	tasks = pathf("tasks.txt");
	jl = pathf("jl");
	x = filled(big, 'x');
	/* Shell syntax (;), and words for execvp() (a program's one
	 * argument is still at most 128 KiB: the kernel's limit). */
	words = filled(big, ' ');
	for (i = 0; i < big; i += 2)
		words[i] = 'w';
	/* Under GPUPOOL_TEST_WRAP valgrind's log fds reach the untraced
	 * tasks: the fds are then not looked at. */
	line = cmdf("%s; : %s\n/bin/echo %s\n", getenv("GPUPOOL_TEST_WRAP") ?
	    "echo 0 1 2" : PROBE " fds", x, words);
	puts_file(tasks, line);
	RUN(&res, "--fake-gpus", "1", "--quiet", "--joblog", jl, tasks);
	ck_assert_msg(res.code == 0, "exit %d: %.300s", res.code, res.err);
	words[big - 1] = '\0';
	out = cmdf("0 1 2\n%s\n", words);
	ck_assert_msg(strcmp(res.out, out) == 0, "output %.80s...",
	    res.out);
	free(out);
	ck_assert_int_eq(read_joblog(jl, j, 4, NULL), 2);
	len = strlen(slurp(jl, NULL));
	ck_assert_uint_gt(len, 2 * big);

	/* The documented limit: a line just under 1 MiB runs too. */
	free(line);
	line = cmdf("printf %%s %s | wc -c\n", filled((1 << 20) - 64, 'y'));
	puts_file(tasks, line);
	RUN(&res, "--fake-gpus", "1", "--quiet", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %.300s", res.code, res.err);
	ck_assert_int_eq(atol(res.out), (1 << 20) - 64);

	/* A grid row with a 300 KiB value. */
	vals = pathf("vals");
	free(line);
	line = cmdf("%s\n", filled(300 << 10, 'z'));
	puts_file(vals, line);
	RUN(&res, "--fake-gpus", "1", "--quiet", "echo", "{1}", "|", "wc",
	    "-c", "::::", vals);
	ck_assert_msg(res.code == 0, "exit %d: %.300s", res.code, res.err);
	ck_assert_int_eq(atol(res.out), (300 << 10) + 1);
	tmp_remove();
}
END_TEST

/* echo {1} ::: $'a\nb' 'a\nb' (with -0, so that the newline does not
 * cut the first into two arguments, as parallel's ::: would): two
 * commands that the joblog must keep
 * apart, though the first's newline is written as two characters. A
 * resume after one of them is given the other runs it (and says the
 * command changed); the timeline shows each as it was. */
START_TEST(joblog_keeps_backslashes_apart)
{
	struct jrec	 j[4];
	struct res	 res;
	char		*jl, *svg, *s;

	tmp_make();
	jl = pathf("jl");
	svg = pathf("t.svg");
	RUN(&res, "--fake-gpus", "1", "--quiet", "--joblog", jl, "-0", "echo",
	    "{1}", ":::", "a\nb", "a\\nb");
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(read_joblog(jl, j, 4, NULL), 2);
	ck_assert_msg(strcmp(j[0].cmd, j[1].cmd) != 0, "both logged as '%s'",
	    j[0].cmd);
	/* The same grid resumes without a word; the other value at Seq 1
	 * is a changed command. */
	RUN(&res, "--fake-gpus", "1", "--joblog", jl, "--resume", "-0", "echo",
	    "{1}", ":::", "a\nb", "a\\nb");
	ck_assert_msg(res.code == 0 && strstr(res.err, "another command") ==
	    NULL, "exit %d: %s", res.code, res.err);
	RUN(&res, "--fake-gpus", "1", "--joblog", jl, "--resume", "-0", "echo",
	    "{1}", ":::", "a\\nb", "a\nb");
	ck_assert_msg(strstr(res.err, "another command") != NULL, "resume did "
	    "not see the change: %s", res.err);
	/* The picture from the joblog shows the newline as a newline and
	 * the backslash as a backslash. */
	RUN(&res, "--timeline", svg, "--from-joblog", jl);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	s = slurp(svg, NULL);
	ck_assert_ptr_nonnull(strstr(s, "echo 'a\nb'</title>"));
	ck_assert_ptr_nonnull(strstr(s, "echo 'a\\nb'</title>"));
	free(s);
	tmp_remove();
}
END_TEST

/* Wait (at most 60 s) for path to exist. */
static void
wait_file(const char *path)
{
	double	 t0 = now_s();

	while (access(path, F_OK) == -1) {
		ck_assert_msg(now_s() - t0 < 60, "no %s after 60 s", path);
		nap(20);
	}
}

/* Two runs at once: while one reads its tasks file, another may not
 * make that file its joblog (refused, naming the first run's pid), nor
 * may a run read as its tasks the joblog another run is writing. */
START_TEST(two_runs_share_no_file)
{
	struct res	 res, ra;
	char		*tasks, *other, *started, *go, *ran, *o, *e, *line, *pid;
	char		*jl;
	pid_t		 a;
	double		 t0;

	tmp_make();
	tasks = pathf("tasks.txt");
	other = pathf("other.txt");
	started = pathf("started");
	go = pathf("go");
	ran = pathf("ran");
	line = cmdf("touch %s; while [ ! -e %s ]; do sleep 0.05; done\n"
	    "echo done >> %s\n", started, go, ran);
	puts_file(tasks, line);
	puts_file(other, "true\n");
	o = pathf("a.out");
	e = pathf("a.err");
	t0 = now_s();
	a = start(-1, o, e, (const char *const []){ "--fake-gpus", "1",
	    tasks, NULL });
	wait_file(started);
	pid = cmdf("in use by process %ld", (long)a);
	RUN(&res, "--fake-gpus", "1", "--joblog", tasks, other);
	ck_assert_msg(res.code == 255 && strstr(res.err, pid) != NULL,
	    "exit %d: %s", res.code, res.err);
	ck_assert_str_eq(slurp(tasks, NULL), line);
	puts_file(go, "");
	finish(a, t0, 60, o, e, &ra);
	ck_assert_msg(ra.code == 0, "exit %d: %s", ra.code, ra.err);
	ck_assert_str_eq(slurp(ran, NULL), "done\n");

	/* The other way round: a run writing joblog jl, another given jl
	 * as its tasks file. */
	jl = pathf("jl");
	(void)unlink(started);
	(void)unlink(go);
	t0 = now_s();
	a = start(-1, o, e, (const char *const []){ "--fake-gpus", "1",
	    "--joblog", jl, tasks, NULL });
	wait_file(started);
	free(pid);
	pid = cmdf("in use by process %ld", (long)a);
	RUN(&res, "--fake-gpus", "1", jl);
	ck_assert_msg(res.code == 255 && strstr(res.err, "tasks file") !=
	    NULL && strstr(res.err, pid) != NULL, "exit %d: %s", res.code,
	    res.err);
	puts_file(go, "");
	finish(a, t0, 60, o, e, &ra);
	ck_assert_msg(ra.code == 0, "exit %d: %s", ra.code, ra.err);
	tmp_remove();
}
END_TEST

static Suite *
files_suite(void)
{
	Suite	*s = suite_create("files");
	TCase	*tc = tcase_create("files");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, outputs_never_overwrite_an_input);
	tcase_add_test(tc, stdout_is_not_an_input);
	tcase_add_test(tc, two_runs_share_no_file);
	tcase_add_test(tc, task_lines_over_128k_run);
	tcase_add_test(tc, joblog_keeps_backslashes_apart);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return gp_check_run(files_suite());
}
