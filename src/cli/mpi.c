/*
 * mpi.c: the ranks of one run, over MPI (mpi_stub.c stands in for it in
 * a build without MPI). The main thread calls MPI_Init_thread() and
 * MPI_Finalize(); in between, one thread of ours makes every MPI call
 * (MPI_THREAD_SERIALIZED): it sends what the main thread queued, receives
 * whatever arrives and queues it for the main thread, whose poll() sees
 * an eventfd. Consecutive records for one peer are sent as one MPI
 * message, so a busy run needs few. Every peer we talk to hears from us
 * at least every RANKS_BEAT_NS, so a silent peer is a lost one.
 *
 * MPI's blocking calls spin; this thread sleeps instead, up to
 * RANKS_SLEEP_MAX_NS between looks when nothing moves, and is woken at
 * once when the main thread queues a message.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "cli.h"

#define RANKS_BEAT_NS		1000000000LL
#define RANKS_SLEEP_MIN_NS	20000LL
#define RANKS_SLEEP_MAX_NS	1000000LL
#define RANKS_COALESCE_MAX	(4u << 20)	/* bytes per MPI message */
#define RANKS_FLUSH_NS		5000000000LL	/* at the end, for sends */

struct pending {
	struct pending	*next;
	MPI_Request	 req;
	void		*buf;
};

struct ranks {
	int		 rank, size;
	char		 host[256];
	pthread_t	 thr;
	int		 started;
	pthread_mutex_t	 mu;
	struct rmsg	*in, **in_tail;		/* received, for the main */
	struct rmsg	*out, **out_tail;	/* queued, for the thread */
	int		 in_fd;		/* eventfd: in is not empty */
	int		 kick_fd;	/* eventfd: out grew, or stop */
	int		 stop;
	int		 flushed;	/* every send completed */
	char		 err[256];	/* an MPI call failed */
	int64_t		*heard;		/* per peer: last receipt, monotonic */
	int64_t		*sent;		/* per peer: last send (thread only) */
	uint8_t		*talk;		/* per peer: beat it (atomic) */
	struct pending	*pend;		/* sends in flight (thread only) */
};

static void
mpi_errstr(int rc, const char *what, char *err, size_t errlen)
{
	char	 s[MPI_MAX_ERROR_STRING];
	int	 n = 0;

	if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS)
		snprintf(s, sizeof(s), "error %d", rc);
	snprintf(err, errlen, "MPI: %s: %s", what, s);
}

void
ranks_handover(char **argv, char *err, size_t errlen)
{
	/* This is the MPI program already. */
}

int
ranks_init(struct ranks **rkp, char *err, size_t errlen)
{
	struct ranks	*rk;
	const char	*var;
	long		 n;
	int		 prov, rc;

	*rkp = NULL;
	if (!launcher_mpi()) {
		if ((n = launcher_procs(&var)) <= 1)
			return 0;
		snprintf(err, errlen, "started as one of %ld processes (%s) "
		    "without MPI wire-up: each would run every task (under "
		    "Slurm: srun --mpi=pmix)", n, var);
		return -ENOTSUP;
	}
	if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED,
	    &prov)) != MPI_SUCCESS) {
		snprintf(err, errlen, "MPI_Init_thread failed (error %d)", rc);
		return -EIO;
	}
	if (prov < MPI_THREAD_SERIALIZED) {
		snprintf(err, errlen, "this MPI library does not allow calls "
		    "from a second thread (MPI_THREAD_SERIALIZED)");
		MPI_Finalize();
		return -ENOTSUP;
	}
	(void)MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	if ((rk = calloc(1, sizeof(*rk))) == NULL) {
		MPI_Finalize();
		return -ENOMEM;
	}
	MPI_Comm_rank(MPI_COMM_WORLD, &rk->rank);
	MPI_Comm_size(MPI_COMM_WORLD, &rk->size);
	if (rk->size == 1 && (n = launcher_procs(&var)) > 1) {
		/* srun without --mpi=pmix: singletons, each its own run. */
		snprintf(err, errlen, "started as one of %ld processes (%s), "
		    "but MPI sees one: the launcher gave no MPI wire-up (under "
		    "Slurm: srun --mpi=pmix)", n, var);
		MPI_Finalize();
		free(rk);
		return -ENOTSUP;
	}
	if (gethostname(rk->host, sizeof(rk->host) - 1) == -1)
		snprintf(rk->host, sizeof(rk->host), "rank%d", rk->rank);
	rk->in_tail = &rk->in;
	rk->out_tail = &rk->out;
	rk->in_fd = rk->kick_fd = -1;
	*rkp = rk;
	if (rk->size == 1)
		return 0;
	if ((rk->heard = calloc((size_t)rk->size, sizeof(*rk->heard))) ==
	    NULL || (rk->sent = calloc((size_t)rk->size,
	    sizeof(*rk->sent))) == NULL || (rk->talk = calloc((size_t)rk->size,
	    1)) == NULL || (rk->in_fd = eventfd(0, EFD_CLOEXEC |
	    EFD_NONBLOCK)) == -1 || (rk->kick_fd = eventfd(0, EFD_CLOEXEC |
	    EFD_NONBLOCK)) == -1) {
		snprintf(err, errlen, "cannot set up ranks: %s",
		    strerror(errno));
		return -ENOMEM;
	}
	pthread_mutex_init(&rk->mu, NULL);
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
	return rk->in_fd;
}

