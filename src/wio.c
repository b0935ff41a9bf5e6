/*
 * wio.c: a worker's blocking I/O on its two pipes to the master, and its
 * watch of the master. Runs only in a worker. Every call here either
 * moves all it was asked to or leaves by _exit(): EOF, a write error, or,
 * under GP_POOL_NO_PDEATHSIG, the master's pidfd turning readable, which
 * EOF alone cannot tell (a process the master forked without exec, a
 * logger or Python's multiprocessing, holds the pipes open as long as it
 * lives). A full or empty nonblocking pipe is waited out, never taken
 * for a dead master.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

/* The master's pidfd, or -1 (not watched, or no pidfds here), and the
 * stop fd watching it. One per process: a worker is its own process. */
static int	 master_pidfd = -1;
static int	 master_epfd = -1;
static int64_t	 spin_last = -1;	/* gp_poll_spin()'s, the task pipe's */

void
gp_wio_wait(int fd, short events)
{
	struct pollfd	 pfd[2] = { { fd, events, 0 },
				    { master_pidfd, POLLIN, 0 } };

	while (gp_poll_spin(pfd, 2, -1, &spin_last) == -1)
		if (errno != EINTR)
			gp_wstart_leave();
	if (pfd[1].revents)
		gp_wstart_leave();	/* the master is gone */
}

/* SIGPIPE is held while the worker writes to its master: the master's
 * pipes close as it exits, before the kernel sends the death signal, so a
 * reply cut by its death would otherwise kill the worker there and then,
 * and the process group it leads would outlive both (gp_wstart_leave()).
 * A write that succeeded raised none, so the old mask comes back as it
 * was; one that failed leaves with it pending. */
void
gp_wio_sendv(int fd, struct iovec *iov, int n)
{
	sigset_t	 pipe, old;

	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	(void)sigprocmask(SIG_BLOCK, &pipe, &old);
	if (gp_writev_watch(fd, iov, n, master_pidfd) < 0)
		gp_wstart_leave();	/* the master is gone */
	(void)sigprocmask(SIG_SETMASK, &old, NULL);
}

void
gp_wio_send(int fd, struct gp_buf *b)
{
	struct iovec	 iov = { b->data + b->off, b->len - b->off };

	if (iov.iov_len > 0)
		gp_wio_sendv(fd, &iov, 1);
	b->off = b->len = 0;
}

void
gp_wio_read(int fd, void *p, size_t n)
{
	if (gp_read_watch(fd, p, n, master_pidfd) < 0)
		gp_wstart_leave();	/* EOF, or the master is gone */
}

void
gp_wio_next(int fd, struct gp_buf *in, size_t max, struct gp_msg_hdr *h,
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
		/* The master's next bytes, or its death (the pidfd, when
		 * watched), waited for spinning first (gp_poll_spin()). */
		gp_wio_wait(fd, POLLIN);
		do
			r = read(fd, in->data + in->len, in->cap - in->len);
		while (r == -1 && errno == EINTR);
		if (r == -1 && errno == EAGAIN)
			continue;
		if (r <= 0)
			gp_wstart_leave();	/* EOF: the master is gone */
		in->len += (size_t)r;
	}
	*payload = in->data + in->off + sizeof(*h);
	in->off += (size_t)m;	/* valid until the next reserve */
}

/*
 * Without PR_SET_PDEATHSIG the worker watches a pidfd of its master, so it
 * learns of the master's death whatever holds its pipes: idle, in
 * gp_wio_next(); busy, through the stop fd, made an epoll set of the task
 * pipe and that pidfd (readable when either is). Opened first, checked
 * after: if the parent is still the master, the pidfd is the master's
 * and not a process that reused its pid. Without pidfds (Linux < 5.3,
 * valgrind) EOF is all there is.
 */
static void
watch_master(struct gp_pool *p, int fd, int *stop)
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
	    epoll_ctl(efd, EPOLL_CTL_ADD, fd, &ev) < 0 ||
	    epoll_ctl(efd, EPOLL_CTL_ADD, pfd, &ev) < 0) {
		if (efd >= 0)
			close(efd);
		close(pfd);
		return;
	}
	master_pidfd = pfd;
	master_epfd = efd;
	*stop = efd;
}

int
gp_wio_watch(struct gp_pool *p, int fd)
{
	int	 stop = fd;

	/* Forked by a pool made in fn: the outer worker's watch is not
	 * ours, and its fds must not stay open here. */
	if (master_pidfd >= 0)
		close(master_pidfd);
	if (master_epfd >= 0)
		close(master_epfd);
	master_pidfd = master_epfd = -1;
	if (p->o.flags & GP_POOL_NO_PDEATHSIG)
		watch_master(p, fd, &stop);
	return stop;
}

int
gp_wio_watched(void)
{
	return master_pidfd >= 0;
}
