/*
 * check_repl.c: what a grid's row becomes (src/cli/parallel/repl.c, grid.c), with
 * no task run: the shell quoting of arguments (checked by what /bin/sh
 * makes of it), each replacement string, the arguments appended when
 * COMMAND has none, {%} left for the worker, and the rows of a product
 * with linked sources.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "options/opts.h"
#include "check_main.h"

/* What shell -c 'printf "<%s>" WORD' prints for a quoted word. */
static char *
shell_sees(const char *shell, const char *word)
{
	static char	 out[512];
	char		 cmd[1024];
	FILE		*p;
	size_t		 n;

	snprintf(cmd, sizeof(cmd), "printf '<%%s>' %s", word);
	ck_assert_int_ge(setenv("GP_CMD", cmd, 1), 0);
	snprintf(out, sizeof(out), "%s -c \"$GP_CMD\" 2>&1", shell);
	p = popen(out, "r");
	ck_assert_ptr_nonnull(p);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	ck_assert_int_eq(pclose(p), 0);
	return out;
}

static char *
sh_sees(const char *word)
{
	return shell_sees("/bin/sh", word);
}

/* Each word, quoted for each shell (sh's quoting for /bin/sh, bash, dash
 * and zsh; GNU parallel's for tcsh, csh and rc; fish's), is that word to
 * the shell, and never spells {%}. A shell not installed is left out
 * (before: every value was quoted for sh; csh read "q!w" as history, rc
 * and fish a backslash). */
START_TEST(quoting_is_one_inert_word)
{
	static const char *const words[] = { "plain", "a b", "it's", "\"q\"",
	    "$HOME", "x;y", "*", "-n", "`id`", "a\\b", "", "{%}", "a{%}b",
	    "'", "''", "tab\there", "new\nline", "~", "#c", "{1}", "q!w",
	    "!", "x\\", "\\'", "\\\\", "%1", "^x", "caf\xc3\xa9", "{a,b}",
	    "a=b", "(x)", "[a]", "<>|&", "\\\n" };
	static const char *const shells[] = { "/bin/sh", "/bin/bash",
	    "/bin/dash", "/usr/bin/zsh", "/usr/bin/tcsh", "/usr/bin/bsd-csh",
	    "/usr/bin/rc", "/usr/bin/fish" };
	struct gp_buf	 b = { 0 };
	char		 want[256];
	size_t		 i, k;

	for (k = 0; k < sizeof(shells) / sizeof(shells[0]); k++) {
		if (access(shells[k], X_OK) != 0)
			continue;
		for (i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
			b.off = b.len = 0;
			ck_assert_int_eq(repl_quote(&b, words[i],
			    strlen(words[i]), repl_shell(shells[k])), 0);
			ck_assert_int_eq(gp_buf_add(&b, "", 1), 0);
			ck_assert_msg(strstr((char *)b.data, "{%}") == NULL,
			    "'%s' spells {%%}", (char *)b.data);
			snprintf(want, sizeof(want), "<%s>", words[i]);
			ck_assert_msg(strcmp(shell_sees(shells[k],
			    (char *)b.data), want) == 0, "%s: %s is %s, not "
			    "%s", shells[k], (char *)b.data, shell_sees(
			    shells[k], (char *)b.data), want);
		}
	}
	b.off = b.len = 0;
	ck_assert_int_eq(repl_quote(&b, "lr=0.1,x:y/z@%^+", 16, 0), 0);
	ck_assert_int_eq(gp_buf_add(&b, "", 1), 0);
	ck_assert_str_eq((char *)b.data, "lr=0.1,x:y/z@%^+");	/* bare */
	gp_buf_release(&b);
}
END_TEST

/* The grid options as gpupool-run's defaults have them, with --header :
 * or not. */
static const struct grid_conf *
conf(int header)
{
	static struct opts	 o;

	memset(&o, 0, sizeof(o));
	popt_init(&o);
	o.gc.header = header;
	return &o.gc;
}

