/*
 * mpi.c: the ranks of one run, over MPI (mpi_stub.c stands in for it in
 * a build without MPI): the ranks_*() calls the run makes, in the rank's
 * own process. MPI lives in a process of its own (mpi_proc.c), which
 * ranks_init() forks before anything else is started and which calls
 * MPI_Init: MPI starts threads (Open MPI's PMIx and progress threads),
 * and the process that creates the pool and forks its workers, the first
 * ones and their replacements, must have none (gpupool.h). The MPI
 * process inherits the launcher's wire-up variables, so it is the rank as
 * far as MPI is concerned (Open MPI 4.1's mpirun and Slurm 22.05's srun
 * --mpi=pmix both accept that); the launcher's signals reach the launched
 * process, which reads them from its signalfd as before, while the MPI
 * process keeps them blocked and dies with its parent (PR_SET_PDEATHSIG).
 *
 * The two talk over a socketpair, one frame per message (struct frame,
 * then its bytes: mpi_frame.c): MPI messages both ways, and the few of
 * enum frame_type. When each peer was last heard from, and which peers to
 * beat, they share through a memfd: ranks_silent() reads it, and a peer
 * silent too long is a lost one (how the MPI process beats, and
 * coalesces, is in mpi_proc.c).
 *
 * The MPI process never blocks on the rank (what the rank has not read
 * yet waits in a buffer), so the rank may block on it, but not past a
 * signal that stops the run: MPI may block it after all (an MPI_Recv of
 * a message from a hung peer), and the rank must still act on the
 * signal (flush()).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "ranks/ranks.h"
#include "../../io.h"

/* The rank's side, in the process that runs the pool. */
struct ranks {
	int		 rank, size;
	char		 host[256];
	pid_t		 pid;		/* the MPI process */
	int		 fd;		/* socket to it, nonblocking */
	int		 sfd;		/* the run's stop signals, polled */
	int		 stop;		/* one came while a frame waited */
	struct gp_buf	 in;		/* from it, not yet a whole frame */
	struct gp_buf	 out;		/* frames being sent */
	int		 gone;		/* it closed its end */
	int64_t		*heard;		/* shared: per peer, last receipt */
	uint8_t		*talk;		/* shared: per peer, beat it */
	size_t		 shlen;
	char		 err[256];	/* it failed, or is gone */
};

void
ranks_handover(char **argv, char *err, size_t errlen)
{
	/* This is the MPI program already. */
}

enum { FLUSH_TRY, FLUSH_WAIT, FLUSH_END };

/*
 * Send what is queued for the MPI process. It reads unless MPI blocks it
 * (a receive from a hung peer): FLUSH_WAIT waits for room, but not past
 * a signal that stops the run, nor at all once one came during such a
 * wait (rk->stop; the run reads the signal from its own signalfd, this
 * one is only polled). What is left then goes with the next frame, or
 * when the MPI process passes one on (ranks_recv(): a peer's BEAT comes
 * every second), or at the end (FLUSH_END waits for room whatever
 * comes). When the MPI process is gone, the queue is dropped and
 * ranks_recv() says so.
 */
