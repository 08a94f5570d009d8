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
/* A single credit may not exceed $1e9: keeps every sum far from int64 overflow. */
#define STORE_CREDIT_MAX_MICRO INT64_C(1000000000000000)

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
	if (store_prepare_cached(s, sql, &q, err) < 0)
		return -1;
	return store_step_done(s, q, err);
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

/* Step a statement that returns no row (INSERT/UPDATE). */
int store_step_done(struct store *s, sqlite3_stmt *stmt, struct sbx_error *err)
{
	if (sqlite3_step(stmt) != SQLITE_DONE)
		return store_db_error(s, "step", err);
	return 0;
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

/* Copy a caller's string into a fixed field; refuse what does not fit. */
static int store_copy_str(char *dst, size_t dstlen, const char *src)
{
	if (!src || strlen(src) >= dstlen)
		return -1;
	memcpy(dst, src, strlen(src) + 1);
	return 0;
}

static const char *const store_status_names[] = {
    [STORE_CREATING] = "creating", [STORE_RUNNING] = "running", [STORE_DESTROYED] = "destroyed",
    [STORE_EXPIRED] = "expired",   [STORE_FAILED] = "failed",	[STORE_ABORTED] = "aborted",
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

/* --------------------------------------------------- accounts and keys */

/* 1 if the account exists, 0 if not, -1 on error. */
int store_account_exists(struct store *s, const char *account_id, struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_prepare_cached(s, "SELECT 1 FROM accounts WHERE id = ?1", &q, err) < 0)
		return -1;
	store_bind_text(q, 1, account_id);
	int rc = sqlite3_step(q);
	if (rc == SQLITE_ROW)
		return 1;
	if (rc == SQLITE_DONE)
		return 0;
	return store_db_error(s, "account lookup", err);
}

int store_ledger_insert(struct store *s, const char *account_id, const char *sandbox_id,
			const char *kind, int64_t amount_micro, int64_t now_ms,
			struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_prepare_cached(s,
				 "INSERT INTO ledger (account_id, sandbox_id, kind, amount_micro,"
				 " created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
				 &q, err) < 0)
		return -1;
	store_bind_text(q, 1, account_id);
	store_bind_text(q, 2, sandbox_id);
	store_bind_text(q, 3, kind);
	sqlite3_bind_int64(q, 4, amount_micro);
	sqlite3_bind_int64(q, 5, now_ms);
	return store_step_done(s, q, err);
}

int store_account_create(struct store *s, const char *name, int64_t credit_micro,
			 struct store_account *acct, struct sbx_error *err)
{
	struct store_account a = {0};
	if (!name || !*name || store_copy_str(a.name, sizeof a.name, name) < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "name",
				     "the account name must be 1 to %zu characters",
				     sizeof a.name - 1);
	if (credit_micro < 0 || credit_micro > STORE_CREDIT_MAX_MICRO)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "credit",
				     "the opening credit must be between 0 and 1000000000 USD");
	if (sbx_random_id("acct_", 12, a.id, sizeof a.id) < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "cannot generate an account id");
	a.created_at_ms = sbx_wall_ms();

	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	{
		_cleanup_stmt_ sqlite3_stmt *q = NULL;
		if (store_prepare(
			s, "INSERT INTO accounts (id, name, created_at_ms) VALUES (?1, ?2, ?3)", &q,
			err) < 0)
			goto err_rollback;
		store_bind_text(q, 1, a.id);
		store_bind_text(q, 2, a.name);
		sqlite3_bind_int64(q, 3, a.created_at_ms);
		if (store_step_done(s, q, err) < 0)
			goto err_rollback;
	}
	if (credit_micro > 0 &&
	    store_ledger_insert(s, a.id, NULL, "credit", credit_micro, a.created_at_ms, err) < 0)
		goto err_rollback;
	if (store_tx_commit(s, err) < 0)
		goto err_rollback;
	if (acct)
		*acct = a;
	return 0;

err_rollback:
	store_tx_rollback(s);
	return -1;
}