static const char *
expand(const char *tmpl, int ncol, const char *const *val,
    const char *const *name)
{
	static struct gp_buf	 b;
	struct repl_args	 a = { val, name, ncol, 7, 0, 0, 0, 0 };
	static char		 err[200];

	if (repl_expand(tmpl, &a, &b, err, sizeof(err)) < 0)
		return err;
	return (const char *)b.data;
}

START_TEST(replacement_strings)
{
	static const char *const v[] = { "/d/e/f.tar.gz", "h y/i.c", "a" };
	static const char *const n[] = { "lr", "dir", "x" };
	static const struct {
		const char	*tmpl;
		int		 ncol, named;
		const char	*want;
	} c[] = {
		{ "c {} {#} {%}", 2, 0, "c /d/e/f.tar.gz 'h y/i.c' 7 {%}" },
		{ "{1.}|{1/}|{1//}|{1/.}", 1, 0,
		  "/d/e/f.tar|f.tar.gz|/d/e|f.tar" },
		{ "{3//} {3.} {2/.}", 3, 0, ". a i" },
		{ "--lr={lr} {dir/} {x}", 3, 1, "--lr=/d/e/f.tar.gz i.c a" },
		{ "awk '{print}' ${HOME} {", 1, 0,
		  "awk '{print}' ${HOME} { /d/e/f.tar.gz" },
		{ "cmd", 2, 0, "cmd /d/e/f.tar.gz 'h y/i.c'" },
		{ "cmd {#}", 2, 0, "cmd 7" },
		{ "x {3}", 2, 0,
		  "'{3}' in the command, but a row has 2 arguments" },
	};
	size_t	 i;

	for (i = 0; i < sizeof(c) / sizeof(c[0]); i++)
		ck_assert_str_eq(expand(c[i].tmpl, c[i].ncol, v,
		    c[i].named ? n : NULL), c[i].want);
	ck_assert_ptr_nonnull(strstr(expand("x {0}", 2, v, NULL),
	    "count from 1"));
}
END_TEST

START_TEST(slot_filled_in_the_worker)
{
	char	*s = repl_slot("a {%} b{%}", 12);

	ck_assert_str_eq(s, "a 12 b12");
	free(s);
	s = repl_slot("echo '{''%}' 5", 3);
	ck_assert_str_eq(s, "echo '{''%}' 5");
	free(s);
}
END_TEST

START_TEST(rows_of_the_product)
{
	static const char *const argv[] = { "echo", "{2}{1}{3}", "{4}", ":::", "a",
	    "b", ":::", "x", "y", "z", ":::+", "1", "2", "3", ":::", "p",
	    "q" };
	static const char *const want[] = { "echo xa1 p", "echo xa1 q",
	    "echo ya2 p", "echo ya2 q", "echo za3 p", "echo za3 q",
	    "echo xb1 p", "echo xb1 q" };
	static const char *const named[] = { "echo", "{a}-{x}", ":::", "a",
	    "b", ":::", "x", "y", "z" };
	struct grid	 g;
	struct gp_buf	 b = { 0 };
	char		 err[200];
	size_t		 i;

	ck_assert_int_eq(grid_parse(&g, (char **)argv, 17, conf(0), err,
	    sizeof(err)), 0);
	ck_assert_int_eq(g.nrow, 12);
	ck_assert_int_eq(g.ncol, 4);
	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		ck_assert_int_eq(grid_line(&g, i + 1, &b, err, sizeof(err)),
		    0);
		ck_assert_str_eq((char *)b.data, want[i]);
	}
	grid_release(&g);
	/* --header : takes a and x as the names. */
	ck_assert_int_eq(grid_parse(&g, (char **)named, 9, conf(1), err,
	    sizeof(err)), 0);
	ck_assert_int_eq(g.nrow, 2);
	ck_assert_int_eq(grid_line(&g, 2, &b, err, sizeof(err)), 0);
	ck_assert_str_eq((char *)b.data, "echo b-z");
	grid_release(&g);
	gp_buf_release(&b);
	ck_assert_int_eq(grid_parse(&g, (char **)argv, 12, conf(0), err,
	    sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "source 3 (':::+') has 1 arguments but is "
	    "linked to one with 3");
}
END_TEST

