/*
 * mpi.c: the ranks of one run, over MPI (mpi_stub.c stands in for it in
 * a build without MPI). MPI lives in a process of its own, which
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
 * then its bytes): MPI messages both ways, and the few of enum
 * frame_type. When each peer was last heard from, and which peers to
 * beat, they share through a memfd. The MPI process makes every MPI call
 * from one thread: it sends what the rank passed it, receives whatever
 * arrives and passes it on. Consecutive records for one peer are sent as
 * one MPI message, so a busy run needs few. Every peer we talk to hears
 * from us at least every RANKS_BEAT_NS, so a silent peer is a lost one;
 * while the rank's own process is stopped its MPI process beats nobody,
 * so a stopped rank falls silent, as it did when MPI ran inside it.
 *
 * MPI's blocking calls spin; the MPI process sleeps instead, up to
 * RANKS_SLEEP_MAX_NS between looks when nothing moves, and is woken at
 * once by a frame from the rank. It never blocks on the rank (what the
 * rank has not read yet waits in a buffer), so the rank may block on it,
 * but not past a signal that stops the run: MPI may block it after all
 * (an MPI_Recv of a message from a hung peer), and the rank must still
 * act on the signal (flush()).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "cli.h"
#include "../io.h"

#define RANKS_BEAT_NS		1000000000LL
#define RANKS_SLEEP_MIN_NS	20000LL
#define RANKS_SLEEP_MAX_NS	1000000LL
#define RANKS_COALESCE_MAX	(4u << 20)	/* bytes per MPI message */
#define RANKS_FLUSH_NS		5000000000LL	/* at the end, for sends */
#define RANKS_LOOK_NS		100000000LL	/* at the rank's state */
#define RANKS_READ		65536		/* bytes per read, at least */

/* Between a rank and its MPI process: an MPI message (enum rmsg_type,
 * peer its sender or receiver) or one of these. */
enum frame_type {
	FR_READY = 100,	/* MPI -> rank: int32 rank, size */
	FR_ERR,		/* MPI -> rank: int32 errno, then why, a string */
	FR_START,	/* rank -> MPI: beat from now on */
	FR_END,		/* rank -> MPI: struct fr_end */
	FR_DONE,	/* MPI -> rank: every send completed: MPI_Finalize */
};

struct frame {
	int32_t		 type;
	int32_t		 peer;
	uint64_t	 len;		/* bytes that follow */
};

/* The run is over: MPI_Finalize if clean and every send completed, else
 * on rank 0 MPI_Abort(rc), which has the launcher end the job. */
struct fr_end {
	int32_t		 clean;
	int32_t		 rc;
};

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

/* In the MPI process. */
struct pending {
	struct pending	*next;
	MPI_Request	 req;
	void		*buf;
};

struct mproc {
	int		 rank, size;
	pid_t		 parent;	/* the rank's process */
	int		 fd;		/* socket to it, nonblocking */
	struct gp_buf	 in, out;	/* frames from the rank, to it */
	int64_t		*heard;		/* shared (as above) */
	uint8_t		*talk;
	int64_t		*sent;		/* per peer: last send */
	struct pending	*pend;		/* sends in flight */
	int		 started;	/* FR_START came: beat */
	int		 stop;		/* FR_END came (or the rank left) */
	struct fr_end	 end;
	int		 failed;	/* an MPI call failed: FR_ERR sent */
	int		 flushed;	/* every send completed */
	int64_t		 looked;	/* at the rank's state */
	int		 halted;	/* the rank's process is stopped */
};

static size_t
shm_len(int size)
{
	return (size_t)size * (sizeof(int64_t) + 1);
}

/* The whole frame at the head of b, if there is one: its header in *f,
 * its bytes at *data; gp_buf_consume(b, sizeof(*f) + f->len) takes it. */
static int
frame_get(struct gp_buf *b, struct frame *f, const uint8_t **data)
{
	size_t	 have = b->len - b->off;

	if (have < sizeof(*f))
		return 0;
	memcpy(f, b->data + b->off, sizeof(*f));
	if (f->len > have - sizeof(*f))
		return 0;
	*data = b->data + b->off + sizeof(*f);
	return 1;
}

