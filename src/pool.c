/*
 * pool.c: the public API. Creates a pool (GPUs, topology, placement,
 * workers), runs map and stream calls through loop.c, and destroys it.
 * It never prints, exits or touches signals; errors come back as codes,
 * and gp_pool_create() explains them in the caller's errbuf.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

static void
describe(struct gp_pool *p, struct gp_worker *w)
{
	struct gp_worker_info	*i = &w->info;
	const struct gp_gpu	*g = &p->gpus[w->home[0]];
	unsigned		 f = w->place.flags;
	size_t			 at;
	int			 k;

	snprintf(i->visible, sizeof(i->visible), "%s", g->visible);
	for (k = 1, at = strlen(i->visible); k < w->nhome &&
	    at < sizeof(i->visible); k++)
		at += (size_t)snprintf(i->visible + at, sizeof(i->visible) - at,
		    ",%s", p->gpus[w->home[k]].visible);
	snprintf(i->uuid, sizeof(i->uuid), "%s", g->uuid);
	snprintf(i->busid, sizeof(i->busid), "%s", g->busid);
	snprintf(i->name, sizeof(i->name), "%s", g->name);
	i->mem_bytes = g->mem_bytes;
	i->fake = g->fake;
	i->ngpus = w->nhome;
	i->numa = w->place.numa;
	gp_topo_list(i->cpuset, sizeof(i->cpuset), w->place.cpuset);
	gp_topo_list(i->nodeset, sizeof(i->nodeset), w->place.nodeset);
	snprintf(i->where, sizeof(i->where), "%s%s",
	    (f & GP_PLACE_NOBUSID) ? "machine: no bus id" :
	    (f & GP_PLACE_NOTFOUND) ? "machine: bus id not in topology" :
	    (f & GP_PLACE_EMPTY) ? "machine: GPU locality has no CPU" :
	    (f & GP_PLACE_MACHINE) ? "machine: GPU is local to all" :
	    "gpu-local", (f & GP_PLACE_SHARED) ? ", shared cores" : "");
}

/* Workers are numbered set-first (worker i owns GPU set i % ngrp: one
 * GPU, or gpus_per_worker near ones), so a few items spread over GPUs
 * before doubling up; placement is computed set-major so one set's
 * workers get neighbouring cores, on its first GPU's locality widened by
 * the others'. */
static int
place(struct gp_pool *p)
{
	const char	**bus;
	struct gp_place	*pl;
	int		 i, j, g, s, k = p->o.per_gpu, rc;
	int		 per = p->o.gpus_per_worker;

	bus = calloc((size_t)(p->nw > per ? p->nw : per), sizeof(*bus));
	pl = calloc((size_t)p->nw, sizeof(*pl));
	if (bus == NULL || pl == NULL) {
		free(bus);
		free(pl);
		return -ENOMEM;
	}
	for (g = 0; g < p->ngrp; g++)
		for (s = 0; s < k; s++)
			bus[g * k + s] = p->gpus[p->grp[g * per]].busid;
	rc = gp_topo_place(p->topo, bus, p->nw, pl);
	for (i = 0; i < p->nw && rc == 0; i++) {
		struct gp_worker *w = &p->w[i];

		g = i % p->ngrp;
		s = i / p->ngrp;
		w->idx = i;
		w->fd = w->wfd = w->tfd = w->pidfd = -1;
		w->home = &p->grp[g * per];
		w->nhome = per;
		w->info.worker = i;
		w->info.gpu = w->home[0];
		w->info.slot = s;
		w->place = pl[g * k + s];
		pl[g * k + s].cpuset = pl[g * k + s].nodeset = NULL;
		for (j = 0; j < per; j++)
			bus[j] = p->gpus[w->home[j]].busid;
		rc = gp_topo_widen(p->topo, &w->place, bus, per);
		describe(p, w);
	}
	for (i = 0; i < p->nw; i++)
		gp_place_release(&pl[i]);
	free(bus);
	free(pl);
	return rc;
}

static void
pool_free(struct gp_pool *p)
{
	int	 i;

	for (i = 0; i < p->nw && p->w != NULL; i++) {
		gp_place_release(&p->w[i].place);
		gp_buf_release(&p->w[i].rbuf);
		gp_buf_release(&p->w[i].wbuf);
		gp_data_forget(&p->w[i]);
		free(p->w[i].fl);
	}
	if (p->shm != NULL)
		munmap(p->shm, p->shmlen);
	gp_exec_release(p);
	if (p->w != NULL)
		gp_data_unmap(p);
	if (p->topo != NULL)
		hwloc_topology_destroy(p->topo);
	gp_loop_release(p);
	gp_watch_release(p);
	gp_hold_release(p);
	free(p->w);
	free(p->gpus);
	free(p->xml);
	free(p);
}

