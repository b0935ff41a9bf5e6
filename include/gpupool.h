/*
 * gpupool.h: a preforking process pool with one long-lived worker per GPU.
 *
 * The master forks one worker per GPU (or k per GPU), pins each to its GPU
 * (CUDA_VISIBLE_DEVICES=<UUID>) and to the GPU's NUMA node (CPUs, then
 * memory, with hwloc), and hands items to idle workers over pipes.
 * The master never calls CUDA: GPUs are enumerated by a short-lived probe
 * child. See gpupool(3) for the full manual and docs/design.md for the
 * process model.
 *
 * Conventions: functions returning int give 0 (or a documented count) on
 * success and a negative code on failure: a negated errno value or one of
 * the GP_E* codes below. gp_strerror() names every code. The library never
 * prints, never exits the caller, installs no signal handler and reaps only
 * its own children, by pid. Create pools from a single-threaded process,
 * before anything in it initialises CUDA.
 *
 * Ownership: the library frees nothing of the caller's and keeps no
 * pointer into what a call was given once the call returns (options,
 * items, feeds, arg: arg is copied to the workers). What it hands over is
 * the caller's: a pool from gp_pool_create(), until gp_pool_destroy(); an
 * item's out, a malloc'd buffer to free with free() or gp_items_release().
 * Two pool flags change where results go, for callers that opt in:
 * GP_POOL_OUT_BUFFERS copies each into a buffer the caller gave (no
 * malloc), GP_POOL_OUT_VIEW lends it to done() where it lies (no copy).
 * Each call below says what it reads, writes and keeps.
 *
 * Threads: the library starts none, and pools share no state, so calls on
 * different pools may run at the same time in different threads. On one
 * pool, one map (gp_pool_map() or gp_pool_run()) at a time: a second call
 * while one runs, from any thread, returns -EBUSY (an atomic check: of
 * calls made at once, exactly one proceeds). gp_pool_destroy() must not
 * overlap any other call on the same pool; gp_pool_size() may run any
 * time, gp_pool_info() from the thread making calls on the pool or while
 * none runs (a call replaces dead workers). pool_map() and
 * gp_default_pool_destroy() may be called from any threads: they take
 * turns on the default pool. gp_item_init(), gp_items_release() and the
 * strerror functions touch only their arguments. A call that replaces a
 * worker forks from the thread making it: in a threaded program, fn and
 * init must not rely on locks other threads could hold at that moment,
 * unless gp_pool_opts.fork_hook takes them around the fork.
 * gp_ctx_* calls are for the worker side only: inside fn, init or fini,
 * with the ctx they were given, which is not valid after they return.
 *
 * Fork: the workers are children of the process that created the pool,
 * and only that process can run calls on it or stop it. In a child the
 * application forks (from a single-threaded parent, or it may call nothing
 * of the library until it execs), the inherited pool is a copy: calls
 * return -ECHILD, gp_pool_size() and gp_pool_info() read the copy, and
 * gp_pool_destroy() only closes the child's copies of the pool's
 * descriptors and frees its memory, never stopping or waiting for the
 * parent's workers. pool_map() in such a child leaves the inherited
 * default pool alone and creates the child's own. exec() drops every
 * descriptor of a pool (all are close-on-exec). A worker may create pools
 * of its own, whose workers are its children.
 *
 * Room to grow: the structs a program allocates once (gp_pool_opts,
 * gp_feed, gp_worker_info) end in reserved fields, so that later versions
 * add fields without changing their size or layout. Zero them: { 0 },
 * designated initialisers and memset() do. Options and feeds with a
 * reserved field set, or unknown bits in gp_pool_opts.flags, are refused
 * (-EINVAL), so a program built against a newer header fails clearly
 * instead of being half understood. The library zeroes the reserved part
 * of each gp_worker_info it fills. struct gp_item has none: programs
 * allocate it by the million, and 16 reserved bytes per item cost 5-8%
 * of the throughput on small items (bench_pool trivial); its 48 bytes are
 * fixed, and a later per-item field would come with a call of its own.
 */
#ifndef GPUPOOL_H
#define GPUPOOL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(GP_BUILDING) && defined(__GNUC__)
#define GP_API __attribute__((visibility("default")))
#else
#define GP_API
#endif

#define GP_VERSION "0.1.0"

/* Library error codes beside negated errno values. */
enum gp_error {
	GP_ENOGPU = -10001,	/* no GPU found and none given (see errbuf) */
	GP_EINIT = -10002,	/* a worker's initialiser or binding failed */
	GP_ENOWORKER = -10003,	/* every worker is gone (respawn budget spent) */
	GP_EPLAN = -10004,	/* the pool was created with GP_POOL_PLAN_ONLY */
	GP_ECLAIM = -10005,	/* the pool's GPUs were not claimed within
				   claim_timeout_ms, or the wait for them
				   was canceled (see errbuf) */
};

/* What became of one item (struct gp_item.status). */
enum gp_status {
	GP_OK = 0,		/* fn returned 0 */
	GP_FAILED,		/* fn returned nonzero: code is that value */
	GP_CRASHED,		/* the worker died: code is its exit status,
				   or 128 + signal number, or -1: unknown,
				   as the caller ignores SIGCHLD (SIG_IGN
				   or SA_NOCLDWAIT: the kernel reaps the
				   worker and drops its status) */
	GP_TIMEDOUT,		/* ran past timeout_ms: code is fn's return if
				   it returned in the grace period, else -1
				   (also when the stop cut its reply short:
				   see gp_ctx_reply()) */
	GP_CANCELED,		/* cancel_fd became readable first */
	GP_ERROR,		/* code is a negative errno: -EMSGSIZE (item or
				   result over max_msg), -EPROTO (bad message),
				   -ENOMEM (its worker could not hold an item
				   over the window), or the call's code if it
				   failed while the item ran (-ENOMEM) */
	GP_NOTRUN,		/* never ran: the pool lost all its workers */
};

