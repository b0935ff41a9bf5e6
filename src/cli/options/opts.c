/*
 * opts.c: gpupool-run's command line: the options, their values (counts,
 * durations such as 90s or 1.5h, the --halt policy) into a struct opts
 * (the --help text is usage.c's). Checks each value and what the
 * options need of each other, not the files they name (main.c does,
 * before anything runs); the pool's own options (--gpus, --busy-pct,
 * --nice, ...: the library's rows, gp_pool_opt_info()) go to the library
 * as text, the judge of them. Prints the errors it finds, git style, and
 * --help (main.c prints --version).
 * Where GNU parallel has the option (--joblog +FILE, --halt, --delay,
 * --timeout N%), its syntax and meaning are kept.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "options/opts.h"

/* Option values (counts: popt_count()). */
/*
 * "90", "90s", "1.5h", "15m", "500ms", "2d" to milliseconds: digits with
 * at most one '.', then a unit, and nothing else (strtod() alone would
 * take a sign, blanks, an exponent, hex, inf and nan). A duration over 0
 * is rounded up to a whole millisecond: 0.0001 must not become 0, which
 * means "none" to --timeout.
 */
static int
parse_duration(const char *s, uint64_t *ms)
{
	static const struct { const char *u; double ms; } units[] = {
		{ "", 1000 }, { "s", 1000 }, { "ms", 1 }, { "m", 60000 },
		{ "min", 60000 }, { "h", 3600000 }, { "d", 86400000 },
	};
	const char	*unit;
	char		*end;
	double		 v;
	uint64_t	 r;
	size_t		 i, n;

	n = strspn(s, "0123456789");
	if (s[n] == '.')
		n += 1 + strspn(s + n + 1, "0123456789");
	unit = s + n;
	if (n == 0 || (n == 1 && *s == '.'))
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end != unit)
		return -EINVAL;
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcmp(unit, units[i].u) == 0) {
			v *= units[i].ms;
			if (v > 365.0 * 86400000)
				return -ERANGE;
			r = (uint64_t)v;
			*ms = (double)r < v ? r + 1 : r;
			return 0;
		}
	return -EINVAL;
}

/* "200%", "150.5%": a percentage over 0 (at most 10^6), digits with at
 * most one '.', then '%'. */
static int
parse_pct(const char *s, double *pct)
{
	size_t	 n = strspn(s, "0123456789");
	char	*end;

	if (s[n] == '.')
		n += 1 + strspn(s + n + 1, "0123456789");
	if (n == 0 || (n == 1 && *s == '.') || strcmp(s + n, "%") != 0)
		return -EINVAL;
	*pct = strtod(s, &end);
	if (end != s + n || !(*pct > 0) || *pct > 1e6)
		return -EINVAL;
	return 0;
}

/*
 * GNU parallel's policies: never, or WHEN,WHY=N where WHEN is now (stop
 * the running tasks) or soon (let them finish), WHY fail, success or done
 * (either), and N a count (1 or more) or a percentage of all the tasks
 * ("10%", 1 to 100).
 */
static int
parse_halt(const char *s, struct opts *o)
{
	static const char *const why[] = {
		[HALT_ON_FAIL] = "fail=", [HALT_ON_SUCCESS] = "success=",
		[HALT_ON_DONE] = "done=",
	};
	char		 num[16];
	const char	*p;
	size_t		 i, n;
	long		 v;
	enum halt	 when;

	o->halt_arg = s;
	o->halt = HALT_NEVER;
	if (strcmp(s, "never") == 0)
		return 0;
	if (strncmp(s, "now,", 4) == 0) {
		when = HALT_NOW;
		p = s + 4;
	} else if (strncmp(s, "soon,", 5) == 0) {
		when = HALT_SOON;
		p = s + 5;
	} else
		return -EINVAL;
	for (i = 0; i < sizeof(why) / sizeof(why[0]); i++)
		if (strncmp(p, why[i], strlen(why[i])) == 0)
			break;
	if (i == sizeof(why) / sizeof(why[0]))
		return -EINVAL;
	p += strlen(why[i]);
	n = strlen(p);
	o->halt_pct = n > 0 && p[n - 1] == '%';
	n -= (size_t)o->halt_pct;
	if (n >= sizeof(num))
		return -EINVAL;
	memcpy(num, p, n);
	num[n] = '\0';
	if (popt_count(num, 1, o->halt_pct ? 100 : INT_MAX, &v) < 0)
		return -EINVAL;
	o->halt = when;
	o->halt_on = (enum halt_on)i;
	o->halt_fail = (int)v;
	return 0;
}

