/* store: API keys (found by digest, revoked, listed), what is kept of an
 * account's keys, and their pages. See store.h (store_key_keep,
 * store_key_list_page). */
#include <stdio.h>
#include <string.h>

#include "store-priv.h"
#include "store.h"

#define MOD "store"

int store_key_keep_locked(struct store *s, const char *account_id,
			  const struct store_key_keep *keep, struct sbx_error *err)
{
	int active;

	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		if (store_run(s, &q,
			      "SELECT count(*) FROM api_keys WHERE account_id = ?1"
			      " AND revoked_at_ms = 0",
			      err, STORE_T(account_id)) < 0)
			return -1;
		active = sqlite3_column_int(q, 0);
	}
	if (active >= keep->max_active)
		return sbx_error_set(err, SBX_E_CONCURRENCY_LIMIT, NULL,
				     "this account has %d valid API keys, the limit of %d; revoke "
				     "one before creating another",
				     active, keep->max_active);
	/* revoked keys past retention, then all but the most recently
	 * revoked max_revoked */
	_cleanup_reset_ sqlite3_stmt *q1 = NULL, *q2 = NULL;
	return store_run(s, &q1,
			 "DELETE FROM api_keys WHERE account_id = ?1 AND revoked_at_ms != 0"
			 " AND revoked_at_ms < ?2",
			 err, STORE_T(account_id), STORE_I(keep->revoked_before_ms)) < 0 ||
		       store_run(s, &q2,
				 "DELETE FROM api_keys WHERE rowid IN (SELECT rowid FROM api_keys"
				 " WHERE account_id = ?1 AND revoked_at_ms != 0"
				 " ORDER BY revoked_at_ms DESC, rowid DESC LIMIT -1 OFFSET ?2)",
				 err, STORE_T(account_id),
				 STORE_I(keep->max_revoked < 0 ? 0 : keep->max_revoked)) < 0
		   ? -1
		   : 0;
}

int store_key_list_page(struct store *s, const char *account_id, int limit,
			const char *starting_after, struct store_key **out, size_t *n,
			bool *has_more, struct sbx_error *err)
{
	int64_t cursor_ts = INT64_MAX, cursor_row = 0;
	bool cursor = starting_after != NULL;

	if (limit < 1 || limit > 1000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "limit",
				     "limit must be between 1 and 1000");
	*out = NULL;
	*n = 0;
	*has_more = false;
	STORE_READ(s);
	if (cursor) {
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		int rc = store_run(s, &q,
				   "SELECT created_at_ms, rowid FROM api_keys WHERE id = ?1"
				   " AND account_id = ?2",
				   err, STORE_T(starting_after), STORE_T(account_id));
		if (rc < 0)
			return -1;
		if (rc == SQLITE_DONE)
			return sbx_error_set(err, SBX_E_NOT_FOUND, "starting_after",
					     "no such API key '%.64s'", starting_after);
		cursor_ts = sqlite3_column_int64(q, 0);
		cursor_row = sqlite3_column_int64(q, 1);
	}
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_bind(s, &q,
		       "SELECT id, account_id, prefix, created_at_ms, revoked_at_ms, scopes"
		       " FROM api_keys WHERE account_id = ?1 AND (?4 = 0 OR created_at_ms < ?2"
		       " OR (created_at_ms = ?2 AND rowid < ?3))"
		       " ORDER BY created_at_ms DESC, rowid DESC LIMIT ?5",
		       err, STORE_T(account_id), STORE_I(cursor_ts), STORE_I(cursor_row),
		       STORE_I(cursor), STORE_I(limit + 1)) < 0)
		return -1;
	size_t got = 0;
	if (store_collect(s, q, sizeof **out, (size_t)limit + 1, store_key_decode, (void **)out,
			  &got, err) < 0)
		return -1;
	if (got > (size_t)limit) {
		*has_more = true;
		got = (size_t)limit;
	}
	*n = got;
	return 0;
}

static bool store_is_hex64(const char *d)
{
	if (!d || strlen(d) != 64)
		return false;
	for (size_t i = 0; i < 64; i++) {
		char c = d[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return false;
	}
	return true;
}

int store_key_insert(struct store *s, const struct store_key *key, const char *digest_hex,
		     struct sbx_error *err)
{
	return store_key_insert_kept(s, key, digest_hex, NULL, err);
}

int store_key_insert_kept(struct store *s, const struct store_key *key, const char *digest_hex,
			  const struct store_key_keep *keep, struct sbx_error *err)
{
	if (!key || !*key->id || !*key->account_id)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
				     "a key needs an id and an account");
	if (!store_is_hex64(digest_hex))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
				     "a key digest must be 64 lowercase hex digits");
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	if (store_account_need(s, key->account_id, err) < 0)
		goto err_rollback;
	if (keep && store_key_keep_locked(s, key->account_id, keep, err) < 0)
		goto err_rollback;
	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		if (store_run(s, &q,
			      "INSERT INTO api_keys (id, account_id, digest, prefix,"
			      " created_at_ms, revoked_at_ms, scopes)"
			      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
			      err, STORE_T(key->id), STORE_T(key->account_id), STORE_T(digest_hex),
			      STORE_T(key->prefix),
			      STORE_I(key->created_at_ms ? key->created_at_ms : sbx_wall_ms()),
			      STORE_I(key->revoked_at_ms), STORE_T(key->scopes)) < 0)
			goto err_rollback;
	}
	return store_tx_end(s, 0, err);

