/*
 * bench_pool.c: libgpupool's dispatch costs on fake GPUs, against a raw
 * socketpair ping-pong in the same run. One JSON line per figure.
 *
 *	bench_pool [rounds]
 *
 * roundtrip: one item in flight at a time (gp_run), µs per item, and the
 *   raw lower bound: a forked echo child over a socketpair, same payload.
 * trivial: gp_map of N ints (x * 2) on 4 workers, items per second.
 * skewed: 100 sleeps from a fixed-seed heavy-tailed set, in given and in
 *   longest-first order, makespan over the greedy list-scheduling ideal.
 * Uses only the public header.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpupool.h"

static double
now_s(void)
{
	struct timespec	 ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
cmp_dbl(const void *a, const void *b)
{
	double	 x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
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

static struct gp_pool *
pool(int workers)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = workers };
	int			 rc;

	if ((rc = gp_pool_create(&p, &o)) < 0)
		die("gp_pool_create", rc);
	return p;
}

static int
twice(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int	 x;

	memcpy(&x, in, sizeof(x));
	x *= 2;
	return gp_reply(ctx, &x, sizeof(x));
}

/* Raw lower bound: n round trips of a 4-byte message to an echo child. */
static double
raw_pingpong(int n)
{
	int	 sv[2], x = 0, i;
	pid_t	 pid;
	double	 t0, t;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == -1)
		exit(1);
	if ((pid = fork()) == 0) {
		close(sv[0]);
		while (read(sv[1], &x, sizeof(x)) == sizeof(x)) {
			x *= 2;
			if (write(sv[1], &x, sizeof(x)) != sizeof(x))
				break;
		}
		_exit(0);
	}
	close(sv[1]);
	t0 = now_s();
	for (i = 0; i < n; i++)
		if (write(sv[0], &i, sizeof(i)) != sizeof(i) ||
		    read(sv[0], &x, sizeof(x)) != sizeof(x))
			exit(1);
	t = now_s() - t0;
	close(sv[0]);
	waitpid(pid, NULL, 0);
	return t / n * 1e6;
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

	if ((rc = gp_run(p, twice, NULL, 0, &f)) < 0)
		die("gp_run", rc);
	return (now_s() - t0) / n * 1e6;
}

static double
trivial(struct gp_pool *p, size_t n)
{
	struct gp_item	*it = calloc(n, sizeof(*it));
	int		*v = malloc(n * sizeof(int)), rc;
	size_t		 i;
	double		 t0, t;

	for (i = 0; i < n; i++) {
		v[i] = (int)i;
		it[i].in = &v[i];
		it[i].inlen = sizeof(int);
	}
	t0 = now_s();
	if ((rc = gp_map(p, twice, NULL, 0, it, n)) < 0)
		die("gp_map", rc);
	t = now_s() - t0;
	for (i = 0; i < n; i++)
		if (it[i].status != GP_OK || *(int *)it[i].out != 2 * (int)i)
			die("trivial: wrong result", 0);
	gp_items_release(it, n);
	free(it);
	free(v);
	return (double)n / t;
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

static int
cmp_desc(const void *a, const void *b)
{
	return -cmp_dbl(a, b);
}

static double
skewed(struct gp_pool *p, int w, int sorted)
{
	enum { N = 100 };
	double		 d[N];
	struct gp_item	 it[N];
	unsigned	 seed = 42;
	double		 t0, t;
	int		 i, rc;

	/* Pareto(alpha 1.5), 5 ms scale, capped at 0.5 s: fixed seed. */
	for (i = 0; i < N; i++) {
		double	 u = (rand_r(&seed) + 1.0) / ((double)RAND_MAX + 2.0);

		d[i] = 0.005 / pow(u, 1 / 1.5);
		if (d[i] > 0.5)
			d[i] = 0.5;
	}
	if (sorted)
		qsort(d, N, sizeof(d[0]), cmp_desc);
	memset(it, 0, sizeof(it));
	for (i = 0; i < N; i++) {
		it[i].in = &d[i];
		it[i].inlen = sizeof(d[i]);
	}
	t0 = now_s();
	if ((rc = gp_map(p, nap, NULL, 0, it, N)) < 0)
		die("gp_map", rc);
	t = now_s() - t0;
	return t / greedy(d, N, w);
}

int
main(int argc, char **argv)
{
	int		 rounds = argc > 1 ? atoi(argv[1]) : 5, r;
	double		 raw[32], pp[32], tr[32], sk[2][32];
	struct gp_pool	*p1, *p4;
	const int	 n_rt = 20000;
	const size_t	 n_tr = 1000000;

	if (rounds < 1 || rounds > 32)
		rounds = 5;
	p1 = pool(1);
	p4 = pool(4);
	/* Interleaved A B A B so drift hits both sides alike. */
	for (r = 0; r < rounds; r++) {
		raw[r] = raw_pingpong(n_rt);
		pp[r] = pool_pingpong(p1, n_rt);
		tr[r] = trivial(p4, n_tr);
		sk[0][r] = skewed(p4, 4, 0);
		sk[1][r] = skewed(p4, 4, 1);
	}
	printf("{\"bench\":\"roundtrip_raw_us\",\"median\":%.2f}\n",
	    median(raw, rounds));
	printf("{\"bench\":\"roundtrip_pool_us\",\"median\":%.2f}\n",
	    median(pp, rounds));
	printf("{\"bench\":\"roundtrip_ratio\",\"median\":%.3f}\n",
	    median(pp, rounds) / median(raw, rounds));
	printf("{\"bench\":\"trivial_items_per_s\",\"n\":%zu,\"workers\":4,"
	    "\"median\":%.0f}\n", n_tr, median(tr, rounds));
	printf("{\"bench\":\"skewed_given_over_ideal\",\"median\":%.3f}\n",
	    median(sk[0], rounds));
	printf("{\"bench\":\"skewed_lpt_over_ideal\",\"median\":%.3f}\n",
	    median(sk[1], rounds));
	gp_pool_destroy(p1);
	gp_pool_destroy(p4);
	return 0;
}