/* The codes of our long options; the pool's are OPT_POOL_BASE + their
 * row in gp_pool_opt_info() (their names too come from there). */
enum {
	OPT_FAKE = 256, OPT_PERGPU, OPT_JOBLOG, OPT_RESUME, OPT_RESUMEF,
	OPT_RETRIES, OPT_TIMEOUT, OPT_GRACE, OPT_HALT, OPT_RESULTS, OPT_BAR,
	OPT_DRYRUN, OPT_SHOW, OPT_TOPO, OPT_BUSIDS, OPT_RANKTMO, OPT_WAITLOCK,
	OPT_MEM, OPT_GPT, OPT_COLSEP, OPT_HEADER, OPT_DELAY, OPT_TIMELINE,
	OPT_FROMJL, OPT_LINEBUF, OPT_UNGROUP, OPT_TAG, OPT_QUIET, OPT_NOOP,
	OPT_THREADS,
	OPT_POOL_BASE = 1024,	/* above POPT_BASE's */
	OPT_POOL_MAX = 64,	/* rows gpupool-run has room for */
};

/* Ours and GNU parallel's; the pool's follow, from the library's rows
 * (with_pool()). */
static const struct option longopts[] = {
	{ "fake-gpus",		required_argument, NULL, OPT_FAKE },
	{ "per-gpu",		required_argument, NULL, OPT_PERGPU },
	{ "joblog",		required_argument, NULL, OPT_JOBLOG },
	{ "resume",		no_argument,	   NULL, OPT_RESUME },
	{ "resume-failed",	no_argument,	   NULL, OPT_RESUMEF },
	{ "wait-lock",		no_argument,	   NULL, OPT_WAITLOCK },
	{ "retries",		required_argument, NULL, OPT_RETRIES },
	{ "timeout",		required_argument, NULL, OPT_TIMEOUT },
	{ "grace",		required_argument, NULL, OPT_GRACE },
	{ "halt",		required_argument, NULL, OPT_HALT },
	{ "results",		required_argument, NULL, OPT_RESULTS },
	{ "bar",		no_argument,	   NULL, OPT_BAR },
	{ "dry-run",		no_argument,	   NULL, OPT_DRYRUN },
	{ "show-gpus",		no_argument,	   NULL, OPT_SHOW },
	{ "topology",		required_argument, NULL, OPT_TOPO },
	{ "fake-busids",	required_argument, NULL, OPT_BUSIDS },
	{ "rank-timeout",	required_argument, NULL, OPT_RANKTMO },
	{ "mem",		required_argument, NULL, OPT_MEM },
	{ "gpus-per-task",	required_argument, NULL, OPT_GPT },
	{ "colsep",		required_argument, NULL, OPT_COLSEP },
	{ "header",		required_argument, NULL, OPT_HEADER },
	{ "delay",		required_argument, NULL, OPT_DELAY },
	{ "timeline",		required_argument, NULL, OPT_TIMELINE },
	{ "from-joblog",	required_argument, NULL, OPT_FROMJL },
	{ "line-buffer",	no_argument,	   NULL, OPT_LINEBUF },
	{ "ungroup",		no_argument,	   NULL, OPT_UNGROUP },
	{ "tag",		no_argument,	   NULL, OPT_TAG },
	{ "threads",		required_argument, NULL, OPT_THREADS },
	{ "quiet",		no_argument,	   NULL, OPT_QUIET },
	/* GNU parallel's spellings of the same (popts.c for the rest). */
	{ "linebuffer",		no_argument,	   NULL, OPT_LINEBUF },
	{ "lb",			no_argument,	   NULL, OPT_LINEBUF },
	{ "dryrun",		no_argument,	   NULL, OPT_DRYRUN },
	{ "halt-on-error",	required_argument, NULL, OPT_HALT },
	{ "eta",		no_argument,	   NULL, OPT_BAR },
	{ "progress",		no_argument,	   NULL, OPT_BAR },
	{ "will-cite",		no_argument,	   NULL, OPT_NOOP },
	{ "group",		no_argument,	   NULL, OPT_NOOP },
	{ "jobs",		required_argument, NULL, 'j' },
	{ "max-procs",		required_argument, NULL, 'P' },
	{ "keep-order",		no_argument,	   NULL, 'k' },
	{ "max-replace-args",	required_argument, NULL, 'N' },
	{ "max-args",		required_argument, NULL, 'n' },
	{ "xargs",		no_argument,	   NULL, 'm' },
	{ "null",		no_argument,	   NULL, '0' },
	{ "delimiter",		required_argument, NULL, 'd' },
	{ "no-run-if-empty",	no_argument,	   NULL, 'r' },
	{ "arg-file",		required_argument, NULL, 'a' },
	{ "eof",		required_argument, NULL, 'E' },
	{ "max-chars",		required_argument, NULL, 's' },
	{ "arg-sep",		required_argument, NULL, POPT_ARGSEP },
	{ "arg-file-sep",	required_argument, NULL, POPT_FILESEP },
	{ "link",		no_argument,	   NULL, POPT_LINK },
	{ "xapply",		no_argument,	   NULL, POPT_LINK },
	{ "quote",		no_argument,	   NULL, 'q' },
	{ "verbose",		no_argument,	   NULL, POPT_VERBOSE },
	{ "tagstring",		required_argument, NULL, POPT_TAGSTRING },
	{ "shell",		required_argument, NULL, POPT_SHELL },
	{ "retry-failed",	no_argument,	   NULL, POPT_RETRYF },
	{ "version",		no_argument,	   NULL, 'V' },
	{ "help",		no_argument,	   NULL, 'h' },
	{ NULL, 0, NULL, 0 }
};

