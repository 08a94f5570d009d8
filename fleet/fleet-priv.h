/* fleet: what the module's files share (not for other modules; unit tests
 * read it). The files are listed in fleet.h. */
#ifndef SBX_FLEET_PRIV_H
#define SBX_FLEET_PRIV_H

#include <stddef.h>

#include "fleet.h"

struct fleet_liveness; /* liveness.c */

/* The fleet. cfg, hooks, ops and hosts' fixed fields are set before its
 * threads start; the rest is under lock unless said otherwise. */
struct fleet {
	const struct sandbox_config *cfg;
	struct fleet_hooks hooks;
	const struct fleet_guest_ops *ops;
	struct sbx_workpool *work; /* set once, before the passes run */

	pthread_mutex_t lock;
	pthread_cond_t cond; /* a pool boot ended (fleet_pool_stop waits) */
	bool stop;
	struct fleet_host hosts[SANDBOX_MAX_HOSTS];
	size_t n_hosts;

	struct fleet_guest *lives; /* the customers' guests (a ref each) */
	struct fleet_registry by_id;
	struct fleet_slots slots; /* its own lock */

	struct fleet_guest *pool; /* ready pooled guests of every host (g->host) */

	struct fleet_liveness *liveness; /* NULL when liveness_interval_ms is 0 */
	char metrics_key;		 /* its address keys the sampling round's job */
};

/* The guest a registry node is embedded in. */
#define guest_of(n) ((struct fleet_guest *)((char *)(n)-offsetof(struct fleet_guest, node)))

/* The linked guest of `id` (borrowed), or NULL. Call with lock. */
static inline struct fleet_guest *fleet_live_find_locked(struct fleet *f, const char *id)
{
	struct fleet_node *n = fleet_registry_get(&f->by_id, id);

	return n ? guest_of(n) : NULL;
}

/* hosts.c */

/* Would one more guest of `size` fit host h (guests, memory, disk),
 * counting its lives, boots and pool? Call with lock. */
/* Has h room for a guest of size, now (*how FLEET_PLACE_ROOM) or after
 * evicting pooled guests (FLEET_PLACE_EVICT)? drained_too: a draining
 * host as if it were not. Call with lock. */
bool fleet_host_room_locked(struct fleet_host *h, const struct sandbox_size *size, bool drained_too,
			    enum fleet_place_how *how);
bool fleet_host_fits_locked(struct fleet_host *h, const struct sandbox_size *size);
/* Count a guest of `size` as booting on h (sign +1) or stop (-1). Call
 * with lock. */
void fleet_host_booting_locked(struct fleet_host *h, const struct sandbox_size *size, int sign);
/* What placement needs of host h for a guest of `size` (runtime: an
 * execution's pre-started guests count as warm). Call with lock. */
void fleet_host_snapshot_locked(struct fleet_host *h, const struct sandbox_size *size,
				const char *runtime, struct fleet_host_snapshot *s);
/* Domain `name` of host h's vmm stopped (vmm_stopped_fn, opaque = h). */
void fleet_on_domain_stopped(void *opaque, const char *name);

/* fleet.c */

/* A conn for guest g with the config's limits, fleet_on_conn_broken as
 * its broken callback. */
struct agentless_conn *fleet_guest_conn_new(struct fleet_guest *g);
/* Reopen guest g's channel on its vmm_vm into its own conn (which resets
 * and sends WELCOME) and note the connection generation in *gen. No lock
 * held; the caller holds a ref. */
int fleet_guest_channel_reopen(struct fleet_guest *g, unsigned *gen, struct sbx_error *err);

/* pooled.c: the pool's list */

/* Usable: not dead, and an execution guest's launcher still waits. Call
 * with lock. */
bool fleet_pool_usable_locked(struct fleet *f, struct fleet_guest *p);
/* Take a ready pooled guest of host h (NULL: any) out of the pool: a
 * plain one of `size` (runtime NULL) or an execution guest whose
 * `runtime` interpreter waits (size NULL). NULL if none. Call with lock. */
struct fleet_guest *fleet_pool_take_locked(struct fleet *f, struct fleet_host *h, const char *size,
					   const char *runtime);
/* Ready guests of a kind on host h (NULL: every host). Call with lock. */
int fleet_pool_ready_locked(struct fleet *f, struct fleet_host *h, const char *size,
			    const char *runtime);
/* Unlink one pooled guest of host h (NULL when none). Call with lock. */
struct fleet_guest *fleet_pool_evict_locked(struct fleet *f, struct fleet_host *h);
/* Guests, memory and disk host h's pool holds (ready and booting). Call
 * with lock. */
void fleet_pool_count_locked(struct fleet *f, struct fleet_host *h, int *guests, uint64_t *mib,
			     uint64_t *disk_gib);
/* Unlink every pooled guest of host h into a chain. Call with lock. */
struct fleet_guest *fleet_pool_drop_host_locked(struct fleet *f, struct fleet_host *h);
/* Mark pooled guests of domain `name` dead. Call with lock. */
void fleet_pool_domain_stopped_locked(struct fleet *f, const char *name);

/* metrics.c */

struct vmm_vm_stats;
/* The memory figure of a sample from a guest's balloon stats st: its
 * MemTotal less MemAvailable in MiB, clamped to size_mib (0: no clamp);
 * -1 when it did not report, or its last report is older than 4 periods
 * of interval_ms and 30 s at now_ms (wall). Pure. */
int64_t fleet_metrics_memory_mib(const struct vmm_vm_stats *st, uint64_t size_mib,
				 uint32_t interval_ms, int64_t now_ms);

/* liveness.c */

int fleet_liveness_init(struct fleet *f);
void fleet_liveness_free(struct fleet *f);

/* Queue fn(arg) on the work pool: 0, or -1 (none, full or stopped). */
static inline int fleet_work_submit(struct fleet *f, sbx_workpool_fn fn, void *arg)
{
	return f->work ? sbx_workpool_submit(f->work, fn, arg) : -1;
}
/* The same, at most once per key (sbx_workpool_submit_once): 0 queued, 1
 * one with this key is in flight, -1 refused; fn not called unless 0.
 * The keys are addresses of the fleet's own (a host, the pool list, the
 * liveness state, the drains hook, metrics_key). Any lock may be held
 * (the work pool's lock is a leaf). */
static inline int fleet_work_submit_once(struct fleet *f, const void *key, sbx_workpool_fn fn,
					 void *arg)
{
	return f->work ? sbx_workpool_submit_once(f->work, key, fn, arg) : -1;
}

#endif
