/* store: executions, receipts and key scopes. See store.h. */
#include <stdio.h>
#include <string.h>

#include "store-priv.h"
#include "store.h"

#define MOD "store"

static char *sx_dup(sqlite3_stmt *q, int col)
{
	const unsigned char *t = sqlite3_column_text(q, col);
	char *d;

	if (!t)
		return NULL;
	d = strdup((const char *)t);
	if (!d)
		abort();
	return d;
}

static int sx_ledger(struct store *s, const char *account_id, const char *execution_id,
		     const char *kind, int64_t amount, int64_t now, struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;

	if (amount == 0 && strcmp(kind, "hold") != 0)
		return 0;
	return store_run(s, &q,
			 "INSERT INTO ledger (account_id, execution_id, kind, amount_micro,"
			 " created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
			 err, STORE_T(account_id), STORE_T(execution_id), STORE_T(kind),
			 STORE_I(amount), STORE_I(now)) < 0
		   ? -1
		   : 0;
}

int store_execution_reserve(struct store *s, const struct store_execution *row, int64_t hold_micro,
			    struct sbx_error *err)
{
	int64_t now = sbx_wall_ms(), available;

	if (hold_micro < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "negative hold");
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	if (store_available(s, row->account_id, &available, err) < 0)
		goto err_rollback;
	if (available < hold_micro) {
		sbx_error_set(err, SBX_E_INSUFFICIENT_CREDIT, NULL,
			      "this execution needs %lld micro-USD reserved for its timeout and "
			      "%lld are available; add credit or lower timeout_seconds",
			      (long long)hold_micro, (long long)(available < 0 ? 0 : available));
		goto err_rollback;
	}
	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		if (store_run(
			s, &q,
			"INSERT INTO executions (id, account_id, runtime, runner, status,"
			" timeout_seconds, price_micro_per_second, requested_at_ms, hold_micro,"
			" metadata) VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6, ?7, ?8, ?9)",
			err, STORE_T(row->id), STORE_T(row->account_id), STORE_T(row->runtime),
			STORE_T(row->runner), STORE_I(row->timeout_seconds),
			STORE_I(row->price_micro_per_second),
			STORE_I(row->requested_at_ms ? row->requested_at_ms : now),
			STORE_I(hold_micro), STORE_T(row->metadata[0] ? row->metadata : "{}")) < 0)
			goto err_rollback;
	}
	if (sx_ledger(s, row->account_id, row->id, "hold", hold_micro, now, err) < 0)
		goto err_rollback;
	return store_tx_end(s, 0, err);

err_rollback:
	store_tx_rollback(s);
	return -1;
}

/* Apply a receipt keep to an account's receipts inside the open write
 * transaction. 0 or -1. */
static int sx_receipts_keep(struct store *s, const char *account,
			    const struct store_receipt_keep *keep, struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q1 = NULL, *q2 = NULL;

	return store_run(s, &q1,
			 "DELETE FROM receipts WHERE account_id = ?1 AND created_at_ms < ?2", err,
			 STORE_T(account), STORE_I(keep->created_before_ms)) < 0 ||
		       store_run(s, &q2,
				 "DELETE FROM receipts WHERE rowid IN (SELECT rowid FROM receipts"
				 " WHERE account_id = ?1 ORDER BY created_at_ms DESC, rowid DESC"
				 " LIMIT -1 OFFSET ?2)",
				 err, STORE_T(account),
				 STORE_I(keep->account_max < 0 ? 0 : keep->account_max)) < 0
		   ? -1
		   : 0;
}

