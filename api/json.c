/* api/json.c: response encoders (json-c), and the helpers they share
 * with the request decoders (decode.c). Pure
 * functions: no HTTP here, so the unit tests and the fuzzer reach them
 * directly through api-priv.h. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "api-priv.h"

#define MOD "api"

/* ------------------------------------------------------------- helpers */

void api_usd_format(int64_t micro, char buf[static 32])
{
	uint64_t m = micro < 0 ? (uint64_t)0 - (uint64_t)micro : (uint64_t)micro;

	snprintf(buf, 32, "%s%llu.%06llu", micro < 0 ? "-" : "", (unsigned long long)(m / 1000000),
		 (unsigned long long)(m % 1000000));
}

int api_usd_parse(const char *s, int64_t *micro, struct sbx_error *err)
{
	uint64_t whole = 0, frac = 0;
	size_t i = 0, nd = 0, nf = 0;

	if (!s)
		goto bad;
	for (; s[i] >= '0' && s[i] <= '9'; i++, nd++) {
		if (whole > (uint64_t)INT64_MAX / 10)
			goto bad;
		whole = whole * 10 + (uint64_t)(s[i] - '0');
	}
	if (nd == 0)
		goto bad;
	if (s[i] == '.') {
		for (i++; s[i] >= '0' && s[i] <= '9'; i++, nf++) {
			if (nf == 6)
				goto bad;
			frac = frac * 10 + (uint64_t)(s[i] - '0');
		}
		if (nf == 0)
			goto bad;
	}
	if (s[i] != '\0')
		goto bad;
	for (size_t k = nf; k < 6; k++)
		frac *= 10;
	if (whole > ((uint64_t)INT64_MAX - frac) / 1000000)
		goto bad;
	*micro = (int64_t)(whole * 1000000 + frac);
	return 0;
bad:
	return sbx_error_set(err, SBX_E_INVALID_REQUEST, "credit_usd",
			     "amount must be a decimal number of dollars with at most 6 "
			     "decimals, like '25' or '0.5'");
}

static bool is_json_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Members of every object in the tree. */
static size_t json_members(struct json_object *o)
{
	size_t n = 0;

	if (json_object_is_type(o, json_type_object)) {
		json_object_object_foreach(o, key, val)
		{
			(void)key;
			n += 1 + json_members(val);
		}
	} else if (json_object_is_type(o, json_type_array)) {
		for (size_t i = 0; i < json_object_array_length(o); i++)
			n += json_members(json_object_array_get_idx(o, i));
	}
	return n;
}

bool api_json_has_duplicate_keys(const char *text, size_t len, struct json_object *parsed)
{
	size_t names = 0;

	/* The text is valid JSON: a member name is a string whose next
	 * non-space byte is ':'. */
	for (size_t i = 0; i < len; i++) {
		if (text[i] != '"')
			continue;
		for (i++; i < len && text[i] != '"'; i++)
			if (text[i] == '\\')
				i++;
		size_t k = i + 1;
		while (k < len && is_json_space(text[k]))
			k++;
		if (k < len && text[k] == ':')
			names++;
	}
	return names != json_members(parsed);
}

/* "not valid JSON: WHAT at line L, column C (byte B)" for the byte at
 * `at` (0-based; the column counts bytes). */
static void not_json(const char *body, size_t len, size_t at, const char *what,
		     struct sbx_error *err)
{
	size_t line = 1, col = 1;

	at = SBX_MIN(at, len);
	for (size_t i = 0; i < at; i++, col++)
		if (body[i] == '\n') {
			line++;
			col = 0;
		}
	sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
		      "the request body is not valid JSON: %s at line %zu, column %zu (byte %zu)",
		      what, line, col, at);
}

struct json_object *api_json_parse_object(const char *body, size_t len, struct sbx_error *err)
{
	struct json_tokener *tok;
	struct json_object *obj;
	enum json_tokener_error jerr;
	size_t end;

