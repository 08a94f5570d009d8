/* fleet: the warm pools' guests, the list (f->pool) and what is asked of
 * it under the fleet lock: count, take, evict, drop. Its upkeep (boots,
 * recycling) is pool.c's. */
#include <string.h>

#include "../agentless/agentless.h"
#include "fleet-priv.h"

#define MOD "pool"

/* Usable: not dead, and an execution guest's launcher still waits. Call
 * with lock. */
bool fleet_pool_usable_locked(struct fleet *f, struct fleet_guest *p)
{
	return !fleet_guest_dead(p) && (!p->runtime[0] || (f->hooks.prestart_waiting &&
							   f->hooks.prestart_waiting(p->prestart)));
}

static bool pool_kind(const struct fleet_guest *p, const char *size, const char *runtime)
{
	return runtime ? strcmp(p->runtime, runtime) == 0
		       : !p->runtime[0] && strcmp(p->size, size) == 0;
}

int fleet_pool_ready_locked(struct fleet *f, struct fleet_host *h, const char *size,
			    const char *runtime)
{
	int n = 0;

	for (struct fleet_guest *p = f->pool; p; p = p->next)
		if ((!h || p->host == h) && pool_kind(p, size, runtime) &&
		    fleet_pool_usable_locked(f, p))
			n++;
	return n;
}

struct fleet_guest *fleet_pool_take_locked(struct fleet *f, struct fleet_host *h, const char *size,
					   const char *runtime)
{
	struct fleet_guest **pp, *oldest = NULL, **oldest_pp = NULL;

	/* The oldest ready one: it has the least idle time left. */
	for (pp = &f->pool; *pp; pp = &(*pp)->next) {
		struct fleet_guest *p = *pp;

		if ((h && p->host != h) || !pool_kind(p, size, runtime) ||
		    !fleet_pool_usable_locked(f, p) || !agentless_conn_alive(p->conn))
			continue;
		if (!oldest || p->pooled_at_mono < oldest->pooled_at_mono) {
			oldest = p;
			oldest_pp = pp;
		}
	}
	if (!oldest)
		return NULL;
	*oldest_pp = oldest->next;
	oldest->next = NULL;
	fleet_guest_set_state(oldest, FLEET_GUEST_RUNNING);
	return oldest;
}

struct fleet_guest *fleet_pool_evict_locked(struct fleet *f, struct fleet_host *h)
{
	for (struct fleet_guest **pp = &f->pool; *pp; pp = &(*pp)->next) {
		struct fleet_guest *p = *pp;

		if (p->host != h)
			continue;
		*pp = p->next;
		p->next = NULL;
		return p;
	}
	return NULL;
}

struct fleet_guest *fleet_pool_drop_host_locked(struct fleet *f, struct fleet_host *h)
{
	struct fleet_guest *out = NULL, *p;

	while ((p = fleet_pool_evict_locked(f, h)) != NULL) {
		p->next = out;
		out = p;
	}
	return out;
}

void fleet_pool_count_locked(struct fleet *f, struct fleet_host *h, int *guests, uint64_t *mib,
			     uint64_t *disk_gib)
{
	*guests = h->pool_booting;
	*mib = h->pool_booting_mib;
	*disk_gib = h->pool_booting_disk_gib;
	for (struct fleet_guest *p = f->pool; p; p = p->next) {
		if (p->host != h)
			continue;
		(*guests)++;
		*mib += p->memory_mib;
		*disk_gib += fleet_host_disk_gib(h, sandbox_config_size(f->cfg, p->size));
	}
}

void fleet_pool_domain_stopped_locked(struct fleet *f, const char *name)
{
	for (struct fleet_guest *p = f->pool; p; p = p->next) {
		if (strcmp(p->domain, name) == 0 && fleet_guest_mark_dead(p, sbx_wall_ms()))
			sbx_warn(MOD, "pooled guest %s stopped", name);
	}
}

int fleet_pool_ready(struct fleet *f, const char *size, const char *runtime)
{
	int n;

	pthread_mutex_lock(&f->lock);
	n = fleet_pool_ready_locked(f, NULL, size, runtime);
	pthread_mutex_unlock(&f->lock);
	return n;
}
