/* api/http.c: the libmicrohttpd server. Routing, the check order of API.md
 * (route, auth, body, fields; then sandbox/ for the rest), and the exec
 * path that suspends the connection while the command runs so that no
 * worker thread waits on a guest.
 *
 * Locking: srv->lock guards the server's counters, the list of suspended
 * requests and every request's exec state (state, result, refs). It is
 * held around MHD_suspend_connection/MHD_resume_connection so that a
 * completion never resumes a connection that is not (yet) suspended. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#include "api-priv.h"

#define MOD		     "api"
#define API_CONNECTION_LIMIT 1024
#define API_IDLE_TIMEOUT_S   120
#define API_TOKEN_MAX	     128

enum route {
	R_NONE,
	R_SANDBOXES,   /* /v1/sandboxes */
	R_SANDBOX,     /* /v1/sandboxes/{id} */
	R_EXEC,	       /* /v1/sandboxes/{id}/exec */
	R_EXTEND,      /* /v1/sandboxes/{id}/extend */
	R_USAGE,       /* /v1/usage */
	R_LIMITS,      /* /v1/limits */
	R_KEYS,	       /* /v1/api_keys */
	R_KEY,	       /* /v1/api_keys/{id} */
	R_EXECUTIONS,  /* /v1/sandbox/executions */
	R_EXECUTION,   /* /v1/sandbox/executions/{id} */
	R_RECEIPT,     /* /v1/receipts/{id} */
	R_RECEIPT_KEY, /* /v1/receipts/public-key */
	R_FILES,       /* /v1/sandboxes/{id}/files (http_files.c) */
};

enum exec_state {
	EXEC_NONE,	/* no exec started */
	EXEC_RUNNING,	/* started, connection not suspended (yet) */
	EXEC_SUSPENDED, /* connection suspended, waiting for the callback */
	EXEC_DONE,	/* callback ran: res or exec_err holds the outcome */
	EXEC_ABORTED,	/* the server is stopping: answered 503 */
};

struct api_server {
	struct sandbox_svc *svc;
	const struct sandbox_config *cfg;
	struct MHD_Daemon *daemon;
	unsigned port;
	MHD_socket listen_fd; /* owned after quiesce */
	bool quiesced;

	pthread_mutex_t lock;
	pthread_cond_t idle;
	int inflight;  /* requests received and not yet completed */
	int live_reqs; /* struct req alive (some may wait on a late exec callback) */
	bool stopping;
	bool released;	   /* api_server_stop returned: the last req frees srv */
	int async_threads; /* create/DELETE threads still running */
	struct req *suspended;
	struct api_files_ctx *files;
};

struct req {
	struct api_server *srv;
	struct MHD_Connection *conn;
	enum route route;
	char id[SANDBOX_ID_MAX];
	char account_id[SANDBOX_ID_MAX];
	struct sbx_buf body;
	bool too_large;

	/* exec; guarded by srv->lock from the moment the exec starts */
	struct api_exec_body exec;
	enum exec_state state;
	struct sandbox_exec_result res; /* buffers owned when has_res */
	bool has_res;
	struct sbx_error exec_err;
	struct sandbox_output_hold hold; /* the reply's output budget, until req_free */
	int refs;			 /* MHD's (until completed) + the exec callback's */

	/* create and DELETE take seconds (a boot, a domain destroy): they run
	 * on a thread of their own (async_main) and leave the answer here. */
	bool is_async;
	struct api_create_body create;
	struct api_files *files; /* R_FILES */
	char idem_key[256];
	bool has_idem_key;
	int op_rc; /* 0, or -1 with exec_err */
	unsigned out_status;
	char *out_body;
	size_t out_len;
	bool out_replayed;
	struct req *prev, *next;
};

/* ---------------------------------------------------------------- replies */

static void json_put_cb(void *cls)
{
	json_object_put(cls);
}

static enum MHD_Result reply_json(struct MHD_Connection *c, unsigned status, struct json_object *o,
				  int retry_after_s, const char *allow)
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
	ret = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result reply_error_allow(struct MHD_Connection *c, const struct sbx_error *err,
					 const char *allow)
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
	return reply_json(c, (unsigned)status, api_error_encode(&e), retry, allow);
}

static enum MHD_Result reply_error(struct MHD_Connection *c, const struct sbx_error *err)
{
	return reply_error_allow(c, err, NULL);
}

