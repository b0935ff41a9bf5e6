/*
 * check_timeline.c: gpupool-run --timeline, end to end (suite cli). The
 * SVG is parsed as XML by timeline_svg.py, which sums it up one line per
 * row, bar and strip; the tests assert on those lines: what a known run
 * and a hand-written joblog draw, that hostile commands stay well-formed
 * XML, that 10^5 attempts stay under 2 MB, that a run ended by a signal
 * is drawn, and that a path that cannot be written fails before
 * anything runs.
 */
/* Not every helper of cli_test.h is needed here (the probe's log). */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "check_main.h"
#include "cli_test.h"

#include <dirent.h>
#include <errno.h>
#include <sys/mount.h>

#ifndef TL_SVG_PY
#error "build with -DTL_SVG_PY=path"
#endif

/* timeline_svg.py's summary of svg, or NULL: it did not parse. */
static char *
summary_of(const char *svg)
{
	char	*cmd, *out = NULL;
	size_t	 n = 0, cap = 0;
	FILE	*p;
	char	 buf[4096];
	size_t	 r;

	ck_assert_int_ge(asprintf(&cmd, "python3 %s '%s'", TL_SVG_PY, svg), 0);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	while ((r = fread(buf, 1, sizeof(buf), p)) > 0) {
		if (n + r + 1 > cap) {
			cap = 2 * (n + r + 1);
			out = realloc(out, cap);
			ck_assert_ptr_nonnull(out);
		}
		memcpy(out + n, buf, r);
		n += r;
	}
	free(cmd);
	if (pclose(p) != 0) {
		free(out);
		return NULL;
	}
	if (out == NULL)
		out = strdup("");
	else
		out[n] = '\0';
	return out;
}