/* grid_parse() finds the bad rows of a product without making it, and
 * names the first: a tag spoilt by {#} past 1024 GPUs (row 1025 of
 * 2000), one spoilt by a linked source's value (only the rows of the
 * groups before the ']' are tried); and the longest row, which takes
 * each group's longest value (no source's value is over 1 MiB alone). */
START_TEST(rows_checked_without_the_product)
{
	struct grid	 g;
	char		 err[200], *many[2010], *big, *av[12];
	int		 i;

	many[0] = "[gpus={#}]";
	many[1] = "x";
	many[2] = ":::";
	for (i = 0; i < 2000; i++)
		ck_assert_int_ge(asprintf(&many[3 + i], "v%d", i), 0);
	ck_assert_int_eq(grid_parse(&g, many, 2003, conf(0), err,
	    sizeof(err)), -EINVAL);
	ck_assert_msg(strncmp(err, "grid:1025: ", 11) == 0, "%s", err);
	ck_assert_int_eq(grid_parse(&g, many, 1027, conf(0), err,
	    sizeof(err)), 0);
	grid_release(&g);

	av[0] = "[mem={2}]";
	av[1] = "run {3}";
	av[2] = ":::";
	av[3] = "a";
	av[4] = "b";
	av[5] = ":::+";
	av[6] = "1G";
	av[7] = "2X";
	av[8] = ":::";
	av[9] = "p";
	av[10] = "q";
	ck_assert_int_eq(grid_parse(&g, av, 11, conf(0), err, sizeof(err)),
	    -EINVAL);
	ck_assert_msg(strncmp(err, "grid:3: bad value '2X'", 22) == 0, "%s",
	    err);
	av[7] = "2G";
	ck_assert_int_eq(grid_parse(&g, av, 11, conf(0), err, sizeof(err)),
	    0);
	grid_release(&g);

	/* 700 KiB in each source, 1.4 MiB together: row 2 x 2 = 4. */
	big = malloc(700 << 10);
	ck_assert_ptr_nonnull(big);
	memset(big, 'w', (700 << 10) - 1);
	big[(700 << 10) - 1] = '\0';
	av[0] = "echo";
	av[1] = ":::";
	av[2] = "a";
	av[3] = big;
	av[4] = ":::";
	av[5] = "b";
	av[6] = big;
	ck_assert_int_eq(grid_parse(&g, av, 7, conf(0), err, sizeof(err)),
	    -EINVAL);
	ck_assert_str_eq(err, "grid:4: task longer than 1 MiB");
	ck_assert_int_eq(grid_parse(&g, av, 6, conf(0), err, sizeof(err)), 0);
	grid_release(&g);
	free(big);
	for (i = 0; i < 2000; i++)
		free(many[3 + i]);
}
END_TEST

/* {//} is POSIX dirname, {/} what follows the last '/', {.} drops from
 * the last '.' after the last '/', {/.} both: what GNU parallel 20221122
 * gives for each (before: {//} of "a/b/" was "a/b", of "d/" "d"). An
 * empty part is an empty argument, ''. */
