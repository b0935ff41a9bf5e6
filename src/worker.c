/*
 * worker.c: the child side of the pool. Runs only in a forked worker and
 * leaves only by _exit(), never exit(): the host's atexit handlers and
 * inherited stdio buffers belong to the master. Start-up order is fixed
 * (design.md, invariant 3): the pool's other fds are already closed (by
 * proc.c, which forked us), then reset signals, bind CPU then memory,
 * set CUDA_VISIBLE_DEVICES, init, READY; then serve batches with
 * blocking I/O until QUIT or EOF (the master is gone), or, with
 * GP_POOL_NO_PDEATHSIG, until the master's pidfd turns readable.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"
#include "msg.h"

/* Results of one batch go out in RESULT messages of count records. */
struct outq {
	struct gp_buf	 b;
	size_t		 at;		/* the message's header */
	uint64_t	 count;
	int64_t		 since;		/* when the oldest record was added */
};

struct gp_ctx {
	struct gp_pool		*p;
	struct gp_worker	*w;
	struct gp_worker_info	*info;
	int			 fd;		/* tasks in */
	int			 wfd;		/* results out */
	int			 stop;		/* fd, or epoll of it and the
						   master's pidfd */
	size_t			 max_msg;
	struct outq		 q;
	size_t			 data;		/* current item's reply bytes, or
						   0 outside an item */
	int			 reply_rc;	/* the last gp_ctx_reply() failed */
	size_t			 ioff;		/* items' end in it this batch */
	size_t			 roff;		/* results' end in it this batch */
	size_t			 rmark;		/* roff before the current item */
	uint32_t		 rlen;		/* its reply there, if rshm */
	int			 rshm;
	int			 untimed;	/* the JOB said GP_JOB_UNTIMED */
	const char		**ibus;		/* bus ids of the GPUS the next
						   item holds (GP_MSG_GPUS) */
	int			 nibus;		/* 0: its worker's own */
	struct gp_buf		 ivis;		/* their CUDA_VISIBLE_DEVICES */
};

/* The reply goes straight into the outgoing message, after the record
 * header that run_batch() fills in when fn returns, or, when it is big,
 * into the region's results half. The last call wins, failed or not: a
 * reply that could not be kept ends the item GP_ERROR (outq_close()),
 * never GP_OK with an older or an empty result. */
int
gp_ctx_reply(struct gp_ctx *ctx, const void *buf, size_t len)
{
	long	 at;

	if (ctx->data == 0)
		return -EINVAL;		/* in init or fini */
	ctx->q.b.len = ctx->q.b.off + ctx->data;
	ctx->roff = ctx->rmark;
	ctx->rshm = 0;
	if (len > ctx->max_msg)
		return ctx->reply_rc = -EMSGSIZE;
	if ((at = gp_data_place(ctx->w, &ctx->roff, len)) < 0)
		return ctx->reply_rc = gp_buf_add(&ctx->q.b, buf, len);
	memcpy(ctx->w->reg + ctx->w->half + at, buf, len);
	ctx->rlen = (uint32_t)len;
	ctx->rshm = 1;
	return ctx->reply_rc = 0;
}

const struct gp_worker_info *
gp_ctx_info(const struct gp_ctx *ctx)
{
	return ctx->info;
}

int
gp_ctx_stop_fd(const struct gp_ctx *ctx)
{
	return ctx->stop;
}

void
gp_ctx_set_pgid(struct gp_ctx *ctx, pid_t pgid)
{
	atomic_store(&ctx->w->shm->pgid, pgid > 0 ? pgid : 0);
}

const char *
gp_ctx_item_visible(const struct gp_ctx *ctx)
{
	return ctx->nibus > 0 ? (const char *)ctx->ivis.data :
	    ctx->info->visible;
}

int
gp_ctx_item_bind(struct gp_ctx *ctx, int item)
{
	struct gp_pool	*p = ctx->p;
	struct gp_place	 pl;
	int		 cpu_rc, mem_rc, rc;

	if (p->o.flags & GP_POOL_NO_BIND)
		return 0;
	if (!item || ctx->nibus == 0)
		return gp_topo_bind(p->topo, &ctx->w->place, &cpu_rc, &mem_rc);
	if ((rc = gp_topo_place(p->topo, ctx->ibus, 1, &pl)) < 0)
		return rc;
	if ((rc = gp_topo_widen(p->topo, &pl, ctx->ibus, ctx->nibus)) == 0)
		rc = gp_topo_bind(p->topo, &pl, &cpu_rc, &mem_rc);
	gp_place_release(&pl);
	return rc;
}

