/* api/reply.c: the replies of the tenant server: JSON bodies, the error
 * shape of docs/api.md ({"error":{"type","message","param"?}}), the
 * refusal from the headers alone, and the headers every reply carries
 * (security, request id, Retry-After, Allow, WWW-Authenticate).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http-priv.h"

#define MOD "api"

/* Pages: only this origin's scripts, styles, images and API calls; no
 * inline script or style, no plugin, no framing, no form posts elsewhere. */
#define API_PAGE_CSP                                                                               \
	"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "                \
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
/* JSON: nothing is ever run or loaded from it, even if a browser opens it. */
#define API_JSON_CSP "default-src 'none'; frame-ancestors 'none'"

void api_security_headers(struct MHD_Response *resp, bool page)
{
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(resp, "Content-Security-Policy",
				page ? API_PAGE_CSP : API_JSON_CSP);
	MHD_add_response_header(resp, "X-Frame-Options", "DENY");
	MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
	MHD_add_response_header(resp, "Cross-Origin-Opener-Policy", "same-origin");
	MHD_add_response_header(resp, "Cross-Origin-Resource-Policy", "same-origin");
}

static void json_put_cb(void *cls)
{
	json_object_put(cls);
}

/* api_reply_json, with 'Connection: close' when `close`. */
static enum MHD_Result reply_json_ex(struct MHD_Connection *c, unsigned status,
				     struct json_object *o, int retry_after_s, const char *allow,
				     bool close)
{
	struct MHD_Response *resp;
	const char *text;
	size_t len = 0;
	enum MHD_Result ret;

	if (!o) {
		static const char oom[] = "{\"error\":{\"type\":\"api_error\",\"message\":\"out "
					  "of memory; retry later\"}}";
		status = 500;
		resp = MHD_create_response_from_buffer(sizeof(oom) - 1, (void *)oom,
						       MHD_RESPMEM_PERSISTENT);
	} else {
		text = json_object_to_json_string_length(
		    o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
		/* The response keeps the object (and so its text) until it is
		 * sent: no second copy of a large reply. */
		resp = MHD_create_response_from_buffer_with_free_callback_cls(len, (void *)text,
									      json_put_cb, o);
		if (!resp)
			json_object_put(o);
	}
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	if (retry_after_s > 0) {
		char ra[16];
		snprintf(ra, sizeof(ra), "%d", retry_after_s);
		MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
	}
	if (allow)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
	if (status == 401)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	if (close)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	api_security_headers(resp, false);
	api_reqctx_header(resp);
	ret = api_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

enum MHD_Result api_reply_json(struct MHD_Connection *c, unsigned status, struct json_object *o,
			       int retry_after_s, const char *allow)
{
	return reply_json_ex(c, status, o, retry_after_s, allow, false);
}

enum MHD_Result api_reply_error_ex(struct MHD_Connection *c, const struct sbx_error *err,
				   const char *allow, bool close)
{
	struct sbx_error e = *err;
	int status, retry = 0;

	if ((int)e.code <= SBX_OK || e.code >= SBX_CODE_COUNT)
		e.code = SBX_E_INTERNAL;
	status = sbx_code_status(e.code);
	/* a server in a sandbox that is not there or slow is its owner's
	 * matter, not a fault of the daemon: not logged as an error */
	if (status >= 500 && e.code != SBX_E_PORT_UNREACHABLE && e.code != SBX_E_PORT_TIMEOUT)
		sbx_err(MOD, "%d %s: %s", status, sbx_code_type(e.code), err->message);
	if (e.code == SBX_E_INTERNAL) {
		/* The detail is in the log; the tenant learns little. */
		snprintf(e.message, sizeof(e.message),
			 "the service failed to handle the request; retry later");
		e.param[0] = '\0';
	}
	if (status == 429 || status == 503)
		retry = e.retry_after_s > 0 ? e.retry_after_s : 1;
	return reply_json_ex(c, (unsigned)status, api_error_encode(&e), retry, allow, close);
}

enum MHD_Result api_reply_error_allow(struct MHD_Connection *c, const struct sbx_error *err,
				      const char *allow)
{
	return api_reply_error_ex(c, err, allow, false);
}

enum MHD_Result api_reply_error(struct MHD_Connection *c, const struct sbx_error *err)
{
	return api_reply_error_allow(c, err, NULL);
}

enum MHD_Result api_reply_new_error(struct MHD_Connection *c, enum sbx_code code, const char *param,
				    const char *msg)
{
	struct sbx_error e;

	sbx_error_clear(&e);
	sbx_error_set(&e, code, param, "%s", msg);
	return api_reply_error(c, &e);
}

/* A request refused from its headers alone (404, 405, 401, 403, 413 by
 * Content-Length, 429 of a files request, a store failure) is answered at
 * once, with 'Connection: close', whether or not its body follows: a
 * client that waits for the answer before it sends the body (with or
 * without 'Expect: 100-continue') gets it. A client that sends its whole
 * body before it reads (Python's http.client and urllib, requests, many
 * SDKs) must be able to read the answer too, but a socket closed while
 * the body still arrives resets the connection under it ("Connection
 * reset", "Broken pipe"); so the connection closes lingering, as nginx's
 * and Go's do: the daemon sends the answer and its FIN, then reads and
 * drops what the client still sends, for a bounded time and number of
 * bytes (http_conn.c), before the socket goes. Nothing of the refused
 * body is ever read as a next request. */
enum MHD_Result api_reply_reject(struct MHD_Connection *c, const struct sbx_error *err,
				 const char *allow)
{
	api_conn_linger(c);
	return api_reply_error_ex(c, err, allow, true);
}

struct json_object *api_list_encode(struct json_object *data, bool has_more)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "object", json_object_new_string("list"));
	json_object_object_add(o, "data", data);
	json_object_object_add(o, "has_more", json_object_new_boolean(has_more));
	return o;
}

enum MHD_Result api_reply_text(struct MHD_Connection *c, unsigned status, char *body,
			       const char *type)
{
	struct MHD_Response *resp =
	    MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
	enum MHD_Result ret;

	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	api_security_headers(resp, false);
	api_reqctx_header(resp);
	ret = api_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}
