/*
 * watch.c: the GPUs as the master sees them while a pool lives. It starts
 * the monitor child (mon.c, the only process that loads NVML) when the
 * options ask for it, asks it for a sample only while something needs one
 * (an item waits for a GPU, or items run and their figures are wanted),
 * folds each answer into every GPU's state (gate.c decides what a sample
 * means), and answers the dispatcher's one question: on which idle worker,
 * if any, may the next item start now. Items start in order: one that
 * must wait holds back the ones after it, so an item needing four GPUs is
 * never starved by a stream of one-GPU items (design.md, "Shared GPUs").
 * Master only.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define WATCH_FIRST_MS		10000	/* the first sample, at creation */
#define WATCH_RUN_NS		500000000	/* while items run */
#define WATCH_WAIT_NS		200000000	/* while an item waits */
#define WATCH_HUNG_NS		10000000000LL	/* an answer this late: gone */

static const char	 not_asked[] = "not asked for (GP_POOL_GPUS_FREE, "
			    "GP_POOL_MONITOR or item_mem)";

static int
wanted(const struct gp_pool *p)
{
	return (p->o.flags & (GP_POOL_GPUS_FREE | GP_POOL_MONITOR)) ||
	    p->o.item_mem > 0;
}

static double
gib(uint64_t b)
{
	return (double)b / (double)(1ull << 30);
}

/* The monitor is gone or never answered: from now on the pool works as
 * without one, every GPU's state unknown (so none is busy). */
static void
unwatch(struct gp_pool *p, const char *why)
{
	int	 i;

	/* why may be the snapshot's, which stopping the monitor frees. */
	snprintf(p->wt.why, sizeof(p->wt.why), "%s", why);
	gp_mon_stop(&p->wt.mon);
	p->wt.nomon = 1;
	for (i = 0; i < p->ngpus; i++) {
		p->wt.gs[i].known = 0;
		p->wt.gs[i].busy = 0;
		p->wt.gs[i].foreign = p->wt.gs[i].ours = 0;
		p->wt.gs[i].nforeign = 0;
		p->wt.gs[i].unheld_n = 0;
		p->wt.gs[i].util = -1;
		snprintf(p->wt.gs[i].why, sizeof(p->wt.gs[i].why),
		    "unknown: %s", p->wt.why);
	}
}

/* Fold the monitor's last snapshot in, its figures range-checked first.
 * It lists the GPUs the monitor was started with; when gp_watch_plan()
 * left some out, the kept ones move down in place (mix[] ascends), as
 * gate.c wants one entry per GPU. Items that started while it was asked
 * for (busy 2) count from the next one on. */
static void
fold(struct gp_pool *p)
{
	struct gp_mon_snap	*s = p->wt.mon.snap;
	char			 why[sizeof(s->err) + 16];
	int			 i, w;

	if (!s->ok) {
		snprintf(why, sizeof(why), "no NVML: %s", s->err);
		unwatch(p, why);
		return;
	}
	for (i = 0; i < p->ngpus; i++)
		if (p->wt.mix[i] != i)
			s->gpu[i] = s->gpu[p->wt.mix[i]];
	s->ngpu = p->ngpus;
	gp_gate_clean(s);
	gp_gate_sample(p->wt.gs, p->ngpus, s, &p->wt.pol);
	for (i = 0; i < p->ngpus; i++)
		if (!p->wt.gs[i].known && p->wt.gs[i].total == 0)
			p->wt.gs[i].total = p->gpus[i].mem_bytes;
	if (p->wt.use == NULL)
		return;
	gp_gate_usage(p->wt.use, p->nw, p->wt.busy, s);
	for (w = 0; w < p->nw; w++)
		if (p->wt.busy[w] == 2)
			p->wt.busy[w] = 1;
}

/* Keep only the free GPUs (GPUS_FREE without WAIT_FREE). */
static int
keep_free(struct gp_pool *p, char *err, size_t errlen)
{
	char	 why[512];
	size_t	 at = 0;
	int	 i, n = 0;

	for (i = 0; i < p->ngpus; i++) {
		if (!p->wt.gs[i].busy) {
			p->gpus[n] = p->gpus[i];
			p->wt.gs[n] = p->wt.gs[i];
			p->wt.mix[n++] = p->wt.mix[i];
		} else if (at < sizeof(why))
			at += (size_t)snprintf(why + at, sizeof(why) - at,
			    "%sGPU %d (%s): %s", at ? "; " : "", i,
			    p->gpus[i].uuid[0] ? p->gpus[i].uuid :
			    p->gpus[i].visible, p->wt.gs[i].why);
	}
	if (n == 0)
		return gp_errf(err, errlen, GP_ENOGPU, "no free GPU: %s",
		    why);
	p->ngpus = n;
	return 0;
}

