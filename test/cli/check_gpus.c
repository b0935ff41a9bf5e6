/*
 * check_gpus.c: gpupool-run end to end on shared GPUs. The machine is
 * the fake libnvidia-ml.so.1 (test/fake_nvml.c, through GPUPOOL_NVML),
 * which reads the state file each test writes to its temporary directory
 * and rewrites while a run goes on (GP_FAKE_NVML); fake GPU i is its NVML
 * device i, or, with --fake-busids, the device of the same bus id. Tasks
 * are the probe (PROBE record: when and where each ran) and small shell
 * lines that wait on files the test creates; the assertions are made on
 * the joblog, the probe's log, the output and the exit status. A run is
 * waited for by what it prints or writes, with generous deadlines.
 */
#include "check_main.h"
#include "cli_test.h"
#include "fake_seen.h"

#ifndef GP_FIXTURES
#error "build with -DGP_FIXTURES=path of test/fixtures"
#endif

/* Joblog times are rounded to the millisecond: intervals closer than
 * this do not overlap. */
#define SLACK		0.002
/* A shell loop a task waits in, for file %s, at most 60 s. */
#define WAIT_FILE	"i=0; while [ ! -e %s ] && [ $i -lt 1200 ]; do " \
			"sleep 0.05; i=$((i+1)); done"

/* The DGX-2's 16 GPUs (test/fixtures/README.md): 0-7 on socket 0. */
static const char *const dgx2_bus[] = { "0000:34:00.0", "0000:36:00.0",
    "0000:39:00.0", "0000:3b:00.0", "0000:57:00.0", "0000:59:00.0",
    "0000:5c:00.0", "0000:5e:00.0", "0000:b7:00.0", "0000:b9:00.0",
    "0000:bc:00.0", "0000:be:00.0", "0000:e0:00.0", "0000:e2:00.0",
    "0000:e5:00.0", "0000:e7:00.0" };

static char	*state;		/* the fake machine's file */