static enum MHD_Result reply_new_error(struct MHD_Connection *c, enum sbx_code code,
				       const char *param, const char *msg)
{
	struct sbx_error e;

	sbx_error_clear(&e);
	sbx_error_set(&e, code, param, "%s", msg);
	return reply_error(c, &e);
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
static enum route route_resolve(const char *url, char id[SANDBOX_ID_MAX])
{
	const char *rest;

	if (strcmp(url, "/v1/sandboxes") == 0)
		return R_SANDBOXES;
	if (strcmp(url, "/v1/usage") == 0)
		return R_USAGE;
	if (strcmp(url, "/v1/limits") == 0)
		return R_LIMITS;
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
		return R_NONE;
	}
	if (strncmp(url, "/v1/api_keys/", 13) == 0 && take_id(url + 13, id, &rest) && *rest == '\0')
		return R_KEY;
	return R_NONE;
}

static const char *route_allow(enum route r)
{
	switch (r) {
	case R_SANDBOXES:
	case R_KEYS:
		return "GET, POST";
	case R_SANDBOX:
		return "GET, DELETE";
	case R_EXEC:
	case R_EXTEND:
	case R_EXECUTIONS:
		return "POST";
	case R_EXECUTION:
	case R_RECEIPT:
	case R_RECEIPT_KEY:
		return "GET";
	case R_USAGE:
	case R_LIMITS:
		return "GET";
	case R_KEY:
		return "DELETE";
	case R_FILES:
		return "GET, PUT, DELETE";
	case R_NONE:
		break;
	}
	return "";
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
	return strcmp(method, "POST") == 0 && (r == R_SANDBOXES || r == R_EXEC || r == R_EXTEND ||
					       r == R_KEYS || r == R_EXECUTIONS);
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

static int authenticate(struct api_server *srv, struct MHD_Connection *c, char *account_id,
			struct sbx_error *err)
{
	const char *h =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	char token[API_TOKEN_MAX + 1];
	struct sbx_error e;

	sbx_error_clear(&e);
	if (bearer_token(h, token) && sandbox_authenticate(srv->svc, token, account_id, &e) == 0)
		return 0;
	if (e.code != SBX_OK && e.code != SBX_E_AUTHENTICATION) {
		*err = e; /* the store failed: not the tenant's fault */
		return -1;
	}
	return sbx_error_set(err, SBX_E_AUTHENTICATION, NULL,
			     "missing or invalid API key; send 'Authorization: Bearer "
			     "aas_sk_...' with a valid, unrevoked key");
}

/* The key's scopes must include `scope` (403 permission_error). */
static int require_scope(struct api_server *srv, struct MHD_Connection *c, const char *scope,
			 struct sbx_error *err)
{
	const char *h =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	char token[API_TOKEN_MAX + 1], account[SANDBOX_ID_MAX], scopes[128];

	if (!bearer_token(h, token) ||
	    sandbox_authenticate_scopes(srv->svc, token, account, scopes, err) < 0)
		return -1;
	if (!sandbox_scopes_have(scopes, scope))
		return sbx_error_set(err, SBX_E_PERMISSION, NULL,
				     "this API key lacks the '%s' scope; create a key with "
				     "'admin create-key ACCOUNT --scope %s'",
				     scope, scope);
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
	ret = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* The one-shot execution routes (sandbox/execution.c). A POST runs on this
 * worker until the program ends (<= execution_max_timeout_seconds). */
static enum MHD_Result handle_execution_routes(struct api_server *srv, struct req *r)
{
	struct sbx_error err;
	char *out = NULL, *pem = NULL;

	sbx_error_clear(&err);
	switch (r->route) {
	case R_EXECUTIONS: {
		struct api_execution_body b;
		int rc;

		if (api_execution_decode(r->body.data, r->body.len, &b, &err) < 0)
			return reply_error(r->conn, &err);
		rc = sandbox_execution_run(srv->svc, r->account_id, &b.req, &out, &err);
		free(b.code);
		if (rc < 0)
			return reply_error(r->conn, &err);
		break;
	}
	case R_EXECUTION:
		if (sandbox_execution_get(srv->svc, r->account_id, r->id, &out, &err) < 0)
			return reply_error(r->conn, &err);
		break;
	case R_RECEIPT:
		if (sandbox_receipt_get(srv->svc, r->account_id, r->id, &out, &err) < 0)
			return reply_error(r->conn, &err);
		break;
	default:
		if (sandbox_receipt_public_key(srv->svc, &out, &pem, &err) < 0)
			return reply_error(r->conn, &err);
		{
			struct json_object *o = json_object_new_object();

			json_object_object_add(o, "object", json_object_new_string("receipt_key"));
			json_object_object_add(o, "algorithm", json_object_new_string("Ed25519"));
			json_object_object_add(o, "signer", json_object_new_string(out));
			json_object_object_add(o, "public_key_pem", json_object_new_string(pem));
			free(out);
			free(pem);
			return reply_json(r->conn, 200, o, 0, NULL);
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

static enum MHD_Result handle_list(struct req *r)
{
	const char *status = query(r->conn, "status"), *limit_s = query(r->conn, "limit");
	const char *after = query(r->conn, "starting_after");
	struct sandbox_view *views = NULL;
	size_t n = 0;
	bool more = false;
	int limit = 20;
	struct sbx_error err;

	sbx_error_clear(&err);
	if (status && strcmp(status, "running") != 0 && strcmp(status, "destroyed") != 0 &&
	    strcmp(status, "expired") != 0 && strcmp(status, "failed") != 0)
		return reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "status",
				       "status must be one of running, destroyed, expired, failed");
	if (limit_s) {
		char *end;
		long v;
		errno = 0;
		v = strtol(limit_s, &end, 10);
		if (limit_s[0] < '0' || limit_s[0] > '9' || *end || errno || v < 1 || v > 100)
			return reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "limit",
					       "limit must be an integer from 1 to 100");
		limit = (int)v;
	}
	if (after && (!after[0] || strlen(after) >= SANDBOX_ID_MAX))
		return reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "starting_after",
				       "starting_after must be a sandbox id");
	if (sandbox_list(r->srv->svc, r->account_id, status, limit, after, &views, &n, &more,
			 &err) < 0)
		return reply_error(r->conn, &err);
	struct json_object *data = json_object_new_array();
	for (size_t i = 0; i < n; i++)
		json_object_array_add(data, api_sandbox_encode(&views[i]));
	free(views);
	return reply_json(r->conn, 200, list_encode(data, more), 0, NULL);
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
		return reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "from",
				       "from must be an RFC 3339 time like 2026-08-01T00:00:00Z");
	if (to_s && (sbx_rfc3339_parse(to_s, &to) < 0 || to <= 0))
		return reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "to",
				       "to must be an RFC 3339 time like 2026-09-01T00:00:00Z");
	if (from && to && to <= from)
		return reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "to",
				       "to must be later than from");
	if (gran && strcmp(gran, "day") != 0 && strcmp(gran, "hour") != 0)
		return reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "granularity",
				       "granularity must be 'day' or 'hour'");
	memset(&u, 0, sizeof(u));
	if (sandbox_usage(r->srv->svc, r->account_id, from, to, gran, &u, &err) < 0)
		return reply_error(r->conn, &err);
	ret = reply_json(r->conn, 200, api_usage_encode(&u), 0, NULL);
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
		enum MHD_Result ret;

		if (api_key_create_decode(r->body.data, r->body.len, &err) < 0)
			return reply_error(r->conn, &err);
		if (sandbox_key_create(r->srv->svc, r->account_id, &key, secret, &err) < 0)
			return reply_error(r->conn, &err);
		ret = reply_json(r->conn, 201, api_key_encode(&key, secret), 0, NULL);
		explicit_bzero(secret, sizeof(secret));
		return ret;
	}
	struct sandbox_key *keys = NULL;
	size_t n = 0;
	if (sandbox_key_list(r->srv->svc, r->account_id, &keys, &n, &err) < 0)
		return reply_error(r->conn, &err);
	struct json_object *data = json_object_new_array();
	for (size_t i = 0; i < n; i++)
		json_object_array_add(data, api_key_encode(&keys[i], NULL));
	free(keys);
	return reply_json(r->conn, 200, list_encode(data, false), 0, NULL);
}

