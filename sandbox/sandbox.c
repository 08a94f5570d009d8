/* sandbox: the service, create, get, list, destroy, extend, the stats.
 * See sandbox.h; accounts, keys, idempotency and usage are use cases of
 * their own (accounts.c, keys.c, idempotency.c, usage.c); the live guests
 * are the fleet's (fleet/fleet.h), a sandbox's end is settle.c's, exec is
 * exec.c, and the locks are in sandbox-priv.h.
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

/* One minute of timeout_minutes, in ms (scaled only by test configs). */
static int64_t minute_ms(const struct sandbox_config *cfg)
{
	return cfg->test_minute_ms ? (int64_t)cfg->test_minute_ms : 60000;
}

static void view_from_row(const struct store_sandbox *row, int64_t now_ms, struct sandbox_view *v)
{
	memset(v, 0, sizeof(*v));
	snprintf(v->id, sizeof(v->id), "%s", row->id);
	snprintf(v->status, sizeof(v->status), "%s", store_status_name(row->status));
	snprintf(v->size, sizeof(v->size), "%s", row->size);
	v->created_at_ms = row->created_at_ms;
	v->expires_at_ms = row->expires_at_ms;
	v->ended_at_ms = row->ended_at_ms;
	v->cost_micro = billing_cost_so_far(row, now_ms);
	snprintf(v->startup_path, sizeof(v->startup_path), "%s", row->startup_path);
	v->startup_ms = row->startup_ms;
}

/* Tenants see a sandbox that is still being created as not existing yet. */
int sandbox_visible_row(struct sandbox_svc *svc, const char *account_id, const char *id,
			struct store_sandbox *row, struct sbx_error *err)
{
	if (store_sandbox_get(svc->store, account_id, id, row, err) < 0)
		return -1;
	if (row->status == STORE_CREATING)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such sandbox '%s'", id);
	return 0;
}

int sandbox_running_row(struct sandbox_svc *svc, const char *account_id, const char *id,
			int64_t now, struct store_sandbox *row, struct sbx_error *err)
{
	if (sandbox_visible_row(svc, account_id, id, row, err) < 0)
		return -1;
	if (row->status != STORE_RUNNING || row->expires_at_ms <= now)
		return sbx_error_set(
		    err, SBX_E_SANDBOX_NOT_RUNNING, NULL, "sandbox '%s' is %s; create a new one",
		    id, row->status == STORE_RUNNING ? "expired" : store_status_name(row->status));
	return 0;
}

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

void sandbox_view_from_row(const struct store_sandbox *row, int64_t now_ms, struct sandbox_view *v)
{
	view_from_row(row, now_ms, v);
}

/* ------------------------------------------------------- service lifecycle */

/* Let go of every live guest without ending it: its channel closed, its
 * domain left running for the next daemon to reattach. */
static void leave_guests(struct sandbox_svc *svc, const char *why)
{
	char id[SANDBOX_ID_MAX];

	while (fleet_live_any(svc->fleet, id)) {
		struct fleet_guest *l = fleet_live_take(svc->fleet, id, FLEET_END_OTHER);

		if (l) {
			agentless_conn_close(l->conn, why);
			fleet_guest_unref(l);
		}
	}
}

struct sandbox_svc *sandbox_svc_new(const struct sandbox_config *cfg, int flags,
				    struct sbx_error *err)
{
	struct sandbox_svc *svc = calloc(1, sizeof(*svc));
	char run_dir[PATH_MAX + 8];

