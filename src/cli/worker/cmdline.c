/*
 * cmdline.c: what a task's line becomes before it is started: its words
 * for execvp() when it needs no /bin/sh -c (repl.c's cmdline_needs_shell()
 * says), and the environment it runs with (the worker's, less our
 * variables and, in a rank of an MPI run, the launcher's, plus
 * GPUPOOL_*). Runs in a worker;
 * no system call, no output: spawn.c starts what this returns. The
 * buffers returned are kept for the next call, so a worker allocates
 * once, not per task.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/worker.h"

extern char **environ;

/* Built once per worker: the environment with our variables, and GNU
 * parallel's PARALLEL_SEQ and PARALLEL_JOBSLOT ({#} and {%}), which
 * scripts written for parallel read. */
static char	**envp;
static char	  ev_gpu[32], ev_slot[32], ev_rank[32], ev_task[48], ev_att[48],
		  ev_pseq[48], ev_pslot[48];
static char	 *ev_vis;	/* CUDA_VISIBLE_DEVICES=..., malloc'd */
static size_t	  vis_slot;	/* its index in envp */

/* The thread pools' variables (joblib's list): each task's own, unless
 * the worker's environment (the user's) has it. */
static const char *const thr_vars[] = { "OMP_NUM_THREADS",
	"OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
	"VECLIB_MAXIMUM_THREADS", "NUMBA_NUM_THREADS", "NUMEXPR_NUM_THREADS" };
#define NTHR	(sizeof(thr_vars) / sizeof(thr_vars[0]))
static char	  ev_thr[NTHR][40];
static int	  thr_on[NTHR];

/* Whether name=value starts with one of the prefixes. */
static int
env_has(const char *const *pfx, const char *var)
{
	for (; *pfx != NULL; pfx++)
		if (strncmp(var, *pfx, strlen(*pfx)) == 0)
			return 1;
	return 0;
}

/* The workers' environment, less our variables (set per task) and, in a
 * rank of an MPI run, the launcher's wire-up: a task that uses MPI
 * itself must start as a program of its own, not as a second copy of
 * this rank. */
char **
cmdline_env(const struct gp_worker_info *wi, int rank, int mpi_run,
    int threads)
{
	static const char *const ours[] = { "GPUPOOL_GPU=", "GPUPOOL_SLOT=",
	    "GPUPOOL_RANK=", "GPUPOOL_TASK=", "GPUPOOL_ATTEMPT=",
	    "CUDA_VISIBLE_DEVICES=", "PARALLEL_SEQ=", "PARALLEL_JOBSLOT=",
	    NULL };
	static const char *const mpi[] = { "OMPI_", "PMIX_", "PMI_",
	    "OPAL_", "HYDRA_", "MPIR_", NULL };
	size_t		 n, i, k = 0;

	for (n = 0; environ[n] != NULL; n++)
		;
	if ((envp = calloc(n + 9 + NTHR, sizeof(*envp))) == NULL ||
	    cmdline_env_gpus(wi->visible) < 0)
		return NULL;
	for (i = 0; i < n; i++)
		if (!env_has(ours, environ[i]) &&
		    !(mpi_run && env_has(mpi, environ[i])))
			envp[k++] = environ[i];
	snprintf(ev_gpu, sizeof(ev_gpu), "GPUPOOL_GPU=%d", wi->gpu);
	snprintf(ev_slot, sizeof(ev_slot), "GPUPOOL_SLOT=%d", wi->worker);
	snprintf(ev_rank, sizeof(ev_rank), "GPUPOOL_RANK=%d", rank);
	snprintf(ev_pslot, sizeof(ev_pslot), "PARALLEL_JOBSLOT=%d",
	    wi->worker + 1);
	envp[k++] = ev_pseq;
	envp[k++] = ev_pslot;
	envp[k++] = ev_gpu;
	envp[k++] = ev_slot;
	envp[k++] = ev_rank;
	envp[k++] = ev_task;
	envp[k++] = ev_att;
	vis_slot = k;
	envp[k++] = ev_vis;
	for (i = 0; i < NTHR && threads >= 0; i++)
		if ((thr_on[i] = getenv(thr_vars[i]) == NULL))
			envp[k++] = ev_thr[i];
	envp[k] = NULL;
	cmdline_env_threads(threads > 0 ? threads : 1);
	return envp;
}

void
cmdline_env_threads(int n)
{
	size_t	 i;

	for (i = 0; i < NTHR; i++)
		if (thr_on[i])
			snprintf(ev_thr[i], sizeof(ev_thr[i]), "%s=%d",
			    thr_vars[i], n);
}

int
cmdline_env_gpus(const char *visible)
{
	static const char	 name[] = "CUDA_VISIBLE_DEVICES=";
	char			*v;

	if (ev_vis != NULL && strcmp(ev_vis + sizeof(name) - 1, visible) == 0)
		return 0;
	if ((v = malloc(sizeof(name) + strlen(visible))) == NULL)
		return -ENOMEM;
	memcpy(v, name, sizeof(name) - 1);
	strcpy(v + sizeof(name) - 1, visible);
	free(ev_vis);
	ev_vis = v;
	if (envp != NULL && vis_slot > 0)
		envp[vis_slot] = ev_vis;
	return 0;
}

void
cmdline_env_task(uint64_t seq, uint32_t attempt)
{
	snprintf(ev_task, sizeof(ev_task), "GPUPOOL_TASK=%llu",
	    (unsigned long long)seq);
	snprintf(ev_att, sizeof(ev_att), "GPUPOOL_ATTEMPT=%u", attempt);
	snprintf(ev_pseq, sizeof(ev_pseq), "PARALLEL_SEQ=%llu",
	    (unsigned long long)seq);
}

/* The blank-separated words of cmd, in a buffer kept across tasks. */
char **
cmdline_split(const char *cmd)
{
	static char	*buf;
	static size_t	 cap;
	size_t		 n = strlen(cmd), words = 0, i, need;
	char		**av, *s, *p, *save = NULL;

	for (i = 0; i < n; i++)
		words += (cmd[i] != ' ' && cmd[i] != '\t') &&
		    (i == 0 || cmd[i - 1] == ' ' || cmd[i - 1] == '\t');
	need = (words + 1) * sizeof(*av) + n + 1;
	if (need > cap) {
		free(buf);
		cap = need < 4096 ? 4096 : need;
		if ((buf = malloc(cap)) == NULL) {
			cap = 0;
			return NULL;
		}
	}
	av = (char **)(void *)buf;
	s = buf + (words + 1) * sizeof(*av);
	memcpy(s, cmd, n + 1);
	for (i = 0, p = strtok_r(s, " \t", &save); p != NULL;
	    p = strtok_r(NULL, " \t", &save))
		av[i++] = p;
	av[i] = NULL;
	return av;
}
