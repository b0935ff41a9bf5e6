/*
 * check_probe.c: invariant 1's whole path on a machine whose GPUs the
 * probe finds: the probe child (the fake machine of fake_libcuda.c,
 * through GPUPOOL_PROBE), the pool's GPUs in PCI order with their UUIDs
 * and bus ids, each worker placed by its GPU's bus id in an FAKE_XML
 * topology, and each worker's CUDA_VISIBLE_DEVICES its GPU's UUID, never
 * an index, also under an inherited CUDA_VISIBLE_DEVICES. The expected
 * places are read from the FAKE_XML with hwloc here, not written down.
 */
#include <check.h>
#include <errno.h>
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpupool.h"
#include "check_main.h"
#include "fake_machine.h"

static char	 dir[] = "/tmp/gp-probe-XXXXXX";
static char	 machine[64], loadlog[64];

static void
setup(void)
{
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(machine, sizeof(machine), "%s/machine", dir);
	snprintf(loadlog, sizeof(loadlog), "%s/loads", dir);
	fake_machine(machine);
	setenv("GP_FAKE_CUDA_LOG", loadlog, 1);
	/* The probe must ask for PCI order itself. */
	setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST", 1);
	unsetenv("CUDA_VISIBLE_DEVICES");
}

static void
teardown(void)
{
	unlink(machine);
	unlink(loadlog);
	rmdir(dir);
}

/* The fake was loaded, and never by this process (the master). */
static void
assert_loaded_by_the_probe_only(void)
{
	FILE	*f = fopen(loadlog, "re");
	int	 pid, n = 0;

	ck_assert_ptr_nonnull(f);
	while (fscanf(f, "%d", &pid) == 1) {
		ck_assert_msg(pid != getpid(), "the master loaded the probe");
		n++;
	}
	fclose(f);
	ck_assert_int_ge(n, 1);
}

/* GPU busid's locality in FAKE_XML, from hwloc. */
static hwloc_bitmap_t
locality(hwloc_topology_t t, const char *bus)
{
	hwloc_obj_t	 pci = hwloc_get_pcidev_by_busidstring(t, bus);

	ck_assert_ptr_nonnull(pci);
	return hwloc_get_non_io_ancestor_obj(t, pci)->cpuset;
}

static hwloc_topology_t
load_xml(void)
{
	hwloc_topology_t	 t;

	ck_assert_int_eq(hwloc_topology_init(&t), 0);
	ck_assert_int_eq(hwloc_topology_set_xml(t, FAKE_XML), 0);
	hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
	ck_assert_int_eq(hwloc_topology_load(t), 0);
	return t;
}

static int
report_env(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	char		 buf[256];
	const char	*v = getenv("CUDA_VISIBLE_DEVICES");
	const char	*o = getenv("CUDA_DEVICE_ORDER");

	snprintf(buf, sizeof(buf), "%d %s %s", gp_ctx_info(ctx)->worker,
	    v ? v : "-", o ? o : "-");
	usleep(20000);	/* so every worker gets items */
	return gp_ctx_reply(ctx, buf, strlen(buf) + 1);
}

/*
 * Every worker of a pool on the probed GPUs (want[k]: the machine's
 * device of pool GPU k): its GPU's UUID, bus id and place, and in its
 * process CUDA_VISIBLE_DEVICES = that UUID, CUDA_DEVICE_ORDER=PCI_BUS_ID.
 */
