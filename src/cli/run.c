/*
 * run.c: one run of gpupool-run in the master process: a single gp_run()
 * call whose feed streams the tasks file (next), records each attempt in
 * the joblog, retries failures and prints each task's output as a block
 * (done), and turns SIGINT, SIGTERM and SIGHUP, read from a signalfd,
 * into cancel and kill requests (ctl). Also the progress bar, the summary
 * and the exit status. Nothing here runs in a worker or in a signal
 * handler: the signals are blocked once the pool is up, right before the
 * signalfd that reads them is polled (workers reset their own mask).
 * Messages go through cli_err(), which clears the bar; task output,
 * messages and the bar go through a queue per stream that stdout and
 * stderr drain as they can (out_flush()).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define POOL_GRACE_EXTRA_MS	2000	/* the worker kills first */
#define BACKSTOP_EXTRA_MS	5000
#define BAR_PERIOD_NS		250000000LL
#define BAR_TICK_MS		1000	/* redraw while the run goes */
#define OUT_BACKLOG		(1u << 20)	/* output held before no new
						   task starts */
#define QUEUE_WORK_S		0.02	/* work queued per slot on a rank */
#define QUEUE_MAX		64	/* tasks queued per slot on a rank */

/* A task handed to the pool. The gp_item comes first: done() gets a
 * pointer to it and casts back. */
struct task {
	struct gp_item	 item;
	struct task	*next;		/* free list or retry queue */
	unsigned long	 seq;
	unsigned long	 line;
	unsigned	 attempt;	/* 1-based */
	int		 rank;		/* where it runs */
	int		 lost;		/* with its rank */
	int64_t		 real_ns;	/* when handed out */
	int64_t		 mono_ns;
	uint8_t		*buf;		/* task_hdr, command, NUL */
	size_t		 cap;
};

enum kind { K_OK, K_FAILED, K_STOPPED, K_NOTRUN };

/* What became of one attempt. */
struct outcome {
	enum kind	 kind;
	int		 exitval;
	int		 signal;
	int		 flags;
	int		 worker;
	double		 start;
	double		 runtime;
	const char	*out, *err, *msg;
	size_t		 outlen, errlen, msglen;
	uint64_t	 outcut, errcut;
	char		 why[160];
};

static struct run	*cur;	/* for the bar, in messages */

static void	halt_start(struct run *, int);

/*
 * Standard output and standard error. A reader that stops reading (a
 * pager left open, a FIFO, a terminal paused with ^S) must not stop the
 * master from acting on a signal, so task output, messages and the bar
 * are queued, each stream in its own struct outq, and written only as
 * far as the stream takes them without blocking; epfd says when it has
 * room again (EV_OUT, EV_ERR). O_NONBLOCK belongs to the file
 * description, which the shell and the reader's other writers share: it
 * is left alone. A pipe or terminal is written PIPE_BUF bytes at a time
 * after poll() says it has room (a pipe with room for a page takes that
 * much at once); what epoll refuses (a regular file, /dev/null) never
 * blocks for long and is written whole. When stderr is the same file
 * (2>&1, a terminal), messages and the bar take stdout's queue, so that
 * they stay in order with the output. A write error on stdout fails the
 * run; on stderr it only drops what stderr was to show.
 */
static void
out_fail(struct run *r, struct outq *q, int err)
{
	q->err = err;
	gp_buf_release(&q->buf);
	if (err == -ECANCELED || q->fd != STDOUT_FILENO)
		return;
	r->fatal = 1;
	r->out_halt = 1;
	/* With 2>&1 this fails as well, at once. */
	cli_err("cannot write standard output: %s; stopping", strerror(-err));
	halt_start(r, RC_CANCEL);
}

static void
out_flush(struct run *r, struct outq *q)
{
	struct pollfd		 pfd = { q->fd, POLLOUT, 0 };
	struct epoll_event	 ev;
	size_t			 n;
	ssize_t			 w;

	while (q->buf.len > q->buf.off && !q->err) {
		n = q->buf.len - q->buf.off;
		if (q->poll) {
			if (poll(&pfd, 1, 0) != 1)
				break;
			if (n > PIPE_BUF)
				n = PIPE_BUF;
		}
		if ((w = write(q->fd, q->buf.data + q->buf.off, n)) == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)	/* an inherited O_NONBLOCK */
				break;
			out_fail(r, q, -errno);
			return;
		}
		gp_buf_consume(&q->buf, (size_t)w);
	}
	if (q->poll && !q->armed && !q->err && q->buf.len > q->buf.off) {
		ev.events = EPOLLOUT | EPOLLONESHOT;
		ev.data.u32 = (uint32_t)q->ev;
		if (epoll_ctl(r->epfd, EPOLL_CTL_MOD, q->fd, &ev) == 0)
			q->armed = 1;
	}
}

/* Bytes not written yet. */
static size_t
out_left(const struct outq *q)
{
	return q->buf.len - q->buf.off;
}

/* The queue that bytes for fd (stdout, or stderr) take. */
static struct outq *
out_q(struct run *r, int fd)
{
	return fd == STDOUT_FILENO || r->out_same ? &r->oq : &r->eq;
}

/* Bytes for fd: through its queue while the run owns stdout and stderr,
 * else written at once; nothing once its queue failed or was given up
 * (a stream that blocked past the end of the run blocks no more). */
static void
emit(struct run *r, int fd, const void *p, size_t n)
{
	struct outq	*q = r != NULL ? out_q(r, fd) : NULL;

	if (q != NULL && q->err)
		return;
	if (q == NULL || !r->out_on) {
		(void)gp_write_full(fd, p, n);
		return;
	}
	if (gp_buf_add(&q->buf, p, n) < 0) {
		out_fail(r, q, -ENOMEM);
		return;
	}
	out_flush(r, q);
}

/* Over OUT_BACKLOG waits for stdout or stderr: start nothing new
 * meanwhile. */
static int
out_backlog(const struct run *r)
{
	return out_left(&r->oq) > OUT_BACKLOG || out_left(&r->eq) > OUT_BACKLOG;
}

/* Whether stdout failed since the last call: the pool then stops the
 * running tasks, as --halt now does. */
static int
out_halted(struct run *r)
{
	int	 h = r->out_halt;

	r->out_halt = 0;
	return h;
}

/*
 * After the run: write what is left, for as long as stdout and stderr
 * take it, but once a signal came, for no longer than the grace period
 * it gives the tasks (a second signal: not at all).
 */
static void
out_drain(struct run *r)
{
	struct pollfd	 pfd[3];
	int64_t		 now, dl;
	size_t		 n;

	pfd[2].fd = r->sfd;
	pfd[2].events = POLLIN;
	for (;;) {
		out_flush(r, &r->oq);
		out_flush(r, &r->eq);
		n = out_left(&r->oq);
		if (n == 0 && out_left(&r->eq) == 0)
			break;
		now = gp_now_ns();
		dl = r->sig ? r->sig_ns + (int64_t)r->o->grace_ms * 1000000 :
		    -1;
		if (r->nsig > 1 || (r->sig && dl <= now)) {
			if (n > 0) {
				out_fail(r, &r->oq, -ECANCELED);
				if (!r->out_same)
					cli_err("got SIG%s: %zu bytes of "
					    "output were not written (standard "
					    "output takes none)",
					    sigabbrev_np(r->sig), n);
			}
			if (out_left(&r->eq) > 0)
				out_fail(r, &r->eq, -ECANCELED);
			break;
		}
		pfd[0].fd = n > 0 ? STDOUT_FILENO : -1;
		pfd[1].fd = out_left(&r->eq) > 0 ? STDERR_FILENO : -1;
		pfd[0].events = pfd[1].events = POLLOUT;
		if (poll(pfd, 3, gp_poll_ms(dl, now)) == -1 && errno != EINTR)
			break;
		if (pfd[2].revents)
			(void)run_signals(r);
	}
	r->out_on = 0;
}