static void store_account_from_stmt(sqlite3_stmt *q, struct store_account *a)
{
	memset(a, 0, sizeof *a);
	store_copy_col(a->id, sizeof a->id, q, 0);
	store_copy_col(a->name, sizeof a->name, q, 1);
	a->created_at_ms = sqlite3_column_int64(q, 2);
}

int store_account_get(struct store *s, const char *account_id, struct store_account *acct,
		      struct sbx_error *err)
{
	STORE_READ(s);
	_cleanup_stmt_ sqlite3_stmt *q = NULL;
	if (store_prepare(s, "SELECT id, name, created_at_ms FROM accounts WHERE id = ?1", &q,
			  err) < 0)
		return -1;
	store_bind_text(q, 1, account_id);
	int rc = sqlite3_step(q);
	if (rc == SQLITE_DONE)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such account '%.64s'",
				     account_id ? account_id : "");
	if (rc != SQLITE_ROW)
		return store_db_error(s, "account get", err);
	store_account_from_stmt(q, acct);
	return 0;
}

int store_credit_add(struct store *s, const char *account_id, int64_t amount_micro,
		     struct sbx_error *err)
{
	if (amount_micro <= 0 || amount_micro > STORE_CREDIT_MAX_MICRO)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "credit",
				     "a credit must be more than 0 and at most 1000000000 USD");
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	int found = store_account_exists(s, account_id, err);
	if (found < 0)
		goto err_rollback;
	if (found == 0) {
		sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such account '%.64s'",
			      account_id ? account_id : "");
		goto err_rollback;
	}
	if (store_ledger_insert(s, account_id, NULL, "credit", amount_micro, sbx_wall_ms(), err) <
	    0)
		goto err_rollback;
	if (store_tx_commit(s, err) < 0)
		goto err_rollback;
	return 0;

err_rollback:
	store_tx_rollback(s);
	return -1;
}

int store_collect(struct store *s, sqlite3_stmt *q, size_t elem_size, size_t max_rows,
		  store_row_fn decode, void **out, size_t *n, struct sbx_error *err)
{
	_cleanup_free_ char *arr = NULL;
	size_t len = 0, cap = 0;
	int rc = SQLITE_DONE;
	while (len < max_rows && (rc = sqlite3_step(q)) == SQLITE_ROW) {
		if (len == cap) {
			size_t ncap = cap ? cap * 2 : 8;
			char *p = realloc(arr, ncap * elem_size);
			if (!p)
				return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
			arr = p;
			cap = ncap;
		}
		decode(q, arr + len * elem_size);
		len++;
	}
	if (len < max_rows && rc != SQLITE_DONE)
		return store_db_error(s, "collect", err);
	*out = TAKE_PTR(arr);
	*n = len;
	return 0;
}

static void store_account_decode(sqlite3_stmt *q, void *elem)
{
	store_account_from_stmt(q, elem);
}

int store_account_list(struct store *s, struct store_account **out, size_t *n,
		       struct sbx_error *err)
{
	STORE_READ(s);
	_cleanup_stmt_ sqlite3_stmt *q = NULL;
	if (store_prepare(s,
			  "SELECT id, name, created_at_ms FROM accounts"
			  " ORDER BY created_at_ms, rowid",
			  &q, err) < 0)
		return -1;
	return store_collect(s, q, sizeof **out, SIZE_MAX, store_account_decode, (void **)out, n,
			     err);
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

/* --------------------------------------------------------------- ledger */

int store_balance_locked(struct store *s, const char *account_id, struct store_balance *out,
			 struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_prepare_cached(s,
				 "SELECT credits_micro, holds_micro, releases_micro, charges_micro"
				 " FROM accounts WHERE id = ?1",
				 &q, err) < 0)
		return -1;
	store_bind_text(q, 1, account_id);
	int rc = sqlite3_step(q);
	if (rc == SQLITE_DONE)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such account '%.64s'",
				     account_id ? account_id : "");
	if (rc != SQLITE_ROW)
		return store_db_error(s, "balance", err);
	int64_t credits = sqlite3_column_int64(q, 0), holds = sqlite3_column_int64(q, 1),
		releases = sqlite3_column_int64(q, 2), charges = sqlite3_column_int64(q, 3);
	out->credits_micro = credits;
	out->consumed_micro = charges;
	out->balance_micro = credits - charges;
	out->reserved_micro = holds - releases - charges;
	out->available_micro = out->balance_micro - out->reserved_micro;
	return 0;
}

