/*
 * joblog.c: GNU parallel's joblog (Seq Host Starttime JobRuntime Send
 * Receive Exitval Signal Command, TAB separated) with three trailing
 * columns: the GPU, GPUMem (the task's peak GPU memory, MiB) and GPUUtil
 * (its mean GPU utilisation, %), '-' when unknown. Reads an old one for
 * --resume and appends one line per attempt, each made durable before
 * the next task's outcome is handled, so a crash loses at most the line
 * being written. Never prints.
 *
 * A line counts when it has at least ten fields and its Seq, Exitval and
 * Signal are integers: the twelve we write, the ten of joblogs written
 * before GPUMem and GPUUtil, or a line torn by a crash after its outcome
 * was complete (cut inside the GPU, GPUMem or GPUUtil column). A line
 * torn sooner lacks fields and is ignored: its task runs again. A TAB or
 * newline in a command or a GPU id is written as \t or \n, so the
 * columns hold and the Command is always the ninth field, and a
 * backslash that could be read as the start of one (before a backslash,
 * a 't', an 'n', a TAB or a newline) as \\: every command has its own
 * text, which joblog_unesc() turns back into the command. Any other
 * backslash is written as it is, as GNU parallel (which escapes nothing)
 * and earlier gpupool-runs wrote every one: their lines read the same
 * unless a command held such a pair.
 *
 * What --resume keeps of an old joblog is one entry per Seq it records,
 * sorted: memory follows the rows present, not the largest Seq.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define SEQ_LIMIT	100000000UL	/* larger Seqs are ignored */
#define LOG_LINE_MAX	(LINE_MAX_BYTES + 4096)
#define LOCK_RETRY_MS	100	/* --wait-lock: try again after */

static const char header[] = "Seq\tHost\tStarttime\tJobRuntime\tSend\t"
    "Receive\tExitval\tSignal\tCommand\tGPU\tGPUMem\tGPUUtil\n";

void
joblog_init(struct joblog *j)
{
	memset(j, 0, sizeof(*j));
	j->fd = -1;
}

void
joblog_release(struct joblog *j)
{
	struct stat	 st;

	/* A joblog this run created and never wrote (it stopped before the
	 * first task) is not left behind; the lock is still ours. */
	if (j->created && fstat(j->fd, &st) == 0 && st.st_size == 0)
		(void)unlink(j->path);
	if (j->fd > STDERR_FILENO)
		close(j->fd);
	free(j->ent);
	free(j->line);
	joblog_init(j);
}

/* What s[0] becomes in the joblog (s[1] is the next character); NULL:
 * written as it is. */
static const char *
esc(const char *s)
{
	if (*s == '\t')
		return "\\t";
	if (*s == '\n')
		return "\\n";
	if (*s == '\\' && s[1] != '\0' && strchr("\\tn\t\n", s[1]) != NULL)
		return "\\\\";
	return NULL;
}

static uint32_t
fnv(uint32_t h, unsigned char c)
{
	return (h ^ c) * 16777619u;
}

/* FNV-1a of s as it is, or (escaped) as the joblog writes it, so that
 * a command read back and the task's own compare equal; 0 is kept for
 * "unknown". */
static uint32_t
hash(const char *s, int escaped)
{
	uint32_t	 h = 2166136261u;
	const char	*e;

	for (; *s; s++)
		if (!escaped || (e = esc(s)) == NULL)
			h = fnv(h, (unsigned char)*s);
		else
			h = fnv(fnv(h, (unsigned char)e[0]), (unsigned char)e[1]);
	return h ? h : 1;
}

uint32_t
joblog_hash(const char *s)
{
	return hash(s, 1);
}

void
joblog_unesc(char *s)
{
	char	*d = s;

	for (; *s; s++) {
		if (*s == '\\' && (s[1] == '\\' || s[1] == 't' || s[1] == 'n')) {
			s++;
			*d++ = *s == 't' ? '\t' : *s == 'n' ? '\n' : '\\';
		} else
			*d++ = *s;
	}
	*d = '\0';
}

static int
num(const char *s, const char *e, long *out)
{
	char	*end;
	long	 v;

	if (s == e || (*s != '-' && (*s < '0' || *s > '9')))
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end != e)
		return -1;
	*out = v;
	return 0;
}

/* By Seq, then by line: the last line for a Seq is its last outcome. */
static int
ent_cmp(const void *a, const void *b)
{
	const struct jl_ent	*x = a, *y = b;

	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	return x->line < y->line ? -1 : x->line > y->line;
}

