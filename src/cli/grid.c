/*
 * grid.c: COMMAND ::: a b ::: x y, GNU parallel's argument grids. The
 * sources (::: words, :::: files, :::+ and ::::+ linked to the one
 * before) are read whole and checked before anything runs; row N of
 * their product (the first source varying slowest, linked sources
 * stepping together) is the task numbered N, computed on demand, so that
 * the rest of the run takes grid rows as it takes a tasks file's lines
 * (tasks.c), and the first starts at once however many there are. What
 * a row would be is checked without making the product: a row's length
 * is the sum of what each group of sources (one and those linked to it)
 * adds, so the longest row is known from each group's rows alone; a tag
 * depends only on the groups used before its ']'. Never prints: errors
 * are left in err as one line.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define GRID_MAX_ROWS	(1UL << 40)
#define GRID_TAG_ROWS	(1UL << 20)	/* tags checked before the run in
					   up to this many rows */

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

/* The next line of f into b, NUL-terminated (its '\n' and a CR before
 * it cut, b->len not counting the NUL): its length, -1 at the end,
 * -EINVAL (*why: a NUL byte, or over LINE_MAX_BYTES, which no row could
 * hold), -ENOMEM or -EIO. getline() would take a line of any length,
 * /dev/zero's too, until memory ran out. */
static ssize_t
next_line(FILE *f, struct gp_buf *b, const char **why)
{
	int	 c;

	b->off = b->len = 0;
	while ((c = getc_unlocked(f)) != EOF && c != '\n') {
		*why = c == '\0' ? "NUL byte in the line" : b->len >=
		    LINE_MAX_BYTES ? "line longer than 1 MiB" : NULL;
		if (*why != NULL)
			return -EINVAL;
		if (gp_buf_reserve(b, 2) < 0)
			return -ENOMEM;
		b->data[b->len++] = (uint8_t)c;
	}
	if (c == EOF && ferror(f))
		return -EIO;
	if (c == EOF && b->len == 0)
		return -1;
	if (b->len > 0 && b->data[b->len - 1] == '\r')
		b->len--;
	if (gp_buf_reserve(b, 1) < 0)
		return -ENOMEM;
	b->data[b->len] = '\0';
	return (ssize_t)b->len;
}

/* A :::: file's lines into s ("-": standard input). 0 or -errno with err
 * saying why (file:line for a bad line). */
