/*
 * run.c: one run of gpupool-run in the master process: a single gp_run()
 * call whose feed streams the tasks file (next), records each attempt in
 * the joblog, retries failures and prints each task's output as a block
 * (done), and turns SIGINT, SIGTERM and SIGHUP, read from a signalfd,
 * into cancel and kill requests (ctl). Also the progress bar, the summary
 * and the exit status. Nothing here runs in a worker or in a signal
 * handler: the signals are blocked before the pool forks (workers reset
 * their own mask). Messages go through cli_err(), which clears the bar.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define POOL_GRACE_EXTRA_MS	2000	/* the worker kills first */
#define BACKSTOP_EXTRA_MS	5000
#define BAR_PERIOD_NS		250000000LL

/* A task handed to the pool. The gp_item comes first: done() gets a
 * pointer to it and casts back. */
struct task {
	struct gp_item	 item;
	struct task	*next;		/* free list or retry queue */
	unsigned long	 seq;
	unsigned long	 line;
	unsigned	 attempt;	/* 1-based */
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

static int
write_all(int fd, const void *buf, size_t n)
{
	const char	*p = buf;
	struct pollfd	 pfd = { fd, POLLOUT, 0 };
	ssize_t		 w;

	while (n > 0) {
		if ((w = write(fd, p, n)) == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {	/* inherited O_NONBLOCK */
				(void)poll(&pfd, 1, -1);
				continue;
			}
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* The progress bar: one line on stderr, redrawn on events at most
 * every BAR_PERIOD_NS, never on a timer. */
static void
bar_clear(struct run *r)
{
	char	 sp[256];
	size_t	 n;

	if (r == NULL || !r->bar_shown)
		return;
	if (r->tty)
		(void)write_all(STDERR_FILENO, "\r\033[K", 4);
	else {
		n = r->bar_len < sizeof(sp) - 2 ? r->bar_len : sizeof(sp) - 2;
		sp[0] = '\r';
		memset(sp + 1, ' ', n);
		sp[n + 1] = '\r';
		(void)write_all(STDERR_FILENO, sp, n + 2);
	}
	r->bar_shown = 0;
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

static void
bar_draw(struct run *r, int force)
{
	char		 line[200], tot[32], eta[48] = "";
	int64_t		 now = clock_ns(CLOCK_MONOTONIC);
	double		 el, rate;
	unsigned long	 done = r->ok + r->failed + r->stopped;
	int		 n;

	if (!r->bar || (!force && now - r->bar_last < BAR_PERIOD_NS))
		return;
	r->bar_last = now;
	el = (double)(now - r->t0) / 1e9;
	rate = el > 0 ? (double)done / el : 0;
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
	    "%lu failed, %.1f/s%s", r->tty ? "\r\033[K" : "\r", CLI_NAME,
	    done, tot, r->inflight, r->failed, rate, eta);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line))
		n = sizeof(line) - 1;
	if (!r->tty && r->bar_shown && (size_t)n < r->bar_len + 1)
		bar_clear(r);
	(void)write_all(STDERR_FILENO, line, (size_t)n);
	r->bar_len = (size_t)n - 1;
	r->bar_shown = 1;
}

static void
say(const char *pfx, const char *fmt, va_list ap)
{
	char	 buf[1024];
	int	 n;

	bar_clear(cur);
	n = snprintf(buf, sizeof(buf), "%s: %s", CLI_NAME, pfx);
	if (n < 0 || (size_t)n >= sizeof(buf))
		return;
	vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	n = (int)strlen(buf);
	buf[n++] = '\n';
	(void)write_all(STDERR_FILENO, buf, (size_t)n);
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
	po->grace_ms = (unsigned)(o->grace_ms + POOL_GRACE_EXTRA_MS);
	b = o->timeout_ms ? o->timeout_ms + o->grace_ms + BACKSTOP_EXTRA_MS : 0;
	po->timeout_ms = b <= UINT_MAX ? (unsigned)b : 0;
	po->max_msg = 2 * (size_t)OUTPUT_MAX + LINE_MAX_BYTES + 65536;
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

	pool_opts(o, &po, flags, err, sizeof(err));
	if ((rc = gp_pool_create(pool, &po)) < 0) {
		cli_err("%s", err[0] ? err : gp_strerror(rc));
		return rc;
	}
	return 0;
}

/* Resume: is seq recorded (as succeeded, for --resume-failed)? Warns
 * once when the joblog has another command under the same Seq. */
int
run_skip(void *arg, unsigned long seq, const char *cmd)
{
	struct run	*r = arg;

	if (r->jl.nseen == 0 || !joblog_done(&r->jl, seq,
	    r->o->resume_failed))
		return 0;
	if (joblog_changed(&r->jl, seq, cmd)) {
		r->changed++;
		if (!r->warned_change++)
			cli_warn("task %lu is '%s' but the joblog has another "
			    "command for it: was %s edited? (resume matches "
			    "tasks by number)", seq, cmd, r->o->file);
	}
	return 1;
}

/* mkdir -p, then prove we can create entries in it. */
static int
results_dir(const char *path)
{
	char		*p, *s;
	char		 probe[64];
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
	snprintf(probe, sizeof(probe), ".gpupool-run-probe.%ld",
	    (long)getpid());
	if (mkdirat(fd, probe, 0700) == -1) {
		rc = -errno;
		cli_err("cannot write to results directory '%s': %s", path,
		    strerror(errno));
		close(fd);
		return rc;
	}
	(void)unlinkat(fd, probe, AT_REMOVEDIR);
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

static int
hand(struct run *r, struct task *t, struct gp_item **item)
{
	struct task_hdr	 h;

	h.seq = t->seq;
	h.attempt = t->attempt;
	h.cmdlen = (uint32_t)(t->item.inlen - sizeof(h));
	memcpy(t->buf, &h, sizeof(h));
	t->item.out = NULL;
	t->item.outlen = 0;
	t->item.status = GP_NOTRUN;
	t->item.code = 0;
	t->item.worker = -1;
	t->item.attempts = 0;
	t->real_ns = clock_ns(CLOCK_REALTIME);
	t->mono_ns = clock_ns(CLOCK_MONOTONIC);
	r->inflight++;
	*item = &t->item;
	bar_draw(r, 0);
	return 1;
}

/* Read no more input: EOF, an error, or halting. */
static void
input_stop(struct run *r)
{
	if (r->input_done)
		return;
	r->input_done = 1;
}

/* Start nothing new. Queued retries end as the failures they were. */
static void
halt_start(struct run *r)
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
}

static int
feed_next(void *arg, struct gp_item **item)
{
	struct run	*r = arg;
	struct task	*t;
	int		 rc;

	if (!r->halting && (t = r->rq) != NULL) {
		if ((r->rq = t->next) == NULL)
			r->rq_tail = NULL;
		return hand(r, t, item);
	}
	while (!r->halting && !r->input_done) {
		rc = tasks_next(&r->in);
		if (rc == TASKS_AGAIN)
			return GP_FEED_AGAIN;	/* the pool polls in_fd */
		if (rc == TASKS_LINE) {
			if (run_skip(r, r->in.seq, r->in.line)) {
				r->skipped++;
				continue;
			}
			if ((t = task_new(r)) != NULL)
				return hand(r, t, item);
			cli_err("out of memory");
		} else if (rc < 0)
			cli_err("%s", r->in.err);
		if (rc != TASKS_EOF) {
			/* Run no more; let the running ones finish. */
			r->fatal = 1;
			halt_start(r);
		}
		input_stop(r);
	}
	/* Nothing new will come, but a running task may fail and be
	 * retried: the end is only when none is out. */
	return r->inflight > 0 ? GP_FEED_WAIT : GP_FEED_END;
}

static const char *
gpu_of(const struct run *r, int worker)
{
	if (worker < 0 || worker >= r->nw)
		return "-";
	return r->gpu_id[r->w_gpu[worker]];
}

static void
outcome(const struct task *t, struct outcome *oc)
{
	const struct gp_item	*it = &t->item;
	struct task_reply	 rp;
	const char		*p;

	memset(oc, 0, sizeof(*oc));
	oc->worker = it->worker;
	oc->exitval = -1;
	oc->start = (double)t->real_ns / 1e9;
	oc->runtime = (double)(clock_ns(CLOCK_MONOTONIC) - t->mono_ns) / 1e9;
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
		if (rp.exitval == 0 && rp.signal == 0 &&
		    !(rp.flags & (R_TIMEDOUT | R_NOSTART)))
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
		(void)write_all(STDOUT_FILENO, oc->out, oc->outlen);
		if (oc->out[oc->outlen - 1] != '\n')
			(void)write_all(STDOUT_FILENO, "\n", 1);
	}
	if (oc->errlen > 0) {
		(void)write_all(STDERR_FILENO, oc->err, oc->errlen);
		if (oc->err[oc->errlen - 1] != '\n')
			(void)write_all(STDERR_FILENO, "\n", 1);
	}
	if (oc->outcut || oc->errcut)
		cli_warn("task %lu: %llu bytes of its stdout and %llu of its "
		    "stderr were dropped (over %u MiB each; --results DIR "
		    "keeps everything)", t->seq,
		    (unsigned long long)oc->outcut,
		    (unsigned long long)oc->errcut, OUTPUT_MAX >> 20);
}

static int
feed_done(void *arg, struct gp_item *it)
{
	struct run	*r = arg;
	struct task	*t = (struct task *)it;
	struct outcome	 oc;
	struct jl_rec	 jr;
	char		 why[256];
	int		 rc, g, cancel = 0;

	r->inflight--;
	outcome(t, &oc);
	if (oc.kind == K_NOTRUN) {
		if (t->attempt > 1)
			r->failed++;	/* its last run failed */
		goto out;
	}
	jr.seq = t->seq;
	jr.start = oc.start;
	jr.runtime = oc.runtime;
	jr.exitval = oc.exitval;
	jr.signal = oc.signal;
	jr.cmd = task_cmd(t);
	jr.gpu = gpu_of(r, oc.worker);
	if ((rc = joblog_append(&r->jl, &jr)) < 0 && !r->jl_broken) {
		/* Without its record a resume would run it again: stop. */
		cli_err("cannot write joblog '%s': %s", r->jl.path,
		    strerror(-rc));
		r->fatal = r->jl_broken = 1;
		halt_start(r);
		cancel = 1;
	}
	if (oc.worker >= 0 && oc.worker < r->nw) {
		g = r->w_gpu[oc.worker];
		r->busy_ns[g] += (int64_t)(oc.runtime * 1e9);
	}
	describe(r, &oc, why, sizeof(why));
	if (oc.kind == K_FAILED && (int)t->attempt <= r->o->retries &&
	    !r->halting) {
		note(r, "task %lu failed (%s); retrying, attempt %u of %d",
		    t->seq, why, t->attempt + 1, r->o->retries + 1);
		t->attempt++;
		gp_items_release(it, 1);
		t->next = NULL;
		if (r->rq_tail != NULL)
			r->rq_tail->next = t;
		else
			r->rq = t;
		r->rq_tail = t;
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
			halt_start(r);
			if (r->o->halt == HALT_NOW)
				cancel = 1;	/* the pool stops the rest */
		}
		break;
	}
out:
	gp_items_release(it, 1);
	task_free(r, t);
	bar_draw(r, 0);
	return cancel;
}

