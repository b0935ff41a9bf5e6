/*
 * gate.c: may an item start on a GPU now, and which GPUs go together.
 * Pure decisions on struct gp_gstate (the monitor's last snapshot, the
 * pool's own running items, the topology's nearness): no system call, no
 * allocation, no state of its own, so that check_gate.c tests every rule
 * from hand-built snapshots. A domain id of -1 belongs to no domain; any
 * other id only means "same as the GPUs with that id" (topo.c picks
 * them), so domains are found by comparing ids, O(n^2) for n GPUs: about
 * a million comparisons at the 1024 GPUs a pool can have, and no buffer
 * to size.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gate.h"
#include "mon.h"

#define GIB(b)	((double)(b) / (double)(1ull << 30))

void
gp_gate_clean(struct gp_mon_snap *s)
{
	struct gp_mon_gpu	*mg;
	struct gp_mon_proc	*pr;
	int			 i, j;

	if (s == NULL || !s->ok)
		return;
	for (i = 0; i < s->ngpu; i++) {
		mg = &s->gpu[i];
		if (mg->util < 0 || mg->util > 100)
			mg->util = -1;
		if (mg->total < GP_GATE_MIN_TOTAL || mg->used > mg->total)
			mg->total = mg->used = 0;
		for (j = 0; j < mg->nproc && j < GP_MON_PROCS; j++) {
			pr = &mg->proc[j];
			if (pr->sm < 0 || pr->sm > 100)
				pr->sm = -1;
			if (mg->total > 0 && pr->mem != UINT64_MAX &&
			    pr->mem > mg->total)
				pr->mem = UINT64_MAX;
		}
	}
}

/* The memory no process holds, when this sample can tell (its memory
 * known, every process listed with its figure): the least seen stays. */
static void
unheld(struct gp_gstate *g, const struct gp_mon_gpu *mg)
{
	uint64_t	 held = 0, left;
	int		 i;

	if (mg->total == 0 || mg->more)
		return;
	for (i = 0; i < mg->nproc && i < GP_MON_PROCS; i++) {
		if (mg->proc[i].mem == UINT64_MAX)
			return;
		held += mg->proc[i].mem;
	}
	left = mg->used > held ? mg->used - held : 0;
	if (g->unheld_n++ == 0 || left < g->unheld)
		g->unheld = left;
}

/* The GPU's utilisation less our processes' SM shares (never below 0);
 * -1 when it cannot be told: the GPU's unknown, or one of ours has no
 * share. */
static int
others_util(const struct gp_mon_gpu *mg)
{
	int	 i, ours = 0;

	for (i = 0; i < mg->nproc && i < GP_MON_PROCS; i++) {
		if (mg->proc[i].worker < 0)
			continue;
		if (mg->proc[i].sm < 0)
			return -1;
		ours += mg->proc[i].sm;
	}
	return mg->util < 0 ? -1 : mg->util > ours ? mg->util - ours : 0;
}

/* Fill why for a GPU NVML has and lists processes of; return busy. A
 * sample that does not know the memory keeps the foreign bytes the last
 * one had (was). */
static int
owners(struct gp_gstate *g, const struct gp_mon_gpu *mg,
    const struct gp_gate_policy *pol, uint64_t was)
{
	const struct gp_mon_proc *fp = NULL;
	int			 i;

	for (i = 0; i < mg->nproc && i < GP_MON_PROCS; i++) {
		if (mg->proc[i].worker >= 0) {
			if (mg->proc[i].mem != UINT64_MAX)
				g->ours += mg->proc[i].mem;
			continue;
		}
		if (g->nforeign++ == 0)
			fp = &mg->proc[i];
	}
	/* Memory no process of ours holds: other users' processes, and
	 * what the driver and displays keep. */
	if (mg->total == 0)
		g->foreign = was;
	else
		g->foreign = mg->used > g->ours ? mg->used - g->ours : 0;
	unheld(g, mg);
	if (mg->more) {
		/* Unlisted processes may be anyone's. */
		snprintf(g->why, sizeof(g->why),
		    "over %d processes, not all listed", GP_MON_PROCS);
		return 1;
	}
	if (g->nforeign == 1 && fp->mem != UINT64_MAX) {
		snprintf(g->why, sizeof(g->why),
		    "pid %d is not ours (%.1f GiB)", (int)fp->pid,
		    GIB(fp->mem));
		return 1;
	}
	if (g->nforeign == 1) {
		snprintf(g->why, sizeof(g->why), "pid %d is not ours",
		    (int)fp->pid);
		return 1;
	}
	if (g->nforeign > 1) {
		snprintf(g->why, sizeof(g->why), "%d processes not ours",
		    g->nforeign);
		return 1;
	}
	if (g->total > 0 &&
	    (double)g->foreign * 100 > (double)pol->busy_pct *
	    (double)g->total) {
		snprintf(g->why, sizeof(g->why),
		    "others use %.1f of %.1f GiB (over %u%%)", GIB(g->foreign),
		    GIB(g->total), pol->busy_pct);
		return 1;
	}
	if (pol->busy_util > 0 && others_util(mg) > (int)pol->busy_util) {
		/* No process of someone else listed, yet it computes:
		 * NVML cannot see them (another container). */
		snprintf(g->why, sizeof(g->why), "others use %d%% of it (over "
		    "%u%%)", others_util(mg), pol->busy_util);
		return 1;
	}
	/* gp_gate_clean() found its memory figures out of range, or NVML
	 * gave none: say so rather than show an empty GPU. */
	snprintf(g->why, sizeof(g->why), mg->total == 0 ? "free (memory "
	    "unknown this sample)" : "free");
	return 0;
}

