/*
 * check_threads.c: a pool used from several threads (one map proceeds at
 * a time, pool_map() from threads, pool_map() in a worker), and forks: an
 * inherited pool in a forked child, the fork hook around worker forks.
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
#include "feed_test.h"

/*
 * Threads. Pipes made before the pool, so workers hold them: an item
 * writes 'S' on started when it begins and blocks until it reads a byte
 * from release; the test thread releases items one by one. Nothing waits
 * on a clock: an item stays running until the test lets it go.
 */
#define NTHREADS	4
#define THREAD_ITEMS	4

struct threads {
	int		 started[2], release[2];
	struct gp_pool	*p;
	pthread_barrier_t bar;
	sem_t		 returned;
	int		 rc[NTHREADS];
	int		 tag[NTHREADS];
	struct gp_item	 it[NTHREADS][THREAD_ITEMS];
	/* Shared with the workers: items running per calling thread, and
	 * whether two calls' items ever ran at once. */
	struct overlap {
		_Atomic int	 active[NTHREADS];
		_Atomic int	 mixed;
	}		*ov;
};

static struct threads	 th;

/* One item of thread *in: says it started, waits for its release. */
static int
held_item(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int	 t, u;
	pid_t	 pid = getpid();
	char	 c = 'S';

	memcpy(&t, in, sizeof(t));
	atomic_fetch_add(&th.ov->active[t], 1);
	for (u = 0; u < NTHREADS; u++)
		if (u != t && atomic_load(&th.ov->active[u]) > 0)
			atomic_store(&th.ov->mixed, 1);
	if (write(th.started[1], &c, 1) != 1 || read(th.release[0], &c, 1) != 1)
		return 98;
	atomic_fetch_sub(&th.ov->active[t], 1);
	return gp_ctx_reply(ctx, &pid, sizeof(pid));
}

