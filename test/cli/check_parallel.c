/*
 * check_parallel.c: gpupool-run as a GNU parallel user types it, end to
 * end on fake GPUs, without parallel itself (parallel_diff.py compares
 * the two where parallel is installed): the five bugs of issue 25
 * (::::+ links every file after it, -q quotes, a parallel joblog
 * resumes and an unreadable one is refused, {//} is dirname, a ::: word
 * with a newline is two arguments and --halt's exit statuses), tasks
 * from a redirected standard input, arguments on standard input as they
 * come, -a, -0 with odd bytes, empty input with and without -r, -k with
 * its output held over a ^C, -j, the shell tasks run in (found among
 * the parents as parallel finds it), --nice,
 * PARALLEL_SEQ and PARALLEL_JOBSLOT, --retry-failed, --resume from
 * --results alone, -N, -X and -m with odd lengths and -N as their cap,
 * -N's context replace, --tagstring and -v,
 * and the options refused with their reason. Tasks write what they saw
 * into files or standard output, read once the run is over; every wait
 * has a deadline. The helpers are cli_test.h's.
 */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#pragma GCC diagnostic ignored "-Wunused-function"
#include "cli_test.h"
#include "check_main.h"

/* The run's stdout, checked for exit status code first. */
#define OUT_IS(res, code_, want) do {					\
	ck_assert_msg((res).code == (code_), "exit %d (not %d): %s",	\
	    (res).code, (code_), (res).err);				\
	ck_assert_str_eq((res).out, (want));				\
} while (0)

/* Run with standard input from a file holding s. */
static void
run_stdin(const char *s, struct res *res, const char *const *args)
{
	char	*in = pathf("stdin.txt");
	int	 fd;

	puts_file(in, s);
	ck_assert_int_ge(fd = open(in, O_RDONLY), 0);
	run_in(fd, 60, res, args);
	close(fd);
	free(in);
}

/* Bug 1: ::::+ links every file after it, up to the next separator
 * (before: only the first, crossed with the rest, 9 rows). */
START_TEST(linked_files_step_together)
{
	struct res	 res;
	char		*n3, *l3, *x3;

	tmp_make();
	n3 = pathf("n3");
	l3 = pathf("l3");
	x3 = pathf("x3");
	puts_file(n3, "1\n2\n3\n");
	puts_file(l3, "a\nb\nc\n");
	puts_file(x3, "x\ny\nz\n");
	/* One slot: in order without -k (which the code before lacked). */
	RUN(&res, "--fake-gpus", "1", "--quiet", "echo", "::::", n3,
	    "::::+", l3, x3);
	OUT_IS(res, 0, "1 a x\n2 b y\n3 c z\n");
	/* The same as :::: n3 ::::+ l3 ::::+ x3, and --link. */
	RUN(&res, "--fake-gpus", "1", "--quiet", "-k", "--link", "echo",
	    "::::", n3, l3, x3);
	OUT_IS(res, 0, "1 a x\n2 b y\n3 c z\n");
	tmp_remove();
}
END_TEST

/* Bug 2: -q quotes COMMAND's words (before: it was --quiet, and the
 * words ran as shell text: a redirection, nothing printed). */
START_TEST(q_quotes_the_command)
{
	struct res	 res;

	tmp_make();
	ck_assert_int_eq(chdir(tmp), 0);
	RUN(&res, "--fake-gpus", "1", "--quiet", "-q", "printf",
	    "<%s>\n", "a  {}  b", ":::", "x", "$y;z");
	OUT_IS(res, 0, "<a  x  b>\n<a  $y;z  b>\n");
	ck_assert_int_ne(access("%s", F_OK), 0);	/* no redirection */
	tmp_remove();
}
END_TEST

/* Bug 3: a joblog GNU parallel wrote (nine columns, a TAB in a Command)
 * resumes: its Seqs are skipped, and the run goes on writing nine
 * columns (before: read as empty, every task ran again). */
START_TEST(resume_reads_parallels_joblog)
{
	struct res	 res;
	char		*jl, *cmd, *b, *l, *save = NULL;
	int		 n = 0, tabs;

	tmp_make();
	jl = pathf("jl");
	puts_file(jl, "Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\t"
	    "Exitval\tSignal\tCommand\n"
	    "1\t:\t1700000000.000\t     0.002\t0\t2\t0\t0\ttouch ran.a\n"
	    "2\t:\t1700000000.000\t     0.002\t0\t2\t1\t0\ttouch ran.b\n");
	ck_assert_int_eq(chdir(tmp), 0);
	cmd = "touch ran.{}";
	RUN(&res, "--fake-gpus", "1", "--quiet", "--joblog", jl, "--resume",
	    cmd, ":::", "a", "b", "c");
	OUT_IS(res, 0, "");
	ck_assert_int_ne(access("ran.a", F_OK), 0);
	ck_assert_int_ne(access("ran.b", F_OK), 0);
	ck_assert_int_eq(access("ran.c", F_OK), 0);
	/* --resume-failed runs Seq 2 (Exitval 1) again. */
	RUN(&res, "--fake-gpus", "1", "--quiet", "--joblog", jl,
	    "--resume-failed", cmd, ":::", "a", "b", "c");
	OUT_IS(res, 0, "");
	ck_assert_int_eq(access("ran.b", F_OK), 0);
	ck_assert_int_ne(access("ran.a", F_OK), 0);
	/* Still parallel's: every line nine fields. */
	ck_assert_ptr_nonnull(b = slurp(jl, NULL));
	for (l = strtok_r(b, "\n", &save); l; l = strtok_r(NULL, "\n", &save),
	    n++) {
		for (tabs = 0; *l; l++)
			tabs += *l == '\t';
		ck_assert_msg(tabs == 8, "line %d has %d TABs", n + 1, tabs);
	}
	ck_assert_int_eq(n, 5);
	free(b);
	tmp_remove();
}
END_TEST

