/*
 * check_place.c: where workers run and what they see: their GPU and slot
 * from inside, the variables set for them, explicit GPU ids against an
 * inherited CUDA_VISIBLE_DEVICES, the default pool from the environment,
 * the plan on a fixture machine, real CPU binding (case "smp": inside an
 * inherited affinity, a meson test of its own).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hwloc.h>

#include "gpupool.h"
#include "check_main.h"
#include "proc_test.h"
#include "pool_test.h"

struct seen {
	int	 worker, gpu, slot;
	pid_t	 pid;
	char	 visible[96];
	char	 env[96];
	char	 order[32];
	int	 init_ran;
};

static int	 init_count;	/* per worker process */

static int
count_init(struct gp_ctx *ctx, void *arg)
{
	const char	*v = getenv("CUDA_VISIBLE_DEVICES");

	/* No item to reply to: refused, and nothing is corrupted. */
	if (gp_ctx_reply(ctx, "junk", 4) != -EINVAL)
		return 2;

	/* CUDA_VISIBLE_DEVICES is set before init runs. */
	if (v == NULL || strcmp(v, gp_ctx_info(ctx)->visible) != 0)
		return 1;
	init_count++;
	return 0;
}

/*
 * The first item of each worker in a round writes a byte to the test's
 * "arrived" pipe and blocks on the "go" pipe, which a helper fills once
 * every worker has arrived: so every worker gets items, whatever the
 * machine's load (a sleep in the item only made it likely).
 */
struct barrier {
	int	 arrived;	/* write end */
	int	 go;		/* read end */
	int	 round;
};

static int	 last_round = -1;	/* per worker process */

static pid_t
barrier_helper(int arrived, int go, int n)
{
	pid_t	 pid;
	char	 c;
	int	 i;

	if ((pid = fork()) != 0)
		return pid;
	for (i = 0; i < n; i++)
		if (read(arrived, &c, 1) != 1)
			_exit(1);
	for (i = 0; i < n; i++)
		if (write(go, "g", 1) != 1)
			_exit(1);
	_exit(0);
}

static int
where(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	const struct gp_worker_info	*i = gp_ctx_info(ctx);
	const struct barrier		*b = arg;
	struct seen			 s = { 0 };
	const char			*e;
	char				 c;

	if (b->round != last_round) {
		last_round = b->round;
		if (write(b->arrived, "a", 1) != 1 || read(b->go, &c, 1) != 1)
			return 1;
	}
	s.worker = i->worker;
	s.gpu = i->gpu;
	s.slot = i->slot;
	s.pid = getpid();
	s.init_ran = init_count;
	snprintf(s.visible, sizeof(s.visible), "%s", i->visible);
	if ((e = getenv("CUDA_VISIBLE_DEVICES")) != NULL)
		snprintf(s.env, sizeof(s.env), "%s", e);
	if ((e = getenv("CUDA_DEVICE_ORDER")) != NULL)
		snprintf(s.order, sizeof(s.order), "%s", e);
	return gp_ctx_reply(ctx, &s, sizeof(s));
}

