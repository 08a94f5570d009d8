/* sandbox: the sandboxes' use cases: create, get, list, destroy, extend,
 * update (metadata).
 * See sandbox.h; the service itself is service.c's; accounts, keys,
 * idempotency and usage are use cases of their own (accounts.c, keys.c,
 * idempotency.c, usage.c); the live guests are the fleet's
 * (fleet/fleet.h), a sandbox's end is settle.c's, exec is exec.c, and the
 * locks are in sandbox-priv.h.
 */
#include "sandbox.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../agentless/agentless.h"
#include "../billing/billing.h"
#include "../receipt/receipt.h"
#include "../store/store.h"
#include "../vmm/vmm.h"
#include "sandbox-priv.h"

#define MOD "sandbox"

/* ----------------------------------------------------------- conversions */

/* For the use cases beside this file (idempotency.c). */
static int create_params(const struct sandbox_config *cfg, const struct sandbox_create_req *req,
			 const struct sandbox_size **size_out, int *minutes_out,
			 struct sbx_error *err);

int sandbox_create_params(const struct sandbox_config *cfg, const struct sandbox_create_req *req,
			  const struct sandbox_size **size_out, int *minutes_out,
			  struct sbx_error *err)
{
	return create_params(cfg, req, size_out, minutes_out, err);
}

/* ---------------------------------------------------------------- create */

/* The request's parameters after defaults: 0, or -1 with a 400. */
static int create_params(const struct sandbox_config *cfg, const struct sandbox_create_req *req,
			 const struct sandbox_size **size_out, int *minutes_out,
			 struct sbx_error *err)
{
	const char *size_name = req->size ? req->size : cfg->default_size;
	const struct sandbox_size *size = sandbox_config_size(cfg, size_name);
	int minutes = req->timeout_minutes ? req->timeout_minutes : cfg->default_timeout_minutes;

	if (!size) {
		char names[SANDBOX_MAX_SIZES * 20];

		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "size",
				     "unknown size '%.32s'; the sizes are %s (GET /v1/limits has "
				     "their prices)",
				     size_name,
				     sandbox_config_size_names(cfg, names, sizeof(names)));
	}
	if (minutes < 1 || minutes > cfg->max_timeout_minutes)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "timeout_minutes",
				     "timeout_minutes must be 1..%d", cfg->max_timeout_minutes);
	*size_out = size;
	*minutes_out = minutes;
	return 0;
}

