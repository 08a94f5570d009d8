/* store/ at scale (issue 14): running totals on the account row, usage
 * rollups that equal the ledger exactly over random histories, the
 * migration that computes both for an existing database, and reads that do
 * not take the writer's mutex. Real SQLite files, no mocks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "billing/billing.h"
#include "store/store-priv.h"
#include "store/store.h"
#include "util/util.h"

#include "store_fx.h"

#define H STORE_HOUR_MS
#define D STORE_DAY_MS

static int fx_setup(void **state)
{
	return fx_open(state, "usage", INT64_C(1000000000000));
}

/* One int64 from a query on a second connection (the test's own view). */
static int64_t q64(const char *path, const char *sql, const char *arg)
{
	sqlite3 *db;
	sqlite3_stmt *q;
	int64_t v;

	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
	if (arg)
		sqlite3_bind_text(q, 1, arg, -1, SQLITE_TRANSIENT);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	v = sqlite3_column_int64(q, 0);
	sqlite3_finalize(q);
	sqlite3_close(db);
	return v;
}

static void exec_sql(const char *path, const char *sql)
{
	sqlite3 *db;
	char *msg = NULL;

	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
		fail_msg("%s: %s", sql, msg);
	sqlite3_close(db);
}

/* Balance from the raw ledger rows, summed in C. */
static void assert_totals_match_ledger(struct fx *f, const char *account_id)
{
	struct sbx_error err = {0};
	struct store_balance b;
	sqlite3 *db;
	sqlite3_stmt *q;
	int64_t credits = 0, holds = 0, releases = 0, charges = 0;

	if (store_ledger_check(f->s, NULL, &err) != 0)
		fail_msg("store_ledger_check: %s", err.message);
	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db,
					    "SELECT kind, amount_micro FROM ledger"
					    " WHERE account_id = ?1",
					    -1, &q, NULL),
			 SQLITE_OK);
	sqlite3_bind_text(q, 1, account_id, -1, SQLITE_TRANSIENT);
	while (sqlite3_step(q) == SQLITE_ROW) {
		const char *k = (const char *)sqlite3_column_text(q, 0);
		int64_t v = sqlite3_column_int64(q, 1);
		if (strcmp(k, "credit") == 0)
			credits += v;
		else if (strcmp(k, "hold") == 0)
			holds += v;
		else if (strcmp(k, "release") == 0)
			releases += v;
		else
			charges += v;
	}
	sqlite3_finalize(q);
	sqlite3_close(db);
	assert_int_equal(store_balance_get(f->s, account_id, &b, &err), 0);
	assert_int_equal(b.credits_micro, credits);
	assert_int_equal(b.consumed_micro, charges);
	assert_int_equal(b.balance_micro, credits - charges);
	assert_int_equal(b.reserved_micro, holds - releases - charges);
	assert_int_equal(b.available_micro, credits - holds + releases);
}

/* ------------------------------------------------- a random history */

#define MAX_SBX 400

struct ended {
	char size[16];
	int64_t start, end; /* billed runtime [created, min(ended, expires)) */
	int64_t seconds, cost;
};

struct history {
	struct ended v[MAX_SBX];
	int n;
	int64_t lo, hi; /* hour-aligned span of every runtime */
};

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint64_t rnd(uint64_t n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return n ? rng_state % n : 0;
}

/* Sandboxes of one account over ~3 months around a month boundary, through
 * the store API: most ended (some after their expiry, some at 0 ms, some
 * over many hours), some aborted, some left running. */