/* An MPI message frame as a struct rmsg, or NULL (out of memory). */
static struct rmsg *
frame_msg(const struct frame *f, const uint8_t *data)
{
	struct rmsg	*m;

	if ((m = malloc(sizeof(*m) + f->len)) == NULL)
		return NULL;
	m->next = NULL;
	m->peer = f->peer;
	m->type = f->type;
	m->len = f->len;
	memcpy(m->data, data, f->len);
	return m;
}

static int
frame_put(struct gp_buf *b, int type, int peer, const void *data,
    size_t len)
{
	struct frame	 f;
	int		 rc;

	memset(&f, 0, sizeof(f));
	f.type = type;
	f.peer = peer;
	f.len = len;
	if ((rc = gp_buf_reserve(b, sizeof(f) + len)) < 0)
		return rc;
	(void)gp_buf_add(b, &f, sizeof(f));
	(void)gp_buf_add(b, data, len);
	return 0;
}

/* What follows, down to mp_main(), runs in the MPI process. */

/* Everything queued for the rank, waiting for it as need be. */
static int
mp_flush(struct mproc *mp)
{
	struct pollfd	 pfd = { mp->fd, POLLOUT, 0 };
	int		 rc;

	while (mp->out.len > mp->out.off) {
		if ((rc = gp_buf_send(mp->fd, &mp->out)) < 0)
			return rc;
		if (mp->out.len > mp->out.off && poll(&pfd, 1, -1) == -1 &&
		    errno != EINTR)
			return -errno;
	}
	return 0;
}

/* Tell the rank why MPI cannot go on (once). */
static void
mp_fail(struct mproc *mp, int code, const char *fmt, ...)
{
	char	 buf[sizeof(int32_t) + 256];
	int32_t	 c = code;
	va_list	 ap;

	if (mp->failed)
		return;
	mp->failed = 1;
	memcpy(buf, &c, sizeof(c));
	va_start(ap, fmt);
	vsnprintf(buf + sizeof(c), sizeof(buf) - sizeof(c), fmt, ap);
	va_end(ap);
	(void)frame_put(&mp->out, FR_ERR, 0, buf, sizeof(c) +
	    strlen(buf + sizeof(c)) + 1);
}

static void
mp_fail_mpi(struct mproc *mp, int rc, const char *what)
{
	char	 s[MPI_MAX_ERROR_STRING];
	int	 n = 0;

	if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS)
		snprintf(s, sizeof(s), "error %d", rc);
	mp_fail(mp, -EIO, "MPI: %s: %s", what, s);
}

/* Start-up failed: say why, and leave. */
static void __attribute__((noreturn))
mp_abandon(struct mproc *mp, int finalize)
{
	(void)mp_flush(mp);
	if (finalize)
		MPI_Finalize();
	_exit(1);
}

static void
msgs_free(struct rmsg *m)
{
	struct rmsg	*next;

	for (; m != NULL; m = next) {
		next = m->next;
		free(m);
	}
}

/* Take the rank's frames: MPI messages onto **qtail (none once MPI has
 * failed), the rest acted on. -EPIPE when the rank is gone. */
static int
mp_take(struct mproc *mp, struct rmsg ***qtail)
{
	struct frame	 f;
	const uint8_t	*d;
	struct rmsg	*m;
	int64_t		 now;
	ssize_t		 n;
	size_t		 got = 0;
	int		 p;

	/* A bounded bite: MPI's side gets its turn under a fast rank. */
	while ((n = gp_buf_recv(mp->fd, &mp->in, RANKS_READ)) > 0 &&
	    (got += (size_t)n) < RANKS_COALESCE_MAX)
		;
	if (n < 0 && n != -EAGAIN)
		return (int)n;
	while (frame_get(&mp->in, &f, &d)) {
		if (f.type == FR_START) {
			now = gp_now_ns();
			for (p = 0; p < mp->size; p++)
				mp->sent[p] = now;
			mp->started = 1;
		} else if (f.type == FR_END && f.len == sizeof(mp->end)) {
			memcpy(&mp->end, d, sizeof(mp->end));
			mp->stop = 1;
		} else if (f.type < FR_READY && !mp->failed) {
			if ((m = frame_msg(&f, d)) == NULL)
				return -ENOMEM;
			**qtail = m;
			*qtail = &m->next;
		}
		gp_buf_consume(&mp->in, sizeof(f) + f.len);
	}
	return n == 0 ? -EPIPE : 0;
}