static int sx_settle(struct store *s, const char *id, const char *status, int64_t ended_at_ms,
		     int64_t charge_micro, const char *receipt_id, const struct store_receipt *rcpt,
		     const char *response, const struct store_execution_keep *keep,
		     struct sbx_error *err)
{
	char account[STORE_ID_MAX];
	int64_t hold, now = sbx_wall_ms();
	if (strcmp(status, "failed") != 0 && strcmp(status, "completed") != 0 &&
	    strcmp(status, "timed_out") != 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "bad execution status");
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	if (rcpt) {
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		if (store_run(
			s, &q,
			"INSERT INTO receipts (id, account_id, subject_id, body, hash, signature,"
			" signer, created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
			err, STORE_T(rcpt->id), STORE_T(rcpt->account_id), STORE_T(id),
			STORE_T(rcpt->body), STORE_T(rcpt->hash), STORE_T(rcpt->signature),
			STORE_T(rcpt->signer), STORE_I(rcpt->created_at_ms)) < 0)
			goto err_rollback;
		receipt_id = rcpt->id;
	}
	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		int rc = store_run(s, &q,
				   "SELECT account_id, hold_micro FROM executions WHERE id = ?1"
				   " AND status = 'running'",
				   err, STORE_T(id));
		if (rc < 0)
			goto err_rollback;
		if (rc == SQLITE_DONE) {
			sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no running execution '%.40s'",
				      id);
			goto err_rollback;
		}
		store_copy_col(account, sizeof account, q, 0);
		hold = sqlite3_column_int64(q, 1);
	}
	if (charge_micro < 0)
		charge_micro = 0;
	if (charge_micro > hold)
		charge_micro = hold;
	if (sx_ledger(s, account, id, "charge", charge_micro, now, err) < 0 ||
	    sx_ledger(s, account, id, "release", hold - charge_micro, now, err) < 0)
		goto err_rollback;
	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		if (store_run(
			s, &q,
			"UPDATE executions SET status = ?2, ended_at_ms = ?3, charge_micro = ?4,"
			" receipt_id = ?5, response = ?6, response_bytes = ?7 WHERE id = ?1",
			err, STORE_T(id), STORE_T(status), STORE_I(ended_at_ms),
			STORE_I(charge_micro), STORE_T(receipt_id), STORE_T(response),
			STORE_I(response ? strlen(response) : 0)) < 0)
			goto err_rollback;
	}
	if (keep) {
		_cleanup_reset_ sqlite3_stmt *q1 = NULL, *q2 = NULL;
		/* the newest responses whose running total fits stay */
		if (store_run(
			s, &q1,
			"UPDATE executions SET response = NULL, response_bytes = 0"
			" WHERE account_id = ?1 AND response IS NOT NULL AND ended_at_ms < ?2",
			err, STORE_T(account), STORE_I(keep->ended_before_ms)) < 0 ||
		    store_run(
			s, &q2,
			"UPDATE executions SET response = NULL, response_bytes = 0 WHERE id IN"
			" (SELECT id FROM (SELECT id, SUM(response_bytes) OVER"
			"  (ORDER BY ended_at_ms DESC, rowid DESC) AS total FROM executions"
			"  WHERE account_id = ?1 AND response IS NOT NULL) WHERE total > ?2)",
			err, STORE_T(account),
			STORE_I((int64_t)SBX_MIN(keep->account_max_bytes, (uint64_t)INT64_MAX))) <
			0)
			goto err_rollback;
		if (keep->receipts && sx_receipts_keep(s, account, keep->receipts, err) < 0)
			goto err_rollback;
	}
	return store_tx_end(s, 0, err);

err_rollback:
	store_tx_rollback(s);
	return -1;
}

int store_execution_settle(struct store *s, const char *id, const char *status, int64_t ended_at_ms,
			   int64_t charge_micro, const char *receipt_id, const char *response,
			   const struct store_execution_keep *keep, struct sbx_error *err)
{
	return sx_settle(s, id, status, ended_at_ms, charge_micro, receipt_id, NULL, response, keep,
			 err);
}

int store_execution_settle_receipt(struct store *s, const char *id, const char *status,
				   int64_t ended_at_ms, int64_t charge_micro,
				   const struct store_receipt *receipt, const char *response,
				   const struct store_execution_keep *keep, struct sbx_error *err)
{
	return sx_settle(s, id, status, ended_at_ms, charge_micro, NULL, receipt, response, keep,
			 err);
}

