/* api/: the pure request decoders, response encoders and the config parser
 * (through api-priv.h). No server, no libvirt. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "api/api-priv.h"
#include "sandbox/sandbox.h"
#include "util/util.h"

static struct sandbox_config cfg;

static int setup(void **state)
{
	sandbox_config_defaults(&cfg);
	return 0;
}

#define S(lit) (lit), (sizeof(lit) - 1)

/* Decode an exec body that must fail with SBX_E_INVALID_REQUEST and param,
 * and a message containing `want` (NULL: any non-empty message). */
static void exec_bad_msg(const char *body, size_t len, const char *param, const char *want)
{
	struct api_exec_body b;
	struct sbx_error err;

	sbx_error_clear(&err);
	assert_int_equal(api_exec_decode(body, len, &cfg, &b, &err), -1);
	assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
	assert_string_equal(err.param, param);
	assert_true(err.message[0] != '\0');
	if (want)
		assert_non_null(strstr(err.message, want));
	assert_null(b.command);
	assert_null(b.env);
}

static void exec_bad(const char *body, size_t len, const char *param)
{
	exec_bad_msg(body, len, param, NULL);
}

static void test_exec_good(void **state)
{
	struct api_exec_body b;
	struct sbx_error err;

	sbx_error_clear(&err);
	assert_int_equal(
	    api_exec_decode(S("{\"command\": \"python3 a.py\", \"timeout_ms\": 120000, "
			      "\"cwd\": \"/home/sandbox/p\", \"env\": {\"K\": \"V\", "
			      "\"_x1\": \"a b\"}, \"encoding\": \"base64\"}"),
			    &cfg, &b, &err),
	    0);
	assert_string_equal(b.req.command, "python3 a.py");
	assert_int_equal(b.req.command_len, 12);
	assert_true(b.req.has_timeout);
	assert_int_equal(b.req.timeout_ms, 120000);
	assert_string_equal(b.req.cwd, "/home/sandbox/p");
	assert_int_equal(b.req.n_env, 2);
	assert_true(b.base64);
	bool k = false, x = false;
	for (size_t i = 0; i < b.req.n_env; i++) {
		k = k || strcmp(b.req.env[i], "K=V") == 0;
		x = x || strcmp(b.req.env[i], "_x1=a b") == 0;
	}
	assert_true(k && x);
	api_exec_body_release(&b);

	/* Only command: defaults. */
	assert_int_equal(api_exec_decode(S("{\"command\":\"true\"}"), &cfg, &b, &err), 0);
	assert_false(b.req.has_timeout);
	assert_null(b.req.cwd);
	assert_int_equal(b.req.n_env, 0);
	assert_false(b.base64);
	api_exec_body_release(&b);

	/* Explicit utf-8, surrounding whitespace. */
	assert_int_equal(
	    api_exec_decode(S("\n {\"command\":\"x\",\"encoding\":\"utf-8\"} \n"), &cfg, &b, &err),
	    0);
	assert_false(b.base64);
	api_exec_body_release(&b);
}

static void test_exec_bad(void **state)
{
	exec_bad(S(""), "command"); /* empty body = {} and command is required */
	exec_bad(S("{}"), "command");
	exec_bad(S("{\"command\": \"\"}"), "command");
	exec_bad(S("{\"command\": 5}"), "command");
	exec_bad(S("{\"command\": null}"), "command");
	exec_bad(S("{\"command\": \"a\\u0000b\"}"), "command");
	exec_bad(S("{\"command\": \"x\", \"timeout_ms\": 0}"), "timeout_ms");
	exec_bad(S("{\"command\": \"x\", \"timeout_ms\": -5}"), "timeout_ms");
	exec_bad(S("{\"command\": \"x\", \"timeout_ms\": 1.5}"), "timeout_ms");
	exec_bad(S("{\"command\": \"x\", \"timeout_ms\": \"100\"}"), "timeout_ms");
	exec_bad(S("{\"command\": \"x\", \"timeout_ms\": 99999999999999999999999}"), "timeout_ms");
	exec_bad(S("{\"command\": \"x\", \"timeout_ms\": 4294967296}"), "timeout_ms");
	exec_bad(S("{\"command\": \"x\", \"cwd\": \"relative/dir\"}"), "cwd");
	exec_bad(S("{\"command\": \"x\", \"cwd\": \"\"}"), "cwd");
	exec_bad(S("{\"command\": \"x\", \"cwd\": \"/a\\u0000b\"}"), "cwd");
	exec_bad(S("{\"command\": \"x\", \"cwd\": 1}"), "cwd");
	exec_bad(S("{\"command\": \"x\", \"env\": []}"), "env");
	exec_bad(S("{\"command\": \"x\", \"env\": {\"1A\": \"v\"}}"), "env");
	exec_bad(S("{\"command\": \"x\", \"env\": {\"A-B\": \"v\"}}"), "env");
	exec_bad(S("{\"command\": \"x\", \"env\": {\"\": \"v\"}}"), "env");
	exec_bad(S("{\"command\": \"x\", \"env\": {\"A=B\": \"v\"}}"), "env");
	exec_bad(S("{\"command\": \"x\", \"env\": {\"OK\": \"v\", \"N\": 1}}"), "env.N");
	exec_bad(S("{\"command\": \"x\", \"env\": {\"V\": \"a\\u0000b\"}}"), "env.V");
	exec_bad(S("{\"command\": \"x\", \"encoding\": \"latin1\"}"), "encoding");
	exec_bad(S("{\"command\": \"x\", \"stdin\": \"\"}"), "stdin");
	exec_bad(S("{\"command\": \"x\", \"Command\": \"y\"}"), "Command");
	/* Not JSON / not an object: no param. */
	exec_bad(S("command=ls"), "");
	exec_bad(S("[\"ls\"]"), "");
	exec_bad(S("\"ls\""), "");
	exec_bad(S("{\"command\": \"x\"} trailing"), "");
	exec_bad(S("{\"command\": \"x\"}{}"), "");
	exec_bad(S("{\"command\": \"x\""), "");
	exec_bad(S("{\"command\": \"x\",}"), "");
	exec_bad(S("{'command': 'x'}"), "");
	exec_bad(S("{\"command\": \"\xff\"}"), ""); /* invalid UTF-8 */
	exec_bad(S("{\"command\": \"x\"}\0"), "");  /* raw NUL */
	exec_bad(S("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"), "");
}