/* One unit of work: caller's input bytes in, result bytes out. The caller
 * owns the item and in (read only while the call that runs the item
 * lasts); set it up with gp_item_init() or { .in = ..., .inlen = ... }. */
struct gp_item {
	const void	*in;		/* input bytes (may be NULL if inlen 0) */
	size_t		 inlen;
	void		*out;		/* result bytes, malloc'd, or NULL */
	size_t		 outlen;
	int		 status;	/* enum gp_status */
	int		 code;		/* see enum gp_status */
	int		 worker;	/* worker that ran it last, -1 if none */
	int		 attempts;	/* times it was started */
};

/* Running in a worker: the handle fn and init receive. */
struct gp_ctx;

/*
 * The task. Runs in a worker process, once per item. Return 0 for success;
 * any other value marks the item GP_FAILED with that code. Call gp_ctx_reply()
 * to return bytes. fn may keep state across items in its process (a loaded
 * model): the worker lives until the pool is destroyed or recycled. in is
 * valid only until fn returns (an item of 64 bytes or more lies in the
 * worker's shared region, reused by the next batch; one over the pool's
 * window in memory of the worker's that is freed when fn returns): keep
 * a copy, not the pointer.
 */
typedef int gp_fn(struct gp_ctx *ctx, const void *in, size_t inlen,
    void *arg);

/*
 * Per-worker initialiser, run once in each worker after it is pinned and
 * its CUDA_VISIBLE_DEVICES is set, before its first item (load a model,
 * create a CUDA context here). Nonzero return: the worker exits, is not
 * respawned, and gp_pool_create() fails with GP_EINIT.
 */
typedef int gp_init_fn(struct gp_ctx *ctx, void *arg);

/* Worker teardown, run once when a worker leaves cleanly. A recycled
 * worker's fini (max_tasks) gets grace_ms, then SIGKILL. */
typedef void gp_fini_fn(struct gp_ctx *ctx, void *arg);

enum gp_pool_flags {
	GP_POOL_CANCEL_FD = (1 << 0),	/* cancel_fd is valid */
	GP_POOL_NO_BIND = (1 << 1),	/* place, but do not bind */
	GP_POOL_STRICT_BIND = (1 << 2),	/* a failed bind fails the worker */
	GP_POOL_CUDA_INIT = (1 << 3),	/* worker creates its CUDA context
					   before init (needs -Dcuda) */
	GP_POOL_PLAN_ONLY = (1 << 4),	/* resolve GPUs and placement, fork
					   nothing: for gp_pool_info() */
	GP_POOL_NO_PDEATHSIG = (1 << 5),/* workers are not SIGKILLed when the
					   master dies: each polls a pidfd of
					   it (EOF without pidfds), so a
					   helper the master forked and that
					   holds the pipes cannot hide the
					   death; a busy one's stop fd turns
					   readable */
	GP_POOL_GPUS_FREE = (1 << 6),	/* use only free GPUs: at creation,
					   those with no compute process
					   outside the pool, memory used by
					   others under busy_pct (and their
					   utilisation under busy_util, if
					   set); during
					   calls, no item starts on a GPU
					   someone else has taken until it is
					   free again (needs NVML; without it
					   every GPU counts as free) */
	GP_POOL_WAIT_FREE = (1 << 7),	/* with GPUS_FREE: keep the busy GPUs
					   too, and let items wait for them
					   (without GPUS_FREE: -EINVAL) */
	GP_POOL_MONITOR = (1 << 8),	/* watch the GPUs through NVML even
					   without GPUS_FREE: item_mem and
					   need() fit what is really in use,
					   gp_pool_usage() has figures */
	GP_POOL_OUT_BUFFERS = (1 << 9),	/* results go into buffers the
					   caller gives: each item's out
					   points at outlen bytes of room
					   (NULL and 0: no room), which the
					   calls keep; a result is copied
					   there and outlen set to its
					   length; one that does not fit
					   ends GP_ERROR, -ENOBUFS, with
					   outlen the room it needs. No
					   malloc per result; never call
					   gp_items_release() on them */
	GP_POOL_OUT_VIEW = (1 << 10),	/* gp_pool_run() only: a result is
					   not copied at all; in done(),
					   out points at its bytes in the
					   pool's memory (the worker's
					   shared region, or the master's
					   read buffer), valid until done()
					   returns; never free it. With
					   OUT_BUFFERS: -EINVAL at create;
					   gp_pool_map(): -EINVAL (its
					   results outlive the call) */
	GP_POOL_FIT_THREADS = (1 << 11),/* before init, each worker's
					   OpenMP, OpenBLAS, MKL, BLIS,
					   vecLib, numba and numexpr thread
					   counts are its CPU count: each
					   variable (OMP_NUM_THREADS, ...)
					   set unless the environment has it
					   (the user's setting wins), and
					   libraries already loaded (a
					   forked worker's) told so; see
					   gp_worker_info.threads */
	GP_POOL_CLAIM_ITEMS = (1 << 12),/* claim a GPU per item, while it
					   runs there, rather than each GPU
					   for the pool's life (workers that
					   hold no CUDA context: gpupool-run) */
};

