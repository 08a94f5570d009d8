/* network/sniff.c: the name a connection asks for, from its first client
 * bytes (network.h): the SNI of a TLS ClientHello or the Host of an
 * HTTP/1.x request. The bytes come from a guest: hostile, read only
 * within len and NET_SNIFF_MAX, never trusted for a length.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "network.h"

/* ------------------------------------------------------------------ TLS */

/* A bounds-checked reader. */
struct rd {
	const uint8_t *p;
	size_t n, at;
	bool bad;
};

static unsigned rd_u(struct rd *r, int bytes)
{
	unsigned v = 0;

	if (r->bad || r->n - r->at < (size_t)bytes) {
		r->bad = true;
		return 0;
	}
	for (int i = 0; i < bytes; i++)
		v = v << 8 | r->p[r->at++];
	return v;
}

static const uint8_t *rd_skip(struct rd *r, size_t k)
{
	const uint8_t *p = r->p + r->at;

	if (r->bad || r->n - r->at < k) {
		r->bad = true;
		return NULL;
	}
	r->at += k;
	return p;
}

/* The SNI of a whole ClientHello body (after the 4-byte handshake header).
 */
static enum net_sniff client_hello(const uint8_t *b, size_t n, char name[NET_NAME_MAX])
{
	struct rd r = {b, n, 0, false};
	size_t ext_end;

	rd_skip(&r, 2 + 32);	  /* version, random */
	rd_skip(&r, rd_u(&r, 1)); /* session id */
	rd_skip(&r, rd_u(&r, 2)); /* cipher suites */
	rd_skip(&r, rd_u(&r, 1)); /* compression methods */
	if (!r.bad && r.at == r.n)
		return NET_SNIFF_NO_NAME; /* no extensions at all */
	ext_end = rd_u(&r, 2);
	if (r.bad || ext_end > r.n - r.at)
		return NET_SNIFF_BAD;
	ext_end += r.at;
	while (r.at < ext_end) {
		unsigned type = rd_u(&r, 2), len = rd_u(&r, 2);
		struct rd e;
		const uint8_t *host;
		unsigned hlen;
		char raw[NET_NAME_MAX];

		/* r.at past ext_end (an extension's own header crossing
		 * the list's end) would wrap the subtraction below */
		if (r.bad || r.at > ext_end || len > ext_end - r.at)
			return NET_SNIFF_BAD;
		if (type != 0) {
			rd_skip(&r, len);
			continue;
		}
		/* server_name: a list of (type, name); one host_name only. */
		e = (struct rd){r.p + r.at, len, 0, false};
		if (rd_u(&e, 2) != len - 2 || rd_u(&e, 1) != 0)
			return NET_SNIFF_BAD;
		hlen = rd_u(&e, 2);
		host = rd_skip(&e, hlen);
		if (e.bad || e.at != e.n || hlen == 0 || hlen >= NET_NAME_MAX)
			return NET_SNIFF_BAD;
		memcpy(raw, host, hlen);
		raw[hlen] = '\0';
		if (memchr(host, '\0', hlen) || net_name_normalize(raw, name) < 0)
			return NET_SNIFF_BAD;
		return NET_SNIFF_NAME;
	}
	return r.bad ? NET_SNIFF_BAD : NET_SNIFF_NO_NAME;
}

/* TLS records of type handshake, their payloads joined until the whole
 * ClientHello is there. */
static enum net_sniff tls(const uint8_t *buf, size_t len, char name[NET_NAME_MAX])
{
	uint8_t hs[NET_SNIFF_MAX];
	size_t at = 0, got = 0, need = 0;

	while (at < len) {
		size_t rec;

		if (len - at < 5)
			return NET_SNIFF_MORE;
		if (buf[at] != 0x16 || buf[at + 1] != 0x03 || buf[at + 2] > 0x04)
			return at == 0 ? NET_SNIFF_OTHER : NET_SNIFF_BAD;
		rec = (size_t)buf[at + 3] << 8 | buf[at + 4];
		if (rec == 0 || rec > NET_SNIFF_MAX - got)
			return NET_SNIFF_BAD;
		if (len - at - 5 < rec) {
			rec = len - at - 5; /* a partial record: use what is here */
			memcpy(hs + got, buf + at + 5, rec);
			got += rec;
			at = len;
		} else {
			memcpy(hs + got, buf + at + 5, rec);
			got += rec;
			at += 5 + rec;
		}
		if (got >= 4 && need == 0) {
			if (hs[0] != 1)
				return NET_SNIFF_BAD; /* not a ClientHello */
			need = 4 + ((size_t)hs[1] << 16 | (size_t)hs[2] << 8 | hs[3]);
			if (need > NET_SNIFF_MAX)
				return NET_SNIFF_BAD;
		}
		if (need && got >= need)
			return client_hello(hs + 4, need - 4, name);
	}
	return NET_SNIFF_MORE;
}

/* ----------------------------------------------------------------- HTTP */

static const char *const methods[] = {"GET",	 "HEAD",  "POST",    "PUT",  "DELETE",
				      "OPTIONS", "PATCH", "CONNECT", "TRACE"};

/* 1: an HTTP/1.x method and a space open buf; 0: a prefix of one; -1: not
 * HTTP. An h2c preface ("PRI * HTTP/2.0") is -2. */
static int http_start(const char *b, size_t n)
{
	if (n >= 4 && memcmp(b, "PRI ", 4) == 0)
		return -2;
	if (n < 4 && memcmp(b, "PRI ", n) == 0)
		return 0;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(methods); i++) {
		size_t m = strlen(methods[i]);

		if (n > m && memcmp(b, methods[i], m) == 0 && b[m] == ' ')
			return 1;
		if (n <= m && memcmp(b, methods[i], n) == 0)
			return 0;
	}
	return -1;
}

