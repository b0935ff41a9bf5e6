/*
 * files.c: every file a run reads or writes, noted where it is opened
 * (inputs by the code that reads them: the tasks file, :::: files, the
 * topology, --from-joblog's joblog; outputs: the joblog, --timeline,
 * --results DIR, standard output and error), and the one check that no
 * output is an input or another output. Each note is checked against
 * every note before it, so the order in which a run opens its files does
 * not matter, and an input the run grows later is covered by opening it
 * here. Files are compared by what they are (device and inode, after
 * symbolic links), not by name: a hard link, a symbolic link, /dev/stdin
 * or standard input itself is the same file. And the locks a run
 * holds on its files (files_lock(), files_open_locked()). Never prints.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOCK_RETRY_MS	100	/* --wait-lock: try again after */

#include "common/cli.h"

struct file_note {
	enum file_role	 role;
	const char	*what;		/* static: "joblog", "tasks file" */
	char		*path;		/* as given; NULL: a standard stream */
	char		 where[32];	/* /proc/self/fd/N for a stream */
	int		 fd;		/* the stream's */
	int		 exists;
	struct stat	 st;
};

static struct file_note	*files;
static size_t		 nfiles, capfiles;

/* The path that names e's file: as given, or its descriptor's. */
static const char *
where(const struct file_note *e)
{
	return e->path != NULL ? e->path : e->where;
}

/* Whether path is, or would be, in DIR/<seq>/, whose files --results
 * replaces (dir: DIR). Symbolic links are followed. */
static int
in_results(const char *path, const struct stat *dir)
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
		    st.st_dev == dir->st_dev && st.st_ino == dir->st_ino;
	}
	free(real);
	return in;
}

static int
same(const struct file_note *a, const struct file_note *b)
{
	return a->exists && b->exists && S_ISREG(a->st.st_mode) &&
	    S_ISREG(b->st.st_mode) && a->st.st_dev == b->st.st_dev &&
	    a->st.st_ino == b->st.st_ino;
}

/* Whether a and b may not be one file: at least one is written (two
 * streams are one file under 2>&1, as any shell does), and they are the
 * same, or one is in the other's DIR/<seq>/. */
static int
clash(const struct file_note *a, const struct file_note *b)
{
	if ((a->role == FILE_IN && b->role == FILE_IN) ||
	    (a->role == FILE_STREAM && b->role == FILE_STREAM) ||
	    (a->role == FILE_DIR && b->role == FILE_DIR))
		return 0;
	if (a->role == FILE_DIR)
		return a->exists && in_results(where(b), &a->st);
	if (b->role == FILE_DIR)
		return b->exists && in_results(where(a), &b->st);
	return same(a, b);
}

/* "joblog 'x'", "--results 'x'", "standard output". */
static void
name(char *buf, size_t len, const struct file_note *e, const char *article)
{
	if (e->role == FILE_STREAM)
		snprintf(buf, len, "%s", e->what);
	else if (e->path == NULL)
		snprintf(buf, len, "%s%s (standard input)", article, e->what);
	else
		snprintf(buf, len, "%s%s '%s'", article, e->what, e->path);
}

/* Why a and b clash, the one that writes first: "joblog 'x' is the
 * tasks file 'y'". */
static void
say(const struct file_note *a, const struct file_note *b, char *err, size_t errlen)
{
	static const char *const verb[] = {
		[FILE_OUT] = "is", [FILE_REPLACED] = "would replace",
		[FILE_DIR] = "would overwrite", [FILE_STREAM] = "is",
	};
	const struct file_note	*w, *o;
	char			 wn[PATH_MAX / 2], on[PATH_MAX / 2];

	/* The one that does the damage: a directory's files, a picture
	 * renamed over, the joblog, then a stream. */
	w = a->role == FILE_IN ? b : b->role == FILE_IN ? a :
	    a->role == FILE_DIR ? a : b->role == FILE_DIR ? b :
	    a->role == FILE_REPLACED ? a : b->role == FILE_REPLACED ? b :
	    a->role == FILE_OUT ? a : b;
	o = w == a ? b : a;
	name(wn, sizeof(wn), w, "");
	name(on, sizeof(on), o, "the ");
	snprintf(err, errlen, "%s %s %s: nothing was run", wn, verb[w->role],
	    on);
}

int
files_note(enum file_role role, const char *what, const char *path, int fd,
    char *err, size_t errlen)
{
	struct file_note	 e, *a;
	size_t		 i, n;

	memset(&e, 0, sizeof(e));
	e.role = role;
	e.what = what;
	e.fd = fd;
	snprintf(e.where, sizeof(e.where), "/proc/self/fd/%d", fd);
	e.exists = fd >= 0 ? fstat(fd, &e.st) == 0 : stat(path, &e.st) == 0;
	for (i = 0; i < nfiles; i++) {
		if (clash(&files[i], &e)) {
			e.path = (char *)path;
			say(&files[i], &e, err, errlen);
			return -EEXIST;
		}
		/* An input read twice (:::: v :::: v, a scan) once. */
		if (role == FILE_IN && files[i].role == FILE_IN &&
		    same(&files[i], &e))
			return 0;
	}
	if (nfiles == capfiles) {
		n = capfiles ? 2 * capfiles : 16;
		if ((a = reallocarray(files, n, sizeof(*a))) == NULL)
			goto nomem;
		files = a;
		capfiles = n;
	}
	if (path != NULL && (e.path = strdup(path)) == NULL)
		goto nomem;
	files[nfiles++] = e;
	return 0;
nomem:
	snprintf(err, errlen, "out of memory");
	return -ENOMEM;
}

