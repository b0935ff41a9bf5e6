/*
 * bench_pool.c: libgpupool's dispatch costs on fake GPUs, and the raw
 * lower bounds they are measured against. One JSON line per figure. The
 * harness (bench/run.py) runs one measurement per process and interleaves
 * them with Python's pools; run without a verb it measures everything
 * itself, interleaved, for `meson test --benchmark`.
 *
 *	bench_pool [ROUNDS]		everything, ROUNDS rounds (default 5)
 *	bench_pool roundtrip N [nobind]	one item in flight (gp_pool_run, 1 worker)
 *	bench_pool raw-pipe N		ping-pong with a child over two pipes
 *	bench_pool raw-sock N		the same over a socketpair
 *	bench_pool pingpong N BLOCKS [nobind]
 *					the three above, interleaved in
 *					blocks of N round trips: one JSON
 *					line per block; nobind: the worker
 *					keeps the caller's CPU affinity
 *					(for taskset -c 0: all on one CPU)
 *	bench_pool trivial N [bufs]	pool_map of N ints (x * 2), 4 workers;
 *					bufs: gp_pool_map with
 *					GP_POOL_OUT_BUFFERS, results into
 *					the caller's array (no malloc each)
 *	bench_pool raw-batch N [B]	4 children over pipes, B ints a message
 *	bench_pool skewed FILE		pool_map of sleeps (seconds, one a
 *					line, in file order), 4 workers
 *	bench_pool payload SIZE N [bufs|view]
 *					pool_map echoing SIZE bytes, 4
 *					workers (each result a fresh malloc);
 *					bufs: into the caller's buffers,
 *					written once before the clock starts
 *					(a pipeline that reuses its buffers);
 *					view: gp_pool_run, each result read
 *					and checked in done() where it lies
 *					(GP_POOL_OUT_VIEW: not copied)
 *	bench_pool memcpy SIZE N	N memcpys of SIZE bytes, one thread:
 *					this machine's bandwidth, the bound
 *					the payload figures are set against
 *
 * pool_map runs on the default pool with GPUPOOL_FAKE_GPUS=4 (unless the
 * environment sets it); a small warm-up map creates the pool first, so
 * the timed map never includes the fork of the workers ("startup_s" says
 * what that took). Uses only the public header.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpupool.h"
#include "raw.h"


static int
cmp_dbl(const void *a, const void *b)
{
	double	 x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int
cmp_desc(const void *a, const void *b)
{
	return -cmp_dbl(a, b);
}

static double
median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_dbl);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void
die(const char *what, int rc)
{
	fprintf(stderr, "bench_pool: %s: %s\n", what, gp_strerror(rc));
	exit(1);
}

static int
twice(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int	 x;

	memcpy(&x, in, sizeof(x));
	x *= 2;
	return gp_ctx_reply(ctx, &x, sizeof(x));
}

static int
echo(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	return gp_ctx_reply(ctx, in, len);
}

static int
nap(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	double		 s;
	struct timespec	 ts;

	memcpy(&s, in, sizeof(s));
	ts.tv_sec = (time_t)s;
	ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
	return 0;
}

/* With "bufs": a pool of 4 fake GPUs whose results go into the
 * caller's buffers (GP_POOL_OUT_BUFFERS), else NULL: the default pool. */
static struct gp_pool	*bufpool;

/* map of n items on bufpool or the default pool. */
static void
map4(gp_fn *fn, struct gp_item *it, size_t n)
{
	int	 rc;

	rc = bufpool ? gp_pool_map(bufpool, fn, NULL, 0, it, n) :
	    pool_map(fn, it, n);
	if (rc < 0)
		die("map", rc);
}

/* Create the pool (bufs: bufpool, else the default pool) with a tiny
 * map; seconds it took. */
static double
pool_start(int bufs)
{
	struct gp_pool_opts	 o = { .fake_gpus = WORKERS,
				       .flags = GP_POOL_OUT_BUFFERS };
	struct gp_item		 it[WORKERS * 4];
	int			 v[WORKERS * 4], r[WORKERS * 4], rc, i;
	double			 t0 = now_s();

	setenv("GPUPOOL_FAKE_GPUS", "4", 0);
	if (bufs && (rc = gp_pool_create(&bufpool, &o)) < 0)
		die("gp_pool_create", rc);
	memset(it, 0, sizeof(it));
	for (i = 0; i < WORKERS * 4; i++) {
		v[i] = i;
		it[i].in = &v[i];
		it[i].inlen = sizeof(v[i]);
		it[i].out = bufs ? &r[i] : NULL;
		it[i].outlen = bufs ? sizeof(r[i]) : 0;
	}
	map4(twice, it, WORKERS * 4);
	if (!bufs)
		gp_items_release(it, WORKERS * 4);
	return now_s() - t0;
}

