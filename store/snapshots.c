/* store: snapshots of sandboxes' disks (store.h "snapshots", migration
 * 14) and their storage charges: each settle is a hold and its charge,
 * linked to the snapshot, in the transaction that moves billed_until_ms
 * (and, for the last one, the row to 'deleted'), so a period is charged
 * once. */
#include <stdio.h>
#include <string.h>

#include "store-priv.h"
#include "store.h"

#define MOD "store"

#define SNAP_COLS                                                                                  \
	"id, account_id, name, sandbox_id, host, disk_gib, bytes, status,"                         \
	" price_micro_per_gib_hour, charge_micro, created_at_ms, billed_until_ms, deleted_at_ms"

static const char *const snap_status_names[] = {
    [STORE_SNAP_CREATING] = "creating",
    [STORE_SNAP_READY] = "ready",
    [STORE_SNAP_DELETING] = "deleting",
    [STORE_SNAP_DELETED] = "deleted",
};

const char *store_snapshot_status_name(enum store_snapshot_status st)
{
	return (size_t)st < SBX_ARRAY_SIZE(snap_status_names) ? snap_status_names[st] : "deleted";
}

static enum store_snapshot_status snap_status_parse(const unsigned char *t)
{
	for (size_t i = 0; t && i < SBX_ARRAY_SIZE(snap_status_names); i++)
		if (strcmp((const char *)t, snap_status_names[i]) == 0)
			return (enum store_snapshot_status)i;
	return STORE_SNAP_DELETED;
}

static void snap_decode(sqlite3_stmt *q, void *elem)
{
	struct store_snapshot *p = elem;

	memset(p, 0, sizeof(*p));
	store_copy_col(p->id, sizeof p->id, q, 0);
	store_copy_col(p->account_id, sizeof p->account_id, q, 1);
	store_copy_col(p->name, sizeof p->name, q, 2);
	store_copy_col(p->sandbox_id, sizeof p->sandbox_id, q, 3);
	store_copy_col(p->host, sizeof p->host, q, 4);
	p->disk_gib = sqlite3_column_int64(q, 5);
	p->bytes = sqlite3_column_int64(q, 6);
	p->status = snap_status_parse(sqlite3_column_text(q, 7));
	p->price_micro_per_gib_hour = sqlite3_column_int64(q, 8);
	p->charge_micro = sqlite3_column_int64(q, 9);
	p->created_at_ms = sqlite3_column_int64(q, 10);
	p->billed_until_ms = sqlite3_column_int64(q, 11);
	p->deleted_at_ms = sqlite3_column_int64(q, 12);
}

/* The account's snapshots that count against its caps: how many are not
 * deleted, and the bytes of the ready ones. */
static int snap_usage_locked(struct store *s, const char *account_id, int *count, int64_t *bytes,
			     struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;

	if (store_run(s, &q,
		      "SELECT count(*), COALESCE(SUM(CASE status WHEN 'ready' THEN bytes END), 0)"
		      " FROM snapshots WHERE account_id = ?1 AND status != 'deleted'",
		      err, STORE_T(account_id)) < 0)
		return -1;
	*count = sqlite3_column_int(q, 0);
	*bytes = sqlite3_column_int64(q, 1);
	return 0;
}

static int snap_insert_locked(struct store *s, const struct store_snapshot *row, int max_count,
			      int64_t max_bytes, struct sbx_error *err)
{
	int count = 0;
	int64_t bytes = 0;

	if (snap_usage_locked(s, row->account_id, &count, &bytes, err) < 0)
		return -1;
	if (count >= max_count)
		return sbx_error_set(err, SBX_E_CONCURRENCY_LIMIT, NULL,
				     "this account has %d snapshots, the limit (max_snapshots, GET "
				     "/v1/limits); delete one first",
				     count);
	if (bytes >= max_bytes)
		return sbx_error_set(err, SBX_E_CONCURRENCY_LIMIT, NULL,
				     "this account's snapshots take %lld bytes, the limit "
				     "(snapshot_bytes, GET /v1/limits); delete one first",
				     (long long)bytes);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	return store_run(s, &q,
			 "INSERT INTO snapshots (id, account_id, name, sandbox_id, host, disk_gib,"
			 " status, price_micro_per_gib_hour, created_at_ms, billed_until_ms)"
			 " VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'creating', ?7, ?8, ?8)",
			 err, STORE_T(row->id), STORE_T(row->account_id), STORE_T(row->name),
			 STORE_T(row->sandbox_id), STORE_T(row->host), STORE_I(row->disk_gib),
			 STORE_I(row->price_micro_per_gib_hour), STORE_I(row->created_at_ms)) < 0
		   ? -1
		   : 0;
}

