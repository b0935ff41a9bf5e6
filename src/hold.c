/*
 * hold.c: a pool's claims on its GPUs (claim.c holds the host's table).
 * A pool claims each of its GPUs for its life, before its first worker
 * starts (its workers may hold CUDA contexts), waiting its turn; under
 * GP_POOL_CLAIM_ITEMS (gpupool-run, whose workers hold no context) it
 * claims a GPU for each item that runs there and gives it back when the
 * item ends, so that others waiting get their turn between items.
 * Master only.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "claim.h"
#include "internal.h"

/* A GPU's name in the claims table: fake GPUs by their fake id, real ones
 * by UUID, else bus id, else what CUDA_VISIBLE_DEVICES says. */
const char *
gp_hold_key(const struct gp_gpu *g)
{
	if (g->fake)
		return g->visible;
	return g->uuid[0] ? g->uuid : g->busid[0] ? g->busid : g->visible;
}

/* What a pool's life claim declares on each GPU: its workers' items. */
static uint64_t
life_mem(const struct gp_pool *p)
{
	return p->o.item_mem * (uint64_t)p->o.per_gpu;
}

/* GPU i's size for the claims: NVML's, else the probe's (0: unknown). */
static uint64_t
size_of(const struct gp_pool *p, int i)
{
	return p->wt.gs[i].total ? p->wt.gs[i].total : p->gpus[i].mem_bytes;
}

void
gp_hold_sizes(struct gp_pool *p)
{
	int	 i;

	for (i = 0; p->hd.cl != NULL && i < p->ngpus; i++)
		gp_claim_size(p->hd.cl, i, size_of(p, i));
}

int
gp_hold_open(struct gp_pool *p, struct gp_claimer **c, char *err,
    size_t errlen)
{
	int	 i, rc;

	if ((rc = gp_claim_open(c, p->o.claims, err, errlen)) < 0 ||
	    *c == NULL)
		return rc;
	if (p->hd.set == NULL &&
	    (p->hd.set = calloc((size_t)p->ngpus, sizeof(int))) == NULL)
		return -ENOMEM;
	for (i = 0; i < p->ngpus; i++) {
		if ((rc = gp_claim_gpu(*c, gp_hold_key(&p->gpus[i]),
		    size_of(p, i))) < 0)
			return gp_errf(err, errlen, rc, "claims: more than %d "
			    "GPUs", GP_CLAIM_MAXG);
		p->hd.set[i] = i;
	}
	return 0;
}

int
gp_hold_wait(struct gp_pool *p, int n, uint64_t mem, int *got, char *err,
    size_t errlen)
{
	struct gp_claim_req	 r = { .n = n, .mem = mem, .set = p->hd.set,
				    .nset = p->ngpus };
	char			 why[300];
	int			 rc;

	rc = gp_claim_wait(p->hd.cl, &r, got, p->o.claim_timeout_ms,
	    (p->o.flags & GP_POOL_CANCEL_FD) ? p->o.cancel_fd : -1, why,
	    sizeof(why));
	if (rc == -ETIMEDOUT || rc == -ECANCELED)
		return gp_errf(err, errlen, GP_ECLAIM, "%d of %d GPU%s not "
		    "claimed %s: %s", n, p->ngpus, p->ngpus > 1 ? "s" : "",
		    rc == -ECANCELED ? "(the wait was canceled)" :
		    p->o.claim_timeout_ms < 0 ? "at once" : "in claim_timeout",
		    why);
	return rc < 0 ? gp_errf(err, errlen, rc, "claims: %s",
	    strerror(-rc)) : rc;
}

int
gp_hold_start(struct gp_pool *p, char *err, size_t errlen)
{
	int	 rc;

	if ((rc = gp_hold_open(p, &p->hd.cl, err, errlen)) < 0 ||
	    p->hd.cl == NULL)
		return rc;
	if ((p->hd.pend = calloc((size_t)p->ngpus, sizeof(int))) == NULL)
		return -ENOMEM;
	return !(p->o.flags & GP_POOL_CLAIM_ITEMS);
}

