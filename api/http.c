/* api/http.c: the libmicrohttpd server. Routing, the check order of API.md
 * (route, auth, body, fields; then sandbox/ for the rest), the short
 * requests, and the list of parked connections. The exec path is in
 * http_exec.c, create and DELETE in http_async.c (http-priv.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "http-priv.h"

#define MOD "api"
/* Idle timeout: mainly a client that stops reading its reply (the receive
 * deadline, http_conn.c, bounds the time to send a request). */
#define API_IDLE_TIMEOUT_S 120
#define API_TOKEN_MAX	   128
/* The most of a refused request's body read and dropped so that its client
 * can read the answer (reject). */
#define API_DRAIN_MAX_BYTES (16u * 1024 * 1024)

/* ---------------------------------------------------------------- replies */

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

/* api_reply_error_allow, with 'Connection: close' when `close`. */
static enum MHD_Result reply_error_ex(struct MHD_Connection *c, const struct sbx_error *err,
				      const char *allow, bool close)
{
	struct sbx_error e = *err;
	int status, retry = 0;

	if ((int)e.code <= SBX_OK || e.code >= SBX_CODE_COUNT)
		e.code = SBX_E_INTERNAL;
	status = sbx_code_status(e.code);
	if (status >= 500)
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
	return reply_error_ex(c, err, allow, false);
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

static struct json_object *list_encode(struct json_object *data, bool has_more)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "object", json_object_new_string("list"));
	json_object_object_add(o, "data", data);
	json_object_object_add(o, "has_more", json_object_new_boolean(has_more));
	return o;
}

/* ---------------------------------------------------------------- routing */

/* One path segment "{id}" after `prefix`, up to the next '/' or the end. */
static bool take_id(const char *s, char id[SANDBOX_ID_MAX], const char **rest)
{
	size_t n = strcspn(s, "/");

	if (n == 0 || n >= SANDBOX_ID_MAX)
		return false;
	memcpy(id, s, n);
	id[n] = '\0';
	*rest = s + n;
	return true;
}

/* Resolve a path; for R_NONE the id may be partly written. An id longer
 * than any real one makes the route unknown (404 either way). */
static enum route route_resolve(const char *url, char id[SANDBOX_ID_MAX], uint32_t *pid)
{
	const char *rest;

	if (strcmp(url, "/v1/sandboxes") == 0)
		return R_SANDBOXES;
	if (strcmp(url, "/v1/usage") == 0)
		return R_USAGE;
	if (strcmp(url, "/v1/limits") == 0)
		return R_LIMITS;
	if (strcmp(url, "/v1/runtimes") == 0)
		return R_RUNTIMES;
	if (strcmp(url, "/v1/api_keys") == 0)
		return R_KEYS;
	if (strcmp(url, "/v1/sandbox/executions") == 0)
		return R_EXECUTIONS;
	if (strcmp(url, "/v1/receipts/public-key") == 0)
		return R_RECEIPT_KEY;
	if (strncmp(url, "/v1/sandbox/executions/", 23) == 0 && take_id(url + 23, id, &rest) &&
	    *rest == '\0')
		return R_EXECUTION;
	if (strncmp(url, "/v1/receipts/", 13) == 0 && take_id(url + 13, id, &rest) && *rest == '\0')
		return R_RECEIPT;
	if (strncmp(url, "/v1/sandboxes/", 14) == 0 && take_id(url + 14, id, &rest)) {
		if (*rest == '\0')
			return R_SANDBOX;
		if (strcmp(rest, "/exec") == 0)
			return R_EXEC;
		if (strcmp(rest, "/extend") == 0)
			return R_EXTEND;
		if (strcmp(rest, "/files") == 0)
			return R_FILES;
		if (strncmp(rest, "/processes", 10) == 0)
			return api_processes_resolve(rest + 10, pid);
		return R_NONE;
	}
	if (strncmp(url, "/v1/api_keys/", 13) == 0 && take_id(url + 13, id, &rest) && *rest == '\0')
		return R_KEY;
	return R_NONE;
}

/* The route table: each route's path as docs/openapi.yaml writes it and
 * the methods it answers (the Allow header of a 405). route_resolve()
 * parses a path into these; api_routes() hands the table to the tests,
 * which compare it with the OpenAPI description both ways. */