/* Valid JSON that is not an object says so; broken JSON says it is not
 * JSON (json-c returns NULL for `null` and waits for more after a bare
 * number). The body as a whole is at fault: no param. */
static void body_message(const char *body, size_t len, const char *want)
{
	exec_bad_msg(body, len, "", want);
}

static void test_exec_body_not_an_object(void **state)
{
	const char *obj = "must be a JSON object", *bad = "not valid JSON";

	body_message(S("123"), obj);
	body_message(S(" -1.5e3 \n"), obj);
	body_message(S("null"), obj);
	body_message(S("true"), obj);
	body_message(S("[1]"), obj);
	body_message(S("\"x\""), obj);
	body_message(S("12 3"), bad);
	body_message(S("nul"), bad);
	body_message(S("{\"command\":"), bad);
	body_message(S("{\"command\": \"x"), bad);
	body_message(S("-"), bad);
	/* where: line, column and byte */
	body_message(S("{\"command\": \"x\",\n \"env\": x}"),
		     "not valid JSON: unexpected character at line 2, column 9 (byte 25)");
	body_message(S("{\"command\":"), "it ends in the middle of a value at line 1, column 12");
	body_message(S("{\"command\": \"x\"} {}"), "unexpected character at line 1, column 18");
	body_message(S("{\"command\": \"x\0\"}"), "a NUL byte at line 1, column 15 (byte 14)");
	/* json-c keeps the last of two equal names; we refuse them. */
	body_message(S("{\"command\": \"a\", \"command\": \"b\"}"), "more than once");
	body_message(S("{\"command\": \"x\", \"env\": {\"A\": \"1\", \"A\": \"2\"}}"),
		     "more than once");
}

static void test_exec_names_inside_strings_are_not_fields(void **state)
{
	struct api_exec_body b;
	struct sbx_error err;

	sbx_error_clear(&err);
	assert_int_equal(api_exec_decode(S("{\"command\": \"echo \\\"a\\\": \\\"a\\\":\", "
					   "\"env\": {\"K\": \"\\\":\", \"L\": \"K\"}}"),
					 &cfg, &b, &err),
			 0);
	assert_string_equal(b.command, "echo \"a\": \"a\":");
	api_exec_body_release(&b);
}

/* POST /v1/sandbox/executions bodies. */
static void execution_bad(const char *body, size_t len, const char *param)
{
	struct api_execution_body b;
	struct sbx_error err;

	sbx_error_clear(&err);
	assert_int_equal(api_execution_decode(body, len, &b, &err), -1);
	assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
	assert_string_equal(err.param, param);
	assert_true(err.message[0] != '\0');
	assert_null(b.code);
}

static void test_execution_decode(void **state)
{
	struct api_execution_body b;
	struct sbx_error err;

	sbx_error_clear(&err);
	assert_int_equal(api_execution_decode(S("{\"runtime\": \"python\", \"timeout_seconds\": "
						"30, \"code\": \"print(1)\\n\"}"),
					      &b, &err),
			 0);
	assert_string_equal(b.req.runtime, "python");
	assert_int_equal(b.req.timeout_seconds, 30);
	assert_int_equal(b.req.code_len, 9);
	assert_memory_equal(b.req.code, "print(1)\n", 9);
	free(b.code);

	execution_bad(S("{\"timeout_seconds\": 30, \"code\": \"x\"}"), "runtime");
	/* one-shot executions never have a network (docs/network.md) */
	execution_bad(S("{\"runtime\": \"node\", \"timeout_seconds\": 30, \"code\": \"x\", "
			"\"network\": {\"egress\": \"none\"}}"),
		      "network");
	execution_bad(S("{\"runtime\": \"node\", \"timeout_seconds\": 30}"), "code");
	execution_bad(S("{\"runtime\": \"node\", \"code\": \"x\"}"), "timeout_seconds");
	execution_bad(S("{\"runtime\": 1, \"timeout_seconds\": 30, \"code\": \"x\"}"), "runtime");
	execution_bad(S("{\"runtime\": \"a-name-longer-than-the-buffer\", \"timeout_seconds\": "
			"30, \"code\": \"x\"}"),
		      "runtime");
	execution_bad(S("{\"runtime\": \"node\", \"timeout_seconds\": 0, \"code\": \"x\"}"),
		      "timeout_seconds");
	execution_bad(S("{\"runtime\": \"node\", \"timeout_seconds\": 86401, \"code\": \"x\"}"),
		      "timeout_seconds");
	execution_bad(S("{\"runtime\": \"node\", \"timeout_seconds\": 1.5, \"code\": \"x\"}"),
		      "timeout_seconds");
	execution_bad(S("{\"runtime\": \"node\", \"timeout_seconds\": 30, \"code\": 5}"), "code");
	execution_bad(S("{\"runtime\": \"node\", \"timeout_seconds\": 30, \"code\": \"x\", "
			"\"Code\": \"y\"}"),
		      "Code");
	/* The blamed name is made printable, as for every other body. */
	execution_bad(S("{\"runtime\": \"node\", \"timeout_seconds\": 30, \"code\": \"x\", "
			"\"a\\u0001'b\": 1}"),
		      "a??b");
	execution_bad(S("[]"), "");
}

static void test_exec_env_key_names_in_message(void **state)
{
	struct api_exec_body b;
	struct sbx_error err;

	sbx_error_clear(&err);
	assert_int_equal(
	    api_exec_decode(S("{\"command\":\"x\",\"env\":{\"BAD-KEY\":\"v\"}}"), &cfg, &b, &err),
	    -1);
	assert_non_null(strstr(err.message, "BAD-KEY"));
	assert_true(api_env_key_valid("_", 1));
	assert_true(api_env_key_valid("PATH", 4));
	assert_true(api_env_key_valid("a9_Z", 4));
	assert_false(api_env_key_valid("9a", 2));
	assert_false(api_env_key_valid("a b", 3));
	assert_false(api_env_key_valid("", 0));
	assert_false(api_env_key_valid("é", strlen("é")));
}

static void test_exec_command_cap(void **state)
{
	struct sandbox_config small = cfg;
	struct api_exec_body b;
	struct sbx_error err;
	char body[256];

	small.max_command_bytes = 10;
	sbx_error_clear(&err);
	snprintf(body, sizeof(body), "{\"command\":\"%s\"}", "0123456789");
	assert_int_equal(api_exec_decode(body, strlen(body), &small, &b, &err), 0);
	assert_int_equal(b.req.command_len, 10);
	api_exec_body_release(&b);
	snprintf(body, sizeof(body), "{\"command\":\"%s\"}", "0123456789A");
	assert_int_equal(api_exec_decode(body, strlen(body), &small, &b, &err), -1);
	assert_string_equal(err.param, "command");
	assert_non_null(strstr(err.message, "10 bytes"));
}

