/*
 * check_probed.c: gpupool-run on a machine whose GPUs the probe finds
 * (the fake machine of test/fake_libcuda.c, through GPUPOOL_PROBE, on the
 * FAKE_XML topology those GPUs are in): --show-gpus lists them in PCI order
 * with their UUIDs, bus ids and NUMA nodes, and every task, its joblog
 * line included, gets CUDA_VISIBLE_DEVICES = its GPU's UUID, also when
 * gpupool-run inherited a CUDA_VISIBLE_DEVICES (a task told the bare
 * index would land on another GPU). The helpers are cli_test.h's.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#pragma GCC diagnostic ignored "-Wunused-function"
#include "cli_test.h"
#include "check_main.h"
#include "../fake_machine.h"

/* The fake machine in the test's directory, found by the probe. */
static void
machine(void)
{
	tmp_make();
	fake_machine(pathf("machine"));
}

/* n tasks on the probed GPUs: want[k] is the machine's device of pool
 * GPU k; each task (and its joblog line) must name that device's UUID,
 * and every GPU must run one. */
static void
run_tasks(const int *want, int ngpu, int n)
{
	struct res	 res;
	struct rec	 r[32];
	struct jrec	 j[32];
	struct beg	 b[32];
	char		*tasks = pathf("tasks"), *log = pathf("log"), line[512];
	char		 all[8192] = "";
	int		 i, nr, nb, seen[FAKE_NGPU] = { 0 };

	for (i = 0; i < n; i++) {
		snprintf(line, sizeof(line), "%s record %s 200\n", PROBE, log);
		strcat(all, line);
	}
	puts_file(tasks, all);
	unlink(log);
	RUN(&res, "--topology", FAKE_XML, "--joblog", pathf("joblog"), tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(nr = read_log(log, r, b, &nb), n);
	for (i = 0; i < nr; i++) {
		ck_assert(r[i].gpu >= 0 && r[i].gpu < ngpu);
		ck_assert_msg(strcmp(r[i].cvd, fake_uuid[want[r[i].gpu]]) == 0,
		    "task %ld on GPU %d (%s) saw CUDA_VISIBLE_DEVICES=%s",
		    r[i].seq, r[i].gpu, fake_busid[want[r[i].gpu]], r[i].cvd);
		seen[r[i].gpu] = 1;
	}
	for (i = 0; i < ngpu; i++)
		ck_assert_msg(seen[i], "GPU %d ran no task", i);
	ck_assert_int_eq(read_joblog(pathf("joblog"), j, 32, NULL), n);
	for (i = 0; i < n; i++) {
		for (nr = 0; nr < ngpu; nr++)
			if (strcmp(j[i].gpu, fake_uuid[want[nr]]) == 0)
				break;
		ck_assert_msg(nr < ngpu, "joblog GPU %s", j[i].gpu);
	}
}

START_TEST(tasks_run_by_uuid_on_probed_gpus)
{
	static const int	 all[] = { 0, 1, 2 };
	struct res		 res;
	char			 want[256];
	int			 i;

	machine();
	inherit_cvd = NULL;
	RUN(&res, "--topology", FAKE_XML, "--show-gpus");
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	for (i = 0; i < FAKE_NGPU; i++) {
		/* GPU, ID, name, memory, bus id, NUMA node: in PCI order. */
		snprintf(want, sizeof(want), "%d\t%s\tFake GPU %d\t%d.0 GiB\t"
		    "%s\t%d\t", i, fake_uuid[i], i, 16 * (i + 1),
		    fake_busid[i], i == 0 ? 0 : 1);
		ck_assert_msg(strstr(res.out, want) != NULL, "no line '%s' "
		    "in:\n%s", want, res.out);
	}
	run_tasks(all, FAKE_NGPU, 9);
	tmp_remove();
}
END_TEST

/* A batch system gave us physical GPUs 2 and 0: pool GPU 0 is the third
 * device and its tasks must say so by UUID, not "0". */
START_TEST(inherited_visible_devices_reach_tasks_as_uuids)
{
	static const int	 given[] = { 2, 0 };

	machine();
	inherit_cvd = "2,0";
	run_tasks(given, 2, 6);
	tmp_remove();
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("probed");
	TCase	*tc = tcase_create("probed");

	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, tasks_run_by_uuid_on_probed_gpus);
	tcase_add_test(tc, inherited_visible_devices_reach_tasks_as_uuids);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
