/* store's statement helper (store-priv.h): store_run binding each type,
 * the connection's statement cache (reset and cleared between uses), the
 * mapping of every failure (prepare, bind, step) to SBX_E_INTERNAL, and
 * store_write / store_tx_end: a statement failing mid-transaction rolls
 * the whole transaction back, money included. Each test has a store of
 * its own: a failed assertion inside STORE_LOCK leaves only that store's
 * lock taken. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "store/store-priv.h"
#include "store/store.h"

#define DB_FAILED "the database failed; try again later"

static int setup(void **state)
{
	static char path[64];
	struct sbx_error err = {0};

	snprintf(path, sizeof path, "/tmp/t-store-stmt-%d.db", (int)getpid());
	unlink(path);
	struct store *s = store_open(path, &err);
	if (!s)
		return -1;
	if (store_exec(s, "CREATE TABLE t (k INTEGER PRIMARY KEY, txt TEXT, n INTEGER, b BLOB)",
		       &err) < 0)
		return -1;
	*state = s;
	return 0;
}

static int teardown(void **state)
{
	char path[64];

	store_close(*state);
	snprintf(path, sizeof path, "/tmp/t-store-stmt-%d.db", (int)getpid());
	unlink(path);
	return 0;
}

/* Rows in t (on the writer). */
static int64_t count_t(struct store *s)
{
	struct sbx_error err = {0};
	STORE_LOCK(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	assert_int_equal(store_run_args(s, &q, "SELECT COUNT(*) FROM t", NULL, 0, &err),
			 SQLITE_ROW);
	return sqlite3_column_int64(q, 0);
}

static void test_bind_each_type(void **state)
{
	struct store *s = *state;
	struct sbx_error err = {0};
	static const char bytes[] = {'a', 0, 'b'};

	STORE_LOCK(s);
	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		assert_int_equal(store_run(s, &q,
					   "INSERT INTO t (k, txt, n, b) VALUES (?1, ?2, ?3, ?4)",
					   &err, STORE_I(1), STORE_T("héllo"), STORE_I(INT64_MIN),
					   STORE_B(bytes, sizeof bytes)),
				 SQLITE_DONE);
	}
	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		/* NULL text and blob bind NULL; an empty blob is not NULL;
		 * an int widens to int64. */
		assert_int_equal(
		    store_run(s, &q, "INSERT INTO t (k, txt, n, b) VALUES (?1, ?2, ?3, ?4)", &err,
			      STORE_I(2), STORE_T(NULL), STORE_I((int)-7), STORE_B(NULL, 0)),
		    SQLITE_DONE);
	}
	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		assert_int_equal(
		    store_run(s, &q, "INSERT INTO t (k, txt, n, b) VALUES (?1, ?2, ?3, ?4)", &err,
			      STORE_I(3), STORE_T(""), STORE_I(INT64_MAX), STORE_B("", 0)),
		    SQLITE_DONE);
	}
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	int rc = store_run_args(s, &q, "SELECT k, txt, n, b FROM t ORDER BY k", NULL, 0, &err);
	assert_int_equal(rc, SQLITE_ROW);
	assert_int_equal(sqlite3_column_type(q, 1), SQLITE_TEXT);
	assert_string_equal((const char *)sqlite3_column_text(q, 1), "héllo");
	assert_true(sqlite3_column_int64(q, 2) == INT64_MIN);
	assert_int_equal(sqlite3_column_type(q, 3), SQLITE_BLOB);
	assert_int_equal(sqlite3_column_bytes(q, 3), 3);
	assert_memory_equal(sqlite3_column_blob(q, 3), bytes, 3);

	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	assert_int_equal(sqlite3_column_type(q, 1), SQLITE_NULL);
	assert_int_equal(sqlite3_column_int64(q, 2), -7);
	assert_int_equal(sqlite3_column_type(q, 3), SQLITE_NULL);

	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	assert_int_equal(sqlite3_column_type(q, 1), SQLITE_TEXT);
	assert_true(sqlite3_column_int64(q, 2) == INT64_MAX);
	assert_int_equal(sqlite3_column_type(q, 3), SQLITE_BLOB);
	assert_int_equal(sqlite3_column_bytes(q, 3), 0);

	assert_int_equal(sqlite3_step(q), SQLITE_DONE);
}

/* One statement per text on a connection, reset and its bindings cleared
 * at the end of each scope. */
