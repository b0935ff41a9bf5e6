/*
 * mpi_proc.c: the MPI process of a rank, forked by ranks_init() (mpi.c)
 * before anything else is started. It alone calls MPI (MPI_Init starts
 * threads, and the process that forks the pool's workers must have none),
 * from one thread: it sends what the rank passed it, receives whatever
 * arrives and passes it on, as frames over a socketpair (mpi_frame.c).
 * Consecutive records for one peer are sent as one MPI message, so a busy
 * run needs few. Every peer we talk to hears from us at least every
 * RANKS_BEAT_NS, so a silent peer is a lost one; while the rank's own
 * process is stopped its MPI process beats nobody, so a stopped rank
 * falls silent, as it did when MPI ran inside it.
 *
 * A message of RANKS_RING_MIN bytes or more goes from the rank's out
 * ring and comes into its in ring (ranks.h, FR_RING_*), when it has
 * rings: sent from where the rank wrote it, received where the rank
 * reads it, with no copy here. The MPI process never waits for ring
 * room: a message the in ring has no room for comes as a frame, as a
 * small one does, so that beats and the rank's controls are never held
 * up behind the rank's reading.
 *
 * MPI's blocking calls spin; the MPI process sleeps instead, up to
 * RANKS_SLEEP_MAX_NS between looks when nothing moves (RANKS_SLEEP_MIN_NS
 * while the rank says it is busy: it has items out), and is woken at
 * once by a frame from the rank. It never blocks on the rank (what the
 * rank has not read yet waits in a buffer). It keeps the rank's signals
 * blocked, dies with it (PR_SET_PDEATHSIG) and leaves only by _exit(),
 * an abort (mp_abort()) or after MPI_Finalize().
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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "ranks/ranks.h"
#include "../../io.h"

#define RANKS_BEAT_NS		1000000000LL
#define RANKS_SLEEP_MIN_NS	20000LL
#define RANKS_SLEEP_MAX_NS	1000000LL
#define RANKS_COALESCE_MAX	(4u << 20)	/* bytes per MPI message */
#define RANKS_FLUSH_NS		5000000000LL	/* at the end, for sends */
#define RANKS_LOOK_NS		100000000LL	/* at the rank's state */

struct pending {
	struct pending	*next;
	MPI_Request	 req;
	void		*buf;
	int64_t		 ring_off;	/* buf is the out ring's, or -1 */
};

