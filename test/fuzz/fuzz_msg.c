/*
 * fuzz_msg.c: libFuzzer harness for the master/worker wire format
 * (src/msg.c over struct gp_buf from src/io.c).
 *
 * The input is a byte stream of messages, as a master or worker would read
 * it from a pipe. For each message the harness checks the invariants that
 * msg.h promises:
 *   - gp_msg_parse() returns 0, a length, -EBADMSG or -EMSGSIZE; a length
 *     is 16 + hdr.len, never exceeds the bytes available, and TASK, RESULT
 *     and JOB payloads never exceed max; the same prefix parses the same,
 *     one byte less is "not there yet";
 *   - gp_msg_task_next()/gp_msg_result_next() never hand out a record that
 *     runs past the payload, and always advance; a GP_REC_SHM record (its
 *     bytes in the region) has no bytes in the payload and NULL data, and
 *     only a RESULT of kind DONE may have it; gp_msg_shm_place() gives an
 *     offset whose bytes lie inside the half, or -1 and leaves it as is;
 *     a GP_REC_PIECED record has no bytes and no length either; a TASK's
 *     GP_REC_EXT record has its 8-byte offset after it, a RESULT none;
 *   - a PIECE that gp_msg_piece_check() takes, against a few states of
 *     what came before, starts where they ended (or at 0), keeps their
 *     total, which is over the window and at most max, carries 1 byte or
 *     more and no more than the rest, its bytes in the region (within
 *     its room) or exactly in the message (within the window);
 *   - re-encoding what was parsed with gp_msg_begin()/gp_buf_add()/
 *     gp_msg_finish() gives back the same bytes (encode -> parse round
 *     trip), also with a gp_buf whose off is not 0.
 * No state is kept between inputs.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"
#include "msg.h"

#include "fuzz_common.h"


static const size_t maxes[] = { 0, 8, 64, 4096, 1u << 20, UINT32_MAX };

/* Check one parse of buf[0..avail) against msg.h's contract. */
static long
check_parse(const uint8_t *buf, size_t avail, size_t max)
{
	struct gp_msg_hdr	 hdr, h2;
	long			 rc, rc2;

	memset(&hdr, 0xa5, sizeof(hdr));
	rc = gp_msg_parse(buf, avail, max, &hdr);
	if (rc < 0) {
		CHECK(rc == -EBADMSG || rc == -EMSGSIZE);
		CHECK(avail >= sizeof(hdr));
		if (rc == -EMSGSIZE)
			CHECK(hdr.len > max && (hdr.type == GP_MSG_JOB ||
			    hdr.type == GP_MSG_TASK ||
			    hdr.type == GP_MSG_RESULT ||
			    hdr.type == GP_MSG_PIECE));
		return rc;
	}
	if (rc == 0) {
		/* Not all there yet: a short header or a short payload. */
		CHECK(avail < sizeof(hdr) ||
		    avail - sizeof(hdr) < hdr.len);
		return 0;
	}
	CHECK((size_t)rc <= avail);
	CHECK((size_t)rc == sizeof(hdr) + hdr.len);
	CHECK(memcmp(&hdr, buf, sizeof(hdr)) == 0);
	switch (hdr.type) {
	case GP_MSG_READY:
		CHECK(hdr.len == sizeof(struct gp_msg_ready));
		break;
	case GP_MSG_STOP:
	case GP_MSG_QUIT:
		CHECK(hdr.len == 0);
		break;
	case GP_MSG_JOB:
		CHECK(hdr.len >= sizeof(uint64_t));
		/* FALLTHROUGH */
	case GP_MSG_TASK:
	case GP_MSG_RESULT:
		CHECK(hdr.len <= max);
		break;
	case GP_MSG_GPUS:
		CHECK(hdr.id >= 1 && hdr.id <= GP_MSG_GPUS_MAX &&
		    hdr.len == hdr.id * sizeof(uint32_t));
		break;
	case GP_MSG_ACK:
		CHECK(hdr.len == sizeof(struct gp_msg_ack));
		break;
	case GP_MSG_PIECE:
		CHECK(hdr.len >= sizeof(struct gp_msg_piece) && hdr.len <= max);
		break;
	default:
		CHECK(!"unknown type accepted");
	}
	/* Exactly the message: same answer; one byte short: not yet. */
	rc2 = gp_msg_parse(buf, (size_t)rc, max, &h2);
	CHECK(rc2 == rc);
	rc2 = gp_msg_parse(buf, (size_t)rc - 1, max, &h2);
	CHECK(rc2 == 0);
	return rc;
}

