/*
 * err.c: how the library reports what went wrong, at the bottom of the
 * call graph: a one-line reason in the caller's errbuf (gp_errf()). Every
 * other file may call it; it calls nothing of the library's, so no file
 * loop can pass through it.
 */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

int
gp_errf(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list	 ap;

	if (err != NULL && errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}