static int
post(struct mproc *mp, int peer, int type, void *buf, size_t len)
{
	struct pending	*p;
	int		 rc;

	if ((p = malloc(sizeof(*p))) == NULL) {
		free(buf);
		return MPI_ERR_NO_MEM;
	}
	p->buf = buf;
	rc = MPI_Isend(buf, (int)len, MPI_BYTE, peer, type, MPI_COMM_WORLD,
	    &p->req);
	if (rc != MPI_SUCCESS) {
		free(buf);
		free(p);
		return rc;
	}
	p->next = mp->pend;
	mp->pend = p;
	mp->sent[peer] = gp_now_ns();
	return MPI_SUCCESS;
}

/* Send what the rank passed on: a run of records for one peer and of one
 * kind goes as one message. Frees the queue. */
static int
send_all(struct mproc *mp, struct rmsg *m)
{
	struct rmsg	*e, *last, *next;
	uint8_t		*buf;
	size_t		 len, off;
	int		 peer, type, end, rc = MPI_SUCCESS;

	for (; m != NULL; m = next) {
		peer = m->peer;
		type = m->type;
		len = m->len;
		for (last = m; (type == RM_TASKS || type == RM_RESULTS) &&
		    (e = last->next) != NULL && e->peer == peer &&
		    e->type == type && len + e->len <= RANKS_COALESCE_MAX;
		    last = e)
			len += e->len;
		next = last->next;
		buf = rc == MPI_SUCCESS ? malloc(len ? len : 1) : NULL;
		for (e = m, off = 0, end = 0; !end; e = next) {
			end = e == last;
			next = e->next;
			if (buf != NULL)
				memcpy(buf + off, e->data, e->len);
			off += e->len;
			free(e);
		}
		if (rc != MPI_SUCCESS)
			continue;	/* free the rest */
		rc = buf != NULL ? post(mp, peer, type, buf, len) :
		    MPI_ERR_NO_MEM;
	}
	return rc;
}

static int
reap_sends(struct mproc *mp)
{
	struct pending	**pp = &mp->pend, *p;
	int		  done, rc;

	while ((p = *pp) != NULL) {
		if ((rc = MPI_Test(&p->req, &done, MPI_STATUS_IGNORE)) !=
		    MPI_SUCCESS)
			return rc;
		if (!done) {
			pp = &p->next;
			continue;
		}
		*pp = p->next;
		free(p->buf);
		free(p);
	}
	return MPI_SUCCESS;
}

/* Receive whatever has arrived, straight into frames for the rank;
 * returns how many messages, or an MPI error as a negative number. */
static int
recv_all(struct mproc *mp)
{
	struct frame	 f;
	MPI_Status	 st;
	int		 flag, n, rc, got = 0;

	for (;;) {
		if ((rc = MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG,
		    MPI_COMM_WORLD, &flag, &st)) != MPI_SUCCESS)
			return -rc;
		if (!flag)
			break;
		MPI_Get_count(&st, MPI_BYTE, &n);
		if (gp_buf_reserve(&mp->out, sizeof(f) + (size_t)n) < 0)
			return -MPI_ERR_NO_MEM;
		if ((rc = MPI_Recv(mp->out.data + mp->out.len + sizeof(f), n,
		    MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD,
		    MPI_STATUS_IGNORE)) != MPI_SUCCESS)
			return -rc;
		memset(&f, 0, sizeof(f));
		f.type = st.MPI_TAG;
		f.peer = st.MPI_SOURCE;
		f.len = (uint64_t)n;
		memcpy(mp->out.data + mp->out.len, &f, sizeof(f));
		mp->out.len += sizeof(f) + (size_t)n;
		__atomic_store_n(&mp->heard[st.MPI_SOURCE],
		    gp_now_ns(), __ATOMIC_RELAXED);
		got++;
	}
	return got;
}