/* GPU i's nearness, then the workers' GPU sets: groups of
 * gpus_per_worker near GPUs, or one GPU each. */
static int
groups(struct gp_pool *p, char *err, size_t errlen)
{
	const char	**bus;
	int		(*dom)[GP_NEAR_LEVELS], *grp, i, j, g;
	int		 k = p->o.gpus_per_worker;

	if (k > p->ngpus)
		return gp_errf(err, errlen, -EINVAL, "%d GPUs per worker, but "
		    "the pool has %d GPUs", k, p->ngpus);
	bus = calloc((size_t)p->ngpus, sizeof(*bus));
	dom = calloc((size_t)p->ngpus, sizeof(*dom));
	grp = calloc((size_t)p->ngpus, sizeof(*grp));
	if ((p->grp = calloc((size_t)p->ngpus, sizeof(*p->grp))) == NULL ||
	    bus == NULL || dom == NULL || grp == NULL) {
		free(bus);
		free(dom);
		free(grp);
		return -ENOMEM;
	}
	for (i = 0; i < p->ngpus; i++)
		bus[i] = p->gpus[i].busid;
	/* A nearness it could not tell is unknown (-1): groups are then
	 * filled in index order. */
	(void)gp_topo_near(p->topo, p->xml, bus, p->ngpus, dom);
	for (i = 0; i < p->ngpus; i++)
		memcpy(p->wt.gs[i].dom, dom[i], sizeof(dom[i]));
	p->ngrp = gp_gate_group(p->wt.gs, p->ngpus, k, grp);
	/* Group g's GPUs at grp[g * k ..], ascending. */
	for (g = 0; g < p->ngrp; g++)
		for (i = 0, j = 0; i < p->ngpus; i++)
			if (grp[i] == g)
				p->grp[g * k + j++] = i;
	free(bus);
	free(dom);
	free(grp);
	return 0;
}

/* Whether nothing in the plan reads the first sample (MONITOR alone). */
static int
late(const struct gp_pool *p)
{
	return !(p->o.flags & (GP_POOL_GPUS_FREE | GP_POOL_PLAN_ONLY)) &&
	    p->o.item_mem == 0;
}

/* Every GPU fake, no NVML named ($GPUPOOL_NVML, a test's stand-in): and
 * another NVML's device i is not fake GPU i. MONITOR alone starts none. */
static int
unseen(const struct gp_pool *p)
{
	const char	*nv = getenv("GPUPOOL_NVML");
	int		 i;

	if (!late(p) || (nv != NULL && *nv != '\0'))
		return 0;
	for (i = 0; i < p->ngpus; i++)
		if (!p->gpus[i].fake)
			return 0;
	return 1;
}

void
gp_watch_first(struct gp_pool *p)
{
	struct gp_watch	*wt = &p->wt;
	int		 rc;

	if (wt->nomon || !wt->mon.pending)
		return;
	if ((rc = gp_mon_wait(&wt->mon, gp_now_ns() +
	    (int64_t)WATCH_FIRST_MS * 1000000)) < 0)
		unwatch(p, rc == -ETIMEDOUT ? "the GPU monitor did not "
		    "answer" : "the GPU monitor ended");
	else
		fold(p);
	if (!wt->nomon && (p->o.flags & GP_POOL_PLAN_ONLY))
		gp_mon_stop(&wt->mon);	/* its sample is kept */
}

