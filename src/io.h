/*
 * io.h: EINTR-safe blocking I/O and a growable byte buffer (io.c).
 * Never installed. The only EINTR loops outside the master's poll() live
 * here; every function returns 0 (or a byte count) or a negative errno.
 */
#ifndef GP_IO_H
#define GP_IO_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <time.h>

/* A byte buffer: data[off..len) is unconsumed. Starts zeroed. */
struct gp_buf {
	uint8_t		*data;
	size_t		 off;
	size_t		 len;
	size_t		 cap;
};

int	gp_buf_reserve(struct gp_buf *b, size_t more);
int	gp_buf_add(struct gp_buf *b, const void *p, size_t n);
void	gp_buf_consume(struct gp_buf *b, size_t n);
void	gp_buf_release(struct gp_buf *b);

/* Read exactly n bytes; 0 on success, -EPIPE on EOF, -errno otherwise. */
int	gp_read_full(int fd, void *p, size_t n);
/* The same on a nonblocking fd, waiting for it, and -EPIPE when watch
 * (a pidfd, say) turns readable first. */
int	gp_read_watch(int fd, void *p, size_t n, int watch);
/* Write all of iov (modified), waiting out EINTR, short writes and a
 * full nonblocking fd (EAGAIN: poll); 0 or -errno. */
int	gp_writev_full(int fd, struct iovec *iov, int iovcnt);
/* The same, and -EPIPE when watch (a pidfd, say; -1: none) turns
 * readable while the write waits for room. */
int	gp_writev_watch(int fd, struct iovec *iov, int iovcnt, int watch);
/* The same for n bytes at p. */
int	gp_write_full(int fd, const void *p, size_t n);
/* Write b's pending bytes to a nonblocking fd; consumes what went out.
 * Returns 0 (maybe partial, maybe EAGAIN) or -errno. */
int	gp_buf_send(int fd, struct gp_buf *b);
/* One read of a nonblocking fd, at least want bytes of room, appended to
 * b: bytes read, 0 on EOF, -EAGAIN, or -errno. */
ssize_t	gp_buf_recv(int fd, struct gp_buf *b, size_t want);

/* waitpid(pid) restarted on EINTR; returns as waitpid. */
pid_t	gp_waitpid(pid_t pid, int *status, int flags);
/* No wait status: the kernel reaped the child itself (its parent ignores
 * SIGCHLD: SIG_IGN or SA_NOCLDWAIT) or another waiter took it. */
#define GP_WSTATUS_UNKNOWN	(-1)
/* Shell-style code of a wait status: exit code, or 128 + signal; -1 for
 * GP_WSTATUS_UNKNOWN. */
int	gp_wstatus_code(int status);
/* poll()'s timeout until the deadline dl (gp_now_ns() time, or < 0 for
 * none) from now: milliseconds rounded up, -1 for none, clamped to
 * 0..INT_MAX so that a deadline weeks away neither wraps to a negative
 * "for ever" nor to 0, a busy loop. */
int	gp_poll_ms(int64_t dl, int64_t now);
/* poll(), spinning first: while the last wait through *last (its length
 * in ns, or -1: none yet, or it timed out) ended within GP_SPIN_NS, up to
 * GP_SPIN_NS of poll(..., 0) and sched_yield() come before blocking, so
 * that an answer due within microseconds is not a wake-up of a halted
 * CPU (tens of us on a VM); a wait that took longer turns spinning off
 * until a wait is short again. Returns poll()'s result. */
#define GP_SPIN_NS	50000
int	gp_poll_spin(struct pollfd *pfd, nfds_t n, int ms, int64_t *last);
/* CLOCK_MONOTONIC in nanoseconds. */
int64_t	gp_now_ns(void);
int64_t	gp_clock_ns(clockid_t id);	/* clock_gettime(id) in ns */

#endif /* GP_IO_H */
