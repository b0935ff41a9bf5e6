/*
 * check_mon.c: the GPU monitor (src/mon.c) against the fake NVML
 * (test/fake_nvml.c, on $GPUPOOL_NVML from meson): what a snapshot says
 * about GPUs matched by UUID, bus id and index, whose processes are a
 * worker's and whose are foreign, what it says without NVML, and what a
 * dead monitor leaves: no zombie, no fd, and no NVML in the master. Each
 * test writes its own state file (GP_FAKE_NVML) and replaces it with
 * rename(), as a test of a running pool would.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "mon.h"
#include "check_main.h"
#include "fake_seen.h"

#define SAMPLE_MS	20000	/* a generous deadline on a loaded machine */
#define GiB		(1ULL << 30)

static char	 state[] = "/tmp/gp-nvml-XXXXXX";

/* Replace the fake's state file atomically with the lines given. */
static void
set_state(const char *fmt, ...)
{
	char	 tmp[64];
	va_list	 ap;
	FILE	*f;

	snprintf(tmp, sizeof(tmp), "%s.new", state);
	ck_assert_ptr_nonnull(f = fopen(tmp, "we"));
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(rename(tmp, state), 0);
}

static void
setup(void)
{
	int	 fd = mkstemp(state);

	ck_assert_int_ge(fd, 0);
	close(fd);
	setenv("GP_FAKE_NVML", state, 1);
}

static void
teardown(void)
{
	unlink(state);
	memcpy(state + strlen(state) - 6, "XXXXXX", 6);
}

/* n pool GPUs: ids[i] a "GPU-" UUID, a bus id, or "" for neither. */
static struct gp_gpu *
gpus(int n, const char **ids)
{
	struct gp_gpu	*g = calloc((size_t)n, sizeof(*g));
	int		 i;

	for (i = 0; i < n; i++) {
		if (strncmp(ids[i], "GPU-", 4) == 0)
			snprintf(g[i].uuid, sizeof(g[i].uuid), "%s", ids[i]);
		else
			snprintf(g[i].busid, sizeof(g[i].busid), "%s", ids[i]);
	}
	return g;
}

static void
start(struct gp_mon *m, int n, const char **ids)
{
	struct gp_gpu	*g = gpus(n, ids);
	char		 err[256] = "";

	ck_assert_msg(gp_mon_start(m, g, n, err, sizeof(err)) == 0, "%s", err);
	free(g);
	ck_assert_int_gt(m->pid, 0);
	ck_assert_int_ge(m->fd, 0);
}

/* A monitor of one idle 16 GiB GPU, GPU-aaaa. */
static void
start_one(struct gp_mon *m)
{
	const char	*ids[] = { "GPU-aaaa" };

	set_state("gpu GPU-aaaa - 16G 0 0\n");
	start(m, 1, ids);
}

/* pid is reaped: no zombie of it is left to wait for. */
static void
reaped(pid_t pid)
{
	int	 st;

	ck_assert_int_eq(waitpid(pid, &st, WNOHANG), -1);
	ck_assert_int_eq(errno, ECHILD);
}

static const struct gp_mon_snap *
sample(struct gp_mon *m, const pid_t *pids, int nw)
{
	int	 rc = gp_mon_sample(m, pids, nw, SAMPLE_MS);

	ck_assert_msg(rc == 0, "gp_mon_sample: %s", strerror(-rc));
	ck_assert_ptr_nonnull(m->snap);
	return m->snap;
}

/* The process entry for pid on gpu, or NULL. */
static const struct gp_mon_proc *
proc_of(const struct gp_mon_gpu *g, pid_t pid)
{
	int	 i;

	for (i = 0; i < g->nproc; i++)
		if (g->proc[i].pid == pid)
			return &g->proc[i];
	return NULL;
}

