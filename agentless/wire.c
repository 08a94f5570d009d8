/* The exec channel's wire format: see wire.h. libc only (linked into the
 * static guest init as well as the daemon). */
#include "agentless/wire.h"

#include <string.h>

static void put_be16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static void put_be64(uint8_t *p, uint64_t v)
{
	put_be32(p, (uint32_t)(v >> 32));
	put_be32(p + 4, (uint32_t)v);
}

static uint16_t get_be16(const uint8_t *p)
{
	return (uint16_t)((uint16_t)p[0] << 8 | p[1]);
}

static uint32_t get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get_be64(const uint8_t *p)
{
	return (uint64_t)get_be32(p) << 32 | get_be32(p + 4);
}

void wire_header_encode(const struct wire_header *h, uint8_t out[WIRE_HEADER_LEN])
{
	out[0] = h->type;
	out[1] = h->flags;
	put_be16(out + 2, 0);
	put_be32(out + 4, h->id);
	put_be32(out + 8, h->len);
}

int wire_header_decode(const uint8_t in[WIRE_HEADER_LEN], uint32_t max_payload,
		       struct wire_header *h)
{
	uint32_t len = get_be32(in + 8);

	if (get_be16(in + 2) != 0)
		return -1;
	if (len > max_payload)
		return -1;
	h->type = in[0];
	h->flags = in[1];
	h->id = get_be32(in + 4);
	h->len = len;
	return 0;
}

void wire_writer_init(struct wire_writer *w, uint8_t *buf, size_t cap)
{
	w->buf = buf;
	w->cap = buf ? cap : 0;
	w->len = 0;
	w->overflow = 0;
}

/* Reserve room for a field of `len` value bytes; NULL (and overflow set)
 * when it does not fit. Returns where the value goes. */
static uint8_t *wire_put_field(struct wire_writer *w, uint16_t tag, size_t len)
{
	uint8_t *p;

	if (w->overflow)
		return NULL;
	if (len > UINT32_MAX || w->len > w->cap || w->cap - w->len < 6 ||
	    w->cap - w->len - 6 < len) {
		w->overflow = 1;
		return NULL;
	}
	p = w->buf + w->len;
	put_be16(p, tag);
	put_be32(p + 2, (uint32_t)len);
	w->len += 6 + len;
	return p + 6;
}

void wire_put_bytes(struct wire_writer *w, uint16_t tag, const void *v, size_t len)
{
	uint8_t *p = wire_put_field(w, tag, len);

	if (p && len)
		memcpy(p, v, len);
}

void wire_put_str(struct wire_writer *w, uint16_t tag, const char *s)
{
	wire_put_bytes(w, tag, s, s ? strlen(s) : 0);
}

void wire_put_u32(struct wire_writer *w, uint16_t tag, uint32_t v)
{
	uint8_t *p = wire_put_field(w, tag, 4);

	if (p)
		put_be32(p, v);
}

void wire_put_u64(struct wire_writer *w, uint16_t tag, uint64_t v)
{
	uint8_t *p = wire_put_field(w, tag, 8);

	if (p)
		put_be64(p, v);
}

void wire_reader_init(struct wire_reader *r, const void *payload, size_t len)
{
	r->buf = payload;
	r->len = payload ? len : 0;
	r->off = 0;
}

int wire_next(struct wire_reader *r, struct wire_field *f)
{
	size_t left;
	uint32_t len;

	if (r->off > r->len)
		return -1;
	left = r->len - r->off;
	if (left == 0)
		return 0;
	if (left < 6)
		return -1;
	len = get_be32(r->buf + r->off + 2);
	if (len > left - 6)
		return -1;
	f->tag = get_be16(r->buf + r->off);
	f->len = len;
	f->value = r->buf + r->off + 6;
	r->off += 6 + (size_t)len;
	return 1;
}

int wire_field_u32(const struct wire_field *f, uint32_t *v)
{
	if (f->len != 4)
		return -1;
	*v = get_be32(f->value);
	return 0;
}

int wire_field_u64(const struct wire_field *f, uint64_t *v)
{
	if (f->len != 8)
		return -1;
	*v = get_be64(f->value);
	return 0;
}