/*
 * A clean start (gp_pool_opts.exec): each worker is forked, then execs
 * a program, so it begins as a fresh process image: nothing of the
 * caller's memory, threads, locks or CUDA state reaches it. In the child,
 * before the exec, the library resets signals, asks for PR_SET_PDEATHSIG,
 * binds CPUs and memory and sets the niceness (all kept across exec); no
 * fork_hook runs and nothing of the caller's code. Only the descriptors
 * the worker needs survive the exec: 0, 1, 2, its pipes and shared
 * memory, and keep_fds.
 * The program must call gp_worker_enter() first thing in main(): the
 * worker then checks that it speaks the pool's protocol and library
 * version (else it exits 72 and gp_pool_create() fails with GP_EINIT
 * saying so), maps its region, and runs as a forked worker does
 * (initialiser, items, timeouts, recycling, replacements, pieces, death
 * with the master).
 *
 * Functions cross by name, not address: fn, init and fini are found in
 * the worker as the same offset in the same module (the executable, or
 * a shared library, loaded by its path if the program has not), which
 * must be the same build (its GNU build id, else the same file): a fn
 * of the executable needs argv[0] to be this program (re-exec
 * /proc/self/exe, say). Data crosses as bytes: arg per call, as always,
 * and init_arglen bytes of init_arg, which init and fini get a copy of.
 */
struct gp_exec {
	char *const	*argv;		/* the program and its arguments,
					   NULL-terminated; argv[0] its
					   path (no PATH search) */
	size_t		 init_arglen;	/* bytes of opts.init_arg copied to
					   each worker (0: init_arg must be
					   NULL) */
	const int	*keep_fds;	/* more descriptors each worker keeps
					   across the exec, at the same
					   numbers (the caller keeps them
					   open while the pool lives: a
					   replacement gets them too) */
	int		 nkeep;
	int		 pad;
	uint64_t	 reserved[4];	/* must be 0 */
};

/*
 * Fork hook (gp_pool_opts.fork_hook): called around every fork of a worker,
 * the first ones in gp_pool_create() and every replacement (a dead or
 * recycled worker, forked during gp_pool_map() or gp_pool_run()), in the
 * thread making that call: GP_FORK_BEFORE in the parent just before
 * fork(), then GP_FORK_PARENT in the parent just after it (also when
 * fork() failed, so BEFORE is always paired) and GP_FORK_CHILD in the new
 * worker, first thing after fork(), before the library does anything else
 * there (it then closes descriptors, resets signals, binds and runs init).
 * An embedding runtime runs its fork protocol here (CPython:
 * PyOS_BeforeFork(), PyOS_AfterFork_Parent(), PyOS_AfterFork_Child(), with
 * its lock held). arg is fork_arg. The hook must not call the library on
 * the same pool. The probe child that enumerates GPUs (in gp_pool_create(),
 * when GPUs are not fake) is forked without the hook: it runs only the
 * library's and CUDA's C code, then _exit()s. Nor are workers that exec
 * (gp_pool_opts.exec): their child runs no code of the caller's before
 * it execs, and the program starts afresh.
 */
enum gp_fork_phase {
	GP_FORK_BEFORE = 0,
	GP_FORK_PARENT = 1,
	GP_FORK_CHILD = 2,
};
typedef void gp_fork_hook(int phase, void *arg);

/* Pool options. { 0 } gives the defaults named on each field. */
struct gp_pool_opts {
	const char	*gpus;		/* "0,2", "GPU-8932f937,...", bus ids;
					   NULL or "all": every GPU found;
					   "free" or "free:LIST": that, with
					   GP_POOL_GPUS_FREE */
	int		 per_gpu;	/* workers per GPU; 0: 1 */
	int		 fake_gpus;	/* N fake GPUs, no probe; 0: the value of
					   GPUPOOL_FAKE_GPUS, if set */
	const char	*fake_busids;	/* "0000:34:00.0,..." for fake GPUs */
	const char	*topology_xml;	/* hwloc XML instead of this machine;
					   NULL: GPUPOOL_TOPOLOGY, if set */
	gp_init_fn	*init;		/* NULL: none */
	gp_fini_fn	*fini;		/* NULL: none */
	void		*init_arg;	/* passed to init and fini */
	unsigned	 timeout_ms;	/* per item; 0: none */
	unsigned	 grace_ms;	/* after a timeout or cancel, time fn gets
					   to return before SIGKILL (and fini,
					   in a recycled worker); 0: 1000 */
	int		 cancel_fd;	/* with GP_POOL_CANCEL_FD: readable ⇒
					   cancel the map in progress */
	unsigned	 max_tasks;	/* recycle a worker after N items; 0: never */
	int		 respawn_max;	/* worker deaths replaced over the pool's
					   life; 0: 64 per worker; < 0: no limit */
	int		 retries;	/* re-run a crashed or timed-out item up
					   to N more times; 0: none */
	size_t		 max_msg;	/* largest item or result, checked
					   before anything is allocated for
					   it; 0: the machine's physical
					   memory (any that fits) */
	unsigned	 flags;		/* enum gp_pool_flags */
	unsigned	 busy_util;	/* GPUS_FREE: a GPU whose utilisation
					   less our items' (NVML's SM
					   shares) is over this % is busy:
					   someone NVML does not list
					   computes there (another
					   container); 0: no such rule; set
					   without GPUS_FREE: -EINVAL. (It
					   fills what was padding: zero the
					   struct, as above) */
	char		*errbuf;	/* if set, create writes a one-line reason
					   for a failure here */
	size_t		 errlen;
	gp_fork_hook	*fork_hook;	/* around each worker fork; NULL: none */
	void		*fork_arg;	/* passed to fork_hook */
	int		 gpus_per_worker;/* GPUs each worker owns, chosen near
					   each other (NVLink, PCIe switch,
					   NUMA node); its CUDA_VISIBLE_DEVICES
					   lists them; 0: 1 */
	unsigned	 busy_pct;	/* GPUS_FREE: memory used by others over
					   this % of the total makes a GPU
					   busy; 0: 10; set without
					   GPUS_FREE: -EINVAL */
	uint64_t	 item_mem;	/* GPU memory each item needs, bytes per
					   GPU: an item starts only where it
					   fits beside what runs (see
					   gp_pool_gpu_state()); 0: none
					   declared */
	uint64_t	 window;	/* bytes of shared memory each worker
					   maps per direction (virtual: pages
					   are taken as first used, and kept),
					   and the largest message: an item or
					   result up to this size travels in
					   one go (fn reads the item where it
					   lies), a larger one in pieces of
					   this size, copied once more on the
					   way in (into the worker's memory);
					   batches of small ones are cut to
					   fit it. 0: 64 MiB, or max_msg if
					   smaller; at most max_msg and under
					   4 GiB */
	const struct gp_exec *exec;	/* NULL: workers are forks of the
					   caller; else each execs a
					   program (read during
					   gp_pool_create() only) */
	int		 nice;		/* the niceness each worker runs at,
					   and so its items and what they
					   start: -20 .. 19, as setpriority()
					   and GNU parallel's --nice take it
					   (absolute, not nice(1)'s
					   increment); 0: the caller's, left
					   as it is. Under the caller's needs
					   CAP_SYS_NICE or RLIMIT_NICE, else
					   the workers fail to start:
					   GP_EINIT, errbuf saying why. (It
					   and pad were reserved[0]) */
	int		 claim_timeout_ms;/* how long gp_pool_create() waits
					   for its GPUs' claims (host-wide:
					   see "Claims" below): 0 as long as
					   it takes, < 0 not at all; then
					   GP_ECLAIM. (It was pad) */
	const char	*claims;	/* the claims directory; NULL:
					   $GPUPOOL_CLAIMS, else
					   /run/lock/gpupool; "none": no
					   claims; "": -EINVAL */
	const void	*ext_base;	/* an extern mapping: items whose bytes
					   lie wholly in [ext_base, ext_base +
					   ext_len) go to a worker as their
					   offset, and fn reads them there
					   (no copy into its region). The
					   caller's MAP_SHARED mapping of
					   memfd ext_fd from offset ext_off,
					   inherited by forked workers (no
					   MADV_DONTFORK; they make it read
					   only), mapped read only from the
					   fd by exec'd ones; base and
					   ext_off page aligned, and all
					   three of base, len and fd (> 0)
					   set or none: -EINVAL. Kept as
					   long as an item in it is out (a
					   rank's in ring: _serve.py). NULL:
					   none. (It and the three below
					   were reserved[0-3]) */
	uint64_t	 ext_len;
	uint64_t	 ext_off;
	int		 ext_fd;
	int		 ext_pad;	/* must be 0 */
	uint64_t	 reserved[6];	/* must be 0: room for later fields
					   (the struct grew from 176 to 256
					   bytes once, with soname
					   libgpupool.so.1, to have it) */
};

