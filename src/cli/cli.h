/*
 * cli.h: gpupool-run, the command-line tool on top of libgpupool. One
 * header for the files of src/cli/, grouped by the file that holds each
 * declaration (as OpenBSD's imsg.h does). Functions return 0 (or a
 * documented count) on success and a negative errno value on failure;
 * they never print, except where a comment says so. Never installed.
 */
#ifndef GP_CLI_H
#define GP_CLI_H

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
#define RESULTS_LOCK	".gpupool-run.lock"	/* in --results DIR */

/* files.c: the files a run reads and writes, each noted where it is
 * opened, and the one check that no output is an input or another
 * output. */
enum file_role {
	FILE_IN,		/* read: tasks file, :::: file, topology */
	FILE_OUT,		/* written in place: the joblog */
	FILE_REPLACED,		/* renamed over at the end: --timeline */
	FILE_DIR,		/* written in its DIR/<seq>/: --results */
	FILE_STREAM,		/* standard output or error */
};

/* Note a file of the run: what names it in messages ("joblog", "tasks
 * file", "standard output": a static string), path as given (NULL: a
 * standard stream, named by fd, or standard input read as an input), fd
 * open on it or -1 (then path is stat()ed; it need not exist). It is
 * checked against every file noted before: an output (anything but
 * FILE_IN) may not be the same file as an input or another output, by
 * any name (hard or symbolic links, /dev/stdin), nor lie in a FILE_DIR's
 * DIR/<seq>/; two inputs, or two streams, may. 0, or -EEXIST with err
 * saying which two ("joblog 'x' is the :::: file 'y': nothing was run"),
 * or -ENOMEM. */
int	files_note(enum file_role role, const char *what, const char *path,
	    int fd, char *err, size_t errlen);
/* Forget every file noted. */
void	files_release(void);

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

/* tasks.c: the tasks file, read incrementally. */
enum tasks_rc {
	TASKS_AGAIN = 0,	/* no whole task yet; poll the fd */
	TASKS_LINE = 1,		/* a task: line, llen, seq, first */
	TASKS_EOF = 2,		/* no more tasks */
};

struct joblog;
struct tasks {
	const char	*name;		/* for messages: path or "<stdin>" */
	struct rdr	 rd;		/* a file's, or a streamed grid's */
	char		*line;		/* the task being joined */
	size_t		 llen, lcap;
	int		 joining;	/* last line ended in '\' */
	unsigned long	 lineno;	/* physical lines consumed */
	unsigned long	 first;		/* first line of the current task */
	unsigned long	 seq;		/* the last task's Seq */
	unsigned long	 nth;		/* tasks returned so far (Seq, but for
					   --retry-failed's) */
	size_t		 cmd;		/* the command's offset in line, after
					   a [mem=... gpus=...] tag (need.c) */
	struct grid	*grid;		/* tasks of a grid, not a file's lines */
	const struct joblog *jl;	/* --retry-failed: its failed tasks */
	size_t		 at;		/* ... the next of its entries */
	char		 err[256];	/* "file:line: what" after an error */
};

int	tasks_open(struct tasks *t, const char *path, char *err, size_t errlen);
/* The tasks of g (which must outlive t) as the tasks, named "grid" in
 * messages: task N is the line g expands for it; a streamed grid's
 * source is read here as the run goes (its fd is t->rd's). 0 or
 * -errno. */
struct grid;
int	tasks_open_grid(struct tasks *t, struct grid *g);
/* --retry-failed: the tasks j (loaded with keep_cmd; it must outlive t)
 * records as failed, by Seq, each with its command there. 0. */
int	tasks_open_list(struct tasks *t, const struct joblog *j);
/* Next task: TASKS_LINE (t->line, t->llen NUL-terminated, t->seq,
 * t->first, t->cmd: its tag checked), TASKS_AGAIN (pollable input has no whole line now),
 * TASKS_EOF, or -EINVAL (bad input; t->err names file:line) or -errno
 * (read error; t->err says so). */
int	tasks_next(struct tasks *t);
void	tasks_close(struct tasks *t);
/* A pass over a regular file with a second descriptor: count its tasks
 * (calling skip(seq, command without its tag) for each; a nonzero return
 * does not count it) and find input errors before anything runs. Returns
 * the count, or as tasks_next() for an error. (A grid is not scanned:
 * grid_parse() checks its rows without making them.) */
long	tasks_scan(const char *path,
	    int (*skip)(void *, unsigned long, const char *), void *arg,
	    char *err, size_t errlen);

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
					   goes: grid_feed() */
	int		 sfd;		/* ... its fd until tasks.c takes it */
	int		 ended;		/* every source read to its end */
	int		 ready;		/* columns known: names, -q, -m base */
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
int	grid_sep(const struct grid_conf *gc, const char *s, int *link);
int	grid_word(const struct grid_conf *gc, const char *s);
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
int	grid_sources(struct grid *g, char **argv, int argc, int i, char *err,
	    size_t errlen);
/* A streamed grid's source: the records rd has now into its values
 * (grid_grown() makes them rows and tasks). 1 (some came, or the input
 * ended), 0 (none: poll), or -errno with err (file:N). */
int	grid_feed(struct grid *g, struct rdr *rd, char *err, size_t errlen);
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
	REPL_CTX = (1 << 1),	/* -X: a word holding {} once per row */
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
	int		 unit;		/* REPL_CTX: values per row */
	int		 slot;		/* REPL_RAW: {%}, from 1; 0: kept */
};

/* s[0..n) as one shell word into b: bare when it holds only
 * [A-Za-z0-9_+=/.,:@%^-], else single-quoted ('\'' for a quote), never
 * spelling "{%}". 0 or -ENOMEM. */
int	repl_quote(struct gp_buf *b, const char *s, size_t n);
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
 * task's line): its tag's mem and gpus, else --mem's and
 * --gpus-per-task's (o). */
struct opts;
void	need_for_item(const struct opts *o, const struct gp_item *it,
	    struct gp_need *need);
/* Write a tag declaring mem bytes (rounded up to MiB) and the line's
 * own gpus= into line (a tagged or untagged task line of len bytes) as
 * a new line in out (outcap bytes). Returns the new line's length, or
 * -ENOSPC. */
int	need_retag(const char *line, uint64_t mem, char *out, size_t outcap);

/* joblog.c: GNU parallel's joblog, plus trailing GPU, GPUMem and
 * GPUUtil columns. */
struct jl_ent {
	unsigned long	 seq;
	unsigned long	 line;		/* its line's order in the file */
	uint32_t	 hash;		/* of its command, never 0 */
	uint32_t	 ok;		/* Exitval 0 and Signal 0 */
	char		*cmd;		/* its command (keep_cmd), or NULL */
};

