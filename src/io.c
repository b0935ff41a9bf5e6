/*
 * io.c: the EINTR-safe wrappers and the byte buffer both ends use. The
 * master's writes cannot raise SIGPIPE: it holds a read end of every pipe
 * it writes to (loop.c). A worker whose master is gone dies of SIGPIPE,
 * as it should.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "io.h"

int
gp_buf_reserve(struct gp_buf *b, size_t more)
{
	size_t	 need, cap;
	uint8_t	*p;

	if (b->off > 0 && b->off == b->len)
		b->off = b->len = 0;
	if (more > SIZE_MAX - b->len)
		return -ENOMEM;
	need = b->len + more;
	if (need <= b->cap)
		return 0;
	/* Reclaim consumed space before growing. */
	if (b->off > 0) {
		memmove(b->data, b->data + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
		need = b->len + more;
		if (need <= b->cap)
			return 0;
	}
	cap = b->cap ? b->cap : 4096;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	if ((p = realloc(b->data, cap)) == NULL)
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

int
gp_buf_add(struct gp_buf *b, const void *p, size_t n)
{
	int	 rc;

	if (n == 0)
		return 0;
	if ((rc = gp_buf_reserve(b, n)) < 0)
		return rc;
	memcpy(b->data + b->len, p, n);
	b->len += n;
	return 0;
}

void
gp_buf_consume(struct gp_buf *b, size_t n)
{
	b->off += n;
	if (b->off == b->len)
		b->off = b->len = 0;
}

void
gp_buf_release(struct gp_buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

/* Until pfd[0] is ready or pfd[1] (a watch, or -1) readable: 0, -EPIPE
 * for the watch, or -errno. */
static int
await(struct pollfd *pfd)
{
	if (poll(pfd, 2, -1) == -1 && errno != EINTR)
		return -errno;
	return pfd[1].revents ? -EPIPE : 0;
}

int
gp_read_full(int fd, void *p, size_t n)
{
	return gp_read_watch(fd, p, n, -1);
}

int
gp_read_watch(int fd, void *p, size_t n, int watch)
{
	struct pollfd	 pfd[2] = { { fd, POLLIN, 0 }, { watch, POLLIN, 0 } };
	uint8_t		*q = p;
	ssize_t		 r;
	int		 rc;

	while (n > 0) {
		r = read(fd, q, n);
		if (r == -1) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN || watch < 0)
				return -errno;
			if ((rc = await(pfd)) < 0)
				return rc;
			continue;
		}
		if (r == 0)
			return -EPIPE;
		q += r;
		n -= (size_t)r;
	}
	return 0;
}

int
gp_writev_full(int fd, struct iovec *iov, int iovcnt)
{
	return gp_writev_watch(fd, iov, iovcnt, -1);
}

int
gp_writev_watch(int fd, struct iovec *iov, int iovcnt, int watch)
{
	struct pollfd	 pfd[2] = { { fd, POLLOUT, 0 }, { watch, POLLIN, 0 } };
	ssize_t		 r;
	size_t		 left;
	int		 rc;

	while (iovcnt > 0) {
		/* One buffer: write(2), which copies no iovec in. */
		r = iovcnt == 1 ? write(fd, iov->iov_base, iov->iov_len) :
		    writev(fd, iov, iovcnt);
		if (r == -1) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)	/* EAGAIN: someone's O_NONBLOCK */
				return -errno;
			if ((rc = await(pfd)) < 0)
				return rc;
			continue;
		}
		left = (size_t)r;
		while (iovcnt > 0 && left >= iov->iov_len) {
			left -= iov->iov_len;
			iov++;
			iovcnt--;
		}
		if (iovcnt > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + left;
			iov->iov_len -= left;
		}
	}
	return 0;
}

int
gp_buf_send(int fd, struct gp_buf *b)
{
	ssize_t	 r;

	while (b->len > b->off) {
		r = write(fd, b->data + b->off, b->len - b->off);
		if (r == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -errno;
		}
		gp_buf_consume(b, (size_t)r);
	}
	return 0;
}

ssize_t
gp_buf_recv(int fd, struct gp_buf *b, size_t want)
{
	ssize_t	 r;
	int	 rc;

	if ((rc = gp_buf_reserve(b, want)) < 0)
		return rc;
	do
		r = read(fd, b->data + b->len, b->cap - b->len);
	while (r == -1 && errno == EINTR);
	if (r == -1)
		return (errno == EWOULDBLOCK) ? -EAGAIN : -errno;
	b->len += (size_t)r;
	return r;
}

pid_t
gp_waitpid(pid_t pid, int *status, int flags)
{
	pid_t	 r;

	do
		r = waitpid(pid, status, flags);
	while (r == -1 && errno == EINTR);
	return r;
}

int
gp_wstatus_code(int status)
{
	if (status == GP_WSTATUS_UNKNOWN)
		return -1;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return -1;
}

int
gp_poll_ms(int64_t dl, int64_t now)
{
	int64_t	 ms;

	if (dl < 0)
		return -1;
	if (dl <= now)
		return 0;
	ms = (dl - now) / 1000000 + 1;
	return ms > INT_MAX ? INT_MAX : (int)ms;
}

int
gp_poll_spin(struct pollfd *pfd, nfds_t n, int ms, int64_t *last)
{
	int64_t	 t0 = gp_now_ns(), end = t0 + GP_SPIN_NS;
	int	 r = 0;

	if (ms != 0 && *last >= 0 && *last < GP_SPIN_NS)
		while ((r = poll(pfd, n, 0)) == 0 && gp_now_ns() < end)
			(void)sched_yield();
	if (r == 0)
		r = poll(pfd, n, ms);
	*last = r > 0 ? gp_now_ns() - t0 : -1;
	return r;
}

int
gp_write_full(int fd, const void *p, size_t n)
{
	struct iovec	 iov = { (void *)p, n };

	return gp_writev_full(fd, &iov, 1);
}

int64_t
gp_clock_ns(clockid_t id)
{
	struct timespec	 ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t
gp_now_ns(void)
{
	return gp_clock_ns(CLOCK_MONOTONIC);
}
