/*
 * check_faults.c: what the pool does when a worker fails. A worker that
 * crashes or hangs, misses its deadline or writes a malformed message,
 * an initialiser that fails, replacements that die in start-up, a spent
 * respawn budget, a cancel, a master that stops reading; and a deadline
 * that must never kill a reused pid. What the library leaves its host
 * process, and how workers end with it: check_host.c.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpupool.h"
#include "check_main.h"
#include "proc_test.h"
#include "io.h"		/* gp_poll_ms() */

static int
crash_on_5(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int	 x = item_int(in);

	if (x == 5)
		raise(SIGSEGV);
	if (x == 6)
		_exit(3);
	return gp_ctx_reply(ctx, &x, sizeof(x));
}

START_TEST(crash_fails_only_that_item_and_respawns)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 2 };
	int			 v[50], i;
	struct gp_item		*it = int_items(v, 50);
	char			 msg[128];

	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_map(p, crash_on_5, NULL, 0, it, 50), 0);
	for (i = 0; i < 50; i++) {
		if (i == 5) {
			ck_assert_int_eq(it[i].status, GP_CRASHED);
			ck_assert_int_eq(it[i].code, 128 + SIGSEGV);
			ck_assert_ptr_nonnull(strstr(gp_item_strerror(&it[i],
			    msg, sizeof(msg)), "signal 11"));
		} else if (i == 6) {
			ck_assert_int_eq(it[i].status, GP_CRASHED);
			ck_assert_int_eq(it[i].code, 3);
		} else {
			ck_assert_int_eq(it[i].status, GP_OK);
			ck_assert_int_eq(item_int(it[i].out), i);
		}
		/* The crashed ones ran once; a batch-mate whose result died
		 * unsent with the worker may run again (at-least-once), but
		 * only once per crash. */
		if (i == 5 || i == 6)
			ck_assert_int_eq(it[i].attempts, 1);
		else {
			ck_assert_int_ge(it[i].attempts, 1);
			ck_assert_int_le(it[i].attempts, 2);
		}
	}
	gp_items_release(it, 50);
	/* Both slots were replaced: the pool still has two workers. */
	ck_assert_int_eq(gp_pool_map(p, crash_on_5, NULL, 0, it, 5), 0);
	for (i = 0; i < 5; i++)
		ck_assert_int_eq(it[i].status, GP_OK);
	gp_items_release(it, 5);
	gp_pool_destroy(p);
	free(it);
	assert_no_children();
}
END_TEST

/*
 * A host that ignores SIGCHLD (SIG_IGN, or SA_NOCLDWAIT) lets the kernel
 * reap the workers: their status is gone. A crash must then read as
 * "status unknown" (code -1), never as a made-up "exited with status 0",
 * and the library must leave the disposition as it found it.
 */
static void
crash_with_sigchld(int flags, void (*handler)(int))
{
	struct sigaction	 sa, now;
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 2 };
	int			 v[8], i;
	struct gp_item		*it = int_items(v, 8);
	char			 msg[128];

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sa.sa_flags = flags;
	sigemptyset(&sa.sa_mask);
	ck_assert_int_eq(sigaction(SIGCHLD, &sa, NULL), 0);
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_map(p, crash_on_5, NULL, 0, it, 8), 0);
	for (i = 0; i < 8; i++) {
		if (i != 5 && i != 6) {
			ck_assert_int_eq(it[i].status, GP_OK);
			continue;
		}
		ck_assert_int_eq(it[i].status, GP_CRASHED);
		ck_assert_int_eq(it[i].code, -1);
		ck_assert_str_eq(gp_item_strerror(&it[i], msg, sizeof(msg)),
		    "crashed (worker's exit status unknown: SIGCHLD is "
		    "ignored)");
	}
	gp_items_release(it, 8);
	gp_pool_destroy(p);
	ck_assert_int_eq(sigaction(SIGCHLD, NULL, &now), 0);
	ck_assert(now.sa_handler == handler);
	ck_assert_int_eq(now.sa_flags & SA_NOCLDWAIT, flags & SA_NOCLDWAIT);
	signal(SIGCHLD, SIG_DFL);
	free(it);
}

START_TEST(ignored_sigchld_gives_unknown_status_not_zero)
{
	crash_with_sigchld(0, SIG_IGN);
}
END_TEST

START_TEST(sa_nocldwait_gives_unknown_status_not_zero)
{
	crash_with_sigchld(SA_NOCLDWAIT, SIG_DFL);
}
END_TEST

/* Crashes on its first attempt only: the marker is a file per item. */
static int
flaky(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	char	 path[128];
	int	 fd;

	snprintf(path, sizeof(path), "%s.%d", (const char *)arg, item_int(in));
	if ((fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600)) >= 0) {
		close(fd);
		abort();
	}
	return 0;
}

