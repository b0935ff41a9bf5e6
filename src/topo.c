/*
 * topo.c: hwloc topology, GPU locality by PCI bus id, worker placement
 * and binding (how near GPUs sit is near.c's). With near.c it owns the
 * hwloc calls of gpupool and nothing else. It must never touch CUDA,
 * NVML or an hwloc GPU component in the master: GPUs are found as plain
 * PCI objects, OS devices are filtered out before loading, except in
 * near.c's second, XML-only load that reads an NVLink matrix. It relies
 * on gp_topo_bind running in a single-threaded worker after fork.
 */

#include <sys/stat.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hwloc.h>

#include "topo.h"

/*
 * Discovery components not to run. The GPU ones would open a GPU runtime
 * (cudaGetDeviceCount, nvmlInit, clGetPlatformIDs...) while loading; the OS
 * device filter already stops them, the blacklist covers an hwloc whose
 * component ignores it. On Linux the "linux" component reads PCI devices and
 * their locality from sysfs, and "pci" (libpciaccess) only adds vendor and
 * device names, leaking about 1 KiB per load in pci_get_strings (hwloc 2.9,
 * Debian 12). Elsewhere "pci" is the only PCI discovery: keep it there.
 */
static const char *const skipcomp[] = {
	"cuda", "nvml", "opencl", "rsmi", "levelzero", "gl",
#ifdef __linux__
	"pci",
#endif
};

/*
 * Plugin files not to load at all. hwloc opens every plugin on its first
 * topology init; these pull in X11 (gl), an OpenCL loader, libxml2 with
 * ICU (the built-in XML reader serves our fixtures) and libpciaccess: tens
 * of milliseconds and megabytes of RSS in the master, for nothing we use.
 * The wheel's hwloc (grafted, renamed) looks for plugins where Debian's
 * does: one of the machine's own hwloc would load beside it, a second
 * hwloc in the process. Every plugin hwloc 2 ships is named here.
 * hwloc reads HWLOC_PLUGINS_BLACKLIST then; a caller's own value wins.
 */
#define GP_PLUGINS_BLACKLIST \
	"hwloc_gl,hwloc_opencl,hwloc_xml_libxml,hwloc_pci,hwloc_cuda," \
	"hwloc_nvml,hwloc_rsmi,hwloc_levelzero"

static int
topo_init(hwloc_topology_t *t)
{
	int	 set = getenv("HWLOC_PLUGINS_BLACKLIST") == NULL, rc;

	if (set)
		(void)setenv("HWLOC_PLUGINS_BLACKLIST", GP_PLUGINS_BLACKLIST, 0);
	rc = hwloc_topology_init(t);
	if (set)
		(void)unsetenv("HWLOC_PLUGINS_BLACKLIST");
	return rc;
}

/* A locality: the object whose cpuset and nodeset the workers share. */
struct loc {
	hwloc_obj_t	 obj;		/* root if GP_PLACE_MACHINE */
	unsigned	 flags;		/* GP_PLACE_* but SHARED */
};

static int
syserr(void)
{
	return errno > 0 ? -errno : -EINVAL;
}

static void
seterr(char *err, size_t errlen, const char *xml, int rc)
{
	if (err == NULL || errlen == 0)
		return;
	if (xml != NULL)
		snprintf(err, errlen, "cannot load topology '%s': %s", xml,
		    strerror(-rc));
	else
		snprintf(err, errlen, "cannot load topology of this system: %s",
		    strerror(-rc));
}

/*
 * Check the file first: hwloc's own errors for a missing or unreadable
 * file are vague (EINVAL, or a message on stderr).
 */
static int
readable(const char *path)
{
	struct stat	 st;

	if (stat(path, &st) == -1)
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	if (access(path, R_OK) == -1)
		return -errno;
	return 0;
}

int
gp_topo_open(hwloc_topology_t *out, const char *xml,
    enum hwloc_type_filter_e io, enum hwloc_type_filter_e osdev)
{
	hwloc_topology_t t;
	size_t		 i;
	int		 rc;