START_TEST(workers_see_their_gpu_and_live_across_maps)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 3, .per_gpu = 2,
				       .init = count_init };
	struct gp_worker_info	 wi;
	struct gp_item		 it[60];
	struct seen		 s;
	struct barrier		 b;
	pid_t			 pids[6] = { 0 }, helper;
	int			 i, round, arrived[2], go[2], st, used;

	ck_assert_int_eq(pipe2(arrived, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(go, O_CLOEXEC), 0);
	b.arrived = arrived[1];
	b.go = go[0];
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_size(p), 6);
	for (round = 0; round < 2; round++) {
		memset(it, 0, sizeof(it));
		b.round = round;
		helper = barrier_helper(arrived[0], go[1], 6);
		ck_assert_int_gt(helper, 0);
		ck_assert_int_eq(gp_pool_map(p, where, &b, sizeof(b), it, 60), 0);
		ck_assert_int_eq(waitpid(helper, &st, 0), helper);
		ck_assert_int_eq(st, 0);	/* all six arrived */
		used = 0;
		for (i = 0; i < 60; i++) {
			ck_assert_int_eq(it[i].status, GP_OK);
			memcpy(&s, it[i].out, sizeof(s));
			ck_assert_int_eq(s.worker, it[i].worker);
			ck_assert_int_eq(s.gpu, s.worker % 3);
			ck_assert_int_eq(s.slot, s.worker / 3);
			ck_assert_str_eq(s.env, s.visible);
			ck_assert_str_eq(s.order, "PCI_BUS_ID");
			ck_assert_int_eq(s.init_ran, 1);
			ck_assert_int_eq(gp_pool_info(p, s.worker, &wi), 0);
			ck_assert_str_eq(wi.visible, s.visible);
			ck_assert_int_eq(wi.pid, s.pid);
			if (round == 0 && pids[s.worker] == 0) {
				pids[s.worker] = s.pid;
				used++;
			}
			/* Same processes in the second map. */
			ck_assert_int_eq(pids[s.worker], s.pid);
		}
		if (round == 0)
			ck_assert_int_eq(used, 6);
		gp_items_release(it, 60);
	}
	for (i = 0; i < 2; i++) {
		close(arrived[i]);
		close(go[i]);
	}
	/* Fake GPU g is "fake<g>": never a CUDA id of a real device. */
	ck_assert_int_eq(gp_pool_info(p, 4, &wi), 0);
	ck_assert_str_eq(wi.visible, "fake1");
	ck_assert_int_eq(wi.fake, 1);
	ck_assert_int_eq(gp_pool_info(p, 6, &wi), -EINVAL);
	gp_pool_destroy(p);
}
END_TEST

extern char	**environ;

/* Every copy in environ of the variables the pool sets, one a line. */
static int
env_copies(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	static const char *const set[] = { "CUDA_VISIBLE_DEVICES=",
	    "CUDA_DEVICE_ORDER=", NULL };
	char		 buf[1024] = "";
	size_t		 n = 0;
	int		 i, k;

	for (k = 0; set[k] != NULL; k++)
		for (i = 0; environ[i] != NULL; i++)
			if (strncmp(environ[i], set[k], strlen(set[k])) == 0)
				n += (size_t)snprintf(buf + n, n < sizeof(buf) ?
				    sizeof(buf) - n : 0, "%s\n", environ[i]);
	return gp_ctx_reply(ctx, buf, strlen(buf) + 1);
}

/* A launcher can leave a variable twice in environ: setenv() replaces
 * the first copy, while a shell or Python reads the last. A worker's
 * environment has one copy of each variable the pool sets, its own. */
START_TEST(set_variables_replace_every_copy)
{
	static char		*twice[] = {
		"CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7",
		"CUDA_DEVICE_ORDER=FASTEST_FIRST",
		"CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7",
		"CUDA_DEVICE_ORDER=FASTEST_FIRST" };
	struct gp_pool		*p;
	struct gp_item		 it[8];
	char			**env, **old = environ, want[128];
	size_t			 n, i;

	for (n = 0; environ[n] != NULL; n++)
		;
	env = calloc(n + 5, sizeof(*env));
	ck_assert_ptr_nonnull(env);
	memcpy(env, environ, n * sizeof(*env));
	memcpy(env + n, twice, sizeof(twice));
	environ = env;
	p = make_pool(2, 1);
	memset(it, 0, sizeof(it));
	ck_assert_int_eq(gp_pool_map(p, env_copies, NULL, 0, it, 8), 0);
	for (i = 0; i < 8; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		snprintf(want, sizeof(want), "CUDA_VISIBLE_DEVICES=fake%d\n"
		    "CUDA_DEVICE_ORDER=PCI_BUS_ID\n", it[i].worker);
		ck_assert_str_eq(it[i].out, want);
	}
	gp_items_release(it, 8);
	gp_pool_destroy(p);
	environ = old;
	free(env);
}
END_TEST

