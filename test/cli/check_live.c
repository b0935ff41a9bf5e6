/*
 * check_live.c: gpupool-run's live output, end to end (suite cli):
 * --line-buffer, --tag, --ungroup, the default grouping, lines too long
 * or not text, a standard output nobody reads, and the --results files
 * a task writes as it runs. gpupool-run's stdout is a pipe the test
 * reads as it goes; a task that must wait does so on a file the test
 * creates once it saw what it waits for (never a sleep).
 */
#include <poll.h>
#include <sys/syscall.h>

/* cli_test.h has helpers for every test program; not all are ours. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "cli_test.h"
#include "check_main.h"

/* gpupool-run with args, its stdout the pipe *rfd reads (nonblocking),
 * its stderr a file (errp). */
static pid_t
start_piped(int *rfd, const char *errp, const char *const *args)
{
	int	 p[2];
	pid_t	 pid;
	char	 dev[64];

	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	/* start() opens its stdout by name: the pipe's write end has one. */
	snprintf(dev, sizeof(dev), "/proc/self/fd/%d", p[1]);
	pid = start(-1, dev, errp, args);
	close(p[1]);
	ck_assert_int_eq(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
	*rfd = p[0];
	return pid;
}

/* What the pipe had so far, appended to *b (NUL-terminated), waiting at
 * most limit seconds for s to be in it (s NULL: until EOF). Returns
 * whether it came. One read between two looks: a writer faster than
 * this reader (a busy machine, a sanitizer) never leaves the pipe empty,
 * and a loop that read until it was would never end. */
static int
read_until(int fd, char **b, size_t *len, const char *s, double limit)
{
	struct pollfd	 pfd = { fd, POLLIN, 0 };
	double		 t0 = now_s();
	char		 chunk[65536];
	ssize_t		 n;

	for (;;) {
		if (s != NULL && *b != NULL && memmem(*b, *len, s,
		    strlen(s)) != NULL)
			return 1;
		if (now_s() - t0 > limit)
			return 0;
		(void)poll(&pfd, 1, 100);
		if ((n = read(fd, chunk, sizeof(chunk))) > 0) {
			*b = realloc(*b, *len + (size_t)n + 1);
			ck_assert_ptr_nonnull(*b);
			memcpy(*b + *len, chunk, (size_t)n);
			*len += (size_t)n;
			(*b)[*len] = '\0';
		} else if (n == 0)
			return s == NULL || (*b != NULL && memmem(*b, *len,
			    s, strlen(s)) != NULL);
	}
}

/* The exit status of pid, waited for at most limit seconds. */
static int
reap(pid_t pid, double limit)
{
	struct res	 r;
	char		*o = pathf("cli.none"), *e = pathf("cli.err2");

	finish(pid, now_s(), limit, o, e, &r);
	free(r.out);
	free(r.err);
	return r.code;
}

/* A task that writes n lines "TAG i xxxx", each in three writes, then
 * waits for the file gate and writes "TAG end". */
static void
chatty(char *buf, size_t len, const char *tag, int n, const char *gate)
{
	snprintf(buf, len, "i=0; while [ $i -lt %d ]; do printf '%s %%d ' $i; "
	    "printf 'xxxxxxxxxxxxxxxxxxxxxxxx'; printf '\\n'; i=$((i+1)); "
	    "done; until [ -e %s ]; do :; done; echo %s end\n", n, tag, gate,
	    tag);
}

/* Every line of b is one task's, whole: "A i xxx" or "B i xxx" (each
 * task's in order, n of each) or "A end", "B end"; with tagp, after
 * "task N GPU g" and a TAB. */
static void
check_whole(char *b, int n, int tagged)
{
	char	*l, *save = NULL, *p, t;
	int	 next[2] = { 0, 0 }, ends = 0, i;

	for (l = strtok_r(b, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		p = l;
		if (tagged) {
			ck_assert_msg(strncmp(p, "task ", 5) == 0 &&
			    (p = strchr(p, '\t')) != NULL, "untagged '%s'", l);
			p++;
		}
		t = p[0];
		ck_assert_msg(t == 'A' || t == 'B', "line '%s'", l);
		if (tagged)
			ck_assert_msg(strncmp(l, t == 'A' ? "task 1 GPU" :
			    "task 2 GPU", 10) == 0, "tag of '%s'", l);
		if (strcmp(p + 1, " end") == 0) {
			ends++;
			continue;
		}
		ck_assert_msg(sscanf(p + 2, "%d", &i) == 1 && i ==
		    next[t == 'B'], "line '%s' out of order", l);
		ck_assert_msg(strstr(p, " xxxxxxxxxxxxxxxxxxxxxxxx") != NULL &&
		    strlen(strstr(p, " x")) == 25, "cut line '%s'", l);
		next[t == 'B']++;
	}
	ck_assert_int_eq(next[0], n);
	ck_assert_int_eq(next[1], n);
	ck_assert_int_eq(ends, 2);
}

/* Two tasks interleave lines, each written in pieces: --line-buffer
 * prints them whole, and task 1's first line while it still runs
 * (waiting for a file the test creates only once it saw that line). */
static void
line_buffered(int tagged)
{
	char	 t1[512], t2[512], buf[1200], *tasks, *gate, *b = NULL;
	size_t	 len = 0;
	int	 fd;
	pid_t	 pid;

	tmp_make();
	tasks = pathf("tasks");
	gate = pathf("go");
	chatty(t1, sizeof(t1), "A", 300, gate);
	chatty(t2, sizeof(t2), "B", 300, gate);
	snprintf(buf, sizeof(buf), "%s%s", t1, t2);
	puts_file(tasks, buf);
	pid = start_piped(&fd, pathf("cli.err"), tagged ?
	    (const char *const []){ "--fake-gpus", "2", "--line-buffer",
	    "--tag", tasks, NULL } : (const char *const []){ "--fake-gpus",
	    "2", "--line-buffer", tasks, NULL });
	ck_assert_msg(read_until(fd, &b, &len, "A 299 ", 60),
	    "task 1's lines did not come while it ran: '%.200s'", b);
	ck_assert_msg(read_until(fd, &b, &len, "B 299 ", 60),
	    "task 2's lines did not come while it ran");
	ck_assert_ptr_null(strstr(b, " end"));
	puts_file(gate, "");
	ck_assert(read_until(fd, &b, &len, NULL, 60));
	close(fd);
	ck_assert_int_eq(reap(pid, 60), 0);
	check_whole(b, 300, tagged);
	free(b);
	tmp_remove();
}

START_TEST(line_buffer_whole_lines_as_they_come)
{
	line_buffered(0);
}
END_TEST

START_TEST(line_buffer_tagged)
{
	line_buffered(1);
}
END_TEST

/* Grouped (the default): a task's output is one block, printed when it
 * ends, tagged line by line with --tag, stderr too; a last line without
 * a newline gets one. */
START_TEST(grouped_by_default_and_tagged)
{
	struct res	 res;
	char		 buf[1024], *tasks;

	tmp_make();
	tasks = pathf("tasks");
	snprintf(buf, sizeof(buf), "printf 'a1\\na2\\na3'; printf 'e1\\n' >&2\n"
	    "%s say b1 e2 0\n", PROBE);
	puts_file(tasks, buf);
	RUN(&res, "--fake-gpus", "1", "--quiet", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_str_eq(res.out, "a1\na2\na3\nb1\n");
	RUN(&res, "--fake-gpus", "1", "--quiet", "--tag", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_str_eq(res.out, "task 1 GPU 0\ta1\ntask 1 GPU 0\ta2\n"
	    "task 1 GPU 0\ta3\ntask 2 GPU 0\tb1\n");
	ck_assert_str_eq(res.err, "task 1 GPU 0\te1\ntask 2 GPU 0\te2\n");
	RUN(&res, "--fake-gpus", "1", "--quiet", "--line-buffer", "--tag",
	    tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_str_eq(res.out, "task 1 GPU 0\ta1\ntask 1 GPU 0\ta2\n"
	    "task 1 GPU 0\ta3\ntask 2 GPU 0\tb1\n");
	RUN(&res, "--fake-gpus", "1", "--tag", "--ungroup", tasks);
	ck_assert_int_eq(res.code, 255);
	ck_assert_ptr_nonnull(strstr(res.err, "--tag"));
	RUN(&res, "--fake-gpus", "1", "--line-buffer", "--ungroup", tasks);
	ck_assert_int_eq(res.code, 255);
	tmp_remove();
}
END_TEST

/* One task, cmd (its %s, twice: a file it creates once it wrote its
 * first bytes, early, then waits for), run with the options opt (NULL:
 * none). Before the task may end, early must have come (live) or must
 * not (grouped: the master had half a second after the task wrote it to
 * print it, and did not). Returns all gpupool-run printed. */
static char *
gated(const char *cmd, const char *opt, const char *early, int live)
{
	char	 buf[512], *tasks, *gate, *seen, *b = NULL;
	size_t	 len = 0;
	int	 fd;
	pid_t	 pid;

	tasks = pathf("tasks");
	gate = pathf("go");
	seen = pathf("go.seen");
	snprintf(buf, sizeof(buf), cmd, seen, gate);
	puts_file(tasks, buf);
	pid = start_piped(&fd, pathf("cli.err"), (const char *const []){
	    "--fake-gpus", "1", "--quiet", opt != NULL ? opt : "--quiet",
	    tasks, NULL });
	while (access(seen, F_OK) != 0)
		ck_assert_msg(!read_until(fd, &b, &len, early, 0.05) || live,
		    "'%s' came before the task wrote it", early);
	ck_assert_msg(read_until(fd, &b, &len, early, live ? 60 : 0.5) ==
	    live, live ? "'%s' did not come while the task ran" :
	    "'%s' came before the task ended", early);
	puts_file(gate, "");
	ck_assert(read_until(fd, &b, &len, NULL, 60));
	close(fd);
	ck_assert_int_eq(reap(pid, 60), 0);
	return b;
}

/* Grouped: a task that runs on prints nothing until it ends. */
START_TEST(grouped_waits_for_the_end)
{
	tmp_make();
	ck_assert_str_eq(gated("echo first; touch %s; until [ -e %s ]; do :; "
	    "done; echo last\n", NULL, "first", 0), "first\nlast\n");
	tmp_remove();
}
END_TEST

/* --ungroup: bytes as they come, not waiting for a newline, none added. */
START_TEST(ungroup_passes_bytes)
{
	tmp_make();
	ck_assert_str_eq(gated("printf 'half-'; touch %s; until [ -e %s ]; "
	    "do :; done; printf 'line\\nno newline'\n", "--ungroup", "half-",
	    1), "half-line\nno newline");
	tmp_remove();
}
END_TEST

/* Binary data (NULs, every byte) comes through whole: as it is with
 * --ungroup, with a newline after it with --line-buffer; a line of 3 MiB
 * is printed in pieces of 1 MiB, each a line. */
START_TEST(huge_line_and_binary)
{
	struct res	 res;
	char		 buf[1024], *tasks, *data, *d;
	size_t		 n = 300000, i;

	tmp_make();
	tasks = pathf("tasks");
	data = pathf("data");
	d = malloc(n);
	ck_assert_ptr_nonnull(d);
	for (i = 0; i < n; i++)
		d[i] = (char)(i * 7 + i / 251);
	d[n - 1] = 'z';
	put(data, d, n);
	snprintf(buf, sizeof(buf), "cat %s\n", data);
	puts_file(tasks, buf);
	RUN(&res, "--fake-gpus", "1", "--quiet", "--ungroup", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_uint_eq(res.outlen, n);
	ck_assert(memcmp(res.out, d, n) == 0);
	RUN(&res, "--fake-gpus", "1", "--quiet", "--line-buffer", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_uint_eq(res.outlen, n + 1);
	ck_assert(memcmp(res.out, d, n) == 0);
	ck_assert_int_eq(res.out[n], '\n');

	puts_file(tasks, "head -c 3145728 /dev/zero | tr '\\0' x; echo y\n");
	RUN(&res, "--fake-gpus", "1", "--quiet", "--line-buffer", "--tag",
	    tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_uint_eq(res.outlen, 3 * (13 + (1u << 20) + 1) + 15);
	for (i = 0, d = res.out; i < 3; i++) {
		ck_assert(strncmp(d, "task 1 GPU 0\t", 13) == 0);
		ck_assert_uint_eq(strspn(d + 13, "x"), 1u << 20);
		ck_assert_int_eq(d[13 + (1 << 20)], '\n');
		d += 14 + (1 << 20);
	}
	ck_assert_str_eq(d, "task 1 GPU 0\ty\n");
	tmp_remove();
}
END_TEST

/* The resident memory of pid, in KiB. */
static long
rss_kb(pid_t pid)
{
	char	 p[64], *b, *s;
	long	 kb = -1;

	snprintf(p, sizeof(p), "/proc/%ld/status", (long)pid);
	if ((b = slurp(p, NULL)) != NULL && (s = strstr(b, "VmRSS:")) != NULL)
		kb = atol(s + 6);
	free(b);
	return kb;
}

/* Whether the process whose pid is in the file arg sleeps in write(2). */
static int
in_write(void *arg)
{
	char	 p[64], call[16], *b, *pid = slurp(arg, NULL);
	int	 in;

	if (pid == NULL || *pid == '\0') {
		free(pid);
		return 0;
	}
	snprintf(p, sizeof(p), "/proc/%ld/syscall", atol(pid));
	b = slurp(p, NULL);
	snprintf(call, sizeof(call), "%d ", SYS_write);
	in = b != NULL && strncmp(b, call, strlen(call)) == 0;
	free(b);
	free(pid);
	return in;
}

/* What gpupool-run may hold, at most, of a task's output it cannot
 * print, in KiB: ASan's shadow memory or a tool it runs under
 * (GPUPOOL_TEST_WRAP, valgrind) come on top. */
static long
held_kb(void)
{
	if (getenv("GPUPOOL_TEST_WRAP") != NULL)
		return 512 * 1024;
	return (UNDER_ASAN ? 256 : 64) * 1024;
}

/* A standard output that takes nothing (a pipe nobody reads) while a
 * task writes without end, line-buffered: the task ends up waiting on its own
 * writes, gpupool-run holds a bounded amount, and SIGTERM still ends the
 * run within the grace period. */
START_TEST(unread_stdout_bounded_and_killable)
{
	struct res	 res;
	char		 buf[512], *tasks, *pidf, *b = NULL;
	size_t		 len = 0;
	double		 t0;
	int		 fd, k;
	pid_t		 pid;

	tmp_make();
	tasks = pathf("tasks");
	pidf = pathf("pid");
	snprintf(buf, sizeof(buf), "sh -c 'echo $$ > %s.tmp && mv %s.tmp %s "
	    "&& exec yes 0123456789abcdefghijklmnopqrstuvwxyz'\n", pidf, pidf,
	    pidf);
	puts_file(tasks, buf);
	pid = start_piped(&fd, pathf("cli.err"), (const char *const []){
	    "--fake-gpus", "1", "--grace", "1", "--line-buffer", tasks, NULL });
	ck_assert(read_until(fd, &b, &len, "xyz\n", 60));
	/* The task's writes wait: seen so at ten looks in a row. */
	for (k = 0, t0 = now_s(); k < 10; k++) {
		while (!in_write(pidf)) {
			ck_assert_msg(now_s() - t0 < 60, "the task never "
			    "waited on its writes");
			k = 0;
			nap(20);
		}
		nap(20);
	}
	ck_assert_msg(rss_kb(pid) < held_kb(), "gpupool-run holds %ld KiB",
	    rss_kb(pid));
	kill(pid, SIGTERM);
	t0 = now_s();
	finish(pid, t0, 30, pathf("cli.none"), pathf("cli.err"), &res);
	close(fd);
	ck_assert_msg(res.code == 128 + SIGTERM, "exit %d: %s", res.code,
	    res.err);
	ck_assert_double_lt(res.secs, 20);
	ck_assert_msg(res.maxrss_kb < held_kb(), "max RSS %ld KiB",
	    res.maxrss_kb);
	free(b);
	tmp_remove();
}
END_TEST

/* --results DIR: the task's DIR/SEQ/stdout.live grows as it runs, and
 * becomes DIR/SEQ/stdout when it ends; nothing is printed, whatever the
 * mode. --bar and --quiet keep working with --line-buffer, and a task
 * never inherits the live channel. */
START_TEST(results_live_files)
{
	struct want_str	 ws, we;
	struct res	 res;
	char		 buf[512], *tasks, *dir, *gate;
	pid_t		 pid;
	double		 t0;

	tmp_make();
	tasks = pathf("tasks");
	dir = pathf("res");
	gate = pathf("go");
	snprintf(buf, sizeof(buf), "echo first; echo oops >&2; until [ -e %s "
	    "]; do :; done; echo last\n", gate);
	puts_file(tasks, buf);
	t0 = now_s();
	pid = start(-1, pathf("cli.out"), pathf("cli.err"), (const char
	    *const []){ "--fake-gpus", "1", "--line-buffer", "--bar",
	    "--results", dir, tasks, NULL });
	ws.path = pathf("res/1/stdout.live");
	ws.s = "first\n";
	we.path = pathf("res/1/stderr.live");
	we.s = "oops\n";
	while (!have_str(&ws) || !have_str(&we)) {
		ck_assert_msg(now_s() - t0 < 60, "no res/1/stdout.live");
		nap(20);
	}
	ck_assert_int_eq(access(pathf("res/1/stdout"), F_OK), -1);
	puts_file(gate, "");
	finish(pid, t0, 60, pathf("cli.out"), pathf("cli.err"), &res);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_str_eq(res.out, "");
	ck_assert_ptr_nonnull(strstr(res.err, "1 ok, 0 failed"));
	ck_assert_str_eq(slurp(pathf("res/1/stdout"), NULL), "first\nlast\n");
	ck_assert_int_eq(access(pathf("res/1/stdout.live"), F_OK), -1);

	/* Nor does the channel reach a task: it has 0, 1 and 2 only (not
	 * under a GPUPOOL_TEST_WRAP tool: valgrind's per-process log files
	 * reach the task too). */
	if (getenv("GPUPOOL_TEST_WRAP") != NULL) {
		tmp_remove();
		return;
	}
	snprintf(buf, sizeof(buf), "echo err >&2; %s fds\n", PROBE);
	puts_file(tasks, buf);
	RUN(&res, "--fake-gpus", "1", "--quiet", "--line-buffer", "--tag",
	    tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_str_eq(res.out, "task 1 GPU 0\t0 1 2\n");
	ck_assert_str_eq(res.err, "task 1 GPU 0\terr\n");
	tmp_remove();
}
END_TEST

static Suite *
live_suite(void)
{
	Suite	*s = suite_create("live");
	TCase	*tc = tcase_create("live");

	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, line_buffer_whole_lines_as_they_come);
	tcase_add_test(tc, line_buffer_tagged);
	tcase_add_test(tc, grouped_by_default_and_tagged);
	tcase_add_test(tc, grouped_waits_for_the_end);
	tcase_add_test(tc, ungroup_passes_bytes);
	tcase_add_test(tc, huge_line_and_binary);
	tcase_add_test(tc, unread_stdout_bounded_and_killable);
	tcase_add_test(tc, results_live_files);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return gp_check_run(live_suite());
}
