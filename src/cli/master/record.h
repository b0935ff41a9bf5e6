/*
 * record.h: what gpupool-run's master records of a run: the --results
 * directory (resdir.c), GNU parallel's joblog (joblog.c) and the
 * --timeline picture (timeline.c, timeline_svg.c). Included by master.h
 * (struct run holds a struct joblog), never the other way round.
 */
#ifndef GP_RECORD_H
#define GP_RECORD_H

#include "common/cli.h"

struct run;
struct attempt;
struct opts;

/* resdir.c: --results DIR, made before the workers are forked: mkdir -p
 * path, prove it writable and, on rank 0, lock it for the run
 * (--wait-lock waits). Returns its open fd, or -errno (and says why). */
#define RESULTS_LOCK	".gpupool-run.lock"	/* in --results DIR */
int	resdir_open(struct run *r, const char *path);

/* joblog.c: GNU parallel's joblog, plus trailing columns of ours (its
 * table of columns says which). */
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

/* What joblog_parse() made of a line. */
enum jl_line { JL_REC, JL_TORN, JL_BAD };

void	joblog_init(struct joblog *j);
/* Open (create) a joblog that is a regular file and lock it for the life
 * of the run, before it is read or truncated; with wait, wait for the
 * run that holds it. -EAGAIN: err names the holder's pid; -EINTR: a
 * signal ended the wait (files_open_locked()). */
int	joblog_lock(struct joblog *j, const char *path, int wait, char *err,
	    size_t errlen);
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
/* Append a's line and make it durable (write + fdatasync): every column
 * (GNU parallel's nine alone in a joblog of parallel's). A TAB or a
 * newline in the command or GPU id is written \t or \n, a backslash
 * before a backslash, 't', 'n', TAB or newline \\ (so that each text
 * has one reading); an unknown figure (gpu_mem 0, a negative gpu_util)
 * is written '-'. */
int	joblog_append(struct joblog *j, const struct attempt *a);
/* Whether l[0..n) is a joblog header, and its columns: 9 (GNU
 * parallel's), 10 (older gpupool-runs'), every column (ours now); or 0. */
int	joblog_header(const char *l, size_t n);
/* The one reader of a joblog line, l[0..n) (no newline, NUL-terminated;
 * cut in place), after a header of ncol columns (joblog_header()'s):
 * its columns into *a (zeroed first; its texts point into l, turned
 * back into what they were; cmd_hash set). JL_REC, JL_TORN (cut short
 * by a crash: a Seq, and fewer fields than a record has; or NUL bytes),
 * or JL_BAD (not a record: a Seq, Exitval or Signal that is no integer;
 * with strict, a Starttime or JobRuntime that is no number). Columns
 * past the line's are as zeroed (unknown). */
int	joblog_parse(char *l, size_t n, int ncol, int strict,
	    struct attempt *a);
/* A Command or GPU field as joblog_append() wrote it back into what it
 * was, in place: \\ a backslash, \t a TAB, \n a newline; any other
 * backslash stays. */
void	joblog_unesc(char *s);
/* Close (a joblog it created and never wrote is removed), free. */
void	joblog_release(struct joblog *j);
/* The hash of a command as the joblog writes it. */
uint32_t joblog_hash(const char *s);

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
/* Keep one attempt, a, as recorded (its flags, enum reply_flags, for
 * what the joblog cannot tell: timed out, not started), and the slot it
 * ran on: rank, slot and its GPU's index in the run (gpu, -1: unknown);
 * slot -1: rows by a's host and GPU. Out of memory, the attempt is left
 * out and a warning says so. */
void	timeline_add(struct timeline *tl, const struct attempt *a, int rank,
	    int slot, int gpu);
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
int	timeline_from_joblog(const struct opts *o);

/* timeline_svg.c: the drawing. Classifies retried attempts, spreads
 * overlapping attempts of a row over lanes, and writes the SVG to f:
 * bars wide enough (at most TL_BARS of them) one by one with a <title>,
 * the rest merged into a density strip per lane. 0, or -ENOMEM. */
#define TL_BARS		2000
int	timeline_svg_draw(FILE *f, struct timeline *tl);

#endif /* GP_RECORD_H */
