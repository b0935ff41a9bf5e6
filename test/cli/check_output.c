/*
 * check_output.c: gpupool-run end to end, output and input streams:
 * blocks not interleaved, a write error stops the run, stuck stdout or
 * stderr readers still leave it killable and a stuck stdout holds new
 * tasks back, huge output cut, tasks read from a streaming stdin, the
 * progress bar in a terminal.
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

START_TEST(output_blocks_not_interleaved)
{
	struct res	 res;
	char		*tasks, buf[8192], tag[16], *l, *save = NULL;
	int		 seen[4] = { 0 }, next[4] = { 0 }, cur = -1, blocks = 0;
	int		 t, i;

	tmp_make();
	tasks = pathf("tasks");
	buf[0] = '\0';
	for (t = 0; t < 4; t++)
		snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf),
		    "%s lines 3000 T%d\n", PROBE, t);
	puts_file(tasks, buf);
	RUN(&res, "--fake-gpus", "2", "--quiet", tasks);
	ck_assert_int_eq(res.code, 0);
	ck_assert_int_eq(count_lines(res.out), 4 * 3000);
	for (l = strtok_r(res.out, "\n", &save); l;
	    l = strtok_r(NULL, "\n", &save)) {
		ck_assert_int_eq(sscanf(l, "%15s %d", tag, &i), 2);
		t = tag[1] - '0';
		ck_assert_int_ge(t, 0);
		ck_assert_int_lt(t, 4);
		if (t != cur) {
			ck_assert_msg(!seen[t], "task T%d's output is split", t);
			seen[t] = 1;
			cur = t;
			blocks++;
		}
		ck_assert_int_eq(i, next[t]++);
	}
	ck_assert_int_eq(blocks, 4);
	tmp_remove();
}
END_TEST

/* Open a FIFO's read end without waiting for a writer, so that the
 * gpupool-run started next can open it for writing as its stdout. */
static int
fifo_reader(const char *path)
{
	int	 fd;

	ck_assert_int_eq(mkfifo(path, 0600), 0);
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	return fd;
}

/* A write error on stdout is the run's failure: one line says so, no
 * task starts after it, exit 255; the joblog has what ran. */
START_TEST(stdout_write_error_stops)
{
	struct jrec	 j[8];
	struct res	 res;
	char		*tasks, *jl, *e, *none, *fifo, *sync, buf[8192], *p;
	int		 rfd, fd;
	pid_t		 pid;
	double		 t0;

	tmp_make();
	tasks = pathf("tasks");
	jl = pathf("joblog");
	e = pathf("err");
	none = pathf("no-such-output");
	puts_file(tasks, "echo a\necho b\necho c\n");
	t0 = now_s();
	pid = start(-1, "/dev/full", e, (const char *const []){ "--fake-gpus",
	    "1", "--joblog", jl, tasks, NULL });
	finish(pid, t0, 60, none, e, &res);
	ck_assert_msg(res.code == 255, "exit %d: %s", res.code, res.err);
	ck_assert_ptr_nonnull(p = strstr(res.err, "cannot write standard "
	    "output: No space left on device"));
	ck_assert_ptr_null(strstr(p + 1, "cannot write standard output"));
	ck_assert_ptr_nonnull(strstr(res.err, "1 ok, 0 failed, 2 not started"));
	ck_assert_int_eq(read_joblog(jl, j, 8, NULL), 1);
	ck_assert_int_eq(j[0].seq, 1);
	ck_assert_int_eq(j[0].exitval, 0);

	/* | head -1 with SIGPIPE ignored (inherited through exec): the
	 * reader takes a line and leaves; task 2 writes only then. */
	fifo = pathf("fifo");
	sync = pathf("sync");
	ck_assert_int_eq(mkfifo(sync, 0600), 0);
	snprintf(buf, sizeof(buf), "echo a\ncat %s; echo b\necho c\n", sync);
	puts_file(tasks, buf);
	rfd = fifo_reader(fifo);
	ck_assert_ptr_ne(signal(SIGPIPE, SIG_IGN), SIG_ERR);
	t0 = now_s();
	pid = start(-1, fifo, e, (const char *const []){ "--fake-gpus", "1",
	    "--joblog", jl, tasks, NULL });
	(void)signal(SIGPIPE, SIG_DFL);
	{
		struct pollfd	 pfd = { rfd, POLLIN, 0 };

		ck_assert_int_eq(poll(&pfd, 1, 30000), 1);
		ck_assert_int_eq(read(rfd, buf, sizeof(buf)), 2);
		ck_assert_int_eq(memcmp(buf, "a\n", 2), 0);
	}
	close(rfd);
	/* Task 2 waits in cat until this opens and closes the FIFO. */
	while ((fd = open(sync, O_WRONLY | O_NONBLOCK | O_CLOEXEC)) == -1) {
		ck_assert_int_eq(errno, ENXIO);
		ck_assert_msg(now_s() - t0 < 30, "task 2 did not start");
		nap(10);
	}
	close(fd);
	finish(pid, t0, 60, none, e, &res);
	ck_assert_msg(res.code == 255, "exit %d: %s", res.code, res.err);
	ck_assert_ptr_nonnull(strstr(res.err, "cannot write standard output: "
	    "Broken pipe"));
	ck_assert_ptr_nonnull(strstr(res.err, "2 ok, 0 failed, 1 not started"));
	ck_assert_int_eq(read_joblog(jl, j, 8, NULL), 2);
	ck_assert_int_ne(j[0].seq, 3);
	ck_assert_int_ne(j[1].seq, 3);
	tmp_remove();
}
END_TEST