static void test_cache_reset_between_uses(void **state)
{
	struct store *s = *state;
	struct sbx_error err = {0};
	sqlite3_stmt *first;

	STORE_LOCK(s);
	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		assert_int_equal(store_run(s, &q, "SELECT ?1 IS NULL, ?1", &err, STORE_I(5)),
				 SQLITE_ROW);
		assert_int_equal(sqlite3_column_int(q, 0), 0);
		assert_int_equal(sqlite3_column_int(q, 1), 5);
		first = q;
	}
	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		/* the same statement, its binding gone */
		assert_int_equal(store_run_args(s, &q, "SELECT ?1 IS NULL, ?1", NULL, 0, &err),
				 SQLITE_ROW);
		assert_ptr_equal(q, first);
		assert_int_equal(sqlite3_column_int(q, 0), 1);
	}
	/* Left mid-rows, a query starts again from its first row. */
	for (int i = 0; i < 2; i++) {
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		assert_int_equal(store_run(s, &q, "SELECT value FROM json_each(?1)", &err,
					   STORE_T("[10,20,30]")),
				 SQLITE_ROW);
		assert_int_equal(sqlite3_column_int(q, 0), 10);
		assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	}
}

static void assert_db_failed(const struct sbx_error *err)
{
	assert_int_equal(err->code, SBX_E_INTERNAL);
	assert_string_equal(err->message, DB_FAILED);
}

static void test_error_mapping(void **state)
{
	struct store *s = *state;
	int64_t before = count_t(s);

	{
		STORE_LOCK(s);
		struct sbx_error err = {0};
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		/* prepare */
		assert_int_equal(store_run(s, &q, "SELEC nothing FROM t", &err, STORE_I(1)), -1);
		assert_null(q);
		assert_db_failed(&err);
	}
	{
		STORE_LOCK(s);
		struct sbx_error err = {0};
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		/* bind: a third value for a statement of two */
		assert_int_equal(store_run(s, &q, "INSERT INTO t (k, n) VALUES (?1, ?2)", &err,
					   STORE_I(90), STORE_I(1), STORE_I(2)),
				 -1);
		assert_db_failed(&err);
	}
	{
		STORE_LOCK(s);
		struct sbx_error err = {0};
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		/* bind: a blob longer than SQLite takes */
		assert_int_equal(store_run(s, &q, "INSERT INTO t (k, b) VALUES (?1, ?2)", &err,
					   STORE_I(91), STORE_B("x", (int64_t)INT32_MAX + 1)),
				 -1);
		assert_db_failed(&err);
	}
	for (int i = 0; i < 2; i++) {
		STORE_LOCK(s);
		struct sbx_error err = {0};
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		/* step: the primary key taken the second time */
		int rc = store_run(s, &q, "INSERT INTO t (k) VALUES (?1)", &err, STORE_I(92));
		if (i == 0) {
			assert_int_equal(rc, SQLITE_DONE);
		} else {
			assert_int_equal(rc, -1);
			assert_db_failed(&err);
		}
	}
	assert_int_equal(count_t(s), before + 1);
}

/* Write transactions committed so far (the store's histogram count). */
static unsigned long long commits(void)
{
	struct sbx_buf b;
	unsigned long long n = 0;

	sbx_buf_init(&b, 1 << 20);
	assert_int_equal(sbx_metrics_render(&b), 0);
	assert_int_equal(sbx_buf_append(&b, "", 1), 0);
	const char *at = strstr(b.data, "\nsandboxd_store_transaction_seconds_count ");
	assert_non_null(at);
	assert_int_equal(sscanf(at, "\nsandboxd_store_transaction_seconds_count %llu", &n), 1);
	sbx_buf_release(&b);
	return n;
}

static void test_write(void **state)
{
	struct store *s = *state;
	struct sbx_error err = {0};
	int64_t before = count_t(s);
	unsigned long long c0 = commits();

	assert_int_equal(store_write(s, 0, "INSERT INTO t (k, n) VALUES (?1, ?2)", &err,
				     STORE_I(200), STORE_I(1)),
			 1);
	assert_int_equal(
	    store_write(s, 0, "UPDATE t SET n = n + 1 WHERE k >= ?1", &err, STORE_I(200)), 1);
	/* nothing to change: committed as 0, or rolled back with NEED_CHANGE */
	assert_int_equal(store_write(s, 0, "UPDATE t SET n = 0 WHERE k = ?1", &err, STORE_I(999)),
			 0);
	assert_int_equal(commits(), c0 + 3);
	assert_int_equal(store_write(s, STORE_WRITE_NEED_CHANGE, "UPDATE t SET n = 0 WHERE k = ?1",
				     &err, STORE_I(999)),
			 0);
	assert_true(sqlite3_get_autocommit(s->db));
	assert_int_equal(commits(), c0 + 3);
	/* a failing statement: -1, no transaction left open */
	memset(&err, 0, sizeof err);
	assert_int_equal(store_write(s, 0, "INSERT INTO t (k, n) VALUES (?1, ?2)", &err,
				     STORE_I(200), STORE_I(1)),
			 -1);
	assert_db_failed(&err);
	assert_true(sqlite3_get_autocommit(s->db));
	assert_int_equal(commits(), c0 + 3);
	assert_int_equal(count_t(s), before + 1);
}

