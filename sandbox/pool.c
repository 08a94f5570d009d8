/* sandbox: the warm pool (docs/pool.md). Guests of the sizes the config
 * names are booted ahead of demand, wait until they said HELLO, and sit in
 * svc->pool until a create takes one (sandbox_pool_take_locked). A pooled
 * guest is handed out once and never comes back: a customer's guest is
 * destroyed when its sandbox ends.
 *
 * The supervisor's "pool" task (sandbox_pool_pass, every 200 ms) drops
 * pooled guests that died or idled longer than pool_max_idle_s (their
 * teardown is one job of the blocking pool, one at a time) and queues
 * boots for sizes below their target. A pool boot takes a boot slot only
 * when no customer create waits for one and fewer than pool_max_boots
 * pool boots run on that host, so customers go first; it also needs host
 * capacity without evicting anything. Each boot is a job of the blocking
 * pool; the task itself never waits on libvirt or a guest.
 *
 * Execution guests (execution_pool, per runtime) are booted the same way
 * (of execution_size), then get their launcher started
 * (sandbox_execution_prestart: the interpreter starts and waits for the
 * code) before they join the pool with l->runtime set; only an execution
 * of that runtime takes one (sandbox_pool_take_runtime_locked). One whose
 * launcher ended meanwhile is recycled like a dead guest.
 *
 * Pools are per host (docs/hosts.md): each host that is up and not
 * drained keeps the configured counts of its own, every pooled guest
 * carries its host (l->host), and a host that goes down or is drained has
 * its pooled guests dropped.
 *
 * Pooled guests carry "pool:<size>" (execution guests "pool:<runtime>")
 * as the sandbox id in their metadata,
 * which names no sandbox row: a restarted daemon's reconcile destroys them
 * like any other domain without a live row, and the new pool refills.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sandbox-priv.h"

#define MOD		"pool"
#define POOL_BACKOFF_MS 5000

struct pool_boot {
	struct sandbox_svc *svc;
	struct fleet_host *host;
	const struct sandbox_size *size;
	const char *runtime; /* in svc->cfg.execution_pool, or NULL */
};

/* Usable: not dead, and an execution guest's launcher still waits. Call
 * with lock. */
static bool pool_usable_locked(struct fleet_guest *p)
{
	return !fleet_guest_dead(p) &&
	       (!p->runtime[0] || sandbox_execution_prestart_waiting(p->prestart));
}

static bool pool_kind(const struct fleet_guest *p, const char *size, const char *runtime)
{
	return runtime ? strcmp(p->runtime, runtime) == 0
		       : !p->runtime[0] && strcmp(p->size, size) == 0;
}

int sandbox_pool_ready_locked(struct sandbox_svc *svc, struct fleet_host *h, const char *size,
			      const char *runtime)
{
	int n = 0;

	for (struct fleet_guest *p = svc->pool; p; p = p->next)
		if ((!h || p->host == h) && pool_kind(p, size, runtime) && pool_usable_locked(p))
			n++;
	return n;
}

