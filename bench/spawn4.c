/*
 * spawn4.c: the raw lower bound for a command runner, written for the
 * benchmark harness. It does the least a runner with GPU slots must do:
 * read a line, posix_spawn("/bin/sh", "-c", line) with the slot's GPU in
 * the environment, keep J in flight, waitpid. No output capture, no
 * process groups, no joblog, no signals, no retries.
 *
 *	spawn4 [-j J] [-e VAR] FILE
 *
 * -j J		tasks at a time (default 4)
 * -e VAR	set VAR=<slot> in each task's environment (default
 *		CUDA_VISIBLE_DEVICES; -e '' sets nothing)
 * FILE		one shell command per line ("-": standard input)
 *
 * One thread per slot, each spawning and reaping its own tasks: glibc's
 * posix_spawn is a vfork, which suspends the caller until the child has
 * exec'd, so a single thread would have only one spawn under way at a
 * time and be slower than runners that spawn from several processes.
 *
 * Exit status: 0, or the number of tasks that failed (at most 101), or
 * 255 on an error of its own.
 */
#include <errno.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char	**environ;

#define MAXJ	256

static FILE		*in;
static pthread_mutex_t	 in_lock = PTHREAD_MUTEX_INITIALIZER;
static int		 failed;	/* under in_lock */
static const char	*var = "CUDA_VISIBLE_DEVICES";

static void
die(const char *what, int err)
{
	fprintf(stderr, "spawn4: %s: %s\n", what, strerror(err));
	exit(255);
}

/* A copy of environ without VAR, with VAR=slot appended. */
static char **
slot_env(int slot)
{
	size_t	 n = 0, vl = strlen(var), i, k = 0;
	char	**env;

	while (environ[n] != NULL)
		n++;
	if ((env = calloc(n + 2, sizeof(*env))) == NULL)
		die("calloc", errno);
	for (i = 0; i < n; i++)
		if (vl == 0 || strncmp(environ[i], var, vl) != 0 ||
		    environ[i][vl] != '=')
			env[k++] = environ[i];
	if (vl > 0) {
		if ((env[k] = malloc(vl + 16)) == NULL)
			die("malloc", errno);
		snprintf(env[k], vl + 16, "%s=%d", var, slot);
	}
	return env;
}

static void *
slot_main(void *arg)
{
	char		**env = arg, *line = NULL, *av[4];
	size_t		 cap = 0;
	ssize_t		 len;
	pid_t		 pid;
	int		 st, rc, bad;

	for (;;) {
		pthread_mutex_lock(&in_lock);
		while ((len = getline(&line, &cap, in)) == 0 ||
		    (len == 1 && line[0] == '\n'))
			;	/* skip blank lines */
		pthread_mutex_unlock(&in_lock);
		if (len == -1)
			break;
		if (line[len - 1] == '\n')
			line[--len] = '\0';
		av[0] = "sh";
		av[1] = "-c";
		av[2] = line;
		av[3] = NULL;
		if ((rc = posix_spawn(&pid, "/bin/sh", NULL, NULL, av, env)) !=
		    0)
			die("posix_spawn", rc);
		while (waitpid(pid, &st, 0) == -1)
			if (errno != EINTR)
				die("waitpid", errno);
		bad = !WIFEXITED(st) || WEXITSTATUS(st) != 0;
		if (bad) {
			pthread_mutex_lock(&in_lock);
			failed++;
			pthread_mutex_unlock(&in_lock);
		}
	}
	free(line);
	return NULL;
}

int
main(int argc, char **argv)
{
	pthread_t	 t[MAXJ];
	int		 j = 4, c, s, rc;

	while ((c = getopt(argc, argv, "j:e:")) != -1) {
		switch (c) {
		case 'j':
			j = atoi(optarg);
			break;
		case 'e':
			var = optarg;
			break;
		default:
			goto usage;
		}
	}
	if (optind != argc - 1 || j < 1 || j > MAXJ)
		goto usage;
	if (strcmp(argv[optind], "-") == 0)
		in = stdin;
	else if ((in = fopen(argv[optind], "re")) == NULL)
		die(argv[optind], errno);
	for (s = 0; s < j; s++)
		if ((rc = pthread_create(&t[s], NULL, slot_main,
		    slot_env(s))) != 0)
			die("pthread_create", rc);
	for (s = 0; s < j; s++)
		pthread_join(t[s], NULL);
	return failed > 101 ? 101 : failed;
usage:
	fprintf(stderr, "usage: spawn4 [-j J] [-e VAR] FILE\n");
	return 255;
}
