/*
 * nvml.h: nvml.c's two calls, made by the monitor child (mon.c), and the
 * few declarations of NVIDIA's NVML C ABI that nvml.c calls through
 * dlsym() and that the tests' fake NVML (test/fake_nvml.c) exports. No nvml.h ships with the CUDA toolkit on
 * most machines, and the ABI is stable, so the types are written out
 * here from NVIDIA's NVML API reference (nvmlReturn_t, nvmlMemory_t,
 * nvmlUtilization_t, nvmlProcessInfo_v1_t and _v2_t,
 * nvmlProcessUtilizationSample_t). Only function pointer types: nothing
 * here links against NVML. Never installed.
 */
#ifndef GP_NVML_H
#define GP_NVML_H

#include <sys/types.h>

struct gp_gpu;
struct gp_mon_snap;

/* nvml.c, in the monitor child only. */
/* One snapshot of the n pool GPUs at g into s (room for n GPUs), each
 * compute process marked with the worker i (pids[i], 0: none) whose
 * process tree holds it. NVML is loaded on the first call; without it
 * s->ok is 0 and s->err says why, on every call. */
void	gp_nvml_snapshot(const struct gp_gpu *g, int n, const pid_t *pids,
	    int nw, struct gp_mon_snap *s);
/* nvmlShutdown(), if NVML was initialised. */
void	gp_nvml_close(void);

/* ---- NVML's ABI ---- */

/* nvmlReturn_t: the values the monitor tells apart. */
typedef int nvmlReturn_t;
#define NVML_SUCCESS			0
#define NVML_ERROR_UNINITIALIZED	1
#define NVML_ERROR_INVALID_ARGUMENT	2
#define NVML_ERROR_NOT_SUPPORTED	3
#define NVML_ERROR_NOT_FOUND		6
#define NVML_ERROR_INSUFFICIENT_SIZE	7
#define NVML_ERROR_DRIVER_NOT_LOADED	9
#define NVML_ERROR_UNKNOWN		999

/* usedGpuMemory when the driver cannot say (WDDM, some containers). */
#define NVML_VALUE_NOT_AVAILABLE	(~0ULL)

/* An opaque device handle. */
typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct nvmlMemory_st {
	unsigned long long	 total;		/* bytes */
	unsigned long long	 free;
	unsigned long long	 used;
} nvmlMemory_t;

typedef struct nvmlUtilization_st {
	unsigned int		 gpu;		/* % of time a kernel ran */
	unsigned int		 memory;
} nvmlUtilization_t;

/* nvmlDeviceGetComputeRunningProcesses (v1). */
typedef struct nvmlProcessInfo_v1_st {
	unsigned int		 pid;
	unsigned long long	 usedGpuMemory;	/* NVML_VALUE_NOT_AVAILABLE */
} nvmlProcessInfo_v1_t;

/*
 * nvmlDeviceGetComputeRunningProcesses_v2, and _v3 in every driver but
 * 535.43 to 535.86, whose _v3 wrote a longer struct (an extra unsigned
 * long long, usedGpuCcProtectedMemory) under the same name: mon.c calls
 * _v2 first and gives _v3 room for that longer stride.
 */
typedef struct nvmlProcessInfo_v2_st {
	unsigned int		 pid;
	unsigned long long	 usedGpuMemory;
	unsigned int		 gpuInstanceId;	/* MIG; else ~0 */
	unsigned int		 computeInstanceId;
} nvmlProcessInfo_v2_t;

/* nvmlDeviceGetProcessUtilization: one sample of one process. */
typedef struct nvmlProcessUtilizationSample_st {
	unsigned int		 pid;
	unsigned long long	 timeStamp;	/* CPU time, microseconds */
	unsigned int		 smUtil;	/* % */
	unsigned int		 memUtil;
	unsigned int		 encUtil;
	unsigned int		 decUtil;
} nvmlProcessUtilizationSample_t;

/* The entry points, as function pointer types for dlsym(). */
typedef nvmlReturn_t	nvml_init_fn(void);		/* nvmlInit_v2 */
typedef nvmlReturn_t	nvml_shutdown_fn(void);		/* nvmlShutdown */
typedef const char     *nvml_error_string_fn(nvmlReturn_t);
typedef nvmlReturn_t	nvml_handle_by_string_fn(const char *,
			    nvmlDevice_t *);	/* ByUUID, ByPciBusId_v2 */
typedef nvmlReturn_t	nvml_handle_by_index_fn(unsigned int,
			    nvmlDevice_t *);	/* ByIndex_v2 */
typedef nvmlReturn_t	nvml_memory_fn(nvmlDevice_t, nvmlMemory_t *);
typedef nvmlReturn_t	nvml_utilization_fn(nvmlDevice_t,
			    nvmlUtilization_t *);
/* The three nvmlDeviceGetComputeRunningProcesses: infos is an array of
 * the version's struct; *count is its room in, the processes out
 * (NVML_ERROR_INSUFFICIENT_SIZE: more than the room). */
typedef nvmlReturn_t	nvml_procs_fn(nvmlDevice_t, unsigned int *count,
			    void *infos);
typedef nvmlReturn_t	nvml_proc_util_fn(nvmlDevice_t,
			    nvmlProcessUtilizationSample_t *,
			    unsigned int *count, unsigned long long lastSeen);

#endif /* GP_NVML_H */
