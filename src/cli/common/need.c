/*
 * need.c: what a task declares it needs of the GPUs: the tag a task's
 * line may start with ("[mem=20G gpus=2] python train.py"), and the
 * values --mem and --gpus-per-task take. Pure: it reads strings, keeps
 * no state and prints nothing; a caller names the file and line.
 *
 * A '[' is a tag only when a lower-case key and '=' follow it at once,
 * so that shell tests ("[ -f x ] && ...", "[[ ... ]]") stay commands.
 * Sizes are the library's (gp_parse_size()): binary whatever their
 * spelling (20G, 20GiB and 20GB are all 20 GiB), as nvidia-smi's MiB
 * are: a GPU's memory is sold in GiB.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"

#define NEED_KEYS	"(mem=SIZE, gpus=N)"

static int
blank(char c)
{
	return c == ' ' || c == '\t';
}

int
need_gpus(const char *s, size_t n, int *gpus, const char **why)
{
	size_t	 i;
	int	 v = 0;

	*why = "not a GPU count (1 to 1024)";
	if (n == 0 || n > 4)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (s[i] - '0');
	}
	if (v < 1 || v > NEED_GPUS_MAX)
		return -EINVAL;
	*gpus = v;
	*why = NULL;
	return 0;
}

/* One key=value of a tag, k[0..n): into *nd, or -EINVAL with err. */
static int
one_key(const char *k, size_t n, struct task_need *nd, unsigned *seen,
    char *err, size_t errlen)
{
	const char	*eq = memchr(k, '=', n), *v, *why;
	size_t		 kl, vl;
	unsigned	 bit;
	int		 rc;

	kl = eq != NULL ? (size_t)(eq - k) : n;
	if (kl == 3 && memcmp(k, "mem", 3) == 0)
		bit = 1;
	else if (kl == 4 && memcmp(k, "gpus", 4) == 0)
		bit = 2;
	else {
		snprintf(err, errlen, "unknown key '%.*s' in task options "
		    NEED_KEYS, (int)(kl > 64 ? 64 : kl), k);
		return -EINVAL;
	}
	if (eq == NULL || eq + 1 == k + n) {
		snprintf(err, errlen, "'%.*s' needs a value in task options "
		    NEED_KEYS, (int)kl, k);
		return -EINVAL;
	}
	if (*seen & bit) {
		snprintf(err, errlen, "'%.*s' given twice in task options",
		    (int)kl, k);
		return -EINVAL;
	}
	*seen |= bit;
	v = eq + 1;
	vl = n - kl - 1;
	rc = bit == 1 ? gp_parse_size(v, vl, &nd->mem, &why) :
	    need_gpus(v, vl, &nd->gpus, &why);
	if (rc < 0)
		snprintf(err, errlen, "bad value '%.*s' for %.*s= in task "
		    "options: %s", (int)(vl > 64 ? 64 : vl), v, (int)kl, k,
		    why);
	return rc;
}

int
need_parse(const char *line, struct task_need *nd, char *err,
    size_t errlen)
{
	const char	*p = line, *q, *end;
	unsigned	 seen = 0;
	int		 rc;

	memset(nd, 0, sizeof(*nd));
	while (blank(*p))
		p++;
	if (p[0] != '[')
		return 0;
	for (q = p + 1; *q >= 'a' && *q <= 'z'; q++)
		;
	if (q == p + 1 || *q != '=')
		return 0;	/* a shell test, a glob: the command */
	if ((end = strchr(p, ']')) == NULL) {
		snprintf(err, errlen, "no ']' closing the task options "
		    NEED_KEYS);
		return -EINVAL;
	}
	for (p++;;) {
		while (blank(*p))
			p++;
		if (p == end)
			break;
		for (q = p; q < end && !blank(*q); q++)
			;
		if ((rc = one_key(p, (size_t)(q - p), nd, &seen, err,
		    errlen)) < 0)
			return rc;
		p = q;
	}
	for (p++; blank(*p); p++)
		;
	if (*p == '\0') {
		snprintf(err, errlen, "task options but no command");
		return -EINVAL;
	}
	return (int)(p - line);
}

void
need_for_item(uint64_t mem, int gpus, const struct gp_item *it,
    struct gp_need *need)
{
	struct task_need	 nd;

	if (it->inlen <= sizeof(struct task_hdr) ||
	    need_parse((const char *)it->in + sizeof(struct task_hdr), &nd,
	    NULL, 0) < 0)
		memset(&nd, 0, sizeof(nd));	/* tasks.c checked it */
	need->mem = nd.mem ? nd.mem : mem;
	need->gpus = nd.gpus ? nd.gpus : gpus;
}

int
need_retag(const char *line, uint64_t mem, char *out, size_t outcap)
{
	struct task_need	 nd;
	unsigned long long	 mib = (mem + (1u << 20) - 1) >> 20;
	char			 g[24] = "";
	int			 off, n;

	if ((off = need_parse(line, &nd, NULL, 0)) < 0)
		off = 0;
	if (nd.gpus > 0)
		snprintf(g, sizeof(g), " gpus=%d", nd.gpus);
	n = snprintf(out, outcap, "[mem=%lluM%s] %s", mib, g, line + off);
	return n < 0 || (size_t)n >= outcap ? -ENOSPC : n;
}
