/*
 * gpukern.cu: the kernels of the real-GPU check (see gpukern.h).
 *
 * Runs only in a pool worker (or a process that forks no pool after it):
 * CUDA state does not survive fork(). Device 0 is the caller's GPU, as
 * the pool sets CUDA_VISIBLE_DEVICES to its UUID.
 */
#include <new>

#include <cuda_runtime.h>

#include "gpukern.h"

#define BLOCK	128

/* One thread writes through a null pointer: the GPU's MMU faults and the
 * context gets the sticky cudaErrorIllegalAddress. */
__global__ void
null_write(int *p)
{
	if (threadIdx.x == 0)
		p[threadIdx.x] = 1;
}

__global__ void
fill_kernel(int *p, int n)
{
	int	 i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] = i * 3;
}

extern "C" int
gk_illegal(void)
{
	cudaError_t	 e;

	null_write<<<1, 1>>>(NULL);
	if ((e = cudaGetLastError()) != cudaSuccess)
		return (int)e;
	return (int)cudaDeviceSynchronize();
}

extern "C" int
gk_fill(int n)
{
	cudaError_t	 e;
	int		*d, *h, i, rc = 0;

	if ((h = new (std::nothrow) int[n]) == NULL)
		return -1;
	if ((e = cudaMalloc((void **)&d, (size_t)n * sizeof(*d))) !=
	    cudaSuccess) {
		delete[] h;
		return (int)e;
	}
	fill_kernel<<<(n + BLOCK - 1) / BLOCK, BLOCK>>>(d, n);
	if ((e = cudaGetLastError()) != cudaSuccess ||
	    (e = cudaMemcpy(h, d, (size_t)n * sizeof(*d),
	    cudaMemcpyDeviceToHost)) != cudaSuccess)
		rc = (int)e;
	for (i = 0; rc == 0 && i < n; i++)
		if (h[i] != i * 3)
			rc = -1;
	(void)cudaFree(d);
	delete[] h;
	return rc;
}
