/*
 * internal.h: the pool's private structures, shared by pool.c (public
 * API), loop.c (the master's event loop), proc.c (worker processes),
 * job.c (a call's items: job.h) and worker.c (the child side).
 * Never installed.
 */
#ifndef GP_INTERNAL_H
#define GP_INTERNAL_H

#include <stdatomic.h>
#include <poll.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpupool.h"
#include "claim.h"
#include "gate.h"
#include "gpu.h"
#include "io.h"
#include "job.h"
#include "mon.h"
#include "msg.h"
#include "topo.h"

#define GP_MAX_WORKERS		1024
#define GP_DEFAULT_WINDOW	(64u << 20)	/* a region half, at most */
#define GP_DEFAULT_GRACE_MS	1000
#define GP_DEFAULT_RESPAWN	64	/* per worker */
#define GP_START_DEATHS_MAX	3	/* a slot whose replacements die before
					   READY this often in a row retires */
#define GP_BATCH_BYTES		(256u << 10)
#define GP_PIPE_WIDE_MAX	32	/* pools this small get pipes that
					   hold a batch (proc.c) */
#define GP_BATCH_MAX		65536
#define GP_BATCH_TARGET_NS	2000000	/* aim for 2 ms of work per batch */
#define GP_FLUSH_NS		1000000	/* worker holds results at most 1 ms */

/* Worker exit codes for failures of its own (beside user code's). */
#define GP_EXIT_PROTO		70	/* the master sent a bad message */
#define GP_EXIT_NOMEM		71	/* out of memory in the library */
#define GP_EXIT_VERSION		72	/* an exec'd worker's program speaks
					   another protocol or version */
#define GP_EXIT_EXEC		73	/* the exec itself failed */

/*
 * Shared with the worker through an anonymous MAP_SHARED page made before
 * any fork: the worker publishes what it is running, so the master can
 * apply deadlines and blame the right item when it dies, with no message.
 */
struct gp_shm {
	_Atomic uint64_t	 cur;		/* item id running; 0: between items */
	_Atomic int64_t		 started;	/* gp_now_ns() when cur began */
	_Atomic int		 stop;		/* master: skip rest of the batch */
	_Atomic int		 pgid;		/* item's process group, or 0 */
	_Atomic int		 cpubind_rc;	/* an exec'd worker's binding, */
	_Atomic int		 membind_rc;	/* made before its exec, */
	_Atomic int		 step;		/* as its start-up steps: 0, or
						   the one that failed */
	_Atomic int		 step_err;	/* (wstart.c), and its -errno */
	char			 pad[64 - 40];
};

enum gp_wstate {
	GP_W_DEAD = 0,		/* no process (not started, or reaped) */
	GP_W_STARTING,		/* forked, READY not yet received */
	GP_W_IDLE,		/* ready for a batch */
	GP_W_BUSY,		/* a batch is in flight */
	GP_W_QUITTING,		/* QUIT sent (recycle or destroy) */
};

/* One item in a worker's batch. */
struct gp_flight {
	struct gp_item	*item;
	uint64_t	 id;
};

/* An item or result over the window, travelling in pieces (data.c). */
struct gp_piece {
	uint64_t	 id;		/* its item; 0: none */
	uint64_t	 total;
	uint64_t	 got;		/* bytes acknowledged (item) or taken
					   (result) */
	uint64_t	 sent;		/* item: bytes sent */
	uint8_t		*buf;		/* result: where they go; NULL: dropped
					   (the caller's buffer is too small) */
	int		 own;		/* result: buf is malloc'd, ours */
	int		 cut;		/* item: send no more, the TASK now */
};

/* A result's bytes as the master has them, for gp_job_result(). */
struct gp_res {
	const uint8_t	*data;
	size_t		 len;
	uint8_t		*own;		/* data is this malloc'd buffer, which
					   the item may keep (it is then
					   NULL); freed by the caller if not */
};