START_TEST(retries_rerun_crashed_items)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 2, .retries = 2 };
	char			 base[64] = "/tmp/gp-flaky-XXXXXX", path[128];
	int			 v[8], i;
	struct gp_item		*it = int_items(v, 8);

	ck_assert_ptr_nonnull(mkdtemp(base));
	strcat(base, "/m");
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_map(p, flaky, base, strlen(base) + 1, it, 8), 0);
	for (i = 0; i < 8; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		ck_assert_int_ge(it[i].attempts, 2);
		snprintf(path, sizeof(path), "%s.%d", base, i);
		unlink(path);
	}
	*strrchr(base, '/') = '\0';
	rmdir(base);
	ck_assert_int_eq(gp_pool_map(p, always_crash, NULL, 0, it, 2), 0);
	for (i = 0; i < 2; i++) {
		ck_assert_int_eq(it[i].status, GP_CRASHED);
		ck_assert_int_eq(it[i].code, 128 + SIGABRT);
		ck_assert_int_eq(it[i].attempts, 3);
	}
	gp_pool_destroy(p);
	free(it);
}
END_TEST

START_TEST(respawn_budget_spent_is_a_pool_failure)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 1, .respawn_max = 2 };
	int			 v[10], i, crashed = 0, notrun = 0;
	struct gp_item		*it = int_items(v, 10);

	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_map(p, always_crash, NULL, 0, it, 10),
	    GP_ENOWORKER);
	for (i = 0; i < 10; i++) {
		crashed += it[i].status == GP_CRASHED;
		notrun += it[i].status == GP_NOTRUN;
	}
	/* The first worker and its two replacements each took one item. */
	ck_assert_int_eq(crashed, 3);
	ck_assert_int_eq(notrun, 7);
	ck_assert_int_eq(gp_pool_map(p, always_crash, NULL, 0, it, 1), GP_ENOWORKER);
	gp_pool_destroy(p);
	free(it);
	assert_no_children();
}
END_TEST

static int
sleepy(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int	 x = item_int(in);

	if (x == 3)
		sleep(30);	/* ignores the stop request */
	return 0;
}

START_TEST(hung_item_times_out_and_worker_is_replaced)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 2, .timeout_ms = 300,
				       .grace_ms = 200 };
	int			 v[20], i;
	struct gp_item		*it = int_items(v, 20);
	int64_t			 t0;
	char			 msg[64];

	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	t0 = now_ms();
	ck_assert_int_eq(gp_pool_map(p, sleepy, NULL, 0, it, 20), 0);
	ck_assert_int_lt(now_ms() - t0, 5000);
	for (i = 0; i < 20; i++)
		ck_assert_int_eq(it[i].status, i == 3 ? GP_TIMEDOUT : GP_OK);
	ck_assert_str_eq(gp_item_strerror(&it[3], msg, sizeof(msg)),
	    "timed out");
	ck_assert_int_eq(gp_pool_map(p, sleepy, NULL, 0, it, 3), 0);
	gp_pool_destroy(p);
	free(it);
	assert_no_children();
}
END_TEST

/*
 * Invariant 10's upper bound. An item that ignores its stop is asked to
 * stop TMO_MS after it started and killed GRACE_MS later; what a loaded
 * machine adds (a late poll() wake-up, the death seen, the reap) is at
 * most SLACK_MS. The slack is smaller than either the timeout or the
 * grace, so a deadline taken twice over (the stop 3 s after the start
 * instead of 1.5 s, or the kill 3 s after the stop) lands past the bound
 * whatever the load; it held with two CPU hogs on this 2-core machine.
 */
#define TMO_MS		1500
#define GRACE_MS	1500
#define SLACK_MS	1200

/* Writes when it started and when its stop fd turned readable (the
 * clock is the same in every process), then goes on: it never stops. */
static int
hang_past_the_stop(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	struct pollfd	 pfd = { gp_ctx_stop_fd(ctx), POLLIN, 0 };
	int64_t		 t[2];

	t[0] = now_ms();
	t[1] = poll(&pfd, 1, 60000) == 1 ? now_ms() : 0;
	(void)write(*(const int *)arg, t, sizeof(t));
	sleep(60);	/* long past its kill */
	return 0;
}

