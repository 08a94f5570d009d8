/* store: sandbox rows (reserve, activate, end, extend, list, touch).
 * See store.c for the connection and transaction rules. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "store-priv.h"

#define MOD "store"
/* ------------------------------------------------------------ sandboxes */

#define SBX_COLS                                                                                   \
	"id, account_id, size, domain, status, timeout_minutes,"                                   \
	" price_micro_per_hour, requested_at_ms, created_at_ms, expires_at_ms,"                    \
	" ended_at_ms, last_seen_at_ms, hold_micro, charge_micro, startup_path, startup_ms,"       \
	" host, metadata, paused_at_ms, paused_ms, paused_bytes, storage_price_micro,"             \
	" storage_micro, network, net_bytes_in, net_bytes_out, net_price_micro_per_gb, "           \
	"snapshot_id, timeout_action"

/* "12.345678" without going near floating point (store must not call billing). */
static void store_usd(int64_t micro, char buf[static 32])
{
	uint64_t m = micro < 0 ? (uint64_t)0 - (uint64_t)micro : (uint64_t)micro;
	snprintf(buf, 32, "%s%" PRIu64 ".%06" PRIu64, micro < 0 ? "-" : "", m / 1000000,
		 m % 1000000);
}

static void store_sandbox_from_stmt(sqlite3_stmt *q, struct store_sandbox *r)
{
	memset(r, 0, sizeof *r);
	store_copy_col(r->id, sizeof r->id, q, 0);
	store_copy_col(r->account_id, sizeof r->account_id, q, 1);
	store_copy_col(r->size, sizeof r->size, q, 2);
	store_copy_col(r->domain, sizeof r->domain, q, 3);
	const unsigned char *st = sqlite3_column_text(q, 4);
	if (store_status_parse((const char *)st, &r->status) < 0)
		r->status = STORE_FAILED; /* the CHECK constraint makes this unreachable */
	r->timeout_minutes = sqlite3_column_int(q, 5);
	r->price_micro_per_hour = sqlite3_column_int64(q, 6);
	r->requested_at_ms = sqlite3_column_int64(q, 7);
	r->created_at_ms = sqlite3_column_int64(q, 8);
	r->expires_at_ms = sqlite3_column_int64(q, 9);
	r->ended_at_ms = sqlite3_column_int64(q, 10);
	r->last_seen_at_ms = sqlite3_column_int64(q, 11);
	r->hold_micro = sqlite3_column_int64(q, 12);
	r->charge_micro = sqlite3_column_int64(q, 13);
	store_copy_col(r->startup_path, sizeof r->startup_path, q, 14);
	r->startup_ms = sqlite3_column_int64(q, 15);
	store_copy_col(r->host, sizeof r->host, q, 16);
	store_copy_col(r->metadata, sizeof r->metadata, q, 17);
	r->paused_at_ms = sqlite3_column_int64(q, 18);
	r->paused_ms = sqlite3_column_int64(q, 19);
	r->paused_bytes = sqlite3_column_int64(q, 20);
	r->storage_price_micro = sqlite3_column_int64(q, 21);
	r->storage_micro = sqlite3_column_int64(q, 22);
	store_copy_col(r->network, sizeof r->network, q, 23);
	r->net_bytes_in = sqlite3_column_int64(q, 24);
	r->net_bytes_out = sqlite3_column_int64(q, 25);
	r->net_price_micro_per_gb = sqlite3_column_int64(q, 26);
	store_copy_col(r->snapshot_id, sizeof r->snapshot_id, q, 27);
	r->timeout_action = sqlite3_column_int(q, 28) == STORE_ON_TIMEOUT_PAUSE
				? STORE_ON_TIMEOUT_PAUSE
				: STORE_ON_TIMEOUT_EXPIRE;
	if (r->status == STORE_RUNNING && r->paused_at_ms > 0)
		r->status = STORE_PAUSED; /* stored as 'running' (store.h) */
}

/* Bring a sandbox's metadata column in line with its label rows, and check
 * their bounds (store.h), inside the open write transaction. 0 or -1. */
static int store_labels_sync(struct store *s, const char *id, struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_run(
		s, &q,
		"SELECT COUNT(*), COALESCE(SUM(length(CAST(key AS BLOB))"
		" + length(CAST(value AS BLOB))), 0) FROM sandbox_labels WHERE sandbox_id = ?1",
		err, STORE_T(id)) < 0)
		return -1;
	int64_t keys = sqlite3_column_int64(q, 0), bytes = sqlite3_column_int64(q, 1);
	if (keys > STORE_METADATA_KEYS_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "metadata",
				     "metadata can have at most %d keys", STORE_METADATA_KEYS_MAX);
	if (bytes > STORE_METADATA_BYTES_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "metadata",
				     "metadata keys and values can have at most %d bytes in all",
				     STORE_METADATA_BYTES_MAX);
	_cleanup_reset_ sqlite3_stmt *u = NULL;
	return store_run(s, &u,
			 "UPDATE sandboxes SET metadata = (SELECT COALESCE(json_group_object(key,"
			 " value), '{}') FROM (SELECT key, value FROM sandbox_labels"
			 " WHERE sandbox_id = ?1 ORDER BY key)) WHERE id = ?1",
			 err, STORE_T(id)) < 0
		   ? -1
		   : 0;
}

