/* api/: the routes the daemon answers equal the operations docs/openapi.yaml
 * describes, both ways. The daemon's side is its one route table
 * (api_routes(), api/routes.c: the Allow header of every 405, auth, scope,
 * dispatch and the metrics labels come from it) plus the compiled-in files
 * under /v1/ (api/assets.h); the description is the one the daemon serves
 * at /v1/openapi.json (scripts/web-assets.py, which refuses a key given
 * twice). Each path is also resolved by the dispatcher itself
 * (api_route_methods), so a table that says one thing while the parser does
 * another fails too. docs/api.md, "How the description is checked". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <json-c/json.h>

#include "api/assets.h"
#include "api/http-priv.h"

#define OPS_MAX 128

static const char *const http_methods[] = {"get",   "put",  "post",    "delete",
					   "patch", "head", "options", "trace"};

struct ops {
	char op[OPS_MAX][160]; /* "GET /v1/sandboxes" */
	size_t n;
};

static void ops_add(struct ops *s, const char *method, const char *path)
{
	char m[16];
	size_t i;

	for (i = 0; method[i] && i < sizeof(m) - 1; i++)
		m[i] = (char)(method[i] >= 'a' && method[i] <= 'z' ? method[i] - 32 : method[i]);
	m[i] = '\0';
	assert_true(s->n < OPS_MAX);
	snprintf(s->op[s->n++], sizeof(s->op[0]), "%s %s", m, path);
}

static bool ops_has(const struct ops *s, const char *op)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->op[i], op) == 0)
			return true;
	return false;
}

/* "GET, POST" -> each method added for `path`. */
static void ops_add_list(struct ops *s, const char *methods, const char *path)
{
	char buf[64], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", methods);
	for (char *m = strtok_r(buf, ", ", &save); m; m = strtok_r(NULL, ", ", &save))
		ops_add(s, m, path);
}

/* The description the daemon serves, parsed. */
static struct json_object *spec_load(void)
{
	for (size_t i = 0; i < api_assets_count; i++)
		if (strcmp(api_assets[i].path, "/v1/openapi.json") == 0)
			return json_tokener_parse((const char *)api_assets[i].data);
	fail_msg("no /v1/openapi.json among the compiled-in files");
	return NULL;
}

/* `tmpl` with each "{name}" replaced by a plausible value: a URL the
 * dispatcher can resolve. */
static void instantiate(const char *tmpl, char *out, size_t len)
{
	size_t o = 0;

	for (const char *p = tmpl; *p && o + 1 < len;) {
		if (*p == '{') {
			const char *end = strchr(p, '}');
			const char *v =
			    strncmp(p, "{pid}", 5) == 0 ? "42" : "sbx_0123456789abcdef01234567";

			assert_non_null(end);
			o += (size_t)snprintf(out + o, len - o, "%s", v);
			p = end + 1;
		} else {
			out[o++] = *p++;
		}
	}
	out[o < len ? o : len - 1] = '\0';
}

/* The methods of one path item of the description, as "GET, POST". */
static void spec_methods(struct json_object *item, char *out, size_t len)
{
	struct ops s = {.n = 0};
	size_t o = 0;

	for (size_t i = 0; i < sizeof(http_methods) / sizeof(http_methods[0]); i++)
		if (json_object_object_get_ex(item, http_methods[i], NULL))
			ops_add(&s, http_methods[i], "");
	out[0] = '\0';
	for (size_t i = 0; i < s.n; i++)
		o += (size_t)snprintf(out + o, len - o, "%s%.*s", i ? ", " : "",
				      (int)strcspn(s.op[i], " "), s.op[i]);
}

/* The same set of methods, whatever the order. */
static bool same_methods(const char *a, const char *b)
{
	struct ops x = {.n = 0}, y = {.n = 0};

	ops_add_list(&x, a, "");
	ops_add_list(&y, b, "");
	if (x.n != y.n)
		return false;
	for (size_t i = 0; i < x.n; i++)
		if (!ops_has(&y, x.op[i]))
			return false;
	return true;
}

