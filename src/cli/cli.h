/*
 * cli.h: gpupool-run, the command-line tool on top of libgpupool: what
 * every process of it shares. The tool's processes each have a header
 * that includes this one: master.h (the run, its options and output:
 * rank 0's master and each rank's), worker.h (a pool worker running a
 * task) and ranks.h (the ranks' transport and wire formats, and the MPI
 * process). This one holds the pure formats and helpers (input records,
 * grids, replacement strings, task tags, the running median) and the
 * bytes a master and its workers exchange (a task, its reply, live
 * output), with their one encoder and decoder (wire.c). Grouped by the
 * file that holds each declaration (as OpenBSD's imsg.h does). Functions
 * return 0 (or a documented count) on success and a negative errno
 * value on failure; they never print, except where a comment says so.
 * Never installed.
 */
#ifndef GP_CLI_H
#define GP_CLI_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <signal.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "gpupool.h"
#include "../io.h"

#define CLI_NAME	"gpupool-run"
#define LINE_MAX_BYTES	(1u << 20)	/* longest task line (joined) */
#define OUTPUT_MAX	(16u << 20)	/* captured bytes per stream */
#define EXIT_FATAL	255		/* the exit status of a run that
					   failed as a whole */

/* rdr.c: input read a chunk at a time and cut into records. */
struct rdr {
	int		 fd;		/* -1: none */
	int		 pollable;	/* a pipe or tty: read only if ready */
	int		 regular;	/* a regular file: can be scanned */
	int		 eof;
	char		*buf;		/* raw bytes read, buf[off..len) unseen */
	size_t		 off, len, cap;
};

/* A reader on fd (r owns it from now: rdr_close() closes it unless it is
 * 0). 0, -EISDIR, -ENOMEM or -errno of fstat(). */
int	rdr_open(struct rdr *r, int fd);
void	rdr_close(struct rdr *r);
/* More bytes: 1 (read some, or r->eof now set), 0 (a pollable fd has
 * none now), or -errno. */
int	rdr_fill(struct rdr *r);
/* The next record, ended by delim (dlen bytes, not part of it), at
 * most max bytes: 1 with *p and *n (pointing into the buffer, valid until
 * the next call), 0 (none whole yet: rdr_fill()), -1 (nothing left at
 * EOF; bytes after the last delimiter were the last record), or -E2BIG
 * (no delimiter within max bytes). */
int	rdr_next(struct rdr *r, const char *delim, size_t dlen, size_t max,
	    const char **p, size_t *n);

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

/* need.c: what a task needs of the GPUs: a tag at the start of its
 * line ("[mem=20G gpus=2] cmd"), and the values of --mem and
 * --gpus-per-task. Pure; messages are for the caller to prefix with the
 * file and line or the option. */
#define NEED_GPUS_MAX	1024

struct task_need {
	uint64_t	 mem;		/* GPU memory, bytes per GPU; 0: not
					   given */
	int		 gpus;		/* GPUs; 0: not given */
};

/* The tag at the start of line, if any (after blanks; only a '['
 * followed at once by a lower-case key and '=' starts one: "[ -f x ]"
 * and "[[" are commands): keys mem=SIZE and gpus=N, in any order,
 * blank-separated, each at most once, up to ']'; the blanks after it
 * are skipped. Returns the offset of the command in line (0 and *nd
 * zeroed without a tag), or -EINVAL with err saying why: an unknown
 * key, a bad value, no ']', no command. */
int	need_parse(const char *line, struct task_need *nd, char *err,
	    size_t errlen);
/* A GPU count, s[0..n): 1 to NEED_GPUS_MAX. 0 and *gpus, or -EINVAL
 * with *why a static string. */
int	need_gpus(const char *s, size_t n, int *gpus, const char **why);

/* gp_feed.need for gpupool-run's items (a struct task_hdr, then the
 * task's line): its tag's mem and gpus, else mem and gpus (--mem's and
 * --gpus-per-task's). */
void	need_for_item(uint64_t mem, int gpus, const struct gp_item *it,
	    struct gp_need *need);
/* Write a tag declaring mem bytes (rounded up to MiB) and the line's
 * own gpus= into line (a tagged or untagged task line of len bytes) as
 * a new line in out (outcap bytes). Returns the new line's length, or
 * -ENOSPC. */
int	need_retag(const char *line, uint64_t mem, char *out, size_t outcap);

/* median.c: the running median of a stream of values (two heaps), for
 * --timeout N%. */
struct median {
	double		*lo;		/* max-heap: the lower half */
	double		*hi;		/* max-heap of the negated upper half */
	size_t		 nlo, nhi, cap;
};

/* Add v. 0, or -ENOMEM (m is as it was). */
int	median_add(struct median *m, double v);
/* The median of the values added (the lower one of an even count, as GNU
 * parallel takes it), or -1 when none was. */
double	median_get(const struct median *m);
/* Free m's arrays; m is empty again. */
void	median_release(struct median *m);

#define SHELL_MAX	4096		/* the shell's path, with its NUL */

/* say.c: messages, git style ("gpupool-run: ..." on stderr), from any
 * part of the tool; they print, as their names say. */
