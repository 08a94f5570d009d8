/* store: what store.c and the store's other files share. */
#ifndef SBX_STORE_PRIV_H
#define SBX_STORE_PRIV_H

#include <pthread.h>
#include <sqlite3.h>

struct store {
	sqlite3 *db;
	pthread_mutex_t lock;
};

/* Shared helpers (store.c). */
#include "../util/util.h"

/* Finalise a statement at the end of its scope: _cleanup_stmt_. */
void store_stmt_finalizep(sqlite3_stmt **stmt);
#define _cleanup_stmt_ _cleanup_(store_stmt_finalizep)
void store_unlockp(struct store **s);
/* Take s->lock until the end of the enclosing scope. */
#define STORE_LOCK(s)                                                                              \
	pthread_mutex_lock(&(s)->lock);                                                            \
	struct store *store_locked_ _cleanup_(store_unlockp) = (s)
/* Log what failed (with SQLite's message) and fill err with a tenant-safe
 * SBX_E_INTERNAL. Returns -1. */
int store_db_error(struct store *s, const char *what, struct sbx_error *err);
/* Run one statement without results (DDL, BEGIN, COMMIT). 0 or -1. */
int store_exec(struct store *s, const char *sql, struct sbx_error *err);
/* BEGIN IMMEDIATE / COMMIT. 0 or -1. */
int store_tx_begin(struct store *s, struct sbx_error *err);
int store_tx_commit(struct store *s, struct sbx_error *err);
/* Roll back the open transaction, if any. */
void store_tx_rollback(struct store *s);
/* Copy a text column into a fixed buffer ("" for NULL, cut to fit). */
void store_copy_col(char *dst, size_t dstlen, sqlite3_stmt *stmt, int col);
/* What an account can still reserve, in micro-USD: credits - holds +
 * releases over its ledger (= balance - reserved; docs/billing.md). The
 * one place the formula lives. 0 or -1. */
int store_available(struct store *s, const char *account_id, int64_t *available,
		    struct sbx_error *err);

#endif
