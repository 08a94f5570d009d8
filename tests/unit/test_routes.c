/* api/: the routes the daemon answers equal the operations docs/openapi.yaml
 * describes, both ways. The daemon's side is its dispatcher's own table
 * (api_routes(), the Allow header of every 405) plus the compiled-in files
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

#include "api/api.h"
#include "api/assets.h"

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
	const struct api_route_info *t;
	size_t n, bad = 0;

	assert_non_null(spec);
	assert_true(json_object_object_get_ex(spec, "paths", &paths));

	/* the daemon's side: its route table and the files it serves under /v1/ */
	t = api_routes(&n);
	assert_true(n > 2);
	assert_null(t[0].path);
	assert_null(t[n - 1].path);
	for (size_t i = 1; i + 1 < n; i++) {
		if (!t[i].path || !t[i].methods)
			fail_msg("route %zu of the dispatcher's table has no path or methods", i);
		ops_add_list(&daemon, t[i].methods, t[i].path);
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
	const struct api_route_info *t;
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
		instantiate(t[i].path, url, sizeof(url));
		if (strcmp(api_route_methods(url), t[i].methods) != 0) {
			print_error("%s resolves to '%s', its table entry says '%s'\n", url,
				    api_route_methods(url), t[i].methods);
			bad++;
		}
	}
	assert_int_equal(bad, 0);
	/* and an unknown path has no methods */
	assert_string_equal(api_route_methods("/v1/nothing"), "");
	assert_string_equal(api_route_methods("/v1/sandboxes/x/nothing"), "");
	json_object_put(spec);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_spec_equals_route_table),
	    cmocka_unit_test(test_dispatcher_resolves_described_paths),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
