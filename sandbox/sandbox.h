/* sandbox: the use cases (create, get, list, exec, extend, destroy, expire,
 * reconcile, usage, keys, admin). The only module that calls more than one
 * of billing/, store/, vmm/ and agentless/, and the only place that knows
 * the order of the steps (reserve -> boot -> wait for HELLO -> record).
 *
 * api/ calls it with plain structs; it never sees HTTP or JSON.
 * Every function is thread-safe. Errors come back in struct sbx_error with
 * the API.md code to answer with.
 */
#ifndef SBX_SANDBOX_H
#define SBX_SANDBOX_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "../agentless/agentless.h"
#include "../config/config.h"
#include "../network/network.h"
#include "../util/util.h"

/* ---------------------------------------------------------------- config */

/* Check a filled config (sizes sane, production refusals). 0 or -1 with
 * SBX_E_INVALID_REQUEST naming the key in param. */
int sandbox_config_validate(const struct sandbox_config *cfg, struct sbx_error *err);

/* ----------------------------------------------------------- the service */

struct sandbox_svc;

/* ------------------------------------------------------------- hosts */

/* Drain (drained true) or undrain a configured host (docs/hosts.md
 * "Drain"): written to the store, which the serving daemon reads every
 * host_check_interval_ms; works without the daemon (admin). 404 for a
 * name the config does not list. */
int sandbox_host_drain(struct sandbox_svc *svc, const char *name, bool drained,
		       struct sbx_error *err);
/* Is the configured host `name` drained in the store? 0/1, or -1. */
int sandbox_host_drained(struct sandbox_svc *svc, const char *name, struct sbx_error *err);

/* One host as an operator sees it (/metrics on metrics_listen). */
struct sandbox_host_view {
	char name[SANDBOX_HOST_NAME_MAX];
	char uri[256];
	char state[16]; /* "up" | "down" | "draining" */
	int guests, max_guests;
	uint64_t memory_used_mib, memory_total_mib;
	uint64_t disk_used_gib, disk_total_gib; /* disk_total_gib 0: free space rules */
	int pool_ready, pool_booting;
	int64_t last_seen_ms_ago;
};
/* Fill up to max views of the running service's hosts; returns the count. */
size_t sandbox_hosts_view(struct sandbox_svc *svc, struct sandbox_host_view *out, size_t max);

enum sandbox_svc_flags {
	SANDBOX_SVC_FULL = 0,  /* store + libvirt + timers: `serve` */
	SANDBOX_SVC_ADMIN = 1, /* store only: `admin ...` commands */
};

/* Open the store, and unless ADMIN connect to libvirt, reconcile domains
 * with the database and start the timer thread. The config is copied. */
struct sandbox_svc *sandbox_svc_new(const struct sandbox_config *cfg, int flags,
				    struct sbx_error *err);
/* Stop timers, fail in-flight execs, free. With destroy_on_exit, destroys
 * the guests of running sandboxes and ends them as `destroyed`. */
void sandbox_svc_free(struct sandbox_svc *svc);
/* The config in force (borrowed). */
const struct sandbox_config *sandbox_svc_config(const struct sandbox_svc *svc);

/* ------------------------------------------------------------- accounts */

/* Bearer token -> account id. SBX_E_AUTHENTICATION for missing, malformed,
 * unknown or revoked keys. One indexed lookup (store_key_find). */
int sandbox_authenticate(struct sandbox_svc *svc, const char *token,
			 char account_id[SANDBOX_ID_MAX], struct sbx_error *err);

/* API key scopes (docs/api.md "Scopes"), a set of bits: "sandboxes"
 * (one-shot executions), "keys" (POST/GET /v1/api_keys, DELETE
 * /v1/api_keys/{id}). Names only at the edges: the JSON (api/), the admin
 * command line and the stored row (keys.c), a list space-separated in
 * canonical order. Keys made by the admin without --scope, and by
 * create-account, get SANDBOX_SCOPES_DEFAULT. */
enum sandbox_scope {
	SANDBOX_SCOPE_SANDBOXES = 1u << 0,
	SANDBOX_SCOPE_KEYS = 1u << 1,
};
#define SANDBOX_SCOPES_ALL     (SANDBOX_SCOPE_SANDBOXES | SANDBOX_SCOPE_KEYS)
#define SANDBOX_SCOPES_DEFAULT SANDBOX_SCOPES_ALL
#define SANDBOX_SCOPES_MAX     128 /* a formatted list, with its NUL */

/* A scope's name ("" for none or several). */
const char *sandbox_scope_name(enum sandbox_scope scope);
/* A space/comma separated list (NULL = none) into a set.
 * SBX_E_INVALID_REQUEST (param "scopes") naming an unknown scope. */
int sandbox_scopes_parse(const char *s, unsigned *out, struct sbx_error *err);
/* A set as its canonical list (known scopes, fixed order). */
void sandbox_scopes_format(unsigned scopes, char out[SANDBOX_SCOPES_MAX]);
/* The first scope (canonical order) of `scopes` that `limit` lacks, 0 when
 * `scopes` is within `limit`. */
unsigned sandbox_scopes_missing(unsigned scopes, unsigned limit);

struct sandbox_key {
	char id[SANDBOX_ID_MAX];
	char account_id[SANDBOX_ID_MAX];
	char prefix[24];
	int64_t created_at_ms;
	int64_t revoked_at_ms; /* 0 = valid */
	unsigned scopes;       /* enum sandbox_scope bits */
};

/* A new API key "aas_sk_" + 64 hex (32 random bytes); the secret is shown
 * only here. secret must hold >= 80 bytes. `scopes` NULL = the creator's
 * scopes, or SANDBOX_SCOPES_DEFAULT for the admin. `creator_scopes` are
 * those of the key that asks (NULL = the admin, no bound): a new key's
 * scopes are at most its creator's, else SBX_E_PERMISSION. */
int sandbox_key_create(struct sandbox_svc *svc, const char *account_id, const unsigned *scopes,
		       const unsigned *creator_scopes, struct sandbox_key *key,
		       char secret[static 80], struct sbx_error *err);
/* A page of the account's keys (revoked ones too), newest first: at most
 * `limit` (1..100) after the key `starting_after` (NULL = from the newest;
 * a key not of this account is SBX_E_NOT_FOUND, param "starting_after").
 * *out malloc'd; *has_more when older keys follow. A new key beyond
 * max_api_keys_per_account valid ones is SBX_E_CONCURRENCY_LIMIT
 * (sandbox_key_create). */
int sandbox_key_list(struct sandbox_svc *svc, const char *account_id, int limit,
		     const char *starting_after, struct sandbox_key **out, size_t *n,
		     bool *has_more, struct sbx_error *err);
/* account_id NULL = admin (any account). caller_scopes: those of the key
 * that asks (NULL = the admin): a key may revoke only keys of its account
 * whose scopes are within its own (SBX_E_PERMISSION otherwise), so a
 * lesser key cannot lock out a stronger one. SBX_E_NOT_FOUND. */
int sandbox_key_revoke(struct sandbox_svc *svc, const char *account_id, const char *key_id,
		       const unsigned *caller_scopes, struct sbx_error *err);

struct sandbox_account {
	char id[SANDBOX_ID_MAX];
	char name[128];
	int64_t created_at_ms;
	int64_t balance_micro;
	int64_t available_micro;
};
/* New account with credit and a first key. */
int sandbox_account_create(struct sandbox_svc *svc, const char *name, int64_t credit_micro,
			   struct sandbox_account *acct, struct sandbox_key *key,
			   char secret[static 80], struct sbx_error *err);