/* Where a worker runs (gp_pool_info(), gp_ctx_info()). */
struct gp_worker_info {
	int		 worker;	/* 0 .. gp_pool_size() - 1 */
	int		 gpu;		/* index into the pool's GPU list */
	int		 slot;		/* 0 .. per_gpu - 1 */
	pid_t		 pid;		/* 0 if not running; in a worker: its own */
	int		 fake;		/* 1 for a fake GPU */
	char		 visible[96];	/* its CUDA_VISIBLE_DEVICES value */
	char		 uuid[48];	/* "GPU-..." or "" when unknown */
	char		 busid[32];	/* "0000:b7:00.0" or "" when unknown */
	char		 name[96];	/* device name or "" */
	uint64_t	 mem_bytes;	/* device memory, 0 when unknown */
	int		 numa;		/* first NUMA node, -1 if unknown */
	char		 nodeset[64];	/* NUMA nodes, as a list "0-1" */
	char		 cpuset[256];	/* CPUs, as a list "0-3,8" */
	char		 where[64];	/* how the place was chosen, e.g.
					   "gpu-local", "machine: no bus id" */
	int		 cpubind_rc;	/* 0 or -errno, once the worker started */
	int		 membind_rc;	/* 0 or -errno (0 if not bound) */
	int		 ngpus;		/* GPUs it owns (gpus_per_worker): gpu
					   is the first, visible lists all */
	int		 threads;	/* GP_POOL_FIT_THREADS, in the
					   worker's own (gp_ctx_info()): the
					   thread count set, its CPUs; else 0 */
	char		 reserved[56];	/* 0: room for later fields */
};

/* What one item needs to start (gp_feed.need). */
struct gp_need {
	uint64_t	 mem;		/* GPU memory, bytes per GPU; 0: the
					   pool's item_mem */
	int		 gpus;		/* 0 or 1: one GPU, shared by up to
					   per_gpu items. Over 1, with
					   gpus_per_worker 1: that many GPUs
					   held whole, for it alone, chosen near
					   each other; fn starts processes on
					   them (gp_ctx_item_visible()). With
					   gpus_per_worker k: up to k run on a
					   worker's own GPUs. More GPUs than
					   there are: GP_ERROR, -E2BIG */
	int		 pad;
};