START_TEST(timeout_fires_within_its_limit_and_grace)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 1, .timeout_ms = TMO_MS,
				       .grace_ms = GRACE_MS };
	struct gp_item		 it;
	int64_t			 t[2], t0, end;
	int			 fds[2], v = 0;

	ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	memset(&it, 0, sizeof(it));
	it.in = &v;
	it.inlen = sizeof(v);
	t0 = now_ms();
	ck_assert_int_eq(gp_pool_map(p, hang_past_the_stop, &fds[1],
	    sizeof(int), &it, 1), 0);
	end = now_ms();
	ck_assert_int_eq(it.status, GP_TIMEDOUT);
	ck_assert_int_eq(read(fds[0], t, sizeof(t)), sizeof(t));
	ck_assert_msg(t[1] != 0, "the item was never asked to stop");
	/* Never early: the item started after t0. */
	ck_assert_int_ge(end - t0, TMO_MS + GRACE_MS);
	ck_assert_msg(t[1] - t[0] <= TMO_MS + SLACK_MS, "asked to stop %lld "
	    "ms after it started: the limit is %d ms", (long long)(t[1] - t[0]),
	    TMO_MS);
	ck_assert_msg(end - t[0] <= TMO_MS + GRACE_MS + SLACK_MS, "killed %lld "
	    "ms after it started: limit %d ms, grace %d ms",
	    (long long)(end - t[0]), TMO_MS, GRACE_MS);
	gp_pool_destroy(p);
	close(fds[0]);
	close(fds[1]);
	assert_no_children();
}
END_TEST

/* Returns 7 as soon as its stop fd becomes readable. */
static int
cooperative(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	struct pollfd	 pfd = { gp_ctx_stop_fd(ctx), POLLIN, 0 };
	pid_t		 pid = getpid();

	gp_ctx_reply(ctx, &pid, sizeof(pid));
	if (item_int(in) != 1)
		return 0;
	if (poll(&pfd, 1, 20000) != 1)
		return 8;
	return 7;
}

START_TEST(cooperative_item_stops_without_losing_its_worker)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 1, .timeout_ms = 200,
				       .grace_ms = 5000 };
	int			 v[4];
	struct gp_item		*it = int_items(v, 4);
	pid_t			 a, b;

	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_map(p, cooperative, NULL, 0, it, 4), 0);
	ck_assert_int_eq(it[1].status, GP_TIMEDOUT);
	ck_assert_int_eq(it[1].code, 7);
	ck_assert_int_eq(it[0].status, GP_OK);
	ck_assert_int_eq(it[2].status, GP_OK);
	memcpy(&a, it[0].out, sizeof(a));
	memcpy(&b, it[3].out, sizeof(b));
	ck_assert_int_eq(a, b);		/* not killed, not replaced */
	gp_items_release(it, 4);
	gp_pool_destroy(p);
	free(it);
}
END_TEST

static void
fini_hangs(struct gp_ctx *ctx, void *arg)
{
	for (;;)
		pause();
}

/* One worker recycled after each item, whose fini never returns: each
 * is killed after the grace period and the next item gets a new one
 * (it used to wait for ever on a slot that was never refilled). */
START_TEST(recycled_worker_whose_fini_hangs_is_killed_and_replaced)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 1, .max_tasks = 1,
				       .grace_ms = 200, .fini = fini_hangs };
	int			 v[3], i;
	struct gp_item		*it = int_items(v, 3);
	pid_t			 pid[3];

	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_map(p, reply_pid, NULL, 0, it, 3), 0);
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		ck_assert_uint_eq(it[i].outlen, sizeof(pid_t));
		memcpy(&pid[i], it[i].out, sizeof(pid_t));
	}
	ck_assert_int_ne(pid[0], pid[1]);
	ck_assert_int_ne(pid[1], pid[2]);
	ck_assert_int_ne(pid[0], pid[2]);
	gp_items_release(it, 3);
	gp_pool_destroy(p);
	free(it);
	assert_no_children();
}
END_TEST

/* Waits half a second for a stop: 7 if one came, 0 if not. */
static int
stop_within_500ms(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	struct pollfd	 pfd = { gp_ctx_stop_fd(ctx), POLLIN, 0 };

	return poll(&pfd, 1, 500) == 1 ? 7 : 0;
}

/*
 * A timeout_ms weeks away (over INT_MAX ms: 24.8 days) never fires and
 * never turns into a poll() that spins or waits for ever; a short one
 * still fires. The clamp itself is gp_poll_ms(), where every deadline of
 * the master becomes a poll() timeout.
 */
START_TEST(timeout_weeks_away_is_clamped_and_short_one_fires)
{
	static const unsigned	 huge[] = { UINT_MAX, 1u << 31, 100 };
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 1, .grace_ms = 5000 };
	int			 v[2], k, i;
	struct gp_item		*it = int_items(v, 2);
	int64_t			 s = 1000000000;

	ck_assert_int_eq(gp_poll_ms(-1, s), -1);
	ck_assert_int_eq(gp_poll_ms(s - 1, s), 0);
	ck_assert_int_eq(gp_poll_ms(s + 1, s), 1);	/* rounded up */
	ck_assert_int_eq(gp_poll_ms(s + 2000000, s), 3);
	ck_assert_int_eq(gp_poll_ms(s + (int64_t)UINT_MAX * 1000000, s),
	    INT_MAX);
	ck_assert_int_eq(gp_poll_ms(s + ((int64_t)1 << 32) * 1000000 - 1, s),
	    INT_MAX);
	ck_assert_int_eq(gp_poll_ms(INT64_MAX, 0), INT_MAX);
	for (k = 0; k < 3; k++) {
		o.timeout_ms = huge[k];
		ck_assert_int_eq(gp_pool_create(&p, &o), 0);
		ck_assert_int_eq(gp_pool_map(p, stop_within_500ms, NULL, 0, it, 2),
		    0);
		for (i = 0; i < 2; i++)
			if (huge[k] == 100) {
				ck_assert_int_eq(it[i].status, GP_TIMEDOUT);
				ck_assert_int_eq(it[i].code, 7);
			} else {
				ck_assert_int_eq(it[i].status, GP_OK);
				ck_assert_int_eq(it[i].code, 0);
			}
		gp_pool_destroy(p);
	}
	free(it);
	assert_no_children();
}
END_TEST

