/*
 * gpukern.h: the kernels of the real-GPU check (gpukern.cu, built by nvcc)
 * as gpucheck.c calls them, in a pool worker or a standalone process that
 * never forks a pool afterwards.
 */
#ifndef GPUKERN_H
#define GPUKERN_H

#ifdef __cplusplus
extern "C" {
#endif

/* Launch a kernel that writes through a null pointer, then wait for it.
 * Returns the CUDA error the wait gave (700, cudaErrorIllegalAddress, on
 * every GPU so far), 0 if the kernel did not fault. */
int	gk_illegal(void);

/* Fill n ints on the device with i * 3 by a kernel, copy them back and
 * check them. Returns 0, or the first CUDA error (a wrong value: -1). */
int	gk_fill(int n);

#ifdef __cplusplus
}
#endif

#endif /* GPUKERN_H */