/* The progress bar: one line on stderr, redrawn on events at most
 * every BAR_PERIOD_NS, and every BAR_TICK_MS while the run goes; on a
 * terminal, no wider than it (a wrapped line leaves its first part in
 * the scrollback). */
static void
bar_clear(struct run *r)
{
	char	 sp[256];
	size_t	 n;

	if (r == NULL || !r->bar_shown)
		return;
	r->bar_shown = 0;
	if (r->tty)
		emit(r, STDERR_FILENO, "\r\033[K", 4);
	else {
		n = r->bar_len < sizeof(sp) - 2 ? r->bar_len : sizeof(sp) - 2;
		sp[0] = '\r';
		memset(sp + 1, ' ', n);
		sp[n + 1] = '\r';
		emit(r, STDERR_FILENO, sp, n + 2);
	}
}

/* The terminal's width, now and after each SIGWINCH. */
static void
bar_size(struct run *r)
{
	struct winsize	 ws;

	if (r->tty && ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0)
		r->bar_cols = ws.ws_col;
}

static void
fmt_secs(char *buf, size_t len, double s)
{
	long	 t = (long)(s + 0.5);

	if (t >= 3600)
		snprintf(buf, len, "%ldh%02ldm", t / 3600, t / 60 % 60);
	else if (t >= 60)
		snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
	else
		snprintf(buf, len, "%lds", t);
}

/* Tasks running: here, and on each rank at most one per slot (the rest
 * of what it holds waits in its queue). */
static size_t
running(const struct run *r)
{
	size_t	 n = r->inflight - r->remote;
	int	 i;

	for (i = 1; i < r->npeer; i++)
		n += r->peer[i].nout < (size_t)r->peer[i].nw ?
		    r->peer[i].nout : (size_t)r->peer[i].nw;
	return n;
}

static void
bar_draw(struct run *r, int force)
{
	char		 line[240], tot[32], eta[48] = "", el_s[32];
	int64_t		 now = gp_now_ns();
	double		 el, rate;
	unsigned long	 done = r->ok + r->failed + r->stopped;
	size_t		 pfx = r->tty ? 4 : 1;
	int		 n;

	/* Nor while stderr takes nothing (a terminal paused with ^S): a
	 * redraw that waits is dropped, not queued. */
	if (!r->bar || r->t0 == 0 ||
	    (!force && now - r->bar_last < BAR_PERIOD_NS) ||
	    out_left(out_q(r, STDERR_FILENO)) > 0)
		return;
	r->bar_last = now;
	el = (double)(now - r->t0) / 1e9;
	rate = el > 0 ? (double)done / el : 0;
	fmt_secs(el_s, sizeof(el_s), el);
	if (r->total >= 0)
		snprintf(tot, sizeof(tot), "%ld", r->total);
	else
		snprintf(tot, sizeof(tot), "?");
	if (r->total >= 0 && rate > 0 && (unsigned long)r->total >= done) {
		memcpy(eta, ", ETA ", 7);
		fmt_secs(eta + 6, sizeof(eta) - 6,
		    (double)((unsigned long)r->total - done) / rate);
	}
	n = snprintf(line, sizeof(line), "%s%s: %lu/%s done, %zu running, "
	    "%lu failed, %.1f/s, %s elapsed%s", r->tty ? "\r\033[K" : "\r",
	    CLI_NAME, done, tot, running(r), r->failed, rate, el_s, eta);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line))
		n = sizeof(line) - 1;
	/* Short of the last column: a character there wraps on some
	 * terminals. */
	if (r->bar_cols > 1 && (size_t)n > pfx + (size_t)r->bar_cols - 1)
		n = (int)pfx + r->bar_cols - 1;
	if (!r->tty && r->bar_shown && (size_t)n < r->bar_len + 1)
		bar_clear(r);
	emit(r, STDERR_FILENO, line, (size_t)n);
	r->bar_len = (size_t)n - 1;
	r->bar_shown = 1;
}

static void
say(const char *pfx, const char *fmt, va_list ap)
{
	char	 buf[1024];
	int	 n;

	bar_clear(cur);
	if (cur != NULL && ranks_rank(cur->rk) > 0)
		n = snprintf(buf, sizeof(buf), "%s (rank %d): %s", CLI_NAME,
		    ranks_rank(cur->rk), pfx);
	else
		n = snprintf(buf, sizeof(buf), "%s: %s", CLI_NAME, pfx);
	if (n < 0 || (size_t)n >= sizeof(buf))
		return;
	vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	n = (int)strlen(buf);
	buf[n++] = '\n';
	emit(cur, STDERR_FILENO, buf, (size_t)n);
}

void
cli_err(const char *fmt, ...)
{
	va_list	 ap;

	va_start(ap, fmt);
	say("", fmt, ap);
	va_end(ap);
}

void
cli_warn(const char *fmt, ...)
{
	va_list	 ap;

	va_start(ap, fmt);
	say("warning: ", fmt, ap);
	va_end(ap);
}

/* A notice about a task; --quiet drops it. */
static void __attribute__((format(printf, 2, 3)))
note(const struct run *r, const char *fmt, ...)
{
	va_list	 ap;

	if (r->o->quiet)
		return;
	va_start(ap, fmt);
	say("", fmt, ap);
	va_end(ap);
}

/* In each worker: a SIGTERM or SIGHUP sent to the whole process group
 * (a launcher ending an MPI job, systemd, a closed terminal) is the
 * master's to act on, as ^C is: it stops the tasks (TERM, grace, KILL)
 * and records them. Workers still leave with the master (EOF on their
 * stop fd); tasks start with every signal at its default. The joblog and
 * --results DIR are locked before the pool forks (nothing may wait on a
 * lock once ranks are up): the worker's copies of the locked fds go, or
 * the locks would outlive a SIGKILLed master for as long as its workers
 * (a second run told to wait for a dead pid). An OFD lock stays with the
 * master's descriptor. */
static int
worker_init(struct gp_ctx *ctx, void *arg)
{
	(void)signal(SIGTERM, SIG_IGN);
	(void)signal(SIGHUP, SIG_IGN);
	if (cur != NULL && cur->jl.fd > STDERR_FILENO) {
		close(cur->jl.fd);
		cur->jl.fd = -1;
	}
	if (cur != NULL && cur->rlock >= 0) {
		close(cur->rlock);
		cur->rlock = -1;
	}
	return 0;
}

/* hwloc reads the whole of a topology file: /dev/zero would never end,
 * a FIFO with no writer never start. Only a regular file will do. */
