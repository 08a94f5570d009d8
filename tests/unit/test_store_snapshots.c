/* Snapshots (docs/api.md "Snapshots") below the API: the store's rows
 * (migration 14: the count and bytes caps at insert and at ready, rows of
 * another account not found, a delete refused while a live sandbox is
 * backed by it and a create refused once a delete began, a CREATING row
 * forgotten), their storage settled exactly once per period (a hold and a
 * charge each, capped at the balance, the last one with the delete), the
 * ledger invariants after each step, and the config's snapshot keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api-priv.h"
#include "billing/billing.h"
#include "store/store.h"
#include "util/util.h"

#include "store_fx.h"

#define GIB	(INT64_C(1) << 30)
#define HOUR_MS (INT64_C(3600000))

static int fx_setup(void **state)
{
	return fx_open(state, "snapshots", 1000000);
}

/* A CREATING row of account a at t with price (µ$ per GiB-hour). */
static int insert(struct fx *f, const char *id, int64_t t, int64_t price, int max_count,
		  int64_t max_bytes, struct sbx_error *err)
{
	struct store_snapshot r = {0};

	snprintf(r.id, sizeof r.id, "%s", id);
	snprintf(r.account_id, sizeof r.account_id, "%s", f->a.id);
	snprintf(r.sandbox_id, sizeof r.sandbox_id, "sbx_source");
	snprintf(r.host, sizeof r.host, "local");
	r.disk_gib = 2;
	r.price_micro_per_gib_hour = price;
	r.created_at_ms = t;
	return store_snapshot_insert(f->s, &r, max_count, max_bytes, err);
}

static void ledger_ok(struct fx *f)
{
	struct sbx_error err = {0};

	if (store_ledger_check(f->s, NULL, &err) < 0)
		fail_msg("ledger check: %s", err.message);
}