/*
 * A reader that stops reading (a pager left open, a FIFO, a terminal
 * paused with ^S) on standard output or error (fd) does not make the
 * master deaf: SIGTERM ends the run within the grace period, the running
 * task recorded as stopped. The other stream goes to a file (res).
 */
static void
stuck_stream(int fd, struct res *res)
{
	struct want_lines w;
	struct jrec	 j[4];
	char		*tasks, *jl, *f, *log, *fifo, buf[8192];
	int		 rfd;
	pid_t		 pid;
	double		 t0;

	tasks = pathf("tasks");
	jl = pathf("joblog");
	f = pathf("file");
	log = pathf("log");
	fifo = pathf("fifo");
	/* Over 200 KB on fd (a pipe holds 64 KiB), and a long task. */
	snprintf(buf, sizeof(buf), "%s lines 30000 T >&%d\n"
	    "%s record %s 60000\n", PROBE, fd, PROBE, log);
	puts_file(tasks, buf);
	rfd = fifo_reader(fifo);
	t0 = now_s();
	pid = start(-1, fd == 1 ? fifo : f, fd == 1 ? f : fifo,
	    (const char *const []){ "--fake-gpus", "2", "--grace", "1",
	    "--bar", "--joblog", jl, tasks, NULL });
	/* Task 1 is recorded before its output is written. */
	w.path = jl;
	w.n = 2;
	w.c = 0;
	wait_for("task 1 in the joblog", 30, have_lines, &w);
	w.path = log;
	w.n = 1;
	w.c = 'B';
	wait_for("task 2 to start", 30, have_lines, &w);
	kill(pid, SIGTERM);
	t0 = now_s();
	finish(pid, t0, 30, fd == 1 ? pathf("no-such-output") : f,
	    fd == 1 ? f : pathf("no-such-output"), res);
	close(rfd);
	ck_assert_msg(res->code == 128 + SIGTERM, "exit %d: %s", res->code,
	    res->err);
	ck_assert_double_lt(res->secs, 20);
	ck_assert_int_eq(read_joblog(jl, j, 4, NULL), 2);
	ck_assert_int_eq(j[1].seq, 2);
	ck_assert_int_eq(j[1].sig, SIGTERM);
}

START_TEST(stuck_stdout_still_killable)
{
	struct res	 res;

	tmp_make();
	stuck_stream(1, &res);
	ck_assert_ptr_nonnull(strstr(res.err, "were not written"));
	tmp_remove();
}
END_TEST

/* Task stderr, messages and the bar wait in a queue of their own. */
START_TEST(stuck_stderr_still_killable)
{
	struct res	 res;

	tmp_make();
	stuck_stream(2, &res);
	tmp_remove();
}
END_TEST

/* Read the FIFO (non-blocking fd) to EOF into a buffer of its own. */
static char *
drain(int fd, size_t *len, double limit)
{
	struct pollfd	 pfd = { fd, POLLIN, 0 };
	size_t		 cap = 1 << 16;
	char		*b = malloc(cap);
	ssize_t		 n;
	double		 t0 = now_s();

	ck_assert_ptr_nonnull(b);
	for (*len = 0; ; ) {
		ck_assert_msg(now_s() - t0 < limit, "stdout did not end");
		if (cap - *len < (1 << 16)) {
			b = realloc(b, cap *= 2);
			ck_assert_ptr_nonnull(b);
		}
		if ((n = read(fd, b + *len, cap - *len - 1)) == 0)
			break;
		if (n > 0)
			*len += (size_t)n;
		else {
			ck_assert_int_eq(errno, EAGAIN);
			(void)poll(&pfd, 1, 100);
		}
	}
	b[*len] = '\0';
	return b;
}

