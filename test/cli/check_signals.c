/*
 * check_signals.c: gpupool-run end to end under signals: SIGINT and
 * SIGTERM stop the tasks (also sent to the group), a second SIGINT
 * kills, a huge grace still TERMs, a signal before any task starts.
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

struct sigcase {
	int	 sig;
	int	 twice;
	int	 group;		/* to the process group, as a launcher does */
};

static void
interrupt(const struct sigcase *sc)
{
	struct res	 res;
	struct beg	 b[16];
	struct rec	 r[16];
	struct jrec	 j[16];
	struct want_lines w;
	struct want_str	 ws;
	char		*log, *jl, *tasks, *o, *e, buf[8192];
	long		 pids[16];
	int		 nb, nj, i;
	pid_t		 pid;
	double		 t0;

	tmp_make();
	log = pathf("log");
	jl = pathf("joblog");
	o = pathf("out");
	e = pathf("err");
	tasks = pathf("tasks");
	if (sc->twice) {
		/* Tasks that ignore SIGTERM: only the second signal ends
		 * them, long before the grace period. */
		for (i = 0, buf[0] = '\0'; i < 3; i++)
			snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf),
			    "trap '' TERM; exec %s record %s 60000\n",
			    PROBE, log);
		puts_file(tasks, buf);
	} else
		tasks = record_tasks("tasks", log, 3, 60000);
	t0 = now_s();
	pid = start(-1, o, e, (const char *const []){ "--fake-gpus", "2",
	    "--grace", "60", "--joblog", jl, tasks, NULL });
	w.path = log;
	w.n = 2;
	w.c = 'B';
	wait_for("two tasks to start", 30, have_lines, &w);
	kill(sc->group ? -pid : pid, sc->sig);
	if (sc->twice) {
		/* Two signals pending at once would be read as one. */
		ws.path = e;
		ws.s = "stopping the running tasks";
		wait_for("the first signal to be read", 30, have_str, &ws);
		kill(pid, sc->sig);
	}
	finish(pid, t0, 30, o, e, &res);
	ck_assert_msg(res.code == 128 + sc->sig, "exit %d: %s", res.code,
	    res.err);
	ck_assert_double_lt(res.secs, 30);
	(void)read_log(log, r, b, &nb);
	ck_assert_int_eq(nb, 2);	/* the third never started */
	for (i = 0; i < nb; i++) {
		ck_assert_int_ne(b[i].seq, 3);
		ck_assert_int_eq(b[i].pid, b[i].pgid);	/* its own group */
		pids[i] = b[i].pid;
	}
	check_dead(pids, nb, 10);
	nj = read_joblog(jl, j, 16, NULL);
	ck_assert_int_eq(nj, 2);
	for (i = 0; i < nj; i++) {
		ck_assert_int_eq(j[i].exitval, -1);
		ck_assert_int_eq(j[i].sig, sc->twice ? SIGKILL : SIGTERM);
	}
	tmp_remove();
}

START_TEST(sigint_stops_tasks)
{
	static const struct sigcase	 c = { SIGINT, 0, 0 };

	interrupt(&c);
}
END_TEST

START_TEST(sigterm_stops_tasks)
{
	static const struct sigcase	 c = { SIGTERM, 0, 0 };

	interrupt(&c);
}
END_TEST

START_TEST(second_sigint_kills)
{
	static const struct sigcase	 c = { SIGINT, 1, 0 };

	interrupt(&c);
}
END_TEST

/* mpirun, Slurm or systemd signal the whole group, workers included:
 * the tasks are still stopped (TERM, grace) and recorded as such. */
START_TEST(sigterm_to_the_group_stops_tasks)
{
	static const struct sigcase	 c = { SIGTERM, 0, 1 };

	interrupt(&c);
}
END_TEST

/* A grace period past 49.7 days (2^32 ms) is not cut down to a few ms
 * on its way to the pool's own backstop: a stopped task that takes a
 * moment to clean up on SIGTERM is not SIGKILLed meanwhile. */
START_TEST(huge_grace_still_terms)
{
	struct want_lines w;
	struct jrec	 j[4];
	struct res	 res;
	char		*tasks, *log, *jl, *o, *e, line[4200];
	pid_t		 pid;
	double		 t0;

	tmp_make();
	log = pathf("log");
	jl = pathf("joblog");
	o = pathf("out");
	e = pathf("err");
	tasks = pathf("tasks");
	snprintf(line, sizeof(line), "trap 'sleep 0.5; exit 7' TERM; "
	    "%s record %s 60000 & wait\n", PROBE, log);
	puts_file(tasks, line);
	t0 = now_s();
	pid = start(-1, o, e, (const char *const []){ "--fake-gpus", "1",
	    "--grace", "4294965297ms", "--joblog", jl, tasks, NULL });
	w.path = log;
	w.n = 1;
	w.c = 'B';
	wait_for("the task to start", 30, have_lines, &w);
	kill(pid, SIGTERM);
	finish(pid, t0, 30, o, e, &res);
	ck_assert_msg(res.code == 128 + SIGTERM, "exit %d: %s", res.code,
	    res.err);
	ck_assert_int_eq(read_joblog(jl, j, 4, NULL), 1);
	/* Stopped, so recorded with the signal it was sent (not 9). */
	ck_assert_int_eq(j[0].sig, SIGTERM);
	tmp_remove();
}
END_TEST

