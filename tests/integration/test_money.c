/* Money you can trust (issue 4), proven with real guests: per-second
 * charges, DELETE exactly once, failed creates that cost nothing, 402 on
 * exact credit, the real defaults (small, cap 20) with the 21st refused,
 * host capacity 503, published limits and the admin command line.
 *
 * After every scenario the daemon's SQLite file is opened with store_open
 * and store_ledger_check must pass, and GET /v1/usage must satisfy
 * credits = balance + consumed and available = balance - reserved >= 0.
 *
 * Three daemons run one after the other (one per group), each with a fresh
 * state dir: the real defaults, a kernel that is not a kernel, max_guests 1. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "billing/billing.h"
#include "harness.h"
#include "store/store.h"

#define SMALL_PRICE 90000 /* µ$/hour, the default small size */

static struct daemon d;
static int64_t credits_main; /* every credit given to d's main account, µ$ */

/* ------------------------------------------------------------- helpers */

/* A string member that must be there. */
static const char *jstr_must(json_object *o, const char *key)
{
	const char *v = jstr(o, key);

	assert_non_null(v);
	return v ? v : "";
}

static void reset_state_dir(void)
{
	char cmd[400];

	snprintf(cmd, sizeof(cmd), "rm -rf /var/lib/sandboxd-test/%d", (int)getpid());
	run_cmd(cmd);
}

static int group_teardown(void **state)
{
	daemon_stop(&d);
	destroy_own_domains(&d);
	reset_state_dir();
	return 0;
}

/* A second account through the admin CLI; fills key (and id). */
static void admin_account(const char *credit_usd, char key[128], char id[64])
{
	char args[256];
	json_object *o;

	snprintf(args, sizeof(args), "create-account --name extra --credit-usd %s", credit_usd);
	o = daemon_admin(&d, args);
	assert_non_null(o);
	snprintf(key, 128, "%s", jstr_must(o, "api_key"));
	snprintf(id, 64, "%s", jstr_must(o, "account_id"));
	json_object_put(o);
}

static void ledger_ok(void)
{
	struct sbx_error err = {0};
	struct store *s = store_open(d.db, &err);
	int rc;

	assert_non_null(s);
	rc = store_ledger_check(s, NULL, &err);
	if (rc != 0)
		print_message("ledger check: %s\n", err.message);
	assert_int_equal(rc, 0);
	store_close(s);
}

/* The exact row as the store has it (ms timestamps, hold, charge). */
static void store_row(const char *id, struct store_sandbox *row)
{
	struct sbx_error err = {0};
	struct store *s = store_open(d.db, &err);

	assert_non_null(s);
	assert_int_equal(store_sandbox_get(s, NULL, id, row, &err), 0);
	store_close(s);
}

struct usage {
	int64_t balance, reserved, available, consumed, small_cost, small_seconds;
	int running, limit;
};

/* GET /v1/usage and the invariants: credits = balance + consumed,
 * available = balance - reserved >= 0, balance >= 0. */
static struct usage usage_ok(const char *key, int64_t credits)
{
	struct http_reply r;
	struct usage u = {0};
	json_object *bs, *small, *sb;

