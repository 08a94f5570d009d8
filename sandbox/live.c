/* sandbox/live.c: the customers' live guests, and who ends them.
 *
 * svc->lives holds one fleet_guest (fleet.h) per running customer guest,
 * with a ref of its own, found by id through the registry. Threads reach
 * a guest under svc->lock and pin it with a ref to use it after unlocking
 * (exec_start, file calls, the supervisor's passes, the liveness pinger);
 * exactly one end unlinks it (sandbox_live_take_locked: it takes the
 * list's ref and moves the guest to ENDING, never waiting for pins),
 * closes its channel (failing its in-flight execs, and every later call of
 * a pinned caller), destroys its domain and settles its row, all with no
 * lock held; the last unref frees it. Callbacks from the channel's thread
 * or libvirt's event loop (a broken channel, a stopped domain) only mark
 * the guest dead; a supervisor pass queues the end; a thread of the
 * blocking pool runs it (supervise.c). See sandbox-priv.h for the lock
 * order.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../agentless/agentless.h"
#include "../billing/billing.h"
#include "../store/store.h"
#include "../vmm/vmm.h"
#include "sandbox-priv.h"

#define MOD "sandbox"

/* ----------------------------------------------------------------- lives */

/* The guest a registry node is embedded in. */
#define guest_of(n) ((struct fleet_guest *)((char *)(n)-offsetof(struct fleet_guest, node)))

struct fleet_guest *sandbox_live_find_locked(struct sandbox_svc *svc, const char *id)
{
	struct fleet_node *n = fleet_registry_get(&svc->by_id, id);

	return n ? guest_of(n) : NULL;
}

void sandbox_live_link_locked(struct sandbox_svc *svc, struct fleet_guest *l)
{
	fleet_guest_set_state(l, FLEET_GUEST_RUNNING);
	l->node.key = l->id;
	fleet_registry_put(&svc->by_id, &l->node);
	l->next = svc->lives;
	svc->lives = l;
}

struct fleet_guest *sandbox_live_take_locked(struct sandbox_svc *svc, const char *id,
					     enum fleet_end end)
{
	struct fleet_node *n = fleet_registry_del(&svc->by_id, id);
	struct fleet_guest **pp, *l;

	if (!n)
		return NULL;
	l = guest_of(n);
	for (pp = &svc->lives; *pp; pp = &(*pp)->next) {
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	}
	l->next = NULL;
	fleet_guest_end_begin(l, end);
	return l;
}

struct fleet_guest *sandbox_live_pin(struct sandbox_svc *svc, const char *id, struct sbx_error *err)
{
	struct fleet_guest *l;

	pthread_mutex_lock(&svc->lock);
	l = sandbox_live_find_locked(svc, id);
	if (fleet_guest_usable(l, id, err) < 0) {
		pthread_mutex_unlock(&svc->lock);
		return NULL;
	}
	fleet_guest_ref(l);
	pthread_mutex_unlock(&svc->lock);
	return l;
}

void sandbox_live_unpin(struct fleet_guest *l)
{
	fleet_guest_unref(l);
}

void sandbox_live_teardown(struct fleet_guest *l, const char *why)
{
	fleet_guest_end(l, why);
	fleet_guest_unref(l);
}

bool sandbox_live_host_lost(struct fleet_guest *l)
{
	struct sandbox_svc *svc = l->owner;
	struct vmm *v = l->host->vmm;
	bool eligible;
	unsigned gen;

	if (!v || l->host->cfg->transport != CONFIG_TRANSPORT_STREAM)
		return false; /* a socket channel is qemu's: it survives libvirtd */
	pthread_mutex_lock(&svc->lock);
	eligible = !l->prestart && sandbox_live_find_locked(svc, l->id) == l;
	pthread_mutex_lock(&l->lock);
	eligible = eligible && l->state == FLEET_GUEST_RUNNING;
	gen = l->conn_gen;
	pthread_mutex_unlock(&l->lock);
	pthread_mutex_unlock(&svc->lock);
	return eligible && (vmm_conn_gen(v) != gen || !vmm_connected(v));
}

