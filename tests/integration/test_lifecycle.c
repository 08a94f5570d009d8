/* The session lifecycle against a real daemon and real guests: the
 * Idempotency-Key on create, extend, expiry, delete after expiry, lists,
 * guest death, restarts (SIGTERM and kill -9) without losing a running
 * sandbox, and labels (metadata: update, list filter, usage by a label). One "minute" is 2 s here
 * (test_minute_ms), so expiry is seconds. Guests are small (1 vCPU, 256 MiB) to keep the run short.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <pthread.h>

#include "harness.h"
#include "store/store.h"

#define MINUTE_MS 2000

static struct daemon d;
static char key_b[128], key_c[128], acct_c[64];

static int setup(void **state)
{
	json_object *o, *v;

	daemon_config(&d, "\"test_minute_ms\": 2000, \"max_concurrent_boots\": 2, "
			  "\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": 256, "
			  "\"disk_gib\": 1, \"price_micro_usd_per_hour\": 90000}}");
	daemon_create_account(&d, "10");
	/* B: a second tenant with little credit; C: almost none. */
	o = daemon_admin(&d, "create-account --name b --credit-usd 0.03");
	if (!o || !json_object_object_get_ex(o, "api_key", &v))
		return -1;
	snprintf(key_b, sizeof(key_b), "%s", json_object_get_string(v));
	json_object_put(o);
	o = daemon_admin(&d, "create-account --name c --credit-usd 0.001");
	if (!o || !json_object_object_get_ex(o, "api_key", &v))
		return -1;
	snprintf(key_c, sizeof(key_c), "%s", json_object_get_string(v));
	if (!json_object_object_get_ex(o, "account_id", &v))
		return -1;
	snprintf(acct_c, sizeof(acct_c), "%s", json_object_get_string(v));
	json_object_put(o);
	return daemon_start(&d) < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	return daemon_down(&d);
}

/* POST /v1/sandboxes with an optional Idempotency-Key. */
static void create(const char *key, const char *idem, const char *body, struct http_reply *r)
{
	char hdr[512] = "";

	if (idem)
		snprintf(hdr, sizeof(hdr), "Idempotency-Key: %s\r\n", idem);
	assert_int_equal(
	    http_request(&d, "POST", "/v1/sandboxes", key, idem ? hdr : NULL, body, 0, r), 0);
}

static void create_ok(const char *body, char id[64])
{
	struct http_reply r;

	create(d.key, NULL, body, &r);
	if (r.status != 201)
		fail_msg("create: %d %s", r.status, r.body);
	snprintf(id, 64, "%s", jstr(r.json, "id"));
	http_reply_free(&r);
}

static void sbx_req(const char *key, const char *method, const char *id, const char *sub,
		    const char *body, struct http_reply *r)
{
	char path[160];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s%s", id, sub ? sub : "");
	assert_int_equal(http_request(&d, method, path, key, NULL, body, 0, r), 0);
}

static bool replayed(const struct http_reply *r)
{
	return strstr(r->headers, "\r\nIdempotent-Replayed: true") != NULL;
}

/* ------------------------------------------------------------ idempotency */

static void idempotent_replay_is_byte_for_byte(void **state)
{
	struct http_reply r1, r2, r3;
	int before = count_own_domains(&d);

	create(d.key, "k-replay-1", "{}", &r1);
	assert_int_equal(r1.status, 201);
	assert_false(replayed(&r1));
	/* {} == the defaults spelled out. */
	create(d.key, "k-replay-1", "{\"size\": \"small\", \"timeout_minutes\": 15}", &r2);
	assert_int_equal(r2.status, 201);
	assert_true(replayed(&r2));
	assert_int_equal(r2.body_len, r1.body_len);
	assert_memory_equal(r2.body, r1.body, r1.body_len);
	assert_int_equal(count_own_domains(&d), before + 1);

	/* Same key, other parameters: 422, nothing created. */
	create(d.key, "k-replay-1", "{\"timeout_minutes\": 20}", &r3);
	assert_int_equal(r3.status, 422);
	assert_string_equal(jerr(r3.json, "type"), "idempotency_mismatch");
	http_reply_free(&r3);
	assert_int_equal(count_own_domains(&d), before + 1);

	sbx_req(d.key, "DELETE", jstr(r1.json, "id"), NULL, NULL, &r3);
	assert_int_equal(r3.status, 200);
	http_reply_free(&r3);
	/* Still replayed after the sandbox ended: the first response. */
	create(d.key, "k-replay-1", "{}", &r3);
	assert_int_equal(r3.status, 201);
	assert_true(replayed(&r3));
	assert_memory_equal(r3.body, r1.body, r1.body_len);
	http_reply_free(&r3);
	http_reply_free(&r1);
	http_reply_free(&r2);
}

