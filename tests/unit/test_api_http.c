/* api/: the real HTTP server on 127.0.0.1:0 over a real TCP socket, with a
 * store-only (SANDBOX_SVC_ADMIN) service in a temp state dir. A minimal
 * HTTP/1.1 client lives here (no libcurl). Sandboxes are not created (that
 * needs libvirt; tests/integration does it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <json-c/json.h>
#include <sqlite3.h>

#include "api/http-priv.h"
#include "sandbox/sandbox.h"
#include "util/util.h"

#define BODY_CAP 4096

struct fx {
	char dir[64];
	struct sandbox_config cfg;
	struct sandbox_svc *svc;
	struct api_server *srv;
	unsigned port;
	char key[80];
	char account_id[SANDBOX_ID_MAX];
};
static struct fx F;

struct resp {
	int status;
	char headers[4096];
	char *body;
	size_t body_len;
	struct json_object *json;
};

static void resp_release(struct resp *r)
{
	free(r->body);
	json_object_put(r->json);
	memset(r, 0, sizeof(*r));
}

/* The value of a response header (case-insensitive name), or NULL. */
static const char *resp_header(const struct resp *r, const char *name, char out[static 256])
{
	size_t n = strlen(name);

	for (const char *p = r->headers; p && *p;
	     p = strstr(p, "\r\n") ? strstr(p, "\r\n") + 2 : NULL) {
		if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
			const char *v = p + n + 1, *e = strstr(v, "\r\n");
			while (*v == ' ')
				v++;
			size_t l = e ? (size_t)(e - v) : strlen(v);
			if (l > 255)
				l = 255;
			memcpy(out, v, l);
			out[l] = '\0';
			return out;
		}
	}
	return NULL;
}

/* Send `raw` (a whole request) and read the response until EOF. */
static void http_raw(const char *raw, size_t raw_len, struct resp *r)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)F.port)};
	struct timeval tv = {.tv_sec = 10};
	struct sbx_buf in;
	char chunk[4096];
	ssize_t n;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	memset(r, 0, sizeof(*r));
	assert_true(fd >= 0);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	for (size_t off = 0; off < raw_len;) {
		n = send(fd, raw + off, raw_len - off, MSG_NOSIGNAL);
		if (n <= 0)
			break; /* the server may answer (413) and close early */
		off += (size_t)n;
	}
	shutdown(fd, SHUT_WR);
	sbx_buf_init(&in, 16 * 1024 * 1024);
	while ((n = recv(fd, chunk, sizeof(chunk), 0)) > 0)
		assert_int_equal(sbx_buf_append(&in, chunk, (size_t)n), 0);
	close(fd);
	assert_non_null(in.data);
	assert_int_equal(sscanf(in.data, "HTTP/1.1 %d", &r->status), 1);
	char *eoh = strstr(in.data, "\r\n\r\n");
	assert_non_null(eoh);
	char *sol = strstr(in.data, "\r\n") + 2;
	size_t hl = (size_t)(eoh - sol) + 2;
	assert_true(hl < sizeof(r->headers));
	memcpy(r->headers, sol, hl);
	r->body_len = in.len - (size_t)(eoh + 4 - in.data);
	r->body = strndup(eoh + 4, r->body_len);
	r->json = json_tokener_parse(r->body);
	sbx_buf_release(&in);
}

static void http(const char *method, const char *path, const char *key, const char *ctype,
		 const char *body, struct resp *r)
{
	char req[BODY_CAP * 4];
	int n;

	n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n",
		     method, path);
	if (key)
		n +=
		    snprintf(req + n, sizeof(req) - (size_t)n, "Authorization: Bearer %s\r\n", key);
	if (ctype)
		n += snprintf(req + n, sizeof(req) - (size_t)n, "Content-Type: %s\r\n", ctype);
	if (body)
		n += snprintf(req + n, sizeof(req) - (size_t)n, "Content-Length: %zu\r\n",
			      strlen(body));
	n += snprintf(req + n, sizeof(req) - (size_t)n, "\r\n%s", body ? body : "");
	assert_true((size_t)n < sizeof(req));
	http_raw(req, (size_t)n, r);
}

/* Every reply is JSON with Content-Type application/json. */
static void assert_json_reply(const struct resp *r)
{
	char v[256];

	assert_non_null(r->json);
	assert_non_null(resp_header(r, "Content-Type", v));
	assert_string_equal(v, "application/json");
}

