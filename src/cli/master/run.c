/*
 * run.c: one run of gpupool-run in the master process, from start to
 * end: the results directory, the pool and the feed's control fd set up;
 * on a rank other than 0, rank_serve() (rank.c); on rank 0, the other
 * ranks waited for, the joblog opened, then a single gp_pool_run() call whose
 * feed (feed.c) streams the tasks, while the control fd turns SIGINT,
 * SIGTERM and SIGHUP into cancel and kill requests and wakes for the
 * ranks (coord.c) and for standard output and error (output.c); then
 * the summary and the exit status. Nothing here runs in a worker (but
 * worker_init()) or in a signal handler: the signals are blocked once
 * the pool is up, right before the signalfd that reads them is polled
 * (workers reset their own mask).
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "master/master.h"

#define POOL_GRACE_EXTRA_MS	2000	/* the worker kills first */
#define BACKSTOP_EXTRA_MS	5000
#define BAR_TICK_MS		1000	/* redraw while the run goes */

/* In each worker: a SIGTERM or SIGHUP sent to the whole process group
 * (a launcher ending an MPI job, systemd, a closed terminal) is the
 * master's to act on, as ^C is: it stops the tasks (TERM, grace, KILL)
 * and records them. Workers still leave with the master (EOF on their
 * stop fd); tasks start with every signal at its default. The joblog and
 * --results DIR are locked before the pool forks (nothing may wait on a
 * lock once ranks are up): the worker's copies of the locked fds go, or
 * the locks would outlive a SIGKILLed master for as long as its workers
 * (a second run told to wait for a dead pid). An OFD lock stays with the
 * master's descriptor. arg is the run (NULL: none, no pool that forks). */
static int
worker_init(struct gp_ctx *ctx, void *arg)
{
	struct run	*r = arg;

	(void)signal(SIGTERM, SIG_IGN);
	(void)signal(SIGHUP, SIG_IGN);
	if (r != NULL && r->jl.fd > STDERR_FILENO) {
		close(r->jl.fd);
		r->jl.fd = -1;
	}
	if (r != NULL && r->rlock >= 0) {
		close(r->rlock);
		r->rlock = -1;
	}
	/* The tasks file's shared lock too (main.c): workers never read it. */
	if (r != NULL && r->in.rd.fd > STDERR_FILENO) {
		close(r->in.rd.fd);
		r->in.rd.fd = -1;
	}
	if (r != NULL)
		live_worker(r);
	return 0;
}

/* hwloc reads the whole of a topology file: /dev/zero would never end,
 * a FIFO with no writer never start. Only a regular file will do, and
 * one that no output of the run is (files.c): hwloc reads it when the
 * pool is made, before the joblog is truncated. */