struct joblog {
	int		 fd;		/* -1: no joblog */
	const char	*path;
	int		 created;	/* joblog_lock() made the file */
	struct jl_ent	*ent;		/* after joblog_load(): sorted by Seq,
					   the last line of each Seq */
	size_t		 nent, cap;
	unsigned long	 nline;
	char		*line;		/* reused for each append */
	size_t		 lcap;
	int		 fmt;		/* its header's columns: 9 (GNU
					   parallel's: written so), 10, 12 */
	int		 keep_cmd;	/* joblog_load() keeps the commands */
};

struct jl_rec {
	unsigned long	 seq;
	double		 start;		/* epoch seconds */
	double		 runtime;	/* seconds */
	int		 exitval;	/* exit code, or -1: see gpupool-run.1 */
	int		 signal;
	const char	*cmd;
	const char	*gpu;
	const char	*host;		/* ":" for this machine */
	int64_t		 gpu_mem;	/* peak GPU memory, MiB; -1: unknown */
	int		 gpu_util;	/* mean GPU utilisation, %; -1:
					   unknown */
};

void	joblog_init(struct joblog *j);
/* Open (create) a joblog that is a regular file and lock it for the life
 * of the run, before it is read or truncated; with wait, wait for the
 * run that holds it. -EAGAIN: err names the holder's pid; -EINTR: a
 * signal ended the wait (file_lock()). */
int	joblog_lock(struct joblog *j, const char *path, int wait, char *err,
	    size_t errlen);
/* A lock of type F_WRLCK (exclusive, fd open for writing) or F_RDLCK
 * (shared) on fd, held until it is closed; -EAGAIN if another process
 * holds one that excludes it (err names its pid). With wait,
 * until it is ours, or -EINTR when SIGINT, SIGTERM or SIGHUP comes while
 * blocked (under MPI they are from the start): a wait that no signal
 * could end would leave only SIGKILL. err says why, naming what
 * ("joblog", "results directory") and path. */
int	file_lock(int fd, int type, int wait, const char *what,
	    const char *path, char *err, size_t errlen);
/* Read an existing joblog for --resume (GNU parallel's too); a missing
 * file is empty. One that cannot be read (no header first, a line that
 * is neither a record nor one a crash cut short, not a regular file) is
 * an error: -EINVAL with err naming the file and line. */
int	joblog_load(struct joblog *j, const char *path, char *err,
	    size_t errlen);
/* Open for appending (the locked fd, else path; truncate unless keep),
 * header if empty, and end a torn last line so the next record starts on
 * a line of its own. */
int	joblog_open(struct joblog *j, const char *path, int keep, char *err,
	    size_t errlen);
/* Whether Seq should be skipped: recorded at all (failed_too), or
 * recorded with success as its last outcome. */
int	joblog_done(const struct joblog *j, unsigned long seq, int failed_too);
/* 1 if the joblog has a different command for seq, else 0. */
int	joblog_changed(const struct joblog *j, unsigned long seq,
	    const char *cmd);
/* Append one line and make it durable (write + fdatasync). A TAB or a
 * newline in the command or GPU id is written \t or \n, a backslash
 * before a backslash, 't', 'n', TAB or newline \\ (so that each text
 * has one reading); a negative gpu_mem or gpu_util is written '-'. */
int	joblog_append(struct joblog *j, const struct jl_rec *r);
/* A Command or GPU field as joblog_append() wrote it back into what it
 * was, in place: \\ a backslash, \t a TAB, \n a newline; any other
 * backslash stays. */
void	joblog_unesc(char *s);
/* Close (a joblog it created and never wrote is removed), free. */
void	joblog_release(struct joblog *j);
/* The hash of a command as the joblog writes it. */
uint32_t joblog_hash(const char *s);
/* Whether path names the file st describes (path may not exist). */
int	same_file(const char *path, const struct stat *st);

/* timeline.c: --timeline FILE.svg, a picture of the run: one row per
 * GPU slot (per host and GPU when drawn from a joblog alone), one bar
 * per attempt, coloured by outcome; timeline_svg.c draws it. The file
 * is written to a temporary beside FILE, opened before anything runs,
 * and renamed over FILE at the end. */
enum tl_kind {			/* by severity: a merged column shows */
	TL_OK,			/* the worst of its attempts */
	TL_RETRIED,		/* failed, and a later attempt followed */
	TL_NOSTART,		/* could not be started */
	TL_SIGNAL,		/* killed by a signal (or stopped) */
	TL_TIMEDOUT,
	TL_FAILED,		/* exited non-zero */
	TL_NKIND
};

struct tl_bar {
	double		 start, runtime;	/* epoch s, s */
	unsigned long	 seq;
	int		 exitval, signal;
	int		 kind;		/* enum tl_kind */
	int		 row, lane;	/* lane: its sub-row (overlaps) */
	unsigned	 attempt;	/* 1-based, in joblog order */
	char		*cmd, *gpu;	/* owned */
};

struct tl_row {
	char		*host;		/* ":": this machine */
	char		*gpu;		/* its slot's GPU index, or the
					   joblog's GPU */
	int		 rank;
	int		 slot;		/* -1: drawn from a joblog */
	int		 lanes;
};

struct timeline {
	const char	*path;
	char		*tmp;		/* the temporary's name beside path */
	int		 fd;		/* open on the temporary, or -1 */
	int		 named;		/* tmp names it (without O_TMPFILE, or
					   once it is drawn) */
	struct tl_bar	*bar;
	size_t		 nbar, cap;
	struct tl_row	*row;
	int		 nrow, rowcap, last;
	int		 nomem;		/* an attempt could not be kept */
	const char	*source;	/* the joblog drawn, or NULL: a run */
};

/* Create the temporary beside path (a directory, a place that cannot be
 * written, or a file of the run, which it would replace (files_note()):
 * the tasks file, a joblog, fails now, before anything runs). 0 and
 * *tlp (free it with timeline_free()), or -errno with err saying why. */
int	timeline_open(struct timeline **tlp, const char *path, char *err,
	    size_t errlen);
/* Keep one attempt: jr as recorded, flags (enum reply_flags) for what
 * the joblog cannot tell (timed out, not started), and the slot it ran
 * on: rank, slot and its GPU's index in the run (gpu, -1: unknown); slot
 * -1: rows by jr's host and GPU. Out of memory, the attempt is left out
 * and a warning says so. */
void	timeline_add(struct timeline *tl, const struct jl_rec *jr, int flags,
	    int rank, int slot, int gpu);
/* At the end of a run: draw what it kept and rename it into place, or
 * only remove the temporary when nothing ran and rc is EXIT_FATAL (bad
 * input). Frees tl. Returns rc, or EXIT_FATAL (said why) if rc was 0
 * and the picture could not be written. */
