/*
 * mon.c: the GPU monitor, the one process of a pool that loads NVML.
 * The master forks it before the workers (as gpu.c forks the probe) and
 * talks to it over a socketpair: a request (a header and the workers'
 * pids) goes down, one struct gp_mon_snap of m->snaplen bytes comes back.
 * The monitor has nvml.c dlopen libnvidia-ml.so.1 (or $GPUPOOL_NVML) on
 * its first request, so a pool that never asks never loads it; without
 * NVML every reply says why (ok 0, err) and the pool works as without a
 * monitor.
 * The child dies with the master (PR_SET_PDEATHSIG, and EOF on its
 * channel), keeps only its channel (as fd 3) and 0-2, never runs user
 * code and leaves only by _exit(). The master side never blocks but in
 * gp_mon_sample() and in gp_mon_stop()'s reap of a SIGKILLed child.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "mon.h"
#include "nvml.h"

#define MON_MAGIC	0x51504d47u	/* "GMPQ": a request */
#define MON_MAX_PIDS	GP_MAX_WORKERS
#define MON_MAX_GPUS	GP_MAX_WORKERS
#define MON_CHANNEL	3		/* the channel's fd in the monitor */
/* P_PIDFD (Linux 5.4), spelled out for libcs that do not name it. */
#define MON_P_PIDFD	((idtype_t)3)

struct mon_req {
	uint32_t	 magic;
	int32_t		 nw;		/* pids that follow */
};

static size_t
snap_len(int n)
{
	return sizeof(struct gp_mon_snap) + (size_t)n * sizeof(struct gp_mon_gpu);
}

/* ---- The monitor (child) ---- */

/* Every fd from lo up: close_range(), else each one /proc lists. */
static void
close_from(int lo)
{
	struct dirent	*de;
	DIR		*d;
	int		 fd;

#ifdef SYS_close_range
	if (syscall(SYS_close_range, (unsigned)lo, ~0U, 0) == 0)
		return;
#endif
	if ((d = opendir("/proc/self/fd")) == NULL)
		return;
	while ((de = readdir(d)) != NULL)
		if ((fd = atoi(de->d_name)) >= lo && fd != dirfd(d))
			close(fd);
	closedir(d);
}

/* Dies with the master; no handler of the host's, nothing blocked (^C
 * is the master's to handle, as in a worker); only fds 0-2 and the
 * channel, moved to MON_CHANNEL. */
static void
child_setup(int ch, pid_t master)
{
	gp_wstart_reset_signals(master, 1);
	if (ch != MON_CHANNEL && dup2(ch, MON_CHANNEL) == -1)
		_exit(1);	/* the master sees EOF: no monitor */
	close_from(MON_CHANNEL + 1);
}

/* The monitor: a snapshot per request, until EOF. */
static void __attribute__((noreturn))
mon_main(int ch, const struct gp_gpu *g, int n, pid_t master)
{
	struct gp_mon_snap	*s;
	struct mon_req		 rq;
	pid_t			*pids;

	child_setup(ch, master);
	if ((s = malloc(snap_len(n))) == NULL ||
	    (pids = calloc(MON_MAX_PIDS, sizeof(*pids))) == NULL)
		_exit(GP_EXIT_NOMEM);
	while (gp_read_full(MON_CHANNEL, &rq, sizeof(rq)) == 0) {
		if (rq.magic != MON_MAGIC || rq.nw < 0 || rq.nw > MON_MAX_PIDS)
			_exit(GP_EXIT_PROTO);
		if (rq.nw > 0 && gp_read_full(MON_CHANNEL, pids,
		    (size_t)rq.nw * sizeof(*pids)) < 0)
			break;
		gp_nvml_snapshot(g, n, pids, rq.nw, s);
		if (gp_write_full(MON_CHANNEL, s, snap_len(n)) < 0)
			break;
	}
	gp_nvml_close();
	_exit(0);
}

/* ---- The master's side ---- */

int
gp_mon_start(struct gp_mon *m, const struct gp_gpu *g, int n, char *err,
    size_t errlen)
{
	pid_t	 master = getpid(), pid;
	int	 sv[2], rc;

	memset(m, 0, sizeof(*m));
	m->fd = m->pidfd = -1;
	if (n < 0 || n > MON_MAX_GPUS)
		return gp_errf(err, errlen, -EINVAL,
		    "GPU monitor: %d GPUs (0 to %d)", n, MON_MAX_GPUS);
	m->ngpu = n;
	m->snaplen = snap_len(n);
	/* Two halves: the one being received, the last whole one. */
	if ((m->rx = malloc(2 * m->snaplen)) == NULL)
		return gp_errf(err, errlen, -ENOMEM, "GPU monitor: no memory");
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == -1) {
		rc = -errno;
		gp_mon_stop(m);
		return gp_errf(err, errlen, rc, "GPU monitor: socketpair: %s",
		    strerror(-rc));
	}
	fflush(NULL);
	if ((pid = fork()) == -1) {
		rc = -errno;
		close(sv[0]);
		close(sv[1]);
		gp_mon_stop(m);
		return gp_errf(err, errlen, rc, "GPU monitor: fork: %s",
		    strerror(-rc));
	}
	if (pid == 0) {
		close(sv[0]);
		mon_main(sv[1], g, n, master);
	}
	close(sv[1]);
	(void)fcntl(sv[0], F_SETFL, O_NONBLOCK);
	m->fd = sv[0];
	m->pid = pid;
	m->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	return 0;
}

