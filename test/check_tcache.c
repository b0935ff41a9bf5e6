/*
 * check_tcache.c: the topology cache (tcache.c, invariant 91): the first
 * load writes it, the next reads it (a topology planted with this
 * system's key and a marker comes back marked), a file of another key
 * (boot, affinity), a garbage file, one not the user's alone or in a
 * directory others may write is not used; GPUPOOL_TOPOLOGY_CACHE=none,
 * an HWLOC_ variable and an explicit XML write nothing; workers of a pool
 * whose topology came from the cache are bound (CPU and memory). Each
 * case points XDG_CACHE_HOME at a directory of its own.
 */

#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <hwloc.h>

#include "gpupool.h"
#include "topo.h"
#include "check_main.h"
#include "proc_test.h"
#include "pool_test.h"

#define MARK	"GPTestCache"

static char	 top[64];	/* this case's XDG_CACHE_HOME */
static char	 dir[128];	/* top/gpupool */
static char	 file[512];	/* dir/topology-HOST.xml */

static int
rmone(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(path);
}

static void
setup(void)
{
	char	 host[256];
	size_t	 i;

	snprintf(top, sizeof(top), "/tmp/gp-tcache-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(top));
	ck_assert_int_eq(setenv("XDG_CACHE_HOME", top, 1), 0);
	ck_assert_int_eq(unsetenv("GPUPOOL_TOPOLOGY_CACHE"), 0);
	snprintf(dir, sizeof(dir), "%s/gpupool", top);
	ck_assert_int_eq(gethostname(host, sizeof(host)), 0);
	host[sizeof(host) - 1] = '\0';
	for (i = 0; host[i] != '\0'; i++)
		if (!((host[i] >= 'a' && host[i] <= 'z') ||
		    (host[i] >= 'A' && host[i] <= 'Z') ||
		    (host[i] >= '0' && host[i] <= '9') || host[i] == '.' ||
		    host[i] == '-'))
			host[i] = '_';
	snprintf(file, sizeof(file), "%s/topology-%s.xml", dir, host);
}

static void
teardown(void)
{
	(void)chmod(dir, 0700);
	(void)nftw(top, rmone, 16, FTW_DEPTH | FTW_PHYS);
}

static hwloc_topology_t
load(void)
{
	hwloc_topology_t t;
	char		 err[256];

	ck_assert_msg(gp_topo_load(&t, NULL, 0, err, sizeof(err)) == 0,
	    "%s", err);
	return t;
}

static int
marked(hwloc_topology_t t)
{
	const char	*v = hwloc_obj_get_info_by_name(hwloc_get_root_obj(t),
	    MARK);

	return v != NULL && strcmp(v, "planted") == 0;
}

static ino_t
inode(void)
{
	struct stat	 st;

	if (stat(file, &st) == -1)
		return 0;
	return st.st_ino;
}

/* The cache file's first line (its key), or "" when there is none. */
static void
keyline(char *out, size_t len)
{
	FILE	*f = fopen(file, "r");

	out[0] = '\0';
	if (f == NULL)
		return;
	if (fgets(out, (int)len, f) == NULL)
		out[0] = '\0';
	out[strcspn(out, "\n")] = '\0';
	(void)fclose(f);
}

/* Write key and body as the cache file, a new inode, mode 0600. */
static void
plant_raw(const char *key, const char *body, size_t blen)
{
	char	 tmp[600];
	FILE	*f;

	snprintf(tmp, sizeof(tmp), "%s.plant", file);
	ck_assert_ptr_nonnull(f = fopen(tmp, "w"));
	ck_assert_int_eq(fprintf(f, "%s\n", key) > 0, 1);
	ck_assert_uint_eq(fwrite(body, 1, blen, f), blen);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(chmod(tmp, 0600), 0);
	ck_assert_int_eq(rename(tmp, file), 0);
}

/* This system's topology, marked, under key. */
static void
plant(const char *key)
{
	hwloc_topology_t t;
	char		*xml;
	int		 len;

	ck_assert_int_eq(gp_topo_open(&t, NULL, HWLOC_TYPE_FILTER_KEEP_NONE,
	    HWLOC_TYPE_FILTER_KEEP_NONE), 0);
	ck_assert_int_eq(hwloc_obj_add_info(hwloc_get_root_obj(t), MARK,
	    "planted"), 0);
	ck_assert_int_eq(hwloc_topology_export_xmlbuffer(t, &xml, &len, 0), 0);
	plant_raw(key, xml, strlen(xml));
	hwloc_free_xmlbuffer(t, xml);
	hwloc_topology_destroy(t);
}

/* Load once: the cache is written; its key is copied to key. */
static void
first(char *key, size_t len)
{
	hwloc_topology_t t = load();
	struct stat	 st;

	hwloc_topology_destroy(t);
	ck_assert_int_eq(stat(dir, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0700);
	ck_assert_int_eq(stat(file, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0600);
	keyline(key, len);
	ck_assert_int_eq(strncmp(key, "gpupool-topology ", 17), 0);
}

START_TEST(first_load_writes_the_next_reads)
{
	hwloc_topology_t t;
	char		 key[8192], again[8192];
	ino_t		 ino;

	first(key, sizeof(key));
	ino = inode();
	t = load();
	ck_assert_int_eq(hwloc_topology_is_thissystem(t), 1);
	hwloc_topology_destroy(t);
	ck_assert(inode() == ino);		/* read, not rewritten */
	/* What is read is the file: a marked one comes back marked, as
	 * this system (binding real). */
	plant(key);
	ino = inode();
	t = load();
	ck_assert(marked(t));
	ck_assert_int_eq(hwloc_topology_is_thissystem(t), 1);
	hwloc_topology_destroy(t);
	ck_assert(inode() == ino);
	keyline(again, sizeof(again));
	ck_assert_str_eq(again, key);
}
END_TEST

/* Replace the value after " name=" in key by val. */
static void
rekey(char *key, size_t len, const char *name, const char *val)
{
	char	 tail[8192], *p, *end;

	ck_assert_ptr_nonnull(p = strstr(key, name));
	p += strlen(name);
	end = p + strcspn(p, " ");
	snprintf(tail, sizeof(tail), "%s", end);
	snprintf(p, len - (size_t)(p - key), "%s%s", val, tail);
}

START_TEST(another_boot_or_affinity_rediscovers)
{
	hwloc_topology_t t;
	cpu_set_t	 one, all;
	char		 key[8192], other[8192], now[8192];
	hwloc_bitmap_t	 b;
	ino_t		 ino;

	first(key, sizeof(key));
	snprintf(other, sizeof(other), "%s", key);
	rekey(other, sizeof(other), " boot=",
	    "00000000-0000-0000-0000-000000000000");
	plant(other);
	ino = inode();
	t = load();
	ck_assert(!marked(t));
	hwloc_topology_destroy(t);
	ck_assert(inode() != ino);		/* rewritten */
	keyline(now, sizeof(now));
	ck_assert_str_eq(now, key);

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		return;
	/* As taskset -c 1 would leave us: the marked file of the whole
	 * machine's key is not this process's topology. */
	plant(key);
	ck_assert_int_eq(sched_getaffinity(0, sizeof(all), &all), 0);
	CPU_ZERO(&one);
	CPU_SET(1, &one);
	ck_assert_int_eq(sched_setaffinity(0, sizeof(one), &one), 0);
	t = load();
	ck_assert(!marked(t));
	b = hwloc_bitmap_alloc();
	hwloc_bitmap_only(b, 1);
	ck_assert(hwloc_bitmap_isequal(hwloc_get_root_obj(t)->cpuset, b));
	hwloc_bitmap_free(b);
	hwloc_topology_destroy(t);
	keyline(now, sizeof(now));
	ck_assert_str_ne(now, key);
	ck_assert_ptr_nonnull(strstr(now, " cpus=2 "));
	ck_assert_int_eq(sched_setaffinity(0, sizeof(all), &all), 0);
}
END_TEST

START_TEST(garbage_is_rediscovered)
{
	static const char *const body[] = {
		"<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n<obj",
		"\x01\x02\xff not xml at all",
	};
	hwloc_topology_t t;
	char		 key[8192], now[8192];
	size_t		 i;
	ino_t		 ino;

	first(key, sizeof(key));
	for (i = 0; i < sizeof(body) / sizeof(body[0]); i++) {
		plant_raw(key, body[i], strlen(body[i]));
		ino = inode();
		t = load();
		ck_assert_int_gt(hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU), 0);
		hwloc_topology_destroy(t);
		ck_assert(inode() != ino);
		keyline(now, sizeof(now));
		ck_assert_str_eq(now, key);
	}
	/* No key line at all, and an empty file. */
	plant_raw("junk", "", 0);
	ino = inode();
	hwloc_topology_destroy(load());
	ck_assert(inode() != ino);
	ck_assert_int_eq(truncate(file, 0), 0);
	hwloc_topology_destroy(load());
	keyline(now, sizeof(now));
	ck_assert_str_eq(now, key);
}
END_TEST

/* A load that does not use the planted, marked file. */
static void
unused(void)
{
	hwloc_topology_t t = load();

	ck_assert(!marked(t));
	hwloc_topology_destroy(t);
}

START_TEST(not_the_users_alone_is_not_used)
{
	char		 key[8192];
	ino_t		 ino;

	first(key, sizeof(key));
	/* A directory others may write: not read, not written. */
	plant(key);
	ino = inode();
	ck_assert_int_eq(chmod(dir, 0770), 0);
	unused();
	ck_assert(inode() == ino);
	ck_assert_int_eq(chmod(dir, 0702), 0);
	unused();
	ck_assert_int_eq(chmod(dir, 0700), 0);
	/* A file others may write: not read; replaced by the user's own. */
	ck_assert_int_eq(chmod(file, 0620), 0);
	unused();
	ck_assert(inode() != ino);
	if (geteuid() != 0)
		return;
	/* A file, then a directory, of another user's (root can plant
	 * them). */
	plant(key);
	ck_assert_int_eq(chown(file, 65534, 65534), 0);
	ino = inode();
	unused();
	ck_assert(inode() != ino);
	plant(key);
	ck_assert_int_eq(chown(dir, 65534, 65534), 0);
	unused();
}
END_TEST

START_TEST(off_by_env_or_explicit_xml)
{
	hwloc_topology_t t;
	char		 err[256];
	struct stat	 st;

	ck_assert_int_eq(setenv("GPUPOOL_TOPOLOGY_CACHE", "none", 1), 0);
	hwloc_topology_destroy(load());
	ck_assert_int_eq(stat(file, &st), -1);
	ck_assert_int_eq(unsetenv("GPUPOOL_TOPOLOGY_CACHE"), 0);
	ck_assert_int_eq(setenv("HWLOC_HIDE_ERRORS", "1", 1), 0);
	hwloc_topology_destroy(load());
	ck_assert_int_eq(stat(file, &st), -1);
	ck_assert_int_eq(unsetenv("HWLOC_HIDE_ERRORS"), 0);
	ck_assert_int_eq(gp_topo_load(&t, GP_FIXTURES "/nvidiaDGX2.xml", 0,
	    err, sizeof(err)), 0);
	hwloc_topology_destroy(t);
	ck_assert_int_eq(stat(file, &st), -1);
	/* No usable place (a path under a file): discovery, no error. */
	ck_assert_int_eq(setenv("XDG_CACHE_HOME", "/dev/null/x", 1), 0);
	hwloc_topology_destroy(load());
	ck_assert_int_eq(unsetenv("XDG_CACHE_HOME"), 0);
	ck_assert_int_eq(unsetenv("HOME"), 0);
	hwloc_topology_destroy(load());
}
END_TEST

/* The worker's memory policy: "bind LIST" or "default". */
static int
mempol(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	unsigned long	 mask[16] = { 0 };
	char		 buf[256];
	size_t		 o;
	int		 mode = -1, n;

	(void)in;
	(void)len;
	(void)arg;
	if (syscall(SYS_get_mempolicy, &mode, mask, 16 * 8 * sizeof(long),
	    NULL, 0UL) == -1)
		return errno;
	if (mode == 0)
		return gp_ctx_reply(ctx, "default", 8);
	o = (size_t)snprintf(buf, sizeof(buf), "mode%d ", mode);
	for (n = 0; n < 16 * 64 && o < sizeof(buf) - 8; n++)
		if (mask[n / 64] & (1UL << (n % 64)))
			o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s%d",
			    buf[o - 1] == ' ' ? "" : ",", n);
	return gp_ctx_reply(ctx, buf, strlen(buf) + 1);
}

/* The NUMA nodes online, in affinity()'s form ("0" without NUMA). */
static void
online(char *out, size_t len)
{
	char	 buf[256] = "0";
	FILE	*f = fopen("/sys/devices/system/node/online", "r");

	if (f != NULL) {
		if (fgets(buf, sizeof(buf), f) == NULL)
			snprintf(buf, sizeof(buf), "0");
		(void)fclose(f);
	}
	buf[strcspn(buf, "\n")] = '\0';
	expand(buf, out, len);
}

START_TEST(workers_bound_from_the_cache)
{
	int			 ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN), i;
	struct gp_worker_info	 wi[2];
	struct gp_item		 it[20];
	struct gp_pool		*p;
	char			 key[8192], want[256], list[256], nodes[256];
	ino_t			 ino;

	gp_pool_destroy(make_pool(ncpu >= 2 ? 2 : 1, 1));
	keyline(key, sizeof(key));
	ck_assert_str_ne(key, "");
	plant(key);
	ino = inode();
	p = make_pool(ncpu >= 2 ? 2 : 1, 1);
	ck_assert(inode() == ino);		/* from the cache */
	memset(it, 0, sizeof(it));
	ck_assert_int_eq(gp_pool_map(p, affinity, NULL, 0, it, 20), 0);
	for (i = 0; i < gp_pool_size(p); i++) {
		ck_assert_int_eq(gp_pool_info(p, i, &wi[i]), 0);
		ck_assert_int_eq(wi[i].cpubind_rc, 0);
		ck_assert_int_eq(wi[i].membind_rc, 0);
	}
	for (i = 0; i < 20; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		expand(wi[it[i].worker].cpuset, want, sizeof(want));
		ck_assert_str_eq((char *)it[i].out, want);
	}
	if (gp_pool_size(p) == 2)
		ck_assert_str_ne(wi[0].cpuset, wi[1].cpuset);
	gp_items_release(it, 20);
	/* Memory: bound to the worker's nodes, unless those are every node
	 * (the kernel's default policy then, as without the cache). */
	online(nodes, sizeof(nodes));
	ck_assert_int_eq(gp_pool_map(p, mempol, NULL, 0, it, 20), 0);
	for (i = 0; i < 20; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		expand(wi[it[i].worker].nodeset, list, sizeof(list));
		if (list[0] == '\0' || strcmp(list, nodes) == 0)
			snprintf(want, sizeof(want), "default");
		else
			snprintf(want, sizeof(want), "mode2 %s", list);
		ck_assert_str_eq((char *)it[i].out, want);
	}
	gp_items_release(it, 20);
	gp_pool_destroy(p);
}
END_TEST

int
main(int argc, char **argv)
{
	Suite	*s = suite_create("tcache");
	TCase	*tc = tcase_create("tcache");

	(void)argc;
	(void)argv;
	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, first_load_writes_the_next_reads);
	tcase_add_test(tc, another_boot_or_affinity_rediscovers);
	tcase_add_test(tc, garbage_is_rediscovered);
	tcase_add_test(tc, not_the_users_alone_is_not_used);
	tcase_add_test(tc, off_by_env_or_explicit_xml);
	tcase_add_test(tc, workers_bound_from_the_cache);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
