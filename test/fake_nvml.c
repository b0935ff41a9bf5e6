/*
 * fake_nvml.c: a stand-in libnvidia-ml.so.1 whose GPUs, memory use and
 * compute processes a test sets, and changes while a pool runs. It
 * exports what src/mon.c dlsyms (declared in src/nvml.h) and nothing
 * else. The state file named by $GP_FAKE_NVML is read once per snapshot,
 * so a test replaces it (write a temporary, rename() it over) and the
 * next snapshot sees the new machine, whole: every figure of a snapshot,
 * the process list and the SM samples included, comes from one reading
 * of the file. No file, or none named: no GPU.
 *
 * Where a snapshot starts: nvml.c looks every pool GPU up once per
 * snapshot (by UUID, bus id or index) before reading it, so a lookup
 * that repeats one made since the last reading (the same key) is the
 * first of the next snapshot, and reads the file again; nvmlInit_v2()
 * reads it for the first. The other calls never read it.
 *
 * The state file: one directive a line, words separated by blanks,
 * "#" to the end of a line a comment, unknown lines ignored.
 *
 *   gpu UUID BUSID TOTAL USED UTIL
 *	the next GPU, NVML index 0, 1, ... in file order. UUID as NVML
 *	gives it ("GPU-..."), BUSID in any case with a 4- or 8-digit
 *	domain ("00000000:B7:00.0"); "-" for none. TOTAL and USED are
 *	bytes, with an optional K, M, G or T (powers of 1024); UTIL the
 *	GPU's utilisation in %.
 *   proc GPU PID MEM [SM]
 *	a compute process PID on GPU (its index) using MEM bytes (same
 *	suffixes, or "-": NVML_VALUE_NOT_AVAILABLE), with SM % of its SMs
 *	in nvmlDeviceGetProcessUtilization (no SM: no sample for it).
 *   noprocs GPU
 *	listing GPU's processes fails, NVML_ERROR_NOT_SUPPORTED (as in
 *	some containers): its ownership cannot be told.
 *   initfail
 *	nvmlInit_v2 fails, NVML_ERROR_DRIVER_NOT_LOADED.
 *   mark WORD
 *	this state's name: each reading of the file appends WORD (or "-"
 *	without a mark) and a newline to $GP_FAKE_NVML_SEEN when set, so
 *	a test knows which state each snapshot saw. A snapshot starts only
 *	once the master has the one before, so the second line of a mark
 *	means the master has folded a snapshot of that state.
 *   crash
 *	the process reading it (the monitor) exits at once, status 3: a
 *	monitor that dies mid-run.
 *   hold PATH
 *	once the file is read, the snapshot waits until PATH exists (at
 *	most 8 s, under the master's 10 s patience), so a test can put its
 *	answer after something else happens.
 *
 * $GP_FAKE_NVML_LOG, when set, names a file to which each process that
 * loads this library appends its pid, so a test proves who loaded NVML
 * (as fake_libcuda.c does for CUDA).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "fake_log.h"
#include "nvml.h"

#define FAKE_GPUS	64
#define FAKE_PROCS	256
#define FAKE_KEYS	256	/* lookups remembered per reading */
#define FAKE_HOLD_MS	8000

struct fake_gpu {
	char			 uuid[96];
	char			 bus[32];
	unsigned long long	 total, used;
	unsigned		 util;
	int			 noprocs;
};

struct fake_proc {
	int			 gpu;
	unsigned		 pid;
	unsigned long long	 mem;
	int			 sm;	/* -1: no sample */
};

static struct {
	int			 initfail;
	int			 ngpu, nproc;
	char			 mark[64];
	char			 hold[256];
	struct fake_gpu		 g[FAKE_GPUS];
	struct fake_proc	 p[FAKE_PROCS];
} st;

/* The lookups made since the state was last read ("i3", "uGPU-...",
 * "b0000:..."): one made again starts a new snapshot. */
static char	 keys[FAKE_KEYS][104];
static int	 nkeys;

/* What mon.c dlsyms, checked against nvml.h's types. */
nvml_init_fn			nvmlInit_v2;
nvml_shutdown_fn		nvmlShutdown;
nvml_error_string_fn		nvmlErrorString;
nvml_handle_by_index_fn		nvmlDeviceGetHandleByIndex_v2;
nvml_handle_by_string_fn	nvmlDeviceGetHandleByUUID;
nvml_handle_by_string_fn	nvmlDeviceGetHandleByPciBusId_v2;
nvml_memory_fn			nvmlDeviceGetMemoryInfo;
nvml_utilization_fn		nvmlDeviceGetUtilizationRates;
nvml_procs_fn			nvmlDeviceGetComputeRunningProcesses_v3;
nvml_procs_fn			nvmlDeviceGetComputeRunningProcesses_v2;
nvml_procs_fn			nvmlDeviceGetComputeRunningProcesses;
nvml_proc_util_fn		nvmlDeviceGetProcessUtilization;

static int	 inited;
/* Handles are addresses in here: index i is &handles[i]. */
static char	 handles[FAKE_GPUS];