static enum MHD_Result handle_key_revoke(struct req *r)
{
	struct sbx_error err;
	struct json_object *o;

	sbx_error_clear(&err);
	if (sandbox_key_revoke(r->srv->svc, r->account_id, r->id, &err) < 0)
		return reply_error(r->conn, &err);
	o = json_object_new_object();
	json_object_object_add(o, "id", json_object_new_string(r->id));
	json_object_object_add(o, "object", json_object_new_string("api_key"));
	json_object_object_add(o, "revoked", json_object_new_boolean(true));
	return reply_json(r->conn, 200, o, 0, NULL);
}

/* ------------------------------------------------------------------ exec */

static void req_free(struct req *r);

static void list_remove(struct api_server *srv, struct req *r)
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
static void park_locked(struct api_server *srv, struct req *r)
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
static void finish_locked(struct api_server *srv, struct req *r)
{
	if (r->state == EXEC_SUSPENDED) {
		list_remove(srv, r);
		MHD_resume_connection(r->conn);
	}
	r->state = EXEC_DONE;
}

/* Completion of sandbox_exec_start: any thread, maybe before it returned. */
static void exec_done(void *opaque, struct sandbox_exec_result *res, const struct sbx_error *err)
{
	struct req *r = opaque;
	struct api_server *srv = r->srv;
	bool free_now;

	/* *res is the caller's struct; its buffers become ours. */
	pthread_mutex_lock(&srv->lock);
	if (r->state == EXEC_RUNNING || r->state == EXEC_SUSPENDED) {
		if (res) {
			r->res = *res;
			r->has_res = true;
			res = NULL;
		} else {
			if (err)
				r->exec_err = *err;
			else
				sbx_error_set(&r->exec_err, SBX_E_INTERNAL, NULL,
					      "exec ended without a result");
		}
		finish_locked(srv, r);
	}
	free_now = --r->refs == 0;
	pthread_mutex_unlock(&srv->lock);
	if (res)
		sandbox_exec_result_release(res);
	if (free_now)
		req_free(r);
}

