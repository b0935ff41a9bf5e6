/*
 * claimtab.c: the claims table and this process's side of it (claimtab.h;
 * claim.c decides who gets what). The file made, opened, locked, read and
 * written; each slot's owner alive or not, and whose it is to us; the
 * process's token, command, ancestors and job; the holders described for
 * people, and gp_claims_list(), which reads the table without claiming.
 */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "claimtab.h"
#include "internal.h"

struct gp_ct	 gp_ct = { .fd = -1 };

int
gp_ct_lock(off_t at, short type, int wait)
{
	struct flock	 l = { .l_type = type, .l_whence = SEEK_SET,
			    .l_start = at, .l_len = 1 };

	while (fcntl(gp_ct.fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &l) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

/* Whether slot i's owner lives (a lock on its byte by another OFD). */
static int
alive_on(int fd, int i)
{
	struct flock	 l = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
			    .l_start = CL_LOCKS + 1 + i, .l_len = 1 };

	if (fcntl(fd, F_OFD_GETLK, &l) < 0)
		return 1;
	return l.l_type != F_UNLCK;
}

static int
alive(int i)
{
	return alive_on(gp_ct.fd, i);
}

static int64_t
wall_ms(void)
{
	struct timespec	 ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The default directory: a sticky, world-writable place every local user
 * has and that no session's logout empties. */
static const char *
default_dir(void)
{
	struct stat	 st;

	if (stat("/run/lock", &st) == 0 && S_ISDIR(st.st_mode))
		return "/run/lock/gpupool";
	return "/dev/shm/gpupool";
}

void
gp_ct_bad(const char *fmt, const char *what)
{
	/* The fd stays: it holds this process's claims, which a table
	 * someone damaged must not drop while its pools use the GPUs. */
	snprintf(gp_ct.bad, sizeof(gp_ct.bad), fmt, gp_ct.path, what);
}

/* Make the table: a private file with its header, opened to all, then
 * linked into place, so that nobody sees it half made or with the wrong
 * mode. Someone else's may win the race: then theirs is the table. */
static int
make_table(const char *dir)
{
	struct cl_hdr	 h;
	char		 tmp[4200];
	uint64_t	 r = 0;
	int		 fd, rc = 0;

	(void)getrandom(&r, sizeof(r), 0);
	snprintf(tmp, sizeof(tmp), "%s/.claims.%d.%llx", dir, (int)getpid(),
	    (unsigned long long)r);
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
	    0600);
	if (fd < 0)
		return -errno;
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, CL_MAGIC, sizeof(CL_MAGIC));
	h.ticket = 1;
	if (fchmod(fd, 0666) < 0 || pwrite(fd, &h, sizeof(h), 0) !=
	    (ssize_t)sizeof(h) || (link(tmp, gp_ct.path) < 0 &&
	    errno != EEXIST))
		rc = errno ? -errno : -EIO;
	close(fd);
	unlink(tmp);
	return rc;
}

/* Open the table of dir (made if missing) for this process; a table that
 * cannot be used leaves gp_ct.fd -1 and gp_ct.bad saying why. */
static void
open_table(const char *dir)
{
	struct stat	 st;
	int		 fd, tries;

	snprintf(gp_ct.path, sizeof(gp_ct.path), "%s/%s", dir, CL_FILE);
	gp_ct.bad[0] = '\0';
	gp_ct.ng = 0;
	if (mkdir(dir, 01777) == 0)
		(void)chmod(dir, 01777);	/* past the umask */
	for (tries = 0; tries < 3; tries++) {
		fd = open(gp_ct.path, O_RDWR | O_CLOEXEC | O_NOFOLLOW |
		    O_NONBLOCK | O_NOCTTY);
		if (fd >= 0 || errno != ENOENT)
			break;
		if ((fd = make_table(dir)) < 0) {
			errno = -fd;
			fd = -1;
			break;
		}
	}
	gp_ct.fd = fd;
	if (fd < 0) {
		gp_ct_bad(errno == ELOOP ? "%s is a symbolic link (%s): not "
		    "followed" : errno == EACCES ? "%s cannot be read and "
		    "written by this user (%s)" : "%s: %s", strerror(errno));
		return;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		gp_ct_bad("%s is not a regular file (%s)", "a directory, a "
		    "device or a pipe");
		close(fd);
		gp_ct.fd = -1;
	}
	else if ((st.st_mode & 0666) != 0666)
		/* Writable to us, but not to every user: the others would
		 * find it held for ever. Ours to mend if we own it. */
		(void)fchmod(fd, 0666);
}

