/*
 * gpucheck.c: the real-GPU check's program (test/gpu/run.sh runs it).
 *
 * One mode per check that needs CUDA in a pool's workers or a CUDA
 * process of its own:
 *
 *	gpucheck device		each worker sees its own GPU as device 0
 *	gpucheck illegal	a faulting kernel fails its item only
 *	gpucheck memory MIB	a SIGKILLed worker's GPU memory is released
 *	gpucheck hold PCT SECS	hold PCT % of every GPU's memory for SECS
 *	gpucheck context	create a CUDA context, use it, exit
 *	gpucheck context-pool N	N items that use their worker's context
 *	gpucheck clean		a caller with a CUDA context: workers that
 *				start clean (exec) compute on their GPUs
 *
 * Each mode prints one line to standard output saying what it saw (the
 * check's detail), diagnostics to standard error, and exits 0 (pass), 1
 * (fail), 77 (cannot be checked here: the line says why) or 2 (usage).
 *
 * The pool modes follow the library's rule: the master (main() and what
 * it calls) never calls CUDA; only the items and initialisers, which run
 * in the workers, do. All but clean, whose point is a caller that broke
 * it: its workers exec this program (main() calls gp_worker_enter()). nvidia-smi is run by the master through popen(): a
 * separate program, so no NVML is loaded here either.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <gpupool.h>

#ifdef GC_KERNELS
#include "gpukern.h"
#endif

#define MIB		(1ull << 20)
#define WORK_BYTES	(1u << 20)	/* what a context-cost item touches */
#define FILL_N		4096		/* ints gk_fill() checks */
#define DEADLINE_S	60.0		/* for anything the GPU must do */
#define ILLEGAL_EXIT	70		/* a worker whose context faulted */