static int
topology_check(const char *path, const char *what)
{
	struct stat	 st;
	char		 err[512];

	if (path == NULL || *path == '\0')
		return 0;
	if (stat(path, &st) == -1) {
		out_err("%s: cannot read '%s': %s", what, path,
		    strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		out_err("%s: '%s' is not a regular file (an hwloc XML "
		    "topology)", what, path);
		return -1;
	}
	if (files_note(FILE_IN, what, path, -1, err, sizeof(err)) < 0) {
		out_err("%s", err);
		return -1;
	}
	return 0;
}

static void
pool_opts(const struct opts *o, struct gp_pool_opts *po, unsigned flags,
    char *err, size_t errlen)
{
	uint64_t	 b;

	*po = o->pool;		/* --gpus, --busy-pct, --wait-free */
	po->fake_gpus = o->fake_gpus;
	po->per_gpu = o->per_gpu;
	po->topology_xml = o->topology;
	po->fake_busids = o->fake_busids;
	/* The worker stops its task itself (TERM, grace, KILL); the pool's
	 * own limits are only a backstop for a worker that does not. */
	b = o->grace_ms + POOL_GRACE_EXTRA_MS;
	po->grace_ms = b <= UINT_MAX ? (unsigned)b : UINT_MAX;
	b = o->timeout_ms ? o->timeout_ms + o->grace_ms + BACKSTOP_EXTRA_MS : 0;
	po->timeout_ms = b <= UINT_MAX ? (unsigned)b : 0;
	po->max_msg = 2 * (size_t)OUTPUT_MAX + LINE_MAX_BYTES + 65536;
	po->init = worker_init;
	/* The monitor is cheap without NVML (one fork, a failed dlopen) and
	 * gives every task its GPU columns with it. */
	po->flags |= GP_POOL_NO_PDEATHSIG | GP_POOL_MONITOR |
	    GP_POOL_CLAIM_ITEMS | flags;
	po->errbuf = err;
	po->errlen = errlen;
}

/* The pool of run r (NULL: of no run, as run_pool_create() makes). */
static int
pool_create(const struct opts *o, struct run *r, unsigned flags,
    struct gp_pool **pool)
{
	struct gp_pool_opts	 po;
	char			 err[512];
	int			 rc;

	/* Here, not in main(): with ranks, the one that cannot start says
	 * so to rank 0, which then stops them all. */
	if (topology_check(o->topology, "--topology") < 0 ||
	    (o->topology == NULL && topology_check(getenv("GPUPOOL_TOPOLOGY"),
	    "GPUPOOL_TOPOLOGY") < 0))
		return -EINVAL;
	pool_opts(o, &po, flags, err, sizeof(err));
	po.init_arg = r;
	if ((rc = gp_pool_create(pool, &po)) < 0) {
		out_err("%s%s", err[0] ? err : gp_strerror(rc),
		    rc == GP_ENOGPU && (po.flags & (GP_POOL_GPUS_FREE |
		    GP_POOL_WAIT_FREE)) == GP_POOL_GPUS_FREE ?
		    " (--wait-free waits for one)" : "");
		return rc;
	}
	return 0;
}

int
run_pool_create(const struct opts *o, unsigned flags, struct gp_pool **pool)
{
	return pool_create(o, NULL, flags, pool);
}

static int
on_signals(struct run *r)
{
	int	 got = signals_read(r);

	out_bar_winch(r);
	if (got == 0)
		return GP_CTL_GO_ON;
	if (r->nsig == 1) {
		feed_halt_start(r, RC_CANCEL);
		/* No count: a task handed to a worker may not have started
		 * yet, and the summary counts it apart. */
		out_err("got SIG%s: stopping the running tasks (again to kill "
		    "them now)", sigabbrev_np(r->sig));
		return GP_CTL_CANCEL;
	}
	feed_halt_start(r, RC_KILL);
	out_err("got SIG%s again: killing the running tasks",
	    sigabbrev_np(r->sig));
	return GP_CTL_KILL;
}

static int
feed_ctl(void *arg)
{
	struct run		*r = arg;
	struct epoll_event	 ev[4];
	struct outq		*q;
	int			 n, i, a, act = GP_CTL_GO_ON;

	n = epoll_wait(r->epfd, ev, 4, 0);
	for (i = 0; i < n; i++) {
		switch (ev[i].data.u32) {
		case EV_SIG:
			a = on_signals(r);
			break;
		case EV_RANKS:
			a = coord_on_ranks(r);
			break;
		case EV_TIMER:
			a = coord_on_timer(r);
			break;
		case EV_DELAY:
			feed_pace_wake(r);
			a = GP_CTL_GO_ON;
			break;
		case EV_LIVE:
			a = live_read(r);
			break;
		case EV_OUT:
		case EV_ERR:
			q = ev[i].data.u32 == EV_OUT ? &r->oq : &r->eq;
			q->armed = 0;	/* one shot */
			out_flush(r, q);
			a = out_halted(r) ? GP_CTL_CANCEL : GP_CTL_GO_ON;
			break;
		default:
			r->in_armed = 0;	/* one shot */
			a = GP_CTL_GO_ON;
			break;
		}
		if (a > act)
			act = a;
	}
	live_arm(r);	/* stdout may have room again */
	coord_dispatch(r);
	return act;
}

/* Open the joblog for appending: --resume keeps it, +FILE too. */
static int
joblog_start(struct run *r)
{
	const char	*path = r->o->joblog;
	char		 err[512];
	int		 keep = r->o->resume || r->o->resume_failed ||
			    r->o->retry_failed;

	if (path == NULL)
		return 0;
	if (r->o->joblog_append)
		keep = 1;	/* +FILE: GNU parallel's "append" */
	if (joblog_open(&r->jl, path, keep, err, sizeof(err)) < 0) {
		out_err("%s", err);
		return -1;
	}
	return 0;
}

/* This rank's slots and GPUs, in peer[0]. */
static int
map_workers(struct run *r, struct gp_pool *pool)
{
	struct gp_worker_info	 wi;
	struct peer		*p;
	int			 w;

	r->npeer = ranks_size(r->rk);
	if ((r->peer = calloc((size_t)r->npeer, sizeof(*r->peer))) == NULL)
		return -ENOMEM;
	p = &r->peer[0];
	p->nw = gp_pool_size(pool);
	if ((p->host = strdup(r->rk != NULL ? ranks_host(r->rk) : ":")) ==
	    NULL || (p->w_gpu = calloc((size_t)p->nw, sizeof(*p->w_gpu))) ==
	    NULL || (p->gpu_id = calloc((size_t)p->nw,
	    sizeof(*p->gpu_id))) == NULL || (p->busy_ns = calloc((size_t)p->nw,
	    sizeof(*p->busy_ns))) == NULL)
		return -ENOMEM;
	for (w = 0; w < p->nw; w++) {
		(void)gp_pool_info(pool, w, &wi);
		p->w_gpu[w] = wi.gpu;
		if (wi.gpu >= p->ngpu)
			p->ngpu = wi.gpu + 1;
		if (p->gpu_id[wi.gpu] == NULL &&
		    (p->gpu_id[wi.gpu] = strdup(wi.visible)) == NULL)
			return -ENOMEM;
	}
	p->hello = 1;
	return 0;
}

/* mpirun binds each rank to a core (two ranks or fewer) or a socket by
 * default, and its workers inherit that: say so when it leaves fewer
 * CPUs than slots. */
static void
bound_warn(const struct run *r)
{
	cpu_set_t	 cs;
	long		 online = sysconf(_SC_NPROCESSORS_ONLN);
	int		 n;

	if (sched_getaffinity(0, sizeof(cs), &cs) == -1)
		return;
	n = CPU_COUNT(&cs);
	if (n >= r->peer[0].nw || n >= online)
		return;
	out_warn("the launcher bound this rank to %d of %ld CPUs: its %d "
	    "slots share them (mpirun --bind-to none, or give srun "
	    "--cpus-per-task; see docs/cluster.md)", n, online, r->peer[0].nw);
}

/*
 * The feed's control fd, an epoll set of: the signalfd; a timer for
 * silent ranks and for the bar; stdout and stderr, one shot each, when
 * a write to it would wait (rank 0); with ranks, the socket to the MPI process and
 * (one shot) a pollable input.
 */
static int
ctl_setup(struct run *r, const sigset_t *set)
{
	struct epoll_event	 ev;
	struct itimerspec	 its;
	struct stat		 so, se;
	struct outq		*q;
	int64_t			 ms = BAR_TICK_MS;
	int			 i;

	if ((r->sfd = signalfd(-1, set, SFD_CLOEXEC | SFD_NONBLOCK)) == -1 ||
	    (r->epfd = epoll_create1(EPOLL_CLOEXEC)) == -1)
		return -errno;
	ev.events = EPOLLIN;
	ev.data.u32 = EV_SIG;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->sfd, &ev) == -1)
		return -errno;
	if (ranks_rank(r->rk) == 0) {
		r->out_same = fstat(STDOUT_FILENO, &so) == 0 &&
		    fstat(STDERR_FILENO, &se) == 0 && so.st_dev == se.st_dev &&
		    so.st_ino == se.st_ino;
		for (i = 0; i < (r->out_same ? 1 : 2); i++) {
			q = i == 0 ? &r->oq : &r->eq;
			/* epoll refuses what never makes a write wait
			 * (EPERM): a regular file, /dev/null. */
			ev.events = EPOLLONESHOT;	/* armed when wanted */
			ev.data.u32 = (uint32_t)q->ev;
			if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, q->fd, &ev) == 0)
				q->poll = 1;
			else if (errno != EPERM)
				return -errno;
		}
		out_bar_size(r);
		if ((i = live_watch(r)) < 0)
			return i;
	}
	if (r->npeer > 1) {
		ms = (int64_t)r->o->rank_timeout_ms / 4;
		if (ms > 1000)
			ms = 1000;
		if (ms < 10)
			ms = 10;
	}
	/* Without a bar and ranks the tick is for out_gpu_notes() alone. */
	if ((r->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC |
	    TFD_NONBLOCK)) == -1)
		return -errno;
	memset(&its, 0, sizeof(its));
	its.it_interval.tv_sec = ms / 1000;
	its.it_interval.tv_nsec = (ms % 1000) * 1000000;
	its.it_value = its.it_interval;
	ev.events = EPOLLIN;
	ev.data.u32 = EV_TIMER;
	if (timerfd_settime(r->tfd, 0, &its, NULL) == -1 ||
	    epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->tfd, &ev) == -1)
		return -errno;
	if (r->npeer == 1)
		return 0;
	ev.data.u32 = EV_RANKS;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, ranks_fd(r->rk), &ev) == -1)
		return -errno;
	if (r->in.rd.pollable) {
		ev.events = EPOLLONESHOT;	/* armed when wanted */
		ev.data.u32 = EV_INPUT;
		if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->in.rd.fd, &ev) == -1)
			return -errno;
	}
	return 0;
}