int
gp_watch_plan(struct gp_pool *p, char *err, size_t errlen)
{
	struct gp_watch	*wt = &p->wt;
	size_t		 n = (size_t)p->ngpus;
	int		 i, rc;

	if ((wt->gs = calloc(n, sizeof(*wt->gs))) == NULL ||
	    (wt->avail = calloc(n, sizeof(int))) == NULL ||
	    (wt->pick = calloc(n, sizeof(int))) == NULL ||
	    (wt->mix = calloc(n, sizeof(int))) == NULL)
		return -ENOMEM;
	for (i = 0; i < p->ngpus; i++) {
		wt->mix[i] = i;
		wt->gs[i].util = -1;
		wt->gs[i].total = p->gpus[i].mem_bytes;
		snprintf(wt->gs[i].why, sizeof(wt->gs[i].why), "unknown: "
		    "GPU monitor %s", not_asked);
	}
	snprintf(wt->why, sizeof(wt->why), "%s", not_asked);
	wt->nomon = 1;
	if (wanted(p) && unseen(p)) {
		snprintf(wt->why, sizeof(wt->why), "fake GPUs, and no NVML "
		    "named for them (GPUPOOL_NVML)");
		for (i = 0; i < p->ngpus; i++)
			snprintf(wt->gs[i].why, sizeof(wt->gs[i].why),
			    "unknown: %s", wt->why);
	} else if (wanted(p)) {
		if ((rc = gp_mon_start(&wt->mon, p->gpus, p->ngpus, err,
		    errlen)) < 0)
			return rc;
		wt->nomon = 0;
		wt->why[0] = '\0';
		if (gp_mon_request(&wt->mon, NULL, 0) < 0)
			unwatch(p, "the GPU monitor ended");
		else if (!late(p))
			gp_watch_first(p);
	}
	/* "free" leaves out GPUs others use (NVML) or claim (a life
	 * claim on the rest follows). */
	if ((p->o.flags & GP_POOL_GPUS_FREE) &&
	    !(p->o.flags & (GP_POOL_WAIT_FREE | GP_POOL_PLAN_ONLY)) &&
	    (gp_hold_mark(p) > 0 || !wt->nomon) &&
	    (rc = keep_free(p, err, errlen)) < 0)
		return rc;
	return groups(p, err, errlen);
}

void
gp_watch_nogpu(struct gp_pool *p, char *err, size_t errlen)
{
	struct gp_mon	 m = { .fd = -1, .pidfd = -1 };
	size_t		 n;

	if (!wanted(p) || err == NULL || (n = strlen(err)) + 1 >= errlen ||
	    gp_mon_start(&m, NULL, 0, NULL, 0) < 0)
		return;
	if (gp_mon_sample(&m, NULL, 0, WATCH_FIRST_MS) == 0)
		snprintf(err + n, errlen - n, m.snap->ok ? "; NVML is there "
		    "but sees none of them" : "; no NVML either: %s",
		    m.snap->err);
	gp_mon_stop(&m);
}

int
gp_watch_init(struct gp_pool *p)
{
	size_t	 n = (size_t)p->nw;

	if ((p->wt.use = calloc(n, sizeof(*p->wt.use))) == NULL ||
	    (p->wt.busy = calloc(n, sizeof(int))) == NULL ||
	    (p->wt.pids = calloc(n, sizeof(pid_t))) == NULL)
		return -ENOMEM;
	return 0;
}

void
gp_watch_forget(struct gp_pool *p)
{
	if (p->wt.mon.fd >= 0)
		close(p->wt.mon.fd);
	if (p->wt.mon.pidfd >= 0)
		close(p->wt.mon.pidfd);
	p->wt.mon.fd = p->wt.mon.pidfd = -1;
	p->wt.mon.pid = 0;
}

void
gp_watch_release(struct gp_pool *p)
{
	int	 i;

	gp_mon_stop(&p->wt.mon);
	for (i = 0; i < p->nw && p->w != NULL; i++)
		free(p->w[i].iset);
	free(p->wt.gs);
	free(p->wt.use);
	free(p->wt.busy);
	free(p->wt.avail);
	free(p->wt.pick);
	free(p->wt.mix);
	free(p->wt.pids);
	free(p->grp);
}

int
gp_watch_gated(const struct gp_pool *p, const struct gp_job *job)
{
	return (p->o.flags & GP_POOL_GPUS_FREE) || p->o.item_mem > 0 ||
	    (job->feed != NULL && job->feed->need != NULL) ||
	    gp_hold_items(p);
}

/* Whether every GPU of w's own set admits mem bytes more. */
static int
home_fits(const struct gp_pool *p, const struct gp_worker *w, uint64_t mem)
{
	int	 i, f = (p->o.flags & GP_POOL_GPUS_FREE) != 0;

	for (i = 0; i < w->nhome; i++)
		if (!gp_gate_fits(&p->wt.gs[w->home[i]], mem, f))
			return 0;
	return 1;
}

