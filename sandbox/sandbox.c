/* sandbox: the service, accounts and keys, create (with idempotency),
 * get, list, destroy, extend, reconcile and usage. See sandbox.h; who owns
 * a live guest and who ends it is live.c, exec is exec.c, and the lock
 * order is in sandbox-priv.h.
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

/* ------------------------------------------------------- service lifecycle */

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
	svc->ends_tail = &svc->ends;
	pthread_mutex_init(&svc->lock, NULL);
	pthread_cond_init(&svc->cond, NULL);
	fleet_slots_init(&svc->slots, cfg->max_concurrent_boots);
	if (fleet_registry_init(&svc->by_id) < 0) {
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
	svc->started_wall_ms = sbx_wall_ms();
	svc->store = store_open(cfg->db_path, err);
	if (!svc->store)
		goto err_free;
	if (flags & SANDBOX_SVC_ADMIN)
		return svc;

	if (sandbox_hosts_open(svc, err) < 0)
		goto err_hosts;
	if (pthread_create(&svc->timer, NULL, sandbox_timer_main, svc) != 0) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "cannot start the timer thread");
		goto err_hosts;
	}
	svc->timer_started = true;
	for (int i = 0; i < SANDBOX_ENDERS; i++) {
		if (pthread_create(&svc->enders[i], NULL, sandbox_ender_main, svc) != 0)
			break;
		svc->n_enders++;
	}
	/* the host thread first: it reads the drained hosts, which the pool
	 * must not refill */
	if (sandbox_hosts_start(svc, err) < 0 || sandbox_liveness_start(svc, err) < 0 ||
	    sandbox_pool_start(svc, err) < 0) {
		sandbox_svc_free(svc);
		return NULL;
	}
	return svc;

err_hosts:
	/* reattached guests stay running for the next start */
	while (svc->lives) {
		struct live *l = svc->lives;

		svc->lives = l->next;
		fleet_registry_del(&svc->by_id, l->id);
		agentless_conn_free(l->conn, "the service did not start");
		vmm_vm_free(l->vm);
		free(l);
	}
	sandbox_settles_free(svc);
	sandbox_hosts_close(svc);
	store_close(svc->store);
err_free:
	fleet_registry_free(&svc->by_id);
	free(svc);
	return NULL;
}

void sandbox_svc_free(struct sandbox_svc *svc)
{
	if (!svc)
		return;
	pthread_mutex_lock(&svc->lock);
	svc->stop = true;
	pthread_cond_broadcast(&svc->cond);
	pthread_mutex_unlock(&svc->lock);
	fleet_slots_stop(&svc->slots);
	if (svc->timer_started)
		pthread_join(svc->timer, NULL);
	for (int i = 0; i < svc->n_enders; i++)
		pthread_join(svc->enders[i], NULL);
	sandbox_liveness_stop(svc);
	sandbox_hosts_stop(svc);
	if (svc->n_hosts)
		sandbox_pool_stop(svc);

	for (;;) {
		struct live *l;
		char id[SANDBOX_ID_MAX];

		pthread_mutex_lock(&svc->lock);
		l = svc->lives;
		if (l)
			snprintf(id, sizeof(id), "%s", l->id);
		pthread_mutex_unlock(&svc->lock);
		if (!l)
			break;
		if (svc->cfg.destroy_on_exit) {
			sandbox_end(svc, id, STORE_DESTROYED, sbx_wall_ms(),
				    "the service is shutting down", NULL, NULL);
		} else {
			/* Leave the guest running; the next daemon reattaches. */
			pthread_mutex_lock(&svc->lock);
			l = sandbox_live_take_locked(svc, id);
			pthread_mutex_unlock(&svc->lock);
			if (l) {
				agentless_conn_free(l->conn, "the service is restarting");
				vmm_vm_free(l->vm);
				free(l);
			}
		}
	}
	/* Execution guests still being destroyed: no domain left behind. */
	sandbox_execution_teardowns_wait(svc);
	/* Ends the store refused: one last try, the rest the next start's. */
	sandbox_settles_retry(svc);
	sandbox_settles_free(svc);
	sandbox_hosts_close(svc);
	store_close(svc->store);
	fleet_slots_destroy(&svc->slots);
	fleet_registry_free(&svc->by_id);
	pthread_cond_destroy(&svc->cond);
	pthread_mutex_destroy(&svc->lock);
	free(svc);
}