static const struct api_route_info route_table[] = {
    [R_NONE] = {NULL, ""},
    [R_SANDBOXES] = {"/v1/sandboxes", "GET, POST"},
    [R_SANDBOX] = {"/v1/sandboxes/{id}", "GET, DELETE"},
    [R_EXEC] = {"/v1/sandboxes/{id}/exec", "POST"},
    [R_EXTEND] = {"/v1/sandboxes/{id}/extend", "POST"},
    [R_USAGE] = {"/v1/usage", "GET"},
    [R_LIMITS] = {"/v1/limits", "GET"},
    [R_RUNTIMES] = {"/v1/runtimes", "GET"},
    [R_KEYS] = {"/v1/api_keys", "GET, POST"},
    [R_KEY] = {"/v1/api_keys/{key_id}", "DELETE"},
    [R_EXECUTIONS] = {"/v1/sandbox/executions", "GET, POST"},
    [R_EXECUTION] = {"/v1/sandbox/executions/{id}", "GET"},
    [R_RECEIPT] = {"/v1/receipts/{id}", "GET"},
    [R_RECEIPT_KEY] = {"/v1/receipts/public-key", "GET"},
    [R_PROCESSES] = {"/v1/sandboxes/{id}/processes", "GET, POST"},
    [R_PROCESS_OUTPUT] = {"/v1/sandboxes/{id}/processes/{pid}/output", "GET"},
    [R_PROCESS_STDIN] = {"/v1/sandboxes/{id}/processes/{pid}/stdin", "POST"},
    [R_PROCESS_SIGNAL] = {"/v1/sandboxes/{id}/processes/{pid}/signal", "POST"},
    [R_FILES] = {"/v1/sandboxes/{id}/files", "GET, PUT, DELETE"},
    [R_STATIC] = {NULL, "GET"}, /* api_assets[] (api/assets.h) */
};

const struct api_route_info *api_routes(size_t *n)
{
	*n = sizeof(route_table) / sizeof(route_table[0]);
	return route_table;
}

static const char *route_allow(enum route r)
{
	if ((size_t)r >= sizeof(route_table) / sizeof(route_table[0]) || !route_table[r].methods)
		return "";
	return route_table[r].methods;
}

const char *api_route_methods(const char *url)
{
	char id[SANDBOX_ID_MAX];
	uint32_t pid;
	enum route r = route_resolve(url, id, &pid);

	if (r == R_NONE && api_static_find(url) >= 0)
		r = R_STATIC;
	return route_allow(r);
}

