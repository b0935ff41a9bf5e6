/*
 * standalone.c: gp_claim() and gp_unclaim(), the host's claims for a
 * process that runs no pool (claim.c holds the table, hold.c names the
 * GPUs): a plan-only pool finds the GPUs, its claimer is kept until the
 * process ends and the pool goes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "claim.h"
#include "internal.h"

/* gp_claim()'s claimer: held until the process ends, or gp_unclaim(). */
static struct gp_claimer	*mine;
static pid_t			 mine_pid;

int
gp_claim(const struct gp_pool_opts *o, int n, char *visible, size_t len)
{
	struct gp_pool_opts	 po = *o;
	struct gp_pool		*p;
	char			*err = o->errbuf;
	size_t			 errlen = o->errlen, at = 0;
	int			 i, rc, got[GP_CLAIM_MAXG];

	if (mine != NULL && mine_pid == getpid())
		return gp_errf(err, errlen, -EALREADY, "this process holds "
		    "claims already (gp_unclaim() first)");
	po.flags |= GP_POOL_PLAN_ONLY;
	po.flags &= ~(unsigned)GP_POOL_CLAIM_ITEMS;
	if ((rc = gp_pool_create(&p, &po)) < 0)
		return rc;
	if (n < 1 || n > p->ngpus || n > GP_CLAIM_MAXG) {
		rc = gp_errf(err, errlen, -EINVAL, "%d GPUs wanted, %d there",
		    n, p->ngpus);
		goto out;
	}
	if ((rc = gp_hold_open(p, &p->hd.cl, err, errlen)) < 0)
		goto out;
	if (p->hd.cl == NULL) {
		rc = gp_errf(err, errlen, -EINVAL, "claims are off (none)");
		goto out;
	}
	if ((rc = gp_hold_wait(p, n, p->o.item_mem, got, err, errlen)) < 0)
		goto out;
	for (i = 0; i < n; i++)
		at += (size_t)snprintf(visible + (at < len ? at : len),
		    at < len ? len - at : 0, "%s%s", i ? "," : "",
		    p->gpus[got[i]].visible);
	if (at >= len) {
		rc = gp_errf(err, errlen, -ENOBUFS, "visible: %zu bytes "
		    "needed", at + 1);
		goto out;
	}
	setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
	setenv("CUDA_VISIBLE_DEVICES", visible, 1);
	mine = p->hd.cl;	/* kept: the claims go with the process */
	mine_pid = getpid();
	p->hd.cl = NULL;
	rc = n;
out:
	gp_pool_destroy(p);
	return rc;
}

/* Whether this process mapped a CUDA driver (its memory stays on the
 * GPUs until the process exits). */
static int
cuda_loaded(void)
{
	char	 line[512];
	FILE	*f;
	int	 yes = 0;

	if ((f = fopen("/proc/self/maps", "re")) == NULL)
		return 1;	/* cannot tell: say it is */
	while (!yes && fgets(line, sizeof(line), f) != NULL)
		yes = strstr(line, "/libcuda.so") != NULL;
	fclose(f);
	return yes;
}

int
gp_unclaim(void)
{
	if (mine == NULL || mine_pid != getpid())
		return -ENOENT;
	if (cuda_loaded())
		return -EBUSY;
	gp_claim_close(mine);
	mine = NULL;
	return 0;
}
