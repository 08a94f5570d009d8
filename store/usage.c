/* store: usage rollups per account x grain x bucket x size (store.h,
 * "usage rollups"). Written inside the transaction that settles a sandbox;
 * read through a read connection. */
#include <string.h>
#include <time.h>

#include "store-priv.h"
#include "store.h"

#define MOD "store"

static int64_t floor_to(int64_t t, int64_t step)
{
	int64_t r = t % step;
	return r < 0 ? t - r - step : t - r;
}

static int64_t ceil_to(int64_t t, int64_t step)
{
	int64_t f = floor_to(t, step);
	return f == t ? t : f + step;
}

int64_t store_billed_seconds(int64_t runtime_ms)
{
	if (runtime_ms < 0)
		runtime_ms = 0;
	int64_t secs = runtime_ms / 1000 + (runtime_ms % 1000 != 0);
	return secs < 1 ? 1 : secs;
}

/* Start of the UTC month `add` months after the one holding t_ms. */
static int64_t month_from(int64_t t_ms, int add)
{
	time_t t = (time_t)(floor_to(t_ms, 1000) / 1000);
	struct tm tm;

	gmtime_r(&t, &tm);
	tm.tm_mday = 1;
	tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
	tm.tm_mon += add;
	return (int64_t)timegm(&tm) * 1000;
}

int64_t store_month_start(int64_t t_ms)
{
	return month_from(t_ms, 0);
}

int64_t store_month_next(int64_t month_ms)
{
	return month_from(month_ms, 1);
}

int store_usage_split(int64_t start_ms, int64_t end_ms, int64_t seconds, int64_t cost_micro,
		      store_usage_piece_fn fn, void *ctx)
{
	if (end_ms < start_ms)
		end_ms = start_ms;
	int64_t len = end_ms - start_ms, prev_s = 0, prev_c = 0;
	int64_t h = floor_to(start_ms, STORE_HOUR_MS);

	do {
		int64_t pe = SBX_MIN(end_ms, h + STORE_HOUR_MS), cum_s = seconds,
			cum_c = cost_micro;

		if (pe < end_ms) { /* not the last hour, so len > 0 */
			cum_s = (int64_t)((__int128)seconds * (pe - start_ms) / len);
			cum_c = (int64_t)((__int128)cost_micro * (pe - start_ms) / len);
		}
		if (fn(ctx, h, cum_s - prev_s, cum_c - prev_c) < 0)
			return -1;
		prev_s = cum_s;
		prev_c = cum_c;
		h += STORE_HOUR_MS;
	} while (h < end_ms);
	return 0;
}

/* -------------------------------------------------------------- writing */

struct rollup_ctx {
	struct store *s;
	const char *account_id, *size;
	struct sbx_error *err;
};

/* Add one hour's share to its hour, day and month buckets. */
static int rollup_add(void *arg, int64_t hour_ms, int64_t seconds, int64_t cost_micro)
{
	static const char *const grains[] = {"hour", "day", "month"};
	struct rollup_ctx *c = arg;
	int64_t starts[] = {hour_ms, floor_to(hour_ms, STORE_DAY_MS), store_month_start(hour_ms)};

	if (seconds == 0 && cost_micro == 0)
		return 0;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(grains); i++) {
		_cleanup_reset_ sqlite3_stmt *up = NULL;
		if (store_run(
			c->s, &up,
			"INSERT INTO usage_rollups (account_id, grain, start_ms, size, seconds,"
			" cost_micro) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
			" ON CONFLICT (account_id, grain, start_ms, size) DO UPDATE SET"
			" seconds = seconds + excluded.seconds,"
			" cost_micro = cost_micro + excluded.cost_micro",
			c->err, STORE_T(c->account_id), STORE_T(grains[i]), STORE_I(starts[i]),
			STORE_T(c->size), STORE_I(seconds), STORE_I(cost_micro)) < 0)
			return -1;
	}
	return 0;
}

/* The runtime API.md bills: [created_at, min(ended_at, expires_at)). */
static int rollup_sandbox(struct rollup_ctx *c, int64_t created_ms, int64_t expires_ms,
			  int64_t ended_ms, int64_t charge_micro)
{
	int64_t end = ended_ms;

	if (expires_ms > 0 && end > expires_ms)
		end = expires_ms;
	if (end < created_ms)
		end = created_ms;
	return store_usage_split(created_ms, end, store_billed_seconds(end - created_ms),
				 charge_micro, rollup_add, c);
}

