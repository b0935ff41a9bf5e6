/*
 * check_exec.c: workers that start clean (gp_pool_opts.exec). This
 * program is its own workers' program: main() calls gp_worker_enter()
 * first, and the pools re-exec this file. Each case holds an exec'd
 * worker to what a forked one guarantees (fds, binding, region, pieces,
 * death of the master, replacement, timeouts, recycling, niceness) and
 * to what
 * only a fresh image has (none of the caller's memory or descriptors).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpupool.h"
#include "internal.h"	/* gp_ctx_opts() */
#include "check_main.h"
#include "proc_test.h"

/* Set in the test before the pool: a fork has it, an exec'd worker not. */
static int	 marker;
static char	 self[4096];
static char	*self_argv[] = { self, NULL };
static char	 init_seen[64];
static int	 hooks;

static void
exec_opts(struct gp_pool_opts *o, struct gp_exec *x)
{
	ssize_t	 n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	ck_assert_int_gt(n, 0);
	self[n] = '\0';
	memset(x, 0, sizeof(*x));
	x->argv = self_argv;
	o->exec = x;
}

static void
hook(int phase, void *arg)
{
	(void)phase;
	(void)arg;
	hooks++;
}

static int
init_keeps(struct gp_ctx *ctx, void *arg)
{
	(void)ctx;
	snprintf(init_seen, sizeof(init_seen), "%s", (const char *)arg);
	return 0;
}

struct fresh {
	int	 marker;
	pid_t	 pid, ppid;
	char	 init[64];
	char	 exe[256];
};

static int
report_fresh(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	struct fresh	 f = { marker, getpid(), getppid(), "", "" };
	ssize_t		 n;

	(void)in;
	(void)len;
	(void)arg;
	snprintf(f.init, sizeof(f.init), "%s", init_seen);
	n = readlink("/proc/self/exe", f.exe, sizeof(f.exe) - 1);
	f.exe[n > 0 ? n : 0] = '\0';
	return gp_ctx_reply(ctx, &f, sizeof(f));
}

/* A fresh image: none of the caller's memory, init's bytes copied, the
 * same program, a child of ours; no fork hook runs. */
START_TEST(exec_workers_are_fresh_images)
{
	struct gp_pool_opts	 o = { .fake_gpus = 2, .init = init_keeps,
				       .init_arg = "model-7",
				       .fork_hook = hook };
	struct gp_exec		 x;
	struct gp_pool		*p;
	struct gp_item		 it[6];
	struct fresh		 f;
	char			 err[256];
	int			 i;

	exec_opts(&o, &x);
	x.init_arglen = sizeof("model-7");
	o.errbuf = err;
	o.errlen = sizeof(err);
	marker = 42;
	ck_assert_msg(gp_pool_create(&p, &o) == 0, "create: %s", err);
	memset(it, 0, sizeof(it));
	ck_assert_int_eq(gp_pool_map(p, report_fresh, NULL, 0, it, 6), 0);
	for (i = 0; i < 6; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		ck_assert_uint_eq(it[i].outlen, sizeof(f));
		memcpy(&f, it[i].out, sizeof(f));
		ck_assert_int_eq(f.marker, 0);
		ck_assert_int_eq(f.ppid, getpid());
		ck_assert_str_eq(f.init, "model-7");
		ck_assert_str_eq(f.exe, self);
	}
	ck_assert_int_eq(hooks, 0);
	gp_items_release(it, 6);
	gp_pool_destroy(p);
	assert_no_children();
}
END_TEST

/* The options this worker runs under. */
static int
report_opts(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	(void)in;
	(void)len;
	(void)arg;
	return gp_ctx_reply(ctx, gp_ctx_opts(ctx), sizeof(struct gp_pool_opts));
}

/* An exec'd worker gets its master's options whole (the HELLO's): every
 * scalar as the master resolved it, and no pointer or descriptor of the
 * master's (opts.c's gp_opts_wire()). */