static void bad_idempotency_key_is_400(void **state)
{
	struct http_reply r;
	char longkey[300];

	memset(longkey, 'k', 256);
	longkey[256] = '\0';
	create(d.key, longkey, "{}", &r);
	assert_int_equal(r.status, 400);
	assert_string_equal(jerr(r.json, "param"), "Idempotency-Key");
	http_reply_free(&r);
	/* A body error comes first (400 naming the body field). */
	create(d.key, longkey, "{\"size\": 3}", &r);
	assert_int_equal(r.status, 400);
	assert_string_equal(jerr(r.json, "param"), "size");
	http_reply_free(&r);
}

struct par {
	struct http_reply r;
};

static void *par_create(void *arg)
{
	struct par *p = arg;
	char hdr[] = "Idempotency-Key: k-parallel\r\n";

	if (http_request(&d, "POST", "/v1/sandboxes", d.key, hdr, "{\"timeout_minutes\": 30}", 0,
			 &p->r) < 0)
		p->r.status = -1;
	return NULL;
}

static void parallel_creates_with_one_key_make_one_guest(void **state)
{
	struct par a = {0}, b = {0};
	pthread_t ta, tb;
	int before = count_own_domains(&d);
	struct http_reply r;

	pthread_create(&ta, NULL, par_create, &a);
	pthread_create(&tb, NULL, par_create, &b);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	print_message("parallel: %d%s / %d%s\n", a.r.status, replayed(&a.r) ? " (replayed)" : "",
		      b.r.status, replayed(&b.r) ? " (replayed)" : "");
	assert_int_equal(count_own_domains(&d), before + 1);
	assert_true(a.r.status == 201 || a.r.status == 409);
	assert_true(b.r.status == 201 || b.r.status == 409);
	assert_true(a.r.status == 201 || b.r.status == 201);
	if (a.r.status == 201 && b.r.status == 201) {
		assert_true(replayed(&a.r) != replayed(&b.r));
		assert_int_equal(a.r.body_len, b.r.body_len);
		assert_memory_equal(a.r.body, b.r.body, a.r.body_len);
	} else {
		struct http_reply *c = a.r.status == 409 ? &a.r : &b.r;
		assert_string_equal(jerr(c->json, "type"), "idempotency_conflict");
		assert_non_null(strstr(c->headers, "Retry-After:"));
	}
	sbx_req(d.key, "DELETE", jstr((a.r.status == 201 ? &a.r : &b.r)->json, "id"), NULL, NULL,
		&r);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	http_reply_free(&a.r);
	http_reply_free(&b.r);
}