	*out = NULL;
	errno = 0;
	if (topo_init(&t) == -1)
		return syserr();
	/* Fails with EINVAL where the component is not built: ignored. */
	for (i = 0; i < sizeof(skipcomp) / sizeof(skipcomp[0]); i++)
		(void)hwloc_topology_set_components(t,
		    HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, skipcomp[i]);
	errno = 0;
	/* This machine as the caller may use it: a taskset or Slurm
	 * binding bounds every worker's place. */
	if ((xml == NULL && hwloc_topology_set_flags(t,
	    HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM |
	    HWLOC_TOPOLOGY_FLAG_RESTRICT_TO_CPUBINDING |
	    HWLOC_TOPOLOGY_FLAG_RESTRICT_TO_MEMBINDING) == -1) ||
	    hwloc_topology_set_io_types_filter(t, io) == -1 ||
	    hwloc_topology_set_type_filter(t, HWLOC_OBJ_OS_DEVICE,
	    osdev) == -1 ||
	    /* Placement needs packages, NUMA nodes, cores and PUs. */
	    hwloc_topology_set_cache_types_filter(t,
	    HWLOC_TYPE_FILTER_KEEP_NONE) == -1 ||
	    hwloc_topology_set_icache_types_filter(t,
	    HWLOC_TYPE_FILTER_KEEP_NONE) == -1 ||
	    (xml != NULL && hwloc_topology_set_xml(t, xml) == -1) ||
	    hwloc_topology_load(t) == -1) {
		rc = syserr();
		hwloc_topology_destroy(t);
		return rc;
	}
	*out = t;
	return 0;
}

int
gp_topo_xml(hwloc_topology_t *out, const char *buf, int len, int thissystem)
{
	hwloc_topology_t t;
	int		 rc;

	*out = NULL;
	errno = 0;
	if (buf == NULL || len <= 0)
		return -ENOENT;
	if (topo_init(&t) == -1)
		return syserr();
	errno = 0;
	/* The master's topology, already restricted to what it may use:
	 * binding to it is real only when it was this machine's. */
	if ((thissystem && hwloc_topology_set_flags(t,
	    HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM) == -1) ||
	    hwloc_topology_set_io_types_filter(t,
	    HWLOC_TYPE_FILTER_KEEP_IMPORTANT) == -1 ||
	    hwloc_topology_set_xmlbuffer(t, buf, len) == -1 ||
	    hwloc_topology_load(t) == -1) {
		rc = syserr();
		hwloc_topology_destroy(t);
		return rc;
	}
	*out = t;
	return 0;
}

/*
 * This system's topology: from the cache (tcache.c) when its key matches,
 * loaded as this system so that binding is real; else discovered, and the
 * cache rewritten.
 */
static int
loadthis(hwloc_topology_t *out, int pci)
{
	struct gp_tcache c;
	char		*buf;
	int		 len, rc, cached;

	cached = gp_tcache_open(&c, pci) == 0;
	if (cached && (buf = gp_tcache_read(&c, &len)) != NULL) {
		rc = gp_topo_xml(out, buf, len, 1);
		free(buf);
		if (rc == 0) {
			gp_tcache_close(&c);
			return 0;
		}
	}
	rc = gp_topo_open(out, NULL, pci ? HWLOC_TYPE_FILTER_KEEP_IMPORTANT :
	    HWLOC_TYPE_FILTER_KEEP_NONE, HWLOC_TYPE_FILTER_KEEP_NONE);
	if (rc == 0 && cached &&
	    hwloc_topology_export_xmlbuffer(*out, &buf, &len, 0) == 0) {
		gp_tcache_write(&c, buf, len);
		hwloc_free_xmlbuffer(*out, buf);
	}
	gp_tcache_close(&c);
	return rc;
}

int
gp_topo_load(hwloc_topology_t *out, const char *xml, int pci, char *err,
    size_t errlen)
{
	int	 rc;

	*out = NULL;
	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if (xml == NULL && (rc = loadthis(out, pci)) == 0)
		return 0;
	if (xml != NULL && (rc = readable(xml)) == 0 &&
	    (rc = gp_topo_open(out, xml, pci ? HWLOC_TYPE_FILTER_KEEP_IMPORTANT :
	    HWLOC_TYPE_FILTER_KEEP_NONE, HWLOC_TYPE_FILTER_KEEP_NONE)) == 0)
		return 0;
	seterr(err, errlen, xml, rc);
	return rc;
}

