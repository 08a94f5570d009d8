/* api-priv: test-only entry points of api/ (the request decoders, the
 * response encoders, the config parser, the work pool and the per-account
 * counts of the HTTP server), for tests/unit/test_api_* and
 * tests/fuzz/fuzz_request.c. Not for other modules.
 */
#ifndef SBX_API_PRIV_H
#define SBX_API_PRIV_H

#include <stdbool.h>
#include <stddef.h>

#include <json-c/json.h>

#include "api.h"

/* Maximum nesting of a request body's JSON (deeper is 400). */
#define API_JSON_MAX_DEPTH 16
/* Maximum number of entries in an exec request's "env". */
#define API_ENV_MAX 256

/* Parse a request body into a JSON object. An empty (or all-whitespace)
 * body gives an empty object. Errors, SBX_E_INVALID_REQUEST: not JSON
 * (trailing bytes, NUL bytes, invalid UTF-8 and nesting deeper than
 * API_JSON_MAX_DEPTH included), or JSON that is not an object. The caller
 * owns the result (json_object_put). */
struct json_object *api_json_parse_object(const char *body, size_t len, struct sbx_error *err);

/* true when `text` (len bytes, already parsed by json-c into `parsed`)
 * names some member twice in one object: json-c keeps the last value
 * silently, so {"command": "a", "command": "b"} would otherwise run "b".
 * Compares the member names in the text with the members json-c kept. */
bool api_json_has_duplicate_keys(const char *text, size_t len, struct json_object *parsed);

/* POST /v1/sandboxes. `size` points into a buffer owned by the struct. */
struct api_create_body {
	char size_buf[32];
	char snapshot_buf[SANDBOX_ID_MAX];
	char network_buf[NET_POLICY_JSON_MAX]; /* canonical, when the body names one */
	struct sandbox_metadata metadata;
	struct sandbox_create_req req; /* req.size NULL or size_buf; req.metadata &metadata */
};
/* {"size": string, "timeout_minutes": integer 1..cfg->max_timeout_minutes,
 * "metadata": object (api_metadata_decode)}, all optional. 0 or -1 with SBX_E_INVALID_REQUEST and
 * param "size", "timeout_minutes" or the unknown field's name ("" when the body itself is not a
 * JSON object). */
int api_create_decode(const char *body, size_t len, const struct sandbox_config *cfg,
		      struct api_create_body *out, struct sbx_error *err);

/* A `metadata` object (docs/api.md "Metadata"): string values, or null
 * (= "") for a key to remove; each pair checked by sandbox_metadata_add.
 * With clear not NULL (an update), `metadata` null or "" sets *clear (drop
 * every key). 400 with param "metadata" otherwise. */
int api_metadata_decode(struct json_object *v, struct sandbox_metadata *m, bool *clear,
			struct sbx_error *err);
/* A `network` policy (docs/network.md), checked against the config's
 * limits (allow_open, max_rules), as canonical JSON into out. 400 with
 * param "network..." (the rule: "network.allow[2]"). */
int api_network_decode(struct json_object *v, const struct sandbox_config *cfg,
		       char out[NET_POLICY_JSON_MAX], struct sbx_error *err);
/* POST /v1/sandboxes/{id}/network: the body is the policy. */
int api_network_body_decode(const char *body, size_t len, const struct sandbox_config *cfg,
			    char out[NET_POLICY_JSON_MAX], struct sbx_error *err);
/* The "network" of a sandbox object from its canonical JSON. */
struct json_object *api_network_encode(const char *json);

/* POST /v1/sandboxes/{id}: {"metadata": ...}, required. */
int api_update_decode(const char *body, size_t len, struct sandbox_metadata *m, bool *clear,
		      struct sbx_error *err);

/* POST /v1/sandboxes/{id}/extend (required) and .../resume (optional:
 * an empty body is *timeout_minutes = 0): {"timeout_minutes": integer
 * 1..cfg->max_timeout_minutes}. Same errors. */
int api_timeout_decode(const char *body, size_t len, const struct sandbox_config *cfg,
		       bool required, int *timeout_minutes, struct sbx_error *err);

