/*
 * fuzz_tasks.c: libFuzzer harness for the tasks-file reader
 * (src/cli/master/tasks.c: tasks_open, tasks_next, tasks_scan, tasks_close).
 *
 * The input (see fuzz_common.h for the 0xFF long-line mode) is the tasks
 * file. It is written to a memfd and read through /proc/self/fd/N, as a
 * regular file, by tasks_next() and by tasks_scan(); inputs up to 64 KiB
 * are also read from a pipe (the pollable path). Checked:
 *   - every task is NUL-terminated at llen, holds no NUL, is at most
 *     LINE_MAX_BYTES, is not blank, and seq counts 1, 2, 3...;
 *   - first <= lineno, lines only go forward;
 *   - a regular file never answers TASKS_AGAIN; errors are -EINVAL with
 *     "name:line: what" in t->err;
 *   - tasks_scan() counts what tasks_next() returned, or fails the same;
 *   - the pipe gives the same tasks and the same outcome as the file.
 * Each input closes every fd it opened and frees what it allocated.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "master/master.h"
#include "fuzz_common.h"

struct outcome {
	int		 rc;		/* TASKS_EOF or the error */
	unsigned long	 ntasks;
	uint64_t	 digest;	/* over lines, seq and first */
	char		 err[256];
};

static uint64_t
mix(uint64_t h, const void *p, size_t n)
{
	const uint8_t	*b = p;
	size_t		 i;

	for (i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* Read every task of path. closefd (when >= 0) is closed once the file
 * is open: a pipe's write end, so that the reader then sees EOF. */
static void
read_all(const char *path, int regular, int closefd, struct outcome *o)
{
	struct tasks	 t;
	char		 err[256];
	unsigned long	 lastline = 0;
	int		 rc, again = 0;

	memset(o, 0, sizeof(*o));
	o->digest = 0xcbf29ce484222325ULL;
	rc = tasks_open(&t, path, err, sizeof(err));
	CHECK(rc == 0);
	if (closefd >= 0)
		close(closefd);
	CHECK(t.rd.regular == regular && t.rd.pollable == !regular);
	for (;;) {
		rc = tasks_next(&t);
		if (rc == TASKS_AGAIN) {
			/* A pipe whose writer is gone always has data or
			 * EOF: poll() cannot say "not ready" forever. */
			CHECK(!regular);
			CHECK(++again < 1000);
			continue;
		}
		if (rc != TASKS_LINE)
			break;
		CHECK(t.line != NULL);
		CHECK(t.llen <= LINE_MAX_BYTES);
		CHECK(t.line[t.llen] == '\0');
		CHECK(strlen(t.line) == t.llen);
		CHECK(t.llen > 0);
		CHECK(strspn(t.line, " \t") < t.llen);
		CHECK(t.seq == o->ntasks + 1);
		CHECK(t.first >= 1 && t.first <= t.lineno);
		CHECK(t.lineno >= lastline);
		CHECK(!t.joining);
		lastline = t.lineno;
		o->ntasks++;
		o->digest = mix(o->digest, t.line, t.llen + 1);
		o->digest = mix(o->digest, &t.first, sizeof(t.first));
	}
	o->rc = rc;
	if (rc < 0) {
		CHECK(rc == -EINVAL);
		CHECK(strncmp(t.err, t.name, strlen(t.name)) == 0);
		CHECK(t.err[strlen(t.name)] == ':');
		/* The line number in the message, for comparison. */
		snprintf(o->err, sizeof(o->err), "%s", t.err +
		    strlen(t.name));
	} else
		CHECK(rc == TASKS_EOF);
	tasks_close(&t);
	CHECK(t.rd.fd == -1 && t.rd.buf == NULL && t.line == NULL);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct outcome	 f, p;
	const uint8_t	*in;
	uint8_t		*owned;
	char		 path[64], err[256];
	size_t		 n;
	long		 count;
	int		 fd, pfd[2];

	in = fuzz_expand(data, size, &n, &owned);

	CHECK((fd = memfd_create("fuzz_tasks", MFD_CLOEXEC)) >= 0);
	fuzz_write_all(fd, in, n);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	read_all(path, 1, -1, &f);

	count = tasks_scan(path, NULL, NULL, err, sizeof(err));
	if (f.rc < 0)
		CHECK(count == f.rc);
	else
		CHECK(count == (long)f.ntasks);
	close(fd);

	/* The same bytes through a pipe: poll() + read() path. */
	if (n <= 65536) {
		CHECK(pipe2(pfd, O_CLOEXEC) == 0);
		if (fcntl(pfd[1], F_GETPIPE_SZ) >= (int)n) {
			fuzz_write_all(pfd[1], in, n);
			snprintf(path, sizeof(path), "/proc/self/fd/%d",
			    pfd[0]);
			/* Opened while our write end still exists (a FIFO
			 * open would wait for a writer), which read_all()
			 * then closes. */
			read_all(path, 0, pfd[1], &p);
			pfd[1] = -1;
			CHECK(p.rc == f.rc);
			CHECK(p.ntasks == f.ntasks);
			CHECK(p.digest == f.digest);
			CHECK(strcmp(p.err, f.err) == 0);
		}
		close(pfd[0]);
		if (pfd[1] >= 0)
			close(pfd[1]);
	}
	free(owned);
	/* tasks_open() notes each file it opens as an input of the run
	 * (files.c): one input's notes are not the next one's. */
	files_release();
	return 0;
}
