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
 * A joblog GNU parallel wrote (its header has the nine columns only)
 * is read as parallel writes it: the Command is the rest of the line, TABs
 * and backslashes as they are; a run that appends to it writes its lines
 * the same way, nine columns, so that the file stays parallel's.
 *
 * A joblog to resume from that cannot be read is an error, never
 * "nothing ran yet": a first line that is no joblog header, a line in it
 * that is neither a record nor a record a crash cut short (a Seq and
 * fewer fields than a record has, or NUL bytes), a file that is not a
 * regular file. What --resume keeps of it is one entry per Seq it
 * records, sorted: memory follows the rows present, not the largest Seq.
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
/* GNU parallel's: the first nine of ours. */
#define PARALLEL_HEADER_LEN	(sizeof(header) - \
				    sizeof("\tGPU\tGPUMem\tGPUUtil\n"))

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
	while (j->ent != NULL && j->nent > 0)
		free(j->ent[--j->nent].cmd);
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
			free(j->ent[--n].cmd);
		j->ent[n++] = j->ent[i];
	}
	j->nent = n;
}

static int
mark(struct joblog *j, unsigned long seq, int ok, uint32_t h, char *cmd)
{
	struct jl_ent	*e;
	size_t		 n;

	if (j->nent == j->cap) {
		/* Retries repeat Seqs: fold them before growing. */
		compact(j);
		if (j->nent >= j->cap / 2) {
			n = j->cap ? j->cap * 2 : 1024;
			if ((e = realloc(j->ent, n * sizeof(*e))) == NULL) {
				free(cmd);
				return -ENOMEM;
			}
			j->ent = e;
			j->cap = n;
		}
	}
	e = &j->ent[j->nent++];
	e->seq = seq;
	e->line = j->nline++;
	e->hash = h;
	e->ok = ok != 0;
	e->cmd = cmd;
	return 0;
}

/* Whether l[0..n) is a joblog header, and whose: 9 (GNU parallel's
 * columns), 10 or 12 (gpupool-run's, older and now), or 0. */
static int
header_kind(const char *l, size_t n)
{
	size_t	 h = PARALLEL_HEADER_LEN;	/* without its '\n' */

	if (n < h || memcmp(l, header, h) != 0)
		return 0;
	if (n == h)
		return 9;
	if (n == h + 4 && memcmp(l + h, "\tGPU", 4) == 0)
		return 10;
	return n == sizeof(header) - 2 && memcmp(l, header, n) == 0 ? 12 : 0;
}

/*
 * One line (no '\n', NUL-terminated in place), line no of the file. 0
 * (a record, or a line to pass over: one a crash cut short, with a Seq
 * and too few fields, or NUL bytes), 1 (not a joblog line: the caller
 * says so) or -ENOMEM.
 */
static int
parse(struct joblog *j, char *l, size_t n)
{
	char		*tab[9], *p, *cmd = NULL;
	long		 seq, ev, sig;
	int		 k = 0, need = j->fmt == 9 ? 8 : 9;
	uint32_t	 h = 0;

	/* A NUL is no joblog text: blocks of them are what a crash can
	 * leave at the end of a file. (It would also hide the last TAB
	 * from strrchr() below.) */
	if (memchr(l, '\0', n) != NULL || n == 0)
		return 0;
	for (p = l; k < need && (p = memchr(p, '\t', (size_t)(l + n - p))) !=
	    NULL; p++)
		tab[k++] = p;
	if (k < need) {
		/* Cut short by a crash: its Seq, a number, came first. */
		p = k > 0 ? tab[0] : l + n;
		return strspn(l, "0123456789") == (size_t)(p - l) ? 0 : 1;
	}
	if (num(l, tab[0], &seq) < 0 || seq <= 0 ||
	    num(tab[5] + 1, tab[6], &ev) < 0 ||
	    num(tab[6] + 1, tab[7], &sig) < 0)
		return 1;
	if ((unsigned long)seq > SEQ_LIMIT)
		return 0;
	if (j->fmt == 9) {
		/* parallel's: the rest of the line, as the command was. */
		h = hash(tab[7] + 1, 1);
		if (j->keep_cmd && (cmd = strdup(tab[7] + 1)) == NULL)
			return -ENOMEM;
	} else {
		*tab[8] = '\0';		/* the Command ends there */
		h = hash(tab[7] + 1, 0);	/* as written: escaped */
		if (j->keep_cmd) {
			if ((cmd = strdup(tab[7] + 1)) == NULL)
				return -ENOMEM;
			joblog_unesc(cmd);
		}
	}
	return mark(j, (unsigned long)seq, ev == 0 && sig == 0, h, cmd);
}

