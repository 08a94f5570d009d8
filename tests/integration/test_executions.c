/* One-shot executions (issue 8) in real guests of the full image (python3,
 * node), a warm pool of one small guest: output, exit codes, timeout,
 * truncation, no stdin for the program; signed receipts checked by
 * `sandboxd verify-receipt` and by the openssl block of docs/receipts.md
 * (run verbatim), a tampered stdout refused; per-second billing with a
 * full-timeout hold, the ledger invariants; the 403 without the
 * 'sandboxes' scope; the hold released when the guest cannot boot; the
 * production-mode refusals; exec receipts; no domain left after a SIGTERM
 * that follows an execution (its guest is torn down after the reply).
 *
 * SBX_TEST_FULL_IMAGE_DIR names the image (default build/images/full).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"
#include "store/store.h"

#define PRICE 40 /* execution_price_micro_per_second, the default */

static struct daemon d;
static int64_t charged; /* sum of cost_micro_usd of this run's executions */

static int setup(void **state)
{
	/* the default sizes' 40 GiB disks on a shared dev host: allow thin
	 * provisioning (docs/configuration.md "disk_overcommit") */
	/* a default policy of "open": executions get no network all the same */
	if (daemon_config_full(&d, "\"pool\": {\"small\": 1}, \"disk_overcommit\": 16.0, "
				   "\"network\": {\"allow_open\": true, "
				   "\"default_policy\": {\"egress\": \"open\"}}") < 0) {
		fprintf(stderr, "test_executions: no full image (make image-full)\n");
		return -1;
	}
	return daemon_up(&d) < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	return daemon_down(&d);
}

static void write_file(const char *path, const char *data, size_t len)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	fclose(f);
}

/* POST /v1/sandbox/executions; fails the test unless 200. */
static struct http_reply execute(const char *key, const char *runtime, int timeout_s,
				 const char *code, int want_status)
{
	json_object *o = json_object_new_object();
	struct http_reply r;
	const char *body;

	json_object_object_add(o, "runtime", json_object_new_string(runtime));
	json_object_object_add(o, "timeout_seconds", json_object_new_int(timeout_s));
	json_object_object_add(o, "code", json_object_new_string(code));
	body = json_object_to_json_string(o);
	assert_int_equal(http_request(&d, "POST", "/v1/sandbox/executions", key, NULL, body, 0, &r),
			 0);
	json_object_put(o);
	if (r.status != want_status)
		print_message("execute: %d %.400s\n", r.status, r.body);
	assert_int_equal(r.status, want_status);
	return r;
}

/* The common checks of a 200: shape, billing per started second of host
 * time (billing.billed_ms; min 1, at most the timeout). */
static void check_execution(struct http_reply *r, int timeout_s)
{
	json_object *bill, *rc;
	int64_t dur = jint(r->json, "duration_ms"), billed, secs;
	const char *cost;

	assert_string_equal(jstr(r->json, "object"), "sandbox.execution");
	assert_string_equal(jstr(r->json, "runner"), "libvirt");
	assert_true(strncmp(jstr(r->json, "id"), "sbxr_", 5) == 0);
	assert_true(json_object_object_get_ex(r->json, "billing", &bill));
	assert_true(json_object_object_get_ex(r->json, "receipt", &rc));
	assert_non_null(jstr(rc, "signature"));
	billed = jint(bill, "billed_ms");
	assert_true(billed >= 0 && billed <= timeout_s * 1000);
	secs = billed <= 0 ? 1 : (billed + 999) / 1000;
	if (secs > timeout_s) /* the hold is the most it can cost */
		secs = timeout_s;
	assert_int_equal(jint(bill, "cost_micro_usd"), secs * PRICE);
	cost = jstr(bill, "cost_usd");
	assert_non_null(cost);
	charged += secs * PRICE;
	print_message("  %s: %s exit %lld in %lld ms (guest: %lld ms) (%s), $%s\n",
		      jstr(r->json, "id"), jstr(r->json, "status"),
		      (long long)jint(r->json, "exit_code"), (long long)billed, (long long)dur,
		      jstr(r->json, "startup_path"), cost);
}

