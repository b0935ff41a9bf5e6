/*
 * gpu.c: decide which GPUs a pool uses, without touching CUDA in the
 * master. Real GPUs are enumerated by a short-lived probe child (it is the
 * only process here that calls cudart before a worker does); fake GPUs and
 * explicit ids need no probe result. Runs only in the master.
 */
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"

#define GP_PROBE_MAX		64
#define GP_PROBE_TIMEOUT_MS	60000

struct probe_reply {
	int		 count;		/* >= 0, or -1: see err */
	char		 err[200];
	struct gp_gpu	 dev[GP_PROBE_MAX];
};

/*
 * $GPUPOOL_PROBE, a shared object whose gp_probe() stands in for
 * gp_cuda_probe(): the tests' fake machine (test/fake_libcuda.c), so that
 * the path from a probed GPU to its worker's CUDA_VISIBLE_DEVICES runs
 * where no driver is. cudart is linked statically, so no library swap
 * would reach it. Loaded in the probe child only, as cudart is.
 */
static int
probe_module(const char *path, struct probe_reply *r)
{
	gp_probe_fn	*fn;
	void		*h;

	if ((h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL ||
	    (*(void **)&fn = dlsym(h, "gp_probe")) == NULL) {
		snprintf(r->err, sizeof(r->err), "GPUPOOL_PROBE: %s",
		    dlerror());
		return -1;
	}
	return fn(r->dev, GP_PROBE_MAX, r->err, sizeof(r->err));
}

/* Probe child: enumerate in PCI order, as nvidia-smi numbers them. */
static void
probe_child(int fd)
{
	static struct probe_reply	 r;
	struct iovec			 iov = { &r, sizeof(r) };
	const char			*mod = getenv("GPUPOOL_PROBE");

	(void)unsetenv("CUDA_DEVICE_ORDER");	/* every copy: worker.c (d) */
	(void)setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
	if (mod != NULL && *mod != '\0')
		r.count = probe_module(mod, &r);
	else
		r.count = gp_cuda_probe(r.dev, GP_PROBE_MAX, r.err,
		    sizeof(r.err));
	(void)gp_writev_full(fd, &iov, 1);
	_exit(0);
}

static int
probe(struct probe_reply *r)
{
	struct pollfd	 pfd;
	int		 fds[2], status, rc = 0;
	size_t		 got = 0;
	ssize_t		 n;
	pid_t		 pid;
	int64_t		 dl = gp_now_ns() + (int64_t)GP_PROBE_TIMEOUT_MS * 1000000;

	if (pipe2(fds, O_CLOEXEC) == -1)
		return -errno;
	fflush(NULL);
	if ((pid = fork()) == -1) {
		rc = -errno;
		close(fds[0]);
		close(fds[1]);
		return rc;
	}
	if (pid == 0) {
		close(fds[0]);
		probe_child(fds[1]);
	}
	close(fds[1]);
	pfd.fd = fds[0];
	pfd.events = POLLIN;
	while (got < sizeof(*r)) {
		int64_t	 left = (dl - gp_now_ns()) / 1000000;

		if (left <= 0) {
			rc = -ETIMEDOUT;
			break;
		}
		if (poll(&pfd, 1, (int)left) == -1) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		n = read(fds[0], (char *)r + got, sizeof(*r) - got);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n == 0 ? -EPIPE : -errno;
			break;
		}
		got += (size_t)n;
	}
	close(fds[0]);
	if (rc < 0)
		kill(pid, SIGKILL);
	(void)gp_waitpid(pid, &status, 0);
	if (rc == -EPIPE)
		snprintf(r->err, sizeof(r->err),
		    "GPU probe died (status %d)", gp_wstatus_code(status));
	else if (rc == -ETIMEDOUT)
		snprintf(r->err, sizeof(r->err),
		    "GPU probe did not answer in %d s", GP_PROBE_TIMEOUT_MS / 1000);
	if (rc < 0)
		r->count = -1;
	return 0;
}

/* The n-th element of a comma list, copied to buf; -1 if absent. */
static int
list_nth(const char *list, int n, char *buf, size_t len)
{
	const char	*e;
	size_t		 l;

	for (; n > 0 && list != NULL; n--)
		if ((list = strchr(list, ',')) != NULL)
			list++;
	if (list == NULL)
		return -1;
	e = strchr(list, ',');
	l = e ? (size_t)(e - list) : strlen(list);
	if (l >= len)
		return -1;
	memcpy(buf, list, l);
	buf[l] = '\0';
	return 0;
}

static int
list_count(const char *list)
{
	int	 n = 1;

	for (; *list; list++)
		n += *list == ',';
	return n;
}

/* A non-negative decimal index, or -1. */
static int
index_of(const char *s)
{
	long	 v = 0;

	if (*s == '\0')
		return -1;
	for (; *s; s++) {
		if (!isdigit((unsigned char)*s) || v > 100000)
			return -1;
		v = v * 10 + (*s - '0');
	}
	return (int)v;
}