static int
topology_check(const char *path, const char *what)
{
	struct stat	 st;

	if (path == NULL || *path == '\0')
		return 0;
	if (stat(path, &st) == -1) {
		cli_err("%s: cannot read '%s': %s", what, path,
		    strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		cli_err("%s: '%s' is not a regular file (an hwloc XML "
		    "topology)", what, path);
		return -1;
	}
	return 0;
}

static void
pool_opts(const struct opts *o, struct gp_pool_opts *po, unsigned flags,
    char *err, size_t errlen)
{
	uint64_t	 b;

	memset(po, 0, sizeof(*po));
	po->gpus = o->gpus;
	po->fake_gpus = o->fake_gpus;
	po->per_gpu = o->per_gpu;
	po->topology_xml = o->topology;
	po->fake_busids = o->fake_busids;
	/* The worker stops its task itself (TERM, grace, KILL); the pool's
	 * own limits are only a backstop for a worker that does not. */
	b = o->grace_ms + POOL_GRACE_EXTRA_MS;
	po->grace_ms = b <= UINT_MAX ? (unsigned)b : UINT_MAX;
	b = o->timeout_ms ? o->timeout_ms + o->grace_ms + BACKSTOP_EXTRA_MS : 0;
	po->timeout_ms = b <= UINT_MAX ? (unsigned)b : 0;
	po->max_msg = 2 * (size_t)OUTPUT_MAX + LINE_MAX_BYTES + 65536;
	po->init = worker_init;
	po->flags = GP_POOL_NO_PDEATHSIG | flags;
	po->errbuf = err;
	po->errlen = errlen;
}

int
run_pool_create(const struct opts *o, unsigned flags, struct gp_pool **pool)
{
	struct gp_pool_opts	 po;
	char			 err[512];
	int			 rc;

	/* Here, not in main(): with ranks, the one that cannot start says
	 * so to rank 0, which then stops them all. */
	if (topology_check(o->topology, "--topology") < 0 ||
	    (o->topology == NULL && topology_check(getenv("GPUPOOL_TOPOLOGY"),
	    "GPUPOOL_TOPOLOGY") < 0))
		return -EINVAL;
	pool_opts(o, &po, flags, err, sizeof(err));
	if ((rc = gp_pool_create(pool, &po)) < 0) {
		cli_err("%s", err[0] ? err : gp_strerror(rc));
		return rc;
	}
	return 0;
}

/* Resume: is seq recorded (as succeeded, for --resume-failed), and with
 * --results, is its exitval there (else its results are incomplete)?
 * Warns once when the joblog has another command under the same Seq. */
int
run_skip(void *arg, unsigned long seq, const char *cmd)
{
	struct run	*r = arg;
	char		*ev;
	int		 have;

	if (!joblog_done(&r->jl, seq, r->o->resume_failed))
		return 0;
	if (r->o->results != NULL) {
		if (asprintf(&ev, "%s/%lu/exitval", r->o->results, seq) == -1)
			return 0;	/* run it rather than guess */
		have = access(ev, F_OK) == 0;
		free(ev);
		if (!have)
			return 0;
	}
	if (joblog_changed(&r->jl, seq, cmd)) {
		r->changed++;
		if (!r->warned_change++)
			cli_warn("task %lu is '%s' but the joblog has another "
			    "command for it: was %s edited? (resume matches "
			    "tasks by number)", seq, cmd, r->o->file);
	}
	return 1;
}

/* mkdir -p, then prove we can create entries in it, and lock it (its
 * lock file) for the life of the run: two runs would mix their attempts'
 * files. Only rank 0 locks it: it alone hands out the Seqs, and the
 * other ranks of its run, on this node or another (NFSv4, Lustre and
 * GPFS make the lock cluster-wide), would lock one another out. */
static int
results_dir(struct run *r, const char *path)
{
	struct stat	 st;
	char		*p, *s;
	char		 probe[64], err[PATH_MAX + 256];
	int		 fd, rc = 0;

	if ((p = strdup(path)) == NULL)
		return -ENOMEM;
	for (s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, 0777) == -1 && errno != EEXIST)
			rc = -errno;
		*s = '/';
		if (rc < 0)
			break;
	}
	free(p);
	if (rc == 0 && mkdir(path, 0777) == -1 && errno != EEXIST)
		rc = -errno;
	if (rc < 0) {
		cli_err("cannot create results directory '%s': %s", path,
		    strerror(-rc));
		return rc;
	}
	if ((fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1) {
		rc = -errno;
		cli_err("cannot open results directory '%s': %s", path,
		    strerror(errno));
		return rc;
	}
	/* The rank too: ranks on other nodes may share a pid. */
	snprintf(probe, sizeof(probe), ".gpupool-run-probe.%d.%ld",
	    ranks_rank(r->rk), (long)getpid());
	if (mkdirat(fd, probe, 0700) == -1) {
		rc = -errno;
		cli_err("cannot write to results directory '%s': %s", path,
		    strerror(errno));
		close(fd);
		return rc;
	}
	(void)unlinkat(fd, probe, AT_REMOVEDIR);
	if (ranks_rank(r->rk) > 0)
		return fd;
	/* O_NONBLOCK: a FIFO planted there must not block open(). */
	if ((r->rlock = openat(fd, RESULTS_LOCK, O_RDWR | O_CREAT | O_NOFOLLOW |
	    O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0666)) == -1 ||
	    fstat(r->rlock, &st) == -1 || !S_ISREG(st.st_mode)) {
		rc = r->rlock == -1 ? -errno : -EINVAL;
		cli_err("cannot lock results directory '%s': %s/%s: %s", path,
		    path, RESULTS_LOCK, rc == -EINVAL ? "not a regular file" :
		    strerror(-rc));
		close(fd);
		return rc;
	}
	if ((rc = file_lock(r->rlock, r->o->wait_lock, "results directory",
	    path, err, sizeof(err))) < 0) {
		cli_err("%s", err);
		close(fd);
		return rc;
	}
	return fd;
}

static struct task *
task_new(struct run *r)
{
	struct task_hdr	 h;
	struct task	*t;
	size_t		 need = sizeof(h) + r->in.llen + 1;
	uint8_t		*b;

	if ((t = r->free) != NULL)
		r->free = t->next;
	else if ((t = calloc(1, sizeof(*t))) == NULL)
		return NULL;
	if (need > t->cap) {
		if ((b = realloc(t->buf, need)) == NULL) {
			t->next = r->free;
			r->free = t;
			return NULL;
		}
		t->buf = b;
		t->cap = need;
	}
	memcpy(t->buf + sizeof(h), r->in.line, r->in.llen + 1);
	t->item.in = t->buf;
	t->item.inlen = need;
	t->seq = r->in.seq;
	t->line = r->in.first;
	t->attempt = 1;
	t->rank = 0;
	t->lost = 0;
	t->next = NULL;
	r->handed++;
	if (r->total >= 0 && r->handed > (unsigned long)r->total)
		r->total = (long)r->handed;	/* the file grew */
	return t;
}

static void
task_free(struct run *r, struct task *t)
{
	/* Keep few large buffers: a 1 MiB task line must not pin 1 MiB in
	 * every pooled task. */
	if (t->cap > 4096) {
		free(t->buf);
		t->buf = NULL;
		t->cap = 0;
	}
	t->next = r->free;
	r->free = t;
}

static const char *
task_cmd(const struct task *t)
{
	return (const char *)t->buf + sizeof(struct task_hdr);
}

/* Fill in the header and stamp a task as handed out to rank. */
static void
hand(struct run *r, struct task *t, int rank)
{
	rp_task_hdr(t->buf, t->item.inlen, t->seq, t->attempt);
	t->item.out = NULL;
	t->item.outlen = 0;
	t->item.status = GP_NOTRUN;
	t->item.code = 0;
	t->item.worker = -1;
	t->item.attempts = 0;
	t->rank = rank;
	t->lost = 0;
	t->real_ns = gp_clock_ns(CLOCK_REALTIME);
	t->mono_ns = gp_now_ns();
	r->inflight++;
	bar_draw(r, 0);
}

static void	ranks_ctl(struct run *, int);

/* Read no more input: EOF, an error, or halting. */
static void
input_stop(struct run *r)
{
	if (r->input_done)
		return;
	r->input_done = 1;
}

/* Start nothing new. Queued retries end as the failures they were; the
 * other ranks are told to stop (how, the caller says). */
static void
halt_start(struct run *r, int how)
{
	struct task	*t;

	r->halting = 1;
	input_stop(r);
	while ((t = r->rq) != NULL) {
		r->rq = t->next;
		r->failed++;
		task_free(r, t);
	}
	r->rq_tail = NULL;
	if (how)
		ranks_ctl(r, how);
}

/* The next task to run anywhere: a retry first, then the input.
 * GP_FEED_ITEM (*tp), GP_FEED_AGAIN (pollable input, no whole line yet),
 * or GP_FEED_END (no more input; retries may still come). */
static int
source(struct run *r, struct task **tp)
{
	struct task	*t;
	int		 rc;

	if (!r->halting && (t = r->rq) != NULL) {
		if ((r->rq = t->next) == NULL)
			r->rq_tail = NULL;
		*tp = t;
		return GP_FEED_ITEM;
	}
	while (!r->halting && !r->input_done) {
		rc = tasks_next(&r->in);
		if (rc == TASKS_AGAIN)
			return GP_FEED_AGAIN;
		if (rc == TASKS_LINE) {
			if (run_skip(r, r->in.seq, r->in.line)) {
				r->skipped++;
				continue;
			}
			if ((*tp = task_new(r)) != NULL)
				return GP_FEED_ITEM;
			cli_err("out of memory");
		} else if (rc < 0)
			cli_err("%s", r->in.err);
		if (rc != TASKS_EOF) {
			/* Run no more; let the running ones finish. */
			r->fatal = 1;
			halt_start(r, RC_CANCEL);
		}
		input_stop(r);
	}
	return GP_FEED_END;
}