/* A function as another image of the program finds it (ref.c). */
#define GP_REF_IDMAX	64
struct gp_ref {
	uint64_t	 off;		/* from its module's base */
	uint64_t	 dev, ino;	/* the module's file, without a build id */
	uint32_t	 idlen;		/* GNU build id's bytes */
	uint32_t	 set;		/* 0: no function */
	uint8_t		 id[GP_REF_IDMAX];
	char		 path[4096];	/* "" for the executable */
};

/* A pool whose workers exec (gp_pool_opts.exec): the master's copy of
 * what each needs, and, in an exec'd worker, the topology it was given. */
struct gp_xp {
	char		**argv;		/* owned copies */
	int		*keep;		/* gp_exec.keep_fds */
	int		 nkeep;
	int		 shmfd;		/* the shared slots' memfd */
	uint8_t		*init_arg;	/* init_arglen bytes, owned */
	size_t		 init_arglen;
	struct gp_ref	 init, fini;
	char		*xml;		/* the topology, as XML */
	int		 xmllen;
	int		 thissystem;	/* it is this machine's */
	gp_fn		*fn;		/* the last call's fn, */
	struct gp_buf	 fnref;		/* and its reference */
};

struct gp_worker {
	int			 idx;
	enum gp_wstate		 state;
	pid_t			 pid;
	int			 fd;		/* results in (read end, nonblocking) */
	int			 wfd;		/* tasks out (write end, nonblocking) */
	int			 tfd;		/* tasks' read end, held: no SIGPIPE */
	int			 pidfd;		/* readable when it exits, or -1 */
	struct gp_buf		 rbuf;
	struct gp_buf		 wbuf;
	struct gp_shm		*shm;
	struct gp_flight	*fl;		/* the batch in flight */
	size_t			 nfl, capfl;
	size_t			 nres;		/* records received for it */
	uint64_t		 job;		/* job generation it holds */
	unsigned		 ntasks;	/* items since it started */
	uint64_t		 stop_id;	/* item a STOP was sent for, or 0 */
	int			 stop_timeout;	/* that STOP was a timeout */
	int64_t			 kill_at;	/* SIGKILL deadline, 0: none */
	int64_t			 heard;		/* batch sent or results read
						   (with a timeout_ms only) */
	int			 retired;	/* never respawn (init failed) */
	int			 start_deaths;	/* replacements that died before
						   READY, in a row */
	int			 proto_err;	/* it broke the protocol */
	int			 status;	/* wait status of the last death */
	struct gp_msg_ready	 ready;		/* what its READY said */
	struct gp_place		 place;
	struct gp_worker_info	 info;
	const int		*home;		/* its GPUs (indices into gpus) */
	int			 nhome;
	int			 regfd;		/* exec: its region's memfd, or -1 */
	uint8_t			*reg;		/* its region (data.c): items in
						   [0, half), results in
						   [half, 2 x half); NULL: none */
	size_t			 half;
	size_t			 roff;		/* results' end in it this batch */
	struct gp_piece		 pitem;		/* an item going out in pieces */
	struct gp_piece		 pres;		/* a result coming in pieces */
	int			*iset;		/* GPUs its item holds (watch.c) */
	int			 niset, capset;	/* 0: no item counted */
	int			 claimed;	/* its item claimed iset (hold.c) */
	uint64_t		 imem;		/* bytes that item declared */
};

/* loop.c's poll set, rebuilt each turn; kept with the pool, not on the
 * stack of each call. */
struct gp_pollset {
	struct pollfd		*pfd;		/* 3 x nw + 5 entries */
	struct gp_pollref {
		struct gp_worker	*w;	/* NULL: a fd of the call's */
		pid_t			 pid;	/* its pid then: reaped (and
						   replaced) if it differs */
	}			*ref;		/* beside pfd */
	int			 n;		/* entries this turn */
	int			 nw;		/* the first nw are workers' */
	int			 cfd, kfd, ffd;	/* cancel_fd, ctl_fd, in_fd:
						   their entry, or -1 */
	int			 mfd;		/* the monitor's, or -1 */
	int			 lfd;		/* the claims', or -1 */
	int64_t			 spin;		/* gp_poll_spin()'s last wait */
};

