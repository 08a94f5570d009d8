/* fleet: the fleet object and the customers' live guests.
 *
 * f->lives holds one fleet_guest per running customer guest, with a ref of
 * its own, found by id through the registry. Threads reach a guest under
 * the fleet lock and pin it with a ref to use it after unlocking (exec
 * starts, file calls, the supervisor's passes, the liveness pinger);
 * exactly one end unlinks it (fleet_live_take: it takes the list's ref
 * and moves the guest to ENDING, never waiting for pins), closes its
 * channel (failing its in-flight execs, and every later call of a pinned
 * caller) and destroys its domain, with no lock held; the last unref
 * frees it. Callbacks from the channel's thread or libvirt's event loop
 * (a broken channel, a stopped domain) only mark the guest dead; the
 * owner's supervisor pass finds it and ends it. See fleet.h for the lock
 * order.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../agentless/agentless.h"
#include "../vmm/vmm.h"
#include "fleet-priv.h"

#define MOD "fleet"

/* ------------------------------------------------------------ the fleet */

struct fleet *fleet_new(const struct sandbox_config *cfg, const struct fleet_hooks *hooks)
{
	struct fleet *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->cfg = cfg;
	if (hooks)
		f->hooks = *hooks;
	f->ops = &fleet_guest_ops_real;
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	fleet_slots_init(&f->slots, cfg->max_concurrent_boots);
	f->n_hosts = SBX_MIN(cfg->n_hosts, (size_t)SANDBOX_MAX_HOSTS);
	for (size_t i = 0; i < f->n_hosts; i++) {
		struct fleet_host *h = &f->hosts[i];

		h->fleet = f;
		h->cfg = &cfg->hosts[i];
		h->local = vmm_uri_is_local(h->cfg->uri);
		h->state = FLEET_HOST_DOWN;
	}
	if (fleet_registry_init(&f->by_id) < 0 || fleet_liveness_init(f) < 0) {
		fleet_free(f);
		return NULL;
	}
	return f;
}