	size_t k = 0;
	while (k < len && is_json_space(body[k]))
		k++;
	if (k == len)
		return json_object_new_object();
	if (len > INT_MAX) {
		sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
			      "the request body is not valid JSON");
		return NULL;
	}
	if (memchr(body, '\0', len)) {
		not_json(body, len, (size_t)((const char *)memchr(body, '\0', len) - body),
			 "a NUL byte", err);
		return NULL;
	}
	tok = json_tokener_new_ex(API_JSON_MAX_DEPTH);
	if (!tok) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		return NULL;
	}
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	obj = json_tokener_parse_ex(tok, body, (int)len);
	jerr = json_tokener_get_error(tok);
	end = json_tokener_get_parse_end(tok);
	if (jerr == json_tokener_continue) {
		/* A bare number ("123") is only complete once something follows
		 * it: end the input with a space. Anything else still waiting
		 * (an open object or string) stays incomplete. */
		obj = json_tokener_parse_ex(tok, " ", 1);
		jerr = json_tokener_get_error(tok);
		end = len;
	}
	json_tokener_free(tok);
	if (jerr == json_tokener_success) {
		while (end < len && is_json_space(body[end]))
			end++;
	}
	/* json-c parses `null` to NULL with success: valid JSON, not an object. */
	if (jerr == json_tokener_success && !obj && end == len) {
		sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
			      "the request body must be a JSON object");
		return NULL;
	}
	if (jerr != json_tokener_success || !obj || end != len) {
		json_object_put(obj);
		if (jerr == json_tokener_continue)
			not_json(body, len, len, "it ends in the middle of a value", err);
		else if (jerr != json_tokener_success)
			not_json(body, len, end, json_tokener_error_desc(jerr), err);
		else
			not_json(body, len, end, "more data after the JSON value", err);
		return NULL;
	}
	if (!json_object_is_type(obj, json_type_object)) {
		json_object_put(obj);
		sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
			      "the request body must be a JSON object");
		return NULL;
	}
	if (api_json_has_duplicate_keys(body, len, obj)) {
		json_object_put(obj);
		sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
			      "the request body names a field more than once");
		return NULL;
	}
	return obj;
}

void api_json_field_name(const char *key, char out[static 48])
{
	size_t i = 0;

	for (; key[i] && i < 40; i++)
		out[i] = (key[i] >= 0x20 && key[i] < 0x7f && key[i] != '\'') ? key[i] : '?';
	out[i] = '\0';
	if (key[i])
		strcpy(out + i, "...");
}

static int unknown_field(const char *key, struct sbx_error *err)
{
	char name[48];

	api_json_field_name(key, name);
	return sbx_error_set(err, SBX_E_INVALID_REQUEST, name, "unknown field '%s'", name);
}

int api_json_unknown_field(const char *key, struct sbx_error *err)
{
	return unknown_field(key, err);
}

int api_json_one_field(const char *body, size_t len, const char *name, bool required,
		       struct json_object **obj, struct json_object **val, struct sbx_error *err)
{
	*obj = NULL;
	*val = NULL;
	if (len > 0) {
		*obj = api_json_parse_object(body, len, err);
		if (!*obj)
			return -1;
		json_object_object_foreach(*obj, key, v)
		{
			if (strcmp(key, name) != 0) {
				unknown_field(key, err);
				goto bad;
			}
			*val = v;
		}
	}
	if (!*val && required) {
		sbx_error_set(err, SBX_E_INVALID_REQUEST, name, "'%s' is required", name);
		goto bad;
	}
	return 0;
bad:
	json_object_put(*obj);
	*obj = NULL;
	return -1;
}

/* An integer field in [min, max]. json-c stores big numbers saturated or as
 * uint64, so the range check covers overflow too. */
int api_json_get_int(struct json_object *v, const char *name, int64_t min, int64_t max,
		     int64_t *out, struct sbx_error *err)
{
	int64_t x;

	if (!json_object_is_type(v, json_type_int))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, name, "'%s' must be an integer",
				     name);
	x = json_object_get_int64(v);
	if (x < min || x > max || (x == INT64_MAX && json_object_get_uint64(v) > INT64_MAX))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, name,
				     "'%s' must be between %lld and %lld", name, (long long)min,
				     (long long)max);
	*out = x;
	return 0;
}

int api_json_get_string(struct json_object *v, const char *name, const char **s, size_t *len,
			struct sbx_error *err)
{
	if (!json_object_is_type(v, json_type_string))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, name, "'%s' must be a string",
				     name);
	*s = json_object_get_string(v);
	*len = (size_t)json_object_get_string_len(v);
	return 0;
}

/* ------------------------------------------------------------- encoders */

struct json_object *api_time_encode(int64_t epoch_ms)
{
	char buf[32];

	if (epoch_ms == 0)
		return NULL;
	sbx_rfc3339(epoch_ms, buf);
	return json_object_new_string(buf);
}