/* Each item's out: with bufpool, size bytes of buf (written first, so
 * that no page is faulted in the timed map); else none. */
static void
set_outs(struct gp_item *it, size_t n, uint8_t *buf, size_t size)
{
	size_t	 i;

	if (bufpool == NULL)
		return;
	memset(buf, 0, n * size);
	for (i = 0; i < n; i++) {
		it[i].out = buf + i * size;
		it[i].outlen = size;
	}
}

/* One item in flight: next() offers an item only when none is out. */
struct one {
	struct gp_item	 it;
	int		 x, out, left;
};

static int
one_next(void *arg, struct gp_item **item)
{
	struct one	*o = arg;

	if (o->left == 0)
		return -1;
	if (o->out)
		return 0;
	o->out = 1;
	o->left--;
	memset(&o->it, 0, sizeof(o->it));
	o->it.in = &o->x;
	o->it.inlen = sizeof(o->x);
	*item = &o->it;
	return 1;
}

static int
one_done(void *arg, struct gp_item *item)
{
	struct one	*o = arg;

	o->out = 0;
	free(item->out);
	item->out = NULL;
	return 0;
}

static double
pool_pingpong(struct gp_pool *p, int n)
{
	struct one	 o = { .left = n };
	struct gp_feed	 f = { .next = one_next, .done = one_done,
			       .in_fd = -1, .ctl_fd = -1, .arg = &o };
	double		 t0 = now_s();
	int		 rc;

	if ((rc = gp_pool_run(p, twice, NULL, 0, &f)) < 0)
		die("gp_pool_run", rc);
	return (now_s() - t0) / n * 1e6;
}

/* One worker on a fake GPU; nobind: it keeps the caller's CPU affinity
 * (the library would otherwise widen it to the GPU's locality, here the
 * whole machine, even under taskset). */
static struct gp_pool *
pool1(int nobind)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 1,
				       .flags = nobind ? GP_POOL_NO_BIND : 0 };
	int			 rc;

	if ((rc = gp_pool_create(&p, &o)) < 0)
		die("gp_pool_create", rc);
	return p;
}

/* pool_map of n ints, x * 2: items per second. */
static double
trivial(size_t n)
{
	struct gp_item	*it = calloc(n, sizeof(*it));
	int		*v = malloc(n * sizeof(int));
	int		*r = malloc(n * sizeof(int));
	size_t		 i;
	double		 t0, t;

	if (it == NULL || v == NULL || r == NULL)
		exit(1);
	for (i = 0; i < n; i++) {
		v[i] = (int)i;
		it[i].in = &v[i];
		it[i].inlen = sizeof(int);
	}
	set_outs(it, n, (uint8_t *)r, sizeof(int));
	t0 = now_s();
	map4(twice, it, n);
	t = now_s() - t0;
	for (i = 0; i < n; i++)
		if (it[i].status != GP_OK || it[i].outlen != sizeof(int) ||
		    *(int *)it[i].out != 2 * (int)i)
			die("trivial: wrong result", 0);
	if (bufpool == NULL)
		gp_items_release(it, n);
	free(it);
	free(v);
	free(r);
	return (double)n / t;
}

/* Greedy list scheduling of d[0..n) on w machines, in the given order. */
static double
greedy(const double *d, int n, int w)
{
	double	 load[64] = { 0 }, m = 0;
	int	 i, j, k;

	for (i = 0; i < n; i++) {
		for (j = 1, k = 0; j < w; j++)
			if (load[j] < load[k])
				k = j;
		load[k] += d[i];
	}
	for (j = 0; j < w; j++)
		if (load[j] > m)
			m = load[j];
	return m;
}