static int
flush(struct ranks *rk, int how)
{
	struct pollfd	 pfd[2] = { { rk->fd, POLLOUT, 0 },
			    { rk->sfd, POLLIN, 0 } };
	ssize_t		 n;

	while (rk->out.len > rk->out.off) {
		/* Not write(): a dead MPI process must not SIGPIPE us. */
		n = send(rk->fd, rk->out.data + rk->out.off, rk->out.len -
		    rk->out.off, MSG_NOSIGNAL);
		if (n >= 0) {
			gp_buf_consume(&rk->out, (size_t)n);
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			break;
		if (how == FLUSH_TRY || (how == FLUSH_WAIT && rk->stop))
			return 0;
		pfd[1].revents = 0;
		if (poll(pfd, how == FLUSH_END ? 1 : 2, -1) == -1 &&
		    errno != EINTR)
			break;
		if (pfd[1].revents)
			rk->stop = 1;
	}
	if (rk->out.len == rk->out.off)
		return 0;
	rk->out.off = rk->out.len = 0;
	if (errno != EPIPE && errno != ECONNRESET)
		return -errno;
	rk->gone = 1;
	return 0;
}

/* Queue one frame for the MPI process and send what it can take. */
static int
frame_send(struct ranks *rk, int type, int peer, const void *data,
    size_t len, int how)
{
	int	 rc;

	if (rk->gone)
		return 0;
	if ((rc = frame_put(&rk->out, type, peer, data, len)) < 0)
		return rc;
	return flush(rk, how);
}

/* Read what the MPI process sent; with wait, wait until something comes.
 * Returns 0, -EAGAIN, -EPIPE (it closed its end, or died with frames of
 * ours unread: ECONNRESET) or -errno. */
static int
pull(struct ranks *rk, int wait)
{
	struct pollfd	 pfd = { rk->fd, POLLIN, 0 };
	ssize_t		 n;

	for (;;) {
		if ((n = gp_buf_recv(rk->fd, &rk->in, RANKS_READ)) > 0)
			return 0;
		if (n == 0 || n == -ECONNRESET)
			return -EPIPE;
		if (n != -EAGAIN || !wait)
			return (int)n;
		if (poll(&pfd, 1, -1) == -1 && errno != EINTR)
			return -errno;
	}
}

static void
ranks_free(struct ranks *rk)
{
	if (rk->fd >= 0)
		close(rk->fd);
	if (rk->sfd >= 0)
		close(rk->sfd);
	if (rk->heard != NULL)
		munmap(rk->heard, rk->shlen);
	gp_buf_release(&rk->in);
	gp_buf_release(&rk->out);
	free(rk);
}

/* Start the MPI process and wait for its FR_READY. */
static int
mp_start(struct ranks *rk, char *err, size_t errlen)
{
	struct frame	 f;
	const uint8_t	*d;
	int32_t		 code, v[2];
	pid_t		 self = getpid();
	void		*sh;
	int		 sv[2], memfd, rc;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == -1) {
		snprintf(err, errlen, "cannot set up MPI: %s",
		    strerror(errno));
		return -errno;
	}
	if ((memfd = memfd_create("gpupool-ranks", MFD_CLOEXEC)) == -1 ||
	    (rk->pid = fork()) == -1) {
		rc = -errno;
		snprintf(err, errlen, "cannot start MPI: %s", strerror(-rc));
		if (memfd >= 0)
			close(memfd);
		close(sv[0]);
		close(sv[1]);
		return rc;
	}
	if (rk->pid == 0) {
		close(sv[0]);
		close(rk->sfd);
		mproc_main(sv[1], memfd, -1, self);
	}
	close(sv[1]);
	rk->fd = sv[0];
	while (!frame_get(&rk->in, &f, &d))
		if ((rc = pull(rk, 1)) < 0) {
			snprintf(err, errlen, "MPI did not start: its process "
			    "(pid %ld) ended", (long)rk->pid);
			close(memfd);
			return -EIO;
		}
	rc = 0;
	if (f.type == FR_ERR && f.len > sizeof(code) &&
	    d[f.len - 1] == '\0') {
		memcpy(&code, d, sizeof(code));
		snprintf(err, errlen, "%s", d + sizeof(code));
		rc = code < 0 ? code : -EIO;
	} else if (f.type != FR_READY || f.len != sizeof(v)) {
		snprintf(err, errlen, "MPI did not start: a bad frame (type "
		    "%d) from its process", (int)f.type);
		rc = -EPROTO;
	}
	if (rc == 0) {
		memcpy(v, d, sizeof(v));
		rk->rank = v[0];
		rk->size = v[1];
		rk->shlen = frame_shm_len(rk->size);
		if ((sh = mmap(NULL, rk->shlen, PROT_READ | PROT_WRITE,
		    MAP_SHARED, memfd, 0)) == MAP_FAILED) {
			snprintf(err, errlen, "cannot set up ranks: %s",
			    strerror(errno));
			rc = -ENOMEM;
		} else {
			rk->heard = sh;
			rk->talk = (uint8_t *)sh + (size_t)rk->size *
			    sizeof(int64_t);
		}
	}
	gp_buf_consume(&rk->in, sizeof(f) + f.len);
	close(memfd);
	if (rc == 0 && fcntl(rk->fd, F_SETFL, O_NONBLOCK) == -1) {
		snprintf(err, errlen, "cannot set up ranks: %s",
		    strerror(errno));
		rc = -errno;
	}
	return rc;
}

int
ranks_init(struct ranks **rkp, const sigset_t *stop, char *err,
    size_t errlen)
{
	struct ranks	*rk;
	const char	*var;
	sigset_t	 set;
	long		 n;
	int		 rc;

	*rkp = NULL;
	if (!launcher_mpi()) {
		if ((n = launcher_procs(&var)) <= 1)
			return 0;
		snprintf(err, errlen, "started as one of %ld processes (%s) "
		    "without MPI wire-up: each would run every task (under "
		    "Slurm: srun --mpi=pmix)", n, var);
		return -ENOTSUP;
	}
	if ((rk = calloc(1, sizeof(*rk))) == NULL)
		return -ENOMEM;
	rk->fd = -1;
	/* The signals that stop the run (main() blocked them already), not
	 * SIGWINCH: it only redraws the bar, and flush() must not leave
	 * frames queued for it. */
	set = *stop;
	if (sigdelset(&set, SIGWINCH) == -1 ||
	    (rk->sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK)) == -1) {
		rc = -errno;
		snprintf(err, errlen, "cannot set up ranks: %s", strerror(-rc));
		free(rk);
		return rc;
	}
	if ((rc = mp_start(rk, err, errlen)) < 0) {
		if (rk->pid > 0) {
			/* It said why and left, or will once the socket
			 * closes: not a rank of this job. */
			close(rk->fd);
			rk->fd = -1;
			(void)gp_waitpid(rk->pid, NULL, 0);
		}
		ranks_free(rk);
		return rc;
	}
	if (gethostname(rk->host, sizeof(rk->host) - 1) == -1)
		snprintf(rk->host, sizeof(rk->host), "rank%d", rk->rank);
	*rkp = rk;
	return 0;
}