void
gp_ct_forked(void)
{
	/* A fork's copy of the fd keeps its parent's claims while it
	 * lives: the child closes it and claims on its own (gp_ct.t, the
	 * parent's buffer, is reused). */
	if (gp_ct.pid != 0 && gp_ct.pid != getpid()) {
		if (gp_ct.fd >= 0)
			close(gp_ct.fd);
		gp_ct.fd = -1;
		gp_ct.pid = 0;
		gp_ct.users = 0;
	}
}

/* Lock the guard and read the table (the header, the slots in use, any
 * key not seen yet). 0, or -1 with gp_ct.bad set (the guard left unlocked). */
int
gp_ct_load(void)
{
	ssize_t		 n;
	size_t		 want, got, guess;
	uint32_t	 i;

	if (gp_ct.fd < 0) {
		char dir[4096];

		snprintf(dir, sizeof(dir), "%s", gp_ct.path);
		*strrchr(dir, '/') = '\0';
		open_table(dir);
		if (gp_ct.fd < 0)
			return -1;
	}
	if (gp_ct_lock(CL_LOCKS, F_WRLCK, 1) < 0) {
		gp_ct_bad("%s: cannot lock (%s)", strerror(errno));
		return -1;
	}
	/* The header and as many slots as were in use last time, and a
	 * few more, in one read: most loads need no second. */
	guess = gp_ct.t->h.hi + 8 < CL_MAXS ? gp_ct.t->h.hi + 8 : CL_MAXS;
	n = pread(gp_ct.fd, gp_ct.t, sizeof(gp_ct.t->h) + guess *
	    sizeof(struct cl_slot), 0);
	if (n == 0) {		/* made empty by someone: start it again */
		memset(&gp_ct.t->h, 0, sizeof(gp_ct.t->h));
		memcpy(gp_ct.t->h.magic, CL_MAGIC, sizeof(CL_MAGIC));
		gp_ct.t->h.ticket = 1;
		if (pwrite(gp_ct.fd, &gp_ct.t->h, sizeof(gp_ct.t->h), 0) !=
		    (ssize_t)sizeof(gp_ct.t->h))
			goto io;
		n = sizeof(gp_ct.t->h);
	}
	if (n < (ssize_t)sizeof(gp_ct.t->h) || memcmp(gp_ct.t->h.magic,
	    CL_MAGIC, sizeof(CL_MAGIC)) != 0 || gp_ct.t->h.hi > CL_MAXS ||
	    gp_ct.t->h.ngpus > GP_CLAIM_MAXG) {
		(void)gp_ct_lock(CL_LOCKS, F_UNLCK, 0);
		gp_ct_bad("%s is not a gpupool claims table (%s)", n < 0 ?
		    strerror(errno) : "its header is wrong");
		return -1;
	}
	got = (size_t)(n - (ssize_t)sizeof(gp_ct.t->h)) /
	    sizeof(struct cl_slot);
	if (gp_ct.t->h.hi > guess) {
		want = (gp_ct.t->h.hi - guess) * sizeof(struct cl_slot);
		if ((n = pread(gp_ct.fd, &gp_ct.t->s[guess], want,
		    sizeof(gp_ct.t->h) + guess * sizeof(struct cl_slot))) < 0)
			goto io;
		got = got < guess ? got : guess + (size_t)n /
		    sizeof(struct cl_slot);
	}
	/* A file shorter than its slots in use (cut by someone): the
	 * rest are free. */
	if (got < gp_ct.t->h.hi)
		memset(&gp_ct.t->s[got], 0, (gp_ct.t->h.hi - got) *
		    sizeof(struct cl_slot));
	if (gp_ct.ng > (int)gp_ct.t->h.ngpus)
		gp_ct.ng = 0;	/* a table started again */
	if ((int)gp_ct.t->h.ngpus > gp_ct.ng) {
		want = (gp_ct.t->h.ngpus - (uint32_t)gp_ct.ng) *
		    sizeof(struct cl_gpu);
		if (pread(gp_ct.fd, &gp_ct.g[gp_ct.ng], want, CL_GOFF +
		    (off_t)gp_ct.ng * (off_t)sizeof(struct cl_gpu)) !=
		    (ssize_t)want)
			goto io;
		gp_ct.ng = (int)gp_ct.t->h.ngpus;
		for (i = 0; i < gp_ct.t->h.ngpus; i++)
			gp_ct.g[i].key[sizeof(gp_ct.g[i].key) - 1] = '\0';
	}
	return 0;
io:
	(void)gp_ct_lock(CL_LOCKS, F_UNLCK, 0);
	gp_ct_bad("%s: %s", strerror(errno ? errno : EIO));
	return -1;
}