/* Place len bytes after each of a few ends in a half of size bytes. */
static void
check_place(size_t len, size_t size)
{
	size_t	 ends[] = { 0, 1, GP_SHM_ALIGN, size / 2, size, size + 1 };
	size_t	 i, e;
	long	 at;

	for (i = 0; i < sizeof(ends) / sizeof(ends[0]); i++) {
		e = ends[i];
		at = gp_msg_shm_place(&e, len, size);
		if (at < 0) {
			CHECK(at == -1 && e == ends[i]);
			CHECK(ends[i] > size || len > size - ends[i]);
			continue;
		}
		CHECK((size_t)at == ends[i] && (size_t)at + len <= size);
		CHECK(e >= (size_t)at + len && e % GP_SHM_ALIGN == 0 &&
		    e - ((size_t)at + len) < GP_SHM_ALIGN);
	}
}

/* A PIECE's payload (n bytes at p) against a few states of what came
 * before it, rooms and windows: what is taken keeps every promise. */
static void
check_piece(const uint8_t *p, size_t n)
{
	static const uint64_t	 gots[] = { 0, 1, 4096, (uint64_t)1 << 32 };
	static const size_t	 rooms[] = { 0, 64, 65536 };
	static const size_t	 wins[] = { 1, 4096, 65536 };
	struct gp_msg_piece	 m;
	size_t			 g, r, w, mx;
	uint64_t		 was;

	if (n < sizeof(m))
		return;
	memcpy(&m, p, sizeof(m));
	for (g = 0; g < sizeof(gots) / sizeof(gots[0]); g++)
	for (r = 0; r < sizeof(rooms) / sizeof(rooms[0]); r++)
	for (w = 0; w < sizeof(wins) / sizeof(wins[0]); w++)
	for (mx = 0; mx < sizeof(maxes) / sizeof(maxes[0]); mx++) {
		/* The total so far: this piece's, or another. */
		was = g % 2 ? m.total : m.total + 1;
		if (gp_msg_piece_check(&m, n, gots[g], was, rooms[r],
		    wins[w], maxes[mx]) != 0)
			continue;
		CHECK(m.total > wins[w] && m.total <= maxes[mx]);
		CHECK(m.off == 0 || (m.off == gots[g] && m.total == was));
		CHECK(m.len >= 1 && m.len <= m.total - m.off);
		CHECK(m.flags == 0 || m.flags == GP_REC_SHM);
		if (m.flags == GP_REC_SHM)
			CHECK(m.len <= rooms[r] && n == sizeof(m));
		else
			CHECK(m.len <= wins[w] && n == sizeof(m) + m.len);
	}
}

/* Walk a payload as TASK or RESULT records; re-encode what was accepted
 * into enc (when not NULL). Returns the record count or -EBADMSG. */
