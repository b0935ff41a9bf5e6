/*
 * launcher.c: whether an MPI launcher (mpirun, srun --mpi=pmix) started
 * this process, and how many processes it says it started, read from the
 * variables each launcher sets. Reads only the environment: both
 * gpupool-run (to hand over to gpupool-run-mpi, mpi_stub.c) and the MPI
 * side (mpi.c) ask, before anything else of the run exists.
 */
#include <stdlib.h>

#include "ranks/ranks.h"

int
launcher_mpi(void)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE",
	    "PMIX_RANK", "PMI_RANK", "PMI_SIZE", NULL };
	int	 i;

	for (i = 0; vars[i] != NULL; i++)
		if (getenv(vars[i]) != NULL)
			return 1;
	return 0;
}

long
launcher_procs(const char **var)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE",
	    "PMI_SIZE", "SLURM_STEP_NUM_TASKS", NULL };
	const char	*v;
	long		 n, most = 1;
	int		 i;

	*var = "";
	for (i = 0; vars[i] != NULL; i++) {
		if ((v = getenv(vars[i])) != NULL && (n = atol(v)) > most) {
			most = n;
			*var = vars[i];
		}
	}
	return most;
}