static bool method_allowed(enum route r, const char *method)
{
	const char *allow = route_allow(r);
	size_t n = strlen(method);

	for (const char *p = allow; (p = strstr(p, method)) != NULL; p += n)
		if ((p == allow || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0'))
			return n > 0;
	return false;
}

static bool route_has_body(enum route r, const char *method)
{
	return strcmp(method, "POST") == 0 &&
	       (r == R_SANDBOXES || r == R_EXEC || r == R_EXTEND || r == R_KEYS ||
		r == R_EXECUTIONS || r == R_PROCESSES || r == R_PROCESS_STDIN ||
		r == R_PROCESS_SIGNAL);
}

/* ------------------------------------------------------------------- auth */

/* "Bearer aas_sk_..." -> the token (borrowed slice copied to out). */
static bool bearer_token(const char *h, char out[API_TOKEN_MAX + 1])
{
	size_t n;

	if (!h)
		return false;
	while (*h == ' ' || *h == '\t')
		h++;
	if (strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t'))
		return false;
	h += 6;
	while (*h == ' ' || *h == '\t')
		h++;
	n = strcspn(h, " \t");
	if (n < 8 || n > API_TOKEN_MAX || strncmp(h, "aas_sk_", 7) != 0)
		return false;
	for (const char *p = h + n; *p; p++)
		if (*p != ' ' && *p != '\t')
			return false;
	for (size_t i = 0; i < n; i++)
		if (h[i] < 0x21 || h[i] > 0x7e)
			return false;
	memcpy(out, h, n);
	out[n] = '\0';
	return true;
}

/* One key lookup per request: the account and the key's scopes. */
static int authenticate(struct api_server *srv, struct MHD_Connection *c, char *account_id,
			unsigned *scopes, struct sbx_error *err)
{
	const char *h =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	char token[API_TOKEN_MAX + 1];
	struct sbx_error e;

	sbx_error_clear(&e);
	if (bearer_token(h, token) &&
	    sandbox_authenticate_scopes(srv->svc, token, account_id, scopes, &e) == 0)
		return 0;
	if (e.code != SBX_OK && e.code != SBX_E_AUTHENTICATION) {
		*err = e; /* the store failed: not the tenant's fault */
		return -1;
	}
	return sbx_error_set(err, SBX_E_AUTHENTICATION, NULL,
			     "missing or invalid API key; send 'Authorization: Bearer "
			     "aas_sk_...' with a valid, unrevoked key");
}

/* The key's scopes (from authenticate) must include `scope` (403
 * permission_error). */
static int require_scope(unsigned scopes, enum sandbox_scope scope, struct sbx_error *err)
{
	if (!(scopes & scope))
		return sbx_error_set(err, SBX_E_PERMISSION, NULL,
				     "this API key lacks the '%s' scope; create a key with "
				     "'admin create-key ACCOUNT --scope %s'",
				     sandbox_scope_name(scope), sandbox_scope_name(scope));
	return 0;
}

static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned status, char *body,
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

/* The one-shot execution routes (sandbox/execution.c). A POST runs on the
 * pool (http_async.c). */
static enum MHD_Result handle_execution_routes(struct api_server *srv, struct req *r,
					       const char *method)
{
	struct sbx_error err;
	char *out = NULL, *pem = NULL;

	sbx_error_clear(&err);
	switch (r->route) {
	case R_EXECUTIONS:
		if (strcmp(method, "GET") == 0)
			return api_execution_list_handle(r);
		return api_execution_handle(r);
	case R_EXECUTION:
		if (sandbox_execution_get(srv->svc, r->account_id, r->id, &out, &err) < 0)
			return api_reply_error(r->conn, &err);
		break;
	case R_RECEIPT:
		if (sandbox_receipt_get(srv->svc, r->account_id, r->id, &out, &err) < 0)
			return api_reply_error(r->conn, &err);
		break;
	default:
		if (sandbox_receipt_public_key(srv->svc, &out, &pem, &err) < 0)
			return api_reply_error(r->conn, &err);
		{
			struct json_object *o = json_object_new_object();

			json_object_object_add(o, "object", json_object_new_string("receipt_key"));
			json_object_object_add(o, "algorithm", json_object_new_string("Ed25519"));
			json_object_object_add(o, "signer", json_object_new_string(out));
			json_object_object_add(o, "public_key_pem", json_object_new_string(pem));
			free(out);
			free(pem);
			return api_reply_json(r->conn, 200, o, 0, NULL);
		}
	}
	return reply_text(r->conn, 200, out, "application/json");
}

static bool media_type_is(const char *ct, const char *type)
{
	size_t n = strlen(type);

	while (*ct == ' ' || *ct == '\t')
		ct++;
	if (strncasecmp(ct, type, n) != 0)
		return false;
	ct += n;
	while (*ct == ' ' || *ct == '\t')
		ct++;
	return *ct == '\0' || *ct == ';';
}

/* A Content-Type we read as JSON: application/json (parameters such as
 * charset allowed), or application/x-www-form-urlencoded, which is what
 * `curl -d` sends when the caller forgot -H 'Content-Type: ...': the body
 * is still parsed as JSON (docs/api.md). */
static bool content_type_json(const char *ct)
{
	return media_type_is(ct, "application/json") ||
	       media_type_is(ct, "application/x-www-form-urlencoded");
}

/* ----------------------------------------------------------- list & usage */

static const char *query(struct MHD_Connection *c, const char *key)
{
	return MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);
}

/* The `limit` query parameter of a list: 1..100, `def` when absent. false
 * when it is malformed or out of range. */
static bool query_limit(struct req *r, int def, int *limit)
{
	const char *s = query(r->conn, "limit");
	char *end;
	long v;

	*limit = def;
	if (!s)
		return true;
	errno = 0;
	v = strtol(s, &end, 10);
	if (s[0] < '0' || s[0] > '9' || *end || errno || v < 1 || v > 100)
		return false;
	*limit = (int)v;
	return true;
}

static enum MHD_Result handle_list(struct req *r)
{
	const char *status = query(r->conn, "status");
	const char *after = query(r->conn, "starting_after");
	struct sandbox_view *views = NULL;
	size_t n = 0;
	bool more = false;
	int limit = 20;
	struct sbx_error err;

	sbx_error_clear(&err);
	if (status && strcmp(status, "running") != 0 && strcmp(status, "destroyed") != 0 &&
	    strcmp(status, "expired") != 0 && strcmp(status, "failed") != 0)
		return api_reply_new_error(
		    r->conn, SBX_E_INVALID_REQUEST, "status",
		    "status must be one of running, destroyed, expired, failed");
	if (!query_limit(r, 20, &limit))
		return api_reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "limit",
					   "limit must be an integer from 1 to 100");
	if (after && (!after[0] || strlen(after) >= SANDBOX_ID_MAX))
		return api_reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "starting_after",
					   "starting_after must be a sandbox id");
	if (sandbox_list(r->srv->svc, r->account_id, status, limit, after, &views, &n, &more,
			 &err) < 0)
		return api_reply_error(r->conn, &err);
	struct json_object *data = json_object_new_array();
	for (size_t i = 0; i < n; i++)
		json_object_array_add(data, api_sandbox_encode(&views[i]));
	free(views);
	return api_reply_json(r->conn, 200, list_encode(data, more), 0, NULL);
}

static enum MHD_Result handle_usage(struct req *r)
{
	const char *from_s = query(r->conn, "from"), *to_s = query(r->conn, "to");
	const char *gran = query(r->conn, "granularity");
	int64_t from = 0, to = 0;
	struct sandbox_usage u;
	struct sbx_error err;
	enum MHD_Result ret;