void fleet_free(struct fleet *f)
{
	if (!f)
		return;
	fleet_liveness_free(f);
	fleet_registry_free(&f->by_id);
	fleet_slots_destroy(&f->slots);
	pthread_cond_destroy(&f->cond);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

void fleet_set_work(struct fleet *f, struct sbx_workpool *work)
{
	f->work = work;
}

void fleet_stop(struct fleet *f)
{
	pthread_mutex_lock(&f->lock);
	f->stop = true;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
	fleet_slots_stop(&f->slots);
}

void fleet_size_counts(struct fleet *f, const char *size, int *running, int *pooled)
{
	*running = *pooled = 0;
	pthread_mutex_lock(&f->lock);
	for (struct fleet_guest *g = f->lives; g; g = g->next)
		*running += strcmp(g->size, size) == 0;
	for (struct fleet_guest *p = f->pool; p; p = p->next)
		*pooled += !fleet_guest_dead(p) && strcmp(p->size, size) == 0;
	pthread_mutex_unlock(&f->lock);
}

void fleet_boots(struct fleet *f, int *booting, int *pool_booting)
{
	*booting = *pool_booting = 0;
	pthread_mutex_lock(&f->lock);
	for (size_t i = 0; i < f->n_hosts; i++) {
		*booting += f->hosts[i].booting;
		*pool_booting += f->hosts[i].pool_booting;
	}
	pthread_mutex_unlock(&f->lock);
}

/* ---------------------------------------------------------------- lives */

static void link_locked(struct fleet *f, struct fleet_guest *g)
{
	fleet_guest_set_state(g, FLEET_GUEST_RUNNING);
	g->node.key = g->id;
	fleet_registry_put(&f->by_id, &g->node);
	g->next = f->lives;
	f->lives = g;
}

void fleet_live_link(struct fleet *f, struct fleet_guest *g)
{
	pthread_mutex_lock(&f->lock);
	link_locked(f, g);
	pthread_mutex_unlock(&f->lock);
}

void fleet_live_adopt(struct fleet *f, struct fleet_guest *g, struct fleet_host *h,
		      const struct sandbox_size *size, int64_t created_at_ms)
{
	pthread_mutex_lock(&f->lock);
	link_locked(f, g);
	fleet_host_booting_locked(h, size, -1);
	/* its host went down while it booted: it ends like the others there */
	if (h->state == FLEET_HOST_DOWN)
		fleet_guest_mark_dead(g, h->last_seen_wall > created_at_ms ? h->last_seen_wall
									   : created_at_ms);
	pthread_mutex_unlock(&f->lock);
}

/* Unlink and begin the end of the guest of `id`; with only_alive, not
 * one that is dead (or ending): it stays linked for the supervisor. */
static struct fleet_guest *live_take(struct fleet *f, const char *id, enum fleet_end end,
				     bool only_alive)
{
	struct fleet_guest **pp, *g;

	pthread_mutex_lock(&f->lock);
	g = fleet_live_find_locked(f, id);
	if (!g || (only_alive && fleet_guest_dead(g))) {
		pthread_mutex_unlock(&f->lock);
		return NULL;
	}
	fleet_registry_del(&f->by_id, id);
	for (pp = &f->lives; *pp; pp = &(*pp)->next) {
		if (*pp == g) {
			*pp = g->next;
			break;
		}
	}
	g->next = NULL;
	fleet_guest_end_begin(g, end);
	pthread_mutex_unlock(&f->lock);
	return g;
}

struct fleet_guest *fleet_live_take(struct fleet *f, const char *id, enum fleet_end end)
{
	return live_take(f, id, end, false);
}

struct fleet_guest *fleet_live_take_alive(struct fleet *f, const char *id, enum fleet_end end)
{
	return live_take(f, id, end, true);
}

struct fleet_guest *fleet_live_get(struct fleet *f, const char *id)
{
	struct fleet_guest *g;

	pthread_mutex_lock(&f->lock);
	g = fleet_live_find_locked(f, id);
	if (g)
		fleet_guest_ref(g);
	pthread_mutex_unlock(&f->lock);
	return g;
}

bool fleet_live_alive(struct fleet *f, const char *id)
{
	bool alive;

	pthread_mutex_lock(&f->lock);
	struct fleet_guest *g = fleet_live_find_locked(f, id);
	alive = g && !fleet_guest_dead(g);
	pthread_mutex_unlock(&f->lock);
	return alive;
}

struct fleet_guest *fleet_live_pin(struct fleet *f, const char *id, struct sbx_error *err)
{
	struct fleet_guest *g;

	pthread_mutex_lock(&f->lock);
	g = fleet_live_find_locked(f, id);
	if (fleet_guest_usable(g, id, err) < 0) {
		pthread_mutex_unlock(&f->lock);
		return NULL;
	}
	fleet_guest_ref(g);
	pthread_mutex_unlock(&f->lock);
	return g;
}

void fleet_live_unpin(struct fleet_guest *g)
{
	fleet_guest_unref(g);
}

struct fleet_guest **fleet_lives_pin(struct fleet *f, size_t *n)
{
	struct fleet_guest **gs;
	size_t cap = 0;

	*n = 0;
	pthread_mutex_lock(&f->lock);
	for (struct fleet_guest *g = f->lives; g; g = g->next)
		cap++;
	gs = cap ? calloc(cap, sizeof(*gs)) : NULL;
	for (struct fleet_guest *g = f->lives; gs && g; g = g->next) {
		fleet_guest_ref(g);
		gs[(*n)++] = g;
	}
	pthread_mutex_unlock(&f->lock);
	return gs;
}

void fleet_lives_unpin(struct fleet_guest **gs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fleet_guest_unref(gs[i]);
	free(gs);
}

bool fleet_live_any(struct fleet *f, char *id)
{
	bool any;

	pthread_mutex_lock(&f->lock);
	any = f->lives != NULL;
	if (any)
		snprintf(id, SANDBOX_ID_MAX, "%s", f->lives->id);
	pthread_mutex_unlock(&f->lock);
	return any;
}

int fleet_guest_reattach(struct fleet *f, struct fleet_host *h, const char *id, const char *domain,
			 const char *size, struct fleet_guest **out, struct sbx_error *err)
{
	const struct sandbox_size *sz = sandbox_config_size(f->cfg, size);
	struct fleet_guest *g = fleet_guest_new(f, h, id);

	g->prestart_free = f->hooks.prestart_free;
	snprintf(g->domain, sizeof(g->domain), "%s", domain);
	snprintf(g->size, sizeof(g->size), "%s", size);
	g->memory_mib = sz ? sz->memory_mib : 0;
	g->vm = vmm_vm_lookup(h->vmm, domain, err);
	if (!g->vm) {
		fleet_guest_unref(g);
		return -1;
	}
	g->conn = fleet_guest_conn_new(g);
	if (fleet_guest_channel_reopen(g, &g->conn_gen, err) < 0) {
		fleet_guest_teardown(g, "reattach failed");
		return -1;
	}
	*out = g;
	return 0;
}