static void make_history(struct fx *f, const char *account_id, struct history *h)
{
	static const struct {
		const char *name;
		int64_t price;
	} sizes[] = {{"small", 90000}, {"medium", 280000}, {"large", 1000003}};
	/* 2026-10-15T07:13:00Z: runs into November and December. */
	int64_t base = INT64_C(1792048380000);
	struct sbx_error err = {0};

	h->n = 0;
	h->lo = INT64_MAX;
	h->hi = 0;
	for (int i = 0; i < MAX_SBX; i++) {
		struct store_sandbox r = {0}, out;
		int si = (int)rnd(3);
		int timeout_min = 1 + (int)rnd(i % 7 == 0 ? 2000 : 120);
		int64_t created = base + (int64_t)rnd(60 * (uint64_t)D);
		int64_t expires = created + (int64_t)timeout_min * 60000;
		int64_t ran = i % 11 == 0 ? 0 : (int64_t)rnd((uint64_t)timeout_min * 60000 * 5 / 4);
		int kind = (int)rnd(20);

		snprintf(r.account_id, sizeof r.account_id, "%s", account_id);
		snprintf(r.size, sizeof r.size, "%s", sizes[si].name);
		r.timeout_minutes = timeout_min;
		r.price_micro_per_hour = sizes[si].price;
		r.requested_at_ms = created - 1000;
		assert_int_equal(
		    store_sandbox_reserve(f->s, &r,
					  billing_hold_for_minutes(timeout_min, sizes[si].price),
					  1000000, &err),
		    0);
		if (kind == 0) { /* never became ready */
			assert_int_equal(store_sandbox_abort(f->s, r.id, &err), 1);
			continue;
		}
		assert_int_equal(store_sandbox_activate(f->s, r.id, r.id, created, expires, &err),
				 0);
		if (kind == 1)
			continue; /* still running: not in the rollups */
		enum store_status st = kind == 2			     ? STORE_FAILED
				       : ran >= (int64_t)timeout_min * 60000 ? STORE_EXPIRED
									     : STORE_DESTROYED;
		assert_int_equal(store_sandbox_end(f->s, r.id, st, created + ran,
						   billing_charge_for_row, &out, &err),
				 1);
		struct ended *e = &h->v[h->n++];
		snprintf(e->size, sizeof e->size, "%s", r.size);
		e->start = created;
		e->end = SBX_MIN(created + ran, expires);
		e->seconds = store_billed_seconds(e->end - e->start);
		e->cost = out.charge_micro;
		assert_int_equal(e->cost, billing_cost(e->end - e->start, r.price_micro_per_hour));
		h->lo = SBX_MIN(h->lo, e->start - e->start % H);
		h->hi = SBX_MAX(h->hi, e->end - e->end % H + H);
	}
}

/* Independent model of the split: the share of total that a runtime
 * [s, e) has up to time t is floor(total * (t - s) / (e - s)), all of it
 * from e on; a 0 ms runtime sits whole in its start's hour. */
static int64_t cum(const struct ended *e, int64_t total, int64_t t)
{
	if (e->end == e->start)
		return t > e->start - e->start % H ? total : 0;
	if (t <= e->start)
		return 0;
	if (t >= e->end)
		return total;
	return (int64_t)((__int128)total * (t - e->start) / (e->end - e->start));
}

/* Expected seconds and cost of one size over the whole hours [from, to). */
static void expect(const struct history *h, const char *size, int64_t from, int64_t to,
		   int64_t *secs, int64_t *cost)
{
	*secs = *cost = 0;
	for (int i = 0; i < h->n; i++) {
		const struct ended *e = &h->v[i];
		if (strcmp(e->size, size) != 0)
			continue;
		*secs += cum(e, e->seconds, to) - cum(e, e->seconds, from);
		*cost += cum(e, e->cost, to) - cum(e, e->cost, from);
	}
}

static void sum_rows(const struct store_usage_row *rows, size_t n, const char *size, int64_t lo,
		     int64_t hi, int64_t *secs, int64_t *cost)
{
	*secs = *cost = 0;
	for (size_t i = 0; i < n; i++)
		if (strcmp(rows[i].size, size) == 0 && rows[i].start_ms >= lo &&
		    rows[i].start_ms < hi) {
			*secs += rows[i].seconds;
			*cost += rows[i].cost_micro;
		}
}