void
gp_ct_unload(void)
{
	(void)gp_ct_lock(CL_LOCKS, F_UNLCK, 0);
}

int
gp_ct_put_slot(int i)
{
	if (pwrite(gp_ct.fd, &gp_ct.t->s[i], sizeof(gp_ct.t->s[i]),
	    sizeof(gp_ct.t->h) + (off_t)i * (off_t)sizeof(struct cl_slot)) !=
	    (ssize_t)sizeof(gp_ct.t->s[i]))
		return -(errno ? errno : EIO);
	return 0;
}

int
gp_ct_put_hdr(void)
{
	if (pwrite(gp_ct.fd, &gp_ct.t->h, sizeof(gp_ct.t->h), 0) !=
	    (ssize_t)sizeof(gp_ct.t->h))
		return -(errno ? errno : EIO);
	return 0;
}

/* The processes this one descends from (its ancestors' claims count as
 * its own: a nested pool, or a task of gpupool-run that claims, runs on
 * what its ancestor holds for it). Read once per process, the first time
 * a live claim of another token is judged (kin()): a run alone on its
 * GPUs never reads /proc for it. */
static void
read_kin(void)
{
	char	 path[64], buf[512], *p;
	pid_t	 pid = getppid();
	ssize_t	 n;
	int	 fd;

	gp_ct.nkin = 0;
	while (pid > 1 && gp_ct.nkin <
	    (int)(sizeof(gp_ct.kin) / sizeof(gp_ct.kin[0]))) {
		gp_ct.kin[gp_ct.nkin++] = pid;
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			return;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		/* "pid (comm) state ppid": comm may hold anything but the
		 * last ')'. */
		if (n <= 0 || (buf[n] = '\0', p = strrchr(buf, ')')) == NULL ||
		    sscanf(p + 1, " %*c %d", &pid) != 1)
			return;
	}
}

static int
kin(int32_t pid)
{
	int	 i;

	if (gp_ct.nkin < 0)
		read_kin();
	for (i = 0; i < gp_ct.nkin; i++)
		if (gp_ct.kin[i] == pid)
			return 1;
	return 0;
}

/* The job this process is a rank of, as gpupool's ranks name it in
 * $GPUPOOL_CLAIM_GROUP: its ranks on one host are one claimant, as the
 * pools of one process are (FNV-1a of the text; 0: none). */
