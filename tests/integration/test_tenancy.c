/* Tenants share the host fairly and get no more rights than they were
 * given (issue 13, items 5-8), against a real daemon over a real socket:
 * key scopes cannot be escalated, the files the daemon writes are its
 * owner's only, concurrent extends never shorten a sandbox. Each test
 * starts its own daemon (its own config), with the tiny image. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <pthread.h>

#include "harness.h"

#define SMALL_SIZE                                                                                 \
	"\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": 256, \"disk_gib\": 1, "             \
	"\"price_micro_usd_per_hour\": 90000}}"

static struct daemon d;

static int teardown_each(void **state)
{
	daemon_down(&d);
	memset(&d, 0, sizeof(d));
	return 0;
}

static void req(const char *key, const char *method, const char *path, const char *body,
		struct http_reply *r)
{
	assert_int_equal(http_request(&d, method, path, key, NULL, body, 0, r), 0);
}

static void create_ok(const char *body, char id[64])
{
	struct http_reply r;

	req(d.key, "POST", "/v1/sandboxes", body, &r);
	if (r.status != 201)
		fail_msg("create: %d %s", r.status, r.body);
	snprintf(id, 64, "%s", jstr(r.json, "id"));
	http_reply_free(&r);
}

/* ------------------------------------------------- item 8: extend race */

struct bg_extend {
	char path[160];
	const char *body;
	struct http_reply r;
};

static void *bg_extend_main(void *arg)
{
	struct bg_extend *b = arg;

	if (http_request(&d, "POST", b->path, d.key, NULL, b->body, 0, &b->r) < 0)
		b->r.status = -1;
	return NULL;
}

/* Two extends race: the first (to now + 8 "minutes") is held by the pause
 * fault right after its hold committed, before it publishes the new expiry
 * in memory; the second (to now + 60) completes meanwhile. When the first
 * resumes, the in-memory expiry must stay at the later one: the sandbox is
 * still running after the first one's expiry has passed. */
static void concurrent_extends_never_shorten(void **state)
{
	struct bg_extend b = {.body = "{\"timeout_minutes\": 8}"};
	struct http_reply r;
	char id[64], exp0[40], path[160];
	pthread_t t;
	int64_t t_b;
	bool moved = false;

	daemon_config(&d, "\"test_minute_ms\": 1000, \"test_fault_point\": \"extend.after_hold\", "
			  "\"test_fault_pause_ms\": 4000, " SMALL_SIZE);
	assert_int_equal(daemon_up(&d), 0);
	create_ok("{\"timeout_minutes\": 5}", id);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	req(d.key, "GET", path, NULL, &r);
	snprintf(exp0, sizeof(exp0), "%s", jstr(r.json, "expires_at"));
	http_reply_free(&r);

	snprintf(b.path, sizeof(b.path), "/v1/sandboxes/%s/extend", id);
	t_b = sbx_mono_ms();
	assert_int_equal(pthread_create(&t, NULL, bg_extend_main, &b), 0);
	/* The first extend's row update is visible: it is now in the pause. */
	for (int i = 0; i < 200 && !moved; i++) {
		req(d.key, "GET", path, NULL, &r);
		moved = strcmp(jstr(r.json, "expires_at"), exp0) != 0;
		http_reply_free(&r);
		if (!moved)
			usleep(20000);
	}
	assert_true(moved);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/extend", id);
	req(d.key, "POST", path, "{\"timeout_minutes\": 60}", &r);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	pthread_join(t, NULL);
	assert_int_equal(b.r.status, 200);
	http_reply_free(&b.r);

	/* Past the first extend's expiry (+8 s) and a few timer ticks. */
	while (sbx_mono_ms() - t_b < 8000 + 3000)
		usleep(100000);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	req(d.key, "GET", path, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "running");
	http_reply_free(&r);
	assert_int_equal(count_own_domains(&d), 1);
	req(d.key, "DELETE", path, NULL, &r);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(concurrent_extends_never_shorten, teardown_each),
	};
	if (getenv("SBX_TEST_FILTER"))
		cmocka_set_test_filter(getenv("SBX_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
