/*
 * proc.c: the workers as processes, seen from the master: fork one with
 * its two pipes, signal and kill it (through its pidfd where there is
 * one), reap it by pid after its channel reports EOF, decide whether its
 * slot is started again, and stop them all at destroy. Every system call
 * about a worker process is here; what its items become is job.c's, and
 * when any of this happens is loop.c's. In the child, between fork and
 * gp_worker_main(), it closes the pool's fds that are not the worker's
 * own (design.md, invariant 3a). Never a SIGCHLD handler, never
 * waitpid(-1).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "msg.h"

/* Signal a worker through its pidfd where it has one: its pid may name
 * another process by now when the host ignores SIGCHLD (no zombie holds
 * the pid), and a deadline can fire long after a recycled worker left. */
static void
signal_worker(struct gp_worker *w, int sig)
{
	if (w->pidfd >= 0)
		(void)syscall(SYS_pidfd_send_signal, w->pidfd, sig, NULL, 0);
	else
		(void)kill(w->pid, sig);
}

/* SIGKILL a worker and the process group its item declared (a task the
 * worker started): nothing it began may outlive it. */
void
gp_proc_kill(struct gp_worker *w)
{
	int	 pg = atomic_exchange(&w->shm->pgid, 0);

	if (pg > 0)
		kill(-pg, SIGKILL);
	signal_worker(w, SIGKILL);
}

