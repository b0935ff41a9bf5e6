/*
 * gridsrc.c: the sources of a grid's arguments, as GNU parallel reads
 * them: the words after ::: (or --arg-sep's separator), the records of
 * each :::: FILE (--arg-file-sep's) and -a FILE, and standard input when
 * COMMAND has no source. Every source is a stream of records cut at the
 * delimiter ("\n", -d's, -0's NUL), a ::: word too (parallel writes each
 * word and a delimiter to a file it reads the same way: a word with a
 * newline is two arguments); a CR before a "\n" is dropped; -r skips
 * blank records, -E's string ends a source; --colsep splits a record
 * into columns. A source that is a pipe (or FIFO, socket, terminal) and
 * the grid's only one is read as the run goes (tasks.c calls
 * gridsrc_feed()), so that `tail -f queue | gpupool-run cmd` runs each
 * line as it comes; the others are read whole before anything runs.
 * Never prints.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "parallel/parallel.h"

/* Which separator word s is: 0 none, 1 ":::", 2 "::::" (or --arg-sep's
 * and --arg-file-sep's); *link for the '+' forms. */
int
gridsrc_sep(const struct grid_conf *gc, const char *s, int *link)
{
	const char	*sep[2] = { gc->arg_sep, gc->file_sep };
	size_t		 n;
	int		 i;

	*link = 0;
	for (i = 1; i >= 0; i--) {
		n = strlen(sep[i]);
		if (strncmp(s, sep[i], n) != 0)
			continue;
		if (s[n] == '\0')
			return i + 1;
		if (s[n] == '+' && s[n + 1] == '\0') {
			*link = 1;
			return i + 1;
		}
	}
	return 0;
}

int
gridsrc_word(const struct grid_conf *gc, const char *s)
{
	int	 link;

	return gridsrc_sep(gc, s, &link) != 0;
}

/* Append one value to s's values; 0 or -ENOMEM. */
static int
add_val(struct grid_src *s, const char *v, size_t n)
{
	char	**a, *c;

	if (s->nval % 64 == 0) {
		if ((a = realloc(s->val, (s->nval + 64) * sizeof(*a))) == NULL)
			return -ENOMEM;
		s->val = a;
	}
	if ((c = strndup(v, n)) == NULL)
		return -ENOMEM;
	s->val[s->nval++] = c;
	return 0;
}

/* One CSV field of line at *p into s: "a,b" is one field, "" a quote.
 * 0, -EINVAL (why says why) or -ENOMEM. */
static int
csv_field(struct grid_src *s, const char **p, const char **why)
{
	const char	*q = *p;
	char		*f;
	size_t		 n = 0;
	int		 rc;

	if (*q != '"') {
		n = strcspn(q, ",");
		*p = q + n;
		return add_val(s, q, n);
	}
	if ((f = malloc(strlen(q) + 1)) == NULL)
		return -ENOMEM;
	for (q++; *q != '\0' && (*q != '"' || q[1] == '"'); q++)
		f[n++] = *q == '"' ? *q++ : *q;
	if (*q != '"' || (q[1] != ',' && q[1] != '\0')) {
		free(f);
		*why = *q != '"' ? "unterminated quoted field" :
		    "text after a closing quote";
		return -EINVAL;
	}
	*p = q + 1;
	rc = add_val(s, f, n);
	free(f);
	return rc;
}

/* One value (a record, NUL-terminated) into s, split at --colsep: all
 * values of a source have as many columns as its first. 0, -EINVAL
 * (why) or -ENOMEM. */
