/*
 * outcome.c: what became of one attempt (struct attempt): read from the
 * worker's reply (struct task_reply and the bytes after it) when it sent
 * a whole one, else from what the pool says of the item (crashed, timed
 * out, canceled, never run) or from the loss of the rank it ran on; and
 * the one line that describes a failure in messages. Pure: it reads the
 * task and the run, changes neither and prints nothing.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* The worker's reply, when it sent a whole one: 1 (oc filled in from
 * it), else 0 (oc untouched). */
static int
from_reply(const struct gp_item *it, struct attempt *oc)
{
	struct task_reply	 rp;
	const char		*p;

	if (it->out == NULL || it->outlen < sizeof(rp))
		return 0;
	memcpy(&rp, it->out, sizeof(rp));
	if (sizeof(rp) + rp.outlen + rp.errlen + rp.msglen != it->outlen)
		return 0;
	if ((rp.flags & R_STOPPED) && (rp.flags & R_NOSTART)) {
		oc->kind = K_NOTRUN;
		return 1;
	}
	p = (const char *)it->out + sizeof(rp);
	oc->out = p;
	oc->outlen = rp.outlen;
	oc->err = p + rp.outlen;
	oc->errlen = rp.errlen;
	oc->msg = p + rp.outlen + rp.errlen;
	oc->msglen = rp.msglen;
	oc->outcut = rp.outcut;
	oc->errcut = rp.errcut;
	oc->exitval = rp.exitval;
	oc->signal = rp.signal;
	oc->flags = rp.flags;
	oc->start = (double)rp.start_ns / 1e9;
	oc->runtime = (double)rp.run_ns / 1e9;
	/* Its results not written: failed, and not by its code. */
	if (rp.flags & R_NORESULT)
		oc->exitval = -1;
	if (rp.exitval == 0 && rp.signal == 0 &&
	    !(rp.flags & (R_TIMEDOUT | R_NOSTART | R_NORESULT)))
		oc->kind = K_OK;
	else if (rp.flags & R_STOPPED)
		oc->kind = K_STOPPED;
	else
		oc->kind = K_FAILED;
	return 1;
}

/* No reply: what its rank's loss or the pool's status says became of
 * it. */
static void
no_reply(const struct run *r, const struct task *t, struct attempt *oc)
{
	const struct gp_item	*it = &t->item;

	oc->kind = K_FAILED;
	oc->signal = SIGKILL;
	if (t->lost) {
		snprintf(oc->why, sizeof(oc->why), "its rank %d (%s) was lost",
		    t->rank, r->peer[t->rank].host);
		return;
	}
	switch (it->status) {
	case GP_CANCELED:
		/* Killed with its worker (a second ^C), or never started. */
		oc->kind = it->attempts > 0 ? K_STOPPED : K_NOTRUN;
		break;
	case GP_NOTRUN:
		oc->kind = K_NOTRUN;
		break;
	case GP_CRASHED:
		if (it->code > 128)
			snprintf(oc->why, sizeof(oc->why), "its worker was "
			    "killed by signal %d", it->code - 128);
		else
			snprintf(oc->why, sizeof(oc->why), "its worker exited "
			    "with status %d", it->code);
		break;
	case GP_TIMEDOUT:
		oc->flags |= R_TIMEDOUT;
		snprintf(oc->why, sizeof(oc->why), "its worker did not stop "
		    "it in time and was killed");
		break;
	case GP_ERROR:
		snprintf(oc->why, sizeof(oc->why), "%s", gp_strerror(it->code));
		break;
	default:
		snprintf(oc->why, sizeof(oc->why), "its worker sent no result");
		break;
	}
}

void
outcome(const struct run *r, const struct task *t, struct attempt *oc)
{
	const struct gp_item	*it = &t->item;

	memset(oc, 0, sizeof(*oc));
	oc->worker = it->worker;
	oc->exitval = -1;
	oc->start = (double)t->real_ns / 1e9;
	oc->runtime = (double)(gp_now_ns() - t->mono_ns) / 1e9;
	if (!from_reply(it, oc))
		no_reply(r, t, oc);
}

/* "exit status 3", "killed by signal 9 (Killed)", "timed out (...)". */
void
describe(const struct run *r, const struct attempt *oc, char *buf,
    size_t len)
{
	char	 tmo[32];

	if (oc->flags & R_TIMEDOUT) {
		fmt_secs(tmo, sizeof(tmo), (double)r->o->timeout_ms / 1000);
		snprintf(buf, len, "timed out after %s (%s)", tmo,
		    oc->signal ? strsignal(oc->signal) : "exited");
	} else if (oc->why[0])
		snprintf(buf, len, "%s", oc->why);
	else if (oc->msglen > 0)
		snprintf(buf, len, "%.*s", (int)oc->msglen, oc->msg);
	else if (oc->signal)
		snprintf(buf, len, "killed by signal %d (%s)", oc->signal,
		    strsignal(oc->signal));
	else
		snprintf(buf, len, "exit status %d", oc->exitval);
}
