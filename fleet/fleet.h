/* fleet: the guests and where they run, beneath the use cases in sandbox/.
 * It places guests on hosts and hands out boot slots; it knows no store,
 * no account, no bill. sandbox/ calls it; it includes nothing of sandbox/
 * or store/ (scripts/lint.sh).
 *
 * What lives here so far: the placement rule (place.c), the registry of
 * live guests by id (registry.c) and the boot slots (slots.c). The hosts, pools, liveness and the
 * live guests still live in sandbox/ (sandbox-priv.h) and move here in the next steps.
 *
 * Lock order (a lock may be taken while holding the ones left of it):
 *
 *   sandbox svc->lock  ->  fleet_slots lock
 *
 * A fleet_slots lock is a leaf: nothing is called with it held (no
 * libvirt call, no I/O, no callback).
 */
#ifndef SBX_FLEET_H
#define SBX_FLEET_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/util.h"

/* ----------------------------------------------------------- placement */

/* What placement knows of one host for a guest of one size. */
struct fleet_host_snapshot {
	bool up, draining;
	int guests, max_guests;
	uint64_t mem_used_mib, mem_total_mib;
	uint64_t disk_used_gib, disk_total_gib; /* disk_total_gib 0 = no cap */
	bool disk_ok, disk_ok_evicting;		/* the free-space rule (local hosts) */
	int pool_guests;			/* pooled (ready or booting): evictable */
	uint64_t pool_mib, pool_disk_gib;
	int warm; /* ready pooled guests of the size (or runtime) asked for */
};

/* How a guest is placed. */
enum fleet_place_how {
	FLEET_PLACE_WARM,  /* take a pooled guest there */
	FLEET_PLACE_ROOM,  /* boot there: it has room */
	FLEET_PLACE_EVICT, /* boot there after evicting pooled guests */
};

/* The placement rule (docs/hosts.md "Placement") over snapshots of n
 * hosts for a guest of memory_mib and disk_gib: the index of the host
 * chosen and how, or -1 when none has room. Pure. */
int fleet_place(const struct fleet_host_snapshot *hs, size_t n, uint64_t memory_mib,
		uint64_t disk_gib, enum fleet_place_how *how);

/* ------------------------------------------------------------ registry */

/* The live guests found by sandbox id: a hash table of nodes embedded in
 * the owner's guest struct (no allocation per guest, so linking never
 * fails). No lock of its own: guarded by its owner's lock. */
struct fleet_node {
	struct fleet_node *next;
	const char *key; /* the guest's id, in the guest: stable while linked */
};

struct fleet_registry {
	struct fleet_node **buckets;
	size_t n_buckets; /* a power of two */
	size_t count;
};

/* 0, or -1 out of memory. */
int fleet_registry_init(struct fleet_registry *r);
/* Frees the table, not the nodes. */
void fleet_registry_free(struct fleet_registry *r);
/* Link node n under n->key (a key not linked yet). Grows the table when
 * it can; never fails. */
void fleet_registry_put(struct fleet_registry *r, struct fleet_node *n);
/* The node linked under key, or NULL. */
struct fleet_node *fleet_registry_get(const struct fleet_registry *r, const char *key);
/* Unlink and return the node linked under key, or NULL. */
struct fleet_node *fleet_registry_del(struct fleet_registry *r, const char *key);

/* ---------------------------------------------------------- boot slots */

/* At most `max` guests boot at once (boots are CPU-bound: queue them
 * rather than thrash). Customers wait for a slot; the pool only takes one
 * when no customer waits. The fields are the slots' own (fleet-priv.h). */
struct fleet_slots {
	pthread_mutex_t lock;
	pthread_cond_t cond; /* a slot freed, or stop */
	int max;
	int active;  /* boots holding a slot (customers and pool) */
	int waiting; /* customers waiting for a slot */
	bool stop;
};

void fleet_slots_init(struct fleet_slots *s, int max);
void fleet_slots_destroy(struct fleet_slots *s);
/* Wait for a slot as a customer (counted as waiting meanwhile, so that
 * the pool yields). 0, or -1 with a 503 (retry_after_s 5) past
 * deadline_mono or, when it has to wait, once stopped. */
int fleet_slot_acquire(struct fleet_slots *s, int64_t deadline_mono, struct sbx_error *err);
/* Take a slot for a pool boot if one is free and no customer waits.
 * Never waits. */
bool fleet_slot_try_pool(struct fleet_slots *s);
/* Give a slot back (wakes a waiting customer). */
void fleet_slot_release(struct fleet_slots *s);
/* Boots holding a slot now. */
int fleet_slots_active(struct fleet_slots *s);
/* Fail every waiter, and every later acquire that would wait; the pool
 * takes no slot after it. */
void fleet_slots_stop(struct fleet_slots *s);

#endif
