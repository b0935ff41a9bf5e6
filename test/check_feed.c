/*
 * check_feed.c: gp_pool_run()'s feeds on fake GPUs: items streamed from a
 * pipe, workers recycled after max_tasks, an item whose worker is killed
 * from outside never rerun, gated items started in order.
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
 * gp_pool_run: items arrive through a pipe from another process, ten at a
 * time, and the writer goes on only once the pool has run the ten it has:
 * the byte on go, written by next() when it finds the pipe empty with
 * every item given so far done. So the pool must run items as they arrive
 * (the writer never reaches EOF otherwise), and twice it hears "not yet"
 * with nothing running, when only in_fd can wake it. Decided by what the
 * pool did, not by how fast the writer runs: the same on a busy machine.
 */
struct stream {
	int		 fd;
	int		 go;		/* write end: a byte per ten done */
	int		 ngo;		/* bytes written on go */
	int		 nagain;	/* next() said "not yet" */
	char		 line[64];
	size_t		 len;
	struct gp_item	 items[30];
	int		 nitems, ndone, order[30];
	int		 eof;
};

static int
stream_next(void *arg, struct gp_item **item)
{
	struct stream	*s = arg;
	ssize_t		 r;
	char		 c;

	for (;;) {
		r = read(s->fd, &c, 1);
		if (r == 0)
			return -1;
		if (r < 0 && errno == EAGAIN) {
			s->nagain++;
			/* The writer waits for us: all its items ran. */
			if (s->ndone == s->nitems &&
			    s->nitems == 10 * (s->ngo + 1) && s->ngo < 2) {
				if (write(s->go, "", 1) != 1)
					return -1;
				s->ngo++;
			}
		}
		if (r < 0)
			return errno == EAGAIN ? 0 : -1;
		if (c != '\n') {
			s->line[s->len++] = c;
			continue;
		}
		s->line[s->len] = '\0';
		struct gp_item *it = &s->items[s->nitems++];
		it->in = strdup(s->line);
		it->inlen = s->len + 1;
		s->len = 0;
		*item = it;
		return 1;
	}
}

static int
stream_done(void *arg, struct gp_item *item)
{
	struct stream	*s = arg;

	s->order[s->ndone++] = (int)(item - s->items);
	return 0;
}

START_TEST(run_streams_from_a_pipe)
{
	struct gp_pool	*p = make_pool(2, 1);
	struct stream	 s = { 0 };
	struct gp_feed	 f = { .next = stream_next, .done = stream_done,
			       .in_fd = -1, .arg = &s, .ctl_fd = -1 };
	int		 fds[2], go[2], i, st;
	pid_t		 pid;
	char		 buf[32];

	ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(go, O_CLOEXEC), 0);
	if ((pid = fork()) == 0) {
		close(go[1]);
		for (i = 0; i < 30; i++) {
			snprintf(buf, sizeof(buf), "item %d\n", i);
			if (write(fds[1], buf, strlen(buf)) < 0)
				_exit(1);
			if (i % 10 == 9 && i < 29 && read(go[0], buf, 1) != 1)
				_exit(1);
		}
		_exit(0);
	}
	close(fds[1]);
	close(go[0]);
	s.go = go[1];
	fcntl(fds[0], F_SETFL, O_NONBLOCK);
	s.fd = f.in_fd = fds[0];
	ck_assert_int_eq(gp_pool_run(p, echo_rev, NULL, 0, &f), 0);
	ck_assert_int_eq(s.nitems, 30);
	ck_assert_int_eq(s.ndone, 30);
	for (i = 0; i < 30; i++) {
		ck_assert_int_eq(s.items[i].status, GP_OK);
		ck_assert_uint_eq(s.items[i].outlen, s.items[i].inlen);
		free((void *)s.items[i].in);
		free(s.items[i].out);
	}
	/* Twice the pool waited on in_fd alone and woke for the next ten. */
	ck_assert_int_eq(s.ngo, 2);
	/* It asks again only after a poll turn woken by a result (30 at
	 * most, one item per dispatch) or by the writer (30 lines and EOF),
	 * not in a busy loop. */
	ck_assert_int_le(s.nagain, 30 + 31 + 1);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "writer: %#x", st);
	close(fds[0]);
	close(go[1]);
	gp_pool_destroy(p);
}
END_TEST

static int
whoami(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	pid_t	 pid = getpid();

	return gp_ctx_reply(ctx, &pid, sizeof(pid));
}