/* Whether the rank's process is stopped (SIGSTOP, ^Z): looked up at most
 * every RANKS_LOOK_NS, and only when a beat is due. */
static int
rank_halted(struct mproc *mp, int64_t now)
{
	char	 path[64], buf[512], *s;
	ssize_t	 n;
	int	 fd;

	if (now - mp->looked < RANKS_LOOK_NS)
		return mp->halted;
	mp->looked = now;
	mp->halted = 0;
	snprintf(path, sizeof(path), "/proc/%ld/stat", (long)mp->parent);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* "pid (comm) S ...": comm may hold anything, ')' included. */
	if ((s = strrchr(buf, ')')) != NULL && s[1] == ' ')
		mp->halted = s[2] == 'T' || s[2] == 't';
	return mp->halted;
}

static int
beat(struct mproc *mp, int64_t now)
{
	uint8_t	*b;
	int	 p, rc;

	for (p = 0; p < mp->size; p++) {
		if (!__atomic_load_n(&mp->talk[p], __ATOMIC_RELAXED) ||
		    now - mp->sent[p] < RANKS_BEAT_NS)
			continue;
		if (rank_halted(mp, now))
			return MPI_SUCCESS;
		if ((b = malloc(1)) == NULL)
			return MPI_ERR_NO_MEM;
		if ((rc = post(mp, p, RM_BEAT, b, 0)) != MPI_SUCCESS)
			return rc;
	}
	return MPI_SUCCESS;
}

static void
mp_loop(struct mproc *mp)
{
	struct rmsg	*q, **qtail;
	struct pollfd	 pfd = { mp->fd, POLLIN, 0 };
	struct timespec	 ts;
	int64_t		 nap = 0, now, stop_at = 0;
	int		 rc, moved;

	for (;;) {
		q = NULL;
		qtail = &q;
		if ((rc = mp_take(mp, &qtail)) < 0) {
			msgs_free(q);
			if (rc == -EPIPE) {
				mp->stop = 1;	/* the rank is gone */
				mp->end.clean = 0;
				mp->end.rc = EXIT_FATAL;
				return;
			}
			mp_fail(mp, rc, "MPI: from the rank: %s",
			    strerror(-rc));
			q = NULL;
		}
		moved = q != NULL;
		if (mp->failed)
			msgs_free(q);
		else if ((rc = send_all(mp, q)) != MPI_SUCCESS)
			mp_fail_mpi(mp, rc, "send");
		else if ((rc = recv_all(mp)) < 0)
			mp_fail_mpi(mp, -rc, "receive");
		else {
			moved |= rc > 0;
			if ((rc = reap_sends(mp)) != MPI_SUCCESS)
				mp_fail_mpi(mp, rc, "send");
		}
		now = gp_now_ns();
		if (mp->stop) {
			if (mp->failed)
				return;
			if (mp->pend == NULL) {
				mp->flushed = 1;
				return;
			}
			if (stop_at == 0)
				stop_at = now + RANKS_FLUSH_NS;
			else if (now > stop_at)
				return;	/* a peer that never takes them */
		} else if (!mp->failed && mp->started &&
		    (rc = beat(mp, now)) != MPI_SUCCESS)
			mp_fail_mpi(mp, rc, "send");
		/* A rank that is gone kills us (SIGPIPE, or PDEATHSIG). */
		if (gp_buf_send(mp->fd, &mp->out) < 0)
			_exit(1);
		pfd.events = POLLIN | (mp->out.len > mp->out.off ? POLLOUT :
		    0);
		if (mp->failed) {
			/* Only the rank's END is awaited now. */
			(void)poll(&pfd, 1, -1);
			continue;
		}
		if (moved)
			nap = 0;
		else
			nap = nap == 0 ? RANKS_SLEEP_MIN_NS : nap * 2;
		if (nap > RANKS_SLEEP_MAX_NS)
			nap = RANKS_SLEEP_MAX_NS;
		if (nap == 0)
			continue;
		ts.tv_sec = 0;
		ts.tv_nsec = nap;
		(void)ppoll(&pfd, 1, &ts, NULL);
	}
}

