/*
 * wstart.c: the steps of a worker's start-up that a forked worker
 * (worker.c) and the child of an exec'd one (exec.c, before its exec)
 * share: signals reset and death with the master, the CPU and memory
 * binding, the steps that may fail (the niceness, the extern mapping:
 * one table, one way to report), and thread counts fitted to the CPUs it got.
 * Runs only in a worker process (gp_wstart_reset_signals() in the GPU
 * monitor's too), never in the master; single-threaded when it runs.
 * The calls before an exec are async-signal-safe but hwloc's binding,
 * which allocates (glibc's and musl's malloc work in a forked child).
 */
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "internal.h"

/* A handler of the host must never run in a worker (musl's posix_spawn
 * rule); ^C is the master's to handle. keep: a signal left as it is (the
 * one die_with() caught), or 0. */
static void
reset_signals(int keep)
{
	struct sigaction	 sa;
	sigset_t		 none;
	int			 sig;

	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	for (sig = 1; sig < NSIG; sig++) {
		if (sig == SIGKILL || sig == SIGSTOP || sig == keep)
			continue;
		sa.sa_handler = (sig == SIGINT) ? SIG_IGN : SIG_DFL;
		(void)sigaction(sig, &sa, NULL);
	}
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
}

static pid_t	 death_master;

/* GP_DEATH_SIG came: the thread that forked this process ended. It kills
 * only when the master itself is gone (the parent is then another
 * process: a subreaper, or init); a master thread that ended (a pool
 * made or driven from a thread of its own) leaves it be. A worker that
 * leads a process group of its own (the Python binding's: gpupool.3,
 * gp_ctx_set_pgid()) takes that group down with it: what its items
 * started must not outlive the master, and nobody else is left to kill
 * it. All four calls are async-signal-safe. */
static void
on_parent_thread_end(int sig)
{
	(void)sig;
	if (getppid() != death_master)
		(void)kill(getpgrp() == getpid() ? 0 : getpid(), SIGKILL);
}

/* The master is gone (EOF, a failed write, its pidfd): as
 * on_parent_thread_end(), the group this worker leads goes with it. */
void
gp_wstart_leave(void)
{
	if (getpgrp() == getpid())
		(void)kill(0, SIGKILL);
	_exit(0);
}

/* PR_SET_PDEATHSIG's signal, caught (internal.h, GP_DEATH_SIG); leaves
 * at once if master is gone already. */
static void
die_with(pid_t master)
{
	struct sigaction	 sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_parent_thread_end;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	death_master = master;
	(void)sigaction(GP_DEATH_SIG, &sa, NULL);
	(void)prctl(PR_SET_PDEATHSIG, GP_DEATH_SIG);
	if (getppid() != master)
		_exit(0);	/* it died before prctl */
}

void
gp_wstart_reset_signals(pid_t master, int die)
{
	if (die)
		die_with(master);
	reset_signals(die ? GP_DEATH_SIG : 0);
}

void
gp_wstart_signals(const struct gp_pool *p)
{
	gp_wstart_reset_signals(p->master,
	    !(p->o.flags & GP_POOL_NO_PDEATHSIG));
}

void
gp_wstart_bind(struct gp_pool *p, struct gp_worker *w, int *cpu_rc,
    int *mem_rc)
{
	*cpu_rc = *mem_rc = 0;
	if (!(p->o.flags & GP_POOL_NO_BIND))
		(void)gp_topo_bind(p->topo, &w->place, cpu_rc, mem_rc);
}

/*
 * The start-up steps that may fail, in their order (after the binding,
 * before the thread counts: invariant 3). Each is a run, 0 or -errno,
 * and a why, the reason gp_pool_create()'s errbuf gives for its -errno
 * ("worker N (GPU g): " + why): a new one is a row here and its two
 * functions, its failure reported by READY's step, step_err and why
 * (msg.h) through pool.c's one branch. before_exec: an exec'd worker's
 * child runs it before its exec (async-signal-safe, then), so that the
 * program starts under it; else it runs in the worker.
 */
struct wstep {
	int	 before_exec;
	int	(*run)(struct gp_pool *p, struct gp_worker *w);
	void	(*why)(const struct gp_pool *p, int err, char *buf,
		    size_t len);
};

