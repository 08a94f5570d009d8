/* sandbox/settle.c: an end the store refuses is kept and retried until it
 * lands, exactly once, at the moment it was decided; and how a sandbox
 * whose guest was lost unwatched ends (sandbox_lost_end). A store-only
 * (SANDBOX_SVC_ADMIN) service in a temp state dir; the write lock is held
 * by another connection (BEGIN IMMEDIATE), as another process would. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "billing/billing.h"
#include "sandbox/sandbox-priv.h"
#include "store/store-priv.h"
#include "store/store.h"

#define PRICE 90000 /* micro-USD per hour */

struct fx {
	char dir[64];
	struct sandbox_config cfg;
	struct sandbox_svc *svc;
	char account_id[SANDBOX_ID_MAX];
};
static struct fx F;

static int setup(void **state)
{
	struct sandbox_account acct;
	struct sandbox_key key;
	struct sbx_error err;
	char secret[80];

	(void)state;
	snprintf(F.dir, sizeof(F.dir), "/tmp/t-settle-%d-XXXXXX", (int)getpid());
	if (!mkdtemp(F.dir))
		return -1;
	sandbox_config_defaults(&F.cfg);
	snprintf(F.cfg.state_dir, sizeof(F.cfg.state_dir), "%s", F.dir);
	sandbox_config_resolve(&F.cfg);
	sbx_error_clear(&err);
	F.svc = sandbox_svc_new(&F.cfg, SANDBOX_SVC_ADMIN, &err);
	if (!F.svc)
		return -1;
	if (sandbox_account_create(F.svc, "t", 10000000, &acct, &key, secret, &err) < 0)
		return -1;
	/* the store's 5 s busy_timeout, shortened: SQLITE_BUSY all the same */
	sqlite3_busy_timeout(F.svc->store->db, 200);
	memcpy(F.account_id, acct.id, sizeof(F.account_id));
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	sandbox_svc_free(F.svc);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", F.dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* A running 15-minute sandbox created at t. */
static void make_running(int64_t t, struct store_sandbox *r)
{
	struct sbx_error err;

	memset(r, 0, sizeof(*r));
	sbx_error_clear(&err);
	snprintf(r->account_id, sizeof(r->account_id), "%s", F.account_id);
	snprintf(r->size, sizeof(r->size), "small");
	r->timeout_minutes = 15;
	r->price_micro_per_hour = PRICE;
	r->requested_at_ms = t;
	assert_int_equal(
	    store_sandbox_reserve(F.svc->store, r, billing_hold_for_minutes(15, PRICE), 20, &err),
	    0);
	assert_int_equal(
	    store_sandbox_activate(F.svc->store, r->id, r->id, t, t + 15 * 60000, &err), 0);
}

/* Another connection to the database, holding its write lock. */
static sqlite3 *lock_db(void)
{
	char path[PATH_MAX + 16];
	sqlite3 *db = NULL;

	snprintf(path, sizeof(path), "%s/sandboxd.db", F.dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
	return db;
}

static void unlock_db(sqlite3 *db)
{
	assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
}

/* Ledger rows of `kind` for a sandbox or execution id. */
static int ledger_count(const char *column, const char *id, const char *kind)
{
	char path[PATH_MAX + 16], sql[160];
	sqlite3 *db = NULL;
	sqlite3_stmt *q = NULL;
	int n = -1;

	snprintf(path, sizeof(path), "%s/sandboxd.db", F.dir);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM ledger WHERE %s = ?1 AND kind = ?2",
		 column);
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
	sqlite3_bind_text(q, 1, id, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 2, kind, -1, SQLITE_STATIC);
	if (sqlite3_step(q) == SQLITE_ROW)
		n = sqlite3_column_int(q, 0);
	sqlite3_finalize(q);
	sqlite3_close(db);
	return n;
}

/* SQLITE_BUSY past busy_timeout: the DELETE's settle fails, is kept,
 * and lands exactly once at the retry, at the DELETE's moment. */
static void busy_settle_is_retried_once(void **state)
{
	struct store_sandbox r, out;
	struct sbx_error err;
	int64_t t = sbx_wall_ms() - 60000, deleted_at = t + 30000;

	(void)state;
	make_running(t, &r);
	sqlite3 *db = lock_db();
	sbx_error_clear(&err);
	assert_int_equal(sandbox_settle(F.svc, r.id, STORE_DESTROYED, deleted_at, &out, &err), -1);
	/* still locked: the retry fails too, the end is still kept */
	assert_int_equal(sandbox_settles_retry(F.svc), 1);
	unlock_db(db);

	/* a later end of the same sandbox (a repeated DELETE) lands the
	 * kept one: its status and moment */
	assert_int_equal(sandbox_settle(F.svc, r.id, STORE_FAILED, deleted_at + 99000, &out, &err),
			 1);
	assert_int_equal(out.status, STORE_DESTROYED);
	assert_int_equal(out.ended_at_ms, deleted_at);
	assert_int_equal(out.charge_micro, billing_cost(30000, PRICE));
	assert_int_equal(sandbox_settles_retry(F.svc), 0);
	assert_int_equal(ledger_count("sandbox_id", r.id, "charge"), 1);
	assert_int_equal(ledger_count("sandbox_id", r.id, "release"), 1);

	/* the same, landed by the timer's retry alone */
	make_running(t, &r);
	db = lock_db();
	assert_int_equal(sandbox_settle(F.svc, r.id, STORE_EXPIRED, deleted_at, NULL, &err), -1);
	unlock_db(db);
	assert_int_equal(sandbox_settles_retry(F.svc), 0);
	assert_int_equal(sandbox_settles_retry(F.svc), 0);
	assert_int_equal(store_sandbox_get(F.svc->store, NULL, r.id, &out, &err), 0);
	assert_int_equal(out.status, STORE_EXPIRED);
	assert_int_equal(out.ended_at_ms, deleted_at);
	assert_int_equal(ledger_count("sandbox_id", r.id, "charge"), 1);
	assert_int_equal(store_ledger_check(F.svc->store, NULL, &err), 0);
}

/* An execution's failed end is kept and retried the same way. */
static void busy_execution_settle_is_retried_once(void **state)
{
	struct store_execution row = {0};
	struct sbx_error err;
	int64_t t = sbx_wall_ms();

	(void)state;
	sbx_error_clear(&err);
	assert_int_equal(sbx_random_id("sbxr_", 12, row.id, sizeof(row.id)), 0);
	snprintf(row.account_id, sizeof(row.account_id), "%s", F.account_id);
	snprintf(row.runtime, sizeof(row.runtime), "python");
	snprintf(row.runner, sizeof(row.runner), "libvirt");
	row.timeout_seconds = 10;
	row.price_micro_per_second = 40;
	row.requested_at_ms = t;
	assert_int_equal(store_execution_reserve(F.svc->store, &row, 400, &err), 0);
	sqlite3 *db = lock_db();
	sandbox_execution_settle(F.svc, row.id, SANDBOX_EXECUTION_FAILED, t + 3000, 120);
	assert_int_equal(sandbox_settles_retry(F.svc), 1);
	unlock_db(db);
	assert_int_equal(sandbox_settles_retry(F.svc), 0);
	assert_int_equal(ledger_count("execution_id", row.id, "charge"), 1);
	assert_int_equal(ledger_count("execution_id", row.id, "release"), 1);
	/* settled: a second end changes nothing */
	sandbox_execution_settle(F.svc, row.id, SANDBOX_EXECUTION_FAILED, t + 9000, 400);
	assert_int_equal(sandbox_settles_retry(F.svc), 0);
	assert_int_equal(ledger_count("execution_id", row.id, "charge"), 1);
	assert_int_equal(store_ledger_check(F.svc->store, NULL, &err), 0);
}

/* Reconcile: a vanished domain ends at min(last_seen_at, expires_at). */
static void lost_guest_ends_at_its_last_answer(void **state)
{
	struct store_sandbox row = {
	    .status = STORE_RUNNING,
	    .created_at_ms = 1000000,
	    .expires_at_ms = 1000000 + 15 * 60000,
	    .last_seen_at_ms = 1000000 + 60000, /* deleted (or lost) a minute in */
	};
	int64_t after_expiry = row.expires_at_ms + 3600000;
	enum store_status st;
	int64_t at;

	(void)state;
	/* deleted long before its expiry, restarted after it: its last
	 * answer, never the expiry */
	sandbox_lost_end(&row, false, after_expiry, &st, &at);
	assert_int_equal(st, STORE_FAILED);
	assert_int_equal(at, row.last_seen_at_ms);
	/* before its expiry: the same */
	sandbox_lost_end(&row, false, row.expires_at_ms - 1, &st, &at);
	assert_int_equal(st, STORE_FAILED);
	assert_int_equal(at, row.last_seen_at_ms);
	/* it answered up to its expiry: expired there, not later */
	row.last_seen_at_ms = row.expires_at_ms + 2000;
	sandbox_lost_end(&row, false, after_expiry, &st, &at);
	assert_int_equal(st, STORE_EXPIRED);
	assert_int_equal(at, row.expires_at_ms);
	/* its domain still runs past its expiry: it ran to its expiry */
	row.last_seen_at_ms = 1000000 + 60000;
	sandbox_lost_end(&row, true, after_expiry, &st, &at);
	assert_int_equal(st, STORE_EXPIRED);
	assert_int_equal(at, row.expires_at_ms);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(busy_settle_is_retried_once),
	    cmocka_unit_test(busy_execution_settle_is_retried_once),
	    cmocka_unit_test(lost_guest_ends_at_its_last_answer),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
