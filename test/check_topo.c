/*
 * check_topo.c: tests for topo.c. Placement decisions are checked against
 * the hwloc XML fixtures (expected localities from test/fixtures/README.md);
 * real binding is checked on this machine, in forked children that report
 * their affinity and memory policy back through a pipe.
 */

#include <sys/types.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <hwloc.h>
#include <hwloc/glibc-sched.h>

#include "topo.h"
#include "check_main.h"

#ifndef GP_FIXTURES
#error "GP_FIXTURES must be the fixture directory, as a string"
#endif

/* From linux/mempolicy.h; numaif.h (libnuma) is not a dependency. */
#define MPOL_PREFERRED_		1
#define MPOL_BIND_		2
#define MPOL_PREFERRED_MANY_	5

#define DGX2	0
#define E32	1
#define E24	2
#define POWER8	3

#define PKG0_32	"0-7,16-23"
#define PKG1_32	"8-15,24-31"
#define EVEN_24	"0,2,4,6,8,10,12,14,16,18,20,22"
#define ODD_24	"1,3,5,7,9,11,13,15,17,19,21,23"
#define PKG0_P8	"0-1,8-9,16-17,24-25"
#define PKG1_P8	"80-81,88-89,96-97,104-105"

struct gpu {
	const char	*busid;
	int		 numa;
	const char	*cpus;
};

/* The tables of test/fixtures/README.md: every NVIDIA GPU of each file. */
static const struct fixture {
	const char	*file;
	const char	*machine;	/* the whole machine's PUs */
	int		 ngpu;
	struct gpu	 gpu[16];
} fixtures[] = {
	[DGX2] = { "nvidiaDGX2.xml", "0-1,24-25", 16, {
		{ "0000:34:00.0", 0, "0-1" }, { "0000:36:00.0", 0, "0-1" },
		{ "0000:39:00.0", 0, "0-1" }, { "0000:3b:00.0", 0, "0-1" },
		{ "0000:57:00.0", 0, "0-1" }, { "0000:59:00.0", 0, "0-1" },
		{ "0000:5c:00.0", 0, "0-1" }, { "0000:5e:00.0", 0, "0-1" },
		{ "0000:b7:00.0", 1, "24-25" }, { "0000:b9:00.0", 1, "24-25" },
		{ "0000:bc:00.0", 1, "24-25" }, { "0000:be:00.0", 1, "24-25" },
		{ "0000:e0:00.0", 1, "24-25" }, { "0000:e2:00.0", 1, "24-25" },
		{ "0000:e5:00.0", 1, "24-25" }, { "0000:e7:00.0", 1, "24-25" },
	} },
	[E32] = { "32em64t-2n8c2t-pci-wholeio.xml", "0-31", 3, {
		{ "0000:03:00.0", 0, PKG0_32 },
		{ "0000:83:00.0", 1, PKG1_32 },
		{ "0000:84:00.0", 1, PKG1_32 },
	} },
	[E24] = { "24em64t-2n6c2t-pci.xml", "0-23", 3, {
		{ "0000:06:00.0", 0, EVEN_24 },
		{ "0000:14:00.0", 1, ODD_24 },
		{ "0000:11:00.0", 1, ODD_24 },
	} },
	[POWER8] = { "power8gpudistances.xml", PKG0_P8 "," PKG1_P8, 4, {
		{ "0002:01:00.0", 0, PKG0_P8 }, { "0003:01:00.0", 0, PKG0_P8 },
		{ "000a:01:00.0", 1, PKG1_P8 }, { "000b:01:00.0", 1, PKG1_P8 },
	} },
};
#define NFIXTURES	((int)(sizeof(fixtures) / sizeof(fixtures[0])))

/* What a bound child saw, sent back through a pipe. */
struct report {
	int		 ret, cpu_rc, mem_rc;
	int		 aff_err, pol_err;
	int		 mode;
	cpu_set_t	 aff;
	unsigned long	 mask[16];
};

/*
 * gp_topo_near()'s domains on each fixture: NVLink from the XML's
 * NVLinkBandwidth matrix (DGX-2: one domain per baseboard through its 6
 * NVSwitches; POWER8: GPU pairs linked directly), PCI by the root port
 * above each GPU (DGX-2: 4 GPUs behind each PCIe switch tree; elsewhere
 * one GPU per root port). NUMA is the fixture table's.
 */
static const struct near {
	int		 nvlink[16];
	int		 pci[16];
} nears[] = {
	[DGX2] = { { 0, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 8, 8, 8, 8 },
		   { 0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12 } },
	[E32] = { { -1, -1, -1 }, { 0, 1, 2 } },
	[E24] = { { -1, -1, -1 }, { 0, 1, 2 } },
	[POWER8] = { { 0, 0, 2, 2 }, { 0, 1, 2, 3 } },
};

static const char *
xmlpath(int f)
{
	static char	 buf[512];

	snprintf(buf, sizeof(buf), "%s/%s", GP_FIXTURES, fixtures[f].file);
	return buf;
}

static hwloc_topology_t
load(int f)
{
	hwloc_topology_t t;
	char		 err[256];
	int		 rc;

	rc = gp_topo_load(&t, xmlpath(f), 1, err, sizeof(err));
	ck_assert_msg(rc == 0, "gp_topo_load: %d %s", rc, err);
	ck_assert_ptr_nonnull(t);
	return t;
}