static void test_spec_equals_route_table(void **state)
{
	struct json_object *spec = spec_load(), *paths;
	struct ops daemon = {.n = 0}, described = {.n = 0};
	const struct api_route *t;
	size_t n, bad = 0;

	assert_non_null(spec);
	assert_true(json_object_object_get_ex(spec, "paths", &paths));

	/* the daemon's side: its route table and the files it serves under /v1/ */
	t = api_routes(&n);
	assert_true(n > 2);
	assert_null(t[0].path);
	assert_null(t[n - 1].path);
	for (size_t i = 1; i + 1 < n; i++) {
		if (i == R_PREVIEW_HOST) /* found by its Host, not by a path */
			continue;
		if (!t[i].path || !t[i].methods)
			fail_msg("route %zu of the dispatcher's table has no path or methods", i);
		ops_add_list(&daemon, api_methods_allow(t[i].methods), t[i].path);
	}
	for (size_t i = 0; i < api_assets_count; i++)
		if (strncmp(api_assets[i].path, "/v1/", 4) == 0)
			ops_add(&daemon, "GET", api_assets[i].path);

	/* the description's side */
	json_object_object_foreach(paths, path, item)
	{
		for (size_t i = 0; i < sizeof(http_methods) / sizeof(http_methods[0]); i++)
			if (json_object_object_get_ex(item, http_methods[i], NULL))
				ops_add(&described, http_methods[i], path);
	}

	for (size_t i = 0; i < daemon.n; i++)
		if (!ops_has(&described, daemon.op[i])) {
			print_error(
			    "the daemon answers %s; docs/openapi.yaml does not describe it\n",
			    daemon.op[i]);
			bad++;
		}
	for (size_t i = 0; i < described.n; i++)
		if (!ops_has(&daemon, described.op[i])) {
			print_error(
			    "docs/openapi.yaml describes %s; the daemon does not answer it\n",
			    described.op[i]);
			bad++;
		}
	assert_int_equal(bad, 0);
	json_object_put(spec);
}

/* Every described path, made concrete, reaches the dispatcher with exactly
 * the described methods; so does every path of the table (a table entry
 * the parser never returns would fail here). */
static void test_dispatcher_resolves_described_paths(void **state)
{
	struct json_object *spec = spec_load(), *paths;
	const struct api_route *t;
	char url[256], want[64];
	size_t n, bad = 0;

	assert_non_null(spec);
	assert_true(json_object_object_get_ex(spec, "paths", &paths));
	json_object_object_foreach(paths, path, item)
	{
		instantiate(path, url, sizeof(url));
		spec_methods(item, want, sizeof(want));
		if (!same_methods(api_route_methods(url), want)) {
			print_error("%s: the daemon answers '%s', docs/openapi.yaml says '%s'\n",
				    url, api_route_methods(url), want);
			bad++;
		}
	}
	t = api_routes(&n);
	for (size_t i = 1; i + 1 < n; i++) {
		if (i == R_PREVIEW_HOST)
			continue;
		instantiate(t[i].path, url, sizeof(url));
		if (strcmp(api_route_methods(url), api_methods_allow(t[i].methods)) != 0) {
			print_error("%s resolves to '%s', its table entry says '%s'\n", url,
				    api_route_methods(url), api_methods_allow(t[i].methods));
			bad++;
		}
	}
	assert_int_equal(bad, 0);
	/* and an unknown path has no methods */
	assert_string_equal(api_route_methods("/v1/nothing"), "");
	assert_string_equal(api_route_methods("/v1/sandboxes/x/nothing"), "");
	json_object_put(spec);
}

/* The Allow text of every set of methods names exactly its methods, each
 * once, in the table's order (GET, PUT, POST, DELETE, HEAD, PATCH,
 * OPTIONS). */
