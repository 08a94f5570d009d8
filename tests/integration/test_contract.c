/* The contract tells the truth (issue 25): docs/openapi.yaml and the
 * README against one real daemon with one guest of the tiny image (1 vCPU,
 * 256 MiB) and the dev-process runner for executions:
 *
 * - a session through the harness covering every family of routes
 *   (create, get, list, extend, exec with and without receipt, files up,
 *   down, ranged, listed, deleted, background processes, metrics, keys, usage,
 *   limits, receipts, executions, delete, and refusals), every exchange
 *   recorded (SBX_TEST_RECORD, tests/integration/harness.h);
 * - the README's shell session ("A session" and "Files, streamed output,
 *   background processes") run as written against the same daemon, each
 *   JSON reply shown there compared with the real one's fields
 *   (tests/contract/readme-session.py);
 * - a client no one here wrote: openapi-typescript generates the types of
 *   docs/openapi.yaml, tsc checks tests/contract/client.test.mjs against
 *   them and openapi-fetch drives a session with it
 *   (tests/contract/client.test.mjs);
 * - last, every recorded exchange validated against the description's
 *   schemas, objects closed (tests/contract/check-exchanges.mjs).
 *
 * SBX_TEST_RECORD (default build/contract/record) is where the exchanges
 * go; NODE names node; SBX_TEST_FILTER=test_readme runs one test. docs/api.md, "How the description
 * is checked".
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"

static struct daemon d;
static char record_dir[256];

static int setup(void **state)
{
	const char *rec = getenv("SBX_TEST_RECORD");
	char cmd[600];

	if (!rec || !*rec) {
		snprintf(record_dir, sizeof(record_dir), "%s", "build/contract/record");
		snprintf(cmd, sizeof(cmd), "rm -rf '%s' && mkdir -p '%s'", record_dir, record_dir);
		if (run_cmd(cmd) != 0)
			return -1;
		setenv("SBX_TEST_RECORD", record_dir, 1);
	} else {
		snprintf(record_dir, sizeof(record_dir), "%s", rec);
	}
	daemon_config(&d, "\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": 256, "
			  "\"disk_gib\": 1, \"price_micro_usd_per_hour\": 90000}}, "
			  "\"execution_runner\": \"dev-process\", "
			  "\"execution_test_shell_runtime\": true, \"metrics_interval_ms\": 1000");
	return daemon_up(&d) < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	return daemon_down(&d);
}

/* One request with the account's key; asserts the status, returns the
 * reply (free it). */
static struct http_reply call(const char *method, const char *path, const char *headers,
			      const char *body, size_t len, int want)
{
	struct http_reply r;

	assert_int_equal(http_request(&d, method, path, d.key, headers, body, len, &r), 0);
	if (r.status != want)
		fail_msg("%s %s: %d, want %d: %s", method, path, r.status, want, r.body);
	return r;
}

static void call_free(const char *method, const char *path, const char *headers, const char *body,
		      int want)
{
	struct http_reply r = call(method, path, headers, body, 0, want);

	http_reply_free(&r);
}