static double
wall_s(void)
{
	struct timespec	 ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Set the fake machine: the file is replaced whole (a temporary, then
 * rename()), as the monitor may be reading it. */
static void
machine(const char *text)
{
	char	*t;

	if (state == NULL) {
		state = pathf("nvml");
		ck_assert_int_eq(setenv("GP_FAKE_NVML", state, 1), 0);
	}
	t = pathf("nvml.tmp");
	puts_file(t, text);
	ck_assert_int_eq(rename(t, state), 0);
	free(t);
}

/* The fake's seen log (each snapshot's reading of the state file appends
 * the state's mark): set up for the runs of this test. */
static char *
seen_log(void)
{
	char	*p = pathf("seen");

	puts_file(p, "");
	ck_assert_int_eq(setenv("GP_FAKE_NVML_SEEN", p, 1), 0);
	return p;
}

/* A shell loop (at most 60 s) until n snapshots have read the state
 * marked mark (fake_seen.h says what the second and third mean: the
 * pool credits a task with no answer to a request made before it
 * started). */
static void
wait_mark_sh(char *buf, size_t len, const char *log, const char *mark, int n)
{
	snprintf(buf, len, "i=0; while [ $(grep -c '^%s$' %s) -lt %d ] && "
	    "[ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done", mark, log, n);
}

/* The files of a run a test starts and steers: its joblog, tasks, stdout
 * and stderr, and "go", which the shell loop wgo waits for. */
struct steer {
	char	*jl, *tasks, *o, *e, *go;
	char	 wgo[256];
};

static void
steer_make(struct steer *st)
{
	st->jl = pathf("joblog");
	st->tasks = pathf("tasks");
	st->o = pathf("out");
	st->e = pathf("err");
	st->go = pathf("go");
	snprintf(st->wgo, sizeof(st->wgo), WAIT_FILE, st->go);
}

/* A tasks file of n lines "PROBE record LOG ms", line i (from 1) led by
 * tag(i) where that is not NULL. */
static char *
probe_tasks(const char *log, int n, long ms, const char *(*tag)(int))
{
	char		*p = pathf("tasks");
	const char	*t;
	FILE		*f = fopen(p, "w");
	int		 i;

	ck_assert_ptr_nonnull(f);
	for (i = 1; i <= n; i++) {
		t = tag != NULL ? tag(i) : NULL;
		fprintf(f, "%s%s%s record %s %ld\n", t ? t : "", t ? " " : "",
		    PROBE, log, ms);
	}
	ck_assert_int_eq(fclose(f), 0);
	return p;
}

/* The joblog record of seq's last attempt (the joblog has each). */
static const struct jrec *
by_seq(const struct jrec *j, int n, long seq)
{
	const struct jrec	*found = NULL;
	int			 i;

	for (i = 0; i < n; i++)
		if (j[i].seq == seq)
			found = &j[i];
	ck_assert_msg(found != NULL, "task %ld not in the joblog", seq);
	return found;
}

static int
overlap(const struct jrec *a, const struct jrec *b)
{
	return a->start < b->start + b->runtime - SLACK &&
	    b->start < a->start + a->runtime - SLACK;
}

/* The fake GPU indices of a GPU column ("fake3,fake5"); their number. */
static int
gpu_list(const char *col, int *g, int max)
{
	const char	*p = col;
	int		 n = 0;

	while (*p != '\0') {
		ck_assert_msg(strncmp(p, "fake", 4) == 0, "GPU column '%s'",
		    col);
		ck_assert_int_lt(n, max);
		g[n++] = (int)strtol(p + 4, (char **)&p, 10);
		if (*p == ',')
			p++;
	}
	return n;
}

static int
shared_gpu(const struct jrec *a, const struct jrec *b)
{
	int	 ga[16], gb[16], na, nb, i, k;

	na = gpu_list(a->gpu, ga, 16);
	nb = gpu_list(b->gpu, gb, 16);
	for (i = 0; i < na; i++)
		for (k = 0; k < nb; k++)
			if (ga[i] == gb[k])
				return 1;
	return 0;
}

/* Most joblog intervals alive at once on GPU column gpu. */
static int
most_on(const struct jrec *j, int n, const char *gpu)
{
	int	 i, k, c, best = 0;

	for (i = 0; i < n; i++) {
		if (strcmp(j[i].gpu, gpu) != 0)
			continue;
		for (k = 0, c = 0; k < n; k++)
			c += strcmp(j[k].gpu, gpu) == 0 && j[k].start <=
			    j[i].start && j[i].start < j[k].start +
			    j[k].runtime - SLACK;
		if (c > best)
			best = c;
	}
	return best;
}

static int
count_str(const char *s, const char *what)
{
	int	 n = 0;

	while ((s = strstr(s, what)) != NULL) {
		n++;
		s += strlen(what);
	}
	return n;
}

/* The probe's record of each joblog line names the GPUs of its GPU
 * column (what CUDA_VISIBLE_DEVICES said inside the task). */
static void
tasks_saw_their_gpus(const char *log, const struct jrec *j, int nj)
{
	static struct rec	 r[64];
	int			 n, i, k;

	n = read_log(log, r, NULL, NULL);
	ck_assert_int_eq(n, nj);
	for (i = 0; i < nj; i++) {
		for (k = 0; k < n && r[k].seq != j[i].seq; k++)
			;
		ck_assert_int_lt(k, n);
		ck_assert_str_eq(r[k].cvd, j[i].gpu);
	}
}

/* Wait for cond, at most 60 s; past that, kill run pid's group (and
 * fail). */
static void
wait_run(pid_t pid, const char *what, int (*cond)(void *), void *arg)
{
	double	 t0 = now_s();

	while (!cond(arg)) {
		if (now_s() - t0 > 60) {
			kill(-pid, SIGKILL);
			(void)waitpid(pid, NULL, 0);
			ck_abort_msg("timed out waiting for %s", what);
		}
		nap(20);
	}
}

/* Change the machine to text while run pid (started at t0, with
 * stdout and stderr in "out" and "err") goes on, then wait for it to
 * end well: when the change was made (CLOCK_REALTIME). */
static double
change_then_finish(pid_t pid, double t0, const char *text, struct res *res)
{
	double	 when = wall_s();

	machine(text);
	finish(pid, t0, 90, pathf("out"), pathf("err"), res);
	ck_assert_msg(res->code == 0, "exit %d: %s", res->code, res->err);
	return when;
}

/* 1. --gpus free leaves out a GPU that a foreign process uses, and
 * --show-gpus says why. */
START_TEST(busy_gpu_is_skipped)
{
	struct jrec	 j[64];
	struct res	 res;
	char		*log, *jl, *tasks, *l;
	int		 n, i;

	tmp_make();
	machine("gpu - - 8G 0 0\ngpu - - 8G 3G 0\nproc 1 1 3G\n");
	log = pathf("log");
	jl = pathf("joblog");
	tasks = probe_tasks(log, 12, 100, NULL);
	RUN(&res, "--fake-gpus", "2", "--gpus", "free", "--joblog", jl,
	    "--quiet", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	n = read_joblog(jl, j, 64, NULL);
	ck_assert_int_eq(n, 12);
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(j[i].exitval, 0);
		ck_assert_str_eq(j[i].gpu, "fake0");
	}
	tasks_saw_their_gpus(log, j, n);

	RUN(&res, "--fake-gpus", "2", "--gpus", "free", "--show-gpus");
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_ptr_nonnull(l = strstr(res.out, "\n0\tfake0\t"));
	ck_assert_ptr_nonnull(strstr(l, "\t0.0/8.0 GiB\tfree\n"));
	ck_assert_ptr_nonnull(l = strstr(res.out, "\n1\tfake1\t"));
	ck_assert_ptr_nonnull(strstr(l, "\t3.0/8.0 GiB\tbusy: pid 1 is not "
	    "ours (3.0 GiB)\n"));
	tmp_remove();
}
END_TEST

/* A run that must not start: tasks.txt's two lines would create a
 * file (the second led by tag2), on fake GPUs (with --gpus free when
 * gfree); it exits 255, its error says want, and nothing ran or went
 * into the joblog. */
static void
refused(const char *fake, int gfree, const char *tag2, const char *want)
{
	struct res	 res;
	char		*jl, *ran, *tasks, line[512];

	jl = pathf("joblog");
	ran = pathf("ran");
	tasks = pathf("tasks.txt");
	snprintf(line, sizeof(line), "touch %s\n%s touch %s\n", ran, tag2,
	    ran);
	puts_file(tasks, line);
	run_in(-1, 60, &res, (const char *const []){ "--fake-gpus", fake,
	    "--joblog", jl, tasks, gfree ? "--gpus" : NULL, "free", NULL });
	ck_assert_int_eq(res.code, 255);
	ck_assert_msg(strstr(res.err, want) != NULL, "%s", res.err);
	ck_assert_int_eq(access(ran, F_OK), -1);
	ck_assert_int_eq(access(jl, F_OK), -1);
}

/* 2. Every GPU busy, no --wait-free: nothing runs, and the error says
 * why each GPU is not free, and what would wait. */
START_TEST(every_gpu_busy_fails)
{
	tmp_make();
	machine("gpu - - 8G 3G 0\ngpu - - 8G 5G 0\nproc 0 1 3G\n");
	refused("2", 1, "", "no free GPU: GPU 0 (fake0): pid 1 is not ours "
	    "(3.0 GiB); GPU 1 (fake1): others use 5.0 of 8.0 GiB (over 10%) "
	    "(--wait-free");
	tmp_remove();
}
END_TEST

/* 3. --wait-free: the tasks wait, and say so, while every GPU is busy;
 * each starts after the GPU frees, on it. */
START_TEST(wait_free_starts_when_the_gpu_frees)
{
	struct want_str	 w;
	struct jrec	 j[16];
	struct res	 res;
	char		*log, *jl, *tasks, *o, *e;
	double		 t0, freed;
	pid_t		 pid;
	int		 n, i;

	tmp_make();
	machine("gpu - - 8G 3G 0\ngpu - - 8G 3G 0\nproc 0 1 3G\n"
	    "proc 1 1 3G\n");
	log = pathf("log");
	jl = pathf("joblog");
	o = pathf("out");
	e = pathf("err");
	tasks = probe_tasks(log, 4, 50, NULL);
	t0 = now_s();
	pid = start(-1, o, e, (const char *const []){ "--fake-gpus", "2",
	    "--gpus", "free", "--wait-free", "--bar", "--joblog", jl, tasks,
	    NULL });
	w.path = e;
	w.s = ", waiting: every GPU is busy (GPU 0: pid 1 is not ours";
	wait_run(pid, "the bar to say it waits", have_str, &w);
	/* Not a synchronisation: nothing may have happened yet, and
	 * nothing may happen for a while (the monitor samples every
	 * 0.2 s while a task waits). */
	ck_assert_int_eq(access(log, F_OK), -1);
	nap(1500);
	ck_assert_int_eq(access(log, F_OK), -1);
	ck_assert_int_eq(read_joblog(jl, j, 16, NULL), 0);
	freed = change_then_finish(pid, t0, "gpu - - 8G 3G 0\n"
	    "gpu - - 8G 0 0\nproc 0 1 3G\n", &res);
	n = read_joblog(jl, j, 16, NULL);
	ck_assert_int_eq(n, 4);
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(j[i].exitval, 0);
		ck_assert_str_eq(j[i].gpu, "fake1");
		ck_assert_msg(j[i].start >= freed - SLACK, "task %ld started "
		    "%.3f s before its GPU freed", j[i].seq,
		    freed - j[i].start);
	}
	tasks_saw_their_gpus(log, j, n);
	tmp_remove();
}
END_TEST

