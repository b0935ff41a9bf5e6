/*
 * check_grid.c: gpupool-run COMMAND ::: ... end to end, GNU parallel's
 * argument grids: the product and its order, linked sources, arguments
 * from files (CSV with a header too), each replacement string, arguments
 * that would be shell syntax if they were not quoted, --dry-run, the
 * joblog and --resume on expanded commands, and the one line a bad grid
 * gets. Tasks write what they saw into files named by their number ({#}),
 * read once the run is over; --dry-run shows the expanded commands.
 */
#include "check_main.h"
/* The shared helpers this file has no use for are fine unused. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "cli_test.h"

/* The Command column of --dry-run's line for Seq seq, or NULL. */
static const char *
dry_cmd(const char *out, long seq)
{
	static char	 line[512];
	const char	*p;
	char		 head[24];
	size_t		 n;

	snprintf(head, sizeof(head), "\n%ld\t", seq);
	if ((p = strstr(out, head)) == NULL)
		return NULL;
	n = strcspn(p + 1, "\n");
	snprintf(line, sizeof(line), "%.*s", (int)n, p + 1);
	/* Seq, GPU, Slot, CUDA_VISIBLE_DEVICES, then the command. */
	for (p = line, n = 0; n < 4 && (p = strchr(p, '\t')) != NULL; n++)
		p++;
	return p;
}

/* What task seq wrote to TMP/<seq>.out, freed by the caller. */
static char *
task_out(long seq)
{
	char	*p = pathf("%ld.out", seq), *b = slurp(p, NULL);

	ck_assert_msg(b != NULL, "task %ld wrote nothing", seq);
	free(p);
	return b;
}

/* Each word arrives as one argument, inert: no splitting, no expansion,
 * no command after ';', no glob, no option, no slot in a literal {%}. */
START_TEST(quoting_hazards_stay_one_inert_argument)
{
	static const char *const hazard[] = { "a b", "it's", "\"q\"",
	    "$HOME", "x;touch pwned", "*", "-n", "{%}", "`id`", "a\\b",
	    "" };
	static const char *const seen[] = { "<a b>", "<it's>", "<\"q\">",
	    "<$HOME>", "<x;touch pwned>", "<*>", "<-n>", "<{%}>", "<`id`>",
	    "<a\\b>", "<>" };
	const int	 n = sizeof(hazard) / sizeof(hazard[0]);
	const char	*args[40];
	struct res	 res;
	char		*cmd, *b;
	int		 i, k = 0;

	tmp_make();
	cmd = cmdf("printf '<%%s>' {1} > %s/{#}.out", tmp);
	args[k++] = "--fake-gpus";
	args[k++] = "2";
	args[k++] = "--quiet";
	args[k++] = cmd;
	args[k++] = ":::";
	for (i = 0; i < n; i++)
		args[k++] = hazard[i];
	args[k] = NULL;
	ck_assert_int_eq(chdir(tmp), 0);
	run_in(-1, 60, &res, args);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	for (i = 0; i < n; i++) {
		b = task_out(i + 1);
		ck_assert_str_eq(b, seen[i]);
		free(b);
	}
	ck_assert_int_ne(access("pwned", F_OK), 0);

	/* No replacement string: appended, quoted, in the row's order (a
	 * redirection may come before them in sh). */
	free(cmd);
	cmd = cmdf("printf '<%%s>' > %s/app.out", tmp);
	RUN(&res, "--fake-gpus", "1", "--quiet", cmd, ":::", "a b", ":::",
	    "$HOME;*");
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	b = slurp("app.out", NULL);
	ck_assert_ptr_nonnull(b);
	ck_assert_str_eq(b, "<a b><$HOME;*>");
	free(b);
	free(cmd);
	tmp_remove();
}
END_TEST

/* The product, the first source slowest; its count; COMMAND's words
 * that look like options are COMMAND's. */
