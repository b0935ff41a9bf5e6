/*
 * parallel.h: GNU parallel's input language in gpupool-run: COMMAND :::
 * grids and their sources (grid.c, gridsrc.c), replacement strings and
 * the shell quoting (repl.c). Pure but for the sources' reading; used by
 * the options (opts.c, popts.c), the master (tasks.c, live.c, run.c) and
 * the worker (spawn.c: repl_slot(), cmdline_needs_shell()). Includes
 * common/cli.h only.
 */
#ifndef GP_PARALLEL_H
#define GP_PARALLEL_H

#include "common/cli.h"

/* grid.c, gridsrc.c: COMMAND ::: a b ::: x y, GNU parallel's argument
 * grids: the sources read and checked, task N of their product made on
 * demand. */
enum grid_pack { PACK_NONE, PACK_M, PACK_X };

/* How a grid's sources are read and its tasks made (opts.c fills it). */
struct grid_conf {
	const char	*colsep;	/* --colsep SEP, or NULL */
	int		 header;	/* --header : */
	const char	*arg_sep;	/* ":::", or --arg-sep's */
	const char	*file_sep;	/* "::::", or --arg-file-sep's */
	const char	*delim;		/* between arguments: "\n", -d's, -0's */
	size_t		 dlen;
	const char	*eof_str;	/* -E: the argument that ends a source */
	int		 no_empty;	/* -r: blank arguments skipped */
	int		 link;		/* --link: every source linked */
	int		 quote;		/* -q: COMMAND's words each quoted */
	long		 per_task;	/* -N: rows per task (1); 0: -N0, one
					   row inserting nothing */
	char		 nopt;		/* 'N' or 'n' gave per_task, or 0: a
					   cap on -m's and -X's tasks */
	int		 ctx;		/* REPL_CTX with -X or -N (not -n, nor
					   -m alone): GNU parallel's context
					   replace; else 0 */
	const char	*shell;		/* what runs the lines: how values
					   are quoted (repl_shell()) */
	enum grid_pack	 pack;		/* -m, -X */
	size_t		 max_chars;	/* -s: the length -m and -X fill */
	const char	**argfile;	/* -a FILE..., the first sources */
	int		 nargfile;
	int		 stdin_args;	/* COMMAND alone: standard input */
};

struct grid_src {
	const char	*what;		/* ":::", ":::+" or the file's path
					   (points into argv) */
	char		**val;		/* nrow rows of ncol values */
	size_t		 nval, nrow;
	int		 ncol;		/* 1, or the columns of --colsep */
	int		 linked;	/* :::+, ::::+: steps with the one
					   before, not crossed with it */
	int		 ended;		/* -E's string came */
};

struct grid {
	char		*tmpl;		/* COMMAND's words, joined by blanks
					   (-q: each quoted) */
	const struct grid_conf *gc;
	char		**word;		/* COMMAND's words (argv's) */
	int		 nword;
	struct grid_src	*src;
	int		 nsrc;
	int		 ncol;		/* a row's columns: {1}..{ncol} */
	char		**name;		/* ncol names (--header :), or NULL */
	unsigned long	 nunit;		/* rows of the product (so far) */
	unsigned long	 nrow;		/* tasks (so far, when streamed) */
	int		 stream;	/* the lone source is read as the run
					   goes: gridsrc_feed() */
	int		 sfd;		/* ... its fd until tasks.c takes it */
	int		 ended;		/* every source read to its end */
	int		 ready;		/* columns known: names, -q, -m base */
	int		 rflags;	/* what every expansion takes: the
					   shell's quoting, REPL_CTX */
	unsigned long	 nread;		/* records of the stream, for messages */
	unsigned long	*cut;		/* -m, -X: task k ends before row
					   cut[k - 1] */
	size_t		 ncut, capcut;
	unsigned long	 packed;	/* rows placed in tasks so far */
	size_t		 packlen;	/* the open task's length */
	size_t		 base;		/* the line with no row */
	size_t		 blank;		/* what joins a row to the one before */
	struct gp_buf	 scratch;
};

/* Which separator word s is: 0 none, 1 ":::" (or --arg-sep's), 2 "::::"
 * (--arg-file-sep's); *link for their '+' forms. */
int	gridsrc_sep(const struct grid_conf *gc, const char *s, int *link);
int	gridsrc_word(const struct grid_conf *gc, const char *s);
/* argv[0..argc): COMMAND's words, then the sources (besides gc's -a files
 * and standard input). Reads the sources (but a lone one that is a pipe,
 * read as the run goes) and checks what the tasks expand to, in time
 * and memory that follow the sources, not their product: {N} past the
 * columns, a row over LINE_MAX_BYTES, a bad tag (in every row while the
 * combinations of the values before its ']' are at most 2^20; past
 * that, and for tasks of several rows, tasks_next() checks each as it
 * comes). 0, or -EINVAL (err says what is wrong: no command, an empty
 * source, a bad line as file:line, linked sources of different lengths,
 * a bad row as grid:N) or another -errno (a file that cannot be read:
 * err says so). g (which keeps gc and argv) is released by
 * grid_release() after a 0 only. */
int	grid_parse(struct grid *g, char **argv, int argc,
	    const struct grid_conf *gc, char *err, size_t errlen);
/* gridsrc.c for grid_parse(): the sources at argv[i..argc) (argv[i] a
 * separator, or i == argc) and gc's. 0 or -errno with err. */
int	gridsrc_sources(struct grid *g, char **argv, int argc, int i, char *err,
	    size_t errlen);
