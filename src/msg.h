/*
 * msg.h: the wire format between master and workers (msg.c).
 * Never installed. Pure encode/parse: no syscalls, no policy, so tests can
 * feed it arbitrary bytes. Host byte order: both ends are on one host,
 * the same image (fork), as with OpenBSD's imsg, or an exec'd worker
 * that checked the version first (GP_MSG_HELLO).
 */
#ifndef GP_MSG_H
#define GP_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "io.h"

enum gp_msg_type {
	GP_MSG_READY = 1,	/* W→M  struct gp_msg_ready, exactly once, first */
	GP_MSG_JOB,		/* M→W  id = flags (GP_JOB_*);
				   u64 fn address + arg bytes */
	GP_MSG_TASK,		/* M→W  id = count; count × (gp_rec_task + bytes) */
	GP_MSG_RESULT,		/* W→M  id = count; count × (gp_rec_result + bytes) */
	GP_MSG_STOP,		/* M→W  id = item; wake stop_fd pollers */
	GP_MSG_QUIT,		/* M→W  run fini, leave with _exit(0) */
	GP_MSG_GPUS,		/* M→W  id = n; n × u32 GPU index: the GPUs the
				   next TASK's one item holds */
	GP_MSG_PIECE,		/* both id = item; gp_msg_piece (+ its bytes
				   when not in the region): part of an item
				   or result over the window */
	GP_MSG_ACK,		/* both id = item; gp_msg_ack: the piece was
				   taken, its room in the region is free */
	GP_MSG_HELLO,		/* M→W  to an exec'd worker, first and once:
				   what it needs of the pool (exec.c); read
				   by exec.c alone, never by gp_msg_parse() */
};

/* The protocol's version, in an exec'd worker's GPUPOOL_WORKER and its
 * HELLO: bumped whenever a message or a shared struct changes, since
 * such a worker may be another build than its master. */
#define GP_PROTO	4

/* JOB flags: its items need not be timed (gp_pool_run() without a
 * timeout: one item a batch, no estimate used), so the worker reads no
 * clock around them. */
#define GP_JOB_UNTIMED	1u

struct gp_msg_hdr {
	uint32_t	 type;		/* enum gp_msg_type */
	uint32_t	 len;		/* payload bytes after the header */
	uint64_t	 id;		/* per type, see above */
};
_Static_assert(sizeof(struct gp_msg_hdr) == 16, "wire header is 16 bytes");

struct gp_msg_ready {
	int32_t		 cpubind_rc;
	int32_t		 membind_rc;
	int32_t		 cuda_rc;
	int32_t		 init_rc;	/* init's return value */
	int32_t		 step;		/* 0, or the start-up step that failed
					   (1 + its place in wstart.c's table) */
	int32_t		 step_err;	/* its -errno */
	int32_t		 fatal;		/* 1: the worker is leaving */
	char		 why[228];	/* the step's reason, for errbuf */
};
_Static_assert(sizeof(struct gp_msg_ready) == 256, "READY is 256 bytes");

struct gp_rec_task {
	uint64_t	 id;
	uint32_t	 len;
	uint32_t	 flags;		/* 0, GP_REC_SHM, GP_REC_PIECED or
					   GP_REC_EXT */
};

enum gp_rec_kind {
	GP_REC_DONE = 0,	/* fn ran; rc is its return */
	GP_REC_ERROR,		/* the library failed it; rc is -errno */
	GP_REC_SKIPPED,		/* not started: the batch was stopped */
};

struct gp_rec_result {
	uint64_t	 id;
	uint64_t	 ns;		/* time fn took */
	int32_t		 rc;
	uint32_t	 kind;		/* enum gp_rec_kind */
	uint32_t	 len;
	uint32_t	 flags;		/* 0, GP_REC_SHM or GP_REC_PIECED
					   (kind DONE only) */
};

/*
 * A record flagged GP_REC_SHM carries no bytes in the message: its len
 * bytes lie in the worker's region (data.c), items in the first half,
 * results in the second, at the offset gp_msg_shm_place() gives. Both
 * ends call it for each such record in order, from 0 at the start of
 * each batch, so no offset crosses the wire and none can point outside
 * the region. Items and results of GP_SHM_MIN bytes or more go this way
 * when they fit (design.md, "The data plane", has the measurement).
 */
#define GP_REC_SHM	1u
#define GP_SHM_MIN	64u
#define GP_SHM_ALIGN	64u

