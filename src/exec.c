/*
 * exec.c: workers that start clean (gp_pool_opts.exec). Each is forked
 * as any worker, and its child, having reset signals, asked for
 * PR_SET_PDEATHSIG and bound itself (all kept across exec), execs the
 * pool's program with only the descriptors it needs left open. That
 * program calls gp_worker_enter(), which reads the HELLO the master sent
 * first on the task pipe (protocol, library version and struct sizes
 * checked before anything else is read), rebuilds what a forked worker
 * would have had in memory (options, its place, the GPU list, its
 * shared slot and region, mapped again from their memfds), and runs
 * worker.c's gp_worker_main() from there: the rest of the protocol is
 * the forked worker's. Functions cross as references (ref.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"
#include "msg.h"

extern char **environ;

#define ENV_NAME	"GPUPOOL_WORKER"
#define HELLO_MAX	(1u << 30)	/* the most a worker reads of one */

/* The fixed part of a HELLO; the rest follows in this order: ngpus
 * struct gp_gpu, the init and fini refs (when has_*), init_arglen bytes,
 * the topology's XML, the place's CPU and node lists. The options cross
 * whole, as opts.c's gp_opts_wire() leaves them (no pointer, no fd): a
 * new one needs nothing here. */
struct hello {
	char			 magic[8];	/* "gpupool" */
	uint32_t		 proto;		/* GP_PROTO */
	uint32_t		 size;		/* sizeof(struct hello) */
	char			 version[16];	/* GP_VERSION */
	uint32_t		 sizes[7];	/* the shared structs' */
	int32_t			 master;
	int32_t			 worker;
	uint32_t		 ngpus;
	uint64_t		 half;
	uint64_t		 init_arglen;
	uint32_t		 xmllen, cpuslen, nodeslen;
	int32_t			 membind, numa, thissystem, has_init, has_fini;
	struct gp_worker_info	 info;
	struct gp_pool_opts	 o;
};

static void
sizes(uint32_t *s)
{
	s[0] = sizeof(struct gp_msg_hdr);
	s[1] = sizeof(struct gp_rec_task);
	s[2] = sizeof(struct gp_rec_result);
	s[3] = sizeof(struct gp_shm);
	s[4] = sizeof(struct gp_gpu);
	s[5] = sizeof(struct gp_pool_opts);
	s[6] = sizeof(struct gp_msg_ready);
}

/* ------------------------------------------------------------------ */
/* The master's side. */

static int
copy_argv(struct gp_xp *x, char *const *argv)
{
	size_t	 n, i;

	for (n = 0; argv[n] != NULL; n++)
		;
	if ((x->argv = calloc(n + 1, sizeof(*x->argv))) == NULL)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		if ((x->argv[i] = strdup(argv[i])) == NULL)
			return -ENOMEM;
	return 0;
}

/* The options' checks: a bad one is -EINVAL with a reason. */
static int
check(const struct gp_pool *p, const struct gp_exec *e, char *err,
    size_t errlen)
{
	size_t	 i;

	for (i = 0; i < sizeof(e->reserved) / sizeof(e->reserved[0]); i++)
		if (e->reserved[i] != 0 || e->pad != 0)
			return gp_errf(err, errlen, -EINVAL, "gp_exec: reserved "
			    "fields are not zero");
	if (e->argv == NULL || e->argv[0] == NULL || e->argv[0][0] == '\0')
		return gp_errf(err, errlen, -EINVAL, "gp_exec: no program "
		    "(argv[0])");
	if (access(e->argv[0], X_OK) < 0)
		return gp_errf(err, errlen, -EINVAL, "gp_exec: cannot exec "
		    "'%s': %s", e->argv[0], strerror(errno));
	if ((e->init_arglen > 0) != (p->o.init_arg != NULL))
		return gp_errf(err, errlen, -EINVAL, "gp_exec: init_arg needs "
		    "its length (init_arglen): only bytes cross an exec");
	if (e->init_arglen > HELLO_MAX / 2)
		return gp_errf(err, errlen, -EINVAL, "gp_exec: init_arglen %zu "
		    "over %u", e->init_arglen, HELLO_MAX / 2);
	if (e->nkeep < 0 || e->nkeep > 64 || (e->nkeep > 0 &&
	    e->keep_fds == NULL))
		return gp_errf(err, errlen, -EINVAL, "gp_exec: nkeep %d (0 to "
		    "64 descriptors)", e->nkeep);
	for (i = 0; i < (size_t)e->nkeep; i++)
		if (e->keep_fds[i] < 3 || fcntl(e->keep_fds[i], F_GETFD) < 0)
			return gp_errf(err, errlen, -EINVAL, "gp_exec: keep_fds "
			    "has %d, not an open descriptor over 2",
			    e->keep_fds[i]);
	return 0;
}