static void test_python(void **state)
{
	struct http_reply r = execute(d.key, "python", 30,
				      "import sys\n"
				      "print('out', 6*7)\n"
				      "print('oops', file=sys.stderr)\n"
				      "try:\n    input()\nexcept EOFError:\n    print('no stdin')\n"
				      "sys.exit(3)\n",
				      200);

	check_execution(&r, 30);
	assert_string_equal(jstr(r.json, "status"), "completed");
	assert_int_equal(jint(r.json, "exit_code"), 3);
	assert_string_equal(jstr(r.json, "stdout"), "out 42\nno stdin\n");
	assert_string_equal(jstr(r.json, "stderr"), "oops\n");
	assert_int_equal(jbool(r.json, "stdout_truncated"), 0);
	http_reply_free(&r);
}

/* One-shot executions never get a network: the guest agent's proxy is
 * there, and the daemon refuses every connection an execution asks for,
 * whatever the config's default policy (docs/network.md). */
static void test_no_network(void **state)
{
	struct http_reply r =
	    execute(d.key, "python", 30,
		    "import urllib.request, urllib.error\n"
		    "o = urllib.request.build_opener("
		    "urllib.request.ProxyHandler({'http': 'http://127.0.0.1:3128'}))\n"
		    "try:\n"
		    "    o.open('http://example.com/', timeout=20)\n"
		    "    print('REACHED')\n"
		    "except urllib.error.HTTPError as e:\n"
		    "    print(e.code, e.read().decode().strip())\n",
		    200);

	const char *out;

	check_execution(&r, 30);
	out = jstr(r.json, "stdout") ? jstr(r.json, "stdout") : "";
	print_message("  no network: %s", out);
	assert_null(strstr(out, "REACHED"));
	assert_non_null(strstr(out, "403"));
	assert_non_null(strstr(out, "one-shot executions have no network"));
	http_reply_free(&r);
}

static void test_node(void **state)
{
	struct http_reply r = execute(
	    d.key, "node", 30,
	    "const fs = require('fs');\n"
	    "let s; try { s = fs.readFileSync(0, 'utf8'); } catch (e) { s = 'ERR ' + e.code; }\n"
	    "console.log('stdin=[' + s + ']', process.version.split('.')[0]);\n"
	    "console.error('warn');\n",
	    200);

	check_execution(&r, 30);
	assert_int_equal(jint(r.json, "exit_code"), 0);
	assert_string_equal(jstr(r.json, "stdout"), "stdin=[] v22\n");
	assert_string_equal(jstr(r.json, "stderr"), "warn\n");
	http_reply_free(&r);
}

/* 6 s: python3 itself may take 3 s to start under TCG on a loaded host,
 * and the output before the kill must be there. */
static void test_timeout(void **state)
{
	struct http_reply r = execute(
	    d.key, "python", 6, "import time\nprint('before', flush=True)\ntime.sleep(30)\n", 200);

	check_execution(&r, 6);
	assert_string_equal(jstr(r.json, "status"), "timed_out");
	assert_int_equal(jint(r.json, "exit_code"), 137);
	assert_string_equal(jstr(r.json, "stdout"), "before\n");
	assert_true(jint(r.json, "duration_ms") >= 6000 && jint(r.json, "duration_ms") < 8000);
	http_reply_free(&r);
}

static void test_truncation(void **state)
{
	struct http_reply r = execute(
	    d.key, "python", 30,
	    "import sys\nsys.stdout.write('x' * 2000000)\nprint('e', file=sys.stderr)\n", 200);

	check_execution(&r, 30);
	assert_int_equal(jbool(r.json, "stdout_truncated"), 1);
	assert_int_equal(jbool(r.json, "stderr_truncated"), 0);
	assert_int_equal(strlen(jstr(r.json, "stdout")), 1048576);
	assert_string_equal(jstr(r.json, "stderr"), "e\n");
	http_reply_free(&r);
}

