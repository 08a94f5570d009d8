/* store: the only code that speaks SQL (sqlite3). Accounts, API keys,
 * sandboxes and the append-only ledger, in one SQLite file.
 *
 * The database runs in WAL mode with synchronous=FULL, busy_timeout and
 * foreign_keys=ON; every write is one BEGIN IMMEDIATE transaction; the schema
 * is versioned (PRAGMA user_version) and migrated at open.
 *
 * Money is integer micro-USD (int64_t). The ledger holds four kinds of
 * entries, each tied to an account and, where it applies, a sandbox:
 *   credit  +amount to the balance                     (admin add-credit)
 *   hold    reserves amount for a sandbox               (create, extend)
 *   release returns unused reserve                     (sandbox end, failed create)
 *   charge  consumes amount: leaves the balance and the reserve
 * so that, per account:
 *   balance  = credits - charges      consumed = charges
 *   reserved = holds - releases - charges
 *   available = balance - reserved    (never negative: checked at hold time)
 * A sandbox's holds are settled (charge + release of the rest) exactly once,
 * in the same transaction that ends it.
 *
 * The account row carries running totals of its ledger (credits, holds,
 * releases, charges), kept by a trigger in the same transaction as each
 * ledger row, so a balance or an admission check is one row read whatever
 * the history; store_ledger_check proves totals = sums of the ledger.
 *
 * Every query that touches tenant data takes the account id. Functions are
 * thread-safe. Writes go through one connection behind one mutex (every
 * write a BEGIN IMMEDIATE transaction); functions that only read (key
 * lookup, gets, lists, balance, usage, the ledger check) run on one of a
 * small pool of read connections instead (WAL: they read the last commit
 * and never wait for the writer or its mutex). Lock order: a function
 * holds either the writer's mutex or one reader's, never both. Errors:
 * SBX_E_INTERNAL for database failures (details logged), or the code named
 * per function.
 */
#ifndef SBX_STORE_H
#define SBX_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "../util/util.h"

#define STORE_ID_MAX 40

struct store;

/* Open (creating if needed) and migrate the database at path. */
struct store *store_open(const char *path, struct sbx_error *err);
void store_close(struct store *s);

/* --------------------------------------------------- accounts and keys */

struct store_account {
	char id[STORE_ID_MAX]; /* "acct_" + 24 hex */
	char name[128];
	int64_t created_at_ms;
};

/* New account with an opening credit (micro-USD, >= 0; a credit entry is
 * written when > 0). Fills acct. */
int store_account_create(struct store *s, const char *name, int64_t credit_micro,
			 struct store_account *acct, struct sbx_error *err);
/* SBX_E_NOT_FOUND when there is no such account. */
int store_account_get(struct store *s, const char *account_id, struct store_account *acct,
		      struct sbx_error *err);
/* Add credit (> 0) to an account. SBX_E_NOT_FOUND, SBX_E_INVALID_REQUEST. */
int store_credit_add(struct store *s, const char *account_id, int64_t amount_micro,
		     struct sbx_error *err);
/* All accounts, oldest first. *out is malloc'd (free it); *n the count. */
int store_account_list(struct store *s, struct store_account **out, size_t *n,
		       struct sbx_error *err);

/* API key scopes: a space-separated list ("sandboxes keys"). */
#define STORE_SCOPES_MAX 128

struct store_key {
	char id[STORE_ID_MAX]; /* "key_" + 24 hex, not a secret */
	char account_id[STORE_ID_MAX];
	char prefix[24]; /* first characters of the secret, for display */
	int64_t created_at_ms;
	int64_t revoked_at_ms;	       /* 0 while valid */
	char scopes[STORE_SCOPES_MAX]; /* space-separated; "" = none */
};

/* Store a key by its SHA-256 digest (64 hex), with key->scopes as given
 * (the caller validated them). */
int store_key_insert(struct store *s, const struct store_key *key, const char *digest_hex,
		     struct sbx_error *err);
/* What the database keeps of an account's API keys (store/keys.c): at most
 * max_active valid (unrevoked) keys, and of the revoked ones only those
 * revoked at or after revoked_before_ms, at most max_revoked of them (the
 * most recently revoked). */
struct store_key_keep {
	int max_active;
	int64_t revoked_before_ms;
	int max_revoked;
};
/* store_key_insert() that, in the same transaction, refuses with
 * SBX_E_CONCURRENCY_LIMIT when the account already has keep->max_active
 * valid keys, and drops the revoked keys keep no longer keeps. keep NULL
 * = no cap (store_key_insert). */
int store_key_insert_kept(struct store *s, const struct store_key *key, const char *digest_hex,
			  const struct store_key_keep *keep, struct sbx_error *err);
/* One page of an account's keys (including revoked), newest first
 * (created_at, then insertion order): at most `limit` (1..1000) after the
 * key `starting_after` (NULL = from the newest; a key not of this account
 * -> SBX_E_NOT_FOUND with param "starting_after"). *out malloc'd (NULL
 * when *n is 0); *has_more set. */
int store_key_list_page(struct store *s, const char *account_id, int limit,
			const char *starting_after, struct store_key **out, size_t *n,
			bool *has_more, struct sbx_error *err);
/* The key whose digest matches (compared in constant time against the
 * stored digest), valid and not revoked, with its scopes: one indexed
 * lookup on a read connection. SBX_E_AUTHENTICATION otherwise. */