/* bsearch() on compacted entries: one per Seq. */
static int
seq_cmp(const void *a, const void *b)
{
	const struct jl_ent	*x = a, *y = b;

	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Sort, and keep the last entry of each Seq. */
static void
compact(struct joblog *j)
{
	size_t	 i, n = 0;

	if (j->nent == 0)
		return;
	qsort(j->ent, j->nent, sizeof(*j->ent), ent_cmp);
	for (i = 0; i < j->nent; i++) {
		if (n > 0 && j->ent[n - 1].seq == j->ent[i].seq)
			n--;
		j->ent[n++] = j->ent[i];
	}
	j->nent = n;
}

static int
mark(struct joblog *j, unsigned long seq, int ok, uint32_t h)
{
	struct jl_ent	*e;
	size_t		 n;

	if (j->nent == j->cap) {
		/* Retries repeat Seqs: fold them before growing. */
		compact(j);
		if (j->nent >= j->cap / 2) {
			n = j->cap ? j->cap * 2 : 1024;
			if ((e = realloc(j->ent, n * sizeof(*e))) == NULL)
				return -ENOMEM;
			j->ent = e;
			j->cap = n;
		}
	}
	e = &j->ent[j->nent++];
	e->seq = seq;
	e->line = j->nline++;
	e->hash = h;
	e->ok = ok != 0;
	return 0;
}

/* One line (no '\n', NUL-terminated in place). */
static int
parse(struct joblog *j, char *l, size_t n)
{
	char		*tab[9], *p;
	long		 seq, ev, sig;
	int		 k = 0;
	uint32_t	 h = 0;

	/* A NUL is no joblog text: blocks of them are what a crash can
	 * leave at the end of a file. (It would also hide the last TAB
	 * from strrchr() below.) */
	if (memchr(l, '\0', n) != NULL)
		return 0;
	for (p = l; k < 9 && (p = memchr(p, '\t', (size_t)(l + n - p))) != NULL;
	    p++)
		tab[k++] = p;
	if (k < 9)
		return 0;	/* fewer than ten fields: torn or foreign */
	if (num(l, tab[0], &seq) < 0 || seq <= 0 ||
	    (unsigned long)seq > SEQ_LIMIT ||
	    num(tab[5] + 1, tab[6], &ev) < 0 ||
	    num(tab[6] + 1, tab[7], &sig) < 0)
		return 0;
	*tab[8] = '\0';		/* the Command ends there */
	h = hash(tab[7] + 1, 0);	/* as written: escaped */
	return mark(j, (unsigned long)seq, ev == 0 && sig == 0, h);
}

int
joblog_load(struct joblog *j, const char *path, char *err, size_t errlen)
{
	char		*buf, *nl, *b;
	size_t		 len = 0, cap = 65536, off;
	struct stat	 st;
	ssize_t		 r;
	int		 fd, rc = 0, skipping = 0;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) == -1) {
		if (errno == ENOENT)
			return 0;	/* nothing has run yet */
		rc = -errno;
		snprintf(err, errlen, "cannot open joblog '%s': %s", path,
		    strerror(errno));
		return rc;
	}
	/* Only a regular file holds a past run: a device such as /dev/full
	 * would be read for ever. */
	if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode)) {
		close(fd);
		return 0;
	}
	if ((buf = malloc(cap + 1)) == NULL) {
		close(fd);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (;;) {
		do
			r = read(fd, buf + len, cap - len);
		while (r == -1 && errno == EINTR);
		if (r == -1) {
			rc = -errno;
			snprintf(err, errlen, "cannot read joblog '%s': %s",
			    path, strerror(errno));
			break;
		}
		len += (size_t)r;
		for (off = 0; (nl = memchr(buf + off, '\n', len - off)) != NULL;
		    off = (size_t)(nl - buf) + 1) {
			*nl = '\0';
			if (!skipping && (rc = parse(j, buf + off,
			    (size_t)(nl - buf) - off)) < 0)
				break;
			skipping = 0;
		}
		if (rc < 0)
			break;
		memmove(buf, buf + off, len - off);
		len -= off;
		if (r == 0) {
			/* A last line without '\n': a crash cut it. */
			buf[len] = '\0';
			if (len > 0 && !skipping)
				rc = parse(j, buf, len);
			break;
		}
		if (len == cap) {
			if (cap >= LOG_LINE_MAX) {
				len = 0;	/* not ours: skip the line */
				skipping = 1;
			} else if ((b = realloc(buf, cap * 2 + 1)) == NULL) {
				rc = -ENOMEM;
				break;
			} else {
				buf = b;
				cap *= 2;
			}
		}
	}
	if (rc == -ENOMEM)
		snprintf(err, errlen, "out of memory");
	compact(j);
	free(buf);
	close(fd);
	return rc;
}