int sandbox_account_add_credit(struct sandbox_svc *svc, const char *account_id,
			       int64_t amount_micro, struct sandbox_account *acct,
			       struct sbx_error *err);
int sandbox_account_list(struct sandbox_svc *svc, struct sandbox_account **out, size_t *n,
			 struct sbx_error *err);

/* ---------------------------------------------------------------- labels
 *
 * `metadata` (docs/api.md "Metadata"): string pairs on a sandbox or an
 * execution, Stripe's rules: at most SANDBOX_METADATA_KEYS_MAX keys of
 * 1..SANDBOX_METADATA_KEY_MAX bytes of [A-Za-z0-9_.-], values of at most
 * SANDBOX_METADATA_VALUE_MAX bytes of valid UTF-8 without control
 * characters, at most SANDBOX_METADATA_BYTES_MAX bytes of keys and values
 * in all. An update sets the keys it names; a value "" or null removes
 * its key (metadata.c). */
#define SANDBOX_METADATA_KEYS_MAX  16
#define SANDBOX_METADATA_KEY_MAX   40
#define SANDBOX_METADATA_VALUE_MAX 256
#define SANDBOX_METADATA_BYTES_MAX 1024
/* The JSON object of the largest metadata, keys sorted, with its NUL. */
#define SANDBOX_METADATA_JSON_MAX 2400

struct sandbox_label {
	char key[SANDBOX_METADATA_KEY_MAX + 1];
	char value[SANDBOX_METADATA_VALUE_MAX + 1];
	bool remove; /* null or "": remove the key (an update), none (a create) */
};
struct sandbox_metadata {
	size_t n;
	struct sandbox_label pairs[SANDBOX_METADATA_KEYS_MAX];
};

/* Check one pair and add it (value NULL = remove the key). 0, or -1 with
 * SBX_E_INVALID_REQUEST, param `param` ("metadata"), naming the rule. */
int sandbox_metadata_add(struct sandbox_metadata *m, const char *param, const char *key,
			 size_t key_len, const char *value, size_t value_len,
			 struct sbx_error *err);
/* The canonical JSON object of m, keys sorted, compact: with patch, a
 * removal is `null`; without, removals are left out. 0, or -1 when it
 * does not fit in cap. */
int sandbox_metadata_json(const struct sandbox_metadata *m, bool patch, char *out, size_t cap);
/* The value of `key` in a stored metadata object: true and copied (cut to
 * cap), or false when it has no such key. */
bool sandbox_metadata_lookup(const char *json, const char *key, char *value, size_t cap);

/* ------------------------------------------------------------ sandboxes */

/* What a sandbox's expiry does to it (docs/api.md "Sandboxes"). */
enum sandbox_timeout_action {
	SANDBOX_ON_TIMEOUT_EXPIRE = 0, /* it ends, expired (the default) */
	SANDBOX_ON_TIMEOUT_PAUSE,      /* it is paused (docs/lifecycle.md) */
};

/* The API's sandbox object (API.md). Times are epoch ms, 0 = null. */
struct sandbox_view {
	char id[SANDBOX_ID_MAX];
	char status[16]; /* running | paused | destroyed | expired | failed */
	char size[16];
	int64_t created_at_ms;
	int64_t expires_at_ms;
	int64_t ended_at_ms;
	int64_t cost_micro;   /* so far, or final */
	char startup_path[8]; /* "warm" (pooled guest) | "cold" (booted) | "" unknown */
	int64_t startup_ms;   /* request received -> guest ready and recorded */
	char metadata[SANDBOX_METADATA_JSON_MAX]; /* JSON object, keys sorted */
	int64_t paused_at_ms;			  /* while paused: when; else 0 */
	int64_t paused_bytes;		     /* while paused: its save file + overlay on the host */
	int64_t paused_ms;		     /* the pauses resumed so far, added up */
	char network[NET_POLICY_JSON_MAX];   /* its egress policy, canonical JSON */
	int64_t net_bytes_in, net_bytes_out; /* relayed so far (docs/network.md) */
	char snapshot[SANDBOX_ID_MAX];	     /* the snapshot its disk started from, "" */
	enum sandbox_timeout_action timeout_action;
};

struct sandbox_create_req {
	const char *size;    /* NULL = default */
	int timeout_minutes; /* 0 = default; else 1..max_timeout_minutes */
	/* Idempotency-Key (API.md): NULL = none, else 1..255 printable ASCII
	 * bytes (0x20..0x7e). Only sandbox_create_idempotent() looks at it. */
	const char *idempotency_key;
	const struct sandbox_metadata *metadata; /* NULL = none */
	/* Its egress policy as canonical JSON (net_policy_json of a policy
	 * checked against the config's limits); NULL = the service's default
	 * (sandbox_network_default). */
	const char *network;
	/* A template (docs/api.md "Snapshots"): the id of one of the
	 * account's snapshots, whose disk the sandbox starts from; NULL =
	 * the base image. */
	const char *snapshot;
	enum sandbox_timeout_action timeout_action;
};

/* Egress (docs/network.md). The policy of a create that names none: the
 * config's network.default_policy (none when unset) with, when
 * network.default_policy_apt_sources, the hostnames of apt_dir's *.sources
 * and *.list and of apt_list added to its allow list (egress none becomes
 * allow_list). Canonical JSON into out; SBX_E_INVALID_REQUEST (param
 * "network.default_policy") when it does not fit the limits. */
int sandbox_network_default_build(const struct sandbox_config *cfg, const char *apt_dir,
				  const char *apt_list, char out[NET_POLICY_JSON_MAX],
				  struct sbx_error *err);
/* The service's (built at sandbox_svc_new from /etc/apt). Borrowed. */
const char *sandbox_network_default(const struct sandbox_svc *svc);
/* The limits a tenant's policy is checked against (config network.*). */
void sandbox_network_limits(const struct sandbox_config *cfg, struct net_limits *out);
/* Replace a running or paused sandbox's policy (canonical JSON, checked
 * by the caller against sandbox_network_limits); new connections obey it
 * at once, open ones keep going (docs/network.md). SBX_E_NOT_FOUND,
 * SBX_E_SANDBOX_NOT_RUNNING (ended). */
int sandbox_network_set(struct sandbox_svc *svc, const char *account_id, const char *id,
			const char *network, struct sandbox_view *out, struct sbx_error *err);

/* Reserve, boot, wait for the guest's HELLO, record. Returns when the
 * sandbox accepts commands. Errors in API.md's order: SBX_E_INVALID_REQUEST
 * (param size/timeout_minutes), SBX_E_CONCURRENCY_LIMIT (+retry_after),
 * SBX_E_INSUFFICIENT_CREDIT, SBX_E_SERVICE_UNAVAILABLE (+retry_after),
 * SBX_E_SANDBOX_ERROR. A failed create leaves no guest, hold or charge. */
int sandbox_create(struct sandbox_svc *svc, const char *account_id,
		   const struct sandbox_create_req *req, struct sandbox_view *out,
		   struct sbx_error *err);

/* How long a completed Idempotency-Key is remembered (API.md: >= 24 h). */
#define SANDBOX_IDEMPOTENCY_KEEP_MS (25 * 3600 * 1000LL)

