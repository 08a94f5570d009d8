/* Fuzz target: the exec channel's framing (agentless/wire.c). Walks
 * arbitrary bytes as a stream of frames: header decode with the guest's
 * limit, then the TLV fields of each payload, and checks that re-encoding
 * what was read gives back the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agentless/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk_payload(const uint8_t *p, size_t len)
{
	static uint8_t copy[WIRE_MAX_GUEST_PAYLOAD];
	struct wire_reader r;
	struct wire_writer w;
	struct wire_field f;
	uint32_t v32;
	uint64_t v64;
	int rc;

	wire_reader_init(&r, p, len);
	wire_writer_init(&w, copy, sizeof copy);
	while ((rc = wire_next(&r, &f)) == 1) {
		if (f.value < p || f.value + f.len > p + len)
			abort(); /* a field must lie inside the payload */
		if (wire_field_u32(&f, &v32) == 0)
			wire_put_u32(&w, f.tag, v32);
		else if (wire_field_u64(&f, &v64) == 0)
			wire_put_u64(&w, f.tag, v64);
		else
			wire_put_bytes(&w, f.tag, f.value, f.len);
	}
	if (rc == 0 && (w.overflow || w.len != len || (len && memcmp(copy, p, len) != 0)))
		abort(); /* a well-formed payload re-encodes to itself */
	if (rc < 0 && r.off > len)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t off = 0;

	while (size - off >= WIRE_HEADER_LEN) {
		struct wire_header h, h2;
		uint8_t again[WIRE_HEADER_LEN];
		size_t len;

		if (wire_header_decode(data + off, WIRE_MAX_GUEST_PAYLOAD, &h) < 0)
			return 0;
		if (h.len > WIRE_MAX_GUEST_PAYLOAD)
			abort();
		wire_header_encode(&h, again);
		if (wire_header_decode(again, WIRE_MAX_GUEST_PAYLOAD, &h2) < 0 ||
		    h2.type != h.type || h2.flags != h.flags || h2.id != h.id || h2.len != h.len)
			abort();
		off += WIRE_HEADER_LEN;
		len = h.len < size - off ? h.len : size - off;
		walk_payload(data + off, len);
		off += len;
	}
	return 0;
}
