/*
 * nvml.c: one snapshot of the pool's GPUs from NVML, for the monitor
 * child (mon.c) and only there: nothing here runs in the master, which
 * must never load NVML (design.md, invariant 1). The library is
 * dlopened on the first snapshot, $GPUPOOL_NVML or libnvidia-ml.so.1,
 * with the entry points nvml.h declares; without it, or when
 * nvmlInit_v2() fails, each snapshot says why (ok 0, err). A GPU's
 * compute processes are told apart by walking /proc's ppid links up to
 * a worker's pid; a pid not in /proc (another pid namespace) is nobody's.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "mon.h"
#include "nvml.h"

#define NVML_DEFAULT	"libnvidia-ml.so.1"
#define NVML_DEPTH	64		/* ppid links walked to a worker */
/* NVML_ERROR_FUNCTION_NOT_FOUND: try the next process-list version. */
#define NVML_NOFUNC	13

/* The monitor's NVML, loaded on its first request. */
struct nvml {
	int			 state;		/* 0 not tried, 1 up, -1: err */
	char			 err[200];
	void			*lib;
	nvml_init_fn		*init;
	nvml_shutdown_fn	*shutdown;
	nvml_error_string_fn	*estr;
	nvml_handle_by_string_fn *by_uuid;
	nvml_handle_by_string_fn *by_busid;
	nvml_handle_by_index_fn	*by_index;
	nvml_memory_fn		*memory;
	nvml_utilization_fn	*util;
	nvml_procs_fn		*procs;		/* NULL: none in this NVML */
	const char		*procs_name;
	int			 procs_v;	/* index in proc_fns[] */
	nvml_proc_util_fn	*proc_util;	/* NULL: no SM % per process */
	uint8_t			*buf;		/* process list */
	unsigned		 cap;		/* entries of room there */
	nvmlProcessUtilizationSample_t *ubuf;
	unsigned		 ucap;
	unsigned long long	*last_ts;	/* per GPU: newest sample seen */
};

/* The one the monitor has: a process of its own, never the master. */
static struct nvml	 the_nvml;

/* The entry points every NVML since R450 has. */
static const struct {
	const char	*name;
	size_t		 off;
} nvml_syms[] = {
	{ "nvmlInit_v2", offsetof(struct nvml, init) },
	{ "nvmlShutdown", offsetof(struct nvml, shutdown) },
	{ "nvmlErrorString", offsetof(struct nvml, estr) },
	{ "nvmlDeviceGetHandleByUUID", offsetof(struct nvml, by_uuid) },
	{ "nvmlDeviceGetHandleByPciBusId_v2", offsetof(struct nvml, by_busid) },
	{ "nvmlDeviceGetHandleByIndex_v2", offsetof(struct nvml, by_index) },
	{ "nvmlDeviceGetMemoryInfo", offsetof(struct nvml, memory) },
	{ "nvmlDeviceGetUtilizationRates", offsetof(struct nvml, util) },
};

/*
 * The process lists, in the order tried: _v2 first, whose struct has
 * not changed since it came; _v3 took a longer struct under the same
 * name in drivers 535.43 to 535.86 (nvml.h), so it gets room for that
 * stride, and is read at the v2 stride that every other driver writes.
 */
static const struct {
	const char	*name;
	size_t		 stride;	/* bytes per entry NVML writes */
	size_t		 room;		/* bytes per entry given */
} proc_fns[] = {
	{ "nvmlDeviceGetComputeRunningProcesses_v2",
	    sizeof(nvmlProcessInfo_v2_t), sizeof(nvmlProcessInfo_v2_t) },
	{ "nvmlDeviceGetComputeRunningProcesses_v3",
	    sizeof(nvmlProcessInfo_v2_t), sizeof(nvmlProcessInfo_v2_t) + 8 },
	{ "nvmlDeviceGetComputeRunningProcesses",
	    sizeof(nvmlProcessInfo_v1_t), sizeof(nvmlProcessInfo_v1_t) },
};

