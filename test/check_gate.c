/*
 * check_gate.c: the GPU placement decisions (src/gate.c) with no pool and
 * no NVML: monitor snapshots are built by hand as mon.c fills them, and
 * multi-GPU placement runs on the DGX-2 fixture's real domains, read
 * through gp_topo_near() from test/fixtures/nvidiaDGX2.xml.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gate.h"
#include "mon.h"
#include "topo.h"
#include "check_main.h"

#ifndef GP_FIXTURES
#error "GP_FIXTURES must be the fixture directory, as a string"
#endif

#define GiB(x)	((uint64_t)((x) * (double)(1ull << 30)))
#define NDGX	16

/* The DGX-2's GPUs in bus order (test/fixtures/README.md): 0-7 on
 * socket 0 and one baseboard, 8-15 on socket 1 and the other. */
static const char *const dgx2[NDGX] = {
	"0000:34:00.0", "0000:36:00.0", "0000:39:00.0", "0000:3b:00.0",
	"0000:57:00.0", "0000:59:00.0", "0000:5c:00.0", "0000:5e:00.0",
	"0000:b7:00.0", "0000:b9:00.0", "0000:bc:00.0", "0000:be:00.0",
	"0000:e0:00.0", "0000:e2:00.0", "0000:e5:00.0", "0000:e7:00.0",
};

static struct gp_mon_snap *
snap(int n)
{
	struct gp_mon_snap *s;
	int		 i;

	s = calloc(1, sizeof(*s) + (size_t)n * sizeof(s->gpu[0]));
	ck_assert_ptr_nonnull(s);
	s->ok = 1;
	s->ngpu = n;
	for (i = 0; i < n; i++) {
		s->gpu[i].found = 1;
		s->gpu[i].procs_known = 1;
		s->gpu[i].util = 10;
		s->gpu[i].total = GiB(80);
		s->gpu[i].used = GiB(0.5);
	}
	return s;
}

static void
addproc(struct gp_mon_gpu *g, int pid, int worker, uint64_t mem, int sm)
{
	struct gp_mon_proc *p = &g->proc[g->nproc++];

	p->pid = pid;
	p->worker = worker;
	p->mem = mem;
	p->sm = sm;
}

/* GPU state as the dispatcher starts it: nothing known, no domain. */
static void
fresh(struct gp_gstate *g, int n)
{
	int	 i, lv;

	memset(g, 0, (size_t)n * sizeof(*g));
	for (i = 0; i < n; i++)
		for (lv = 0; lv < GP_NEAR_LEVELS; lv++)
			g[i].dom[lv] = -1;
}

/* One GPU sampled from s with a 10 % threshold. */
static struct gp_gstate
sample1(struct gp_mon_snap *s)
{
	struct gp_gstate g;

	fresh(&g, 1);
	gp_gate_sample(&g, 1, s, &(struct gp_gate_policy){ .busy_pct = 10 });
	free(s);
	return g;
}

START_TEST(sample_free)
{
	struct gp_mon_snap *s = snap(1);
	struct gp_gstate g;

	addproc(&s->gpu[0], 100, 0, GiB(5), 40);
	s->gpu[0].used = GiB(5.5);
	g = sample1(s);
	ck_assert_int_eq(g.known, 1);
	ck_assert_int_eq(g.busy, 0);
	ck_assert_str_eq(g.why, "free");
	ck_assert_uint_eq(g.total, GiB(80));
	ck_assert_uint_eq(g.ours, GiB(5));
	ck_assert_uint_eq(g.foreign, GiB(0.5));
	ck_assert_int_eq(g.nforeign, 0);
	ck_assert_int_eq(g.util, 10);
}
END_TEST