static int
take(struct grid_src *s, const char *v, const char *sep, const char **why)
{
	size_t	 before = s->nval, seplen = sep ? strlen(sep) : 0;
	int	 rc = 0, ncol;
	const char *e;

	if (sep == NULL)
		rc = add_val(s, v, strlen(v));
	else if (strcmp(sep, ",") == 0) {
		do
			rc = csv_field(s, &v, why);
		while (rc == 0 && *v++ == ',');
	} else {
		for (; rc == 0 && (e = strstr(v, sep)) != NULL; v = e + seplen)
			rc = add_val(s, v, (size_t)(e - v));
		if (rc == 0)
			rc = add_val(s, v, strlen(v));
	}
	if (rc < 0)
		return rc;
	ncol = (int)(s->nval - before);
	if (s->ncol == 0)
		s->ncol = ncol;
	else if (ncol != s->ncol) {
		*why = "not as many columns as the first line";
		return -EINVAL;
	}
	return 0;
}

/* Whether p[0..n) is blank (-r skips it: parallel's "only whitespace"). */
static int
blank(const char *p, size_t n)
{
	return strspn(p, " \t\r\n\v\f") >= n;
}

/*
 * One record p[0..n) of source s: its CR dropped (before a "\n"
 * delimiter), skipped when blank under -r, the source's end when it is
 * -E's string. 0, 1 (the source ends here), -EINVAL (*why) or -ENOMEM.
 */
static int
src_record(const struct grid *g, struct grid_src *s, const char *p, size_t n,
    const char **why)
{
	const struct grid_conf	*gc = g->gc;
	char			*v;
	int			 rc;

	if (s->ended)
		return 1;
	if (gc->dlen == 1 && gc->delim[0] == '\n' && n > 0 && p[n - 1] == '\r')
		n--;
	if (memchr(p, '\0', n) != NULL) {
		*why = "NUL byte in an argument";
		return -EINVAL;
	}
	if (gc->eof_str != NULL && strlen(gc->eof_str) == n &&
	    memcmp(p, gc->eof_str, n) == 0) {
		s->ended = 1;
		return 1;
	}
	if (gc->no_empty && blank(p, n))
		return 0;
	if ((v = strndup(p, n)) == NULL)
		return -ENOMEM;
	rc = take(s, v, gc->colsep, why);
	free(v);
	return rc < 0 ? rc : 0;
}

/* A ::: word's records: the word and a delimiter after it, read as a
 * file would be ("a\n" is "a" and an empty argument, as parallel reads
 * it). 0, -EINVAL (*why) or -ENOMEM. */
static int
word_records(const struct grid *g, struct grid_src *s, const char *w,
    const char **why)
{
	const char	*d = g->gc->delim, *e;
	size_t		 dl = g->gc->dlen;
	int		 rc;

	for (;;) {
		/* memmem: -0's delimiter is a NUL, which no word holds. */
		e = memmem(w, strlen(w), d, dl);
		rc = src_record(g, s, w, e != NULL ? (size_t)(e - w) :
		    strlen(w), why);
		if (rc < 0 || e == NULL)
			return rc < 0 ? rc : 0;
		w = e + dl;
	}
}

/* What rdr_next() said, as err: -E2BIG, or the record's own problem. */
static int
rec_fail(const struct grid *g, const char *path, unsigned long no, int rc,
    const char *why, char *err, size_t errlen)
{
	int	 lines = g->gc->dlen == 1 && g->gc->delim[0] == '\n';

	if (rc == -E2BIG || rc == -EINVAL)
		snprintf(err, errlen, "%s:%lu: %s", path, no, rc != -E2BIG ?
		    why : lines ? "line longer than 1 MiB" :
		    "argument longer than 1 MiB");
	else if (rc == -ENOMEM)
		snprintf(err, errlen, "out of memory");
	else
		snprintf(err, errlen, "cannot read '%s': %s", path,
		    strerror(-rc));
	return rc == -E2BIG ? -EINVAL : rc;
}