START_TEST(product_order_and_count)
{
	static const char *const want[] = { "echo -n ax1", "echo -n ax2",
	    "echo -n ay1", "echo -n ay2", "echo -n bx1", "echo -n bx2",
	    "echo -n by1", "echo -n by2", "echo -n cx1", "echo -n cx2",
	    "echo -n cy1", "echo -n cy2" };
	struct res	 res;
	const char	*c;
	int		 i;

	RUN(&res, "--fake-gpus", "2", "--dry-run", "echo", "-n", "{1}{2}{3}",
	    ":::", "a", "b", "c", ":::", "x", "y", ":::", "1", "2");
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(count_lines(res.out), 1 + 12);
	for (i = 0; i < 12; i++) {
		c = dry_cmd(res.out, i + 1);
		ck_assert_msg(c != NULL, "no task %d in\n%s", i + 1, res.out);
		ck_assert_str_eq(c, want[i]);
	}
	ck_assert_ptr_nonnull(strstr(res.err, "12 tasks would run"));
}
END_TEST

/* :::+ and ::::+ step with the source before instead of crossing. */
START_TEST(linked_sources_step_together)
{
	static const char *const want[] = { "echo a1x", "echo a2y",
	    "echo a3z", "echo b1x", "echo b2y", "echo b3z" };
	struct res	 res;
	char		*f;
	int		 i;

	tmp_make();
	f = pathf("xyz");
	puts_file(f, "x\ny\nz\n");
	RUN(&res, "--fake-gpus", "1", "--dry-run", "--quiet", "echo",
	    "{1}{2}{3}", ":::", "a", "b", ":::", "1", "2", "3", "::::+", f);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(count_lines(res.out), 1 + 6);
	for (i = 0; i < 6; i++)
		ck_assert_str_eq(dry_cmd(res.out, i + 1), want[i]);
	RUN(&res, "--fake-gpus", "1", "--dry-run", "--quiet", "echo",
	    ":::", "a", "b", ":::+", "x", "y");
	ck_assert_int_eq(count_lines(res.out), 1 + 2);
	ck_assert_str_eq(dry_cmd(res.out, 2), "echo b y");
	free(f);
	tmp_remove();
}
END_TEST

/* --tag on a grid's tasks: each line starts with the row's arguments,
 * joined by blanks, and a TAB, as GNU parallel's. */
START_TEST(tag_is_the_arguments)
{
	struct res	 res;

	tmp_make();
	RUN(&res, "--fake-gpus", "2", "--quiet", "--tag", "echo", "hi", ":::",
	    "a", "b c", ":::", "x");
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_msg(strstr(res.out, "a x\thi a x\n") != NULL &&
	    strstr(res.out, "b c x\thi b c x\n") != NULL, "%s", res.out);
	ck_assert_int_eq(count_lines(res.out), 2);
	tmp_remove();
}
END_TEST

/* :::: FILE: a line an argument; --colsep splits it into {1} {2}, a
 * comma as CSV ("a,b" one field, "" a quote); --header : names them. */
