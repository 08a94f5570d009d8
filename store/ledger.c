/* store: balances, the ledger's consistency check and its totals (see
 * store.h; the locking rules are store.c's). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "store-priv.h"
#include "store.h"

#define MOD "store"

int store_balance_locked(struct store *s, const char *account_id, struct store_balance *out,
			 struct sbx_error *err)
{
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	int rc = store_run(s, &q,
			   "SELECT credits_micro, holds_micro, releases_micro, charges_micro"
			   " FROM accounts WHERE id = ?1",
			   err, STORE_T(account_id));
	if (rc < 0)
		return -1;
	if (rc == SQLITE_DONE)
		return store_no_account(err, account_id);
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
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	int rc = store_run(s, &q, sql, err, STORE_T(account_id));
	if (rc < 0 || rc == SQLITE_DONE)
		return rc < 0 ? -1 : 0;
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
	     " ((kind = 'credit' AND (sandbox_id IS NOT NULL OR execution_id IS NOT NULL"
	     "   OR snapshot_id IS NOT NULL)) OR"
	     "  (kind != 'credit' AND (sandbox_id IS NOT NULL) + (execution_id IS NOT NULL)"
	     "   + (snapshot_id IS NOT NULL) != 1))"},
	    /* A snapshot's storage is charged as it is held: each settle
	     * is a hold and its charge (store_snapshot_settle). */
	    {"snapshot's holds, charges and charge_micro differ, or it was released",
	     "SELECT x.id FROM snapshots x LEFT JOIN ledger l ON l.snapshot_id = x.id"
	     " WHERE (?1 IS NULL OR x.account_id = ?1) GROUP BY x.id HAVING"
	     " COALESCE(SUM(CASE l.kind WHEN 'hold' THEN l.amount_micro END), 0) != x.charge_micro"
	     " OR COALESCE(SUM(CASE l.kind WHEN 'charge' THEN l.amount_micro END), 0)"
	     "  != x.charge_micro OR COUNT(CASE l.kind WHEN 'release' THEN 1 END) > 0"
	     " OR SUM(CASE WHEN l.account_id != x.account_id THEN 1 ELSE 0 END) > 0"},
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

int store_ledger_totals_get(struct store *s, struct store_ledger_totals *out, struct sbx_error *err)
{
	STORE_READ(s);
	_cleanup_reset_ sqlite3_stmt *q = NULL;
	if (store_run_args(s, &q,
			   "SELECT COALESCE(SUM(credits_micro), 0), COALESCE(SUM(holds_micro), 0),"
			   " COALESCE(SUM(releases_micro), 0), COALESCE(SUM(charges_micro), 0),"
			   " COUNT(*) FROM accounts",
			   NULL, 0, err) < 0)
		return -1;
	out->credits = sqlite3_column_int64(q, 0);
	out->holds = sqlite3_column_int64(q, 1);
	out->releases = sqlite3_column_int64(q, 2);
	out->charges = sqlite3_column_int64(q, 3);
	out->accounts = sqlite3_column_int64(q, 4);
	return 0;
}