/*
 * Accept only "dddd:bb:dd.f" (a 4 to 8 digit domain, as Linux and NVML
 * write it). hwloc reads "bb:dd.f" as domain 0, which is a guess that
 * picks the wrong device on machines with several PCI domains.
 */
static int
busidok(const char *s)
{
	static const struct {
		int	 min, max;
		char	 sep;
	} part[] = {
		{ 4, 8, ':' }, { 2, 2, ':' }, { 2, 2, '.' }, { 1, 1, '\0' },
	};
	size_t	 i;
	int	 n;

	for (i = 0; i < sizeof(part) / sizeof(part[0]); i++) {
		for (n = 0; isxdigit((unsigned char)*s); n++)
			s++;
		if (n < part[i].min || n > part[i].max || *s != part[i].sep)
			return 0;
		if (*s != '\0')
			s++;
	}
	return 1;
}

hwloc_obj_t
gp_topo_pcidev(hwloc_topology_t t, const char *busid)
{
	if (busid == NULL || !busidok(busid))
		return NULL;
	return hwloc_get_pcidev_by_busidstring(t, busid);
}

static struct loc
locate(hwloc_topology_t t, const char *busid)
{
	struct loc	 l;
	hwloc_obj_t	 root, pci, anc;

	root = hwloc_get_root_obj(t);
	l.obj = root;
	if (busid == NULL || busid[0] == '\0') {
		l.flags = GP_PLACE_NOBUSID | GP_PLACE_MACHINE;
		return l;
	}
	if ((pci = gp_topo_pcidev(t, busid)) == NULL) {
		l.flags = GP_PLACE_NOTFOUND | GP_PLACE_MACHINE;
		return l;
	}
	anc = hwloc_get_non_io_ancestor_obj(t, pci);
	if (anc == NULL || anc->cpuset == NULL ||
	    hwloc_bitmap_iszero(anc->cpuset)) {
		l.flags = GP_PLACE_EMPTY | GP_PLACE_MACHINE;
		return l;
	}
	if (hwloc_bitmap_isequal(anc->cpuset, root->cpuset)) {
		l.flags = GP_PLACE_MACHINE;
		return l;
	}
	l.obj = anc;
	l.flags = 0;
	return l;
}

static int
samegroup(const struct loc *a, const struct loc *b)
{
	if ((a->flags & GP_PLACE_MACHINE) || (b->flags & GP_PLACE_MACHINE))
		return (a->flags & GP_PLACE_MACHINE) &&
		    (b->flags & GP_PLACE_MACHINE);
	/* Two objects may carry the same cpuset (a package and its L3). */
	return hwloc_bitmap_isequal(a->obj->cpuset, b->obj->cpuset);
}

/* Depth of the unit a worker owns: cores, or PUs if there are no cores. */
static int
unitdepth(hwloc_topology_t t)
{
	int	 d;

	d = hwloc_get_type_depth(t, HWLOC_OBJ_CORE);
	if (d < 0)
		d = hwloc_get_type_depth(t, HWLOC_OBJ_PU);
	return d;
}

static int
disjoint(hwloc_bitmap_t *sets, int k)
{
	int	 i, j;

	for (i = 0; i < k; i++) {
		if (sets[i] == NULL || hwloc_bitmap_iszero(sets[i]))
			return 0;
		for (j = 0; j < i; j++)
			if (hwloc_bitmap_intersects(sets[i], sets[j]))
				return 0;
	}
	return 1;
}

static void
freesets(hwloc_bitmap_t *sets, int k)
{
	int	 i;

	for (i = 0; i < k; i++) {
		hwloc_bitmap_free(sets[i]);
		sets[i] = NULL;
	}
}

/*
 * hwloc_distrib weighs subtrees by PU count, so with cores of unequal size
 * (SMT partly offline, a restricted cpuset) two workers can land on one
 * core although k <= ncores. Then cut the cores into k runs in logical
 * order instead; PUs of the root outside any core go to the last worker.
 */
