/*
 * fake_libcuda.c: a stand-in libcuda.so.1 that records which process
 * loaded it, and a fake machine's GPUs for the probe.
 *
 * cudart dlopens libcuda.so.1 on its first call, so the log names every
 * process that touched CUDA (check_cudafork.c). It exports no driver
 * entry point: cudart then reports an error, as with no driver.
 *
 * gp_probe() is what the pool's probe child calls instead of the CUDA
 * runtime when $GPUPOOL_PROBE names this library (gpu.c): the devices of
 * the file $GP_FAKE_CUDA, one a line, "UUID BUSID MIB NAME", in PCI
 * order, seen as CUDA shows them: in PCI order only with
 * CUDA_DEVICE_ORDER=PCI_BUS_ID (else "fastest first", here the file
 * backwards), and through CUDA_VISIBLE_DEVICES (indices or UUIDs, unique
 * prefixes allowed, listed order; the list ends at an entry that names
 * no device; set but empty: none).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_log.h"
#include "gpu.h"

#define FAKE_MAX	64

__attribute__((constructor)) static void
loaded(void)
{
	fake_log_load("GP_FAKE_CUDA_LOG");
}

/* The file's devices, in the order CUDA_DEVICE_ORDER gives. */
static int
machine(struct gp_gpu *d, char *err, size_t errlen)
{
	const char	*path = getenv("GP_FAKE_CUDA");
	const char	*order = getenv("CUDA_DEVICE_ORDER");
	unsigned long long mib;
	struct gp_gpu	 t;
	FILE		*f;
	char		 line[512];
	int		 n = 0, i;

	if (path == NULL || (f = fopen(path, "re")) == NULL) {
		snprintf(err, errlen, "fake CUDA: no machine file");
		return -1;
	}
	while (n < FAKE_MAX && fgets(line, sizeof(line), f) != NULL) {
		memset(&d[n], 0, sizeof(d[n]));
		if (sscanf(line, "%47s %31s %llu %95[^\n]", d[n].uuid,
		    d[n].busid, &mib, d[n].name) != 4)
			continue;
		d[n++].mem_bytes = mib << 20;
	}
	fclose(f);
	if (order == NULL || strcmp(order, "PCI_BUS_ID") != 0)
		for (i = 0; i < n / 2; i++) {
			t = d[i];
			d[i] = d[n - 1 - i];
			d[n - 1 - i] = t;
		}
	return n;
}

/* The device entry e names among all[0..n-1], or -1. */
static int
named(const char *e, const struct gp_gpu *all, int n)
{
	char	*end;
	long	 ix = strtol(e, &end, 10);
	int	 i, hit = -1;

	if (*e != '\0' && *end == '\0')
		return ix >= 0 && ix < n ? (int)ix : -1;
	for (i = 0; i < n; i++)
		if (strlen(e) > 4 && strncmp(all[i].uuid, e, strlen(e)) == 0) {
			if (hit >= 0)
				return -1;	/* ambiguous */
			hit = i;
		}
	return hit;
}

gp_probe_fn	gp_probe;

int
gp_probe(struct gp_gpu *devs, int max, char *err, size_t errlen)
{
	static struct gp_gpu	 all[FAKE_MAX];
	const char		*vis = getenv("CUDA_VISIBLE_DEVICES");
	char			 list[512], *e, *save;
	int			 n = machine(all, err, errlen), k = 0, i;

	if (n < 0 || vis == NULL) {
		for (i = 0; i < n && i < max; i++)
			devs[i] = all[i];
		return n < max ? n : max;
	}
	snprintf(list, sizeof(list), "%s", vis);
	for (e = strtok_r(list, ",", &save); e != NULL && k < max;
	    e = strtok_r(NULL, ",", &save)) {
		if ((i = named(e, all, n)) < 0)
			break;
		devs[k++] = all[i];
	}
	return k;
}