struct fleet_guest *sandbox_pool_take_locked(struct sandbox_svc *svc, struct fleet_host *h,
					     const char *size, const char *runtime)
{
	struct fleet_guest **pp, *oldest = NULL, **oldest_pp = NULL;

	/* The oldest ready one: it has the least idle time left. */
	for (pp = &svc->pool; *pp; pp = &(*pp)->next) {
		struct fleet_guest *p = *pp;

		if ((h && p->host != h) || !pool_kind(p, size, runtime) || !pool_usable_locked(p) ||
		    !agentless_conn_alive(p->conn))
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

struct fleet_guest *sandbox_pool_evict_locked(struct sandbox_svc *svc, struct fleet_host *h)
{
	for (struct fleet_guest **pp = &svc->pool; *pp; pp = &(*pp)->next) {
		struct fleet_guest *p = *pp;

		if (p->host != h)
			continue;
		*pp = p->next;
		p->next = NULL;
		return p;
	}
	return NULL;
}

struct fleet_guest *sandbox_pool_drop_host_locked(struct sandbox_svc *svc, struct fleet_host *h)
{
	struct fleet_guest *out = NULL, *p;

	while ((p = sandbox_pool_evict_locked(svc, h)) != NULL) {
		p->next = out;
		out = p;
	}
	return out;
}

void sandbox_pool_count_locked(struct sandbox_svc *svc, struct fleet_host *h, int *guests,
			       uint64_t *mib, uint64_t *disk_gib)
{
	*guests = h->pool_booting;
	*mib = h->pool_booting_mib;
	*disk_gib = h->pool_booting_disk_gib;
	for (struct fleet_guest *p = svc->pool; p; p = p->next) {
		if (p->host != h)
			continue;
		(*guests)++;
		*mib += p->memory_mib;
		*disk_gib += sandbox_host_disk_gib(h, sandbox_config_size(&svc->cfg, p->size));
	}
}

void sandbox_pool_domain_stopped_locked(struct sandbox_svc *svc, const char *name)
{
	for (struct fleet_guest *p = svc->pool; p; p = p->next) {
		if (strcmp(p->domain, name) == 0 && fleet_guest_mark_dead(p, sbx_wall_ms()))
			sbx_warn(MOD, "pooled guest %s stopped", name);
	}
}

static void pool_booting_locked(struct fleet_host *h, const struct sandbox_size *size, int sign)
{
	h->pool_booting += sign;
	h->pool_booting_mib += (uint64_t)sign * size->memory_mib;
	h->pool_booting_disk_gib += (uint64_t)sign * size->disk_gib;
}

/* A job of the blocking pool: one pool boot (a boot slot and its
 * pool_booting count were taken when it was queued). Cancelled (the pool
 * stopped before a thread took it) or the service stopping: no boot, only
 * the undo. */
static void pool_boot_run(void *arg, bool cancelled)
{
	struct pool_boot *pb = arg;
	struct sandbox_svc *svc = pb->svc;
	struct fleet_host *h = pb->host;
	const struct sandbox_size *size = pb->size;
	const char *runtime = pb->runtime;
	struct fleet_guest *l = NULL;
	struct sbx_error err;
	char marker[32];
	int64_t t0 = sbx_mono_ms(), deadline = t0 + svc->cfg.boot_timeout_ms;
	int rc;

	free(pb);
	snprintf(marker, sizeof(marker), "pool:%s", runtime ? runtime : size->name);
	sbx_error_clear(&err);
	pthread_mutex_lock(&svc->lock);
	bool skip = cancelled || svc->stop;
	pthread_mutex_unlock(&svc->lock);
	rc = skip ? 1 : sandbox_guest_boot(svc, h, size, marker, deadline, &l, &err);
	/* an execution guest: its interpreter starts now (a second boot
	 * timeout: python or node under TCG on a busy host) */
	if (rc == 0 && runtime &&
	    (rc = sandbox_execution_prestart(svc, l, runtime,
					     sbx_mono_ms() + svc->cfg.boot_timeout_ms, &err)) < 0) {
		sandbox_live_teardown(l, "the launcher did not start");
		l = NULL;
	}

	fleet_slot_release(&svc->slots);
	pthread_mutex_lock(&svc->lock);
	if (rc == 0 && (svc->stop || h->state != HOST_UP || h->draining)) {
		/* Destroy it while still counted in pool_booting: sandbox_pool_stop
		 * waits for that, and the vmm is freed right after. */
		pthread_mutex_unlock(&svc->lock);
		sandbox_live_teardown(l, svc->stop ? "the service is stopping"
						   : "its host is down or drained");
		l = NULL;
		pthread_mutex_lock(&svc->lock);
	} else if (rc == 0) {
		fleet_guest_set_state(l, FLEET_GUEST_POOLED);
		l->pooled_at_mono = sbx_mono_ms();
		l->next = svc->pool;
		svc->pool = l;
	} else if (rc < 0) {
		h->pool_backoff_until_mono = sbx_mono_ms() + POOL_BACKOFF_MS;
	}
	pool_booting_locked(h, size, -1);
	pthread_cond_broadcast(&svc->cond);
	pthread_mutex_unlock(&svc->lock);

	if (rc < 0)
		sbx_warn(MOD, "host %s: a %s pool guest did not boot: %s", h->cfg->name,
			 runtime ? runtime : size->name, err.message);
	else if (l)
		sbx_info(MOD, "host %s: a %s guest joined the pool, ready in %lld ms", h->cfg->name,
			 runtime ? runtime : size->name, (long long)(sbx_mono_ms() - t0));
}

/* Start one pool boot if the rules allow it. Call with lock; returns true
 * when a boot was started. */
static bool pool_boot_maybe_locked(struct sandbox_svc *svc, struct fleet_host *h,
				   const struct sandbox_size *size, const char *runtime)
{
	struct pool_boot *pb;

	if (h->pool_booting >= svc->cfg.pool_max_boots ||
	    sbx_mono_ms() < h->pool_backoff_until_mono || !sandbox_host_fits_locked(h, size))
		return false;
	pb = malloc(sizeof(*pb));
	if (!pb)
		return false;
	if (!fleet_slot_try_pool(&svc->slots)) { /* a customer waits, or all are taken */
		free(pb);
		return false;
	}
	pb->svc = svc;
	pb->host = h;
	pb->size = size;
	pb->runtime = runtime;
	pool_booting_locked(h, size, +1);
	/* (the pool's lock is a leaf below svc->lock) */
	if (sandbox_work_submit(svc, pool_boot_run, pb) < 0) {
		free(pb);
		fleet_slot_release(&svc->slots);
		pool_booting_locked(h, size, -1);
		return false;
	}
	return true;
}

/* Unlink dead and over-age pooled guests into *out. Call with lock. */
static void pool_reap_locked(struct sandbox_svc *svc, int64_t mono, struct fleet_guest **out)
{
	int64_t max_idle = (int64_t)svc->cfg.pool_max_idle_s * 1000;
	struct fleet_guest **pp = &svc->pool;

	while (*pp) {
		struct fleet_guest *p = *pp;

		if (!pool_usable_locked(p) || mono - p->pooled_at_mono >= max_idle ||
		    p->host->state != HOST_UP || p->host->draining) {
			*pp = p->next;
			p->next = *out;
			*out = p;
			continue;
		}
		/* a pooled guest runs no execs: nothing to tick */
		pp = &p->next;
	}
}

/* Start the boots host h's pool lacks (none on a host down or drained). */
static void pool_refill_locked(struct sandbox_svc *svc, struct fleet_host *h)
{
	if (h->state != HOST_UP || h->draining || !h->vmm)
		return;
	for (size_t i = 0; i < svc->cfg.n_pool; i++) {
		const struct sandbox_size *size =
		    sandbox_config_size(&svc->cfg, svc->cfg.pool[i].size);

		/* Boots in flight count toward every size's target only
		 * roughly; pool_max_boots keeps it small. */
		if (size && sandbox_pool_ready_locked(svc, h, size->name, NULL) + h->pool_booting <
				svc->cfg.pool[i].count)
			pool_boot_maybe_locked(svc, h, size, NULL);
	}
	for (size_t i = 0; i < svc->cfg.n_execution_pool; i++) {
		const char *rt = svc->cfg.execution_pool[i].runtime;
		const struct sandbox_size *size = sandbox_config_size(
		    &svc->cfg,
		    svc->cfg.execution_size[0] ? svc->cfg.execution_size : svc->cfg.default_size);

		if (size && sandbox_pool_ready_locked(svc, h, NULL, rt) + h->pool_booting <
				svc->cfg.execution_pool[i].count)
			pool_boot_maybe_locked(svc, h, size, rt);
	}
}

/* A job: tear down the pooled guests a pass unlinked (libvirt destroys). */
static void pool_recycle_run(void *arg, bool cancelled)
{
	struct fleet_guest *reaped = arg;
	struct sandbox_svc *svc = reaped->host->svc;

	while (reaped) {
		struct fleet_guest *next = reaped->next;

		/* (no lock: pool_usable_locked reads the guest's own state) */
		sbx_info(MOD, "recycling pooled guest %s (%s)", reaped->domain,
			 fleet_guest_dead(reaped)      ? "it died"
			 : !pool_usable_locked(reaped) ? "its launcher ended"
						       : "idle too long, or its host "
							 "is down or drained");
		sandbox_live_teardown(reaped, "recycled from the warm pool");
		reaped = next;
	}
	pthread_mutex_lock(&svc->lock);
	svc->pool_recycling = false;
	pthread_mutex_unlock(&svc->lock);
}

void sandbox_pool_pass(struct sandbox_svc *svc)
{
	struct fleet_guest *reaped = NULL;

	if (svc->n_hosts &&
	    sbx_mono_ms() - svc->hosts[0].disk_measured_mono >= SANDBOX_DISK_MEASURE_MS)
		sandbox_hosts_measure_disk(svc); /* statvfs: not under the lock */
	pthread_mutex_lock(&svc->lock);
	if (svc->stop) {
		pthread_mutex_unlock(&svc->lock);
		return;
	}
	/* one recycling job at a time: while one runs, the unusable guests
	 * wait in the pool (a take skips them) */
	if (!svc->pool_recycling) {
		pool_reap_locked(svc, sbx_mono_ms(), &reaped);
		if (reaped && sandbox_work_submit(svc, pool_recycle_run, reaped) == 0) {
			svc->pool_recycling = true;
		} else if (reaped) {
			/* refused (full): back in the pool, the next pass tries again */
			while (reaped) {
				struct fleet_guest *next = reaped->next;

				reaped->next = svc->pool;
				svc->pool = reaped;
				reaped = next;
			}
		}
	}
	for (size_t k = 0; k < svc->n_hosts; k++)
		pool_refill_locked(svc, &svc->hosts[k]);
	pthread_mutex_unlock(&svc->lock);
}

bool sandbox_pool_configured(const struct sandbox_svc *svc)
{
	int total = 0;

	for (size_t i = 0; i < svc->cfg.n_pool; i++)
		total += svc->cfg.pool[i].count;
	for (size_t i = 0; i < svc->cfg.n_execution_pool; i++)
		total += svc->cfg.execution_pool[i].count;
	if (total)
		sbx_info(MOD, "warm pool: %d guest(s) to keep ready", total);
	return total > 0;
}

void sandbox_pool_stop(struct sandbox_svc *svc)
{
	struct fleet_guest *all;

	pthread_mutex_lock(&svc->lock);
	/* The boot jobs ended with the blocking pool's drain (a boot in
	 * flight tore its guest down when it saw stop); this wait is the
	 * rule written down. */
	for (size_t i = 0; i < svc->n_hosts; i++)
		while (svc->hosts[i].pool_booting > 0)
			pthread_cond_wait(&svc->cond, &svc->lock);
	all = svc->pool;
	svc->pool = NULL;
	pthread_mutex_unlock(&svc->lock);
	while (all) {
		struct fleet_guest *next = all->next;

		sandbox_live_teardown(all, "the service is stopping");
		all = next;
	}
}