START_TEST(explicit_ids_and_inherited_visible_devices)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .gpus = "0,1,2,3" };
	struct gp_worker_info	 wi;
	char			 err[256];
	int			 i;
	char			 want[8];

	/* No driver here: explicit ids are used as given. */
	o.errbuf = err;
	o.errlen = sizeof(err);
	ck_assert_msg(gp_pool_create(&p, &o) == 0, "%s", err);
	ck_assert_int_eq(gp_pool_size(p), 4);
	for (i = 0; i < 4; i++) {
		ck_assert_int_eq(gp_pool_info(p, i, &wi), 0);
		snprintf(want, sizeof(want), "%d", i);
		ck_assert_str_eq(wi.visible, want);
		ck_assert_int_eq(wi.fake, 0);
	}
	gp_pool_destroy(p);

	/* Slurm gave us 5 and 7: index 1 is GPU 7, index 2 does not exist. */
	setenv("CUDA_VISIBLE_DEVICES", "5,7", 1);
	o.gpus = "1";
	o.flags = GP_POOL_PLAN_ONLY;
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_info(p, 0, &wi), 0);
	ck_assert_str_eq(wi.visible, "7");
	gp_pool_destroy(p);
	o.gpus = "2";
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "CUDA_VISIBLE_DEVICES=5,7"));
	o.gpus = "1,1";
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "twice"));
	unsetenv("CUDA_VISIBLE_DEVICES");
	o.gpus = "0,,1";
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "empty"));
}
END_TEST

/* Ids taken as given (no driver) still never name a GPU outside an
 * inherited CUDA_VISIBLE_DEVICES, nor one GPU twice. */
START_TEST(given_ids_stay_inside_what_is_visible)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .flags = GP_POOL_PLAN_ONLY };
	struct gp_worker_info	 wi;
	char			 err[256];
	int			 driver;

	o.errbuf = err;
	o.errlen = sizeof(err);
	unsetenv("CUDA_VISIBLE_DEVICES");
	if ((driver = gp_pool_create(&p, &o) == 0))	/* a GPU is seen */
		gp_pool_destroy(p);
	o.gpus = "0,00";		/* one index, two spellings */
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "'00' is listed twice"));
	o.gpus = "GPU-8932f937,gpu-8932F937";
	if (!driver) {
		ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
		ck_assert_ptr_nonnull(strstr(err, "listed twice"));
	}

	/* Set but empty: no GPU at all, whatever is asked for. */
	setenv("CUDA_VISIBLE_DEVICES", "", 1);
	o.gpus = "0";
	ck_assert_int_eq(gp_pool_create(&p, &o), GP_ENOGPU);
	ck_assert_ptr_nonnull(strstr(err, "set but empty"));
	/* The usual ways of saying "no GPU", and, as in CUDA, a list ends
	 * at its first entry that names no GPU. */
	setenv("CUDA_VISIBLE_DEVICES", "-1", 1);
	ck_assert_int_eq(gp_pool_create(&p, &o), GP_ENOGPU);
	ck_assert_ptr_nonnull(strstr(err, "CUDA_VISIBLE_DEVICES='-1' names "
	    "none"));
	setenv("CUDA_VISIBLE_DEVICES", "NoDevFiles", 1);
	ck_assert_int_eq(gp_pool_create(&p, &o), GP_ENOGPU);
	setenv("CUDA_VISIBLE_DEVICES", "90,-1,91", 1);
	o.gpus = "1";
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_msg(strstr(err, "no GPU '1' among CUDA_VISIBLE_DEVICES=90")
	    != NULL && strstr(err, "-1") == NULL, "%s", err);
	o.gpus = "0";
	ck_assert_msg(gp_pool_create(&p, &o) == 0, "%s", err);
	ck_assert_int_eq(gp_pool_info(p, 0, &wi), 0);
	ck_assert_str_eq(wi.visible, "90");
	gp_pool_destroy(p);

	/* A UUID outside the inherited set is refused, one inside it is
	 * taken (with or without GPU-, or a prefix), as is its index. (No
	 * machine has these GPUs: the probe sees none.) */
	setenv("CUDA_VISIBLE_DEVICES", "90,91", 1);
	o.gpus = "GPU-8932f937";
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "'GPU-8932f937' among "
	    "CUDA_VISIBLE_DEVICES=90,91"));
	setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa1111,GPU-8932f937", 1);
	o.gpus = "8932f9";
	ck_assert_msg(gp_pool_create(&p, &o) == 0, "%s", err);
	ck_assert_int_eq(gp_pool_info(p, 0, &wi), 0);
	ck_assert_str_eq(wi.visible, "GPU-8932f937");
	gp_pool_destroy(p);
	o.gpus = "1,GPU-8932f937";
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "listed twice"));
	o.gpus = "GPU-bbbb2222";
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "among CUDA_VISIBLE_DEVICES="));
	unsetenv("CUDA_VISIBLE_DEVICES");
}
END_TEST