int
gp_hold_life(struct gp_pool *p, char *err, size_t errlen)
{
	int	 rc;

	rc = gp_hold_wait(p, p->ngpus, life_mem(p), p->hd.pend, err, errlen);
	return rc < 0 ? rc : 0;
}

int
gp_hold_mark(struct gp_pool *p)
{
	struct gp_claimer	*c = NULL;
	struct gp_claim_req	 r = { .n = 1, .nset = 1, .look = 1 };
	struct gp_gstate	*g;
	int			 i, n = 0, got;

	if (gp_hold_open(p, &c, NULL, 0) < 0 || c == NULL) {
		gp_claim_close(c);
		return 0;
	}
	r.mem = life_mem(p);
	for (i = 0; i < p->ngpus; i++) {
		g = &p->wt.gs[i];
		r.set = &p->hd.set[i];
		if (g->busy || gp_claim_try(c, &r, &got, g->why,
		    sizeof(g->why)) > 0)
			continue;
		g->busy = 1;
		n++;
	}
	gp_claim_close(c);
	return n;
}

int
gp_hold_items(const struct gp_pool *p)
{
	return p->hd.cl != NULL && (p->o.flags & GP_POOL_CLAIM_ITEMS);
}

int
gp_hold_set(struct gp_pool *p, const int *set, int n, int want, uint64_t mem)
{
	struct gp_claim_req	 r = { .n = want, .mem = mem, .set = set,
				    .nset = n };
	char			 why[300];
	int			 rc;

	if (!gp_hold_items(p))
		return want;
	gp_hold_unplace(p);
	if ((rc = gp_claim_try(p->hd.cl, &r, p->hd.pend, why,
	    sizeof(why))) > 0) {
		p->hd.waiting = 0;
		p->hd.npend = rc;
		p->hd.pmem = mem;
		return rc;
	}
	p->hd.waiting = 1;
	snprintf(p->wt.wait, sizeof(p->wt.wait), "%s%s", GP_CLAIM_WAITING,
	    why);
	return 0;
}

int
gp_hold_taken(struct gp_pool *p)
{
	int	 n = p->hd.npend;

	p->hd.npend = 0;
	return n > 0;
}

void
gp_hold_unplace(struct gp_pool *p)
{
	if (p->hd.npend > 0)
		gp_hold_end(p, p->hd.pend, p->hd.npend, p->hd.pmem);
	p->hd.npend = 0;
}

void
gp_hold_end(struct gp_pool *p, const int *set, int n, uint64_t mem)
{
	int	 i;

	if (!gp_hold_items(p))
		return;
	for (i = 0; i < n; i++)
		gp_claim_drop(p->hd.cl, set[i], mem);
}

void
gp_hold_idle(struct gp_pool *p)
{
	gp_hold_unplace(p);
	if (gp_hold_items(p) && p->hd.waiting) {
		gp_claim_unwait(p->hd.cl);
		p->hd.waiting = 0;
	}
}

int
gp_hold_fd(struct gp_pool *p, int64_t now, int64_t *due)
{
	int	 fd;

	if (!gp_hold_items(p) || !p->hd.waiting)
		return -1;
	fd = gp_claim_fd(p->hd.cl);
	*due = now + gp_claim_poll_ms(fd, p->hd.woke) * 1000000LL;
	p->hd.woke = 0;
	return fd;
}

void
gp_hold_read(struct gp_pool *p)
{
	gp_claim_drain(p->hd.cl);
	p->hd.woke = 1;
}

void
gp_hold_release(struct gp_pool *p)
{
	gp_claim_close(p->hd.cl);
	p->hd.cl = NULL;
	free(p->hd.set);
	free(p->hd.pend);
	p->hd.set = p->hd.pend = NULL;
}
