/*
 * cuda_map.h: the interface between cuda_map.c (the pool program, plain C)
 * and cuda_map.cu (its GPU side, compiled by nvcc).
 *
 * Everything declared under "GPU side" calls CUDA. Call it only in a pool
 * worker (from the pool's init, fn or fini), never in the master: CUDA
 * state does not survive fork(), so a master that touched CUDA would leave
 * every worker forked after that with a broken CUDA.
 */
#ifndef CUDA_MAP_H
#define CUDA_MAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the example computes for one item: the sum of its bytes and the
 * sum of their squares. Integer sums, so GPU and CPU agree exactly. */
struct cm_sums {
	uint64_t	 sum;
	uint64_t	 sumsq;
};

/* GPU side (cuda_map.cu). Worker only. */

/*
 * Open the worker's GPU: device 0, the only one it can see (the pool set
 * CUDA_VISIBLE_DEVICES to that GPU's UUID). Creates the CUDA context and
 * the device buffers the worker keeps across items; name gets the device
 * name and PCI bus id. Returns 1 when the GPU is ready, 0 when CUDA sees
 * no device (no driver, no GPU, a fake GPU: err says why; use the CPU),
 * -1 when a device exists but cannot be used (err says why).
 */
int	cm_gpu_open(char *name, size_t namelen, char *err, size_t errlen);

/* Sums of len bytes at buf on the GPU. Returns 0, or -1 with err set. */
int	cm_gpu_sums(const void *buf, size_t len, struct cm_sums *out,
	    char *err, size_t errlen);

/* Free what cm_gpu_open() made. */
void	cm_gpu_close(void);

#ifdef __cplusplus
}
#endif

#endif /* CUDA_MAP_H */