/* pool_map of sleeps d[0..n): makespan in seconds. */
static double
skewed(const double *d, int n)
{
	struct gp_item	*it = calloc((size_t)n, sizeof(*it));
	double		 t0, t;
	int		 i, rc;

	if (it == NULL)
		exit(1);
	for (i = 0; i < n; i++) {
		it[i].in = &d[i];
		it[i].inlen = sizeof(d[i]);
	}
	t0 = now_s();
	if ((rc = pool_map(nap, it, (size_t)n)) < 0)
		die("pool_map", rc);
	t = now_s() - t0;
	for (i = 0; i < n; i++)
		if (it[i].status != GP_OK)
			die("skewed: an item failed", 0);
	gp_items_release(it, (size_t)n);
	free(it);
	return t;
}

/* The built-in skewed set: Pareto(alpha 1.5), 5 ms scale, capped 0.5 s. */
static void
skewed_set(double *d, int n, int sorted)
{
	unsigned	 seed = 42;
	int		 i;

	for (i = 0; i < n; i++) {
		double	 u = (rand_r(&seed) + 1.0) / ((double)RAND_MAX + 2.0);

		d[i] = 0.005 / pow(u, 1 / 1.5);
		if (d[i] > 0.5)
			d[i] = 0.5;
	}
	if (sorted)
		qsort(d, (size_t)n, sizeof(d[0]), cmp_desc);
}

/* pool_map echoing size bytes, n items: items per second. */
static double
payload(size_t size, size_t n)
{
	struct gp_item	*it = calloc(n, sizeof(*it));
	unsigned char	*in = malloc(size);
	uint8_t		*r = bufpool ? malloc(n * size) : NULL;
	size_t		 i;
	double		 t0, t;

	if (it == NULL || in == NULL || (bufpool && r == NULL))
		exit(1);
	for (i = 0; i < size; i++)
		in[i] = (unsigned char)(i * 7 + 1);
	for (i = 0; i < n; i++) {
		it[i].in = in;		/* every item reads the same bytes */
		it[i].inlen = size;
	}
	set_outs(it, n, r, size);
	t0 = now_s();
	map4(echo, it, n);
	t = now_s() - t0;
	for (i = 0; i < n; i++)
		if (it[i].status != GP_OK || it[i].outlen != size ||
		    memcmp(it[i].out, in, size) != 0)
			die("payload: wrong result", 0);
	if (bufpool == NULL)
		gp_items_release(it, n);
	free(it);
	free(in);
	free(r);
	return (double)n / t;
}

/* The stream of a "view" payload run: each item once; done() reads the
 * whole result where it lies (GP_POOL_OUT_VIEW: no copy) and checks it. */
struct viewrun {
	struct gp_item		*it;
	const unsigned char	*in;
	size_t			 n, next, size, bad;
};

static int
view_next(void *arg, struct gp_item **item)
{
	struct viewrun	*v = arg;

	if (v->next == v->n)
		return GP_FEED_END;
	*item = &v->it[v->next++];
	return GP_FEED_ITEM;
}

static int
view_done(void *arg, struct gp_item *item)
{
	struct viewrun	*v = arg;

	v->bad += item->status != GP_OK || item->outlen != v->size ||
	    memcmp(item->out, v->in, v->size) != 0;
	return 0;
}

/* payload() through gp_pool_run on a GP_POOL_OUT_VIEW pool: items per
 * second, the check of each result inside the clock. */
static double
payload_view(size_t size, size_t n)
{
	struct gp_pool_opts	 o = { .fake_gpus = WORKERS,
				       .flags = GP_POOL_OUT_VIEW };
	struct viewrun		 v = { .n = n, .size = size };
	struct gp_feed		 f = { .next = view_next, .done = view_done,
				       .in_fd = -1, .ctl_fd = -1, .arg = &v };
	struct gp_pool		*p;
	unsigned char		*in = malloc(size);
	size_t			 i;
	double			 t0, t;
	int			 rc;

	v.it = calloc(n, sizeof(*v.it));
	if (v.it == NULL || in == NULL)
		exit(1);
	for (i = 0; i < size; i++)
		in[i] = (unsigned char)(i * 7 + 1);
	for (i = 0; i < n; i++)
		gp_item_init(&v.it[i], in, size);
	v.in = in;
	if ((rc = gp_pool_create(&p, &o)) < 0)
		die("gp_pool_create", rc);
	t0 = now_s();
	if ((rc = gp_pool_run(p, echo, NULL, 0, &f)) < 0)
		die("gp_pool_run", rc);
	t = now_s() - t0;
	if (v.bad)
		die("payload: wrong result", 0);
	gp_pool_destroy(p);
	free(v.it);
	free(in);
	return (double)n / t;
}

