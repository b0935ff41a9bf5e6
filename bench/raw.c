/*
 * raw.c: the lower bounds bench_pool measures libgpupool against, with no
 * library call: a ping-pong with a long-lived echo child over pipes or a
 * socketpair, batches of ints to 4 children over pipes, and this
 * machine's memcpy. Each exits the program on a failed system call.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "raw.h"

double
now_s(void)
{
	struct timespec	 ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
xread(int fd, void *buf, size_t len)
{
	char	*p = buf;
	ssize_t	 n;

	while (len > 0) {
		if ((n = read(fd, p, len)) <= 0) {
			if (n == -1 && errno == EINTR)
				continue;
			exit(1);
		}
		p += n;
		len -= (size_t)n;
	}
}

static void
xwrite(int fd, const void *buf, size_t len)
{
	const char	*p = buf;
	ssize_t		 n;

	while (len > 0) {
		if ((n = write(fd, p, len)) <= 0) {
			if (n == -1 && errno == EINTR)
				continue;
			exit(1);
		}
		p += n;
		len -= (size_t)n;
	}
}

/*
 * Raw lower bound: round trips of a 4-byte message to a long-lived echo
 * child (long-lived like a pool worker, so both sides are measured in the
 * same steady state), over two pipes or over a socketpair (what libgpupool
 * uses).
 */
void
echo_start(struct echo_child *e, int use_pipes)
{
	int	 a[2], b[2], cin, cout, x;

	if (use_pipes) {
		if (pipe2(a, O_CLOEXEC) == -1 || pipe2(b, O_CLOEXEC) == -1)
			exit(1);
		e->to = a[1];
		e->from = b[0];
		cin = a[0];
		cout = b[1];
	} else {
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a) ==
		    -1)
			exit(1);
		e->to = e->from = a[0];
		cin = cout = a[1];
	}
	if ((e->pid = fork()) == -1)
		exit(1);
	if (e->pid == 0) {
		int	 fd;

		/* Keep only its own ends: another child's write end or the
		 * pool's sockets held here would hide EOF from their peers. */
		for (fd = 3; fd < 1024; fd++)
			if (fd != cin && fd != cout)
				close(fd);
		while (read(cin, &x, sizeof(x)) == sizeof(x)) {
			x *= 2;
			if (write(cout, &x, sizeof(x)) != sizeof(x))
				break;
		}
		_exit(0);
	}
	close(cin);
	if (cout != cin)
		close(cout);
}

double
echo_run(struct echo_child *e, int n)
{
	int	 i, x;
	double	 t0 = now_s();

	for (i = 0; i < n; i++)
		if (write(e->to, &i, sizeof(i)) != sizeof(i) ||
		    read(e->from, &x, sizeof(x)) != sizeof(x) || x != 2 * i)
			exit(1);
	return (now_s() - t0) / n * 1e6;
}

void
echo_stop(struct echo_child *e)
{
	close(e->to);
	if (e->from != e->to)
		close(e->from);
	waitpid(e->pid, NULL, 0);
}

/* n round trips on a fresh child, after a warm-up: microseconds each. */
double
raw_pingpong(int n, int use_pipes)
{
	struct echo_child	 e;
	double			 us;

	echo_start(&e, use_pipes);
	echo_run(&e, n / 10 + 1);
	us = echo_run(&e, n);
	echo_stop(&e);
	return us;
}

/* A raw_batch() child: doubles each batch of ints read from in onto out,
 * until in ends. */
static void __attribute__((noreturn))
batch_child(int in, int out, int *buf)
{
	uint32_t	 k, j;

	for (;;) {
		ssize_t	 r = read(in, &k, sizeof(k));

		if (r != sizeof(k))
			_exit(0);
		xread(in, buf, k * sizeof(int));
		for (j = 0; j < k; j++)
			buf[j] *= 2;
		xwrite(out, buf, k * sizeof(int));
	}
}

