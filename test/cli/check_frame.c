/*
 * check_frame.c: the frames between a rank and its MPI process
 * (src/cli/ranks/mpi_frame.c), fed bytes directly: whole, one at a time,
 * several in one buffer, and an MPI message frame as a struct rmsg.
 * Built only with MPI (the frames exist only in gpupool-run-mpi).
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "ranks/ranks.h"
#include "check_main.h"

START_TEST(frames_whole_and_in_pieces)
{
	struct gp_buf	 all = { 0 }, b = { 0 };
	struct frame	 f;
	const uint8_t	*d;
	int32_t		 v[2] = { 3, 8 };
	size_t		 i, n;
	int		 got = 0;

	ck_assert_int_eq(frame_put(&all, FR_READY, 0, v, sizeof(v)), 0);
	ck_assert_int_eq(frame_put(&all, FR_START, 0, NULL, 0), 0);
	ck_assert_int_eq(frame_put(&all, RM_TASKS, 5, "abc", 4), 0);
	n = all.len - all.off;
	/* One byte at a time: a frame only once all of it is there. */
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(gp_buf_add(&b, all.data + all.off + i, 1), 0);
		while (frame_get(&b, &f, &d)) {
			switch (got++) {
			case 0:
				ck_assert_int_eq(f.type, FR_READY);
				ck_assert_uint_eq(f.len, sizeof(v));
				ck_assert_int_eq(memcmp(d, v, sizeof(v)), 0);
				break;
			case 1:
				ck_assert_int_eq(f.type, FR_START);
				ck_assert_uint_eq(f.len, 0);
				break;
			case 2:
				ck_assert_int_eq(f.type, RM_TASKS);
				ck_assert_int_eq(f.peer, 5);
				ck_assert_uint_eq(f.len, 4);
				ck_assert_str_eq((const char *)d, "abc");
				/* Whole only with its last byte. */
				ck_assert_uint_eq(i, n - 1);
				break;
			default:
				ck_abort_msg("a fourth frame");
			}
			gp_buf_consume(&b, sizeof(f) + f.len);
		}
	}
	ck_assert_int_eq(got, 3);
	ck_assert_uint_eq(b.len - b.off, 0);
	gp_buf_release(&all);
	gp_buf_release(&b);
}
END_TEST

START_TEST(frame_as_message)
{
	struct gp_buf	 b = { 0 };
	struct frame	 f;
	const uint8_t	*d;
	struct rmsg	*m;

	ck_assert_int_eq(frame_put(&b, RM_RESULTS, 2, "xyz", 3), 0);
	ck_assert_int_eq(frame_get(&b, &f, &d), 1);
	m = frame_msg(&f, d);
	gp_buf_release(&b);	/* the message has its own copy */
	ck_assert_ptr_nonnull(m);
	ck_assert_ptr_null(m->next);
	ck_assert_int_eq(m->type, RM_RESULTS);
	ck_assert_int_eq(m->peer, 2);
	ck_assert_uint_eq(m->len, 3);
	ck_assert_uint_eq(m->ring, 0);
	ck_assert_int_eq(memcmp(m->data, "xyz", 3), 0);
	free(m);
	ck_assert_uint_eq(frame_shm_len(4), 4 * (sizeof(int64_t) + 1) + 1);
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("frame");
	TCase	*tc = tcase_create("frame");

	tcase_add_test(tc, frames_whole_and_in_pieces);
	tcase_add_test(tc, frame_as_message);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
