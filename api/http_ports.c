/* api/http_ports.c: /v1/sandboxes/{id}/ports/{port}/{path}, an HTTP/1.1
 * proxy to a server on the sandbox's loopback (docs/api.md "Ports").
 *
 * One request, one TCP stream (sandbox_port_*, protocol v6 over the exec
 * channel): the request line (the method, the path after the port, the
 * query), the client's headers minus the hop-by-hop ones, Authorization
 * and Cookie, plus Host, Connection: close and X-Forwarded-*, then the
 * body as it arrives (re-chunked when the client sent it chunked). The
 * guest's answer is read into a buffer of port_header_max_bytes until its
 * headers end (larger: 502); its status and end-to-end headers (never
 * Set-Cookie) go to the client, and its body streams through MHD's
 * content reader as the client reads: the stream's credit window is only
 * granted for what was read, so a client that never reads holds one
 * window of one connection, and a guest that floods is held by its
 * credit. Nobody listening: 502 port_unreachable; no answer within
 * port_response_timeout_ms: 504 port_timeout.
 *
 * A GET asking for an upgrade (WebSocket) goes on as one, and a 101 from
 * the guest hands the connection to http_ports_ws.c's relay.
 *
 * A preview's host name (http_previews.c) enters the same proxy through
 * api_ports_begin with `preview`: the path as it came, the guest's own
 * origin (its Set-Cookie and the client's Cookie pass), no CSP sandbox.
 *
 * Parking is http_files.c's: the connection is suspended while the stream
 * cannot move, and the stream's wake resumes it. Locking: ctx->lock is a
 * leaf, never held across a sandbox/ call.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "http-priv.h"

#define MOD "api"

/* ------------------------------------------------------------- parking */

static void parked_unlink_locked(struct api_ports_ctx *ctx, struct api_port *ap)
{
	if (ap->prev)
		ap->prev->next = ap->next;
	else if (ctx->parked == ap)
		ctx->parked = ap->next;
	if (ap->next)
		ap->next->prev = ap->prev;
	ap->prev = ap->next = NULL;
	ap->parked = false;
}

static void ports_wake(void *opaque)
{
	struct api_port *ap = opaque;
	struct api_ports_ctx *ctx = ap->ctx;

	pthread_mutex_lock(&ctx->lock);
	ap->woke = true;
	if (ap->efd >= 0) { /* an upgraded connection's relay */
		uint64_t one = 1;

		if (write(ap->efd, &one, sizeof one) < 0) {
			/* the counter is full: it is awake already */
		}
	}
	if (ap->parked) {
		parked_unlink_locked(ctx, ap);
		MHD_resume_connection(ap->conn);
	}
	pthread_mutex_unlock(&ctx->lock);
}

/* As http_files.c's park(): true when suspended until the next wake. */
static bool park(struct api_port *ap)
{
	struct api_ports_ctx *ctx = ap->ctx;

	pthread_mutex_lock(&ctx->lock);
	if (ap->woke || ctx->stopping) {
		ap->woke = false;
		pthread_mutex_unlock(&ctx->lock);
		return false;
	}
	MHD_suspend_connection(ap->conn);
	ap->parked = true;
	ap->next = ctx->parked;
	if (ap->next)
		ap->next->prev = ap;
	ctx->parked = ap;
	pthread_mutex_unlock(&ctx->lock);
	return true;
}

static bool stopping(struct api_port *ap)
{
	bool s;

	pthread_mutex_lock(&ap->ctx->lock);
	s = ap->ctx->stopping;
	pthread_mutex_unlock(&ap->ctx->lock);
	return s;
}

/* ---------------------------------------------------------------- limits */

