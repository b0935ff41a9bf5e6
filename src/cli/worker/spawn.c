/*
 * spawn.c: the worker side of gpupool-run. spawn_task() is the gp_fn that
 * the pool's long-lived, pinned workers call once per task. It starts the
 * command in a process group of its own (so it inherits the worker's CPU,
 * memory and GPU binding but can be killed as a whole), waits on a pidfd,
 * the output pipes, its own deadline and the pool's stop fd, and replies
 * with the outcome and the captured output. Runs only in a worker, never
 * prints, and leaves nothing behind: once the leader has exited, what is
 * left of its group is SIGKILLed before the leader is reaped (so the
 * group's id cannot have been reused), then every other process the task
 * left (the worker is their subreaper: reap.c). What the command is
 * (cmdline.c), where its output goes (capture.c, results.c) and what it
 * leaves (reap.c) are each a file of their own; this one runs it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "worker/worker.h"
#include "parallel/parallel.h"

#define ORPHANS_AFTER_NS 1000000000LL	/* reap_exited() from then on */
#define ARG_ONE_MAX	(32 * 4096)	/* Linux's MAX_ARG_STRLEN: one
					   argument, its NUL included */

/* Built once per worker: the environment with our five variables. */
static char	**envp;
static int	  sigfd = -1;	/* SIGCHLD, blocked: an orphan exited */

static struct cap	 out = { .fd = -1, .live_fd = -1, .stream = 1 };
static struct cap	 err = { .fd = -1, .live_fd = -1, .stream = 2 };

/* posix_spawnp() path with argv; the task's stdout and stderr are ofd
 * and efd, and with script >= 0 (not 3) its fd 3 is that. */
static int
spawn(pid_t *pid, const char *path, char *const argv[], int ofd, int efd,
    int script)
{
	posix_spawn_file_actions_t	 fa;
	posix_spawnattr_t		 sa;
	sigset_t			 all, none;
	int				 rc;

	sigfillset(&all);
	sigemptyset(&none);
	if ((rc = posix_spawn_file_actions_init(&fa)) != 0)
		return -rc;
	if ((rc = posix_spawnattr_init(&sa)) != 0) {
		posix_spawn_file_actions_destroy(&fa);
		return -rc;
	}
	/* The worker ignores SIGINT; exec would keep that. dup2 clears the
	 * close-on-exec flag that every fd of ours carries. */
	if ((rc = posix_spawn_file_actions_addopen(&fa, STDIN_FILENO,
	    "/dev/null", O_RDONLY, 0)) == 0 &&
	    (rc = posix_spawn_file_actions_adddup2(&fa, ofd, 1)) == 0 &&
	    (rc = posix_spawn_file_actions_adddup2(&fa, efd, 2)) == 0 &&
	    (script < 0 || (rc = posix_spawn_file_actions_adddup2(&fa, script,
	    3)) == 0) &&
	    (rc = posix_spawnattr_setsigdefault(&sa, &all)) == 0 &&
	    (rc = posix_spawnattr_setsigmask(&sa, &none)) == 0 &&
	    (rc = posix_spawnattr_setpgroup(&sa, 0)) == 0 &&
	    (rc = posix_spawnattr_setflags(&sa, POSIX_SPAWN_SETPGROUP |
	    POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK)) == 0)
		rc = posix_spawnp(pid, path, &fa, &sa, argv, envp);
	posix_spawnattr_destroy(&sa);
	posix_spawn_file_actions_destroy(&fa);
	return -rc;
}

/*
 * A command that sh -c cannot take as one argument: Linux caps each at
 * 128 KiB (MAX_ARG_STRLEN), and argv with the environment at ARG_MAX.
 * The shell reads it instead as a script from a memfd, its fd 3, by
 * name (". /proc/self/fd/3" runs it in the shell itself, as -c would,
 * $0 and all), and the script's first words close fd 3: the task sees
 * only 0, 1 and 2, as any other. -errno if it could not be started.
 */