/* Set (a string value) or remove (null or "") the pairs of a JSON object
 * on a sandbox's label rows, inside the open write transaction. */
static int store_labels_apply(struct store *s, const char *account_id, const char *id,
			      const char *patch, struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *d = NULL, *i = NULL;
	if (store_run(s, &d,
		      "DELETE FROM sandbox_labels WHERE sandbox_id = ?1 AND key IN"
		      " (SELECT key FROM json_each(?2) WHERE type = 'null' OR value = '')",
		      err, STORE_T(id), STORE_T(patch)) < 0)
		return -1;
	if (store_run(s, &i,
		      "INSERT INTO sandbox_labels (sandbox_id, account_id, key, value)"
		      " SELECT ?1, ?3, key, value FROM json_each(?2)"
		      " WHERE type = 'text' AND value != ''"
		      " ON CONFLICT (sandbox_id, key) DO UPDATE SET value = excluded.value",
		      err, STORE_T(id), STORE_T(patch), STORE_T(account_id)) < 0)
		return -1;
	return store_labels_sync(s, id, err);
}

static void store_sandbox_decode(sqlite3_stmt *q, void *elem)
{
	store_sandbox_from_stmt(q, elem);
}

/* Read one row by id (any status, any account unless account_id given).
 * 1 found, 0 not found, -1 error. */
static int store_sandbox_read(struct store *s, const char *account_id, const char *id,
			      struct store_sandbox *out, struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	int rc = store_run(s, &q,
			   "SELECT " SBX_COLS " FROM sandboxes"
			   " WHERE id = ?1 AND (?2 IS NULL OR account_id = ?2)",
			   err, STORE_T(id), STORE_T(account_id));
	if (rc < 0 || rc == SQLITE_DONE)
		return rc < 0 ? -1 : 0;
	store_sandbox_from_stmt(q, out);
	return 1;
}

/* The row of a sandbox its tenant may see (any status but aborted): 0, or
 * -1 with SBX_E_NOT_FOUND "no such sandbox" or after a database error. */
static int store_sandbox_need(struct store *s, const char *account_id, const char *id,
			      struct store_sandbox *out, struct sbx_error *err)
{
	int found = store_sandbox_read(s, account_id, id, out, err);
	if (found < 0)
		return -1;
	if (found == 0 || out->status == STORE_ABORTED)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such sandbox '%.64s'",
				     id ? id : "");
	return 0;
}

/* available = credits - holds + releases (= balance - reserved), from the
 * account row's running totals: one row read, whatever the history. */
int store_available(struct store *s, const char *account_id, int64_t *available,
		    struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	int rc = store_run(s, &q,
			   "SELECT credits_micro - holds_micro + releases_micro FROM accounts"
			   " WHERE id = ?1",
			   err, STORE_T(account_id));
	if (rc < 0)
		return -1;
	if (rc == SQLITE_DONE)
		return store_no_account(err, account_id);
	*available = sqlite3_column_int64(q, 0);
	return 0;
}

int store_count_live_locked(struct store *s, const char *account_id, int *n, struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_run(s, &q,
		      "SELECT COUNT(*) FROM sandboxes WHERE account_id = ?1"
		      " AND status IN ('creating', 'running')",
		      err, STORE_T(account_id)) < 0)
		return -1;
	*n = sqlite3_column_int(q, 0);
	return 0;
}

static int store_insufficient(struct sbx_error *err, const char *what, int64_t needed,
			      int64_t available)
{
	char need_usd[32], avail_usd[32];
	store_usd(needed, need_usd);
	store_usd(available < 0 ? 0 : available, avail_usd);
	return sbx_error_set(err, SBX_E_INSUFFICIENT_CREDIT, NULL,
			     "insufficient credit: %s needs $%s reserved but $%s is available; "
			     "add credit or choose a shorter timeout",
			     what, need_usd, avail_usd);
}

/* Inside the open write transaction: 0 when the account's available
 * credit covers `micro` more held, else SBX_E_INSUFFICIENT_CREDIT naming
 * `what` (-1). */