int
gridsrc_feed(struct grid *g, struct rdr *rd, char *err, size_t errlen)
{
	struct grid_src	*s = &g->src[0];
	const char	*p, *why = NULL;
	size_t		 n;
	int		 rc, got = 0;

	for (;;) {
		rc = rdr_next(rd, g->gc->delim, g->gc->dlen, LINE_MAX_BYTES,
		    &p, &n);
		if (rc == 0 && (rc = rdr_fill(rd)) == 1)
			continue;
		if (rc == 0)
			return got;	/* no whole record now */
		if (rc == -1) {
			g->ended = 1;
			return 1;
		}
		if (rc > 0) {
			g->nread++;
			if ((rc = src_record(g, s, p, n, &why)) == 0) {
				got = 1;
				continue;
			}
			if (rc == 1) {	/* -E: nothing more is read */
				g->ended = 1;
				return 1;
			}
		}
		return rec_fail(g, s->what, g->nread + (rc == -E2BIG), rc, why,
		    err, errlen);
	}
}

/* The records of fd into s, to its end (a pipe waited for). 0 or -errno
 * with err saying why (file:N for a bad record). */
static int
read_fd(struct grid *g, struct grid_src *s, int fd, const char *path,
    char *err, size_t errlen)
{
	struct pollfd	 pfd = { fd, POLLIN, 0 };
	struct rdr	 rd;
	const char	*p, *why = NULL;
	unsigned long	 no = 0;
	size_t		 n;
	int		 rc;

	if ((rc = rdr_open(&rd, fd)) == 0)
		for (;;) {
			rc = rdr_next(&rd, g->gc->delim, g->gc->dlen,
			    LINE_MAX_BYTES, &p, &n);
			if (rc == -1 || rc == -E2BIG) {
				rc = rc == -1 ? 0 : rc;
				no++;
				break;
			}
			if (rc == 0) {
				/* Nothing runs yet: wait for a pipe's writer
				 * (an inherited O_NONBLOCK must not spin). */
				if ((rc = rdr_fill(&rd)) == 0)
					(void)poll(&pfd, 1, -1);
				if (rc < 0)
					break;
				continue;
			}
			no++;
			/* 1: -E's string ended the source. */
			if ((rc = src_record(g, s, p, n, &why)) != 0) {
				rc = rc > 0 ? 0 : rc;
				break;
			}
		}
	rd.fd = -1;	/* the caller's */
	rdr_close(&rd);
	return rc < 0 ? rec_fail(g, path, no, rc, why, err, errlen) : 0;
}

/* A new source at the end of g's (linked: to the one before). */
static struct grid_src *
src_new(struct grid *g, const char *what, int linked)
{
	struct grid_src	*a;

	if ((a = realloc(g->src, (size_t)(g->nsrc + 1) * sizeof(*a))) == NULL)
		return NULL;
	g->src = a;
	a += g->nsrc++;
	memset(a, 0, sizeof(*a));
	a->what = what;
	a->linked = linked && g->nsrc > 1;
	return a;
}

/*
 * A file's source: path ("-": standard input), named what in messages
 * (":::: file", "-a file"). The grid's only source, when it is not a
 * regular file, stays open for gridsrc_feed() (g->sfd); any other is read
 * whole. An empty one is an error, unless -r or -E (which may empty a
 * source on purpose) or standard input (`find | gpupool-run cmd` that
 * found nothing: as parallel, no task). 0 or -errno with err.
 */
