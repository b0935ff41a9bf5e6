/*
 * claim.c: host-wide GPU claims, daemonless (claim.h; design.md, "Claims"):
 * who may take what, and the claimer's calls. The table and this
 * process's side of it are claimtab.c's.
 *
 * One table file, DIR/claims.v1, mode 0666, never unlinked or renamed:
 * a header, then slots (a GPU held, or a waiter with its ticket), then the
 * GPU keys (append-only). Every change is made under the guard, an OFD
 * lock on one byte far past the data; each slot is alive while its
 * owner's OFD holds the lock on the slot's own byte, so the kernel frees
 * a dead process's slots with its last fd, and whoever meets a dead slot
 * clears it. The table is read with pread(), never mapped: a table cut
 * short by someone cannot raise SIGBUS here. Waiters sleep on inotify
 * (any write, and any close of a copy opened for writing, which is how a
 * death shows) and are served in ticket order: each decision replays the
 * queue ahead of the asker, every live waiter taking (or, all-or-nothing,
 * keeping back) what it would take, before the asker gets what is left.
 *
 * The claims are a process's: one fd and one token per process, shared by
 * its claimers (pools), which never count against each other.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "claim.h"
#include "claimtab.h"
#include "internal.h"

struct gp_claimer {
	pid_t		 pid;		/* the process that opened it */
	int		 ng;
	struct {
		char	 key[56];	/* UUID, bus id or "fakeK" */
		uint64_t total;		/* bytes; 0: unknown */
		int	 tix;		/* its index in the table, -1: not
					   looked up yet */
		int	 hold;		/* its HOLD slot, or -1 */
		int	 n;		/* claims on it (items, or 1) */
		int	 whole;		/* of them, with no memory declared */
		uint64_t mem;		/* the declared ones' sum */
	}		 gpu[GP_CLAIM_MAXG];
	int		 wait;		/* its WAIT slot, or -1 */
	int		 ino;		/* inotify, -1: none (yet) */
};

/* The process's side (claimtab.h's gp_ct) is used under this. */
static pthread_mutex_t	 cl_mu = PTHREAD_MUTEX_INITIALIZER;

void
gp_claim_forget(struct gp_claimer *c)
{
	if (c != NULL && c->ino >= 0)
		close(c->ino);
	if (c != NULL)
		c->ino = -1;
	gp_ct_forked();
}

/* Room on each GPU: taken whole, or the declared bytes taken, by us
 * (this process and its ancestors) and by others. */
struct room {
	int		 whole[2];	/* [0]: ours, [1]: others' */
	uint64_t	 used[2];
};

/* Whether a claim of mem bytes takes GPU g whole: nothing declared, a
 * GPU of unknown size, or as much as it has. */
static int
whole_of(int g, uint64_t mem)
{
	return mem == 0 || gp_ct.g[g].total == 0 || mem >= gp_ct.g[g].total;
}

/* Whether mem bytes (0: the whole GPU) fit beside what is taken on GPU
 * g: by everyone (as others see it), or by others only (as we do). */
static int
fits(const struct room *r, int g, uint64_t mem, int others_only)
{
	uint64_t	 total = gp_ct.g[g].total, used = r[g].used[1];
	int		 whole = r[g].whole[1];

	if (!others_only) {
		used += r[g].used[0];
		whole |= r[g].whole[0];
	}
	if (whole)
		return 0;
	if (whole_of(g, mem))
		return used == 0;
	return used <= total && mem <= total - used;
}

static void
take(struct room *r, int g, uint64_t mem, int theirs)
{
	if (whole_of(g, mem))
		r[g].whole[theirs] = 1;
	r[g].used[theirs] += mem;
}

/* Each other process's waiter ahead of ticket, in ticket order, takes
 * what it would (up to n of its GPUs that fit, as it sees them). */
static void
queue_ahead(struct room *r, uint64_t ticket)
{
	uint64_t	 last = 0, best;
	uint32_t	 i, g, got;
	int		 at;

	for (;;) {
		at = -1;
		best = ticket;
		for (i = 0; i < gp_ct.t->h.hi; i++)
			if (gp_ct.cls[i] == S_OTHER &&
			    gp_ct.t->s[i].kind == CL_WAIT &&
			    gp_ct.t->s[i].ticket > last &&
			    gp_ct.t->s[i].ticket < best) {
				best = gp_ct.t->s[i].ticket;
				at = (int)i;
			}
		if (at < 0)
			return;
		last = best;
		for (g = 0, got = 0; g < gp_ct.t->h.ngpus && got <
		    gp_ct.t->s[at].n; g++)
			if (gp_ct_in_set(&gp_ct.t->s[at], (int)g) &&
			    fits(r, (int)g, gp_ct.t->s[at].mem, 0)) {
				take(r, (int)g, gp_ct.t->s[at].mem, 1);
				got++;
			}
	}
}