int sandbox_create(struct sandbox_svc *svc, const char *account_id,
		   const struct sandbox_create_req *req, struct sandbox_view *out,
		   struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	const struct sandbox_size *size;
	int minutes;
	struct store_sandbox row = {0};
	struct fleet_guest *l = NULL;
	struct fleet_host *h = NULL;
	int64_t created_at, t_req_mono = sbx_mono_ms();
	bool warm = false;

	struct store_snapshot snap;

	if (create_params(cfg, req, &size, &minutes, err) < 0)
		return -1;
	if (req->snapshot &&
	    sandbox_snapshot_for_create(svc, account_id, req->snapshot, size, &snap, err) < 0)
		return -1;

	/* 1. Intent: row + hold (429 cap, then 402 credit) before libvirt. */
	if (sbx_random_id("sbx_", 12, row.id, sizeof(row.id)) < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "no randomness available");
	snprintf(row.account_id, sizeof(row.account_id), "%s", account_id);
	snprintf(row.size, sizeof(row.size), "%s", size->name);
	row.timeout_minutes = minutes;
	row.timeout_action = req->timeout_action == SANDBOX_ON_TIMEOUT_PAUSE
				 ? STORE_ON_TIMEOUT_PAUSE
				 : STORE_ON_TIMEOUT_EXPIRE;
	row.price_micro_per_hour = size->price_micro_per_hour;
	row.requested_at_ms = sbx_wall_ms();
	if (req->metadata &&
	    sandbox_metadata_json(req->metadata, false, row.metadata, sizeof(row.metadata)) < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "metadata",
				     "metadata is too large");
	snprintf(row.network, sizeof(row.network), "%s",
		 req->network ? req->network : sandbox_network_default(svc));
	row.net_price_micro_per_gb = (int64_t)cfg->net_price_micro_per_gb;
	if (store_sandbox_reserve(svc->store, &row,
				  billing_hold_for_minutes(minutes, size->price_micro_per_hour),
				  cfg->max_sandboxes_per_account, err) < 0) {
		if (err && err->code == SBX_E_CONCURRENCY_LIMIT && !err->retry_after_s)
			err->retry_after_s = 10;
		return -1;
	}
	/* Bind the key to this sandbox before it boots: should the daemon die
	 * after activation but before the answer is remembered, a retry gets
	 * this sandbox instead of a second one. */
	if (req->idempotency_key &&
	    store_idem_bind(svc->store, account_id, req->idempotency_key, row.id, err) < 0) {
		store_sandbox_abort(svc->store, row.id, NULL);
		return -1;
	}
	/* A template: its disk is the snapshot's from here on (a delete of
	 * the snapshot that began first wins: 404) */
	if (req->snapshot &&
	    store_sandbox_snapshot_set(svc->store, account_id, row.id, snap.id, err) < 0) {
		store_sandbox_abort(svc->store, row.id, NULL);
		return -1;
	}
	sandbox_fault_hit(cfg, SANDBOX_FAULT_CREATE_AFTER_RESERVE);

	/* 2. A guest (fleet_acquire, docs/hosts.md): a pooled guest
	 * of this size, named ours (a crash before activation leaves a domain
	 * naming a creating row, which reconcile destroys), or a cold boot:
	 * it queues for a boot slot, and the boot's deadline starts with the
	 * boot, so a burst of creates waiting their turn does not eat into
	 * it. Its capacity stays counted until it is linked below. */
	struct fleet_acquire acq = {
	    .size = size,
	    .marker = row.id,
	    .queue_deadline_mono = sbx_mono_ms() + cfg->boot_queue_timeout_ms,
	    .why_failed = "the sandbox could not be created",
	    .snapshot_id = req->snapshot ? snap.id : NULL,
	    .host = req->snapshot ? snap.host : NULL,
	};
	if (sandbox_acquire(svc, &acq, err) < 0)
		goto err_abort;
	l = acq.g;
	h = acq.h;
	warm = acq.warm;
	if (warm)
		agentless_conn_send_time(l->conn, NULL);

	sandbox_fault_hit(cfg, SANDBOX_FAULT_CREATE_AFTER_HELLO);
	/* 4. Ready: billing starts now. */
	created_at = sbx_wall_ms();
	l->expires_at_ms =
	    created_at + (int64_t)minutes * sandbox_minute_ms(cfg); /* not shared yet */
	int64_t startup_ms = sbx_mono_ms() - t_req_mono;
	if (store_sandbox_activate_startup(svc->store, row.id, l->domain, created_at,
					   l->expires_at_ms, warm ? "warm" : "cold", startup_ms,
					   h->cfg->name, err) < 0) {
		fleet_guest_teardown(l, "the sandbox could not be created");
		goto err_capacity;
	}
	sandbox_fault_hit(cfg, SANDBOX_FAULT_CREATE_AFTER_ACTIVATE);
	startup_ms = sbx_mono_ms() - t_req_mono; /* ready and recorded */
	fleet_live_adopt(svc->fleet, l, h, size, created_at);
	pthread_mutex_lock(&svc->lock);
	sandbox_startup_record_locked(svc, warm, startup_ms);
	pthread_mutex_unlock(&svc->lock);
	sbx_info(MOD,
		 "sandbox %s: running in %s on host %s (%s, %s), ready %lld ms after the "
		 "request",
		 row.id, l->domain, h->cfg->name, size->name, warm ? "warm" : "cold",
		 (long long)startup_ms);
	if (store_sandbox_get(svc->store, account_id, row.id, &row, err) < 0)
		return -1;
	sandbox_view_from_row(&row, sbx_wall_ms(), out);
	return 0;

err_capacity:
	fleet_guest_uncount(svc->fleet, h, size);
err_abort:
	store_sandbox_abort(svc->store, row.id, NULL);
	if (err && err->code != SBX_E_SERVICE_UNAVAILABLE)
		sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL,
			      "the sandbox could not be started; nothing was charged, retry");
	return -1;
}

/* ----------------------------------------------------- idempotency keys */

/* ------------------------------------------------------ get, list, end */

int sandbox_get(struct sandbox_svc *svc, const char *account_id, const char *id,
		struct sandbox_view *out, struct sbx_error *err)
{
	struct store_sandbox row;

	if (sandbox_visible_row(svc, account_id, id, &row, err) < 0)
		return -1;
	sandbox_view_from_row(&row, sbx_wall_ms(), out);
	return 0;
}

int sandbox_list(struct sandbox_svc *svc, const char *account_id, const char *status, int limit,
		 const char *starting_after, struct sandbox_view **out, size_t *n, bool *has_more,
		 struct sbx_error *err)
{
	return sandbox_list_labeled(svc, account_id, status, NULL, limit, starting_after, out, n,
				    has_more, err);
}

int sandbox_list_labeled(struct sandbox_svc *svc, const char *account_id, const char *status,
			 const struct sandbox_metadata *filter, int limit,
			 const char *starting_after, struct sandbox_view **out, size_t *n,
			 bool *has_more, struct sbx_error *err)
{
	char labels[SANDBOX_METADATA_JSON_MAX];
	struct store_sandbox *rows = NULL;
	enum store_status st;
	size_t count = 0;
	int64_t now = sbx_wall_ms();

	if (status &&
	    (store_status_parse(status, &st) < 0 || st == STORE_CREATING || st == STORE_ABORTED))
		return sbx_error_set(
		    err, SBX_E_INVALID_REQUEST, "status",
		    "status must be one of running, paused, destroyed, expired, failed");
	if (limit < 1 || limit > 100)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "limit", "limit must be 1..100");
	for (size_t i = 0; filter && i < filter->n; i++)
		if (filter->pairs[i].remove)
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "metadata",
					     "a metadata filter's values are not empty");
	if (filter && filter->n && sandbox_metadata_json(filter, false, labels, sizeof(labels)) < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "metadata",
				     "the metadata filter is too large");
	if (store_sandbox_list_labeled(svc->store, account_id, status ? &st : NULL,
				       filter && filter->n ? labels : NULL, limit, starting_after,
				       &rows, &count, has_more, err) < 0)
		return -1;
	*out = calloc(count ? count : 1, sizeof(**out));
	if (!*out) {
		free(rows);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	}
	*n = 0;
	for (size_t i = 0; i < count; i++)
		if (rows[i].status != STORE_CREATING)
			sandbox_view_from_row(&rows[i], now, &(*out)[(*n)++]);
	free(rows);
	return 0;
}

