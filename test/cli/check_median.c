/*
 * check_median.c: the running median of src/cli/common/median.c, which
 * --timeout N% takes of the runtimes of the tasks that succeeded: after
 * every value, the middle of the values so far as a sort gives it.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "common/cli.h"

static int
cmp_double(const void *a, const void *b)
{
	double	 x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The median of the values so far, the lower one of an even count, as
 * a sort would give it, after each of 2000 values (ties, negatives), and
 * none (-1) before the first and after median_release(). */
START_TEST(median_is_the_sorted_middle)
{
	struct median	 m;
	double		 v[2000], s[2000];
	unsigned	 x = 12345;
	int		 i;

	memset(&m, 0, sizeof(m));
	ck_assert_double_eq(median_get(&m), -1);
	for (i = 0; i < 2000; i++) {
		x = x * 1103515245u + 12345u;
		v[i] = (double)((x >> 16) % 500) - 100;
		ck_assert_int_eq(median_add(&m, v[i]), 0);
		memcpy(s, v, (size_t)(i + 1) * sizeof(s[0]));
		qsort(s, (size_t)i + 1, sizeof(s[0]), cmp_double);
		ck_assert_double_eq(median_get(&m), s[i / 2]);
	}
	median_release(&m);
	ck_assert_double_eq(median_get(&m), -1);
}
END_TEST

START_TEST(median_of_few)
{
	struct median	 m;

	memset(&m, 0, sizeof(m));
	ck_assert_int_eq(median_add(&m, 0.3), 0);
	ck_assert_double_eq(median_get(&m), 0.3);
	ck_assert_int_eq(median_add(&m, 0.1), 0);
	ck_assert_double_eq(median_get(&m), 0.1);	/* the lower one */
	ck_assert_int_eq(median_add(&m, 600), 0);
	ck_assert_double_eq(median_get(&m), 0.3);
	median_release(&m);
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("median");
	TCase	*tc = tcase_create("median");

	tcase_add_test(tc, median_is_the_sorted_middle);
	tcase_add_test(tc, median_of_few);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