static int
legacy(int rounds)
{
	double		 raw[32], pp[32], tr[32], sk[2][32], d[2][100];
	struct gp_pool	*p1;
	const int	 n_rt = 20000;
	const size_t	 n_tr = 1000000;
	int		 r;

	if (rounds < 1 || rounds > 32)
		rounds = 5;
	skewed_set(d[0], 100, 0);
	skewed_set(d[1], 100, 1);
	p1 = pool1(0);
	pool_start(0);
	/* Interleaved A B A B so drift hits both sides alike. */
	for (r = 0; r < rounds; r++) {
		raw[r] = raw_pingpong(n_rt, 0);
		pp[r] = pool_pingpong(p1, n_rt);
		tr[r] = trivial(n_tr);
		sk[0][r] = skewed(d[0], 100) / greedy(d[0], 100, WORKERS);
		sk[1][r] = skewed(d[1], 100) / greedy(d[1], 100, WORKERS);
	}
	printf("{\"bench\":\"roundtrip_raw_us\",\"median\":%.2f}\n",
	    median(raw, rounds));
	printf("{\"bench\":\"roundtrip_pool_us\",\"median\":%.2f}\n",
	    median(pp, rounds));
	printf("{\"bench\":\"roundtrip_ratio\",\"median\":%.3f}\n",
	    median(pp, rounds) / median(raw, rounds));
	printf("{\"bench\":\"trivial_items_per_s\",\"n\":%zu,\"workers\":%d,"
	    "\"median\":%.0f}\n", n_tr, WORKERS, median(tr, rounds));
	printf("{\"bench\":\"skewed_given_over_ideal\",\"median\":%.3f}\n",
	    median(sk[0], rounds));
	printf("{\"bench\":\"skewed_lpt_over_ideal\",\"median\":%.3f}\n",
	    median(sk[1], rounds));
	gp_pool_destroy(p1);
	gp_pool_destroy(bufpool);
	gp_default_pool_destroy();
	return 0;
}

static double *
read_durations(const char *path, int *n)
{
	FILE	*f = fopen(path, "re");
	double	*d = NULL, x;
	int	 cap = 0;

	if (f == NULL) {
		perror(path);
		exit(2);
	}
	*n = 0;
	while (fscanf(f, "%lf", &x) == 1) {
		if (*n == cap) {
			cap = cap ? cap * 2 : 128;
			if ((d = realloc(d, (size_t)cap * sizeof(*d))) == NULL)
				exit(1);
		}
		d[(*n)++] = x;
	}
	fclose(f);
	return d;
}

/* bench_pool pingpong N BLOCKS [nobind]: blocks of n round trips,
 * interleaved: pipe, socket, pool; the echo children live as long as the
 * pool's worker. */
static void
verb_pingpong(int n, int blocks, int nobind)
{
	struct gp_pool		*p = pool1(nobind);
	struct echo_child	 ep, es;
	int			 b;

	echo_start(&ep, 1);
	echo_start(&es, 0);
	echo_run(&ep, n / 10 + 1);
	echo_run(&es, n / 10 + 1);
	pool_pingpong(p, n / 10 + 1);
	for (b = 0; b < blocks; b++) {
		double	 rp = echo_run(&ep, n);
		double	 rs = echo_run(&es, n);
		double	 pp = pool_pingpong(p, n);

		printf("{\"bench\":\"pingpong\",\"n\":%d,"
		    "\"raw_pipe_us\":%.3f,\"raw_sock_us\":%.3f,"
		    "\"pool_us\":%.3f}\n", n, rp, rs, pp);
	}
	echo_stop(&ep);
	echo_stop(&es);
	gp_pool_destroy(p);
}

/* bench_pool payload SIZE N [bufs|view]: items of size bytes echoed. */
static void
verb_payload(size_t size, size_t n, const char *how)
{
	int	 view = how != NULL && strcmp(how, "view") == 0;
	double	 ips, startup;

	startup = view ? 0 : pool_start(how != NULL);
	ips = view ? payload_view(size, n) : payload(size, n);
	printf("{\"bench\":\"payload\",\"size\":%zu,\"n\":%zu,"
	    "\"items_per_s\":%.1f,\"mb_per_s\":%.3f,"
	    "\"startup_s\":%.6f}\n", size, n, ips,
	    ips * (double)size / 1e6, startup);
}

