/*
 * proc_test.h: helpers the proc suites share (check_faults, check_host,
 * check_pool, check_exec ...): a clock, whether a process is gone, the
 * descriptors open here, no child left, a worker's CPUs as it sees them,
 * int items and the small fns (crash, nap, reply the pid) on them.
 */
#ifndef GP_PROC_TEST_H
#define GP_PROC_TEST_H

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <hwloc.h>

#include "gpupool.h"

static inline int64_t
now_ms(void)
{
	struct timespec	 ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* No child of ours is left, running or zombie. */
static inline void
assert_no_children(void)
{
	errno = 0;
	ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
	ck_assert_int_eq(errno, ECHILD);
}

static inline int
gone(pid_t pid)
{
	char	 path[64], buf[512], *s;
	FILE	*f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((f = fopen(path, "re")) == NULL)
		return 1;
	s = fgets(buf, sizeof(buf), f);
	fclose(f);
	return s == NULL || ((s = strrchr(buf, ')')) != NULL && s[2] == 'Z');
}

static inline int
count_fds(void)
{
	DIR		*d = opendir("/proc/self/fd");
	struct dirent	*e;
	int		 n = 0;

	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1;	/* the DIR's own fd */
}

/* Whether this kernel (and valgrind) give pidfds. */
static inline int
have_pidfd(void)
{
	int	 fd = (int)syscall(SYS_pidfd_open, getpid(), 0);

	if (fd < 0)
		return 0;
	close(fd);
	return 1;
}

/* The fds a pool's master holds for claims: the table's, unless claims
 * are off (GPUPOOL_CLAIMS=none). */
static inline int
claims_on(void)
{
	const char	*d = getenv("GPUPOOL_CLAIMS");

	return d == NULL || strcmp(d, "none") != 0;
}

/* A worker's CPUs, as sched_getaffinity() says, listed "0,1,3". */
static inline int
affinity(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	cpu_set_t	 set;
	char		 buf[256];
	size_t		 o = 0;
	int		 c;

	if (sched_getaffinity(0, sizeof(set), &set) == -1)
		return errno;
	buf[0] = '\0';
	for (c = 0; c < CPU_SETSIZE && o < sizeof(buf) - 8; c++)
		if (CPU_ISSET(c, &set))
			o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s%d",
			    o ? "," : "", c);
	return gp_ctx_reply(ctx, buf, strlen(buf) + 1);
}

/* Expand a hwloc list ("0-2,5") to the comma form affinity() sends. */
static inline void
expand(const char *list, char *out, size_t len)
{
	hwloc_bitmap_t	 b = hwloc_bitmap_alloc();
	unsigned	 c;
	size_t		 o = 0;

	hwloc_bitmap_list_sscanf(b, list);
	out[0] = '\0';
	hwloc_bitmap_foreach_begin(c, b)
		o += (size_t)snprintf(out + o, len - o, "%s%u", o ? "," : "", c);
	hwloc_bitmap_foreach_end();
	hwloc_bitmap_free(b);
}

/* n items, item i the int i (in vals[i]). */
static inline struct gp_item *
int_items(int *vals, size_t n)
{
	struct gp_item	*it = calloc(n, sizeof(*it));
	size_t		 i;

	for (i = 0; i < n; i++) {
		vals[i] = (int)i;
		it[i].in = &vals[i];
		it[i].inlen = sizeof(int);
	}
	return it;
}

/* Item in's int. */
static inline int
item_int(const void *in)
{
	int	 x;

	memcpy(&x, in, sizeof(x));
	return x;
}

/* fns: crash (abort()), nap 50 ms, reply the worker's pid. */
static inline int
always_crash(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	abort();
}

static inline int
nap(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	usleep(50000);
	return 0;
}

static inline int
reply_pid(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	pid_t	 pid = getpid();

	return gp_ctx_reply(ctx, &pid, sizeof(pid));
}

#endif /* GP_PROC_TEST_H */
