/*
 * popts.c: GNU parallel's options that gpupool-run takes as parallel
 * means them (-j, -k, -N, -m, -X, -a, -d, -0, -r, -E, -s, -q, -v, -u,
 * --link, --arg-sep, --tagstring, --retry-failed and the other
 * spellings of its own options), the ones it refuses, each with the
 * reason, and what the words after the options are: a tasks file, or
 * COMMAND, its arguments after ::: or ::::, from -a files or from
 * standard input. Prints the errors it finds, as opts.c does.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "options/opts.h"

#define MAX_CHARS_DEFAULT	131071	/* one argument of exec(), less
					   its NUL: sh -c takes the line */

static const char	 newline[] = "\n", nul[] = "";

int
popt_count(const char *s, long lo, long hi, long *out)
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

/* The value of a C escape at *s (after its '\\'), advancing *s; -1 for
 * none. */
static int
unescape(const char **s)
{
	static const char	 from[] = "ntr0abfv\\",
				 to[] = "\n\t\r\0\a\b\f\v\\";
	const char		*p = *s, *c;
	int			 v = 0, k;

	if (*p == 'x' && isxdigit((unsigned char)p[1])) {
		for (k = 1; k <= 2 && isxdigit((unsigned char)p[k]); k++)
			v = v * 16 + (isdigit((unsigned char)p[k]) ? p[k] - '0' :
			    (tolower((unsigned char)p[k]) - 'a' + 10));
		*s = p + k;
		return v;
	}
	if (*p >= '0' && *p <= '7' && p[1] >= '0' && p[1] <= '7') {
		for (k = 0; k < 3 && p[k] >= '0' && p[k] <= '7'; k++)
			v = v * 8 + (p[k] - '0');
		*s = p + k;
		return v & 0xff;
	}
	if (*p != '\0' && (c = strchr(from, *p)) != NULL) {
		*s = p + 1;
		return (unsigned char)to[c - from];
	}
	return -1;
}

/* -d DELIM: characters and C escapes (\n, \t, \0, \x2c, \054), as
 * parallel takes them; a string of several is one delimiter. */
static int
opt_delim(const char *arg, struct opts *o)
{
	char	*d;
	size_t	 n = 0;
	int	 c;

	if (*arg == '\0' || (d = malloc(strlen(arg) + 1)) == NULL) {
		out_err("-d: empty delimiter");
		return -1;
	}
	while (*arg != '\0') {
		if (*arg != '\\' || arg[1] == '\0') {
			d[n++] = *arg++;
			continue;
		}
		arg++;
		if ((c = unescape(&arg)) < 0) {
			out_err("-d: unknown escape '\\%c' (say \\n, \\t, \\0, "
			    "\\xHH or \\NNN)", *arg);
			free(d);
			return -1;
		}
		d[n++] = (char)c;
	}
	if (o->gc.delim != newline && o->gc.delim != nul)
		free((char *)o->gc.delim);
	o->gc.delim = d;
	o->gc.dlen = n;
	return 0;
}

/* -a FILE: one more source, before COMMAND's. */
static int
opt_argfile(const char *arg, struct opts *o)
{
	const char	**a;

	if (*arg == '\0') {
		out_err("-a: empty file name");
		return -1;
	}
	if ((a = realloc(o->gc.argfile, (size_t)(o->gc.nargfile + 1) *
	    sizeof(*a))) == NULL) {
		out_err("out of memory");
		return -1;
	}
	o->gc.argfile = a;
	a[o->gc.nargfile++] = arg;
	return 0;
}

