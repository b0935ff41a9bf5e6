/*
 * opts.c: the pool's options, the library's only judge of them. Checks a
 * struct gp_pool_opts, fills in its defaults (those of the environment
 * too) and the GPU policy gate.c applies; parses the options that come as
 * text (the gpus grammar "free[:LIST]", sizes, percentages), by name, for
 * gpupool-run and the Python module, which pass their users' text through
 * and report the reason written here. The options by name are opts.def's
 * rows, listed to the front-ends by gp_pool_opt_info(). Pure but for
 * getenv() and sysconf(): no I/O, no allocation but the topology path's
 * copy.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define GP_POOL_FLAGS_ALL	(GP_POOL_CANCEL_FD | GP_POOL_NO_BIND | \
				 GP_POOL_STRICT_BIND | GP_POOL_CUDA_INIT | \
				 GP_POOL_PLAN_ONLY | GP_POOL_NO_PDEATHSIG | \
				 GP_POOL_GPUS_FREE | GP_POOL_WAIT_FREE | \
				 GP_POOL_MONITOR | GP_POOL_OUT_BUFFERS | \
				 GP_POOL_OUT_VIEW | GP_POOL_FIT_THREADS | \
				 GP_POOL_CLAIM_ITEMS)

/* The layout of 0.1 stays where it was; what grew (256 bytes, soname
 * libgpupool.so.1) is the tail from offset 176: a later field takes the
 * first reserved words (pool.c asserts the size), so nothing here changes
 * with it. */
#if UINTPTR_MAX == UINT64_MAX
_Static_assert(offsetof(struct gp_pool_opts, busy_util) == 92 &&
    offsetof(struct gp_pool_opts, errbuf) == 96, "gp_pool_opts layout");
_Static_assert(offsetof(struct gp_pool_opts, nice) == 160 &&
    offsetof(struct gp_pool_opts, claims) == 168 &&
    offsetof(struct gp_pool_opts, reserved) >= 176, "gp_pool_opts layout");
#endif

#define NELEM(a)	(sizeof(a) / sizeof((a)[0]))
#define SIZE_MAX_TIB	1024		/* sizes at most 1024T */

#define K_GPUS		GP_OPT_GPUS
#define K_COUNT		GP_OPT_COUNT
#define K_INT		GP_OPT_INT
#define K_SIZE		GP_OPT_SIZE
#define K_FLAG		GP_OPT_FLAG
#define K_PATH		GP_OPT_PATH
#define K_SECS		GP_OPT_SECS
#define PY_SAME(name)	#name
#define PY_NOPY(name)	NULL
#define PY_gpu_mem(name) "gpu_mem"	/* a keyword of its own */
#define FIELD(f)	(((struct gp_pool_opts *)0)->f)

/* The options gp_pool_opts_set() takes, by the names errbuf uses: the
 * rows of opts.def. */
static const struct opt {
	struct gp_opt_info	 i;
	const char		*what;	/* K_COUNT, K_INT: the value's noun */
	size_t			 off;	/* the field's */
	int			 sgn;	/* the field is an int, not an
					   unsigned */
} table[] = {
#define OPT(name, field, kind, lo, hi, dflt, what, py, cli, arg, group, \
    help, clihelp) \
	{ { #name, PY_##py(name), cli, arg, help, \
	    clihelp != NULL ? clihelp : help, kind, group, lo, hi, dflt, \
	    { 0 } }, what, offsetof(struct gp_pool_opts, field), \
	    _Generic(FIELD(field), int: 1, default: 0) },
#include "opts.def"
#undef OPT
};