/*
 * Raw batched bound for trivial items: WORKERS echo children over pipes,
 * each sent batches of b ints (a u32 count, then the ints), one batch in
 * flight per child. No per-item allocation, no result bookkeeping.
 */
double
raw_batch(size_t n, uint32_t b)
{
	int		 to[WORKERS], from[WORKERS], w, busy = 0;
	pid_t		 pid[WORKERS];
	size_t		 next = 0, i, at[WORKERS];
	uint32_t	 cnt[WORKERS];
	int		*v = malloc(n * sizeof(int)), *out = malloc(n *
			    sizeof(int)), *buf = malloc(b * sizeof(int));
	struct pollfd	 pf[WORKERS];
	double		 t0, t;

	if (v == NULL || out == NULL || buf == NULL)
		exit(1);
	for (i = 0; i < n; i++)
		v[i] = (int)i;
	for (w = 0; w < WORKERS; w++) {
		int	 a[2], c[2];

		if (pipe2(a, O_CLOEXEC) == -1 || pipe2(c, O_CLOEXEC) == -1)
			exit(1);
		if ((pid[w] = fork()) == -1)
			exit(1);
		if (pid[w] == 0) {
			close(a[1]);
			close(c[0]);
			while (w-- > 0) {	/* the other children's ends */
				close(to[w]);
				close(from[w]);
			}
			batch_child(a[0], c[1], buf);
		}
		close(a[0]);
		close(c[1]);
		to[w] = a[1];
		from[w] = c[0];
		pf[w].fd = c[0];
		pf[w].events = POLLIN;
		cnt[w] = 0;
	}
	t0 = now_s();
	for (;;) {
		for (w = 0; w < WORKERS && next < n; w++) {
			if (cnt[w] != 0)
				continue;
			cnt[w] = (uint32_t)(n - next < b ? n - next : b);
			at[w] = next;
			next += cnt[w];
			xwrite(to[w], &cnt[w], sizeof(cnt[w]));
			xwrite(to[w], &v[at[w]], cnt[w] * sizeof(int));
			busy++;
		}
		if (busy == 0)
			break;
		if (poll(pf, WORKERS, -1) == -1 && errno != EINTR)
			exit(1);
		for (w = 0; w < WORKERS; w++)
			if (cnt[w] != 0 && (pf[w].revents & (POLLIN |
			    POLLHUP))) {
				xread(from[w], &out[at[w]], cnt[w] *
				    sizeof(int));
				cnt[w] = 0;
				busy--;
			}
	}
	t = now_s() - t0;
	for (i = 0; i < n; i++)
		if (out[i] != 2 * (int)i)
			abort();	/* a wrong result */
	for (w = 0; w < WORKERS; w++) {
		close(to[w]);
		close(from[w]);
		waitpid(pid[w], NULL, 0);
	}
	free(v);
	free(out);
	free(buf);
	return (double)n / t;
}

/*
 * memcpy of size bytes, n times, between two buffers written and copied
 * once before the clock starts (the first copy after the writes ran at a
 * third of the speed of the next ones here): bytes copied per second. The
 * empty asm tells the compiler that memory it cannot see is read and
 * written after each copy, so no copy is dropped or merged.
 */
double
memcpy_bw(size_t size, size_t n)
{
	unsigned char	*src = malloc(size), *dst = malloc(size);
	size_t		 i;
	double		 t0, t;

	if (src == NULL || dst == NULL)
		exit(1);
	for (i = 0; i < size; i++)
		src[i] = (unsigned char)(i * 7 + 1);
	memset(dst, 0, size);
	memcpy(dst, src, size);
	__asm__ __volatile__("" : : "r" (dst), "r" (src) : "memory");
	t0 = now_s();
	for (i = 0; i < n; i++) {
		memcpy(dst, src, size);
		__asm__ __volatile__("" : : "r" (dst), "r" (src) : "memory");
	}
	t = now_s() - t0;
	if (memcmp(dst, src, size) != 0)
		abort();
	free(src);
	free(dst);
	return (double)size * (double)n / t;
}
