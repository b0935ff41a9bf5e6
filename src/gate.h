/*
 * gate.h: may an item start on a GPU now, and which GPUs go together
 * (gate.c). Pure decisions on the master's view of each GPU (struct
 * gp_gstate: the monitor's last snapshot, the pool's own running items,
 * the topology's nearness), with no system call, so that every policy is
 * unit-tested (check_gate.c). Never installed.
 */
#ifndef GP_GATE_H
#define GP_GATE_H

#include <stddef.h>
#include <stdint.h>

struct gp_mon_snap;

/* Nearness levels, nearest first: GPUs in one NVLink domain (linked
 * directly or through shared NVSwitches), under one PCIe switch, on one
 * NUMA node. */
enum gp_near {
	GP_NEAR_NVLINK = 0,
	GP_NEAR_PCI,
	GP_NEAR_NUMA,
	GP_NEAR_LEVELS,
};

/* One physical GPU of the pool, as the master sees it. */
struct gp_gstate {
	/* From the monitor's last snapshot (gp_gate_sample()). */
	int		 known;		/* NVML reported this GPU */
	int		 busy;		/* someone else uses it (or we cannot
					   tell): with GP_POOL_GPUS_FREE, no
					   item starts on it */
	uint64_t	 total;		/* bytes; 0: unknown */
	uint64_t	 foreign;	/* bytes in use, not by our items */
	uint64_t	 ours;		/* bytes NVML sees our items use */
	int		 util;		/* %, -1: unknown */
	int		 nforeign;	/* foreign compute processes */
	uint64_t	 unheld;	/* bytes in use that no process held, the
					   least a sample showed (the driver's,
					   a display's): no item can ever have
					   them */
	int		 unheld_n;	/* samples that could tell; 0: unheld
					   unknown (taken as 0) */
	char		 why[128];	/* busy, or not known: why, for people */
	/* Kept by the dispatcher as items start and end. */
	int		 running;	/* our items on it */
	int		 held;		/* held whole by a multi-GPU item */
	uint64_t	 declared;	/* bytes our running items declared */
	/* From the topology (gp_topo_near()); -1: unknown. */
	int		 dom[GP_NEAR_LEVELS];
};

/* What makes a GPU busy besides others' processes (gp_gate_sample()):
 * the pool's options, checked and their defaults filled in by opts.c. A
 * new rule adds its field here; the signature stays. */
struct gp_gate_policy {
	unsigned	 busy_pct;	/* memory used by others over this %
					   of the total (1 .. 100) */
	unsigned	 busy_util;	/* utilisation, less our processes'
					   SM shares, over this % (0: no
					   such rule) */
};

/* Per worker: what its current item used, sample by sample. */
struct gp_gusage {
	uint64_t	 mem_peak;	/* bytes, the peak over samples of the
					   sum over its processes */
	uint64_t	 util_sum;	/* sum of per-sample utilisation % */
	unsigned	 util_n;	/* samples with a utilisation */
	unsigned	 samples;	/* samples taken while it ran */
};

/* The smallest GPU memory taken for real: NVML saying less is wrong. */
#define GP_GATE_MIN_TOTAL	(64ull << 20)

/* Range-check snapshot s in place, so that no figure NVML got wrong is
 * passed on: a utilisation or SM share over 100 % becomes unknown (-1);
 * a GPU's memory with a total under GP_GATE_MIN_TOTAL, or more used than
 * the total, becomes unknown for this sample (total and used 0); a
 * process said to use more than its GPU's total has no memory figure
 * (UINT64_MAX, as when NVML cannot say). */
void	gp_gate_clean(struct gp_mon_snap *s);

/* Update g[0..n-1]'s known, busy, total, foreign, ours, util, nforeign,
 * unheld and why from snapshot s (s->ngpu == n), gp_gate_clean()ed. A
 * GPU whose memory this sample does not know keeps the total and the
 * foreign memory it had (a GPU does not change its size; one odd reading
 * must not make it look empty, or full). A GPU is busy when NVML lists
 * a compute process of no worker of ours, when NVML cannot list its
 * processes (ownership unknown: a container), when NVML does not have it
 * while NVML works, when memory used by others is over pol->busy_pct %
 * of its total, or when pol->busy_util is set and the GPU's utilisation
 * less our processes' SM shares is over it (unknown when a process of
 * ours has no share: the rule then says nothing). Without NVML (s->ok 0) no GPU is busy and none is known:
 * the pool works as without a monitor. why always says which case. */
void	gp_gate_sample(struct gp_gstate *g, int n, const struct gp_mon_snap *s,
	    const struct gp_gate_policy *pol);

/* Whether an item declaring need bytes may start on g, beside what runs
 * there: not held by a multi-GPU item, not busy when free_only, and,
 * when its total is known, max(declared, ours) + foreign + need <= total
 * (need 0 declares nothing and always fits). */
int	gp_gate_fits(const struct gp_gstate *g, uint64_t need, int free_only);

/* The memory g's running items of ours hold: the larger of what they
 * declared and what NVML sees them use. */
uint64_t gp_gate_ours(const struct gp_gstate *g);

/* Of a GPU's memory that no listed process holds, at most this share
 * (1/16) is taken to stay for good: a driver keeps a few hundred MiB;
 * more is likelier processes NVML cannot list (another container's),
 * which may end, and a need that could fit then must wait, not fail. */
#define GP_GATE_FIXED_DIV	16

/* The most of g an item could ever have: its total less what no process
 * holds (the least seen, at most a 1/GP_GATE_FIXED_DIV share); UINT64_MAX
 * when its total is unknown (anything may fit). */
uint64_t gp_gate_usable(const struct gp_gstate *g);

/* Choose m GPUs for one item that holds them whole: each with avail[i]
 * set (an idle worker of ours there), running 0, and gp_gate_fits().
 * Nearest first: all m in one NVLink domain if any domain has m such
 * GPUs, else under one PCIe switch, else on one NUMA node, else any;
 * within a level the domain with the fewest such GPUs that still holds m
 * (best fit, keeping large domains for large items), lowest indices
 * first. Writes m indices, ascending, to out and returns m; 0 if no m
 * GPUs qualify now. */
int	gp_gate_pick(const struct gp_gstate *g, int n, const int *avail, int m,
	    uint64_t need, int free_only, int *out);

/* Partition n GPUs into groups of k near ones (gp_pool_opts
 * gpus_per_worker), by the same nearness order: group[i] gets GPU i's
 * group number (0, 1, ... in order of each group's lowest GPU), or -1
 * when it is left over (n not a multiple of k, or no near partner at
 * any level: then groups are filled in index order). Returns the number
 * of groups. */
int	gp_gate_group(const struct gp_gstate *g, int n, int k, int *group);

/* Fold snapshot s into u[0..nw-1] for the workers with running[w] 1
 * (2: its item started after s was asked for, so s is not of it):
 * the memory of the processes s attributes to worker w, summed over
 * GPUs, raises its peak; their SM utilisation (the mean over those with
 * one), else the utilisation of the GPUs they are on, is one sample. */
void	gp_gate_usage(struct gp_gusage *u, int nw, const int *running,
	    const struct gp_mon_snap *s);

#endif /* GP_GATE_H */
