/*
 * grid.c: COMMAND ::: a b ::: x y, GNU parallel's argument grids. The
 * sources (::: words, :::: files, :::+ and ::::+ linked to the one
 * before) are read whole and checked before anything runs; row N of
 * their product (the first source varying slowest, linked sources
 * stepping together) is the task numbered N, computed on demand, so that
 * the rest of the run takes grid rows as it takes a tasks file's lines
 * (tasks.c). Never prints: errors are left in err as one line.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define GRID_MAX_ROWS	(1UL << 40)

/* Which separator word s is: 0 none, 1 ":::", 2 "::::"; *link for the
 * '+' forms. */
static int
grid_sep(const char *s, int *link)
{
	*link = 0;
	if (strcmp(s, ":::") == 0 || strcmp(s, "::::") == 0)
		return (int)strlen(s) - 2;
	if (strcmp(s, ":::+") == 0 || strcmp(s, "::::+") == 0) {
		*link = 1;
		return (int)strlen(s) - 3;
	}
	return 0;
}

int
grid_word(const char *s)
{
	int	 link;

	return grid_sep(s, &link) != 0;
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

/* One value (a word or a file's line) into s, split at --colsep: all
 * values of a source have as many columns as its first. 0, -EINVAL (why)
 * or -ENOMEM. */
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

/* A :::: file's lines into s ("-": standard input). 0 or -errno with err
 * saying why (file:line for a bad line). */
static int
read_file(struct grid_src *s, const char *path, const char *sep, char *err,
    size_t errlen)
{
	FILE		*f;
	char		*line = NULL;
	const char	*why = NULL;
	size_t		 cap = 0;
	ssize_t		 n;
	unsigned long	 no = 0;
	int		 rc = 0;

	f = strcmp(path, "-") == 0 ? stdin : fopen(path, "re");
	if (f == NULL) {
		rc = -errno;
		snprintf(err, errlen, "cannot open '%s': %s", path,
		    strerror(errno));
		return rc;
	}
	if ((rc = files_note(FILE_IN, ":::: file", f == stdin ? NULL : path,
	    fileno(f), err, errlen)) < 0) {
		if (f != stdin)
			fclose(f);
		return rc;
	}
	while (rc == 0 && (n = getline(&line, &cap, f)) != -1) {
		no++;
		if (n > 0 && line[n - 1] == '\n')
			line[--n] = '\0';
		if (n > 0 && line[n - 1] == '\r')
			line[--n] = '\0';
		if (memchr(line, '\0', (size_t)n) != NULL)
			why = "NUL byte in the line";
		rc = why != NULL ? -EINVAL : take(s, line, sep, &why);
	}
	if (rc == 0 && ferror(f))
		rc = -EIO;
	if (rc == -EINVAL)
		snprintf(err, errlen, "%s:%lu: %s", path, no, why);
	else if (rc < 0)
		snprintf(err, errlen, "cannot read '%s': %s", path,
		    strerror(-rc));
	free(line);
	if (f != stdin)
		fclose(f);
	return rc;
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
	a->linked = linked;
	return a;
}

/* The sources at argv[i..argc): argv[i] is a separator. 0 or -errno with
 * err saying why. */
static int
read_sources(struct grid *g, char **argv, int argc, int i, const char *sep,
    char *err, size_t errlen)
{
	struct grid_src	*s = NULL;
	const char	*why = NULL;
	int		 kind = 0, link = 0, plus, k, rc, open = -1;

	for (; i < argc; i++) {
		if ((k = grid_sep(argv[i], &plus)) != 0) {
			if (open >= 0)
				break;
			open = i;
			kind = k;
			link = plus;
			if (k == 1 && (s = src_new(g, argv[i], link &&
			    g->nsrc > 0)) == NULL)
				return -ENOMEM;
			continue;
		}
		if (kind == 2) {
			/* Each file is a source; only the first links. */
			if ((s = src_new(g, argv[i], open >= 0 && link &&
			    g->nsrc > 0)) == NULL)
				return -ENOMEM;
			if ((rc = read_file(s, argv[i], sep, err, errlen)) < 0)
				return rc;
			if (s->nval == 0) {
				snprintf(err, errlen, "':::: %s': no arguments "
				    "in the file", argv[i]);
				return -EINVAL;
			}
		} else if ((rc = take(s, argv[i], sep, &why)) < 0) {
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

/* --header :: the first row of each source names its columns. */
static int
take_header(struct grid *g, char *err, size_t errlen)
{
	struct grid_src	*s;
	int		 i, col = 0;

	if ((g->name = calloc((size_t)g->ncol, sizeof(*g->name))) == NULL)
		return -ENOMEM;
	for (i = 0; i < g->nsrc; col += s->ncol, i++) {
		s = g->src + i;
		if (s->nval == (size_t)s->ncol) {
			snprintf(err, errlen, "source %d ('%s') has only its "
			    "header line", i + 1, s->what);
			return -EINVAL;
		}
		memcpy(g->name + col, s->val, (size_t)s->ncol *
		    sizeof(*s->val));
		s->nval -= (size_t)s->ncol;
		memmove(s->val, s->val + s->ncol, s->nval * sizeof(*s->val));
	}
	return 0;
}

/* Columns, rows, the linked sources' lengths and the product. */
static int
shape(struct grid *g, char *err, size_t errlen)
{
	struct grid_src	*s, *lead = NULL;
	int		 i;

	g->nrow = 1;
	for (i = 0; i < g->nsrc; i++) {
		s = g->src + i;
		s->nrow = s->nval / (size_t)s->ncol;
		if (!s->linked) {
			lead = s;
			if (g->nrow > GRID_MAX_ROWS / s->nrow) {
				snprintf(err, errlen, "more than %lu tasks in "
				    "the grid", GRID_MAX_ROWS);
				return -EINVAL;
			}
			g->nrow *= s->nrow;
		} else if (s->nrow != lead->nrow) {
			/* GNU parallel drops the longer one's extra values
			 * without a word; a sweep must not lose points. */
			snprintf(err, errlen, "source %d ('%s') has %zu "
			    "arguments but is linked to one with %zu",
			    i + 1, s->what, s->nrow, lead->nrow);
			return -EINVAL;
		}
	}
	return 0;
}

int
grid_parse(struct grid *g, char **argv, int argc, const char *colsep,
    int header, char *err, size_t errlen)
{
	struct gp_buf	 line = { 0 };
	size_t		 n = 0;
	int		 i, rc;

	memset(g, 0, sizeof(*g));
	for (i = 0; i < argc && !grid_word(argv[i]); i++)
		n += strlen(argv[i]) + 1;
	if (i == 0 || i == argc) {
		snprintf(err, errlen, "no %s", i < argc ? "command before "
		    "':::'" : "::: or :::: after the command");
		return -EINVAL;
	}
	if ((g->tmpl = malloc(n)) == NULL)
		goto nomem;
	/* The words are shell text, joined as parallel joins them. */
	g->tmpl[0] = '\0';
	for (n = 0; !grid_word(argv[n]); n++)
		strcat(strcat(g->tmpl, n ? " " : ""), argv[n]);
	if ((rc = read_sources(g, argv, argc, i, colsep, err, errlen)) < 0)
		goto fail;
	for (i = 0; i < g->nsrc; i++)
		g->ncol += g->src[i].ncol;
	if ((header && (rc = take_header(g, err, errlen)) < 0) ||
	    (rc = shape(g, err, errlen)) < 0)
		goto fail;
	/* Every row has the same columns: the first shows a bad {N}. */
	rc = grid_line(g, 1, &line, err, errlen);
	gp_buf_release(&line);
	if (rc < 0)
		goto fail;
	return 0;

nomem:
	rc = -ENOMEM;
fail:
	if (rc == -ENOMEM)
		snprintf(err, errlen, "out of memory");
	grid_release(g);
	return rc;
}

/* Task seq's values, g->ncol of them, into val. */
static void
row_values(const struct grid *g, unsigned long seq, const char **val)
{
	const struct grid_src	*s;
	unsigned long		 row = seq - 1, idx = 0;
	int			 i, col = g->ncol;

	/* The last source varies fastest; a linked one steps with the
	 * source it links to, the first before it that is not linked. */
	for (i = g->nsrc - 1; i >= 0; i--) {
		s = g->src + i;
		col -= s->ncol;
		if (i == g->nsrc - 1 || !g->src[i + 1].linked) {
			idx = row % s->nrow;
			row /= s->nrow;
		}
		memcpy(val + col, s->val + idx * (size_t)s->ncol,
		    (size_t)s->ncol * sizeof(*val));
	}
}

size_t
grid_args(const struct grid *g, unsigned long seq, char *buf, size_t len)
{
	const char	**val;
	size_t		 n = 0;
	int		 i, k;

	if (len == 0)
		return 0;
	buf[0] = '\0';
	if ((val = calloc((size_t)g->ncol, sizeof(*val))) == NULL)
		return 0;
	row_values(g, seq, val);
	for (i = 0; i < g->ncol && n + 1 < len; i++) {
		k = snprintf(buf + n, len - n, "%s%s", i ? " " : "", val[i]);
		n = k < 0 ? n : n + (size_t)k < len ? n + (size_t)k : len - 1;
	}
	free(val);
	return n;
}

int
grid_line(const struct grid *g, unsigned long seq, struct gp_buf *out,
    char *err, size_t errlen)
{
	struct repl_args	 a;
	const char		**val;
	int			 rc;

	if ((val = calloc((size_t)g->ncol, sizeof(*val))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	row_values(g, seq, val);
	a.val = val;
	a.name = (const char *const *)g->name;
	a.ncol = g->ncol;
	a.seq = seq;
	rc = repl_expand(g->tmpl, &a, out, err, errlen);
	free(val);
	return rc;
}

void
grid_release(struct grid *g)
{
	size_t	 k;
	int	 i;

	for (i = 0; i < g->nsrc; i++) {
		for (k = 0; k < g->src[i].nval; k++)
			free(g->src[i].val[k]);
		free(g->src[i].val);
	}
	for (i = 0; g->name != NULL && i < g->ncol; i++)
		free(g->name[i]);
	free(g->name);
	free(g->src);
	free(g->tmpl);
	memset(g, 0, sizeof(*g));
}