static void check_period(struct fx *f, const char *account_id, const struct history *h,
			 int64_t from, int64_t to, int64_t step)
{
	static const char *const sizes[] = {"small", "medium", "large"};
	struct sbx_error err = {0};
	struct store_usage_row *rows = NULL;
	size_t n = 0;

	assert_int_equal(store_usage_read(f->s, account_id, from, to, step, &rows, &n, &err), 0);
	for (size_t k = 0; k < SBX_ARRAY_SIZE(sizes); k++) {
		int64_t es, ec, gs, gc;
		expect(h, sizes[k], from, to, &es, &ec);
		sum_rows(rows, n, sizes[k], from, to, &gs, &gc);
		if (es != gs || ec != gc)
			fail_msg(
			    "%s [%lld, %lld) step %lld: want %lld s %lld u$, got %lld s %lld u$",
			    sizes[k], (long long)from, (long long)to, (long long)step,
			    (long long)es, (long long)ec, (long long)gs, (long long)gc);
		/* Each bucket too, when there are buckets. */
		for (int64_t b = from; step && b < to; b += step) {
			expect(h, sizes[k], b, b + step, &es, &ec);
			sum_rows(rows, n, sizes[k], b, b + step, &gs, &gc);
			assert_int_equal(es, gs);
			assert_int_equal(ec, gc);
		}
	}
	for (size_t i = 0; i < n; i++) {
		assert_true(rows[i].start_ms >= from);
		assert_true(rows[i].start_ms + rows[i].span_ms <= to);
	}
	free(rows);
}

static void test_usage_equals_ledger(void **state)
{
	struct fx *f = *state;
	static struct history ha, hb;
	struct sbx_error err = {0};

	make_history(f, f->a.id, &ha);
	make_history(f, f->b.id, &hb);
	assert_true(ha.n > MAX_SBX / 2);
	assert_totals_match_ledger(f, f->a.id);
	assert_totals_match_ledger(f, f->b.id);

	/* All of history: the rollups hold every sandbox charge of the ledger. */
	int64_t from = ha.lo - ha.lo % D - 40 * D, to = ha.hi - ha.hi % D + 40 * D;
	int64_t ledger = q64(f->path,
			     "SELECT SUM(amount_micro) FROM ledger WHERE kind = 'charge'"
			     " AND account_id = ?1",
			     f->a.id);
	int64_t total = 0;
	for (int i = 0; i < ha.n; i++)
		total += ha.v[i].cost;
	assert_int_equal(total, ledger);
	for (int64_t step = 0; step <= D; step += step ? D - H : H) {
		struct store_usage_row *rows = NULL;
		size_t n = 0;
		int64_t got = 0;
		assert_int_equal(store_usage_read(f->s, f->a.id, from, to, step, &rows, &n, &err),
				 0);
		for (size_t i = 0; i < n; i++)
			got += rows[i].cost_micro;
		assert_int_equal(got, ledger);
		free(rows);
	}
	/* Random whole-hour periods (month, day and hour pieces), and day and
	 * hour buckets, against the independent model. */
	for (int i = 0; i < 300; i++) {
		int64_t a = ha.lo - 2 * D + (int64_t)rnd((uint64_t)(ha.hi - ha.lo + 4 * D) / H) * H;
		int64_t b = a + H + (int64_t)rnd(i % 3 ? 80 * 24 : 50) * H;
		check_period(f, f->a.id, &ha, a, b, 0);
		check_period(f, f->b.id, &hb, a, b, 0);
		if (i % 10 == 0) {
			check_period(f, f->a.id, &ha, a, a + 48 * H, H);
			check_period(f, f->a.id, &ha, a - a % D, a - a % D + 31 * D, D);
		}
	}
	/* A period that is not whole hours is refused, not guessed. */
	struct store_usage_row *rows = NULL;
	size_t n = 0;
	assert_int_equal(store_usage_read(f->s, f->a.id, from + 1, to, 0, &rows, &n, &err), -1);
	assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
	assert_int_equal(store_usage_read(f->s, f->a.id, from + H, to, D, &rows, &n, &err), -1);
}

/* The split itself on a fixed case: 02:30 -> 04:30, 7200 s, 1000 u$. */
static int collect_piece(void *ctx, int64_t hour_ms, int64_t seconds, int64_t cost)
{
	int64_t(*v)[3] = ctx;
	int i = 0;
	while (v[i][0])
		i++;
	v[i][0] = hour_ms;
	v[i][1] = seconds;
	v[i][2] = cost;
	return 0;
}