/* The one error shape; param NULL = no param. */
static void assert_error(const struct resp *r, int status, const char *type, const char *param)
{
	struct json_object *e, *v;

	assert_int_equal(r->status, status);
	assert_json_reply(r);
	assert_true(json_object_object_get_ex(r->json, "error", &e));
	assert_true(json_object_object_get_ex(e, "type", &v));
	assert_string_equal(json_object_get_string(v), type);
	assert_true(json_object_object_get_ex(e, "message", &v));
	assert_true(json_object_get_string_len(v) > 0);
	if (param) {
		assert_true(json_object_object_get_ex(e, "param", &v));
		assert_string_equal(json_object_get_string(v), param);
	} else {
		assert_false(json_object_object_get_ex(e, "param", &v));
	}
}

static struct json_object *get(struct json_object *o, const char *k)
{
	struct json_object *v = NULL;

	assert_true(json_object_object_get_ex(o, k, &v));
	return v;
}

/* The error's message of a reply. */
static const char *message(const struct resp *r)
{
	return json_object_get_string(get(get(r->json, "error"), "message"));
}

static int setup(void **state)
{
	struct sandbox_account acct;
	struct sandbox_key key;
	struct sbx_error err;

	snprintf(F.dir, sizeof(F.dir), "/tmp/t-api-http-%d-XXXXXX", (int)getpid());
	if (!mkdtemp(F.dir))
		return -1;
	sandbox_config_defaults(&F.cfg);
	snprintf(F.cfg.state_dir, sizeof(F.cfg.state_dir), "%s", F.dir);
	snprintf(F.cfg.listen, sizeof(F.cfg.listen), "127.0.0.1:0");
	F.cfg.max_body_bytes = BODY_CAP;
	F.cfg.http_threads = 2;
	F.cfg.max_api_keys_per_account = 4; /* test_api_keys_cap_and_pages */
	/* executions run nothing here (test_execution_code_not_utf8) */
	F.cfg.execution_runner = CONFIG_RUNNER_MOCK;
	sandbox_config_resolve(&F.cfg);
	sbx_error_clear(&err);
	if (sandbox_config_validate(&F.cfg, &err) < 0)
		return -1;
	F.svc = sandbox_svc_new(&F.cfg, SANDBOX_SVC_ADMIN, &err);
	if (!F.svc)
		return -1;
	if (sandbox_account_create(F.svc, "test", 5000000, &acct, &key, F.key, &err) < 0)
		return -1;
	memcpy(F.account_id, acct.id, sizeof(F.account_id));
	F.srv = api_server_start(F.svc, &err);
	if (!F.srv)
		return -1;
	F.port = api_server_port(F.srv);
	return F.port ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];

	api_server_stop(F.srv);
	sandbox_svc_free(F.svc);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", F.dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_auth(void **state)
{
	struct resp r;

	http("GET", "/v1/sandboxes", NULL, NULL, NULL, &r);
	assert_error(&r, 401, "authentication_error", NULL);
	char msg_missing[256];
	snprintf(msg_missing, sizeof(msg_missing), "%s",
		 json_object_get_string(get(get(r.json, "error"), "message")));
	resp_release(&r);

	/* Malformed, unknown and wrong-scheme keys: same 401, same message. */
	const char *bad[] = {"garbage", "aas_sk_",
			     "aas_sk_00000000000000000000000000000000000000"
			     "00000000000000000000000000"};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		http("GET", "/v1/usage", bad[i], NULL, NULL, &r);
		assert_error(&r, 401, "authentication_error", NULL);
		assert_string_equal(json_object_get_string(get(get(r.json, "error"), "message")),
				    msg_missing);
		resp_release(&r);
	}
	char raw[256];
	int n = snprintf(raw, sizeof(raw),
			 "GET /v1/usage HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
			 "Authorization: Basic %s\r\n\r\n",
			 F.key);
	http_raw(raw, (size_t)n, &r);
	assert_error(&r, 401, "authentication_error", NULL);
	resp_release(&r);

	/* Scheme is case-insensitive. */
	n = snprintf(raw, sizeof(raw),
		     "GET /v1/usage HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
		     "Authorization: bearer %s\r\n\r\n",
		     F.key);
	http_raw(raw, (size_t)n, &r);
	assert_int_equal(r.status, 200);
	resp_release(&r);
}

