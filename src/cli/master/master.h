/*
 * master.h: gpupool-run's master, the process that runs a run (rank
 * 0's, and each other rank's): the run (struct run), its tasks, feed and
 * finish policy, what became of each attempt, and both sides of the
 * ranks protocol. What the run prints is out.h's, what it records
 * (joblog, --results, --timeline) record.h's; struct run holds theirs by
 * value, so this header includes them and they never include it. Worker
 * code (worker.h) never includes it.
 */
#ifndef GP_MASTER_H
#define GP_MASTER_H

#include "common/cli.h"
#include "options/opts.h"
#include "ranks/ranks.h"
#include "master/out.h"
#include "master/record.h"

struct run;
struct task;
struct attempt;

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