static int
spawn_long(pid_t *pid, const char *shell, const char *cmd, int ofd, int efd)
{
	static const char	 head[] = "exec 3<&-; ";
	char			*sh[] = { (char *)shell, "-c",
				    ". /proc/self/fd/3", NULL };
	int			 fd, e;

	if ((fd = memfd_create("gpupool-task", MFD_CLOEXEC)) == -1)
		return -errno;
	/* fd 3 itself would stay close-on-exec: dup2(3, 3) is a no-op. */
	if (fd == 3 && (fd = fcntl(3, F_DUPFD_CLOEXEC, 4)) != 3)
		close(3);
	if (fd == -1)
		return -errno;
	if ((e = gp_write_full(fd, head, sizeof(head) - 1)) == 0 &&
	    (e = gp_write_full(fd, cmd, strlen(cmd))) == 0)
		e = spawn(pid, sh[0], sh, ofd, efd, fd);
	close(fd);
	return e;
}

/* A task being waited for: its deadline, how far stopping it went, and
 * where each fd is in this turn's poll set (-1: not in it). */
struct waiting {
	pid_t		 pid;
	int		 pidfd;		/* -1: none (< Linux 5.3) */
	int64_t		 t0, deadline, kill_at;
	int		 flags;		/* R_TIMEDOUT, R_STOPPED */
	int		 stopping;
	int		*sent;		/* SIGTERM, then SIGKILL, once sent */
	int		 ipid, iout, ierr, istop, ichld, ilive;
};

/* The deadline, the grace period and a stop: signal the group as they
 * come. Returns when to wake up next (0: only for an fd). */
static int64_t
wait_stop(struct waiting *w, const struct run_conf *rc, int64_t now)
{
	int64_t		 next;

	if (!w->stopping && w->deadline && now >= w->deadline) {
		w->flags |= R_TIMEDOUT;
		w->stopping = 1;
	}
	if (w->stopping && !*w->sent) {
		kill(-w->pid, SIGTERM);
		*w->sent = SIGTERM;
		w->kill_at = now + (int64_t)rc->grace_ms * 1000000;
	}
	if (w->kill_at && now >= w->kill_at) {
		kill(-w->pid, SIGKILL);
		*w->sent = SIGKILL;
		w->kill_at = 0;
	}
	next = w->kill_at ? w->kill_at : w->stopping ? 0 : w->deadline;
	/* Orphans that exit are reaped once the task has run a
	 * while: a short one's are reap_leftovers()' at its end, and
	 * the SIGCHLD of every leader would cost it system calls. */
	if (sigfd >= 0 && now - w->t0 < ORPHANS_AFTER_NS &&
	    (!next || next > w->t0 + ORPHANS_AFTER_NS))
		next = w->t0 + ORPHANS_AFTER_NS;
	return next;
}

/* This turn's poll set: the pidfd, the output pipes (live output: while
 * they hold less than LIVE_HOLD), the live channel while bytes wait for
 * it, the stop fd until stopping, the orphans' signalfd once the task
 * has run a while. */
static int
wait_fill(struct waiting *w, struct gp_ctx *ctx, struct pollfd *pfd,
    int64_t now)
{
	int	 n = 0, i;

	w->ipid = w->iout = w->ierr = w->istop = w->ichld = w->ilive = -1;
	if (w->pidfd >= 0) {
		pfd[n].fd = w->pidfd;
		pfd[n].events = POLLIN;
		w->ipid = n++;
	}
	if (out.fd >= 0 && !cap_full(&out)) {
		pfd[n].fd = out.fd;
		pfd[n].events = POLLIN;
		w->iout = n++;
	}
	if (err.fd >= 0 && !cap_full(&err)) {
		pfd[n].fd = err.fd;
		pfd[n].events = POLLIN;
		w->ierr = n++;
	}
	if ((out.live_fd >= 0 && out.len > 0) ||
	    (err.live_fd >= 0 && err.len > 0)) {
		pfd[n].fd = out.live_fd >= 0 ? out.live_fd : err.live_fd;
		pfd[n].events = POLLOUT;
		w->ilive = n++;
	}
	if (!w->stopping) {
		pfd[n].fd = gp_ctx_stop_fd(ctx);
		pfd[n].events = POLLIN;
		w->istop = n++;
	}
	if (sigfd >= 0 && now - w->t0 >= ORPHANS_AFTER_NS) {
		pfd[n].fd = sigfd;
		pfd[n].events = POLLIN;
		w->ichld = n++;
	}
	for (i = 0; i < n; i++)
		pfd[i].revents = 0;
	return n;
}