static int
feed_ctl(void *arg)
{
	struct run			*r = arg;
	struct signalfd_siginfo		 si;
	int				 got = 0;

	while (read(r->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (r->sig == 0)
			r->sig = (int)si.ssi_signo;
		r->nsig++;
		got++;
	}
	if (got == 0)
		return GP_CTL_GO_ON;
	if (!r->halting)
		halt_start(r);
	if (r->nsig == 1) {
		cli_err("got SIG%s: stopping %zu running task%s (again to kill "
		    "them now)", sigabbrev_np(r->sig), r->inflight,
		    r->inflight == 1 ? "" : "s");
		return GP_CTL_CANCEL;
	}
	cli_err("got SIG%s again: killing the running tasks",
	    sigabbrev_np(r->sig));
	return GP_CTL_KILL;
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

static int
map_workers(struct run *r, struct gp_pool *pool)
{
	struct gp_worker_info	 wi;
	int			 w;

	r->nw = gp_pool_size(pool);
	if ((r->w_gpu = calloc((size_t)r->nw, sizeof(*r->w_gpu))) == NULL ||
	    (r->gpu_id = calloc((size_t)r->nw, sizeof(*r->gpu_id))) == NULL ||
	    (r->busy_ns = calloc((size_t)r->nw, sizeof(*r->busy_ns))) == NULL)
		return -ENOMEM;
	for (w = 0; w < r->nw; w++) {
		(void)gp_pool_info(pool, w, &wi);
		r->w_gpu[w] = wi.gpu;
		if (wi.gpu >= r->ngpu)
			r->ngpu = wi.gpu + 1;
		if (r->gpu_id[wi.gpu] == NULL &&
		    (r->gpu_id[wi.gpu] = strdup(wi.visible)) == NULL)
			return -ENOMEM;
	}
	return 0;
}

static void
summary(struct run *r)
{
	char		 buf[1024], wall[32];
	double		 el;
	size_t		 n;
	int		 g;

	el = (double)(clock_ns(CLOCK_MONOTONIC) - r->t0) / 1e9;
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
	n += (size_t)snprintf(buf + n, sizeof(buf) - n, " in %s; busy:", wall);
	for (g = 0; g < r->ngpu && n < sizeof(buf) - 40; g++)
		n += (size_t)snprintf(buf + n, sizeof(buf) - n,
		    "%s GPU %d %.0f%%", g ? "," : "", g, el > 0 ? 100.0 *
		    (double)r->busy_ns[g] / 1e9 / el / r->o->per_gpu : 0.0);
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
	/* Workers are forked with the results directory open. */
	if (o->results != NULL && (rfd = conf.results_fd =
	    results_dir(o->results)) < 0)
		return EXIT_FATAL;

	/* Before the pool forks: workers reset their mask, and a signal
	 * that comes while it starts waits in the signalfd. */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &set, NULL) == -1 ||
	    (r->sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK)) == -1) {
		cli_err("cannot set up signals: %s", strerror(errno));
		return EXIT_FATAL;
	}
	if (run_pool_create(o, 0, &pool) < 0)
		goto fail;
	/* Only now that the GPUs are known good is an old joblog
	 * truncated (and the workers do not hold it open). */
	if (joblog_start(r) < 0)
		goto fail;
	if (map_workers(r, pool) < 0) {
		cli_err("out of memory");
		goto fail;
	}

	memset(&feed, 0, sizeof(feed));
	feed.next = feed_next;
	feed.done = feed_done;
	feed.ctl = feed_ctl;
	feed.ctl_fd = r->sfd;
	/* A regular file or /dev/null never makes a read wait. */
	feed.in_fd = r->in.pollable ? r->in.fd : -1;
	feed.arg = r;
	r->t0 = clock_ns(CLOCK_MONOTONIC);
	bar_draw(r, 1);
	rc = gp_run(pool, task_run, &conf, sizeof(conf), &feed);
	if (rc < 0) {
		cli_err("%s", gp_strerror(rc));
		r->fatal = 1;
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
	if (rfd >= 0)
		close(rfd);
	return exit_code(r);

fail:
	gp_pool_destroy(pool);
	if (rfd >= 0)
		close(rfd);
	return EXIT_FATAL;
}
void
run_init(struct run *r, const struct opts *o)
{
	memset(r, 0, sizeof(*r));
	r->o = o;
	r->total = -1;
	r->sfd = -1;
	joblog_init(&r->jl);
}

void
run_release(struct run *r)
{
	struct task	*t;
	int		 i;

	if (cur == r)
		cur = NULL;
	tasks_close(&r->in);
	joblog_release(&r->jl);
	if (r->sfd >= 0)
		close(r->sfd);
	for (i = 0; i < r->nw && r->gpu_id != NULL; i++)
		free(r->gpu_id[i]);
	free(r->gpu_id);
	free(r->w_gpu);
	free(r->busy_ns);
	while ((t = r->free) != NULL) {
		r->free = t->next;
		free(t->buf);
		free(t);
	}
	r->gpu_id = NULL;
	r->w_gpu = NULL;
	r->busy_ns = NULL;
}
