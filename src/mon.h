/*
 * mon.h: the GPU monitor (mon.c). A child the master forks before the
 * workers, as it forks the probe: the only process of a pool that loads
 * NVML (dlopen("libnvidia-ml.so.1"), declarations in nvml.h), so the
 * master itself never does. It samples only when asked: the master sends
 * a request (the workers' pids), the monitor answers with one snapshot of
 * every pool GPU. No NVML, or no driver: every snapshot says so (ok 0,
 * err), once per request, and the pool works as without a monitor.
 * Never installed.
 */
#ifndef GP_MON_H
#define GP_MON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct gp_gpu;

#define GP_MON_PROCS	32	/* processes reported per GPU */

/* One compute process on a GPU, as NVML lists it. */
struct gp_mon_proc {
	int32_t		 pid;
	int32_t		 worker;	/* pool worker whose process tree holds
					   it (the worker or a descendant, by
					   /proc ppid chain), -1: none (foreign,
					   or a pid not in our pid namespace) */
	uint64_t	 mem;		/* bytes; UINT64_MAX: NVML cannot say */
	int32_t		 sm;		/* % SM utilisation, -1: unknown */
	int32_t		 pad;
};

/* One pool GPU in a snapshot. Matched to NVML by UUID, else by PCI bus
 * id; a GPU with neither (a fake GPU without bus ids) is NVML device i
 * for pool GPU i, so a fake NVML drives fake GPUs in tests. */
struct gp_mon_gpu {
	int32_t		 found;		/* NVML has this GPU */
	int32_t		 util;		/* % GPU utilisation, -1: unknown */
	uint64_t	 total;		/* bytes, 0: unknown */
	uint64_t	 used;
	int32_t		 procs_known;	/* 0: NVML cannot list its processes
					   (err says why): ownership unknown */
	int32_t		 nproc;		/* entries in proc[] */
	int32_t		 more;		/* more processes than GP_MON_PROCS */
	int32_t		 pad;
	char		 err[96];	/* !found or !procs_known: why */
	struct gp_mon_proc proc[GP_MON_PROCS];
};

struct gp_mon_snap {
	int32_t		 ok;		/* NVML loaded and initialised */
	int32_t		 ngpu;
	int64_t		 at_ns;		/* gp_now_ns() in the monitor */
	char		 err[200];	/* !ok: why, e.g. "libnvidia-ml.so.1:
					   cannot open shared object file" */
	struct gp_mon_gpu gpu[];	/* ngpu */
};

struct gp_mon {
	pid_t		 pid;		/* 0: not running */
	int		 fd;		/* requests out, snapshots in; -1 */
	int		 pidfd;		/* or -1 */
	int		 ngpu;
	size_t		 snaplen;	/* sizeof snapshot with ngpu GPUs */
	struct gp_mon_snap *snap;	/* the last whole snapshot, or NULL */
	uint8_t		*rx;		/* snapshot being received */
	size_t		 got;
	int		 pending;	/* a request is unanswered */
};

/*
 * Fork the monitor for the n GPUs at g (their uuid and busid are read
 * now). The child dies with the master (PR_SET_PDEATHSIG, and EOF on its
 * channel), closes every descriptor but its channel, and never runs user
 * code. m->fd is close-on-exec and non-blocking. Returns 0, or a
 * negative errno with a reason in err (nothing left running).
 */
int	gp_mon_start(struct gp_mon *m, const struct gp_gpu *g, int n,
	    char *err, size_t errlen);
/* Ask for a snapshot; pids[0..nw-1] are the workers' (0: none), so that
 * their tasks' processes are told from foreign ones. 0, -EALREADY while
 * one is pending, or a negative errno (the monitor is gone). */
int	gp_mon_request(struct gp_mon *m, const pid_t *pids, int nw);
/* Read what has come, without blocking. 1 when a whole new snapshot is
 * in m->snap, 0 when not yet, a negative errno when the monitor is gone
 * (EOF, or a short or bad reply: it is then stopped). */
int	gp_mon_read(struct gp_mon *m);
/* Wait until gp_now_ns() reaches dl for the answer to the pending
 * request, if any: 0 (m->snap is it), -ETIMEDOUT or as above. */
int	gp_mon_wait(struct gp_mon *m, int64_t dl);
/* gp_mon_request(), then wait up to timeout_ms for its answer (at pool
 * creation and for gpupool-run --show-gpus). 0, -ETIMEDOUT or as above. */
int	gp_mon_sample(struct gp_mon *m, const pid_t *pids, int nw,
	    int timeout_ms);
/* Close the channel, SIGKILL and reap the monitor by pid; free. Safe on
 * a gp_mon never started (zeroed, fd -1) and twice. */
void	gp_mon_stop(struct gp_mon *m);

#endif /* GP_MON_H */