/* Extract the receipt-check block of docs/receipts.md into a script. */
static void doc_script(const char *path)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd),
		 "awk '/receipt-check:begin/{on=1;next} /receipt-check:end/{on=0} "
		 "on && !/^```/' docs/receipts.md > %s && grep -q 'pkeyutl -verify' %s",
		 path, path);
	assert_int_equal(run_cmd(cmd), 0);
}

static void test_receipt(void **state)
{
	const char *code =
	    "import sys\nprint(7.25)\nprint(0)\nprint('\\u00e9\\t', file=sys.stderr)\n";
	struct http_reply r = execute(d.key, "python", 30, code, 200), g, k;
	char dir[400], path[512], cmd[2048], url[128];

	check_execution(&r, 30);
	assert_string_equal(jstr(r.json, "stdout"), "7.25\n0\n");
	/* GET returns the same bytes */
	snprintf(url, sizeof(url), "/v1/sandbox/executions/%s", jstr(r.json, "id"));
	assert_int_equal(http_request(&d, "GET", url, d.key, NULL, NULL, 0, &g), 0);
	assert_int_equal(g.status, 200);
	assert_string_equal(g.body, r.body);
	http_reply_free(&g);

	/* the caller's files: response, code, receipt, pinned public key */
	assert_int_equal(execution_keep(&d, &r, code, "code.py", "rcheck", dir, sizeof(dir)), 0);
	assert_int_equal(
	    http_request(&d, "GET", "/v1/receipts/public-key", d.key, NULL, NULL, 0, &k), 0);
	assert_int_equal(k.status, 200);
	snprintf(path, sizeof(path), "%s/pub.pem", dir);
	write_file(path, jstr(k.json, "public_key_pem"), strlen(jstr(k.json, "public_key_pem")));
	http_reply_free(&k);
	/* 1. the CLI */
	snprintf(cmd, sizeof(cmd),
		 "cd %s && %s verify-receipt receipt.json --public-key pub.pem --execution r.json "
		 "--code code.py --runtime python",
		 dir, sbx_bin());
	assert_int_equal(run_cmd(cmd), 0);
	/* 2. the documented openssl steps, verbatim */
	snprintf(path, sizeof(path), "%s/check.sh", dir);
	doc_script(path);
	snprintf(cmd, sizeof(cmd), "cd %s && URL=http://127.0.0.1:%d KEY=%s sh check.sh", dir,
		 d.port, d.key);
	assert_int_equal(run_cmd(cmd), 0);

	/* tampered stdout: both refuse */
	snprintf(cmd, sizeof(cmd),
		 "cd %s && jq '.stdout = \"7.26\\n0\\n\"' r.json > t.json && mv t.json r.json",
		 dir);
	assert_int_equal(run_cmd(cmd), 0);
	snprintf(cmd, sizeof(cmd),
		 "cd %s && %s verify-receipt receipt.json --public-key pub.pem --execution r.json",
		 dir, sbx_bin());
	assert_int_equal(run_cmd(cmd), 1);
	snprintf(cmd, sizeof(cmd), "cd %s && URL=http://127.0.0.1:%d KEY=%s sh check.sh 2>&1", dir,
		 d.port, d.key);
	assert_int_not_equal(run_cmd(cmd), 0);
	/* a tampered body or another signer */
	snprintf(cmd, sizeof(cmd),
		 "cd %s && jq '.body.cost_micro_usd = 1' receipt.json > t.json && "
		 "%s verify-receipt t.json --public-key pub.pem",
		 dir, sbx_bin());
	assert_int_equal(run_cmd(cmd), 1);
	snprintf(cmd, sizeof(cmd), "cd %s && %s verify-receipt receipt.json --signer 0x%064d", dir,
		 sbx_bin(), 1);
	assert_int_equal(run_cmd(cmd), 1);
	http_reply_free(&r);
}