/* --threads cpus|no|N: each task's thread pools (OpenMP, BLAS, ...) as
 * many as its CPUs (0, the default), left alone (-1), or N. */
static int
opt_threads(const char *arg, struct opts *o)
{
	char	*end;
	long	 v;

	if (strcmp(arg, "cpus") == 0 || strcmp(arg, "no") == 0) {
		o->threads = arg[0] == 'c' ? 0 : -1;
		return 0;
	}
	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno || end == arg || *end != '\0' || v < 1 || v > 65536) {
		out_err("--threads: '%s' is not cpus, no or a count 1..65536",
		    arg);
		return -1;
	}
	o->threads = (int)v;
	return 0;
}

/* The counts: --fake-gpus, --per-gpu, --retries. 0, or -1 after an
 * error. */
static int
opt_count(int c, struct opts *o)
{
	long		 n;

	switch (c) {
	case OPT_FAKE:
		if (popt_count(optarg, 0, 1024, &n) < 0) {
			out_err("--fake-gpus: '%s' is not a GPU count "
			    "(0 to 1024)", optarg);
			return -1;
		}
		o->fake_gpus = (int)n;
		/* An option beats the environment: 0 is the real
		 * GPUs, whatever GPUPOOL_FAKE_GPUS says (the pool
		 * reads it when fake_gpus is 0). */
		if (n == 0)
			(void)unsetenv("GPUPOOL_FAKE_GPUS");
		break;
	case OPT_PERGPU:
		if (popt_count(optarg, 1, 1024, &n) < 0) {
			out_err("--per-gpu: '%s' is not a count of "
			    "tasks per GPU (1 to 1024)", optarg);
			return -1;
		}
		o->per_gpu = (int)n;
		o->per_gpu_set = 1;
		break;
	case OPT_RETRIES:
		if (popt_count(optarg, 0, 1000000, &n) < 0) {
			out_err("--retries: '%s' is not a number of "
			    "retries", optarg);
			return -1;
		}
		o->retries = (int)n;
		break;
	}
	return 0;
}