static int
feed_next(void *arg, struct gp_item **item)
{
	struct run	*r = arg;
	struct task	*t;
	int		 rc;

	/* Until stdout takes more (EV_OUT wakes the pool's poll). */
	if (out_backlog(r))
		return GP_FEED_WAIT;
	if ((rc = source(r, &t)) == GP_FEED_ITEM) {
		hand(r, t, 0);
		*item = &t->item;
		return GP_FEED_ITEM;
	}
	if (rc == GP_FEED_AGAIN)
		return GP_FEED_AGAIN;	/* the pool polls in_fd */
	/* Nothing new will come, but a running task may fail and be
	 * retried, here or on another rank: the end is only when none is
	 * out. */
	return r->inflight > 0 ? GP_FEED_WAIT : GP_FEED_END;
}

static const char *
gpu_of(const struct run *r, int rank, int worker)
{
	const struct peer	*p = &r->peer[rank];

	if (worker < 0 || worker >= p->nw)
		return "-";
	return p->gpu_id[p->w_gpu[worker]];
}

static void
outcome(const struct run *r, const struct task *t, struct outcome *oc)
{
	const struct gp_item	*it = &t->item;
	struct task_reply	 rp;
	const char		*p;

	memset(oc, 0, sizeof(*oc));
	oc->worker = it->worker;
	oc->exitval = -1;
	oc->start = (double)t->real_ns / 1e9;
	oc->runtime = (double)(gp_now_ns() - t->mono_ns) / 1e9;
	if (it->out != NULL && it->outlen >= sizeof(rp)) {
		memcpy(&rp, it->out, sizeof(rp));
		if (sizeof(rp) + rp.outlen + rp.errlen + rp.msglen !=
		    it->outlen)
			goto noreply;
		if ((rp.flags & R_STOPPED) && (rp.flags & R_NOSTART)) {
			oc->kind = K_NOTRUN;
			return;
		}
		p = (const char *)it->out + sizeof(rp);
		oc->out = p;
		oc->outlen = rp.outlen;
		oc->err = p + rp.outlen;
		oc->errlen = rp.errlen;
		oc->msg = p + rp.outlen + rp.errlen;
		oc->msglen = rp.msglen;
		oc->outcut = rp.outcut;
		oc->errcut = rp.errcut;
		oc->exitval = rp.exitval;
		oc->signal = rp.signal;
		oc->flags = rp.flags;
		oc->start = (double)rp.start_ns / 1e9;
		oc->runtime = (double)rp.run_ns / 1e9;
		/* Its results not written: failed, and not by its code. */
		if (rp.flags & R_NORESULT)
			oc->exitval = -1;
		if (rp.exitval == 0 && rp.signal == 0 &&
		    !(rp.flags & (R_TIMEDOUT | R_NOSTART | R_NORESULT)))
			oc->kind = K_OK;
		else if (rp.flags & R_STOPPED)
			oc->kind = K_STOPPED;
		else
			oc->kind = K_FAILED;
		return;
	}
noreply:
	oc->kind = K_FAILED;
	oc->signal = SIGKILL;
	if (t->lost) {
		snprintf(oc->why, sizeof(oc->why), "its rank %d (%s) was lost",
		    t->rank, r->peer[t->rank].host);
		return;
	}
	switch (it->status) {
	case GP_CANCELED:
		/* Killed with its worker (a second ^C), or never started. */
		oc->kind = it->attempts > 0 ? K_STOPPED : K_NOTRUN;
		break;
	case GP_NOTRUN:
		oc->kind = K_NOTRUN;
		break;
	case GP_CRASHED:
		if (it->code > 128)
			snprintf(oc->why, sizeof(oc->why), "its worker was "
			    "killed by signal %d", it->code - 128);
		else
			snprintf(oc->why, sizeof(oc->why), "its worker exited "
			    "with status %d", it->code);
		break;
	case GP_TIMEDOUT:
		oc->flags |= R_TIMEDOUT;
		snprintf(oc->why, sizeof(oc->why), "its worker did not stop "
		    "it in time and was killed");
		break;
	case GP_ERROR:
		snprintf(oc->why, sizeof(oc->why), "%s", gp_strerror(it->code));
		break;
	default:
		snprintf(oc->why, sizeof(oc->why), "its worker sent no result");
		break;
	}
}

/* "exit status 3", "killed by signal 9 (Killed)", "timed out (...)". */
static void
describe(const struct run *r, const struct outcome *oc, char *buf,
    size_t len)
{
	char	 tmo[32];

	if (oc->flags & R_TIMEDOUT) {
		fmt_secs(tmo, sizeof(tmo), (double)r->o->timeout_ms / 1000);
		snprintf(buf, len, "timed out after %s (%s)", tmo,
		    oc->signal ? strsignal(oc->signal) : "exited");
	} else if (oc->why[0])
		snprintf(buf, len, "%s", oc->why);
	else if (oc->msglen > 0)
		snprintf(buf, len, "%.*s", (int)oc->msglen, oc->msg);
	else if (oc->signal)
		snprintf(buf, len, "killed by signal %d (%s)", oc->signal,
		    strsignal(oc->signal));
	else
		snprintf(buf, len, "exit status %d", oc->exitval);
}

/* A finished task's output, as one block per stream. */
static void
print_output(struct run *r, const struct task *t, const struct outcome *oc)
{
	if (r->o->results != NULL)
		return;
	if (oc->outlen > 0 || oc->errlen > 0)
		bar_clear(r);
	if (oc->outlen > 0) {
		emit(r, STDOUT_FILENO, oc->out, oc->outlen);
		if (oc->out[oc->outlen - 1] != '\n')
			emit(r, STDOUT_FILENO, "\n", 1);
	}
	if (oc->errlen > 0) {
		emit(r, STDERR_FILENO, oc->err, oc->errlen);
		if (oc->err[oc->errlen - 1] != '\n')
			emit(r, STDERR_FILENO, "\n", 1);
	}
	if (oc->outcut || oc->errcut)
		cli_warn("task %lu: %llu bytes of its stdout and %llu of its "
		    "stderr were dropped (over %u MiB each; --results DIR "
		    "keeps everything)", t->seq,
		    (unsigned long long)oc->outcut,
		    (unsigned long long)oc->errcut, OUTPUT_MAX >> 20);
}

static void
requeue(struct run *r, struct task *t, int front)
{
	t->next = NULL;
	if (front) {
		t->next = r->rq;
		r->rq = t;
		if (r->rq_tail == NULL)
			r->rq_tail = t;
		return;
	}
	if (r->rq_tail != NULL)
		r->rq_tail->next = t;
	else
		r->rq = t;
	r->rq_tail = t;
}

/* One attempt ended, here or on another rank: record it, print its
 * output, retry it or count it. Returns nonzero to cancel the rest. */
