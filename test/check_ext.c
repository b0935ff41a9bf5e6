/*
 * check_ext.c: the extern mapping (gp_pool_opts.ext_base, a rank's in
 * ring in Python): an item whose bytes lie wholly in it goes to the
 * worker as its offset (GP_REC_EXT), and fn reads it there, read only,
 * in a forked worker (which inherits the mapping) and in an exec'd one
 * (which maps it from the memfd); what lies outside it, or only partly
 * in it, goes as before. A record whose offset ends past the mapping,
 * or one for a worker without a mapping, is refused before a byte is
 * read. The options go together or not at all. This program is its own
 * exec'd workers' program (main() calls gp_worker_enter() first).
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpupool.h"
#include "internal.h"	/* struct gp_pool, gp_data_ext(), gp_ctx_opts() */
#include "msg.h"
#include "check_main.h"
#include "data_test.h"

#define EXT_LEN		MiB		/* the mapping the pool is told of */
#define MAP_LEN		(2 * MiB)	/* what is mapped: one past it too */

/* Where fn found its item (the byte after the flipped ones). */
enum { AT_ELSEWHERE, AT_EXT_RO, AT_EXT_WRITABLE };

static char	 self[4096];
static char	*self_argv[] = { self, NULL };

/* Whether the mapping that holds p is read only here (/proc/self/maps). */
static int
read_only(const void *p)
{
	FILE		*f = fopen("/proc/self/maps", "r");
	unsigned long	 lo, hi;
	char		 perm[8];
	int		 ro = 0;

	if (f == NULL)
		return 0;
	while (fscanf(f, "%lx-%lx %7s%*[^\n]", &lo, &hi, perm) == 3)
		if ((uintptr_t)p >= lo && (uintptr_t)p < hi) {
			ro = perm[0] == 'r' && perm[1] == '-';
			break;
		}
	fclose(f);
	return ro;
}

/* The item flipped, then one byte: where it lay (AT_*). */
static int
echo_where(struct gp_ctx *ctx, const void *in, size_t len, void *arg)
{
	const struct gp_pool_opts	*o = gp_ctx_opts(ctx);
	const uint8_t			*b = o->ext_base, *i = in;
	uint8_t				*r = malloc(len + 1);
	uint64_t			 w;
	size_t				 k;
	int				 rc;

	(void)arg;
	if (r == NULL)
		return 90;
	if (len > 0)
		memcpy(r, in, len);
	for (k = 0; k < len; k += 8) {
		w = 0;
		memcpy(&w, r + k, len - k < 8 ? len - k : 8);
		w ^= FLIP;
		memcpy(r + k, &w, len - k < 8 ? len - k : 8);
	}
	r[len] = AT_ELSEWHERE;
	if (b != NULL && len > 0 && i >= b && i + len <= b + o->ext_len)
		r[len] = read_only(i) ? AT_EXT_RO : AT_EXT_WRITABLE;
	rc = gp_ctx_reply(ctx, r, len + 1);
	free(r);
	return rc;
}

/* The first of len bytes at out that is not in's flipped; len if none. */
static size_t
flip_diff(const uint8_t *in, const uint8_t *out, size_t len)
{
	uint64_t	 w;
	size_t		 k, j, n;

	for (k = 0; k < len; k += 8) {
		n = len - k < 8 ? len - k : 8;
		w = 0;
		memcpy(&w, in + k, n);
		w ^= FLIP;
		for (j = 0; j < n; j++)
			if (out[k + j] != ((uint8_t *)&w)[j])
				return k + j;
	}
	return len;
}

/* Items in the mapping (wholly), outside it, across its end, empty. */
static const struct {
	long	 off;		/* in the mapping; -1: malloc'd */
	size_t	 len;
	int	 ext;		/* wholly in ext_len */
} cases[] = {
	{ 0, 1, 1 }, { 64, 100, 1 }, { 4096, 64 << 10, 1 },
	{ 200 << 10, 300 << 10, 1 }, { EXT_LEN - 8, 8, 1 },
	{ EXT_LEN - 1000, 1000, 1 }, { -1, 100, 0 }, { -1, 64 << 10, 0 },
	{ EXT_LEN - 100, 200, 0 }, { EXT_LEN, 4096, 0 }, { -1, 0, 0 },
};
#define NCASES	(sizeof(cases) / sizeof(cases[0]))