/* The durations and the policy: --timeout, --grace, --delay,
 * --rank-timeout, --halt. 0, or -1 after an error. */
static int
opt_time(int c, struct opts *o)
{
	switch (c) {
	case OPT_TIMEOUT:
		/* N%: of the median runtime, per task (the last one
		 * given wins). */
		o->timeout_pct = 0;
		o->timeout_ms = 0;
		if (strchr(optarg, '%') != NULL ? parse_pct(optarg,
		    &o->timeout_pct) < 0 : parse_duration(optarg,
		    &o->timeout_ms) < 0) {
			out_err("--timeout: bad duration '%s' (say 90, 90s, "
			    "15m, 2h, 1.5h or 200%%)", optarg);
			return -1;
		}
		break;
	case OPT_GRACE:
	case OPT_DELAY:
		if (parse_duration(optarg, c == OPT_GRACE ? &o->grace_ms :
		    &o->delay_ms) < 0) {
			out_err("%s: bad duration '%s' (say 90, 90s, "
			    "15m, 2h or 1.5h)", c == OPT_GRACE ? "--grace" :
			    "--delay", optarg);
			return -1;
		}
		break;
	case OPT_RANKTMO:
		if (parse_duration(optarg, &o->rank_timeout_ms) < 0 ||
		    o->rank_timeout_ms == 0) {
			out_err("--rank-timeout: bad duration '%s' (say "
			    "30s or 2m)", optarg);
			return -1;
		}
		break;
	case OPT_HALT:
		if (parse_halt(optarg, o) < 0) {
			out_err("--halt: bad policy '%s' (say never, "
			    "now,fail=N, soon,fail=N or now,fail=N%%; or "
			    "success=, done=)", optarg);
			return -1;
		}
		break;
	}
	return 0;
}

/* longopts, then one entry per pool option gpupool-run spells (a row
 * of gp_pool_opt_info() with a cli: its text goes to the library,
 * gp_pool_opts_set(), the judge of it), code OPT_POOL_BASE + its row. */
static const struct option *
with_pool(void)
{
	static struct option	 all[sizeof(longopts) / sizeof(longopts[0]) +
				    OPT_POOL_MAX];
	struct gp_opt_info	 in;
	size_t			 n = sizeof(longopts) / sizeof(longopts[0]) - 1;
	int			 i;

	if (all[0].name != NULL)
		return all;
	memcpy(all, longopts, n * sizeof(all[0]));
	for (i = 0; i < OPT_POOL_MAX && gp_pool_opt_info(i, &in) == 0; i++)
		if (in.cli != NULL)
			all[n++] = (struct option){ in.cli + 2, in.arg ?
			    required_argument : no_argument, NULL,
			    OPT_POOL_BASE + i };
	return all;
}

#define WORD(c)		(isalnum((unsigned char)(c)) || (c) == '_')

/* The library's reason, its options named as the command line names
 * them ("wait_free needs gpus free": "--wait-free needs --gpus free"). */