/* Each row's field is what its kind writes. */
#define OPT(name, field, kind, ...) \
	_Static_assert(kind == K_FLAG ? offsetof(struct gp_pool_opts, \
	    field) == offsetof(struct gp_pool_opts, flags) : \
	    kind == K_SIZE ? sizeof(FIELD(field)) == sizeof(uint64_t) : \
	    kind == K_GPUS || kind == K_PATH ? sizeof(FIELD(field)) == \
	    sizeof(char *) : sizeof(FIELD(field)) == sizeof(int), \
	    "opts.def: " #name "'s field is not of its kind");
#include "opts.def"
#undef OPT

int
gp_pool_opt_info(int i, struct gp_opt_info *out)
{
	if (i < 0 || (size_t)i >= NELEM(table))
		return -ENOENT;
	*out = table[i].i;
	return 0;
}

/* A numeric row's field as a long (int or unsigned, as declared). */
static long
field_get(const struct gp_pool_opts *o, const struct opt *t)
{
	const char	*at = (const char *)o + t->off;
	unsigned	 u;
	int		 n;

	if (t->sgn) {
		memcpy(&n, at, sizeof(n));
		return n;
	}
	memcpy(&u, at, sizeof(u));
	return (long)u;
}

static void
field_put(struct gp_pool_opts *o, const struct opt *t, long v)
{
	char		*at = (char *)o + t->off;
	unsigned	 u = (unsigned)v;
	int		 n = (int)v;

	if (t->sgn)
		memcpy(at, &n, sizeof(n));
	else
		memcpy(at, &u, sizeof(u));
}

int
gp_parse_size(const char *s, size_t n, uint64_t *bytes, const char **why)
{
	static const char	 units[] = "KMGT";
	char			 num[32], *end;
	const char		*u, *p;
	double			 v;
	size_t			 d;
	int			 shift, c;

	/* Checked by hand first: strtod() alone would take a sign, blanks,
	 * an exponent, hex, inf and nan. */
	for (d = 0; d < n && s[d] >= '0' && s[d] <= '9'; d++)
		;
	if (d < n && s[d] == '.')
		for (d++; d < n && s[d] >= '0' && s[d] <= '9'; d++)
			;
	*why = "not a size (say 20G, 1.5GiB or 512M)";
	if (d == 0 || (d == 1 && s[0] == '.') || d >= sizeof(num))
		return -EINVAL;
	memcpy(num, s, d);
	num[d] = '\0';
	errno = 0;
	v = strtod(num, &end);
	if (errno || *end != '\0')
		return -EINVAL;
	if (d == n) {
		/* 20 what? Only nothing needs no unit. */
		*bytes = 0;
		if (v != 0) {
			*why = "needs a unit, e.g. 20G";
			return -EINVAL;
		}
		*why = NULL;
		return 0;
	}
	c = s[d] >= 'a' && s[d] <= 'z' ? s[d] - 'a' + 'A' : s[d];
	if (c == '\0' || (p = strchr(units, c)) == NULL)
		return -EINVAL;
	shift = 10 * (int)(p - units + 1);
	u = s + d + 1;
	n -= d + 1;
	if (!(n == 0 || (n == 1 && (*u == 'i' || *u == 'B')) ||
	    (n == 2 && u[0] == 'i' && u[1] == 'B')))
		return -EINVAL;
	v *= (double)(1ull << shift);
	if (v > (double)SIZE_MAX_TIB * (double)(1ull << 40)) {
		*why = "too large (at most 1024T)";
		return -ERANGE;
	}
	*bytes = (uint64_t)v;
	if ((double)*bytes < v)
		(*bytes)++;
	*why = NULL;
	return 0;
}

/* The gpus grammar: "free" or "free:LIST" sets GP_POOL_GPUS_FREE and
 * leaves gpus the LIST (NULL: every GPU); anything else is a LIST
 * (gpu.c's to judge). "free:" with no LIST: -EINVAL. */
static int
gpus_text(struct gp_pool_opts *o, const char *s)
{
	int	 f = s != NULL && strncmp(s, "free", 4) == 0 &&
		    (s[4] == '\0' || s[4] == ':');

	if (f)
		s = s[4] == ':' ? s + 5 : NULL;
	if (f && s != NULL && *s == '\0')
		return -EINVAL;
	if (f)
		o->flags |= GP_POOL_GPUS_FREE;
	o->gpus = s;
	return 0;
}

/* lo .. hi, digits only (after a '-' where lo is negative), into *v. */
static int
count(const char *s, long lo, long hi, long *v)
{
	const char	*d = lo < 0 && *s == '-' ? s + 1 : s;
	char		*end;
	long		 n;

	if (*d < '0' || *d > '9')
		return -EINVAL;
	errno = 0;
	n = strtol(s, &end, 10);
	if (errno || *end != '\0' || n < lo || n > hi)
		return -EINVAL;
	*v = n;
	return 0;
}

/* Seconds (a decimal, "0": do not wait) into t's int of ms. */
static int
secs(struct gp_pool_opts *o, const struct opt *t, const char *s, char *err,
    size_t errlen)
{
	char	*end;
	double	 v;

	errno = 0;
	v = *s >= '0' && *s <= '9' ? strtod(s, &end) : -1;
	if (v < 0 || errno || *end != '\0' || v > (double)t->i.hi)
		return gp_errf(err, errlen, -EINVAL, "'%s' is not a number of "
		    "seconds (0 to %ld; 0: do not wait)", s, t->i.hi);
	field_put(o, t, v == 0 ? -1 : v * 1000 < 1 ? 1 : (long)(v * 1000));
	return 0;
}

int
gp_pool_opts_set(struct gp_pool_opts *o, const char *name, const char *value,
    char *err, size_t errlen)
{
	const struct opt	*t;
	const char		*why;
	char			*at;
	uint64_t		 b;
	long			 v;
	size_t			 i;
	int			 rc;

	for (i = 0; i < NELEM(table) && strcmp(table[i].i.name, name) != 0;
	    i++)
		;
	if (i == NELEM(table) || value == NULL)
		return gp_errf(err, errlen, -EINVAL, i == NELEM(table) ?
		    "no pool option '%s'" : "no value for %s", name);
	t = &table[i];
	at = (char *)o + t->off;
	switch (t->i.kind) {
	case K_GPUS:
		o->flags &= ~(unsigned)GP_POOL_GPUS_FREE;
		if (*value == '\0' || gpus_text(o, value) < 0)
			return gp_errf(err, errlen, -EINVAL, "empty GPU list%s",
			    *value ? " after 'free:'" : "");
		return 0;
	case K_COUNT:
	case K_INT:
		if (count(value, t->i.lo, t->i.hi, &v) < 0)
			return gp_errf(err, errlen, -EINVAL, "'%s' is not %s "
			    "(%ld to %ld)", value, t->what, t->i.lo, t->i.hi);
		field_put(o, t, v);
		return 0;
	case K_SIZE:
		if ((rc = gp_parse_size(value, strlen(value), &b, &why)) < 0)
			return gp_errf(err, errlen, rc, "bad size '%s': %s",
			    value, why);
		memcpy(at, &b, sizeof(b));
		return 0;
	case K_PATH:
		if (*value == '\0')
			return gp_errf(err, errlen, -EINVAL, "an empty "
			    "directory name");
		memcpy(at, &value, sizeof(value));
		return 0;
	case K_SECS:
		return secs(o, t, value, err, errlen);
	case K_FLAG:
		if (count(value, 0, 1, &v) < 0)
			return gp_errf(err, errlen, -EINVAL, "'%s' is not 0 or "
			    "1", value);
		o->flags = v ? o->flags | (unsigned)t->i.lo :
		    o->flags & ~(unsigned)t->i.lo;
		return 0;
	}
	return -EINVAL;
}

static int
env_int(const char *name, int *out, char *err, size_t errlen)
{
	const char	*s = getenv(name);
	char		*end;
	long		 v;

	if (s == NULL || *s == '\0')
		return 0;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end != '\0' || v < 0 || v > GP_MAX_WORKERS)
		return gp_errf(err, errlen, -EINVAL,
		    "%s='%s' is not a GPU count (0..%d)", name, s,
		    GP_MAX_WORKERS);
	*out = (int)v;
	return 0;
}

