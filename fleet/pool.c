/* fleet: the warm pools (docs/pool.md). Guests of the sizes the config
 * names are booted ahead of demand, wait until they said HELLO, and sit in
 * f->pool until an acquisition takes one (fleet_pool_take_locked). A pooled
 * guest is handed out once and never comes back: a customer's guest is
 * destroyed when its sandbox ends.
 *
 * The supervisor's "pool" task (fleet_pool_pass, every 200 ms) drops
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
 * (the owner's prestart hook: the interpreter starts and waits for the
 * code) before they join the pool with l->runtime set; only an execution
 * of that runtime takes one (fleet_pool_take_runtime_locked). One whose
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

#include "../agentless/agentless.h"
#include "fleet-priv.h"

#define MOD		"pool"
#define POOL_BACKOFF_MS 5000

struct pool_boot {
	struct fleet *f;
	struct fleet_host *host;
	const struct sandbox_size *size;
	const char *runtime; /* in f->cfg->execution_pool, or NULL */
};

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
	struct fleet *f = pb->f;
	struct fleet_host *h = pb->host;
	const struct sandbox_size *size = pb->size;
	const char *runtime = pb->runtime;
	struct fleet_guest *l = NULL;
	struct sbx_error err;
	char marker[32];
	int64_t t0 = sbx_mono_ms(), deadline = t0 + f->cfg->boot_timeout_ms;
	int rc;

	free(pb);
	snprintf(marker, sizeof(marker), "pool:%s", runtime ? runtime : size->name);
	sbx_error_clear(&err);
	pthread_mutex_lock(&f->lock);
	bool skip = cancelled || f->stop;
	pthread_mutex_unlock(&f->lock);
	rc = skip ? 1 : fleet_guest_boot(f, h, size, marker, NULL, deadline, &l, &err);
	/* an execution guest: its interpreter starts now (a second boot
	 * timeout: python or node under TCG on a busy host) */
	if (rc == 0 && runtime &&
	    (rc = f->hooks.prestart
		      ? f->hooks.prestart(f->hooks.opaque, l, runtime,
					  sbx_mono_ms() + f->cfg->boot_timeout_ms, &err)
		      : sbx_error_set(&err, SBX_E_INTERNAL, NULL, "no launcher")) < 0) {
		f->ops->teardown(l, "the launcher did not start");
		l = NULL;
	}

	fleet_slot_release(&f->slots);
	pthread_mutex_lock(&f->lock);
	if (rc == 0 && (f->stop || h->state != FLEET_HOST_UP || h->draining)) {
		/* Destroy it while still counted in pool_booting: fleet_pool_stop
		 * waits for that, and the vmm is freed right after. */
		pthread_mutex_unlock(&f->lock);
		f->ops->teardown(l, f->stop ? "the service is stopping"
					    : "its host is down or drained");
		l = NULL;
		pthread_mutex_lock(&f->lock);
	} else if (rc == 0) {
		fleet_guest_set_state(l, FLEET_GUEST_POOLED);
		l->pooled_at_mono = sbx_mono_ms();
		l->next = f->pool;
		f->pool = l;
	} else if (rc < 0) {
		h->pool_backoff_until_mono = sbx_mono_ms() + POOL_BACKOFF_MS;
	}
	pool_booting_locked(h, size, -1);
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);

	if (rc < 0)
		sbx_warn(MOD, "host %s: a %s pool guest did not boot: %s", h->cfg->name,
			 runtime ? runtime : size->name, err.message);
	else if (l)
		sbx_info(MOD, "host %s: a %s guest joined the pool, ready in %lld ms", h->cfg->name,
			 runtime ? runtime : size->name, (long long)(sbx_mono_ms() - t0));
}

/* Start one pool boot if the rules allow it. Call with lock; returns true
 * when a boot was started. */
static bool pool_boot_maybe_locked(struct fleet *f, struct fleet_host *h,
				   const struct sandbox_size *size, const char *runtime)
{
	struct pool_boot *pb;

	if (h->pool_booting >= f->cfg->pool_max_boots ||
	    sbx_mono_ms() < h->pool_backoff_until_mono || !fleet_host_fits_locked(h, size))
		return false;
	pb = malloc(sizeof(*pb));
	if (!pb)
		return false;
	if (!fleet_slot_try_pool(&f->slots)) { /* a customer waits, or all are taken */
		free(pb);
		return false;
	}
	pb->f = f;
	pb->host = h;
	pb->size = size;
	pb->runtime = runtime;
	pool_booting_locked(h, size, +1);
	/* (the pool's lock is a leaf below f->lock) */
	if (fleet_work_submit(f, pool_boot_run, pb) < 0) {
		free(pb);
		fleet_slot_release(&f->slots);
		pool_booting_locked(h, size, -1);
		return false;
	}
	return true;
}