/*
 * The niceness opts.nice names (0: left as it is). Absolute, as
 * setpriority() and GNU parallel's --nice take it. A single-threaded
 * process: Linux's niceness is per thread, and the threads and
 * processes the worker starts later inherit it.
 */
static int
step_nice(struct gp_pool *p, struct gp_worker *w)
{
	(void)w;
	if (p->o.nice == 0)
		return 0;
	return setpriority(PRIO_PROCESS, 0, p->o.nice) < 0 ? -errno : 0;
}

static void
why_nice(const struct gp_pool *p, int err, char *buf, size_t len)
{
	snprintf(buf, len, "cannot run at niceness %d: %s%s", p->o.nice,
	    strerror(-err), err == -EACCES ? " (under the caller's it needs "
	    "CAP_SYS_NICE or RLIMIT_NICE)" : "");
}

/*
 * The extern mapping (gp_pool_opts.ext_base), which fn reads GP_REC_EXT
 * items from: a forked worker has the caller's, and makes it read only;
 * an exec'd one maps it read only from the memfd its exec kept, and
 * closes that.
 */
static int
step_ext(struct gp_pool *p, struct gp_worker *w)
{
	void	*m;

	(void)w;
	if (p->o.ext_len == 0)
		return 0;
	if (!p->execd)
		return mprotect((void *)(uintptr_t)p->o.ext_base, p->o.ext_len,
		    PROT_READ) < 0 ? -errno : 0;
	m = mmap(NULL, p->o.ext_len, PROT_READ, MAP_SHARED, p->o.ext_fd,
	    (off_t)p->o.ext_off);
	(void)close(p->o.ext_fd);
	if (m == MAP_FAILED)
		return -errno;
	p->o.ext_base = m;
	return 0;
}

static void
why_ext(const struct gp_pool *p, int err, char *buf, size_t len)
{
	snprintf(buf, len, "cannot %s the extern mapping (%llu bytes): %s",
	    p->execd ? "map" : "protect", (unsigned long long)p->o.ext_len,
	    strerror(-err));
}

static const struct wstep steps[] = {
	{ 1, step_nice, why_nice },
	{ 0, step_ext, why_ext },
};

#define NSTEPS	(sizeof(steps) / sizeof(steps[0]))

void
gp_wstart_steps_child(struct gp_pool *p, struct gp_worker *w)
{
	size_t	 i;
	int	 err = 0;

	for (i = 0; i < NSTEPS; i++)
		if (steps[i].before_exec && (err = steps[i].run(p, w)) != 0)
			break;
	atomic_store(&w->shm->step_err, err);
	atomic_store(&w->shm->step, err != 0 ? (int)i + 1 : 0);
}

void
gp_wstart_steps(struct gp_pool *p, struct gp_worker *w,
    struct gp_msg_ready *rd)
{
	size_t	 i;
	int	 err;

	for (i = 0; i < NSTEPS; i++) {
		if (!p->execd || !steps[i].before_exec)
			err = steps[i].run(p, w);
		else if (atomic_load(&w->shm->step) == (int)i + 1)
			err = atomic_load(&w->shm->step_err);
		else
			err = 0;
		if (err == 0)
			continue;
		rd->step = (int32_t)i + 1;
		rd->step_err = err;
		steps[i].why(p, err, rd->why, sizeof(rd->why));
		rd->fatal = 1;
		return;
	}
}

/*
 * The variables the thread pools of numeric libraries read when they
 * start (joblib's list, MAX_NUM_THREADS_VARS), and for the ones already
 * started in this process (a forked worker whose caller imported numpy)
 * the call that changes their count, looked up in each loaded library
 * whose file name starts so (threadpoolctl's way): a library loaded
 * RTLD_LOCAL, as Python's extensions are, is not found by name alone.
 */
static const char *const vars[] = {
	"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
	"BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMBA_NUM_THREADS",
	"NUMEXPR_NUM_THREADS",
};