static void test_create_decode(void **state)
{
	struct api_create_body b;
	struct sbx_error err;

	sbx_error_clear(&err);
	assert_int_equal(api_create_decode(S(""), &cfg, &b, &err), 0);
	assert_null(b.req.size);
	assert_int_equal(b.req.timeout_minutes, 0);
	assert_int_equal(api_create_decode(S("{}"), &cfg, &b, &err), 0);
	assert_null(b.req.size);
	assert_int_equal(
	    api_create_decode(S("{\"size\":\"medium\",\"timeout_minutes\":1440}"), &cfg, &b, &err),
	    0);
	assert_string_equal(b.req.size, "medium");
	assert_int_equal(b.req.timeout_minutes, 1440);
	assert_null(b.req.network); /* the service's default */
	assert_int_equal(b.req.timeout_action, SANDBOX_ON_TIMEOUT_EXPIRE);
	assert_int_equal(api_create_decode(S("{\"timeout_action\":\"pause\"}"), &cfg, &b, &err), 0);
	assert_int_equal(b.req.timeout_action, SANDBOX_ON_TIMEOUT_PAUSE);
	assert_int_equal(api_create_decode(S("{\"timeout_action\":\"expire\"}"), &cfg, &b, &err),
			 0);
	assert_int_equal(b.req.timeout_action, SANDBOX_ON_TIMEOUT_EXPIRE);
	assert_int_equal(api_create_decode(S("{\"timeout_action\":\"delete\"}"), &cfg, &b, &err),
			 -1);
	assert_string_equal(err.param, "timeout_action");
	assert_int_equal(api_create_decode(S("{\"timeout_action\":1}"), &cfg, &b, &err), -1);
	assert_string_equal(err.param, "timeout_action");
	/* a network policy (docs/network.md), canonical */
	assert_int_equal(api_create_decode(S("{\"network\":{\"egress\":\"allow_list\","
					     "\"allow\":[\"Deb.Debian.org.\"]}}"),
					   &cfg, &b, &err),
			 0);
	assert_string_equal(
	    b.req.network,
	    "{\"egress\":\"allow_list\",\"allow\":[\"deb.debian.org\"],\"deny\":[]}");

	struct {
		const char *body;
		const char *param;
	} bad[] = {
	    {"{\"size\": 1}", "size"},
	    {"{\"size\": \"\"}", "size"},
	    {"{\"size\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}", "size"},
	    {"{\"timeout_minutes\": 0}", "timeout_minutes"},
	    {"{\"timeout_minutes\": 1441}", "timeout_minutes"},
	    {"{\"timeout_minutes\": 15.0}", "timeout_minutes"},
	    {"{\"timeout_minutes\": \"15\"}", "timeout_minutes"},
	    {"{\"timeout_minutes\": true}", "timeout_minutes"},
	    {"{\"image\": \"x\"}", "image"},
	    {"{\"network\": \"open\"}", "network"},
	    {"{\"network\": {\"egress\": \"open\"}}", "network.egress"}, /* not allowed */
	    {"{\"network\": {\"egress\": \"allow_list\", \"allow\": [\"ok.test\", \"b@d\"]}}",
	     "network.allow[1]"},
	    {"not json", ""},
	    {"[]", ""},
	    {"null", ""},
	};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		sbx_error_clear(&err);
		assert_int_equal(
		    api_create_decode(bad[i].body, strlen(bad[i].body), &cfg, &b, &err), -1);
		assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
		assert_string_equal(err.param, bad[i].param);
	}
}

static void test_extend_and_key_decode(void **state)
{
	struct sbx_error err;
	int m = 0;
	unsigned sc = 0;
	bool has = false;

	sbx_error_clear(&err);
	assert_int_equal(api_timeout_decode(S("{\"timeout_minutes\": 30}"), &cfg, true, &m, &err),
			 0);
	assert_int_equal(m, 30);
	assert_int_equal(api_timeout_decode(S("{}"), &cfg, true, &m, &err), -1);
	assert_string_equal(err.param, "timeout_minutes");
	assert_int_equal(
	    api_timeout_decode(S("{\"timeout_minutes\": 30, \"x\": 1}"), &cfg, true, &m, &err), -1);
	assert_string_equal(err.param, "x");
	/* resume: the body is optional, the field too; an extend needs it */
	m = 7;
	assert_int_equal(api_timeout_decode("", 0, &cfg, false, &m, &err), 0);
	assert_int_equal(m, 0);
	assert_int_equal(api_timeout_decode(S("{}"), &cfg, false, &m, &err), 0);
	assert_int_equal(m, 0);
	assert_int_equal(api_timeout_decode(S("{\"timeout_minutes\": 5}"), &cfg, false, &m, &err),
			 0);
	assert_int_equal(m, 5);
	assert_int_equal(api_timeout_decode("", 0, &cfg, true, &m, &err), -1);
	assert_int_equal(api_timeout_decode(S("{\"timeout_minutes\": 0}"), &cfg, false, &m, &err),
			 -1);
	assert_string_equal(err.param, "timeout_minutes");
	assert_int_equal(api_key_create_decode(S(""), &sc, &has, &err), 0);
	assert_false(has);
	assert_int_equal(api_key_create_decode(S("{}"), &sc, &has, &err), 0);
	assert_false(has);
	assert_int_equal(api_key_create_decode(S("{\"name\": \"ci\"}"), &sc, &has, &err), -1);
	assert_string_equal(err.param, "name");
	assert_int_equal(
	    api_key_create_decode(S("{\"scopes\": [\"keys\", \"sandboxes\"]}"), &sc, &has, &err),
	    0);
	assert_true(has);
	assert_int_equal(sc, SANDBOX_SCOPE_KEYS | SANDBOX_SCOPE_SANDBOXES);
	assert_int_equal(api_key_create_decode(S("{\"scopes\": []}"), &sc, &has, &err), 0);
	assert_true(has);
	assert_int_equal(sc, 0);
	assert_int_equal(api_key_create_decode(S("{\"scopes\": [\"root\"]}"), &sc, &has, &err), -1);
	assert_string_equal(err.param, "scopes");
	assert_non_null(strstr(err.message, "unknown scope 'root'"));
	assert_int_equal(api_key_create_decode(S("{\"scopes\": \"keys\"}"), &sc, &has, &err), -1);
	assert_string_equal(err.param, "scopes");
	assert_int_equal(api_key_create_decode(S("{\"scopes\": [\"a b\"]}"), &sc, &has, &err), -1);
	assert_int_equal(api_key_create_decode(S("{\"scopes\": [1]}"), &sc, &has, &err), -1);
	assert_int_equal(
	    api_key_create_decode(
		S("{\"scopes\": [\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\"]}"), &sc,
		&has, &err),
	    -1);
}