	sbx_error_clear(&err);
	if (from_s && (sbx_rfc3339_parse(from_s, &from) < 0 || from <= 0))
		return api_reply_new_error(
		    r->conn, SBX_E_INVALID_REQUEST, "from",
		    "from must be an RFC 3339 time like 2026-08-01T00:00:00Z");
	if (to_s && (sbx_rfc3339_parse(to_s, &to) < 0 || to <= 0))
		return api_reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "to",
					   "to must be an RFC 3339 time like 2026-09-01T00:00:00Z");
	if (from && to && to <= from)
		return api_reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "to",
					   "to must be later than from");
	if (gran && strcmp(gran, "day") != 0 && strcmp(gran, "hour") != 0)
		return api_reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "granularity",
					   "granularity must be 'day' or 'hour'");
	memset(&u, 0, sizeof(u));
	if (sandbox_usage(r->srv->svc, r->account_id, from, to, gran, &u, &err) < 0)
		return api_reply_error(r->conn, &err);
	ret = api_reply_json(r->conn, 200, api_usage_encode(&u), 0, NULL);
	sandbox_usage_release(&u);
	return ret;
}

/* ------------------------------------------------------------------ keys */

static enum MHD_Result handle_keys(struct req *r, const char *method)
{
	struct sbx_error err;

	sbx_error_clear(&err);
	if (strcmp(method, "POST") == 0) {
		struct sandbox_key key;
		char secret[80];
		unsigned scopes;
		enum MHD_Result ret;
		bool has_scopes;

		if (api_key_create_decode(r->body.data, r->body.len, &scopes, &has_scopes, &err) <
		    0)
			return api_reply_error(r->conn, &err);
		/* at most the creating key's scopes; all of them by default */
		if (sandbox_key_create(r->srv->svc, r->account_id, has_scopes ? &scopes : NULL,
				       &r->scopes, &key, secret, &err) < 0)
			return api_reply_error(r->conn, &err);
		ret = api_reply_json(r->conn, 201, api_key_encode(&key, secret), 0, NULL);
		explicit_bzero(secret, sizeof(secret));
		return ret;
	}
	struct sandbox_key *keys = NULL;
	const char *after = query(r->conn, "starting_after");
	size_t n = 0;
	bool more = false;
	int limit;
	if (!query_limit(r, 100, &limit))
		return api_reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "limit",
					   "limit must be an integer from 1 to 100");
	if (after && (!after[0] || strlen(after) >= SANDBOX_ID_MAX))
		return api_reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "starting_after",
					   "starting_after must be an API key id");
	if (sandbox_key_list(r->srv->svc, r->account_id, limit, after, &keys, &n, &more, &err) < 0)
		return api_reply_error(r->conn, &err);
	struct json_object *data = json_object_new_array();
	for (size_t i = 0; i < n; i++)
		json_object_array_add(data, api_key_encode(&keys[i], NULL));
	free(keys);
	return api_reply_json(r->conn, 200, list_encode(data, more), 0, NULL);
}

static enum MHD_Result handle_key_revoke(struct req *r)
{
	struct sbx_error err;
	struct json_object *o;

	sbx_error_clear(&err);
	if (sandbox_key_revoke(r->srv->svc, r->account_id, r->id, &r->scopes, &err) < 0)
		return api_reply_error(r->conn, &err);
	o = json_object_new_object();
	json_object_object_add(o, "id", json_object_new_string(r->id));
	json_object_object_add(o, "object", json_object_new_string("api_key"));
	json_object_object_add(o, "revoked", json_object_new_boolean(true));
	return api_reply_json(r->conn, 200, o, 0, NULL);
}

/* ------------------------------------------------------- parked requests */

void api_parked_remove(struct api_server *srv, struct req *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else if (srv->suspended == r)
		srv->suspended = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->prev = r->next = NULL;
}

/* Park a request's connection until its work finishes (exec, create,
 * DELETE): no worker thread waits meanwhile. Call with srv->lock held,
 * state EXEC_RUNNING. */
void api_park_locked(struct api_server *srv, struct req *r)
{
	MHD_suspend_connection(r->conn);
	r->state = EXEC_SUSPENDED;
	r->next = srv->suspended;
	if (r->next)
		r->next->prev = r;
	srv->suspended = r;
}

/* The work of a running or parked request finished: wake its connection
 * (MHD calls the handler again) if it was parked. srv->lock held. */
void api_finish_locked(struct api_server *srv, struct req *r)
{
	if (r->state == EXEC_SUSPENDED) {
		api_parked_remove(srv, r);
		MHD_resume_connection(r->conn);
	}
	r->state = EXEC_DONE;
}

/* ------------------------------------------------- per-account counts */

static const struct {
	const char *what;
	int retry_after_s;
} slot_kinds[API_INFLIGHT_KINDS] = {
    [API_INFLIGHT_CREATE] = {"creates", 2},
    [API_INFLIGHT_DELETE] = {"DELETEs", 1},
    [API_INFLIGHT_EXECUTION] = {"executions", 2},
    [API_INFLIGHT_EXEC] = {"execs", 1},
    [API_INFLIGHT_FILES] = {"file transfers", 1},
    [API_INFLIGHT_PROCESS] = {"processes calls", 1}, /* docs/api.md "Fair share" */
};

