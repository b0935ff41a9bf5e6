/*
 * reap.c: what a task leaves running when its leader has exited. The
 * worker is its tasks' subreaper, so every process a task leaves, in its
 * group or not, becomes the worker's child when its parent exits:
 * reap_leftovers() SIGKILLs and reaps each by pid once the task is over,
 * reap_exited() reaps those that exit while a long task runs. The master
 * is a subreaper too, for what a SIGKILLed worker leaves (main.c). The
 * children a process had when it started (inherited across exec) are
 * never touched: reap_keep_children() notes them first. Never prints.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "worker/worker.h"

#define LEFTOVERS_MAX	64	/* killed per pass of reap_leftovers() */
#define LEFTOVERS_WAIT_MS 5000	/* for those killed in one pass to die */

/* The children this process had when it started (reap_keep_children()). */
static pid_t	 *kept;
static int	  nkept;

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
reap_keep_children(void)
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
 * had when it started are not leftovers (reap_keep_children()). The
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
int
reap_setup(void)
{
	sigset_t	 chld;

	if (prctl(PR_SET_CHILD_SUBREAPER, 1) == -1)
		return -1;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &chld, NULL) == -1)
		return -1;
	return signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
}

/* While the task runs: reap, by pid, the orphans it left that have
 * exited (SIGCHLD on sigfd), so that a long task that leaves many does
 * not fill the process table with zombies. Not the leader: its status
 * is wait_task()'s. WNOWAIT looks without reaping. */
void
reap_exited(int sigfd, pid_t leader)
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
