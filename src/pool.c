/*
 * pool.c: the public API. Creates a pool (GPUs, topology, placement,
 * workers), runs map and stream calls through loop.c, and destroys it.
 * It never prints, exits or touches signals; errors come back as codes,
 * and gp_pool_create() explains them in the caller's errbuf.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

void
gp_bug(const char *file, int line, const char *msg)
{
	fprintf(stderr, "gpupool: BUG at %s:%d: %s\n", file, line, msg);
	abort();
}

int
gp_errf(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list	 ap;

	if (err != NULL && errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

static int
env_int(const char *name, int *out, char *err, size_t errlen)
{
	const char	*s = getenv(name);
	char		*end;
	long		 v;

	if (s == NULL || *s == '\0')
		return 0;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end != '\0' || v < 0 || v > GP_MAX_WORKERS)
		return gp_errf(err, errlen, -EINVAL,
		    "%s='%s' is not a GPU count (0..%d)", name, s,
		    GP_MAX_WORKERS);
	*out = (int)v;
	return 0;
}

static void
describe(struct gp_worker *w, const struct gp_gpu *g)
{
	struct gp_worker_info	*i = &w->info;
	unsigned		 f = w->place.flags;

	snprintf(i->visible, sizeof(i->visible), "%s", g->visible);
	snprintf(i->uuid, sizeof(i->uuid), "%s", g->uuid);
	snprintf(i->busid, sizeof(i->busid), "%s", g->busid);
	snprintf(i->name, sizeof(i->name), "%s", g->name);
	i->mem_bytes = g->mem_bytes;
	i->fake = g->fake;
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

/* Workers are numbered GPU-first (worker i runs on GPU i % ngpus), so a
 * few items spread over GPUs before doubling up; placement is computed
 * GPU-major so one GPU's workers get neighbouring cores. */
static int
place(struct gp_pool *p)
{
	const char	**bus;
	struct gp_place	*pl;
	int		 i, g, s, k = p->o.per_gpu, rc;

	bus = calloc((size_t)p->nw, sizeof(*bus));
	pl = calloc((size_t)p->nw, sizeof(*pl));
	if (bus == NULL || pl == NULL) {
		free(bus);
		free(pl);
		return -ENOMEM;
	}
	for (g = 0; g < p->ngpus; g++)
		for (s = 0; s < k; s++)
			bus[g * k + s] = p->gpus[g].busid;
	if ((rc = gp_topo_place(p->topo, bus, p->nw, pl)) == 0) {
		for (i = 0; i < p->nw; i++) {
			struct gp_worker *w = &p->w[i];

			g = i % p->ngpus;
			s = i / p->ngpus;
			w->idx = i;
			w->fd = w->wfd = w->tfd = w->pidfd = -1;
			w->info.worker = i;
			w->info.gpu = g;
			w->info.slot = s;
			w->place = pl[g * k + s];
			describe(w, &p->gpus[g]);
		}
	}
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
		free(p->w[i].fl);
	}
	if (p->shm != NULL)
		munmap(p->shm, p->shmlen);
	if (p->topo != NULL)
		hwloc_topology_destroy(p->topo);
	gp_loop_release(p);
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
		else if (w->ready.fatal)
			gp_errf(err, errlen, 0, "worker %d (GPU %s): binding to "
			    "CPUs %s failed: %s", i, w->info.visible,
			    w->info.cpuset, strerror(-(w->ready.cpubind_rc ?
			    w->ready.cpubind_rc : w->ready.membind_rc)));
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