START_TEST(snapshot_matches_by_uuid_busid_and_index)
{
	const char		*ids[] = { "GPU-aaaa", "0000:b7:00.0", "",
				    "GPU-gone" };
	const struct gp_mon_snap *s;
	struct gp_mon		 m;

	set_state("# uuid bus total used util\n"
	    "gpu GPU-aaaa 00000000:17:00.0 16G 1G 10\n"
	    "gpu - 00000000:B7:00.0 32G 2G 20\n"
	    "gpu GPU-cccc - 8G 3G 30\n");
	start(&m, 4, ids);
	s = sample(&m, NULL, 0);
	ck_assert_msg(s->ok == 1, "%s", s->err);
	ck_assert_int_eq(s->ngpu, 4);
	ck_assert_int_eq(s->gpu[0].found, 1);
	ck_assert_uint_eq(s->gpu[0].total, 16 * GiB);
	ck_assert_uint_eq(s->gpu[0].used, 1 * GiB);
	ck_assert_int_eq(s->gpu[0].util, 10);
	/* cudart's and hwloc's "0000:b7:00.0" is NVML's 00000000:B7:00.0 */
	ck_assert_int_eq(s->gpu[1].found, 1);
	ck_assert_uint_eq(s->gpu[1].total, 32 * GiB);
	ck_assert_int_eq(s->gpu[1].util, 20);
	/* Neither UUID nor bus id: NVML's device 2 for pool GPU 2. */
	ck_assert_int_eq(s->gpu[2].found, 1);
	ck_assert_uint_eq(s->gpu[2].used, 3 * GiB);
	ck_assert_int_eq(s->gpu[2].util, 30);
	ck_assert_int_eq(s->gpu[3].found, 0);
	ck_assert_int_eq(s->gpu[3].util, -1);
	ck_assert_ptr_nonnull(strstr(s->gpu[3].err, "GPU-gone"));
	ck_assert_int_eq(s->gpu[0].procs_known, 1);
	ck_assert_int_eq(s->gpu[0].nproc, 0);
	gp_mon_stop(&m);
}
END_TEST

/* The highest pid plus one never names a process: not in /proc. */
static pid_t
no_such_pid(void)
{
	FILE	*f = fopen("/proc/sys/kernel/pid_max", "re");
	long	 v = 0;

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fscanf(f, "%ld", &v), 1);
	fclose(f);
	return (pid_t)v;
}

START_TEST(processes_belong_to_their_worker_or_are_foreign)
{
	const char		*ids[] = { "GPU-aaaa" };
	const struct gp_mon_snap *s;
	const struct gp_mon_proc *p;
	struct gp_mon		 m;
	pid_t			 kid, gone = no_such_pid(), pids[2];
	int			 hold[2], st;
	char			 c;

	ck_assert_int_eq(pipe(hold), 0);
	if ((kid = fork()) == 0) {
		close(hold[1]);
		(void)read(hold[0], &c, 1);	/* until the test is done */
		close(hold[0]);
		_exit(0);
	}
	ck_assert_int_gt(kid, 0);
	close(hold[0]);
	/* Worker 0 is none; worker 1 is this process. */
	pids[0] = 0;
	pids[1] = getpid();
	set_state("gpu GPU-aaaa - 16G 6G 50\n"
	    "proc 0 %d 1G 40\n"		/* a child of worker 1 */
	    "proc 0 %d 2G\n"		/* worker 1 itself, no SM sample */
	    "proc 0 1 %s\n"		/* init: foreign, memory unknown */
	    "proc 0 %d 3G 70\n",	/* another pid namespace's */
	    (int)kid, (int)getpid(), "-", (int)gone);
	start(&m, 1, ids);
	s = sample(&m, pids, 2);
	ck_assert_msg(s->ok == 1, "%s", s->err);
	ck_assert_int_eq(s->gpu[0].procs_known, 1);
	ck_assert_int_eq(s->gpu[0].nproc, 4);
	ck_assert_int_eq(s->gpu[0].more, 0);
	ck_assert_ptr_nonnull(p = proc_of(&s->gpu[0], kid));
	ck_assert_int_eq(p->worker, 1);
	ck_assert_uint_eq(p->mem, 1 * GiB);
	ck_assert_int_eq(p->sm, 40);
	ck_assert_ptr_nonnull(p = proc_of(&s->gpu[0], getpid()));
	ck_assert_int_eq(p->worker, 1);
	ck_assert_int_eq(p->sm, -1);
	ck_assert_ptr_nonnull(p = proc_of(&s->gpu[0], 1));
	ck_assert_int_eq(p->worker, -1);
	ck_assert_uint_eq(p->mem, UINT64_MAX);
	ck_assert_ptr_nonnull(p = proc_of(&s->gpu[0], gone));
	ck_assert_int_eq(p->worker, -1);
	/* The same processes without this worker's pid: all foreign. */
	s = sample(&m, NULL, 0);
	ck_assert_int_eq(proc_of(&s->gpu[0], kid)->worker, -1);
	gp_mon_stop(&m);
	close(hold[1]);
	ck_assert_int_eq(waitpid(kid, &st, 0), kid);
}
END_TEST