__attribute__((constructor)) static void
loaded(void)
{
	fake_log_load("GP_FAKE_NVML_LOG");
}

/* "16G", "512M", "123": bytes; "-": not available. */
static unsigned long long
bytes(const char *s)
{
	unsigned long long	 v;
	char			*e;

	if (strcmp(s, "-") == 0)
		return NVML_VALUE_NOT_AVAILABLE;
	v = strtoull(s, &e, 10);
	switch (*e) {
	case 'T': v <<= 10;	/* FALLTHROUGH */
	case 'G': v <<= 10;	/* FALLTHROUGH */
	case 'M': v <<= 10;	/* FALLTHROUGH */
	case 'K': v <<= 10;
	}
	return v;
}

static void
directive(char *w[], int n)
{
	struct fake_gpu		*g;
	struct fake_proc	*p;

	if (n == 1 && strcmp(w[0], "initfail") == 0)
		st.initfail = 1;
	else if (n == 1 && strcmp(w[0], "crash") == 0)
		_exit(3);
	else if (n == 2 && strcmp(w[0], "noprocs") == 0 &&
	    atoi(w[1]) >= 0 && atoi(w[1]) < FAKE_GPUS)
		st.g[atoi(w[1])].noprocs = 1;
	else if (n == 6 && strcmp(w[0], "gpu") == 0 && st.ngpu < FAKE_GPUS) {
		g = &st.g[st.ngpu++];
		snprintf(g->uuid, sizeof(g->uuid), "%s",
		    strcmp(w[1], "-") ? w[1] : "");
		snprintf(g->bus, sizeof(g->bus), "%s",
		    strcmp(w[2], "-") ? w[2] : "");
		g->total = bytes(w[3]);
		g->used = bytes(w[4]);
		g->util = (unsigned)atoi(w[5]);
	} else if (n == 2 && strcmp(w[0], "mark") == 0)
		snprintf(st.mark, sizeof(st.mark), "%s", w[1]);
	else if (n == 2 && strcmp(w[0], "hold") == 0)
		snprintf(st.hold, sizeof(st.hold), "%s", w[1]);
	else if ((n == 4 || n == 5) && strcmp(w[0], "proc") == 0 &&
	    st.nproc < FAKE_PROCS) {
		p = &st.p[st.nproc++];
		p->gpu = atoi(w[1]);
		p->pid = (unsigned)strtoul(w[2], NULL, 10);
		p->mem = bytes(w[3]);
		p->sm = n == 5 ? atoi(w[4]) : -1;
	}
}

/* The state read: its mark to $GP_FAKE_NVML_SEEN (one write, so lines
 * of concurrent monitors never mix), then the hold. */
static void
seen(void)
{
	const char	*log = getenv("GP_FAKE_NVML_SEEN");
	char		 line[80];
	int		 fd, n, ms;

	if (log != NULL && *log != '\0' && (fd = open(log, O_WRONLY |
	    O_APPEND | O_CREAT | O_CLOEXEC, 0600)) >= 0) {
		n = snprintf(line, sizeof(line), "%s\n", st.mark[0] ? st.mark :
		    "-");
		if (write(fd, line, (size_t)n) != n)
			_exit(99);
		close(fd);
	}
	for (ms = 0; st.hold[0] && access(st.hold, F_OK) != 0 &&
	    ms < FAKE_HOLD_MS; ms += 5)
		nanosleep(&(struct timespec){ 0, 5000000 }, NULL);
}

/* The machine as the state file says now. */
static void
load(void)
{
	const char	*path = getenv("GP_FAKE_NVML");
	char		 line[512], *w[8], *c;
	FILE		*f;
	int		 n;

	memset(&st, 0, sizeof(st));
	nkeys = 0;
	if (path == NULL || (f = fopen(path, "re")) == NULL) {
		seen();
		return;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		if ((c = strchr(line, '#')) != NULL)
			*c = '\0';
		n = 0;
		for (c = strtok(line, " \t\r\n"); c != NULL && n < 8;
		    c = strtok(NULL, " \t\r\n"))
			w[n++] = c;
		if (n > 0)
			directive(w, n);
	}
	fclose(f);
	seen();
}

/* A lookup by key (kind and value): the first of a new snapshot when it
 * was made since the last reading, which then reads the file again. */
static void
lookup(char kind, const char *value)
{
	char	 k[sizeof(keys[0])];
	int	 i;

	snprintf(k, sizeof(k), "%c%s", kind, value);
	for (i = 0; i < nkeys && strcmp(keys[i], k) != 0; i++)
		;
	if (i < nkeys || nkeys == FAKE_KEYS)
		load();
	memcpy(keys[nkeys++], k, sizeof(k));
}

/* The GPU index of handle d in the current state, or -1. */
static int
gpu_of(nvmlDevice_t d)
{
	long	 i = (char *)d - handles;

	return inited && i >= 0 && i < st.ngpu ? (int)i : -1;
}

static nvmlReturn_t
handle(int i, nvmlDevice_t *d)
{
	if (!inited)
		return NVML_ERROR_UNINITIALIZED;
	if (i < 0)
		return NVML_ERROR_NOT_FOUND;
	*d = (nvmlDevice_t)(void *)&handles[i];
	return NVML_SUCCESS;
}