/*
 * A lock on fd for as long as the descriptor lives, exclusive (F_WRLCK,
 * fd open for writing) or shared (F_RDLCK: an input a run reads while
 * it goes, which no other run may write): an OFD lock, so closing
 * another descriptor of the file does not drop it and the kernel drops
 * it however we end. An OFD
 * lock has no pid to report, so ours says who holds it by its extent:
 * bytes 0 to our pid. --wait-lock tries again every LOCK_RETRY_MS rather
 * than wait in F_OFD_SETLKW: under MPI the run's signals are blocked from
 * the start (main.c), and a blocked SIGTERM would never end that wait.
 * Between tries it takes them, where they are blocked, with
 * sigtimedwait(); where they are not, they end the process as usual.
 */
int
file_lock(int fd, int type, int wait, const char *what, const char *path,
    char *err, size_t errlen)
{
	static const int	 stop[] = { SIGINT, SIGTERM, SIGHUP };
	struct timespec		 ts = { 0, LOCK_RETRY_MS * 1000000L };
	struct flock		 fl;
	sigset_t		 set, blocked;
	size_t			 i;
	long			 holder = 0;
	int			 s;

	sigemptyset(&set);
	if (wait && sigprocmask(SIG_BLOCK, NULL, &blocked) == 0)
		for (i = 0; i < sizeof(stop) / sizeof(stop[0]); i++)
			if (sigismember(&blocked, stop[i]))
				sigaddset(&set, stop[i]);
	for (;;) {
		memset(&fl, 0, sizeof(fl));
		fl.l_type = (short)type;
		fl.l_whence = SEEK_SET;
		fl.l_start = 0;
		fl.l_len = (off_t)getpid() + 1;
		if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EACCES)
			break;
		if (wait) {
			if ((s = sigtimedwait(&set, NULL, &ts)) > 0) {
				snprintf(err, errlen, "got SIG%s while waiting "
				    "for %s '%s' (--wait-lock): nothing was run",
				    sigabbrev_np(s), what, path);
				return -EINTR;
			}
			continue;
		}
		if (fcntl(fd, F_OFD_GETLK, &fl) == -1)
			break;
		if (fl.l_type == F_UNLCK)
			continue;	/* released meanwhile */
		/* Another program's POSIX lock does carry a pid. */
		if (fl.l_pid > 0)
			holder = fl.l_pid;
		else if (fl.l_start == 0 && fl.l_len > 1)
			holder = (long)fl.l_len - 1;
		snprintf(err, errlen, "%s '%s' is in use by process %ld "
		    "(another gpupool-run?); --wait-lock waits for it", what,
		    path, holder);
		return -EAGAIN;
	}
	s = -errno;
	snprintf(err, errlen, "cannot lock %s '%s': %s", what, path,
	    strerror(errno));
	return s;
}

int
joblog_lock(struct joblog *j, const char *path, int wait, char *err,
    size_t errlen)
{
	struct stat	 st;
	/* O_NONBLOCK: a FIFO must not block open(); it is refused below. */
	int		 fd, rc, fl = O_RDWR | O_APPEND | O_CLOEXEC |
			    O_NOFOLLOW | O_NOCTTY | O_NONBLOCK;

	j->path = path;
	for (;;) {
		j->created = 1;
		if ((fd = open(path, fl | O_CREAT | O_EXCL, 0666)) == -1 &&
		    errno == EEXIST) {
			j->created = 0;
			if ((fd = open(path, fl)) == -1 && errno == ENOENT)
				continue;	/* removed meanwhile */
		}
		if (fd == -1) {
			rc = -errno;
			snprintf(err, errlen, "cannot open joblog '%s': %s",
			    path, strerror(errno));
			return rc;
		}
		if (fstat(fd, &st) == -1) {
			rc = -errno;
			snprintf(err, errlen, "cannot open joblog '%s': %s",
			    path, strerror(errno));
			close(fd);
			return rc;
		}
		/* A FIFO or a device holds no past run and can block a
		 * write for ever (a reader that stops reading). */
		if (!S_ISREG(st.st_mode)) {
			snprintf(err, errlen, "joblog '%s' is not a regular "
			    "file", path);
			close(fd);
			return -EINVAL;
		}
		if ((rc = file_lock(fd, F_WRLCK, wait, "joblog", path, err,
		    errlen)) < 0) {
			close(fd);
			return rc;
		}
		/* The run we waited for may have removed or replaced it:
		 * lock what the path names now. */
		if (same_file(path, &st))
			break;
		close(fd);
	}
	j->fd = fd;
	return 0;
}