static const char *
tag_big(int i)
{
	return i == 3 || i == 8 ? "[mem=6G]" : NULL;
}

/* 4. --per-gpu 4 --mem 3G on 8 GiB GPUs: two tasks at once on a GPU,
 * never three; a line that declares 6 GiB runs alone on its GPU. */
START_TEST(packing_by_declared_memory)
{
	struct jrec	 j[64];
	struct res	 res;
	char		*log, *jl, *tasks;
	int		 n, i, k, two;

	tmp_make();
	machine("gpu - - 8G 0 0\ngpu - - 8G 0 0\n");
	log = pathf("log");
	jl = pathf("joblog");
	tasks = probe_tasks(log, 12, 800, tag_big);
	RUN(&res, "--fake-gpus", "2", "--per-gpu", "4", "--mem", "3G",
	    "--joblog", jl, "--quiet", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	n = read_joblog(jl, j, 64, NULL);
	ck_assert_int_eq(n, 12);
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(j[i].exitval, 0);
		/* The tag is not part of the command. */
		ck_assert_ptr_null(strstr(j[i].cmd, "mem="));
	}
	ck_assert_int_le(most_on(j, n, "fake0"), 2);
	ck_assert_int_le(most_on(j, n, "fake1"), 2);
	two = most_on(j, n, "fake0") == 2 || most_on(j, n, "fake1") == 2;
	ck_assert_msg(two, "no GPU ever ran two tasks at once");
	for (i = 0; i < n; i++) {
		if (tag_big((int)j[i].seq) == NULL)
			continue;
		for (k = 0; k < n; k++)
			ck_assert_msg(k == i || strcmp(j[k].gpu, j[i].gpu) ||
			    !overlap(&j[i], &j[k]), "task %ld (6 GiB) shared "
			    "%s with task %ld", j[i].seq, j[i].gpu, j[k].seq);
	}
	tasks_saw_their_gpus(log, j, n);
	tmp_remove();
}
END_TEST

/* 5. A foreign process that takes GPU 1 mid-run: once the master has a
 * snapshot that shows it, at most the one task already handed to GPU
 * 1's slot may start there, while tasks keep starting on GPU 0. The
 * tasks after the eighth wait for the test's word, so that some start
 * after the master knows, however slow the machine. */
static int
taken_seen(void *arg)
{
	return fake_seen(arg, "taken") >= 2;
}