static void
reword_reason(const char *why, char *out, size_t len)
{
	struct gp_opt_info	 in;
	const char		*w = why;
	size_t			 at = 0, n = 0;
	int			 i, hit;

	while (*w != '\0' && at + 1 < len) {
		for (i = 0, hit = 0; !hit && gp_pool_opt_info(i, &in) == 0;
		    i++)
			hit = in.cli != NULL && (w == why || !WORD(w[-1])) &&
			    strncmp(w, in.name, n = strlen(in.name)) == 0 &&
			    !WORD(w[n]);
		if (!hit)
			out[at++] = *w++;
		else {
			at += (size_t)snprintf(out + at, len - at, "%s",
			    in.cli);
			w += n;
		}
	}
	out[at < len ? at : len - 1] = '\0';
}

/* Pool option row i (value NULL, an option without one: "1"). 0, or -1
 * after an error. */
static int
opt_pool(int i, const char *value, struct opts *o)
{
	struct gp_opt_info	 in;
	char			 err[256];

	if (gp_pool_opt_info(i, &in) < 0 || gp_pool_opts_set(&o->pool,
	    in.name, value ? value : "1", err, sizeof(err)) < 0) {
		out_err("%s: %s", in.cli, err);
		return -1;
	}
	return 0;
}

/* What the GPUs must be or give: --mem, --gpus-per-task. 0, or -1 after
 * an error. */
static int
opt_gpu(int c, struct opts *o)
{
	const char	*why;

	switch (c) {
	case OPT_MEM:
		if (gp_parse_size(optarg, strlen(optarg), &o->mem, &why) < 0) {
			out_err("--mem: bad size '%s': %s", optarg, why);
			return -1;
		}
		break;
	case OPT_GPT:
		if (need_gpus(optarg, strlen(optarg), &o->gpus_per_task,
		    &why) < 0) {
			out_err("--gpus-per-task: '%s' is %s", optarg, why);
			return -1;
		}
		break;
	}
	return 0;
}

/* The names: --joblog, --results, --topology, --fake-busids. 0,
 * or -1 after an error. */
static int
opt_name(int c, struct opts *o)
{
	switch (c) {
	case OPT_JOBLOG:
		if (*optarg == '\0' || strcmp(optarg, "+") == 0) {
			out_err("--joblog: empty file name");
			return -1;
		}
		/* +FILE: GNU parallel's "append". */
		o->joblog_append = optarg[0] == '+';
		o->joblog = optarg + o->joblog_append;
		break;
	case OPT_RESULTS:
		o->results = optarg;
		if (*optarg == '\0') {
			out_err("--results: empty directory name");
			return -1;
		}
		break;
	case OPT_TOPO:
		o->topology = optarg;
		break;
	case OPT_BUSIDS:
		o->fake_busids = optarg;
		break;
	case OPT_TIMELINE:
	case OPT_FROMJL:
		if (*optarg == '\0') {
			out_err("--%s: empty file name", c == OPT_TIMELINE ?
			    "timeline" : "from-joblog");
			return -1;
		}
		*(c == OPT_TIMELINE ? &o->timeline : &o->from_joblog) = optarg;
		break;
	}
	return 0;
}

/* The grid's: --colsep, --header. 0, or -1 after an error. */
static int
opt_grid(int c, struct opts *o)
{
	if (c == OPT_HEADER) {
		if (strcmp(optarg, ":") != 0) {
			out_err("--header: '%s' is not supported (say --header "
			    ":)", optarg);
			return -1;
		}
		o->gc.header = 1;
		return 0;
	}
	if (*optarg == '\0') {
		out_err("--colsep: empty separator");
		return -1;
	}
	o->gc.colsep = strcmp(optarg, "\\t") == 0 ? "\t" : optarg;
	return 0;
}

/* How task output is printed: --line-buffer, --ungroup (the one given;
 * both: an error), --tag (lines: not with --ungroup). 0, or -1 after an
 * error. */