static void test_session(void **state)
{
	static const char octet[] = "Content-Type: application/octet-stream\r\n";
	struct http_reply r;
	char id[64], p[512], pid[32], key_id[64], secret[128], rcpt[64];

	call_free("GET", "/v1/limits", NULL, NULL, 200);
	call_free("GET", "/v1/runtimes", NULL, NULL, 200);
	call_free("GET", "/v1/usage", NULL, NULL, 200);
	call_free("GET", "/v1/usage?granularity=day", NULL, NULL, 200);
	call_free("GET", "/v1/receipts/public-key", NULL, NULL, 200);

	r = call("POST", "/v1/sandboxes", NULL,
		 "{\"size\": \"small\", \"timeout_minutes\": 5, \"metadata\": {\"job\": \"4711\"}}",
		 0, 201);
	snprintf(id, sizeof(id), "%s", jstr(r.json, "id"));
	http_reply_free(&r);
	snprintf(p, sizeof(p), "/v1/sandboxes/%s", id);
	call_free("GET", p, NULL, NULL, 200);
	call_free("GET", "/v1/sandboxes?status=running&limit=5", NULL, NULL, 200);
	/* labels: an update, the list's filter, usage by a label */
	snprintf(p, sizeof(p), "/v1/sandboxes/%s", id);
	call_free("POST", p, NULL, "{\"metadata\": {\"team\": \"ml\", \"job\": null}}", 200);
	call_free("POST", p, NULL, "{\"metadata\": {\"bad key\": \"x\"}}", 400);
	call_free("GET", "/v1/sandboxes?metadata[team]=ml&limit=5", NULL, NULL, 200);
	call_free("GET", "/v1/usage?group_by=metadata.team", NULL, NULL, 200);
	snprintf(p, sizeof(p), "/v1/sandboxes/%s/extend", id);
	call_free("POST", p, NULL, "{\"timeout_minutes\": 6}", 200);

	/* exec: plain, every field, a receipt */
	snprintf(p, sizeof(p), "/v1/sandboxes/%s/exec", id);
	call_free("POST", p, NULL, "{\"command\": \"echo hi; echo err >&2; exit 3\"}", 200);
	call_free("POST", p, NULL,
		  "{\"command\": \"pwd; echo $G\", \"cwd\": \"/tmp\", \"env\": {\"G\": \"x\"}, "
		  "\"timeout_ms\": 10000, \"encoding\": \"base64\"}",
		  200);
	r = call("POST", p, NULL, "{\"command\": \"echo signed\", \"receipt\": true}", 0, 200);
	assert_non_null(json_object_object_get(r.json, "receipt"));
	snprintf(rcpt, sizeof(rcpt), "%s", jstr(json_object_object_get(r.json, "receipt"), "id"));
	http_reply_free(&r);
	snprintf(p, sizeof(p), "/v1/receipts/%s", rcpt);
	call_free("GET", p, NULL, NULL, 200);
	snprintf(p, sizeof(p), "/v1/sandboxes/%s/exec", id);
	call_free("POST", p, NULL, "{\"command\": \"\"}", 400);
	call_free("POST", p, NULL, "{\"command\": \"true\", \"nope\": 1}", 400);

	/* files: up, down, a range, list, delete, a tree down */
	snprintf(p, sizeof(p), "/v1/sandboxes/%s/files?path=/tmp/c/data.txt&mode=0640", id);
	call_free("PUT", p, octet, "hello, contract\n", 201);
	snprintf(p, sizeof(p), "/v1/sandboxes/%s/files?path=/tmp/c/data.txt", id);
	r = call("GET", p, NULL, NULL, 0, 200);
	assert_string_equal(r.body, "hello, contract\n");
	http_reply_free(&r);
	call_free("GET", p, "Range: bytes=0-4\r\n", NULL, 206);
	snprintf(p, sizeof(p), "/v1/sandboxes/%s/files?path=/tmp/c&list=true", id);
	call_free("GET", p, NULL, NULL, 200);
	snprintf(p, sizeof(p), "/v1/sandboxes/%s/files?path=/tmp/c&format=tar", id);
	call_free("GET", p, NULL, NULL, 200);
	snprintf(p, sizeof(p), "/v1/sandboxes/%s/files?path=/tmp/c/data.txt", id);
	call_free("DELETE", p, NULL, NULL, 200);
	call_free("GET", p, NULL, NULL, 404);
	snprintf(p, sizeof(p), "/v1/sandboxes/%s/files?path=relative", id);
	call_free("GET", p, NULL, NULL, 400);

	/* background processes */
	snprintf(p, sizeof(p), "/v1/sandboxes/%s/processes", id);
	r = call("POST", p, NULL, "{\"command\": \"echo started; cat\", \"env\": {\"A\": \"b\"}}",
		 0, 201);
	snprintf(pid, sizeof(pid), "%lld", (long long)jint(r.json, "pid"));
	http_reply_free(&r);
	call_free("GET", p, NULL, NULL, 200);
	call_free("POST", p, NULL, "{\"command\": \"true\", \"receipt\": true}", 400);
	call_free("DELETE", p, NULL, NULL, 405);
	snprintf(p, sizeof(p), "/v1/sandboxes/%s/processes/%s/stdin", id, pid);
	call_free("POST", p, NULL, "{\"data\": \"fed\\n\", \"close\": true}", 200);
	snprintf(p, sizeof(p), "/v1/sandboxes/%s/processes/%s/output?stdout_offset=0", id, pid);
	call_free("GET", p, NULL, NULL, 200);
	snprintf(p, sizeof(p), "/v1/sandboxes/%s/processes/%s/output?encoding=base64", id, pid);
	call_free("GET", p, NULL, NULL, 200);
	snprintf(p, sizeof(p), "/v1/sandboxes/%s/processes/%s/signal", id, pid);
	call_free("POST", p, NULL, "{\"signal\": \"TERM\"}", 200);
	call_free("POST", p, NULL, "{\"signal\": \"HUP\"}", 400);

	/* the sandbox's metrics (sampled every second here: one comes after
	 * two readings) */
	snprintf(p, sizeof(p), "/v1/sandboxes/%s/metrics", id);
	for (int i = 0;; i++) {
		size_t n;

		r = call("GET", p, NULL, NULL, 0, 200);
		n = json_object_array_length(json_object_object_get(r.json, "samples"));
		http_reply_free(&r);
		if (n > 0)
			break;
		assert_true(i < 50);
		usleep(100 * 1000);
	}

	/* keys */
	r = call("POST", "/v1/api_keys", NULL, "{\"scopes\": [\"sandboxes\"]}", 0, 201);
	snprintf(key_id, sizeof(key_id), "%s", jstr(r.json, "id"));
	snprintf(secret, sizeof(secret), "%s", jstr(r.json, "secret"));
	http_reply_free(&r);
	call_free("GET", "/v1/api_keys", NULL, NULL, 200);
	assert_int_equal(http_request(&d, "GET", "/v1/api_keys", secret, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 403);
	http_reply_free(&r);
	snprintf(p, sizeof(p), "/v1/api_keys/%s", key_id);
	call_free("DELETE", p, NULL, NULL, 200);

	/* a one-shot execution (the dev-process runner) and its list */
	r = call("POST", "/v1/sandbox/executions", NULL,
		 "{\"runtime\": \"python\", \"timeout_seconds\": 10, \"code\": \"print(6 * 7)\", "
		 "\"metadata\": {\"job\": \"4711\"}}",
		 0, 200);
	assert_string_equal(jstr(json_object_object_get(r.json, "metadata"), "job"), "4711");
	snprintf(p, sizeof(p), "/v1/sandbox/executions/%s", jstr(r.json, "id"));
	http_reply_free(&r);
	call_free("GET", p, NULL, NULL, 200);
	call_free("GET", "/v1/sandbox/executions?limit=5", NULL, NULL, 200);

	/* the end, and what comes after it */
	snprintf(p, sizeof(p), "/v1/sandboxes/%s", id);
	call_free("DELETE", p, NULL, NULL, 200);
	snprintf(p, sizeof(p), "/v1/sandboxes/%s/exec", id);
	call_free("POST", p, NULL, "{\"command\": \"true\"}", 410);
	call_free("GET", "/v1/sandboxes/sbx_nope", NULL, NULL, 404);
	call_free("GET", "/v1/nothing", NULL, NULL, 404);
	assert_int_equal(http_request(&d, "GET", "/v1/usage", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 401);
	http_reply_free(&r);
	call_free("GET", "/v1/openapi.json", NULL, NULL, 200);
}

static const char *node(void)
{
	return getenv("NODE") ? getenv("NODE") : "node";
}

/* The README's session, run as written (tests/contract/readme-session.py). */
static void test_readme(void **state)
{
	char cmd[1024];

	snprintf(
	    cmd, sizeof(cmd),
	    "SBX_LISTEN=127.0.0.1:%d SANDBOXD_KEY='%s' python3 tests/contract/readme-session.py "
	    "README.md build/contract/readme",
	    d.port, d.key);
	assert_int_equal(run_cmd(cmd), 0);
}

/* A generated client (openapi-typescript + openapi-fetch), type-checked
 * against the description, driving a session. */
static void test_generated_client(void **state)
{
	char cmd[1024];

	assert_int_equal(
	    run_cmd("mkdir -p build/contract && node_modules/.bin/openapi-typescript "
		    "--default-non-nullable false docs/openapi.yaml -o build/contract/api.d.ts"),
	    0);
	assert_int_equal(run_cmd("node_modules/.bin/tsc -p tests/contract/tsconfig.json"), 0);
	snprintf(cmd, sizeof(cmd),
		 "SBX_URL=http://127.0.0.1:%d SBX_KEY='%s' '%s' --test tests/contract/", d.port,
		 d.key, node());
	assert_int_equal(run_cmd(cmd), 0);
}

/* Last: every exchange recorded above (and by any other test that ran with
 * the same SBX_TEST_RECORD) against the description's schemas. */
static void test_exchanges_match_the_description(void **state)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "'%s' tests/contract/check-exchanges.mjs '%s' docs/openapi.yaml",
		 node(), record_dir);
	assert_int_equal(run_cmd(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_session),
	    cmocka_unit_test(test_readme),
	    cmocka_unit_test(test_generated_client),
	    cmocka_unit_test(test_exchanges_match_the_description),
	};

	if (getenv("SBX_TEST_FILTER"))
		cmocka_set_test_filter(getenv("SBX_TEST_FILTER"));
	return cmocka_run_group_tests(tests, setup, teardown);
}
