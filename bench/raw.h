/*
 * raw.h: bench_pool's raw lower bounds (raw.c).
 */
#ifndef GP_BENCH_RAW_H
#define GP_BENCH_RAW_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define WORKERS	4	/* bench_pool's pools and raw_batch()'s children */

/* CLOCK_MONOTONIC in seconds. */
double	now_s(void);

/* A long-lived child that echoes 4-byte messages, over two pipes or a
 * socketpair; echo_run() times n round trips (us each). */
struct echo_child {
	pid_t	 pid;
	int	 to, from;
};
void	echo_start(struct echo_child *e, int use_pipes);
double	echo_run(struct echo_child *e, int n);
void	echo_stop(struct echo_child *e);
/* n round trips with a fresh echo child: us each. */
double	raw_pingpong(int n, int use_pipes);
/* n ints doubled by 4 children over pipes, b a message: items/s. */
double	raw_batch(size_t n, uint32_t b);
/* n memcpys of size bytes: bytes/s. */
double	memcpy_bw(size_t size, size_t n);

#endif /* GP_BENCH_RAW_H */