/* Scopes are bits; names only at the edges, in one canonical order. */
static void test_scopes_bits(void **state)
{
	struct sbx_error err;
	char list[SANDBOX_SCOPES_MAX];
	unsigned sc = 99;
	struct json_object *j;

	(void)state;
	sbx_error_clear(&err);
	assert_int_equal(sandbox_scopes_parse(NULL, &sc, &err), 0);
	assert_int_equal(sc, 0);
	assert_int_equal(sandbox_scopes_parse("keys, sandboxes keys", &sc, &err), 0);
	assert_int_equal(sc, SANDBOX_SCOPE_KEYS | SANDBOX_SCOPE_SANDBOXES);
	sandbox_scopes_format(sc, list);
	assert_string_equal(list, "sandboxes keys");
	sandbox_scopes_format(SANDBOX_SCOPE_KEYS, list);
	assert_string_equal(list, "keys");
	sandbox_scopes_format(0, list);
	assert_string_equal(list, "");
	assert_int_equal(sandbox_scopes_parse("sandboxes admin", &sc, &err), -1);
	assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
	assert_string_equal(err.param, "scopes");
	assert_string_equal(err.message, "unknown scope 'admin'; known: sandboxes, keys");
	assert_string_equal(sandbox_scope_name(SANDBOX_SCOPE_SANDBOXES), "sandboxes");
	assert_string_equal(sandbox_scope_name(SANDBOX_SCOPE_KEYS), "keys");
	assert_int_equal(sandbox_scopes_missing(SANDBOX_SCOPE_KEYS, SANDBOX_SCOPES_ALL), 0);
	assert_int_equal(sandbox_scopes_missing(SANDBOX_SCOPES_ALL, 0), SANDBOX_SCOPE_SANDBOXES);
	assert_int_equal(sandbox_scopes_missing(SANDBOX_SCOPES_ALL, SANDBOX_SCOPE_SANDBOXES),
			 SANDBOX_SCOPE_KEYS);
	assert_int_equal(sandbox_scopes_missing(0, 0), 0);
	j = api_scopes_encode(SANDBOX_SCOPE_KEYS | SANDBOX_SCOPE_SANDBOXES);
	assert_string_equal(json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN),
			    "[\"sandboxes\",\"keys\"]");
	json_object_put(j);
	j = api_scopes_encode(0);
	assert_string_equal(json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN), "[]");
	json_object_put(j);
}

static const char *to_s(struct json_object *o)
{
	return json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
						     JSON_C_TO_STRING_NOSLASHESCAPE);
}

static void test_exec_result_encode(void **state)
{
	char out[] = {'a', '\0', 'b', (char)0xff, 'c'};
	char err_s[] = {'\xe2', '\x82', '\xac', '\xc3'}; /* "€" then a cut sequence */
	struct agentless_exec_result r = {
	    .stdout_buf = out,
	    .stdout_len = sizeof(out),
	    .stderr_buf = err_s,
	    .stderr_len = sizeof(err_s),
	    .exit_code = 137,
	    .duration_ms = 1004,
	    .timed_out = true,
	    .truncated = false,
	};
	struct json_object *o = api_exec_result_encode(&r, false), *v;

	assert_non_null(o);
	assert_non_null(strstr(to_s(o), "\"stdout\":\"a\\u0000b\xef\xbf\xbd"
					"c\""));
	assert_true(json_object_object_get_ex(o, "stdout", &v));
	assert_int_equal(json_object_get_string_len(v), 7); /* a NUL b U+FFFD(3) c */
	assert_true(json_object_object_get_ex(o, "stderr", &v));
	assert_string_equal(json_object_get_string(v), "\xe2\x82\xac\xef\xbf\xbd");
	assert_true(json_object_object_get_ex(o, "exit_code", &v));
	assert_int_equal(json_object_get_int(v), 137);
	assert_true(json_object_object_get_ex(o, "timed_out", &v));
	assert_true(json_object_get_boolean(v));
	assert_true(json_object_object_get_ex(o, "truncated", &v));
	assert_false(json_object_get_boolean(v));
	assert_true(json_object_object_get_ex(o, "duration_ms", &v));
	assert_int_equal(json_object_get_int(v), 1004);
	json_object_put(o);

	/* Truncated: the cut character at the end is dropped, not replaced. */
	r.truncated = true;
	o = api_exec_result_encode(&r, false);
	assert_true(json_object_object_get_ex(o, "stderr", &v));
	assert_string_equal(json_object_get_string(v), "\xe2\x82\xac");
	json_object_put(o);

	/* base64 of the exact bytes. */
	o = api_exec_result_encode(&r, true);
	assert_true(json_object_object_get_ex(o, "stdout", &v));
	assert_string_equal(json_object_get_string(v), "YQBi/2M=");
	assert_true(json_object_object_get_ex(o, "stderr", &v));
	assert_string_equal(json_object_get_string(v), "4oKsww==");
	json_object_put(o);

	/* Empty streams. */
	struct agentless_exec_result e = {0};
	o = api_exec_result_encode(&e, false);
	assert_string_equal(to_s(o), "{\"stdout\":\"\",\"stderr\":\"\",\"exit_code\":0,"
				     "\"duration_ms\":0,\"truncated\":false,\"timed_out\":false}");
	json_object_put(o);
}

