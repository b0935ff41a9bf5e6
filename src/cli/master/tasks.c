/*
 * tasks.c: the tasks file, read a piece at a time (rdr.c) so that a file
 * of any length runs in bounded memory and a pipe (tail -f queue.txt |
 * ...) runs each task as soon as its line is complete. Owns only its
 * buffers; never prints (errors are left in t->err as "file:line:
 * what"). A grid (grid.c) is the other source of tasks behind the same
 * calls: its tasks, expanded one at a time, and a lone source from a
 * pipe read here as they come; and --retry-failed's, the failed tasks a
 * joblog records, with their Seqs and commands.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "master/master.h"

int
tasks_open(struct tasks *t, const char *path, char *err, size_t errlen)
{
	int		 fd, rc;

	memset(t, 0, sizeof(*t));
	t->rd.fd = -1;
	if (strcmp(path, "-") == 0) {
		t->name = "<stdin>";
		fd = STDIN_FILENO;
	} else {
		t->name = path;
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
		if (fd == -1) {
			rc = -errno;
			snprintf(err, errlen, "cannot open '%s': %s", path,
			    strerror(-rc));
			return rc;
		}
	}
	if ((rc = rdr_open(&t->rd, fd)) < 0) {
		if (rc == -ENOMEM)
			snprintf(err, errlen, "out of memory");
		else
			snprintf(err, errlen, "cannot read '%s': %s", t->name,
			    strerror(-rc));
		tasks_close(t);
		return rc;
	}
	if ((rc = files_note(FILE_IN, "tasks file", fd == STDIN_FILENO ?
	    NULL : path, fd, err, errlen)) < 0) {
		tasks_close(t);
		return rc;
	}
	t->lcap = 256;
	if ((t->line = malloc(t->lcap)) == NULL) {
		tasks_close(t);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

int
tasks_open_grid(struct tasks *t, struct grid *g)
{
	int	 rc;

	memset(t, 0, sizeof(*t));
	t->rd.fd = -1;
	t->name = "grid";
	t->grid = g;
	t->lcap = 256;
	if ((t->line = malloc(t->lcap)) == NULL)
		return -ENOMEM;
	/* A lone source from a pipe: read as the run goes, its fd the
	 * input the run polls. */
	if (g->stream) {
		if ((rc = rdr_open(&t->rd, g->sfd)) < 0)
			return rc;
		g->sfd = -1;	/* t's now */
		t->name = t->rd.fd == STDIN_FILENO ? "<stdin>" :
		    g->src[0].what;
	}
	return 0;
}

int
tasks_open_list(struct tasks *t, const struct joblog *j)
{
	memset(t, 0, sizeof(*t));
	t->rd.fd = -1;
	t->name = j->path;
	t->jl = j;
	return 0;
}

void
tasks_close(struct tasks *t)
{
	rdr_close(&t->rd);
	free(t->line);
	t->line = NULL;
}

static int
fail(struct tasks *t, int rc, unsigned long line, const char *what)
{
	snprintf(t->err, sizeof(t->err), "%s:%lu: %s", t->name, line, what);
	return rc;
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
	t->nth++;
	return TASKS_LINE;
}

/* The grid's next task: when its rows are there (a stream read as it
 * comes: TASKS_AGAIN until they are). */
static int
grid_next(struct tasks *t)
{
	struct grid	*g = t->grid;
	struct gp_buf	 b = { (uint8_t *)t->line, 0, 0, t->lcap };
	struct task_need nd;
	char		 why[200];
	int		 rc;

	while (t->seq >= g->nrow) {
		if (!g->stream || g->ended) {
			t->rd.eof = 1;
			return TASKS_EOF;
		}
		if ((rc = gridsrc_feed(g, &t->rd, why, sizeof(why))) < 0 ||
		    (rc > 0 && (rc = grid_grown(g, why, sizeof(why))) < 0)) {
			snprintf(t->err, sizeof(t->err), "%s", why);
			return rc;
		}
		if (rc == 0 && t->seq >= g->nrow && !g->ended)
			return TASKS_AGAIN;
	}
	t->lineno = t->first = t->seq + 1;
	rc = grid_line(g, t->first, &b, why, sizeof(why));
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
	t->nth++;
	return TASKS_LINE;
}