static struct json_object *usd_encode(int64_t micro)
{
	char buf[32];

	api_usd_format(micro, buf);
	return json_object_new_string(buf);
}

struct json_object *api_sandbox_encode(const struct sandbox_view *v)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "id", json_object_new_string(v->id));
	json_object_object_add(o, "object", json_object_new_string("sandbox"));
	json_object_object_add(o, "status", json_object_new_string(v->status));
	json_object_object_add(o, "size", json_object_new_string(v->size));
	json_object_object_add(o, "created_at", api_time_encode(v->created_at_ms));
	json_object_object_add(o, "expires_at", api_time_encode(v->expires_at_ms));
	json_object_object_add(o, "ended_at", api_time_encode(v->ended_at_ms));
	json_object_object_add(o, "cost_micro_usd", json_object_new_int64(v->cost_micro));
	json_object_object_add(o, "cost_usd", usd_encode(v->cost_micro));
	json_object_object_add(o, "startup_path",
			       v->startup_path[0] ? json_object_new_string(v->startup_path) : NULL);
	json_object_object_add(o, "startup_ms",
			       v->startup_path[0] ? json_object_new_int64(v->startup_ms) : NULL);
	json_object_object_add(o, "metadata", api_metadata_encode(v->metadata));
	json_object_object_add(o, "paused_at", api_time_encode(v->paused_at_ms));
	json_object_object_add(o, "paused_bytes",
			       v->paused_at_ms ? json_object_new_int64(v->paused_bytes) : NULL);
	json_object_object_add(o, "paused_seconds", json_object_new_int64(v->paused_ms / 1000));
	json_object_object_add(o, "network", api_network_encode(v->network));
	json_object_object_add(o, "net_bytes_in", json_object_new_int64(v->net_bytes_in));
	json_object_object_add(o, "net_bytes_out", json_object_new_int64(v->net_bytes_out));
	json_object_object_add(o, "snapshot",
			       v->snapshot[0] ? json_object_new_string(v->snapshot) : NULL);
	json_object_object_add(o, "timeout_action",
			       json_object_new_string(v->timeout_action == SANDBOX_ON_TIMEOUT_PAUSE
							  ? "pause"
							  : "expire"));
	return o;
}

struct json_object *api_network_encode(const char *json)
{
	struct json_object *o = json_tokener_parse(json && json[0] ? json : NET_POLICY_NONE_JSON);

	/* the store holds what network/ wrote; anything else reads as none */
	return o ? o : json_tokener_parse(NET_POLICY_NONE_JSON);
}

struct json_object *api_execution_view_encode(const struct sandbox_execution_view *v)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "id", json_object_new_string(v->id));
	json_object_object_add(o, "object", json_object_new_string("sandbox.execution"));
	json_object_object_add(o, "status",
			       json_object_new_string(sandbox_execution_status_name(v->status)));
	json_object_object_add(o, "runtime", json_object_new_string(v->runtime));
	json_object_object_add(o, "requested_at", api_time_encode(v->requested_at_ms));
	json_object_object_add(o, "ended_at", api_time_encode(v->ended_at_ms));
	json_object_object_add(o, "cost_micro_usd", json_object_new_int64(v->cost_micro));
	json_object_object_add(o, "cost_usd", usd_encode(v->cost_micro));
	json_object_object_add(o, "receipt_id",
			       v->receipt_id[0] ? json_object_new_string(v->receipt_id) : NULL);
	json_object_object_add(o, "exit_code",
			       v->has_exit_code ? json_object_new_int(v->exit_code) : NULL);
	return o;
}

/* One stream as the reply carries it: the bytes an exec receipt signs
 * (sandbox_exec_stream_text), so the two never differ. */
static struct json_object *stream_encode(const char *buf, size_t len, bool base64, bool cut)
{
	struct json_object *s;
	size_t n = 0;
	char *enc = sandbox_exec_stream_text(buf, len, base64, cut, &n);

	if (!enc || n > INT_MAX) {
		free(enc);
		return NULL;
	}
	s = json_object_new_string_len(enc, (int)n);
	free(enc);
	return s;
}

struct json_object *api_exec_result_encode(const struct agentless_exec_result *r, bool base64)
{
	struct json_object *o, *out, *errs;

