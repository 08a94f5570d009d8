/* The Python SDK (sdk/python, docs/sdk-python.md) against a real daemon
 * and a guest of the full image: the package is built into a wheel offline
 * and installed into an empty target directory, which must import on its
 * own; then its pytest suite (sdk/python/tests, Debian's python3-pytest)
 * runs against that installed copy with the daemon's URL and key: the
 * README's session (create, exec, stream, files and trees, a background
 * process read by offsets and signalled, run_code with its receipt checked
 * offline), a 429 waited out (max_execs_in_flight_per_account 1), a 402
 * raised (an account without credit), every route of the SDK's table
 * served and the spec's routes reachable. Any pytest failure or skip
 * (SBX_SDK_STRICT) fails this test; pytest's output is shown as it runs.
 * Last, no sandbox is left running.
 *
 * SBX_SDK_PYTHON_DIR names the SDK (default sdk/python); SBX_PYTHON the
 * interpreter (default /usr/bin/python3, Debian's, which has pytest).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"

static struct daemon d;
static char poor_key[128];
static char sdk_dir[512];
static char work[320]; /* under the state dir: the wheel and its install */

static const char *python(void)
{
	const char *p = getenv("SBX_PYTHON");

	return p ? p : "/usr/bin/python3";
}

static int setup(void **state)
{
	const char *dir = getenv("SBX_SDK_PYTHON_DIR");

	if (!realpath(dir ? dir : "sdk/python", sdk_dir)) {
		fprintf(stderr, "test_sdk_python: no SDK at %s\n", dir ? dir : "sdk/python");
		return -1;
	}
	/* a pooled python interpreter for run_code; one exec in flight per
	 * account, so a second one is 429 (the retry test) */
	if (daemon_up_full_second_account(
		&d, "test_sdk_python",
		"\"execution_pool\": {\"python\": 1}, \"disk_overcommit\": 16.0, "
		"\"max_execs_in_flight_per_account\": 1",
		"poor", "0", poor_key, sizeof(poor_key)) < 0)
		return -1;
	snprintf(work, sizeof(work), "%s/sdk", d.state_dir);
	return 0;
}

static int teardown(void **state)
{
	return daemon_down(&d);
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	fflush(stdout);
	fflush(stderr);
	return run_cmd(cmd);
}

/* A wheel built offline from a copy of the source (the build writes into
 * its tree), installed with pip --target into an empty directory, imports
 * from there in an isolated interpreter (-I: no PYTHONPATH, no user site). */
static void wheel_builds_installs_and_imports(void **state)
{
	assert_int_equal(
	    sh("set -e; rm -rf '%s'; mkdir -p '%s/src'; cd '%s'; "
	       "cp -r '%s/pyproject.toml' '%s/README.md' '%s/src' src/; "
	       "PYTHONDONTWRITEBYTECODE=1 %s -m pip wheel -q --no-deps --no-build-isolation "
	       "--no-index --no-cache-dir -w wheel ./src; "
	       "%s -m pip install -q --no-deps --no-index --no-cache-dir "
	       "--root-user-action=ignore --target site wheel/sandboxd-*-py3-none-any.whl; "
	       "test -f site/sandboxd/py.typed",
	       work, work, work, sdk_dir, sdk_dir, sdk_dir, python(), python()),
	    0);
	assert_int_equal(sh("cd / && %s -I -c 'import sys; sys.path.insert(0, \"%s/site\"); "
			    "import sandboxd; assert sandboxd.__file__.startswith(\"%s/site/\"), "
			    "sandboxd.__file__; print(\"imported\", sandboxd.__version__, "
			    "len(sandboxd.ROUTES), \"routes\")'",
			    python(), work, work),
			 0);
}

/* The suite, against the installed wheel; its exit status is ours. */
static void pytest_suite_passes(void **state)
{
	int rc = sh("cd '%s' && env PYTHONDONTWRITEBYTECODE=1 PYTHONPATH='%s/site' "
		    "SBX_SDK_EXPECT_DIR='%s/site' SBX_SDK_STRICT=1 "
		    "SANDBOXD_URL=http://127.0.0.1:%d SANDBOXD_KEY='%s' SBX_SDK_POOR_KEY='%s' "
		    "timeout 600 %s -m pytest -p no:cacheprovider -ra --durations=5 tests",
		    sdk_dir, work, work, d.port, d.key, poor_key, python());

	assert_int_equal(rc, 0);
}

/* Every sandbox the suite made was deleted (the context manager, the
 * fixture); the ledger holds. */
static void nothing_left_running(void **state)
{
	struct http_reply r;
	json_object *data;
	struct sbx_error err;

	assert_int_equal(
	    http_request(&d, "GET", "/v1/sandboxes?status=running", d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_true(json_object_object_get_ex(r.json, "data", &data));
	assert_int_equal(json_object_array_length(data), 0);
	http_reply_free(&r);
	sbx_error_clear(&err);
	assert_int_equal(daemon_ledger_check(&d, &err), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(wheel_builds_installs_and_imports),
	    cmocka_unit_test(pytest_suite_passes),
	    cmocka_unit_test(nothing_left_running),
	};

	if (getenv("SBX_TEST_FILTER"))
		cmocka_set_test_filter(getenv("SBX_TEST_FILTER"));
	return cmocka_run_group_tests(tests, setup, teardown);
}