static uint64_t
group(void)
{
	const char	*g = getenv("GPUPOOL_CLAIM_GROUP");
	uint64_t	 h = 14695981039346656037ull;

	if (g == NULL || *g == '\0')
		return 0;
	for (; *g != '\0'; g++)
		h = (h ^ (unsigned char)*g) * 1099511628211ull;
	return h ? h : 1;
}

void
gp_ct_classify(void)
{
	struct cl_slot	*s;
	uint32_t	 i;

	for (i = 0; i < gp_ct.t->h.hi; i++) {
		s = &gp_ct.t->s[i];
		gp_ct.cls[i] = S_NONE;
		if (s->token == 0)
			continue;
		if (s->token == gp_ct.token) {
			gp_ct.cls[i] = S_OURS;
			continue;
		}
		if (alive((int)i)) {
			if ((s->kind == CL_HOLD && s->gpu < gp_ct.t->h.ngpus) ||
			    (s->kind == CL_WAIT && s->n >= 1))
				gp_ct.cls[i] = kin(s->pid) ||
				    (gp_ct.group != 0 &&
				    s->group == gp_ct.group) ? S_OURS : S_OTHER;
			continue;
		}
		memset(s, 0, sizeof(*s));
		(void)gp_ct_put_slot((int)i);
	}
}

/* A free slot, its byte locked by us: >= 0 or -ENOSPC. */
int
gp_ct_new_slot(void)
{
	uint32_t	 i;

	for (i = 0; i < CL_MAXS; i++) {
		if (i < gp_ct.t->h.hi && gp_ct.t->s[i].token != 0)
			continue;
		if (gp_ct_lock(CL_LOCKS + 1 + i, F_WRLCK, 0) < 0)
			continue;	/* being let go by a live owner */
		if (i >= gp_ct.t->h.hi) {
			gp_ct.t->h.hi = i + 1;
			if (gp_ct_put_hdr() < 0) {
				(void)gp_ct_lock(CL_LOCKS + 1 + i, F_UNLCK, 0);
				return -(errno ? errno : EIO);
			}
		}
		memset(&gp_ct.t->s[i], 0, sizeof(gp_ct.t->s[i]));
		return (int)i;
	}
	return -EUSERS;
}

void
gp_ct_free_slot(int i)
{
	memset(&gp_ct.t->s[i], 0, sizeof(gp_ct.t->s[i]));
	(void)gp_ct_put_slot(i);
	(void)gp_ct_lock(CL_LOCKS + 1 + i, F_UNLCK, 0);
}

/* At most n bytes of s for people, each control character a blank: a
 * table's command lines are anyone's to write. */
static void
printable(char *out, size_t len, const char *s, size_t n)
{
	size_t	 i;

	for (i = 0; i < n && i + 1 < len && s[i] != '\0'; i++)
		out[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? ' ' : s[i];
	out[i] = '\0';
}

/* This process's command line for people: the program's base name,
 * then its words, cut. */
static void
read_cmd(char *cmd, size_t len)
{
	char	 all[512], *b;
	ssize_t	 n, k;
	int	 fd;

	memset(cmd, 0, len);
	if ((fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC)) < 0)
		return;
	n = read(fd, all, sizeof(all) - 1);
	close(fd);
	if (n <= 0)
		return;
	all[n] = '\0';
	b = strrchr(all, '/') ? strrchr(all, '/') + 1 : all;
	for (k = 0; k < n - 1; k++)
		if (all[k] == '\0')
			all[k] = ' ';
	printable(cmd, len, b, len);
}

void
gp_ct_fill_slot(struct cl_slot *s, int kind, uint64_t mem)
{
	s->token = gp_ct.token;
	s->kind = (uint32_t)kind;
	s->uid = (uint32_t)getuid();
	s->pid = (int32_t)getpid();
	s->mem = mem;
	s->since_ms = wall_ms();
	s->group = gp_ct.group;
	memcpy(s->cmd, gp_ct.cmd, sizeof(s->cmd));
}