static hwloc_topology_t
loadlocal(void)
{
	hwloc_topology_t t;
	char		 err[256];
	int		 rc;

	rc = gp_topo_load(&t, NULL, 1, err, sizeof(err));
	ck_assert_msg(rc == 0, "gp_topo_load(NULL): %d %s", rc, err);
	return t;
}

static hwloc_bitmap_t
parse(const char *list)
{
	hwloc_bitmap_t	 b;

	ck_assert_ptr_nonnull(b = hwloc_bitmap_alloc());
	ck_assert_int_eq(hwloc_bitmap_list_sscanf(b, list), 0);
	return b;
}

static void
assert_set(hwloc_const_bitmap_t got, const char *want, const char *what)
{
	hwloc_bitmap_t	 w;
	char		 buf[256];

	ck_assert_ptr_nonnull(got);
	w = parse(want);
	gp_topo_list(buf, sizeof(buf), got);
	ck_assert_msg(hwloc_bitmap_isequal(got, w), "%s: got '%s', want '%s'",
	    what, buf, want);
	hwloc_bitmap_free(w);
}

/* A GPU's own worker, alone on its locality. */
static void
assert_gpu(const struct gp_place *p, const struct gpu *g)
{
	char	 ns[16];

	ck_assert_msg(p->flags == 0, "%s: flags %#x", g->busid, p->flags);
	assert_set(p->cpuset, g->cpus, g->busid);
	snprintf(ns, sizeof(ns), "%d", g->numa);
	assert_set(p->nodeset, ns, g->busid);
	ck_assert_int_eq(p->numa, g->numa);
	ck_assert_int_eq(p->membind, 1);
}

/*
 * Workers idx[0..k-1] share the locality want: each set is non-empty, no
 * two overlap, together they cover it, and they follow the index order.
 */
static void
assert_split(const struct gp_place *p, const int *idx, int k,
    const char *want)
{
	hwloc_bitmap_t	 all;
	char		 a[256], b[256];
	int		 i, j;

	ck_assert_ptr_nonnull(all = hwloc_bitmap_alloc());
	for (i = 0; i < k; i++) {
		const struct gp_place *x = &p[idx[i]];

		ck_assert_ptr_nonnull(x->cpuset);
		ck_assert_msg(!(x->flags & GP_PLACE_SHARED),
		    "worker %d shares its set", idx[i]);
		ck_assert_msg(!hwloc_bitmap_iszero(x->cpuset),
		    "worker %d has no CPU", idx[i]);
		for (j = 0; j < i; j++) {
			gp_topo_list(a, sizeof(a), x->cpuset);
			gp_topo_list(b, sizeof(b), p[idx[j]].cpuset);
			ck_assert_msg(!hwloc_bitmap_intersects(x->cpuset,
			    p[idx[j]].cpuset), "workers %d '%s' and %d '%s' "
			    "overlap", idx[i], a, idx[j], b);
			ck_assert_msg(hwloc_bitmap_first(p[idx[j]].cpuset) <
			    hwloc_bitmap_first(x->cpuset),
			    "worker %d '%s' comes before worker %d '%s'",
			    idx[i], a, idx[j], b);
		}
		hwloc_bitmap_or(all, all, x->cpuset);
	}
	assert_set(all, want, "union of the group");
	hwloc_bitmap_free(all);
}

static void
release(struct gp_place *p, int n)
{
	int	 i;

	for (i = 0; i < n; i++)
		gp_place_release(&p[i]);
}

static void
place(hwloc_topology_t t, const char *const *busid, int n,
    struct gp_place *out)
{
	ck_assert_int_eq(gp_topo_place(t, busid, n, out), 0);
}

/* Only the child runs this: no Check calls, leave by _exit. */
static void
child(int fd, hwloc_topology_t t, const struct gp_place *p)
{
	struct report	 r;
	const char	*b = (const char *)&r;
	size_t		 off;
	ssize_t		 n;

	memset(&r, 0, sizeof(r));
	r.ret = gp_topo_bind(t, p, &r.cpu_rc, &r.mem_rc);
	if (sched_getaffinity(0, sizeof(r.aff), &r.aff) == -1)
		r.aff_err = errno;
	r.mode = -1;
	if (syscall(SYS_get_mempolicy, &r.mode, r.mask,
	    (unsigned long)(sizeof(r.mask) * 8), NULL, 0UL) == -1)
		r.pol_err = errno;
	for (off = 0; off < sizeof(r); off += (size_t)n) {
		n = write(fd, b + off, sizeof(r) - off);
		if (n == -1 && errno == EINTR)
			n = 0;
		else if (n <= 0)
			_exit(1);
	}
	_exit(0);
}

/* Bind a forked child to p and return what it saw. */
static void
bindchild(hwloc_topology_t t, const struct gp_place *p, struct report *r)
{
	char	*b = (char *)r;
	size_t	 off;
	ssize_t	 n;
	pid_t	 pid;
	int	 fd[2], st;

	ck_assert_int_eq(pipe(fd), 0);
	pid = fork();
	ck_assert_int_ne(pid, -1);
	if (pid == 0) {
		close(fd[0]);
		child(fd[1], t, p);
	}
	close(fd[1]);
	for (off = 0; off < sizeof(*r); off += (size_t)n) {
		n = read(fd[0], b + off, sizeof(*r) - off);
		if (n == -1 && errno == EINTR)
			n = 0;
		else if (n <= 0)
			break;
	}
	close(fd[0]);
	while (waitpid(pid, &st, 0) == -1)
		ck_assert_int_eq(errno, EINTR);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	    "child status %#x", st);
	ck_assert_uint_eq(off, sizeof(*r));
	ck_assert_int_eq(r->aff_err, 0);
}

