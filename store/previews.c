/* store: preview URLs of sandbox ports (store.h "previews", migration 13).
 * Only a token's SHA-256 is stored; the token itself never reaches the
 * store. */
#include <stdio.h>
#include <string.h>

#include "store-priv.h"
#include "store.h"

#define MOD "store"

#define PREVIEW_COLS "id, account_id, sandbox_id, port, created_at_ms, expires_at_ms, revoked_at_ms"

static void preview_decode(sqlite3_stmt *q, void *elem)
{
	struct store_preview *p = elem;
	const unsigned char *t;

	memset(p, 0, sizeof(*p));
	t = sqlite3_column_text(q, 0);
	snprintf(p->id, sizeof p->id, "%s", t ? (const char *)t : "");
	t = sqlite3_column_text(q, 1);
	snprintf(p->account_id, sizeof p->account_id, "%s", t ? (const char *)t : "");
	t = sqlite3_column_text(q, 2);
	snprintf(p->sandbox_id, sizeof p->sandbox_id, "%s", t ? (const char *)t : "");
	p->port = (uint32_t)sqlite3_column_int64(q, 3);
	p->created_at_ms = sqlite3_column_int64(q, 4);
	p->expires_at_ms = sqlite3_column_int64(q, 5);
	p->revoked_at_ms = sqlite3_column_int64(q, 6);
}

static int preview_count_live_locked(struct store *s, const char *sandbox_id, int64_t now, int *n,
				     struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;

	if (store_run(s, &q,
		      "SELECT count(*) FROM previews WHERE sandbox_id = ?1"
		      " AND revoked_at_ms = 0 AND expires_at_ms > ?2",
		      err, STORE_T(sandbox_id), STORE_I(now)) < 0)
		return -1;
	*n = sqlite3_column_int(q, 0);
	return 0;
}

static int preview_insert_locked(struct store *s, const struct store_preview *row,
				 const char *token_hash, int max_live, struct sbx_error *err)
{
	int live = 0;

	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		if (store_run(s, &q,
			      "DELETE FROM previews WHERE sandbox_id = ?1 AND (expires_at_ms <= ?2"
			      " OR revoked_at_ms != 0)",
			      err, STORE_T(row->sandbox_id), STORE_I(row->created_at_ms)) < 0)
			return -1;
	}
	if (preview_count_live_locked(s, row->sandbox_id, row->created_at_ms, &live, err) < 0)
		return -1;
	if (live >= max_live)
		return sbx_error_set(err, SBX_E_CONCURRENCY_LIMIT, NULL,
				     "this sandbox has %d live previews, the limit "
				     "(max_previews_per_sandbox, GET /v1/limits); revoke one first",
				     live);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	return store_run(s, &q,
			 "INSERT INTO previews (id, account_id, sandbox_id, port, token_hash,"
			 " created_at_ms, expires_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
			 err, STORE_T(row->id), STORE_T(row->account_id), STORE_T(row->sandbox_id),
			 STORE_I(row->port), STORE_T(token_hash), STORE_I(row->created_at_ms),
			 STORE_I(row->expires_at_ms)) < 0
		   ? -1
		   : 0;
}

int store_preview_insert(struct store *s, const struct store_preview *row, const char *token_hash,
			 int max_live, struct sbx_error *err)
{
	if (!token_hash || strlen(token_hash) != 64)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "a preview needs its token's hash");
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	return store_tx_end(s, preview_insert_locked(s, row, token_hash, max_live, err), err);
}

int store_preview_list(struct store *s, const char *account_id, const char *sandbox_id,
		       uint32_t port, int64_t now_ms, size_t max, struct store_preview **out,
		       size_t *n, struct sbx_error *err)
{
	*out = NULL;
	*n = 0;
	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_bind(s, &q,
		       "SELECT " PREVIEW_COLS " FROM previews WHERE sandbox_id = ?1"
		       " AND account_id = ?2 AND (?3 = 0 OR port = ?3) AND revoked_at_ms = 0"
		       " AND expires_at_ms > ?4 ORDER BY created_at_ms DESC, rowid DESC",
		       err, STORE_T(sandbox_id), STORE_T(account_id), STORE_I(port),
		       STORE_I(now_ms)) < 0)
		return -1;
	return store_collect(s, q, sizeof **out, max, preview_decode, (void **)out, n, err);
}

int store_preview_revoke(struct store *s, const char *account_id, const char *sandbox_id,
			 const char *id, int64_t now_ms, struct store_preview *out,
			 struct sbx_error *err)
{
	int n = store_write(s, STORE_WRITE_NEED_CHANGE,
			    "UPDATE previews SET revoked_at_ms = CASE WHEN revoked_at_ms = 0"
			    " THEN ?4 ELSE revoked_at_ms END"
			    " WHERE id = ?1 AND account_id = ?2 AND sandbox_id = ?3",
			    err, STORE_T(id), STORE_T(account_id), STORE_T(sandbox_id),
			    STORE_I(now_ms));

	if (n < 0)
		return -1;
	if (n == 0)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such preview '%.64s'", id);
	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	int rc = store_run(s, &q, "SELECT " PREVIEW_COLS " FROM previews WHERE id = ?1", err,
			   STORE_T(id));
	if (rc < 0)
		return -1;
	if (rc == SQLITE_DONE)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such preview '%.64s'", id);
	preview_decode(q, out);
	return 0;
}

int store_preview_find(struct store *s, const char *token_hash, struct store_preview *out,
		       struct sbx_error *err)
{
	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	int rc = store_run(s, &q, "SELECT " PREVIEW_COLS " FROM previews WHERE token_hash = ?1",
			   err, STORE_T(token_hash));
	if (rc < 0)
		return -1;
	if (rc == SQLITE_DONE)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such preview");
	preview_decode(q, out);
	return 0;
}
