/* The execution pool (issue 21) in real guests of the full image: guests
 * whose python or node is already started and waits for the code.
 *
 * - warm (interpreter waiting) and cold (a guest booted for the request,
 *   the interpreter started then) give the same state: python's
 *   sys.modules, node's process.moduleLoadList, the environment, cwd,
 *   umask, signal dispositions (/proc/self/status), descriptors, argv,
 *   the code's directory and its mode, the code file's mode, owner and
 *   links (the warm path uploads it, the cold one writes it with `cat`),
 *   python's __main__ names, the shape
 *   of an uncaught exception's traceback;
 * - node's ES module detection works on the warm path;
 * - the timeout counts from the delivery of the code, not from pool time:
 *   a 1.5 s program with a 2 s timeout completes long after its guest
 *   was pooled; a sleeping one is killed and billed exactly its timeout;
 * - the pool refills, and each run has a kernel of its own (boot_id);
 * - the ledger's invariants hold and usage matches what replies said.
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
static int64_t charged;

static int setup(void **state)
{
	if (daemon_config_full(&d, "\"execution_pool\": {\"python\": 1, \"node\": 1}, "
				   "\"disk_overcommit\": 16.0") < 0) {
		fprintf(stderr, "test_prestart: no full image (make image-full)\n");
		return -1;
	}
	return daemon_up(&d) < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	return daemon_down(&d);
}

/* startup.executions.pool.<runtime>.ready from /v1/limits (-1 on error). */
static int exec_pool_ready(const char *runtime)
{
	struct http_reply r;
	json_object *st, *x, *pool, *rt;
	int n = -1;

	if (http_request(&d, "GET", "/v1/limits", NULL, NULL, NULL, 0, &r) < 0)
		return -1;
	if (r.status == 200 && json_object_object_get_ex(r.json, "startup", &st) &&
	    json_object_object_get_ex(st, "executions", &x) &&
	    json_object_object_get_ex(x, "pool", &pool) &&
	    json_object_object_get_ex(pool, runtime, &rt))
		n = (int)jint(rt, "ready");
	http_reply_free(&r);
	return n;
}

/* Wait (at most timeout_ms, a bound for a hung pool, not a measure) until
 * both runtimes have a guest waiting. */
static void wait_pools(int64_t timeout_ms)
{
	int64_t end = sbx_mono_ms() + timeout_ms;

	while (sbx_mono_ms() < end) {
		if (exec_pool_ready("python") == 1 && exec_pool_ready("node") == 1)
			return;
		usleep(200 * 1000);
	}
	fail_msg("the execution pool did not fill in %lld ms", (long long)timeout_ms);
}

static struct http_reply execute(const char *runtime, int timeout_s, const char *code)
{
	json_object *o = json_object_new_object();
	struct http_reply r;

	json_object_object_add(o, "runtime", json_object_new_string(runtime));
	json_object_object_add(o, "timeout_seconds", json_object_new_int(timeout_s));
	json_object_object_add(o, "code", json_object_new_string(code));
	assert_int_equal(http_request(&d, "POST", "/v1/sandbox/executions", d.key, NULL,
				      json_object_to_json_string(o), 0, &r),
			 0);
	json_object_put(o);
	if (r.status != 200)
		print_message("execute: %d %.400s\n", r.status, r.body);
	assert_int_equal(r.status, 200);
	{
		json_object *bill;
		int64_t billed, secs;

		assert_true(json_object_object_get_ex(r.json, "billing", &bill));
		billed = jint(bill, "billed_ms");
		assert_true(billed >= 0 && billed <= timeout_s * 1000);
		secs = billed <= 0 ? 1 : (billed + 999) / 1000;
		secs = secs > timeout_s ? timeout_s : secs;
		assert_int_equal(jint(bill, "cost_micro_usd"), secs * PRICE);
		charged += secs * PRICE;
		print_message("  %s %s: %s exit %lld, billed %lld ms, guest %lld ms, %s%s\n",
			      runtime, jstr(r.json, "id"), jstr(r.json, "status"),
			      (long long)jint(r.json, "exit_code"), (long long)billed,
			      (long long)jint(r.json, "duration_ms"), jstr(r.json, "startup_path"),
			      jbool(r.json, "prestarted") ? " (interpreter waiting)" : "");
	}
	return r;
}