/* init and fini by reference; the topology as XML. */
static int
refs(struct gp_pool *p, struct gp_xp *x, char *err, size_t errlen)
{
	char	*xml;
	int	 len;

	if (gp_ref_make((const void *)(uintptr_t)p->o.init, &x->init) < 0 ||
	    gp_ref_make((const void *)(uintptr_t)p->o.fini, &x->fini) < 0)
		return gp_errf(err, errlen, -EINVAL, "gp_exec: init or fini "
		    "is in no loaded module: an exec'd worker cannot find it");
	if (hwloc_topology_export_xmlbuffer(p->topo, &xml, &len, 0) < 0)
		return gp_errf(err, errlen, -ENOMEM, "gp_exec: cannot export "
		    "the topology");
	x->xml = malloc((size_t)len);
	if (x->xml != NULL)
		memcpy(x->xml, xml, (size_t)len);
	hwloc_free_xmlbuffer(p->topo, xml);
	if (x->xml == NULL)
		return -ENOMEM;
	x->xmllen = len;
	x->thissystem = hwloc_topology_is_thissystem(p->topo);
	return 0;
}

int
gp_exec_prepare(struct gp_pool *p, char *err, size_t errlen)
{
	const struct gp_exec	*e = p->o.exec;
	struct gp_xp		*x;
	int			 rc;

	p->o.exec = NULL;	/* read during gp_pool_create() only */
	if (e == NULL)
		return 0;
	if ((rc = check(p, e, err, errlen)) < 0)
		return rc;
	if ((x = calloc(1, sizeof(*x))) == NULL)
		return -ENOMEM;
	p->xp = x;
	x->shmfd = -1;
	if ((rc = copy_argv(x, e->argv)) < 0)
		return rc;
	if (e->nkeep > 0) {
		if ((x->keep = malloc((size_t)e->nkeep * sizeof(int))) == NULL)
			return -ENOMEM;
		memcpy(x->keep, e->keep_fds, (size_t)e->nkeep * sizeof(int));
		x->nkeep = e->nkeep;
	}
	if (e->init_arglen > 0) {
		if ((x->init_arg = malloc(e->init_arglen)) == NULL)
			return -ENOMEM;
		memcpy(x->init_arg, p->o.init_arg, e->init_arglen);
		x->init_arglen = e->init_arglen;
	}
	return refs(p, x, err, errlen);
}

void
gp_exec_release(struct gp_pool *p)
{
	struct gp_xp	*x = p->xp;
	size_t		 i;

	if (x == NULL)
		return;
	for (i = 0; x->argv != NULL && x->argv[i] != NULL; i++)
		free(x->argv[i]);
	free(x->argv);
	free(x->keep);
	free(x->init_arg);
	free(x->xml);
	gp_buf_release(&x->fnref);
	if (x->shmfd >= 0)
		close(x->shmfd);
	free(x);
	p->xp = NULL;
}

int
gp_exec_fn(struct gp_pool *p, gp_fn *fn)
{
	struct gp_xp	*x = p->xp;
	struct gp_ref	 r;
	int		 rc;

	if (x->fn == fn && fn != NULL)
		return 0;
	x->fn = NULL;
	x->fnref.off = x->fnref.len = 0;
	if (gp_ref_make((const void *)(uintptr_t)fn, &r) < 0)
		return -EINVAL;
	if ((rc = gp_ref_put(&x->fnref, &r)) < 0)
		return rc;
	x->fn = fn;
	return 0;
}