int
gp_ct_join(const char *dir, char *err, size_t errlen)
{
	size_t	 n = strlen(dir);

	if (gp_ct.pid == 0) {
		/* Zeroed: a load reads as many slots as the last one found
		 * in use, none the first time. */
		if (gp_ct.t == NULL &&
		    (gp_ct.t = calloc(1, sizeof(*gp_ct.t))) == NULL)
			return -ENOMEM;
		while (getrandom(&gp_ct.token, sizeof(gp_ct.token), 0) < 0 ||
		    gp_ct.token == 0)
			gp_ct.token = (uint64_t)wall_ms() ^
			    ((uint64_t)getpid() << 40) ^ 1;
		open_table(dir);
		read_cmd(gp_ct.cmd, sizeof(gp_ct.cmd));
		gp_ct.nkin = -1;	/* read_kin() when first needed */
		gp_ct.group = group();
		gp_ct.pid = getpid();
	} else if (strncmp(gp_ct.path, dir, n) != 0 || strcmp(gp_ct.path + n,
	    "/" CL_FILE) != 0)
		return gp_errf(err, errlen, -EINVAL, "claims directory '%s': "
		    "this process claims in '%s' already", dir, gp_ct.path);
	gp_ct.users++;
	return 0;
}

void
gp_ct_leave(void)
{
	if (--gp_ct.users == 0) {
		/* Nothing claimed: the fd goes, and the next
		 * claimer opens the table again. */
		if (gp_ct.fd >= 0)
			close(gp_ct.fd);
		gp_ct.fd = -1;
		gp_ct.pid = 0;
	}
}

/* uid's name, or its number. */
static void
user_name(uid_t uid, char *buf, size_t len)
{
	struct passwd	 pw, *res = NULL;
	char		 tmp[1024];

	if (getpwuid_r(uid, &pw, tmp, sizeof(tmp), &res) == 0 && res != NULL)
		snprintf(buf, len, "%s", pw.pw_name);
	else
		snprintf(buf, len, "uid %u", (unsigned)uid);
}

/* "alice, pid 4242, python train.py, since 10:02[, 20.0 GiB]" */
void
gp_ct_describe(const struct cl_slot *h, char *buf, size_t len)
{
	char		 who[64], when[16] = "?", mem[32] = "";
	char		 cmd[sizeof(h->cmd) + 1];
	struct tm	 tm;
	time_t		 t = (time_t)(h->since_ms / 1000);

	printable(cmd, sizeof(cmd), h->cmd, sizeof(h->cmd));
	user_name((uid_t)h->uid, who, sizeof(who));
	if (localtime_r(&t, &tm) != NULL)
		strftime(when, sizeof(when), "%H:%M", &tm);
	if (h->mem > 0)
		snprintf(mem, sizeof(mem), ", %.1f GiB",
		    (double)h->mem / (double)(1ull << 30));
	snprintf(buf, len, "%s, pid %d, %s, since %s%s", who, (int)h->pid,
	    cmd, when, mem);
}

/* The directory in effect: dir, else $GPUPOOL_CLAIMS, else the default;
 * NULL for none. *dirp set, or -EINVAL with err. */
int
gp_ct_dir(const char **dirp, char *err, size_t errlen)
{
	const char	*dir = *dirp;

	if (dir == NULL || dir[0] == '\0')
		dir = getenv("GPUPOOL_CLAIMS");
	if (dir == NULL || dir[0] == '\0')
		dir = default_dir();
	*dirp = strcmp(dir, "none") == 0 ? NULL : dir;
	if (*dirp != NULL && (dir[0] != '/' || strlen(dir) > 4000))
		return gp_errf(err, errlen, -EINVAL, "claims directory '%s': "
		    "give an absolute path, or none", dir);
	return 0;
}