/* The outcome of sandbox_create_idempotent(). */
struct sandbox_create_result {
	/* true: an earlier request with the same key and the same parameters
	 * was answered; nothing was created now. Send `status` and the exact
	 * bytes of `body` with 'Idempotent-Replayed: true'. */
	bool replayed;
	int status;
	char *body; /* malloc'd, NUL-terminated; free with sandbox_create_result_release */
	size_t body_len;
	/* replayed with body NULL: the first create activated `view` but the
	 * daemon died before its answer was remembered: render `view` as the
	 * 201 body, hand it to sandbox_idempotency_complete(), and send it
	 * with 'Idempotent-Replayed: true'; later replays get those bytes.
	 * false: a new sandbox (view); when req->idempotency_key was set the
	 * caller must now render the response and hand it to
	 * sandbox_idempotency_complete() (or sandbox_idempotency_release()
	 * if it cannot answer). */
	struct sandbox_view view;
};
void sandbox_create_result_release(struct sandbox_create_result *res);

/* sandbox_create() with an optional Idempotency-Key, checked in API.md's
 * order: parameters (400, also a bad key: param "Idempotency-Key"), then
 * the key: the same key of this account with other parameters (compared
 * after defaults) is SBX_E_IDEMPOTENCY_MISMATCH; one whose first request
 * is still creating is waited for (up to boot_timeout_ms + 5 s) and
 * replayed, else SBX_E_IDEMPOTENCY_CONFLICT with retry_after_s; a
 * completed one is replayed. Then cap, credit, capacity as sandbox_create.
 * On any error the key is forgotten (not remembered), so the request can
 * be retried with it. Without a key this is sandbox_create(). */
int sandbox_create_idempotent(struct sandbox_svc *svc, const char *account_id,
			      const struct sandbox_create_req *req,
			      struct sandbox_create_result *res, struct sbx_error *err);

/* Remember the response api/ sent for a create that
 * sandbox_create_idempotent() did not replay: status and the exact body
 * bytes (copied; <= 64 KiB). A status >= 400 forgets the key instead. */
int sandbox_idempotency_complete(struct sandbox_svc *svc, const char *account_id, const char *key,
				 const char *sandbox_id, int status, const char *body, size_t len,
				 struct sbx_error *err);
/* Forget a pending key (its request could not be answered). */
void sandbox_idempotency_release(struct sandbox_svc *svc, const char *account_id, const char *key);

int sandbox_get(struct sandbox_svc *svc, const char *account_id, const char *id,
		struct sandbox_view *out, struct sbx_error *err);

/* status NULL = all; limit 1..100; starting_after NULL = from the newest.
 * *out malloc'd. */
int sandbox_list(struct sandbox_svc *svc, const char *account_id, const char *status, int limit,
		 const char *starting_after, struct sandbox_view **out, size_t *n, bool *has_more,
		 struct sbx_error *err);

/* sandbox_list() of the sandboxes carrying every pair of `filter` (NULL or
 * no pairs = all; removals are not allowed in a filter). */
int sandbox_list_labeled(struct sandbox_svc *svc, const char *account_id, const char *status,
			 const struct sandbox_metadata *filter, int limit,
			 const char *starting_after, struct sandbox_view **out, size_t *n,
			 bool *has_more, struct sbx_error *err);

/* Update a sandbox's metadata (any status): clear drops every key first,
 * then patch's pairs are set or removed. SBX_E_NOT_FOUND for another
 * account's sandbox; SBX_E_INVALID_REQUEST (param "metadata") when the
 * result would pass the bounds. *out is the sandbox after. */
int sandbox_metadata_update(struct sandbox_svc *svc, const char *account_id, const char *id,
			    bool clear, const struct sandbox_metadata *patch,
			    struct sandbox_view *out, struct sbx_error *err);

/* Destroy and settle; repeats return the same final object. */
int sandbox_destroy(struct sandbox_svc *svc, const char *account_id, const char *id,
		    struct sandbox_view *out, struct sbx_error *err);

/* expires_at = max(expires_at, now + minutes), lifetime capped; hold for
 * the added time. */
/* Pause a running sandbox (docs/lifecycle.md "Pause and resume"): its
 * channel is closed (in-flight commands fail 409), its memory saved beside
 * its overlay, runtime billing stops and storage billing starts, in one
 * transaction with the state change. A paused one answers as it is (200).
 * SBX_E_SANDBOX_NOT_RUNNING when it ended, SBX_E_SANDBOX_PAUSED while
 * another pause or resume of it runs, SBX_E_INSUFFICIENT_CREDIT when the
 * storage of its paused retention cannot be held (it keeps running),
 * SBX_E_INSUFFICIENT_STORAGE / SBX_E_SERVICE_UNAVAILABLE when the save
 * failed (it keeps running). Blocking: seconds. No lock held. */
int sandbox_pause(struct sandbox_svc *svc, const char *account_id, const char *id,
		  struct sandbox_view *out, struct sbx_error *err);
/* Resume a paused sandbox: its domain restored, its channel reattached
 * (the WELCOME sets the guest's clock), runtime billing restarts, the
 * paused time added to expires_at. timeout_minutes (0 = none, else
 * 1..max_timeout_minutes): it then runs at least that long, held as an
 * extend in the resume's transaction; with none, a sandbox paused at its
 * expiry gets the default timeout. A running one answers as it is (200).
 * Blocking: seconds. No lock held. */
int sandbox_resume(struct sandbox_svc *svc, const char *account_id, const char *id,
		   int timeout_minutes, struct sandbox_view *out, struct sbx_error *err);

int sandbox_extend(struct sandbox_svc *svc, const char *account_id, const char *id,
		   int timeout_minutes, struct sandbox_view *out, struct sbx_error *err);

/* A running sandbox's metrics (docs/api.md "Metrics", guest_metrics.c): the
 * samples its guest's ring holds, oldest first, one every interval_ms.
 * cpu_cores and disk_used_mib are host-observed; memory_used_mib is the
 * guest's own word (-1: it did not report), only ever shown. */
struct sandbox_guest_sample {
	int64_t at_ms;
	double cpu_cores;
	int64_t memory_used_mib; /* -1: none */
	int64_t disk_used_mib;	 /* -1: no disk */
};
struct sandbox_guest_metrics {
	uint32_t interval_ms;		      /* metrics_interval_ms; 0: sampling is off */
	size_t history;			      /* samples kept at most */
	struct sandbox_guest_sample *samples; /* malloc'd, NULL when none */
	size_t n;
};
/* 0, or -1 with 404 (no such sandbox for this account) or 410 (not
 * running). Release *out with sandbox_guest_metrics_release. */
int sandbox_guest_metrics_get(struct sandbox_svc *svc, const char *account_id, const char *id,
			      struct sandbox_guest_metrics *out, struct sbx_error *err);
void sandbox_guest_metrics_release(struct sandbox_guest_metrics *m);

/* --------------------------------------------------------- output budget */

