/*
 * fake_log.h: what a fake library of the tests (fake_libcuda.c,
 * fake_nvml.c) does when a process loads it: append that process's pid
 * to the file named by an environment variable, so that a test proves
 * which processes loaded it (check_cudafork.c, check_mon.c).
 */
#ifndef GP_FAKE_LOG_H
#define GP_FAKE_LOG_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Append getpid() to $env's file, if env is set; _exit(99) on a short
 * write, which the test then sees. */
static inline void
fake_log_load(const char *env)
{
	const char	*log = getenv(env);
	char		 line[32];
	int		 fd, n;

	if (log == NULL ||
	    (fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600)) < 0)
		return;
	n = snprintf(line, sizeof(line), "%d\n", (int)getpid());
	if (write(fd, line, (size_t)n) != n)
		_exit(99);
	close(fd);
}

#endif /* GP_FAKE_LOG_H */
