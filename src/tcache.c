/*
 * tcache.c: this system's topology kept between runs as hwloc XML
 * (design.md "The topology cache"): discovery costs about 1.3 ms of a
 * launch, loading the XML about 0.1 ms. A file per host and PCI filter in
 * $XDG_CACHE_HOME/gpupool (else $HOME/.cache/gpupool), whose first line is
 * the key: everything the discovery's result depends on (boot, hwloc's
 * version, this file's format, the process's CPU and memory binding, the
 * CPUs and nodes online, the PCI devices). Any doubt means discover: a
 * directory or file not the effective user's alone, a key that differs, a
 * read or parse error. Only files and keys here; topo.c loads and exports
 * the XML. Linux only (the key is read from /proc and /sys).
 */

#include <sys/stat.h>
#include <sys/types.h>

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hwloc.h>

#include "topo.h"

/* Bump when topo.c's flags, filters or blacklists change what discovery
 * keeps: an older file then no longer matches. */
#define GP_TCACHE_FORMAT	1
/* A file larger than this is not read (a machine's XML without caches
 * is tens to hundreds of KiB). */
#define GP_TCACHE_MAX		(64L << 20)

/* A growing string: the key. ok turns 0 on the first failure. */
struct str {
	char	*s;
	size_t	 len, cap;
	int	 ok;
};

static void
add(struct str *b, const char *s, size_t n)
{
	char	*t;
	size_t	 cap, i;

	if (!b->ok)
		return;
	if (b->len + n + 1 > b->cap) {
		cap = (b->len + n + 1) * 2;
		if ((t = realloc(b->s, cap)) == NULL) {
			b->ok = 0;
			return;
		}
		b->s = t;
		b->cap = cap;
	}
	/* One line of printable text, whatever the file held. */
	for (i = 0; i < n; i++)
		b->s[b->len++] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	b->s[b->len] = '\0';
}

static void
adds(struct str *b, const char *s)
{
	add(b, s, strlen(s));
}

/* " name=" and the file's first line, "-" when it cannot be read. */
static void
addfile(struct str *b, const char *name, const char *path)
{
	char	 buf[4096];
	ssize_t	 n;
	int	 fd;

	adds(b, " ");
	adds(b, name);
	adds(b, "=");
	n = -1;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) != -1) {
		n = read(fd, buf, sizeof(buf) - 1);
		(void)close(fd);
	}
	if (n < 0) {
		adds(b, "-");
		return;
	}
	buf[n] = '\0';
	add(b, buf, strcspn(buf, "\n"));
}

/* The value of /proc/self/status's Mems_allowed line, the memory
 * binding that RESTRICT_TO_MEMBINDING reads. */
static void
addmems(struct str *b)
{
	char	 line[1024];
	FILE	*f;
	int	 found = 0;

	adds(b, " mems=");
	if ((f = fopen("/proc/self/status", "re")) == NULL) {
		adds(b, "-");
		return;
	}
	while (!found && fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, "Mems_allowed:", 13) == 0) {
			found = 1;
			add(b, line + 13 + strspn(line + 13, " \t"),
			    strcspn(line + 13 + strspn(line + 13, " \t"),
			    "\n"));
		}
	(void)fclose(f);
	if (!found)
		adds(b, "-");
}

/* The process's CPU affinity as hex words (up to 64K CPUs). */
static void
addcpus(struct str *b)
{
	cpu_set_t	*set = NULL;
	size_t		 size;
	char		 w[24];
	int		 n, i, last;

	adds(b, " cpus=");
	for (n = 1024; n <= 65536 && set == NULL; n *= 2) {
		if ((set = CPU_ALLOC(n)) == NULL)
			break;
		size = CPU_ALLOC_SIZE(n);
		if (sched_getaffinity(0, size, set) == 0)
			break;
		CPU_FREE(set);
		set = NULL;
		if (errno != EINVAL)
			break;
	}
	if (set == NULL) {
		b->ok = 0;
		return;
	}
	for (i = last = 0; i < n; i++)
		if (CPU_ISSET_S(i, size, set))
			last = i;
	for (i = 0; i <= last; i += 32) {
		unsigned long	 v = 0;
		int		 j;

		for (j = 0; j < 32 && i + j < n; j++)
			if (CPU_ISSET_S(i + j, size, set))
				v |= 1UL << j;
		snprintf(w, sizeof(w), "%s%lx", i ? "," : "", v);
		adds(b, w);
	}
	CPU_FREE(set);
}