/* The room every hold leaves, after the waiters ahead of ticket. */
static void
rooms(struct room *r, uint64_t ticket)
{
	uint32_t	 i;

	memset(r, 0, sizeof(*r) * gp_ct.t->h.ngpus);
	for (i = 0; i < gp_ct.t->h.hi; i++)
		if (gp_ct.cls[i] != S_NONE && gp_ct.t->s[i].kind == CL_HOLD)
			take(r, (int)gp_ct.t->s[i].gpu, gp_ct.t->s[i].mem,
			    gp_ct.cls[i] == S_OTHER);
	queue_ahead(r, ticket);
}

/* What other processes hold of GPU g: whole (-1), or their bytes. */
static int64_t
others_on(int g)
{
	uint64_t	 sum = 0;
	uint32_t	 i;

	for (i = 0; i < gp_ct.t->h.hi; i++)
		if (gp_ct.cls[i] == S_OTHER && gp_ct.t->s[i].kind == CL_HOLD &&
		    (int)gp_ct.t->s[i].gpu == g) {
			if (whole_of(g, gp_ct.t->s[i].mem))
				return -1;
			sum += gp_ct.t->s[i].mem;
		}
	return (int64_t)sum;
}

/* Whether another process waits for GPU g. */
static int
wanted(int g)
{
	uint32_t	 k;

	for (k = 0; k < gp_ct.t->h.hi; k++)
		if (gp_ct.cls[k] == S_OTHER && gp_ct.t->s[k].kind == CL_WAIT &&
		    gp_ct_in_set(&gp_ct.t->s[k], g))
			return 1;
	return 0;
}

static const struct cl_slot *
holder_of(int g)
{
	uint32_t	 i;

	for (i = 0; i < gp_ct.t->h.hi; i++)
		if (gp_ct.cls[i] == S_OTHER && gp_ct.t->s[i].kind == CL_HOLD &&
		    (int)gp_ct.t->s[i].gpu == g)
			return &gp_ct.t->s[i];
	return NULL;
}

static int	may(const struct gp_claimer *, const struct room *, int,
		    uint64_t);

/* Who stands in the way, for people: of all c's GPUs, those it could
 * not have now, and the first one's holder. */
static void
say_why(const struct gp_claimer *c, const struct gp_claim_req *r,
    const struct room *rm, char *why, size_t len)
{
	const struct cl_slot	*h = NULL;
	char			 desc[160];
	size_t			 n;
	int			 i, held = 0, first = -1;

	if (why == NULL || len == 0)
		return;
	for (i = 0; i < c->ng; i++)
		if (c->gpu[i].tix >= 0 && !may(c, rm, i, r->mem)) {
			held++;
			if (h == NULL && (h = holder_of(c->gpu[i].tix)) != NULL)
				first = i;
		}
	if (held == c->ng)
		snprintf(why, len, "all %d held", held);
	else
		snprintf(why, len, "%d of %d held", held, c->ng);
	n = strlen(why);
	if (h == NULL)
		snprintf(why + n, len - n, " or kept for earlier waiters");
	else {
		gp_ct_describe(h, desc, sizeof(desc));
		snprintf(why + n, len - n, " (GPU %d: %s)", first, desc);
	}
}

static int
begin(struct gp_claimer *c)
{
	pthread_mutex_lock(&cl_mu);
	gp_ct_forked();
	if (c->pid != getpid() || gp_ct.pid == 0) {
		pthread_mutex_unlock(&cl_mu);
		return -ECHILD;	/* a fork's copy: not its claims */
	}
	return 0;
}

static void
end(void)
{
	pthread_mutex_unlock(&cl_mu);
}

int
gp_claim_open(struct gp_claimer **out, const char *dir, char *err,
    size_t errlen)
{
	struct gp_claimer	*c;
	int			 rc;

	*out = NULL;
	if ((rc = gp_ct_dir(&dir, err, errlen)) < 0 || dir == NULL)
		return rc;
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return -ENOMEM;
	c->pid = getpid();
	c->wait = c->ino = -1;
	pthread_mutex_lock(&cl_mu);
	gp_ct_forked();
	if ((rc = gp_ct_join(dir, err, errlen)) < 0) {
		end();
		free(c);
		return rc;
	}
	end();
	*out = c;
	return 0;
}