/* -j N, -N n (-n n), -s N: the counts. */
static int
opt_counts(int c, const char *arg, struct opts *o)
{
	long	 n;

	if (c == 'j' || c == 'P') {
		/* +N, -N, N% and 0 count CPU cores in parallel: a GPU slot
		 * is no core. */
		if (popt_count(arg, 1, 1024 * 1024, &n) < 0) {
			out_err("-j: '%s' is not a number of slots (1 or more: "
			    "spread over the GPUs, see gpupool-run(1); GNU "
			    "parallel's 0, +N, -N and N%% count CPU cores)",
			    arg);
			return -1;
		}
		o->jobs = (int)n;
	} else if (c == 'N' || c == 'n') {
		if (popt_count(arg, 0, 1L << 30, &n) < 0) {
			out_err("-%c: '%s' is not a number of arguments per "
			    "task (0 to 2^30)", c, arg);
			return -1;
		}
		/* parallel's -N (--max-replace-args) wins over -n. */
		if (c == 'N' || o->gc.nopt != 'N') {
			o->gc.per_task = n;
			o->gc.nopt = (char)c;
		}
		if (c == 'N')
			o->gc.ctx = REPL_CTX;
	} else {
		if (popt_count(arg, 1, LINE_MAX_BYTES, &n) < 0) {
			out_err("-s: '%s' is not a line length (1 to %u)",
			    arg, LINE_MAX_BYTES);
			return -1;
		}
		o->gc.max_chars = (size_t)n;
	}
	return 0;
}

/* --arg-sep, --arg-file-sep, -E, --tagstring, --shell: strings. */
static int
opt_string(int c, const char *arg, struct opts *o)
{
	static const char *const what[] = {
		[POPT_ARGSEP - POPT_BASE] = "--arg-sep",
		[POPT_FILESEP - POPT_BASE] = "--arg-file-sep",
		[POPT_TAGSTRING - POPT_BASE] = "--tagstring",
		[POPT_SHELL - POPT_BASE] = "--shell",
	};

	if (c == 'E') {
		o->gc.eof_str = arg;
		return 0;
	}
	if (*arg == '\0' || (c == POPT_SHELL && *arg != '/')) {
		out_err("%s: %s", what[c - POPT_BASE], *arg == '\0' ? "empty" :
		    "give the shell's absolute path (say /bin/bash)");
		return -1;
	}
	if (c == POPT_ARGSEP)
		o->gc.arg_sep = arg;
	else if (c == POPT_FILESEP)
		o->gc.file_sep = arg;
	else if (c == POPT_TAGSTRING) {
		o->tagstring = arg;
		o->tag = 1;	/* --tag with that text */
	}
	else
		o->shell = arg;
	return 0;
}

int
popt_set(int c, const char *arg, struct opts *o)
{
	switch (c) {
	case 'j': case 'P': case 'N': case 'n': case 's':
		return opt_counts(c, arg, o);
	case 'E': case POPT_ARGSEP: case POPT_FILESEP: case POPT_TAGSTRING:
	case POPT_SHELL:
		return opt_string(c, arg, o);
	case 'a':
		return opt_argfile(arg, o);
	case 'd':
		return opt_delim(arg, o);
	case '0':
		if (o->gc.delim != newline && o->gc.delim != nul)
			free((char *)o->gc.delim);
		o->gc.delim = nul;	/* its NUL */
		o->gc.dlen = 1;
		break;
	case 'k':
		o->keep_order = 1;
		break;
	case 'm':
	case 'X':
		o->gc.pack = c == 'm' ? PACK_M : PACK_X;
		if (c == 'X')
			o->gc.ctx = REPL_CTX;
		break;
	case 'r':
		o->gc.no_empty = 1;
		break;
	case 'q':
		o->gc.quote = 1;
		break;
	case 'v':
	case POPT_VERBOSE:
		o->verbose = c == 'v' ? 1 : 2;
		break;
	case POPT_LINK:
		o->gc.link = 1;
		break;
	case POPT_RETRYF:
		o->retry_failed = 1;
		break;
	}
	return 0;
}

void
popt_init(struct opts *o)
{
	o->gc.arg_sep = ":::";
	o->gc.file_sep = "::::";
	o->gc.delim = newline;
	o->gc.dlen = 1;
	o->gc.per_task = 1;
	o->gc.max_chars = MAX_CHARS_DEFAULT;
}

void
popt_release(struct opts *o)
{
	if (o->gc.delim != newline && o->gc.delim != nul)
		free((char *)o->gc.delim);
	free(o->gc.argfile);
	o->gc.delim = newline;
	o->gc.argfile = NULL;
	o->gc.nargfile = 0;
}

