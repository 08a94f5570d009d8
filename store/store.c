/* store: accounts, API keys, sandboxes and the append-only ledger in SQLite.
 *
 * One write connection (SQLITE_OPEN_FULLMUTEX) behind one pthread mutex:
 * every writing function holds s->lock for its whole duration, so a
 * multi-statement transaction never interleaves with another thread's
 * statements. Reading functions take one of STORE_READERS read connections
 * (STORE_READ), each behind its own mutex, instead. Every write
 * is BEGIN IMMEDIATE ... COMMIT (ROLLBACK on any failure), which also keeps
 * other processes on the same file (the admin CLI) out of the middle of it.
 * Values are always bound, never formatted into SQL.
 *
 * Statements: every one goes through store_run (store_bind for a query
 * that store_collect reads): the connection's own prepared copy of the
 * SQL text (a string literal; prepared once, kept until store_close), its
 * values bound as a typed list (STORE_T text, STORE_I integer, STORE_B
 * blob) to ?1..?n, one step, and any failure to prepare, bind or step
 * logged with SQLite's message and given to the caller as SBX_E_INTERNAL
 * (store_db_error). The statement is declared _cleanup_reset_ after
 * STORE_LOCK/STORE_READ, so it is reset and its bindings cleared before
 * the connection is let go. A statement in a write transaction of its
 * own is store_write; several in one are store_tx_begin, store_run...,
 * store_tx_end (or a goto to a ROLLBACK on the first failure). What runs
 * rarely and binds nothing (migrations, the opening PRAGMAs, a few
 * one-off statements) may use store_exec, uncached.
 *
 * This file: the connections, statements and transactions every other
 * file of store/ uses (store-priv.h). The tables by concern: accounts.c
 * (accounts, credit), keys.c (API keys), ledger.c (balances, the ledger
 * check, totals), idem.c (idempotency keys), sandbox.c, execution.c,
 * usage.c, previews.c; migrate.c the schema.
 */
#include "store.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

#define MOD "store"

#include "store-priv.h"

/* ------------------------------------------------------------- helpers */

void store_stmt_finalizep(sqlite3_stmt **stmt)
{
	if (*stmt)
		sqlite3_finalize(*stmt);
}

void store_unlockp(struct store **s)
{
	if (*s)
		pthread_mutex_unlock(&(*s)->lock);
}

int store_db_error(struct store *s, const char *what, struct sbx_error *err)
{
	sbx_err(MOD, "%s: %s", what, sqlite3_errmsg(s->db));
	return sbx_error_set(err, SBX_E_INTERNAL, NULL, "the database failed; try again later");
}

int store_prepare(struct store *s, const char *sql, sqlite3_stmt **stmt, struct sbx_error *err)
{
	if (sqlite3_prepare_v2(s->db, sql, -1, stmt, NULL) != SQLITE_OK) {
		*stmt = NULL;
		return store_db_error(s, "prepare", err);
	}
	return 0;
}

void store_stmt_resetp(sqlite3_stmt **stmt)
{
	if (*stmt) {
		sqlite3_reset(*stmt);
		sqlite3_clear_bindings(*stmt);
	}
}

int store_prepare_cached(struct store *s, const char *sql, sqlite3_stmt **stmt,
			 struct sbx_error *err)
{
	for (size_t i = 0; i < s->n_cache; i++) {
		if (s->cache[i].sql == sql) {
			*stmt = s->cache[i].stmt;
			return 0;
		}
	}
	*stmt = NULL;
	if (s->n_cache == s->cap_cache) {
		size_t ncap = s->cap_cache ? s->cap_cache * 2 : 16;
		struct store_stmt_slot *p = realloc(s->cache, ncap * sizeof(*p));
		if (!p)
			return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		s->cache = p;
		s->cap_cache = ncap;
	}
	sqlite3_stmt *q = NULL;
	if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &q, NULL) != SQLITE_OK)
		return store_db_error(s, "prepare", err);
	s->cache[s->n_cache++] = (struct store_stmt_slot){sql, q};
	*stmt = q;
	return 0;
}

/* Finalise every cached statement of one connection (before closing it). */
static void store_cache_clear(struct store *s)
{
	for (size_t i = 0; i < s->n_cache; i++)
		sqlite3_finalize(s->cache[i].stmt);
	free(s->cache);
	s->cache = NULL;
	s->n_cache = s->cap_cache = 0;
}

int store_bind_text(sqlite3_stmt *stmt, int i, const char *v)
{
	if (!v)
		return sqlite3_bind_null(stmt, i);
	return sqlite3_bind_text(stmt, i, v, -1, SQLITE_TRANSIENT);
}

