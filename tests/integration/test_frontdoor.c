/* The front door is shared fairly (issue 13): long requests run on a
 * bounded pool with per-account caps and leave the HTTP workers free, one
 * account's parked requests cannot take the host's connections.
 *
 * Executions run with the dev-process runner (`sh` on the host, no
 * guest), so these groups need libvirt only for the daemon to start; the
 * last group boots tiny guests for the create and exec caps.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <pthread.h>
#include <strings.h>

#include "harness.h"

static struct daemon d;
static char key_b[128], key_c[128]; /* two more accounts */

static bool has_header(const struct http_reply *r, const char *name)
{
	char pat[80];

	snprintf(pat, sizeof(pat), "\r\n%s:", name);
	return strcasestr(r->headers, pat) != NULL;
}

/* A second account on the daemon: its key into key. */
static void account_new(char key[128])
{
	json_object *o = daemon_admin(&d, "create-account --name other --credit-usd 10"), *v;

	assert_non_null(o);
	assert_true(json_object_object_get_ex(o, "api_key", &v));
	snprintf(key, 128, "%s", json_object_get_string(v));
	json_object_put(o);
}

/* One request on a thread of its own. */
struct call {
	const char *method;
	const char *path;
	const char *key;
	const char *body;
	struct http_reply r;
	int rc;
	int64_t ms;
	pthread_t t;
};

static void *call_main(void *arg)
{
	struct call *c = arg;
	int64_t t0 = sbx_mono_ms();

	c->rc = http_request(&d, c->method, c->path, c->key, NULL, c->body, 0, &c->r);
	c->ms = sbx_mono_ms() - t0;
	return NULL;
}

static void call_start(struct call *c, const char *method, const char *path, const char *key,
		       const char *body)
{
	c->method = method;
	c->path = path;
	c->key = key;
	c->body = body;
	assert_int_equal(pthread_create(&c->t, NULL, call_main, c), 0);
}

static void call_join(struct call *c)
{
	pthread_join(c->t, NULL);
}

/* A request that must answer at once: its status, and its time in *ms. */
static int quick(const char *method, const char *path, const char *key, int64_t *ms)
{
	struct call c = {0};
	int status;

	c.method = method;
	c.path = path;
	c.key = key;
	call_main(&c);
	if (ms)
		*ms = c.ms;
	status = c.rc < 0 ? -1 : c.r.status;
	http_reply_free(&c.r);
	return status;
}

#define SLEEP3 "{\"runtime\": \"sh\", \"timeout_seconds\": 20, \"code\": \"sleep 3; echo slept\"}"

/* ------------------------------------- group 1: the pool and the caps */

static int pool_setup(void **state)
{
	/* One HTTP worker: a long request on it would stall every other. */
	daemon_config(&d, "\"http_threads\": 1, \"execution_runner\": \"dev-process\", "
			  "\"execution_test_shell_runtime\": true, "
			  "\"max_executions_in_flight_per_account\": 2, "
			  "\"http_work_threads\": 3, \"http_work_queue\": 1");
	if (daemon_up(&d) < 0)
		return -1;
	account_new(key_b);
	account_new(key_c);
	return 0;
}

static int group_teardown(void **state)
{
	return daemon_down(&d);
}

