/*
 * fuzz_joblog.c: libFuzzer harness for the joblog reader and appender
 * (src/cli/master/joblog.c: joblog_load, joblog_open, joblog_append, joblog_done,
 * joblog_changed).
 *
 * The input (see fuzz_common.h for the 0xFF long-line mode) is an old
 * joblog, torn last line and all. joblog_load() opens with O_NOFOLLOW, so
 * a /proc/self/fd link will not do: the input goes to a file in a private
 * temporary directory made once per process (the only state kept; the
 * file is rewritten for every input and removed at exit). Checked:
 *   - what is no joblog (no header first, a line neither a record nor one
 *     a crash cut short) is refused, naming the file, never read as
 *     empty; the same bytes after a header are then loaded, so that the
 *     records are what is fuzzed;
 *   - the entries are sorted by Seq, one per Seq, each with a Seq from 1,
 *     a nonzero hash and ok 0 or 1 (memory follows the rows, whatever
 *     the Seqs: regress/joblog/big-seq);
 *   - --resume's path: joblog_open(keep=1) on that file, joblog_append()
 *     of a new record, joblog_load() again: the new record is seen with
 *     its outcome and command, and every Seq seen before is still seen
 *     with the same outcome and command (ending a torn line must not eat
 *     or change a record); a command made of the bytes the escaping
 *     is about (backslash, 't', 'n', TAB, newline) reads back as
 *     unchanged, and its Command field, unescaped, is the command; the
 *     record's line ends in its GPU, GPUMem and GPUUtil columns ('-'
 *     for unknown), twelve fields in all; or, appended to GNU parallel's
 *     nine columns, is nine: the Command the rest of the line, raw but
 *     for a newline written \n (which then reads back as another
 *     command: parallel's format has no newline).
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

#include "master/master.h"
/* joblog.c grows its buffer to 2 MiB before it skips a line. */
#define EXPAND_MAX	((2u << 20) + (1u << 18))
/* gpupool-run's joblog header. */
#define HEADER	"Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\tExitval\t" \
	"Signal\tCommand\tGPU\tGPUMem\tGPUUtil\tPeakRSS\n"
#include "fuzz_common.h"

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

	CHECK((j->nent == 0) || j->ent != NULL);
	for (i = 0; i < j->nent; i++) {
		CHECK(j->ent[i].seq >= 1);
		CHECK(i == 0 || j->ent[i - 1].seq < j->ent[i].seq);
		CHECK(j->ent[i].ok == 0 || j->ent[i].ok == 1);
		CHECK(j->ent[i].hash != 0);
		CHECK(joblog_done(j, j->ent[i].seq, 0));
		CHECK(joblog_done(j, j->ent[i].seq, 1) == (int)j->ent[i].ok);
	}
}

/* The last line's part after its eighth TAB (at most 512 bytes), as
 * GNU parallel's joblog holds the command: with its newlines as \n. */
static int
raw_is(const char *tail, const char *cmd)
{
	const char	*f = tail;
	int		 k;

	for (k = 0; k < 8; k++) {
		CHECK((f = strchr(f, '\t')) != NULL);
		f++;
	}
	for (; *cmd; cmd++, f++)
		if (*cmd == '\n' ? f[0] != '\\' || *++f != 'n' : *f != *cmd)
			return 0;
	return *f == '\n' || *f == '\0';
}

/* The file's last line is r's: thirteen fields, ending in its GPU,
 * GPUMem, GPUUtil and PeakRSS (unknown); or parallel's nine (nine). */