/*
 * Items and results over the pool's window (the size of a region half,
 * and of the largest message) travel in pieces, each a PIECE message: in
 * the region when the slot has one (the window's bytes at a time), else
 * in the message. The receiver copies each into the whole item or result
 * and answers ACK, after which the sender may fill the region again: one
 * piece in flight, so both ends always agree where it lies. An item's
 * pieces come before the TASK that holds it (alone in its batch, at
 * region offset 0); a result's are sent while gp_ctx_reply() runs, its
 * first piece after the batch's earlier region results (the master's
 * ACK of it means it has taken those too), the others at 0. The record
 * that ends it is flagged GP_REC_PIECED and carries no length: the
 * pieces said it, and the receiver checks that they all came.
 */
#define GP_REC_PIECED	2u

/*
 * An item whose bytes lie wholly in the pool's extern mapping
 * (gp_pool_opts.ext_base: a rank's in ring) goes as a record flagged
 * GP_REC_EXT, followed by a u64, the bytes' offset in that mapping, and
 * no bytes: fn reads them there. Master to worker only (no offset
 * crosses the wire the other way); the worker checks off + len against
 * its mapping (gp_data_ext()) before it reads a byte, and a record past
 * it, or one for a worker without a mapping, breaks the protocol.
 */
#define GP_REC_EXT	4u

struct gp_msg_piece {
	uint64_t	 total;		/* the item's or result's length */
	uint64_t	 off;		/* this piece's place in it */
	uint32_t	 len;		/* this piece's bytes */
	uint32_t	 flags;		/* GP_REC_SHM: in the region, else after
					   this struct */
};

struct gp_msg_ack {
	uint64_t	 got;		/* bytes taken so far */
	int32_t		 rc;		/* W→M: 0, or the -errno for which the
					   worker cannot take the item (stop
					   sending it); M→W: 0 */
	uint32_t	 pad;
};

#define GP_MSG_GPUS_MAX	1024	/* GPUs in one GPUS message */

/* Overhead of a one-record message over its payload. */
#define GP_MSG_OVERHEAD	(sizeof(struct gp_msg_hdr) + \
			 sizeof(struct gp_rec_result))
/* Largest payload either end accepts for a pool's window: room for one
 * item or one result of window bytes with its record (or one piece).
 * Batches of either are cut to fit this; what is larger goes in pieces. */
#define GP_MSG_MAX(window)	((window) + GP_MSG_OVERHEAD)

/*
 * Look at avail bytes at buf. Returns 0 when a whole message is not there
 * yet, its total size (header + payload) when it is, -EMSGSIZE when the
 * header announces more than max payload bytes (checked before anything
 * is allocated), -EBADMSG for an unknown type or a fixed-size payload of
 * the wrong size. max is GP_MSG_MAX(window): no message is larger than
 * the window, whatever max_msg is.
 */
long	gp_msg_parse(const void *buf, size_t avail, size_t max,
	    struct gp_msg_hdr *hdr);

/*
 * Take the next record of a TASK (or RESULT) payload: *pos advances past
 * it. Returns 1 with *rec and *data set (NULL for a GP_REC_SHM record:
 * its bytes are in the region; for a TASK's GP_REC_EXT one, its u64
 * offset), 0 at the end, -EBADMSG if the record runs past end or has an
 * unknown flag (GP_REC_EXT on a RESULT).
 */
int	gp_msg_task_next(const uint8_t **pos, const uint8_t *end,
	    struct gp_rec_task *rec, const uint8_t **data);
int	gp_msg_result_next(const uint8_t **pos, const uint8_t *end,
	    struct gp_rec_result *rec, const uint8_t **data);

/*
 * Whether piece pc, in a message of mlen payload bytes, is the next one
 * of an item or result of total bytes of which got came before it: it
 * starts at got (or at 0, which starts it again, replacing what came),
 * keeps the total, carries 1 byte or more and no more than the rest, and
 * no more than shm_room bytes (what its half of the region has from its
 * place; 0: no region) when flagged GP_REC_SHM, else exactly its bytes
 * in the message, at most window of them; the whole is over window (or
 * one record would carry it) and at most max. 0, or -EBADMSG: a lie.
 * Nothing is allocated before this says 0.
 */
int	gp_msg_piece_check(const struct gp_msg_piece *pc, size_t mlen,
	    uint64_t got, uint64_t total, size_t shm_room, size_t window,
	    size_t max);

/* The offset of the next len bytes in a region half of size bytes whose
 * first *end are taken (*end then moves past them, rounded up to
 * GP_SHM_ALIGN), or -1 when they do not fit (*end unchanged). */
long	gp_msg_shm_place(size_t *end, size_t len, size_t size);

/* Append a header to b; the payload follows with gp_buf_add(). The
 * returned offset lets gp_msg_finish() patch len and id at the end. */
int	gp_msg_begin(struct gp_buf *b, uint32_t type, size_t *at);
void	gp_msg_finish(struct gp_buf *b, size_t at, uint64_t id);

#endif /* GP_MSG_H */
