/* store: what is kept of an account's API keys, and their pages. See
 * store.h (store_key_keep, store_key_list_page). */
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