/* The output budget (docs/api.md "Output budget", budget.c): bytes of
 * replies waiting to be sent, held per account and by the host, each
 * under its cap (output_budget_account_mib, output_budget_host_mib). Every
 * reply buffer draws on it the same way: a struct sandbox_output_hold
 * names its account, is charged when the reply is started and as it
 * grows, and is given back once the reply was sent (a slow reader keeps
 * holding it).
 *
 * What a reply costs: a started exec holds SANDBOX_EXEC_HOLD_START, then
 * a buffered one SANDBOX_REPLY_COST_UTF8 bytes per output byte
 * (SANDBOX_REPLY_COST_BASE64 with base64 encoding), what the reply can
 * take at its worst (the raw bytes, the JSON tree's strings and the JSON
 * text, where a control byte is escaped as \u00XX, 6 bytes); a streamed
 * exec the encoded events waiting for the client; a process call its
 * chunks JSON-encoded; a download SANDBOX_FILE_DOWNLOAD_COST, a listing
 * SANDBOX_FILE_ENTRY_COST per entry asked for. Past the account's budget
 * a new reply gets 429 rate_limited, past the host's 503, both with
 * Retry-After 1; a running buffered exec keeps no more output
 * (truncated), a streamed one is paused, and failed when its guest does
 * not pause.
 *
 * Its lock is its own and a leaf: it may be taken with any other lock
 * held (svc->lock, api/'s), and nothing is taken or called under it. */
#define SANDBOX_EXEC_HOLD_START	  (64u * 1024)
#define SANDBOX_REPLY_COST_UTF8	  10
#define SANDBOX_REPLY_COST_BASE64 4

struct sandbox_output_budget;
struct output_account; /* budget.c: one account's bytes held */

/* One reply's share. Zeroed, it holds nothing and cannot be charged;
 * sandbox_output_hold_init() names its budget and account. Its fields
 * are the budget's (under its lock): a hold may be charged on one thread
 * and shrunk on another. */
struct sandbox_output_hold {
	struct sandbox_output_budget *budget;
	char account_id[SANDBOX_ID_MAX];
	uint64_t bytes;			/* 0 = holds nothing */
	uint64_t floor;			/* its first charge: a shrink leaves it */
	struct output_account *account; /* its account's entry while bytes > 0 */
};

/* What a refused charge answers, in the caller's words: `account` for 429
 * rate_limited (a "%llu" in it is replaced by the account's budget in
 * MiB), `host` for 503 service_unavailable; both with Retry-After 1. */
struct sandbox_output_words {
	const char *account;
	const char *host;
};

enum sandbox_output_how {
	SANDBOX_OUTPUT_WITHIN, /* within both budgets, or refused */
	SANDBOX_OUTPUT_FORCE,  /* past them: for bytes already buffered */
};

/* A budget of account_max bytes per account and host_max for the host,
 * or NULL (out of memory). */
struct sandbox_output_budget *sandbox_output_budget_new(uint64_t account_max, uint64_t host_max);
void sandbox_output_budget_free(struct sandbox_output_budget *b);

/* Name a hold's budget and account (it holds nothing yet). */
void sandbox_output_hold_init(struct sandbox_output_hold *hold, struct sandbox_output_budget *b,
			      const char *account_id);
/* Reserve or grow: charge `bytes` more to hold (its first charge is its
 * floor). 0, or -1 when WITHIN would pass a budget, the hold names none,
 * or out of memory; then err, when given, is set: with words, 429 or 503
 * as above; 500 out of memory. 0 bytes: 0. */
int sandbox_output_charge(struct sandbox_output_hold *hold, uint64_t bytes,
			  enum sandbox_output_how how, const struct sandbox_output_words *words,
			  struct sbx_error *err);
/* Give `bytes` of a hold back (never below its floor: a release gives
 * that back). */
void sandbox_output_shrink(struct sandbox_output_hold *hold, uint64_t bytes);
/* Give all of a hold back; it holds nothing after (and may be charged
 * again). NULL or empty: nothing. */
void sandbox_output_release(struct sandbox_output_hold *hold);
/* Bytes held now by the host and, when asked (account_id and account
 * not NULL), by one account; returns how many accounts hold any. */
size_t sandbox_output_held(struct sandbox_output_budget *b, const char *account_id, uint64_t *host,
			   uint64_t *account);

/* ------------------------------------------------------------------ exec */

/* Output of a streamed exec as it arrives (agentless_output_fn's contract:
 * the channel's thread, no lock held, in order, before done; must not
 * block). Return true to pause the command's output until
 * sandbox_exec_resume(). */
typedef bool (*sandbox_exec_output_fn)(void *opaque, uint32_t exec_id, bool is_stderr,
				       const void *data, size_t len);

struct sandbox_exec_req {
	const char *command; /* NUL-terminated; api/ checked non-empty and cap */
	size_t command_len;
	bool has_timeout;
	uint32_t timeout_ms;	/* when has_timeout: 1..time left in the session */
	const char *cwd;	/* NULL = /home/sandbox */
	const char *const *env; /* "KEY=VALUE", keys already validated */
	size_t n_env;
	bool base64; /* the reply encodes the streams in base64 (cheaper to hold) */
	/* Out: the exec's share of the output budget, filled when it starts;
	 * the caller gives it back with sandbox_output_release() once the
	 * reply was sent (a slow reader keeps holding it). NULL: given back
	 * when the done callback returns. */
	struct sandbox_output_hold *hold;
	/* Optional: stream the output to this callback (opaque = done's);
	 * the result's buffers are then empty. Caps, timeout and the output
	 * budget are those of a buffered exec. */
	sandbox_exec_output_fn on_output;
	/* Sign a receipt of the result (buffered execs only) before done is
	 * called; command, cwd and env must then stay valid until done was
	 * called. A receipt that cannot be signed fails the exec with 500. */
	bool receipt;
	/* Optional: a terminal (protocol v5) of rows x cols (1..1000 each;
	 * on_output required): the exec user's login shell on a
	 * pseudo-terminal, its output streamed without a cap, its timeout the
	 * time left in the session (has_timeout ignored); its input and size
	 * by sandbox_pty_*. on_pty_ack (opaque = done's) runs when the input
	 * window moved; exec_id receives the exec's id before it starts. */
	uint32_t pty_rows, pty_cols;
	void (*on_pty_ack)(void *opaque);
	uint32_t *exec_id;
};

/* The result of an exec is agentless/'s own value (struct
 * agentless_exec_result, agentless.h), moved up unchanged from the channel
 * to api/, which renders it once (stdout/stderr UTF-8 sanitised or
 * base64); sandbox/ only clamps host_ms to the timeout the exec ran with
 * (the time the exec could run at most). Release it with
 * agentless_exec_result_release(). */

/* A signed receipt for one exec call on a sandbox (operation
 * "sandbox.exec"; docs/receipts.md), signed in sandbox/ from the result's
 * own bytes before the completion is delivered (sandbox_exec_req.receipt).
 * host_ms, the host-observed run time (never the guest's own figure),
 * clamped to the exec's timeout, is signed as latency_ms and dates
 * started_at. Input {"command", "cwd", "env"} with the effective cwd and
 * env as an object of strings (env entries "KEY=VALUE"); output
 * {"exit_code", "stderr", "stdout"} with the streams exactly as the reply
 * returns them (sandbox_exec_stream_text). The receipt is stored (GET
 * /v1/receipts/{id}). */
struct sandbox_exec_receipt {
	char id[SANDBOX_ID_MAX];
	char hash[68];
	char signature[132];
	char signer[68];
	char salt[68];
};

/* One stream of an exec result as the reply carries it: base64, or UTF-8
 * sanitised (an incomplete sequence at the end cut when `cut`, the result
 * was truncated). A new string (*out_len bytes), or NULL (out of memory). */
char *sandbox_exec_stream_text(const char *buf, size_t len, bool base64, bool cut, size_t *out_len);

