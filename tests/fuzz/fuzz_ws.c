/* Fuzz target: the WebSocket framing (util/ws.c) as the terminal route
 * reads a client: walks arbitrary bytes as a stream of frames with the
 * server's limits (masked, 64 KiB), unmasks each payload, and checks that
 * a header it accepted re-encodes to the same bytes and that no frame
 * reaches past the input or the cap. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP (64u * 1024)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t copy[CAP];
	size_t off = 0;

	for (int want = 0; want < 2; want++) {
		off = 0;
		while (off < size) {
			struct ws_frame f;
			uint8_t hdr[WS_HEADER_MAX];
			int rc = ws_frame_parse(data + off, size - off, want, CAP, &f);
			size_t n;

			if (rc <= 0)
				break;
			if (f.len > CAP || f.hdr_len > WS_HEADER_MAX || f.hdr_len > size - off)
				abort();
			if ((f.opcode & 8) && (f.len > WS_CONTROL_MAX || !f.fin))
				abort();
			n = ws_header_encode(hdr, f.opcode, f.fin, f.len, f.masked ? f.mask : NULL);
			if (n != f.hdr_len || memcmp(hdr + 1, data + off + 1, n - 1) != 0 ||
			    (hdr[0] & 0x8f) != data[off])
				abort();
			if (size - off - f.hdr_len < f.len)
				break;
			memcpy(copy, data + off + f.hdr_len, (size_t)f.len);
			ws_mask(copy, (size_t)f.len, f.mask, 0);
			off += f.hdr_len + (size_t)f.len;
		}
	}
	return 0;
}