static void
assert_affinity(hwloc_topology_t t, const struct report *r,
    hwloc_const_cpuset_t want)
{
	hwloc_bitmap_t	 got;
	char		 a[256], b[256];

	ck_assert_ptr_nonnull(got = hwloc_bitmap_alloc());
	ck_assert_int_eq(hwloc_cpuset_from_glibc_sched_affinity(t, got,
	    &r->aff, sizeof(r->aff)), 0);
	gp_topo_list(a, sizeof(a), got);
	gp_topo_list(b, sizeof(b), want);
	ck_assert_msg(hwloc_bitmap_isequal(got, want),
	    "child affinity '%s', want '%s'", a, b);
	hwloc_bitmap_free(got);
}

/* Load */

START_TEST(load_missing)
{
	hwloc_topology_t t = (hwloc_topology_t)&t;
	char		 err[256];
	int		 rc;

	rc = gp_topo_load(&t, GP_FIXTURES "/no-such.xml", 1, err, sizeof(err));
	ck_assert_int_eq(rc, -ENOENT);
	ck_assert_ptr_null(t);
	ck_assert_str_eq(err, "cannot load topology '" GP_FIXTURES
	    "/no-such.xml': No such file or directory");
}
END_TEST

START_TEST(load_not_xml)
{
	hwloc_topology_t t = (hwloc_topology_t)&t;
	char		 path[] = "/tmp/check_topo.XXXXXX", err[256];
	int		 fd, rc;

	ck_assert_int_ne(fd = mkstemp(path), -1);
	ck_assert_int_eq(write(fd, "not a topology\n", 15), 15);
	close(fd);
	rc = gp_topo_load(&t, path, 1, err, sizeof(err));
	unlink(path);
	ck_assert_int_lt(rc, 0);
	ck_assert_ptr_null(t);
	ck_assert_msg(strstr(err, path) != NULL, "err '%s' lacks the file",
	    err);

	rc = gp_topo_load(&t, GP_FIXTURES, 1, err, sizeof(err));
	ck_assert_int_eq(rc, -EISDIR);
	ck_assert_ptr_null(t);
	ck_assert_msg(strstr(err, GP_FIXTURES) != NULL, "err '%s'", err);
}
END_TEST

/* PCI devices kept, OS devices (cuda, nvml, opencl) dropped. */
START_TEST(load_filters)
{
	hwloc_topology_t t;
	hwloc_obj_t	 o = NULL;
	int		 n = 0;

	t = load(_i);
	while ((o = hwloc_get_next_pcidev(t, o)) != NULL)
		if (o->attr->pcidev.vendor_id == 0x10de &&
		    (o->attr->pcidev.class_id >> 8) == 0x03)
			n++;
	ck_assert_int_eq(n, fixtures[_i].ngpu);
	ck_assert_int_eq(hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_OS_DEVICE), 0);
	hwloc_topology_destroy(t);
}
END_TEST

/* Locality of every GPU of the README */

START_TEST(locality_alone)
{
	const struct fixture *f = &fixtures[_i];
	hwloc_topology_t t;
	struct gp_place	 p;
	int		 g;

	t = load(_i);
	for (g = 0; g < f->ngpu; g++) {
		place(t, &f->gpu[g].busid, 1, &p);
		assert_gpu(&p, &f->gpu[g]);
		gp_place_release(&p);
	}
	hwloc_topology_destroy(t);
}
END_TEST

/* All GPUs at once: same nodes, each set inside its GPU's locality. */
START_TEST(locality_together)
{
	const struct fixture *f = &fixtures[_i];
	const char	*id[16];
	hwloc_topology_t t;
	hwloc_bitmap_t	 loc;
	struct gp_place	 p[16];
	int		 g;

	t = load(_i);
	for (g = 0; g < f->ngpu; g++)
		id[g] = f->gpu[g].busid;
	place(t, id, f->ngpu, p);
	for (g = 0; g < f->ngpu; g++) {
		ck_assert_int_eq(p[g].numa, f->gpu[g].numa);
		ck_assert_int_eq(hwloc_bitmap_weight(p[g].nodeset), 1);
		ck_assert_int_eq(p[g].membind, 1);
		ck_assert_int_eq(p[g].flags & ~GP_PLACE_SHARED, 0);
		loc = parse(f->gpu[g].cpus);
		ck_assert_msg(hwloc_bitmap_isincluded(p[g].cpuset, loc),
		    "%s outside its locality", f->gpu[g].busid);
		hwloc_bitmap_free(loc);
	}
	release(p, f->ngpu);
	hwloc_topology_destroy(t);
}
END_TEST

/* Spreading workers that share a locality */

START_TEST(spread_pair)
{
	static const char *const id[] = { "0000:83:00.0", "0000:84:00.0" };
	hwloc_topology_t t;
	struct gp_place	 p[2];

	t = load(E32);
	place(t, id, 2, p);
	assert_set(p[0].cpuset, "8-11,24-27", id[0]);
	assert_set(p[1].cpuset, "12-15,28-31", id[1]);
	ck_assert_uint_eq(p[0].flags | p[1].flags, 0);
	ck_assert_int_eq(p[0].numa, 1);
	ck_assert_int_eq(p[1].numa, 1);
	release(p, 2);
	hwloc_topology_destroy(t);
}
END_TEST

