/*
 * mon.c: the GPU monitor, the one process of a pool that loads NVML.
 * The master forks it before the workers (as gpu.c forks the probe) and
 * talks to it over a socketpair: a request (a header and the workers'
 * pids) goes down, one struct gp_mon_snap of m->snaplen bytes comes back.
 * The monitor dlopens libnvidia-ml.so.1 (or $GPUPOOL_NVML) on its first
 * request, so a pool that never asks never loads it; without NVML every
 * reply says why (ok 0, err) and the pool works as without a monitor.
 * The child dies with the master (PR_SET_PDEATHSIG, and EOF on its
 * channel), keeps only its channel (as fd 3) and 0-2, never runs user
 * code and leaves only by _exit(). The master side never blocks but in
 * gp_mon_sample() and in gp_mon_stop()'s reap of a SIGKILLed child.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "mon.h"
#include "nvml.h"

#define MON_MAGIC	0x51504d47u	/* "GMPQ": a request */
#define MON_MAX_PIDS	GP_MAX_WORKERS
#define MON_MAX_GPUS	GP_MAX_WORKERS
#define MON_DEPTH	64		/* ppid links walked to a worker */
#define MON_CHANNEL	3		/* the channel's fd in the monitor */
#define MON_NVML	"libnvidia-ml.so.1"
/* NVML_ERROR_FUNCTION_NOT_FOUND: try the next process-list version. */
#define MON_NVML_NOFUNC	13
/* P_PIDFD (Linux 5.4), spelled out for libcs that do not name it. */
#define MON_P_PIDFD	((idtype_t)3)

struct mon_req {
	uint32_t	 magic;
	int32_t		 nw;		/* pids that follow */
};

/* The monitor's NVML, loaded on the first request. */
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

static size_t
snap_len(int n)
{
	return sizeof(struct gp_mon_snap) + (size_t)n * sizeof(struct gp_mon_gpu);
}

