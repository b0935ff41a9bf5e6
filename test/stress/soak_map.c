/*
 * soak_map ITEMS MAPS: run MAPS consecutive pool_map() calls of ITEMS items
 * each on the default pool (GPUPOOL_FAKE_GPUS), checking every result, and
 * sample between maps this process's fd count, RSS and children (and
 * zombies among them). Fails (exit 1) when fds or children change after
 * the first map, any child is a zombie, or RSS grows past the bound.
 */
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpupool.h"

/* RSS growth allowed from after map 1 to the end: malloc's arenas swing by
 * about the size of the result buffers (tens of MiB at 10^6 items), so the
 * bound is 4 MiB plus half the RSS after map 1; a leak of even 8 bytes per
 * item grows linearly with the maps and passes it. */
#define RSS_BOUND_KIB(r1)	(4096 + (r1) / 2)

static int
fn(struct gp_ctx *ctx, const void *in, size_t inlen, void *arg)
{
	uint64_t	 v;

	if (inlen != sizeof(v))
		return 2;
	memcpy(&v, in, sizeof(v));
	v = v * 2 + 1;
	return gp_ctx_reply(ctx, &v, sizeof(v)) == 0 ? 0 : 3;
}

static int
count_fds(void)
{
	DIR		*d = opendir("/proc/self/fd");
	struct dirent	*e;
	int		 n = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1;		/* the one opendir holds */
}

static long
rss_kib(void)
{
	FILE	*f = fopen("/proc/self/status", "r");
	char	 line[256];
	long	 v = -1;

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &v) == 1)
			break;
	fclose(f);
	return v;
}

/* Children of this process (from every thread), and zombies among them. */
static int
count_children(int *zombies)
{
	char		 path[128], st[512], *p;
	DIR		*d = opendir("/proc/self/task");
	struct dirent	*e;
	FILE		*f;
	long		 pid;
	int		 n = 0;

	*zombies = 0;
	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/children",
		    e->d_name);
		if ((f = fopen(path, "r")) == NULL)
			continue;
		while (fscanf(f, "%ld", &pid) == 1) {
			FILE	*s;

			n++;
			snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
			if ((s = fopen(path, "r")) == NULL)
				continue;
			if (fgets(st, sizeof(st), s) &&
			    (p = strrchr(st, ')')) != NULL && p[2] == 'Z')
				(*zombies)++;
			fclose(s);
		}
		fclose(f);
	}
	closedir(d);
	return n;
}

int
main(int argc, char **argv)
{
	struct gp_item	*it;
	uint64_t	*in;
	size_t		 n, i, bad = 0;
	int		 maps, m, rc, fdstart, fd0 = -1, ch0 = -1, fds, ch, zo, fail = 0;
	long		 rss, rss1 = -1, rssmax = 0;
	struct timespec	 t0, t1;

	if (argc != 3 || (n = strtoull(argv[1], NULL, 10)) == 0 ||
	    (maps = atoi(argv[2])) <= 0) {
		fprintf(stderr, "usage: soak_map ITEMS MAPS\n");
		return 2;
	}
	if ((it = calloc(n, sizeof(*it))) == NULL ||
	    (in = malloc(n * sizeof(*in))) == NULL)
		return 2;
	for (i = 0; i < n; i++)
		in[i] = i;
	fdstart = count_fds();
	for (m = 0; m < maps; m++) {
		for (i = 0; i < n; i++) {
			it[i].in = &in[i];
			it[i].inlen = sizeof(in[i]);
		}
		clock_gettime(CLOCK_MONOTONIC, &t0);
		if ((rc = pool_map(fn, it, n)) != 0) {
			fprintf(stderr, "map %d: pool_map: %s\n", m,
			    gp_strerror(rc));
			return 1;
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		for (i = 0; i < n; i++) {
			uint64_t	 v = 0;

			if (it[i].status == GP_OK && it[i].outlen == sizeof(v))
				memcpy(&v, it[i].out, sizeof(v));
			if (it[i].status != GP_OK || v != 2 * i + 1 ||
			    it[i].attempts != 1) {
				if (bad++ < 5)
					fprintf(stderr, "map %d item %zu: status "
					    "%d code %d attempts %d value %"
					    PRIu64 "\n", m, i, it[i].status,
					    it[i].code, it[i].attempts, v);
			}
		}
		gp_items_release(it, n);
		memset(it, 0, n * sizeof(*it));
		fds = count_fds();
		rss = rss_kib();
		ch = count_children(&zo);
		printf("map %2d: %.2fs fds %d rss %ld KiB children %d "
		    "zombies %d\n", m, (double)(t1.tv_sec - t0.tv_sec) +
		    (double)(t1.tv_nsec - t0.tv_nsec) / 1e9, fds, rss, ch, zo);
		fflush(stdout);
		if (m == 0) {
			fd0 = fds;
			ch0 = ch;
		}
		if (m == 1)
			rss1 = rss;
		if (m >= 1 && rss > rssmax)
			rssmax = rss;
		if (fds != fd0 || ch != ch0 || zo != 0) {
			fprintf(stderr, "map %d: fds %d (first %d), children "
			    "%d (first %d), zombies %d\n", m, fds, fd0, ch,
			    ch0, zo);
			fail = 1;
		}
	}
	if (bad) {
		fprintf(stderr, "%zu bad items\n", bad);
		fail = 1;
	}
	if (rss1 >= 0 && rssmax - rss1 > RSS_BOUND_KIB(rss1)) {
		fprintf(stderr, "RSS grew from %ld to %ld KiB (bound %ld)\n",
		    rss1, rssmax, RSS_BOUND_KIB(rss1));
		fail = 1;
	}
	gp_default_pool_destroy();
	ch = count_children(&zo);
	fds = count_fds();
	printf("after gp_default_pool_destroy: children %d, fds %d (%d before the pool)\n",
	    ch, fds, fdstart);
	if (ch != 0 || fds != fdstart) {
		fprintf(stderr, "after gp_default_pool_destroy: %d children, %d fds (%d "
		    "before the pool)\n", ch, fds, fdstart);
		fail = 1;
	}
	free(it);
	free(in);
	return fail;
}