const struct sandbox_config *sandbox_svc_config(const struct sandbox_svc *svc)
{
	return &svc->cfg;
}

/* ------------------------------------------------------------- accounts */

#define KEY_PREFIX "aas_sk_"

int sandbox_authenticate_scopes(struct sandbox_svc *svc, const char *token,
				char account_id[SANDBOX_ID_MAX], char scopes[SANDBOX_SCOPES_MAX],
				struct sbx_error *err)
{
	struct store_key key;
	char digest[65];
	size_t len = token ? strlen(token) : 0;

	if (len < sizeof(KEY_PREFIX) || len > 200 || strncmp(token, KEY_PREFIX, 7) != 0)
		return sbx_error_set(err, SBX_E_AUTHENTICATION, NULL,
				     "missing or invalid API key; send 'Authorization: Bearer "
				     "aas_sk_...'");
	sbx_sha256_hex(token, len, digest);
	if (store_key_find(svc->store, digest, &key, err) < 0) {
		if (err && err->code == SBX_E_AUTHENTICATION)
			sbx_error_set(err, SBX_E_AUTHENTICATION, NULL,
				      "missing or invalid API key; send 'Authorization: Bearer "
				      "aas_sk_...'");
		return -1;
	}
	snprintf(account_id, SANDBOX_ID_MAX, "%s", key.account_id);
	if (scopes)
		snprintf(scopes, SANDBOX_SCOPES_MAX, "%s", key.scopes);
	return 0;
}

int sandbox_authenticate(struct sandbox_svc *svc, const char *token,
			 char account_id[SANDBOX_ID_MAX], struct sbx_error *err)
{
	return sandbox_authenticate_scopes(svc, token, account_id, NULL, err);
}

static void key_from_store(const struct store_key *k, struct sandbox_key *out)
{
	memset(out, 0, sizeof(*out));
	snprintf(out->id, sizeof(out->id), "%s", k->id);
	snprintf(out->account_id, sizeof(out->account_id), "%s", k->account_id);
	snprintf(out->prefix, sizeof(out->prefix), "%s", k->prefix);
	out->created_at_ms = k->created_at_ms;
	out->revoked_at_ms = k->revoked_at_ms;
	snprintf(out->scopes, sizeof(out->scopes), "%s", k->scopes);
}

int sandbox_key_create(struct sandbox_svc *svc, const char *account_id, const char *scopes,
		       const char *creator_scopes, struct sandbox_key *key, char secret[static 80],
		       struct sbx_error *err)
{
	struct store_key k = {0};
	struct store_account acct;
	const char *missing = NULL;
	char digest[65];

	if (!scopes)
		scopes = creator_scopes ? creator_scopes : SANDBOX_SCOPES_DEFAULT;
	if (sandbox_scopes_normalize(scopes, k.scopes, err) < 0)
		return -1;
	if (creator_scopes && !sandbox_scopes_within(k.scopes, creator_scopes, &missing))
		return sbx_error_set(err, SBX_E_PERMISSION, NULL,
				     "a new key's scopes are at most its creator's, and this key "
				     "lacks the '%s' scope",
				     missing);
	if (store_account_get(svc->store, account_id, &acct, err) < 0)
		return -1;
	if (sbx_random_id(KEY_PREFIX, 32, secret, 80) < 0 ||
	    sbx_random_id("key_", 12, k.id, sizeof(k.id)) < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "no randomness available");
	snprintf(k.account_id, sizeof(k.account_id), "%s", account_id);
	snprintf(k.prefix, sizeof(k.prefix), "%.12s", secret);
	k.created_at_ms = sbx_wall_ms();
	sbx_sha256_hex(secret, strlen(secret), digest);
	struct store_key_keep keep = {
	    .max_active = svc->cfg.max_api_keys_per_account,
	    .revoked_before_ms =
		k.created_at_ms - (int64_t)svc->cfg.execution_retention_hours * 3600 * 1000,
	    .max_revoked = svc->cfg.max_api_keys_per_account,
	};
	if (store_key_insert_kept(svc->store, &k, digest, &keep, err) < 0)
		return -1;
	key_from_store(&k, key);
	return 0;
}

