/*
 * near.c: how near the pool's GPUs sit to each other, at the levels of
 * enum gp_near: one NVLink domain (from an XML topology's NVLinkBandwidth
 * matrix), one PCIe switch, one NUMA node. gate.c groups and picks GPUs
 * by these ids. Only hwloc calls on loaded topologies: the NVLink matrix
 * comes from a second, XML-only load (gp_topo_open() with OS devices
 * kept); a live system's would need hwloc's NVML component, which never
 * runs in the master.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "topo.h"

/*
 * Domain ids are the index of the domain's lowest GPU: key[i] names GPU
 * i's domain (NULL: none), and dom[i][lv] becomes the lowest j with the
 * same key.
 */
static void
keyed(const void *const *key, int n, int lv, int (*dom)[GP_NEAR_LEVELS])
{
	int	 i, j;

	for (i = 0; i < n; i++) {
		if (key[i] == NULL)
			continue;
		for (j = 0; key[j] != key[i]; j++)
			;
		dom[i][lv] = j;
	}
}

/*
 * The topmost bridge above pci that is not a host bridge: on a real
 * machine the root port, under which a PCIe switch fans out. NULL when
 * the device hangs off the host bridge itself.
 */
static hwloc_obj_t
topbridge(hwloc_obj_t pci)
{
	hwloc_obj_t	 b, top = NULL;

	for (b = pci->parent; b != NULL && b->type == HWLOC_OBJ_BRIDGE;
	    b = b->parent)
		if (b->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI)
			top = b;
	return top;
}

/*
 * The OS index of the first NUMA node of pci's locality, or -1 when it has
 * none, or is the whole machine with several nodes (a VM that does not
 * say where its GPUs sit).
 */
static int
numaof(hwloc_topology_t t, hwloc_obj_t pci)
{
	hwloc_const_nodeset_t	 all;
	hwloc_obj_t		 anc;

	all = hwloc_topology_get_topology_nodeset(t);
	anc = hwloc_get_non_io_ancestor_obj(t, pci);
	if (anc == NULL || anc->nodeset == NULL ||
	    hwloc_bitmap_iszero(anc->nodeset) ||
	    (hwloc_bitmap_isincluded(all, anc->nodeset) &&
	    hwloc_bitmap_weight(all) > 1))
		return -1;
	return hwloc_bitmap_first(anc->nodeset);
}

/* The PCI device a distances object stands for (an OS device's parent). */
static hwloc_obj_t
devof(hwloc_obj_t o)
{
	while (o != NULL && o->type == HWLOC_OBJ_OS_DEVICE)
		o = o->parent;
	return o != NULL && o->type == HWLOC_OBJ_PCI_DEVICE ? o : NULL;
}

static int
ufind(int *up, int a)
{
	while (up[a] != a)
		a = up[a] = up[up[a]];
	return a;
}

/*
 * Union the objects of matrix d that are NVLink-near: two pool GPUs
 * (gpu[o] >= 0) linked either way, or a pool GPU and an NVSwitch linked
 * both ways. Links between switches (the trunk between two DGX-2
 * baseboards) and to CPUs (POWER8's packages) make nothing near.
 */
static void
links(const struct hwloc_distances_s *d, const int *gpu, int *up)
{
	const hwloc_uint64_t	*v = d->values;
	unsigned		 a, b, nb = d->nbobjs;
	int			 sw, fwd, back;

	for (a = 0; a < nb; a++) {
		sw = gpu[a] < 0 && devof(d->objs[a]) != NULL &&
		    d->objs[a]->subtype != NULL &&
		    strcmp(d->objs[a]->subtype, "NVSwitch") == 0;
		for (b = 0; b < nb; b++) {
			if (a == b || gpu[b] < 0)
				continue;
			fwd = v[a * nb + b] > 0;
			back = v[b * nb + a] > 0;
			if ((gpu[a] >= 0 && (fwd || back)) ||
			    (sw && fwd && back))
				up[ufind(up, (int)a)] = ufind(up, (int)b);
		}
	}
}

/*
 * NVLink domains from the XML's NVLinkBandwidth matrix, which names GPUs
 * by their NVML OS devices: load the file again with OS devices kept (the
 * XML backend alone runs, GPU components stay blacklisted). A file
 * without the matrix leaves them unknown. key[] is n pointers of scratch.
 * Returns 0 or a negative errno.
 */
static int
nvlink(const char *xml, const char *const *busid, int n,
    int (*dom)[GP_NEAR_LEVELS], const void **key)
{
	struct hwloc_distances_s *d = NULL;
	hwloc_topology_t	 t;
	hwloc_obj_t		 dev;
	unsigned		 nr = 1, o;
	int			*gpu = NULL, *up = NULL, i, rc;

	if ((rc = gp_topo_open(&t, xml, HWLOC_TYPE_FILTER_KEEP_ALL,
	    HWLOC_TYPE_FILTER_KEEP_ALL)) < 0)
		return rc;
	if (hwloc_distances_get_by_name(t, "NVLinkBandwidth", &nr, &d, 0) ==
	    -1 || nr == 0)
		goto out;
	if ((gpu = calloc(d->nbobjs, sizeof(*gpu))) == NULL ||
	    (up = calloc(d->nbobjs, sizeof(*up))) == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	for (i = 0; i < n; i++)
		key[i] = gp_topo_pcidev(t, busid[i]);
	for (o = 0; o < d->nbobjs; o++) {
		up[o] = (int)o;
		gpu[o] = -1;
		dev = devof(d->objs[o]);
		for (i = 0; i < n && dev != NULL && gpu[o] < 0; i++)
			if (key[i] == dev)
				gpu[o] = i;
	}
	links(d, gpu, up);
	for (i = 0; i < n; i++)
		key[i] = NULL;
	for (o = 0; o < d->nbobjs; o++)
		if (gpu[o] >= 0 && key[gpu[o]] == NULL)
			key[gpu[o]] = &up[ufind(up, (int)o)];
	keyed(key, n, GP_NEAR_NVLINK, dom);
out:
	free(up);
	free(gpu);
	if (d != NULL)
		hwloc_distances_release(t, d);
	hwloc_topology_destroy(t);
	return rc;
}

int
gp_topo_near(hwloc_topology_t t, const char *xml, const char *const *busid,
    int n, int (*dom)[GP_NEAR_LEVELS])
{
	const void	**key;
	hwloc_obj_t	 pci;
	int		 i, lv;

	for (i = 0; i < n; i++)
		for (lv = 0; lv < GP_NEAR_LEVELS; lv++)
			dom[i][lv] = -1;
	if (n <= 0 || busid == NULL)
		return 0;
	if ((key = calloc((size_t)n, sizeof(*key))) == NULL)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		if ((pci = gp_topo_pcidev(t, busid[i])) == NULL)
			continue;
		key[i] = topbridge(pci);
		dom[i][GP_NEAR_NUMA] = numaof(t, pci);
	}
	keyed(key, n, GP_NEAR_PCI, dom);
	i = xml != NULL ? nvlink(xml, busid, n, dom, key) : 0;
	free(key);
	return i;
}
