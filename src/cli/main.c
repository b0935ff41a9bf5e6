/*
 * main.c: gpupool-run's entry: options, the checks every input gets
 * before a task runs (tasks file, joblog, GPUs, results directory),
 * --show-gpus and --dry-run, then the run itself (run.c). Exit status
 * as GNU parallel: 0, the number of failed tasks up to 100, 101, or 255
 * for any other error; 128 + signal after SIGINT, SIGTERM or SIGHUP.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cli.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC	(1U << 2)
#endif

static const char usage_text[] =
"usage: gpupool-run [OPTIONS] FILE\n"
"       gpupool-run [OPTIONS] -          (tasks from standard input)\n"
"       gpupool-run --show-gpus [--gpus LIST]\n"
"\n"
"Runs each line of FILE, a shell command, on a free GPU slot: at most K\n"
"tasks at a time per GPU, each task seeing only its own GPU. Blank lines\n"
"and lines starting with # are skipped; a line ending in \\ continues on\n"
"the next. Tasks start as soon as their line is read, so a pipe works as\n"
"a queue.\n"
"\n"
"GPUs and slots:\n"
"  --gpus LIST          GPUs to use: indexes, UUIDs or PCI bus ids, comma\n"
"                       separated, or all (default: every GPU found)\n"
"  --per-gpu K          tasks at a time on each GPU (default 1)\n"
"  --fake-gpus N        N pretend GPUs (testing, machines without GPU);\n"
"                       also GPUPOOL_FAKE_GPUS=N; 0: the real GPUs only\n"
"  --show-gpus          print the GPUs and the cores their workers get\n"
"  --topology XML       place workers on this hwloc XML topology\n"
"  --fake-busids LIST   PCI bus ids of the fake GPUs, for --show-gpus\n"
"\n"
"Records and recovery:\n"
"  --joblog FILE        one line per attempt: GNU parallel's joblog plus a\n"
"                       GPU column; FILE is rewritten unless --resume,\n"
"                       --resume-failed or +FILE (append)\n"
"  --resume             skip tasks the joblog already records\n"
"  --resume-failed      skip only tasks it records as succeeded\n"
"  --wait-lock          wait while another run holds the joblog or DIR\n"
"                       (default: refuse, naming its pid)\n"
"  --retries N          run a failed task up to N more times (any GPU)\n"
"  --timeout DURATION   stop a task after DURATION: 90, 90s, 500ms, 15m,\n"
"                       1.5h, 2d (rounded up to the ms; 0: none)\n"
"  --grace DURATION     from SIGTERM to SIGKILL when stopping (default 5s)\n"
"  --halt POLICY        never (default); now,fail=N: after N failed tasks\n"
"                       stop running ones; soon,fail=N: let them finish\n"
"\n"
"Output:\n"
"  --results DIR        write DIR/SEQ/stdout, stderr and exitval instead\n"
"                       of printing each task's output when it ends\n"
"  --bar                progress bar on stderr (default on a terminal)\n"
"  --quiet              no progress bar, notices or summary\n"
"  --dry-run            print which task would run where; run nothing\n"
"  --version, --help\n"
"\n"
"Across nodes (with MPI):\n"
"  --rank-timeout DURATION  a rank silent this long is lost; its tasks\n"
"                       fail or, with --retries, run elsewhere (default 30s)\n"
"\n"
"Each task runs in a process group of its own, stdin /dev/null, with\n"
"  CUDA_VISIBLE_DEVICES  its GPU (the UUID when known)\n"
"  CUDA_DEVICE_ORDER     PCI_BUS_ID\n"
"  GPUPOOL_GPU           the GPU's index in this run, from 0\n"
"  GPUPOOL_SLOT          its slot, from 0 to GPUs x K - 1\n"
"  GPUPOOL_TASK          its number among FILE's tasks, from 1 (joblog Seq)\n"
"  GPUPOOL_ATTEMPT       1, then 2, ... when retried\n"
"  GPUPOOL_RANK          its MPI rank (0 on one machine)\n"
"\n"
"Exit status: 0 all succeeded; 1-100 the number of failed tasks; 101 more\n"
"than 100 failed; 130, 143 or 129 after SIGINT, SIGTERM or SIGHUP; 255\n"
"any other error (a write error on standard output too). A first ^C\n"
"stops the running tasks (SIGTERM, SIGKILL after the grace period), a\n"
"second kills them at once.\n"
"\n"
"Across nodes, in a build with MPI: mpirun -np R gpupool-run ... or,\n"
"under Slurm, srun --mpi=pmix gpupool-run ..., one rank per node, each\n"
"with its node's GPUs (or the CUDA_VISIBLE_DEVICES Slurm gave it). Rank 0\n"
"reads FILE, hands tasks to ranks with free slots, writes the one joblog\n"
"(each task's host in its Host column) and prints output and summary.\n"
"See docs/cluster.md for an sbatch script and what a lost node costs.\n"
"\n"
"Examples:\n"
"  # A hyper-parameter sweep, one run per GPU at a time, on record:\n"
"  for lr in 0.1 0.01 0.001; do for bs in 32 64; do\n"
"    echo \"python train.py --lr $lr --batch $bs --out runs/$lr-$bs\"\n"
"  done; done > sweep.txt\n"
"  gpupool-run --joblog sweep.log --retries 1 sweep.txt\n"
"\n"
"  # After a crash or ^C, run what the joblog does not record...\n"
"  gpupool-run --joblog sweep.log --resume sweep.txt\n"
"  # ...or also what failed:\n"
"  gpupool-run --joblog sweep.log --resume-failed sweep.txt\n"
"\n"
"  # Small jobs: 3 at a time on each of GPUs 0 and 1.\n"
"  gpupool-run --gpus 0,1 --per-gpu 3 evals.txt\n"
"\n"
"  # A queue: each line appended to queue.txt runs when a slot is free.\n"
"  tail -n +1 -f queue.txt | gpupool-run --joblog queue.log -\n"
"\n"
"See gpupool-run(1) for the joblog format, signals and more.\n";

/* Option values. */
static int
parse_int(const char *s, long lo, long hi, long *out)
{
	char	*end;
	long	 v;

	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end != '\0' || v < lo || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

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

static int
parse_halt(const char *s, struct opts *o)
{
	long	 n;

	if (strcmp(s, "never") == 0) {
		o->halt = HALT_NEVER;
		return 0;
	}
	if (strncmp(s, "now,fail=", 9) == 0 &&
	    parse_int(s + 9, 1, INT_MAX, &n) == 0)
		o->halt = HALT_NOW;
	else if (strncmp(s, "soon,fail=", 10) == 0 &&
	    parse_int(s + 10, 1, INT_MAX, &n) == 0)
		o->halt = HALT_SOON;
	else
		return -EINVAL;
	o->halt_fail = (int)n;
	return 0;
}

enum {
	OPT_GPUS = 256, OPT_FAKE, OPT_PERGPU, OPT_JOBLOG, OPT_RESUME,
	OPT_RESUMEF, OPT_RETRIES, OPT_TIMEOUT, OPT_GRACE, OPT_HALT,
	OPT_RESULTS, OPT_BAR, OPT_DRYRUN, OPT_SHOW, OPT_TOPO, OPT_BUSIDS,
	OPT_RANKTMO, OPT_WAITLOCK,
};

static const struct option longopts[] = {
	{ "gpus",		required_argument, NULL, OPT_GPUS },
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
	{ "quiet",		no_argument,	   NULL, 'q' },
	{ "version",		no_argument,	   NULL, 'V' },
	{ "help",		no_argument,	   NULL, 'h' },
	{ NULL, 0, NULL, 0 }
};

/* Returns 0 to go on, 1 to exit 0 (help, version), -1 after an error. */
static int
parse_args(int argc, char **argv, struct opts *o)
{
	const char	*opt;
	long		 n;
	int		 c;

	memset(o, 0, sizeof(*o));
	o->per_gpu = 1;
	o->grace_ms = DEFAULT_GRACE_MS;
	o->rank_timeout_ms = DEFAULT_RANK_TIMEOUT_MS;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hqV", longopts, NULL)) != -1) {
		opt = argv[optind - 1];
		switch (c) {
		case OPT_GPUS:
			o->gpus = optarg;
			if (*optarg == '\0') {
				cli_err("--gpus: empty GPU list");
				return -1;
			}
			break;
		case OPT_FAKE:
			if (parse_int(optarg, 0, 1024, &n) < 0) {
				cli_err("--fake-gpus: '%s' is not a GPU count "
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
			if (parse_int(optarg, 1, 1024, &n) < 0) {
				cli_err("--per-gpu: '%s' is not a count of "
				    "tasks per GPU (1 to 1024)", optarg);
				return -1;
			}
			o->per_gpu = (int)n;
			break;
		case OPT_JOBLOG:
			o->joblog = optarg;
			if (*optarg == '\0' || strcmp(optarg, "+") == 0) {
				cli_err("--joblog: empty file name");
				return -1;
			}
			break;
		case OPT_RESUME:
			o->resume = 1;
			break;
		case OPT_RESUMEF:
			o->resume_failed = 1;
			break;
		case OPT_WAITLOCK:
			o->wait_lock = 1;
			break;
		case OPT_RETRIES:
			if (parse_int(optarg, 0, 1000000, &n) < 0) {
				cli_err("--retries: '%s' is not a number of "
				    "retries", optarg);
				return -1;
			}
			o->retries = (int)n;
			break;
		case OPT_TIMEOUT:
		case OPT_GRACE:
			if (parse_duration(optarg, c == OPT_TIMEOUT ?
			    &o->timeout_ms : &o->grace_ms) < 0) {
				cli_err("%s: bad duration '%s' (say 90, 90s, "
				    "15m, 2h or 1.5h)", c == OPT_TIMEOUT ?
				    "--timeout" : "--grace", optarg);
				return -1;
			}
			break;
		case OPT_RANKTMO:
			if (parse_duration(optarg, &o->rank_timeout_ms) < 0 ||
			    o->rank_timeout_ms == 0) {
				cli_err("--rank-timeout: bad duration '%s' (say "
				    "30s or 2m)", optarg);
				return -1;
			}
			break;
		case OPT_HALT:
			if (parse_halt(optarg, o) < 0) {
				cli_err("--halt: bad policy '%s' (say never, "
				    "now,fail=N or soon,fail=N)", optarg);
				return -1;
			}
			break;
		case OPT_RESULTS:
			o->results = optarg;
			if (*optarg == '\0') {
				cli_err("--results: empty directory name");
				return -1;
			}
			break;
		case OPT_BAR:
			o->bar = 1;
			break;
		case OPT_DRYRUN:
			o->dry_run = 1;
			break;
		case OPT_SHOW:
			o->show_gpus = 1;
			break;
		case OPT_TOPO:
			o->topology = optarg;
			break;
		case OPT_BUSIDS:
			o->fake_busids = optarg;
			break;
		case 'q':
			o->quiet = 1;
			break;
		case 'V':
			printf("%s %s (libgpupool %s, %s)\n", CLI_NAME,
			    GP_VERSION, GP_VERSION, ranks_build());
			return 1;
		case 'h':
			fputs(usage_text, stdout);
			return 1;
		case ':':
			cli_err("option '%s' needs a value (see %s --help)",
			    opt, CLI_NAME);
			return -1;
		default:
			if (optopt != 0)
				cli_err("unknown option '-%c' (see %s --help)",
				    optopt, CLI_NAME);
			else
				cli_err("unknown option '%s' (see %s --help)",
				    opt, CLI_NAME);
			return -1;
		}
	}
	if ((o->resume || o->resume_failed) && o->joblog == NULL) {
		cli_err("%s needs --joblog FILE", o->resume_failed ?
		    "--resume-failed" : "--resume");
		return -1;
	}
	if (o->show_gpus) {
		if (optind < argc) {
			cli_err("--show-gpus takes no tasks file");
			return -1;
		}
		return 0;
	}
	if (optind == argc) {
		cli_err("no tasks file given (use - for standard input; "
		    "see %s --help)", CLI_NAME);
		return -1;
	}
	if (optind + 1 < argc) {
		cli_err("more than one tasks file given ('%s', '%s')",
		    argv[optind], argv[optind + 1]);
		return -1;
	}
	o->file = argv[optind];
	return 0;
}

/*
 * Fds 0-2 open, so that no pipe of ours can become one of them; every
 * other inherited fd close-on-exec, so that tasks see only 0, 1 and 2
 * (an inherited pipe held open by a task can hang whoever waits for its
 * EOF; workers are forked, not exec'ed, and keep what they need).
 */
static void
fds_sanitize(void)
{
	struct dirent	*de;
	DIR		*d;
	long		 fd;
	int		 i;

	for (i = 0; i < 3; i++)
		if (fcntl(i, F_GETFD) == -1 && errno == EBADF)
			(void)open("/dev/null", O_RDWR);
#ifdef SYS_close_range
	if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
		return;
#endif
	if ((d = opendir("/proc/self/fd")) == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		fd = strtol(de->d_name, NULL, 10);
		if (fd > 2 && fd != dirfd(d))
			(void)fcntl((int)fd, F_SETFD, FD_CLOEXEC);
	}
	closedir(d);
}

/* Whether path names the file st describes (path may not exist). */
static int
same_file(const char *path, const struct stat *st)
{
	struct stat	 ps;

	return stat(path, &ps) == 0 && ps.st_dev == st->st_dev &&
	    ps.st_ino == st->st_ino;
}

/* Whether path is, or would be, in DIR/<seq>/, whose files --results
 * replaces (rst: DIR). Symbolic links are followed. */
static int
in_results(const char *path, const struct stat *rst)
{
	struct stat	 st;
	char		*d, *real, *s;
	size_t		 i;
	int		 in = 0;

	/* The file, if it exists: a link to a file in DIR counts. */
	if ((real = realpath(path, NULL)) != NULL) {
		*strrchr(real, '/') = '\0';
	} else {
		if ((d = strdup(path)) == NULL)
			return 0;
		real = realpath(dirname(d), NULL);
		free(d);
	}
	if (real == NULL || (s = strrchr(real, '/')) == NULL) {
		free(real);
		return 0;
	}
	for (i = 1; s[i] >= '0' && s[i] <= '9'; i++)
		;
	if (i > 1 && s[i] == '\0' && s[1] != '0') {
		*s = '\0';
		in = stat(s == real ? "/" : real, &st) == 0 &&
		    st.st_dev == rst->st_dev && st.st_ino == rst->st_ino;
	}
	free(real);
	return in;
}

/*
 * Refuse outputs that would destroy the input or each other: a joblog
 * that is the tasks file (truncated, or read back as tasks for ever),
 * or a tasks file or joblog inside --results DIR/<seq>/.
 */
static int
check_outputs(const struct opts *o, const struct run *r, const char *jl)
{
	struct stat	 in, rst;
	int		 file = strcmp(o->file, "-") != 0;

	if (jl != NULL && strcmp(jl, "-") != 0 && fstat(r->in.fd, &in) == 0 &&
	    S_ISREG(in.st_mode) && same_file(jl, &in)) {
		cli_err("joblog '%s' is the tasks file %s%s%s: nothing was run",
		    jl, file ? "'" : "(", file ? o->file : "standard input",
		    file ? "'" : ")");
		return -1;
	}
	if (o->results == NULL || stat(o->results, &rst) == -1)
		return 0;	/* a new DIR holds nothing of ours */
	if (file && in_results(o->file, &rst)) {
		cli_err("--results '%s' would overwrite the tasks file '%s'",
		    o->results, o->file);
		return -1;
	}
	if (jl != NULL && strcmp(jl, "-") != 0 && in_results(jl, &rst)) {
		cli_err("--results '%s' would overwrite the joblog '%s'",
		    o->results, jl);
		return -1;
	}
	return 0;
}

static void
fmt_mem(char *buf, size_t len, uint64_t b)
{
	if (b == 0)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.1f GiB", (double)b / (1u << 30));
}

static int
show_gpus(const struct opts *o)
{
	struct gp_worker_info	 wi, gi;
	struct gp_pool		*pool;
	char			 mem[32], numa[16];
	int			 n, g, w, any;

	if (run_pool_create(o, GP_POOL_PLAN_ONLY, &pool) < 0)
		return EXIT_FATAL;
	memset(&gi, 0, sizeof(gi));
	n = gp_pool_size(pool);
	printf("GPU\tID\tNAME\tMEMORY\tBUS ID\tNUMA\tCORES (per slot)\t"
	    "PLACEMENT\n");
	for (g = 0; ; g++) {
		any = 0;
		for (w = 0; w < n; w++) {
			(void)gp_pool_info(pool, w, &wi);
			if (wi.gpu != g)
				continue;
			if (!any) {
				gi = wi;
				fmt_mem(mem, sizeof(mem), wi.mem_bytes);
				if (wi.numa >= 0)
					snprintf(numa, sizeof(numa), "%d",
					    wi.numa);
				else
					snprintf(numa, sizeof(numa), "-");
				printf("%d\t%s\t%s\t%s\t%s\t%s\t", g,
				    wi.uuid[0] ? wi.uuid : wi.visible,
				    wi.name[0] ? wi.name : "-", mem,
				    wi.busid[0] ? wi.busid : "-", numa);
			}
			printf("%s%s", any ? " | " : "",
			    wi.cpuset[0] ? wi.cpuset : "-");
			any = 1;
		}
		if (!any)
			break;
		printf("\t%s\n", gi.where);
	}
	/* How what a task leaves running is found (spawn.c): its
	 * worker is its subreaper. */
	printf("task cleanup: subreaper\n");
	gp_pool_destroy(pool);
	return fflush(stdout) == 0 ? 0 : EXIT_FATAL;
}

/* --dry-run: which task would go to which slot, in the order a pool
 * with every slot free would hand them out (slot 0, 1, ... round robin;
 * slots are numbered GPU first). */
static int
dry_run(struct run *r)
{
	struct gp_worker_info	 wi;
	struct gp_pool		*pool;
	struct pollfd		 pfd;
	unsigned long		 n = 0;
	int			 rc, nw;

	if (run_pool_create(r->o, GP_POOL_PLAN_ONLY, &pool) < 0)
		return EXIT_FATAL;
	nw = gp_pool_size(pool);
	printf("Seq\tGPU\tSlot\tCUDA_VISIBLE_DEVICES\tCommand\n");
	for (;;) {
		rc = tasks_next(&r->in);
		if (rc == TASKS_AGAIN) {
			pfd.fd = r->in.fd;
			pfd.events = POLLIN;
			(void)poll(&pfd, 1, -1);
			continue;
		}
		if (rc != TASKS_LINE)
			break;
		if (run_skip(r, r->in.seq, r->in.line)) {
			r->skipped++;
			continue;
		}
		(void)gp_pool_info(pool, (int)(n++ % (unsigned long)nw), &wi);
		printf("%lu\t%d\t%d\t%s\t%s\n", r->in.seq, wi.gpu, wi.worker,
		    wi.visible, r->in.line);
	}
	gp_pool_destroy(pool);
	if (fflush(stdout) != 0)
		rc = -EIO;
	if (rc < 0) {
		cli_err("%s", r->in.err[0] ? r->in.err : strerror(-rc));
		return EXIT_FATAL;
	}
	if (!r->o->quiet)
		cli_err("dry run: %lu tasks would run%s, none was started", n,
		    r->skipped ? " (the joblog has the others)" : "");
	return 0;
}

int
main(int argc, char **argv)
{
	struct opts	 o;
	struct run	 r;
	const char	*jl;
	char		 err[512];
	sigset_t	 set;
	long		 n;
	int		 rc;

	fds_sanitize();
	/* An ignored SIGCHLD survives exec: the kernel would reap our
	 * workers and every crash would lose its status. */
	(void)signal(SIGCHLD, SIG_DFL);
	err[0] = '\0';
	ranks_handover(argv, err, sizeof(err));
	if (err[0] != '\0') {
		cli_err("%s", err);
		return EXIT_FATAL;
	}
	if ((rc = parse_args(argc, argv, &o)) != 0)
		return rc > 0 ? 0 : EXIT_FATAL;
	/* Each process shows its own node's GPUs, MPI or not: srun --label
	 * gpupool-run --show-gpus lists a whole allocation. */
	if (o.show_gpus)
		return show_gpus(&o);
	/* The workers' subreaper: what a task leaves running outside its
	 * group becomes ours, not init's, when the worker that started it
	 * is SIGKILLed before it could end it (a second ^C, the pool's
	 * backstop, a task that kills its worker). Not inherited by the
	 * processes we fork. They are killed and reaped only at the end of
	 * main(): until the pool is destroyed, the library reaps workers
	 * by pid and may still kill a dead worker's task group, whose
	 * leader, now ours, must stay unreaped so that its id is not
	 * reused. Those adopted mid-run (a crash the respawn budget
	 * bounds) run on, or stay zombies, until then. The children we
	 * already have (inherited across exec) are not a task's: noted
	 * first, they are never touched. */
	if (keep_children() < 0) {
		cli_err("out of memory");
		return EXIT_FATAL;
	}
	(void)prctl(PR_SET_CHILD_SUBREAPER, 1);
	run_init(&r, &o);
	/* Under a launcher, ranks_init() forks the process that runs MPI
	 * (mpi.c): here, with the signals the run reads from its signalfd
	 * blocked, which it keeps, and before the pool, so that it holds
	 * none of the workers' pipes and this process, which forks them,
	 * never has MPI's threads. Without ranks, --show-gpus and --dry-run
	 * keep the default ^C. */
	err[0] = '\0';
	if (run_block_signals(&set) < 0 ||
	    ranks_init(&r.rk, &set, err, sizeof(err)) < 0 ||
	    ranks_start(r.rk, err, sizeof(err)) < 0) {
		cli_err("%s", err[0] ? err : strerror(errno));
		return run_ranks_end(&r, EXIT_FATAL);
	}
	if (r.rk == NULL)
		(void)sigprocmask(SIG_UNBLOCK, &set, NULL);
	if (ranks_rank(r.rk) > 0) {
		/* Tasks come from rank 0, which alone reads FILE. */
		rc = o.dry_run ? 0 : run_tasks(&r);
		goto out;
	}
	rc = EXIT_FATAL;
	if (tasks_open(&r.in, o.file, err, sizeof(err)) < 0) {
		cli_err("%s", err);
		goto out;
	}
	jl = o.joblog != NULL && o.joblog[0] == '+' ? o.joblog + 1 : o.joblog;
	if (check_outputs(&o, &r, jl) < 0)
		goto out;
	/* Locked before it is read or truncated, for the whole run. */
	if (jl != NULL && strcmp(jl, "-") != 0 && joblog_lock(&r.jl, jl,
	    o.wait_lock, err, sizeof(err)) < 0) {
		cli_err("%s", err);
		goto out;
	}
	if ((o.resume || o.resume_failed) &&
	    joblog_load(&r.jl, jl, err, sizeof(err)) < 0) {
		cli_err("%s", err);
		goto out;
	}
	/* A file is checked whole before anything runs (which also gives
	 * the bar its total); a pipe is checked as it streams. */
	if (r.in.regular) {
		if ((n = tasks_scan(o.file, run_skip, &r, err,
		    sizeof(err))) < 0) {
			cli_err("%s", err);
			goto out;
		}
		r.total = n;
		r.changed = 0;	/* counted again as the run skips them */
	}
	rc = o.dry_run ? dry_run(&r) : run_tasks(&r);
out:
	rc = run_ranks_end(&r, rc);
	run_release(&r);
	/* The pool's workers and the MPI process are reaped: any child
	 * left (but those we had at the start) is an orphan of a killed
	 * worker's task. None: one waitid(). */
	reap_leftovers();
	return rc;
}
