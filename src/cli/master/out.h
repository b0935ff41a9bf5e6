/*
 * out.h: what gpupool-run's master prints of a run: its output, messages
 * and the bar (output.c), tasks' output as it comes (live.c) and -k's
 * order (order.c). Included by master.h (struct run holds a struct outq,
 * a struct live and a struct order), never the other way round.
 */
#ifndef GP_OUT_H
#define GP_OUT_H

#include "common/cli.h"

struct run;
struct task;
struct attempt;

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

#endif /* GP_OUT_H */
