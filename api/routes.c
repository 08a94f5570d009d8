/* api/routes.c: the route table, the one place a route is written down
 * (its path, methods, flags, scope, handler and metrics name), and what is
 * derived from it: the resolver (with the path's {id}, {key_id}, {pid}),
 * the Allow header of a 405, the scope check and the metrics label.
 * http.c applies it in the check order of docs/api.md (route, method,
 * auth, scope, body); tests/unit/test_routes.c compares it with
 * docs/openapi.yaml both ways.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "http-priv.h"

/* The largest pid a Linux guest gives (PID_MAX_LIMIT). */
#define PID_MAX 4194304

#define AUTH   API_ROUTE_AUTH
#define BODY   API_ROUTE_BODY
#define STREAM API_ROUTE_STREAM
#define GET    API_GET
#define PUT    API_PUT
#define POST   API_POST
#define DELETE API_DELETE
#define HEAD   API_HEAD
#define PATCH  API_PATCH
#define OPTS   API_OPTIONS

/* Indexed by enum route; the order is that of the /metrics series. */
static const struct api_route table[R_COUNT] = {
    [R_NONE] = {NULL, 0, 0, 0, NULL, "unknown"},
    [R_SANDBOXES] = {"/v1/sandboxes", GET | POST, AUTH | BODY, 0, api_sandboxes_handle,
		     "sandboxes"},
    [R_SANDBOX] = {"/v1/sandboxes/{id}", GET | POST | DELETE, AUTH | BODY, 0, api_sandbox_handle,
		   "sandbox"},
    [R_EXEC] = {"/v1/sandboxes/{id}/exec", POST, AUTH | BODY, 0, api_exec_handle, "exec"},
    [R_EXTEND] = {"/v1/sandboxes/{id}/extend", POST, AUTH | BODY, 0, api_extend_handle, "extend"},
    [R_USAGE] = {"/v1/usage", GET, AUTH, 0, api_usage_handle, "usage"},
    [R_LIMITS] = {"/v1/limits", GET, 0, 0, api_limits_handle, "limits"},
    [R_RUNTIMES] = {"/v1/runtimes", GET, 0, 0, api_runtimes_handle, "runtimes"},
    [R_KEYS] = {"/v1/api_keys", GET | POST, AUTH | BODY, SANDBOX_SCOPE_KEYS, api_keys_handle,
		"api_keys"},
    [R_KEY] = {"/v1/api_keys/{key_id}", DELETE, AUTH, SANDBOX_SCOPE_KEYS, api_key_revoke_handle,
	       "api_key"},
    [R_EXECUTIONS] = {"/v1/sandbox/executions", GET | POST, AUTH | BODY, SANDBOX_SCOPE_SANDBOXES,
		      api_executions_handle, "executions"},
    [R_EXECUTION] = {"/v1/sandbox/executions/{id}", GET, AUTH, SANDBOX_SCOPE_SANDBOXES,
		     api_execution_get_handle, "execution"},
    [R_RECEIPT] = {"/v1/receipts/{id}", GET, AUTH, 0, api_receipt_handle, "receipt"},
    [R_RECEIPT_KEY] = {"/v1/receipts/public-key", GET, AUTH, 0, api_receipt_key_handle,
		       "receipt_key"},
    [R_PROCESSES] = {"/v1/sandboxes/{id}/processes", GET | POST, AUTH | BODY, 0,
		     api_processes_route, "processes"},
    [R_PROCESS_OUTPUT] = {"/v1/sandboxes/{id}/processes/{pid}/output", GET, AUTH, 0,
			  api_processes_route, "process_output"},
    [R_PROCESS_STDIN] = {"/v1/sandboxes/{id}/processes/{pid}/stdin", POST, AUTH | BODY, 0,
			 api_processes_route, "process_stdin"},
    [R_PROCESS_SIGNAL] = {"/v1/sandboxes/{id}/processes/{pid}/signal", POST, AUTH | BODY, 0,
			  api_processes_route, "process_signal"},
    [R_FILES] = {"/v1/sandboxes/{id}/files", GET | PUT | DELETE, AUTH | STREAM, 0, api_files_route,
		 "files"},
    [R_METRICS] = {"/v1/sandboxes/{id}/metrics", GET, AUTH, 0, api_sandbox_metrics_handle,
		   "sandbox_metrics"},
    [R_PAUSE] = {"/v1/sandboxes/{id}/pause", POST, AUTH, 0, api_pause_handle, "pause"},
    [R_RESUME] = {"/v1/sandboxes/{id}/resume", POST, AUTH | BODY, 0, api_pause_handle, "resume"},
    [R_TERMINAL] = {"/v1/sandboxes/{id}/terminal", GET, AUTH, 0, api_terminal_handle, "terminal"},
    [R_NETWORK] = {"/v1/sandboxes/{id}/network", POST, AUTH | BODY, 0, api_network_handle,
		   "network"},
    [R_PORTS] = {"/v1/sandboxes/{id}/ports/{port}/{path}",
		 GET | PUT | POST | DELETE | HEAD | PATCH | OPTS, AUTH | STREAM, 0, api_ports_route,
		 "ports"},
    [R_PREVIEWS] = {"/v1/sandboxes/{id}/ports/{port}/previews", GET | POST, AUTH | BODY, 0,
		    api_previews_handle, "previews"},
    [R_PREVIEW] = {"/v1/sandboxes/{id}/previews/{preview_id}", DELETE, AUTH, 0,
		   api_preview_revoke_handle, "preview"},
    [R_SNAPSHOT_TAKE] = {"/v1/sandboxes/{id}/snapshots", POST, AUTH | BODY, 0,
			 api_snapshot_take_handle, "snapshot_take"},
    [R_SNAPSHOTS] = {"/v1/snapshots", GET, AUTH, 0, api_snapshots_handle, "snapshots"},
    [R_SNAPSHOT] = {"/v1/snapshots/{id}", GET | DELETE, AUTH, 0, api_snapshot_handle, "snapshot"},
    /* a preview's host name (http_previews.c): found by its Host, before
     * any route and any key, not by path */
    [R_PREVIEW_HOST] = {NULL, GET | PUT | POST | DELETE, STREAM, 0, api_preview_host_route,
			"preview_host"},
    /* api_assets[] (api/assets.h): found by api_static_find, not by path */
    [R_STATIC] = {NULL, GET, 0, 0, api_static_route, "static"},
};