static int
init_fails_on_1(struct gp_ctx *ctx, void *arg)
{
	int	 w = gp_ctx_info(ctx)->worker;

	if (arg != NULL && w == 1)
		abort();
	return w == 1 ? 5 : 0;
}

/* Each start of a worker tells the killer its pid (fds[0] of arg) and
 * waits for a go (fds[1]); the killer SIGKILLs the second start. */
static int
init_tells_killer(struct gp_ctx *ctx, void *arg)
{
	const int	*fds = arg;
	pid_t		 self = getpid();
	char		 c;

	if (write(fds[0], &self, sizeof(self)) != sizeof(self) ||
	    read(fds[1], &c, 1) != 1)
		return 1;
	return 0;
}

static int
crash_on_0(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int	 x = item_int(in);

	if (x == 0)
		raise(SIGKILL);
	return gp_ctx_reply(ctx, &x, sizeof(x));
}

/* A replacement killed from outside before it said READY is a death
 * like another: the slot is replaced again, not lost for good. */
START_TEST(replacement_killed_in_start_up_is_replaced)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 1,
				       .init = init_tells_killer };
	int			 v[3], pids[2], go[2], fds[2], i, st;
	struct gp_item		*it;
	pid_t			 killer, w, victim = 0;

	ck_assert_int_eq(pipe2(pids, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(go, O_CLOEXEC), 0);
	if ((killer = fork()) == 0) {
		close(pids[1]);
		close(go[0]);
		for (i = 1; i <= 3; i++) {
			if (read(pids[0], &w, sizeof(w)) != sizeof(w))
				_exit(1);
			if (i == 2) {
				if (kill(w, SIGKILL) < 0)
					_exit(2);
				victim = w;
			} else if (write(go[1], "", 1) != 1)
				_exit(3);
		}
		_exit(victim > 0 ? 0 : 4);
	}
	/* After the fork: the killer, which leaves by _exit(), holds
	 * nothing memcheck would count as lost. */
	it = int_items(v, 3);
	close(pids[0]);
	close(go[1]);
	fds[0] = pids[1];
	fds[1] = go[0];
	o.init_arg = fds;
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_map(p, crash_on_0, NULL, 0, it, 3), 0);
	ck_assert_int_eq(it[0].status, GP_CRASHED);
	ck_assert_int_eq(it[0].code, 128 + SIGKILL);
	for (i = 1; i < 3; i++) {
		ck_assert_msg(it[i].status == GP_OK, "item %d: status %d", i,
		    it[i].status);
		ck_assert_int_eq(item_int(it[i].out), i);
	}
	ck_assert_int_eq(waitpid(killer, &st, 0), killer);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "killer: %#x", st);
	gp_items_release(it, 3);
	gp_pool_destroy(p);
	close(pids[1]);
	close(go[0]);
	free(it);
	assert_no_children();
}
END_TEST

/* n counters, zeroed, in a page shared with the workers (they are
 * forked after it is mapped). */
static unsigned *
shared_counters(size_t n)
{
	void	*m = mmap(NULL, n * sizeof(unsigned), PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	ck_assert_ptr_ne(m, MAP_FAILED);
	memset(m, 0, n * sizeof(unsigned));
	return m;
}

static unsigned
starts(const unsigned *n)
{
	return __atomic_load_n(n, __ATOMIC_SEQ_CST);
}

/* The pool's first start succeeds; every replacement's initialiser
 * returns 5. */
static int
init_fails_in_replacements(struct gp_ctx *ctx, void *arg)
{
	return __atomic_fetch_add((unsigned *)arg, 1, __ATOMIC_SEQ_CST) ? 5 : 0;
}

/* A replacement whose initialiser fails is never started again (its
 * slot's item crashed; the rest have no worker left), at this call or
 * the next: two starts in all. */
START_TEST(replacement_whose_initialiser_fails_is_not_respawned)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 1,
				       .init = init_fails_in_replacements };
	unsigned		*n = shared_counters(1);
	int			 v[3], i;
	struct gp_item		*it = int_items(v, 3);

	o.init_arg = n;
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_map(p, crash_on_0, NULL, 0, it, 3),
	    GP_ENOWORKER);
	ck_assert_int_eq(it[0].status, GP_CRASHED);
	for (i = 1; i < 3; i++)
		ck_assert_int_eq(it[i].status, GP_NOTRUN);
	ck_assert_uint_eq(starts(n), 2);
	gp_items_release(it, 3);
	ck_assert_int_eq(gp_pool_map(p, crash_on_0, NULL, 0, it + 1, 2),
	    GP_ENOWORKER);
	ck_assert_uint_eq(starts(n), 2);
	gp_pool_destroy(p);
	munmap(n, sizeof(*n));
	free(it);
	assert_no_children();
}
END_TEST

