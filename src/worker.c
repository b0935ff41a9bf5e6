/*
 * worker.c: the child side of the pool. Runs only in a forked worker and
 * leaves only by _exit(), never exit(): the host's atexit handlers and
 * inherited stdio buffers belong to the master. Start-up order is fixed
 * (design.md, invariant 3): the pool's other fds are already closed (by
 * proc.c, which forked us), then reset signals, bind CPU then memory,
 * set CUDA_VISIBLE_DEVICES, init, READY; then serve batches with
 * blocking I/O (wio.c) until QUIT or EOF (the master is gone), or, with
 * GP_POOL_NO_PDEATHSIG, until the master's pidfd turns readable. Items
 * and results over the window come and go in pieces (msg.h): an item's
 * are put together here before its TASK, a result's are sent while
 * gp_ctx_reply() runs, each piece waiting for the master's ACK.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
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
	size_t			 win;		/* the window (msg.h) */
	struct outq		 q;
	size_t			 data;		/* current item's reply bytes, or
						   0 outside an item */
	size_t			 rec;		/* its record's place in q.b */
	uint64_t		 id;		/* its id */
	int			 reply_rc;	/* the last gp_ctx_reply() failed */
	size_t			 ioff;		/* items' end in it this batch */
	size_t			 roff;		/* results' end in it this batch */
	size_t			 rmark;		/* roff before the current item */
	uint32_t		 rlen;		/* its reply there, if rshm */
	int			 rshm;
	int			 rpieced;	/* its reply went in pieces */
	int			 stopped;	/* a stop cut a reply: no more */
	struct {				/* an item coming in pieces */
		uint64_t	 id, total, got;
		uint8_t		*buf;
		int		 rc;		/* -ENOMEM: cannot hold it */
	}			 in;
	int			 untimed;	/* the JOB said GP_JOB_UNTIMED */
	const char		**ibus;		/* bus ids of the GPUS the next
						   item holds (GP_MSG_GPUS) */
	int			 nibus;		/* 0: its worker's own */
	struct gp_buf		 ivis;		/* their CUDA_VISIBLE_DEVICES */
};

static int	reply_pieces(struct gp_ctx *ctx, const uint8_t *buf, size_t len);

/* The reply goes straight into the outgoing message, after the record
 * header that run_batch() fills in when fn returns, or, when it is big,
 * into the region's results half, or, over the window, to the master in
 * pieces now. The last call wins, failed or not: a reply that could not
 * be kept ends the item GP_ERROR (outq_close()), never GP_OK with an
 * older or an empty result. */
