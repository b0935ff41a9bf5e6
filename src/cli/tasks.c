/*
 * tasks.c: the tasks file, read a piece at a time so that a file of any
 * length runs in bounded memory and a pipe (tail -f queue.txt | ...) runs
 * each task as soon as its line is complete. Owns only its buffers; never
 * prints (errors are left in t->err as "file:line: what"). Assumes input
 * from a pipe or tty is read only after poll() said it is ready, so that
 * it never blocks and never has to set O_NONBLOCK on a file description
 * it shares with the parent shell. A grid (grid.c) is the other source of
 * tasks behind the same calls: its rows, expanded one at a time.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

#define READ_CHUNK	65536

int
tasks_open(struct tasks *t, const char *path, char *err, size_t errlen)
{
	struct stat	 st;
	int		 rc;

	memset(t, 0, sizeof(*t));
	t->fd = -1;
	if (strcmp(path, "-") == 0) {
		t->name = "<stdin>";
		t->fd = STDIN_FILENO;
	} else {
		t->name = path;
		t->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
		if (t->fd == -1) {
			rc = -errno;
			snprintf(err, errlen, "cannot open '%s': %s", path,
			    strerror(-rc));
			return rc;
		}
	}
	rc = fstat(t->fd, &st) == -1 ? -errno : S_ISDIR(st.st_mode) ?
	    -EISDIR : 0;
	if (rc < 0) {
		snprintf(err, errlen, "cannot read '%s': %s", t->name,
		    strerror(-rc));
		tasks_close(t);
		return rc;
	}
	if ((rc = files_note(FILE_IN, "tasks file", t->fd == STDIN_FILENO ?
	    NULL : path, t->fd, err, errlen)) < 0) {
		tasks_close(t);
		return rc;
	}
	t->pollable = S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) ||
	    S_ISSOCK(st.st_mode);
	t->regular = S_ISREG(st.st_mode);
	t->cap = READ_CHUNK;
	t->lcap = 256;
	if ((t->buf = malloc(t->cap)) == NULL ||
	    (t->line = malloc(t->lcap)) == NULL) {
		tasks_close(t);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

int
tasks_open_grid(struct tasks *t, const struct grid *g)
{
	memset(t, 0, sizeof(*t));
	t->fd = -1;
	t->name = "grid";
	t->grid = g;
	t->lcap = 256;
	if ((t->line = malloc(t->lcap)) == NULL)
		return -ENOMEM;
	return 0;
}

void
tasks_close(struct tasks *t)
{
	if (t->fd > STDIN_FILENO)
		close(t->fd);
	t->fd = -1;
	free(t->buf);
	free(t->line);
	t->buf = t->line = NULL;
}

static int
fail(struct tasks *t, int rc, unsigned long line, const char *what)
{
	snprintf(t->err, sizeof(t->err), "%s:%lu: %s", t->name, line, what);
	return rc;
}

/* More bytes into buf. Returns 1 (read some, or EOF now set),
 * TASKS_AGAIN, or -errno. */
static int
fill(struct tasks *t)
{
	struct pollfd	 pfd = { t->fd, POLLIN, 0 };
	size_t		 cap;
	ssize_t		 r;
	char		*b;
	int		 n;

	if (t->off > 0) {
		memmove(t->buf, t->buf + t->off, t->len - t->off);
		t->len -= t->off;
		t->off = 0;
	}
	if (t->cap - t->len < READ_CHUNK / 2) {
		cap = t->cap * 2;
		if ((b = realloc(t->buf, cap)) == NULL) {
			snprintf(t->err, sizeof(t->err), "out of memory");
			return -ENOMEM;
		}
		t->buf = b;
		t->cap = cap;
	}
	if (t->pollable) {
		do
			n = poll(&pfd, 1, 0);
		while (n == -1 && errno == EINTR);
		if (n == 0)
			return TASKS_AGAIN;
	}
	do
		r = read(t->fd, t->buf + t->len, t->cap - t->len);
	while (r == -1 && errno == EINTR);
	if (r == -1) {
		if (errno == EAGAIN)
			return TASKS_AGAIN;
		n = -errno;
		snprintf(t->err, sizeof(t->err), "cannot read '%s': %s",
		    t->name, strerror(errno));
		return n;
	}
	if (r == 0)
		t->eof = 1;
	t->len += (size_t)r;
	return 1;
}

static int
blank(const char *p, size_t n)
{
	size_t	 i;

	for (i = 0; i < n; i++)
		if (p[i] != ' ' && p[i] != '\t')
			return 0;
	return 1;
}