static double
now(void)
{
	struct timespec	 ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Wait a little between two looks at something the GPU or the driver
 * must change: polling, with a deadline in each caller. */
static void
nap(void)
{
	struct timespec	 ts = { 0, 200 * 1000 * 1000 };

	nanosleep(&ts, NULL);
}

static int
pool_make(struct gp_pool **pool, const char *gpus, unsigned flags,
    gp_init_fn *init)
{
	struct gp_pool_opts	 opts = { 0 };
	char			 err[256] = "";
	int			 rc;

	opts.gpus = gpus;
	opts.flags = flags;
	opts.init = init;
	opts.errbuf = err;
	opts.errlen = sizeof(err);
	if ((rc = gp_pool_create(pool, &opts)) < 0)
		printf("cannot create the pool: %s\n",
		    err[0] != '\0' ? err : gp_strerror(rc));
	return rc;
}

/* Worker, once, after the pool made its CUDA context: CUDA must see one
 * device, device 0, at the PCI bus id the pool placed the worker by.
 * Says what it saw on standard error; nonzero fails the pool. */
static int
device_init(struct gp_ctx *ctx, void *arg)
{
	const struct gp_worker_info	*wi = gp_ctx_info(ctx);
	cudaError_t			 e;
	char				 bus[32] = "";
	int				 count = -1, dev = -1, bad;

	if ((e = cudaGetDeviceCount(&count)) != cudaSuccess ||
	    (e = cudaGetDevice(&dev)) != cudaSuccess ||
	    (e = cudaDeviceGetPCIBusId(bus, (int)sizeof(bus), dev)) !=
	    cudaSuccess) {
		fprintf(stderr, "gpucheck: worker %d (CUDA_VISIBLE_DEVICES=%s): "
		    "%s (CUDA error %d)\n", wi->worker, wi->visible,
		    cudaGetErrorString(e), (int)e);
		return 1;
	}
	bad = dev != 0 || count != 1 || strcasecmp(bus, wi->busid) != 0;
	/* A mismatch's line starts "gpucheck:", for run.sh to show. */
	fprintf(stderr, "%sworker %d (pid %d, CUDA_VISIBLE_DEVICES=%s): "
	    "device %d of %d at %s; placed by %s\n", bad ? "gpucheck: " : "",
	    wi->worker, (int)getpid(), wi->visible, dev, count, bus,
	    wi->busid);
	return bad;
}

/* device: every worker's init checks its device (device_init()). */
static int
mode_device(void)
{
	struct gp_pool		*pool;
	struct gp_worker_info	 wi;
	char			 buses[200] = "";
	size_t			 o = 0;
	int			 n, w;

	if (pool_make(&pool, NULL, GP_POOL_CUDA_INIT, device_init) < 0)
		return 1;
	n = gp_pool_size(pool);
	for (w = 0; w < n && o < sizeof(buses); w++)
		if (gp_pool_info(pool, w, &wi) == 0)
			o += (size_t)snprintf(buses + o, sizeof(buses) - o,
			    "%s%s", w ? " " : "", wi.busid);
	printf("%d workers: each sees device 0 of 1 at its own bus id (%s)\n",
	    n, buses);
	gp_pool_destroy(pool);
	return 0;
}

#ifdef GC_KERNELS
/*
 * Worker: item "fault" runs a kernel that writes through a null pointer.
 * Its context is then lost for good (the error is sticky), so the worker
 * leaves and the pool forks a fresh one. Any other item runs a kernel
 * that must work and replies with the pid that ran it.
 */
static int
kernel_item(struct gp_ctx *ctx, const void *in, size_t inlen, void *arg)
{
	pid_t	 pid = getpid();
	int	 e;

	if (inlen == 5 && memcmp(in, "fault", 5) == 0) {
		if ((e = gk_illegal()) == 0)
			return 0;	/* no fault: the master says so */
		fprintf(stderr, "gpucheck: worker %d: the kernel faulted: %s "
		    "(CUDA error %d); leaving\n", (int)pid,
		    cudaGetErrorString((cudaError_t)e), e);
		_exit(ILLEGAL_EXIT);
	}
	if ((e = gk_fill(FILL_N)) != 0)
		return e < 0 ? 1 : e;
	return gp_ctx_reply(ctx, &pid, sizeof(pid)) == 0 ? 0 : 1;
}

/*
 * illegal: one worker, one map of four items, the second faulting. It
 * must end GP_CRASHED or GP_FAILED, the others GP_OK with their kernel's
 * result right, the last two on a process other than the faulted one
 * (first).
 */
static int
illegal_map(struct gp_pool *pool, pid_t first)
{
	static const char	*in[] = { "fill", "fault", "fill", "fill" };
	struct gp_item		 it[4];
	pid_t			 pid;
	char			 why[160], fault[160] = "";
	int			 i, rc, bad = 0;

	for (i = 0; i < 4; i++)
		gp_item_init(&it[i], in[i], strlen(in[i]));
	if ((rc = gp_pool_map(pool, kernel_item, NULL, 0, it, 4)) < 0) {
		printf("map: %s\n", gp_strerror(rc));
		return 1;
	}
	for (i = 0; i < 4 && !bad; i++) {
		(void)gp_item_strerror(&it[i], why, sizeof(why));
		pid = 0;
		if (it[i].status == GP_OK && it[i].outlen == sizeof(pid))
			memcpy(&pid, it[i].out, sizeof(pid));
		if (i == 1 && it[i].status != GP_CRASHED &&
		    it[i].status != GP_FAILED) {
			printf("a null-pointer write ended its item %s, not "
			    "crashed or failed\n", why);
			bad = 1;
		} else if (i == 1)
			snprintf(fault, sizeof(fault), "%s", why);
		else if (pid == 0 || (i > 1 && pid == first)) {
			printf("faulting item: %s; item %d: %s, pid %d (the "
			    "faulted worker's: %d)\n", fault, i, why,
			    (int)pid, (int)first);
			bad = 1;
		}
	}
	if (!bad)
		printf("faulting item: %s (worker pid %d); the items after it "
		    "ran their kernel on pid %d\n", fault, (int)first, (int)pid);
	gp_items_release(it, 4);
	return bad;
}

/* illegal: see illegal_map(). */
static int
mode_illegal(void)
{
	struct gp_pool		*pool;
	struct gp_worker_info	 wi;
	int			 bad;

	if (pool_make(&pool, "0", GP_POOL_CUDA_INIT, NULL) < 0)
		return 1;
	(void)gp_pool_info(pool, 0, &wi);
	bad = illegal_map(pool, wi.pid);
	gp_pool_destroy(pool);
	return bad;
}
#else
static int
mode_illegal(void)
{
	printf("built without nvcc: no kernel to fault\n");
	return 77;
}
#endif

/*
 * What nvidia-smi says: the GPU memory in MiB process pid uses (pid > 0,
 * from --query-compute-apps), or that the GPU uuid has in use (pid 0).
 * Returns the MiB, -1 when pid is not listed, -2 when nvidia-smi failed.
 */
static long
smi_mib(pid_t pid, const char *uuid)
{
	char		 cmd[256], line[256];
	FILE		*f;
	const char	*smi = getenv("NVIDIA_SMI");
	long		 a, b, mib = -1;
	int		 n;

	if (smi == NULL || smi[0] == '\0')
		smi = "nvidia-smi";
	if (pid > 0)
		snprintf(cmd, sizeof(cmd), "timeout 20 '%s' --query-compute-"
		    "apps=pid,used_memory --format=csv,noheader,nounits", smi);
	else
		snprintf(cmd, sizeof(cmd), "timeout 20 '%s' -i '%s' --query-"
		    "gpu=memory.used --format=csv,noheader,nounits", smi, uuid);
	if ((f = popen(cmd, "r")) == NULL)
		return -2;
	while (fgets(line, sizeof(line), f) != NULL) {
		/* used_memory may read "[N/A]": listed, amount unknown. */
		n = sscanf(line, "%ld , %ld", &a, &b);
		if (pid == 0 && n >= 1)
			mib = a;
		else if (n >= 1 && a == (long)pid)
			mib = (mib < 0 ? 0 : mib) + (n == 2 ? b : 0);
	}
	return pclose(f) == 0 ? mib : -2;
}

/* Worker: allocate *arg MiB on the device, touch it all, keep it. */
static int
alloc_item(struct gp_ctx *ctx, const void *in, size_t inlen, void *arg)
{
	static void	*keep;
	size_t		 len = *(const unsigned *)arg * MIB;
	cudaError_t	 e;

	if ((e = cudaSetDevice(0)) != cudaSuccess ||
	    (e = cudaMalloc(&keep, len)) != cudaSuccess ||
	    (e = cudaMemset(keep, 0x5a, len)) != cudaSuccess ||
	    (e = cudaDeviceSynchronize()) != cudaSuccess)
		return (int)e;
	return 0;
}

/* Worker: nothing (lets the pool notice a dead worker and replace it). */
static int
nop_item(struct gp_ctx *ctx, const void *in, size_t inlen, void *arg)
{
	return 0;
}

/* Until the deadline: 1 when what nvidia-smi shows says the memory is
 * gone (pid > 0: the pid is not listed; 0: the GPU uses at most max MiB),
 * else 0; *last is its last answer. */
static int
smi_wait_gone(pid_t pid, const char *uuid, long max, long *last)
{
	double	 end = now() + DEADLINE_S;

	do {
		*last = smi_mib(pid, uuid);
		if ((pid > 0 && *last == -1) ||
		    (pid == 0 && *last >= 0 && *last <= max))
			return 1;
		nap();
	} while (now() < end);
	return 0;
}

/* memory: a worker holding mib MiB is SIGKILLed; its memory must be gone
 * from the GPU. By its pid when nvidia-smi lists it, else (a container's
 * pid namespace) by the GPU's memory in use. */
static int
mode_memory(unsigned mib)
{
	struct gp_pool		*pool;
	struct gp_worker_info	 wi;
	struct gp_item		 it;
	double			 t0, end;
	long			 used = -1, before = -1;
	pid_t			 by;
	char			 why[160];
	int			 rc, bad = 1;

	if (pool_make(&pool, "0", 0, NULL) < 0)
		return 1;
	gp_item_init(&it, NULL, 0);
	if ((rc = gp_pool_map(pool, alloc_item, &mib, sizeof(mib), &it,
	    1)) < 0 || it.status != GP_OK) {
		printf("allocating %u MiB: %s\n", mib, rc < 0 ?
		    gp_strerror(rc) : gp_item_strerror(&it, why, sizeof(why)));
		goto out;
	}
	(void)gp_pool_info(pool, 0, &wi);
	/* nvidia-smi may take a moment to list a new process. */
	for (end = now() + 10; (used = smi_mib(wi.pid, NULL)) < (long)mib &&
	    used != -2 && now() < end; )
		nap();
	by = used >= (long)mib ? wi.pid : 0;
	if (by == 0 && (before = smi_mib(0, wi.uuid)) < (long)mib) {
		printf("nvidia-smi shows neither pid %d (%ld) nor %u MiB in "
		    "use on %s (%ld MiB)\n", (int)wi.pid, used, mib, wi.uuid,
		    before);
		goto out;
	}
	t0 = now();
	if (kill(wi.pid, SIGKILL) == -1) {
		printf("kill %d: %s\n", (int)wi.pid, strerror(errno));
		goto out;
	}
	/* The pool reaps and replaces it at its next call. */
	gp_item_init(&it, NULL, 0);
	if ((rc = gp_pool_map(pool, nop_item, NULL, 0, &it, 1)) < 0 ||
	    it.status != GP_OK) {
		printf("after the kill: %s\n", rc < 0 ? gp_strerror(rc) :
		    gp_item_strerror(&it, why, sizeof(why)));
		goto out;
	}
	if (!smi_wait_gone(by, wi.uuid, before - (long)mib * 9 / 10, &used))
		printf("%.0f s after SIGKILL: %s %ld MiB\n", DEADLINE_S,
		    by ? "the killed pid still uses" : "the GPU still uses",
		    used);
	else {
		printf("%u MiB of pid %d released %.2f s after SIGKILL (%s)\n",
		    mib, (int)wi.pid, now() - t0, by ? "seen by pid" :
		    "seen in the GPU's total: nvidia-smi gives no figure for "
		    "the pid");
		bad = 0;
	}
out:
	gp_pool_destroy(pool);
	return bad;
}

static int
cuda_fail(const char *what, cudaError_t e)
{
	printf("%s: %s (CUDA error %d)\n", what, cudaGetErrorString(e), (int)e);
	return 1;
}

/* hold: a foreign CUDA process, as another user's job would be. */
static int
mode_hold(unsigned pct, unsigned secs)
{
	cudaError_t	 e;
	size_t		 fr, total, len;
	void		*p;
	int		 n = 0, d;

	if ((e = cudaGetDeviceCount(&n)) != cudaSuccess)
		return cuda_fail("cudaGetDeviceCount", e);
	for (d = 0; d < n; d++) {
		if ((e = cudaSetDevice(d)) != cudaSuccess ||
		    (e = cudaMemGetInfo(&fr, &total)) != cudaSuccess)
			return cuda_fail("cudaMemGetInfo", e);
		len = total / 100 * pct;
		if ((e = cudaMalloc(&p, len)) != cudaSuccess ||
		    (e = cudaMemset(p, 0x5a, len)) != cudaSuccess ||
		    (e = cudaDeviceSynchronize()) != cudaSuccess)
			return cuda_fail("cudaMalloc", e);
	}
	printf("holding %u%% of %d GPUs, pid %d\n", pct, n, (int)getpid());
	fflush(stdout);
	/* How long to hold is the point here: the caller kills it sooner. */
	sleep(secs);
	return 0;
}

/* What each context-cost task or item does with its context. */
static cudaError_t
touch_device(void)
{
	cudaError_t	 e;
	void		*p;

	if ((e = cudaMalloc(&p, WORK_BYTES)) != cudaSuccess)
		return e;
	if ((e = cudaMemset(p, 1, WORK_BYTES)) == cudaSuccess)
		e = cudaDeviceSynchronize();
	(void)cudaFree(p);
	return e;
}

/* context: one task of the process-per-task side. */
static int
mode_context(void)
{
	cudaError_t	 e;

	if ((e = cudaSetDevice(0)) != cudaSuccess ||
	    (e = touch_device()) != cudaSuccess)
		return cuda_fail("context", e);
	return 0;
}

static int
touch_item(struct gp_ctx *ctx, const void *in, size_t inlen, void *arg)
{
	return (int)touch_device();
}

/* context-pool: the context-once-per-worker side, pool creation
 * included, as gpupool-run's time includes its own. */
static int
mode_context_pool(unsigned n)
{
	struct gp_pool	*pool;
	struct gp_item	*items;
	double		 t0 = now(), t1;
	unsigned	 i, ok = 0;
	int		 rc;

	if ((items = calloc(n, sizeof(*items))) == NULL) {
		printf("calloc: %s\n", strerror(errno));
		return 1;
	}
	if (pool_make(&pool, NULL, GP_POOL_CUDA_INIT, NULL) < 0) {
		free(items);
		return 1;
	}
	t1 = now();
	for (i = 0; i < n; i++)
		gp_item_init(&items[i], NULL, 0);
	if ((rc = gp_pool_map(pool, touch_item, NULL, 0, items, n)) < 0)
		printf("map: %s\n", gp_strerror(rc));
	for (i = 0; i < n; i++)
		ok += items[i].status == GP_OK;
	if (rc == 0)
		printf("%u items, %u ok, in %.3f s on %d workers (pool "
		    "created in %.3f s)\n", n, ok, now() - t0,
		    gp_pool_size(pool), t1 - t0);
	gp_pool_destroy(pool);
	free(items);
	return rc < 0 || ok != n;
}

/* This process's descriptors onto the driver's device files, the ones
 * a clean start is chosen by in Python (python/gpupool/_start.py,
 * _NVDEV: nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidiaN). */
static int
driver_fds(void)
{
	DIR		*d = opendir("/proc/self/fd");
	struct dirent	*e;
	char		 path[300], to[256];
	const char	*n;
	ssize_t		 r;
	int		 k = 0;

	while (d != NULL && (e = readdir(d)) != NULL) {
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		if ((r = readlink(path, to, sizeof(to) - 1)) <= 0)
			continue;
		to[r] = '\0';
		if (strncmp(to, "/dev/nvidia", 11) != 0)
			continue;
		n = to + 11;
		k += strcmp(n, "ctl") == 0 || strcmp(n, "-uvm") == 0 ||
		    strcmp(n, "-uvm-tools") == 0 ||
		    (*n != '\0' && strspn(n, "0123456789") == strlen(n));
	}
	if (d != NULL)
		closedir(d);
	return k;
}

/* The worker side of clean: the item is the device's work, and the reply
 * the bus id it ran at (device_init() checked it is the worker's). */
static int
bus_item(struct gp_ctx *ctx, const void *in, size_t inlen, void *arg)
{
	char	 bus[32] = "";
	int	 dev = -1;

#ifdef GC_KERNELS
	if (gk_fill(FILL_N) != 0)
		return 1;
#else
	if (touch_device() != cudaSuccess)
		return 1;
#endif
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetPCIBusId(bus, (int)sizeof(bus), dev) != cudaSuccess)
		return 1;
	return gp_ctx_reply(ctx, bus, strlen(bus) + 1) == 0 ? 0 : 1;
}