START_TEST(more_processes_than_reported_are_flagged)
{
	const char		*ids[] = { "" };
	const struct gp_mon_snap *s;
	struct gp_mon		 m;
	char			 buf[4096];
	int			 i, off;

	off = snprintf(buf, sizeof(buf), "gpu - - 1G 0 0\n");
	for (i = 0; i < GP_MON_PROCS + 8; i++)
		off += snprintf(buf + off, sizeof(buf) - (size_t)off,
		    "proc 0 %d 1M\n", 100000 + i);
	set_state("%s", buf);
	start(&m, 1, ids);
	s = sample(&m, NULL, 0);
	ck_assert_int_eq(s->gpu[0].nproc, GP_MON_PROCS);
	ck_assert_int_eq(s->gpu[0].more, 1);
	gp_mon_stop(&m);
}
END_TEST

START_TEST(noprocs_means_ownership_unknown)
{
	const char		*ids[] = { "GPU-aaaa", "GPU-bbbb" };
	const struct gp_mon_snap *s;
	struct gp_mon		 m;

	set_state("gpu GPU-aaaa - 16G 1G 0\ngpu GPU-bbbb - 16G 1G 0\n"
	    "proc 0 1 1G\nnoprocs 0\n");
	start(&m, 2, ids);
	s = sample(&m, NULL, 0);
	ck_assert_int_eq(s->ok, 1);
	ck_assert_int_eq(s->gpu[0].found, 1);
	ck_assert_int_eq(s->gpu[0].procs_known, 0);
	ck_assert_int_eq(s->gpu[0].nproc, 0);
	ck_assert_msg(strstr(s->gpu[0].err, "Not Supported") != NULL &&
	    strstr(s->gpu[0].err, "nvmlDeviceGetComputeRunningProcesses"),
	    "%s", s->gpu[0].err);
	ck_assert_int_eq(s->gpu[1].procs_known, 1);
	ck_assert_str_eq(s->gpu[1].err, "");
	gp_mon_stop(&m);
}
END_TEST

START_TEST(a_change_is_seen_by_the_next_snapshot)
{
	const char		*ids[] = { "GPU-aaaa" };
	const struct gp_mon_snap *s;
	struct gp_mon		 m;
	int64_t			 at;

	set_state("gpu GPU-aaaa - 16G 0 0\n");
	start(&m, 1, ids);
	s = sample(&m, NULL, 0);
	ck_assert_uint_eq(s->gpu[0].used, 0);
	ck_assert_int_eq(s->gpu[0].nproc, 0);
	at = s->at_ns;
	set_state("gpu GPU-aaaa - 16G 12G 95\nproc 0 1 12G 90\n");
	s = sample(&m, NULL, 0);
	ck_assert_uint_eq(s->gpu[0].used, 12 * GiB);
	ck_assert_int_eq(s->gpu[0].util, 95);
	ck_assert_int_eq(s->gpu[0].nproc, 1);
	ck_assert_int_eq(s->gpu[0].proc[0].pid, 1);
	ck_assert_int_eq(s->gpu[0].proc[0].sm, 90);
	ck_assert_int_ge(s->at_ns, at);
	gp_mon_stop(&m);
}
END_TEST

