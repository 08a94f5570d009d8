/* sandbox: the service (sandbox_svc_new, sandbox_svc_free): its store,
 * its fleet, its supervisor; and its figures (/v1/limits, the metrics).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../agentless/agentless.h"
#include "../receipt/receipt.h"
#include "../store/store.h"
#include "../vmm/vmm.h"
#include "sandbox-priv.h"

#define MOD "sandbox"

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
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&svc->term_cond, &ca);
		pthread_condattr_destroy(&ca);
	}
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
	if (sandbox_network_init(svc, err) < 0)
		goto err_signer;
	if (sandbox_egress_init(svc) < 0 || sandbox_bw_init(svc) < 0) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		goto err_signer;
	}
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
	sandbox_egress_free(svc);
	sandbox_bw_free(svc);
	receipt_signer_free(svc->signer);
err_free:
	sandbox_output_budget_free(svc->output);
	pthread_cond_destroy(&svc->term_cond);
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
		sandbox_egress_stop(svc); /* every relay ends (its guest stays) */
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
	sandbox_egress_free(svc);
	sandbox_bw_free(svc);
	receipt_signer_free(svc->signer);
	store_close(svc->store);
	sandbox_output_budget_free(svc->output);
	pthread_cond_destroy(&svc->term_cond);
	pthread_mutex_destroy(&svc->lock);
	free(svc);
}

const struct sandbox_config *sandbox_svc_config(const struct sandbox_svc *svc)
{
	return &svc->cfg;
}

static void ring_record(struct startup_ring *r, int64_t ms)
{
	r->ms[r->pos] = ms;
	r->pos = (r->pos + 1) % SANDBOX_STARTUP_WINDOW;
	if (r->n < SANDBOX_STARTUP_WINDOW)
		r->n++;
}

void sandbox_startup_record_locked(struct sandbox_svc *svc, bool warm, int64_t ms)
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
