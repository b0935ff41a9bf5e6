/*
 * cli.h: gpupool-run, the command-line tool on top of libgpupool: what
 * every process of it shares (src/cli/README.md: the folders). The
 * tool's processes each have a header that includes this one:
 * master/master.h (the run: rank 0's master and each rank's),
 * worker/worker.h (a pool worker running a task) and ranks/ranks.h (the
 * ranks' transport and the MPI process); options/opts.h and
 * parallel/parallel.h are the command line and GNU parallel's input
 * language. This one holds the pure helpers (input records, task tags,
 * the running median), messages (say.c), the run's files (files.c) and
 * the bytes between processes (a task, its reply, live output, the rank
 * messages), with their one encoder and decoder (rproto.c). Grouped by
 * the file that holds each declaration (as OpenBSD's imsg.h does).
 * Functions return 0 (or a documented count) on success and a negative
 * errno value on failure; they never print, except where a comment says
 * so. Never installed.
 */
#ifndef GP_CLI_H
#define GP_CLI_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <signal.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "gpupool.h"
#include "../../io.h"

#define CLI_NAME	"gpupool-run"
#define LINE_MAX_BYTES	(1u << 20)	/* longest task line (joined) */
#define OUTPUT_MAX	(16u << 20)	/* captured bytes per stream */
#define EXIT_FATAL	255		/* the exit status of a run that
					   failed as a whole */

/* rdr.c: input read a chunk at a time and cut into records. */
struct rdr {
	int		 fd;		/* -1: none */
	int		 pollable;	/* a pipe or tty: read only if ready */
	int		 regular;	/* a regular file: can be scanned */
	int		 eof;
	char		*buf;		/* raw bytes read, buf[off..len) unseen */
	size_t		 off, len, cap;
};

/* A reader on fd (r owns it from now: rdr_close() closes it unless it is
 * 0). 0, -EISDIR, -ENOMEM or -errno of fstat(). */
int	rdr_open(struct rdr *r, int fd);
void	rdr_close(struct rdr *r);
/* More bytes: 1 (read some, or r->eof now set), 0 (a pollable fd has
 * none now), or -errno. */
int	rdr_fill(struct rdr *r);
/* The next record, ended by delim (dlen bytes, not part of it), at
 * most max bytes: 1 with *p and *n (pointing into the buffer, valid until
 * the next call), 0 (none whole yet: rdr_fill()), -1 (nothing left at
 * EOF; bytes after the last delimiter were the last record), or -E2BIG
 * (no delimiter within max bytes). */
int	rdr_next(struct rdr *r, const char *delim, size_t dlen, size_t max,
	    const char **p, size_t *n);

/* need.c: what a task needs of the GPUs: a tag at the start of its
 * line ("[mem=20G gpus=2] cmd"), and the values of --mem and
 * --gpus-per-task. Pure; messages are for the caller to prefix with the
 * file and line or the option. */
#define NEED_GPUS_MAX	1024

struct task_need {
	uint64_t	 mem;		/* GPU memory, bytes per GPU; 0: not
					   given */
	int		 gpus;		/* GPUs; 0: not given */
};

/* The tag at the start of line, if any (after blanks; only a '['
 * followed at once by a lower-case key and '=' starts one: "[ -f x ]"
 * and "[[" are commands): keys mem=SIZE and gpus=N, in any order,
 * blank-separated, each at most once, up to ']'; the blanks after it
 * are skipped. Returns the offset of the command in line (0 and *nd
 * zeroed without a tag), or -EINVAL with err saying why: an unknown
 * key, a bad value, no ']', no command. */
int	need_parse(const char *line, struct task_need *nd, char *err,
	    size_t errlen);
/* A GPU count, s[0..n): 1 to NEED_GPUS_MAX. 0 and *gpus, or -EINVAL
 * with *why a static string. */
int	need_gpus(const char *s, size_t n, int *gpus, const char **why);

/* gp_feed.need for gpupool-run's items (a struct task_hdr, then the
 * task's line): its tag's mem and gpus, else mem and gpus (--mem's and
 * --gpus-per-task's). */
void	need_for_item(uint64_t mem, int gpus, const struct gp_item *it,
	    struct gp_need *need);
/* Write a tag declaring mem bytes (rounded up to MiB) and the line's
 * own gpus= into line (a tagged or untagged task line of len bytes) as
 * a new line in out (outcap bytes). Returns the new line's length, or
 * -ENOSPC. */