/* Without NVML every reply says why, and the monitor keeps answering. */
static void
no_nvml(const char *want1, const char *want2)
{
	const char		*ids[] = { "GPU-aaaa" };
	const struct gp_mon_snap *s;
	struct gp_mon		 m;
	int			 i;

	start(&m, 1, ids);
	for (i = 0; i < 2; i++) {
		s = sample(&m, NULL, 0);
		ck_assert_int_eq(s->ok, 0);
		ck_assert_int_eq(s->ngpu, 1);
		ck_assert_int_eq(s->gpu[0].found, 0);
		ck_assert_msg(strstr(s->err, want1) && strstr(s->err, want2),
		    "%s", s->err);
	}
	gp_mon_stop(&m);
}

START_TEST(a_missing_library_is_named)
{
	setenv("GPUPOOL_NVML", "/nonexistent/libnvidia-ml.so.1", 1);
	no_nvml("/nonexistent/libnvidia-ml.so.1", "No such file");
}
END_TEST

START_TEST(a_failed_init_is_named)
{
	set_state("initfail\ngpu GPU-aaaa - 16G 0 0\n");
	no_nvml(getenv("GPUPOOL_NVML"), "nvmlInit_v2: Driver Not Loaded");
}
END_TEST

/* Until fd reports EOF (or an error): the monitor's death, seen. */
static void
wait_hup(int fd)
{
	struct pollfd	 pfd = { fd, POLLIN, 0 };

	ck_assert_int_eq(poll(&pfd, 1, SAMPLE_MS), 1);
}

START_TEST(a_dead_monitor_fails_and_is_reaped)
{
	struct gp_mon	 m;
	pid_t		 pid;

	/* Seen by a read. */
	start_one(&m);
	sample(&m, NULL, 0);
	pid = m.pid;
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	wait_hup(m.fd);
	ck_assert_int_lt(gp_mon_read(&m), 0);
	ck_assert_int_eq(m.pid, 0);
	ck_assert_ptr_null(m.snap);
	reaped(pid);
	ck_assert_int_lt(gp_mon_request(&m, NULL, 0), 0);
	gp_mon_stop(&m);
	gp_mon_stop(&m);
	/* Seen by a request. */
	start_one(&m);
	pid = m.pid;
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	wait_hup(m.fd);
	ck_assert_int_lt(gp_mon_request(&m, NULL, 0), 0);
	reaped(pid);
	ck_assert_int_lt(gp_mon_sample(&m, NULL, 0, SAMPLE_MS), 0);
	gp_mon_stop(&m);
	/* And a live one, stopped: reaped too. */
	start_one(&m);
	pid = m.pid;
	gp_mon_stop(&m);
	reaped(pid);
}
END_TEST

/*
 * Put an impostor in m's monitor's place: a child that reads a request
 * and answers len bytes of a snapshot that says ngpu GPUs (len 0: it
 * answers nothing, then exits when asked). The real monitor is reaped
 * here; m keeps its buffers.
 */