int store_balance_get(struct store *s, const char *account_id, struct store_balance *out,
		      struct sbx_error *err)
{
	STORE_READ(s);
	return store_balance_locked(s, account_id, out, err);
}

/* Run an invariant query: every row it returns is a violation, described by
 * its first column. 0 when it returns nothing. */
static int store_check_query(struct store *s, const char *account_id, const char *sql,
			     const char *what, struct sbx_error *err)
{
	_cleanup_stmt_ sqlite3_stmt *q = NULL;
	if (store_prepare(s, sql, &q, err) < 0)
		return -1;
	store_bind_text(q, 1, account_id);
	int rc = sqlite3_step(q);
	if (rc == SQLITE_DONE)
		return 0;
	if (rc != SQLITE_ROW)
		return store_db_error(s, "ledger check", err);
	const unsigned char *who = sqlite3_column_text(q, 0);
	sbx_err(MOD, "ledger check: %s: %s", what, who ? (const char *)who : "?");
	return sbx_error_set(err, SBX_E_INTERNAL, NULL, "ledger invariant violated: %s (%.64s)",
			     what, who ? (const char *)who : "?");
}

/* Per-account sums of each kind, for the account checks. */
#define STORE_ACCOUNT_SUMS                                                                         \
	"SELECT a.id AS id,"                                                                       \
	" COALESCE(SUM(CASE l.kind WHEN 'credit' THEN l.amount_micro END), 0) AS credits,"         \
	" COALESCE(SUM(CASE l.kind WHEN 'hold' THEN l.amount_micro END), 0) AS holds,"             \
	" COALESCE(SUM(CASE l.kind WHEN 'release' THEN l.amount_micro END), 0) AS releases,"       \
	" COALESCE(SUM(CASE l.kind WHEN 'charge' THEN l.amount_micro END), 0) AS charges"          \
	" FROM accounts a LEFT JOIN ledger l ON l.account_id = a.id"                               \
	" WHERE (?1 IS NULL OR a.id = ?1) GROUP BY a.id"

/* Per-sandbox sums of each kind and entry counts. */
#define STORE_SANDBOX_SUMS                                                                         \
	"SELECT s.id AS id, s.status AS status, s.hold_micro AS hold_col,"                         \
	" s.charge_micro AS charge_col,"                                                           \
	" COALESCE(SUM(CASE l.kind WHEN 'hold' THEN l.amount_micro END), 0) AS holds,"             \
	" COALESCE(SUM(CASE l.kind WHEN 'release' THEN l.amount_micro END), 0) AS releases,"       \
	" COALESCE(SUM(CASE l.kind WHEN 'charge' THEN l.amount_micro END), 0) AS charges,"         \
	" COUNT(CASE l.kind WHEN 'release' THEN 1 END) AS n_releases,"                             \
	" COUNT(CASE l.kind WHEN 'charge' THEN 1 END) AS n_charges"                                \
	" FROM sandboxes s LEFT JOIN ledger l ON l.sandbox_id = s.id"                              \
	" WHERE (?1 IS NULL OR s.account_id = ?1) GROUP BY s.id"

