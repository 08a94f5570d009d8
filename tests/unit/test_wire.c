/* Unit tests of agentless/wire.c: header and TLV round trips and bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "agentless/wire.h"

static void test_header_round_trip(void **state)
{
	struct wire_header h = {.type = WIRE_STDOUT, .flags = 0x80, .id = 0xdeadbeef, .len = 4096};
	struct wire_header g;
	uint8_t buf[WIRE_HEADER_LEN];

	(void)state;
	wire_header_encode(&h, buf);
	/* big-endian on the wire */
	assert_int_equal(buf[0], WIRE_STDOUT);
	assert_int_equal(buf[1], 0x80);
	assert_int_equal(buf[2], 0);
	assert_int_equal(buf[3], 0);
	assert_int_equal(buf[4], 0xde);
	assert_int_equal(buf[7], 0xef);
	assert_int_equal(buf[8], 0x00);
	assert_int_equal(buf[10], 0x10);
	assert_int_equal(buf[11], 0x00);

	assert_int_equal(wire_header_decode(buf, WIRE_MAX_PAYLOAD, &g), 0);
	assert_int_equal(g.type, h.type);
	assert_int_equal(g.flags, h.flags);
	assert_int_equal(g.id, h.id);
	assert_int_equal(g.len, h.len);
}

static void test_header_bounds(void **state)
{
	struct wire_header h = {.type = WIRE_STDOUT, .id = 1, .len = WIRE_MAX_GUEST_PAYLOAD};
	struct wire_header g;
	uint8_t buf[WIRE_HEADER_LEN];

	(void)state;
	wire_header_encode(&h, buf);
	/* exactly at the limit is fine, one byte more is not */
	assert_int_equal(wire_header_decode(buf, WIRE_MAX_GUEST_PAYLOAD, &g), 0);
	h.len = WIRE_MAX_GUEST_PAYLOAD + 1;
	wire_header_encode(&h, buf);
	assert_int_equal(wire_header_decode(buf, WIRE_MAX_GUEST_PAYLOAD, &g), -1);
	/* a huge length */
	memset(buf + 8, 0xff, 4);
	assert_int_equal(wire_header_decode(buf, WIRE_MAX_PAYLOAD, &g), -1);
	/* reserved bits set */
	h.len = 0;
	wire_header_encode(&h, buf);
	buf[3] = 1;
	assert_int_equal(wire_header_decode(buf, WIRE_MAX_PAYLOAD, &g), -1);
}

static void test_tlv_round_trip(void **state)
{
	uint8_t buf[256];
	struct wire_writer w;
	struct wire_reader r;
	struct wire_field f;
	uint32_t v32;
	uint64_t v64;
	static const char bin[] = {'a', 0, 'b'};

	(void)state;
	wire_writer_init(&w, buf, sizeof buf);
	wire_put_str(&w, WIRE_T_COMMAND, "echo hi");
	wire_put_u32(&w, WIRE_T_TIMEOUT_MS, 120000);
	wire_put_u64(&w, WIRE_T_TIME_NS, 0x0102030405060708ULL);
	wire_put_bytes(&w, WIRE_T_ENV, bin, sizeof bin);
	wire_put_bytes(&w, 999, NULL, 0);
	assert_false(w.overflow);
	assert_int_equal(w.len, 6 + 7 + 6 + 4 + 6 + 8 + 6 + 3 + 6);

	wire_reader_init(&r, buf, w.len);
	assert_int_equal(wire_next(&r, &f), 1);
	assert_int_equal(f.tag, WIRE_T_COMMAND);
	assert_int_equal(f.len, 7);
	assert_memory_equal(f.value, "echo hi", 7);
	assert_int_equal(wire_field_u32(&f, &v32), -1); /* wrong length */

	assert_int_equal(wire_next(&r, &f), 1);
	assert_int_equal(f.tag, WIRE_T_TIMEOUT_MS);
	assert_int_equal(wire_field_u32(&f, &v32), 0);
	assert_int_equal(v32, 120000);
	assert_int_equal(wire_field_u64(&f, &v64), -1);

	assert_int_equal(wire_next(&r, &f), 1);
	assert_int_equal(f.tag, WIRE_T_TIME_NS);
	assert_int_equal(wire_field_u64(&f, &v64), 0);
	assert_true(v64 == 0x0102030405060708ULL);
	assert_int_equal(f.value[0], 0x01); /* big-endian */

	assert_int_equal(wire_next(&r, &f), 1);
	assert_int_equal(f.tag, WIRE_T_ENV);
	assert_int_equal(f.len, 3);
	assert_memory_equal(f.value, bin, 3);

	assert_int_equal(wire_next(&r, &f), 1);
	assert_int_equal(f.tag, 999);
	assert_int_equal(f.len, 0);

	assert_int_equal(wire_next(&r, &f), 0);
	assert_int_equal(wire_next(&r, &f), 0);
}