/* Count ap against its sandbox's and account's limits. 0, or -1 with 429. */
static int live_add(struct api_port *ap, struct sbx_error *err)
{
	struct api_ports_ctx *ctx = ap->ctx;
	int per_sb = 0, per_acct = 0;

	pthread_mutex_lock(&ctx->lock);
	for (struct api_port *o = ctx->live; o; o = o->lnext) {
		if (strcmp(o->account_id, ap->account_id) != 0)
			continue;
		per_acct++;
		per_sb += strcmp(o->sandbox_id, ap->sandbox_id) == 0;
	}
	if (ctx->stopping || ctx->n_live >= PORT_HOST_MAX ||
	    per_sb >= ctx->cfg->max_port_conns_per_sandbox ||
	    per_acct >= ctx->cfg->max_port_conns_per_account) {
		bool sb = per_sb >= ctx->cfg->max_port_conns_per_sandbox;

		pthread_mutex_unlock(&ctx->lock);
		sbx_error_set(err, SBX_E_CONCURRENCY_LIMIT, NULL,
			      "%s has %d connections to its ports open (the limit, GET "
			      "/v1/limits); retry when one has finished",
			      sb ? "this sandbox" : "this account", sb ? per_sb : per_acct);
		err->retry_after_s = 1;
		return -1;
	}
	ap->lnext = ctx->live;
	if (ctx->live)
		ctx->live->lprev = ap;
	ctx->live = ap;
	ctx->n_live++;
	ap->counted = true;
	pthread_mutex_unlock(&ctx->lock);
	return 0;
}

static void live_remove(struct api_port *ap)
{
	struct api_ports_ctx *ctx = ap->ctx;

	pthread_mutex_lock(&ctx->lock);
	if (ap->counted) {
		if (ap->lprev)
			ap->lprev->lnext = ap->lnext;
		else
			ctx->live = ap->lnext;
		if (ap->lnext)
			ap->lnext->lprev = ap->lprev;
		ctx->n_live--;
		ap->counted = false;
	}
	pthread_mutex_unlock(&ctx->lock);
}

/* ---------------------------------------------------------- the request */

/* Append to the bytes waiting for the stream; false past PORT_OUT_MAX. */
static bool out_add(struct api_port *ap, const void *data, size_t len)
{
	if (ap->out_len + len > PORT_OUT_MAX)
		return false;
	memcpy(ap->out + ap->out_len, data, len);
	ap->out_len += len;
	return true;
}

static bool out_str(struct api_port *ap, const char *s)
{
	return out_add(ap, s, strlen(s));
}

/* The bytes a request target keeps as they are; the rest is %XX. */
static bool url_keep(unsigned char ch, bool path)
{
	return isalnum(ch) || strchr("-._~!$&'()*+,;=:@", ch) || (path && ch == '/');
}

static bool out_encoded(struct api_port *ap, const char *s, bool path)
{
	char e[4];

	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (url_keep(ch, path) && (path || (ch != '&' && ch != '=' && ch != '+'))) {
			if (!out_add(ap, s, 1))
				return false;
			continue;
		}
		snprintf(e, sizeof e, "%%%02X", ch);
		if (!out_add(ap, e, 3))
			return false;
	}
	return true;
}

struct args_ctx {
	struct api_port *ap;
	bool first, ok;
};

static enum MHD_Result arg_add(void *cls, enum MHD_ValueKind kind, const char *key,
			       const char *value)
{
	struct args_ctx *a = cls;

	(void)kind;
	a->ok = a->ok && out_str(a->ap, a->first ? "?" : "&") && out_encoded(a->ap, key, false);
	if (value)
		a->ok = a->ok && out_str(a->ap, "=") && out_encoded(a->ap, value, false);
	a->first = false;
	return MHD_YES;
}

/* Headers the proxy never passes on (hop-by-hop, credentials, what it
 * sets itself). On a preview's host the client's Cookie is the guest's
 * own origin's, and passes; an Authorization passes unless it carries an
 * API key. */
static bool header_dropped(const struct api_port *ap, const char *name, const char *value)
{
	if (ap->preview && strcasecmp(name, "Cookie") == 0)
		return false;
	if (ap->preview && strcasecmp(name, "Authorization") == 0)
		return strcasestr(value, "aas_sk_") != NULL;
	static const char *const drop[] = {"Host",
					   "Connection",
					   "Keep-Alive",
					   "Proxy-Connection",
					   "Proxy-Authorization",
					   "TE",
					   "Trailer",
					   "Transfer-Encoding",
					   "Upgrade",
					   "Authorization",
					   "Cookie",
					   "Expect",
					   "Content-Length",
					   "Forwarded",
					   "X-Forwarded-For",
					   "X-Forwarded-Host",
					   "X-Forwarded-Proto",
					   "X-Forwarded-Prefix",
					   "X-Request-Id"};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(drop); i++)
		if (strcasecmp(name, drop[i]) == 0)
			return true;
	return false;
}

