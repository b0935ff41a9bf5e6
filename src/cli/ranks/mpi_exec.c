/*
 * mpi_exec.c: a rank's MPI process (mpi_proc.c) as a program of its own,
 * for a rank that cannot fork it from C before it starts anything: the
 * Python package's `python -m gpupool` (gpupool/_ranks.py), which runs it
 * as
 *
 *	_mpiproc FD MEMFD PARENT RINGFD
 *
 * with FD its end of a socketpair, MEMFD the shared memory (mpi.c's
 * opening comment), PARENT the rank's pid and RINGFD its rings (its out
 * ring, then its in ring: ranks.h, FR_RING_*), or -1: none. The frames are the same
 * as gpupool-run's; exit 64 for a bad command line.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ranks/ranks.h"

static long
arg(const char *s)
{
	char	*end;
	long	 v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < 0)
		return -1;
	return v;
}

int
main(int argc, char **argv)
{
	long	 fd, memfd, parent, ringfd = -1;

	if (argc != 5 || (fd = arg(argv[1])) < 0 ||
	    (memfd = arg(argv[2])) < 0 || (parent = arg(argv[3])) <= 0 ||
	    (strcmp(argv[4], "-1") != 0 && (ringfd = arg(argv[4])) < 0)) {
		fprintf(stderr, "usage: %s FD MEMFD PARENT RINGFD (run by "
		    "gpupool's Python package, not by hand)\n", argv[0]);
		return 64;
	}
	mproc_main((int)fd, (int)memfd, (int)ringfd, (pid_t)parent);
}