/* GP_MSG_GPUS: the next item holds these GPUs (n indices at pl, n >= 1,
 * checked by gp_msg_parse()). */
static void
item_gpus(struct gp_pool *p, struct gp_ctx *ctx, const uint8_t *pl, int n)
{
	const char	*v, **b;
	uint32_t	 g;
	int		 i;

	if ((b = realloc(ctx->ibus, (size_t)n * sizeof(*b))) == NULL)
		_exit(GP_EXIT_NOMEM);
	ctx->ibus = b;
	ctx->ivis.off = ctx->ivis.len = 0;
	for (i = 0; i < n; i++) {
		memcpy(&g, pl + i * sizeof(g), sizeof(g));
		if (g >= (uint32_t)p->ngpus)
			_exit(GP_EXIT_PROTO);
		b[i] = p->gpus[g].busid;
		v = p->gpus[g].visible;
		if ((i > 0 && gp_buf_add(&ctx->ivis, ",", 1) < 0) ||
		    gp_buf_add(&ctx->ivis, v, strlen(v)) < 0)
			_exit(GP_EXIT_NOMEM);
	}
	if (gp_buf_add(&ctx->ivis, "", 1) < 0)
		_exit(GP_EXIT_NOMEM);
	ctx->nibus = n;
}

static void
reset_signals(void)
{
	struct sigaction	 sa;
	sigset_t		 none;
	int			 sig;

	/* A handler of the host must never run in a worker (musl's
	 * posix_spawn rule); ^C is the master's to handle. */
	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	for (sig = 1; sig < NSIG; sig++) {
		if (sig == SIGKILL || sig == SIGSTOP)
			continue;
		sa.sa_handler = (sig == SIGINT) ? SIG_IGN : SIG_DFL;
		(void)sigaction(sig, &sa, NULL);
	}
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
}

/*
 * With GP_POOL_NO_PDEATHSIG, the master's pidfd (or -1: none, or no
 * pidfds here). EOF alone cannot tell the worker that its master is gone:
 * a process the master forked without exec (a logger, Python's
 * multiprocessing) holds the pipes open as long as it lives. One per
 * process: a worker is its own process.
 */
static int	 master_pidfd = -1;
static int	 master_epfd = -1;	/* the stop fd watching it, or -1 */

/* Wait until fd is ready for events; leave if the master is gone. */
static void
wait_or_die(int fd, short events)
{
	struct pollfd	 pfd[2] = { { fd, events, 0 },
				    { master_pidfd, POLLIN, 0 } };

	while (poll(pfd, 2, -1) == -1)
		if (errno != EINTR)
			_exit(0);
	if (pfd[1].revents)
		_exit(0);	/* the master is gone */
}

/* Send b's pending bytes, all of them, and empty b. The only way results
 * leave a worker: with a master pidfd, fd is nonblocking (a full pipe
 * must not hide a death), so a full pipe is waited out here, never taken
 * for a dead master. */
static void
send_or_die(int fd, struct gp_buf *b)
{
	struct iovec	 iov = { b->data + b->off, b->len - b->off };

	if (master_pidfd < 0) {
		if (gp_writev_full(fd, &iov, 1) < 0)
			_exit(0);	/* the master is gone */
	} else
		while (b->len > b->off) {
			if (gp_buf_send(fd, b) < 0)
				_exit(0);
			if (b->len > b->off)
				wait_or_die(fd, POLLOUT);
		}
	b->off = b->len = 0;
}

static void
outq_flush(int fd, struct outq *q)
{
	if (q->count == 0)
		return;
	gp_msg_finish(&q->b, q->at, q->count);
	send_or_die(fd, &q->b);
	q->count = 0;
}

/* Open a record in the outgoing message; its reply bytes follow it.
 * Returns the record's offset from q->b.off. */
static size_t
outq_open(struct gp_ctx *ctx, int64_t now)
{
	struct outq		*q = &ctx->q;
	struct gp_rec_result	 r = { 0 };
	size_t			 at;

	if (q->count == 0) {
		if (gp_msg_begin(&q->b, GP_MSG_RESULT, &q->at) < 0)
			_exit(GP_EXIT_NOMEM);
		q->since = now;
	}
	at = q->b.len - q->b.off;
	if (gp_buf_add(&q->b, &r, sizeof(r)) < 0)
		_exit(GP_EXIT_NOMEM);
	ctx->data = q->b.len - q->b.off;
	ctx->reply_rc = 0;
	ctx->rmark = ctx->roff;
	ctx->rshm = 0;
	q->count++;
	return at;
}

