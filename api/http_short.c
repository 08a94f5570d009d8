/* api/http_short.c: the handlers of the route table (api/routes.c) that
 * are not another file's: the short requests, answered on MHD's thread
 * from one sandbox/ call (list, get, extend, usage, limits, runtimes,
 * keys, an execution, a receipt), and the routes whose methods go to
 * different files (a create or a DELETE runs on the pool, http_async.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http-priv.h"

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
	struct sandbox_metadata filter;
	struct sandbox_view *views = NULL;
	size_t n = 0;
	bool more = false;
	int limit = 20;
	struct sbx_error err;

	sbx_error_clear(&err);
	/* status is checked by sandbox_list_labeled (its one list of names) */
	if (!query_limit(r, 20, &limit))
		return api_reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "limit",
					   "limit must be an integer from 1 to 100");
	if (after && (!after[0] || strlen(after) >= SANDBOX_ID_MAX))
		return api_reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "starting_after",
					   "starting_after must be a sandbox id");
	if (api_metadata_filter(r->conn, &filter, &err) < 0)
		return api_reply_error(r->conn, &err);
	if (sandbox_list_labeled(r->srv->svc, r->account_id, status, &filter, limit, after, &views,
				 &n, &more, &err) < 0)
		return api_reply_error(r->conn, &err);
	struct json_object *data = json_object_new_array();
	for (size_t i = 0; i < n; i++)
		json_object_array_add(data, api_sandbox_encode(&views[i]));
	free(views);
	return api_reply_json(r->conn, 200, api_list_encode(data, more), 0, NULL);
}

enum MHD_Result api_usage_handle(struct req *r)
{
	const char *from_s = query(r->conn, "from"), *to_s = query(r->conn, "to");
	const char *gran = query(r->conn, "granularity");
	const char *group_by = query(r->conn, "group_by");
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
	if (group_by && strncmp(group_by, "metadata.", 9) != 0)
		return api_reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "group_by",
					   "group_by must be metadata.KEY");
	memset(&u, 0, sizeof(u));
	if (sandbox_usage_grouped(r->srv->svc, r->account_id, from, to, gran,
				  group_by ? group_by + 9 : NULL, &u, &err) < 0)
		return api_reply_error(r->conn, &err);
	ret = api_reply_json(r->conn, 200, api_usage_encode(&u), 0, NULL);
	sandbox_usage_release(&u);
	return ret;
}

/* ------------------------------------------------------------------- keys */

enum MHD_Result api_keys_handle(struct req *r)
{
	struct sbx_error err;

	sbx_error_clear(&err);
	if (r->method == API_POST) {
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
	return api_reply_json(r->conn, 200, api_list_encode(data, more), 0, NULL);
}

enum MHD_Result api_key_revoke_handle(struct req *r)
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

/* ------------------------------------------------------------- sandboxes */

enum MHD_Result api_sandboxes_handle(struct req *r)
{
	if (r->method == API_GET)
		return handle_list(r);
	return api_create_handle(r);
}

enum MHD_Result api_sandbox_handle(struct req *r)
{
	struct sandbox_view v;
	struct sbx_error err;

	if (r->method == API_DELETE)
		return api_async_run(r); /* destroying a domain takes ~1 s */
	sbx_error_clear(&err);
	memset(&v, 0, sizeof(v));
	if (r->method == API_POST) { /* an update: its metadata */
		struct sandbox_metadata patch;
		bool clear;

		if (api_update_decode(r->body.data, r->body.len, &patch, &clear, &err) < 0 ||
		    sandbox_metadata_update(r->srv->svc, r->account_id, r->id, clear, &patch, &v,
					    &err) < 0)
			return api_reply_error(r->conn, &err);
		return api_reply_json(r->conn, 200, api_sandbox_encode(&v), 0, NULL);
	}
	if (sandbox_get(r->srv->svc, r->account_id, r->id, &v, &err) < 0)
		return api_reply_error(r->conn, &err);
	return api_reply_json(r->conn, 200, api_sandbox_encode(&v), 0, NULL);
}

enum MHD_Result api_extend_handle(struct req *r)
{
	struct sandbox_view v;
	struct sbx_error err;
	int minutes = 0;

	sbx_error_clear(&err);
	memset(&v, 0, sizeof(v));
	if (api_timeout_decode(r->body.data, r->body.len, r->srv->cfg, true, &minutes, &err) < 0)
		return api_reply_error(r->conn, &err);
	if (sandbox_extend(r->srv->svc, r->account_id, r->id, minutes, &v, &err) < 0)
		return api_reply_error(r->conn, &err);
	return api_reply_json(r->conn, 200, api_sandbox_encode(&v), 0, NULL);
}

/* POST /v1/sandboxes/{id}/network (docs/network.md): the body is the
 * policy; the sandbox with it is the answer. */
enum MHD_Result api_network_handle(struct req *r)
{
	struct sandbox_view *v = calloc(1, sizeof(*v));
	char *json = malloc(NET_POLICY_JSON_MAX);
	struct sbx_error err;
	enum MHD_Result rc;

	sbx_error_clear(&err);
	if (!v || !json)
		sbx_error_set(&err, SBX_E_INTERNAL, NULL, "out of memory");
	else if (api_network_body_decode(r->body.data, r->body.len, r->srv->cfg, json, &err) == 0)
		sandbox_network_set(r->srv->svc, r->account_id, r->id, json, v, &err);
	rc = err.code != SBX_OK ? api_reply_error(r->conn, &err)
				: api_reply_json(r->conn, 200, api_sandbox_encode(v), 0, NULL);
	free(v);
	free(json);
	return rc;
}

/* GET /v1/sandboxes/{id}/metrics (docs/api.md "Metrics"): the samples
 * held, oldest first; memory is the guest's word (null: not reported). */
enum MHD_Result api_sandbox_metrics_handle(struct req *r)
{
	struct sandbox_guest_metrics m;
	struct sbx_error err;
	struct json_object *o, *a;