	if (!svc) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		return NULL;
	}
	svc->cfg = *cfg;
	pthread_mutex_init(&svc->lock, NULL);
	svc->output = sandbox_output_budget_new(cfg->output_budget_account_mib << 20,
						cfg->output_budget_host_mib << 20);
	if (!svc->output) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		goto err_free;
	}
	/* Owner only, plus the search bit qemu (libvirt-qemu) needs to reach
	 * the kernel, the images and the overlays under it; an existing state
	 * dir is narrowed to that too. */
	snprintf(run_dir, sizeof(run_dir), "%s/run", cfg->state_dir);
	if (sbx_mkdir_p(cfg->state_dir, SANDBOX_STATE_DIR_MODE) < 0 ||
	    chmod(cfg->state_dir, SANDBOX_STATE_DIR_MODE) < 0 ||
	    /* A remote host's run dir is made there by vmm (a storage pool). */
	    (!(flags & SANDBOX_SVC_ADMIN) && vmm_uri_is_local(cfg->libvirt_uri) &&
	     (sbx_mkdir_p(run_dir, SANDBOX_STATE_DIR_MODE) < 0 ||
	      chmod(run_dir, SANDBOX_STATE_DIR_MODE) < 0))) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "cannot create the state dir: %s",
			      strerror(errno));
		goto err_free;
	}
	/* the node's receipt key, this service's for its whole life */
	if (!(svc->signer = sandbox_receipt_signer_open(cfg, err)))
		goto err_free;
	svc->started_wall_ms = sbx_wall_ms();
	svc->store = store_open(cfg->db_path, err);
	if (!svc->store)
		goto err_signer;
	if (flags & SANDBOX_SVC_ADMIN)
		return svc;

	struct fleet_hooks hooks = sandbox_fleet_hooks;

	hooks.opaque = svc;
	svc->fleet = fleet_new(&svc->cfg, &hooks);
	if (!svc->fleet) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		goto err_store;
	}
	if (fleet_hosts_open(svc->fleet, err) < 0 || sandbox_reconcile_all(svc, err) < 0)
		goto err_hosts;
	/* the drained hosts first: the pool must not refill them, nor a
	 * placement choose them */
	fleet_hosts_read_drains(svc->fleet);
	if (sandbox_supervise_start(svc, err) < 0)
		goto err_hosts;
	return svc;

err_hosts:
	/* reattached guests stay running for the next start */
	leave_guests(svc, "the service did not start");
	sandbox_settles_free(svc);
	fleet_hosts_close(svc->fleet);
	fleet_free(svc->fleet);
err_store:
	store_close(svc->store);
err_signer:
	receipt_signer_free(svc->signer);
err_free:
	sandbox_output_budget_free(svc->output);
	pthread_mutex_destroy(&svc->lock);
	free(svc);
	return NULL;
}

void sandbox_svc_free(struct sandbox_svc *svc)
{
	if (!svc)
		return;
	if (svc->fleet) {
		fleet_stop(svc->fleet);
		/* no pass after this; the ends queued and the execution
		 * guests' teardowns run to the end (no domain left behind) */
		sandbox_supervise_stop(svc);
		fleet_pool_stop(svc->fleet);
		if (svc->cfg.destroy_on_exit) {
			char id[SANDBOX_ID_MAX];

			while (fleet_live_any(svc->fleet, id))
				sandbox_end(svc, id, STORE_DESTROYED, sbx_wall_ms(),
					    "the service is shutting down", NULL, NULL);
		}
		/* Leave the others running; the next daemon reattaches. */
		leave_guests(svc, "the service is restarting");
	}
	/* Ends the store refused: one last try, the rest the next start's. */
	sandbox_settles_retry(svc);
	sandbox_settles_free(svc);
	sandbox_supervise_free(svc);
	if (svc->fleet) {
		fleet_hosts_close(svc->fleet);
		fleet_free(svc->fleet);
	}
	receipt_signer_free(svc->signer);
	store_close(svc->store);
	sandbox_output_budget_free(svc->output);
	pthread_mutex_destroy(&svc->lock);
	free(svc);
}