/* Until every other rank has said hello (want_bye 0) or bye (1), or is
 * lost. Returns 0, or -EINTR when a signal ended the wait for hellos. */
static int
ranks_wait(struct run *r, int want_bye)
{
	struct pollfd	 pfd;
	int		 i, all;

	pfd.fd = r->epfd;
	pfd.events = POLLIN;
	for (;;) {
		for (i = 1, all = 1; i < r->npeer && all; i++)
			all = r->peer[i].lost || r->peer[i].bye ||
			    (!want_bye && r->peer[i].hello);
		if (all)
			return 0;
		if (poll(&pfd, 1, -1) == -1 && errno != EINTR)
			return -errno;
		/* No pool runs now: what ctl() asks of one has been done,
		 * or is moot. */
		(void)feed_ctl(r);
		if (!want_bye && r->sig)
			return -EINTR;
	}
}

/* GNU parallel's: 0 all succeeded, else the tasks that failed (101 for
 * more than 100); under --halt, what its condition fixed when it was met
 * (feed.c), and when it never was, with a percentage, the share of the
 * attempts run that failed, rounded up (parallel's halt()). */
static int
exit_code(const struct run *r)
{
	if (r->sig)
		return 128 + r->sig;
	if (r->fatal)
		return EXIT_FATAL;
	if (r->halt_rc >= 0)
		return r->halt_rc;
	if (r->o->halt != HALT_NEVER && r->o->halt_pct)
		return (int)ceil((double)r->failed / (double)(r->rt_n > 0 ?
		    r->rt_n : 1) * 100.0);
	if (r->failed > 100)
		return 101;
	return (int)r->failed;
}

