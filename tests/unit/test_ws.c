/* The WebSocket framing of util/ws.c (RFC 6455): the RFC's own examples
 * (the accept key, a masked "Hello"), every length form both ways, and
 * each malformed header refused: reserved bits, unknown opcodes, control
 * frames fragmented or too long, lengths not in their shortest form or
 * with the top bit set, the wrong masking, a payload past the cap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/util.h"

static void accept_key_of_the_rfc(void **state)
{
	char out[WS_ACCEPT_LEN + 1];

	(void)state;
	assert_int_equal(ws_accept("dGhlIHNhbXBsZSBub25jZQ==", out), 0);
	assert_string_equal(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
	assert_int_equal(ws_accept("dGhlIHNhbXBsZSBub25jZQ=", out), -1); /* 23 chars */
	assert_int_equal(ws_accept("dGhlIHNhbXBsZSBub25j!Q==", out), -1);
	assert_int_equal(ws_accept("aGVsbG8gd29ybGQgaGVsbG8h", out), -1); /* 18 bytes */
	assert_int_equal(ws_accept(NULL, out), -1);
}

static void masked_hello_of_the_rfc(void **state)
{
	uint8_t f[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58};
	uint8_t hdr[WS_HEADER_MAX];
	struct ws_frame fr;

	(void)state;
	for (size_t n = 0; n < 6; n++) /* incomplete headers ask for more */
		assert_int_equal(ws_frame_parse(f, n, true, 1024, &fr), 0);
	assert_int_equal(ws_frame_parse(f, sizeof f, true, 1024, &fr), 1);
	assert_true(fr.fin);
	assert_int_equal(fr.opcode, WS_OP_TEXT);
	assert_int_equal(fr.len, 5);
	assert_int_equal(fr.hdr_len, 6);
	ws_mask(f + 6, 5, fr.mask, 0);
	assert_memory_equal(f + 6, "Hello", 5);
	/* a server must not read it as unmasked, a client must refuse it */
	assert_int_equal(ws_frame_parse(f, sizeof f, false, 1024, &fr), -1);
	/* the RFC's unmasked "Hello" encodes the same header */
	assert_int_equal(ws_header_encode(hdr, WS_OP_TEXT, true, 5, NULL), 2);
	assert_int_equal(hdr[0], 0x81);
	assert_int_equal(hdr[1], 0x05);
	/* masking split at any offset gives the same bytes */
	memcpy(f + 6, "Hello", 5);
	ws_mask(f + 6, 2, f + 2, 0);
	ws_mask(f + 8, 3, f + 2, 2);
	assert_int_equal(f[6], 0x7f);
	assert_int_equal(f[10], 0x58);
}

static void lengths_round_trip(void **state)
{
	static const uint64_t lens[] = {0, 1, 125, 126, 127, 65535, 65536, 1u << 20};
	static const uint8_t key[4] = {1, 2, 3, 4};
	uint8_t hdr[WS_HEADER_MAX];
	struct ws_frame f;

	(void)state;
	for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
		for (int masked = 0; masked < 2; masked++) {
			size_t n = ws_header_encode(hdr, WS_OP_BINARY, i % 2, lens[i],
						    masked ? key : NULL);

			assert_int_equal(n, (lens[i] < 126     ? 2
					     : lens[i] < 65536 ? 4
							       : 10) +
						(masked ? 4 : 0));
			assert_int_equal(ws_frame_parse(hdr, n - 1, masked, 1u << 20, &f), 0);
			assert_int_equal(ws_frame_parse(hdr, n, masked, 1u << 20, &f), 1);
			assert_int_equal(f.len, lens[i]);
			assert_int_equal(f.hdr_len, n);
			assert_int_equal(f.fin, i % 2);
			if (masked)
				assert_memory_equal(f.mask, key, 4);
			/* one byte past the cap is refused from the header */
			if (lens[i] > 0)
				assert_int_equal(ws_frame_parse(hdr, n, masked, lens[i] - 1, &f),
						 -1);
		}
	}
}

static void malformed_headers(void **state)
{
	struct ws_frame f;
	uint8_t b[16];

	(void)state;
	/* reserved bits */
	memcpy(b, "\xc2\x80\0\0\0\0", 6);
	assert_int_equal(ws_frame_parse(b, 6, true, 1024, &f), -1);
	/* unknown opcodes 3-7, 0xb-0xf */
	for (uint8_t op = 3; op < 16; op++) {
		if (op == WS_OP_CLOSE || op == WS_OP_PING || op == WS_OP_PONG)
			continue;
		b[0] = 0x80 | op;
		b[1] = 0x80;
		assert_int_equal(ws_frame_parse(b, 6, true, 1024, &f), -1);
	}
	/* a fragmented control frame, and one of 126 bytes */
	memcpy(b, "\x09\x80\0\0\0\0", 6);
	assert_int_equal(ws_frame_parse(b, 6, true, 1024, &f), -1);
	memcpy(b, "\x89\xfe\x00\x7e\0\0\0\0", 8);
	assert_int_equal(ws_frame_parse(b, 8, true, 1024, &f), -1);
	/* 16-bit length for what fits 7 bits; 64-bit for what fits 16 */
	memcpy(b, "\x82\xfe\x00\x7d\0\0\0\0", 8);
	assert_int_equal(ws_frame_parse(b, 8, true, 1024, &f), -1);
	memcpy(b, "\x82\xff\0\0\0\0\0\0\xff\xff\0\0\0\0", 14);
	assert_int_equal(ws_frame_parse(b, 14, true, UINT64_MAX, &f), -1);
	/* the top bit of a 64-bit length */
	memcpy(b, "\x82\xff\x80\0\0\0\0\0\0\0\0\0\0\0", 14);
	assert_int_equal(ws_frame_parse(b, 14, true, UINT64_MAX, &f), -1);
	/* a masked frame to a client, an unmasked one to the server */
	memcpy(b, "\x82\x01x", 3);
	assert_int_equal(ws_frame_parse(b, 3, true, 1024, &f), -1);
	assert_int_equal(ws_frame_parse(b, 3, false, 1024, &f), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(accept_key_of_the_rfc),
	    cmocka_unit_test(masked_hello_of_the_rfc),
	    cmocka_unit_test(lengths_round_trip),
	    cmocka_unit_test(malformed_headers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