/* Called exactly once per started exec, from any thread (the channel's,
 * the timer's, an ender's): it should only keep what it is given and wake
 * its request. On success err is NULL and the callback owns *res (move it
 * out); `receipt` is the signed receipt when the exec asked for one, else
 * NULL. On failure res and receipt are NULL. */
typedef void (*sandbox_exec_done_fn)(void *opaque, struct agentless_exec_result *res,
				     const struct sandbox_exec_receipt *receipt,
				     const struct sbx_error *err);

/* Start an exec. 0 (done will be called, maybe before this returns), or -1
 * with err (404, 410, 400 timeout_ms, 429 per-sandbox cap, 500) and done is
 * never called. */
int sandbox_exec_start(struct sandbox_svc *svc, const char *account_id, const char *id,
		       const struct sandbox_exec_req *req, sandbox_exec_done_fn done, void *opaque,
		       struct sbx_error *err);

/* Terminals (sandbox_exec_req.pty_rows): keystrokes within the input
 * window (bytes taken now, 0: wait for on_pty_ack, -1: it ended), the
 * window size (0 or -1), and the hangup that ends it (the shell gets
 * SIGHUP, its cgroup SIGKILL a second later; done follows). No lock held;
 * never block. */
long sandbox_pty_write(struct sandbox_svc *svc, const char *sandbox_id, uint32_t exec_id,
		       const void *data, size_t len);
int sandbox_pty_resize(struct sandbox_svc *svc, const char *sandbox_id, uint32_t exec_id,
		       uint32_t rows, uint32_t cols);
void sandbox_pty_hangup(struct sandbox_svc *svc, const char *sandbox_id, uint32_t exec_id);

/* ----------------------------------------------------------------- files */

/* A file transfer with a running sandbox (docs/api.md "Files"; the
 * protocol side is agentless.h "file transfer"). The handle pins nothing:
 * each call below pins the guest only while it runs, so deleting or
 * expiring the sandbox is never held up by a transfer (which then fails
 * with 410, like an exec). Memory per transfer stays within one credit
 * window (SANDBOX_FILE_WINDOW) of data whatever the file's size. */
#define SANDBOX_FILE_WINDOW   (2u * 1024 * 1024)
#define SANDBOX_FILE_LIST_MAX 10000
/* A LIST answers one page of at most SANDBOX_FILE_PAGE_MAX entries (the
 * request's list_limit), sorted by name. */
#define SANDBOX_FILE_PAGE_MAX 1000
/* The output budget ("Output budget" of docs/api.md) a transfer holds
 * until its reply was sent: a download its ring and the reply's buffer, a
 * LIST its entries at their dearest as JSON (a 255-byte name of control
 * bytes escaped as \u00XX, with the tree's copies). */
#define SANDBOX_FILE_DOWNLOAD_COST (SANDBOX_FILE_WINDOW + 64u * 1024)
#define SANDBOX_FILE_ENTRY_COST	   (255u * SANDBOX_REPLY_COST_UTF8 + 512)
/* Bytes a transfer must move in each file_stall_timeout_ms, either way:
 * fewer (a guest or a client that trickles) ends it. */
#define SANDBOX_FILE_MIN_PROGRESS (64u * 1024)

enum sandbox_file_op { /* the values of wire.h's enum wire_file_op */
		       SANDBOX_FILE_PUT = 1,
		       SANDBOX_FILE_GET = 2,
		       SANDBOX_FILE_LIST = 3,
		       SANDBOX_FILE_DELETE = 4,
		       SANDBOX_FILE_TAR_PUT = 5,
		       SANDBOX_FILE_TAR_GET = 6,
};

enum sandbox_file_type { /* wire.h's enum wire_file_type */
			 SANDBOX_FTYPE_FILE = 1,
			 SANDBOX_FTYPE_DIR = 2,
			 SANDBOX_FTYPE_SYMLINK = 3,
			 SANDBOX_FTYPE_OTHER = 4,
};

struct sandbox_file_req {
	enum sandbox_file_op op;
	const char *path;	/* absolute, NUL-terminated, no NUL inside */
	uint32_t mode;		/* PUT: permission bits */
	uint64_t offset;	/* GET */
	uint64_t length;	/* GET; 0 = to the end */
	bool recursive;		/* DELETE */
	bool gzip;		/* TAR_*: the tar stream is gzip */
	uint64_t max_bytes;	/* GET, TAR_GET: larger fails with 413; 0 = none */
	uint32_t list_limit;	/* LIST: 1..SANDBOX_FILE_PAGE_MAX entries */
	const char *list_after; /* LIST: names after this one; NULL = from the first */
};

enum sandbox_file_state { SANDBOX_FILE_OPEN, SANDBOX_FILE_DONE, SANDBOX_FILE_FAILED };

struct sandbox_file_status {
	enum sandbox_file_state state;
	struct sbx_error err; /* FAILED */
	bool have_meta;	      /* downloads: size (UINT64_MAX = unknown), total, mode */
	uint64_t size, total, mtime_s;
	uint32_t mode;
	uint64_t done_size; /* DONE: bytes written or sent */
	uint32_t done_mode; /* DONE (PUT) */
	bool truncated;	    /* DONE (LIST): cut at SANDBOX_FILE_LIST_MAX */
	size_t buffered;    /* downloads: bytes sandbox_file_read gives now */
};

struct sandbox_file;
/* Called with no lock held (any thread) when the transfer may have moved
 * on; must not call sandbox_file_release. */
typedef void (*sandbox_file_wake_fn)(void *opaque);

/* Start a transfer with sandbox `id` of this account: 404 (not this
 * account's), 410 (not running), 429, 500 (a guest without file transfer).
 * A download or a LIST holds its cost of the output budget (above) until
 * sandbox_file_release: past it 429 (the account's) or 503 (the host's).
 * Files are owned by exec_user. 0 and *out, or -1. */
int sandbox_file_start(struct sandbox_svc *svc, const char *account_id, const char *id,
		       const struct sandbox_file_req *req, sandbox_file_wake_fn wake, void *opaque,
		       struct sandbox_file **out, struct sbx_error *err);
/* Upload: bytes taken now (0: wait for a wake), or -1 with err. */
long sandbox_file_write(struct sandbox_file *f, const void *data, size_t len,
			struct sbx_error *err);
/* Upload: the last byte was written. 0 or -1 with err. */
int sandbox_file_end(struct sandbox_file *f, struct sbx_error *err);
/* Download: up to max bytes ready now (0: none yet; see the status). */
size_t sandbox_file_read(struct sandbox_file *f, void *buf, size_t max);
/* Where it stands; a failure because the sandbox ended reads as 410. */
void sandbox_file_status(struct sandbox_file *f, struct sandbox_file_status *st);
/* LIST, once done: the entries as agentless/ decoded them (owned by f,
 * valid until release; type is enum sandbox_file_type). */
const struct agentless_file_entry *sandbox_file_entries(struct sandbox_file *f, size_t *n);
/* Give the transfer back (an unfinished one is aborted in the guest). */
void sandbox_file_release(struct sandbox_file *f);
/* ----------------------------------------------------------------- ports */

/* A TCP connection to a port on a running sandbox's loopback (docs/api.md
 * "Ports"; the protocol side is agentless.h "TCP streams"). The handle
 * pins nothing between calls, as a file transfer's. Each direction holds
 * at most SANDBOX_PORT_WINDOW bytes in flight; a guest holds at most
 * SANDBOX_PORT_GUEST_MAX connections, the config's
 * max_port_conns_per_sandbox fewer. */
