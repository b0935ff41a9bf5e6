/*
 * grid.c: COMMAND ::: a b ::: x y, GNU parallel's argument grids. The
 * sources (gridsrc.c: ::: words, :::: files, -a files, standard input;
 * :::+ and ::::+ linked to the one before) are read whole and checked
 * before anything runs, or, a lone source that is a pipe, as the run
 * goes; row N of their product (the first source varying slowest,
 * linked sources stepping together) is computed on demand, so that the
 * first task starts at once however many there are. A task is a row, or
 * -N's n rows in a row, or, with -m or -X, as many rows of the one
 * source as fit -s's length (those cuts are found as the rows come).
 * The rest of the run takes grid tasks as it takes a tasks file's lines
 * (tasks.c). What a row would be is checked without making the product:
 * a row's length is the sum of what each group of sources (one and
 * those linked to it) adds, so the longest row is known from each
 * group's rows alone; a tag depends only on the groups used before its
 * ']'. Never prints: errors are left in err as one line.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parallel/parallel.h"

#define GRID_MAX_ROWS	(1UL << 40)
#define GRID_TAG_ROWS	(1UL << 20)	/* tags checked before the run in
					   up to this many rows */
#define GRID_DECL_MAX	(1 << 20)	/* -N n: {N} up to n x columns, and
					   no line holds more arguments */

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
		if (s->nval == (size_t)s->ncol && !g->stream) {
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

/* The rows of each source, the linked sources' lengths and the
 * product's rows. */
static int
shape(struct grid *g, char *err, size_t errlen)
{
	struct grid_src	*s, *lead = NULL;
	int		 i;

	g->nunit = 1;
	for (i = 0; i < g->nsrc; i++) {
		s = g->src + i;
		s->nrow = s->ncol > 0 ? s->nval / (size_t)s->ncol : 0;
		if (!s->linked) {
			lead = s;
			if (s->nrow > 0 && g->nunit > GRID_MAX_ROWS / s->nrow) {
				snprintf(err, errlen, "more than %lu tasks in "
				    "the grid", GRID_MAX_ROWS);
				return -EINVAL;
			}
			g->nunit *= s->nrow;
		} else if (s->nrow != lead->nrow) {
			/* GNU parallel drops the longer one's extra values
			 * without a word (:::+), or wraps the shorter
			 * (--link); a sweep must not lose or repeat points. */
			snprintf(err, errlen, "source %d ('%s') has %zu "
			    "arguments but is linked to one with %zu",
			    i + 1, s->what, s->nrow, lead->nrow);
			return -EINVAL;
		}
	}
	return 0;
}

/* What grid_line() gives task seq: rows [*u0, *u1) of the product, 0-based. */
static void
task_rows(const struct grid *g, unsigned long seq, unsigned long *u0,
    unsigned long *u1)
{
	long	 n = g->gc->per_task;

	if (g->gc->pack != PACK_NONE) {
		*u0 = seq > 1 ? g->cut[seq - 2] : 0;
		*u1 = g->cut[seq - 1];
		return;
	}
	if (n <= 1) {	/* -N0: one row, nothing of it inserted */
		*u0 = seq - 1;
		*u1 = seq;
		return;
	}
	*u0 = (seq - 1) * (unsigned long)n;
	*u1 = *u0 + (unsigned long)n < g->nunit ? *u0 + (unsigned long)n :
	    g->nunit;
}

/* The tasks the rows make so far: every row, -N's groups (the last
 * short one once the input has ended), or -m's and -X's cuts. */
static void
count_tasks(struct grid *g)
{
	long	 n = g->gc->per_task;

	if (g->gc->pack != PACK_NONE)
		g->nrow = g->ncut;
	else if (n <= 1)
		g->nrow = g->nunit;
	else
		g->nrow = g->nunit / (unsigned long)n + (g->ended &&
		    g->nunit % (unsigned long)n != 0);
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
	rs.a.ncol = rs.a.nname = rs.a.decl = g->ncol;
	rs.a.flags = g->rflags;
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

/*
 * -m, -X: the lengths a task's line is made of. base: the line with no
 * row; a row adds what its own line has beyond it, and a row after the
 * first the blanks that join it to the one before (blank: one per {},
 * or per word -X repeats; none for arguments appended, whose blank its
 * own line has), found from the lines of one and two rows of "x".
 */
static int
pack_base(struct grid *g, struct repl_args *a, char *err, size_t errlen)
{
	const char	**x;
	size_t		 len[3];
	int		 i, rc = 0;

	if ((x = calloc(2 * (size_t)g->ncol + 1, sizeof(*x))) == NULL)
		return -ENOMEM;
	for (i = 0; i < 2 * g->ncol; i++)
		x[i] = "x";
	a->val = x;
	a->flags = g->rflags;
	for (i = 0; i < 3 && rc == 0; i++) {
		a->ncol = i * g->ncol;
		if ((rc = repl_expand(g->tmpl, a, &g->scratch, err,
		    errlen)) == 0)
			len[i] = g->scratch.len - 1;
	}
	free(x);
	if (rc < 0)
		return rc;
	g->base = len[0];
	g->blank = len[2] + len[0] - 2 * len[1];
	g->packlen = g->base;
	return 0;
}

/* Once the columns are known (every source read, or a stream's first
 * record): the names --header takes, COMMAND's words quoted for -q, and
 * -m's and -X's line with no row. 1, or 0 while a stream has no record
 * yet, or -errno with err. */
static int
grid_prepare(struct grid *g, char *err, size_t errlen)
{
	struct repl_args	 a;
	int			 i, rc;

	if (g->stream && g->src[0].ncol == 0)
		return 0;
	for (i = 0, g->ncol = 0; i < g->nsrc; i++)
		g->ncol += g->src[i].ncol;
	if (g->gc->header && (rc = take_header(g, err, errlen)) < 0)
		return rc;
	memset(&a, 0, sizeof(a));
	a.name = (const char *const *)g->name;
	a.nname = a.decl = g->ncol;
	a.flags = g->rflags;
	if (g->gc->quote) {
		if ((rc = repl_quote_words(g->word, g->nword, &a, &g->scratch,
		    err, errlen)) < 0)
			return rc;
		free(g->tmpl);
		if ((g->tmpl = strdup((char *)g->scratch.data)) == NULL)
			return -ENOMEM;
	}
	if (g->gc->pack != PACK_NONE && (rc = pack_base(g, &a, err,
	    errlen)) < 0)
		return rc;
	g->ready = 1;
	return 1;
}

/* A cut of -m or -X: a task ends before row u. */
static int
cut_at(struct grid *g, unsigned long u)
{
	unsigned long	*c;
	size_t		 n;

	if (g->ncut == g->capcut) {
		n = g->capcut ? 2 * g->capcut : 64;
		if ((c = realloc(g->cut, n * sizeof(*c))) == NULL)
			return -ENOMEM;
		g->cut = c;
		g->capcut = n;
	}
	g->cut[g->ncut++] = u;
	g->packlen = g->base;
	return 0;
}

/* -m, -X: the rows not yet in a task into tasks, each as long as -s
 * allows (pack_base() says what a row adds) and of at most -N's (or
 * -n's) rows, as in parallel, at least one row each, however long. The
 * last task is cut once the input has ended. */
static int
pack_more(struct grid *g, char *err, size_t errlen)
{
	struct repl_args	 a;
	unsigned long		 last;
	size_t			 d;
	int			 rc;

	memset(&a, 0, sizeof(a));
	a.name = (const char *const *)g->name;
	a.nname = a.ncol = a.decl = g->ncol;
	a.flags = g->rflags;
	for (; g->packed < g->nunit; g->packed++) {
		a.val = (const char *const *)g->src[0].val + g->packed *
		    (unsigned long)g->ncol;
		a.seq = g->ncut + 1;
		if ((rc = repl_expand(g->tmpl, &a, &g->scratch, err,
		    errlen)) < 0)
			return rc;
		d = g->scratch.len - 1 >= g->base ? g->scratch.len - 1 -
		    g->base : 0;
		last = g->ncut ? g->cut[g->ncut - 1] : 0;
		if (g->packed > last && (g->packlen + d + g->blank >
		    g->gc->max_chars || (g->gc->nopt && g->gc->per_task > 0 &&
		    g->packed - last >= (unsigned long)g->gc->per_task)) &&
		    cut_at(g, g->packed) < 0)
			goto nomem;
		g->packlen += d + (g->packed > (g->ncut ? g->cut[g->ncut - 1] :
		    0) ? g->blank : 0);
	}
	last = g->ncut ? g->cut[g->ncut - 1] : 0;
	if (g->ended && g->nunit > last && cut_at(g, g->nunit) < 0)
		goto nomem;
	return 0;
nomem:
	snprintf(err, errlen, "out of memory");
	return -ENOMEM;
}

int
grid_grown(struct grid *g, char *err, size_t errlen)
{
	struct grid_src	*s = &g->src[0];
	int		 rc;

	if (!g->ready && (rc = grid_prepare(g, err, errlen)) <= 0)
		return rc;
	if (g->stream)
		g->nunit = s->nrow = s->ncol > 0 ? s->nval / (size_t)s->ncol :
		    0;
	rc = g->gc->pack != PACK_NONE ? pack_more(g, err, errlen) : 0;
	count_tasks(g);
	return rc;
}

/* Task seq's values, its rows' one after another, as repl_args in *a
 * (*val: free it). 0, -E2BIG (more than a line can hold) or -ENOMEM. */
static int
task_args(const struct grid *g, unsigned long seq, struct repl_args *a,
    const char ***val)
{
	unsigned long	 u0, u1, u;
	size_t		*idx;
	long		 n = g->gc->per_task;

	task_rows(g, seq, &u0, &u1);
	memset(a, 0, sizeof(*a));
	/* Each argument takes a byte and a blank at least: no line could
	 * hold more (-N 1000000000 asks no such memory). */
	if (n != 0 && (u1 - u0) * (unsigned long)g->ncol > LINE_MAX_BYTES / 2)
		return -E2BIG;
	*val = calloc((size_t)(u1 - u0) * (size_t)g->ncol + 1, sizeof(**val));
	idx = calloc((size_t)g->nsrc + 1, sizeof(*idx));
	if (*val == NULL || idx == NULL) {
		free(*val);
		free(idx);
		return -ENOMEM;
	}
	for (u = u0; u < u1; u++) {
		row_of(g, u + 1, idx);
		values_of(g, idx, *val + (u - u0) * (unsigned long)g->ncol);
	}
	free(idx);
	a->val = *val;
	a->name = (const char *const *)g->name;
	a->nname = g->ncol;
	a->ncol = n == 0 ? 0 : (int)(u1 - u0) * g->ncol;
	a->decl = n > 1 ? (n > GRID_DECL_MAX / (g->ncol > 0 ? g->ncol : 1) ?
	    GRID_DECL_MAX : (int)n * g->ncol) : n == 0 ? 0 : g->ncol;
	a->flags = g->rflags;
	a->seq = seq;
	return 0;
}

int
grid_parse(struct grid *g, char **argv, int argc, const struct grid_conf *gc,
    char *err, size_t errlen)
{
	struct gp_buf	 b = { 0 };
	size_t		 n = 0;
	int		 i, rc;

	memset(g, 0, sizeof(*g));
	g->gc = gc;
	g->rflags = gc->ctx | repl_shell(gc->shell);
	g->sfd = -1;
	for (i = 0; i < argc && !gridsrc_word(gc, argv[i]); i++)
		n += strlen(argv[i]) + 1;
	if (i == 0 || (i == argc && !gc->stdin_args && gc->nargfile == 0)) {
		snprintf(err, errlen, "no %s", i < argc ? "command before "
		    "':::'" : "::: or :::: after the command");
		return -EINVAL;
	}
	g->word = argv;
	g->nword = i;
	if ((g->tmpl = malloc(n)) == NULL)
		goto nomem;
	/* The words are shell text, joined as parallel joins them. */
	g->tmpl[0] = '\0';
	for (n = 0; (int)n < i; n++)
		strcat(strcat(g->tmpl, n ? " " : ""), argv[n]);
	/* Refused before any source is read (a pipe's first line). */
	if ((rc = repl_perl(g->tmpl, err, errlen)) < 0)
		goto fail;
	if ((rc = gridsrc_sources(g, argv, argc, i, err, errlen)) < 0)
		goto fail;
	if (gc->pack != PACK_NONE && g->nsrc > 1) {
		snprintf(err, errlen, "-m and -X fill tasks with the arguments "
		    "of one source, and this grid has %d (say -N to take "
		    "rows of the product in groups)", g->nsrc);
		rc = -EINVAL;
		goto fail;
	}
	if (g->stream)
		return 0;	/* checked as it comes (tasks.c) */
	g->ended = 1;
	if ((rc = grid_prepare(g, err, errlen)) < 0 ||
	    (rc = shape(g, err, errlen)) < 0 ||
	    (rc = grid_grown(g, err, errlen)) < 0)
		goto fail;
	/* Every row's length and tag before the run, without the product;
	 * tasks of several rows are checked as they are made, but the
	 * first now, with what any task's replacement strings name. */
	if (g->nrow > 0 && ((gc->per_task == 1 && gc->pack == PACK_NONE &&
	    (rc = rows_check(g, err, errlen)) < 0) ||
	    (rc = grid_line(g, 1, &b, err, errlen)) < 0))
		goto fail;
	gp_buf_release(&b);
	return 0;

nomem:
	rc = -ENOMEM;
fail:
	if (rc == -ENOMEM)
		snprintf(err, errlen, "out of memory");
	gp_buf_release(&b);
	grid_release(g);
	return rc;
}

size_t
grid_args(const struct grid *g, unsigned long seq, char *buf, size_t len)
{
	struct repl_args	 a;
	const char		**val;
	size_t			 n = 0;
	int			 i, k;

	if (len == 0)
		return 0;
	buf[0] = '\0';
	if (task_args(g, seq, &a, &val) < 0)
		return 0;
	for (i = 0; i < a.ncol && n + 1 < len; i++) {
		k = snprintf(buf + n, len - n, "%s%s", i ? " " : "", val[i]);
		n = k < 0 ? n : n + (size_t)k < len ? n + (size_t)k : len - 1;
	}
	free(val);
	return n;
}

size_t
grid_tag(const struct grid *g, unsigned long seq, const char *fmt, int slot,
    char *buf, size_t len)
{
	struct repl_args	 a;
	struct gp_buf		 b = { 0 };
	const char		**val;
	char			 err[8];
	size_t			 n = 0;

	if (len == 0)
		return 0;
	buf[0] = '\0';
	if (task_args(g, seq, &a, &val) < 0)
		return 0;
	a.flags = REPL_RAW | (g->rflags & REPL_CTX);
	a.slot = slot;
	if (repl_expand(fmt, &a, &b, err, sizeof(err)) == 0) {
		n = b.len - 1 < len ? b.len - 1 : len - 1;
		memcpy(buf, b.data, n);
		buf[n] = '\0';
	}
	gp_buf_release(&b);
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

	if ((rc = task_args(g, seq, &a, &val)) < 0) {
		snprintf(err, errlen, rc == -E2BIG ? "task longer than 1 MiB "
		    "(more arguments than a line holds)" : "out of memory");
		return rc == -E2BIG ? -EINVAL : rc;
	}
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
	if (g->sfd > STDIN_FILENO)
		close(g->sfd);
	free(g->name);
	free(g->src);
	free(g->tmpl);
	free(g->cut);
	gp_buf_release(&g->scratch);
	memset(g, 0, sizeof(*g));
	g->sfd = -1;
}