/* An exec on a sandbox with "receipt": true, verified with --input. */
static void test_exec_receipt(void **state)
{
	struct http_reply r, e;
	char path[512], cmd[2048], dir[400], id[64];
	const char *body = "{\"command\": \"echo $X; echo e >&2\", \"env\": {\"X\": \"42\"}, "
			   "\"receipt\": true}";

	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", d.key, NULL,
				      "{\"timeout_minutes\": 5}", 0, &r),
			 0);
	assert_int_equal(r.status, 201);
	snprintf(id, sizeof(id), "%s", jstr(r.json, "id"));
	http_reply_free(&r);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", id);
	assert_int_equal(http_request(&d, "POST", path, d.key, NULL, body, 0, &e), 0);
	assert_int_equal(e.status, 200);
	assert_string_equal(jstr(e.json, "stdout"), "42\n");
	snprintf(dir, sizeof(dir), "%s/rcheck", d.state_dir);
	snprintf(path, sizeof(path), "%s/exec.json", dir);
	write_file(path, e.body, e.body_len);
	snprintf(path, sizeof(path), "%s/input.json", dir);
	write_file(path,
		   "{\"command\": \"echo $X; echo e >&2\", \"cwd\": \"/home/sandbox\", "
		   "\"env\": {\"X\": \"42\"}}",
		   strlen("{\"command\": \"echo $X; echo e >&2\", \"cwd\": \"/home/sandbox\", "
			  "\"env\": {\"X\": \"42\"}}"));
	snprintf(cmd, sizeof(cmd),
		 "cd %s && curl -sf http://127.0.0.1:%d$(jq -r .receipt.url exec.json) -H "
		 "'Authorization: Bearer %s' > erc.json && jq -e '.body.operation == "
		 "\"sandbox.exec\"' erc.json >/dev/null && "
		 "%s verify-receipt erc.json --public-key pub.pem --execution exec.json --input "
		 "input.json",
		 dir, d.port, d.key, sbx_bin());
	assert_int_equal(run_cmd(cmd), 0);
	/* without the flag: no receipt */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", id);
	http_reply_free(&e);
	assert_int_equal(
	    http_request(&d, "POST", path, d.key, NULL, "{\"command\": \"true\"}", 0, &e), 0);
	assert_int_equal(e.status, 200);
	assert_null(strstr(e.body, "\"receipt\""));
	http_reply_free(&e);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	assert_int_equal(http_request(&d, "DELETE", path, d.key, NULL, NULL, 0, &e), 0);
	assert_int_equal(e.status, 200);
	assert_true(jint(e.json, "cost_micro_usd") > 0);
	charged += jint(e.json, "cost_micro_usd");
	http_reply_free(&e);
}

static void test_scope(void **state)
{
	char args[256];
	json_object *k, *sc;
	struct http_reply r;
	char key[128];

	snprintf(args, sizeof(args), "create-key %s --scope ''", d.account_id);
	k = daemon_admin(&d, args);
	assert_non_null(k);
	assert_true(json_object_object_get_ex(k, "scopes", &sc));
	assert_int_equal(json_object_array_length(sc), 0);
	snprintf(key, sizeof(key), "%s", jstr(k, "api_key"));
	json_object_put(k);
	r = execute(key, "python", 5, "print(1)", 403);
	assert_string_equal(jerr(r.json, "type"), "permission_error");
	http_reply_free(&r);
	/* an unknown scope is refused; the default and explicit ones work */
	snprintf(args, sizeof(args), "create-key %s --scope bogus", d.account_id);
	assert_null(daemon_admin(&d, args));
	snprintf(args, sizeof(args), "create-key %s", d.account_id);
	k = daemon_admin(&d, args);
	assert_non_null(k);
	assert_true(json_object_object_get_ex(k, "scopes", &sc));
	assert_string_equal(json_object_get_string(json_object_array_get_idx(sc, 0)), "sandboxes");
	json_object_put(k);
}

