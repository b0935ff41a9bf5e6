/*
 * ranks.h: the ranks of a run under an MPI launcher: the transport
 * (mpi.c, or mpi_stub.c without MPI), the frames between a rank and its
 * MPI process (mpi_frame.c, mpi_proc.c), the launcher's variables
 * (launcher.c); the rank messages' types and payloads (rproto.c) are
 * common/cli.h's. The masters of the ranks (master.h: coord.c, rank.c)
 * are its users.
 */
#ifndef GP_RANKS_H
#define GP_RANKS_H

#include "common/cli.h"

/* mpi.c (mpi_stub.c without MPI): the ranks of a run started by an MPI
 * launcher (mpirun, srun --mpi=pmix), rank 0 the coordinator; the
 * messages' types and payloads are common/cli.h's. */
struct rmsg {
	struct rmsg	*next;
	int		 peer;		/* sender (received) or receiver */
	int		 type;		/* enum rmsg_type */
	size_t		 len;
	uint64_t	 ring;		/* mpi_proc.c: 1 + the out-ring offset
					 * of the len bytes (data empty), or
					 * 0: they are data */
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
	FR_RING_SEND,	/* rank -> MPI: struct fr_ring: send out-ring bytes */
	FR_RING_SENT,	/* MPI -> rank: uint64 off: that send completed */
	FR_RING_RECV,	/* MPI -> rank: struct fr_ring: a message received
			 * into the in ring */
	FR_RING_FREE,	/* rank -> MPI: uint64 off: done with that extent */
};

/* A message of RANKS_RING_MIN bytes or more travels through the rings,
 * when a rank has them (the Python package's ranks: gpupool-run's pass
 * -1): its frame says where, [off, off + len) of the out ring (the rank
 * writes it, MPI sends from it) or of the in ring (MPI receives into it,
 * the rank reads it in place). An out-ring extent is the rank's again at
 * FR_RING_SENT, an in-ring one the MPI process's at FR_RING_FREE. */
#define RANKS_RING_MIN		(64u << 10)

struct fr_ring {
	int32_t		 type;		/* enum rmsg_type */
	int32_t		 peer;
	uint64_t	 off;
	uint64_t	 len;
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
 * uint8_t talk[size] (whether to beat it), then uint8_t busy (the rank
 * has items out: its MPI process naps short). */
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

/* ring.c: the extents of a ring a rank shares with its MPI process
 * (first fit from offset 0, RING_ALIGN-aligned); its writer allocates,
 * and frees when its reader says it is done. */
#define RING_ALIGN		64

struct ring_ext {
	uint64_t	 off, len;	/* len rounded up to RING_ALIGN */
};

struct ring {
	size_t		 size;		/* bytes, a multiple of RING_ALIGN */
	size_t		 used;		/* bytes taken */
	struct ring_ext	*ext;		/* the taken ones, by offset */
	size_t		 n, cap;
};

void	ring_init(struct ring *r, size_t size);
void	ring_release(struct ring *r);
/* The offset of len free bytes, taken now: the lowest that fits; -1
 * when none does (or len is 0, or out of memory). */
int64_t	ring_alloc(struct ring *r, size_t len);
/* Give back the extent that starts at off: 0, or -ENOENT (none does). */
int	ring_free(struct ring *r, uint64_t off);

/* mpi_proc.c (gpupool-run-mpi only): the MPI process, forked by
 * ranks_init(). MPI_Init, FR_READY (or FR_ERR), then pass messages
 * between MPI and the rank on fd until the rank says FR_END; memfd is the
 * shared memory, ringfd the rings' (its out ring, then its in ring, of
 * equal size) or -1 (none), parent the rank's pid. Never returns. */
void	mproc_main(int fd, int memfd, int ringfd, pid_t parent)
	    __attribute__((noreturn));

#endif /* GP_RANKS_H */