/* What poll() found: output, orphans that exited, a stop. */
static void
wait_handle(struct waiting *w, const struct pollfd *pfd)
{
	if (w->iout >= 0 && pfd[w->iout].revents)
		cap_drain(&out);
	if (w->ierr >= 0 && pfd[w->ierr].revents)
		cap_drain(&err);
	if (w->ilive >= 0 && pfd[w->ilive].revents) {
		(void)cap_forward(&out);
		(void)cap_forward(&err);
	}
	/* The leader's end (its pidfd) is the task's: the rest
	 * are reap_leftovers()'. */
	if (w->ichld >= 0 && pfd[w->ichld].revents &&
	    !(w->ipid >= 0 && pfd[w->ipid].revents))
		reap_exited(sigfd, w->pid);
	if (w->istop >= 0 && pfd[w->istop].revents) {
		/* A STOP for this task, or EOF: the master is gone. */
		w->flags |= R_STOPPED;
		w->stopping = 1;
	}
}

/*
 * Wait for the leader to exit, reading its output, enforcing the
 * deadline (TERM, then KILL after the grace period) and obeying the stop
 * fd the same way. Leaves the leader unreaped (a zombie holds the group's
 * id). Returns the flags R_TIMEDOUT and R_STOPPED that apply.
 */
static int
wait_task(struct gp_ctx *ctx, const struct run_conf *rc, pid_t pid, int pidfd,
    int64_t t0, int *sent)
{
	struct waiting	 w;
	struct pollfd	 pfd[6];
	siginfo_t	 si;
	int64_t		 now, next;
	int		 n, tmo;

	memset(&w, 0, sizeof(w));
	w.pid = pid;
	w.pidfd = pidfd;
	w.t0 = t0;
	w.sent = sent;
	w.deadline = rc->timeout_ms ? t0 + (int64_t)rc->timeout_ms * 1000000 :
	    0;
	for (;;) {
		now = gp_now_ns();
		next = wait_stop(&w, rc, now);
		/* poll() takes an int: past 24.8 days, wait in steps. */
		tmo = gp_poll_ms(next ? next : -1, now);
		if (pidfd < 0 && (tmo < 0 || tmo > NOPIDFD_TICK_MS))
			tmo = NOPIDFD_TICK_MS;
		n = wait_fill(&w, ctx, pfd, now);
		if (poll(pfd, (nfds_t)n, tmo) == -1 && errno != EINTR)
			tmo = 0;	/* cannot happen; keep going */
		wait_handle(&w, pfd);
		if (w.ipid >= 0 && !pfd[w.ipid].revents)
			continue;
		memset(&si, 0, sizeof(si));
		if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG |
		    WNOWAIT) == 0 && si.si_pid == pid)
			return w.flags;
	}
}

/* The command in a task's bytes (a struct task_hdr, then the command
 * and its NUL), the header in *h; NULL if they are not that. */
static const char *
task_parse(const void *in, size_t inlen, struct task_hdr *h)
{
	if (rp_task_decode(in, inlen, h) != (ssize_t)inlen)
		return NULL;
	return (const char *)in + sizeof(*h);
}

/* Open the task's outputs (--results files, else pipes) and start it:
 * without a shell if it needs none and can be, else with the run's shell
 * (rc->shell, as popt_shell() chose it) and -c.
 * *t0 is when it started. -1 if it did not start: msg says why. */