/* Lines of s starting with prefix. */
static int
count(const char *s, const char *prefix)
{
	const char	*p;
	int		 n = 0;
	size_t		 len = strlen(prefix);

	for (p = s; p != NULL && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
		n += strncmp(p, prefix, len) == 0;
	return n;
}

/* The value after "size " in a summary. */
static long
size_of(const char *s)
{
	const char	*p = strstr(s, "size ");

	ck_assert_ptr_nonnull(p);
	return strtol(p + 5, NULL, 10);
}

/* No temporary left beside the picture in the test's directory. */
static void
no_temporary(void)
{
	char	*cmd;

	ck_assert_int_ge(asprintf(&cmd, "ls -a '%s' | grep -q '^\\.t\\.svg\\.'",
	    tmp), 0);
	ck_assert_msg(system(cmd) != 0, "a temporary was left in %s", tmp);
	free(cmd);
}

START_TEST(known_run_draws_each_attempt)
{
	static struct jrec	 jrec[MAXREC];
	struct res	 r;
	char		*tasks, *svg, *jl, *s;

	tmp_make();
	tasks = pathf("tasks.txt");
	svg = pathf("t.svg");
	jl = pathf("jl.txt");
	puts_file(tasks,
	    "sleep 0.3; echo ok '<&\"x'\n"
	    "sleep 0.3; exit 3\n"
	    "sleep 0.3; test \"$GPUPOOL_ATTEMPT\" = 2\n"
	    "sleep 0.3; kill -KILL $$\n"
	    "sleep 30\n"
	    "sleep 0.3\n");
	RUN(&r, "--fake-gpus", "2", "--retries", "1", "--timeout", "1s",
	    "--grace", "200ms", "--joblog", jl, "--timeline", svg, tasks);
	ck_assert_int_eq(r.code, 3);	/* exit 3, kill, timeout */
	s = summary_of(svg);
	ck_assert_msg(s != NULL, "the SVG does not parse");
	ck_assert_int_eq(count(s, "row "), 2);
	ck_assert_ptr_nonnull(strstr(s, "row GPU 0 slot 0\n"));
	ck_assert_ptr_nonnull(strstr(s, "row GPU 1 slot 1\n"));
	/* Six tasks, each retried once but task 6 and 3's second try. */
	ck_assert_int_eq(count(s, "bar "), 10);
	ck_assert_int_eq(count(s, "bar ok "), 3);
	ck_assert_int_eq(count(s, "bar retried "), 4);
	ck_assert_int_eq(count(s, "bar failed "), 1);
	ck_assert_int_eq(count(s, "bar killed_by_signal "), 1);
	ck_assert_int_eq(count(s, "bar timed_out "), 1);
	ck_assert_ptr_nonnull(strstr(s, "task 1: ok | GPU fake"));
	ck_assert_ptr_nonnull(strstr(s, "| sleep 0.3; echo ok '<&\"x'\n"));
	ck_assert_ptr_nonnull(strstr(s, "task 2 attempt 2: failed, exit "
	    "status 3"));
	ck_assert_ptr_nonnull(strstr(s, "task 3 attempt 2: ok"));
	ck_assert_ptr_nonnull(strstr(s, "task 4 attempt 2: killed by signal, "
	    "signal 9"));
	ck_assert_ptr_nonnull(strstr(s, "task 5 attempt 2: timed out"));
	ck_assert_int_eq(count(s, "untitled 0"), 1);
	ck_assert_int_eq(count(s, "strip "), 0);
	/* A bar per attempt the joblog records. */
	ck_assert_int_eq(read_joblog(jl, jrec, MAXREC, NULL), 10);
	no_temporary();
	free(s);
	tmp_remove();
}
END_TEST

START_TEST(from_joblog_rows_by_host_and_gpu)
{
	struct res	 r;
	char		*jl, *svg, *s, *p, *q;

	tmp_make();
	jl = pathf("jl.txt");
	svg = pathf("t.svg");
	puts_file(jl,
	    "Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\tExitval\t"
	    "Signal\tCommand\tGPU\tGPUMem\tGPUUtil\n"
	    "1\t:\t1000.000\t10.000\t0\t0\t0\t0\ta\t0\t-\t-\n"
	    "2\t:\t1005.000\t10.000\t0\t0\t0\t0\tb\t0\t-\t-\n"
	    "3\t:\t1000.000\t4.000\t0\t0\t1\t0\tc\t1\t-\t-\n"
	    "3\t:\t1004.000\t4.000\t0\t0\t0\t0\tc\t1\t-\t-\n"
	    "4\tnodeB\t1001.000\t10.000\t0\t0\t-1\t15\td\t0\t-\t-\n"
	    "5\tnodeB\t1011.000\t3.000\t0\t0\t-1\t9\te\t0\t-\t-\n"
	    "6\t:\t1012.0\tgarbage\n");
	RUN(&r, "--timeline", svg, "--from-joblog", jl, "--timeout", "10s");
	ck_assert_int_eq(r.code, 0);
	ck_assert_ptr_nonnull(strstr(r.err, "1 line of joblog"));
	s = summary_of(svg);
	ck_assert_msg(s != NULL, "the SVG does not parse");
	/* Rows by host, then GPU; this machine's without its ":". */
	p = strstr(s, "row GPU 0\n");
	q = strstr(s, "row GPU 1\n");
	ck_assert(p != NULL && q != NULL && p < q);
	ck_assert(strstr(s, "row nodeB GPU 0\n") > q);
	ck_assert_int_eq(count(s, "row "), 3);
	ck_assert_int_eq(count(s, "bar "), 6);
	/* Tasks 1 and 2 overlap on GPU 0: two lanes, one y each. */
	ck_assert_ptr_nonnull(strstr(s, "bar ok 59 task 1: ok"));
	ck_assert_ptr_nonnull(strstr(s, "bar ok 73 task 2: ok"));
	ck_assert_ptr_nonnull(strstr(s, "bar retried"));
	ck_assert_ptr_nonnull(strstr(s, "task 3 attempt 1: retried, exit "
	    "status 1"));
	ck_assert_ptr_nonnull(strstr(s, "task 3 attempt 2: ok"));
	/* Killed at --timeout: timed out; killed sooner: a signal. */
	ck_assert_ptr_nonnull(strstr(s, "bar timed_out"));
	ck_assert_ptr_nonnull(strstr(s, "task 4: timed out, signal 15 | GPU 0 "
	    "on nodeB"));
	ck_assert_ptr_nonnull(strstr(s, "task 5: killed by signal, signal 9"));
	ck_assert_ptr_nonnull(strstr(s, "key ok 3\n"));
	free(s);
	tmp_remove();
}
END_TEST

START_TEST(hostile_commands_stay_xml)
{
	static const char	 hostile[] = "x <y> & \"q\" 'a' ]]> \x01\x1b[31m "
	    "\xff\xfe\xc0\xaf \xed\xa0\x80 \xef\xbf\xbf caf\xc3\xa9 \xe2\x9c\x93";
	struct res		 r;
	char			*jl, *svg, *s, *b;

	tmp_make();
	jl = pathf("jl.txt");
	svg = pathf("t.svg");
	ck_assert_int_ge(asprintf(&b, "1\th<o>st&\t1000.0\t1.0\t0\t0\t0\t0\t"
	    "%s\tG\"&<\t-\t-\n", hostile), 0);
	puts_file(jl, b);
	RUN(&r, "--timeline", svg, "--from-joblog", jl);
	ck_assert_int_eq(r.code, 0);
	s = summary_of(svg);
	ck_assert_msg(s != NULL, "hostile bytes broke the XML");
	/* Markup comes back as it was; control bytes and what is not
	 * UTF-8 (overlong, surrogate, U+FFFF) as \xNN; UTF-8 stays. */
	ck_assert_ptr_nonnull(strstr(s, "row h<o>st& GPU G\"&<\n"));
	ck_assert_ptr_nonnull(strstr(s, "x <y> & \"q\" 'a' ]]> \\x01\\x1b[31m "
	    "\\xff\\xfe\\xc0\\xaf \\xed\\xa0\\x80 \\xef\\xbf\\xbf caf\xc3\xa9 "
	    "\xe2\x9c\x93\n"));
	free(b);
	free(s);
	tmp_remove();
}
END_TEST

/* A joblog of n attempts on 2 hosts x 8 GPUs, a few failures and kills,
 * back to back on each GPU. */
static void
big_joblog(const char *path, int n)
{
	FILE	*f = fopen(path, "w");
	double	 at[16] = { 0 };
	int	 i, g, ev, sig;

	ck_assert_ptr_nonnull(f);
	fputs("Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\tExitval\t"
	    "Signal\tCommand\tGPU\tGPUMem\tGPUUtil\n", f);
	for (i = 0; i < n; i++) {
		g = i % 16;
		ev = i % 23 == 0 ? 1 : 0;
		sig = i % 97 == 0 ? 9 : 0;
		fprintf(f, "%d\tnode%d\t%.3f\t%.3f\t0\t0\t%d\t%d\tpython "
		    "train.py --lr 0.%d --batch %d --seed %d --out "
		    "runs/very/long/path/%d\t%d\t-\t-\n", i + 1, g / 8,
		    1.7e9 + at[g], 1.0 + i % 7, sig ? -1 : ev, sig, i, i % 512,
		    i, i, g % 8);
		at[g] += 1.0 + i % 7 + (i % 50 == 0 ? 30 : 0.01);
	}
	ck_assert_int_eq(fclose(f), 0);
}

START_TEST(hundred_thousand_attempts_under_2mb)
{
	struct res	 r;
	char		*jl, *svg, *s;
	int		 n = _i == 0 ? 100000 : 10000;

	tmp_make();
	jl = pathf("jl.txt");
	svg = pathf("t.svg");
	big_joblog(jl, n);
	RUN(&r, "--timeline", svg, "--from-joblog", jl);
	ck_assert_int_eq(r.code, 0);
	s = summary_of(svg);
	ck_assert_msg(s != NULL, "the SVG does not parse");
	ck_assert_msg(size_of(s) < 2 * 1024 * 1024, "%ld bytes", size_of(s));
	ck_assert_int_eq(count(s, "row "), 16);
	ck_assert_int_le(count(s, "bar "), 2000);
	/* The rest merged, and the worst outcome shows. */
	ck_assert_int_gt(count(s, "strip ok "), 16);
	ck_assert_int_gt(count(s, "strip failed "), 0);
	ck_assert_int_eq(count(s, "untitled 0"), 1);
	free(s);
	tmp_remove();
}
END_TEST

START_TEST(run_ended_by_signal_is_drawn)
{
	struct want_lines	 w;
	struct res		 r;
	char			*tasks, *svg, *log, *o, *e, *s;
	double			 t0;
	pid_t			 pid;

	tmp_make();
	tasks = pathf("tasks.txt");
	svg = pathf("t.svg");
	log = pathf("started");
	ck_assert_int_ge(asprintf(&s, "echo x >> '%s'; sleep 60\n"
	    "echo x >> '%s'; sleep 60\ntrue\n", log, log), 0);
	puts_file(tasks, s);
	free(s);
	o = pathf("cli.out");
	e = pathf("cli.err");
	t0 = now_s();
	pid = start(-1, o, e, (const char *const []){ "--fake-gpus", "2",
	    "--grace", "200ms", "--timeline", svg, tasks, NULL });
	w.path = log;
	w.n = 2;
	w.c = 0;
	while (!have_lines(&w)) {
		ck_assert_msg(now_s() - t0 < 60, "the tasks never started");
		nap(20);
	}
	/* Killed outright (no drawing, no clean-up), it leaves nothing:
	 * the file being drawn has no name until it is complete
	 * (O_TMPFILE). */
	kill(pid, _i ? SIGKILL : SIGINT);
	finish(pid, t0, 60, o, e, &r);
	if (_i) {
		ck_assert_int_eq(r.code, 128 + SIGKILL);
		no_temporary();
		ck_assert_int_eq(access(svg, F_OK), -1);
		tmp_remove();
		return;
	}
	ck_assert_int_eq(r.code, 130);
	s = summary_of(svg);
	ck_assert_msg(s != NULL, "no SVG after SIGINT");
	ck_assert_int_eq(count(s, "bar killed_by_signal "), 2);
	ck_assert_int_eq(count(s, "bar "), 2);
	no_temporary();
	free(s);
	tmp_remove();
}
END_TEST

START_TEST(unwritable_path_fails_first)
{
	struct res	 r;
	char		*tasks, *mark, *bad, *s;

	tmp_make();
	tasks = pathf("tasks.txt");
	mark = pathf("ran");
	ck_assert_int_ge(asprintf(&s, "touch '%s'\n", mark), 0);
	puts_file(tasks, s);
	free(s);
	/* No directory; a directory; the tasks file, which it would
	 * replace; a node that is not a file. */
	bad = _i == 0 ? pathf("no/such/dir/t.svg") : _i == 1 ? pathf(".") :
	    _i == 2 ? strdup(tasks) : pathf("node");
	/* A FIFO, a symbolic link: the rename would replace the node (a
	 * root's --timeline /dev/stdout, the system's). */
	if (_i == 3)
		ck_assert_int_eq(mkfifo(bad, 0600), 0);
	if (_i == 4)
		ck_assert_int_eq(symlink("t.svg", bad), 0);
	RUN(&r, "--fake-gpus", "1", "--timeline", bad, tasks);
	ck_assert_int_eq(r.code, 255);
	ck_assert_ptr_nonnull(strstr(r.err, _i < 2 ? "cannot write timeline" :
	    _i == 2 ? "would replace" : "is not a regular file"));
	ck_assert_int_eq(count(r.err, "gpupool-run: "), 1);
	ck_assert_int_eq(access(mark, F_OK), -1);
	s = slurp(tasks, NULL);
	ck_assert_ptr_nonnull(strstr(s, "touch"));
	free(s);
	/* Nor the joblog the run is about to make, from a grid too. */
	RUN(&r, "--fake-gpus", "1", "--joblog", pathf("new.log"),
	    "--timeline", pathf("new.log"), "echo", ":::", "a");
	ck_assert_int_eq(r.code, 255);
	ck_assert_ptr_nonnull(strstr(r.err, "would replace"));
	ck_assert_int_eq(access(pathf("new.log"), F_OK), -1);
	/* Nor does --from-joblog replace its joblog. */
	RUN(&r, "--timeline", tasks, "--from-joblog", tasks);
	ck_assert_int_eq(r.code, 255);
	s = slurp(tasks, NULL);
	ck_assert_ptr_nonnull(strstr(s, "touch"));
	free(s);
	free(bad);
	tmp_remove();
}
END_TEST

/* Rows of a joblog whose times no run could have (a start of 1e300 s, a
 * runtime of 1e308 s, inf, nan, negative) are left out, each named by its
 * line, and the rest is drawn at once; a joblog of nothing else draws an
 * empty picture. Such numbers once kept the axis drawing for ever. */
START_TEST(absurd_times_are_left_out)
{
	struct res	 r;
	char		*jl, *svg, *s;

	tmp_make();
	jl = pathf("jl.txt");
	svg = pathf("t.svg");
	puts_file(jl,
	    "Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\tExitval\t"
	    "Signal\tCommand\tGPU\tGPUMem\tGPUUtil\n"
	    "1\t:\t1700000000.000\t2.000\t0\t0\t0\t0\ta\t0\t-\t-\n"
	    "2\t:\t1e300\t1.000\t0\t0\t0\t0\tb\t0\t-\t-\n"
	    "3\t:\t1700000001.000\t1e308\t0\t0\t0\t0\tc\t0\t-\t-\n"
	    "4\t:\t1700000001.000\tinf\t0\t0\t0\t0\td\t0\t-\t-\n"
	    "5\t:\tnan\t1.000\t0\t0\t0\t0\te\t0\t-\t-\n"
	    "6\t:\t-1e300\t1.000\t0\t0\t0\t0\tf\t0\t-\t-\n"
	    "7\t:\t1700000002.000\t1.000\t0\t0\t0\t0\tg\t0\t-\t-\n");
	run_in(-1, 30, &r, (const char *const []){ "--timeline", svg,
	    "--from-joblog", jl, NULL });
	ck_assert_msg(r.code == 0, "exit %d: %s", r.code, r.err);
	ck_assert_ptr_nonnull(strstr(r.err, ":3: "));
	ck_assert_ptr_nonnull(strstr(r.err, ":7: "));
	ck_assert_ptr_null(strstr(r.err, ":2: "));
	ck_assert_ptr_null(strstr(r.err, ":8: "));
	s = summary_of(svg);
	ck_assert_msg(s != NULL, "the SVG does not parse");
	ck_assert_int_eq(count(s, "bar "), 2);
	free(s);

	/* A device is no joblog: /dev/zero would be one line for ever. */
	run_in(-1, 30, &r, (const char *const []){ "--timeline", svg,
	    "--from-joblog", "/dev/zero", NULL });
	ck_assert_msg(r.code == 255 && strstr(r.err, "not a regular file") !=
	    NULL, "exit %d: %s", r.code, r.err);

	/* Nothing but one such row: the picture is empty, and drawn. */
	puts_file(jl, "1\t:\t1e300\t1.000\t0\t0\t0\t0\ta\t0\t-\t-\n");
	run_in(-1, 30, &r, (const char *const []){ "--timeline", svg,
	    "--from-joblog", jl, NULL });
	ck_assert_msg(r.code == 0, "exit %d: %s", r.code, r.err);
	s = summary_of(svg);
	ck_assert_msg(s != NULL, "the SVG does not parse");
	ck_assert_int_eq(count(s, "bar "), 0);
	free(s);
	tmp_remove();
}
END_TEST

/* A picture that does not fit on its disk says why: "No space left on
 * device", not stdio's "Input/output error"; no temporary is left. On
 * a 16 KiB tmpfs (skipped where one cannot be mounted). */
START_TEST(full_disk_says_no_space)
{
	struct res	 r;
	char		*jl, *dir, *svg;
	DIR		*d;
	struct dirent	*de;
	int		 left = 0;

	tmp_make();
	jl = pathf("jl.txt");
	dir = pathf("small");
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	if (mount("tmpfs", dir, "tmpfs", 0, "size=16k") == -1) {
		fprintf(stderr, "full_disk_says_no_space: skipped, cannot "
		    "mount a tmpfs: %s\n", strerror(errno));
		tmp_remove();
		return;
	}
	big_joblog(jl, 2000);
	svg = pathf("small/t.svg");
	RUN(&r, "--timeline", svg, "--from-joblog", jl);
	ck_assert_ptr_nonnull(d = opendir(dir));
	while ((de = readdir(d)) != NULL)
		left += de->d_name[0] != '.' || strlen(de->d_name) > 2;
	closedir(d);
	(void)umount2(dir, MNT_DETACH);
	ck_assert_msg(r.code == 255, "exit %d: %s", r.code, r.err);
	ck_assert_msg(strstr(r.err, "No space left on device") != NULL,
	    "said '%s'", r.err);
	ck_assert_int_eq(left, 0);
	tmp_remove();
}
END_TEST

static Suite *
timeline_suite(void)
{
	Suite	*s = suite_create("timeline");
	TCase	*tc = tcase_create("svg");

	tcase_set_timeout(tc, 150);
	tcase_add_test(tc, known_run_draws_each_attempt);
	tcase_add_test(tc, from_joblog_rows_by_host_and_gpu);
	tcase_add_test(tc, hostile_commands_stay_xml);
	tcase_add_loop_test(tc, hundred_thousand_attempts_under_2mb, 0, 2);
	tcase_add_loop_test(tc, run_ended_by_signal_is_drawn, 0, 2);
	tcase_add_loop_test(tc, unwritable_path_fails_first, 0, 5);
	tcase_add_test(tc, absurd_times_are_left_out);
	tcase_add_test(tc, full_disk_says_no_space);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return gp_check_run(timeline_suite());
}