/* A streamed grid's source: the records rd has now into its values
 * (grid_grown() makes them rows and tasks). 1 (some came, or the input
 * ended), 0 (none: poll), or -errno with err (file:N). */
int	gridsrc_feed(struct grid *g, struct rdr *rd, char *err, size_t errlen);
/* Rows came (or the input ended): the columns, tasks and cuts again. 0
 * or -errno with err. */
int	grid_grown(struct grid *g, char *err, size_t errlen);
/* Task seq (1 to g->nrow) expanded into out: its line, NUL-terminated
 * (out->len counts the NUL). 0, or -EINVAL or -ENOMEM with err. */
int	grid_line(const struct grid *g, unsigned long seq, struct gp_buf *out,
	    char *err, size_t errlen);
/* Task seq's arguments, joined by blanks as GNU parallel's --tag shows
 * them, into buf (len bytes, cut to fit). Returns the length. */
size_t	grid_args(const struct grid *g, unsigned long seq, char *buf,
	    size_t len);
/* --tagstring's fmt for task seq, its replacement strings expanded with
 * its arguments unquoted and {%} slot, into buf as grid_args(). */
size_t	grid_tag(const struct grid *g, unsigned long seq, const char *fmt,
	    int slot, char *buf, size_t len);
void	grid_release(struct grid *g);

/* repl.c: replacement strings and shell quoting, pure. */
enum repl_flags {
	REPL_RAW = (1 << 0),	/* values unquoted, {%} is slot, nothing
				   appended: --tagstring's text */
	REPL_CTX = (1 << 1),	/* -X, -N: a word holding {} once per
				   value */
	REPL_CSH = (1 << 2),	/* values quoted for (t)csh, */
	REPL_RC = (1 << 3),	/* for rc, */
	REPL_FISH = (1 << 4),	/* for fish (else for sh): repl_shell() */
};

struct repl_args {
	const char *const *val;		/* ncol values: {1}..{ncol} */
	const char *const *name;	/* names of the first columns ({lr}),
					   or NULL */
	int		 ncol;
	unsigned long	 seq;		/* {#} */
	int		 decl;		/* the {N} a task may name, when more
					   than ncol: those past ncol (-N's
					   last task) expand to nothing */
	int		 nname;		/* names; 0: ncol */
	int		 flags;		/* enum repl_flags */
	int		 slot;		/* REPL_RAW: {%}, from 1; 0: kept */
};

/* s[0..n) as one shell word into b: bare when it holds only
 * [A-Za-z0-9_+=/.,:@%^-], else single-quoted ('\'' for a quote); with
 * REPL_CSH, REPL_RC or REPL_FISH in flags, as GNU parallel quotes for
 * (t)csh and rc, and as fish reads quotes (\\ and \'). Never spelling
 * "{%}". 0 or -ENOMEM. */
int	repl_quote(struct gp_buf *b, const char *s, size_t n, int flags);
/* The quoting shell takes, by its name: REPL_CSH for one that holds
 * "csh" (GNU parallel's rule), REPL_RC for rc, REPL_FISH for fish, 0 for
 * sh's (the Bourne shells, and any other; NULL too). */
int	repl_shell(const char *shell);
/* tmpl with its replacement strings ({}, {N}, {name}, {#}, each with .,
 * /, // or /. after it for a path's parts) replaced by a's values,
 * quoted; {%} is left for repl_slot(); text such as {print} stays. With
 * none, the values are appended, blank-separated. Into b (emptied
 * first), NUL-terminated. 0, -EINVAL ({N} with N past a->ncol, or 0:
 * err says so) or -ENOMEM. */
int	repl_expand(const char *tmpl, const struct repl_args *a,
	    struct gp_buf *b, char *err, size_t errlen);
/* Where a tag (need.c) may lie in the lines tmpl expands to: up to and
 * including its first ']' outside a replacement string, or all of it.
 * Sets col[i] (a->ncol of them, zeroed by the caller) for each column
 * its replacement strings there use ({} and {#}: every one; with no ']'
 * and no replacement string at all, the values appended: every one).
 * Returns that length, or -EINVAL as repl_expand(). */
ssize_t	repl_head(const char *tmpl, const struct repl_args *a,
	    unsigned char *col, char *err, size_t errlen);
/* tmpl[0..n) (n as repl_head() gave it) expanded into b as repl_expand()
 * expands the whole, NUL-terminated; no values are appended. */
int	repl_expand_head(const char *tmpl, size_t n,
	    const struct repl_args *a, struct gp_buf *b, char *err,
	    size_t errlen);
/* Whether s holds a {= perl =} of GNU parallel: -EINVAL with err
 * saying it is refused, else 0. */
int	repl_perl(const char *s, char *err, size_t errlen);
/* -q: COMMAND's words, each quoted for the shell as one word, its
 * replacement strings left (a's names are known ones), joined by blanks,
 * into b (emptied first), NUL-terminated. 0, -EINVAL as repl_expand(),
 * or -ENOMEM. */
int	repl_quote_words(char *const *word, int n, const struct repl_args *a,
	    struct gp_buf *b, char *err, size_t errlen);
/* cmd with each {%} replaced by slot: a malloc()ed string (the caller
 * frees it), or NULL: out of memory. Safe in a worker. */
char	*repl_slot(const char *cmd, int slot);
/* Whether cmd needs /bin/sh -c (shell syntax or a builtin first): the
 * master checks --shell's lines with it, a worker what it runs. */
int	cmdline_needs_shell(const char *cmd);


#endif /* GP_PARALLEL_H */
