/*
 * signals.c: the signals a run owns, SIGINT, SIGTERM, SIGHUP and
 * SIGWINCH: blocked (signals_block()), then read from the signalfd
 * the run polls (signals_read()), never caught by a handler. It only
 * records what came, in struct run; what a signal does (cancel, kill,
 * redraw the bar) is up to the caller, so that every file that reads
 * them, the MPI side included, can use this one without calling upward.
 */
#include <errno.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "master/master.h"

int
signals_block(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGHUP);
	sigaddset(set, SIGWINCH);
	return sigprocmask(SIG_BLOCK, set, NULL) == -1 ? -errno : 0;
}

int
signals_read(struct run *r)
{
	struct signalfd_siginfo		 si;
	int				 got = 0;

	while (read(r->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGWINCH) {
			r->winch = 1;	/* out_bar_winch() redraws */
			continue;
		}
		if (r->sig == 0) {
			r->sig = (int)si.ssi_signo;
			r->sig_ns = gp_now_ns();
		}
		r->nsig++;
		got++;
	}
	return got;
}
