/*
 * fuzz_joblog.c: libFuzzer harness for the joblog reader and appender
 * (src/cli/joblog.c: joblog_load, joblog_open, joblog_append, joblog_done,
 * joblog_changed).
 *
 * The input (see fuzz_common.h for the 0xFF long-line mode) is an old
 * joblog, torn last line and all. joblog_load() opens with O_NOFOLLOW, so
 * a /proc/self/fd link will not do: the input goes to a file in a private
 * temporary directory made once per process (the only state kept; the
 * file is rewritten for every input and removed at exit). Checked:
 *   - loading never fails on content (only -ENOMEM may come back);
 *   - seen[] holds only 0, JL_SEEN or JL_SEEN|JL_OK, hash[] is nonzero
 *     exactly where seen[] is;
 *   - --resume's path: joblog_open(keep=1) on that file, joblog_append()
 *     of a new record, joblog_load() again: the new record is seen with
 *     its outcome and command, and every Seq seen before is still seen
 *     with the same outcome and command (ending a torn line must not eat
 *     or change a record).
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
#include <unistd.h>

#include "cli.h"
/* joblog.c grows its buffer to 2 MiB before it skips a line. */
#define EXPAND_MAX	((2u << 20) + (1u << 18))
#include "fuzz_common.h"

#define COMPARE_MAX	(1u << 20)	/* compare old/new up to this Seq */

static char	dir[256];
static char	path[300];

static void
cleanup(void)
{
	unlink(path);
	rmdir(dir);
}

static void
setup(void)
{
	const char	*tmp;

	if (dir[0] != '\0')
		return;
	if ((tmp = getenv("TMPDIR")) == NULL || strlen(tmp) > 200)
		tmp = "/tmp";
	snprintf(dir, sizeof(dir), "%s/fuzz_joblog.XXXXXX", tmp);
	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/joblog", dir);
	atexit(cleanup);
}

static void
check_tables(const struct joblog *j)
{
	size_t	 i;

	CHECK((j->nseen == 0) == (j->seen == NULL));
	for (i = 0; i < j->nseen; i++) {
		CHECK(j->seen[i] == 0 || j->seen[i] == JL_SEEN ||
		    j->seen[i] == (JL_SEEN | JL_OK));
		CHECK((j->seen[i] != 0) == (j->hash[i] != 0));
	}
	if (j->nseen > 0)
		CHECK(j->seen[0] == 0);		/* Seq starts at 1 */
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct joblog	 j;
	struct jl_rec	 r;
	char		 err[256], cmd[64];
	const uint8_t	*in;
	uint8_t		*owned, *seen = NULL;
	uint32_t	*hash = NULL;
	size_t		 n, ncmp, i;
	int		 fd, rc, ok;

	setup();
	in = fuzz_expand(data, size, &n, &owned);
	CHECK((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
	    0600)) >= 0);
	fuzz_write_all(fd, in, n);
	close(fd);
	free(owned);

	joblog_init(&j);
	err[0] = '\0';
	rc = joblog_load(&j, path, err, sizeof(err));
	CHECK(rc == 0 || rc == -ENOMEM);
	if (rc < 0) {
		joblog_release(&j);
		return 0;
	}
	check_tables(&j);
	ncmp = j.nseen < COMPARE_MAX ? j.nseen : COMPARE_MAX;
	if (ncmp > 0) {
		CHECK((seen = malloc(ncmp)) != NULL);
		CHECK((hash = malloc(ncmp * sizeof(*hash))) != NULL);
		memcpy(seen, j.seen, ncmp);
		memcpy(hash, j.hash, ncmp * sizeof(*hash));
	}
	joblog_release(&j);

	/* --resume: append one record to that same file, read it back. */
	memset(&r, 0, sizeof(r));
	r.seq = 1 + (size * 7919u + (size ? data[size - 1] : 0)) % 3000;
	ok = (size & 1) == 0;
	r.start = 1700000000.25;
	r.runtime = 1.5;
	r.exitval = ok ? 0 : 3;
	r.signal = 0;
	snprintf(cmd, sizeof(cmd), "echo fuzz %zu", size);
	r.cmd = cmd;
	r.gpu = "0";
	r.host = ":";
	joblog_init(&j);
	CHECK(joblog_open(&j, path, 1, err, sizeof(err)) == 0);
	CHECK(joblog_append(&j, &r) == 0);
	joblog_release(&j);

	joblog_init(&j);
	CHECK(joblog_load(&j, path, err, sizeof(err)) == 0);
	check_tables(&j);
	CHECK(joblog_done(&j, r.seq, 0));
	CHECK(joblog_done(&j, r.seq, 1) == ok);
	CHECK(!joblog_changed(&j, r.seq, cmd));
	for (i = 0; i < ncmp; i++) {
		if (i == r.seq || seen[i] == 0)
			continue;
		CHECK(i < j.nseen);
		CHECK(j.seen[i] == seen[i]);
		CHECK(j.hash[i] == hash[i]);
	}
	joblog_release(&j);
	free(seen);
	free(hash);
	return 0;
}