struct gp_pool {
	pid_t			 master;	/* creator; workers check it */
	struct gp_xp		*xp;		/* workers exec; NULL: forks */
	int			 execd;		/* this is an exec'd worker's */
	struct gp_pool_opts	 o;		/* with defaults filled in */
	char			*xml;		/* owned copy of topology_xml */
	hwloc_topology_t	 topo;
	struct gp_gpu		*gpus;
	int			 ngpus;
	struct gp_worker	*w;
	int			 nw;
	struct gp_shm		*shm;		/* nw slots, one mapping */
	size_t			 shmlen;
	uint64_t		 ticket;	/* last item id handed out */
	uint64_t		 gen;		/* last job generation */
	int			 rr;		/* dispatch starts at this worker */
	int			 respawns;	/* budget left; < 0: no limit */
	struct gp_job		*job;		/* the call in progress, or NULL */
	struct gp_pollset	 ps;		/* loop.c: from the first run */
	int			*grp;		/* worker GPU sets: ngrp x per
						   (gpus_per_worker) indices */
	int			 ngrp;
	struct gp_watch {			/* watch.c */
		struct gp_mon	 mon;
		struct gp_gstate *gs;		/* ngpus, or NULL: not gated */
		struct gp_gusage *use;		/* nw */
		int		*busy;		/* nw: 1 while it runs an item, 2
						   until the snapshot asked for
						   when it started is in */
		int		*avail;		/* ngpus: scratch for picks */
		int		*pick;		/* ngpus: gp_watch_place()'s set */
		int		 npick;		/* 0: the worker's own GPUs */
		uint64_t	 pmem;		/* bytes its item declared */
		int		*mix;		/* ngpus: monitor's index of each */
		pid_t		*pids;		/* nw: scratch for requests */
		int		 on;		/* the monitor is wanted */
		int		 gate;		/* items are checked at all */
		int		 nomon;		/* no monitor, or it left */
		char		 why[200];	/* nomon: why ("" before) */
		int64_t		 due;		/* next sample; 0: none */
		char		 wait[320];	/* why the next item waits */
		struct gp_gate_policy pol;	/* what makes a GPU busy
						   (opts.c fills it) */
	}			 wt;
	struct gp_hold {			/* hold.c */
		struct gp_claimer *cl;		/* NULL: no claims */
		int		*set;		/* ngpus: 0 .. ngpus - 1 */
		int		*pend;		/* ngpus: claimed by the last
						   gp_hold_set(), for the item
						   placed next */
		int		 npend;
		uint64_t	 pmem;		/* their bytes each */
		int		 waiting;	/* an item waits for claims */
		int		 woke;		/* the claims' fd was read:
						   look again soon (claim.h) */
	}			 hd;
};

/* dispatch.c: batches out to idle workers. 0 or a negative errno (the
 * call fails). */
int	gp_dispatch(struct gp_pool *p, struct gp_job *job);

/* loop.c: the master's event loop; uses proc.c and job.c. */
/* Until every worker is READY or failed and reaped; GP_EINIT if any
 * failed (its slot is retired), or a negative errno. */
int	gp_loop_wait_ready(struct gp_pool *p);
/* Run job (a gp_pool_map() or gp_pool_run() call) to its end: 0, GP_ENOWORKER,
 * -EDEADLK (a feed that cannot be woken), or a negative errno. */
int	gp_loop_run(struct gp_pool *p, struct gp_job *job);
/* After gp_loop_run() failed with rc: no worker keeps the call's items. */
void	gp_loop_abandon(struct gp_pool *p, struct gp_job *job, int rc);
/* Free what gp_loop_run() keeps in the pool (its poll set). */
void	gp_loop_release(struct gp_pool *p);

/*
 * proc.c: worker processes. Master only; none of these blocks except
 * gp_proc_reap() on a worker just SIGKILLed, and gp_proc_shutdown().
 */
