/*
 * check_main.h: the main() every Check program here ends with: run the
 * suite in CK_FORK mode (one process per test) and exit nonzero on any
 * failure, so meson test sees it.
 */
#ifndef GP_CHECK_MAIN_H
#define GP_CHECK_MAIN_H

#include <check.h>

static inline int
gp_check_run(Suite *s)
{
	SRunner	*sr = srunner_create(s);
	int	 nf;

	srunner_run_all(sr, CK_NORMAL);
	nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nf ? 1 : 0;
}

#endif /* GP_CHECK_MAIN_H */
