/* store: what store.c and the store's other files share. */
#ifndef SBX_STORE_PRIV_H
#define SBX_STORE_PRIV_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>

/* Read connections: each a struct store of its own (db + lock, no
 * readers), so that every helper below works on either kind. */
#define STORE_READERS 4

/* A statement prepared once on one connection, keyed by the address of
 * its SQL text (a string literal). */
struct store_stmt_slot {
	const char *sql;
	sqlite3_stmt *stmt;
};

struct store {
	sqlite3 *db;
	pthread_mutex_t lock;
	struct store *readers; /* STORE_READERS of them; NULL on a reader */
	unsigned next_reader;  /* round-robin start (atomic) */
	/* This connection's cached statements (store_prepare_cached), under
	 * lock; finalised by store_close. Grows to the number of distinct
	 * cached texts in the code (a few dozen), never with traffic. */
	struct store_stmt_slot *cache;
	size_t n_cache, cap_cache;
	int64_t tx_started_us; /* the open write transaction's BEGIN (metrics) */
};

/* Shared helpers (store.c). */
#include "../util/util.h"
#include "store.h"

/* Finalise a statement at the end of its scope: _cleanup_stmt_. */
void store_stmt_finalizep(sqlite3_stmt **stmt);
#define _cleanup_stmt_ _cleanup_(store_stmt_finalizep)
void store_unlockp(struct store **s);
/* Take s->lock until the end of the enclosing scope. */
#define STORE_LOCK(s)                                                                              \
	pthread_mutex_lock(&(s)->lock);                                                            \
	struct store *store_locked_ _cleanup_(store_unlockp) = (s)
/* Take a read connection of s (never the writer's mutex) until the end of
 * the enclosing scope, and point s at it: the function's statements then
 * run on that connection. For functions that only read. */
struct store *store_reader_acquire(struct store *s);
#define STORE_READ(s)                                                                              \
	struct store *store_locked_ _cleanup_(store_unlockp) = store_reader_acquire(s);            \
	(s) = store_locked_
/* Log what failed (with SQLite's message) and fill err with a tenant-safe
 * SBX_E_INTERNAL. Returns -1. */
int store_db_error(struct store *s, const char *what, struct sbx_error *err);
/* Run one statement without results (DDL, BEGIN, COMMIT). 0 or -1. */
int store_exec(struct store *s, const char *sql, struct sbx_error *err);
/* Run one statement without results through the connection's cache
 * (BEGIN, COMMIT: the hot ones; `sql` a string literal). 0 or -1. */
int store_exec_cached(struct store *s, const char *sql, struct sbx_error *err);
/* BEGIN IMMEDIATE / COMMIT. 0 or -1. */
int store_tx_begin(struct store *s, struct sbx_error *err);
int store_tx_commit(struct store *s, struct sbx_error *err);
/* Roll back the open transaction, if any. */
void store_tx_rollback(struct store *s);
/* End the open write transaction: COMMIT and return rc when rc >= 0;
 * ROLLBACK and return -1 when rc < 0 or the COMMIT fails. */
int store_tx_end(struct store *s, int rc, struct sbx_error *err);
/* Prepare a statement of its own (finalise it: _cleanup_stmt_), for what
 * runs once (the opening PRAGMAs, the migration). 0 or -1. */
int store_prepare(struct store *s, const char *sql, sqlite3_stmt **stmt, struct sbx_error *err);
/* The connection's own copy of the statement for `sql`, prepared on first
 * use (SQLITE_PREPARE_PERSISTENT) and kept until store_close: no parsing,
 * planning or allocation on later calls. `sql` must be a string literal
 * (its address is the key). Call with s->lock held (STORE_LOCK,
 * STORE_READ) and declare the statement _cleanup_reset_ inside that scope
 * (after STORE_READ/STORE_LOCK), so that it is reset and its bindings
 * cleared before the connection is given back: a statement left mid-step
 * would keep its read snapshot open. Never finalise it. 0 or -1. */
int store_prepare_cached(struct store *s, const char *sql, sqlite3_stmt **stmt,
			 struct sbx_error *err);