/* The ids of running executions, at most max, into ids[]. */
static int sx_running_ids(struct store *s, char (*ids)[STORE_ID_MAX], int max,
			  struct sbx_error *err)
{
	int n = 0, rc;

	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	rc = store_run(s, &q, "SELECT id FROM executions WHERE status = 'running' LIMIT ?1", err,
		       STORE_I(max));
	while (rc == SQLITE_ROW && n < max) {
		store_copy_col(ids[n++], STORE_ID_MAX, q, 0);
		rc = sqlite3_step(q);
	}
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		return -1;
	return n;
}

int store_execution_fail_unfinished(struct store *s, int64_t now_ms, struct sbx_error *err)
{
	char ids[64][STORE_ID_MAX];
	int n, total = 0;

	do {
		n = sx_running_ids(s, ids, 64, err);
		if (n < 0)
			return -1;
		for (int i = 0; i < n; i++) {
			if (store_execution_settle(s, ids[i], "failed", now_ms, 0, NULL, NULL, NULL,
						   err) < 0)
				return -1;
			total++;
		}
	} while (n == 64);
	return total;
}

int store_execution_prune(struct store *s, int64_t ended_before_ms, struct sbx_error *err)
{
	STORE_LOCK(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_run(s, &q,
		      "UPDATE executions SET response = NULL, response_bytes = 0"
		      " WHERE response IS NOT NULL AND ended_at_ms < ?1",
		      err, STORE_I(ended_before_ms)) < 0)
		return -1;
	return sqlite3_changes(s->db);
}

/* The columns EXECUTION_COLS of the row at q into out (response NULL). */
#define EXECUTION_COLS                                                                             \
	"id, account_id, runtime, runner, status, timeout_seconds, price_micro_per_second,"        \
	" requested_at_ms, ended_at_ms, hold_micro, charge_micro, receipt_id"
static void execution_row_read(sqlite3_stmt *q, struct store_execution *out)
{
	memset(out, 0, sizeof(*out));
	store_copy_col(out->id, sizeof out->id, q, 0);
	store_copy_col(out->account_id, sizeof out->account_id, q, 1);
	store_copy_col(out->runtime, sizeof out->runtime, q, 2);
	store_copy_col(out->runner, sizeof out->runner, q, 3);
	store_copy_col(out->status, sizeof out->status, q, 4);
	out->timeout_seconds = sqlite3_column_int(q, 5);
	out->price_micro_per_second = sqlite3_column_int64(q, 6);
	out->requested_at_ms = sqlite3_column_int64(q, 7);
	out->ended_at_ms = sqlite3_column_int64(q, 8);
	out->hold_micro = sqlite3_column_int64(q, 9);
	out->charge_micro = sqlite3_column_int64(q, 10);
	store_copy_col(out->receipt_id, sizeof out->receipt_id, q, 11);
}

int store_execution_get(struct store *s, const char *account_id, const char *id,
			struct store_execution *out, struct sbx_error *err)
{
	int rc;

	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	rc = store_run(
	    s, &q,
	    "SELECT " EXECUTION_COLS
	    ", response FROM executions WHERE id = ?1 AND account_id = ?2 AND status != 'failed'",
	    err, STORE_T(id), STORE_T(account_id));
	if (rc < 0)
		return -1;
	if (rc == SQLITE_DONE)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such execution '%.40s'", id);
	execution_row_read(q, out);
	out->response = sx_dup(q, 12);
	return 0;
}

int store_execution_list(struct store *s, const char *account_id, int limit,
			 struct store_execution **out, size_t *n, bool *has_more,
			 struct sbx_error *err)
{
	struct store_execution *rows;
	size_t count = 0;
	int rc;

