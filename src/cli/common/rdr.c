/*
 * rdr.c: input read a chunk at a time and cut into records at a
 * delimiter: the tasks file's lines (tasks.c), and the arguments of a
 * :::: file, -a FILE or standard input (gridsrc.c), "\n" by default or
 * -d's or -0's delimiter. A pipe or terminal is read only after poll()
 * says it is ready, so that reading never blocks and never needs
 * O_NONBLOCK on a file description the parent shell shares; a regular
 * file is read as it comes. Owns only its buffer; never prints.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cli.h"

#define READ_CHUNK	65536

int
rdr_open(struct rdr *r, int fd)
{
	struct stat	 st;

	memset(r, 0, sizeof(*r));
	r->fd = fd;
	if (fstat(fd, &st) == -1)
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	r->pollable = S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) ||
	    S_ISSOCK(st.st_mode);
	r->regular = S_ISREG(st.st_mode);
	r->cap = READ_CHUNK;
	if ((r->buf = malloc(r->cap)) == NULL)
		return -ENOMEM;
	return 0;
}

void
rdr_close(struct rdr *r)
{
	if (r->fd > STDIN_FILENO)
		close(r->fd);
	r->fd = -1;
	free(r->buf);
	r->buf = NULL;
	r->off = r->len = r->cap = 0;
}

int
rdr_fill(struct rdr *r)
{
	struct pollfd	 pfd = { r->fd, POLLIN, 0 };
	size_t		 cap;
	ssize_t		 n;
	char		*b;
	int		 k;

	if (r->off > 0) {
		memmove(r->buf, r->buf + r->off, r->len - r->off);
		r->len -= r->off;
		r->off = 0;
	}
	if (r->cap - r->len < READ_CHUNK / 2) {
		cap = r->cap * 2;
		if ((b = realloc(r->buf, cap)) == NULL)
			return -ENOMEM;
		r->buf = b;
		r->cap = cap;
	}
	if (r->pollable) {
		do
			k = poll(&pfd, 1, 0);
		while (k == -1 && errno == EINTR);
		if (k == 0)
			return 0;
	}
	do
		n = read(r->fd, r->buf + r->len, r->cap - r->len);
	while (n == -1 && errno == EINTR);
	if (n == -1)
		return errno == EAGAIN ? 0 : -errno;
	if (n == 0)
		r->eof = 1;
	r->len += (size_t)n;
	return 1;
}

int
rdr_next(struct rdr *r, const char *delim, size_t dlen, size_t max,
    const char **p, size_t *n)
{
	const char	*s = r->buf + r->off, *e;
	size_t		 avail = r->len - r->off;

	e = dlen == 1 ? memchr(s, delim[0], avail) :
	    memmem(s, avail, delim, dlen);
	if (e != NULL && (size_t)(e - s) <= max) {
		*p = s;
		*n = (size_t)(e - s);
		r->off += *n + dlen;
		return 1;
	}
	/* No delimiter within max bytes: no record could hold them (and
	 * /dev/zero must not be read until memory runs out). */
	if (e != NULL || avail > max + dlen)
		return -E2BIG;
	if (!r->eof)
		return 0;
	if (avail == 0)
		return -1;
	*p = s;
	*n = avail;
	r->off = r->len;
	return 1;
}
