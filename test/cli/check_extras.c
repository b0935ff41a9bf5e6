/*
 * check_extras.c: the GNU parallel options gpupool-run keeps with their
 * meaning: --delay (starts spaced), --halt with percentages and with
 * success= and done=, and its exit status as parallel's, --timeout N% (of the median runtime of the tasks
 * that succeeded), --resume of a joblog in completion order, end to end
 * on fake GPUs (check_median.c tests the
 * median itself). One slot where the order of tasks must be
 * known; timings only bound from below what the options promise, or are
 * far apart (0.3 s tasks against a limit of 1.5 s or more), for a loaded
 * 2-core box: a task starts some time after it is handed out, and only
 * the hand-outs are paced. The helpers are cli_test.h's.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Helpers the other programs use and this one does not. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "cli_test.h"
#include "check_main.h"

/* A temporary directory with the tasks file "tasks" of lines; *jl: the
 * path of a joblog there. */
static void
setup(const char *lines, char **tasks, char **jl)
{
	tmp_make();
	*tasks = pathf("tasks");
	*jl = pathf("joblog");
	puts_file(*tasks, lines);
}

static int
cmp_double(const void *a, const void *b)
{
	double	 x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Wall-clock seconds, as the joblog's Starttime. */
static double
wall_s(void)
{
	struct timespec	 ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * Three slots, four tasks that take no time: without --delay they would
 * start together. With --delay 1s a task is handed out no sooner than a
 * second after the last, and starts after it is handed out: the k-th
 * start (from 0, in time order) is at least k seconds after the run
 * began, however late a loaded machine starts each task. (Two starts
 * may be closer than the delay when the first of them was late: the
 * promise is about hand-outs.) The joblog's times have 1 ms steps.
 */
START_TEST(delay_spaces_the_starts)
{
	struct res	 res;
	struct jrec	 j[8];
	double		 st[8], t0;
	char		*tasks, *jl;
	int		 n, i;

	setup("true\ntrue\ntrue\ntrue\n", &tasks, &jl);
	t0 = wall_s();
	RUN(&res, "--fake-gpus", "3", "--delay", "1s", "--joblog", jl, tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_double_ge(res.secs, 3.0);
	ck_assert_int_eq(n = read_joblog(jl, j, 8, NULL), 4);
	for (i = 0; i < n; i++)
		st[i] = j[i].start;
	qsort(st, (size_t)n, sizeof(st[0]), cmp_double);
	for (i = 1; i < n; i++)
		ck_assert_msg(st[i] - t0 >= i - 0.001, "start %d at %.3f s: "
		    "under %d s after the run began", i, st[i] - t0, i);
	tmp_remove();
}
END_TEST

/* A retry is a start too: it waits for the delay like a new task. */
START_TEST(delay_paces_retries)
{
	struct res	 res;
	struct jrec	 j[8];
	char		*tasks, *jl, *dir, buf[512];
	double		 t0;

	tmp_make();
	tasks = pathf("tasks");
	jl = pathf("joblog");
	dir = pathf("flaky");
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	snprintf(buf, sizeof(buf), "%s flaky %s 1\n", PROBE, dir);
	puts_file(tasks, buf);
	t0 = wall_s();
	RUN(&res, "--fake-gpus", "2", "--delay", "1s", "--retries", "1",
	    "--joblog", jl, tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(read_joblog(jl, j, 8, NULL), 2);
	/* Handed out a second after the first attempt was, which was after
	 * the run began (delay_spaces_the_starts says why not "after the
	 * first attempt started"). */
	ck_assert_msg(j[1].start - t0 >= 1 - 0.001, "the retry started %.3f s "
	    "after the run began", j[1].start - t0);
	tmp_remove();
}
END_TEST

/* Ten tasks, one slot, in order; tasks 3 and 5 fail. fail=15% is of all
 * ten (GNU parallel's rule): 1.5 tasks, so the run halts at the second
 * failure, task 5, not at task 3 (1 of 3 run so far would be 33%).
 * Tasks 6 to 10 never run; the exit status is, as GNU parallel's for a
 * percentage, the share that failed: 2 of 10, 20. */
START_TEST(halt_fail_percent_is_of_all_tasks)
{
	static const char *const when[] = { "now,fail=15%", "soon,fail=15%" };
	struct res	 res;
	struct jrec	 j[16];
	char		*tasks, *jl, want[128];
	int		 n, i, k;

	setup("true\ntrue\nfalse\ntrue\nfalse\n"
	    "true\ntrue\ntrue\ntrue\ntrue\n", &tasks, &jl);
	for (k = 0; k < 2; k++) {
		RUN(&res, "--fake-gpus", "1", "--halt", when[k], "--joblog",
		    jl, tasks);
		ck_assert_msg(res.code == 20, "%s: exit %d: %s", when[k],
		    res.code, res.err);
		/* One slot, in order: tasks 1 to 5, once each. */
		ck_assert_int_eq(n = read_joblog(jl, j, 16, NULL), 5);
		for (i = 0; i < n; i++)
			ck_assert_int_eq(j[i].seq, i + 1);
		snprintf(want, sizeof(want), "halting after 2 failed tasks "
		    "(--halt %s)", when[k]);
		ck_assert_msg(strstr(res.err, want) != NULL, "%s", res.err);
		snprintf(want, sizeof(want), "3 ok, 2 failed, 5 not started "
		    "(--halt %s)", when[k]);
		ck_assert_msg(strstr(res.err, want) != NULL, "%s", res.err);
	}
	tmp_remove();
}
END_TEST

/* At the boundary: fail=20% of ten tasks is two exactly, so the run
 * halts at the second failure (task 5), not the third (task 7): exit 20
 * (parallel's share that failed); and success=50% of four is the second
 * success: exit 0, as parallel's when success= halts it. */
START_TEST(halt_percent_reached_exactly)
{
	struct res	 res;
	struct jrec	 j[16];
	char		*tasks, *jl;
	int		 n;

	setup("true\ntrue\nfalse\ntrue\nfalse\n"
	    "true\nfalse\ntrue\ntrue\ntrue\n", &tasks, &jl);
	RUN(&res, "--fake-gpus", "1", "--halt", "now,fail=20%", "--joblog",
	    jl, tasks);
	ck_assert_msg(res.code == 20, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(n = read_joblog(jl, j, 16, NULL), 5);
	ck_assert_int_eq(j[n - 1].seq, 5);
	ck_assert_msg(strstr(res.err, "halting after 2 failed tasks") != NULL,
	    "%s", res.err);
	puts_file(tasks, "false\ntrue\ntrue\ntrue\n");
	RUN(&res, "--fake-gpus", "1", "--halt", "soon,success=50%",
	    "--joblog", jl, tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(read_joblog(jl, j, 16, NULL), 3);
	ck_assert_ptr_nonnull(strstr(res.err, "halting after 2 succeeded "
	    "tasks"));
	tmp_remove();
}
END_TEST

/* success=N% and done=N: halting on what ended well (exit 0, as
 * parallel's), or at all (the failed count). */
START_TEST(halt_success_and_done)
{
	struct res	 res;
	struct jrec	 j[16];
	char		*tasks, *jl;

	setup("false\ntrue\ntrue\ntrue\ntrue\ntrue\n", &tasks, &jl);
	/* 30% of 6 is 1.8: the second success, task 3. */
	RUN(&res, "--fake-gpus", "1", "--halt", "soon,success=30%",
	    "--joblog", jl, tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(read_joblog(jl, j, 16, NULL), 3);
	ck_assert_ptr_nonnull(strstr(res.err, "halting after 2 succeeded "
	    "tasks"));
	/* done=4: four ended, whichever way. */
	RUN(&res, "--fake-gpus", "1", "--halt", "now,done=4", "--joblog", jl,
	    tasks);
	ck_assert_msg(res.code == 1, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(read_joblog(jl, j, 16, NULL), 4);
	tmp_remove();
}
END_TEST

/* GNU parallel's exit status under --halt (issue 33, point 11): what the
 * condition fixed when it was met, whatever ends after it (before: the
 * failures counted at the end, 30 where parallel says 20). Three slots:
 * tasks 2 and 3 fail at once, task 1 fails only once task 3 has run, so
 * the third failure always comes after the second, which halts the run;
 * soon lets it end. */
START_TEST(halt_status_is_fixed_when_met)
{
	static const char *const halt[] = { "soon,fail=20%", "20",
	    "soon,fail=2", "2" };
	struct res	 res;
	struct jrec	 j[16];
	char		*tasks, *jl, *go;
	size_t		 k;
	int		 n, i, failed;

	setup("", &tasks, &jl);
	go = pathf("go");
	for (k = 0; k < sizeof(halt) / sizeof(halt[0]); k += 2) {
		unlink(go);
		puts_file(tasks, cmdf("i=0; while [ ! -e %s ] && [ $i -lt "
		    "1200 ]; do sleep 0.05; i=$((i+1)); done; exit 1\n"
		    "exit 1\ntouch %s; exit 1\ntrue\ntrue\ntrue\ntrue\ntrue\n"
		    "true\ntrue\n", go, go));
		RUN(&res, "--fake-gpus", "3", "--halt", halt[k], "--joblog",
		    jl, tasks);
		ck_assert_msg(res.code == atoi(halt[k + 1]), "--halt %s: exit "
		    "%d, not %s: %s", halt[k], res.code, halt[k + 1],
		    res.err);
		n = read_joblog(jl, j, 16, NULL);
		for (i = 0, failed = 0; i < n; i++)
			failed += j[i].exitval != 0;
		ck_assert_msg(failed == 3, "--halt %s: %d failed", halt[k],
		    failed);
	}
	tmp_remove();
}
END_TEST

/* The rest of parallel's rule, each checked against parallel 20221122:
 * one task enough to halt (done=1, a percentage that is one task) is
 * that task's status, 0 when it succeeded; a percentage is of the tasks
 * a resume skips too (10, not 8); 7% of 100 is, in parallel's floating
 * point, more than 7 tasks; a run the condition never halted exits with
 * the share of its attempts that failed (retries counted). */
START_TEST(halt_status_as_parallel_counts)
{
	struct res	 res;
	char		*tasks, *jl, *hundred;
	int		 i;

	setup("true\nexit 7\ntrue\ntrue\ntrue\ntrue\ntrue\ntrue\ntrue\n"
	    "true\n", &tasks, &jl);
	RUN(&res, "--fake-gpus", "1", "--halt", "soon,fail=10%", tasks);
	ck_assert_msg(res.code == 7, "exit %d: %s", res.code, res.err);
	RUN(&res, "--fake-gpus", "1", "--halt", "now,done=1", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	puts_file(tasks, "exit 3\ntrue\n");
	RUN(&res, "--fake-gpus", "1", "--halt", "now,done=1", tasks);
	ck_assert_msg(res.code == 3, "exit %d: %s", res.code, res.err);
	/* Tasks 1 and 2 done before; 3 and 10 fail: 2 of 10. */
	puts_file(tasks, "true\ntrue\n");
	RUN(&res, "--fake-gpus", "1", "--joblog", jl, tasks);
	puts_file(tasks, "true\ntrue\nfalse\ntrue\ntrue\ntrue\ntrue\ntrue\n"
	    "true\nfalse\n");
	RUN(&res, "--fake-gpus", "1", "--resume", "--halt", "soon,fail=20%",
	    "--joblog", jl, tasks);
	ck_assert_msg(res.code == 20, "exit %d: %s", res.code, res.err);
	hundred = calloc(1, 600);
	ck_assert_ptr_nonnull(hundred);
	for (i = 0; i < 100; i++)
		strcat(hundred, i < 7 || i == 8 ? "false\n" : "true\n");
	puts_file(tasks, hundred);
	free(hundred);
	RUN(&res, "--fake-gpus", "1", "--halt", "soon,fail=7%", "--joblog",
	    jl, tasks);
	ck_assert_msg(res.code == 8, "exit %d: %s", res.code, res.err);
	ck_assert_ptr_nonnull(strstr(res.err, "halting after 8 failed"));
	puts_file(tasks, "false\ntrue\ntrue\ntrue\n");
	RUN(&res, "--fake-gpus", "1", "--retries", "1", "--halt",
	    "soon,fail=50%", tasks);
	ck_assert_msg(res.code == 20, "exit %d: %s", res.code, res.err);
	tmp_remove();
}
END_TEST

/* A percentage needs every task counted first: from a pipe, a refusal
 * (exit 255, one line) before anything runs. */
START_TEST(halt_percent_from_a_pipe_is_refused)
{
	struct res	 res;
	int		 p[2];

	tmp_make();
	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(write(p[1], "true\n", 5), 5);
	close(p[1]);
	run_in(p[0], 60, &res, (const char *const []){ "--fake-gpus", "1",
	    "--halt", "now,fail=10%", "-", NULL });
	close(p[0]);
	ck_assert_int_eq(res.code, 255);
	ck_assert_ptr_nonnull(strstr(res.err, "a pipe cannot be counted"));
	ck_assert_msg(strchr(res.err, '\n') == res.err + strlen(res.err) - 1,
	    "not one line: %s", res.err);
	tmp_remove();
}
END_TEST

/* --timeout 500%: tasks of 0.3 s set a median of 0.3 s or more, so a
 * limit of 1.5 s or more, which a 0.3 s task does not reach even on a
 * loaded machine; the outlier, which would sleep ten minutes, is
 * stopped (SIGTERM) and fails; the task after it runs as the others. */
START_TEST(timeout_percent_stops_the_outlier)
{
	struct res	 res;
	struct jrec	 j[8];
	char		*tasks, *jl;
	int		 n, i;

	setup("sleep 0.3\nsleep 0.3\nsleep 0.3\nsleep 600\n"
	    "sleep 0.3\n", &tasks, &jl);
	RUN(&res, "--fake-gpus", "1", "--grace", "1", "--timeout", "500%",
	    "--joblog", jl, tasks);
	ck_assert_msg(res.code == 1, "exit %d: %s", res.code, res.err);
	ck_assert_double_lt(res.secs, 60);
	ck_assert_int_eq(n = read_joblog(jl, j, 8, NULL), 5);
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(j[i].seq, i + 1);	/* one slot, in order */
		if (j[i].seq == 4) {
			ck_assert_int_eq(j[i].sig, 15);
			ck_assert_double_ge(j[i].runtime, 1.5);
		} else
			ck_assert_msg(j[i].exitval == 0 && j[i].sig == 0,
			    "task %ld: exit %d signal %d", j[i].seq,
			    j[i].exitval, j[i].sig);
	}
	ck_assert_ptr_nonnull(strstr(res.err, "task 4 ("));
	ck_assert_ptr_nonnull(strstr(res.err, "timed out"));
	tmp_remove();
}
END_TEST

/* No limit before a task has succeeded (GNU parallel's rule), and a
 * task's limit is the one known when it starts: task 1 starts with none
 * and runs 3 s while tasks of 0.1 s succeed on the other slot and give
 * the tasks after them a limit of about 1 s (1000%). */
START_TEST(timeout_percent_is_set_at_start)
{
	struct res	 res;
	struct jrec	 j[8];
	char		*tasks, *jl;
	int		 n, i;

	setup("sleep 3\nsleep 0.1\nsleep 0.1\nsleep 0.1\n", &tasks, &jl);
	RUN(&res, "--fake-gpus", "2", "--timeout", "1000%", "--joblog", jl,
	    tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(n = read_joblog(jl, j, 8, NULL), 4);
	for (i = 0; i < n; i++)
		ck_assert_int_eq(j[i].sig, 0);
	tmp_remove();
}
END_TEST

/* A joblog lists tasks as they ended, not by Seq: --resume must find
 * each Seq in a joblog in any order. Tasks 1, 2, 5 and 7 are recorded,
 * in the order 7, 5, 2, 1; the resumed run runs 3, 4, 6 and 8 once each
 * and nothing else. */
START_TEST(resume_reads_a_joblog_in_any_order)
{
	static const int	 done[] = { 7, 5, 2, 1 };
	struct res		 res;
	struct jrec		 j[16];
	char			*tasks, *jl, *text, *line, *save, *rows[16];
	char			 out[4096] = "";
	int			 n, i, k, seen = 0;

	setup("true 1\ntrue 2\ntrue 3\ntrue 4\ntrue 5\ntrue 6\ntrue 7\n"
	    "true 8\n", &tasks, &jl);
	RUN(&res, "--fake-gpus", "2", "--joblog", jl, tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_ptr_nonnull(text = slurp(jl, NULL));
	for (n = 0, line = strtok_r(text, "\n", &save); line != NULL && n < 16;
	    line = strtok_r(NULL, "\n", &save))
		rows[n++] = line;
	ck_assert_int_eq(n, 9);
	strcat(out, rows[0]);	/* the header */
	strcat(out, "\n");
	for (k = 0; k < 4; k++)
		for (i = 1; i < n; i++)
			if (atoi(rows[i]) == done[k]) {
				strcat(out, rows[i]);
				strcat(out, "\n");
			}
	free(text);
	puts_file(jl, out);
	RUN(&res, "--fake-gpus", "2", "--resume", "--joblog", jl, tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(n = read_joblog(jl, j, 16, NULL), 8);
	for (i = 4; i < n; i++) {
		ck_assert_msg(j[i].seq == 3 || j[i].seq == 4 || j[i].seq == 6 ||
		    j[i].seq == 8, "task %ld ran again", j[i].seq);
		seen |= 1 << j[i].seq;
	}
	ck_assert_int_eq(seen, 1 << 3 | 1 << 4 | 1 << 6 | 1 << 8);
	tmp_remove();
}
END_TEST

/* Bad values exit 255 with one line naming the option. */
START_TEST(bad_values_are_refused)
{
	static const char *const bad[][3] = {
		{ "--delay", "1x", "--delay: bad duration '1x'" },
		{ "--delay", "-1", "--delay: bad duration '-1'" },
		{ "--timeout", "0%", "--timeout: bad duration '0%'" },
		{ "--timeout", "%", "--timeout: bad duration '%'" },
		{ "--timeout", "5%%", "--timeout: bad duration '5%%'" },
		{ "--timeout", "1e3%", "--timeout: bad duration '1e3%'" },
		{ "--halt", "now,fail=0%", "--halt: bad policy" },
		{ "--halt", "now,fail=101%", "--halt: bad policy" },
		{ "--halt", "soon,fail=", "--halt: bad policy" },
		{ "--halt", "soon,oops=1", "--halt: bad policy" },
		{ "--halt", "later,fail=1", "--halt: bad policy" },
		{ "--halt", "now,success=1.5%", "--halt: bad policy" },
	};
	struct res	 res;
	char		*tasks;
	size_t		 i;

	tmp_make();
	tasks = pathf("tasks");
	puts_file(tasks, "true\n");
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		RUN(&res, "--fake-gpus", "1", bad[i][0], bad[i][1], tasks);
		ck_assert_msg(res.code == 255, "%s %s: exit %d", bad[i][0],
		    bad[i][1], res.code);
		ck_assert_msg(strstr(res.err, bad[i][2]) != NULL, "%s",
		    res.err);
		ck_assert_msg(strchr(res.err, '\n') == res.err +
		    strlen(res.err) - 1, "not one line: %s", res.err);
	}
	tmp_remove();
}
END_TEST

/* The limit a task timed out at is said as it was applied, to the ms
 * under 10 s: --timeout 150% of 0.3 s tasks is about 0.45 s, which
 * rounding to the second called "0s". It is 150% of the median of the
 * three runtimes the joblog has (to its ms, and the limit's own ms
 * rounded up: 3 ms of slack). */
START_TEST(timeout_percent_says_the_limit)
{
	struct res	 res;
	struct jrec	 j[8];
	double		 rt[3], want, got;
	char		*tasks, *jl, *p, *end;
	int		 n, i, k = 0;

	setup("sleep 0.3\nsleep 0.3\nsleep 0.3\nsleep 600\n", &tasks, &jl);
	RUN(&res, "--fake-gpus", "1", "--grace", "1", "--timeout", "150%",
	    "--joblog", jl, tasks);
	ck_assert_msg(res.code == 1, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(n = read_joblog(jl, j, 8, NULL), 4);
	for (i = 0; i < n; i++)
		if (j[i].seq != 4)
			rt[k++] = j[i].runtime;
	ck_assert_int_eq(k, 3);
	qsort(rt, 3, sizeof(rt[0]), cmp_double);
	want = rt[1] * 1.5;
	ck_assert_ptr_nonnull(p = strstr(res.err, "timed out after "));
	got = strtod(p + 16, &end);
	if (want < 9.99)
		ck_assert_msg(*end == 's' && got - want < 0.003 &&
		    want - got < 0.003, "said '%.20s', the limit was %.3fs",
		    p + 16, want);
	tmp_remove();
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("extras");
	TCase	*tc = tcase_create("parallel");

	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, delay_spaces_the_starts);
	tcase_add_test(tc, delay_paces_retries);
	tcase_add_test(tc, halt_fail_percent_is_of_all_tasks);
	tcase_add_test(tc, halt_percent_reached_exactly);
	tcase_add_test(tc, halt_success_and_done);
	tcase_add_test(tc, halt_percent_from_a_pipe_is_refused);
	tcase_add_test(tc, halt_status_is_fixed_when_met);
	tcase_add_test(tc, halt_status_as_parallel_counts);
	tcase_add_test(tc, timeout_percent_stops_the_outlier);
	tcase_add_test(tc, timeout_percent_is_set_at_start);
	tcase_add_test(tc, resume_reads_a_joblog_in_any_order);
	tcase_add_test(tc, timeout_percent_says_the_limit);
	tcase_add_test(tc, bad_values_are_refused);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
