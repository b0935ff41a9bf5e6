/*
 * check_msg.c: the wire format (src/msg.c) and the byte buffer (src/io.c),
 * fed bytes directly: whole, one at a time, truncated, oversized, unknown;
 * and io.c's spinning wait, gp_poll_spin(), seen through poll() (linked
 * with --wrap=poll: every poll() of this program is recorded).
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "msg.h"
#include "check_main.h"

/* This process's poll() calls since npolls was last set to 0: how many,
 * the timeout of the first and of the last. */
static int	 npolls, first_ms, last_ms;

int	__real_poll(struct pollfd *, nfds_t, int);
int	__wrap_poll(struct pollfd *, nfds_t, int);

int
__wrap_poll(struct pollfd *pfd, nfds_t n, int ms)
{
	if (npolls++ == 0)
		first_ms = ms;
	last_ms = ms;
	return __real_poll(pfd, n, ms);
}

/* A TASK message with three items of 0, 5 and 300 bytes. */
static void
make_task(struct gp_buf *b)
{
	struct gp_rec_task	 r = { 0 };
	static uint8_t		 big[300];
	size_t			 at, i;
	const size_t		 lens[3] = { 0, 5, 300 };

	for (i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)i;
	ck_assert_int_eq(gp_msg_begin(b, GP_MSG_TASK, &at), 0);
	for (i = 0; i < 3; i++) {
		r.id = 100 + i;
		r.len = (uint32_t)lens[i];
		ck_assert_int_eq(gp_buf_add(b, &r, sizeof(r)), 0);
		ck_assert_int_eq(gp_buf_add(b, big, lens[i]), 0);
	}
	gp_msg_finish(b, at, 3);
}

START_TEST(task_roundtrip)
{
	struct gp_buf		 b = { 0 };
	struct gp_msg_hdr	 h;
	struct gp_rec_task	 r;
	const uint8_t		*pos, *end, *data;
	long			 m;
	int			 n = 0;

	make_task(&b);
	m = gp_msg_parse(b.data, b.len, 1 << 20, &h);
	ck_assert_int_eq(m, (long)b.len);
	ck_assert_uint_eq(h.type, GP_MSG_TASK);
	ck_assert_uint_eq(h.id, 3);
	pos = b.data + sizeof(h);
	end = b.data + m;
	while (gp_msg_task_next(&pos, end, &r, &data) == 1) {
		ck_assert_uint_eq(r.id, 100 + (uint64_t)n);
		if (r.len == 300)
			ck_assert_int_eq(data[299], (uint8_t)299);
		n++;
	}
	ck_assert_int_eq(n, 3);
	ck_assert_ptr_eq(pos, end);
	gp_buf_release(&b);
}
END_TEST

START_TEST(parse_byte_at_a_time)
{
	struct gp_buf		 b = { 0 };
	struct gp_msg_hdr	 h;
	size_t			 i;

	make_task(&b);
	/* Every proper prefix needs more; the whole message parses. */
	for (i = 0; i < b.len; i++)
		ck_assert_int_eq(gp_msg_parse(b.data, i, 1 << 20, &h), 0);
	ck_assert_int_eq(gp_msg_parse(b.data, b.len, 1 << 20, &h),
	    (long)b.len);
	gp_buf_release(&b);
}
END_TEST

START_TEST(oversized_rejected_before_payload)
{
	struct gp_msg_hdr	 h = { GP_MSG_RESULT, 1u << 30, 1 }, out;

	/* Only the header is there: the length alone is refused. */
	ck_assert_int_eq(gp_msg_parse(&h, sizeof(h), 1 << 20, &out),
	    -EMSGSIZE);
	h.len = 1 << 20;
	ck_assert_int_eq(gp_msg_parse(&h, sizeof(h), 1 << 20, &out), 0);
}
END_TEST