/* Everything a run needs before it starts, on every rank: conf (its
 * results directory open: workers are forked with it), the pool, this
 * rank's slots in peer[0], the signals and the control fd. Prints why it
 * failed; *pool and conf->results_fd are the caller's to release. */
static int
run_setup(struct run *r, struct run_conf *conf, struct gp_pool **pool)
{
	const struct opts	*o = r->o;
	const char		*why;
	sigset_t		 set;
	int			 rc;

	r->tty = isatty(STDERR_FILENO);
	r->bar = o->bar || (r->tty && !o->quiet);
	out_attach(r);
	memset(conf, 0, sizeof(*conf));
	conf->timeout_ms = o->timeout_ms;
	conf->grace_ms = o->grace_ms;
	conf->results_fd = -1;
	conf->rank = ranks_rank(r->rk);
	conf->mpi = r->rk != NULL;
	conf->grid = o->grid_argv != NULL;
	conf->threads = o->threads;
	snprintf(conf->shell, sizeof(conf->shell), "%s", o->sh);
	/* Workers are forked with the results directory open. */
	if (o->results != NULL && (conf->results_fd =
	    resdir_open(r, o->results)) < 0)
		return -1;
	if (live_setup(r, conf) < 0)
		return -1;

	if (pool_create(o, r, 0, pool) < 0)
		return -1;
	r->pool = *pool;
	/* Said once: without NVML --gpus free runs on every GPU. Without
	 * it, and without --gpus free, nothing needs a word; a monitor that
	 * ends mid-run is said then (out_gpu_notes()). */
	if ((why = gp_pool_monitor(*pool)) != NULL) {
		r->mon_said = 1;
		if (o->pool.flags & GP_POOL_GPUS_FREE)
			out_warn("--gpus free cannot tell busy GPUs (%s): "
			    "every GPU counts as free", why);
	}
	if (map_workers(r, *pool) < 0) {
		out_err("out of memory");
		return -1;
	}
	/* Blocked only now, right before the signalfd that reads them is
	 * polled: until then ^C ends gpupool-run as it ends any program,
	 * whatever may make it wait (its workers see their pipes close and
	 * leave). With ranks, main() blocked them before MPI's threads
	 * started. */
	if (signals_block(&set) < 0) {
		out_err("cannot set up signals: %s", strerror(errno));
		return -1;
	}
	if ((rc = ctl_setup(r, &set)) < 0 || (rc = feed_pace_setup(r)) < 0) {
		out_err("cannot set up signals: %s", strerror(-rc));
		return -1;
	}
	if (r->rk != NULL)
		bound_warn(r);
	return 0;
}