/* The Host header's value (v, vn bytes) into name: port stripped, an
 * address literal kept as one. */
static enum net_sniff host_value(const char *v, size_t vn, char name[NET_NAME_MAX])
{
	char h[NET_NAME_MAX];
	const char *end = v + vn, *colon;
	struct net_range a;

	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	if (v < end && *v == '[') {
		const char *rb = memchr(v, ']', (size_t)(end - v));
		if (!rb || (size_t)(rb - v - 1) >= sizeof(h))
			return NET_SNIFF_BAD;
		memcpy(h, v + 1, (size_t)(rb - v - 1));
		h[rb - v - 1] = '\0';
		if (net_addr_parse(h, &a) < 0 || a.family != 6)
			return NET_SNIFF_BAD;
		net_addr_text(&a, name, NET_NAME_MAX);
		return NET_SNIFF_NAME;
	}
	colon = memchr(v, ':', (size_t)(end - v));
	if (colon)
		end = colon;
	if (end == v)
		return NET_SNIFF_NO_NAME;
	if ((size_t)(end - v) >= sizeof(h))
		return NET_SNIFF_BAD;
	memcpy(h, v, (size_t)(end - v));
	h[end - v] = '\0';
	if (net_addr_parse(h, &a) == 0) {
		net_addr_text(&a, name, NET_NAME_MAX);
		return NET_SNIFF_NAME;
	}
	return net_name_normalize(h, name) == 0 ? NET_SNIFF_NAME : NET_SNIFF_BAD;
}

static enum net_sniff http(const char *b, size_t n, char name[NET_NAME_MAX])
{
	const char *eoh = NULL, *line, *nl;
	enum net_sniff r = NET_SNIFF_NO_NAME;
	int hosts = 0;

	for (size_t i = 0; i + 3 < n; i++)
		if (memcmp(b + i, "\r\n\r\n", 4) == 0) {
			eoh = b + i + 2;
			break;
		}
	if (!eoh)
		return n >= NET_SNIFF_MAX ? NET_SNIFF_BAD : NET_SNIFF_MORE;
	if (memchr(b, '\0', (size_t)(eoh - b)))
		return NET_SNIFF_BAD;
	nl = memchr(b, '\n', (size_t)(eoh - b));
	if (!nl || nl - b < 10 || memcmp(nl - 10, " HTTP/1.", 8) != 0)
		return NET_SNIFF_BAD;
	for (line = nl + 1; line < eoh; line = nl + 1) {
		nl = memchr(line, '\n', (size_t)(eoh - line));
		if (!nl)
			break;
		if (nl - line >= 5 && strncasecmp(line, "host:", 5) == 0) {
			size_t vn = (size_t)(nl - line - 5);
			if (vn && line[5 + vn - 1] == '\r')
				vn--;
			if (++hosts > 1)
				return NET_SNIFF_BAD; /* two Hosts: which one would the server use?
						       */
			r = host_value(line + 5, vn, name);
			if (r == NET_SNIFF_BAD)
				return r;
		} else if (line < nl && (line[0] == ' ' || line[0] == '\t')) {
			return NET_SNIFF_BAD; /* obsolete line folding */
		}
	}
	return r;
}

/* ----------------------------------------------------------------- both */

enum net_sniff net_sniff(const uint8_t *buf, size_t len, char name[NET_NAME_MAX])
{
	const char *b = (const char *)buf;
	size_t skip = 0;
	int h;

	name[0] = '\0';
	if (len > NET_SNIFF_MAX)
		len = NET_SNIFF_MAX;
	if (len == 0)
		return NET_SNIFF_MORE;
	if (buf[0] == 0x16)
		return tls(buf, len, name);
	/* Servers skip empty lines before a request line (RFC 9112 2.2). */
	while (skip < len && skip < 64 && (b[skip] == '\r' || b[skip] == '\n'))
		skip++;
	if (skip == len)
		return skip >= 64 ? NET_SNIFF_BAD : NET_SNIFF_MORE;
	h = http_start(b + skip, len - skip);
	if (h == -2)
		return NET_SNIFF_BAD;
	if (h < 0)
		return skip ? NET_SNIFF_BAD : NET_SNIFF_OTHER;
	if (h == 0)
		return NET_SNIFF_MORE;
	return http(b + skip, len - skip, name);
}

int net_sniff_decide(const uint8_t *buf, size_t len, const char *requested)
{
	char name[NET_NAME_MAX];
	struct net_range a;

	switch (net_sniff(buf, len, name)) {
	case NET_SNIFF_MORE:
		return -1;
	case NET_SNIFF_OTHER:
		return NET_ALLOW;
	case NET_SNIFF_BAD:
		return NET_DENY_NAME_MISMATCH;
	case NET_SNIFF_NO_NAME:
		return net_addr_parse(requested, &a) == 0 ? NET_ALLOW : NET_DENY_NAME_MISSING;
	case NET_SNIFF_NAME:
		break;
	}
	if (net_addr_parse(requested, &a) == 0) {
		char lit[64];
		net_addr_text(&a, lit, sizeof(lit));
		return strcmp(lit, name) == 0 ? NET_ALLOW : NET_DENY_NAME_MISMATCH;
	}
	return strcmp(requested, name) == 0 ? NET_ALLOW : NET_DENY_NAME_MISMATCH;
}