/* Fill in the record opened at at. The message stays one the master
 * accepts (GP_MSG_MAX): when this record takes it over, the records
 * before it are sent, and this one opens the next message, its header
 * written over the end of what was sent. */
static void
outq_close(struct gp_ctx *ctx, size_t at, struct gp_rec_result *r)
{
	struct outq		*q = &ctx->q;
	struct gp_buf		*b = &q->b;
	struct gp_msg_hdr	 h = { .type = GP_MSG_RESULT };
	struct gp_buf		 sent;
	size_t			 hl = sizeof(h), end;

	if (ctx->reply_rc < 0) {
		r->kind = GP_REC_ERROR;
		r->rc = ctx->reply_rc;
		b->len = b->off + ctx->data;
		ctx->roff = ctx->rmark;
		ctx->rshm = 0;
	}
	r->len = (uint32_t)(b->len - b->off - ctx->data);
	if (ctx->rshm && r->kind == GP_REC_DONE) {
		r->flags = GP_REC_SHM;
		r->len = ctx->rlen;
	}
	memcpy(b->data + b->off + at, r, sizeof(*r));
	ctx->data = 0;
	if (q->count < 2 ||
	    b->len - b->off - q->at - hl <= GP_MSG_MAX(ctx->max_msg))
		return;
	end = b->len;
	b->len = b->off + at;
	gp_msg_finish(b, q->at, q->count - 1);
	b->len = end;
	/* A view of the finished part: send_or_die() empties the view,
	 * not b. */
	sent.data = b->data + b->off + q->at;
	sent.off = 0;
	sent.len = sent.cap = at - q->at;
	send_or_die(ctx->wfd, &sent);
	b->off += at - hl;
	memcpy(b->data + b->off, &h, hl);
	q->at = 0;
	q->count = 1;
}

/*
 * Clock reads are the worker's largest cost on tiny items, so an item's
 * end is the next one's start, and without a timeout (when nobody needs
 * each item's start) only every GP_CLOCK_EVERY-th item reads the clock:
 * its record carries the mean time of the items since the last read, the
 * others carry 0 ("not measured"); a JOB flagged GP_JOB_UNTIMED (a
 * stream without a timeout, whose times nobody uses) reads none. The
 * shared slot is written with release stores: the master reads cur,
 * started, cur (gp_proc_current()).
 */
#define GP_CLOCK_EVERY	8

static void
run_batch(struct gp_pool *p, struct gp_worker *w, struct gp_ctx *ctx,
    gp_fn *fn, const void *arg, const uint8_t *pos, const uint8_t *end)
{
	struct gp_rec_task	 t;
	struct gp_rec_result	 r;
	const uint8_t		*data;
	int64_t			 t0 = ctx->untimed ? 0 : gp_now_ns(), t1;
	size_t			 at;
	int			 rc, k = 0, every;

	every = p->o.timeout_ms > 0 ? 1 : GP_CLOCK_EVERY;
	ctx->ioff = ctx->roff = 0;
	while ((rc = gp_msg_task_next(&pos, end, &t, &data)) == 1) {
		/* A TASK that points past the region, or at one the
		 * worker has not, is a broken protocol. */
		if ((t.flags & GP_REC_SHM) && (data = gp_data_bytes(w, 0,
		    &ctx->ioff, t.len, ctx->max_msg)) == NULL)
			_exit(GP_EXIT_PROTO);
		memset(&r, 0, sizeof(r));
		r.id = t.id;
		at = outq_open(ctx, t0);
		if (atomic_load(&w->shm->stop)) {
			r.kind = GP_REC_SKIPPED;
			outq_close(ctx, at, &r);
			continue;
		}
		atomic_store_explicit(&w->shm->started, t0,
		    memory_order_release);
		atomic_store_explicit(&w->shm->cur, t.id, memory_order_release);
		r.rc = fn(ctx, t.len ? data : NULL, t.len, (void *)arg);
		atomic_store_explicit(&w->shm->cur, 0, memory_order_release);
		if (ctx->untimed || (++k < every && pos < end)) {
			outq_close(ctx, at, &r);
			continue;
		}
		t1 = gp_now_ns();
		r.ns = (uint64_t)(t1 - t0) / (uint64_t)k;
		if (r.ns == 0)
			r.ns = 1;
		outq_close(ctx, at, &r);
		if (ctx->q.b.len - ctx->q.b.off >= GP_BATCH_BYTES ||
		    t1 - ctx->q.since >= GP_FLUSH_NS)
			outq_flush(ctx->wfd, &ctx->q);
		t0 = t1;
		k = 0;
	}
	if (rc < 0)
		_exit(GP_EXIT_PROTO);
	outq_flush(ctx->wfd, &ctx->q);
}