int	timeline_end(struct timeline *tl, int rc);
/* Remove the temporary, if any, and free tl (NULL: nothing). */
void	timeline_free(struct timeline *tl);
/* --from-joblog: draw o->from_joblog's attempts into o->timeline
 * (with o->timeout_ms, those killed at or past it as timed out), run
 * nothing. Returns the exit status: 0, or EXIT_FATAL after saying why. */
struct opts;
int	timeline_from_joblog(const struct opts *o);

/* timeline_svg.c: the drawing. Classifies retried attempts, spreads
 * overlapping attempts of a row over lanes, and writes the SVG to f:
 * bars wide enough (at most TL_BARS of them) one by one with a <title>,
 * the rest merged into a density strip per lane. 0, or -ENOMEM. */
#define TL_BARS		2000
int	tl_svg(FILE *f, struct timeline *tl);

#define SHELL_MAX	256		/* the shell's path, with its NUL */

/* spawn.c: the worker side. The master encodes a task, a worker runs it
 * in a process group of its own and replies with a struct task_reply
 * followed by the captured stdout, stderr and a message. */
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
					   master's monitor: reply_usage() */
	int32_t		 gpu_samples;
};

/* The gp_fn every worker runs; arg is a struct run_conf. */
int	task_run(struct gp_ctx *ctx, const void *in, size_t inlen, void *arg);

/* capture.c: a task's output, through a pipe per stream, and the reply
 * that carries it with the outcome. */
struct cap {
	int		 fd;		/* read end; -1 once closed */
	char		*data;		/* kept across tasks, owned here */
	size_t		 len, cap;
	uint64_t	 cut;		/* bytes dropped past OUTPUT_MAX */
	/* Live output: the bytes go on to the master as they come, through
	 * live_fd (run_conf's), each record a struct live_hdr. */
	int		 live_fd;	/* -1: all kept for the reply */
	int		 stream;	/* 1 stdout, 2 stderr */
	int		 worker;	/* the worker's index in the pool */
	uint64_t	 seq;		/* the task's */
	size_t		 hold;		/* kept at most while the task runs:
					   OUTPUT_MAX, or LIVE_HOLD when
					   live, then reading waits */
};

/* A nonblocking pipe for c (emptied: len and cut 0): c->fd the read end,
 * *wfd the write end for the task (the caller closes it). 0 or -errno. */
int	cap_open(struct cap *c, int *wfd);
/* Read what the pipe holds, without blocking. Returns 1 once it is
 * closed (EOF or an error: c->fd is -1 then), else 0. */
int	cap_drain(struct cap *c);
/* Close the read end, if open; the bytes stay. */
void	cap_close(struct cap *c);
/* Live output: send what c holds to the master, as records of at most
 * LIVE_REC bytes, as far as the channel takes them without waiting; the
 * rest stays for the next call (or the reply). A channel that fails
 * (the master is gone) is dropped: what is left goes with the reply.
 * Returns 1 while bytes wait for the channel (poll live_fd for
 * POLLOUT), else 0. */
int	cap_forward(struct cap *c);
/* Whether c holds hold bytes: read its pipe no more until cap_forward()
 * made room (the task then waits on its own writes). */
int	cap_full(const struct cap *c);
/* Reply rp (its lengths and R_OUTCUT, R_ERRCUT filled in here), then
 * out's and err's bytes, msg and the GPUs the item held when they are
 * more than the worker's own, through gp_ctx_reply(). Out of memory, the
 * outcome goes without the output. Frees buffers over 1 MiB. */
void	cap_reply(struct gp_ctx *ctx, struct task_reply *rp, const char *msg,
	    struct cap *out, struct cap *err);

/* The GPU figures of the attempt whose reply is it->out, as
 * gp_pool_usage() gave them (pool: the one that ran it), written into
 * its task_reply: the master adds them, the worker cannot know them. */
void	reply_usage(struct gp_pool *pool, struct gp_item *it);

/* results.c: --results DIR, and a task's files in DIR/<seq>/. */
struct run;

/* mkdir -p path, prove it writable and, on rank 0, lock it for the run
 * (--wait-lock waits). Returns its open fd, or -errno (and says why). */
int	results_dir(struct run *r, const char *path);

struct results_files {
	int		 dir;		/* DIR/<seq>, or -1 */
	char		 name[24];	/* "<seq>" */
	int		 made;		/* bit i: we created temporary i */
};

/* Open DIR/<seq>/ (rfd: DIR) for an attempt: its earlier exitval
 * removed, then temporaries for stdout and stderr created (*ofd, *efd:
 * the caller closes them). 0, or -1 with msg saying why. */
int	results_open(int rfd, uint64_t seq, struct results_files *f,
	    int *ofd, int *efd, char *msg, size_t mlen);
/* Publish the attempt's files, exitval (code) last, and close f->dir; a
 * stream whose temporary was not made loses an earlier attempt's file.
 * 0, or -1 with msg (unless NULL) saying why: the temporaries are
 * removed then. */
int	results_close(struct results_files *f, int code, char *msg,
	    size_t mlen);

/* reap.c: the processes a task leaves, reaped by pid as their
 * subreaper. */
#define NOPIDFD_TICK_MS	20	/* no pidfd_open (< Linux 5.3): poll this */
/* Note the children this process has now (inherited across exec), which
 * reap_leftovers() must leave alone: call it before becoming a subreaper
 * and before forking. 0 or -ENOMEM. */
int	keep_children(void);
/* SIGKILL and reap, by pid, every child this process has, and theirs,
 * while a pass reaps some: call it only when each child of its own has
 * been reaped, so that every child left (but those keep_children()
 * noted) is an orphan it adopted as their subreaper
 * (PR_SET_CHILD_SUBREAPER). */
void	reap_leftovers(void);
/* Once per worker: become the tasks' subreaper (PR_SET_CHILD_SUBREAPER)
 * with SIGCHLD blocked. Returns a signalfd readable when a child exits,
 * or -1 (then leftovers are reaped only by reap_leftovers()). */
int	subreaper_setup(void);
/* While a task runs: drain sigfd, then reap the children that have
 * exited, but not leader, whose status is the caller's. */
void	reap_exited(int sigfd, pid_t leader);

/* cmdline.c: a task's line as a command: shell or words, and the
 * environment it gets. Buffers are the file's own, kept across calls. */
/* Whether cmd needs /bin/sh -c (shell syntax or a builtin first). */
int	needs_shell(const char *cmd);
/* The blank-separated words of cmd, NULL-terminated, valid until the
 * next call; NULL: out of memory. */
char	**cmdline_split(const char *cmd);
/* Once per worker: the environment its tasks get, the worker's less
 * GPUPOOL_* and (mpi_run) the MPI launcher's variables, plus GPUPOOL_GPU,
 * SLOT and RANK from wi and rank, TASK and ATTEMPT as cmdline_env_task()
 * sets them, and, threads >= 0 (--threads), the thread counts. Kept for
 * the worker's life; NULL: out of memory. */