START_TEST(arguments_from_files_and_csv)
{
	struct res	 res;
	char		*lines, *csv, *tsv;

	tmp_make();
	lines = pathf("lines");
	csv = pathf("p.csv");
	tsv = pathf("p.tsv");
	puts_file(lines, "one word\n\nthree\r\n");
	puts_file(csv, "lr,batch,note\n0.1,32,plain\n\"0,2\",64,\"say "
	    "\"\"hi\"\"\"\n");
	puts_file(tsv, "a b\tc\nd\te\n");
	RUN(&res, "--fake-gpus", "1", "--dry-run", "--quiet", "echo",
	    ":::::", ":::", "x", "::::", lines);
	ck_assert_int_eq(res.code, 0);
	ck_assert_int_eq(count_lines(res.out), 1 + 3);
	ck_assert_str_eq(dry_cmd(res.out, 1), "echo ::::: x 'one word'");
	ck_assert_str_eq(dry_cmd(res.out, 2), "echo ::::: x ''");
	ck_assert_str_eq(dry_cmd(res.out, 3), "echo ::::: x three");

	RUN(&res, "--fake-gpus", "1", "--dry-run", "--quiet", "--header", ":",
	    "--colsep", ",", "train", "--lr", "{lr}", "--bs={batch}", "{3}",
	    "::::", csv);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(count_lines(res.out), 1 + 2);
	ck_assert_str_eq(dry_cmd(res.out, 1), "train --lr 0.1 --bs=32 plain");
	ck_assert_str_eq(dry_cmd(res.out, 2),
	    "train --lr 0,2 --bs=64 'say \"hi\"'");

	RUN(&res, "--fake-gpus", "1", "--dry-run", "--quiet", "--colsep",
	    "\\t", "cp", "{2}", "{1}", "::::", tsv);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_str_eq(dry_cmd(res.out, 1), "cp c 'a b'");
	ck_assert_str_eq(dry_cmd(res.out, 2), "cp e d");
	free(lines);
	free(csv);
	free(tsv);
	tmp_remove();
}
END_TEST

/* {} {N} {#} and the path forms, as GNU parallel gives them. */
START_TEST(each_replacement_string)
{
	struct res	 res;

	RUN(&res, "--fake-gpus", "1", "--dry-run", "--quiet", "x", "{}", "{#}",
	    "{.}", "{/}", "{//}", "{/.}", "{2.}", "{2/}", "{2//}", "{2/.}",
	    "{print}", ":::", "/d/e/f.tar.gz", ":::", "g.txt", "h y/i.c");
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_str_eq(dry_cmd(res.out, 1), "x /d/e/f.tar.gz g.txt 1 "
	    "/d/e/f.tar g f.tar.gz g.txt /d/e . f.tar g g g.txt . g "
	    "{print}");
	ck_assert_str_eq(dry_cmd(res.out, 2), "x /d/e/f.tar.gz 'h y/i.c' 2 "
	    "/d/e/f.tar 'h y/i' f.tar.gz i.c /d/e 'h y' f.tar i 'h y/i' i.c "
	    "'h y' i {print}");
}
END_TEST

/* {%} is the slot the task ran in, from 1: GPUPOOL_SLOT + 1. The joblog
 * keeps it as {%}, the rest expanded. */
START_TEST(slot_is_known_when_it_runs)
{
	struct jrec	 j[16];
	struct res	 res;
	char		*cmd, *jl, *b, want[64];
	int		 i, n, slot, env;

	tmp_make();
	jl = pathf("jl");
	cmd = cmdf("echo {%%} $GPUPOOL_SLOT > %s/{#}.out", tmp);
	RUN(&res, "--fake-gpus", "2", "--per-gpu", "2", "--quiet",
	    "--joblog", jl, cmd, ":::", "a", "b", "c", "d", "e", "f");
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	for (i = 1; i <= 6; i++) {
		b = task_out(i);
		ck_assert_int_eq(sscanf(b, "%d %d", &slot, &env), 2);
		ck_assert_int_eq(slot, env + 1);
		ck_assert(slot >= 1 && slot <= 4);
		free(b);
	}
	n = read_joblog(jl, j, 16, NULL);
	ck_assert_int_eq(n, 6);
	for (i = 0; i < n; i++) {
		snprintf(want, sizeof(want), "/%ld.out", j[i].seq);
		ck_assert_ptr_nonnull(strstr(j[i].cmd, "echo {%} "));
		ck_assert_ptr_nonnull(strstr(j[i].cmd, want));
	}
	free(cmd);
	free(jl);
	tmp_remove();
}
END_TEST

/* The joblog's Command is the expanded command; --resume and
 * --resume-failed match rows by Seq and command as tasks-file lines. */
