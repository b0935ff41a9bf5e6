/*
 * claim.c: host-wide GPU claims, daemonless (claim.h; design.md, "Claims").
 *
 * One table file, DIR/claims.v1, mode 0666, never unlinked or renamed:
 * a header, then slots (a GPU held, or a waiter with its ticket), then the
 * GPU keys (append-only). Every change is made under the guard, an OFD
 * lock on one byte far past the data; each slot is alive while its
 * owner's OFD holds the lock on the slot's own byte, so the kernel frees
 * a dead process's slots with its last fd, and whoever meets a dead slot
 * clears it. The table is read with pread(), never mapped: a table cut
 * short by someone cannot raise SIGBUS here. Waiters sleep on inotify
 * (any write, and any close of a copy opened for writing, which is how a
 * death shows) and are served in ticket order: each decision replays the
 * queue ahead of the asker, every live waiter taking (or, all-or-nothing,
 * keeping back) what it would take, before the asker gets what is left.
 *
 * The claims are a process's: one fd and one token per process, shared by
 * its claimers (pools), which never count against each other.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "claim.h"
#include "internal.h"

#define CL_MAGIC	"gpupool-claims1"
#define CL_FILE		"claims.v1"
#define CL_MAXS		4096
#define CL_GOFF		(64 + (off_t)CL_MAXS * 128)
#define CL_LOCKS	((off_t)1 << 40)	/* the guard; slot i: + 1 + i */

enum { CL_FREE, CL_HOLD, CL_WAIT };

struct cl_hdr {
	char		 magic[16];
	uint32_t	 hi;		/* slots in use are below this */
	uint32_t	 ngpus;
	uint64_t	 ticket;	/* the next waiter's */
	char		 pad[32];
};

struct cl_slot {
	uint64_t	 token;		/* its process's; 0: free */
	uint64_t	 ticket;	/* WAIT: its place */
	uint32_t	 kind;
	uint32_t	 uid;
	int32_t		 pid;
	uint32_t	 n;		/* WAIT: GPUs wanted */
	uint64_t	 mem;		/* bytes per GPU; 0: whole */
	int64_t		 since_ms;	/* CLOCK_REALTIME */
	uint32_t	 partial;	/* WAIT: takes fewer than n */
	uint32_t	 gpu;		/* HOLD: its GPU */
	uint8_t		 set[GP_CLAIM_MAXG / 8];	/* WAIT: GPUs it takes */
	uint64_t	 group;		/* its job's ($GPUPOOL_CLAIM_GROUP) */
	char		 cmd[32];
};

struct cl_gpu {
	char		 key[56];
	uint64_t	 total;		/* bytes; 0: unknown */
};

_Static_assert(sizeof(struct cl_hdr) == 64, "cl_hdr");
_Static_assert(sizeof(struct cl_slot) == 128, "cl_slot");
_Static_assert(sizeof(struct cl_gpu) == 64, "cl_gpu");

struct gp_claimer {
	pid_t		 pid;		/* the process that opened it */
	int		 ng;
	struct {
		char	 key[56];	/* UUID, bus id or "fakeK" */
		uint64_t total;		/* bytes; 0: unknown */
		int	 tix;		/* its index in the table, -1: not
					   looked up yet */
		int	 hold;		/* its HOLD slot, or -1 */
		int	 n;		/* claims on it (items, or 1) */
		int	 whole;		/* of them, with no memory declared */
		uint64_t mem;		/* the declared ones' sum */
	}		 gpu[GP_CLAIM_MAXG];
	int		 wait;		/* its WAIT slot, or -1 */
	int		 ino;		/* inotify, -1: none (yet) */
};

/* The process's side: its table fd, token and last read of the table. */
static pthread_mutex_t	 cl_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	pid_t		 pid;		/* 0: nothing open in this process */
	int		 fd;		/* -1: the table cannot be used */
	char		 path[4096];
	char		 bad[300];	/* fd -1: why */
	uint64_t	 token;
	char		 cmd[32];	/* its command line, for people */
	uint64_t	 group;		/* its job's, or 0 */
	pid_t		 kin[32];	/* its ancestors */
	int		 nkin;
	uint8_t		 cls[CL_MAXS];	/* each slot's S_*, after a load */
	int		 users;
	int		 ng;		/* keys read so far */
	struct cl_gpu	 g[GP_CLAIM_MAXG];
	struct {
		struct cl_hdr	 h;
		struct cl_slot	 s[CL_MAXS];
	}		*t;
} P = { .fd = -1 };