/* Reset a cached statement and clear its bindings at the end of its
 * scope: _cleanup_reset_. */
void store_stmt_resetp(sqlite3_stmt **stmt);
#define _cleanup_reset_ _cleanup_(store_stmt_resetp)
/* Bind text (NULL binds NULL), copied. */
int store_bind_text(sqlite3_stmt *stmt, int i, const char *v);

/* The statement helper. One value to bind, made by STORE_T (text, copied;
 * NULL binds NULL), STORE_I (any integer, as int64) or STORE_B (a blob of
 * n bytes, copied; NULL binds NULL). */
enum store_arg_type { STORE_ARG_TEXT, STORE_ARG_INT, STORE_ARG_BLOB };
struct store_arg {
	enum store_arg_type type;
	const void *p; /* text or blob */
	int64_t i;     /* the integer, or the blob's length */
};
#define STORE_T(v)    ((struct store_arg){STORE_ARG_TEXT, (v), 0})
#define STORE_I(v)    ((struct store_arg){STORE_ARG_INT, NULL, (int64_t)(v)})
#define STORE_B(v, n) ((struct store_arg){STORE_ARG_BLOB, (v), (int64_t)(n)})
/* Take the connection's cached statement for `sql` (store_prepare_cached:
 * a string literal, s->lock held, *q declared _cleanup_reset_ after
 * STORE_LOCK/STORE_READ), bind args to ?1..?n, step once. SQLITE_ROW (the
 * row's columns are in *q; sqlite3_step it for more) or SQLITE_DONE; a
 * failure to prepare, bind or step is -1 with err filled by
 * store_db_error (SBX_E_INTERNAL). store_run(s, &q, sql, err, STORE_T(id),
 * STORE_I(now)) passes the arguments as a list; none: store_run_args with
 * NULL, 0. */
int store_run_args(struct store *s, sqlite3_stmt **q, const char *sql, const struct store_arg *args,
		   size_t n, struct sbx_error *err);
#define STORE_ARGS(...)	 ((const struct store_arg[]){__VA_ARGS__})
#define STORE_NARGS(...) (sizeof(STORE_ARGS(__VA_ARGS__)) / sizeof(struct store_arg))
#define store_run(s, q, sql, err, ...)                                                             \
	store_run_args(s, q, sql, STORE_ARGS(__VA_ARGS__), STORE_NARGS(__VA_ARGS__), err)
/* store_run without the step, for a query that store_collect reads: 0 or
 * -1. */
int store_bind_args(struct store *s, sqlite3_stmt **q, const char *sql,
		    const struct store_arg *args, size_t n, struct sbx_error *err);
#define store_bind(s, q, sql, err, ...)                                                            \
	store_bind_args(s, q, sql, STORE_ARGS(__VA_ARGS__), STORE_NARGS(__VA_ARGS__), err)
/* One statement without result rows in a write transaction of its own:
 * STORE_LOCK, BEGIN IMMEDIATE, store_run, COMMIT (ROLLBACK on failure).
 * Returns the rows it changed; with STORE_WRITE_NEED_CHANGE a statement
 * that changed none is rolled back instead and 0 returned (the caller
 * says what was not found). -1 with err on failure. */
#define STORE_WRITE_NEED_CHANGE 1u
int store_write_args(struct store *s, unsigned flags, const char *sql, const struct store_arg *args,
		     size_t n, struct sbx_error *err);
#define store_write(s, flags, sql, err, ...)                                                       \
	store_write_args(s, flags, sql, STORE_ARGS(__VA_ARGS__), STORE_NARGS(__VA_ARGS__), err)
/* Collect up to max_rows rows of a query into a malloc'd array (*out, *n)
 * through a row decoder. */
typedef void (*store_row_fn)(sqlite3_stmt *q, void *elem);
int store_collect(struct store *s, sqlite3_stmt *q, size_t elem_size, size_t max_rows,
		  store_row_fn decode, void **out, size_t *n, struct sbx_error *err);