/* Bug 3: a joblog that cannot be read is an error, never "nothing ran
 * yet": no header, a line that is no record, a directory. */
START_TEST(unreadable_joblog_is_refused)
{
	static const char *const bad[] = {
		"not a joblog\n",
		"1\t:\t1700000000.000\t0.1\t0\t0\t0\t0\techo a\t-\t-\t-\n",
		"Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\tExitval\t"
		"Signal\tCommand\n1\t:\t1.0\t0.1\t0\t0\tzero\t0\techo a\n"
		"2\t:\t1.0\t0.1\t0\t0\t0\t0\techo b\n",
	};
	const char	*keep[2] = { NULL, NULL };
	char		*jl, *ran;
	size_t		 i;

	tmp_make();
	jl = pathf("jl");
	ran = pathf("ran");
	keep[0] = jl;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		puts_file(jl, bad[i]);
		run_refused(i < 2 ? "line 1 is not a joblog header" :
		    "line 2 is not a joblog record", ran, keep, NULL,
		    (const char *const []){ "--fake-gpus", "1", "--joblog",
		    jl, "--resume", cmdf("touch %s", ran), ":::", "a", NULL });
	}
	tmp_remove();
}
END_TEST

/* Bug 5: a ::: word holding a newline is two arguments, as parallel
 * reads it (before: one task); -0 keeps it one. */
START_TEST(newline_in_a_word_is_two_arguments)
{
	struct res	 res;

	tmp_make();
	RUN(&res, "--fake-gpus", "1", "--quiet", "printf", "'<%s>\\n'",
	    ":::", "a\nb", "c");
	OUT_IS(res, 0, "<a>\n<b>\n<c>\n");
	RUN(&res, "--fake-gpus", "1", "--quiet", "-k", "-0", "printf",
	    "'<%s>\\n'", ":::", "a\nb", "c");
	OUT_IS(res, 0, "<a\nb>\n<c>\n");
	tmp_remove();
}
END_TEST

/* Bug 5: under --halt fail=1 the exit status is the failing task's
 * (128 + signal when one killed it); success= halting exits 0 though a
 * task failed before (before: the number of failed tasks). */
START_TEST(halt_exit_status_is_parallels)
{
	struct res	 res;

	tmp_make();
	RUN(&res, "--fake-gpus", "1", "--quiet", "--halt", "now,fail=1",
	    "exit {}", ":::", "0", "7", "3");
	ck_assert_msg(res.code == 7, "exit %d: %s", res.code, res.err);
	RUN(&res, "--fake-gpus", "1", "--quiet", "--halt", "soon,fail=1",
	    "kill -9 $$; exit {}", ":::", "0");
	ck_assert_msg(res.code == 137, "exit %d: %s", res.code, res.err);
	RUN(&res, "--fake-gpus", "1", "--quiet", "--halt", "now,success=1",
	    "exit {}", ":::", "4", "0", "5");
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	/* parallel's older form: 2 is now,fail=1. */
	RUN(&res, "--fake-gpus", "1", "--quiet", "--halt", "2", "exit {}",
	    ":::", "0", "9", "3");
	ck_assert_msg(res.code == 9, "exit %d: %s", res.code, res.err);
	tmp_remove();
}
END_TEST

/* gpupool-run - < tasks (and parallel's gpupool-run < tasks): the tasks
 * of a file on standard input run, from where the shell left it (before:
 * the count read it to its end first, and nothing ran, exit 0). */
START_TEST(tasks_from_redirected_stdin)
{
	struct res	 res;

	tmp_make();
	run_stdin("echo one\necho two\n", &res, (const char *const []){
	    "--fake-gpus", "1", "--quiet", "-", NULL });
	OUT_IS(res, 0, "one\ntwo\n");
	run_stdin("echo one\nexit 3\n", &res, (const char *const []){
	    "--fake-gpus", "1", "--quiet", NULL });
	OUT_IS(res, 1, "one\n");
	/* No tasks file, standard input /dev/null: an error, not exit 0. */
	run_refused("no tasks file given", NULL, NULL, NULL,
	    (const char *const []){ "--fake-gpus", "1", "--joblog",
	    pathf("jl"), NULL });
	ck_assert_int_ne(access(pathf("jl"), F_OK), 0);
	tmp_remove();
}
END_TEST

/* COMMAND alone takes its arguments from standard input, one a line,
 * each task started as its line comes: the first runs while the writer
 * has not written the second. */
