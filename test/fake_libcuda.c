/*
 * fake_libcuda.c: a stand-in libcuda.so.1 that records which process
 * loaded it. cudart dlopens libcuda.so.1 on its first call, so the log
 * names every process that touched CUDA (check_cudafork.c). It exports no
 * driver entry point: cudart then reports an error, as with no driver.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void
loaded(void)
{
	const char	*log = getenv("GP_FAKE_CUDA_LOG");
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