static pid_t
impostor(struct gp_mon *m, size_t len, int ngpu)
{
	struct gp_mon_snap	*s = calloc(1, m->snaplen);
	char			 rq[64];
	int			 sv[2], st;
	pid_t			 pid;

	ck_assert_int_eq(kill(m->pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(m->pid, &st, 0), m->pid);
	close(m->fd);
	if (m->pidfd >= 0)
		close(m->pidfd);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	s->ok = 1;
	s->ngpu = ngpu;
	if ((pid = fork()) == 0) {
		close(sv[0]);
		if (read(sv[1], rq, sizeof(rq)) > 0 && len > 0)
			(void)gp_write_full(sv[1], s, len);
		_exit(0);
	}
	ck_assert_int_gt(pid, 0);
	close(sv[1]);
	free(s);
	ck_assert_int_eq(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
	m->fd = sv[0];
	m->pid = pid;
	m->pidfd = -1;
	return pid;
}

/* A short reply, a reply for another pool, or a reply unasked: the
 * monitor is gone, stopped and reaped. */
START_TEST(a_bad_reply_stops_the_monitor)
{
	struct gp_mon	 m;
	pid_t		 pid;

	start_one(&m);
	pid = impostor(&m, m.snaplen / 2, 1);
	ck_assert_int_eq(gp_mon_sample(&m, NULL, 0, SAMPLE_MS), -EPIPE);
	ck_assert_int_eq(m.pid, 0);
	reaped(pid);
	start_one(&m);
	pid = impostor(&m, m.snaplen, 2);
	ck_assert_int_eq(gp_mon_sample(&m, NULL, 0, SAMPLE_MS), -EPROTO);
	ck_assert_ptr_null(m.snap);
	reaped(pid);
	start_one(&m);
	pid = impostor(&m, m.snaplen, 1);
	ck_assert_int_eq(gp_write_full(m.fd, "x", 1), 0);	/* it answers */
	wait_hup(m.fd);
	ck_assert_int_eq(gp_mon_read(&m), -EPROTO);
	reaped(pid);
	gp_mon_stop(&m);
}
END_TEST

START_TEST(stop_is_safe_on_a_monitor_never_started)
{
	struct gp_mon	 m;

	memset(&m, 0, sizeof(m));
	m.fd = -1;
	gp_mon_stop(&m);
	gp_mon_stop(&m);
	ck_assert_int_eq(gp_mon_request(&m, NULL, 0), -EPIPE);
	ck_assert_int_eq(gp_mon_read(&m), -EPIPE);
}
END_TEST

START_TEST(one_request_at_a_time)
{
	const char	*ids[] = { "GPU-aaaa" };
	struct gp_mon	 m;
	pid_t		 me = getpid();

	set_state("gpu GPU-aaaa - 16G 0 0\nproc 0 %d 1G\n", (int)me);
	start(&m, 1, ids);
	ck_assert_int_eq(gp_mon_request(&m, NULL, 0), 0);
	ck_assert_int_eq(gp_mon_request(&m, NULL, 0), -EALREADY);
	/* The pending answer is waited out, then these pids are asked. */
	sample(&m, &me, 1);
	ck_assert_int_eq(m.snap->gpu[0].proc[0].worker, 0);
	ck_assert_int_eq(m.pending, 0);
	ck_assert_int_eq(gp_mon_read(&m), 0);
	gp_mon_stop(&m);
}
END_TEST

/* The monitor's fds: 0-2 (as inherited) and its channel, fd 3; above
 * the soft limit only valgrind's own, which the client cannot see. */
START_TEST(the_monitor_keeps_only_its_channel)
{
	struct dirent	*de;
	struct rlimit	 rl;
	struct gp_mon	 m;
	char		 path[64];
	DIR		*d;
	int		 fd, chan = 0;

	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	start_one(&m);
	sample(&m, NULL, 0);	/* NVML loaded by now */
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)m.pid);
	ck_assert_ptr_nonnull(d = opendir(path));
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		fd = atoi(de->d_name);
		if ((rlim_t)fd >= rl.rlim_cur)
			continue;
		ck_assert_msg(fd <= 3, "the monitor holds fd %d", fd);
		chan += fd == 3;
	}
	closedir(d);
	ck_assert_int_eq(chan, 1);
	gp_mon_stop(&m);
}
END_TEST