char	**cmdline_env(const struct gp_worker_info *wi, int rank, int mpi_run,
	    int threads);
/* With threads >= 0 (cmdline_env()), the thread pools' variables the
 * worker's environment lacks (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, ...:
 * the user's setting wins) are n for the next task. */
void	cmdline_env_threads(int n);
/* GPUPOOL_TASK and GPUPOOL_ATTEMPT, in cmdline_env()'s array, for the
 * next task. */
void	cmdline_env_task(uint64_t seq, uint32_t attempt);
/* CUDA_VISIBLE_DEVICES in that array (the worker's own GPUs at first):
 * the next task's, e.g. the GPUs a multi-GPU task holds. 0 or -ENOMEM. */
int	cmdline_env_gpus(const char *visible);

/* mpi.c (mpi_stub.c without MPI): the ranks of a run started by an MPI
 * launcher (mpirun, srun --mpi=pmix), rank 0 the coordinator. Messages
 * are typed byte strings; the protocol is in docs/cluster.md. */
enum rmsg_type {
	RM_HELLO = 1,	/* r -> 0: struct rhello, w_gpu[], host, GPU ids */
	RM_TASKS,	/* 0 -> r: task_hdr + command + NUL, one or more */
	RM_RESULTS,	/* r -> 0: struct rresult + reply bytes, one or more */
	RM_CTL,		/* 0 -> r: one int32: enum rctl */
	RM_BEAT,	/* either way, empty: still here */
	RM_BYE,		/* r -> 0, empty: done, every result sent; before
			   RM_HELLO: it could not start */
};

enum rctl {
	RC_CANCEL = 1,	/* start nothing more, stop the running tasks */
	RC_KILL,	/* kill the running tasks now */
	RC_END,		/* no more tasks: finish and say bye */
	RC_END_LOST,	/* the same, and leave without MPI_Finalize: a rank
			   was lost, and MPI_Finalize would wait for it */
};

struct rhello {
	uint32_t	 nw;		/* slots (workers) */
	uint32_t	 ngpu;
	/* then int32_t w_gpu[nw], then NUL-terminated: the host name and
	 * ngpu CUDA_VISIBLE_DEVICES values */
};

struct rresult {
	uint64_t	 seq;
	uint32_t	 attempt;
	int32_t		 status;	/* enum gp_status */
	int32_t		 code;
	int32_t		 attempts;
	int32_t		 worker;	/* slot on that rank */
	uint32_t	 pad;
	uint64_t	 outlen;	/* then the worker's reply bytes */
};

struct rmsg {
	struct rmsg	*next;
	int		 peer;		/* sender (received) or receiver */
	int		 type;		/* enum rmsg_type */
	size_t		 len;
	uint8_t		 data[];
};

struct ranks;

/* In gpupool-run, under an MPI launcher: exec gpupool-run-mpi with argv
 * (does not return), if there is one; otherwise, or when it cannot be
 * started (err says why), return. Nothing in gpupool-run-mpi. */
void	ranks_handover(char **argv, char *err, size_t errlen);

/* MPI is initialised only when a launcher started us (its variables are
 * set), in a child process that makes every MPI call (this one never has
 * MPI's threads); otherwise *rk is NULL and the run is one machine's.
 * stop: the signals that stop the run, blocked already (as
 * run_block_signals() leaves them); a wait on the MPI process ends when
 * one comes. Fails when the launcher started several processes that
 * cannot talk. */
int	ranks_init(struct ranks **rk, const sigset_t *stop, char *err,
	    size_t errlen);
int	ranks_rank(const struct ranks *rk);	/* 0 for NULL */
int	ranks_size(const struct ranks *rk);	/* 1 for NULL */
/* The rest only with ranks_size() > 1. */
const char *ranks_host(const struct ranks *rk);
int	ranks_start(struct ranks *rk, char *err, size_t errlen);
int	ranks_fd(const struct ranks *rk);	/* readable: ranks_recv() */
int	ranks_send(struct ranks *rk, int peer, int type, const void *data,
	    size_t len);
/* Stop the heartbeats to a peer that is done or written off. */
void	ranks_forget(struct ranks *rk, int peer);
/* The next message (free() it), or NULL: none now (err "") or MPI
 * failed or its process is gone (err says why). */
struct rmsg *ranks_recv(struct ranks *rk, char *err, size_t errlen);
int64_t	ranks_silent(struct ranks *rk, int peer);	/* ns since heard */
/* Flush, then MPI_Finalize only if clean and every send completed; else
 * MPI_Abort(rc) on rank 0 (the launcher ends the job) and -EPIPE. Waits
 * for the MPI process to end: the launcher watches this one. */
int	ranks_end(struct ranks *rk, int clean, int rc);
/* "with MPI (Open MPI v4.1.4...)" or "without MPI", for --version. */
const char *ranks_build(void);

/* launcher.c: whether an MPI launcher started us, read from its variables. */
/* The process count a launcher's variables claim (1 if none), and
 * which variable said so. */
long	launcher_procs(const char **var);
/* Whether an MPI launcher started us (its wire-up variables are set):
 * then, and only then, is MPI initialised, so that a lone gpupool-run
 * starts as fast as a build without MPI. */
int	launcher_mpi(void);

/* mpi_frame.c (gpupool-run-mpi only): the frames between a rank
 * (mpi.c) and its MPI process (mpi_proc.c). */
#define RANKS_READ		65536		/* bytes per read, at least */

/* Between a rank and its MPI process: an MPI message (enum rmsg_type,
 * peer its sender or receiver) or one of these. */
enum frame_type {
	FR_READY = 100,	/* MPI -> rank: int32 rank, size */
	FR_ERR,		/* MPI -> rank: int32 errno, then why, a string */
	FR_START,	/* rank -> MPI: beat from now on */
	FR_END,		/* rank -> MPI: struct fr_end */
	FR_DONE,	/* MPI -> rank: every send completed: MPI_Finalize */
};

struct frame {
	int32_t		 type;
	int32_t		 peer;
	uint64_t	 len;		/* bytes that follow */
};

/* The run is over: MPI_Finalize if clean and every send completed, else
 * on rank 0 MPI_Abort(rc), which has the launcher end the job. */
struct fr_end {
	int32_t		 clean;
	int32_t		 rc;
};

/* The bytes of the memory a rank shares with its MPI process for size
 * ranks: int64_t heard[size] (when each was last heard from, ns), then
 * uint8_t talk[size] (whether to beat it). */
size_t	frame_shm_len(int size);
/* Whether a whole frame is at the head of b: 1 with its header in *f and
 * its bytes at *data (gp_buf_consume(b, sizeof(*f) + f->len) takes it),
 * else 0. */