int store_key_find(struct store *s, const char *digest_hex, struct store_key *key,
		   struct sbx_error *err);
/* Revoke; account_id NULL means any account (admin). SBX_E_NOT_FOUND. */
int store_key_revoke(struct store *s, const char *account_id, const char *key_id,
		     struct sbx_error *err);
/* One key of this account (revoked or not). SBX_E_NOT_FOUND for an unknown
 * key or another account's. */
int store_key_get(struct store *s, const char *account_id, const char *key_id,
		  struct store_key *key, struct sbx_error *err);
/* Keys of an account (including revoked), newest first. */
int store_key_list(struct store *s, const char *account_id, struct store_key **out, size_t *n,
		   struct sbx_error *err);

/* ------------------------------------------------------------ sandboxes */

enum store_status {
	STORE_CREATING, /* intent written, hold placed, guest not ready */
	STORE_RUNNING,
	STORE_DESTROYED,
	STORE_EXPIRED,
	STORE_FAILED,
	STORE_ABORTED, /* create rolled back: hidden from tenants */
	/* Paused (docs/lifecycle.md "Pause and resume"): its memory saved
	 * beside its overlay, no domain. Stored as status 'running' with
	 * paused_at_ms > 0, so it stays live (the cap, reconcile, the ledger
	 * invariants) and ends through store_sandbox_end like a running one;
	 * every read gives STORE_PAUSED and the list filters by it. */
	STORE_PAUSED,
};
/* "creating", "running", ... (borrowed); parse returns -1 if unknown. */
const char *store_status_name(enum store_status st);
int store_status_parse(const char *name, enum store_status *st);

/* Labels (issue 32): a sandbox's metadata, string pairs. The store keeps
 * them twice, in one transaction: as the JSON object the API shows (keys
 * sorted; at most STORE_METADATA_MAX bytes with its NUL) and one row per
 * pair, which the list's filter and usage grouped by a key read through
 * an index. sandbox/ checks the pairs (sandbox_metadata_*); the store
 * checks the bounds that depend on the stored pairs (count and bytes
 * after an update). */
#define STORE_METADATA_KEYS_MAX	 16
#define STORE_METADATA_KEY_MAX	 40
#define STORE_METADATA_VALUE_MAX 256
#define STORE_METADATA_BYTES_MAX 1024 /* keys + values, UTF-8 bytes */
#define STORE_METADATA_MAX	 2400

/* A sandbox's network policy (issue 27): canonical JSON that network/
 * wrote and checked, with its NUL (NET_POLICY_JSON_MAX); the store keeps
 * it as given. */
#define STORE_NETWORK_MAX  4096
#define STORE_NETWORK_NONE "{\"egress\":\"none\",\"allow\":[],\"deny\":[]}"

/* A host name (config `hosts[].name`) and its terminating NUL. */
#define STORE_HOST_MAX 32

/* What a sandbox's expiry does to it (docs/api.md "timeout_action"). */
enum store_timeout_action {
	STORE_ON_TIMEOUT_EXPIRE = 0, /* it ends, expired */
	STORE_ON_TIMEOUT_PAUSE = 1,  /* it is paused, billed as a pause */
};

struct store_sandbox {
	char id[STORE_ID_MAX]; /* "sbx_" + 24 hex */
	char account_id[STORE_ID_MAX];
	char size[16];
	char domain[64]; /* libvirt domain name, "" until known */
	enum store_status status;
	int timeout_minutes;
	int64_t price_micro_per_hour;	   /* snapshot at create */
	int64_t requested_at_ms;	   /* request received */
	int64_t created_at_ms;		   /* guest ready: billing starts (0 while creating) */
	int64_t expires_at_ms;		   /* 0 while creating */
	int64_t ended_at_ms;		   /* 0 while live */
	int64_t last_seen_at_ms;	   /* heartbeat */
	int64_t hold_micro;		   /* total reserved for it (create + extends) */
	int64_t charge_micro;		   /* final charge, once ended */
	char startup_path[8];		   /* "warm" | "cold" | "" (before migration 3) */
	int64_t startup_ms;		   /* request received -> guest ready and recorded */
	char host[STORE_HOST_MAX];	   /* the host it runs on ("local" before migration 8) */
	char metadata[STORE_METADATA_MAX]; /* JSON object of its labels, "{}" for none */
	/* Pause and resume (migration 11). While paused: paused_at_ms > 0
	 * (runtime billing stopped there), paused_bytes the host-observed
	 * size of its save file and overlay, storage_price_micro the price
	 * of a GiB-hour in force at the pause. paused_ms and storage_micro
	 * add up the pauses already resumed (their time, their storage
	 * cost); expires_at_ms was pushed out by each at its resume. */
	int64_t paused_at_ms;
	int64_t paused_ms;
	int64_t paused_bytes;
	int64_t storage_price_micro;
	int64_t storage_micro;
	/* Egress (migration 12): the policy (canonical JSON; "" at reserve =
	 * none), the bytes relayed each way, and the price of a GB (10^9
	 * bytes) in force at the create. */
	char network[STORE_NETWORK_MAX];
	int64_t net_bytes_in, net_bytes_out;
	int64_t net_price_micro_per_gb;
	/* The snapshot its disk started from (migration 14; "" for the base
	 * image), set by store_sandbox_snapshot_set. */
	char snapshot_id[STORE_ID_MAX];
	/* What its expiry does (migration 15), set at reserve. */
	enum store_timeout_action timeout_action;
};

