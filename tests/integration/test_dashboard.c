/* The dashboard (GET /) and the API reference page (GET /reference.html)
 * against a real daemon with one guest of the tiny image (1 vCPU,
 * 256 MiB) and the dev-process runner for executions (no second guest):
 *
 * - over a real socket: the pages and /v1/openapi.json need no key and
 *   carry a strict Content-Security-Policy, nosniff and no framing; the
 *   API's replies carry them too and no CORS header, whatever Origin asks
 *   (a preflight is refused); the executions list's limit is checked;
 * - in a real browser: tests/browser/dashboard.test.mjs (node --test,
 *   playwright-core driving Debian's chromium), given SBX_URL, SBX_KEY and
 *   SBX_KEY2 (a second account's): the OpenAPI 3.1 validation, the
 *   reference page, sign in, a sandbox created, its page (files, a
 *   background process's output, `echo hi` typed into its terminal and
 *   read back; not found for the other account), extended and deleted,
 *   the usage chart, hostile output shown as text with its receipt
 *   checked, a key created, used and revoked.
 *   Screenshots of each step go to build/browser/ (SBX_ARTIFACTS).
 *
 * NODE names node (default "node"), CHROMIUM the browser (/usr/bin/chromium).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"

static struct daemon d;
static char key2[128];

static int setup(void **state)
{
	daemon_config(&d, "\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": 256, "
			  "\"disk_gib\": 1, \"price_micro_usd_per_hour\": 90000}}, "
			  "\"execution_runner\": \"dev-process\", "
			  "\"execution_test_shell_runtime\": true, "
			  "\"metrics_interval_ms\": 0"); /* the page's "sampling is off" */
	if (daemon_up(&d) < 0)
		return -1;
	json_object *o = daemon_admin(&d, "create-account --name other --credit-usd 1");
	json_object *v;

	if (!o || !json_object_object_get_ex(o, "api_key", &v)) {
		json_object_put(o);
		return -1;
	}
	snprintf(key2, sizeof key2, "%s", json_object_get_string(v));
	json_object_put(o);
	return 0;
}

static int teardown(void **state)
{
	return daemon_down(&d);
}

/* The value of header `name` in r (case-insensitive), copied to out; false
 * when absent. */
static bool header(const struct http_reply *r, const char *name, char *out, size_t len)
{
	const char *p = r->headers;
	size_t n = strlen(name);

	while ((p = strstr(p, "\r\n")) != NULL) {
		p += 2;
		if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
			p += n + 1;
			while (*p == ' ')
				p++;
			snprintf(out, len, "%.*s", (int)strcspn(p, "\r\n"), p);
			return true;
		}
	}
	return false;
}

static void assert_secure(const struct http_reply *r, bool page)
{
	char v[512];

	assert_true(header(r, "X-Content-Type-Options", v, sizeof(v)));
	assert_string_equal(v, "nosniff");
	assert_true(header(r, "Content-Security-Policy", v, sizeof(v)));
	assert_non_null(strstr(v, "default-src 'none'"));
	assert_non_null(strstr(v, "frame-ancestors 'none'"));
	if (page) {
		assert_non_null(strstr(v, "script-src 'self';"));
		assert_non_null(strstr(v, "style-src 'self';"));
		assert_null(strstr(v, "unsafe"));
	}
	assert_false(header(r, "Access-Control-Allow-Origin", v, sizeof(v)));
	assert_false(header(r, "Access-Control-Allow-Credentials", v, sizeof(v)));
	assert_false(header(r, "Set-Cookie", v, sizeof(v)));
}

/* GET `path` without a key: 200 with Content-Type `type`, none of the
 * strings of `banned` (NULL-terminated) in the body, and the headers of
 * assert_secure. */