/* Two statements in one transaction, the second failing: store_tx_end
 * rolls back the first. */
static void test_tx_end_rolls_back(void **state)
{
	struct store *s = *state;
	struct sbx_error err = {0};
	int64_t before = count_t(s);

	{
		STORE_LOCK(s);
		assert_int_equal(store_tx_begin(s, &err), 0);
		int rc;
		{
			_cleanup_reset_ sqlite3_stmt *q = NULL;
			rc = store_run(s, &q, "INSERT INTO t (k) VALUES (?1)", &err, STORE_I(300));
			assert_int_equal(rc, SQLITE_DONE);
		}
		{
			_cleanup_reset_ sqlite3_stmt *q = NULL;
			rc = store_run(s, &q, "INSERT INTO t (k) VALUES (?1)", &err, STORE_I(300));
			assert_int_equal(rc, -1);
		}
		assert_int_equal(store_tx_end(s, rc, &err), -1);
		assert_true(sqlite3_get_autocommit(s->db));
	}
	assert_int_equal(count_t(s), before);
	{
		STORE_LOCK(s);
		assert_int_equal(store_tx_begin(s, &err), 0);
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		assert_int_equal(
		    store_run(s, &q, "INSERT INTO t (k) VALUES (?1)", &err, STORE_I(301)),
		    SQLITE_DONE);
		assert_int_equal(store_tx_end(s, 7, &err), 7);
	}
	assert_int_equal(count_t(s), before + 1);
}

static int64_t charge_quarter(const struct store_sandbox *row, int64_t ended_at_ms)
{
	return row->hold_micro / 4;
}

/* The money paths: a ledger insert that fails after the state change and
 * the charge were written takes them back with it. */
static void test_money_rolls_back_mid_transaction(void **state)
{
	struct store *s = *state;
	struct sbx_error err = {0};
	struct store_account a;
	struct store_balance b;
	struct store_account *all = NULL;
	size_t n0 = 0, n1 = 0;

	assert_int_equal(store_account_list(s, &all, &n0, &err), 0);
	free(all);
	assert_int_equal(store_exec(s,
				    "CREATE TRIGGER fail_ledger BEFORE INSERT ON ledger"
				    " WHEN NEW.amount_micro = 777 OR NEW.kind = 'release'"
				    " BEGIN SELECT RAISE(ABORT, 'no'); END",
				    &err),
			 0);
	/* the account row went in, its credit failed: no account */
	assert_int_equal(store_account_create(s, "m", 777, &a, &err), -1);
	assert_db_failed(&err);
	assert_int_equal(store_account_list(s, &all, &n1, &err), 0);
	free(all);
	assert_int_equal(n1, n0);

	assert_int_equal(store_account_create(s, "m", 1000, &a, &err), 0);
	struct store_sandbox row = {
	    .size = "small", .timeout_minutes = 5, .price_micro_per_hour = 100};
	snprintf(row.account_id, sizeof row.account_id, "%s", a.id);
	assert_int_equal(store_sandbox_reserve(s, &row, 400, 5, &err), 0);
	int64_t now = sbx_wall_ms();
	assert_int_equal(store_sandbox_activate(s, row.id, "d", now, now + 60000, &err), 0);
	/* finish + charge written, release fails: still running, still held */
	memset(&err, 0, sizeof err);
	assert_int_equal(
	    store_sandbox_end(s, row.id, STORE_DESTROYED, now + 1000, charge_quarter, NULL, &err),
	    -1);
	assert_db_failed(&err);
	struct store_sandbox got;
	assert_int_equal(store_sandbox_get(s, a.id, row.id, &got, &err), 0);
	assert_int_equal(got.status, STORE_RUNNING);
	assert_int_equal(got.charge_micro, 0);
	assert_int_equal(store_balance_get(s, a.id, &b, &err), 0);
	assert_int_equal(b.reserved_micro, 400);
	assert_int_equal(b.consumed_micro, 0);
	assert_int_equal(store_ledger_check(s, a.id, &err), 0);

	assert_int_equal(store_exec(s, "DROP TRIGGER fail_ledger", &err), 0);
	assert_int_equal(
	    store_sandbox_end(s, row.id, STORE_DESTROYED, now + 1000, charge_quarter, &got, &err),
	    1);
	assert_int_equal(got.charge_micro, 100);
	assert_int_equal(store_balance_get(s, a.id, &b, &err), 0);
	assert_int_equal(b.reserved_micro, 0);
	assert_int_equal(b.consumed_micro, 100);
	assert_int_equal(store_ledger_check(s, a.id, &err), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_bind_each_type, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cache_reset_between_uses, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_error_mapping, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_write, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tx_end_rolls_back, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_money_rolls_back_mid_transaction, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