int	need_retag(const char *line, uint64_t mem, char *out, size_t outcap);

/* median.c: the running median of a stream of values (two heaps), for
 * --timeout N%. */
struct median {
	double		*lo;		/* max-heap: the lower half */
	double		*hi;		/* max-heap of the negated upper half */
	size_t		 nlo, nhi, cap;
};

/* Add v. 0, or -ENOMEM (m is as it was). */
int	median_add(struct median *m, double v);
/* The median of the values added (the lower one of an even count, as GNU
 * parallel takes it), or -1 when none was. */
double	median_get(const struct median *m);
/* Free m's arrays; m is empty again. */
void	median_release(struct median *m);

#define SHELL_MAX	4096		/* the shell's path, with its NUL */

/* say.c: messages, git style ("gpupool-run: ..." on stderr), from any
 * part of the tool; they print, as their names say. */
void	out_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void	out_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void	out_verr(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
/* While a run owns the streams (output.c's out_attach()), each message
 * first calls before(arg) (it clears a bar; the rank to name, 0: none),
 * then line(arg) takes the line in place of a write to stderr. NULLs:
 * none again. */
typedef int	say_before_fn(void *arg);
typedef void	say_write_fn(void *arg, const void *p, size_t n);
void	say_through(say_before_fn *before, say_write_fn *line, void *arg);

/* Between a master and its workers: the run's settings a worker gets
 * when the pool forks it (struct run_conf), then per task a struct
 * task_hdr, the task's line and a NUL; a worker runs it in a process
 * group of its own (spawn.c) and replies with a struct task_reply
 * followed by the captured stdout, stderr, a message and the GPUs it
 * held. rproto.c encodes and decodes both, and is the only code that
 * reads or writes their bytes. */
struct run_conf {
	uint64_t	 timeout_ms;	/* 0: none */
	uint64_t	 grace_ms;	/* TERM to KILL */
	int32_t		 results_fd;	/* inherited dir fd, or -1 */
	int32_t		 rank;		/* GPUPOOL_RANK */
	int32_t		 mpi;		/* drop MPI's variables from tasks */
	int32_t		 grid;		/* tasks of a grid: {%} is the slot */
	int32_t		 live_fd;	/* live output's channel (live.c), or
					   -1: output comes with the reply */
	int32_t		 threads;	/* --threads: 0 its CPUs, -1 none, N */
	char		 shell[SHELL_MAX];	/* what runs a task's line
					   that needs a shell: popt_shell() */
};

struct task_hdr {
	uint64_t	 seq;
	uint32_t	 attempt;	/* 1-based */
	uint32_t	 cmdlen;	/* bytes after the header, plus a NUL */
	uint64_t	 timeout_ms;	/* its own limit (--timeout N%); 0: the
					   run's, run_conf's */
};

enum reply_flags {
	R_TIMEDOUT = (1 << 0),		/* our deadline fired */
	R_STOPPED = (1 << 1),		/* the master asked to stop it */
	R_NOSTART = (1 << 2),		/* could not be started (see msg) */
	R_OUTCUT = (1 << 3),		/* stdout over OUTPUT_MAX: cut */
	R_ERRCUT = (1 << 4),		/* stderr over OUTPUT_MAX: cut */
	R_NORESULT = (1 << 5),		/* --results files not written (msg) */
};

struct task_reply {
	int32_t		 exitval;	/* exit code, -1 if signaled */
	int32_t		 signal;	/* 0, or the signal that ended it */
	int32_t		 flags;		/* enum reply_flags */
	int32_t		 pad;
	int64_t		 start_ns;	/* CLOCK_REALTIME at spawn */
	int64_t		 run_ns;	/* CLOCK_MONOTONIC, spawn to exit */
	uint64_t	 outlen, errlen, msglen;
	uint64_t	 outcut, errcut;	/* bytes dropped */
	uint64_t	 gpuslen;	/* after msg: the GPUs it held, when
					   more than its worker's own (their
					   CUDA_VISIBLE_DEVICES) */
	uint64_t	 gpu_mem;	/* peak GPU memory, bytes, and */
	int32_t		 gpu_util;	/* mean % (-1: unknown), from the
					   master's monitor: rp_reply_usage() */
	int32_t		 gpu_samples;
	int64_t		 peak_rss_kb;	/* the task's peak resident memory,
					   KiB (wait4()'s ru_maxrss); 0:
					   unknown (it never started) */
};

/* rproto.c: the task's header into the first bytes of b, a task of len
 * bytes in all (h->cmdlen is set from len: the line and its NUL). */
void	rp_task_encode(uint8_t *b, size_t len, const struct task_hdr *h);
/* The task at the start of b[0..len) (as a worker gets it, or one of an
 * RM_TASKS payload): its header in *h and its length (header, line and
 * NUL), or -EPROTO. */
ssize_t	rp_task_decode(const uint8_t *b, size_t len, struct task_hdr *h);
/* A reply's header rp into the first bytes of b; the bytes it counts
 * follow it. */
void	rp_reply_encode(uint8_t *b, const struct task_reply *rp);
/* A whole reply b[0..len) (NULL: none): its header in *rp and 0, or
 * -EPROTO (too short, or its lengths do not add up to len). */
int	rp_reply_decode(const void *b, size_t len, struct task_reply *rp);
/* The GPU figures u (gp_pool_usage()'s) into the whole reply b[0..len):
 * the master adds them, the worker cannot know them; a reply that is not
 * whole is left as it is. */
void	rp_reply_usage(void *b, size_t len, const struct gp_usage *u);

/* Between the ranks (ranks/: mpi.c's transport; master/: coord.c on
 * rank 0, rank.c on the others): messages are typed byte strings; the
 * protocol is in docs/cluster.md. */
enum rmsg_type {
	RM_HELLO = 1,	/* r -> 0: struct rhello, w_gpu[], host, GPU ids */
	RM_TASKS,	/* 0 -> r: task_hdr + command + NUL, one or more */
	RM_RESULTS,	/* r -> 0: struct rresult + reply bytes, one or more */
	RM_CTL,		/* 0 -> r: one int32: enum rctl */
	RM_BEAT,	/* either way, empty: still here */
	RM_BYE,		/* r -> 0, empty: done, every result sent; before
			   RM_HELLO: it could not start */
};

enum rctl {
	RC_CANCEL = 1,	/* start nothing more, stop the running tasks */
	RC_KILL,	/* kill the running tasks now */
	RC_END,		/* no more tasks: finish and say bye */
	RC_END_LOST,	/* the same, and leave without MPI_Finalize: a rank
			   was lost, and MPI_Finalize would wait for it */
};

struct rhello {
	uint32_t	 nw;		/* slots (workers) */
	uint32_t	 ngpu;
	/* then int32_t w_gpu[nw], then NUL-terminated: the host name and
	 * ngpu CUDA_VISIBLE_DEVICES values */
};

struct rresult {
	uint64_t	 seq;
	uint32_t	 attempt;
	int32_t		 status;	/* enum gp_status */
	int32_t		 code;
	int32_t		 attempts;
	int32_t		 worker;	/* slot on that rank */
	uint32_t	 pad;
	uint64_t	 outlen;	/* then the worker's reply bytes */
};

/* rproto.c: the rank messages' payloads, encoded and parsed (host byte
 * order), with no I/O: a parser reads nothing past len and returns
 * -EPROTO for a malformed payload. */
struct rp_hello {
	uint32_t	 nw, ngpu;
	const uint8_t	*w_gpu;		/* nw int32_t (unaligned), each
					   < ngpu */
	const char	*host;		/* NUL-terminated */
	const char	*gpu_id;	/* ngpu NUL-terminated strings in a
					   row */
};

#define RP_CTL_LEN	4	/* an RM_CTL payload: int32_t */

/* RM_HELLO from a rank's nw slots (w_gpu: slot -> GPU index), ngpu GPUs
 * (gpu_id: their CUDA_VISIBLE_DEVICES values) and host: a malloc()ed
 * payload of *len bytes (the caller frees it), or NULL: out of memory. */
uint8_t	*rp_hello_encode(int nw, int ngpu, const int *w_gpu,
	    const char *host, char *const *gpu_id, size_t *len);
/* 0 and *h (pointing into b), or -EPROTO. Bytes after the last GPU id
 * are allowed (and ignored) if the payload still ends with a NUL. */
int	rp_hello_parse(const uint8_t *b, size_t len, struct rp_hello *h);
/* The task at b[off..len) of an RM_TASKS payload (tasks as a worker
 * gets them, rp_task_encode()'s, one or more in a row): its header in *h
 * and its length (header, command and NUL), or -EPROTO. */
ssize_t	rp_tasks_next(const uint8_t *b, size_t len, size_t off,
	    struct task_hdr *h);
/* One RM_RESULTS record into b (sizeof(*rr) + rr->outlen bytes): rr,
 * then rr->outlen bytes of out. */
void	rp_result_encode(uint8_t *b, const struct rresult *rr,
	    const void *out);
/* The record at b[off..len) of an RM_RESULTS payload: *rr, its reply
 * bytes at *out (in b) and its length, or -EPROTO. */
ssize_t	rp_results_next(const uint8_t *b, size_t len, size_t off,
	    struct rresult *rr, const uint8_t **out);
/* An RM_CTL payload (RP_CTL_LEN bytes): how, an enum rctl; the parser
 * takes any value (the reader ignores those it does not know). */
void	rp_ctl_encode(uint8_t *b, int how);
int	rp_ctl_parse(const uint8_t *b, size_t len, int *how);

/* files.c: the files a run reads and writes, each noted where it is
 * opened, and the one check that no output is an input or another
 * output. */
enum file_role {
	FILE_IN,		/* read: tasks file, :::: file, topology */
	FILE_OUT,		/* written in place: the joblog */
	FILE_REPLACED,		/* renamed over at the end: --timeline */
	FILE_DIR,		/* written in its DIR/<seq>/: --results */
	FILE_STREAM,		/* standard output or error */
};

/* Note a file of the run: what names it in messages ("joblog", "tasks
 * file", "standard output": a static string), path as given (NULL: a
 * standard stream, named by fd, or standard input read as an input), fd
 * open on it or -1 (then path is stat()ed; it need not exist). It is
 * checked against every file noted before: an output (anything but
 * FILE_IN) may not be the same file as an input or another output, by
 * any name (hard or symbolic links, /dev/stdin), nor lie in a FILE_DIR's
 * DIR/<seq>/; two inputs, or two streams, may. 0, or -EEXIST with err
 * saying which two ("joblog 'x' is the :::: file 'y': nothing was run"),
 * or -ENOMEM. */
int	files_note(enum file_role role, const char *what, const char *path,
	    int fd, char *err, size_t errlen);
/* Forget every file noted. */
void	files_release(void);
/* A lock of type F_WRLCK (exclusive, fd open for writing) or F_RDLCK
 * (shared) on fd, held until it is closed; -EAGAIN if another process
 * holds one that excludes it (err names its pid). With wait,
 * until it is ours, or -EINTR when SIGINT, SIGTERM or SIGHUP comes while
 * blocked (under MPI they are from the start): a wait that no signal
 * could end would leave only SIGKILL. err says why, naming what
 * ("joblog", "results directory") and path. */
int	files_lock(int fd, int type, int wait, const char *what,
	    const char *path, char *err, size_t errlen);
/* Open (create: *created) path, a regular file, for appending and lock
 * it (files_lock(), F_WRLCK) for as long as the fd lives, the file the
 * path names once locked. The fd, or -errno with err saying why, naming
 * what ("joblog"). */
int	files_open_locked(const char *path, int wait, const char *what,
	    int *created, char *err, size_t errlen);
/* Whether path names the file st describes (path may not exist). */
int	files_same(const char *path, const struct stat *st);

/* spawn.c (worker.h): the gp_fn every worker runs, what the master
 * gives the pool; arg is a struct run_conf. */
int	spawn_task(struct gp_ctx *ctx, const void *in, size_t inlen, void *arg);

/* reap.c (worker.h), in every process that is a subreaper: the
 * workers, and the master at the run's end. */
/* Note the children this process has now (inherited across exec), which
 * reap_leftovers() must leave alone: call it before becoming a subreaper
 * and before forking. 0 or -ENOMEM. */
int	reap_keep_children(void);
/* SIGKILL and reap, by pid, every child this process has, and theirs,
 * while a pass reaps some: call it only when each child of its own has
 * been reaped, so that every child left (but those reap_keep_children()
 * noted) is an orphan it adopted as their subreaper
 * (PR_SET_CHILD_SUBREAPER). */
void	reap_leftovers(void);

/* live.c's records: a worker's output as it comes, on the channel to
 * the master (capture.c sends them, live.c prints them). */
#define LIVE_REC	16384		/* bytes in a record, at most */
#define LIVE_HOLD	65536		/* a worker's bytes per stream waiting
					   for the channel, at most */

/* A record's header; its bytes follow, up to the end of the record. */
struct live_hdr {
	uint64_t	 seq;
	int32_t		 worker;
	int32_t		 stream;	/* 1 stdout, 2 stderr */
};

#endif /* GP_CLI_H */