static void test_routes(void **state)
{
	struct resp r;
	char v[256];

	http("GET", "/v1/nope", F.key, NULL, NULL, &r);
	assert_error(&r, 404, "not_found", NULL);
	/* the daemon's own reference page, not a path in a repository */
	assert_string_equal(message(&r),
			    "unknown endpoint 'GET /v1/nope'; the endpoints are listed at "
			    "/reference.html");
	resp_release(&r);
	http("GET", "/v1/sandboxes/", F.key, NULL, NULL, &r);
	assert_error(&r, 404, "not_found", NULL);
	resp_release(&r);
	http("GET", "/v1/sandboxes/sbx_1/exec/more", F.key, NULL, NULL, &r);
	assert_error(&r, 404, "not_found", NULL);
	resp_release(&r);
	/* A sandbox that does not exist (or is another account's). */
	http("GET", "/v1/sandboxes/sbx_0123456789abcdef0123", F.key, NULL, NULL, &r);
	assert_error(&r, 404, "not_found", NULL);
	resp_release(&r);
	http("DELETE", "/v1/sandboxes/sbx_0123456789abcdef0123", F.key, NULL, NULL, &r);
	assert_error(&r, 404, "not_found", NULL);
	resp_release(&r);

	http("PUT", "/v1/sandboxes", F.key, NULL, NULL, &r);
	assert_error(&r, 405, "method_not_allowed", NULL);
	assert_non_null(resp_header(&r, "Allow", v));
	assert_string_equal(v, "GET, POST");
	resp_release(&r);
	http("GET", "/v1/sandboxes/sbx_1/exec", F.key, NULL, NULL, &r);
	assert_error(&r, 405, "method_not_allowed", NULL);
	assert_non_null(resp_header(&r, "Allow", v));
	assert_string_equal(v, "POST");
	resp_release(&r);
	http("POST", "/v1/limits", NULL, NULL, NULL, &r);
	assert_error(&r, 405, "method_not_allowed", NULL);
	resp_release(&r);
	http("GET", "/v1/api_keys/key_1", F.key, NULL, NULL, &r);
	assert_error(&r, 405, "method_not_allowed", NULL);
	assert_non_null(resp_header(&r, "Allow", v));
	assert_string_equal(v, "DELETE");
	resp_release(&r);
}

/* Every route of the table answers a method it lacks with 405 and the
 * table's own Allow (before any key is asked for). */
static void test_route_table_405(void **state)
{
	static const char *const methods[] = {"GET", "PUT", "POST", "DELETE", "PATCH"};
	const struct api_route *t;
	struct resp r;
	char url[256], v[256];
	size_t n, tried = 0;

	t = api_routes(&n);
	for (size_t i = 1; i < n; i++) {
		const char *path = t[i].path ? t[i].path : "/v1/openapi.json"; /* R_STATIC */

		if (i == R_PREVIEW_HOST) /* found by its Host, not by a path */
			continue;
		size_t o = 0;

		for (const char *p = path; *p && o + 40 < sizeof(url);) {
			if (*p == '{') {
				o += (size_t)snprintf(url + o, sizeof(url) - o, "%s",
						      strncmp(p, "{pid}", 5) == 0 ? "42" : "sbx_1");
				p = strchr(p, '}') + 1;
			} else {
				url[o++] = *p++;
			}
		}
		url[o] = '\0';
		for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++) {
			if (t[i].methods & api_method_bit(methods[m]))
				continue;
			http(methods[m], url, NULL, NULL, NULL, &r);
			if (r.status != 405)
				fail_msg("%s %s: %d, not 405", methods[m], url, r.status);
			assert_error(&r, 405, "method_not_allowed", NULL);
			assert_non_null(resp_header(&r, "Allow", v));
			assert_string_equal(v, api_methods_allow(t[i].methods));
			resp_release(&r);
			tried++;
		}
	}
	assert_true(tried >= n);
}