static int
read_file(struct grid_src *s, const char *path, const char *sep, char *err,
    size_t errlen)
{
	struct gp_buf	 line = { 0 };
	FILE		*f;
	const char	*why = NULL;
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
	flockfile(f);
	while (rc == 0 && (no++, n = next_line(f, &line, &why)) >= 0)
		rc = take(s, (const char *)line.data, sep, &why);
	funlockfile(f);
	if (rc == 0 && n < -1)
		rc = (int)n;
	if (rc == -EINVAL)
		snprintf(err, errlen, "%s:%lu: %s", path, no, why);
	else if (rc < 0)
		snprintf(err, errlen, "cannot read '%s': %s", path,
		    strerror(-rc));
	gp_buf_release(&line);
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

/* The values of the row that takes row idx[i] of each source i, g->ncol
 * of them, into val. */
static void
values_of(const struct grid *g, const size_t *idx, const char **val)
{
	const struct grid_src	*s;
	int			 i, col = 0;

	for (i = 0; i < g->nsrc; col += s->ncol, i++) {
		s = g->src + i;
		memcpy(val + col, s->val + idx[i] * (size_t)s->ncol,
		    (size_t)s->ncol * sizeof(*val));
	}
}

/* Task seq's row of each source into idx: the last source varies
 * fastest; a linked one steps with the source it links to, the first
 * before it that is not linked. */
static void
row_of(const struct grid *g, unsigned long seq, size_t *idx)
{
	unsigned long	 row = seq - 1, at = 0;
	int		 i;

	for (i = g->nsrc - 1; i >= 0; i--) {
		if (i == g->nsrc - 1 || !g->src[i + 1].linked) {
			at = row % g->src[i].nrow;
			row /= g->src[i].nrow;
		}
		idx[i] = at;
	}
}

/* The task whose rows are idx: row_of() turned around. */
static unsigned long
seq_of(const struct grid *g, const size_t *idx)
{
	unsigned long	 seq = 0;
	int		 i;

	for (i = 0; i < g->nsrc; i++)
		if (!g->src[i].linked)
			seq = seq * g->src[i].nrow + idx[i];
	return seq + 1;
}

/* Task seq's values, g->ncol of them, into val (idx: scratch, one per
 * source). */
static void
row_values(const struct grid *g, unsigned long seq, size_t *idx,
    const char **val)
{
	row_of(g, seq, idx);
	values_of(g, idx, val);
}

/* The rows rows_check() makes: one row's place in each source (idx), its
 * values and its line, and what is being found. */
struct rows {
	const struct grid	*g;
	size_t			*idx;		/* per source */
	size_t			*far;		/* the longest row's */
	unsigned char		*used;		/* per column: in the tag */
	const char		**val;
	struct repl_args	 a;
	struct gp_buf		 line;
	char			*err;
	size_t			 errlen;
};

/* The group whose first source is lead (it and those linked to it) at
 * its row r. */
static void
set_group(const struct grid *g, size_t *idx, int lead, size_t r)
{
	int	 i = lead;

	do
		idx[i++] = r;
	while (i < g->nsrc && g->src[i].linked);
}

/* The row rs->idx (its {#} seq) as its line into rs->line, or with head
 * > 0 only what the template's first head bytes make of it. */
static int
rows_expand(struct rows *rs, unsigned long seq, size_t head)
{
	values_of(rs->g, rs->idx, rs->val);
	rs->a.seq = seq;
	if (head > 0)
		return repl_expand_head(rs->g->tmpl, head, &rs->a, &rs->line,
		    rs->err, rs->errlen);
	return repl_expand(rs->g->tmpl, &rs->a, &rs->line, rs->err,
	    rs->errlen);
}

/* No row is over LINE_MAX_BYTES. A row is the first row's length plus
 * what each group's own row adds to it ({#} counted as long as the last
 * Seq), so each group's rows are expanded with the others at their
 * first, and the longest row takes each group's longest. */
static int
rows_length(struct rows *rs)
{
	const struct grid	*g = rs->g;
	size_t			 base, extra = 0, r, at;
	long			 d, most;
	int			 i, rc;

	memset(rs->idx, 0, (size_t)g->nsrc * sizeof(*rs->idx));
	if ((rc = rows_expand(rs, g->nrow, 0)) < 0)
		return rc;
	base = rs->line.len - 1;
	for (i = 0; i < g->nsrc; i++) {
		if (g->src[i].linked)
			continue;
		for (r = 1, at = 0, most = 0; r < g->src[i].nrow; r++) {
			set_group(g, rs->idx, i, r);
			if ((rc = rows_expand(rs, g->nrow, 0)) < 0)
				return rc;
			d = (long)(rs->line.len - 1) - (long)base;
			if (d > most) {
				most = d;
				at = r;
			}
		}
		set_group(g, rs->idx, i, 0);
		set_group(g, rs->far, i, at);
		extra += (size_t)most;
	}
	if (base + extra <= LINE_MAX_BYTES)
		return 0;
	snprintf(rs->err, rs->errlen, "grid:%lu: task longer than 1 MiB",
	    seq_of(g, rs->far));
	return -EINVAL;
}

/* Row seq (rs->idx) has a tag need.c takes: only its first head bytes
 * given (head > 0), a command after them stands in for the rest. */
static int
rows_tag(struct rows *rs, unsigned long seq, size_t head)
{
	struct task_need	 nd;
	char			 why[200];
	int			 rc;

	if ((rc = rows_expand(rs, seq, head)) < 0)
		return rc;
	if (head > 0) {
		rs->line.len--;		/* its NUL */
		if ((rc = gp_buf_add(&rs->line, " :", 3)) < 0) {
			snprintf(rs->err, rs->errlen, "out of memory");
			return rc;
		}
	}
	if (need_parse((const char *)rs->line.data, &nd, why,
	    sizeof(why)) >= 0)
		return 0;
	snprintf(rs->err, rs->errlen, "grid:%lu: %s", seq, why);
	return -EINVAL;
}

/* Every row's tag (need.c), as far as it can be known before the run:
 * row 1 whole; then, for a command that starts with '[', every
 * combination of the groups whose values come before the tag's ']' (the
 * others at their first row, in Seq order: the first bad row is named),
 * when they are at most GRID_TAG_ROWS; past that, each row as it comes
 * (tasks.c). */
static int
rows_tags(struct rows *rs)
{
	const struct grid	*g = rs->g;
	unsigned long		 n = 1, k, rest;
	ssize_t			 head;
	int			 i, c, col, rc;

	memset(rs->idx, 0, (size_t)g->nsrc * sizeof(*rs->idx));
	if ((rc = rows_tag(rs, 1, 0)) < 0 ||
	    g->tmpl[strspn(g->tmpl, " \t")] != '[')
		return rc;
	if ((head = repl_head(g->tmpl, &rs->a, rs->used, rs->err,
	    rs->errlen)) < 0)
		return (int)head;
	/* A group is in the tag if a column of one of its sources is. */
	for (i = 0, col = 0; i < g->nsrc; col += g->src[i++].ncol)
		for (c = 0; c < g->src[i].ncol; c++)
			rs->used[g->ncol + i] |= rs->used[col + c];
	for (i = g->nsrc - 1; i > 0; i--)
		if (g->src[i].linked)
			rs->used[g->ncol + i - 1] |= rs->used[g->ncol + i];
	for (i = 0; i < g->nsrc && n <= GRID_TAG_ROWS; i++)
		if (!g->src[i].linked && rs->used[g->ncol + i])
			n *= g->src[i].nrow;
	for (k = 0; k < n && n <= GRID_TAG_ROWS; k++) {
		for (i = g->nsrc - 1, rest = k; i >= 0; i--)
			if (!g->src[i].linked && rs->used[g->ncol + i]) {
				set_group(g, rs->idx, i, rest % g->src[i].nrow);
				rest /= g->src[i].nrow;
			}
		if ((rc = rows_tag(rs, seq_of(g, rs->idx), (size_t)head)) < 0)
			return rc;
	}
	return 0;
}

/* What any row would be, known before anything runs and without making
 * the product: a {N} past the columns (every row has the same), a row
 * over LINE_MAX_BYTES, a bad tag. 0, or -EINVAL or -ENOMEM with err. */
static int
rows_check(const struct grid *g, char *err, size_t errlen)
{
	struct rows	 rs;
	int		 rc = -ENOMEM;

	memset(&rs, 0, sizeof(rs));
	rs.g = g;
	rs.err = err;
	rs.errlen = errlen;
	rs.a.name = (const char *const *)g->name;
	rs.a.ncol = g->ncol;
	if ((rs.idx = calloc((size_t)g->nsrc, sizeof(*rs.idx))) != NULL &&
	    (rs.far = calloc((size_t)g->nsrc, sizeof(*rs.far))) != NULL &&
	    (rs.used = calloc((size_t)(g->ncol + g->nsrc), 1)) != NULL &&
	    (rs.val = calloc((size_t)g->ncol, sizeof(*rs.val))) != NULL) {
		rs.a.val = rs.val;
		if ((rc = rows_length(&rs)) == 0)
			rc = rows_tags(&rs);
	}
	if (rc == -ENOMEM)
		snprintf(err, errlen, "out of memory");
	gp_buf_release(&rs.line);
	free(rs.idx);
	free(rs.far);
	free(rs.used);
	free(rs.val);
	return rc;
}

int
grid_parse(struct grid *g, char **argv, int argc, const char *colsep,
    int header, char *err, size_t errlen)
{
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
	    (rc = shape(g, err, errlen)) < 0 ||
	    (rc = rows_check(g, err, errlen)) < 0)
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

size_t
grid_args(const struct grid *g, unsigned long seq, char *buf, size_t len)
{
	const char	**val;
	size_t		 n = 0, *idx;
	int		 i, k;

	if (len == 0)
		return 0;
	buf[0] = '\0';
	if ((val = calloc((size_t)g->ncol, sizeof(*val))) == NULL ||
	    (idx = calloc((size_t)g->nsrc, sizeof(*idx))) == NULL) {
		free(val);
		return 0;
	}
	row_values(g, seq, idx, val);
	free(idx);
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
	size_t			*idx = NULL;
	int			 rc;

	if ((val = calloc((size_t)g->ncol, sizeof(*val))) == NULL ||
	    (idx = calloc((size_t)g->nsrc, sizeof(*idx))) == NULL) {
		free(val);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	row_values(g, seq, idx, val);
	free(idx);
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
