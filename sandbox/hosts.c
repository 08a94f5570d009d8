/* sandbox: the service's side of its fleet (fleet/fleet.h): the hooks
 * the fleet calls (a host back, the drained hosts, a guest seen alive,
 * an execution guest's launcher, a test point in the boot), and the
 * operators' host calls (`sandboxd admin drain`, the host views).
 */
#include <stdio.h>
#include <string.h>

#include "../store/store.h"
#include "sandbox-priv.h"

#define MOD "host"

/* ---------------------------------------------------------------- hooks */

static int hook_host_back(void *opaque, struct fleet_host *h, struct sbx_error *err)
{
	return sandbox_reconcile_host(opaque, h, err);
}

static int hook_drains_read(void *opaque, bool *drained, size_t n)
{
	struct sandbox_svc *svc = opaque;
	char names[SANDBOX_MAX_HOSTS * 4][STORE_HOST_MAX];
	size_t k_n = 0;

	if (store_host_drains_list(svc->store, names, SBX_ARRAY_SIZE(names), &k_n, NULL) < 0)
		return -1;
	for (size_t i = 0; i < n && i < svc->cfg.n_hosts; i++) {
		drained[i] = false;
		for (size_t k = 0; k < k_n; k++)
			drained[i] |= strcmp(names[k], svc->cfg.hosts[i].name) == 0;
	}
	return 0;
}

static void hook_guest_seen(void *opaque, const char *id, int64_t at_ms)
{
	struct sandbox_svc *svc = opaque;

	store_sandbox_touch(svc->store, id, at_ms, NULL);
}

static int hook_prestart(void *opaque, struct fleet_guest *g, const char *runtime,
			 int64_t deadline_mono, struct sbx_error *err)
{
	return sandbox_execution_prestart(opaque, g, runtime, deadline_mono, err);
}

static void hook_boot_started(void *opaque)
{
	struct sandbox_svc *svc = opaque;

	sandbox_fault_hit(&svc->cfg, SANDBOX_FAULT_CREATE_AFTER_DOMAIN_START);
}

const struct fleet_hooks sandbox_fleet_hooks = {
    .host_back = hook_host_back,
    .drains_read = hook_drains_read,
    .guest_seen = hook_guest_seen,
    .prestart = hook_prestart,
    .prestart_waiting = sandbox_execution_prestart_waiting,
    .prestart_free = sandbox_execution_prestart_free,
    .boot_started = hook_boot_started,
    .egress_open = sandbox_egress_open,
};

/* ------------------------------------------------------------ operators */

int sandbox_host_drain(struct sandbox_svc *svc, const char *name, bool drained,
		       struct sbx_error *err)
{
	bool known = false;

	for (size_t i = 0; i < svc->cfg.n_hosts; i++)
		known |= strcmp(svc->cfg.hosts[i].name, name) == 0;
	if (!known)
		return sbx_error_set(err, SBX_E_NOT_FOUND, "host",
				     "no host '%.40s' in the config's hosts", name);
	return store_host_drain_set(svc->store, name, drained, sbx_wall_ms(), err);
}

int sandbox_host_drained(struct sandbox_svc *svc, const char *name, struct sbx_error *err)
{
	char names[SANDBOX_MAX_HOSTS * 4][STORE_HOST_MAX];
	size_t n = 0;

	if (store_host_drains_list(svc->store, names, SBX_ARRAY_SIZE(names), &n, err) < 0)
		return -1;
	for (size_t k = 0; k < n; k++)
		if (strcmp(names[k], name) == 0)
			return 1;
	return 0;
}

size_t sandbox_hosts_view(struct sandbox_svc *svc, struct sandbox_host_view *out, size_t max)
{
	struct fleet_host_view v[SANDBOX_MAX_HOSTS];
	size_t n;

	if (!svc->fleet)
		return 0;
	n = fleet_hosts_view(svc->fleet, v, SBX_MIN(max, (size_t)SANDBOX_MAX_HOSTS));
	for (size_t i = 0; i < n; i++) {
		struct sandbox_host_view *o = &out[i];

		memset(o, 0, sizeof(*o));
		snprintf(o->name, sizeof(o->name), "%s", v[i].name);
		snprintf(o->uri, sizeof(o->uri), "%s", v[i].uri);
		snprintf(o->state, sizeof(o->state), "%s",
			 v[i].state != FLEET_HOST_UP ? "down"
			 : v[i].draining	     ? "draining"
						     : "up");
		o->guests = v[i].guests;
		o->max_guests = v[i].max_guests;
		o->memory_used_mib = v[i].memory_used_mib;
		o->memory_total_mib = v[i].memory_total_mib;
		o->disk_used_gib = v[i].disk_used_gib;
		o->disk_total_gib = v[i].disk_total_gib;
		o->pool_ready = v[i].pool_ready;
		o->pool_booting = v[i].pool_booting;
		o->last_seen_ms_ago = v[i].last_seen_ms_ago;
	}
	return n;
}