static void test_caps_and_tenancy(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	struct store_snapshot got, *list = NULL;
	size_t n = 0;
	int64_t t = sbx_wall_ms();

	/* count cap: CREATING rows count */
	assert_int_equal(insert(f, "snap_a1", t, 0, 2, 10 * GIB, &err), 0);
	assert_int_equal(insert(f, "snap_a2", t, 0, 2, 10 * GIB, &err), 0);
	assert_int_equal(insert(f, "snap_a3", t, 0, 2, 10 * GIB, &err), -1);
	assert_int_equal(err.code, SBX_E_CONCURRENCY_LIMIT);
	/* a CREATING row is not visible, and is forgotten */
	assert_int_equal(store_snapshot_get(f->s, f->a.id, "snap_a2", &got, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_int_equal(store_snapshot_forget(f->s, "snap_a2", &err), 0);
	/* bytes cap at ready: 3 GiB when 4 are allowed, then 2 more are too much */
	assert_int_equal(store_snapshot_ready(f->s, "snap_a1", 3 * GIB, t, 4 * GIB, &err), 0);
	assert_int_equal(insert(f, "snap_a4", t, 0, 5, 4 * GIB, &err), 0);
	assert_int_equal(store_snapshot_ready(f->s, "snap_a4", 2 * GIB, t, 4 * GIB, &err), -1);
	assert_int_equal(err.code, SBX_E_CONCURRENCY_LIMIT);
	assert_int_equal(store_snapshot_forget(f->s, "snap_a4", &err), 0);
	/* at the bytes cap already: refused at insert */
	assert_int_equal(insert(f, "snap_a5", t, 0, 5, 3 * GIB, &err), -1);
	assert_int_equal(err.code, SBX_E_CONCURRENCY_LIMIT);
	/* a READY row: the owner sees it, another account does not */
	assert_int_equal(store_snapshot_get(f->s, f->a.id, "snap_a1", &got, &err), 0);
	assert_int_equal(got.bytes, 3 * GIB);
	assert_int_equal(got.status, STORE_SNAP_READY);
	assert_int_equal(store_snapshot_get(f->s, f->b.id, "snap_a1", &got, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_int_equal(store_snapshot_list(f->s, f->b.id, 10, &list, &n, &err), 0);
	assert_int_equal(n, 0);
	free(list);
	assert_int_equal(store_snapshot_list(f->s, f->a.id, 10, &list, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_string_equal(list[0].id, "snap_a1");
	free(list);
	assert_int_equal(store_snapshot_delete_begin(f->s, f->b.id, "snap_a1", &got, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	ledger_ok(f);
}

static void test_in_use_and_delete(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	struct store_snapshot got;
	struct store_sandbox sb = {0}, sb2 = {0};
	int64_t t = sbx_wall_ms();
	int users = -1;

	assert_int_equal(insert(f, "snap_u1", t, 0, 5, 10 * GIB, &err), 0);
	assert_int_equal(store_snapshot_ready(f->s, "snap_u1", GIB, t, 10 * GIB, &err), 0);
	snprintf(sb.account_id, sizeof sb.account_id, "%s", f->a.id);
	snprintf(sb.size, sizeof sb.size, "small");
	sb.timeout_minutes = 15;
	sb.price_micro_per_hour = 90000;
	sb.requested_at_ms = t;
	sb2 = sb;
	snprintf(sb.id, sizeof sb.id, "sbx_u1");
	snprintf(sb2.id, sizeof sb2.id, "sbx_u2");
	assert_int_equal(store_sandbox_reserve(f->s, &sb, 22500, 20, &err), 0);
	/* another account's sandbox cannot be backed by it */
	snprintf(sb2.account_id, sizeof sb2.account_id, "%s", f->b.id);
	assert_int_equal(store_sandbox_reserve(f->s, &sb2, 22500, 20, &err), 0);
	assert_int_equal(store_sandbox_snapshot_set(f->s, f->b.id, sb2.id, "snap_u1", &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_int_equal(store_sandbox_snapshot_set(f->s, f->a.id, sb.id, "snap_u1", &err), 0);
	assert_int_equal(store_snapshot_users(f->s, "snap_u1", &users, &err), 0);
	assert_int_equal(users, 1);
	/* creating, then running: in use either way */
	assert_int_equal(store_snapshot_delete_begin(f->s, f->a.id, "snap_u1", &got, &err), -1);
	assert_int_equal(err.code, SBX_E_SNAPSHOT_IN_USE);
	assert_int_equal(store_sandbox_activate(f->s, sb.id, "d1", t, t + 15 * 60000, &err), 0);
	assert_int_equal(store_snapshot_delete_begin(f->s, f->a.id, "snap_u1", &got, &err), -1);
	assert_int_equal(err.code, SBX_E_SNAPSHOT_IN_USE);
	/* ended: free to go; a create that comes after the delete began: 404 */
	assert_int_equal(store_sandbox_end(f->s, sb.id, STORE_DESTROYED, t + 1000,
					   billing_charge_for_row, NULL, &err),
			 1);
	assert_int_equal(store_snapshot_delete_begin(f->s, f->a.id, "snap_u1", &got, &err), 0);
	assert_int_equal(got.status, STORE_SNAP_DELETING);
	struct store_sandbox sb3 = sb;
	snprintf(sb3.id, sizeof sb3.id, "sbx_u3");
	assert_int_equal(store_sandbox_reserve(f->s, &sb3, 22500, 20, &err), 0);
	assert_int_equal(store_sandbox_snapshot_set(f->s, f->a.id, sb3.id, "snap_u1", &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_int_equal(store_snapshot_get(f->s, f->a.id, "snap_u1", &got, &err), -1);
	assert_int_equal(store_snapshot_settle(f->s, "snap_u1", t + 2000, true,
					       billing_storage_cost, NULL, &err),
			 1);
	/* deleted: not settled again, not deleted twice */
	assert_int_equal(store_snapshot_settle(f->s, "snap_u1", t + 9000, true,
					       billing_storage_cost, NULL, &err),
			 0);
	assert_int_equal(store_snapshot_delete_begin(f->s, f->a.id, "snap_u1", &got, &err), -1);
	ledger_ok(f);
}

/* SUM of the snapshot's ledger entries of `kind` (and their count). */
static int64_t ledger_sum(struct fx *f, const char *id, const char *kind, int *count)
{
	sqlite3 *db;
	sqlite3_stmt *q;
	int64_t sum = -1;

	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	assert_int_equal(
	    sqlite3_prepare_v2(db,
			       "SELECT COALESCE(SUM(amount_micro), 0), count(*) FROM ledger"
			       " WHERE snapshot_id = ?1 AND kind = ?2",
			       -1, &q, NULL),
	    SQLITE_OK);
	sqlite3_bind_text(q, 1, id, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 2, kind, -1, SQLITE_STATIC);
	if (sqlite3_step(q) == SQLITE_ROW) {
		sum = sqlite3_column_int64(q, 0);
		*count = sqlite3_column_int(q, 1);
	}
	sqlite3_finalize(q);
	sqlite3_close(db);
	return sum;
}

static void test_settled_once(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	struct store_balance b0, b1;
	int64_t t = sbx_wall_ms(), charged = -1;
	int n = 0;

	/* 1 GiB at 3600 µ$/GiB-h: 1 µ$ a second */
	assert_int_equal(insert(f, "snap_b1", t, 3600, 5, 10 * GIB, &err), 0);
	assert_int_equal(store_snapshot_ready(f->s, "snap_b1", GIB, t, 10 * GIB, &err), 0);
	assert_int_equal(store_balance_get(f->s, f->a.id, &b0, &err), 0);
	assert_int_equal(store_snapshot_settle(f->s, "snap_b1", t + 60000, false,
					       billing_storage_cost, &charged, &err),
			 1);
	assert_int_equal(charged, 60);
	/* the same moment again, or an earlier one: nothing */
	assert_int_equal(store_snapshot_settle(f->s, "snap_b1", t + 60000, false,
					       billing_storage_cost, &charged, &err),
			 0);
	assert_int_equal(store_snapshot_settle(f->s, "snap_b1", t + 30000, false,
					       billing_storage_cost, &charged, &err),
			 0);
	/* the delete charges the rest: 40 s more */
	assert_int_equal(store_snapshot_settle(f->s, "snap_b1", t + 100000, true,
					       billing_storage_cost, &charged, &err),
			 1);
	assert_int_equal(charged, 40);
	assert_int_equal(ledger_sum(f, "snap_b1", "charge", &n), 100);
	assert_int_equal(n, 2);
	assert_int_equal(ledger_sum(f, "snap_b1", "hold", &n), 100);
	assert_int_equal(store_balance_get(f->s, f->a.id, &b1, &err), 0);
	assert_int_equal(b0.balance_micro - b1.balance_micro, 100);
	assert_int_equal(b0.reserved_micro, b1.reserved_micro);
	ledger_ok(f);

	/* never past the balance: 1 TiB for an hour at 1 $/GiB-h is far more
	 * than alice has left */
	assert_int_equal(insert(f, "snap_b2", t, 1000000, 5, 2048 * GIB, &err), 0);
	assert_int_equal(store_snapshot_ready(f->s, "snap_b2", 1024 * GIB, t, 2048 * GIB, &err), 0);
	assert_int_equal(store_snapshot_settle(f->s, "snap_b2", t + HOUR_MS, true,
					       billing_storage_cost, &charged, &err),
			 1);
	assert_int_equal(charged, b1.available_micro);
	assert_int_equal(store_balance_get(f->s, f->a.id, &b1, &err), 0);
	assert_int_equal(b1.available_micro, 0);
	ledger_ok(f);
}

static void test_config_keys(void **state)
{
	static const struct {
		const char *json, *param;
	} bad[] = {
	    {"{\"max_snapshots\": -1}", "max_snapshots"},
	    {"{\"max_snapshots\": 10001}", "max_snapshots"},
	    {"{\"snapshot_storage_micro_per_gib_hour\": 1000000001}",
	     "snapshot_storage_micro_per_gib_hour"},
	    {"{\"snapshot_timeout_ms\": 999}", "snapshot_timeout_ms"},
	    {"{\"max_snapshot_bytes\": 2251799813685249}", "max_snapshot_bytes"},
	};
	struct sandbox_config c;
	struct sbx_error err;

	(void)state;
	sandbox_config_defaults(&c);
	assert_int_equal(c.max_snapshots, 10);
	assert_int_equal(c.max_snapshot_bytes, 10ULL << 30);
	assert_int_equal(c.snapshot_storage_micro_per_gib_hour, 0);
	assert_int_equal(c.snapshot_timeout_ms, 60000);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		sandbox_config_defaults(&c);
		sbx_error_clear(&err);
		if (api_config_parse(bad[i].json, strlen(bad[i].json), &c, &err) == 0) {
			sandbox_config_resolve(&c);
			assert_int_equal(sandbox_config_validate(&c, &err), -1);
		}
		if (strcmp(err.param, bad[i].param) != 0)
			fail_msg("%s: param '%s'", bad[i].json, err.param);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_caps_and_tenancy, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_in_use_and_delete, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_settled_once, fx_setup, fx_teardown),
	    cmocka_unit_test(test_config_keys),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