const char *
ranks_build(void)
{
	static char	 v[64 + MPI_MAX_LIBRARY_VERSION_STRING];
	char		 lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
	int		 n = 0;

	(void)MPI_Get_library_version(lib, &n);
	lib[strcspn(lib, ",\n")] = '\0';	/* its first words */
	snprintf(v, sizeof(v), "with MPI: %s", lib);
	return v;
}

int
ranks_rank(const struct ranks *rk)
{
	return rk != NULL ? rk->rank : 0;
}

int
ranks_size(const struct ranks *rk)
{
	return rk != NULL ? rk->size : 1;
}

const char *
ranks_host(const struct ranks *rk)
{
	return rk->host;
}

int
ranks_fd(const struct ranks *rk)
{
	return rk->fd;
}

int
ranks_start(struct ranks *rk, char *err, size_t errlen)
{
	int64_t	 now = gp_now_ns();
	int	 p, rc;

	if (rk == NULL || rk->size == 1)
		return 0;
	/* Rank 0 talks to every rank, the others to rank 0, from now on:
	 * a rank slow to start its pool is heard from all the same. */
	for (p = 0; p < rk->size; p++) {
		rk->heard[p] = now;
		rk->talk[p] = p != rk->rank && (rk->rank == 0 || p == 0);
	}
	if ((rc = frame_send(rk, FR_START, 0, NULL, 0, FLUSH_WAIT)) < 0) {
		snprintf(err, errlen, "cannot start MPI: %s", strerror(-rc));
		return rc;
	}
	return 0;
}

void
ranks_forget(struct ranks *rk, int peer)
{
	__atomic_store_n(&rk->talk[peer], 0, __ATOMIC_RELAXED);
}

int
ranks_send(struct ranks *rk, int peer, int type, const void *data,
    size_t len)
{
	return frame_send(rk, type, peer, data, len, FLUSH_WAIT);
}

struct rmsg *
ranks_recv(struct ranks *rk, char *err, size_t errlen)
{
	struct frame	 f;
	const uint8_t	*d;
	struct rmsg	*m = NULL;
	int		 rc;

	/* What a stop signal left queued (flush()) goes now, if it can. */
	if (rk->out.len > rk->out.off)
		(void)flush(rk, FLUSH_TRY);
	while (m == NULL && rk->err[0] == '\0') {
		if (!frame_get(&rk->in, &f, &d)) {
			if ((rc = pull(rk, 0)) == -EAGAIN)
				break;
			if (rc == -EPIPE)
				snprintf(rk->err, sizeof(rk->err), "MPI: its "
				    "process (pid %ld) is gone", (long)rk->pid);
			else if (rc < 0)
				snprintf(rk->err, sizeof(rk->err), "MPI: from "
				    "its process: %s", strerror(-rc));
			continue;
		}
		if (f.type == FR_ERR && f.len > sizeof(int32_t) &&
		    d[f.len - 1] == '\0')
			snprintf(rk->err, sizeof(rk->err), "%s", d +
			    sizeof(int32_t));
		else if (f.type >= FR_READY)
			snprintf(rk->err, sizeof(rk->err), "MPI: a bad frame "
			    "(type %d) from its process", (int)f.type);
		else if ((m = frame_msg(&f, d)) == NULL) {
			snprintf(rk->err, sizeof(rk->err), "MPI: receive: %s",
			    strerror(ENOMEM));
			break;
		}
		gp_buf_consume(&rk->in, sizeof(f) + f.len);
	}
	snprintf(err, errlen, "%s", m == NULL ? rk->err : "");
	return m;
}

int64_t
ranks_silent(struct ranks *rk, int peer)
{
	return gp_now_ns() - __atomic_load_n(&rk->heard[peer],
	    __ATOMIC_RELAXED);
}

int
ranks_end(struct ranks *rk, int clean, int rc)
{
	struct fr_end	 e;
	struct frame	 f;
	const uint8_t	*d;
	int		 done = 0;

	if (rk == NULL)
		return 0;
	e.clean = clean;
	e.rc = rc;
	(void)frame_send(rk, FR_END, 0, &e, sizeof(e), FLUSH_END);
	/* What it still passes on is moot now: wait for FR_DONE (it calls
	 * MPI_Finalize next) or its end (MPI_Abort, or a failure). */
	while (!done) {
		if (!frame_get(&rk->in, &f, &d)) {
			if (pull(rk, 1) < 0)
				break;
			continue;
		}
		done = f.type == FR_DONE;
		gp_buf_consume(&rk->in, sizeof(f) + f.len);
	}
	close(rk->fd);
	rk->fd = -1;
	/* The launcher watches this process: it must outlive MPI_Finalize
	 * in its MPI process. */
	(void)gp_waitpid(rk->pid, NULL, 0);
	ranks_free(rk);
	return clean && done ? 0 : -EPIPE;
}