static void
efd_bump(int fd)
{
	uint64_t	 one = 1;

	(void)!write(fd, &one, sizeof(one));
}

static void
thread_fail(struct ranks *rk, int rc, const char *what)
{
	pthread_mutex_lock(&rk->mu);
	if (rk->err[0] == '\0')
		mpi_errstr(rc, what, rk->err, sizeof(rk->err));
	pthread_mutex_unlock(&rk->mu);
	efd_bump(rk->in_fd);
}

static int
post(struct ranks *rk, int peer, int type, void *buf, size_t len)
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
	p->next = rk->pend;
	rk->pend = p;
	rk->sent[peer] = clock_ns(CLOCK_MONOTONIC);
	return MPI_SUCCESS;
}

/* Send a queue taken from the main thread: a run of records for one
 * peer and of one kind goes as one message. Frees the queue. */
static int
send_all(struct ranks *rk, struct rmsg *m)
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
		rc = buf != NULL ? post(rk, peer, type, buf, len) :
		    MPI_ERR_NO_MEM;
	}
	return rc;
}

static int
reap_sends(struct ranks *rk)
{
	struct pending	**pp = &rk->pend, *p;
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

/* Receive whatever has arrived; returns how many messages, or an MPI
 * error as a negative number. */
static int
recv_all(struct ranks *rk)
{
	struct rmsg	*m, *head = NULL, **tail = &head;
	MPI_Status	 st;
	int		 flag, n, rc, got = 0;
	int64_t		 now;

	for (;;) {
		if ((rc = MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG,
		    MPI_COMM_WORLD, &flag, &st)) != MPI_SUCCESS)
			return -rc;
		if (!flag)
			break;
		MPI_Get_count(&st, MPI_BYTE, &n);
		if ((m = malloc(sizeof(*m) + (size_t)n)) == NULL)
			return -MPI_ERR_NO_MEM;
		if ((rc = MPI_Recv(m->data, n, MPI_BYTE, st.MPI_SOURCE,
		    st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE)) !=
		    MPI_SUCCESS) {
			free(m);
			return -rc;
		}
		m->next = NULL;
		m->peer = st.MPI_SOURCE;
		m->type = st.MPI_TAG;
		m->len = (size_t)n;
		*tail = m;
		tail = &m->next;
		got++;
	}
	if (got == 0)
		return 0;
	now = clock_ns(CLOCK_MONOTONIC);
	pthread_mutex_lock(&rk->mu);
	for (m = head; m != NULL; m = m->next)
		rk->heard[m->peer] = now;
	if (rk->in == NULL)
		efd_bump(rk->in_fd);
	*rk->in_tail = head;
	rk->in_tail = tail;
	pthread_mutex_unlock(&rk->mu);
	return got;
}

static int
beat(struct ranks *rk, int64_t now)
{
	uint8_t	*b;
	int	 p, rc;

	for (p = 0; p < rk->size; p++) {
		if (!__atomic_load_n(&rk->talk[p], __ATOMIC_RELAXED) ||
		    now - rk->sent[p] < RANKS_BEAT_NS)
			continue;
		if ((b = malloc(1)) == NULL)
			return MPI_ERR_NO_MEM;
		if ((rc = post(rk, p, RM_BEAT, b, 0)) != MPI_SUCCESS)
			return rc;
	}
	return MPI_SUCCESS;
}