	out = stream_encode(r->stdout_buf, r->stdout_len, base64, r->truncated);
	errs = stream_encode(r->stderr_buf, r->stderr_len, base64, r->truncated);
	if (!out || !errs) {
		json_object_put(out);
		json_object_put(errs);
		return NULL;
	}
	o = json_object_new_object();
	json_object_object_add(o, "stdout", out);
	json_object_object_add(o, "stderr", errs);
	json_object_object_add(o, "exit_code", json_object_new_int(r->exit_code));
	json_object_object_add(o, "duration_ms", json_object_new_int64(r->duration_ms));
	json_object_object_add(o, "truncated", json_object_new_boolean(r->truncated));
	json_object_object_add(o, "timed_out", json_object_new_boolean(r->timed_out));
	return o;
}

struct json_object *api_error_encode(const struct sbx_error *err)
{
	struct json_object *o = json_object_new_object(), *e = json_object_new_object();
	enum sbx_code code = err->code;

	if ((int)code <= SBX_OK || code >= SBX_CODE_COUNT)
		code = SBX_E_INTERNAL;
	json_object_object_add(e, "type", json_object_new_string(sbx_code_type(code)));
	json_object_object_add(
	    e, "message",
	    json_object_new_string(err->message[0] ? err->message : "request failed"));
	if (err->param[0])
		json_object_object_add(e, "param", json_object_new_string(err->param));
	json_object_object_add(o, "error", e);
	return o;
}

static struct json_object *gib_encode(uint64_t mib)
{
	if (mib % 1024 == 0)
		return json_object_new_int64((int64_t)(mib / 1024));
	return json_object_new_double((double)mib / 1024.0);
}

static struct json_object *startup_path_encode(const struct sandbox_startup_path *p)
{
	struct json_object *o = json_object_new_object();
	bool have = p && p->samples > 0;

	json_object_object_add(o, "p50_ms", have ? json_object_new_int64(p->p50_ms) : NULL);
	json_object_object_add(o, "p95_ms", have ? json_object_new_int64(p->p95_ms) : NULL);
	json_object_object_add(o, "samples", json_object_new_int64(have ? (int64_t)p->samples : 0));
	return o;
}

static struct json_object *startup_encode(const struct sandbox_startup_stats *st)
{
	struct json_object *o = json_object_new_object(), *pool = json_object_new_object();
	struct json_object *x, *xpool;

	json_object_object_add(o, "window", json_object_new_int(SANDBOX_STARTUP_WINDOW));
	json_object_object_add(o, "warm", startup_path_encode(st ? &st->warm : NULL));
	json_object_object_add(o, "cold", startup_path_encode(st ? &st->cold : NULL));
	for (size_t i = 0; st && i < st->n_pool && i < SANDBOX_MAX_SIZES; i++) {
		struct json_object *p = json_object_new_object();

		json_object_object_add(p, "target", json_object_new_int(st->pool[i].target));
		json_object_object_add(p, "ready", json_object_new_int(st->pool[i].ready));
		json_object_object_add(pool, st->pool[i].size, p);
	}
	json_object_object_add(o, "pool", pool);
	x = json_object_new_object();
	xpool = json_object_new_object();
	json_object_object_add(x, "prestarted",
			       startup_path_encode(st ? &st->exec_prestarted : NULL));
	json_object_object_add(x, "warm", startup_path_encode(st ? &st->exec_warm : NULL));
	json_object_object_add(x, "cold", startup_path_encode(st ? &st->exec_cold : NULL));
	for (size_t i = 0; st && i < st->n_exec_pool && i < SANDBOX_EXECUTION_RUNTIMES; i++) {
		struct json_object *p = json_object_new_object();

		json_object_object_add(p, "target", json_object_new_int(st->exec_pool[i].target));
		json_object_object_add(p, "ready", json_object_new_int(st->exec_pool[i].ready));
		json_object_object_add(xpool, st->exec_pool[i].runtime, p);
	}
	json_object_object_add(x, "pool", xpool);
	json_object_object_add(o, "executions", x);
	return o;
}

struct json_object *api_limits_encode(const struct sandbox_config *cfg)
{
	return api_limits_encode_stats(cfg, NULL);
}