/* Step a statement that must return a row. 0 or -1. */
int store_step_row(struct store *s, sqlite3_stmt *stmt, struct sbx_error *err);
/* 0 when the account exists; -1 when not (err: SBX_E_NOT_FOUND, "no such
 * account") or on error. Call with s->lock. */
int store_account_need(struct store *s, const char *account_id, struct sbx_error *err);
/* err: SBX_E_NOT_FOUND, "no such account '<id>'". Returns -1. */
int store_no_account(struct sbx_error *err, const char *account_id);
/* Append one ledger row (kind 'credit', 'hold', 'release' or 'charge')
 * inside the open write transaction. 0 or -1. */
int store_ledger_insert(struct store *s, const char *account_id, const char *sandbox_id,
			const char *kind, int64_t amount_micro, int64_t now_ms,
			struct sbx_error *err);
/* The same for a snapshot's storage (migration 14: linked to the
 * snapshot, not to a sandbox or an execution). */
int store_ledger_snapshot_insert(struct store *s, const char *account_id, const char *snapshot_id,
				 const char *kind, int64_t amount_micro, int64_t now_ms,
				 struct sbx_error *err);
/* Bring the schema to this build's version (migrate.c): every missing
 * migration in one write transaction. 0 or -1. */
int store_migrate(struct store *s, struct sbx_error *err);
/* Copy a text column into a fixed buffer ("" for NULL, cut to fit). */
void store_copy_col(char *dst, size_t dstlen, sqlite3_stmt *stmt, int col);
/* What an account can still reserve, in micro-USD: credits - holds +
 * releases over its ledger (= balance - reserved; docs/billing.md). The
 * one place the formula lives. 0 or -1. */
int store_available(struct store *s, const char *account_id, int64_t *available,
		    struct sbx_error *err);

/* keys.c: inside the write transaction of a new key of account_id, apply
 * `keep` (store_key_keep): SBX_E_CONCURRENCY_LIMIT at the cap of valid
 * keys, then drop the revoked keys it no longer keeps. 0 or -1. */
int store_key_keep_locked(struct store *s, const char *account_id,
			  const struct store_key_keep *keep, struct sbx_error *err);
/* A store_row_fn of the key columns (id, account_id, prefix, created_at_ms,
 * revoked_at_ms, scopes) into a struct store_key. */
void store_key_decode(sqlite3_stmt *q, void *elem);

/* The reading halves of store_balance_get, store_sandbox_count_live and
 * the running list, for a caller that holds a connection (STORE_READ) and
 * may have opened a read transaction on it: the usage snapshot. The
 * running list is every 'running' sandbox of the account, newest first
 * (bounded by the account's live cap); *out malloc'd, NULL when none. */
int store_balance_locked(struct store *s, const char *account_id, struct store_balance *out,
			 struct sbx_error *err);
int store_count_live_locked(struct store *s, const char *account_id, int *n, struct sbx_error *err);
int store_sandbox_list_running_locked(struct store *s, const char *account_id,
				      struct store_sandbox **out, size_t *n, struct sbx_error *err);

/* Usage rollups (usage.c). Inside the open write transaction that ends
 * `row` (still as it was read, RUNNING) at ended_at_ms with its final
 * charge: add its billed seconds and charge to the hour, day and month
 * buckets of its account and size, split by the time it ran in each. */
int store_usage_settle(struct store *s, const struct store_sandbox *row, int64_t ended_at_ms,
		       int64_t charge_micro, struct sbx_error *err);
/* Inside an open write transaction: recompute every rollup from the
 * sandboxes that ended (migration 5 runs it once). */
int store_usage_rebuild_tx(struct store *s, struct sbx_error *err);

/* Tests only: SQL that takes a current database back to what schema
 * version 4 left (before the running totals and rollups of migration 5,
 * the 'keys' scope of 6, the stored-response sizes of 7 and the hosts of
 * 8), so migration
 * tests can run those steps on old data. Keep it in step with the list. */