static void test_split_by_time_ran(void **state)
{
	int64_t day = INT64_C(1793491200000); /* 2026-11-01T00:00:00Z, a month start */
	int64_t v[8][3] = {{0}};

	assert_int_equal(store_month_start(day + 5 * H), day);
	assert_int_equal(store_month_start(day - 1), day - 31 * D);
	assert_int_equal(store_month_next(day), day + 30 * D);
	/* Across the month boundary: 23:30 -> 01:30. */
	assert_int_equal(
	    store_usage_split(day - H / 2, day + 3 * H / 2, 7200, 1001, collect_piece, v), 0);
	assert_int_equal(v[0][0], day - H);
	assert_int_equal(v[0][1], 1800);
	assert_int_equal(v[0][2], 250);
	assert_int_equal(v[1][0], day);
	assert_int_equal(v[1][1], 3600);
	assert_int_equal(v[1][2], 500);
	assert_int_equal(v[2][0], day + H);
	assert_int_equal(v[2][1], 1800);
	assert_int_equal(v[2][2], 251);
	assert_int_equal(v[3][0], 0);
	/* 0 ms: the whole (1 s) in its hour. */
	memset(v, 0, sizeof v);
	assert_int_equal(store_usage_split(day + 10, day + 10, 1, 25, collect_piece, v), 0);
	assert_int_equal(v[0][0], day);
	assert_int_equal(v[0][2], 25);
	assert_int_equal(v[1][0], 0);
	/* Ending exactly on an hour: no empty piece after it. */
	memset(v, 0, sizeof v);
	assert_int_equal(store_usage_split(day, day + 2 * H, 7200, 50, collect_piece, v), 0);
	assert_int_equal(v[1][0], day + H);
	assert_int_equal(v[1][2], 25);
	assert_int_equal(v[2][0], 0);
	(void)state;
}

/* An existing database (schema 4, no totals, no rollups) is migrated:
 * totals from its ledger, rollups from its ended sandboxes. */
static void test_migration_computes_totals(void **state)
{
	struct fx *f = *state;
	static struct history h;
	struct sbx_error err = {0};

	make_history(f, f->a.id, &h);
	int64_t rollup_cost = q64(f->path,
				  "SELECT SUM(cost_micro) FROM usage_rollups WHERE grain = 'day'"
				  " AND account_id = ?1",
				  f->a.id);
	store_close(f->s);
	/* Back to schema 4 as an older build left it. */
	exec_sql(f->path, STORE_PRIV_BACK_TO_SCHEMA_4);
	/* The old build keeps writing: a credit with no trigger to count it. */
	exec_sql(f->path, "INSERT INTO ledger (account_id, kind, amount_micro, created_at_ms)"
			  " SELECT id, 'credit', 777, 1 FROM accounts WHERE name = 'alice'");
	f->s = store_open(f->path, &err);
	assert_non_null(f->s);
	assert_int_equal(q64(f->path, "PRAGMA user_version", NULL), 15);
	assert_totals_match_ledger(f, f->a.id);
	assert_totals_match_ledger(f, f->b.id);
	assert_int_equal(q64(f->path,
			     "SELECT SUM(cost_micro) FROM usage_rollups WHERE grain = 'day'"
			     " AND account_id = ?1",
			     f->a.id),
			 rollup_cost);
	check_period(f, f->a.id, &h, h.lo, h.hi, H);

	/* store_ledger_check catches totals that drift from the ledger. */
	exec_sql(f->path, "UPDATE accounts SET holds_micro = holds_micro + 1 WHERE name = 'bob'");
	assert_int_equal(store_ledger_check(f->s, NULL, &err), -1);
	assert_non_null(strstr(err.message, "running totals"));
	exec_sql(f->path, "UPDATE accounts SET holds_micro = holds_micro - 1 WHERE name = 'bob'");
	assert_int_equal(store_ledger_check(f->s, NULL, &err), 0);
	/* ... and rollups that drift from the charges. */
	exec_sql(f->path,
		 "UPDATE usage_rollups SET cost_micro = cost_micro + 1 WHERE grain = 'month'"
		 " AND start_ms = (SELECT MIN(start_ms) FROM usage_rollups)");
	assert_int_equal(store_ledger_check(f->s, NULL, &err), -1);
	assert_non_null(strstr(err.message, "rollups"));
	assert_int_equal(store_usage_rebuild(f->s, &err), 0);
	assert_int_equal(store_ledger_check(f->s, NULL, &err), 0);
}

/* ------------------------------------ reads do not take the writer's mutex */