START_TEST(path_parts_as_parallel)
{
	static const struct {
		const char	*v, *want;
	} c[] = {
		{ "a/b/", "a|''|a/b/|''" }, { "d/", ".|''|d/|''" },
		{ "a", ".|a|a|a" }, { "../x", "..|x|../x|x" },
		{ "a.b/c", "a.b|c|a.b/c|c" }, { ".bashrc", ".|.bashrc|''|''" },
		{ "a/.b", "a|.b|a/|''" }, { "/x", "/|x|/x|x" },
		{ "/", "/|''|/|''" }, { "x.", ".|x.|x|x" },
		{ "a.tar.gz", ".|a.tar.gz|a.tar|a.tar" }, { "a//b", "a|b|a//b|b" },
		{ "a/b//", "a|''|a/b//|''" }, { "//x", "/|x|//x|x" },
		{ ".", ".|.|''|''" }, { "..", ".|..|.|." }, { "", ".|''|''|''" },
		{ "x/..", "x|..|x/.|." }, { "/..", "/|..|/.|." },
	};
	size_t	 i;

	for (i = 0; i < sizeof(c) / sizeof(c[0]); i++)
		ck_assert_msg(strcmp(expand("{//}|{/}|{.}|{/.}", 1, &c[i].v,
		    NULL), c[i].want) == 0, "'%s': '%s', not '%s'", c[i].v,
		    expand("{//}|{/}|{.}|{/.}", 1, &c[i].v, NULL), c[i].want);
}
END_TEST

/* What a task of several rows makes: -N's missing arguments expand to
 * nothing, {-N} counts from the last, -X repeats the word that holds {}
 * per value, --tagstring's text is unquoted with {%} filled, -q quotes
 * each of COMMAND's words and keeps its replacement strings. */
START_TEST(rows_of_a_task)
{
	static const char *const v[] = { "a b", "c" };
	struct repl_args	 a = { v, NULL, 1, 3, 2, 0, 0, 0 };
	struct gp_buf		 b = { 0 };
	char			 err[200], *w[] = { "printf", "<%s>", "x {} y",
				    "{1}" };

	ck_assert_int_eq(repl_expand("e {1}-{2}-{-1}", &a, &b, err,
	    sizeof(err)), 0);
	ck_assert_str_eq((char *)b.data, "e 'a b'--'a b'");
	a.ncol = 2;
	a.flags = REPL_CTX;
	ck_assert_int_eq(repl_expand("e p{}q {#}", &a, &b, err, sizeof(err)),
	    0);
	ck_assert_str_eq((char *)b.data, "e p'a b'q pcq 3");
	/* In a word it repeats, {1} and {-1} are still the task's (GNU
	 * parallel's -N2 echo x{}y{1} ::: a b: xaya xbya). */
	ck_assert_int_eq(repl_expand("e {}{1}{-1}", &a, &b, err, sizeof(err)),
	    0);
	ck_assert_str_eq((char *)b.data, "e 'a b''a b'c c'a b'c");
	a.flags = REPL_RAW;
	a.slot = 4;
	ck_assert_int_eq(repl_expand("{}/{%}/{1}", &a, &b, err, sizeof(err)),
	    0);
	ck_assert_str_eq((char *)b.data, "a b c/4/a b");
	a.flags = 0;
	ck_assert_int_eq(repl_expand("e {3}", &a, &b, err, sizeof(err)),
	    -EINVAL);
	ck_assert_int_eq(repl_quote_words(w, 4, &a, &b, err, sizeof(err)), 0);
	ck_assert_str_eq((char *)b.data, "printf '<%s>' 'x '{}' y' {1}");
	ck_assert_str_eq(sh_sees("'x ''a b'' y'"), "<x a b y>");
	ck_assert_int_eq(repl_expand("e {= $_ =}", &a, &b, err, sizeof(err)),
	    -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "Perl expression"));
	gp_buf_release(&b);
}
END_TEST

static Suite *
repl_suite(void)
{
	Suite	*s = suite_create("repl");
	TCase	*tc = tcase_create("repl");

	tcase_add_test(tc, quoting_is_one_inert_word);
	tcase_add_test(tc, replacement_strings);
	tcase_add_test(tc, slot_filled_in_the_worker);
	tcase_add_test(tc, path_parts_as_parallel);
	tcase_add_test(tc, rows_of_a_task);
	tcase_add_test(tc, rows_of_the_product);
	tcase_add_test(tc, rows_checked_without_the_product);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return gp_check_run(repl_suite());
}
