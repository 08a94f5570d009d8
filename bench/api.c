/* bench/api: the read API at scale, against the no-database ceiling.
 *
 * Fills a database first (one big account with SBX_BENCH_LEDGER_ROWS
 * ledger rows, default 1000000, of which 3 per ended sandbox:
 * SBX_BENCH_SANDBOXES, default 100000, spread over the last 90 days; the
 * rest small credits; plus SBX_BENCH_ACCOUNTS quiet accounts, default 1000,
 * each with a credit and a key; plus one fresh account), rebuilds the usage
 * rollups, then starts a real daemon on it (harness.h: own state dir and
 * prefix, tiny image, no pool, default http_threads) and drives, with wrk
 * over loopback (SBX_BENCH_SECONDS per route, default 10;
 * SBX_BENCH_CONNECTIONS, default 32; 2 wrk threads):
 *   GET /v1/limits (no database: the ceiling), GET /v1/usage,
 *   GET /v1/usage?granularity=day, GET /v1/sandboxes on the big and on the
 *   fresh account, GET /v1/sandbox/executions/{id} of an unknown id (auth,
 *   the key's scope, 404), and GET /v1/usage with an unknown key (401);
 * printing req/s, p50 and p99 of each, and each as a share of /v1/limits.
 * Then the time of a create's admission (store_sandbox_reserve: live count,
 * available credit, row and hold in one BEGIN IMMEDIATE transaction) on the
 * big account and on the fresh one (SBX_BENCH_RESERVES each, default 200,
 * alternating; each aborted again), median and p99 and their ratio, through
 * a second store on the daemon's file. And, for the record, the old
 * balance query (SUM over the account's ledger) on the big account.
 *
 * SBX_BENCH_CONFIG: extra members of the daemon's JSON config (e.g.
 * '"http_threads": 2'); SBX_BENCH_ONLY: run only the routes whose name
 * contains it (the /v1/limits ceiling always runs); SBX_BENCH_FILL_CACHE:
 * a file that keeps the filled database between runs (copied in instead of
 * filling when it exists, written after a fill otherwise; delete it when
 * the fill knobs change or it grows old: its sandboxes end relative to the
 * day it was filled).
 *
 * Environment: SBX_BIN, SBX_TEST_IMAGE_DIR, the knobs above. Needs wrk
 * (scripts/deps.sh bench). Prints figures; never fails on timing. */
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "../tests/integration/harness.h"
#include "store/store.h"

#define PRICE 90000 /* small, µ$/h */

static struct daemon d;

struct fill {
	int ledger_rows, sandboxes, accounts;
};

static void must(int ok, const char *what, sqlite3 *db)
{
	if (!ok) {
		fprintf(stderr, "bench/api: %s: %s\n", what, db ? sqlite3_errmsg(db) : "failed");
		exit(1);
	}
}

static void bind_step(sqlite3 *db, sqlite3_stmt *q)
{
	must(sqlite3_step(q) == SQLITE_DONE, "insert", db);
	sqlite3_reset(q);
}

/* An account with an opening credit and one key whose secret is
 * "aas_sk_" + tag (the digest is what the store keeps). */