START_TEST(exec_workers_get_the_options_whole)
{
	struct gp_pool_opts	 o = { .gpus = "0,1", .fake_gpus = 2,
				       .per_gpu = 1, .fake_busids =
				       "0000:01:00.0,0000:02:00.0",
				       .timeout_ms = 30000, .grace_ms = 700,
				       .max_tasks = 50, .respawn_max = 9,
				       .retries = 2, .max_msg = 1 << 24,
				       .window = 1 << 20, .flags =
				       GP_POOL_CANCEL_FD | GP_POOL_NO_BIND |
				       GP_POOL_FIT_THREADS, .fork_arg = &o,
				       .claim_timeout_ms = 1500,
				       .claims = "none" }, e, got;
	struct gp_exec		 x;
	struct gp_pool		*p;
	struct gp_item		 it[4];
	char			 err[256];
	int			 cur = getpriority(PRIO_PROCESS, 0), fd[2], i;

	exec_opts(&o, &x);
	ck_assert_int_eq(pipe(fd), 0);
	o.cancel_fd = fd[0];
	o.nice = cur < 19 ? cur + 1 : 19;
	o.errbuf = err;
	o.errlen = sizeof(err);
	ck_assert_msg(gp_pool_create(&p, &o) == 0, "create: %s", err);
	/* What the worker should see: o, its defaults filled in, less the
	 * master's pointers and its descriptor. */
	e = o;
	e.busy_pct = 10;
	e.gpus_per_worker = 1;
	e.gpus = e.fake_busids = e.claims = NULL;
	e.errbuf = NULL;
	e.errlen = 0;
	e.fork_arg = NULL;
	e.exec = NULL;
	e.cancel_fd = -1;
	memset(it, 0, sizeof(it));
	ck_assert_int_eq(gp_pool_map(p, report_opts, NULL, 0, it, 4), 0);
	for (i = 0; i < 4; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		ck_assert_uint_eq(it[i].outlen, sizeof(got));
		memcpy(&got, it[i].out, sizeof(got));
		ck_assert_int_eq(got.nice, o.nice);
		ck_assert_uint_eq(got.timeout_ms, o.timeout_ms);
		ck_assert_uint_eq(got.grace_ms, o.grace_ms);
		ck_assert_uint_eq(got.max_msg, o.max_msg);
		ck_assert_uint_eq(got.window, o.window);
		ck_assert_uint_eq(got.flags, o.flags);
		ck_assert_int_eq(got.claim_timeout_ms, o.claim_timeout_ms);
		ck_assert_ptr_null(got.gpus);
		ck_assert_ptr_null(got.fake_busids);
		ck_assert_ptr_null(got.claims);
		ck_assert_ptr_null(got.errbuf);
		ck_assert_ptr_null(got.fork_arg);
		ck_assert_int_eq(got.cancel_fd, -1);
		ck_assert_msg(memcmp(&got, &e, sizeof(e)) == 0, "a field "
		    "differs from the master's");
	}
	gp_items_release(it, 4);
	gp_pool_destroy(p);
	close(fd[0]);
	close(fd[1]);
	assert_no_children();
}
END_TEST

/* {fds open, whether fd arg[0] is, whether fd arg[1] is, the first fd
 * over 2 but arg[1] that is not close-on-exec or -1} */
static int
report_fds(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	const int	*fd = arg;
	int		 r[4] = { count_fds(), fcntl(fd[0], F_GETFD) != -1,
			       fcntl(fd[1], F_GETFD) != -1, -1 };
	int		 i, fl;

	(void)in;
	(void)len;
	for (i = 3; i < 256 && r[3] < 0; i++)
		if (i != fd[1] && (fl = fcntl(i, F_GETFD)) != -1 &&
		    !(fl & FD_CLOEXEC))
			r[3] = i;
	return gp_ctx_reply(ctx, r, sizeof(r));
}

/* Only what it needs crosses the exec: 0, 1, 2, its two pipe ends and
 * the descriptors the caller asked it to keep; never one of the host's
 * that is not close-on-exec (a forked worker would hold it). The master
 * holds a memfd per slot and one for the shared slots, all CLOEXEC. Its
 * pipes are close-on-exec again once it runs: what an item execs (a
 * shell, or the item itself) does not hold its channel, as in a forked
 * worker. */