struct json_object *api_limits_encode_stats(const struct sandbox_config *cfg,
					    const struct sandbox_startup_stats *stats)
{
	struct json_object *o = json_object_new_object(), *t = json_object_new_object();
	struct json_object *sizes = json_object_new_array();

	json_object_object_add(o, "object", json_object_new_string("limits"));
	json_object_object_add(o, "sandboxes_per_account",
			       json_object_new_int(cfg->max_sandboxes_per_account));
	json_object_object_add(o, "execs_per_sandbox",
			       json_object_new_int(cfg->max_execs_per_sandbox));
	json_object_object_add(o, "api_keys_per_account",
			       json_object_new_int(cfg->max_api_keys_per_account));
	json_object_object_add(o, "receipts_per_account",
			       json_object_new_int(cfg->max_receipts_per_account));
	json_object_object_add(o, "retention_hours",
			       json_object_new_int(cfg->execution_retention_hours));
	json_object_object_add(o, "processes_per_sandbox",
			       json_object_new_int(cfg->max_processes_per_sandbox));
	json_object_object_add(o, "terminals_per_sandbox",
			       json_object_new_int(cfg->max_terminals_per_sandbox));
	json_object_object_add(o, "terminals_per_account",
			       json_object_new_int(cfg->max_terminals_per_account));
	json_object_object_add(o, "terminal_idle_timeout_ms",
			       json_object_new_int64(cfg->terminal_idle_timeout_ms));
	json_object_object_add(o, "terminal_reconnect_grace_ms",
			       json_object_new_int64(cfg->terminal_reconnect_grace_ms));
	json_object_object_add(o, "port_conns_per_sandbox",
			       json_object_new_int(cfg->max_port_conns_per_sandbox));
	json_object_object_add(o, "port_conns_per_account",
			       json_object_new_int(cfg->max_port_conns_per_account));
	json_object_object_add(o, "port_idle_timeout_ms",
			       json_object_new_int64(cfg->port_idle_timeout_ms));
	json_object_object_add(o, "port_response_timeout_ms",
			       json_object_new_int64(cfg->port_response_timeout_ms));
	json_object_object_add(o, "port_header_max_bytes",
			       json_object_new_int64(cfg->port_header_max_bytes));
	json_object_object_add(o, "previews_per_sandbox",
			       json_object_new_int(cfg->max_previews_per_sandbox));
	json_object_object_add(o, "preview_max_ttl_seconds",
			       json_object_new_int(cfg->preview_max_ttl_seconds));
	json_object_object_add(o, "preview_domain", json_object_new_string(cfg->preview_domain));
	json_object_object_add(o, "process_output_ring_bytes",
			       json_object_new_int(SANDBOX_PROC_RING_BYTES));
	json_object_object_add(o, "creates_in_flight_per_account",
			       json_object_new_int(cfg->max_creates_in_flight_per_account));
	json_object_object_add(o, "deletes_in_flight_per_account",
			       json_object_new_int(cfg->max_deletes_in_flight_per_account));
	json_object_object_add(o, "executions_in_flight_per_account",
			       json_object_new_int(cfg->max_executions_in_flight_per_account));
	json_object_object_add(o, "execs_in_flight_per_account",
			       json_object_new_int(cfg->max_execs_in_flight_per_account));
	json_object_object_add(o, "files_in_flight_per_account",
			       json_object_new_int(cfg->max_files_in_flight_per_account));
	json_object_object_add(o, "processes_in_flight_per_account",
			       json_object_new_int(cfg->max_processes_in_flight_per_account));
	json_object_object_add(o, "connections_per_ip",
			       json_object_new_int(cfg->http_connections_per_ip));
	json_object_object_add(o, "file_transfer_timeout_ms",
			       json_object_new_int64(cfg->file_transfer_timeout_ms));
	json_object_object_add(o, "request_receive_timeout_ms",
			       json_object_new_int64(cfg->http_receive_timeout_ms));
	json_object_object_add(o, "metrics_interval_ms",
			       json_object_new_int64(cfg->metrics_interval_ms));
	json_object_object_add(t, "default", json_object_new_int(cfg->default_timeout_minutes));
	json_object_object_add(t, "max", json_object_new_int(cfg->max_timeout_minutes));
	json_object_object_add(o, "timeout_minutes", t);
	json_object_object_add(o, "max_lifetime_minutes",
			       json_object_new_int(cfg->max_lifetime_minutes));
	json_object_object_add(o, "paused_ttl_minutes",
			       json_object_new_int(cfg->paused_ttl_minutes));
	json_object_object_add(o, "paused_storage_usd_per_gib_hour",
			       usd_encode((int64_t)cfg->paused_storage_micro_per_gib_hour));
	json_object_object_add(o, "snapshots", json_object_new_int(cfg->max_snapshots));
	json_object_object_add(o, "snapshot_bytes",
			       json_object_new_int64((int64_t)cfg->max_snapshot_bytes));
	json_object_object_add(o, "snapshot_storage_usd_per_gib_hour",
			       usd_encode((int64_t)cfg->snapshot_storage_micro_per_gib_hour));
	{
		struct json_object *n = json_object_new_object();

		json_object_object_add(n, "allow_open",
				       json_object_new_boolean(cfg->net_allow_open));
		json_object_object_add(n, "max_rules", json_object_new_int(cfg->net_max_rules));
		json_object_object_add(
		    n, "bandwidth_bytes_per_s_per_sandbox",
		    json_object_new_int64((int64_t)cfg->net_bandwidth_bytes_per_s));
		json_object_object_add(n, "connections_per_account",
				       json_object_new_int(cfg->net_connections_per_account));
		json_object_object_add(n, "connections_per_sandbox",
				       json_object_new_int(cfg->net_connections_per_sandbox));
		json_object_object_add(n, "connect_timeout_ms",
				       json_object_new_int64(cfg->net_connect_timeout_ms));
		json_object_object_add(n, "idle_timeout_ms",
				       json_object_new_int64(cfg->net_idle_timeout_ms));
		json_object_object_add(n, "usd_per_gb",
				       usd_encode((int64_t)cfg->net_price_micro_per_gb));
		json_object_object_add(o, "network", n);
	}
	json_object_object_add(o, "exec_timeout_ms_default",
			       json_object_new_int64(cfg->default_exec_timeout_ms));
	json_object_object_add(o, "max_body_bytes",
			       json_object_new_int64((int64_t)cfg->max_body_bytes));
	json_object_object_add(o, "max_file_bytes",
			       json_object_new_int64((int64_t)cfg->max_file_bytes));
	json_object_object_add(o, "max_command_bytes",
			       json_object_new_int64((int64_t)cfg->max_command_bytes));
	json_object_object_add(o, "output_cap_bytes",
			       json_object_new_int64((int64_t)cfg->output_cap_bytes));
	{
		struct json_object *b = json_object_new_object();

		json_object_object_add(
		    b, "account_bytes",
		    json_object_new_int64((int64_t)(cfg->output_budget_account_mib << 20)));
		json_object_object_add(
		    b, "host_bytes",
		    json_object_new_int64((int64_t)(cfg->output_budget_host_mib << 20)));
		json_object_object_add(b, "per_exec_bytes_utf8",
				       json_object_new_int64((int64_t)(2 * cfg->output_cap_bytes *
								       SANDBOX_REPLY_COST_UTF8)));
		json_object_object_add(b, "per_exec_bytes_base64",
				       json_object_new_int64((int64_t)(2 * cfg->output_cap_bytes *
								       SANDBOX_REPLY_COST_BASE64)));
		json_object_object_add(b, "per_exec_start_bytes",
				       json_object_new_int64((int64_t)SANDBOX_EXEC_HOLD_START));
		json_object_object_add(b, "per_byte_utf8",
				       json_object_new_int64(SANDBOX_REPLY_COST_UTF8));
		json_object_object_add(b, "per_byte_base64",
				       json_object_new_int64(SANDBOX_REPLY_COST_BASE64));
		json_object_object_add(o, "output_budget", b);
	}
	for (size_t i = 0; i < cfg->n_sizes && i < SANDBOX_MAX_SIZES; i++) {
		const struct sandbox_size *s = &cfg->sizes[i];
		struct json_object *e = json_object_new_object();
		json_object_object_add(e, "name", json_object_new_string(s->name));
		json_object_object_add(e, "vcpus", json_object_new_int64(s->vcpus));
		json_object_object_add(e, "memory_gib", gib_encode(s->memory_mib));
		json_object_object_add(e, "disk_gib", json_object_new_int64((int64_t)s->disk_gib));
		json_object_object_add(e, "price_micro_usd_per_hour",
				       json_object_new_int64(s->price_micro_per_hour));
		json_object_object_add(e, "price_usd_per_hour",
				       usd_encode(s->price_micro_per_hour));
		json_object_array_add(sizes, e);
	}
	json_object_object_add(o, "sizes", sizes);
	json_object_object_add(o, "startup", startup_encode(stats));
	return o;
}