static void test_sandbox_and_error_encode(void **state)
{
	struct sandbox_view v = {
	    .id = "sbx_0123456789abcdef",
	    .status = "running",
	    .size = "small",
	    .created_at_ms = 1787409060000, /* 2026-08-22T14:31:00Z */
	    .expires_at_ms = 1787409960000,
	    .ended_at_ms = 0,
	    .cost_micro = 7525,
	    .metadata = "{\"job\":\"4711\",\"team\":\"a \\\"b\\\"\"}",
	    .network = "{\"egress\":\"allow_list\",\"allow\":[\"a.test:443\"],\"deny\":[]}",
	    .net_bytes_in = 7,
	    .net_bytes_out = 3,
	};
	struct json_object *o = api_sandbox_encode(&v);
	struct sbx_error err;

	assert_string_equal(to_s(o),
			    "{\"id\":\"sbx_0123456789abcdef\",\"object\":\"sandbox\","
			    "\"status\":\"running\",\"size\":\"small\",\"created_at\":"
			    "\"2026-08-22T14:31:00Z\",\"expires_at\":\"2026-08-22T14:46:00Z\","
			    "\"ended_at\":null,\"cost_micro_usd\":7525,\"cost_usd\":"
			    "\"0.007525\",\"startup_path\":null,\"startup_ms\":null,"
			    "\"metadata\":{\"job\":\"4711\",\"team\":\"a \\\"b\\\"\"},"
			    "\"paused_at\":null,\"paused_bytes\":null,\"paused_seconds\":0,"
			    "\"network\":{\"egress\":\"allow_list\",\"allow\":[\"a.test:443\"],"
			    "\"deny\":[]},\"net_bytes_in\":7,\"net_bytes_out\":3,\"snapshot\":null,"
			    "\"timeout_action\":\"expire\"}");
	json_object_put(o);

	/* made from a snapshot: it names it */
	snprintf(v.snapshot, sizeof(v.snapshot), "snap_0123456789abcdef01234567");
	v.timeout_action = SANDBOX_ON_TIMEOUT_PAUSE;
	o = api_sandbox_encode(&v);
	assert_non_null(strstr(to_s(o), "\"snapshot\":\"snap_0123456789abcdef01234567\","
					"\"timeout_action\":\"pause\"}"));
	json_object_put(o);
	v.snapshot[0] = '\0';
	v.timeout_action = SANDBOX_ON_TIMEOUT_EXPIRE;

	/* paused: when, and what it keeps on the host */
	snprintf(v.status, sizeof(v.status), "paused");
	v.paused_at_ms = 1787409120000; /* 2026-08-22T14:32:00Z */
	v.paused_bytes = 79020032;
	v.paused_ms = 65710;
	o = api_sandbox_encode(&v);
	assert_non_null(strstr(to_s(o), "\"status\":\"paused\""));
	assert_non_null(strstr(to_s(o), "\"paused_at\":\"2026-08-22T14:32:00Z\","
					"\"paused_bytes\":79020032,\"paused_seconds\":65,"));
	json_object_put(o);

	sbx_error_clear(&err);
	sbx_error_set(&err, SBX_E_INVALID_REQUEST, "command", "'command' is required");
	o = api_error_encode(&err);
	assert_string_equal(to_s(o), "{\"error\":{\"type\":\"invalid_request\",\"message\":"
				     "\"'command' is required\",\"param\":\"command\"}}");
	json_object_put(o);
	sbx_error_set(&err, SBX_E_NOT_FOUND, NULL, "no such sandbox");
	o = api_error_encode(&err);
	assert_string_equal(to_s(o),
			    "{\"error\":{\"type\":\"not_found\",\"message\":\"no such sandbox\"}}");
	json_object_put(o);
}

static void test_usd(void **state)
{
	char buf[32];
	int64_t m;
	struct sbx_error err;

	api_usd_format(90000, buf);
	assert_string_equal(buf, "0.090000");
	api_usd_format(0, buf);
	assert_string_equal(buf, "0.000000");
	api_usd_format(-1250000, buf);
	assert_string_equal(buf, "-1.250000");
	api_usd_format(INT64_MIN, buf);
	assert_string_equal(buf, "-9223372036854.775808");

	assert_int_equal(api_usd_parse("25", &m, &err), 0);
	assert_int_equal(m, 25000000);
	assert_int_equal(api_usd_parse("0.5", &m, &err), 0);
	assert_int_equal(m, 500000);
	assert_int_equal(api_usd_parse("3.141592", &m, &err), 0);
	assert_int_equal(m, 3141592);
	assert_int_equal(api_usd_parse("0", &m, &err), 0);
	assert_int_equal(m, 0);
	assert_int_equal(api_usd_parse("9223372036854.775807", &m, &err), 0);
	assert_int_equal(m, INT64_MAX);
	const char *bad[] = {"",
			     ".",
			     "1.",
			     ".5",
			     "-1",
			     "+1",
			     "1.1234567",
			     "1e3",
			     " 1",
			     "1 ",
			     "0x10",
			     "9223372036854.775808",
			     "99999999999999999999",
			     "1,5",
			     NULL};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		sbx_error_clear(&err);
		assert_int_equal(api_usd_parse(bad[i], &m, &err), -1);
		assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
	}
}

static void test_limits_encode(void **state)
{
	struct json_object *o = api_limits_encode(&cfg), *v, *s;

	assert_true(json_object_object_get_ex(o, "sizes", &v));
	assert_int_equal(json_object_array_length(v), 3);
	s = json_object_array_get_idx(v, 0);
	assert_string_equal(to_s(s),
			    "{\"name\":\"small\",\"vcpus\":2,\"memory_gib\":4,\"disk_gib\":40,"
			    "\"price_micro_usd_per_hour\":90000,\"price_usd_per_hour\":"
			    "\"0.090000\"}");
	assert_true(json_object_object_get_ex(o, "startup", &v));
	assert_string_equal(to_s(v),
			    "{\"window\":200,"
			    "\"warm\":{\"p50_ms\":null,\"p95_ms\":null,\"samples\":0},"
			    "\"cold\":{\"p50_ms\":null,\"p95_ms\":null,\"samples\":0},"
			    "\"pool\":{},\"executions\":{"
			    "\"prestarted\":{\"p50_ms\":null,\"p95_ms\":null,\"samples\":0},"
			    "\"warm\":{\"p50_ms\":null,\"p95_ms\":null,\"samples\":0},"
			    "\"cold\":{\"p50_ms\":null,\"p95_ms\":null,\"samples\":0},"
			    "\"pool\":{}}}");
	assert_true(json_object_object_get_ex(o, "sandboxes_per_account", &v));
	assert_int_equal(json_object_get_int(v), 20);
	json_object_put(o);
}

/* ---------------------------------------------------------------- config */

static int cfg_parse(const char *json, struct sandbox_config *c, struct sbx_error *err)
{
	sandbox_config_defaults(c);
	sbx_error_clear(err);
	return api_config_parse(json, strlen(json), c, err);
}