void
gp_gate_sample(struct gp_gstate *g, int n, const struct gp_mon_snap *s,
    const struct gp_gate_policy *pol)
{
	const struct gp_mon_gpu	*mg;
	uint64_t		 total, was;
	int			 i;

	for (i = 0; i < n; i++) {
		total = g[i].total;
		was = g[i].known ? g[i].foreign : 0;
		g[i].known = 0;
		g[i].busy = 0;
		g[i].total = 0;
		g[i].foreign = 0;
		g[i].ours = 0;
		g[i].util = -1;
		g[i].nforeign = 0;
		if (s == NULL || !s->ok) {
			snprintf(g[i].why, sizeof(g[i].why), "no NVML: %s",
			    s != NULL ? s->err : "no snapshot");
			continue;
		}
		if (i >= s->ngpu || !s->gpu[i].found) {
			g[i].busy = 1;
			snprintf(g[i].why, sizeof(g[i].why),
			    "not seen by NVML: %s", i >= s->ngpu ?
			    "not in its snapshot" : s->gpu[i].err);
			continue;
		}
		mg = &s->gpu[i];
		g[i].known = 1;
		/* Its memory unknown this time: the size it had stands. */
		g[i].total = mg->total ? mg->total : total;
		g[i].util = mg->util;
		if (!mg->procs_known) {
			/* Whose memory it is cannot be told either: take
			 * our running items to use what they declared. */
			g[i].busy = 1;
			g[i].foreign = mg->total == 0 ? was :
			    mg->used > g[i].declared ?
			    mg->used - g[i].declared : 0;
			snprintf(g[i].why, sizeof(g[i].why),
			    "NVML cannot list its processes: %s", mg->err);
			continue;
		}
		g[i].busy = owners(&g[i], mg, pol, was);
	}
}

uint64_t
gp_gate_ours(const struct gp_gstate *g)
{
	return g->declared > g->ours ? g->declared : g->ours;
}

uint64_t
gp_gate_usable(const struct gp_gstate *g)
{
	uint64_t	 fixed = g->unheld_n > 0 ? g->unheld : 0;

	if (g->total == 0)
		return UINT64_MAX;
	if (fixed > g->total / GP_GATE_FIXED_DIV)
		fixed = g->total / GP_GATE_FIXED_DIV;
	return g->total > fixed ? g->total - fixed : 0;
}

int
gp_gate_fits(const struct gp_gstate *g, uint64_t need, int free_only)
{
	uint64_t	 used;

	if (g->held || (free_only && g->busy))
		return 0;
	if (need == 0 || g->total == 0)
		return 1;
	used = gp_gate_ours(g) + g->foreign;
	return used <= g->total && need <= g->total - used;
}

/*
 * The GPUs in play: for gp_gate_pick() those eligible for a multi-GPU
 * item (avail set), for gp_gate_group() those not grouped yet (group
 * set).
 */
struct sel {
	const struct gp_gstate	*g;
	const int		*avail;
	const int		*group;
	uint64_t		 need;
	int			 free_only;
};

static int
in(const struct sel *s, int i)
{
	if (s->group != NULL)
		return s->group[i] < 0;
	return s->avail[i] && s->g[i].running == 0 &&
	    gp_gate_fits(&s->g[i], s->need, s->free_only);
}

/*
 * The domain at level lv for m GPUs in play: the one with the fewest such
 * GPUs that still holds m (best fit), the one of the lowest GPU on a tie.
 * Returns the lowest GPU in play of that domain, or -1 when none holds m.
 */