static const char *
estr(const struct nvml *nv, nvmlReturn_t rc)
{
	const char	*s = nv->estr != NULL ? nv->estr(rc) : NULL;

	return s != NULL ? s : "unknown NVML error";
}

/* The first process-list version from i on that this NVML has. */
static void
procs_pick(struct nvml *nv, int i)
{
	void	*p = NULL;

	for (; i < (int)(sizeof(proc_fns) / sizeof(proc_fns[0])); i++)
		if ((p = dlsym(nv->lib, proc_fns[i].name)) != NULL)
			break;
	nv->procs = (nvml_procs_fn *)p;
	nv->procs_v = i;
	nv->procs_name = p != NULL ? proc_fns[i].name :
	    "nvmlDeviceGetComputeRunningProcesses";
	nv->cap = 0;
}

/* dlopen $GPUPOOL_NVML or libnvidia-ml.so.1, then nvmlInit_v2(): state
 * 1, or -1 with err naming the library and the reason. */
static void
nvml_load(struct nvml *nv, int n)
{
	const char	*path = getenv("GPUPOOL_NVML");
	nvmlReturn_t	 rc;
	void		*p;
	size_t		 i;

	if (path == NULL || *path == '\0')
		path = NVML_DEFAULT;
	nv->state = -1;
	if ((nv->last_ts = calloc((size_t)n, sizeof(*nv->last_ts))) == NULL) {
		snprintf(nv->err, sizeof(nv->err), "%s: out of memory", path);
		return;
	}
	if ((nv->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL) {
		snprintf(nv->err, sizeof(nv->err), "%s", dlerror());
		return;
	}
	for (i = 0; i < sizeof(nvml_syms) / sizeof(nvml_syms[0]); i++) {
		if ((p = dlsym(nv->lib, nvml_syms[i].name)) == NULL) {
			snprintf(nv->err, sizeof(nv->err), "%s: no %s", path,
			    nvml_syms[i].name);
			return;
		}
		memcpy((char *)nv + nvml_syms[i].off, &p, sizeof(p));
	}
	procs_pick(nv, 0);
	nv->proc_util = (nvml_proc_util_fn *)dlsym(nv->lib,
	    "nvmlDeviceGetProcessUtilization");
	if ((rc = nv->init()) != NVML_SUCCESS) {
		snprintf(nv->err, sizeof(nv->err), "%s: nvmlInit_v2: %s", path,
		    estr(nv, rc));
		return;
	}
	nv->state = 1;
}

/* "0000:b7:00.0" (cudart, hwloc) in NVML's form, "00000000:B7:00.0". */
static void
nvml_busid(const char *id, char *out, size_t len)
{
	unsigned	 d, b, s, f;

	if (sscanf(id, "%x:%x:%x.%x", &d, &b, &s, &f) == 4)
		snprintf(out, len, "%08X:%02X:%02X.%X", d, b, s, f);
	else
		snprintf(out, len, "%s", id);
}

/* Pool GPU i in NVML: by UUID, else by bus id, else (neither known)
 * NVML's device i. 0, or -1 with the reason in err. */
static int
gpu_handle(const struct nvml *nv, const struct gp_gpu *g, int i,
    nvmlDevice_t *dev, char *err, size_t len)
{
	nvmlReturn_t	 rc = NVML_ERROR_NOT_FOUND;
	char		 bus[32];

	if (g->uuid[0] && (rc = nv->by_uuid(g->uuid, dev)) == NVML_SUCCESS)
		return 0;
	if (g->busid[0]) {
		nvml_busid(g->busid, bus, sizeof(bus));
		if ((rc = nv->by_busid(bus, dev)) == NVML_SUCCESS)
			return 0;
		snprintf(err, len, "NVML has no GPU %s%s%s: %s", g->uuid,
		    g->uuid[0] ? " or " : "", bus, estr(nv, rc));
	} else if (g->uuid[0])
		snprintf(err, len, "NVML has no GPU %s: %s", g->uuid,
		    estr(nv, rc));
	else if ((rc = nv->by_index((unsigned)i, dev)) == NVML_SUCCESS)
		return 0;
	else
		snprintf(err, len, "NVML has no GPU %d: %s", i, estr(nv, rc));
	return -1;
}

/* The compute processes on dev into nv->buf, growing it while NVML says
 * it is too small; *count of them. */
static nvmlReturn_t
list_procs(struct nvml *nv, nvmlDevice_t dev, unsigned *count)
{
	nvmlReturn_t	 rc = NVML_NOFUNC;
	uint8_t		*nb;
	int		 tries;

	for (tries = 0; nv->procs != NULL && tries < 8; tries++) {
		*count = nv->cap;
		rc = nv->procs(dev, count, nv->cap ? nv->buf : NULL);
		if (rc == NVML_NOFUNC) {
			procs_pick(nv, nv->procs_v + 1);
			continue;
		}
		if (rc != NVML_ERROR_INSUFFICIENT_SIZE)
			break;
		/* More may start meanwhile: room for some. */
		nb = realloc(nv->buf, (*count + 16) * proc_fns[nv->procs_v].room);
		if (nb == NULL)
			break;
		nv->buf = nb;
		nv->cap = *count + 16;
	}
	if (rc == NVML_SUCCESS && *count > nv->cap)
		*count = nv->cap;
	return rc;
}

/* NVML's newest per-process samples on GPU gi since the last request,
 * in nv->ubuf; how many (0: none, or no such call). */
static unsigned
proc_samples(struct nvml *nv, nvmlDevice_t dev, int gi)
{
	nvmlProcessUtilizationSample_t	*nb;
	nvmlReturn_t			 rc;
	unsigned			 n = 0, k;

	if (nv->proc_util == NULL)
		return 0;
	rc = nv->proc_util(dev, NULL, &n, nv->last_ts[gi]);
	if ((rc != NVML_SUCCESS && rc != NVML_ERROR_INSUFFICIENT_SIZE) ||
	    n == 0)
		return 0;
	n += 8;
	if (n > nv->ucap) {
		if ((nb = realloc(nv->ubuf, n * sizeof(*nb))) == NULL)
			return 0;
		nv->ubuf = nb;
		nv->ucap = n;
	}
	if (nv->proc_util(dev, nv->ubuf, &n, nv->last_ts[gi]) != NVML_SUCCESS)
		return 0;
	if (n > nv->ucap)
		n = nv->ucap;
	for (k = 0; k < n; k++)
		if (nv->ubuf[k].timeStamp > nv->last_ts[gi])
			nv->last_ts[gi] = nv->ubuf[k].timeStamp;
	return n;
}

/* pid's SM %: its newest of the n samples, or -1. */
static int
sm_of(const struct nvml *nv, unsigned n, unsigned pid)
{
	unsigned long long	 ts = 0;
	unsigned		 k;
	int			 sm = -1;

	for (k = 0; k < n; k++)
		if (nv->ubuf[k].pid == pid &&
		    (sm < 0 || nv->ubuf[k].timeStamp >= ts)) {
			sm = (int)nv->ubuf[k].smUtil;
			ts = nv->ubuf[k].timeStamp;
		}
	return sm;
}

/* pid's parent from /proc/PID/stat ("pid (comm) state ppid ..."; comm
 * may hold spaces and parentheses), or -1: not in our pid namespace. */
static pid_t
ppid_of(pid_t pid)
{
	char	 path[64], buf[512], *p;
	ssize_t	 n;
	long	 pp;
	int	 fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	if ((p = strrchr(buf, ')')) == NULL ||
	    sscanf(p + 1, " %*c %ld", &pp) != 1)
		return -1;
	return (pid_t)pp;
}

/* The worker whose process tree holds pid (the worker itself, or a
 * descendant up to NVML_DEPTH links away), or -1. */
static int
owner(pid_t pid, const pid_t *pids, int nw)
{
	int	 d, i;

	for (d = 0; d < NVML_DEPTH && pid > 1; d++) {
		for (i = 0; i < nw; i++)
			if (pids[i] > 0 && pids[i] == pid)
				return i;
		pid = ppid_of(pid);
	}
	return -1;
}

/* GPU gi's compute processes into o, each with its owner. */
static void
gpu_procs(struct nvml *nv, nvmlDevice_t dev, int gi, const pid_t *pids,
    int nw, struct gp_mon_gpu *o)
{
	struct gp_mon_proc	*p;
	unsigned long long	 mem;
	unsigned		 count = 0, ns, k, pid;
	nvmlReturn_t		 rc;
	const uint8_t		*e;

	if ((rc = list_procs(nv, dev, &count)) != NVML_SUCCESS) {
		snprintf(o->err, sizeof(o->err), "%s: %s", nv->procs_name,
		    nv->procs != NULL ? estr(nv, rc) : "not in this NVML");
		return;
	}
	o->procs_known = 1;
	ns = proc_samples(nv, dev, gi);
	for (k = 0; k < count; k++) {
		if (o->nproc == GP_MON_PROCS) {
			o->more = 1;
			break;
		}
		/* pid and usedGpuMemory lead every version's struct. */
		e = nv->buf + k * proc_fns[nv->procs_v].stride;
		memcpy(&pid, e + offsetof(nvmlProcessInfo_v1_t, pid),
		    sizeof(pid));
		memcpy(&mem, e + offsetof(nvmlProcessInfo_v1_t, usedGpuMemory),
		    sizeof(mem));
		p = &o->proc[o->nproc++];
		p->pid = (int32_t)pid;
		p->mem = mem;	/* NVML_VALUE_NOT_AVAILABLE is UINT64_MAX */
		p->worker = owner((pid_t)pid, pids, nw);
		p->sm = sm_of(nv, ns, pid);
	}
}

static void
gpu_snap(struct nvml *nv, const struct gp_gpu *g, int gi, const pid_t *pids,
    int nw, struct gp_mon_gpu *o)
{
	nvmlUtilization_t	 ut;
	nvmlMemory_t		 mem;
	nvmlDevice_t		 dev;

	o->util = -1;
	if (gpu_handle(nv, g, gi, &dev, o->err, sizeof(o->err)) < 0)
		return;
	o->found = 1;
	if (nv->memory(dev, &mem) == NVML_SUCCESS) {
		o->total = mem.total;
		o->used = mem.used;
	}
	if (nv->util(dev, &ut) == NVML_SUCCESS)
		o->util = (int)ut.gpu;
	gpu_procs(nv, dev, gi, pids, nw, o);
}

void
gp_nvml_snapshot(const struct gp_gpu *g, int n, const pid_t *pids, int nw,
    struct gp_mon_snap *s)
{
	struct nvml	*nv = &the_nvml;
	int		 i;

	memset(s, 0, sizeof(*s) + (size_t)n * sizeof(s->gpu[0]));
	s->ngpu = n;
	if (nv->state == 0)
		nvml_load(nv, n);
	s->ok = nv->state > 0;
	if (!s->ok)
		snprintf(s->err, sizeof(s->err), "%s", nv->err);
	for (i = 0; i < n; i++) {
		if (s->ok)
			gpu_snap(nv, &g[i], i, pids, nw, &s->gpu[i]);
		else
			s->gpu[i].util = -1;
	}
	s->at_ns = gp_now_ns();
}

void
gp_nvml_close(void)
{
	if (the_nvml.state > 0)
		(void)the_nvml.shutdown();
	the_nvml.state = 0;
}