START_TEST(sample_foreign)
{
	struct gp_mon_snap *s = snap(1);
	struct gp_gstate g;

	addproc(&s->gpu[0], 100, 0, GiB(1), -1);
	addproc(&s->gpu[0], 4242, -1, GiB(3), -1);
	s->gpu[0].used = GiB(4.5);
	g = sample1(s);
	ck_assert_int_eq(g.known, 1);
	ck_assert_int_eq(g.busy, 1);
	ck_assert_int_eq(g.nforeign, 1);
	ck_assert_str_eq(g.why, "pid 4242 is not ours (3.0 GiB)");
	ck_assert_uint_eq(g.foreign, GiB(3.5));

	/* NVML may not say how much a process uses. */
	s = snap(1);
	addproc(&s->gpu[0], 4242, -1, UINT64_MAX, -1);
	g = sample1(s);
	ck_assert_int_eq(g.busy, 1);
	ck_assert_str_eq(g.why, "pid 4242 is not ours");

	s = snap(1);
	addproc(&s->gpu[0], 4242, -1, GiB(1), -1);
	addproc(&s->gpu[0], 100, 1, GiB(1), -1);
	addproc(&s->gpu[0], 4243, -1, GiB(1), -1);
	g = sample1(s);
	ck_assert_int_eq(g.busy, 1);
	ck_assert_int_eq(g.nforeign, 2);
	ck_assert_str_eq(g.why, "2 processes not ours");

	/* More processes than a snapshot lists: any may be foreign. */
	s = snap(1);
	addproc(&s->gpu[0], 100, 0, GiB(1), -1);
	s->gpu[0].more = 1;
	g = sample1(s);
	ck_assert_int_eq(g.busy, 1);
	ck_assert_ptr_nonnull(strstr(g.why, "not all listed"));
}
END_TEST

START_TEST(sample_unknown_owner)
{
	struct gp_mon_snap *s = snap(1);
	struct gp_gstate g;

	s->gpu[0].procs_known = 0;
	s->gpu[0].used = GiB(7);
	snprintf(s->gpu[0].err, sizeof(s->gpu[0].err), "Not Supported");
	fresh(&g, 1);
	g.declared = GiB(4);
	gp_gate_sample(&g, 1, s, &(struct gp_gate_policy){ .busy_pct = 10 });
	ck_assert_int_eq(g.known, 1);
	ck_assert_int_eq(g.busy, 1);
	ck_assert_str_eq(g.why,
	    "NVML cannot list its processes: Not Supported");
	/* Our items are taken to use what they declared, the rest is
	 * someone else's. */
	ck_assert_uint_eq(g.foreign, GiB(3));
	free(s);
}
END_TEST

START_TEST(sample_not_seen)
{
	struct gp_mon_snap *s = snap(2);
	struct gp_gstate g[3];

	s->gpu[1].found = 0;
	snprintf(s->gpu[1].err, sizeof(s->gpu[1].err), "Not Found");
	fresh(g, 3);
	gp_gate_sample(g, 3, s, &(struct gp_gate_policy){ .busy_pct = 10 });
	ck_assert_int_eq(g[0].busy, 0);
	ck_assert_int_eq(g[1].known, 0);
	ck_assert_int_eq(g[1].busy, 1);
	ck_assert_str_eq(g[1].why, "not seen by NVML: Not Found");
	ck_assert_uint_eq(g[1].total, 0);
	/* A GPU past the snapshot's end is not seen either. */
	ck_assert_int_eq(g[2].known, 0);
	ck_assert_int_eq(g[2].busy, 1);
	free(s);
}
END_TEST

START_TEST(sample_threshold)
{
	struct gp_mon_snap *s = snap(1);
	struct gp_gstate g;

	s->gpu[0].used = GiB(12);
	g = sample1(s);
	ck_assert_int_eq(g.busy, 1);
	ck_assert_str_eq(g.why, "others use 12.0 of 80.0 GiB (over 10%)");

	/* Exactly the threshold is still free. */
	s = snap(1);
	s->gpu[0].used = GiB(8);
	g = sample1(s);
	ck_assert_int_eq(g.busy, 0);

	/* Our own memory does not count against the threshold. */
	s = snap(1);
	s->gpu[0].used = GiB(60);
	addproc(&s->gpu[0], 100, 0, GiB(59), -1);
	g = sample1(s);
	ck_assert_int_eq(g.busy, 0);
	ck_assert_str_eq(g.why, "free");

	/* Another threshold. */
	s = snap(1);
	s->gpu[0].used = GiB(12);
	fresh(&g, 1);
	gp_gate_sample(&g, 1, s, &(struct gp_gate_policy){ .busy_pct = 20 });
	ck_assert_int_eq(g.busy, 0);
	free(s);
}
END_TEST