int sandbox_key_list(struct sandbox_svc *svc, const char *account_id, int limit,
		     const char *starting_after, struct sandbox_key **out, size_t *n,
		     bool *has_more, struct sbx_error *err)
{
	struct store_key *keys = NULL;
	size_t count = 0;

	if (store_key_list_page(svc->store, account_id, limit, starting_after, &keys, &count,
				has_more, err) < 0)
		return -1;
	*out = calloc(count ? count : 1, sizeof(**out));
	if (!*out) {
		free(keys);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	}
	for (size_t i = 0; i < count; i++)
		key_from_store(&keys[i], &(*out)[i]);
	*n = count;
	free(keys);
	return 0;
}

int sandbox_key_revoke(struct sandbox_svc *svc, const char *account_id, const char *key_id,
		       const char *caller_scopes, struct sbx_error *err)
{
	struct store_key k;
	const char *missing = NULL;

	if (caller_scopes) {
		if (store_key_get(svc->store, account_id, key_id, &k, err) < 0)
			return -1;
		if (!sandbox_scopes_within(k.scopes, caller_scopes, &missing))
			return sbx_error_set(err, SBX_E_PERMISSION, NULL,
					     "key '%s' has the '%s' scope, which this key lacks; "
					     "revoke it with a key that has all of its scopes",
					     k.id, missing);
	}
	return store_key_revoke(svc->store, account_id, key_id, err);
}

static int account_view(struct sandbox_svc *svc, const struct store_account *a,
			struct sandbox_account *out, struct sbx_error *err)
{
	struct store_balance bal;

	if (billing_balance(svc->store, a->id, sbx_wall_ms(), &bal, err) < 0)
		return -1;
	memset(out, 0, sizeof(*out));
	snprintf(out->id, sizeof(out->id), "%s", a->id);
	snprintf(out->name, sizeof(out->name), "%s", a->name);
	out->created_at_ms = a->created_at_ms;
	out->balance_micro = bal.balance_micro;
	out->available_micro = bal.available_micro;
	return 0;
}

int sandbox_account_create(struct sandbox_svc *svc, const char *name, int64_t credit_micro,
			   struct sandbox_account *acct, struct sandbox_key *key,
			   char secret[static 80], struct sbx_error *err)
{
	struct store_account a;

	if (!name || !name[0] || strlen(name) >= sizeof(a.name))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "name",
				     "name must be 1..127 characters");
	if (credit_micro < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "credit_usd",
				     "credit must not be negative");
	if (store_account_create(svc->store, name, credit_micro, &a, err) < 0)
		return -1;
	if (sandbox_key_create(svc, a.id, NULL, NULL, key, secret, err) < 0)
		return -1;
	return account_view(svc, &a, acct, err);
}

int sandbox_account_add_credit(struct sandbox_svc *svc, const char *account_id,
			       int64_t amount_micro, struct sandbox_account *acct,
			       struct sbx_error *err)
{
	struct store_account a;

	if (store_credit_add(svc->store, account_id, amount_micro, err) < 0)
		return -1;
	if (store_account_get(svc->store, account_id, &a, err) < 0)
		return -1;
	return account_view(svc, &a, acct, err);
}

int sandbox_account_list(struct sandbox_svc *svc, struct sandbox_account **out, size_t *n,
			 struct sbx_error *err)
{
	struct store_account *accts = NULL;
	size_t count = 0;