int store_usage_split_sandbox(const struct store_usage_labeled *u, store_usage_piece_fn fn,
			      void *ctx)
{
	int64_t end = u->ended_at_ms;

	if (u->expires_at_ms > 0 && end > u->expires_at_ms)
		end = u->expires_at_ms;
	if (end < u->created_at_ms)
		end = u->created_at_ms;
	return store_usage_split(u->created_at_ms, end,
				 store_billed_seconds(end - u->created_at_ms), u->charge_micro, fn,
				 ctx);
}

int store_usage_settle(struct store *s, const struct store_sandbox *row, int64_t ended_at_ms,
		       int64_t charge_micro, struct sbx_error *err)
{
	if (row->created_at_ms <= 0)
		return 0; /* never ready: no runtime */
	struct rollup_ctx c = {s, row->account_id, row->size, err};
	return rollup_sandbox(&c, row->created_at_ms, row->expires_at_ms, ended_at_ms,
			      charge_micro);
}

int store_usage_rebuild_tx(struct store *s, struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	int rc;

	if (store_exec(s, "DELETE FROM usage_rollups", err) < 0)
		return -1;
	for (rc = store_run_args(
		 s, &q,
		 "SELECT account_id, size, created_at_ms, expires_at_ms, ended_at_ms,"
		 " charge_micro FROM sandboxes WHERE created_at_ms > 0"
		 " AND status IN ('destroyed', 'expired', 'failed')",
		 NULL, 0, err);
	     rc == SQLITE_ROW; rc = sqlite3_step(q)) {
		char account[STORE_ID_MAX], size[16];

		store_copy_col(account, sizeof account, q, 0);
		store_copy_col(size, sizeof size, q, 1);
		struct rollup_ctx c = {s, account, size, err};
		if (rollup_sandbox(&c, sqlite3_column_int64(q, 2), sqlite3_column_int64(q, 3),
				   sqlite3_column_int64(q, 4), sqlite3_column_int64(q, 5)) < 0)
			return -1;
	}
	if (rc < 0)
		return -1;
	if (rc != SQLITE_DONE)
		return store_db_error(s, "usage rebuild", err);
	return 0;
}

int store_usage_rebuild(struct store *s, struct sbx_error *err)
{
	STORE_LOCK(s);
	if (store_tx_begin(s, err) < 0)
		return -1;
	if (store_usage_rebuild_tx(s, err) < 0 || store_tx_commit(s, err) < 0) {
		store_tx_rollback(s);
		return -1;
	}
	return 0;
}

/* -------------------------------------------------------------- reading */

struct usage_rows {
	struct store_usage_row *v;
	size_t n, cap;
};

/* Append the rows of one grain whose start is in [lo, hi). */
static int usage_range(struct store *s, const char *account_id, const char *grain, int64_t lo,
		       int64_t hi, struct usage_rows *rows, struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	int rc;

	if (lo >= hi)
		return 0;
	for (rc = store_run(s, &q,
			    "SELECT start_ms, size, seconds, cost_micro FROM usage_rollups"
			    " WHERE account_id = ?1 AND grain = ?2 AND start_ms >= ?3"
			    " AND start_ms < ?4 ORDER BY start_ms, size",
			    err, STORE_T(account_id), STORE_T(grain), STORE_I(lo), STORE_I(hi));
	     rc == SQLITE_ROW; rc = sqlite3_step(q)) {
		if (rows->n == rows->cap) {
			size_t ncap = rows->cap ? rows->cap * 2 : 16;
			struct store_usage_row *p = realloc(rows->v, ncap * sizeof(*p));
			if (!p)
				return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
			rows->v = p;
			rows->cap = ncap;
		}
		struct store_usage_row *r = &rows->v[rows->n++];
		memset(r, 0, sizeof(*r));
		r->start_ms = sqlite3_column_int64(q, 0);
		store_copy_col(r->size, sizeof r->size, q, 1);
		r->seconds = sqlite3_column_int64(q, 2);
		r->cost_micro = sqlite3_column_int64(q, 3);
		r->span_ms = grain[0] == 'h'   ? STORE_HOUR_MS
			     : grain[0] == 'd' ? STORE_DAY_MS
					       : store_month_next(r->start_ms) - r->start_ms;
	}
	if (rc < 0)
		return -1;
	if (rc != SQLITE_DONE)
		return store_db_error(s, "usage read", err);
	return 0;
}