/* Start k of the slot (from 0) dies before READY unless k is a multiple
 * of arg's period (n[1]); n[0] counts the starts. */
static int
init_dies_between(struct gp_ctx *ctx, void *arg)
{
	unsigned	*n = arg;

	if (__atomic_fetch_add(&n[0], 1, __ATOMIC_SEQ_CST) % n[1] != 0)
		abort();
	return 0;
}

static int
crash_below_3(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int	 x = item_int(in);

	if (x < 3)
		raise(SIGKILL);
	return gp_ctx_reply(ctx, &x, sizeof(x));
}

/*
 * A slot whose replacements keep dying before READY retires after 3
 * such starts in a row (period 4: starts 1, 2, 3 die, the slot is gone,
 * 4 starts in all). Two in a row and then one that reaches READY is not
 * "in a row" (period 3): every item ends, 10 starts.
 */
START_TEST(replacements_dying_in_start_up_retire_after_three_in_a_row)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 1, .init = init_dies_between };
	unsigned		*n = shared_counters(2);
	int			 v[4], i;
	struct gp_item		*it = int_items(v, 4);

	n[1] = 4;
	o.init_arg = n;
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_map(p, crash_below_3, NULL, 0, it, 4),
	    GP_ENOWORKER);
	ck_assert_int_eq(it[0].status, GP_CRASHED);
	for (i = 1; i < 4; i++)
		ck_assert_int_eq(it[i].status, GP_NOTRUN);
	ck_assert_uint_eq(starts(n), 4);
	gp_items_release(it, 4);
	gp_pool_destroy(p);

	n[0] = 0;
	n[1] = 3;
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_map(p, crash_below_3, NULL, 0, it, 4), 0);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(it[i].status, i < 3 ? GP_CRASHED : GP_OK);
	ck_assert_uint_eq(starts(n), 10);
	gp_items_release(it, 4);
	gp_pool_destroy(p);
	munmap(n, 2 * sizeof(unsigned));
	free(it);
	assert_no_children();
}
END_TEST

START_TEST(failed_initialiser_is_reported_not_respawned)
{
	struct gp_pool		*p = NULL;
	struct gp_pool_opts	 o = { .fake_gpus = 3, .init = init_fails_on_1 };
	char			 err[256];

	o.errbuf = err;
	o.errlen = sizeof(err);
	ck_assert_int_eq(gp_pool_create(&p, &o), GP_EINIT);
	ck_assert_ptr_null(p);
	ck_assert_str_eq(err, "worker 1 (GPU fake1): initialiser returned 5");
	assert_no_children();
	o.init_arg = &o;	/* now it aborts instead */
	ck_assert_int_eq(gp_pool_create(&p, &o), GP_EINIT);
	ck_assert_ptr_nonnull(strstr(err, "worker 1"));
	ck_assert_ptr_nonnull(strstr(err, "signal 6"));
	assert_no_children();
}
END_TEST

/* Item 10 writes to the cancel pipe (its write end is in arg). */
static int
cancel_at_10(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	if (item_int(in) == 10 && write(*(const int *)arg, "x", 1) != 1)
		return 1;
	usleep(50000);
	return 0;
}

START_TEST(cancel_fd_cancels_pending_items)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 2,
				       .flags = GP_POOL_CANCEL_FD };
	int			 fds[2], v[100], i, n, ok = 0, canceled = 0;
	struct gp_item		*it = int_items(v, 100);

	ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);
	o.cancel_fd = fds[0];
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_map(p, cancel_at_10, &fds[1], sizeof(int), it,
	    100), 0);
	for (i = 0; i < 100; i++) {
		ok += it[i].status == GP_OK;
		canceled += it[i].status == GP_CANCELED;
	}
	ck_assert_int_eq(ok + canceled, 100);
	/* Item 10 sent the cancel and returned: it ended well, and so did
	 * the items before it but one at most: items go one at a time to an
	 * idle worker, in order, so only the one the other worker holds (on
	 * a loaded machine, perhaps not started yet) can be canceled. What
	 * was not yet running, canceled. */
	ck_assert_int_eq(it[10].status, GP_OK);
	for (i = 0, n = 0; i < 10; i++)
		n += it[i].status != GP_OK;
	ck_assert_int_le(n, 1);
	ck_assert_int_gt(canceled, 50);
	gp_pool_destroy(p);
	close(fds[0]);
	close(fds[1]);
	free(it);
}
END_TEST