static int
cmpname(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sorted names of /sys/bus/pci/devices: GPUs are placed by bus id,
 * and a device hot-plugged or gone changes what discovery finds. */
static void
addpci(struct str *b)
{
	struct dirent	*e;
	char		**v = NULL, **t;
	size_t		 n = 0, cap = 0, i;
	DIR		*d;

	adds(b, " pci=");
	if ((d = opendir("/sys/bus/pci/devices")) == NULL) {
		adds(b, "-");
		return;
	}
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			if ((t = realloc(v, cap * sizeof(*v))) == NULL)
				break;
			v = t;
		}
		if ((v[n] = strdup(e->d_name)) == NULL)
			break;
		n++;
	}
	if (e != NULL)
		b->ok = 0;
	(void)closedir(d);
	if (n > 1)
		qsort(v, n, sizeof(*v), cmpname);
	for (i = 0; i < n; i++) {
		if (i > 0)
			adds(b, ",");
		adds(b, v[i]);
		free(v[i]);
	}
	free(v);
}

/* The hwloc library file this process runs (device, inode, mtime): its
 * API version stays the same across bug-fix releases that may change
 * what discovery finds. */
static void
addlib(struct str *b)
{
	struct stat	 st;
	Dl_info		 dl;
	char		 w[96];

	if (dladdr((void *)hwloc_topology_load, &dl) == 0 ||
	    dl.dli_fname == NULL || stat(dl.dli_fname, &st) == -1) {
		adds(b, " lib=-");
		return;
	}
	snprintf(w, sizeof(w), " lib=%lx:%lx:%lld.%09ld",
	    (unsigned long)st.st_dev, (unsigned long)st.st_ino,
	    (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec);
	adds(b, w);
}

static char *
makekey(int pci)
{
	struct str	 b = { NULL, 0, 0, 1 };
	char		 h[64];

	snprintf(h, sizeof(h), "gpupool-topology %d hwloc=%x io=%d",
	    GP_TCACHE_FORMAT, hwloc_get_api_version(), pci);
	adds(&b, h);
	addlib(&b);
	addfile(&b, "boot", "/proc/sys/kernel/random/boot_id");
	addcpus(&b);
	addmems(&b);
	addfile(&b, "online", "/sys/devices/system/cpu/online");
	addfile(&b, "nodes", "/sys/devices/system/node/online");
	addpci(&b);
	if (!b.ok) {
		free(b.s);
		return NULL;
	}
	return b.s;
}

/* Ours alone: owned by the effective user, written by nobody else. */
static int
ours(const struct stat *st)
{
	return st->st_uid == geteuid() && (st->st_mode & 022) == 0;
}

/* The cache directory, made (0700) if missing: an fd, or -1. */
static int
opendirfd(void)
{
	const char	*x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
	char		 path[PATH_MAX];
	struct stat	 st;
	int		 fd, n;

	/* The XDG base directory rule: a relative value is ignored. */
	if (x != NULL && x[0] == '/') {
		(void)mkdir(x, 0700);
		n = snprintf(path, sizeof(path), "%s/gpupool", x);
	} else if (h != NULL && h[0] == '/') {
		n = snprintf(path, sizeof(path), "%s/.cache", h);
		if (n > 0 && (size_t)n < sizeof(path))
			(void)mkdir(path, 0700);
		n = snprintf(path, sizeof(path), "%s/.cache/gpupool", h);
	} else {
		return -1;
	}
	if (n < 0 || (size_t)n >= sizeof(path))
		return -1;
	(void)mkdir(path, 0700);
	if ((fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1)
		return -1;
	if (fstat(fd, &st) == -1 || !ours(&st)) {
		(void)close(fd);
		return -1;
	}
	return fd;
}

/* A caller tuning hwloc (HWLOC_XMLFILE, HWLOC_FSROOT, a component list
 * ...) gets its own discovery. */
static int
hwlocenv(void)
{
	extern char	**environ;
	char		**e;

	for (e = environ; e != NULL && *e != NULL; e++)
		if (strncmp(*e, "HWLOC_", 6) == 0)
			return 1;
	return 0;
}

int
gp_tcache_open(struct gp_tcache *c, int pci)
{
	const char	*v = getenv("GPUPOOL_TOPOLOGY_CACHE");
	char		 host[256];
	size_t		 i;

	memset(c, 0, sizeof(*c));
	c->dfd = -1;
#ifndef __linux__
	(void)pci;
	return -ENOSYS;
#else
	if ((v != NULL && strcmp(v, "none") == 0) || hwlocenv())
		return -ENOENT;
	if (gethostname(host, sizeof(host)) == -1)
		return -errno;
	host[sizeof(host) - 1] = '\0';
	for (i = 0; host[i] != '\0'; i++)
		if (!(host[i] >= 'a' && host[i] <= 'z') &&
		    !(host[i] >= 'A' && host[i] <= 'Z') &&
		    !(host[i] >= '0' && host[i] <= '9') &&
		    host[i] != '.' && host[i] != '-')
			host[i] = '_';
	snprintf(c->name, sizeof(c->name), "topology-%s%s.xml", host,
	    pci ? "-pci" : "");
	if ((c->key = makekey(pci)) == NULL)
		return -ENOMEM;
	if ((c->dfd = opendirfd()) == -1) {
		gp_tcache_close(c);
		return -EPERM;
	}
	return 0;
#endif
}

void
gp_tcache_close(struct gp_tcache *c)
{
	if (c->dfd >= 0)
		(void)close(c->dfd);
	c->dfd = -1;
	free(c->key);
	c->key = NULL;
}

/* The whole regular file fd, NUL-terminated, or NULL. */
static char *
slurp(int fd, size_t *len)
{
	struct stat	 st;
	char		*buf;
	size_t		 got = 0;
	ssize_t		 n;

	if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode) || !ours(&st) ||
	    st.st_size <= 0 || st.st_size > GP_TCACHE_MAX ||
	    (buf = malloc((size_t)st.st_size + 1)) == NULL)
		return NULL;
	while (got < (size_t)st.st_size) {
		n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			free(buf);
			return NULL;
		}
		got += (size_t)n;
	}
	buf[got] = '\0';
	*len = got;
	return buf;
}