char **
gp_exec_env(struct gp_pool *p, struct gp_worker *w, int tfd, int rfd)
{
	static const char *const ours[] = { "CUDA_VISIBLE_DEVICES=",
	    "CUDA_DEVICE_ORDER=", ENV_NAME "=" };
	char		**e;
	size_t		 n, i, k, j;

	for (n = 0; environ[n] != NULL; n++)
		;
	if ((e = calloc(n + 4, sizeof(*e))) == NULL)
		return NULL;
	/* Every copy of our variables goes (a launcher can set one twice),
	 * then one of each: the worker's GPU from its first instruction. */
	for (i = k = 0; i < n; i++) {
		for (j = 0; j < 3; j++)
			if (strncmp(environ[i], ours[j], strlen(ours[j])) == 0)
				break;
		if (j == 3)
			e[k++] = environ[i];
	}
	if (asprintf(&e[n + 1], "CUDA_VISIBLE_DEVICES=%s",
	    w->info.visible) < 0) {
		free(e);
		return NULL;
	}
	if (asprintf(&e[n + 2], ENV_NAME "=gpupool%d:%d,%d,%d,%d", GP_PROTO,
	    tfd, rfd, p->xp->shmfd, w->regfd) < 0) {
		free(e[n + 1]);
		free(e);
		return NULL;
	}
	/* Ours live past the caller's strings: freed from their slots. */
	e[k++] = "CUDA_DEVICE_ORDER=PCI_BUS_ID";
	e[k++] = e[n + 1];
	e[k++] = e[n + 2];
	e[k] = NULL;
	return e;
}

void
gp_exec_free_env(char **envp)
{
	size_t	 n;

	if (envp == NULL)
		return;
	for (n = 0; envp[n] != NULL; n++)
		;
	/* The two strings we made are the last two entries. */
	free(envp[n - 1]);
	free(envp[n - 2]);
	free(envp);
}

int
gp_exec_hello(struct gp_pool *p, struct gp_worker *w)
{
	struct gp_xp	*x = p->xp;
	struct hello	 h;
	char		*cpus = NULL, *nodes = NULL;
	size_t		 at;
	int		 rc;

	memset(&h, 0, sizeof(h));
	memcpy(h.magic, "gpupool", 8);
	h.proto = GP_PROTO;
	h.size = sizeof(h);
	snprintf(h.version, sizeof(h.version), "%s", GP_VERSION);
	sizes(h.sizes);
	h.master = p->master;
	h.worker = w->idx;
	h.ngpus = (uint32_t)p->ngpus;
	gp_opts_wire(&p->o, &h.o);
	h.half = w->reg != NULL ? w->half : 0;
	h.init_arglen = x->init_arglen;
	h.xmllen = (uint32_t)x->xmllen;
	if (hwloc_bitmap_list_asprintf(&cpus, w->place.cpuset) < 0 ||
	    hwloc_bitmap_list_asprintf(&nodes, w->place.nodeset) < 0) {
		free(cpus);
		return -ENOMEM;
	}
	h.cpuslen = (uint32_t)strlen(cpus);
	h.nodeslen = (uint32_t)strlen(nodes);
	h.membind = w->place.membind;
	h.numa = w->place.numa;
	h.thissystem = x->thissystem;
	h.has_init = x->init.set;
	h.has_fini = x->fini.set;
	h.info = w->info;
	if ((rc = gp_msg_begin(&w->wbuf, GP_MSG_HELLO, &at)) < 0 ||
	    (rc = gp_buf_add(&w->wbuf, &h, sizeof(h))) < 0 ||
	    (rc = gp_buf_add(&w->wbuf, p->gpus,
	    (size_t)p->ngpus * sizeof(*p->gpus))) < 0 ||
	    (x->init.set && (rc = gp_ref_put(&w->wbuf, &x->init)) < 0) ||
	    (x->fini.set && (rc = gp_ref_put(&w->wbuf, &x->fini)) < 0) ||
	    (rc = gp_buf_add(&w->wbuf, x->init_arg, x->init_arglen)) < 0 ||
	    (rc = gp_buf_add(&w->wbuf, x->xml, (size_t)x->xmllen)) < 0 ||
	    (rc = gp_buf_add(&w->wbuf, cpus, h.cpuslen)) < 0 ||
	    (rc = gp_buf_add(&w->wbuf, nodes, h.nodeslen)) < 0)
		w->wbuf.len = w->wbuf.off;
	else
		gp_msg_finish(&w->wbuf, at, 0);
	free(cpus);
	free(nodes);
	return rc;
}