static int
lockb(off_t at, short type, int wait)
{
	struct flock	 l = { .l_type = type, .l_whence = SEEK_SET,
			    .l_start = at, .l_len = 1 };

	while (fcntl(P.fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &l) < 0)
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
	return alive_on(P.fd, i);
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

static void
mark_bad(const char *fmt, const char *what)
{
	snprintf(P.bad, sizeof(P.bad), fmt, P.path, what);
	if (P.fd >= 0)
		close(P.fd);
	P.fd = -1;
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
	    (ssize_t)sizeof(h) || (link(tmp, P.path) < 0 && errno != EEXIST))
		rc = errno ? -errno : -EIO;
	close(fd);
	unlink(tmp);
	return rc;
}

/* Open the table of dir (made if missing) for this process; a table that
 * cannot be used leaves P.fd -1 and P.bad saying why. */
static void
open_table(const char *dir)
{
	struct stat	 st;
	int		 fd, tries;

	snprintf(P.path, sizeof(P.path), "%s/%s", dir, CL_FILE);
	P.bad[0] = '\0';
	P.ng = 0;
	if (mkdir(dir, 01777) == 0)
		(void)chmod(dir, 01777);	/* past the umask */
	for (tries = 0; tries < 3; tries++) {
		fd = open(P.path, O_RDWR | O_CLOEXEC | O_NOFOLLOW |
		    O_NONBLOCK | O_NOCTTY);
		if (fd >= 0 || errno != ENOENT)
			break;
		if ((fd = make_table(dir)) < 0) {
			errno = -fd;
			fd = -1;
			break;
		}
	}
	P.fd = fd;
	if (fd < 0) {
		mark_bad(errno == ELOOP ? "%s is a symbolic link (%s): not "
		    "followed" : errno == EACCES ? "%s cannot be read and "
		    "written by this user (%s)" : "%s: %s", strerror(errno));
		return;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		mark_bad("%s is not a regular file (%s)", "a directory, a "
		    "device or a pipe");
	else if ((st.st_mode & 0666) != 0666)
		/* Writable to us, but not to every user: the others would
		 * find it held for ever. Ours to mend if we own it. */
		(void)fchmod(fd, 0666);
}

static void
forked(void)
{
	/* A fork's copy of the fd keeps its parent's claims while it
	 * lives: the child closes it and claims on its own (P.t, the
	 * parent's buffer, is reused). */
	if (P.pid != 0 && P.pid != getpid()) {
		if (P.fd >= 0)
			close(P.fd);
		P.fd = -1;
		P.pid = 0;
		P.users = 0;
	}
}

void
gp_claim_forget(struct gp_claimer *c)
{
	if (c != NULL && c->ino >= 0)
		close(c->ino);
	if (c != NULL)
		c->ino = -1;
	forked();
}

/* Lock the guard and read the table (the header, the slots in use, any
 * key not seen yet). 0, or -1 with P.bad set (the guard left unlocked). */
static int
load(void)
{
	ssize_t		 n;
	size_t		 want;
	uint32_t	 i;

	if (P.fd < 0) {
		char dir[4096];

		snprintf(dir, sizeof(dir), "%s", P.path);
		*strrchr(dir, '/') = '\0';
		open_table(dir);
		if (P.fd < 0)
			return -1;
	}
	if (lockb(CL_LOCKS, F_WRLCK, 1) < 0) {
		mark_bad("%s: cannot lock (%s)", strerror(errno));
		return -1;
	}
	n = pread(P.fd, &P.t->h, sizeof(P.t->h), 0);
	if (n == 0) {		/* made empty by someone: start it again */
		memset(&P.t->h, 0, sizeof(P.t->h));
		memcpy(P.t->h.magic, CL_MAGIC, sizeof(CL_MAGIC));
		P.t->h.ticket = 1;
		if (pwrite(P.fd, &P.t->h, sizeof(P.t->h), 0) !=
		    (ssize_t)sizeof(P.t->h))
			goto io;
		n = sizeof(P.t->h);
	}
	if (n != (ssize_t)sizeof(P.t->h) || memcmp(P.t->h.magic, CL_MAGIC,
	    sizeof(CL_MAGIC)) != 0 || P.t->h.hi > CL_MAXS ||
	    P.t->h.ngpus > GP_CLAIM_MAXG) {
		(void)lockb(CL_LOCKS, F_UNLCK, 0);
		mark_bad("%s is not a gpupool claims table (%s)", n < 0 ?
		    strerror(errno) : "its header is wrong");
		return -1;
	}
	want = (size_t)P.t->h.hi * sizeof(struct cl_slot);
	memset(P.t->s, 0, want);
	if (want > 0 && pread(P.fd, P.t->s, want, sizeof(P.t->h)) < 0)
		goto io;
	if (P.ng > (int)P.t->h.ngpus)
		P.ng = 0;	/* a table started again */
	if ((int)P.t->h.ngpus > P.ng) {
		want = (P.t->h.ngpus - (uint32_t)P.ng) * sizeof(struct cl_gpu);
		if (pread(P.fd, &P.g[P.ng], want, CL_GOFF + (off_t)P.ng *
		    (off_t)sizeof(struct cl_gpu)) != (ssize_t)want)
			goto io;
		P.ng = (int)P.t->h.ngpus;
		for (i = 0; i < P.t->h.ngpus; i++)
			P.g[i].key[sizeof(P.g[i].key) - 1] = '\0';
	}
	return 0;
io:
	(void)lockb(CL_LOCKS, F_UNLCK, 0);
	mark_bad("%s: %s", strerror(errno ? errno : EIO));
	return -1;
}

static void
unload(void)
{
	(void)lockb(CL_LOCKS, F_UNLCK, 0);
}

static int
put_slot(int i)
{
	if (pwrite(P.fd, &P.t->s[i], sizeof(P.t->s[i]), sizeof(P.t->h) +
	    (off_t)i * (off_t)sizeof(struct cl_slot)) !=
	    (ssize_t)sizeof(P.t->s[i]))
		return -(errno ? errno : EIO);
	return 0;
}

static int
put_hdr(void)
{
	if (pwrite(P.fd, &P.t->h, sizeof(P.t->h), 0) !=
	    (ssize_t)sizeof(P.t->h))
		return -(errno ? errno : EIO);
	return 0;
}

/* The processes this one descends from (its ancestors' claims count as
 * its own: a nested pool, or a task of gpupool-run that claims, runs on
 * what its ancestor holds for it). Read once per process. */
static void
read_kin(void)
{
	char	 path[64], buf[512], *p;
	pid_t	 pid = getppid();
	ssize_t	 n;
	int	 fd;

	P.nkin = 0;
	while (pid > 1 && P.nkin < (int)(sizeof(P.kin) / sizeof(P.kin[0]))) {
		P.kin[P.nkin++] = pid;
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

	for (i = 0; i < P.nkin; i++)
		if (P.kin[i] == pid)
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

/* What each slot is to this process, dead ones cleared on the way: none
 * (free, dead, or someone's garbage, skipped), ours (this process's, or
 * an ancestor's), or another's. */
enum { S_NONE, S_OURS, S_OTHER };

static void
classify(void)
{
	struct cl_slot	*s;
	uint32_t	 i;

	for (i = 0; i < P.t->h.hi; i++) {
		s = &P.t->s[i];
		P.cls[i] = S_NONE;
		if (s->token == 0)
			continue;
		if (s->token == P.token) {
			P.cls[i] = S_OURS;
			continue;
		}
		if (alive((int)i)) {
			if ((s->kind == CL_HOLD && s->gpu < P.t->h.ngpus) ||
			    (s->kind == CL_WAIT && s->n >= 1))
				P.cls[i] = kin(s->pid) || (P.group != 0 &&
				    s->group == P.group) ? S_OURS : S_OTHER;
			continue;
		}
		memset(s, 0, sizeof(*s));
		(void)put_slot((int)i);
	}
}

/* A free slot, its byte locked by us: >= 0 or -ENOSPC. */
static int
new_slot(void)
{
	uint32_t	 i;

	for (i = 0; i < CL_MAXS; i++) {
		if (i < P.t->h.hi && P.t->s[i].token != 0)
			continue;
		if (lockb(CL_LOCKS + 1 + i, F_WRLCK, 0) < 0)
			continue;	/* being let go by a live owner */
		if (i >= P.t->h.hi) {
			P.t->h.hi = i + 1;
			if (put_hdr() < 0) {
				(void)lockb(CL_LOCKS + 1 + i, F_UNLCK, 0);
				return -(errno ? errno : EIO);
			}
		}
		memset(&P.t->s[i], 0, sizeof(P.t->s[i]));
		return (int)i;
	}
	return -ENOSPC;
}

static void
free_slot(int i)
{
	memset(&P.t->s[i], 0, sizeof(P.t->s[i]));
	(void)put_slot(i);
	(void)lockb(CL_LOCKS + 1 + i, F_UNLCK, 0);
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
	snprintf(cmd, len, "%s", b);
}

static void
fill_slot(struct cl_slot *s, int kind, uint64_t mem)
{
	s->token = P.token;
	s->kind = (uint32_t)kind;
	s->uid = (uint32_t)getuid();
	s->pid = (int32_t)getpid();
	s->mem = mem;
	s->since_ms = wall_ms();
	s->group = P.group;
	memcpy(s->cmd, P.cmd, sizeof(s->cmd));
}

/* Room on each GPU: taken whole, or the declared bytes taken, by us
 * (this process and its ancestors) and by others. */
struct room {
	int		 whole[2];	/* [0]: ours, [1]: others' */
	uint64_t	 used[2];
};

/* Whether a claim of mem bytes takes GPU g whole: nothing declared, a
 * GPU of unknown size, or as much as it has. */
static int
whole_of(int g, uint64_t mem)
{
	return mem == 0 || P.g[g].total == 0 || mem >= P.g[g].total;
}

/* Whether mem bytes (0: the whole GPU) fit beside what is taken on GPU
 * g: by everyone (as others see it), or by others only (as we do). */
static int
fits(const struct room *r, int g, uint64_t mem, int others_only)
{
	uint64_t	 total = P.g[g].total, used = r[g].used[1];
	int		 whole = r[g].whole[1];

	if (!others_only) {
		used += r[g].used[0];
		whole |= r[g].whole[0];
	}
	if (whole)
		return 0;
	if (whole_of(g, mem))
		return used == 0;
	return used <= total && mem <= total - used;
}

static void
take(struct room *r, int g, uint64_t mem, int theirs)
{
	if (whole_of(g, mem))
		r[g].whole[theirs] = 1;
	r[g].used[theirs] += mem;
}

static int
in_set(const struct cl_slot *s, int g)
{
	return (s->set[g / 8] >> (g % 8)) & 1;
}

/* Each other process's waiter ahead of ticket, in ticket order, takes
 * what it would (up to n of its GPUs that fit, as it sees them). */
static void
queue_ahead(struct room *r, uint64_t ticket)
{
	uint64_t	 last = 0, best;
	uint32_t	 i, g, got;
	int		 at;

	for (;;) {
		at = -1;
		best = ticket;
		for (i = 0; i < P.t->h.hi; i++)
			if (P.cls[i] == S_OTHER && P.t->s[i].kind == CL_WAIT &&
			    P.t->s[i].ticket > last &&
			    P.t->s[i].ticket < best) {
				best = P.t->s[i].ticket;
				at = (int)i;
			}
		if (at < 0)
			return;
		last = best;
		for (g = 0, got = 0; g < P.t->h.ngpus && got <
		    P.t->s[at].n; g++)
			if (in_set(&P.t->s[at], (int)g) &&
			    fits(r, (int)g, P.t->s[at].mem, 0)) {
				take(r, (int)g, P.t->s[at].mem, 1);
				got++;
			}
	}
}

/* The room every hold leaves, after the waiters ahead of ticket. */
static void
rooms(struct room *r, uint64_t ticket)
{
	uint32_t	 i;

	memset(r, 0, sizeof(*r) * GP_CLAIM_MAXG);
	for (i = 0; i < P.t->h.hi; i++)
		if (P.cls[i] != S_NONE && P.t->s[i].kind == CL_HOLD)
			take(r, (int)P.t->s[i].gpu, P.t->s[i].mem,
			    P.cls[i] == S_OTHER);
	queue_ahead(r, ticket);
}

/* What other processes hold of GPU g: whole (-1), or their bytes. */
static int64_t
others_on(int g)
{
	uint64_t	 sum = 0;
	uint32_t	 i;

	for (i = 0; i < P.t->h.hi; i++)
		if (P.cls[i] == S_OTHER && P.t->s[i].kind == CL_HOLD &&
		    (int)P.t->s[i].gpu == g) {
			if (whole_of(g, P.t->s[i].mem))
				return -1;
			sum += P.t->s[i].mem;
		}
	return (int64_t)sum;
}

/* Whether another process waits for GPU g. */
static int
wanted(int g)
{
	uint32_t	 k;

	for (k = 0; k < P.t->h.hi; k++)
		if (P.cls[k] == S_OTHER && P.t->s[k].kind == CL_WAIT &&
		    in_set(&P.t->s[k], g))
			return 1;
	return 0;
}

static const struct cl_slot *
holder_of(int g)
{
	uint32_t	 i;

	for (i = 0; i < P.t->h.hi; i++)
		if (P.cls[i] == S_OTHER && P.t->s[i].kind == CL_HOLD &&
		    (int)P.t->s[i].gpu == g)
			return &P.t->s[i];
	return NULL;
}

static int	may(const struct gp_claimer *, const struct room *, int,
		    uint64_t);

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
static void
describe(const struct cl_slot *h, char *buf, size_t len)
{
	char		 who[64], when[16] = "?", mem[32] = "";
	struct tm	 tm;
	time_t		 t = (time_t)(h->since_ms / 1000);

	user_name((uid_t)h->uid, who, sizeof(who));
	if (localtime_r(&t, &tm) != NULL)
		strftime(when, sizeof(when), "%H:%M", &tm);
	if (h->mem > 0)
		snprintf(mem, sizeof(mem), ", %.1f GiB",
		    (double)h->mem / (double)(1ull << 30));
	snprintf(buf, len, "%s, pid %d, %.40s, since %s%s", who, (int)h->pid,
	    h->cmd, when, mem);
}

/* Who stands in the way, for people: of all c's GPUs, those it could
 * not have now, and the first one's holder. */
static void
say_why(const struct gp_claimer *c, const struct gp_claim_req *r,
    const struct room *rm, char *why, size_t len)
{
	const struct cl_slot	*h = NULL;
	char			 desc[160];
	size_t			 n;
	int			 i, held = 0, first = -1;

	if (why == NULL || len == 0)
		return;
	for (i = 0; i < c->ng; i++)
		if (c->gpu[i].tix >= 0 && !may(c, rm, i, r->mem)) {
			held++;
			if (h == NULL && (h = holder_of(c->gpu[i].tix)) != NULL)
				first = i;
		}
	if (held == c->ng)
		snprintf(why, len, "all %d held", held);
	else
		snprintf(why, len, "%d of %d held", held, c->ng);
	n = strlen(why);
	if (h == NULL)
		snprintf(why + n, len - n, " or kept for earlier waiters");
	else {
		describe(h, desc, sizeof(desc));
		snprintf(why + n, len - n, " (GPU %d: %s)", first, desc);
	}
}

static int
begin(struct gp_claimer *c)
{
	pthread_mutex_lock(&cl_mu);
	forked();
	if (c->pid != getpid() || P.pid == 0) {
		pthread_mutex_unlock(&cl_mu);
		return -ECHILD;	/* a fork's copy: not its claims */
	}
	return 0;
}

static void
end(void)
{
	pthread_mutex_unlock(&cl_mu);
}

/* The directory in effect: dir, else $GPUPOOL_CLAIMS, else the default;
 * NULL for none. *dirp set, or -EINVAL with err. */
static int
claims_dir(const char **dirp, char *err, size_t errlen)
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

int
gp_claim_open(struct gp_claimer **out, const char *dir, char *err,
    size_t errlen)
{
	struct gp_claimer	*c;
	size_t			 n;
	int			 rc;

	*out = NULL;
	if ((rc = claims_dir(&dir, err, errlen)) < 0 || dir == NULL)
		return rc;
	n = strlen(dir);
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return -ENOMEM;
	c->pid = getpid();
	c->wait = c->ino = -1;
	pthread_mutex_lock(&cl_mu);
	forked();
	if (P.pid == 0) {
		if (P.t == NULL && (P.t = malloc(sizeof(*P.t))) == NULL) {
			end();
			free(c);
			return -ENOMEM;
		}
		while (getrandom(&P.token, sizeof(P.token), 0) < 0 ||
		    P.token == 0)
			P.token = (uint64_t)wall_ms() ^ ((uint64_t)getpid() <<
			    40) ^ 1;
		open_table(dir);
		read_cmd(P.cmd, sizeof(P.cmd));
		read_kin();
		P.group = group();
		P.pid = getpid();
	} else if (strncmp(P.path, dir, n) != 0 || strcmp(P.path + n,
	    "/" CL_FILE) != 0) {
		end();
		free(c);
		return gp_errf(err, errlen, -EINVAL, "claims directory '%s': "
		    "this process claims in '%s' already", dir, P.path);
	}
	P.users++;
	end();
	*out = c;
	return 0;
}

int
gp_claim_gpu(struct gp_claimer *c, const char *key, uint64_t total)
{
	if (c->ng >= GP_CLAIM_MAXG)
		return -E2BIG;
	snprintf(c->gpu[c->ng].key, sizeof(c->gpu[c->ng].key), "%s", key);
	c->gpu[c->ng].total = total;
	c->gpu[c->ng].tix = -1;
	c->gpu[c->ng].hold = -1;
	return c->ng++;
}

/* Each of c's GPUs its index in the table, its key added if missing,
 * its size if now known. Under the guard. 0 or -1 with P.bad set. */
static int
resolve(struct gp_claimer *c)
{
	int	 i, k, add;

	for (i = 0; i < c->ng; i++) {
		if (c->gpu[i].tix >= 0 && (c->gpu[i].total == 0 ||
		    P.g[c->gpu[i].tix].total != 0))
			continue;
		for (k = 0; k < P.ng; k++)
			if (strcmp(P.g[k].key, c->gpu[i].key) == 0)
				break;
		if (k == GP_CLAIM_MAXG) {
			mark_bad("%s is full: %s GPU keys", "256");
			return -1;
		}
		add = k == P.ng;
		if (add) {
			memset(&P.g[k], 0, sizeof(P.g[k]));
			memcpy(P.g[k].key, c->gpu[i].key, sizeof(P.g[k].key));
		}
		if (add || (P.g[k].total == 0 && c->gpu[i].total > 0)) {
			P.g[k].total = c->gpu[i].total;
			if (pwrite(P.fd, &P.g[k], sizeof(P.g[k]), CL_GOFF +
			    (off_t)k * (off_t)sizeof(P.g[k])) !=
			    (ssize_t)sizeof(P.g[k]))
				goto io;
		}
		if (add) {
			P.t->h.ngpus = (uint32_t)++P.ng;
			if (put_hdr() < 0)
				goto io;
		}
		c->gpu[i].tix = k;
	}
	return 0;
io:
	mark_bad("%s: %s", strerror(errno ? errno : EIO));
	return -1;
}

/* begin(), then the table locked and read, c's GPUs looked up. 0, or -1
 * (the table unusable, why says so; the mutex is still held). */
static int
enter(struct gp_claimer *c, char *why, size_t len)
{
	if (load() == 0) {
		if (resolve(c) == 0) {
			classify();
			return 0;
		}
		unload();
	}
	if (why != NULL && len > 0)
		snprintf(why, len, "every GPU counts as held: %s", P.bad);
	return -1;
}

static int
set_wait(struct gp_claimer *c, const struct gp_claim_req *r)
{
	struct cl_slot	*s, was;
	int		 i, rc, fresh = c->wait < 0;

	if (c->wait < 0) {
		if ((rc = new_slot()) < 0)
			return rc;
		c->wait = rc;
		fill_slot(&P.t->s[rc], CL_WAIT, r->mem);
		P.t->s[rc].ticket = P.t->h.ticket++;
		if ((rc = put_hdr()) < 0)
			return rc;
	}
	s = &P.t->s[c->wait];
	was = *s;
	s->mem = r->mem;
	s->n = (uint32_t)r->n;
	s->partial = (uint32_t)r->partial;
	memset(s->set, 0, sizeof(s->set));
	for (i = 0; i < r->nset; i++)
		s->set[c->gpu[r->set[i]].tix / 8] |=
		    (uint8_t)(1 << (c->gpu[r->set[i]].tix % 8));
	/* Unchanged, unwritten: each write wakes every waiter, and two
	 * waiters asking again would wake each other without end. */
	if (!fresh && memcmp(&was, s, sizeof(was)) == 0)
		return 0;
	return put_slot(c->wait);
}

static void
unwait(struct gp_claimer *c)
{
	if (c->wait >= 0)
		free_slot(c->wait);
	c->wait = -1;
}

/* Whether c may take one more claim of mem bytes on its GPU i: one it
 * holds, while no other process waits for it and the bytes fit beside
 * the others'; one it does not, when the room left after the waiters
 * ahead has them. */
static int
may(const struct gp_claimer *c, const struct room *rm, int i, uint64_t mem)
{
	int	 g = c->gpu[i].tix;
	int64_t	 o;

	if (c->gpu[i].n == 0)
		return fits(rm, g, mem, 1);
	if (wanted(g))
		return 0;
	if (c->gpu[i].whole > 0)
		return 1;
	if ((o = others_on(g)) < 0)
		return 0;
	if (whole_of(g, c->gpu[i].mem + mem))
		return o == 0;
	return (uint64_t)o + c->gpu[i].mem + mem <= P.g[g].total;
}

/* Write GPU i's HOLD slot as c's claims on it now are (made on the
 * first, freed with the last). 0 or an errno. */
static int
sync_hold(struct gp_claimer *c, int i)
{
	struct cl_slot	*s;
	int		 k;

	if (c->gpu[i].n == 0) {
		if (c->gpu[i].hold >= 0)
			free_slot(c->gpu[i].hold);
		c->gpu[i].hold = -1;
		return 0;
	}
	if (c->gpu[i].hold < 0) {
		if ((k = new_slot()) < 0)
			return k;
		fill_slot(&P.t->s[k], CL_HOLD, 0);
		P.t->s[k].gpu = (uint32_t)c->gpu[i].tix;
		c->gpu[i].hold = k;
	}
	s = &P.t->s[c->gpu[i].hold];
	s->mem = c->gpu[i].whole > 0 || P.g[c->gpu[i].tix].total == 0 ? 0 :
	    c->gpu[i].mem;
	return put_slot(c->gpu[i].hold);
}

static void
count(struct gp_claimer *c, int i, uint64_t mem, int d)
{
	c->gpu[i].n += d;
	c->gpu[i].whole += mem == 0 ? d : 0;
	c->gpu[i].mem = d > 0 ? c->gpu[i].mem + mem : c->gpu[i].mem - mem;
}

int
gp_claim_try(struct gp_claimer *c, const struct gp_claim_req *r, int *got,
    char *why, size_t len)
{
	struct room	 rm[GP_CLAIM_MAXG];
	int		 i, k, n = 0, rc = 0;

	if (r->n < 1 || r->nset < 1)
		return -EINVAL;
	if ((rc = begin(c)) < 0)
		return rc;
	if (enter(c, why, len) < 0) {
		end();
		return 0;
	}
	rooms(rm, c->wait >= 0 ? P.t->s[c->wait].ticket : UINT64_MAX);
	for (i = 0; i < r->nset && n < r->n; i++)
		if (may(c, rm, r->set[i], r->mem))
			got[n++] = r->set[i];
	if (n == r->n || (r->partial && n > 0)) {
		for (k = 0; k < n && rc == 0; k++) {
			count(c, got[k], r->mem, 1);
			if ((rc = sync_hold(c, got[k])) < 0)
				count(c, got[k], r->mem, -1);
		}
		if (rc < 0)	/* taken back: it is all or nothing */
			while (--k > 0) {
				count(c, got[k - 1], r->mem, -1);
				(void)sync_hold(c, got[k - 1]);
			}
		else {
			unwait(c);
			rc = n;
		}
	} else if ((rc = set_wait(c, r)) == 0)
		say_why(c, r, rm, why, len);
	if (rc < 0 && why != NULL && len > 0)
		snprintf(why, len, "every GPU counts as held: %s: %s", P.path,
		    strerror(-rc));
	unload();
	end();
	return rc < 0 ? 0 : rc;
}

void
gp_claim_unwait(struct gp_claimer *c)
{
	if (c == NULL || c->wait < 0 || begin(c) < 0)
		return;
	if (P.fd >= 0 && lockb(CL_LOCKS, F_WRLCK, 1) == 0) {
		unwait(c);
		unload();
	}
	c->wait = -1;
	end();
}

void
gp_claim_drop(struct gp_claimer *c, int i, uint64_t mem)
{
	if (c == NULL || c->gpu[i].n == 0 || begin(c) < 0)
		return;
	count(c, i, mem, -1);
	if (P.fd >= 0 && lockb(CL_LOCKS, F_WRLCK, 1) == 0) {
		if (sync_hold(c, i) < 0 && c->gpu[i].n == 0)
			c->gpu[i].hold = -1;
		unload();
	} else if (c->gpu[i].n == 0)
		c->gpu[i].hold = -1;	/* the table is gone: so is it */
	end();
}

int
gp_claim_holds(const struct gp_claimer *c, int i)
{
	return c != NULL && c->gpu[i].n > 0;
}

void
gp_claim_close(struct gp_claimer *c)
{
	int	 i;

	if (c == NULL)
		return;
	if (begin(c) == 0) {
		if (P.fd >= 0 && lockb(CL_LOCKS, F_WRLCK, 1) == 0) {
			for (i = 0; i < c->ng; i++)
				if (c->gpu[i].hold >= 0)
					free_slot(c->gpu[i].hold);
			unwait(c);
			unload();
		}
		if (--P.users == 0) {
			/* Nothing claimed: the fd goes, and the next
			 * claimer opens the table again. */
			if (P.fd >= 0)
				close(P.fd);
			P.fd = -1;
			P.pid = 0;
		}
		end();
	}
	if (c->ino >= 0)
		close(c->ino);
	free(c);
}

int
gp_claim_fd(struct gp_claimer *c)
{
	if (c == NULL)
		return -1;
	if (c->ino < 0 && c->pid == getpid()) {
		if ((c->ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0)
			return -1;
		if (inotify_add_watch(c->ino, P.path, IN_MODIFY |
		    IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF) < 0) {
			close(c->ino);
			c->ino = -1;
		}
	}
	return c->ino;
}

void
gp_claim_drain(struct gp_claimer *c)
{
	char	 buf[4096];

	if (c != NULL && c->ino >= 0)
		while (read(c->ino, buf, sizeof(buf)) > 0)
			;
}

int
gp_claim_wait(struct gp_claimer *c, const struct gp_claim_req *r, int *got,
    int timeout_ms, int cancel_fd, char *why, size_t len)
{
	struct pollfd	 pf[2];
	int64_t		 t0 = gp_now_ns(), left;
	int		 rc, said = 0, fd, n, ms;

	for (;;) {
		if ((rc = gp_claim_try(c, r, got, why, len)) != 0)
			return rc;
		if (timeout_ms < 0)
			return -ETIMEDOUT;
		if (!said) {
			said = 1;
			fprintf(stderr, "gpupool: waiting for %s%d GPU%s: "
			    "%s\n", r->partial ? "at least " : "",
			    r->partial ? 1 : r->n, r->partial || r->n == 1 ?
			    "" : "s", why);
		}
		fd = gp_claim_fd(c);
		ms = fd < 0 ? GP_CLAIM_POLL_MS : 1000;
		if (timeout_ms > 0) {
			left = (int64_t)timeout_ms - (gp_now_ns() - t0) /
			    1000000;
			if (left <= 0) {
				gp_claim_unwait(c);
				return -ETIMEDOUT;
			}
			if (left < ms)
				ms = (int)left;
		}
		n = 0;
		pf[n].fd = fd;
		pf[n++].events = POLLIN;
		if (cancel_fd >= 0) {
			pf[n].fd = cancel_fd;
			pf[n++].events = POLLIN;
		}
		if (poll(pf, (nfds_t)n, ms) < 0 && errno != EINTR)
			return -errno;
		if (cancel_fd >= 0 && (pf[n - 1].revents & (POLLIN | POLLHUP))) {
			gp_claim_unwait(c);
			return -ECANCELED;
		}
		gp_claim_drain(c);
	}
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
	memcpy(o->cmd, s->cmd, sizeof(o->cmd));
	o->cmd[sizeof(o->cmd) - 1] = '\0';
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

	if ((rc = claims_dir(&dir, err, errlen)) < 0 || dir == NULL)
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
				    in_set(&s[i], (int)k) &&
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