START_TEST(no_gpu_is_a_clear_error)
{
	struct gp_pool		*p = NULL;
	struct gp_pool_opts	 o = { 0 };
	char			 err[256];
	int			 rc;

	o.errbuf = err;
	o.errlen = sizeof(err);
	rc = gp_pool_create(&p, &o);
	if (rc == 0) {
		/* A machine with a GPU: the probe must have named it. */
		struct gp_worker_info	 wi;

		ck_assert_int_eq(gp_pool_info(p, 0, &wi), 0);
		ck_assert_int_eq(strncmp(wi.visible, "GPU-", 4), 0);
		gp_pool_destroy(p);
		return;
	}
	ck_assert_int_eq(rc, GP_ENOGPU);
	ck_assert_ptr_null(p);
	ck_assert_ptr_nonnull(strstr(err, "no GPU found"));
	ck_assert_ptr_nonnull(strstr(err, "GPUPOOL_FAKE_GPUS"));
	ck_assert_ptr_nonnull(strstr(gp_strerror(rc), "no GPU"));
}
END_TEST

START_TEST(pool_map_default_pool_from_environment)
{
	int		 v[50], r, i;
	struct gp_item	*it = int_items(v, 50);
	struct gp_item	 one[1];

	setenv("GPUPOOL_FAKE_GPUS", "3", 1);
	ck_assert_int_eq(pool_map(twice, it, 50), 0);
	for (i = 0; i < 50; i++) {
		memcpy(&r, it[i].out, sizeof(r));
		ck_assert_int_eq(r, 2 * i);
		ck_assert(it[i].worker >= 0 && it[i].worker < 3);
	}
	gp_items_release(it, 50);
	gp_default_pool_destroy();
	setenv("GPUPOOL_FAKE_GPUS", "three", 1);
	memset(one, 0, sizeof(one));
	ck_assert_int_eq(pool_map(twice, one, 1), -EINVAL);
	unsetenv("GPUPOOL_FAKE_GPUS");
	free(it);
}
END_TEST

START_TEST(plan_on_dgx2_fixture)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 16,
		.fake_busids = "0000:34:00.0,0000:36:00.0,0000:39:00.0,"
		    "0000:3b:00.0,0000:57:00.0,0000:59:00.0,0000:5c:00.0,"
		    "0000:5e:00.0,0000:b7:00.0,0000:b9:00.0,0000:bc:00.0,"
		    "0000:be:00.0,0000:e0:00.0,0000:e2:00.0,0000:e5:00.0,"
		    "0000:e7:00.0",
		.topology_xml = GP_FIXTURES "/nvidiaDGX2.xml",
		.flags = GP_POOL_PLAN_ONLY };
	struct gp_worker_info	 wi;
	struct gp_item		 it[1];
	int			 i, per[2] = { 0, 0 };

	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_size(p), 16);
	for (i = 0; i < 16; i++) {
		ck_assert_int_eq(gp_pool_info(p, i, &wi), 0);
		ck_assert_int_eq(wi.pid, 0);
		ck_assert(wi.numa == 0 || wi.numa == 1);
		per[wi.numa]++;
		ck_assert_str_eq(wi.cpuset, wi.numa == 0 ? "0-1" : "24-25");
		ck_assert_int_eq(wi.numa, i < 8 ? 0 : 1);
	}
	ck_assert_int_eq(per[0], 8);
	ck_assert_int_eq(per[1], 8);
	memset(it, 0, sizeof(it));
	ck_assert_int_eq(gp_pool_map(p, twice, NULL, 0, it, 1), GP_EPLAN);
	gp_pool_destroy(p);
}
END_TEST