void
gp_proc_close_fds(struct gp_worker *w)
{
	int	*fds[] = { &w->fd, &w->wfd, &w->tfd, &w->pidfd };
	size_t	 i;

	for (i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
}

/* In the child, before anything else (design.md, invariant 3a): only
 * its own channel. A sibling's end held open here would hide that
 * sibling's death from the master, and the cancel fd is the master's. */
static void
close_others(struct gp_pool *p)
{
	int	 i;

	for (i = 0; i < p->nw; i++)
		gp_proc_close_fds(&p->w[i]);
	if (p->o.flags & GP_POOL_CANCEL_FD)
		close(p->o.cancel_fd);
	if (p->wt.mon.fd >= 0)
		close(p->wt.mon.fd);
	if (p->wt.mon.pidfd >= 0)
		close(p->wt.mon.pidfd);
	gp_claim_forget(p->hd.cl);
}

/*
 * A whole batch (GP_BATCH_BYTES, either way) fits each pipe, so it goes
 * in one write and one read instead of a poll turn per 64 KiB (what
 * bench_pool's trivial items measure). Only in
 * pools of up to GP_PIPE_WIDE_MAX workers: pipe buffers count against
 * the user's pipe-user-pages-soft (64 MiB by default), which all the
 * user's pipes share, and past it new pipes get a page or two. A refusal
 * (EPERM over that limit, or pipe-max-size) leaves the default.
 */
static void
widen(const struct gp_pool *p, int tfd, int rfd)
{
	if (p->nw > GP_PIPE_WIDE_MAX)
		return;
	(void)fcntl(tfd, F_SETPIPE_SZ, (int)GP_BATCH_BYTES);
	(void)fcntl(rfd, F_SETPIPE_SZ, (int)GP_BATCH_BYTES);
}

/*
 * Two pipes per worker: tasks down, results up. The master also keeps the
 * read end of the task pipe, unused: a write to a worker that died then
 * fills a buffer instead of raising SIGPIPE in a host whose signals are
 * not ours, and the death is seen on the result pipe and the pidfd.
 */
static void
close4(int task[2], int res[2])
{
	close(task[0]);
	close(task[1]);
	close(res[0]);
	close(res[1]);
}

/*
 * A worker that execs (exec.c) has its HELLO queued first and its
 * environment made here, before the fork: its child runs no code of the
 * caller's (no fork_hook: the caller may be threaded, with locks held)
 * and allocates nothing but hwloc's binding before the exec.
 */
static int
exec_prepare(struct gp_pool *p, struct gp_worker *w, int task[2],
    int res[2], char ***envp)
{
	*envp = NULL;
	w->wbuf.off = w->wbuf.len = 0;
	if (p->xp == NULL)
		return 0;
	if (gp_exec_hello(p, w) < 0 ||
	    (*envp = gp_exec_env(p, w, task[0], res[1])) == NULL) {
		w->wbuf.off = w->wbuf.len = 0;
		close4(task, res);
		return -ENOMEM;
	}
	return 0;
}

int
gp_proc_spawn(struct gp_pool *p, struct gp_worker *w)
{
	int	 task[2], res[2], rc;
	int	 hook = p->o.fork_hook != NULL && p->xp == NULL;
	char	**envp;
	pid_t	 pid;

	if (pipe2(task, O_CLOEXEC) == -1)
		return -errno;
	if (pipe2(res, O_CLOEXEC) == -1) {
		rc = -errno;
		close(task[0]);
		close(task[1]);
		return rc;
	}
	if ((rc = exec_prepare(p, w, task, res, &envp)) < 0)
		return rc;
	atomic_store(&w->shm->cur, 0);
	atomic_store(&w->shm->stop, 0);
	atomic_store(&w->shm->pgid, 0);
	/* Unflushed host output would be written twice otherwise. */
	fflush(NULL);
	if (hook)
		p->o.fork_hook(GP_FORK_BEFORE, p->o.fork_arg);
	pid = fork();
	rc = -errno;
	if (pid != 0 && hook)
		p->o.fork_hook(GP_FORK_PARENT, p->o.fork_arg);
	if (pid == 0 && p->xp != NULL)
		gp_exec_child(p, w, task[0], res[1], envp);
	gp_exec_free_env(envp);
	if (pid == -1) {
		close4(task, res);
		w->wbuf.off = w->wbuf.len = 0;
		return rc;
	}
	if (pid == 0) {
		if (hook)
			p->o.fork_hook(GP_FORK_CHILD, p->o.fork_arg);
		close(task[1]);
		close(res[0]);
		close_others(p);
		gp_data_keep(p, w);
		gp_worker_main(p, w, task[0], res[1]);
		/* NOTREACHED */
	}
	close(res[1]);
	widen(p, task[1], res[0]);
	/* Only the master's own ends: the worker's are other descriptions. */
	(void)fcntl(task[1], F_SETFL, O_NONBLOCK);
	(void)fcntl(res[0], F_SETFL, O_NONBLOCK);
	w->fd = res[0];
	w->wfd = task[1];
	w->tfd = task[0];
	/* Death is seen on the pidfd even when a process the worker forked
	 * still holds its end of the channel open. */
	w->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	w->pid = pid;
	w->state = GP_W_STARTING;
	w->job = 0;
	w->ntasks = 0;
	w->nfl = w->nres = 0;
	w->stop_id = 0;
	w->kill_at = 0;
	w->proto_err = 0;
	w->rbuf.off = w->rbuf.len = 0;
	(void)gp_buf_send(w->wfd, &w->wbuf);	/* a HELLO; the loop sends
						   the rest */
	return 0;
}

/* The item w is running and when it began, read consistently. */
uint64_t
gp_proc_current(struct gp_worker *w, int64_t *started)
{
	uint64_t	 a, b;

	do {
		a = atomic_load_explicit(&w->shm->cur, memory_order_acquire);
		*started = atomic_load_explicit(&w->shm->started,
		    memory_order_acquire);
		b = atomic_load_explicit(&w->shm->cur, memory_order_acquire);
	} while (a != b);
	return a;
}

/* Replace workers that died, now that there is work for them: a
 * canceled call does not fork what it will not use. */
void
gp_proc_respawn(struct gp_pool *p)
{
	int	 i;

	for (i = 0; i < p->nw; i++)
		if (p->w[i].state == GP_W_DEAD && !p->w[i].retired &&
		    gp_proc_spawn(p, &p->w[i]) < 0)
			p->w[i].retired = 1;
}

/* P_PIDFD (Linux 5.4), spelled out for libcs that do not name it. */
#define GP_P_PIDFD	((idtype_t)3)

/*
 * waitpid(w->pid) through the pidfd where there is one: when the host
 * ignores SIGCHLD, the kernel reaps the worker itself and its pid can be
 * a host child's by now, which a wait by pid would take (or block on).
 * Returns as waitpid.
 */
static pid_t
wait_worker(struct gp_worker *w, int *status, int flags)
{
	siginfo_t	 si;
	int		 r;

	if (w->pidfd < 0)
		return gp_waitpid(w->pid, status, flags);
	memset(&si, 0, sizeof(si));
	while ((r = waitid(GP_P_PIDFD, (id_t)w->pidfd, &si, WEXITED | flags))
	    == -1 && errno == EINTR)
		;
	if (r == -1 && errno == EINVAL)	/* a pidfd, but no P_PIDFD */
		return gp_waitpid(w->pid, status, flags);
	if (r == -1)
		return -1;
	if (si.si_pid == 0)
		return 0;	/* WNOHANG: still running */
	*status = si.si_code == CLD_EXITED ? W_EXITCODE(si.si_status, 0) :
	    si.si_status | (si.si_code == CLD_DUMPED ? WCOREFLAG : 0);
	return w->pid;
}

void
gp_proc_reap(struct gp_worker *w, int *status)
{
	pid_t	 r;
	int	 pg;

	/* Its channel closed with a task group of its item still declared
	 * (or its own, for its whole life): the group goes first, while the
	 * worker is unreaped, so that a group id that is the worker's pid
	 * cannot name another process's group by the time of the kill. */
	if ((pg = atomic_exchange(&w->shm->pgid, 0)) > 0)
		kill(-pg, SIGKILL);
	if ((r = wait_worker(w, status, WNOHANG)) == 0) {
		/* EOF but still alive (fn closed its channel?): end it. */
		gp_proc_kill(w);
		r = wait_worker(w, status, 0);
	}
	/* ECHILD: the host ignores SIGCHLD, so the kernel reaped it and its
	 * status is gone. Say "unknown", never a made-up exit 0. */
	if (r != w->pid)
		*status = GP_WSTATUS_UNKNOWN;
	gp_proc_close_fds(w);
	w->pid = 0;
	w->state = GP_W_DEAD;
}

/* w's channel closed and it is reaped: a slot that died in start-up at
 * pool creation, or too often in a row, is never started again; another
 * death counts against the respawn budget. */
void
gp_proc_lost(struct gp_pool *p, struct gp_worker *w, enum gp_wstate was,
    int in_call, int charge)
{
	/* Died in start-up: at pool creation it is never respawned (the
	 * create fails); a replacement that dies before READY is a death
	 * like another (a SIGKILL from outside can land there), unless it
	 * keeps dying in start-up. */
	if (was == GP_W_STARTING &&
	    (!in_call || ++w->start_deaths >= GP_START_DEATHS_MAX))
		w->retired = 1;
	if (w->retired || !charge)
		return;
	/* gp_proc_respawn() forks its replacement when there is work. A
	 * recycled worker's replacement is free. */
	if (was != GP_W_QUITTING) {
		if (p->respawns == 0)
			w->retired = 1;
		else if (p->respawns > 0)
			p->respawns--;
	}
}

/* QUIT, then TERM, then KILL, each after grace_ms; every worker reaped. */
void
gp_proc_shutdown(struct gp_pool *p)
{
	struct pollfd	 pfd[GP_MAX_WORKERS];
	struct gp_worker *map[GP_MAX_WORKERS];
	int64_t		 step = (int64_t)p->o.grace_ms * 1000000;
	int64_t		 dl = gp_now_ns() + step, now;
	int		 i, n, phase = 0, status;
	size_t		 at;
	char		 drain[4096];

	for (i = 0; i < p->nw; i++) {
		struct gp_worker *w = &p->w[i];

		if (w->state == GP_W_DEAD)
			continue;
		if (gp_msg_begin(&w->wbuf, GP_MSG_QUIT, &at) == 0)
			gp_msg_finish(&w->wbuf, at, 0);
		(void)gp_buf_send(w->wfd, &w->wbuf);
		w->state = GP_W_QUITTING;
	}
	for (;;) {
		for (i = n = 0; i < p->nw; i++) {
			if (p->w[i].state == GP_W_DEAD)
				continue;
			pfd[n].fd = p->w[i].fd;
			pfd[n].events = POLLIN;
			map[n++] = &p->w[i];
		}
		if (n == 0)
			return;
		now = gp_now_ns();
		if (now >= dl) {
			for (i = 0; i < n; i++)
				if (phase == 0)
					signal_worker(map[i], SIGTERM);
				else
					gp_proc_kill(map[i]);
			phase++;
			dl = now + step;
		}
		if (poll(pfd, (nfds_t)n, gp_poll_ms(dl, now)) == -1 &&
		    errno != EINTR)
			phase = 2;	/* cannot wait: kill and reap below */
		for (i = 0; i < n; i++) {
			if (phase >= 2)
				gp_proc_kill(map[i]);
			else if (!pfd[i].revents ||
			    read(pfd[i].fd, drain, sizeof(drain)) > 0)
				continue;
			gp_proc_reap(map[i], &status);
		}
	}
}

int
gp_proc_live(const struct gp_pool *p)
{
	int	 i, n = 0;

	for (i = 0; i < p->nw; i++)
		if (!p->w[i].retired)
			n++;
	return n;
}