struct blocker {
	pthread_mutex_t m;
	pthread_cond_t c;
	int inside, released, timed_out;
};
static struct blocker blk = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};

/* A pricer that parks inside the ending transaction (writer's mutex held)
 * until the test releases it; a generous deadline turns a deadlock into a
 * failure instead of a hang. */
static int64_t parked_charge(const struct store_sandbox *row, int64_t ended_at_ms)
{
	struct timespec until;

	pthread_mutex_lock(&blk.m);
	blk.inside = 1;
	pthread_cond_broadcast(&blk.c);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 60;
	while (!blk.released && !blk.timed_out)
		if (pthread_cond_timedwait(&blk.c, &blk.m, &until) != 0)
			blk.timed_out = 1;
	pthread_mutex_unlock(&blk.m);
	return billing_charge_for_row(row, ended_at_ms);
}

struct ender {
	struct store *s;
	const char *id;
	int64_t ended_at_ms;
	int rc;
};

static void *end_thread(void *arg)
{
	struct ender *e = arg;
	struct sbx_error err = {0};

	e->rc = store_sandbox_end(e->s, e->id, STORE_DESTROYED, e->ended_at_ms, parked_charge, NULL,
				  &err);
	return NULL;
}

static void test_reads_beside_writer(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	struct store_sandbox r = {0}, got;
	struct store_balance before, during;
	struct store_key k = {0}, kf;
	int64_t now = sbx_wall_ms();
	char digest[65];

	snprintf(k.id, sizeof k.id, "key_test");
	snprintf(k.account_id, sizeof k.account_id, "%s", f->a.id);
	snprintf(k.prefix, sizeof k.prefix, "aas_sk_test");
	sbx_sha256_hex("aas_sk_test", 11, digest);
	assert_int_equal(store_key_insert(f->s, &k, digest, &err), 0);
	snprintf(r.account_id, sizeof r.account_id, "%s", f->a.id);
	snprintf(r.size, sizeof r.size, "small");
	r.timeout_minutes = 15;
	r.price_micro_per_hour = 90000;
	assert_int_equal(store_sandbox_reserve(f->s, &r, 22500, 20, &err), 0);
	assert_int_equal(store_sandbox_activate(f->s, r.id, r.id, now - 5000, now + 900000, &err),
			 0);
	assert_int_equal(store_balance_get(f->s, f->a.id, &before, &err), 0);

	struct ender e = {f->s, r.id, now + 1000, -2};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, end_thread, &e), 0);
	pthread_mutex_lock(&blk.m);
	while (!blk.inside)
		pthread_cond_wait(&blk.c, &blk.m);
	pthread_mutex_unlock(&blk.m);

	/* The writer is parked mid-transaction holding its mutex: auth, GET,
	 * list, balance and usage still answer, from the last commit. */
	assert_int_equal(store_key_find(f->s, digest, &kf, &err), 0);
	assert_string_equal(kf.account_id, f->a.id);
	assert_int_equal(store_sandbox_get(f->s, f->a.id, r.id, &got, &err), 0);
	assert_int_equal(got.status, STORE_RUNNING);
	struct store_sandbox *rows = NULL;
	size_t n = 0;
	bool more;
	assert_int_equal(store_sandbox_list(f->s, f->a.id, NULL, 10, NULL, &rows, &n, &more, &err),
			 0);
	assert_int_equal(n, 1);
	free(rows);
	assert_int_equal(store_balance_get(f->s, f->a.id, &during, &err), 0);
	assert_memory_equal(&before, &during, sizeof before);
	struct store_usage_row *u = NULL;
	assert_int_equal(store_usage_read(f->s, f->a.id, now - now % H - H, now - now % H + 2 * H,
					  0, &u, &n, &err),
			 0);
	assert_int_equal(n, 0);
	free(u);

	pthread_mutex_lock(&blk.m);
	int timed_out = blk.timed_out;
	blk.released = 1;
	pthread_cond_broadcast(&blk.c);
	pthread_mutex_unlock(&blk.m);
	pthread_join(t, NULL);
	assert_false(timed_out);
	assert_int_equal(e.rc, 1);
	assert_int_equal(store_balance_get(f->s, f->a.id, &during, &err), 0);
	assert_int_equal(during.consumed_micro, 150); /* 6 s of small */
	assert_int_equal(store_usage_read(f->s, f->a.id, now - now % H - H, now - now % H + 2 * H,
					  0, &u, &n, &err),
			 0);
	assert_true(n >= 1);
	free(u);
	assert_totals_match_ledger(f, f->a.id);
}