/*
 * A reader that stops reading holds up new tasks once over a bound of
 * output (1 MiB) waits for it, instead of memory taking all of it: task
 * 1 writes 1.8 MB to a FIFO nobody reads, and task 2 does not start
 * (a negative check: a slow machine can only hide a failure, never make
 * one). Once the FIFO is read, task 2 runs and every line of task 1's
 * arrives, in order.
 */
START_TEST(stuck_stdout_holds_new_tasks)
{
	struct want_lines w;
	struct res	 res;
	char		*tasks, *jl, *e, *log, *fifo, *out, *l, buf[8192];
	char		 want[32];
	size_t		 len;
	long		 i, n = 200000;
	int		 rfd;
	pid_t		 pid;
	double		 t0;

	tmp_make();
	tasks = pathf("tasks");
	jl = pathf("joblog");
	e = pathf("err");
	log = pathf("log");
	fifo = pathf("fifo");
	snprintf(buf, sizeof(buf), "%s lines %ld T\n%s record %s 0\n", PROBE,
	    n, PROBE, log);
	puts_file(tasks, buf);
	rfd = fifo_reader(fifo);
	t0 = now_s();
	pid = start(-1, fifo, e, (const char *const []){ "--fake-gpus", "1",
	    "--quiet", "--joblog", jl, tasks, NULL });
	/* Task 1 is recorded once it ended, before its output is written. */
	w.path = jl;
	w.n = 2;
	w.c = 0;
	wait_for("task 1 in the joblog", 30, have_lines, &w);
	w.path = log;
	w.n = 1;
	w.c = 'B';
	for (t0 = now_s(); now_s() - t0 < 1.5; nap(20))
		ck_assert_msg(!have_lines(&w), "task 2 started while over "
		    "1 MiB of output waited for a stalled stdout");
	ck_assert_int_eq(waitpid(pid, NULL, WNOHANG), 0);
	out = drain(rfd, &len, 60);
	close(rfd);
	t0 = now_s();
	finish(pid, t0, 30, pathf("no-such-output"), e, &res);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_msg(have_lines(&w), "task 2 did not run");
	for (i = 0, l = out; i < n; i++) {
		snprintf(want, sizeof(want), "T %ld\n", i);
		ck_assert_msg(strncmp(l, want, strlen(want)) == 0, "line %ld "
		    "of task 1's output lost or out of order", i);
		l += strlen(want);
	}
	ck_assert_uint_eq((size_t)(l - out), len);
	free(out);
	tmp_remove();
}
END_TEST

START_TEST(stdin_streams)
{
	struct res	 res;
	struct rec	 r[8];
	struct want_lines w;
	char		*log, *o, *e, line[4200];
	int		 p[2], n;
	pid_t		 pid;
	double		 t0 = now_s();

	tmp_make();
	log = pathf("log");
	o = pathf("out");
	e = pathf("err");
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid = start(p[0], o, e, (const char *const []){ "--fake-gpus", "2",
	    "--quiet", "-", NULL });
	close(p[0]);
	snprintf(line, sizeof(line), "%s record %s 0\n", PROBE, log);
	ck_assert_int_eq(write(p[1], line, strlen(line)),
	    (ssize_t)strlen(line));
	/* The first task runs while the pipe is still open. */
	w.path = log;
	w.n = 1;
	w.c = 'E';
	wait_for("the first task", 30, have_lines, &w);
	ck_assert_int_eq(waitpid(pid, NULL, WNOHANG), 0);
	ck_assert_int_eq(write(p[1], line, strlen(line)),
	    (ssize_t)strlen(line));
	close(p[1]);
	finish(pid, t0, 60, o, e, &res);
	ck_assert_int_eq(res.code, 0);
	n = read_log(log, r, NULL, NULL);
	check_once(r, n, 2);
	tmp_remove();
}
END_TEST

/* Output past 16 MiB a stream is dropped, and said so; the task is not
 * held up by it and its exit status stands. */
START_TEST(huge_output_is_cut)
{
	struct res	 res;
	char		*tasks;

	tmp_make();
	tasks = pathf("tasks");
	puts_file(tasks, "head -c 17000000 /dev/zero | tr '\\0' a; exit 4\n");
	RUN(&res, "--fake-gpus", "1", tasks);
	ck_assert_int_eq(res.code, 1);
	ck_assert_int_eq(res.outlen, (16u << 20) + 1);
	ck_assert_int_eq(res.out[0], 'a');
	ck_assert_int_eq(res.out[res.outlen - 1], '\n');
	ck_assert_ptr_nonnull(strstr(res.err, "task 1: 222784 bytes of its "
	    "stdout and 0 of its stderr were dropped"));
	ck_assert_ptr_nonnull(strstr(res.err, "exit status 4"));
	tmp_remove();
}
END_TEST