/*
 * clean: the driver's files are not open before CUDA starts here and are
 * after (what the Python package's choice of a clean start reads); then,
 * with this process's own context alive, a pool whose workers exec this
 * program, each making its context on its own GPU (device_init()), and
 * items that compute there, each at its worker's bus id.
 */
static int
mode_clean(void)
{
	static char		 self[4096];
	char			*argv[] = { self, NULL };
	struct gp_exec		 x = { .argv = argv };
	struct gp_pool_opts	 o = { .flags = GP_POOL_CUDA_INIT,
				       .init = device_init, .exec = &x };
	struct gp_pool		*pool;
	struct gp_item		 it[16];
	struct gp_worker_info	 wi;
	char			 err[256] = "";
	ssize_t			 r;
	int			 before = driver_fds(), after, rc, i, ok = 0;
	cudaError_t		 e;

	if ((e = cudaFree(0)) != cudaSuccess)
		return cuda_fail("a context in the caller", e);
	after = driver_fds();
	if (before != 0 || after == 0) {
		printf("driver files open: %d before CUDA, %d after (want 0, "
		    "then some)\n", before, after);
		return 1;
	}
	if ((r = readlink("/proc/self/exe", self, sizeof(self) - 1)) <= 0)
		return 1;
	self[r] = '\0';
	o.errbuf = err;
	o.errlen = sizeof(err);
	if ((rc = gp_pool_create(&pool, &o)) < 0) {
		printf("cannot create the pool: %s\n", err[0] ? err :
		    gp_strerror(rc));
		return 1;
	}
	for (i = 0; i < 16; i++)
		gp_item_init(&it[i], NULL, 0);
	rc = gp_pool_map(pool, bus_item, NULL, 0, it, 16);
	for (i = 0; rc == 0 && i < 16; i++)
		ok += it[i].status == GP_OK && gp_pool_info(pool, it[i].worker,
		    &wi) == 0 && strcasecmp(it[i].out, wi.busid) == 0;
	printf("caller: %d driver files open after cudaFree(0); %d workers "
	    "started clean; %d of 16 items computed at their worker's bus "
	    "id\n", after, gp_pool_size(pool), ok);
	gp_items_release(it, 16);
	gp_pool_destroy(pool);
	return ok != 16;
}