/* Write a create's intent in one transaction: the row (status CREATING)
 * with its labels (row->metadata: "" or a JSON object of string pairs that
 * sandbox/ checked; a pair whose value is "" is not kept) and a hold of
 * hold_micro. Refuses with SBX_E_CONCURRENCY_LIMIT when the
 * account already has max_live sandboxes that are CREATING or RUNNING, and
 * with SBX_E_INSUFFICIENT_CREDIT (message names needed and available, in
 * USD) when available < hold_micro. row->status and ->hold_micro are set
 * by the call. */
int store_sandbox_reserve(struct store *s, struct store_sandbox *row, int64_t hold_micro,
			  int max_live, struct sbx_error *err);

/* Replace a live sandbox's network policy (network: canonical JSON that
 * network/ checked, < STORE_NETWORK_MAX) and read the row back, in one
 * transaction. SBX_E_NOT_FOUND when it is not the account's (or still
 * CREATING), SBX_E_SANDBOX_NOT_RUNNING when it has ended. */
int store_sandbox_network_set(struct store *s, const char *account_id, const char *id,
			      const char *network, struct store_sandbox *out,
			      struct sbx_error *err);
/* Add bytes relayed for a live sandbox's connections (in: toward the
 * guest, out: from it; each >= 0). 1 when counted, 0 when the sandbox is
 * no longer live (the bytes are then dropped: it has settled). */
int store_sandbox_net_add(struct store *s, const char *id, int64_t bytes_in, int64_t bytes_out,
			  struct sbx_error *err);

/* CREATING -> RUNNING with the guest's domain, created_at and expires_at.
 * SBX_E_NOT_FOUND if the row is not CREATING. */
int store_sandbox_activate(struct store *s, const char *id, const char *domain,
			   int64_t created_at_ms, int64_t expires_at_ms, struct sbx_error *err);
/* store_sandbox_activate() that also records how the guest started:
 * startup_path "warm" (a pooled guest), "cold" (booted for this request) or
 * NULL (unknown, stored as ""), and startup_ms >= 0 (request received ->
 * ready), and the host it runs on (NULL keeps 'local'), in the same
 * transaction. SBX_E_INVALID_REQUEST for other paths or a bad host name. */
int store_sandbox_activate_startup(struct store *s, const char *id, const char *domain,
				   int64_t created_at_ms, int64_t expires_at_ms,
				   const char *startup_path, int64_t startup_ms, const char *host,
				   struct sbx_error *err);

/* Drained hosts (`sandboxd admin drain HOST`): mark (drained true) or
 * unmark a host by name; idempotent; the host need not be configured (the
 * admin command runs without the daemon's config of hosts checked). */
int store_host_drain_set(struct store *s, const char *host, bool drained, int64_t now_ms,
			 struct sbx_error *err);
/* The drained hosts' names, at most max of them, sorted. 0 or -1. */
int store_host_drains_list(struct store *s, char (*hosts)[STORE_HOST_MAX], size_t max, size_t *n,
			   struct sbx_error *err);

/* CREATING -> ABORTED and release the whole hold, one transaction.
 * Returns 1 if it did, 0 if the row was not CREATING. */
int store_sandbox_abort(struct store *s, const char *id, struct sbx_error *err);

/* Computes a live sandbox's final charge inside the ending transaction
 * (so a concurrent extend cannot slip between read and write). */
typedef int64_t (*store_charge_fn)(const struct store_sandbox *row, int64_t ended_at_ms);

/* End a RUNNING sandbox exactly once: set status (DESTROYED, EXPIRED or
 * FAILED) and ended_at, post charge = charge_fn(row, ended_at) (capped at
 * the row's hold) and release hold - charge, all in one transaction.
 * Returns 1 if this call ended it, 0 if it had already ended (nothing
 * written). *out (may be NULL) gets the final row either way. */
int store_sandbox_end(struct store *s, const char *id, enum store_status status,
		      int64_t ended_at_ms, store_charge_fn charge_fn, struct store_sandbox *out,
		      struct sbx_error *err);

/* Running -> paused, one transaction: paused_at, the host-observed bytes
 * and the GiB-hour price, and a hold of storage_hold_micro (the storage
 * of the whole paused retention; SBX_E_INSUFFICIENT_CREDIT when the
 * account cannot hold it). Returns 1 when this call paused it, 0 when
 * the row is not running (ended meanwhile, or already paused: nothing
 * written). *out (may be NULL) gets the row either way. */
int store_sandbox_pause(struct store *s, const char *id, int64_t paused_at_ms, int64_t bytes,
			int64_t storage_price_micro, int64_t storage_hold_micro,
			struct store_sandbox *out, struct sbx_error *err);
/* The storage cost of the row's current pause if it ended at at_ms
 * (billing's; the store must not call billing). */
typedef int64_t (*store_pause_cost_fn)(const struct store_sandbox *row, int64_t at_ms);
/* Paused -> running at resumed_at_ms, one transaction: the paused time
 * is added to paused_ms and to expires_at (the session clock stopped),
 * cost_fn(row, resumed_at) to storage_micro. When new_expires_at_ms is
 * later than that moved expiry, expires_at becomes it and
 * extra_hold_micro is held with it (the time the resume grants, as an
 * extend: SBX_E_INSUFFICIENT_CREDIT when the account cannot, nothing
 * written). 1 when this call resumed it, 0 when the row is not paused
 * (nothing written). *out may be NULL. */