START_TEST(joblog_and_resume_on_expanded_commands)
{
	struct jrec	 j[16];
	struct res	 res;
	char		*cmd, *jl, *ran, *b;
	int		 n;

	tmp_make();
	jl = pathf("jl");
	ran = pathf("ran");
	cmd = cmdf("echo {1} >> %s; test {1} != 'b c'", ran);
	RUN(&res, "--fake-gpus", "2", "--quiet", "--joblog", jl, cmd, ":::",
	    "a", "b c", "d");
	ck_assert_int_eq(res.code, 1);
	n = read_joblog(jl, j, 16, NULL);
	ck_assert_int_eq(n, 3);
	ck_assert_int_eq(j[0].seq + j[1].seq + j[2].seq, 6);
	b = cmdf("echo 'b c' >> %s; test 'b c' != 'b c'", ran);
	ck_assert_str_eq((j[0].seq == 2 ? j[0] : j[1].seq == 2 ? j[1] :
	    j[2]).cmd, b);
	free(b);

	RUN(&res, "--fake-gpus", "2", "--quiet", "--joblog", jl, "--resume",
	    cmd, ":::", "a", "b c", "d");
	ck_assert_int_eq(res.code, 0);
	RUN(&res, "--fake-gpus", "2", "--quiet", "--joblog", jl,
	    "--resume-failed", cmd, ":::", "a", "b c", "d");
	ck_assert_int_eq(res.code, 1);
	b = slurp(ran, NULL);
	ck_assert_ptr_nonnull(b);
	ck_assert_int_eq(count_lines(b), 4);
	ck_assert_ptr_nonnull(strstr(strstr(b, "b c\n") + 1, "b c\n"));
	ck_assert_int_eq(read_joblog(jl, j, 16, NULL), 4);
	ck_assert_int_eq(j[3].seq, 2);
	free(b);
	free(cmd);
	free(ran);
	free(jl);
	tmp_remove();
}
END_TEST

/* A bad grid runs nothing: exit 255 and one line saying what. */
START_TEST(bad_grids_exit_255_with_one_line)
{
	static const struct {
		const char	*args[10];
		const char	*says;
	} bad[] = {
		{ { ":::", "a" }, "no command before ':::'" },
		{ { "echo", ":::", ":::", "a" }, "':::' with no arguments" },
		{ { "echo", ":::", "a", ":::" }, "':::' with no arguments" },
		{ { "echo", "::::" }, "'::::' with no file after it" },
		{ { "echo", "{3}", ":::", "a", ":::", "b" },
		  "'{3}' in the command, but a row has 2 arguments" },
		{ { "echo", ":::", "a", "b", ":::+", "x" },
		  "source 2 (':::+') has 1 arguments but is linked to one "
		  "with 2" },
		{ { "echo", "::::", "/nonexistent/args" },
		  "cannot open '/nonexistent/args'" },
		{ { "--colsep", ",", "echo", "::::", "@CSV" },
		  "bad.csv:3: unterminated quoted field" },
		{ { "--colsep", ",", "echo", "::::", "@CSV2" },
		  "bad2.csv:2: not as many columns as the first line" },
		{ { "[mem=lots]", "echo", ":::", "a" }, "grid:1: " },
		/* A 2 MiB line, no newline (and /dev/zero: one line for
		 * ever, as getline() read it) is refused as it is read. */
		{ { "true", "::::", "@LONG" }, "long:1: line longer than "
		  "1 MiB" },
		{ { "true", "::::", "/dev/zero" }, "/dev/zero:1: line longer "
		  "than 1 MiB" },
		{ { "--colsep", ",", "@CSV" }, "--colsep needs COMMAND :::" },
		{ { "--header", "x", "echo", ":::", "a" },
		  "--header: 'x' is not supported" },
	};
	const char	*args[16];
	struct res	 res;
	char		*csv = NULL, *csv2, *longf, *big;
	size_t		 i, k;

	tmp_make();
	csv = pathf("bad.csv");
	csv2 = pathf("bad2.csv");
	puts_file(csv, "a,b\n\"c,d\",e\n\"f,g\n");
	puts_file(csv2, "a,b\nc\n");
	longf = pathf("long");
	big = malloc(2 << 20);
	ck_assert_ptr_nonnull(big);
	memset(big, 'a', 2 << 20);
	put(longf, big, 2 << 20);
	free(big);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		args[0] = "--fake-gpus";
		args[1] = "1";
		for (k = 0; bad[i].args[k] != NULL; k++)
			args[k + 2] = strcmp(bad[i].args[k], "@CSV") == 0 ?
			    csv : strcmp(bad[i].args[k], "@CSV2") == 0 ? csv2 :
			    strcmp(bad[i].args[k], "@LONG") == 0 ? longf :
			    bad[i].args[k];
		args[k + 2] = NULL;
		run_in(-1, 60, &res, args);
		ck_assert_msg(res.code == 255, "case %zu: exit %d", i,
		    res.code);
		ck_assert_msg(strstr(res.err, bad[i].says) != NULL &&
		    count_lines(res.err) == 1 && strncmp(res.err,
		    "gpupool-run: ", 13) == 0, "case %zu: '%s'", i, res.err);
		ck_assert_str_eq(res.out, "");
	}
	free(csv);
	free(csv2);
	tmp_remove();
}
END_TEST