int
gp_opts_zeroed(const uint64_t *r, size_t n)
{
	size_t	 i;

	for (i = 0; i < n; i++)
		if (r[i] != 0)
			return 0;
	return 1;
}

/*
 * max_msg and the window. An item or result of any size that fits in
 * memory may go (max_msg 0: the machine's physical memory, a bound a
 * lying worker's total cannot talk past); the window, the most one
 * message or region half holds (the rest goes in pieces), is at most
 * max_msg and under 4 GiB, the wire's lengths being 32 bits.
 */
static int
sizes(struct gp_pool_opts *o, char *err, size_t errlen)
{
	long	 pages = sysconf(_SC_PHYS_PAGES), pg = sysconf(_SC_PAGESIZE);

	if (o->max_msg == 0)
		o->max_msg = pages > 0 && pg > 0 &&
		    (unsigned long)pages <= SIZE_MAX / (unsigned long)pg ?
		    (size_t)pages * (size_t)pg : SIZE_MAX;
	if (o->window == 0 || o->window > o->max_msg)
		o->window = o->window == 0 && o->max_msg > GP_DEFAULT_WINDOW ?
		    GP_DEFAULT_WINDOW : o->max_msg;
	if (o->window > UINT32_MAX - GP_MSG_OVERHEAD)
		return gp_errf(err, errlen, -EINVAL, "window %llu: over 4 GiB",
		    (unsigned long long)o->window);
	return 0;
}