START_TEST(recycle_after_max_tasks)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 2, .max_tasks = 10,
				       .respawn_max = -1 };
	struct gp_item		 it[200];
	pid_t			 pid[200];
	int			 i, j, same;

	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	memset(it, 0, sizeof(it));
	ck_assert_int_eq(gp_pool_map(p, whoami, NULL, 0, it, 200), 0);
	for (i = 0; i < 200; i++) {
		ck_assert_int_eq(it[i].status, GP_OK);
		memcpy(&pid[i], it[i].out, sizeof(pid_t));
	}
	/* No process ran more than 10 items. */
	for (i = 0; i < 200; i++) {
		for (j = 0, same = 0; j < 200; j++)
			same += pid[j] == pid[i];
		ck_assert_int_le(same, 10);
	}
	gp_items_release(it, 200);
	gp_pool_destroy(p);
}
END_TEST

/*
 * A worker SIGKILLed from outside while its item runs (what Pool.terminate()
 * in Python does): with retries 0 that item ends GP_CRASHED, 128 + 9, after
 * one attempt and never starts again; the items behind it (in its batch,
 * dispatched and never begun, or not yet sent) run once, on the replacement.
 * Shared counters (MAP_SHARED, made before the pool) count each item's
 * starts in every worker; the blocked item tells its pid through a pipe and
 * then reads a pipe nobody writes to; a thread kills that pid. No timing.
 */
#define KILLED_N	401
#define KILLED_K	1	/* item 0 is a batch alone (no estimate yet);
				   item 1 heads the next, with others behind */

struct killed {
	_Atomic int	 starts[KILLED_N];
	int		 report[2];	/* the blocked item's pid, once */
	int		 never[2];	/* read by the blocked item */
};

static struct killed	*killed;

static int
started_then_blocks(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	int	 i;
	pid_t	 me = getpid();
	char	 c;

	(void)ctx;
	(void)arg;
	if (len != sizeof(i))
		return 99;
	memcpy(&i, in, sizeof(i));
	if (atomic_fetch_add(&killed->starts[i], 1) == 0 && i == KILLED_K) {
		if (write(killed->report[1], &me, sizeof(me)) != sizeof(me))
			return 98;
		while (read(killed->never[0], &c, 1) != 0)
			;
		return 97;	/* not reached: nobody writes or closes */
	}
	return 0;
}

static void *
kill_reported(void *unused)
{
	pid_t	 pid;

	(void)unused;
	ck_assert_int_eq(read(killed->report[0], &pid, sizeof(pid)),
	    sizeof(pid));
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	return NULL;
}

