/*
 * main.c: gpupool-run's entry: the options (opts.c), the checks every
 * input gets before a task runs (tasks file, joblog, GPUs, results
 * directory), --show-gpus and --dry-run, then the run itself (run.c).
 * Exit status as GNU parallel: 0, the number of failed tasks up to 100,
 * 101, or 255 for any other error; 128 + signal after SIGINT, SIGTERM or
 * SIGHUP.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "master/master.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC	(1U << 2)
#endif

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

/* Standard output and error are files of the run (files.c) when they
 * are files: appended to the tasks file, a task's output would become
 * tasks (cat(1) refuses "input file is output file" for the same
 * reason). */
static int
streams_note(void)
{
	char	 err[512];

	if (files_note(FILE_STREAM, "standard output", NULL, STDOUT_FILENO,
	    err, sizeof(err)) < 0 || files_note(FILE_STREAM,
	    "standard error", NULL, STDERR_FILENO, err, sizeof(err)) < 0) {
		out_err("%s", err);
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

/* --show-gpus' last two columns for GPU g: memory in use (by others
 * first) and whether the run would use it. */
static void
show_state(struct gp_pool *pool, int g)
{
	struct gp_gpu_state	 st = { 0 };

	if (gp_pool_gpu_state(pool, g, &st) < 0 || !st.known) {
		/* Unknown to a working NVML counts as busy: say why. */
		printf("-\t%s%s\n", st.busy ? "busy: " : "unknown",
		    st.busy ? st.why : "");
		return;
	}
	printf("%.1f/%.1f GiB\t%s%s\n", (double)st.mem_foreign / (1u << 30),
	    (double)st.mem_total / (1u << 30), st.busy ? "busy: " : "",
	    st.why);
}

/* --show-gpus' claims: who holds each of the run's GPUs, host-wide, and
 * who waits for it, in order. */
static void
show_claims(const struct opts *o, struct gp_pool *pool)
{
	struct gp_claim_info	*ci;
	struct gp_worker_info	 wi;
	struct tm		 tm;
	time_t			 t;
	const char		*key;
	char			 err[300], when[16], mem[32], who[24];
	int			 n, i, g, w, seen = -1;

	if ((n = gp_claims_list(o->pool.claims, NULL, 0, err,
	    sizeof(err))) < 0) {
		printf("claims: cannot be read: %s\n", err);
		return;
	}
	if ((ci = calloc((size_t)n + 1, sizeof(*ci))) == NULL ||
	    (n = gp_claims_list(o->pool.claims, ci, n, err, sizeof(err))) < 0) {
		printf("claims: cannot be read: %s\n", n < 0 ? err :
		    strerror(ENOMEM));
		free(ci);
		return;
	}
	if (n == 0)
		printf("claims: none held\n");
	else
		printf("claims: %d held or waited for\n", n);
	for (w = 0; w < gp_pool_size(pool); w++) {
		if (gp_pool_info(pool, w, &wi) < 0 || wi.gpu == seen)
			continue;
		seen = g = wi.gpu;
		/* The key the library claims it by (hold.c). */
		key = wi.fake ? wi.visible : wi.uuid[0] ? wi.uuid :
		    wi.busid[0] ? wi.busid : wi.visible;
		for (i = 0; i < n; i++) {
			if (strcmp(ci[i].gpu, key) != 0)
				continue;
			t = (time_t)(ci[i].since_ms / 1000);
			if (localtime_r(&t, &tm) == NULL ||
			    strftime(when, sizeof(when), "%H:%M:%S", &tm) == 0)
				snprintf(when, sizeof(when), "?");
			fmt_mem(mem, sizeof(mem), ci[i].mem);
			if (ci[i].queue)
				snprintf(who, sizeof(who), "waiting #%d",
				    ci[i].queue);
			else
				snprintf(who, sizeof(who), "held");
			printf("GPU %d: %s by %s, pid %d, since %s, %s: %s\n",
			    g, who, ci[i].user, ci[i].pid, when, ci[i].mem ?
			    mem : "whole GPU", ci[i].cmd);
		}
	}
	free(ci);
}

static int
show_gpus(const struct opts *o)
{
	struct gp_worker_info	 wi, gi;
	struct gp_pool		*pool;
	const char		*why;
	char			 mem[32], numa[16];
	int			 n, g, w, any;

	if (run_pool_create(o, GP_POOL_PLAN_ONLY, &pool) < 0)
		return EXIT_FATAL;
	memset(&gi, 0, sizeof(gi));
	n = gp_pool_size(pool);
	printf("GPU\tID\tNAME\tMEMORY\tBUS ID\tNUMA\tCORES (per slot)\t"
	    "PLACEMENT\tIN USE\tSTATE\n");
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
		printf("\t%s\t", gi.where);
		show_state(pool, g);
	}
	if ((why = gp_pool_monitor(pool)) != NULL)
		printf("GPU use unknown (%s): every GPU counts as free%s\n",
		    why, (o->pool.flags & GP_POOL_GPUS_FREE) ? ", --gpus free "
		    "cannot tell busy ones" :
		    "");
	/* How what a task leaves running is found (reap.c): its
	 * worker is its subreaper. */
	printf("task cleanup: subreaper\n");
	show_claims(o, pool);
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
			pfd.fd = r->in.rd.fd;
			pfd.events = POLLIN;
			(void)poll(&pfd, 1, -1);
			continue;
		}
		if (rc != TASKS_LINE)
			break;
		if (feed_skip(r, r->in.seq, r->in.line + r->in.cmd)) {
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
		out_err("%s", r->in.err[0] ? r->in.err : strerror(-rc));
		return EXIT_FATAL;
	}
	if (!r->o->quiet)
		out_err("dry run: %lu tasks would run%s, none was started", n,
		    r->skipped ? " (the joblog has the others)" : "");
	return 0;
}