/* The fake logs each process that loads it: the monitor, never us. */
START_TEST(only_the_monitor_loads_nvml)
{
	char		 log[] = "/tmp/gp-nvmllog-XXXXXX", line[512];
	struct gp_mon	 m;
	FILE		*f;
	int		 fd = mkstemp(log), pid, n = 0;

	ck_assert_int_ge(fd, 0);
	close(fd);
	setenv("GP_FAKE_NVML_LOG", log, 1);
	start_one(&m);
	/* Lazily: not before the first request. */
	ck_assert_ptr_nonnull(f = fopen(log, "re"));
	ck_assert_int_eq(fscanf(f, "%d", &pid), EOF);
	fclose(f);
	ck_assert_int_eq(sample(&m, NULL, 0)->ok, 1);
	ck_assert_ptr_nonnull(f = fopen(log, "re"));
	while (fscanf(f, "%d", &pid) == 1) {
		ck_assert_int_eq(pid, m.pid);
		n++;
	}
	fclose(f);
	ck_assert_int_eq(n, 1);
	ck_assert_ptr_nonnull(f = fopen("/proc/self/maps", "re"));
	while (fgets(line, sizeof(line), f) != NULL)
		ck_assert_msg(strstr(line, "nvidia-ml") == NULL,
		    "the master maps %s", line);
	fclose(f);
	gp_mon_stop(&m);
	unsetenv("GP_FAKE_NVML_LOG");
	unlink(log);
}
END_TEST


/* A snapshot is one state of the machine: rewritten while the monitor
 * is between its reading of GPU 0 and its reading of the rest (held
 * there by the fake), every figure still comes from the first state,
 * the process list and the SM samples included. */
START_TEST(a_snapshot_is_one_state)
{
	const char		*ids[] = { "", "" };
	char			 log[] = "/tmp/gp-nvmlseen-XXXXXX", go[64];
	const struct gp_mon_snap *s;
	struct gp_mon		 m;
	int			 fd = mkstemp(log), i;

	ck_assert_int_ge(fd, 0);
	close(fd);
	snprintf(go, sizeof(go), "%s.go", log);
	setenv("GP_FAKE_NVML_SEEN", log, 1);
	set_state("gpu - - 16G 0 0\ngpu - - 16G 0 0\n");
	start(&m, 2, ids);
	sample(&m, NULL, 0);
	set_state("mark one\nhold %s\ngpu - - 16G 1G 10\n"
	    "gpu - - 16G 2G 20\nproc 0 1 1G 40\nproc 1 1 2G 50\n", go);
	ck_assert_int_eq(gp_mon_request(&m, NULL, 0), 0);
	for (i = 0; fake_seen(log, "one") == 0 && i < 2000; i++)
		usleep(5000);
	ck_assert_int_eq(fake_seen(log, "one"), 1);
	set_state("mark two\ngpu - - 16G 9G 90\ngpu - - 16G 8G 80\n"
	    "proc 0 1 9G 90\n");
	ck_assert_int_eq(close(open(go, O_WRONLY | O_CREAT | O_CLOEXEC,
	    0600)), 0);
	while ((i = gp_mon_read(&m)) == 0) {
		struct pollfd pfd = { m.fd, POLLIN, 0 };

		ck_assert_int_eq(poll(&pfd, 1, SAMPLE_MS), 1);
	}
	ck_assert_int_eq(i, 1);
	s = m.snap;
	for (i = 0; i < 2; i++) {
		ck_assert_uint_eq(s->gpu[i].used, (uint64_t)(i + 1) * GiB);
		ck_assert_int_eq(s->gpu[i].util, 10 * (i + 1));
		ck_assert_int_eq(s->gpu[i].nproc, 1);
		ck_assert_uint_eq(s->gpu[i].proc[0].mem, (uint64_t)(i + 1) *
		    GiB);
		ck_assert_int_eq(s->gpu[i].proc[0].sm, 40 + 10 * i);
	}
	/* And the next snapshot is the new state, read once. */
	s = sample(&m, NULL, 0);
	ck_assert_uint_eq(s->gpu[1].used, 8 * GiB);
	ck_assert_int_eq(s->gpu[1].nproc, 0);
	ck_assert_int_eq(fake_seen(log, "two"), 1);
	gp_mon_stop(&m);
	unsetenv("GP_FAKE_NVML_SEEN");
	unlink(go);
	unlink(log);
}
END_TEST