int store_sandbox_resume(struct store *s, const char *id, int64_t resumed_at_ms,
			 store_pause_cost_fn cost_fn, int64_t new_expires_at_ms,
			 int64_t extra_hold_micro, struct store_sandbox *out,
			 struct sbx_error *err);

/* Add a hold for an extension and move expires_at, one transaction; only
 * while RUNNING (SBX_E_SANDBOX_NOT_RUNNING otherwise). Refuses with
 * SBX_E_INSUFFICIENT_CREDIT like reserve. */
int store_sandbox_extend(struct store *s, const char *account_id, const char *id,
			 int64_t new_expires_at_ms, int64_t extra_hold_micro,
			 struct sbx_error *err);

/* One sandbox. account_id NULL = any account (internal use only).
 * SBX_E_NOT_FOUND when missing, ABORTED, or of another account. */
int store_sandbox_get(struct store *s, const char *account_id, const char *id,
		      struct store_sandbox *out, struct sbx_error *err);

/* An account's sandboxes, newest first (created_at, then id), ABORTED
 * hidden; `status` filter may be NULL; at most `limit` rows after the row
 * `starting_after` (NULL = from the newest; unknown id -> SBX_E_NOT_FOUND
 * with param "starting_after"). *out malloc'd; *has_more set. */
int store_sandbox_list(struct store *s, const char *account_id, const enum store_status *status,
		       int limit, const char *starting_after, struct store_sandbox **out, size_t *n,
		       bool *has_more, struct sbx_error *err);

/* store_sandbox_list() of the sandboxes that carry every pair of
 * `labels` (a JSON object of 1..STORE_METADATA_KEYS_MAX string pairs;
 * NULL = no filter): read through the labels' index, O(sandboxes with the
 * first pair). */
int store_sandbox_list_labeled(struct store *s, const char *account_id,
			       const enum store_status *status, const char *labels, int limit,
			       const char *starting_after, struct store_sandbox **out, size_t *n,
			       bool *has_more, struct sbx_error *err);

/* Change a sandbox's labels (live or ended; another account's, a
 * creating or an aborted one is SBX_E_NOT_FOUND), one transaction: clear first drops them all,
 * then each pair of `patch` (a JSON object sandbox/ checked) is set, or
 * removed when its value is null or "". SBX_E_INVALID_REQUEST (param
 * "metadata") when the result would pass STORE_METADATA_KEYS_MAX pairs or
 * STORE_METADATA_BYTES_MAX bytes (nothing changed). *out gets the row. */
int store_sandbox_metadata_update(struct store *s, const char *account_id, const char *id,
				  bool clear, const char *patch, struct store_sandbox *out,
				  struct sbx_error *err);

/* Every CREATING or RUNNING row of any account (reconcile, expiry). */
int store_sandbox_list_live(struct store *s, struct store_sandbox **out, size_t *n,
			    struct sbx_error *err);

/* Heartbeat: last_seen_at = now_ms for a RUNNING row. */
int store_sandbox_touch(struct store *s, const char *id, int64_t now_ms, struct sbx_error *err);

/* An account's sandboxes (not ABORTED) that were ready (created_at > 0)
 * and whose runtime [created_at, ended_at or now] overlaps [from_ms, to_ms),
 * for usage reports. *out malloc'd. */
int store_sandbox_list_overlapping(struct store *s, const char *account_id, int64_t from_ms,
				   int64_t to_ms, struct store_sandbox **out, size_t *n,
				   struct sbx_error *err);

/* Count of CREATING or RUNNING sandboxes of an account. */
int store_sandbox_count_live(struct store *s, const char *account_id, int *n,
			     struct sbx_error *err);

/* --------------------------------------------------------------- ledger */

struct store_balance {
	int64_t credits_micro;
	int64_t consumed_micro;	 /* sum of charges */
	int64_t balance_micro;	 /* credits - consumed */
	int64_t reserved_micro;	 /* holds - releases - charges */
	int64_t available_micro; /* balance - reserved */
};
/* Ledger totals of an account (settled entries only; cost accrued by
 * running sandboxes is billing/'s to add). */
/* The running totals of every account added up (micro-USD; for the
 * operator's metrics). One read of the account rows. 0 or -1. */
struct store_ledger_totals {
	int64_t credits, holds, releases, charges;
	int64_t accounts;
};
int store_ledger_totals_get(struct store *s, struct store_ledger_totals *out,
			    struct sbx_error *err);

int store_balance_get(struct store *s, const char *account_id, struct store_balance *out,
		      struct sbx_error *err);

/* Check the ledger invariants of one account (NULL = every account):
 * balance = credits - consumed, available >= 0, every ended or aborted
 * sandbox's holds settled exactly once (charges + releases = holds), no
 * sandbox with more than one charge, live sandboxes unsettled. 0, or -1
 * with SBX_E_INTERNAL and the first violation in the message. For tests
 * and `admin check-ledger`. */
int store_ledger_check(struct store *s, const char *account_id, struct sbx_error *err);