START_TEST(sample_no_nvml)
{
	struct gp_mon_snap *s = snap(2);
	struct gp_gstate g[2];

	s->ok = 0;
	snprintf(s->err, sizeof(s->err),
	    "libnvidia-ml.so.1: cannot open shared object file");
	addproc(&s->gpu[0], 4242, -1, GiB(3), -1);
	fresh(g, 2);
	g[0].known = 1;
	g[0].busy = 1;
	g[0].total = GiB(80);
	gp_gate_sample(g, 2, s, &(struct gp_gate_policy){ .busy_pct = 10 });
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(g[i].known, 0);
		ck_assert_int_eq(g[i].busy, 0);
		ck_assert_uint_eq(g[i].total, 0);
		ck_assert_int_eq(g[i].util, -1);
		ck_assert_str_eq(g[i].why, "no NVML: libnvidia-ml.so.1: "
		    "cannot open shared object file");
		/* Everything fits, as without a monitor. */
		ck_assert(gp_gate_fits(&g[i], GiB(1000), 1));
	}
	free(s);
}
END_TEST

/* Figures NVML got wrong are unknown, not passed on: shares over 100 %,
 * a total under 64 MiB or under what is used, a process using more than
 * its GPU has. Sane ones stay as they were. */
START_TEST(clean_out_of_range)
{
	struct gp_mon_snap *s = snap(3);

	s->gpu[0].util = 250;
	addproc(&s->gpu[0], 100, 0, GiB(1), 250);
	addproc(&s->gpu[0], 101, -1, GiB(100), 10);
	s->gpu[1].total = 1;
	s->gpu[1].used = GiB(5);
	addproc(&s->gpu[1], 102, 0, GiB(2), 30);
	s->gpu[2].util = 100;
	s->gpu[2].used = GiB(80);
	addproc(&s->gpu[2], 103, 0, GiB(80), 0);
	gp_gate_clean(s);
	ck_assert_int_eq(s->gpu[0].util, -1);
	ck_assert_int_eq(s->gpu[0].proc[0].sm, -1);
	ck_assert_uint_eq(s->gpu[0].proc[0].mem, GiB(1));
	ck_assert_uint_eq(s->gpu[0].proc[1].mem, UINT64_MAX);
	ck_assert_int_eq(s->gpu[0].proc[1].sm, 10);
	ck_assert_uint_eq(s->gpu[0].total, GiB(80));
	ck_assert_uint_eq(s->gpu[1].total, 0);
	ck_assert_uint_eq(s->gpu[1].used, 0);
	ck_assert_int_eq(s->gpu[1].proc[0].sm, 30);
	ck_assert_int_eq(s->gpu[2].util, 100);
	ck_assert_uint_eq(s->gpu[2].total, GiB(80));
	ck_assert_uint_eq(s->gpu[2].used, GiB(80));
	ck_assert_uint_eq(s->gpu[2].proc[0].mem, GiB(80));
	ck_assert_int_eq(s->gpu[2].proc[0].sm, 0);
	/* More used than the total: that sample's memory is unknown. */
	s->gpu[2].used = GiB(81);
	gp_gate_clean(s);
	ck_assert_uint_eq(s->gpu[2].total, 0);
	free(s);
}
END_TEST

/* busy_util: a GPU that computes with no process of someone else
 * listed (another container's) is busy once its utilisation, less our
 * processes' SM shares, is over it; unknown shares say nothing. */
START_TEST(sample_busy_util)
{
	struct gp_gate_policy	 pol = { .busy_pct = 10, .busy_util = 50 };
	struct gp_mon_snap	*s = snap(4);
	struct gp_gstate	 g[4];

	fresh(g, 4);
	s->gpu[0].util = 80;			/* nobody listed */
	s->gpu[1].util = 80;			/* ours take 40 of it */
	addproc(&s->gpu[1], 100, 0, GiB(1), 40);
	s->gpu[2].util = 95;			/* ours: share unknown */
	addproc(&s->gpu[2], 101, 1, GiB(1), -1);
	s->gpu[3].util = 50;			/* at it, not over */
	gp_gate_sample(g, 4, s, &pol);
	ck_assert_int_eq(g[0].busy, 1);
	ck_assert_str_eq(g[0].why, "others use 80% of it (over 50%)");
	ck_assert_int_eq(g[1].busy, 0);
	ck_assert_int_eq(g[2].busy, 0);
	ck_assert_int_eq(g[3].busy, 0);
	/* Without the rule, the same machine is free. */
	pol.busy_util = 0;
	gp_gate_sample(g, 4, s, &pol);
	ck_assert_int_eq(g[0].busy, 0);
	free(s);
}
END_TEST

