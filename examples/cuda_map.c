/*
 * cuda_map.c: a gpupool whose workers each run a CUDA kernel on their GPU.
 *
 * Each worker opens its GPU once, in the pool's initialiser (CUDA context
 * and device buffers, kept across items, as a worker would keep a loaded
 * model), then its fn copies an item's bytes to the GPU, runs a reduction
 * kernel (sum of the bytes and of their squares; cuda_map.cu) and returns
 * the sums. When the worker sees no CUDA device (no driver, no GPU, fake
 * GPUs) it computes the same sums on the CPU and says so in the output.
 * The master checks every result against its own CPU computation.
 *
 *	usage: cuda_map [items [bytes]]	(default 8 items of 1 MiB)
 *
 * Exit status: 0 every item ok and correct, 1 some item failed or was
 * wrong, 2 usage, 3 the pool could not be created or run.
 *
 * +----------------------------------------------------------------------+
 * | THE MASTER NEVER CALLS CUDA. main() and everything it calls run in   |
 * | the master; only worker_init(), sums_item() and worker_fini() run in |
 * | the workers, and only they may call the cm_gpu_*() functions. CUDA   |
 * | state does not survive fork(): a master that had called any CUDA     |
 * | function, even cudaGetDeviceCount(), would fork workers whose CUDA   |
 * | is broken. gpupool itself enumerates GPUs in a short-lived child.    |
 * | This file includes no CUDA header, so the compiler helps keep it so. |
 * +----------------------------------------------------------------------+
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <gpupool.h>

#include "cuda_map.h"

#define DEF_ITEMS	8
#define DEF_BYTES	(1u << 20)
#define MAX_ITEMS	1000
#define MAX_BYTES	(16u << 20)
#define MAX_TOTAL	(256u << 20)	/* all items' bytes together */
#define FAKE_GPUS	2	/* when the machine has no GPU */
#define WHERE_LEN	108

/* What sums_item() returns for one item. */
struct cm_result {
	struct cm_sums	 sums;
	int32_t		 on_gpu;	/* 1: computed on the GPU */
	char		 where[WHERE_LEN];	/* the device, or why the CPU */
};

/*
 * Worker state, set by worker_init(). Each worker is a process of its
 * own, so these statics belong to one worker; the master's copies are
 * never set.
 */
static int	 on_gpu;
static char	 where[WHERE_LEN];

/* The sums on the CPU: the fallback, and the master's reference. */
static void
cpu_sums(const void *buf, size_t len, struct cm_sums *out)
{
	const unsigned char	*p = buf;
	size_t			 i;

	out->sum = out->sumsq = 0;
	for (i = 0; i < len; i++) {
		out->sum += p[i];
		out->sumsq += (uint64_t)p[i] * p[i];
	}
}

/* Worker: runs once, after the pool has pinned it and set its
 * CUDA_VISIBLE_DEVICES, before its first item. */
static int
worker_init(struct gp_ctx *ctx, void *arg)
{
	const struct gp_worker_info	*wi = gp_ctx_info(ctx);
	char				 name[96], err[160];

	switch (cm_gpu_open(name, sizeof(name), err, sizeof(err))) {
	case 1:
		on_gpu = 1;
		snprintf(where, sizeof(where), "GPU %s", name);
		return 0;
	case 0:
		on_gpu = 0;
		snprintf(where, sizeof(where), "CPU fallback (%s)", err);
		return 0;
	default:
		/* A GPU that is there but unusable is an error, not a
		 * reason to fall back: the pool fails with GP_EINIT. */
		fprintf(stderr, "cuda_map: worker %d (CUDA_VISIBLE_DEVICES=%s):"
		    " %s\n", wi->worker, wi->visible, err);
		return 1;
	}
}

/* Worker: runs when the pool is destroyed. */
static void
worker_fini(struct gp_ctx *ctx, void *arg)
{
	if (on_gpu)
		cm_gpu_close();
}

/* Worker: the task, once per item. */
static int
sums_item(struct gp_ctx *ctx, const void *in, size_t inlen, void *arg)
{
	struct cm_result	 r;
	char			 err[160];

	memset(&r, 0, sizeof(r));
	if (on_gpu) {
		if (cm_gpu_sums(in, inlen, &r.sums, err, sizeof(err)) < 0) {
			/* The reason goes back as the item's bytes; if even
			 * that fails, the status alone says it failed. */
			(void)gp_ctx_reply(ctx, err, strlen(err) + 1);
			return 1;
		}
	} else
		cpu_sums(in, inlen, &r.sums);
	r.on_gpu = on_gpu;
	snprintf(r.where, sizeof(r.where), "%s", where);
	return gp_ctx_reply(ctx, &r, sizeof(r)) == 0 ? 0 : 2;
}

/* Item i's bytes: xorshift64* noise, seeded by i, reproducible. */
static void
fill(unsigned char *p, size_t len, size_t i)
{
	uint64_t	 x = 0x9e3779b97f4a7c15ull * (i + 1);
	size_t		 k;

	for (k = 0; k < len; k++) {
		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		p[k] = (unsigned char)((x * 0x2545f4914f6cdd1dull) >> 56);
	}
}

static double
now(void)
{
	struct timespec	 ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
number(const char *s, long max, size_t *out)
{
	char	*end;
	long	 v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || *end != '\0' || end == s || v < 0 || v > max) {
		fprintf(stderr, "cuda_map: '%s' is not a number in 0..%ld\n",
		    s, max);
		return -1;
	}
	*out = (size_t)v;
	return 0;
}