static int slot_cap(const struct sandbox_config *cfg, enum api_inflight_kind kind)
{
	switch (kind) {
	case API_INFLIGHT_CREATE:
		return cfg->max_creates_in_flight_per_account;
	case API_INFLIGHT_DELETE:
		return cfg->max_deletes_in_flight_per_account;
	case API_INFLIGHT_EXECUTION:
		return cfg->max_executions_in_flight_per_account;
	case API_INFLIGHT_FILES:
		return cfg->max_files_in_flight_per_account;
	case API_INFLIGHT_PROCESS:
		return cfg->max_processes_in_flight_per_account;
	default:
		return cfg->max_execs_in_flight_per_account;
	}
}

int api_req_slot_take(struct req *r, enum api_inflight_kind kind, struct sbx_error *err)
{
	int cap = slot_cap(r->srv->cfg, kind);

	if (!api_inflight_take(r->srv->per_account, r->account_id, kind, cap)) {
		sbx_error_set(err, SBX_E_RATE_LIMITED, NULL,
			      "this account has %d %s in flight, the most it may have at once "
			      "(GET /v1/limits); retry when one of them has finished",
			      cap, slot_kinds[kind].what);
		err->retry_after_s = slot_kinds[kind].retry_after_s;
		return -1;
	}
	r->slot = (int)kind;
	return 0;
}

void api_req_slot_put(struct req *r)
{
	if (r->slot < 0)
		return;
	api_inflight_put(r->srv->per_account, r->account_id, (enum api_inflight_kind)r->slot);
	r->slot = -1;
}

/* -------------------------------------------------------------- dispatch */

static enum MHD_Result dispatch(struct req *r, const char *method)
{
	struct api_server *srv = r->srv;
	struct sbx_error err;
	struct sandbox_view v;