/* Fork w with its pipes (w->fd, wfd, tfd, pidfd); it starts in
 * GP_W_STARTING. Returns 0 or a negative errno (nothing left open). */
int	gp_proc_spawn(struct gp_pool *p, struct gp_worker *w);
/* Fork the dead slots that may run again; a failed fork retires one. */
void	gp_proc_respawn(struct gp_pool *p);
/* SIGKILL w and the process group its item declared. */
void	gp_proc_kill(struct gp_worker *w);
/* Wait for w (killing it if it still runs), with *status its wait
 * status or GP_WSTATUS_UNKNOWN; close its fds; it is GP_W_DEAD. */
void	gp_proc_reap(struct gp_worker *w, int *status);
/* After gp_proc_reap() of a worker that was in state was, in a call
 * (in_call) or at start-up: retire its slot, or count the death against
 * the respawn budget unless charge is 0 (the call fails: its slot is
 * replaced outside the budget, as after gp_loop_abandon()). */
void	gp_proc_lost(struct gp_pool *p, struct gp_worker *w,
	    enum gp_wstate was, int in_call, int charge);
/* The item id w is running (0: between items), and in *started since
 * when, read consistently from its shared slot. */
uint64_t gp_proc_current(struct gp_worker *w, int64_t *started);
void	gp_proc_close_fds(struct gp_worker *w);	/* all four, set to -1 */
/* Slots not retired: running or to be started again. */
int	gp_proc_live(const struct gp_pool *p);
/* QUIT, then TERM, then KILL, each after grace_ms; every worker reaped. */
void	gp_proc_shutdown(struct gp_pool *p);

/*
 * watch.c: the GPUs as the master sees them during a pool's life: the
 * monitor child (mon.c) and when to ask it, each GPU's state and which
 * items may start where (gate.c), the GPU figures of each worker's item.
 * Master only; without GPUS_FREE, MONITOR, item_mem or a feed's need()
 * it does nothing and costs nothing.
 */
/* In plan(): start the monitor if asked and ask for a first sample,
 * waited for there (gp_watch_first()) unless only GP_POOL_MONITOR asked
 * for it: then start() waits for it once the workers are forked; with
 * GPUS_FREE (not WAIT_FREE, not PLAN_ONLY) keep only the free GPUs
 * (GP_ENOGPU, with each GPU's reason in err, when none is). Then the
 * nearness of the GPUs and, with gpus_per_worker, their groups
 * (p->grp, p->ngrp). 0 or a negative code with err set. */
int	gp_watch_plan(struct gp_pool *p, char *err, size_t errlen);
/* gp_gpu_resolve() found no GPU: append to err what NVML says, when the
 * monitor was asked for (--show-gpus on a machine without a driver). */
void	gp_watch_nogpu(struct gp_pool *p, char *err, size_t errlen);
/* Wait for the first sample, if asked for and not in yet, and fold it
 * (a monitor that does not answer in 10 s, or ends: none from then on). */
void	gp_watch_first(struct gp_pool *p);
/* After the workers are placed: per-worker state. 0 or -ENOMEM. */
int	gp_watch_init(struct gp_pool *p);
void	gp_watch_release(struct gp_pool *p);
/* In a forked copy of the pool: close the copy's monitor fds, so that
 * gp_watch_release() leaves the creator's monitor running. */
void	gp_watch_forget(struct gp_pool *p);
/* Whether job's items go through gp_watch_place() (one item per batch). */
int	gp_watch_gated(const struct gp_pool *p, const struct gp_job *job);
/* For job's next item it (the head): an idle worker it may start on now,
 * with its GPU set written to p's scratch; NULL when it must wait (why
 * in p->wt.wait). *bad gets -E2BIG when it can never start here (more
 * GPUs or memory than the pool has). */
struct gp_worker *gp_watch_place(struct gp_pool *p, struct gp_job *job,
	    const struct gp_item *it, int *bad);
