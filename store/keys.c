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
		_cleanup_stmt_ sqlite3_stmt *q = NULL;
		if (store_prepare(s,
				  "SELECT count(*) FROM api_keys WHERE account_id = ?1"
				  " AND revoked_at_ms = 0",
				  &q, err) < 0)
			return -1;
		store_bind_text(q, 1, account_id);
		if (store_step_row(s, q, err) < 0)
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
	_cleanup_stmt_ sqlite3_stmt *q1 = NULL, *q2 = NULL;
	if (store_prepare(s,
			  "DELETE FROM api_keys WHERE account_id = ?1 AND revoked_at_ms != 0"
			  " AND revoked_at_ms < ?2",
			  &q1, err) < 0)
		return -1;
	store_bind_text(q1, 1, account_id);
	sqlite3_bind_int64(q1, 2, keep->revoked_before_ms);
	if (store_step_done(s, q1, err) < 0)
		return -1;
	if (store_prepare(s,
			  "DELETE FROM api_keys WHERE rowid IN (SELECT rowid FROM api_keys"
			  " WHERE account_id = ?1 AND revoked_at_ms != 0"
			  " ORDER BY revoked_at_ms DESC, rowid DESC LIMIT -1 OFFSET ?2)",
			  &q2, err) < 0)
		return -1;
	store_bind_text(q2, 1, account_id);
	sqlite3_bind_int(q2, 2, keep->max_revoked < 0 ? 0 : keep->max_revoked);
	return store_step_done(s, q2, err);
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
		_cleanup_stmt_ sqlite3_stmt *q = NULL;
		if (store_prepare(s,
				  "SELECT created_at_ms, rowid FROM api_keys WHERE id = ?1"
				  " AND account_id = ?2",
				  &q, err) < 0)
			return -1;
		store_bind_text(q, 1, starting_after);
		store_bind_text(q, 2, account_id);
		int rc = sqlite3_step(q);
		if (rc == SQLITE_DONE)
			return sbx_error_set(err, SBX_E_NOT_FOUND, "starting_after",
					     "no such API key '%.64s'", starting_after);
		if (rc != SQLITE_ROW)
			return store_db_error(s, "step", err);
		cursor_ts = sqlite3_column_int64(q, 0);
		cursor_row = sqlite3_column_int64(q, 1);
	}
	_cleanup_stmt_ sqlite3_stmt *q = NULL;
	if (store_prepare(s,
			  "SELECT id, account_id, prefix, created_at_ms, revoked_at_ms, scopes"
			  " FROM api_keys WHERE account_id = ?1 AND (?4 = 0 OR created_at_ms < ?2"
			  " OR (created_at_ms = ?2 AND rowid < ?3))"
			  " ORDER BY created_at_ms DESC, rowid DESC LIMIT ?5",
			  &q, err) < 0)
		return -1;
	store_bind_text(q, 1, account_id);
	sqlite3_bind_int64(q, 2, cursor_ts);
	sqlite3_bind_int64(q, 3, cursor_row);
	sqlite3_bind_int(q, 4, cursor);
	sqlite3_bind_int(q, 5, limit + 1);
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
	int found = store_account_exists(s, key->account_id, err);
	if (found < 0)
		goto err_rollback;
	if (found == 0) {
		sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such account '%.64s'",
			      key->account_id);
		goto err_rollback;
	}
	if (keep && store_key_keep_locked(s, key->account_id, keep, err) < 0)
		goto err_rollback;
	{
		_cleanup_stmt_ sqlite3_stmt *q = NULL;
		if (store_prepare(s,
				  "INSERT INTO api_keys (id, account_id, digest, prefix,"
				  " created_at_ms, revoked_at_ms, scopes)"
				  " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
				  &q, err) < 0)
			goto err_rollback;
		store_bind_text(q, 1, key->id);
		store_bind_text(q, 2, key->account_id);
		store_bind_text(q, 3, digest_hex);
		store_bind_text(q, 4, key->prefix);
		sqlite3_bind_int64(q, 5, key->created_at_ms ? key->created_at_ms : sbx_wall_ms());
		sqlite3_bind_int64(q, 6, key->revoked_at_ms);
		store_bind_text(q, 7, key->scopes);
		if (store_step_done(s, q, err) < 0)
			goto err_rollback;
	}
	if (store_tx_commit(s, err) < 0)
		goto err_rollback;
	return 0;

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
	if (store_prepare_cached(
		s,
		"SELECT id, account_id, prefix, created_at_ms, revoked_at_ms, scopes,"
		" digest FROM api_keys WHERE digest = ?1",
		&q, err) < 0)
		return -1;
	store_bind_text(q, 1, digest_hex);
	int rc = sqlite3_step(q);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return store_db_error(s, "key find", err);
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
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	{
		_cleanup_stmt_ sqlite3_stmt *q = NULL;
		/* Revoking twice keeps the first revocation time. */
		if (store_prepare(s,
				  "UPDATE api_keys SET revoked_at_ms = CASE WHEN revoked_at_ms = 0"
				  " THEN ?3 ELSE revoked_at_ms END"
				  " WHERE id = ?1 AND (?2 IS NULL OR account_id = ?2)",
				  &q, err) < 0)
			goto err_rollback;
		store_bind_text(q, 1, key_id);
		store_bind_text(q, 2, account_id);
		sqlite3_bind_int64(q, 3, sbx_wall_ms());
		if (store_step_done(s, q, err) < 0)
			goto err_rollback;
		if (sqlite3_changes(s->db) == 0) {
			sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such key '%.64s'",
				      key_id ? key_id : "");
			goto err_rollback;
		}
	}
	if (store_tx_commit(s, err) < 0)
		goto err_rollback;
	return 0;

err_rollback:
	store_tx_rollback(s);
	return -1;
}

int store_key_get(struct store *s, const char *account_id, const char *key_id,
		  struct store_key *key, struct sbx_error *err)
{
	STORE_LOCK(s);
	_cleanup_stmt_ sqlite3_stmt *q = NULL;
	if (store_prepare(s,
			  "SELECT id, account_id, prefix, created_at_ms, revoked_at_ms, scopes"
			  " FROM api_keys WHERE id = ?1 AND account_id = ?2",
			  &q, err) < 0)
		return -1;
	store_bind_text(q, 1, key_id);
	store_bind_text(q, 2, account_id);
	int rc = sqlite3_step(q);
	if (rc == SQLITE_DONE)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such key '%.64s'",
				     key_id ? key_id : "");
	if (rc != SQLITE_ROW)
		return store_db_error(s, "key get", err);
	store_key_from_stmt(q, key);
	return 0;
}

int store_key_list(struct store *s, const char *account_id, struct store_key **out, size_t *n,
		   struct sbx_error *err)
{
	STORE_READ(s);
	_cleanup_stmt_ sqlite3_stmt *q = NULL;
	if (store_prepare(s,
			  "SELECT id, account_id, prefix, created_at_ms, revoked_at_ms, scopes"
			  " FROM api_keys WHERE account_id = ?1"
			  " ORDER BY created_at_ms DESC, rowid DESC",
			  &q, err) < 0)
		return -1;
	store_bind_text(q, 1, account_id);
	return store_collect(s, q, sizeof **out, SIZE_MAX, store_key_decode, (void **)out, n, err);
}