/* The bound is max itself: max bytes pass, one more does not. */
START_TEST(max_is_exact)
{
	struct gp_msg_hdr	 h = { GP_MSG_TASK, (1u << 20) + 1, 1 }, out;

	ck_assert_int_eq(gp_msg_parse(&h, sizeof(h), 1 << 20, &out),
	    -EMSGSIZE);
	h.type = GP_MSG_RESULT;
	ck_assert_int_eq(gp_msg_parse(&h, sizeof(h), 1 << 20, &out),
	    -EMSGSIZE);
	h.len = 1 << 20;
	ck_assert_int_eq(gp_msg_parse(&h, sizeof(h), 1 << 20, &out), 0);
}
END_TEST

START_TEST(unknown_and_bad_fixed_sizes)
{
	struct gp_msg_hdr	 h = { 0, 0, 0 }, out;

	ck_assert_int_eq(gp_msg_parse(&h, sizeof(h), 1024, &out), -EBADMSG);
	h.type = 99;
	ck_assert_int_eq(gp_msg_parse(&h, sizeof(h), 1024, &out), -EBADMSG);
	h.type = GP_MSG_READY;
	h.len = sizeof(struct gp_msg_ready) + 1;
	ck_assert_int_eq(gp_msg_parse(&h, sizeof(h), 1024, &out), -EBADMSG);
	h.type = GP_MSG_QUIT;
	h.len = 1;
	ck_assert_int_eq(gp_msg_parse(&h, sizeof(h), 1024, &out), -EBADMSG);
	h.type = GP_MSG_JOB;
	h.len = 4;	/* shorter than the fn address */
	ck_assert_int_eq(gp_msg_parse(&h, sizeof(h), 1024, &out), -EBADMSG);
	h.type = GP_MSG_STOP;
	h.len = 0;
	ck_assert_int_eq(gp_msg_parse(&h, sizeof(h), 1024, &out),
	    (long)sizeof(h));
}
END_TEST

START_TEST(truncated_records)
{
	struct gp_rec_result	 r = { .id = 1, .len = 10 }, out;
	uint8_t			 buf[sizeof(r) + 10];
	const uint8_t		*pos, *data;

	memcpy(buf, &r, sizeof(r));
	/* Record header cut short. */
	pos = buf;
	ck_assert_int_eq(gp_msg_result_next(&pos, buf + 8, &out, &data),
	    -EBADMSG);
	/* Payload cut short. */
	pos = buf;
	ck_assert_int_eq(gp_msg_result_next(&pos, buf + sizeof(r) + 9, &out,
	    &data), -EBADMSG);
	pos = buf;
	ck_assert_int_eq(gp_msg_result_next(&pos, buf + sizeof(buf), &out,
	    &data), 1);
	ck_assert_int_eq(gp_msg_result_next(&pos, buf + sizeof(buf), &out,
	    &data), 0);
	/* A record kind the master does not know. */
	r.kind = 7;
	memcpy(buf, &r, sizeof(r));
	pos = buf;
	ck_assert_int_eq(gp_msg_result_next(&pos, buf + sizeof(buf), &out,
	    &data), -EBADMSG);
	/* A task record whose length runs past the end. */
	{
		struct gp_rec_task	 t = { .id = 1, .len = UINT32_MAX }, to;

		pos = (const uint8_t *)&t;
		ck_assert_int_eq(gp_msg_task_next(&pos, pos + sizeof(t), &to,
		    &data), -EBADMSG);
	}
}
END_TEST

/* A record whose bytes are in the region: none in the message, data NULL;
 * an unknown flag, or the region flag on a result that is not DONE, is a
 * broken message. */
