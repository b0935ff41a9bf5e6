/*
 * check_cudafork.c: invariant 1, the master never initialises CUDA. Runs
 * with a fake libcuda.so.1 on LD_LIBRARY_PATH that logs the pid of every
 * process loading it; cudart loads it on its first call. The probe child
 * must appear in the log, the master never, with real GPU discovery, with
 * explicit ids and with workers that create their CUDA context.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpupool.h"
#include "check_main.h"

static char	 logpath[] = "/tmp/gp-cudalog-XXXXXX";

/* Count log lines; fail if any names this process. */
static int
loads(void)
{
	FILE	*f = fopen(logpath, "re");
	int	 pid, n = 0;

	if (f == NULL)
		return 0;
	while (fscanf(f, "%d", &pid) == 1) {
		ck_assert_msg(pid != getpid(), "the master loaded libcuda");
		n++;
	}
	fclose(f);
	return n;
}

static int
noop(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	return 0;
}

START_TEST(probe_and_workers_touch_cuda_master_never)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { 0 };
	struct gp_item		 it[4];
	char			 err[256];
	int			 fd = mkstemp(logpath), rc;

	ck_assert_int_ge(fd, 0);
	close(fd);
	setenv("GP_FAKE_CUDA_LOG", logpath, 1);
	o.errbuf = err;
	o.errlen = sizeof(err);

	/* Discovery: the probe child calls cudart; it finds no driver. */
	rc = gp_pool_create(&p, &o);
	ck_assert_int_eq(rc, GP_ENOGPU);
	ck_assert_int_eq(loads(), 1);

	/* Explicit ids: probed too, then used as given; workers that make
	 * their CUDA context load it in their own processes. */
	o.gpus = "0,1";
	o.flags = GP_POOL_CUDA_INIT;
	ck_assert_int_eq(gp_pool_create(&p, &o), GP_EINIT);
	ck_assert_ptr_nonnull(strstr(err, "CUDA context failed"));
	ck_assert_int_ge(loads(), 3);
	o.flags = 0;
	ck_assert_msg(gp_pool_create(&p, &o) == 0, "%s", err);
	memset(it, 0, sizeof(it));
	ck_assert_int_eq(gp_pool_map(p, noop, NULL, 0, it, 4), 0);
	gp_pool_destroy(p);
	loads();
	unlink(logpath);
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("cudafork");
	TCase	*tc = tcase_create("cudafork");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, probe_and_workers_touch_cuda_master_never);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
