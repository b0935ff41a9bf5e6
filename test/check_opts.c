/*
 * check_opts.c: the library as the only judge of options (opts.c): sizes
 * as text (gp_parse_size()), options set by name from text
 * (gp_pool_opts_set(), the niceness among them), the gpus grammar
 * "free[:LIST]" and what needs GP_POOL_GPUS_FREE, checked alone
 * (gp_pool_opts_check()) and by gp_pool_create() with its reason in
 * errbuf (plan-only pools on fake GPUs: nothing is forked).
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpupool.h"
#include "check_main.h"

#define GiB	(1ull << 30)

START_TEST(sizes)
{
	static const struct {
		const char	*s;
		uint64_t	 b;
	} ok[] = {
		{ "20G", 20 * GiB }, { "1.5GiB", 3 * GiB / 2 },
		{ "512M", 512ull << 20 }, { "2t", 2ull << 40 }, { "1KB", 1024 },
		{ "0", 0 }, { "0G", 0 }, { ".5K", 512 }, { "5.K", 5120 },
		{ "1.0001K", 1025 }, { "1024T", 1024ull << 40 },
	};
	static const char *const bad[] = {
		"", "20", "20X", "1e3G", "-1G", " 1G", "1G ", "0x10G", "inf",
		"1.2.3G", ".", ".G", "20GIB", "20Gb", "nan",
	};
	const char	*why;
	uint64_t	 b;
	size_t		 i;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		ck_assert_msg(gp_parse_size(ok[i].s, strlen(ok[i].s), &b,
		    &why) == 0, "%s", ok[i].s);
		ck_assert_ptr_null(why);
		ck_assert_uint_eq(b, ok[i].b);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(gp_parse_size(bad[i], strlen(bad[i]), &b,
		    &why) == -EINVAL, "%s", bad[i]);
		ck_assert_ptr_nonnull(why);
	}
	ck_assert_int_eq(gp_parse_size("20", 2, &b, &why), -EINVAL);
	ck_assert_str_eq(why, "needs a unit, e.g. 20G");
	ck_assert_int_eq(gp_parse_size("1025T", 5, &b, &why), -ERANGE);
	ck_assert_str_eq(why, "too large (at most 1024T)");
	/* len, not the NUL, ends it: a tag's "mem=20G gpus=2". */
	ck_assert_int_eq(gp_parse_size("20G gpus=2", 3, &b, &why), 0);
	ck_assert_uint_eq(b, 20 * GiB);
}
END_TEST

START_TEST(set_by_name)
{
	struct gp_pool_opts	 o = { 0 };
	char			 err[256];

	ck_assert_int_eq(gp_pool_opts_set(&o, "gpus", "free:0,2", err,
	    sizeof(err)), 0);
	ck_assert(o.flags & GP_POOL_GPUS_FREE);
	ck_assert_str_eq(o.gpus, "0,2");
	ck_assert_int_eq(gp_pool_opts_set(&o, "gpus", "free", err,
	    sizeof(err)), 0);
	ck_assert(o.flags & GP_POOL_GPUS_FREE);
	ck_assert_ptr_null(o.gpus);
	/* The last one wins, as a whole; "freedom" is a GPU name. */
	ck_assert_int_eq(gp_pool_opts_set(&o, "gpus", "freedom", err,
	    sizeof(err)), 0);
	ck_assert(!(o.flags & GP_POOL_GPUS_FREE));
	ck_assert_str_eq(o.gpus, "freedom");
	ck_assert_int_eq(gp_pool_opts_set(&o, "busy_pct", "25", err,
	    sizeof(err)), 0);
	ck_assert_uint_eq(o.busy_pct, 25);
	ck_assert_int_eq(gp_pool_opts_set(&o, "item_mem", "1.5G", err,
	    sizeof(err)), 0);
	ck_assert_uint_eq(o.item_mem, 3 * GiB / 2);
	ck_assert_int_eq(gp_pool_opts_set(&o, "gpus_per_worker", "2", err,
	    sizeof(err)), 0);
	ck_assert_int_eq(o.gpus_per_worker, 2);
	ck_assert_int_eq(gp_pool_opts_set(&o, "wait_free", "1", err,
	    sizeof(err)), 0);
	ck_assert(o.flags & GP_POOL_WAIT_FREE);
	ck_assert_int_eq(gp_pool_opts_set(&o, "wait_free", "0", err,
	    sizeof(err)), 0);
	ck_assert(!(o.flags & GP_POOL_WAIT_FREE));
	ck_assert_int_eq(gp_pool_opts_set(&o, "nice", "-20", err,
	    sizeof(err)), 0);
	ck_assert_int_eq(o.nice, -20);
	ck_assert_int_eq(gp_pool_opts_set(&o, "nice", "19", err,
	    sizeof(err)), 0);
	ck_assert_int_eq(o.nice, 19);
}
END_TEST