/* Per-execution sums, like STORE_SANDBOX_SUMS. */
#define STORE_EXECUTION_SUMS                                                                       \
	"SELECT e.id AS id, e.status AS status, e.hold_micro AS hold_col,"                         \
	" e.charge_micro AS charge_col,"                                                           \
	" COALESCE(SUM(CASE l.kind WHEN 'hold' THEN l.amount_micro END), 0) AS holds,"             \
	" COALESCE(SUM(CASE l.kind WHEN 'release' THEN l.amount_micro END), 0) AS releases,"       \
	" COALESCE(SUM(CASE l.kind WHEN 'charge' THEN l.amount_micro END), 0) AS charges,"         \
	" COUNT(CASE l.kind WHEN 'hold' THEN 1 END) AS n_holds,"                                   \
	" COUNT(CASE l.kind WHEN 'release' THEN 1 END) AS n_releases,"                             \
	" COUNT(CASE l.kind WHEN 'charge' THEN 1 END) AS n_charges"                                \
	" FROM executions e LEFT JOIN ledger l ON l.execution_id = e.id"                           \
	" WHERE (?1 IS NULL OR e.account_id = ?1) GROUP BY e.id"

int store_ledger_check(struct store *s, const char *account_id, struct sbx_error *err)
{
	static const struct {
		const char *what;
		const char *sql;
	} checks[] = {
	    {"account's running totals differ from the sums of its ledger",
	     "SELECT x.id FROM (" STORE_ACCOUNT_SUMS ") x JOIN accounts a ON a.id = x.id"
	     " WHERE a.credits_micro != x.credits OR a.holds_micro != x.holds"
	     " OR a.releases_micro != x.releases OR a.charges_micro != x.charges"},
	    {"usage rollups differ from the sandbox charges of the ledger (account grain size)",
	     "WITH c AS (SELECT l.account_id AS acct, x.size AS size, SUM(l.amount_micro) AS cost"
	     "  FROM ledger l JOIN sandboxes x ON x.id = l.sandbox_id WHERE l.kind = 'charge'"
	     "  AND (?1 IS NULL OR l.account_id = ?1) GROUP BY 1, 2),"
	     " g AS (SELECT account_id AS acct, grain, size, SUM(cost_micro) AS cost"
	     "  FROM usage_rollups WHERE (?1 IS NULL OR account_id = ?1) GROUP BY 1, 2, 3),"
	     " k AS (SELECT c.acct, c.size, gr.grain FROM c, (SELECT 'hour' AS grain"
	     "  UNION ALL SELECT 'day' UNION ALL SELECT 'month') gr"
	     "  UNION SELECT acct, size, grain FROM g)"
	     " SELECT k.acct || ' ' || k.grain || ' ' || k.size FROM k"
	     " LEFT JOIN c ON c.acct = k.acct AND c.size = k.size"
	     " LEFT JOIN g ON g.acct = k.acct AND g.grain = k.grain AND g.size = k.size"
	     " WHERE COALESCE(c.cost, 0) != COALESCE(g.cost, 0)"},
	    {"reserve is negative",
	     "SELECT id FROM (" STORE_ACCOUNT_SUMS ") WHERE holds - releases - charges < 0"},
	    {"available is negative (balance - reserved < 0)",
	     "SELECT id FROM (" STORE_ACCOUNT_SUMS ") WHERE"
	     " (credits - charges) - (holds - releases - charges) < 0"},
	    {"balance is not credits - consumed or is negative",
	     "SELECT id FROM (" STORE_ACCOUNT_SUMS ") WHERE credits - charges < 0"},
	    {"entry kind does not match its sandbox or execution link",
	     "SELECT seq FROM ledger WHERE (?1 IS NULL OR account_id = ?1) AND"
	     " ((kind = 'credit' AND (sandbox_id IS NOT NULL OR execution_id IS NOT NULL)) OR"
	     "  (kind != 'credit' AND (sandbox_id IS NULL) = (execution_id IS NULL)))"},
	    {"entry's account is not its execution's account",
	     "SELECT l.seq FROM ledger l JOIN executions e ON e.id = l.execution_id"
	     " WHERE (?1 IS NULL OR l.account_id = ?1 OR e.account_id = ?1)"
	     " AND l.account_id != e.account_id"},
	    {"execution charged or released more than once, or holds != hold_micro",
	     "SELECT id FROM (" STORE_EXECUTION_SUMS ") WHERE n_charges > 1 OR n_releases > 1"
	     " OR n_holds != 1 OR holds != hold_col OR charges != charge_col"},
	    {"ended execution's hold not settled exactly (charges + releases != holds)",
	     "SELECT id FROM (" STORE_EXECUTION_SUMS ") WHERE status != 'running'"
	     " AND charges + releases != holds"},
	    /* A failed execution may be charged: the time a guest used
	     * before it broke the run (issue 13). */
	    {"running execution already settled",
	     "SELECT id FROM (" STORE_EXECUTION_SUMS ") WHERE status = 'running'"
	     " AND n_charges + n_releases > 0"},
	    {"entry's account is not its sandbox's account",
	     "SELECT l.seq FROM ledger l JOIN sandboxes s ON s.id = l.sandbox_id"
	     " WHERE (?1 IS NULL OR l.account_id = ?1 OR s.account_id = ?1)"
	     " AND l.account_id != s.account_id"},
	    {"sandbox charged more than once",
	     "SELECT id FROM (" STORE_SANDBOX_SUMS ") WHERE n_charges > 1"},
	    {"sandbox released more than once",
	     "SELECT id FROM (" STORE_SANDBOX_SUMS ") WHERE n_releases > 1"},
	    {"sandbox's holds do not match its hold_micro",
	     "SELECT id FROM (" STORE_SANDBOX_SUMS ") WHERE holds != hold_col"},
	    {"sandbox's charges do not match its charge_micro",
	     "SELECT id FROM (" STORE_SANDBOX_SUMS ") WHERE charges != charge_col"},
	    {"ended sandbox's holds not settled exactly (charges + releases != holds)",
	     "SELECT id FROM (" STORE_SANDBOX_SUMS ") WHERE status IN"
	     " ('destroyed', 'expired', 'failed', 'aborted')"
	     " AND charges + releases != holds"},
	    {"aborted sandbox was charged",
	     "SELECT id FROM (" STORE_SANDBOX_SUMS ") WHERE status = 'aborted'"
	     " AND n_charges > 0"},
	    {"live sandbox already settled",
	     "SELECT id FROM (" STORE_SANDBOX_SUMS ") WHERE status IN"
	     " ('creating', 'running') AND n_charges + n_releases > 0"},
	};
	STORE_READ(s);
	/* One read transaction: every check sees the same snapshot. */
	if (store_exec(s, "BEGIN", err) < 0)
		return -1;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(checks); i++) {
		if (store_check_query(s, account_id, checks[i].sql, checks[i].what, err) < 0) {
			store_tx_rollback(s);
			return -1;
		}
	}
	store_tx_rollback(s);
	return 0;
}