void
files_release(void)
{
	size_t	 i;

	for (i = 0; i < nfiles; i++)
		free(files[i].path);
	free(files);
	files = NULL;
	nfiles = capfiles = 0;
}

/*
 * A lock on fd for as long as the descriptor lives, exclusive (F_WRLCK,
 * fd open for writing) or shared (F_RDLCK: an input a run reads while
 * it goes, which no other run may write): an OFD lock, so closing
 * another descriptor of the file does not drop it and the kernel drops
 * it however we end. An OFD
 * lock has no pid to report, so ours says who holds it by its extent:
 * bytes 0 to our pid. --wait-lock tries again every LOCK_RETRY_MS rather
 * than wait in F_OFD_SETLKW: under MPI the run's signals are blocked from
 * the start (main.c), and a blocked SIGTERM would never end that wait.
 * Between tries it takes them, where they are blocked, with
 * sigtimedwait(); where they are not, they end the process as usual.
 */
int
files_lock(int fd, int type, int wait, const char *what, const char *path,
    char *err, size_t errlen)
{
	static const int	 stop[] = { SIGINT, SIGTERM, SIGHUP };
	struct timespec		 ts = { 0, LOCK_RETRY_MS * 1000000L };
	struct flock		 fl;
	sigset_t		 set, blocked;
	size_t			 i;
	long			 holder = 0;
	int			 s;

	sigemptyset(&set);
	if (wait && sigprocmask(SIG_BLOCK, NULL, &blocked) == 0)
		for (i = 0; i < sizeof(stop) / sizeof(stop[0]); i++)
			if (sigismember(&blocked, stop[i]))
				sigaddset(&set, stop[i]);
	for (;;) {
		memset(&fl, 0, sizeof(fl));
		fl.l_type = (short)type;
		fl.l_whence = SEEK_SET;
		fl.l_start = 0;
		fl.l_len = (off_t)getpid() + 1;
		if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EACCES)
			break;
		if (wait) {
			if ((s = sigtimedwait(&set, NULL, &ts)) > 0) {
				snprintf(err, errlen, "got SIG%s while waiting "
				    "for %s '%s' (--wait-lock): nothing was run",
				    sigabbrev_np(s), what, path);
				return -EINTR;
			}
			continue;
		}
		if (fcntl(fd, F_OFD_GETLK, &fl) == -1)
			break;
		if (fl.l_type == F_UNLCK)
			continue;	/* released meanwhile */
		/* Another program's POSIX lock does carry a pid. */
		if (fl.l_pid > 0)
			holder = fl.l_pid;
		else if (fl.l_start == 0 && fl.l_len > 1)
			holder = (long)fl.l_len - 1;
		snprintf(err, errlen, "%s '%s' is in use by process %ld "
		    "(another gpupool-run?); --wait-lock waits for it", what,
		    path, holder);
		return -EAGAIN;
	}
	s = -errno;
	snprintf(err, errlen, "cannot lock %s '%s': %s", what, path,
	    strerror(errno));
	return s;
}

int
files_open_locked(const char *path, int wait, const char *what, int *created,
    char *err, size_t errlen)
{
	struct stat	 st;
	/* O_NONBLOCK: a FIFO must not block open(); it is refused below. */
	int		 fd, rc, fl = O_RDWR | O_APPEND | O_CLOEXEC |
			    O_NOFOLLOW | O_NOCTTY | O_NONBLOCK;

	for (;;) {
		*created = 1;
		if ((fd = open(path, fl | O_CREAT | O_EXCL, 0666)) == -1 &&
		    errno == EEXIST) {
			*created = 0;
			if ((fd = open(path, fl)) == -1 && errno == ENOENT)
				continue;	/* removed meanwhile */
		}
		if (fd == -1) {
			rc = -errno;
			snprintf(err, errlen, "cannot open %s '%s': %s",
			    what, path, strerror(errno));
			return rc;
		}
		if (fstat(fd, &st) == -1) {
			rc = -errno;
			snprintf(err, errlen, "cannot open %s '%s': %s",
			    what, path, strerror(errno));
			close(fd);
			return rc;
		}
		/* A FIFO or a device holds no past run and can block a
		 * write for ever (a reader that stops reading). */
		if (!S_ISREG(st.st_mode)) {
			snprintf(err, errlen, "%s '%s' is not a regular file",
			    what, path);
			close(fd);
			return -EINVAL;
		}
		if ((rc = files_lock(fd, F_WRLCK, wait, what, path, err,
		    errlen)) < 0) {
			close(fd);
			return rc;
		}
		/* The run we waited for may have removed or replaced it:
		 * lock what the path names now. */
		if (files_same(path, &st))
			break;
		close(fd);
	}
	return fd;
}

/* Whether path names the file st describes (path may not exist). */
int
files_same(const char *path, const struct stat *st)
{
	struct stat	 ps;

	return stat(path, &ps) == 0 && ps.st_dev == st->st_dev &&
	    ps.st_ino == st->st_ino;
}
