/*
 * spawn.c: the worker side of gpupool-run. task_run() is the gp_fn that
 * the pool's long-lived, pinned workers call once per task. It starts the
 * command in a process group of its own (so it inherits the worker's CPU,
 * memory and GPU binding but can be killed as a whole), waits on a pidfd,
 * the output pipes, its own deadline and the pool's stop fd, and replies
 * with the outcome and the captured output. Runs only in a worker (but
 * reap_leftovers(), which the master calls too), never prints, and
 * leaves nothing behind: once the leader has exited, what is
 * left of its group is SIGKILLed before the leader is reaped (so the
 * group's id cannot have been reused), then every other process the task
 * left (the worker is their subreaper: reap_leftovers()).
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define NOPIDFD_TICK_MS	20	/* no pidfd_open (< Linux 5.3) */
#define LEFTOVERS_MAX	64	/* killed per pass of reap_leftovers() */
#define LEFTOVERS_WAIT_MS 5000	/* for those killed in one pass to die */
#define ORPHANS_AFTER_NS 1000000000LL	/* reap_exited() from then on */

/* Built once per worker: the environment with our five variables. */
static char	**envp;
static int	  sigfd = -1;	/* SIGCHLD, blocked: an orphan exited */
/* The children this process had when it started (keep_children()). */
static pid_t	 *kept;
static int	  nkept;

static struct cap	 out = { -1, NULL, 0, 0, 0 };
static struct cap	 err = { -1, NULL, 0, 0, 0 };

static int
spawn(pid_t *pid, const char *path, char *const argv[], int ofd, int efd)
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

/* Up to max children of this process, found by the ppid field of
 * /proc/PID/stat (after the command name, which may hold anything):
 * /proc/PID/task/TID/children needs CONFIG_PROC_CHILDREN, which some
 * kernels lack. Returns the count, or -1 without /proc. */
static int
children(pid_t *pids, int max)
{
	struct dirent	*de;
	DIR		*d;
	char		 path[300], buf[256], *p;
	long		 ppid;
	ssize_t		 r;
	pid_t		 self = getpid();
	int		 fd, i, n = 0;

	if ((d = opendir("/proc")) == NULL)
		return -1;
	while (n < max && (de = readdir(d)) != NULL) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		snprintf(path, sizeof(path), "%s/stat", de->d_name);
		if ((fd = openat(dirfd(d), path, O_RDONLY | O_CLOEXEC)) == -1)
			continue;	/* gone since readdir */
		r = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (r <= 0)
			continue;
		buf[r] = '\0';
		if ((p = strrchr(buf, ')')) == NULL ||
		    sscanf(p + 1, " %*c %ld", &ppid) != 1 || ppid != self)
			continue;
		pids[n] = (pid_t)strtol(de->d_name, NULL, 10);
		for (i = 0; i < nkept && kept[i] != pids[n]; i++)
			;
		if (i == nkept)
			n++;
	}
	closedir(d);
	return n;
}

/*
 * A process keeps its children across exec: after sh -c 'nvidia-smi dmon
 * & exec gpupool-run ...' (a batch script, a container's entrypoint) the
 * monitor is gpupool-run's child, yet no task's. main() calls this once,
 * before it becomes a subreaper and forks anything, and reap_leftovers()
 * never touches the children noted. Nothing reaps them (the pool reaps
 * its workers by pid), so their pids cannot be reused by a leftover.
 * Workers inherit the list, harmlessly. Returns 0 or -ENOMEM.
 */
int
keep_children(void)
{
	siginfo_t	 si;
	pid_t		*p;
	int		 max = LEFTOVERS_MAX, n;

	/* Most often there are none: then spare the start a scan of /proc. */
	memset(&si, 0, sizeof(si));
	if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == -1)
		return 0;
	for (;;) {
		if ((p = realloc(kept, (size_t)max * sizeof(*p))) == NULL)
			return -ENOMEM;
		kept = p;
		if ((n = children(kept, max)) < max)
			break;
		max *= 2;
	}
	nkept = n > 0 ? n : 0;
	return 0;
}

/* Whether pid is a child of ours (a zombie included): in a /proc of
 * another PID namespace, the ppid field may name some other process as
 * our pid. An unreaped child stays ours, so kill() reaches it and no
 * other process. */
