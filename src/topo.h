/*
 * topo.h: hwloc topology, GPU locality and worker placement (topo.c), and
 * how near GPUs sit (near.c). Never installed. The master loads the
 * topology and computes placement;
 * each worker binds itself with the inherited topology after fork.
 * Nothing here touches CUDA, NVML or an hwloc GPU component.
 */
#ifndef GP_TOPO_H
#define GP_TOPO_H

#include <stddef.h>
#include <hwloc.h>

#include "gate.h"

/* Flags describing how a worker's place was decided (struct gp_place). */
enum gp_place_flags {
	GP_PLACE_MACHINE  = (1 << 0),	/* locality is the whole machine */
	GP_PLACE_NOBUSID  = (1 << 1),	/* GPU has no PCI bus id: whole machine */
	GP_PLACE_NOTFOUND = (1 << 2),	/* bus id not in the topology: whole machine */
	GP_PLACE_EMPTY    = (1 << 3),	/* GPU's locality has no CPU: whole machine */
	GP_PLACE_SHARED   = (1 << 4),	/* more workers than cores: set shared */
};

struct gp_place {
	hwloc_bitmap_t	 cpuset;	/* CPUs the worker binds to */
	hwloc_bitmap_t	 nodeset;	/* NUMA nodes for memory */
	int		 numa;		/* OS index of first NUMA node, -1 if none */
	int		 membind;	/* 1: bind memory; 0: nodeset is the whole machine */
	unsigned	 flags;		/* enum gp_place_flags */
};

/*
 * Load the topology of this system, or of the XML file at xml (not NULL).
 * With pci, PCI devices are kept (HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
 * without, no I/O is discovered at all (reading PCI config space can cost
 * milliseconds per device in a VM). OS devices never are (no
 * cuda/nvml/opencl component runs). Returns 0, or a negative errno with a
 * one-line reason written to err (errlen bytes).
 */
int	gp_topo_load(hwloc_topology_t *out, const char *xml, int pci,
	    char *err, size_t errlen);

/* Load a topology from len bytes of XML at buf (the master's, exported
 * for an exec'd worker), binding for real when thissystem. 0 or a
 * negative errno. */
int	gp_topo_xml(hwloc_topology_t *out, const char *buf, int len,
	    int thissystem);

/* Load the topology of this system (xml NULL) or of an XML file with
 * the given I/O and OS device filters, GPU components blacklisted.
 * Returns 0 or a negative errno; *out is NULL on failure (for
 * gp_topo_load() and near.c's NVLink load). */
int	gp_topo_open(hwloc_topology_t *out, const char *xml,
	    enum hwloc_type_filter_e io, enum hwloc_type_filter_e osdev);
/*
 * The topology cache (tcache.c): this system's discovered topology kept
 * as XML, keyed by what discovery depends on. gp_tcache_open() finds the
 * file's place and computes the key: 0, or a negative errno when there is
 * no cache to use (GPUPOOL_TOPOLOGY_CACHE=none, an HWLOC_ variable set, no
 * HOME, a directory not the effective user's alone); close it either way.
 * gp_tcache_read() returns the cached XML (malloc'd, NUL-terminated, *len
 * counting the NUL) when the file is the user's and its key is this
 * system's, else NULL. gp_tcache_write() replaces the file atomically
 * (len as hwloc exports it); a failure is silent.
 */
struct gp_tcache {
	int	 dfd;		/* the cache directory, or -1 */
	char	 name[300];	/* topology-HOST[-pci].xml */
	char	*key;		/* the file's first line */
};

int	gp_tcache_open(struct gp_tcache *c, int pci);
char	*gp_tcache_read(struct gp_tcache *c, int *len);
void	gp_tcache_write(struct gp_tcache *c, const char *xml, int len);
void	gp_tcache_close(struct gp_tcache *c);

/* GPU busid's PCI device in t, or NULL (no such device, or a bad id). */
hwloc_obj_t gp_topo_pcidev(hwloc_topology_t t, const char *busid);

/*
 * Compute the place of n workers. busid[i] is worker i's GPU PCI bus id
 * ("dddd:bb:dd.f"), or NULL/"" when unknown. Workers whose GPUs share a
 * locality get disjoint core sets (hwloc_distrib at core depth) in index
 * order; when a locality has fewer cores than workers, each of those
 * workers gets the whole locality (GP_PLACE_SHARED). out[] must hold n
 * entries; on success each must be released with gp_place_release().
 * Returns 0 or -ENOMEM.
 */
int	gp_topo_place(hwloc_topology_t t, const char *const *busid, int n,
	    struct gp_place *out);
void	gp_place_release(struct gp_place *p);

/*
 * A place for GPUs busid[0..n-1] together: pl, already the place of
 * busid[0] (a worker's share of its locality, or all of it), widened by
 * the whole locality of each other GPU that lies elsewhere (a GPU on the
 * same locality as busid[0] adds nothing, so workers sharing it keep
 * disjoint cores). Returns 0 or -ENOMEM.
 */
int	gp_topo_widen(hwloc_topology_t t, struct gp_place *pl,
	    const char *const *busid, int n);

/*
 * near.c: how near the n GPUs with PCI bus ids busid[] (as gp_topo_place()) sit,
 * per level of enum gp_near: dom[i][lv] is GPU i's domain, -1 when
 * unknown; equal ids mean the same domain. NVLINK and PCI ids are the
 * index of the domain's lowest GPU, NUMA ids a node's OS index.
 * NVLINK: GPUs linked directly, or both ways to the same NVSwitch, in the
 * NVLinkBandwidth matrix of the XML file xml (t's own file, loaded a
 * second time with OS devices kept, XML only); with xml NULL (this
 * system) unknown, since only hwloc's NVML component could tell, in the
 * master. PCI: GPUs under the same topmost non-host bridge (a root port
 * with a PCIe switch below); unknown for a GPU on the host bridge itself.
 * NUMA: the first NUMA node of the GPU's locality; unknown when the
 * locality is the whole machine and it has several. Returns 0, or a
 * negative errno (-ENOMEM, or the second load's) with every domain it
 * could not tell left -1.
 */
int	gp_topo_near(hwloc_topology_t t, const char *xml,
	    const char *const *busid, int n, int (*dom)[GP_NEAR_LEVELS]);

/*
 * Bind the calling process (a worker, single-threaded) to p: CPUs first,
 * then memory when p->membind. *cpu_rc and *mem_rc get 0 or a negative
 * errno each; the return value is the first failure, or 0.
 */
int	gp_topo_bind(hwloc_topology_t t, const struct gp_place *p, int *cpu_rc,
	    int *mem_rc);

/* Format a bitmap as a list ("0-3,8"); returns snprintf-style length. */
int	gp_topo_list(char *buf, size_t len, hwloc_const_bitmap_t set);

#endif /* GP_TOPO_H */
