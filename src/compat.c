/*
 * compat.c: the names of gpupool 0.1, kept so that programs built against
 * them still link and run. Each is a real function (an exported symbol of
 * libgpupool.so) that calls the gp_<noun>_<verb> name that replaced it and
 * does nothing else; gpupool.h documents them as aliases. New code uses
 * the new names.
 */
#include "internal.h"

int
gp_map(struct gp_pool *p, gp_fn *fn, const void *arg, size_t arglen,
    struct gp_item *items, size_t n)
{
	return gp_pool_map(p, fn, arg, arglen, items, n);
}

int
gp_run(struct gp_pool *p, gp_fn *fn, const void *arg, size_t arglen,
    const struct gp_feed *feed)
{
	return gp_pool_run(p, fn, arg, arglen, feed);
}

int
gp_reply(struct gp_ctx *ctx, const void *buf, size_t len)
{
	return gp_ctx_reply(ctx, buf, len);
}

void
gp_shutdown(void)
{
	gp_default_pool_destroy();
}