/* One physical line (no '\n'). Returns TASKS_LINE when it ends a task,
 * 0 when it was skipped or continues, or -EINVAL. */
static int
take(struct tasks *t, const char *p, size_t n)
{
	struct task_need nd;
	size_t		 k, i, cap;
	char		*l, why[160];
	int		 off;

	if (n > 0 && p[n - 1] == '\r')
		n--;
	if (memchr(p, '\0', n) != NULL)
		return fail(t, -EINVAL, t->lineno, "NUL byte in the line");
	if (!t->joining) {
		for (i = 0; i < n && (p[i] == ' ' || p[i] == '\t'); i++)
			;
		if (i == n || p[i] == '#')
			return 0;
		t->first = t->lineno;
		t->llen = 0;
	}
	/* An odd run of trailing backslashes continues the line (the
	 * shell's rule: "\\" at the end is an escaped backslash). */
	for (k = 0; k < n && p[n - 1 - k] == '\\'; k++)
		;
	t->joining = k & 1;
	if (t->joining)
		n--;
	if (t->llen + n > LINE_MAX_BYTES)
		return fail(t, -EINVAL, t->first, "task longer than 1 MiB");
	if (t->llen + n + 1 > t->lcap) {
		for (cap = t->lcap; cap < t->llen + n + 1; cap *= 2)
			;
		if ((l = realloc(t->line, cap)) == NULL) {
			snprintf(t->err, sizeof(t->err), "out of memory");
			return -ENOMEM;
		}
		t->line = l;
		t->lcap = cap;
	}
	memcpy(t->line + t->llen, p, n);
	t->llen += n;
	t->line[t->llen] = '\0';
	if (t->joining || blank(t->line, t->llen))
		return 0;
	if ((off = need_parse(t->line, &nd, why, sizeof(why))) < 0)
		return fail(t, -EINVAL, t->first, why);
	t->cmd = (size_t)off;
	t->seq++;
	return TASKS_LINE;
}

/* The grid's next row as the task. */
static int
grid_next(struct tasks *t)
{
	struct gp_buf	 b = { (uint8_t *)t->line, 0, 0, t->lcap };
	struct task_need nd;
	char		 why[200];
	int		 rc;

	if (t->seq >= t->grid->nrow) {
		t->eof = 1;
		return TASKS_EOF;
	}
	t->lineno = t->first = t->seq + 1;
	rc = grid_line(t->grid, t->first, &b, why, sizeof(why));
	t->line = (char *)b.data;	/* grown, or as it was */
	t->lcap = b.cap;
	if (rc < 0)
		return fail(t, rc, t->first, why);
	t->llen = b.len - 1;
	if (t->llen > LINE_MAX_BYTES)
		return fail(t, -EINVAL, t->first, "task longer than 1 MiB");
	if ((rc = need_parse(t->line, &nd, why, sizeof(why))) < 0)
		return fail(t, -EINVAL, t->first, why);
	t->cmd = (size_t)rc;
	t->seq++;
	return TASKS_LINE;
}

int
tasks_next(struct tasks *t)
{
	const char	*p, *nl;
	size_t		 n;
	int		 rc;

	if (t->grid != NULL)
		return grid_next(t);
	for (;;) {
		p = t->buf + t->off;
		n = t->len - t->off;
		if ((nl = memchr(p, '\n', n)) == NULL && !t->eof) {
			if (t->llen + n > LINE_MAX_BYTES + 1)
				return fail(t, -EINVAL, t->joining ? t->first :
				    t->lineno + 1, "task longer than 1 MiB");
			if ((rc = fill(t)) != 1)
				return rc;
			continue;
		}
		if (nl == NULL && n == 0) {
			if (t->joining)
				return fail(t, -EINVAL, t->lineno,
				    "unterminated '\\' continuation at end of "
				    "file");
			return TASKS_EOF;
		}
		if (nl != NULL)
			n = (size_t)(nl - p);
		t->off += nl != NULL ? n + 1 : n;
		t->lineno++;
		if ((rc = take(t, p, n)) != 0)
			return rc;
	}
}

long
tasks_scan(const char *path, int (*skip)(void *, unsigned long, const char *),
    void *arg, char *err, size_t errlen)
{
	struct tasks	 t;
	long		 count = 0;
	int		 rc;

	if ((rc = tasks_open(&t, path, err, errlen)) < 0)
		return rc;
	while ((rc = tasks_next(&t)) == TASKS_LINE)
		if (skip == NULL || !skip(arg, t.seq, t.line + t.cmd))
			count++;
	if (rc < 0)
		snprintf(err, errlen, "%s", t.err);
	tasks_close(&t);
	return rc < 0 ? rc : count;
}