static int store_can_hold(struct store *s, const char *account_id, int64_t micro, const char *what,
			  struct sbx_error *err)
{
	int64_t available;

	if (store_available(s, account_id, &available, err) < 0)
		return -1;
	return available < micro ? store_insufficient(err, what, micro, available) : 0;
}

int store_sandbox_reserve(struct store *s, struct store_sandbox *row, int64_t hold_micro,
			  int max_live, struct sbx_error *err)
{
	if (!row || !*row->account_id || !*row->size)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
				     "a sandbox needs an account and a size");
	if (hold_micro < 0 || row->price_micro_per_hour < 0 || max_live < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
				     "hold, price and cap must not be negative");
	if (!*row->id && sbx_random_id("sbx_", 12, row->id, sizeof row->id) < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "cannot generate a sandbox id");
	int64_t now = sbx_wall_ms();
	if (row->requested_at_ms == 0)
		row->requested_at_ms = now;

	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	if (store_account_need(s, row->account_id, err) < 0)
		goto err_rollback;
	int live;
	if (store_count_live_locked(s, row->account_id, &live, err) < 0)
		goto err_rollback;
	if (live >= max_live) {
		sbx_error_set(
		    err, SBX_E_CONCURRENCY_LIMIT, NULL,
		    "account has reached its limit of %d live sandboxes; delete one first",
		    max_live);
		err->retry_after_s = 5;
		goto err_rollback;
	}
	if (store_can_hold(s, row->account_id, hold_micro, "this sandbox", err) < 0)
		goto err_rollback;
	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		if (store_run(s, &q,
			      "INSERT INTO sandboxes (id, account_id, size, domain, status,"
			      " timeout_minutes, price_micro_per_hour, requested_at_ms,"
			      " last_seen_at_ms, hold_micro, network, net_price_micro_per_gb,"
			      " timeout_action)"
			      " VALUES (?1, ?2, ?3, ?4, 'creating', ?5, ?6, ?7, ?7, ?8,"
			      " COALESCE(NULLIF(?9, ''), '" STORE_NETWORK_NONE "'), ?10, ?11)",
			      err, STORE_T(row->id), STORE_T(row->account_id), STORE_T(row->size),
			      STORE_T(row->domain), STORE_I(row->timeout_minutes),
			      STORE_I(row->price_micro_per_hour), STORE_I(row->requested_at_ms),
			      STORE_I(hold_micro), STORE_T(row->network),
			      STORE_I(row->net_price_micro_per_gb),
			      STORE_I(row->timeout_action == STORE_ON_TIMEOUT_PAUSE)) < 0)
			goto err_rollback;
	}
	if (row->metadata[0] &&
	    store_labels_apply(s, row->account_id, row->id, row->metadata, err) < 0)
		goto err_rollback;
	if (hold_micro > 0 &&
	    store_ledger_insert(s, row->account_id, row->id, "hold", hold_micro, now, err) < 0)
		goto err_rollback;
	if (store_tx_commit(s, err) < 0)
		goto err_rollback;
	row->status = STORE_CREATING;
	row->hold_micro = hold_micro;
	row->created_at_ms = row->expires_at_ms = row->ended_at_ms = 0;
	row->last_seen_at_ms = row->requested_at_ms;
	row->charge_micro = 0;
	return 0;

err_rollback:
	store_tx_rollback(s);
	return -1;
}

int store_sandbox_activate(struct store *s, const char *id, const char *domain,
			   int64_t created_at_ms, int64_t expires_at_ms, struct sbx_error *err)
{
	return store_sandbox_activate_startup(s, id, domain, created_at_ms, expires_at_ms, NULL, 0,
					      NULL, err);
}

int store_sandbox_activate_startup(struct store *s, const char *id, const char *domain,
				   int64_t created_at_ms, int64_t expires_at_ms,
				   const char *startup_path, int64_t startup_ms, const char *host,
				   struct sbx_error *err)
{
	if (host && (!host[0] || strlen(host) >= STORE_HOST_MAX))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL, "bad host name");
	if (startup_path && strcmp(startup_path, "warm") != 0 && strcmp(startup_path, "cold") != 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL, "bad startup path");
	if (startup_ms < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL, "bad startup time");
	if (!domain || strlen(domain) >= sizeof((struct store_sandbox *)0)->domain)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL, "bad domain name");
	if (created_at_ms <= 0 || expires_at_ms < created_at_ms)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
				     "created_at must be set and not after expires_at");
	/* id is the key: the update changes one row or none. */
	int n = store_write(s, STORE_WRITE_NEED_CHANGE,
			    "UPDATE sandboxes SET status = 'running', domain = ?2,"
			    " created_at_ms = ?3, expires_at_ms = ?4, last_seen_at_ms = ?3,"
			    " startup_path = ?5, startup_ms = ?6, host = COALESCE(?7, host)"
			    " WHERE id = ?1 AND status = 'creating'",
			    err, STORE_T(id), STORE_T(domain), STORE_I(created_at_ms),
			    STORE_I(expires_at_ms), STORE_T(startup_path ? startup_path : ""),
			    STORE_I(startup_ms), STORE_T(host));
	if (n == 0)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL,
				     "no sandbox '%.64s' is being created", id ? id : "");
	return n < 0 ? -1 : 0;
}

