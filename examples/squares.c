/*
 * squares.c: the smallest gpupool program, pool_map() on the default
 * pool; the EXAMPLE of gpupool(3). Without a GPU, run it on fake ones:
 *
 *	GPUPOOL_FAKE_GPUS=2 ./squares
 */
#include <stdio.h>
#include <string.h>

#include <gpupool.h>

#define N	8

/* Runs in a worker process, once per item. */
static int
square(struct gp_ctx *ctx, const void *in, size_t inlen, void *arg)
{
	int	 x;

	if (inlen != sizeof(x))
		return 1;
	memcpy(&x, in, sizeof(x));
	x *= x;
	return gp_ctx_reply(ctx, &x, sizeof(x));
}

int
main(void)
{
	struct gp_item	 items[N];
	char		 why[128];
	int		 in[N], out, i, rc, failed = 0;

	for (i = 0; i < N; i++) {
		in[i] = i;
		gp_item_init(&items[i], &in[i], sizeof(in[i]));
	}
	if ((rc = pool_map(square, items, N)) < 0) {
		fprintf(stderr, "squares: %s\n", gp_strerror(rc));
		return 1;
	}
	for (i = 0; i < N; i++) {
		if (items[i].status == GP_OK && items[i].outlen == sizeof(out)) {
			memcpy(&out, items[i].out, sizeof(out));
			printf("%d squared is %d (worker %d)\n", i, out,
			    items[i].worker);
		} else {
			printf("item %d: %s\n", i, gp_item_strerror(&items[i],
			    why, sizeof(why)));
			failed = 1;
		}
	}
	gp_items_release(items, N);
	gp_default_pool_destroy();
	return failed;
}