/* Read the terminal's side (master) for up to ms, appending to buf. */
static void
pty_read(int fd, char *buf, size_t *len, size_t cap, int ms)
{
	struct pollfd	 pfd = { fd, POLLIN, 0 };
	ssize_t		 n;

	if (poll(&pfd, 1, ms) != 1)
		return;
	if ((n = read(fd, buf + *len, cap - *len - 1)) > 0)
		*len += (size_t)n;
	buf[*len] = '\0';
}

/* The longest bar drawn from byte from on (segments between \r or \n,
 * less the \033[K that clears the line), and whether one since says a
 * task is running. */
static size_t
bar_widest(const char *buf, size_t from, int *running)
{
	const char	*p = buf + from, *q;
	size_t		 most = 0, n;

	*running = 0;
	while (*p) {
		q = p + strcspn(p, "\r\n");
		if (strncmp(p, "\033[K", 3) == 0)
			p += 3;
		n = q > p ? (size_t)(q - p) : 0;
		if (n > most)
			most = n;
		if (n > 0 && memmem(p, n, "1 running", 9) != NULL)
			*running = 1;
		p = *q ? q + 1 : q;
	}
	return most;
}

/* On a terminal the bar is redrawn while a long task runs (it shows it
 * running), fits the terminal's width, and follows a resize. */
START_TEST(bar_in_a_terminal)
{
	struct winsize	 ws = { .ws_row = 24, .ws_col = 40 };
	char		*tasks, *fifo, *o, *last, buf[65536], line[4200];
	size_t		 len = 0, mark;
	int		 m, fd, run;
	pid_t		 pid;
	double		 t0;

	tmp_make();
	tasks = pathf("tasks");
	fifo = pathf("release");
	o = pathf("out");
	ck_assert_int_eq(mkfifo(fifo, 0600), 0);
	/* The task waits in cat until this opens and closes the FIFO. */
	snprintf(line, sizeof(line), "cat %s\n", fifo);
	puts_file(tasks, line);
	ck_assert_int_ge(m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC), 0);
	ck_assert_int_eq(grantpt(m), 0);
	ck_assert_int_eq(unlockpt(m), 0);
	ck_assert_int_eq(ioctl(m, TIOCSWINSZ, &ws), 0);
	t0 = now_s();
	pid = start(-1, o, ptsname(m), (const char *const []){ "--fake-gpus",
	    "1", tasks, NULL });
	for (run = 0; !run; ) {
		ck_assert_msg(now_s() - t0 < 30, "no bar shows the task "
		    "running: '%s'", buf);
		pty_read(m, buf, &len, sizeof(buf), 100);
		ck_assert_uint_le(bar_widest(buf, 0, &run), 39);
	}
	ws.ws_col = 30;
	ck_assert_int_eq(ioctl(m, TIOCSWINSZ, &ws), 0);
	kill(pid, SIGWINCH);
	/* The last bar drawn is cut to 29 columns (the text is longer). */
	for (mark = len; ; ) {
		ck_assert_msg(now_s() - t0 < 30, "no bar of 29 columns after "
		    "the resize: '%s'", buf + mark);
		pty_read(m, buf, &len, sizeof(buf), 100);
		if ((last = memrchr(buf + mark, '\r', len - mark)) != NULL &&
		    bar_widest(last, 0, &run) == 29)
			break;
	}
	ck_assert_int_ge(fd = open(fifo, O_WRONLY | O_CLOEXEC), 0);
	close(fd);
	while (len < sizeof(buf) - 1 && waitpid(pid, NULL, WNOHANG) == 0) {
		ck_assert_msg(now_s() - t0 < 60, "gpupool-run did not end");
		pty_read(m, buf, &len, sizeof(buf), 100);
	}
	close(m);
	tmp_remove();
}
END_TEST

static Suite *
output_suite(void)
{
	Suite	*s = suite_create("cli");
	TCase	*tc = tcase_create("output");

	tcase_set_timeout(tc, getenv("GPUPOOL_TEST_SLOW") ? 400 : 90);
	tcase_add_test(tc, output_blocks_not_interleaved);
	tcase_add_test(tc, stdout_write_error_stops);
	tcase_add_test(tc, stuck_stdout_still_killable);
	tcase_add_test(tc, stuck_stderr_still_killable);
	tcase_add_test(tc, stuck_stdout_holds_new_tasks);
	tcase_add_test(tc, stdin_streams);
	tcase_add_test(tc, huge_output_is_cut);
	tcase_add_test(tc, bar_in_a_terminal);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return gp_check_run(output_suite());
}