/* The account's executions listed (at most 100). */
static int executions_listed(void)
{
	struct http_reply r;
	json_object *data;
	int n;

	assert_int_equal(
	    http_request(&d, "GET", "/v1/sandbox/executions?limit=100", d.key, NULL, NULL, 0, &r),
	    0);
	assert_int_equal(r.status, 200);
	assert_true(json_object_object_get_ex(r.json, "data", &data));
	n = (int)json_object_array_length(data);
	http_reply_free(&r);
	return n;
}

/* Code that is not UTF-8 by RFC 3629 but passes json-c (an overlong C0 80
 * under a latin-1 coding line, a surrogate, an F5 lead byte) is refused
 * 400 `code` before anything is held or run: no execution row, no hold,
 * no charge (test_billing then checks the totals). */
static void test_code_not_utf8(void **state)
{
	static const char *const bad[] = {
	    "# -*- coding: latin-1 -*-\nimport time\ntime.sleep(6)\nprint('\xc0\x80')\n",
	    "x = '\xed\xa0\x80'\n", "x = '\xf5\x80\x80\x80'\n"};
	int before = executions_listed();

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct http_reply r = execute(d.key, "python", 10, bad[i], 400);

		assert_string_equal(jerr(r.json, "param"), "code");
		http_reply_free(&r);
	}
	assert_int_equal(executions_listed(), before);
}

/* Billing: usage agrees with what the executions said; nothing reserved
 * once they are over; the ledger's invariants hold. */