/* A grid's tasks: its rows, less those the joblog has done for
 * --resume; only those are expanded (for feed_skip()'s look at their
 * commands), so that the count takes no longer than the joblog is long,
 * however large the product. The count, or -errno with err. */
static long
grid_total(struct run *r, const struct grid *g, char *err, size_t errlen)
{
	struct gp_buf		 b = { 0 };
	struct task_need	 nd;
	unsigned long		 seq, done = 0;
	size_t			 i;
	int			 off, rc = 0;

	if (g->stream)
		return -1;	/* a pipe: counted as it comes */
	for (i = 0; i < r->jl.nent && rc == 0; i++) {
		if ((seq = r->jl.ent[i].seq) > g->nrow)
			break;
		if ((rc = grid_line(g, seq, &b, err, errlen)) < 0)
			break;
		off = need_parse((const char *)b.data, &nd, NULL, 0);
		done += feed_skip(r, seq, (const char *)b.data + (off > 0 ?
		    off : 0)) != 0;
	}
	gp_buf_release(&b);
	r->resumed = done;
	return rc < 0 ? rc : (long)(g->nrow - done);
}

/* tasks_scan()'s skip: feed_skip(), each task it skips counted. */
static int
scan_skip(void *arg, unsigned long seq, const char *cmd)
{
	struct run	*r = arg;
	int		 skip = feed_skip(r, seq, cmd);

	r->resumed += skip != 0;
	return skip;
}

/* --retry-failed's tasks: those whose last attempt the joblog records as
 * failed. */
static long
failed_total(const struct joblog *j)
{
	size_t	 i;
	long	 n = 0;

	for (i = 0; i < j->nent; i++)
		n += !j->ent[i].ok;
	return n;
}

/*
 * The workers' subreaper: what a task leaves running outside its
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
 * first, they are never touched.
 */