static int
finish(struct run *r, struct task *t)
{
	struct gp_item	*it = &t->item;
	struct peer	*p = &r->peer[t->rank];
	struct outcome	 oc;
	struct jl_rec	 jr;
	char		 why[256];
	int		 rc, cancel = 0;

	r->inflight--;
	if (t->rank > 0)
		r->remote--;
	outcome(r, t, &oc);
	if (oc.kind == K_NOTRUN) {
		if (t->rank > 0 && !r->halting) {
			/* A rank gave it back unstarted: it runs elsewhere,
			 * as the same attempt. */
			gp_items_release(it, 1);
			requeue(r, t, 1);
			return 0;
		}
		if (t->attempt > 1)
			r->failed++;	/* its last run failed */
		else
			r->notrun++;
		goto out;
	}
	jr.seq = t->seq;
	jr.start = oc.start;
	jr.runtime = oc.runtime;
	jr.exitval = oc.exitval;
	jr.signal = oc.signal;
	jr.cmd = task_cmd(t);
	jr.gpu = gpu_of(r, t->rank, oc.worker);
	jr.host = r->npeer > 1 ? p->host : ":";
	if ((rc = joblog_append(&r->jl, &jr)) < 0 && !r->jl_broken) {
		/* Without its record a resume would run it again: stop. */
		cli_err("cannot write joblog '%s': %s", r->jl.path,
		    strerror(-rc));
		r->fatal = r->jl_broken = 1;
		halt_start(r, RC_CANCEL);
		cancel = 1;
	}
	if (oc.worker >= 0 && oc.worker < p->nw)
		p->busy_ns[p->w_gpu[oc.worker]] += (int64_t)(oc.runtime * 1e9);
	r->rt_sum += oc.runtime;
	r->rt_n++;
	p->ran++;
	describe(r, &oc, why, sizeof(why));
	if (oc.kind == K_FAILED && (int)t->attempt <= r->o->retries &&
	    !r->halting) {
		note(r, "task %lu failed (%s); retrying, attempt %u of %d",
		    t->seq, why, t->attempt + 1, r->o->retries + 1);
		t->attempt++;
		gp_items_release(it, 1);
		requeue(r, t, 0);
		bar_draw(r, 0);
		return cancel;
	}
	print_output(r, t, &oc);
	if (oc.msglen > 0 && oc.kind == K_OK)
		cli_warn("task %lu: %.*s", t->seq, (int)oc.msglen, oc.msg);
	switch (oc.kind) {
	case K_OK:
		r->ok++;
		break;
	case K_STOPPED:
		r->stopped++;
		break;
	default:
		r->failed++;
		note(r, "task %lu (%s:%lu) failed: %s", t->seq, r->in.name,
		    t->line, why);
		if (r->o->halt != HALT_NEVER && !r->halting &&
		    r->failed >= (unsigned long)r->o->halt_fail) {
			note(r, "halting after %lu failed task%s: %s",
			    r->failed, r->failed == 1 ? "" : "s",
			    r->o->halt == HALT_NOW ? "stopping the running "
			    "ones" : "letting the running ones finish");
			halt_start(r, r->o->halt == HALT_NOW ? RC_CANCEL : 0);
			if (r->o->halt == HALT_NOW)
				cancel = 1;	/* the pool stops the rest */
		}
		break;
	}
out:
	gp_items_release(it, 1);
	task_free(r, t);
	bar_draw(r, 0);
	return cancel | out_halted(r);
}

static int
feed_done(void *arg, struct gp_item *it)
{
	/* The gp_item is the first member of its task. */
	return finish(arg, (struct task *)it);
}

/* Tell every rank still with us what to do now (every rank, before the
 * run knows them: bad input, --dry-run). */
static void
ranks_ctl(struct run *r, int how)
{
	uint8_t	 v[RP_CTL_LEN];
	int	 i;

	rp_ctl_encode(v, how);
	for (i = 1; i < ranks_size(r->rk); i++)
		if (i >= r->npeer || (!r->peer[i].lost && !r->peer[i].bye))
			(void)ranks_send(r->rk, i, RM_CTL, v, sizeof(v));
	if (how == RC_END || how == RC_END_LOST)
		r->ended = 1;
}

/* Tasks a rank may hold: one per slot, plus, when tasks are short, a
 * queue per slot of about QUEUE_WORK_S of work (at most QUEUE_MAX tasks),
 * so that the round trip to rank 0 does not leave its slots idle. Tasks
 * as long as QUEUE_WORK_S never queue behind each other there, so skewed
 * work balances as well as on one machine. */
static size_t
window(const struct run *r, const struct peer *p)
{
	double	 mean, q;

	if (r->rt_n == 0)
		return (size_t)p->nw;
	mean = r->rt_sum / (double)r->rt_n;
	q = mean > 0 ? QUEUE_WORK_S / mean : QUEUE_MAX;
	if (q > QUEUE_MAX)
		q = QUEUE_MAX;
	return (size_t)p->nw * (1 + (size_t)q);
}

static void
input_arm(struct run *r)
{
	struct epoll_event	 ev;

	if (r->in_armed || !r->in.pollable || r->input_done)
		return;
	ev.events = EPOLLIN | EPOLLONESHOT;
	ev.data.u32 = EV_INPUT;
	if (epoll_ctl(r->epfd, EPOLL_CTL_MOD, r->in.fd, &ev) == 0)
		r->in_armed = 1;
}

/* Hand tasks to the ranks with room, the emptiest first. Rank 0's own
 * workers take theirs through feed_next(). */
static void
dispatch(struct run *r)
{
	struct peer	*p, *best;
	struct task	*t;
	size_t		 room, most;
	int		 i, bi, rc;

	if (r->npeer == 1 || r->t0 == 0)
		return;
	while (!out_backlog(r)) {
		best = NULL;
		most = 0;
		bi = 0;
		for (i = 1; i < r->npeer; i++) {
			p = &r->peer[i];
			if (!p->hello || p->bye || p->lost)
				continue;
			room = window(r, p);
			room = room > p->nout ? room - p->nout : 0;
			if (room > most) {
				most = room;
				best = p;
				bi = i;
			}
		}
		if (best == NULL)
			return;
		if ((rc = source(r, &t)) != GP_FEED_ITEM) {
			if (rc == GP_FEED_AGAIN)
				input_arm(r);
			return;
		}
		hand(r, t, bi);
		t->next = best->out;
		best->out = t;
		best->nout++;
		r->remote++;
		if (ranks_send(r->rk, bi, RM_TASKS, t->buf, t->item.inlen) < 0) {
			cli_err("out of memory");
			r->fatal = 1;
			halt_start(r, RC_CANCEL);
		}
	}
}

/* Take back what rank i holds: lost (they fail, or run again when
 * --retries allows) or given back unstarted (they run elsewhere). */
static int
reclaim(struct run *r, int i, int lost)
{
	struct peer	*p = &r->peer[i];
	struct task	*t;
	int		 cancel = 0;

	while ((t = p->out) != NULL) {
		p->out = t->next;
		p->nout--;
		t->lost = lost;
		cancel |= finish(r, t);
	}
	return cancel;
}

static int
lose(struct run *r, int i, const char *why)
{
	struct peer	*p = &r->peer[i];

	if (p->lost || p->bye)
		return 0;
	p->lost = 1;
	r->nlost++;
	ranks_forget(r->rk, i);
	cli_err("rank %d (%s) is lost: %s; %zu of its tasks %s", i,
	    p->host != NULL ? p->host : "?", why, p->nout, r->o->retries > 0 &&
	    !r->halting ? "run again elsewhere if --retries allows" :
	    "are counted failed");
	return reclaim(r, i, 1);
}

static int
on_hello(struct run *r, const struct rmsg *m)
{
	struct peer	*p = &r->peer[m->peer];
	struct rp_hello	 h;
	const char	*s;
	int		 g;

	if (p->hello || rp_hello_parse(m->data, m->len, &h) < 0)
		return -EPROTO;
	p->nw = (int)h.nw;
	p->ngpu = (int)h.ngpu;
	if ((p->w_gpu = calloc(h.nw, sizeof(*p->w_gpu))) == NULL ||
	    (p->gpu_id = calloc(h.ngpu, sizeof(*p->gpu_id))) == NULL ||
	    (p->busy_ns = calloc(h.ngpu, sizeof(*p->busy_ns))) == NULL)
		return -ENOMEM;
	memcpy(p->w_gpu, h.w_gpu, h.nw * sizeof(int32_t));
	if ((p->host = strdup(h.host)) == NULL)
		return -ENOMEM;
	for (g = 0, s = h.gpu_id; g < p->ngpu; g++, s += strlen(s) + 1)
		if ((p->gpu_id[g] = strdup(s)) == NULL)
			return -ENOMEM;
	p->hello = 1;
	return 0;
}