static void test_billing(void **state)
{
	struct http_reply r;
	struct store *s;
	struct sbx_error err;

	assert_int_equal(http_request(&d, "GET", "/v1/usage", d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	print_message("  usage: consumed %lld reserved %lld (executions+exec sandbox %lld)\n",
		      (long long)jint(r.json, "consumed_micro_usd"),
		      (long long)jint(r.json, "reserved_micro_usd"), (long long)charged);
	assert_int_equal(jint(r.json, "reserved_micro_usd"), 0);
	assert_int_equal(jint(r.json, "balance_micro_usd") + jint(r.json, "consumed_micro_usd"),
			 10000000);
	assert_int_equal(jint(r.json, "consumed_micro_usd"), charged);
	http_reply_free(&r);
	sbx_error_clear(&err);
	s = store_open(d.db, &err);
	assert_non_null(s);
	if (store_ledger_check(s, NULL, &err) < 0)
		fail_msg("ledger: %s", err.message);
	store_close(s);
}

/* A guest that cannot boot (the kernel is not a kernel): 500
 * sandbox_error, no receipt, and the hold is released. */
static void test_boot_failure(void **state)
{
	struct daemon b = d;
	struct http_reply r;

	/* its own prefix: its reconcile must not see the main run's guests */
	snprintf(b.prefix, sizeof(b.prefix), "tb%d-", (int)getpid());
	char cmd[1024];
	FILE *f;

	snprintf(b.config, sizeof(b.config), "%s/broken.json", d.state_dir);
	snprintf(b.db, sizeof(b.db), "%s/broken.db", d.state_dir);
	snprintf(cmd, sizeof(cmd), "head -c 4096 /dev/urandom > %s/images/broken-vmlinux",
		 d.state_dir);
	assert_int_equal(run_cmd(cmd), 0);
	f = fopen(b.config, "w");
	assert_non_null(f);
	fprintf(
	    f,
	    "{\"state_dir\": \"%s/broken\", \"db_path\": \"%s\", \"domain_prefix\": \"%s\", "
	    "\"accel\": \"tcg\", \"allow_tcg\": true, \"kernel\": \"%s/images/broken-vmlinux\", "
	    "\"initrd\": \"%s/images/initramfs.cpio.gz\", \"boot_timeout_ms\": 15000}\n",
	    d.state_dir, b.db, d.prefix, d.state_dir, d.state_dir);
	fclose(f);
	daemon_create_account(&b, "1");
	assert_int_equal(daemon_start(&b), 0);
	{
		struct daemon save = d;
		d = b;
		r = execute(b.key, "python", 10, "print(1)", 500);
		d = save;
	}
	assert_string_equal(jerr(r.json, "type"), "sandbox_error");
	http_reply_free(&r);
	assert_int_equal(http_request(&b, "GET", "/v1/usage", b.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(jint(r.json, "reserved_micro_usd"), 0);
	assert_int_equal(jint(r.json, "consumed_micro_usd"), 0);
	assert_int_equal(jint(r.json, "balance_micro_usd"), 1000000);
	http_reply_free(&r);
	assert_int_equal(daemon_stop(&b), 0);
	destroy_own_domains(&b);
	assert_int_equal(count_own_domains(&b), 0);
}

/* serve exits 2 in production mode with dev-process, with mock, and with
 * tcg without allow_tcg. */
static void test_production_refusals(void **state)
{
	static const char *const bad[] = {
	    "\"allow_tcg\": true, \"execution_runner\": \"dev-process\"",
	    "\"allow_tcg\": true, \"execution_runner\": \"mock\"",
	    "\"allow_tcg\": false",
	};
	char path[512], cmd[2048];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		FILE *f;

		snprintf(path, sizeof(path), "%s/prod%zu.json", d.state_dir, i);
		f = fopen(path, "w");
		assert_non_null(f);
		fprintf(
		    f,
		    "{\"mode\": \"production\", \"state_dir\": \"%s/prod\", \"accel\": \"tcg\", "
		    "\"kernel\": \"%s/images/vmlinux\", \"initrd\": "
		    "\"%s/images/initramfs.cpio.gz\", %s}\n",
		    d.state_dir, d.state_dir, d.state_dir, bad[i]);
		fclose(f);
		snprintf(cmd, sizeof(cmd),
			 "timeout 20 %s serve --config %s --listen 127.0.0.1:0 >/dev/null 2>%s.err",
			 sbx_bin(), path, path);
		int rc = run_cmd(cmd);
		if (rc != 2) {
			snprintf(cmd, sizeof(cmd), "cat %s.err", path);
			run_cmd(cmd);
		}
		assert_int_equal(rc, 2);
	}
}

/* Last: a SIGTERM right after an execution's reply, while its guest is
 * still being destroyed in the background. The daemon waits for that
 * teardown (and destroys the pool): no domain of this run is left. */
static void test_shutdown_leaves_no_domain(void **state)
{
	struct http_reply r = execute(d.key, "python", 10, "print(1)", 200);

	check_execution(&r, 10);
	http_reply_free(&r);
	assert_int_equal(daemon_stop(&d), 0);
	assert_int_equal(count_own_domains(&d), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_python),
	    cmocka_unit_test(test_node),
	    cmocka_unit_test(test_no_network),
	    cmocka_unit_test(test_timeout),
	    cmocka_unit_test(test_truncation),
	    cmocka_unit_test(test_receipt),
	    cmocka_unit_test(test_exec_receipt),
	    cmocka_unit_test(test_scope),
	    cmocka_unit_test(test_code_not_utf8),
	    cmocka_unit_test(test_billing),
	    cmocka_unit_test(test_boot_failure),
	    cmocka_unit_test(test_production_refusals),
	    cmocka_unit_test(test_shutdown_leaves_no_domain),
	};

	if (getenv("SBX_TEST_FILTER"))
		cmocka_set_test_filter(getenv("SBX_TEST_FILTER"));
	return cmocka_run_group_tests(tests, setup, teardown);
}
