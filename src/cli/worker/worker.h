/*
 * worker.h: gpupool-run's worker side, what a pool worker runs for a
 * task: it decodes the task (wire.c), starts it in a process group of
 * its own, captures its output, reaps what it leaves, writes its
 * --results files and replies. It sees no struct run: what it needs of
 * the run comes in struct run_conf (cli.h).
 */
#ifndef GP_WORKER_H
#define GP_WORKER_H

#include "common/cli.h"

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

/* results.c: --results DIR, and a task's files in DIR/<seq>/. */
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
 * subreaper (reap_keep_children() and reap_leftovers() are in cli.h: the
 * master, a subreaper too, calls them). */
#define NOPIDFD_TICK_MS	20	/* no pidfd_open (< Linux 5.3): poll this */
/* Once per worker: become the tasks' subreaper (PR_SET_CHILD_SUBREAPER)
 * with SIGCHLD blocked. Returns a signalfd readable when a child exits,
 * or -1 (then leftovers are reaped only by reap_leftovers()). */
int	reap_setup(void);
/* While a task runs: drain sigfd, then reap the children that have
 * exited, but not leader, whose status is the caller's. */
void	reap_exited(int sigfd, pid_t leader);

/* cmdline.c: a task's line as a command: shell or words, and the
 * environment it gets. Buffers are the file's own, kept across calls
 * (cmdline_needs_shell(), pure, is repl.c's, in parallel/parallel.h:
 * the master checks --shell's lines with it). */
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

#endif /* GP_WORKER_H */