/* "receipt": true: sign the reply's exit_code/stdout/stderr as encoded in
 * `o` and add {"id", "hash", "signature", "signer", "url",
 * "fingerprint_salt"} (docs/receipts.md). */
static int exec_receipt_add(struct req *r, struct json_object *o,
			    const struct sandbox_exec_result *res, struct sbx_error *err)
{
	struct sandbox_exec_receipt rc;
	struct json_object *out = NULL, *errs = NULL, *j;
	char url[96];

	json_object_object_get_ex(o, "stdout", &out);
	json_object_object_get_ex(o, "stderr", &errs);
	sbx_error_clear(err);
	if (!out || !errs ||
	    sandbox_exec_receipt_sign(
		r->srv->svc, r->account_id, r->id, &r->exec.req, res->exit_code,
		json_object_get_string(out), (size_t)json_object_get_string_len(out),
		json_object_get_string(errs), (size_t)json_object_get_string_len(errs),
		res->duration_ms, res->timed_out, &rc, err) < 0) {
		sbx_warn(MOD, "sandbox %s: exec receipt: %s", r->id, err->message);
		sbx_error_clear(err);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL,
				     "the command ran but its receipt could not be signed");
	}
	snprintf(url, sizeof(url), "/v1/receipts/%s", rc.id);
	j = json_object_new_object();
	json_object_object_add(j, "id", json_object_new_string(rc.id));
	json_object_object_add(j, "hash", json_object_new_string(rc.hash));
	json_object_object_add(j, "signature", json_object_new_string(rc.signature));
	json_object_object_add(j, "signer", json_object_new_string(rc.signer));
	json_object_object_add(j, "url", json_object_new_string(url));
	json_object_object_add(j, "fingerprint_salt", json_object_new_string(rc.salt));
	json_object_object_add(o, "receipt", j);
	return 0;
}

static enum MHD_Result exec_answer(struct req *r)
{
	struct api_server *srv = r->srv;
	struct sandbox_exec_result res;
	enum exec_state state;
	struct sbx_error err;
	enum MHD_Result ret;
	bool has_res;

	pthread_mutex_lock(&srv->lock);
	state = r->state;
	res = r->res;
	has_res = r->has_res;
	r->has_res = false;
	memset(&r->res, 0, sizeof(r->res));
	err = r->exec_err;
	pthread_mutex_unlock(&srv->lock);
	if (state == EXEC_ABORTED) {
		if (has_res)
			sandbox_exec_result_release(&res);
		sbx_error_clear(&err);
		sbx_error_set(&err, SBX_E_SERVICE_UNAVAILABLE, NULL,
			      "the service is shutting down; the command may still be running, "
			      "retry on the restarted service");
		err.retry_after_s = 5;
		return reply_error(r->conn, &err);
	}
	if (!has_res)
		return reply_error(r->conn, &err);
	struct json_object *o = api_exec_result_encode(&res, r->exec.base64);
	if (o && r->exec.receipt && exec_receipt_add(r, o, &res, &err) < 0) {
		json_object_put(o);
		sandbox_exec_result_release(&res);
		return reply_error(r->conn, &err);
	}
	/* the raw streams are copied into o: let them go before the reply is
	 * held for a slow reader */
	sandbox_exec_result_release(&res);
	ret = reply_json(r->conn, 200, o, 0, NULL);
	return ret;
}

