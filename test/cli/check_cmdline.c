/*
 * check_cmdline.c: what a task's line becomes (src/cli/worker/cmdline.c), with
 * no process started: which lines need /bin/sh -c, the words the others
 * are run as, and the environment a task gets (the worker's, less ours
 * and the MPI launcher's, plus GPUPOOL_*).
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "worker/worker.h"
#include "parallel/parallel.h"
#include "check_main.h"

START_TEST(shell_only_when_needed)
{
	static const char *const sh[] = {
		"a | b", "a && b", "a; b", "a > f", "x=$HOME", "'q'", "a *",
		"echo hi", "cd /tmp", "exec ls", ". ./env", "FOO=1 prog",
		"# comment", "prog ~/x", "  if true", "a\nb", "a {b}",
	};
	static const char *const plain[] = {
		"ls -l", "prog a=b", "  prog\targ  ", "echoes", "/bin/true",
		"prog a#b", "prog x~", "",
	};
	size_t	 i;

	for (i = 0; i < sizeof(sh) / sizeof(sh[0]); i++)
		ck_assert_msg(cmdline_needs_shell(sh[i]),
		    "'%s' runs without sh", sh[i]);
	for (i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
		ck_assert_msg(!cmdline_needs_shell(plain[i]), "'%s' needs sh",
		    plain[i]);
}
END_TEST

START_TEST(split_on_blanks)
{
	char	**av, *big;
	size_t	 i, n = 3000;

	av = cmdline_split("  prog\ta  b\t\tc ");
	ck_assert_ptr_nonnull(av);
	ck_assert_str_eq(av[0], "prog");
	ck_assert_str_eq(av[1], "a");
	ck_assert_str_eq(av[2], "b");
	ck_assert_str_eq(av[3], "c");
	ck_assert_ptr_null(av[4]);
	av = cmdline_split("");
	ck_assert_ptr_nonnull(av);
	ck_assert_ptr_null(av[0]);
	/* Past the first buffer: 3,000 words of one letter. */
	big = malloc(2 * n + 1);
	ck_assert_ptr_nonnull(big);
	for (i = 0; i < n; i++) {
		big[2 * i] = (char)('a' + i % 26);
		big[2 * i + 1] = ' ';
	}
	big[2 * n] = '\0';
	av = cmdline_split(big);
	ck_assert_ptr_nonnull(av);
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(av[i][0], 'a' + (int)(i % 26));
		ck_assert_int_eq(av[i][1], '\0');
	}
	ck_assert_ptr_null(av[n]);
	free(big);
}
END_TEST

/* How many of env's entries start with pfx, and the last one. */
static int
count(char **env, const char *pfx, const char **last)
{
	int	 n = 0;

	for (; *env != NULL; env++)
		if (strncmp(*env, pfx, strlen(pfx)) == 0) {
			*last = *env;
			n++;
		}
	return n;
}

START_TEST(environment_of_a_task)
{
	struct gp_worker_info	 wi;
	const char		*v = NULL;
	char			**env;

	ck_assert_int_eq(setenv("GPUPOOL_TASK", "99", 1), 0);
	ck_assert_int_eq(setenv("GPUPOOL_SLOT", "99", 1), 0);
	ck_assert_int_eq(setenv("OMPI_COMM_WORLD_RANK", "1", 1), 0);
	ck_assert_int_eq(setenv("PMIX_RANK", "1", 1), 0);
	ck_assert_int_eq(setenv("KEEP_ME", "yes", 1), 0);
	memset(&wi, 0, sizeof(wi));
	wi.gpu = 2;
	wi.worker = 5;
	env = cmdline_env(&wi, 3, _i, -1);
	ck_assert_ptr_nonnull(env);
	cmdline_env_task(7, 2);
	ck_assert_int_eq(count(env, "GPUPOOL_GPU=", &v), 1);
	ck_assert_str_eq(v, "GPUPOOL_GPU=2");
	ck_assert_int_eq(count(env, "GPUPOOL_SLOT=", &v), 1);
	ck_assert_str_eq(v, "GPUPOOL_SLOT=5");
	ck_assert_int_eq(count(env, "GPUPOOL_RANK=", &v), 1);
	ck_assert_str_eq(v, "GPUPOOL_RANK=3");
	ck_assert_int_eq(count(env, "GPUPOOL_TASK=", &v), 1);
	ck_assert_str_eq(v, "GPUPOOL_TASK=7");
	ck_assert_int_eq(count(env, "GPUPOOL_ATTEMPT=", &v), 1);
	ck_assert_str_eq(v, "GPUPOOL_ATTEMPT=2");
	ck_assert_int_eq(count(env, "KEEP_ME=", &v), 1);
	/* A rank's launcher variables are kept only outside MPI runs. */
	ck_assert_int_eq(count(env, "OMPI_", &v), _i ? 0 : 1);
	ck_assert_int_eq(count(env, "PMIX_", &v), _i ? 0 : 1);
	/* The next task's numbers, in the same array. */
	cmdline_env_task(8, 1);
	ck_assert_int_eq(count(env, "GPUPOOL_TASK=", &v), 1);
	ck_assert_str_eq(v, "GPUPOOL_TASK=8");
	ck_assert_int_eq(count(env, "GPUPOOL_ATTEMPT=", &v), 1);
	ck_assert_str_eq(v, "GPUPOOL_ATTEMPT=1");
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("cmdline");
	TCase	*tc = tcase_create("cmdline");

	tcase_add_test(tc, shell_only_when_needed);
	tcase_add_test(tc, split_on_blanks);
	tcase_add_loop_test(tc, environment_of_a_task, 0, 2);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
