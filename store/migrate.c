/* store: the schema and its migrations (store_migrate, run by store_open).
 * See store.c for the connection and transaction rules. */
#include <stdio.h>

#include "store-priv.h"

#define MOD "store"
/* ------------------------------------------------------------- schema */

/* Ordered migrations; migration i brings user_version from i to i+1.
 * Never edit a shipped entry: append a new one. */
static const char *const store_migrations[] = {
    /* 1: the initial schema */
    "CREATE TABLE accounts ("
    "  id TEXT PRIMARY KEY,"
    "  name TEXT NOT NULL,"
    "  created_at_ms INTEGER NOT NULL"
    ");"
    "CREATE TABLE api_keys ("
    "  id TEXT PRIMARY KEY,"
    "  account_id TEXT NOT NULL REFERENCES accounts(id),"
    "  digest TEXT NOT NULL UNIQUE,"
    "  prefix TEXT NOT NULL,"
    "  created_at_ms INTEGER NOT NULL,"
    "  revoked_at_ms INTEGER NOT NULL DEFAULT 0"
    ");"
    "CREATE INDEX api_keys_by_account ON api_keys(account_id, created_at_ms);"
    "CREATE TABLE sandboxes ("
    "  id TEXT PRIMARY KEY,"
    "  account_id TEXT NOT NULL REFERENCES accounts(id),"
    "  size TEXT NOT NULL,"
    "  domain TEXT NOT NULL DEFAULT '',"
    "  status TEXT NOT NULL CHECK (status IN ('creating','running','destroyed',"
    "    'expired','failed','aborted')),"
    "  timeout_minutes INTEGER NOT NULL,"
    "  price_micro_per_hour INTEGER NOT NULL CHECK (price_micro_per_hour >= 0),"
    "  requested_at_ms INTEGER NOT NULL,"
    "  created_at_ms INTEGER NOT NULL DEFAULT 0,"
    "  expires_at_ms INTEGER NOT NULL DEFAULT 0,"
    "  ended_at_ms INTEGER NOT NULL DEFAULT 0,"
    "  last_seen_at_ms INTEGER NOT NULL DEFAULT 0,"
    "  hold_micro INTEGER NOT NULL DEFAULT 0 CHECK (hold_micro >= 0),"
    "  charge_micro INTEGER NOT NULL DEFAULT 0 CHECK (charge_micro >= 0)"
    ");"
    "CREATE INDEX sandboxes_by_account ON sandboxes(account_id, requested_at_ms, id);"
    "CREATE INDEX sandboxes_by_account_created ON sandboxes(account_id, created_at_ms);"
    "CREATE INDEX sandboxes_by_status ON sandboxes(status);"
    "CREATE TABLE ledger ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  account_id TEXT NOT NULL REFERENCES accounts(id),"
    "  sandbox_id TEXT NULL REFERENCES sandboxes(id),"
    "  kind TEXT NOT NULL CHECK (kind IN ('credit','hold','release','charge')),"
    "  amount_micro INTEGER NOT NULL CHECK (amount_micro >= 0),"
    "  created_at_ms INTEGER NOT NULL"
    ");"
    "CREATE INDEX ledger_by_account ON ledger(account_id, kind);"
    "CREATE INDEX ledger_by_sandbox ON ledger(sandbox_id, kind);"
    "CREATE TRIGGER ledger_no_update BEFORE UPDATE ON ledger"
    "  BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;"
    "CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger"
    "  BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;",
    /* 2: idempotency keys of POST /v1/sandboxes, per account */
    "CREATE TABLE idempotency_keys ("
    "  account_id TEXT NOT NULL REFERENCES accounts(id),"
    "  key TEXT NOT NULL,"
    "  request_hash TEXT NOT NULL,"
    "  sandbox_id TEXT NULL,"
    "  status TEXT NOT NULL CHECK (status IN ('pending','done')),"
    "  response_status INTEGER NOT NULL DEFAULT 0,"
    "  response_body BLOB NULL,"
    "  created_at_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (account_id, key)"
    ");"
    "CREATE INDEX idempotency_keys_by_age ON idempotency_keys(created_at_ms);",
    /* 3: how a sandbox started (warm pool or cold boot) and how long it took */
    "ALTER TABLE sandboxes ADD COLUMN startup_path TEXT NOT NULL DEFAULT ''"
    "  CHECK (startup_path IN ('','warm','cold'));"
    "ALTER TABLE sandboxes ADD COLUMN startup_ms INTEGER NOT NULL DEFAULT 0"
    "  CHECK (startup_ms >= 0);",
    /* 4: one-shot executions (their own holds and charges in the ledger),
     * signed receipts, and API key scopes (existing keys keep working:
     * they get the 'sandboxes' scope) */
    "CREATE TABLE executions ("
    "  id TEXT PRIMARY KEY,"
    "  account_id TEXT NOT NULL REFERENCES accounts(id),"
    "  runtime TEXT NOT NULL,"
    "  runner TEXT NOT NULL,"
    "  status TEXT NOT NULL CHECK (status IN ('running','completed','timed_out','failed')),"
    "  timeout_seconds INTEGER NOT NULL,"
    "  price_micro_per_second INTEGER NOT NULL CHECK (price_micro_per_second >= 0),"
    "  requested_at_ms INTEGER NOT NULL,"
    "  ended_at_ms INTEGER NOT NULL DEFAULT 0,"
    "  hold_micro INTEGER NOT NULL CHECK (hold_micro >= 0),"
    "  charge_micro INTEGER NOT NULL DEFAULT 0 CHECK (charge_micro >= 0),"
    "  receipt_id TEXT NULL,"
    "  response BLOB NULL"
    ");"
    "CREATE INDEX executions_by_account ON executions(account_id, requested_at_ms);"
    "ALTER TABLE ledger ADD COLUMN execution_id TEXT NULL REFERENCES executions(id);"
    "CREATE INDEX ledger_by_execution ON ledger(execution_id, kind);"
    "CREATE TABLE receipts ("
    "  id TEXT PRIMARY KEY,"
    "  account_id TEXT NOT NULL REFERENCES accounts(id),"
    "  subject_id TEXT NOT NULL,"
    "  body TEXT NOT NULL,"
    "  hash TEXT NOT NULL,"
    "  signature TEXT NOT NULL,"
    "  signer TEXT NOT NULL,"
    "  created_at_ms INTEGER NOT NULL"
    ");"
    "ALTER TABLE api_keys ADD COLUMN scopes TEXT NOT NULL DEFAULT 'sandboxes';",
    /* 5 (issue 14, money at scale): the account row carries its running
     * ledger totals, kept by a trigger in the transaction of each ledger
     * row (so a balance is one row read) and computed here from the ledger
     * of an existing database; usage rollups per account x grain (hour,
     * day, month) x bucket start x size, written when a sandbox settles
     * (those of sandboxes that ended before this step are filled by
     * store_usage_rebuild, run right after it: see store_migration_after);
     * and an index that makes an account's live sandboxes O(live). */
    "ALTER TABLE accounts ADD COLUMN credits_micro INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE accounts ADD COLUMN holds_micro INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE accounts ADD COLUMN releases_micro INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE accounts ADD COLUMN charges_micro INTEGER NOT NULL DEFAULT 0;"
    "UPDATE accounts SET"
    "  credits_micro = (SELECT COALESCE(SUM(amount_micro), 0) FROM ledger"
    "    WHERE account_id = accounts.id AND kind = 'credit'),"
    "  holds_micro = (SELECT COALESCE(SUM(amount_micro), 0) FROM ledger"
    "    WHERE account_id = accounts.id AND kind = 'hold'),"
    "  releases_micro = (SELECT COALESCE(SUM(amount_micro), 0) FROM ledger"
    "    WHERE account_id = accounts.id AND kind = 'release'),"
    "  charges_micro = (SELECT COALESCE(SUM(amount_micro), 0) FROM ledger"
    "    WHERE account_id = accounts.id AND kind = 'charge');"
    "CREATE TRIGGER ledger_totals AFTER INSERT ON ledger BEGIN"
    "  UPDATE accounts SET"
    "    credits_micro = credits_micro"
    "      + CASE NEW.kind WHEN 'credit' THEN NEW.amount_micro ELSE 0 END,"
    "    holds_micro = holds_micro"
    "      + CASE NEW.kind WHEN 'hold' THEN NEW.amount_micro ELSE 0 END,"
    "    releases_micro = releases_micro"
    "      + CASE NEW.kind WHEN 'release' THEN NEW.amount_micro ELSE 0 END,"
    "    charges_micro = charges_micro"
    "      + CASE NEW.kind WHEN 'charge' THEN NEW.amount_micro ELSE 0 END"
    "  WHERE id = NEW.account_id;"
    "END;"
    "CREATE TABLE usage_rollups ("
    "  account_id TEXT NOT NULL REFERENCES accounts(id),"
    "  grain TEXT NOT NULL CHECK (grain IN ('hour','day','month')),"
    "  start_ms INTEGER NOT NULL,"
    "  size TEXT NOT NULL,"
    "  seconds INTEGER NOT NULL CHECK (seconds >= 0),"
    "  cost_micro INTEGER NOT NULL CHECK (cost_micro >= 0),"
    "  PRIMARY KEY (account_id, grain, start_ms, size)"
    ") WITHOUT ROWID;"
    "CREATE INDEX sandboxes_by_account_status"
    "  ON sandboxes(account_id, status, requested_at_ms, id);",
    /* 6: key management needs the 'keys' scope (issue 13). Every key made
     * before it could manage keys, so every existing key gets it; new keys
     * are inserted with their scopes spelled out. */
    "UPDATE api_keys SET scopes = CASE WHEN scopes = '' THEN 'keys'"
    "  ELSE scopes || ' keys' END;",
    /* 7: stored execution responses are bounded per account and in time
     * (issue 13): their sizes, and an index over the ones still stored */
    "ALTER TABLE executions ADD COLUMN response_bytes INTEGER NOT NULL DEFAULT 0"
    "  CHECK (response_bytes >= 0);"
    "UPDATE executions SET response_bytes = COALESCE(length(CAST(response AS BLOB)), 0);"
    "CREATE INDEX executions_stored ON executions(account_id, ended_at_ms)"
    "  WHERE response IS NOT NULL;",
    /* 8 (issue 20, several hosts): the host a sandbox runs on (every
     * sandbox before it ran on the one host, named 'local'), and the hosts
     * an operator drained (`sandboxd admin drain HOST`), which the serving
     * daemon reads. Executions record no domain: they end with their
     * request, and a restart fails the unfinished ones. */
    "ALTER TABLE sandboxes ADD COLUMN host TEXT NOT NULL DEFAULT 'local';"
    "CREATE INDEX sandboxes_live_by_host ON sandboxes(host)"
    "  WHERE status IN ('creating','running');"
    "CREATE TABLE host_drains ("
    "  host TEXT PRIMARY KEY,"
    "  drained_at_ms INTEGER NOT NULL"
    ");",
    /* 9 (issue 24): receipts are kept execution_retention_hours and at
     * most max_receipts_per_account per account, the oldest dropped
     * first: an index to find an account's oldest */
    "CREATE INDEX receipts_by_account ON receipts(account_id, created_at_ms);",
    /* 10 (issue 32, labels): a sandbox's and an execution's metadata as
     * the API shows it (a JSON object of string pairs, keys sorted), and
     * a sandbox's pairs one per row, which the list's filter and usage
     * grouped by a key read through an index. Both written in one
     * transaction (store_sandbox_reserve, store_sandbox_metadata_update). */
    "ALTER TABLE sandboxes ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}';"
    "ALTER TABLE executions ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}';"
    "CREATE TABLE sandbox_labels ("
    "  sandbox_id TEXT NOT NULL REFERENCES sandboxes(id),"
    "  account_id TEXT NOT NULL REFERENCES accounts(id),"
    "  key TEXT NOT NULL,"
    "  value TEXT NOT NULL,"
    "  PRIMARY KEY (sandbox_id, key)"
    ") WITHOUT ROWID;"
    "CREATE INDEX sandbox_labels_by_value ON sandbox_labels(account_id, key, value);"
    "CREATE INDEX sandboxes_by_account_ended ON sandboxes(account_id, ended_at_ms);",
    /* 11 (issue 29, pause and resume): a paused sandbox stays 'running'
     * with paused_at_ms > 0 (store.h STORE_PAUSED); what its pauses took
     * (time, storage cost) and the current pause's size and price. */
    "ALTER TABLE sandboxes ADD COLUMN paused_at_ms INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE sandboxes ADD COLUMN paused_ms INTEGER NOT NULL DEFAULT 0"
    "  CHECK (paused_ms >= 0);"
    "ALTER TABLE sandboxes ADD COLUMN paused_bytes INTEGER NOT NULL DEFAULT 0"
    "  CHECK (paused_bytes >= 0);"
    "ALTER TABLE sandboxes ADD COLUMN storage_price_micro INTEGER NOT NULL DEFAULT 0"
    "  CHECK (storage_price_micro >= 0);"
    "ALTER TABLE sandboxes ADD COLUMN storage_micro INTEGER NOT NULL DEFAULT 0"
    "  CHECK (storage_micro >= 0);",
    /* 12 (issue 27, egress): a sandbox's network policy as the API shows
     * it (canonical JSON; every sandbox before it had none), the bytes its
     * connections moved each way (counted by the daemon, which relays
     * them), and the price of a GB in force at its create. */
    "ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL"
    "  DEFAULT '{\"egress\":\"none\",\"allow\":[],\"deny\":[]}';"
    "ALTER TABLE sandboxes ADD COLUMN net_bytes_in INTEGER NOT NULL DEFAULT 0"
    "  CHECK (net_bytes_in >= 0);"
    "ALTER TABLE sandboxes ADD COLUMN net_bytes_out INTEGER NOT NULL DEFAULT 0"
    "  CHECK (net_bytes_out >= 0);"
    "ALTER TABLE sandboxes ADD COLUMN net_price_micro_per_gb INTEGER NOT NULL DEFAULT 0"
    "  CHECK (net_price_micro_per_gb >= 0);",
    /* 13 (issue 28, preview URLs): a browser's way to a sandbox's port.
     * Only the SHA-256 of a preview's token is kept (the token is shown
     * once); a revoked one keeps its row until it would have expired. */
    "CREATE TABLE previews ("
    "  id TEXT PRIMARY KEY,"
    "  account_id TEXT NOT NULL REFERENCES accounts(id),"
    "  sandbox_id TEXT NOT NULL REFERENCES sandboxes(id),"
    "  port INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),"
    "  token_hash TEXT NOT NULL UNIQUE,"
    "  created_at_ms INTEGER NOT NULL,"
    "  expires_at_ms INTEGER NOT NULL,"
    "  revoked_at_ms INTEGER NOT NULL DEFAULT 0"
    ");"
    "CREATE INDEX previews_by_sandbox ON previews(sandbox_id, port, created_at_ms);"
    "CREATE INDEX previews_by_expiry ON previews(expires_at_ms);",
    /* 14 (issue 29, disk snapshots): an account's snapshots of a
     * sandbox's disk (one file each on the host that took it, backed
     * only by the base image), the snapshot a sandbox's overlay is backed
     * by ('' for the base image), and the ledger's link to a snapshot's
     * storage charges (a hold and its charge each settle). A 'creating'
     * row has a file being written; 'deleting' a file being removed;
     * billed_until_ms is where its storage was charged up to. */
    "CREATE TABLE snapshots ("
    "  id TEXT PRIMARY KEY,"
    "  account_id TEXT NOT NULL REFERENCES accounts(id),"
    "  name TEXT NOT NULL DEFAULT '',"
    "  sandbox_id TEXT NOT NULL,"
    "  host TEXT NOT NULL,"
    "  base_snapshot_id TEXT NOT NULL DEFAULT '',"
    "  disk_gib INTEGER NOT NULL CHECK (disk_gib >= 0),"
    "  bytes INTEGER NOT NULL DEFAULT 0 CHECK (bytes >= 0),"
    "  status TEXT NOT NULL CHECK (status IN ('creating','ready','deleting','deleted')),"
    "  price_micro_per_gib_hour INTEGER NOT NULL DEFAULT 0"
    "    CHECK (price_micro_per_gib_hour >= 0),"
    "  charge_micro INTEGER NOT NULL DEFAULT 0 CHECK (charge_micro >= 0),"
    "  created_at_ms INTEGER NOT NULL,"
    "  billed_until_ms INTEGER NOT NULL DEFAULT 0,"
    "  deleted_at_ms INTEGER NOT NULL DEFAULT 0"
    ");"
    "CREATE INDEX snapshots_by_account ON snapshots(account_id, status, created_at_ms);"
    "ALTER TABLE sandboxes ADD COLUMN snapshot_id TEXT NOT NULL DEFAULT '';"
    "CREATE INDEX sandboxes_by_snapshot ON sandboxes(snapshot_id, status)"
    "  WHERE snapshot_id != '';"
    "ALTER TABLE ledger ADD COLUMN snapshot_id TEXT NULL;"
    "CREATE INDEX ledger_by_snapshot ON ledger(snapshot_id) WHERE snapshot_id IS NOT NULL;",
    /* 15 (issue 29, timeout_action): what its expiry does to a sandbox,
     * 0 = it ends (expired), 1 = it pauses (enum store_timeout_action). */
    "ALTER TABLE sandboxes ADD COLUMN timeout_action INTEGER NOT NULL DEFAULT 0"
    "  CHECK (timeout_action IN (0, 1));",
};