/* One absurd reading between sane ones: the GPU keeps its size and what
 * others held, so an item fits exactly as before, not everything (a
 * total of 0) nor nothing (a total of 1 byte). */
START_TEST(sample_keeps_what_an_odd_reading_does_not_know)
{
	struct gp_mon_snap *s = snap(1);
	struct gp_gstate g;

	fresh(&g, 1);
	s->gpu[0].used = GiB(30);
	gp_gate_clean(s);
	gp_gate_sample(&g, 1, s, &(struct gp_gate_policy){ .busy_pct = 50 });
	ck_assert_uint_eq(g.foreign, GiB(30));
	ck_assert(gp_gate_fits(&g, GiB(50), 0));
	ck_assert(!gp_gate_fits(&g, GiB(51), 0));
	s->gpu[0].total = 1;
	s->gpu[0].used = GiB(5);
	gp_gate_clean(s);
	gp_gate_sample(&g, 1, s, &(struct gp_gate_policy){ .busy_pct = 50 });
	ck_assert_int_eq(g.known, 1);
	ck_assert_uint_eq(g.total, GiB(80));
	ck_assert_uint_eq(g.foreign, GiB(30));
	ck_assert(gp_gate_fits(&g, GiB(50), 0));
	ck_assert(!gp_gate_fits(&g, GiB(51), 0));
	ck_assert_uint_eq(gp_gate_usable(&g), GiB(75));
	free(s);
}
END_TEST

/* What an item could ever have: the total less the least memory in use
 * that no process held, over the samples that could tell. */
START_TEST(usable_is_what_no_process_holds)
{
	struct gp_mon_snap *s;
	struct gp_gstate g;

	fresh(&g, 1);
	ck_assert_uint_eq(gp_gate_usable(&g), UINT64_MAX);
	s = snap(1);
	s->gpu[0].used = GiB(3);
	addproc(&s->gpu[0], 100, 0, GiB(1), -1);
	addproc(&s->gpu[0], 4242, -1, GiB(1), -1);
	gp_gate_sample(&g, 1, s, &(struct gp_gate_policy){ .busy_pct = 10 });
	ck_assert_uint_eq(g.unheld, GiB(1));
	ck_assert_uint_eq(gp_gate_usable(&g), GiB(79));
	/* Less unheld: the least stays. */
	s->gpu[0].used = GiB(2.5);
	gp_gate_sample(&g, 1, s, &(struct gp_gate_policy){ .busy_pct = 10 });
	ck_assert_uint_eq(gp_gate_usable(&g), GiB(79.5));
	/* A spike (a process NVML does not list yet) changes nothing. */
	s->gpu[0].used = GiB(9);
	gp_gate_sample(&g, 1, s, &(struct gp_gate_policy){ .busy_pct = 10 });
	ck_assert_uint_eq(gp_gate_usable(&g), GiB(79.5));
	/* Samples that cannot tell: a process of unknown memory, an
	 * unlisted rest, a sample without the memory. */
	s->gpu[0].used = GiB(2);
	s->gpu[0].proc[1].mem = UINT64_MAX;
	gp_gate_sample(&g, 1, s, &(struct gp_gate_policy){ .busy_pct = 10 });
	s->gpu[0].proc[1].mem = GiB(1);
	s->gpu[0].more = 1;
	gp_gate_sample(&g, 1, s, &(struct gp_gate_policy){ .busy_pct = 10 });
	s->gpu[0].more = 0;
	s->gpu[0].total = s->gpu[0].used = 0;
	gp_gate_sample(&g, 1, s, &(struct gp_gate_policy){ .busy_pct = 10 });
	ck_assert_uint_eq(gp_gate_usable(&g), GiB(79.5));
	ck_assert_int_eq(g.unheld_n, 3);
	free(s);
	/* Most of a GPU held by no listed process (another container's,
	 * which NVML does not list): only a 16th of it is taken to stay,
	 * so that a need that could fit once they end waits for it. */
	fresh(&g, 1);
	s = snap(1);
	s->gpu[0].used = GiB(70);
	gp_gate_sample(&g, 1, s, &(struct gp_gate_policy){ .busy_pct = 10 });
	ck_assert_uint_eq(g.unheld, GiB(70));
	ck_assert_uint_eq(gp_gate_usable(&g), GiB(75));
	free(s);
}
END_TEST