int
gp_pool_create(struct gp_pool **out, const struct gp_pool_opts *opts)
{
	static const struct gp_pool_opts	 none;
	struct gp_pool		*p;
	const char		*xml;
	char			*err = opts ? opts->errbuf : NULL;
	size_t			 errlen = opts ? opts->errlen : 0;
	int			 i, rc, pci;

	*out = NULL;
	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if ((p = calloc(1, sizeof(*p))) == NULL)
		return -ENOMEM;
	p->o = opts ? *opts : none;
	p->master = getpid();
	if (p->o.per_gpu < 0 || p->o.fake_gpus < 0 || p->o.retries < 0 ||
	    ((p->o.flags & GP_POOL_CANCEL_FD) && p->o.cancel_fd < 0)) {
		rc = gp_errf(err, errlen, -EINVAL, "negative count or fd in "
		    "pool options");
		goto fail;
	}
	if (p->o.per_gpu == 0)
		p->o.per_gpu = 1;
	if (p->o.grace_ms == 0)
		p->o.grace_ms = GP_DEFAULT_GRACE_MS;
	if (p->o.max_msg == 0)
		p->o.max_msg = GP_DEFAULT_MAX_MSG;
	if (p->o.max_msg > UINT32_MAX - GP_MSG_OVERHEAD) {
		rc = gp_errf(err, errlen, -EINVAL, "max_msg over 4 GiB");
		goto fail;
	}
	if (p->o.fake_gpus == 0 &&
	    (rc = env_int("GPUPOOL_FAKE_GPUS", &p->o.fake_gpus, err,
	    errlen)) < 0)
		goto fail;
	xml = p->o.topology_xml ? p->o.topology_xml : getenv("GPUPOOL_TOPOLOGY");
	if (xml != NULL && *xml != '\0' && (p->xml = strdup(xml)) == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	p->o.topology_xml = p->xml;

	if ((rc = gp_gpu_resolve(&p->o, &p->gpus, err, errlen)) < 0)
		goto fail;
	p->ngpus = rc;
	if ((long)p->ngpus * p->o.per_gpu > GP_MAX_WORKERS) {
		rc = gp_errf(err, errlen, -EINVAL, "%d GPUs x %d per GPU is "
		    "over %d workers", p->ngpus, p->o.per_gpu, GP_MAX_WORKERS);
		goto fail;
	}
	p->nw = p->ngpus * p->o.per_gpu;
	p->respawns = p->o.respawn_max < 0 ? -1 : p->o.respawn_max > 0 ?
	    p->o.respawn_max : GP_DEFAULT_RESPAWN * p->nw;
	for (i = pci = 0; i < p->ngpus; i++)
		pci |= p->gpus[i].busid[0] != '\0';
	if ((rc = gp_topo_load(&p->topo, p->xml, pci, err, errlen)) < 0)
		goto fail;
	if ((p->w = calloc((size_t)p->nw, sizeof(*p->w))) == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	if ((rc = place(p)) < 0)
		goto fail;
	if (p->o.flags & GP_POOL_PLAN_ONLY) {
		*out = p;
		return 0;
	}

	p->shmlen = (size_t)p->nw * sizeof(struct gp_shm);
	p->shm = mmap(NULL, p->shmlen, PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p->shm == MAP_FAILED) {
		p->shm = NULL;
		rc = gp_errf(err, errlen, -errno, "mmap: %s", strerror(errno));
		goto fail;
	}
	for (i = 0; i < p->nw; i++)
		p->w[i].shm = &p->shm[i];
	for (i = 0; i < p->nw; i++)
		if ((rc = gp_proc_spawn(p, &p->w[i])) < 0) {
			gp_errf(err, errlen, rc, "cannot start worker %d: %s",
			    i, strerror(-rc));
			goto fail_workers;
		}
	if ((rc = gp_loop_wait_ready(p)) < 0) {
		if (rc == GP_EINIT)
			init_reason(p, err, errlen);
		goto fail_workers;
	}
	*out = p;
	return 0;

fail_workers:
	gp_proc_shutdown(p);
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
	else	/* a forked copy: the workers are not ours to stop */
		for (i = 0; i < p->nw; i++)
			gp_proc_close_fds(&p->w[i]);
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

	if (fn == NULL || (arglen && arg == NULL) || arglen > p->o.max_msg)
		return -EINVAL;
	job->fn = fn;
	job->arg = arg;
	job->arglen = arglen;
	if (p->o.flags & GP_POOL_PLAN_ONLY)
		return GP_EPLAN;
	if (getpid() != p->master)
		return -ECHILD;
	if (p->job != NULL)
		return -EBUSY;
	job->gen = ++p->gen;
	p->job = job;
	rc = gp_loop_run(p, job);
	/* Not an end the loop reached with nothing in flight: the call
	 * failed, and the pool must not keep pointers into its items. */
	if (rc < 0 && rc != GP_ENOWORKER && rc != -EDEADLK)
		gp_loop_abandon(p, job, rc);
	p->job = NULL;
	free(job->requeue);
	return rc;
}

/* Every item reads GP_NOTRUN until it ends, whatever the call returns.
 * out is not read: results of an earlier call are the caller's to free.
 * Returns -EINVAL for bytes that are not there. */
static int
items_init(struct gp_item *items, size_t n)
{
	size_t	 i;
	int	 rc = 0;

	if (n > 0 && items == NULL)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		gp_loop_item_init(&items[i]);
		if (items[i].in == NULL && items[i].inlen > 0)
			rc = -EINVAL;
	}
	return rc;
}

/* gp_map() on items that items_init() accepted. */
static int
map_items(struct gp_pool *p, gp_fn *fn, const void *arg, size_t arglen,
    struct gp_item *items, size_t n)
{
	struct gp_job	 job = { 0 };

	job.items = items;
	job.n = n;
	return run_job(p, &job, fn, arg, arglen);
}

int
gp_map(struct gp_pool *p, gp_fn *fn, const void *arg, size_t arglen,
    struct gp_item *items, size_t n)
{
	int	 rc;

	if ((rc = items_init(items, n)) < 0)
		return rc;
	return map_items(p, fn, arg, arglen, items, n);
}

int
gp_run(struct gp_pool *p, gp_fn *fn, const void *arg, size_t arglen,
    const struct gp_feed *feed)
{
	struct gp_job	 job = { 0 };

	if (feed == NULL || feed->next == NULL || feed->done == NULL)
		return -EINVAL;
	job.feed = feed;
	return run_job(p, &job, fn, arg, arglen);
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

/* The default pool of pool_map(), and why the last call failed. */
static struct gp_pool	*defpool;
static char		 deferr[256];

int
pool_map(gp_fn *fn, struct gp_item *items, size_t n)
{
	struct gp_pool_opts	 o = { .errbuf = deferr,
				       .errlen = sizeof(deferr) };
	int			 rc;

	deferr[0] = '\0';
	if (defpool != NULL && getpid() != defpool->master) {
		gp_pool_destroy(defpool);	/* only closes fds */
		defpool = NULL;
	}
	/* Items first: they read GP_NOTRUN even if no pool can be made. */
	if ((rc = items_init(items, n)) == 0 && (defpool != NULL ||
	    (rc = gp_pool_create(&defpool, &o)) == 0))
		rc = map_items(defpool, fn, NULL, 0, items, n);
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
gp_shutdown(void)
{
	gp_pool_destroy(defpool);
	defpool = NULL;
}
