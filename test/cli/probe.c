/*
 * probe.c: the task that check_cli.c gives gpupool-run. Each mode does
 * one thing a test needs to observe from inside a task, and writes what
 * it saw with single O_APPEND writes, so records of concurrent tasks
 * never mix.
 *
 *   probe record LOG MS [EXIT]  "B seq pid pgid" at start, sleep MS,
 *                               "E seq cvd slot gpu attempt start end rank"
 *   probe lines N TAG           N lines "TAG i" on stdout, one write each
 *   probe fds                   the open fds, "0 1 2"
 *   probe flaky DIR K           fail (exit 1) the first K attempts
 *   probe say OUT ERR EXIT      OUT on stdout, ERR on stderr, exit EXIT
 *   probe argv ARGS...          "seq|arg|arg..." on stdout
 */
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long
mono_ns(void)
{
	struct timespec	 ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static const char *
env(const char *name)
{
	const char	*v = getenv(name);

	return v != NULL && *v != '\0' ? v : "-";
}

static void
append(const char *path, const char *line)
{
	int	 fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

	if (fd < 0 || write(fd, line, strlen(line)) != (ssize_t)strlen(line))
		exit(90);
	close(fd);
}

static int
record(const char *log, long ms, int code)
{
	struct timespec	 ts = { ms / 1000, (ms % 1000) * 1000000 };
	char		 line[512];
	long long	 t0 = mono_ns();

	snprintf(line, sizeof(line), "B %s %ld %ld\n", env("GPUPOOL_TASK"),
	    (long)getpid(), (long)getpgrp());
	append(log, line);
	while (nanosleep(&ts, &ts) == -1)
		;
	snprintf(line, sizeof(line), "E %s %s %s %s %s %lld %lld %s\n",
	    env("GPUPOOL_TASK"), env("CUDA_VISIBLE_DEVICES"),
	    env("GPUPOOL_SLOT"), env("GPUPOOL_GPU"), env("GPUPOOL_ATTEMPT"),
	    t0, mono_ns(), env("GPUPOOL_RANK"));
	append(log, line);
	return code;
}

static int
lines(long n, const char *tag)
{
	char	 line[128];
	long	 i;
	int	 len;

	for (i = 0; i < n; i++) {
		len = snprintf(line, sizeof(line), "%s %ld\n", tag, i);
		if (write(1, line, (size_t)len) != len)
			return 91;
		if (i % 64 == 0)
			sched_yield();
	}
	return 0;
}

static int
fds(void)
{
	struct dirent	*de;
	DIR		*d = opendir("/proc/self/fd");
	int		 seen[64] = { 0 }, i, fd, first = 1;

	if (d == NULL)
		return 92;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		fd = atoi(de->d_name);
		if (fd != dirfd(d) && fd >= 0 && fd < 64)
			seen[fd] = 1;
		else if (fd >= 64)
			printf("%d ", fd);
	}
	closedir(d);
	for (i = 0; i < 64; i++)
		if (seen[i]) {
			printf("%s%d", first ? "" : " ", i);
			first = 0;
		}
	printf("\n");
	return 0;
}

static int
flaky(const char *dir, long k)
{
	char	 path[4096], buf[32] = "";
	long	 n = 0;
	FILE	*f;

	snprintf(path, sizeof(path), "%s/count.%s", dir, env("GPUPOOL_TASK"));
	if ((f = fopen(path, "r")) != NULL) {
		if (fgets(buf, sizeof(buf), f) != NULL)
			n = atol(buf);
		fclose(f);
	}
	if ((f = fopen(path, "w")) == NULL)
		return 93;
	fprintf(f, "%ld\n", ++n);
	fclose(f);
	printf("attempt %s count %ld\n", env("GPUPOOL_ATTEMPT"), n);
	return n <= k ? 1 : 0;
}

int
main(int argc, char **argv)
{
	int	 i;

	if (argc >= 4 && strcmp(argv[1], "record") == 0)
		return record(argv[2], atol(argv[3]),
		    argc > 4 ? atoi(argv[4]) : 0);
	if (argc == 4 && strcmp(argv[1], "lines") == 0)
		return lines(atol(argv[2]), argv[3]);
	if (argc == 2 && strcmp(argv[1], "fds") == 0)
		return fds();
	if (argc == 4 && strcmp(argv[1], "flaky") == 0)
		return flaky(argv[2], atol(argv[3]));
	if (argc == 5 && strcmp(argv[1], "say") == 0) {
		printf("%s\n", argv[2]);
		fflush(stdout);
		fprintf(stderr, "%s\n", argv[3]);
		return atoi(argv[4]);
	}
	if (argc >= 2 && strcmp(argv[1], "argv") == 0) {
		printf("%s", env("GPUPOOL_TASK"));
		for (i = 2; i < argc; i++)
			printf("|%s", argv[i]);
		printf("\n");
		return 0;
	}
	fprintf(stderr, "probe: bad arguments\n");
	return 99;
}
