/*
 * check_joblog.c: the joblog (src/cli/master/joblog.c), through its functions:
 * its columns written (GNU parallel's nine, then GPU, GPUMem, GPUUtil
 * and PeakRSS) and read back by --resume, joblogs of older gpupool-runs and
 * of GNU parallel and lines a crash tore included; every command's text
 * read back as it was. One test runs gpupool-run (GPUPOOL_RUN), for the
 * PeakRSS a worker measures.
 */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "master/master.h"
#include "check_main.h"

/* A temporary file with text; its path in path (32 bytes). */
static void
file_with(char *path, const char *text)
{
	int	 fd;

	strcpy(path, "/tmp/check_joblog.XXXXXX");
	ck_assert_int_ge(fd = mkstemp(path), 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

START_TEST(joblog_gpu_columns)
{
	struct joblog	 j;
	struct attempt	 r;
	char		 path[32], err[256], *b, *l, *save = NULL;
	int		 fd, tabs, lines = 0;
	ssize_t		 n;

	file_with(path, "");
	joblog_init(&j);
	ck_assert_int_eq(joblog_open(&j, path, 0, err, sizeof(err)), 0);
	memset(&r, 0, sizeof(r));
	r.seq = 1;
	r.cmd = "python t.py";
	r.gpu = "GPU-1";
	r.host = ":";
	r.gpu_mem = 20480ull << 20;
	r.gpu_util = 87;
	r.rp.peak_rss_kb = 12345;
	ck_assert_int_eq(joblog_append(&j, &r), 0);
	r.seq = 2;
	r.exitval = 1;
	r.gpu_mem = 0;
	r.gpu_util = -1;
	r.rp.peak_rss_kb = 0;
	ck_assert_int_eq(joblog_append(&j, &r), 0);
	joblog_release(&j);

	b = calloc(1, 4096);
	ck_assert_int_ge(fd = open(path, O_RDONLY), 0);
	n = read(fd, b, 4095);
	ck_assert_int_gt(n, 0);
	close(fd);
	for (l = strtok_r(b, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		for (tabs = 0; *l; l++)
			tabs += *l == '\t';
		ck_assert_int_eq(tabs, 12);
		lines++;
	}
	ck_assert_int_eq(lines, 3);
	ck_assert_int_ge(fd = open(path, O_RDONLY), 0);
	n = read(fd, b, 4095);
	b[n] = '\0';
	close(fd);
	ck_assert_ptr_nonnull(strstr(b, "Seq\tHost\tStarttime\tJobRuntime\t"
	    "Send\tReceive\tExitval\tSignal\tCommand\tGPU\tGPUMem\tGPUUtil"
	    "\tPeakRSS\n"));
	ck_assert_ptr_nonnull(strstr(b, "\t0\t0\tpython t.py\tGPU-1\t20480"
	    "\t87\t12345\n"));
	ck_assert_ptr_nonnull(strstr(b, "\t1\t0\tpython t.py\tGPU-1\t-\t-"
	    "\t-\n"));
	free(b);

	/* --resume reads it back. */
	joblog_init(&j);
	ck_assert_int_eq(joblog_load(&j, path, err, sizeof(err)), 0);
	ck_assert_int_eq(joblog_done(&j, 1, 1), 1);
	ck_assert_int_eq(joblog_done(&j, 2, 0), 1);
	ck_assert_int_eq(joblog_done(&j, 2, 1), 0);
	ck_assert_int_eq(joblog_changed(&j, 1, "python t.py"), 0);
	ck_assert_int_eq(joblog_changed(&j, 2, "python u.py"), 1);
	joblog_release(&j);
	unlink(path);
}
END_TEST

/* --resume reads joblogs from before the GPUMem and GPUUtil columns
 * and lines a crash cut: a line counts once its outcome is whole (cut
 * in the GPU, GPUMem or GPUUtil column), and the Command compares
 * whatever follows it. */
START_TEST(joblog_resume_old_new_and_torn)
{
	static const char text[] =
	    "Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\tExitval\t"
	    "Signal\tCommand\tGPU\n"
	    "1\t:\t1700000000.000\t0.1\t0\t0\t0\t0\tcmd one\tGPU-a\n"
	    "2\t:\t1700000000.000\t0.1\t0\t0\t1\t0\tcmd two\tGPU-a\n"
	    "Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\tExitval\t"
	    "Signal\tCommand\tGPU\tGPUMem\tGPUUtil\n"
	    "3\t:\t1700000000.000\t0.1\t0\t0\t0\t0\tcmd three\tGPU-b\t512\t9\n"
	    "4\t:\t1700000000.000\t0.1\t0\t0\t0\t0\tcmd four\tGPU-b\t-\t-\n"
	    "5\t:\t1700000000.000\t0.1\t0\t0\t0\t0\tcmd five\tGPU-b\t51\n"
	    "6\t:\t1700000000.000\t0.1\t0\t0\t0\t0\tcmd six\tGP\n"
	    "7\t:\t1700000000.000\t0.1\t0\t0\t0\t0\tcmd sev\n"
	    "8\t:\t1700000000.000\t0.1\t0\t0\t0\t0\tcmd eight\tGPU-b\t1024\t";
	static const char *const cmds[] = {
		NULL, "cmd one", "cmd two", "cmd three", "cmd four",
		"cmd five", "cmd six", NULL, "cmd eight",
	};
	struct joblog	 j;
	char		 path[32], err[256];
	unsigned long	 s;

	file_with(path, text);
	joblog_init(&j);
	ck_assert_int_eq(joblog_load(&j, path, err, sizeof(err)), 0);
	for (s = 1; s <= 8; s++) {
		ck_assert_int_eq(joblog_done(&j, s, 0), s != 7);
		ck_assert_int_eq(joblog_done(&j, s, 1), s != 7 && s != 2);
		if (cmds[s] != NULL)
			ck_assert_msg(!joblog_changed(&j, s, cmds[s]),
			    "task %lu: command not matched", s);
	}
	ck_assert_int_eq(joblog_changed(&j, 3, "cmd three\tGPU-b"), 1);
	joblog_release(&j);

	/* Appending ends the torn line first: the new record reads back
	 * whole, with the old ones. */
	ck_assert_int_eq(joblog_open(&j, path, 1, err, sizeof(err)), 0);
	{
		struct attempt	 r = { .seq = 9, .cmd = "cmd nine",
		    .gpu = "GPU-c", .host = ":", .gpu_mem = 3ull << 20,
		    .gpu_util = 100 };

		ck_assert_int_eq(joblog_append(&j, &r), 0);
	}
	joblog_release(&j);
	ck_assert_int_eq(joblog_load(&j, path, err, sizeof(err)), 0);
	ck_assert_int_eq(joblog_done(&j, 9, 1), 1);
	ck_assert_int_eq(joblog_done(&j, 8, 1), 1);
	ck_assert_int_eq(joblog_changed(&j, 9, "cmd nine"), 0);
	joblog_release(&j);
	unlink(path);
}
END_TEST

/* Every command has a joblog text of its own, which reads back as it:
 * a newline and the two characters \n, a TAB and \t, one backslash
 * and two, a backslash at the end. GNU parallel's lines, whose
 * Commands are raw, match as they are. */
START_TEST(joblog_escaping_is_reversible)
{
	static const char *const cmds[] = {
		"echo 'a\nb'", "echo 'a\\nb'", "echo 'a\tb'", "echo 'a\\tb'",
		"printf '%s\\\\n' x", "echo a\\\\\\nb", "echo \\", "echo \\\\",
		"echo \\\t", "echo \\\n", "sed 's/\\./,/'", "tr \\\\ /",
	};
	const size_t	 n = sizeof(cmds) / sizeof(cmds[0]);
	struct joblog	 j;
	struct attempt	 r;
	char		 path[32], err[256], *b, *l, *save = NULL, *f;
	size_t		 i, k;
	int		 fd, tab;
	ssize_t		 got;

	file_with(path, "");
	joblog_init(&j);
	ck_assert_int_eq(joblog_open(&j, path, 0, err, sizeof(err)), 0);
	for (i = 0; i < n; i++) {
		memset(&r, 0, sizeof(r));
		r.seq = i + 1;
		r.cmd = cmds[i];
		r.gpu = "fake0";
		r.host = ":";
		ck_assert_int_eq(joblog_append(&j, &r), 0);
	}
	joblog_release(&j);
	ck_assert_int_eq(joblog_load(&j, path, err, sizeof(err)), 0);
	for (i = 0; i < n; i++)
		for (k = 0; k < n; k++)
			ck_assert_msg(joblog_changed(&j, i + 1, cmds[k]) ==
			    (i != k), "Seq %zu against '%s'", i + 1, cmds[k]);
	joblog_release(&j);

	/* Each Command field reads back as its command. */
	b = calloc(1, 65536);
	ck_assert_int_ge(fd = open(path, O_RDONLY), 0);
	ck_assert_int_gt(got = read(fd, b, 65535), 0);
	close(fd);
	i = 0;
	for (l = strtok_r(b, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		if (strncmp(l, "Seq\t", 4) == 0)
			continue;	/* the header */
		for (f = l, tab = 0; tab < 8; tab++)
			ck_assert_ptr_nonnull(f = strchr(f, '\t') + 1);
		*strchr(f, '\t') = '\0';
		joblog_unesc(f);
		ck_assert_str_eq(f, cmds[i++]);
	}
	ck_assert_uint_eq(i, n);
	free(b);
	unlink(path);

	/* GNU parallel's nine columns: the Command is the rest of the
	 * line, raw, a TAB and backslashes and all, and reads back as the
	 * command it was. */
	file_with(path, "Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\t"
	    "Exitval\tSignal\tCommand\n"
	    "1\t:\t1700000000.000\t0.1\t0\t0\t0\t0\tsed 's/\\./,/'\n"
	    "2\t:\t1700000000.000\t0.1\t0\t0\t0\t0\ttr \\\\ /\n"
	    "3\t:\t1700000000.000\t0.1\t0\t0\t0\t0\techo 'a\tb'\n");
	ck_assert_int_eq(joblog_load(&j, path, err, sizeof(err)), 0);
	ck_assert_int_eq(joblog_changed(&j, 1, "sed 's/\\./,/'"), 0);
	ck_assert_int_eq(joblog_changed(&j, 2, "tr \\\\ /"), 0);
	ck_assert_int_eq(joblog_changed(&j, 3, "echo 'a\tb'"), 0);
	ck_assert_int_eq(joblog_changed(&j, 3, "echo 'a"), 1);
	joblog_release(&j);
	unlink(path);
}
END_TEST

/* PeakRSS reads back, and a line of the twelve columns before it reads
 * with PeakRSS unknown. */
START_TEST(joblog_peak_rss_reads_back)
{
	char		 l13[] = "4\t:\t1700000000.000\t0.1\t0\t0\t0\t0\tcmd"
			    "\tGPU-a\t512\t9\t2048";
	char		 l12[] = "5\t:\t1700000000.000\t0.1\t0\t0\t0\t0\tcmd"
			    "\tGPU-a\t512\t9";
	const char	*h = "Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\t"
			    "Exitval\tSignal\tCommand\tGPU\tGPUMem\tGPUUtil"
			    "\tPeakRSS";
	struct attempt	 a;

	ck_assert_int_eq(joblog_header(h, strlen(h)), 13);
	ck_assert_int_eq(joblog_header(h, strlen(h) - strlen("\tPeakRSS")),
	    12);
	ck_assert_int_eq(joblog_parse(l13, strlen(l13), 13, 1, &a), JL_REC);
	ck_assert_int_eq(a.rp.peak_rss_kb, 2048);
	ck_assert_uint_eq(a.gpu_mem, 512ull << 20);
	ck_assert_int_eq(a.gpu_util, 9);
	ck_assert_int_eq(joblog_parse(l12, strlen(l12), 12, 1, &a), JL_REC);
	ck_assert_int_eq(a.rp.peak_rss_kb, 0);
	ck_assert_str_eq(a.gpu, "GPU-a");
}
END_TEST

/* A task's PeakRSS is its own, as the worker that reaped it measured
 * it: dd's 64 MiB buffer shows, true's few pages do not. */
START_TEST(joblog_peak_rss_is_the_tasks)
{
	char		 dir[] = "/tmp/check_joblog.XXXXXX", cmd[1024];
	char		 tasks[64], jl[64], *b, *l, *save = NULL;
	int64_t		 rss[3] = { 0 };
	struct attempt	 a;
	FILE		*f;
	int		 k, ncol = 0;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(tasks, sizeof(tasks), "%s/tasks", dir);
	snprintf(jl, sizeof(jl), "%s/jl", dir);
	ck_assert_ptr_nonnull(f = fopen(tasks, "w"));
	fputs("dd if=/dev/zero of=/dev/null bs=64M count=1 status=none\n"
	    "true\n", f);
	ck_assert_int_eq(fclose(f), 0);
	snprintf(cmd, sizeof(cmd), "%s --fake-gpus 1 --joblog %s %s "
	    ">/dev/null 2>&1", GPUPOOL_RUN, jl, tasks);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_ptr_nonnull(b = calloc(1, 65536));
	ck_assert_ptr_nonnull(f = fopen(jl, "r"));
	ck_assert_uint_gt(fread(b, 1, 65535, f), 0);
	fclose(f);
	for (l = strtok_r(b, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		if ((k = joblog_header(l, strlen(l))) != 0)
			ncol = k;
		else if (joblog_parse(l, strlen(l), ncol, 1, &a) == JL_REC &&
		    a.seq < 3)
			rss[a.seq] = a.rp.peak_rss_kb;
	}
	free(b);
	ck_assert_int_eq(ncol, 13);
	ck_assert_msg(rss[1] >= 60000, "dd: PeakRSS %lld KiB",
	    (long long)rss[1]);
	ck_assert_msg(rss[2] > 0 && rss[2] < 60000, "true: PeakRSS %lld KiB",
	    (long long)rss[2]);
	unlink(tasks);
	unlink(jl);
	rmdir(dir);
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("joblog");
	TCase	*tc = tcase_create("joblog");

	tcase_add_test(tc, joblog_gpu_columns);
	tcase_add_test(tc, joblog_resume_old_new_and_torn);
	tcase_add_test(tc, joblog_escaping_is_reversible);
	tcase_add_test(tc, joblog_peak_rss_reads_back);
	tcase_add_test(tc, joblog_peak_rss_is_the_tasks);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
