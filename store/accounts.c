/* store: accounts and their credit (see store.h; the locking rules are
 * store.c's). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "store-priv.h"
#include "store.h"

#define MOD "store"
/* A single credit may not exceed $1e9: keeps every sum far from int64 overflow. */
#define STORE_CREDIT_MAX_MICRO INT64_C(1000000000000000)

/* Copy a caller's string into a fixed field; refuse what does not fit. */
static int store_copy_str(char *dst, size_t dstlen, const char *src)
{
	if (!src || strlen(src) >= dstlen)
		return -1;
	memcpy(dst, src, strlen(src) + 1);
	return 0;
}

int store_no_account(struct sbx_error *err, const char *account_id)
{
	return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such account '%.64s'",
			     account_id ? account_id : "");
}

int store_account_need(struct store *s, const char *account_id, struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	int rc = store_run(s, &q, "SELECT 1 FROM accounts WHERE id = ?1", err, STORE_T(account_id));
	return rc == SQLITE_ROW ? 0 : rc < 0 ? -1 : store_no_account(err, account_id);
}

int store_ledger_insert(struct store *s, const char *account_id, const char *sandbox_id,
			const char *kind, int64_t amount_micro, int64_t now_ms,
			struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	return store_run(s, &q,
			 "INSERT INTO ledger (account_id, sandbox_id, kind, amount_micro,"
			 " created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
			 err, STORE_T(account_id), STORE_T(sandbox_id), STORE_T(kind),
			 STORE_I(amount_micro), STORE_I(now_ms)) < 0
		   ? -1
		   : 0;
}

int store_ledger_snapshot_insert(struct store *s, const char *account_id, const char *snapshot_id,
				 const char *kind, int64_t amount_micro, int64_t now_ms,
				 struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	return store_run(s, &q,
			 "INSERT INTO ledger (account_id, snapshot_id, kind, amount_micro,"
			 " created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
			 err, STORE_T(account_id), STORE_T(snapshot_id), STORE_T(kind),
			 STORE_I(amount_micro), STORE_I(now_ms)) < 0
		   ? -1
		   : 0;
}

int store_account_create(struct store *s, const char *name, int64_t credit_micro,
			 struct store_account *acct, struct sbx_error *err)
{
	struct store_account a = {0};
	if (!name || !*name || store_copy_str(a.name, sizeof a.name, name) < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "name",
				     "the account name must be 1 to %zu characters",
				     sizeof a.name - 1);
	if (credit_micro < 0 || credit_micro > STORE_CREDIT_MAX_MICRO)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "credit",
				     "the opening credit must be between 0 and 1000000000 USD");
	if (sbx_random_id("acct_", 12, a.id, sizeof a.id) < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "cannot generate an account id");
	a.created_at_ms = sbx_wall_ms();

	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		if (store_run(s, &q,
			      "INSERT INTO accounts (id, name, created_at_ms) VALUES (?1, ?2, ?3)",
			      err, STORE_T(a.id), STORE_T(a.name), STORE_I(a.created_at_ms)) < 0)
			goto err_rollback;
	}
	if (credit_micro > 0 &&
	    store_ledger_insert(s, a.id, NULL, "credit", credit_micro, a.created_at_ms, err) < 0)
		goto err_rollback;
	if (store_tx_commit(s, err) < 0)
		goto err_rollback;
	if (acct)
		*acct = a;
	return 0;

err_rollback:
	store_tx_rollback(s);
	return -1;
}

static void store_account_from_stmt(sqlite3_stmt *q, struct store_account *a)
{
	memset(a, 0, sizeof *a);
	store_copy_col(a->id, sizeof a->id, q, 0);
	store_copy_col(a->name, sizeof a->name, q, 1);
	a->created_at_ms = sqlite3_column_int64(q, 2);
}

int store_account_get(struct store *s, const char *account_id, struct store_account *acct,
		      struct sbx_error *err)
{
	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	int rc = store_run(s, &q, "SELECT id, name, created_at_ms FROM accounts WHERE id = ?1", err,
			   STORE_T(account_id));
	if (rc < 0)
		return -1;
	if (rc == SQLITE_DONE)
		return store_no_account(err, account_id);
	store_account_from_stmt(q, acct);
	return 0;
}

int store_credit_add(struct store *s, const char *account_id, int64_t amount_micro,
		     struct sbx_error *err)
{
	if (amount_micro <= 0 || amount_micro > STORE_CREDIT_MAX_MICRO)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "credit",
				     "a credit must be more than 0 and at most 1000000000 USD");
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	if (store_account_need(s, account_id, err) < 0)
		goto err_rollback;
	if (store_ledger_insert(s, account_id, NULL, "credit", amount_micro, sbx_wall_ms(), err) <
	    0)
		goto err_rollback;
	return store_tx_end(s, 0, err);

err_rollback:
	store_tx_rollback(s);
	return -1;
}

int store_collect(struct store *s, sqlite3_stmt *q, size_t elem_size, size_t max_rows,
		  store_row_fn decode, void **out, size_t *n, struct sbx_error *err)
{
	_cleanup_free_ char *arr = NULL;
	size_t len = 0, cap = 0;
	int rc = SQLITE_DONE;
	while (len < max_rows && (rc = sqlite3_step(q)) == SQLITE_ROW) {
		if (len == cap) {
			size_t ncap = cap ? cap * 2 : 8;
			char *p = realloc(arr, ncap * elem_size);
			if (!p)
				return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
			arr = p;
			cap = ncap;
		}
		decode(q, arr + len * elem_size);
		len++;
	}
	if (len < max_rows && rc != SQLITE_DONE)
		return store_db_error(s, "collect", err);
	*out = TAKE_PTR(arr);
	*n = len;
	return 0;
}

static void store_account_decode(sqlite3_stmt *q, void *elem)
{
	store_account_from_stmt(q, elem);
}

int store_account_list(struct store *s, struct store_account **out, size_t *n,
		       struct sbx_error *err)
{
	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_bind_args(s, &q,
			    "SELECT id, name, created_at_ms FROM accounts"
			    " ORDER BY created_at_ms, rowid",
			    NULL, 0, err) < 0)
		return -1;
	return store_collect(s, q, sizeof **out, SIZE_MAX, store_account_decode, (void **)out, n,
			     err);
}
