/*
 * check_opts.c: the library as the only judge of options (opts.c): sizes
 * as text (gp_parse_size()), options set by name from text
 * (gp_pool_opts_set(), the niceness among them), the gpus grammar
 * "free[:LIST]" and what needs GP_POOL_GPUS_FREE, checked alone
 * (gp_pool_opts_check()) and by gp_pool_create() with its reason in
 * errbuf (plan-only pools on fake GPUs: nothing is forked); the rows
 * gp_pool_opt_info() lists (opts.def), their ranges and defaults, each
 * in the manuals.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
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

/* The rows gp_pool_opt_info() lists are the options gp_pool_opts_set()
 * takes, each by its kind; a value of the wrong kind is refused. */
START_TEST(rows_are_listed_and_taken)
{
	struct gp_opt_info	 in, prev[64];
	struct gp_pool_opts	 o;
	const char		*ok;
	char			 err[256];
	int			 i, j;

	ck_assert_int_eq(gp_pool_opt_info(-1, &in), -ENOENT);
	for (i = 0; gp_pool_opt_info(i, &in) == 0; i++) {
		ck_assert_int_lt(i, 64);
		ck_assert_ptr_nonnull(in.name);
		ck_assert_ptr_nonnull(in.help);
		ck_assert_ptr_nonnull(in.clihelp);
		ck_assert_msg(in.cli == NULL || strncmp(in.cli, "--", 2) == 0,
		    "%s", in.name);
		ck_assert_msg(in.cli != NULL || in.group == GP_OPT_G_NONE,
		    "%s", in.name);
		for (j = 0; j < 4; j++)
			ck_assert_uint_eq(in.reserved[j], 0);
		for (j = 0; j < i; j++)
			ck_assert_str_ne(prev[j].name, in.name);
		prev[i] = in;
		switch (in.kind) {
		case GP_OPT_GPUS:	ok = "free:0"; break;
		case GP_OPT_COUNT:
		case GP_OPT_INT:	ok = in.lo == 1 ? "1" : "-1"; break;
		case GP_OPT_SIZE:	ok = "1G"; break;
		case GP_OPT_FLAG:	ok = "1"; break;
		case GP_OPT_PATH:	ok = "/tmp"; break;
		case GP_OPT_SECS:	ok = "1.5"; break;
		default:		ck_abort_msg("%s: kind %d", in.name,
					    in.kind); return;
		}
		memset(&o, 0, sizeof(o));
		ck_assert_msg(gp_pool_opts_set(&o, in.name, ok, err,
		    sizeof(err)) == 0, "%s=%s: %s", in.name, ok, err);
		if (in.kind == GP_OPT_FLAG)
			ck_assert_uint_eq(o.flags, (unsigned)in.lo);
		if (in.kind == GP_OPT_GPUS || in.kind == GP_OPT_PATH)
			continue;
		ck_assert_msg(gp_pool_opts_set(&o, in.name, "x", err,
		    sizeof(err)) == -EINVAL, "%s=x", in.name);
	}
	ck_assert_int_ge(i, 10);
	ck_assert_int_eq(gp_pool_opt_info(i, &in), -ENOENT);
	memset(&o, 0, sizeof(o));
	ck_assert_int_eq(gp_pool_opts_set(&o, "claim_timeout", "1.5", err,
	    sizeof(err)), 0);
	ck_assert_int_eq(o.claim_timeout_ms, 1500);
	ck_assert_int_eq(gp_pool_opts_set(&o, "claim_timeout", "0", err,
	    sizeof(err)), 0);
	ck_assert_int_eq(o.claim_timeout_ms, -1);
	ck_assert_int_eq(gp_pool_opts_set(&o, "claim_timeout", "2000001", err,
	    sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "'2000001' is not a number of seconds (0 to "
	    "2000000; 0: do not wait)");
	ck_assert_int_eq(gp_pool_opts_set(&o, "claims", "", err, sizeof(err)),
	    -EINVAL);
	ck_assert_str_eq(err, "an empty directory name");
	ck_assert_ptr_null(o.claims);
	ck_assert_int_eq(gp_pool_opts_set(&o, "claims", "none", err,
	    sizeof(err)), 0);
	ck_assert_str_eq(o.claims, "none");
}
END_TEST

/* The rows' ranges and defaults, in the struct itself: gp_pool_opts_check()
 * words a value out of range once for all. */
START_TEST(rows_ranges_and_defaults)
{
	static const struct {
		int		 gpw, nice;
		unsigned	 busy_pct, busy_util;
		const char	*claims, *why;
	} t[] = {
		{ -1, 0, 0, 0, NULL, "pool options: gpus_per_worker -1 out of "
		    "range (1 to 1024)" },
		{ 1025, 0, 0, 0, NULL, "pool options: gpus_per_worker 1025 "
		    "out of range (1 to 1024)" },
		{ 0, -21, 0, 0, NULL, "pool options: nice -21 out of range "
		    "(-20 to 19)" },
		{ 0, 0, 101, 0, NULL, "pool options: busy_pct 101 out of "
		    "range (1 to 100)" },
		{ 0, 0, 0, 4000000000u, NULL, "pool options: busy_util "
		    "4000000000 out of range (1 to 100)" },
		{ 0, 0, 0, 0, "", "pool options: claims \"\": an empty "
		    "directory name" },
	};
	struct gp_pool_opts	 o;
	struct gp_pool		*p;
	struct gp_worker_info	 wi;
	char			 err[256];
	size_t			 i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		memset(&o, 0, sizeof(o));
		o.flags = GP_POOL_GPUS_FREE;
		o.gpus_per_worker = t[i].gpw;
		o.nice = t[i].nice;
		o.busy_pct = t[i].busy_pct;
		o.busy_util = t[i].busy_util;
		o.claims = t[i].claims;
		ck_assert_int_eq(gp_pool_opts_check(&o, err, sizeof(err)),
		    -EINVAL);
		ck_assert_str_eq(err, t[i].why);
	}
	/* 0 takes the row's default: busy_pct 10 (gp_pool_gpu_state()
	 * would show it; here: a plan of 2 workers with 1 GPU each). */
	memset(&o, 0, sizeof(o));
	o.fake_gpus = 2;
	o.flags = GP_POOL_PLAN_ONLY;
	o.errbuf = err;
	o.errlen = sizeof(err);
	ck_assert_int_eq(gp_pool_opts_check(&o, err, sizeof(err)), 0);
	ck_assert_msg(gp_pool_create(&p, &o) == 0, "%s", err);
	ck_assert_int_eq(gp_pool_size(p), 2);
	ck_assert_int_eq(gp_pool_info(p, 1, &wi), 0);
	ck_assert_int_eq(wi.ngpus, 1);
	gp_pool_destroy(p);
}
END_TEST