/*
 * A master that stops reading for a while (paused, swapped out, busy in
 * the host's code) must not cost a worker without PR_SET_PDEATHSIG: its
 * results wait in the pipe. Every 50th item stalls the master in a
 * SIGUSR1 handler (the test's, not the library's) until its worker
 * either sleeps (waits for room in the pipe, or for work) or dies. Each
 * result is larger than the pipe, so a result sent in a stall never fits.
 */
static int	 stall_go[2], stall_ack[2];
static volatile sig_atomic_t stall_rounds, stall_deaths, stall_stuck;
static size_t	 stall_len;

static void
on_stall(int sig)
{
	struct timespec	 ts = { 0, 1000000 };
	char		 path[32] = "/proc/", buf[256], *rp;
	pid_t		 pid;
	ssize_t		 n;
	int		 fd, i, k, d;

	stall_rounds++;
	(void)write(stall_go[1], "g", 1);
	if (read(stall_ack[0], &pid, sizeof(pid)) != sizeof(pid)) {
		stall_stuck++;
		return;
	}
	/* "/proc/<pid>/stat", without stdio in a handler. */
	for (k = 6, d = 1000000000; d > 0; d /= 10)
		if (pid / d > 0 || d == 1)
			path[k++] = (char)('0' + pid / d % 10);
	memcpy(path + k, "/stat", 6);
	for (i = 0; i < 20000; i++) {
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
			stall_deaths++;
			return;
		}
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		buf[n > 0 ? n : 0] = '\0';
		if ((rp = strrchr(buf, ')')) != NULL && rp[1] != '\0') {
			if (rp[2] == 'Z' || rp[2] == 'X') {
				stall_deaths++;
				return;
			}
			if (rp[2] == 'S')
				return;
		}
		nanosleep(&ts, NULL);
	}
	stall_stuck++;
}

static int
reply_stalling(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	static uint8_t	*big;
	int		 x = item_int(in);
	pid_t		 me = getpid();
	char		 c;

	if (big == NULL && (big = malloc(stall_len)) == NULL)
		return -ENOMEM;
	if (x % 50 == 25) {
		kill(getppid(), SIGUSR1);
		if (read(stall_go[0], &c, 1) != 1 ||
		    write(stall_ack[1], &me, sizeof(me)) != sizeof(me))
			return -EIO;
	}
	memset(big, x & 0xff, stall_len);
	return gp_ctx_reply(ctx, big, stall_len);
}

START_TEST(paused_master_keeps_its_workers)
{
	enum { N = 400 };
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 1,
				       .flags = GP_POOL_NO_PDEATHSIG };
	struct gp_worker_info	 wi;
	struct sigaction	 sa;
	struct gp_item		*it;
	int			 v[N], i, bad = 0;
	pid_t			 pid;

	ck_assert_int_eq(pipe2(stall_go, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(stall_ack, O_CLOEXEC), 0);
	stall_len = (size_t)fcntl(stall_go[0], F_GETPIPE_SZ) + 4096;
	o.max_msg = stall_len + 4096;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stall;
	sigemptyset(&sa.sa_mask);
	ck_assert_int_eq(sigaction(SIGUSR1, &sa, NULL), 0);
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_info(p, 0, &wi), 0);
	pid = wi.pid;
	it = int_items(v, N);
	ck_assert_int_eq(gp_pool_map(p, reply_stalling, NULL, 0, it, N), 0);
	for (i = 0; i < N; i++)
		bad += it[i].status != GP_OK || it[i].outlen != stall_len ||
		    ((uint8_t *)it[i].out)[stall_len - 1] != (i & 0xff);
	ck_assert_int_eq(bad, 0);
	ck_assert_int_ge(stall_rounds, N / 50);
	ck_assert_int_eq(stall_stuck, 0);
	ck_assert_msg(stall_deaths == 0, "the worker died in %d of %d "
	    "stalls", (int)stall_deaths, (int)stall_rounds);
	ck_assert_int_eq(gp_pool_info(p, 0, &wi), 0);
	ck_assert_int_eq(wi.pid, pid);	/* never replaced */
	gp_items_release(it, N);
	free(it);
	gp_pool_destroy(p);
	signal(SIGUSR1, SIG_DFL);
}
END_TEST