/* Set a row's final status, ended_at and charge (the caller checked it is live). */
static int store_sandbox_finish(struct store *s, const char *id, const char *status,
				int64_t ended_at_ms, int64_t charge, struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	return store_run(s, &q,
			 "UPDATE sandboxes SET status = ?2, ended_at_ms = ?3, charge_micro = ?4"
			 " WHERE id = ?1",
			 err, STORE_T(id), STORE_T(status), STORE_I(ended_at_ms),
			 STORE_I(charge)) < 0
		   ? -1
		   : 0;
}

int store_sandbox_abort(struct store *s, const char *id, struct sbx_error *err)
{
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	struct store_sandbox row;
	int found = store_sandbox_read(s, NULL, id, &row, err);
	if (found < 0)
		goto err_rollback;
	if (found == 0 || row.status != STORE_CREATING) {
		store_tx_rollback(s);
		return 0;
	}
	int64_t now = sbx_wall_ms();
	if (store_sandbox_finish(s, row.id, "aborted", now, 0, err) < 0)
		goto err_rollback;
	if (row.hold_micro > 0 &&
	    store_ledger_insert(s, row.account_id, row.id, "release", row.hold_micro, now, err) < 0)
		goto err_rollback;
	return store_tx_end(s, 1, err);

err_rollback:
	store_tx_rollback(s);
	return -1;
}

int store_sandbox_end(struct store *s, const char *id, enum store_status status,
		      int64_t ended_at_ms, store_charge_fn charge_fn, struct store_sandbox *out,
		      struct sbx_error *err)
{
	if (status != STORE_DESTROYED && status != STORE_EXPIRED && status != STORE_FAILED)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL,
				     "a sandbox can only end destroyed, expired or failed");
	if (!charge_fn)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "no charge function");
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	struct store_sandbox row;
	if (store_sandbox_need(s, NULL, id, &row, err) < 0)
		goto err_rollback;
	if (row.status != STORE_RUNNING && row.status != STORE_PAUSED) {
		/* Already ended (or still creating: that is abort's business). */
		store_tx_rollback(s);
		if (out)
			*out = row;
		return 0;
	}
	if (ended_at_ms < row.created_at_ms)
		ended_at_ms = row.created_at_ms;
	int64_t charge = charge_fn(&row, ended_at_ms);
	if (charge < 0)
		charge = 0;
	if (charge > row.hold_micro)
		charge = row.hold_micro;
	int64_t release = row.hold_micro - charge;
	int64_t now = sbx_wall_ms();
	if (store_sandbox_finish(s, row.id, store_status_name(status), ended_at_ms, charge, err) <
	    0)
		goto err_rollback;
	if (charge > 0 &&
	    store_ledger_insert(s, row.account_id, row.id, "charge", charge, now, err) < 0)
		goto err_rollback;
	if (release > 0 &&
	    store_ledger_insert(s, row.account_id, row.id, "release", release, now, err) < 0)
		goto err_rollback;
	if (store_usage_settle(s, &row, ended_at_ms, charge, err) < 0)
		goto err_rollback;
	if (store_tx_commit(s, err) < 0)
		goto err_rollback;
	row.status = status;
	row.ended_at_ms = ended_at_ms;
	row.charge_micro = charge;
	if (out)
		*out = row;
	return 1;

err_rollback:
	store_tx_rollback(s);
	return -1;
}