/* Rank 0's gp_pool_run(), fed by feed.c; with ranks, what they still run
 * ends there and is recorded here. */
static void
run_feed(struct run *r, struct gp_pool *pool, const struct run_conf *conf)
{
	struct gp_feed	 feed;
	int		 rc;

	memset(&feed, 0, sizeof(feed));
	feed.next = feed_next;
	feed.done = feed_done;
	feed.need = feed_need;
	feed.ctl = feed_ctl;
	feed.ctl_fd = r->epfd;
	/* A regular file or /dev/null never makes a read wait. */
	feed.in_fd = r->in.rd.pollable ? r->in.rd.fd : -1;
	feed.arg = r;
	r->t0 = gp_now_ns();
	r->out_on = 1;
	out_bar_draw(r, 1);
	coord_dispatch(r);
	rc = gp_pool_run(pool, r->fn, conf, sizeof(*conf), &feed);
	if (rc < 0) {
		out_err("%s", gp_strerror(rc));
		r->fatal = 1;
	}
	if (r->npeer > 1) {
		/* Canceled: what the other ranks still run ends there and
		 * is recorded here. */
		feed_ranks_ctl(r, r->nlost ? RC_END_LOST : RC_END);
		(void)ranks_wait(r, 1);
	}
}

/* After rank 0's run: the summary, then what stdout and stderr hold. */
static void
run_end(struct run *r)
{
	const struct opts	*o = r->o;

	order_flush(r);		/* -k: what ended, in order, gaps and all */
	out_summary(r);
	if (r->sig && r->stopped && o->joblog != NULL && !o->quiet)
		out_err("%lu stopped task%s recorded with signal %d: "
		    "--resume-failed runs %s again", r->stopped,
		    r->stopped == 1 ? " is" : "s are", SIGTERM,
		    r->stopped == 1 ? "it" : "them");
	out_drain(r);
}

