/*
 * mpi_stub.c: stands in for mpi.c in a build without MPI (-Dmpi=disabled,
 * or none found): one rank. Started by a launcher as one of several
 * processes, each would run every task, so that is refused.
 */
#include <errno.h>
#include <stdio.h>

#include "cli.h"

int
ranks_init(struct ranks **rkp, char *err, size_t errlen)
{
	const char	*var;
	long		 n;

	*rkp = NULL;
	if ((n = launcher_procs(&var)) <= 1)
		return 0;
	snprintf(err, errlen, "started as one of %ld processes (%s), but this "
	    "gpupool-run was built without MPI: each would run every task "
	    "(rebuild with -Dmpi=enabled, or start one)", n, var);
	return -ENOTSUP;
}

const char *
ranks_build(void)
{
	return "without MPI";
}

int
ranks_rank(const struct ranks *rk)
{
	return 0;
}

int
ranks_size(const struct ranks *rk)
{
	return 1;
}

/* With no ranks (rk is always NULL) nothing below is reached; they exist
 * for the linker. */
int
ranks_start(struct ranks *rk, char *err, size_t errlen)
{
	return 0;
}

const char *
ranks_host(const struct ranks *rk)
{
	return ":";
}

int
ranks_fd(const struct ranks *rk)
{
	return -1;
}

void
ranks_forget(struct ranks *rk, int peer)
{
}

int
ranks_send(struct ranks *rk, int peer, int type, const void *data,
    size_t len)
{
	return -ENOTSUP;
}

struct rmsg *
ranks_recv(struct ranks *rk, char *err, size_t errlen)
{
	snprintf(err, errlen, "gpupool-run was built without MPI");
	return NULL;
}

int64_t
ranks_silent(struct ranks *rk, int peer)
{
	return 0;
}

int
ranks_end(struct ranks *rk, int clean, int rc)
{
	return 0;
}