/* GNU parallel's shells (parent_shell()): the first (grand)parent named
 * as one of them is the shell tasks run in. */
static const char *const shells[] = { "ash", "bash", "bsd-csh", "csh",
    "dash", "fdsh", "fish", "fizsh", "ksh", "ksh93", "lksh", "mksh", "pdksh",
    "posh", "rbash", "rc", "rush", "rzsh", "sash", "sh", "static-sh", "tcsh",
    "yash", "zsh", "-sh", "-csh", "-bash", "-sh (sh)", NULL };

#define SHELL_HOPS	4096	/* parents walked up, at most */

/* A shell's name at p, as parallel's regexp takes it: "-" (a login
 * shell: *dash) or not, the name, then close (']', or 0: none), then
 * only blanks, or a blank and anything but '('. NULL when none. */
static const char *
shell_at(const char *p, char close, int *dash)
{
	const char	*e;
	int		 d, i;

	for (d = *p == '-'; d >= 0; d--)
		for (i = 0; shells[i] != NULL; i++) {
			e = p + d + strlen(shells[i]);
			if (strncmp(p + d, shells[i], strlen(shells[i])) != 0 ||
			    (close && *e++ != close))
				continue;
			if (e[strspn(e, " ")] == '\0' || (*e == ' ' &&
			    e[1] != '(')) {
				*dash = d;
				return shells[i];
			}
		}
	return NULL;
}

/* The shell argv0 (a process's first word) names, as parallel's regexp
 * finds it: "[name]", "name", "dir/name" or "busybox name". */
static const char *
shell_named(const char *argv0, int *dash)
{
	const char	*name = NULL;
	size_t		 i = strcspn(argv0, " \t\n\r\f\v");

	if (*argv0 == '[')
		name = shell_at(argv0 + 1, ']', dash);
	if (name == NULL)
		name = shell_at(argv0, 0, dash);
	for (; name == NULL && i >= 2; i--)	/* \S+/, the longest first */
		if (argv0[i - 1] == '/')
			name = shell_at(argv0 + i, 0, dash);
	if (name == NULL && strncmp(argv0, "busybox ", 8) == 0)
		name = shell_at(argv0 + 8, 0, dash);
	return name;
}

/* prog's path, as parallel's which() finds it: prog itself when it has
 * a '/', else the first $PATH directory that has it (an empty one is
 * "/"): a program, not a directory. Into buf; 0 when none. */
static int
which(const char *prog, char *buf, size_t len)
{
	const char	*p = getenv("PATH"), *e;
	struct stat	 st;

	if (strchr(prog, '/') != NULL)
		return snprintf(buf, len, "%s", prog) < (int)len &&
		    access(buf, X_OK) == 0 && stat(buf, &st) == 0 &&
		    !S_ISDIR(st.st_mode);
	for (; p != NULL && *p != '\0'; p = *e ? e + 1 : e) {
		e = p + strcspn(p, ":");
		if (snprintf(buf, len, "%.*s/%s", (int)(e - p), p, prog) <
		    (int)len && access(buf, X_OK) == 0 && stat(buf, &st) ==
		    0 && !S_ISDIR(st.st_mode))
			return 1;
	}
	return 0;
}

/* Where the shell that process pid runs as name lies, as parallel finds
 * it: a login "-sh" by its /proc/PID/exe when that is a shell (dash),
 * else name (or the names it may stand for) on $PATH. 0 when none. */
static int
shell_path(long pid, const char *name, int dash, char *buf, size_t len)
{
	static const char *const alias[][3] = { { "-sh (sh)", "sh" },
	    { "-sh", "sh" }, { "-csh", "tcsh", "csh" }, { "-bash", "bash",
	    "sh" } };
	char		 link[64];
	const char	*b;
	ssize_t		 n;
	int		 i, k;

	snprintf(link, sizeof(link), "/proc/%ld/exe", pid);
	if (dash && strcmp(name, "sh") == 0 && (n = readlink(link, buf,
	    len - 1)) > 0 && (size_t)n < len - 1) {
		buf[n] = '\0';
		b = strrchr(buf, '/');
		for (i = 0; b != NULL && shells[i] != NULL; i++)
			if (strcmp(b + 1, shells[i]) == 0)
				return 1;
	}
	if (which(name, buf, len))
		return 1;
	for (i = 0; i < (int)(sizeof(alias) / sizeof(alias[0])); i++)
		for (k = 1; strcmp(alias[i][0], name) == 0 && k < 3 &&
		    alias[i][k] != NULL; k++)
			if (which(alias[i][k], buf, len))
				return 1;
	return 0;
}

