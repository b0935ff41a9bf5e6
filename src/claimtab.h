/*
 * claimtab.h: the claims table and this process's side of it (claimtab.c),
 * for claim.c's decisions alone. The file's layout, the process's state
 * (`gp_ct`: its table fd, token and last read of the table) and the
 * steps under the guard. Every call but gp_ct_dir() runs with claim.c's
 * mutex held.
 */
#ifndef GP_CLAIMTAB_H
#define GP_CLAIMTAB_H

#include <stdint.h>
#include <sys/types.h>

#include "claim.h"

#define CL_MAGIC	"gpupool-claims1"
#define CL_FILE		"claims.v1"
#define CL_MAXS		4096
#define CL_GOFF		(64 + (off_t)CL_MAXS * 128)
#define CL_LOCKS	((off_t)1 << 40)	/* the guard; slot i: + 1 + i */

enum { CL_FREE, CL_HOLD, CL_WAIT };

struct cl_hdr {
	char		 magic[16];
	uint32_t	 hi;		/* slots in use are below this */
	uint32_t	 ngpus;
	uint64_t	 ticket;	/* the next waiter's */
	char		 pad[32];
};

struct cl_slot {
	uint64_t	 token;		/* its process's; 0: free */
	uint64_t	 ticket;	/* WAIT: its place */
	uint32_t	 kind;
	uint32_t	 uid;
	int32_t		 pid;
	uint32_t	 n;		/* WAIT: GPUs wanted */
	uint64_t	 mem;		/* bytes per GPU; 0: whole */
	int64_t		 since_ms;	/* CLOCK_REALTIME */
	uint32_t	 spare;		/* 0 */
	uint32_t	 gpu;		/* HOLD: its GPU */
	uint8_t		 set[GP_CLAIM_MAXG / 8];	/* WAIT: GPUs it takes */
	uint64_t	 group;		/* its job's ($GPUPOOL_CLAIM_GROUP) */
	char		 cmd[32];
};

struct cl_gpu {
	char		 key[56];
	uint64_t	 total;		/* bytes; 0: unknown */
};

_Static_assert(sizeof(struct cl_hdr) == 64, "cl_hdr");
_Static_assert(sizeof(struct cl_slot) == 128, "cl_slot");
_Static_assert(sizeof(struct cl_gpu) == 64, "cl_gpu");

/* What each slot is to this process, dead ones cleared on the way: none
 * (free, dead, or someone's garbage, skipped), ours (this process's, or
 * an ancestor's), or another's. */
enum { S_NONE, S_OURS, S_OTHER };

/* The process's side: its table fd, token and last read of the table. */
struct gp_ct {
	pid_t		 pid;		/* 0: nothing open in this process */
	int		 fd;		/* -1: the table cannot be used */
	char		 path[4096];
	char		 bad[300];	/* fd -1: why */
	uint64_t	 token;
	char		 cmd[32];	/* its command line, for people */
	uint64_t	 group;		/* its job's, or 0 */
	pid_t		 kin[32];	/* its ancestors */
	int		 nkin;		/* -1: not read yet */
	uint8_t		 cls[CL_MAXS];	/* each slot's S_*, after a load */
	int		 users;
	int		 ng;		/* keys read so far */
	struct cl_gpu	 g[GP_CLAIM_MAXG];
	struct {
		struct cl_hdr	 h;
		struct cl_slot	 s[CL_MAXS];
	}		*t;
};
extern struct gp_ct	 gp_ct;

/* Whether waiter s wants table GPU g. */
static inline int
gp_ct_in_set(const struct cl_slot *s, int g)
{
	return (s->set[g / 8] >> (g % 8)) & 1;
}

/* The lock of one byte of the table (CL_LOCKS: the guard, + 1 + i: slot
 * i's) by this process's OFD: 0 or a negative errno. */
int	gp_ct_lock(off_t at, short type, int wait);
/* The table unusable: gp_ct.bad says why (fmt given the path and what);
 * an open fd stays open (it holds this process's claims). */
void	gp_ct_bad(const char *fmt, const char *what);
/* In a fork's child: the parent's fd closed, nothing open. */
void	gp_ct_forked(void);
/* This process joins the table of dir (the first claimer opens it): 0,
 * -ENOMEM, or -EINVAL with err (another directory in use). */
int	gp_ct_join(const char *dir, char *err, size_t errlen);
/* A claimer leaves: with the last, the fd goes. */
void	gp_ct_leave(void);
/* Lock the guard and read the table: 0, or -1 with gp_ct.bad set. */
int	gp_ct_load(void);
void	gp_ct_unload(void);
/* Write slot i, or the header: 0 or a negative errno. */
int	gp_ct_put_slot(int i);
int	gp_ct_put_hdr(void);
/* Each slot's S_* into gp_ct.cls, dead ones cleared. */
void	gp_ct_classify(void);
/* A free slot, its byte locked by us: >= 0, -EUSERS when every one of
 * the CL_MAXS is taken, or a negative errno. */
int	gp_ct_new_slot(void);
void	gp_ct_free_slot(int i);
/* Slot s made this process's, of kind, with mem bytes. */
void	gp_ct_fill_slot(struct cl_slot *s, int kind, uint64_t mem);
/* A holder for people. */
void	gp_ct_describe(const struct cl_slot *h, char *buf, size_t len);
/* The directory in effect (NULL: claims off), or -EINVAL with err. */
int	gp_ct_dir(const char **dirp, char *err, size_t errlen);

#endif /* GP_CLAIMTAB_H */