START_TEST(exec_workers_keep_only_their_fds)
{
	struct gp_pool_opts	 o = { .fake_gpus = 3 };
	struct gp_exec		 x;
	struct gp_pool		*p;
	struct gp_item		 it[9];
	int			 fd[2], before, r[4], i;
	char			 had[256];

	exec_opts(&o, &x);
	fd[0] = open("/dev/null", O_RDONLY);	/* not close-on-exec */
	fd[1] = open("/dev/null", O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd[0], 3);
	x.keep_fds = &fd[1];
	x.nkeep = 1;
	before = count_fds();
	for (i = 0; i < 256; i++)
		had[i] = fcntl(i, F_GETFD) != -1;
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	/* Per worker two pipes' ends, the held read end, a pidfd (where
	 * there are pidfds: not under valgrind), its region's memfd; the
	 * shared slots' memfd, and the claims table. */
	ck_assert_int_eq(count_fds(), before + 3 * (4 + have_pidfd()) + 1 +
	    claims_on());
	for (i = 0; i < 256; i++)
		if (!had[i] && fcntl(i, F_GETFD) != -1)
			ck_assert_msg(fcntl(i, F_GETFD) & FD_CLOEXEC,
			    "fd %d is not close-on-exec", i);
	memset(it, 0, sizeof(it));
	ck_assert_int_eq(gp_pool_map(p, report_fds, fd, sizeof(fd), it, 9), 0);
	for (i = 0; i < 9; i++) {
		memcpy(r, it[i].out, sizeof(r));
		ck_assert_int_eq(r[0], 3 + 2 + 1);
		ck_assert_msg(!r[1], "the host's fd %d reached the worker",
		    fd[0]);
		ck_assert_msg(r[2], "kept fd %d did not", fd[1]);
		ck_assert_msg(r[3] == -1, "the worker's fd %d is not "
		    "close-on-exec", r[3]);
	}
	gp_items_release(it, 9);
	gp_pool_destroy(p);
	ck_assert_int_eq(count_fds(), before);
	close(fd[0]);
	close(fd[1]);
	assert_no_children();
}
END_TEST

/* Bound before the exec, as placed: the exec keeps the affinity. */
START_TEST(exec_workers_are_bound_where_placed)
{
	struct gp_pool_opts	 o = { .fake_gpus = 2 };
	struct gp_exec		 x;
	struct gp_pool		*p;
	struct gp_worker_info	 wi;
	struct gp_item		 it[8];
	char			 want[256];
	int			 i;

	exec_opts(&o, &x);
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	memset(it, 0, sizeof(it));
	ck_assert_int_eq(gp_pool_map(p, affinity, NULL, 0, it, 8), 0);
	for (i = 0; i < 8; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		gp_pool_info(p, it[i].worker, &wi);
		ck_assert_int_eq(wi.cpubind_rc, 0);
		expand(wi.cpuset, want, sizeof(want));
		ck_assert_str_eq((const char *)it[i].out, want);
	}
	gp_items_release(it, 8);
	gp_pool_destroy(p);
}
END_TEST

struct threads {
	char	 omp[16], mkl[16];
	int	 blas, info;
};

/* What the worker's thread pools are told: the variables, and the stand-in
 * OpenBLAS's count (loaded by the caller, or, in a fresh image, now). */
static int
report_threads(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	struct threads	 t = { "", "", -1, gp_ctx_info(ctx)->threads };
	const char	*s;
	void		*h = dlopen(GP_FAKE_BLAS, RTLD_NOW);
	int		(*get)(void);

	(void)in;
	(void)len;
	(void)arg;
	if ((s = getenv("OMP_NUM_THREADS")) != NULL)
		snprintf(t.omp, sizeof(t.omp), "%s", s);
	if ((s = getenv("MKL_NUM_THREADS")) != NULL)
		snprintf(t.mkl, sizeof(t.mkl), "%s", s);
	if (h != NULL && (get = (int (*)(void))dlsym(h,
	    "openblas_get_num_threads")) != NULL)
		t.blas = get();
	return gp_ctx_reply(ctx, &t, sizeof(t));
}

static void
threads_fit(int exec)
{
	struct gp_pool_opts	 o = { .fake_gpus = 1,
				       .flags = GP_POOL_FIT_THREADS };
	struct gp_exec		 x;
	struct gp_pool		*p;
	struct gp_item		 it[2];
	struct threads		 t;
	cpu_set_t		 cs;
	char			 n[16];
	int			 i;

	if (exec)
		exec_opts(&o, &x);
	/* Loaded before the pool, with 8 threads: a fork inherits it so. */
	ck_assert_ptr_nonnull(dlopen(GP_FAKE_BLAS, RTLD_NOW));
	ck_assert_int_eq(unsetenv("OMP_NUM_THREADS"), 0);
	ck_assert_int_eq(setenv("MKL_NUM_THREADS", "5", 1), 0);	/* the user's */
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	memset(it, 0, sizeof(it));
	ck_assert_int_eq(gp_pool_map(p, report_threads, NULL, 0, it, 2), 0);
	ck_assert_int_eq(sched_getaffinity(0, sizeof(cs), &cs), 0);
	snprintf(n, sizeof(n), "%d", CPU_COUNT(&cs));
	ck_assert_msg(CPU_COUNT(&cs) != 8, "this machine has the stand-in's "
	    "default: the case cannot tell");
	for (i = 0; i < 2; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		memcpy(&t, it[i].out, sizeof(t));
		ck_assert_str_eq(t.omp, n);
		ck_assert_str_eq(t.mkl, "5");
		ck_assert_int_eq(t.blas, CPU_COUNT(&cs));
		ck_assert_int_eq(t.info, CPU_COUNT(&cs));
	}
	gp_items_release(it, 2);
	gp_pool_destroy(p);
}