const struct sandbox_config *sandbox_svc_config(const struct sandbox_svc *svc)
{
	return &svc->cfg;
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

static void ring_record(struct startup_ring *r, int64_t ms)
{
	r->ms[r->pos] = ms;
	r->pos = (r->pos + 1) % SANDBOX_STARTUP_WINDOW;
	if (r->n < SANDBOX_STARTUP_WINDOW)
		r->n++;
}

static void startup_record_locked(struct sandbox_svc *svc, bool warm, int64_t ms)
{
	ring_record(warm ? &svc->startup_warm : &svc->startup_cold, ms);
}

void sandbox_execution_record_locked(struct sandbox_svc *svc, bool warm, bool prestarted,
				     int64_t ms)
{
	ring_record(prestarted ? &svc->exec_prestarted : (warm ? &svc->exec_warm : &svc->exec_cold),
		    ms);
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile p (1..100) of n sorted values. */
static int64_t nearest_rank(const int64_t *sorted, size_t n, unsigned p)
{
	size_t rank = (n * p + 99) / 100;

	return sorted[rank ? rank - 1 : 0];
}

static void startup_path_stats(const struct startup_ring *r, struct sandbox_startup_path *out)
{
	int64_t sorted[SANDBOX_STARTUP_WINDOW];

	out->samples = r->n;
	out->p50_ms = out->p95_ms = -1;
	if (!r->n)
		return;
	memcpy(sorted, r->ms, r->n * sizeof(sorted[0]));
	qsort(sorted, r->n, sizeof(sorted[0]), cmp_i64);
	out->p50_ms = nearest_rank(sorted, r->n, 50);
	out->p95_ms = nearest_rank(sorted, r->n, 95);
}

void sandbox_metrics_get(struct sandbox_svc *svc, struct sandbox_metrics *out)
{
	const struct sandbox_config *cfg = &svc->cfg;
	struct store_ledger_totals t;

	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < cfg->n_sizes && i < SANDBOX_MAX_SIZES; i++)
		snprintf(out->sizes[i].size, sizeof(out->sizes[i].size), "%s", cfg->sizes[i].name);
	out->n_sizes = SBX_MIN(cfg->n_sizes, (size_t)SANDBOX_MAX_SIZES);
	for (size_t i = 0; svc->fleet && i < out->n_sizes; i++)
		fleet_size_counts(svc->fleet, out->sizes[i].size, &out->sizes[i].running,
				  &out->sizes[i].pooled);
	if (svc->fleet)
		fleet_boots(svc->fleet, &out->booting, &out->pool_booting);
	sandbox_output_held(svc->output, NULL, &out->output_held, NULL);
	if (store_ledger_totals_get(svc->store, &t, NULL) == 0) {
		out->ledger_ok = true;
		out->credits = t.credits;
		out->holds = t.holds;
		out->releases = t.releases;
		out->charges = t.charges;
		out->accounts = t.accounts;
	}
}

void sandbox_startup_stats(struct sandbox_svc *svc, struct sandbox_startup_stats *out)
{
	struct startup_ring warm, cold, xp, xw, xc;

	memset(out, 0, sizeof(*out));
	out->warm.p50_ms = out->warm.p95_ms = out->cold.p50_ms = out->cold.p95_ms = -1;
	out->exec_prestarted.p50_ms = out->exec_prestarted.p95_ms = -1;
	out->exec_warm.p50_ms = out->exec_warm.p95_ms = -1;
	out->exec_cold.p50_ms = out->exec_cold.p95_ms = -1;
	if (!svc)
		return;
	for (size_t i = 0; i < svc->cfg.n_pool && i < SANDBOX_MAX_SIZES; i++) {
		snprintf(out->pool[i].size, sizeof(out->pool[i].size), "%s", svc->cfg.pool[i].size);
		out->pool[i].target = svc->cfg.pool[i].count;
		out->pool[i].ready =
		    svc->fleet ? fleet_pool_ready(svc->fleet, svc->cfg.pool[i].size, NULL) : 0;
		out->n_pool++;
	}
	for (size_t i = 0; i < svc->cfg.n_execution_pool && i < SANDBOX_EXECUTION_RUNTIMES; i++) {
		const char *rt = svc->cfg.execution_pool[i].runtime;

		snprintf(out->exec_pool[i].runtime, sizeof(out->exec_pool[i].runtime), "%s", rt);
		out->exec_pool[i].target = svc->cfg.execution_pool[i].count;
		out->exec_pool[i].ready = svc->fleet ? fleet_pool_ready(svc->fleet, NULL, rt) : 0;
		out->n_exec_pool++;
	}
	pthread_mutex_lock(&svc->lock);
	warm = svc->startup_warm;
	cold = svc->startup_cold;
	xp = svc->exec_prestarted;
	xw = svc->exec_warm;
	xc = svc->exec_cold;
	pthread_mutex_unlock(&svc->lock);
	startup_path_stats(&warm, &out->warm);
	startup_path_stats(&cold, &out->cold);
	startup_path_stats(&xp, &out->exec_prestarted);
	startup_path_stats(&xw, &out->exec_warm);
	startup_path_stats(&xc, &out->exec_cold);
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

	if (create_params(cfg, req, &size, &minutes, err) < 0)
		return -1;

	/* 1. Intent: row + hold (429 cap, then 402 credit) before libvirt. */
	if (sbx_random_id("sbx_", 12, row.id, sizeof(row.id)) < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "no randomness available");
	snprintf(row.account_id, sizeof(row.account_id), "%s", account_id);
	snprintf(row.size, sizeof(row.size), "%s", size->name);
	row.timeout_minutes = minutes;
	row.price_micro_per_hour = size->price_micro_per_hour;
	row.requested_at_ms = sbx_wall_ms();
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
	};
	if (fleet_acquire(svc->fleet, &acq, err) < 0)
		goto err_abort;
	l = acq.g;
	h = acq.h;
	warm = acq.warm;
	if (warm)
		agentless_conn_send_time(l->conn, NULL);

	sandbox_fault_hit(cfg, SANDBOX_FAULT_CREATE_AFTER_HELLO);
	/* 4. Ready: billing starts now. */
	created_at = sbx_wall_ms();
	l->expires_at_ms = created_at + (int64_t)minutes * minute_ms(cfg); /* not shared yet */
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
	startup_record_locked(svc, warm, startup_ms);
	pthread_mutex_unlock(&svc->lock);
	sbx_info(MOD,
		 "sandbox %s: running in %s on host %s (%s, %s), ready %lld ms after the "
		 "request",
		 row.id, l->domain, h->cfg->name, size->name, warm ? "warm" : "cold",
		 (long long)startup_ms);
	if (store_sandbox_get(svc->store, account_id, row.id, &row, err) < 0)
		return -1;
	view_from_row(&row, sbx_wall_ms(), out);
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
	view_from_row(&row, sbx_wall_ms(), out);
	return 0;
}