/* A stream of items for gp_pool_run(). */
struct gp_feed {
	/*
	 * Called when a worker is idle. Point *item at the next item (owned by
	 * the caller, valid until done() is called for it; the pool resets
	 * its result fields as gp_item_init() does, without freeing an out
	 * left in it, or, with GP_POOL_OUT_BUFFERS, keeping out and outlen
	 * as the caller's buffer) and return
	 * GP_FEED_ITEM; GP_FEED_AGAIN when nothing is ready yet (the pool
	 * waits until in_fd is readable or an item ends); GP_FEED_WAIT when
	 * only an item's end can bring more (a retry: in_fd is not polled,
	 * e.g. it is at EOF); GP_FEED_END at the end.
	 */
	int		(*next)(void *arg, struct gp_item **item);
	/* Called once per item as it ends, in completion order: the pool
	 * hands the item back, keeps no pointer to it, and its out is the
	 * caller's (free() or gp_items_release(); GP_POOL_OUT_BUFFERS: the
	 * caller's own buffer; GP_POOL_OUT_VIEW: the pool's memory, to read
	 * before done() returns, never to free). Return 0 to go on,
	 * nonzero to cancel the rest (as cancel_fd does). next, done and ctl
	 * run in the thread that called gp_pool_run(), during the call; they
	 * must not start a map on the same pool (-EBUSY) or destroy it. */
	int		(*done)(void *arg, struct gp_item *item);
	int		 in_fd;		/* -1: none */
	void		*arg;
	/* Optional control channel (a signalfd, say): when ctl_fd is
	 * readable, ctl() is called and returns 0 (go on), GP_CTL_CANCEL
	 * (as cancel_fd) or GP_CTL_KILL (cancel, and SIGKILL busy workers
	 * and their declared process groups now). ctl_fd -1: none. After
	 * ctl() the pool asks next() again, even after GP_FEED_WAIT: items
	 * may come from the control channel. */
	int		 ctl_fd;
	int		(*ctl)(void *arg);
	/* Optional: what an item needs, asked each time it is about to
	 * start (a retry may need more). need is zeroed first; leave a
	 * field 0 for the default. NULL: every item needs item_mem on one
	 * GPU. */
	void		(*need)(void *arg, const struct gp_item *item,
			    struct gp_need *need);
	uint64_t	 reserved[3];	/* must be 0: room for later fields */
};

enum gp_feed_next {
	GP_FEED_END = -1,
	GP_FEED_AGAIN = 0,
	GP_FEED_ITEM = 1,
	GP_FEED_WAIT = 2,
};

enum gp_ctl {
	GP_CTL_GO_ON = 0,
	GP_CTL_CANCEL = 1,
	GP_CTL_KILL = 2,
};

struct gp_pool;

/*
 * Create a pool: find GPUs, load the topology, place and fork the workers,
 * wait until each has bound itself and run init. *out is set on success
 * (NULL on failure): the caller owns the pool until gp_pool_destroy().
 * opts and the strings it points to are read during the call only, except
 * init_arg, which init and fini get as is (in the workers' copy of
 * memory); errbuf is written only by this call.
 * Returns 0, GP_ENOGPU (no GPU: errbuf says why), GP_EINIT (a worker
 * failed to start; errbuf names it), -EINVAL (bad option, e.g. a --gpus
 * entry that names no GPU, a reserved field set, an unknown flag, or
 * GP_POOL_WAIT_FREE or busy_pct without GP_POOL_GPUS_FREE: see
 * gp_pool_opts_check()),
 * -ENOMEM, or the negated errno of a failed
 * fork, pipe or topology load.
 */
GP_API int	gp_pool_create(struct gp_pool **out,
		    const struct gp_pool_opts *opts);

/*
 * The options as text, for programs that take them from their users (a
 * command line, keyword arguments): the library judges the text and says
 * why it refuses it, so that every front-end accepts the same. Set the
 * option name of *o from value: name is one of the rows gp_pool_opt_info()
 * lists (gpupool(3), OPTIONS BY NAME), value as its kind takes it. A
 * GP_OPT_GPUS or GP_OPT_PATH value is kept, not copied: o points into
 * value, which must outlive gp_pool_create().
 * Returns 0, or -EINVAL (no such option, or a bad value) or -ERANGE (a
 * size too large) with the reason in err (errlen bytes; NULL: none),
 * about the value only ("'0' is not a percentage (1 to 100)"), for the
 * caller to name the option as its user knows it. Touches only *o.
 */
GP_API int	gp_pool_opts_set(struct gp_pool_opts *o, const char *name,
		    const char *value, char *err, size_t errlen);

/*
 * Check opts as gp_pool_create() does before it looks for a GPU (fields,
 * flags, ranges, what needs GP_POOL_GPUS_FREE), without creating a pool:
 * a command line can refuse its options before it does anything else.
 * opts is not changed. Returns 0 or -EINVAL with a one-line reason in
 * err, which names options as gp_pool_opts_set() does ("wait_free needs
 * gpus free (or free:LIST)").
 */
GP_API int	gp_pool_opts_check(const struct gp_pool_opts *opts, char *err,
		    size_t errlen);

/*
 * The options gp_pool_opts_set() takes by name, one row each, for a
 * front-end to build its own spelling of them from (gpupool-run's long
 * options and --help lines, Python's keywords and docstring): row i into
 * *out, i from 0. Returns 0, or -ENOENT past the last row. The strings
 * are the library's, static: nothing to free. Touches only *out.
 */
enum gp_opt_kind {
	GP_OPT_GPUS = 1,	/* the gpus grammar: a LIST, "free" or
				   "free:LIST" (sets or clears
				   GP_POOL_GPUS_FREE) */
	GP_OPT_COUNT,		/* digits, lo .. hi; 0 in the struct: dflt */
	GP_OPT_INT,		/* digits after an optional '-', lo .. hi */
	GP_OPT_SIZE,		/* a size, as gp_parse_size() takes it */
	GP_OPT_FLAG,		/* "1" or "0": the flag lo set or cleared */
	GP_OPT_PATH,		/* a path, not empty */
	GP_OPT_SECS,		/* seconds, a decimal, 0 .. hi */
};
enum gp_opt_group {		/* the block of gpupool-run --help */
	GP_OPT_G_NONE = 0,	/* no option of gpupool-run's */
	GP_OPT_G_PARALLEL,	/* "Options of GNU parallel's" */
	GP_OPT_G_GPUS,		/* "GPUs" */
};
struct gp_opt_info {
	const char	*name;		/* gp_pool_opts_set()'s, errbuf's */
	const char	*py;		/* Python's keyword; NULL: none */
	const char	*cli;		/* gpupool-run's "--x"; NULL: none */
	const char	*arg;		/* its metavar; NULL: takes none */
	const char	*help;		/* one line */
	const char	*clihelp;	/* gpupool-run --help's text, lines cut
					   by '\n' (help if it has none) */
	int		 kind;		/* enum gp_opt_kind */
	int		 group;		/* enum gp_opt_group */
	long		 lo, hi;	/* the range; GP_OPT_FLAG: lo the bit */
	long		 dflt;		/* what 0 in the struct stands for */
	uint64_t	 reserved[4];	/* zeroed */
};
GP_API int	gp_pool_opt_info(int i, struct gp_opt_info *out);