static int store_bind_arg(sqlite3_stmt *q, int at, const struct store_arg *a)
{
	switch (a->type) {
	case STORE_ARG_TEXT:
		return store_bind_text(q, at, a->p);
	case STORE_ARG_INT:
		return sqlite3_bind_int64(q, at, a->i);
	case STORE_ARG_BLOB:
		if (a->i < 0)
			return SQLITE_MISUSE;
		return sqlite3_bind_blob64(q, at, a->p, (sqlite3_uint64)a->i, SQLITE_TRANSIENT);
	}
	return SQLITE_MISUSE;
}

int store_bind_args(struct store *s, sqlite3_stmt **q, const char *sql,
		    const struct store_arg *args, size_t n, struct sbx_error *err)
{
	if (store_prepare_cached(s, sql, q, err) < 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (i >= INT32_MAX || store_bind_arg(*q, (int)i + 1, &args[i]) != SQLITE_OK)
			return store_db_error(s, "bind", err);
	return 0;
}

int store_run_args(struct store *s, sqlite3_stmt **q, const char *sql, const struct store_arg *args,
		   size_t n, struct sbx_error *err)
{
	if (store_bind_args(s, q, sql, args, n, err) < 0)
		return -1;
	int rc = sqlite3_step(*q);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return store_db_error(s, "step", err);
	return rc;
}

int store_write_args(struct store *s, unsigned flags, const char *sql, const struct store_arg *args,
		     size_t n, struct sbx_error *err)
{
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	int changes;
	{
		_cleanup_reset_ sqlite3_stmt *q = NULL;
		changes =
		    store_run_args(s, &q, sql, args, n, err) < 0 ? -1 : sqlite3_changes(s->db);
	}
	if (changes == 0 && (flags & STORE_WRITE_NEED_CHANGE)) {
		store_tx_rollback(s);
		return 0;
	}
	return store_tx_end(s, changes, err);
}

int store_exec(struct store *s, const char *sql, struct sbx_error *err)
{
	char *msg = NULL;
	if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		sbx_err(MOD, "exec: %s", msg ? msg : sqlite3_errmsg(s->db));
		sqlite3_free(msg);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL,
				     "the database failed; try again later");
	}
	return 0;
}

int store_exec_cached(struct store *s, const char *sql, struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	return store_run_args(s, &q, sql, NULL, 0, err) < 0 ? -1 : 0;
}

static int64_t store_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int store_tx_begin(struct store *s, struct sbx_error *err)
{
	s->tx_started_us = store_now_us();
	return store_exec_cached(s, "BEGIN IMMEDIATE", err);
}

int store_tx_commit(struct store *s, struct sbx_error *err)
{
	int rc = store_exec_cached(s, "COMMIT", err);

	if (rc == 0)
		sbx_hist_observe_us(SBX_H_STORE_TX, store_now_us() - s->tx_started_us);
	return rc;
}

void store_tx_rollback(struct store *s)
{
	if (!sqlite3_get_autocommit(s->db))
		sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

int store_tx_end(struct store *s, int rc, struct sbx_error *err)
{
	if (rc >= 0 && store_tx_commit(s, err) == 0)
		return rc;
	store_tx_rollback(s);
	return -1;
}

/* Step a query expected to return exactly one row (aggregates). */
int store_step_row(struct store *s, sqlite3_stmt *stmt, struct sbx_error *err)
{
	if (sqlite3_step(stmt) != SQLITE_ROW)
		return store_db_error(s, "step", err);
	return 0;
}

void store_copy_col(char *dst, size_t dstlen, sqlite3_stmt *stmt, int col)
{
	const unsigned char *t = sqlite3_column_text(stmt, col);
	snprintf(dst, dstlen, "%s", t ? (const char *)t : "");
}

static const char *const store_status_names[] = {
    [STORE_CREATING] = "creating", [STORE_RUNNING] = "running", [STORE_DESTROYED] = "destroyed",
    [STORE_EXPIRED] = "expired",   [STORE_FAILED] = "failed",	[STORE_ABORTED] = "aborted",
    [STORE_PAUSED] = "paused",
};

const char *store_status_name(enum store_status st)
{
	if ((unsigned)st >= SBX_ARRAY_SIZE(store_status_names))
		return "unknown";
	return store_status_names[st];
}

int store_status_parse(const char *name, enum store_status *st)
{
	if (!name)
		return -1;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(store_status_names); i++) {
		if (strcmp(name, store_status_names[i]) == 0) {
			*st = (enum store_status)i;
			return 0;
		}
	}
	return -1;
}

static void store_readers_close(struct store *s, size_t n)
{
	if (!s->readers)
		return;
	for (size_t i = 0; i < n; i++) {
		store_cache_clear(&s->readers[i]);
		sqlite3_close(s->readers[i].db);
		pthread_mutex_destroy(&s->readers[i].lock);
	}
	free(s->readers);
	s->readers = NULL;
}

/* The read connections (after migration: they never write). WAL lets them
 * read a committed snapshot while the writer writes. */