/* Next whole message into in (buffered: one read usually brings the
 * header and the payload together). EOF or a bad header ends the worker. */
static void
next_msg(int fd, struct gp_buf *in, size_t max, struct gp_msg_hdr *h,
    const uint8_t **payload)
{
	size_t	 want;
	long	 m;
	ssize_t	 r;

	for (;;) {
		m = gp_msg_parse(in->data + in->off, in->len - in->off, max, h);
		if (m < 0)
			_exit(GP_EXIT_PROTO);
		if (m > 0)
			break;
		/* Room for all of a large message (its header is checked
		 * against max), else a plain 64 KiB read. */
		want = 65536;
		if (in->len - in->off >= sizeof(*h) &&
		    h->len + sizeof(*h) > want)
			want = h->len + sizeof(*h);
		if (gp_buf_reserve(in, want) < 0)
			_exit(GP_EXIT_NOMEM);
		do
			r = read(fd, in->data + in->len, in->cap - in->len);
		while (r == -1 && errno == EINTR);
		if (r == -1 && errno == EAGAIN && master_pidfd >= 0) {
			/* Nonblocking with a master pidfd: wait for either,
			 * but only when nothing is there already. */
			wait_or_die(fd, POLLIN);
			continue;
		}
		if (r <= 0)
			_exit(0);	/* EOF: the master is gone */
		in->len += (size_t)r;
	}
	*payload = in->data + in->off + sizeof(*h);
	in->off += (size_t)m;	/* valid until the next reserve */
}

static void
serve(struct gp_pool *p, struct gp_worker *w, struct gp_ctx *ctx)
{
	struct gp_msg_hdr	 h;
	struct gp_buf		 in = { 0 };
	const uint8_t		*pl;
	gp_fn			*fn = NULL;
	uint8_t			*arg = NULL;
	uint64_t		 addr;
	size_t			 max = GP_MSG_MAX(p->o.max_msg);

	for (;;) {
		next_msg(ctx->fd, &in, max, &h, &pl);
		switch (h.type) {
		case GP_MSG_JOB:
			memcpy(&addr, pl, sizeof(addr));
			fn = (gp_fn *)(uintptr_t)addr;
			ctx->untimed = (h.id & GP_JOB_UNTIMED) != 0;
			free(arg);
			arg = NULL;
			if (h.len > sizeof(addr)) {
				if ((arg = malloc(h.len - sizeof(addr))) == NULL)
					_exit(GP_EXIT_NOMEM);
				memcpy(arg, pl + sizeof(addr),
				    h.len - sizeof(addr));
			}
			break;
		case GP_MSG_GPUS:
			item_gpus(p, ctx, pl, (int)h.id);
			break;
		case GP_MSG_TASK:
			if (fn == NULL)
				_exit(GP_EXIT_PROTO);
			run_batch(p, w, ctx, fn, arg, pl, pl + h.len);
			ctx->nibus = 0;
			break;
		case GP_MSG_STOP:
			break;	/* the item it named is over */
		case GP_MSG_QUIT:
			if (p->o.fini != NULL)
				p->o.fini(ctx, p->o.init_arg);
			_exit(0);
		default:
			_exit(GP_EXIT_PROTO);
		}
	}
}

/*
 * Without PR_SET_PDEATHSIG the worker watches a pidfd of its master, so it
 * learns of the master's death whatever holds its pipes: idle, in
 * next_msg(); busy, through the stop fd, made an epoll set of the task
 * pipe and that pidfd (readable when either is). Opened first, checked
 * after: if the parent is still the master, the pidfd is the master's
 * and not a process that reused its pid. Without pidfds (Linux < 5.3,
 * valgrind) EOF is all there is.
 */