/* The item gp_watch_place() chose w for has started on it: count it
 * against its GPUs. Returns the number of GPUs it holds beyond w's own
 * (0: its own set), whose indices are then in w->iset. */
int	gp_watch_start(struct gp_pool *p, struct gp_worker *w);
/* w's item ended, or w died: its GPUs are free of it. */
void	gp_watch_end(struct gp_pool *p, struct gp_worker *w);
/* Poll: the monitor's fd when an answer is pending (else -1), and the
 * time the next sample is due (-1: none), asking now when due. */
int	gp_watch_fd(struct gp_pool *p, const struct gp_job *job, int64_t now,
	    int64_t *due);
/* The monitor's fd is readable: read, and fold a whole snapshot in. */
void	gp_watch_read(struct gp_pool *p);

/*
 * hold.c: the pool's claims on its GPUs (claim.c), for its life or, under
 * GP_POOL_CLAIM_ITEMS, for each item while it runs. Master only.
 */
/* Before the first worker starts: the claimer and the GPUs named. 1
 * when a life claim is to be taken (gp_hold_life()), 0 when not, or a
 * negative code with err set. */
int	gp_hold_start(struct gp_pool *p, char *err, size_t errlen);
/* The life claim: every GPU claimed (waiting its turn,
 * claim_timeout_ms, GP_ECLAIM). 0 or a negative code with err set. */
int	gp_hold_life(struct gp_pool *p, char *err, size_t errlen);
/* After the first sample came late (gp_watch_first()): the claimer's
 * GPU sizes as gp_hold_open() would have named them, before its first
 * claim. */
void	gp_hold_sizes(struct gp_pool *p);
/* A GPU's name in the claims table (standalone.c's gp_claim() too). */
const char *gp_hold_key(const struct gp_gpu *g);
/* A claimer in *c with each of p's GPUs named (p->hd.set their
 * indices): 0 (*c NULL: claims are off) or a negative code with err. */
int	gp_hold_open(struct gp_pool *p, struct gp_claimer **c, char *err,
	    size_t errlen);
/* Wait its turn (claim_timeout_ms, cancel_fd) for n of p's GPUs, each
 * with mem bytes, through p->hd.cl: n, with the GPUs in got; GP_ECLAIM
 * or a negative errno with err saying why and who holds them. */
int	gp_hold_wait(struct gp_pool *p, int n, uint64_t mem, int *got,
	    char *err, size_t errlen);
/* GPUS_FREE, before the workers are placed: each GPU another gpupool
 * holds now (or keeps for an earlier waiter) is busy, its why saying who.
 * Returns how many. */
int	gp_hold_mark(struct gp_pool *p);
/* Whether items claim their GPUs (GP_POOL_CLAIM_ITEMS and claims on). */
int	gp_hold_items(const struct gp_pool *p);
/* An item of mem bytes wants `want` of the n GPUs of set: claimed (the
 * count; which, in p->hd.pend until gp_watch_start() takes them), or 0
 * with why in p->wt.wait. Without item claims: want. */
int	gp_hold_set(struct gp_pool *p, const int *set, int n, int want,
	    uint64_t mem);
/* The item placed has started: whether it took claims (then its own,
 * given back by gp_hold_end()). */
int	gp_hold_taken(struct gp_pool *p);
/* Claims taken for an item that did not start go back. */
void	gp_hold_unplace(struct gp_pool *p);
/* The item of mem bytes on the n GPUs of set ended: its claims go. */
void	gp_hold_end(struct gp_pool *p, const int *set, int n, uint64_t mem);
/* Nothing waits for a GPU any more: leave the queue. */
void	gp_hold_idle(struct gp_pool *p);
/* Poll: the claims' fd while an item waits for claims (-1: none), and
 * when to look again regardless. */
int	gp_hold_fd(struct gp_pool *p, int64_t now, int64_t *due);
void	gp_hold_read(struct gp_pool *p);
void	gp_hold_release(struct gp_pool *p);