int sandbox_list(struct sandbox_svc *svc, const char *account_id, const char *status, int limit,
		 const char *starting_after, struct sandbox_view **out, size_t *n, bool *has_more,
		 struct sbx_error *err)
{
	struct store_sandbox *rows = NULL;
	enum store_status st;
	size_t count = 0;
	int64_t now = sbx_wall_ms();

	if (status &&
	    (store_status_parse(status, &st) < 0 || st == STORE_CREATING || st == STORE_ABORTED))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "status",
				     "status must be one of running, destroyed, expired, failed");
	if (limit < 1 || limit > 100)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "limit", "limit must be 1..100");
	if (store_sandbox_list(svc->store, account_id, status ? &st : NULL, limit, starting_after,
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
			view_from_row(&rows[i], now, &(*out)[(*n)++]);
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
	if (row.status == STORE_RUNNING &&
	    sandbox_end(svc, id, STORE_DESTROYED, now, "the sandbox was deleted", &row, err) < 0)
		return -1;
	sandbox_fault_hit(&svc->cfg, SANDBOX_FAULT_DELETE_AFTER_SETTLE);
	view_from_row(&row, now, out);
	return 0;
}

int sandbox_extend(struct sandbox_svc *svc, const char *account_id, const char *id,
		   int timeout_minutes, struct sandbox_view *out, struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	struct store_sandbox row;
	int64_t now = sbx_wall_ms(), want, latest;
	char latest_s[32];

	if (timeout_minutes < 1 || timeout_minutes > cfg->max_timeout_minutes)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "timeout_minutes",
				     "timeout_minutes must be 1..%d", cfg->max_timeout_minutes);
	if (sandbox_running_row(svc, account_id, id, now, &row, err) < 0)
		return -1;
	want = now + (int64_t)timeout_minutes * minute_ms(cfg);
	latest = row.created_at_ms + (int64_t)cfg->max_lifetime_minutes * minute_ms(cfg);
	if (want > latest) {
		sbx_rfc3339(latest, latest_s);
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "timeout_minutes",
				     "a sandbox lives at most %d minutes; the latest expiry "
				     "allowed is %s",
				     cfg->max_lifetime_minutes, latest_s);
	}
	if (want > row.expires_at_ms) {
		/* Hold for the added time at the price the sandbox was created
		 * with. */
		int64_t extra = billing_cost(want - row.expires_at_ms, row.price_micro_per_hour);

		if (store_sandbox_extend(svc->store, account_id, id, want, extra, err) < 0)
			return -1;
		sandbox_fault_hit(cfg, SANDBOX_FAULT_EXTEND_AFTER_HOLD);
		struct fleet_guest *l = fleet_live_get(svc->fleet, id);
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
