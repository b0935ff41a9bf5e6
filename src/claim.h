/*
 * claim.h: host-wide GPU claims (claim.c). Every gpupool of a host takes a
 * GPU's claim before it places work there, in one table file of a shared
 * directory ($GPUPOOL_CLAIMS, default /run/lock/gpupool). The claims are a
 * process's: the kernel drops them when the last copy of its table fd
 * closes (exit, SIGKILL); pools of one process never wait for each other.
 * Waiters are served in arrival order (tickets).
 */
#ifndef GP_CLAIM_H
#define GP_CLAIM_H

#include <stdint.h>

#define GP_CLAIM_MAXG		256	/* GPU keys a table holds */
#define GP_CLAIM_POLL_MS	50	/* a waiter looks again this often
					   when nothing wakes it sooner */

struct gp_claimer;

/* What a claimer asks for: n of the GPUs in set (gp_claim_gpu()'s
 * indices), all at once, each with mem bytes (0: the whole GPU,
 * exclusive). */
struct gp_claim_req {
	int		 n;
	uint64_t	 mem;
	const int	*set;
	int		 nset;
	int		 look;		/* only say whether it would be
					   granted now: nothing taken, no
					   place in the queue */
};

/* A claimer for one pool or one gp_claim(), in dir (NULL: the
 * environment's or the default; "none": *out is NULL, claims are off).
 * 0 or a negative errno with err set. A table that cannot be used (not a
 * regular file, not ours, unreadable) is not an error here: every GPU
 * counts as held, the problem named, until it is fixed. */
int	gp_claim_open(struct gp_claimer **out, const char *dir, char *err,
	    size_t errlen);
/* Release everything c holds and leave the queue. NULL is fine. */
void	gp_claim_close(struct gp_claimer *c);
/* The index by which c names the GPU key (UUID, bus id, "fakeK"),
 * total its memory in bytes (0: unknown). >= 0 or a negative errno. */
int	gp_claim_gpu(struct gp_claimer *c, const char *key, uint64_t total);
/* GPU i's size known later, before c's first claim. */
void	gp_claim_size(struct gp_claimer *c, int i, uint64_t total);
/* One claim of r->mem bytes on each of n GPUs of r->set, if its turn has
 * come: on a GPU c holds already, while no other process waits for it
 * and the bytes fit; on another, from the room the waiters ahead leave.
 * > 0: the count, the GPUs in got (r->n room); 0: not now, c queued (it
 * keeps its place while it asks again), why says who holds them (or
 * why the table cannot be used); < 0: -EINVAL, -ECHILD (a fork's copy). */
int	gp_claim_try(struct gp_claimer *c, const struct gp_claim_req *r,
	    int *got, char *why, size_t len);
/* Leave the queue (nothing wanted any more). */
void	gp_claim_unwait(struct gp_claimer *c);
/* Give back one claim of mem bytes on GPU i (the GPU when it was the
 * last). */
void	gp_claim_drop(struct gp_claimer *c, int i, uint64_t mem);
/* In a fork's child (a worker), before anything else: c's inotify fd
 * and this process's copy of the table fd close (the claims stay the
 * parent's). */
void	gp_claim_forget(struct gp_claimer *c);
/* Readable when the table changed (try again); -1: look again within
 * GP_CLAIM_POLL_MS. After a wake whose try failed, look again within
 * GP_CLAIM_POLL_MS too: a holder's death is reported (the close of its
 * table fd) before the kernel drops its lock (__fput(): fsnotify_close()
 * before locks_remove_file()), and nothing wakes the waiter after. */
int	gp_claim_fd(struct gp_claimer *c);
/* How long a waiter on fd (gp_claim_fd()'s) sleeps before it tries again
 * regardless: GP_CLAIM_POLL_MS without the fd or after a wake (woke: its
 * try then failed, above), else a second, to be sure. */
int	gp_claim_poll_ms(int fd, int woke);
/* Empty the fd's events. */
void	gp_claim_drain(struct gp_claimer *c);
/* Block until r is granted (as gp_claim_try()), saying once on stderr
 * that it waits and for whom; timeout_ms 0: for as long as it takes, < 0:
 * not at all. cancel_fd (or -1) readable stops it. > 0, or -ETIMEDOUT,
 * -ECANCELED or an errno, with why set. */
int	gp_claim_wait(struct gp_claimer *c, const struct gp_claim_req *r,
	    int *got, int timeout_ms, int cancel_fd, char *why, size_t len);

#endif /* GP_CLAIM_H */
