/* sandbox/live.c: who owns a live guest, and who ends it.
 *
 * svc->lives holds one `struct live` per running customer guest. Threads
 * reach a live under svc->lock and pin it with `refs` to use it after
 * unlocking (exec_start, the timer, the liveness pinger); exactly one ender
 * unlinks it (sandbox_live_take_locked, which waits for refs to drop),
 * closes its channel (failing its in-flight execs), destroys its domain and
 * settles its row, all with no lock held. Callbacks from the channel's
 * thread or libvirt's event loop (a broken channel, a stopped domain) only
 * mark the live dead; a supervisor pass queues the end; a thread of the
 * blocking pool runs it (supervise.c). See sandbox-priv.h for the lock order.
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

/* The live a registry node is embedded in. */
#define live_of(n) ((struct live *)((char *)(n)-offsetof(struct live, node)))

struct live *sandbox_live_find_locked(struct sandbox_svc *svc, const char *id)
{
	struct fleet_node *n = fleet_registry_get(&svc->by_id, id);

	return n ? live_of(n) : NULL;
}

void sandbox_live_link_locked(struct sandbox_svc *svc, struct live *l)
{
	l->node.key = l->id;
	fleet_registry_put(&svc->by_id, &l->node);
	l->next = svc->lives;
	svc->lives = l;
}

/* Unlink a live and wait until no exec_start uses it. Returns it, owned by
 * the caller, or NULL when someone else already took it. Call with lock. */
struct live *sandbox_live_take_locked(struct sandbox_svc *svc, const char *id)
{
	struct fleet_node *n = fleet_registry_del(&svc->by_id, id);
	struct live **pp, *l;

	if (!n)
		return NULL;
	l = live_of(n);
	for (pp = &svc->lives; *pp; pp = &(*pp)->next) {
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	}
	l->unlinked = true;
	while (l->refs > 0)
		pthread_cond_wait(&svc->cond, &svc->lock);
	return l;
}

int sandbox_live_usable_locked(struct live *l, const char *id, struct sbx_error *err)
{
	if (!l || l->dead || l->unlinked)
		return sbx_error_set(err, SBX_E_SANDBOX_NOT_RUNNING, NULL,
				     "sandbox '%s' is no longer running", id);
	if (l->suspended) {
		sbx_error_set(
		    err, SBX_E_SERVICE_UNAVAILABLE, NULL,
		    "the connection to the host of sandbox '%s' was lost; the sandbox keeps "
		    "running and is reachable again once its host answers: retry",
		    id);
		if (err)
			err->retry_after_s = 2;
		return -1;
	}
	return 0;
}

void sandbox_live_unref_locked(struct sandbox_svc *svc, struct live *l)
{
	if (--l->refs == 0)
		pthread_cond_broadcast(&svc->cond);
}

void sandbox_live_teardown_chain(struct live *l, const char *why)
{
	while (l) {
		struct live *next = l->next;

		sandbox_live_teardown(l, why);
		l = next;
	}
}

void sandbox_live_teardown(struct live *l, const char *why)
{
	struct sbx_error err;
	int64_t t0 = sbx_mono_ms(), t1;

	if (l->conn)
		agentless_conn_free(l->conn, why);
	/* after the conn: freeing it fails the launcher exec into it */
	sandbox_execution_prestart_free(l->prestart);
	t1 = sbx_mono_ms();
	if (l->vm) {
		if (vmm_vm_destroy(l->vm, &err) < 0)
			sbx_err(MOD, "sandbox %s: destroying domain %s failed: %s", l->id,
				l->domain, err.message);
		vmm_vm_free(l->vm);
	}
	sbx_info(MOD, "sandbox %s: channel closed in %lld ms, domain destroyed in %lld ms", l->id,
		 (long long)(t1 - t0), (long long)(sbx_mono_ms() - t1));
	free(l);
}

bool sandbox_live_host_lost(struct live *l)
{
	struct sandbox_svc *svc = l->svc;
	struct vmm *v = l->host->vmm;
	bool eligible;
	unsigned gen;

	if (!v || l->host->cfg->transport != CONFIG_TRANSPORT_STREAM)
		return false; /* a socket channel is qemu's: it survives libvirtd */
	pthread_mutex_lock(&svc->lock);
	eligible =
	    !l->pooled && !l->prestart && !l->unlinked && sandbox_live_find_locked(svc, l->id) == l;
	gen = l->conn_gen;
	pthread_mutex_unlock(&svc->lock);
	return eligible && (vmm_conn_gen(v) != gen || !vmm_connected(v));
}

int sandbox_live_channel_reopen(struct live *l, unsigned *gen, struct sbx_error *err)
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
	struct live *l = opaque;
	struct sandbox_svc *svc = l->svc;
	bool lost = sandbox_live_host_lost(l); /* before the lock: asks vmm */

	pthread_mutex_lock(&svc->lock);
	l->breaks++;
	if (!l->dead && lost && !l->unlinked) {
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
	pthread_cond_broadcast(&svc->cond);
	pthread_mutex_unlock(&svc->lock);
}

void sandbox_on_domain_stopped(void *opaque, const char *name)
{
	struct sandbox_svc *svc = opaque;

	pthread_mutex_lock(&svc->lock);
	for (struct live *l = svc->lives; l; l = l->next) {
		if (strcmp(l->domain, name) == 0 && !l->dead) {
			l->dead = true;
			l->dead_at_ms = sbx_wall_ms();
			sbx_warn(MOD, "sandbox %s: domain %s stopped", l->id, name);
		}
	}
	sandbox_pool_domain_stopped_locked(svc, name);
	pthread_cond_broadcast(&svc->cond);
	pthread_mutex_unlock(&svc->lock);
}

/* End a sandbox: tear its guest down (if this node runs it), then settle
 * the row with `status` at ended_at_ms. Safe to call concurrently and
 * repeatedly: the store settles exactly once. */
int sandbox_end(struct sandbox_svc *svc, const char *id, enum store_status status,
		int64_t ended_at_ms, const char *why, struct store_sandbox *out,
		struct sbx_error *err)
{
	struct live *l;

	pthread_mutex_lock(&svc->lock);
	l = sandbox_live_take_locked(svc, id);
	if (l)
		l->ending = status;
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