START_TEST(region_records)
{
	struct gp_rec_task	 t = { .id = 3, .len = 1u << 20,
				       .flags = GP_REC_SHM }, to;
	struct gp_rec_result	 r = { .id = 3, .len = 1u << 20,
				       .flags = GP_REC_SHM }, ro;
	const uint8_t		*pos, *data;

	pos = (const uint8_t *)&t;
	ck_assert_int_eq(gp_msg_task_next(&pos, pos + sizeof(t), &to, &data),
	    1);
	ck_assert_ptr_null(data);
	ck_assert_ptr_eq(pos, (const uint8_t *)&t + sizeof(t));
	ck_assert_uint_eq(to.len, 1u << 20);
	pos = (const uint8_t *)&r;
	ck_assert_int_eq(gp_msg_result_next(&pos, pos + sizeof(r), &ro,
	    &data), 1);
	ck_assert_ptr_null(data);
	r.kind = GP_REC_ERROR;
	pos = (const uint8_t *)&r;
	ck_assert_int_eq(gp_msg_result_next(&pos, pos + sizeof(r), &ro,
	    &data), -EBADMSG);
	t.flags = 2;
	pos = (const uint8_t *)&t;
	ck_assert_int_eq(gp_msg_task_next(&pos, pos + sizeof(t), &to, &data),
	    -EBADMSG);
}
END_TEST

/* Both ends place a batch's big bytes the same way: in order, aligned,
 * never past the half, and a placement that does not fit changes
 * nothing (the bytes then travel in the message). */
START_TEST(region_placement)
{
	size_t	 end = 0;

	ck_assert_int_eq(gp_msg_shm_place(&end, 100, 4096), 0);
	ck_assert_uint_eq(end, 128);
	ck_assert_int_eq(gp_msg_shm_place(&end, 3968, 4096), 128);
	ck_assert_uint_eq(end, 4096);
	ck_assert_int_eq(gp_msg_shm_place(&end, 1, 4096), -1);
	ck_assert_uint_eq(end, 4096);
	ck_assert_int_eq(gp_msg_shm_place(&end, 0, 4096), 4096);
	end = 64;
	ck_assert_int_eq(gp_msg_shm_place(&end, 4096, 4096), -1);
	ck_assert_uint_eq(end, 64);
	end = 8192;
	ck_assert_int_eq(gp_msg_shm_place(&end, 0, 4096), -1);
	end = 0;
	ck_assert_int_eq(gp_msg_shm_place(&end, SIZE_MAX, 4096), -1);
}
END_TEST

START_TEST(buf_keeps_offsets_across_growth)
{
	struct gp_buf		 b = { 0 };
	struct gp_msg_hdr	 h;
	uint8_t			 chunk[1000];
	size_t			 at;
	int			 i;

	memset(chunk, 'x', sizeof(chunk));
	/* Leave consumed bytes at the front so growth compacts them. */
	ck_assert_int_eq(gp_buf_add(&b, chunk, 100), 0);
	gp_buf_consume(&b, 60);
	ck_assert_int_eq(gp_msg_begin(&b, GP_MSG_TASK, &at), 0);
	for (i = 0; i < 50; i++)
		ck_assert_int_eq(gp_buf_add(&b, chunk, sizeof(chunk)), 0);
	gp_msg_finish(&b, at, 42);
	memcpy(&h, b.data + b.off + at, sizeof(h));
	ck_assert_uint_eq(h.len, 50 * sizeof(chunk));
	ck_assert_uint_eq(h.id, 42);
	ck_assert_uint_eq(b.len - b.off, 40 + sizeof(h) + 50 * sizeof(chunk));
	gp_buf_release(&b);
}
END_TEST

/* PIECE and ACK: an ACK is exactly its struct; a PIECE at least its
 * struct and no more than max (its bytes inline), checked on the header
 * alone. */
START_TEST(piece_and_ack_sizes)
{
	struct gp_msg_hdr	 h = { GP_MSG_ACK, sizeof(struct gp_msg_ack),
				       9 }, out;

	ck_assert_int_eq(gp_msg_parse(&h, sizeof(h), 1024, &out), 0);
	h.len = sizeof(struct gp_msg_ack) - 1;
	ck_assert_int_eq(gp_msg_parse(&h, sizeof(h), 1024, &out), -EBADMSG);
	h.type = GP_MSG_PIECE;
	h.len = sizeof(struct gp_msg_piece) - 1;
	ck_assert_int_eq(gp_msg_parse(&h, sizeof(h), 1024, &out), -EBADMSG);
	h.len = 1025;
	ck_assert_int_eq(gp_msg_parse(&h, sizeof(h), 1024, &out), -EMSGSIZE);
	h.len = sizeof(struct gp_msg_piece);
	ck_assert_int_eq(gp_msg_parse(&h, sizeof(h), 1024, &out), 0);
}
END_TEST