int	frame_get(struct gp_buf *b, struct frame *f, const uint8_t **data);
/* An MPI message frame as a struct rmsg (free() it), or NULL: out of
 * memory. */
struct rmsg *frame_msg(const struct frame *f, const uint8_t *data);
/* Append a frame to b. 0 or -ENOMEM. */
int	frame_put(struct gp_buf *b, int type, int peer, const void *data,
	    size_t len);

/* mpi_proc.c (gpupool-run-mpi only): the MPI process, forked by
 * ranks_init(). MPI_Init, FR_READY (or FR_ERR), then pass messages
 * between MPI and the rank on fd until the rank says FR_END; memfd is the
 * shared memory, parent the rank's pid. Never returns. */
void	mproc_main(int fd, int memfd, pid_t parent)
	    __attribute__((noreturn));

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

/* opts.c: the options, as parsed and checked. */
#define EXIT_FATAL		255
#define DEFAULT_GRACE_MS	5000
#define DEFAULT_RANK_TIMEOUT_MS	30000

enum halt { HALT_NEVER, HALT_SOON, HALT_NOW };
/* What --halt counts: tasks that failed, succeeded, or ended either way. */
enum halt_on { HALT_ON_FAIL, HALT_ON_SUCCESS, HALT_ON_DONE };
/* How task output is printed: a block per stream when the task ends,
 * line by line as it comes, or bytes as they come. */
enum out_mode { OUT_GROUP, OUT_LINE, OUT_UNGROUP };

struct opts {
	const char	*file;
	const char	*joblog;	/* without +FILE's '+' */
	int		 joblog_append;	/* it was +FILE: keep what it has */
	const char	*results;
	const char	*topology;
	const char	*fake_busids;
	int		 fake_gpus;
	int		 per_gpu;
	int		 retries;
	uint64_t	 timeout_ms;
	uint64_t	 grace_ms;
	enum halt	 halt;
	int		 halt_fail;	/* --halt's N: a count, or with halt_pct
					   a percentage */
	int		 resume;
	int		 resume_failed;
	int		 wait_lock;	/* wait for a locked joblog, DIR */
	int		 threads;	/* --threads: 0 cpus, -1 no, or N */
	int		 bar;
	int		 dry_run;
	int		 show_gpus;
	int		 quiet;
	uint64_t	 rank_timeout_ms;
	struct gp_pool_opts pool;	/* --gpus, --busy-pct, --wait-free as
					   the library set them from their
					   text (gp_pool_opts_set()); run.c
					   starts the pool's from it */
	uint64_t	 mem;		/* --mem, bytes per GPU; 0: none */
	int		 gpus_per_task;	/* --gpus-per-task; 0: not given (1) */
	/* COMMAND ::: ... (grid.c) rather than FILE. */
	char		**grid_argv;	/* COMMAND's first word on; NULL:
					   FILE */
	int		 grid_argc;
	struct grid_conf gc;		/* how its arguments are read and its
					   tasks made (popts.c) */
	/* GNU parallel's others (popts.c). */
	int		 jobs;		/* -j N: slots in all; 0: --per-gpu */
	int		 per_gpu_set;	/* --per-gpu was given */
	int		 keep_order;	/* -k */
	int		 verbose;	/* each task's command first: on stdout
					   (-v, 1) or stderr (--verbose, -t,
					   2), as parallel prints it */
	const char	*tagstring;	/* --tagstring STR */
	const char	*shell;		/* --shell PATH */
	int		 retry_failed;	/* --retry-failed: the joblog's failed
					   tasks are the tasks */
	/* GNU parallel's --delay, --halt ...=N% and --timeout N% (feed.c). */
	uint64_t	 delay_ms;	/* --delay: between two starts; 0: none */
	const char	*halt_arg;	/* --halt's POLICY as given */
	enum halt_on	 halt_on;
	int		 halt_pct;	/* halt_fail is N% of all the tasks */
	double		 timeout_pct;	/* --timeout N%: of the median runtime
					   of the tasks that succeeded; 0: no */
	const char	*timeline;	/* --timeline FILE.svg */
	const char	*from_joblog;	/* --from-joblog LOG: draw it only */
	enum out_mode	 out_mode;	/* --line-buffer, --ungroup */
	int		 tag;		/* --tag */
};

/* popts.c: GNU parallel's options, as parallel means them, those it
 * refuses, and what the words after the options are. The codes of its
 * long options without a short one (the others are their letter). */
enum popt {
	POPT_BASE = 512,
	POPT_ARGSEP = POPT_BASE, POPT_FILESEP, POPT_TAGSTRING, POPT_SHELL,
	POPT_LINK, POPT_RETRYF, POPT_VERBOSE,
};

/* A count: digits only (no sign, no blank), lo to hi, into *out. 0 or
 * -EINVAL. */
int	popt_count(const char *s, long lo, long hi, long *out);
/* Defaults: ::: and ::::, "\n", one row per task, -s's length. */
void	popt_init(struct opts *o);
/* Option c (a letter of -j -P -N -n -s -E -a -d -0 -k -m -X -r -q -v, or
 * an enum popt) with its value arg. 0, or -1 after saying why. */
int	popt_set(int c, const char *arg, struct opts *o);
/* A GNU parallel option gpupool-run does not take (opt as written, with
 * its dashes): 1 after saying why, or 0 when opt is none of them. */
int	popt_refused(const char *opt);
/* Whether w[0], the first of n words after options, is a tasks file
 * (- or a file that is not a program, with no ::: after it): options may
 * follow it. */
int	popt_file(char **w, int n, const struct opts *o);
/* argv[first..argc), the words after the options: a tasks file
 * (o->file), or COMMAND and its sources (o->grid_argv; with none, -a's
 * or standard input's arguments), or nothing (--retry-failed). 0, or -1
 * after saying why. */
int	popt_operands(int argc, char **argv, int first, struct opts *o);

/* The shell tasks run in (popts.c): --shell, else $PARALLEL_SHELL, else
 * the shell gpupool-run was started from (its parent, when that is a
 * POSIX shell: sh, bash, dash, ksh, mksh, zsh, ash, yash, posh), else
 * /bin/sh, into buf. 0, or -1 after saying why (too long, not a program
 * that can be run). */
int	popt_shell(const struct opts *o, char *buf, size_t len);
/* Free what opts_parse() allocated (-a's list, -d's delimiter). */
void	opts_release(struct opts *o);

/* usage.c: the --help text. */
extern const char usage_text[];

/* Parse argv into *o (which points into argv). Prints what is wrong, or
 * --help, --version. Returns 0 to go on, 1 to exit 0 (help, version), -1
 * after an error. */
int	opts_parse(int argc, char **argv, struct opts *o);

/* output.c: what the run writes. Task output, messages and the bar go
 * through a queue per stream (struct outq) while the run owns stdout and
 * stderr (r->out_on), else straight to the stream. */
