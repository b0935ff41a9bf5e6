/*
 * repl.c: GNU parallel's replacement strings in a grid's COMMAND ({}, {1},
 * {-1}, {lr}, {#}, {.}, {/}, {//}, {/.} and the positional forms such as
 * {2/.}) and the shell quoting of the arguments they bring in, so that a
 * word with blanks, quotes, '$' or ';' reaches the task as one inert
 * argument. Pure: no I/O, no globals. {%}, the slot, is known only in the
 * worker, which calls repl_slot() just before the spawn; the quoting here
 * makes sure that no argument can spell "{%}" in the line it gets. The
 * same expansion, unquoted, makes --tagstring's text (REPL_RAW), and
 * repeats a word that holds {} once per value for -X and -N (REPL_CTX).
 * And whether a line needs the shell at all (cmdline_needs_shell(): the
 * master's --shell check, the worker's spawn).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/parallel.h"

/* What a replacement string asks for. */
enum rkind { R_NONE, R_ALL, R_COL, R_SEQ, R_SLOT };

enum rmod { M_NONE, M_NOEXT, M_BASE, M_DIR, M_BASENOEXT };

struct rtok {
	enum rkind	 kind;
	enum rmod	 mod;
	int		 col;		/* R_COL: 0-based */
	size_t		 len;		/* of the token, braces included */
};

/* Characters that need no quoting (GNU parallel leaves them bare); for
 * fish, not % nor ^ either. */
static int
bare(unsigned char c, int flags)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || (c != '\0' &&
	    strchr((flags & REPL_FISH) ? "_-+=/.,:@" : "_-+=/.,:@%^", c) !=
	    NULL);
}

/* What (t)csh and rc would read in a word, as GNU parallel lists it:
 * newlines and other controls, blanks, quotes, metacharacters and bytes
 * from 0x82 up. */
static int
csh_special(unsigned char c)
{
	return (c >= 2 && c <= 26) || c >= 0x82 ||
	    (c != '\0' && strchr("\\#?`(){}[]^*<=>~|; \"!$&'", c) != NULL);
}

/* s[0..n) for (t)csh (a backslash before each special) or rc (each run
 * of specials in quotes, a quote doubled), as GNU parallel quotes for
 * them; but csh reads a backslash-newline (parallel's) as a blank, and
 * keeps a newline only quoted, after a backslash. "{%}" comes out with
 * '{' or '}' escaped. */
static int
quote_csh_rc(struct gp_buf *b, const char *s, size_t n, int rcsh)
{
	size_t	 i;
	int	 rc = 0, in = 0;

	if (n == 0)
		return gp_buf_add(b, "''", 2);
	for (i = 0; i < n && rc == 0; i++) {
		if (!rcsh && s[i] == '\n') {
			rc = gp_buf_add(b, "'\\\n'", 4);
			continue;
		}
		if (!rcsh && csh_special((unsigned char)s[i]))
			rc = gp_buf_add(b, "\\", 1);
		else if (rcsh && in != csh_special((unsigned char)s[i])) {
			in = !in;
			rc = gp_buf_add(b, "'", 1);
		}
		if (rc == 0 && rcsh && s[i] == '\'')
			rc = gp_buf_add(b, "'", 1);
		if (rc == 0)
			rc = gp_buf_add(b, s + i, 1);
	}
	return rc == 0 && in ? gp_buf_add(b, "'", 1) : rc;
}

int
repl_quote(struct gp_buf *b, const char *s, size_t n, int flags)
{
	size_t	 i;
	int	 rc = 0, fish = flags & REPL_FISH;

	if (flags & (REPL_CSH | REPL_RC))
		return quote_csh_rc(b, s, n, flags & REPL_RC);
	for (i = 0; i < n && bare((unsigned char)s[i], flags); i++)
		;
	if (i == n && n > 0)
		return gp_buf_add(b, s, n);
	rc = gp_buf_add(b, "'", 1);
	for (i = 0; i < n && rc == 0; i++) {
		if (s[i] == '\'')
			rc = fish ? gp_buf_add(b, "\\'", 2) :
			    gp_buf_add(b, "'\\''", 4);
		else if (fish && s[i] == '\\')
			rc = gp_buf_add(b, "\\\\", 2);
		else if (s[i] == '%' && i > 0 && s[i - 1] == '{')
			/* '{''%}': the same word, but never "{%}". */
			rc = gp_buf_add(b, "''%", 3);
		else
			rc = gp_buf_add(b, s + i, 1);
	}
	return rc == 0 ? gp_buf_add(b, "'", 1) : rc;
}

