/*
 * timeline.c: --timeline FILE.svg, the attempts a picture of the run is
 * drawn from (timeline_svg.c draws it), and the file it goes to. A run
 * keeps each attempt as feed.c records it, with the slot it ran on, which
 * the joblog has no column for; --from-joblog reads them back from a
 * joblog alone, rows then by host and GPU. The file is a temporary beside
 * FILE, created before anything runs (so that a path that cannot be
 * written fails first, not after hours of work) and renamed over FILE at
 * the end, whatever ended the run: FILE is never half written. The
 * temporary has no name until it is drawn (O_TMPFILE, where the file
 * system has it), so that a run killed outright leaves nothing behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "master/master.h"

/* The times a joblog's row may have: a start from the epoch to the year
 * 5138, a runtime of up to some 31 years (negative ones, a clock that
 * stepped, are drawn as 0). Past them (1e300, inf) the axis would need
 * more ticks than a double can step through. */
#define TL_START_MAX	1e11
#define TL_RUNTIME_MAX	1e9
#define TL_WARN_MAX	5	/* rows named, then counted */

int
timeline_open(struct timeline **tlp, const char *path, char *err,
    size_t errlen)
{
	struct timeline	*tl;
	struct stat	 st;
	const char	*slash = strrchr(path, '/');
	int		 dlen = slash != NULL ? (int)(slash - path) + 1 : 0;
	char		 dir[PATH_MAX];
	int		 rc;

	*tlp = NULL;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "cannot write timeline '%s': %s", path,
		    strerror(EISDIR));
		return -EISDIR;
	}
	/* The picture is renamed over the path: over a symbolic link it
	 * would replace the link (--timeline /dev/stdout, as root, the
	 * system's), over a device or a FIFO the node itself. */
	if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "timeline '%s' is not a regular file",
		    path);
		return -EINVAL;
	}
	if ((rc = files_note(FILE_REPLACED, "timeline", path, -1, err,
	    errlen)) < 0)
		return rc;
	if ((tl = calloc(1, sizeof(*tl))) == NULL ||
	    asprintf(&tl->tmp, "%.*s.%s.XXXXXX", dlen, path,
	    path + dlen) == -1) {
		free(tl);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	tl->path = path;
	tl->last = -1;
	/* An old kernel takes O_TMPFILE for O_DIRECTORY (EISDIR), a file
	 * system without it says EOPNOTSUPP: a named temporary then. */
	snprintf(dir, sizeof(dir), "%.*s", dlen > 1 ? dlen - 1 : 1,
	    dlen ? path : ".");
	tl->fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
	if (tl->fd == -1 && (errno == EOPNOTSUPP || errno == EISDIR ||
	    errno == EINVAL) && (tl->fd = mkostemp(tl->tmp, O_CLOEXEC)) >= 0)
		tl->named = 1;
	if (tl->fd == -1) {
		rc = -errno;
		snprintf(err, errlen, "cannot write timeline '%s': %s", path,
		    strerror(-rc));
		free(tl->tmp);
		free(tl);
		return rc;
	}
	*tlp = tl;
	return 0;
}

void
timeline_free(struct timeline *tl)
{
	size_t	 i;
	int	 k;

	if (tl == NULL)
		return;
	if (tl->fd >= 0)
		close(tl->fd);
	if (tl->named)
		(void)unlink(tl->tmp);
	free(tl->tmp);
	for (i = 0; i < tl->nbar; i++) {
		free(tl->bar[i].cmd);
		free(tl->bar[i].gpu);
	}
	free(tl->bar);
	for (k = 0; k < tl->nrow; k++) {
		free(tl->row[k].host);
		free(tl->row[k].gpu);
	}
	free(tl->row);
	free(tl);
}

static int
row_is(const struct tl_row *r, const char *host, int rank, int slot,
    const char *gpu)
{
	return r->rank == rank && r->slot == slot && strcmp(r->gpu, gpu) == 0 &&
	    strcmp(r->host, host) == 0;
}

/* The row of (host, rank, slot, gpu): a run's rows are its slots, a
 * joblog's its hosts' GPUs. Its index, or -1: out of memory. */
static int
row_of(struct timeline *tl, const char *host, int rank, int slot,
    const char *gpu)
{
	struct tl_row	*r;
	int		 k;

	if (tl->last >= 0 && row_is(&tl->row[tl->last], host, rank, slot,
	    gpu))
		return tl->last;
	for (k = 0; k < tl->nrow; k++)
		if (row_is(&tl->row[k], host, rank, slot, gpu))
			return tl->last = k;
	if (tl->nrow == tl->rowcap) {
		k = tl->rowcap ? 2 * tl->rowcap : 16;
		if ((r = reallocarray(tl->row, (size_t)k, sizeof(*r))) == NULL)
			return -1;
		tl->row = r;
		tl->rowcap = k;
	}
	r = &tl->row[tl->nrow];
	memset(r, 0, sizeof(*r));
	r->rank = rank;
	r->slot = slot;
	if ((r->host = strdup(host)) == NULL ||
	    (r->gpu = strdup(gpu)) == NULL) {
		free(r->host);
		return -1;
	}
	return tl->last = tl->nrow++;
}

