/*
 * say.c: gpupool-run's messages, git style ("gpupool-run: ..." on
 * stderr), for every part of it: the options before a run, the master
 * during one. A run that owns the streams takes them through its hook
 * (say_through(), output.c's out_attach()): it clears its bar, names its
 * rank and queues the line behind what it has for stderr. Without one
 * the line is written at once.
 */
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "common/cli.h"

static say_before_fn	*before;	/* NULL: no run owns the streams */
static say_write_fn	*write_line;
static void		*hook_arg;

void
say_through(say_before_fn *b, say_write_fn *w, void *arg)
{
	before = b;
	write_line = w;
	hook_arg = arg;
}

static void
say(const char *pfx, const char *fmt, va_list ap)
{
	char	 buf[1024];
	int	 n, rank = before != NULL ? before(hook_arg) : 0;

	if (rank > 0)
		n = snprintf(buf, sizeof(buf), "%s (rank %d): %s", CLI_NAME,
		    rank, pfx);
	else
		n = snprintf(buf, sizeof(buf), "%s: %s", CLI_NAME, pfx);
	if (n < 0 || (size_t)n >= sizeof(buf))
		return;
	vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	n = (int)strlen(buf);
	buf[n++] = '\n';
	if (write_line != NULL)
		write_line(hook_arg, buf, (size_t)n);
	else
		(void)gp_write_full(STDERR_FILENO, buf, (size_t)n);
}

void
out_verr(const char *fmt, va_list ap)
{
	say("", fmt, ap);
}

void
out_err(const char *fmt, ...)
{
	va_list	 ap;

	va_start(ap, fmt);
	say("", fmt, ap);
	va_end(ap);
}

void
out_warn(const char *fmt, ...)
{
	va_list	 ap;

	va_start(ap, fmt);
	say("warning: ", fmt, ap);
	va_end(ap);
}
