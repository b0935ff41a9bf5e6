/*
 * holder.c: the claims suite's C side (claims.py runs it).
 *
 *	holder pool SECS [FILE TAG]	a pool on 1 fake GPU (it claims the
 *					GPU for its life), then waits
 *	holder claim N OF SECS [FILE TAG] gp_claim() of N of OF fake GPUs
 *	holder list			every claim and waiter, one a line
 *
 * pool and claim use the claims directory the library finds
 * ($GPUPOOL_CLAIMS), append TAG to FILE once they hold their GPUs, print
 * "held VISIBLE" on stdout, then hold them SECS seconds (< 0: until
 * killed) and exit 0. list prints "GPU QUEUE PID UID USER<TAB>CMD" per
 * claim (QUEUE 0: holds it, k: k-th waiter). Exit 1 on an error, with the
 * library's reason on stderr.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <gpupool.h>

static int
usage(void)
{
	fprintf(stderr, "usage: holder pool SECS [FILE TAG] | "
	    "holder claim N OF SECS [FILE TAG] | holder list\n");
	return 2;
}

static int
list(void)
{
	struct gp_claim_info	*ci;
	char			 err[300];
	int			 n, i;

	if ((n = gp_claims_list(NULL, NULL, 0, err, sizeof(err))) < 0) {
		fprintf(stderr, "holder: %s\n", err);
		return 1;
	}
	if ((ci = calloc((size_t)n + 1, sizeof(*ci))) == NULL)
		return 1;
	if ((n = gp_claims_list(NULL, ci, n, err, sizeof(err))) < 0) {
		fprintf(stderr, "holder: %s\n", err);
		free(ci);
		return 1;
	}
	for (i = 0; i < n; i++)
		printf("%s %d %d %u %s\t%s\n", ci[i].gpu, ci[i].queue,
		    ci[i].pid, (unsigned)ci[i].uid, ci[i].user[0] ?
		    ci[i].user : "-", ci[i].cmd);
	free(ci);
	return 0;
}

/* Say that the GPUs are held (FILE, then stdout), hold them, exit. */
static int
held(const char *visible, double secs, char **tag)
{
	struct timespec	 ts;
	int		 fd;

	if (tag[0] != NULL && tag[1] != NULL) {
		fd = open(tag[0], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
		    0644);
		if (fd < 0 || dprintf(fd, "%s\n", tag[1]) < 0) {
			perror(tag[0]);
			return 1;
		}
		close(fd);
	}
	printf("held %s\n", visible);
	fflush(stdout);
	if (secs < 0)
		for (;;)
			pause();
	ts.tv_sec = (time_t)secs;
	ts.tv_nsec = (long)((secs - (double)ts.tv_sec) * 1e9);
	while (nanosleep(&ts, &ts) < 0)
		;
	return 0;
}

int
main(int argc, char *argv[])
{
	struct gp_pool_opts	 o = { 0 };
	struct gp_pool		*pool;
	char			 err[300], visible[256];
	int			 rc;

	o.errbuf = err;
	o.errlen = sizeof(err);
	err[0] = '\0';
	if (argc == 2 && strcmp(argv[1], "list") == 0)
		return list();
	if ((argc == 3 || argc == 5) && strcmp(argv[1], "pool") == 0) {
		o.fake_gpus = 1;
		if (gp_pool_create(&pool, &o) < 0) {
			fprintf(stderr, "holder: pool: %s\n", err);
			return 1;
		}
		rc = held("fake0", atof(argv[2]), argv + 3);
		gp_pool_destroy(pool);
		return rc;
	}
	if ((argc == 5 || argc == 7) && strcmp(argv[1], "claim") == 0) {
		o.fake_gpus = atoi(argv[3]);
		if (gp_claim(&o, atoi(argv[2]), visible, sizeof(visible)) < 0) {
			fprintf(stderr, "holder: claim: %s\n", err);
			return 1;
		}
		return held(visible, atof(argv[4]), argv + 5);
	}
	return usage();
}
