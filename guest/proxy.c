/* sandboxd-init: the egress proxy (protocol v7, docs/network.md).
 *
 * Guests have no network interface. Programs reach the network through
 * this proxy on 127.0.0.1:3128 (every exec's environment names it in
 * http_proxy and https_proxy): a CONNECT host:port, or a request for an
 * absolute http:// URL, becomes a stream of the guest's own on the exec
 * channel (tcp.c, guest_tcp_egress), and the daemon decides whether and
 * where it goes.
 *
 * The client is a program in the guest (a tenant's, so not trusted to be
 * well-formed): a request head is read up to PROXY_HEAD_MAX bytes within
 * PROXY_HEAD_MS, at most PROXY_PENDING_MAX clients at once wait in that
 * state (more stay in the listen queue). Anything but CONNECT or an
 * http:// URL gets a 400. An http:// request is rewritten to the origin
 * form ("GET /path HTTP/1.1"), its proxy and hop-by-hop headers dropped
 * and "Connection: close" added: one request per connection, so the
 * daemon sees (and checks) the Host of every request it relays.
 */
#include "guest/init.h"
#include "agentless/wire.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define PROXY_PENDING_MAX 16
#define PROXY_HEAD_MAX	  8192
#define PROXY_HEAD_MS	  10000
/* the rewritten head: the original, the path shortened, two lines more */
#define PROXY_OUT_MAX (PROXY_HEAD_MAX + 512)

static int lfd = -1;

static struct pending {
	int fd; /* -1: free */
	size_t len;
	int64_t deadline_ms;
	uint8_t buf[PROXY_HEAD_MAX];
} Q[PROXY_PENDING_MAX];

void guest_proxy_init(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons(GUEST_PROXY_PORT),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int one = 1;

	for (int i = 0; i < PROXY_PENDING_MAX; i++)
		Q[i].fd = -1;
	if (getpid() != 1)
		return; /* only a guest's init: never a port of the machine it runs on */
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		return;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 64) < 0) {
		guest_log("egress proxy on 127.0.0.1:%d: %s", GUEST_PROXY_PORT, strerror(errno));
		close(lfd);
		lfd = -1;
	}
}

unsigned guest_proxy_pollfds(struct pollfd *pfd, unsigned *slot, unsigned max, int64_t *next)
{
	unsigned n = 0;
	bool room = false;

	for (unsigned i = 0; i < PROXY_PENDING_MAX && n < max; i++) {
		if (Q[i].fd < 0) {
			room = true;
			continue;
		}
		pfd[n] = (struct pollfd){.fd = Q[i].fd, .events = POLLIN};
		slot[n++] = i;
		if (*next < 0 || Q[i].deadline_ms < *next)
			*next = Q[i].deadline_ms;
	}
	if (lfd >= 0 && room && n < max) {
		pfd[n] = (struct pollfd){.fd = lfd, .events = POLLIN};
		slot[n++] = PROXY_PENDING_MAX;
	}
	return n;
}

static void pending_drop(struct pending *q, int code, const char *reason, const char *msg)
{
	guest_proxy_answer(q->fd, code, reason, msg);
	q->fd = -1;
	q->len = 0;
}

void guest_proxy_tick(int64_t now_ms)
{
	for (unsigned i = 0; i < PROXY_PENDING_MAX; i++)
		if (Q[i].fd >= 0 && now_ms >= Q[i].deadline_ms)
			pending_drop(&Q[i], 408, "Request Timeout", "no request head in time");
}

static void proxy_accept(void)
{
	for (unsigned i = 0; i < PROXY_PENDING_MAX; i++) {
		if (Q[i].fd >= 0)
			continue;
		Q[i].fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		Q[i].len = 0;
		Q[i].deadline_ms = guest_mono_ms() + PROXY_HEAD_MS;
		return;
	}
}

/* host[:port] (or [v6]:port) into host and *port (def when absent). 0, or
 * -1 when malformed. */