/* ------------------------------------------------ usage rollups (usage.c)
 *
 * When a sandbox settles, its billed seconds and its charge are added, in
 * the same transaction, to buckets of its account and size: the UTC hour,
 * day and month it ran in (table usage_rollups). A sandbox that ran across
 * a bucket boundary is split by the time it ran on each side, so that the
 * parts add up to its seconds and its charge exactly: the cumulative share
 * up to each boundary is floor(total * elapsed / runtime) and each bucket
 * gets the difference (the last one the rest). Hours nest in days and days
 * in months, so every grain sums to the same totals, and the sum of all
 * buckets equals the sandbox charges in the ledger (store_ledger_check
 * proves it per account, grain and size). */

#define STORE_HOUR_MS INT64_C(3600000)
#define STORE_DAY_MS  INT64_C(86400000)

/* Billed seconds of a runtime (API.md: started seconds, at least one). */
int64_t store_billed_seconds(int64_t runtime_ms);
/* Start of the UTC month holding t_ms, and of the month after month_ms. */
int64_t store_month_start(int64_t t_ms);
int64_t store_month_next(int64_t month_ms);

/* One part of a split: the UTC hour it falls in and its share. Return -1
 * to stop the split (which then returns -1). */
typedef int (*store_usage_piece_fn)(void *ctx, int64_t hour_ms, int64_t seconds,
				    int64_t cost_micro);
/* Split seconds and cost_micro of the runtime [start_ms, end_ms) over the
 * UTC hours it touches, as above, calling fn once per hour in order (one
 * call, for start's hour, when end <= start). 0 or -1. */
int store_usage_split(int64_t start_ms, int64_t end_ms, int64_t seconds, int64_t cost_micro,
		      store_usage_piece_fn fn, void *ctx);

struct store_usage_row {
	int64_t start_ms; /* start of the bucket (UTC hour, day or month) */
	int64_t span_ms;  /* its length: hour, day, or that month's */
	char size[16];
	int64_t seconds;
	int64_t cost_micro;
};
/* The settled usage of an account over [from_ms, to_ms), in one read
 * snapshot, O(buckets): with step_ms STORE_HOUR_MS or STORE_DAY_MS, the
 * rows of that grain (from and to must be multiples of it); with step 0,
 * the coarsest rows that tile the period exactly (months inside it, then
 * days, then hours at its edges; from and to whole hours). Rows of sizes
 * with no usage are absent. *out malloc'd (free it). SBX_E_INVALID_REQUEST
 * for a misaligned or empty period. */
int store_usage_read(struct store *s, const char *account_id, int64_t from_ms, int64_t to_ms,
		     int64_t step_ms, struct store_usage_row **out, size_t *n,
		     struct sbx_error *err);
/* Everything GET /v1/usage reads, in one read transaction (one snapshot,
 * so the parts agree: a sandbox that ends meanwhile is either in the
 * running list or in the rows, never both, never neither): the settled
 * rows as store_usage_read gives them, the account's ledger totals as
 * store_balance_get, its live count (creating + running) and its running
 * sandboxes (all of them, bounded by its live cap; newest first). On a
 * read connection, never the writer's mutex. Release with
 * store_usage_snapshot_release (also after an error). */
/* A settled sandbox as usage grouped by a label key reads it: what the
 * rollups were written from, and its label's value. */
struct store_usage_labeled {
	int64_t created_at_ms, expires_at_ms, ended_at_ms, charge_micro;
	char size[16];
	bool labeled; /* false: it has no such label */
	char value[STORE_METADATA_VALUE_MAX + 1];
};
struct store_usage_snapshot {
	struct store_usage_row *rows; /* malloc'd */
	size_t n_rows;
	struct store_balance balance;
	int live;
	struct store_sandbox *running; /* malloc'd, NULL when none */
	size_t n_running;
	/* store_usage_snapshot_grouped only: the settled sandboxes whose
	 * runtime may have a piece in the period (malloc'd, NULL when none) */
	struct store_usage_labeled *settled;
	size_t n_settled;
	/* egress of the sandboxes that ended in the period, both ways */
	int64_t net_bytes_in, net_bytes_out;
};
int store_usage_snapshot(struct store *s, const char *account_id, int64_t from_ms, int64_t to_ms,
			 int64_t step_ms, struct store_usage_snapshot *out, struct sbx_error *err);
/* store_usage_snapshot() that also reads, in the same snapshot, the
 * settled sandboxes of the period with the value of their label
 * `group_key` (O(sandboxes that ran in the period), by the index of
 * created_at): split with store_usage_split_sandbox, their pieces in the
 * period add up to the settled rows exactly. */
int store_usage_snapshot_grouped(struct store *s, const char *account_id, int64_t from_ms,
				 int64_t to_ms, int64_t step_ms, const char *group_key,
				 struct store_usage_snapshot *out, struct sbx_error *err);
/* Split a settled sandbox's billed seconds and charge over the UTC hours
 * of its billed runtime [created_at, min(ended_at, expires_at)), as the
 * rollups were written (store_usage_split). */
int store_usage_split_sandbox(const struct store_usage_labeled *u, store_usage_piece_fn fn,
			      void *ctx);
void store_usage_snapshot_release(struct store_usage_snapshot *u);
/* Recompute every rollup from the sandboxes that ended, one transaction
 * (after filling a database by hand, as bench/api does). */
int store_usage_rebuild(struct store *s, struct sbx_error *err);