char *
gp_tcache_read(struct gp_tcache *c, int *len)
{
	size_t	 n, klen = strlen(c->key);
	char	*buf;
	int	 fd;

	/* Non-blocking: a FIFO planted there must not hang the open. */
	if (c->dfd < 0 || (fd = openat(c->dfd, c->name, O_RDONLY |
	    O_CLOEXEC | O_NOCTTY | O_NONBLOCK)) == -1)
		return NULL;
	buf = slurp(fd, &n);
	(void)close(fd);
	if (buf == NULL)
		return NULL;
	if (n <= klen + 1 || n - klen - 1 >= INT_MAX ||
	    memcmp(buf, c->key, klen) != 0 || buf[klen] != '\n') {
		free(buf);
		return NULL;
	}
	/* The XML after the key line, with its NUL (as hwloc exports). */
	memmove(buf, buf + klen + 1, n - klen);
	*len = (int)(n - klen);
	return buf;
}

static int
writeall(int fd, const char *s, size_t n)
{
	ssize_t	 w;

	while (n > 0) {
		if ((w = write(fd, s, n)) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		s += w;
		n -= (size_t)w;
	}
	return 0;
}

void
gp_tcache_write(struct gp_tcache *c, const char *xml, int len)
{
	struct timespec	 ts;
	char		 tmp[sizeof(c->name) + 48];
	int		 fd, bad;

	if (c->dfd < 0 || xml == NULL || len <= 1)
		return;
	/* hwloc's length counts the NUL: the file holds the text. */
	if (xml[len - 1] == '\0')
		len--;
	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	snprintf(tmp, sizeof(tmp), ".%s.%ld.%ld", c->name, (long)getpid(),
	    (long)ts.tv_nsec);
	if ((fd = openat(c->dfd, tmp, O_WRONLY | O_CREAT | O_EXCL |
	    O_CLOEXEC | O_NOFOLLOW, 0600)) == -1)
		return;
	bad = writeall(fd, c->key, strlen(c->key)) == -1 ||
	    writeall(fd, "\n", 1) == -1 ||
	    writeall(fd, xml, (size_t)len) == -1;
	bad |= close(fd) == -1;
	/* The rename replaces whatever entry was there (never its
	 * target): readers see the old file or the new one, whole. */
	if (bad || renameat(c->dfd, tmp, c->dfd, c->name) == -1)
		(void)unlinkat(c->dfd, tmp, 0);
}