/* ---------------------------------------------------- idempotency keys */

void store_idem_release_row(struct store_idem *row)
{
	if (!row)
		return;
	free(row->response_body);
	row->response_body = NULL;
	row->response_len = 0;
}

/* Read the row of (account, key) into out: 1 found, 0 not, -1 error. */
static int store_idem_read(struct store *s, const char *account_id, const char *key,
			   struct store_idem *out, struct sbx_error *err)
{
	_cleanup_stmt_ sqlite3_stmt *q = NULL;
	if (store_prepare(s,
			  "SELECT request_hash, sandbox_id, status, response_status, response_body,"
			  " created_at_ms FROM idempotency_keys WHERE account_id = ?1 AND key = ?2",
			  &q, err) < 0)
		return -1;
	store_bind_text(q, 1, account_id);
	store_bind_text(q, 2, key);
	int rc = sqlite3_step(q);
	if (rc == SQLITE_DONE)
		return 0;
	if (rc != SQLITE_ROW)
		return store_db_error(s, "step", err);
	memset(out, 0, sizeof(*out));
	store_copy_col(out->request_hash, sizeof(out->request_hash), q, 0);
	store_copy_col(out->sandbox_id, sizeof(out->sandbox_id), q, 1);
	const unsigned char *st = sqlite3_column_text(q, 2);
	out->done = st && strcmp((const char *)st, "done") == 0;
	out->response_status = sqlite3_column_int(q, 3);
	int len = sqlite3_column_bytes(q, 4);
	const void *blob = sqlite3_column_blob(q, 4);
	if (len > 0 && blob) {
		out->response_body = malloc((size_t)len + 1);
		if (!out->response_body)
			return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		memcpy(out->response_body, blob, (size_t)len);
		out->response_body[len] = '\0';
		out->response_len = (size_t)len;
	}
	out->created_at_ms = sqlite3_column_int64(q, 5);
	return 1;
}

