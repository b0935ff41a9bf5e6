/*
 * repl.c: GNU parallel's replacement strings in a grid's COMMAND ({}, {1},
 * {lr}, {#}, {.}, {/}, {//}, {/.} and the positional forms such as {2/.})
 * and the shell quoting of the arguments they bring in, so that a word
 * with blanks, quotes, '$' or ';' reaches the task as one inert argument.
 * Pure: no I/O, no globals. {%}, the slot, is known only in the worker,
 * which calls repl_slot() just before the spawn; the quoting here makes
 * sure that no argument can spell "{%}" in the line it gets.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* What a replacement string asks for. */
enum rkind { R_NONE, R_ALL, R_COL, R_SEQ, R_SLOT };

enum rmod { M_NONE, M_NOEXT, M_BASE, M_DIR, M_BASENOEXT };

struct rtok {
	enum rkind	 kind;
	enum rmod	 mod;
	int		 col;		/* R_COL: 0-based */
	size_t		 len;		/* of the token, braces included */
};

/* Characters that need no quoting (GNU parallel leaves them bare). */
static int
bare(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || strchr("_-+=/.,:@%^", c) != NULL;
}

int
repl_quote(struct gp_buf *b, const char *s, size_t n)
{
	size_t	 i;
	int	 rc = 0;

	for (i = 0; i < n && bare((unsigned char)s[i]); i++)
		;
	if (i == n && n > 0)
		return gp_buf_add(b, s, n);
	rc = gp_buf_add(b, "'", 1);
	for (i = 0; i < n && rc == 0; i++) {
		if (s[i] == '\'')
			rc = gp_buf_add(b, "'\\''", 4);
		else if (s[i] == '%' && i > 0 && s[i - 1] == '{')
			/* '{''%}': the same word, but never "{%}". */
			rc = gp_buf_add(b, "''%", 3);
		else
			rc = gp_buf_add(b, s + i, 1);
	}
	return rc == 0 ? gp_buf_add(b, "'", 1) : rc;
}

/* The modifier at the end of body[0..n): its kind and length. */
static enum rmod
modifier(const char *body, size_t n, size_t *mlen)
{
	static const struct { const char *s; enum rmod m; } mods[] = {
		{ "/.", M_BASENOEXT }, { "//", M_DIR }, { ".", M_NOEXT },
		{ "/", M_BASE },
	};
	size_t	 i, k;

	for (i = 0; i < sizeof(mods) / sizeof(mods[0]); i++) {
		k = strlen(mods[i].s);
		if (n >= k && memcmp(body + n - k, mods[i].s, k) == 0) {
			*mlen = k;
			return mods[i].m;
		}
	}
	*mlen = 0;
	return M_NONE;
}

/* The column named name[0..n) in a, or -1. */
static int
named(const struct repl_args *a, const char *name, size_t n)
{
	int	 i;

	for (i = 0; a->name != NULL && i < a->ncol; i++)
		if (a->name[i] != NULL && strlen(a->name[i]) == n &&
		    memcmp(a->name[i], name, n) == 0)
			return i;
	return -1;
}

/* The replacement string at p (a '{'), if one: fills *t and returns 1;
 * 0 when it is text; -EINVAL when it names an argument a row has not
 * (err says so). */
static int
token(const char *p, const struct repl_args *a, struct rtok *t, char *err,
    size_t errlen)
{
	const char	*end = strchr(p, '}'), *body = p + 1;
	size_t		 n, k, mlen;
	long		 col;
	char		*e;

	memset(t, 0, sizeof(*t));
	if (end == NULL)
		return 0;
	n = (size_t)(end - body);
	t->len = n + 2;
	if (n == 1 && (*body == '#' || *body == '%')) {
		t->kind = *body == '#' ? R_SEQ : R_SLOT;
		return 1;
	}
	if ((t->col = named(a, body, n)) >= 0) {
		t->kind = R_COL;
		return 1;
	}
	t->mod = modifier(body, n, &mlen);
	k = n - mlen;
	if (k == 0) {
		t->kind = R_ALL;
		return 1;
	}
	if ((t->col = named(a, body, k)) >= 0) {
		t->kind = R_COL;
		return 1;
	}
	if (body[0] < '0' || body[0] > '9' || strspn(body, "0123456789") != k)
		return 0;	/* {print}, {foo}: text, as in parallel */
	col = strtol(body, &e, 10);
	if (col < 1 || col > a->ncol) {
		snprintf(err, errlen, "'%.*s' in the command, but %s %d "
		    "argument%s", (int)t->len, p, col < 1 ? "arguments count "
		    "from 1; there are" : "a row has", a->ncol,
		    a->ncol == 1 ? "" : "s");
		return -EINVAL;
	}
	t->kind = R_COL;
	t->col = (int)col - 1;
	return 1;
}