int
main(int argc, char **argv)
{
	const char	*verb = argc > 1 ? argv[1] : "5";
	double		 startup;

	if (strspn(verb, "0123456789") == strlen(verb))
		return legacy(atoi(verb));
	if (strcmp(verb, "raw-pipe") == 0 || strcmp(verb, "raw-sock") == 0) {
		int	 n = argc > 2 ? atoi(argv[2]) : 20000;
		int	 pipes = verb[4] == 'p';

		printf("{\"bench\":\"%s\",\"n\":%d,\"us\":%.3f}\n", verb, n,
		    raw_pingpong(n, pipes));
	} else if (strcmp(verb, "pingpong") == 0 && (argc == 4 || (argc == 5 &&
	    strcmp(argv[4], "nobind") == 0))) {
		verb_pingpong(atoi(argv[2]), atoi(argv[3]), argc == 5);
	} else if (strcmp(verb, "roundtrip") == 0 && (argc < 4 || (argc == 4 &&
	    strcmp(argv[3], "nobind") == 0))) {
		int		 n = argc > 2 ? atoi(argv[2]) : 20000;
		double		 t0 = now_s();
		struct gp_pool	*p = pool1(argc == 4);

		startup = now_s() - t0;
		pool_pingpong(p, n / 10 + 1);		/* warm-up */
		printf("{\"bench\":\"roundtrip\",\"n\":%d,\"us\":%.3f,"
		    "\"startup_s\":%.6f}\n", n, pool_pingpong(p, n), startup);
		gp_pool_destroy(p);
	} else if (strcmp(verb, "trivial") == 0 && (argc == 3 || (argc == 4 &&
	    strcmp(argv[3], "bufs") == 0))) {
		size_t	 n = strtoul(argv[2], NULL, 10);

		startup = pool_start(argc == 4);
		printf("{\"bench\":\"trivial\",\"n\":%zu,\"items_per_s\":%.1f,"
		    "\"bufs\":%d,\"startup_s\":%.6f}\n", n, trivial(n),
		    argc == 4, startup);
	} else if (strcmp(verb, "raw-batch") == 0 && argc >= 3) {
		size_t		 n = strtoul(argv[2], NULL, 10);
		uint32_t	 b = argc > 3 ? (uint32_t)atoi(argv[3]) : 1024;

		printf("{\"bench\":\"raw-batch\",\"n\":%zu,\"batch\":%u,"
		    "\"items_per_s\":%.1f}\n", n, b, raw_batch(n, b));
	} else if (strcmp(verb, "skewed") == 0 && argc == 3) {
		int	 n;
		double	*d = read_durations(argv[2], &n), t;

		startup = pool_start(0);
		t = skewed(d, n);
		printf("{\"bench\":\"skewed\",\"n\":%d,\"makespan_s\":%.6f,"
		    "\"ideal_s\":%.6f,\"startup_s\":%.6f}\n", n, t,
		    greedy(d, n, WORKERS), startup);
		free(d);
	} else if (strcmp(verb, "payload") == 0 && (argc == 4 || (argc == 5 &&
	    (strcmp(argv[4], "bufs") == 0 || strcmp(argv[4], "view") == 0)))) {
		verb_payload(strtoul(argv[2], NULL, 10),
		    strtoul(argv[3], NULL, 10), argc == 5 ? argv[4] : NULL);
	} else if (strcmp(verb, "memcpy") == 0 && argc == 4) {
		size_t	 size = strtoul(argv[2], NULL, 10);
		size_t	 n = strtoul(argv[3], NULL, 10);
		double	 bps = size && n ? memcpy_bw(size, n) : 0;

		printf("{\"bench\":\"memcpy\",\"size\":%zu,\"n\":%zu,"
		    "\"mb_per_s\":%.3f,\"gb_per_s\":%.4f}\n", size, n,
		    bps / 1e6, bps / 1e9);
	} else {
		fprintf(stderr, "usage: bench_pool [ROUNDS] | roundtrip N [nobind] | "
		    "raw-pipe N | raw-sock N | pingpong N BLOCKS [nobind] | "
		    "trivial N [bufs] | "
		    "raw-batch N [B] | skewed FILE | payload SIZE N [bufs|view] | "
		    "memcpy SIZE N\n");
		return 2;
	}
	gp_pool_destroy(bufpool);
	gp_default_pool_destroy();
	return 0;
}