static int
bestdom(const struct sel *s, int n, int lv, int m)
{
	const struct gp_gstate	*g = s->g;
	int			 i, j, cnt, best = -1, bestcnt = 0;

	for (i = 0; i < n; i++) {
		if (g[i].dom[lv] < 0 || !in(s, i))
			continue;
		for (j = 0; j < i; j++)
			if (g[j].dom[lv] == g[i].dom[lv] && in(s, j))
				break;
		if (j < i)
			continue;	/* counted from its lowest GPU */
		for (cnt = 0, j = i; j < n; j++)
			if (g[j].dom[lv] == g[i].dom[lv] && in(s, j))
				cnt++;
		if (cnt >= m && (best < 0 || cnt < bestcnt)) {
			best = i;
			bestcnt = cnt;
		}
	}
	return best;
}

/*
 * Write to out the m lowest GPUs in play that share lead's domain at
 * level lv (lv GP_NEAR_LEVELS: any GPU in play). Returns how many there
 * were, at most m.
 */
static int
take(const struct sel *s, int n, int lv, int lead, int m, int *out)
{
	int	 i, k;

	for (k = 0, i = 0; i < n && k < m; i++)
		if (in(s, i) && (lv == GP_NEAR_LEVELS ||
		    s->g[i].dom[lv] == s->g[lead].dom[lv]))
			out[k++] = i;
	return k;
}

int
gp_gate_pick(const struct gp_gstate *g, int n, const int *avail, int m,
    uint64_t need, int free_only, int *out)
{
	struct sel	 s = { g, avail, NULL, need, free_only };
	int		 lv, lead;

	if (m <= 0 || m > n)
		return 0;
	for (lv = 0; lv < GP_NEAR_LEVELS; lv++)
		if ((lead = bestdom(&s, n, lv, m)) >= 0)
			return take(&s, n, lv, lead, m, out);
	return take(&s, n, GP_NEAR_LEVELS, 0, m, out) == m ? m : 0;
}

/*
 * Group numbers are made as n + the order of making (so that they never
 * look like a final one), then renumbered in order of each group's lowest
 * GPU.
 */
static int
renumber(int *group, int n)
{
	int	 i, j, old, next = 0;

	for (i = 0; i < n; i++) {
		if (group[i] < n)
			continue;
		old = group[i];
		for (j = i; j < n; j++)
			if (group[j] == old)
				group[j] = next;
		next++;
	}
	return next;
}

int
gp_gate_group(const struct gp_gstate *g, int n, int k, int *group)
{
	struct sel	 s = { g, NULL, group, 0, 0 };
	int		 i, c, lv, lead, id, left = n, made = 0;

	for (i = 0; i < n; i++)
		group[i] = -1;
	if (k <= 0)
		return 0;
	for (lv = 0; lv <= GP_NEAR_LEVELS; lv++) {
		while (left >= k) {
			lead = lv < GP_NEAR_LEVELS ? bestdom(&s, n, lv, k) : 0;
			if (lead < 0)
				break;
			id = n + made++;
			for (c = 0, i = 0; i < n && c < k; i++) {
				if (group[i] < 0 && (lv == GP_NEAR_LEVELS ||
				    g[i].dom[lv] == g[lead].dom[lv])) {
					group[i] = id;
					c++;
				}
			}
			left -= k;
		}
	}
	return renumber(group, n);
}

void
gp_gate_usage(struct gp_gusage *u, int nw, const int *running,
    const struct gp_mon_snap *s)
{
	const struct gp_mon_gpu	*mg;
	const struct gp_mon_proc *pr;
	uint64_t		 mem;
	int			 w, i, j, sm, nsm, gu, ngu, on;

	if (s == NULL || !s->ok)
		return;
	for (w = 0; w < nw; w++) {
		if (running[w] != 1)
			continue;
		mem = 0;
		sm = nsm = gu = ngu = 0;
		for (i = 0; i < s->ngpu; i++) {
			mg = &s->gpu[i];
			if (!mg->found)
				continue;
			for (on = 0, j = 0; j < mg->nproc && j < GP_MON_PROCS;
			    j++) {
				pr = &mg->proc[j];
				if (pr->worker != w)
					continue;
				on = 1;
				if (pr->mem != UINT64_MAX)
					mem += pr->mem;
				if (pr->sm >= 0) {
					sm += pr->sm;
					nsm++;
				}
			}
			if (on && mg->util >= 0) {
				gu += mg->util;
				ngu++;
			}
		}
		u[w].samples++;
		if (mem > u[w].mem_peak)
			u[w].mem_peak = mem;
		if (nsm > 0 || ngu > 0) {
			u[w].util_sum += nsm > 0 ? (unsigned)(sm / nsm) :
			    (unsigned)(gu / ngu);
			u[w].util_n++;
		}
	}
}