/*
 * data.c: each worker slot's region, the shared memory big items and
 * results travel through (msg.h, GP_REC_SHM). Mapped by the master before
 * the first fork and kept for the pool's life: a replacement worker
 * inherits the same pages, and nothing in them outlives a batch.
 */
/* Map a region for every slot (2 x the window rounded up to a page,
 * pages faulted on first use, bound to the slot's NUMA nodes). A slot
 * whose mapping fails has none: its items and results use the pipes. */
void	gp_data_map(struct gp_pool *p);
/* len bytes shared with the workers (MAP_NORESERVE if noreserve):
 * anonymous, or, for exec'd ones, a memfd in *fd (else -1). MAP_FAILED
 * on failure. */
void	*gp_data_shared(const struct gp_pool *p, size_t len, int noreserve,
	    int *fd);
void	gp_data_unmap(struct gp_pool *p);
/* In worker w after fork: unmap every other slot's region. */
void	gp_data_keep(struct gp_pool *p, const struct gp_worker *w);
/* Sending: the offset in w's half (items or results) for the next len
 * bytes of the batch, *end the end of those placed before them, when
 * they are big (GP_SHM_MIN) and fit; -1: they go in the message. */
long	gp_data_place(const struct gp_worker *w, size_t *end, size_t len);
/* Receiving a GP_REC_SHM record of len bytes: where they lie, in w's
 * results half if results, else its items half; NULL when w has no
 * region, len is over max or they would not fit, a lie the caller takes
 * for a broken protocol. Nothing is read before this check. */
const uint8_t *gp_data_bytes(const struct gp_worker *w, int results,
	    size_t *end, uint32_t len, size_t max);
/* Sending: the offset of in's len bytes in the pool's extern mapping
 * (gp_pool_opts.ext_base) when they lie wholly in it, else -1. */
long	gp_data_ext_off(const struct gp_pool *p, const void *in, size_t len);
/* Receiving a GP_REC_EXT record of len bytes whose offset is at offp:
 * where they lie in this worker's extern mapping; NULL when it has none
 * or they would end past it, a lie the caller takes for a broken
 * protocol. Nothing is read before this check. */
const uint8_t *gp_data_ext(const struct gp_pool *p, const uint8_t *offp,
	    uint32_t len);
/* The master's side of the pieces (msg.h, GP_MSG_PIECE). An item over
 * the window is alone in its batch: w->pitem names it, and this sends
 * its next piece, or, once each was acknowledged (or the worker said it
 * cannot take it, or the call is being stopped), the TASK that runs it.
 * 0 or -ENOMEM. */
int	gp_data_item_send(struct gp_pool *p, struct gp_worker *w);
/* w acknowledged a piece of its item (h, pl: the ACK): the next one. 0,
 * -ENOMEM, or -EPROTO for an ACK of nothing sent. */
int	gp_data_item_acked(struct gp_pool *p, struct gp_worker *w,
	    const struct gp_msg_hdr *h, const uint8_t *pl);
/* A piece of the result of w's next item (h, pl: the PIECE), checked
 * before anything is read or allocated, put in place (a buffer of the
 * whole made at its first piece: the caller's with GP_POOL_OUT_BUFFERS,
 * else a malloc), acknowledged. 0, -ENOMEM (the call fails), or -EPROTO
 * for a lie. */
int	gp_data_result_piece(struct gp_pool *p, struct gp_job *job,
	    struct gp_worker *w, const struct gp_msg_hdr *h,
	    const uint8_t *pl);
/* The record r of w's next item, res its bytes as received: for a
 * GP_REC_PIECED record, res becomes the pieces it ends (-EPROTO unless
 * each came); any other record drops the pieces that came for it (fn
 * replied again, or its reply failed). -EPROTO too while w's item still
 * goes out in pieces. Needed only when r is PIECED or pieces are under
 * way (w->pres, w->pitem). */
int	gp_data_result(struct gp_worker *w, const struct gp_rec_result *r,
	    struct gp_res *res);