/* What a python program can see of its start. sys.modules first, before
 * this code imports anything; the code's directory shows as D. */
static const char state_py[] =
    "import sys\n"
    "mods = sorted(sys.modules)\n"
    "import os, signal\n"
    "d = os.path.dirname(os.path.abspath(__file__))\n"
    "def s(x): return repr(x).replace(d, 'D')\n"
    "print('modules', s(mods))\n"
    "print('env', s(sorted(os.environ.items())))\n"
    "print('cwd', os.getcwd())\n"
    "u = os.umask(0); os.umask(u); print('umask', oct(u))\n"
    "st = dict(l.split(':\\t') for l in open('/proc/self/status').read().splitlines() "
    "if ':\\t' in l)\n"
    "print('signals', [st[k] for k in ('SigBlk', 'SigIgn', 'SigCgt')])\n"
    "print('handlers', s([signal.getsignal(n) for n in range(1, 32) if n not in (9, 19)]))\n"
    "print('fds', sorted(os.listdir('/proc/self/fd')))\n"
    "print('argv', s(sys.argv), s(sys.orig_argv[1:]), s(sys.path[0]), s(sys.flags))\n"
    "f = os.stat(__file__)\n"
    "print('dir', sorted(os.listdir(d)), oct(os.stat(d).st_mode), oct(f.st_mode), f.st_uid, "
    "f.st_gid, f.st_nlink)\n"
    "import __main__\n"
    "print('main', s(sorted(k for k in vars(__main__) if k.startswith('__'))), "
    "type(__loader__).__name__, __spec__, __cached__, __name__)\n"
    "print('ids', os.getuid(), os.getgid(), os.getgroups(), os.getpgrp() == os.getpid())\n";

/* The same for node: the internal modules loaded (moduleLoadList), the
 * CommonJS cache, and what run.cjs shows. */
static const char state_js[] =
    "const loaded = process.moduleLoadList.slice();\n"
    "const fs = require('fs'), path = require('path');\n"
    "const d = __dirname, s = (x) => JSON.stringify(x).split(d).join('D');\n"
    "console.log('modules', s(loaded));\n"
    "console.log('cache', s(Object.keys(require.cache)));\n"
    "console.log('env', s(Object.entries(process.env).sort()));\n"
    "console.log('cwd', process.cwd());\n"
    "console.log('umask', process.umask().toString(8));\n"
    "const st = Object.fromEntries(fs.readFileSync('/proc/self/status', 'utf8').split('\\n')"
    ".filter((l) => l.includes(':\\t')).map((l) => l.split(':\\t')));\n"
    "console.log('signals', st.SigBlk, st.SigIgn, st.SigCgt);\n"
    "console.log('fds', fs.readdirSync('/proc/self/fd').length);\n"
    "console.log('argv', s(process.argv.slice(1)), s(process.execArgv), "
    "require.main === module);\n"
    "const f = fs.statSync(__filename);\n"
    "console.log('dir', s(fs.readdirSync(d)), (fs.statSync(d).mode & 0o777).toString(8), "
    "f.mode.toString(8), f.uid, f.gid, f.nlink);\n"
    "console.log('ids', process.getuid(), process.getgid());\n";

static const char raise_py[] = "def f():\n    raise ValueError('boom')\nf()\n";

/* Run code warm (a waiting interpreter), then at once cold (the pool is
 * refilling: the next guest is booted for the request). */
static void warm_then_cold(const char *runtime, const char *code, char **warm, char **cold,
			   char **warm_err, char **cold_err)
{
	struct http_reply w, c;

	wait_pools(600 * 1000);
	w = execute(runtime, 60, code);
	c = execute(runtime, 60, code);
	assert_true(jbool(w.json, "prestarted"));
	assert_string_equal(jstr(w.json, "startup_path"), "warm");
	assert_false(jbool(c.json, "prestarted"));
	assert_string_equal(jstr(c.json, "startup_path"), "cold");
	assert_int_equal(jint(w.json, "exit_code"), jint(c.json, "exit_code"));
	*warm = strdup(jstr(w.json, "stdout"));
	*cold = strdup(jstr(c.json, "stdout"));
	*warm_err = strdup(jstr(w.json, "stderr"));
	*cold_err = strdup(jstr(c.json, "stderr"));
	http_reply_free(&w);
	http_reply_free(&c);
}