#define SANDBOX_PORT_WINDOW    (256u * 1024)
#define SANDBOX_PORT_GUEST_MAX 64

enum sandbox_port_state {
	SANDBOX_PORT_OPENING,
	SANDBOX_PORT_OPEN,
	SANDBOX_PORT_CLOSED, /* both halves closed */
	SANDBOX_PORT_FAILED, /* err: 502 port_unreachable, 504 port_timeout, 429, 409, 410, 500 */
};

struct sandbox_port_status {
	enum sandbox_port_state state;
	struct sbx_error err;
	size_t buffered;   /* bytes sandbox_port_read gives now */
	bool eof;	   /* the guest's side closed (after the buffered bytes) */
	uint64_t received; /* bytes from the guest so far */
	uint64_t writable; /* bytes sandbox_port_write takes now */
};

struct sandbox_port;
/* Called with no lock held (any thread) when the connection may have
 * moved on; must not call sandbox_port_release. */
typedef void (*sandbox_port_wake_fn)(void *opaque);

/* Connect to `port` (1..65535) of sandbox `id` of this account: 404 (not
 * this account's), 410 (not running), 409 (paused), 429 (the sandbox's
 * limit), 500 (a guest older than protocol v6). The connect's outcome
 * comes later in the status (502 when nothing listens). 0 and *out, or
 * -1. */
int sandbox_port_open(struct sandbox_svc *svc, const char *account_id, const char *id,
		      uint32_t port, sandbox_port_wake_fn wake, void *opaque,
		      struct sandbox_port **out, struct sbx_error *err);
/* Bytes taken now (0: wait for a wake), or -1 (over: see the status). */
long sandbox_port_write(struct sandbox_port *p, const void *data, size_t len);
/* The request is all sent: the answer is due within
 * port_response_timeout_ms (504 port_timeout past it). */
void sandbox_port_await(struct sandbox_port *p);
/* The host's half is done (FIN). 0 or -1. */
int sandbox_port_shutdown(struct sandbox_port *p);
/* Up to max bytes ready now (0: none yet; see the status). */
size_t sandbox_port_read(struct sandbox_port *p, void *buf, size_t max);
void sandbox_port_status(struct sandbox_port *p, struct sandbox_port_status *st);
/* Give it back (an open connection is reset in the guest). */
void sandbox_port_release(struct sandbox_port *p);

/* -------------------------------------------------------------- previews */

/* A preview URL of a sandbox's port (docs/api.md "Previews"): a token of
 * 128 random bits, 32 lowercase hex digits, shown once at its create; the
 * store keeps its SHA-256 only. */
#define SANDBOX_PREVIEW_TOKEN_LEN 32

/* A snapshot of a sandbox's disk (docs/api.md "Snapshots"). */
#define SANDBOX_SNAPSHOT_NAME_MAX 64
struct sandbox_snapshot {
	char id[SANDBOX_ID_MAX]; /* "snap_" + 24 hex */
	char name[SANDBOX_SNAPSHOT_NAME_MAX + 1];
	char sandbox_id[SANDBOX_ID_MAX]; /* the sandbox it was taken of */
	int64_t disk_gib;		 /* the disk's virtual size */
	int64_t bytes;			 /* host-observed size of its file */
	int64_t created_at_ms;
	int64_t cost_micro; /* its storage so far: charged + accrued to now */
};
/* Snapshot the disk of this account's running or paused sandbox `id`
 * (name: NULL or "", or 1..64 printable ASCII bytes; 400 naming "name"
 * else). A running guest syncs its filesystems first and is suspended
 * for the copy (at most snapshot_timeout_ms). 404 (not this account's),
 * 410 (ended), 409 (being paused or resumed), 429 (max_snapshots,
 * max_snapshot_bytes), 400 (a remote host, no disk), 503. */
int sandbox_snapshot_create(struct sandbox_svc *svc, const char *account_id, const char *id,
			    const char *name, struct sandbox_snapshot *out, struct sbx_error *err);
/* The account's snapshots, newest first (at most max_snapshots). *out
 * malloc'd. */
int sandbox_snapshot_list(struct sandbox_svc *svc, const char *account_id,
			  struct sandbox_snapshot **out, size_t *n, struct sbx_error *err);
/* One of the account's snapshots: 404 otherwise. */
int sandbox_snapshot_get(struct sandbox_svc *svc, const char *account_id, const char *snap_id,
			 struct sandbox_snapshot *out, struct sbx_error *err);
/* Delete one: its storage is charged up to now and its file removed.
 * 404 (not the account's), 409 snapshot_in_use (live sandboxes' disks are
 * backed by it). *out: the snapshot as it was, its final cost. */
int sandbox_snapshot_delete(struct sandbox_svc *svc, const char *account_id, const char *snap_id,
			    struct sandbox_snapshot *out, struct sbx_error *err);

struct sandbox_preview {
	char id[SANDBOX_ID_MAX]; /* "pv_" + 24 hex */
	char account_id[SANDBOX_ID_MAX];
	char sandbox_id[SANDBOX_ID_MAX];
	uint32_t port;
	int64_t created_at_ms, expires_at_ms, revoked_at_ms;
};

/* A preview of `port` of this account's running sandbox, live for
 * expires_in_s seconds (1..preview_max_ttl_seconds; 400 naming
 * "expires_in_seconds" else): 404 (not this account's), 410 (not running),
 * 429 (max_previews_per_sandbox live ones). token: its secret, with NUL. */
int sandbox_preview_create(struct sandbox_svc *svc, const char *account_id, const char *id,
			   uint32_t port, int expires_in_s, struct sandbox_preview *out,
			   char token[static SANDBOX_PREVIEW_TOKEN_LEN + 1], struct sbx_error *err);
/* The live previews of a port (0: every port) of this account's sandbox,
 * newest first (404 as create). *out malloc'd. */
int sandbox_preview_list(struct sandbox_svc *svc, const char *account_id, const char *id,
			 uint32_t port, struct sandbox_preview **out, size_t *n,
			 struct sbx_error *err);
/* Revoke one of this account's sandbox's previews: 404 when it is not. */
int sandbox_preview_revoke(struct sandbox_svc *svc, const char *account_id, const char *id,
			   const char *preview_id, struct sandbox_preview *out,
			   struct sbx_error *err);
/* The live preview a browser's host name names (its port and token):
 * 404 not_found for an unknown, revoked or expired token, or a token of
 * another port. The token is never logged. */
int sandbox_preview_resolve(struct sandbox_svc *svc, uint32_t port, const char *token,
			    struct sandbox_preview *out, struct sbx_error *err);

/* Let a streamed exec that its on_output paused run again. A no-op when
 * the sandbox or the exec is gone. No lock held; never blocks. */
void sandbox_exec_resume(struct sandbox_svc *svc, const char *sandbox_id, uint32_t exec_id);

/* ---------------------------------------------------- background processes
 *
 * Commands started without waiting (docs/api.md "Processes"). They live in
 * the guest (protocol v3): its PID 1 keeps each one's last
 * SANDBOX_PROC_RING_BYTES of stdout and of stderr, and the list, so both
 * survive a daemon restart. The host keeps no state per process: every call
 * asks the guest, and checks what it answers. */