int store_snapshot_insert(struct store *s, const struct store_snapshot *row, int max_count,
			  int64_t max_bytes, struct sbx_error *err)
{
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	return store_tx_end(s, snap_insert_locked(s, row, max_count, max_bytes, err), err);
}

static int snap_ready_locked(struct store *s, const char *id, int64_t bytes, int64_t at_ms,
			     int64_t max_bytes, struct sbx_error *err)
{
	struct store_snapshot row;
	int count = 0;
	int64_t used = 0;

	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		int rc = store_run(s, &q,
				   "SELECT " SNAP_COLS " FROM snapshots WHERE id = ?1"
				   " AND status = 'creating'",
				   err, STORE_T(id));
		if (rc < 0)
			return -1;
		if (rc == SQLITE_DONE)
			return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such snapshot");
		snap_decode(q, &row);
	}
	if (snap_usage_locked(s, row.account_id, &count, &used, err) < 0)
		return -1;
	if (used + bytes > max_bytes)
		return sbx_error_set(
		    err, SBX_E_CONCURRENCY_LIMIT, NULL,
		    "this snapshot takes %lld bytes: with the account's other "
		    "snapshots (%lld bytes) that passes the limit (snapshot_bytes, "
		    "GET /v1/limits); delete one first",
		    (long long)bytes, (long long)used);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	return store_run(s, &q,
			 "UPDATE snapshots SET status = 'ready', bytes = ?2, created_at_ms = ?3,"
			 " billed_until_ms = ?3 WHERE id = ?1",
			 err, STORE_T(id), STORE_I(bytes), STORE_I(at_ms)) < 0
		   ? -1
		   : 0;
}

int store_snapshot_ready(struct store *s, const char *id, int64_t bytes, int64_t ready_at_ms,
			 int64_t max_bytes, struct sbx_error *err)
{
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	return store_tx_end(s, snap_ready_locked(s, id, bytes, ready_at_ms, max_bytes, err), err);
}

int store_snapshot_forget(struct store *s, const char *id, struct sbx_error *err)
{
	return store_write(s, 0, "DELETE FROM snapshots WHERE id = ?1 AND status = 'creating'", err,
			   STORE_T(id)) < 0
		   ? -1
		   : 0;
}

int store_snapshot_get(struct store *s, const char *account_id, const char *id,
		       struct store_snapshot *out, struct sbx_error *err)
{
	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	int rc = store_run(s, &q,
			   "SELECT " SNAP_COLS " FROM snapshots WHERE id = ?1"
			   " AND (?2 IS NULL OR account_id = ?2) AND status = 'ready'",
			   err, STORE_T(id), STORE_T(account_id));
	if (rc < 0)
		return -1;
	if (rc == SQLITE_DONE)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such snapshot '%.64s'", id);
	snap_decode(q, out);
	return 0;
}

int store_snapshot_list(struct store *s, const char *account_id, size_t max,
			struct store_snapshot **out, size_t *n, struct sbx_error *err)
{
	*out = NULL;
	*n = 0;
	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_bind(s, &q,
		       "SELECT " SNAP_COLS " FROM snapshots WHERE account_id = ?1"
		       " AND status = 'ready' ORDER BY created_at_ms DESC, rowid DESC",
		       err, STORE_T(account_id)) < 0)
		return -1;
	return store_collect(s, q, sizeof **out, max, snap_decode, (void **)out, n, err);
}

int store_snapshot_list_all(struct store *s, struct store_snapshot **out, size_t *n,
			    struct sbx_error *err)
{
	*out = NULL;
	*n = 0;
	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_bind_args(s, &q,
			    "SELECT " SNAP_COLS " FROM snapshots WHERE status != 'deleted'"
			    " ORDER BY rowid",
			    NULL, 0, err) < 0)
		return -1;
	return store_collect(s, q, sizeof **out, SIZE_MAX, snap_decode, (void **)out, n, err);
}