	if (store_account_list(svc->store, &accts, &count, err) < 0)
		return -1;
	*out = calloc(count ? count : 1, sizeof(**out));
	if (!*out) {
		free(accts);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	}
	for (size_t i = 0; i < count; i++) {
		if (account_view(svc, &accts[i], &(*out)[i], err) < 0) {
			free(accts);
			free(*out);
			*out = NULL;
			return -1;
		}
	}
	*n = count;
	free(accts);
	return 0;
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
	pthread_mutex_lock(&svc->lock);
	for (size_t i = 0; i < out->n_sizes; i++) {
		for (struct live *l = svc->lives; l; l = l->next)
			out->sizes[i].running += strcmp(l->size, out->sizes[i].size) == 0;
		for (struct live *p = svc->pool; p; p = p->next)
			out->sizes[i].pooled +=
			    !p->dead && strcmp(p->size, out->sizes[i].size) == 0;
	}
	for (size_t i = 0; i < svc->n_hosts; i++) {
		out->booting += svc->hosts[i].booting;
		out->pool_booting += svc->hosts[i].pool_booting;
	}
	out->output_held = svc->output_held;
	pthread_mutex_unlock(&svc->lock);
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
	pthread_mutex_lock(&svc->lock);
	warm = svc->startup_warm;
	cold = svc->startup_cold;
	for (size_t i = 0; i < svc->cfg.n_pool && i < SANDBOX_MAX_SIZES; i++) {
		snprintf(out->pool[i].size, sizeof(out->pool[i].size), "%s", svc->cfg.pool[i].size);
		out->pool[i].target = svc->cfg.pool[i].count;
		out->pool[i].ready =
		    sandbox_pool_ready_locked(svc, NULL, svc->cfg.pool[i].size, NULL);
		out->n_pool++;
	}
	for (size_t i = 0; i < svc->cfg.n_execution_pool && i < SANDBOX_EXECUTION_RUNTIMES; i++) {
		const char *rt = svc->cfg.execution_pool[i].runtime;

		snprintf(out->exec_pool[i].runtime, sizeof(out->exec_pool[i].runtime), "%s", rt);
		out->exec_pool[i].target = svc->cfg.execution_pool[i].count;
		out->exec_pool[i].ready = sandbox_pool_ready_locked(svc, NULL, NULL, rt);
		out->n_exec_pool++;
	}
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
	struct live *l = NULL;
	struct host *h = NULL;
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

	/* 2. A guest (sandbox_guest_acquire, docs/hosts.md): a pooled guest
	 * of this size, named ours (a crash before activation leaves a domain
	 * naming a creating row, which reconcile destroys), or a cold boot:
	 * it queues for a boot slot, and the boot's deadline starts with the
	 * boot, so a burst of creates waiting their turn does not eat into
	 * it. Its capacity stays counted until it is linked below. */
	struct sandbox_acquire acq = {
	    .size = size,
	    .marker = row.id,
	    .queue_deadline_mono = sbx_mono_ms() + cfg->boot_queue_timeout_ms,
	    .why_failed = "the sandbox could not be created",
	};
	if (sandbox_guest_acquire(svc, &acq, err) < 0)
		goto err_abort;
	l = acq.l;
	h = acq.h;
	warm = acq.warm;
	if (warm)
		agentless_conn_send_time(l->conn, NULL);