static void failed_requests_are_not_remembered(void **state)
{
	struct http_reply r;
	char args[256];
	json_object *o;

	/* 400 with a key, then the fixed request with the same key. */
	create(d.key, "k-fix-400", "{\"size\": \"huge\"}", &r);
	assert_int_equal(r.status, 400);
	http_reply_free(&r);
	create(d.key, "k-fix-400", "{\"timeout_minutes\": 30}", &r);
	assert_int_equal(r.status, 201);
	assert_false(replayed(&r));
	sbx_req(d.key, "DELETE", jstr(r.json, "id"), NULL, NULL, &r);
	http_reply_free(&r);

	/* 402 with a key; add credit; the same key now creates. */
	create(key_c, "k-fix-402", "{}", &r);
	assert_int_equal(r.status, 402);
	assert_string_equal(jerr(r.json, "type"), "insufficient_credit");
	http_reply_free(&r);
	snprintf(args, sizeof(args), "add-credit %s --credit-usd 1", acct_c);
	o = daemon_admin(&d, args);
	assert_non_null(o);
	json_object_put(o);
	create(key_c, "k-fix-402", "{}", &r);
	assert_int_equal(r.status, 201);
	assert_false(replayed(&r));
	char id[64];
	snprintf(id, sizeof(id), "%s", jstr(r.json, "id"));
	http_reply_free(&r);

	/* Another account with the same key is independent (C's k-replay-1
	 * is not A's). */
	create(key_c, "k-replay-1", "{}", &r);
	assert_int_equal(r.status, 201);
	assert_false(replayed(&r));
	char id2[64];
	snprintf(id2, sizeof(id2), "%s", jstr(r.json, "id"));
	http_reply_free(&r);
	/* ... and A cannot see C's sandbox. */
	sbx_req(d.key, "GET", id2, NULL, NULL, &r);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);
	sbx_req(key_c, "DELETE", id, NULL, NULL, &r);
	http_reply_free(&r);
	sbx_req(key_c, "DELETE", id2, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
}

/* ------------------------------------------------------ extend and expiry */

