/* The TypeScript SDK and the MCP server (sdk/typescript, issue 31) against
 * a real daemon and real guests of the full image (python3 and node for
 * runCode and the agent loop), a warm pool of one small guest:
 *
 * - the .test.mjs files of sdk/typescript/test under `node --test`, one at a
 *   time: the declarations checked by `tsc --noEmit`, every route of
 *   docs/openapi.yaml reachable from the SDK, retries and errors against a
 *   scripted fetch; then the SDK session (create, exec, streamed exec, a
 *   tree up and down, a background process read by offsets, stdin, a
 *   signal, runCode with its receipt, a 429 waited out, a 402 raised,
 *   keys, delete), the MCP server driven by the official MCP client (list
 *   the tools, call each, a tool error, the session's sandbox deleted
 *   when stdin closes), a scripted agent loop (write a Python module and
 *   its tests, run them, read the failure, fix it), and `npm pack` of the
 *   SDK installed into a clean directory and imported;
 * - after node: no sandbox of the account is left running (each test
 *   file deletes what it created; the MCP server deletes its own).
 *
 * `max_execs_per_sandbox` is 2 here so that a third exec at once is a 429
 * the SDK has to wait out. SBX_POOR_KEY is an account with $0.001, for
 * the 402. NODE names node (default "node").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"

static struct daemon d;
static char poor_key[128];

static int setup(void **state)
{
	/* boot_timeout_ms: a shared CI host under load boots the full image
	 * in tens of seconds */
	return daemon_up_full_second_account(
	    &d, "test_sdk_typescript",
	    "\"pool\": {\"small\": 1}, \"disk_overcommit\": 16.0, "
	    "\"max_execs_per_sandbox\": 2, \"boot_timeout_ms\": 180000",
	    "poor", "0.001", poor_key, sizeof(poor_key));
}

static int teardown(void **state)
{
	return daemon_down(&d);
}

static void test_node(void **state)
{
	const char *node = getenv("NODE") ? getenv("NODE") : "node";
	const char *filter = getenv("SBX_NODE_FILTER");
	char cmd[2048];

	snprintf(cmd, sizeof(cmd),
		 "SBX_URL=http://127.0.0.1:%d SBX_KEY='%s' SBX_POOR_KEY='%s' "
		 "'%s' --test --test-concurrency=1 %s%s%s sdk/typescript/test/",
		 d.port, d.key, poor_key, node, filter ? "--test-name-pattern='" : "",
		 filter ? filter : "", filter ? "'" : "");
	assert_int_equal(run_cmd(cmd), 0);
}

/* Whatever the node tests created, they (or the MCP server) deleted. */
static void test_nothing_left_running(void **state)
{
	struct http_reply r;

	assert_int_equal(
	    http_request(&d, "GET", "/v1/sandboxes?status=running", d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	json_object *data = json_object_object_get(r.json, "data");
	if (json_object_array_length(data) != 0)
		print_message("left running: %s\n", r.body);
	assert_int_equal(json_object_array_length(data), 0);
	http_reply_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_node),
	    cmocka_unit_test(test_nothing_left_running),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