/* Thread pools fitted to the worker's CPUs: variables for what loads
 * later, the setter for what is loaded; the user's setting wins. */
START_TEST(threads_fit_the_cpus_forked)
{
	threads_fit(0);
}
END_TEST

START_TEST(threads_fit_the_cpus_execd)
{
	threads_fit(1);
}
END_TEST

/* The niceness an item runs at. */
static int
report_nice(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int	 n = getpriority(PRIO_PROCESS, 0);

	(void)in;
	(void)len;
	(void)arg;
	return gp_ctx_reply(ctx, &n, sizeof(n));
}

/* Workers and their replacements (max_tasks 1) run at nice, absolute;
 * the caller stays at its own. */
static void
nice_applies(int exec)
{
	struct gp_pool_opts	 o = { .fake_gpus = 2, .max_tasks = 1 };
	struct gp_exec		 x;
	struct gp_pool		*p;
	struct gp_item		 it[6];
	char			 err[256];
	int			 cur = getpriority(PRIO_PROCESS, 0), n, i;

	if (exec)
		exec_opts(&o, &x);
	ck_assert_msg(cur < 19, "at niceness 19 already: the case cannot "
	    "tell");
	o.nice = cur + 3 > 19 ? 19 : cur + 3;
	o.errbuf = err;
	o.errlen = sizeof(err);
	ck_assert_msg(gp_pool_create(&p, &o) == 0, "create: %s", err);
	memset(it, 0, sizeof(it));
	ck_assert_int_eq(gp_pool_map(p, report_nice, NULL, 0, it, 6), 0);
	for (i = 0; i < 6; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		memcpy(&n, it[i].out, sizeof(n));
		ck_assert_int_eq(n, o.nice);
	}
	ck_assert_int_eq(getpriority(PRIO_PROCESS, 0), cur);
	gp_items_release(it, 6);
	gp_pool_destroy(p);
}

START_TEST(workers_run_at_their_niceness_forked)
{
	nice_applies(0);
}
END_TEST

START_TEST(workers_run_at_their_niceness_execd)
{
	nice_applies(1);
}
END_TEST

/*
 * A niceness under the caller's without the privilege (CAP_SYS_NICE
 * dropped, RLIMIT_NICE 0, in a child of the case's): the workers cannot
 * start, and create says why. The child's rc and errbuf come back on a
 * pipe.
 */
static void
nice_refused(int exec)
{
	struct __user_cap_header_struct	 h = { _LINUX_CAPABILITY_VERSION_3,
					   0 };
	struct __user_cap_data_struct	 d[2];
	struct rlimit			 none = { 0, 0 };
	struct gp_pool_opts		 o = { .fake_gpus = 1 };
	struct gp_exec			 x;
	struct gp_pool			*p;
	struct { int rc; char err[256]; } r = { 0, "" };
	int				 fd[2], st;
	pid_t				 pid;

	if (exec)
		exec_opts(&o, &x);
	ck_assert_int_gt(getpriority(PRIO_PROCESS, 0), -20);
	o.nice = getpriority(PRIO_PROCESS, 0) - 1;
	o.errbuf = r.err;
	o.errlen = sizeof(r.err);
	ck_assert_int_eq(pipe(fd), 0);
	if ((pid = fork()) == 0) {
		if (syscall(SYS_capget, &h, d) == 0) {
			d[CAP_SYS_NICE / 32].effective &=
			    ~(1u << (CAP_SYS_NICE % 32));
			(void)syscall(SYS_capset, &h, d);
		}
		(void)setrlimit(RLIMIT_NICE, &none);
		r.rc = gp_pool_create(&p, &o);
		_exit(write(fd[1], &r, sizeof(r)) == sizeof(r) ? 0 : 1);
	}
	ck_assert_int_gt(pid, 0);
	close(fd[1]);
	ck_assert_int_eq(read(fd[0], &r, sizeof(r)), sizeof(r));
	close(fd[0]);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_int_eq(st, 0);
	ck_assert_int_eq(r.rc, GP_EINIT);
	ck_assert_msg(strstr(r.err, "worker 0 (GPU fake0): cannot run at "
	    "niceness") != NULL && strstr(r.err, "Permission denied (under "
	    "the caller's it needs CAP_SYS_NICE or RLIMIT_NICE)") != NULL,
	    "errbuf: %s", r.err);
}