START_TEST(spread_32em64t)
{
	static const char *const id[] = {
		"0000:03:00.0", "0000:83:00.0", "0000:84:00.0",
	};
	static const int pkg1[] = { 1, 2 };
	hwloc_topology_t t;
	struct gp_place	 p[3];

	t = load(E32);
	place(t, id, 3, p);
	assert_gpu(&p[0], &fixtures[E32].gpu[0]);
	assert_split(p, pkg1, 2, PKG1_32);
	release(p, 3);
	hwloc_topology_destroy(t);
}
END_TEST

/* Two workers per GPU: 2 on package 0, 4 on package 1. */
START_TEST(spread_two_per_gpu)
{
	static const char *const id[] = {
		"0000:03:00.0", "0000:03:00.0", "0000:83:00.0",
		"0000:83:00.0", "0000:84:00.0", "0000:84:00.0",
	};
	static const int pkg0[] = { 0, 1 }, pkg1[] = { 2, 3, 4, 5 };
	hwloc_topology_t t;
	struct gp_place	 p[6];
	int		 i;

	t = load(E32);
	place(t, id, 6, p);
	assert_split(p, pkg0, 2, PKG0_32);
	assert_split(p, pkg1, 4, PKG1_32);
	for (i = 0; i < 6; i++) {
		ck_assert_int_eq(p[i].numa, i < 2 ? 0 : 1);
		ck_assert_int_eq(p[i].membind, 1);
	}
	release(p, 6);
	hwloc_topology_destroy(t);
}
END_TEST

/* Groups follow the locality, not neighbouring indexes. */
START_TEST(spread_interleaved)
{
	static const char *const id[] = {
		"0000:83:00.0", "0000:03:00.0", "0000:84:00.0",
	};
	static const int pkg1[] = { 0, 2 };
	hwloc_topology_t t;
	struct gp_place	 p[3];

	t = load(E32);
	place(t, id, 3, p);
	assert_gpu(&p[1], &fixtures[E32].gpu[0]);
	assert_split(p, pkg1, 2, PKG1_32);
	release(p, 3);
	hwloc_topology_destroy(t);
}
END_TEST

/* PUs interleaved between the sockets: a non-contiguous locality. */
START_TEST(spread_24em64t)
{
	static const char *const id[] = {
		"0000:06:00.0", "0000:14:00.0", "0000:11:00.0",
	};
	static const int pkg1[] = { 1, 2 };
	hwloc_topology_t t;
	struct gp_place	 p[3];

	t = load(E24);
	place(t, id, 3, p);
	assert_gpu(&p[0], &fixtures[E24].gpu[0]);
	assert_split(p, pkg1, 2, ODD_24);
	release(p, 3);
	hwloc_topology_destroy(t);
}
END_TEST

/* Non-zero PCI domains, PUs above 64 (multi-word bitmaps). */
START_TEST(spread_power8)
{
	static const char *const id[] = {
		"0002:01:00.0", "0003:01:00.0", "000a:01:00.0", "000b:01:00.0",
	};
	static const int pkg0[] = { 0, 1 }, pkg1[] = { 2, 3 };
	hwloc_topology_t t;
	struct gp_place	 p[4];

	t = load(POWER8);
	place(t, id, 4, p);
	assert_split(p, pkg0, 2, PKG0_P8);
	assert_split(p, pkg1, 2, PKG1_P8);
	ck_assert_int_ge(hwloc_bitmap_first(p[2].cpuset), 80);
	ck_assert_int_eq(p[3].numa, 1);
	release(p, 4);
	hwloc_topology_destroy(t);
}
END_TEST

/* 8 GPUs per socket, 2 cores: every worker gets its whole socket. */
START_TEST(spread_dgx2_shared)
{
	const struct fixture *f = &fixtures[DGX2];
	const char	*id[16];
	hwloc_topology_t t;
	struct gp_place	 p[16];
	int		 g;

	t = load(DGX2);
	for (g = 0; g < f->ngpu; g++)
		id[g] = f->gpu[g].busid;
	place(t, id, f->ngpu, p);
	for (g = 0; g < f->ngpu; g++) {
		ck_assert_uint_eq(p[g].flags, GP_PLACE_SHARED);
		assert_set(p[g].cpuset, f->gpu[g].cpus, id[g]);
		ck_assert_int_eq(p[g].numa, f->gpu[g].numa);
		ck_assert_int_eq(p[g].membind, 1);
	}
	release(p, f->ngpu);
	hwloc_topology_destroy(t);
}
END_TEST

/* 2 workers per socket still fit the 2 cores: disjoint, not shared. */
START_TEST(spread_dgx2_fit)
{
	static const char *const id[] = {
		"0000:34:00.0", "0000:b7:00.0", "0000:36:00.0", "0000:b9:00.0",
	};
	static const int pkg0[] = { 0, 2 }, pkg1[] = { 1, 3 };
	hwloc_topology_t t;
	struct gp_place	 p[4];

	t = load(DGX2);
	place(t, id, 4, p);
	assert_split(p, pkg0, 2, "0-1");
	assert_split(p, pkg1, 2, "24-25");
	release(p, 4);
	hwloc_topology_destroy(t);
}
END_TEST

/* Workers without a GPU locality share the machine: one per package. */
START_TEST(spread_machine)
{
	static const char *const id[] = { NULL, "0000:ff:00.0" };
	hwloc_topology_t t;
	struct gp_place	 p[2];

	t = load(E32);
	place(t, id, 2, p);
	ck_assert_uint_eq(p[0].flags, GP_PLACE_NOBUSID | GP_PLACE_MACHINE);
	ck_assert_uint_eq(p[1].flags, GP_PLACE_NOTFOUND | GP_PLACE_MACHINE);
	assert_set(p[0].cpuset, PKG0_32, "worker 0");
	assert_set(p[1].cpuset, PKG1_32, "worker 1");
	ck_assert_int_eq(p[0].membind, 0);
	ck_assert_int_eq(p[1].membind, 0);
	release(p, 2);
	hwloc_topology_destroy(t);
}
END_TEST