/* /proc/PID/what's first bytes, NUL-terminated, into buf: empty when
 * it cannot be read (the process is gone, or hidden). */
static void
proc_read(long pid, const char *what, char *buf, size_t len)
{
	char	 path[64];
	ssize_t	 n = -1;
	int	 fd;

	snprintf(path, sizeof(path), "/proc/%ld/%s", pid, what);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		n = read(fd, buf, len - 1);
		close(fd);
	}
	buf[n > 0 ? n : 0] = '\0';
}

/* The first (grand)parent that is a shell, as parallel's parent_shell()
 * walks them (/proc/PID/cmdline's first word, /proc/PID/stat's parent):
 * its path into buf. 0 when there is none, or it is not on $PATH (then
 * parallel looks no further). */
static int
parent_shell(char *buf, size_t len)
{
	char		 word[4096];
	const char	*name, *c;
	long		 pid = (long)getppid();
	int		 hops, dash;

	for (hops = 0; pid > 0 && hops < SHELL_HOPS; hops++) {
		proc_read(pid, "cmdline", word, sizeof(word));
		/* A first word that fills word may go on: not a name. */
		if (strlen(word) < sizeof(word) - 1 &&
		    (name = shell_named(word, &dash)) != NULL)
			return shell_path(pid, name, dash, buf, len);
		proc_read(pid, "stat", word, sizeof(word));
		/* "pid (comm) state ppid": comm may hold anything. */
		if ((c = strrchr(word, ')')) == NULL ||
		    sscanf(c + 1, " %*c %ld", &pid) != 1)
			return 0;
	}
	return 0;
}

int
popt_shell(struct opts *o)
{
	const char	*s = o->shell, *what = "--shell",
			*ps = getenv("PARALLEL_SHELL"), *env = getenv("SHELL");
	char		*buf = o->sh;
	size_t		 len = sizeof(o->sh);

	/* GNU parallel's order: $PARALLEL_SHELL, the first shell among
	 * the parents, $SHELL, /bin/sh (--shell, gpupool-run's own, before
	 * them); each variable only when it is not empty. */
	o->gc.shell = buf;
	if (s == NULL && ps != NULL && *ps != '\0') {
		s = ps;
		what = "PARALLEL_SHELL";
	} else if (s == NULL && parent_shell(buf, len))
		return 0;
	else if (s == NULL && env != NULL && *env != '\0') {
		s = env;
		what = "SHELL";
	} else if (s == NULL) {
		s = "/bin/sh";
		what = "the default shell";
	}
	if (!which(s, buf, len)) {
		out_err("%s: cannot run '%.200s%s': %s", what, s,
		    strlen(s) > 200 ? "..." : "", strlen(s) >= len ?
		    "too long" : strchr(s, '/') == NULL ? "not found in $PATH" :
		    access(s, X_OK) != 0 ? strerror(errno) : "a directory");
		return -1;
	}
	/* A name stays a name, found on $PATH when a task starts, as
	 * parallel keeps it. */
	if (strchr(s, '/') == NULL)
		snprintf(buf, len, "%s", s);
	return 0;
}

/* GNU parallel's options that gpupool-run does not take, by group, and
 * why. */