static enum MHD_Result handle_exec(struct req *r)
{
	struct api_server *srv = r->srv;
	struct sbx_error err;

	sbx_error_clear(&err);
	if (api_exec_decode(r->body.data, r->body.len, srv->cfg, &r->exec, &err) < 0)
		return reply_error(r->conn, &err);
	r->exec.req.base64 = r->exec.base64;
	r->exec.req.hold = &r->hold;

	pthread_mutex_lock(&srv->lock);
	if (srv->stopping) {
		pthread_mutex_unlock(&srv->lock);
		return reply_new_error(r->conn, SBX_E_SERVICE_UNAVAILABLE, NULL,
				       "the service is shutting down; retry shortly");
	}
	r->state = EXEC_RUNNING;
	r->refs++;
	pthread_mutex_unlock(&srv->lock);

	if (sandbox_exec_start(srv->svc, r->account_id, r->id, &r->exec.req, exec_done, r, &err) <
	    0) {
		pthread_mutex_lock(&srv->lock);
		r->state = EXEC_NONE;
		r->refs--;
		pthread_mutex_unlock(&srv->lock);
		return reply_error(r->conn, &err);
	}

	pthread_mutex_lock(&srv->lock);
	if (r->state == EXEC_DONE) {
		pthread_mutex_unlock(&srv->lock);
		return exec_answer(r);
	}
	if (srv->stopping) {
		r->state = EXEC_ABORTED;
		pthread_mutex_unlock(&srv->lock);
		return exec_answer(r);
	}
	/* No worker thread waits on the guest: MHD parks the connection until
	 * exec_done resumes it, then calls the handler again. */
	park_locked(srv, r);
	pthread_mutex_unlock(&srv->lock);
	return MHD_YES;
}

/* ---------------------------------------------------------------- create */

/* Send exact bytes as a JSON reply (an idempotent create's answer). */
static enum MHD_Result reply_bytes(struct MHD_Connection *c, unsigned status, const char *body,
				   size_t len, bool replayed)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	if (replayed)
		MHD_add_response_header(resp, "Idempotent-Replayed", "true");
	ret = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* Render a JSON object into r->out_body (owned). 0 or -1. */
