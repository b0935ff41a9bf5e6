/*
 * stamp.c: a task for the benchmark harness that records when it ran.
 *
 *	stamp FILE [TAG [MS]]
 *
 * Takes CLOCK_REALTIME as soon as main() runs, sleeps MS milliseconds
 * (default 0), takes it again and appends one line to FILE in a single
 * O_APPEND write (atomic against the other tasks):
 *
 *	TAG START_NS END_NS CUDA_VISIBLE_DEVICES
 *
 * The harness uses it as the first task of a run (launch to first task
 * start) and to check that each runner ran every task, at most J at a
 * time, each on a GPU no concurrent task holds.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long
now_ns(void)
{
	struct timespec	 ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int
main(int argc, char **argv)
{
	long long	 t0 = now_ns(), t1;
	const char	*gpu = getenv("CUDA_VISIBLE_DEVICES");
	char		 buf[512];
	int		 fd, n;
	long		 ms = argc > 3 ? atol(argv[3]) : 0;

	if (argc < 2 || argc > 4) {
		fprintf(stderr, "usage: stamp FILE [TAG [MS]]\n");
		return 2;
	}
	if (ms > 0) {
		struct timespec	 ts = { ms / 1000, (ms % 1000) * 1000000L };

		while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
			;
	}
	t1 = now_ns();
	n = snprintf(buf, sizeof(buf), "%s %lld %lld %s\n",
	    argc > 2 ? argv[2] : "-", t0, t1,
	    gpu != NULL && *gpu != '\0' ? gpu : "-");
	if (n < 0 || n >= (int)sizeof(buf))
		return 1;
	if ((fd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
	    0644)) == -1 || write(fd, buf, (size_t)n) != n) {
		fprintf(stderr, "stamp: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	close(fd);
	return 0;
}
