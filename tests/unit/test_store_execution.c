/* store/execution.c: holds, settlement exactly once, release on failure,
 * the ledger check over executions, receipts and key scopes. */
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

static struct store *open_tmp(char path[64])
{
	struct sbx_error err = {0};
	struct store *s;

	snprintf(path, 64, "/tmp/t-store-exec-%d.db", (int)getpid());
	unlink(path);
	s = store_open(path, &err);
	assert_non_null(s);
	return s;
}

static void test_execution_money(void **state)
{
	char path[64];
	struct store *s = open_tmp(path);
	struct store_account a;
	struct store_balance b;
	struct store_execution row = {.runtime = "python",
				      .runner = "mock",
				      .timeout_seconds = 10,
				      .price_micro_per_second = 40};
	struct store_execution got;
	struct sbx_error err = {0};

	assert_int_equal(store_account_create(s, "t", 1000, &a, &err), 0);
	snprintf(row.account_id, sizeof row.account_id, "%s", a.id);

	/* 1. completed: hold 400, charge 40, release 360 */
	snprintf(row.id, sizeof row.id, "sbxr_1");
	assert_int_equal(store_execution_reserve(s, &row, 400, &err), 0);
	assert_int_equal(store_balance_get(s, a.id, &b, &err), 0);
	assert_int_equal(b.reserved_micro, 400);
	assert_int_equal(b.available_micro, 600);
	assert_int_equal(store_ledger_check(s, NULL, &err), 0);
	assert_int_equal(store_execution_settle(s, "sbxr_1", "completed", sbx_wall_ms(), 40,
						"rcpt_1", "{\"exit_code\":3,\"x\":1}", NULL, &err),
			 0);
	assert_int_equal(store_execution_settle(s, "sbxr_1", "completed", sbx_wall_ms(), 40,
						"rcpt_1", "{}", NULL, &err),
			 -1); /* exactly once */
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_int_equal(store_balance_get(s, a.id, &b, &err), 0);
	assert_int_equal(b.reserved_micro, 0);
	assert_int_equal(b.balance_micro, 960);
	assert_int_equal(b.consumed_micro, 40);
	assert_int_equal(store_execution_get(s, a.id, "sbxr_1", &got, &err), 0);
	assert_string_equal(got.response, "{\"exit_code\":3,\"x\":1}");
	assert_string_equal(got.status, "completed");
	free(got.response);
	/* the list reads the exit code from the stored answer */
	{
		struct store_execution *rows;
		size_t n;
		bool more;

		assert_int_equal(store_execution_list(s, a.id, 10, &rows, &n, &more, &err), 0);
		assert_int_equal(n, 1);
		assert_true(rows[0].has_exit_code);
		assert_int_equal(rows[0].exit_code, 3);
		free(rows);
	}
	assert_int_equal(store_execution_get(s, "acct_other", "sbxr_1", &got, &err), -1);

	/* 2. failed before it ran (charge 0): the whole hold comes back, not
	 * visible */
	snprintf(row.id, sizeof row.id, "sbxr_2");
	assert_int_equal(store_execution_reserve(s, &row, 400, &err), 0);
	assert_int_equal(
	    store_execution_settle(s, "sbxr_2", "failed", sbx_wall_ms(), 0, NULL, NULL, NULL, &err),
	    0);
	assert_int_equal(store_balance_get(s, a.id, &b, &err), 0);
	assert_int_equal(b.reserved_micro, 0);
	assert_int_equal(b.balance_micro, 960);
	assert_int_equal(store_execution_get(s, a.id, "sbxr_2", &got, &err), -1);
	/* 2b. broken by the guest: the time it used is charged, at most the
	 * hold, the rest released */
	snprintf(row.id, sizeof row.id, "sbxr_2b");
	assert_int_equal(store_execution_reserve(s, &row, 400, &err), 0);
	assert_int_equal(store_execution_settle(s, "sbxr_2b", "failed", sbx_wall_ms(), 40, NULL,
						NULL, NULL, &err),
			 0);
	assert_int_equal(store_balance_get(s, a.id, &b, &err), 0);
	assert_int_equal(b.reserved_micro, 0);
	assert_int_equal(b.balance_micro, 920);
	assert_int_equal(b.consumed_micro, 80);
	assert_int_equal(store_ledger_check(s, NULL, &err), 0);

	/* 3. not enough credit for the hold */
	snprintf(row.id, sizeof row.id, "sbxr_3");
	assert_int_equal(store_execution_reserve(s, &row, 961, &err), -1);
	assert_int_equal(err.code, SBX_E_INSUFFICIENT_CREDIT);
	assert_int_equal(store_ledger_check(s, NULL, &err), 0);

	/* 4. cut by a daemon crash: the restart releases the whole hold */
	snprintf(row.id, sizeof row.id, "sbxr_4");
	assert_int_equal(store_execution_reserve(s, &row, 400, &err), 0);
	snprintf(row.id, sizeof row.id, "sbxr_5");
	assert_int_equal(store_execution_reserve(s, &row, 400, &err), 0);
	assert_int_equal(store_balance_get(s, a.id, &b, &err), 0);
	assert_int_equal(b.reserved_micro, 800);
	assert_int_equal(store_execution_fail_unfinished(s, sbx_wall_ms(), &err), 2);
	assert_int_equal(store_execution_fail_unfinished(s, sbx_wall_ms(), &err), 0);
	assert_int_equal(store_balance_get(s, a.id, &b, &err), 0);
	assert_int_equal(b.reserved_micro, 0);
	assert_int_equal(b.balance_micro, 920);
	assert_int_equal(store_ledger_check(s, NULL, &err), 0);

	/* receipts are per account */
	char *body, *hash, *sig, *signer;
	assert_int_equal(store_receipt_insert(s, "rcpt_1", a.id, "sbxr_1", "{}", "0xa", "0xb",
					      "0xc", 1, NULL, &err),
			 0);
	assert_int_equal(store_receipt_get(s, a.id, "rcpt_1", &body, &hash, &sig, &signer, &err),
			 0);
	assert_string_equal(signer, "0xc");
	free(body), free(hash), free(sig), free(signer);
	assert_int_equal(
	    store_receipt_get(s, "acct_x", "rcpt_1", &body, &hash, &sig, &signer, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	store_close(s);
	unlink(path);
}

/* The receipt and the settlement commit together: a receipt that cannot be
 * inserted (its id is taken) leaves the run unsettled, the hold held. */
static void test_settle_with_receipt(void **state)
{
	char path[64];
	struct store *s = open_tmp(path);
	struct store_account a;
	struct store_balance b;
	struct store_execution row = {.runtime = "node",
				      .runner = "libvirt",
				      .timeout_seconds = 10,
				      .price_micro_per_second = 40};
	struct store_execution got;
	struct sbx_error err = {0};
	char *body, *hash, *sig, *signer;

	assert_int_equal(store_account_create(s, "t", 1000, &a, &err), 0);
	snprintf(row.account_id, sizeof row.account_id, "%s", a.id);
	snprintf(row.id, sizeof row.id, "sbxr_r1");
	assert_int_equal(store_execution_reserve(s, &row, 400, &err), 0);
	snprintf(row.id, sizeof row.id, "sbxr_r2");
	assert_int_equal(store_execution_reserve(s, &row, 400, &err), 0);

	struct store_receipt r = {.id = "rcpt_r",
				  .account_id = a.id,
				  .body = "{\"b\":1}",
				  .hash = "0xh",
				  .signature = "0xs",
				  .signer = "0xk",
				  .created_at_ms = 5};
	assert_int_equal(store_execution_settle_receipt(s, "sbxr_r1", "completed", sbx_wall_ms(),
							40, &r, "{\"x\":2}", NULL, &err),
			 0);
	assert_int_equal(store_receipt_get(s, a.id, "rcpt_r", &body, &hash, &sig, &signer, &err),
			 0);
	assert_string_equal(body, "{\"b\":1}");
	assert_string_equal(sig, "0xs");
	free(body), free(hash), free(sig), free(signer);
	assert_int_equal(store_execution_get(s, a.id, "sbxr_r1", &got, &err), 0);
	assert_string_equal(got.receipt_id, "rcpt_r");
	assert_string_equal(got.response, "{\"x\":2}");
	free(got.response);

	/* the same receipt id again: nothing of the second settlement stays */
	assert_int_equal(store_execution_settle_receipt(s, "sbxr_r2", "completed", sbx_wall_ms(),
							40, &r, "{}", NULL, &err),
			 -1);
	assert_int_equal(store_balance_get(s, a.id, &b, &err), 0);
	assert_int_equal(b.reserved_micro, 400);
	assert_int_equal(b.consumed_micro, 40);
	assert_int_equal(store_execution_get(s, a.id, "sbxr_r2", &got, &err), 0);
	assert_string_equal(got.status, "running");
	assert_string_equal(got.receipt_id, "");
	free(got.response);
	assert_int_equal(store_execution_settle(s, "sbxr_r2", "failed", sbx_wall_ms(), 0, NULL,
						NULL, NULL, &err),
			 0);
	assert_int_equal(store_ledger_check(s, NULL, &err), 0);
	store_close(s);
	unlink(path);
}

static void test_scopes(void **state)
{
	char path[64], scopes[STORE_SCOPES_MAX];
	struct store *s = open_tmp(path);
	struct store_account a;
	struct store_key k = {.id = "key_1", .prefix = "aas_sk_1", .scopes = "sandboxes keys"}, got;
	struct sbx_error err = {0};

	assert_int_equal(store_account_create(s, "t", 0, &a, &err), 0);
	snprintf(k.account_id, sizeof k.account_id, "%s", a.id);
	assert_int_equal(
	    store_key_insert(
		s, &k, "0000000000000000000000000000000000000000000000000000000000000001", &err),
	    0);
	assert_int_equal(store_key_scopes_get(s, "key_1", scopes, &err), 0);
	assert_string_equal(scopes, "sandboxes keys"); /* as inserted */
	assert_int_equal(store_key_get(s, a.id, "key_1", &got, &err), 0);
	assert_string_equal(got.scopes, "sandboxes keys");
	assert_int_equal(store_key_get(s, "acct_other", "key_1", &got, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_int_equal(store_key_scopes_set(s, "key_1", "usage", &err), 0);
	assert_int_equal(store_key_scopes_get(s, "key_1", scopes, &err), 0);
	assert_string_equal(scopes, "usage");
	assert_int_equal(store_key_scopes_set(s, "key_none", "usage", &err), -1);
	store_close(s);
	unlink(path);
}

/* Stored responses are bounded per account (the newest that fit stay) and
 * in time; other accounts' are untouched; the ledger is not. */
static void test_response_retention(void **state)
{
	char path[64], id[16], body[101];
	struct store *s = open_tmp(path);
	struct store_account a, b;
	struct store_execution row = {.runtime = "sh", .runner = "mock", .timeout_seconds = 1}, got;
	struct store_execution_keep keep = {.account_max_bytes = 250, .ended_before_ms = 0};
	struct sbx_error err = {0};

	memset(body, 'x', 100);
	body[100] = '\0';
	assert_int_equal(store_account_create(s, "a", 1000, &a, &err), 0);
	assert_int_equal(store_account_create(s, "b", 1000, &b, &err), 0);
	/* b: one stored response, ended long ago */
	snprintf(row.account_id, sizeof row.account_id, "%s", b.id);
	snprintf(row.id, sizeof row.id, "sbxr_b");
	assert_int_equal(store_execution_reserve(s, &row, 10, &err), 0);
	assert_int_equal(
	    store_execution_settle(s, "sbxr_b", "completed", 1000, 1, NULL, body, NULL, &err), 0);
	/* a: four of 100 bytes; at most 250 stay: the newest two */
	snprintf(row.account_id, sizeof row.account_id, "%s", a.id);
	for (int i = 0; i < 4; i++) {
		snprintf(id, sizeof id, "sbxr_a%d", i);
		snprintf(row.id, sizeof row.id, "%s", id);
		assert_int_equal(store_execution_reserve(s, &row, 10, &err), 0);
		assert_int_equal(store_execution_settle(s, id, "completed", 2000 + i, 1, NULL, body,
							&keep, &err),
				 0);
	}
	for (int i = 0; i < 4; i++) {
		snprintf(id, sizeof id, "sbxr_a%d", i);
		assert_int_equal(store_execution_get(s, a.id, id, &got, &err), 0);
		if (i < 2)
			assert_null(got.response);
		else
			assert_string_equal(got.response, body);
		free(got.response);
	}
	assert_int_equal(store_execution_get(s, b.id, "sbxr_b", &got, &err), 0);
	assert_non_null(got.response);
	free(got.response);
	/* retention in time: a's newer than 2003 stay, b's (1000) goes */
	assert_int_equal(store_execution_prune(s, 2003, &err), 2); /* a2 and b */
	assert_int_equal(store_execution_get(s, b.id, "sbxr_b", &got, &err), 0);
	assert_null(got.response);
	assert_int_equal(store_execution_get(s, a.id, "sbxr_a3", &got, &err), 0);
	assert_string_equal(got.response, body);
	free(got.response);
	/* a list over answers dropped or not JSON: no exit code, no error */
	{
		struct store_execution *rows;
		size_t n;
		bool more;

		assert_int_equal(store_execution_list(s, a.id, 10, &rows, &n, &more, &err), 0);
		assert_int_equal(n, 4);
		for (size_t i = 0; i < n; i++)
			assert_false(rows[i].has_exit_code);
		free(rows);
	}
	assert_int_equal(store_ledger_check(s, NULL, &err), 0);
	store_close(s);
	unlink(path);
}

/* Migration 5: keys made before the 'keys' scope existed could manage
 * keys, so each gets it and keeps what it had (a database left at
 * version 4 with such keys, reopened). */
static void test_scopes_migration(void **state)
{
	char path[64], scopes[STORE_SCOPES_MAX];
	struct store *s = open_tmp(path);
	struct store_account a;
	struct store_key k = {.prefix = "aas_sk_1"};
	struct sbx_error err = {0};
	sqlite3 *db;

	assert_int_equal(store_account_create(s, "t", 0, &a, &err), 0);
	snprintf(k.account_id, sizeof k.account_id, "%s", a.id);
	snprintf(k.id, sizeof k.id, "key_old_default");
	assert_int_equal(
	    store_key_insert(
		s, &k, "0000000000000000000000000000000000000000000000000000000000000001", &err),
	    0);
	snprintf(k.id, sizeof k.id, "key_old_none");
	assert_int_equal(
	    store_key_insert(
		s, &k, "0000000000000000000000000000000000000000000000000000000000000002", &err),
	    0);
	store_close(s);
	/* what version 4 left: 'sandboxes' (its default) and '' */
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db,
				      "UPDATE api_keys SET scopes = 'sandboxes' WHERE id = "
				      "'key_old_default'; UPDATE api_keys SET scopes = '' WHERE id "
				      "= 'key_old_none';" STORE_PRIV_BACK_TO_SCHEMA_4,
				      NULL, NULL, NULL),
			 SQLITE_OK);
	sqlite3_close(db);
	s = store_open(path, &err);
	assert_non_null(s);
	assert_int_equal(store_key_scopes_get(s, "key_old_default", scopes, &err), 0);
	assert_string_equal(scopes, "sandboxes keys");
	assert_int_equal(store_key_scopes_get(s, "key_old_none", scopes, &err), 0);
	assert_string_equal(scopes, "keys");
	store_close(s);
	unlink(path);
}

/* Rows of `sql` (a count) on a connection of its own. */
static int count(const char *path, const char *sql)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *q = NULL;
	int n = -1;

	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
	if (sqlite3_step(q) == SQLITE_ROW)
		n = sqlite3_column_int(q, 0);
	sqlite3_finalize(q);
	sqlite3_close(db);
	return n;
}

/* Receipts are kept for a time and up to a count per account (the oldest
 * go first), whether they come with an execution's settle or alone (an
 * exec's); other accounts' are untouched; the daemon's start prunes all. */
static void test_receipt_retention(void **state)
{
	char path[64], id[16];
	struct store *s = open_tmp(path);
	struct store_account a, b;
	struct store_receipt_keep keep = {.created_before_ms = 0, .account_max = 3};
	struct sbx_error err = {0};

	assert_int_equal(store_account_create(s, "a", 1000, &a, &err), 0);
	assert_int_equal(store_account_create(s, "b", 1000, &b, &err), 0);
	assert_int_equal(store_receipt_insert(s, "rcpt_b", b.id, "sbx_b", "{}", "0xa", "0xb", "0xc",
					      1000, NULL, &err),
			 0);
	for (int i = 0; i < 5; i++) {
		snprintf(id, sizeof id, "rcpt_a%d", i);
		assert_int_equal(store_receipt_insert(s, id, a.id, "sbx_a", "{}", "0xa", "0xb",
						      "0xc", 2000 + i, &keep, &err),
				 0);
	}
	/* the newest three of a's stay; b's is untouched */
	assert_int_equal(count(path, "SELECT count(*) FROM receipts"), 4);
	char *body, *hash, *sig, *signer;
	assert_int_equal(store_receipt_get(s, a.id, "rcpt_a1", &body, &hash, &sig, &signer, &err),
			 -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_int_equal(store_receipt_get(s, a.id, "rcpt_a4", &body, &hash, &sig, &signer, &err),
			 0);
	free(body), free(hash), free(sig), free(signer);

	/* an execution's settle applies the same keep: past retention goes */
	struct store_execution row = {
	    .id = "sbxr_k", .runtime = "sh", .runner = "mock", .timeout_seconds = 1};
	struct store_receipt_keep rk = {.created_before_ms = 2004, .account_max = 10};
	struct store_execution_keep ek = {.account_max_bytes = 1 << 20, .receipts = &rk};
	struct store_receipt r = {.id = "rcpt_k",
				  .account_id = a.id,
				  .body = "{}",
				  .hash = "0xa",
				  .signature = "0xb",
				  .signer = "0xc",
				  .created_at_ms = 3000};
	snprintf(row.account_id, sizeof row.account_id, "%s", a.id);
	assert_int_equal(store_execution_reserve(s, &row, 10, &err), 0);
	assert_int_equal(
	    store_execution_settle_receipt(s, "sbxr_k", "completed", 3000, 1, &r, "{}", &ek, &err),
	    0);
	/* a's: rcpt_a4 (2004) and rcpt_k; b's */
	assert_int_equal(count(path, "SELECT count(*) FROM receipts"), 3);
	assert_int_equal(store_receipt_prune(s, 2500, &err), 2);
	assert_int_equal(count(path, "SELECT count(*) FROM receipts"), 1);
	assert_int_equal(store_ledger_check(s, NULL, &err), 0);
	store_close(s);
	unlink(path);
}

/* API keys: at most max_active valid keys; revoked ones kept for a time and
 * up to a count; listed a page at a time. */
static void test_key_cap_and_pages(void **state)
{
	char path[64], digest[65];
	struct store *s = open_tmp(path);
	struct store_account a, b;
	struct store_key k = {.prefix = "aas_sk_x", .scopes = "keys"}, *page = NULL;
	struct store_key_keep keep = {.max_active = 3, .revoked_before_ms = 0, .max_revoked = 2};
	struct sbx_error err = {0};
	bool more;
	size_t n;

	assert_int_equal(store_account_create(s, "a", 0, &a, &err), 0);
	assert_int_equal(store_account_create(s, "b", 0, &b, &err), 0);
	snprintf(k.account_id, sizeof k.account_id, "%s", a.id);
	for (int i = 0; i < 4; i++) {
		snprintf(k.id, sizeof k.id, "key_%d", i);
		snprintf(digest, sizeof digest, "%064d", i + 1);
		k.created_at_ms = 1000 + i / 2; /* two share a millisecond */
		int rc = store_key_insert_kept(s, &k, digest, &keep, &err);
		if (i < 3) {
			assert_int_equal(rc, 0);
		} else {
			assert_int_equal(rc, -1); /* the fourth valid key */
			assert_int_equal(err.code, SBX_E_CONCURRENCY_LIMIT);
		}
	}
	/* another account's keys do not count */
	snprintf(k.account_id, sizeof k.account_id, "%s", b.id);
	snprintf(k.id, sizeof k.id, "key_b");
	snprintf(digest, sizeof digest, "%064d", 99);
	assert_int_equal(store_key_insert_kept(s, &k, digest, &keep, &err), 0);
	snprintf(k.account_id, sizeof k.account_id, "%s", a.id);

	/* pages of one, newest first, through a shared millisecond */
	const char *want[] = {"key_2", "key_1", "key_0"};
	const char *after = NULL;
	char cursor[STORE_ID_MAX];
	for (int i = 0; i < 3; i++) {
		assert_int_equal(store_key_list_page(s, a.id, 1, after, &page, &n, &more, &err), 0);
		assert_int_equal(n, 1);
		assert_string_equal(page[0].id, want[i]);
		assert_int_equal(more, i < 2);
		snprintf(cursor, sizeof cursor, "%s", page[0].id);
		after = cursor;
		free(page);
	}
	assert_int_equal(store_key_list_page(s, a.id, 10, NULL, &page, &n, &more, &err), 0);
	assert_int_equal(n, 3);
	assert_false(more);
	free(page);
	assert_int_equal(store_key_list_page(s, a.id, 10, "key_b", &page, &n, &more, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_string_equal(err.param, "starting_after");

	/* revoke all three: new keys can be made, and of the revoked ones only
	 * the two most recently revoked stay (then none past retention) */
	for (int i = 0; i < 3; i++) {
		char kid[16];
		snprintf(kid, sizeof kid, "key_%d", i);
		assert_int_equal(store_key_revoke(s, a.id, kid, &err), 0);
		usleep(2000); /* distinct revoked_at */
	}
	snprintf(k.id, sizeof k.id, "key_new");
	k.created_at_ms = 5000;
	snprintf(digest, sizeof digest, "%064d", 50);
	assert_int_equal(store_key_insert_kept(s, &k, digest, &keep, &err), 0);
	assert_int_equal(count(path, "SELECT count(*) FROM api_keys WHERE revoked_at_ms != 0"), 2);
	assert_int_equal(store_key_get(s, a.id, "key_0", &k, &err), -1);
	keep.revoked_before_ms = INT64_MAX;
	snprintf(k.account_id, sizeof k.account_id, "%s", a.id);
	snprintf(k.id, sizeof k.id, "key_new2");
	snprintf(digest, sizeof digest, "%064d", 51);
	assert_int_equal(store_key_insert_kept(s, &k, digest, &keep, &err), 0);
	assert_int_equal(count(path, "SELECT count(*) FROM api_keys WHERE revoked_at_ms != 0"), 0);
	assert_int_equal(count(path, "SELECT count(*) FROM api_keys"), 3); /* 2 of a, b's */
	store_close(s);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_execution_money),
	    cmocka_unit_test(test_settle_with_receipt),
	    cmocka_unit_test(test_scopes),
	    cmocka_unit_test(test_scopes_migration),
	    cmocka_unit_test(test_response_retention),
	    cmocka_unit_test(test_receipt_retention),
	    cmocka_unit_test(test_key_cap_and_pages),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