static struct gp_gstate
gpu80(void)
{
	struct gp_gstate g;

	fresh(&g, 1);
	g.known = 1;
	g.total = GiB(80);
	return g;
}

START_TEST(fits_memory)
{
	struct gp_gstate g = gpu80();

	/* Declared beyond what is seen: declared counts. */
	g.declared = GiB(30);
	g.ours = GiB(10);
	ck_assert(gp_gate_fits(&g, GiB(50), 0));
	ck_assert(!gp_gate_fits(&g, GiB(51), 0));
	/* Seen beyond what was declared: what is seen counts. */
	g.ours = GiB(40);
	ck_assert(gp_gate_fits(&g, GiB(40), 0));
	ck_assert(!gp_gate_fits(&g, GiB(41), 0));
	/* Others' memory counts too. */
	g.foreign = GiB(20);
	ck_assert(gp_gate_fits(&g, GiB(20), 0));
	ck_assert(!gp_gate_fits(&g, GiB(21), 0));
	/* Already over: nothing fits, but need 0 declares nothing. */
	g.foreign = GiB(50);
	ck_assert(!gp_gate_fits(&g, 1, 0));
	ck_assert(gp_gate_fits(&g, 0, 0));
	/* Total unknown: nothing to check. */
	g.total = 0;
	ck_assert(gp_gate_fits(&g, GiB(1000), 0));
}
END_TEST

/* The bound is the total itself, to the byte. */
START_TEST(fits_memory_to_the_byte)
{
	struct gp_gstate g = gpu80();

	g.declared = GiB(30);
	g.foreign = GiB(20) + 3;
	ck_assert(gp_gate_fits(&g, GiB(30) - 3, 0));
	ck_assert(!gp_gate_fits(&g, GiB(30) - 2, 0));
}
END_TEST

START_TEST(fits_busy_held)
{
	struct gp_gstate g = gpu80();

	g.busy = 1;
	ck_assert(!gp_gate_fits(&g, 0, 1));
	ck_assert(!gp_gate_fits(&g, GiB(1), 1));
	ck_assert(gp_gate_fits(&g, GiB(1), 0));
	g.busy = 0;
	g.held = 1;
	ck_assert(!gp_gate_fits(&g, 0, 0));
	ck_assert(!gp_gate_fits(&g, 0, 1));
}
END_TEST

/* The DGX-2's 16 GPUs, with their domains from the fixture. */
static void
dgx2_gpus(struct gp_gstate *g)
{
	hwloc_topology_t t;
	char		 err[256];
	int		 dom[NDGX][GP_NEAR_LEVELS], i;

	fresh(g, NDGX);
	ck_assert_int_eq(gp_topo_load(&t, GP_FIXTURES "/nvidiaDGX2.xml", 1,
	    err, sizeof(err)), 0);
	ck_assert_int_eq(gp_topo_near(t, GP_FIXTURES "/nvidiaDGX2.xml",
	    dgx2, NDGX, dom), 0);
	hwloc_topology_destroy(t);
	for (i = 0; i < NDGX; i++) {
		memcpy(g[i].dom, dom[i], sizeof(dom[i]));
		g[i].known = 1;
		g[i].total = GiB(32);
	}
}

/* Deterministic PRNG (xorshift32), so that a failure replays. */
static uint32_t
rnd(uint32_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 17;
	*x ^= *x << 5;
	return *x;
}

static int
socket_of(int gpu)
{
	return gpu / 8;
}

/*
 * m GPUs at random availability (idle worker, not running, not held):
 * when one socket has m eligible GPUs, the pick is m of them; else it is
 * any m, or none when fewer than m are eligible. Always ascending, and
 * only eligible GPUs.
 */