/* A record flagged PIECED carries no bytes and no length of its own
 * (the pieces before it had them), and only on a DONE result; PIECED
 * with SHM is no flag either end sends. */
START_TEST(pieced_records)
{
	struct gp_rec_task	 t = { .id = 3, .flags = GP_REC_PIECED }, to;
	struct gp_rec_result	 r = { .id = 3, .flags = GP_REC_PIECED }, ro;
	const uint8_t		*pos, *data;

	pos = (const uint8_t *)&t;
	ck_assert_int_eq(gp_msg_task_next(&pos, pos + sizeof(t), &to, &data),
	    1);
	ck_assert_ptr_null(data);
	pos = (const uint8_t *)&r;
	ck_assert_int_eq(gp_msg_result_next(&pos, pos + sizeof(r), &ro,
	    &data), 1);
	ck_assert_ptr_null(data);
	t.len = 5;
	pos = (const uint8_t *)&t;
	ck_assert_int_eq(gp_msg_task_next(&pos, pos + sizeof(t), &to, &data),
	    -EBADMSG);
	t.len = 0;
	t.flags = GP_REC_PIECED | GP_REC_SHM;
	pos = (const uint8_t *)&t;
	ck_assert_int_eq(gp_msg_task_next(&pos, pos + sizeof(t), &to, &data),
	    -EBADMSG);
	r.kind = GP_REC_SKIPPED;
	pos = (const uint8_t *)&r;
	ck_assert_int_eq(gp_msg_result_next(&pos, pos + sizeof(r), &ro,
	    &data), -EBADMSG);
}
END_TEST

/*
 * The rules of a piece (gp_msg_piece_check()), for a window of 1000
 * bytes, max 10,000, a region half of 4096 from the piece's place: each
 * lie a worker or master could tell is refused, each honest piece is
 * taken, totals past 4 GiB included.
 */
#define PW	1000
#define PMAX	10000

static int
piece(uint64_t total, uint64_t off, uint32_t len, uint32_t flags,
    size_t mlen, uint64_t got, uint64_t was)
{
	struct gp_msg_piece	 m = { total, off, len, flags };

	return gp_msg_piece_check(&m, mlen, got, was, 4096, PW, PMAX);
}