/* Why nothing admits an item of mem bytes on m GPUs, for people. */
static void
wait_reason(struct gp_pool *p, uint64_t mem, int m)
{
	const struct gp_gstate	*g, *b = &p->wt.gs[0];
	uint64_t		 best = 0, room, used;
	int			 i, busy = 0, idle = 0;

	for (i = 0; i < p->ngpus; i++) {
		g = &p->wt.gs[i];
		if (g->busy && (p->o.flags & GP_POOL_GPUS_FREE) && busy++ == 0)
			b = g;
		idle += g->running == 0 && !g->busy;
		used = gp_gate_ours(g) + g->foreign;
		room = g->total > used ? g->total - used : 0;
		if (room > best)
			best = room;
	}
	if (busy == p->ngpus)
		snprintf(p->wt.wait, sizeof(p->wt.wait), "every GPU is busy "
		    "(GPU %d: %s)", (int)(b - p->wt.gs), b->why);
	else if (m > 1)
		snprintf(p->wt.wait, sizeof(p->wt.wait), "needs %d GPUs "
		    "together; %d idle%s%s", m, idle, busy ? ", busy: " : "",
		    busy ? b->why : "");
	else if (mem > 0)
		snprintf(p->wt.wait, sizeof(p->wt.wait), "needs %.1f GiB; at "
		    "most %.1f GiB free on a GPU", gib(mem), gib(best));
	else
		snprintf(p->wt.wait, sizeof(p->wt.wait), "no free GPU with "
		    "an idle slot (GPU %d: %s)", (int)(b - p->wt.gs), b->why);
}

/* The head item's need, asked of the feed once per turn at the head. */
static void
head_need(const struct gp_pool *p, struct gp_job *job,
    const struct gp_item *it, uint64_t *mem, int *m)
{
	if (job->need_for != it) {
		memset(&job->need, 0, sizeof(job->need));
		if (job->feed != NULL && job->feed->need != NULL)
			job->feed->need(job->feed->arg, it, &job->need);
		job->need_for = it;
	}
	*mem = job->need.mem ? job->need.mem : p->o.item_mem;
	*m = job->need.gpus > 1 ? job->need.gpus : 1;
}

/* An idle worker of ours on GPU g, from the round-robin point on. */
static struct gp_worker *
idle_on(struct gp_pool *p, int g)
{
	struct gp_worker	*w;
	int			 k;

	for (k = 0; k < p->nw; k++) {
		w = &p->w[(p->rr + k) % p->nw];
		if (w->state == GP_W_IDLE && w->home[0] == g)
			return w;
	}
	return NULL;
}

/* Whether an item of mem bytes on each of m GPUs could ever start: on
 * m GPUs (one holding several, gpus_per_worker 1), or on some worker's
 * own set, every GPU of which could ever have mem bytes for it. */
static int
ever_fits(const struct gp_pool *p, uint64_t mem, int m)
{
	const struct gp_worker	*w;
	int			 i, j, n = 0;

	if (mem == 0)
		return 1;
	if (m > 1 && p->o.gpus_per_worker == 1) {
		for (i = 0; i < p->ngpus; i++)
			n += gp_gate_usable(&p->wt.gs[i]) >= mem;
		return n >= m;
	}
	for (i = 0; i < p->nw; i++) {
		w = &p->w[i];
		for (j = 0; j < w->nhome &&
		    gp_gate_usable(&p->wt.gs[w->home[j]]) >= mem; j++)
			;
		if (j == w->nhome)
			return 1;
	}
	return 0;
}

/* An item holding m GPUs whole (gpus_per_worker 1): pick them. */
static struct gp_worker *
place_many(struct gp_pool *p, uint64_t mem, int m)
{
	int	 i, f = (p->o.flags & GP_POOL_GPUS_FREE) != 0;

	for (i = 0; i < p->ngpus; i++)
		p->wt.avail[i] = idle_on(p, i) != NULL;
	if (gp_gate_pick(p->wt.gs, p->ngpus, p->wt.avail, m, mem, f,
	    p->wt.pick) != m)
		return NULL;
	p->wt.npick = m;
	return idle_on(p, p->wt.pick[0]);
}

/* An item on one worker's own GPUs, which are claimed per item: the
 * idle workers it fits in turn, the first whose GPUs are claimed (or
 * free to claim: one claim for all the one-GPU workers' GPUs at once,
 * the first of them the claims allow). */
