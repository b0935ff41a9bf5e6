/*
 * cuda_stub.c: stands in for cuda.c in a build without the CUDA runtime
 * (-Dcuda=disabled, or no toolkit found). Fake GPUs and explicit ids still
 * work; the probe reports that no GPU can be seen.
 */
#include <errno.h>
#include <stdio.h>

#include "gpu.h"

int
gp_cuda_probe(struct gp_gpu *devs, int max, char *err, size_t errlen)
{
	(void)devs;
	(void)max;
	snprintf(err, errlen, "gpupool was built without CUDA support");
	return -1;
}

int
gp_cuda_init(void)
{
	return -ENOSYS;
}