static int snap_settle_locked(struct store *s, const char *id, int64_t at_ms, bool final,
			      store_storage_cost_fn cost, int64_t *charged, struct sbx_error *err)
{
	struct store_snapshot row;
	int64_t amount, available;

	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		int rc = store_run(s, &q,
				   "SELECT " SNAP_COLS " FROM snapshots WHERE id = ?1"
				   " AND status IN ('ready', 'deleting')",
				   err, STORE_T(id));
		if (rc < 0)
			return -1;
		if (rc == SQLITE_DONE)
			return 0;
		snap_decode(q, &row);
	}
	if (at_ms < row.billed_until_ms)
		at_ms = row.billed_until_ms;
	if (at_ms == row.billed_until_ms && !final)
		return 0;
	amount = cost(row.bytes, at_ms - row.billed_until_ms, row.price_micro_per_gib_hour);
	if (store_available(s, row.account_id, &available, err) < 0)
		return -1;
	if (amount > available)
		amount = available > 0 ? available : 0; /* never past the balance */
	if (amount > 0 &&
	    (store_ledger_snapshot_insert(s, row.account_id, id, "hold", amount, at_ms, err) < 0 ||
	     store_ledger_snapshot_insert(s, row.account_id, id, "charge", amount, at_ms, err) < 0))
		return -1;
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_run(s, &q,
		      "UPDATE snapshots SET billed_until_ms = ?2, charge_micro = charge_micro + ?3,"
		      " status = CASE WHEN ?4 THEN 'deleted' ELSE status END,"
		      " deleted_at_ms = CASE WHEN ?4 THEN ?2 ELSE deleted_at_ms END WHERE id = ?1",
		      err, STORE_T(id), STORE_I(at_ms), STORE_I(amount), STORE_I(final)) < 0)
		return -1;
	if (charged)
		*charged = amount;
	return 1;
}

int store_snapshot_settle(struct store *s, const char *id, int64_t at_ms, bool final,
			  store_storage_cost_fn cost, int64_t *charged, struct sbx_error *err)
{
	if (charged)
		*charged = 0;
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	return store_tx_end(s, snap_settle_locked(s, id, at_ms, final, cost, charged, err), err);
}

static int snap_users_locked(struct store *s, const char *id, int *n, struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;

	if (store_run(s, &q,
		      "SELECT count(*) FROM sandboxes WHERE snapshot_id = ?1"
		      " AND status IN ('creating', 'running')",
		      err, STORE_T(id)) < 0)
		return -1;
	*n = sqlite3_column_int(q, 0);
	return 0;
}

int store_snapshot_users(struct store *s, const char *id, int *n, struct sbx_error *err)
{
	STORE_READ(s);
	return snap_users_locked(s, id, n, err);
}

static int snap_delete_begin_locked(struct store *s, const char *account_id, const char *id,
				    struct store_snapshot *out, struct sbx_error *err)
{
	int users = 0;

	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		int rc = store_run(s, &q,
				   "SELECT " SNAP_COLS " FROM snapshots WHERE id = ?1"
				   " AND account_id = ?2 AND status = 'ready'",
				   err, STORE_T(id), STORE_T(account_id));
		if (rc < 0)
			return -1;
		if (rc == SQLITE_DONE)
			return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such snapshot '%.64s'",
					     id);
		snap_decode(q, out);
	}
	if (snap_users_locked(s, id, &users, err) < 0)
		return -1;
	if (users > 0)
		return sbx_error_set(err, SBX_E_SNAPSHOT_IN_USE, NULL,
				     "snapshot '%s' backs the disks of %d live sandboxes; delete "
				     "them first (their disks read from it)",
				     id, users);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_run(s, &q, "UPDATE snapshots SET status = 'deleting' WHERE id = ?1", err,
		      STORE_T(id)) < 0)
		return -1;
	out->status = STORE_SNAP_DELETING;
	return 0;
}

int store_snapshot_delete_begin(struct store *s, const char *account_id, const char *id,
				struct store_snapshot *out, struct sbx_error *err)
{
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	return store_tx_end(s, snap_delete_begin_locked(s, account_id, id, out, err), err);
}

int store_sandbox_snapshot_set(struct store *s, const char *account_id, const char *sandbox_id,
			       const char *snapshot_id, struct sbx_error *err)
{
	int n =
	    store_write(s, STORE_WRITE_NEED_CHANGE,
			"UPDATE sandboxes SET snapshot_id = ?3 WHERE id = ?2 AND account_id = ?1"
			" AND status = 'creating' AND EXISTS (SELECT 1 FROM snapshots"
			" WHERE id = ?3 AND account_id = ?1 AND status = 'ready')",
			err, STORE_T(account_id), STORE_T(sandbox_id), STORE_T(snapshot_id));

	if (n < 0)
		return -1;
	if (n == 0)
		return sbx_error_set(err, SBX_E_NOT_FOUND, "snapshot", "no such snapshot '%.64s'",
				     snapshot_id);
	return 0;
}
