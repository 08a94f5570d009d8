/* fleet: the live guest, a refcounted object with its own lock and an
 * explicit state (fleet.h "live guests"). Ending a guest closes its
 * channel and destroys its domain; its memory goes with its last ref. */
#include <stdio.h>
#include <stdlib.h>

#include "../agentless/agentless.h"
#include "../vmm/vmm.h"
#include "fleet-priv.h"

#define MOD "fleet"

struct fleet_guest *fleet_guest_new(struct fleet *f, struct fleet_host *host, const char *id)
{
	struct fleet_guest *g = calloc(1, sizeof(*g));

	if (!g)
		abort();
	pthread_mutex_init(&g->lock, NULL);
	g->fleet = f;
	g->host = host;
	g->state = FLEET_GUEST_BOOTING;
	g->refs = 1;
	snprintf(g->id, sizeof(g->id), "%s", id ? id : "");
	return g;
}

void fleet_guest_ref(struct fleet_guest *g)
{
	__atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
}

void fleet_guest_unref(struct fleet_guest *g)
{
	if (!g || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	/* the last ref: nobody else can reach it any more */
	agentless_conn_free(g->conn, "the sandbox's guest is gone");
	/* after the conn: failing the launcher exec writes into the prestart */
	if (g->prestart && g->prestart_free)
		g->prestart_free(g->prestart);
	vmm_vm_free(g->vm);
	fleet_metrics_free(g->metrics);
	pthread_mutex_destroy(&g->lock);
	free(g);
}

static bool move_legal(enum fleet_guest_state from, enum fleet_guest_state to)
{
	switch (from) {
	case FLEET_GUEST_BOOTING:
		return to == FLEET_GUEST_POOLED || to == FLEET_GUEST_RUNNING ||
		       to == FLEET_GUEST_ENDING;
	case FLEET_GUEST_POOLED:
		return to == FLEET_GUEST_RUNNING || to == FLEET_GUEST_ENDING;
	case FLEET_GUEST_RUNNING:
		return to == FLEET_GUEST_ENDING;
	case FLEET_GUEST_ENDING:
		return to == FLEET_GUEST_GONE;
	case FLEET_GUEST_GONE:
		return false;
	}
	return false;
}

/* Move to `to` (and keep `end` when it is ENDING) if legal. Call with
 * g->lock. */
static int move_locked(struct fleet_guest *g, enum fleet_guest_state to, enum fleet_end end)
{
	if (!move_legal(g->state, to))
		return -1;
	g->state = to;
	if (to == FLEET_GUEST_ENDING)
		g->end = end;
	return 0;
}

int fleet_guest_set_state(struct fleet_guest *g, enum fleet_guest_state to)
{
	int rc;

	pthread_mutex_lock(&g->lock);
	rc = move_locked(g, to, FLEET_END_OTHER);
	pthread_mutex_unlock(&g->lock);
	return rc;
}

enum fleet_guest_state fleet_guest_state(struct fleet_guest *g)
{
	enum fleet_guest_state s;

	pthread_mutex_lock(&g->lock);
	s = g->state;
	pthread_mutex_unlock(&g->lock);
	return s;
}

const char *fleet_guest_state_name(enum fleet_guest_state s)
{
	switch (s) {
	case FLEET_GUEST_BOOTING:
		return "booting";
	case FLEET_GUEST_POOLED:
		return "pooled";
	case FLEET_GUEST_RUNNING:
		return "running";
	case FLEET_GUEST_ENDING:
		return "ending";
	case FLEET_GUEST_GONE:
		return "gone";
	}
	return "unknown";
}

int fleet_guest_end_begin(struct fleet_guest *g, enum fleet_end end)
{
	int rc;

	pthread_mutex_lock(&g->lock);
	rc = move_locked(g, FLEET_GUEST_ENDING, end);
	pthread_mutex_unlock(&g->lock);
	return rc;
}

bool fleet_guest_end_claim(struct fleet_guest *g)
{
	bool did;

	pthread_mutex_lock(&g->lock);
	did = !g->end_queued;
	g->end_queued = true;
	pthread_mutex_unlock(&g->lock);
	return did;
}

void fleet_guest_end_unclaim(struct fleet_guest *g)
{
	pthread_mutex_lock(&g->lock);
	g->end_queued = false;
	pthread_mutex_unlock(&g->lock);
}

enum fleet_end fleet_guest_end_why(struct fleet_guest *g)
{
	enum fleet_end e;

	pthread_mutex_lock(&g->lock);
	e = g->end;
	pthread_mutex_unlock(&g->lock);
	return e;
}

void fleet_guest_end(struct fleet_guest *g, const char *why)
{
	struct sbx_error err;
	int64_t t0 = sbx_mono_ms(), t1;

	fleet_guest_end_begin(g, FLEET_END_OTHER); /* unless its owner did */
	/* in-flight execs and transfers fail now; pinned callers fail fast */
	agentless_conn_close(g->conn, why);
	t1 = sbx_mono_ms();
	if (g->vm && vmm_vm_destroy(g->vm, &err) < 0)
		sbx_err(MOD, "sandbox %s: destroying domain %s failed: %s", g->id, g->domain,
			err.message);
	fleet_guest_set_state(g, FLEET_GUEST_GONE);
	sbx_info(MOD, "sandbox %s: channel closed in %lld ms, domain destroyed in %lld ms", g->id,
		 (long long)(t1 - t0), (long long)(sbx_mono_ms() - t1));
}

int fleet_guest_save(struct fleet_guest *g, const char *why, uint32_t timeout_ms, int64_t *bytes,
		     struct sbx_error *err)
{
	int64_t t0 = sbx_mono_ms(), t1;
	int rc;

	fleet_guest_end_begin(g, FLEET_END_PAUSED); /* unless its owner did */
	agentless_conn_close(g->conn, why);
	t1 = sbx_mono_ms();
	rc = g->vm ? vmm_vm_save(g->vm, timeout_ms, bytes, err)
		   : sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "the guest has no domain");
	fleet_guest_set_state(g, FLEET_GUEST_GONE);
	sbx_info(MOD, "sandbox %s: channel closed in %lld ms, domain %s %s in %lld ms", g->id,
		 (long long)(t1 - t0), g->domain, rc == 0 ? "saved" : "NOT saved",
		 (long long)(sbx_mono_ms() - t1));
	return rc;
}