#define STORE_PRIV_BACK_TO_SCHEMA_4                                                                \
	"DROP TRIGGER ledger_totals; DROP TABLE usage_rollups;"                                    \
	"DROP INDEX sandboxes_by_account_status;"                                                  \
	"ALTER TABLE accounts DROP COLUMN credits_micro;"                                          \
	"ALTER TABLE accounts DROP COLUMN holds_micro;"                                            \
	"ALTER TABLE accounts DROP COLUMN releases_micro;"                                         \
	"ALTER TABLE accounts DROP COLUMN charges_micro;"                                          \
	"DROP INDEX executions_stored; ALTER TABLE executions DROP COLUMN "                        \
	"response_bytes;" STORE_PRIV_BACK_TO_SCHEMA_14_TIMEOUT_ACTION                              \
	    STORE_PRIV_BACK_TO_SCHEMA_13_SNAPSHOTS STORE_PRIV_BACK_TO_SCHEMA_12_PREVIEWS           \
		STORE_PRIV_BACK_TO_SCHEMA_11_NETWORK STORE_PRIV_BACK_TO_SCHEMA_10_PAUSE            \
		    STORE_PRIV_BACK_TO_SCHEMA_9_LABELS STORE_PRIV_BACK_TO_SCHEMA_8_RECEIPTS        \
			STORE_PRIV_BACK_TO_SCHEMA_7_HOSTS "PRAGMA user_version = 4;"
/* Tests only: undo migration 15 (timeout_action). */
#define STORE_PRIV_BACK_TO_SCHEMA_14_TIMEOUT_ACTION                                                \
	"ALTER TABLE sandboxes DROP COLUMN timeout_action;"
/* Tests only: undo migration 14 (snapshots). */
#define STORE_PRIV_BACK_TO_SCHEMA_13_SNAPSHOTS                                                     \
	"DROP INDEX ledger_by_snapshot; ALTER TABLE ledger DROP COLUMN snapshot_id;"               \
	"DROP INDEX sandboxes_by_snapshot; ALTER TABLE sandboxes DROP COLUMN snapshot_id;"         \
	"DROP TABLE snapshots;"
/* Tests only: undo migration 13 (previews). */
#define STORE_PRIV_BACK_TO_SCHEMA_12_PREVIEWS "DROP TABLE previews;"
/* Tests only: undo migration 12 (egress). */
#define STORE_PRIV_BACK_TO_SCHEMA_11_NETWORK                                                       \
	"ALTER TABLE sandboxes DROP COLUMN network;"                                               \
	"ALTER TABLE sandboxes DROP COLUMN net_bytes_in;"                                          \
	"ALTER TABLE sandboxes DROP COLUMN net_bytes_out;"                                         \
	"ALTER TABLE sandboxes DROP COLUMN net_price_micro_per_gb;"
/* Tests only: undo migration 11 (pause and resume). */
#define STORE_PRIV_BACK_TO_SCHEMA_10_PAUSE                                                         \
	"ALTER TABLE sandboxes DROP COLUMN paused_at_ms;"                                          \
	"ALTER TABLE sandboxes DROP COLUMN paused_ms;"                                             \
	"ALTER TABLE sandboxes DROP COLUMN paused_bytes;"                                          \
	"ALTER TABLE sandboxes DROP COLUMN storage_price_micro;"                                   \
	"ALTER TABLE sandboxes DROP COLUMN storage_micro;"
/* Tests only: undo migration 10 (labels). */
#define STORE_PRIV_BACK_TO_SCHEMA_9_LABELS                                                         \
	"DROP TABLE sandbox_labels; DROP INDEX sandboxes_by_account_ended;"                        \
	"ALTER TABLE sandboxes DROP COLUMN metadata; ALTER TABLE executions DROP COLUMN metadata;"
/* Tests only: undo migration 9 (the receipts' index). */
#define STORE_PRIV_BACK_TO_SCHEMA_8_RECEIPTS "DROP INDEX receipts_by_account;"
/* Tests only: undo migration 8 (the sandbox's host and the drains). */
#define STORE_PRIV_BACK_TO_SCHEMA_7_HOSTS                                                          \
	"DROP INDEX sandboxes_live_by_host; ALTER TABLE sandboxes DROP COLUMN host;"               \
	"DROP TABLE host_drains;"

#endif