static int
opt_output(int c, struct opts *o)
{
	if (c == OPT_TAG)
		o->tag = 1;
	else if (o->out_mode != OUT_GROUP && o->out_mode != (c == OPT_LINEBUF ?
	    OUT_LINE : OUT_UNGROUP)) {
		out_err("--line-buffer and --ungroup exclude each other");
		return -1;
	} else
		o->out_mode = c == OPT_LINEBUF ? OUT_LINE : OUT_UNGROUP;
	if (o->tag && o->out_mode == OUT_UNGROUP) {
		out_err("--tag needs lines: not with --ungroup (say "
		    "--line-buffer)");
		return -1;
	}
	return 0;
}

/* The options that only say yes. */
static void
opt_flag(int c, struct opts *o)
{
	int	*f = c == OPT_RESUME ? &o->resume : c == OPT_RESUMEF ?
		    &o->resume_failed : c == OPT_WAITLOCK ? &o->wait_lock :
		    c == OPT_BAR ? &o->bar : c == OPT_DRYRUN ? &o->dry_run :
		    c == OPT_SHOW ? &o->show_gpus : &o->quiet;

	*f = 1;
}

/* One option c, as getopt_long() returned it (opt: as written). Returns
 * 0 to go on, 1 to exit 0 (help), 2 to print the version and exit 0,
 * -1 after an error. */
static int
opt_set(int c, const char *opt, struct opts *o)
{
	/* The pool's (free, free:LIST: the last --gpus wins, as a whole). */
	if (c >= OPT_POOL_BASE)
		return opt_pool(c - OPT_POOL_BASE, optarg, o);
	/* GNU parallel's, as parallel means them; -t is its --verbose. */
	if (c >= POPT_BASE || (c > 0 && c < 128 && strchr("jPNnsEad0kmXrqvt",
	    c) != NULL))
		return popt_set(c == 't' ? POPT_VERBOSE : c, optarg, o);
	switch (c) {
	case OPT_FAKE:
	case OPT_PERGPU:
	case OPT_RETRIES:
		return opt_count(c, o);
	case OPT_TIMEOUT:
	case OPT_GRACE:
	case OPT_DELAY:
	case OPT_RANKTMO:
	case OPT_HALT:
		return opt_time(c, o);
	case OPT_JOBLOG:
	case OPT_RESULTS:
	case OPT_TOPO:
	case OPT_BUSIDS:
	case OPT_TIMELINE:
	case OPT_FROMJL:
		return opt_name(c, o);
	case OPT_MEM:
	case OPT_GPT:
		return opt_gpu(c, o);
	case OPT_COLSEP:
	case OPT_HEADER:
		return opt_grid(c, o);
	case OPT_RESUME: case OPT_RESUMEF: case OPT_WAITLOCK: case OPT_BAR:
	case OPT_DRYRUN: case OPT_SHOW: case OPT_QUIET:
		opt_flag(c, o);
		break;
	case OPT_THREADS:
		return opt_threads(optarg, o);
	case OPT_NOOP:		/* parallel's notice, grouping: ours anyway */
		break;
	case 'u':
		c = OPT_UNGROUP;
		/* FALLTHROUGH */
	case OPT_LINEBUF:
	case OPT_UNGROUP:
	case OPT_TAG:
		return opt_output(c, o);
	case 'V':		/* main.c prints it: the ranks' build */
		return 2;
	case 'h':
		usage_print(stdout);
		return 1;
	case ':':
		out_err("option '%s' needs a value (see %s --help)",
		    opt, CLI_NAME);
		return -1;
	default:
		if (optopt != 0 && !popt_refused((char[]){ '-', (char)optopt,
		    '\0' }))
			out_err("unknown option '-%c' (see %s --help)",
			    optopt, CLI_NAME);
		else if (optopt == 0 && !popt_refused(opt))
			out_err("unknown option '%s' (see %s --help)",
			    opt, CLI_NAME);
		return -1;
	}
	return 0;
}