static void test_config_good(void **state)
{
	struct sandbox_config c;
	struct sbx_error err;

	assert_int_equal(cfg_parse("{}", &c, &err), 0);
	assert_int_equal(c.n_sizes, 3);
	assert_true(c.free_page_reporting);
	assert_int_equal(cfg_parse("{\"listen\": \"0.0.0.0:9000\", \"allow_tcg\": true, "
				   "\"max_body_bytes\": 2048, \"memory_overcommit\": 1.5, "
				   "\"http_threads\": 8, \"min_free_disk_mib\": 100, "
				   "\"default_exec_timeout_ms\": 5000, \"tb_cache_mib\": 32, "
				   "\"free_page_reporting\": false, "
				   "\"destroy_on_exit\": true, \"max_guests\": 3}",
				   &c, &err),
			 0);
	assert_string_equal(c.listen, "0.0.0.0:9000");
	assert_true(c.allow_tcg);
	assert_int_equal(c.max_body_bytes, 2048);
	assert_true(c.memory_overcommit == 1.5);
	assert_int_equal(c.http_threads, 8);
	assert_int_equal(c.min_free_disk_mib, 100);
	assert_int_equal(c.default_exec_timeout_ms, 5000);
	assert_int_equal(c.tb_cache_mib, 32);
	assert_false(c.free_page_reporting);
	assert_true(c.destroy_on_exit);
	assert_int_equal(c.max_guests, 3);
	assert_int_equal(c.default_timeout_minutes, 15); /* untouched keys keep defaults */
	/* An integer is fine for a double key. */
	assert_int_equal(cfg_parse("{\"memory_overcommit\": 2}", &c, &err), 0);
	assert_true(c.memory_overcommit == 2.0);
}

/* The enum keys are parsed once, here: each word maps to its value, an
 * unknown word is refused with the key's own message, and the word comes
 * back out by name (logs, receipts). */
static void test_config_enums(void **state)
{
	struct sandbox_config c;
	struct sbx_error err;
	static const struct {
		const char *json;
		size_t offset;
		int want;
	} good[] = {
	    {"{\"mode\": \"development\"}", offsetof(struct sandbox_config, mode),
	     CONFIG_MODE_DEVELOPMENT},
	    {"{\"mode\": \"production\"}", offsetof(struct sandbox_config, mode),
	     CONFIG_MODE_PRODUCTION},
	    {"{\"accel\": \"auto\"}", offsetof(struct sandbox_config, accel), VMM_ACCEL_AUTO},
	    {"{\"accel\": \"kvm\"}", offsetof(struct sandbox_config, accel), VMM_ACCEL_KVM},
	    {"{\"accel\": \"tcg\"}", offsetof(struct sandbox_config, accel), VMM_ACCEL_TCG},
	    {"{\"transport\": \"stream\"}", offsetof(struct sandbox_config, transport),
	     CONFIG_TRANSPORT_STREAM},
	    {"{\"transport\": \"socket\"}", offsetof(struct sandbox_config, transport),
	     CONFIG_TRANSPORT_SOCKET},
	    {"{\"execution_runner\": \"\"}", offsetof(struct sandbox_config, execution_runner),
	     CONFIG_RUNNER_AUTO},
	    {"{\"execution_runner\": \"libvirt\"}",
	     offsetof(struct sandbox_config, execution_runner), CONFIG_RUNNER_LIBVIRT},
	    {"{\"execution_runner\": \"dev-process\"}",
	     offsetof(struct sandbox_config, execution_runner), CONFIG_RUNNER_DEV_PROCESS},
	    {"{\"execution_runner\": \"mock\"}", offsetof(struct sandbox_config, execution_runner),
	     CONFIG_RUNNER_MOCK},
	    {"{\"log_format\": \"text\"}", offsetof(struct sandbox_config, log_format),
	     SBX_LOG_TEXT},
	    {"{\"log_format\": \"json\"}", offsetof(struct sandbox_config, log_format),
	     SBX_LOG_JSON},
	};
	static const struct {
		const char *json;
		const char *param;
		const char *message;
	} bad[] = {
	    {"{\"mode\": \"prod\"}", "mode", "mode must be 'development' or 'production'"},
	    {"{\"mode\": \"\"}", "mode", "mode must be 'development' or 'production'"},
	    {"{\"mode\": \"production\\u0000x\"}", "mode",
	     "mode must be 'development' or 'production'"},
	    {"{\"accel\": \"hvf\"}", "accel", "accel must be 'auto', 'kvm' or 'tcg'"},
	    {"{\"accel\": 1}", "accel", "config key 'accel' must be a string"},
	    {"{\"transport\": \"tcp\"}", "transport", "transport must be 'stream' or 'socket'"},
	    {"{\"transport\": \"\"}", "transport", "transport must be 'stream' or 'socket'"},
	    {"{\"execution_runner\": \"docker\"}", "execution_runner",
	     "execution_runner must be 'libvirt', 'dev-process' or 'mock'"},
	    {"{\"log_format\": \"xml\"}", "log_format", "log_format must be 'text' or 'json'"},
	    {"{\"hosts\": [{\"name\": \"h1\", \"transport\": \"tcp\"}]}", "hosts",
	     "host 'h1': transport must be 'stream' or 'socket'"},
	};

	(void)state;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(good); i++) {
		int got;

		if (cfg_parse(good[i].json, &c, &err) != 0)
			fail_msg("refused: %s (%s)", good[i].json, err.message);
		memcpy(&got, (const char *)&c + good[i].offset, sizeof(got));
		if (got != good[i].want)
			fail_msg("%s: %d, not %d", good[i].json, got, good[i].want);
	}
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		if (cfg_parse(bad[i].json, &c, &err) != -1)
			fail_msg("accepted: %s", bad[i].json);
		assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
		assert_string_equal(err.param, bad[i].param);
		assert_string_equal(err.message, bad[i].message);
	}
	/* A host's empty transport is left to resolve: stream for a remote URI. */
	assert_int_equal(cfg_parse("{\"hosts\": [{\"name\": \"r\", \"uri\": "
				   "\"qemu+tls://h/system\", \"transport\": \"\"}]}",
				   &c, &err),
			 0);
	assert_int_equal(c.hosts[0].transport, CONFIG_TRANSPORT_UNSET);
	sandbox_config_resolve(&c);
	assert_int_equal(c.hosts[0].transport, CONFIG_TRANSPORT_STREAM);
	/* The words at the edges. */
	assert_string_equal(config_mode_name(CONFIG_MODE_PRODUCTION), "production");
	assert_string_equal(config_accel_name(VMM_ACCEL_TCG), "tcg");
	assert_string_equal(config_transport_name(CONFIG_TRANSPORT_SOCKET), "socket");
	assert_string_equal(config_runner_name(CONFIG_RUNNER_DEV_PROCESS), "dev-process");
	assert_string_equal(config_log_format_name(SBX_LOG_JSON), "json");
	/* auto: libvirt, or mock in development without a libvirt URI */
	assert_int_equal(sandbox_execution_runner(&c), CONFIG_RUNNER_LIBVIRT);
	c.libvirt_uri[0] = '\0';
	assert_int_equal(sandbox_execution_runner(&c), CONFIG_RUNNER_MOCK);
	c.mode = CONFIG_MODE_PRODUCTION;
	assert_int_equal(sandbox_execution_runner(&c), CONFIG_RUNNER_LIBVIRT);
}