/* POST /v1/api_keys: an empty body, {} or {"scopes": [string, ...]} (at
 * most 8 names of at most 32 bytes; [] = a key with no scope). With
 * "scopes", *has_scopes is set and *scopes holds them (enum sandbox_scope
 * bits; an unknown name is 400, param "scopes"). Any other field is
 * unknown (400). */
int api_key_create_decode(const char *body, size_t len, unsigned *scopes, bool *has_scopes,
			  struct sbx_error *err);

/* POST /v1/sandboxes/{id}/exec, decoded. Owns its strings; release with
 * api_exec_body_release (also safe after a failed decode). */
struct api_exec_body {
	struct sandbox_exec_req req; /* points into the fields below */
	bool base64;		     /* "encoding": "base64" */
	bool receipt;		     /* "receipt": true: sign the result */
	char *command;
	char *cwd;
	char **env; /* "KEY=VALUE" strings, n_env of them */
	size_t n_env;
};
/* {"command": non-empty string <= cfg->max_command_bytes, no NUL
 * (required); "timeout_ms": integer >= 1 (<= UINT32_MAX); "cwd": absolute
 * path, no NUL, < PATH_MAX; "env": object of string values without NUL,
 * keys matching ^[A-Za-z_][A-Za-z0-9_]*$ (param "env.KEY", or "env" when
 * the key itself is bad), at most API_ENV_MAX of them; "encoding":
 * "utf-8" | "base64"; "receipt": boolean}. Unknown fields are 400 naming them. */
int api_exec_decode(const char *body, size_t len, const struct sandbox_config *cfg,
		    struct api_exec_body *out, struct sbx_error *err);
void api_exec_body_release(struct api_exec_body *b);

/* True when `key` matches ^[A-Za-z_][A-Za-z0-9_]*$ (len bytes). */
bool api_env_key_valid(const char *key, size_t len);

/* The sandbox object of API.md (new reference). */
struct json_object *api_sandbox_encode(const struct sandbox_view *v);
/* 400 "unknown field" naming it (json.c's rule for every body). */
int api_json_unknown_field(const char *key, struct sbx_error *err);
/* A field's value as an integer in [min, max] (json-c saturates big
 * numbers: the range check covers overflow), or as a string: 0, or -1
 * with a 400 naming `name`. json.c, for the decoders (decode.c). */
int api_json_get_int(struct json_object *v, const char *name, int64_t min, int64_t max,
		     int64_t *out, struct sbx_error *err);
int api_json_get_string(struct json_object *v, const char *name, const char **s, size_t *len,
			struct sbx_error *err);
/* A body that may carry one field, `name`, and nothing else: an empty
 * body (unless `required`) or {} gives *val = NULL; another field is 400
 * (unknown), a missing one when required 400 naming it. 0 with *obj the
 * parsed body to put (NULL for an empty one) and *val in it, or -1. */
int api_json_one_field(const char *body, size_t len, const char *name, bool required,
		       struct json_object **obj, struct json_object **val, struct sbx_error *err);
/* Copy a field name for an error message, made printable and short. */
void api_json_field_name(const char *key, char out[static 48]);
/* usage's by_metadata array: {"value": string|null, "seconds",
 * "cost_micro_usd"} per group (new reference). */
struct json_object *api_usage_groups_encode(const struct sandbox_usage *u);
/* A stored metadata object ("" or bad: {}), new reference. */
struct json_object *api_metadata_encode(const char *json);
/* {"stdout","stderr","exit_code","duration_ms","truncated","timed_out"};
 * the streams sanitised to UTF-8 (bad bytes -> U+FFFD, NUL -> \u0000) or
 * base64 of the exact bytes. NULL on ENOMEM. */
struct json_object *api_exec_result_encode(const struct agentless_exec_result *r, bool base64);
/* {"error": {"type", "message", "param"?}} from err (new reference). */
struct json_object *api_error_encode(const struct sbx_error *err);
/* GET /v1/limits body from a config (new reference). */
struct json_object *api_limits_encode(const struct sandbox_config *cfg);
/* The same with this node's measured startup latency and warm pool state
 * (stats NULL = no samples yet: p50_ms/p95_ms null, samples 0). */