START_TEST(arguments_on_standard_input_as_they_come)
{
	struct want_str	 w;
	struct res	 res;
	pid_t		 pid;
	double		 t0;
	char		*o, *e, *cmd;
	int		 p[2];

	tmp_make();
	run_stdin("a\nb c\n", &res, (const char *const []){ "--fake-gpus",
	    "2", "--quiet", "-k", "printf", "'<%s>\\n'", NULL });
	OUT_IS(res, 0, "<a>\n<b c>\n");
	/* Close-on-exec: gpupool-run must not hold the writer's end. */
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	o = pathf("out");
	e = pathf("err");
	cmd = cmdf("echo {} > %s/{}.seen", tmp);
	t0 = now_s();
	pid = start(p[0], o, e, (const char *const []){ "--fake-gpus", "1",
	    "--quiet", cmd, NULL });
	close(p[0]);
	ck_assert_int_eq(write(p[1], "first\n", 6), 6);
	w.path = pathf("first.seen");
	w.s = "first";
	while (!have_str(&w)) {
		ck_assert_msg(now_s() - t0 < 60, "no first task while the "
		    "input is open");
		nap(20);
	}
	ck_assert_int_eq(write(p[1], "second\n", 7), 7);
	close(p[1]);
	finish(pid, t0, 60, o, e, &res);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_ptr_nonnull(slurp(pathf("second.seen"), NULL));
	tmp_remove();
}
END_TEST

/* Empty input: from standard input no task and exit 0, -r or not (as
 * parallel); an empty :::: file is an error unless -r; -r skips blank
 * arguments. */
START_TEST(empty_input_with_and_without_r)
{
	struct res	 res;
	char		*f;

	tmp_make();
	f = pathf("empty");
	puts_file(f, "");
	run_stdin("", &res, (const char *const []){ "--fake-gpus", "1",
	    "--quiet", "echo", "x", NULL });
	OUT_IS(res, 0, "");
	run_stdin("", &res, (const char *const []){ "--fake-gpus", "1",
	    "--quiet", "-r", "echo", "x", NULL });
	OUT_IS(res, 0, "");
	run_refused("no arguments in the file", NULL, NULL, NULL,
	    (const char *const []){ "--fake-gpus", "1", "echo", "::::", f,
	    NULL });
	RUN(&res, "--fake-gpus", "1", "--quiet", "-r", "echo", "::::", f);
	OUT_IS(res, 0, "");
	run_stdin("a\n\n  \nb\n", &res, (const char *const []){ "--fake-gpus",
	    "1", "--quiet", "-k", "-r", "echo", "[{}]", NULL });
	OUT_IS(res, 0, "[a]\n[b]\n");
	run_stdin("a\n\nb\n", &res, (const char *const []){ "--fake-gpus",
	    "1", "--quiet", "-k", "echo", "[{}]", NULL });
	OUT_IS(res, 0, "[a]\n[]\n[b]\n");
	tmp_remove();
}
END_TEST

/* -0: arguments with a newline, quotes, $, a TAB, bytes that are not
 * UTF-8, each one inert argument; a NUL in a line-separated one is an
 * error naming its line. */
START_TEST(nul_separated_odd_bytes)
{
	static const char in[] = "a\nb\0it's\0$HOME;*\0t\tab\0\xff\xfe\0";
	struct res	 res;
	char		*p, *b;
	int		 fd;

	tmp_make();
	p = pathf("in0");
	put(p, in, sizeof(in) - 1);
	ck_assert_int_ge(fd = open(p, O_RDONLY), 0);
	run_in(fd, 60, &res, (const char *const []){ "--fake-gpus", "2",
	    "--quiet", "-k", "-0", "printf", "'<%s>'", NULL });
	close(fd);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	b = res.out;
	ck_assert_str_eq(b, "<a\nb>\n<it's>\n<$HOME;*>\n<t\tab>\n<\xff\xfe>\n");
	put(p, "ok\nbad\0line\n", 12);
	run_refused(":2: NUL byte in an argument", NULL, NULL, NULL,
	    (const char *const []){ "--fake-gpus", "1", "echo", "::::", p,
	    NULL });
	tmp_remove();
}
END_TEST

/* -k: output in input order, whatever the order tasks end in; and a ^C
 * while a slow first task holds back the others' output prints what
 * ended, in order, before exiting 130. */
START_TEST(keep_order_and_ctrl_c)
{
	struct want_lines w;
	struct res	 res;
	pid_t		 pid;
	double		 t0;
	char		*o, *e, *jl;

	tmp_make();
	RUN(&res, "--fake-gpus", "2", "--quiet", "-k", "sleep {}; echo {}",
	    ":::", "1", "0", "0.5", "0");
	OUT_IS(res, 0, "1\n0\n0.5\n0\n");
	o = pathf("out");
	e = pathf("err");
	jl = pathf("jl");
	t0 = now_s();
	pid = start(-1, o, e, (const char *const []){ "--fake-gpus", "2",
	    "--quiet", "-k", "--grace", "2s", "--joblog", jl,
	    "echo start{}; [ {} = 1 ] && sleep 60; echo end{}", ":::", "1",
	    "2", "3", NULL });
	w.path = jl;
	w.n = 3;	/* the header, tasks 2 and 3 */
	w.c = 0;
	while (!have_lines(&w)) {
		ck_assert_msg(now_s() - t0 < 60, "tasks 2 and 3 did not end");
		nap(20);
	}
	ck_assert_str_eq(slurp(o, NULL), "");	/* held for task 1 */
	kill(pid, SIGINT);
	finish(pid, t0, 60, o, e, &res);
	OUT_IS(res, 130, "start1\nstart2\nend2\nstart3\nend3\n");
	tmp_remove();
}
END_TEST