START_TEST(piece_rules)
{
	const size_t	 hs = sizeof(struct gp_msg_piece);
	struct gp_msg_piece m = { (uint64_t)5 << 30, 0, 4096, GP_REC_SHM };

	/* Honest: a first piece, the next, the last, inline or not. */
	ck_assert_int_eq(piece(5000, 0, 4096, GP_REC_SHM, hs, 0, 0), 0);
	ck_assert_int_eq(piece(5000, 4096, 904, GP_REC_SHM, hs, 4096, 5000),
	    0);
	ck_assert_int_eq(piece(5000, 4000, 1000, 0, hs + 1000, 4000, 5000), 0);
	/* A piece at 0 starts again (fn replied again). */
	ck_assert_int_eq(piece(3000, 0, 10, 0, hs + 10, 4096, 5000), 0);
	/* Lies. */
	ck_assert_int_eq(piece(PW, 0, 10, 0, hs + 10, 0, 0), -EBADMSG);
	ck_assert_int_eq(piece(PMAX + 1, 0, 10, 0, hs + 10, 0, 0), -EBADMSG);
	ck_assert_int_eq(piece(5000, 0, 0, 0, hs, 0, 0), -EBADMSG);
	ck_assert_int_eq(piece(5000, 10, 10, 0, hs + 10, 0, 0), -EBADMSG);
	ck_assert_int_eq(piece(5000, 20, 10, 0, hs + 10, 10, 5000), -EBADMSG);
	ck_assert_int_eq(piece(5001, 10, 10, 0, hs + 10, 10, 5000), -EBADMSG);
	ck_assert_int_eq(piece(5000, 4990, 11, 0, hs + 11, 4990, 5000),
	    -EBADMSG);
	ck_assert_int_eq(piece(5000, 0, 4097, GP_REC_SHM, hs, 0, 0), -EBADMSG);
	ck_assert_int_eq(piece(5000, 0, 10, GP_REC_SHM, hs + 10, 0, 0),
	    -EBADMSG);
	ck_assert_int_eq(piece(5000, 0, PW + 1, 0, hs + PW + 1, 0, 0),
	    -EBADMSG);
	ck_assert_int_eq(piece(5000, 0, 10, 0, hs + 9, 0, 0), -EBADMSG);
	ck_assert_int_eq(piece(5000, 0, 10, 0, hs - 1, 0, 0), -EBADMSG);
	ck_assert_int_eq(piece(5000, 0, 10, 4, hs + 10, 0, 0), -EBADMSG);
	ck_assert_int_eq(piece(UINT64_MAX, 0, 10, 0, hs + 10, 0, 0),
	    -EBADMSG);
	/* No region: a piece flagged for it is a lie. */
	ck_assert_int_eq(gp_msg_piece_check(&m, hs, 0, 0, 0, PW, PMAX),
	    -EBADMSG);
	/* Past 4 GiB: lengths are 64 bits. */
	ck_assert_int_eq(gp_msg_piece_check(&m, hs, 0, 0, 4096, 4096,
	    SIZE_MAX), 0);
	m.off = ((uint64_t)5 << 30) - 4096;
	ck_assert_int_eq(gp_msg_piece_check(&m, hs, m.off, m.total, 4096,
	    4096, SIZE_MAX), 0);
	m.off += 1;
	ck_assert_int_eq(gp_msg_piece_check(&m, hs, m.off, m.total, 4096,
	    4096, SIZE_MAX), -EBADMSG);
}
END_TEST