START_TEST(nice_under_the_callers_needs_the_privilege_forked)
{
	nice_refused(0);
}
END_TEST

START_TEST(nice_under_the_callers_needs_the_privilege_execd)
{
	nice_refused(1);
}
END_TEST

/* Echo, and say whether the item lay in the worker's region (a memfd
 * mapping of the pool's, mapped again after the exec). */
static int
echo_where(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	FILE		*f = fopen("/proc/self/maps", "re");
	char		 line[512];
	unsigned long	 lo, hi, a = (unsigned long)in;
	uint8_t		*out = malloc(len + 1);
	int		 rc;

	(void)arg;
	out[len] = 0;
	while (f != NULL && fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && a >= lo &&
		    a < hi && strstr(line, "/memfd:gpupool") != NULL)
			out[len] = 1;
	if (f != NULL)
		fclose(f);
	memcpy(out, in, len);
	rc = gp_ctx_reply(ctx, out, len + 1);
	free(out);
	return rc;
}

/* Big items through the memfd region, and items and results over the
 * window in pieces: exact, both ways. */
START_TEST(exec_region_and_pieces_carry_big_bytes)
{
	struct gp_pool_opts	 o = { .fake_gpus = 2, .window = 64 << 10 };
	struct gp_exec		 x;
	struct gp_pool		*p;
	size_t			 sz[4] = { 16, 4000, 40000, 300000 };
	struct gp_item		 it[4];
	uint8_t			*buf[4];
	int			 i;
	size_t			 k;

	exec_opts(&o, &x);
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	for (i = 0; i < 4; i++) {
		buf[i] = malloc(sz[i]);
		for (k = 0; k < sz[i]; k++)
			buf[i][k] = (uint8_t)(k * 7 + (size_t)i);
		gp_item_init(&it[i], buf[i], sz[i]);
	}
	ck_assert_int_eq(gp_pool_map(p, echo_where, NULL, 0, it, 4), 0);
	for (i = 0; i < 4; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		ck_assert_uint_eq(it[i].outlen, sz[i] + 1);
		ck_assert(memcmp(it[i].out, buf[i], sz[i]) == 0);
		/* Only 64 bytes up to the window lie in the region. */
		ck_assert_int_eq(((uint8_t *)it[i].out)[sz[i]],
		    sz[i] >= 64 && sz[i] <= (64 << 10));
		free(buf[i]);
	}
	gp_items_release(it, 4);
	gp_pool_destroy(p);
}
END_TEST

static int
kill_on_5(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int	 v;

	(void)arg;
	memcpy(&v, in, sizeof(v));
	if (v == 5 && len == sizeof(v))
		raise(SIGKILL);
	return report_fresh(ctx, in, len, arg);
}

/* A clean worker SIGKILLed mid-item: that item alone crashes, and the
 * replacement is a fresh exec'd worker too. */
START_TEST(exec_worker_killed_mid_item_is_replaced)
{
	struct gp_pool_opts	 o = { .fake_gpus = 2 };
	struct gp_exec		 x;
	struct gp_pool		*p;
	struct gp_item		 it[10];
	struct fresh		 f;
	int			 v[10], i;

	exec_opts(&o, &x);
	marker = 42;
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	for (i = 0; i < 10; i++) {
		v[i] = i;
		gp_item_init(&it[i], &v[i], sizeof(v[i]));
	}
	ck_assert_int_eq(gp_pool_map(p, kill_on_5, NULL, 0, it, 10), 0);
	for (i = 0; i < 10; i++) {
		if (i == 5) {
			ck_assert_int_eq(it[i].status, GP_CRASHED);
			ck_assert_int_eq(it[i].code, 128 + SIGKILL);
			continue;
		}
		ck_assert_int_eq(it[i].status, GP_OK);
		memcpy(&f, it[i].out, sizeof(f));
		ck_assert_int_eq(f.marker, 0);
	}
	gp_items_release(it, 10);
	v[5] = 50;
	ck_assert_int_eq(gp_pool_map(p, kill_on_5, NULL, 0, it, 10), 0);
	for (i = 0; i < 10; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		memcpy(&f, it[i].out, sizeof(f));
		ck_assert_int_eq(f.marker, 0);
		ck_assert_int_eq(f.ppid, getpid());
	}
	gp_items_release(it, 10);
	gp_pool_destroy(p);
	assert_no_children();
}
END_TEST