/*
 * A size as people write one, s[0..len) (no NUL needed): digits with at
 * most one '.', then K, M, G or T (either case, powers of 1024) and
 * nothing, "i", "B" or "iB": "20G", "1.5GiB", "512M", "2t"; "0" alone
 * needs no unit; at most 1024T. Rounded up to a whole byte, into *bytes.
 * Returns 0, -EINVAL or -ERANGE, with *why a static reason ("needs a
 * unit, e.g. 20G"; NULL on success). Touches only its arguments.
 */
GP_API int	gp_parse_size(const char *s, size_t len, uint64_t *bytes,
		    const char **why);

/*
 * Run fn on items[0..n-1] and return when all have ended. fn must be a
 * function of the program or of a library loaded before the pool was
 * created (workers are forked copies); arglen bytes at arg (at most the
 * pool's window) are copied to each worker, and fn gets a pointer to its
 * copy (NULL when arglen is 0). Each item's out,
 * outlen, status, code, worker and attempts are reset first and then set:
 * out is overwritten, never read or freed, so release the results of an
 * earlier call on the same array first (gp_items_release()), or they
 * leak; each new out is a malloc'd buffer the caller owns and frees
 * (GP_POOL_OUT_BUFFERS: out and outlen are kept, and the result copied
 * into out, or, for a result over the window, its pieces put there as
 * they come: an item that then crashes or times out may leave its buffer
 * partly written; GP_POOL_OUT_VIEW: -EINVAL).
 * in is read while the call runs, never written or freed.
 * Until it ends an item reads GP_NOTRUN, whatever the call returns.
 * Items are dispatched dynamically in batches sized to
 * what remains and to the measured item time. Returns 0 when every item has
 * a final status (whatever it is), GP_ENOWORKER when the pool lost every
 * worker (the rest are GP_NOTRUN), GP_EPLAN, -EINVAL (also for an item
 * with in NULL and inlen > 0: nothing runs), -ENOMEM, -EBUSY
 * while another call on p runs (of calls made at once from several
 * threads, exactly one proceeds; the others return -EBUSY and run
 * nothing), -ECHILD from a process that did not create p.
 * A call that fails midway (-ENOMEM, a failed poll) kills and reaps the
 * workers running its items, which end GP_ERROR with that code, as does
 * an item whose result or retry could not be kept (the rest GP_NOTRUN):
 * the pool stays usable and keeps no pointer into items.
 */
GP_API int	gp_pool_map(struct gp_pool *p, gp_fn *fn, const void *arg,
		    size_t arglen, struct gp_item *items, size_t n);

/*
 * Stream items: take them from feed->next as workers become idle, one item
 * per dispatch, and report each through feed->done, exactly once, even
 * when the call fails (an item with in NULL and inlen > 0 ends GP_ERROR,
 * -EINVAL). Returns as gp_pool_map() (-EINVAL also for a feed without
 * next or done, or with a reserved field set: nothing runs), or -EDEADLK
 * when next() says "not yet" with no in_fd and nothing running.
 */
GP_API int	gp_pool_run(struct gp_pool *p, gp_fn *fn, const void *arg,
		    size_t arglen, const struct gp_feed *feed);

/* Ask workers to leave, then TERM, then KILL; reap each one (through its
 * pidfd where there is one, else by pid); free. NULL does nothing. No
 * other call on p may run meanwhile, and p is not valid after it. Items
 * and their out buffers are the caller's and stay so. */
GP_API void	gp_pool_destroy(struct gp_pool *p);

/* Number of workers; placement of one (0 or -EINVAL), copied to the
 * caller's *out. */
GP_API int	gp_pool_size(const struct gp_pool *p);
GP_API int	gp_pool_info(const struct gp_pool *p, int worker,
		    struct gp_worker_info *out);

/* A GPU of the pool as the master last saw it (gp_pool_gpu_state()). */
struct gp_gpu_state {
	int		 gpu;		/* 0 .. gp_pool_gpus() - 1 */
	int		 known;		/* NVML reports it (GPUS_FREE, MONITOR,
					   item_mem; 0 without NVML) */
	int		 busy;		/* used by someone else, or ownership
					   cannot be told: why says which */
	int		 util;		/* % utilisation, -1 unknown */
	uint64_t	 mem_total;	/* bytes, 0 unknown */
	uint64_t	 mem_foreign;	/* bytes used by processes not ours */
	uint64_t	 mem_ours;	/* the larger of what this pool's
					   running items declared and use */
	int		 running;	/* this pool's items on it */
	int		 nforeign;	/* compute processes not ours */
	int		 held;		/* held whole by a multi-GPU item */
	int		 pad;
	char		 uuid[48];	/* as gp_worker_info */
	char		 busid[32];
	char		 why[128];	/* "free", "pid 4242 is not ours (3.0
					   GiB)", "no NVML: ..." */
	uint64_t	 mem_usable;	/* bytes an item could ever have: the
					   total less what no process holds
					   (the driver's), 0 unknown; an item
					   needing more on every GPU ends
					   GP_ERROR, -E2BIG */
	char		 reserved[56];	/* zeroed: room for later fields */
};

