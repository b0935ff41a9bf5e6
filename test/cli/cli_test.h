/*
 * cli_test.h: what the end-to-end tests of gpupool-run (check_cli.c,
 * check_gpus.c) share: a temporary directory per test, gpupool-run
 * started by path (GPUPOOL_RUN) and waited for with a limit, whole files
 * read, the probe's log (PROBE, probe.c) and the joblog parsed, and a
 * wait for a condition with a deadline (never a sleep). Static: each
 * test program is one file that includes it once.
 */
#ifndef GP_CLI_TEST_H
#define GP_CLI_TEST_H

#include <check.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef GPUPOOL_RUN
#error "build with -DGPUPOOL_RUN=path"
#endif
#ifndef PROBE
#error "build with -DPROBE=path"
#endif

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN	1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN	1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN	0
#endif

#define MAXREC	4096

#if UNDER_ASAN
/* The tests keep small path strings until their process ends, on
 * purpose; gpupool-run itself runs with leak checking on (a leak there
 * changes its exit status, which every test checks). */
const char	*__asan_default_options(void);

const char *
__asan_default_options(void)
{
	return "detect_leaks=0";
}
#endif

/* One finished gpupool-run. */
struct res {
	int		 code;		/* exit code, or 128 + signal */
	char		*out, *err;
	size_t		 outlen, errlen;
	long		 maxrss_kb;	/* it and its reaped descendants */
	double		 secs;
};

/* An "E" line of the probe's log: one task's view of its run. */
struct rec {
	long		 seq;
	char		 cvd[64];
	int		 slot, gpu, att;
	long long	 start, end;
};

/* A "B" line: a task that started. */
struct beg {
	long		 seq;
	long		 pid, pgid;
};

/* A joblog line. */
struct jrec {
	long		 seq;
	double		 start, runtime;	/* epoch s, s */
	int		 exitval, sig;
	long		 mem, util;	/* GPUMem MiB, GPUUtil %; -1: '-' */
	char		 gpu[64];
	char		 cmd[256];
};

static char	 tmp[256];
/* The CUDA_VISIBLE_DEVICES gpupool-run inherits (NULL: none). Set and
 * empty by default: no real GPU may leak into a test, even on a machine
 * with some (the probe then sees none). */
static const char *inherit_cvd = "";
/* A shell script that ends in exec "$@" to start gpupool-run through (a
 * batch script, a container's entrypoint); NULL: exec it directly. */
static const char *exec_via;