/* -j N: N slots in all over the GPUs, as Python's processes=N. */
START_TEST(j_is_slots_in_all)
{
	struct res	 res;

	tmp_make();
	RUN(&res, "--fake-gpus", "2", "-j", "4", "--dry-run", "echo", ":::",
	    "a", "b", "c", "d");
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_ptr_nonnull(strstr(res.out, "\n4\t1\t3\tfake1\techo d\n"));
	/* Fewer than the GPUs: one slot on each of the first. */
	RUN(&res, "--fake-gpus", "3", "-j", "2", "--dry-run", "echo", ":::",
	    "a", "b", "c");
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_ptr_nonnull(strstr(res.out, "\tfake0\techo a\n"));
	ck_assert_ptr_nonnull(strstr(res.out, "\tfake1\techo b\n"));
	ck_assert_ptr_nonnull(strstr(res.out, "\tfake0\techo c\n"));
	ck_assert_ptr_null(strstr(res.out, "fake2"));
	run_refused("-j 3: the run has 2 GPUs", NULL, NULL, NULL,
	    (const char *const []){ "--fake-gpus", "2", "-j", "3", "echo",
	    ":::", "a", NULL });
	run_refused("-j 3 with --per-gpu 2: the run has 2 GPUs, so 4 slots",
	    NULL, NULL, NULL, (const char *const []){ "--fake-gpus", "2",
	    "--per-gpu", "2", "-j", "3", "echo", ":::", "a", NULL });
	run_refused("count CPU cores", NULL, NULL, NULL,
	    (const char *const []){ "--fake-gpus", "2", "-j", "0", "echo",
	    ":::", "a", NULL });
	tmp_remove();
}
END_TEST