static void extend_never_earlier_capped_and_paid(void **state)
{
	struct http_reply r, e;
	char id[64], exp0[40];

	create_ok("{\"timeout_minutes\": 30}", id);
	sbx_req(d.key, "GET", id, NULL, NULL, &r);
	snprintf(exp0, sizeof(exp0), "%s", jstr(r.json, "expires_at"));
	http_reply_free(&r);

	/* now + 1 minute is earlier than expires_at: unchanged. */
	sbx_req(d.key, "POST", id, "/extend", "{\"timeout_minutes\": 1}", &e);
	assert_int_equal(e.status, 200);
	assert_string_equal(jstr(e.json, "expires_at"), exp0);
	http_reply_free(&e);
	/* Later: moves. */
	sbx_req(d.key, "POST", id, "/extend", "{\"timeout_minutes\": 60}", &e);
	assert_int_equal(e.status, 200);
	assert_true(strcmp(jstr(e.json, "expires_at"), exp0) > 0);
	http_reply_free(&e);
	/* Past 24 h of lifetime: 400 naming the latest allowed expiry. */
	sbx_req(d.key, "POST", id, "/extend", "{\"timeout_minutes\": 1440}", &e);
	assert_int_equal(e.status, 400);
	assert_string_equal(jerr(e.json, "param"), "timeout_minutes");
	assert_non_null(strstr(jerr(e.json, "message"), "latest expiry allowed is 20"));
	print_message("24 h cap: %s\n", jerr(e.json, "message"));
	http_reply_free(&e);
	sbx_req(d.key, "DELETE", id, NULL, NULL, &r);
	http_reply_free(&r);

	/* B holds 15 real minutes of small (22500 of 30000 µ$); 1400 more
	 * (scaled) minutes need more than the 7500 left: 402. */
	create(key_b, NULL, "{}", &r);
	assert_int_equal(r.status, 201);
	snprintf(id, sizeof(id), "%s", jstr(r.json, "id"));
	http_reply_free(&r);
	sbx_req(key_b, "POST", id, "/extend", "{\"timeout_minutes\": 1400}", &e);
	assert_int_equal(e.status, 402);
	assert_string_equal(jerr(e.json, "type"), "insufficient_credit");
	http_reply_free(&e);
	sbx_req(key_b, "DELETE", id, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
}

static void expiry_destroys_the_guest_and_delete_keeps_expired(void **state)
{
	struct http_reply r;
	char id[64], first[1024];
	int before;
	int64_t t0;

	before = count_own_domains(&d);
	create_ok("{\"timeout_minutes\": 2}", id);
	t0 = sbx_mono_ms();
	assert_int_equal(count_own_domains(&d), before + 1);
	/* expires_at = created_at + 4 s; the timer ticks every 200 ms. */
	while (count_own_domains(&d) > before && sbx_mono_ms() - t0 < 4000 + 5000)
		usleep(100000);
	print_message("guest gone %lld ms after create returned (expiry at +4000)\n",
		      (long long)(sbx_mono_ms() - t0));
	assert_int_equal(count_own_domains(&d), before);
	sbx_req(d.key, "GET", id, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "expired");
	assert_string_equal(jstr(r.json, "ended_at"), jstr(r.json, "expires_at"));
	snprintf(first, sizeof(first), "%s", r.body);
	http_reply_free(&r);

	sbx_req(d.key, "POST", id, "/exec", "{\"command\": \"true\"}", &r);
	assert_int_equal(r.status, 410);
	assert_string_equal(jerr(r.json, "type"), "sandbox_not_running");
	http_reply_free(&r);
	sbx_req(d.key, "POST", id, "/extend", "{\"timeout_minutes\": 5}", &r);
	assert_int_equal(r.status, 410);
	http_reply_free(&r);

	/* DELETE of an expired sandbox: 200, status unchanged, same object. */
	sbx_req(d.key, "DELETE", id, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "expired");
	assert_string_equal(r.body, first);
	http_reply_free(&r);
}

struct bg_exec {
	const char *id;
	struct http_reply r;
};

static void *bg_exec_main(void *arg)
{
	struct bg_exec *b = arg;
	char path[160];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", b->id);
	if (http_request(&d, "POST", path, d.key, NULL, "{\"command\": \"sleep 30\"}", 0, &b->r) <
	    0)
		b->r.status = -1;
	return NULL;
}

static void list_is_newest_first_filtered_and_paged(void **state)
{
	struct http_reply r;
	char a[64], b[64], path[256];
	json_object *data;

	create_ok("{}", a);
	create_ok("{}", b);
	assert_int_equal(
	    http_request(&d, "GET", "/v1/sandboxes?status=running", d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_true(json_object_object_get_ex(r.json, "data", &data));
	assert_int_equal(json_object_array_length(data), 2);
	assert_string_equal(jstr(json_object_array_get_idx(data, 0), "id"), b);
	assert_string_equal(jstr(json_object_array_get_idx(data, 1), "id"), a);
	http_reply_free(&r);

	assert_int_equal(http_request(&d, "GET", "/v1/sandboxes?limit=1", d.key, NULL, NULL, 0, &r),
			 0);
	assert_true(json_object_object_get_ex(r.json, "data", &data));
	assert_int_equal(json_object_array_length(data), 1);
	assert_string_equal(jstr(json_object_array_get_idx(data, 0), "id"), b);
	assert_int_equal(jbool(r.json, "has_more"), 1);
	http_reply_free(&r);
	snprintf(path, sizeof(path), "/v1/sandboxes?limit=1&starting_after=%s", b);
	assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
	assert_true(json_object_object_get_ex(r.json, "data", &data));
	assert_string_equal(jstr(json_object_array_get_idx(data, 0), "id"), a);
	http_reply_free(&r);

	/* An exec cut short by DELETE: 410, not 500. */
	struct bg_exec bg = {.id = a};
	pthread_t t;
	pthread_create(&t, NULL, bg_exec_main, &bg);
	sleep(1);
	sbx_req(d.key, "DELETE", a, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	pthread_join(t, NULL);
	print_message("exec cut by DELETE: %d %s\n", bg.r.status, bg.r.body);
	assert_int_equal(bg.r.status, 410);
	assert_string_equal(jerr(bg.r.json, "type"), "sandbox_not_running");
	http_reply_free(&bg.r);
	assert_int_equal(http_request(&d, "GET", "/v1/sandboxes?status=destroyed&limit=100", d.key,
				      NULL, NULL, 0, &r),
			 0);
	assert_true(json_object_object_get_ex(r.json, "data", &data));
	assert_string_equal(jstr(json_object_array_get_idx(data, 0), "id"), a);
	for (size_t i = 0; i < json_object_array_length(data); i++)
		assert_string_equal(jstr(json_object_array_get_idx(data, i), "status"),
				    "destroyed");
	http_reply_free(&r);
	sbx_req(d.key, "DELETE", b, NULL, NULL, &r);
	http_reply_free(&r);
}

static void guest_death_fails_the_sandbox_and_stops_billing(void **state)
{
	struct http_reply r;
	char id[64];
	int64_t cost, t0;
	int before = count_own_domains(&d);

	create_ok("{}", id);
	sbx_req(d.key, "POST", id, "/exec",
		"{\"command\": \"echo b > /proc/sysrq-trigger; reboot -f\"}", &r);
	print_message("exec at guest death: %d %s\n", r.status, r.body);
	assert_true(r.status == 500 || r.status == 410 || r.status == 200);
	http_reply_free(&r);
	t0 = sbx_mono_ms();
	for (;;) {
		sbx_req(d.key, "GET", id, NULL, NULL, &r);
		if (strcmp(jstr(r.json, "status"), "running") != 0 || sbx_mono_ms() - t0 > 10000)
			break;
		http_reply_free(&r);
		usleep(200000);
	}
	print_message("guest death noticed after %lld ms\n", (long long)(sbx_mono_ms() - t0));
	assert_string_equal(jstr(r.json, "status"), "failed");
	assert_non_null(jstr(r.json, "ended_at"));
	cost = jint(r.json, "cost_micro_usd");
	http_reply_free(&r);
	/* The status is recorded first; the domain's destroy (~1-2 s under
	 * TCG) follows. */
	for (int i = 0; i < 50 && count_own_domains(&d) != before; i++)
		usleep(200000);
	assert_int_equal(count_own_domains(&d), before);
	sbx_req(d.key, "POST", id, "/exec", "{\"command\": \"true\"}", &r);
	assert_int_equal(r.status, 410);
	http_reply_free(&r);
	sleep(2);
	sbx_req(d.key, "GET", id, NULL, NULL, &r);
	assert_int_equal(jint(r.json, "cost_micro_usd"), cost);
	http_reply_free(&r);
	/* DELETE of a failed sandbox: 200, still failed. */
	sbx_req(d.key, "DELETE", id, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "failed");
	http_reply_free(&r);
}

/* ------------------------------------------------------------- restarts */

static int log_lines(const char *id)
{
	struct http_reply r;
	int n = 0;

	sbx_req(d.key, "POST", id, "/exec", "{\"command\": \"wc -l < /tmp/log\"}", &r);
	if (r.status != 200 || jint(r.json, "exit_code") != 0)
		fail_msg("exec wc -l: %d %s", r.status, r.body);
	n = atoi(jstr(r.json, "stdout"));
	http_reply_free(&r);
	return n;
}

static void restart_keeps_running_sandboxes(void **state)
{
	struct http_reply r;
	char id[64], short_id[64];
	int n0, n1, n2;

	create_ok("{\"timeout_minutes\": 120}", id);
	sbx_req(d.key, "POST", id, "/exec",
		"{\"command\": \"sh -c 'while :; do date >> /tmp/log; sleep 1; done' "
		">/dev/null 2>&1 &\"}",
		&r);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	sleep(2);
	n0 = log_lines(id);
	assert_true(n0 >= 1);

	/* Graceful stop: the guest survives, the next daemon reattaches. */
	assert_int_equal(daemon_stop(&d), 0);
	assert_int_equal(count_own_qemus(&d), 1);
	sleep(2);
	assert_int_equal(daemon_start(&d), 0);
	sbx_req(d.key, "GET", id, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "running");
	http_reply_free(&r);
	n1 = log_lines(id);
	print_message("log lines: %d before SIGTERM, %d after restart\n", n0, n1);
	assert_true(n1 >= n0 + 2);

	/* A short one that will expire while the daemon is down (created with
	 * a key: the key must survive the restart). */
	struct http_reply first;
	create(d.key, "k-restart", "{\"timeout_minutes\": 2}", &first);
	assert_int_equal(first.status, 201);
	snprintf(short_id, sizeof(short_id), "%s", jstr(first.json, "id"));

	/* kill -9: same, and the short one ends at its expires_at. */
	daemon_kill9(&d);
	sleep(6);
	assert_int_equal(daemon_start(&d), 0);
	sbx_req(d.key, "GET", id, NULL, NULL, &r);
	assert_string_equal(jstr(r.json, "status"), "running");
	http_reply_free(&r);
	n2 = log_lines(id);
	print_message("log lines: %d after kill -9 and restart\n", n2);
	assert_true(n2 >= n1 + 5);

	sbx_req(d.key, "GET", short_id, NULL, NULL, &r);
	assert_string_equal(jstr(r.json, "status"), "expired");
	assert_string_equal(jstr(r.json, "ended_at"), jstr(r.json, "expires_at"));
	http_reply_free(&r);
	assert_int_equal(count_own_domains(&d), 1);

	/* Idempotency keys survive a restart too. */
	create(d.key, "k-restart", "{\"timeout_minutes\": 2}", &r);
	assert_int_equal(r.status, 201);
	assert_true(replayed(&r));
	assert_int_equal(r.body_len, first.body_len);
	assert_memory_equal(r.body, first.body, first.body_len);
	http_reply_free(&r);
	http_reply_free(&first);

	sbx_req(d.key, "DELETE", id, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	assert_int_equal(count_own_domains(&d), 0);
}

/* ----------------------------------------------------------------- labels */

/* The ids of a GET /v1/sandboxes page, joined by spaces. */
static void list_ids(const char *key, const char *query, int want_status, char *out, size_t n)
{
	struct http_reply r;
	char path[256];
	json_object *data;

	snprintf(path, sizeof(path), "/v1/sandboxes%s", query);
	assert_int_equal(http_request(&d, "GET", path, key, NULL, NULL, 0, &r), 0);
	if (r.status != want_status)
		fail_msg("GET %s: %d %s", path, r.status, r.body);
	out[0] = '\0';
	if (want_status == 200) {
		assert_true(json_object_object_get_ex(r.json, "data", &data));
		for (size_t i = 0; i < json_object_array_length(data); i++)
			snprintf(out + strlen(out), n - strlen(out), "%s%s", i ? " " : "",
				 jstr(json_object_array_get_idx(data, i), "id"));
	} else {
		assert_string_equal(jerr(r.json, "param"), "metadata");
	}
	http_reply_free(&r);
}

static const char *meta_of(const struct http_reply *r)
{
	json_object *m;

	assert_true(json_object_object_get_ex(r->json, "metadata", &m));
	return json_object_to_json_string_ext(m, JSON_C_TO_STRING_PLAIN);
}

/* Sum by_size or by_metadata of a usage reply. */
static void usage_sums(json_object *u, const char *field, int64_t *seconds, int64_t *cost,
		       int *groups)
{
	json_object *f;

	*seconds = *cost = 0;
	*groups = 0;
	assert_true(json_object_object_get_ex(u, field, &f));
	if (json_object_is_type(f, json_type_array)) {
		for (size_t i = 0; i < json_object_array_length(f); i++, (*groups)++) {
			*seconds += jint(json_object_array_get_idx(f, i), "seconds");
			*cost += jint(json_object_array_get_idx(f, i), "cost_micro_usd");
		}
		return;
	}
	json_object_object_foreach(f, k, v)
	{
		(void)k;
		*seconds += jint(v, "seconds");
		*cost += jint(v, "cost_micro_usd");
		(*groups)++;
	}
}

/* metadata at create (in the idempotent request), updated, filtering the
 * list, kept across a restart, grouping usage to by_size's totals; the
 * other account sees none of it. */
static void labels_filter_survive_restart_and_group_usage(void **state)
{
	struct http_reply r, first;
	char a[64], b[64], ids[256];
	json_object *g;

	create(d.key, "k-labels", "{\"metadata\": {\"job\": \"4711\", \"team\": \"ml\"}}", &first);
	if (first.status != 201)
		fail_msg("create: %d %s", first.status, first.body);
	snprintf(a, sizeof(a), "%s", jstr(first.json, "id"));
	assert_string_equal(meta_of(&first), "{\"job\":\"4711\",\"team\":\"ml\"}");
	/* the same key: other metadata is another request; the same (in any
	 * order) is a replay */
	create(d.key, "k-labels", "{\"metadata\": {\"job\": \"4712\", \"team\": \"ml\"}}", &r);
	assert_int_equal(r.status, 422);
	assert_string_equal(jerr(r.json, "type"), "idempotency_mismatch");
	http_reply_free(&r);
	create(d.key, "k-labels", "{\"metadata\": {\"team\": \"ml\", \"job\": \"4711\"}}", &r);
	assert_int_equal(r.status, 201);
	assert_true(replayed(&r));
	assert_string_equal(jstr(r.json, "id"), a);
	http_reply_free(&r);
	http_reply_free(&first);
	create_ok("{\"metadata\": {\"job\": \"4712\"}}", b);
	create(d.key, NULL, "{\"metadata\": {\"job\": 4712}}", &r);
	assert_int_equal(r.status, 400);
	assert_string_equal(jerr(r.json, "param"), "metadata");
	http_reply_free(&r);

	/* update: set, remove by "", keep the rest; bad pairs are 400 */
	sbx_req(d.key, "POST", a, NULL, "{\"metadata\": {\"team\": \"\", \"owner\": \"x\"}}", &r);
	if (r.status != 200)
		fail_msg("update: %d %s", r.status, r.body);
	assert_string_equal(meta_of(&r), "{\"job\":\"4711\",\"owner\":\"x\"}");
	http_reply_free(&r);
	sbx_req(d.key, "POST", a, NULL, "{\"metadata\": {\"a b\": \"1\"}}", &r);
	assert_int_equal(r.status, 400);
	assert_string_equal(jerr(r.json, "param"), "metadata");
	http_reply_free(&r);
	/* the other account: 404 on update, nothing in its list */
	sbx_req(key_b, "POST", a, NULL, "{\"metadata\": {\"owner\": \"b\"}}", &r);
	assert_int_equal(r.status, 404);
	assert_string_equal(jerr(r.json, "type"), "not_found");
	http_reply_free(&r);
	list_ids(key_b, "?metadata[job]=4711", 200, ids, sizeof(ids));
	assert_string_equal(ids, "");

	/* the filter: one pair, two (AND), none */
	list_ids(d.key, "?metadata[job]=4711", 200, ids, sizeof(ids));
	assert_string_equal(ids, a);
	list_ids(d.key, "?metadata[job]=4711&metadata[owner]=x", 200, ids, sizeof(ids));
	assert_string_equal(ids, a);
	list_ids(d.key, "?metadata[job]=4711&metadata[owner]=b", 200, ids, sizeof(ids));
	assert_string_equal(ids, "");
	list_ids(d.key, "?status=running&metadata[job]=4712", 200, ids, sizeof(ids));
	assert_string_equal(ids, b);
	list_ids(d.key, "?metadata[a%20b]=1", 400, ids, sizeof(ids));

	/* b ends (settled usage), a keeps running across a restart */
	sbx_req(d.key, "DELETE", b, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(meta_of(&r), "{\"job\":\"4712\"}");
	http_reply_free(&r);
	assert_int_equal(daemon_stop(&d), 0);
	assert_int_equal(daemon_start(&d), 0);
	sbx_req(d.key, "GET", a, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(meta_of(&r), "{\"job\":\"4711\",\"owner\":\"x\"}");
	http_reply_free(&r);
	list_ids(d.key, "?metadata[job]=4711", 200, ids, sizeof(ids));
	assert_string_equal(ids, a);
	list_ids(d.key, "?status=destroyed&metadata[job]=4712", 200, ids, sizeof(ids));
	assert_string_equal(ids, b);

	/* usage by job: the groups add up to by_size exactly */
	assert_int_equal(
	    http_request(&d, "GET", "/v1/usage?group_by=metadata.job", d.key, NULL, NULL, 0, &r),
	    0);
	assert_int_equal(r.status, 200);
	int64_t ss, sc, gs, gc;
	int ns, ng;
	usage_sums(r.json, "by_size", &ss, &sc, &ns);
	usage_sums(r.json, "by_metadata", &gs, &gc, &ng);
	print_message("usage: by_size %lld s %lld µ$, by_metadata %lld s %lld µ$ in %d groups\n",
		      (long long)ss, (long long)sc, (long long)gs, (long long)gc, ng);
	assert_true(ss > 0 && sc > 0);
	assert_int_equal(gs, ss);
	assert_int_equal(gc, sc);
	bool seen_a = false, seen_b = false;
	assert_true(json_object_object_get_ex(r.json, "by_metadata", &g));
	for (size_t i = 0; i < json_object_array_length(g); i++) {
		json_object *e = json_object_array_get_idx(g, i);
		if (jis_null(e, "value")) {
			assert_int_equal(i, 0); /* the unlabelled first */
			continue;
		}
		seen_a |= strcmp(jstr(e, "value"), "4711") == 0 && jint(e, "seconds") > 0;
		seen_b |= strcmp(jstr(e, "value"), "4712") == 0 && jint(e, "seconds") > 0;
	}
	assert_true(seen_a && seen_b);
	http_reply_free(&r);
	assert_int_equal(
	    http_request(&d, "GET", "/v1/usage?group_by=job", d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 400);
	assert_string_equal(jerr(r.json, "param"), "group_by");
	http_reply_free(&r);

	sbx_req(d.key, "DELETE", a, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
}

static void *crash_create_main(void *arg)
{
	struct http_reply *r = arg;

	if (http_request(&d, "POST", "/v1/sandboxes", d.key, "Idempotency-Key: k-crash\r\n", "{}",
			 0, r) < 0)
		r->status = -1;
	return NULL;
}

/* A create cut short by kill -9 is rolled back and its key freed: the
 * retry with the same key creates (not replayed), and one guest remains. */
static void crash_during_create_frees_the_key(void **state)
{
	struct http_reply cut = {0}, r;
	pthread_t t;
	int64_t t0;

	pthread_create(&t, NULL, crash_create_main, &cut);
	/* Wait until the guest is being booted, then kill the daemon. */
	t0 = sbx_mono_ms();
	while (count_own_domains(&d) == 0 && sbx_mono_ms() - t0 < 20000)
		usleep(50000);
	assert_int_equal(count_own_domains(&d), 1);
	daemon_kill9(&d);
	pthread_join(t, NULL);
	assert_int_equal(cut.status, -1);
	assert_int_equal(daemon_start(&d), 0);
	/* Reconcile destroyed the half-created guest. */
	assert_int_equal(count_own_domains(&d), 0);
	create(d.key, "k-crash", "{}", &r);
	assert_int_equal(r.status, 201);
	assert_false(replayed(&r));
	assert_int_equal(count_own_domains(&d), 1);
	char id[64];
	snprintf(id, sizeof(id), "%s", jstr(r.json, "id"));
	http_reply_free(&r);
	sbx_req(d.key, "DELETE", id, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
}

/* After everything above: credits = balance + consumed, available >= 0,
 * every ended or aborted sandbox settled exactly once. */
static void ledger_invariants_hold(void **state)
{
	struct sbx_error err;
	struct store *s;

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
	    cmocka_unit_test(idempotent_replay_is_byte_for_byte),
	    cmocka_unit_test(bad_idempotency_key_is_400),
	    cmocka_unit_test(parallel_creates_with_one_key_make_one_guest),
	    cmocka_unit_test(failed_requests_are_not_remembered),
	    cmocka_unit_test(extend_never_earlier_capped_and_paid),
	    cmocka_unit_test(expiry_destroys_the_guest_and_delete_keeps_expired),
	    cmocka_unit_test(list_is_newest_first_filtered_and_paged),
	    cmocka_unit_test(guest_death_fails_the_sandbox_and_stops_billing),
	    cmocka_unit_test(restart_keeps_running_sandboxes),
	    cmocka_unit_test(labels_filter_survive_restart_and_group_usage),
	    cmocka_unit_test(crash_during_create_frees_the_key),
	    cmocka_unit_test(ledger_invariants_hold),
	};
	if (getenv("SBX_TEST_FILTER"))
		cmocka_set_test_filter(getenv("SBX_TEST_FILTER"));
	return cmocka_run_group_tests(tests, setup, teardown);
}