static int
on_results(struct run *r, const struct rmsg *m, int *cancel)
{
	struct peer	*p = &r->peer[m->peer];
	struct rresult	 rr;
	struct task	*t, **tp;
	const uint8_t	*out;
	size_t		 off = 0;
	ssize_t		 n;

	while (off < m->len) {
		if ((n = rp_results_next(m->data, m->len, off, &rr,
		    &out)) < 0)
			return (int)n;
		for (tp = &p->out; (t = *tp) != NULL; tp = &t->next)
			if (t->seq == rr.seq && t->attempt == rr.attempt)
				break;
		if (t != NULL) {	/* else a rank written off spoke */
			*tp = t->next;
			p->nout--;
			t->item.status = rr.status;
			t->item.code = rr.code;
			t->item.attempts = (unsigned)rr.attempts;
			t->item.worker = rr.worker;
			if (rr.outlen > 0) {
				if ((t->item.out = malloc(rr.outlen)) == NULL)
					return -ENOMEM;
				memcpy(t->item.out, out, rr.outlen);
				t->item.outlen = rr.outlen;
			}
			*cancel |= finish(r, t);
		}
		off += (size_t)n;
	}
	return 0;
}

/* Messages from the other ranks. */
static int
on_ranks(struct run *r)
{
	struct rmsg	*m;
	struct peer	*p;
	char		 err[256], why[300];
	int		 rc = 0, cancel = 0, i;

	while ((m = ranks_recv(r->rk, err, sizeof(err))) != NULL) {
		p = &r->peer[m->peer];
		if (p->lost || p->bye) {
			/* Written off, yet it speaks: it must stop. */
			if (p->lost && m->type != RM_BYE && m->type != RM_BEAT) {
				uint8_t v[RP_CTL_LEN];

				rp_ctl_encode(v, RC_KILL);
				(void)ranks_send(r->rk, m->peer, RM_CTL, v,
				    sizeof(v));
			}
			free(m);
			continue;
		}
		switch (m->type) {
		case RM_HELLO:
			rc = on_hello(r, m);
			break;
		case RM_RESULTS:
			rc = on_results(r, m, &cancel);
			break;
		case RM_BYE:
			if (!p->hello)
				cli_err("rank %d could not start (its own "
				    "message says why)", m->peer);
			p->bye = 1;
			ranks_forget(r->rk, m->peer);
			cancel |= reclaim(r, m->peer, 0);
			break;
		case RM_BEAT:
			break;
		default:
			rc = -EPROTO;
			break;
		}
		if (rc < 0) {
			snprintf(why, sizeof(why), "a bad message from it "
			    "(type %d, %zu bytes): %s", m->type, m->len,
			    strerror(-rc));
			cancel |= lose(r, m->peer, why);
			rc = 0;
		}
		free(m);
	}
	if (err[0] != '\0') {
		/* MPI is gone: the run goes on with this rank's slots. */
		cli_err("%s", err);
		r->fatal = 1;
		(void)epoll_ctl(r->epfd, EPOLL_CTL_DEL, ranks_fd(r->rk), NULL);
		for (i = 1; i < r->npeer; i++)
			cancel |= lose(r, i, "MPI failed");
	}
	return cancel ? GP_CTL_CANCEL : GP_CTL_GO_ON;
}

static int
on_timer(struct run *r)
{
	uint64_t	 n;
	char		 why[96];
	int		 i, cancel = 0;

	(void)!read(r->tfd, &n, sizeof(n));
	for (i = 1; i < r->npeer; i++) {
		if (r->peer[i].lost || r->peer[i].bye || !run_silent(r, i))
			continue;
		snprintf(why, sizeof(why), "no word from it for %.1f s "
		    "(--rank-timeout)", (double)r->o->rank_timeout_ms / 1000);
		cancel |= lose(r, i, why);
	}
	bar_draw(r, 0);
	return cancel ? GP_CTL_CANCEL : GP_CTL_GO_ON;
}

int
run_signals(struct run *r)
{
	struct signalfd_siginfo		 si;
	int				 got = 0;

	while (read(r->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGWINCH) {
			bar_size(r);
			if (r->bar_shown)
				bar_draw(r, 1);
			continue;
		}
		if (r->sig == 0) {
			r->sig = (int)si.ssi_signo;
			r->sig_ns = gp_now_ns();
		}
		r->nsig++;
		got++;
	}
	return got;
}

int
run_silent(const struct run *r, int peer)
{
	return ranks_silent(r->rk, peer) >= (int64_t)r->o->rank_timeout_ms *
	    1000000;
}

static int
on_signals(struct run *r)
{
	if (run_signals(r) == 0)
		return GP_CTL_GO_ON;
	if (r->nsig == 1) {
		halt_start(r, RC_CANCEL);
		/* No count: a task handed to a worker may not have started
		 * yet, and the summary counts it apart. */
		cli_err("got SIG%s: stopping the running tasks (again to kill "
		    "them now)", sigabbrev_np(r->sig));
		return GP_CTL_CANCEL;
	}
	halt_start(r, RC_KILL);
	cli_err("got SIG%s again: killing the running tasks",
	    sigabbrev_np(r->sig));
	return GP_CTL_KILL;
}

static int
feed_ctl(void *arg)
{
	struct run		*r = arg;
	struct epoll_event	 ev[4];
	struct outq		*q;
	int			 n, i, a, act = GP_CTL_GO_ON;

	n = epoll_wait(r->epfd, ev, 4, 0);
	for (i = 0; i < n; i++) {
		switch (ev[i].data.u32) {
		case EV_SIG:
			a = on_signals(r);
			break;
		case EV_RANKS:
			a = on_ranks(r);
			break;
		case EV_TIMER:
			a = on_timer(r);
			break;
		case EV_OUT:
		case EV_ERR:
			q = ev[i].data.u32 == EV_OUT ? &r->oq : &r->eq;
			q->armed = 0;	/* one shot */
			out_flush(r, q);
			a = out_halted(r) ? GP_CTL_CANCEL : GP_CTL_GO_ON;
			break;
		default:
			r->in_armed = 0;	/* one shot */
			a = GP_CTL_GO_ON;
			break;
		}
		if (a > act)
			act = a;
	}
	dispatch(r);
	return act;
}

/* Open the joblog for appending: --resume keeps it, +FILE too. */
static int
joblog_start(struct run *r)
{
	const char	*path = r->o->joblog;
	char		 err[512];
	int		 keep = r->o->resume || r->o->resume_failed;

	if (path == NULL)
		return 0;
	if (path[0] == '+' && path[1] != '\0') {
		path++;		/* GNU parallel's "append" */
		keep = 1;
	}
	if (joblog_open(&r->jl, path, keep, err, sizeof(err)) < 0) {
		cli_err("%s", err);
		return -1;
	}
	return 0;
}

/* This rank's slots and GPUs, in peer[0]. */
static int
map_workers(struct run *r, struct gp_pool *pool)
{
	struct gp_worker_info	 wi;
	struct peer		*p;
	int			 w;

	r->npeer = ranks_size(r->rk);
	if ((r->peer = calloc((size_t)r->npeer, sizeof(*r->peer))) == NULL)
		return -ENOMEM;
	p = &r->peer[0];
	p->nw = gp_pool_size(pool);
	if ((p->host = strdup(r->rk != NULL ? ranks_host(r->rk) : ":")) ==
	    NULL || (p->w_gpu = calloc((size_t)p->nw, sizeof(*p->w_gpu))) ==
	    NULL || (p->gpu_id = calloc((size_t)p->nw,
	    sizeof(*p->gpu_id))) == NULL || (p->busy_ns = calloc((size_t)p->nw,
	    sizeof(*p->busy_ns))) == NULL)
		return -ENOMEM;
	for (w = 0; w < p->nw; w++) {
		(void)gp_pool_info(pool, w, &wi);
		p->w_gpu[w] = wi.gpu;
		if (wi.gpu >= p->ngpu)
			p->ngpu = wi.gpu + 1;
		if (p->gpu_id[wi.gpu] == NULL &&
		    (p->gpu_id[wi.gpu] = strdup(wi.visible)) == NULL)
			return -ENOMEM;
	}
	p->hello = 1;
	return 0;
}

