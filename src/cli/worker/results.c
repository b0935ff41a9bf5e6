/*
 * results.c: --results DIR, in the worker (the master makes, proves and
 * locks DIR before the workers are forked with it open: resdir_open(),
 * files.c). In the worker that ran an attempt, DIR/<seq>/ gets its stdout, stderr
 * and exitval: written under temporary names (stdout.live, stderr.live,
 * .exitval.tmp) and published by rename(),
 * exitval last, so that exitval exists only beside the output of its own
 * attempt, and a run that dies mid-task leaves a task that --resume sees
 * as not done (results_open(), results_close(): never print; failures
 * are explained in the caller's buffer).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker/worker.h"

/* The task writes stdout.live and stderr.live as it runs (tail -f shows
 * them grow: documented in gpupool-run.1); exitval's is never seen. */
static const char *const tmp_name[] = {
	"stdout.live", "stderr.live", ".exitval.tmp"
};
static const char *const final_name[] = { "stdout", "stderr", "exitval" };

/* Create temporary i, a regular file of our own. Whatever has its name
 * (left by a crash, or planted: a link to a file outside DIR, a FIFO
 * that would block open(), a symbolic link) is unlinked, never opened. */
static int
results_tmp(struct results_files *f, int i)
{
	int	 fd;

	if (unlinkat(f->dir, tmp_name[i], 0) == -1 && errno != ENOENT)
		return -1;
	if ((fd = openat(f->dir, tmp_name[i], O_WRONLY | O_CREAT | O_EXCL |
	    O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0666)) >= 0)
		f->made |= 1 << i;
	return fd;
}

int
results_open(int rfd, uint64_t seq, struct results_files *f, int *ofd,
    int *efd, char *msg, size_t mlen)
{
	const char	*what = "";

	snprintf(f->name, sizeof(f->name), "%llu", (unsigned long long)seq);
	f->made = 0;
	if (mkdirat(rfd, f->name, 0777) == -1 && errno != EEXIST)
		goto fail;
	if ((f->dir = openat(rfd, f->name, O_RDONLY | O_DIRECTORY |
	    O_NOFOLLOW | O_CLOEXEC)) == -1)
		goto fail;
	/* An earlier attempt's exitval goes first: from now until this
	 * attempt's is written, DIR/<seq> says "not done". */
	what = "exitval";
	if (unlinkat(f->dir, what, 0) == -1 && errno != ENOENT)
		goto fail;
	what = tmp_name[0];
	if ((*ofd = results_tmp(f, 0)) == -1)
		goto fail;
	what = tmp_name[1];
	if ((*efd = results_tmp(f, 1)) == -1)
		goto fail;
	return 0;
fail:
	snprintf(msg, mlen, "cannot create '%s%s%s' in the results directory: "
	    "%s", f->name, *what ? "/" : "", what, strerror(errno));
	return -1;
}

/* Publish the attempt's files under their final names, exitval last:
 * exitval exists only beside the output of its own attempt. A stream
 * whose temporary was not made (the task did not start) loses an
 * earlier attempt's file. A failure is explained in msg unless it is
 * NULL. */
int
results_close(struct results_files *f, int code, char *msg, size_t mlen)
{
	char		 buf[16];
	int		 fd, i, n, e;

	for (i = 0; i < 2; i++)
		if (f->made & (1 << i)) {
			if (renameat(f->dir, tmp_name[i], f->dir,
			    final_name[i]) == -1)
				goto fail;
			f->made &= ~(1 << i);
		} else if (unlinkat(f->dir, final_name[i], 0) == -1 &&
		    errno != ENOENT)
			goto fail;
	n = snprintf(buf, sizeof(buf), "%d\n", code);
	if ((fd = results_tmp(f, 2)) == -1)
		goto fail;
	if ((e = gp_write_full(fd, buf, (size_t)n)) < 0) {
		close(fd);
		errno = -e;
		goto fail;
	}
	/* NFS and some others report a full disk only here. */
	if (close(fd) == -1 ||
	    renameat(f->dir, tmp_name[2], f->dir, final_name[2]) == -1)
		goto fail;
	f->made = 0;
	close(f->dir);
	return 0;
fail:
	e = errno;
	if (msg != NULL)
		snprintf(msg, mlen, "cannot write '%s' in the results "
		    "directory: %s", f->name, strerror(e));
	for (i = 0; i < 3; i++)
		if (f->made & (1 << i))
			(void)unlinkat(f->dir, tmp_name[i], 0);
	close(f->dir);
	return -1;
}