/*
 * Cores of unequal size (PUs 24-26 gone, so cores 8-10 have one PU):
 * hwloc_distrib alone puts two of 8 workers on core 11. Each worker must
 * still own one core of its own.
 */
START_TEST(spread_uneven_cores)
{
	const char	*id[8];
	hwloc_topology_t t;
	hwloc_bitmap_t	 keep;
	struct gp_place	 p[8];
	int		 idx[8], i;

	t = load(E32);
	keep = parse("0-23,27-31");
	ck_assert_int_eq(hwloc_topology_restrict(t, keep, 0), 0);
	hwloc_bitmap_free(keep);
	for (i = 0; i < 8; i++) {
		id[i] = "0000:83:00.0";
		idx[i] = i;
	}
	place(t, id, 8, p);
	assert_split(p, idx, 8, "8-15,27-31");
	for (i = 0; i < 8; i++)
		ck_assert_int_eq(hwloc_get_nbobjs_inside_cpuset_by_type(t,
		    p[i].cpuset, HWLOC_OBJ_CORE), 1);
	release(p, 8);
	hwloc_topology_destroy(t);
}
END_TEST

/* Bus ids and fallbacks */

START_TEST(busid_unknown)
{
	static const char *const id[] = { NULL, "" };
	hwloc_topology_t t;
	struct gp_place	 p;
	int		 i;

	t = load(E32);
	for (i = 0; i < 2; i++) {
		place(t, &id[i], 1, &p);
		ck_assert_uint_eq(p.flags,
		    GP_PLACE_NOBUSID | GP_PLACE_MACHINE);
		assert_set(p.cpuset, "0-31", "no bus id");
		assert_set(p.nodeset, "0-1", "no bus id");
		ck_assert_int_eq(p.numa, 0);
		ck_assert_int_eq(p.membind, 0);
		gp_place_release(&p);
	}
	hwloc_topology_destroy(t);
}
END_TEST

static void
assert_notfound(int f, const char *busid)
{
	hwloc_topology_t t;
	struct gp_place	 p;

	t = load(f);
	place(t, &busid, 1, &p);
	ck_assert_msg(p.flags == (GP_PLACE_NOTFOUND | GP_PLACE_MACHINE),
	    "'%s': flags %#x", busid, p.flags);
	assert_set(p.cpuset, fixtures[f].machine, busid);
	ck_assert_int_eq(p.membind, 0);
	gp_place_release(&p);
	hwloc_topology_destroy(t);
}

START_TEST(busid_notfound)
{
	assert_notfound(E32, "0000:ff:00.0");
	assert_notfound(DGX2, "0000:66:00.1");
	/* No domain: hwloc alone would take domain 0 and find 03:00.0. */
	assert_notfound(E32, "03:00.0");
	assert_notfound(POWER8, "01:00.0");
	/* No function, trailing or leading junk. */
	assert_notfound(E32, "0000:03:00");
	assert_notfound(E32, "0000:03:00.0 ");
	assert_notfound(E32, " 0000:03:00.0");
	assert_notfound(E32, "0000:03:00.00");
}
END_TEST

START_TEST(busid_forms)
{
	static const char *const nvml = "00000000:83:00.0";
	static const char *const upper = "0000:B7:00.0";
	static const char *const p8 = "000A:01:00.0";
	hwloc_topology_t t;
	struct gp_place	 p;

	t = load(E32);
	place(t, &nvml, 1, &p);
	assert_gpu(&p, &fixtures[E32].gpu[1]);
	gp_place_release(&p);
	hwloc_topology_destroy(t);

	t = load(DGX2);
	place(t, &upper, 1, &p);
	assert_gpu(&p, &fixtures[DGX2].gpu[8]);
	gp_place_release(&p);
	hwloc_topology_destroy(t);

	t = load(POWER8);
	place(t, &p8, 1, &p);
	assert_gpu(&p, &fixtures[POWER8].gpu[2]);
	gp_place_release(&p);
	/* Released twice: the second call must be harmless. */
	gp_place_release(&p);
	ck_assert_ptr_null(p.cpuset);
	hwloc_topology_destroy(t);
}
END_TEST

/*
 * Package 0 keeps its NUMA node but loses its PUs: GPU 03:00.0 has an
 * empty locality and falls back to the (remaining) machine.
 */
START_TEST(locality_empty)
{
	static const char *const id[] = { "0000:03:00.0", NULL };
	hwloc_topology_t t;
	hwloc_bitmap_t	 keep;
	struct gp_place	 p[2];

	t = load(E32);
	keep = parse(PKG1_32);
	ck_assert_int_eq(hwloc_topology_restrict(t, keep, 0), 0);
	hwloc_bitmap_free(keep);
	place(t, id, 1, p);
	ck_assert_uint_eq(p[0].flags, GP_PLACE_EMPTY | GP_PLACE_MACHINE);
	assert_set(p[0].cpuset, PKG1_32, "empty locality");
	ck_assert_int_eq(p[0].membind, 0);
	gp_place_release(&p[0]);

	/* Grouped with a worker that has no bus id: they split the cores. */
	place(t, id, 2, p);
	ck_assert_uint_eq(p[1].flags, GP_PLACE_NOBUSID | GP_PLACE_MACHINE);
	assert_split(p, (const int[]){ 0, 1 }, 2, PKG1_32);
	release(p, 2);
	hwloc_topology_destroy(t);
}
END_TEST