/* The pages of a fresh buffer of len bytes at p (one that pieces will
 * fill), taken now in one call rather than one fault per page as each
 * piece is copied in; best effort. */
void	gp_data_prefault(void *p, size_t len);
/* w is gone or abandoned: no piece goes on, what came is freed. */
void	gp_data_forget(struct gp_worker *w);

/*
 * wio.c: a worker's blocking I/O on its pipes, which waits out a full or
 * empty pipe and leaves by _exit() when the master is gone (EOF, a
 * failed write, the master's pidfd). Worker only.
 */
/* At start-up: watch the master's pidfd (GP_POOL_NO_PDEATHSIG), dropping
 * an outer pool's watch; the stop fd fn polls (fd, the task pipe, or an
 * epoll set of it and the pidfd). */
int	gp_wio_watch(struct gp_pool *p, int fd);
/* Whether a master pidfd is watched (the pipes are then nonblocking). */
int	gp_wio_watched(void);
/* Until fd is ready for events. */
void	gp_wio_wait(int fd, short events);
/* All of iov (modified), all of b's pending bytes (b emptied after). */
void	gp_wio_sendv(int fd, struct iovec *iov, int n);
void	gp_wio_send(int fd, struct gp_buf *b);
/* Exactly n bytes. */
void	gp_wio_read(int fd, void *p, size_t n);
/* The next whole message into in (buffered: one read usually brings the
 * header and the payload together), no larger than max; its payload,
 * valid until in is next reserved. A bad header: _exit(GP_EXIT_PROTO). */
void	gp_wio_next(int fd, struct gp_buf *in, size_t max,
	    struct gp_msg_hdr *h, const uint8_t **payload);

/*
 * exec.c: workers that exec (gp_pool_opts.exec). The master's side: the
 * options checked and copied, the HELLO each worker gets first, and the
 * child's last steps before its exec; the worker's: gp_worker_enter().
 */
/* In gp_pool_create(): copy o->exec into p->xp, with refs of init and
 * fini and the topology as XML. 0, or -EINVAL / -ENOMEM with err set. */
int	gp_exec_prepare(struct gp_pool *p, char *err, size_t errlen);
void	gp_exec_release(struct gp_pool *p);
/* A call's fn, as its JOB names it (p->xp->fnref): 0, -EINVAL when it is
 * in no module (an exec'd worker could not find it), -ENOMEM. */
int	gp_exec_fn(struct gp_pool *p, gp_fn *fn);
/* In the master, before fork: the environment w's program gets (the
 * caller's, with its GPU, GPUPOOL_WORKER naming fds tfd and rfd), a
 * malloc'd array to give gp_exec_free_env() after the fork; NULL: no
 * memory. */
char	**gp_exec_env(struct gp_pool *p, struct gp_worker *w, int tfd, int rfd);
void	gp_exec_free_env(char **envp);
/* In the master, after fork: w's HELLO into w->wbuf. 0 or -ENOMEM. */
int	gp_exec_hello(struct gp_pool *p, struct gp_worker *w);
/* In the child: signals, death with the master, binding, only the fds
 * it needs, then exec. Never returns. */
void	gp_exec_child(struct gp_pool *p, struct gp_worker *w, int tfd, int rfd,
	    char **envp) __attribute__((noreturn));

/* ref.c: functions by module and offset. gp_ref_make(): -ENOENT when fn
 * is in no loaded module (r->set 0 for fn NULL); gp_ref_resolve(): NULL
 * when this process has no such module (loading it by path if need be)
 * or the offset is outside it. put/get: the wire form (-EBADMSG); len:
 * its length there. */
int	gp_ref_make(const void *fn, struct gp_ref *out);
void	*gp_ref_resolve(const struct gp_ref *r);
int	gp_ref_put(struct gp_buf *b, const struct gp_ref *r);
int	gp_ref_get(const uint8_t **pos, const uint8_t *end, struct gp_ref *r);
ssize_t	gp_ref_len(const uint8_t *pos, const uint8_t *end);

