/* store: idempotency keys (see store.h; the locking rules are store.c's). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "store-priv.h"
#include "store.h"

#define MOD "store"

void store_idem_release_row(struct store_idem *row)
{
	if (!row)
		return;
	free(row->response_body);
	row->response_body = NULL;
	row->response_len = 0;
}

/* Read the row of (account, key) into out: 1 found, 0 not, -1 error. */
static int store_idem_read(struct store *s, const char *account_id, const char *key,
			   struct store_idem *out, struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	int rc =
	    store_run(s, &q,
		      "SELECT request_hash, sandbox_id, status, response_status, response_body,"
		      " created_at_ms FROM idempotency_keys WHERE account_id = ?1 AND key = ?2",
		      err, STORE_T(account_id), STORE_T(key));
	if (rc < 0 || rc == SQLITE_DONE)
		return rc < 0 ? -1 : 0;
	memset(out, 0, sizeof(*out));
	store_copy_col(out->request_hash, sizeof(out->request_hash), q, 0);
	store_copy_col(out->sandbox_id, sizeof(out->sandbox_id), q, 1);
	const unsigned char *st = sqlite3_column_text(q, 2);
	out->done = st && strcmp((const char *)st, "done") == 0;
	out->response_status = sqlite3_column_int(q, 3);
	int len = sqlite3_column_bytes(q, 4);
	const void *blob = sqlite3_column_blob(q, 4);
	if (len > 0 && blob) {
		out->response_body = malloc((size_t)len + 1);
		if (!out->response_body)
			return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		memcpy(out->response_body, blob, (size_t)len);
		out->response_body[len] = '\0';
		out->response_len = (size_t)len;
	}
	out->created_at_ms = sqlite3_column_int64(q, 5);
	return 1;
}

int store_idem_claim(struct store *s, const char *account_id, const char *key,
		     const char *request_hash, int64_t now_ms, int64_t keep_ms,
		     struct store_idem *out, struct sbx_error *err)
{
	if (!account_id || !key || !request_hash || !*key || strlen(key) > STORE_IDEM_KEY_MAX ||
	    strlen(request_hash) >= sizeof(out->request_hash))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "Idempotency-Key",
				     "the Idempotency-Key must be 1..%d characters",
				     STORE_IDEM_KEY_MAX);
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	{
		/* A row older than the retention is forgotten: the key is new. */
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		if (store_run(s, &q,
			      "DELETE FROM idempotency_keys WHERE account_id = ?1 AND key = ?2"
			      " AND created_at_ms <= ?3",
			      err, STORE_T(account_id), STORE_T(key),
			      STORE_I(now_ms - keep_ms)) < 0)
			goto err_rollback;
	}
	int found = store_idem_read(s, account_id, key, out, err);
	if (found < 0)
		goto err_rollback;
	if (found) {
		store_tx_rollback(s);
		return 0;
	}
	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		if (store_run(s, &q,
			      "INSERT INTO idempotency_keys (account_id, key, request_hash, status,"
			      " created_at_ms) VALUES (?1, ?2, ?3, 'pending', ?4)",
			      err, STORE_T(account_id), STORE_T(key), STORE_T(request_hash),
			      STORE_I(now_ms)) < 0)
			goto err_rollback;
	}
	if (store_tx_commit(s, err) < 0)
		goto err_rollback;
	memset(out, 0, sizeof(*out));
	snprintf(out->request_hash, sizeof(out->request_hash), "%s", request_hash);
	out->created_at_ms = now_ms;
	return 1;

err_rollback:
	store_idem_release_row(out);
	store_tx_rollback(s);
	return -1;
}

int store_idem_complete(struct store *s, const char *account_id, const char *key,
			const char *sandbox_id, int response_status, const void *body, size_t len,
			struct sbx_error *err)
{
	if (len > STORE_IDEM_BODY_MAX)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "response too large to remember");
	int n = store_write(s, 0,
			    "UPDATE idempotency_keys SET sandbox_id = ?3, response_status = ?4,"
			    " response_body = ?5, status = 'done'"
			    " WHERE account_id = ?1 AND key = ?2 AND status = 'pending'",
			    err, STORE_T(account_id), STORE_T(key), STORE_T(sandbox_id),
			    STORE_I(response_status), STORE_B(body ? body : "", len));
	if (n < 0)
		return -1;
	if (n == 0)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no pending idempotency key");
	return 0;
}

int store_idem_bind(struct store *s, const char *account_id, const char *key,
		    const char *sandbox_id, struct sbx_error *err)
{
	return store_write(s, 0,
			   "UPDATE idempotency_keys SET sandbox_id = ?3"
			   " WHERE account_id = ?1 AND key = ?2 AND status = 'pending'",
			   err, STORE_T(account_id), STORE_T(key), STORE_T(sandbox_id));
}

int store_idem_release(struct store *s, const char *account_id, const char *key,
		       struct sbx_error *err)
{
	return store_write(s, 0,
			   "DELETE FROM idempotency_keys WHERE account_id = ?1 AND key = ?2"
			   " AND status = 'pending'",
			   err, STORE_T(account_id), STORE_T(key));
}

int store_idem_prune(struct store *s, int64_t older_than_ms, struct sbx_error *err)
{
	return store_write(s, 0,
			   "DELETE FROM idempotency_keys WHERE created_at_ms <= ?1"
			   " AND status = 'done'",
			   err, STORE_I(older_than_ms));
}

int store_idem_release_pending(struct store *s, struct sbx_error *err)
{
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	/* Keep a pending key whose sandbox was activated: the create finished
	 * but the daemon died before the answer was remembered; a retry then
	 * gets that sandbox, never a second one. */
	if (store_exec(s,
		       "DELETE FROM idempotency_keys WHERE status = 'pending' AND NOT EXISTS"
		       " (SELECT 1 FROM sandboxes WHERE sandboxes.id = idempotency_keys.sandbox_id"
		       "  AND sandboxes.status NOT IN ('creating', 'aborted'))",
		       err) < 0)
		goto err_rollback;
	return store_tx_end(s, sqlite3_changes(s->db), err);

err_rollback:
	store_tx_rollback(s);
	return -1;
}