/* Package 0 removed: package 1 is the whole machine. */
START_TEST(locality_machine)
{
	static const char *const id[] = { "0000:83:00.0", "0000:03:00.0" };
	hwloc_topology_t t;
	hwloc_bitmap_t	 keep;
	struct gp_place	 p[2];

	t = load(E32);
	keep = parse(PKG1_32);
	ck_assert_int_eq(hwloc_topology_restrict(t, keep,
	    HWLOC_RESTRICT_FLAG_REMOVE_CPULESS), 0);
	hwloc_bitmap_free(keep);
	place(t, id, 1, p);
	ck_assert_uint_eq(p[0].flags, GP_PLACE_MACHINE);
	assert_set(p[0].cpuset, PKG1_32, id[0]);
	ck_assert_int_eq(p[0].numa, 1);
	ck_assert_int_eq(p[0].membind, 0);
	gp_place_release(&p[0]);

	place(t, &id[1], 1, p);
	ck_assert_uint_eq(p[0].flags, GP_PLACE_NOTFOUND | GP_PLACE_MACHINE);
	gp_place_release(&p[0]);
	hwloc_topology_destroy(t);
}
END_TEST

START_TEST(place_zero)
{
	hwloc_topology_t t;

	t = load(E32);
	ck_assert_int_eq(gp_topo_place(t, NULL, 0, NULL), 0);
	hwloc_topology_destroy(t);
}
END_TEST

/* Nearness */

START_TEST(near_fixtures)
{
	const struct fixture *fx = &fixtures[_i];
	const char	*id[16];
	hwloc_topology_t t;
	int		 dom[16][GP_NEAR_LEVELS], i;

	for (i = 0; i < fx->ngpu; i++)
		id[i] = fx->gpu[i].busid;
	t = load(_i);
	ck_assert_int_eq(gp_topo_near(t, xmlpath(_i), id, fx->ngpu, dom), 0);
	for (i = 0; i < fx->ngpu; i++) {
		ck_assert_msg(dom[i][GP_NEAR_NVLINK] == nears[_i].nvlink[i],
		    "%s %s: NVLink domain %d, want %d", fx->file, id[i],
		    dom[i][GP_NEAR_NVLINK], nears[_i].nvlink[i]);
		ck_assert_msg(dom[i][GP_NEAR_PCI] == nears[_i].pci[i],
		    "%s %s: PCI domain %d, want %d", fx->file, id[i],
		    dom[i][GP_NEAR_PCI], nears[_i].pci[i]);
		ck_assert_msg(dom[i][GP_NEAR_NUMA] == fx->gpu[i].numa,
		    "%s %s: NUMA %d, want %d", fx->file, id[i],
		    dom[i][GP_NEAR_NUMA], fx->gpu[i].numa);
	}
	/* This system's topology never tells NVLink. */
	ck_assert_int_eq(gp_topo_near(t, NULL, id, fx->ngpu, dom), 0);
	for (i = 0; i < fx->ngpu; i++) {
		ck_assert_int_eq(dom[i][GP_NEAR_NVLINK], -1);
		ck_assert_int_eq(dom[i][GP_NEAR_PCI], nears[_i].pci[i]);
	}
	hwloc_topology_destroy(t);
}
END_TEST

/* Ids follow the GPUs given, in their order, whatever subset. */
START_TEST(near_subset)
{
	static const char *const id[] = {
		"0000:e7:00.0", "0000:3b:00.0", "0000:b7:00.0", "0000:34:00.0",
		"0000:e5:00.0",
	};
	static const int nv[] = { 0, 1, 0, 1, 0 };
	static const int pci[] = { 0, 1, 2, 1, 0 };
	static const int numa[] = { 1, 0, 1, 0, 1 };
	hwloc_topology_t t;
	int		 dom[5][GP_NEAR_LEVELS], i;

	t = load(DGX2);
	ck_assert_int_eq(gp_topo_near(t, xmlpath(DGX2), id, 5, dom), 0);
	for (i = 0; i < 5; i++) {
		ck_assert_int_eq(dom[i][GP_NEAR_NVLINK], nv[i]);
		ck_assert_int_eq(dom[i][GP_NEAR_PCI], pci[i]);
		ck_assert_int_eq(dom[i][GP_NEAR_NUMA], numa[i]);
	}
	hwloc_topology_destroy(t);
}
END_TEST

