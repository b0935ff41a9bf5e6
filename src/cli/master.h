/*
 * master.h: gpupool-run's master, the process that runs a run (rank
 * 0's, and each other rank's): the options, the run (struct run), its
 * feed and finish policy, the joblog, output, the timeline, and rank 0's
 * side of the ranks. Worker code (worker.h) never includes it.
 */
#ifndef GP_MASTER_H
#define GP_MASTER_H

#include "cli.h"
#include "opts.h"
#include "ranks.h"

struct run;
struct task;
struct attempt;

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
/* A lock of type F_WRLCK (exclusive, fd open for writing) or F_RDLCK
 * (shared) on fd, held until it is closed; -EAGAIN if another process
 * holds one that excludes it (err names its pid). With wait,
 * until it is ours, or -EINTR when SIGINT, SIGTERM or SIGHUP comes while
 * blocked (under MPI they are from the start): a wait that no signal
 * could end would leave only SIGKILL. err says why, naming what
 * ("joblog", "results directory") and path. */
int	files_lock(int fd, int type, int wait, const char *what,
	    const char *path, char *err, size_t errlen);
/* Open (create: *created) path, a regular file, for appending and lock
 * it (files_lock(), F_WRLCK) for as long as the fd lives, the file the
 * path names once locked. The fd, or -errno with err saying why, naming
 * what ("joblog"). */
int	files_open_locked(const char *path, int wait, const char *what,
	    int *created, char *err, size_t errlen);
/* Whether path names the file st describes (path may not exist). */
int	files_same(const char *path, const struct stat *st);

/* resdir.c: --results DIR, made before the workers are forked: mkdir -p
 * path, prove it writable and, on rank 0, lock it for the run
 * (--wait-lock waits). Returns its open fd, or -errno (and says why). */
#define RESULTS_LOCK	".gpupool-run.lock"	/* in --results DIR */
int	resdir_open(struct run *r, const char *path);

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

/* output.c: what the run writes. Task output, messages and the bar go
 * through a queue per stream (struct outq) while the run owns stdout and
 * stderr (r->out_on), else straight to the stream. */

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

/* A notice about a task; --quiet drops it. */
void	out_note(const struct run *r, const char *fmt, ...)
	    __attribute__((format(printf, 2, 3)));
/* say.c's messages (out_err(), out_warn()) clear r's bar and take its
 * queues from now (out_attach()) until out_detach(r). */
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
/* The progress bar: its terminal width (out_bar_size()); drawn at most every
 * BAR_PERIOD_NS unless force; drawn again after SIGWINCH (out_bar_winch(),
 * when signals_read() set r->winch). */
void	out_bar_size(struct run *r);
void	out_bar_draw(struct run *r, int force);
/* Said once each, so that no run waits in silence: the GPU monitor gone
 * mid-run (every GPU then counts as free), a wait for GPUs other
 * gpupools claim, and, without --bar, a wait for a GPU of WAIT_NOTE_NS
 * while nothing of ours runs, with why (only others can end it). Called
 * on each task's end and each timer tick. Returns 1 when the run must
 * stop now (--claim-timeout: the waiting task is not started). */
int	out_gpu_notes(struct run *r);
void	out_bar_winch(struct run *r);
/* "1h02m", "3m05s", "7s". */
void	out_fmt_secs(char *buf, size_t len, double s);
/* Bytes of a task's stream fd (STDOUT_FILENO, STDERR_FILENO), the bar
 * cleared first: with raw, as they are; else as lines, each after tag
 * and a TAB when tag is not NULL, and a newline after a last line that
 * has none. */
void	out_task(struct run *r, int fd, const char *tag, const char *p,
	    size_t n, int raw);
/* The last line: counts, wall time, busy share per GPU or rank. */
void	out_summary(struct run *r);

/* live.c: a task's output as the master prints it: grouped when the
 * task ends, or (--line-buffer, --ungroup) as it comes, through a
 * channel that every worker shares (a SOCK_SEQPACKET socketpair made
 * before the pool forks: each record one send, whole), and --tag. */