	sandbox_fault_hit(cfg, SANDBOX_FAULT_CREATE_AFTER_HELLO);
	/* 4. Ready: billing starts now. */
	created_at = sbx_wall_ms();
	l->expires_at_ms = created_at + (int64_t)minutes * minute_ms(cfg);
	int64_t startup_ms = sbx_mono_ms() - t_req_mono;
	if (store_sandbox_activate_startup(svc->store, row.id, l->domain, created_at,
					   l->expires_at_ms, warm ? "warm" : "cold", startup_ms,
					   h->cfg->name, err) < 0) {
		sandbox_live_teardown(l, "the sandbox could not be created");
		goto err_capacity;
	}
	sandbox_fault_hit(cfg, SANDBOX_FAULT_CREATE_AFTER_ACTIVATE);
	startup_ms = sbx_mono_ms() - t_req_mono; /* ready and recorded */
	pthread_mutex_lock(&svc->lock);
	sandbox_live_link_locked(svc, l);
	sandbox_host_booting_locked(h, size, -1);
	/* its host went down while it booted: it ends like the others there */
	if (h->state == HOST_DOWN && !l->dead) {
		l->dead = true;
		l->dead_at_ms = h->last_seen_wall > created_at ? h->last_seen_wall : created_at;
	}
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
	sandbox_guest_uncount(svc, h, size);
err_abort:
	store_sandbox_abort(svc->store, row.id, NULL);
	if (err && err->code != SBX_E_SERVICE_UNAVAILABLE)
		sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL,
			      "the sandbox could not be started; nothing was charged, retry");
	return -1;
}

/* ----------------------------------------------------- idempotency keys */

void sandbox_create_result_release(struct sandbox_create_result *res)
{
	if (!res)
		return;
	free(res->body);
	res->body = NULL;
	res->body_len = 0;
}

static bool idempotency_key_valid(const char *key)
{
	size_t n = 0;

	for (; key[n]; n++)
		if ((unsigned char)key[n] < 0x20 || (unsigned char)key[n] > 0x7e)
			return false;
	return n >= 1 && n <= STORE_IDEM_KEY_MAX;
}

static void sleep_ms(int64_t ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int sandbox_create_idempotent(struct sandbox_svc *svc, const char *account_id,
			      const struct sandbox_create_req *req,
			      struct sandbox_create_result *res, struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	const struct sandbox_size *size;
	struct store_idem row = {0};
	char canon[96], hash[65];
	int minutes, claimed;
	int64_t deadline;

	memset(res, 0, sizeof(*res));
	if (create_params(cfg, req, &size, &minutes, err) < 0)
		return -1;
	if (!req->idempotency_key)
		return sandbox_create(svc, account_id, req, &res->view, err);
	if (!idempotency_key_valid(req->idempotency_key))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "Idempotency-Key",
				     "the Idempotency-Key header must be 1..%d printable ASCII "
				     "characters",
				     STORE_IDEM_KEY_MAX);
	/* The same request = the same parameters after defaults. */
	snprintf(canon, sizeof(canon), "POST /v1/sandboxes\nsize=%s\ntimeout_minutes=%d",
		 size->name, minutes);
	sbx_sha256_hex(canon, strlen(canon), hash);

	deadline = sbx_mono_ms() + cfg->boot_timeout_ms + 5000;
	for (;;) {
		claimed = store_idem_claim(svc->store, account_id, req->idempotency_key, hash,
					   sbx_wall_ms(), SANDBOX_IDEMPOTENCY_KEEP_MS, &row, err);
		if (claimed != 0)
			break;
		if (strcmp(row.request_hash, hash) != 0) {
			store_idem_release_row(&row);
			return sbx_error_set(err, SBX_E_IDEMPOTENCY_MISMATCH, "Idempotency-Key",
					     "this Idempotency-Key was used with other "
					     "parameters; use a new key for a new request");
		}
		if (row.done) {
			res->replayed = true;
			res->status = row.response_status;
			res->body = TAKE_PTR(row.response_body);
			res->body_len = row.response_len;
			if (!res->body) {
				res->body = strdup("");
				if (!res->body)
					return sbx_error_set(err, SBX_E_INTERNAL, NULL,
							     "out of memory");
			}
			return 0;
		}
		if (row.sandbox_id[0] && row.created_at_ms < svc->started_wall_ms) {
			/* Its create activated a sandbox, then the daemon died
			 * before the answer was remembered: answer with that
			 * sandbox (api/ renders and completes the key). */
			struct store_sandbox sb;

			if (store_sandbox_get(svc->store, account_id, row.sandbox_id, &sb, NULL) ==
				0 &&
			    sb.status != STORE_CREATING) {
				store_idem_release_row(&row);
				view_from_row(&sb, sbx_wall_ms(), &res->view);
				res->replayed = true;
				res->status = 201;
				return 0;
			}
		}
		store_idem_release_row(&row);
		/* The first request is still creating: wait for it. */
		if (sbx_mono_ms() >= deadline) {
			sbx_error_set(err, SBX_E_IDEMPOTENCY_CONFLICT, "Idempotency-Key",
				      "a request with this Idempotency-Key is still being "
				      "processed; retry later");
			err->retry_after_s = 2;
			return -1;
		}
		sleep_ms(100);
	}
	if (claimed < 0)
		return -1;
	if (sandbox_create(svc, account_id, req, &res->view, err) < 0) {
		/* A failed request is not remembered. */
		store_idem_release(svc->store, account_id, req->idempotency_key, NULL);
		return -1;
	}
	return 0;
}