/* The gpus grammar, and what needs GP_POOL_GPUS_FREE (before the rows'
 * defaults: busy_pct 0 is "not set" here). */
static int
gpu_policy(struct gp_pool_opts *o, char *err, size_t errlen)
{
	if (gpus_text(o, o->gpus) < 0)
		return gp_errf(err, errlen, -EINVAL, "gpus 'free:': empty GPU "
		    "list after 'free:'");
	if (!(o->flags & GP_POOL_GPUS_FREE) &&
	    ((o->flags & GP_POOL_WAIT_FREE) || o->busy_pct || o->busy_util))
		return gp_errf(err, errlen, -EINVAL, "%s needs gpus free (or "
		    "free:LIST)", (o->flags & GP_POOL_WAIT_FREE) ? "wait_free" :
		    o->busy_pct ? "busy_pct" : "busy_util");
	return 0;
}

/* Every numeric row: 0 takes its default, anything else lies in its
 * range; K_PATH is not "". */
static int
rows(struct gp_pool_opts *o, char *err, size_t errlen)
{
	const struct opt	*t;
	const char		*path;
	long			 v;
	size_t			 k;

	for (k = 0; k < NELEM(table); k++) {
		t = &table[k];
		if (t->i.kind == K_PATH) {
			memcpy(&path, (char *)o + t->off, sizeof(path));
			if (path != NULL && *path == '\0')
				return gp_errf(err, errlen, -EINVAL, "pool "
				    "options: %s \"\": an empty directory "
				    "name", t->i.name);
		}
		if (t->i.kind != K_COUNT && t->i.kind != K_INT)
			continue;
		if ((v = field_get(o, t)) == 0)
			field_put(o, t, t->i.dflt);
		else if (v < t->i.lo || v > t->i.hi)
			return gp_errf(err, errlen, -EINVAL, "pool options: "
			    "%s %ld out of range (%ld to %ld)", t->i.name, v,
			    t->i.lo, t->i.hi);
	}
	return 0;
}

/* The extern mapping: base, len and fd all set or none; base and its
 * offset in the fd page aligned (workers mprotect() or mmap() it). */
static int
ext_check(const struct gp_pool_opts *o, char *err, size_t errlen)
{
	uintptr_t	 pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	int		 n = (o->ext_base != NULL) + (o->ext_len != 0) +
			    (o->ext_fd != 0);

	if (n == 0 && o->ext_off == 0 && o->ext_pad == 0)
		return 0;
	if (n != 3 || o->ext_pad != 0)
		return gp_errf(err, errlen, -EINVAL, "pool options: ext_base, "
		    "ext_len and ext_fd go together (an extern mapping: all "
		    "three set, or none)");
	if ((uintptr_t)o->ext_base % pg != 0 || o->ext_off % pg != 0 ||
	    o->ext_fd < 0)
		return gp_errf(err, errlen, -EINVAL, "pool options: the extern "
		    "mapping needs ext_base and ext_off page aligned and "
		    "ext_fd a descriptor (%d)", o->ext_fd);
	return 0;
}