/* Why the first failed worker failed, for errbuf. */
static void
init_reason(struct gp_pool *p, char *err, size_t errlen)
{
	struct gp_worker	*w;
	int			 i, c;

	for (i = 0; i < p->nw; i++) {
		w = &p->w[i];
		if (!w->retired)
			continue;
		if (w->ready.init_rc)
			gp_errf(err, errlen, 0, "worker %d (GPU %s): initialiser "
			    "returned %d", i, w->info.visible, w->ready.init_rc);
		else if (w->ready.cuda_rc)
			gp_errf(err, errlen, 0, "worker %d (GPU %s): CUDA "
			    "context failed (cudaError %d)", i, w->info.visible,
			    w->ready.cuda_rc);
		else if (w->ready.step)	/* a start-up step (wstart.c) */
			gp_errf(err, errlen, 0, "worker %d (GPU %s): %.*s", i,
			    w->info.visible, (int)sizeof(w->ready.why),
			    w->ready.why);
		else if (w->ready.fatal)
			gp_errf(err, errlen, 0, "worker %d (GPU %s): binding to "
			    "CPUs %s failed: %s", i, w->info.visible,
			    w->info.cpuset, strerror(-(w->ready.cpubind_rc ?
			    w->ready.cpubind_rc : w->ready.membind_rc)));
		else if (p->xp != NULL && (c = gp_wstatus_code(w->status)) ==
		    GP_EXIT_VERSION)
			gp_errf(err, errlen, 0, "worker %d (GPU %s): '%s' is not "
			    "a worker of this gpupool (%s): it speaks another "
			    "protocol or library version (exit %d)", i,
			    w->info.visible, p->xp->argv[0], GP_VERSION, c);
		else if (p->xp != NULL && c == GP_EXIT_EXEC)
			gp_errf(err, errlen, 0, "worker %d (GPU %s): cannot "
			    "exec '%s' (exit %d)", i, w->info.visible,
			    p->xp->argv[0], c);
		else if ((c = gp_wstatus_code(w->status)) < 0)
			gp_errf(err, errlen, 0, "worker %d (GPU %s): ended "
			    "while starting (exit status unknown: SIGCHLD is "
			    "ignored)", i, w->info.visible);
		else if (c > 128)
			gp_errf(err, errlen, 0, "worker %d (GPU %s): killed by "
			    "signal %d (%s) while starting", i, w->info.visible,
			    c - 128, strsignal(c - 128));
		else
			gp_errf(err, errlen, 0, "worker %d (GPU %s): exited "
			    "with status %d while starting", i, w->info.visible,
			    c);
		return;
	}
}

/*
 * The public structs' sizes are the ABI (on LP64): a field added later
 * takes the place of reserved ones, so these never change. (gp_pool_opts
 * grew once, from 176 bytes, when its reserved words had run out: soname
 * libgpupool.so.1.)
 */
#if UINTPTR_MAX == UINT64_MAX
_Static_assert(sizeof(struct gp_pool_opts) == 256, "gp_pool_opts size");
_Static_assert(sizeof(struct gp_item) == 48, "gp_item size");
_Static_assert(sizeof(struct gp_feed) == 80, "gp_feed size");
_Static_assert(sizeof(struct gp_worker_info) == 768, "gp_worker_info size");
#endif

/* Decide the GPUs, load the topology and place every worker: all a
 * GP_POOL_PLAN_ONLY pool does. */