#define LIVE_LINE_MAX	(1u << 20)	/* a longer line is printed in
					   pieces of this size */
#define TAG_MAX		1024		/* --tag's text, at most (cut) */

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
size_t	live_tag(const struct run *r, unsigned long seq, int rank,
	    int worker, char *buf, size_t len);
/* A finished task's output (nothing with --results: the files have
 * it): what the channel still holds of it, then the rest, the last line
 * ended; or, grouped, as one block per stream. */
void	live_print(struct run *r, const struct task *t,
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
	int		 halt_rc;	/* the exit status --halt's condition
					   fixed when met; -1: not met */
	int		 warned_change;
	int		 jl_broken;	/* a joblog write failed */
	int		 rlock;		/* --results DIR's lock file, or -1 */
	unsigned long	 ok, failed, stopped, skipped, changed, handed;
	unsigned long	 notrun;	/* handed out, stopped before they ran */
	unsigned long	 nlost;		/* ranks lost */
	long		 total;		/* tasks to run; -1: unknown */
	unsigned long	 resumed;	/* tasks a resume skips, counted with
					   total: GNU parallel's --halt counts
					   them among the tasks, as done */
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
					   0: not so (out_gpu_notes()) */
	int		 wait_said;	/* ... and it was said */
	int		 claim_said;	/* a wait for claims was said */
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
	int		 winch;		/* SIGWINCH came: out_bar_winch() */
	struct live	 live;		/* --line-buffer, --ungroup: live.c */
	struct order	 ord;		/* -k: order.c */
	struct gp_buf	*divert[2];	/* -k: out_task() keeps stdout's and
					   stderr's bytes here, or NULL */
	size_t		 held;		/* ... bytes kept there */
	/* feed.c's feed_halt_start(), for output.c: a failed stdout halts the
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
int	signals_block(sigset_t *set);
/* Read the signalfd: r->sig is the first signal, r->nsig counts them.
 * Returns how many came now (SIGWINCH, which only redraws the bar, is
 * not counted: it sets r->winch, for out_bar_winch()). */
int	signals_read(struct run *r);

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
					   feed_hand(); 0: the run's */
};

/* --delay's timer, in r->epfd (EV_DELAY), when the option is given. 0 or
 * -errno. */
int	feed_pace_setup(struct run *r);
/* EV_DELAY: drain the timer (the feed is asked for a task again). */
void	feed_pace_wake(struct run *r);
/* Skip callback for tasks_scan(): recorded in the joblog for --resume. */
int	feed_skip(void *run, unsigned long seq, const char *cmd);
/* The next task to run anywhere: a retry first, then the input.
 * GP_FEED_ITEM (*tp), GP_FEED_AGAIN (pollable input, no whole line yet),
 * GP_FEED_WAIT (--delay: not yet; EV_DELAY comes when one may start) or
 * GP_FEED_END (no more input; retries may still come). */
int	feed_source(struct run *r, struct task **tp);
/* Fill in the header and stamp a task as handed out to rank. */
void	feed_hand(struct run *r, struct task *t, int rank);
/* One attempt ended, here or on another rank: record it, print its
 * output, retry it or count it; t goes back to the free list or the
 * retry queue. Returns nonzero to cancel the rest. */
int	feed_finish(struct run *r, struct task *t);
/* Back to the free list (t's buffer kept unless large). */
void	feed_task_free(struct run *r, struct task *t);
/* Queued retries end as the failures they were. */
void	feed_requeue_fail(struct run *r);
/* Start nothing new. Queued retries end as the failures they were; the
 * other ranks are told to stop (how: enum rctl, 0 for none). */
void	feed_halt_start(struct run *r, int how);
/* Tell every rank still with us what to do now (every rank, before the
 * run knows them: bad input, --dry-run); RC_END and RC_END_LOST set
 * r->ended. */
void	feed_ranks_ctl(struct run *r, int how);
/* The gp_feed callbacks of rank 0's run (arg is the struct run). */
int	feed_next(void *arg, struct gp_item **item);
int	feed_done(void *arg, struct gp_item *it);
void	feed_need(void *arg, const struct gp_item *it, struct gp_need *need);