/* The resident memory of process pid, in KiB (0: gone). */
static long
rss_kb(pid_t pid)
{
	char	 path[64], *b, *p;
	long	 kb = 0;

	snprintf(path, sizeof(path), "/proc/%ld/status", (long)pid);
	if ((b = slurp(path, NULL)) == NULL)
		return 0;
	if ((p = strstr(b, "VmRSS:")) != NULL)
		kb = atol(p + 6);
	free(b);
	return kb;
}

/*
 * 10^5 x 10^5 rows (10^10 tasks: seq 100000 twice), run, resumed and
 * dry-run: the first task starts, or the first line is printed, while
 * the run is young (it is stopped then), whatever the grid's size: rows
 * are made as the run takes them, and a resume looks only at the Seqs
 * its joblog has. Its memory is the sources', not the product's. Before,
 * nothing started until every row had been expanded once (hours here).
 */
START_TEST(huge_grid_starts_at_once)
{
	struct want_lines w;
	struct res	 res;
	FILE		*f;
	pid_t		 pid;
	double		 t0;
	char		*v, *o, *e, *jl, *b;
	long		 kb;
	int		 i, mode;

	tmp_make();
	v = pathf("v");
	ck_assert_ptr_nonnull(f = fopen(v, "w"));
	for (i = 1; i <= 100000; i++)
		fprintf(f, "%d\n", i);
	ck_assert_int_eq(fclose(f), 0);
	o = pathf("out");
	e = pathf("err");
	jl = pathf("jl");
	/* A joblog that has done tasks 1 to 3. */
	puts_file(jl, "Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\t"
	    "Exitval\tSignal\tCommand\tGPU\tGPUMem\tGPUUtil\n"
	    "1\t:\t1700000000.000\t0.001\t0\t0\t0\t0\techo 1 1\tfake0\t-\t-\n"
	    "2\t:\t1700000000.000\t0.001\t0\t0\t0\t0\techo 1 2\tfake0\t-\t-\n"
	    "3\t:\t1700000000.000\t0.001\t0\t0\t0\t0\techo 1 3\tfake0\t-\t-\n");
	for (mode = 0; mode < 3; mode++) {
		(void)unlink(o);	/* not the last run's lines */
		t0 = now_s();
		pid = start(-1, o, e, mode == 0 ? (const char *const []){
		    "--fake-gpus", "1", "echo", "{1}", "{2}", "::::", v,
		    "::::", v, NULL } : mode == 1 ? (const char *const []){
		    "--fake-gpus", "1", "--joblog", jl, "--resume", "echo",
		    "{1}", "{2}", "::::", v, "::::", v, NULL } :
		    (const char *const []){ "--fake-gpus", "1", "--dry-run",
		    "echo", "{1}", "{2}", "::::", v, "::::", v, NULL });
		w.path = o;
		w.n = mode == 2 ? 3 : 1;
		w.c = 0;
		while (!have_lines(&w)) {
			if (now_s() - t0 > 60) {
				kill(pid, SIGKILL);
				ck_abort_msg("mode %d: nothing after 60 s", mode);
			}
			nap(20);
		}
		kb = rss_kb(pid);
		kill(pid, SIGINT);
		finish(pid, t0, 60, o, e, &res);
		b = slurp(o, NULL);
		if (mode == 0)
			ck_assert_msg(strncmp(b, "1 1\n", 4) == 0, "'%.40s'", b);
		else if (mode == 1)
			ck_assert_msg(strncmp(b, "1 4\n", 4) == 0, "'%.40s'", b);
		else
			ck_assert_msg(strstr(b, "\techo 1 1\n2\t") != NULL,
			    "'%.80s'", b);
		/* Two sources of 10^5 short values: some MB, not GB (ASan's
		 * shadow and quarantine, or valgrind's, would be measured,
		 * not gpupool). */
		ck_assert_msg(UNDER_ASAN || getenv("GPUPOOL_TEST_WRAP") !=
		    NULL || kb < 64 * 1024, "mode %d: %ld KiB", mode, kb);
		free(b);
	}
	tmp_remove();
}
END_TEST