static int
plan(struct gp_pool *p, char *err, size_t errlen)
{
	int	 i, rc, pci;

	if ((rc = gp_gpu_resolve(&p->o, &p->gpus, err, errlen)) < 0) {
		if (rc == GP_ENOGPU)
			gp_watch_nogpu(p, err, errlen);
		return rc;
	}
	p->ngpus = rc;
	for (i = pci = 0; i < p->ngpus; i++)
		pci |= p->gpus[i].busid[0] != '\0';
	if ((rc = gp_topo_load(&p->topo, p->xml, pci, err, errlen)) < 0 ||
	    (rc = gp_watch_plan(p, err, errlen)) < 0)
		return rc;
	if ((long)p->ngrp * p->o.per_gpu > GP_MAX_WORKERS)
		return gp_errf(err, errlen, -EINVAL, "%d GPUs x %d per GPU is "
		    "over %d workers", p->ngrp, p->o.per_gpu, GP_MAX_WORKERS);
	p->nw = p->ngrp * p->o.per_gpu;
	p->respawns = p->o.respawn_max < 0 ? -1 : p->o.respawn_max > 0 ?
	    p->o.respawn_max : GP_DEFAULT_RESPAWN * p->nw;
	if ((p->w = calloc((size_t)p->nw, sizeof(*p->w))) == NULL)
		return -ENOMEM;
	for (i = 0; i < p->nw; i++)
		p->w[i].regfd = -1;
	if ((rc = place(p)) < 0)
		return rc;
	return gp_watch_init(p);
}

/* The monitor's first sample in, if asked for and not yet, and the
 * claims' GPU sizes from it. */
static void
first_sample(struct gp_pool *p)
{
	gp_watch_first(p);
	gp_hold_sizes(p);
}

/* Map the shared page, fork every worker and wait for each READY. On
 * failure the caller shuts down whatever was started. */
static int
start(struct gp_pool *p, char *err, size_t errlen)
{
	int	 i, rc;

	if ((rc = gp_hold_start(p, err, errlen)) < 0)
		return rc;
	if (rc > 0) {
		/* A life claim is taken with the GPUs' sizes the first
		 * sample gives: it cannot wait for the workers' start. */
		first_sample(p);
		if ((rc = gp_hold_life(p, err, errlen)) < 0)
			return rc;
	}
	p->shmlen = (size_t)p->nw * sizeof(struct gp_shm);
	p->shm = gp_data_shared(p, p->shmlen, 0, p->xp ? &p->xp->shmfd : &i);
	if (p->shm == MAP_FAILED) {
		p->shm = NULL;
		return gp_errf(err, errlen, -errno, "mmap: %s",
		    strerror(errno));
	}
	for (i = 0; i < p->nw; i++)
		p->w[i].shm = &p->shm[i];
	gp_data_map(p);
	for (i = 0; i < p->nw; i++)
		if ((rc = gp_proc_spawn(p, &p->w[i])) < 0)
			return gp_errf(err, errlen, rc, "cannot start worker "
			    "%d: %s", i, strerror(-rc));
	if ((rc = gp_loop_wait_ready(p)) < 0) {
		if (rc == GP_EINIT)
			init_reason(p, err, errlen);
		return rc;
	}
	/* Else the monitor's first answer, asked for in plan(), came
	 * while the workers started: in before any item is placed. */
	first_sample(p);
	return 0;
}

int
gp_pool_create(struct gp_pool **out, const struct gp_pool_opts *opts)
{
	struct gp_pool		*p;
	char			*err = opts ? opts->errbuf : NULL;
	size_t			 errlen = opts ? opts->errlen : 0;
	int			 rc;

	*out = NULL;
	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if ((p = calloc(1, sizeof(*p))) == NULL)
		return -ENOMEM;
	/* Before anything can fail: pool_free() closes the monitor's fds,
	 * and 0 is the caller's standard input. */
	p->wt.mon.fd = p->wt.mon.pidfd = -1;
	p->master = getpid();
	if ((rc = gp_opts_load(p, opts, err, errlen)) < 0 ||
	    (rc = plan(p, err, errlen)) < 0 ||
	    (rc = gp_exec_prepare(p, err, errlen)) < 0)
		goto fail;
	if (p->o.flags & GP_POOL_PLAN_ONLY) {
		*out = p;
		return 0;
	}
	if ((rc = start(p, err, errlen)) < 0) {
		gp_proc_shutdown(p);
		goto fail;
	}
	*out = p;
	return 0;

fail:
	pool_free(p);
	return rc;
}

void
gp_pool_destroy(struct gp_pool *p)
{
	int	 i;

	if (p == NULL)
		return;
	if (getpid() == p->master)
		gp_proc_shutdown(p);
	else {	/* a forked copy: the workers are not ours to stop */
		for (i = 0; i < p->nw; i++)
			gp_proc_close_fds(&p->w[i]);
		gp_watch_forget(p);	/* nor the monitor */
	}
	pool_free(p);
}

int
gp_pool_size(const struct gp_pool *p)
{
	return p->nw;
}