static int out_json(struct req *r, unsigned status, struct json_object *o)
{
	const char *text;
	size_t len = 0;

	if (!o)
		return -1;
	text = json_object_to_json_string_length(
	    o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
	r->out_body = text ? malloc(len + 1) : NULL;
	if (r->out_body) {
		memcpy(r->out_body, text, len + 1);
		r->out_len = len;
		r->out_status = status;
	}
	json_object_put(o);
	return r->out_body ? 0 : -1;
}

/* POST /v1/sandboxes, on its own thread. With an Idempotency-Key the 201
 * body is rendered here, handed to sandbox/ to remember byte for byte,
 * then sent; a replay sends the remembered bytes with
 * 'Idempotent-Replayed: true'. Rendering and remembering happen on this
 * thread, so a client that hung up still leaves the key completed. */
static int create_work(struct req *r, struct sbx_error *err)
{
	struct api_server *srv = r->srv;
	struct sandbox_create_result res;
	const char *key = r->has_idem_key ? r->idem_key : NULL;

	r->create.req.idempotency_key = key;
	if (sandbox_create_idempotent(srv->svc, r->account_id, &r->create.req, &res, err) < 0)
		return -1;
	if (res.replayed && !res.body) {
		/* The first create's sandbox, whose answer a crash lost: render
		 * it now and remember it, so later replays are these bytes. */
		if (out_json(r, 201, api_sandbox_encode(&res.view)) < 0) {
			sandbox_create_result_release(&res);
			return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		}
		r->out_replayed = true;
		sandbox_idempotency_complete(srv->svc, r->account_id, key, res.view.id, 201,
					     r->out_body, r->out_len, NULL);
		sandbox_create_result_release(&res);
		return 0;
	}
	if (res.replayed) {
		r->out_body = malloc(res.body_len + 1);
		if (r->out_body) {
			memcpy(r->out_body, res.body, res.body_len);
			r->out_body[res.body_len] = '\0';
			r->out_len = res.body_len;
			r->out_status = (unsigned)res.status;
			r->out_replayed = true;
		}
		sandbox_create_result_release(&res);
		return r->out_body ? 0 : sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	}
	if (out_json(r, 201, api_sandbox_encode(&res.view)) < 0) {
		if (key)
			sandbox_idempotency_release(srv->svc, r->account_id, key);
		sandbox_create_result_release(&res);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	}
	if (key && sandbox_idempotency_complete(srv->svc, r->account_id, key, res.view.id, 201,
						r->out_body, r->out_len, err) < 0)
		sbx_warn(MOD, "sandbox %s: its Idempotency-Key was not remembered", res.view.id);
	sandbox_create_result_release(&res);
	return 0;
}

static int delete_work(struct req *r, struct sbx_error *err)
{
	struct sandbox_view v;

	memset(&v, 0, sizeof(v));
	if (sandbox_destroy(r->srv->svc, r->account_id, r->id, &v, err) < 0)
		return -1;
	if (out_json(r, 200, api_sandbox_encode(&v)) < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	return 0;
}

static void *async_main(void *arg)
{
	struct req *r = arg;
	struct api_server *srv = r->srv;
	struct sbx_error err;
	bool free_now;
	int rc;

	sbx_error_clear(&err);
	rc = r->route == R_SANDBOXES ? create_work(r, &err) : delete_work(r, &err);
	pthread_mutex_lock(&srv->lock);
	r->op_rc = rc;
	if (rc < 0)
		r->exec_err = err;
	if (r->state == EXEC_RUNNING || r->state == EXEC_SUSPENDED) {
		finish_locked(srv, r);
	}
	free_now = --r->refs == 0;
	srv->async_threads--;
	pthread_cond_broadcast(&srv->idle);
	pthread_mutex_unlock(&srv->lock);
	if (free_now)
		req_free(r);
	return NULL;
}

/* The answer of a finished create/DELETE (on MHD's thread). */
static enum MHD_Result async_answer(struct req *r)
{
	struct api_server *srv = r->srv;
	enum exec_state state;
	struct sbx_error err;

	pthread_mutex_lock(&srv->lock);
	state = r->state;
	err = r->exec_err;
	pthread_mutex_unlock(&srv->lock);
	if (state == EXEC_ABORTED) {
		sbx_error_clear(&err);
		sbx_error_set(&err, SBX_E_SERVICE_UNAVAILABLE, NULL,
			      "the service is shutting down; retry on the restarted service");
		err.retry_after_s = 5;
		return reply_error(r->conn, &err);
	}
	if (r->op_rc < 0)
		return reply_error(r->conn, &err);
	return reply_bytes(r->conn, r->out_status, r->out_body, r->out_len, r->out_replayed);
}

/* Start create/DELETE on a thread and park the connection (like exec): a
 * burst of creates then queues for boot slots in sandbox/, not for HTTP
 * workers, and GETs keep being answered. */
static enum MHD_Result run_async(struct req *r)
{
	struct api_server *srv = r->srv;
	pthread_attr_t attr;
	pthread_t t;
	int rc;

	pthread_mutex_lock(&srv->lock);
	if (srv->stopping) {
		pthread_mutex_unlock(&srv->lock);
		return reply_new_error(r->conn, SBX_E_SERVICE_UNAVAILABLE, NULL,
				       "the service is shutting down; retry shortly");
	}
	r->is_async = true;
	r->state = EXEC_RUNNING;
	r->refs++;
	srv->async_threads++;
	pthread_mutex_unlock(&srv->lock);

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &attr, async_main, r);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		pthread_mutex_lock(&srv->lock);
		r->is_async = false;
		r->state = EXEC_NONE;
		r->refs--;
		srv->async_threads--;
		pthread_mutex_unlock(&srv->lock);
		return reply_new_error(r->conn, SBX_E_SERVICE_UNAVAILABLE, NULL,
				       "the service is busy; retry shortly");
	}
	pthread_mutex_lock(&srv->lock);
	if (r->state == EXEC_DONE) {
		pthread_mutex_unlock(&srv->lock);
		return async_answer(r);
	}
	park_locked(srv, r);
	pthread_mutex_unlock(&srv->lock);
	return MHD_YES;
}

static enum MHD_Result handle_create(struct req *r)
{
	struct sbx_error err;
	const char *key;