static int
is_child(pid_t pid)
{
	siginfo_t	 si;

	memset(&si, 0, sizeof(si));
	return waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0;
}

/*
 * Reap the n SIGKILLed children in pids, waiting LEFTOVERS_WAIT_MS at
 * most for them all: one in uninterruptible sleep (a hung NFS server, a
 * GPU driver) may take longer to die, and the exit of one traced by
 * another process (a debugger) is that tracer's to collect first (its
 * pidfd says it exited, waitid() does not see it). Those are reaped by a
 * later call, or by init. Returns how many were reaped.
 */
static int
reap_killed(const pid_t *pids, int n)
{
	struct pollfd	 pfd;
	siginfo_t	 si;
	int64_t		 end, left;
	int		 i, done = 0, exited;

	end = gp_now_ns() + LEFTOVERS_WAIT_MS * 1000000LL;
	for (i = 0; i < n; i++) {
		pfd.fd = (int)syscall(SYS_pidfd_open, pids[i], 0);
		pfd.events = POLLIN;
		exited = 0;
		for (;;) {
			memset(&si, 0, sizeof(si));
			if (waitid(P_PID, (id_t)pids[i], &si, WEXITED |
			    WNOHANG) == -1)
				break;
			if (si.si_pid == pids[i]) {
				done++;
				break;
			}
			left = (end - gp_now_ns()) / 1000000;
			if (exited || left <= 0)
				break;
			if (pfd.fd >= 0)
				exited = poll(&pfd, 1, (int)left) == 1;
			else
				(void)poll(NULL, 0, left < NOPIDFD_TICK_MS ?
				    (int)left : NOPIDFD_TICK_MS);
		}
		if (pfd.fd >= 0)
			close(pfd.fd);
	}
	return done;
}

/*
 * The worker is its tasks' subreaper (PR_SET_CHILD_SUBREAPER): whatever a
 * task leaves running, in its process group or not (coreutils timeout,
 * setsid and job-control shells give their children groups or sessions
 * of their own), becomes the worker's child when its parent exits. Once
 * the task's leader is reaped, every child the worker has is such a
 * leftover: SIGKILL each and reap it by pid, and go on while a pass reaps
 * some (a leftover's own children are ours by the time it is reaped).
 * One that cannot be killed (EPERM: a setuid program that took another
 * uid) is left alone, one that does not die in time is left for later:
 * the slot is not held for either. The master is a subreaper too, for
 * what a worker SIGKILLed before it could do this leaves (main.c), and
 * calls this once its pool and MPI process are reaped; the children it
 * had when it started are not leftovers (keep_children()). The
 * waitid(P_ALL) only asks whether any child is left: WNOWAIT reaps none,
 * and without children it costs one system call.
 */
void
reap_leftovers(void)
{
	pid_t		 pids[LEFTOVERS_MAX];
	siginfo_t	 si;
	int		 i, k, n;

	for (;;) {
		memset(&si, 0, sizeof(si));
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == -1) {
			if (errno == EINTR)
				continue;
			return;		/* ECHILD: none left */
		}
		/* None found: no /proc to look in, or only kept ones. */
		if ((n = children(pids, LEFTOVERS_MAX)) <= 0)
			return;
		for (i = k = 0; i < n; i++)
			if (is_child(pids[i]) && kill(pids[i], SIGKILL) == 0)
				pids[k++] = pids[i];
		if (k == 0 || reap_killed(pids, k) == 0)
			return;
	}
}

/* Once per worker: become the tasks' subreaper, and learn of the exit of
 * an orphan from a signalfd (spawn() unblocks SIGCHLD for the task). */
static void
subreaper_setup(void)
{
	sigset_t	 chld;

	if (prctl(PR_SET_CHILD_SUBREAPER, 1) == -1)
		return;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &chld, NULL) == 0)
		sigfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
}

/* While the task runs: reap, by pid, the orphans it left that have
 * exited (SIGCHLD on sigfd), so that a long task that leaves many does
 * not fill the process table with zombies. Not the leader: its status
 * is wait_task()'s. WNOWAIT looks without reaping. */