	assert_int_equal(http_request(&d, "GET", "/v1/usage", key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	u.balance = jint(r.json, "balance_micro_usd");
	u.reserved = jint(r.json, "reserved_micro_usd");
	u.available = jint(r.json, "available_micro_usd");
	u.consumed = jint(r.json, "consumed_micro_usd");
	if (json_object_object_get_ex(r.json, "by_size", &bs) &&
	    json_object_object_get_ex(bs, "small", &small)) {
		u.small_cost = jint(small, "cost_micro_usd");
		u.small_seconds = jint(small, "seconds");
	}
	if (json_object_object_get_ex(r.json, "sandboxes", &sb)) {
		u.running = (int)jint(sb, "running");
		u.limit = (int)jint(sb, "limit");
	}
	http_reply_free(&r);
	assert_int_equal(credits, u.balance + u.consumed);
	assert_int_equal(u.available, u.balance - u.reserved);
	assert_true(u.available >= 0);
	assert_true(u.balance >= 0);
	assert_true(u.reserved >= 0);
	return u;
}

static bool has_header(const struct http_reply *r, const char *name)
{
	char pat[80];

	snprintf(pat, sizeof(pat), "\r\n%s:", name);
	return strcasestr(r->headers, pat) != NULL;
}

static int64_t time_field(json_object *o, const char *key)
{
	int64_t ms = 0;
	const char *s = jstr(o, key);

	assert_non_null(s);
	assert_int_equal(sbx_rfc3339_parse(s, &ms), 0);
	return ms;
}

struct call {
	const char *method;
	char path[128];
	const char *key;
	const char *body;
	struct http_reply r;
	int rc;
	int retries; /* 429 rate_limited answers before r */
};

static void *call_main(void *arg)
{
	struct call *c = arg;

	/* A well-behaved client: past the account's cap of requests in flight
	 * (429 rate_limited, e.g. 4 creates or 8 DELETEs at once by default)
	 * it waits Retry-After and sends again. */
	for (;;) {
		const char *type;

		c->rc = http_request(&d, c->method, c->path, c->key, NULL, c->body, 0, &c->r);
		type = c->rc == 0 ? jerr(c->r.json, "type") : NULL;
		if (c->r.status != 429 || !type || strcmp(type, "rate_limited") != 0)
			break;
		c->retries++;
		http_reply_free(&c->r);
		sleep(1);
	}
	return NULL;
}

/* Run n calls at once, one thread each. */
static void calls_run(struct call *c, size_t n)
{
	pthread_t *t = calloc(n, sizeof(*t));

	assert_non_null(t);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(pthread_create(&t[i], NULL, call_main, &c[i]), 0);
	for (size_t i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	free(t);
}

static int retries(const struct call *c, size_t n)
{
	int sum = 0;

	for (size_t i = 0; i < n; i++)
		sum += c[i].retries;
	return sum;
}

static void create_ok(const char *key, const char *body, char id[64])
{
	struct http_reply r;

	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", key, NULL, body, 0, &r), 0);
	if (r.status != 201)
		print_message("create: %d %s\n", r.status, r.body);
	assert_int_equal(r.status, 201);
	snprintf(id, 64, "%s", jstr_must(r.json, "id"));
	http_reply_free(&r);
}

/* ------------------------------------------------- group 1: the defaults */

static int defaults_setup(void **state)
{
	reset_state_dir();
	daemon_config(&d, "");
	daemon_create_account(&d, "10");
	credits_main = 10 * 1000000;
	return daemon_start(&d) < 0 ? -1 : 0;
}

static void limits_are_public(void **state)
{
	struct http_reply r;
	json_object *sizes, *t;
	bool small_seen = false;

	assert_int_equal(http_request(&d, "GET", "/v1/limits", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_int_equal(jint(r.json, "sandboxes_per_account"), 20);
	assert_true(jint(r.json, "output_cap_bytes") > 0);
	assert_true(jint(r.json, "max_body_bytes") > 0);
	assert_true(json_object_object_get_ex(r.json, "timeout_minutes", &t));
	assert_int_equal(jint(t, "max"), 1440);
	assert_true(json_object_object_get_ex(r.json, "sizes", &sizes));
	assert_int_equal(json_object_array_length(sizes), 3);
	for (size_t i = 0; i < json_object_array_length(sizes); i++) {
		json_object *s = json_object_array_get_idx(sizes, i);

		if (strcmp(jstr(s, "name"), "small") == 0) {
			small_seen = true;
			assert_int_equal(jint(s, "vcpus"), 2);
			assert_int_equal(jint(s, "memory_gib"), 4);
			assert_int_equal(jint(s, "price_micro_usd_per_hour"), SMALL_PRICE);
			assert_string_equal(jstr(s, "price_usd_per_hour"), "0.090000");
		}
	}
	assert_true(small_seen);
	http_reply_free(&r);
}

static void normal_run_is_billed_per_started_second(void **state)
{
	struct usage before = usage_ok(d.key, credits_main), during, after;
	struct store_sandbox row;
	struct http_reply r;
	char id[64], path[128];
	int64_t created, ended, cost, api_cost;

	create_ok(d.key, "{\"timeout_minutes\": 5}", id);
	during = usage_ok(d.key, credits_main);
	/* Cost accrued so far counts as consumed and leaves the reserve. */
	assert_int_equal((during.reserved + during.consumed) - (before.reserved + before.consumed),
			 billing_hold_for_minutes(5, SMALL_PRICE));
	assert_int_equal(during.running, 1);
	usleep(3400 * 1000);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	assert_int_equal(http_request(&d, "DELETE", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "destroyed");
	created = time_field(r.json, "created_at");
	ended = time_field(r.json, "ended_at");
	cost = jint(r.json, "cost_micro_usd");
	http_reply_free(&r);

	/* The API's timestamps have 1 s resolution: within one second's worth. */
	api_cost = billing_cost(ended - created, SMALL_PRICE);
	assert_true(llabs(cost - api_cost) <= SMALL_PRICE / 3600);
	/* The store's ms timestamps give the exact figure. */
	store_row(id, &row);
	assert_int_equal(cost, billing_cost(row.ended_at_ms - row.created_at_ms, SMALL_PRICE));
	assert_int_equal(cost, row.charge_micro);
	assert_true(row.ended_at_ms - row.created_at_ms >= 3400);
	print_message("normal run: lived %.3f s (request->ready %.3f s), charged %lld s = %lld µ$ "
		      "at small (%d µ$/h)\n",
		      (double)(row.ended_at_ms - row.created_at_ms) / 1000.0,
		      (double)(row.created_at_ms - row.requested_at_ms) / 1000.0,
		      (long long)((row.ended_at_ms - row.created_at_ms + 999) / 1000),
		      (long long)cost, SMALL_PRICE);

	after = usage_ok(d.key, credits_main);
	assert_int_equal(after.consumed - before.consumed, cost);
	assert_int_equal(after.reserved, before.reserved);
	assert_int_equal(after.small_cost - before.small_cost, cost);
	assert_int_equal(after.running, 0);
	ledger_ok();
}

static void delete_twice_charges_once(void **state)
{
	struct usage before = usage_ok(d.key, credits_main), after;
	struct http_reply r;
	struct call c[2];
	char id[64], id2[64], path[128], first[2048];
	int64_t cost1, cost2;

	/* Sequential. */
	create_ok(d.key, "{}", id);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	assert_int_equal(http_request(&d, "DELETE", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	snprintf(first, sizeof(first), "%s", r.body);
	cost1 = jint(r.json, "cost_micro_usd");
	http_reply_free(&r);
	sleep(1);
	assert_int_equal(http_request(&d, "DELETE", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, first);
	http_reply_free(&r);

	/* Two in parallel. */
	create_ok(d.key, "{}", id2);
	memset(c, 0, sizeof(c));
	for (int i = 0; i < 2; i++) {
		c[i].method = "DELETE";
		snprintf(c[i].path, sizeof(c[i].path), "/v1/sandboxes/%s", id2);
		c[i].key = d.key;
	}
	calls_run(c, 2);
	assert_int_equal(c[0].rc, 0);
	assert_int_equal(c[1].rc, 0);
	assert_int_equal(c[0].r.status, 200);
	assert_int_equal(c[1].r.status, 200);
	assert_string_equal(c[0].r.body, c[1].r.body);
	assert_string_equal(jstr(c[0].r.json, "status"), "destroyed");
	cost2 = jint(c[0].r.json, "cost_micro_usd");
	http_reply_free(&c[0].r);
	http_reply_free(&c[1].r);

	after = usage_ok(d.key, credits_main);
	assert_int_equal(after.consumed - before.consumed, cost1 + cost2);
	assert_int_equal(after.reserved, before.reserved);
	print_message("delete twice: charges %lld + %lld µ$, consumed grew by %lld µ$\n",
		      (long long)cost1, (long long)cost2,
		      (long long)(after.consumed - before.consumed));
	assert_int_equal(count_own_domains(&d), 0);
	ledger_ok();
}

static void exact_credit_for_two_holds_then_402(void **state)
{
	int64_t hold = billing_hold_for_minutes(1, SMALL_PRICE);
	char usd[32], key[128], id[64], need[40];
	struct call c[3];
	struct usage u;
	int ok = 0, refused = 0;

	billing_format_usd(2 * hold, usd);
	admin_account(usd, key, id);
	memset(c, 0, sizeof(c));
	for (int i = 0; i < 3; i++) {
		c[i].method = "POST";
		snprintf(c[i].path, sizeof(c[i].path), "/v1/sandboxes");
		c[i].key = key;
		c[i].body = "{\"size\": \"small\", \"timeout_minutes\": 1}";
	}
	calls_run(c, 3);
	billing_format_usd(hold, need);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(c[i].rc, 0);
		if (c[i].r.status == 201) {
			ok++;
		} else {
			const char *msg = jerr(c[i].r.json, "message");

			print_message("third create: %d %s\n", c[i].r.status, c[i].r.body);
			assert_int_equal(c[i].r.status, 402);
			assert_string_equal(jerr(c[i].r.json, "type"), "insufficient_credit");
			assert_non_null(msg);
			assert_non_null(strstr(msg, need));	   /* needed */
			assert_non_null(strstr(msg, "available")); /* and available */
			assert_non_null(strstr(msg, "$0.000000"));
			refused++;
		}
	}
	assert_int_equal(ok, 2);
	assert_int_equal(refused, 1);
	u = usage_ok(key, 2 * hold);
	assert_int_equal(u.available, 0);
	assert_int_equal(u.running, 2);
	ledger_ok();
	for (int i = 0; i < 3; i++) {
		if (c[i].r.status == 201) {
			struct http_reply r;
			char path[128];

			snprintf(path, sizeof(path), "/v1/sandboxes/%s", jstr(c[i].r.json, "id"));
			assert_int_equal(http_request(&d, "DELETE", path, key, NULL, NULL, 0, &r),
					 0);
			assert_int_equal(r.status, 200);
			http_reply_free(&r);
		}
		http_reply_free(&c[i].r);
	}
	u = usage_ok(key, 2 * hold);
	assert_int_equal(u.reserved, 0);
	assert_true(u.consumed > 0 && u.consumed <= 2 * hold);
	print_message(
	    "402: credit %s = 2 holds of %lld µ$; 2 created, 1 refused; consumed %lld µ$\n", usd,
	    (long long)hold, (long long)u.consumed);
	ledger_ok();
}

static void admin_cli_end_to_end(void **state)
{
	char key[128], id[64], args[256], new_key[128], key_id[64];
	struct http_reply r;
	json_object *o;
	bool seen_main = false, seen_new = false;

	admin_account("0", key, id);
	/* add-credit */
	snprintf(args, sizeof(args), "add-credit %s --credit-usd 5", id);
	o = daemon_admin(&d, args);
	assert_non_null(o);
	assert_string_equal(jstr(o, "id"), id);
	assert_int_equal(jint(o, "balance_micro_usd"), 5000000);
	json_object_put(o);
	(void)usage_ok(key, 5000000);
	/* add-credit to a missing account fails (no JSON on stdout) */
	o = daemon_admin(&d, "add-credit acct_000000000000000000000000 --credit-usd 5");
	assert_null(o);

	/* create-key: works at once on the running daemon */
	snprintf(args, sizeof(args), "create-key %s", id);
	o = daemon_admin(&d, args);
	assert_non_null(o);
	snprintf(new_key, sizeof(new_key), "%s", jstr_must(o, "api_key"));
	snprintf(key_id, sizeof(key_id), "%s", jstr_must(o, "key_id"));
	assert_true(strncmp(new_key, "aas_sk_", 7) == 0);
	assert_true(strncmp(key_id, "key_", 4) == 0);
	json_object_put(o);
	(void)usage_ok(new_key, 5000000);

	/* revoke-key: that key gets 401 at once, the other key still works */
	snprintf(args, sizeof(args), "revoke-key %s", key_id);
	o = daemon_admin(&d, args);
	assert_non_null(o);
	json_object_put(o);
	assert_int_equal(http_request(&d, "GET", "/v1/usage", new_key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 401);
	assert_string_equal(jerr(r.json, "type"), "authentication_error");
	http_reply_free(&r);
	(void)usage_ok(key, 5000000);

	/* list-accounts */
	o = daemon_admin(&d, "list-accounts");
	assert_non_null(o);
	assert_true(json_object_is_type(o, json_type_array));
	for (size_t i = 0; i < json_object_array_length(o); i++) {
		json_object *a = json_object_array_get_idx(o, i);

		if (strcmp(jstr(a, "id"), d.account_id) == 0)
			seen_main = true;
		if (strcmp(jstr(a, "id"), id) == 0) {
			seen_new = true;
			assert_int_equal(jint(a, "balance_micro_usd"), 5000000);
		}
	}
	assert_true(seen_main && seen_new);
	json_object_put(o);
	ledger_ok();
}

#define N_CREATES 21

static int64_t probe_ms;

/* While the creates run: how long does a plain GET /v1/limits take? */
static void *probe_main(void *arg)
{
	struct http_reply r;
	int64_t t0;

	usleep(2000 * 1000);
	t0 = sbx_mono_ms();
	if (http_request(&d, "GET", "/v1/limits", NULL, NULL, NULL, 0, &r) == 0)
		http_reply_free(&r);
	probe_ms = sbx_mono_ms() - t0;
	return NULL;
}

static void real_defaults_twenty_guests_and_429(void **state)
{
	struct call c[N_CREATES], del[N_CREATES];
	int created = 0, refused = 0, n_del = 0;
	int64_t t0 = sbx_mono_ms(), t_created, t_deleted;
	struct usage before = usage_ok(d.key, credits_main), u;
	pthread_t probe;

	memset(c, 0, sizeof(c));
	memset(del, 0, sizeof(del));
	for (int i = 0; i < N_CREATES; i++) {
		c[i].method = "POST";
		snprintf(c[i].path, sizeof(c[i].path), "/v1/sandboxes");
		c[i].key = d.key;
		c[i].body = "{\"timeout_minutes\": 5}";
	}
	assert_int_equal(pthread_create(&probe, NULL, probe_main, NULL), 0);
	calls_run(c, N_CREATES);
	t_created = sbx_mono_ms() - t0;
	pthread_join(probe, NULL);
	print_message("GET /v1/limits sent 2 s into the creates took %lld ms\n",
		      (long long)probe_ms);
	for (int i = 0; i < N_CREATES; i++) {
		assert_int_equal(c[i].rc, 0);
		if (c[i].r.status == 201) {
			created++;
			del[n_del].method = "DELETE";
			snprintf(del[n_del].path, sizeof(del[n_del].path), "/v1/sandboxes/%s",
				 jstr(c[i].r.json, "id"));
			del[n_del].key = d.key;
			n_del++;
		} else if (c[i].r.status == 429) {
			print_message("21st create: %d %s\n", c[i].r.status, c[i].r.body);
			assert_string_equal(jerr(c[i].r.json, "type"), "concurrency_limit");
			assert_non_null(strstr(jerr(c[i].r.json, "message"), "20"));
			assert_true(has_header(&c[i].r, "Retry-After"));
			refused++;
		} else {
			print_message("unexpected create reply: %d %s\n", c[i].r.status,
				      c[i].r.body);
		}
		http_reply_free(&c[i].r);
	}
	print_message("21 parallel creates: %d created, %d refused (429) in %.1f s, %d "
		      "rate_limited retries\n",
		      created, refused, (double)t_created / 1000.0, retries(c, N_CREATES));
	assert_int_equal(created, 20);
	assert_int_equal(refused, 1);
	assert_int_equal(count_own_domains(&d), 20);
	assert_int_equal(count_own_qemus(&d), 20);
	u = usage_ok(d.key, credits_main);
	assert_int_equal(u.running, 20);
	assert_int_equal(u.limit, 20);
	/* Accrued cost so far counts as consumed and leaves the reserve. */
	assert_int_equal(u.reserved + (u.consumed - before.consumed),
			 20 * billing_hold_for_minutes(5, SMALL_PRICE));
	ledger_ok();

	t0 = sbx_mono_ms();
	calls_run(del, (size_t)n_del);
	t_deleted = sbx_mono_ms() - t0;
	for (int i = 0; i < n_del; i++) {
		assert_int_equal(del[i].rc, 0);
		assert_int_equal(del[i].r.status, 200);
		http_reply_free(&del[i].r);
	}
	print_message("20 parallel deletes in %.1f s, %d rate_limited retries\n",
		      (double)t_deleted / 1000.0, retries(del, (size_t)n_del));
	assert_int_equal(count_own_domains(&d), 0);
	u = usage_ok(d.key, credits_main);
	assert_int_equal(u.running, 0);
	assert_int_equal(u.reserved, 0);
	ledger_ok();
}

/* ------------------------------------------ group 2: a guest that never boots */

static int badkernel_setup(void **state)
{
	char path[400];
	FILE *f;

	reset_state_dir();
	daemon_config(&d, "\"boot_timeout_ms\": 5000");
	/* The kernel path exists but is an empty file, not a kernel. */
	snprintf(path, sizeof(path), "%s/images/vmlinux", d.state_dir);
	f = fopen(path, "w");
	if (!f)
		return -1;
	fclose(f);
	daemon_create_account(&d, "1");
	credits_main = 1000000;
	return daemon_start(&d) < 0 ? -1 : 0;
}

static void failed_create_leaves_no_hold_and_no_charge(void **state)
{
	struct http_reply r;
	struct usage u;
	int64_t t0 = sbx_mono_ms();

	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", d.key, NULL, "{}", 0, &r), 0);
	print_message("create with a non-kernel: %d in %lld ms: %s\n", r.status,
		      (long long)(sbx_mono_ms() - t0), r.body);
	assert_true(r.status == 500 || r.status == 503);
	assert_non_null(jerr(r.json, "type"));
	http_reply_free(&r);

	u = usage_ok(d.key, credits_main);
	assert_int_equal(u.reserved, 0);
	assert_int_equal(u.consumed, 0);
	assert_int_equal(u.balance, credits_main);
	assert_int_equal(u.running, 0);
	assert_int_equal(count_own_domains(&d), 0);

	/* Nothing visible either. */
	assert_int_equal(http_request(&d, "GET", "/v1/sandboxes", d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	json_object *data;
	assert_true(json_object_object_get_ex(r.json, "data", &data));
	assert_int_equal(json_object_array_length(data), 0);
	http_reply_free(&r);
	ledger_ok();
}

/* The kernel boots but its /init never speaks the protocol: the HELLO
 * deadline (boot_timeout_ms 5000) passes. */
static void guest_that_never_says_hello_costs_nothing(void **state)
{
	char cmd[1400];
	struct http_reply r;
	struct usage u;
	int64_t t0;

	snprintf(
	    cmd, sizeof(cmd),
	    "set -e; t=$(mktemp -d); mkdir -p $t/bin; cp /bin/busybox $t/bin/busybox; "
	    "printf '#!/bin/busybox sh\\nexec /bin/busybox sleep 3600\\n' > $t/init; "
	    "chmod 755 $t/init; (cd $t && find . | cpio -o -H newc 2>/dev/null | gzip) > "
	    "%s/images/initramfs.cpio.gz; rm -rf $t; install -m 0644 %s/vmlinux %s/images/vmlinux",
	    d.state_dir,
	    getenv("SBX_TEST_IMAGE_DIR") ? getenv("SBX_TEST_IMAGE_DIR") : "build/images/tiny",
	    d.state_dir);
	assert_int_equal(run_cmd(cmd), 0);

	t0 = sbx_mono_ms();
	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", d.key, NULL, "{}", 0, &r), 0);
	print_message("create with a silent guest: %d in %lld ms: %s\n", r.status,
		      (long long)(sbx_mono_ms() - t0), r.body);
	/* The node could not run it: 500 sandbox_error (503 is for a full
	 * host). */
	assert_int_equal(r.status, 500);
	assert_string_equal(jerr(r.json, "type"), "sandbox_error");
	assert_true(sbx_mono_ms() - t0 >= 5000);
	http_reply_free(&r);
	u = usage_ok(d.key, credits_main);
	assert_int_equal(u.reserved, 0);
	assert_int_equal(u.consumed, 0);
	assert_int_equal(u.running, 0);
	assert_int_equal(count_own_domains(&d), 0);
	assert_int_equal(count_own_qemus(&d), 0);
	ledger_ok();
}

/* ---------------------------------------------- group 3: host capacity 1 */

static int oneguest_setup(void **state)
{
	reset_state_dir();
	daemon_config(&d, "\"max_guests\": 1");
	daemon_create_account(&d, "1");
	credits_main = 1000000;
	return daemon_start(&d) < 0 ? -1 : 0;
}

static void host_full_is_503_without_a_hold(void **state)
{
	int64_t hold = billing_hold_for_minutes(5, SMALL_PRICE);
	struct http_reply r;
	struct usage u;
	char id[64], path[128];

	create_ok(d.key, "{\"timeout_minutes\": 5}", id);
	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", d.key, NULL,
				      "{\"timeout_minutes\": 5}", 0, &r),
			 0);
	print_message("second create on a 1-guest host: %d %s\n", r.status, r.body);
	assert_int_equal(r.status, 503);
	assert_string_equal(jerr(r.json, "type"), "service_unavailable");
	assert_true(has_header(&r, "Retry-After"));
	http_reply_free(&r);
	u = usage_ok(d.key, credits_main);
	/* Only the running sandbox's hold (accrued cost moved to consumed). */
	assert_int_equal(u.reserved + u.consumed, hold);
	assert_int_equal(u.running, 1);
	assert_int_equal(count_own_domains(&d), 1);
	ledger_ok();

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	assert_int_equal(http_request(&d, "DELETE", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	u = usage_ok(d.key, credits_main);
	assert_int_equal(u.reserved, 0);
	assert_int_equal(count_own_domains(&d), 0);
	ledger_ok();
}

int main(void)
{
	const struct CMUnitTest defaults[] = {
	    cmocka_unit_test(limits_are_public),
	    cmocka_unit_test(normal_run_is_billed_per_started_second),
	    cmocka_unit_test(delete_twice_charges_once),
	    cmocka_unit_test(exact_credit_for_two_holds_then_402),
	    cmocka_unit_test(admin_cli_end_to_end),
	    cmocka_unit_test(real_defaults_twenty_guests_and_429),
	};
	const struct CMUnitTest badkernel[] = {
	    cmocka_unit_test(failed_create_leaves_no_hold_and_no_charge),
	    cmocka_unit_test(guest_that_never_says_hello_costs_nothing),
	};
	const struct CMUnitTest oneguest[] = {
	    cmocka_unit_test(host_full_is_503_without_a_hold),
	};
	int fails = 0;

	fails += cmocka_run_group_tests_name("money: real defaults", defaults, defaults_setup,
					     group_teardown);
	fails += cmocka_run_group_tests_name("money: guest never boots", badkernel, badkernel_setup,
					     group_teardown);
	fails += cmocka_run_group_tests_name("money: host capacity", oneguest, oneguest_setup,
					     group_teardown);
	return fails;
}