static enum tl_kind
kind_of(const struct attempt *a)
{
	if (a->flags & R_NOSTART)
		return TL_NOSTART;
	if (a->flags & R_TIMEDOUT)
		return TL_TIMEDOUT;
	if (a->signal != 0)
		return TL_SIGNAL;
	if (a->exitval != 0 || (a->flags & R_NORESULT))
		return TL_FAILED;
	return TL_OK;
}

void
timeline_add(struct timeline *tl, const struct attempt *a, int rank,
    int slot, int gpu)
{
	struct tl_bar	*b;
	char		 g[16];
	size_t		 cap;
	int		 row;

	if (tl->nbar == tl->cap) {
		cap = tl->cap ? 2 * tl->cap : 256;
		if ((b = reallocarray(tl->bar, cap, sizeof(*b))) == NULL)
			goto nomem;
		tl->bar = b;
		tl->cap = cap;
	}
	/* A run's rows by its GPU indexes (GPUPOOL_GPU), short and in the
	 * summary's terms; a joblog has only its GPU column. */
	if (gpu >= 0)
		snprintf(g, sizeof(g), "%d", gpu);
	else
		snprintf(g, sizeof(g), "-");
	if ((row = row_of(tl, a->host, rank, slot, slot < 0 ? a->gpu :
	    g)) < 0)
		goto nomem;
	b = &tl->bar[tl->nbar];
	memset(b, 0, sizeof(*b));
	b->start = a->start;
	b->runtime = a->runtime > 0 ? a->runtime : 0;
	b->seq = a->seq;
	b->exitval = a->exitval;
	b->signal = a->signal;
	b->kind = kind_of(a);
	b->row = row;
	if ((b->cmd = strdup(a->cmd)) == NULL ||
	    (b->gpu = strdup(a->gpu)) == NULL) {
		free(b->cmd);
		goto nomem;
	}
	tl->nbar++;
	return;
nomem:
	tl->nomem++;
}

/* The picture's stream writes through this, which keeps why the first
 * write failed: stdio keeps only that one did (timeline_svg_draw() then says
 * -EIO), and a full disk must say "No space left on device". */
struct sink {
	int	 fd;
	int	 err;		/* errno of the first failed write, or 0 */
};

static ssize_t
sink_write(void *cookie, const char *buf, size_t n)
{
	struct sink	*s = cookie;
	int		 rc;

	if (s->err == 0 && (rc = gp_write_full(s->fd, buf, n)) < 0)
		s->err = -rc;
	return s->err ? 0 : (ssize_t)n;	/* 0: an error, to stdio */
}

/* The drawn temporary, nameless (O_TMPFILE), under a name of its own
 * beside the path (tl->tmp, its XXXXXX made unique), to be renamed over
 * it: linkat() by the descriptor, or where that needs a capability we
 * lack, by /proc/self/fd. 0 or -errno. */
