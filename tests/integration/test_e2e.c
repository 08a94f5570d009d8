/* The walking skeleton end to end: a real daemon, a real guest under
 * qemu:///system, a command run over virtio-serial, and nothing left
 * behind. Uses the real default size (small: 2 vCPU, 4 GiB). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"

static struct daemon d;
static char sbx_id[64];

static int setup(void **state)
{
	daemon_config(&d, "");
	return daemon_up(&d) < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	return daemon_down(&d);
}

static void errors_have_the_api_shape(void **state)
{
	struct http_reply r;

	assert_int_equal(http_request(&d, "GET", "/v1/nope", d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 404);
	assert_string_equal(jerr(r.json, "type"), "not_found");
	assert_non_null(jerr(r.json, "message"));
	http_reply_free(&r);

	assert_int_equal(
	    http_request(&d, "GET", "/v1/sandboxes", "aas_sk_bogus", NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 401);
	assert_string_equal(jerr(r.json, "type"), "authentication_error");
	http_reply_free(&r);

	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", d.key, NULL, "{nope", 0, &r), 0);
	assert_int_equal(r.status, 400);
	assert_string_equal(jerr(r.json, "type"), "invalid_request");
	http_reply_free(&r);

	assert_int_equal(http_request(&d, "PUT", "/v1/sandboxes", d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 405);
	assert_string_equal(jerr(r.json, "type"), "method_not_allowed");
	http_reply_free(&r);
}

static void create_returns_a_running_sandbox(void **state)
{
	struct http_reply r;
	int64_t t0 = sbx_mono_ms();

	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", d.key, NULL,
				      "{\"size\": \"small\", \"timeout_minutes\": 5}", 0, &r),
			 0);
	print_message("create: %d in %lld ms: %s\n", r.status, (long long)(sbx_mono_ms() - t0),
		      r.body);
	assert_int_equal(r.status, 201);
	assert_string_equal(jstr(r.json, "object"), "sandbox");
	assert_string_equal(jstr(r.json, "status"), "running");
	assert_string_equal(jstr(r.json, "size"), "small");
	assert_non_null(jstr(r.json, "created_at"));
	assert_non_null(jstr(r.json, "expires_at"));
	assert_true(jis_null(r.json, "ended_at"));
	assert_true(strncmp(jstr(r.json, "id"), "sbx_", 4) == 0);
	assert_true(strlen(jstr(r.json, "id")) >= 20);
	snprintf(sbx_id, sizeof(sbx_id), "%s", jstr(r.json, "id"));
	http_reply_free(&r);
	assert_int_equal(count_own_domains(&d), 1);
	assert_int_equal(count_own_qemus(&d), 1);
}

static struct http_reply exec(const char *body)
{
	struct http_reply r;
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", sbx_id);
	assert_int_equal(http_request(&d, "POST", path, d.key, NULL, body, 0, &r), 0);
	return r;
}

static void exec_returns_streams_and_exit_code(void **state)
{
	struct http_reply r = exec("{\"command\": \"echo hi; echo err >&2; exit 3\"}");

	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "stdout"), "hi\n");
	assert_string_equal(jstr(r.json, "stderr"), "err\n");
	assert_int_equal(jint(r.json, "exit_code"), 3);
	assert_int_equal(jbool(r.json, "truncated"), 0);
	assert_int_equal(jbool(r.json, "timed_out"), 0);
	assert_true(jint(r.json, "duration_ms") >= 0);
	http_reply_free(&r);
}

static void exec_with_cwd_and_env_as_data(void **state)
{
	struct http_reply r =
	    exec("{\"command\": \"pwd; printf '%s|%s' \\\"$FOO\\\" \\\"$BAR\\\"\", "
		 "\"cwd\": \"/tmp\", "
		 "\"env\": {\"FOO\": \"bar baz $HOME `id`\", \"BAR\": \"a\\nb\"}}");

	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "stdout"), "/tmp\nbar baz $HOME `id`|a\nb");
	assert_int_equal(jint(r.json, "exit_code"), 0);
	http_reply_free(&r);
}

static void exec_in_a_missing_cwd_is_400(void **state)
{
	struct http_reply r = exec("{\"command\": \"true\", \"cwd\": \"/does/not/exist\"}");

	assert_int_equal(r.status, 400);
	assert_string_equal(jerr(r.json, "type"), "invalid_request");
	assert_string_equal(jerr(r.json, "param"), "cwd");
	http_reply_free(&r);
}

static void get_then_delete_leaves_nothing(void **state)
{
	struct http_reply r;
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", sbx_id);
	assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "running");
	http_reply_free(&r);

	assert_int_equal(http_request(&d, "DELETE", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "destroyed");
	assert_non_null(jstr(r.json, "ended_at"));
	assert_true(jint(r.json, "cost_micro_usd") >= 1);
	assert_non_null(jstr(r.json, "cost_usd"));
	char first[1024];
	snprintf(first, sizeof(first), "%s", r.body);
	http_reply_free(&r);

	/* Repeating DELETE returns the same final object. */
	assert_int_equal(http_request(&d, "DELETE", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, first);
	http_reply_free(&r);

	r = exec("{\"command\": \"true\"}");
	assert_int_equal(r.status, 410);
	assert_string_equal(jerr(r.json, "type"), "sandbox_not_running");
	http_reply_free(&r);

	assert_int_equal(count_own_domains(&d), 0);
	assert_int_equal(count_own_qemus(&d), 0);
}

static void unknown_sandbox_is_404(void **state)
{
	struct http_reply r;

	assert_int_equal(http_request(&d, "GET", "/v1/sandboxes/sbx_0000000000000000deadbeef",
				      d.key, NULL, NULL, 0, &r),
			 0);
	assert_int_equal(r.status, 404);
	assert_string_equal(jerr(r.json, "type"), "not_found");
	http_reply_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(errors_have_the_api_shape),
	    cmocka_unit_test(create_returns_a_running_sandbox),
	    cmocka_unit_test(exec_returns_streams_and_exit_code),
	    cmocka_unit_test(exec_with_cwd_and_env_as_data),
	    cmocka_unit_test(exec_in_a_missing_cwd_is_400),
	    cmocka_unit_test(get_then_delete_leaves_nothing),
	    cmocka_unit_test(unknown_sandbox_is_404),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