/* --retry-failed: the next task the joblog records as failed, by its
 * Seq and its command there. */
static int
list_next(struct tasks *t)
{
	const struct jl_ent	*e;
	struct task_need	 nd;
	char			 why[200];
	size_t			 n;
	int			 rc;

	do
		if (t->at >= t->jl->nent) {
			t->rd.eof = 1;
			return TASKS_EOF;
		}
	while ((e = &t->jl->ent[t->at++])->ok || e->cmd == NULL);
	n = strlen(e->cmd);
	if (n + 1 > t->lcap) {
		free(t->line);
		t->lcap = n + 1;
		if ((t->line = malloc(t->lcap)) == NULL) {
			t->lcap = 0;
			snprintf(t->err, sizeof(t->err), "out of memory");
			return -ENOMEM;
		}
	}
	memcpy(t->line, e->cmd, n + 1);
	t->llen = n;
	t->seq = e->seq;
	t->lineno = t->first = e->seq;
	if ((rc = need_parse(t->line, &nd, why, sizeof(why))) < 0)
		return fail(t, -EINVAL, t->first, why);
	t->cmd = (size_t)rc;
	t->nth++;
	return TASKS_LINE;
}

int
tasks_next(struct tasks *t)
{
	const char	*p;
	size_t		 n;
	int		 rc;

	if (t->grid != NULL)
		return grid_next(t);
	if (t->jl != NULL)
		return list_next(t);
	for (;;) {
		rc = rdr_next(&t->rd, "\n", 1, LINE_MAX_BYTES + 1, &p, &n);
		if (rc == -E2BIG)
			return fail(t, -EINVAL, t->joining ? t->first :
			    t->lineno + 1, "task longer than 1 MiB");
		if (rc == 0) {
			if ((rc = rdr_fill(&t->rd)) == 1)
				continue;
			if (rc < 0)
				snprintf(t->err, sizeof(t->err), rc == -ENOMEM ?
				    "out of memory" : "cannot read '%s': %s",
				    t->name, strerror(-rc));
			return rc == 0 ? TASKS_AGAIN : rc;
		}
		if (rc == -1) {
			if (t->joining)
				return fail(t, -EINVAL, t->lineno,
				    "unterminated '\\' continuation at end of "
				    "file");
			return TASKS_EOF;
		}
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
	off_t		 off;
	int		 rc, fd = -1;

	if ((rc = tasks_open(&t, path, err, errlen)) < 0)
		return rc;
	/* Standard input's own descriptor shares its offset with the run's
	 * reads (and the shell's): the scan reads a description of its own,
	 * from where standard input is now. */
	if (t.rd.fd == STDIN_FILENO && ((fd = open("/proc/self/fd/0", O_RDONLY |
	    O_CLOEXEC)) == -1 || (off = lseek(STDIN_FILENO, 0, SEEK_CUR)) == -1 ||
	    lseek(fd, off, SEEK_SET) == -1)) {
		rc = -errno;
		snprintf(err, errlen, "cannot read standard input twice: %s",
		    strerror(errno));
		if (fd >= 0)
			close(fd);
		tasks_close(&t);
		return rc;
	}
	if (t.rd.fd == STDIN_FILENO)
		t.rd.fd = fd;
	while ((rc = tasks_next(&t)) == TASKS_LINE)
		if (skip == NULL || !skip(arg, t.seq, t.line + t.cmd))
			count++;
	if (rc < 0)
		snprintf(err, errlen, "%s", t.err);
	tasks_close(&t);
	return rc < 0 ? rc : count;
}