static void
pick_random(int m)
{
	struct gp_gstate g[NDGX];
	uint32_t	 x = 12345;
	int		 avail[NDGX], ok[NDGX], out[NDGX], persock[2];
	int		 iter, i, k, neligible;

	dgx2_gpus(g);
	for (iter = 0; iter < 4000; iter++) {
		persock[0] = persock[1] = neligible = 0;
		for (i = 0; i < NDGX; i++) {
			avail[i] = rnd(&x) % 3 != 0;
			g[i].running = rnd(&x) % 8 == 0;
			g[i].held = rnd(&x) % 8 == 0;
			ok[i] = avail[i] && !g[i].running && !g[i].held;
			persock[socket_of(i)] += ok[i];
			neligible += ok[i];
		}
		k = gp_gate_pick(g, NDGX, avail, m, 0, 0, out);
		ck_assert_int_eq(k, neligible >= m ? m : 0);
		for (i = 0; i < k; i++) {
			ck_assert_msg(ok[out[i]],
			    "iter %d: GPU %d not eligible", iter, out[i]);
			ck_assert(i == 0 || out[i] > out[i - 1]);
			if (persock[0] >= m || persock[1] >= m)
				ck_assert_msg(socket_of(out[i]) ==
				    socket_of(out[0]), "iter %d: m=%d across "
				    "sockets: %d and %d", iter, m, out[0],
				    out[i]);
		}
	}
}

START_TEST(pick_same_socket)
{
	pick_random(2);
	pick_random(4);
}
END_TEST

/* gp_gate_pick() of m GPUs on the DGX-2 gives want[], ended by -1. */
static void
expect_pick(const struct gp_gstate *g, const int *avail, int m,
    uint64_t need, int free_only, const int *want)
{
	int	 out[NDGX], k, i;

	k = gp_gate_pick(g, NDGX, avail, m, need, free_only, out);
	for (i = 0; want[i] >= 0; i++)
		;
	ck_assert_int_eq(k, i);
	for (i = 0; i < k; i++)
		ck_assert_int_eq(out[i], want[i]);
}

#define WANT(...)	((const int[]){ __VA_ARGS__, -1 })
#define NONE		WANT(-1)

START_TEST(pick_baseboard)
{
	struct gp_gstate g[NDGX];
	int		 avail[NDGX], i;

	dgx2_gpus(g);
	for (i = 0; i < NDGX; i++)
		avail[i] = 1;
	expect_pick(g, avail, 8, 0, 0, WANT(0, 1, 2, 3, 4, 5, 6, 7));
	/* One GPU of the first baseboard taken: the other whole one. */
	g[3].running = 1;
	expect_pick(g, avail, 8, 0, 0, WANT(8, 9, 10, 11, 12, 13, 14, 15));
	/* More than are free: none. */
	expect_pick(g, avail, 16, 0, 0, NONE);
	expect_pick(g, avail, 17, 0, 0, NONE);
	for (i = 0; i < NDGX; i++)
		avail[i] = i == 2 || i == 9 || i == 12;
	expect_pick(g, avail, 4, 0, 0, NONE);
	expect_pick(g, avail, 2, 0, 0, WANT(9, 12));
	/* No socket holds three: any three. */
	expect_pick(g, avail, 3, 0, 0, WANT(2, 9, 12));
}
END_TEST

START_TEST(pick_best_fit)
{
	struct gp_gstate g[NDGX];
	int		 avail[NDGX], i;

	dgx2_gpus(g);
	/* Socket 0 has 3 free, socket 1 all 8: a pair comes from socket 0,
	 * keeping the emptier baseboard for an 8-GPU item. */
	for (i = 0; i < NDGX; i++)
		avail[i] = i >= 8 || i == 1 || i == 5 || i == 6;
	expect_pick(g, avail, 2, 0, 0, WANT(1, 5));
	expect_pick(g, avail, 4, 0, 0, WANT(8, 9, 10, 11));
	/* Memory: a GPU where the need does not fit is skipped. */
	g[1].foreign = GiB(30);
	expect_pick(g, avail, 2, GiB(4), 0, WANT(5, 6));
	/* Busy counts only with free_only. */
	g[5].busy = 1;
	expect_pick(g, avail, 2, GiB(4), 0, WANT(5, 6));
	expect_pick(g, avail, 2, GiB(4), 1, WANT(8, 9));
}
END_TEST

START_TEST(pick_no_domains)
{
	struct gp_gstate g[6];
	int		 avail[6] = { 1, 0, 1, 1, 1, 1 }, out[6];

	fresh(g, 6);
	g[3].running = 1;
	ck_assert_int_eq(gp_gate_pick(g, 6, avail, 3, 0, 0, out), 3);
	ck_assert_int_eq(out[0], 0);
	ck_assert_int_eq(out[1], 2);
	ck_assert_int_eq(out[2], 4);
	ck_assert_int_eq(gp_gate_pick(g, 6, avail, 0, 0, 0, out), 0);
	ck_assert_int_eq(gp_gate_pick(g, 6, avail, 5, 0, 0, out), 0);
}
END_TEST