START_TEST(gpu_taken_mid_run_gets_no_new_task)
{
	struct want_lines wl;
	struct steer	 st;
	struct jrec	 j[64];
	struct res	 res;
	char		*log, *seen;
	double		 t0, known;
	pid_t		 pid;
	FILE		*f;
	int		 n, i, late = 0, after = 0;

	tmp_make();
	machine("gpu - - 8G 0 0\ngpu - - 8G 0 0\n");
	seen = seen_log();
	log = pathf("log");
	steer_make(&st);
	ck_assert_ptr_nonnull(f = fopen(st.tasks, "w"));
	for (i = 1; i <= 24; i++)
		fprintf(f, "%s%s%s record %s 100\n", i > 8 ? st.wgo : "",
		    i > 8 ? "; " : "", PROBE, log);
	ck_assert_int_eq(fclose(f), 0);
	t0 = now_s();
	pid = start(-1, st.o, st.e, (const char *const []){ "--fake-gpus", "2",
	    "--gpus", "free", "--joblog", st.jl, "--quiet", st.tasks, NULL });
	wl.path = st.jl;
	wl.n = 1 + 6;	/* the header, six tasks */
	wl.c = 0;
	wait_run(pid, "six tasks", have_lines, &wl);
	machine("mark taken\ngpu - - 8G 0 0\ngpu - - 8G 3G 0\nproc 1 1 3G\n");
	wait_run(pid, "the master to see GPU 1 taken", taken_seen, seen);
	known = wall_s();
	puts_file(st.go, "");
	finish(pid, t0, 90, st.o, st.e, &res);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	n = read_joblog(st.jl, j, 64, NULL);
	ck_assert_int_eq(n, 24);
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(j[i].exitval, 0);
		if (j[i].start <= known)
			continue;
		if (strcmp(j[i].gpu, "fake1") == 0)
			late++;
		else
			after++;
	}
	ck_assert_msg(late <= 1, "%d tasks started on the taken GPU after "
	    "the master saw it taken", late);
	ck_assert_int_ge(after, 1);
	tmp_remove();
}
END_TEST

/* 6. No NVML: every GPU is used as before, and --gpus free says once
 * that it cannot tell busy GPUs; a run without it says nothing. */