static int
name_it(struct timeline *tl, int fd)
{
	static const char	 abc[] = "abcdefghijklmnopqrstuvwxyz0123456789";
	char			 proc[32], *x = tl->tmp + strlen(tl->tmp) - 6;
	uint64_t		 r = (uint64_t)gp_now_ns() ^ (uint64_t)getpid();
	int			 tries, i, rc;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	for (tries = 0; tries < 100; tries++) {
		for (i = 0; i < 6; i++, r = r * 6364136223846793005ULL + 1)
			x[i] = abc[(r >> 33) % (sizeof(abc) - 1)];
		rc = linkat(fd, "", AT_FDCWD, tl->tmp, AT_EMPTY_PATH);
		if (rc == -1 && errno != EEXIST)
			rc = linkat(AT_FDCWD, proc, AT_FDCWD, tl->tmp,
			    AT_SYMLINK_FOLLOW);
		if (rc == 0) {
			tl->named = 1;
			return 0;
		}
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

/* Draw tl into its temporary and rename it over the path; the
 * temporary is gone either way. 0, or -errno with err saying why. */
static int
commit(struct timeline *tl, char *err, size_t errlen)
{
	cookie_io_functions_t	 io = { NULL, sink_write, NULL, NULL };
	struct sink		 sk = { tl->fd, 0 };
	FILE			*f;
	mode_t			 mask;
	int			 rc;

	tl->fd = -1;
	mask = umask(0);
	umask(mask);
	if (fchmod(sk.fd, 0666 & ~mask) == -1 ||
	    (f = fopencookie(&sk, "w", io)) == NULL) {
		rc = -errno;
		close(sk.fd);
		goto fail;
	}
	rc = timeline_svg_draw(f, tl);
	if (fflush(f) != 0 && rc == 0)
		rc = -EIO;
	(void)fclose(f);
	if (sk.err != 0)
		rc = -sk.err;
	if (rc == 0 && fsync(sk.fd) == -1 && errno != EINVAL)
		rc = -errno;
	if (rc == 0 && !tl->named)
		rc = name_it(tl, sk.fd);
	if (close(sk.fd) == -1 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tl->tmp, tl->path) == -1)
		rc = -errno;
	if (rc == 0) {
		tl->named = 0;	/* it is the picture now */
		return 0;
	}
fail:
	if (tl->named)
		(void)unlink(tl->tmp);
	tl->named = 0;
	snprintf(err, errlen, "cannot write timeline '%s': %s", tl->path,
	    strerror(-rc));
	return rc;
}

int
timeline_end(struct timeline *tl, int rc)
{
	char	 err[512];

	if (tl == NULL)
		return rc;
	if (tl->nbar == 0 && rc == EXIT_FATAL) {
		timeline_free(tl);
		return rc;
	}
	if (tl->nomem)
		out_warn("out of memory: %d attempt%s left out of timeline "
		    "'%s'", tl->nomem, tl->nomem == 1 ? "" : "s", tl->path);
	if (commit(tl, err, sizeof(err)) < 0) {
		out_err("%s", err);
		if (rc == 0)
			rc = EXIT_FATAL;
	}
	timeline_free(tl);
	return rc;
}

/* Field i of a line joblog_parse() cut: its fields end in NULs. */
static const char *
field(const char *l, int i)
{
	while (i-- > 0)
		l += strlen(l) + 1;
	return l;
}

/* A joblog line as --from-joblog draws it: a record (joblog_parse()'s,
 * its times read) whose times a run has: 0; -1: not a record (a torn
 * one too); -2: a record whose times no run has, *why saying which
 * ("Starttime '1e300'"). */
static int
drawn(char *l, size_t n, int ncol, struct attempt *a, char *why,
    size_t whylen)
{
	if (joblog_parse(l, n, ncol, 1, a) != JL_REC)
		return -1;
	if (!(a->start >= 0 && a->start < TL_START_MAX))
		snprintf(why, whylen, "Starttime '%.40s'", field(l, 2));
	else if (!(fabs(a->runtime) <= TL_RUNTIME_MAX))
		snprintf(why, whylen, "JobRuntime '%.40s'", field(l, 3));
	else
		return 0;
	return -2;
}

int
timeline_from_joblog(const struct opts *o)
{
	struct timeline	*tl;
	struct attempt	 a;
	char		 err[512], why[64], *l = NULL;
	size_t		 lcap = 0;
	ssize_t		 n;
	unsigned long	 bad = 0, absurd = 0, no = 0;
	struct stat	 st;
	FILE		*in;
	int		 rc, ncol = 0;

	if ((in = fopen(o->from_joblog, "re")) == NULL) {
		out_err("cannot open joblog '%s': %s", o->from_joblog,
		    strerror(errno));
		return EXIT_FATAL;
	}
	/* As for --resume: a device such as /dev/zero would be read for
	 * ever (one line, as long as memory lasts), a FIFO may never end. */
	if (fstat(fileno(in), &st) == -1 || !S_ISREG(st.st_mode)) {
		out_err("joblog '%s' is not a regular file", o->from_joblog);
		fclose(in);
		return EXIT_FATAL;
	}
	if (files_note(FILE_IN, "joblog", o->from_joblog, fileno(in), err,
	    sizeof(err)) < 0 || timeline_open(&tl, o->timeline, err,
	    sizeof(err)) < 0) {
		out_err("%s", err);
		fclose(in);
		return EXIT_FATAL;
	}
	tl->source = o->from_joblog;
	while ((n = getline(&l, &lcap, in)) > 0) {
		no++;
		if (l[n - 1] == '\n')
			l[--n] = '\0';
		if ((rc = joblog_header(l, (size_t)n)) != 0) {
			ncol = rc;	/* GNU parallel's, or ours */
			continue;
		}
		if (n == 0 || strncmp(l, "Seq\t", 4) == 0)
			continue;	/* another header */
		if ((rc = drawn(l, (size_t)n, ncol, &a, why, sizeof(why))) ==
		    -2 &&
		    ++absurd <= TL_WARN_MAX)
			out_warn("%s:%lu: %s is not a time a run has: left out",
			    o->from_joblog, no, why);
		if (rc < 0) {
			bad += rc == -1;
			continue;
		}
		/* The joblog cannot tell a timeout from another kill; a
		 * kill at or past --timeout was one. */
		a.flags = o->timeout_ms > 0 && a.signal != 0 &&
		    a.runtime * 1000 + 1 >= (double)o->timeout_ms ?
		    R_TIMEDOUT : 0;
		timeline_add(tl, &a, 0, -1, -1);
	}
	free(l);
	if (ferror(in)) {
		out_err("cannot read joblog '%s': %s", o->from_joblog,
		    strerror(errno));
		fclose(in);
		timeline_free(tl);
		return EXIT_FATAL;
	}
	fclose(in);
	if (absurd > TL_WARN_MAX)
		out_warn("%lu more line%s of joblog '%s' with such times: left "
		    "out", absurd - TL_WARN_MAX, absurd - TL_WARN_MAX == 1 ?
		    "" : "s", o->from_joblog);
	if (bad > 0)
		out_warn("%lu line%s of joblog '%s' %s not a record: left out",
		    bad, bad == 1 ? "" : "s", o->from_joblog,
		    bad == 1 ? "is" : "are");
	return timeline_end(tl, 0);
}