int sandbox_idempotency_complete(struct sandbox_svc *svc, const char *account_id, const char *key,
				 const char *sandbox_id, int status, const char *body, size_t len,
				 struct sbx_error *err)
{
	if (status >= 400) {
		store_idem_release(svc->store, account_id, key, NULL);
		return 0;
	}
	if (store_idem_complete(svc->store, account_id, key, sandbox_id, status, body, len, err) <
	    0) {
		sbx_err(MOD, "idempotency key of %s (sandbox %s) could not be stored: %s",
			account_id, sandbox_id ? sandbox_id : "-", err ? err->message : "");
		return -1;
	}
	return 0;
}

void sandbox_idempotency_release(struct sandbox_svc *svc, const char *account_id, const char *key)
{
	store_idem_release(svc->store, account_id, key, NULL);
}

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
		pthread_mutex_lock(&svc->lock);
		struct live *l = sandbox_live_find_locked(svc, id);
		/* Another extend may have published a later expiry since we
		 * read the row: the in-memory expiry never moves backwards
		 * (the row keeps the larger one too, store_sandbox_extend). */
		if (l && want > l->expires_at_ms)
			l->expires_at_ms = want;
		pthread_mutex_unlock(&svc->lock);
	}
	return sandbox_get(svc, account_id, id, out, err);
}

/* ----------------------------------------------------------------- usage */

static int64_t month_start_utc(int64_t now_ms)
{
	time_t t = (time_t)(now_ms / 1000);
	struct tm tm;

	gmtime_r(&t, &tm);
	tm.tm_mday = 1;
	tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
	return (int64_t)timegm(&tm) * 1000;
}

static int64_t next_month_utc(int64_t month_ms)
{
	time_t t = (time_t)(month_ms / 1000);
	struct tm tm;

	gmtime_r(&t, &tm);
	tm.tm_mon += 1;
	return (int64_t)timegm(&tm) * 1000;
}

/* Add a share of usage to its size and, with buckets, to the bucket that
 * holds start_ms (rows and pieces never straddle a bucket). */
static void usage_add(struct sandbox_usage *u, int64_t step, const char *size, int64_t start_ms,
		      int64_t seconds, int64_t cost)
{
	if (start_ms < u->from_ms || start_ms >= u->to_ms)
		return;
	for (size_t k = 0; k < u->n_sizes; k++) {
		if (strcmp(u->by_size[k].size, size) == 0) {
			u->by_size[k].seconds += seconds;
			u->by_size[k].cost_micro += cost;
		}
	}
	if (step && u->n_buckets) {
		size_t b = (size_t)((start_ms - u->from_ms) / step);
		if (b < u->n_buckets) {
			u->buckets[b].seconds += seconds;
			u->buckets[b].cost_micro += cost;
		}
	}
}

struct usage_live {
	struct sandbox_usage *u;
	int64_t step;
	const char *size;
};

static int usage_live_piece(void *arg, int64_t hour_ms, int64_t seconds, int64_t cost)
{
	struct usage_live *l = arg;

	usage_add(l->u, l->step, l->size, hour_ms, seconds, cost);
	return 0;
}