int
joblog_open(struct joblog *j, const char *path, int keep, char *err,
    size_t errlen)
{
	struct stat	 st;
	char		 c;
	/* O_RDWR: the last byte tells whether a crash tore a line. */
	int		 rc, fl = O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC |
			    O_NOFOLLOW | O_NOCTTY;

	j->path = path;
	if (j->fd >= 0) {
		/* Locked by joblog_lock(): truncated only now. */
		if (!keep && ftruncate(j->fd, 0) == -1) {
			rc = -errno;
			goto fail;
		}
	} else if (strcmp(path, "-") == 0)
		j->fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
	else
		j->fd = open(path, fl | (keep ? 0 : O_TRUNC), 0666);
	if (j->fd == -1) {
		rc = -errno;
		snprintf(err, errlen, "cannot open joblog '%s': %s", path,
		    strerror(errno));
		return rc;
	}
	if (fstat(j->fd, &st) == -1) {
		rc = -errno;
		goto fail;
	}
	rc = 0;
	if (S_ISREG(st.st_mode) && st.st_size == 0)
		rc = gp_write_full(j->fd, header, sizeof(header) - 1);
	else if (S_ISREG(st.st_mode) && pread(j->fd, &c, 1, st.st_size - 1) ==
	    1 && c != '\n')
		rc = gp_write_full(j->fd, "\n", 1);	/* end a torn line */
	else if (!S_ISREG(st.st_mode))	/* -, a FIFO, a device: and a
					   write that fails, fails now */
		rc = gp_write_full(j->fd, header, sizeof(header) - 1);
	if (rc == 0)
		return 0;
fail:
	snprintf(err, errlen, "cannot write joblog '%s': %s", path,
	    strerror(-rc));
	close(j->fd);
	j->fd = -1;
	return rc;
}

static const struct jl_ent *
find(const struct joblog *j, unsigned long seq)
{
	struct jl_ent	 key;

	memset(&key, 0, sizeof(key));
	key.seq = seq;
	if (j->nent == 0)
		return NULL;
	return bsearch(&key, j->ent, j->nent, sizeof(key), seq_cmp);
}

int
joblog_done(const struct joblog *j, unsigned long seq, int failed_too)
{
	const struct jl_ent	*e = find(j, seq);

	if (e == NULL)
		return 0;
	return failed_too ? e->ok : 1;
}

int
joblog_changed(const struct joblog *j, unsigned long seq, const char *cmd)
{
	const struct jl_ent	*e = find(j, seq);

	return e != NULL && e->hash != joblog_hash(cmd);
}

/* s at p, escaped; returns the end. */
static char *
put_esc(char *p, const char *s)
{
	const char	*e;

	for (; *s; s++)
		if ((e = esc(s)) != NULL) {
			memcpy(p, e, 2);
			p += 2;
		} else
			*p++ = *s;
	return p;
}

/* A TAB and v at p, '-' when v < 0; returns the end. */
static char *
put_num(char *p, int64_t v)
{
	*p++ = '\t';
	if (v < 0) {
		*p++ = '-';
		return p;
	}
	return p + sprintf(p, "%lld", (long long)v);
}

int
joblog_append(struct joblog *j, const struct jl_rec *r)
{
	/* Escaping at most doubles the command and the GPU id; then two
	 * TABs and numbers of up to 20 digits, and the newline. */
	size_t	 tail = 2 * (strlen(r->cmd) + strlen(r->gpu)) + 2 + 2 * 21;
	size_t	 need = tail + strlen(r->host) + 200;
	char	*l, *p;
	int	 n, rc;

	if (j->fd < 0)
		return 0;
	if (need > j->lcap) {
		if ((l = realloc(j->line, need)) == NULL)
			return -ENOMEM;
		j->line = l;
		j->lcap = need;
	}
	n = snprintf(j->line, j->lcap, "%lu\t%s\t%.3f\t%.3f\t0\t0\t%d\t%d\t",
	    r->seq, r->host, r->start, r->runtime, r->exitval, r->signal);
	if (n < 0 || (size_t)n >= j->lcap - tail)
		return -EOVERFLOW;
	p = put_esc(j->line + n, r->cmd);
	*p++ = '\t';
	p = put_esc(p, r->gpu);
	p = put_num(p, r->gpu_mem);
	p = put_num(p, r->gpu_util);
	*p++ = '\n';
	/* One write per line: with O_APPEND it lands whole or torn, never
	 * mixed with another line. */
	if ((rc = gp_write_full(j->fd, j->line, (size_t)(p - j->line))) < 0)
		return rc;
	if (fdatasync(j->fd) == -1 && errno != EINVAL && errno != EROFS)
		return -errno;
	return 0;
}

/* Whether path names the file st describes (path may not exist). */
int
same_file(const char *path, const struct stat *st)
{
	struct stat	 ps;

	return stat(path, &ps) == 0 && ps.st_dev == st->st_dev &&
	    ps.st_ino == st->st_ino;
}
