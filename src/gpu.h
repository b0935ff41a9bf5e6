/*
 * gpu.h: which GPUs the pool uses (gpu.c) and the CUDA calls that only a
 * probe child or a worker may make (cuda.c, or cuda_stub.c without CUDA).
 * Never installed. Nothing declared here initialises CUDA in the caller
 * except gp_cuda_probe() and gp_cuda_init(), which run only after fork.
 */
#ifndef GP_GPU_H
#define GP_GPU_H

#include <stddef.h>
#include <stdint.h>

struct gp_pool_opts;

struct gp_gpu {
	char		 visible[96];	/* CUDA_VISIBLE_DEVICES for its workers */
	char		 uuid[48];	/* "GPU-..." or "" */
	char		 busid[32];	/* "0000:b7:00.0" or "" */
	char		 name[96];
	uint64_t	 mem_bytes;
	int		 fake;
};

/*
 * Decide the pool's GPUs from opts (fake GPUs, explicit ids) and, unless
 * fake, a probe child. *out is malloc'd. Returns the count (> 0), or
 * GP_ENOGPU, -EINVAL or -errno with a reason in err.
 */
int	gp_gpu_resolve(const struct gp_pool_opts *o, struct gp_gpu **out,
	    char *err, size_t errlen);

/* Probe child only: enumerate the visible devices in PCI order. Returns
 * the count (>= 0) or -1 with a reason in err. A library named by
 * $GPUPOOL_PROBE exports gp_probe() of the same type instead (tests). */
typedef int gp_probe_fn(struct gp_gpu *devs, int max, char *err,
	    size_t errlen);
gp_probe_fn	gp_cuda_probe;
/* Worker only: create the CUDA context on the one visible device.
 * Returns 0 or a positive cudaError_t; -ENOSYS without CUDA support. */
int	gp_cuda_init(void);

#endif /* GP_GPU_H */
