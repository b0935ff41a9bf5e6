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
 * or standard input itself is the same file. Never prints.
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

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