static void test_bodies(void **state)
{
	struct resp r;

	/* Auth comes first: a bad body without a key is 401. */
	http("POST", "/v1/sandboxes", NULL, "application/json", "not json", &r);
	assert_error(&r, 401, "authentication_error", NULL);
	resp_release(&r);

	http("POST", "/v1/sandboxes", F.key, "application/json", "not json", &r);
	assert_error(&r, 400, "invalid_request", NULL);
	assert_string_equal(message(&r), "the request body is not valid JSON: null expected at "
					 "line 1, column 2 (byte 1)");
	resp_release(&r);
	http("POST", "/v1/sandboxes", F.key, "application/json", "{\"size\": \"small\",\n \"x\": }",
	     &r);
	assert_error(&r, 400, "invalid_request", NULL);
	assert_non_null(strstr(message(&r), "unexpected character at line 2, column 7 (byte 24)"));
	resp_release(&r);
	/* an unknown size lists the sizes */
	http("POST", "/v1/sandboxes", F.key, "application/json", "{\"size\": \"huge\"}", &r);
	assert_error(&r, 400, "invalid_request", "size");
	assert_non_null(
	    strstr(message(&r), "unknown size 'huge'; the sizes are 'small', 'medium'"));
	resp_release(&r);
	http("POST", "/v1/sandboxes", F.key, "application/json", "[1]", &r);
	assert_error(&r, 400, "invalid_request", NULL);
	resp_release(&r);
	http("POST", "/v1/sandboxes", F.key, "application/json; charset=utf-8",
	     "{\"sise\":\"small\"}", &r);
	assert_error(&r, 400, "invalid_request", "sise");
	resp_release(&r);
	http("POST", "/v1/sandboxes", F.key, NULL, "{\"timeout_minutes\": \"15\"}", &r);
	assert_error(&r, 400, "invalid_request", "timeout_minutes");
	resp_release(&r);
	http("POST", "/v1/sandboxes/sbx_0123456789abcdef0123/exec", F.key, "application/json",
	     "{\"command\": \"ls\", \"env\": {\"A B\": \"x\"}}", &r);
	assert_error(&r, 400, "invalid_request", "env");
	resp_release(&r);
	/* Body is checked before the sandbox is looked up. */
	http("POST", "/v1/sandboxes/sbx_0123456789abcdef0123/exec", F.key, "application/json", "{}",
	     &r);
	assert_error(&r, 400, "invalid_request", "command");
	resp_release(&r);
	http("POST", "/v1/sandboxes/sbx_0123456789abcdef0123/extend", F.key, "application/json",
	     "{\"timeout_minutes\": 0}", &r);
	assert_error(&r, 400, "invalid_request", "timeout_minutes");
	resp_release(&r);

	/* 415: a body with another media type. */
	http("POST", "/v1/sandboxes", F.key, "text/plain", "{}", &r);
	assert_error(&r, 415, "unsupported_media_type", NULL);
	resp_release(&r);
	/* curl -d's default media type is read as JSON; a form body is then
	 * simply not JSON. */
	http("POST", "/v1/sandboxes", F.key, "application/x-www-form-urlencoded", "size=small", &r);
	assert_error(&r, 400, "invalid_request", NULL);
	resp_release(&r);
	http("POST", "/v1/sandboxes", F.key, "application/jsonx", "{}", &r);
	assert_error(&r, 415, "unsupported_media_type", NULL);
	resp_release(&r);
}

static void test_oversize(void **state)
{
	struct resp r;
	size_t big = BODY_CAP + 1;
	char *body = malloc(big + 1);

	/* Declared length over the cap: 413 before the body is read. */
	memset(body, ' ', big);
	body[0] = '{';
	body[big - 1] = '}';
	body[big] = '\0';
	http("POST", "/v1/sandboxes", F.key, "application/json", body, &r);
	assert_error(&r, 413, "payload_too_large", NULL);
	resp_release(&r);

	/* Exactly the cap is fine (reaches the decoder: unknown field). */
	char *ok = malloc(BODY_CAP + 1);
	int n = snprintf(ok, BODY_CAP + 1, "{\"x\":\"");
	memset(ok + n, 'a', BODY_CAP - (size_t)n - 2);
	memcpy(ok + BODY_CAP - 2, "\"}", 3);
	assert_int_equal(strlen(ok), BODY_CAP);
	http("POST", "/v1/sandboxes", F.key, "application/json", ok, &r);
	assert_error(&r, 400, "invalid_request", "x");
	resp_release(&r);
	free(ok);

	/* Chunked, no length: the server stops buffering at the cap. */
	struct sbx_buf raw;
	sbx_buf_init(&raw, 1 << 20);
	sbx_buf_printf(&raw,
		       "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
		       "Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
		       "Transfer-Encoding: chunked\r\n\r\n",
		       F.key);
	for (int i = 0; i < 8; i++) {
		sbx_buf_printf(&raw, "%zx\r\n", (size_t)1024);
		for (int k = 0; k < 1024; k++)
			sbx_buf_append(&raw, " ", 1);
		sbx_buf_append(&raw, "\r\n", 2);
	}
	sbx_buf_printf(&raw, "0\r\n\r\n");
	http_raw(raw.data, raw.len, &r);
	assert_error(&r, 413, "payload_too_large", NULL);
	resp_release(&r);
	sbx_buf_release(&raw);
	free(body);
}

static void test_limits(void **state)
{
	struct resp r;

	http("GET", "/v1/limits", NULL, NULL, NULL, &r); /* no auth needed */
	assert_int_equal(r.status, 200);
	assert_json_reply(&r);
	assert_string_equal(json_object_get_string(get(r.json, "object")), "limits");
	assert_int_equal(json_object_get_int(get(r.json, "sandboxes_per_account")), 20);
	assert_int_equal(json_object_get_int(get(r.json, "max_body_bytes")), BODY_CAP);
	assert_int_equal(json_object_get_int(get(get(r.json, "timeout_minutes"), "max")), 1440);
	struct json_object *sizes = get(r.json, "sizes");
	assert_int_equal(json_object_array_length(sizes), 3);
	assert_string_equal(
	    json_object_get_string(get(json_object_array_get_idx(sizes, 1), "price_usd_per_hour")),
	    "0.280000");
	assert_int_equal(json_object_get_int(get(get(get(r.json, "startup"), "cold"), "samples")),
			 0);
	resp_release(&r);
}