/* mpirun binds each rank to a core (two ranks or fewer) or a socket by
 * default, and its workers inherit that: say so when it leaves fewer
 * CPUs than slots. */
static void
bound_warn(const struct run *r)
{
	cpu_set_t	 cs;
	long		 online = sysconf(_SC_NPROCESSORS_ONLN);
	int		 n;

	if (sched_getaffinity(0, sizeof(cs), &cs) == -1)
		return;
	n = CPU_COUNT(&cs);
	if (n >= r->peer[0].nw || n >= online)
		return;
	cli_warn("the launcher bound this rank to %d of %ld CPUs: its %d "
	    "slots share them (mpirun --bind-to none, or give srun "
	    "--cpus-per-task; see docs/cluster.md)", n, online, r->peer[0].nw);
}

/*
 * The feed's control fd, an epoll set of: the signalfd; a timer for
 * silent ranks and for the bar; stdout and stderr, one shot each, when
 * a write to it would wait (rank 0); with ranks, the socket to the MPI process and
 * (one shot) a pollable input.
 */
static int
ctl_setup(struct run *r, const sigset_t *set)
{
	struct epoll_event	 ev;
	struct itimerspec	 its;
	struct stat		 so, se;
	struct outq		*q;
	int64_t			 ms = BAR_TICK_MS;
	int			 i;

	if ((r->sfd = signalfd(-1, set, SFD_CLOEXEC | SFD_NONBLOCK)) == -1 ||
	    (r->epfd = epoll_create1(EPOLL_CLOEXEC)) == -1)
		return -errno;
	ev.events = EPOLLIN;
	ev.data.u32 = EV_SIG;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->sfd, &ev) == -1)
		return -errno;
	if (ranks_rank(r->rk) == 0) {
		r->out_same = fstat(STDOUT_FILENO, &so) == 0 &&
		    fstat(STDERR_FILENO, &se) == 0 && so.st_dev == se.st_dev &&
		    so.st_ino == se.st_ino;
		for (i = 0; i < (r->out_same ? 1 : 2); i++) {
			q = i == 0 ? &r->oq : &r->eq;
			/* epoll refuses what never makes a write wait
			 * (EPERM): a regular file, /dev/null. */
			ev.events = EPOLLONESHOT;	/* armed when wanted */
			ev.data.u32 = (uint32_t)q->ev;
			if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, q->fd, &ev) == 0)
				q->poll = 1;
			else if (errno != EPERM)
				return -errno;
		}
		bar_size(r);
	}
	if (r->npeer > 1) {
		ms = (int64_t)r->o->rank_timeout_ms / 4;
		if (ms > 1000)
			ms = 1000;
		if (ms < 10)
			ms = 10;
	} else if (!r->bar)
		return 0;
	if ((r->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC |
	    TFD_NONBLOCK)) == -1)
		return -errno;
	memset(&its, 0, sizeof(its));
	its.it_interval.tv_sec = ms / 1000;
	its.it_interval.tv_nsec = (ms % 1000) * 1000000;
	its.it_value = its.it_interval;
	ev.events = EPOLLIN;
	ev.data.u32 = EV_TIMER;
	if (timerfd_settime(r->tfd, 0, &its, NULL) == -1 ||
	    epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->tfd, &ev) == -1)
		return -errno;
	if (r->npeer == 1)
		return 0;
	ev.data.u32 = EV_RANKS;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, ranks_fd(r->rk), &ev) == -1)
		return -errno;
	if (r->in.pollable) {
		ev.events = EPOLLONESHOT;	/* armed when wanted */
		ev.data.u32 = EV_INPUT;
		if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->in.fd, &ev) == -1)
			return -errno;
	}
	return 0;
}

/* Whether every rank is up; says which are not (a rank that could not
 * start said why, in on_ranks(); a lost one, in lose()). */
static int
all_hello(const struct run *r)
{
	int	 i, all = !r->fatal;

	for (i = 1; i < r->npeer; i++)
		all &= r->peer[i].hello && !r->peer[i].lost;
	return all;
}

/* Until every other rank has said hello (want_bye 0) or bye (1), or is
 * lost. Returns 0, or -EINTR when a signal ended the wait for hellos. */
static int
ranks_wait(struct run *r, int want_bye)
{
	struct pollfd	 pfd;
	int		 i, all;

	pfd.fd = r->epfd;
	pfd.events = POLLIN;
	for (;;) {
		for (i = 1, all = 1; i < r->npeer && all; i++)
			all = r->peer[i].lost || r->peer[i].bye ||
			    (!want_bye && r->peer[i].hello);
		if (all)
			return 0;
		if (poll(&pfd, 1, -1) == -1 && errno != EINTR)
			return -errno;
		/* No pool runs now: what ctl() asks of one has been done,
		 * or is moot. */
		(void)feed_ctl(r);
		if (!want_bye && r->sig)
			return -EINTR;
	}
}

/* ", 2 not started (--halt)": tasks handed out but stopped before they
 * ran, and those never read; from a pipe, only the first are known. */
static size_t
not_started(const struct run *r, char *buf, size_t len)
{
	unsigned long	 n = r->notrun;
	const char	*unread = "";
	char		 why[64];

	/* Without a halt, what was not read is not there (a tasks file
	 * cut short while it ran). */
	if (r->halting && r->total > (long)r->handed)
		n += (unsigned long)r->total - r->handed;
	else if (r->halting && r->total < 0 && !r->in.eof)
		unread = "the rest of the input not read";
	if (n == 0 && *unread == '\0')
		return 0;
	if (r->sig)
		snprintf(why, sizeof(why), "got SIG%s", sigabbrev_np(r->sig));
	else if (r->fatal || r->o->halt == HALT_NEVER)
		snprintf(why, sizeof(why), "after an error");
	else
		snprintf(why, sizeof(why), "--halt %s,fail=%d", r->o->halt ==
		    HALT_NOW ? "now" : "soon", r->o->halt_fail);
	if (n == 0)
		return (size_t)snprintf(buf, len, ", %s (%s)", unread, why);
	return (size_t)snprintf(buf, len, ", %lu not started%s%s (%s)", n,
	    *unread != '\0' ? " and " : "", unread, why);
}

static void
summary(struct run *r)
{
	char		 buf[1024], wall[32];
	struct peer	*p;
	int64_t		 busy;
	double		 el;
	size_t		 n;
	int		 g, i;

	el = (double)(gp_now_ns() - r->t0) / 1e9;
	bar_clear(r);
	if (r->o->quiet)
		return;
	fmt_secs(wall, sizeof(wall), el);
	if (el < 60)
		snprintf(wall, sizeof(wall), "%.1fs", el);
	n = (size_t)snprintf(buf, sizeof(buf), "%lu ok, %lu failed", r->ok,
	    r->failed);
	if (r->stopped)
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, ", %lu stopped",
		    r->stopped);
	if (r->skipped)
		n += (size_t)snprintf(buf + n, sizeof(buf) - n,
		    ", %lu skipped (in the joblog)", r->skipped);
	n += not_started(r, buf + n, sizeof(buf) - n);
	n += (size_t)snprintf(buf + n, sizeof(buf) - n, " in %s; busy:", wall);
	p = &r->peer[0];
	for (g = 0; r->npeer == 1 && g < p->ngpu && n < sizeof(buf) - 40; g++)
		n += (size_t)snprintf(buf + n, sizeof(buf) - n,
		    "%s GPU %d %.0f%%", g ? "," : "", g, el > 0 ? 100.0 *
		    (double)p->busy_ns[g] / 1e9 / el / r->o->per_gpu : 0.0);
	for (i = 0; r->npeer > 1 && i < r->npeer && n < sizeof(buf) - 80;
	    i++) {
		p = &r->peer[i];
		for (g = 0, busy = 0; g < p->ngpu; g++)
			busy += p->busy_ns[g];
		n += (size_t)snprintf(buf + n, sizeof(buf) - n,
		    "%s rank %d (%s) %.0f%% %lu task%s%s", i ? "," : "", i,
		    p->host != NULL ? p->host : "?", el > 0 && p->nw > 0 ?
		    100.0 * (double)busy / 1e9 / el / p->nw : 0.0, p->ran,
		    p->ran == 1 ? "" : "s", p->lost ? ", lost" : "");
	}
	cli_err("%s", buf);
	if (r->changed > 1)
		cli_warn("%lu skipped tasks had another command in the joblog",
		    r->changed);
}