/* Wait up to SAMPLE_MS for our child pid to end: its wait status, or -1
 * when it still runs. */
static int
ends_within(pid_t pid)
{
	int	 st, i;

	for (i = 0; i < SAMPLE_MS / 10; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return st;
		usleep(10000);
	}
	return -1;
}

/* Invariant 32: the master is SIGKILLed while a process it forked (a
 * helper, never exec'd) holds the monitor's channel, so no EOF comes:
 * the monitor dies all the same (PR_SET_PDEATHSIG). This test is the
 * subreaper, so the orphans come to it and are seen to end. */
START_TEST(the_monitor_dies_with_its_master)
{
	pid_t	 master, pids[2];
	int	 p[2], st;

	ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	ck_assert_int_eq(pipe(p), 0);
	set_state("gpu GPU-aaaa - 16G 0 0\n");
	if ((master = fork()) == 0) {
		struct gp_mon	 m;

		close(p[0]);
		start_one(&m);
		sample(&m, NULL, 0);	/* it has NVML, and waits for more */
		pids[0] = m.pid;
		if ((pids[1] = fork()) == 0) {
			close(p[1]);
			pause();	/* holding m.fd */
			_exit(0);
		}
		if (write(p[1], pids, sizeof(pids)) != sizeof(pids))
			_exit(1);
		pause();
		_exit(0);
	}
	ck_assert_int_gt(master, 0);
	close(p[1]);
	ck_assert_int_eq(read(p[0], pids, sizeof(pids)), sizeof(pids));
	close(p[0]);
	ck_assert_int_eq(kill(master, SIGKILL), 0);
	ck_assert_int_eq(waitpid(master, &st, 0), master);
	st = ends_within(pids[0]);
	(void)kill(pids[1], SIGKILL);
	ck_assert_int_eq(waitpid(pids[1], NULL, 0), pids[1]);
	ck_assert_msg(st != -1, "the monitor outlived its master");
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the "
	    "monitor ended with status %#x, not by its death signal", st);
}
END_TEST

/* And it leaves by itself, status 0, on EOF: its master closed the
 * channel without a signal (a pool's copy in a forked child does that,
 * gp_watch_forget()). */
START_TEST(the_monitor_leaves_on_eof)
{
	struct gp_mon	 m;
	int		 st;

	start_one(&m);
	sample(&m, NULL, 0);
	close(m.fd);
	m.fd = -1;
	st = ends_within(m.pid);
	ck_assert_msg(st != -1, "the monitor stayed after EOF");
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x", st);
	if (m.pidfd >= 0)
		close(m.pidfd);
	m.pidfd = -1;
	m.pid = 0;
	gp_mon_stop(&m);
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("mon");
	TCase	*tc = tcase_create("mon");

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, snapshot_matches_by_uuid_busid_and_index);
	tcase_add_test(tc, processes_belong_to_their_worker_or_are_foreign);
	tcase_add_test(tc, more_processes_than_reported_are_flagged);
	tcase_add_test(tc, noprocs_means_ownership_unknown);
	tcase_add_test(tc, a_change_is_seen_by_the_next_snapshot);
	tcase_add_test(tc, a_missing_library_is_named);
	tcase_add_test(tc, a_failed_init_is_named);
	tcase_add_test(tc, a_dead_monitor_fails_and_is_reaped);
	tcase_add_test(tc, a_bad_reply_stops_the_monitor);
	tcase_add_test(tc, stop_is_safe_on_a_monitor_never_started);
	tcase_add_test(tc, one_request_at_a_time);
	tcase_add_test(tc, the_monitor_keeps_only_its_channel);
	tcase_add_test(tc, only_the_monitor_loads_nvml);
	tcase_add_test(tc, a_snapshot_is_one_state);
	tcase_add_test(tc, the_monitor_dies_with_its_master);
	tcase_add_test(tc, the_monitor_leaves_on_eof);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