void fleet_guest_end_chain(struct fleet_guest *g, const char *why)
{
	while (g) {
		struct fleet_guest *next = g->next;

		fleet_guest_end(g, why);
		fleet_guest_unref(g);
		g = next;
	}
}

bool fleet_guest_mark_dead(struct fleet_guest *g, int64_t at_ms)
{
	bool did;

	pthread_mutex_lock(&g->lock);
	did = !g->dead;
	if (did) {
		g->dead = true;
		g->dead_at_ms = at_ms;
	}
	pthread_mutex_unlock(&g->lock);
	return did;
}

bool fleet_guest_dead(struct fleet_guest *g)
{
	bool d;

	pthread_mutex_lock(&g->lock);
	d = g->dead || g->state >= FLEET_GUEST_ENDING;
	pthread_mutex_unlock(&g->lock);
	return d;
}

bool fleet_guest_over(struct fleet_guest *g)
{
	return fleet_guest_state(g) >= FLEET_GUEST_ENDING;
}

int fleet_guest_usable(struct fleet_guest *g, const char *id, struct sbx_error *err)
{
	bool gone, suspended;

	if (!g)
		return sbx_error_set(err, SBX_E_SANDBOX_NOT_RUNNING, NULL,
				     "sandbox '%s' is no longer running", id);
	pthread_mutex_lock(&g->lock);
	gone = g->dead || g->state >= FLEET_GUEST_ENDING;
	suspended = g->suspended;
	pthread_mutex_unlock(&g->lock);
	if (gone)
		return sbx_error_set(err, SBX_E_SANDBOX_NOT_RUNNING, NULL,
				     "sandbox '%s' is no longer running", id);
	if (suspended) {
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

void fleet_guest_teardown(struct fleet_guest *g, const char *why)
{
	fleet_guest_end(g, why);
	fleet_guest_unref(g);
}

/* ------------------------------------------- channels and their breaks */

bool fleet_guest_host_lost(struct fleet_guest *g)
{
	struct fleet *f = g->fleet;
	struct vmm *v = g->host->vmm;
	bool eligible;
	unsigned gen;

	if (!v || g->host->cfg->transport != CONFIG_TRANSPORT_STREAM)
		return false; /* a socket channel is qemu's: it survives libvirtd */
	pthread_mutex_lock(&f->lock);
	eligible = !g->prestart && fleet_live_find_locked(f, g->id) == g;
	pthread_mutex_lock(&g->lock);
	eligible = eligible && g->state == FLEET_GUEST_RUNNING;
	gen = g->conn_gen;
	pthread_mutex_unlock(&g->lock);
	pthread_mutex_unlock(&f->lock);
	return eligible && (vmm_conn_gen(v) != gen || !vmm_connected(v));
}

int fleet_guest_channel_reopen(struct fleet_guest *g, unsigned *gen, struct sbx_error *err)
{
	struct sbx_channel ch;

	*gen = vmm_conn_gen(g->host->vmm);
	if (vmm_vm_open_channel(g->vm, agentless_conn_recv, g->conn, &ch, err) < 0)
		return -1;
	agentless_conn_attach(g->conn, ch, true);
	return 0;
}

void fleet_on_conn_broken(void *opaque, const char *why)
{
	struct fleet_guest *g = opaque;
	bool lost = fleet_guest_host_lost(g); /* before the lock: asks vmm */

	pthread_mutex_lock(&g->lock);
	g->breaks++;
	if (!g->dead && lost && g->state < FLEET_GUEST_ENDING) {
		if (!g->suspended) {
			g->suspended = true;
			g->suspended_at_ms = sbx_wall_ms();
			sbx_warn(MOD,
				 "sandbox %s: exec channel went with host %s's connection (%s); "
				 "reopening it when the host answers again",
				 g->id, g->host->cfg->name, why);
		}
	} else if (!g->dead) {
		g->dead = true;
		g->dead_at_ms = sbx_wall_ms();
		sbx_warn(MOD, "sandbox %s: exec channel broke: %s", g->id, why);
	}
	pthread_mutex_unlock(&g->lock);
	/* the owner's supervisor pass ends a dead one */
}

static void fleet_on_egress(void *opaque, struct agentless_tcp *t, const char *host, uint16_t port)
{
	struct fleet_guest *g = opaque;
	const struct fleet_hooks *hk = &g->fleet->hooks;

	hk->egress_open(hk->opaque, g, t, host, port);
}

struct agentless_conn *fleet_guest_conn_new(struct fleet_guest *g)
{
	const struct sandbox_config *cfg = g->fleet->cfg;
	struct agentless_limits lim = {
	    .backstop_grace_ms = cfg->exec_backstop_grace_ms,
	    .xfer_stall_ms = cfg->file_stall_timeout_ms,
	    .max_inflight = (uint32_t)cfg->max_execs_per_sandbox,
	};
	struct agentless_conn *c = agentless_conn_new(&lim, fleet_on_conn_broken, g);

	if (c && g->fleet->hooks.egress_open)
		agentless_set_tcp_accept(c, fleet_on_egress, g,
					 (unsigned)cfg->net_connections_per_sandbox);
	return c;
}