/* The pids of pid's children (its workers). */
static int
children(pid_t pid, long *kids, int max)
{
	char	 p[64], *b, *s, *save = NULL;
	int	 n = 0;

	snprintf(p, sizeof(p), "/proc/%ld/task/%ld/children", (long)pid,
	    (long)pid);
	ck_assert_ptr_nonnull(b = slurp(p, NULL));
	for (s = strtok_r(b, " \n", &save); s != NULL && n < max;
	    s = strtok_r(NULL, " \n", &save))
		kids[n++] = atol(s);
	free(b);
	return n;
}

/* A signal that comes after tasks were handed to workers but before any
 * started: the message promises no count the summary then contradicts,
 * and the summary says they were not started. Workers are held stopped
 * (SIGSTOP) while their tasks arrive, so that none can start first. */
START_TEST(sigint_before_tasks_start)
{
	struct want_lines w;
	struct res	 res;
	char		*log, *jl, *o, *e, line[4200];
	long		 kids[8];
	int		 p[2], i, n, queued;
	pid_t		 pid;
	double		 t0;

	tmp_make();
	log = pathf("log");
	jl = pathf("joblog");
	o = pathf("out");
	e = pathf("err");
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	t0 = now_s();
	pid = start(p[0], o, e, (const char *const []){ "--fake-gpus", "2",
	    "--grace", "60", "--joblog", jl, "-", NULL });
	close(p[0]);
	/* The joblog is created once the pool is up. */
	w.path = jl;
	w.n = 1;
	w.c = 0;
	wait_for("the joblog", 30, have_lines, &w);
	ck_assert_int_eq(n = children(pid, kids, 8), 2);
	for (i = 0; i < n; i++)
		ck_assert_int_eq(kill((pid_t)kids[i], SIGSTOP), 0);
	snprintf(line, sizeof(line), "%s record %s 60000\n", PROBE, log);
	for (i = 0; i < 2; i++)
		ck_assert_int_eq(write(p[1], line, strlen(line)),
		    (ssize_t)strlen(line));
	/* Both read (so both handed out) before the signal. */
	do {
		ck_assert_int_eq(ioctl(p[1], FIONREAD, &queued), 0);
		ck_assert_msg(now_s() - t0 < 30, "tasks not read");
		if (queued > 0)
			nap(10);
	} while (queued > 0);
	kill(pid, SIGINT);
	w.path = e;
	w.n = 1;
	w.c = 0;
	wait_for("the SIGINT message", 30, have_lines, &w);
	for (i = 0; i < n; i++)
		ck_assert_int_eq(kill((pid_t)kids[i], SIGCONT), 0);
	close(p[1]);
	finish(pid, t0, 60, o, e, &res);
	ck_assert_msg(res.code == 128 + SIGINT, "exit %d: %s", res.code,
	    res.err);
	ck_assert_int_eq(access(log, F_OK), -1);	/* nothing ran */
	ck_assert_msg(strstr(res.err, "stopping 2 running") == NULL,
	    "a count the summary contradicts: %s", res.err);
	ck_assert_ptr_null(strstr(res.err, " stopped"));
	/* The pipe was still open: more could have come. */
	ck_assert_msg(strstr(res.err, "0 ok, 0 failed, 2 not started and the "
	    "rest of the input not read (got SIGINT)") != NULL, "%s", res.err);
	tmp_remove();
}
END_TEST

static Suite *
signals_suite(void)
{
	Suite	*s = suite_create("cli");
	TCase	*tc = tcase_create("signals");

	tcase_set_timeout(tc, getenv("GPUPOOL_TEST_SLOW") ? 400 : 90);
	tcase_add_test(tc, sigint_stops_tasks);
	tcase_add_test(tc, sigterm_stops_tasks);
	tcase_add_test(tc, sigterm_to_the_group_stops_tasks);
	tcase_add_test(tc, second_sigint_kills);
	tcase_add_test(tc, huge_grace_still_terms);
	tcase_add_test(tc, sigint_before_tasks_start);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return gp_check_run(signals_suite());
}