struct run;
struct task;
struct attempt;

/* Standard output or error, written only as far as it takes bytes
 * without blocking (out_flush()). */
struct outq {
	int		 fd;		/* STDOUT_FILENO, STDERR_FILENO */
	int		 ev;		/* EV_OUT, EV_ERR */
	struct gp_buf	 buf;		/* not written yet */
	int		 poll;		/* fd is in epfd: a write can wait */
	int		 armed;		/* EPOLLOUT armed, one shot */
	int		 err;		/* writing failed or was given up */
};

/* Messages, git style ("gpupool-run: ..."); they clear the bar first. */
void	cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void	cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A notice about a task; --quiet drops it. */
void	note(const struct run *r, const char *fmt, ...)
	    __attribute__((format(printf, 2, 3)));
/* Messages clear r's bar and take its queues from now (out_attach())
 * until out_detach(r). */
void	out_attach(struct run *r);
void	out_detach(struct run *r);
/* Write what q holds as far as its stream takes it now; when it would
 * wait, arm EPOLLOUT (one shot) in r->epfd. A write error on stdout
 * fails the run and halts it (r->halt). */
void	out_flush(struct run *r, struct outq *q);
/* Whether stdout or stderr holds over OUT_BACKLOG bytes: start nothing
 * new meanwhile. */
int	out_backlog(const struct run *r);
/* Whether stdout failed since the last call (then cancel the pool). */
int	out_halted(struct run *r);
/* After the run: write what is left, for as long as the streams take it,
 * but after a signal no longer than its grace period; then stop queuing
 * (r->out_on = 0). */
void	out_drain(struct run *r);
/* The progress bar: its terminal width (bar_size()); drawn at most every
 * BAR_PERIOD_NS unless force; drawn again after SIGWINCH (bar_winch(),
 * when run_signals() set r->winch). */
void	bar_size(struct run *r);
void	bar_draw(struct run *r, int force);
/* Said once each, so that no run waits in silence: the GPU monitor gone
 * mid-run (every GPU then counts as free), and, without --bar, a wait
 * for a GPU of WAIT_NOTE_NS while nothing of ours runs, with why (only
 * others can end it). Called on each task's end and each timer tick. */
void	gpu_notes(struct run *r);
void	bar_winch(struct run *r);
/* "1h02m", "3m05s", "7s". */
void	fmt_secs(char *buf, size_t len, double s);
/* Bytes of a task's stream fd (STDOUT_FILENO, STDERR_FILENO), the bar
 * cleared first: with raw, as they are; else as lines, each after tag
 * and a TAB when tag is not NULL, and a newline after a last line that
 * has none. */
void	out_task(struct run *r, int fd, const char *tag, const char *p,
	    size_t n, int raw);
/* The last line: counts, wall time, busy share per GPU or rank. */
void	summary(struct run *r);

/* live.c: a task's output as the master prints it: grouped when the
 * task ends, or (--line-buffer, --ungroup) as it comes, through a
 * channel that every worker shares (a SOCK_SEQPACKET socketpair made
 * before the pool forks: each record one send, whole), and --tag. */
#define LIVE_REC	16384		/* bytes in a record, at most */
#define LIVE_HOLD	65536		/* a worker's bytes per stream waiting
					   for the channel, at most */
#define LIVE_LINE_MAX	(1u << 20)	/* a longer line is printed in
					   pieces of this size */
#define TAG_MAX		1024		/* --tag's text, at most (cut) */

/* A record's header; its bytes follow, up to the end of the record. */
struct live_hdr {
	uint64_t	 seq;
	int32_t		 worker;
	int32_t		 stream;	/* 1 stdout, 2 stderr */
};

/* A worker's task, as its records come: the line each stream began. */
struct live_task {
	unsigned long	 seq;		/* 0: none */
	struct gp_buf	 part[2];	/* stdout, stderr */
};

struct live {
	int		 rfd, wfd;	/* the channel; -1: not live */
	int		 armed;		/* rfd in epfd, one shot */
	size_t		 queued;	/* it holds at most this many bytes */
	struct live_task *w;		/* per worker of this rank */
	int		 nw;
};

/* Before the pool forks (run_conf's live_fd: the workers' end, or -1):
 * the channel, on rank 0 with --line-buffer or --ungroup and no
 * --results. Prints why it failed. */
int	live_setup(struct run *r, struct run_conf *conf);
/* Once r->epfd exists: the channel in it (EV_LIVE). 0 or -errno. */
int	live_watch(struct run *r);
/* The channel is readable (EV_LIVE): print what came, while stdout and
 * stderr keep up (out_backlog()). GP_CTL_GO_ON, or GP_CTL_CANCEL when
 * stdout failed. */
int	live_read(struct run *r);
/* Read the channel again once stdout and stderr have room. */
void	live_arm(struct run *r);
void	live_release(struct run *r);
/* In a worker: close the master's end of the channel. */
void	live_worker(struct run *r);
/* The text --tag puts before a task's lines: "task N GPU g" (with ranks,
 * "task N rank R GPU g"). The hook for tasks that have arguments to show
 * instead. Returns its length (cut to fit len). */
size_t	task_tag(const struct run *r, unsigned long seq, int rank,
	    int worker, char *buf, size_t len);
/* A finished task's output (nothing with --results: the files have
 * it): what the channel still holds of it, then the rest, the last line
 * ended; or, grouped, as one block per stream. */
void	print_output(struct run *r, const struct task *t,
	    const struct attempt *oc);

/* order.c: -k, output in the order the tasks came in. */
#define ORDER_HELD	(64u << 20)	/* output kept before no new task
					   starts */

struct held {
	struct gp_buf	 b[2];		/* what it printed: stdout, stderr */
	int		 done;		/* it ended (or never will run) */
};

/* A window of tasks from next on, a ring of cap slots from head. */
struct order {
	struct held	*q;
	size_t		 head, cap;
	unsigned long	 next;		/* the task whose output goes next */
};

/* Before task nth's output is printed: unless it is its turn (or
 * without -k), keep it instead (r->divert). Returns whether it is kept. */
int	order_hold(struct run *r, unsigned long nth);
/* Task nth is done, printed or not (skipped, not started): what it and
 * the tasks after it kept goes out once those before it are done. */
void	order_done(struct run *r, unsigned long nth);
/* The run's end: what is kept, in order, gaps and all. */
void	order_flush(struct run *r);

/* run.c: one run, in the master (of rank 0 when there are ranks). */
/* A rank, as rank 0 sees it ([0] is itself: only its slots and GPUs). */
struct peer {
	char		*host;
	int		 nw, ngpu;
	int		*w_gpu;		/* slot -> GPU index */
	char		**gpu_id;	/* GPU index -> CUDA_VISIBLE_DEVICES */
	int64_t		*busy_ns;	/* per GPU */
	struct task	*out;		/* sent to it, not done */
	size_t		 nout;
	unsigned long	 ran;		/* attempts that ended there */
	int		 hello;		/* it said hello: its pool is up */
	int		 bye;		/* it is done */
	int		 lost;		/* silent too long: written off */
};