static void
ext_round(int execd)
{
	struct gp_pool_opts	 o = { .fake_gpus = 2, .max_msg = 4 * MiB };
	struct gp_exec		 x = { .argv = self_argv };
	struct gp_item		 it[NCASES * 3];
	struct gp_pool		*p;
	uint8_t			*m, *b;
	size_t			 i, n = NCASES * 3, d;
	int			 fd, c;

	ck_assert_int_ge(fd = memfd_create("check-ext", MFD_CLOEXEC), 0);
	ck_assert_int_eq(ftruncate(fd, MAP_LEN), 0);
	m = mmap(NULL, MAP_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	/* The mapping's bytes: the cases in it overlap (at its end). */
	pat_fill(m, MAP_LEN, 99, 0);
	/* Each case three times, so that batches mix them. */
	for (i = 0; i < n; i++) {
		c = (int)(i % NCASES);
		b = cases[c].off >= 0 ? m + cases[c].off : cases[c].len ?
		    malloc(cases[c].len) : NULL;
		if (cases[c].off < 0 && cases[c].len > 0)
			pat_fill(b, cases[c].len, c, 0);
		gp_item_init(&it[i], b, cases[c].len);
	}
	o.ext_base = m;
	o.ext_len = EXT_LEN;
	o.ext_fd = fd;
	if (execd)
		o.exec = &x;
	p = make_pool_as_is(&o);
	ck_assert_int_eq(gp_pool_map(p, echo_where, NULL, 0, it, n), 0);
	for (i = 0; i < n; i++) {
		c = (int)(i % NCASES);
		d = it[i].outlen == cases[c].len + 1 ?
		    flip_diff(it[i].in, it[i].out, cases[c].len) : 0;
		ck_assert_msg(it[i].status == GP_OK && d == cases[c].len,
		    "%s: case %d (%zu bytes at %ld): status %d code %d outlen "
		    "%zu, first wrong byte %zu", execd ? "exec'd" : "forked", c,
		    cases[c].len, cases[c].off, it[i].status, it[i].code,
		    it[i].outlen, d);
		ck_assert_msg(((uint8_t *)it[i].out)[cases[c].len] == (cases[c].ext ?
		    AT_EXT_RO : AT_ELSEWHERE), "%s: case %d (%zu bytes at %ld): "
		    "fn read it %s", execd ? "exec'd" : "forked", c,
		    cases[c].len, cases[c].off,
		    ((uint8_t *)it[i].out)[cases[c].len] == AT_EXT_WRITABLE ? "in the "
		    "mapping, writable" : ((uint8_t *)it[i].out)[cases[c].len] == AT_EXT_RO ?
		    "in place in the mapping" : "in a copy");
	}
	gp_pool_destroy(p);
	for (i = 0; i < n; i++)
		if (cases[i % NCASES].off < 0)
			free((void *)it[i].in);
	gp_items_release(it, n);
	munmap(m, MAP_LEN);
	close(fd);
}

/* A forked worker reads an item in the mapping where the caller put it,
 * the same address, read only; the rest comes as before. */
START_TEST(ext_items_are_read_in_place_forked)
{
	ext_round(0);
}
END_TEST

/* An exec'd worker maps the memfd (kept open across its exec alone)
 * read only, and reads the items there. */
START_TEST(ext_items_are_read_in_place_execd)
{
	ext_round(1);
}
END_TEST

/* The worker's check of a GP_REC_EXT record, before a byte is read:
 * off + len within the mapping, whatever their values, and no mapping,
 * no record. What the master sends is parsed to it. */
START_TEST(ext_offset_past_the_mapping_is_refused)
{
	static uint8_t		 map[4096];
	static const struct { uint64_t off; uint32_t len; int ok; } r[] = {
		{ 0, 4096, 1 }, { 4095, 1, 1 }, { 4096, 0, 1 }, { 100, 3996, 1 },
		{ 4095, 2, 0 }, { 4096, 1, 0 }, { 4097, 0, 0 },
		{ 100, 3997, 0 }, { UINT64_MAX, 1, 0 },
		{ UINT64_MAX - 10, 20, 0 }, { 1, UINT32_MAX, 0 },
	};
	struct gp_pool		*p = calloc(1, sizeof(*p));
	struct gp_buf		 b = { 0 };
	struct gp_rec_task	 t = { .id = 7, .flags = GP_REC_EXT }, to;
	const uint8_t		*pos, *data;
	size_t			 i, at;

	ck_assert_ptr_nonnull(p);
	p->o.ext_base = map;
	p->o.ext_len = sizeof(map);
	for (i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
		b.off = b.len = 0;
		t.len = r[i].len;
		ck_assert_int_eq(gp_msg_begin(&b, GP_MSG_TASK, &at), 0);
		ck_assert_int_eq(gp_buf_add(&b, &t, sizeof(t)), 0);
		ck_assert_int_eq(gp_buf_add(&b, &r[i].off, 8), 0);
		gp_msg_finish(&b, at, 1);
		pos = b.data + sizeof(struct gp_msg_hdr);
		ck_assert_int_eq(gp_msg_task_next(&pos, b.data + b.len, &to,
		    &data), 1);
		ck_assert_ptr_eq(pos, b.data + b.len);
		ck_assert_msg((gp_data_ext(p, data, to.len) != NULL) ==
		    r[i].ok, "off %llu len %u: %s", (unsigned long long)r[i].off,
		    r[i].len, r[i].ok ? "refused" : "taken");
		if (r[i].ok)
			ck_assert_ptr_eq(gp_data_ext(p, data, to.len),
			    map + r[i].off);
	}
	/* No mapping here: every record is a lie. */
	p->o.ext_base = NULL;
	p->o.ext_len = 0;
	ck_assert_ptr_null(gp_data_ext(p, (const uint8_t *)&r[0].off, 1));
	free(b.data);
	free(p);
}
END_TEST

/* An EXT record's offset is in the TASK; one cut short is a broken
 * message, and a RESULT can never be flagged EXT (no offset W -> M). */
START_TEST(ext_records_parse_tasks_only)
{
	struct gp_rec_task	 t = { .id = 1, .len = 10,
				       .flags = GP_REC_EXT }, to;
	struct gp_rec_result	 r = { .id = 1, .len = 10,
				       .flags = GP_REC_EXT }, ro;
	uint8_t			 buf[sizeof(t) + 8];
	const uint8_t		*pos, *data;

	memcpy(buf, &t, sizeof(t));
	memset(buf + sizeof(t), 0, 8);
	pos = buf;
	ck_assert_int_eq(gp_msg_task_next(&pos, buf + sizeof(buf) - 1, &to,
	    &data), -EBADMSG);
	ck_assert_ptr_eq(pos, buf);
	ck_assert_int_eq(gp_msg_task_next(&pos, buf + sizeof(buf), &to, &data),
	    1);
	ck_assert_ptr_eq(data, buf + sizeof(t));
	pos = (const uint8_t *)&r;
	ck_assert_int_eq(gp_msg_result_next(&pos, pos + sizeof(r), &ro,
	    &data), -EBADMSG);
}
END_TEST

/* base, len and fd go together; base and the offset page aligned. */
START_TEST(ext_options_go_together)
{
	static uint8_t		 m[8192] __attribute__((aligned(4096)));
	struct gp_pool_opts	 o = { 0 };
	char			 err[256] = "";

	o.ext_base = m;
	ck_assert_int_eq(gp_pool_opts_check(&o, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "ext_base, ext_len and ext_fd") != NULL,
	    "%s", err);
	o.ext_len = 4096;
	ck_assert_int_eq(gp_pool_opts_check(&o, err, sizeof(err)), -EINVAL);
	o.ext_fd = 3;
	ck_assert_int_eq(gp_pool_opts_check(&o, err, sizeof(err)), 0);
	o.ext_off = 100;
	ck_assert_int_eq(gp_pool_opts_check(&o, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "page aligned") != NULL, "%s", err);
	o.ext_off = 0;
	o.ext_base = m + 64;
	ck_assert_int_eq(gp_pool_opts_check(&o, err, sizeof(err)), -EINVAL);
	memset(&o, 0, sizeof(o));
	o.ext_fd = 3;
	ck_assert_int_eq(gp_pool_opts_check(&o, err, sizeof(err)), -EINVAL);
	o.ext_fd = 0;
	o.ext_pad = 1;
	ck_assert_int_eq(gp_pool_opts_check(&o, err, sizeof(err)), -EINVAL);
}
END_TEST

int
main(int argc, char **argv)
{
	Suite	*s;
	TCase	*tc;
	ssize_t	 n;

	gp_worker_enter();	/* the exec'd pools' workers are this program */
	(void)argc;
	(void)argv;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	s = suite_create("ext");
	tc = tcase_create("ext");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, ext_items_are_read_in_place_forked);
	tcase_add_test(tc, ext_items_are_read_in_place_execd);
	tcase_add_test(tc, ext_offset_past_the_mapping_is_refused);
	tcase_add_test(tc, ext_records_parse_tasks_only);
	tcase_add_test(tc, ext_options_go_together);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