static void
reap_exited(pid_t leader)
{
	struct signalfd_siginfo	 ssi;
	siginfo_t		 si;

	while (read(sigfd, &ssi, sizeof(ssi)) > 0)
		;
	for (;;) {
		memset(&si, 0, sizeof(si));
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == -1 ||
		    si.si_pid == 0 || si.si_pid == leader)
			return;
		if (waitid(P_PID, (id_t)si.si_pid, &si, WEXITED) == -1 &&
		    errno != EINTR)
			return;
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
	struct pollfd	 pfd[5];
	siginfo_t	 si;
	int64_t		 now, deadline, kill_at = 0, next;
	int		 n, i, tmo, flags = 0, stopping = 0;
	int		 ipid, iout, ierr, istop, ichld;

	deadline = rc->timeout_ms ? t0 + (int64_t)rc->timeout_ms * 1000000 : 0;
	for (;;) {
		now = gp_now_ns();
		if (!stopping && deadline && now >= deadline) {
			flags |= R_TIMEDOUT;
			stopping = 1;
		}
		if (stopping && !*sent) {
			kill(-pid, SIGTERM);
			*sent = SIGTERM;
			kill_at = now + (int64_t)rc->grace_ms * 1000000;
		}
		if (kill_at && now >= kill_at) {
			kill(-pid, SIGKILL);
			*sent = SIGKILL;
			kill_at = 0;
		}
		next = kill_at ? kill_at : stopping ? 0 : deadline;
		/* Orphans that exit are reaped once the task has run a
		 * while: a short one's are reap_leftovers()' at its end, and
		 * the SIGCHLD of every leader would cost it system calls. */
		if (sigfd >= 0 && now - t0 < ORPHANS_AFTER_NS &&
		    (!next || next > t0 + ORPHANS_AFTER_NS))
			next = t0 + ORPHANS_AFTER_NS;
		/* poll() takes an int: past 24.8 days, wait in steps. */
		tmo = gp_poll_ms(next ? next : -1, now);
		if (pidfd < 0 && (tmo < 0 || tmo > NOPIDFD_TICK_MS))
			tmo = NOPIDFD_TICK_MS;
		n = 0;
		ipid = iout = ierr = istop = ichld = -1;
		if (pidfd >= 0) {
			pfd[n].fd = pidfd;
			pfd[n].events = POLLIN;
			ipid = n++;
		}
		if (out.fd >= 0) {
			pfd[n].fd = out.fd;
			pfd[n].events = POLLIN;
			iout = n++;
		}
		if (err.fd >= 0) {
			pfd[n].fd = err.fd;
			pfd[n].events = POLLIN;
			ierr = n++;
		}
		if (!stopping) {
			pfd[n].fd = gp_ctx_stop_fd(ctx);
			pfd[n].events = POLLIN;
			istop = n++;
		}
		if (sigfd >= 0 && now - t0 >= ORPHANS_AFTER_NS) {
			pfd[n].fd = sigfd;
			pfd[n].events = POLLIN;
			ichld = n++;
		}
		for (i = 0; i < n; i++)
			pfd[i].revents = 0;
		if (poll(pfd, (nfds_t)n, tmo) == -1 && errno != EINTR)
			tmo = 0;	/* cannot happen; keep going */
		if (iout >= 0 && pfd[iout].revents)
			cap_drain(&out);
		if (ierr >= 0 && pfd[ierr].revents)
			cap_drain(&err);
		/* The leader's end (its pidfd) is the task's: the rest
		 * are reap_leftovers()'. */
		if (ichld >= 0 && pfd[ichld].revents &&
		    !(ipid >= 0 && pfd[ipid].revents))
			reap_exited(pid);
		if (istop >= 0 && pfd[istop].revents) {
			/* A STOP for this task, or EOF: the master is gone. */
			flags |= R_STOPPED;
			stopping = 1;
		}
		if (ipid >= 0 && !pfd[ipid].revents)
			continue;
		memset(&si, 0, sizeof(si));
		if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG |
		    WNOWAIT) == 0 && si.si_pid == pid)
			return flags;
	}
}