START_TEST(set_refuses_with_a_reason)
{
	static const struct {
		const char	*name, *value, *why;
		int		 rc;
	} t[] = {
		{ "gpus", "free:", "empty GPU list after 'free:'", -EINVAL },
		{ "gpus", "", "empty GPU list", -EINVAL },
		{ "busy_pct", "0", "'0' is not a percentage (1 to 100)",
		    -EINVAL },
		{ "busy_pct", "101", "'101' is not a percentage", -EINVAL },
		{ "busy_pct", "2.5", "'2.5' is not a percentage", -EINVAL },
		{ "busy_pct", "-5", "'-5' is not a percentage", -EINVAL },
		{ "item_mem", "20", "bad size '20': needs a unit, e.g. 20G",
		    -EINVAL },
		{ "item_mem", "lots", "bad size 'lots': not a size", -EINVAL },
		{ "item_mem", "2000T", "too large", -ERANGE },
		{ "gpus_per_worker", "0", "'0' is not a GPU count (1 to",
		    -EINVAL },
		{ "wait_free", "yes", "'yes' is not 0 or 1", -EINVAL },
		{ "nice", "20", "'20' is not a niceness (-20 to 19)",
		    -EINVAL },
		{ "nice", "-21", "'-21' is not a niceness", -EINVAL },
		{ "nice", "+5", "'+5' is not a niceness", -EINVAL },
		{ "nice", "--5", "'--5' is not a niceness", -EINVAL },
		{ "nice", "1.5", "'1.5' is not a niceness", -EINVAL },
		{ "nice", "", "'' is not a niceness", -EINVAL },
		{ "busy_pct", "-0", "'-0' is not a percentage", -EINVAL },
		{ "nope", "1", "no pool option 'nope'", -EINVAL },
	};
	struct gp_pool_opts	 o = { 0 }, zero = { 0 };
	char			 err[256];
	size_t			 i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		err[0] = '\0';
		ck_assert_int_eq(gp_pool_opts_set(&o, t[i].name, t[i].value,
		    err, sizeof(err)), t[i].rc);
		ck_assert_msg(strstr(err, t[i].why) != NULL, "%s=%s: '%s'",
		    t[i].name, t[i].value, err);
		ck_assert_msg(memcmp(&o, &zero, sizeof(o)) == 0, "%s",
		    t[i].name);
	}
	ck_assert_int_eq(gp_pool_opts_set(&o, "busy_pct", NULL, NULL, 0),
	    -EINVAL);
	/* Set in the struct itself, past setpriority()'s range. */
	o.nice = 20;
	ck_assert_int_eq(gp_pool_opts_check(&o, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "pool options: nice 20 out of range (-20 to "
	    "19)");
	o.nice = -21;
	ck_assert_int_eq(gp_pool_opts_check(&o, err, sizeof(err)), -EINVAL);
}
END_TEST

/* What needs gpus free: refused by gp_pool_opts_check() and by
 * gp_pool_create(), which says why in errbuf. */
START_TEST(what_needs_free)
{
	static const struct {
		unsigned	 flags, busy_pct;
		const char	*gpus, *why;
	} t[] = {
		{ GP_POOL_WAIT_FREE, 0, NULL, "wait_free needs gpus free (or "
		    "free:LIST)" },
		{ GP_POOL_WAIT_FREE, 0, "0", "wait_free needs gpus free" },
		{ 0, 20, NULL, "busy_pct needs gpus free (or free:LIST)" },
		{ GP_POOL_GPUS_FREE, 101, NULL, "busy_pct 101 out of range" },
		{ 0, 0, "free:", "gpus 'free:': empty GPU list after "
		    "'free:'" },
	};
	struct gp_pool_opts	 o;
	struct gp_pool		*p;
	char			 err[256];
	size_t			 i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		memset(&o, 0, sizeof(o));
		o.fake_gpus = 2;
		o.flags = t[i].flags | GP_POOL_PLAN_ONLY;
		o.busy_pct = t[i].busy_pct;
		o.gpus = t[i].gpus;
		o.errbuf = err;
		o.errlen = sizeof(err);
		err[0] = '\0';
		ck_assert_int_eq(gp_pool_opts_check(&o, err, sizeof(err)),
		    -EINVAL);
		ck_assert_msg(strstr(err, t[i].why) != NULL, "'%s'", err);
		err[0] = '\0';
		ck_assert_int_eq(gp_pool_create(&p, &o), -EINVAL);
		ck_assert_ptr_null(p);
		ck_assert_msg(strstr(err, t[i].why) != NULL, "'%s'", err);
	}
}
END_TEST

/* "free" and "free:LIST" in the gpus string itself, as a C caller
 * writes it: GP_POOL_GPUS_FREE with that list. */
START_TEST(free_in_the_gpus_string)
{
	struct gp_pool_opts	 o = { 0 };
	struct gp_worker_info	 wi;
	struct gp_pool		*p;
	char			 err[256];

	o.fake_gpus = 3;
	o.flags = GP_POOL_PLAN_ONLY | GP_POOL_WAIT_FREE;
	o.busy_pct = 50;
	o.errbuf = err;
	o.errlen = sizeof(err);
	o.gpus = "free:0,2";
	ck_assert_int_eq(gp_pool_opts_check(&o, err, sizeof(err)), 0);
	ck_assert_str_eq(o.gpus, "free:0,2");	/* not changed */
	ck_assert_msg(gp_pool_create(&p, &o) == 0, "%s", err);
	ck_assert_int_eq(gp_pool_gpus(p), 2);
	ck_assert_int_eq(gp_pool_info(p, 1, &wi), 0);
	ck_assert_str_eq(wi.visible, "fake2");
	gp_pool_destroy(p);
	o.gpus = "free";
	ck_assert_msg(gp_pool_create(&p, &o) == 0, "%s", err);
	ck_assert_int_eq(gp_pool_gpus(p), 3);
	gp_pool_destroy(p);
}
END_TEST

static Suite *
opts_suite(void)
{
	Suite	*s = suite_create("opts");
	TCase	*tc = tcase_create("text");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, sizes);
	tcase_add_test(tc, set_by_name);
	tcase_add_test(tc, set_refuses_with_a_reason);
	tcase_add_test(tc, what_needs_free);
	tcase_add_test(tc, free_in_the_gpus_string);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return gp_check_run(opts_suite());
}