static void limits_publish_the_caps(void **state)
{
	struct http_reply r;

	assert_int_equal(http_request(&d, "GET", "/v1/limits", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_int_equal(jint(r.json, "executions_in_flight_per_account"), 2);
	assert_int_equal(jint(r.json, "creates_in_flight_per_account"), 4);
	assert_int_equal(jint(r.json, "deletes_in_flight_per_account"), 8);
	assert_int_equal(jint(r.json, "execs_in_flight_per_account"), 32);
	http_reply_free(&r);
}

/* Four executions of one account at once, cap 2: two run, two are 429
 * rate_limited with Retry-After at once; meanwhile the single HTTP worker
 * answers everyone else in milliseconds. */
static void executions_past_the_cap_are_429_and_the_api_stays_fast(void **state)
{
	struct call c[4] = {0};
	int64_t ms_limits, ms_usage;
	int ok = 0, limited = 0;

	for (int i = 0; i < 4; i++)
		call_start(&c[i], "POST", "/v1/sandbox/executions", d.key, SLEEP3);
	usleep(700 * 1000);
	assert_int_equal(quick("GET", "/v1/limits", NULL, &ms_limits), 200);
	assert_int_equal(quick("GET", "/v1/usage", key_b, &ms_usage), 200);
	for (int i = 0; i < 4; i++)
		call_join(&c[i]);
	print_message("4 executions: %d %lld ms, %d %lld ms, %d %lld ms, %d %lld ms; meanwhile "
		      "/v1/limits %lld ms, /v1/usage %lld ms\n",
		      c[0].r.status, (long long)c[0].ms, c[1].r.status, (long long)c[1].ms,
		      c[2].r.status, (long long)c[2].ms, c[3].r.status, (long long)c[3].ms,
		      (long long)ms_limits, (long long)ms_usage);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(c[i].rc, 0);
		if (c[i].r.status == 200) {
			ok++;
			assert_string_equal(jstr(c[i].r.json, "stdout"), "slept\n");
		} else {
			assert_int_equal(c[i].r.status, 429);
			assert_string_equal(jerr(c[i].r.json, "type"), "rate_limited");
			assert_true(has_header(&c[i].r, "Retry-After"));
			assert_true(c[i].ms < 1000);
			limited++;
		}
		http_reply_free(&c[i].r);
	}
	assert_int_equal(ok, 2);
	assert_int_equal(limited, 2);
	assert_true(ms_limits < 500);
	assert_true(ms_usage < 500);
	/* The counts came back: the account runs two again. */
	struct call again[2] = {0};
	for (int i = 0; i < 2; i++)
		call_start(&again[i], "POST", "/v1/sandbox/executions", d.key, SLEEP3);
	for (int i = 0; i < 2; i++) {
		call_join(&again[i]);
		assert_int_equal(again[i].r.status, 200);
		http_reply_free(&again[i].r);
	}
}

/* The pool has 3 threads and room for 1 more job: A runs 2, B runs 1 and
 * queues 1, C's is 503 with Retry-After, and B's queued one runs once a
 * thread is free. */
static void a_full_pool_queue_is_503(void **state)
{
	struct call a[2] = {0}, b[2] = {0}, cc = {0};

	for (int i = 0; i < 2; i++)
		call_start(&a[i], "POST", "/v1/sandbox/executions", d.key, SLEEP3);
	call_start(&b[0], "POST", "/v1/sandbox/executions", key_b, SLEEP3);
	usleep(500 * 1000);
	call_start(&b[1], "POST", "/v1/sandbox/executions", key_b, SLEEP3);
	usleep(500 * 1000);
	call_start(&cc, "POST", "/v1/sandbox/executions", key_c, SLEEP3);
	call_join(&cc);
	print_message("C with the pool full: %d in %lld ms %s\n", cc.r.status, (long long)cc.ms,
		      cc.r.body);
	assert_int_equal(cc.r.status, 503);
	assert_string_equal(jerr(cc.r.json, "type"), "service_unavailable");
	assert_true(has_header(&cc.r, "Retry-After"));
	assert_true(cc.ms < 1000);
	http_reply_free(&cc.r);
	for (int i = 0; i < 2; i++) {
		call_join(&a[i]);
		call_join(&b[i]);
		assert_int_equal(a[i].r.status, 200);
		assert_int_equal(b[i].r.status, 200);
		http_reply_free(&a[i].r);
		http_reply_free(&b[i].r);
	}
	print_message("B's queued execution answered after %lld ms\n", (long long)b[1].ms);
	assert_true(b[1].ms >= 4000); /* it waited for a thread */
}

/* ---------------------------------------- group 2: creates and execs */

static char sbx_a[64];
static char exec_path[128];

static int guests_setup(void **state)
{
	daemon_config(&d, "\"max_creates_in_flight_per_account\": 1, "
			  "\"max_execs_in_flight_per_account\": 2, "
			  "\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": 256, "
			  "\"disk_gib\": 1, \"price_micro_usd_per_hour\": 90000}}");
	if (daemon_up(&d) < 0)
		return -1;
	account_new(key_b);
	return 0;
}

/* Two creates of one account at once, cap 1: one boots, one is 429
 * rate_limited at once; then the account may create again. */
static void creates_past_the_cap_are_429(void **state)
{
	struct call c[2] = {0};
	int ok = -1;

	for (int i = 0; i < 2; i++)
		call_start(&c[i], "POST", "/v1/sandboxes", d.key, "{\"timeout_minutes\": 10}");
	for (int i = 0; i < 2; i++)
		call_join(&c[i]);
	print_message("2 creates: %d in %lld ms, %d in %lld ms\n", c[0].r.status,
		      (long long)c[0].ms, c[1].r.status, (long long)c[1].ms);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(c[i].rc, 0);
		if (c[i].r.status == 201) {
			ok = i;
			snprintf(sbx_a, sizeof(sbx_a), "%s", jstr(c[i].r.json, "id"));
		}
	}
	assert_true(ok >= 0);
	assert_int_equal(c[1 - ok].r.status, 429);
	assert_string_equal(jerr(c[1 - ok].r.json, "type"), "rate_limited");
	assert_true(has_header(&c[1 - ok].r, "Retry-After"));
	assert_true(c[1 - ok].ms < 1000);
	for (int i = 0; i < 2; i++)
		http_reply_free(&c[i].r);
	snprintf(exec_path, sizeof(exec_path), "/v1/sandboxes/%s/exec", sbx_a);
}

