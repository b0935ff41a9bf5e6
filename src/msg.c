/*
 * msg.c: framing of master/worker messages. Pure functions over bytes;
 * every length is checked against what is there and against the pool's
 * max_msg before the caller allocates anything.
 */
#include <errno.h>
#include <string.h>

#include "msg.h"

long
gp_msg_parse(const void *buf, size_t avail, size_t max,
    struct gp_msg_hdr *hdr)
{
	if (avail < sizeof(*hdr))
		return 0;
	memcpy(hdr, buf, sizeof(*hdr));
	switch (hdr->type) {
	case GP_MSG_READY:
		if (hdr->len != sizeof(struct gp_msg_ready))
			return -EBADMSG;
		break;
	case GP_MSG_STOP:
	case GP_MSG_QUIT:
		if (hdr->len != 0)
			return -EBADMSG;
		break;
	case GP_MSG_GPUS:
		if (hdr->id == 0 || hdr->id > GP_MSG_GPUS_MAX ||
		    hdr->len != hdr->id * sizeof(uint32_t))
			return -EBADMSG;
		break;
	case GP_MSG_ACK:
		if (hdr->len != sizeof(struct gp_msg_ack))
			return -EBADMSG;
		break;
	case GP_MSG_PIECE:
		if (hdr->len < sizeof(struct gp_msg_piece))
			return -EBADMSG;
		/* FALLTHROUGH */
	case GP_MSG_JOB:
		if (hdr->len < sizeof(uint64_t))
			return -EBADMSG;
		/* FALLTHROUGH */
	case GP_MSG_TASK:
	case GP_MSG_RESULT:
		if (hdr->len > max)
			return -EMSGSIZE;
		break;
	default:
		return -EBADMSG;
	}
	if (avail - sizeof(*hdr) < hdr->len)
		return 0;
	return (long)(sizeof(*hdr) + hdr->len);
}

/* The bytes of a record of rl bytes at *pos: in the message after it, or
 * in the region (GP_REC_SHM: none here), or in the pieces before it
 * (GP_REC_PIECED: none here, and no length of its own), or, for a TASK
 * (ext), in the extern mapping (GP_REC_EXT: its offset here). */
static int
rec_bytes(const uint8_t **pos, const uint8_t *end, size_t rl, uint32_t len,
    uint32_t flags, int ext, const uint8_t **data)
{
	if (flags != 0 && flags != GP_REC_SHM && flags != GP_REC_PIECED &&
	    (flags != GP_REC_EXT || !ext))
		return -EBADMSG;
	if (flags == GP_REC_PIECED && len != 0)
		return -EBADMSG;
	if (flags == GP_REC_EXT) {
		if ((size_t)(end - *pos) - rl < sizeof(uint64_t))
			return -EBADMSG;
		*data = *pos + rl;
		*pos = *data + sizeof(uint64_t);
		return 1;
	}
	if (flags != 0) {
		*data = NULL;
		*pos += rl;
		return 1;
	}
	if ((size_t)(end - *pos) - rl < len)
		return -EBADMSG;
	*data = *pos + rl;
	*pos = *data + len;
	return 1;
}

int
gp_msg_task_next(const uint8_t **pos, const uint8_t *end,
    struct gp_rec_task *rec, const uint8_t **data)
{
	if (*pos == end)
		return 0;
	if ((size_t)(end - *pos) < sizeof(*rec))
		return -EBADMSG;
	memcpy(rec, *pos, sizeof(*rec));
	return rec_bytes(pos, end, sizeof(*rec), rec->len, rec->flags, 1,
	    data);
}

int
gp_msg_result_next(const uint8_t **pos, const uint8_t *end,
    struct gp_rec_result *rec, const uint8_t **data)
{
	if (*pos == end)
		return 0;
	if ((size_t)(end - *pos) < sizeof(*rec))
		return -EBADMSG;
	memcpy(rec, *pos, sizeof(*rec));
	if (rec->kind > GP_REC_SKIPPED ||
	    (rec->flags != 0 && rec->kind != GP_REC_DONE))
		return -EBADMSG;
	return rec_bytes(pos, end, sizeof(*rec), rec->len, rec->flags, 0,
	    data);
}

int
gp_msg_piece_check(const struct gp_msg_piece *pc, size_t mlen, uint64_t got,
    uint64_t total, size_t shm_room, size_t window, size_t max)
{
	if (pc->flags & ~GP_REC_SHM)
		return -EBADMSG;
	if (pc->total <= window || pc->total > max)
		return -EBADMSG;
	if (pc->off != 0 && (pc->off != got || pc->total != total))
		return -EBADMSG;
	if (pc->len == 0 || pc->len > pc->total - pc->off)
		return -EBADMSG;
	if (pc->flags & GP_REC_SHM)
		return pc->len <= shm_room && mlen == sizeof(*pc) ? 0 :
		    -EBADMSG;
	return pc->len <= window && mlen >= sizeof(*pc) &&
	    mlen - sizeof(*pc) == pc->len ? 0 : -EBADMSG;
}

long
gp_msg_shm_place(size_t *end, size_t len, size_t size)
{
	size_t	 at = *end;

	if (at > size || len > size - at)
		return -1;
	*end = at + len;
	if (*end % GP_SHM_ALIGN)
		*end += GP_SHM_ALIGN - *end % GP_SHM_ALIGN;
	return (long)at;
}

int
gp_msg_begin(struct gp_buf *b, uint32_t type, size_t *at)
{
	struct gp_msg_hdr	 h = { .type = type };

	/* Relative to off: gp_buf_reserve() may move the data. */
	*at = b->len - b->off;
	return gp_buf_add(b, &h, sizeof(h));
}

void
gp_msg_finish(struct gp_buf *b, size_t at, uint64_t id)
{
	struct gp_msg_hdr	 h;

	uint8_t			*p = b->data + b->off + at;

	memcpy(&h, p, sizeof(h));
	h.len = (uint32_t)(b->len - b->off - at - sizeof(h));
	h.id = id;
	memcpy(p, &h, sizeof(h));
}