START_TEST(workers_are_really_bound)
{
	int			 ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
	struct gp_pool		*p = make_pool(ncpu >= 2 ? 2 : 1, 1);
	struct gp_worker_info	 wi[2];
	struct gp_item		 it[40];
	char			 want[256];
	int			 i;

	memset(it, 0, sizeof(it));
	for (i = 0; i < gp_pool_size(p); i++) {
		ck_assert_int_eq(gp_pool_info(p, i, &wi[i]), 0);
		ck_assert_int_eq(wi[i].cpubind_rc, 0);
	}
	ck_assert_int_eq(gp_pool_map(p, affinity, NULL, 0, it, 40), 0);
	for (i = 0; i < 40; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		expand(wi[it[i].worker].cpuset, want, sizeof(want));
		ck_assert_str_eq((char *)it[i].out, want);
	}
	if (gp_pool_size(p) == 2)	/* disjoint cores on one locality */
		ck_assert_str_ne(wi[0].cpuset, wi[1].cpuset);
	gp_items_release(it, 40);
	gp_pool_destroy(p);
}
END_TEST

START_TEST(placement_stays_inside_inherited_affinity)
{
	cpu_set_t		 one;
	struct gp_pool		*p;
	struct gp_worker_info	 wi;
	struct gp_item		 it[8];
	int			 i;

	/* main() runs this only with two CPUs or more: one leaves nothing
	 * to narrow, and the case says SKIP there. */
	ck_assert_int_ge(sysconf(_SC_NPROCESSORS_ONLN), 2);
	/* As taskset -c 1 or a Slurm binding would leave us. */
	CPU_ZERO(&one);
	CPU_SET(1, &one);
	ck_assert_int_eq(sched_setaffinity(0, sizeof(one), &one), 0);
	p = make_pool(2, 1);
	for (i = 0; i < 2; i++) {
		ck_assert_int_eq(gp_pool_info(p, i, &wi), 0);
		ck_assert_str_eq(wi.cpuset, "1");
	}
	memset(it, 0, sizeof(it));
	ck_assert_int_eq(gp_pool_map(p, affinity, NULL, 0, it, 8), 0);
	for (i = 0; i < 8; i++)
		ck_assert_str_eq((char *)it[i].out, "1");
	gp_items_release(it, 8);
	gp_pool_destroy(p);
}
END_TEST

int
main(int argc, char **argv)
{
	Suite	*s = suite_create("pool");
	TCase	*tc = tcase_create("place"), *smp = tcase_create("smp");
	const char *tcn = argc > 1 ? argv[1] : "place";

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, workers_see_their_gpu_and_live_across_maps);
	tcase_add_test(tc, set_variables_replace_every_copy);
	tcase_add_test(tc, explicit_ids_and_inherited_visible_devices);
	tcase_add_test(tc, given_ids_stay_inside_what_is_visible);
	tcase_add_test(tc, no_gpu_is_a_clear_error);
	tcase_add_test(tc, pool_map_default_pool_from_environment);
	tcase_add_test(tc, plan_on_dgx2_fixture);
	tcase_add_test(tc, workers_are_really_bound);
	suite_add_tcase(s, tc);
	/* A meson test of its own (check_place_smp), SKIP on one CPU. */
	tcase_set_timeout(smp, 30);
	tcase_add_test(smp, placement_stays_inside_inherited_affinity);
	suite_add_tcase(s, smp);
	if (strcmp(tcn, "smp") == 0 && sysconf(_SC_NPROCESSORS_ONLN) < 2)
		return gp_check_skip(s, tcn, "one CPU: no affinity to narrow");
	return gp_check_run_case(s, tcn);
}