static int
task_start(const struct run_conf *rc, uint64_t seq, const char *cmd,
    struct results_files *f, pid_t *pid, int64_t *t0, struct task_reply *rp,
    char *msg, size_t mlen)
{
	char		*sh[] = { (char *)rc->shell, "-c", NULL, NULL };
	char		**av;
	int		 ofd = -1, efd = -1, e;

	if (rc->results_fd >= 0) {
		if (results_open(rc->results_fd, seq, f, &ofd, &efd, msg,
		    mlen) < 0)
			goto nostart;
	} else if ((e = cap_open(&out, &ofd)) < 0 ||
	    (e = cap_open(&err, &efd)) < 0) {
		snprintf(msg, mlen, "cannot create a pipe: %s", strerror(-e));
		goto nostart;
	}

	rp->start_ns = gp_clock_ns(CLOCK_REALTIME);
	*t0 = gp_now_ns();
	e = -ENOENT;
	if (!cmdline_needs_shell(cmd) && (av = cmdline_split(cmd)) != NULL &&
	    av[0] != NULL)
		e = spawn(pid, av[0], av, ofd, efd, -1);
	if (e < 0) {
		/* Not found, not executable, no #! line: let sh say so
		 * (127, 126) or run it as a script, as a shell would. */
		sh[2] = (char *)cmd;
		/* A line one argument cannot hold goes to the script at
		 * once (not every exec reports E2BIG: under valgrind the
		 * child just dies); E2BIG also comes from arguments and
		 * environment over ARG_MAX. */
		e = strlen(cmd) < ARG_ONE_MAX ? spawn(pid, sh[0], sh, ofd, efd,
		    -1) : -E2BIG;
	}
	/* The script is read with "." and closes fd 3 as sh does: not
	 * in (t)csh, rc or fish. */
	if (e == -E2BIG && repl_shell(rc->shell) == 0)
		e = spawn_long(pid, rc->shell, cmd, ofd, efd);
	close(ofd);
	close(efd);
	if (e < 0) {
		snprintf(msg, mlen, "cannot run '%s': %s", rc->shell,
		    e == -E2BIG && repl_shell(rc->shell) ? "a line over 128 "
		    "KiB runs as a script, which only a POSIX shell reads (say "
		    "--shell /bin/sh)" : strerror(-e));
		rp->exitval = 127;
		return -1;
	}
	return 0;

nostart:
	if (ofd >= 0)
		close(ofd);
	if (efd >= 0)
		close(efd);
	return -1;
}

/* The task started: wait for it, reap it and what it left, take the
 * rest of its output, and fill in its outcome. */
static void
task_wait(struct gp_ctx *ctx, const struct run_conf *rc, pid_t pid,
    int64_t t0, struct task_reply *rp)
{
	struct rusage	 ru;
	pid_t		 got;
	int		 pidfd, status = 0, sent = 0;

	/* From here the master kills the group if it must kill us. */
	gp_ctx_set_pgid(ctx, pid);
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	rp->flags |= wait_task(ctx, rc, pid, pidfd, t0, &sent);
	rp->run_ns = gp_now_ns() - t0;
	kill(-pid, SIGKILL);	/* grandchildren; the zombie holds the id */
	/* wait4(): its rusage is the task's, the peak RSS of its process
	 * and of those it waited for (a shell's commands). */
	memset(&ru, 0, sizeof(ru));
	while ((got = wait4(pid, &status, 0, &ru)) == -1 && errno == EINTR)
		;
	gp_ctx_set_pgid(ctx, 0);
	if (pidfd >= 0)
		close(pidfd);
	reap_leftovers();
	/* What the task wrote before it ended is in the pipes; do not wait
	 * for EOF: a leftover not found (no /proc) may hold them open. Live
	 * output sends what the channel takes; the reply has the rest. */
	out.hold = err.hold = OUTPUT_MAX;
	if (out.fd >= 0)
		cap_drain(&out);
	if (err.fd >= 0)
		cap_drain(&err);
	cap_close(&out);
	cap_close(&err);
	rp->peak_rss_kb = got == pid ? ru.ru_maxrss : 0;
	if (got == pid && WIFEXITED(status)) {
		rp->exitval = WEXITSTATUS(status);
	} else {
		rp->exitval = -1;
		rp->signal = got == pid && WIFSIGNALED(status) ?
		    WTERMSIG(status) : 0;
	}
	/* Stopped by us, it failed even if it then exited 0 by itself. */
	if ((rp->flags & (R_TIMEDOUT | R_STOPPED)) && rp->signal == 0 &&
	    sent) {
		rp->exitval = -1;
		rp->signal = sent;
	}
}

/* task_start() where the item's GPUs are: a task holding several GPUs
 * starts bound to all their CPUs and memory (the worker binds itself
 * around the spawn), and a grid's {%} is the slot, from 1 as GNU
 * parallel's. */
/* CPUs this worker is bound to, 1 at least. */
static int
cpus_bound(void)
{
	cpu_set_t	 cs;

	CPU_ZERO(&cs);
	if (sched_getaffinity(0, sizeof(cs), &cs) != 0 || CPU_COUNT(&cs) < 1)
		return 1;
	return CPU_COUNT(&cs);
}