static const struct {
	const char	*why;
	const char	*names;		/* " --long -s ", blank around each */
} refused[] = {
	{ "splits standard input among tasks; gpupool-run passes arguments "
	  "(see DIFFERENCES FROM GNU PARALLEL in gpupool-run(1))",
	  " --pipe --spreadstdin --pipepart --pipe-part --block --block-size "
	  "--recstart --recend --rrs --regexp --roundrobin --round-robin "
	  "--cat --fifo --header-lines -L -l --max-lines " },
	{ "runs on other hosts; across nodes gpupool-run runs under MPI "
	  "(mpirun or srun gpupool-run: see ACROSS NODES in gpupool-run(1))",
	  " -S --sshlogin --sshloginfile --slf --onall --nonall --transferfile "
	  "--transfer --return --cleanup --trc --basefile --bf --workdir "
	  "--wd --env --controlmaster --ssh --sshdelay --filter-hosts "
	  "--hostgroups --hgrp --sqlmaster --sqlworker --sqlandworker " },
	{ "defines replacement strings of its own; gpupool-run has {}, {N}, "
	  "{-N}, {.}, {/}, {//}, {/.}, {#}, {%} and --header's names",
	  " --plus --rpl --parens -I -i --replace -U --extensionreplace "
	  "--er --basenamereplace --bnr --dirnamereplace --dnr "
	  "--basenameextensionreplace --bner --seqreplace --slotreplace " },
	{ "is not supported by gpupool-run (see DIFFERENCES FROM GNU "
	  "PARALLEL in gpupool-run(1))",
	  " --trim --shuf --interactive -p --tty --open-tty -o --tmux "
	  "--tmuxpane --files --tmpdir --tempdir --termseq --load --noswap "
	  "--memfree --memsuspend --profile -J --semaphore --sem "
	  "--fg --bg --number-of-cpus --number-of-cores --number-of-threads "
	  "--number-of-sockets --use-cpus-instead-of-cores "
	  "--use-cores-instead-of-threads --use-sockets-instead-of-threads "
	  "--max-line-length-allowed --shellquote --record-env --compress "
	  "--compress-program --decompress-program --latest-line --ll "
	  "--results-csv --csv --sql --joblog-compress --embed --citation "
	  "--bibtex --minversion --ctag --ctagstring --color --colour "
	  "--color-failed --cf --keep-order-max --nr --no-notice "
	  "--timeout-grace --retry-failed-max --memlimit -x -e -M "
	  "--dry-run-verbose --groupby --group-by --shebang --shebang-wrap "
	  "--fast --hashbang --limit --line-buffered-tag --arg-file-sep-any " },
};

int
popt_refused(const char *opt)
{
	char	 key[64];
	size_t	 i, n = strcspn(opt, "=");

	if (n + 3 > sizeof(key))
		return 0;
	snprintf(key, sizeof(key), " %.*s ", (int)n, opt);
	for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		if (strstr(refused[i].names, key) != NULL) {
			out_err("GNU parallel's '%.*s' %s", (int)n, opt,
			    refused[i].why);
			return 1;
		}
	return 0;
}

/* Whether w, COMMAND's one word, is something a shell would run: a
 * file, a program on $PATH, a builtin or keyword, an exported bash
 * function. A word that is none (a tasks file's name mistyped) must not
 * become a command that waits for arguments on standard input. */
static int
runnable(const char *w)
{
	const char	*path = getenv("PATH"), *p, *e;
	char		*f, fn[256];
	int		 ok = 0;

	if (strpbrk(w, " \t") != NULL || cmdline_needs_shell(w))
		return 1;
	if (strchr(w, '/') != NULL)
		return access(w, X_OK) == 0;
	snprintf(fn, sizeof(fn), "BASH_FUNC_%s%%%%", w);
	if (getenv(fn) != NULL)
		return 1;
	for (p = path != NULL ? path : "/usr/bin:/bin"; !ok && p != NULL;
	    p = *e ? e + 1 : NULL) {
		e = p + strcspn(p, ":");
		if (asprintf(&f, "%.*s/%s", (int)(e - p), e > p ? p : ".", w) <
		    0)
			return 1;	/* cannot tell: let the shell say */
		ok = access(f, X_OK) == 0;
		free(f);
	}
	return ok;
}

/* Whether standard input has data to give: a pipe, a FIFO, a socket or
 * a file, not a terminal or a device such as /dev/null (a script that
 * forgot its tasks file must not run nothing and exit 0). */