const struct api_route *api_routes(size_t *n)
{
	*n = R_COUNT;
	return table;
}

const struct api_route *api_route_get(enum route r)
{
	return (unsigned)r < R_COUNT ? &table[r] : &table[R_NONE];
}

/* ---------------------------------------------------------------- methods */

static const char *const method_names[] = {"GET",  "PUT",   "POST",   "DELETE",
					   "HEAD", "PATCH", "OPTIONS"};

unsigned api_method_bit(const char *method)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(method_names); i++)
		if (strcmp(method, method_names[i]) == 0)
			return 1u << i;
	return 0; /* TRACE, CONNECT...: answered by no route */
}

const char *api_method_name(unsigned bit)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(method_names); i++)
		if (bit == 1u << i)
			return method_names[i];
	return "";
}

/* The Allow header of every set of the methods, in method_names' order. */
static char allow[1u << SBX_ARRAY_SIZE(method_names)][64];

static void allow_init(void)
{
	for (unsigned m = 0; m < SBX_ARRAY_SIZE(allow); m++)
		for (size_t i = 0, n = 0; i < SBX_ARRAY_SIZE(method_names); i++)
			if (m & (1u << i))
				n += (size_t)snprintf(allow[m] + n, sizeof allow[m] - n, "%s%s",
						      n ? ", " : "", method_names[i]);
}

const char *api_methods_allow(unsigned methods)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, allow_init);
	return allow[methods & ((1u << SBX_ARRAY_SIZE(method_names)) - 1)];
}

/* ---------------------------------------------------------------- resolve */