/* Unlink dead and over-age pooled guests into *out. Call with lock. */
static void pool_reap_locked(struct fleet *f, int64_t mono, struct fleet_guest **out)
{
	int64_t max_idle = (int64_t)f->cfg->pool_max_idle_s * 1000;
	struct fleet_guest **pp = &f->pool;

	while (*pp) {
		struct fleet_guest *p = *pp;

		if (!fleet_pool_usable_locked(f, p) || mono - p->pooled_at_mono >= max_idle ||
		    p->host->state != FLEET_HOST_UP || p->host->draining) {
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
static void pool_refill_locked(struct fleet *f, struct fleet_host *h)
{
	if (h->state != FLEET_HOST_UP || h->draining || !h->vmm)
		return;
	for (size_t i = 0; i < f->cfg->n_pool; i++) {
		const struct sandbox_size *size = sandbox_config_size(f->cfg, f->cfg->pool[i].size);

		/* Boots in flight count toward every size's target only
		 * roughly; pool_max_boots keeps it small. */
		if (size && fleet_pool_ready_locked(f, h, size->name, NULL) + h->pool_booting <
				f->cfg->pool[i].count)
			pool_boot_maybe_locked(f, h, size, NULL);
	}
	for (size_t i = 0; i < f->cfg->n_execution_pool; i++) {
		const char *rt = f->cfg->execution_pool[i].runtime;
		const struct sandbox_size *size =
		    sandbox_config_size(f->cfg, f->cfg->execution_size[0] ? f->cfg->execution_size
									  : f->cfg->default_size);

		if (size && fleet_pool_ready_locked(f, h, NULL, rt) + h->pool_booting <
				f->cfg->execution_pool[i].count)
			pool_boot_maybe_locked(f, h, size, rt);
	}
}

/* A job: tear down the pooled guests a pass unlinked (libvirt destroys). */
static void pool_recycle_run(void *arg, bool cancelled)
{
	struct fleet_guest *reaped = arg;
	struct fleet *f = reaped->fleet;

	while (reaped) {
		struct fleet_guest *next = reaped->next;

		/* (no lock: fleet_pool_usable_locked reads the guest's own state) */
		sbx_info(MOD, "recycling pooled guest %s (%s)", reaped->domain,
			 fleet_guest_dead(reaped)		? "it died"
			 : !fleet_pool_usable_locked(f, reaped) ? "its launcher ended"
								: "idle too long, or its host "
								  "is down or drained");
		f->ops->teardown(reaped, "recycled from the warm pool");
		reaped = next;
	}
}

void fleet_pool_pass(struct fleet *f)
{
	struct fleet_guest *reaped = NULL;

	if (f->n_hosts && sbx_mono_ms() - f->hosts[0].disk_measured_mono >= FLEET_DISK_MEASURE_MS)
		fleet_hosts_measure_disk(f); /* statvfs: not under the lock */
	pthread_mutex_lock(&f->lock);
	if (f->stop) {
		pthread_mutex_unlock(&f->lock);
		return;
	}
	/* one recycling job at a time (its key: the pool list): while one
	 * runs, or the work pool refuses, the unusable guests wait in the
	 * pool (a take skips them) for the next pass */
	pool_reap_locked(f, sbx_mono_ms(), &reaped);
	if (reaped && fleet_work_submit_once(f, &f->pool, pool_recycle_run, reaped) != 0) {
		while (reaped) {
			struct fleet_guest *next = reaped->next;

			reaped->next = f->pool;
			f->pool = reaped;
			reaped = next;
		}
	}
	for (size_t k = 0; k < f->n_hosts; k++)
		pool_refill_locked(f, &f->hosts[k]);
	pthread_mutex_unlock(&f->lock);
}

bool fleet_pool_configured(const struct fleet *f)
{
	int total = 0;

	for (size_t i = 0; i < f->cfg->n_pool; i++)
		total += f->cfg->pool[i].count;
	for (size_t i = 0; i < f->cfg->n_execution_pool; i++)
		total += f->cfg->execution_pool[i].count;
	if (total)
		sbx_info(MOD, "warm pool: %d guest(s) to keep ready", total);
	return total > 0;
}

void fleet_pool_stop(struct fleet *f)
{
	struct fleet_guest *all;

	pthread_mutex_lock(&f->lock);
	/* The boot jobs ended with the blocking pool's drain (a boot in
	 * flight tore its guest down when it saw stop); this wait is the
	 * rule written down. */
	for (size_t i = 0; i < f->n_hosts; i++)
		while (f->hosts[i].pool_booting > 0)
			pthread_cond_wait(&f->cond, &f->lock);
	all = f->pool;
	f->pool = NULL;
	pthread_mutex_unlock(&f->lock);
	while (all) {
		struct fleet_guest *next = all->next;

		f->ops->teardown(all, "the service is stopping");
		all = next;
	}
}
