/* api/http_wsauth.c: the API key of a browser's WebSocket (docs/api.md
 * "Terminal", "From a browser"). A browser's WebSocket cannot send an
 * Authorization header; the one header its page chooses is
 * Sec-WebSocket-Protocol. So the terminal route also takes the key as a
 * subprotocol entry, `Sec-WebSocket-Protocol: sandboxd.v1, bearer.<key>`;
 * the server answers with `sandboxd.v1` only, so the key is never echoed,
 * and it is never in a URL (nor in a log: headers are not logged).
 *
 * A key given that way comes from a script, so the request's Origin (sent
 * by every browser on a WebSocket) must be the daemon's own: `http://` or
 * `https://` and then exactly the request's Host. Otherwise a page of
 * another site that got hold of a key could open terminals from its
 * visitors' browsers, including to a daemon only their network reaches
 * (the HTTP API is closed to other origins by CORS; WebSockets are not
 * covered by CORS, so this check draws the same line). No Origin: not a
 * browser, nothing to check. The Authorization header, when present, is
 * the only key read.
 */
#include <string.h>
#include <strings.h>

#include "http-priv.h"

/* The next comma-separated entry of a header value, trimmed: its start
 * and length in *tok / *n, the value advanced past it. false at the end. */
static bool next_entry(const char **v, const char **tok, size_t *n)
{
	const char *p = *v;

	while (*p == ' ' || *p == '\t' || *p == ',')
		p++;
	if (!*p)
		return false;
	*tok = p;
	*n = strcspn(p, ",");
	*v = p + *n;
	while (*n && (p[*n - 1] == ' ' || p[*n - 1] == '\t'))
		(*n)--;
	return true;
}

bool api_ws_protocol_offered(const char *header, const char *proto)
{
	const char *tok;
	size_t n, pl = strlen(proto);

	while (header && next_entry(&header, &tok, &n))
		if (n == pl && memcmp(tok, proto, n) == 0)
			return true;
	return false;
}

int api_ws_protocol_key(const char *header, char *out, size_t cap)
{
	static const char pre[] = "bearer.";
	const char *tok, *key = NULL;
	size_t n, kl = 0;

	if (!api_ws_protocol_offered(header, API_WS_PROTOCOL))
		return 0;
	while (next_entry(&header, &tok, &n)) {
		if (n < sizeof pre - 1 || memcmp(tok, pre, sizeof pre - 1) != 0)
			continue;
		if (key)
			return -1; /* two keys: neither */
		key = tok + sizeof pre - 1;
		kl = n - (sizeof pre - 1);
	}
	if (!key)
		return 0;
	if (kl < 8 || kl >= cap || strncmp(key, "aas_sk_", 7) != 0)
		return -1;
	for (size_t i = 0; i < kl; i++)
		if (key[i] < 0x21 || key[i] > 0x7e)
			return -1;
	memcpy(out, key, kl);
	out[kl] = '\0';
	return 1;
}

bool api_origin_is_host(const char *origin, const char *host)
{
	if (!origin)
		return true; /* not a browser */
	if (!host || !*host)
		return false;
	if (strncasecmp(origin, "http://", 7) == 0)
		origin += 7;
	else if (strncasecmp(origin, "https://", 8) == 0)
		origin += 8;
	else
		return false; /* "null", another scheme */
	return strcasecmp(origin, host) == 0;
}

int api_ws_key(struct MHD_Connection *c, char *out, size_t cap, struct sbx_error *err)
{
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Protocol");
	int k = api_ws_protocol_key(h, out, cap);

	if (k <= 0)
		return k;
	if (!api_origin_is_host(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin"),
				MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host"))) {
		explicit_bzero(out, cap);
		sbx_error_set(err, SBX_E_PERMISSION, NULL,
			      "a key in Sec-WebSocket-Protocol is taken only from this server's "
			      "own pages: the Origin must be this request's Host");
		return -2;
	}
	return 1;
}