/* What a row would be is still known before anything runs, though the
 * rows are not made until then: a tag that one value spoils, or one
 * row over 1 MiB, refuses the grid (naming the row) and runs none of
 * it. */
START_TEST(bad_rows_refused_before_anything_runs)
{
	struct res	 res;
	char		*ran, *cmd, *big, *vals, *b;

	tmp_make();
	ran = pathf("ran");
	cmd = cmdf("echo {2} >> %s", ran);
	RUN(&res, "--fake-gpus", "1", "[mem={1}]", cmd, ":::", "2G", "lots",
	    ":::", "x", "y");
	ck_assert_msg(res.code == 255 && strstr(res.err, "grid:3: ") != NULL,
	    "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(access(ran, F_OK), -1);
	free(cmd);
	/* Rows 2 and 5 are over 1 MiB (600 KiB twice): the first is
	 * named. */
	vals = pathf("vals");
	big = malloc(600 << 10);
	ck_assert_ptr_nonnull(big);
	memset(big, 'z', (600 << 10) - 1);
	big[(600 << 10) - 1] = '\0';
	b = cmdf("a\n%s\nc\n", big);
	puts_file(vals, b);
	cmd = cmdf("echo {1} {2} {2} >> %s", ran);
	RUN(&res, "--fake-gpus", "1", cmd, ":::", "p", "q", "::::", vals);
	ck_assert_msg(res.code == 255 && strstr(res.err, "grid:2: task "
	    "longer than 1 MiB") != NULL, "exit %d: %.200s", res.code,
	    res.err);
	ck_assert_int_eq(access(ran, F_OK), -1);
	free(b);
	free(big);
	free(cmd);
	tmp_remove();
}
END_TEST

static Suite *
grid_suite(void)
{
	Suite	*s = suite_create("grid");
	TCase	*tc = tcase_create("grid");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, quoting_hazards_stay_one_inert_argument);
	tcase_add_test(tc, product_order_and_count);
	tcase_add_test(tc, linked_sources_step_together);
	tcase_add_test(tc, tag_is_the_arguments);
	tcase_add_test(tc, arguments_from_files_and_csv);
	tcase_add_test(tc, each_replacement_string);
	tcase_add_test(tc, slot_is_known_when_it_runs);
	tcase_add_test(tc, joblog_and_resume_on_expanded_commands);
	tcase_add_test(tc, bad_grids_exit_255_with_one_line);
	tcase_add_test(tc, huge_grid_starts_at_once);
	tcase_add_test(tc, bad_rows_refused_before_anything_runs);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return gp_check_run(grid_suite());
}
