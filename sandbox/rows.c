/* sandbox: a sandbox's row as the use cases read it (visible to its
 * tenant, running, as the API's view), a guest relinked to its row (a
 * restart's reattach, a resume, an undone pause), and the transit claims that keep
 * one pause, resume or retention end per sandbox at a time (under
 * svc->lock, a leaf). Below the use cases: sandboxes.c, pause.c,
 * reconcile.c and the others read rows here, and nothing here calls them.
 */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "../billing/billing.h"
#include "../store/store.h"
#include "sandbox-priv.h"

#define MOD "sandbox"

void sandbox_view_from_row(const struct store_sandbox *row, int64_t now_ms, struct sandbox_view *v)
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
	snprintf(v->metadata, sizeof(v->metadata), "%s", row->metadata[0] ? row->metadata : "{}");
	v->paused_at_ms = row->status == STORE_PAUSED ? row->paused_at_ms : 0;
	v->paused_bytes = row->status == STORE_PAUSED ? row->paused_bytes : 0;
	v->paused_ms = row->paused_ms;
	snprintf(v->network, sizeof(v->network), "%s",
		 row->network[0] ? row->network : STORE_NETWORK_NONE);
	v->net_bytes_in = row->net_bytes_in;
	v->net_bytes_out = row->net_bytes_out;
	snprintf(v->snapshot, sizeof(v->snapshot), "%s", row->snapshot_id);
	v->timeout_action = row->timeout_action == STORE_ON_TIMEOUT_PAUSE
				? SANDBOX_ON_TIMEOUT_PAUSE
				: SANDBOX_ON_TIMEOUT_EXPIRE;
}

struct fleet_guest *sandbox_pin(struct sandbox_svc *svc, const char *id, struct sbx_error *err)
{
	if (svc->fleet) {
		struct fleet_guest *l = fleet_live_pin(svc->fleet, id, err);

		if (!l && sandbox_in_transit(svc, id))
			sandbox_transit_error(id, err);
		return l;
	}
	fleet_guest_usable(NULL, id, err);
	return NULL;
}

bool sandbox_hold_spent(const struct store_sandbox *row, int64_t now_ms)
{
	return row->net_price_micro_per_gb > 0 &&
	       billing_cost_so_far(row, now_ms) >= row->hold_micro;
}

bool sandbox_net_count(struct sandbox_svc *svc, const char *id, const char *what, uint64_t in,
		       uint64_t out, bool check_hold)
{
	struct sbx_error err = {0};
	struct store_sandbox *row;
	bool spent = false;

	if (store_sandbox_net_add(svc->store, id, (int64_t)in, (int64_t)out, &err) < 0)
		sbx_warn(MOD, "sandbox %s: %s bytes not metered (%llu in, %llu out): %s", id, what,
			 (unsigned long long)in, (unsigned long long)out, err.message);
	if (!check_hold)
		return false;
	row = malloc(sizeof(*row));
	spent = row && store_sandbox_get(svc->store, NULL, id, row, NULL) == 0 &&
		sandbox_hold_spent(row, sbx_wall_ms());
	free(row);
	return spent;
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
	if (row->status == STORE_PAUSED) {
		sbx_error_set(err, SBX_E_SANDBOX_PAUSED, NULL,
			      "sandbox '%s' is paused; resume it first (POST "
			      "/v1/sandboxes/%s/resume)",
			      id, id);
		return -1;
	}
	if (row->status != STORE_RUNNING || row->expires_at_ms <= now)
		return sbx_error_set(
		    err, SBX_E_SANDBOX_NOT_RUNNING, NULL, "sandbox '%s' is %s; create a new one",
		    id, row->status == STORE_RUNNING ? "expired" : store_status_name(row->status));
	return 0;
}

/* ------------------------------------------------------------ relink */

int sandbox_relink(struct sandbox_svc *svc, struct fleet_host *h, const struct store_sandbox *row,
		   struct sbx_error *err)
{
	struct fleet_guest *l;

	if (fleet_guest_reattach(svc->fleet, h, row->id, row->domain, row->size, &l, err) < 0)
		return -1;
	l->expires_at_ms = row->expires_at_ms; /* not shared yet */
	fleet_live_link(svc->fleet, l);
	sbx_info("sandbox", "sandbox %s: reattached to domain %s on host %s", row->id, row->domain,
		 h->cfg->name);
	return 0;
}

/* ----------------------------------------------------------- transit */

bool sandbox_in_transit(struct sandbox_svc *svc, const char *id)
{
	bool in = false;

	pthread_mutex_lock(&svc->lock);
	for (size_t i = 0; i < svc->n_transit && !in; i++)
		in = strcmp(svc->transit[i], id) == 0;
	pthread_mutex_unlock(&svc->lock);
	return in;
}

int sandbox_transit_error(const char *id, struct sbx_error *err)
{
	sbx_error_clear(err);
	sbx_error_set(err, SBX_E_SANDBOX_PAUSED, NULL,
		      "sandbox '%s' is being paused or resumed; retry shortly", id);
	if (err)
		err->retry_after_s = 2;
	return -1;
}

/* Claim `id` for one operation: 0, or -1 with 409 (another one runs) or
 * 503 (too many at once). */
int sandbox_transit_enter(struct sandbox_svc *svc, const char *id, struct sbx_error *err)
{
	int rc = 0;

	pthread_mutex_lock(&svc->lock);
	for (size_t i = 0; i < svc->n_transit; i++)
		if (strcmp(svc->transit[i], id) == 0)
			rc = 1;
	if (rc == 0 && svc->n_transit == SANDBOX_TRANSIT_MAX)
		rc = 2;
	if (rc == 0)
		snprintf(svc->transit[svc->n_transit++], SANDBOX_ID_MAX, "%s", id);
	pthread_mutex_unlock(&svc->lock);
	if (rc == 1)
		return sandbox_transit_error(id, err);
	if (rc == 2) {
		sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
			      "too many pauses and resumes at once; retry shortly");
		if (err)
			err->retry_after_s = 2;
		return -1;
	}
	return 0;
}

void sandbox_transit_leave(struct sandbox_svc *svc, const char *id)
{
	pthread_mutex_lock(&svc->lock);
	for (size_t i = 0; i < svc->n_transit; i++) {
		if (strcmp(svc->transit[i], id) == 0) {
			svc->n_transit--;
			if (i != svc->n_transit)
				memcpy(svc->transit[i], svc->transit[svc->n_transit],
				       SANDBOX_ID_MAX);
			break;
		}
	}
	pthread_mutex_unlock(&svc->lock);
}