/* Could CUDA honour s as a CUDA_VISIBLE_DEVICES entry: an index, a
 * GPU- or MIG- UUID (or a prefix of one: only the driver can tell which
 * exist), or a PCI bus id? "-1" or "NoDevFiles", the usual ways of
 * saying "no GPU", are not. */
static int
cuda_entry(const char *s)
{
	int	 colon = 0;

	if (index_of(s) >= 0)
		return 1;
	if (strncmp(s, "GPU-", 4) == 0 || strncmp(s, "MIG-", 4) == 0)
		return s[4] != '\0';
	for (; *s; s++) {
		if (*s == ':')
			colon++;
		else if (!isxdigit((unsigned char)*s) && *s != '.')
			return 0;
	}
	return colon > 0;
}

/* Does id name g: its index, its UUID (with or without "GPU-", or a
 * unique prefix), or its bus id (any case, 4- or 8-digit domain)? */
static int
names(const char *id, int idx, const struct gp_gpu *g)
{
	const char	*u = g->uuid;
	size_t		 l = strlen(id);
	int		 ix = index_of(id);

	if (ix >= 0)
		return ix == idx;
	if (strncmp(u, "GPU-", 4) == 0 && strncmp(id, "GPU-", 4) != 0)
		u += 4;
	if (*u && l >= 4 && strncasecmp(id, u, l) == 0)
		return 1;
	if (*g->busid) {
		size_t	 bl = strlen(g->busid);

		if (strcasecmp(id, g->busid) == 0 ||
		    (l == bl + 4 && strncmp(id, "0000", 4) == 0 &&
		    strcasecmp(id + 4, g->busid) == 0))
			return 1;
	}
	return 0;
}

/* Select opts->gpus among the n candidates in all[]; among names them
 * in a message (NULL: "the n found"). */
static int
select_gpus(const char *spec, const struct gp_gpu *all, int n,
    const char *among, struct gp_gpu **out, char *err, size_t errlen)
{
	struct gp_gpu	*sel;
	char		 id[128];
	int		 k = list_count(spec), i, j, hit, m;

	if ((sel = calloc((size_t)k, sizeof(*sel))) == NULL)
		return -ENOMEM;
	for (i = 0; i < k; i++) {
		if (list_nth(spec, i, id, sizeof(id)) < 0 || id[0] == '\0') {
			free(sel);
			return gp_errf(err, errlen, -EINVAL,
			    "bad GPU list '%s': empty or over-long entry", spec);
		}
		for (j = 0, hit = -1, m = 0; j < n; j++)
			if (names(id, j, &all[j])) {
				hit = j;
				m++;
			}
		if (m != 1) {
			free(sel);
			if (m)
				return gp_errf(err, errlen, -EINVAL, "GPU '%s' "
				    "is ambiguous (%d GPUs match)", id, m);
			if (among != NULL)
				return gp_errf(err, errlen, -EINVAL, "no GPU "
				    "'%s' among %s", id, among);
			return gp_errf(err, errlen, -EINVAL, "no GPU '%s' "
			    "among the %d found", id, n);
		}
		for (j = 0; j < i; j++)
			if (strcmp(sel[j].visible, all[hit].visible) == 0) {
				free(sel);
				return gp_errf(err, errlen, -EINVAL,
				    "GPU '%s' is listed twice", id);
			}
		sel[i] = all[hit];
	}
	*out = sel;
	return k;
}

/*
 * No probe result: take the ids as given, but never outside an inherited
 * CUDA_VISIBLE_DEVICES (Slurm's, a container's): its elements are then
 * the candidates (an index names one by position, so "2,3" makes index 1
 * mean "3"; a UUID must be one of them). As in CUDA, the list ends at its
 * first entry that names no GPU ("2,-1,3" is "2"), so set but empty, or
 * "-1", it leaves no GPU at all. Without one, an index is written in
 * decimal ("00" is "0") so that the duplicate check sees through it.
 */