/* One {pid} segment (n bytes): 2..PID_MAX, no leading zero. */
static bool pid_parse(const char *s, size_t n, uint32_t *pid)
{
	unsigned long v = 0;

	if (n == 0 || s[0] < '1' || s[0] > '9')
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (unsigned long)(s[i] - '0');
		if (v > PID_MAX)
			return false;
	}
	if (v < 2)
		return false;
	*pid = (uint32_t)v;
	return true;
}

/* One {port} segment: its number when 1..65535, else 0 (the handler
 * answers 400 for it). */
static uint32_t port_parse(const char *s, size_t n)
{
	uint32_t v = 0;

	if (n == 0 || n > 5 || s[0] == '0')
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return 0;
		v = v * 10 + (uint32_t)(s[i] - '0');
	}
	return v <= 65535 ? v : 0;
}

/* Does `url` match the pattern? Each "{name}" takes one non-empty segment:
 * {pid} a pid, {port} anything (its number into *pid, 0 when not a port),
 * any other an id shorter than SANDBOX_ID_MAX (a longer one is no route:
 * 404 either way), the first of them into id; a final "/{path}" takes the rest of the URL, slashes
 * and nothing included. *params counts them. */
static bool match(const char *pat, const char *url, char id[SANDBOX_ID_MAX], uint32_t *pid,
		  int *params)
{
	*params = 0;
	while (*pat) {
		if (strcmp(pat, "/{path}") == 0 && *url == '\0')
			return true; /* .../ports/8000: the root */
		if (strcmp(pat, "{path}") == 0) {
			(*params)++;
			return true;
		}
		if (*pat != '{') {
			if (*pat++ != *url++)
				return false;
			continue;
		}
		size_t n = strcspn(url, "/");
		if (strncmp(pat, "{pid}", 5) == 0) {
			if (!pid_parse(url, n, pid))
				return false;
		} else if (strncmp(pat, "{port}", 6) == 0) {
			if (n == 0)
				return false;
			*pid = port_parse(url, n);
		} else {
			if (n == 0 || n >= SANDBOX_ID_MAX)
				return false;
			if (!id[0]) { /* {preview_id} after {id}: the handler's */
				memcpy(id, url, n);
				id[n] = '\0';
			}
		}
		(*params)++;
		pat = strchr(pat, '}') + 1;
		url += n;
	}
	return *url == '\0';
}

enum route api_route_resolve(const char *url, char id[SANDBOX_ID_MAX], uint32_t *pid)
{
	enum route best = R_NONE;
	int best_params = 0;

	/* A literal path wins over a pattern that also matches it
	 * (/v1/receipts/public-key over /v1/receipts/{id}). */
	for (int i = 0; i < R_COUNT; i++) {
		char tid[SANDBOX_ID_MAX] = "";
		uint32_t tpid = 0;
		int params;

		if (!table[i].path || !match(table[i].path, url, tid, &tpid, &params))
			continue;
		if (best != R_NONE && params >= best_params)
			continue;
		best = (enum route)i;
		best_params = params;
		snprintf(id, SANDBOX_ID_MAX, "%s", tid);
		*pid = tpid;
	}
	return best;
}

const char *api_route_methods(const char *url)
{
	char id[SANDBOX_ID_MAX];
	uint32_t pid;
	enum route r = api_route_resolve(url, id, &pid);

	if (r == R_NONE && api_static_find(url) >= 0)
		r = R_STATIC;
	return api_methods_allow(table[r].methods);
}

/* ------------------------------------------------------------------ scope */

/* The one use of the scope column. */
int api_route_scope_check(const struct api_route *rt, unsigned scopes, struct sbx_error *err)
{
	unsigned missing = sandbox_scopes_missing(rt->scope, scopes);

	if (missing)
		return sbx_error_set(err, SBX_E_PERMISSION, NULL,
				     "this API key lacks the '%s' scope; create a key with "
				     "'admin create-key ACCOUNT --scope %s'",
				     sandbox_scope_name(missing), sandbox_scope_name(missing));
	return 0;
}