static struct gp_worker *
place_claimed(struct gp_pool *p, uint64_t mem, struct gp_job *job)
{
	struct gp_worker	*w;
	int			 j, g, n = 0, asked = 0, *set = p->wt.avail;

	for (g = 0; g < p->ngpus; g++)
		set[g] = 0;
	for (j = 0; j < p->nw; j++) {
		w = &p->w[(p->rr + j) % p->nw];
		if (w->state != GP_W_IDLE || !home_fits(p, w, mem))
			continue;
		if (w->nhome > 1) {	/* a set of its own: all or none */
			asked = 1;
			if (gp_hold_set(p, w->home, w->nhome, w->nhome, mem))
				break;
			continue;
		}
		set[w->home[0]] = 1;
	}
	for (g = 0; g < p->ngpus; g++)
		if (set[g])
			p->wt.pick[n++] = g;
	if (j < p->nw)
		w = &p->w[(p->rr + j) % p->nw];
	else if (n == 0)
		w = NULL;
	else {
		w = NULL;
		asked = 1;
		if (gp_hold_set(p, p->wt.pick, n, 1, mem) == 1)
			for (j = 0; j < p->nw && w == NULL; j++) {
				w = &p->w[(p->rr + j) % p->nw];
				if (w->state != GP_W_IDLE ||
				    w->home[0] != p->hd.pend[0] ||
				    !home_fits(p, w, mem))
					w = NULL;
			}
	}
	if (w == NULL && !asked)	/* else the claims said why */
		wait_reason(p, mem, 1);
	else if (w != NULL) {
		p->wt.wait[0] = '\0';
		job->need_for = NULL;
	}
	return w;
}

struct gp_worker *
gp_watch_place(struct gp_pool *p, struct gp_job *job, const struct gp_item *it,
    int *bad)
{
	struct gp_worker	*w;
	uint64_t		 mem;
	int			 j, m, k = p->o.gpus_per_worker;

	*bad = 0;
	p->wt.npick = 0;
	head_need(p, job, it, &mem, &m);
	p->wt.pmem = mem;
	/* With workers owning k GPUs, an item of up to k runs on one of
	 * them; of more, never. Nor one whose memory no GPU could ever
	 * give: waiting for it would be for ever. */
	if (m > p->ngpus || (k > 1 && m > k) || !ever_fits(p, mem, m)) {
		*bad = -E2BIG;
		job->need_for = NULL;
		return NULL;
	}
	gp_hold_unplace(p);
	if (m > 1 && k == 1) {
		if ((w = place_many(p, mem, m)) != NULL &&
		    gp_hold_set(p, p->wt.pick, m, m, mem) == 0)
			return NULL;	/* claimed by others: why said */
	} else if (gp_hold_items(p))
		return place_claimed(p, mem, job);
	else
		for (j = 0, w = NULL; j < p->nw && w == NULL; j++) {
			w = &p->w[(p->rr + j) % p->nw];
			if (w->state != GP_W_IDLE || !home_fits(p, w, mem))
				w = NULL;
		}
	if (w == NULL)
		wait_reason(p, mem, m);
	else {
		p->wt.wait[0] = '\0';
		/* Placed (or failed, above): a retry of it, the same
		 * gp_item, is asked anew (it may need more). */
		job->need_for = NULL;
	}
	return w;
}

int
gp_watch_start(struct gp_pool *p, struct gp_worker *w)
{
	const int	*set = p->wt.npick ? p->wt.pick : w->home;
	int		 i, n = p->wt.npick ? p->wt.npick : w->nhome;
	int		*s;

	if (p->wt.gs == NULL)
		return 0;
	if (n > w->capset) {
		if ((s = realloc(w->iset, (size_t)n * sizeof(*s))) == NULL)
			return -ENOMEM;
		w->iset = s;
		w->capset = n;
	}
	memcpy(w->iset, set, (size_t)n * sizeof(*set));
	w->niset = n;
	w->imem = p->wt.pmem;
	w->claimed = gp_hold_taken(p);
	for (i = 0; i < n; i++) {
		p->wt.gs[set[i]].running++;
		p->wt.gs[set[i]].declared += w->imem;
		p->wt.gs[set[i]].held += p->wt.npick > 0;
	}
	memset(&p->wt.use[w->idx], 0, sizeof(p->wt.use[w->idx]));
	/* A snapshot asked for before it started is not of it. */
	p->wt.busy[w->idx] = p->wt.mon.pending ? 2 : 1;
	return p->wt.npick;
}