/*
 * One sendmsg(), MSG_NOSIGNAL: a monitor that died gives EPIPE, not a
 * SIGPIPE in a host whose signals are not ours. Whole or nothing: a
 * request (at most 4 KiB and 8 bytes) goes only when the last one is
 * answered, so the monitor has read everything before it and the
 * socket's buffer is empty.
 */
int
gp_mon_request(struct gp_mon *m, const pid_t *pids, int nw)
{
	struct mon_req	 rq = { MON_MAGIC, nw };
	struct iovec	 iov[2];
	struct msghdr	 mh;
	ssize_t		 r;
	int		 rc;

	if (m->pid <= 0)
		return -EPIPE;
	if (m->pending)
		return -EALREADY;
	if (nw < 0 || nw > MON_MAX_PIDS || (nw > 0 && pids == NULL))
		return -EINVAL;
	iov[0].iov_base = &rq;
	iov[0].iov_len = sizeof(rq);
	iov[1].iov_base = (void *)pids;
	iov[1].iov_len = (size_t)nw * sizeof(*pids);
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = iov;
	mh.msg_iovlen = nw > 0 ? 2 : 1;
	do
		r = sendmsg(m->fd, &mh, MSG_NOSIGNAL);
	while (r == -1 && errno == EINTR);
	if (r == (ssize_t)(iov[0].iov_len + (nw > 0 ? iov[1].iov_len : 0))) {
		m->pending = 1;
		return 0;
	}
	rc = r == -1 ? -errno : -EIO;
	gp_mon_stop(m);
	return rc;
}

/* Whether the reply in m->rx is one: the pool's GPU count, counts in
 * range; its strings are terminated here. */
static int
snap_ok(struct gp_mon *m)
{
	struct gp_mon_snap	*s = (struct gp_mon_snap *)m->rx;
	int			 i;

	if ((s->ok != 0 && s->ok != 1) || s->ngpu != m->ngpu)
		return 0;
	s->err[sizeof(s->err) - 1] = '\0';
	for (i = 0; i < s->ngpu; i++) {
		if (s->gpu[i].nproc < 0 || s->gpu[i].nproc > GP_MON_PROCS)
			return 0;
		s->gpu[i].err[sizeof(s->gpu[i].err) - 1] = '\0';
	}
	return 1;
}

int
gp_mon_read(struct gp_mon *m)
{
	ssize_t	 r;
	int	 rc;

	if (m->pid <= 0)
		return -EPIPE;
	while (m->got < m->snaplen) {
		r = read(m->fd, m->rx + m->got, m->snaplen - m->got);
		if (r == -1 && errno == EINTR)
			continue;
		if (r == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (r <= 0 || !m->pending) {
			/* EOF, a short reply, or one nobody asked for. */
			rc = r == 0 ? -EPIPE : r < 0 ? -errno : -EPROTO;
			gp_mon_stop(m);
			return rc;
		}
		m->got += (size_t)r;
	}
	if (!snap_ok(m)) {
		gp_mon_stop(m);
		return -EPROTO;
	}
	memcpy(m->rx + m->snaplen, m->rx, m->snaplen);
	m->snap = (struct gp_mon_snap *)(m->rx + m->snaplen);
	m->got = 0;
	m->pending = 0;
	return 1;
}

int
gp_mon_wait(struct gp_mon *m, int64_t dl)
{
	struct pollfd	 pfd;
	int64_t		 now;
	int		 rc;

	while (m->pending) {
		if ((rc = gp_mon_read(m)) != 0)
			return rc < 0 ? rc : 0;
		if ((now = gp_now_ns()) >= dl)
			return -ETIMEDOUT;
		pfd.fd = m->fd;
		pfd.events = POLLIN;
		if (poll(&pfd, 1, gp_poll_ms(dl, now)) == -1 && errno != EINTR)
			return -errno;
	}
	return 0;
}

/* A request already pending is waited out first, so that the snapshot
 * returned answers this one (these pids). */
int
gp_mon_sample(struct gp_mon *m, const pid_t *pids, int nw, int timeout_ms)
{
	int64_t		 dl = gp_now_ns() + (int64_t)timeout_ms * 1000000;
	int		 rc;

	if ((rc = gp_mon_wait(m, dl)) < 0 ||
	    (rc = gp_mon_request(m, pids, nw)) < 0)
		return rc;
	return gp_mon_wait(m, dl);
}

/* Wait for the SIGKILLed monitor through its pidfd where there is one:
 * if the host ignores SIGCHLD its pid may be another child's by now. */
static void
reap(struct gp_mon *m)
{
	siginfo_t	 si;
	int		 r, status;

	if (m->pidfd >= 0) {
		while ((r = waitid(MON_P_PIDFD, (id_t)m->pidfd, &si, WEXITED))
		    == -1 && errno == EINTR)
			;
		if (r == 0 || errno != EINVAL)
			return;
	}
	(void)gp_waitpid(m->pid, &status, 0);
}

void
gp_mon_stop(struct gp_mon *m)
{
	if (m->fd >= 0)
		close(m->fd);
	if (m->pid > 0) {
		if (m->pidfd >= 0)
			(void)syscall(SYS_pidfd_send_signal, m->pidfd, SIGKILL,
			    NULL, 0);
		else
			(void)kill(m->pid, SIGKILL);
		reap(m);
		if (m->pidfd >= 0)
			close(m->pidfd);
	}
	free(m->rx);
	m->rx = NULL;
	m->snap = NULL;
	m->fd = m->pidfd = -1;
	m->pid = 0;
	m->got = 0;
	m->pending = 0;
}