static int store_readers_open(struct store *s, const char *path, struct sbx_error *err)
{
	s->readers = calloc(STORE_READERS, sizeof(*s->readers));
	if (!s->readers)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	for (size_t i = 0; i < STORE_READERS; i++) {
		struct store *r = &s->readers[i];
		if (pthread_mutex_init(&r->lock, NULL) != 0) {
			store_readers_close(s, i);
			return sbx_error_set(err, SBX_E_INTERNAL, NULL,
					     "cannot initialise the store lock");
		}
		if (sqlite3_open_v2(path, &r->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX,
				    NULL) != SQLITE_OK ||
		    store_exec(r, "PRAGMA busy_timeout = 5000; PRAGMA query_only = ON", err) < 0) {
			sbx_err(MOD, "open reader %s: %s", path,
				r->db ? sqlite3_errmsg(r->db) : "out of memory");
			store_readers_close(s, i + 1);
			return sbx_error_set(err, SBX_E_INTERNAL, NULL, "cannot open the database");
		}
		sqlite3_extended_result_codes(r->db, 1);
	}
	return 0;
}

struct store *store_reader_acquire(struct store *s)
{
	if (!s->readers) {
		pthread_mutex_lock(&s->lock);
		return s;
	}
	unsigned start = __atomic_fetch_add(&s->next_reader, 1, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < STORE_READERS; i++) {
		struct store *r = &s->readers[(start + i) % STORE_READERS];
		if (pthread_mutex_trylock(&r->lock) == 0)
			return r;
	}
	struct store *r = &s->readers[start % STORE_READERS];
	pthread_mutex_lock(&r->lock);
	return r;
}

/* Before SQLite's first use in the process: no global memory statistics,
 * whose mutex every allocation of every connection would otherwise take
 * (the read connections contended on it). */
static void store_sqlite_config(void)
{
	sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

/* The database holds execution outputs and receipts: owner only. New
 * files get that from the daemon's umask (SQLite gives -wal and -shm the
 * database's mode); a database made by an older build is narrowed here. */
static void store_files_private(const char *path)
{
	static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
	char p[4096];

	for (size_t i = 0; i < SBX_ARRAY_SIZE(suffixes); i++) {
		snprintf(p, sizeof p, "%s%s", path, suffixes[i]);
		if (chmod(p, 0600) < 0 && errno != ENOENT)
			sbx_warn(MOD, "chmod 0600 %s: %s", p, strerror(errno));
	}
}

struct store *store_open(const char *path, struct sbx_error *err)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, store_sqlite_config);

	if (!path || !*path) {
		sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL, "no database path given");
		return NULL;
	}
	struct store *s = calloc(1, sizeof *s);
	if (!s) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		return NULL;
	}
	if (pthread_mutex_init(&s->lock, NULL) != 0) {
		free(s);
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "cannot initialise the store lock");
		return NULL;
	}
	int rc = sqlite3_open_v2(
	    path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
	if (rc != SQLITE_OK) {
		sbx_err(MOD, "open %s: %s", path, s->db ? sqlite3_errmsg(s->db) : "out of memory");
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "cannot open the database");
		goto err_close;
	}
	sqlite3_extended_result_codes(s->db, 1);
	/* busy_timeout first: journal_mode=WAL itself may wait for a lock. */
	if (store_exec(s, "PRAGMA busy_timeout = 5000", err) < 0)
		goto err_close;
	{
		_cleanup_stmt_ sqlite3_stmt *q = NULL;
		if (store_prepare(s, "PRAGMA journal_mode = WAL", &q, err) < 0 ||
		    store_step_row(s, q, err) < 0)
			goto err_close;
		const unsigned char *mode = sqlite3_column_text(q, 0);
		if (!mode || strcmp((const char *)mode, "wal") != 0) {
			sbx_err(MOD, "journal_mode is '%s', not wal", mode ? (char *)mode : "");
			sbx_error_set(err, SBX_E_INTERNAL, NULL, "cannot open the database");
			goto err_close;
		}
	}
	if (store_exec(s, "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON", err) < 0)
		goto err_close;
	if (store_migrate(s, err) < 0)
		goto err_close;
	if (store_readers_open(s, path, err) < 0)
		goto err_close;
	store_files_private(path);
	return s;

err_close:
	store_cache_clear(s);
	sqlite3_close(s->db);
	pthread_mutex_destroy(&s->lock);
	free(s);
	return NULL;
}

void store_close(struct store *s)
{
	if (!s)
		return;
	store_readers_close(s, STORE_READERS);
	store_cache_clear(s);
	if (sqlite3_close(s->db) != SQLITE_OK)
		sbx_err(MOD, "close: %s", sqlite3_errmsg(s->db));
	pthread_mutex_destroy(&s->lock);
	free(s);
}