int store_sandbox_extend(struct store *s, const char *account_id, const char *id,
			 int64_t new_expires_at_ms, int64_t extra_hold_micro, struct sbx_error *err)
{
	if (extra_hold_micro < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
				     "an extension cannot hold a negative amount");
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	struct store_sandbox row;
	if (store_sandbox_need(s, account_id, id, &row, err) < 0)
		goto err_rollback;
	if (row.status == STORE_PAUSED) {
		sbx_error_set(err, SBX_E_SANDBOX_PAUSED, NULL,
			      "sandbox '%s' is paused; resume it first", row.id);
		goto err_rollback;
	}
	if (row.status != STORE_RUNNING) {
		sbx_error_set(err, SBX_E_SANDBOX_NOT_RUNNING, NULL,
			      "sandbox '%s' is %s; create a new one", row.id,
			      store_status_name(row.status));
		goto err_rollback;
	}
	if (store_can_hold(s, row.account_id, extra_hold_micro, "this extension", err) < 0)
		goto err_rollback;
	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		/* expires_at never moves earlier. */
		if (store_run(s, &q,
			      "UPDATE sandboxes SET expires_at_ms = MAX(expires_at_ms, ?2),"
			      " hold_micro = hold_micro + ?3 WHERE id = ?1",
			      err, STORE_T(row.id), STORE_I(new_expires_at_ms),
			      STORE_I(extra_hold_micro)) < 0)
			goto err_rollback;
	}
	if (extra_hold_micro > 0 && store_ledger_insert(s, row.account_id, row.id, "hold",
							extra_hold_micro, sbx_wall_ms(), err) < 0)
		goto err_rollback;
	return store_tx_end(s, 0, err);

err_rollback:
	store_tx_rollback(s);
	return -1;
}

int store_sandbox_pause(struct store *s, const char *id, int64_t paused_at_ms, int64_t bytes,
			int64_t storage_price_micro, int64_t storage_hold_micro,
			struct store_sandbox *out, struct sbx_error *err)
{
	if (bytes < 0 || storage_price_micro < 0 || storage_hold_micro < 0 || paused_at_ms <= 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "bad pause figures");
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	struct store_sandbox row;
	if (store_sandbox_need(s, NULL, id, &row, err) < 0)
		goto err_rollback;
	if (row.status != STORE_RUNNING) {
		store_tx_rollback(s);
		if (out)
			*out = row;
		return 0;
	}
	if (paused_at_ms < row.created_at_ms)
		paused_at_ms = row.created_at_ms;
	if (storage_hold_micro > 0 && store_can_hold(s, row.account_id, storage_hold_micro,
						     "the storage of this pause", err) < 0)
		goto err_rollback;
	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		if (store_run(
			s, &q,
			"UPDATE sandboxes SET paused_at_ms = ?2, paused_bytes = ?3,"
			" storage_price_micro = ?4, hold_micro = hold_micro + ?5 WHERE id = ?1",
			err, STORE_T(row.id), STORE_I(paused_at_ms), STORE_I(bytes),
			STORE_I(storage_price_micro), STORE_I(storage_hold_micro)) < 0)
			goto err_rollback;
	}
	if (storage_hold_micro > 0 &&
	    store_ledger_insert(s, row.account_id, row.id, "hold", storage_hold_micro,
				sbx_wall_ms(), err) < 0)
		goto err_rollback;
	if (store_tx_commit(s, err) < 0)
		goto err_rollback;
	row.status = STORE_PAUSED;
	row.paused_at_ms = paused_at_ms;
	row.paused_bytes = bytes;
	row.storage_price_micro = storage_price_micro;
	row.hold_micro += storage_hold_micro;
	if (out)
		*out = row;
	return 1;

err_rollback:
	store_tx_rollback(s);
	return -1;
}

int store_sandbox_resume(struct store *s, const char *id, int64_t resumed_at_ms,
			 store_pause_cost_fn cost_fn, int64_t new_expires_at_ms,
			 int64_t extra_hold_micro, struct store_sandbox *out, struct sbx_error *err)
{
	if (!cost_fn || extra_hold_micro < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "bad resume figures");
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	struct store_sandbox row;
	if (store_sandbox_need(s, NULL, id, &row, err) < 0)
		goto err_rollback;
	if (row.status != STORE_PAUSED) {
		store_tx_rollback(s);
		if (out)
			*out = row;
		return 0;
	}
	if (resumed_at_ms < row.paused_at_ms)
		resumed_at_ms = row.paused_at_ms;
	int64_t took = resumed_at_ms - row.paused_at_ms;
	int64_t cost = cost_fn(&row, resumed_at_ms);
	if (cost < 0)
		cost = 0;
	/* the time it had left, or what the resume grants, held now */
	int64_t expires = row.expires_at_ms + took, hold = 0;
	if (new_expires_at_ms > expires) {
		if (store_can_hold(s, row.account_id, extra_hold_micro,
				   "the time this resume grants", err) < 0)
			goto err_rollback;
		expires = new_expires_at_ms;
		hold = extra_hold_micro;
	}
	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		if (store_run(s, &q,
			      "UPDATE sandboxes SET paused_at_ms = 0, paused_bytes = 0,"
			      " paused_ms = paused_ms + ?2, expires_at_ms = ?5,"
			      " storage_micro = storage_micro + ?3, last_seen_at_ms = ?4,"
			      " hold_micro = hold_micro + ?6 WHERE id = ?1",
			      err, STORE_T(row.id), STORE_I(took), STORE_I(cost),
			      STORE_I(resumed_at_ms), STORE_I(expires), STORE_I(hold)) < 0)
			goto err_rollback;
	}
	if (hold > 0 &&
	    store_ledger_insert(s, row.account_id, row.id, "hold", hold, resumed_at_ms, err) < 0)
		goto err_rollback;
	if (store_tx_commit(s, err) < 0)
		goto err_rollback;
	row.status = STORE_RUNNING;
	row.paused_at_ms = 0;
	row.paused_bytes = 0;
	row.paused_ms += took;
	row.expires_at_ms = expires;
	row.hold_micro += hold;
	row.storage_micro += cost;
	row.last_seen_at_ms = resumed_at_ms;
	if (out)
		*out = row;
	return 1;