	sbx_error_clear(&err);
	memset(&v, 0, sizeof(v));
	switch (r->route) {
	case R_LIMITS: {
		struct sandbox_startup_stats st;

		sandbox_startup_stats(srv->svc, &st);
		return api_reply_json(r->conn, 200, api_limits_encode_stats(srv->cfg, &st), 0,
				      NULL);
	}
	case R_RUNTIMES:
		return api_reply_json(r->conn, 200, api_runtimes_encode(&srv->runtimes), 0, NULL);
	case R_USAGE:
		return handle_usage(r);
	case R_KEYS:
		return handle_keys(r, method);
	case R_KEY:
		return handle_key_revoke(r);
	case R_EXEC:
		return api_exec_handle(r);
	case R_PROCESSES:
	case R_PROCESS_OUTPUT:
	case R_PROCESS_STDIN:
	case R_PROCESS_SIGNAL:
		return api_processes_handle(r, method);
	case R_SANDBOXES:
		if (strcmp(method, "GET") == 0)
			return handle_list(r);
		return api_create_handle(r);
	case R_SANDBOX:
		if (strcmp(method, "GET") != 0)
			return api_async_run(r); /* DELETE: destroying a domain takes ~1 s */
		if (sandbox_get(srv->svc, r->account_id, r->id, &v, &err) < 0)
			return api_reply_error(r->conn, &err);
		return api_reply_json(r->conn, 200, api_sandbox_encode(&v), 0, NULL);
	case R_EXTEND: {
		int minutes = 0;
		if (api_extend_decode(r->body.data, r->body.len, srv->cfg, &minutes, &err) < 0)
			return api_reply_error(r->conn, &err);
		if (sandbox_extend(srv->svc, r->account_id, r->id, minutes, &v, &err) < 0)
			return api_reply_error(r->conn, &err);
		return api_reply_json(r->conn, 200, api_sandbox_encode(&v), 0, NULL);
	}
	case R_EXECUTIONS:
	case R_EXECUTION:
	case R_RECEIPT:
	case R_RECEIPT_KEY:
		return handle_execution_routes(srv, r, method);
	case R_STATIC:
		return api_static_reply(r->conn, r->asset);
	case R_FILES: /* handled by http_files.c before dispatch */
	case R_NONE:
		break;
	}
	return api_reply_new_error(r->conn, SBX_E_NOT_FOUND, NULL, "unknown endpoint");
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
static enum MHD_Result reject(struct req *r, const struct sbx_error *err, const char *allow)
{
	api_conn_linger(r->conn);
	return reply_error_ex(r->conn, err, allow, true);
}

/* First call for a request: headers only. Route, method, auth and the
 * declared length are checked here, before any body is read. */
static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static enum MHD_Result request_begin(struct api_server *srv, struct MHD_Connection *c,
				     const char *url, const char *method, void **con_cls)
{
	struct req *r = calloc(1, sizeof(*r));
	struct sbx_error err;
	const char *cl;

	if (!r)
		return MHD_NO;
	r->srv = srv;
	r->conn = c;
	r->refs = 1;
	r->slot = -1;
	r->started_us = now_us();
	sbx_buf_init(&r->body, srv->cfg->max_body_bytes);
	pthread_mutex_lock(&srv->lock);
	srv->inflight++;
	srv->live_reqs++;
	pthread_mutex_unlock(&srv->lock);
	*con_cls = r;
	api_reqctx_begin(c, r->request_id);

	sbx_error_clear(&err);
	r->route = route_resolve(url, r->id, &r->pid);
	if (r->route == R_NONE && (r->asset = api_static_find(url)) >= 0)
		r->route = R_STATIC;
	if (r->route == R_NONE) {
		char shown[80];
		size_t i = 0;
		for (; url[i] && i < 64; i++)
			shown[i] =
			    (url[i] > 0x20 && url[i] < 0x7f && url[i] != '\'') ? url[i] : '?';
		shown[i] = '\0';
		sbx_error_set(
		    &err, SBX_E_NOT_FOUND, NULL,
		    "unknown endpoint '%s %s'; the endpoints are listed at /reference.html",
		    strlen(method) < 10 ? method : "?", shown);
		return reject(r, &err, NULL);
	}
	if (!method_allowed(r->route, method)) {
		sbx_error_set(&err, SBX_E_METHOD_NOT_ALLOWED, NULL,
			      "method not allowed here; use %s", route_allow(r->route));
		return reject(r, &err, route_allow(r->route));
	}
	if (r->route != R_LIMITS && r->route != R_RUNTIMES && r->route != R_STATIC &&
	    authenticate(srv, c, r->account_id, &r->scopes, &err) < 0)
		return reject(r, &err, NULL);
	if ((r->route == R_EXECUTIONS || r->route == R_EXECUTION) &&
	    require_scope(r->scopes, SANDBOX_SCOPE_SANDBOXES, &err) < 0)
		return reject(r, &err, NULL);
	if ((r->route == R_KEYS || r->route == R_KEY) &&
	    require_scope(r->scopes, SANDBOX_SCOPE_KEYS, &err) < 0)
		return reject(r, &err, NULL);
	if (r->route == R_FILES) {
		/* A transfer holds its connection until its reply was sent,
		 * and streams its body (max_file_bytes, not max_body_bytes):
		 * from the headers on, the whole of it (body, work and reply)
		 * has file_transfer_timeout_ms, and the minimum-progress rule
		 * of http_files.c cuts a trickle sooner. */
		if (api_req_slot_take(r, API_INFLIGHT_FILES, &err) < 0)
			return reject(r, &err, NULL);
		api_conn_deadline(c, srv->cfg->file_transfer_timeout_ms);
		return api_files_begin(srv->files, c, method, r->account_id, r->id, &r->files);
	}
	cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (cl) {
		char *end;
		unsigned long long n;
		errno = 0;
		n = strtoull(cl, &end, 10);
		if (errno == ERANGE || (end != cl && n > srv->cfg->max_body_bytes)) {
			sbx_error_set(&err, SBX_E_PAYLOAD_TOO_LARGE, NULL,
				      "the request body is larger than %zu bytes",
				      srv->cfg->max_body_bytes);
			return reject(r, &err, NULL);
		}
	}
	return MHD_YES;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *upload_data,
			      size_t *upload_data_size, void **con_cls)
{
	struct api_server *srv = cls;
	struct req *r = *con_cls;
	struct sbx_error err;

	if (!r)
		return request_begin(srv, c, url, method, con_cls);
	api_reqctx_enter(r->request_id, r->account_id, r->id);
	if (r->route == R_FILES && r->files) /* a refused one drains like any other */
		return api_files_step(r->files, upload_data, upload_data_size);
	if (*upload_data_size) {
		r->body_bytes += *upload_data_size;
		/* Keep at most max_body_bytes; past that (a chunked body
		 * declares no length), read and drop, up to the drain cap. */
		if (!r->too_large && sbx_buf_append(&r->body, upload_data, *upload_data_size) < 0) {
			r->too_large = true;
			sbx_buf_release(&r->body);
		}
		*upload_data_size = 0;
		if (r->too_large && r->body_bytes > API_DRAIN_MAX_BYTES) {
			sbx_info(MOD,
				 "closed a connection whose refused request body passed %u "
				 "bytes",
				 API_DRAIN_MAX_BYTES);
			return MHD_NO;
		}
		return MHD_YES;
	}
	api_conn_received(c);	   /* the whole request is in: no deadline from here */
	if (r->state != EXEC_NONE) /* resumed */
		return r->is_async ? api_async_answer(r) : api_exec_answer(r);

	sbx_error_clear(&err);
	if (r->too_large) {
		sbx_error_set(&err, SBX_E_PAYLOAD_TOO_LARGE, NULL,
			      "the request body is larger than %zu bytes",
			      srv->cfg->max_body_bytes);
		return reply_error_ex(c, &err, NULL, true);
	}
	if (r->body.len > 0 && route_has_body(r->route, method)) {
		const char *ct =
		    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
		if (ct && !content_type_json(ct))
			return api_reply_new_error(
			    c, SBX_E_UNSUPPORTED_MEDIA_TYPE, NULL,
			    "send the body as 'Content-Type: application/json'");
	}
	return dispatch(r, method);
}

/* MHD's access handler: handle(), then note the status it answered. */
static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
			       const char *method, const char *version, const char *upload_data,
			       size_t *upload_data_size, void **con_cls)
{
	enum MHD_Result ret;
	unsigned status;

	(void)api_metrics_take_status();
	ret = handle(cls, c, url, method, version, upload_data, upload_data_size, con_cls);
	status = api_metrics_take_status();
	if (status && *con_cls)
		((struct req *)*con_cls)->status = status;
	return ret;
}