static void
watch_master(struct gp_pool *p, struct gp_ctx *ctx)
{
	struct epoll_event	 ev = { .events = EPOLLIN };
	int			 pfd, efd;

	if ((pfd = (int)syscall(SYS_pidfd_open, p->master, 0)) < 0) {
		if (errno == ESRCH)
			_exit(0);	/* it died before we looked */
		return;
	}
	if (getppid() != p->master)
		_exit(0);
	if ((efd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	    epoll_ctl(efd, EPOLL_CTL_ADD, ctx->fd, &ev) < 0 ||
	    epoll_ctl(efd, EPOLL_CTL_ADD, pfd, &ev) < 0) {
		if (efd >= 0)
			close(efd);
		close(pfd);
		return;
	}
	master_pidfd = pfd;
	master_epfd = efd;
	ctx->stop = efd;
}

/* (b) Signals, and death with the master. */
static void
die_with_master(struct gp_pool *p)
{
	reset_signals();
	if (!(p->o.flags & GP_POOL_NO_PDEATHSIG)) {
		(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != p->master)
			_exit(0);	/* it died before prctl */
	}
}

/* The handle fn and init get, on this worker's channel. */
static void
ctx_init(struct gp_pool *p, struct gp_worker *w, struct gp_ctx *ctx, int fd,
    int wfd)
{
	w->info.pid = getpid();
	memset(ctx, 0, sizeof(*ctx));
	ctx->p = p;
	ctx->w = w;
	ctx->info = &w->info;
	ctx->fd = fd;
	ctx->wfd = wfd;
	ctx->stop = fd;
	ctx->max_msg = p->o.max_msg;
	/* Forked by a pool made in fn: the outer worker's watch is not
	 * ours, and its fds must not stay open here. */
	if (master_pidfd >= 0)
		close(master_pidfd);
	if (master_epfd >= 0)
		close(master_epfd);
	master_pidfd = master_epfd = -1;
	if (p->o.flags & GP_POOL_NO_PDEATHSIG)
		watch_master(p, ctx);
}

/* (c) CPU, then memory, before anything allocates much. */
static void
bind_place(struct gp_pool *p, struct gp_worker *w, struct gp_msg_ready *rd)
{
	int	 cpu_rc = 0, mem_rc = 0;

	if (p->o.flags & GP_POOL_NO_BIND)
		return;
	(void)gp_topo_bind(p->topo, &w->place, &cpu_rc, &mem_rc);
	rd->cpubind_rc = cpu_rc;
	rd->membind_rc = mem_rc;
	w->info.cpubind_rc = cpu_rc;
	w->info.membind_rc = mem_rc;
	if ((p->o.flags & GP_POOL_STRICT_BIND) && (cpu_rc || mem_rc))
		rd->fatal = 1;
}

/* (d) Exactly one GPU, named so no renumbering can move it. A launcher
 * can leave a variable in environ twice: setenv() replaces the first
 * copy, a shell or Python reads the last, so every copy goes first
 * (glibc's and musl's unsetenv remove all). */
static void
pick_gpu(struct gp_pool *p, struct gp_worker *w, struct gp_msg_ready *rd)
{
	(void)unsetenv("CUDA_VISIBLE_DEVICES");
	(void)unsetenv("CUDA_DEVICE_ORDER");
	if (setenv("CUDA_VISIBLE_DEVICES", w->info.visible, 1) < 0 ||
	    setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1) < 0)
		rd->fatal = 1;
	if (!rd->fatal && (p->o.flags & GP_POOL_CUDA_INIT) && !w->info.fake &&
	    (rd->cuda_rc = gp_cuda_init()) != 0)
		rd->fatal = 1;
}

/* (e) The user's initialiser, then READY; a worker that failed leaves
 * after saying why. */
static void
send_ready(struct gp_pool *p, struct gp_ctx *ctx, struct gp_msg_ready *rd)
{
	struct gp_msg_hdr	 h = { GP_MSG_READY, sizeof(*rd), 0 };
	struct iovec		 iov[2];

	if (!rd->fatal && p->o.init != NULL &&
	    (rd->init_rc = p->o.init(ctx, p->o.init_arg)) != 0)
		rd->fatal = 1;
	iov[0].iov_base = &h;
	iov[0].iov_len = sizeof(h);
	iov[1].iov_base = rd;
	iov[1].iov_len = sizeof(*rd);
	if (gp_writev_full(ctx->wfd, iov, 2) < 0 || rd->fatal)
		_exit(0);
	if (master_pidfd >= 0) {
		(void)fcntl(ctx->wfd, F_SETFL, O_NONBLOCK);
		(void)fcntl(ctx->fd, F_SETFL, O_NONBLOCK);	/* next_msg() */
	}
}

/* Start-up in the order of design.md's invariant 3 ((a), the other fds,
 * was proc.c's), then serve. */
void
gp_worker_main(struct gp_pool *p, struct gp_worker *w, int fd, int wfd)
{
	struct gp_msg_ready	 rd;
	struct gp_ctx		 ctx;

	die_with_master(p);
	ctx_init(p, w, &ctx, fd, wfd);
	memset(&rd, 0, sizeof(rd));
	bind_place(p, w, &rd);
	pick_gpu(p, w, &rd);
	send_ready(p, &ctx, &rd);
	serve(p, w, &ctx);
	/* NOTREACHED */
	_exit(0);
}