struct mproc {
	int		 rank, size;
	pid_t		 parent;	/* the rank's process */
	int		 fd;		/* socket to it, nonblocking */
	struct gp_buf	 in, out;	/* frames from the rank, to it */
	int64_t		*heard;		/* shared (as above) */
	uint8_t		*talk;
	uint8_t		*busy;
	uint8_t		*ring;		/* out ring, then in ring, or NULL */
	size_t		 rsize;		/* bytes of each */
	struct ring	 inring;	/* the in ring's extents */
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

/*
 * End the job: the launcher kills every rank. Open MPI's MPI_Abort() first
 * sends its "MPI_ABORT was invoked" banner to mpirun as a PMIx log request,
 * and Open MPI 4.1's mpirun handles that on its PMIx thread, where it can
 * crash (SIGSEGV in pmix_server_log_fn, seen in CI after a lost rank, while
 * the other ranks were leaving). ompi_mpi_abort() is the abort that follows
 * the banner, without it; our own line has said why the job ends.
 */
#ifdef OPEN_MPI
extern int ompi_mpi_abort(MPI_Comm, int) __attribute__((weak));
#endif

static void __attribute__((noreturn))
mp_abort(int rc)
{
#ifdef OPEN_MPI
	if (ompi_mpi_abort != NULL)
		(void)ompi_mpi_abort(MPI_COMM_WORLD, rc);
#endif
	(void)MPI_Abort(MPI_COMM_WORLD, rc);
	_exit(rc == 0 ? 1 : rc);
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
	struct fr_ring	 fr;
	const uint8_t	*d;
	struct rmsg	*m;
	int64_t		 now;
	uint64_t	 off;
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
		} else if (f.type == FR_RING_FREE && f.len == sizeof(off)) {
			memcpy(&off, d, sizeof(off));
			(void)ring_free(&mp->inring, off);
		} else if (f.type == FR_RING_SEND && f.len == sizeof(fr) &&
		    !mp->failed) {
			memcpy(&fr, d, sizeof(fr));
			if (mp->ring == NULL || fr.off > mp->rsize ||
			    fr.len > mp->rsize - fr.off)
				return -EPROTO;
			if ((m = malloc(sizeof(*m))) == NULL)
				return -ENOMEM;
			m->next = NULL;
			m->peer = fr.peer;
			m->type = fr.type;
			m->len = fr.len;
			m->ring = 1 + fr.off;
			**qtail = m;
			*qtail = &m->next;
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

/* Send len bytes at buf: malloc'd ones (freed once sent), or the out
 * ring's at ring_off (given back to the rank once sent, FR_RING_SENT). */
static int
post(struct mproc *mp, int peer, int type, void *buf, size_t len,
    int64_t ring_off)
{
	struct pending	*p;
	int		 rc;

	if ((p = malloc(sizeof(*p))) == NULL) {
		if (ring_off < 0)
			free(buf);
		return MPI_ERR_NO_MEM;
	}
	p->buf = buf;
	p->ring_off = ring_off;
	rc = MPI_Isend(buf, (int)len, MPI_BYTE, peer, type, MPI_COMM_WORLD,
	    &p->req);
	if (rc != MPI_SUCCESS) {
		if (ring_off < 0)
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
 * kind goes as one message, one in the out ring alone, from where it
 * is. Frees the queue. */
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
		if (m->ring) {
			next = m->next;
			if (rc == MPI_SUCCESS)
				rc = post(mp, peer, type, mp->ring + m->ring -
				    1, len, (int64_t)(m->ring - 1));
			free(m);
			continue;
		}
		for (last = m; (type == RM_TASKS || type == RM_RESULTS) &&
		    (e = last->next) != NULL && e->peer == peer &&
		    e->type == type && !e->ring &&
		    len + e->len <= RANKS_COALESCE_MAX; last = e)
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
		rc = buf != NULL ? post(mp, peer, type, buf, len, -1) :
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
		if (p->ring_off < 0)
			free(p->buf);
		else if (frame_put(&mp->out, FR_RING_SENT, 0, &p->ring_off,
		    sizeof(p->ring_off)) < 0)
			return MPI_ERR_NO_MEM;	/* mp_fail() follows */
		free(p);
	}
	return MPI_SUCCESS;
}

/* Receive a big message into the in ring, if it has room: 1, 0 (no
 * room: as a small one), or an MPI error as a negative number. */
static int
recv_ring(struct mproc *mp, const MPI_Status *st, int n)
{
	struct fr_ring	 fr;
	int64_t		 off;
	int		 rc;

	if (mp->ring == NULL || (size_t)n < RANKS_RING_MIN ||
	    (off = ring_alloc(&mp->inring, (size_t)n)) < 0)
		return 0;
	if ((rc = MPI_Recv(mp->ring + mp->rsize + off, n, MPI_BYTE,
	    st->MPI_SOURCE, st->MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE)) !=
	    MPI_SUCCESS)
		return -rc;
	memset(&fr, 0, sizeof(fr));
	fr.type = st->MPI_TAG;
	fr.peer = st->MPI_SOURCE;
	fr.off = (uint64_t)off;
	fr.len = (uint64_t)n;
	if (frame_put(&mp->out, FR_RING_RECV, 0, &fr, sizeof(fr)) < 0)
		return -MPI_ERR_NO_MEM;
	return 1;
}

/* Receive whatever has arrived, straight into frames for the rank (or
 * the in ring); returns how many messages, or an MPI error as a
 * negative number. */
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
		if ((rc = recv_ring(mp, &st, n)) < 0)
			return rc;
		if (rc == 0) {
			if (gp_buf_reserve(&mp->out, sizeof(f) + (size_t)n) <
			    0)
				return -MPI_ERR_NO_MEM;
			if ((rc = MPI_Recv(mp->out.data + mp->out.len +
			    sizeof(f), n, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG,
			    MPI_COMM_WORLD, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
				return -rc;
			memset(&f, 0, sizeof(f));
			f.type = st.MPI_TAG;
			f.peer = st.MPI_SOURCE;
			f.len = (uint64_t)n;
			memcpy(mp->out.data + mp->out.len, &f, sizeof(f));
			mp->out.len += sizeof(f) + (size_t)n;
		}
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
		if ((rc = post(mp, p, RM_BEAT, b, 0, -1)) != MPI_SUCCESS)
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
		if (nap > RANKS_SLEEP_MIN_NS &&
		    __atomic_load_n(mp->busy, __ATOMIC_RELAXED))
			nap = RANKS_SLEEP_MIN_NS;
		if (nap == 0)
			continue;
		ts.tv_sec = 0;
		ts.tv_nsec = nap;
		(void)ppoll(&pfd, 1, &ts, NULL);
	}
}

/* The rings, if the rank gave them: its out ring, then its in ring,
 * mapped shared; 0 or -errno. */
static int
map_rings(struct mproc *mp, int ringfd)
{
	struct stat	 st;
	void		*p;

	if (ringfd < 0)
		return 0;
	if (fstat(ringfd, &st) == -1)
		return -errno;
	if (st.st_size < 2 * RING_ALIGN || st.st_size % (2 * RING_ALIGN))
		return -EINVAL;
	if ((p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
	    MAP_SHARED, ringfd, 0)) == MAP_FAILED)
		return -errno;
	close(ringfd);
	mp->ring = p;
	mp->rsize = (size_t)st.st_size / 2;
	ring_init(&mp->inring, mp->rsize);
	return 0;
}

/* The MPI process: MPI_Init, FR_READY (or FR_ERR), then pass messages
 * until the rank says FR_END. Never returns. */
void
mproc_main(int fd, int memfd, int ringfd, pid_t parent)
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
	if (ftruncate(memfd, (off_t)frame_shm_len(mp.size)) == -1 ||
	    (sh = mmap(NULL, frame_shm_len(mp.size), PROT_READ | PROT_WRITE,
	    MAP_SHARED, memfd, 0)) == MAP_FAILED ||
	    (mp.sent = calloc((size_t)mp.size, sizeof(*mp.sent))) == NULL ||
	    (errno = -map_rings(&mp, ringfd)) != 0) {
		mp_fail(&mp, -ENOMEM, "cannot set up ranks: %s",
		    strerror(errno));
		mp_abandon(&mp, 1);
	}
	close(memfd);
	mp.heard = (int64_t *)(void *)sh;
	mp.talk = sh + (size_t)mp.size * sizeof(int64_t);
	mp.busy = mp.talk + mp.size;
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
		mp_abort(mp.end.rc);
	_exit(1);
}