static int
stdin_data(void)
{
	struct stat	 st;

	return fstat(STDIN_FILENO, &st) == 0 && (S_ISFIFO(st.st_mode) ||
	    S_ISSOCK(st.st_mode) || S_ISREG(st.st_mode));
}

/* What a grid's options need: a COMMAND (they mean nothing to a tasks
 * file's lines). The first one given, or NULL. */
static const char *
grid_only(const struct opts *o)
{
	const struct grid_conf	*gc = &o->gc;

	return gc->colsep ? "--colsep" : gc->header ? "--header" :
	    gc->per_task != 1 ? "-N" : gc->pack == PACK_M ? "-m" :
	    gc->pack == PACK_X ? "-X" : gc->dlen != 1 || gc->delim[0] != '\n' ?
	    "-d (or -0)" : gc->no_empty ? "-r" : gc->eof_str ? "-E" :
	    gc->quote ? "-q" : gc->link ? "--link" : NULL;
}

/* One word after the options, not a separator: a tasks file when it is
 * - or a file that is not a program (a directory too: the tasks file's
 * own error says so). */
static int
tasks_file(const char *w)
{
	struct stat	 st;

	if (strcmp(w, "-") == 0)
		return 1;
	return stat(w, &st) == 0 && (!S_ISREG(st.st_mode) ||
	    access(w, X_OK) != 0);
}

/* COMMAND with arguments from standard input or -a (no separator). */
static int
command_alone(int n, char **w, struct opts *o)
{
	if (n == 1 && !runnable(w[0])) {
		out_err("cannot open '%s': %s, and it is no command either (a "
		    "COMMAND without ::: takes its arguments from standard "
		    "input, one a line)", w[0], strerror(ENOENT));
		return -1;
	}
	o->gc.stdin_args = o->gc.nargfile == 0;
	return 0;
}

int
popt_file(char **w, int n, const struct opts *o)
{
	int	 i;

	if (n == 0 || o->gc.nargfile > 0 || o->retry_failed || o->file != NULL ||
	    !tasks_file(w[0]))
		return 0;
	for (i = 1; i < n; i++)
		if (gridsrc_word(&o->gc, w[i]))
			return 0;
	return 1;
}

int
popt_operands(int argc, char **argv, int first, struct opts *o)
{
	char		**w = argv + first;
	int		 n = argc - first, i, sep = 0;
	const char	*need;

	if (o->retry_failed) {
		if (n > 0 || o->gc.nargfile > 0) {
			out_err("--retry-failed runs the failed tasks the joblog "
			    "records, with their commands there: give no tasks "
			    "file or COMMAND ('%s')", n > 0 ? w[0] :
			    o->gc.argfile[0]);
			return -1;
		}
		return 0;
	}
	if (o->file != NULL && n > 0) {
		out_err("more than one tasks file given ('%s', '%s')", o->file,
		    w[0]);
		return -1;
	}
	for (i = 0; i < n && !sep; i++)
		sep = gridsrc_word(&o->gc, w[i]);
	/* -a FILE alone: its lines are the commands, a tasks file. */
	if (!sep && n == 0 && o->gc.nargfile == 1 && grid_only(o) == NULL) {
		o->file = o->gc.argfile[0];
		o->gc.nargfile = 0;
		return 0;
	}
	if (o->file == NULL && (sep || o->gc.nargfile > 0 || n > 0)) {
		if (!sep && command_alone(n, w, o) < 0)
			return -1;
		o->grid_argv = w;
		o->grid_argc = n;
		return 0;
	}
	if ((need = grid_only(o)) != NULL) {
		out_err("%s needs COMMAND ::: ARGS (or :::: FILE, -a FILE, "
		    "arguments on standard input), not a tasks file", need);
		return -1;
	}
	if (o->file == NULL && (isatty(STDIN_FILENO) || !stdin_data())) {
		out_err("no tasks file given (use - for standard input; "
		    "see %s --help)", CLI_NAME);
		return -1;
	}
	if (o->file == NULL)
		o->file = "-";
	return 0;
}