/* What woke the feed's control fd (an epoll set): epoll_event.data.u32. */
enum ctl_ev { EV_SIG = 1, EV_RANKS, EV_INPUT, EV_TIMER, EV_OUT, EV_ERR,
	EV_DELAY, EV_LIVE };

struct run {
	const struct opts *o;
	struct ranks	*rk;		/* NULL: one machine */
	struct gp_pool	*pool;		/* this rank's, once created */
	gp_fn		*fn;		/* what workers run: task_run */
	struct tasks	 in;
	struct joblog	 jl;
	struct task	*free;
	struct task	*rq, *rq_tail;	/* failed, to run again first */
	size_t		 inflight;	/* handed out, not done (all ranks) */
	size_t		 remote;	/* of which on other ranks */
	int		 sfd;		/* signalfd */
	int		 epfd;		/* ctl fd: signals, ranks, timer, output */
	int		 tfd;		/* timerfd: silent ranks, the bar */
	int		 in_armed;	/* input fd in epfd, one shot */
	int		 sig;		/* first signal received */
	int		 nsig;
	int64_t		 sig_ns;	/* when it came (CLOCK_MONOTONIC) */
	int		 input_done;
	int		 halting;	/* start nothing new */
	int		 killing;	/* a second signal: kill now */
	int		 fatal;		/* exit 255 */
	int		 halt_rc;	/* --halt fail=1: the failing task's
					   status, the exit status */
	int		 halt_ok;	/* --halt success= halted: exit 0 */
	int		 warned_change;
	int		 jl_broken;	/* a joblog write failed */
	int		 rlock;		/* --results DIR's lock file, or -1 */
	unsigned long	 ok, failed, stopped, skipped, changed, handed;
	unsigned long	 notrun;	/* handed out, stopped before they ran */
	unsigned long	 nlost;		/* ranks lost */
	long		 total;		/* tasks to run; -1: unknown */
	struct peer	*peer;		/* per rank; [0] is this one */
	int		 npeer;
	int		 ended;		/* RC_END sent to every rank */
	double		 rt_sum;	/* runtimes of ended attempts */
	unsigned long	 rt_n;
	uint64_t	 gmem_peak;	/* largest GPU memory peak of a task */
	unsigned long	 gmem_seq;	/* ... and its Seq */
	double		 gutil_sum;	/* GPU utilisation % of attempts */
	unsigned long	 gutil_n;
	unsigned long	 oom;		/* attempts that ran out of GPU
					   memory */
	int64_t		 wait_since;	/* nothing of ours runs, the next
					   task waits for a GPU: since when;
					   0: not so (gpu_notes()) */
	int		 wait_said;	/* ... and it was said */
	int		 mon_said;	/* the monitor's loss (or absence)
					   was said, or needs no word */
	int64_t		 t0;
	int		 bar, tty;
	int		 bar_shown;
	int		 bar_cols;	/* terminal width; 0: unknown */
	size_t		 bar_len;
	int64_t		 bar_last;
	struct outq	 oq, eq;	/* stdout, stderr */
	int		 out_on;	/* the run writes through them */
	int		 out_same;	/* stderr is the same file: oq only */
	int		 out_halt;	/* stdout failed: cancel the running
					   tasks */
	int		 winch;		/* SIGWINCH came: bar_winch() */
	struct live	 live;		/* --line-buffer, --ungroup: live.c */
	struct order	 ord;		/* -k: order.c */
	struct gp_buf	*divert[2];	/* -k: out_task() keeps stdout's and
					   stderr's bytes here, or NULL */
	size_t		 held;		/* ... bytes kept there */
	/* feed.c's halt_start(), for output.c: a failed stdout halts the
	 * run without output.c calling up into feed.c. */
	void		(*halt)(struct run *, int);
	/* --delay and --timeout N% (feed.c). */
	int		 dfd;		/* timerfd: when --delay lets the next
					   task start; -1: none */
	int64_t		 last_hand;	/* CLOCK_MONOTONIC: the last task
					   handed out; 0: none yet */
	struct median	 ok_rt;		/* runtimes of the tasks that
					   succeeded, seconds */
	struct timeline	*tl;		/* --timeline: what it draws */
};

void	run_init(struct run *r, const struct opts *o);
void	run_release(struct run *r);
/* Create the pool the options describe (GP_POOL_PLAN_ONLY and the like
 * in flags); prints why it failed. */
int	run_pool_create(const struct opts *o, unsigned flags,
	    struct gp_pool **pool);
/* Run every task; returns the exit status. */
int	run_tasks(struct run *r);
/* With ranks: tell every rank the run is over, wait for each (rank 0),
 * and leave MPI. Returns rc, or EXIT_FATAL if MPI did not end well. */
int	run_ranks_end(struct run *r, int rc);

/* signals.c: the signals the run owns, read from a signalfd. */
/* Block SIGINT, SIGTERM, SIGHUP and SIGWINCH (read later from a
 * signalfd), in set. */
int	run_block_signals(sigset_t *set);
/* Read the signalfd: r->sig is the first signal, r->nsig counts them.
 * Returns how many came now (SIGWINCH, which only redraws the bar, is
 * not counted: it sets r->winch, for bar_winch()). */
int	run_signals(struct run *r);

/* feed.c: the run's feed and its finish policy, on rank 0: tasks from
 * the retry queue, then the input; each ended attempt recorded in the
 * joblog, retried, counted; halting. */

/* A task handed to the pool or to a rank. The gp_item comes first:
 * done() gets a pointer to it and casts back. */
struct task {
	struct gp_item	 item;
	struct task	*next;		/* free list or retry queue */
	unsigned long	 seq;
	unsigned long	 nth;		/* its place in the input (-k) */
	unsigned long	 line;
	unsigned	 attempt;	/* 1-based */
	int		 rank;		/* where it runs */
	int		 lost;		/* with its rank */
	int64_t		 real_ns;	/* when handed out */
	int64_t		 mono_ns;
	uint8_t		*buf;		/* task_hdr, line, NUL */
	size_t		 cap;
	size_t		 cmd;		/* the command's offset in the line,
					   after its tag (tasks.c) */
	uint64_t	 timeout_ms;	/* --timeout N%: its limit, set by
					   hand(); 0: the run's */
};

/* --delay's timer, in r->epfd (EV_DELAY), when the option is given. 0 or
 * -errno. */