/* Every range query of one read, in one snapshot. */
static int usage_ranges(struct store *s, const char *account_id, int64_t from, int64_t to,
			int64_t step, struct usage_rows *rows, struct sbx_error *err)
{
	if (step == STORE_HOUR_MS)
		return usage_range(s, account_id, "hour", from, to, rows, err);
	if (step == STORE_DAY_MS)
		return usage_range(s, account_id, "day", from, to, rows, err);
	/* Whole days [d0, d1) inside, hours at the edges; whole months
	 * [m0, m1) inside the days, days at their edges. */
	int64_t d0 = ceil_to(from, STORE_DAY_MS), d1 = floor_to(to, STORE_DAY_MS);
	if (d0 >= d1)
		return usage_range(s, account_id, "hour", from, to, rows, err);
	int64_t m0 = store_month_start(d0), m1 = store_month_start(d1);
	if (m0 < d0)
		m0 = store_month_next(m0);
	if (m0 >= m1)
		m0 = m1 = d1;
	if (usage_range(s, account_id, "hour", from, d0, rows, err) < 0 ||
	    usage_range(s, account_id, "day", d0, m0, rows, err) < 0 ||
	    usage_range(s, account_id, "month", m0, m1, rows, err) < 0 ||
	    usage_range(s, account_id, "day", m1, d1, rows, err) < 0 ||
	    usage_range(s, account_id, "hour", d1, to, rows, err) < 0)
		return -1;
	return 0;
}

static void usage_labeled_decode(sqlite3_stmt *q, void *elem)
{
	struct store_usage_labeled *u = elem;

	memset(u, 0, sizeof(*u));
	u->created_at_ms = sqlite3_column_int64(q, 0);
	u->expires_at_ms = sqlite3_column_int64(q, 1);
	u->ended_at_ms = sqlite3_column_int64(q, 2);
	u->charge_micro = sqlite3_column_int64(q, 3);
	u->labeled = sqlite3_column_type(q, 4) != SQLITE_NULL;
	store_copy_col(u->value, sizeof u->value, q, 4);
	store_copy_col(u->size, sizeof u->size, q, 5);
}

/* The settled sandboxes that may have a piece in [from, to): created
 * before `to`, ended no earlier than the hour before `from` (a piece's
 * hour is at most its runtime's last hour), the rollups' rows (see
 * store_usage_rebuild_tx). */
static int usage_settled(struct store *s, const char *account_id, int64_t from_ms, int64_t to_ms,
			 const char *key, struct store_usage_snapshot *out, struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_bind(s, &q,
		       "SELECT s.created_at_ms, s.expires_at_ms, s.ended_at_ms, s.charge_micro,"
		       " l.value, s.size FROM sandboxes s LEFT JOIN sandbox_labels l"
		       " ON l.sandbox_id = s.id AND l.key = ?4"
		       " WHERE s.account_id = ?1 AND s.created_at_ms > 0 AND s.created_at_ms < ?3"
		       " AND s.ended_at_ms >= ?2 AND s.status IN ('destroyed', 'expired', 'failed')"
		       " ORDER BY s.created_at_ms, s.id",
		       err, STORE_T(account_id), STORE_I(from_ms - STORE_HOUR_MS), STORE_I(to_ms),
		       STORE_T(key)) < 0)
		return -1;
	return store_collect(s, q, sizeof(*out->settled), SIZE_MAX, usage_labeled_decode,
			     (void **)&out->settled, &out->n_settled, err);
}

static int usage_period_check(int64_t from_ms, int64_t to_ms, int64_t step_ms,
			      struct sbx_error *err)
{
	int64_t align = step_ms ? step_ms : STORE_HOUR_MS;