static int
hang_or_pid(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	pid_t	 pid = getpid();
	int	 v;

	(void)arg;
	memcpy(&v, in, sizeof(v));
	if (v < 0 && len == sizeof(v))
		for (;;)
			pause();
	return gp_ctx_reply(ctx, &pid, sizeof(pid));
}

/* Timeouts and recycling as for forks: a hung item times out and its
 * worker is replaced; max_tasks starts new exec'd workers. */
START_TEST(exec_workers_time_out_and_recycle)
{
	struct gp_pool_opts	 o = { .fake_gpus = 1, .timeout_ms = 300,
				       .grace_ms = 100, .max_tasks = 2 };
	struct gp_exec		 x;
	struct gp_pool		*p;
	struct gp_item		 it[7];
	pid_t			 seen[7];
	int			 v[7], i, j, distinct = 0;

	exec_opts(&o, &x);
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	for (i = 0; i < 7; i++) {
		v[i] = i == 3 ? -1 : i;
		gp_item_init(&it[i], &v[i], sizeof(v[i]));
	}
	ck_assert_int_eq(gp_pool_map(p, hang_or_pid, NULL, 0, it, 7), 0);
	for (i = 0; i < 7; i++) {
		seen[i] = 0;
		if (i == 3) {
			ck_assert_int_eq(it[i].status, GP_TIMEDOUT);
			continue;
		}
		ck_assert_int_eq(it[i].status, GP_OK);
		memcpy(&seen[i], it[i].out, sizeof(pid_t));
		for (j = 0; j < i && seen[j] != seen[i]; j++)
			;
		distinct += j == i;
	}
	/* 6 items, at most 2 per worker: 3 workers at least. */
	ck_assert_int_ge(distinct, 3);
	gp_items_release(it, 7);
	gp_pool_destroy(p);
	assert_no_children();
}
END_TEST

static int
say_then_wait(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int	 fd;
	pid_t	 pid = getpid();

	(void)ctx;
	(void)len;
	memcpy(&fd, in, sizeof(fd));
	(void)arg;
	if (write(fd, &pid, sizeof(pid)) != sizeof(pid))
		return 1;
	for (;;)
		pause();
	return 0;
}

/* An intermediate master makes an exec pool and is SIGKILLed, its
 * workers busy (PR_SET_PDEATHSIG, kept across exec) or idle under
 * GP_POOL_NO_PDEATHSIG (EOF, or the master's pidfd the worker opened
 * after its exec): every worker goes, seen before Check's group kill. */
static void
master_dies(unsigned flags, int busy)
{
	pid_t	 m, pids[2], run;
	int	 fds[2], i, n = 0;
	int64_t	 t0;

	ck_assert_int_eq(pipe(fds), 0);	/* the workers write to it */
	if ((m = fork()) == 0) {
		struct gp_pool_opts	 o = { .fake_gpus = 2, .flags = flags };
		struct gp_exec		 x;
		struct gp_pool		*p;
		struct gp_worker_info	 wi;
		struct gp_item		 it[2];

		close(fds[0]);
		exec_opts(&o, &x);
		x.keep_fds = &fds[1];
		x.nkeep = 1;
		if (gp_pool_create(&p, &o) < 0)
			_exit(1);
		for (i = 0; i < 2; i++) {
			gp_pool_info(p, i, &wi);
			if (write(fds[1], &wi.pid, sizeof(pid_t)) < 0)
				_exit(1);
		}
		for (i = 0; busy && i < 2; i++)
			gp_item_init(&it[i], &fds[1], sizeof(fds[1]));
		if (busy)
			gp_pool_map(p, say_then_wait, NULL, 0, it, 2);
		for (;;)
			pause();
	}
	close(fds[1]);
	for (i = 0; i < 2; i++)
		n += read(fds[0], &pids[i], sizeof(pid_t)) == sizeof(pid_t);
	ck_assert_int_eq(n, 2);
	for (i = 0; busy && i < 2; i++) {
		ck_assert_int_eq(read(fds[0], &run, sizeof(pid_t)),
		    sizeof(pid_t));
		ck_assert(run == pids[0] || run == pids[1]);
	}
	close(fds[0]);
	for (i = 0; i < 2; i++)
		ck_assert(!gone(pids[i]));
	kill(m, SIGKILL);
	ck_assert_int_eq(waitpid(m, NULL, 0), m);
	t0 = now_ms();
	for (i = 0; i < 2; i++) {
		while (!gone(pids[i]) && now_ms() - t0 < 10000)
			usleep(10000);
		ck_assert_msg(gone(pids[i]), "worker %d outlived its master",
		    (int)pids[i]);
	}
}