/* The MPI process: MPI_Init, FR_READY (or FR_ERR), then pass messages
 * until the rank says FR_END. Never returns. */
static void __attribute__((noreturn))
mp_main(int fd, int memfd, pid_t parent)
{
	struct mproc	 mp;
	const char	*var;
	int32_t		 v[2];
	uint8_t		*sh;
	long		 n;
	int		 rc;

	/* Die with the rank: its workers hold its end of the socket too,
	 * so its end of file would come only after theirs. */
	(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	(void)prctl(PR_SET_NAME, "gpupool-mpi");
	memset(&mp, 0, sizeof(mp));
	mp.fd = fd;
	mp.parent = parent;
	/* Only this thread of ours calls MPI. */
	if ((rc = MPI_Init(NULL, NULL)) != MPI_SUCCESS) {
		mp_fail(&mp, -EIO, "MPI_Init failed (error %d)", rc);
		mp_abandon(&mp, 0);
	}
	(void)MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_rank(MPI_COMM_WORLD, &mp.rank);
	MPI_Comm_size(MPI_COMM_WORLD, &mp.size);
	if (mp.size == 1 && (n = launcher_procs(&var)) > 1) {
		/* srun without --mpi=pmix: singletons, each its own run. */
		mp_fail(&mp, -ENOTSUP, "started as one of %ld processes (%s), "
		    "but MPI sees one: the launcher gave no MPI wire-up (under "
		    "Slurm: srun --mpi=pmix)", n, var);
		mp_abandon(&mp, 1);
	}
	if (ftruncate(memfd, (off_t)shm_len(mp.size)) == -1 ||
	    (sh = mmap(NULL, shm_len(mp.size), PROT_READ | PROT_WRITE,
	    MAP_SHARED, memfd, 0)) == MAP_FAILED ||
	    (mp.sent = calloc((size_t)mp.size, sizeof(*mp.sent))) == NULL) {
		mp_fail(&mp, -ENOMEM, "cannot set up ranks: %s",
		    strerror(errno));
		mp_abandon(&mp, 1);
	}
	close(memfd);
	mp.heard = (int64_t *)(void *)sh;
	mp.talk = sh + (size_t)mp.size * sizeof(int64_t);
	v[0] = mp.rank;
	v[1] = mp.size;
	if (frame_put(&mp.out, FR_READY, 0, v, sizeof(v)) < 0 ||
	    mp_flush(&mp) < 0 || fcntl(fd, F_SETFL, O_NONBLOCK) == -1)
		_exit(1);
	mp_loop(&mp);
	if (mp.end.clean && mp.flushed && !mp.failed) {
		if (frame_put(&mp.out, FR_DONE, 0, NULL, 0) < 0 ||
		    mp_flush(&mp) < 0)
			_exit(1);
		MPI_Finalize();
		_exit(0);
	}
	/* MPI_Finalize waits for every rank: with one lost, or a send that
	 * never completed, it would wait forever. Rank 0, whose run is
	 * over, has the launcher end the job: a lost rank may be stopped or
	 * hung, and a launcher that lets the job go on waits for it. */
	(void)mp_flush(&mp);
	if (mp.rank == 0)
		MPI_Abort(MPI_COMM_WORLD, mp.end.rc);
	_exit(1);
}

/* The rest runs in the rank's own process (gpupool-run's). */

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
		mp_main(sv[1], memfd, self);
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
		rk->shlen = shm_len(rk->size);
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
ranks_init(struct ranks **rkp, char *err, size_t errlen)
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
	if (run_block_signals(&set) < 0 || sigdelset(&set, SIGWINCH) == -1 ||
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