/* ------------------------------------------------------ idempotency keys
 *
 * POST /v1/sandboxes's Idempotency-Key (API.md), scoped per account: the
 * primary key is (account_id, key). A key is 'pending' while its first
 * create runs and 'done' once the response was stored; a failed create
 * deletes its pending row so the key can be used again. */

#define STORE_IDEM_KEY_MAX  255		/* bytes of a key */
#define STORE_IDEM_BODY_MAX (64 * 1024) /* bytes of a remembered response */

struct store_idem {
	char request_hash[65];	       /* SHA-256 hex of the canonical request */
	char sandbox_id[STORE_ID_MAX]; /* "" until bound (store_idem_bind) */
	bool done;		       /* false = the first request still runs */
	int response_status;	       /* HTTP status, when done */
	char *response_body;	       /* exact bytes (malloc'd, NUL-terminated), or NULL */
	size_t response_len;
	int64_t created_at_ms;
};
/* Free what a store_idem owns (safe on a zeroed or released one). */
void store_idem_release_row(struct store_idem *row);

/* Claim (account_id, key) for a new request, in one BEGIN IMMEDIATE
 * transaction: a row older than keep_ms (created_at <= now - keep_ms) is
 * deleted first; then, if no row is left, a 'pending' row with
 * request_hash is inserted and 1 is returned; otherwise the existing row
 * is copied into *out (release it with store_idem_release_row) and 0 is
 * returned. -1 on error (SBX_E_INVALID_REQUEST for a key of 0 or more
 * than STORE_IDEM_KEY_MAX bytes). */
int store_idem_claim(struct store *s, const char *account_id, const char *key,
		     const char *request_hash, int64_t now_ms, int64_t keep_ms,
		     struct store_idem *out, struct sbx_error *err);

/* pending -> done with the response to replay (len <= STORE_IDEM_BODY_MAX
 * bytes, copied) and the sandbox it created. SBX_E_NOT_FOUND when the key
 * is not pending. */
int store_idem_complete(struct store *s, const char *account_id, const char *key,
			const char *sandbox_id, int response_status, const void *body, size_t len,
			struct sbx_error *err);

/* Note the sandbox a pending key's create reserved (before it boots), so
 * that a daemon crash after activation leaves the key pointing at the
 * running sandbox. Returns 1 if bound, 0 if the key is not pending. */
int store_idem_bind(struct store *s, const char *account_id, const char *key,
		    const char *sandbox_id, struct sbx_error *err);

/* Forget a pending key (its request failed). Returns 1 if a row was
 * deleted, 0 if there was none (or it was done: a done key is kept). */
int store_idem_release(struct store *s, const char *account_id, const char *key,
		       struct sbx_error *err);

/* Delete done keys created at or before older_than_ms (retention: the
 * service keeps them >= 24 h). Returns the number deleted. */
int store_idem_prune(struct store *s, int64_t older_than_ms, struct sbx_error *err);

/* At daemon start, after reconcile: delete every pending key whose create
 * did not reach an activated sandbox (those creates were rolled back).
 * Pending keys bound to a sandbox that became running stay, for
 * sandbox/ to answer from that sandbox. Returns the count deleted. */
int store_idem_release_pending(struct store *s, struct sbx_error *err);

/* ---------------------------------------------- executions (store/execution.c)
 *
 * One-shot executions (POST /v1/sandbox/executions) have their own row and
 * their own ledger entries (ledger.execution_id): one hold when they start,
 * then exactly once either a charge plus the release of the rest
 * (completed, timed_out) or the release of the whole hold (failed: the
 * guest could not run the code). store_ledger_check covers them. */

struct store_execution {
	char id[STORE_ID_MAX]; /* "sbxr_" + 24 hex */
	char account_id[STORE_ID_MAX];
	char runtime[16];
	char runner[16];
	char status[16]; /* running | completed | timed_out | failed */
	int timeout_seconds;
	int64_t price_micro_per_second;
	int64_t requested_at_ms;
	int64_t ended_at_ms;
	int64_t hold_micro;
	int64_t charge_micro;
	char receipt_id[STORE_ID_MAX];
	char metadata[STORE_METADATA_MAX]; /* JSON object (insert only; "" = {}) */
	char *response;			   /* malloc'd JSON of the 200 answer, or NULL (get only) */
	/* list only: the stored answer's exit_code; has_exit_code false while
	 * running, for a failed run, or once the answer was dropped */
	bool has_exit_code;
	int exit_code;
};

/* Insert a running execution and its hold in one transaction; refuses with
 * SBX_E_INSUFFICIENT_CREDIT when available < hold_micro. */
int store_execution_reserve(struct store *s, const struct store_execution *row, int64_t hold_micro,
			    struct sbx_error *err);
/* What the database keeps of an account's signed receipts (executions'
 * and execs'): those created before created_before_ms go, then the oldest
 * beyond account_max. */
struct store_receipt_keep {
	int64_t created_before_ms;
	int64_t account_max;
};
/* What the database keeps of execution responses. */
struct store_execution_keep {
	uint64_t account_max_bytes; /* stored response bytes per account */
	int64_t ended_before_ms;    /* responses of runs that ended earlier go */
	/* NULL = keep every receipt; else applied to the account's receipts
	 * in the same transaction */
	const struct store_receipt_keep *receipts;
};