struct json_object *api_limits_encode_stats(const struct sandbox_config *cfg,
					    const struct sandbox_startup_stats *stats);
/* GET /v1/runtimes (api/runtimes.c): the image's runtime versions, as
 * measured at build time (images/versions.sh); "" = not known. */
#define API_RUNTIMES_N		5 /* python, node, npm, gcc, git */
#define API_RUNTIME_VERSION_MAX 32
struct api_runtimes {
	char version[API_RUNTIMES_N][API_RUNTIME_VERSION_MAX];
};
/* Fill rt from a versions.json text: the known names with a short version
 * string (digit first; letters, digits, ". + ~ - _"). 0, or -1 when the
 * text is not an object or a known name has a bad value (the rest kept). */
int api_runtimes_parse(struct api_runtimes *rt, const char *text);
/* Read versions.json from base_image's directory (none for "": the tiny
 * image); logs what it published or why nothing. Never fails. */
void api_runtimes_load(struct api_runtimes *rt, const char *base_image);
/* {"object":"runtimes","versions":{"python":..|null,...}} (new reference). */
struct json_object *api_runtimes_encode(const struct api_runtimes *rt);
/* GET /v1/usage body (new reference). */
struct json_object *api_usage_encode(const struct sandbox_usage *u);
/* An API key object; `secret` NULL when not to be shown. */
struct json_object *api_key_encode(const struct sandbox_key *k, const char *secret);
/* SANDBOX_SCOPE_SANDBOXES | SANDBOX_SCOPE_KEYS -> ["sandboxes", "keys"] */
struct json_object *api_scopes_encode(unsigned scopes);
/* An account object (admin command line). */
struct json_object *api_account_encode(const struct sandbox_account *a);
/* RFC 3339 string or JSON null when epoch_ms is 0. */
struct json_object *api_time_encode(int64_t epoch_ms);
/* One listed execution: {"id","object":"sandbox.execution","status",
 * "runtime","requested_at","ended_at","cost_micro_usd","cost_usd",
 * "receipt_id"} (receipt_id null without a receipt). */
struct json_object *api_execution_view_encode(const struct sandbox_execution_view *v);
/* The 200 body of POST /v1/sandbox/executions (execution_json.c): {"id",
 * "object": "sandbox.execution", "status", "exit_code", "stdout", "stderr",
 * "stdout_truncated", "stderr_truncated", "duration_ms", "runner",
 * "startup_path", "prestarted", "receipt": {"id", "hash", "signature",
 * "signer", "url", "fingerprint_salt"}, "billing": {"cost_micro_usd",
 * "billed_ms", "cost_usd"}} (+ "stored_truncated": true in the copy kept
 * when it is set), canonical JSON. A new string (*len bytes), or NULL with
 * err. A sandbox_execution_render_fn. */
char *api_execution_render(const struct sandbox_execution_result *res, size_t *len,
			   struct sbx_error *err);

/* Apply a JSON config document (len bytes) over cfg; see api_config_load. */
int api_config_parse(const char *json, size_t len, struct sandbox_config *cfg,
		     struct sbx_error *err);

/* Parse "HOST:PORT" (IPv4 dotted quad, "localhost" or "0.0.0.0"; port
 * 0..65535) into a sockaddr_in. 0 or -1 with SBX_E_INVALID_REQUEST
 * (param "listen"). */
struct sockaddr_in;
int api_listen_parse(const char *listen, struct sockaddr_in *sa, struct sbx_error *err);

/* POST /v1/sandbox/executions: {"runtime", "timeout_seconds", "code"}, all
 * required; unknown fields 400. Range checks against the config are
 * sandbox/'s. Free out->code. */
struct api_execution_body {
	char runtime[16];
	char *code;
	struct sandbox_metadata metadata;
	struct sandbox_execution_req req; /* points into runtime and code */
};
int api_execution_decode(const char *body, size_t len, struct api_execution_body *out,
			 struct sbx_error *err);