static bool header_value_ok(const char *v)
{
	for (; *v; v++)
		if ((unsigned char)*v < 0x20 && *v != '\t')
			return false;
	return true;
}

static enum MHD_Result header_add(void *cls, enum MHD_ValueKind kind, const char *key,
				  const char *value)
{
	struct args_ctx *a = cls;

	(void)kind;
	if (!value || header_dropped(a->ap, key, value) || !header_value_ok(key) ||
	    !header_value_ok(value))
		return MHD_YES;
	a->ok = a->ok && out_str(a->ap, key) && out_str(a->ap, ": ") && out_str(a->ap, value) &&
		out_str(a->ap, "\r\n");
	return MHD_YES;
}

/* X-Forwarded-For: the client's address as the daemon saw it. */
static bool forwarded_for(struct api_port *ap)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(ap->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	char addr[INET6_ADDRSTRLEN] = "", line[96];
	const struct sockaddr *sa = ci ? ci->client_addr : NULL;

	if (sa && sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, addr,
			  sizeof addr);
	else if (sa && sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr,
			  addr, sizeof addr);
	if (!addr[0])
		return true;
	snprintf(line, sizeof line, "X-Forwarded-For: %s\r\n", addr);
	return out_str(ap, line);
}

/* The request line and headers into ap->out. */
static int head_build(struct api_port *ap, const char *method, const char *tail, uint32_t port,
		      struct sbx_error *err)
{
	struct MHD_Connection *c = ap->conn;
	struct args_ctx a = {.ap = ap, .first = true, .ok = true};
	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
	const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
	const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
	char line[256];

	a.ok = out_str(ap, method) && out_str(ap, " /") && out_encoded(ap, tail, true);
	MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, arg_add, &a);
	if (ap->upgrade)
		snprintf(
		    line, sizeof line,
		    " HTTP/1.1\r\nHost: localhost:%u\r\nConnection: Upgrade\r\nUpgrade: %s\r\n",
		    port, ap->upgrade_proto);
	else
		snprintf(line, sizeof line,
			 " HTTP/1.1\r\nHost: localhost:%u\r\nConnection: close\r\n", port);
	a.ok = a.ok && out_str(ap, line);
	MHD_get_connection_values(c, MHD_HEADER_KIND, header_add, &a);
	if (host && header_value_ok(host) && strlen(host) < 200) {
		snprintf(line, sizeof line, "X-Forwarded-Host: %s\r\n", host);
		a.ok = a.ok && out_str(ap, line);
	}
	if (ap->preview) /* the path is the guest's own: no prefix */
		snprintf(line, sizeof line, "X-Forwarded-Proto: http\r\n");
	else
		snprintf(line, sizeof line,
			 "X-Forwarded-Proto: http\r\nX-Forwarded-Prefix: "
			 "/v1/sandboxes/%s/ports/%u\r\n",
			 ap->sandbox_id, port);
	a.ok = a.ok && out_str(ap, line);
	a.ok = a.ok && forwarded_for(ap);
	/* Transfer-Encoding wins over a Content-Length beside it, as
	 * libmicrohttpd reads the body: the guest is told the framing of the
	 * bytes it gets (a length that disagreed would let a body smuggle a
	 * second request past these rules) */
	if (te) {
		ap->chunked_in = true;
		a.ok = a.ok && out_str(ap, "Transfer-Encoding: chunked\r\n");
	} else if (cl && header_value_ok(cl)) {
		a.ok = a.ok && out_str(ap, "Content-Length: ") && out_str(ap, cl) &&
		       out_str(ap, "\r\n");
	}
	a.ok = a.ok && out_str(ap, "\r\n");
	if (!a.ok)
		return sbx_error_set(
		    err, SBX_E_PAYLOAD_TOO_LARGE, NULL,
		    "the request's path, query and headers are larger than %u bytes", PORT_OUT_MAX);
	return 0;
}