/* One entry of gp_claims_list(). */
static void
info(struct gp_claim_info *o, const struct cl_slot *s, const struct cl_gpu *g,
    int queue)
{
	memset(o, 0, sizeof(*o));
	snprintf(o->gpu, sizeof(o->gpu), "%s", g->key);
	o->queue = queue;
	o->pid = s->pid;
	o->uid = s->uid;
	user_name((uid_t)s->uid, o->user, sizeof(o->user));
	printable(o->cmd, sizeof(o->cmd), s->cmd, sizeof(s->cmd));
	o->since_ms = s->since_ms;
	o->mem = s->mem;
	o->total = g->total;
}

int
gp_claims_list(const char *dir, struct gp_claim_info *out, int max,
    char *err, size_t errlen)
{
	struct cl_hdr	 h;
	struct cl_slot	*s = NULL;
	struct cl_gpu	*g = NULL;
	struct flock	 l = { .l_type = F_RDLCK, .l_whence = SEEK_SET,
			    .l_start = CL_LOCKS, .l_len = 1 };
	struct stat	 st;
	char		 path[4200];
	uint64_t	 last = 0, best;
	uint32_t	 i, k;
	int		 fd, n = 0, at, pos, rc = 0;

	if ((rc = gp_ct_dir(&dir, err, errlen)) < 0 || dir == NULL)
		return rc;
	snprintf(path, sizeof(path), "%s/%s", dir, CL_FILE);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK |
	    O_NOCTTY)) < 0)
		return errno == ENOENT ? 0 : gp_errf(err, errlen, -errno,
		    "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return gp_errf(err, errlen, -EINVAL, "%s is not a regular "
		    "file", path);
	}
	while (fcntl(fd, F_OFD_SETLKW, &l) < 0 && errno == EINTR)
		;
	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    memcmp(h.magic, CL_MAGIC, sizeof(CL_MAGIC)) != 0 ||
	    h.hi > CL_MAXS || h.ngpus > GP_CLAIM_MAXG)
		rc = gp_errf(err, errlen, -EINVAL, "%s is not a gpupool "
		    "claims table", path);
	else if ((s = calloc(h.hi + 1, sizeof(*s))) == NULL ||
	    (g = calloc(h.ngpus + 1, sizeof(*g))) == NULL)
		rc = -ENOMEM;
	else if (pread(fd, s, h.hi * sizeof(*s), sizeof(h)) < 0 ||
	    pread(fd, g, h.ngpus * sizeof(*g), CL_GOFF) < 0)
		rc = gp_errf(err, errlen, -errno, "%s: %s", path,
		    strerror(errno));
	for (k = 0; rc == 0 && k < h.ngpus; k++)
		g[k].key[sizeof(g[k].key) - 1] = '\0';
	for (i = 0; rc == 0 && i < h.hi; i++) {
		if (s[i].token == 0 || !alive_on(fd, (int)i) ||
		    (s[i].kind == CL_HOLD && s[i].gpu >= h.ngpus) ||
		    (s[i].kind != CL_HOLD && s[i].kind != CL_WAIT))
			s[i].token = 0;	/* dead, or not a slot */
		else if (s[i].kind == CL_HOLD && n++ < max)
			info(&out[n - 1], &s[i], &g[s[i].gpu], 0);
	}
	for (k = 0; rc == 0 && k < h.ngpus; k++) {
		for (last = 0, pos = 0;; last = best) {
			at = -1;
			best = UINT64_MAX;
			for (i = 0; i < h.hi; i++)
				if (s[i].token != 0 && s[i].kind == CL_WAIT &&
				    gp_ct_in_set(&s[i], (int)k) &&
				    s[i].ticket > last && s[i].ticket < best) {
					best = s[i].ticket;
					at = (int)i;
				}
			if (at < 0)
				break;
			if (n++ < max)
				info(&out[n - 1], &s[at], &g[k], ++pos);
		}
	}
	l.l_type = F_UNLCK;
	(void)fcntl(fd, F_OFD_SETLK, &l);
	close(fd);
	free(s);
	free(g);
	return rc < 0 ? rc : n;
}
