/*
 * fuzz_common.h: helpers shared by the gpupool fuzz harnesses.
 *
 * Long-line mode: an input that starts with the byte 0xFF and has at
 * least 4 bytes is expanded before use: bytes 1..2 are a little-endian
 * count c, and the rest (the body) is written (c + 1) times, at most
 * EXPAND_MAX bytes in all. A '\n' in the body is kept only in every
 * KEEP_NL-th copy and in the last one (elsewhere it becomes ' '), so the
 * expansion is a few long lines, not a million short ones that would
 * make every such input slow. Text inputs never start with 0xFF, so the
 * plain corpus is unaffected; this lets a 1 KB seed reach the 1 MiB line
 * limits of tasks.c and joblog.c.
 */
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef EXPAND_MAX
#define EXPAND_MAX	((1u << 20) + (1u << 18))	/* just over 1 MiB */
#endif
#define KEEP_NL		512

#define CHECK(c) do {							\
	if (!(c)) {							\
		fprintf(stderr, "%s:%d: invariant failed: %s\n",	\
		    __FILE__, __LINE__, #c);				\
		abort();						\
	}								\
} while (0)

/* The bytes the parser should see: data itself, or a malloc'd expansion
 * (*owned set). */
static inline const uint8_t *
fuzz_expand(const uint8_t *data, size_t size, size_t *outlen, uint8_t **owned)
{
	size_t	 reps, body, i, n;
	uint8_t	*p, *flat, *q;

	*owned = NULL;
	*outlen = size;
	if (size < 4 || data[0] != 0xff)
		return data;
	reps = ((size_t)data[1] | (size_t)data[2] << 8) + 1;
	body = size - 3;
	if (reps > EXPAND_MAX / body)
		reps = EXPAND_MAX / body;
	if (reps == 0)
		reps = 1;
	n = reps * body;
	CHECK((p = malloc(n)) != NULL);
	/* The body without its newlines, made once, then copied: a loop
	 * over every byte here would be instrumented and slow. */
	CHECK((flat = malloc(body)) != NULL);
	memcpy(flat, data + 3, body);
	for (q = memchr(flat, '\n', body); q != NULL;
	    q = memchr(q + 1, '\n', body - (size_t)(q + 1 - flat)))
		*q = ' ';
	for (i = 0; i < reps; i++)
		memcpy(p + i * body, (i + 1) % KEEP_NL == 0 || i + 1 == reps ?
		    data + 3 : flat, body);
	free(flat);
	*owned = p;
	*outlen = n;
	return p;
}

static inline void
fuzz_write_all(int fd, const uint8_t *p, size_t n)
{
	ssize_t	 w;

	while (n > 0) {
		w = write(fd, p, n);
		CHECK(w > 0);
		p += w;
		n -= (size_t)w;
	}
}

#endif /* FUZZ_COMMON_H */