/* struct linux_dirent64, for the fallback below. */
struct dent {
	uint64_t	 ino;
	int64_t		 off;
	unsigned short	 reclen;
	unsigned char	 type;
	char		 name[];
};

/* Every descriptor from 3 up close-on-exec: close_range(2) where the
 * kernel has it (5.11), else each one /proc/self/fd lists, read with
 * getdents64 (no allocation: the child of a threaded caller). */
static void
cloexec_all(void)
{
	char	 buf[4096];
	long	 n, i;
	int	 d, fd;

	if (syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */)
	    == 0)
		return;
	if ((d = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return;
	while ((n = syscall(SYS_getdents64, d, buf, sizeof(buf))) > 0)
		for (i = 0; i < n; i += ((struct dent *)(buf + i))->reclen) {
			const char *s = ((struct dent *)(buf + i))->name;

			for (fd = 0; *s >= '0' && *s <= '9'; s++)
				fd = fd * 10 + (*s - '0');
			if (*s == '\0' && fd > 2 && fd != d)
				(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
		}
	close(d);
}

void
gp_exec_child(struct gp_pool *p, struct gp_worker *w, int tfd, int rfd,
    char **envp)
{
	sigset_t	 death;
	int		 cpu_rc, mem_rc, i;

	gp_wstart_signals(p);
	/* Blocked across the exec (the handler is not kept): a master thread
	 * that ends before gp_worker_main() catches it again must not end
	 * this worker (wstart.c). */
	sigemptyset(&death);
	sigaddset(&death, GP_DEATH_SIG);
	(void)sigprocmask(SIG_BLOCK, &death, NULL);
	/* Bound, and through the start-up steps that run here (the
	 * niceness), before the exec, so the program's loader and first
	 * pages are already in their place and it starts at its niceness;
	 * the exec'd side reports the codes. */
	gp_wstart_bind(p, w, &cpu_rc, &mem_rc);
	atomic_store(&w->shm->cpubind_rc, cpu_rc);
	atomic_store(&w->shm->membind_rc, mem_rc);
	gp_wstart_steps_child(p, w);
	/* Only what the worker needs crosses: the host's descriptors that
	 * are not close-on-exec stay behind, as the pool's other ones. */
	cloexec_all();
	(void)fcntl(tfd, F_SETFD, 0);
	(void)fcntl(rfd, F_SETFD, 0);
	(void)fcntl(p->xp->shmfd, F_SETFD, 0);
	if (w->regfd >= 0)
		(void)fcntl(w->regfd, F_SETFD, 0);
	if (p->o.ext_len != 0)	/* mapped after the exec (wstart.c) */
		(void)fcntl(p->o.ext_fd, F_SETFD, 0);
	for (i = 0; i < p->xp->nkeep; i++)
		(void)fcntl(p->xp->keep[i], F_SETFD, 0);
	execve(p->xp->argv[0], p->xp->argv, envp);
	_exit(GP_EXIT_EXEC);
}

/* ------------------------------------------------------------------ */
/* The exec'd worker's side. */

/* "gpupoolN:task,result,shm,region" into fds; another N: not ours. */
static void
spec(const char *s, int fd[4])
{
	char	 pfx[32];
	char	*end;
	long	 v;
	int	 i;

	snprintf(pfx, sizeof(pfx), "gpupool%d:", GP_PROTO);
	if (strncmp(s, pfx, strlen(pfx)) != 0)
		_exit(GP_EXIT_VERSION);
	s += strlen(pfx);
	for (i = 0; i < 4; i++) {
		errno = 0;
		v = strtol(s, &end, 10);
		if (errno || end == s || *end != (i < 3 ? ',' : '\0') ||
		    v < (i < 3 ? 0 : -1) || v > 1 << 30 ||
		    (v >= 0 && fcntl((int)v, F_GETFD) < 0))
			_exit(GP_EXIT_VERSION);
		fd[i] = (int)v;
		s = end + 1;
	}
}

/* The next n bytes of the HELLO at *pos, or NULL when fewer are left. */
static const uint8_t *
take(const uint8_t **pos, const uint8_t *end, uint64_t n)
{
	const uint8_t	*p = *pos;

	if ((uint64_t)(end - p) < n)
		_exit(GP_EXIT_VERSION);
	*pos = p + n;
	return p;
}

static char *
dup_str(const uint8_t *s, size_t n)
{
	char	*c;

	if ((c = malloc(n + 1)) == NULL)
		_exit(GP_EXIT_NOMEM);
	memcpy(c, s, n);
	c[n] = '\0';
	return c;
}

/* Map w's shared slot (in the page that holds it) and its region. */
static void
map_shared(struct gp_worker *w, int shmfd, int regfd, size_t half)
{
	size_t	 pg = (size_t)sysconf(_SC_PAGESIZE);
	size_t	 at = (size_t)w->idx * sizeof(struct gp_shm);
	uint8_t	*m;

	m = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_SHARED, shmfd,
	    (off_t)(at / pg * pg));
	if (m == MAP_FAILED)
		_exit(GP_EXIT_NOMEM);
	w->shm = (struct gp_shm *)(void *)(m + at % pg);
	close(shmfd);
	w->regfd = -1;
	if (regfd < 0 || half == 0)
		return;
	m = mmap(NULL, 2 * half, PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_NORESERVE, regfd, 0);
	close(regfd);
	if (m == MAP_FAILED)
		_exit(GP_EXIT_NOMEM);
	w->reg = m;
	w->half = half;
}

/* The place of the HELLO's lists (no topology needed for bitmaps). */
static void
place_of(struct gp_worker *w, const struct hello *h, const uint8_t *cpus,
    const uint8_t *nodes)
{
	char	*c = dup_str(cpus, h->cpuslen), *n = dup_str(nodes, h->nodeslen);

	if ((w->place.cpuset = hwloc_bitmap_alloc()) == NULL ||
	    (w->place.nodeset = hwloc_bitmap_alloc()) == NULL ||
	    hwloc_bitmap_list_sscanf(w->place.cpuset, c) < 0 ||
	    hwloc_bitmap_list_sscanf(w->place.nodeset, n) < 0)
		_exit(GP_EXIT_VERSION);
	w->place.membind = h->membind;
	w->place.numa = h->numa;
	free(c);
	free(n);
}

/* The HELLO's fixed part, checked before anything it announces is read:
 * a program built against another gpupool leaves at once. */
static void
check_hello(const struct hello *h, size_t len)
{
	uint32_t	 s[7];

	sizes(s);
	if (len < sizeof(*h) || memcmp(h->magic, "gpupool", 8) != 0 ||
	    h->proto != GP_PROTO || h->size != sizeof(*h) ||
	    strncmp(h->version, GP_VERSION, sizeof(h->version)) != 0 ||
	    memcmp(h->sizes, s, sizeof(s)) != 0)
		_exit(GP_EXIT_VERSION);
	if (h->ngpus == 0 || h->ngpus > 65536 || h->worker < 0 ||
	    h->o.window == 0 || h->o.window > UINT32_MAX ||
	    h->o.max_msg == 0 ||
	    h->half > (1ull << 33) || h->info.visible[95] != '\0')
		_exit(GP_EXIT_VERSION);
}

/* The pool and worker a fork would have had, from the HELLO at b. */
static void
rebuild(struct gp_pool *p, struct gp_worker *w, const uint8_t *b,
    size_t len, const int fd[4])
{
	const uint8_t	*pos = b, *end = b + len, *cpus, *nodes;
	struct hello	 h;
	struct gp_ref	 r;

	memcpy(&h, take(&pos, end, sizeof(h)), sizeof(h));
	check_hello(&h, len);
	p->execd = 1;
	p->master = h.master;
	p->o = h.o;	/* the master's, less its pointers (gp_opts_wire()) */
	p->ngpus = (int)h.ngpus;
	if ((p->gpus = malloc(h.ngpus * sizeof(*p->gpus))) == NULL ||
	    (p->xp = calloc(1, sizeof(*p->xp))) == NULL)
		_exit(GP_EXIT_NOMEM);
	memcpy(p->gpus, take(&pos, end, h.ngpus * sizeof(*p->gpus)),
	    h.ngpus * sizeof(*p->gpus));
	/* Not this program's init or fini: not a worker of this pool. */
	if (h.has_init && (gp_ref_get(&pos, end, &r) < 0 ||
	    (p->o.init = (gp_init_fn *)gp_ref_resolve(&r)) == NULL))
		_exit(GP_EXIT_VERSION);
	if (h.has_fini && (gp_ref_get(&pos, end, &r) < 0 ||
	    (p->o.fini = (gp_fini_fn *)gp_ref_resolve(&r)) == NULL))
		_exit(GP_EXIT_VERSION);
	if (h.init_arglen > 0)
		p->o.init_arg = dup_str(take(&pos, end, h.init_arglen),
		    (size_t)h.init_arglen);
	p->xp->xml = dup_str(take(&pos, end, h.xmllen), h.xmllen);
	p->xp->xmllen = (int)h.xmllen;
	p->xp->thissystem = h.thissystem;
	p->xp->shmfd = -1;
	cpus = take(&pos, end, h.cpuslen);
	nodes = take(&pos, end, h.nodeslen);
	if (pos != end)
		_exit(GP_EXIT_VERSION);
	w->idx = h.worker;
	w->info = h.info;
	place_of(w, &h, cpus, nodes);
	map_shared(w, fd[2], fd[3], (size_t)h.half);
}

void
gp_worker_enter(void)
{
	struct gp_msg_hdr	 hd;
	struct gp_pool		*p;
	struct gp_worker	*w;
	const char		*s = getenv(ENV_NAME);
	uint8_t			*b;
	int			 fd[4];

	if (s == NULL)
		return;
	spec(s, fd);
	/* What this worker starts must not take itself for a worker, nor
	 * hold its channel across an exec (a forked worker's pipes are
	 * close-on-exec): a shell an item runs, or an item that execs. */
	(void)unsetenv(ENV_NAME);
	(void)fcntl(fd[0], F_SETFD, FD_CLOEXEC);
	(void)fcntl(fd[1], F_SETFD, FD_CLOEXEC);
	if (gp_read_full(fd[0], &hd, sizeof(hd)) < 0)
		_exit(0);	/* the master is gone */
	if (hd.type != GP_MSG_HELLO || hd.len < sizeof(struct hello) ||
	    hd.len > HELLO_MAX)
		_exit(GP_EXIT_VERSION);
	if ((b = malloc(hd.len)) == NULL || (p = calloc(1, sizeof(*p))) ==
	    NULL || (w = calloc(1, sizeof(*w))) == NULL)
		_exit(GP_EXIT_NOMEM);
	if (gp_read_full(fd[0], b, hd.len) < 0)
		_exit(0);
	p->wt.mon.fd = p->wt.mon.pidfd = -1;
	rebuild(p, w, b, hd.len, fd);
	free(b);
	p->w = w;
	p->nw = 1;
	w->fd = w->wfd = w->tfd = w->pidfd = -1;
	gp_worker_main(p, w, fd[0], fd[1]);
}
