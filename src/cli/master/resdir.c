/*
 * resdir.c: --results DIR in the master. On rank 0, before the workers
 * are forked with it open, the directory is made (mkdir -p), proved
 * writable and locked for the life of the run; the other ranks make and
 * prove it only. Prints why it failed. The worker's half, each attempt's
 * files in DIR/<seq>/, is results.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "master/master.h"

/* mkdir -p, then prove we can create entries in it, and lock it (its
 * lock file) for the life of the run: two runs would mix their attempts'
 * files. Only rank 0 locks it: it alone hands out the Seqs, and the
 * other ranks of its run, on this node or another (NFSv4, Lustre and
 * GPFS make the lock cluster-wide), would lock one another out. */
int
resdir_open(struct run *r, const char *path)
{
	struct stat	 st;
	char		*p, *s;
	char		 probe[64], err[PATH_MAX + 256];
	int		 fd, rc = 0;

	if ((p = strdup(path)) == NULL)
		return -ENOMEM;
	for (s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, 0777) == -1 && errno != EEXIST)
			rc = -errno;
		*s = '/';
		if (rc < 0)
			break;
	}
	free(p);
	if (rc == 0 && mkdir(path, 0777) == -1 && errno != EEXIST)
		rc = -errno;
	if (rc < 0) {
		out_err("cannot create results directory '%s': %s", path,
		    strerror(-rc));
		return rc;
	}
	if ((fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1) {
		rc = -errno;
		out_err("cannot open results directory '%s': %s", path,
		    strerror(errno));
		return rc;
	}
	/* Nothing the run reads or writes may be a task's result file. */
	if ((rc = files_note(FILE_DIR, "--results", path, fd, err,
	    sizeof(err))) < 0) {
		out_err("%s", err);
		close(fd);
		return rc;
	}
	/* The rank too: ranks on other nodes may share a pid. */
	snprintf(probe, sizeof(probe), ".gpupool-run-probe.%d.%ld",
	    ranks_rank(r->rk), (long)getpid());
	if (mkdirat(fd, probe, 0700) == -1) {
		rc = -errno;
		out_err("cannot write to results directory '%s': %s", path,
		    strerror(errno));
		close(fd);
		return rc;
	}
	(void)unlinkat(fd, probe, AT_REMOVEDIR);
	if (ranks_rank(r->rk) > 0)
		return fd;
	/* O_NONBLOCK: a FIFO planted there must not block open(). */
	if ((r->rlock = openat(fd, RESULTS_LOCK, O_RDWR | O_CREAT | O_NOFOLLOW |
	    O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0666)) == -1 ||
	    fstat(r->rlock, &st) == -1 || !S_ISREG(st.st_mode)) {
		rc = r->rlock == -1 ? -errno : -EINVAL;
		out_err("cannot lock results directory '%s': %s/%s: %s", path,
		    path, RESULTS_LOCK, rc == -EINVAL ? "not a regular file" :
		    strerror(-rc));
		close(fd);
		return rc;
	}
	if ((rc = files_lock(r->rlock, F_WRLCK, r->o->wait_lock,
	    "results directory", path, err, sizeof(err))) < 0) {
		out_err("%s", err);
		close(fd);
		return rc;
	}
	return fd;
}