static void test_config_sizes(void **state)
{
	struct sandbox_config c;
	struct sbx_error err;

	assert_int_equal(cfg_parse("{\"sizes\": {\"tiny\": {\"vcpus\": 1, \"memory_mib\": 256, "
				   "\"disk_gib\": 1, \"price_micro_usd_per_hour\": 1000}, "
				   "\"big\": {\"vcpus\": 16, \"memory_mib\": 65536, \"disk_gib\": "
				   "320, \"price_micro_usd_per_hour\": 1100000}}, "
				   "\"default_size\": \"tiny\"}",
				   &c, &err),
			 0);
	assert_int_equal(c.n_sizes, 2); /* replaces the table */
	assert_string_equal(c.sizes[0].name, "tiny");
	assert_int_equal(c.sizes[0].vcpus, 1);
	assert_int_equal(c.sizes[0].memory_mib, 256);
	assert_int_equal(c.sizes[1].price_micro_per_hour, 1100000);
	assert_non_null(sandbox_config_size(&c, "big"));
	assert_null(sandbox_config_size(&c, "small"));
	sandbox_config_resolve(&c);
	assert_int_equal(sandbox_config_validate(&c, &err), 0);
	c.tb_cache_mib = 4097; /* parses as an unsigned, refused by the bound */
	assert_int_equal(sandbox_config_validate(&c, &err), -1);
	assert_string_equal(err.param, "tb_cache_mib");
	c.tb_cache_mib = 4096;
	assert_int_equal(sandbox_config_validate(&c, &err), 0);
	/* Production refuses a plain-text libvirt URI; TLS passes. */
	c.mode = CONFIG_MODE_PRODUCTION;
	snprintf(c.libvirt_uri, sizeof(c.libvirt_uri), "qemu+tcp://10.77.0.2/system");
	assert_int_equal(sandbox_config_validate(&c, &err), -1);
	assert_string_equal(err.param, "libvirt_uri");
	snprintf(c.libvirt_uri, sizeof(c.libvirt_uri), "qemu+tls://10.77.0.2/system");
	assert_int_equal(sandbox_config_validate(&c, &err), 0);
	c.mode = CONFIG_MODE_DEVELOPMENT;
	snprintf(c.libvirt_uri, sizeof(c.libvirt_uri), "qemu+tcp://10.77.0.2/system");
	assert_int_equal(sandbox_config_validate(&c, &err), 0);

	struct {
		const char *json;
		const char *param;
	} bad[] = {
	    {"{\"sizes\": []}", "sizes"},
	    {"{\"sizes\": {}}", "sizes"},
	    {"{\"sizes\": {\"x\": 1}}", "sizes.x"},
	    {"{\"sizes\": {\"x\": {\"vcpus\": 1, \"memory_mib\": 256, \"disk_gib\": 1}}}",
	     "sizes.x.price_micro_usd_per_hour"},
	    {"{\"sizes\": {\"x\": {\"vcpus\": 1, \"memory_mib\": 256, \"disk_gib\": 1, "
	     "\"price_micro_usd_per_hour\": 1, \"gpus\": 1}}}",
	     "sizes.x.gpus"},
	    {"{\"sizes\": {\"x\": {\"vcpus\": \"1\", \"memory_mib\": 256, \"disk_gib\": 1, "
	     "\"price_micro_usd_per_hour\": 1}}}",
	     "sizes.x.vcpus"},
	    {"{\"sizes\": {\"x\": {\"vcpus\": 1, \"memory_mib\": 256, \"disk_gib\": 1, "
	     "\"price_micro_usd_per_hour\": -1}}}",
	     "sizes.x.price_micro_usd_per_hour"},
	    {"{\"sizes\": {\"a_name_that_is_too_long\": {}}}", "sizes"},
	    {"{\"sizes\": {\"1\":{},\"2\":{},\"3\":{},\"4\":{},\"5\":{},\"6\":{},\"7\":{},\"8\":{},"
	     "\"9\":{}}}",
	     "sizes"},
	};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		assert_int_equal(cfg_parse(bad[i].json, &c, &err), -1);
		assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
		assert_string_equal(err.param, bad[i].param);
	}
}

static void test_config_bad(void **state)
{
	struct sandbox_config c;
	struct sbx_error err;
	char longstr[200];
	char json[400];

	struct {
		const char *json;
		const char *param;
	} bad[] = {
	    {"{\"listne\": \"x\"}", "listne"},
	    {"{\"listen\": 8080}", "listen"},
	    {"{\"allow_tcg\": \"yes\"}", "allow_tcg"},
	    {"{\"allow_tcg\": 1}", "allow_tcg"},
	    {"{\"max_guests\": 2.5}", "max_guests"},
	    {"{\"max_guests\": 99999999999}", "max_guests"},
	    {"{\"max_body_bytes\": -1}", "max_body_bytes"},
	    {"{\"boot_timeout_ms\": 4294967296}", "boot_timeout_ms"},
	    {"{\"memory_overcommit\": \"2\"}", "memory_overcommit"},
	    {"{\"mode\": null}", "mode"},
	    {"{\"kernel\": \"/a\\u0000b\"}", "kernel"},
	    {"[]", "config"},
	    {"{\"listen\": \"x\"", "config"},
	    {"{} {}", "config"},
	    {"{\"allow_tcg\": \"yes\", \"allow_tcg\": false}", "config"},
	    {"{\"pool\": {\"small\": 1, \"small\": 2}}", "config"},
	    {"", "config"},
	};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		assert_int_equal(cfg_parse(bad[i].json, &c, &err), -1);
		assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
		assert_string_equal(err.param, bad[i].param);
		assert_non_null(strstr(err.message, bad[i].param));
	}
	/* A string that overflows its fixed buffer (domain_prefix is 32 bytes). */
	memset(longstr, 'a', 32);
	longstr[32] = '\0';
	snprintf(json, sizeof(json), "{\"domain_prefix\": \"%s\"}", longstr);
	assert_int_equal(cfg_parse(json, &c, &err), -1);
	assert_string_equal(err.param, "domain_prefix");
	longstr[31] = '\0';
	snprintf(json, sizeof(json), "{\"domain_prefix\": \"%s\"}", longstr);
	assert_int_equal(cfg_parse(json, &c, &err), 0);
	assert_int_equal(strlen(c.domain_prefix), 31);
}