/* Group the DGX-2 by k; returns the number of GPUs left over. */
static int
group_dgx2(int k)
{
	struct gp_gstate g[NDGX];
	int		 group[NDGX], size[NDGX] = { 0 }, sock[NDGX];
	int		 i, ng, left = 0, next = 0;

	dgx2_gpus(g);
	ng = gp_gate_group(g, NDGX, k, group);
	ck_assert_int_eq(ng, NDGX / k);
	for (i = 0; i < NDGX; i++) {
		if (group[i] < 0) {
			left++;
			continue;
		}
		ck_assert_int_lt(group[i], ng);
		/* Numbered in order of each group's lowest GPU. */
		if (size[group[i]] == 0) {
			ck_assert_int_eq(group[i], next);
			next++;
			sock[group[i]] = socket_of(i);
		} else if (k != 3 && k <= 8) {
			ck_assert_msg(sock[group[i]] == socket_of(i),
			    "k=%d: GPU %d not on its group's socket", k, i);
		}
		size[group[i]]++;
	}
	for (i = 0; i < ng; i++)
		ck_assert_int_eq(size[i], k);
	return left;
}

START_TEST(group_dgx2_sockets)
{
	ck_assert_int_eq(group_dgx2(1), 0);
	ck_assert_int_eq(group_dgx2(2), 0);
	ck_assert_int_eq(group_dgx2(4), 0);
	ck_assert_int_eq(group_dgx2(8), 0);
	ck_assert_int_eq(group_dgx2(3), 1);
	ck_assert_int_eq(group_dgx2(16), 0);
	ck_assert_int_eq(group_dgx2(17), 16);
}
END_TEST

/* gp_gate_group(g, n, k) makes ngroups groups, GPU i's being want[i]. */
static void
expect_group(const struct gp_gstate *g, int n, int k, int ngroups,
    const int *want)
{
	int	 group[NDGX], i;

	ck_assert_int_eq(gp_gate_group(g, n, k, group), ngroups);
	for (i = 0; i < n; i++)
		ck_assert_msg(group[i] == want[i], "k=%d: GPU %d in group %d, "
		    "want %d", k, i, group[i], want[i]);
}

START_TEST(group_dgx2_three)
{
	struct gp_gstate g[NDGX];

	/* 16 by 3: two groups per baseboard, then one across (no choice),
	 * the last GPU over. */
	dgx2_gpus(g);
	expect_group(g, NDGX, 3, 5, (const int[]){ 0, 0, 0, 1, 1, 1, 2, 2,
	    3, 3, 3, 4, 4, 4, 2, -1 });
}
END_TEST

START_TEST(group_no_domains)
{
	struct gp_gstate g[5];

	fresh(g, 5);
	expect_group(g, 5, 2, 2, (const int[]){ 0, 0, 1, 1, -1 });
	expect_group(g, 5, 0, 0, (const int[]){ -1, -1, -1, -1, -1 });
	/* Only NUMA known (a PCIe box): pairs stay on their node, in index
	 * order within it. */
	g[0].dom[GP_NEAR_NUMA] = 1;
	g[1].dom[GP_NEAR_NUMA] = 0;
	g[2].dom[GP_NEAR_NUMA] = 1;
	g[3].dom[GP_NEAR_NUMA] = 0;
	g[4].dom[GP_NEAR_NUMA] = 1;
	expect_group(g, 5, 2, 2, (const int[]){ 0, 1, 0, 1, -1 });
	/* Nearer levels first: a PCIe switch pairs 2 and 4 across nodes,
	 * leaving 0 over. */
	g[2].dom[GP_NEAR_PCI] = 2;
	g[4].dom[GP_NEAR_PCI] = 2;
	expect_group(g, 5, 2, 2, (const int[]){ -1, 0, 1, 0, 1 });
}
END_TEST