/* Move waiting bytes to the stream. 1 all sent, 0 waiting for credit, -1
 * the stream failed (ap->err). */
static int out_flush(struct api_port *ap)
{
	while (ap->out_off < ap->out_len) {
		long n =
		    sandbox_port_write(ap->p, ap->out + ap->out_off, ap->out_len - ap->out_off);

		if (n < 0) {
			struct sandbox_port_status st;

			sandbox_port_status(ap->p, &st);
			if (st.state == SANDBOX_PORT_FAILED)
				ap->err = st.err;
			else
				sbx_error_set(&ap->err, SBX_E_PORT_UNREACHABLE, NULL,
					      "the server in the sandbox closed the connection "
					      "before it read the request");
			return -1;
		}
		if (n == 0)
			return 0;
		ap->out_off += (size_t)n;
	}
	ap->out_off = ap->out_len = 0;
	return 1;
}

/* ---------------------------------------------------------- the answer */

/* A guest's header the client does not get. On a preview's host (the
 * guest's own origin) its Set-Cookie passes, unless it names a Domain: a
 * cookie of one preview's host only, never one every preview shares. */
static bool reply_header_dropped(const struct api_port *ap, const char *name, size_t n,
				 const char *value)
{
	if (ap->preview && n == 10 && strncasecmp(name, "Set-Cookie", 10) == 0)
		return strcasestr(value, "domain=") != NULL;
	static const char *const drop[] = {"Connection",
					   "Keep-Alive",
					   "Proxy-Connection",
					   "Transfer-Encoding",
					   "TE",
					   "Trailer",
					   "Upgrade",
					   "Content-Length",
					   "Set-Cookie",
					   "Set-Cookie2",
					   "Date",
					   "Proxy-Authenticate",
					   "X-Request-Id"};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(drop); i++)
		if (strlen(drop[i]) == n && strncasecmp(name, drop[i], n) == 0)
			return true;
	return false;
}

static bool token_ok(const char *s, size_t n)
{
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("!#$%&'*+-.^_`|~", s[i]))
			return false;
	return true;
}

/* Parse the guest's status line and headers (hdr[0..hdr_end), NUL
 * terminated at hdr_end - 1). The status, or 0
 * when malformed; sets the body's framing. */
static unsigned head_parse(struct api_port *ap)
{
	char *p = ap->hdr, *eol;
	unsigned status;

	/* "HTTP/1.x NNN" and its line end, within the head's bytes */
	if (ap->hdr_end < 13 || strncmp(p, "HTTP/1.", 7) != 0 || p[8] != ' ' ||
	    !isdigit((unsigned char)p[9]))
		return 0;
	status = (unsigned)strtoul(p + 9, NULL, 10);
	if (status < 200 || status > 599)
		return 0;
	ap->has_length = false;
	ap->chunked_out = false;
	/* first pass: the framing */
	for (p = strchr(p, '\n'); p && *++p; p = eol) {
		char *colon;
		size_t nlen;

		eol = strchr(p, '\n');
		if (!eol)
			break;
		colon = memchr(p, ':', (size_t)(eol - p));
		if (!colon)
			continue;
		nlen = (size_t)(colon - p);
		if (nlen == 14 && strncasecmp(p, "Content-Length", 14) == 0) {
			char *end;
			unsigned long long v;

			char *d = colon + 1;

			while (*d == ' ' || *d == '\t')
				d++;
			errno = 0;
			v = strtoull(d, &end, 10);
			if (errno || !isdigit((unsigned char)*d))
				return 0;
			ap->has_length = true;
			ap->remaining = v;
		} else if (nlen == 17 && strncasecmp(p, "Transfer-Encoding", 17) == 0) {
			ap->chunked_out = strcasestr(colon + 1, "chunked") != NULL;
		}
	}
	if (ap->chunked_out)
		ap->has_length = false;
	if (status == 204 || status == 304) {
		ap->has_length = true;
		ap->remaining = 0;
		ap->chunked_out = false;
	}
	return status;
}