int
repl_shell(const char *shell)
{
	const char	*base;

	if (shell == NULL)
		return 0;
	base = strrchr(shell, '/') != NULL ? strrchr(shell, '/') + 1 : shell;
	return strstr(base, "csh") != NULL ? REPL_CSH : strcmp(base, "rc") ==
	    0 ? REPL_RC : strcmp(base, "fish") == 0 ? REPL_FISH : 0;
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
	int	 i, nn = a->nname > 0 ? a->nname : a->ncol;

	/* A name with a blank is none: parallel leaves {E-mail address}
	 * as it is (the shell made two words of it). */
	if (memchr(name, ' ', n) != NULL || memchr(name, '\t', n) != NULL)
		return -1;
	for (i = 0; a->name != NULL && i < nn; i++)
		if (a->name[i] != NULL && strlen(a->name[i]) == n &&
		    memcmp(a->name[i], name, n) == 0)
			return i;
	return -1;
}

int
repl_perl(const char *s, char *err, size_t errlen)
{
	const char	*p = strstr(s, "{="), *e;

	/* {= perl =} (and {=3 perl =}): GNU parallel runs Perl there. Its
	 * pieces must not run as shell words. */
	if (p == NULL || (e = strstr(p + 2, "=}")) == NULL)
		return 0;
	snprintf(err, errlen, "'%.*s%s': {= =} is a Perl expression of GNU "
	    "parallel, which gpupool-run does not run (use a shell expression "
	    "in the command)", e + 2 - p > 40 ? 37 : (int)(e + 2 - p), p,
	    e + 2 - p > 40 ? "..." : "");
	return -EINVAL;
}

/* The columns a positional {N} may name: decl, or the values present. */
static int
declared(const struct repl_args *a)
{
	return a->decl > a->ncol ? a->decl : a->ncol;
}

/* {N} or {-N} in body[0..k): 1 with t->col (0-based; from the end for
 * {-N}: -1 is the last), 0 when it is not a number, -EINVAL when it
 * names an argument no row has. */
static int
positional(const char *p, const char *body, size_t k,
    const struct repl_args *a, struct rtok *t, char *err, size_t errlen)
{
	int	 neg = body[0] == '-', d = declared(a);
	long	 col;
	char	*e;

	if (k < (size_t)neg + 1 || body[neg] < '0' || body[neg] > '9' ||
	    strspn(body + neg, "0123456789") != k - (size_t)neg)
		return 0;	/* {print}, {foo}: text, as in parallel */
	col = strtol(body + neg, &e, 10);
	if (col < 1 || col > d) {
		snprintf(err, errlen, "'%.*s' in the command, but %s %d "
		    "argument%s", (int)t->len, p, col < 1 ? "arguments count "
		    "from 1; there are" : "a row has", d, d == 1 ? "" : "s");
		return -EINVAL;
	}
	t->kind = R_COL;
	t->col = neg ? (int)-col : (int)col - 1;
	return 1;
}

/* The replacement string at p (a '{'), if one: fills *t and returns 1;
 * 0 when it is text; -EINVAL when it names an argument a row has not,
 * or is a Perl expression (err says so). */
static int
token(const char *p, const struct repl_args *a, struct rtok *t, char *err,
    size_t errlen)
{
	const char	*end = strchr(p, '}'), *body = p + 1;
	size_t		 n, k, mlen;

	memset(t, 0, sizeof(*t));
	if (repl_perl(p, err, errlen) < 0)
		return -EINVAL;
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
	return positional(p, body, k, a, t, err, errlen);
}

/* POSIX dirname(3) of s, as GNU parallel's {//}: trailing slashes
 * dropped, then the last name, then the slashes before it; "." for a
 * word without '/', "/" for one that is only slashes there. Its part
 * [0, *n) of s, or *n 0 for ".". */
static void
dir_of(const char *s, size_t len, size_t *n)
{
	size_t	 e = len;

	while (e > 1 && s[e - 1] == '/')
		e--;
	while (e > 0 && s[e - 1] != '/')
		e--;
	while (e > 1 && s[e - 1] == '/')
		e--;
	*n = e;
}

/* What mod keeps of path s: its part [*off, *off + *n). {/} is what
 * follows the last '/' (empty after a trailing one, as in parallel), {.}
 * drops from the last '.' after the last '/'. */