nvmlReturn_t
nvmlInit_v2(void)
{
	load();
	if (st.initfail)
		return NVML_ERROR_DRIVER_NOT_LOADED;
	inited = 1;
	return NVML_SUCCESS;
}

nvmlReturn_t
nvmlShutdown(void)
{
	inited = 0;
	return NVML_SUCCESS;
}

const char *
nvmlErrorString(nvmlReturn_t rc)
{
	switch (rc) {
	case NVML_SUCCESS:			return "Success";
	case NVML_ERROR_UNINITIALIZED:		return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT:	return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED:		return "Not Supported";
	case NVML_ERROR_NOT_FOUND:		return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE:	return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED:	return "Driver Not Loaded";
	}
	return "Unknown Error";
}

nvmlReturn_t
nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
	char	 v[16];

	snprintf(v, sizeof(v), "%u", i);
	lookup('i', v);
	return handle(i < (unsigned)st.ngpu ? (int)i : -1, d);
}

nvmlReturn_t
nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d)
{
	int	 i;

	lookup('u', uuid);
	for (i = 0; i < st.ngpu; i++)
		if (st.g[i].uuid[0] && strcmp(st.g[i].uuid, uuid) == 0)
			break;
	return handle(i < st.ngpu ? i : -1, d);
}

/* Bus ids compared by value, as NVML parses them. */
nvmlReturn_t
nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *d)
{
	unsigned	 a[4], b[4];
	int		 i;

	lookup('b', bus);
	if (sscanf(bus, "%x:%x:%x.%x", &a[0], &a[1], &a[2], &a[3]) != 4)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (i = 0; i < st.ngpu; i++)
		if (sscanf(st.g[i].bus, "%x:%x:%x.%x", &b[0], &b[1], &b[2],
		    &b[3]) == 4 && memcmp(a, b, sizeof(a)) == 0)
			break;
	return handle(i < st.ngpu ? i : -1, d);
}

nvmlReturn_t
nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
	int	 i = gpu_of(d);

	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	m->total = st.g[i].total;
	m->used = st.g[i].used;
	m->free = st.g[i].total - st.g[i].used;
	return NVML_SUCCESS;
}

nvmlReturn_t
nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
	int	 i = gpu_of(d);

	if (i >= 0) {
		u->gpu = st.g[i].util;
		u->memory = 0;
	}
	return i >= 0 ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

/* Any version: entries of size sz, pid and usedGpuMemory first. */
static nvmlReturn_t
procs(nvmlDevice_t d, unsigned int *count, void *infos, size_t sz)
{
	nvmlProcessInfo_v2_t	 e;
	unsigned		 n = 0, room = *count;
	int			 i = gpu_of(d), k;

	if (i < 0 || count == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (st.g[i].noprocs)
		return NVML_ERROR_NOT_SUPPORTED;
	for (k = 0; k < st.nproc; k++) {
		if (st.p[k].gpu != i)
			continue;
		if (n < room && infos != NULL) {
			memset(&e, 0, sizeof(e));
			e.pid = st.p[k].pid;
			e.usedGpuMemory = st.p[k].mem;
			e.gpuInstanceId = e.computeInstanceId = ~0U;
			memcpy((char *)infos + n * sz, &e, sz);
		}
		n++;
	}
	*count = n;
	return n > room ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

nvmlReturn_t
nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
    void *infos)
{
	return procs(d, count, infos, sizeof(nvmlProcessInfo_v2_t));
}

nvmlReturn_t
nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *count,
    void *infos)
{
	return procs(d, count, infos, sizeof(nvmlProcessInfo_v2_t));
}

nvmlReturn_t
nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *count,
    void *infos)
{
	return procs(d, count, infos, sizeof(nvmlProcessInfo_v1_t));
}

/* A sample, stamped now, for each process with an SM %. */
nvmlReturn_t
nvmlDeviceGetProcessUtilization(nvmlDevice_t d,
    nvmlProcessUtilizationSample_t *u, unsigned int *count,
    unsigned long long lastSeen)
{
	struct timeval	 tv;
	unsigned	 n = 0;
	int		 i = gpu_of(d), k;

	(void)lastSeen;		/* every sample is newer */
	if (i < 0 || count == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (st.g[i].noprocs)
		return NVML_ERROR_NOT_SUPPORTED;
	gettimeofday(&tv, NULL);
	for (k = 0; k < st.nproc; k++) {
		if (st.p[k].gpu != i || st.p[k].sm < 0)
			continue;
		if (u != NULL && n < *count) {
			memset(&u[n], 0, sizeof(u[n]));
			u[n].pid = st.p[k].pid;
			u[n].smUtil = (unsigned)st.p[k].sm;
			u[n].timeStamp = (unsigned long long)tv.tv_sec * 1000000 +
			    (unsigned long long)tv.tv_usec;
		}
		n++;
	}
	if (n == 0)
		return NVML_ERROR_NOT_FOUND;
	if (u == NULL || n > *count) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	*count = n;
	return NVML_SUCCESS;
}
