/*
 * fake_libcuda.c: a stand-in libcuda.so.1 that records which process
 * loaded it. cudart dlopens libcuda.so.1 on its first call, so the log
 * names every process that touched CUDA (check_cudafork.c). It exports no
 * driver entry point: cudart then reports an error, as with no driver.
 */
#include "fake_log.h"

__attribute__((constructor)) static void
loaded(void)
{
	fake_log_load("GP_FAKE_CUDA_LOG");
}