/* Line no (l[0..n), NUL-terminated) of a joblog: the header first. 0, or
 * -EINVAL or -ENOMEM with err saying why. */
static int
load_line(struct joblog *j, const char *path, unsigned long no, char *l,
    size_t n, int last, char *err, size_t errlen)
{
	int	 rc;

	if (no == 1) {
		if ((j->fmt = header_kind(l, n)) != 0)
			return 0;
		/* The header torn by a crash, and nothing after it. */
		if (last && n < sizeof(header) - 2 && memcmp(l, header, n) == 0)
			return 0;
		snprintf(err, errlen, "joblog '%s': line 1 is not a joblog "
		    "header (GNU parallel's or gpupool-run's): not resuming "
		    "from it", path);
		return -EINVAL;
	}
	/* Another run's header, where it began on a file written before
	 * (an older gpupool-run's ten columns, then ours). */
	if ((rc = header_kind(l, n)) != 0) {
		j->fmt = rc;
		return 0;
	}
	if ((rc = parse(j, l, n)) == 1) {
		snprintf(err, errlen, "joblog '%s': line %lu is not a joblog "
		    "record: not resuming from it", path, no);
		return -EINVAL;
	}
	if (rc == -ENOMEM)
		snprintf(err, errlen, "out of memory");
	return rc;
}

int
joblog_load(struct joblog *j, const char *path, char *err, size_t errlen)
{
	struct rdr	 rd;
	const char	*p;
	size_t		 n;
	unsigned long	 no = 0;
	int		 fd, rc;

	err[0] = '\0';
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
	if ((rc = rdr_open(&rd, fd)) == 0 && !rd.regular)
		rc = -EINVAL;
	while (rc == 0) {
		rc = rdr_next(&rd, "\n", 1, LOG_LINE_MAX, &p, &n);
		if (rc == 0 && (rc = rdr_fill(&rd)) == 1)
			rc = 0;
		else if (rc == 1) {
			/* In place: the reader's buffer is ours until the
			 * next call. */
			((char *)p)[n] = '\0';
			rc = load_line(j, path, ++no, (char *)p, n, rd.eof &&
			    rd.off == rd.len, err, errlen);
		} else if (rc == -E2BIG) {
			snprintf(err, errlen, "joblog '%s': line %lu is not a "
			    "joblog record (over %u bytes): not resuming from "
			    "it", path, no + 1, LOG_LINE_MAX);
			rc = -EINVAL;
		}
	}
	if (rc < -1 && err[0] == '\0')
		snprintf(err, errlen, rc == -EINVAL ? "joblog '%s' is not a "
		    "regular file: not resuming from it" : rc == -ENOMEM ?
		    "out of memory (joblog '%s')" : "cannot read joblog '%s'",
		    path);
	rdr_close(&rd);
	compact(j);
	return rc < -1 ? rc : 0;
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
	char		 c, head[sizeof(header)], *nl;
	ssize_t		 n;
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
	/* A joblog GNU parallel began goes on in its nine columns. A header
	 * a crash cut short, and nothing after it, is written again whole:
	 * a line after it would leave it a first line that is no header. */
	if (S_ISREG(st.st_mode) && st.st_size > 0 && (n = pread(j->fd, head,
	    sizeof(head), 0)) > 0) {
		if ((nl = memchr(head, '\n', (size_t)n)) != NULL)
			j->fmt = header_kind(head, (size_t)(nl - head));
		else if (n == st.st_size && memcmp(head, header, (size_t)n) ==
		    0 && ftruncate(j->fd, 0) == 0)
			st.st_size = 0;
	}
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

/* s at p as GNU parallel writes a Command, the rest of its line: as it
 * is, but a newline (which would end the line) written \n. Returns the
 * end. */
static char *
put_raw(char *p, const char *s)
{
	for (; *s; s++)
		if (*s == '\n') {
			memcpy(p, "\\n", 2);
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
	if (j->fmt == 9)
		p = put_raw(j->line + n, r->cmd);
	else {
		p = put_esc(j->line + n, r->cmd);
		*p++ = '\t';
		p = put_esc(p, r->gpu);
		p = put_num(p, r->gpu_mem);
		p = put_num(p, r->gpu_util);
	}
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
