/*
 * fake_openblas.c: a stand-in libopenblas.so.0 for check_exec's thread
 * cases. Like the real one it fixes its thread count when loaded
 * (OPENBLAS_NUM_THREADS, else 8: more than this machine's CPUs), and
 * openblas_set_num_threads() changes it: a forked worker of a caller
 * that loaded it must be told, one that loads it later reads the
 * variable. fake_blas_fn is a gp_fn the exec'd worker has not loaded:
 * it must find it by path. It returns 100 + the count (the item ends
 * GP_FAILED with that code: the library's symbols are not visible here).
 */
#include <stddef.h>
#include <stdlib.h>

static int	 nthreads = 8;

__attribute__((constructor)) static void
load(void)
{
	const char	*s = getenv("OPENBLAS_NUM_THREADS");

	if (s != NULL && atoi(s) > 0)
		nthreads = atoi(s);
}

void	openblas_set_num_threads(int n);
int	openblas_get_num_threads(void);
int	fake_blas_fn(void *ctx, const void *in, size_t len, void *arg);

void
openblas_set_num_threads(int n)
{
	nthreads = n;
}

int
openblas_get_num_threads(void)
{
	return nthreads;
}

int
fake_blas_fn(void *ctx, const void *in, size_t len, void *arg)
{
	(void)ctx;
	(void)in;
	(void)len;
	(void)arg;
	return 100 + nthreads;
}
