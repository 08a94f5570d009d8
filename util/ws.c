/* util/ws.c: WebSocket framing (RFC 6455); see util/util.h "WebSocket". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#include "util.h"

static bool opcode_known(uint8_t op)
{
	return op == WS_OP_CONT || op == WS_OP_TEXT || op == WS_OP_BINARY || op == WS_OP_CLOSE ||
	       op == WS_OP_PING || op == WS_OP_PONG;
}

int ws_frame_parse(const uint8_t *buf, size_t n, bool want_mask, uint64_t max_payload,
		   struct ws_frame *f)
{
	size_t need = 2;
	uint64_t len;

	if (n < 2)
		return 0;
	memset(f, 0, sizeof(*f));
	f->fin = (buf[0] & 0x80) != 0;
	f->opcode = buf[0] & 0x0f;
	f->masked = (buf[1] & 0x80) != 0;
	if ((buf[0] & 0x70) || !opcode_known(f->opcode) || f->masked != want_mask)
		return -1;
	len = buf[1] & 0x7f;
	if (len == 126)
		need += 2;
	else if (len == 127)
		need += 8;
	if (f->masked)
		need += 4;
	if (n < need)
		return 0;
	if (len == 126) {
		len = (uint64_t)buf[2] << 8 | buf[3];
		if (len < 126)
			return -1;
	} else if (len == 127) {
		len = 0;
		for (int i = 0; i < 8; i++)
			len = len << 8 | buf[2 + i];
		if (len >> 63 || len <= 0xffff)
			return -1;
	}
	if (f->opcode & 0x8) { /* control */
		if (!f->fin || len > WS_CONTROL_MAX)
			return -1;
	}
	if (len > max_payload)
		return -1;
	if (f->masked)
		memcpy(f->mask, buf + need - 4, 4);
	f->len = len;
	f->hdr_len = need;
	return 1;
}

void ws_mask(uint8_t *p, size_t len, const uint8_t key[4], uint64_t offset)
{
	for (size_t i = 0; i < len; i++)
		p[i] ^= key[(offset + i) & 3];
}

size_t ws_header_encode(uint8_t out[WS_HEADER_MAX], uint8_t opcode, bool fin, uint64_t len,
			const uint8_t *key)
{
	size_t n = 2;

	out[0] = (uint8_t)((fin ? 0x80 : 0) | (opcode & 0x0f));
	out[1] = key ? 0x80 : 0;
	if (len < 126) {
		out[1] |= (uint8_t)len;
	} else if (len <= 0xffff) {
		out[1] |= 126;
		out[2] = (uint8_t)(len >> 8);
		out[3] = (uint8_t)len;
		n = 4;
	} else {
		out[1] |= 127;
		for (int i = 0; i < 8; i++)
			out[2 + i] = (uint8_t)(len >> (56 - 8 * i));
		n = 10;
	}
	if (key) {
		memcpy(out + n, key, 4);
		n += 4;
	}
	return n;
}

int ws_accept(const char *key, char out[WS_ACCEPT_LEN + 1])
{
	static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
	unsigned char md[SHA_DIGEST_LENGTH];
	char cat[24 + sizeof(guid)];
	size_t dlen = 0;
	char *raw, *enc;

	if (!key || strlen(key) != 24)
		return -1;
	raw = sbx_base64_decode(key, 24, &dlen);
	free(raw);
	if (!raw || dlen != 16)
		return -1;
	snprintf(cat, sizeof(cat), "%s%s", key, guid);
	SHA1((const unsigned char *)cat, strlen(cat), md);
	enc = sbx_base64_encode(md, sizeof(md));
	if (!enc || strlen(enc) != WS_ACCEPT_LEN) {
		free(enc);
		return -1;
	}
	memcpy(out, enc, WS_ACCEPT_LEN + 1);
	free(enc);
	return 0;
}
