/* api/http_ports_chunked.c: the de-chunking of a guest's chunked answer
 * for the ports proxy (http_ports.c): a state machine over ap->raw, each
 * line and the trailers bounded (PORT_LINE_MAX, PORT_TRAILER_MAX). No
 * lock: only the request's own thread reads its answer.
 */
#include <ctype.h>
#include <string.h>

#include "http-priv.h"

ssize_t ports_dechunk(struct api_port *ap, char *buf, size_t max)
{
	size_t o = 0;

	while (ap->raw_off < ap->raw_len && o < max && ap->ch != CH_DONE) {
		char ch = ap->raw[ap->raw_off];

		switch (ap->ch) {
		case CH_SIZE:
			ap->raw_off++;
			if (ch == '\n') {
				if (ap->ch_digits == 0)
					return -1;
				ap->ch = ap->ch_left ? CH_DATA : CH_TRAILER;
				ap->line_len = ap->ch_digits = 0;
				ap->ch_ext = false;
				break;
			}
			if (++ap->line_len > PORT_LINE_MAX)
				return -1;
			if (!ap->ch_ext && isxdigit((unsigned char)ch)) {
				int d = isdigit((unsigned char)ch)
					    ? ch - '0'
					    : tolower((unsigned char)ch) - 'a' + 10;

				if (++ap->ch_digits > 15)
					return -1;
				ap->ch_left = ap->ch_left * 16 + (uint64_t)d;
			} else {
				ap->ch_ext = true; /* an extension, or the CR */
			}
			break;
		case CH_DATA: {
			size_t n = SBX_MIN(max - o, ap->raw_len - ap->raw_off);

			n = (size_t)SBX_MIN((uint64_t)n, ap->ch_left);
			memcpy(buf + o, ap->raw + ap->raw_off, n);
			o += n;
			ap->raw_off += n;
			ap->ch_left -= n;
			if (ap->ch_left == 0)
				ap->ch = CH_DATA_END;
			break;
		}
		case CH_DATA_END:
			ap->raw_off++;
			if (ch == '\n') {
				ap->ch = CH_SIZE;
				ap->line_len = 0;
			} else if (ch != '\r') {
				return -1;
			}
			break;
		case CH_TRAILER:
			ap->raw_off++;
			if (ch == '\n') {
				if (ap->line_len == 0)
					ap->ch = CH_DONE;
				ap->line_len = 0;
			} else if (ch != '\r' && ++ap->line_len > PORT_LINE_MAX) {
				return -1;
			}
			/* bounded in all: trailers give no byte to hand on, so
			 * endless ones would keep this loop reading */
			if (++ap->trailer_bytes > PORT_TRAILER_MAX)
				return -1;
			break;
		case CH_DONE:
			break;
		}
	}
	return (ssize_t)o;
}