static int authority_parse(const char *a, size_t len, char host[WIRE_TCP_HOST_MAX + 1],
			   uint16_t *port, uint16_t def)
{
	const char *colon = NULL, *h = a;
	size_t hl = len;
	unsigned long p = def;

	if (len > 0 && a[0] == '[') {
		const char *rb = memchr(a, ']', len);

		if (!rb)
			return -1;
		h = a + 1;
		hl = (size_t)(rb - a - 1);
		if ((size_t)(rb - a + 1) < len) {
			if (rb[1] != ':')
				return -1;
			colon = rb + 1;
		}
	} else {
		colon = memchr(a, ':', len);
		if (colon)
			hl = (size_t)(colon - a);
	}
	if (colon) {
		char num[8];
		size_t nl = len - (size_t)(colon + 1 - a);
		char *end;

		if (nl == 0 || nl >= sizeof num)
			return -1;
		memcpy(num, colon + 1, nl);
		num[nl] = '\0';
		p = strtoul(num, &end, 10);
		if (*end || p < 1 || p > 65535)
			return -1;
	}
	if (hl == 0 || hl > WIRE_TCP_HOST_MAX)
		return -1;
	for (size_t i = 0; i < hl; i++) {
		char c = h[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '-' || c == '_' || c == ':'))
			return -1;
	}
	memcpy(host, h, hl);
	host[hl] = '\0';
	*port = (uint16_t)p;
	return 0;
}

static bool header_is(const char *line, size_t len, const char *name)
{
	size_t n = strlen(name);

	return len > n && line[n] == ':' && strncasecmp(line, name, n) == 0;
}

/* An absolute http:// request's head (request line: method, URL without
 * "http://" at url/ulen, version) rewritten into out; its length, or -1. */
static int rewrite_head(const char *head, size_t head_len, const char *method, size_t mlen,
			const char *url, size_t ulen, const char *ver, size_t vlen, char *out)
{
	const char *path = memchr(url, '/', ulen);
	size_t alen = path ? (size_t)(path - url) : ulen, plen = path ? ulen - alen : 1;
	const char *line = memchr(head, '\n', head_len);
	bool host_seen = false;
	size_t o = 0;

	if (!path) {
		const char *q = memchr(url, '?', ulen);

		alen = q ? (size_t)(q - url) : ulen;
	}
	if (mlen + plen + vlen + 4 > PROXY_OUT_MAX)
		return -1;
	memcpy(out + o, method, mlen), o += mlen, out[o++] = ' ';
	if (!path)
		out[o++] = '/';
	memcpy(out + o, path ? path : url + alen, path ? plen : ulen - alen);
	o += path ? plen : ulen - alen;
	out[o++] = ' ';
	memcpy(out + o, ver, vlen), o += vlen;
	out[o++] = '\r', out[o++] = '\n';
	for (const char *l = line + 1; l < head + head_len;) {
		const char *nl = memchr(l, '\n', (size_t)(head + head_len - l));
		size_t len = (size_t)(nl - l), keep = len && l[len - 1] == '\r' ? len - 1 : len;

		if (keep == 0)
			break;
		if (header_is(l, keep, "Host"))
			host_seen = true;
		if (!header_is(l, keep, "Proxy-Connection") &&
		    !header_is(l, keep, "Proxy-Authorization") &&
		    !header_is(l, keep, "Connection") && !header_is(l, keep, "Keep-Alive")) {
			if (o + keep + 2 > PROXY_OUT_MAX - 64 - alen)
				return -1;
			memcpy(out + o, l, keep), o += keep;
			out[o++] = '\r', out[o++] = '\n';
		}
		l = nl + 1;
	}
	if (!host_seen) {
		o += (size_t)snprintf(out + o, PROXY_OUT_MAX - o, "Host: %.*s\r\n", (int)alen, url);
	}
	o += (size_t)snprintf(out + o, PROXY_OUT_MAX - o, "Connection: close\r\n\r\n");
	return (int)o;
}

