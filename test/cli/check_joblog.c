/*
 * check_joblog.c: the joblog (src/cli/joblog.c), with no process run:
 * its columns written (GNU parallel's nine, then GPU, GPUMem and
 * GPUUtil) and read back by --resume, joblogs of older gpupool-runs and
 * of GNU parallel and lines a crash tore included; every command's text
 * read back as it was.
 */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "master.h"
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
	ck_assert_int_eq(joblog_append(&j, &r), 0);
	r.seq = 2;
	r.exitval = 1;
	r.gpu_mem = 0;
	r.gpu_util = -1;
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
		ck_assert_int_eq(tabs, 11);
		lines++;
	}
	ck_assert_int_eq(lines, 3);
	ck_assert_int_ge(fd = open(path, O_RDONLY), 0);
	n = read(fd, b, 4095);
	b[n] = '\0';
	close(fd);
	ck_assert_ptr_nonnull(strstr(b, "Seq\tHost\tStarttime\tJobRuntime\t"
	    "Send\tReceive\tExitval\tSignal\tCommand\tGPU\tGPUMem\tGPUUtil\n"));
	ck_assert_ptr_nonnull(strstr(b, "\t0\t0\tpython t.py\tGPU-1\t20480"
	    "\t87\n"));
	ck_assert_ptr_nonnull(strstr(b, "\t1\t0\tpython t.py\tGPU-1\t-\t-\n"));
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

int
main(void)
{
	Suite	*s = suite_create("joblog");
	TCase	*tc = tcase_create("joblog");

	tcase_add_test(tc, joblog_gpu_columns);
	tcase_add_test(tc, joblog_resume_old_new_and_torn);
	tcase_add_test(tc, joblog_escaping_is_reversible);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