int sandbox_destroy(struct sandbox_svc *svc, const char *account_id, const char *id,
		    struct sandbox_view *out, struct sbx_error *err)
{
	struct store_sandbox row;
	int64_t now = sbx_wall_ms();

	if (sandbox_visible_row(svc, account_id, id, &row, err) < 0)
		return -1;
	/* a pause or resume has the guest out of the lives: ending the row
	 * now would leave the guest it brings back unbilled (docs/api.md) */
	if (sandbox_in_transit(svc, id))
		return sandbox_transit_error(id, err);
	if (row.status == STORE_PAUSED) {
		if (sandbox_end_paused(svc, &row, STORE_DESTROYED, now, &row, err) < 0)
			return -1;
	} else if (row.status == STORE_RUNNING &&
		   sandbox_end(svc, id, STORE_DESTROYED, now, "the sandbox was deleted", &row,
			       err) < 0) {
		return -1;
	}
	sandbox_fault_hit(&svc->cfg, SANDBOX_FAULT_DELETE_AFTER_SETTLE);
	sandbox_view_from_row(&row, now, out);
	return 0;
}

int sandbox_lifetime_check(const struct sandbox_config *cfg, const struct store_sandbox *row,
			   int64_t now_ms, int64_t want_ms, struct sbx_error *err)
{
	int64_t paused = row->paused_ms + (row->paused_at_ms ? now_ms - row->paused_at_ms : 0);
	int64_t latest = row->created_at_ms + paused +
			 (int64_t)cfg->max_lifetime_minutes * sandbox_minute_ms(cfg);
	char latest_s[32];

	if (want_ms <= latest)
		return 0;
	sbx_rfc3339(latest, latest_s);
	return sbx_error_set(err, SBX_E_INVALID_REQUEST, "timeout_minutes",
			     "a sandbox runs at most %d minutes (its pauses not counted); the "
			     "latest expiry allowed is %s",
			     cfg->max_lifetime_minutes, latest_s);
}

int sandbox_extend(struct sandbox_svc *svc, const char *account_id, const char *id,
		   int timeout_minutes, struct sandbox_view *out, struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	struct store_sandbox row;
	int64_t now = sbx_wall_ms(), want;

	if (timeout_minutes < 1 || timeout_minutes > cfg->max_timeout_minutes)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "timeout_minutes",
				     "timeout_minutes must be 1..%d", cfg->max_timeout_minutes);
	if (sandbox_running_row(svc, account_id, id, now, &row, err) < 0)
		return -1;
	want = now + (int64_t)timeout_minutes * sandbox_minute_ms(cfg);
	if (sandbox_lifetime_check(cfg, &row, now, want, err) < 0)
		return -1;
	if (want > row.expires_at_ms) {
		/* Hold for the added time at the price the sandbox was created
		 * with. */
		int64_t extra = billing_cost(want - row.expires_at_ms, row.price_micro_per_hour);

		if (store_sandbox_extend(svc->store, account_id, id, want, extra, err) < 0)
			return -1;
		sandbox_fault_hit(cfg, SANDBOX_FAULT_EXTEND_AFTER_HOLD);
		struct fleet_guest *l = svc->fleet ? fleet_live_get(svc->fleet, id) : NULL;
		/* Another extend may have published a later expiry since we
		 * read the row: the in-memory expiry never moves backwards
		 * (the row keeps the larger one too, store_sandbox_extend). */
		if (l) {
			pthread_mutex_lock(&l->lock);
			if (want > l->expires_at_ms)
				l->expires_at_ms = want;
			pthread_mutex_unlock(&l->lock);
			fleet_guest_unref(l);
		}
	}
	return sandbox_get(svc, account_id, id, out, err);
}

/* ---------------------------------------------------------------- update */

int sandbox_metadata_update(struct sandbox_svc *svc, const char *account_id, const char *id,
			    bool clear, const struct sandbox_metadata *patch,
			    struct sandbox_view *out, struct sbx_error *err)
{
	char json[SANDBOX_METADATA_JSON_MAX];
	struct store_sandbox row;

	if (sandbox_metadata_json(patch, true, json, sizeof(json)) < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "metadata",
				     "metadata is too large");
	if (store_sandbox_metadata_update(svc->store, account_id, id, clear, json, &row, err) < 0)
		return -1;
	sandbox_view_from_row(&row, sbx_wall_ms(), out);
	return 0;
}