/* Work in C that a migration needs after its SQL, in the same transaction,
 * by the version that SQL brings the schema to. Renumber an entry together
 * with its SQL. */
static int (*const store_migration_after[])(struct store *s, struct sbx_error *err) = {
    [5] = store_usage_rebuild_tx,
};

int store_migrate(struct store *s, struct sbx_error *err)
{
	if (store_tx_begin(s, err) < 0)
		return -1;

	_cleanup_stmt_ sqlite3_stmt *q = NULL;
	if (store_prepare(s, "PRAGMA user_version", &q, err) < 0 || store_step_row(s, q, err) < 0)
		goto err_rollback;
	int version = sqlite3_column_int(q, 0);
	int target = (int)SBX_ARRAY_SIZE(store_migrations);
	if (version > target) {
		sbx_err(MOD, "database schema version %d is newer than this build's %d", version,
			target);
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "the database is from a newer version");
		goto err_rollback;
	}
	for (int v = version; v < target; v++) {
		if (store_exec(s, store_migrations[v], err) < 0)
			goto err_rollback;
		if ((size_t)v + 1 < SBX_ARRAY_SIZE(store_migration_after) &&
		    store_migration_after[v + 1] && store_migration_after[v + 1](s, err) < 0)
			goto err_rollback;
		sbx_info(MOD, "migrated schema to version %d", v + 1);
	}
	if (version < target) {
		/* PRAGMA takes no bound parameters; target is our own constant. */
		char sql[48];
		snprintf(sql, sizeof sql, "PRAGMA user_version = %d", target);
		if (store_exec(s, sql, err) < 0)
			goto err_rollback;
	}
	return store_tx_end(s, 0, err);

err_rollback:
	store_tx_rollback(s);
	return -1;
}
