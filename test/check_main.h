/*
 * check_main.h: the main() every Check program here ends with: run the
 * suite in CK_FORK mode (one process per test) and exit nonzero on any
 * failure, so meson test sees it. A case that needs what a machine may
 * lack runs as a meson test of its own (the program given the case's
 * name), which exits 77 there: meson reports SKIP, never a pass.
 */
#ifndef GP_CHECK_MAIN_H
#define GP_CHECK_MAIN_H

#include <check.h>
#include <stdio.h>

/* Run the case named tcname of s (NULL: every case). */
static inline int
gp_check_run_case(Suite *s, const char *tcname)
{
	SRunner	*sr = srunner_create(s);
	int	 nf;

	srunner_run(sr, NULL, tcname, CK_NORMAL);
	nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nf ? 1 : 0;
}

static inline int
gp_check_run(Suite *s)
{
	return gp_check_run_case(s, NULL);
}

/* Say why case tcname of s cannot test here; meson's SKIP status. The
 * suite is freed (through a runner: Check frees suites only so), so
 * that a memcheck run sees no leak. */
static inline int
gp_check_skip(Suite *s, const char *tcname, const char *why)
{
	srunner_free(srunner_create(s));
	printf("SKIP %s: %s\n", tcname, why);
	return 77;
}

#endif /* GP_CHECK_MAIN_H */
