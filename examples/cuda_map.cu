/*
 * cuda_map.cu: the GPU side of the cuda_map example (see cuda_map.c).
 *
 * EVERY FUNCTION IN THIS FILE CALLS CUDA AND RUNS ONLY IN A POOL WORKER,
 * NEVER IN THE MASTER. CUDA state does not survive fork(): if the master
 * called even cudaGetDeviceCount(), the workers it forks afterwards could
 * not use CUDA. gpupool enumerates GPUs in a short-lived probe child for
 * the same reason, and sets each worker's CUDA_VISIBLE_DEVICES to its GPU's
 * UUID before the worker's init runs, so here the worker's GPU is always
 * device 0 and the only device.
 *
 * Built by nvcc into an object that gcc links with the rest (examples/
 * meson.build), against the static CUDA runtime; the program does not
 * link libcuda: cudart loads the driver at run time, when there is one.
 */
#include <stdio.h>

#include <cuda_runtime.h>

#include "cuda_map.h"

#define BLOCK		256	/* threads per block, a power of 2 */
#define MAX_BLOCKS	1024

/* Per-worker state: each worker is its own process, so it is this
 * worker's own, made once by cm_gpu_open() and kept across items. */
static unsigned char		*d_buf;	/* item bytes on the device */
static size_t			 d_cap;
static unsigned long long	*d_sums;	/* [0] sum, [1] sum of squares */

/* Grid-stride sum and sum of squares of n bytes, reduced per block in
 * shared memory, then added to out[0..1]. */
__global__ void
sums_kernel(const unsigned char *p, size_t n, unsigned long long *out)
{
	__shared__ unsigned long long	 s[2][BLOCK];
	unsigned long long		 a = 0, b = 0;
	unsigned			 t = threadIdx.x, v, k;
	size_t				 i;

	for (i = (size_t)blockIdx.x * blockDim.x + t; i < n;
	    i += (size_t)gridDim.x * blockDim.x) {
		v = p[i];
		a += v;
		b += v * v;
	}
	s[0][t] = a;
	s[1][t] = b;
	__syncthreads();
	for (k = blockDim.x / 2; k > 0; k /= 2) {
		if (t < k) {
			s[0][t] += s[0][t + k];
			s[1][t] += s[1][t + k];
		}
		__syncthreads();
	}
	if (t == 0) {
		atomicAdd(&out[0], s[0][0]);
		atomicAdd(&out[1], s[1][0]);
	}
}

static int
fail(char *err, size_t errlen, const char *what, cudaError_t e)
{
	snprintf(err, errlen, "%s: %s (CUDA error %d)", what,
	    cudaGetErrorString(e), (int)e);
	return -1;
}

extern "C" int
cm_gpu_open(char *name, size_t namelen, char *err, size_t errlen)
{
	struct cudaDeviceProp	 prop;
	cudaError_t		 e;
	char			 bus[32];
	int			 n = 0;

	/* No driver (error 35), no GPU, or a fake GPU's CUDA_VISIBLE_DEVICES
	 * (no device, error 100): not an error, the caller uses the CPU. */
	if ((e = cudaGetDeviceCount(&n)) != cudaSuccess || n == 0) {
		if (e == cudaSuccess)
			snprintf(err, errlen, "CUDA sees no device");
		else
			snprintf(err, errlen, "%s (CUDA error %d)",
			    cudaGetErrorString(e), (int)e);
		return 0;
	}
	/* Device 0 is this worker's GPU. cudaFree(0) creates the context
	 * now, once, rather than on the first item. */
	if ((e = cudaSetDevice(0)) != cudaSuccess)
		return fail(err, errlen, "cudaSetDevice", e);
	if ((e = cudaFree(0)) != cudaSuccess)
		return fail(err, errlen, "creating the CUDA context", e);
	if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess)
		return fail(err, errlen, "cudaGetDeviceProperties", e);
	if ((e = cudaDeviceGetPCIBusId(bus, (int)sizeof(bus), 0)) !=
	    cudaSuccess)
		return fail(err, errlen, "cudaDeviceGetPCIBusId", e);
	if ((e = cudaMalloc((void **)&d_sums, 2 * sizeof(*d_sums))) !=
	    cudaSuccess)
		return fail(err, errlen, "cudaMalloc", e);
	snprintf(name, namelen, "%s %s", prop.name, bus);
	return 1;
}

extern "C" int
cm_gpu_sums(const void *buf, size_t len, struct cm_sums *out, char *err,
    size_t errlen)
{
	unsigned long long	 h[2];
	cudaError_t		 e;
	size_t			 blocks;

	out->sum = out->sumsq = 0;
	if (len == 0)
		return 0;
	if (len > d_cap) {
		/* Grow the device buffer; it is kept for later items. */
		if (d_buf != NULL)
			(void)cudaFree(d_buf);
		d_buf = NULL;
		d_cap = 0;
		if ((e = cudaMalloc((void **)&d_buf, len)) != cudaSuccess)
			return fail(err, errlen, "cudaMalloc", e);
		d_cap = len;
	}
	if ((e = cudaMemcpy(d_buf, buf, len, cudaMemcpyHostToDevice)) !=
	    cudaSuccess)
		return fail(err, errlen, "cudaMemcpy to the device", e);
	if ((e = cudaMemset(d_sums, 0, 2 * sizeof(*d_sums))) != cudaSuccess)
		return fail(err, errlen, "cudaMemset", e);
	blocks = (len + BLOCK - 1) / BLOCK;
	if (blocks > MAX_BLOCKS)
		blocks = MAX_BLOCKS;
	sums_kernel<<<(unsigned)blocks, BLOCK>>>(d_buf, len, d_sums);
	if ((e = cudaGetLastError()) != cudaSuccess)
		return fail(err, errlen, "launching the kernel", e);
	/* Waits for the kernel; reports its errors too. */
	if ((e = cudaMemcpy(h, d_sums, sizeof(h), cudaMemcpyDeviceToHost)) !=
	    cudaSuccess)
		return fail(err, errlen, "running the kernel", e);
	out->sum = h[0];
	out->sumsq = h[1];
	return 0;
}

extern "C" void
cm_gpu_close(void)
{
	if (d_buf != NULL)
		(void)cudaFree(d_buf);
	if (d_sums != NULL)
		(void)cudaFree(d_sums);
	d_buf = NULL;
	d_sums = NULL;
	d_cap = 0;
}