static int
src_file(struct grid *g, const char *path, const char *what, int linked,
    int only, char *err, size_t errlen)
{
	struct grid_src	*s;
	struct stat	 st;
	int		 fd, rc;

	if ((s = src_new(g, path, linked || g->gc->link)) == NULL)
		return -ENOMEM;
	fd = strcmp(path, "-") == 0 ? STDIN_FILENO : open(path, O_RDONLY |
	    O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd == -1) {
		rc = -errno;
		snprintf(err, errlen, "cannot open '%s': %s", path,
		    strerror(errno));
		return rc;
	}
	/* A FIFO is opened without waiting for its writer; reads wait. */
	if (fd != STDIN_FILENO)
		(void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	rc = fstat(fd, &st) == -1 ? -errno : S_ISDIR(st.st_mode) ? -EISDIR : 0;
	if (rc < 0)
		snprintf(err, errlen, "cannot read '%s': %s", path,
		    strerror(-rc));
	else
		rc = files_note(FILE_IN, what, fd == STDIN_FILENO ? NULL :
		    path, fd, err, errlen);
	/* A pipe, FIFO, socket or terminal may go on for ever (tail -f):
	 * read as it comes. A device such as /dev/zero is read now. */
	if (rc == 0 && only && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) ||
	    isatty(fd))) {
		g->sfd = fd;
		g->stream = 1;
		return 0;
	}
	if (rc == 0)
		rc = read_fd(g, s, fd, path, err, errlen);
	if (fd != STDIN_FILENO)
		close(fd);
	if (rc == 0 && s->nval == 0 && !g->gc->no_empty &&
	    g->gc->eof_str == NULL && fd != STDIN_FILENO) {
		snprintf(err, errlen, "'%s %s': no arguments in the file",
		    what[0] == '-' ? "-a" : "::::", path);
		return -EINVAL;
	}
	return rc;
}

/* How many sources argv[i..argc) and the -a files and standard input
 * make: a lone source that is not a regular file is streamed. */
static int
count_sources(const struct grid *g, char **argv, int argc, int i)
{
	int	 n = g->gc->nargfile + (g->gc->stdin_args != 0), k, kind = 0,
		 plus;

	for (; i < argc; i++)
		if ((k = gridsrc_sep(g->gc, argv[i], &plus)) != 0) {
			kind = k;
			n += k == 1;
		} else
			n += kind == 2;
	return n;
}

/* The ::: words and :::: files at argv[i..argc): argv[i] is a separator.
 * 0 or -errno with err saying why. */
static int
src_argv(struct grid *g, char **argv, int argc, int i, int only, char *err,
    size_t errlen)
{
	struct grid_src	*s = NULL;
	const char	*why = NULL;
	int		 kind = 0, link = 0, plus, k, rc, open = -1;

	for (; i < argc; i++) {
		if ((k = gridsrc_sep(g->gc, argv[i], &plus)) != 0) {
			if (open >= 0)
				break;
			open = i;
			kind = k;
			link = plus;
			if (k == 1 && (s = src_new(g, argv[i], link ||
			    g->gc->link)) == NULL)
				return -ENOMEM;
			continue;
		}
		/* ::::+ links every file after it, up to the next
		 * separator: :::: a ::::+ b c steps a, b and c together. */
		if (kind == 2) {
			if ((rc = src_file(g, argv[i], ":::: file", link, only,
			    err, errlen)) < 0)
				return rc;
		} else if ((rc = word_records(g, s, argv[i], &why)) < 0) {
			if (rc == -EINVAL)
				snprintf(err, errlen, "'%s' argument '%s': %s",
				    s->what, argv[i], why);
			return rc;
		}
		open = -1;
	}
	if (open >= 0) {
		snprintf(err, errlen, "'%s' with no %s after it", argv[open],
		    kind == 1 ? "arguments" : "file");
		return -EINVAL;
	}
	return 0;
}

int
gridsrc_sources(struct grid *g, char **argv, int argc, int i, char *err,
    size_t errlen)
{
	const struct grid_conf	*gc = g->gc;
	int			 k, rc, only;

	only = count_sources(g, argv, argc, i) == 1;
	/* -a files first, then standard input, then COMMAND's, as
	 * parallel orders them. */
	for (k = 0; k < gc->nargfile; k++)
		if ((rc = src_file(g, gc->argfile[k], "-a file", 0, only, err,
		    errlen)) < 0)
			return rc;
	if (gc->stdin_args && (rc = src_file(g, "-", "standard input", 0,
	    only, err, errlen)) < 0)
		return rc;
	return i < argc ? src_argv(g, argv, argc, i, only, err, errlen) : 0;
}
