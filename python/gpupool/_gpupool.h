/*
 * _gpupool.h: what the C files of the extension module share.
 *
 * _gpupool.c: the module, the Pool type and the caller's side (create,
 * info, close; the rules on the GIL and Ctrl-C).
 * _call.c: run (the GIL released while it waits, signals).
 * _claim.c: waits for claims, claim(), unclaim(), claims_list().
 * _worker.c: the worker's side (the fork hook, the C init/fn/fini that
 * call the Python callables, os.environ sync, current()) and the
 * gp_worker_info -> dict conversion both sides use.
 * _buf.c: big objects (the frame of pickle protocol 5 buffers, and Out,
 * a result's bytes read in place).
 */
#ifndef GPUPOOL_PY_H
#define GPUPOOL_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sys/types.h>

#include "gpupool.h"

/* The Pool object. worker and init are read by the workers in their
 * forked copy of this process, so they live as long as the pool. */
typedef struct {
	PyObject_HEAD
	struct gp_pool	*pool;		/* NULL once closed */
	PyObject	*worker;	/* callable(bytes) -> bytes */
	PyObject	*init;		/* callable() or Py_None */
	int		 cancel[2];	/* pipe: [0] is the pool's cancel_fd,
					   [1] the wakeup fd during a call */
	int		 sig[2];	/* pipe: the wakeup fd during a run
					   ([1]), its ctl_fd ([0]) */
	int		 initerr[2];	/* pipe: a worker whose init raised
					   writes the exception text to [1] */
	int		 view;		/* fn gets a memoryview of the item;
					   big results come as Out */
	int		 cancel_sent;	/* a byte may be in cancel[0]: the
					   next call drains it */
	int		 epfd;		/* run()'s ctl set (_call.c), or -1 */
	int		 tfd;		/* its tick's timerfd, or -1 */
	int		 kept_fd;	/* a ctl_fd left in epfd (ctl_keep) */
	unsigned long	 forks;		/* gpy_forks when it was created: a
					   fork of that process differs */
	int		 busy;		/* a map or run is in progress */
	unsigned long	 busy_thread;	/* the thread running it */
} PoolObject;

/* _gpupool.c */
extern PyObject	*gpy_InitError;
extern PyObject	*gpy_NoWorkerError;
PyObject *gpy_raise_code(int rc, const char *msg);

/* _args.c: Pool()'s arguments: the extension's own from one table, the
 * pool options from the library's rows. The objects are borrowed from
 * the call's arguments; keep holds the options' texts, which o points
 * into. */
struct gpy_args {
	PyObject		*worker, *fake, *init, *maxm, *spec;
	PyObject		*keep;		/* owned: gpy_args_release() */
	int			 view, plan;
	struct gp_pool_opts	 o;		/* the library's options */
};
/* Fill g (zeroed, init Py_None, per_gpu 1) from Pool(*pos, **kw): 0, or
 * -1 with TypeError or ValueError naming the argument. */
int	 gpy_args_parse(PyObject *pos, PyObject *kw, struct gpy_args *g);
void	 gpy_args_release(struct gpy_args *g);
PyObject *gpy_parse_size(PyObject *mod, PyObject *arg);
/* pool_options() -> the rows of gp_pool_opt_info() as tuples (name, py,
 * kind, lo, hi, dflt, help), for Pool's signature and docstring. */
PyObject *gpy_pool_options(PyObject *mod, PyObject *noargs);
/* fake_gpus: None (GPUPOOL_FAKE_GPUS, as the library reads it) or a
 * count into o.fake_gpus. 0, or -1 with an exception set. */
int	 gpy_fake_gpus(struct gpy_args *a);

/* _claim.c: waits for claims that a signal ends (Python's wakeup fd the
 * write end of cancel, the pipe the library's wait watches): begin, 0
 * (*old the wakeup fd to restore) or -1; end, 1 a signal came and every
 * handler returned, 0 none came, -1 a handler raised. claim(),
 * unclaim() and claims_list(), the module's. */
int	 gpy_wait_begin(const int *cancel, PyObject **old);
int	 gpy_wait_end(const int *cancel, PyObject *old);
PyObject *gpy_claim(PyObject *mod, PyObject *args, PyObject *kw);
PyObject *gpy_unclaim(PyObject *mod, PyObject *noargs);
PyObject *gpy_claims_list(PyObject *mod, PyObject *args);

/* _call.c */
PyObject *gpy_run(PoolObject *self, PyObject *args, PyObject *kw);
PyObject *gpy_set_wakeup(PyObject *fd);
void	 gpy_own(PoolObject *self);

/* _buf.c */
/* Results from this size on come as Out when the pool has view set. */
#define GPY_VIEW_MIN	(64 * 1024)
extern PyTypeObject	*gpy_OutType;	/* a heap type, gpy_out_init() */
int	 gpy_out_init(void);
/* _ring.c: Ring and Extent, a rank's rings, added to module m. */
int	 gpy_ring_add(PyObject *m);
/* The in ring ring_extern() named, if any, into o's ext_* fields. */
void	 gpy_ring_extern(struct gp_pool_opts *o);
/* A new Out owning it->out (it->out is NULL after). */
PyObject *gpy_out_take(struct gp_item *it);
PyObject *gpy_frame(PyObject *mod, PyObject *args);
PyObject *gpy_unframe(PyObject *mod, PyObject *args);

/* _worker.c */
/* Before the payload of a clean worker's init (gp_exec.init_arglen
 * bytes in all): what its C side needs before Python runs there. */
struct gpy_spawn_hdr {
	uint64_t	 len;		/* the payload's bytes after this */
	int32_t		 initerr;	/* write end of the pool's initerr */
	int32_t		 view;
};
/* Pool(spawn=(argv, payload, keep)): o->exec and its strings and
 * buffers, in s until gp_pool_create() returned; 0, or -1 with an
 * exception. None leaves o alone. */
struct gpy_spawn {
	struct gp_exec	 x;
	PyObject	*strs;		/* argv's encodings */
	char		**argv;
	int		 keep[64];
	uint8_t		*arg;
};
int	 gpy_spawn_opts(PoolObject *self, PyObject *spec, struct gpy_spawn *s,
	    struct gp_pool_opts *o);
void	 gpy_spawn_release(struct gpy_spawn *s);
void	 gpy_fork_hook(int phase, void *arg);
int	 gpy_spawn_init(struct gp_ctx *ctx, void *arg);
PyObject *gpy_worker_main(PyObject *mod, PyObject *noargs);
int	 gpy_worker_init(struct gp_ctx *ctx, void *arg);
void	 gpy_worker_fini(struct gp_ctx *ctx, void *arg);
int	 gpy_worker_fn(struct gp_ctx *ctx, const void *in, size_t inlen,
	    void *arg);
PyObject *gpy_info_dict(const struct gp_worker_info *wi);
PyObject *gpy_current(PyObject *mod, PyObject *noargs);

#endif /* GPUPOOL_PY_H */