/*
 * With SIGCHLD ignored nothing holds a worker's pid once it has exited,
 * and a deadline of the master can fire after that: a recycled worker's
 * grace period ends at the next call. The signal must go through the
 * worker's pidfd, never to a process that took its pid. Run as pid 1 of
 * a new pid namespace, so that the pid can be handed out again on
 * purpose (ns_last_pid). Returns an exit status: 0, 1 if the process
 * that took the pid was killed, 2 if the setup failed.
 */
static int
reused_pid_case(void)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 1, .max_tasks = 1,
				       .grace_ms = 1, .flags = GP_POOL_NO_BIND };
	struct gp_worker_info	 wi;
	struct timespec		 ts = { 0, 1000000 };
	struct gp_item		 it;
	int64_t			 t;
	pid_t			 w, decoy;
	int			 v = 1, i, fd, alive;
	char			 s[32];

	signal(SIGCHLD, SIG_IGN);
	if (gp_pool_create(&p, &o) != 0 || gp_pool_info(p, 0, &wi) != 0)
		return 2;
	w = wi.pid;
	memset(&it, 0, sizeof(it));
	it.in = &v;
	it.inlen = sizeof(v);
	/* It runs the item and leaves (max_tasks): the kernel reaps it. */
	if (gp_pool_map(p, crash_on_5, NULL, 0, &it, 1) != 0)
		return 2;
	gp_items_release(&it, 1);
	t = now_ms();
	for (i = 0; i < 10000 && kill(w, 0) == 0; i++)
		nanosleep(&ts, NULL);
	while (now_ms() < t + 5)	/* its 1 ms of grace is over */
		nanosleep(&ts, NULL);
	/* Another process takes its pid. */
	snprintf(s, sizeof(s), "%d", (int)w - 1);
	if ((fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY)) < 0 ||
	    write(fd, s, strlen(s)) < 0)
		return 2;
	close(fd);
	if ((decoy = fork()) == 0) {
		for (;;)
			pause();
	}
	if (decoy != w)
		return 2;
	/* The next call: the worker's deadline has passed. */
	if (gp_pool_map(p, crash_on_5, NULL, 0, &it, 1) != 0)
		return 2;
	gp_items_release(&it, 1);
	alive = kill(decoy, 0) == 0;
	kill(decoy, SIGKILL);
	gp_pool_destroy(p);
	return alive ? 0 : 1;
}

START_TEST(late_deadline_never_kills_a_reused_pid)
{
	pid_t	 c, g;
	int	 st;

	/* main() runs this only where it can (pidfds, namespaces). */
	ck_assert_msg(have_pidfd(), "no pidfd");
	if ((c = fork()) == 0) {
		if (unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0)
			_exit(77);
		if ((g = fork()) == 0)
			_exit(reused_pid_case());
		_exit(g > 0 && waitpid(g, &st, 0) == g && WIFEXITED(st) ?
		    WEXITSTATUS(st) : 3);
	}
	ck_assert_int_eq(waitpid(c, &st, 0), c);
	ck_assert(WIFEXITED(st));
	ck_assert_msg(WEXITSTATUS(st) != 1, "the pool killed the process "
	    "that took its exited worker's pid");
	ck_assert_msg(WEXITSTATUS(st) == 0, "setup failed: %d",
	    WEXITSTATUS(st));
}
END_TEST

/* Pipe write ends open in this process (what a worker inherits). */
struct wends {
	fd_set	 set;
};

static void
pipe_write_ends(struct wends *we)
{
	struct stat	 st;
	int		 fd, fl;

	FD_ZERO(&we->set);
	for (fd = 0; fd < FD_SETSIZE; fd++)
		if ((fl = fcntl(fd, F_GETFL)) != -1 &&
		    (fl & O_ACCMODE) == O_WRONLY && fstat(fd, &st) == 0 &&
		    S_ISFIFO(st.st_mode))
			FD_SET(fd, &we->set);
}

/* Item 1 writes a header of no known type into its worker's result pipe
 * (the one pipe write end the host did not have) and waits to be killed;
 * the others reply with their worker's pid. */
static int
bad_message(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	const struct wends	*host = arg;
	struct wends		 now;
	uint32_t		 hdr[4] = { 0xdead, 0, 0, 0 };
	pid_t			 pid = getpid();
	int			 fd, res = -1, n = 0;

	if (item_int(in) != 1)
		return gp_ctx_reply(ctx, &pid, sizeof(pid));
	pipe_write_ends(&now);
	for (fd = 0; fd < FD_SETSIZE; fd++)
		if (FD_ISSET(fd, &now.set) && !FD_ISSET(fd, &host->set)) {
			res = fd;
			n++;
		}
	if (n != 1)
		return 100 + n;	/* the test says which */
	if (write(res, hdr, sizeof(hdr)) != sizeof(hdr))
		return 99;
	for (;;)
		pause();
}

/* A worker that writes a malformed message: its item ends GP_ERROR with
 * -EPROTO (invariant 9), the worker is killed and replaced, and the
 * items after it run on the replacement. */