static void test_config_load_file(void **state)
{
	char dir[] = "/tmp/t-api-cfg-XXXXXX", path[64];
	struct sandbox_config c;
	struct sbx_error err;
	const char *text =
	    "{\n  \"state_dir\": \"/srv/sbx\",\n  \"max_sandboxes_per_account\": 5\n}\n";

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/c.json", dir);
	assert_int_equal(sbx_write_file(path, text, strlen(text), 0600), 0);
	sandbox_config_defaults(&c);
	sbx_error_clear(&err);
	assert_int_equal(api_config_load(path, &c, &err), 0);
	assert_string_equal(c.state_dir, "/srv/sbx");
	assert_int_equal(c.max_sandboxes_per_account, 5);
	sandbox_config_resolve(&c);
	assert_string_equal(c.db_path, "/srv/sbx/sandboxd.db");
	unlink(path);
	rmdir(dir);
	assert_int_equal(api_config_load(path, &c, &err), -1);
	assert_string_equal(err.param, "config");
}

/* versions.json (images/versions.sh) -> GET /v1/runtimes: the known names
 * with short version strings; anything else is not published. */
static void test_runtimes(void **state)
{
	struct api_runtimes rt;
	struct json_object *o;
	char dir[] = "/tmp/sbx-rt-XXXXXX", path[64], base[64];

	assert_int_equal(api_runtimes_parse(&rt, "{\"python\": \"3.11.2\", \"node\": \"22.23.5\", "
						 "\"npm\": \"10.9.9\", \"gcc\": \"12.2.0\", "
						 "\"git\": \"2.39.5\", \"other\": \"1\"}"),
			 0);
	o = api_runtimes_encode(&rt);
	assert_string_equal(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN),
			    "{\"object\":\"runtimes\",\"versions\":{\"python\":\"3.11.2\","
			    "\"node\":\"22.23.5\",\"npm\":\"10.9.9\",\"gcc\":\"12.2.0\","
			    "\"git\":\"2.39.5\"}}");
	json_object_put(o);
	/* a bad value is dropped, the rest kept; not an object: nothing */
	assert_int_equal(
	    api_runtimes_parse(&rt, "{\"node\": \"22.1.0\", \"npm\": \"<b>x</b>\", "
				    "\"gcc\": 12, \"git\": \"11111111111111111111111111111111\"}"),
	    -1);
	assert_string_equal(rt.version[1], "22.1.0");
	assert_string_equal(rt.version[2], "");
	assert_string_equal(rt.version[3], "");
	assert_string_equal(rt.version[4], "");
	assert_int_equal(api_runtimes_parse(&rt, "[\"22.1.0\"]"), -1);
	assert_int_equal(api_runtimes_parse(&rt, "{"), -1);
	o = api_runtimes_encode(&rt);
	assert_string_equal(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN),
			    "{\"object\":\"runtimes\",\"versions\":{\"python\":null,\"node\":null,"
			    "\"npm\":null,\"gcc\":null,\"git\":null}}");
	json_object_put(o);
	/* load: versions.json next to the base image; none for the tiny image */
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/versions.json", dir);
	snprintf(base, sizeof(base), "%s/base.qcow2", dir);
	assert_int_equal(sbx_write_file(path, "{\"node\":\"22.23.5\"}", 19, 0644), 0);
	api_runtimes_load(&rt, base);
	assert_string_equal(rt.version[1], "22.23.5");
	api_runtimes_load(&rt, "");
	assert_string_equal(rt.version[1], "");
	unlink(path);
	api_runtimes_load(&rt, base); /* missing: a warning, nothing published */
	assert_string_equal(rt.version[1], "");
	rmdir(dir);
}

static void test_listen_parse(void **state)
{
	struct sockaddr_in sa;
	struct sbx_error err;

	sbx_error_clear(&err);
	assert_int_equal(api_listen_parse("127.0.0.1:0", &sa, &err), 0);
	assert_int_equal(api_listen_parse("0.0.0.0:8080", &sa, &err), 0);
	assert_int_equal(api_listen_parse("localhost:65535", &sa, &err), 0);
	const char *bad[] = {"",
			     ":80",
			     "127.0.0.1",
			     "127.0.0.1:",
			     "127.0.0.1:65536",
			     "127.0.0.1:-1",
			     "127.0.0.1:8x",
			     "host.example:80",
			     "[::1]:80",
			     NULL};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		assert_int_equal(api_listen_parse(bad[i], &sa, &err), -1);
		assert_string_equal(err.param, "listen");
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_exec_good),
	    cmocka_unit_test(test_exec_bad),
	    cmocka_unit_test(test_exec_body_not_an_object),
	    cmocka_unit_test(test_execution_decode),
	    cmocka_unit_test(test_exec_names_inside_strings_are_not_fields),
	    cmocka_unit_test(test_exec_env_key_names_in_message),
	    cmocka_unit_test(test_exec_command_cap),
	    cmocka_unit_test(test_create_decode),
	    cmocka_unit_test(test_extend_and_key_decode),
	    cmocka_unit_test(test_scopes_bits),
	    cmocka_unit_test(test_exec_result_encode),
	    cmocka_unit_test(test_sandbox_and_error_encode),
	    cmocka_unit_test(test_usd),
	    cmocka_unit_test(test_limits_encode),
	    cmocka_unit_test(test_config_good),
	    cmocka_unit_test(test_config_enums),
	    cmocka_unit_test(test_config_sizes),
	    cmocka_unit_test(test_config_bad),
	    cmocka_unit_test(test_config_load_file),
	    cmocka_unit_test(test_listen_parse),
	    cmocka_unit_test(test_runtimes),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