int
gp_claim_gpu(struct gp_claimer *c, const char *key, uint64_t total)
{
	if (c->ng >= GP_CLAIM_MAXG)
		return -E2BIG;
	snprintf(c->gpu[c->ng].key, sizeof(c->gpu[c->ng].key), "%s", key);
	c->gpu[c->ng].total = total;
	c->gpu[c->ng].tix = -1;
	c->gpu[c->ng].hold = -1;
	return c->ng++;
}

void
gp_claim_size(struct gp_claimer *c, int i, uint64_t total)
{
	if (i >= 0 && i < c->ng && c->gpu[i].tix < 0)
		c->gpu[i].total = total;
}

/* Each of c's GPUs its index in the table, its key added if missing,
 * its size if now known. Under the guard. 0 or -1 with gp_ct.bad set. */
static int
resolve(struct gp_claimer *c)
{
	int	 i, k, add;

	for (i = 0; i < c->ng; i++) {
		if (c->gpu[i].tix >= 0 && (c->gpu[i].total == 0 ||
		    gp_ct.g[c->gpu[i].tix].total != 0))
			continue;
		for (k = 0; k < gp_ct.ng; k++)
			if (strcmp(gp_ct.g[k].key, c->gpu[i].key) == 0)
				break;
		if (k == GP_CLAIM_MAXG) {
			gp_ct_bad("%s is full: %s GPU keys", "256");
			return -1;
		}
		add = k == gp_ct.ng;
		if (add) {
			memset(&gp_ct.g[k], 0, sizeof(gp_ct.g[k]));
			memcpy(gp_ct.g[k].key, c->gpu[i].key,
			    sizeof(gp_ct.g[k].key));
		}
		if (add || (gp_ct.g[k].total == 0 && c->gpu[i].total > 0)) {
			gp_ct.g[k].total = c->gpu[i].total;
			if (pwrite(gp_ct.fd, &gp_ct.g[k], sizeof(gp_ct.g[k]),
			    CL_GOFF + (off_t)k * (off_t)sizeof(gp_ct.g[k])) !=
			    (ssize_t)sizeof(gp_ct.g[k]))
				goto io;
		}
		if (add) {
			gp_ct.t->h.ngpus = (uint32_t)++gp_ct.ng;
			if (gp_ct_put_hdr() < 0)
				goto io;
		}
		c->gpu[i].tix = k;
	}
	return 0;
io:
	gp_ct_bad("%s: %s", strerror(errno ? errno : EIO));
	return -1;
}

/* begin(), then the table locked and read, c's GPUs looked up. 0, or -1
 * (the table unusable, why says so; the mutex is still held). */
static int
enter(struct gp_claimer *c, char *why, size_t len)
{
	if (gp_ct_load() == 0) {
		if (resolve(c) == 0) {
			gp_ct_classify();
			return 0;
		}
		gp_ct_unload();
	}
	if (why != NULL && len > 0)
		snprintf(why, len, "every GPU counts as held: %s", gp_ct.bad);
	return -1;
}

static int
set_wait(struct gp_claimer *c, const struct gp_claim_req *r)
{
	struct cl_slot	*s, was;
	int		 i, rc, fresh = c->wait < 0;

	if (c->wait < 0) {
		if ((rc = gp_ct_new_slot()) < 0)
			return rc;
		c->wait = rc;
		gp_ct_fill_slot(&gp_ct.t->s[rc], CL_WAIT, r->mem);
		gp_ct.t->s[rc].ticket = gp_ct.t->h.ticket++;
		if ((rc = gp_ct_put_hdr()) < 0)
			return rc;
	}
	s = &gp_ct.t->s[c->wait];
	was = *s;
	s->mem = r->mem;
	s->n = (uint32_t)r->n;
	memset(s->set, 0, sizeof(s->set));
	for (i = 0; i < r->nset; i++)
		s->set[c->gpu[r->set[i]].tix / 8] |=
		    (uint8_t)(1 << (c->gpu[r->set[i]].tix % 8));
	/* Unchanged, unwritten: each write wakes every waiter, and two
	 * waiters asking again would wake each other without end. */
	if (!fresh && memcmp(&was, s, sizeof(was)) == 0)
		return 0;
	return gp_ct_put_slot(c->wait);
}