/* Each row is in the manuals: its name in gpupool(3)'s list of the
 * options by name, its Python keyword in python.md, its gpupool-run
 * option in gpupool-run(1). A row added without them fails here. */
static char *
slurp(const char *name)
{
	char	 path[512], *s;
	FILE	*f;
	long	 n;

	snprintf(path, sizeof(path), "%s/%s", GP_DOCS, name);
	ck_assert_msg((f = fopen(path, "r")) != NULL, "%s", path);
	ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	rewind(f);
	s = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(s);
	ck_assert_uint_eq(fread(s, 1, (size_t)n, f), (size_t)n);
	s[n] = '\0';
	fclose(f);
	return s;
}

/* roff's \- as -, in place. */
static void
unescape_minus(char *s)
{
	char	*w = s;

	for (; *s; s++)
		if (!(s[0] == '\\' && s[1] == '-'))
			*w++ = *s;
	*w = '\0';
}

START_TEST(every_row_is_documented)
{
	struct gp_opt_info	 in;
	char			*man3 = slurp("gpupool.3"),
				*py = slurp("python.md"),
				*man1 = slurp("gpupool-run.1"), want[128];
	int			 i;

	unescape_minus(man1);
	for (i = 0; gp_pool_opt_info(i, &in) == 0; i++) {
		snprintf(want, sizeof(want), "\n.TP\n.B %s\n", in.name);
		ck_assert_msg(strstr(man3, want) != NULL, "gpupool(3) lists "
		    "no option %s", in.name);
		if (in.py != NULL) {
			snprintf(want, sizeof(want), "`%s", in.py);
			ck_assert_msg(strstr(py, want) != NULL, "python.md "
			    "names no %s", in.py);
		}
		if (in.cli != NULL) {
			snprintf(want, sizeof(want), "\n.BI %s ", in.cli);
			ck_assert_msg(strstr(man1, want) != NULL ||
			    (snprintf(want, sizeof(want), "\n.B %s\n",
			    in.cli), strstr(man1, want) != NULL),
			    "gpupool-run(1) has no entry for %s", in.cli);
		}
	}
	free(man3);
	free(py);
	free(man1);
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
	tcase_add_test(tc, rows_are_listed_and_taken);
	tcase_add_test(tc, rows_ranges_and_defaults);
	tcase_add_test(tc, every_row_is_documented);
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