/* GPUs the topology cannot place are in no domain at any level. */
START_TEST(near_unknown)
{
	static const char *const id[] = {
		NULL, "", "0000:ff:00.0", "34:00.0", "0000:34:00.0",
	};
	hwloc_topology_t t;
	char		 err[256];
	int		 dom[5][GP_NEAR_LEVELS], i, lv;

	t = load(DGX2);
	ck_assert_int_eq(gp_topo_near(t, xmlpath(DGX2), id, 5, dom), 0);
	for (i = 0; i < 4; i++)
		for (lv = 0; lv < GP_NEAR_LEVELS; lv++)
			ck_assert_int_eq(dom[i][lv], -1);
	ck_assert_int_eq(dom[4][GP_NEAR_NVLINK], 4);
	ck_assert_int_eq(dom[4][GP_NEAR_PCI], 4);
	ck_assert_int_eq(dom[4][GP_NEAR_NUMA], 0);
	ck_assert_int_eq(gp_topo_near(t, xmlpath(DGX2), NULL, 5, dom), 0);
	ck_assert_int_eq(dom[4][GP_NEAR_NUMA], -1);
	hwloc_topology_destroy(t);

	/* Loaded without PCI: only the XML's matrix says anything. */
	ck_assert_int_eq(gp_topo_load(&t, xmlpath(DGX2), 0, err,
	    sizeof(err)), 0);
	ck_assert_int_eq(gp_topo_near(t, xmlpath(DGX2), &id[4], 1, dom), 0);
	ck_assert_int_eq(dom[0][GP_NEAR_NVLINK], 0);
	ck_assert_int_eq(dom[0][GP_NEAR_PCI], -1);
	ck_assert_int_eq(dom[0][GP_NEAR_NUMA], -1);
	hwloc_topology_destroy(t);

	/* This machine: whatever it has, NVLink stays unknown. */
	t = loadlocal();
	ck_assert_int_eq(gp_topo_near(t, NULL, &id[4], 1, dom), 0);
	ck_assert_int_eq(dom[0][GP_NEAR_NVLINK], -1);
	hwloc_topology_destroy(t);
}
END_TEST

/* A whole-machine locality with one NUMA node left is on that node. */
START_TEST(near_machine)
{
	static const char *const id[] = { "0000:83:00.0", "0000:84:00.0" };
	hwloc_topology_t t;
	hwloc_bitmap_t	 keep;
	int		 dom[2][GP_NEAR_LEVELS];

	t = load(E32);
	keep = parse(PKG1_32);
	ck_assert_int_eq(hwloc_topology_restrict(t, keep,
	    HWLOC_RESTRICT_FLAG_REMOVE_CPULESS), 0);
	hwloc_bitmap_free(keep);
	ck_assert_int_eq(gp_topo_near(t, xmlpath(E32), id, 2, dom), 0);
	ck_assert_int_eq(dom[0][GP_NEAR_NUMA], 1);
	ck_assert_int_eq(dom[1][GP_NEAR_NUMA], 1);
	ck_assert_int_eq(dom[0][GP_NEAR_PCI], 0);
	ck_assert_int_eq(dom[1][GP_NEAR_PCI], 1);
	hwloc_topology_destroy(t);
}
END_TEST

/* List format */

START_TEST(list_format)
{
	hwloc_bitmap_t	 b;
	char		 buf[64];

	b = parse("0-3,8");
	ck_assert_int_eq(gp_topo_list(buf, sizeof(buf), b), 5);
	ck_assert_str_eq(buf, "0-3,8");
	ck_assert_int_eq(gp_topo_list(buf, 3, b), 5);
	ck_assert_str_eq(buf, "0-");
	hwloc_bitmap_free(b);

	b = parse(PKG1_P8);
	gp_topo_list(buf, sizeof(buf), b);
	ck_assert_str_eq(buf, PKG1_P8);
	hwloc_bitmap_zero(b);
	ck_assert_int_eq(gp_topo_list(buf, sizeof(buf), b), 0);
	ck_assert_str_eq(buf, "");
	hwloc_bitmap_free(b);
}
END_TEST

/* Binding on this machine */

static int
ncores(hwloc_topology_t t)
{
	int	 n;

	n = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
	return n > 0 ? n : hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
}

START_TEST(bind_local)
{
	static const char *const id[] = { NULL, NULL };
	hwloc_topology_t t;
	struct gp_place	 p[2];
	struct report	 r;
	char		 all[256];
	int		 i;

	t = loadlocal();
	gp_topo_list(all, sizeof(all), hwloc_topology_get_topology_cpuset(t));
	place(t, id, 2, p);
	if (ncores(t) >= 2)
		assert_split(p, (const int[]){ 0, 1 }, 2, all);
	for (i = 0; i < 2; i++) {
		ck_assert_uint_eq(p[i].flags & ~GP_PLACE_SHARED,
		    GP_PLACE_NOBUSID | GP_PLACE_MACHINE);
		if (ncores(t) < 2)
			assert_set(p[i].cpuset, all, "single core");
		bindchild(t, &p[i], &r);
		ck_assert_int_eq(r.ret, 0);
		ck_assert_int_eq(r.cpu_rc, 0);
		ck_assert_int_eq(r.mem_rc, 0);
		assert_affinity(t, &r, p[i].cpuset);
	}
	release(p, 2);
	hwloc_topology_destroy(t);
}
END_TEST