	if ((step_ms != 0 && step_ms != STORE_HOUR_MS && step_ms != STORE_DAY_MS) ||
	    floor_to(from_ms, align) != from_ms || floor_to(to_ms, align) != to_ms ||
	    to_ms <= from_ms)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
				     "a usage period must be whole UTC hours (days for daily "
				     "buckets), 'to' after 'from'");
	return 0;
}

/* The snapshot, with (extras) or without balance, live count and running
 * list: one read transaction on one read connection. */
/* The bytes relayed by the account's sandboxes that ended in [from, to)
 * (by the index of ended_at): a sandbox's network counts in the period it
 * ended in (the running ones are added by the caller, from the running
 * list of the same snapshot). */
static int usage_network(struct store *s, const char *account_id, int64_t from_ms, int64_t to_ms,
			 struct store_usage_snapshot *out, struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	int rc = store_run(s, &q,
			   "SELECT COALESCE(SUM(net_bytes_in), 0), COALESCE(SUM(net_bytes_out), 0)"
			   " FROM sandboxes WHERE account_id = ?1 AND ended_at_ms >= ?2"
			   " AND ended_at_ms < ?3",
			   err, STORE_T(account_id), STORE_I(from_ms), STORE_I(to_ms));
	if (rc < 0)
		return -1;
	if (rc == SQLITE_ROW) {
		out->net_bytes_in = sqlite3_column_int64(q, 0);
		out->net_bytes_out = sqlite3_column_int64(q, 1);
	}
	return 0;
}

static int usage_snapshot(struct store *s, const char *account_id, int64_t from_ms, int64_t to_ms,
			  int64_t step_ms, bool extras, const char *group_key,
			  struct store_usage_snapshot *out, struct sbx_error *err)
{
	struct usage_rows rows = {0};

	memset(out, 0, sizeof(*out));
	if (usage_period_check(from_ms, to_ms, step_ms, err) < 0)
		return -1;
	STORE_READ(s);
	if (store_exec_cached(s, "BEGIN", err) < 0)
		return -1;
	int rc = usage_ranges(s, account_id, from_ms, to_ms, step_ms, &rows, err);
	if (rc == 0 && extras)
		rc = store_balance_locked(s, account_id, &out->balance, err);
	if (rc == 0 && extras)
		rc = store_count_live_locked(s, account_id, &out->live, err);
	if (rc == 0 && extras)
		rc = store_sandbox_list_running_locked(s, account_id, &out->running,
						       &out->n_running, err);
	if (rc == 0 && extras)
		rc = usage_network(s, account_id, from_ms, to_ms, out, err);
	if (rc == 0 && group_key)
		rc = usage_settled(s, account_id, from_ms, to_ms, group_key, out, err);
	/* A read transaction: COMMIT only ends it. */
	if (store_exec_cached(s, "COMMIT", NULL) < 0)
		store_tx_rollback(s);
	out->rows = rows.v;
	out->n_rows = rows.n;
	if (rc < 0) {
		store_usage_snapshot_release(out);
		return -1;
	}
	return 0;
}

int store_usage_snapshot(struct store *s, const char *account_id, int64_t from_ms, int64_t to_ms,
			 int64_t step_ms, struct store_usage_snapshot *out, struct sbx_error *err)
{
	return usage_snapshot(s, account_id, from_ms, to_ms, step_ms, true, NULL, out, err);
}

int store_usage_snapshot_grouped(struct store *s, const char *account_id, int64_t from_ms,
				 int64_t to_ms, int64_t step_ms, const char *group_key,
				 struct store_usage_snapshot *out, struct sbx_error *err)
{
	return usage_snapshot(s, account_id, from_ms, to_ms, step_ms, true, group_key, out, err);
}

void store_usage_snapshot_release(struct store_usage_snapshot *u)
{
	free(u->rows);
	free(u->running);
	free(u->settled);
	memset(u, 0, sizeof(*u));
}

int store_usage_read(struct store *s, const char *account_id, int64_t from_ms, int64_t to_ms,
		     int64_t step_ms, struct store_usage_row **out, size_t *n,
		     struct sbx_error *err)
{
	struct store_usage_snapshot u;

	*out = NULL;
	*n = 0;
	if (usage_snapshot(s, account_id, from_ms, to_ms, step_ms, false, NULL, &u, err) < 0)
		return -1;
	*out = u.rows;
	*n = u.n_rows;
	return 0;
}