static int
number(const char *s, unsigned max, unsigned *out)
{
	char		*end;
	unsigned long	 v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v == 0 || v > max) {
		fprintf(stderr, "gpucheck: '%s' is not a number in 1..%u\n", s,
		    max);
		return -1;
	}
	*out = (unsigned)v;
	return 0;
}

int
main(int argc, char *argv[])
{
	const char	*m = argc > 1 ? argv[1] : "";
	unsigned	 a = 0, b = 0;

	gp_worker_enter();	/* clean's workers are this program */
	if (argc == 2 && strcmp(m, "clean") == 0)
		return mode_clean();
	if (argc == 2 && strcmp(m, "device") == 0)
		return mode_device();
	if (argc == 2 && strcmp(m, "illegal") == 0)
		return mode_illegal();
	if (argc == 2 && strcmp(m, "context") == 0)
		return mode_context();
	if (argc == 3 && strcmp(m, "memory") == 0 &&
	    number(argv[2], 1u << 20, &a) == 0)
		return mode_memory(a);
	if (argc == 3 && strcmp(m, "context-pool") == 0 &&
	    number(argv[2], 100000, &a) == 0)
		return mode_context_pool(a);
	if (argc == 4 && strcmp(m, "hold") == 0 &&
	    number(argv[2], 90, &a) == 0 && number(argv[3], 3600, &b) == 0)
		return mode_hold(a, b);
	fprintf(stderr, "usage: gpucheck device | illegal | memory MIB | "
	    "hold PCT SECS | context | context-pool N | clean\n");
	return 2;
}