int
gp_pool_info(const struct gp_pool *p, int worker, struct gp_worker_info *out)
{
	if (worker < 0 || worker >= p->nw)
		return -EINVAL;
	*out = p->w[worker].info;
	out->pid = p->w[worker].pid;	/* 0 while it is not running */
	return 0;
}

static int
run_job(struct gp_pool *p, struct gp_job *job, gp_fn *fn, const void *arg,
    size_t arglen)
{
	int	 rc;

	/* arg goes in one message, and no message is over the window. */
	if (fn == NULL || (arglen && arg == NULL) || arglen > p->o.window)
		return -EINVAL;
	job->fn = fn;
	job->arg = arg;
	job->arglen = arglen;
	if (p->o.flags & GP_POOL_PLAN_ONLY)
		return GP_EPLAN;
	if (getpid() != p->master)
		return -ECHILD;
	/* One call per pool at a time, whichever thread makes it: of the
	 * calls that find the pool idle at once, the compare-and-swap lets
	 * exactly one install its job; the others see it and get -EBUSY. */
	if (!__atomic_compare_exchange_n(&p->job, &(struct gp_job *){ NULL },
	    job, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return -EBUSY;
	job->gen = ++p->gen;
	/* An exec'd worker finds fn by its module, not its address. */
	if (p->xp != NULL && (rc = gp_exec_fn(p, fn)) < 0) {
		__atomic_store_n(&p->job, NULL, __ATOMIC_RELEASE);
		return rc;
	}
	rc = gp_loop_run(p, job);
	/* Not an end the loop reached with nothing in flight: the call
	 * failed, and the pool must not keep pointers into its items. */
	if (rc < 0 && rc != GP_ENOWORKER && rc != -EDEADLK)
		gp_loop_abandon(p, job, rc);
	free(job->requeue);
	__atomic_store_n(&p->job, NULL, __ATOMIC_RELEASE);
	return rc;
}

/* Every item reads GP_NOTRUN until it ends, whatever the call returns.
 * out is not read: results of an earlier call are the caller's to free,
 * or, with keep_out (GP_POOL_OUT_BUFFERS), out and outlen are the
 * caller's buffer and its room. Returns -EINVAL for bytes that are not
 * there. */
static int
items_init(struct gp_item *items, size_t n, int keep_out)
{
	size_t	 i;
	int	 rc = 0;

	if (n > 0 && items == NULL)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		gp_job_item_init(&items[i], keep_out);
		if (gp_job_item_check(&items[i], keep_out) < 0)
			rc = -EINVAL;
	}
	return rc;
}

/* gp_pool_map() on items that items_init() accepted. */
static int
map_items(struct gp_pool *p, gp_fn *fn, const void *arg, size_t arglen,
    struct gp_item *items, size_t n)
{
	struct gp_job	 job = { 0 };

	job.items = items;
	job.n = n;
	job.outbufs = (p->o.flags & GP_POOL_OUT_BUFFERS) != 0;
	return run_job(p, &job, fn, arg, arglen);
}

int
gp_pool_map(struct gp_pool *p, gp_fn *fn, const void *arg,
    size_t arglen, struct gp_item *items, size_t n)
{
	int	 rc;

	if (p == NULL || (p->o.flags & GP_POOL_OUT_VIEW))
		return -EINVAL;
	if ((rc = items_init(items, n,
	    (p->o.flags & GP_POOL_OUT_BUFFERS) != 0)) < 0)
		return rc;
	return map_items(p, fn, arg, arglen, items, n);
}

int
gp_pool_run(struct gp_pool *p, gp_fn *fn, const void *arg,
    size_t arglen, const struct gp_feed *feed)
{
	struct gp_job	 job = { 0 };

	if (feed == NULL || feed->next == NULL || feed->done == NULL ||
	    !gp_opts_zeroed(feed->reserved, sizeof(feed->reserved) /
	    sizeof(feed->reserved[0])))
		return -EINVAL;
	job.feed = feed;
	job.outbufs = (p->o.flags & GP_POOL_OUT_BUFFERS) != 0;
	job.outview = (p->o.flags & GP_POOL_OUT_VIEW) != 0;
	return run_job(p, &job, fn, arg, arglen);
}

void
gp_item_init(struct gp_item *it, const void *in, size_t inlen)
{
	memset(it, 0, sizeof(*it));
	it->in = in;
	it->inlen = inlen;
	gp_job_item_init(it, 0);
}

void
gp_items_release(struct gp_item *items, size_t n)
{
	size_t	 i;

	for (i = 0; i < n; i++) {
		free(items[i].out);
		items[i].out = NULL;
		items[i].outlen = 0;
	}
}

const char *
gp_strerror(int code)
{
	switch (code) {
	case 0:
		return "success";
	case GP_ENOGPU:
		return "no GPU found (give GPU ids or fake GPUs)";
	case GP_EINIT:
		return "a worker failed to start (initialiser, binding or CUDA)";
	case GP_ENOWORKER:
		return "every worker is gone (respawn budget spent)";
	case GP_EPLAN:
		return "the pool was created with GP_POOL_PLAN_ONLY";
	case -ECHILD:
		return "pool used from a process that did not create it";
	case -EBUSY:
		return "pool already running a map (called from fn?)";
	case -EDEADLK:
		return "feed has no item ready, no in_fd and nothing running";
	case -EMSGSIZE:
		return "item or result larger than max_msg";
	case -EPROTO:
		return "worker broke the wire protocol";
	}
	if (code < 0 && code > -4096)
		return strerror(-code);
	return "unknown gpupool error";
}

const char *
gp_item_strerror(const struct gp_item *it, char *buf, size_t len)
{
	int	 c = it->code;

	switch (it->status) {
	case GP_OK:
		snprintf(buf, len, "ok");
		break;
	case GP_FAILED:
		snprintf(buf, len, "failed (fn returned %d)", c);
		break;
	case GP_CRASHED:
		if (c > 128)
			snprintf(buf, len, "crashed (worker killed by signal "
			    "%d: %s)", c - 128, strsignal(c - 128));
		else if (c < 0)
			snprintf(buf, len, "crashed (worker's exit status "
			    "unknown: SIGCHLD is ignored)");
		else
			snprintf(buf, len, "crashed (worker exited with "
			    "status %d)", c);
		break;
	case GP_TIMEDOUT:
		snprintf(buf, len, "timed out");
		break;
	case GP_CANCELED:
		snprintf(buf, len, "canceled");
		break;
	case GP_ERROR:
		snprintf(buf, len, "error: %s", gp_strerror(c));
		break;
	default:
		snprintf(buf, len, "not run");
		break;
	}
	return buf;
}

/*
 * The default pool of pool_map(). deflock serialises every use of it, so
 * threads may call pool_map() at once: one creates the pool, each map runs
 * whole, in turn. Why a call failed is the calling thread's own (as errno).
 */
static pthread_mutex_t		 deflock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic pid_t		 deflock_pid;	/* process holding it, or 0 */
static struct gp_pool		*defpool;
static _Thread_local char	 deferr[256];

/* Workers are forked while deflock is held (creation, respawns), and an
 * application may fork while one of its threads holds it: such a child's
 * copy is locked by a thread it does not have. deflock_pid tells: in the
 * process that holds it, it is getpid() or 0; in such a child, the
 * parent's pid, and the child starts a fresh lock. */
static void
deflock_take(void)
{
	pid_t	 me = getpid(), holder = atomic_load(&deflock_pid);

	if (holder != 0 && holder != me) {
		pthread_mutex_init(&deflock, NULL);
		atomic_store(&deflock_pid, 0);
	}
	pthread_mutex_lock(&deflock);
	atomic_store(&deflock_pid, me);
}

static void
deflock_drop(void)
{
	atomic_store(&deflock_pid, 0);
	pthread_mutex_unlock(&deflock);
}

int
pool_map(gp_fn *fn, struct gp_item *items, size_t n)
{
	struct gp_pool_opts	 o = { .errbuf = deferr,
				       .errlen = sizeof(deferr) };
	int			 rc;

	deferr[0] = '\0';
	/* Items first: they read GP_NOTRUN even if no pool can be made. */
	if ((rc = items_init(items, n, 0)) < 0)
		goto out;
	deflock_take();
	if (defpool != NULL && getpid() != defpool->master) {
		gp_pool_destroy(defpool);	/* only closes fds */
		defpool = NULL;
	}
	if (defpool != NULL || (rc = gp_pool_create(&defpool, &o)) == 0)
		rc = map_items(defpool, fn, NULL, 0, items, n);
	deflock_drop();
out:
	if (rc < 0 && deferr[0] == '\0')
		snprintf(deferr, sizeof(deferr), "%s", gp_strerror(rc));
	return rc;
}

const char *
gp_last_error(void)
{
	return deferr;
}

void
gp_default_pool_destroy(void)
{
	deflock_take();
	gp_pool_destroy(defpool);
	defpool = NULL;
	deflock_drop();
}