static const struct setter {
	const char	*prefix;	/* of the library's file name */
	const char	*var;		/* the user's setting that wins */
	const char	*sym[3];
	int		 wide;		/* it takes a 64-bit count (dim_t) */
} setters[] = {
	{ "libopenblas", "OPENBLAS_NUM_THREADS", { "openblas_set_num_threads",
	    "openblas_set_num_threads64_", NULL }, 0 },
	{ "libscipy_openblas", "OPENBLAS_NUM_THREADS",
	    { "scipy_openblas_set_num_threads",
	    "scipy_openblas_set_num_threads64_", NULL }, 0 },
	{ "libgomp", "OMP_NUM_THREADS", { "omp_set_num_threads", NULL }, 0 },
	{ "libomp", "OMP_NUM_THREADS", { "omp_set_num_threads", NULL }, 0 },
	{ "libiomp", "OMP_NUM_THREADS", { "omp_set_num_threads", NULL }, 0 },
	{ "libmkl_rt", "MKL_NUM_THREADS", { "MKL_Set_Num_Threads", NULL }, 0 },
	{ "libblis", "BLIS_NUM_THREADS", { "bli_thread_set_num_threads",
	    NULL }, 1 },
};

struct fit {
	int		 n;
	const char	*user[sizeof(setters) / sizeof(setters[0])];
};

/* The library at path, if it is one of setters' and its variable is not
 * the user's: its count set to f->n. */
static void
limit_one(const struct fit *f, const char *path)
{
	const char	*base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	void		*h, *s;
	size_t		 i, j;

	for (i = 0; i < sizeof(setters) / sizeof(setters[0]); i++) {
		if (strncmp(base, setters[i].prefix,
		    strlen(setters[i].prefix)) != 0 || f->user[i] != NULL)
			continue;
		/* Already loaded: RTLD_NOLOAD gives its handle, loads
		 * nothing. */
		if ((h = dlopen(path, RTLD_NOW | RTLD_NOLOAD)) == NULL)
			continue;
		for (j = 0; setters[i].sym[j] != NULL; j++)
			if ((s = dlsym(h, setters[i].sym[j])) != NULL) {
				if (setters[i].wide)
					((void (*)(int64_t))s)(f->n);
				else
					((void (*)(int))s)(f->n);
				break;
			}
		dlclose(h);
	}
}

/*
 * Each library mapped here, found in /proc/self/maps rather than by
 * dl_iterate_phdr(): a forked worker of a threaded caller must not wait
 * for a loader lock another thread held at the fork, and the loader is
 * asked (dlopen, whose lock glibc resets in a forked child) only for a
 * library that is one of ours, which a caller without them never has.
 */
static void
limit_loaded(const struct fit *f)
{
	FILE	*m = fopen("/proc/self/maps", "re");
	char	 line[4096 + 128], last[4096] = "", *path;
	size_t	 n;

	while (m != NULL && fgets(line, sizeof(line), m) != NULL) {
		if ((path = strchr(line, '/')) == NULL ||
		    strstr(path, ".so") == NULL)
			continue;
		if ((n = strcspn(path, "\n")) >= sizeof(last))
			continue;
		path[n] = '\0';
		if (strcmp(path, last) == 0)	/* its next segment */
			continue;
		memcpy(last, path, n + 1);
		limit_one(f, path);
	}
	if (m != NULL)
		fclose(m);
}

void
gp_wstart_threads(struct gp_pool *p, struct gp_worker *w)
{
	struct fit	 f;
	cpu_set_t	 cs;
	char		 v[16];
	size_t		 i;

	if (!(p->o.flags & GP_POOL_FIT_THREADS))
		return;
	CPU_ZERO(&cs);
	f.n = sched_getaffinity(0, sizeof(cs), &cs) == 0 ? CPU_COUNT(&cs) : 0;
	if (f.n <= 0)
		f.n = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (f.n <= 0)
		f.n = 1;
	w->info.threads = f.n;
	for (i = 0; i < sizeof(setters) / sizeof(setters[0]); i++)
		f.user[i] = getenv(setters[i].var);
	/* What the user set, in the caller's environment, wins. */
	snprintf(v, sizeof(v), "%d", f.n);
	for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		if (getenv(vars[i]) == NULL)
			(void)setenv(vars[i], v, 0);
	limit_loaded(&f);
}