/* Migration 8: the rows of a database from before several hosts ran on
 * the one host, "local"; a new activation records its host; drained
 * hosts are kept by name, idempotently. */
static void test_migration_hosts(void **state)
{
	struct fx *f = *state;
	struct store_sandbox r = {0}, r2 = {0}, got;
	struct sbx_error err = {0};
	char drained[4][STORE_HOST_MAX];
	size_t n = 9;
	int64_t now = sbx_wall_ms();

	snprintf(r.account_id, sizeof r.account_id, "%s", f->a.id);
	snprintf(r.size, sizeof r.size, "small");
	r.timeout_minutes = 15;
	r.price_micro_per_hour = 90000;
	r2 = r;
	assert_int_equal(store_sandbox_reserve(f->s, &r, 22500, 20, &err), 0);
	assert_int_equal(store_sandbox_activate(f->s, r.id, "d1", now - 5000, now + 900000, &err),
			 0);
	store_close(f->s);
	exec_sql(f->path,
		 STORE_PRIV_BACK_TO_SCHEMA_14_TIMEOUT_ACTION STORE_PRIV_BACK_TO_SCHEMA_13_SNAPSHOTS
		     STORE_PRIV_BACK_TO_SCHEMA_12_PREVIEWS STORE_PRIV_BACK_TO_SCHEMA_11_NETWORK
			 STORE_PRIV_BACK_TO_SCHEMA_10_PAUSE STORE_PRIV_BACK_TO_SCHEMA_9_LABELS
			     STORE_PRIV_BACK_TO_SCHEMA_8_RECEIPTS STORE_PRIV_BACK_TO_SCHEMA_7_HOSTS
		 "PRAGMA user_version = 7;");
	f->s = store_open(f->path, &err);
	assert_non_null(f->s);
	assert_int_equal(q64(f->path, "PRAGMA user_version", NULL), 15);
	assert_int_equal(store_sandbox_get(f->s, f->a.id, r.id, &got, &err), 0);
	assert_string_equal(got.host, "local");
	assert_string_equal(got.domain, "d1");

	assert_int_equal(store_sandbox_reserve(f->s, &r2, 22500, 20, &err), 0);
	assert_int_equal(store_sandbox_activate_startup(f->s, r2.id, "d2", now, now + 900000,
							"cold", 10, "", &err),
			 -1);
	assert_int_equal(store_sandbox_activate_startup(f->s, r2.id, "d2", now, now + 900000,
							"cold", 10, "h2", &err),
			 0);
	assert_int_equal(store_sandbox_get(f->s, f->a.id, r2.id, &got, &err), 0);
	assert_string_equal(got.host, "h2");
	assert_int_equal(got.status, STORE_RUNNING);

	assert_int_equal(store_host_drains_list(f->s, drained, 4, &n, &err), 0);
	assert_int_equal(n, 0);
	assert_int_equal(store_host_drain_set(f->s, "h2", true, now, &err), 0);
	assert_int_equal(store_host_drain_set(f->s, "h2", true, now + 1, &err), 0);
	assert_int_equal(store_host_drain_set(f->s, "alpha", true, now, &err), 0);
	assert_int_equal(store_host_drain_set(f->s, "", true, now, &err), -1);
	assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
	assert_int_equal(store_host_drains_list(f->s, drained, 4, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_string_equal(drained[0], "alpha");
	assert_string_equal(drained[1], "h2");
	assert_int_equal(store_host_drain_set(f->s, "h2", false, now, &err), 0);
	assert_int_equal(store_host_drain_set(f->s, "h2", false, now, &err), 0);
	assert_int_equal(store_host_drains_list(f->s, drained, 4, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_string_equal(drained[0], "alpha");
	assert_int_equal(store_ledger_check(f->s, NULL, &err), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_split_by_time_ran),
	    cmocka_unit_test_setup_teardown(test_usage_equals_ledger, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_migration_computes_totals, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_migration_hosts, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_reads_beside_writer, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
