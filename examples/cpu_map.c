/*
 * cpu_map.c: count the primes below N on a gpupool, one range per item.
 *
 * The plain CPU example, and the one the README's quick start runs: make a
 * pool (one worker per GPU; fake GPUs when the machine has none), show
 * where each worker was placed, map a real computation over the items,
 * then print each item's result in item order and a summary.
 *
 *	usage: cpu_map [items]		(default 12 items of 100000 numbers)
 *
 * Exit status: 0 every item ok, 1 some item failed, 2 usage, 3 the pool
 * could not be created or run.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <gpupool.h>

#define RANGE		100000	/* numbers per item */
#define DEF_ITEMS	12
#define MAX_ITEMS	100000
#define FAKE_GPUS	4	/* when the machine has no GPU */

/* An item's input: count the primes in [lo, hi). */
struct range {
	uint64_t	 lo;
	uint64_t	 hi;
};

static int
is_prime(uint64_t n)
{
	uint64_t	 d;

	if (n < 4)
		return n >= 2;
	if (n % 2 == 0 || n % 3 == 0)
		return 0;
	for (d = 5; d * d <= n; d += 6)
		if (n % d == 0 || n % (d + 2) == 0)
			return 0;
	return 1;
}

/*
 * The task. It runs in a worker process, not in main()'s: it gets a copy
 * of the item's bytes and returns its result with gp_ctx_reply(). A nonzero
 * return marks the item GP_FAILED with that code.
 */
static int
count_primes(struct gp_ctx *ctx, const void *in, size_t inlen, void *arg)
{
	struct range	 r;
	uint64_t	 n, count = 0;

	if (inlen != sizeof(r))
		return 2;	/* not an item of ours */
	memcpy(&r, in, sizeof(r));	/* in has no alignment guarantee */
	for (n = r.lo; n < r.hi; n++)
		count += is_prime(n);
	return gp_ctx_reply(ctx, &count, sizeof(count)) == 0 ? 0 : 3;
}

static double
now(void)
{
	struct timespec	 ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
make_pool(struct gp_pool **pool)
{
	struct gp_pool_opts	 opts = { 0 };
	char			 err[256];
	int			 rc;

	opts.errbuf = err;
	opts.errlen = sizeof(err);
	if ((rc = gp_pool_create(pool, &opts)) == GP_ENOGPU) {
		/* No GPU here: run the same code on fake GPUs instead. */
		fprintf(stderr, "cpu_map: %s\n", err);
		fprintf(stderr, "cpu_map: using %d fake GPUs instead\n",
		    FAKE_GPUS);
		opts.fake_gpus = FAKE_GPUS;
		rc = gp_pool_create(pool, &opts);
	}
	if (rc < 0)
		fprintf(stderr, "cpu_map: cannot create the pool: %s\n",
		    err[0] != '\0' ? err : gp_strerror(rc));
	return rc;
}

static void
show_workers(const struct gp_pool *pool)
{
	struct gp_worker_info	 wi;
	int			 i, n = gp_pool_size(pool);

	for (i = 0; i < n; i++) {
		if (gp_pool_info(pool, i, &wi) < 0)
			continue;
		printf("worker %d: GPU %d (%s) CUDA_VISIBLE_DEVICES=%s "
		    "NUMA %d CPUs %s [%s] pid %ld\n", wi.worker, wi.gpu,
		    wi.name[0] != '\0' ? wi.name : "?", wi.visible, wi.numa,
		    wi.cpuset, wi.where, (long)wi.pid);
	}
}

int
main(int argc, char *argv[])
{
	struct gp_pool	*pool;
	struct gp_item	*items = NULL;
	struct range	*ranges = NULL;
	uint64_t	 count, total = 0;
	size_t		 i, n = DEF_ITEMS, ok = 0;
	double		 t0, t1;
	char		*end, why[128];
	long		 v;
	int		 rc;

	if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
		fprintf(stderr, "usage: cpu_map [items]\n");
		return 2;
	}
	if (argc == 2) {
		errno = 0;
		v = strtol(argv[1], &end, 10);
		if (errno != 0 || *end != '\0' || v < 1 || v > MAX_ITEMS) {
			fprintf(stderr, "cpu_map: '%s' is not an item count "
			    "(1..%d)\n", argv[1], MAX_ITEMS);
			return 2;
		}
		n = (size_t)v;
	}

	/* Create the pool first, while this process has no threads. */
	if (make_pool(&pool) < 0)
		return 3;
	show_workers(pool);

	if ((items = calloc(n, sizeof(*items))) == NULL ||
	    (ranges = calloc(n, sizeof(*ranges))) == NULL) {
		fprintf(stderr, "cpu_map: %s\n", strerror(errno));
		rc = 3;
		goto out;
	}
	for (i = 0; i < n; i++) {
		ranges[i].lo = (uint64_t)i * RANGE;
		ranges[i].hi = (uint64_t)(i + 1) * RANGE;
		gp_item_init(&items[i], &ranges[i], sizeof(ranges[i]));
	}

	t0 = now();
	rc = gp_pool_map(pool, count_primes, NULL, 0, items, n);
	t1 = now();
	if (rc < 0) {
		fprintf(stderr, "cpu_map: map: %s\n", gp_strerror(rc));
		rc = 3;
		goto out;
	}

	/* Results are in item order, whatever order the workers took. */
	for (i = 0; i < n; i++) {
		if (items[i].status == GP_OK &&
		    items[i].outlen == sizeof(count)) {
			memcpy(&count, items[i].out, sizeof(count));
			total += count;
			ok++;
			printf("item %2zu: [%8ju, %8ju) %6ju primes  "
			    "(worker %d)\n", i, (uintmax_t)ranges[i].lo,
			    (uintmax_t)ranges[i].hi, (uintmax_t)count,
			    items[i].worker);
		} else
			printf("item %2zu: [%8ju, %8ju) %s (worker %d)\n", i,
			    (uintmax_t)ranges[i].lo, (uintmax_t)ranges[i].hi,
			    gp_item_strerror(&items[i], why, sizeof(why)),
			    items[i].worker);
	}
	printf("%zu items: %zu ok, %zu failed; %ju primes below %ju%s; "
	    "%.3f s on %d workers\n", n, ok, n - ok, (uintmax_t)total,
	    (uintmax_t)n * RANGE, ok == n ? "" : " (incomplete)", t1 - t0,
	    gp_pool_size(pool));
	rc = ok == n ? 0 : 1;

out:
	if (items != NULL)
		gp_items_release(items, n);
	free(items);
	free(ranges);
	gp_pool_destroy(pool);
	return rc;
}
