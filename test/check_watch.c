/*
 * check_watch.c: the pool on shared GPUs (watch.c), end to end with real
 * workers: busy GPUs left out or waited for, a GPU taken mid-run, memory
 * packing, items holding several GPUs, workers owning near GPUs, GPU
 * figures per item, and no NVML at all. The machine is a fake
 * libnvidia-ml.so.1 (fake_nvml.c, through GPUPOOL_NVML) reading the state
 * file each test writes and rewrites; fake GPU i is its NVML device i.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

#include "gpupool.h"
#include "check_main.h"
#include "fake_seen.h"

#define GIB	(1ull << 30)

/* The DGX-2's 16 GPUs (test/fixtures/README.md): 0-7 on socket 0. */
static const char dgx2_bus[] = "0000:34:00.0,0000:36:00.0,0000:39:00.0,"
    "0000:3b:00.0,0000:57:00.0,0000:59:00.0,0000:5c:00.0,0000:5e:00.0,"
    "0000:b7:00.0,0000:b9:00.0,0000:bc:00.0,0000:be:00.0,0000:e0:00.0,"
    "0000:e2:00.0,0000:e5:00.0,0000:e7:00.0";

static char	 state[64], seen[80];

/* Write the fake machine: the file is replaced whole (temporary, then
 * rename), as a monitor mid-read must never see half of it. */