/* ---- The monitor (child) ---- */

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
		path = MON_NVML;
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
	nvmlReturn_t	 rc = MON_NVML_NOFUNC;
	uint8_t		*nb;
	int		 tries;

	for (tries = 0; nv->procs != NULL && tries < 8; tries++) {
		*count = nv->cap;
		rc = nv->procs(dev, count, nv->cap ? nv->buf : NULL);
		if (rc == MON_NVML_NOFUNC) {
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
 * descendant up to MON_DEPTH links away), or -1. */
static int
owner(pid_t pid, const pid_t *pids, int nw)
{
	int	 d, i;

	for (d = 0; d < MON_DEPTH && pid > 1; d++) {
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

/* One snapshot of the n pool GPUs at g into s (snap_len(n) bytes). */
static void
snapshot(struct nvml *nv, const struct gp_gpu *g, int n, const pid_t *pids,
    int nw, struct gp_mon_snap *s)
{
	int	 i;

	memset(s, 0, snap_len(n));
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

/* Every fd from lo up: close_range(), else each one /proc lists. */
static void
close_from(int lo)
{
	struct dirent	*de;
	DIR		*d;
	int		 fd;

#ifdef SYS_close_range
	if (syscall(SYS_close_range, (unsigned)lo, ~0U, 0) == 0)
		return;
#endif
	if ((d = opendir("/proc/self/fd")) == NULL)
		return;
	while ((de = readdir(d)) != NULL)
		if ((fd = atoi(de->d_name)) >= lo && fd != dirfd(d))
			close(fd);
	closedir(d);
}

/* Dies with the master; no handler of the host's, nothing blocked (^C
 * is the master's to handle, as in a worker); only fds 0-2 and the
 * channel, moved to MON_CHANNEL. */
static void
child_setup(int ch, pid_t master)
{
	sigset_t	 none;
	int		 sig;

	(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != master)
		_exit(0);	/* it died before prctl */
	for (sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			(void)signal(sig, sig == SIGINT ? SIG_IGN : SIG_DFL);
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
	if (ch != MON_CHANNEL && dup2(ch, MON_CHANNEL) == -1)
		_exit(1);	/* the master sees EOF: no monitor */
	close_from(MON_CHANNEL + 1);
}

/* The monitor: a snapshot per request, until EOF. */
static void __attribute__((noreturn))
mon_main(int ch, const struct gp_gpu *g, int n, pid_t master)
{
	static struct nvml	 nv;
	struct gp_mon_snap	*s;
	struct mon_req		 rq;
	pid_t			*pids;

	child_setup(ch, master);
	if ((s = malloc(snap_len(n))) == NULL ||
	    (pids = calloc(MON_MAX_PIDS, sizeof(*pids))) == NULL)
		_exit(GP_EXIT_NOMEM);
	while (gp_read_full(MON_CHANNEL, &rq, sizeof(rq)) == 0) {
		if (rq.magic != MON_MAGIC || rq.nw < 0 || rq.nw > MON_MAX_PIDS)
			_exit(GP_EXIT_PROTO);
		if (rq.nw > 0 && gp_read_full(MON_CHANNEL, pids,
		    (size_t)rq.nw * sizeof(*pids)) < 0)
			break;
		snapshot(&nv, g, n, pids, rq.nw, s);
		if (gp_write_full(MON_CHANNEL, s, snap_len(n)) < 0)
			break;
	}
	if (nv.state > 0)
		(void)nv.shutdown();
	_exit(0);
}

/* ---- The master's side ---- */

int
gp_mon_start(struct gp_mon *m, const struct gp_gpu *g, int n, char *err,
    size_t errlen)
{
	pid_t	 master = getpid(), pid;
	int	 sv[2], rc;

	memset(m, 0, sizeof(*m));
	m->fd = m->pidfd = -1;
	if (n <= 0 || n > MON_MAX_GPUS)
		return gp_errf(err, errlen, -EINVAL,
		    "GPU monitor: %d GPUs (1 to %d)", n, MON_MAX_GPUS);
	m->ngpu = n;
	m->snaplen = snap_len(n);
	/* Two halves: the one being received, the last whole one. */
	if ((m->rx = malloc(2 * m->snaplen)) == NULL)
		return gp_errf(err, errlen, -ENOMEM, "GPU monitor: no memory");
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == -1) {
		rc = -errno;
		gp_mon_stop(m);
		return gp_errf(err, errlen, rc, "GPU monitor: socketpair: %s",
		    strerror(-rc));
	}
	fflush(NULL);
	if ((pid = fork()) == -1) {
		rc = -errno;
		close(sv[0]);
		close(sv[1]);
		gp_mon_stop(m);
		return gp_errf(err, errlen, rc, "GPU monitor: fork: %s",
		    strerror(-rc));
	}
	if (pid == 0) {
		close(sv[0]);
		mon_main(sv[1], g, n, master);
	}
	close(sv[1]);
	(void)fcntl(sv[0], F_SETFL, O_NONBLOCK);
	m->fd = sv[0];
	m->pid = pid;
	m->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	return 0;
}

/*
 * One sendmsg(), MSG_NOSIGNAL: a monitor that died gives EPIPE, not a
 * SIGPIPE in a host whose signals are not ours. Whole or nothing: a
 * request (at most 4 KiB and 8 bytes) goes only when the last one is
 * answered, so the monitor has read everything before it and the
 * socket's buffer is empty.
 */
int
gp_mon_request(struct gp_mon *m, const pid_t *pids, int nw)
{
	struct mon_req	 rq = { MON_MAGIC, nw };
	struct iovec	 iov[2];
	struct msghdr	 mh;
	ssize_t		 r;
	int		 rc;

	if (m->pid <= 0)
		return -EPIPE;
	if (m->pending)
		return -EALREADY;
	if (nw < 0 || nw > MON_MAX_PIDS || (nw > 0 && pids == NULL))
		return -EINVAL;
	iov[0].iov_base = &rq;
	iov[0].iov_len = sizeof(rq);
	iov[1].iov_base = (void *)pids;
	iov[1].iov_len = (size_t)nw * sizeof(*pids);
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = iov;
	mh.msg_iovlen = nw > 0 ? 2 : 1;
	do
		r = sendmsg(m->fd, &mh, MSG_NOSIGNAL);
	while (r == -1 && errno == EINTR);
	if (r == (ssize_t)(iov[0].iov_len + (nw > 0 ? iov[1].iov_len : 0))) {
		m->pending = 1;
		return 0;
	}
	rc = r == -1 ? -errno : -EIO;
	gp_mon_stop(m);
	return rc;
}

/* Whether the reply in m->rx is one: the pool's GPU count, counts in
 * range; its strings are terminated here. */
static int
snap_ok(struct gp_mon *m)
{
	struct gp_mon_snap	*s = (struct gp_mon_snap *)m->rx;
	int			 i;

	if ((s->ok != 0 && s->ok != 1) || s->ngpu != m->ngpu)
		return 0;
	s->err[sizeof(s->err) - 1] = '\0';
	for (i = 0; i < s->ngpu; i++) {
		if (s->gpu[i].nproc < 0 || s->gpu[i].nproc > GP_MON_PROCS)
			return 0;
		s->gpu[i].err[sizeof(s->gpu[i].err) - 1] = '\0';
	}
	return 1;
}

int
gp_mon_read(struct gp_mon *m)
{
	ssize_t	 r;
	int	 rc;

	if (m->pid <= 0)
		return -EPIPE;
	while (m->got < m->snaplen) {
		r = read(m->fd, m->rx + m->got, m->snaplen - m->got);
		if (r == -1 && errno == EINTR)
			continue;
		if (r == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (r <= 0 || !m->pending) {
			/* EOF, a short reply, or one nobody asked for. */
			rc = r == 0 ? -EPIPE : r < 0 ? -errno : -EPROTO;
			gp_mon_stop(m);
			return rc;
		}
		m->got += (size_t)r;
	}
	if (!snap_ok(m)) {
		gp_mon_stop(m);
		return -EPROTO;
	}
	memcpy(m->rx + m->snaplen, m->rx, m->snaplen);
	m->snap = (struct gp_mon_snap *)(m->rx + m->snaplen);
	m->got = 0;
	m->pending = 0;
	return 1;
}

/* A request already pending is waited out first, so that the snapshot
 * returned answers this one (these pids). */
int
gp_mon_sample(struct gp_mon *m, const pid_t *pids, int nw, int timeout_ms)
{
	struct pollfd	 pfd;
	int64_t		 dl = gp_now_ns() + (int64_t)timeout_ms * 1000000, now;
	int		 rc, asked = 0;

	for (;;) {
		if (!m->pending) {
			if (asked)
				return 0;
			if ((rc = gp_mon_request(m, pids, nw)) < 0)
				return rc;
			asked = 1;
		}
		if ((rc = gp_mon_read(m)) < 0)
			return rc;
		if (rc > 0)
			continue;
		if ((now = gp_now_ns()) >= dl)
			return -ETIMEDOUT;
		pfd.fd = m->fd;
		pfd.events = POLLIN;
		if (poll(&pfd, 1, gp_poll_ms(dl, now)) == -1 && errno != EINTR)
			return -errno;
	}
}

/* Wait for the SIGKILLed monitor through its pidfd where there is one:
 * if the host ignores SIGCHLD its pid may be another child's by now. */
static void
reap(struct gp_mon *m)
{
	siginfo_t	 si;
	int		 r, status;

	if (m->pidfd >= 0) {
		while ((r = waitid(MON_P_PIDFD, (id_t)m->pidfd, &si, WEXITED))
		    == -1 && errno == EINTR)
			;
		if (r == 0 || errno != EINVAL)
			return;
	}
	(void)gp_waitpid(m->pid, &status, 0);
}

void
gp_mon_stop(struct gp_mon *m)
{
	if (m->fd >= 0)
		close(m->fd);
	if (m->pid > 0) {
		if (m->pidfd >= 0)
			(void)syscall(SYS_pidfd_send_signal, m->pidfd, SIGKILL,
			    NULL, 0);
		else
			(void)kill(m->pid, SIGKILL);
		reap(m);
		if (m->pidfd >= 0)
			close(m->pidfd);
	}
	free(m->rx);
	m->rx = NULL;
	m->snap = NULL;
	m->fd = m->pidfd = -1;
	m->pid = 0;
	m->got = 0;
	m->pending = 0;
}