/* The last of api_server_stop and the requests that outlive it (a late
 * exec callback) frees the server. */
static void server_free(struct api_server *srv)
{
	api_workpool_free(srv->pool);
	api_inflight_free(srv->per_account);
	api_files_ctx_free(srv->files);
	api_conns_free(srv->conns);
	pthread_mutex_destroy(&srv->lock);
	pthread_cond_destroy(&srv->idle);
	free(srv);
}

void api_req_free(struct req *r)
{
	struct api_server *srv = r->srv;
	bool free_srv;

	api_req_slot_put(r); /* a no-op unless its work never ran */
	sbx_buf_release(&r->body);
	api_files_free(r->files);
	api_exec_body_release(&r->exec);
	api_stream_free(r->stream);
	free(r->proc_data);
	if (r->has_res)
		sandbox_exec_result_release(&r->res);
	if (r->has_execution)
		free(r->execution.code);
	/* the reply was sent (or never will be): its budget goes back */
	sandbox_output_release(srv->svc, &r->hold);
	free(r->out_body);
	free(r);
	pthread_mutex_lock(&srv->lock);
	free_srv = --srv->live_reqs == 0 && srv->released;
	pthread_mutex_unlock(&srv->lock);
	if (free_srv)
		server_free(srv);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	struct api_server *srv = cls;
	struct req *r = *con_cls;
	bool free_now;

	if (!r)
		return;
	*con_cls = NULL;
	if (r->status)
		api_metrics_request(r->route, r->status, now_us() - r->started_us);
	pthread_mutex_lock(&srv->lock);
	if (r->state == EXEC_SUSPENDED)
		api_parked_remove(srv, r);
	if (r->state == EXEC_RUNNING || r->state == EXEC_SUSPENDED)
		r->state = EXEC_ABORTED; /* the late callback only drops its ref */
	api_conn_rearm(c);		 /* the next request on this connection starts now */
	free_now = --r->refs == 0;
	srv->inflight--;
	pthread_cond_broadcast(&srv->idle);
	pthread_mutex_unlock(&srv->lock);
	if (free_now)
		api_req_free(r);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[512];
	size_t n;

	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n && line[n - 1] == '\n')
		line[--n] = '\0';
	sbx_warn(MOD, "libmicrohttpd: %s", line);
}

/* ------------------------------------------------------------ lifecycle */

int api_listen_parse(const char *listen, struct sockaddr_in *sa, struct sbx_error *err)
{
	const char *colon = listen ? strrchr(listen, ':') : NULL;
	char host[64];
	char *end;
	unsigned long port;
	size_t hl;

	memset(sa, 0, sizeof(*sa));
	if (!colon || colon == listen || colon[1] == '\0')
		goto bad;
	hl = (size_t)(colon - listen);
	if (hl >= sizeof(host))
		goto bad;
	memcpy(host, listen, hl);
	host[hl] = '\0';
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (*end || errno || port > 65535 || colon[1] < '0' || colon[1] > '9')
		goto bad;
	if (strcmp(host, "localhost") == 0)
		strcpy(host, "127.0.0.1");
	if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
		goto bad;
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)port);
	return 0;
bad:
	return sbx_error_set(err, SBX_E_INVALID_REQUEST, "listen",
			     "listen must be IPV4:PORT, like '127.0.0.1:8080'");
}

struct api_server *api_server_start(struct sandbox_svc *svc, struct sbx_error *err)
{
	const struct sandbox_config *cfg = sandbox_svc_config(svc);
	struct api_server *srv;
	struct sockaddr_in sa;
	const union MHD_DaemonInfo *info;
	unsigned threads = cfg->http_threads > 0 ? (unsigned)cfg->http_threads : 4;