START_TEST(no_nvml_runs_as_before_and_says_so_once)
{
	struct jrec	 j[64];
	struct res	 res;
	char		*log, *jl, *tasks;
	int		 n, i, on1 = 0;

	tmp_make();
	ck_assert_int_eq(setenv("GPUPOOL_NVML", "/nonexistent/libnvidia-ml.so.1",
	    1), 0);
	log = pathf("log");
	jl = pathf("joblog");
	tasks = probe_tasks(log, 8, 300, NULL);
	RUN(&res, "--fake-gpus", "2", "--gpus", "free", "--joblog", jl, tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_msg(count_str(res.err, "no NVML") == 1 && strstr(res.err,
	    "every GPU counts as free") != NULL, "%s", res.err);
	n = read_joblog(jl, j, 64, NULL);
	ck_assert_int_eq(n, 8);
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(j[i].exitval, 0);
		ck_assert_int_eq(j[i].mem, -1);
		ck_assert_int_eq(j[i].util, -1);
		on1 += strcmp(j[i].gpu, "fake1") == 0;
	}
	ck_assert_msg(on1 > 0 && on1 < n, "%d of %d tasks on fake1", on1, n);
	ck_assert_ptr_null(strstr(res.err, "GPU:"));

	RUN(&res, "--fake-gpus", "2", "--quiet", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_str_eq(res.err, "");

	RUN(&res, "--fake-gpus", "2", "--gpus", "free", "--show-gpus");
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_ptr_nonnull(strstr(res.out, "\t-\tunknown\n"));
	ck_assert_msg(strstr(res.out, "GPU use unknown (no NVML: ") != NULL &&
	    strstr(res.out, "--gpus free cannot tell busy ones") != NULL, "%s",
	    res.out);
	tmp_remove();
}
END_TEST

/* 7. The GPU columns: a task whose process shows on the GPU (1 GiB at
 * 30 %, until the master has two snapshots of it asked for after it
 * started) gets GPUMem 1024 and GPUUtil 30: every snapshot of it says
 * so, and each is of one state of the machine; one that never shows
 * gets '-'; the summary names the peak and its task. */
START_TEST(joblog_has_each_tasks_gpu_memory)
{
	struct jrec	 j[8];
	struct res	 res;
	char		*log, *jl, *tasks, *t, *seen, line[2048], w[512];
	const struct jrec *a;

	tmp_make();
	machine("gpu - - 8G 0 0\n");
	seen = seen_log();
	log = pathf("log");
	jl = pathf("joblog");
	tasks = pathf("tasks");
	t = pathf("nvml.task");
	wait_mark_sh(w, sizeof(w), seen, "t1", 3);
	snprintf(line, sizeof(line), "printf 'mark t1\\ngpu - - 8G 1G 0\\n"
	    "proc %%s %%s 1G 30\\n' \"$GPUPOOL_GPU\" $$ > %s && mv %s %s && "
	    "%s; printf 'gpu - - 8G 0 0\\n' > %s && mv %s %s\n"
	    "%s record %s 1200\n", t, t, state, w, t, t, state, PROBE, log);
	puts_file(tasks, line);
	RUN(&res, "--fake-gpus", "1", "--joblog", jl, tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(fake_seen(seen, "t1"), 3);
	ck_assert_int_eq(read_joblog(jl, j, 8, NULL), 2);
	a = by_seq(j, 2, 1);
	ck_assert_int_eq(a->mem, 1024);
	ck_assert_int_eq(a->util, 30);
	a = by_seq(j, 2, 2);
	ck_assert_int_eq(a->mem, -1);
	ck_assert_int_eq(a->util, -1);
	ck_assert_msg(strstr(res.err, "GPU: peak memory 1.0 GiB (task 1), "
	    "mean utilisation 30%") != NULL, "%s", res.err);
	tmp_remove();
}
END_TEST

/* 7b. NVML figures out of range are unknown, never passed on: a process
 * at 250 % SM is no sample of its own (its GPU's 0 % is), and one said
 * to use 20 GiB of an 8 GiB GPU has no memory figure. */
START_TEST(out_of_range_figures_are_unknown)
{
	struct jrec	 j[8];
	struct res	 res;
	char		*jl, *tasks, *t, *seen, line[4096], w1[512], w2[512];

	tmp_make();
	machine("gpu - - 8G 0 0\n");
	seen = seen_log();
	jl = pathf("joblog");
	tasks = pathf("tasks");
	t = pathf("nvml.task");
	wait_mark_sh(w1, sizeof(w1), seen, "t1", 3);
	wait_mark_sh(w2, sizeof(w2), seen, "t2", 3);
	snprintf(line, sizeof(line),
	    "printf 'mark t1\\ngpu - - 8G 1G 0\\nproc 0 %%s 1G 250\\n' $$ > "
	    "%s && mv %s %s && %s; printf 'gpu - - 8G 0 0\\n' > %s && mv %s %s\n"
	    "printf 'mark t2\\ngpu - - 8G 1G 0\\nproc 0 %%s 20G 50\\n' $$ > "
	    "%s && mv %s %s && %s; printf 'gpu - - 8G 0 0\\n' > %s && mv %s %s\n",
	    t, t, state, w1, t, t, state, t, t, state, w2, t, t, state);
	puts_file(tasks, line);
	RUN(&res, "--fake-gpus", "1", "--joblog", jl, tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_int_eq(read_joblog(jl, j, 8, NULL), 2);
	ck_assert_int_eq(by_seq(j, 2, 1)->mem, 1024);
	ck_assert_int_eq(by_seq(j, 2, 1)->util, 0);
	ck_assert_int_eq(by_seq(j, 2, 2)->mem, -1);
	ck_assert_int_eq(by_seq(j, 2, 2)->util, 50);
	ck_assert_msg(strstr(res.err, "mean utilisation 25%") != NULL, "%s",
	    res.err);
	tmp_remove();
}
END_TEST

/* 7c. Absurd memory figures (a total of 1 byte, more used than the
 * total) fail no task: that sample's memory is unknown, and what the
 * last sane one said stands. Task 1 holds its slot until the master has
 * the absurd state; the tasks after it are placed while it lasts. */
static int
absurd_seen(void *arg)
{
	return fake_seen(arg, "absurd") >= 2;
}

/* A run of 1 + nrest tasks on one fake GPU, with option opt val: the
 * first holds its slot until the machine has changed to text and cond
 * holds, the rest (lines rest) come after; each of them must succeed.
 * What the run wrote to stderr is in res. */
static void
change_while_held(const char *rest, int nrest, const char *opt,
    const char *val, const char *text, int (*cond)(void *), void *arg,
    const char *what, struct res *res)
{
	struct steer	 st;
	struct jrec	 j[16];
	char		 line[1024];
	double		 t0;
	pid_t		 pid;
	int		 i;

	steer_make(&st);
	snprintf(line, sizeof(line), "%s\n%s", st.wgo, rest);
	puts_file(st.tasks, line);
	t0 = now_s();
	pid = start(-1, st.o, st.e, (const char *const []){ "--fake-gpus", "1",
	    opt, val, "--joblog", st.jl, st.tasks, NULL });
	nap(200);
	machine(text);
	wait_run(pid, what, cond, arg);
	puts_file(st.go, "");
	finish(pid, t0, 60, st.o, st.e, res);
	ck_assert_msg(res->code == 0, "exit %d: %s", res->code, res->err);
	ck_assert_int_eq(read_joblog(st.jl, j, 16, NULL), 1 + nrest);
	for (i = 0; i < 1 + nrest; i++)
		ck_assert_int_eq(j[i].exitval, 0);
}

START_TEST(absurd_memory_figures_fail_nothing)
{
	struct res	 res;
	char		*seen;

	tmp_make();
	machine("gpu - - 8G 0 0\n");
	seen = seen_log();
	change_while_held("true\ntrue\n[mem=6G] true\n", 3, "--mem", "1G",
	    "mark absurd\ngpu - - 1 5G 0\n", absurd_seen, seen,
	    "the master to have the absurd figures", &res);
	tmp_remove();
}
END_TEST

/* 7d. The busy summary counts each GPU a task held: a 2-GPU task on 2
 * GPUs keeps both as busy as each other. */
START_TEST(busy_summary_counts_every_gpu_of_a_task)
{
	struct res	 res;
	char		*tasks, *b;
	int		 g0 = -1, g1 = -1;

	tmp_make();
	machine("gpu - - 8G 0 0\ngpu - - 8G 0 0\n");
	tasks = pathf("tasks");
	puts_file(tasks, "[gpus=2] sleep 1.5\n");
	RUN(&res, "--fake-gpus", "2", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_ptr_nonnull(b = strstr(res.err, "busy: GPU 0 "));
	ck_assert_int_eq(sscanf(b, "busy: GPU 0 %d%%, GPU 1 %d%%", &g0, &g1),
	    2);
	ck_assert_msg(g0 > 0 && g1 == g0, "%s", res.err);
	tmp_remove();
}
END_TEST

/* One run on the DGX-2 with two GPUs per task (GPU 1 busy, with
 * --gpus free, when busy1): each task's two GPUs are on one socket,
 * and no GPU is in two pairs. */
static void
dgx2_pairs(int busy1)
{
	struct jrec	 j[64];
	struct res	 res;
	char		 text[2048], bus[256];
	char		*log, *jl, *tasks;
	int		 pair[16], g[4], n, i, k, off = 0, len = 0;

	for (i = 0; i < 16; i++) {
		off += snprintf(text + off, sizeof(text) - (size_t)off,
		    "gpu - %s 32G 0 0\n", dgx2_bus[i]);
		len += snprintf(bus + len, sizeof(bus) - (size_t)len, "%s%s",
		    i ? "," : "", dgx2_bus[i]);
		pair[i] = -1;
	}
	if (busy1)
		snprintf(text + off, sizeof(text) - (size_t)off,
		    "proc 1 1 3G\n");
	machine(text);
	log = pathf("log%d", busy1);
	jl = pathf("joblog%d", busy1);
	tasks = probe_tasks(log, 24, 100, NULL);
	run_in(-1, 60, &res, (const char *const []){ "--topology",
	    GP_FIXTURES "/nvidiaDGX2.xml", "--fake-gpus", "16",
	    "--fake-busids", bus, "--gpus-per-task", "2", "--joblog", jl,
	    "--quiet", tasks, busy1 ? "--gpus" : NULL, "free", NULL });
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	n = read_joblog(jl, j, 64, NULL);
	ck_assert_int_eq(n, 24);
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(j[i].exitval, 0);
		ck_assert_int_eq(gpu_list(j[i].gpu, g, 4), 2);
		ck_assert_msg(g[0] != g[1] && g[0] / 8 == g[1] / 8, "task %ld "
		    "on %s", j[i].seq, j[i].gpu);
		ck_assert_msg(!busy1 || (g[0] != 1 && g[1] != 1), "task %ld "
		    "on the busy GPU: %s", j[i].seq, j[i].gpu);
		for (k = 0; k < 2; k++) {
			ck_assert_msg(pair[g[k]] == -1 || pair[g[k]] ==
			    g[1 - k], "GPU %d in two pairs", g[k]);
			pair[g[k]] = g[1 - k];
		}
	}
	tasks_saw_their_gpus(log, j, n);
}

/* 8. The DGX-2 fixture, --gpus-per-task 2: both GPUs of a task on one
 * socket, also when a busy GPU leaves a socket an odd number (pairing
 * by index would then join GPU 7 and GPU 8). */
START_TEST(dgx2_pairs_stay_on_one_socket)
{
	tmp_make();
	dgx2_pairs(0);
	dgx2_pairs(1);
	tmp_remove();
}
END_TEST

static const char *
tag_four(int i)
{
	return i % 4 == 0 ? "[gpus=4]" : NULL;
}

/* 9. 4-GPU tasks among 1-GPU tasks on 6 GPUs: all run, each 4-GPU
 * task sees its four, and no GPU is in two running tasks. */
START_TEST(multi_gpu_tasks_hold_their_gpus_alone)
{
	struct jrec	 j[64];
	struct res	 res;
	char		*log, *jl, *tasks;
	int		 g[8], n, i, k, m;

	tmp_make();
	machine("gpu - - 8G 0 0\ngpu - - 8G 0 0\ngpu - - 8G 0 0\n"
	    "gpu - - 8G 0 0\ngpu - - 8G 0 0\ngpu - - 8G 0 0\n");
	log = pathf("log");
	jl = pathf("joblog");
	tasks = probe_tasks(log, 24, 300, tag_four);
	RUN(&res, "--fake-gpus", "6", "--joblog", jl, "--quiet", tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	n = read_joblog(jl, j, 64, NULL);
	ck_assert_int_eq(n, 24);
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(j[i].exitval, 0);
		m = gpu_list(j[i].gpu, g, 8);
		ck_assert_int_eq(m, tag_four((int)j[i].seq) ? 4 : 1);
		for (k = 1; k < m; k++)
			ck_assert_msg(g[k - 1] < g[k], "GPU column %s",
			    j[i].gpu);
		for (k = 0; k < i; k++)
			ck_assert_msg(!overlap(&j[i], &j[k]) ||
			    !shared_gpu(&j[i], &j[k]), "tasks %ld (%s) and %ld "
			    "(%s) shared a GPU", j[i].seq, j[i].gpu, j[k].seq,
			    j[k].gpu);
	}
	tasks_saw_their_gpus(log, j, n);
	tmp_remove();
}
END_TEST

/* 10. A task that runs out of GPU memory is retried declaring twice
 * its need: on a 2.5 GiB GPU, with a 1 GiB task still running, its
 * second attempt (2 GiB) waits for that task to end. */
/* An out-of-memory retry never asks more than the largest GPU has: a
 * task that declared 2 GiB of a 2.5 GiB GPU is retried with all of it,
 * not failed as too large. */
START_TEST(oom_retry_asks_at_most_a_whole_gpu)
{
	struct res	 res;
	struct jrec	 j[4];
	char		*tasks, *oom, line[1024];
	int		 n;

	tmp_make();
	machine("gpu - - 2560M 0 0\n");
	tasks = pathf("tasks");
	oom = pathf("oom");
	snprintf(line, sizeof(line), "[mem=2G] if [ -e %s ]; then exit 0; fi; "
	    "touch %s; echo 'RuntimeError: CUDA error: out of memory' >&2; "
	    "exit 1\n", oom, oom);
	puts_file(tasks, line);
	RUN(&res, "--fake-gpus", "1", "--retries", "1", "--joblog",
	    pathf("joblog"), tasks);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_msg(strstr(res.err, "its next attempt declares 2.5 GiB") !=
	    NULL, "%s", res.err);
	n = read_joblog(pathf("joblog"), j, 4, NULL);
	ck_assert_int_eq(n, 2);
	ck_assert_int_eq(j[1].exitval, 0);
	tmp_remove();
}
END_TEST

/* Issue 21, point 1, on a 16 GiB GPU of which 512 MiB are used by no
 * process of ours (a driver always holds some): an out-of-memory retry
 * asks at most what could be free, 15.5 GiB, and runs (it declared all
 * 16 GiB, which could never start, and the run waited for ever with
 * nothing said); a need no GPU can ever meet, 16 GiB, fails that task at
 * once, saying what could be had, and the rest run. */
START_TEST(no_need_waits_for_ever)
{
	struct res	 res;
	struct jrec	 j[4];
	char		*tasks, *jl;
	int		 i;

	tmp_make();
	machine("gpu - - 16G 512M 0\n");
	tasks = pathf("tasks");
	for (i = 0; i < 2; i++) {
		jl = pathf("joblog%d", i);
		puts_file(tasks, i == 0 ? "echo 'RuntimeError: CUDA out of "
		    "memory' >&2; exit 1\n" : "[mem=16G] true\ntrue\n");
		run_in(-1, 30, &res, (const char *const []){ "--fake-gpus", "1",
		    "--joblog", jl, tasks, i == 0 ? "--mem" : NULL, "10G",
		    "--retries", "1", NULL });
		ck_assert_msg(res.code == 1, "exit %d: %s", res.code, res.err);
		ck_assert_int_eq(read_joblog(jl, j, 4, NULL), 2);
		ck_assert_msg(i == 1 || strstr(res.err, "its next attempt "
		    "declares 15.5 GiB") != NULL, "%s", res.err);
	}
	ck_assert_int_eq(by_seq(j, 2, 2)->exitval, 0);
	ck_assert_msg(strstr(res.err, "task 1 (") != NULL && strstr(res.err,
	    "failed: it needs more than the GPUs here have: 1 at once, 16.0 "
	    "GiB on each; at most 15.5 GiB of a GPU can ever be free") != NULL,
	    "%s", res.err);
	tmp_remove();
}
END_TEST

/* No wait goes unsaid: without --bar, a task that has waited for a GPU
 * a while with nothing of ours running (only others can end it) is said
 * once, with why; it starts when the GPU frees. */
START_TEST(a_long_wait_is_said)
{
	struct want_str	 w;
	struct steer	 st;
	struct res	 res;
	double		 t0;
	pid_t		 pid;

	tmp_make();
	machine("gpu - - 8G 6G 0\nproc 0 1 6G\n");
	steer_make(&st);
	puts_file(st.tasks, "true\n");
	t0 = now_s();
	pid = start(-1, st.o, st.e, (const char *const []){ "--fake-gpus", "1",
	    "--mem", "4G", st.tasks, NULL });
	w.path = st.e;
	w.s = "nothing runs, and the next task has waited";
	wait_run(pid, "the wait to be said", have_str, &w);
	machine("gpu - - 8G 0 0\n");
	finish(pid, t0, 60, st.o, st.e, &res);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_msg(count_str(res.err, "has waited") == 1 && strstr(res.err,
	    "s for a GPU: needs 4.0 GiB; at most 2.0 GiB free on a GPU\n") !=
	    NULL, "%s", res.err);
	tmp_remove();
}
END_TEST

/* A monitor that dies mid-run: said once, and the run goes on as without
 * one (the tasks after it run). */
START_TEST(a_monitor_that_dies_mid_run_is_said)
{
	struct want_str	 w;
	struct res	 res;

	tmp_make();
	machine("gpu - - 8G 0 0\n");
	w.path = pathf("err");
	w.s = "the GPU monitor ended: GPU use is unknown from now on";
	change_while_held("[mem=1G] true\n[mem=1G] true\n", 2, "--gpus",
	    "free", "crash\n", have_str, &w, "the monitor's end to be said",
	    &res);
	ck_assert_msg(count_str(res.err, "GPU monitor") == 1, "%s", res.err);
	tmp_remove();
}
END_TEST

/* ^C while the next task waits for a GPU: the run ends at once, 130,
 * nothing ran and nothing is in the joblog, no process left. */
START_TEST(sigint_while_waiting_runs_nothing)
{
	struct want_str	 w;
	struct steer	 st;
	struct jrec	 j[4];
	struct res	 res;
	pid_t		 pid;

	tmp_make();
	machine("gpu - - 8G 6G 0\nproc 0 1 6G\n");
	steer_make(&st);
	puts_file(st.tasks, "true\ntrue\n");
	pid = start(-1, st.o, st.e, (const char *const []){ "--fake-gpus", "1",
	    "--mem", "4G", "--bar", "--joblog", st.jl, st.tasks, NULL });
	w.path = st.e;
	w.s = ", waiting: needs 4.0 GiB";
	wait_run(pid, "the bar to say it waits", have_str, &w);
	ck_assert_int_eq(kill(pid, SIGINT), 0);
	finish(pid, now_s(), 10, st.o, st.e, &res);
	ck_assert_msg(res.code == 130, "exit %d: %s", res.code, res.err);
	ck_assert_msg(strstr(res.err, "2 not started (got SIGINT)") != NULL,
	    "%s", res.err);
	ck_assert_int_eq(read_joblog(st.jl, j, 4, NULL), 0);
	ck_assert_int_eq(kill(-pid, 0), -1);
	tmp_remove();
}
END_TEST

START_TEST(oom_retry_declares_more)
{
	struct want_str	 w;
	struct jrec	 j[8];
	struct res	 res;
	char		*jl, *tasks, *o, *e, *oom, *t2, *go, line[2048];
	char		 w2[256], wgo[256];
	const struct jrec *two, *retry = NULL;
	double		 t0;
	pid_t		 pid;
	int		 n, i;

	tmp_make();
	machine("gpu - - 2560M 0 0\n");
	jl = pathf("joblog");
	tasks = pathf("tasks");
	o = pathf("out");
	e = pathf("err");
	oom = pathf("oom");
	t2 = pathf("t2");
	go = pathf("go");
	snprintf(w2, sizeof(w2), WAIT_FILE, t2);
	snprintf(wgo, sizeof(wgo), WAIT_FILE, go);
	/* Task 1 fails, once task 2 runs, with PyTorch's message; task 2
	 * runs until the test says go. */
	snprintf(line, sizeof(line), "[mem=1G] if [ -e %s ]; then exit 0; fi; "
	    "%s; touch %s; echo 'torch.OutOfMemoryError: CUDA out of memory. "
	    "Tried to allocate 2.00 GiB' >&2; exit 1\n"
	    "[mem=1G] touch %s; %s\n", oom, w2, oom, t2, wgo);
	puts_file(tasks, line);
	t0 = now_s();
	pid = start(-1, o, e, (const char *const []){ "--fake-gpus", "1",
	    "--per-gpu", "2", "--retries", "1", "--timeout", "90", "--bar",
	    "--joblog", jl, tasks, NULL });
	w.path = e;
	w.s = ", waiting: needs 2.0 GiB; at most 1.5 GiB free on a GPU";
	wait_run(pid, "the retry to wait for room", have_str, &w);
	puts_file(go, "");
	finish(pid, t0, 60, o, e, &res);
	ck_assert_msg(res.code == 0, "exit %d: %s", res.code, res.err);
	ck_assert_msg(strstr(res.err, "task 1 failed (exit status 1, GPU out "
	    "of memory); retrying") != NULL && strstr(res.err, "task 1 ran "
	    "out of GPU memory; its next attempt declares 2.0 GiB") != NULL &&
	    strstr(res.err, "GPU: 1 out of GPU memory") != NULL, "%s",
	    res.err);
	n = read_joblog(jl, j, 8, NULL);
	ck_assert_int_eq(n, 3);
	two = by_seq(j, n, 2);
	for (i = 0; i < n; i++) {
		ck_assert_ptr_null(strstr(j[i].cmd, "mem="));
		if (j[i].seq == 1 && j[i].exitval == 0)
			retry = &j[i];
	}
	ck_assert_ptr_nonnull(retry);
	ck_assert_int_eq(two->exitval, 0);
	ck_assert_msg(!overlap(retry, two), "the 2 GiB retry ran beside "
	    "the 1 GiB task on a 2.5 GiB GPU");
	tmp_remove();
}
END_TEST

/* 11. A bad tag: the file and line named, nothing run. */
START_TEST(bad_tag_runs_nothing)
{
	tmp_make();
	machine("gpu - - 8G 0 0\n");
	refused("1", 0, "[foo=1]", "tasks.txt:2: unknown key 'foo' in task "
	    "options (mem=SIZE, gpus=N)");
	tmp_remove();
}
END_TEST

/* 12. A task that no GPU here can hold fails at once, saying what it
 * needs, with no GPU figures (it never ran); the others run. */
START_TEST(too_big_task_says_what_it_needs)
{
	struct jrec	 j[8];
	struct res	 res;
	const struct jrec *a;
	char		*jl, *tasks;

	tmp_make();
	machine("gpu - - 8G 0 0\n");
	jl = pathf("joblog");
	tasks = pathf("tasks");
	puts_file(tasks, "[mem=20G] true\ntrue\n");
	RUN(&res, "--fake-gpus", "1", "--joblog", jl, tasks);
	ck_assert_int_eq(res.code, 1);
	ck_assert_msg(strstr(res.err, "failed: it needs more than the GPUs "
	    "here have: 1 at once, 20.0 GiB on each") != NULL && strstr(res.err,
	    "utilisation") == NULL, "%s", res.err);
	ck_assert_int_eq(read_joblog(jl, j, 8, NULL), 2);
	a = by_seq(j, 2, 1);
	ck_assert_int_eq(a->exitval, -1);
	ck_assert_int_eq(a->mem, -1);
	ck_assert_int_eq(a->util, -1);
	ck_assert_int_eq(by_seq(j, 2, 2)->exitval, 0);
	tmp_remove();
}
END_TEST

static Suite *
gpus_suite(void)
{
	Suite	*s = suite_create("gpus");
	TCase	*tc = tcase_create("shared");

	tcase_set_timeout(tc, 150);
	tcase_add_test(tc, busy_gpu_is_skipped);
	tcase_add_test(tc, every_gpu_busy_fails);
	tcase_add_test(tc, wait_free_starts_when_the_gpu_frees);
	tcase_add_test(tc, packing_by_declared_memory);
	tcase_add_test(tc, gpu_taken_mid_run_gets_no_new_task);
	tcase_add_test(tc, no_nvml_runs_as_before_and_says_so_once);
	tcase_add_test(tc, joblog_has_each_tasks_gpu_memory);
	tcase_add_test(tc, out_of_range_figures_are_unknown);
	tcase_add_test(tc, absurd_memory_figures_fail_nothing);
	tcase_add_test(tc, busy_summary_counts_every_gpu_of_a_task);
	tcase_add_test(tc, no_need_waits_for_ever);
	tcase_add_test(tc, a_long_wait_is_said);
	tcase_add_test(tc, sigint_while_waiting_runs_nothing);
	tcase_add_test(tc, a_monitor_that_dies_mid_run_is_said);
	tcase_add_test(tc, dgx2_pairs_stay_on_one_socket);
	tcase_add_test(tc, multi_gpu_tasks_hold_their_gpus_alone);
	tcase_add_test(tc, oom_retry_declares_more);
	tcase_add_test(tc, oom_retry_asks_at_most_a_whole_gpu);
	tcase_add_test(tc, bad_tag_runs_nothing);
	tcase_add_test(tc, too_big_task_says_what_it_needs);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return gp_check_run(gpus_suite());
}