void
gp_watch_end(struct gp_pool *p, struct gp_worker *w)
{
	int	 i, many = w->niset > w->nhome;

	if (p->wt.gs == NULL || w->niset == 0)
		return;
	for (i = 0; i < w->niset; i++) {
		p->wt.gs[w->iset[i]].running--;
		p->wt.gs[w->iset[i]].declared -= w->imem;
		p->wt.gs[w->iset[i]].held -= many;
	}
	if (w->claimed)
		gp_hold_end(p, w->iset, w->niset, w->imem);
	w->claimed = 0;
	w->niset = 0;
	p->wt.busy[w->idx] = 0;
}

int
gp_watch_fd(struct gp_pool *p, const struct gp_job *job, int64_t now,
    int64_t *due)
{
	struct gp_watch	*wt = &p->wt;
	int		 i, rc;

	*due = -1;
	if (wt->nomon || wt->mon.pid == 0 || job == NULL)
		return -1;
	if (wt->mon.pending) {
		if (wt->due == 0)
			wt->due = now + WATCH_HUNG_NS;
		if (now >= wt->due) {
			unwatch(p, "the GPU monitor stopped answering");
			return -1;
		}
		*due = wt->due;
		return wt->mon.fd;
	}
	if (job->running == 0 && wt->wait[0] == '\0') {
		wt->due = 0;
		return -1;
	}
	if (wt->due == 0)
		wt->due = now + (wt->wait[0] ? WATCH_WAIT_NS : WATCH_RUN_NS);
	if (now < wt->due) {
		*due = wt->due;
		return -1;
	}
	for (i = 0; i < p->nw; i++)
		wt->pids[i] = p->w[i].state == GP_W_DEAD ? 0 : p->w[i].pid;
	wt->due = 0;
	if ((rc = gp_mon_request(&wt->mon, wt->pids, p->nw)) < 0) {
		unwatch(p, "the GPU monitor ended");
		return -1;
	}
	*due = now + WATCH_HUNG_NS;
	wt->due = *due;
	return wt->mon.fd;
}

void
gp_watch_read(struct gp_pool *p)
{
	int	 rc = gp_mon_read(&p->wt.mon);

	if (rc < 0)
		unwatch(p, "the GPU monitor ended");
	else if (rc == 1) {
		p->wt.due = 0;
		fold(p);
	}
}

/* The public calls about GPUs. */

int
gp_pool_gpus(const struct gp_pool *p)
{
	return p->ngpus;
}

int
gp_pool_gpu_state(const struct gp_pool *p, int gpu, struct gp_gpu_state *out)
{
	const struct gp_gstate	*g;

	if (gpu < 0 || gpu >= p->ngpus)
		return -EINVAL;
	g = &p->wt.gs[gpu];
	memset(out, 0, sizeof(*out));
	out->gpu = gpu;
	out->known = g->known;
	out->busy = g->busy;
	out->util = g->util;
	out->mem_total = g->total;
	out->mem_foreign = g->foreign;
	out->mem_ours = gp_gate_ours(g);
	out->mem_usable = g->total > 0 ? gp_gate_usable(g) : 0;
	out->running = g->running;
	out->nforeign = g->nforeign;
	out->held = g->held > 0;
	snprintf(out->uuid, sizeof(out->uuid), "%s", p->gpus[gpu].uuid);
	snprintf(out->busid, sizeof(out->busid), "%s", p->gpus[gpu].busid);
	snprintf(out->why, sizeof(out->why), "%s", g->why);
	return 0;
}

const char *
gp_pool_monitor(const struct gp_pool *p)
{
	return p->wt.nomon ? p->wt.why : NULL;
}

int
gp_pool_waiting(const struct gp_pool *p, char *why, size_t len)
{
	if (p->wt.wait[0] == '\0')
		return 0;
	if (why != NULL && len > 0)
		snprintf(why, len, "%s", p->wt.wait);
	return 1;
}

int
gp_pool_usage(const struct gp_pool *p, int worker, struct gp_usage *out)
{
	const struct gp_gusage	*u;

	if (worker < 0 || worker >= p->nw || p->wt.use == NULL)
		return -EINVAL;
	u = &p->wt.use[worker];
	memset(out, 0, sizeof(*out));
	out->mem_peak = u->mem_peak;
	out->util = u->util_n ? (int)(u->util_sum / u->util_n) : -1;
	out->samples = (int)u->samples;
	return 0;
}