	sbx_error_clear(&err);
	if (sandbox_guest_metrics_get(r->srv->svc, r->account_id, r->id, &m, &err) < 0)
		return api_reply_error(r->conn, &err);
	o = json_object_new_object();
	a = json_object_new_array();
	json_object_object_add(o, "object", json_object_new_string("sandbox_metrics"));
	json_object_object_add(o, "sandbox_id", json_object_new_string(r->id));
	json_object_object_add(o, "interval_ms", json_object_new_int64(m.interval_ms));
	json_object_object_add(o, "history", json_object_new_int64((int64_t)m.history));
	for (size_t i = 0; i < m.n; i++) {
		const struct sandbox_guest_sample *s = &m.samples[i];
		struct json_object *e = json_object_new_object();
		char num[32];

		json_object_object_add(e, "at", api_time_encode(s->at_ms));
		/* three decimals are all a sample means */
		snprintf(num, sizeof(num), "%.3f", s->cpu_cores);
		json_object_object_add(e, "cpu_cores",
				       json_object_new_double_s(strtod(num, NULL), num));
		json_object_object_add(
		    e, "memory_used_mib",
		    s->memory_used_mib < 0 ? NULL : json_object_new_int64(s->memory_used_mib));
		json_object_object_add(e, "memory_guest_reported", json_object_new_boolean(true));
		json_object_object_add(
		    e, "disk_used_mib",
		    s->disk_used_mib < 0 ? NULL : json_object_new_int64(s->disk_used_mib));
		json_object_array_add(a, e);
	}
	json_object_object_add(o, "samples", a);
	sandbox_guest_metrics_release(&m);
	return api_reply_json(r->conn, 200, o, 0, NULL);
}

enum MHD_Result api_limits_handle(struct req *r)
{
	struct sandbox_startup_stats st;

	sandbox_startup_stats(r->srv->svc, &st);
	return api_reply_json(r->conn, 200, api_limits_encode_stats(r->srv->cfg, &st), 0, NULL);
}

enum MHD_Result api_runtimes_handle(struct req *r)
{
	return api_reply_json(r->conn, 200, api_runtimes_encode(&r->srv->runtimes), 0, NULL);
}

/* ------------------------------------------------------------ executions */

/* The one-shot execution routes (sandbox/execution.c). A POST runs on the
 * pool (http_async.c). */
enum MHD_Result api_executions_handle(struct req *r)
{
	if (r->method == API_GET)
		return api_execution_list_handle(r);
	return api_execution_handle(r);
}

enum MHD_Result api_execution_get_handle(struct req *r)
{
	struct sbx_error err;
	char *out = NULL;

	sbx_error_clear(&err);
	if (sandbox_execution_get(r->srv->svc, r->account_id, r->id, &out, &err) < 0)
		return api_reply_error(r->conn, &err);
	return api_reply_text(r->conn, 200, out, "application/json");
}

enum MHD_Result api_receipt_handle(struct req *r)
{
	struct sbx_error err;
	char *out = NULL;

	sbx_error_clear(&err);
	if (sandbox_receipt_get(r->srv->svc, r->account_id, r->id, &out, &err) < 0)
		return api_reply_error(r->conn, &err);
	return api_reply_text(r->conn, 200, out, "application/json");
}

enum MHD_Result api_receipt_key_handle(struct req *r)
{
	struct sbx_error err;
	struct json_object *o;
	char *out = NULL, *pem = NULL;

	sbx_error_clear(&err);
	if (sandbox_receipt_public_key(r->srv->svc, &out, &pem, &err) < 0)
		return api_reply_error(r->conn, &err);
	o = json_object_new_object();
	json_object_object_add(o, "object", json_object_new_string("receipt_key"));
	json_object_object_add(o, "algorithm", json_object_new_string("Ed25519"));
	json_object_object_add(o, "signer", json_object_new_string(out));
	json_object_object_add(o, "public_key_pem", json_object_new_string(pem));
	free(out);
	free(pem);
	return api_reply_json(r->conn, 200, o, 0, NULL);
}

/* -------------------------------------------------- other files' routes */

enum MHD_Result api_processes_route(struct req *r)
{
	return api_processes_handle(r, api_method_name(r->method));
}

/* A transfer holds its connection until its reply was sent, and streams
 * its body (max_file_bytes, not max_body_bytes): from the headers on, the
 * whole of it (body, work and reply) has file_transfer_timeout_ms, and the
 * minimum-progress rule of http_files.c cuts a trickle sooner. */
enum MHD_Result api_files_route(struct req *r)
{
	struct sbx_error err;

	sbx_error_clear(&err);
	if (api_req_slot_take(r, API_INFLIGHT_FILES, &err) < 0)
		return api_reply_reject(r->conn, &err, NULL);
	api_conn_deadline(r->conn, r->srv->cfg->file_transfer_timeout_ms);
	return api_files_begin(r->srv->files, r->conn, api_method_name(r->method), r->account_id,
			       r->id, &r->files);
}

enum MHD_Result api_static_route(struct req *r)
{
	return api_static_reply(r->conn, r->asset);
}