	if (api_listen_parse(cfg->listen, &sa, err) < 0)
		return NULL;
	srv = calloc(1, sizeof(*srv));
	if (!srv) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		return NULL;
	}
	srv->svc = svc;
	srv->cfg = cfg;
	srv->listen_fd = MHD_INVALID_SOCKET;
	api_runtimes_load(&srv->runtimes, cfg->base_image);
	pthread_mutex_init(&srv->lock, NULL);
	pthread_cond_init(&srv->idle, NULL);
	srv->pool = api_workpool_new(cfg->http_work_threads, cfg->http_work_queue);
	srv->per_account = api_inflight_new();
	srv->files = api_files_ctx_new(svc, cfg);
	if (!srv->pool || !srv->per_account || !srv->files) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		server_free(srv);
		return NULL;
	}
	srv->conns = api_conns_new(cfg->http_receive_timeout_ms, err);
	if (!srv->conns) {
		server_free(srv);
		return NULL;
	}

	srv->daemon = MHD_start_daemon(
	    MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
		MHD_USE_ITC,
	    ntohs(sa.sin_port), NULL, NULL, handler, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv,
	    MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)&sa, MHD_OPTION_THREAD_POOL_SIZE,
	    threads, MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->http_max_connections,
	    MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->http_connections_per_ip,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)API_IDLE_TIMEOUT_S,
	    MHD_OPTION_NOTIFY_CONNECTION, api_conn_notify, srv->conns, MHD_OPTION_NOTIFY_COMPLETED,
	    completed, srv, MHD_OPTION_END);
	if (!srv->daemon) {
		sbx_error_set(err, SBX_E_INTERNAL, "listen", "cannot listen on '%s': %s",
			      cfg->listen, strerror(errno));
		server_free(srv);
		return NULL;
	}
	info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
	srv->port = info ? info->port : ntohs(sa.sin_port);
	return srv;
}

unsigned api_server_port(const struct api_server *srv)
{
	return srv->port;
}

void api_server_quiesce(struct api_server *srv)
{
	if (!srv || srv->quiesced)
		return;
	srv->quiesced = true;
	/* MHD takes the socket out of every worker's epoll set before it
	 * returns it, so closing it now makes new connections fail fast. */
	srv->listen_fd = MHD_quiesce_daemon(srv->daemon);
	if (srv->listen_fd != MHD_INVALID_SOCKET)
		close(srv->listen_fd);
	srv->listen_fd = MHD_INVALID_SOCKET;
}

int api_server_drain(struct api_server *srv, int64_t timeout_ms)
{
	int64_t deadline = sbx_mono_ms() + timeout_ms;
	int left;

	pthread_mutex_lock(&srv->lock);
	while (srv->inflight > 0) {
		int64_t now = sbx_mono_ms();
		struct timespec ts;
		if (now >= deadline)
			break;
		/* Poll in short steps (the condvar uses the wall clock). */
		clock_gettime(CLOCK_REALTIME, &ts);
		int64_t step = SBX_MIN(deadline - now, 100);
		ts.tv_nsec += (long)(step * 1000000);
		ts.tv_sec += ts.tv_nsec / 1000000000;
		ts.tv_nsec %= 1000000000;
		pthread_cond_timedwait(&srv->idle, &srv->lock, &ts);
	}
	left = srv->inflight;
	pthread_mutex_unlock(&srv->lock);
	return left;
}

void api_server_stop(struct api_server *srv)
{
	bool free_srv;
	int n = 0;

	if (!srv)
		return;
	pthread_mutex_lock(&srv->lock);
	srv->stopping = true;
	pthread_mutex_unlock(&srv->lock);
	/* Long requests still waiting for a pool thread never start: they
	 * answer 503 (async_job, cancelled). */
	api_workpool_stop(srv->pool);
	pthread_mutex_lock(&srv->lock);
	while (srv->suspended) {
		struct req *r = srv->suspended;
		api_parked_remove(srv, r);
		r->state = EXEC_ABORTED;
		MHD_resume_connection(r->conn);
		n++;
	}
	pthread_mutex_unlock(&srv->lock);
	api_files_ctx_stop(srv->files);
	if (n)
		sbx_warn(MOD, "answered %d running exec(s) with 503 at shutdown", n);
	/* Let the 503s (and anything else in flight) go out. */
	api_server_drain(srv, 2000);
	/* Running creates, DELETEs and executions still use the service,
	 * which the caller frees next: wait for them (a boot ends by
	 * boot_timeout_ms, an execution by its timeout). */
	api_workpool_free(srv->pool);
	srv->pool = NULL;
	MHD_stop_daemon(srv->daemon);
	srv->daemon = NULL;
	api_conns_free(srv->conns); /* MHD told it of every close */
	srv->conns = NULL;
	if (srv->listen_fd != MHD_INVALID_SOCKET)
		close(srv->listen_fd);
	srv->listen_fd = MHD_INVALID_SOCKET;
	pthread_mutex_lock(&srv->lock);
	srv->released = true;
	free_srv = srv->live_reqs == 0;
	pthread_mutex_unlock(&srv->lock);
	if (free_srv)
		server_free(srv);
}