static void
check_pool(struct gp_pool *p, const int *want, int n)
{
	hwloc_topology_t	 t = load_xml();
	hwloc_bitmap_t		 cs[FAKE_NGPU];
	struct gp_worker_info	 wi;
	struct gp_item		 it[24];
	int			 i, j, w, seen[FAKE_NGPU] = { 0 };
	char			 v[128], ord[64];

	ck_assert_int_eq(gp_pool_size(p), n);
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(gp_pool_info(p, i, &wi), 0);
		ck_assert_int_eq(wi.gpu, i);
		ck_assert_str_eq(wi.uuid, fake_uuid[want[i]]);
		ck_assert_str_eq(wi.busid, fake_busid[want[i]]);
		ck_assert_str_eq(wi.visible, fake_uuid[want[i]]);
		ck_assert_int_eq(wi.fake, 0);
		ck_assert_uint_eq(wi.mem_bytes, (uint64_t)16384 *
		    (want[i] + 1) << 20);
		/* Placed inside its GPU's locality, apart from the other
		 * workers there. */
		cs[i] = hwloc_bitmap_alloc();
		ck_assert_int_eq(hwloc_bitmap_list_sscanf(cs[i], wi.cpuset), 0);
		ck_assert_msg(hwloc_bitmap_isincluded(cs[i],
		    locality(t, fake_busid[want[i]])), "worker %d on %s: CPUs %s "
		    "outside its GPU's locality", i, fake_busid[want[i]], wi.cpuset);
		for (j = 0; j < i; j++)
			ck_assert(!hwloc_bitmap_intersects(cs[i], cs[j]));
	}
	memset(it, 0, sizeof(it));
	ck_assert_int_eq(gp_pool_map(p, report_env, NULL, 0, it, 24), 0);
	for (i = 0; i < 24; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		ck_assert_int_eq(sscanf(it[i].out, "%d %127s %63s", &w, v, ord),
		    3);
		ck_assert(w >= 0 && w < n);
		ck_assert_msg(strcmp(v, fake_uuid[want[w]]) == 0, "worker %d on GPU "
		    "%s saw CUDA_VISIBLE_DEVICES=%s, not its UUID", w,
		    fake_busid[want[w]], v);
		ck_assert_str_eq(ord, "PCI_BUS_ID");
		seen[w] = 1;
	}
	for (i = 0; i < n; i++)
		ck_assert_msg(seen[i], "worker %d ran no item", i);
	gp_items_release(it, 24);
	for (i = 0; i < n; i++)
		hwloc_bitmap_free(cs[i]);
	hwloc_topology_destroy(t);
}

static struct gp_pool *
make(const char *gpus)
{
	struct gp_pool		*p = NULL;
	struct gp_pool_opts	 o = { .topology_xml = FAKE_XML, .gpus = gpus };
	char			 err[256] = "";

	o.errbuf = err;
	o.errlen = sizeof(err);
	ck_assert_msg(gp_pool_create(&p, &o) == 0, "%s", err);
	return p;
}

/* All the GPUs the probe finds, in PCI order (the fake gives another
 * order unless the probe asks for PCI_BUS_ID). */
START_TEST(probed_gpus_run_by_uuid_where_their_bus_id_is)
{
	static const int	 all[] = { 0, 1, 2 };
	struct gp_pool		*p = make(NULL);

	check_pool(p, all, FAKE_NGPU);
	gp_pool_destroy(p);
	assert_loaded_by_the_probe_only();
}
END_TEST

/* Slurm gave us physical GPUs 2 and 0, in that order: CUDA numbers them
 * 0 and 1. A worker told "0" would land on physical GPU 0 whichever GPU
 * it was meant for; by UUID each gets its own. */
START_TEST(inherited_visible_devices_become_uuids)
{
	static const int	 given[] = { 2, 0 };
	struct gp_pool		*p;

	setenv("CUDA_VISIBLE_DEVICES", "2,0", 1);
	p = make(NULL);
	check_pool(p, given, 2);
	gp_pool_destroy(p);
	/* Only the second of them, by its index in the inherited list. */
	p = make("1");
	check_pool(p, given + 1, 1);
	gp_pool_destroy(p);
	unsetenv("CUDA_VISIBLE_DEVICES");
}
END_TEST

/* GPUs given by a UUID prefix and by bus id are the probed ones, by
 * UUID; an ambiguous prefix or a GPU the probe did not find is refused. */
START_TEST(given_ids_are_matched_to_probed_gpus)
{
	static const int	 pick[] = { 2, 0 };
	struct gp_pool		*p = NULL;
	struct gp_pool_opts	 o = { .topology_xml = FAKE_XML };
	char			 err[256];

	p = make("GPU-8932f9ff,0000:03:00.0");
	check_pool(p, pick, 2);
	gp_pool_destroy(p);
	o.errbuf = err;
	o.errlen = sizeof(err);
	o.gpus = "8932f9";
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "ambiguous"));
	o.gpus = "0000:85:00.0";
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "no GPU '0000:85:00.0'"));
	assert_loaded_by_the_probe_only();
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("probe");
	TCase	*tc = tcase_create("probe");

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, probed_gpus_run_by_uuid_where_their_bus_id_is);
	tcase_add_test(tc, inherited_visible_devices_become_uuids);
	tcase_add_test(tc, given_ids_are_matched_to_probed_gpus);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