int store_idem_claim(struct store *s, const char *account_id, const char *key,
		     const char *request_hash, int64_t now_ms, int64_t keep_ms,
		     struct store_idem *out, struct sbx_error *err)
{
	if (!account_id || !key || !request_hash || !*key || strlen(key) > STORE_IDEM_KEY_MAX ||
	    strlen(request_hash) >= sizeof(out->request_hash))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "Idempotency-Key",
				     "the Idempotency-Key must be 1..%d characters",
				     STORE_IDEM_KEY_MAX);
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	{
		/* A row older than the retention is forgotten: the key is new. */
		_cleanup_stmt_ sqlite3_stmt *q = NULL;
		if (store_prepare(s,
				  "DELETE FROM idempotency_keys WHERE account_id = ?1 AND key = ?2"
				  " AND created_at_ms <= ?3",
				  &q, err) < 0)
			goto err_rollback;
		store_bind_text(q, 1, account_id);
		store_bind_text(q, 2, key);
		sqlite3_bind_int64(q, 3, now_ms - keep_ms);
		if (store_step_done(s, q, err) < 0)
			goto err_rollback;
	}
	int found = store_idem_read(s, account_id, key, out, err);
	if (found < 0)
		goto err_rollback;
	if (found) {
		store_tx_rollback(s);
		return 0;
	}
	{
		_cleanup_stmt_ sqlite3_stmt *q = NULL;
		if (store_prepare(
			s,
			"INSERT INTO idempotency_keys (account_id, key, request_hash, status,"
			" created_at_ms) VALUES (?1, ?2, ?3, 'pending', ?4)",
			&q, err) < 0)
			goto err_rollback;
		store_bind_text(q, 1, account_id);
		store_bind_text(q, 2, key);
		store_bind_text(q, 3, request_hash);
		sqlite3_bind_int64(q, 4, now_ms);
		if (store_step_done(s, q, err) < 0)
			goto err_rollback;
	}
	if (store_tx_commit(s, err) < 0)
		goto err_rollback;
	memset(out, 0, sizeof(*out));
	snprintf(out->request_hash, sizeof(out->request_hash), "%s", request_hash);
	out->created_at_ms = now_ms;
	return 1;

err_rollback:
	store_idem_release_row(out);
	store_tx_rollback(s);
	return -1;
}

/* Run one write statement with (account, key, ...) bound by bind(). */
static int store_idem_write(struct store *s, const char *sql, const char *account_id,
			    const char *key, const char *sandbox_id, int status, const void *body,
			    size_t len, int64_t n, struct sbx_error *err)
{
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	{
		_cleanup_stmt_ sqlite3_stmt *q = NULL;
		if (store_prepare(s, sql, &q, err) < 0)
			goto err_rollback;
		int np = sqlite3_bind_parameter_count(q);
		if (np >= 1)
			store_bind_text(q, 1, account_id);
		if (np >= 2)
			store_bind_text(q, 2, key);
		if (np >= 3)
			store_bind_text(q, 3, sandbox_id);
		if (np >= 4)
			sqlite3_bind_int(q, 4, status);
		if (np >= 5)
			sqlite3_bind_blob(q, 5, body, (int)len, SQLITE_TRANSIENT);
		if (np >= 6)
			sqlite3_bind_int64(q, 6, n);
		if (store_step_done(s, q, err) < 0)
			goto err_rollback;
	}
	int changes = sqlite3_changes(s->db);
	if (store_tx_commit(s, err) < 0)
		goto err_rollback;
	return changes;

err_rollback:
	store_tx_rollback(s);
	return -1;
}