static int
make_pool(struct gp_pool **pool)
{
	struct gp_pool_opts	 opts = { 0 };
	char			 err[256];
	int			 rc;

	opts.init = worker_init;
	opts.fini = worker_fini;
	opts.errbuf = err;
	opts.errlen = sizeof(err);
	if ((rc = gp_pool_create(pool, &opts)) == GP_ENOGPU) {
		fprintf(stderr, "cuda_map: %s\n", err);
		fprintf(stderr, "cuda_map: using %d fake GPUs instead "
		    "(the workers will compute on the CPU)\n", FAKE_GPUS);
		opts.fake_gpus = FAKE_GPUS;
		rc = gp_pool_create(pool, &opts);
	}
	if (rc < 0)
		fprintf(stderr, "cuda_map: cannot create the pool: %s\n",
		    err[0] != '\0' ? err : gp_strerror(rc));
	return rc;
}

int
main(int argc, char *argv[])
{
	struct gp_pool		*pool;
	struct gp_worker_info	 wi;
	struct gp_item		*items = NULL;
	unsigned char		*data = NULL;
	struct cm_sums		 ref;
	struct cm_result	 r;
	char			 why[160];
	char			(*seen)[WHERE_LEN] = NULL;	/* per worker */
	size_t			 i, n = DEF_ITEMS, len = DEF_BYTES;
	size_t			 ok = 0, good = 0, ngpu = 0;
	double			 t0, t1;
	int			 rc, w, nw;

	if (argc > 3 || (argc > 1 && argv[1][0] == '-')) {
		fprintf(stderr, "usage: cuda_map [items [bytes]]\n");
		return 2;
	}
	if ((argc > 1 && number(argv[1], MAX_ITEMS, &n) < 0) ||
	    (argc > 2 && number(argv[2], MAX_BYTES, &len) < 0))
		return 2;
	if (len > 0 && n > MAX_TOTAL / len) {
		fprintf(stderr, "cuda_map: %zu items of %zu bytes is over "
		    "%u MiB\n", n, len, MAX_TOTAL >> 20);
		return 2;
	}

	/* First, while this process is single-threaded and has not touched
	 * CUDA (it never will): fork the workers. */
	if (make_pool(&pool) < 0)
		return 3;
	nw = gp_pool_size(pool);
	for (w = 0; w < nw; w++)
		if (gp_pool_info(pool, w, &wi) == 0)
			printf("worker %d: GPU %d (%s) CUDA_VISIBLE_DEVICES=%s "
			    "NUMA %d CPUs %s\n", w, wi.gpu,
			    wi.name[0] != '\0' ? wi.name : "?", wi.visible,
			    wi.numa, wi.cpuset);

	if ((items = calloc(n ? n : 1, sizeof(*items))) == NULL ||
	    (data = malloc(n * len + 1)) == NULL ||
	    (seen = calloc((size_t)nw, sizeof(*seen))) == NULL) {
		fprintf(stderr, "cuda_map: %s\n", strerror(errno));
		rc = 3;
		goto out;
	}
	for (i = 0; i < n; i++) {
		fill(data + i * len, len, i);
		gp_item_init(&items[i], data + i * len, len);
	}

	t0 = now();
	rc = gp_pool_map(pool, sums_item, NULL, 0, items, n);
	t1 = now();
	if (rc < 0) {
		fprintf(stderr, "cuda_map: map: %s\n", gp_strerror(rc));
		rc = 3;
		goto out;
	}

	for (i = 0; i < n; i++) {
		if (items[i].status != GP_OK) {
			/* A failed item's bytes, if any, are its reason. */
			if (items[i].status == GP_FAILED && items[i].outlen > 0)
				printf("item %zu: failed: %.*s\n", i,
				    (int)items[i].outlen,
				    (const char *)items[i].out);
			else
				printf("item %zu: %s\n", i, gp_item_strerror(
				    &items[i], why, sizeof(why)));
			continue;
		}
		if (items[i].outlen != sizeof(r)) {
			printf("item %zu: result of %zu bytes, expected %zu\n",
			    i, items[i].outlen, sizeof(r));
			continue;
		}
		ok++;
		memcpy(&r, items[i].out, sizeof(r));
		r.where[sizeof(r.where) - 1] = '\0';
		ngpu += r.on_gpu != 0;
		w = items[i].worker;
		if (w >= 0 && w < nw && seen[w][0] == '\0')
			memcpy(seen[w], r.where, WHERE_LEN);
		cpu_sums(items[i].in, items[i].inlen, &ref);
		good += ref.sum == r.sums.sum && ref.sumsq == r.sums.sumsq;
		printf("item %zu: %zu bytes sum %ju sumsq %ju mean %.3f "
		    "on worker %d, %s%s\n", i, items[i].inlen,
		    (uintmax_t)r.sums.sum, (uintmax_t)r.sums.sumsq,
		    len ? (double)r.sums.sum / (double)len : 0.0, w,
		    r.on_gpu ? "GPU" : "CPU fallback",
		    ref.sum == r.sums.sum && ref.sumsq == r.sums.sumsq ? "" :
		    ", WRONG");
	}
	for (w = 0; w < nw; w++)
		if (seen[w][0] != '\0')
			printf("worker %d computed on: %s\n", w, seen[w]);
	printf("%zu items: %zu ok, %zu failed; %zu match the CPU reference; "
	    "%zu on GPU, %zu on CPU fallback; %.3f s on %d workers\n", n, ok,
	    n - ok, good, ngpu, ok - ngpu, t1 - t0, nw);
	rc = good == n ? 0 : 1;

out:
	if (items != NULL)
		gp_items_release(items, n);
	free(items);
	free(data);
	free(seen);
	gp_pool_destroy(pool);
	return rc;
}