static void same_output(const char *what, char *warm, char *cold, char *warm_err, char *cold_err)
{
	if (strcmp(warm, cold) != 0 || strcmp(warm_err, cold_err) != 0)
		print_message("%s differ:\n--- warm\n%s%s--- cold\n%s%s", what, warm, warm_err,
			      cold, cold_err);
	else
		print_message("  %s: warm and cold agree (%zu bytes)\n", what, strlen(warm));
	assert_string_equal(warm, cold);
	assert_string_equal(warm_err, cold_err);
	free(warm);
	free(cold);
	free(warm_err);
	free(cold_err);
}

static void test_python_state(void **state)
{
	char *w, *c, *we, *ce;

	warm_then_cold("python", state_py, &w, &c, &we, &ce);
	assert_non_null(strstr(w, "modules ['__main__'"));
	assert_null(strstr(w, "runpy")); /* nothing of a bootstrap's imports */
	assert_non_null(strstr(w, "cwd /home/sandbox\n"));
	assert_non_null(strstr(w, "umask 0o22\n"));
	same_output("python state", w, c, we, ce);
}

static void test_python_traceback(void **state)
{
	char *w, *c, *we, *ce;
	const char *p;
	char *cut;

	warm_then_cold("python", raise_py, &w, &c, &we, &ce);
	/* the directory's random name differs: compare from "main.py" on */
	for (char **e = (char *[]){we, ce, NULL}; *e; e++)
		while ((p = strstr(*e, "/tmp/sbxr.")) && (cut = strstr(p, "/main.py")))
			memmove((char *)p, cut, strlen(cut) + 1);
	assert_non_null(strstr(we, "Traceback (most recent call last):\n  File \"/main.py\", "
				   "line 3, in <module>\n"));
	assert_non_null(strstr(we, "ValueError: boom\n"));
	same_output("python traceback", w, c, we, ce);
}

static void test_node_state(void **state)
{
	char *w, *c, *we, *ce;

	warm_then_cold("node", state_js, &w, &c, &we, &ce);
	assert_non_null(strstr(w, "cwd /home/sandbox\n"));
	assert_non_null(strstr(w, "umask 22\n"));
	assert_non_null(strstr(w, "argv [\"D/main.js\"] [] true\n"));
	same_output("node state", w, c, we, ce);
}

/* run.cjs ends a natural end with no 'beforeExit' listener but its own and
 * no 'exit' listener through process.reallyExit (docs/receipts.md "How
 * node ends"): the exit code stays the natural one (process.exitCode), a
 * listener of the code's own still runs, and an uncaught exception still
 * prints before exit 1. */
static void test_node_exit(void **state)
{
	static const char *const codes[] = {
	    "process.exitCode = 3;\nconsole.log(process.listenerCount('beforeExit'), "
	    "process.listenerCount('exit'));\n",
	    "process.on('exit', (c) => { console.log('exit', c); process.exitCode = 4; });\n",
	    "setTimeout(() => { throw new Error('late'); }, 10);\n",
	};
	static const int want[] = {3, 4, 1};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(codes); i++) {
		struct http_reply w, c;

		wait_pools(600 * 1000);
		w = execute("node", 60, codes[i]);
		c = execute("node", 60, codes[i]);
		assert_true(jbool(w.json, "prestarted"));
		assert_false(jbool(c.json, "prestarted"));
		assert_int_equal(jint(w.json, "exit_code"), want[i]);
		assert_int_equal(jint(c.json, "exit_code"), want[i]);
		assert_string_equal(jstr(w.json, "stdout"), jstr(c.json, "stdout"));
		if (i == 2)
			assert_true(strstr(jstr(w.json, "stderr"), "Error: late") &&
				    strstr(jstr(c.json, "stderr"), "Error: late"));
		http_reply_free(&w);
		http_reply_free(&c);
	}
}