static int
subreaper_start(void)
{
	if (reap_keep_children() < 0) {
		out_err("out of memory");
		return -1;
	}
	(void)prctl(PR_SET_CHILD_SUBREAPER, 1);
	return 0;
}

/* Rank 0's inputs, checked before anything runs: the tasks file, the
 * joblog (locked, and read for --resume) and what the outputs would
 * overwrite. 0, or -1 after saying why. */
static int
inputs_open(struct run *r, const struct opts *o, struct grid *g)
{
	const char	*jl = o->joblog;
	char		 err[512];
	long		 n;

	/* Each file is checked against the others as it is noted (files.c):
	 * the inputs where they are opened, the outputs here, before any of
	 * them is written. */
	if (streams_note() < 0)
		return -1;
	if (o->grid_argv != NULL) {
		if (grid_parse(g, o->grid_argv, o->grid_argc, &o->gc, err,
		    sizeof(err)) < 0) {
			out_err("%s", err);
			return -1;
		}
		if (tasks_open_grid(&r->in, g) < 0) {
			out_err("out of memory");
			return -1;
		}
	} else if (o->retry_failed)
		(void)tasks_open_list(&r->in, &r->jl);
	else if (tasks_open(&r->in, o->file, err, sizeof(err)) < 0) {
		out_err("%s", err);
		return -1;
	}
	/* Locked before it is read or truncated, for the whole run. */
	if (jl != NULL && strcmp(jl, "-") != 0 && (joblog_lock(&r->jl, jl,
	    o->wait_lock, err, sizeof(err)) < 0 || files_note(FILE_OUT,
	    "joblog", jl, r->jl.fd, err, sizeof(err)) < 0)) {
		out_err("%s", err);
		return -1;
	}
	/* A picture that cannot be written fails now, not at the end; after
	 * the lock, which makes a new joblog, so that it is seen as the
	 * file the picture must not replace. */
	if (o->timeline != NULL && !o->dry_run && timeline_open(&r->tl,
	    o->timeline, err, sizeof(err)) < 0) {
		out_err("%s", err);
		return -1;
	}
	/* A tasks file is read while the run goes: no other run may make it
	 * its joblog meanwhile (its lock would fail), nor may this one start
	 * while another writes it. After this run's own joblog lock, which
	 * the check above keeps off the tasks file. Only a file opened here:
	 * standard input's description may be the shell's too. */
	if (r->in.rd.regular && strcmp(o->file, "-") != 0 && files_lock(r->in.rd.fd,
	    F_RDLCK, o->wait_lock, "tasks file", o->file, err,
	    sizeof(err)) < 0) {
		out_err("%s", err);
		return -1;
	}
	r->jl.keep_cmd = o->retry_failed;
	if ((o->resume || o->resume_failed || o->retry_failed) && jl != NULL &&
	    joblog_load(&r->jl, jl, err, sizeof(err)) < 0) {
		out_err("%s", err);
		return -1;
	}
	/* A file is checked whole before anything runs (which also gives
	 * the bar its total); a pipe is checked as it streams; a grid was
	 * checked by grid_parse(), and is counted without its product. */
	n = r->in.grid != NULL ? grid_total(r, r->in.grid, err, sizeof(err)) :
	    o->retry_failed ? failed_total(&r->jl) : r->in.rd.regular ?
	    tasks_scan(o->file, scan_skip, r, err, sizeof(err)) : -1;
	if (n < -1) {
		out_err("%s", err);
		return -1;
	}
	r->total = n;
	r->changed = 0;		/* counted again as the run skips them */
	/* GNU parallel counts every task before it starts one. */
	if (o->halt_pct && r->total < 0) {
		out_err("--halt %s: a percentage is of all the tasks, and a "
		    "pipe cannot be counted before the run (give a count, or "
		    "a file)", o->halt_arg);
		return -1;
	}
	return 0;
}