static long
walk(int result, const uint8_t *p, size_t n, struct gp_buf *enc)
{
	const uint8_t		*pos = p, *end = p + n, *data, *prev;
	struct gp_rec_task	 t;
	struct gp_rec_result	 r;
	size_t			 rl, len;
	long			 count = 0;
	int			 rc;

	for (;;) {
		prev = pos;
		data = NULL;
		if (result)
			rc = gp_msg_result_next(&pos, end, &r, &data);
		else
			rc = gp_msg_task_next(&pos, end, &t, &data);
		if (rc == 0) {
			CHECK(pos == end && prev == end);
			return count;
		}
		if (rc < 0) {
			CHECK(rc == -EBADMSG);
			CHECK(pos == prev);	/* nothing consumed */
			return rc;
		}
		CHECK(rc == 1);
		rl = result ? sizeof(r) : sizeof(t);
		len = result ? r.len : t.len;
		if (!result && t.flags == GP_REC_EXT) {
			/* Its offset follows it: taken as 8 bytes. */
			CHECK(data == prev + rl);
			len = sizeof(uint64_t);
		} else if ((result ? r.flags : t.flags) != 0) {
			CHECK((result ? r.flags : t.flags) == GP_REC_SHM ||
			    ((result ? r.flags : t.flags) == GP_REC_PIECED &&
			    len == 0));
			CHECK(!result || r.kind == GP_REC_DONE);
			CHECK(data == NULL && pos == prev + rl);
			check_place(len, (size_t)(end - prev));
			len = 0;
			data = pos;
		}
		CHECK(data == prev + rl);
		CHECK(data >= p && data <= end);
		CHECK(len <= (size_t)(end - data));
		CHECK(pos == data + len);
		CHECK(pos > prev && pos <= end);
		if (result) {
			CHECK(r.kind <= GP_REC_SKIPPED);
			CHECK(memcmp(&r, prev, sizeof(r)) == 0);
		} else
			CHECK(memcmp(&t, prev, sizeof(t)) == 0);
		if (enc != NULL) {
			CHECK(gp_buf_add(enc, result ? (const void *)&r :
			    (const void *)&t, rl) == 0);
			CHECK(gp_buf_add(enc, data, len) == 0);
		}
		count++;
	}
}

/* Encode hdr + payload again, after junk that is consumed first so that
 * off > 0 and the buffer may move, and compare with the original. */
static void
roundtrip(const uint8_t *msg, size_t mlen, const struct gp_msg_hdr *hdr,
    size_t junk)
{
	struct gp_buf		 b = { 0 };
	struct gp_msg_hdr	 h2;
	const uint8_t		*payload = msg + sizeof(*hdr);
	size_t			 at, i;
	long			 rc;
	uint8_t			 z = 0x5a;

	for (i = 0; i < junk; i++)
		CHECK(gp_buf_add(&b, &z, 1) == 0);
	gp_buf_consume(&b, junk / 2 + (junk > 0));
	CHECK(gp_msg_begin(&b, hdr->type, &at) == 0);
	switch (hdr->type) {
	case GP_MSG_TASK:
		CHECK(walk(0, payload, hdr->len, &b) >= 0);
		break;
	case GP_MSG_RESULT:
		CHECK(walk(1, payload, hdr->len, &b) >= 0);
		break;
	default:
		CHECK(gp_buf_add(&b, payload, hdr->len) == 0);
		break;
	}
	gp_msg_finish(&b, at, hdr->id);
	CHECK(b.len - b.off - at == mlen);
	CHECK(memcmp(b.data + b.off + at, msg, mlen) == 0);
	rc = gp_msg_parse(b.data + b.off + at, b.len - b.off - at,
	    hdr->len, &h2);
	CHECK(rc == (long)mlen);
	CHECK(memcmp(&h2, hdr, sizeof(h2)) == 0);
	gp_buf_release(&b);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gp_msg_hdr	 hdr;
	const uint8_t		*p = data, *payload;
	size_t			 left = size, i, max;
	long			 rc = 0, tr, rr;
	unsigned		 nmsg = 0;

	/* Every max against the whole input. */
	for (i = 0; i < sizeof(maxes) / sizeof(maxes[0]); i++)
		(void)check_parse(data, size, maxes[i]);

	/* The input as a stream of messages, as loop.c would take it. */
	max = 1u << 20;
	while (left > 0) {
		rc = check_parse(p, left, max);
		if (rc <= 0)
			break;
		CHECK(gp_msg_parse(p, left, max, &hdr) == rc);
		payload = p + sizeof(hdr);
		/* Both record walkers on every payload: never past the end. */
		tr = walk(0, payload, hdr.len, NULL);
		rr = walk(1, payload, hdr.len, NULL);
		check_piece(payload, hdr.len);
		if ((hdr.type == GP_MSG_TASK && tr >= 0) ||
		    (hdr.type == GP_MSG_RESULT && rr >= 0) ||
		    (hdr.type != GP_MSG_TASK && hdr.type != GP_MSG_RESULT))
			roundtrip(p, (size_t)rc, &hdr, nmsg % 3 == 0 ? 0 :
			    (size_t)(nmsg * 37) % 5000);
		p += rc;
		left -= (size_t)rc;
		nmsg++;
	}
	return 0;
}