static int
start_placed(struct gp_ctx *ctx, const struct run_conf *rc, uint64_t seq,
    const char *cmd, struct results_files *f, pid_t *pid, int64_t *t0,
    struct task_reply *rp, char *msg, size_t mlen)
{
	char	*slotted = NULL;
	int	 many, started;

	many = strcmp(gp_ctx_item_visible(ctx), gp_ctx_info(ctx)->visible);
	if (many)
		(void)gp_ctx_item_bind(ctx, 1);
	/* --threads: its thread pools fit the CPUs it is bound to now. */
	if (rc->threads >= 0)
		cmdline_env_threads(rc->threads > 0 ? rc->threads :
		    cpus_bound());
	if (rc->grid && strstr(cmd, "{%}") != NULL &&
	    (cmd = slotted = repl_slot(cmd, gp_ctx_info(ctx)->worker + 1)) ==
	    NULL)
		snprintf(msg, mlen, "out of memory");
	started = cmd == NULL ? -1 : task_start(rc, seq, cmd, f, pid, t0, rp,
	    msg, mlen);
	free(slotted);
	if (many)
		(void)gp_ctx_item_bind(ctx, 0);
	return started;
}

int
spawn_task(struct gp_ctx *ctx, const void *in, size_t inlen, void *arg)
{
	const struct run_conf	*rc = arg;
	struct run_conf		 own;
	struct task_reply	 rp;
	struct task_hdr		 h;
	struct results_files	 f = { -1, "", 0 };
	struct pollfd		 sp;
	const char		*cmd;
	char			 msg[512] = "";
	int64_t			 t0;
	pid_t			 pid;
	struct task_need	 nd;
	int			 off;

	memset(&rp, 0, sizeof(rp));
	rp.exitval = -1;
	rp.gpu_util = -1;
	out.len = err.len = 0;
	out.cut = err.cut = 0;
	out.live_fd = err.live_fd = rc->live_fd;
	out.worker = err.worker = gp_ctx_info(ctx)->worker;
	if ((cmd = task_parse(in, inlen, &h)) == NULL ||
	    (off = need_parse(cmd, &nd, NULL, 0)) < 0)
		return 1;
	if (h.timeout_ms != 0) {	/* --timeout N%: its own */
		own = *rc;
		own.timeout_ms = h.timeout_ms;
		rc = &own;
	}
	cmd += off;	/* its tag was the master's */
	out.seq = err.seq = h.seq;
	if (envp == NULL) {	/* the worker's first task */
		if ((envp = cmdline_env(gp_ctx_info(ctx), rc->rank,
		    rc->mpi, rc->threads)) == NULL)
			return 1;
		sigfd = reap_setup();
	}
	cmdline_env_task(h.seq, h.attempt);
	if (cmdline_env_gpus(gp_ctx_item_visible(ctx)) < 0)
		return 1;

	/* Canceled while the task was on its way: do not start it. */
	sp.fd = gp_ctx_stop_fd(ctx);
	sp.events = POLLIN;
	if (poll(&sp, 1, 0) == 1) {
		rp.flags = R_STOPPED | R_NOSTART;
		cap_reply(ctx, &rp, "", &out, &err);
		return 0;
	}
	if (start_placed(ctx, rc, h.seq, cmd, &f, &pid, &t0, &rp, msg,
	    sizeof(msg)) < 0)
		goto nostart;
	task_wait(ctx, rc, pid, t0, &rp);
	/* A result that could not be written fails the task: a resume
	 * must run it again. */
	if (f.dir >= 0 && results_close(&f, rp.exitval >= 0 ? rp.exitval :
	    128 + rp.signal, msg, sizeof(msg)) < 0)
		rp.flags |= R_NORESULT;
	cap_reply(ctx, &rp, msg, &out, &err);
	return 0;

nostart:
	rp.flags |= R_NOSTART;
	cap_close(&out);
	cap_close(&err);
	if (f.dir >= 0)	/* keep the first message: why it did not start */
		(void)results_close(&f, rp.exitval >= 0 ? rp.exitval : 255,
		    NULL, 0);
	rp.run_ns = 0;
	rp.start_ns = gp_clock_ns(CLOCK_REALTIME);
	cap_reply(ctx, &rp, msg, &out, &err);
	return 0;
}