static void fill_account(sqlite3 *db, sqlite3_stmt *acct, sqlite3_stmt *credit, sqlite3_stmt *key,
			 const char *id, const char *tag, int64_t credit_micro, int64_t now)
{
	char secret[96], digest[65], key_id[64];

	sqlite3_bind_text(acct, 1, id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(acct, 2, now);
	bind_step(db, acct);
	sqlite3_bind_text(credit, 1, id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(credit, 2, credit_micro);
	sqlite3_bind_int64(credit, 3, now);
	bind_step(db, credit);
	snprintf(secret, sizeof(secret), "aas_sk_%s", tag);
	snprintf(key_id, sizeof(key_id), "key_%s", tag);
	sbx_sha256_hex(secret, strlen(secret), digest);
	sqlite3_bind_text(key, 1, key_id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(key, 2, id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(key, 3, digest, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(key, 4, now);
	bind_step(db, key);
}

/* Rows straight into the schema store_open made, in one transaction (the
 * ledger trigger keeps the account totals), then the rollups rebuilt. */
static void fill_db(const struct fill *fl, int64_t now)
{
	struct sbx_error err = {0};
	struct store *s = store_open(d.db, &err);
	sqlite3 *db;
	sqlite3_stmt *acct, *credit, *key, *sbx, *led;
	int64_t rows = 0;

	must(s != NULL, err.message, NULL);
	store_close(s);
	must(sqlite3_open(d.db, &db) == SQLITE_OK, "open", db);
	must(sqlite3_exec(db, "PRAGMA synchronous = OFF; PRAGMA foreign_keys = ON; BEGIN", NULL,
			  NULL, NULL) == SQLITE_OK,
	     "begin", db);
	must(
	    sqlite3_prepare_v2(
		db, "INSERT INTO accounts (id, name, created_at_ms) VALUES (?1, 'bench', ?2)", -1,
		&acct, NULL) == SQLITE_OK &&
		sqlite3_prepare_v2(
		    db,
		    "INSERT INTO ledger (account_id, kind, amount_micro, created_at_ms)"
		    " VALUES (?1, 'credit', ?2, ?3)",
		    -1, &credit, NULL) == SQLITE_OK &&
		sqlite3_prepare_v2(
		    db,
		    "INSERT INTO api_keys (id, account_id, digest, prefix, created_at_ms)"
		    " VALUES (?1, ?2, ?3, 'aas_sk_bench', ?4)",
		    -1, &key, NULL) == SQLITE_OK &&
		sqlite3_prepare_v2(
		    db,
		    "INSERT INTO sandboxes (id, account_id, size, domain, status, timeout_minutes,"
		    " price_micro_per_hour, requested_at_ms, created_at_ms, expires_at_ms,"
		    " ended_at_ms, last_seen_at_ms, hold_micro, charge_micro)"
		    " VALUES (?1, 'acct_big', 'small', ?1, 'destroyed', 60, ?2, ?3, ?3, ?4, ?5, ?5,"
		    " ?6, ?7)",
		    -1, &sbx, NULL) == SQLITE_OK &&
		sqlite3_prepare_v2(db,
				   "INSERT INTO ledger (account_id, sandbox_id, kind, amount_micro,"
				   " created_at_ms) VALUES ('acct_big', ?1, ?2, ?3, ?4)",
				   -1, &led, NULL) == SQLITE_OK,
	    "prepare", db);
	for (int i = 0; i < fl->accounts; i++) {
		char id[40], tag[40];
		snprintf(id, sizeof(id), "acct_quiet%06d", i);
		snprintf(tag, sizeof(tag), "quiet%06d", i);
		fill_account(db, acct, credit, key, id, tag, 10000000, now);
	}
	fill_account(db, acct, credit, key, "acct_fresh", "fresh", INT64_C(100000000000), now);
	fill_account(db, acct, credit, key, "acct_big", "big", INT64_C(100000000000000), now);
	rows = 1;
	/* Sandboxes: 1 s to ~1 h each, spread over 90 days. */
	for (int i = 0; i < fl->sandboxes; i++) {
		char id[40];
		int64_t created = now - 90 * STORE_DAY_MS +
				  (int64_t)i * (90 * STORE_DAY_MS / (fl->sandboxes + 1));
		int64_t ran = 1000 + (int64_t)(i * 7919 % 3599) * 1000;
		int64_t hold = 90000, charge = (ran / 1000 * PRICE + 3599) / 3600;
		static const char *const kinds[] = {"hold", "charge", "release"};
		int64_t amounts[] = {hold, charge, hold - charge};

		snprintf(id, sizeof(id), "sbx_bench%015d", i);
		sqlite3_bind_text(sbx, 1, id, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(sbx, 2, PRICE);
		sqlite3_bind_int64(sbx, 3, created);
		sqlite3_bind_int64(sbx, 4, created + 3600000);
		sqlite3_bind_int64(sbx, 5, created + ran);
		sqlite3_bind_int64(sbx, 6, hold);
		sqlite3_bind_int64(sbx, 7, charge);
		bind_step(db, sbx);
		for (int k = 0; k < 3; k++) {
			sqlite3_bind_text(led, 1, id, -1, SQLITE_TRANSIENT);
			sqlite3_bind_text(led, 2, kinds[k], -1, SQLITE_STATIC);
			sqlite3_bind_int64(led, 3, amounts[k]);
			sqlite3_bind_int64(led, 4, created + ran);
			bind_step(db, led);
		}
		rows += 3;
	}
	for (; rows < fl->ledger_rows; rows++) {
		sqlite3_bind_text(credit, 1, "acct_big", -1, SQLITE_STATIC);
		sqlite3_bind_int64(credit, 2, 1);
		sqlite3_bind_int64(credit, 3, now - 90 * STORE_DAY_MS + rows);
		bind_step(db, credit);
	}
	sqlite3_finalize(acct);
	sqlite3_finalize(credit);
	sqlite3_finalize(key);
	sqlite3_finalize(sbx);
	sqlite3_finalize(led);
	must(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK, "commit", db);
	sqlite3_close(db);
	s = store_open(d.db, &err);
	must(s && store_usage_rebuild(s, &err) == 0 && store_ledger_check(s, "acct_big", &err) == 0,
	     err.message, NULL);
	store_close(s);
}

/* ------------------------------------------------------------------ wrk */

struct wrk_result {
	double rps, p50_ms, p99_ms;
	long non2xx;
};

static double wrk_ms(const char *v)
{
	char unit[8] = "";
	double x = 0;

	if (sscanf(v, "%lf%7s", &x, unit) < 1)
		return -1;
	if (strcmp(unit, "us") == 0)
		return x / 1000;
	if (strcmp(unit, "s") == 0)
		return x * 1000;
	if (strcmp(unit, "m") == 0)
		return x * 60000;
	return x;
}

static int wrk_run(const char *path, const char *key, int seconds, int conns, struct wrk_result *r)
{
	char cmd[1024], line[512], auth[160] = "";
	FILE *p;

	memset(r, 0, sizeof(*r));
	if (key)
		snprintf(auth, sizeof(auth), "-H 'Authorization: Bearer %s'", key);
	snprintf(cmd, sizeof(cmd), "wrk -t2 -c%d -d%ds --latency %s 'http://127.0.0.1:%d%s' 2>&1",
		 conns, seconds, auth, d.port, path);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	while (fgets(line, sizeof(line), p)) {
		char v[64];
		if (sscanf(line, " 50%% %63s", v) == 1)
			r->p50_ms = wrk_ms(v);
		else if (sscanf(line, " 99%% %63s", v) == 1)
			r->p99_ms = wrk_ms(v);
		else if (sscanf(line, "Requests/sec: %lf", &r->rps) == 1)
			;
		else
			sscanf(line, " Non-2xx or 3xx responses: %ld", &r->non2xx);
	}
	return pclose(p) == 0 && r->rps > 0 ? 0 : -1;
}

/* ------------------------------------------------------- admission time */

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t reserve_once(struct store *s, const char *account_id)
{
	struct store_sandbox row = {0};
	struct sbx_error err = {0};
	int64_t t0, t1;

	snprintf(row.account_id, sizeof(row.account_id), "%s", account_id);
	snprintf(row.size, sizeof(row.size), "small");
	row.timeout_minutes = 15;
	row.price_micro_per_hour = PRICE;
	t0 = now_us();
	must(store_sandbox_reserve(s, &row, 22500, 1000, &err) == 0, err.message, NULL);
	t1 = now_us();
	must(store_sandbox_abort(s, row.id, &err) == 1, "abort", NULL);
	return t1 - t0;
}

/* The balance query before issue 14, once, in ms. */
static double old_balance_ms(void)
{
	sqlite3 *db;
	sqlite3_stmt *q;
	int64_t t0, t1;

	must(sqlite3_open(d.db, &db) == SQLITE_OK, "open", db);
	must(sqlite3_prepare_v2(db,
				"SELECT COALESCE(SUM(CASE kind WHEN 'credit' THEN amount_micro"
				" WHEN 'release' THEN amount_micro WHEN 'hold' THEN -amount_micro"
				" ELSE 0 END), 0) FROM ledger WHERE account_id = 'acct_big'",
				-1, &q, NULL) == SQLITE_OK,
	     "prepare", db);
	t0 = now_us();
	must(sqlite3_step(q) == SQLITE_ROW, "step", db);
	t1 = now_us();
	sqlite3_finalize(q);
	sqlite3_close(db);
	return (double)(t1 - t0) / 1000;
}

int main(void)
{
	struct fill fl = {
	    .ledger_rows = env_int_max("SBX_BENCH_LEDGER_ROWS", 1000000, 100000000),
	    .sandboxes = env_int_range("SBX_BENCH_SANDBOXES", 100000, 0, 30000000),
	    .accounts = env_int_range("SBX_BENCH_ACCOUNTS", 1000, 0, 1000000),
	};
	int seconds = env_int_max("SBX_BENCH_SECONDS", 10, 3600);
	int conns = env_int_max("SBX_BENCH_CONNECTIONS", 32, 10000);
	int reserves = env_int_max("SBX_BENCH_RESERVES", 200, 100000);
	static const struct {
		const char *name, *path, *key;
	} routes[] = {
	    {"GET /v1/limits (no database)", "/v1/limits", NULL},
	    {"GET /v1/usage, big account", "/v1/usage", "aas_sk_big"},
	    {"GET /v1/usage, fresh account", "/v1/usage", "aas_sk_fresh"},
	    {"GET /v1/usage?granularity=day, big", "/v1/usage?granularity=day", "aas_sk_big"},
	    {"GET /v1/usage?granularity=day, fresh", "/v1/usage?granularity=day", "aas_sk_fresh"},
	    {"GET /v1/sandboxes, big account", "/v1/sandboxes", "aas_sk_big"},
	    {"GET /v1/sandboxes, fresh account", "/v1/sandboxes", "aas_sk_fresh"},
	    {"GET /v1/sandbox/executions/{unknown} (404)", "/v1/sandbox/executions/exe_nosuch",
	     "aas_sk_big"},
	    {"GET /v1/usage, unknown key (401)", "/v1/usage", "aas_sk_nosuchkey"},
	};
	struct wrk_result res[SBX_ARRAY_SIZE(routes)];
	int64_t t0, *big, *fresh;
	struct sbx_error err = {0};
	char cmd[400];

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (run_cmd("command -v wrk >/dev/null") != 0) {
		fprintf(stderr, "bench/api: needs wrk (scripts/deps.sh bench)\n");
		return 1;
	}
	if (fl.sandboxes * 3 + 1 > fl.ledger_rows)
		fl.sandboxes = (fl.ledger_rows - 1) / 3;
	const char *extra = getenv("SBX_BENCH_CONFIG"), *only = getenv("SBX_BENCH_ONLY");
	daemon_config(&d, extra ? extra : "");
	unlink(d.db);
	const char *cache = getenv("SBX_BENCH_FILL_CACHE");
	t0 = now_us();
	if (cache && *cache && access(cache, R_OK) == 0) {
		snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", cache, d.db);
		must(run_cmd(cmd) == 0, "copying SBX_BENCH_FILL_CACHE", NULL);
		printf("filled: copied from %s (filled earlier)\n", cache);
	} else {
		fill_db(&fl, sbx_wall_ms());
		printf("filled: big account %d ledger rows, %d ended sandboxes over 90 days; %d "
		       "quiet accounts; %.1f s (rollups rebuilt)\n",
		       fl.ledger_rows, fl.sandboxes, fl.accounts, (double)(now_us() - t0) / 1e6);
		if (cache && *cache) {
			snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", d.db, cache);
			must(run_cmd(cmd) == 0, "writing SBX_BENCH_FILL_CACHE", NULL);
		}
	}
	printf("old balance query (SUM over the ledger), big account: %.1f ms\n", old_balance_ms());
	if (daemon_start(&d) < 0) {
		fprintf(stderr, "bench/api: the daemon did not start\n");
		daemon_kill9(&d);
		return 1;
	}
	printf("daemon pid %d\n", (int)d.pid);
	printf("\nwrk -t2 -c%d -d%ds --latency, loopback, one route at a time\n", conns, seconds);
	printf("%-40s %10s %9s %9s %9s\n", "route", "req/s", "p50 ms", "p99 ms", "% limits");
	if (extra && *extra)
		printf("daemon config: %s\n", extra);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(routes); i++) {
		if (i > 0 && only && *only && !strstr(routes[i].name, only))
			continue;
		if (wrk_run(routes[i].path, routes[i].key, seconds, conns, &res[i]) < 0) {
			printf("%-40s wrk failed\n", routes[i].name);
			continue;
		}
		printf("%-40s %10.0f %9.2f %9.2f %8.0f%%%s\n", routes[i].name, res[i].rps,
		       res[i].p50_ms, res[i].p99_ms, 100 * res[i].rps / res[0].rps,
		       res[i].non2xx && !strstr(routes[i].name, "(4") ? "  (non-2xx!)" : "");
	}

	/* Admission on the daemon's own file, through a second store. */
	struct store *s = store_open(d.db, &err);
	must(s != NULL, err.message, NULL);
	big = calloc((size_t)reserves, sizeof(*big));
	fresh = calloc((size_t)reserves, sizeof(*fresh));
	must(big && fresh, "out of memory", NULL);
	for (int i = 0; i < reserves; i++) {
		big[i] = reserve_once(s, "acct_big");
		fresh[i] = reserve_once(s, "acct_fresh");
	}
	struct stats sb = stats_of(big, reserves), sf = stats_of(fresh, reserves);
	int64_t p99b = big[(reserves * 99 + 99) / 100 - 1],
		p99f = fresh[(reserves * 99 + 99) / 100 - 1];
	printf("\ncreate admission (store_sandbox_reserve, BEGIN IMMEDIATE + fsync), n=%d each\n",
	       reserves);
	printf("  big account:   median %.3f ms, p99 %.3f ms\n", sb.median / 1000.0, p99b / 1000.0);
	printf("  fresh account: median %.3f ms, p99 %.3f ms\n", sf.median / 1000.0, p99f / 1000.0);
	printf("  ratio big/fresh (median): %.2f\n", (double)sb.median / (double)sf.median);
	must(store_ledger_check(s, NULL, &err) == 0, err.message, NULL);
	store_close(s);
	free(big);
	free(fresh);
	daemon_stop(&d);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d.state_dir);
	run_cmd(cmd);
	return 0;
}