START_TEST(busy_exec_workers_die_with_their_master)
{
	master_dies(0, 1);
}
END_TEST

START_TEST(idle_exec_workers_leave_without_pdeathsig)
{
	master_dies(GP_POOL_NO_PDEATHSIG, 0);
}
END_TEST

/* init: the worker leads a process group of its own and declares it for
 * its whole life, as the Python binding's workers do. */
static int
lead_group(struct gp_ctx *ctx, void *arg)
{
	(void)arg;
	if (setpgid(0, 0) < 0)
		return 1;
	gp_ctx_set_pgid(ctx, getpid());
	return 0;
}

/* Forks a child that waits for ever, says its worker's pid and the
 * child's, and waits too if in holds {fd, 1}, else returns. */
static int
fork_then_wait(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	pid_t	 pids[2];
	int	 fd[2];

	(void)ctx;
	(void)len;
	(void)arg;
	memcpy(fd, in, sizeof(fd));
	if ((pids[1] = fork()) == 0)
		for (;;)
			pause();
	pids[0] = getpid();
	if (write(fd[0], pids, sizeof(pids)) != sizeof(pids))
		return 1;
	while (fd[1])
		pause();
	return 0;
}

/* An intermediate master whose workers lead their own groups, each busy
 * with an item that started a child, or idle after it, is SIGKILLed:
 * each worker takes its group down as it dies with its master (wstart.c:
 * PR_SET_PDEATHSIG's handler, or the EOF an idle one most often sees
 * first), the child included. Out of the test's group, a survivor is
 * killed here before the case fails. Before: the workers died, their
 * children ran on. */
static void
own_group_dies_with_master(int execd, int busy)
{
	pid_t	 m, pids[4];
	int	 fds[2], arg[2], i, left = 0;
	int64_t	 t0;

	ck_assert_int_eq(pipe(fds), 0);	/* the items write to it */
	if ((m = fork()) == 0) {
		/* Idle, without the death signal: the way an idle worker
		 * most often leaves (EOF, its pidfd) is then the only one. */
		struct gp_pool_opts	 o = { .fake_gpus = 2,
					       .init = lead_group,
					       .flags = busy ? 0 :
					       GP_POOL_NO_PDEATHSIG };
		struct gp_exec		 x;
		struct gp_pool		*p;
		struct gp_item		 it[2];

		close(fds[0]);
		if (execd) {
			exec_opts(&o, &x);
			x.keep_fds = &fds[1];
			x.nkeep = 1;
		}
		if (gp_pool_create(&p, &o) < 0)
			_exit(1);
		arg[0] = fds[1];
		arg[1] = busy;
		for (i = 0; i < 2; i++)
			gp_item_init(&it[i], arg, sizeof(arg));
		gp_pool_map(p, fork_then_wait, NULL, 0, it, 2);
		for (;;)
			pause();
	}
	close(fds[1]);
	for (i = 0; i < 2; i++)
		ck_assert_int_eq(read(fds[0], &pids[2 * i], 2 * sizeof(pid_t)),
		    2 * sizeof(pid_t));
	close(fds[0]);
	kill(m, SIGKILL);
	ck_assert_int_eq(waitpid(m, NULL, 0), m);
	t0 = now_ms();
	for (i = 0; i < 4; i++) {
		while (!gone(pids[i]) && now_ms() - t0 < 10000)
			usleep(10000);
		if (!gone(pids[i]) && kill(pids[i], SIGKILL) == 0)
			left = pids[i];
	}
	ck_assert_msg(left == 0, "%s %d outlived the master (%s)",
	    left == pids[0] || left == pids[2] ? "worker" : "item's child",
	    (int)left, busy ? "busy" : "idle");
}

START_TEST(own_group_dies_with_master_forked)
{
	own_group_dies_with_master(0, 1);
	own_group_dies_with_master(0, 0);
}
END_TEST