/* CPU time of this thread, ns. */
static int64_t
thread_cpu_ns(void)
{
	return gp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

/* A pipe, and a pollfd for its read end. */
static void
pipe_in(int fds[2], struct pollfd *pfd)
{
	ck_assert_int_eq(pipe(fds), 0);
	pfd->fd = fds[0];
	pfd->events = POLLIN;
	pfd->revents = 0;
}

/* gp_poll_spin() on pfd, its poll() calls counted afresh. */
static int
spin_poll(struct pollfd *pfd, int ms, int64_t *last)
{
	npolls = 0;
	return gp_poll_spin(pfd, 1, ms, last);
}

/* The last spin_poll() made one poll(), with timeout ms: it blocked at
 * once. */
static void
assert_one_poll(int ms)
{
	ck_assert_int_eq(npolls, 1);
	ck_assert_int_eq(first_ms, ms);
}

/* After a wait longer than GP_SPIN_NS, a timeout, or none yet, the next
 * wait blocks at once: one poll(), with the caller's timeout. */
START_TEST(poll_spin_blocks_at_once_after_a_long_wait)
{
	const int64_t	 lasts[] = { -1, GP_SPIN_NS, 5 * GP_SPIN_NS };
	struct pollfd	 pfd;
	int		 fds[2];
	size_t		 i;
	int64_t		 last;

	pipe_in(fds, &pfd);
	for (i = 0; i < sizeof(lasts) / sizeof(lasts[0]); i++) {
		last = lasts[i];
		ck_assert_int_eq(spin_poll(&pfd, 10, &last), 0);
		assert_one_poll(10);
		ck_assert_int_eq(last, -1);	/* timed out: no spin next */
	}
	close(fds[0]);
	close(fds[1]);
}
END_TEST

/* After a short wait, the next one polls without blocking first, for at
 * most GP_SPIN_NS, then blocks with the caller's timeout: a wait of
 * 200 ms costs a spin's CPU, not 200 ms of it. A timeout of 0 never
 * spins. */
START_TEST(poll_spin_spins_a_bounded_while_after_a_short_wait)
{
	struct pollfd	 pfd;
	int		 fds[2];
	int64_t		 last = GP_SPIN_NS / 10, cpu;

	pipe_in(fds, &pfd);
	cpu = thread_cpu_ns();
	ck_assert_int_eq(spin_poll(&pfd, 200, &last), 0);
	cpu = thread_cpu_ns() - cpu;
	ck_assert_int_ge(npolls, 2);
	ck_assert_int_eq(first_ms, 0);
	ck_assert_int_eq(last_ms, 200);
	ck_assert_msg(cpu < 20000000, "a 200 ms wait took %lld ns of CPU",
	    (long long)cpu);
	ck_assert_int_eq(last, -1);

	last = GP_SPIN_NS / 10;
	ck_assert_int_eq(spin_poll(&pfd, 0, &last), 0);
	assert_one_poll(0);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

/* What is ready is returned at once, spinning or not, and the wait's
 * length is kept: a byte that came 200 ms after the fork (the wait began
 * after it, a little later on a busy machine or under valgrind) turns
 * spinning off. */
START_TEST(poll_spin_measures_the_wait)
{
	struct pollfd	 pfd;
	int		 fds[2];
	int64_t		 last = GP_SPIN_NS / 10;
	pid_t		 pid;
	int		 st;
	char		 c = 'x';

	pipe_in(fds, &pfd);
	ck_assert_int_eq(write(fds[1], &c, 1), 1);
	ck_assert_int_eq(spin_poll(&pfd, -1, &last), 1);
	ck_assert(pfd.revents & POLLIN);
	assert_one_poll(0);	/* the spin's first poll found it */
	ck_assert_int_ge(last, 0);
	ck_assert_int_eq(read(fds[0], &c, 1), 1);

	if ((pid = fork()) == 0) {
		struct timespec	 ts = { 0, 200000000 };

		nanosleep(&ts, NULL);
		_exit(write(fds[1], &c, 1) == 1 ? 0 : 1);
	}
	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(spin_poll(&pfd, -1, &last), 1);
	ck_assert_int_ge(last, 100 * GP_SPIN_NS);
	ck_assert_int_eq(gp_waitpid(pid, &st, 0), pid);
	ck_assert_int_eq(st, 0);
	ck_assert_int_eq(read(fds[0], &c, 1), 1);
	ck_assert_int_eq(spin_poll(&pfd, 1, &last), 0);
	assert_one_poll(1);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("msg");
	TCase	*tc = tcase_create("framing");
	TCase	*spin = tcase_create("spin");

	tcase_add_test(tc, task_roundtrip);
	tcase_add_test(tc, parse_byte_at_a_time);
	tcase_add_test(tc, oversized_rejected_before_payload);
	tcase_add_test(tc, max_is_exact);
	tcase_add_test(tc, unknown_and_bad_fixed_sizes);
	tcase_add_test(tc, truncated_records);
	tcase_add_test(tc, buf_keeps_offsets_across_growth);
	tcase_add_test(tc, region_records);
	tcase_add_test(tc, region_placement);
	tcase_add_test(tc, piece_and_ack_sizes);
	tcase_add_test(tc, pieced_records);
	tcase_add_test(tc, piece_rules);
	suite_add_tcase(s, tc);
	tcase_add_test(spin, poll_spin_blocks_at_once_after_a_long_wait);
	tcase_add_test(spin, poll_spin_spins_a_bounded_while_after_a_short_wait);
	tcase_add_test(spin, poll_spin_measures_the_wait);
	suite_add_tcase(s, spin);
	return gp_check_run(s);
}