static void
threads_setup(void)
{
	int	 t, i;

	ck_assert_int_eq(pipe(th.started), 0);
	ck_assert_int_eq(pipe(th.release), 0);
	th.ov = mmap(NULL, sizeof(*th.ov), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert(th.ov != MAP_FAILED);
	ck_assert_int_eq(pthread_barrier_init(&th.bar, NULL, NTHREADS), 0);
	ck_assert_int_eq(sem_init(&th.returned, 0, 0), 0);
	for (t = 0; t < NTHREADS; t++) {
		th.tag[t] = t;
		th.rc[t] = 1;	/* not returned */
		for (i = 0; i < THREAD_ITEMS; i++) {
			th.it[t][i].in = &th.tag[t];
			th.it[t][i].inlen = sizeof(int);
		}
	}
}

/* Let one held item go on. */
static void
release_one(void)
{
	char	 c;

	ck_assert_int_eq(read(th.started[0], &c, 1), 1);
	ck_assert_int_eq(c, 'S');
	ck_assert_int_eq(write(th.release[1], "R", 1), 1);
}

static void *
map_thread(void *arg)
{
	int	 t = *(int *)arg;

	pthread_barrier_wait(&th.bar);
	th.rc[t] = gp_pool_map(th.p, held_item, NULL, 0, th.it[t], 1);
	sem_post(&th.returned);
	return NULL;
}

/* Threads that call gp_pool_map() on one pool at once: exactly one call
 * proceeds, every other returns -EBUSY at once and runs nothing. The
 * winner's item is held until all the others have returned, so the
 * calls overlap; two winners would leave one -EBUSY short and hang. */
START_TEST(concurrent_maps_on_one_pool_one_proceeds)
{
	pthread_t	 tid[NTHREADS];
	int		 t, busy = 0, win = -1;

	threads_setup();
	th.p = make_pool(1, 1);
	for (t = 0; t < NTHREADS; t++)
		ck_assert_int_eq(pthread_create(&tid[t], NULL, map_thread,
		    &th.tag[t]), 0);
	for (t = 0; t < NTHREADS - 1; t++)
		ck_assert_int_eq(sem_wait(&th.returned), 0);
	for (t = 0; t < NTHREADS; t++) {
		if (th.rc[t] == -EBUSY) {
			busy++;
			ck_assert_int_eq(th.it[t][0].status, GP_NOTRUN);
			ck_assert_int_eq(th.it[t][0].attempts, 0);
		} else
			win = t;
	}
	ck_assert_int_eq(busy, NTHREADS - 1);
	ck_assert_int_eq(th.rc[win], 1);	/* still running */
	release_one();
	for (t = 0; t < NTHREADS; t++)
		ck_assert_int_eq(pthread_join(tid[t], NULL), 0);
	ck_assert_int_eq(th.rc[win], 0);
	ck_assert_int_eq(th.it[win][0].status, GP_OK);
	gp_items_release(th.it[win], 1);
	/* The pool is idle again: the next call proceeds. */
	ck_assert_int_eq(gp_pool_map(th.p, held_item, NULL, 0, th.it[0], 0),
	    0);
	gp_pool_destroy(th.p);
}
END_TEST

static void *
pool_map_thread(void *arg)
{
	int	 t = *(int *)arg, i, notrun = 0;

	pthread_barrier_wait(&th.bar);
	th.rc[t] = pool_map(held_item, th.it[t], THREAD_ITEMS);
	for (i = 0; i < THREAD_ITEMS; i++)
		notrun += th.it[t][i].attempts == 0;
	/* Items that will never start: 'X' each, so the releaser does not
	 * wait for them (a refused call must fail the test, not hang it). */
	while (notrun-- > 0)
		(void)!write(th.started[1], "X", 1);
	return NULL;
}

/* pool_map() from several threads at once, as gpupool.h says: every call
 * succeeds, on the one default pool (two workers: no item sees a third
 * pid), and each map runs whole, in turn: no two calls' items ever run
 * at the same time. */
START_TEST(pool_map_from_threads_runs_each_map_whole)
{
	pthread_t	 tid[NTHREADS];
	pid_t		 pids[3] = { 0 }, pid;
	int		 t, i, k, npids = 0, left = NTHREADS * THREAD_ITEMS;
	char		 c;

	threads_setup();
	setenv("GPUPOOL_FAKE_GPUS", "2", 1);
	/* Create the default pool while this process has one thread. */
	ck_assert_int_eq(pool_map(held_item, NULL, 0), 0);
	for (t = 0; t < NTHREADS; t++)
		ck_assert_int_eq(pthread_create(&tid[t], NULL,
		    pool_map_thread, &th.tag[t]), 0);
	while (left-- > 0) {
		ck_assert_int_eq(read(th.started[0], &c, 1), 1);
		if (c == 'S')
			ck_assert_int_eq(write(th.release[1], "R", 1), 1);
	}
	for (t = 0; t < NTHREADS; t++)
		ck_assert_int_eq(pthread_join(tid[t], NULL), 0);
	for (t = 0; t < NTHREADS; t++) {
		ck_assert_int_eq(th.rc[t], 0);
		for (i = 0; i < THREAD_ITEMS; i++) {
			ck_assert_int_eq(th.it[t][i].status, GP_OK);
			memcpy(&pid, th.it[t][i].out, sizeof(pid));
			for (k = 0; k < npids && pids[k] != pid; k++)
				;
			ck_assert_int_lt(k, 2);
			if (k == npids)
				pids[npids++] = pid;
		}
		gp_items_release(th.it[t], THREAD_ITEMS);
	}
	ck_assert_int_eq(atomic_load(&th.ov->mixed), 0);
	gp_default_pool_destroy();
	unsetenv("GPUPOOL_FAKE_GPUS");
}
END_TEST

/* fn that maps in turn, on the worker's own default pool: the worker
 * was forked while pool_map() held the default pool's lock. */
static int
nested_pool_map(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int		 v = 21, r;
	struct gp_item	 one = { .in = &v, .inlen = sizeof(v) };

	if (pool_map(twice, &one, 1) != 0 || one.status != GP_OK)
		return 97;
	memcpy(&r, one.out, sizeof(r));
	gp_items_release(&one, 1);
	gp_default_pool_destroy();
	return gp_ctx_reply(ctx, &r, sizeof(r));
}

/* A worker of the default pool is a child forked under its lock: in it,
 * pool_map() starts a fresh lock (and pool) instead of waiting forever
 * for a thread it does not have. */
START_TEST(pool_map_in_a_worker_of_the_default_pool)
{
	int		 v = 0, r;
	struct gp_item	 one = { .in = &v, .inlen = sizeof(v) };

	setenv("GPUPOOL_FAKE_GPUS", "1", 1);
	ck_assert_int_eq(pool_map(nested_pool_map, &one, 1), 0);
	ck_assert_int_eq(one.status, GP_OK);
	memcpy(&r, one.out, sizeof(r));
	ck_assert_int_eq(r, 42);
	gp_items_release(&one, 1);
	gp_default_pool_destroy();
	unsetenv("GPUPOOL_FAKE_GPUS");
}
END_TEST

/* Fork rules: in a child the application forks, the inherited pool is a
 * copy: maps return -ECHILD, size and info read the copy, and destroy only
 * closes the child's descriptors: the parent's workers live on and serve
 * the parent's next map. */
START_TEST(forked_child_cannot_use_or_stop_the_pool)
{
	struct gp_pool		*p = make_pool(2, 1);
	struct gp_worker_info	 before[2], after;
	struct gp_item		 it[4];
	struct gp_feed		 f = { .next = count_next,
				       .done = test_feed_done, .in_fd = -1,
				       .ctl_fd = -1 };
	int			 v[4] = { 1, 2, 3, 4 }, i, st, calls = 0;
	pid_t			 pid;

	f.arg = &calls;
	for (i = 0; i < 2; i++)
		ck_assert_int_eq(gp_pool_info(p, i, &before[i]), 0);
	for (i = 0; i < 4; i++)
		gp_item_init(&it[i], &v[i], sizeof(v[i]));
	if ((pid = fork()) == 0) {
		int	 bad = 0;

		bad |= gp_pool_map(p, twice, NULL, 0, it, 4) != -ECHILD;
		bad |= (gp_pool_run(p, twice, NULL, 0, &f) != -ECHILD) << 1;
		bad |= (calls != 0) << 2;
		bad |= (gp_pool_size(p) != 2) << 3;
		bad |= (gp_pool_info(p, 1, &after) != 0 ||
		    after.pid != before[1].pid) << 4;
		gp_pool_destroy(p);
		_exit(bad);
	}
	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	    "child: status %#x", st);
	ck_assert_int_eq(gp_pool_map(p, twice, NULL, 0, it, 4), 0);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(it[i].status, GP_OK);
	for (i = 0; i < 2; i++) {
		ck_assert_int_eq(gp_pool_info(p, i, &after), 0);
		ck_assert_int_eq(after.pid, before[i].pid);
	}
	gp_items_release(it, 4);
	gp_pool_destroy(p);
}
END_TEST