static void
started_item_killed_from_outside(int per_gpu, int feed)
{
	struct test_feed	 af = { 0 };
	struct gp_feed		 fd = { .next = test_feed_next,
				       .done = test_feed_done, .in_fd = -1,
				       .ctl_fd = -1, .arg = &af };
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 1, .retries = 0 };
	struct gp_item		*it;
	pthread_t		 killer;
	int			 vals[KILLED_N], i;

	killed = mmap(NULL, sizeof(*killed), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(killed, MAP_FAILED);
	memset(killed, 0, sizeof(*killed));
	ck_assert_int_eq(pipe2(killed->report, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(killed->never, O_CLOEXEC), 0);
	o.per_gpu = per_gpu;
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	it = int_items(vals, KILLED_N);
	ck_assert_int_eq(pthread_create(&killer, NULL, kill_reported, NULL),
	    0);
	af.it = it;
	af.n = KILLED_N;
	if (feed)
		ck_assert_int_eq(gp_pool_run(p, started_then_blocks, NULL, 0,
		    &fd), 0);
	else
		ck_assert_int_eq(gp_pool_map(p, started_then_blocks, NULL, 0,
		    it, KILLED_N), 0);
	ck_assert_int_eq(pthread_join(killer, NULL), 0);
	ck_assert_int_eq(it[KILLED_K].status, GP_CRASHED);
	ck_assert_int_eq(it[KILLED_K].code, 128 + SIGKILL);
	ck_assert_int_eq(it[KILLED_K].attempts, 1);
	ck_assert_int_eq(atomic_load(&killed->starts[KILLED_K]), 1);
	for (i = 0; i < KILLED_N; i++) {
		if (i == KILLED_K)
			continue;
		ck_assert_msg(it[i].status == GP_OK && it[i].code == 0,
		    "item %d: status %d code %d", i, it[i].status,
		    it[i].code);
		ck_assert_int_eq(it[i].attempts, 1);
		ck_assert_int_eq(atomic_load(&killed->starts[i]), 1);
	}
	gp_items_release(it, KILLED_N);
	gp_pool_destroy(p);
	close(killed->report[0]);
	close(killed->report[1]);
	close(killed->never[0]);
	close(killed->never[1]);
	munmap(killed, sizeof(*killed));
	free(it);
}

START_TEST(started_item_killed_from_outside_is_not_rerun)
{
	started_item_killed_from_outside(1, 0);	/* items in its batch */
	started_item_killed_from_outside(3, 0);	/* and on other workers */
	started_item_killed_from_outside(1, 1);	/* a feed: batches of 1 */
	started_item_killed_from_outside(3, 1);
}
END_TEST

/*
 * Invariant 30: gated items start in order. Four fake GPUs; item 0 needs
 * one GPU and runs 0.5 s, item 1 needs all four, items 2 to 7 one each.
 * Item 1 cannot start while item 0 runs, and the 1-GPU items behind it
 * must wait too (with any skipping they would take the three idle GPUs
 * at once, and a stream of them could starve item 1 for ever): item 1
 * starts second, after item 0 ended, and the rest after item 1 ended.
 */
struct order_rec {
	unsigned	 seq;		/* this item's place among the starts */
	int64_t		 start, end;	/* CLOCK_MONOTONIC, ns */
};

static unsigned	*order_seq;

static int64_t
mono_ns(void)
{
	struct timespec	 ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int
record_order(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	struct order_rec	 r;
	int			 x;

	memcpy(&x, in, sizeof(x));
	r.seq = __atomic_fetch_add(order_seq, 1, __ATOMIC_SEQ_CST);
	r.start = mono_ns();
	usleep(x == 0 ? 500000 : 20000);
	r.end = mono_ns();
	return gp_ctx_reply(ctx, &r, sizeof(r));
}

static void
order_need(void *arg, const struct gp_item *item, struct gp_need *need)
{
	need->gpus = item == &((struct test_feed *)arg)->it[1] ? 4 : 1;
}

START_TEST(gated_head_item_holds_back_the_rest)
{
	struct gp_pool		*p;
	struct gp_pool_opts	 o = { .fake_gpus = 4 };
	struct gp_item		 it[8];
	struct test_feed	 f = { .it = it, .n = 8 };
	struct gp_feed		 feed = { .next = test_feed_next,
				  .done = test_feed_done, .need = order_need,
				  .in_fd = -1, .ctl_fd = -1, .arg = &f };
	struct order_rec	 r[8];
	int			 v[8], i;

	order_seq = mmap(NULL, sizeof(*order_seq), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(order_seq, MAP_FAILED);
	*order_seq = 0;
	memset(it, 0, sizeof(it));
	for (i = 0; i < 8; i++) {
		v[i] = i;
		it[i].in = &v[i];
		it[i].inlen = sizeof(int);
	}
	ck_assert_int_eq(gp_pool_create(&p, &o), 0);
	ck_assert_int_eq(gp_pool_run(p, record_order, NULL, 0, &feed), 0);
	ck_assert_int_eq(f.done, 8);
	for (i = 0; i < 8; i++) {
		ck_assert_msg(it[i].status == GP_OK, "item %d: status %d code "
		    "%d", i, it[i].status, it[i].code);
		ck_assert_uint_eq(it[i].outlen, sizeof(r[i]));
		memcpy(&r[i], it[i].out, sizeof(r[i]));
	}
	/* The 1-GPU items after it run side by side, so they may start in
	 * any order among themselves; none may start before item 1 ends. */
	ck_assert_uint_eq(r[0].seq, 0);
	ck_assert_uint_eq(r[1].seq, 1);
	ck_assert_msg(r[1].start >= r[0].end, "the 4-GPU item started "
	    "while item 0 held a GPU");
	for (i = 2; i < 8; i++)
		ck_assert_msg(r[i].start >= r[1].end, "item %d started %.3f s "
		    "before the 4-GPU head item ended: the head did not hold "
		    "back the rest", i, (double)(r[1].end - r[i].start) / 1e9);
	gp_items_release(it, 8);
	gp_pool_destroy(p);
	munmap(order_seq, sizeof(*order_seq));
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("pool");
	TCase	*tc = tcase_create("feed");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, run_streams_from_a_pipe);
	tcase_add_test(tc, recycle_after_max_tasks);
	tcase_add_test(tc, gated_head_item_holds_back_the_rest);
	tcase_add_test(tc, started_item_killed_from_outside_is_not_rerun);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
