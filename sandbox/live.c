/* sandbox/live.c: the customers' live guests, and who ends them.
 *
 * svc->lives holds one fleet_guest (fleet.h) per running customer guest,
 * with a ref of its own, found by id through the registry. Threads reach
 * a guest under svc->lock and pin it with a ref to use it after unlocking
 * (exec_start, file calls, the timer, the liveness pinger); exactly one
 * ender unlinks it (sandbox_live_take_locked: it takes the list's ref and
 * moves the guest to ENDING, never waiting for pins), closes its channel
 * (failing its in-flight execs, and every later call of a pinned caller),
 * destroys its domain and settles its row, all with no lock held; the
 * last unref frees it. Callbacks from the channel's thread or libvirt's
 * event loop (a broken channel, a stopped domain) only mark the guest
 * dead; the timer queues the end; an ender thread runs it. See
 * sandbox-priv.h for the lock order.
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

#define MOD		"sandbox"
#define TICK_MS		200
#define HEARTBEAT_MS	5000
#define SETTLE_RETRY_MS 1000
#define TIME_SYNC_MS	60000

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

/* ------------------------------------------------------------ the timer */

/* The timer picks, under the lock, which sandboxes must end (queued for
 * the enders) and which guests to tick, each pinned with a ref; it ticks
 * them, writes heartbeats and syncs clocks with no lock held. A tick may
 * complete execs: their callbacks take svc->lock themselves. */
static void timer_pass(struct sandbox_svc *svc, int64_t *last_beat, int64_t *last_sync,
		       int64_t *last_retry)
{
	int64_t now = sbx_wall_ms(), mono = sbx_mono_ms();
	bool beat = mono - *last_beat >= HEARTBEAT_MS, sync = mono - *last_sync >= TIME_SYNC_MS;
	_cleanup_free_ struct fleet_guest **picked = NULL;
	size_t n = 0, cap = 0;

	pthread_mutex_lock(&svc->lock);
	for (struct fleet_guest *l = svc->lives; l; l = l->next)
		cap++;
	picked = cap ? calloc(cap, sizeof(*picked)) : NULL;
	for (struct fleet_guest *l = svc->lives; l; l = l->next) {
		bool dead;
		int64_t dead_at;

		pthread_mutex_lock(&l->lock);
		dead = l->dead;
		dead_at = l->dead_at_ms;
		pthread_mutex_unlock(&l->lock);
		if (dead || l->expires_at_ms <= now) {
			/* A guest that died after its expiry is billed to expiry
			 * (billing caps at expires_at anyway). */
			sandbox_end_queue_locked(svc, l, dead ? STORE_FAILED : STORE_EXPIRED,
						 dead ? dead_at : l->expires_at_ms);
			continue;
		}
		if (picked && n < cap) {
			fleet_guest_ref(l);
			picked[n++] = l;
		}
	}
	pthread_mutex_unlock(&svc->lock);

	for (size_t i = 0; i < n; i++) {
		struct fleet_guest *l = picked[i];

		agentless_conn_tick(l->conn, mono);
		/* With liveness on, last_seen_at moves on answered pings only. */
		if (beat && !svc->cfg.liveness_interval_ms && agentless_conn_alive(l->conn))
			store_sandbox_touch(svc->store, l->id, now, NULL);
		if (sync)
			agentless_conn_send_time(l->conn, NULL);
	}

	for (size_t i = 0; i < n; i++)
		fleet_guest_unref(picked[i]);
	/* ends the store refused: again, about every second */
	if (mono - *last_retry >= SETTLE_RETRY_MS) {
		*last_retry = mono;
		sandbox_settles_retry(svc);
	}
	if (beat)
		*last_beat = mono;
	if (sync) {
		*last_sync = mono;
		store_idem_prune(svc->store, now - SANDBOX_IDEMPOTENCY_KEEP_MS, NULL);
	}
}

void *sandbox_timer_main(void *arg)
{
	struct sandbox_svc *svc = arg;
	int64_t last_beat = sbx_mono_ms(), last_sync = sbx_mono_ms(), last_retry = sbx_mono_ms();

	for (;;) {
		struct timespec ts;

		pthread_mutex_lock(&svc->lock);
		if (svc->stop) {
			pthread_mutex_unlock(&svc->lock);
			break;
		}
		ts = sbx_timespec_in(CLOCK_REALTIME, TICK_MS);
		pthread_cond_timedwait(&svc->cond, &svc->lock, &ts);
		bool stop = svc->stop;
		pthread_mutex_unlock(&svc->lock);
		if (stop)
			break;
		timer_pass(svc, &last_beat, &last_sync, &last_retry);
	}
	return NULL;
}

/* ------------------------------------------------------------ the enders */

void sandbox_end_queue_locked(struct sandbox_svc *svc, struct fleet_guest *l,
			      enum store_status status, int64_t at_ms)
{
	struct end_job *j;

	if (l->end_queued)
		return; /* (a guest taken by an ender is no longer in svc->lives) */
	j = calloc(1, sizeof(*j));
	if (!j)
		return; /* the next timer pass tries again */
	l->end_queued = true;
	snprintf(j->id, sizeof(j->id), "%s", l->id);
	j->status = status;
	j->at_ms = at_ms;
	*svc->ends_tail = j;
	svc->ends_tail = &j->next;
	pthread_cond_broadcast(&svc->cond);
}

/* An ender: takes queued ends one at a time and runs them with no lock
 * held (closing the channel, destroying the domain, settling). A libvirt
 * call that hangs delays only the ends behind it, never the timer's ticks
 * or a request. At stop it finishes the queue, then returns. */
void *sandbox_ender_main(void *arg)
{
	struct sandbox_svc *svc = arg;
	struct sbx_error err;

	pthread_mutex_lock(&svc->lock);
	for (;;) {
		struct end_job *j = svc->ends;

		if (!j) {
			if (svc->stop)
				break;
			pthread_cond_wait(&svc->cond, &svc->lock);
			continue;
		}
		svc->ends = j->next;
		if (!svc->ends)
			svc->ends_tail = &svc->ends;
		pthread_mutex_unlock(&svc->lock);

		const char *why = j->status == STORE_FAILED
				      ? "the sandbox's guest stopped unexpectedly"
				      : "the sandbox expired while the command ran";
		sbx_info(MOD, "sandbox %s: ending as %s", j->id, store_status_name(j->status));
		if (sandbox_end(svc, j->id, j->status, j->at_ms, why, NULL, &err) < 0)
			sbx_err(MOD, "sandbox %s: settling failed: %s", j->id, err.message);
		free(j);
		pthread_mutex_lock(&svc->lock);
	}
	pthread_mutex_unlock(&svc->lock);
	return NULL;
}
