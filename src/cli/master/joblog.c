/*
 * joblog.c: GNU parallel's joblog (Seq Host Starttime JobRuntime Send
 * Receive Exitval Signal Command, TAB separated) with trailing columns
 * of ours: the GPU, GPUMem (the task's peak GPU memory, MiB), GPUUtil
 * (its mean GPU utilisation, %) and PeakRSS (its peak resident memory,
 * KiB), '-' when unknown. Reads an old one for
 * --resume and appends one line per attempt, each made durable before
 * the next task's outcome is handled, so a crash loses at most the line
 * being written. Never prints.
 *
 * A line counts when it has at least ten fields and its Seq, Exitval and
 * Signal are integers: the thirteen we write, the twelve of joblogs
 * written before PeakRSS and the ten of those before GPUMem and
 * GPUUtil, or a line torn by a crash after its outcome was complete
 * (cut inside the GPU column or one after it). A line
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
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "master/master.h"

#define SEQ_LIMIT	100000000UL	/* larger Seqs are ignored */
#define LOG_LINE_MAX	(LINE_MAX_BYTES + 4096)

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

/* What c becomes in the joblog when next follows it ('\0': nothing);
 * NULL: written as it is. */
static const char *
esc(char c, char next)
{
	if (c == '\t')
		return "\\t";
	if (c == '\n')
		return "\\n";
	if (c == '\\' && next != '\0' && strchr("\\tn\t\n", next) != NULL)
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
		if (!escaped || (e = esc(s[0], s[1])) == NULL)
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

/*
 * The columns, in order: GNU parallel's nine, then ours. Each is one
 * row: its name in the header, the member of struct attempt it holds
 * and what kind of value that is, which says how it is written and read
 * back (col_put(), col_get()). A new column is a row here, at the end,
 * and the code that makes its value.
 */
enum jl_type {
	JT_SEQ,		/* unsigned long, > 0 */
	JT_HOST,	/* const char *, as it is */
	JT_SECS,	/* double, seconds: "%.3f" */
	JT_ZERO,	/* GNU parallel's Send and Receive (--transfer): 0 */
	JT_INT,		/* int */
	JT_CMD,		/* const char *: escaped, or raw in parallel's */
	JT_TEXT,	/* const char *: escaped */
	JT_MIB,		/* uint64_t bytes, written in MiB rounded up; 0
			   (unknown) '-' */
	JT_PCT,		/* int, '-' when negative (unknown) */
	JT_COUNT,	/* int64_t, '-' when not above 0 (unknown) */
};

enum jl_col_flags {
	JC_NEED = (1 << 0),	/* a line whose value does not read is no
				   record */
	JC_LAST = (1 << 1),	/* a header may end with it: 9 columns (GNU
				   parallel's), 10 (older gpupool-runs'), all */
	JC_TIME = (1 << 2),	/* a time: --from-joblog needs it read */
};

struct jl_col {
	const char	*name;
	enum jl_type	 type;
	size_t		 off;		/* in struct attempt */
	int		 flags;		/* enum jl_col_flags */
};

#define AT(m)	offsetof(struct attempt, m)
static const struct jl_col cols[] = {
	{ "Seq", JT_SEQ, AT(seq), JC_NEED },
	{ "Host", JT_HOST, AT(host), 0 },
	{ "Starttime", JT_SECS, AT(start), JC_TIME },
	{ "JobRuntime", JT_SECS, AT(runtime), JC_TIME },
	{ "Send", JT_ZERO, 0, 0 },
	{ "Receive", JT_ZERO, 0, 0 },
	{ "Exitval", JT_INT, AT(exitval), JC_NEED },
	{ "Signal", JT_INT, AT(signal), JC_NEED },
	{ "Command", JT_CMD, AT(cmd), JC_LAST },
	{ "GPU", JT_TEXT, AT(gpu), JC_LAST },
	{ "GPUMem", JT_MIB, AT(gpu_mem), 0 },
	{ "GPUUtil", JT_PCT, AT(gpu_util), JC_LAST },
	{ "PeakRSS", JT_COUNT, AT(rp.peak_rss_kb), JC_LAST },
};
#undef AT
#define NCOL		((int)(sizeof(cols) / sizeof(cols[0])))
#define PARALLEL_NCOL	9	/* GNU parallel's: up to the Command */

/* s at p with a TAB or newline, and a backslash that could be read as
 * the start of an escape, escaped (raw: as GNU parallel writes a
 * Command, the rest of its line: as it is, but a newline written \n).
 * Returns the end. */
static char *
put_text(char *p, const char *s, int raw)
{
	const char	*e;

	for (; *s; s++)
		if ((e = raw ? (*s == '\n' ? "\\n" : NULL) :
		    esc(s[0], s[1])) != NULL) {
			memcpy(p, e, 2);
			p += 2;
		} else
			*p++ = *s;
	return p;
}

/* v at p, or '-' when it is negative (unknown); returns the end. */
static char *
put_num(char *p, int64_t v)
{
	if (v < 0) {
		*p++ = '-';
		return p;
	}
	return p + sprintf(p, "%lld", (long long)v);
}

/* Column c of a at p (raw: a line of GNU parallel's); returns the end. */
static char *
col_put(char *p, const struct jl_col *c, const struct attempt *a, int raw)
{
	const void	*m = (const char *)a + c->off;
	uint64_t	 b;

	switch (c->type) {
	case JT_SEQ:
		return p + sprintf(p, "%lu", *(const unsigned long *)m);
	case JT_HOST:
		return p + sprintf(p, "%s", *(const char *const *)m);
	case JT_SECS:
		return p + sprintf(p, "%.3f", *(const double *)m);
	case JT_ZERO:
		*p++ = '0';
		return p;
	case JT_INT:
		return p + sprintf(p, "%d", *(const int *)m);
	case JT_CMD:
	case JT_TEXT:
		return put_text(p, *(const char *const *)m, raw);
	case JT_MIB:
		b = *(const uint64_t *)m;
		return put_num(p, b > 0 ? (int64_t)((b + (1u << 20) - 1) >>
		    20) : -1);
	case JT_PCT:
		return put_num(p, *(const int *)m);
	case JT_COUNT:
		return put_num(p, *(const int64_t *)m > 0 ? *(const int64_t *)m :
		    -1);
	}
	return p;
}

/* A decimal integer (a sign allowed), the whole of s. */
static int
get_long(const char *s, long *out)
{
	char	*end;

	if (*s != '-' && (*s < '0' || *s > '9'))
		return -1;
	errno = 0;
	*out = strtol(s, &end, 10);
	return errno || *end != '\0' ? -1 : 0;
}

/* Field s of column c into a: 0, or -1 when it is not such a value. A
 * count or a size that does not read (a value a crash cut short) is
 * unknown. The texts point into s, turned back into what they were. */
static int
col_get(const struct jl_col *c, char *s, struct attempt *a, int raw)
{
	void	*m = (char *)a + c->off;
	char	*end;
	long	 v;

	switch (c->type) {
	case JT_SEQ:
		if (get_long(s, &v) < 0 || v <= 0)
			return -1;
		*(unsigned long *)m = (unsigned long)v;
		return 0;
	case JT_SECS:
		errno = 0;
		*(double *)m = strtod(s, &end);
		return errno || end == s || *end != '\0' ? -1 : 0;
	case JT_INT:
		if (get_long(s, &v) < 0)
			return -1;
		*(int *)m = (int)v;
		return 0;
	case JT_CMD:	/* its hash as written, for joblog_changed() */
		a->cmd_hash = hash(s, raw);
		/* FALLTHROUGH */
	case JT_TEXT:
		if (!raw)
			joblog_unesc(s);
		/* FALLTHROUGH */
	case JT_HOST:
		*(char **)m = s;
		return 0;
	case JT_ZERO:
		return 0;
	default:
		v = get_long(s, &v) == 0 && v >= 0 ? v : -1;
		if (c->type == JT_MIB)
			*(uint64_t *)m = v > 0 ? (uint64_t)v << 20 : 0;
		else if (c->type == JT_PCT)
			*(int *)m = (int)v;
		else
			*(int64_t *)m = v;
		return 0;
	}
}

/* The header a joblog begins with, its newline included, and its
 * length. */
static const char *
header(size_t *len)
{
	static char	 h[256];
	static size_t	 hl;
	int		 i;

	if (hl == 0)
		for (i = 0; i < NCOL; i++)
			hl += (size_t)snprintf(h + hl, sizeof(h) - hl, "%s%s",
			    cols[i].name, i + 1 < NCOL ? "\t" : "\n");
	*len = hl;
	return h;
}

int
joblog_header(const char *l, size_t n)
{
	size_t	 off = 0, k;
	int	 i;

	for (i = 0; i < NCOL; i++) {
		k = strlen(cols[i].name);
		if (n - off < k || memcmp(l + off, cols[i].name, k) != 0)
			return 0;
		off += k;
		if (off == n)
			return cols[i].flags & JC_LAST ? i + 1 : 0;
		if (l[off++] != '\t')
			return 0;
	}
	return 0;
}

/* Whether l[0..n) is the start of the whole header (one a crash cut
 * short). */
static int
header_torn(const char *l, size_t n)
{
	size_t		 hl;
	const char	*h = header(&hl);

	return n < hl - 1 && memcmp(l, h, n) == 0;
}

int
joblog_parse(char *l, size_t n, int ncol, int strict, struct attempt *a)
{
	char	*f[NCOL], *p, *t;
	int	 k = 0, i, raw = ncol == PARALLEL_NCOL;
	int	 max = raw ? PARALLEL_NCOL : NCOL;

	memset(a, 0, sizeof(*a));
	a->gpu = a->host = a->cmd = "";
	a->gpu_util = -1;
	/* A NUL is no joblog text: blocks of them are what a crash can
	 * leave at the end of a file. */
	if (n == 0 || memchr(l, '\0', n) != NULL)
		return JL_TORN;
	/* The fields, the last column's taking the rest of the line (GNU
	 * parallel's Command holds TABs). */
	for (p = l; k < max; p = t + 1) {
		f[k++] = p;
		if (k == max || (t = strchr(p, '\t')) == NULL)
			break;
		*t = '\0';
	}
	/* Cut short by a crash (a record has every column up to the
	 * Command, and ours the GPU): its Seq, a number, came first. */
	if (k < (raw ? PARALLEL_NCOL : PARALLEL_NCOL + 1))
		return strspn(l, "0123456789") == strlen(l) ? JL_TORN :
		    JL_BAD;
	for (i = 0; i < k; i++)
		if (col_get(&cols[i], f[i], a, raw) < 0 &&
		    (cols[i].flags & JC_NEED || (strict &&
		    cols[i].flags & JC_TIME)))
			return JL_BAD;
	return JL_REC;
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

/* Line no (l[0..n), NUL-terminated) of a joblog: the header first. 0, or
 * -EINVAL or -ENOMEM with err saying why. */
static int
load_line(struct joblog *j, const char *path, unsigned long no, char *l,
    size_t n, int last, char *err, size_t errlen)
{
	struct attempt	 a;
	char		*cmd = NULL;
	int		 rc;

	/* The header; or, past line 1, another's, passed over: line 1's
	 * format holds for the file, as joblog_open() appends in it (GNU
	 * parallel's nine columns read raw, fuzz_joblog found them differ). */
	if ((rc = joblog_header(l, n)) != 0) {
		j->fmt = no == 1 ? rc : j->fmt;
		return 0;
	}
	if (no == 1) {
		/* The header torn by a crash, and nothing after it. */
		if (last && header_torn(l, n))
			return 0;
		snprintf(err, errlen, "joblog '%s': line 1 is not a joblog "
		    "header (GNU parallel's or gpupool-run's): not resuming "
		    "from it", path);
		return -EINVAL;
	}
	if ((rc = joblog_parse(l, n, j->fmt, 0, &a)) == JL_BAD) {
		snprintf(err, errlen, "joblog '%s': line %lu is not a joblog "
		    "record: not resuming from it", path, no);
		return -EINVAL;
	}
	/* A line a crash cut short is passed over: its task runs again. */
	if (rc == JL_TORN || a.seq > SEQ_LIMIT)
		return 0;
	if ((j->keep_cmd && (cmd = strdup(a.cmd)) == NULL) ||
	    mark(j, a.seq, a.exitval == 0 && a.signal == 0, a.cmd_hash,
	    cmd) < 0) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	return 0;
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

int
joblog_lock(struct joblog *j, const char *path, int wait, char *err,
    size_t errlen)
{
	int	 fd;

	j->path = path;
	if ((fd = files_open_locked(path, wait, "joblog", &j->created, err,
	    errlen)) < 0)
		return fd;
	j->fd = fd;
	return 0;
}

int
joblog_open(struct joblog *j, const char *path, int keep, char *err,
    size_t errlen)
{
	struct stat	 st;
	size_t		 hl;
	const char	*h = header(&hl);
	char		 c, head[256], *nl;
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
	    hl + 1, 0)) > 0) {
		if ((nl = memchr(head, '\n', (size_t)n)) != NULL)
			j->fmt = joblog_header(head, (size_t)(nl - head));
		else if (n == st.st_size && memcmp(head, h, (size_t)n) == 0 &&
		    ftruncate(j->fd, 0) == 0)
			st.st_size = 0;
	}
	if (S_ISREG(st.st_mode) && st.st_size == 0)
		rc = gp_write_full(j->fd, h, hl);
	else if (S_ISREG(st.st_mode) && pread(j->fd, &c, 1, st.st_size - 1) ==
	    1 && c != '\n')
		rc = gp_write_full(j->fd, "\n", 1);	/* end a torn line */
	else if (!S_ISREG(st.st_mode))	/* -, a FIFO, a device: and a
					   write that fails, fails now */
		rc = gp_write_full(j->fd, h, hl);
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

int
joblog_append(struct joblog *j, const struct attempt *a)
{
	/* GNU parallel's joblog goes on in its nine columns. */
	int	 ncol = j->fmt == PARALLEL_NCOL ? PARALLEL_NCOL : NCOL, i;
	/* Escaping at most doubles a text; a number takes at most 320
	 * bytes (a double's %.3f); the TABs and the newline. */
	size_t	 need = 2 * (strlen(a->cmd) + strlen(a->gpu)) +
		    strlen(a->host) + (size_t)NCOL * 321 + 1;
	char	*l, *p;
	int	 rc;

	if (j->fd < 0)
		return 0;
	if (need > j->lcap) {
		if ((l = realloc(j->line, need)) == NULL)
			return -ENOMEM;
		j->line = l;
		j->lcap = need;
	}
	for (p = j->line, i = 0; i < ncol; i++) {
		if (i > 0)
			*p++ = '\t';
		p = col_put(p, &cols[i], a, ncol == PARALLEL_NCOL);
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