static int
cutcores(hwloc_topology_t t, hwloc_obj_t root, int depth, int ncores,
    hwloc_bitmap_t *sets, int k)
{
	hwloc_obj_t	 core;
	hwloc_bitmap_t	 rest;
	int		 i, w;

	freesets(sets, k);
	for (w = 0; w < k; w++)
		if ((sets[w] = hwloc_bitmap_alloc()) == NULL)
			return -ENOMEM;
	core = NULL;
	for (i = 0; i < ncores; i++) {
		core = hwloc_get_next_obj_inside_cpuset_by_depth(t,
		    root->cpuset, depth, core);
		if (core == NULL)
			break;
		w = (int)((long long)i * k / ncores);
		if (hwloc_bitmap_or(sets[w], sets[w], core->cpuset) == -1)
			return -ENOMEM;
	}
	if ((rest = hwloc_bitmap_dup(root->cpuset)) == NULL)
		return -ENOMEM;
	for (i = 0, w = 0; w < k && i == 0; w++)
		i = hwloc_bitmap_andnot(rest, rest, sets[w]);
	if (i == 0)
		i = hwloc_bitmap_or(sets[k - 1], sets[k - 1], rest);
	hwloc_bitmap_free(rest);
	return i == -1 ? -ENOMEM : 0;
}

/*
 * Fill sets[0..k-1] with the CPU sets of k workers sharing root. Returns
 * 1 when they share the whole locality, 0 when disjoint, or -ENOMEM.
 */
static int
spread(hwloc_topology_t t, hwloc_obj_t root, hwloc_bitmap_t *sets, int k)
{
	int	 depth, ncores, w;

	depth = unitdepth(t);
	ncores = depth < 0 ? 0 :
	    hwloc_get_nbobjs_inside_cpuset_by_depth(t, root->cpuset, depth);
	if (k > ncores) {
		for (w = 0; w < k; w++)
			if ((sets[w] = hwloc_bitmap_dup(root->cpuset)) == NULL)
				return -ENOMEM;
		return 1;
	}
	/*
	 * sets[] is zeroed by the caller: hwloc_distrib leaves entries
	 * untouched under a root without CPUs, and does not check its own
	 * hwloc_bitmap_dup calls.
	 */
	if (hwloc_distrib(t, &root, 1, sets, (unsigned)k, depth, 0) == -1)
		return syserr();
	for (w = 0; w < k; w++)
		if (sets[w] == NULL)
			return -ENOMEM;
	if (!disjoint(sets, k))
		return cutcores(t, root, depth, ncores, sets, k);
	return 0;
}

/*
 * Place the k workers idx[0..k-1], which share one locality; out[] is
 * zeroed. Each keeps its own flags: a group of whole-machine workers mixes
 * NOBUSID, NOTFOUND and EMPTY.
 */
static int
placegroup(hwloc_topology_t t, const struct loc *loc, const int *idx, int k,
    hwloc_bitmap_t *sets, struct gp_place *out)
{
	hwloc_const_nodeset_t	 all, ns;
	hwloc_obj_t		 root = loc[idx[0]].obj;
	struct gp_place		*p;
	int			 i, shared;

	memset(sets, 0, (size_t)k * sizeof(*sets));
	if ((shared = spread(t, root, sets, k)) < 0) {
		freesets(sets, k);
		return shared;
	}
	all = hwloc_topology_get_topology_nodeset(t);
	ns = root->nodeset;
	for (i = 0; i < k; i++) {
		p = &out[idx[i]];
		p->cpuset = sets[i];
		sets[i] = NULL;
		p->flags = loc[idx[i]].flags | (shared ? GP_PLACE_SHARED : 0);
		if ((p->nodeset = ns != NULL ? hwloc_bitmap_dup(ns) :
		    hwloc_bitmap_alloc()) == NULL) {
			freesets(sets, k);
			return -ENOMEM;
		}
		p->numa = hwloc_bitmap_first(p->nodeset);
		/*
		 * Binding to every node is not the kernel's default local
		 * policy, and binding to no node is an error: skip both.
		 */
		p->membind = !hwloc_bitmap_iszero(p->nodeset) &&
		    !hwloc_bitmap_isequal(p->nodeset, all);
	}
	return 0;
}

int
gp_topo_place(hwloc_topology_t t, const char *const *busid, int n,
    struct gp_place *out)
{
	struct loc	*loc = NULL;
	hwloc_bitmap_t	*sets = NULL;
	char		*done = NULL;
	int		*idx = NULL;
	int		 i, j, k, rc;