err_rollback:
	store_tx_rollback(s);
	return -1;
}

static void store_key_from_stmt(sqlite3_stmt *q, struct store_key *k)
{
	memset(k, 0, sizeof *k);
	store_copy_col(k->id, sizeof k->id, q, 0);
	store_copy_col(k->account_id, sizeof k->account_id, q, 1);
	store_copy_col(k->prefix, sizeof k->prefix, q, 2);
	k->created_at_ms = sqlite3_column_int64(q, 3);
	k->revoked_at_ms = sqlite3_column_int64(q, 4);
	store_copy_col(k->scopes, sizeof k->scopes, q, 5);
}

void store_key_decode(sqlite3_stmt *q, void *elem)
{
	store_key_from_stmt(q, elem);
}

int store_key_find(struct store *s, const char *digest_hex, struct store_key *key,
		   struct sbx_error *err)
{
	if (!store_is_hex64(digest_hex))
		return sbx_error_set(err, SBX_E_AUTHENTICATION, NULL,
				     "invalid api key; pass a valid key as 'Bearer aas_sk_...'");
	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	int rc = store_run(s, &q,
			   "SELECT id, account_id, prefix, created_at_ms, revoked_at_ms, scopes,"
			   " digest FROM api_keys WHERE digest = ?1",
			   err, STORE_T(digest_hex));
	if (rc < 0)
		return -1;
	const unsigned char *stored = rc == SQLITE_ROW ? sqlite3_column_text(q, 6) : NULL;
	/* The index found it; accept only after a constant-time comparison. */
	if (!stored || sqlite3_column_bytes(q, 6) != 64 || !sbx_ct_equal(stored, digest_hex, 64))
		return sbx_error_set(err, SBX_E_AUTHENTICATION, NULL,
				     "invalid api key; pass a valid key as 'Bearer aas_sk_...'");
	struct store_key k;
	store_key_from_stmt(q, &k);
	if (k.revoked_at_ms != 0)
		return sbx_error_set(err, SBX_E_AUTHENTICATION, NULL,
				     "this api key has been revoked; use another key");
	if (key)
		*key = k;
	return 0;
}

int store_key_revoke(struct store *s, const char *account_id, const char *key_id,
		     struct sbx_error *err)
{
	/* Revoking twice keeps the first revocation time. */
	int n = store_write(s, STORE_WRITE_NEED_CHANGE,
			    "UPDATE api_keys SET revoked_at_ms = CASE WHEN revoked_at_ms = 0"
			    " THEN ?3 ELSE revoked_at_ms END"
			    " WHERE id = ?1 AND (?2 IS NULL OR account_id = ?2)",
			    err, STORE_T(key_id), STORE_T(account_id), STORE_I(sbx_wall_ms()));
	if (n == 0)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such key '%.64s'",
				     key_id ? key_id : "");
	return n < 0 ? -1 : 0;
}

int store_key_get(struct store *s, const char *account_id, const char *key_id,
		  struct store_key *key, struct sbx_error *err)
{
	STORE_LOCK(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	int rc = store_run(s, &q,
			   "SELECT id, account_id, prefix, created_at_ms, revoked_at_ms, scopes"
			   " FROM api_keys WHERE id = ?1 AND account_id = ?2",
			   err, STORE_T(key_id), STORE_T(account_id));
	if (rc < 0)
		return -1;
	if (rc == SQLITE_DONE)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such key '%.64s'",
				     key_id ? key_id : "");
	store_key_from_stmt(q, key);
	return 0;
}

int store_key_list(struct store *s, const char *account_id, struct store_key **out, size_t *n,
		   struct sbx_error *err)
{
	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_bind(s, &q,
		       "SELECT id, account_id, prefix, created_at_ms, revoked_at_ms, scopes"
		       " FROM api_keys WHERE account_id = ?1"
		       " ORDER BY created_at_ms DESC, rowid DESC",
		       err, STORE_T(account_id)) < 0)
		return -1;
	return store_collect(s, q, sizeof **out, SIZE_MAX, store_key_decode, (void **)out, n, err);
}