static void test_node_esm(void **state)
{
	struct http_reply r;

	wait_pools(600 * 1000);
	r = execute(
	    "node", 30,
	    "import os from 'node:os';\nconsole.log(typeof os.cpus, import.meta.url.endsWith("
	    "'/main.js'));\n");
	assert_true(jbool(r.json, "prestarted"));
	assert_string_equal(jstr(r.json, "stdout"), "function true\n");
	http_reply_free(&r);
}

/* The timeout counts from the delivery: the guest was pooled long before
 * (its launcher waited there since), yet a 1.5 s program completes
 * within 2 s; a sleeping one is killed (KILL from the host) and billed
 * exactly its timeout; the output before the kill is kept. */
static void test_timeout(void **state)
{
	struct http_reply r;
	json_object *bill;

	wait_pools(600 * 1000);
	sleep(3); /* more than the timeout below, spent pooled */
	r = execute("python", 3, "import time\ntime.sleep(1.5)\nprint('ok')\n");
	assert_true(jbool(r.json, "prestarted"));
	assert_string_equal(jstr(r.json, "status"), "completed");
	assert_string_equal(jstr(r.json, "stdout"), "ok\n");
	http_reply_free(&r);

	wait_pools(600 * 1000);
	r = execute("python", 2, "import time\nprint('before', flush=True)\ntime.sleep(60)\n");
	assert_true(jbool(r.json, "prestarted"));
	assert_string_equal(jstr(r.json, "status"), "timed_out");
	assert_int_equal(jint(r.json, "exit_code"), 137);
	assert_string_equal(jstr(r.json, "stdout"), "before\n");
	assert_true(json_object_object_get_ex(r.json, "billing", &bill));
	assert_int_equal(jint(bill, "billed_ms"), 2000);
	assert_int_equal(jint(bill, "cost_micro_usd"), 2 * PRICE);
	assert_true(jint(r.json, "duration_ms") <= 2000);
	http_reply_free(&r);
}

/* The pool refills after each run, and no guest serves twice. */
static void test_refill(void **state)
{
	char seen[3][64];

	for (int i = 0; i < 3; i++) {
		struct http_reply r;

		wait_pools(600 * 1000);
		r = execute("python", 10,
			    "print(open('/proc/sys/kernel/random/boot_id').read().strip())");
		assert_true(jbool(r.json, "prestarted"));
		const char *out = jstr(r.json, "stdout");

		assert_non_null(out);
		snprintf(seen[i], sizeof seen[i], "%.60s", out ? out : "");
		for (int j = 0; j < i; j++)
			assert_string_not_equal(seen[i], seen[j]);
		http_reply_free(&r);
	}
}

static void test_limits_and_billing(void **state)
{
	struct http_reply r;
	json_object *st, *x, *p;
	struct store *s;
	struct sbx_error err;

	assert_int_equal(http_request(&d, "GET", "/v1/limits", NULL, NULL, NULL, 0, &r), 0);
	assert_true(json_object_object_get_ex(r.json, "startup", &st));
	assert_true(json_object_object_get_ex(st, "executions", &x));
	assert_true(json_object_object_get_ex(x, "prestarted", &p));
	assert_true(jint(p, "samples") >= 8);
	assert_true(jint(p, "p50_ms") > 0 && jint(p, "p95_ms") >= jint(p, "p50_ms"));
	assert_true(json_object_object_get_ex(x, "cold", &p));
	assert_int_equal(jint(p, "samples"), 6); /* 3 state and traceback, 3 node_exit */
	print_message("  limits: %s\n", json_object_to_json_string(x));
	http_reply_free(&r);

	assert_int_equal(http_request(&d, "GET", "/v1/usage", d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(jint(r.json, "reserved_micro_usd"), 0);
	assert_int_equal(jint(r.json, "consumed_micro_usd"), charged);
	http_reply_free(&r);
	sbx_error_clear(&err);
	s = store_open(d.db, &err);
	assert_non_null(s);
	if (store_ledger_check(s, NULL, &err) < 0)
		fail_msg("ledger: %s", err.message);
	store_close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_python_state), cmocka_unit_test(test_python_traceback),
	    cmocka_unit_test(test_node_state),	 cmocka_unit_test(test_node_exit),
	    cmocka_unit_test(test_node_esm),	 cmocka_unit_test(test_timeout),
	    cmocka_unit_test(test_refill),	 cmocka_unit_test(test_limits_and_billing),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