	*out = NULL;
	*n = 0;
	*has_more = false;
	if (limit < 1 || limit > 100)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "limit",
				     "limit must be between 1 and 100");
	rows = calloc((size_t)limit, sizeof(*rows));
	if (!rows)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	/* one more than asked: has_more without a count */
	/* the exit code from the stored answer (at most
	 * execution_store_max_bytes of JSON per row: bounded by `limit`) */
	rc = store_run(s, &q,
		       "SELECT " EXECUTION_COLS ", CASE WHEN json_valid(CAST(response AS TEXT))"
		       " THEN json_extract(CAST(response AS TEXT), '$.exit_code') END"
		       " FROM executions WHERE account_id = ?1"
		       " ORDER BY requested_at_ms DESC, id DESC LIMIT ?2",
		       err, STORE_T(account_id), STORE_I((int64_t)limit + 1));
	while (rc == SQLITE_ROW) {
		if (count == (size_t)limit) {
			*has_more = true;
			break;
		}
		execution_row_read(q, &rows[count]);
		if (sqlite3_column_type(q, 12) == SQLITE_INTEGER) {
			rows[count].has_exit_code = true;
			rows[count].exit_code = sqlite3_column_int(q, 12);
		}
		count++;
		rc = sqlite3_step(q);
		if (rc != SQLITE_ROW && rc != SQLITE_DONE)
			rc = store_db_error(s, "step", err);
	}
	if (rc < 0) {
		free(rows);
		return -1;
	}
	*out = rows;
	*n = count;
	return 0;
}

int store_receipt_insert(struct store *s, const char *id, const char *account_id,
			 const char *subject_id, const char *body, const char *hash,
			 const char *signature, const char *signer, int64_t created_at_ms,
			 const struct store_receipt_keep *keep, struct sbx_error *err)
{
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		if (store_run(
			s, &q,
			"INSERT INTO receipts (id, account_id, subject_id, body, hash, signature,"
			" signer, created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
			err, STORE_T(id), STORE_T(account_id), STORE_T(subject_id), STORE_T(body),
			STORE_T(hash), STORE_T(signature), STORE_T(signer),
			STORE_I(created_at_ms)) < 0)
			goto err_rollback;
	}
	if (keep && sx_receipts_keep(s, account_id, keep, err) < 0)
		goto err_rollback;
	return store_tx_end(s, 0, err);

err_rollback:
	store_tx_rollback(s);
	return -1;
}

int store_receipt_prune(struct store *s, int64_t created_before_ms, struct sbx_error *err)
{
	STORE_LOCK(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_run(s, &q, "DELETE FROM receipts WHERE created_at_ms < ?1", err,
		      STORE_I(created_before_ms)) < 0)
		return -1;
	return sqlite3_changes(s->db);
}

int store_receipt_get(struct store *s, const char *account_id, const char *id, char **body,
		      char **hash, char **signature, char **signer, struct sbx_error *err)
{
	int rc;

	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	rc = store_run(s, &q,
		       "SELECT body, hash, signature, signer FROM receipts"
		       " WHERE id = ?1 AND account_id = ?2",
		       err, STORE_T(id), STORE_T(account_id));
	if (rc < 0)
		return -1;
	if (rc == SQLITE_DONE)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such receipt '%.40s'", id);
	*body = sx_dup(q, 0);
	*hash = sx_dup(q, 1);
	*signature = sx_dup(q, 2);
	*signer = sx_dup(q, 3);
	return 0;
}

int store_key_scopes_get(struct store *s, const char *key_id, char out[STORE_SCOPES_MAX],
			 struct sbx_error *err)
{
	int rc;

	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	rc = store_run(s, &q, "SELECT scopes FROM api_keys WHERE id = ?1", err, STORE_T(key_id));
	if (rc < 0)
		return -1;
	if (rc == SQLITE_DONE)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such key '%.40s'", key_id);
	store_copy_col(out, STORE_SCOPES_MAX, q, 0);
	return 0;
}

int store_key_scopes_set(struct store *s, const char *key_id, const char *scopes,
			 struct sbx_error *err)
{

	if (strlen(scopes) >= STORE_SCOPES_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "scope", "too many scopes");
	STORE_LOCK(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_run(s, &q, "UPDATE api_keys SET scopes = ?2 WHERE id = ?1", err, STORE_T(key_id),
		      STORE_T(scopes)) < 0)
		return -1;
	if (sqlite3_changes(s->db) == 0)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such key '%.40s'", key_id);
	return 0;
}