static int
exit_code(const struct run *r)
{
	if (r->sig)
		return 128 + r->sig;
	if (r->fatal)
		return EXIT_FATAL;
	if (r->failed > 100)
		return 101;
	return (int)r->failed;
}

int
launcher_mpi(void)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE",
	    "PMIX_RANK", "PMI_RANK", "PMI_SIZE", NULL };
	int	 i;

	for (i = 0; vars[i] != NULL; i++)
		if (getenv(vars[i]) != NULL)
			return 1;
	return 0;
}

long
launcher_procs(const char **var)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE",
	    "PMI_SIZE", "SLURM_STEP_NUM_TASKS", NULL };
	const char	*v;
	long		 n, most = 1;
	int		 i;

	*var = "";
	for (i = 0; vars[i] != NULL; i++) {
		if ((v = getenv(vars[i])) != NULL && (n = atol(v)) > most) {
			most = n;
			*var = vars[i];
		}
	}
	return most;
}

int
run_block_signals(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGHUP);
	sigaddset(set, SIGWINCH);
	return sigprocmask(SIG_BLOCK, set, NULL) == -1 ? -errno : 0;
}

int
run_tasks(struct run *r)
{
	const struct opts	*o = r->o;
	struct run_conf		 conf;
	struct gp_feed		 feed;
	struct gp_pool		*pool = NULL;
	struct task		*t;
	sigset_t		 set;
	int			 rc, rfd = -1;

	r->tty = isatty(STDERR_FILENO);
	r->bar = o->bar || (r->tty && !o->quiet);
	cur = r;
	memset(&conf, 0, sizeof(conf));
	conf.timeout_ms = o->timeout_ms;
	conf.grace_ms = o->grace_ms;
	conf.results_fd = -1;
	conf.rank = ranks_rank(r->rk);
	conf.mpi = r->rk != NULL;
	/* Workers are forked with the results directory open. */
	if (o->results != NULL && (rfd = conf.results_fd =
	    results_dir(r, o->results)) < 0)
		goto fail;

	if (run_pool_create(o, 0, &pool) < 0)
		goto fail;
	if (map_workers(r, pool) < 0) {
		cli_err("out of memory");
		goto fail;
	}
	/* Blocked only now, right before the signalfd that reads them is
	 * polled: until then ^C ends gpupool-run as it ends any program,
	 * whatever may make it wait (its workers see their pipes close and
	 * leave). With ranks, main() blocked them before MPI's threads
	 * started. */
	if (run_block_signals(&set) < 0) {
		cli_err("cannot set up signals: %s", strerror(errno));
		goto fail;
	}
	if ((rc = ctl_setup(r, &set)) < 0) {
		cli_err("cannot set up signals: %s", strerror(-rc));
		goto fail;
	}
	if (r->rk != NULL)
		bound_warn(r);
	if (ranks_rank(r->rk) > 0) {
		rc = rank_serve(r, pool, &conf);
		gp_pool_destroy(pool);
		if (rfd >= 0)
			close(rfd);
		return rc;
	}
	/* Every rank's pool is up before anything runs or the joblog is
	 * touched, as with a bad --gpus on one machine. */
	if (r->npeer > 1 && (ranks_wait(r, 0) < 0 || !all_hello(r))) {
		if (r->sig)
			cli_err("got SIG%s while the ranks started",
			    sigabbrev_np(r->sig));
		goto fail;
	}
	/* Only now that the GPUs are known good is an old joblog
	 * truncated (workers closed their copy: worker_init()). */
	if (joblog_start(r) < 0)
		goto fail;

	memset(&feed, 0, sizeof(feed));
	feed.next = feed_next;
	feed.done = feed_done;
	feed.ctl = feed_ctl;
	feed.ctl_fd = r->epfd;
	/* A regular file or /dev/null never makes a read wait. */
	feed.in_fd = r->in.pollable ? r->in.fd : -1;
	feed.arg = r;
	r->t0 = gp_now_ns();
	r->out_on = 1;
	bar_draw(r, 1);
	dispatch(r);
	rc = gp_run(pool, r->fn, &conf, sizeof(conf), &feed);
	if (rc < 0) {
		cli_err("%s", gp_strerror(rc));
		r->fatal = 1;
	}
	if (r->npeer > 1) {
		/* Canceled: what the other ranks still run ends there and
		 * is recorded here. */
		ranks_ctl(r, r->nlost ? RC_END_LOST : RC_END);
		(void)ranks_wait(r, 1);
	}
	while ((t = r->rq) != NULL) {	/* canceled before a retry */
		r->rq = t->next;
		r->failed++;
		task_free(r, t);
	}
	gp_pool_destroy(pool);
	summary(r);
	if (r->sig && r->stopped && o->joblog != NULL && !o->quiet)
		cli_err("%lu stopped task%s recorded with signal %d: "
		    "--resume-failed runs %s again", r->stopped,
		    r->stopped == 1 ? " is" : "s are", SIGTERM,
		    r->stopped == 1 ? "it" : "them");
	out_drain(r);
	if (rfd >= 0)
		close(rfd);
	return exit_code(r);

fail:
	/* Rank 0 stops the run when a rank could not start. */
	if (ranks_rank(r->rk) > 0)
		(void)rank_serve(r, NULL, &conf);
	gp_pool_destroy(pool);
	if (rfd >= 0)
		close(rfd);
	return EXIT_FATAL;
}

int
run_ranks_end(struct run *r, int rc)
{
	int	 clean;

	if (r->rk == NULL)
		return rc;
	if (ranks_rank(r->rk) == 0 && !r->ended)
		ranks_ctl(r, RC_END);	/* the other ranks wait for word */
	clean = r->nlost == 0;
	if (ranks_rank(r->rk) == 0 && !clean && !r->o->quiet)
		cli_err("a rank was lost: ending the MPI job (exit status %d)",
		    rc);
	if (ranks_end(r->rk, clean, rc) < 0 && clean && rc == 0)
		rc = EXIT_FATAL;
	r->rk = NULL;
	return rc;
}

void
run_init(struct run *r, const struct opts *o)
{
	memset(r, 0, sizeof(*r));
	r->o = o;
	r->fn = task_run;
	r->total = -1;
	r->sfd = r->epfd = r->tfd = r->rlock = -1;
	r->oq.fd = STDOUT_FILENO;
	r->oq.ev = EV_OUT;
	r->eq.fd = STDERR_FILENO;
	r->eq.ev = EV_ERR;
	joblog_init(&r->jl);
}

static void
peer_release(struct peer *p)
{
	int	 g;

	for (g = 0; g < p->ngpu && p->gpu_id != NULL; g++)
		free(p->gpu_id[g]);
	free(p->gpu_id);
	free(p->w_gpu);
	free(p->busy_ns);
	free(p->host);
}

void
run_release(struct run *r)
{
	struct task	*t;
	int		 i;

	if (cur == r)
		cur = NULL;
	gp_buf_release(&r->oq.buf);
	gp_buf_release(&r->eq.buf);
	tasks_close(&r->in);
	joblog_release(&r->jl);
	if (r->rlock >= 0)
		close(r->rlock);
	if (r->sfd >= 0)
		close(r->sfd);
	if (r->epfd >= 0)
		close(r->epfd);
	if (r->tfd >= 0)
		close(r->tfd);
	for (i = 0; i < r->npeer; i++)
		peer_release(&r->peer[i]);
	free(r->peer);
	r->peer = NULL;
	r->npeer = 0;
	while ((t = r->free) != NULL) {
		r->free = t->next;
		free(t->buf);
		free(t);
	}
}