/* The first n GPUs of the pool, as --gpus names them: bus ids, else (a
 * fake GPU, or none seen) the index or the id given. A malloc()ed list,
 * or NULL: out of memory. */
static char *
first_gpus(struct gp_pool *pool, int n)
{
	struct gp_worker_info	 wi;
	struct gp_buf		 b = { 0 };
	char			 id[32];
	const char		*s;
	int			 w, g, rc = 0;

	for (g = 0; g < n && rc == 0; g++) {
		for (w = 0; w < gp_pool_size(pool); w++)
			if (gp_pool_info(pool, w, &wi) == 0 && wi.gpu == g)
				break;
		snprintf(id, sizeof(id), "%d", g);
		s = wi.busid[0] ? wi.busid : strncmp(wi.visible, "fake", 4) ==
		    0 ? id : wi.visible;
		if ((g > 0 && (rc = gp_buf_add(&b, ",", 1)) < 0) ||
		    (rc = gp_buf_add(&b, s, strlen(s))) < 0)
			break;
	}
	if (rc == 0 && (rc = gp_buf_add(&b, "", 1)) == 0)
		return (char *)b.data;
	gp_buf_release(&b);
	return NULL;
}

/* -j N: N slots in all, spread evenly over the G GPUs the run would
 * use, as Python's processes=N: N a multiple of G gives --per-gpu N / G;
 * N under G one slot on each of the first N GPUs (*gpus: the --gpus list
 * made for it, the caller frees it); anything else, or N other than
 * G x --per-gpu when that is given, is an error. 0, or -1 after saying
 * why. */
static int
run_jobs(struct opts *o, char **gpus)
{
	struct gp_pool	*pool;
	int		 n = o->jobs, g, per = o->per_gpu;

	*gpus = NULL;
	if (n == 0)
		return 0;
	o->per_gpu = 1;
	if (run_pool_create(o, GP_POOL_PLAN_ONLY, &pool) < 0)
		return -1;
	g = gp_pool_gpus(pool);
	o->per_gpu = per;
	if (o->per_gpu_set ? n == g * per : n % g == 0)
		o->per_gpu = n / g;
	else if (n < g && !o->per_gpu_set) {
		/* One slot on each of the first n, as Python's processes=. */
		if ((*gpus = first_gpus(pool, n)) == NULL) {
			out_err("out of memory");
			gp_pool_destroy(pool);
			return -1;
		}
		o->pool.gpus = *gpus;	/* --gpus free keeps its flag */
	} else {
		if (o->per_gpu_set)
			out_err("-j %d with --per-gpu %d: the run has %d GPU%s, "
			    "so %d slots (leave one of them out)", n, per, g,
			    g == 1 ? "" : "s", g * per);
		else
			out_err("-j %d: the run has %d GPU%s, and each gets the "
			    "same number of slots: ask for a multiple of %d, or "
			    "at most %d (one slot on each of the first ones), "
			    "or choose the GPUs with --gpus", n, g, g == 1 ? "" :
			    "s", g, g);
		gp_pool_destroy(pool);
		return -1;
	}
	gp_pool_destroy(pool);
	return 0;
}

/* The run itself, once the options are known; --dry-run too. */
/* The ranks of one run are one gpupool: on a machine they share, one
 * claimant (GPUPOOL_CLAIM_GROUP, from the job's name the launcher gives
 * each rank: PMIx, Open MPI, MPICH's Hydra, Slurm), as the pools of one
 * process are, rather than separate runs waiting for each other. */