static void
apply(enum rmod mod, const char *s, size_t *off, size_t *n)
{
	const char	*slash, *dot;
	size_t		 len = strlen(s);

	*off = 0;
	*n = len;
	if (mod == M_NONE)
		return;
	if (mod == M_DIR) {
		dir_of(s, len, n);
		return;
	}
	slash = strrchr(s, '/');
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

/* One value, modified and quoted (as it is with REPL_RAW), into b. */
static int
add_val(struct gp_buf *b, const struct repl_args *a, const char *v,
    enum rmod mod)
{
	size_t	 off, n;

	apply(mod, v, &off, &n);
	if (mod == M_DIR && n == 0)
		return gp_buf_add(b, ".", 1);
	if (a->flags & REPL_RAW)
		return gp_buf_add(b, v + off, n);
	return repl_quote(b, v + off, n, a->flags);
}

/* Column col (from the end when negative): nothing when the row lacks
 * it (the last task of -N, as parallel leaves it out). */
static int
add_col(struct gp_buf *b, const struct repl_args *a, int col, enum rmod mod)
{
	if (col < 0)
		col += a->ncol;
	if (col < 0 || col >= a->ncol)
		return 0;
	return add_val(b, a, a->val[col], mod);
}

/* Values [from, to), modified, blank-separated, into b. */
static int
add_vals(struct gp_buf *b, const struct repl_args *a, int from, int to,
    enum rmod mod)
{
	int	 i, rc = 0;

	for (i = from; i < to && rc == 0; i++) {
		if (i > from)
			rc = gp_buf_add(b, " ", 1);
		if (rc == 0)
			rc = add_val(b, a, a->val[i], mod);
	}
	return rc;
}

/* Every column, quoted and modified, blank-separated, into b. */
static int
add_all(struct gp_buf *b, const struct repl_args *a, enum rmod mod)
{
	return add_vals(b, a, 0, a->ncol, mod);
}

/* tmpl[p..end) expanded onto b, {} all the values, or only value one
 * when one >= 0 (the other replacement strings all of them); *any set
 * when it holds a replacement string. */
static int
expand_span(const char *p, const char *end, const struct repl_args *a,
    int one, struct gp_buf *b, int *any, char *err, size_t errlen)
{
	struct rtok	 t;
	const char	*q;
	char		 num[24];
	int		 rc = 0, k;

	while (rc == 0 && (q = memchr(p, '{', (size_t)(end - p))) != NULL) {
		if ((rc = gp_buf_add(b, p, (size_t)(q - p))) < 0)
			return rc;
		if ((k = token(q, a, &t, err, errlen)) < 0)
			return k;
		p = q + (k ? t.len : 1);
		*any |= k;
		if (k && (t.kind == R_SEQ || (t.kind == R_SLOT &&
		    a->slot > 0))) {
			snprintf(num, sizeof(num), "%lu", t.kind == R_SEQ ?
			    a->seq : (unsigned long)a->slot);
			rc = gp_buf_add(b, num, strlen(num));
		} else if (k == 0 || t.kind == R_SLOT)	/* {%}: the worker's */
			rc = gp_buf_add(b, q, k ? t.len : 1);
		else if (t.kind == R_ALL)
			rc = one >= 0 ? add_vals(b, a, one, one + 1, t.mod) :
			    add_all(b, a, t.mod);
		else
			rc = add_col(b, a, t.col, t.mod);
	}
	return rc == 0 ? gp_buf_add(b, p, (size_t)(end - p)) : rc;
}

/* Whether word[0..end) holds {} (with any modifier): -X repeats it. 1,
 * 0, or -EINVAL as token(). */
static int
has_all(const char *p, const char *end, const struct repl_args *a,
    char *err, size_t errlen)
{
	struct rtok	 t;
	const char	*q;
	int		 k;

	while ((q = memchr(p, '{', (size_t)(end - p))) != NULL) {
		if ((k = token(q, a, &t, err, errlen)) < 0)
			return k;
		if (k && t.kind == R_ALL)
			return 1;
		p = q + (k ? t.len : 1);
	}
	return 0;
}

/* -X, -N (REPL_CTX, GNU parallel's context replace): each word of
 * tmpl[p..end) that holds {} once per value, blank-separated, {} that
 * value, {1} or {#} still the task's; the other words once, as they
 * are. */
static int
expand_ctx(const char *p, const char *end, const struct repl_args *a,
    struct gp_buf *b, int *any, char *err, size_t errlen)
{
	const char		*w;
	int			 rc = 0, u;

	while (rc == 0 && p < end) {
		for (w = p; p < end && (*p == ' ' || *p == '\t'); p++)
			;
		if ((rc = gp_buf_add(b, w, (size_t)(p - w))) < 0)
			break;
		for (w = p; p < end && *p != ' ' && *p != '\t'; p++)
			;
		if ((rc = has_all(w, p, a, err, errlen)) <= 0) {
			if (rc == 0)
				rc = expand_span(w, p, a, -1, b, any, err,
				    errlen);
			continue;
		}
		*any = 1;
		for (u = 0, rc = 0; u < a->ncol && rc == 0; u++) {
			if (u > 0)
				rc = gp_buf_add(b, " ", 1);
			if (rc == 0)
				rc = expand_span(w, p, a, u, b, any, err,
				    errlen);
		}
	}
	return rc;
}

/* tmpl[0..n) expanded into b; with append, and no replacement string in
 * it, the values after it (not in raw text: a tag). */
static int
expand(const char *tmpl, size_t n, const struct repl_args *a, int append,
    struct gp_buf *b, char *err, size_t errlen)
{
	int	 rc, any = 0;

	b->off = b->len = 0;
	/* -N0 inserts nothing: its words are not repeated away. */
	if ((a->flags & REPL_CTX) && a->ncol > 0)
		rc = expand_ctx(tmpl, tmpl + n, a, b, &any, err, errlen);
	else
		rc = expand_span(tmpl, tmpl + n, a, -1, b, &any, err, errlen);
	if (rc == -EINVAL)
		return rc;
	/* No replacement string: the arguments go at the end. */
	if (rc == 0 && append && !any && a->ncol > 0 &&
	    !(a->flags & REPL_RAW) && (rc = gp_buf_add(b, " ", 1)) == 0)
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
			if (t.kind != R_COL || i == (t.col < 0 ? a->ncol + t.col :
			    t.col))
				col[i] = 1;
	}
	if (q != NULL)
		return q + 1 - tmpl;
	/* No ']': the whole line, and values put at its end are in it. */
	for (i = 0; !any && i < a->ncol; i++)
		col[i] = 1;
	return (ssize_t)strlen(tmpl);
}

