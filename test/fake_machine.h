/*
 * fake_machine.h: the machine check_probe.c and check_probed.c give the
 * probe (fake_libcuda.c's gp_probe(), through GPUPOOL_PROBE): the three
 * NVIDIA GPUs of an hwloc fixture, in PCI order, each with a UUID (two
 * sharing a prefix, for prefix matching), written to a file named by
 * GP_FAKE_CUDA. Static: each test program includes it once.
 */
#ifndef GP_FAKE_MACHINE_H
#define GP_FAKE_MACHINE_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#define FAKE_XML	GP_FIXTURES "/32em64t-2n8c2t-pci-wholeio.xml"
#define FAKE_NGPU	3

static const char *const fake_uuid[FAKE_NGPU] = {
	"GPU-0a0b0c0d-1111-2222-3333-444455556666",
	"GPU-8932f937-aaaa-bbbb-cccc-ddddeeeeffff",
	"GPU-8932f9ff-0000-1111-2222-333344445555",
};
static const char *const fake_busid[FAKE_NGPU] = {
	"0000:03:00.0", "0000:83:00.0", "0000:84:00.0",
};

/* Write the machine to path (GPU i has 16 GiB x (i + 1)) and point the
 * pool's probe at it. */
static void
fake_machine(const char *path)
{
	FILE	*f = fopen(path, "we");
	int	 i;

	ck_assert_ptr_nonnull(f);
	for (i = 0; i < FAKE_NGPU; i++)
		fprintf(f, "%s %s %d Fake GPU %d\n", fake_uuid[i],
		    fake_busid[i], 16384 * (i + 1), i);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_ptr_nonnull(getenv("GP_FAKE_CUDA_LIB"));
	setenv("GPUPOOL_PROBE", getenv("GP_FAKE_CUDA_LIB"), 1);
	setenv("GP_FAKE_CUDA", path, 1);
}

#endif /* GP_FAKE_MACHINE_H */