int sandbox_live_channel_reopen(struct fleet_guest *l, unsigned *gen, struct sbx_error *err)
{
	struct sbx_channel ch;

	*gen = vmm_conn_gen(l->host->vmm);
	if (vmm_vm_open_channel(l->vm, agentless_conn_recv, l->conn, &ch, err) < 0)
		return -1;
	agentless_conn_attach(l->conn, ch, true);
	return 0;
}

void sandbox_on_conn_broken(void *opaque, const char *why)
{
	struct fleet_guest *l = opaque;
	struct sandbox_svc *svc = l->owner;
	bool lost = sandbox_live_host_lost(l); /* before the lock: asks vmm */

	pthread_mutex_lock(&l->lock);
	l->breaks++;
	if (!l->dead && lost && l->state < FLEET_GUEST_ENDING) {
		if (!l->suspended) {
			l->suspended = true;
			l->suspended_at_ms = sbx_wall_ms();
			sbx_warn(MOD,
				 "sandbox %s: exec channel went with host %s's connection (%s); "
				 "reopening it when the host answers again",
				 l->id, l->host->cfg->name, why);
		}
	} else if (!l->dead) {
		l->dead = true;
		l->dead_at_ms = sbx_wall_ms();
		sbx_warn(MOD, "sandbox %s: exec channel broke: %s", l->id, why);
	}
	pthread_mutex_unlock(&l->lock);
	/* the timer queues its end */
	pthread_mutex_lock(&svc->lock);
	pthread_cond_broadcast(&svc->cond);
	pthread_mutex_unlock(&svc->lock);
}

void sandbox_on_domain_stopped(void *opaque, const char *name)
{
	struct sandbox_svc *svc = opaque;

	pthread_mutex_lock(&svc->lock);
	for (struct fleet_guest *l = svc->lives; l; l = l->next) {
		if (strcmp(l->domain, name) == 0 && fleet_guest_mark_dead(l, sbx_wall_ms()))
			sbx_warn(MOD, "sandbox %s: domain %s stopped", l->id, name);
	}
	sandbox_pool_domain_stopped_locked(svc, name);
	pthread_cond_broadcast(&svc->cond);
	pthread_mutex_unlock(&svc->lock);
}

static enum fleet_end end_of(enum store_status status)
{
	switch (status) {
	case STORE_FAILED:
		return FLEET_END_FAILED;
	case STORE_EXPIRED:
		return FLEET_END_EXPIRED;
	case STORE_DESTROYED:
		return FLEET_END_DELETED;
	default:
		return FLEET_END_OTHER;
	}
}

/* End a sandbox: tear its guest down (if this node runs it), then settle
 * the row with `status` at ended_at_ms. Safe to call concurrently and
 * repeatedly: the store settles exactly once. */
int sandbox_end(struct sandbox_svc *svc, const char *id, enum store_status status,
		int64_t ended_at_ms, const char *why, struct store_sandbox *out,
		struct sbx_error *err)
{
	struct fleet_guest *l;

	pthread_mutex_lock(&svc->lock);
	l = sandbox_live_take_locked(svc, id, end_of(status));
	pthread_mutex_unlock(&svc->lock);
	if (status != STORE_DESTROYED) {
		/* Expired or failed: the moment is known; record it first so the
		 * status reads right at once, then destroy the domain (~1 s). A
		 * crash in between leaves a domain without a live row, which
		 * reconcile destroys. */
		int rc = sandbox_settle(svc, id, status, ended_at_ms, out, err);

		if (l)
			sandbox_live_teardown(l, why);
		return rc < 0 ? -1 : 0;
	}
	if (l)
		sandbox_live_teardown(l, why);
	sandbox_fault_hit(&svc->cfg, SANDBOX_FAULT_DELETE_AFTER_DESTROY);
	if (sandbox_settle(svc, id, status, ended_at_ms, out, err) < 0)
		return -1;
	return 0;
}