static void
check_last_line(const struct attempt *r, int nine)
{
	char		 tail[512], want[96], m[24], u[24], *l;
	off_t		 end;
	ssize_t		 n;
	size_t		 wl;
	int		 fd, tabs = 0;

	CHECK((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0);
	CHECK((end = lseek(fd, 0, SEEK_END)) > 0);
	n = pread(fd, tail, sizeof(tail) - 1,
	    end > (off_t)sizeof(tail) - 1 ? end - (off_t)sizeof(tail) + 1 : 0);
	close(fd);
	/* The bytes before may be anything, NULs included. */
	CHECK(n > 0 && tail[n - 1] == '\n');
	CHECK((l = memrchr(tail, '\n', (size_t)n - 1)) != NULL);
	if (nine) {
		tail[n] = '\0';
		CHECK(raw_is(l + 1, r->cmd));
		return;
	}
	for (l++; l < tail + n - 1; l++)
		tabs += *l == '\t';
	CHECK(tabs == 12);
	snprintf(m, sizeof(m), "%llu", (unsigned long long)(r->gpu_mem >> 20));
	snprintf(u, sizeof(u), "%d", r->gpu_util);
	wl = (size_t)snprintf(want, sizeof(want), "\t%s\t%s\t%s\t-\n", r->gpu,
	    r->gpu_mem == 0 ? "-" : m, r->gpu_util < 0 ? "-" : u);
	CHECK((size_t)n >= wl && memcmp(tail + n - wl, want, wl) == 0);
}

/* The Command field of the file's last line (whose tail is at most 512
 * bytes), unescaped, is cmd. */
static void
check_command(const char *cmd, int nine)
{
	char	 tail[512], *l, *f;
	off_t	 end;
	ssize_t	 n;
	int	 fd, k;

	CHECK((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0);
	CHECK((end = lseek(fd, 0, SEEK_END)) > 0);
	n = pread(fd, tail, sizeof(tail) - 1,
	    end > (off_t)sizeof(tail) - 1 ? end - (off_t)sizeof(tail) + 1 : 0);
	close(fd);
	CHECK(n > 1);
	tail[n - 1] = '\0';
	CHECK((l = memrchr(tail, '\n', (size_t)n - 1)) != NULL);
	if (nine)
		return;		/* check_last_line() read it */
	for (f = l + 1, k = 0; k < 8; k++) {
		CHECK((f = strchr(f, '\t')) != NULL);
		f++;
	}
	CHECK((l = strchr(f, '\t')) != NULL);
	*l = '\0';
	joblog_unesc(f);
	CHECK(strcmp(f, cmd) == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct joblog	 j;
	struct attempt	 r;
	char		 err[256], cmd[64];
	const uint8_t	*in;
	uint8_t		*owned;
	struct jl_ent	*old = NULL;
	size_t		 n, nold, i, k, rows = 1;
	int		 fd, rc, ok, nine;

	setup();
	in = fuzz_expand(data, size, &n, &owned);
	CHECK((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
	    0600)) >= 0);
	fuzz_write_all(fd, in, n);
	close(fd);
	for (i = 0; i < n; i++)
		rows += in[i] == '\n';
	free(owned);

	joblog_init(&j);
	err[0] = '\0';
	rc = joblog_load(&j, path, err, sizeof(err));
	/* What is no joblog is refused, naming it, never read as empty;
	 * then the same bytes after a header, so that the records behind
	 * it are what is fuzzed. */
	if (rc == -EINVAL) {
		CHECK(strstr(err, path) != NULL && strstr(err,
		    "not resuming") != NULL);
		CHECK(j.nent == 0 || n > 0);
		joblog_release(&j);
		CHECK((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC |
		    O_CLOEXEC, 0600)) >= 0);
		fuzz_write_all(fd, (const uint8_t *)HEADER, sizeof(HEADER) - 1);
		in = fuzz_expand(data, size, &n, &owned);
		fuzz_write_all(fd, in, n);
		free(owned);
		close(fd);
		rows++;
		joblog_init(&j);
		rc = joblog_load(&j, path, err, sizeof(err));
		CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
		if (rc == -EINVAL)
			CHECK(strstr(err, "not resuming") != NULL);
	} else
		CHECK(rc == 0 || rc == -ENOMEM);
	if (rc < 0) {
		joblog_release(&j);
		return 0;
	}
	check_tables(&j);
	/* Memory follows the rows, whatever their Seqs. */
	CHECK(j.cap <= 1024 || j.cap <= 4 * rows);
	nold = j.nent;
	if (nold > 0) {
		CHECK((old = malloc(nold * sizeof(*old))) != NULL);
		memcpy(old, j.ent, nold * sizeof(*old));
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
	/* The first bytes of the input pick the command's characters among
	 * those its escaping is about. */
	k = (size_t)snprintf(cmd, sizeof(cmd), "echo%sfuzz %zu ",
	    size & 2 ? "\t" : " ", size);
	for (i = 0; i < size && i < 24; i++)
		cmd[k++] = "\\tn\t\nx"[data[i] % 6];
	cmd[k] = '\0';
	r.cmd = cmd;
	r.gpu = "0";
	r.host = ":";
	r.gpu_mem = size % 3 == 0 ? 0 : (uint64_t)size * 31 << 20;
	r.gpu_util = size % 5 == 0 ? -1 : (int)(size % 101);
	joblog_init(&j);
	CHECK(joblog_open(&j, path, 1, err, sizeof(err)) == 0);
	CHECK(joblog_append(&j, &r) == 0);
	nine = j.fmt == 9;
	joblog_release(&j);
	check_last_line(&r, nine);
	check_command(cmd, nine);

	joblog_init(&j);
	CHECK(joblog_load(&j, path, err, sizeof(err)) == 0);
	check_tables(&j);
	CHECK(joblog_done(&j, r.seq, 0));
	CHECK(joblog_done(&j, r.seq, 1) == ok);
	CHECK(!joblog_changed(&j, r.seq, cmd) || (nine && strchr(cmd, '\n')));
	for (i = 0; i < nold; i++) {
		if (old[i].seq == r.seq)
			continue;
		CHECK(joblog_done(&j, old[i].seq, 0));
		CHECK(joblog_done(&j, old[i].seq, 1) == (int)old[i].ok);
	}
	joblog_release(&j);
	free(old);
	return 0;
}