struct json_object *api_usage_encode(const struct sandbox_usage *u)
{
	struct json_object *o = json_object_new_object(), *bs = json_object_new_object();
	struct json_object *sb = json_object_new_object(), *period = json_object_new_object();

	json_object_object_add(o, "object", json_object_new_string("usage"));
	json_object_object_add(o, "balance_micro_usd", json_object_new_int64(u->balance_micro));
	json_object_object_add(o, "balance_usd", usd_encode(u->balance_micro));
	json_object_object_add(o, "reserved_micro_usd", json_object_new_int64(u->reserved_micro));
	json_object_object_add(o, "available_micro_usd", json_object_new_int64(u->available_micro));
	json_object_object_add(o, "consumed_micro_usd", json_object_new_int64(u->consumed_micro));
	for (size_t i = 0; i < u->n_sizes && i < SANDBOX_MAX_SIZES; i++) {
		struct json_object *e = json_object_new_object();
		json_object_object_add(e, "seconds", json_object_new_int64(u->by_size[i].seconds));
		json_object_object_add(e, "cost_micro_usd",
				       json_object_new_int64(u->by_size[i].cost_micro));
		json_object_object_add(bs, u->by_size[i].size, e);
	}
	json_object_object_add(o, "by_size", bs);
	json_object_object_add(sb, "running", json_object_new_int(u->running));
	json_object_object_add(sb, "limit", json_object_new_int(u->limit));
	json_object_object_add(o, "sandboxes", sb);
	{
		struct json_object *net = json_object_new_object();

		json_object_object_add(net, "bytes_in", json_object_new_int64(u->net_bytes_in));
		json_object_object_add(net, "bytes_out", json_object_new_int64(u->net_bytes_out));
		json_object_object_add(o, "network", net);
	}
	json_object_object_add(period, "from", api_time_encode(u->from_ms));
	json_object_object_add(period, "to", api_time_encode(u->to_ms));
	json_object_object_add(o, "period", period);
	if (u->buckets) {
		struct json_object *arr = json_object_new_array();
		for (size_t i = 0; i < u->n_buckets; i++) {
			struct json_object *e = json_object_new_object();
			json_object_object_add(e, "start", api_time_encode(u->buckets[i].start_ms));
			json_object_object_add(e, "seconds",
					       json_object_new_int64(u->buckets[i].seconds));
			json_object_object_add(e, "cost_micro_usd",
					       json_object_new_int64(u->buckets[i].cost_micro));
			json_object_array_add(arr, e);
		}
		json_object_object_add(o, "buckets", arr);
	}
	if (u->groups)
		json_object_object_add(o, "by_metadata", api_usage_groups_encode(u));
	return o;
}