err_rollback:
	store_tx_rollback(s);
	return -1;
}

int store_sandbox_get(struct store *s, const char *account_id, const char *id,
		      struct store_sandbox *out, struct sbx_error *err)
{
	STORE_READ(s);
	struct store_sandbox row;
	if (store_sandbox_need(s, account_id, id, &row, err) < 0)
		return -1;
	*out = row;
	return 0;
}

int store_sandbox_list(struct store *s, const char *account_id, const enum store_status *status,
		       int limit, const char *starting_after, struct store_sandbox **out, size_t *n,
		       bool *has_more, struct sbx_error *err)
{
	return store_sandbox_list_labeled(s, account_id, status, NULL, limit, starting_after, out,
					  n, has_more, err);
}

int store_sandbox_metadata_update(struct store *s, const char *account_id, const char *id,
				  bool clear, const char *patch, struct store_sandbox *out,
				  struct sbx_error *err)
{
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	struct store_sandbox row;
	if (store_sandbox_need(s, account_id, id, &row, err) < 0)
		goto err_rollback;
	if (row.status == STORE_CREATING) { /* tenants do not see it yet */
		sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such sandbox '%.64s'", id);
		goto err_rollback;
	}
	if (clear) {
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		if (store_run(s, &q, "DELETE FROM sandbox_labels WHERE sandbox_id = ?1", err,
			      STORE_T(row.id)) < 0)
			goto err_rollback;
	}
	if (store_labels_apply(s, row.account_id, row.id, patch && *patch ? patch : "{}", err) < 0)
		goto err_rollback;
	if (store_sandbox_need(s, account_id, id, &row, err) < 0)
		goto err_rollback;
	if (store_tx_commit(s, err) < 0)
		goto err_rollback;
	*out = row;
	return 0;

err_rollback:
	store_tx_rollback(s);
	return -1;
}

/* The list's query: by status or not, filtered by labels or not. The
 * label filter is driven by the index of its first pair (CROSS JOIN keeps
 * that order); every pair is then checked on the row's labels. */
#define STORE_LIST_TAIL                                                                            \
	" AND (?4 IS NULL OR requested_at_ms < ?3 OR (requested_at_ms = ?3 AND id < ?4))"          \
	" ORDER BY requested_at_ms DESC, id DESC LIMIT ?5"
#define STORE_LIST_LABELED                                                                         \
	"SELECT " SBX_COLS " FROM (SELECT s.* FROM sandbox_labels l CROSS JOIN sandboxes s"        \
	" ON s.id = l.sandbox_id WHERE l.account_id = ?1 AND l.key = ?7 AND l.value = ?8) AS m"    \
	" WHERE account_id = ?1 AND NOT EXISTS (SELECT 1 FROM json_each(?6) f WHERE NOT EXISTS"    \
	" (SELECT 1 FROM sandbox_labels x WHERE x.sandbox_id = m.id AND x.key = f.key"             \
	" AND x.value = f.value))"
/* status ?2 as the API names it: 'paused' is stored as 'running' with
 * paused_at_ms > 0 (store.h), and 'running' is only the unpaused ones */
#define STORE_STATUS_IS                                                                            \
	"status = (CASE ?2 WHEN 'paused' THEN 'running' ELSE ?2 END)"                              \
	" AND (status != 'running' OR (paused_at_ms > 0) = (?2 = 'paused'))"
static const char *const store_list_sql[2][2] = {
    {"SELECT " SBX_COLS " FROM sandboxes WHERE account_id = ?1"
     " AND status != 'aborted' AND ?2 IS NULL AND COALESCE(?6, ?7, ?8) IS NULL" STORE_LIST_TAIL,
     "SELECT " SBX_COLS " FROM sandboxes WHERE account_id = ?1"
     " AND " STORE_STATUS_IS " AND COALESCE(?6, ?7, ?8) IS NULL" STORE_LIST_TAIL},
    {STORE_LIST_LABELED " AND status != 'aborted' AND ?2 IS NULL" STORE_LIST_TAIL,
     STORE_LIST_LABELED " AND " STORE_STATUS_IS STORE_LIST_TAIL},
};
#undef STORE_STATUS_IS
#undef STORE_LIST_TAIL
#undef STORE_LIST_LABELED

