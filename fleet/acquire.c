/* fleet: one way to get a guest for a sandbox or an execution
 * (placement, a pooled guest or a cold boot within a boot slot (boot.c),
 * and the capacity undo on every failure step). Every call into vmm/ and
 * agentless/ for the guest goes through f->ops (boot.c; a unit test's
 * fake: tests/unit/test_acquire.c).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../agentless/agentless.h"
#include "../vmm/vmm.h"
#include "fleet-priv.h"

#define MOD "fleet"

void fleet_guest_uncount(struct fleet *f, struct fleet_host *h, const struct sandbox_size *size)
{
	pthread_mutex_lock(&f->lock);
	fleet_host_booting_locked(h, size, -1);
	pthread_mutex_unlock(&f->lock);
}

int fleet_host_admit(struct fleet *f, struct fleet_host *h, const struct sandbox_size *size,
		     struct sbx_error *err)
{
	struct fleet_guest *evicted = NULL;
	enum fleet_place_how how = FLEET_PLACE_ROOM;
	bool room;

	fleet_hosts_measure_disk(f);
	pthread_mutex_lock(&f->lock);
	room = fleet_host_room_locked(h, size, true, &how);
	while (room && how == FLEET_PLACE_EVICT) {
		struct fleet_guest *p = fleet_pool_evict_locked(f, h);

		if (!p) {
			room = false;
			break;
		}
		p->next = evicted;
		evicted = p;
		room = fleet_host_room_locked(h, size, true, &how);
	}
	if (room)
		fleet_host_booting_locked(h, size, +1);
	pthread_mutex_unlock(&f->lock);
	while (evicted) {
		struct fleet_guest *next = evicted->next;

		f->ops->teardown(evicted, "evicted from the warm pool");
		evicted = next;
	}
	if (room)
		return 0;
	sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
		      "host '%s' has no room for a guest of size '%s' right now; retry later",
		      h->cfg->name, size->name);
	err->retry_after_s = 10;
	return -1;
}

/* Place a guest of `size` (an execution of `runtime`: its pre-started
 * guests first; NULL for a sandbox) per docs/hosts.md and count it as
 * booting there. A pooled guest taken is returned in *warm_out (else
 * NULL: boot one on the host returned); pooled guests evicted to make
 * room are chained on *evicted (tear them down without the lock). NULL
 * with a 503 (Retry-After 10) when no host has room. Call with lock. */
static struct fleet_host *admit_locked(struct fleet *f, const struct fleet_acquire *a,
				       struct fleet_guest **warm_out, struct fleet_guest **evicted,
				       struct sbx_error *err)
{
	const struct sandbox_size *size = a->size;
	const char *runtime = a->runtime;
	struct fleet_host_snapshot snaps[SANDBOX_MAX_HOSTS];
	enum fleet_place_how how = FLEET_PLACE_ROOM;
	struct fleet_host *h;
	int i;

	*warm_out = NULL;
	for (size_t k = 0; k < f->n_hosts; k++) {
		fleet_host_snapshot_locked(&f->hosts[k], size, runtime, &snaps[k]);
		/* a template's boot: its host only, never a pooled guest */
		if (a->host && strcmp(f->hosts[k].cfg->name, a->host) != 0)
			snaps[k].up = false;
		if (a->snapshot_id)
			snaps[k].warm = 0;
	}
	i = fleet_place(snaps, f->n_hosts, size->memory_mib, size->disk_gib, &how);
	if (i < 0) {
		sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
			      "no host has capacity for another guest of size '%s' right now; "
			      "retry later",
			      size->name);
		err->retry_after_s = 10;
		return NULL;
	}
	h = &f->hosts[i];
	if (how == FLEET_PLACE_WARM) {
		if (runtime)
			*warm_out = fleet_pool_take_locked(f, h, NULL, runtime);
		if (!*warm_out)
			*warm_out = fleet_pool_take_locked(f, h, size->name, NULL);
		if (!*warm_out)
			how = FLEET_PLACE_EVICT; /* its one warm guest was not usable */
	}
	if (how == FLEET_PLACE_EVICT) {
		while (!fleet_host_fits_locked(h, size)) {
			struct fleet_guest *p = fleet_pool_evict_locked(f, h);

			if (!p) {
				sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
					      "no host has capacity for another guest of size "
					      "'%s' right now; retry later",
					      size->name);
				err->retry_after_s = 10;
				return NULL;
			}
			p->next = *evicted;
			*evicted = p;
		}
	}
	fleet_host_booting_locked(h, size, +1);
	return h;
}

/* 1. Placement and capacity (503, docs/hosts.md): a pooled guest (for an
 * execution, first one whose interpreter waits) is already counted, so
 * taking it needs no room; a cold boot may evict idle pooled guests of its
 * host first. 2w. A pooled guest: name it. 2c. Queue for a boot slot, then
 * boot, open the channel and wait for HELLO. Every failure after 1 gives
 * the capacity back. */
int fleet_acquire(struct fleet *f, struct fleet_acquire *a, struct sbx_error *err)
{
	const struct fleet_guest_ops *ops = f->ops;
	struct fleet_guest *l = NULL, *evicted = NULL;
	struct fleet_host *h;
	int64_t deadline;
	int rc;

	a->g = NULL;
	a->h = NULL;
	a->warm = a->no_room = false;
	fleet_hosts_measure_disk(f);
	pthread_mutex_lock(&f->lock);
	h = admit_locked(f, a, &l, &evicted, err);
	pthread_mutex_unlock(&f->lock);
	if (evicted) {
		sbx_info(MOD, "%s: evicting pooled guests to make room", a->marker);
		while (evicted) {
			struct fleet_guest *next = evicted->next;

			ops->teardown(evicted, "evicted from the warm pool");
			evicted = next;
		}
	}
	if (!h) {
		a->no_room = true;
		return -1;
	}
	if (l) {
		/* a crash now leaves a domain naming a creating row or no
		 * sandbox at all: reconcile destroys it */
		a->warm = true;
		snprintf(l->id, sizeof(l->id), "%s", a->marker);
		if (ops->set_sandbox_id(l, a->marker, err) < 0) {
			ops->teardown(l, a->why_failed);
			goto err_uncount;
		}
	} else {
		if (fleet_boot_slot_acquire(f, a->queue_deadline_mono, err) < 0)
			goto err_uncount;
		deadline = a->boot_deadline_mono ? a->boot_deadline_mono
						 : sbx_mono_ms() + f->cfg->boot_timeout_ms;
		rc = fleet_guest_boot(f, h, a->size, a->marker, a->snapshot_id, deadline, &l, err);
		fleet_boot_slot_release(f);
		if (rc < 0)
			goto err_uncount;
		fleet_guest_set_state(l, FLEET_GUEST_RUNNING); /* handed out */
	}
	a->g = l;
	a->h = h;
	return 0;

err_uncount:
	fleet_guest_uncount(f, h, a->size);
	return -1;
}