static void
unwait(struct gp_claimer *c)
{
	if (c->wait >= 0)
		gp_ct_free_slot(c->wait);
	c->wait = -1;
}

/* Whether c may take one more claim of mem bytes on its GPU i: one it
 * holds, while no other process waits for it and the bytes fit beside
 * the others'; one it does not, when the room left after the waiters
 * ahead has them. */
static int
may(const struct gp_claimer *c, const struct room *rm, int i, uint64_t mem)
{
	int	 g = c->gpu[i].tix;
	int64_t	 o;

	if (c->gpu[i].n == 0)
		return fits(rm, g, mem, 1);
	if (wanted(g))
		return 0;
	if (c->gpu[i].whole > 0)
		return 1;
	if ((o = others_on(g)) < 0)
		return 0;
	if (whole_of(g, c->gpu[i].mem + mem))
		return o == 0;
	return (uint64_t)o + c->gpu[i].mem + mem <= gp_ct.g[g].total;
}

/* Write GPU i's HOLD slot as c's claims on it now are (made on the
 * first, freed with the last). 0 or an errno. */
static int
sync_hold(struct gp_claimer *c, int i)
{
	struct cl_slot	*s;
	int		 k;

	if (c->gpu[i].n == 0) {
		if (c->gpu[i].hold >= 0)
			gp_ct_free_slot(c->gpu[i].hold);
		c->gpu[i].hold = -1;
		return 0;
	}
	if (c->gpu[i].hold < 0) {
		if ((k = gp_ct_new_slot()) < 0)
			return k;
		gp_ct_fill_slot(&gp_ct.t->s[k], CL_HOLD, 0);
		gp_ct.t->s[k].gpu = (uint32_t)c->gpu[i].tix;
		c->gpu[i].hold = k;
	}
	s = &gp_ct.t->s[c->gpu[i].hold];
	s->mem = c->gpu[i].whole > 0 || gp_ct.g[c->gpu[i].tix].total == 0 ? 0 :
	    c->gpu[i].mem;
	return gp_ct_put_slot(c->gpu[i].hold);
}

static void
count(struct gp_claimer *c, int i, uint64_t mem, int d)
{
	c->gpu[i].n += d;
	c->gpu[i].whole += mem == 0 ? d : 0;
	c->gpu[i].mem = d > 0 ? c->gpu[i].mem + mem : c->gpu[i].mem - mem;
}

int
gp_claim_try(struct gp_claimer *c, const struct gp_claim_req *r, int *got,
    char *why, size_t len)
{
	struct room	 rm[GP_CLAIM_MAXG];
	int		 i, k, n = 0, rc = 0;

	if (r->n < 1 || r->nset < 1)
		return -EINVAL;
	if ((rc = begin(c)) < 0)
		return rc;
	if (enter(c, why, len) < 0) {
		end();
		return 0;
	}
	rooms(rm, c->wait >= 0 ? gp_ct.t->s[c->wait].ticket : UINT64_MAX);
	for (i = 0; i < r->nset && n < r->n; i++)
		if (may(c, rm, r->set[i], r->mem))
			got[n++] = r->set[i];
	if (r->look) {		/* only a look: nothing taken, no ticket */
		if (n < r->n)
			say_why(c, r, rm, why, len);
		rc = n == r->n ? n : 0;
	} else if (n == r->n) {
		for (k = 0; k < n && rc == 0; k++) {
			count(c, got[k], r->mem, 1);
			if ((rc = sync_hold(c, got[k])) < 0)
				count(c, got[k], r->mem, -1);
		}
		if (rc < 0)	/* taken back: it is all or nothing */
			while (--k > 0) {
				count(c, got[k - 1], r->mem, -1);
				(void)sync_hold(c, got[k - 1]);
			}
		else {
			unwait(c);
			rc = n;
		}
	} else if ((rc = set_wait(c, r)) == 0)
		say_why(c, r, rm, why, len);
	if (rc < 0 && why != NULL && len > 0)
		snprintf(why, len, "every GPU counts as held: %s: %s",
		    gp_ct.path, rc == -EUSERS ? "its 4096 slots are taken "
		    "(holders and waiters)" : strerror(-rc));
	gp_ct_unload();
	end();
	return rc < 0 ? 0 : rc;
}