/* The first pair of a labels filter, by json_each. 1, 0 when there is none,
 * -1 error. */
static int store_labels_first(struct store *s, const char *labels, char key[static 64],
			      char value[static STORE_METADATA_VALUE_MAX + 1],
			      struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	int rc = store_run(s, &q,
			   "SELECT key, value FROM json_each(?1) WHERE type = 'text' ORDER BY key"
			   " LIMIT 1",
			   err, STORE_T(labels));
	if (rc < 0 || rc == SQLITE_DONE)
		return rc < 0 ? -1 : 0;
	store_copy_col(key, 64, q, 0);
	store_copy_col(value, STORE_METADATA_VALUE_MAX + 1, q, 1);
	return 1;
}

int store_sandbox_list_labeled(struct store *s, const char *account_id,
			       const enum store_status *status, const char *labels, int limit,
			       const char *starting_after, struct store_sandbox **out, size_t *n,
			       bool *has_more, struct sbx_error *err)
{
	if (limit < 1 || limit > 1000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "limit",
				     "limit must be between 1 and 1000");
	*out = NULL;
	*n = 0;
	*has_more = false;
	if (status && *status == STORE_ABORTED)
		return 0; /* never shown */

	STORE_READ(s);
	int64_t cursor_ts = INT64_MAX;
	const char *cursor_id = NULL;
	struct store_sandbox cur;
	if (starting_after) {
		int found = store_sandbox_read(s, account_id, starting_after, &cur, err);
		if (found < 0)
			return -1;
		if (found == 0 || cur.status == STORE_ABORTED)
			return sbx_error_set(err, SBX_E_NOT_FOUND, "starting_after",
					     "no such sandbox '%.64s'", starting_after);
		cursor_ts = cur.requested_at_ms;
		cursor_id = cur.id;
	}
	char key[64] = "", value[STORE_METADATA_VALUE_MAX + 1] = "";
	if (labels) {
		int has = store_labels_first(s, labels, key, value, err);
		if (has < 0)
			return -1;
		if (has == 0)
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "metadata",
					     "a metadata filter needs at least one pair");
	}
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	/* Two texts by status, so that a status filter is an index term
	 * (sandboxes_by_account_status: O(rows of that status), e.g. the few
	 * running ones) rather than a filter over the whole history. */
	if (store_bind(s, &q, store_list_sql[labels != NULL][status != NULL], err,
		       STORE_T(account_id), STORE_T(status ? store_status_name(*status) : NULL),
		       STORE_I(cursor_ts), STORE_T(cursor_id), STORE_I(limit + 1), STORE_T(labels),
		       STORE_T(labels ? key : NULL), STORE_T(labels ? value : NULL)) < 0)
		return -1;
	struct store_sandbox *rows = NULL;
	size_t got = 0;
	if (store_collect(s, q, sizeof *rows, (size_t)limit + 1, store_sandbox_decode,
			  (void **)&rows, &got, err) < 0)
		return -1;
	if (got > (size_t)limit) {
		*has_more = true;
		got = (size_t)limit;
	}
	*out = rows;
	*n = got;
	return 0;
}

int store_sandbox_list_live(struct store *s, struct store_sandbox **out, size_t *n,
			    struct sbx_error *err)
{
	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_bind_args(s, &q,
			    "SELECT " SBX_COLS " FROM sandboxes"
			    " WHERE status IN ('creating', 'running')"
			    " ORDER BY requested_at_ms, id",
			    NULL, 0, err) < 0)
		return -1;
	return store_collect(s, q, sizeof **out, SIZE_MAX, store_sandbox_decode, (void **)out, n,
			     err);
}

int store_sandbox_touch(struct store *s, const char *id, int64_t now_ms, struct sbx_error *err)
{
	/* id is the key: the update changes one row or none. */
	int n = store_write(s, STORE_WRITE_NEED_CHANGE,
			    "UPDATE sandboxes SET last_seen_at_ms = MAX(last_seen_at_ms, ?2)"
			    " WHERE id = ?1 AND status = 'running' AND paused_at_ms = 0",
			    err, STORE_T(id), STORE_I(now_ms));
	if (n == 0)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no running sandbox '%.64s'",
				     id ? id : "");
	return n < 0 ? -1 : 0;
}