static void
claim_group(void)
{
	static const char *const vars[] = { "PMIX_NAMESPACE",
	    "OMPI_MCA_ess_base_jobid", "PMI_KVSNAME" };
	const char	*job = NULL, *step;
	char		 g[256];
	size_t		 i;

	if ((job = getenv("GPUPOOL_CLAIM_GROUP")) != NULL && *job != '\0')
		return;
	for (i = 0, job = NULL; i < sizeof(vars) / sizeof(vars[0]) &&
	    (job == NULL || *job == '\0'); i++)
		job = getenv(vars[i]);
	if (job != NULL && *job != '\0')
		snprintf(g, sizeof(g), "ranks:%s", job);
	else if ((job = getenv("SLURM_JOB_ID")) != NULL && *job != '\0') {
		step = getenv("SLURM_STEP_ID");
		snprintf(g, sizeof(g), "ranks:%s.%s", job, step ? step : "");
	} else
		return;
	(void)setenv("GPUPOOL_CLAIM_GROUP", g, 1);
}

static int
run_main(const struct opts *o)
{
	struct run	 r;
	struct grid	 g = { 0 };
	char		 err[512];
	sigset_t	 set;
	int		 rc;

	if (subreaper_start() < 0)
		return EXIT_FATAL;
	run_init(&r, o);
	/* Under a launcher, ranks_init() forks the process that runs MPI
	 * (mpi_proc.c): here, with the signals the run reads from its
	 * signalfd blocked, which it keeps, and before the pool, so that it
	 * holds none of the workers' pipes and this process, which forks
	 * them, never has MPI's threads. Without ranks, --show-gpus and
	 * --dry-run keep the default ^C. */
	err[0] = '\0';
	if (signals_block(&set) < 0 ||
	    ranks_init(&r.rk, &set, err, sizeof(err)) < 0 ||
	    ranks_start(r.rk, err, sizeof(err)) < 0) {
		out_err("%s", err[0] ? err : strerror(errno));
		return run_ranks_end(&r, EXIT_FATAL);
	}
	if (r.rk == NULL)
		(void)sigprocmask(SIG_UNBLOCK, &set, NULL);
	if (ranks_size(r.rk) > 1)
		claim_group();
	if (ranks_rank(r.rk) > 0)
		/* Tasks come from rank 0, which alone reads FILE. */
		rc = o->dry_run ? 0 : run_tasks(&r);
	else if (inputs_open(&r, o, &g) < 0)
		rc = EXIT_FATAL;
	else
		rc = o->dry_run ? dry_run(&r) : run_tasks(&r);
	rc = timeline_end(r.tl, rc);
	r.tl = NULL;
	rc = run_ranks_end(&r, rc);
	run_release(&r);
	grid_release(&g);
	files_release();
	/* The pool's workers and the MPI process are reaped: any child
	 * left (but those we had at the start) is an orphan of a killed
	 * worker's task. None: one waitid(). */
	reap_leftovers();
	return rc;
}

int
main(int argc, char **argv)
{
	struct opts	 o;
	char		 err[512], *jgpus = NULL;
	int		 rc;

	fds_sanitize();
	/* An ignored SIGCHLD survives exec: the kernel would reap our
	 * workers and every crash would lose its status. */
	(void)signal(SIGCHLD, SIG_DFL);
	err[0] = '\0';
	ranks_handover(argv, err, sizeof(err));
	if (err[0] != '\0') {
		out_err("%s", err);
		return EXIT_FATAL;
	}
	if ((rc = opts_parse(argc, argv, &o)) == 2) {
		printf("%s %s (libgpupool %s, %s)\n", CLI_NAME, GP_VERSION,
		    GP_VERSION, ranks_build());
		rc = 0;
	} else if (rc != 0)
		rc = rc > 0 ? 0 : EXIT_FATAL;
	/* Each process shows its own node's GPUs, MPI or not: srun --label
	 * gpupool-run --show-gpus lists a whole allocation. */
	else if (o.from_joblog != NULL)
		rc = streams_note() < 0 ? EXIT_FATAL : timeline_from_joblog(&o);
	else if (run_jobs(&o, &jgpus) < 0)
		rc = EXIT_FATAL;
	else
		rc = o.show_gpus ? show_gpus(&o) : run_main(&o);
	free(jgpus);
	popt_release(&o);
	return rc;
}