START_TEST(malformed_message_is_eproto_and_worker_replaced)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 1 };
	struct wends		 host;
	int			 v[4], i;
	struct gp_item		*it = int_items(v, 4);
	pid_t			 pid[4];
	char			 msg[128];

	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	pipe_write_ends(&host);
	ck_assert_int_eq(gp_pool_map(p, bad_message, &host, sizeof(host), it, 4),
	    0);
	ck_assert_msg(it[1].status == GP_ERROR, "item 1: status %d code %d",
	    it[1].status, it[1].code);
	ck_assert_int_eq(it[1].code, -EPROTO);
	ck_assert_int_eq(it[1].attempts, 1);
	ck_assert_str_eq(gp_item_strerror(&it[1], msg, sizeof(msg)),
	    "error: worker broke the wire protocol");
	for (i = 0; i < 4; i++) {
		if (i == 1)
			continue;
		ck_assert_int_eq(it[i].status, GP_OK);
		memcpy(&pid[i], it[i].out, sizeof(pid_t));
	}
	/* Item 0 ran before, 2 and 3 after: on another process. */
	ck_assert_int_ne(pid[0], pid[2]);
	ck_assert_int_eq(pid[2], pid[3]);
	ck_assert(gone(pid[0]));
	gp_items_release(it, 4);
	gp_pool_destroy(p);
	free(it);
	assert_no_children();
}
END_TEST

/* Whether a pid namespace can be made here, and its ns_last_pid set
 * (reused_pid_case() needs both). */
static int
have_pidns(void)
{
	pid_t	 c, g;
	int	 st, fd;

	if ((c = fork()) == 0) {
		if (unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0)
			_exit(1);
		if ((g = fork()) == 0) {
			fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY |
			    O_CLOEXEC);
			_exit(fd >= 0 && write(fd, "100", 3) == 3 ? 0 : 1);
		}
		_exit(g > 0 && waitpid(g, &st, 0) == g && WIFEXITED(st) ?
		    WEXITSTATUS(st) : 1);
	}
	return c > 0 && waitpid(c, &st, 0) == c && WIFEXITED(st) &&
	    WEXITSTATUS(st) == 0;
}

/* What case tcn needs that this machine lacks, or NULL. */
static const char *
missing(const char *tcn)
{
	if (strcmp(tcn, "faults") == 0)
		return NULL;
	if (!have_pidfd())
		return "no pidfd (a kernel before 5.3, or valgrind)";
	if (strcmp(tcn, "pidns") == 0 && !have_pidns())
		return "cannot make a user and pid namespace and set its "
		    "ns_last_pid";
	return NULL;
}

int
main(int argc, char **argv)
{
	Suite	*s = suite_create("faults");
	TCase	*tc = tcase_create("faults");
	TCase	*pns = tcase_create("pidns");
	const char *tcn = argc > 1 ? argv[1] : "faults", *why;

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, crash_fails_only_that_item_and_respawns);
	tcase_add_test(tc, ignored_sigchld_gives_unknown_status_not_zero);
	tcase_add_test(tc, sa_nocldwait_gives_unknown_status_not_zero);
	tcase_add_test(tc, retries_rerun_crashed_items);
	tcase_add_test(tc, respawn_budget_spent_is_a_pool_failure);
	tcase_add_test(tc, hung_item_times_out_and_worker_is_replaced);
	tcase_add_test(tc, timeout_fires_within_its_limit_and_grace);
	tcase_add_test(tc, cooperative_item_stops_without_losing_its_worker);
	tcase_add_test(tc,
	    recycled_worker_whose_fini_hangs_is_killed_and_replaced);
	tcase_add_test(tc, timeout_weeks_away_is_clamped_and_short_one_fires);
	tcase_add_test(tc, malformed_message_is_eproto_and_worker_replaced);
	tcase_add_test(tc, failed_initialiser_is_reported_not_respawned);
	tcase_add_test(tc, replacement_killed_in_start_up_is_replaced);
	tcase_add_test(tc, replacement_whose_initialiser_fails_is_not_respawned);
	tcase_add_test(tc,
	    replacements_dying_in_start_up_retire_after_three_in_a_row);
	tcase_add_test(tc, cancel_fd_cancels_pending_items);
	tcase_add_test(tc, paused_master_keeps_its_workers);
	suite_add_tcase(s, tc);
	/* The case that needs what a machine may lack runs as a meson test
	 * of its own, which says SKIP (exit 77) where it cannot test. */
	tcase_set_timeout(pns, 30);
	tcase_add_test(pns, late_deadline_never_kills_a_reused_pid);
	suite_add_tcase(s, pns);
	if ((why = missing(tcn)) != NULL)
		return gp_check_skip(s, tcn, why);
	return gp_check_run_case(s, tcn);
}