	sbx_error_clear(&err);
	if (api_create_decode(r->body.data, r->body.len, r->srv->cfg, &r->create, &err) < 0)
		return reply_error(r->conn, &err);
	key = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Idempotency-Key");
	if (key) {
		/* The key must outlive the connection (the create thread may).
		 * One longer than 255 characters cannot be a valid key: keep it
		 * invalid (a non-printable byte) so sandbox/ answers 400. */
		size_t n = strlen(key);

		if (n >= sizeof(r->idem_key)) {
			memcpy(r->idem_key, key, sizeof(r->idem_key) - 2);
			r->idem_key[sizeof(r->idem_key) - 2] = '\x01';
			r->idem_key[sizeof(r->idem_key) - 1] = '\0';
		} else {
			memcpy(r->idem_key, key, n + 1);
		}
		r->has_idem_key = true;
	}
	return run_async(r);
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
		return reply_json(r->conn, 200, api_limits_encode_stats(srv->cfg, &st), 0, NULL);
	}
	case R_USAGE:
		return handle_usage(r);
	case R_KEYS:
		return handle_keys(r, method);
	case R_KEY:
		return handle_key_revoke(r);
	case R_EXEC:
		return handle_exec(r);
	case R_SANDBOXES:
		if (strcmp(method, "GET") == 0)
			return handle_list(r);
		return handle_create(r);
	case R_SANDBOX:
		if (strcmp(method, "GET") != 0)
			return run_async(r); /* DELETE: destroying a domain takes ~1 s */
		if (sandbox_get(srv->svc, r->account_id, r->id, &v, &err) < 0)
			return reply_error(r->conn, &err);
		return reply_json(r->conn, 200, api_sandbox_encode(&v), 0, NULL);
	case R_EXTEND: {
		int minutes = 0;
		if (api_extend_decode(r->body.data, r->body.len, srv->cfg, &minutes, &err) < 0)
			return reply_error(r->conn, &err);
		if (sandbox_extend(srv->svc, r->account_id, r->id, minutes, &v, &err) < 0)
			return reply_error(r->conn, &err);
		return reply_json(r->conn, 200, api_sandbox_encode(&v), 0, NULL);
	}
	case R_EXECUTIONS:
	case R_EXECUTION:
	case R_RECEIPT:
	case R_RECEIPT_KEY:
		return handle_execution_routes(srv, r);
	case R_FILES: /* handled by http_files.c before dispatch */
	case R_NONE:
		break;
	}
	return reply_new_error(r->conn, SBX_E_NOT_FOUND, NULL, "unknown endpoint");
}