/* GPU figures of one item, from NVML by the pids of its processes (the
 * worker and its descendants): zero without a monitor. */
struct gp_usage {
	uint64_t	 mem_peak;	/* bytes, summed over its GPUs; 0: none
					   seen */
	int		 util;		/* mean % SM utilisation, -1 unknown */
	int		 samples;	/* monitor samples taken while it ran */
	uint64_t	 reserved[2];	/* zeroed */
};

/* Number of GPUs the pool uses (gpus_per_worker of them per worker). */
GP_API int	gp_pool_gpus(const struct gp_pool *p);
/* GPU gpu's state, copied to *out: 0 or -EINVAL. Read from the thread
 * making calls on the pool (feed callbacks included) or while none
 * runs. */
GP_API int	gp_pool_gpu_state(const struct gp_pool *p, int gpu,
		    struct gp_gpu_state *out);
/* Whether the GPUs are watched: NULL when NVML answers, else why not
 * ("no NVML: libnvidia-ml.so.1: cannot open shared object file",
 * "monitor not asked for"). A static or pool-owned string. */
GP_API const char *gp_pool_monitor(const struct gp_pool *p);
/* 1 when the next item waits for a GPU (busy, or its memory does not fit
 * yet, or, starting with GP_CLAIM_WAITING, claimed by other gpupools),
 * with the reason in why; 0 otherwise. From the thread making
 * calls, e.g. in feed->ctl or a timer's callback. */
GP_API int	gp_pool_waiting(const struct gp_pool *p, char *why, size_t len);
/* GPU figures of the item worker ran last (or runs now): call it from
 * feed->done with item->worker. 0 or -EINVAL. */
GP_API int	gp_pool_usage(const struct gp_pool *p, int worker,
		    struct gp_usage *out);

/*
 * Claims: host-wide, between gpupools. Every pool (and gp_claim()) takes
 * a GPU's claim before it places work there: a pool for its life, before
 * its workers start (waiting its turn, claim_timeout_ms, saying so once
 * on stderr); under GP_POOL_CLAIM_ITEMS for each item while it runs. The
 * claims live in one file of a directory every local user can write
 * (claims; $GPUPOOL_CLAIMS; /run/lock/gpupool), keyed by UUID, else bus
 * id, fake GPUs by their fake id; a claim is its process's, and the
 * kernel drops it when the process is gone (exit, SIGKILL). Exclusive,
 * but for claims that declare their memory (item_mem, gp_need.mem),
 * which share a GPU while their sum fits it. Waiters are served in the
 * order they came. Pools of one process never wait for each other.
 */
#define GP_CLAIM_WAITING	"claimed elsewhere: "	/* gp_pool_waiting() */
struct gp_claim_info {
	char		 gpu[56];	/* its key: UUID, bus id or "fakeK" */
	int		 queue;		/* 0: holds it; k > 0: k-th in line */
	int		 pid;		/* as this process's namespace sees it,
					   if it does */
	uint32_t	 uid;
	char		 user[32];	/* uid's name, or "" */
	char		 cmd[32];	/* its command line, cut */
	int64_t		 since_ms;	/* CLOCK_REALTIME: claimed, or came */
	uint64_t	 mem;		/* declared bytes; 0: the whole GPU */
	uint64_t	 total;		/* the GPU's memory; 0: unknown */
	char		 reserved[40];
};
/* Every live claim and waiter of dir's table (NULL: as pools find it;
 * "none": none), holders before waiters, waiters in order: up to max in
 * out. Returns how many there are (which may be more than max), or a
 * negative errno with a reason in err (a table that cannot be read). */
GP_API int	gp_claims_list(const char *dir, struct gp_claim_info *out,
		    int max, char *err, size_t errlen);
/* For a process that is not a pool: wait its turn for n of the GPUs a
 * pool of o would have (o->gpus, fake_gpus, claims, claim_timeout_ms,
 * item_mem: a declared size shares), hold their claims until the process
 * ends, and set CUDA_VISIBLE_DEVICES to them (UUIDs; CUDA_DEVICE_ORDER
 * PCI_BUS_ID), also written to visible. Call it before any thread starts
 * (setenv). Returns n, or GP_ECLAIM (timeout), GP_ENOGPU, -EINVAL (n
 * over the GPUs there are), -EALREADY (claimed before), with errbuf. */
GP_API int	gp_claim(const struct gp_pool_opts *o, int n, char *visible,
		    size_t len);
/* Give gp_claim()'s GPUs back before the process ends. Refused, -EBUSY,
 * once CUDA was loaded here (libcuda mapped): its memory stays on the
 * GPUs until the process exits, and the next holder would find them
 * full. 0, or -ENOENT when nothing was claimed. */
GP_API int	gp_unclaim(void);

/* Set up an item to run: in and inlen as given (in is read, not copied:
 * keep it valid until the call that runs the item returns, or until done()
 * for gp_pool_run()), no result (out NULL, outlen 0: a result left from
 * an earlier call is not freed; gp_items_release() it first), status
 * GP_NOTRUN, code 0, worker -1, attempts 0. The same
 * reset gp_pool_map() and gp_pool_run() apply to each item they take. */
GP_API void	gp_item_init(struct gp_item *it, const void *in, size_t inlen);

/* Free (with free()) the out buffers of n items and set them to NULL,
 * outlen 0. The items themselves stay the caller's. Not for results in
 * the caller's own buffers (GP_POOL_OUT_BUFFERS) or lent views. */
GP_API void	gp_items_release(struct gp_item *items, size_t n);