static void test_sandboxes_list_and_usage(void **state)
{
	struct resp r;

	http("GET", "/v1/sandboxes", F.key, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_json_reply(&r);
	assert_string_equal(json_object_get_string(get(r.json, "object")), "list");
	assert_int_equal(json_object_array_length(get(r.json, "data")), 0);
	assert_false(json_object_get_boolean(get(r.json, "has_more")));
	resp_release(&r);
	http("GET", "/v1/sandboxes?status=running&limit=100", F.key, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	resp_release(&r);
	http("GET", "/v1/sandboxes?limit=0", F.key, NULL, NULL, &r);
	assert_error(&r, 400, "invalid_request", "limit");
	resp_release(&r);
	http("GET", "/v1/sandboxes?limit=101", F.key, NULL, NULL, &r);
	assert_error(&r, 400, "invalid_request", "limit");
	resp_release(&r);
	http("GET", "/v1/sandboxes?limit=1x", F.key, NULL, NULL, &r);
	assert_error(&r, 400, "invalid_request", "limit");
	resp_release(&r);
	/* paused is a status the list filters by (none here); creating, an
	 * internal state, and anything else are not */
	http("GET", "/v1/sandboxes?status=paused", F.key, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_int_equal(json_object_array_length(get(r.json, "data")), 0);
	resp_release(&r);
	http("GET", "/v1/sandboxes?status=creating", F.key, NULL, NULL, &r);
	assert_error(&r, 400, "invalid_request", "status");
	resp_release(&r);
	http("GET", "/v1/sandboxes?status=bogus", F.key, NULL, NULL, &r);
	assert_error(&r, 400, "invalid_request", "status");
	resp_release(&r);

	http("GET", "/v1/usage", F.key, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_json_reply(&r);
	assert_string_equal(json_object_get_string(get(r.json, "object")), "usage");
	assert_int_equal(json_object_get_int64(get(r.json, "balance_micro_usd")), 5000000);
	assert_string_equal(json_object_get_string(get(r.json, "balance_usd")), "5.000000");
	assert_int_equal(json_object_get_int64(get(r.json, "available_micro_usd")), 5000000);
	assert_int_equal(json_object_get_int64(get(r.json, "reserved_micro_usd")), 0);
	assert_int_equal(json_object_get_int64(get(r.json, "consumed_micro_usd")), 0);
	assert_int_equal(json_object_get_int(get(get(r.json, "sandboxes"), "limit")), 20);
	assert_non_null(get(get(r.json, "period"), "from"));
	assert_false(json_object_object_get_ex(r.json, "buckets", NULL));
	resp_release(&r);

	http("GET", "/v1/usage?from=2026-01-01T00:00:00Z&to=2026-01-03T00:00:00Z&granularity=day",
	     F.key, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(json_object_get_string(get(get(r.json, "period"), "from")),
			    "2026-01-01T00:00:00Z");
	assert_int_equal(json_object_array_length(get(r.json, "buckets")), 2);
	resp_release(&r);
	http("GET", "/v1/usage?from=yesterday", F.key, NULL, NULL, &r);
	assert_error(&r, 400, "invalid_request", "from");
	resp_release(&r);
	http("GET", "/v1/usage?to=2026-13-01T00:00:00Z", F.key, NULL, NULL, &r);
	assert_error(&r, 400, "invalid_request", "to");
	resp_release(&r);
	http("GET", "/v1/usage?granularity=week", F.key, NULL, NULL, &r);
	assert_error(&r, 400, "invalid_request", "granularity");
	resp_release(&r);
}

static void test_api_keys(void **state)
{
	struct resp r;
	char secret[80], key_id[SANDBOX_ID_MAX], path[96];

	http("POST", "/v1/api_keys", F.key, NULL, NULL, &r);
	assert_int_equal(r.status, 201);
	assert_json_reply(&r);
	assert_string_equal(json_object_get_string(get(r.json, "object")), "api_key");
	snprintf(secret, sizeof(secret), "%s", json_object_get_string(get(r.json, "secret")));
	snprintf(key_id, sizeof(key_id), "%s", json_object_get_string(get(r.json, "id")));
	assert_int_equal(strncmp(secret, "aas_sk_", 7), 0);
	assert_int_equal(strncmp(key_id, "key_", 4), 0);
	assert_non_null(get(r.json, "prefix"));
	assert_non_null(get(r.json, "created_at"));
	resp_release(&r);

	http("POST", "/v1/api_keys", F.key, "application/json", "{\"name\":\"x\"}", &r);
	assert_error(&r, 400, "invalid_request", "name");
	resp_release(&r);

	/* The new key works; the list has both keys and no secrets. */
	http("GET", "/v1/api_keys", secret, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	struct json_object *data = get(r.json, "data");
	assert_int_equal(json_object_array_length(data), 2);
	assert_null(strstr(r.body, secret));
	assert_null(strstr(r.body, F.key));
	for (size_t i = 0; i < 2; i++)
		assert_false(
		    json_object_object_get_ex(json_object_array_get_idx(data, i), "secret", NULL));
	resp_release(&r);

	snprintf(path, sizeof(path), "/v1/api_keys/%s", key_id);
	http("DELETE", path, F.key, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(json_object_get_string(get(r.json, "id")), key_id);
	assert_true(json_object_get_boolean(get(r.json, "revoked")));
	resp_release(&r);

	/* The revoked key is refused like any bad key. */
	http("GET", "/v1/sandboxes", secret, NULL, NULL, &r);
	assert_error(&r, 401, "authentication_error", NULL);
	resp_release(&r);
	/* The first key still works, and an unknown key id is 404. */
	http("DELETE", "/v1/api_keys/key_000000000000", F.key, NULL, NULL, &r);
	assert_error(&r, 404, "not_found", NULL);
	resp_release(&r);
}

/* At most max_api_keys_per_account valid keys (429 beyond), published in
 * /v1/limits; the list comes a page at a time (limit, starting_after,
 * has_more) and holds every key, revoked ones too. Runs after
 * test_api_keys: one valid key and one revoked. */
static void test_api_keys_cap_and_pages(void **state)
{
	char after[SANDBOX_ID_MAX] = "", path[128];
	int created = 0, listed = 0;
	struct resp r;

	(void)state;
	http("GET", "/v1/limits", NULL, NULL, NULL, &r);
	assert_int_equal(json_object_get_int(get(r.json, "api_keys_per_account")), 4);
	assert_int_equal(json_object_get_int(get(r.json, "receipts_per_account")), 10000);
	assert_int_equal(json_object_get_int(get(r.json, "retention_hours")), 168);
	resp_release(&r);
	for (;;) {
		http("POST", "/v1/api_keys", F.key, NULL, NULL, &r);
		if (r.status != 201)
			break;
		created++;
		resp_release(&r);
		assert_true(created <= 3);
	}
	assert_error(&r, 429, "concurrency_limit", NULL);
	resp_release(&r);
	assert_int_equal(created, 3);

	for (int page = 0; page < 10; page++) {
		snprintf(path, sizeof(path), "/v1/api_keys?limit=2%s%s",
			 after[0] ? "&starting_after=" : "", after);
		http("GET", path, F.key, NULL, NULL, &r);
		assert_int_equal(r.status, 200);
		struct json_object *data = get(r.json, "data");
		size_t n = json_object_array_length(data);
		assert_true(n >= 1 && n <= 2);
		listed += (int)n;
		snprintf(after, sizeof(after), "%s",
			 json_object_get_string(get(json_object_array_get_idx(data, n - 1), "id")));
		bool more = json_object_get_boolean(get(r.json, "has_more"));
		resp_release(&r);
		if (!more)
			break;
	}
	assert_int_equal(listed, 5); /* the account's, the revoked, three new */

	http("GET", "/v1/api_keys?limit=0", F.key, NULL, NULL, &r);
	assert_error(&r, 400, "invalid_request", "limit");
	resp_release(&r);
	http("GET", "/v1/api_keys?starting_after=key_000000000000", F.key, NULL, NULL, &r);
	assert_error(&r, 404, "not_found", "starting_after");
	resp_release(&r);
}

/* Rows of `table` of the test account, read on a connection of its own. */
static int db_count(const char *table)
{
	char path[PATH_MAX], sql[128];
	sqlite3 *db = NULL;
	sqlite3_stmt *q = NULL;
	int n = -1;

	snprintf(path, sizeof(path), "%s/sandboxd.db", F.dir);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s WHERE account_id = ?", table);
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
	sqlite3_bind_text(q, 1, F.account_id, -1, SQLITE_STATIC);
	if (sqlite3_step(q) == SQLITE_ROW)
		n = sqlite3_column_int(q, 0);
	sqlite3_finalize(q);
	sqlite3_close(db);
	return n;
}

/* Code json-c accepts but RFC 3629 does not (overlong C0 80, a surrogate,
 * an F5 lead byte, an overlong '/') is refused 400 `code` before anything is
 * held or run: no execution row, no ledger entry but the credit. */
static void test_execution_code_not_utf8(void **state)
{
	static const char *const bad[] = {"x = '\xc0\x80'", "x = '\xed\xa0\x80'",
					  "x = '\xf5\x80\x80\x80'",
					  "# -*- coding: latin-1 -*-\\nx = '\xe0\x80\xaf'"};
	char body[256];
	struct resp r;

	(void)state;
	int ledger = db_count("ledger");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(body, sizeof(body),
			 "{\"runtime\":\"python\",\"timeout_seconds\":5,\"code\":\"%s\"}", bad[i]);
		http("POST", "/v1/sandbox/executions", F.key, "application/json", body, &r);
		assert_error(&r, 400, "invalid_request", "code");
		resp_release(&r);
	}
	assert_int_equal(db_count("executions"), 0);
	assert_int_equal(db_count("ledger"), ledger);

	/* valid UTF-8 still runs (the mock runner) */
	http("POST", "/v1/sandbox/executions", F.key, "application/json",
	     "{\"runtime\":\"python\",\"timeout_seconds\":5,\"code\":\"x = '\xc3\xa9'\"}", &r);
	assert_int_equal(r.status, 200);
	resp_release(&r);
	assert_int_equal(db_count("executions"), 1);
}

static void test_keep_alive_two_requests(void **state)
{
	/* Two pipelined requests on one connection both get answered. */
	struct resp r;
	const char raw[] = "GET /v1/limits HTTP/1.1\r\nHost: x\r\n\r\n"
			   "GET /v1/nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

	http_raw(raw, sizeof(raw) - 1, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "HTTP/1.1 404"));
	resp_release(&r);
}

/* X-Request-Id: a sane client value echoed, else a generated one; on
 * errors (404 before auth, 401) and successes alike. */
static void test_request_id(void **state)
{
	char v[256], first[256];
	struct resp r;
	static const char *const reqs[] = {
	    "GET /v1/limits HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
	    "X-Request-Id: trace-42.a:b\r\n\r\n",
	    "GET /v1/nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
	    "X-Request-Id: trace-42.a:b\r\n\r\n",
	    "GET /v1/usage HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
	    "X-Request-Id: trace-42.a:b\r\n\r\n"};

	for (size_t i = 0; i < 3; i++) {
		http_raw(reqs[i], strlen(reqs[i]), &r);
		assert_int_equal(r.status, i == 0 ? 200 : i == 1 ? 404 : 401);
		assert_non_null(resp_header(&r, "X-Request-Id", v));
		assert_string_equal(v, "trace-42.a:b");
		resp_release(&r);
	}
	/* none: generated, and another one per request */
	http("GET", "/v1/limits", NULL, NULL, NULL, &r);
	assert_non_null(resp_header(&r, "X-Request-Id", first));
	assert_int_equal(strncmp(first, "req_", 4), 0);
	assert_int_equal(strlen(first), 4 + 24);
	resp_release(&r);
	http("GET", "/v1/limits", NULL, NULL, NULL, &r);
	assert_non_null(resp_header(&r, "X-Request-Id", v));
	assert_string_not_equal(v, first);
	resp_release(&r);
	/* not sane (a quote, or over 64 bytes): replaced */
	static const char *const bad[] = {
	    "GET /v1/limits HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
	    "X-Request-Id: a\"b\r\n\r\n",
	    "GET /v1/limits HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Request-Id: "
	    "0123456789012345678901234567890123456789012345678901234567890123456789\r\n\r\n"};
	for (size_t i = 0; i < 2; i++) {
		http_raw(bad[i], strlen(bad[i]), &r);
		assert_non_null(resp_header(&r, "X-Request-Id", v));
		assert_int_equal(strncmp(v, "req_", 4), 0);
		resp_release(&r);
	}
}

/* A browser's terminal: the key as a `bearer.<key>` subprotocol entry
 * beside sandboxd.v1 (api/http_wsauth.c). Without a guest the upgrade
 * ends at 404 (no such sandbox), which shows the key was taken; a wrong
 * key is 401, a foreign Origin 403, and no reply carries the key. */
static void ws_upgrade(const char *proto, const char *origin, struct resp *r)
{
	char raw[1024];
	int n = snprintf(
	    raw, sizeof(raw),
	    "GET /v1/sandboxes/sbx_nosuch/terminal HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n"
	    "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
	    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	    "Sec-WebSocket-Protocol: %s\r\n%s%s%s\r\n",
	    F.port, proto, origin ? "Origin: " : "", origin ? origin : "", origin ? "\r\n" : "");
	assert_true((size_t)n < sizeof(raw));
	http_raw(raw, (size_t)n, r);
	/* the key (past its prefix) is in no reply */
	assert_null(strstr(r->headers, F.key + 7));
	assert_null(strstr(r->body, F.key + 7));
	assert_null(strstr(r->headers, "000000000000"));
	assert_null(strstr(r->body, "000000000000"));
}

static void test_terminal_subprotocol_auth(void **state)
{
	char proto[256], origin[64], out[129];
	struct resp r;

	(void)state;
	/* the parser */
	assert_int_equal(api_ws_protocol_key("sandboxd.v1, bearer.aas_sk_abc123", out, sizeof out),
			 1);
	assert_string_equal(out, "aas_sk_abc123");
	assert_int_equal(api_ws_protocol_key("bearer.aas_sk_abc123", out, sizeof out), 0);
	assert_int_equal(api_ws_protocol_key("sandboxd.v1", out, sizeof out), 0);
	assert_int_equal(api_ws_protocol_key(NULL, out, sizeof out), 0);
	assert_int_equal(
	    api_ws_protocol_key("sandboxd.v1,bearer.aas_sk_a1,bearer.aas_sk_b2", out, sizeof out),
	    -1);
	assert_int_equal(api_ws_protocol_key("sandboxd.v1, bearer.xyz", out, sizeof out), -1);
	assert_true(api_ws_protocol_offered(" x , sandboxd.v1 ", "sandboxd.v1"));
	assert_false(api_ws_protocol_offered("sandboxd.v10", "sandboxd.v1"));
	assert_true(api_origin_is_host(NULL, "h:1"));
	assert_true(api_origin_is_host("http://H:1", "h:1"));
	assert_true(api_origin_is_host("https://h:1", "h:1"));
	assert_false(api_origin_is_host("http://h:1.evil.example", "h:1"));
	assert_false(api_origin_is_host("http://evil.example", "h:1"));
	assert_false(api_origin_is_host("null", "h:1"));
	assert_false(api_origin_is_host("http://h:1", NULL));

	/* over the socket: the right key passes auth (404: no such sandbox) */
	snprintf(proto, sizeof proto, "sandboxd.v1, bearer.%s", F.key);
	snprintf(origin, sizeof origin, "http://127.0.0.1:%u", F.port);
	ws_upgrade(proto, origin, &r);
	assert_error(&r, 404, "not_found", NULL);
	/* a refused upgrade closes its connection: kept alive, libmicrohttpd
	 * held it without telling the connection table, whose deadline then
	 * cut whatever connection reused its descriptor (later tests' parked
	 * requests, unanswered) */
	char v[256];
	assert_non_null(resp_header(&r, "Connection", v));
	assert_string_equal(v, "close");
	resp_release(&r);
	/* any route: a client may ask any request to upgrade */
	char up[512];
	int un = snprintf(up, sizeof up,
			  "GET /v1/usage HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
			  "Connection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n",
			  F.key);
	http_raw(up, (size_t)un, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(resp_header(&r, "Connection", v));
	assert_string_equal(v, "close");
	resp_release(&r);
	ws_upgrade(proto, NULL, &r); /* not a browser: no Origin to check */
	assert_error(&r, 404, "not_found", NULL);
	resp_release(&r);
	/* a wrong key: 401 before the upgrade */
	ws_upgrade("sandboxd.v1, bearer.aas_sk_0000000000000000000000000000000000000000", origin,
		   &r);
	assert_error(&r, 401, "authentication_error", NULL);
	resp_release(&r);
	/* the key without sandboxd.v1 is not read */
	snprintf(proto, sizeof proto, "bearer.%s", F.key);
	ws_upgrade(proto, origin, &r);
	assert_error(&r, 401, "authentication_error", NULL);
	resp_release(&r);
	/* another site's page, or an opaque origin: 403, the key not looked at */
	snprintf(proto, sizeof proto, "sandboxd.v1, bearer.%s", F.key);
	ws_upgrade(proto, "http://evil.example", &r);
	assert_error(&r, 403, "permission_error", NULL);
	resp_release(&r);
	ws_upgrade(proto, "null", &r);
	assert_error(&r, 403, "permission_error", NULL);
	resp_release(&r);
	/* only the terminal takes it: another route still wants Authorization */
	char raw[512];
	int n = snprintf(raw, sizeof(raw),
			 "GET /v1/usage HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
			 "Sec-WebSocket-Protocol: sandboxd.v1, bearer.%s\r\n\r\n",
			 F.key);
	http_raw(raw, (size_t)n, &r);
	assert_error(&r, 401, "authentication_error", NULL);
	resp_release(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_auth),
	    cmocka_unit_test(test_terminal_subprotocol_auth),
	    cmocka_unit_test(test_routes),
	    cmocka_unit_test(test_route_table_405),
	    cmocka_unit_test(test_request_id),
	    cmocka_unit_test(test_bodies),
	    cmocka_unit_test(test_oversize),
	    cmocka_unit_test(test_limits),
	    cmocka_unit_test(test_sandboxes_list_and_usage),
	    cmocka_unit_test(test_api_keys),
	    cmocka_unit_test(test_api_keys_cap_and_pages),
	    cmocka_unit_test(test_execution_code_not_utf8),
	    cmocka_unit_test(test_keep_alive_two_requests),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