int
task_run(struct gp_ctx *ctx, const void *in, size_t inlen, void *arg)
{
	const struct run_conf	*rc = arg;
	struct task_reply	 rp;
	struct task_hdr		 h;
	struct results_files	 f = { -1, "", 0 };
	struct pollfd		 sp;
	siginfo_t		 si;
	const char		*cmd;
	char			*sh[] = { "/bin/sh", "-c", NULL, NULL };
	char			**av, msg[512] = "";
	int64_t			 t0;
	int			 ofd = -1, efd = -1, pidfd = -1, e, sent = 0;
	pid_t			 pid;

	memset(&rp, 0, sizeof(rp));
	rp.exitval = -1;
	out.len = err.len = 0;
	out.cut = err.cut = 0;
	if (inlen < sizeof(h))
		return 1;
	memcpy(&h, in, sizeof(h));
	if (h.cmdlen == 0 || inlen != sizeof(h) + h.cmdlen ||
	    ((const char *)in)[inlen - 1] != '\0')
		return 1;
	cmd = (const char *)in + sizeof(h);
	if (envp == NULL) {	/* the worker's first task */
		if ((envp = cmdline_env(gp_ctx_info(ctx), rc->rank,
		    rc->mpi)) == NULL)
			return 1;
		subreaper_setup();
	}
	cmdline_env_task(h.seq, h.attempt);

	/* Canceled while the task was on its way: do not start it. */
	sp.fd = gp_ctx_stop_fd(ctx);
	sp.events = POLLIN;
	if (poll(&sp, 1, 0) == 1) {
		rp.flags = R_STOPPED | R_NOSTART;
		cap_reply(ctx, &rp, "", &out, &err);
		return 0;
	}
	if (rc->results_fd >= 0) {
		if (results_open(rc->results_fd, h.seq, &f, &ofd, &efd, msg,
		    sizeof(msg)) < 0)
			goto nostart;
	} else if ((e = cap_open(&out, &ofd)) < 0 ||
	    (e = cap_open(&err, &efd)) < 0) {
		snprintf(msg, sizeof(msg), "cannot create a pipe: %s",
		    strerror(-e));
		goto nostart;
	}

	rp.start_ns = gp_clock_ns(CLOCK_REALTIME);
	t0 = gp_now_ns();
	e = -ENOENT;
	if (!needs_shell(cmd) && (av = cmdline_split(cmd)) != NULL && av[0] != NULL)
		e = spawn(&pid, av[0], av, ofd, efd);
	if (e < 0) {
		/* Not found, not executable, no #! line: let sh say so
		 * (127, 126) or run it as a script, as a shell would. */
		sh[2] = (char *)cmd;
		e = spawn(&pid, sh[0], sh, ofd, efd);
	}
	close(ofd);
	close(efd);
	ofd = efd = -1;
	if (e < 0) {
		snprintf(msg, sizeof(msg), "cannot run '/bin/sh': %s",
		    strerror(-e));
		rp.exitval = 127;
		goto nostart;
	}
	/* From here the master kills the group if it must kill us. */
	gp_ctx_set_pgid(ctx, pid);
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	rp.flags |= wait_task(ctx, rc, pid, pidfd, t0, &sent);
	rp.run_ns = gp_now_ns() - t0;
	kill(-pid, SIGKILL);	/* grandchildren; the zombie holds the id */
	memset(&si, 0, sizeof(si));
	while (waitid(P_PID, (id_t)pid, &si, WEXITED) == -1 && errno == EINTR)
		;
	gp_ctx_set_pgid(ctx, 0);
	if (pidfd >= 0)
		close(pidfd);
	reap_leftovers();
	/* What the task wrote before it ended is in the pipes; do not wait
	 * for EOF: a leftover not found (no /proc) may hold them open. */
	if (out.fd >= 0)
		cap_drain(&out);
	if (err.fd >= 0)
		cap_drain(&err);
	cap_close(&out);
	cap_close(&err);
	if (si.si_code == CLD_EXITED) {
		rp.exitval = si.si_status;
	} else {
		rp.exitval = -1;
		rp.signal = si.si_status;
	}
	/* Stopped by us, it failed even if it then exited 0 by itself. */
	if ((rp.flags & (R_TIMEDOUT | R_STOPPED)) && rp.signal == 0 && sent) {
		rp.exitval = -1;
		rp.signal = sent;
	}
	/* A result that could not be written fails the task: a resume
	 * must run it again. */
	if (f.dir >= 0 && results_close(&f, rp.exitval >= 0 ? rp.exitval :
	    128 + rp.signal, msg, sizeof(msg)) < 0)
		rp.flags |= R_NORESULT;
	cap_reply(ctx, &rp, msg, &out, &err);
	return 0;

nostart:
	rp.flags |= R_NOSTART;
	if (ofd >= 0)
		close(ofd);
	if (efd >= 0)
		close(efd);
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
