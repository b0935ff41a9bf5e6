/*
 * output.c: what a run writes: task output, messages and the progress
 * bar, through a queue per stream that standard output and standard
 * error drain as far as they take bytes without blocking (out_flush()),
 * and the summary at the end. Messages go through out_err(), which
 * clears the bar first. It decides nothing about the run: a failed
 * standard output sets r->fatal and r->out_halt and asks the run to halt
 * through the r->halt hook (feed.c's feed_halt_start()), so that this file,
 * which every other one uses, calls none of them back.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "master/master.h"

#define BAR_PERIOD_NS		250000000LL
#define WAIT_NOTE_NS		5000000000LL	/* a wait worth a word */
#define OUT_BACKLOG		(1u << 20)	/* output held before no new
						   task starts */

static struct run	*cur;	/* the run say.c's messages go through */

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
	out_err("cannot write standard output: %s; stopping", strerror(-err));
	r->halt(r, RC_CANCEL);
}

void
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
int
out_backlog(const struct run *r)
{
	return out_left(&r->oq) > OUT_BACKLOG || out_left(&r->eq) >
	    OUT_BACKLOG || r->held > ORDER_HELD;
}

/* Whether stdout failed since the last call: the pool then stops the
 * running tasks, as --halt now does. */
int
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
void
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
					out_err("got SIG%s: %zu bytes of "
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
		if (pfd[2].revents) {
			(void)signals_read(r);
			out_bar_winch(r);
		}
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
void
out_bar_size(struct run *r)
{
	struct winsize	 ws;

	if (r->tty && ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0)
		r->bar_cols = ws.ws_col;
}

void
out_fmt_secs(char *buf, size_t len, double s)
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

void
out_bar_draw(struct run *r, int force)
{
	char		 line[400], tot[32], eta[48] = "", el_s[32];
	char		 wait[160] = "";
	size_t		 held = 0;
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
	out_fmt_secs(el_s, sizeof(el_s), el);
	if (r->total >= 0)
		snprintf(tot, sizeof(tot), "%ld", r->total);
	else
		snprintf(tot, sizeof(tot), "?");
	if (r->total >= 0 && rate > 0 && (unsigned long)r->total >= done) {
		memcpy(eta, ", ETA ", 7);
		out_fmt_secs(eta + 6, sizeof(eta) - 6,
		    (double)((unsigned long)r->total - done) / rate);
	}
	/* The task that waits for a GPU was handed to the pool, which holds
	 * it: it is not running. */
	if (r->pool != NULL && gp_pool_waiting(r->pool, wait + 11,
	    sizeof(wait) - 11)) {
		memcpy(wait, ", waiting: ", 11);
		held = 1;
	}
	n = snprintf(line, sizeof(line), "%s%s: %lu/%s done, %zu running, "
	    "%lu failed, %.1f/s, %s elapsed%s%s", r->tty ? "\r\033[K" : "\r",
	    CLI_NAME, done, tot, running(r) > held ? running(r) - held : 0,
	    r->failed, rate, el_s, eta, wait);
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

/* --claim-timeout: nothing of ours runs and the next task has waited
 * that long for GPUs others claim: the run stops, exit 255. */
static int
claim_timed_out(struct run *r, const char *why, int64_t now)
{
	int	 ms = r->o->pool.claim_timeout_ms;

	if (ms == 0 || r->fatal || strncmp(why, GP_CLAIM_WAITING,
	    strlen(GP_CLAIM_WAITING)) != 0 || (ms > 0 && now - r->wait_since <
	    (int64_t)ms * 1000000))
		return 0;
	out_err("no GPU claimed in %s (--claim-timeout): %s; stopping",
	    ms < 0 ? "no time" : "time", why + strlen(GP_CLAIM_WAITING));
	r->fatal = 1;
	r->halt(r, RC_CANCEL);
	return 1;
}

int
out_gpu_notes(struct run *r)
{
	const char	*gone;
	char		 why[400];
	int64_t		 now;

	if (r->pool == NULL)
		return 0;
	if (!r->mon_said && (gone = gp_pool_monitor(r->pool)) != NULL) {
		r->mon_said = 1;
		out_warn("%s: GPU use is unknown from now on, every GPU "
		    "counts as free", gone);
	}
	if (!r->claim_said && gp_pool_waiting(r->pool, why, sizeof(why)) &&
	    strncmp(why, GP_CLAIM_WAITING, strlen(GP_CLAIM_WAITING)) == 0) {
		r->claim_said = 1;
		out_note(r, "waiting for a GPU: %s", why +
		    strlen(GP_CLAIM_WAITING));
	}
	if (!gp_pool_waiting(r->pool, why, sizeof(why)) || running(r) > 1) {
		r->wait_since = 0;
		r->wait_said = 0;
		return 0;
	}
	now = gp_now_ns();
	if (r->wait_since == 0)
		r->wait_since = now;
	if (claim_timed_out(r, why, now))
		return 1;
	if (r->bar || r->wait_said || now - r->wait_since < WAIT_NOTE_NS)
		return 0;
	r->wait_said = 1;
	out_note(r, "nothing runs, and the next task has waited %.0f s for a "
	    "GPU: %s", (double)(now - r->wait_since) / 1e9, why);
	return 0;
}

/* After SIGWINCH (signals_read() set r->winch): the terminal's new width,
 * and the bar drawn again in it. */
void
out_bar_winch(struct run *r)
{
	if (!r->winch)
		return;
	r->winch = 0;
	out_bar_size(r);
	if (r->bar_shown)
		out_bar_draw(r, 1);
}

/* A notice about a task; --quiet drops it. */
void
out_note(const struct run *r, const char *fmt, ...)
{
	va_list	 ap;

	if (r->o->quiet)
		return;
	va_start(ap, fmt);
	out_verr(fmt, ap);
	va_end(ap);
}

/* A task's bytes for fd: kept for -k (order.c) when r->divert says so,
 * else printed. */
static void
sink(struct run *r, int fd, const void *p, size_t n)
{
	struct gp_buf	*d = r != NULL ? r->divert[fd == STDERR_FILENO] :
			    NULL;

	if (d == NULL) {
		emit(r, fd, p, n);
		return;
	}
	if (gp_buf_add(d, p, n) < 0) {
		emit(r, fd, p, n);	/* out of memory: now, out of order */
		return;
	}
	r->held += n;
}

/* A task's bytes for fd, as out_task() is told; tagged lines are put
 * together in tagged, a buffer kept for the next call, so that they go
 * to the queue in one piece. */
void
out_task(struct run *r, int fd, const char *tag, const char *p, size_t n,
    int raw)
{
	static struct gp_buf	 tagged;
	const char		*nl, *end = p + n;
	size_t			 tl = tag != NULL ? strlen(tag) : 0;

	if (n == 0)
		return;
	bar_clear(r);
	if (raw || tag == NULL) {
		sink(r, fd, p, n);
		if (!raw && p[n - 1] != '\n')
			sink(r, fd, "\n", 1);
		return;
	}
	tagged.off = tagged.len = 0;
	for (; p < end; p = nl + 1) {
		if ((nl = memchr(p, '\n', (size_t)(end - p))) == NULL)
			nl = end;
		if (gp_buf_add(&tagged, tag, tl) < 0 ||
		    gp_buf_add(&tagged, "\t", 1) < 0 ||
		    gp_buf_add(&tagged, p, (size_t)(nl - p)) < 0 ||
		    gp_buf_add(&tagged, "\n", 1) < 0) {
			out_fail(r, out_q(r, fd), -ENOMEM);
			break;
		}
	}
	sink(r, fd, tagged.data + tagged.off, tagged.len - tagged.off);
	/* One chatty task must not pin its size here. */
	if (tagged.len > OUT_BACKLOG)
		gp_buf_release(&tagged);
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
	else if (r->halting && r->total < 0 && !r->in.rd.eof)
		unread = "the rest of the input not read";
	if (n == 0 && *unread == '\0')
		return 0;
	if (r->sig)
		snprintf(why, sizeof(why), "got SIG%s", sigabbrev_np(r->sig));
	else if (r->fatal || r->o->halt == HALT_NEVER)
		snprintf(why, sizeof(why), "after an error");
	else
		snprintf(why, sizeof(why), "--halt %s", r->o->halt_arg);
	if (n == 0)
		return (size_t)snprintf(buf, len, ", %s (%s)", unread, why);
	return (size_t)snprintf(buf, len, ", %lu not started%s%s (%s)", n,
	    *unread != '\0' ? " and " : "", unread, why);
}

void
out_summary(struct run *r)
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
	out_fmt_secs(wall, sizeof(wall), el);
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
	out_err("%s", buf);
	if (r->gmem_peak > 0 || r->gutil_n > 0 || r->oom > 0) {
		n = (size_t)snprintf(buf, sizeof(buf), "GPU:");
		if (r->gmem_peak > 0)
			n += (size_t)snprintf(buf + n, sizeof(buf) - n, " peak "
			    "memory %.1f GiB (task %lu)", (double)r->gmem_peak /
			    (1u << 30), r->gmem_seq);
		if (r->gutil_n > 0)
			n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s mean "
			    "utilisation %.0f%%", n > 4 ? "," : "",
			    r->gutil_sum / (double)r->gutil_n);
		if (r->oom > 0)
			(void)snprintf(buf + n, sizeof(buf) - n, "%s %lu out "
			    "of GPU memory", n > 4 ? "," : "", r->oom);
		out_err("%s", buf);
	}
	if (r->changed > 1)
		out_warn("%lu skipped tasks had another command in the joblog",
		    r->changed);
}

/* say.c's hook while r owns the streams: its bar cleared, its rank
 * named, the line behind what it has for stderr. */
static int
say_before(void *arg)
{
	struct run	*r = arg;

	bar_clear(r);
	return ranks_rank(r->rk);
}

static void
say_write(void *arg, const void *p, size_t n)
{
	emit(arg, STDERR_FILENO, p, n);
}

/* Messages clear r's bar and, while it owns the streams, take its
 * queues. */
void
out_attach(struct run *r)
{
	cur = r;
	say_through(say_before, say_write, r);
}

void
out_detach(struct run *r)
{
	if (cur == r) {
		cur = NULL;
		say_through(NULL, NULL, NULL);
	}
}