void ports_head_copy(struct api_port *ap, struct MHD_Response *resp)
{
	char *p = strchr(ap->hdr, '\n'), *eol;

	for (; p && *++p; p = eol) {
		char *colon, *v, *vend;
		size_t nlen;

		eol = strchr(p, '\n');
		if (!eol)
			break;
		colon = memchr(p, ':', (size_t)(eol - p));
		if (!colon)
			continue;
		nlen = (size_t)(colon - p);
		if (!token_ok(p, nlen))
			continue;
		v = colon + 1;
		while (*v == ' ' || *v == '\t')
			v++;
		vend = eol;
		while (vend > v && (vend[-1] == '\r' || vend[-1] == ' ' || vend[-1] == '\t'))
			vend--;
		{
			char save_n = p[nlen], save_v = *vend;

			p[nlen] = '\0';
			*vend = '\0';
			if (header_value_ok(v) && !reply_header_dropped(ap, p, nlen, v))
				MHD_add_response_header(resp, p, v);
			p[nlen] = save_n;
			*vend = save_v;
		}
	}
}

size_t ports_raw_take(struct api_port *ap, char *dst, size_t max)
{
	if (ap->hdr_end + ap->pre_off < ap->hdr_len) {
		size_t n = SBX_MIN(max, ap->hdr_len - ap->hdr_end - ap->pre_off);

		memcpy(dst, ap->hdr + ap->hdr_end + ap->pre_off, n);
		ap->pre_off += n;
		return n;
	}
	return sandbox_port_read(ap->p, dst, max);
}

/* One look at the body: bytes into buf (> 0), 0 nothing now, or an MHD
 * end marker. */
