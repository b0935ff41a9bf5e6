/*
 * mpi_stub.c: the ranks in gpupool-run itself, which does not link MPI
 * (MPI's libraries would add a third to its footprint on one machine):
 * one rank. Started by an MPI launcher, it becomes gpupool-run-mpi (the
 * same program with mpi.c, built with -Dmpi) by exec, before doing
 * anything; without that program, several processes of a launcher are
 * refused, since each would run every task.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ranks/ranks.h"
#ifdef GP_MPI_PROGRAM
#include "mpi_lib.h"
#endif

extern char **environ;

/* gpupool-run-mpi: beside this program (a build tree), or where it is
 * installed. NULL if neither. */
static const char *
mpi_program(void)
{
	static char	 path[PATH_MAX];
	char		 self[PATH_MAX];
	ssize_t		 n;

	if ((n = readlink("/proc/self/exe", self, sizeof(self) - 1)) > 0) {
		self[n] = '\0';
		snprintf(path, sizeof(path), "%s/%s", dirname(self),
		    "gpupool-run-mpi");
		if (access(path, X_OK) == 0)
			return path;
	}
#ifdef GP_MPI_PROGRAM
	if (access(GP_MPI_PROGRAM, X_OK) == 0)
		return GP_MPI_PROGRAM;
#endif
	return NULL;
}

/*
 * The machine's MPI library, loaded to see that it is there: the program
 * needs it, and a wheel does not carry it (it must match this machine's
 * launcher and network). Without it the dynamic loader would only say
 * that a file is missing, from inside every rank.
 */
static int
mpi_loadable(const char *prog, char *err, size_t errlen)
{
#ifdef GP_MPI_PROGRAM
	if (GP_MPI_LIB[0] != '\0' &&
	    dlopen(GP_MPI_LIB, RTLD_LAZY | RTLD_LOCAL) == NULL) {
		snprintf(err, errlen, "started by an MPI launcher, but %s needs "
		    "the machine's MPI library %s, which cannot be loaded (%s): "
		    "install that MPI or load its module, or build gpupool "
		    "against this machine's MPI", prog, GP_MPI_WHAT, dlerror());
		return -1;
	}
#endif
	return 0;
}

void
ranks_handover(char **argv, char *err, size_t errlen)
{
	const char	*prog;

	if (!launcher_mpi() || (prog = mpi_program()) == NULL ||
	    mpi_loadable(prog, err, errlen) == -1)
		return;
	argv[0] = (char *)prog;
	execve(prog, argv, environ);
	snprintf(err, errlen, "cannot start %s: %s", prog, strerror(errno));
}

int
ranks_init(struct ranks **rkp, const sigset_t *stop, char *err,
    size_t errlen)
{
	const char	*var;
	long		 n;

	*rkp = NULL;
	if ((n = launcher_procs(&var)) <= 1)
		return 0;
	if (mpi_program() != NULL)
		snprintf(err, errlen, "started as one of %ld processes (%s) "
		    "without MPI wire-up: each would run every task (under "
		    "Slurm: srun --mpi=pmix)", n, var);
	else
		snprintf(err, errlen, "started as one of %ld processes (%s), "
		    "but this gpupool-run was built without MPI: each would run "
		    "every task (rebuild with -Dmpi=enabled, or start one)", n,
		    var);
	return -ENOTSUP;
}

const char *
ranks_build(void)
{
	static char	 v[PATH_MAX + 32];
	const char	*prog = mpi_program();

	if (prog == NULL)
		return "without MPI";
	snprintf(v, sizeof(v), "MPI runs use %s", prog);
	return v;
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