/* running -> status ("completed"/"timed_out"/"failed") at ended_at:
 * charge min(charge_micro, hold) and release the rest, remember the
 * response bytes and receipt id (NULL for "failed"), one transaction. A
 * run that could not happen passes 0; one the guest broke, the time it
 * used. With `keep` (NULL = keep all), the same transaction drops (sets to
 * NULL) this account's stored responses that ended before
 * keep->ended_before_ms, then the oldest ones until the account's total is
 * at most keep->account_max_bytes. SBX_E_NOT_FOUND if not running. */
int store_execution_settle(struct store *s, const char *id, const char *status, int64_t ended_at_ms,
			   int64_t charge_micro, const char *receipt_id, const char *response,
			   const struct store_execution_keep *keep, struct sbx_error *err);
/* A signed receipt: body is its canonical JSON (store_receipt_insert's
 * fields; the subject is the execution). */
struct store_receipt {
	const char *id, *account_id, *body, *hash, *signature, *signer;
	int64_t created_at_ms;
};
/* store_execution_settle() that also inserts the execution's receipt, in
 * the same transaction (one commit on the reply's path instead of two). */
int store_execution_settle_receipt(struct store *s, const char *id, const char *status,
				   int64_t ended_at_ms, int64_t charge_micro,
				   const struct store_receipt *receipt, const char *response,
				   const struct store_execution_keep *keep, struct sbx_error *err);
/* Drop every stored response of runs that ended before ended_before_ms
 * (all accounts; the daemon's start). Returns how many, or -1. */
int store_execution_prune(struct store *s, int64_t ended_before_ms, struct sbx_error *err);
/* At daemon start: every execution still `running` was cut by the crash
 * (its guest is gone: reconcile destroys it); end each as failed and
 * release its whole hold, no charge, no receipt. Returns the count. */
int store_execution_fail_unfinished(struct store *s, int64_t now_ms, struct sbx_error *err);

/* An account's execution; SBX_E_NOT_FOUND when missing, of another
 * account, or failed (never answered 200). Free out->response. */
int store_execution_get(struct store *s, const char *account_id, const char *id,
			struct store_execution *out, struct sbx_error *err);

/* The account's newest executions, newest first: at most `limit`
 * (1..100) rows without their response (NULL), *has_more when there are
 * older ones. *out is malloc'd (free it; NULL when *n is 0). */
int store_execution_list(struct store *s, const char *account_id, int limit,
			 struct store_execution **out, size_t *n, bool *has_more,
			 struct sbx_error *err);

/* A signed receipt: body is its canonical JSON. With `keep` (NULL = keep
 * all), the same transaction drops the account's receipts it no longer
 * keeps (store_receipt_keep). */
int store_receipt_insert(struct store *s, const char *id, const char *account_id,
			 const char *subject_id, const char *body, const char *hash,
			 const char *signature, const char *signer, int64_t created_at_ms,
			 const struct store_receipt_keep *keep, struct sbx_error *err);
/* Drop every receipt created before created_before_ms (all accounts; the
 * daemon's start). Returns how many, or -1. */
int store_receipt_prune(struct store *s, int64_t created_before_ms, struct sbx_error *err);
/* body/hash/signature/signer malloc'd into *out_* (free them);
 * SBX_E_NOT_FOUND for another account's or a missing receipt. */
int store_receipt_get(struct store *s, const char *account_id, const char *id, char **body,
		      char **hash, char **signature, char **signer, struct sbx_error *err);

/* A key's scopes (any account: admin and authentication use). */
int store_key_scopes_get(struct store *s, const char *key_id, char out[STORE_SCOPES_MAX],
			 struct sbx_error *err);
/* SBX_E_NOT_FOUND for an unknown key, SBX_E_INVALID_REQUEST when too long. */
int store_key_scopes_set(struct store *s, const char *key_id, const char *scopes,
			 struct sbx_error *err);

/* ----------------------------------------------------------- previews */

/* A preview URL of a sandbox's port (issue 28, migration 13): only the
 * SHA-256 of its token (64 lowercase hex) is stored. Live: not revoked and
 * expires_at_ms in the future. */
struct store_preview {
	char id[STORE_ID_MAX]; /* "pv_" + 24 hex */
	char account_id[STORE_ID_MAX];
	char sandbox_id[STORE_ID_MAX];
	uint32_t port;
	int64_t created_at_ms, expires_at_ms, revoked_at_ms;
};

/* Insert row (its created_at_ms is "now") unless the sandbox already has
 * max_live live previews (SBX_E_CONCURRENCY_LIMIT); drops the sandbox's
 * rows that expired or were revoked before now. 0 or -1. */
int store_preview_insert(struct store *s, const struct store_preview *row, const char *token_hash,
			 int max_live, struct sbx_error *err);
/* The live previews of a sandbox's port (port 0: all its ports), newest
 * first, at most max. *out malloc'd. */
int store_preview_list(struct store *s, const char *account_id, const char *sandbox_id,
		       uint32_t port, int64_t now_ms, size_t max, struct store_preview **out,
		       size_t *n, struct sbx_error *err);
/* Revoke one (the first revocation time is kept): SBX_E_NOT_FOUND when it
 * is not this account's preview of that sandbox. *out: the row after. */
int store_preview_revoke(struct store *s, const char *account_id, const char *sandbox_id,
			 const char *id, int64_t now_ms, struct store_preview *out,
			 struct sbx_error *err);