/* bash -c script, its output and exit status in *res. */
static void
run_bash(const char *script, struct res *res)
{
	char	*o = pathf("bash.out"), *e = pathf("bash.err");
	double	 t0 = now_s();
	pid_t	 pid;
	int	 fd;

	ck_assert_int_ge(pid = fork(), 0);
	if (pid == 0) {
		setpgid(0, 0);
		(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
		fd = open("/dev/null", O_RDONLY);
		dup2(fd, 0);
		fd = open(o, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 1);
		fd = open(e, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 2);
		unsetenv("GPUPOOL_FAKE_GPUS");
		unsetenv("PARALLEL_SHELL");
		execl("/bin/bash", "bash", "-c", script, (char *)NULL);
		_exit(126);
	}
	finish(pid, t0, 60, o, e, res);
}

/* Whether /bin/sh is dash (Debian's), which knows neither bash's
 * exported functions nor [[ ]]. */
static int
sh_is_dash(void)
{
	char	 b[256];
	ssize_t	 n = readlink("/bin/sh", b, sizeof(b) - 1);

	if (n <= 0)
		return 0;
	b[n] = '\0';
	return strstr(b, "dash") != NULL;
}

/* The shell: the one gpupool-run was started from (bash: its exported
 * function, [[ ]]), $PARALLEL_SHELL, --shell (before: always /bin/sh,
 * dash here, which runs neither). */
START_TEST(tasks_run_in_parallels_shell)
{
	struct res	 res;

	if (access("/bin/bash", X_OK) != 0)
		return;
	tmp_make();
	run_bash(cmdf("f() { echo fn $1; }; export -f f; %s --fake-gpus 1 "
	    "--quiet -k f ::: 1 2; exit $?", GPUPOOL_RUN), &res);
	OUT_IS(res, 0, "fn 1\nfn 2\n");
	run_bash(cmdf("%s --fake-gpus 1 --quiet '[[ {} == x* ]] && echo yes' "
	    "::: xy; exit $?", GPUPOOL_RUN), &res);
	OUT_IS(res, 0, "yes\n");
	if (sh_is_dash()) {
		run_bash(cmdf("f() { echo fn; }; export -f f; %s --fake-gpus 1 "
		    "--quiet --shell /bin/sh f ::: 1; exit $?", GPUPOOL_RUN),
		    &res);
		OUT_IS(res, 1, "");
	}
	/* From a parent that is no shell (this test): $PARALLEL_SHELL. */
	setenv("BASH_FUNC_g%%", "() {  echo g \"$1\"\n}", 1);
	setenv("PARALLEL_SHELL", "/bin/bash", 1);
	RUN(&res, "--fake-gpus", "1", "--quiet", "g", ":::", "1");
	unsetenv("PARALLEL_SHELL");
	OUT_IS(res, 0, "g 1\n");
	run_refused("--shell: cannot run '/nonexistent/sh'", NULL, NULL,
	    NULL, (const char *const []){ "--fake-gpus", "1", "--shell",
	    "/nonexistent/sh", "echo", ":::", "a", NULL });
	tmp_remove();
}
END_TEST

/* bash -c script with chain.sh in the temporary directory: "chain.sh
 * NAME... -- CMD" runs CMD under one timeout(1) per NAME, which bash's
 * exec -a names so, the last NAME CMD's parent; no bash is left between
 * them. */
static void
run_chain(const char *script, struct res *res)
{
	puts_file(pathf("chain.sh"), "n=$1; shift; [ \"$n\" = -- ] && exec "
	    "\"$@\"; exec -a \"$n\" /usr/bin/timeout 100 /bin/bash \"$0\" "
	    "\"$@\"\n");
	run_bash(script, res);
}

/* The shell, as GNU parallel finds it (issue 33, point 10): the first
 * (grand)parent named as one of parallel's shells ("ksh", "-ksh",
 * "/dir/ksh", "[ksh]", "ksh -l"), its name looked up on $PATH, not its
 * path; a parent so named that is not on $PATH ends the search; then
 * $SHELL, then /bin/sh; $PARALLEL_SHELL first, a name kept as a name;
 * each variable only when not empty (before: the direct parent alone,
 * by its executable, else /bin/sh). $PATH is bin/, whose only program is
 * ksh, a link to bash: no shell above this test can be found on it.
 * Each task prints its $0 (and its argument). */
START_TEST(shell_is_found_as_parallel_finds_it)
{
	static const char *const c[] = {
		/* variables, the parents' names (the nearest last), $0 */
		"", "ksh timeout", "BIN/ksh",
		"", "timeout -ksh timeout", "BIN/ksh",
		"", "/opt/none/ksh", "BIN/ksh",
		"", "'[ksh]'", "BIN/ksh",
		"", "'ksh -l'", "BIN/ksh",
		"", "ksh zsh", "/bin/bash",
		"", "kshx 'ksh (x)' xksh", "/bin/bash",
		"SHELL=", "kshx", "/bin/sh",
		"PARALLEL_SHELL=ksh", "ksh", "ksh",
		"PARALLEL_SHELL=", "ksh", "BIN/ksh",
	};
	static const char *const other[] = {
		/* a shell, a task that only it runs */
		"/usr/bin/tcsh", "set v={}; echo $v",
		"/usr/bin/fish", "set v {}; echo $v",
		"/usr/bin/rc", "v={}; echo $v",
	};
	struct res	 res;
	char		*bin, *want;
	size_t		 i;

	if (access("/bin/bash", X_OK) != 0 ||
	    access("/usr/bin/timeout", X_OK) != 0)
		return;
	tmp_make();
	bin = pathf("bin");
	ck_assert_int_eq(mkdir(bin, 0755), 0);
	ck_assert_int_eq(symlink("/bin/bash", pathf("bin/ksh")), 0);
	for (i = 0; i < sizeof(c) / sizeof(c[0]); i += 3) {
		run_chain(cmdf("export PATH=%s SHELL=/bin/bash %s; exec "
		    "/bin/bash %s %s -- %s --fake-gpus 1 --quiet 'echo $0' ::: "
		    "1", bin, c[i], pathf("chain.sh"), c[i + 1], GPUPOOL_RUN),
		    &res);
		want = strncmp(c[i + 2], "BIN", 3) == 0 ? cmdf("%s%s 1\n",
		    bin, c[i + 2] + 3) : cmdf("%s 1\n", c[i + 2]);
		ck_assert_msg(res.code == 0 && strcmp(res.out, want) == 0,
		    "%s, parents %s: exit %d, $0 %s, not %s%s", c[i],
		    c[i + 1], res.code, res.out, want, res.err);
	}
	/* From tcsh, fish or rc (where installed): its syntax, and the
	 * arguments quoted as it reads them (sh's quotes would make "q!w" a
	 * history event for tcsh, end a word at "\\'" for fish). */
	for (i = 0; i < sizeof(other) / sizeof(other[0]); i += 2) {
		if (access(other[i], X_OK) != 0)
			continue;
		ck_assert_int_eq(symlink(other[i], pathf("bin/%s",
		    strrchr(other[i], '/') + 1)), 0);
		run_chain(cmdf("export PATH=%s; exec /bin/bash %s %s -- %s "
		    "--fake-gpus 1 --quiet -k '%s' ::: 'q!w' \"it's\" 'x;y' "
		    "%s", bin, pathf("chain.sh"), strrchr(other[i], '/') + 1,
		    GPUPOOL_RUN, other[i + 1], strstr(other[i], "fish") ?
		    "'x\\'" : ""), &res);
		OUT_IS(res, 0, strstr(other[i], "fish") ? "q!w\nit's\nx;y\n"
		    "x\\\n" : "q!w\nit's\nx;y\n");
	}
	/* A shell that cannot be run is refused before anything runs. */
	run_chain(cmdf("export PATH=%s SHELL=/nonexistent; exec /bin/bash %s "
	    "kshx -- %s --fake-gpus 1 'echo $0' ::: 1", bin,
	    pathf("chain.sh"), GPUPOOL_RUN), &res);
	OUT_IS(res, 255, "");
	ck_assert_str_eq(res.err, "gpupool-run: SHELL: cannot run "
	    "'/nonexistent': No such file or directory\n");
	run_bash(cmdf("PARALLEL_SHELL=nosuch %s --fake-gpus 1 'echo $0' ::: "
	    "1", GPUPOOL_RUN), &res);
	OUT_IS(res, 255, "");
	ck_assert_str_eq(res.err, "gpupool-run: PARALLEL_SHELL: cannot run "
	    "'nosuch': not found in $PATH\n");
	/* bash, then a program that is no shell (python's subprocess,
	 * make): bash's exported function runs. */
	run_bash(cmdf("f() { echo fn $1; }; export -f f; /usr/bin/timeout 60 "
	    "%s --fake-gpus 1 --quiet f ::: 1; exit $?", GPUPOOL_RUN), &res);
	OUT_IS(res, 0, "fn 1\n");
	tmp_remove();
}
END_TEST

/* -m and -X take -N (or -n) as a cap, as parallel does (issue 33, point
 * 12; before: -N was ignored, one task); -N, as -X, repeats each word
 * that holds {} once per value (parallel's context replace), {1} in it
 * still the task's; -n does not; with --colsep, once per column. */
START_TEST(m_and_x_take_n_as_a_cap)
{
	static const char *const c[] = {
		"-m -N 3", "echo", "a b c\nd e f\ng\n",
		"-X -N 3", "echo x{}y", "xay xby xcy\nxdy xey xfy\nxgy\n",
		"-m -N 3", "echo x{}y", "xay xby xcy\nxdy xey xfy\nxgy\n",
		"-m -n 3", "echo x{}y", "xa b cy\nxd e fy\nxgy\n",
		"-X -n 4", "echo x{}y", "xay xby xcy xdy\nxey xfy xgy\n",
		"-N 3 -n 2", "echo x{}y{1}", "xaya xbya xcya\nxdyd xeyd xfyd\n"
		    "xgyg\n",
		"-n 2", "echo x{}y", "xa by\nxc dy\nxe fy\nxgy\n",
		"-m -N 3 -s 12", "echo", "a b c\nd e f\ng\n",
		"-m -N 2 -s 10", "echo", "a b\nc d\ne f\ng\n",
	};
	struct res	 res;
	char		*cmd;
	size_t		 i;

	tmp_make();
	for (i = 0; i < sizeof(c) / sizeof(c[0]); i += 3) {
		cmd = cmdf("%s --fake-gpus 1 --quiet -k %s %s ::: a b c d e f "
		    "g", GPUPOOL_RUN, c[i], c[i + 1]);
		run_bash(cmd, &res);
		ck_assert_msg(res.code == 0 && strcmp(res.out, c[i + 2]) == 0,
		    "%s: exit %d, '%s', not '%s' %s", cmd, res.code, res.out,
		    c[i + 2], res.err);
	}
	RUN(&res, "--fake-gpus", "1", "--quiet", "-k", "-N1", "echo", "x{}y",
	    ":::", "a", "b", ":::", "1");
	OUT_IS(res, 0, "xay x1y\nxby x1y\n");
	puts_file(pathf("csv"), "a,b\nc,d\n");
	RUN(&res, "--fake-gpus", "1", "--quiet", "-X", "--colsep", ",", "echo",
	    "x{}y", "::::", pathf("csv"));
	OUT_IS(res, 0, "xay xby xcy xdy\n");
	tmp_remove();
}
END_TEST

/* --nice N: each task runs at niceness N, absolute (parallel's
 * setpriority(0, 0, N)), as its own /proc/self/stat says; one out of
 * setpriority()'s range is refused with the library's reason. */
START_TEST(nice_runs_the_tasks_at_that_niceness)
{
	struct res	 res;
	int		 cur = getpriority(PRIO_PROCESS, 0);
	char		 n[16], want[64];

	ck_assert_msg(cur < 19, "at niceness 19 already: the case cannot "
	    "tell");
	snprintf(n, sizeof(n), "%d", cur + 4 > 19 ? 19 : cur + 4);
	snprintf(want, sizeof(want), "a %s\nb %s\nc %s\n", n, n, n);
	tmp_make();
	RUN(&res, "--fake-gpus", "2", "--quiet", "-k", "--nice", n,
	    "echo {} $(cut -d' ' -f19 /proc/self/stat)", ":::", "a", "b", "c");
	OUT_IS(res, 0, want);
	run_refused("--nice: '20' is not a niceness (-20 to 19)", NULL, NULL,
	    NULL, (const char *const []){ "--fake-gpus", "1", "--nice", "20",
	    "echo", ":::", "a", NULL });
	tmp_remove();
}
END_TEST

/* PARALLEL_SEQ is {#} and PARALLEL_JOBSLOT {%} (GPUPOOL_SLOT + 1), each
 * once, whatever the environment had. */
START_TEST(parallel_variables)
{
	struct res	 res;
	char		 want[256];
	char		*p, *l, *save = NULL;
	long		 seq, js, slot;
	int		 n = 0;

	tmp_make();
	setenv("PARALLEL_SEQ", "99", 1);
	RUN(&res, "--fake-gpus", "2", "--quiet", "-k", "echo {#} "
	    "$PARALLEL_SEQ $PARALLEL_JOBSLOT $GPUPOOL_SLOT {%}; env | grep -c "
	    "^PARALLEL_SEQ=", ":::", "a", "b", "c");
	unsetenv("PARALLEL_SEQ");
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	p = res.out;
	for (l = strtok_r(p, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		if (n % 2 == 1) {
			ck_assert_str_eq(l, "1");	/* once */
			n++;
			continue;
		}
		ck_assert_int_eq(sscanf(l, "%*d %ld %ld %ld", &seq, &js, &slot),
		    3);
		snprintf(want, sizeof(want), "%d %ld %ld %ld %ld", n / 2 + 1,
		    seq, js, slot, js);
		ck_assert_str_eq(l, want);
		ck_assert_int_eq(seq, n / 2 + 1);
		ck_assert_int_eq(js, slot + 1);
		n++;
	}
	ck_assert_int_eq(n, 6);
	tmp_remove();
}
END_TEST

/* --retry-failed: the failed tasks the joblog records run again, by
 * their Seq and command there; nothing else; a COMMAND is refused. */
START_TEST(retry_failed_reruns_the_failures)
{
	struct jrec	 j[16];
	struct res	 res;
	char		*jl;
	int		 n;

	tmp_make();
	jl = pathf("jl");
	RUN(&res, "--fake-gpus", "1", "--quiet", "--joblog", jl,
	    "echo {}; exit {}", ":::", "0", "1", "2");
	ck_assert_msg(res.code == 2, "exit %d: %s", res.code, res.err);
	RUN(&res, "--fake-gpus", "1", "--quiet", "--joblog", jl,
	    "--retry-failed");
	ck_assert_msg(res.code == 2, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(count_lines(res.out), 2);
	ck_assert_ptr_nonnull(strstr(res.out, "1\n"));
	ck_assert_ptr_nonnull(strstr(res.out, "2\n"));
	ck_assert_int_eq(n = read_joblog(jl, j, 16, NULL), 5);
	ck_assert_int_eq(j[3].seq + j[4].seq, 2 + 3);
	ck_assert_str_eq(j[n - 1].cmd, j[n - 1].seq == 2 ? "echo 1; exit 1" :
	    "echo 2; exit 2");
	run_refused("--retry-failed runs the failed tasks the joblog records",
	    NULL, NULL, NULL, (const char *const []){ "--fake-gpus", "1",
	    "--joblog", jl, "--retry-failed", "echo", ":::", "a", NULL });
	tmp_remove();
}
END_TEST

/* --resume with --results alone, as parallel: a task whose exitval is
 * there is skipped; --resume-failed also runs those whose exitval is not
 * 0. */
START_TEST(resume_from_results_alone)
{
	struct res	 res;
	char		*dir, *cmd;

	tmp_make();
	dir = pathf("res");
	cmd = cmdf("echo run >> %s/{}.runs; exit {}", tmp);
	RUN(&res, "--fake-gpus", "1", "--quiet", "--results", dir, cmd,
	    ":::", "0", "1");
	ck_assert_msg(res.code == 1, "exit %d: %s", res.code, res.err);
	RUN(&res, "--fake-gpus", "1", "--quiet", "--results", dir, "--resume",
	    cmd, ":::", "0", "1", "0");
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_str_eq(slurp(pathf("0.runs"), NULL), "run\nrun\n");
	ck_assert_str_eq(slurp(pathf("1.runs"), NULL), "run\n");
	RUN(&res, "--fake-gpus", "1", "--quiet", "--results", dir,
	    "--resume-failed", cmd, ":::", "0", "1", "0");
	ck_assert_msg(res.code == 1, "exit %d: %s", res.code, res.err);
	ck_assert_str_eq(slurp(pathf("1.runs"), NULL), "run\nrun\n");
	ck_assert_str_eq(slurp(pathf("0.runs"), NULL), "run\nrun\n");
	tmp_remove();
}
END_TEST

/* What gpupool-run does not take is refused, one line saying why, with
 * nothing run. */
START_TEST(refused_with_the_reason)
{
	static const struct {
		const char	*args[8];
		const char	*says;
	} bad[] = {
		{ { "--pipe", "wc" }, "'--pipe' splits standard input" },
		{ { "-S", "host", "echo", ":::", "a" }, "runs under MPI" },
		{ { "--plus", "echo", "{+/}", ":::", "a" },
		  "defines replacement strings" },
		{ { "-I", ",,", "echo", ",,", ":::", "a" },
		  "defines replacement strings" },
		{ { "echo", "{= $_ =}", ":::", "a" }, "is a Perl expression" },
		{ { "-j", "50%", "echo", ":::", "a" }, "count CPU cores" },
		{ { "--shuf", "echo", ":::", "a" }, "'--shuf' is not supported" },
		{ { "--no-such-option" }, "unknown option '--no-such-option'" },
		{ { "-m", "echo", ":::", "a", ":::", "b" },
		  "fill tasks with the arguments of one source" },
		{ { "nosuchcommand_or_file" }, "and it is no command either" },
	};
	const char	*args[12];
	char		*ran;
	size_t		 i, k;

	tmp_make();
	ran = pathf("ran");
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		args[0] = "--fake-gpus";
		args[1] = "1";
		for (k = 0; k < 8 && bad[i].args[k] != NULL; k++)
			args[k + 2] = bad[i].args[k];
		args[k + 2] = NULL;
		run_refused(bad[i].says, ran, NULL, NULL, args);
	}
	/* {= =} from standard input: refused before its first line. */
	run_refused("is a Perl expression", NULL, NULL, "/dev/null",
	    (const char *const []){ "--fake-gpus", "1", "echo", "{=1 $_ =}",
	    NULL });
	tmp_remove();
}
END_TEST

/* --tagstring with replacement strings, unquoted; -v's command on
 * standard output, --verbose's on standard error, {%} filled in. */
START_TEST(tagstring_and_verbose)
{
	struct res	 res;

	tmp_make();
	RUN(&res, "--fake-gpus", "1", "--quiet", "-k", "--tagstring",
	    "{}-{#}/{%}", "echo", "x", ":::", "a b", "c");
	OUT_IS(res, 0, "a b-1/1\tx a b\nc-2/1\tx c\n");
	RUN(&res, "--fake-gpus", "1", "--quiet", "-k", "-v", "echo {%} {}",
	    ":::", "a");
	OUT_IS(res, 0, "echo 1 a\n1 a\n");
	RUN(&res, "--fake-gpus", "1", "--quiet", "-k", "--verbose", "echo",
	    ":::", "a");
	OUT_IS(res, 0, "a\n");
	ck_assert_str_eq(res.err, "echo a\n");
	tmp_remove();
}
END_TEST

/* -N with a short last task, {-1}, -N0, a huge -N; -X and -m, and a lone
 * argument longer than a command line holds: a task of its own, run as
 * a script. */
START_TEST(several_arguments_per_task)
{
	struct res	 res;
	char		*big, *cmd;

	tmp_make();
	RUN(&res, "--fake-gpus", "2", "--quiet", "-k", "-N2", "echo",
	    "[{1}]", "[{2}]", "[{-1}]", ":::", "a", "b", "c");
	OUT_IS(res, 0, "[a] [b] [b]\n[c] [] [c]\n");
	RUN(&res, "--fake-gpus", "2", "--quiet", "-k", "-N0", "echo", "x",
	    ":::", "a", "b");
	OUT_IS(res, 0, "x\nx\n");
	RUN(&res, "--fake-gpus", "1", "--quiet", "-N", "1000000000", "echo",
	    ":::", "a", "b", "c");
	OUT_IS(res, 0, "a b c\n");
	RUN(&res, "--fake-gpus", "1", "--quiet", "-X", "echo", "pre{}post",
	    "x", ":::", "a", "b");
	OUT_IS(res, 0, "preapost prebpost x\n");
	RUN(&res, "--fake-gpus", "1", "--quiet", "-k", "-m", "-s", "12",
	    "echo", ":::", "aaa", "bbb", "ccc");
	OUT_IS(res, 0, "aaa bbb\nccc\n");
	/* 200 KiB: past what one argument may be (so from a file). */
	big = calloc(1, (200 << 10) + 8);
	ck_assert_ptr_nonnull(big);
	memcpy(big, "ab\n", 3);
	memset(big + 3, 'w', 200 << 10);
	memcpy(big + 3 + (200 << 10), "\nc\n", 4);
	put(pathf("big"), big, (200 << 10) + 6);
	free(big);
	cmd = cmdf("printf %%s {} | wc -c");
	RUN(&res, "--fake-gpus", "1", "--quiet", "-k", "-X", cmd, "::::",
	    pathf("big"));
	OUT_IS(res, 0, "2\n204800\n1\n");
	tmp_remove();
}
END_TEST

/* -a: its file is an input no output may be; -a alone is a tasks file;
 * a tasks file keeps the options after it; standard input beside a tasks
 * file is left alone. */
START_TEST(arg_files_and_tasks_files)
{
	struct res	 res;
	char		*jl, *tasks, *args;
	const char	*keep[2] = { NULL, NULL };

	tmp_make();
	jl = pathf("jl");
	tasks = pathf("tasks");
	args = pathf("args");
	puts_file(jl, "a\n");
	puts_file(tasks, "echo from the tasks file\n");
	puts_file(args, "x\ny\n");
	keep[0] = jl;
	run_refused("joblog", NULL, keep, NULL, (const char *const []){
	    "--fake-gpus", "1", "-a", jl, "--joblog", jl, "echo", NULL });
	RUN(&res, "--fake-gpus", "1", "--quiet", "-a", tasks);
	OUT_IS(res, 0, "from the tasks file\n");
	RUN(&res, "--fake-gpus", "1", "-k", "-a", args, "-a", args, "echo");
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_str_eq(res.out, "x x\nx y\ny x\ny y\n");
	RUN(&res, "--fake-gpus", "1", tasks, "--quiet");
	OUT_IS(res, 0, "from the tasks file\n");
	run_stdin("ignored\n", &res, (const char *const []){ "--fake-gpus",
	    "1", "--quiet", tasks, NULL });
	OUT_IS(res, 0, "from the tasks file\n");
	tmp_remove();
}
END_TEST

static Suite *
parallel_suite(void)
{
	Suite	*s = suite_create("parallel");
	TCase	*tc = tcase_create("parallel");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, linked_files_step_together);
	tcase_add_test(tc, q_quotes_the_command);
	tcase_add_test(tc, resume_reads_parallels_joblog);
	tcase_add_test(tc, unreadable_joblog_is_refused);
	tcase_add_test(tc, newline_in_a_word_is_two_arguments);
	tcase_add_test(tc, halt_exit_status_is_parallels);
	tcase_add_test(tc, tasks_from_redirected_stdin);
	tcase_add_test(tc, arguments_on_standard_input_as_they_come);
	tcase_add_test(tc, empty_input_with_and_without_r);
	tcase_add_test(tc, nul_separated_odd_bytes);
	tcase_add_test(tc, keep_order_and_ctrl_c);
	tcase_add_test(tc, j_is_slots_in_all);
	tcase_add_test(tc, tasks_run_in_parallels_shell);
	tcase_add_test(tc, shell_is_found_as_parallel_finds_it);
	tcase_add_test(tc, nice_runs_the_tasks_at_that_niceness);
	tcase_add_test(tc, parallel_variables);
	tcase_add_test(tc, retry_failed_reruns_the_failures);
	tcase_add_test(tc, resume_from_results_alone);
	tcase_add_test(tc, refused_with_the_reason);
	tcase_add_test(tc, tagstring_and_verbose);
	tcase_add_test(tc, several_arguments_per_task);
	tcase_add_test(tc, m_and_x_take_n_as_a_cap);
	tcase_add_test(tc, arg_files_and_tasks_files);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return gp_check_run(parallel_suite());
}
