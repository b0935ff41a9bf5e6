/*
 * joblog.c: GNU parallel's joblog (Seq Host Starttime JobRuntime Send
 * Receive Exitval Signal Command, TAB separated) with the GPU as a tenth,
 * trailing column. Reads an old one for --resume and appends one line per
 * attempt, each made durable before the next task's outcome is handled,
 * so a crash loses at most the line being written. Never prints.
 *
 * A line counts when it has at least the ten fields we write and its
 * Seq, Exitval and Signal are integers. A line torn by a crash either
 * lacks fields (ignored: its task runs again) or was cut inside the GPU
 * column, after the outcome was complete (counted).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

#define SEQ_LIMIT	100000000UL	/* larger Seqs are ignored */
#define LOG_LINE_MAX	(LINE_MAX_BYTES + 4096)

static const char header[] = "Seq\tHost\tStarttime\tJobRuntime\tSend\t"
    "Receive\tExitval\tSignal\tCommand\tGPU\n";

void
joblog_init(struct joblog *j)
{
	memset(j, 0, sizeof(*j));
	j->fd = -1;
}

void
joblog_release(struct joblog *j)
{
	if (j->fd > STDERR_FILENO)
		close(j->fd);
	free(j->seen);
	free(j->hash);
	free(j->line);
	joblog_init(j);
}

/* FNV-1a; 0 is kept for "unknown". */
uint32_t
joblog_hash(const char *s)
{
	uint32_t	 h = 2166136261u;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 16777619u;
	}
	return h ? h : 1;
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

static int
mark(struct joblog *j, unsigned long seq, int ok, uint32_t h)
{
	size_t		 n;
	uint8_t		*s;
	uint32_t	*hh;

	if (seq >= j->nseen) {
		for (n = j->nseen ? j->nseen : 1024; n <= seq; n *= 2)
			;
		if ((s = realloc(j->seen, n)) == NULL)
			return -ENOMEM;
		j->seen = s;
		if ((hh = realloc(j->hash, n * sizeof(*hh))) == NULL)
			return -ENOMEM;
		j->hash = hh;
		memset(j->seen + j->nseen, 0, n - j->nseen);
		memset(j->hash + j->nseen, 0, (n - j->nseen) * sizeof(*hh));
		j->nseen = n;
	}
	j->seen[seq] = JL_SEEN | (ok ? JL_OK : 0);
	j->hash[seq] = h;
	return 0;
}

/* One line (no '\n', NUL-terminated in place). */
static int
parse(struct joblog *j, char *l, size_t n)
{
	char		*tab[10], *p, *last;
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
	last = strrchr(tab[7] + 1, '\t');	/* before the GPU */
	if (num(l, tab[0], &seq) < 0 || seq <= 0 ||
	    (unsigned long)seq > SEQ_LIMIT ||
	    num(tab[5] + 1, tab[6], &ev) < 0 ||
	    num(tab[6] + 1, tab[7], &sig) < 0)
		return 0;
	*last = '\0';
	h = joblog_hash(tab[7] + 1);
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
	free(buf);
	close(fd);
	return rc;
}

static int
write_all(int fd, const char *p, size_t n)
{
	ssize_t	 w;

	while (n > 0) {
		if ((w = write(fd, p, n)) == -1) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
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
	if (strcmp(path, "-") == 0)
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
		rc = write_all(j->fd, header, sizeof(header) - 1);
	else if (S_ISREG(st.st_mode) && pread(j->fd, &c, 1, st.st_size - 1) ==
	    1 && c != '\n')
		rc = write_all(j->fd, "\n", 1);	/* end a torn line */
	else if (!S_ISREG(st.st_mode))	/* -, a FIFO, a device: and a
					   write that fails, fails now */
		rc = write_all(j->fd, header, sizeof(header) - 1);
	if (rc == 0)
		return 0;
fail:
	snprintf(err, errlen, "cannot write joblog '%s': %s", path,
	    strerror(-rc));
	close(j->fd);
	j->fd = -1;
	return rc;
}

int
joblog_done(const struct joblog *j, unsigned long seq, int failed_too)
{
	if (seq >= j->nseen || !(j->seen[seq] & JL_SEEN))
		return 0;
	return failed_too ? (j->seen[seq] & JL_OK) != 0 : 1;
}

int
joblog_changed(const struct joblog *j, unsigned long seq, const char *cmd)
{
	if (seq >= j->nseen || j->hash[seq] == 0)
		return 0;
	return j->hash[seq] != joblog_hash(cmd);
}

int
joblog_append(struct joblog *j, const struct jl_rec *r)
{
	size_t	 need = strlen(r->cmd) + strlen(r->gpu) + strlen(r->host) + 160;
	char	*l;
	int	 n, rc;

	if (j->fd < 0)
		return 0;
	if (need > j->lcap) {
		if ((l = realloc(j->line, need)) == NULL)
			return -ENOMEM;
		j->line = l;
		j->lcap = need;
	}
	n = snprintf(j->line, j->lcap,
	    "%lu\t%s\t%.3f\t%.3f\t0\t0\t%d\t%d\t%s\t%s\n", r->seq, r->host,
	    r->start, r->runtime, r->exitval, r->signal, r->cmd, r->gpu);
	if (n < 0 || (size_t)n >= j->lcap)
		return -EOVERFLOW;
	/* One write per line: with O_APPEND it lands whole or torn, never
	 * mixed with another line. */
	if ((rc = write_all(j->fd, j->line, (size_t)n)) < 0)
		return rc;
	if (fdatasync(j->fd) == -1 && errno != EINVAL && errno != EROFS)
		return -errno;
	return 0;
}