/* The preview whose token hashes to token_hash, revoked or expired ones
 * included (the caller decides): SBX_E_NOT_FOUND when none. */
int store_preview_find(struct store *s, const char *token_hash, struct store_preview *out,
		       struct sbx_error *err);

/* ---------------------------------------------------------- snapshots */

/* A snapshot of a sandbox's disk (issue 29, migration 14): one file on
 * `host`, backed only by the base image. CREATING while its file is being
 * written, READY once usable, DELETING while its file is being removed,
 * DELETED (kept for the ledger's sake) after. Its storage is billed from
 * billed_until_ms on, on `bytes` (host-observed) at the price in force at
 * its creation. */
enum store_snapshot_status {
	STORE_SNAP_CREATING,
	STORE_SNAP_READY,
	STORE_SNAP_DELETING,
	STORE_SNAP_DELETED,
};
#define STORE_SNAPSHOT_NAME_MAX 65 /* 64 bytes and the NUL */
struct store_snapshot {
	char id[STORE_ID_MAX]; /* "snap_" + 24 hex */
	char account_id[STORE_ID_MAX];
	char name[STORE_SNAPSHOT_NAME_MAX];
	char sandbox_id[STORE_ID_MAX]; /* the sandbox it was taken of */
	char host[STORE_HOST_MAX];
	int64_t disk_gib; /* the disk's virtual size */
	int64_t bytes;	  /* host-observed size of its file */
	enum store_snapshot_status status;
	int64_t price_micro_per_gib_hour;
	int64_t charge_micro; /* charged so far */
	int64_t created_at_ms, billed_until_ms, deleted_at_ms;
};
/* "creating", "ready", "deleting", "deleted" (borrowed). */
const char *store_snapshot_status_name(enum store_snapshot_status st);

/* Insert row as CREATING (created_at_ms and billed_until_ms are its
 * created_at_ms), unless the account already has max_count snapshots that
 * are not DELETED or their READY ones take max_bytes or more
 * (SBX_E_CONCURRENCY_LIMIT, naming the limit). 0 or -1. */
int store_snapshot_insert(struct store *s, const struct store_snapshot *row, int max_count,
			  int64_t max_bytes, struct sbx_error *err);
/* CREATING -> READY with its file's bytes, unless the account's READY
 * snapshots would then take more than max_bytes (SBX_E_CONCURRENCY_LIMIT:
 * the caller removes the file and the row). Its storage is billed from
 * ready_at_ms. 0, or -1 (SBX_E_NOT_FOUND: not CREATING any more). */
int store_snapshot_ready(struct store *s, const char *id, int64_t bytes, int64_t ready_at_ms,
			 int64_t max_bytes, struct sbx_error *err);
/* Remove a row that never got READY (a failed snapshot, a restart). */
int store_snapshot_forget(struct store *s, const char *id, struct sbx_error *err);
/* A snapshot of the account (account_id NULL: any, internal use) that is
 * READY: SBX_E_NOT_FOUND otherwise. */
int store_snapshot_get(struct store *s, const char *account_id, const char *id,
		       struct store_snapshot *out, struct sbx_error *err);
/* The account's READY snapshots, newest first, at most max; *out
 * malloc'd. */
int store_snapshot_list(struct store *s, const char *account_id, size_t max,
			struct store_snapshot **out, size_t *n, struct sbx_error *err);
/* Every snapshot row that is not DELETED (reconcile, settle); *out
 * malloc'd. */
int store_snapshot_list_all(struct store *s, struct store_snapshot **out, size_t *n,
			    struct sbx_error *err);
/* The cost of `bytes` held for `ms` at a price per GiB-hour
 * (billing_storage_cost). */
typedef int64_t (*store_storage_cost_fn)(int64_t bytes, int64_t ms, int64_t price);
/* Charge a READY or DELETING snapshot's storage from billed_until_ms to
 * at_ms (a hold and its charge, linked to it, at most what the account
 * has available) and move billed_until_ms there; with `final`, the row
 * becomes DELETED at at_ms in the same transaction. 1 when it moved, 0
 * when there was nothing to settle (not READY or DELETING; at_ms not past
 * billed_until_ms and not final). *charged (may be NULL): the amount. */
int store_snapshot_settle(struct store *s, const char *id, int64_t at_ms, bool final,
			  store_storage_cost_fn cost, int64_t *charged, struct sbx_error *err);
/* READY -> DELETING for the account's snapshot, unless a live sandbox
 * (CREATING or RUNNING, paused included) is backed by it: SBX_E_NOT_FOUND,
 * SBX_E_SNAPSHOT_IN_USE (naming how many). *out: the row. */
int store_snapshot_delete_begin(struct store *s, const char *account_id, const char *id,
				struct store_snapshot *out, struct sbx_error *err);
/* Back the CREATING sandbox sandbox_id by the account's READY snapshot
 * snapshot_id, in one statement (a delete that began first wins:
 * SBX_E_NOT_FOUND). */
int store_sandbox_snapshot_set(struct store *s, const char *account_id, const char *sandbox_id,
			       const char *snapshot_id, struct sbx_error *err);
/* The live sandboxes backed by snapshot id. -1 on error. */
int store_snapshot_users(struct store *s, const char *id, int *n, struct sbx_error *err);

#endif
