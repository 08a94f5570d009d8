/* The operator's /metrics (issue 19): served on metrics_listen only, in
 * Prometheus text, and its figures move with what the daemon does: requests
 * by route and status, a guest running, a boot, an exec, store transactions
 * and the ledger's holds. One daemon, the tiny image, one small guest. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"

static struct daemon d;
static struct daemon metrics; /* the same daemon, the metrics port */

static int setup(void **state)
{
	char extra[128];
	int port = free_port();

	(void)state;
	if (port < 0)
		return -1;
	snprintf(extra, sizeof extra,
		 "\"metrics_listen\": \"127.0.0.1:%d\", \"destroy_on_exit\": true", port);
	daemon_config(&d, extra);
	if (daemon_up(&d) < 0)
		return -1;
	metrics = d;
	metrics.port = port;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return daemon_down(&d);
}

/* The value of the sample named exactly `series` (with its labels), or -1
 * when it is not there. */
static double sample(const char *text, const char *series)
{
	size_t n = strlen(series);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, series, n) == 0 && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	return -1;
}

static char *scrape(void)
{
	struct http_reply r;
	char *text;

	assert_int_equal(http_request(&metrics, "GET", "/metrics", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.headers, "text/plain; version=0.0.4"));
	text = strdup(r.body);
	http_reply_free(&r);
	return text;
}

static double zero_if_absent(double v)
{
	return v < 0 ? 0 : v;
}

static void counters_move_with_requests(void **state)
{
	const char *limits = "sandboxd_http_requests_total{route=\"limits\",status=\"200\"}";
	const char *no_key = "sandboxd_http_requests_total{route=\"usage\",status=\"401\"}";
	_cleanup_free_ char *before = NULL, *after = NULL;
	struct http_reply r;

	(void)state;
	before = scrape();
	for (int i = 0; i < 3; i++) {
		assert_int_equal(http_request(&d, "GET", "/v1/limits", NULL, NULL, NULL, 0, &r), 0);
		http_reply_free(&r);
	}
	assert_int_equal(http_request(&d, "GET", "/v1/usage", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 401);
	http_reply_free(&r);
	/* the processes routes and 416 have their own series (issue 24:
	 * they were counted as route="unknown" and status="other") */
	assert_int_equal(
	    http_request(&d, "GET", "/v1/sandboxes/sbx_nope/processes", d.key, NULL, NULL, 0, &r),
	    0);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);
	assert_int_equal(http_request(&d, "GET", "/v1/sandboxes/sbx_nope/files?path=/etc/hostname",
				      d.key, "Range: bytes=x\r\n", NULL, 0, &r),
			 0);
	assert_int_equal(r.status, 416);
	http_reply_free(&r);
	after = scrape();
	assert_true(
	    sample(after, "sandboxd_http_requests_total{route=\"processes\",status=\"404\"}") >= 1);
	assert_true(sample(after, "sandboxd_http_requests_total{route=\"files\",status=\"416\"}") >=
		    1);
	assert_true(sample(after, limits) - zero_if_absent(sample(before, limits)) == 3);
	assert_true(sample(after, no_key) - zero_if_absent(sample(before, no_key)) == 1);
	assert_true(
	    sample(after, "sandboxd_http_request_duration_seconds_count{route=\"limits\"}") >= 3);
	assert_non_null(strstr(after, "# TYPE sandboxd_http_requests_total counter"));
	assert_true(sample(after, "sandboxd_http_connections") >= 0);
}

static void tenants_port_has_no_metrics(void **state)
{
	struct http_reply r;

	(void)state;
	assert_int_equal(http_request(&d, "GET", "/metrics", d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 404);
	assert_null(strstr(r.body, "sandboxd_"));
	http_reply_free(&r);
}

static void guests_boots_execs_and_money_move(void **state)
{
	_cleanup_free_ char *before = NULL, *mid = NULL, *after = NULL;
	const char *running = "sandboxd_guests{size=\"small\",state=\"running\"}";
	struct http_reply r;
	char id[64], path[128];

	(void)state;
	before = scrape();
	assert_int_equal(sample(before, running), 0);
	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", d.key, NULL,
				      "{\"timeout_minutes\": 5}", 0, &r),
			 0);
	assert_int_equal(r.status, 201);
	snprintf(id, sizeof id, "%s", jstr(r.json, "id"));
	http_reply_free(&r);
	mid = scrape();
	assert_int_equal(sample(mid, running), 1);
	assert_true(sample(mid, "sandboxd_boot_duration_seconds_count") >=
		    zero_if_absent(sample(before, "sandboxd_boot_duration_seconds_count")) + 1);
	assert_true(sample(mid, "sandboxd_ledger_micro_usd{kind=\"hold\"}") >
		    zero_if_absent(sample(before, "sandboxd_ledger_micro_usd{kind=\"hold\"}")));
	assert_true(sample(mid, "sandboxd_store_transaction_seconds_count") >
		    zero_if_absent(sample(before, "sandboxd_store_transaction_seconds_count")));

	snprintf(path, sizeof path, "/v1/sandboxes/%s/exec", id);
	assert_int_equal(
	    http_request(&d, "POST", path, d.key, NULL, "{\"command\": \"true\"}", 0, &r), 0);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	snprintf(path, sizeof path, "/v1/sandboxes/%s/files?path=/tmp/m", id);
	assert_int_equal(http_request(&d, "PUT", path, d.key, NULL, "0123456789", 0, &r), 0);
	assert_int_equal(r.status, 201);
	http_reply_free(&r);
	assert_int_equal(http_request(&d, "GET", path, d.key, "Range: bytes=2-4\r\n", NULL, 0, &r),
			 0);
	assert_int_equal(r.status, 206);
	http_reply_free(&r);
	snprintf(path, sizeof path, "/v1/sandboxes/%s", id);
	assert_int_equal(http_request(&d, "DELETE", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	after = scrape();
	assert_int_equal(sample(after, running), 0);
	assert_true(sample(after, "sandboxd_exec_duration_seconds_count") ==
		    zero_if_absent(sample(mid, "sandboxd_exec_duration_seconds_count")) + 1);
	assert_true(sample(after, "sandboxd_http_requests_total{route=\"exec\",status=\"200\"}") >=
		    1);
	assert_true(sample(after, "sandboxd_http_requests_total{route=\"files\",status=\"206\"}") >=
		    1);
	assert_true(sample(after, "sandboxd_ledger_micro_usd{kind=\"charge\"}") >
		    zero_if_absent(sample(mid, "sandboxd_ledger_micro_usd{kind=\"charge\"}")));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(counters_move_with_requests),
	    cmocka_unit_test(tenants_port_has_no_metrics),
	    cmocka_unit_test(guests_boots_execs_and_money_move),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