void
gp_claim_unwait(struct gp_claimer *c)
{
	if (c == NULL || c->wait < 0 || begin(c) < 0)
		return;
	if (gp_ct.fd >= 0 && gp_ct_lock(CL_LOCKS, F_WRLCK, 1) == 0) {
		unwait(c);
		gp_ct_unload();
	}
	c->wait = -1;
	end();
}

void
gp_claim_drop(struct gp_claimer *c, int i, uint64_t mem)
{
	if (c == NULL || c->gpu[i].n == 0 || begin(c) < 0)
		return;
	count(c, i, mem, -1);
	if (c->gpu[i].n == 0 && c->gpu[i].hold >= 0 && gp_ct.fd >= 0) {
		/* The last claim: the slot is zeroed, then its byte let go,
		 * with no need of the guard (nobody else writes a live slot,
		 * and one read half zeroed counts, at worst, as held for one
		 * more decision). Two system calls a task. */
		gp_ct_free_slot(c->gpu[i].hold);
		c->gpu[i].hold = -1;
	} else if (gp_ct.fd >= 0 && gp_ct_lock(CL_LOCKS, F_WRLCK, 1) == 0) {
		if (sync_hold(c, i) < 0 && c->gpu[i].n == 0)
			c->gpu[i].hold = -1;
		gp_ct_unload();
	} else if (c->gpu[i].n == 0)
		c->gpu[i].hold = -1;	/* the table is gone: so is it */
	end();
}

void
gp_claim_close(struct gp_claimer *c)
{
	int	 i;

	if (c == NULL)
		return;
	if (begin(c) == 0) {
		if (gp_ct.fd >= 0 && gp_ct_lock(CL_LOCKS, F_WRLCK, 1) == 0) {
			for (i = 0; i < c->ng; i++)
				if (c->gpu[i].hold >= 0)
					gp_ct_free_slot(c->gpu[i].hold);
			unwait(c);
			gp_ct_unload();
		}
		gp_ct_leave();
		end();
	}
	if (c->ino >= 0)
		close(c->ino);
	free(c);
}

int
gp_claim_fd(struct gp_claimer *c)
{
	if (c == NULL)
		return -1;
	if (c->ino < 0 && c->pid == getpid()) {
		if ((c->ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0)
			return -1;
		if (inotify_add_watch(c->ino, gp_ct.path, IN_MODIFY |
		    IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF) < 0) {
			close(c->ino);
			c->ino = -1;
		}
	}
	return c->ino;
}

int
gp_claim_poll_ms(int fd, int woke)
{
	return fd < 0 || woke ? GP_CLAIM_POLL_MS : 1000;
}

void
gp_claim_drain(struct gp_claimer *c)
{
	char	 buf[4096];

	if (c != NULL && c->ino >= 0)
		while (read(c->ino, buf, sizeof(buf)) > 0)
			;
}

int
gp_claim_wait(struct gp_claimer *c, const struct gp_claim_req *r, int *got,
    int timeout_ms, int cancel_fd, char *why, size_t len)
{
	struct pollfd	 pf[2];
	int64_t		 t0 = gp_now_ns(), left;
	int		 rc, said = 0, fd, n, ms, woke = 0;

	for (;;) {
		if ((rc = gp_claim_try(c, r, got, why, len)) != 0)
			return rc;
		if (timeout_ms < 0) {
			gp_claim_unwait(c);
			return -ETIMEDOUT;
		}
		if (!said) {
			said = 1;
			fprintf(stderr, "gpupool: waiting for %d GPU%s: %s\n",
			    r->n, r->n == 1 ? "" : "s", why);
		}
		fd = gp_claim_fd(c);
		ms = gp_claim_poll_ms(fd, woke);
		if (timeout_ms > 0) {
			left = (int64_t)timeout_ms - (gp_now_ns() - t0) /
			    1000000;
			if (left <= 0) {
				gp_claim_unwait(c);
				return -ETIMEDOUT;
			}
			if (left < ms)
				ms = (int)left;
		}
		n = 0;
		pf[n].fd = fd;
		pf[n++].events = POLLIN;
		if (cancel_fd >= 0) {
			pf[n].fd = cancel_fd;
			pf[n++].events = POLLIN;
		}
		if (poll(pf, (nfds_t)n, ms) < 0 && errno != EINTR)
			return -errno;
		woke = fd >= 0 && (pf[0].revents & POLLIN);
		if (cancel_fd >= 0 && (pf[n - 1].revents & (POLLIN | POLLHUP))) {
			gp_claim_unwait(c);
			return -ECANCELED;
		}
		gp_claim_drain(c);
	}
}