void	out_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void	out_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void	out_verr(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
/* While a run owns the streams (output.c's out_attach()), each message
 * first calls before(arg) (it clears a bar; the rank to name, 0: none),
 * then line(arg) takes the line in place of a write to stderr. NULLs:
 * none again. */
typedef int	say_before_fn(void *arg);
typedef void	say_write_fn(void *arg, const void *p, size_t n);
void	say_through(say_before_fn *before, say_write_fn *line, void *arg);

/* Between a master and its workers: the run's settings a worker gets
 * when the pool forks it (struct run_conf), then per task a struct
 * task_hdr, the task's line and a NUL; a worker runs it in a process
 * group of its own (spawn.c) and replies with a struct task_reply
 * followed by the captured stdout, stderr, a message and the GPUs it
 * held. rproto.c encodes and decodes both, and is the only code that
 * reads or writes their bytes. */
struct run_conf {
	uint64_t	 timeout_ms;	/* 0: none */
	uint64_t	 grace_ms;	/* TERM to KILL */
	int32_t		 results_fd;	/* inherited dir fd, or -1 */
	int32_t		 rank;		/* GPUPOOL_RANK */
	int32_t		 mpi;		/* drop MPI's variables from tasks */
	int32_t		 grid;		/* tasks of a grid: {%} is the slot */
	int32_t		 live_fd;	/* live output's channel (live.c), or
					   -1: output comes with the reply */
	int32_t		 threads;	/* --threads: 0 its CPUs, -1 none, N */
	char		 shell[SHELL_MAX];	/* what runs a task's line
					   that needs a shell: popt_shell() */
};

struct task_hdr {
	uint64_t	 seq;
	uint32_t	 attempt;	/* 1-based */
	uint32_t	 cmdlen;	/* bytes after the header, plus a NUL */
	uint64_t	 timeout_ms;	/* its own limit (--timeout N%); 0: the
					   run's, run_conf's */
};

enum reply_flags {
	R_TIMEDOUT = (1 << 0),		/* our deadline fired */
	R_STOPPED = (1 << 1),		/* the master asked to stop it */
	R_NOSTART = (1 << 2),		/* could not be started (see msg) */
	R_OUTCUT = (1 << 3),		/* stdout over OUTPUT_MAX: cut */
	R_ERRCUT = (1 << 4),		/* stderr over OUTPUT_MAX: cut */
	R_NORESULT = (1 << 5),		/* --results files not written (msg) */
};

struct task_reply {
	int32_t		 exitval;	/* exit code, -1 if signaled */
	int32_t		 signal;	/* 0, or the signal that ended it */
	int32_t		 flags;		/* enum reply_flags */
	int32_t		 pad;
	int64_t		 start_ns;	/* CLOCK_REALTIME at spawn */
	int64_t		 run_ns;	/* CLOCK_MONOTONIC, spawn to exit */
	uint64_t	 outlen, errlen, msglen;
	uint64_t	 outcut, errcut;	/* bytes dropped */
	uint64_t	 gpuslen;	/* after msg: the GPUs it held, when
					   more than its worker's own (their
					   CUDA_VISIBLE_DEVICES) */
	uint64_t	 gpu_mem;	/* peak GPU memory, bytes, and */
	int32_t		 gpu_util;	/* mean % (-1: unknown), from the
					   master's monitor: rp_reply_usage() */
	int32_t		 gpu_samples;
	int64_t		 peak_rss_kb;	/* the task's peak resident memory,
					   KiB (wait4()'s ru_maxrss); 0:
					   unknown (it never started) */
};

/* rproto.c: the task's header into the first bytes of b, a task of len
 * bytes in all (h->cmdlen is set from len: the line and its NUL). */
void	rp_task_encode(uint8_t *b, size_t len, const struct task_hdr *h);
/* The task at the start of b[0..len) (as a worker gets it, or one of an
 * RM_TASKS payload): its header in *h and its length (header, line and
 * NUL), or -EPROTO. */
ssize_t	rp_task_decode(const uint8_t *b, size_t len, struct task_hdr *h);
/* A reply's header rp into the first bytes of b; the bytes it counts
 * follow it. */
void	rp_reply_encode(uint8_t *b, const struct task_reply *rp);
/* A whole reply b[0..len) (NULL: none): its header in *rp and 0, or
 * -EPROTO (too short, or its lengths do not add up to len). */
int	rp_reply_decode(const void *b, size_t len, struct task_reply *rp);
/* The GPU figures u (gp_pool_usage()'s) into the whole reply b[0..len):
 * the master adds them, the worker cannot know them; a reply that is not
 * whole is left as it is. */
void	rp_reply_usage(void *b, size_t len, const struct gp_usage *u);

/* spawn.c (worker.h): the gp_fn every worker runs, what the master
 * gives the pool; arg is a struct run_conf. */
int	spawn_task(struct gp_ctx *ctx, const void *in, size_t inlen, void *arg);

/* reap.c (worker.h), in every process that is a subreaper: the
 * workers, and the master at the run's end. */
/* Note the children this process has now (inherited across exec), which
 * reap_leftovers() must leave alone: call it before becoming a subreaper
 * and before forking. 0 or -ENOMEM. */
int	reap_keep_children(void);
/* SIGKILL and reap, by pid, every child this process has, and theirs,
 * while a pass reaps some: call it only when each child of its own has
 * been reaped, so that every child left (but those reap_keep_children()
 * noted) is an orphan it adopted as their subreaper
 * (PR_SET_CHILD_SUBREAPER). */
void	reap_leftovers(void);

/* cmdline.c (worker.h), pure. */
/* Whether cmd needs /bin/sh -c (shell syntax or a builtin first). */
int	cmdline_needs_shell(const char *cmd);

/* live.c's records: a worker's output as it comes, on the channel to
 * the master (capture.c sends them, live.c prints them). */
#define LIVE_REC	16384		/* bytes in a record, at most */
#define LIVE_HOLD	65536		/* a worker's bytes per stream waiting
					   for the channel, at most */

/* A record's header; its bytes follow, up to the end of the record. */
struct live_hdr {
	uint64_t	 seq;
	int32_t		 worker;
	int32_t		 stream;	/* 1 stdout, 2 stderr */
};

#endif /* GP_CLI_H */