static void *
thread_main(void *arg)
{
	struct ranks	*rk = arg;
	struct rmsg	*out;
	struct pollfd	 pfd = { rk->kick_fd, POLLIN, 0 };
	struct timespec	 ts;
	uint64_t	 v;
	int64_t		 nap = 0, now, stop_at = 0;
	int		 rc, stop, moved;

	for (;;) {
		pthread_mutex_lock(&rk->mu);
		out = rk->out;
		rk->out = NULL;
		rk->out_tail = &rk->out;
		stop = rk->stop;
		pthread_mutex_unlock(&rk->mu);
		moved = out != NULL;
		if ((rc = send_all(rk, out)) != MPI_SUCCESS) {
			thread_fail(rk, rc, "send");
			break;
		}
		if ((rc = recv_all(rk)) < 0) {
			thread_fail(rk, -rc, "receive");
			break;
		}
		moved |= rc > 0;
		if ((rc = reap_sends(rk)) != MPI_SUCCESS) {
			thread_fail(rk, rc, "send");
			break;
		}
		now = clock_ns(CLOCK_MONOTONIC);
		if (stop) {
			if (rk->pend == NULL) {
				rk->flushed = 1;
				break;
			}
			if (stop_at == 0)
				stop_at = now + RANKS_FLUSH_NS;
			else if (now > stop_at)
				break;	/* a peer that never takes them */
		} else if ((rc = beat(rk, now)) != MPI_SUCCESS) {
			thread_fail(rk, rc, "send");
			break;
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
		if (ppoll(&pfd, 1, &ts, NULL) > 0)
			(void)!read(rk->kick_fd, &v, sizeof(v));
	}
	return NULL;
}

int
ranks_start(struct ranks *rk, char *err, size_t errlen)
{
	int64_t	 now = clock_ns(CLOCK_MONOTONIC);
	int	 p, rc;

	if (rk == NULL || rk->size == 1)
		return 0;
	/* Rank 0 talks to every rank, the others to rank 0, from now on:
	 * a rank slow to start its pool is heard from all the same. */
	for (p = 0; p < rk->size; p++) {
		rk->heard[p] = rk->sent[p] = now;
		rk->talk[p] = p != rk->rank && (rk->rank == 0 || p == 0);
	}
	/* The caller's signal mask (SIGINT, SIGTERM, SIGHUP blocked) is
	 * the thread's too: signals stay with the signalfd. */
	if ((rc = pthread_create(&rk->thr, NULL, thread_main, rk)) != 0) {
		snprintf(err, errlen, "cannot start the MPI thread: %s",
		    strerror(rc));
		return -rc;
	}
	rk->started = 1;
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
	struct rmsg	*m;
	int		 kick;

	if ((m = malloc(sizeof(*m) + len)) == NULL)
		return -ENOMEM;
	m->next = NULL;
	m->peer = peer;
	m->type = type;
	m->len = len;
	if (len > 0)
		memcpy(m->data, data, len);
	pthread_mutex_lock(&rk->mu);
	kick = rk->out == NULL;
	*rk->out_tail = m;
	rk->out_tail = &m->next;
	pthread_mutex_unlock(&rk->mu);
	if (kick)
		efd_bump(rk->kick_fd);
	return 0;
}

struct rmsg *
ranks_recv(struct ranks *rk, char *err, size_t errlen)
{
	struct rmsg	*m;
	uint64_t	 v;

	pthread_mutex_lock(&rk->mu);
	if ((m = rk->in) != NULL) {
		if ((rk->in = m->next) == NULL)
			rk->in_tail = &rk->in;
		m->next = NULL;
	} else {
		(void)!read(rk->in_fd, &v, sizeof(v));
		if (rk->err[0] != '\0') {
			snprintf(err, errlen, "%s", rk->err);
			efd_bump(rk->in_fd);	/* stays readable */
		} else
			err[0] = '\0';
	}
	pthread_mutex_unlock(&rk->mu);
	return m;
}

int64_t
ranks_silent(struct ranks *rk, int peer)
{
	int64_t	 t;

	pthread_mutex_lock(&rk->mu);
	t = rk->heard[peer];
	pthread_mutex_unlock(&rk->mu);
	return clock_ns(CLOCK_MONOTONIC) - t;
}

int
ranks_end(struct ranks *rk, int clean, int rc)
{
	struct rmsg	*m;
	int		 flushed = 1;

	if (rk == NULL)
		return 0;
	if (rk->started) {
		pthread_mutex_lock(&rk->mu);
		rk->stop = 1;
		pthread_mutex_unlock(&rk->mu);
		efd_bump(rk->kick_fd);
		pthread_join(rk->thr, NULL);
		flushed = rk->flushed && rk->err[0] == '\0';
	}
	while ((m = rk->in) != NULL) {
		rk->in = m->next;
		free(m);
	}
	while ((m = rk->out) != NULL) {
		rk->out = m->next;
		free(m);
	}
	/* MPI_Finalize waits for every rank: with one lost, or a send that
	 * never completed, it would wait forever. Rank 0, whose run is
	 * over, has the launcher end the job: a lost rank may be stopped or
	 * hung, and a launcher that lets the job go on waits for it. */
	if (clean && flushed)
		MPI_Finalize();
	else if (rk->rank == 0)
		MPI_Abort(MPI_COMM_WORLD, rc);
	if (rk->in_fd >= 0)
		close(rk->in_fd);
	if (rk->kick_fd >= 0)
		close(rk->kick_fd);
	free(rk->heard);
	free(rk->sent);
	free(rk->talk);
	free(rk);
	return clean && flushed ? 0 : -EPIPE;
}