/* The running sandboxes of an account (bounded by its live cap): their
 * cost so far, split over hours the way settlement will split it. */
static void usage_add_running(const struct store_sandbox *rows, size_t n, int64_t now, int64_t step,
			      struct sandbox_usage *u)
{
	for (size_t i = 0; i < n; i++) {
		const struct store_sandbox *r = &rows[i];
		int64_t end = r->expires_at_ms && now > r->expires_at_ms ? r->expires_at_ms : now;
		struct usage_live l = {u, step, r->size};

		if (end < r->created_at_ms)
			end = r->created_at_ms;
		store_usage_split(r->created_at_ms, end,
				  store_billed_seconds(end - r->created_at_ms),
				  billing_cost_so_far(r, now), usage_live_piece, &l);
	}
}

int sandbox_usage(struct sandbox_svc *svc, const char *account_id, int64_t from_ms, int64_t to_ms,
		  const char *granularity, struct sandbox_usage *out, struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	struct store_usage_snapshot snap;
	int64_t now = sbx_wall_ms(), step = 0, align;

	memset(out, 0, sizeof(*out));
	if (granularity && strcmp(granularity, "day") == 0)
		step = STORE_DAY_MS;
	else if (granularity && strcmp(granularity, "hour") == 0)
		step = STORE_HOUR_MS;
	else if (granularity)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "granularity",
				     "granularity must be 'day' or 'hour'");
	if (!from_ms)
		from_ms = month_start_utc(to_ms ? to_ms - 1 : now);
	if (!to_ms)
		to_ms = next_month_utc(month_start_utc(from_ms));
	if (to_ms <= from_ms)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "to", "'to' must be after 'from'");
	/* Usage is kept per UTC hour (per UTC day for daily buckets): the
	 * period widens to whole ones. */
	align = step ? step : STORE_HOUR_MS;
	from_ms -= ((from_ms % align) + align) % align;
	to_ms += (align - ((to_ms % align) + align) % align) % align;
	if (step && (to_ms - from_ms) / step > 10000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "granularity",
				     "that period has more than 10000 buckets; narrow it");

	/* Settled rows, totals, live count and running list in one snapshot:
	 * a sandbox that ends meanwhile counts once, settled or running. */
	if (store_usage_snapshot(svc->store, account_id, from_ms, to_ms, step, &snap, err) < 0)
		return -1;
	billing_balance_accrue(&snap.balance, snap.running, snap.n_running, now);
	out->balance_micro = snap.balance.balance_micro;
	out->reserved_micro = snap.balance.reserved_micro;
	out->available_micro = snap.balance.available_micro;
	out->consumed_micro = snap.balance.consumed_micro;
	out->running = snap.live;
	out->limit = cfg->max_sandboxes_per_account;
	out->from_ms = from_ms;
	out->to_ms = to_ms;
	out->n_sizes = cfg->n_sizes;
	for (size_t i = 0; i < cfg->n_sizes; i++)
		snprintf(out->by_size[i].size, sizeof(out->by_size[i].size), "%s",
			 cfg->sizes[i].name);
	if (step) {
		out->n_buckets = (size_t)((to_ms - from_ms) / step);
		out->buckets = calloc(out->n_buckets, sizeof(*out->buckets));
		if (!out->buckets) {
			store_usage_snapshot_release(&snap);
			return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		}
		for (size_t b = 0; b < out->n_buckets; b++)
			out->buckets[b].start_ms = from_ms + (int64_t)b * step;
	}
	for (size_t i = 0; i < snap.n_rows; i++)
		usage_add(out, step, snap.rows[i].size, snap.rows[i].start_ms, snap.rows[i].seconds,
			  snap.rows[i].cost_micro);
	usage_add_running(snap.running, snap.n_running, now, step, out);
	store_usage_snapshot_release(&snap);
	return 0;
}

void sandbox_usage_release(struct sandbox_usage *u)
{
	free(u->buckets);
	u->buckets = NULL;
	u->n_buckets = 0;
}
