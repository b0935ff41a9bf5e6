/*
 * cuda.c: the only file that calls the CUDA runtime (built with -Dcuda).
 * Its functions run in a probe child or in a worker after fork, never in
 * the master: CUDA state does not survive fork (design.md, invariant 1).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpu.h"

int
gp_cuda_probe(struct gp_gpu *devs, int max, char *err, size_t errlen)
{
	struct cudaDeviceProp	 prop;
	cudaError_t		 e;
	const unsigned char	*u;
	int			 n = 0, i, drv = 0;

	if (cudaDriverGetVersion(&drv) != cudaSuccess || drv == 0) {
		snprintf(err, errlen, "no CUDA driver on this machine");
		return -1;
	}
	if ((e = cudaGetDeviceCount(&n)) != cudaSuccess) {
		snprintf(err, errlen, "cudaGetDeviceCount: %s (error %d)",
		    cudaGetErrorString(e), (int)e);
		return -1;
	}
	if (n > max)
		n = max;
	for (i = 0; i < n; i++) {
		memset(&devs[i], 0, sizeof(devs[i]));
		if ((e = cudaGetDeviceProperties(&prop, i)) != cudaSuccess ||
		    (e = cudaDeviceGetPCIBusId(devs[i].busid,
		    (int)sizeof(devs[i].busid), i)) != cudaSuccess) {
			snprintf(err, errlen, "device %d: %s (error %d)", i,
			    cudaGetErrorString(e), (int)e);
			return -1;
		}
		u = (const unsigned char *)prop.uuid.bytes;
		snprintf(devs[i].uuid, sizeof(devs[i].uuid),
		    "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		    "%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3], u[4],
		    u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
		    u[14], u[15]);
		snprintf(devs[i].name, sizeof(devs[i].name), "%s", prop.name);
		devs[i].mem_bytes = prop.totalGlobalMem;
		/* cudart gives "0000:B7:00.0"; hwloc and nvidia-smi agree on
		 * lower case. */
		for (char *c = devs[i].busid; *c; c++)
			if (*c >= 'A' && *c <= 'F')
				*c = (char)(*c - 'A' + 'a');
	}
	return n;
}

int
gp_cuda_init(void)
{
	cudaError_t	 e;

	if ((e = cudaSetDevice(0)) != cudaSuccess ||
	    (e = cudaFree(NULL)) != cudaSuccess)
		return (int)e;
	return 0;
}