static void test_allow_derived_from_bits(void **state)
{
	static const char *const order[] = {"GET",  "PUT",   "POST",   "DELETE",
					    "HEAD", "PATCH", "OPTIONS"};

	for (unsigned bits = 0; bits < 128; bits++) {
		char want[64] = "";

		for (size_t i = 0; i < 7; i++)
			if (bits & (1u << i))
				snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%s",
					 want[0] ? ", " : "", order[i]);
		assert_string_equal(api_methods_allow(bits), want);
	}
	for (size_t i = 0; i < 7; i++) {
		assert_int_equal(api_method_bit(order[i]), 1u << i);
		assert_string_equal(api_method_name(1u << i), order[i]);
	}
	assert_int_equal(api_method_bit("TRACE"), 0);
	assert_int_equal(api_method_bit("get"), 0);
	assert_int_equal(api_method_bit(""), 0);
}

/* Every row is whole: a handler for each route (none for R_NONE), a body
 * only on routes that take POST, STREAM never with BODY (its body is its
 * handler's), and the routes that need no key are the public ones. */
static void test_table_rows(void **state)
{
	const struct api_route *t;
	size_t n;

	t = api_routes(&n);
	assert_int_equal(n, R_COUNT);
	assert_null(t[R_NONE].handler);
	assert_int_equal(t[R_NONE].methods, 0);
	for (size_t i = 1; i < n; i++) {
		assert_non_null(t[i].handler);
		assert_true(t[i].methods != 0 && t[i].methods < 128);
		/* HEAD, PATCH and OPTIONS are the ports route's only */
		if (i != R_PORTS)
			assert_true(t[i].methods < 16);
		if (t[i].flags & API_ROUTE_BODY)
			assert_true(t[i].methods & API_POST);
		assert_false((t[i].flags & API_ROUTE_BODY) && (t[i].flags & API_ROUTE_STREAM));
		if (t[i].scope != 0u)
			assert_true(t[i].flags & API_ROUTE_AUTH);
		/* no key: the limits, the runtimes, the compiled-in files and a
		 * preview's host (its token is the key) */
		assert_int_equal(!(t[i].flags & API_ROUTE_AUTH), i == R_LIMITS || i == R_RUNTIMES ||
								     i == R_PREVIEW_HOST ||
								     i == R_STATIC);
	}
	assert_int_equal(t[R_KEYS].scope, SANDBOX_SCOPE_KEYS);
	assert_int_equal(t[R_KEY].scope, SANDBOX_SCOPE_KEYS);
	assert_int_equal(t[R_EXECUTIONS].scope, SANDBOX_SCOPE_SANDBOXES);
	assert_int_equal(t[R_EXECUTION].scope, SANDBOX_SCOPE_SANDBOXES);
	assert_ptr_equal(api_route_get(R_COUNT), &t[R_NONE]);
}

/* Every route has a metrics name of its own, and each is a label of
 * /metrics once the route answered; an out-of-range route counts as
 * "unknown". */
static void test_metrics_names(void **state)
{
	const struct api_route *t;
	struct sbx_buf b;
	char want[160];
	size_t n;

	t = api_routes(&n);
	for (size_t i = 0; i < n; i++) {
		assert_non_null(t[i].metric);
		assert_true(t[i].metric[0] != '\0');
		for (size_t j = 0; j < i; j++)
			if (strcmp(t[i].metric, t[j].metric) == 0)
				fail_msg("routes %zu and %zu share the metrics name '%s'", j, i,
					 t[i].metric);
		api_metrics_request((int)i, 200, 1000);
	}
	assert_string_equal(t[R_NONE].metric, "unknown");
	api_metrics_request(R_COUNT + 3, 418, 5);
	sbx_buf_init(&b, 1u << 20);
	assert_int_equal(api_metrics_render_requests(&b), 0);
	for (size_t i = 0; i < n; i++) {
		snprintf(want, sizeof(want),
			 "sandboxd_http_requests_total{route=\"%s\",status=\"200\"} 1\n",
			 t[i].metric);
		if (!strstr(b.data, want))
			fail_msg("/metrics lacks %s", want);
		snprintf(want, sizeof(want),
			 "sandboxd_http_request_duration_seconds_count{route=\"%s\"} %d\n",
			 t[i].metric, i == R_NONE ? 2 : 1);
		if (!strstr(b.data, want))
			fail_msg("/metrics lacks %s", want);
	}
	assert_non_null(
	    strstr(b.data, "sandboxd_http_requests_total{route=\"unknown\",status=\"other\"} 1\n"));
	sbx_buf_release(&b);
}