#define SANDBOX_PROC_MAX	64	      /* processes a guest keeps (running or ended) */
#define SANDBOX_PROC_RING_BYTES (1024 * 1024) /* per stream */
#define SANDBOX_PROC_CHUNK	(30 * 1024)   /* per stream, per output call */
#define SANDBOX_PROC_CMD_HEAD	256	      /* bytes of the command listed */

enum sandbox_proc_op {
	SANDBOX_PROC_START = 1,
	SANDBOX_PROC_LIST,
	SANDBOX_PROC_OUTPUT,
	SANDBOX_PROC_STDIN,
	SANDBOX_PROC_SIGNAL,
};

struct sandbox_proc_req {
	enum sandbox_proc_op op;
	uint32_t pid; /* OUTPUT, STDIN, SIGNAL */
	/* START: as an exec (command, cwd, env; no caps); timeout optional:
	 * without it the process runs until it ends or the sandbox does */
	const struct sandbox_exec_req *start;
	/* OUTPUT: the byte offsets to read from */
	uint64_t stdout_offset, stderr_offset;
	/* STDIN: bytes to write (<= 64 KiB), then close stdin when asked */
	const char *data;
	size_t data_len;
	bool close;
	/* SIGNAL: 2 (INT), 9 (KILL) or 15 (TERM) */
	int signal;
	/* The reply's share of the output budget (as an exec's, docs/api.md
	 * "Output budget"): filled when the call starts, given back by the
	 * caller with sandbox_output_release() once its reply was sent. */
	struct sandbox_output_hold *hold;
};

/* The guest's answer is agentless/'s own value (struct
 * agentless_proc_result, agentless.h: the process's info, the LIST, the
 * OUTPUT streams, bytes written), decoded and checked there and moved up
 * unchanged to api/; release it with agentless_proc_result_release(). */

/* Called exactly once per started call, from any thread, no lock held: it
 * should only keep what it is given and wake its request. On success err
 * is NULL and the callback owns *res (move it out). */
typedef void (*sandbox_proc_done_fn)(void *opaque, struct agentless_proc_result *res,
				     const struct sbx_error *err);

/* Ask the sandbox's guest. 0 (done will be called), or -1 with err: 404
 * (no such sandbox for this account, or no such process), 410, 400
 * (timeout_ms, signal), 429 (max_processes_per_sandbox running), 500 (the
 * guest answered nonsense, or speaks a protocol older than v3: "create a
 * new sandbox"). */
int sandbox_proc_call(struct sandbox_svc *svc, const char *account_id, const char *id,
		      const struct sandbox_proc_req *req, sandbox_proc_done_fn done, void *opaque,
		      struct sbx_error *err);

/* --------------------------------------------------------------- startup */

/* Startup latency of one path over the last SANDBOX_STARTUP_WINDOW creates
 * on this node (request received -> guest ready and recorded). p50/p95 by
 * nearest rank; -1 when samples is 0. */
#define SANDBOX_STARTUP_WINDOW 200
struct sandbox_startup_path {
	int64_t p50_ms;
	int64_t p95_ms;
	size_t samples;
};
struct sandbox_startup_stats {
	struct sandbox_startup_path warm;
	struct sandbox_startup_path cold;
	/* The warm pool per configured size: target and guests ready now. */
	struct {
		char size[16];
		int target;
		int ready;
	} pool[SANDBOX_MAX_SIZES];
	size_t n_pool;
	/* One-shot executions over the last SANDBOX_STARTUP_WINDOW of each
	 * path, request received -> result known: an execution guest whose
	 * interpreter waited (prestarted), a plain pooled guest (warm), a
	 * guest booted for it (cold); and the execution pool per runtime. */
	struct sandbox_startup_path exec_prestarted, exec_warm, exec_cold;
	struct {
		char runtime[8];
		int target;
		int ready;
	} exec_pool[SANDBOX_EXECUTION_RUNTIMES];
	size_t n_exec_pool;
};
/* Fill *out; never fails. svc may be NULL (all empty). */
void sandbox_startup_stats(struct sandbox_svc *svc, struct sandbox_startup_stats *out);

/* --------------------------------------------------------------- metrics */

/* What the operator's /metrics reports of the service (api/metrics.c). */
struct sandbox_metrics {
	struct {
		char size[16];
		int running; /* customers' live guests */
		int pooled;  /* ready in the warm pool */
	} sizes[SANDBOX_MAX_SIZES];
	size_t n_sizes;
	int booting;	      /* customer boots and execution guests in flight */
	int pool_booting;     /* pool boots in flight */
	uint64_t output_held; /* bytes of output budget held now */
	/* The ledger's running totals over every account (micro-USD);
	 * ledger_ok false when the store could not be read. */
	bool ledger_ok;
	int64_t credits, holds, releases, charges, accounts;
};
void sandbox_metrics_get(struct sandbox_svc *svc, struct sandbox_metrics *out);

/* ----------------------------------------------------------------- usage */

struct sandbox_usage_size {
	char size[16];
	int64_t seconds;
	int64_t cost_micro;
};
struct sandbox_usage_bucket {
	int64_t start_ms;
	int64_t seconds;
	int64_t cost_micro;
};
struct sandbox_usage_group {
	bool labeled; /* false: the sandboxes without the label */
	char value[SANDBOX_METADATA_VALUE_MAX + 1];
	int64_t seconds;
	int64_t cost_micro;
};
struct sandbox_usage {
	int64_t balance_micro;
	int64_t reserved_micro;
	int64_t available_micro;
	int64_t consumed_micro;
	struct sandbox_usage_size by_size[SANDBOX_MAX_SIZES];
	size_t n_sizes;
	int running;
	int limit;
	int64_t from_ms;
	int64_t to_ms;
	struct sandbox_usage_bucket *buckets; /* NULL unless granularity set */
	size_t n_buckets;
	/* sandbox_usage_grouped: per value of the label key, sorted by value,
	 * those without the label first (labeled false) */
	struct sandbox_usage_group *groups; /* malloc'd */
	size_t n_groups;
	/* Egress (docs/network.md): the bytes of the sandboxes that ended in
	 * the period, plus the running ones' so far. */
	int64_t net_bytes_in, net_bytes_out;
};
/* from_ms/to_ms 0 = the current UTC month; granularity NULL, "day" or
 * "hour" (SBX_E_INVALID_REQUEST otherwise, or when the range would give
 * more than 10000 buckets). */
int sandbox_usage(struct sandbox_svc *svc, const char *account_id, int64_t from_ms, int64_t to_ms,
		  const char *granularity, struct sandbox_usage *out, struct sbx_error *err);
/* sandbox_usage() that also sums the period's usage per value of the
 * label `group_key` (a metadata key) of each sandbox, as it is now; the
 * groups add up to by_size exactly (each sandbox's pieces are those of
 * the rollups). */
int sandbox_usage_grouped(struct sandbox_svc *svc, const char *account_id, int64_t from_ms,
			  int64_t to_ms, const char *granularity, const char *group_key,
			  struct sandbox_usage *out, struct sbx_error *err);
void sandbox_usage_release(struct sandbox_usage *u);