	if (n < 0 || (n > 0 && out == NULL))
		return -EINVAL;
	for (i = 0; i < n; i++) {
		memset(&out[i], 0, sizeof(out[i]));
		out[i].numa = -1;
	}
	if (n == 0)
		return 0;
	if ((loc = calloc((size_t)n, sizeof(*loc))) == NULL ||
	    (sets = calloc((size_t)n, sizeof(*sets))) == NULL ||
	    (done = calloc((size_t)n, sizeof(*done))) == NULL ||
	    (idx = calloc((size_t)n, sizeof(*idx))) == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	for (i = 0; i < n; i++)
		loc[i] = locate(t, busid != NULL ? busid[i] : NULL);

	/* Groups in order of their first worker; members in index order. */
	rc = 0;
	for (i = 0; i < n && rc == 0; i++) {
		if (done[i])
			continue;
		for (k = 0, j = i; j < n; j++) {
			if (!done[j] && samegroup(&loc[i], &loc[j])) {
				done[j] = 1;
				idx[k++] = j;
			}
		}
		rc = placegroup(t, loc, idx, k, sets, out);
	}
	if (rc < 0)
		for (i = 0; i < n; i++)
			gp_place_release(&out[i]);
out:
	free(idx);
	free(done);
	free(sets);
	free(loc);
	return rc;
}

void
gp_place_release(struct gp_place *p)
{
	if (p == NULL)
		return;
	hwloc_bitmap_free(p->cpuset);
	hwloc_bitmap_free(p->nodeset);
	p->cpuset = NULL;
	p->nodeset = NULL;
	p->numa = -1;
	p->membind = 0;
	p->flags = 0;
}

/*
 * Flags 0, not HWLOC_MEMBIND_PROCESS, which Linux refuses with ENOSYS;
 * hwloc then sets the calling thread's policy, the whole process here.
 */
int
gp_topo_bind(hwloc_topology_t t, const struct gp_place *p, int *cpu_rc,
    int *mem_rc)
{
	int	 crc = 0, mrc = 0;

	if (p == NULL || p->cpuset == NULL) {
		crc = -EINVAL;
	} else {
		errno = 0;
		if (hwloc_set_cpubind(t, p->cpuset, 0) == -1)
			crc = syserr();
	}
	if (p != NULL && p->membind) {
		errno = 0;
		if (p->nodeset == NULL)
			mrc = -EINVAL;
		else if (hwloc_set_membind(t, p->nodeset, HWLOC_MEMBIND_BIND,
		    HWLOC_MEMBIND_BYNODESET) == -1)
			mrc = syserr();
	}
	if (cpu_rc != NULL)
		*cpu_rc = crc;
	if (mem_rc != NULL)
		*mem_rc = mrc;
	return crc != 0 ? crc : mrc;
}

int
gp_topo_list(char *buf, size_t len, hwloc_const_bitmap_t set)
{
	if (set == NULL)
		return snprintf(buf, len, "%s", "");
	return hwloc_bitmap_list_snprintf(buf, len, set);
}

int
gp_topo_widen(hwloc_topology_t t, struct gp_place *pl,
    const char *const *busid, int n)
{
	struct gp_place	 first, other;
	hwloc_const_nodeset_t all;
	int		 i, rc, same;

	if (n < 2)
		return 0;
	if ((rc = gp_topo_place(t, busid, 1, &first)) < 0)
		return rc;
	for (i = 1; i < n && rc == 0; i++) {
		if ((rc = gp_topo_place(t, &busid[i], 1, &other)) < 0)
			break;
		same = hwloc_bitmap_isequal(other.cpuset, first.cpuset);
		if (!same && (hwloc_bitmap_or(pl->cpuset, pl->cpuset,
		    other.cpuset) == -1 || hwloc_bitmap_or(pl->nodeset,
		    pl->nodeset, other.nodeset) == -1))
			rc = -ENOMEM;
		gp_place_release(&other);
	}
	gp_place_release(&first);
	all = hwloc_topology_get_topology_nodeset(t);
	pl->membind = !hwloc_bitmap_iszero(pl->nodeset) &&
	    !hwloc_bitmap_isequal(pl->nodeset, all);
	return rc;
}