/* The resolver's parameters: {id} and {key_id} a segment shorter than
 * SANDBOX_ID_MAX, {pid} 2..4194304 without a leading zero; a literal path
 * wins over a pattern. */
static void test_resolve_params(void **state)
{
	char id[SANDBOX_ID_MAX], long_id[SANDBOX_ID_MAX + 32], url[SANDBOX_ID_MAX + 64];
	uint32_t pid = 0;

	assert_int_equal(api_route_resolve("/v1/sandboxes/sbx_1/processes/42/stdin", id, &pid),
			 R_PROCESS_STDIN);
	assert_string_equal(id, "sbx_1");
	assert_int_equal(pid, 42);
	assert_int_equal(
	    api_route_resolve("/v1/sandboxes/sbx_1/processes/4194304/output", id, &pid),
	    R_PROCESS_OUTPUT);
	assert_int_equal(pid, 4194304);
	static const char *const none[] = {
	    "/v1/sandboxes/sbx_1/processes/4194305/output",
	    "/v1/sandboxes/sbx_1/processes/1/output",
	    "/v1/sandboxes/sbx_1/processes/042/output",
	    "/v1/sandboxes/sbx_1/processes/4x/output",
	    "/v1/sandboxes/sbx_1/processes//output",
	    "/v1/sandboxes/sbx_1/processes/42",
	    "/v1/sandboxes/sbx_1/processes/",
	    "/v1/sandboxes/",
	    "/v1/sandboxes//exec",
	    "/v1/sandboxes/sbx_1/exec/",
	    "/v1/receipts/",
	    "/v1/api_keys/a/b",
	    "/v1/sandboxesx",
	    "",
	};
	for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++)
		if (api_route_resolve(none[i], id, &pid) != R_NONE)
			fail_msg("'%s' resolves to a route", none[i]);
	assert_int_equal(api_route_resolve("/v1/receipts/public-key", id, &pid), R_RECEIPT_KEY);
	assert_int_equal(api_route_resolve("/v1/receipts/rcp_1", id, &pid), R_RECEIPT);
	assert_string_equal(id, "rcp_1");
	assert_int_equal(api_route_resolve("/v1/api_keys/key_9", id, &pid), R_KEY);
	assert_string_equal(id, "key_9");
	/* the longest id that fits, and one byte more */
	memset(long_id, 'a', sizeof(long_id));
	long_id[SANDBOX_ID_MAX - 1] = '\0';
	snprintf(url, sizeof(url), "/v1/sandboxes/%s/exec", long_id);
	assert_int_equal(api_route_resolve(url, id, &pid), R_EXEC);
	assert_string_equal(id, long_id);
	long_id[SANDBOX_ID_MAX - 1] = 'a';
	long_id[SANDBOX_ID_MAX] = '\0';
	snprintf(url, sizeof(url), "/v1/sandboxes/%s/exec", long_id);
	assert_int_equal(api_route_resolve(url, id, &pid), R_NONE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_spec_equals_route_table),
	    cmocka_unit_test(test_dispatcher_resolves_described_paths),
	    cmocka_unit_test(test_allow_derived_from_bits),
	    cmocka_unit_test(test_table_rows),
	    cmocka_unit_test(test_metrics_names),
	    cmocka_unit_test(test_resolve_params),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
