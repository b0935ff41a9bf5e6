/*
 * ranks.h: the ranks of a run under an MPI launcher: the transport
 * (mpi.c, or mpi_stub.c without MPI), the frames between a rank and its
 * MPI process (mpi_frame.c, mpi_proc.c), the launcher's variables
 * (launcher.c) and the rank messages' payloads (rproto.c). The masters
 * of the ranks (master.h: coord.c, rank.c) are its users.
 */
#ifndef GP_RANKS_H
#define GP_RANKS_H

#include "cli.h"

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
 * signals_block() leaves them); a wait on the MPI process ends when
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

/* RM_HELLO from a rank's nw slots (w_gpu: slot -> GPU index), ngpu GPUs
 * (gpu_id: their CUDA_VISIBLE_DEVICES values) and host: a malloc()ed
 * payload of *len bytes (the caller frees it), or NULL: out of memory. */
uint8_t	*rp_hello_encode(int nw, int ngpu, const int *w_gpu,
	    const char *host, char *const *gpu_id, size_t *len);
/* 0 and *h (pointing into b), or -EPROTO. Bytes after the last GPU id
 * are allowed (and ignored) if the payload still ends with a NUL. */
int	rp_hello_parse(const uint8_t *b, size_t len, struct rp_hello *h);
/* The task at b[off..len) of an RM_TASKS payload (tasks as a worker
 * gets them, rp_task_encode()'s, one or more in a row): its header in *h
 * and its length (header, command and NUL), or -EPROTO. */
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

#endif /* GP_RANKS_H */