int store_idem_complete(struct store *s, const char *account_id, const char *key,
			const char *sandbox_id, int response_status, const void *body, size_t len,
			struct sbx_error *err)
{
	if (len > STORE_IDEM_BODY_MAX)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "response too large to remember");
	int n = store_idem_write(
	    s,
	    "UPDATE idempotency_keys SET sandbox_id = ?3, response_status = ?4,"
	    " response_body = ?5, status = 'done'"
	    " WHERE account_id = ?1 AND key = ?2 AND status = 'pending'",
	    account_id, key, sandbox_id, response_status, body ? body : "", len, 0, err);
	if (n < 0)
		return -1;
	if (n == 0)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no pending idempotency key");
	return 0;
}

int store_idem_bind(struct store *s, const char *account_id, const char *key,
		    const char *sandbox_id, struct sbx_error *err)
{
	return store_idem_write(s,
				"UPDATE idempotency_keys SET sandbox_id = ?3"
				" WHERE account_id = ?1 AND key = ?2 AND status = 'pending'",
				account_id, key, sandbox_id, 0, NULL, 0, 0, err);
}

int store_idem_release(struct store *s, const char *account_id, const char *key,
		       struct sbx_error *err)
{
	return store_idem_write(s,
				"DELETE FROM idempotency_keys WHERE account_id = ?1 AND key = ?2"
				" AND status = 'pending'",
				account_id, key, NULL, 0, NULL, 0, 0, err);
}

int store_idem_prune(struct store *s, int64_t older_than_ms, struct sbx_error *err)
{
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	{
		_cleanup_stmt_ sqlite3_stmt *q = NULL;
		if (store_prepare(s,
				  "DELETE FROM idempotency_keys WHERE created_at_ms <= ?1"
				  " AND status = 'done'",
				  &q, err) < 0)
			goto err_rollback;
		sqlite3_bind_int64(q, 1, older_than_ms);
		if (store_step_done(s, q, err) < 0)
			goto err_rollback;
	}
	int changes = sqlite3_changes(s->db);
	if (store_tx_commit(s, err) < 0)
		goto err_rollback;
	return changes;

err_rollback:
	store_tx_rollback(s);
	return -1;
}

int store_idem_release_pending(struct store *s, struct sbx_error *err)
{
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	/* Keep a pending key whose sandbox was activated: the create finished
	 * but the daemon died before the answer was remembered; a retry then
	 * gets that sandbox, never a second one. */
	if (store_exec(s,
		       "DELETE FROM idempotency_keys WHERE status = 'pending' AND NOT EXISTS"
		       " (SELECT 1 FROM sandboxes WHERE sandboxes.id = idempotency_keys.sandbox_id"
		       "  AND sandboxes.status NOT IN ('creating', 'aborted'))",
		       err) < 0)
		goto err_rollback;
	int changes = sqlite3_changes(s->db);
	if (store_tx_commit(s, err) < 0)
		goto err_rollback;
	return changes;

err_rollback:
	store_tx_rollback(s);
	return -1;
}

int store_ledger_totals_get(struct store *s, struct store_ledger_totals *out, struct sbx_error *err)
{
	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_prepare_cached(
		s,
		"SELECT COALESCE(SUM(credits_micro), 0), COALESCE(SUM(holds_micro), 0),"
		" COALESCE(SUM(releases_micro), 0), COALESCE(SUM(charges_micro), 0),"
		" COUNT(*) FROM accounts",
		&q, err) < 0 ||
	    store_step_row(s, q, err) < 0)
		return -1;
	out->credits = sqlite3_column_int64(q, 0);
	out->holds = sqlite3_column_int64(q, 1);
	out->releases = sqlite3_column_int64(q, 2);
	out->charges = sqlite3_column_int64(q, 3);
	out->accounts = sqlite3_column_int64(q, 4);
	return 0;
}