/* First call for a request: headers only. Route, method, auth and the
 * declared length are checked here, before any body is read. */
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
	sbx_buf_init(&r->body, srv->cfg->max_body_bytes);
	pthread_mutex_lock(&srv->lock);
	srv->inflight++;
	srv->live_reqs++;
	pthread_mutex_unlock(&srv->lock);
	*con_cls = r;

	sbx_error_clear(&err);
	r->route = route_resolve(url, r->id);
	if (r->route == R_NONE) {
		char shown[80];
		size_t i = 0;
		for (; url[i] && i < 64; i++)
			shown[i] =
			    (url[i] > 0x20 && url[i] < 0x7f && url[i] != '\'') ? url[i] : '?';
		shown[i] = '\0';
		sbx_error_set(&err, SBX_E_NOT_FOUND, NULL,
			      "unknown endpoint '%s %s'; see docs/api.md for the endpoints",
			      strlen(method) < 10 ? method : "?", shown);
		return reply_error(c, &err);
	}
	if (!method_allowed(r->route, method)) {
		sbx_error_set(&err, SBX_E_METHOD_NOT_ALLOWED, NULL,
			      "method not allowed here; use %s", route_allow(r->route));
		return reply_error_allow(c, &err, route_allow(r->route));
	}
	if (r->route != R_LIMITS && authenticate(srv, c, r->account_id, &err) < 0)
		return reply_error(c, &err);
	if ((r->route == R_EXECUTIONS || r->route == R_EXECUTION) &&
	    require_scope(srv, c, "sandboxes", &err) < 0)
		return reply_error(c, &err);
	if (r->route == R_FILES) /* streams its body: max_file_bytes, not max_body_bytes */
		return api_files_begin(srv->files, c, method, r->account_id, r->id, &r->files);
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
			return reply_error(c, &err);
		}
	}
	return MHD_YES;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
			       const char *method, const char *version, const char *upload_data,
			       size_t *upload_data_size, void **con_cls)
{
	struct api_server *srv = cls;
	struct req *r = *con_cls;
	struct sbx_error err;

	if (!r)
		return request_begin(srv, c, url, method, con_cls);
	if (r->route == R_FILES)
		return api_files_step(r->files, upload_data, upload_data_size);
	if (*upload_data_size) {
		/* Keep at most max_body_bytes; past that, read and drop. */
		if (!r->too_large && sbx_buf_append(&r->body, upload_data, *upload_data_size) < 0) {
			r->too_large = true;
			sbx_buf_release(&r->body);
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (r->state != EXEC_NONE) /* resumed */
		return r->is_async ? async_answer(r) : exec_answer(r);

	sbx_error_clear(&err);
	if (r->too_large) {
		sbx_error_set(&err, SBX_E_PAYLOAD_TOO_LARGE, NULL,
			      "the request body is larger than %zu bytes",
			      srv->cfg->max_body_bytes);
		return reply_error(c, &err);
	}
	if (r->body.len > 0 && route_has_body(r->route, method)) {
		const char *ct =
		    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
		if (ct && !content_type_json(ct))
			return reply_new_error(c, SBX_E_UNSUPPORTED_MEDIA_TYPE, NULL,
					       "send the body as 'Content-Type: application/json'");
	}
	return dispatch(r, method);
}

static void req_free(struct req *r)
{
	struct api_server *srv = r->srv;
	bool free_srv;

	sbx_buf_release(&r->body);
	api_files_free(r->files);
	api_exec_body_release(&r->exec);
	if (r->has_res)
		sandbox_exec_result_release(&r->res);
	/* the reply was sent (or never will be): its budget goes back */
	sandbox_output_release(srv->svc, &r->hold);
	free(r->out_body);
	free(r);
	pthread_mutex_lock(&srv->lock);
	free_srv = --srv->live_reqs == 0 && srv->released;
	pthread_mutex_unlock(&srv->lock);
	if (free_srv) {
		pthread_mutex_destroy(&srv->lock);
		pthread_cond_destroy(&srv->idle);
		free(srv);
	}
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
	pthread_mutex_lock(&srv->lock);
	if (r->state == EXEC_SUSPENDED)
		list_remove(srv, r);
	if (r->state == EXEC_RUNNING || r->state == EXEC_SUSPENDED)
		r->state = EXEC_ABORTED; /* the late callback only drops its ref */
	free_now = --r->refs == 0;
	srv->inflight--;
	pthread_cond_broadcast(&srv->idle);
	pthread_mutex_unlock(&srv->lock);
	if (free_now)
		req_free(r);
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
	pthread_mutex_init(&srv->lock, NULL);
	pthread_cond_init(&srv->idle, NULL);
	srv->files = api_files_ctx_new(svc, cfg);

	srv->daemon = MHD_start_daemon(
	    MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
		MHD_USE_ITC,
	    ntohs(sa.sin_port), NULL, NULL, handler, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv,
	    MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)&sa, MHD_OPTION_THREAD_POOL_SIZE,
	    threads, MHD_OPTION_CONNECTION_LIMIT, (unsigned)API_CONNECTION_LIMIT,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)API_IDLE_TIMEOUT_S,
	    MHD_OPTION_NOTIFY_COMPLETED, completed, srv, MHD_OPTION_END);
	if (!srv->daemon) {
		sbx_error_set(err, SBX_E_INTERNAL, "listen", "cannot listen on '%s': %s",
			      cfg->listen, strerror(errno));
		api_files_ctx_free(srv->files);
		pthread_mutex_destroy(&srv->lock);
		pthread_cond_destroy(&srv->idle);
		free(srv);
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
	while (srv->suspended) {
		struct req *r = srv->suspended;
		list_remove(srv, r);
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
	/* Create/DELETE threads still use the service, which the caller frees
	 * next: wait for them (a boot ends by boot_timeout_ms). */
	pthread_mutex_lock(&srv->lock);
	while (srv->async_threads > 0)
		pthread_cond_wait(&srv->idle, &srv->lock);
	pthread_mutex_unlock(&srv->lock);
	MHD_stop_daemon(srv->daemon);
	srv->daemon = NULL;
	api_files_ctx_free(srv->files);
	srv->files = NULL;
	if (srv->listen_fd != MHD_INVALID_SOCKET)
		close(srv->listen_fd);
	srv->listen_fd = MHD_INVALID_SOCKET;
	pthread_mutex_lock(&srv->lock);
	srv->released = true;
	free_srv = srv->live_reqs == 0;
	pthread_mutex_unlock(&srv->lock);
	if (free_srv) {
		pthread_mutex_destroy(&srv->lock);
		pthread_cond_destroy(&srv->idle);
		free(srv);
	}
}