int
gp_ctx_reply(struct gp_ctx *ctx, const void *buf, size_t len)
{
	long	 at;

	if (ctx->data == 0)
		return -EINVAL;		/* in init or fini */
	ctx->q.b.len = ctx->q.b.off + ctx->data;
	ctx->roff = ctx->rmark;
	ctx->rshm = ctx->rpieced = 0;
	if (ctx->stopped)
		return ctx->reply_rc = -ECANCELED;
	if (len > ctx->max_msg)
		return ctx->reply_rc = -EMSGSIZE;
	if (len > ctx->win)
		return ctx->reply_rc = reply_pieces(ctx, buf, len);
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

const struct gp_pool_opts *
gp_ctx_opts(const struct gp_ctx *ctx)
{
	return &ctx->p->o;
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
	/* An exec'd worker reads the master's topology when it needs it. */
	if (p->topo == NULL && (rc = gp_topo_xml(&p->topo, p->xp->xml,
	    p->xp->xmllen, p->xp->thissystem)) < 0)
		return rc;
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
outq_flush(int fd, struct outq *q)
{
	if (q->count == 0)
		return;
	gp_msg_finish(&q->b, q->at, q->count);
	gp_wio_send(fd, &q->b);
	q->count = 0;
}

/* Open a record in the outgoing message; its reply bytes follow it.
 * ctx->rec is where it is (from q->b.off), until outq_cut() moves it. */
static void
outq_open(struct gp_ctx *ctx, int64_t now)
{
	struct outq		*q = &ctx->q;
	struct gp_rec_result	 r = { 0 };

	if (q->count == 0) {
		if (gp_msg_begin(&q->b, GP_MSG_RESULT, &q->at) < 0)
			_exit(GP_EXIT_NOMEM);
		q->since = now;
	}
	ctx->rec = q->b.len - q->b.off;
	if (gp_buf_add(&q->b, &r, sizeof(r)) < 0)
		_exit(GP_EXIT_NOMEM);
	ctx->data = q->b.len - q->b.off;
	ctx->reply_rc = 0;
	ctx->rmark = ctx->roff;
	ctx->rshm = ctx->rpieced = ctx->stopped = 0;
	q->count++;
}

/* Send the records before the last one (of q->count, at least 2), and
 * make that one the first of the next message, its header written over
 * the end of what was sent. */
static void
outq_cut(struct gp_ctx *ctx)
{
	struct outq		*q = &ctx->q;
	struct gp_buf		*b = &q->b;
	struct gp_msg_hdr	 h = { .type = GP_MSG_RESULT };
	struct gp_buf		 sent;
	size_t			 hl = sizeof(h), end, at = ctx->rec;

	end = b->len;
	b->len = b->off + at;
	gp_msg_finish(b, q->at, q->count - 1);
	b->len = end;
	/* A view of the finished part: gp_wio_send() empties the view,
	 * not b. */
	sent.data = b->data + b->off + q->at;
	sent.off = 0;
	sent.len = sent.cap = at - q->at;
	gp_wio_send(ctx->wfd, &sent);
	b->off += at - hl;
	memcpy(b->data + b->off, &h, hl);
	if (ctx->data != 0)
		ctx->data -= at - hl;	/* the open record moved */
	ctx->rec = hl;
	q->at = 0;
	q->count = 1;
}

/* Fill in the open record. The message stays one the master accepts
 * (GP_MSG_MAX): when this record takes it over, the records before it
 * are sent, and this one opens the next message. */
static void
outq_close(struct gp_ctx *ctx, struct gp_rec_result *r)
{
	struct outq		*q = &ctx->q;
	struct gp_buf		*b = &q->b;

	if (ctx->reply_rc < 0) {
		r->kind = GP_REC_ERROR;
		r->rc = ctx->reply_rc;
		b->len = b->off + ctx->data;
		ctx->roff = ctx->rmark;
		ctx->rshm = ctx->rpieced = 0;
	}
	r->len = (uint32_t)(b->len - b->off - ctx->data);
	if (ctx->rshm && r->kind == GP_REC_DONE) {
		r->flags = GP_REC_SHM;
		r->len = ctx->rlen;
	}
	if (ctx->rpieced && r->kind == GP_REC_DONE)
		r->flags = GP_REC_PIECED;	/* len 0: the pieces had it */
	memcpy(b->data + b->off + ctx->rec, r, sizeof(*r));
	ctx->data = 0;
	if (q->count >= 2 && b->len - b->off - q->at -
	    sizeof(struct gp_msg_hdr) > GP_MSG_MAX(ctx->win))
		outq_cut(ctx);
}

/* The master's ACK of the piece that ends at got; -ECANCELED when a STOP
 * comes first. That STOP is read, so the stop fd no longer shows it; the
 * ACK the master still sends for the piece it has makes it readable
 * again. ACKs of a reply a stop cut, in an earlier batch, are skipped. */
static int
wait_ack(struct gp_ctx *ctx, uint64_t got)
{
	struct gp_msg_hdr	 h;
	struct gp_msg_ack	 a;

	for (;;) {
		gp_wio_read(ctx->fd, &h, sizeof(h));
		if (h.type == GP_MSG_STOP && h.len == 0)
			return -ECANCELED;
		if (h.type != GP_MSG_ACK || h.len != sizeof(a))
			_exit(GP_EXIT_PROTO);
		gp_wio_read(ctx->fd, &a, sizeof(a));
		if (h.id != ctx->id)
			continue;
		if (a.got != got || a.rc != 0)
			_exit(GP_EXIT_PROTO);
		return 0;
	}
}

/*
 * A reply over the window, sent now: first the records before this
 * item's (the master must have them to know which item the pieces are
 * for, and where the first lies), then each piece, in the region when
 * there is room (the first after the batch's region results so far, the
 * others at 0), else in the message, each waiting for its ACK before the
 * next fills the region again. 0, or -ECANCELED: a stop came, the item
 * is over, the rest is not sent and its later replies fail too.
 */
static int
reply_pieces(struct gp_ctx *ctx, const uint8_t *buf, size_t len)
{
	struct gp_worker	*w = ctx->w;
	struct gp_msg_hdr	 h = { .type = GP_MSG_PIECE, .id = ctx->id };
	struct gp_msg_piece	 m = { .total = len };
	struct iovec		 iov[3] = { { &h, sizeof(h) },
					    { &m, sizeof(m) } };
	size_t			 base, room, n;

	if (ctx->q.count > 1)
		outq_cut(ctx);
	for (m.off = 0; m.off < len; m.off += m.len) {
		base = m.off == 0 ? ctx->roff : 0;
		room = w->reg != NULL && base < w->half ? w->half - base : 0;
		room = room < ctx->win ? room : ctx->win;
		m.flags = room >= GP_SHM_MIN ? GP_REC_SHM : 0;
		n = m.flags ? room : ctx->win;
		m.len = (uint32_t)(len - m.off < n ? len - m.off : n);
		h.len = (uint32_t)(sizeof(m) + (m.flags ? 0 : m.len));
		iov[2].iov_base = (void *)(uintptr_t)(buf + m.off);
		iov[2].iov_len = m.len;
		if (m.flags)
			memcpy(w->reg + w->half + base, buf + m.off, m.len);
		gp_wio_sendv(ctx->wfd, iov, m.flags ? 2 : 3);
		if (wait_ack(ctx, m.off + m.len) < 0) {
			ctx->stopped = 1;
			return -ECANCELED;
		}
	}
	/* The master has taken everything before the last ACK. */
	ctx->roff = ctx->rmark = 0;
	ctx->rpieced = 1;
	return 0;
}

/* GP_MSG_PIECE: the next piece of an item over the window, out of the
 * region (or the message) into the item's own memory, made at its first
 * piece once the total is checked against max_msg, then acknowledged.
 * An item memory cannot hold is acknowledged with -ENOMEM: the master
 * sends its TASK at once, which fails it (run_batch()). */
static void
item_piece(struct gp_ctx *ctx, const struct gp_msg_hdr *h,
    const uint8_t *pl)
{
	struct gp_worker	*w = ctx->w;
	struct gp_msg_piece	 m;
	struct gp_msg_hdr	 ah = { GP_MSG_ACK, sizeof(struct gp_msg_ack),
				       h->id };
	struct gp_msg_ack	 a = { 0 };
	struct iovec		 iov[2] = { { &ah, sizeof(ah) },
					    { &a, sizeof(a) } };

	memcpy(&m, pl, sizeof(m));
	if (m.off == 0) {
		free(ctx->in.buf);
		memset(&ctx->in, 0, sizeof(ctx->in));
		ctx->in.id = h->id;
	}
	if (h->id != ctx->in.id || gp_msg_piece_check(&m, h->len,
	    ctx->in.got, ctx->in.total, w->reg != NULL ? w->half : 0,
	    ctx->win, ctx->max_msg) < 0)
		_exit(GP_EXIT_PROTO);
	if (m.off == 0) {
		ctx->in.total = m.total;
		if ((ctx->in.buf = malloc((size_t)m.total)) == NULL)
			ctx->in.rc = -ENOMEM;
		else
			gp_data_prefault(ctx->in.buf, (size_t)m.total);
	}
	if (ctx->in.buf != NULL)
		memcpy(ctx->in.buf + m.off, (m.flags & GP_REC_SHM) ? w->reg :
		    pl + sizeof(m), m.len);
	ctx->in.got += m.len;
	a.got = ctx->in.got;
	a.rc = ctx->in.rc;
	gp_wio_sendv(ctx->wfd, iov, 2);
}

/* The bytes of a TASK record flagged GP_REC_PIECED: the item its pieces
 * brought. 0, or the code it fails with (it could not be held). */
static int
pieced_item(struct gp_ctx *ctx, const struct gp_rec_task *t,
    const uint8_t **data, size_t *len)
{
	if (t->id != ctx->in.id)
		_exit(GP_EXIT_PROTO);
	if (ctx->in.rc < 0)
		return ctx->in.rc;
	if (ctx->in.got != ctx->in.total)
		_exit(GP_EXIT_PROTO);
	*data = ctx->in.buf;
	*len = (size_t)ctx->in.total;
	return 0;
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
	size_t			 len;
	int			 rc, k = 0, every;

	every = p->o.timeout_ms > 0 ? 1 : GP_CLOCK_EVERY;
	ctx->ioff = ctx->roff = 0;
	while ((rc = gp_msg_task_next(&pos, end, &t, &data)) == 1) {
		/* A TASK that points past the region or the extern
		 * mapping, or at one the worker has not, is a broken
		 * protocol. */
		if (((t.flags & GP_REC_SHM) && (data = gp_data_bytes(w, 0,
		    &ctx->ioff, t.len, ctx->win)) == NULL) ||
		    ((t.flags & GP_REC_EXT) &&
		    (data = gp_data_ext(p, data, t.len)) == NULL))
			_exit(GP_EXIT_PROTO);
		memset(&r, 0, sizeof(r));
		r.id = ctx->id = t.id;
		len = t.len;
		outq_open(ctx, t0);
		if (atomic_load(&w->shm->stop)) {
			r.kind = GP_REC_SKIPPED;
			outq_close(ctx, &r);
			continue;
		}
		if (fn == NULL || ((t.flags & GP_REC_PIECED) &&
		    (r.rc = pieced_item(ctx, &t, &data, &len)) < 0)) {
			if (fn == NULL)
				r.rc = -ENOENT;	/* not in this program */
			r.kind = GP_REC_ERROR;
			outq_close(ctx, &r);
			continue;
		}
		atomic_store_explicit(&w->shm->started, t0,
		    memory_order_release);
		atomic_store_explicit(&w->shm->cur, t.id, memory_order_release);
		r.rc = fn(ctx, len ? data : NULL, len, (void *)arg);
		atomic_store_explicit(&w->shm->cur, 0, memory_order_release);
		if (ctx->untimed || (++k < every && pos < end)) {
			outq_close(ctx, &r);
			continue;
		}
		t1 = gp_now_ns();
		r.ns = (uint64_t)(t1 - t0) / (uint64_t)k;
		if (r.ns == 0)
			r.ns = 1;
		outq_close(ctx, &r);
		if (ctx->q.b.len - ctx->q.b.off >= GP_BATCH_BYTES ||
		    t1 - ctx->q.since >= GP_FLUSH_NS)
			outq_flush(ctx->wfd, &ctx->q);
		t0 = t1;
		k = 0;
	}
	if (rc < 0)
		_exit(GP_EXIT_PROTO);
	outq_flush(ctx->wfd, &ctx->q);
	/* An item that came in pieces is alone in its batch: its memory
	 * goes back now, not when the next big one comes. */
	free(ctx->in.buf);
	memset(&ctx->in, 0, sizeof(ctx->in));
}

/* A JOB's fn, *at where its arg starts: the master's address in a fork
 * (the same image), or, in an exec'd worker, the function its reference
 * names in this one (ref.c), looked up once per function: a JOB whose
 * reference has the bytes of the last one is that function (each C call
 * sends a JOB: nothing is parsed then); NULL when this program has none:
 * the call's items fail, the worker stays. */
static gp_fn *
job_fn(struct gp_pool *p, const uint8_t *pl, const uint8_t *end, size_t *at)
{
	static uint8_t		*lastw;		/* the last reference's bytes */
	static size_t		 lastn;
	static gp_fn		*lastfn;
	struct gp_ref		 r;
	const uint8_t		*pos = pl;
	uint64_t		 addr;
	ssize_t			 n;

	if (!p->execd) {
		memcpy(&addr, pl, sizeof(addr));
		*at = sizeof(addr);
		return (gp_fn *)(uintptr_t)addr;
	}
	if ((n = gp_ref_len(pl, end)) < 0)
		_exit(GP_EXIT_PROTO);
	*at = (size_t)n;
	if (lastw != NULL && lastn == (size_t)n &&
	    memcmp(lastw, pl, (size_t)n) == 0)
		return lastfn;
	if (gp_ref_get(&pos, end, &r) < 0)
		_exit(GP_EXIT_PROTO);
	free(lastw);
	if ((lastw = malloc((size_t)n)) == NULL)
		_exit(GP_EXIT_NOMEM);
	memcpy(lastw, pl, (size_t)n);
	lastn = (size_t)n;
	lastfn = (gp_fn *)gp_ref_resolve(&r);
	return lastfn;
}

static void
serve(struct gp_pool *p, struct gp_worker *w, struct gp_ctx *ctx)
{
	struct gp_msg_hdr	 h;
	struct gp_buf		 in = { 0 };
	const uint8_t		*pl;
	gp_fn			*fn = NULL;
	uint8_t			*arg = NULL;
	size_t			 max = GP_MSG_MAX(p->o.window), at;
	int			 job = 0;

	for (;;) {
		gp_wio_next(ctx->fd, &in, max, &h, &pl);
		switch (h.type) {
		case GP_MSG_JOB:
			fn = job_fn(p, pl, pl + h.len, &at);
			job = 1;
			ctx->untimed = (h.id & GP_JOB_UNTIMED) != 0;
			free(arg);
			arg = NULL;
			if (h.len > at) {
				if ((arg = malloc(h.len - at)) == NULL)
					_exit(GP_EXIT_NOMEM);
				memcpy(arg, pl + at, h.len - at);
			}
			break;
		case GP_MSG_GPUS:
			item_gpus(p, ctx, pl, (int)h.id);
			break;
		case GP_MSG_TASK:
			if (!job)
				_exit(GP_EXIT_PROTO);
			run_batch(p, w, ctx, fn, arg, pl, pl + h.len);
			ctx->nibus = 0;
			break;
		case GP_MSG_PIECE:
			item_piece(ctx, &h, pl);
			break;
		case GP_MSG_ACK:	/* of a reply a stop cut */
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
	ctx->max_msg = p->o.max_msg;
	ctx->win = p->o.window;
	ctx->stop = gp_wio_watch(p, fd);
}

/* (c) CPU, then memory, before anything allocates much: here, or, for
 * an exec'd worker, in its child before the exec (exec.c), which left
 * the results in the shared slot. */
static void
bind_place(struct gp_pool *p, struct gp_worker *w, struct gp_msg_ready *rd)
{
	int	 cpu_rc, mem_rc;

	if (p->execd) {
		cpu_rc = atomic_load(&w->shm->cpubind_rc);
		mem_rc = atomic_load(&w->shm->membind_rc);
	} else
		gp_wstart_bind(p, w, &cpu_rc, &mem_rc);
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
	if (gp_wio_watched()) {
		(void)fcntl(ctx->wfd, F_SETFL, O_NONBLOCK);
		(void)fcntl(ctx->fd, F_SETFL, O_NONBLOCK);	/* wio.c */
	}
}

/* Start-up in the order of design.md's invariant 3 ((a), the other fds,
 * was proc.c's), then serve. */
void
gp_worker_main(struct gp_pool *p, struct gp_worker *w, int fd, int wfd)
{
	struct gp_msg_ready	 rd;
	struct gp_ctx		 ctx;

	gp_wstart_signals(p);
	ctx_init(p, w, &ctx, fd, wfd);
	memset(&rd, 0, sizeof(rd));
	bind_place(p, w, &rd);
	gp_wstart_steps(p, w, &rd);	/* (c') the steps that may fail: nice */
	gp_wstart_threads(p, w);
	pick_gpu(p, w, &rd);
	send_ready(p, &ctx, &rd);
	serve(p, w, &ctx);
	/* NOTREACHED */
	_exit(0);
}