static double
now_s(void)
{
	struct timespec	 ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
nap(long ms)
{
	struct timespec	 ts = { ms / 1000, (ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) == -1)
		;
}

static char *
pathf(const char *fmt, ...)
{
	va_list	 ap;
	char	*p, *s;

	va_start(ap, fmt);
	ck_assert_int_ge(vasprintf(&s, fmt, ap), 0);
	va_end(ap);
	ck_assert_int_ge(asprintf(&p, "%s/%s", tmp, s), 0);
	free(s);
	return p;
}

/* A command line: a printf into a string of its own (pathf() is for
 * files in TMP). Inline: a test file that makes none gets no warning. */
static inline char *
cmdf(const char *fmt, ...)
{
	va_list	 ap;
	char	*s;

	va_start(ap, fmt);
	ck_assert_int_ge(vasprintf(&s, fmt, ap), 0);
	va_end(ap);
	return s;
}

static void
tmp_make(void)
{
	const char	*base = getenv("TMPDIR");

	snprintf(tmp, sizeof(tmp), "%s/gpupool-cli-XXXXXX",
	    base != NULL && *base ? base : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static int
rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

static void
tmp_remove(void)
{
	(void)nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void
put(const char *path, const void *data, size_t len)
{
	int	 fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
	close(fd);
}

static void
puts_file(const char *path, const char *s)
{
	put(path, s, strlen(s));
}

/* A whole file, NUL-terminated (read to EOF: /proc files say size 0). */
static char *
slurp(const char *path, size_t *len)
{
	size_t	 n = 0, cap = 4096;
	ssize_t	 r;
	char	*b, *nb;
	int	 fd;

	if (len)
		*len = 0;
	if ((fd = open(path, O_RDONLY)) < 0)
		return NULL;
	b = malloc(cap);
	ck_assert_ptr_nonnull(b);
	for (;;) {
		if (cap - n < 2) {
			nb = realloc(b, cap *= 2);
			ck_assert_ptr_nonnull(nb);
			b = nb;
		}
		if ((r = read(fd, b + n, cap - n - 1)) <= 0)
			break;
		n += (size_t)r;
	}
	b[n] = '\0';
	close(fd);
	if (len)
		*len = n;
	return b;
}

/* Inline: a test file that counts no lines gets no warning. */
static inline int
count_lines(const char *s)
{
	int	 n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* Start gpupool-run with args (NULL-terminated), stdin from in_fd (or
 * /dev/null), stdout and stderr to files. The child also holds a stray fd
 * open without close-on-exec, as a careless parent would. */
static pid_t
start(int in_fd, const char *outp, const char *errp, const char *const *args)
{
	const char	*argv[96];
	char		*wrap = getenv("GPUPOOL_TEST_WRAP"), *w;
	pid_t		 pid, test = getpid();
	int		 i, k = 0, fd;

	if (exec_via != NULL) {
		argv[k++] = "/bin/sh";
		argv[k++] = "-c";
		argv[k++] = exec_via;
		argv[k++] = "sh";
	}
	/* GPUPOOL_TEST_WRAP="valgrind --log-file=..." runs gpupool-run
	 * under a tool: its words come first. */
	if (wrap != NULL && (wrap = strdup(wrap)) != NULL)
		for (w = strtok(wrap, " "); w != NULL && k < 30;
		    w = strtok(NULL, " "))
			argv[k++] = w;
	argv[k] = GPUPOOL_RUN;
	for (i = 0; args[i] != NULL && i < 62; i++)
		argv[k + i + 1] = args[i];
	argv[k + i + 1] = NULL;
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid > 0)
		return pid;
	/* A group of its own, as a shell job: kill(-pid) reaches it and
	 * its workers, not the test. So Check's timeout, which kills the
	 * test's group, does not reach it: it dies with the test instead
	 * (its workers and their tasks then follow their master). */
	setpgid(0, 0);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) == -1 || getppid() != test)
		_exit(126);
	fd = in_fd >= 0 ? in_fd : open("/dev/null", O_RDONLY);
	dup2(fd, 0);
	fd = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	dup2(fd, 1);
	fd = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	dup2(fd, 2);
	fd = open("/dev/null", O_RDONLY);
	dup2(fd, 9);
	if (inherit_cvd != NULL)
		setenv("CUDA_VISIBLE_DEVICES", inherit_cvd, 1);
	else
		unsetenv("CUDA_VISIBLE_DEVICES");
	/* Under -fsanitize=undefined, undefined behaviour is an exit
	 * status the tests see, not a line nobody reads. */
	setenv("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1", 0);
	unsetenv("GPUPOOL_FAKE_GPUS");
	unsetenv("GPUPOOL_TOPOLOGY");
	execvp(argv[0], (char *const *)argv);
	_exit(126);
}

/* Wait at most limit seconds (then SIGKILL it and fail). */
static void
finish(pid_t pid, double t0, double limit, const char *outp,
    const char *errp, struct res *r)
{
	struct rusage	 ru;
	int		 st;
	pid_t		 w;

	memset(r, 0, sizeof(*r));
	for (;;) {
		w = wait4(pid, &st, WNOHANG, &ru);
		ck_assert_int_ge(w, 0);
		if (w == pid)
			break;
		if (now_s() - t0 > limit) {
			kill(pid, SIGKILL);
			(void)waitpid(pid, &st, 0);
			ck_abort_msg("gpupool-run still running after %.0f s",
			    limit);
		}
		nap(10);
	}
	r->secs = now_s() - t0;
	r->code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	r->maxrss_kb = ru.ru_maxrss;
	r->out = slurp(outp, &r->outlen);
	r->err = slurp(errp, &r->errlen);
	if (r->out == NULL)
		r->out = strdup("");
	if (r->err == NULL)
		r->err = strdup("");
}

static void
run_in(int in_fd, double limit, struct res *r, const char *const *args)
{
	char	*o = pathf("cli.out"), *e = pathf("cli.err");
	double	 t0 = now_s();

	finish(start(in_fd, o, e, args), t0, limit, o, e, r);
	free(o);
	free(e);
}

#define RUN(r, ...)	run_in(-1, 60, (r), (const char *const []){ __VA_ARGS__, NULL })

/* The probe's log: E records into recs, B records into begs. */
static inline int
read_log(const char *path, struct rec *recs, struct beg *begs, int *nbeg)
{
	char		*b = slurp(path, NULL), *l, *save = NULL;
	int		 n = 0, nb = 0;

	if (b == NULL) {
		if (nbeg)
			*nbeg = 0;
		return 0;
	}
	for (l = strtok_r(b, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		if (l[0] == 'E' && n < MAXREC) {
			ck_assert_int_eq(sscanf(l, "E %ld %63s %d %d %d %lld %lld",
			    &recs[n].seq, recs[n].cvd, &recs[n].slot,
			    &recs[n].gpu, &recs[n].att, &recs[n].start,
			    &recs[n].end), 7);
			n++;
		} else if (l[0] == 'B' && begs != NULL && nb < MAXREC) {
			ck_assert_int_eq(sscanf(l, "B %ld %ld %ld", &begs[nb].seq,
			    &begs[nb].pid, &begs[nb].pgid), 3);
			nb++;
		}
	}
	free(b);
	if (nbeg)
		*nbeg = nb;
	return n;
}

/* Whether s is a GPUMem or GPUUtil value: '-' or an integer. */
static int
jl_num(const char *s)
{
	return strcmp(s, "-") == 0 || (*s != '\0' &&
	    strspn(s, "0123456789") == strlen(s));
}

/* Joblog records (the header and lines with fewer than 10 fields are
 * not returned; *bad counts the latter). The header is ours, or that of
 * a joblog from before GPUMem and GPUUtil that a test wrote. */
static inline int
read_joblog(const char *path, struct jrec *j, int max, int *bad)
{
	char	*b = slurp(path, NULL), *l, *save = NULL, *f[16], *p;
	int	 n = 0, k, nbad = 0, first = 1;

	ck_assert_msg(b != NULL, "no joblog at %s", path);
	for (l = strtok_r(b, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		if (first) {
			ck_assert_msg(strcmp(l, "Seq\tHost\tStarttime\t"
			    "JobRuntime\tSend\tReceive\tExitval\tSignal\t"
			    "Command\tGPU\tGPUMem\tGPUUtil\tPeakRSS") == 0 ||
			    strcmp(l, "Seq\tHost\tStarttime\t"
			    "JobRuntime\tSend\tReceive\tExitval\tSignal\t"
			    "Command\tGPU\tGPUMem\tGPUUtil") == 0 || strcmp(l,
			    "Seq\tHost\tStarttime\tJobRuntime\tSend\t"
			    "Receive\tExitval\tSignal\tCommand\tGPU") == 0,
			    "joblog header '%s'", l);
			first = 0;
			continue;
		}
		for (k = 0, p = l; k < 16; k++) {
			f[k] = p;
			if ((p = strchr(p, '\t')) == NULL)
				break;
			*p++ = '\0';
		}
		if (k + 1 < 10) {
			nbad++;
			continue;
		}
		ck_assert_int_lt(n, max);
		j[n].seq = atol(f[0]);
		ck_assert_str_eq(f[1], ":");
		j[n].start = atof(f[2]);
		j[n].runtime = atof(f[3]);
		j[n].exitval = atoi(f[6]);
		j[n].sig = atoi(f[7]);
		snprintf(j[n].cmd, sizeof(j[n].cmd), "%s", f[8]);
		snprintf(j[n].gpu, sizeof(j[n].gpu), "%s", f[9]);
		/* Ours have thirteen; a test's old ones twelve or ten. */
		ck_assert_msg(k + 1 == 13 || k + 1 == 12 || k + 1 == 10,
		    "%d fields", k + 1);
		j[n].mem = j[n].util = -1;
		if (k + 1 == 13)
			ck_assert_msg(jl_num(f[12]), "PeakRSS '%s'", f[12]);
		if (k + 1 >= 12) {
			ck_assert_msg(jl_num(f[10]) && jl_num(f[11]), "GPUMem "
			    "'%s', GPUUtil '%s'", f[10], f[11]);
			if (*f[10] != '-')
				j[n].mem = atol(f[10]);
			if (*f[11] != '-')
				j[n].util = atol(f[11]);
		}
		n++;
	}
	free(b);
	if (bad)
		*bad = nbad;
	return n;
}


/* Exit 255, one line on stderr that contains want, nothing ran (no
 * ran file, unless NULL) and every file in keep[] (NULL-terminated, or
 * NULL) still holds what it held. stdin_path: standard input from that
 * file (or NULL). Inline: a test file that refuses nothing gets no
 * warning. */
static inline void
run_refused(const char *want, const char *ran, const char *const *keep,
    const char *stdin_path, const char *const *args)
{
	struct res	 res;
	char		*before[8];
	int		 i, fd = -1;

	for (i = 0; keep != NULL && keep[i] != NULL; i++)
		ck_assert_ptr_nonnull(before[i] = slurp(keep[i], NULL));
	if (stdin_path != NULL)
		ck_assert_int_ge(fd = open(stdin_path, O_RDONLY), 0);
	run_in(fd, 60, &res, args);
	if (fd >= 0)
		close(fd);
	ck_assert_msg(res.code == 255, "exit %d for '%s': %s", res.code, want,
	    res.err);
	ck_assert_msg(count_lines(res.err) == 1 &&
	    strncmp(res.err, "gpupool-run: ", 13) == 0, "not one line: '%s'",
	    res.err);
	ck_assert_msg(strstr(res.err, want) != NULL, "'%s' lacks '%s'",
	    res.err, want);
	if (ran != NULL)
		ck_assert_msg(access(ran, F_OK) == -1, "a task ran (%s)",
		    want);
	for (i = 0; keep != NULL && keep[i] != NULL; i++) {
		char	*now = slurp(keep[i], NULL);

		ck_assert_msg(now != NULL && strcmp(now, before[i]) == 0,
		    "'%s' changed (%s)", keep[i], want);
		free(now);
		free(before[i]);
	}
	free(res.out);
	free(res.err);
}

struct want_lines {
	const char	*path;
	int		 n;
	char		 c;	/* count lines starting with c; 0: any */
};

static inline int
have_lines(void *arg)
{
	struct want_lines	*w = arg;
	char			*b = slurp(w->path, NULL), *p;
	int			 n = 0, bol = 1;

	if (b == NULL)
		return 0;
	for (p = b; *p; p++) {
		if (bol && (w->c == 0 || *p == w->c))
			n++;
		bol = *p == '\n';
	}
	free(b);
	return n >= w->n;
}

struct want_str {
	const char	*path;
	const char	*s;
};

static inline int
have_str(void *arg)
{
	struct want_str	*w = arg;
	char		*b = slurp(w->path, NULL);
	int		 in = b != NULL && strstr(b, w->s) != NULL;

	free(b);
	return in;
}

#endif /* GP_CLI_TEST_H */