/* wstart.c: start-up steps of forked and exec'd workers alike (in the
 * worker, or in an exec'd one's child before its exec). */
/* Signals to their defaults (SIGINT ignored), mask empty, and, with
 * die, death with master: PR_SET_PDEATHSIG, which fires when the *thread*
 * that forked this process ends (prctl(2)), not only its process, so its
 * signal is caught and SIGKILLs this process only if master is gone
 * (leaves at once if it is gone already). A handler is not kept across
 * an exec: the exec'd worker holds the signal blocked until
 * gp_worker_main() catches it again. The worker's and the GPU
 * monitor's. */
#define GP_DEATH_SIG	(SIGRTMIN + 4)	/* not SIGRTMAX: valgrind keeps it */
void	gp_wstart_reset_signals(pid_t master, int die);
/* gp_wstart_reset_signals() for a worker of p (die unless
 * GP_POOL_NO_PDEATHSIG). */
void	gp_wstart_signals(const struct gp_pool *p);
/* The master is gone: leave (_exit(0)), and SIGKILL the process group
 * this worker leads, if it leads one (gp_ctx_set_pgid()): nobody else is
 * left to end what its items started. Async-signal-safe. */
void	gp_wstart_leave(void) __attribute__((noreturn));
/* Bind to w's place unless GP_POOL_NO_BIND: 0 or -errno each. */
void	gp_wstart_bind(struct gp_pool *p, struct gp_worker *w, int *cpu_rc,
	    int *mem_rc);
/* The start-up steps that may fail (wstart.c's table: the niceness),
 * after the binding. In an exec'd worker's child, before its exec: the
 * steps that run there, the first failure left in w's slot as {step,
 * step_err}. */
void	gp_wstart_steps_child(struct gp_pool *p, struct gp_worker *w);
/* In the worker: the other steps (an exec'd one reads its child's from
 * the slot); the first that fails fills rd's step, step_err and why, and
 * sets fatal. */
void	gp_wstart_steps(struct gp_pool *p, struct gp_worker *w,
	    struct gp_msg_ready *rd);
/* GP_POOL_FIT_THREADS: thread pools sized to the CPUs bound to (the
 * variables the user did not set, and libraries already loaded);
 * w->info.threads the count. */
void	gp_wstart_threads(struct gp_pool *p, struct gp_worker *w);

/* worker.c: the child after fork; never returns. */
void	gp_worker_main(struct gp_pool *p, struct gp_worker *w, int fd, int wfd)
	    __attribute__((noreturn));
/* The options the worker runs under (not in the API: check_exec holds
 * an exec'd worker's to its master's). */
const struct gp_pool_opts *gp_ctx_opts(const struct gp_ctx *ctx);

/* opts.c: the options, checked and resolved. */
/* Copy opts (NULL: { 0 }) to p->o, check it and fill in the defaults,
 * the environment's too (GPUPOOL_FAKE_GPUS, GPUPOOL_TOPOLOGY), and
 * p->wt.pol, the policy gate.c applies. 0, -EINVAL with the reason in
 * err, or -ENOMEM. */
int	gp_opts_load(struct gp_pool *p, const struct gp_pool_opts *opts,
	    char *err, size_t errlen);
/* The options as an exec'd worker gets them (exec.c's HELLO): o whole,
 * less every pointer and descriptor of this process (the rows' by their
 * kind, the other pointers by name; errlen 0, cancel_fd -1). init, fini
 * and init_arg cross on their own, by reference and as bytes. */
void	gp_opts_wire(const struct gp_pool_opts *o, struct gp_pool_opts *out);
/* Whether the n reserved words at r are all zero. */
int	gp_opts_zeroed(const uint64_t *r, size_t n);

/* err.c: at the bottom, calls nothing here. Writes the printf-style
 * reason into err (if not NULL and errlen > 0) and returns rc. */
int	gp_errf(char *err, size_t errlen, int rc, const char *fmt, ...)
	    __attribute__((format(printf, 4, 5)));

#endif /* GP_INTERNAL_H */