struct json_object *api_key_encode(const struct sandbox_key *k, const char *secret)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "id", json_object_new_string(k->id));
	json_object_object_add(o, "object", json_object_new_string("api_key"));
	json_object_object_add(o, "prefix", json_object_new_string(k->prefix));
	json_object_object_add(o, "created_at", api_time_encode(k->created_at_ms));
	if (secret) {
		json_object_object_add(o, "secret", json_object_new_string(secret));
	} else {
		json_object_object_add(o, "revoked",
				       json_object_new_boolean(k->revoked_at_ms != 0));
		json_object_object_add(o, "revoked_at", api_time_encode(k->revoked_at_ms));
	}
	json_object_object_add(o, "scopes", api_scopes_encode(k->scopes));
	return o;
}

struct json_object *api_scopes_encode(unsigned scopes)
{
	struct json_object *arr = json_object_new_array();

	for (unsigned bit = 1; bit & SANDBOX_SCOPES_ALL; bit <<= 1)
		if (scopes & bit)
			json_object_array_add(arr, json_object_new_string(sandbox_scope_name(bit)));
	return arr;
}

struct json_object *api_account_encode(const struct sandbox_account *a)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "id", json_object_new_string(a->id));
	json_object_object_add(o, "object", json_object_new_string("account"));
	json_object_object_add(o, "name", json_object_new_string(a->name));
	json_object_object_add(o, "created_at", api_time_encode(a->created_at_ms));
	json_object_object_add(o, "balance_micro_usd", json_object_new_int64(a->balance_micro));
	json_object_object_add(o, "balance_usd", usd_encode(a->balance_micro));
	json_object_object_add(o, "available_micro_usd", json_object_new_int64(a->available_micro));
	json_object_object_add(o, "available_usd", usd_encode(a->available_micro));
	return o;
}