/*
 * The fork hook: the parent's phases are logged here, in order; each
 * worker writes, from its GP_FORK_CHILD call, its pid and how many parent
 * phases its copy of the log held at the fork (odd: BEFORE, not yet
 * PARENT) to a pipe it inherited.
 */
struct hook_rec {
	pid_t	 pid;
	int	 nlog;
};
static char	 hook_log[16];
static int	 hook_nlog, hook_fd = -1;

static void
hook(int phase, void *arg)
{
	struct hook_rec	 r;

	ck_assert_ptr_eq(arg, &hook_nlog);
	if (phase == GP_FORK_CHILD) {
		r.pid = getpid();
		r.nlog = hook_nlog;
		(void)write(hook_fd, &r, sizeof(r));
		return;
	}
	if (hook_nlog < (int)sizeof(hook_log))
		hook_log[hook_nlog++] = phase == GP_FORK_BEFORE ? 'B' :
		    phase == GP_FORK_PARENT ? 'P' : '?';
}

/* Item 0 kills its worker; the others double. */
static int
crash_on_zero(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int	 x;

	memcpy(&x, in, sizeof(x));
	if (x == 0)
		_exit(7);
	return twice(ctx, in, len, arg);
}

START_TEST(fork_hook_wraps_every_worker_fork)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 2, .fork_hook = hook,
				    .fork_arg = &hook_nlog };
	struct gp_worker_info	 wi;
	struct hook_rec		 r[4];
	struct gp_item		*it;
	int			 fds[2], vals[40], i, pid0, pid1;

	ck_assert_int_eq(pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
	hook_fd = fds[1];
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	/* Each worker wrote before it reported ready. */
	ck_assert_int_eq(read(fds[0], r, sizeof(r)), 2 * sizeof(r[0]));
	ck_assert_int_eq(hook_nlog, 4);
	ck_assert_int_eq(memcmp(hook_log, "BPBP", 4), 0);
	ck_assert_int_eq(gp_pool_info(p, 0, &wi), 0);
	pid0 = wi.pid;
	ck_assert_int_eq(gp_pool_info(p, 1, &wi), 0);
	pid1 = wi.pid;
	/* The workers wrote in either order. */
	if (r[0].nlog == 3) {
		r[2] = r[0];
		r[0] = r[1];
		r[1] = r[2];
	}
	ck_assert_int_eq(r[0].pid, pid0);
	ck_assert_int_eq(r[0].nlog, 1);
	ck_assert_int_eq(r[1].pid, pid1);
	ck_assert_int_eq(r[1].nlog, 3);

	/* A crash during a map: its replacement is forked inside the map,
	 * with the hook. */
	it = int_items(vals, 40);
	ck_assert_int_eq(gp_pool_map(p, crash_on_zero, NULL, 0, it, 40), 0);
	ck_assert_int_eq(it[0].status, GP_CRASHED);
	ck_assert_int_eq(it[0].code, 7);
	for (i = 1; i < 40; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		ck_assert_int_eq(*(int *)it[i].out, 2 * i);
	}
	ck_assert_int_eq(hook_nlog, 6);
	ck_assert_int_eq(memcmp(hook_log, "BPBPBP", 6), 0);
	/* The replacement may not have run yet when the map ends (the other
	 * worker can take every item): wait for its record. */
	ck_assert_int_eq(fcntl(fds[0], F_SETFL, 0), 0);
	ck_assert_int_eq(read(fds[0], r, sizeof(r[0])), sizeof(r[0]));
	ck_assert_int_eq(r[0].nlog, 5);
	ck_assert_int_eq(gp_pool_info(p, it[0].worker, &wi), 0);
	ck_assert_int_eq(r[0].pid, wi.pid);
	ck_assert_int_ne(wi.pid, it[0].worker == 0 ? pid0 : pid1);
	gp_items_release(it, 40);
	free(it);
	gp_pool_destroy(p);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("pool");
	TCase	*tc = tcase_create("threads");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, forked_child_cannot_use_or_stop_the_pool);
	tcase_add_test(tc, concurrent_maps_on_one_pool_one_proceeds);
	tcase_add_test(tc, pool_map_from_threads_runs_each_map_whole);
	tcase_add_test(tc, pool_map_in_a_worker_of_the_default_pool);
	tcase_add_test(tc, fork_hook_wraps_every_worker_fork);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
