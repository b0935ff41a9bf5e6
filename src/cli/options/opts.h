/*
 * opts.h: gpupool-run's options, parsed and checked in the master
 * (opts.c, popts.c for GNU parallel's, usage.c for --help): struct opts,
 * which the run (master.h) reads. Worker code never includes it.
 */
#ifndef GP_OPTS_H
#define GP_OPTS_H

#include "parallel/parallel.h"

/* opts.c: the options, as parsed and checked. */
#define DEFAULT_GRACE_MS	5000
#define DEFAULT_RANK_TIMEOUT_MS	30000

enum halt { HALT_NEVER, HALT_SOON, HALT_NOW };
/* What --halt counts: tasks that failed, succeeded, or ended either way. */
enum halt_on { HALT_ON_FAIL, HALT_ON_SUCCESS, HALT_ON_DONE };
/* How task output is printed: a block per stream when the task ends,
 * line by line as it comes, or bytes as they come. */
enum out_mode { OUT_GROUP, OUT_LINE, OUT_UNGROUP };

struct opts {
	const char	*file;
	const char	*joblog;	/* without +FILE's '+' */
	int		 joblog_append;	/* it was +FILE: keep what it has */
	const char	*results;
	const char	*topology;
	const char	*fake_busids;
	int		 fake_gpus;
	int		 per_gpu;
	int		 retries;
	uint64_t	 timeout_ms;
	uint64_t	 grace_ms;
	enum halt	 halt;
	int		 halt_fail;	/* --halt's N: a count, or with halt_pct
					   a percentage */
	int		 resume;
	int		 resume_failed;
	int		 wait_lock;	/* wait for a locked joblog, DIR */
	int		 threads;	/* --threads: 0 cpus, -1 no, or N */
	int		 bar;
	int		 dry_run;
	int		 show_gpus;
	int		 quiet;
	uint64_t	 rank_timeout_ms;
	struct gp_pool_opts pool;	/* --gpus, --busy-pct, --wait-free as
					   the library set them from their
					   text (gp_pool_opts_set()); run.c
					   starts the pool's from it */
	uint64_t	 mem;		/* --mem, bytes per GPU; 0: none */
	int		 gpus_per_task;	/* --gpus-per-task; 0: not given (1) */
	/* COMMAND ::: ... (grid.c) rather than FILE. */
	char		**grid_argv;	/* COMMAND's first word on; NULL:
					   FILE */
	int		 grid_argc;
	struct grid_conf gc;		/* how its arguments are read and its
					   tasks made (popts.c) */
	/* GNU parallel's others (popts.c). */
	int		 jobs;		/* -j N: slots in all; 0: --per-gpu */
	int		 per_gpu_set;	/* --per-gpu was given */
	int		 keep_order;	/* -k */
	int		 verbose;	/* each task's command first: on stdout
					   (-v, 1) or stderr (--verbose, -t,
					   2), as parallel prints it */
	const char	*tagstring;	/* --tagstring STR */
	const char	*shell;		/* --shell PATH */
	char		 sh[SHELL_MAX];	/* the shell chosen: popt_shell() */
	int		 retry_failed;	/* --retry-failed: the joblog's failed
					   tasks are the tasks */
	/* GNU parallel's --delay, --halt ...=N% and --timeout N% (feed.c). */
	uint64_t	 delay_ms;	/* --delay: between two starts; 0: none */
	const char	*halt_arg;	/* --halt's POLICY as given */
	enum halt_on	 halt_on;
	int		 halt_pct;	/* halt_fail is N% of all the tasks */
	double		 timeout_pct;	/* --timeout N%: of the median runtime
					   of the tasks that succeeded; 0: no */
	const char	*timeline;	/* --timeline FILE.svg */
	const char	*from_joblog;	/* --from-joblog LOG: draw it only */
	enum out_mode	 out_mode;	/* --line-buffer, --ungroup */
	int		 tag;		/* --tag */
};

/* popts.c: GNU parallel's options, as parallel means them, those it
 * refuses, and what the words after the options are. The codes of its
 * long options without a short one (the others are their letter). */
enum popt {
	POPT_BASE = 512,
	POPT_ARGSEP = POPT_BASE, POPT_FILESEP, POPT_TAGSTRING, POPT_SHELL,
	POPT_LINK, POPT_RETRYF, POPT_VERBOSE,
};

/* A count: digits only (no sign, no blank), lo to hi, into *out. 0 or
 * -EINVAL. */
int	popt_count(const char *s, long lo, long hi, long *out);
/* Defaults: ::: and ::::, "\n", one row per task, -s's length. */
void	popt_init(struct opts *o);
/* Option c (a letter of -j -P -N -n -s -E -a -d -0 -k -m -X -r -q -v, or
 * an enum popt) with its value arg. 0, or -1 after saying why. */
int	popt_set(int c, const char *arg, struct opts *o);
/* A GNU parallel option gpupool-run does not take (opt as written, with
 * its dashes): 1 after saying why, or 0 when opt is none of them. */
int	popt_refused(const char *opt);
/* Whether w[0], the first of n words after options, is a tasks file
 * (- or a file that is not a program, with no ::: after it): options may
 * follow it. */
int	popt_file(char **w, int n, const struct opts *o);
/* argv[first..argc), the words after the options: a tasks file
 * (o->file), or COMMAND and its sources (o->grid_argv; with none, -a's
 * or standard input's arguments), or nothing (--retry-failed). 0, or -1
 * after saying why. */
int	popt_operands(int argc, char **argv, int first, struct opts *o);

/* The shell tasks run in (popts.c), as GNU parallel chooses it: --shell,
 * else $PARALLEL_SHELL, else the first of gpupool-run's (grand)parents
 * that is a shell (parallel's list: bash, zsh, tcsh, fish, ...), found on
 * $PATH, else $SHELL, else /bin/sh; into o->sh, and o->gc.shell points
 * to it. 0, or -1 after saying why (not a program, too long). */
int	popt_shell(struct opts *o);
/* Free what opts_parse() allocated (-a's list, -d's delimiter). */
void	popt_release(struct opts *o);

/* usage.c: print the --help text, the pool options' lines among it. */
void	usage_print(FILE *f);

/* Parse argv into *o (which points into argv). Prints what is wrong, or
 * --help. Returns 0 to go on, 1 to exit 0 (help), 2 for --version (the
 * caller prints it: the options know nothing of the ranks' build), -1
 * after an error. */
int	opts_parse(int argc, char **argv, struct opts *o);

#endif /* GP_OPTS_H */