static int
given_gpus(const char *spec, struct gp_gpu **out, char *err, size_t errlen)
{
	struct gp_gpu	*g;
	const char	*inh = getenv("CUDA_VISIBLE_DEVICES");
	char		 id[96], among[160];
	int		 k, i, j, ix;

	k = list_count(inh != NULL ? inh : spec);
	for (i = 0; inh != NULL && i < k; i++)
		if (list_nth(inh, i, id, sizeof(id)) < 0 || !cuda_entry(id))
			k = i;
	if (inh != NULL && k == 0 && *inh == '\0')
		return gp_errf(err, errlen, GP_ENOGPU, "no GPU is visible "
		    "(CUDA_VISIBLE_DEVICES is set but empty): cannot use "
		    "GPUs '%s'", spec);
	if (inh != NULL && k == 0)
		return gp_errf(err, errlen, GP_ENOGPU, "no GPU is visible "
		    "(CUDA_VISIBLE_DEVICES='%s' names none): cannot use "
		    "GPUs '%s'", inh, spec);
	if ((g = calloc((size_t)k, sizeof(*g))) == NULL)
		return -ENOMEM;
	for (i = 0; i < k; i++) {
		if (list_nth(inh != NULL ? inh : spec, i, id, sizeof(id)) < 0 ||
		    id[0] == '\0') {
			free(g);
			return gp_errf(err, errlen, -EINVAL, "bad GPU list "
			    "'%s': empty or over-long entry", spec);
		}
		if (inh == NULL && (ix = index_of(id)) >= 0)
			snprintf(g[i].visible, sizeof(g[i].visible), "%d", ix);
		else
			snprintf(g[i].visible, sizeof(g[i].visible), "%s", id);
		if (strncmp(g[i].visible, "GPU-", 4) == 0 ||
		    strncmp(g[i].visible, "MIG-", 4) == 0)
			snprintf(g[i].uuid, sizeof(g[i].uuid), "%s",
			    g[i].visible);
		for (j = 0; inh == NULL && j < i; j++)
			if (strcasecmp(g[j].visible, g[i].visible) == 0) {
				free(g);
				return gp_errf(err, errlen, -EINVAL,
				    "GPU '%s' is listed twice", id);
			}
	}
	if (inh == NULL) {
		*out = g;
		return k;
	}
	/* Only what CUDA honours: the k entries before the first bad one. */
	for (i = j = 0; inh[j] != '\0' && (inh[j] != ',' || ++i < k); j++)
		;
	snprintf(among, sizeof(among), "CUDA_VISIBLE_DEVICES=%.*s", j, inh);
	k = select_gpus(spec, g, k, among, out, err, errlen);
	free(g);
	return k;
}

static int
fake_gpus(const struct gp_pool_opts *o, struct gp_gpu **out, char *err,
    size_t errlen)
{
	struct gp_gpu	*g;
	int		 i, rc;

	if (o->fake_busids != NULL && list_count(o->fake_busids) != o->fake_gpus)
		return gp_errf(err, errlen, -EINVAL,
		    "%d fake GPUs but %d bus ids in '%s'", o->fake_gpus,
		    list_count(o->fake_busids), o->fake_busids);
	if ((g = calloc((size_t)o->fake_gpus, sizeof(*g))) == NULL)
		return -ENOMEM;
	for (i = 0; i < o->fake_gpus; i++) {
		g[i].fake = 1;
		/* Not a CUDA id: a task that tries CUDA sees no device
		 * rather than a real GPU of this machine. */
		snprintf(g[i].visible, sizeof(g[i].visible), "fake%d", i);
		snprintf(g[i].name, sizeof(g[i].name), "fake GPU %d", i);
		if (o->fake_busids != NULL)
			(void)list_nth(o->fake_busids, i, g[i].busid,
			    sizeof(g[i].busid));
	}
	if (o->gpus == NULL || strcmp(o->gpus, "all") == 0) {
		*out = g;
		return o->fake_gpus;
	}
	rc = select_gpus(o->gpus, g, o->fake_gpus, NULL, out, err, errlen);
	free(g);
	return rc;
}

int
gp_gpu_resolve(const struct gp_pool_opts *o, struct gp_gpu **out, char *err,
    size_t errlen)
{
	struct probe_reply	*r;
	struct gp_gpu		*g;
	int			 rc, i, all;

	if (o->fake_gpus > 0)
		return fake_gpus(o, out, err, errlen);
	all = o->gpus == NULL || strcmp(o->gpus, "all") == 0;
	if ((r = calloc(1, sizeof(*r))) == NULL)
		return -ENOMEM;
	if ((rc = probe(r)) < 0) {
		free(r);
		return gp_errf(err, errlen, rc, "cannot start the GPU probe");
	}
	/* Workers name their GPU by UUID, never by index: an index means
	 * another GPU under an inherited CUDA_VISIBLE_DEVICES (invariant 1). */
	for (i = 0; i < r->count; i++)
		snprintf(r->dev[i].visible, sizeof(r->dev[i].visible),
		    "%s", r->dev[i].uuid[0] ? r->dev[i].uuid :
		    r->dev[i].busid);
	if (r->count > 0 && all) {
		if ((g = calloc((size_t)r->count, sizeof(*g))) == NULL) {
			free(r);
			return -ENOMEM;
		}
		memcpy(g, r->dev, (size_t)r->count * sizeof(*g));
		*out = g;
		rc = r->count;
	} else if (r->count > 0)
		rc = select_gpus(o->gpus, r->dev, r->count, NULL, out, err,
		    errlen);
	else if (!all)
		rc = given_gpus(o->gpus, out, err, errlen);
	else
		rc = gp_errf(err, errlen, GP_ENOGPU,
		    "no GPU found: %s; give GPU ids, or fake GPUs "
		    "(GPUPOOL_FAKE_GPUS=N) to run without one",
		    r->count == 0 ? "the CUDA driver sees none" : r->err);
	free(r);
	return rc;
}