/* outcome.c: what became of one attempt of a task. */
enum attempt_kind { K_OK, K_FAILED, K_STOPPED, K_NOTRUN };

/* One attempt, the one record of it from the worker's reply on: read
 * from the reply (outcome_read()), completed where it is recorded (feed.c's
 * record()), written as a joblog line (joblog_append()), drawn
 * (timeline_add()); or read back from a joblog line (joblog_parse()).
 * joblog.c's table of columns names the members its columns hold. */
struct attempt {
	enum attempt_kind kind;
	unsigned long	 seq;
	const char	*host;		/* ":" for this machine */
	const char	*cmd;		/* its command, without its tag */
	const char	*gpu;		/* the GPUs it held, as the joblog
					   writes them */
	uint32_t	 cmd_hash;	/* a joblog line's: joblog_hash() of
					   its Command */
	int		 exitval;	/* exit code, or -1: see gpupool-run.1 */
	int		 signal;
	int		 flags;		/* enum reply_flags */
	int		 worker;
	double		 start;		/* epoch seconds */
	double		 runtime;	/* seconds */
	struct task_reply rp;		/* the worker's reply as it came
					   (zeroed without one): what it
					   measured */
	const char	*out, *err, *msg;	/* in t->item.out */
	size_t		 outlen, errlen, msglen;
	uint64_t	 outcut, errcut;
	int		 oom;		/* K_FAILED, and its stderr shows a GPU
					   out-of-memory error
					   (outcome_gpu_oom()) */
	const char	*gpus;		/* the GPUs it held beyond its slot's */
	size_t		 gpuslen;	/* (in t->item.out), or 0 */
	uint64_t	 gpu_mem;	/* peak GPU memory, bytes (0: unknown) */
	int		 gpu_util;	/* mean %, -1: unknown */
	uint64_t	 timeout_ms;	/* its own limit (--timeout N%); 0: the
					   run's */
	char		 why[160];
	char		 held[1024];	/* gpu, when it held several */
};

/* Read t's outcome (the pointers in oc point into t->item.out). */
void	outcome_read(const struct run *r, const struct task *t,
	    struct attempt *oc);
/* "exit status 3", "killed by signal 9 (Killed)", "timed out (...)",
 * with ", GPU out of memory" after it when oc->oom. */
void	outcome_describe(const struct run *r, const struct attempt *oc,
	    char *buf, size_t len);
/* Whether a task's stderr, err[0..len) (not NUL-terminated), shows a GPU
 * out-of-memory error: PyTorch's, TensorFlow's, JAX's, the CUDA driver
 * and runtime's, cuBLAS's or cuDNN's (not a host MemoryError or
 * ENOMEM). */
int	outcome_gpu_oom(const char *err, size_t len);

/* The GPU figures of the attempt whose reply is it->out, as
 * gp_pool_usage() gave them (pool: the one that ran it), written into
 * its reply (rp_reply_usage()): the master adds them, the worker cannot
 * know them. */
void	outcome_usage(struct gp_pool *pool, struct gp_item *it);

/* coord.c: rank 0's side of the ranks protocol (rank.c's is the other). */
/* Hand tasks to the ranks with room, the emptiest first (rank 0's own
 * workers take theirs through feed_next()). */
void	coord_dispatch(struct run *r);
/* Messages from the other ranks; the ranks' timer (silent ranks, the
 * bar). GP_CTL_GO_ON, or GP_CTL_CANCEL when an attempt asked for it. */
int	coord_on_ranks(struct run *r);
int	coord_on_timer(struct run *r);
/* Whether every rank is up and the run not failed; says which are not. */
int	coord_all_hello(const struct run *r);

/* rank.c: a rank other than 0: tasks from rank 0, results back. Returns
 * the exit status. */
int	rank_serve(struct run *r, struct gp_pool *pool,
	    const struct run_conf *conf);
/* Whether rank peer has been silent for --rank-timeout. */
int	rank_silent(const struct run *r, int peer);

#endif /* GP_MASTER_H */