int	pace_setup(struct run *r);
/* EV_DELAY: drain the timer (the feed is asked for a task again). */
void	pace_wake(struct run *r);
/* Skip callback for tasks_scan(): recorded in the joblog for --resume. */
int	run_skip(void *run, unsigned long seq, const char *cmd);
/* The next task to run anywhere: a retry first, then the input.
 * GP_FEED_ITEM (*tp), GP_FEED_AGAIN (pollable input, no whole line yet),
 * GP_FEED_WAIT (--delay: not yet; EV_DELAY comes when one may start) or
 * GP_FEED_END (no more input; retries may still come). */
int	source(struct run *r, struct task **tp);
/* Fill in the header and stamp a task as handed out to rank. */
void	hand(struct run *r, struct task *t, int rank);
/* One attempt ended, here or on another rank: record it, print its
 * output, retry it or count it; t goes back to the free list or the
 * retry queue. Returns nonzero to cancel the rest. */
int	finish(struct run *r, struct task *t);
/* Back to the free list (t's buffer kept unless large). */
void	task_free(struct run *r, struct task *t);
/* Queued retries end as the failures they were. */
void	requeue_fail(struct run *r);
/* Start nothing new. Queued retries end as the failures they were; the
 * other ranks are told to stop (how: enum rctl, 0 for none). */
void	halt_start(struct run *r, int how);
/* Tell every rank still with us what to do now (every rank, before the
 * run knows them: bad input, --dry-run); RC_END and RC_END_LOST set
 * r->ended. */
void	ranks_ctl(struct run *r, int how);
/* The gp_feed callbacks of rank 0's run (arg is the struct run). */
int	feed_next(void *arg, struct gp_item **item);
int	feed_done(void *arg, struct gp_item *it);
void	feed_need(void *arg, const struct gp_item *it, struct gp_need *need);

/* outcome.c: what became of one attempt of a task. */
enum attempt_kind { K_OK, K_FAILED, K_STOPPED, K_NOTRUN };

struct attempt {
	enum attempt_kind kind;
	int		 exitval;
	int		 signal;
	int		 flags;		/* enum reply_flags */
	int		 worker;
	double		 start;
	double		 runtime;
	const char	*out, *err, *msg;	/* in t->item.out */
	size_t		 outlen, errlen, msglen;
	uint64_t	 outcut, errcut;
	int		 oom;		/* K_FAILED, and its stderr shows a GPU
					   out-of-memory error (gpu_oom()) */
	const char	*gpus;		/* the GPUs it held beyond its slot's */
	size_t		 gpuslen;	/* (in t->item.out), or 0 */
	uint64_t	 gpu_mem;	/* peak GPU memory, bytes (0: unknown) */
	int		 gpu_util;	/* mean %, -1: unknown */
	uint64_t	 timeout_ms;	/* its own limit (--timeout N%); 0: the
					   run's */
	char		 why[160];
};

/* Read t's outcome (the pointers in oc point into t->item.out). */
void	outcome(const struct run *r, const struct task *t,
	    struct attempt *oc);
/* "exit status 3", "killed by signal 9 (Killed)", "timed out (...)",
 * with ", GPU out of memory" after it when oc->oom. */
void	describe(const struct run *r, const struct attempt *oc, char *buf,
	    size_t len);
/* Whether a task's stderr, err[0..len) (not NUL-terminated), shows a GPU
 * out-of-memory error: PyTorch's, TensorFlow's, JAX's, the CUDA driver
 * and runtime's, cuBLAS's or cuDNN's (not a host MemoryError or
 * ENOMEM). */
int	gpu_oom(const char *err, size_t len);

/* coord.c: rank 0's side of the ranks protocol (rank.c's is the other). */
/* Hand tasks to the ranks with room, the emptiest first (rank 0's own
 * workers take theirs through feed_next()). */
void	dispatch(struct run *r);
/* Messages from the other ranks; the ranks' timer (silent ranks, the
 * bar). GP_CTL_GO_ON, or GP_CTL_CANCEL when an attempt asked for it. */
int	on_ranks(struct run *r);
int	on_timer(struct run *r);
/* Whether every rank is up and the run not failed; says which are not. */
int	all_hello(const struct run *r);

/* rank.c: a rank other than 0: tasks from rank 0, results back. Returns
 * the exit status. */
int	rank_serve(struct run *r, struct gp_pool *pool,
	    const struct run_conf *conf);
/* Whether rank peer has been silent for --rank-timeout. */
int	run_silent(const struct run *r, int peer);

/* rproto.c: the rank messages' payloads, encoded and parsed (host byte
 * order), with no I/O: a parser reads nothing past len and returns
 * -EPROTO for a malformed payload. */
struct rp_hello {
	uint32_t	 nw, ngpu;
	const uint8_t	*w_gpu;		/* nw int32_t (unaligned), each
					   < ngpu */
	const char	*host;		/* NUL-terminated */
	const char	*gpu_id;	/* ngpu NUL-terminated strings in a
					   row */
};

#define RP_CTL_LEN	4	/* an RM_CTL payload: int32_t */

/* RM_HELLO from p's nw, ngpu, w_gpu, host and gpu_id: a malloc()ed
 * payload of *len bytes (the caller frees it), or NULL: out of memory. */
uint8_t	*rp_hello_encode(const struct peer *p, size_t *len);
/* 0 and *h (pointing into b), or -EPROTO. Bytes after the last GPU id
 * are allowed (and ignored) if the payload still ends with a NUL. */
int	rp_hello_parse(const uint8_t *b, size_t len, struct rp_hello *h);
/* Fill in the struct task_hdr at the start of a task's len bytes (as a
 * worker gets them and as RM_TASKS carries them, one or more in a row):
 * the header, the command, a NUL. */
void	rp_task_hdr(uint8_t *b, size_t len, uint64_t seq, uint32_t attempt);
/* The task at b[off..len) of an RM_TASKS payload: its header in *h and
 * its length (header, command and NUL), or -EPROTO. */
ssize_t	rp_tasks_next(const uint8_t *b, size_t len, size_t off,
	    struct task_hdr *h);
/* One RM_RESULTS record into b (sizeof(*rr) + rr->outlen bytes): rr,
 * then rr->outlen bytes of out. */
void	rp_result_encode(uint8_t *b, const struct rresult *rr,
	    const void *out);
/* The record at b[off..len) of an RM_RESULTS payload: *rr, its reply
 * bytes at *out (in b) and its length, or -EPROTO. */
ssize_t	rp_results_next(const uint8_t *b, size_t len, size_t off,
	    struct rresult *rr, const uint8_t **out);
/* An RM_CTL payload (RP_CTL_LEN bytes): how, an enum rctl; the parser
 * takes any value (the reader ignores those it does not know). */
void	rp_ctl_encode(uint8_t *b, int how);
int	rp_ctl_parse(const uint8_t *b, size_t len, int *how);

#endif /* GP_CLI_H */