/* Check o and fill in the defaults that need no environment. */
static int
resolve(struct gp_pool_opts *o, char *err, size_t errlen)
{
	if (!gp_opts_zeroed(o->reserved, NELEM(o->reserved)))
		return gp_errf(err, errlen, -EINVAL, "pool options: a reserved "
		    "field is set (from a gpupool.h newer than this library, "
		    "%s?)", GP_VERSION);
	if (o->flags & ~(unsigned)GP_POOL_FLAGS_ALL)
		return gp_errf(err, errlen, -EINVAL, "pool options: unknown "
		    "flags %#x (from a gpupool.h newer than this library, %s?)",
		    o->flags & ~(unsigned)GP_POOL_FLAGS_ALL, GP_VERSION);
	if ((o->flags & GP_POOL_OUT_BUFFERS) && (o->flags & GP_POOL_OUT_VIEW))
		return gp_errf(err, errlen, -EINVAL, "GP_POOL_OUT_BUFFERS and "
		    "GP_POOL_OUT_VIEW together: a result goes one way");
	if (o->per_gpu < 0 || o->fake_gpus < 0 || o->retries < 0 ||
	    ((o->flags & GP_POOL_CANCEL_FD) && o->cancel_fd < 0))
		return gp_errf(err, errlen, -EINVAL, "negative count or fd in "
		    "pool options");
	if (o->per_gpu == 0)
		o->per_gpu = 1;
	if (o->grace_ms == 0)
		o->grace_ms = GP_DEFAULT_GRACE_MS;
	if (gpu_policy(o, err, errlen) < 0 || rows(o, err, errlen) < 0 ||
	    ext_check(o, err, errlen) < 0)
		return -EINVAL;
	return sizes(o, err, errlen);
}

int
gp_pool_opts_check(const struct gp_pool_opts *opts, char *err, size_t errlen)
{
	struct gp_pool_opts	 o = *opts;

	return resolve(&o, err, errlen);
}

void
gp_opts_wire(const struct gp_pool_opts *o, struct gp_pool_opts *out)
{
	static const char *const none;
	size_t	 k;

	*out = *o;
	for (k = 0; k < NELEM(table); k++)
		if (table[k].i.kind == K_GPUS || table[k].i.kind == K_PATH)
			memcpy((char *)out + table[k].off, &none, sizeof(none));
	out->fake_busids = out->topology_xml = NULL;
	out->init = NULL;
	out->fini = NULL;
	out->init_arg = NULL;
	out->errbuf = NULL;
	out->errlen = 0;
	out->fork_hook = NULL;
	out->fork_arg = NULL;
	out->exec = NULL;
	out->cancel_fd = -1;
	/* ext_fd's number stays: the exec keeps it (gp_exec_child()). */
	out->ext_base = NULL;
}

int
gp_opts_load(struct gp_pool *p, const struct gp_pool_opts *opts, char *err,
    size_t errlen)
{
	static const struct gp_pool_opts	 none;
	const char		*xml;
	int			 rc;

	p->o = opts ? *opts : none;
	if ((rc = resolve(&p->o, err, errlen)) < 0)
		return rc;
	p->wt.pol.busy_pct = p->o.busy_pct;
	p->wt.pol.busy_util = p->o.busy_util;
	if (p->o.fake_gpus == 0 &&
	    (rc = env_int("GPUPOOL_FAKE_GPUS", &p->o.fake_gpus, err,
	    errlen)) < 0)
		return rc;
	xml = p->o.topology_xml ? p->o.topology_xml : getenv("GPUPOOL_TOPOLOGY");
	if (xml != NULL && *xml != '\0' && (p->xml = strdup(xml)) == NULL)
		return -ENOMEM;
	p->o.topology_xml = p->xml;
	return 0;
}