/* ------------------------------------------------ executions (issue 8)
 *
 * POST /v1/sandbox/executions: a fresh guest (from the warm pool when there
 * is one) runs `code` with a fixed launcher that reads it on stdin (exec
 * protocol v2), and is destroyed afterwards. Billing: the cost of the whole
 * timeout is held first; then ceil(host_ms / 1000) (min 1) seconds at
 * execution_price_micro_per_second are charged and the rest released,
 * host_ms being the host-observed time from EXEC sent to EXIT received
 * (never the guest's own duration_ms), at most the timeout. A run the
 * guest broke (died, rebooted, never answered) is charged the same way up
 * to the failure; a run that could not start releases the hold. Only a
 * completed or timed-out run gets a receipt. */

/* Which runner executions use under cfg: libvirt, dev-process or mock
 * (never AUTO; config_runner_name() is its word). */
enum config_runner sandbox_execution_runner(const struct sandbox_config *cfg);

struct sandbox_execution_req {
	const char *runtime; /* "python" | "node" (| "sh" in test configs) */
	int timeout_seconds; /* 1..execution_max_timeout_seconds */
	const char *code;    /* UTF-8, NUL-free, <= execution_max_code_bytes */
	size_t code_len;
	const struct sandbox_metadata *metadata; /* NULL = none; returned as given */
};

/* An execution's status; its name ("running", "completed", "timed_out",
 * "failed") only in JSON and in the stored row. */
enum sandbox_execution_status {
	SANDBOX_EXECUTION_RUNNING,
	SANDBOX_EXECUTION_COMPLETED,
	SANDBOX_EXECUTION_TIMED_OUT,
	SANDBOX_EXECUTION_FAILED,
};
const char *sandbox_execution_status_name(enum sandbox_execution_status status);
/* The status of a name; SANDBOX_EXECUTION_FAILED for one it does not know. */
enum sandbox_execution_status sandbox_execution_status_of(const char *name);

/* Check an execution request against the config, before anything is
 * reserved or booted: the runtime, timeout_seconds, and code (present, at
 * most execution_max_code_bytes, no NUL, valid UTF-8 by RFC 3629 as a
 * receipt needs it: receipt_utf8_valid). 0, or -1 with
 * SBX_E_INVALID_REQUEST naming the param. sandbox_execution_run checks
 * the same first. */
int sandbox_execution_check(struct sandbox_svc *svc, const struct sandbox_execution_req *req,
			    struct sbx_error *err);

/* One execution that ran (completed or timed out): plain values, which
 * api/ renders into the 200 body (api_execution_render). */
struct sandbox_execution_result {
	char id[SANDBOX_ID_MAX];
	char metadata[SANDBOX_METADATA_JSON_MAX]; /* the request's, a JSON object */
	enum sandbox_execution_status status;	  /* COMPLETED or TIMED_OUT */
	int exit_code;
	/* The streams as returned, UTF-8 sanitised (an incomplete sequence at
	 * a truncated end cut): the bytes the receipt signs. NUL-terminated. */
	char *out, *err;
	size_t out_len, err_len;
	bool out_truncated, err_truncated;   /* the guest sent more than the cap */
	uint32_t duration_ms;		     /* the guest's own figure */
	uint32_t billed_ms;		     /* host-observed: what is billed and signed */
	int64_t cost_micro;		     /* charged */
	enum config_runner runner;	     /* never AUTO */
	bool warm;			     /* startup_path: a pooled guest, else a boot */
	bool prestarted;		     /* its interpreter was waiting */
	struct sandbox_exec_receipt receipt; /* signed in sandbox/ */
	/* Only in the copy the database keeps when the 200 body passes
	 * execution_store_max_bytes: out/err are then the streams' heads. */
	bool stored_truncated;
	/* The 200 body as the renderer made it (what the database keeps,
	 * unless stored_truncated was needed). */
	char *body;
	size_t body_len;
};
void sandbox_execution_result_release(struct sandbox_execution_result *res);

/* The renderer of the 200 body: a new NUL-terminated string (*len bytes),
 * or NULL with err. api/ passes api_execution_render. */
typedef char *(*sandbox_execution_render_fn)(const struct sandbox_execution_result *res,
					     size_t *len, struct sbx_error *err);

/* Run one execution: check, hold, run, sign the receipt, render (render,
 * on this thread), then charge the started seconds and keep the 200 body
 * and the receipt in one commit. On success *res holds the values and
 * res->body the 200 body (release it). Why the renderer is called from
 * here: the 200 body is stored in the same transaction as the charge and
 * the receipt (money moves only with the state it pays for, and GET
 * /v1/sandbox/executions/{id} answers the stored bytes byte for byte), so
 * the bytes must exist before the commit; sandbox/ owns what is kept (the
 * execution_store_max_bytes rule: a second render with the streams' heads
 * and stored_truncated), api/ owns the JSON. Errors:
 * SBX_E_INVALID_REQUEST (param runtime/timeout_seconds/code),
 * SBX_E_INSUFFICIENT_CREDIT, SBX_E_SERVICE_UNAVAILABLE (+retry_after),
 * SBX_E_SANDBOX_ERROR. */
int sandbox_execution_run(struct sandbox_svc *svc, const char *account_id,
			  const struct sandbox_execution_req *req,
			  sandbox_execution_render_fn render, struct sandbox_execution_result *res,
			  struct sbx_error *err);
/* The stored 200 body of an execution of this account (new string). */
int sandbox_execution_get(struct sandbox_svc *svc, const char *account_id, const char *id,
			  char **response, struct sbx_error *err);

/* One execution as listed (GET /v1/sandbox/executions). */
struct sandbox_execution_view {
	char id[SANDBOX_ID_MAX];
	char runtime[16];
	enum sandbox_execution_status status;
	int64_t requested_at_ms;
	int64_t ended_at_ms;		 /* 0 while running */
	int64_t cost_micro;		 /* charged (0 while running) */
	char receipt_id[SANDBOX_ID_MAX]; /* "" without a receipt */
	bool has_exit_code;		 /* false: running, failed, or no longer stored */
	int exit_code;
};

/* The account's newest executions, newest first, at most `limit`
 * (1..100); *out malloc'd (free it). */
int sandbox_execution_list(struct sandbox_svc *svc, const char *account_id, int limit,
			   struct sandbox_execution_view **out, size_t *n, bool *has_more,
			   struct sbx_error *err);

/* A receipt of this account: *json is {"object": "receipt", "id", "hash",
 * "signature", "signer", "body": {...}} (new string). */
int sandbox_receipt_get(struct sandbox_svc *svc, const char *account_id, const char *id,
			char **json, struct sbx_error *err);
/* The node's receipt signing key ("0x" + 64 hex, and PEM; new strings),
 * loaded or created by sandbox_svc_new. */
int sandbox_receipt_public_key(struct sandbox_svc *svc, char **hex, char **pem,
			       struct sbx_error *err);

/* Bearer token -> account id and, unless scopes is NULL, the key's scopes
 * (enum sandbox_scope bits), from the same single lookup as
 * sandbox_authenticate. */
int sandbox_authenticate_scopes(struct sandbox_svc *svc, const char *token,
				char account_id[SANDBOX_ID_MAX], unsigned *scopes,
				struct sbx_error *err);
/* Replace a key's scopes (0 = none). SBX_E_NOT_FOUND for an unknown key.
 * Admin only: no bound. */
int sandbox_key_set_scopes(struct sandbox_svc *svc, const char *key_id, unsigned scopes,
			   struct sbx_error *err);
/* A key's scopes. SBX_E_NOT_FOUND. */
int sandbox_key_scopes(struct sandbox_svc *svc, const char *key_id, unsigned *out,
		       struct sbx_error *err);

#endif