/* Memory binding on this machine's first node, requested by hand. */
START_TEST(bind_memory)
{
	hwloc_topology_t t;
	struct gp_place	 p;
	struct report	 r;
	hwloc_bitmap_t	 got;
	unsigned	 i;

	t = loadlocal();
	memset(&p, 0, sizeof(p));
	ck_assert_ptr_nonnull(p.cpuset =
	    hwloc_bitmap_dup(hwloc_topology_get_topology_cpuset(t)));
	ck_assert_ptr_nonnull(p.nodeset = hwloc_bitmap_alloc());
	p.numa = hwloc_bitmap_first(hwloc_topology_get_topology_nodeset(t));
	ck_assert_int_ge(p.numa, 0);
	hwloc_bitmap_only(p.nodeset, (unsigned)p.numa);
	p.membind = 1;
	bindchild(t, &p, &r);
	if (r.pol_err == ENOSYS) {
		/* A kernel without NUMA policies: reported, not hidden. */
		ck_assert_int_eq(r.mem_rc, -ENOSYS);
		ck_assert_int_eq(r.ret, -ENOSYS);
		goto done;
	}
	ck_assert_int_eq(r.ret, 0);
	ck_assert_int_eq(r.mem_rc, 0);
	assert_affinity(t, &r, p.cpuset);
	ck_assert_int_eq(r.pol_err, 0);
	/* hwloc asks for MPOL_PREFERRED_MANY (or PREFERRED) unless STRICT. */
	ck_assert_msg(r.mode == MPOL_BIND_ || r.mode == MPOL_PREFERRED_ ||
	    r.mode == MPOL_PREFERRED_MANY_, "memory policy %d", r.mode);
	ck_assert_ptr_nonnull(got = hwloc_bitmap_alloc());
	for (i = 0; i < sizeof(r.mask) * 8; i++)
		if (r.mask[i / (sizeof(long) * 8)] &
		    (1UL << (i % (sizeof(long) * 8))))
			hwloc_bitmap_set(got, i);
	ck_assert(hwloc_bitmap_isequal(got, p.nodeset));
	hwloc_bitmap_free(got);
done:
	gp_place_release(&p);
	hwloc_topology_destroy(t);
}
END_TEST

/* A bind that cannot be done is reported in cpu_rc and the return value. */
START_TEST(bind_error)
{
	hwloc_topology_t t;
	struct gp_place	 p;
	struct report	 r;

	t = loadlocal();
	memset(&p, 0, sizeof(p));
	ck_assert_ptr_nonnull(p.cpuset = hwloc_bitmap_alloc());
	hwloc_bitmap_set(p.cpuset,
	    (unsigned)hwloc_bitmap_last(hwloc_topology_get_complete_cpuset(t)) +
	    1000);
	bindchild(t, &p, &r);
	ck_assert_int_lt(r.cpu_rc, 0);
	ck_assert_int_eq(r.ret, r.cpu_rc);
	ck_assert_int_eq(r.mem_rc, 0);
	gp_place_release(&p);
	hwloc_topology_destroy(t);
}
END_TEST

/* An XML topology is not this system: binding succeeds and does nothing. */
START_TEST(bind_xml_noop)
{
	static const char *const id = "0000:83:00.0";
	hwloc_topology_t t, local;
	hwloc_bitmap_t	 mine;
	struct gp_place	 p;
	struct report	 r;
	cpu_set_t	 aff;

	local = loadlocal();
	ck_assert_int_eq(sched_getaffinity(0, sizeof(aff), &aff), 0);
	ck_assert_ptr_nonnull(mine = hwloc_bitmap_alloc());
	hwloc_cpuset_from_glibc_sched_affinity(local, mine, &aff, sizeof(aff));
	t = load(E32);
	place(t, &id, 1, &p);
	ck_assert_int_eq(p.membind, 1);
	bindchild(t, &p, &r);
	ck_assert_int_eq(r.ret, 0);
	ck_assert_int_eq(r.cpu_rc, 0);
	ck_assert_int_eq(r.mem_rc, 0);
	assert_affinity(local, &r, mine);
	gp_place_release(&p);
	hwloc_bitmap_free(mine);
	hwloc_topology_destroy(t);
	hwloc_topology_destroy(local);
}
END_TEST

static Suite *
topo_suite(void)
{
	Suite	*s;
	TCase	*tc;

	s = suite_create("topo");

	tc = tcase_create("load");
	tcase_add_test(tc, load_missing);
	tcase_add_test(tc, load_not_xml);
	tcase_add_loop_test(tc, load_filters, 0, NFIXTURES);
	suite_add_tcase(s, tc);

	tc = tcase_create("locality");
	tcase_add_loop_test(tc, locality_alone, 0, NFIXTURES);
	tcase_add_loop_test(tc, locality_together, 0, NFIXTURES);
	tcase_add_test(tc, locality_empty);
	tcase_add_test(tc, locality_machine);
	suite_add_tcase(s, tc);

	tc = tcase_create("spread");
	tcase_add_test(tc, spread_pair);
	tcase_add_test(tc, spread_32em64t);
	tcase_add_test(tc, spread_two_per_gpu);
	tcase_add_test(tc, spread_interleaved);
	tcase_add_test(tc, spread_24em64t);
	tcase_add_test(tc, spread_power8);
	tcase_add_test(tc, spread_dgx2_shared);
	tcase_add_test(tc, spread_dgx2_fit);
	tcase_add_test(tc, spread_machine);
	tcase_add_test(tc, spread_uneven_cores);
	tcase_add_test(tc, place_zero);
	suite_add_tcase(s, tc);

	tc = tcase_create("busid");
	tcase_add_test(tc, busid_unknown);
	tcase_add_test(tc, busid_notfound);
	tcase_add_test(tc, busid_forms);
	suite_add_tcase(s, tc);

	tc = tcase_create("near");
	tcase_add_loop_test(tc, near_fixtures, 0, NFIXTURES);
	tcase_add_test(tc, near_subset);
	tcase_add_test(tc, near_unknown);
	tcase_add_test(tc, near_machine);
	suite_add_tcase(s, tc);

	tc = tcase_create("list");
	tcase_add_test(tc, list_format);
	suite_add_tcase(s, tc);

	tc = tcase_create("bind");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, bind_local);
	tcase_add_test(tc, bind_memory);
	tcase_add_test(tc, bind_error);
	tcase_add_test(tc, bind_xml_noop);
	suite_add_tcase(s, tc);

	return s;
}

int
main(void)
{
	return gp_check_run(topo_suite());
}