static ssize_t body_once(struct api_port *ap, char *buf, size_t max)
{
	if (!ap->chunked_out) {
		size_t want = ap->has_length ? (size_t)SBX_MIN((uint64_t)max, ap->remaining) : max;
		size_t n;

		if (ap->has_length && ap->remaining == 0)
			return MHD_CONTENT_READER_END_OF_STREAM;
		n = ports_raw_take(ap, buf, want);
		ap->remaining -= ap->has_length ? n : 0;
		return (ssize_t)n;
	}
	for (;;) {
		ssize_t n;

		if (ap->ch == CH_DONE)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (ap->raw_off == ap->raw_len) {
			ap->raw_off = 0;
			ap->raw_len = ports_raw_take(ap, ap->raw, sizeof ap->raw);
			if (ap->raw_len == 0)
				return 0;
		}
		n = ports_dechunk(ap, buf, max);
		if (n < 0) {
			sbx_warn(MOD, "a port's chunked answer was malformed; cut short");
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		if (n > 0)
			return n;
	}
}

/* The answer's body, pulled by MHD as the client reads. */
static ssize_t body_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct api_port *ap = cls;
	struct sandbox_port_status st;
	ssize_t n;

	(void)pos;
	for (;;) {
		n = body_once(ap, buf, max);
		if (n != 0)
			return n;
		sandbox_port_status(ap->p, &st);
		if (st.buffered > 0)
			continue;
		if (st.eof || st.state == SANDBOX_PORT_CLOSED) {
			if (ap->has_length || ap->chunked_out) {
				sbx_warn(MOD, "a port's answer ended before its body did");
				return MHD_CONTENT_READER_END_WITH_ERROR;
			}
			return MHD_CONTENT_READER_END_OF_STREAM;
		}
		if (st.state == SANDBOX_PORT_FAILED || stopping(ap)) {
			sbx_warn(MOD, "a port's answer cut short: %s",
				 st.state == SANDBOX_PORT_FAILED ? st.err.message
								 : "shutting down");
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		if (park(ap))
			return 0;
	}
}

static enum MHD_Result answer(struct api_port *ap)
{
	struct MHD_Response *resp = NULL;
	struct sbx_error e;
	enum MHD_Result ret;
	unsigned status;

	sbx_error_clear(&e);
	if (ap->upgrade && ap->hdr_end >= 13 && strncmp(ap->hdr, "HTTP/1.", 7) == 0 &&
	    strncmp(ap->hdr + 8, " 101", 4) == 0)
		return ports_answer_upgrade(ap);
	status = head_parse(ap);
	if (!status) {
		sbx_error_set(&e, SBX_E_PORT_UNREACHABLE, NULL,
			      "the server in the sandbox did not answer with HTTP/1.x");
		return api_reply_error(ap->conn, &e);
	}
	ap->answered = true;
	resp = MHD_create_response_from_callback(ap->has_length ? ap->remaining : MHD_SIZE_UNKNOWN,
						 64 * 1024, body_read, ap, NULL);
	if (!resp)
		return MHD_NO;
	ports_head_copy(ap, resp);
	/* the guest's pages are not the API's origin: a unique origin for
	 * their scripts (docs/api.md "Ports"). A preview's host is their own
	 * origin: no sandbox there (docs/api.md "Previews"). */
	if (!ap->preview)
		MHD_add_response_header(resp, "Content-Security-Policy",
					"sandbox allow-scripts allow-forms allow-popups "
					"allow-modals allow-downloads");
	api_reqctx_header(resp);
	ret = api_queue_response(ap->conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* Where the head ends in hdr (past its blank line), or 0. */
static size_t head_end(const char *h, size_t len)
{
	for (size_t i = 0; i + 1 < len; i++) {
		if (h[i] != '\n')
			continue;
		if (h[i + 1] == '\n')
			return i + 2;
		if (h[i + 1] == '\r' && i + 2 < len && h[i + 2] == '\n')
			return i + 3;
	}
	return 0;
}

/* Read the guest's head; answer once it is whole (or the stream failed). */
static enum MHD_Result await_answer(struct api_port *ap)
{
	uint32_t cap = ap->ctx->cfg->port_header_max_bytes;
	struct sandbox_port_status st;
	struct sbx_error e;

	sbx_error_clear(&e);
	for (;;) {
		size_t n = sandbox_port_read(ap->p, ap->hdr + ap->hdr_len, cap - ap->hdr_len);
		size_t end;

		ap->hdr_len += n;
		end = head_end(ap->hdr, ap->hdr_len);
		if (end) {
			/* a 1xx interim answer: skip it, a few at most (a guest
			 * streaming them would hold this thread in the loop) */
			if (end >= 13 && strncmp(ap->hdr, "HTTP/1.", 7) == 0 && ap->hdr[9] == '1' &&
			    strncmp(ap->hdr + 9, "101", 3) != 0) {
				if (++ap->interims > PORT_INTERIM_MAX) {
					sbx_error_set(&e, SBX_E_PORT_UNREACHABLE, NULL,
						      "the server in the sandbox sent more than %d "
						      "interim (1xx) answers",
						      PORT_INTERIM_MAX);
					return api_reply_error(ap->conn, &e);
				}
				memmove(ap->hdr, ap->hdr + end, ap->hdr_len - end);
				ap->hdr_len -= end;
				continue;
			}
			ap->hdr_end = end;
			ap->hdr[end - 1] = '\0'; /* the last '\n': head_parse reads a string */
			return answer(ap);
		}
		if (ap->hdr_len >= cap) {
			sbx_error_set(&e, SBX_E_PORT_UNREACHABLE, NULL,
				      "the answer's status line and headers are larger than "
				      "port_header_max_bytes (%u)",
				      cap);
			return api_reply_error(ap->conn, &e);
		}
		if (n > 0)
			continue;
		sandbox_port_status(ap->p, &st);
		if (st.buffered > 0)
			continue;
		if (st.state == SANDBOX_PORT_FAILED)
			return api_reply_error(ap->conn, &st.err);
		if (st.eof || st.state == SANDBOX_PORT_CLOSED) {
			sbx_error_set(&e, SBX_E_PORT_UNREACHABLE, NULL,
				      "the server in the sandbox closed the connection without an "
				      "answer");
			return api_reply_error(ap->conn, &e);
		}
		if (stopping(ap)) {
			sbx_error_set(
			    &e, SBX_E_SERVICE_UNAVAILABLE, NULL,
			    "the service is shutting down; retry on the restarted service");
			e.retry_after_s = 5;
			return api_reply_error(ap->conn, &e);
		}
		if (park(ap))
			return MHD_YES;
	}
}

/* ------------------------------------------------------------ the steps */

static void ap_free(struct api_port *ap);

void ports_unref(struct api_port *ap)
{
	bool last;

	pthread_mutex_lock(&ap->ctx->lock);
	last = --ap->refs == 0;
	pthread_mutex_unlock(&ap->ctx->lock);
	if (last)
		ap_free(ap);
}

static void ap_free(struct api_port *ap)
{
	int efd;

	sandbox_port_release(ap->p); /* no wake after this */
	live_remove(ap);	     /* ports_relays_stop writes no more to efd */
	pthread_mutex_lock(&ap->ctx->lock);
	if (ap->parked)
		parked_unlink_locked(ap->ctx, ap);
	efd = ap->efd;
	ap->efd = -1;
	pthread_mutex_unlock(&ap->ctx->lock);
	/* closed only once no list reaches it: a write to the number after
	 * this would land in whatever file reused it */
	if (efd >= 0)
		close(efd);
	free(ap->out);
	free(ap->hdr);
	free(ap);
}

/* A GET asking for an upgrade (WebSocket): passed on as one. */
static void upgrade_detect(struct api_port *ap, struct req *r)
{
	const char *u = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Upgrade");
	const char *c = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Connection");

	if (r->method != API_GET || !u || !c || !strcasestr(c, "upgrade") ||
	    !token_ok(u, strlen(u)) || strlen(u) >= sizeof ap->upgrade_proto)
		return;
	ap->upgrade = true;
	snprintf(ap->upgrade_proto, sizeof ap->upgrade_proto, "%s", u);
}

enum MHD_Result api_ports_begin(struct api_ports_ctx *ctx, struct req *r, const char *method,
				const char *tail, bool preview, struct api_port **out)
{
	struct api_port *ap = calloc(1, sizeof(*ap));
	struct sbx_error err;
	uint32_t port = r->pid;

	*out = NULL;
	if (!ap)
		return MHD_NO;
	ap->ctx = ctx;
	ap->conn = r->conn;
	ap->refs = 1;
	ap->efd = -1;
	ap->sock = MHD_INVALID_SOCKET;
	ap->preview = preview;
	upgrade_detect(ap, r);
	snprintf(ap->account_id, sizeof ap->account_id, "%s", r->account_id);
	snprintf(ap->sandbox_id, sizeof ap->sandbox_id, "%s", r->id);
	ap->out = malloc(PORT_OUT_MAX);
	ap->hdr = malloc(ctx->cfg->port_header_max_bytes);
	if (!ap->out || !ap->hdr) {
		free(ap->out);
		free(ap->hdr);
		free(ap);
		return MHD_NO;
	}
	sbx_error_clear(&err);
	if (port < 1 || port > 65535)
		sbx_error_set(&err, SBX_E_INVALID_REQUEST, "port",
			      "port must be a number 1..65535 (the path is "
			      "/v1/sandboxes/{id}/ports/{port}/{path})");
	if (err.code != SBX_OK || live_add(ap, &err) < 0 ||
	    head_build(ap, method, tail ? tail : "", port, &err) < 0 ||
	    sandbox_port_open(ctx->svc, r->account_id, r->id, port, ports_wake, ap, &ap->p, &err) <
		0) {
		live_remove(ap);
		free(ap->out);
		free(ap->hdr);
		free(ap);
		api_conn_linger(r->conn);
		return api_reply_error(r->conn, &err);
	}
	*out = ap;
	return MHD_YES;
}

/* One piece of the client's body: queued once the previous one left. */
static enum MHD_Result body_piece(struct api_port *ap, const char *data, size_t *size)
{
	char frame[32];
	int rc;

	if (ap->drop) {
		*size = 0;
		return MHD_YES;
	}
	for (;;) {
		rc = out_flush(ap);
		if (rc < 0) {
			ap->drop = true;
			*size = 0;
			return MHD_YES;
		}
		if (rc == 1)
			break;
		if (stopping(ap)) {
			sbx_error_set(
			    &ap->err, SBX_E_SERVICE_UNAVAILABLE, NULL,
			    "the service is shutting down; retry on the restarted service");
			ap->err.retry_after_s = 5;
			ap->drop = true;
			*size = 0;
			return MHD_YES;
		}
		if (park(ap))
			return MHD_YES; /* MHD calls again with the same piece */
	}
	{
		size_t n = SBX_MIN(*size, (size_t)(PORT_OUT_MAX - 64));

		if (ap->chunked_in) {
			snprintf(frame, sizeof frame, "%zx\r\n", n);
			out_str(ap, frame);
		}
		out_add(ap, data, n);
		if (ap->chunked_in)
			out_str(ap, "\r\n");
		*size -= n;
	}
	if (out_flush(ap) < 0)
		ap->drop = true;
	return MHD_YES;
}

enum MHD_Result api_ports_step(struct api_port *ap, const char *upload_data,
			       size_t *upload_data_size)
{
	int rc;

	if (*upload_data_size)
		return body_piece(ap, upload_data, upload_data_size);
	if (ap->drop)
		return api_reply_error(ap->conn, &ap->err);
	if (!ap->body_done) {
		ap->body_done = true;
		if (ap->chunked_in)
			out_str(ap, "0\r\n\r\n");
	}
	for (;;) {
		rc = out_flush(ap);
		if (rc < 0)
			return api_reply_error(ap->conn, &ap->err);
		if (rc == 1)
			break;
		if (stopping(ap)) {
			struct sbx_error e;

			sbx_error_clear(&e);
			sbx_error_set(
			    &e, SBX_E_SERVICE_UNAVAILABLE, NULL,
			    "the service is shutting down; retry on the restarted service");
			e.retry_after_s = 5;
			return api_reply_error(ap->conn, &e);
		}
		if (park(ap))
			return MHD_YES;
	}
	if (ap->answered)
		return MHD_YES;
	sandbox_port_await(ap->p);
	return await_answer(ap);
}

void api_ports_free(struct api_port *ap)
{
	if (ap)
		ports_unref(ap);
}

/* ------------------------------------------------------------ lifecycle */

struct api_ports_ctx *api_ports_ctx_new(struct sandbox_svc *svc, const struct sandbox_config *cfg)
{
	struct api_ports_ctx *ctx = calloc(1, sizeof(*ctx));

	if (!ctx)
		abort();
	ctx->svc = svc;
	ctx->cfg = cfg;
	pthread_mutex_init(&ctx->lock, NULL);
	pthread_cond_init(&ctx->relays_done, NULL);
	return ctx;
}

void api_ports_ctx_stop(struct api_ports_ctx *ctx)
{
	pthread_mutex_lock(&ctx->lock);
	ctx->stopping = true;
	while (ctx->parked) {
		struct api_port *ap = ctx->parked;

		parked_unlink_locked(ctx, ap);
		MHD_resume_connection(ap->conn);
	}
	pthread_mutex_unlock(&ctx->lock);
	/* the upgraded connections: woken, and waited for (bounded) */
	ports_relays_stop(ctx);
}

void api_ports_ctx_free(struct api_ports_ctx *ctx)
{
	if (!ctx)
		return;
	pthread_cond_destroy(&ctx->relays_done);
	pthread_mutex_destroy(&ctx->lock);
	free(ctx);
}

/* ---------------------------------------------------------------- route */

char *api_ports_tail(const char *url)
{
	const char *p = strstr(url, "/ports/");

	if (!p)
		return strdup("");
	p += strlen("/ports/");
	p += strcspn(p, "/"); /* the port */
	return strdup(*p == '/' ? p + 1 : "");
}

/* A proxied request holds its connection until its answer was sent: from
 * the headers on it has file_transfer_timeout_ms, and the stream's own
 * deadlines (port_response_timeout_ms, port_idle_timeout_ms) end it
 * sooner when the guest stops. */
enum MHD_Result api_ports_route(struct req *r)
{
	api_conn_deadline(r->conn, r->srv->cfg->file_transfer_timeout_ms);
	return api_ports_begin(r->srv->ports, r, api_method_name(r->method), r->port_tail, false,
			       &r->port);
}