/* What mod keeps of path s: its part [*off, *off + *n). */
static void
apply(enum rmod mod, const char *s, size_t *off, size_t *n)
{
	const char	*slash, *dot;
	size_t		 len = strlen(s);

	*off = 0;
	*n = len;
	if (mod == M_NONE)
		return;
	slash = strrchr(s, '/');
	if (mod == M_DIR) {
		/* {//} of a word without '/' is '.', as dirname(1). */
		*n = slash == NULL ? 0 : slash == s ? 1 : (size_t)(slash - s);
		return;
	}
	if (mod == M_BASE || mod == M_BASENOEXT)
		*off = slash == NULL ? 0 : (size_t)(slash + 1 - s);
	*n = len - *off;
	if (mod == M_NOEXT || mod == M_BASENOEXT) {
		dot = strrchr(s + *off, '.');
		/* Only a dot after the last '/' starts an extension. */
		if (dot != NULL && (slash == NULL || dot > slash))
			*n = (size_t)(dot - (s + *off));
	}
}

/* One column's value, modified and quoted, into b. */
static int
add_col(struct gp_buf *b, const char *v, enum rmod mod)
{
	size_t	 off, n;

	apply(mod, v, &off, &n);
	if (mod == M_DIR && n == 0)
		return gp_buf_add(b, ".", 1);
	return repl_quote(b, v + off, n);
}

/* Every column, quoted and modified, blank-separated, into b. */
static int
add_all(struct gp_buf *b, const struct repl_args *a, enum rmod mod)
{
	int	 i, rc = 0;

	for (i = 0; i < a->ncol && rc == 0; i++) {
		if (i > 0)
			rc = gp_buf_add(b, " ", 1);
		if (rc == 0)
			rc = add_col(b, a->val[i], mod);
	}
	return rc;
}

/* tmpl[0..n) expanded into b; with append, and no replacement string in
 * it, the values after it. */
static int
expand(const char *tmpl, size_t n, const struct repl_args *a, int append,
    struct gp_buf *b, char *err, size_t errlen)
{
	struct rtok	 t;
	const char	*p = tmpl, *q, *end = tmpl + n;
	char		 num[24];
	int		 rc = 0, any = 0, k;

	b->off = b->len = 0;
	while (rc == 0 && (q = memchr(p, '{', (size_t)(end - p))) != NULL) {
		if ((rc = gp_buf_add(b, p, (size_t)(q - p))) < 0)
			break;
		if ((k = token(q, a, &t, err, errlen)) < 0)
			return k;
		p = q + (k ? t.len : 1);
		any |= k;
		if (k == 0 || t.kind == R_SLOT)	/* {%}: the worker's */
			rc = gp_buf_add(b, q, k ? t.len : 1);
		else if (t.kind == R_SEQ) {
			snprintf(num, sizeof(num), "%lu", a->seq);
			rc = gp_buf_add(b, num, strlen(num));
		} else if (t.kind == R_ALL)
			rc = add_all(b, a, t.mod);
		else
			rc = add_col(b, a->val[t.col], t.mod);
	}
	if (rc == 0)
		rc = gp_buf_add(b, p, (size_t)(end - p));
	/* No replacement string: the arguments go at the end. */
	if (rc == 0 && append && !any && a->ncol > 0 &&
	    (rc = gp_buf_add(b, " ", 1)) == 0)
		rc = add_all(b, a, M_NONE);
	if (rc == 0)
		rc = gp_buf_add(b, "", 1);
	if (rc < 0)
		snprintf(err, errlen, "out of memory");
	return rc;
}

int
repl_expand(const char *tmpl, const struct repl_args *a, struct gp_buf *b,
    char *err, size_t errlen)
{
	return expand(tmpl, strlen(tmpl), a, 1, b, err, errlen);
}

int
repl_expand_head(const char *tmpl, size_t n, const struct repl_args *a,
    struct gp_buf *b, char *err, size_t errlen)
{
	return expand(tmpl, n, a, 0, b, err, errlen);
}

ssize_t
repl_head(const char *tmpl, const struct repl_args *a, unsigned char *col,
    char *err, size_t errlen)
{
	struct rtok	 t;
	const char	*p = tmpl, *q;
	int		 k, any = 0, i;

	while ((q = strpbrk(p, "{]")) != NULL && *q == '{') {
		if ((k = token(q, a, &t, err, errlen)) < 0)
			return k;
		p = q + (k ? t.len : 1);
		any |= k;
		if (k == 0 || t.kind == R_SLOT)
			continue;
		for (i = 0; i < a->ncol; i++)
			if (t.kind != R_COL || i == t.col)
				col[i] = 1;
	}
	if (q != NULL)
		return q + 1 - tmpl;
	/* No ']': the whole line, and values put at its end are in it. */
	for (i = 0; !any && i < a->ncol; i++)
		col[i] = 1;
	return (ssize_t)strlen(tmpl);
}

char *
repl_slot(const char *cmd, int slot)
{
	struct gp_buf	 b = { 0 };
	const char	*p = cmd, *q;
	char		 num[16];
	int		 rc = 0;

	snprintf(num, sizeof(num), "%d", slot);
	while (rc == 0 && (q = strstr(p, "{%}")) != NULL) {
		if ((rc = gp_buf_add(&b, p, (size_t)(q - p))) == 0)
			rc = gp_buf_add(&b, num, strlen(num));
		p = q + 3;
	}
	if (rc == 0)
		rc = gp_buf_add(&b, p, strlen(p) + 1);
	if (rc < 0) {
		gp_buf_release(&b);
		return NULL;
	}
	return (char *)b.data;
}
