/* store/: real SQLite files in a mkdtemp dir, no mocks. After every scenario
 * the ledger invariants are checked twice: by store_ledger_check and by an
 * independent walk over the raw ledger rows through a second connection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "billing/billing.h"
#include "store/store.h"
#include "util/util.h"

#include "store_fx.h"

#define SMALL_PRICE 90000 /* µ$/hour */
#define HOLD_15M    22500 /* 15 min of small */

static int fx_setup(void **state)
{
	return fx_open(state, "store", 1000000);
}

/* ------------------------------------------- independent invariant check */

struct acc_sum {
	char id[STORE_ID_MAX];
	int64_t credits, holds, releases, charges;
};
struct sbx_sum {
	char id[STORE_ID_MAX];
	int64_t holds, releases, charges;
	int n_charges, n_releases;
};

/* Walk every ledger row through a second connection and sum in C. */
static void assert_invariants(struct fx *f)
{
	struct sbx_error err = {0};
	int rc = store_ledger_check(f->s, NULL, &err);
	if (rc != 0)
		fail_msg("store_ledger_check: %s", err.message);

	sqlite3 *db;
	assert_int_equal(sqlite3_open_v2(f->path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	static struct acc_sum accs[64];
	static struct sbx_sum sbxs[512];
	size_t na = 0, ns = 0;
	memset(accs, 0, sizeof accs);
	memset(sbxs, 0, sizeof sbxs);
	sqlite3_stmt *q;
	assert_int_equal(sqlite3_prepare_v2(db,
					    "SELECT account_id, sandbox_id, kind, amount_micro"
					    " FROM ledger ORDER BY seq",
					    -1, &q, NULL),
			 SQLITE_OK);
	while (sqlite3_step(q) == SQLITE_ROW) {
		const char *acc = (const char *)sqlite3_column_text(q, 0);
		const char *sbx = (const char *)sqlite3_column_text(q, 1);
		const char *kind = (const char *)sqlite3_column_text(q, 2);
		int64_t amt = sqlite3_column_int64(q, 3);
		assert_true(amt >= 0);
		size_t i;
		for (i = 0; i < na && strcmp(accs[i].id, acc) != 0; i++)
			;
		if (i == na) {
			assert_true(na < 64);
			snprintf(accs[na++].id, STORE_ID_MAX, "%s", acc);
		}
		struct sbx_sum *ss = NULL;
		if (sbx) {
			size_t j;
			for (j = 0; j < ns && strcmp(sbxs[j].id, sbx) != 0; j++)
				;
			if (j == ns) {
				assert_true(ns < 512);
				snprintf(sbxs[ns++].id, STORE_ID_MAX, "%s", sbx);
			}
			ss = &sbxs[j];
		}
		if (strcmp(kind, "credit") == 0) {
			assert_null(sbx);
			accs[i].credits += amt;
		} else {
			assert_non_null(ss);
			if (strcmp(kind, "hold") == 0) {
				accs[i].holds += amt;
				ss->holds += amt;
			} else if (strcmp(kind, "release") == 0) {
				accs[i].releases += amt;
				ss->releases += amt;
				ss->n_releases++;
			} else if (strcmp(kind, "charge") == 0) {
				accs[i].charges += amt;
				ss->charges += amt;
				ss->n_charges++;
			} else {
				fail_msg("unknown kind %s", kind);
			}
		}
	}
	sqlite3_finalize(q);

	for (size_t i = 0; i < na; i++) {
		struct store_balance b;
		assert_int_equal(store_balance_get(f->s, accs[i].id, &b, &err), 0);
		int64_t balance = accs[i].credits - accs[i].charges;
		int64_t reserved = accs[i].holds - accs[i].releases - accs[i].charges;
		/* credits = balance + consumed */
		assert_int_equal(b.credits_micro, accs[i].credits);
		assert_int_equal(b.consumed_micro, accs[i].charges);
		assert_int_equal(b.credits_micro, b.balance_micro + b.consumed_micro);
		assert_int_equal(b.balance_micro, balance);
		assert_int_equal(b.reserved_micro, reserved);
		/* available = balance - reserved >= 0 */
		assert_int_equal(b.available_micro, balance - reserved);
		assert_true(b.available_micro >= 0);
		assert_true(reserved >= 0);
	}

	/* Every sandbox: settled exactly once when ended, untouched while live. */
	assert_int_equal(sqlite3_prepare_v2(db,
					    "SELECT id, status, hold_micro, charge_micro"
					    " FROM sandboxes",
					    -1, &q, NULL),
			 SQLITE_OK);
	while (sqlite3_step(q) == SQLITE_ROW) {
		const char *id = (const char *)sqlite3_column_text(q, 0);
		const char *st = (const char *)sqlite3_column_text(q, 1);
		int64_t hold = sqlite3_column_int64(q, 2), charge = sqlite3_column_int64(q, 3);
		struct sbx_sum zero = {0}, *ss = &zero;
		for (size_t j = 0; j < ns; j++)
			if (strcmp(sbxs[j].id, id) == 0)
				ss = &sbxs[j];
		assert_int_equal(ss->holds, hold);
		assert_int_equal(ss->charges, charge);
		assert_true(ss->n_charges <= 1);
		assert_true(ss->n_releases <= 1);
		if (strcmp(st, "creating") == 0 || strcmp(st, "running") == 0) {
			assert_int_equal(ss->n_charges + ss->n_releases, 0);
		} else {
			assert_int_equal(ss->charges + ss->releases, ss->holds);
			assert_true(charge <= hold);
		}
		if (strcmp(st, "aborted") == 0)
			assert_int_equal(ss->n_charges, 0);
	}
	sqlite3_finalize(q);
	sqlite3_close(db);
}

/* ------------------------------------------------------------- helpers */

static void new_row(struct store_sandbox *r, const char *account_id, int64_t requested_at)
{
	memset(r, 0, sizeof *r);
	snprintf(r->account_id, sizeof r->account_id, "%s", account_id);
	snprintf(r->size, sizeof r->size, "small");
	r->timeout_minutes = 15;
	r->price_micro_per_hour = SMALL_PRICE;
	r->requested_at_ms = requested_at;
}

/* Reserve and activate a small 15-minute sandbox created at t. */
static void make_running(struct fx *f, const char *account_id, int64_t t, struct store_sandbox *r)
{
	struct sbx_error err = {0};
	new_row(r, account_id, t);
	assert_int_equal(store_sandbox_reserve(f->s, r, HOLD_15M, 20, &err), 0);
	assert_int_equal(r->status, STORE_CREATING);
	assert_int_equal(strncmp(r->id, "sbx_", 4), 0);
	assert_int_equal(strlen(r->id), 4 + 24);
	assert_int_equal(
	    store_sandbox_activate(f->s, r->id, r->id, t + 3000, t + 3000 + 15 * 60000, &err), 0);
}

static int64_t available(struct fx *f, const char *account_id)
{
	struct sbx_error err = {0};
	struct store_balance b;
	assert_int_equal(store_balance_get(f->s, account_id, &b, &err), 0);
	return b.available_micro;
}

/* --------------------------------------------------------------- tests */

static void test_open_twice_migrates_once(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	store_close(f->s);
	f->s = store_open(f->path, &err);
	assert_non_null(f->s);
	/* Still two accounts, same schema version, WAL on. */
	struct store_account *accts = NULL;
	size_t n = 0;
	assert_int_equal(store_account_list(f->s, &accts, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_string_equal(accts[0].name, "alice");
	assert_string_equal(accts[1].name, "bob");
	free(accts);

	sqlite3 *db;
	sqlite3_stmt *q;
	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &q, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(q, 0), 15);
	sqlite3_finalize(q);
	assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &q, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(q, 0), "wal");
	sqlite3_finalize(q);
	sqlite3_close(db);
	assert_invariants(f);
}

static void test_accounts_and_keys(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	struct store_account got;
	assert_int_equal(store_account_get(f->s, f->a.id, &got, &err), 0);
	assert_string_equal(got.name, "alice");
	assert_int_equal(strncmp(got.id, "acct_", 5), 0);
	assert_int_equal(store_account_get(f->s, "acct_nope", &got, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_int_equal(store_account_create(f->s, "", 0, &got, &err), -1);
	assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
	assert_int_equal(store_account_create(f->s, "neg", -1, &got, &err), -1);
	assert_int_equal(err.code, SBX_E_INVALID_REQUEST);

	/* credit */
	assert_int_equal(store_credit_add(f->s, f->a.id, 500, &err), 0);
	assert_int_equal(available(f, f->a.id), 1000500);
	assert_int_equal(store_credit_add(f->s, f->a.id, 0, &err), -1);
	assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
	assert_int_equal(store_credit_add(f->s, "acct_nope", 5, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);

	/* keys */
	const char *secret = "aas_sk_0123456789abcdef";
	char digest[65], other[65];
	sbx_sha256_hex(secret, strlen(secret), digest);
	sbx_sha256_hex("aas_sk_wrong", 12, other);
	struct store_key k = {0};
	snprintf(k.id, sizeof k.id, "key_000000000000000000000001");
	snprintf(k.account_id, sizeof k.account_id, "%s", f->a.id);
	snprintf(k.prefix, sizeof k.prefix, "aas_sk_0123");
	k.created_at_ms = 1000;
	snprintf(k.scopes, sizeof k.scopes, "sandboxes keys"); /* inserted as given */
	assert_int_equal(store_key_insert(f->s, &k, digest, &err), 0);
	/* Same digest twice is refused (UNIQUE). */
	snprintf(k.id, sizeof k.id, "key_000000000000000000000002");
	assert_int_equal(store_key_insert(f->s, &k, digest, &err), -1);
	k.created_at_ms = 2000;
	assert_int_equal(store_key_insert(f->s, &k, other, &err), 0);
	assert_int_equal(store_key_insert(f->s, &k, "not-hex", &err), -1);

	struct store_key found;
	assert_int_equal(store_key_find(f->s, digest, &found, &err), 0);
	assert_string_equal(found.id, "key_000000000000000000000001");
	assert_string_equal(found.account_id, f->a.id);
	assert_string_equal(found.prefix, "aas_sk_0123");
	/* The same lookup returns the key's scopes (authentication reads
	 * them once per request): as inserted, then what was set. */
	assert_string_equal(found.scopes, "sandboxes keys");
	assert_int_equal(store_key_scopes_set(f->s, found.id, "", &err), 0);
	assert_int_equal(store_key_find(f->s, digest, &found, &err), 0);
	assert_string_equal(found.scopes, "");
	assert_int_equal(store_key_scopes_set(f->s, found.id, "sandboxes", &err), 0);
	char unknown[65];
	sbx_sha256_hex("nobody", 6, unknown);
	assert_int_equal(store_key_find(f->s, unknown, &found, &err), -1);
	assert_int_equal(err.code, SBX_E_AUTHENTICATION);
	assert_int_equal(store_key_find(f->s, "", &found, &err), -1);
	assert_int_equal(err.code, SBX_E_AUTHENTICATION);

	/* Bob cannot revoke Alice's key; the admin (NULL) can. */
	assert_int_equal(store_key_revoke(f->s, f->b.id, "key_000000000000000000000001", &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_int_equal(store_key_find(f->s, digest, &found, &err), 0);
	assert_int_equal(store_key_revoke(f->s, NULL, "key_000000000000000000000001", &err), 0);
	assert_int_equal(store_key_find(f->s, digest, &found, &err), -1);
	assert_int_equal(err.code, SBX_E_AUTHENTICATION);
	assert_int_equal(sbx_code_status(err.code), 401);
	assert_int_equal(store_key_revoke(f->s, NULL, "key_nope", &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);

	struct store_key *keys = NULL;
	size_t n = 0;
	assert_int_equal(store_key_list(f->s, f->a.id, &keys, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_string_equal(keys[0].id, "key_000000000000000000000002"); /* newest first */
	assert_int_equal(keys[0].revoked_at_ms, 0);
	assert_true(keys[1].revoked_at_ms > 0);
	free(keys);
	assert_int_equal(store_key_list(f->s, f->b.id, &keys, &n, &err), 0);
	assert_int_equal(n, 0);
	free(keys);
	assert_invariants(f);
}

static void test_normal_run(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	struct store_sandbox r, out;
	int64_t t = 1700000000000;
	make_running(f, f->a.id, t, &r);
	assert_int_equal(available(f, f->a.id), 1000000 - HOLD_15M);
	assert_invariants(f);

	int n;
	assert_int_equal(store_sandbox_count_live(f->s, f->a.id, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_int_equal(store_sandbox_touch(f->s, r.id, t + 10000, &err), 0);
	assert_int_equal(store_sandbox_get(f->s, f->a.id, r.id, &out, &err), 0);
	assert_int_equal(out.status, STORE_RUNNING);
	assert_int_equal(out.last_seen_at_ms, t + 10000);
	assert_string_equal(out.domain, r.id);

	/* 300.2 s after created_at -> 301 s -> 7525 µ$ */
	assert_int_equal(store_sandbox_end(f->s, r.id, STORE_DESTROYED, t + 3000 + 300200,
					   billing_charge_for_row, &out, &err),
			 1);
	assert_int_equal(out.status, STORE_DESTROYED);
	assert_int_equal(out.charge_micro, 7525);
	assert_int_equal(out.ended_at_ms, t + 3000 + 300200);
	struct store_balance b;
	assert_int_equal(store_balance_get(f->s, f->a.id, &b, &err), 0);
	assert_int_equal(b.consumed_micro, 7525);
	assert_int_equal(b.balance_micro, 1000000 - 7525);
	assert_int_equal(b.reserved_micro, 0);
	assert_int_equal(b.available_micro, 1000000 - 7525);
	assert_int_equal(store_sandbox_count_live(f->s, f->a.id, &n, &err), 0);
	assert_int_equal(n, 0);
	assert_int_equal(store_sandbox_touch(f->s, r.id, t + 99999, &err), -1);
	assert_invariants(f);
}

static int64_t charge_everything(const struct store_sandbox *row, int64_t ended_at_ms)
{
	(void)ended_at_ms;
	return row->hold_micro * 10; /* a buggy pricer: store must cap it */
}

static void test_end_twice_and_cap(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	struct store_sandbox r, out;
	int64_t t = 1700000000000;
	make_running(f, f->a.id, t, &r);
	assert_int_equal(store_sandbox_end(f->s, r.id, STORE_EXPIRED, t + 10 * 3600000,
					   charge_everything, &out, &err),
			 1);
	assert_int_equal(out.charge_micro, HOLD_15M); /* capped at the hold */
	assert_int_equal(out.status, STORE_EXPIRED);
	/* Second end: 0, nothing written, final row returned, status unchanged. */
	memset(&out, 0, sizeof out);
	assert_int_equal(store_sandbox_end(f->s, r.id, STORE_DESTROYED, t + 20 * 3600000,
					   billing_charge_for_row, &out, &err),
			 0);
	assert_int_equal(out.status, STORE_EXPIRED);
	assert_int_equal(out.charge_micro, HOLD_15M);
	struct store_balance b;
	assert_int_equal(store_balance_get(f->s, f->a.id, &b, &err), 0);
	assert_int_equal(b.consumed_micro, HOLD_15M);
	assert_int_equal(b.reserved_micro, 0);
	/* Bad status and unknown ids are refused. */
	assert_int_equal(
	    store_sandbox_end(f->s, r.id, STORE_RUNNING, t, billing_charge_for_row, &out, &err),
	    -1);
	assert_int_equal(store_sandbox_end(f->s, "sbx_nope", STORE_DESTROYED, t,
					   billing_charge_for_row, &out, &err),
			 -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_invariants(f);
}

static void test_abort(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	struct store_sandbox r, out;
	new_row(&r, f->a.id, 1000);
	assert_int_equal(store_sandbox_reserve(f->s, &r, HOLD_15M, 20, &err), 0);
	assert_int_equal(available(f, f->a.id), 1000000 - HOLD_15M);
	assert_invariants(f);
	/* end() on a CREATING row is abort's business: 0, nothing written. */
	assert_int_equal(store_sandbox_end(f->s, r.id, STORE_DESTROYED, 5000,
					   billing_charge_for_row, &out, &err),
			 0);
	assert_int_equal(out.status, STORE_CREATING);
	struct store_sandbox *live = NULL;
	size_t n = 0;
	assert_int_equal(store_sandbox_list_live(f->s, &live, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_string_equal(live[0].id, r.id);
	free(live);

	assert_int_equal(store_sandbox_abort(f->s, r.id, &err), 1);
	assert_int_equal(store_sandbox_abort(f->s, r.id, &err), 0);
	assert_int_equal(available(f, f->a.id), 1000000);
	assert_int_equal(store_sandbox_get(f->s, f->a.id, r.id, &out, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_int_equal(store_sandbox_activate(f->s, r.id, "d", 2000, 3000, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_int_equal(store_sandbox_list_live(f->s, &live, &n, &err), 0);
	assert_int_equal(n, 0);
	free(live);
	/* Abort of a running sandbox does nothing. */
	make_running(f, f->a.id, 2000, &r);
	assert_int_equal(store_sandbox_abort(f->s, r.id, &err), 0);
	assert_int_equal(store_sandbox_get(f->s, f->a.id, r.id, &out, &err), 0);
	assert_int_equal(out.status, STORE_RUNNING);
	assert_invariants(f);
}

static void test_reserve_refusals(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	struct store_sandbox r;
	new_row(&r, f->a.id, 1000);
	assert_int_equal(store_sandbox_reserve(f->s, &r, 1000001, 20, &err), -1);
	assert_int_equal(err.code, SBX_E_INSUFFICIENT_CREDIT);
	assert_non_null(strstr(err.message, "$1.000001 reserved"));
	assert_non_null(strstr(err.message, "$1.000000 is available"));
	new_row(&r, f->a.id, 1000);
	assert_int_equal(store_sandbox_reserve(f->s, &r, 10, 0, &err), -1);
	assert_int_equal(err.code, SBX_E_CONCURRENCY_LIMIT);
	assert_int_equal(err.retry_after_s, 5);
	assert_non_null(strstr(err.message, "limit of 0 live sandboxes"));
	new_row(&r, "acct_nope", 1000);
	assert_int_equal(store_sandbox_reserve(f->s, &r, 10, 20, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	/* A failing insert (duplicate id) rolls the whole transaction back. */
	struct store_sandbox first, dup;
	new_row(&first, f->a.id, 1000);
	assert_int_equal(store_sandbox_reserve(f->s, &first, 100, 20, &err), 0);
	new_row(&dup, f->a.id, 1000);
	snprintf(dup.id, sizeof dup.id, "%s", first.id);
	assert_int_equal(store_sandbox_reserve(f->s, &dup, 200, 20, &err), -1);
	assert_int_equal(err.code, SBX_E_INTERNAL);
	assert_int_equal(available(f, f->a.id), 1000000 - 100);
	assert_int_equal(store_sandbox_abort(f->s, first.id, &err), 1);
	assert_invariants(f);
	/* Exactly the available amount is fine. */
	new_row(&r, f->a.id, 1000);
	assert_int_equal(store_sandbox_reserve(f->s, &r, 1000000, 20, &err), 0);
	assert_int_equal(available(f, f->a.id), 0);
	assert_invariants(f);
}

struct race {
	struct fx *f;
	bool own_connection; /* each thread its own store: BEGIN IMMEDIATE decides */
	int max_live;
	int64_t hold;
	int ok, no_credit, cap, other;
	pthread_mutex_t lock;
};

static void *race_worker(void *arg)
{
	struct race *rc = arg;
	struct sbx_error err = {0};
	struct store_sandbox r;
	new_row(&r, rc->f->a.id, sbx_wall_ms());
	struct store *s = rc->f->s;
	if (rc->own_connection) {
		s = store_open(rc->f->path, &err);
		if (!s) {
			pthread_mutex_lock(&rc->lock);
			rc->other++;
			pthread_mutex_unlock(&rc->lock);
			return NULL;
		}
	}
	int ret = store_sandbox_reserve(s, &r, rc->hold, rc->max_live, &err);
	if (rc->own_connection)
		store_close(s);
	pthread_mutex_lock(&rc->lock);
	if (ret == 0)
		rc->ok++;
	else if (err.code == SBX_E_INSUFFICIENT_CREDIT)
		rc->no_credit++;
	else if (err.code == SBX_E_CONCURRENCY_LIMIT)
		rc->cap++;
	else
		rc->other++;
	pthread_mutex_unlock(&rc->lock);
	return NULL;
}

static void run_race(struct race *rc, int nthreads)
{
	pthread_t th[64];
	pthread_mutex_init(&rc->lock, NULL);
	for (int i = 0; i < nthreads; i++)
		assert_int_equal(pthread_create(&th[i], NULL, race_worker, rc), 0);
	for (int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	pthread_mutex_destroy(&rc->lock);
}

static void test_race_credit(void **state)
{
	struct fx *f = *state;
	/* 1000000 µ$ of credit = exactly 5 holds of 200000. */
	struct race rc = {.f = f, .max_live = 1000, .hold = 200000};
	run_race(&rc, 50);
	assert_int_equal(rc.ok, 5);
	assert_int_equal(rc.no_credit, 45);
	assert_int_equal(rc.other + rc.cap, 0);
	assert_int_equal(available(f, f->a.id), 0);
	struct sbx_error err = {0};
	struct store_balance b;
	assert_int_equal(store_balance_get(f->s, f->a.id, &b, &err), 0);
	assert_true(b.balance_micro >= 0);
	assert_int_equal(b.reserved_micro, 1000000);
	assert_invariants(f);
}

static void test_race_cap(void **state)
{
	struct fx *f = *state;
	struct race rc = {.f = f, .max_live = 20, .hold = 1000};
	run_race(&rc, 30);
	assert_int_equal(rc.ok, 20);
	assert_int_equal(rc.cap, 10);
	assert_int_equal(rc.other + rc.no_credit, 0);
	int n;
	struct sbx_error err = {0};
	assert_int_equal(store_sandbox_count_live(f->s, f->a.id, &n, &err), 0);
	assert_int_equal(n, 20);
	/* Bob's cap is his own. */
	assert_int_equal(store_sandbox_count_live(f->s, f->b.id, &n, &err), 0);
	assert_int_equal(n, 0);
	assert_invariants(f);
}

/* The same races with one connection per thread: only SQLite's locking
 * (BEGIN IMMEDIATE + busy_timeout) keeps them honest. */
static void test_race_credit_connections(void **state)
{
	struct fx *f = *state;
	struct race rc = {.f = f, .own_connection = true, .max_live = 1000, .hold = 200000};
	run_race(&rc, 50);
	assert_int_equal(rc.ok, 5);
	assert_int_equal(rc.no_credit, 45);
	assert_int_equal(rc.other + rc.cap, 0);
	assert_int_equal(available(f, f->a.id), 0);
	assert_invariants(f);
}

static void test_race_cap_connections(void **state)
{
	struct fx *f = *state;
	struct race rc = {.f = f, .own_connection = true, .max_live = 20, .hold = 1000};
	run_race(&rc, 30);
	assert_int_equal(rc.ok, 20);
	assert_int_equal(rc.cap, 10);
	assert_int_equal(rc.other + rc.no_credit, 0);
	assert_invariants(f);
}

static void test_extend(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	struct store_sandbox r, out;
	int64_t t = 1700000000000;
	make_running(f, f->a.id, t, &r);
	int64_t exp0 = t + 3000 + 15 * 60000;
	assert_int_equal(store_sandbox_extend(f->s, f->a.id, r.id, exp0 + 60000, 1500, &err), 0);
	assert_int_equal(store_sandbox_get(f->s, f->a.id, r.id, &out, &err), 0);
	assert_int_equal(out.expires_at_ms, exp0 + 60000);
	assert_int_equal(out.hold_micro, HOLD_15M + 1500);
	assert_int_equal(available(f, f->a.id), 1000000 - HOLD_15M - 1500);
	/* Never earlier than it already is. */
	assert_int_equal(store_sandbox_extend(f->s, f->a.id, r.id, exp0, 0, &err), 0);
	assert_int_equal(store_sandbox_get(f->s, f->a.id, r.id, &out, &err), 0);
	assert_int_equal(out.expires_at_ms, exp0 + 60000);
	/* More than is available. */
	assert_int_equal(store_sandbox_extend(f->s, f->a.id, r.id, exp0 + 999999999, 1000000, &err),
			 -1);
	assert_int_equal(err.code, SBX_E_INSUFFICIENT_CREDIT);
	assert_int_equal(store_sandbox_get(f->s, f->a.id, r.id, &out, &err), 0);
	assert_int_equal(out.expires_at_ms, exp0 + 60000);
	assert_int_equal(out.hold_micro, HOLD_15M + 1500);
	assert_invariants(f);
	/* End at the new expiry: 16 minutes billed, the rest of both holds released. */
	assert_int_equal(store_sandbox_end(f->s, r.id, STORE_EXPIRED, exp0 + 60000,
					   billing_charge_for_row, &out, &err),
			 1);
	assert_int_equal(out.charge_micro, 16 * 60 * SMALL_PRICE / 3600);
	assert_int_equal(available(f, f->a.id), 1000000 - 16 * 60 * SMALL_PRICE / 3600);
	assert_int_equal(store_sandbox_extend(f->s, f->a.id, r.id, exp0 + 120000, 10, &err), -1);
	assert_int_equal(err.code, SBX_E_SANDBOX_NOT_RUNNING);
	assert_invariants(f);
}

static void test_list_pagination_and_filter(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	struct store_sandbox r[7], out;
	/* 7 sandboxes, two share a requested_at to exercise the id tiebreak. */
	int64_t ts[7] = {1000, 2000, 3000, 3000, 5000, 6000, 7000};
	for (int i = 0; i < 7; i++)
		make_running(f, f->a.id, ts[i], &r[i]);
	assert_int_equal(store_sandbox_end(f->s, r[1].id, STORE_DESTROYED, 9000,
					   billing_charge_for_row, &out, &err),
			 1);
	assert_int_equal(store_sandbox_end(f->s, r[5].id, STORE_FAILED, 9000,
					   billing_charge_for_row, &out, &err),
			 1);
	struct store_sandbox extra;
	new_row(&extra, f->a.id, 8000);
	assert_int_equal(store_sandbox_reserve(f->s, &extra, 10, 20, &err), 0);
	assert_int_equal(store_sandbox_abort(f->s, extra.id, &err), 1); /* hidden */

	/* Walk all pages of 3: 7 rows, newest first, no duplicates. */
	char seen[7][STORE_ID_MAX];
	size_t total = 0;
	char after[STORE_ID_MAX] = "";
	int64_t prev_ts = INT64_MAX;
	char prev_id[STORE_ID_MAX] = "~";
	int pages = 0;
	for (;;) {
		struct store_sandbox *rows = NULL;
		size_t n = 0;
		bool more = false;
		assert_int_equal(store_sandbox_list(f->s, f->a.id, NULL, 3, *after ? after : NULL,
						    &rows, &n, &more, &err),
				 0);
		pages++;
		for (size_t i = 0; i < n; i++) {
			assert_true(rows[i].requested_at_ms < prev_ts ||
				    (rows[i].requested_at_ms == prev_ts &&
				     strcmp(rows[i].id, prev_id) < 0));
			prev_ts = rows[i].requested_at_ms;
			snprintf(prev_id, sizeof prev_id, "%s", rows[i].id);
			assert_true(total < 7);
			snprintf(seen[total++], STORE_ID_MAX, "%s", rows[i].id);
			assert_int_not_equal(rows[i].status, STORE_ABORTED);
		}
		if (n)
			snprintf(after, sizeof after, "%s", rows[n - 1].id);
		free(rows);
		if (!more)
			break;
		assert_int_equal(n, 3);
	}
	assert_int_equal(total, 7);
	assert_int_equal(pages, 3);
	assert_string_equal(seen[0], r[6].id);
	assert_string_equal(seen[6], r[0].id);
	for (size_t i = 0; i < 7; i++)
		for (size_t j = i + 1; j < 7; j++)
			assert_string_not_equal(seen[i], seen[j]);

	/* Status filter. */
	enum store_status st = STORE_RUNNING;
	struct store_sandbox *rows = NULL;
	size_t n = 0;
	bool more = true;
	assert_int_equal(store_sandbox_list(f->s, f->a.id, &st, 100, NULL, &rows, &n, &more, &err),
			 0);
	assert_int_equal(n, 5);
	assert_false(more);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(rows[i].status, STORE_RUNNING);
	free(rows);
	st = STORE_FAILED;
	assert_int_equal(store_sandbox_list(f->s, f->a.id, &st, 100, NULL, &rows, &n, &more, &err),
			 0);
	assert_int_equal(n, 1);
	assert_string_equal(rows[0].id, r[5].id);
	free(rows);
	st = STORE_ABORTED;
	assert_int_equal(store_sandbox_list(f->s, f->a.id, &st, 100, NULL, &rows, &n, &more, &err),
			 0);
	assert_int_equal(n, 0);
	free(rows);

	/* Unknown, aborted, or bad-limit cursors. */
	assert_int_equal(
	    store_sandbox_list(f->s, f->a.id, NULL, 3, "sbx_nope", &rows, &n, &more, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_string_equal(err.param, "starting_after");
	assert_int_equal(
	    store_sandbox_list(f->s, f->a.id, NULL, 3, extra.id, &rows, &n, &more, &err), -1);
	assert_int_equal(store_sandbox_list(f->s, f->a.id, NULL, 0, NULL, &rows, &n, &more, &err),
			 -1);
	assert_string_equal(err.param, "limit");

	/* Ready at ts + 3000: r[0] at 4000, r[1] 5000 (ended 9000), r[5] ended 9000. */
	assert_int_equal(store_sandbox_list_overlapping(f->s, f->a.id, 0, 4000, &rows, &n, &err),
			 0);
	assert_int_equal(n, 0); /* [0, 4000) ends before r[0] became ready */
	free(rows);
	assert_int_equal(store_sandbox_list_overlapping(f->s, f->a.id, 0, 4001, &rows, &n, &err),
			 0);
	assert_int_equal(n, 1);
	assert_string_equal(rows[0].id, r[0].id);
	free(rows);
	assert_int_equal(
	    store_sandbox_list_overlapping(f->s, f->a.id, 9500, INT64_MAX, &rows, &n, &err), 0);
	assert_int_equal(n, 5); /* the ended ones (at 9000) are out */
	free(rows);
	assert_invariants(f);
}

/* Idempotency keys: claim, replay data, mismatch data, release, per-account
 * scope, retention, and the restart sweep of pending keys. */
static void test_idempotency_keys(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	struct store_idem row = {0};
	const char *h1 = "1111111111111111111111111111111111111111111111111111111111111111";
	const char *h2 = "2222222222222222222222222222222222222222222222222222222222222222";
	static const char body[] = "{\"id\":\"sbx_1\",\"a\":\"\\u0000x\"}";
	int64_t now = 1000000000;

	/* First claim inserts a pending row; a second sees it pending. */
	assert_int_equal(store_idem_claim(f->s, f->a.id, "k1", h1, now, 1000, &row, &err), 1);
	assert_int_equal(store_idem_claim(f->s, f->a.id, "k1", h2, now, 1000, &row, &err), 0);
	assert_false(row.done);
	assert_string_equal(row.request_hash, h1);
	store_idem_release_row(&row);
	/* Another account's same key is its own. */
	assert_int_equal(store_idem_claim(f->s, f->b.id, "k1", h2, now, 1000, &row, &err), 1);

	/* Completed: the exact bytes come back. */
	assert_int_equal(
	    store_idem_complete(f->s, f->a.id, "k1", "sbx_1", 201, body, sizeof(body) - 1, &err),
	    0);
	assert_int_equal(store_idem_complete(f->s, f->a.id, "k1", "sbx_1", 201, body, 3, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_int_equal(store_idem_claim(f->s, f->a.id, "k1", h1, now + 10, 1000, &row, &err), 0);
	assert_true(row.done);
	assert_int_equal(row.response_status, 201);
	assert_int_equal(row.response_len, sizeof(body) - 1);
	assert_memory_equal(row.response_body, body, sizeof(body) - 1);
	assert_string_equal(row.sandbox_id, "sbx_1");
	store_idem_release_row(&row);
	/* A done key is not released; a pending one is. */
	assert_int_equal(store_idem_release(f->s, f->a.id, "k1", &err), 0);
	assert_int_equal(store_idem_release(f->s, f->b.id, "k1", &err), 1);
	assert_int_equal(store_idem_claim(f->s, f->b.id, "k1", h1, now, 1000, &row, &err), 1);

	/* Past the retention the key is new again. */
	assert_int_equal(store_idem_claim(f->s, f->a.id, "k1", h2, now + 1000, 1000, &row, &err),
			 1);
	assert_int_equal(store_idem_complete(f->s, f->a.id, "k1", "sbx_2", 201, "{}", 2, &err), 0);
	assert_int_equal(store_idem_prune(f->s, now + 999, &err), 0);
	assert_int_equal(store_idem_prune(f->s, now + 1000, &err), 1);

	/* Restart: every pending key is freed (b's k1 here). */
	assert_int_equal(store_idem_release_pending(f->s, &err), 1);
	assert_int_equal(store_idem_claim(f->s, f->b.id, "k1", h2, now, 1000, &row, &err), 1);

	/* Bad keys. */
	char longkey[300];
	memset(longkey, 'x', sizeof(longkey) - 1);
	longkey[sizeof(longkey) - 1] = '\0';
	assert_int_equal(store_idem_claim(f->s, f->a.id, longkey, h1, now, 1000, &row, &err), -1);
	assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
	assert_int_equal(store_idem_claim(f->s, f->a.id, "", h1, now, 1000, &row, &err), -1);
}

static void test_tenant_isolation(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	struct store_sandbox r, out;
	make_running(f, f->a.id, 1000, &r);
	assert_int_equal(store_sandbox_get(f->s, f->b.id, r.id, &out, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	char msg_b[256];
	snprintf(msg_b, sizeof msg_b, "%s", err.message);
	/* Same answer as for an id that never existed (after naming the id). */
	char fake[STORE_ID_MAX];
	snprintf(fake, sizeof fake, "%s", r.id);
	fake[5] = fake[5] == 'a' ? 'b' : 'a';
	assert_int_equal(store_sandbox_get(f->s, f->a.id, fake, &out, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);

	assert_int_equal(store_sandbox_extend(f->s, f->b.id, r.id, 1 << 30, 100, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_int_equal(available(f, f->b.id), 1000000);
	struct store_sandbox *rows = NULL;
	size_t n = 9;
	bool more;
	assert_int_equal(store_sandbox_list(f->s, f->b.id, NULL, 10, NULL, &rows, &n, &more, &err),
			 0);
	assert_int_equal(n, 0);
	free(rows);
	assert_int_equal(store_sandbox_list(f->s, f->b.id, NULL, 10, r.id, &rows, &n, &more, &err),
			 -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_int_equal(
	    store_sandbox_list_overlapping(f->s, f->b.id, 0, INT64_MAX, &rows, &n, &err), 0);
	assert_int_equal(n, 0);
	free(rows);
	assert_int_equal(store_sandbox_get(f->s, f->a.id, r.id, &out, &err), 0);
	assert_int_equal(store_sandbox_get(f->s, NULL, r.id, &out, &err), 0);
	assert_invariants(f);
}

static void test_ledger_append_only(void **state)
{
	struct fx *f = *state;
	struct store_sandbox r;
	make_running(f, f->a.id, 1000, &r);
	sqlite3 *db;
	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	char *msg = NULL;
	assert_int_equal(sqlite3_exec(db, "UPDATE ledger SET amount_micro = 0", NULL, NULL, &msg),
			 SQLITE_CONSTRAINT);
	assert_non_null(strstr(msg, "append-only"));
	sqlite3_free(msg);
	assert_int_equal(sqlite3_exec(db, "DELETE FROM ledger", NULL, NULL, NULL),
			 SQLITE_CONSTRAINT);
	assert_int_not_equal(sqlite3_exec(db,
					  "INSERT INTO ledger (account_id, kind, amount_micro,"
					  " created_at_ms) VALUES ('x', 'credit', -5, 0)",
					  NULL, NULL, NULL),
			     SQLITE_OK);
	assert_invariants(f);

	/* The checker catches a violation: a second charge on a live sandbox. */
	sqlite3_stmt *q;
	assert_int_equal(
	    sqlite3_prepare_v2(db,
			       "INSERT INTO ledger (account_id, sandbox_id, kind,"
			       " amount_micro, created_at_ms) VALUES (?1, ?2, 'charge', 1, 0)",
			       -1, &q, NULL),
	    SQLITE_OK);
	sqlite3_bind_text(q, 1, f->a.id, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 2, r.id, -1, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(q), SQLITE_DONE);
	sqlite3_finalize(q);
	sqlite3_close(db);
	struct sbx_error err = {0};
	assert_int_equal(store_ledger_check(f->s, f->a.id, &err), -1);
	assert_non_null(strstr(err.message, "ledger invariant violated"));
	/* Bob's ledger is still fine. */
	assert_int_equal(store_ledger_check(f->s, f->b.id, &err), 0);
}

static void test_status_names(void **state)
{
	(void)state;
	enum store_status st;
	for (int i = STORE_CREATING; i <= STORE_ABORTED; i++) {
		assert_int_equal(store_status_parse(store_status_name((enum store_status)i), &st),
				 0);
		assert_int_equal(st, i);
	}
	assert_int_equal(store_status_parse("RUNNING", &st), -1);
	assert_int_equal(store_status_parse("", &st), -1);
	assert_string_equal(store_status_name(STORE_EXPIRED), "expired");
}

int main(void)
{
	sbx_log_set_level(SBX_LOG_ERROR + 1);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_status_names),
	    cmocka_unit_test_setup_teardown(test_open_twice_migrates_once, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_accounts_and_keys, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_normal_run, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_end_twice_and_cap, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_abort, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_reserve_refusals, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_race_credit, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_race_cap, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_race_credit_connections, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_race_cap_connections, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_extend, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_list_pagination_and_filter, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_idempotency_keys, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_tenant_isolation, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_ledger_append_only, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