/* A whole head at q->buf[0..head_len) (its blank line included): hand the
 * client to a stream, or answer it. */
static void proxy_request(struct pending *q, size_t head_len, uint32_t host_version)
{
	static char out[PROXY_OUT_MAX + PROXY_HEAD_MAX];
	const char *h = (const char *)q->buf, *sp1, *sp2, *eol;
	char host[WIRE_TCP_HOST_MAX + 1];
	uint16_t port;
	int n;

	eol = memchr(h, '\r', head_len);
	sp1 = memchr(h, ' ', head_len);
	sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(h + head_len - sp1 - 1)) : NULL;
	if (!eol || !sp1 || !sp2 || sp2 > eol || (size_t)(eol - sp2 - 1) != 8 ||
	    strncmp(sp2 + 1, "HTTP/1.", 7) != 0) {
		pending_drop(q, 400, "Bad Request", "not an HTTP/1.x proxy request");
		return;
	}
	if (host_version < 7) {
		pending_drop(q, 502, "Bad Gateway",
			     host_version ? "this daemon relays no connections (it is too old)"
					  : "the daemon is not connected");
		return;
	}
	if ((size_t)(sp1 - h) == 7 && strncmp(h, "CONNECT", 7) == 0) {
		if (authority_parse(sp1 + 1, (size_t)(sp2 - sp1 - 1), host, &port, 0) < 0 ||
		    port == 0) {
			pending_drop(q, 400, "Bad Request", "CONNECT needs host:port");
			return;
		}
		if (guest_tcp_egress(q->fd, host, port, true, q->buf + head_len,
				     q->len - head_len) < 0)
			pending_drop(q, 503, "Service Unavailable", "too many connections at once");
		else
			q->fd = -1;
		return;
	}
	if ((size_t)(sp2 - sp1 - 1) < 8 || strncasecmp(sp1 + 1, "http://", 7) != 0) {
		pending_drop(q, 400, "Bad Request",
			     "only CONNECT and http:// URLs (set https_proxy for https)");
		return;
	}
	{
		const char *url = sp1 + 8;
		size_t ulen = (size_t)(sp2 - url), alen = strcspn(url, "/?");

		if (alen > ulen)
			alen = ulen;
		if (authority_parse(url, alen, host, &port, 80) < 0 ||
		    (n = rewrite_head(h, head_len, h, (size_t)(sp1 - h), url, ulen, sp2 + 1, 8,
				      out)) < 0) {
			pending_drop(q, 400, "Bad Request", "a malformed request");
			return;
		}
	}
	memcpy(out + n, q->buf + head_len, q->len - head_len);
	if (guest_tcp_egress(q->fd, host, port, false, (const uint8_t *)out,
			     (size_t)n + q->len - head_len) < 0)
		pending_drop(q, 503, "Service Unavailable", "too many connections at once");
	else
		q->fd = -1;
}

void guest_proxy_ready(unsigned slot, uint32_t host_version)
{
	struct pending *q;
	ssize_t n;

	if (slot == PROXY_PENDING_MAX) {
		proxy_accept();
		return;
	}
	if (slot > PROXY_PENDING_MAX || Q[slot].fd < 0)
		return;
	q = &Q[slot];
	n = read(q->fd, q->buf + q->len, sizeof q->buf - q->len);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		close(q->fd);
		q->fd = -1;
		q->len = 0;
		return;
	}
	q->len += (size_t)n;
	for (size_t i = 3; i < q->len; i++)
		if (memcmp(q->buf + i - 3, "\r\n\r\n", 4) == 0) {
			proxy_request(q, i + 1, host_version);
			return;
		}
	if (q->len == sizeof q->buf)
		pending_drop(q, 431, "Request Header Fields Too Large",
			     "the request head is too long");
}