int
run_tasks(struct run *r)
{
	struct run_conf		 conf;
	struct gp_pool		*pool = NULL;
	int			 rc;

	if (run_setup(r, &conf, &pool) < 0)
		goto fail;
	if (ranks_rank(r->rk) > 0) {
		rc = rank_serve(r, pool, &conf);
		r->pool = NULL;
		gp_pool_destroy(pool);
		if (conf.results_fd >= 0)
			close(conf.results_fd);
		return rc;
	}
	/* Every rank's pool is up before anything runs or the joblog is
	 * touched, as with a bad --gpus on one machine. */
	if (r->npeer > 1 && (ranks_wait(r, 0) < 0 || !coord_all_hello(r))) {
		if (r->sig)
			out_err("got SIG%s while the ranks started",
			    sigabbrev_np(r->sig));
		goto fail;
	}
	/* Only now that the GPUs are known good is an old joblog
	 * truncated (workers closed their copy: worker_init()). */
	if (joblog_start(r) < 0)
		goto fail;
	run_feed(r, pool, &conf);
	feed_requeue_fail(r);	/* canceled before a retry */
	r->pool = NULL;
	gp_pool_destroy(pool);
	run_end(r);
	if (conf.results_fd >= 0)
		close(conf.results_fd);
	return exit_code(r);

fail:
	/* Rank 0 stops the run when a rank could not start. */
	if (ranks_rank(r->rk) > 0)
		(void)rank_serve(r, NULL, &conf);
	/* Nothing ran: the joblog this run created goes first, before the
	 * workers' shutdown (seconds, under a sanitizer), during which the
	 * launcher may already kill this rank for the one that failed. */
	joblog_release(&r->jl);
	r->pool = NULL;
	gp_pool_destroy(pool);
	if (conf.results_fd >= 0)
		close(conf.results_fd);
	return EXIT_FATAL;
}

int
run_ranks_end(struct run *r, int rc)
{
	int	 clean;

	if (r->rk == NULL)
		return rc;
	if (ranks_rank(r->rk) == 0 && !r->ended)
		feed_ranks_ctl(r, RC_END);	/* the others wait for word */
	clean = r->nlost == 0;
	if (ranks_rank(r->rk) == 0 && !clean && !r->o->quiet)
		out_err("a rank was lost: ending the MPI job (exit status %d)",
		    rc);
	if (ranks_end(r->rk, clean, rc) < 0 && clean && rc == 0)
		rc = EXIT_FATAL;
	r->rk = NULL;
	return rc;
}

void
run_init(struct run *r, const struct opts *o)
{
	memset(r, 0, sizeof(*r));
	r->o = o;
	r->fn = spawn_task;
	r->total = -1;
	r->halt_rc = -1;
	r->sfd = r->epfd = r->tfd = r->rlock = r->dfd = -1;
	r->live.rfd = r->live.wfd = -1;
	r->oq.fd = STDOUT_FILENO;
	r->oq.ev = EV_OUT;
	r->eq.fd = STDERR_FILENO;
	r->eq.ev = EV_ERR;
	r->halt = feed_halt_start;
	r->ord.next = 1;
	joblog_init(&r->jl);
}

static void
peer_release(struct peer *p)
{
	int	 g;

	for (g = 0; g < p->ngpu && p->gpu_id != NULL; g++)
		free(p->gpu_id[g]);
	free(p->gpu_id);
	free(p->w_gpu);
	free(p->busy_ns);
	free(p->host);
}

void
run_release(struct run *r)
{
	struct task	*t;
	int		 i;

	out_detach(r);
	gp_buf_release(&r->oq.buf);
	gp_buf_release(&r->eq.buf);
	tasks_close(&r->in);
	joblog_release(&r->jl);
	live_release(r);
	if (r->rlock >= 0)
		close(r->rlock);
	if (r->sfd >= 0)
		close(r->sfd);
	if (r->epfd >= 0)
		close(r->epfd);
	if (r->tfd >= 0)
		close(r->tfd);
	if (r->dfd >= 0)
		close(r->dfd);
	median_release(&r->ok_rt);
	for (i = 0; i < r->npeer; i++)
		peer_release(&r->peer[i]);
	free(r->peer);
	r->peer = NULL;
	r->npeer = 0;
	while ((t = r->free) != NULL) {
		r->free = t->next;
		free(t->buf);
		free(t);
	}
}