static void get_file(const char *path, const char *type, bool page, const char *const *banned)
{
	struct http_reply r;
	char v[256];

	assert_int_equal(http_request(&d, "GET", path, NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_true(header(&r, "Content-Type", v, sizeof(v)));
	assert_string_equal(v, type);
	assert_secure(&r, page);
	for (; *banned; banned++)
		if (strstr(r.body, *banned))
			fail_msg("%s holds '%s'", path, *banned);
	http_reply_free(&r);
}

static void test_pages_and_headers(void **state)
{
	static const char *const pages[] = {"/", "/dashboard", "/index.html", "/reference.html"};
	static const char origin[] = "Origin: http://attacker.example\r\n";
	struct http_reply r;

	/* no inline script or style in the pages, no HTML from strings in
	 * the scripts: everything the API says goes in as text */
	static const char *const inline_code[] = {"<script>", "<style",
						  " style=", " onclick=", NULL};
	static const char *const html_sinks[] = {"innerHTML", "outerHTML", "insertAdjacentHTML",
						 "document.write", NULL};

	for (size_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++)
		get_file(pages[i], "text/html; charset=utf-8", true, inline_code);
	get_file("/app.js", "text/javascript; charset=utf-8", false, html_sinks);
	get_file("/reference.js", "text/javascript; charset=utf-8", false, html_sinks);
	get_file("/sandbox.js", "text/javascript; charset=utf-8", false, html_sinks);
	get_file("/xterm-csp.js", "text/javascript; charset=utf-8", false, html_sinks);
	/* the vendored terminal emulator (web/vendor/, docs/dashboard.md) is
	 * third-party code: served, but not held to the sinks rule above */
	static const char *const none[] = {NULL};
	get_file("/vendor/xterm.mjs", "text/javascript; charset=utf-8", false, none);
	get_file("/vendor/addon-fit.mjs", "text/javascript; charset=utf-8", false, none);
	get_file("/vendor/xterm.css", "text/css; charset=utf-8", false, none);
	/* the icon every browser asks for, from the assets (an SVG: scripts
	 * in it run nowhere, its CSP is the JSON one) */
	get_file("/favicon.ico", "image/svg+xml", false, html_sinks);
	get_file("/favicon.svg", "image/svg+xml", false, html_sinks);

	assert_int_equal(http_request(&d, "GET", "/v1/openapi.json", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_non_null(r.json);
	assert_string_equal(jstr(r.json, "openapi"), "3.1.0");
	assert_secure(&r, false);
	http_reply_free(&r);

	/* a page that is not there, and a page is GET only */
	assert_int_equal(http_request(&d, "GET", "/secret.html", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);
	assert_int_equal(http_request(&d, "POST", "/", NULL, NULL, "{}", 0, &r), 0);
	assert_int_equal(r.status, 405);
	http_reply_free(&r);

	/* CORS closed: another origin's page gets no grant, with or without a
	 * key, and its preflight is refused */
	assert_int_equal(http_request(&d, "GET", "/v1/usage", d.key, origin, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_secure(&r, false);
	http_reply_free(&r);
	assert_int_equal(http_request(&d, "GET", "/v1/usage", NULL, origin, NULL, 0, &r), 0);
	assert_int_equal(r.status, 401);
	assert_secure(&r, false);
	http_reply_free(&r);
	assert_int_equal(http_request(&d, "OPTIONS", "/v1/sandboxes", NULL,
				      "Origin: http://attacker.example\r\n"
				      "Access-Control-Request-Method: POST\r\n"
				      "Access-Control-Request-Headers: authorization\r\n",
				      NULL, 0, &r),
			 0);
	assert_int_equal(r.status, 405);
	assert_secure(&r, false);
	http_reply_free(&r);
}

static void test_executions_list(void **state)
{
	struct http_reply r;

	assert_int_equal(
	    http_request(&d, "GET", "/v1/sandbox/executions?limit=0", d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 400);
	assert_string_equal(jerr(r.json, "param"), "limit");
	http_reply_free(&r);
	assert_int_equal(http_request(&d, "GET", "/v1/sandbox/executions", NULL, NULL, NULL, 0, &r),
			 0);
	assert_int_equal(r.status, 401);
	http_reply_free(&r);
	assert_int_equal(
	    http_request(&d, "GET", "/v1/sandbox/executions?limit=5", d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "object"), "list");
	assert_int_equal(jbool(r.json, "has_more"), 0);
	http_reply_free(&r);
}

/* The browser run; its result is this test's. */
static void test_browser(void **state)
{
	const char *node = getenv("NODE") ? getenv("NODE") : "node";
	char cmd[1024];

	snprintf(cmd, sizeof(cmd),
		 "SBX_URL=http://127.0.0.1:%d SBX_KEY='%s' SBX_KEY2='%s' "
		 "SBX_ARTIFACTS=${SBX_ARTIFACTS:-build/browser} "
		 "'%s' --test tests/browser/",
		 d.port, d.key, key2, node);
	assert_int_equal(run_cmd(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pages_and_headers),
	    cmocka_unit_test(test_executions_list),
	    cmocka_unit_test(test_browser),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