/* In a worker: set the current item's result bytes (buf is copied and
 * stays the caller's; the last call wins; 64 bytes or more are copied
 * into the worker's shared region, from where the master takes them; more
 * than the pool's window go to the master now, in pieces of the window
 * through that region, the call returning when the master has them all).
 * Returns 0, -EMSGSIZE (over max_msg), -ENOMEM, -EINVAL outside an item
 * (in init or fini), or -ECANCELED when the item was stopped (timeout,
 * cancel) while its pieces travelled: the rest is not sent, later calls
 * for the item fail the same way, return from fn. When the last call
 * failed, the item ends GP_ERROR with that code (fn's return value is
 * lost), not with an older or empty result; -ECANCELED ends it as the
 * stop would, GP_TIMEDOUT (code -1) or GP_CANCELED. */
GP_API int	gp_ctx_reply(struct gp_ctx *ctx, const void *buf, size_t len);
/* In a worker: where it runs. The library's memory, valid for the
 * worker's life: read it, do not free it. */
GP_API const struct gp_worker_info *gp_ctx_info(const struct gp_ctx *ctx);
/* In a worker: an fd that becomes readable when the current item should
 * stop (timeout, cancel) or the master is gone. Poll it; do not read.
 * While an item runs the master sends its worker nothing else (but the
 * acknowledgements gp_ctx_reply() waits for and reads itself). With
 * GP_POOL_NO_PDEATHSIG it is an epoll fd over the task pipe and the
 * master's pidfd (poll, select and epoll accept it). */
GP_API int	gp_ctx_stop_fd(const struct gp_ctx *ctx);

/* In a worker: declare the process group of a task the current item
 * started (0 when it is gone), or, from init, a group the worker leads
 * itself (setpgid(0, 0) first), declared for its whole life. Whenever the
 * master must SIGKILL this worker (grace over, GP_CTL_KILL, destroy) or
 * finds its channel closed (a crash, an exit, the end of a QUIT), it
 * SIGKILLs that group too, before it reaps the worker, so no task
 * outlives its worker. If the master itself dies, only the worker can: a
 * worker that leads its own group takes it down as it dies with its
 * master (PR_SET_PDEATHSIG); for a task's group, use GP_POOL_NO_PDEATHSIG
 * and watch the stop fd, as gpupool-run does. */
GP_API void	gp_ctx_set_pgid(struct gp_ctx *ctx, pid_t pgid);

/* In a worker, inside fn: the CUDA_VISIBLE_DEVICES value for the
 * current item: the worker's own GPUs, or, for an item that needs
 * several (gp_need.gpus), the ones it holds, in PCI bus order. The
 * library's memory, valid until fn returns. */
GP_API const char *gp_ctx_item_visible(const struct gp_ctx *ctx);
/* In a worker, inside fn: bind the calling process to the CPUs and NUMA
 * memory of the current item's GPUs (item 1: the union of their
 * localities), so that what it starts next inherits them; item 0 binds
 * it back to its own place. 0 or a negative errno. */
GP_API int	gp_ctx_item_bind(struct gp_ctx *ctx, int item);

/*
 * In the program a pool execs for its workers (gp_exec.argv): call it
 * first thing in main(), before anything else runs. In a process a pool
 * started, it becomes that worker and never returns (it leaves by
 * _exit()); in any other (GPUPOOL_WORKER not set) it returns at once.
 */
GP_API void	gp_worker_enter(void);

/* Text for any code returned above or any item code < 0: a static
 * string (strerror()'s for plain errno values). */
GP_API const char *gp_strerror(int code);
/* Text for an item's outcome: "ok", "failed (fn returned 3)", "crashed
 * (killed by signal 11: Segmentation fault)", "timed out". Written into
 * the caller's buf of len bytes (cut to fit), which it returns. */
GP_API const char *gp_item_strerror(const struct gp_item *item, char *buf,
		    size_t len);

/*
 * Python's Pool(processes).map, in C: run fn(ctx, item, NULL) on each of
 * n items on the default pool (created on first use with { 0 } options:
 * one worker per GPU found, or GPUPOOL_FAKE_GPUS fake ones), and return
 * when all are done. Results and statuses are in items, in item order,
 * owned as with gp_pool_map().
 * Returns as gp_pool_map(), or as gp_pool_create() on first use.
 * Threads may call it at once: the calls take turns on the default pool
 * (each waits for the one before to end), so none returns -EBUSY.
 */
GP_API int	pool_map(gp_fn *fn, struct gp_item *items, size_t n);
/* Destroy the default pool (a later pool_map() creates a new one); waits
 * for a pool_map() running in another thread to end first. */
GP_API void	gp_default_pool_destroy(void);
/* Why this thread's last pool_map() call failed, in one line: the reason
 * the default pool could not be created (e.g. "GPUPOOL_FAKE_GPUS='abc' is
 * not a GPU count (0..1024)"), else gp_strerror() of its code; "" when it
 * returned 0. The thread's own storage, valid until its next pool_map(). */
GP_API const char *gp_last_error(void);

/*
 * The names of gpupool 0.1, before every call took its gp_<noun>_<verb>
 * name. Each is an alias: an exported function that calls the one named
 * beside it and behaves exactly as it does. Programs built against 0.1
 * keep linking; new code uses the new names.
 */
GP_API int	gp_map(struct gp_pool *p, gp_fn *fn, const void *arg,
		    size_t arglen, struct gp_item *items, size_t n);
						/* gp_pool_map() */
GP_API int	gp_run(struct gp_pool *p, gp_fn *fn, const void *arg,
		    size_t arglen, const struct gp_feed *feed);
						/* gp_pool_run() */
GP_API int	gp_reply(struct gp_ctx *ctx, const void *buf, size_t len);
						/* gp_ctx_reply() */
GP_API void	gp_shutdown(void);		/* gp_default_pool_destroy() */

#ifdef __cplusplus
}
#endif

#endif /* GPUPOOL_H */