START_TEST(own_group_dies_with_master_execd)
{
	own_group_dies_with_master(1, 1);
	own_group_dies_with_master(1, 0);
}
END_TEST

/* What is not a worker of this pool is refused, saying why: no such
 * program, bytes without a length, a worker of another protocol, a
 * program that is not a gpupool worker at all. */
START_TEST(programs_that_cannot_be_workers_are_refused)
{
	char			*none[] = { "/nonexistent/worker", NULL };
	char			*other[] = { "/bin/sh", "-c",
				    "GPUPOOL_WORKER=gpupool999:${GPUPOOL_WORKER#"
				    "gpupool*:} exec \"$0\"", self, NULL };
	char			*not[] = { "/bin/true", NULL };
	struct gp_pool_opts	 o = { .fake_gpus = 1 };
	struct gp_exec		 x;
	struct gp_pool		*p;
	char			 err[512];

	exec_opts(&o, &x);
	o.errbuf = err;
	o.errlen = sizeof(err);
	x.argv = none;
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_msg(strstr(err, "cannot exec '/nonexistent/worker'"),
	    "%s", err);
	x.argv = self_argv;
	o.init_arg = "x";
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_msg(strstr(err, "init_arglen"), "%s", err);
	o.init_arg = NULL;
	x.argv = other;
	ck_assert_int_eq(gp_pool_create(&p, &o), GP_EINIT);
	ck_assert_msg(strstr(err, "another protocol or library version"),
	    "%s", err);
	x.argv = not;
	ck_assert_int_eq(gp_pool_create(&p, &o), GP_EINIT);
	ck_assert_msg(strstr(err, "exited with status 0 while starting"),
	    "%s", err);
	assert_no_children();
}
END_TEST

/* fn in a library the worker's program never loaded: found by its path
 * and build id, and run. */
START_TEST(fn_of_a_library_is_loaded_in_the_worker)
{
	struct gp_pool_opts	 o = { .fake_gpus = 1 };
	struct gp_exec		 x;
	struct gp_pool		*p;
	struct gp_item		 it[2];
	void			*h = dlopen(GP_FAKE_BLAS, RTLD_NOW);
	gp_fn			*fn;

	exec_opts(&o, &x);
	ck_assert_ptr_nonnull(h);
	fn = (gp_fn *)dlsym(h, "fake_blas_fn");
	ck_assert_ptr_nonnull(fn);
	ck_assert_int_eq(setenv("OPENBLAS_NUM_THREADS", "3", 1), 0);
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	memset(it, 0, sizeof(it));
	ck_assert_int_eq(gp_pool_map(p, fn, NULL, 0, it, 2), 0);
	/* It ran there: the count the worker's own copy read at load. */
	ck_assert_int_eq(it[0].status, GP_FAILED);
	ck_assert_int_eq(it[0].code, 103);
	gp_pool_destroy(p);
}
END_TEST

int
main(int argc, char **argv)
{
	Suite	*s;
	TCase	*tc;

	gp_worker_enter();	/* the pools' workers are this program */
	s = suite_create("exec");
	tc = tcase_create("exec");
	(void)argc;
	(void)argv;
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, exec_workers_are_fresh_images);
	tcase_add_test(tc, exec_workers_get_the_options_whole);
	tcase_add_test(tc, exec_workers_keep_only_their_fds);
	tcase_add_test(tc, exec_workers_are_bound_where_placed);
	tcase_add_test(tc, threads_fit_the_cpus_forked);
	tcase_add_test(tc, threads_fit_the_cpus_execd);
	tcase_add_test(tc, workers_run_at_their_niceness_forked);
	tcase_add_test(tc, workers_run_at_their_niceness_execd);
	tcase_add_test(tc, nice_under_the_callers_needs_the_privilege_forked);
	tcase_add_test(tc, nice_under_the_callers_needs_the_privilege_execd);
	tcase_add_test(tc, exec_region_and_pieces_carry_big_bytes);
	tcase_add_test(tc, exec_worker_killed_mid_item_is_replaced);
	tcase_add_test(tc, exec_workers_time_out_and_recycle);
	tcase_add_test(tc, busy_exec_workers_die_with_their_master);
	tcase_add_test(tc, idle_exec_workers_leave_without_pdeathsig);
	tcase_add_test(tc, own_group_dies_with_master_forked);
	tcase_add_test(tc, own_group_dies_with_master_execd);
	tcase_add_test(tc, programs_that_cannot_be_workers_are_refused);
	tcase_add_test(tc, fn_of_a_library_is_loaded_in_the_worker);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