int store_sandbox_list_overlapping(struct store *s, const char *account_id, int64_t from_ms,
				   int64_t to_ms, struct store_sandbox **out, size_t *n,
				   struct sbx_error *err)
{
	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_bind(s, &q,
		       "SELECT " SBX_COLS " FROM sandboxes"
		       " WHERE account_id = ?1 AND status != 'aborted' AND created_at_ms > 0"
		       " AND created_at_ms < ?3 AND (ended_at_ms = 0 OR ended_at_ms > ?2)"
		       " ORDER BY created_at_ms, id",
		       err, STORE_T(account_id), STORE_I(from_ms), STORE_I(to_ms)) < 0)
		return -1;
	return store_collect(s, q, sizeof **out, SIZE_MAX, store_sandbox_decode, (void **)out, n,
			     err);
}

int store_sandbox_list_running_locked(struct store *s, const char *account_id,
				      struct store_sandbox **out, size_t *n, struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_bind(s, &q,
		       "SELECT " SBX_COLS " FROM sandboxes WHERE account_id = ?1"
		       " AND status = 'running' ORDER BY requested_at_ms DESC, id DESC",
		       err, STORE_T(account_id)) < 0)
		return -1;
	return store_collect(s, q, sizeof **out, SIZE_MAX, store_sandbox_decode, (void **)out, n,
			     err);
}

int store_sandbox_count_live(struct store *s, const char *account_id, int *n, struct sbx_error *err)
{
	STORE_READ(s);
	return store_count_live_locked(s, account_id, n, err);
}

/* ---------------------------------------------------------------- hosts */

int store_host_drain_set(struct store *s, const char *host, bool drained, int64_t now_ms,
			 struct sbx_error *err)
{
	if (!host || !host[0] || strlen(host) >= STORE_HOST_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "host",
				     "a host name is 1..%d characters", STORE_HOST_MAX - 1);
	int n = drained ? store_write(s, 0,
				      "INSERT INTO host_drains (host, drained_at_ms)"
				      " VALUES (?1, ?2) ON CONFLICT(host) DO NOTHING",
				      err, STORE_T(host), STORE_I(now_ms))
			: store_write(s, 0, "DELETE FROM host_drains WHERE host = ?1", err,
				      STORE_T(host));
	return n < 0 ? -1 : 0;
}

int store_host_drains_list(struct store *s, char (*hosts)[STORE_HOST_MAX], size_t max, size_t *n,
			   struct sbx_error *err)
{
	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	int rc;

	*n = 0;
	for (rc = store_run_args(s, &q, "SELECT host FROM host_drains ORDER BY host", NULL, 0, err);
	     rc == SQLITE_ROW; rc = sqlite3_step(q))
		if (*n < max)
			store_copy_col(hosts[(*n)++], STORE_HOST_MAX, q, 0);
	if (rc < 0)
		return -1;
	if (rc != SQLITE_DONE)
		return store_db_error(s, "host drains", err);
	return 0;
}

/* ------------------------------------------------------------- network */

int store_sandbox_network_set(struct store *s, const char *account_id, const char *id,
			      const char *network, struct store_sandbox *out, struct sbx_error *err)
{
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	struct store_sandbox row;
	if (store_sandbox_need(s, account_id, id, &row, err) < 0)
		goto err_rollback;
	if (row.status == STORE_CREATING) { /* tenants do not see it yet */
		sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such sandbox '%.64s'", id);
		goto err_rollback;
	}
	if (row.status != STORE_RUNNING && row.status != STORE_PAUSED) {
		sbx_error_set(err, SBX_E_SANDBOX_NOT_RUNNING, NULL,
			      "sandbox '%.64s' has ended: its network cannot change", id);
		goto err_rollback;
	}
	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		if (store_run(s, &q, "UPDATE sandboxes SET network = ?2 WHERE id = ?1", err,
			      STORE_T(row.id), STORE_T(network)) < 0)
			goto err_rollback;
	}
	if (store_sandbox_need(s, account_id, id, &row, err) < 0)
		goto err_rollback;
	if (store_tx_commit(s, err) < 0)
		goto err_rollback;
	*out = row;
	return 0;

err_rollback:
	store_tx_rollback(s);
	return -1;
}

int store_sandbox_net_add(struct store *s, const char *id, int64_t bytes_in, int64_t bytes_out,
			  struct sbx_error *err)
{
	if (bytes_in < 0 || bytes_out < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "negative byte count");
	return store_write(s, 0,
			   "UPDATE sandboxes SET net_bytes_in = net_bytes_in + ?2,"
			   " net_bytes_out = net_bytes_out + ?3"
			   " WHERE id = ?1 AND status IN ('creating', 'running')",
			   err, STORE_T(id), STORE_I(bytes_in), STORE_I(bytes_out));
}