int
repl_quote_words(char *const *word, int n, const struct repl_args *a,
    struct gp_buf *b, char *err, size_t errlen)
{
	struct rtok	 t;
	const char	*p, *q, *lit;
	int		 i, k, rc = 0;

	b->off = b->len = 0;
	for (i = 0; i < n && rc == 0; i++) {
		if (i > 0 && (rc = gp_buf_add(b, " ", 1)) < 0)
			break;
		if (*word[i] == '\0') {
			rc = gp_buf_add(b, "''", 2);
			continue;
		}
		for (p = lit = word[i]; rc == 0; p = q + (k ? t.len : 1)) {
			if ((q = strchr(p, '{')) == NULL)
				q = p + strlen(p);
			k = *q == '{' ? token(q, a, &t, err, errlen) : 0;
			if (k < 0)
				return k;
			/* A replacement string stays as it is, between the
			 * quoted text around it: the shell joins them. */
			if (k == 0 && *q != '\0')
				continue;
			if (q > lit)
				rc = repl_quote(b, lit, (size_t)(q - lit),
				    a->flags);
			if (rc == 0 && k)
				rc = gp_buf_add(b, q, t.len);
			if (*q == '\0')
				break;
			lit = q + t.len;
		}
	}
	if (rc == 0)
		rc = gp_buf_add(b, "", 1);
	if (rc < 0)
		snprintf(err, errlen, "out of memory");
	return rc;
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

/* Words that only mean what they say when the shell reads them. */
static const char *const shell_words[] = {
	"!", ".", ":", "{", "}", "alias", "bg", "break", "case", "cd",
	"command", "continue", "do", "done", "echo", "elif", "else", "esac",
	"eval", "exec", "exit", "export", "fc", "fg", "fi", "for", "getopts",
	"hash", "if", "in", "jobs", "local", "printf", "read", "readonly",
	"return", "set", "shift", "source", "test", "then", "times", "trap",
	"type", "ulimit", "umask", "unalias", "unset", "until", "wait",
	"while", NULL
};

/*
 * Shell syntax anywhere, or where a word starts ('#' comment, '~' home),
 * an assignment in the first word, or a first word that is a keyword or
 * builtin. Anything else means the same to sh as to execvp() on the
 * blank-separated words, so it is run without a shell.
 */
int
cmdline_needs_shell(const char *cmd)
{
	const char	*p, *w;
	size_t		 n;
	int		 i, first = 1;

	if (strpbrk(cmd, "|&;<>()$`\\\"'*?[]{}!\n\r") != NULL)
		return 1;
	for (p = cmd; *p != '\0'; first = 0) {
		p += strspn(p, " \t");
		if (*p == '\0')
			break;
		w = p;
		n = strcspn(p, " \t");
		p += n;
		if (*w == '#' || *w == '~')
			return 1;
		if (!first)
			continue;
		if (memchr(w, '=', n) != NULL)
			return 1;
		for (i = 0; shell_words[i] != NULL; i++)
			if (strlen(shell_words[i]) == n &&
			    memcmp(shell_words[i], w, n) == 0)
				return 1;
	}
	return 0;
}