/* Six execs of one account at once, cap 2: two are parked and run, four
 * are 429 at once (their connections close), and the rest of the API is
 * unaffected meanwhile. */
static void execs_past_the_cap_are_429(void **state)
{
	struct call c[6] = {0};
	int64_t ms_usage;
	int ok = 0, limited = 0;

	for (int i = 0; i < 6; i++)
		call_start(&c[i], "POST", exec_path, d.key,
			   "{\"command\": \"sleep 3; echo slept\"}");
	usleep(700 * 1000);
	assert_int_equal(quick("GET", "/v1/usage", key_b, &ms_usage), 200);
	for (int i = 0; i < 6; i++) {
		call_join(&c[i]);
		assert_int_equal(c[i].rc, 0);
		if (c[i].r.status == 200) {
			ok++;
			assert_string_equal(jstr(c[i].r.json, "stdout"), "slept\n");
		} else {
			print_message("exec %d: %d %s\n", i, c[i].r.status, c[i].r.body);
			assert_int_equal(c[i].r.status, 429);
			assert_string_equal(jerr(c[i].r.json, "type"), "rate_limited");
			assert_true(has_header(&c[i].r, "Retry-After"));
			assert_true(c[i].ms < 1000);
			limited++;
		}
		http_reply_free(&c[i].r);
	}
	assert_int_equal(ok, 2);
	assert_int_equal(limited, 4);
	assert_true(ms_usage < 500);
}

static void delete_the_sandbox(void **state)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", sbx_a);
	assert_int_equal(quick("DELETE", path, d.key, NULL), 200);
}

int main(void)
{
	const struct CMUnitTest pool[] = {
	    cmocka_unit_test(limits_publish_the_caps),
	    cmocka_unit_test(executions_past_the_cap_are_429_and_the_api_stays_fast),
	    cmocka_unit_test(a_full_pool_queue_is_503),
	};
	const struct CMUnitTest guests[] = {
	    cmocka_unit_test(creates_past_the_cap_are_429),
	    cmocka_unit_test(execs_past_the_cap_are_429),
	    cmocka_unit_test(delete_the_sandbox),
	};
	int fails = 0;

	fails += cmocka_run_group_tests_name("frontdoor: pool and caps", pool, pool_setup,
					     group_teardown);
	fails += cmocka_run_group_tests_name("frontdoor: creates and execs", guests, guests_setup,
					     group_teardown);
	return fails;
}