/* ------------------------------------------------ the HTTP server's parts */

/* The bounded pool of threads that runs long requests is util's
 * sbx_workpool (srv->pool): http_work_threads threads at most, started as
 * jobs need them, http_work_queue jobs waiting past them; a job refused
 * is answered 503. At stop the queued jobs are cancelled (fn(arg, true):
 * they only answer 503 and release arg). Its threads' name
 * (/proc/PID/task/TID/comm): */
#define API_WORKPOOL_THREAD_NAME "sbx-work"

/* Per-account counts of long requests in flight (api/inflight.c). */
enum api_inflight_kind {
	API_INFLIGHT_CREATE,	/* POST /v1/sandboxes */
	API_INFLIGHT_DELETE,	/* DELETE /v1/sandboxes/{id}, its pause and resume */
	API_INFLIGHT_EXECUTION, /* POST /v1/sandbox/executions */
	API_INFLIGHT_EXEC,	/* POST /v1/sandboxes/{id}/exec */
	API_INFLIGHT_FILES,	/* /v1/sandboxes/{id}/files, until its reply was sent */
	API_INFLIGHT_PROCESS,	/* /v1/sandboxes/{id}/processes... */
	API_INFLIGHT_KINDS,
};
struct api_inflight;
struct api_inflight *api_inflight_new(void);
void api_inflight_free(struct api_inflight *t);
/* Count one more `kind` for the account unless it has `cap` in flight
 * already: true when counted (give it back with api_inflight_put). */
bool api_inflight_take(struct api_inflight *t, const char *account_id, enum api_inflight_kind kind,
		       int cap);
void api_inflight_put(struct api_inflight *t, const char *account_id, enum api_inflight_kind kind);
/* How many `kind` the account has in flight. */
int api_inflight_count(struct api_inflight *t, const char *account_id, enum api_inflight_kind kind);
/* ------------------------------------------------------------------ files */

#include <microhttpd.h>

/* The files routes, GET/PUT/DELETE
 * /v1/sandboxes/{id}/files (api/http_files.c), called by http.c's handler.
 *
 * Bodies stream: an upload's bytes go to the guest as libmicrohttpd hands
 * them over, and the connection is suspended while the guest's credit is
 * used up; a download is a callback response that suspends the connection
 * while the guest has not sent more. No worker thread ever waits on a
 * guest, and a transfer holds at most one credit window (2 MiB) of data in
 * the daemon (plus libmicrohttpd's connection buffer).
 *
 * Locking: the context's lock guards the list of suspended transfers and
 * each one's parked/woke flags, and is held around MHD_suspend_connection
 * and MHD_resume_connection (as srv->lock is in http.c). It is a leaf: no
 * call into sandbox/ is made with it held.
 */
struct api_files_ctx;
struct api_files;

/* One per server. Never NULL (aborts on ENOMEM). */
struct api_files_ctx *api_files_ctx_new(struct sandbox_svc *svc, const struct sandbox_config *cfg);
/* The server is stopping: resume every suspended transfer, which then
 * answers 503 (or cuts its download short). */
void api_files_ctx_stop(struct api_files_ctx *ctx);
/* After MHD_stop_daemon (every request completed). */
void api_files_ctx_free(struct api_files_ctx *ctx);

/* The first call of a files request (headers only; route, method and
 * account checked): validate the query, start the transfer. Queues an
 * error reply itself, or returns MHD_YES with *out set. */
enum MHD_Result api_files_begin(struct api_files_ctx *ctx, struct MHD_Connection *c,
				const char *method, const char *account_id, const char *id,
				struct api_files **out);
/* Every later call of the access handler for that request (fr may be NULL
 * when begin answered with an error: the rest of the body is dropped). */
enum MHD_Result api_files_step(struct api_files *fr, const char *upload_data,
			       size_t *upload_data_size);
/* The request completed: abort an unfinished transfer, free. NULL ok. */
void api_files_free(struct api_files *fr);

#endif