/* What the options need of each other, and the tasks file. */
static int
opts_check(int argc, char **argv, struct opts *o)
{
	const char	*r = o->resume_failed ? "--resume-failed" : "--resume";
	char		 why[256], err[300];

	/* parallel resumes from --results DIR alone too: its exitval
	 * files say what ended, and how. */
	if ((o->resume || o->resume_failed) && o->joblog == NULL &&
	    o->results == NULL) {
		out_err("%s needs --joblog FILE or --results DIR", r);
		return -1;
	}
	if (o->retry_failed && (o->joblog == NULL || o->resume ||
	    o->resume_failed)) {
		out_err("--retry-failed needs --joblog FILE%s", o->joblog ?
		    " (and no --resume: it reruns only what failed)" : "");
		return -1;
	}
	/* The library's rules (--wait-free needs --gpus free), now. */
	if (gp_pool_opts_check(&o->pool, why, sizeof(why)) < 0) {
		reword_reason(why, err, sizeof(err));
		out_err("%s", err);
		return -1;
	}
	if (o->from_joblog != NULL) {
		if (o->timeline == NULL || optind < argc || o->file != NULL) {
			out_err("--from-joblog needs --timeline FILE.svg and "
			    "no tasks file");
			return -1;
		}
		return 0;
	}
	if (o->show_gpus) {
		if (optind < argc || o->file != NULL) {
			out_err("--show-gpus takes no tasks file");
			return -1;
		}
		return 0;
	}
	if (o->tag && o->out_mode == OUT_UNGROUP) {
		out_err("--tagstring needs lines: not with --ungroup (say "
		    "--line-buffer)");
		return -1;
	}
	if (o->keep_order && o->out_mode == OUT_UNGROUP) {
		out_err("-k keeps each task's output whole, in order: not with "
		    "--ungroup (-u)");
		return -1;
	}
	return popt_operands(argc, argv, optind, o) < 0 ? -1 : popt_shell(o);
}

/* --halt's older forms, as GNU parallel still takes them: 0, 1, 2, -1,
 * -2 and 1-99%. NULL: s is none. */
static const char *
halt_legacy(const char *s, char *buf, size_t len)
{
	static const char *const num[] = { "never", "soon,fail=1",
	    "now,fail=1" };
	size_t	 n = strlen(s);

	if (strcmp(s, "0") == 0 || strcmp(s, "1") == 0 || strcmp(s, "2") == 0)
		return num[*s - '0'];
	if (strcmp(s, "-1") == 0 || strcmp(s, "-2") == 0)
		return s[1] == '1' ? "soon,success=1" : "now,success=1";
	if (n >= 2 && n <= 3 && s[n - 1] == '%' && strspn(s, "0123456789") ==
	    n - 1) {
		snprintf(buf, len, "soon,fail=%s", s);
		return buf;
	}
	return NULL;
}

int
opts_parse(int argc, char **argv, struct opts *o)
{
	static char	 halt[32];
	const char	*h;
	int		 c, rc;

	memset(o, 0, sizeof(*o));
	o->per_gpu = 1;
	o->grace_ms = DEFAULT_GRACE_MS;
	o->rank_timeout_ms = DEFAULT_RANK_TIMEOUT_MS;
	popt_init(o);
	opterr = 0;
	/* Options end at the first word that is not one: COMMAND's words
	 * may look like options (echo -n ::: a), as in GNU parallel, and a
	 * tasks file takes none after it. */
	for (;;) {
		while ((c = getopt_long(argc, argv,
		    "+:hVj:P:kN:n:ms:0d:ra:E:qXvut", with_pool(), NULL)) != -1) {
			if (c == OPT_HALT && (h = halt_legacy(optarg, halt,
			    sizeof(halt))) != NULL)
				optarg = (char *)h;
			if ((rc = opt_set(c, argv[optind - 1], o)) != 0)
				return rc;
		}
		/* A tasks file may have options after it, as it always
		 * could: FILE --resume. */
		if (!popt_file(argv + optind, argc - optind, o))
			break;
		o->file = argv[optind++];
	}
	return opts_check(argc, argv, o);
}