START_TEST(usage_peak_mean)
{
	struct gp_mon_snap *s;
	struct gp_gusage u[3];
	int		 running[3] = { 1, 0, 1 };

	memset(u, 0, sizeof(u));
	/* Worker 0 on two GPUs with per-process SM figures. */
	s = snap(2);
	addproc(&s->gpu[0], 100, 0, GiB(2), 50);
	addproc(&s->gpu[1], 101, 0, GiB(1), 30);
	addproc(&s->gpu[1], 200, 1, GiB(4), 90);
	addproc(&s->gpu[1], 4242, -1, GiB(8), 99);
	gp_gate_usage(u, 3, running, s);
	ck_assert_uint_eq(u[0].mem_peak, GiB(3));
	ck_assert_uint_eq(u[0].util_sum, 40);
	ck_assert_uint_eq(u[0].util_n, 1);
	ck_assert_uint_eq(u[0].samples, 1);
	/* Worker 1 is not running: untouched. */
	ck_assert_uint_eq(u[1].mem_peak, 0);
	ck_assert_uint_eq(u[1].samples, 0);
	/* Worker 2 runs with no process on a GPU yet: a sample, no use. */
	ck_assert_uint_eq(u[2].samples, 1);
	ck_assert_uint_eq(u[2].util_n, 0);
	ck_assert_uint_eq(u[2].mem_peak, 0);
	free(s);

	/* Less memory, no SM figure: the peak stays, the GPU's own
	 * utilisation is the sample. */
	s = snap(2);
	s->gpu[0].util = 70;
	addproc(&s->gpu[0], 100, 0, GiB(1), -1);
	addproc(&s->gpu[0], 102, 0, UINT64_MAX, -1);
	gp_gate_usage(u, 3, running, s);
	ck_assert_uint_eq(u[0].mem_peak, GiB(3));
	ck_assert_uint_eq(u[0].util_sum, 110);
	ck_assert_uint_eq(u[0].util_n, 2);
	ck_assert_uint_eq(u[0].samples, 2);

	/* Higher: a new peak. No NVML: no sample at all. */
	addproc(&s->gpu[1], 103, 0, GiB(4), 10);
	gp_gate_usage(u, 3, running, s);
	ck_assert_uint_eq(u[0].mem_peak, GiB(5));
	ck_assert_uint_eq(u[0].samples, 3);
	s->ok = 0;
	gp_gate_usage(u, 3, running, s);
	gp_gate_usage(u, 3, running, NULL);
	ck_assert_uint_eq(u[0].samples, 3);
	ck_assert_uint_eq(u[2].samples, 3);
	/* Worker 0's item started after this snapshot was asked for (2):
	 * it is not of that item. */
	s->ok = 1;
	running[0] = 2;
	gp_gate_usage(u, 3, running, s);
	ck_assert_uint_eq(u[0].samples, 3);
	ck_assert_uint_eq(u[2].samples, 4);
	free(s);
}
END_TEST

static Suite *
gate_suite(void)
{
	Suite	*s;
	TCase	*tc;

	s = suite_create("gate");

	tc = tcase_create("sample");
	tcase_add_test(tc, sample_free);
	tcase_add_test(tc, sample_foreign);
	tcase_add_test(tc, sample_unknown_owner);
	tcase_add_test(tc, sample_not_seen);
	tcase_add_test(tc, sample_threshold);
	tcase_add_test(tc, sample_busy_util);
	tcase_add_test(tc, sample_no_nvml);
	tcase_add_test(tc, clean_out_of_range);
	tcase_add_test(tc, sample_keeps_what_an_odd_reading_does_not_know);
	tcase_add_test(tc, usable_is_what_no_process_holds);
	suite_add_tcase(s, tc);

	tc = tcase_create("fits");
	tcase_add_test(tc, fits_memory);
	tcase_add_test(tc, fits_memory_to_the_byte);
	tcase_add_test(tc, fits_busy_held);
	suite_add_tcase(s, tc);

	tc = tcase_create("pick");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, pick_same_socket);
	tcase_add_test(tc, pick_baseboard);
	tcase_add_test(tc, pick_best_fit);
	tcase_add_test(tc, pick_no_domains);
	suite_add_tcase(s, tc);

	tc = tcase_create("group");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, group_dgx2_sockets);
	tcase_add_test(tc, group_dgx2_three);
	tcase_add_test(tc, group_no_domains);
	suite_add_tcase(s, tc);

	tc = tcase_create("usage");
	tcase_add_test(tc, usage_peak_mean);
	suite_add_tcase(s, tc);

	return s;
}

int
main(void)
{
	return gp_check_run(gate_suite());
}