static void
machine(const char *text)
{
	char	 tmp[80];
	FILE	*f;

	if (state[0] == '\0') {
		snprintf(state, sizeof(state), "/tmp/gp_watch.%d", (int)getpid());
		ck_assert_int_eq(setenv("GP_FAKE_NVML", state, 1), 0);
		snprintf(seen, sizeof(seen), "%s.seen", state);
		ck_assert_int_eq(setenv("GP_FAKE_NVML_SEEN", seen, 1), 0);
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", state);
	ck_assert_ptr_nonnull(f = fopen(tmp, "w"));
	ck_assert_int_ge(fputs(text, f), 0);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(rename(tmp, state), 0);
}

static void
teardown(void)
{
	if (state[0] != '\0') {
		unlink(state);
		unlink(seen);
	}
}

/* Until n snapshots have read the state marked mark, at most 60 s
 * (fake_seen.h says what the second and third mean). */
static void
wait_seen(const char *mark, int n)
{
	int	 i;

	for (i = 0; fake_seen(seen, mark) < n && i < 6000; i++)
		poll(NULL, 0, 10);
}

/* What each item reports: when it ran, where, on which GPUs. */
struct span {
	int64_t		 t0, t1;	/* CLOCK_REALTIME ns */
	int		 worker;
	char		 visible[128];
};

static int64_t
now_ns(void)
{
	struct timespec	 ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* An item: sleep *in ms; with a second int, first add a compute process
 * of its own (this worker) using that many MiB to the fake machine's
 * GPU 0, at 40 % SM, and take it away after; with a third (N), instead
 * of sleeping, wait until the master has two snapshots of that state
 * (marked uN) asked for since the item started. */
static int
sleeper(struct gp_ctx *ctx, const void *in, size_t inlen, void *arg)
{
	const int	*v = in;
	struct span	 s;
	char		 text[256], mark[16];

	memset(&s, 0, sizeof(s));
	s.t0 = now_ns();
	snprintf(mark, sizeof(mark), "u%d", inlen >= 3 * sizeof(int) ?
	    v[2] : 0);
	if (inlen >= 2 * sizeof(int)) {
		snprintf(text, sizeof(text), "mark %s\ngpu - - 8G 0 10\n"
		    "proc 0 %d %dM 40\n", mark, (int)getpid(), v[1]);
		machine(text);
	}
	if (inlen >= 3 * sizeof(int))
		wait_seen(mark, 3);
	else
		poll(NULL, 0, v[0]);
	if (inlen >= 2 * sizeof(int))
		machine("gpu - - 8G 0 10\n");
	s.t1 = now_ns();
	s.worker = gp_ctx_info(ctx)->worker;
	snprintf(s.visible, sizeof(s.visible), "%s", gp_ctx_item_visible(ctx));
	return gp_ctx_reply(ctx, &s, sizeof(s));
}

/* A feed over an array of items, each with a need; done() keeps what it
 * hears and may call a hook. */
struct arr {
	struct gp_item	*it;
	struct gp_need	*need;
	int		 n, next, ndone;
	struct gp_pool	*pool;
	void		(*hook)(struct arr *, struct gp_item *);
	int64_t		 seen;		/* hook: when it saw what it waits for */
	int		 flag;
	int		 seen_next;	/* items handed out by then */
	gp_fn		*fn;		/* NULL: sleeper */
};

static int
arr_next(void *arg, struct gp_item **item)
{
	struct arr	*a = arg;

	/* With the hook's event seen, a few more, then the end. */
	if (a->next == a->n || (a->seen > 0 && a->next >= a->seen_next + 20))
		return GP_FEED_END;
	*item = &a->it[a->next++];
	return GP_FEED_ITEM;
}

static int
arr_done(void *arg, struct gp_item *item)
{
	struct arr	*a = arg;

	a->ndone++;
	if (a->hook != NULL)
		a->hook(a, item);
	return 0;
}

static void
arr_need(void *arg, const struct gp_item *item, struct gp_need *need)
{
	struct arr	*a = arg;

	*need = a->need[item - a->it];
}

static void
run_arr(struct gp_pool *p, struct arr *a, int ctl_fd, int (*ctl)(void *))
{
	struct gp_feed	 f;
	int		 i;

	memset(&f, 0, sizeof(f));
	f.next = arr_next;
	f.done = arr_done;
	f.need = a->need != NULL ? arr_need : NULL;
	f.in_fd = -1;
	f.ctl_fd = ctl_fd;
	f.ctl = ctl;
	f.arg = a;
	a->pool = p;
	ck_assert_int_eq(gp_pool_run(p, a->fn != NULL ? a->fn : sleeper, NULL,
	    0, &f), 0);
	ck_assert_int_eq(a->ndone, a->next);
	for (i = 0; i < a->next; i++)
		ck_assert_msg(a->it[i].status == GP_OK, "item %d: status %d "
		    "code %d", i, a->it[i].status, a->it[i].code);
}

static const struct span *
span_of(const struct gp_item *it)
{
	ck_assert_uint_eq(it->outlen, sizeof(struct span));
	return it->out;
}

/* Whether visible lists ("fake0,fake2") name a GPU in common. */
static int
share_gpu(const char *a, const char *b)
{
	char	 x[128], *s, *save = NULL;
	size_t	 n;

	snprintf(x, sizeof(x), "%s", a);
	for (s = strtok_r(x, ",", &save); s != NULL;
	    s = strtok_r(NULL, ",", &save)) {
		n = strlen(s);
		for (const char *q = b; (q = strstr(q, s)) != NULL; q += n)
			if ((q == b || q[-1] == ',') &&
			    (q[n] == ',' || q[n] == '\0'))
				return 1;
	}
	return 0;
}

static int
count_gpus(const char *v)
{
	int	 n = 1;

	for (; *v != '\0'; v++)
		n += *v == ',';
	return n;
}

static struct gp_pool *
pool_with(struct gp_pool_opts *o)
{
	struct gp_pool	*p;
	char		 err[512];

	o->errbuf = err;
	o->errlen = sizeof(err);
	ck_assert_msg(gp_pool_create(&p, o) == 0, "create: %s", err);
	return p;
}

/* gpus_per_worker on the DGX-2: each worker owns GPUs of one socket
 * (one NVLink baseboard), its CUDA_VISIBLE_DEVICES lists them. */
START_TEST(workers_own_near_gpus)
{
	struct gp_pool_opts	 o = { 0 };
	struct gp_worker_info	 wi;
	struct gp_pool		*p;
	char			 err[256], *s;
	int			 k = _i ? 4 : 2, w, g, lo;

	o.fake_gpus = 16;
	o.fake_busids = dgx2_bus;
	o.topology_xml = GP_FIXTURES "/nvidiaDGX2.xml";
	o.gpus_per_worker = k;
	o.flags = GP_POOL_PLAN_ONLY;
	p = pool_with(&o);
	ck_assert_int_eq(gp_pool_size(p), 16 / k);
	ck_assert_int_eq(gp_pool_gpus(p), 16);
	for (w = 0; w < gp_pool_size(p); w++) {
		ck_assert_int_eq(gp_pool_info(p, w, &wi), 0);
		ck_assert_int_eq(wi.ngpus, k);
		ck_assert_int_eq(count_gpus(wi.visible), k);
		lo = -1;
		for (s = wi.visible; (s = strstr(s, "fake")) != NULL; s += 4) {
			g = atoi(s + 4);
			if (lo < 0)
				lo = g / 8;
			ck_assert_msg(g / 8 == lo, "worker %d: %s spans both "
			    "sockets", w, wi.visible);
		}
	}
	gp_pool_destroy(p);

	/* 16 by 3: five workers, one GPU over; more than there are: no. */
	o.gpus_per_worker = 3;
	p = pool_with(&o);
	ck_assert_int_eq(gp_pool_size(p), 5);
	gp_pool_destroy(p);
	o.gpus_per_worker = 17;
	o.errbuf = err;
	o.errlen = sizeof(err);
	ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
	ck_assert_msg(strstr(err, "17 GPUs per worker") != NULL, "%s", err);
}
END_TEST

/* Items needing 2 or 4 GPUs among 1-GPU ones (per_gpu 2): each gets that
 * many GPUs, none of which is in another running item; none is starved;
 * one needing more GPUs than the pool has fails alone. */
START_TEST(multi_gpu_items_hold_their_gpus_alone)
{
	struct gp_pool_opts	 o = { .fake_gpus = 4, .per_gpu = 2 };
	struct gp_item		 it[31];
	struct gp_need		 need[31];
	int			 v[31], i, j, want;
	struct arr		 a = { .it = it, .need = need, .n = 31 };
	const struct span	*x, *y;
	struct gp_pool		*p = pool_with(&o);

	memset(need, 0, sizeof(need));
	for (i = 0; i < 30; i++) {
		v[i] = 20 + i % 3 * 10;
		gp_item_init(&it[i], &v[i], sizeof(int));
		need[i].gpus = i % 10 == 9 ? 4 : i % 3 == 1 ? 2 : 0;
	}
	v[30] = 1;
	gp_item_init(&it[30], &v[30], sizeof(int));
	need[30].gpus = 5;
	a.n = 30;
	run_arr(p, &a, -1, NULL);
	for (i = 0; i < 30; i++) {
		x = span_of(&it[i]);
		want = need[i].gpus ? need[i].gpus : 1;
		ck_assert_msg(count_gpus(x->visible) == want, "item %d: '%s', "
		    "wanted %d GPUs", i, x->visible, want);
		for (j = 0; j < 30; j++) {
			y = span_of(&it[j]);
			if (j == i || want == 1 || x->t1 <= y->t0 ||
			    y->t1 <= x->t0)
				continue;
			ck_assert_msg(!share_gpu(x->visible, y->visible),
			    "items %d (%s) and %d (%s) overlap on a GPU", i,
			    x->visible, j, y->visible);
		}
	}
	gp_items_release(it, 30);
	/* Five GPUs of four: that item alone fails, -E2BIG. */
	a.it = &it[29];
	a.need = &need[29];
	a.n = 2;
	a.next = a.ndone = 0;
	{
		struct gp_feed f = { .next = arr_next, .done = arr_done,
		    .need = arr_need, .in_fd = -1, .ctl_fd = -1, .arg = &a };

		ck_assert_int_eq(gp_pool_run(p, sleeper, NULL, 0, &f), 0);
	}
	ck_assert_int_eq(it[29].status, GP_OK);
	ck_assert_int_eq(it[30].status, GP_ERROR);
	ck_assert_int_eq(it[30].code, -E2BIG);
	gp_items_release(it, 31);
	gp_pool_destroy(p);
}
END_TEST

/* Memory packing: 8 GiB GPUs, 4 slots each, items of 3 GiB: never more
 * than two at once on a GPU (the declared needs must fit). */
START_TEST(packing_never_exceeds_the_gpu)
{
	struct gp_pool_opts	 o = { .fake_gpus = 2, .per_gpu = 4 };
	struct gp_item		 it[16];
	int			 v[16], i, j, over;
	struct arr		 a = { .it = it, .n = 16 };
	const struct span	*x, *y;
	struct gp_pool		*p;

	machine("gpu - - 8G 0 0\ngpu - - 8G 0 0\n");
	o.item_mem = 3 * GIB;
	p = pool_with(&o);
	for (i = 0; i < 16; i++) {
		v[i] = 40;
		gp_item_init(&it[i], &v[i], sizeof(int));
	}
	run_arr(p, &a, -1, NULL);
	for (i = 0; i < 16; i++) {
		x = span_of(&it[i]);
		for (j = 0, over = 0; j < 16; j++) {
			y = span_of(&it[j]);
			over += j != i && strcmp(x->visible, y->visible) == 0 &&
			    y->t0 <= x->t0 && x->t0 < y->t1;
		}
		ck_assert_msg(over <= 1, "item %d started beside %d others on "
		    "%s", i, over, x->visible);
	}
	gp_items_release(it, 16);
	gp_pool_destroy(p);
}
END_TEST

/* GPUS_FREE: a GPU with a foreign compute process is left out; with
 * every GPU busy creation fails and says why, unless WAIT_FREE. */
START_TEST(busy_gpus_are_left_out)
{
	struct gp_pool_opts	 o = { .fake_gpus = 2 };
	struct gp_gpu_state	 st;
	struct gp_worker_info	 wi;
	struct gp_pool		*p;
	char			 err[512];

	machine("gpu - - 8G 3G 50\ngpu - - 8G 0 0\nproc 0 1 3G\n");
	o.flags = GP_POOL_GPUS_FREE;
	p = pool_with(&o);
	ck_assert_int_eq(gp_pool_gpus(p), 1);
	ck_assert_int_eq(gp_pool_size(p), 1);
	ck_assert_int_eq(gp_pool_info(p, 0, &wi), 0);
	ck_assert_str_eq(wi.visible, "fake1");
	ck_assert_int_eq(gp_pool_gpu_state(p, 0, &st), 0);
	ck_assert_int_eq(st.busy, 0);
	ck_assert_int_eq(st.known, 1);
	ck_assert_ptr_null(gp_pool_monitor(p));
	gp_pool_destroy(p);

	machine("gpu - - 8G 3G 50\ngpu - - 8G 7G 0\nproc 0 1 3G\n");
	o.errbuf = err;
	o.errlen = sizeof(err);
	ck_assert_int_eq(gp_pool_create(&p, &o), GP_ENOGPU);
	ck_assert_msg(strstr(err, "no free GPU") != NULL &&
	    strstr(err, "pid 1 is not ours") != NULL &&
	    strstr(err, "others use 7.0 of 8.0 GiB") != NULL, "%s", err);
	o.flags |= GP_POOL_WAIT_FREE;
	p = pool_with(&o);
	ck_assert_int_eq(gp_pool_gpus(p), 2);
	ck_assert_int_eq(gp_pool_gpu_state(p, 1, &st), 0);
	ck_assert_int_eq(st.busy, 1);
	ck_assert_uint_eq(st.mem_foreign, 7 * GIB);
	gp_pool_destroy(p);
}
END_TEST

/* busy_util: on the fake NVML, a GPU at 80 % with no process listed
 * (someone in another container) is left out under busy_util 50, and
 * says why; without busy_util it is used. */
START_TEST(busy_util_leaves_out_a_computing_gpu)
{
	struct gp_pool_opts	 o = { .fake_gpus = 2 };
	struct gp_gpu_state	 st;
	struct gp_worker_info	 wi;
	struct gp_pool		*p;
	char			 err[512];

	machine("gpu - - 8G 0 80\ngpu - - 8G 0 5\n");
	o.flags = GP_POOL_GPUS_FREE;
	p = pool_with(&o);
	ck_assert_int_eq(gp_pool_gpus(p), 2);
	gp_pool_destroy(p);
	ck_assert_int_eq(gp_pool_opts_set(&o, "busy_util", "50", NULL, 0), 0);
	p = pool_with(&o);
	ck_assert_int_eq(gp_pool_gpus(p), 1);
	ck_assert_int_eq(gp_pool_info(p, 0, &wi), 0);
	ck_assert_str_eq(wi.visible, "fake1");
	gp_pool_destroy(p);
	o.flags |= GP_POOL_WAIT_FREE;
	p = pool_with(&o);
	ck_assert_int_eq(gp_pool_gpu_state(p, 0, &st), 0);
	ck_assert_int_eq(st.busy, 1);
	ck_assert_str_eq(st.why, "others use 80% of it (over 50%)");
	gp_pool_destroy(p);
	machine("gpu - - 8G 0 80\ngpu - - 8G 0 90\n");
	o.flags &= ~(unsigned)GP_POOL_WAIT_FREE;
	o.errbuf = err;
	o.errlen = sizeof(err);
	ck_assert_int_eq(gp_pool_create(&p, &o), GP_ENOGPU);
	ck_assert_msg(strstr(err, "others use 90% of it (over 50%)") != NULL,
	    "%s", err);
}
END_TEST

/* ctl(), on a timer, while the only item waits: the pool says why; then
 * the foreign process goes, and the item starts after that. */
static int	 waits_seen;
static int64_t	 freed_at;

static int
wait_ctl(void *arg)
{
	struct arr	*a = arg;
	uint64_t	 n;
	char		 why[160];
	int		 fd = a->flag;

	(void)read(fd, &n, sizeof(n));
	if (freed_at == 0 && gp_pool_waiting(a->pool, why, sizeof(why))) {
		ck_assert_msg(strstr(why, "every GPU is busy") != NULL, "%s",
		    why);
		if (++waits_seen == 3) {
			freed_at = now_ns();
			machine("gpu - - 8G 0 0\n");
		}
	}
	return GP_CTL_GO_ON;
}

START_TEST(wait_free_starts_when_the_gpu_frees)
{
	struct gp_pool_opts	 o = { .fake_gpus = 1 };
	struct itimerspec	 ts = { { 0, 50000000 }, { 0, 50000000 } };
	struct gp_item		 it;
	int			 v = 10, tfd;
	struct arr		 a = { .it = &it, .n = 1 };
	struct gp_pool		*p;

	machine("gpu - - 8G 1G 50\nproc 0 1 1G\n");
	o.flags = GP_POOL_GPUS_FREE | GP_POOL_WAIT_FREE;
	p = pool_with(&o);
	gp_item_init(&it, &v, sizeof(v));
	ck_assert_int_ge(tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC |
	    TFD_NONBLOCK), 0);
	ck_assert_int_eq(timerfd_settime(tfd, 0, &ts, NULL), 0);
	a.flag = tfd;
	run_arr(p, &a, tfd, wait_ctl);
	ck_assert_int_eq(waits_seen, 3);
	ck_assert_msg(span_of(&it)->t0 >= freed_at, "the item started "
	    "before its GPU was free");
	ck_assert_int_eq(gp_pool_waiting(p, NULL, 0), 0);
	gp_items_release(&it, 1);
	close(tfd);
	gp_pool_destroy(p);
}
END_TEST

/* A foreign process takes GPU 1 mid-run: once the pool has seen it (a
 * done() sees the GPU busy), at most the item already handed to GPU 1's
 * worker may start there; the others go on on GPU 0. The feed goes on
 * until 20 items after that. */
static void
take_gpu1(struct arr *a, struct gp_item *item)
{
	struct gp_gpu_state	 st;

	(void)item;
	if (a->ndone == 3)
		machine("gpu - - 8G 0 0\ngpu - - 8G 2G 0\nproc 1 1 2G\n");
	if (a->ndone >= 3 && a->seen == 0 &&
	    gp_pool_gpu_state(a->pool, 1, &st) == 0 && st.busy) {
		a->seen = now_ns();
		a->seen_next = a->next;
	}
}

START_TEST(gpu_taken_mid_run_gets_no_new_item)
{
	struct gp_pool_opts	 o = { .fake_gpus = 2 };
	static struct gp_item	 it[1000];
	static int		 v[1000];
	int			 i, late = 0, later = 0;
	struct arr		 a = { .it = it, .n = 1000, .hook = take_gpu1 };
	const struct span	*x;
	struct gp_pool		*p;

	machine("gpu - - 8G 0 0\ngpu - - 8G 0 0\n");
	o.flags = GP_POOL_GPUS_FREE;
	p = pool_with(&o);
	for (i = 0; i < 1000; i++) {
		v[i] = 25;
		gp_item_init(&it[i], &v[i], sizeof(int));
	}
	run_arr(p, &a, -1, NULL);
	ck_assert_msg(a.seen > 0, "the pool never saw GPU 1 taken");
	for (i = 0; i < a.next; i++) {
		x = span_of(&it[i]);
		if (x->t0 <= a.seen)
			continue;
		late += strcmp(x->visible, "fake1") == 0;
		later++;
	}
	ck_assert_msg(late <= 1, "%d items started on the taken GPU after "
	    "the pool saw it taken", late);
	ck_assert_int_gt(later, 0);
	gp_items_release(it, (size_t)a.next);
	gp_pool_destroy(p);
}
END_TEST

/* Each item's GPU figures: the memory and SM share NVML lists for the
 * worker's pid while it ran. */
static void
usage_check(struct arr *a, struct gp_item *item)
{
	struct gp_usage	 u;

	ck_assert_int_eq(gp_pool_usage(a->pool, item->worker, &u), 0);
	ck_assert_uint_eq(u.mem_peak, 512ull << 20);
	ck_assert_int_eq(u.util, 40);
	ck_assert_int_ge(u.samples, 1);
	a->flag++;
}

START_TEST(usage_per_item)
{
	struct gp_pool_opts	 o = { .fake_gpus = 1 };
	struct gp_item		 it[2];
	int			 v[2][3] = { { 0, 512, 1 }, { 0, 512, 2 } }, i;
	struct arr		 a = { .it = it, .n = 2, .hook = usage_check };
	struct gp_pool		*p;

	machine("gpu - - 8G 0 10\n");
	o.flags = GP_POOL_MONITOR;
	p = pool_with(&o);
	for (i = 0; i < 2; i++)
		gp_item_init(&it[i], v[i], sizeof(v[i]));
	run_arr(p, &a, -1, NULL);
	ck_assert_int_eq(a.flag, 2);
	gp_items_release(it, 2);
	gp_pool_destroy(p);
}
END_TEST

/* An item B that starts while a snapshot asked for during the item
 * before it (A, on the same worker) is still unanswered: that answer
 * shows A's process, which B's worker holds, and is no sample of B's.
 * A waits until the monitor has read its state (held there by the fake
 * until B starts); B waits until the next snapshot has begun. */
static char	 hold_path[96];

static int
stale_fn(struct gp_ctx *ctx, const void *in, size_t inlen, void *arg)
{
	const int	*v = in;
	char		 text[256];
	int		 fd;

	(void)inlen;
	(void)arg;
	if (*v == 0) {
		snprintf(text, sizeof(text), "mark a\nhold %s\n"
		    "gpu - - 8G 512M 10\nproc 0 %d 512M 40\n", hold_path,
		    (int)getpid());
		machine(text);
		wait_seen("a", 1);
		machine("mark b\ngpu - - 8G 0 10\n");
	} else {
		fd = open(hold_path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		close(fd);
		wait_seen("b", 1);
	}
	return gp_ctx_reply(ctx, v, sizeof(*v));
}

static void
stale_check(struct arr *a, struct gp_item *item)
{
	struct gp_usage	 u;

	if (item != &a->it[1])
		return;
	ck_assert_int_eq(gp_pool_usage(a->pool, item->worker, &u), 0);
	ck_assert_msg(u.mem_peak == 0 && u.util == -1, "item B was credited "
	    "with %llu bytes at %d %% from a snapshot of item A",
	    (unsigned long long)u.mem_peak, u.util);
	a->flag++;
}

START_TEST(an_answer_asked_before_an_item_is_not_its)
{
	struct gp_pool_opts	 o = { .fake_gpus = 1 };
	struct gp_item		 it[2];
	int			 v[2] = { 0, 1 }, i;
	struct arr		 a = { .it = it, .n = 2, .hook = stale_check };
	struct gp_pool		*p;

	machine("gpu - - 8G 0 10\n");
	snprintf(hold_path, sizeof(hold_path), "%s.go", state);
	unlink(hold_path);
	o.flags = GP_POOL_MONITOR;
	p = pool_with(&o);
	for (i = 0; i < 2; i++)
		gp_item_init(&it[i], &v[i], sizeof(v[i]));
	a.fn = stale_fn;
	run_arr(p, &a, -1, NULL);
	ck_assert_int_eq(fake_seen(seen, "a"), 1);
	ck_assert_int_eq(a.flag, 1);
	gp_items_release(it, 2);
	gp_pool_destroy(p);
	unlink(hold_path);
}
END_TEST

/* A child the application forks destroys its copy of the pool: the
 * creator's monitor lives on (its next item still gets figures). */
START_TEST(forked_copy_leaves_the_monitor)
{
	struct gp_pool_opts	 o = { .fake_gpus = 1 };
	struct gp_item		 it;
	int			 v[3] = { 0, 512, 1 }, st;
	struct arr		 a = { .it = &it, .n = 1, .hook = usage_check };
	struct gp_pool		*p;
	pid_t			 pid;

	machine("gpu - - 8G 0 10\n");
	o.flags = GP_POOL_MONITOR;
	p = pool_with(&o);
	if ((pid = fork()) == 0) {
		gp_pool_destroy(p);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_int_eq(st, 0);
	ck_assert_ptr_null(gp_pool_monitor(p));
	gp_item_init(&it, v, sizeof(v));
	run_arr(p, &a, -1, NULL);
	ck_assert_int_eq(a.flag, 1);
	gp_items_release(&it, 1);
	gp_pool_destroy(p);
}
END_TEST

/* The first sample and the workers' start. With MONITOR alone (no life
 * claim) it is asked for before the workers fork and waited for after:
 * here the fake holds its answer until a worker's init makes the hold
 * file, so a pool that waited before forking would take the fake's
 * whole hold (8 s). Either way the sample is in when gp_pool_create()
 * returns. With GPUS_FREE the plan needs it: no worker starts before it
 * is read. */
static char	 first_go[96];

static int
first_init(struct gp_ctx *ctx, void *arg)
{
	int	 fd;

	(void)ctx;
	if (arg != NULL)	/* GPUS_FREE: the state was read before */
		return fake_seen(seen, "f") == 1 ? 0 : 1;
	if ((fd = open(first_go, O_WRONLY | O_CREAT | O_CLOEXEC, 0600)) < 0)
		return 1;
	close(fd);
	return 0;
}

/* An item: the size the claims table gives the GPU its claim holds. */
static int
claimed_size(struct gp_ctx *ctx, const void *in, size_t inlen, void *arg)
{
	struct gp_claim_info	 ci[8];
	uint64_t		 total = 1;
	char			 err[256];
	int			 i, n;

	(void)in;
	(void)inlen;
	n = gp_claims_list(arg, ci, 8, err, sizeof(err));
	for (i = 0; i < n && i < 8; i++)
		if (ci[i].queue == 0 && ci[i].pid == (int)getppid())
			total = ci[i].total;
	return gp_ctx_reply(ctx, &total, sizeof(total));
}

START_TEST(the_first_sample_comes_while_workers_start)
{
	struct gp_pool_opts	 o = { .fake_gpus = 1, .init = first_init };
	struct gp_gpu_state	 st;
	struct gp_pool		*p;
	char			 text[256], cdir[96], ctab[128];
	int64_t			 t0;

	machine("gpu - - 8G 0 10\n");	/* names state and seen */
	snprintf(first_go, sizeof(first_go), "%s.first", state);
	unlink(first_go);
	unlink(seen);
	/* A claims table of its own: none of the GPU's size yet. */
	snprintf(cdir, sizeof(cdir), "%s.claims", state);
	snprintf(ctab, sizeof(ctab), "%s/claims.v1", cdir);
	unlink(ctab);
	o.claims = cdir;
	if (_i == 0) {
		snprintf(text, sizeof(text), "mark f\nhold %s\n"
		    "gpu - - 8G 0 10\n", first_go);
		machine(text);
		/* As gpupool-run: claims (on here) per item, not for
		 * life, which would wait for the sample to claim. */
		o.flags = GP_POOL_MONITOR | GP_POOL_CLAIM_ITEMS;
		t0 = now_ns();
		p = pool_with(&o);
		t0 = (now_ns() - t0) / 1000000;
		ck_assert_msg(t0 < 4000, "create took %lld ms: the first "
		    "sample was waited for before the workers", (long long)t0);
	} else {
		/* No hold here: GPUS_FREE's workers must find it read. */
		machine("mark f\ngpu - - 8G 0 10\n");
		o.flags = GP_POOL_MONITOR | GP_POOL_GPUS_FREE;
		o.init_arg = &o;
		p = pool_with(&o);
	}
	ck_assert_ptr_null(gp_pool_monitor(p));
	ck_assert_int_eq(gp_pool_gpu_state(p, 0, &st), 0);
	ck_assert_int_eq(st.known, 1);
	ck_assert_uint_eq(st.mem_total, 8 * GIB);
	ck_assert_int_eq(fake_seen(seen, "f"), 1);
	if (_i == 0) {
		/* The claims have the size the late sample gave. */
		struct gp_item	 it;
		struct arr	 a = { .it = &it, .n = 1 };
		int		 v = 0;

		gp_item_init(&it, &v, sizeof(v));
		ck_assert_int_eq(gp_pool_run(p, claimed_size, cdir,
		    strlen(cdir) + 1, &(struct gp_feed){ .next = arr_next,
		    .done = arr_done, .in_fd = -1, .ctl_fd = -1, .arg = &a }),
		    0);
		ck_assert_int_eq(it.status, GP_OK);
		ck_assert_uint_eq(it.outlen, sizeof(uint64_t));
		ck_assert_uint_eq(*(const uint64_t *)it.out, 8 * GIB);
		gp_items_release(&it, 1);
	}
	gp_pool_destroy(p);
	unlink(first_go);
	unlink(ctab);
	rmdir(cdir);
}
END_TEST

/* This process's children (its main thread's), from /proc; -1 on a
 * kernel without CONFIG_PROC_CHILDREN (the reason says the rest). */
static int
children(void)
{
	char	 path[64], buf[512], *s, *end;
	int	 n = 0;
	FILE	*f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children",
	    (int)getpid(), (int)getpid());
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	if (fgets(buf, sizeof(buf), f) != NULL)
		for (s = buf; strtol(s, &end, 10) > 0; s = end)
			n++;
	fclose(f);
	return n;
}

/* Fake GPUs with no NVML named ($GPUPOOL_NVML unset or empty): no NVML
 * could see them, so MONITOR alone starts no monitor child (the pool
 * says why); when the plan reads the sample (item_mem here) one is still
 * asked, and a named NVML watches fake GPUs as before (the other tests
 * here). */
START_TEST(fake_gpus_alone_start_no_monitor)
{
	struct gp_pool_opts	 o = { .fake_gpus = 2 };
	struct gp_pool		*p;
	const char		*why;
	int			 n;

	if (_i == 0)
		ck_assert_int_eq(unsetenv("GPUPOOL_NVML"), 0);
	else
		ck_assert_int_eq(setenv("GPUPOOL_NVML", "", 1), 0);
	o.flags = GP_POOL_MONITOR | GP_POOL_CLAIM_ITEMS;
	ck_assert_int_le(children(), 0);
	p = pool_with(&o);
	n = children();
	ck_assert_msg(n == 2 || n == -1, "%d children", n);	/* workers */
	ck_assert_ptr_nonnull(why = gp_pool_monitor(p));
	ck_assert_msg(strstr(why, "fake GPUs") != NULL, "%s", why);
	gp_pool_destroy(p);
	/* item_mem: the plan reads the sample; whether this machine has
	 * an NVML or not, the monitor was asked. */
	o.item_mem = 1 << 20;
	p = pool_with(&o);
	why = gp_pool_monitor(p);
	ck_assert_msg(why == NULL || strncmp(why, "no NVML: ", 9) == 0, "%s",
	    why);
	gp_pool_destroy(p);
}
END_TEST

/* No NVML: the pool says so once asked, and works as without a monitor
 * (GPUS_FREE cannot tell busy GPUs: every GPU counts as free). */
START_TEST(no_nvml_works_as_before)
{
	struct gp_pool_opts	 o = { .fake_gpus = 2 };
	struct gp_gpu_state	 st;
	struct gp_item		 it[4];
	int			 v[4] = { 1, 1, 1, 1 }, i;
	struct arr		 a = { .it = it, .n = 4 };
	struct gp_pool		*p;
	const char		*why;

	ck_assert_int_eq(setenv("GPUPOOL_NVML", "/nonexistent/libnvidia-ml.so.1",
	    1), 0);
	o.flags = GP_POOL_GPUS_FREE;
	p = pool_with(&o);
	ck_assert_ptr_nonnull(why = gp_pool_monitor(p));
	ck_assert_msg(strstr(why, "/nonexistent/libnvidia-ml.so.1") != NULL,
	    "%s", why);
	ck_assert_int_eq(gp_pool_gpus(p), 2);
	ck_assert_int_eq(gp_pool_gpu_state(p, 1, &st), 0);
	ck_assert_int_eq(st.known, 0);
	ck_assert_int_eq(st.busy, 0);
	for (i = 0; i < 4; i++)
		gp_item_init(&it[i], &v[i], sizeof(int));
	run_arr(p, &a, -1, NULL);
	gp_items_release(it, 4);
	gp_pool_destroy(p);
}
END_TEST

/* Invariant 1 with a monitor: NVML is loaded by the monitor child
 * only, never by the master (nor by a worker), through a whole call. */
START_TEST(only_the_monitor_loads_nvml)
{
	struct gp_pool_opts	 o = { .fake_gpus = 2 };
	struct gp_item		 it[4];
	int			 v[4] = { 5, 5, 5, 5 }, i, pid, n = 0;
	struct arr		 a = { .it = it, .n = 4 };
	struct gp_pool		*p;
	char			 log[64], line[256];
	FILE			*f;

	snprintf(log, sizeof(log), "/tmp/gp_watch_log.%d", (int)getpid());
	ck_assert_int_eq(setenv("GP_FAKE_NVML_LOG", log, 1), 0);
	machine("gpu - - 8G 0 0\ngpu - - 8G 0 0\n");
	o.flags = GP_POOL_GPUS_FREE;
	p = pool_with(&o);
	for (i = 0; i < 4; i++)
		gp_item_init(&it[i], &v[i], sizeof(int));
	run_arr(p, &a, -1, NULL);
	for (i = 0; i < gp_pool_size(p); i++) {
		struct gp_worker_info wi;

		(void)gp_pool_info(p, i, &wi);
		ck_assert_ptr_nonnull(f = fopen(log, "r"));
		while (fscanf(f, "%d", &pid) == 1)
			ck_assert_int_ne(pid, wi.pid);
		fclose(f);
	}
	ck_assert_ptr_nonnull(f = fopen(log, "r"));
	while (fscanf(f, "%d", &pid) == 1) {
		ck_assert_int_ne(pid, getpid());
		n++;
	}
	fclose(f);
	ck_assert_int_ge(n, 1);
	ck_assert_ptr_nonnull(f = fopen("/proc/self/maps", "r"));
	while (fgets(line, sizeof(line), f) != NULL)
		ck_assert_ptr_null(strstr(line, "nvidia-ml"));
	fclose(f);
	gp_items_release(it, 4);
	gp_pool_destroy(p);
	unlink(log);
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("watch");
	TCase	*tc = tcase_create("watch");

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, workers_own_near_gpus, 0, 2);
	tcase_add_test(tc, multi_gpu_items_hold_their_gpus_alone);
	tcase_add_test(tc, packing_never_exceeds_the_gpu);
	tcase_add_test(tc, busy_gpus_are_left_out);
	tcase_add_test(tc, busy_util_leaves_out_a_computing_gpu);
	tcase_add_test(tc, wait_free_starts_when_the_gpu_frees);
	tcase_add_test(tc, gpu_taken_mid_run_gets_no_new_item);
	tcase_add_test(tc, usage_per_item);
	tcase_add_test(tc, an_answer_asked_before_an_item_is_not_its);
	tcase_add_test(tc, forked_copy_leaves_the_monitor);
	tcase_add_loop_test(tc, the_first_sample_comes_while_workers_start,
	    0, 2);
	tcase_add_loop_test(tc, fake_gpus_alone_start_no_monitor, 0, 2);
	tcase_add_test(tc, no_nvml_works_as_before);
	tcase_add_test(tc, only_the_monitor_loads_nvml);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