static void test_tlv_overflow(void **state)
{
	uint8_t buf[16];
	struct wire_writer w;
	struct wire_reader r;
	struct wire_field f;
	uint32_t v;

	(void)state;
	wire_writer_init(&w, buf, sizeof buf);
	wire_put_u32(&w, WIRE_T_VERSION, 1); /* 10 bytes */
	assert_false(w.overflow);
	wire_put_u32(&w, WIRE_T_VERSION_MIN, 1); /* would be 20: dropped */
	assert_true(w.overflow);
	assert_int_equal(w.len, 10);
	/* later appends stay dropped even if they would fit */
	wire_put_bytes(&w, WIRE_T_PARAM, NULL, 0);
	assert_int_equal(w.len, 10);
	assert_true(w.overflow);

	/* what was written before the overflow is intact */
	wire_reader_init(&r, buf, w.len);
	assert_int_equal(wire_next(&r, &f), 1);
	assert_int_equal(wire_field_u32(&f, &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(wire_next(&r, &f), 0);

	/* exact fit */
	wire_writer_init(&w, buf, 10);
	wire_put_u32(&w, WIRE_T_VERSION, 7);
	assert_false(w.overflow);
	assert_int_equal(w.len, 10);
}

static void test_tlv_truncated(void **state)
{
	uint8_t buf[64];
	struct wire_writer w;
	struct wire_reader r;
	struct wire_field f;

	(void)state;
	wire_writer_init(&w, buf, sizeof buf);
	wire_put_str(&w, WIRE_T_MESSAGE, "hello");
	wire_put_str(&w, WIRE_T_PARAM, "cwd");

	/* every strict prefix that cuts a field is malformed */
	for (size_t n = 1; n < w.len; n++) {
		int rc;

		if (n == 11)
			continue; /* a clean field boundary */
		wire_reader_init(&r, buf, n);
		while ((rc = wire_next(&r, &f)) == 1)
			;
		assert_int_equal(rc, -1);
	}
	/* the boundary is a clean end */
	wire_reader_init(&r, buf, 11);
	assert_int_equal(wire_next(&r, &f), 1);
	assert_int_equal(wire_next(&r, &f), 0);

	/* a length field claiming 4 GiB */
	buf[2] = buf[3] = buf[4] = buf[5] = 0xff;
	wire_reader_init(&r, buf, w.len);
	assert_int_equal(wire_next(&r, &f), -1);
}

/* The v3 file frames: every type's header round-trips with a full
 * WIRE_MAX_CHUNK under the host's guest limit, and a FILE_OPEN with its
 * fields (a raw-byte path, u64 offsets) decodes back. */
static void test_file_frames(void **state)
{
	static const uint8_t types[] = {WIRE_FILE_OPEN, WIRE_FILE_DATA, WIRE_FILE_END,
					WIRE_FILE_ACK,	WIRE_FILE_META, WIRE_FILE_ENTRY,
					WIRE_FILE_DONE, WIRE_FILE_ABORT};
	static const char path[] = "/home/sandbox/caf\xe9.txt";
	uint8_t hdr[WIRE_HEADER_LEN], buf[256];
	struct wire_header h, back;
	struct wire_writer w;
	struct wire_reader r;
	struct wire_field f;
	uint32_t v32;
	uint64_t v64;
	int seen = 0;

	(void)state;
	assert_int_equal(WIRE_VERSION, 7);
	/* v7: the guest's TCP_OPEN names its destination in the next tag,
	 * and the new error kinds follow REFUSED */
	assert_int_equal(WIRE_T_HOST, WIRE_T_ABORT + 1);
	assert_int_equal(WIRE_ERR_FORBIDDEN, WIRE_ERR_REFUSED + 1);
	assert_int_equal(WIRE_ERR_TIMEOUT, WIRE_ERR_FORBIDDEN + 1);
	assert_true(WIRE_TCP_HOST_MAX == 253);
	/* v6: TCP streams take the next free frame types and tags */
	assert_int_equal(WIRE_TCP_OPEN, 28);
	assert_int_equal(WIRE_TCP_CLOSE, 32);
	assert_true(WIRE_TCP_WINDOW >= 4 * WIRE_MAX_CHUNK);
	assert_true((WIRE_TCP_GUEST_BIT & 0x7fffffffu) == 0);
	assert_true(WIRE_FILE_WINDOW >= 16 * WIRE_MAX_CHUNK);
	/* v4: the channel window stays under a unix socket's default buffer
	 * (208 KiB) with room for the per-write overhead, and CREDIT is a
	 * frame type of its own */
	assert_true(WIRE_CHANNEL_WINDOW >= WIRE_MAX_CHUNK && WIRE_CHANNEL_WINDOW <= 128 * 1024);
	for (size_t i = 0; i < sizeof types; i++)
		assert_int_not_equal(types[i], WIRE_CREDIT);
	for (size_t i = 0; i < sizeof types; i++) {
		h = (struct wire_header){.type = types[i], .id = 77, .len = WIRE_MAX_CHUNK};
		wire_header_encode(&h, hdr);
		assert_int_equal(wire_header_decode(hdr, WIRE_MAX_GUEST_PAYLOAD, &back), 0);
		assert_int_equal(back.type, types[i]);
		assert_int_equal(back.id, 77);
		assert_int_equal(back.len, WIRE_MAX_CHUNK);
	}
	wire_writer_init(&w, buf, sizeof buf);
	wire_put_u32(&w, WIRE_T_FILE_OP, WIRE_FILE_OP_GET);
	wire_put_bytes(&w, WIRE_T_PATH, path, sizeof path - 1);
	wire_put_u64(&w, WIRE_T_OFFSET, 5ull << 32);
	wire_put_u64(&w, WIRE_T_LENGTH, 1);
	wire_put_u32(&w, WIRE_T_GZIP, 1);
	assert_false(w.overflow);
	wire_reader_init(&r, buf, w.len);
	while (wire_next(&r, &f) == 1) {
		switch (f.tag) {
		case WIRE_T_FILE_OP:
			assert_int_equal(wire_field_u32(&f, &v32), 0);
			assert_int_equal(v32, WIRE_FILE_OP_GET);
			seen++;
			break;
		case WIRE_T_PATH:
			assert_int_equal(f.len, sizeof path - 1);
			assert_memory_equal(f.value, path, f.len);
			seen++;
			break;
		case WIRE_T_OFFSET:
			assert_int_equal(wire_field_u64(&f, &v64), 0);
			assert_true(v64 == 5ull << 32);
			/* a u64 is not a u32 */
			assert_int_equal(wire_field_u32(&f, &v32), -1);
			seen++;
			break;
		default:
			seen++;
			break;
		}
	}
	assert_int_equal(seen, 5);
}

/* Version 3: the frame types and tags from the top of their ranges go
 * through the header and TLV code like any other, and a LIST reply's
 * nested PROC_ENTRY payloads read back field by field. */
static void test_v3_frames_and_nested_entries(void **state)
{
	static const uint8_t types[] = {WIRE_PAUSE, WIRE_RESUME, WIRE_PROC, WIRE_PROC_REPLY};
	uint8_t hdr[WIRE_HEADER_LEN], entry[64], list[256];
	struct wire_writer w, ew;
	struct wire_reader r, er;
	struct wire_field f, ef;
	struct wire_header h;
	uint32_t v = 0;
	uint64_t v64 = 0;
	int entries = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(types); i++) {
		struct wire_header in = {.type = types[i], .id = 7, .len = 0};

		wire_header_encode(&in, hdr);
		assert_int_equal(wire_header_decode(hdr, WIRE_MAX_GUEST_PAYLOAD, &h), 0);
		assert_int_equal(h.type, types[i]);
		assert_int_equal(h.id, 7);
	}
	wire_writer_init(&w, list, sizeof(list));
	for (uint32_t pid = 100; pid < 103; pid++) {
		wire_writer_init(&ew, entry, sizeof(entry));
		wire_put_u32(&ew, WIRE_T_PID, pid);
		wire_put_bytes(&ew, WIRE_T_COMMAND, "sleep 9", 7);
		wire_put_u32(&ew, WIRE_T_RUNNING, pid != 101);
		wire_put_u64(&ew, WIRE_T_OUT_END, (uint64_t)pid << 33);
		assert_false(ew.overflow);
		wire_put_bytes(&w, WIRE_T_PROC_ENTRY, entry, ew.len);
	}
	assert_false(w.overflow);
	wire_reader_init(&r, list, w.len);
	while (wire_next(&r, &f) == 1) {
		assert_int_equal(f.tag, WIRE_T_PROC_ENTRY);
		wire_reader_init(&er, f.value, f.len);
		while (wire_next(&er, &ef) == 1) {
			if (ef.tag == WIRE_T_PID)
				assert_int_equal(wire_field_u32(&ef, &v), 0);
			else if (ef.tag == WIRE_T_OUT_END)
				assert_int_equal(wire_field_u64(&ef, &v64), 0);
		}
		assert_int_equal(v, 100 + entries);
		assert_int_equal(v64, (uint64_t)v << 33);
		entries++;
	}
	assert_int_equal(entries, 3);
	/* a u16 tag at the top of the range survives the round trip */
	wire_writer_init(&w, list, sizeof(list));
	wire_put_u32(&w, WIRE_T_STREAM, 1);
	wire_reader_init(&r, list, w.len);
	assert_int_equal(wire_next(&r, &f), 1);
	assert_int_equal(f.tag, 65535);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_header_round_trip),
	    cmocka_unit_test(test_header_bounds),
	    cmocka_unit_test(test_tlv_round_trip),
	    cmocka_unit_test(test_tlv_overflow),
	    cmocka_unit_test(test_tlv_truncated),
	    cmocka_unit_test(test_file_frames),
	    cmocka_unit_test(test_v3_frames_and_nested_entries),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
