/* fleet: the guests and where they run, beneath the use cases in sandbox/.
 * It places guests on hosts and hands out boot slots; it knows no store,
 * no account, no bill. sandbox/ calls it; it includes nothing of sandbox/
 * or store/ (scripts/lint.sh).
 *
 * What lives here so far: the placement rule (place.c), the registry of
 * live guests by id (registry.c), the boot slots (slots.c) and the live
 * guest itself (guest.c: a refcounted object with its own lock and an
 * explicit state, freed by its last unref). The hosts, the pools and
 * liveness still live in sandbox/ (sandbox-priv.h) and move here next.
 *
 * Lock order (a lock may be taken while holding the ones left of it):
 *
 *   sandbox svc->lock  ->  fleet_guest lock
 *   sandbox svc->lock  ->  agentless conn lock  ->  vmm channel lock
 *   sandbox svc->lock  ->  fleet_slots lock
 *
 * The guest and slots locks are leaves: nothing is called with one held
 * (no libvirt call, no I/O, no callback, no other lock). A guest's end
 * and its last unref call into agentless/ and vmm/ (which call back):
 * no lock may be held there.
 */
#ifndef SBX_FLEET_H
#define SBX_FLEET_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../config/config.h"
#include "../util/util.h"

struct agentless_conn;
struct vmm_vm;

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

/* --------------------------------------------------------- live guests */

/* A guest's life. Legal moves (fleet_guest_set_state refuses others):
 *
 *   BOOTING -> POOLED | RUNNING | ENDING
 *   POOLED  -> RUNNING | ENDING
 *   RUNNING -> ENDING
 *   ENDING  -> GONE
 *
 * (PAUSED, between RUNNING and ENDING, comes with pause and resume.) */
enum fleet_guest_state {
	FLEET_GUEST_BOOTING, /* domain started, channel opening, HELLO awaited */
	FLEET_GUEST_POOLED,  /* ready in a pool, not handed out */
	FLEET_GUEST_RUNNING, /* a customer's sandbox, or an execution's guest */
	FLEET_GUEST_ENDING,  /* unlinked: channel closing, domain being destroyed */
	FLEET_GUEST_GONE,    /* channel closed, domain destroyed: memory only */
};

/* Why a guest ended, as the owner tells fleet_guest_end_begin (requests
 * cut short by it answer from this: 410 expired / deleted). */
enum fleet_end {
	FLEET_END_NONE,
	FLEET_END_FAILED,
	FLEET_END_EXPIRED,
	FLEET_END_DELETED,
	FLEET_END_OTHER, /* pooled, execution over, service stopping */
};

struct fleet_host; /* the host it runs on (sandbox-priv.h until hosts move here) */
struct prestart;   /* an execution guest's waiting launcher (its owner's) */
typedef void (*fleet_prestart_free_fn)(struct prestart *ps);

/* A live guest: a refcounted object. Whoever holds a ref may read its
 * fixed fields and call into its conn with no lock held: the memory (conn,
 * vm handle, prestart) is released by the LAST fleet_guest_unref, never
 * by the thread that ends it (libvirt's virObjectUnref rule). Ending it
 * (fleet_guest_end) closes its channel, so every call into a pinned
 * guest's conn after that fails fast with a clean error.
 *
 * Three groups of fields, by who guards them:
 *  - fixed: set by its creator before it is shared, then read-only
 *    (runtime and prestart are set by the pool's boot before it pools);
 *  - the owner's lock (today svc->lock): its links (next, node) and the
 *    owner's bookkeeping (expires_at_ms, end_queued, pooled_at_mono);
 *  - g->lock, a leaf: its state and health. */
struct fleet_guest {
	/* fixed */
	char id[SANDBOX_ID_MAX]; /* the sandbox or execution id it serves */
	char domain[64];
	char size[16];
	char runtime[8]; /* an execution pool's ("" for a plain guest) */
	struct fleet_host *host;
	struct vmm_vm *vm;
	struct agentless_conn *conn;
	uint64_t memory_mib;
	void *owner; /* the service (opaque here) */
	struct prestart *prestart;
	fleet_prestart_free_fn prestart_free;

	/* the owner's lock */
	int64_t expires_at_ms;	/* a sandbox's, cached from its row */
	bool end_queued;	/* an end for it waits for an ender */
	int64_t pooled_at_mono; /* when it said HELLO (pool_max_idle_s) */
	struct fleet_guest *next;
	struct fleet_node node; /* in the registry (key = id) while linked */

	/* g->lock */
	pthread_mutex_t lock;
	enum fleet_guest_state state;
	enum fleet_end end;
	bool dead; /* guest gone or channel broken: end as failed */
	int64_t dead_at_ms;
	/* A customer's stream channel that broke because its host's libvirt
	 * connection went (docs/hosts.md "A dropped connection"): not dead;
	 * reopened once the connection is back, or failed by the host-down
	 * path. conn_gen is the vmm_conn_gen() the channel was opened on;
	 * breaks counts breaks (one during the reopen keeps it suspended). */
	bool suspended;
	int64_t suspended_at_ms;
	unsigned conn_gen;
	unsigned breaks;

	int refs; /* atomic (__atomic builtins) */
};

/* A new guest in state BOOTING with one ref (the caller's). Never NULL
 * (aborts on ENOMEM). */
struct fleet_guest *fleet_guest_new(void *owner, struct fleet_host *host, const char *id);
/* Take a ref (the caller must already hold one, or hold the lock of a
 * list that holds one). */
void fleet_guest_ref(struct fleet_guest *g);
/* Drop a ref; the last one closes the conn if still open, frees the conn,
 * the prestart (after the conn: its failure of the launcher writes into
 * it) and the vm handle (the domain itself is destroyed by
 * fleet_guest_end). No lock may be held: it may call into agentless/. */
void fleet_guest_unref(struct fleet_guest *g);
/* Move to state `to`: 0, or -1 (state unchanged) when the move is not
 * legal from the state it is in. Takes g->lock. */
int fleet_guest_set_state(struct fleet_guest *g, enum fleet_guest_state to);
enum fleet_guest_state fleet_guest_state(struct fleet_guest *g);
const char *fleet_guest_state_name(enum fleet_guest_state s);
/* Begin its end (state ENDING, `end` kept): -1 when it is already ending
 * or gone (another thread ends it). Takes g->lock. */
int fleet_guest_end_begin(struct fleet_guest *g, enum fleet_end end);
/* How it ended (FLEET_END_NONE while it runs). */
enum fleet_end fleet_guest_end_why(struct fleet_guest *g);
/* End it: begin its end if nobody did (FLEET_END_OTHER), close its
 * channel (in-flight execs and transfers fail with `why`; later calls on
 * the conn fail at once), destroy its domain, state GONE. Does not drop a
 * ref. No lock held (libvirt, callbacks). */
void fleet_guest_end(struct fleet_guest *g, const char *why);
/* fleet_guest_end then fleet_guest_unref, for each of a chain linked by
 * next (evicted or dropped pooled guests). */
void fleet_guest_end_chain(struct fleet_guest *g, const char *why);
/* Mark it dead at at_ms (once): true when this call did. Takes g->lock. */
bool fleet_guest_mark_dead(struct fleet_guest *g, int64_t at_ms);
/* Dead, or ending or gone? Takes g->lock. */
bool fleet_guest_dead(struct fleet_guest *g);
bool fleet_guest_over(struct fleet_guest *g); /* ENDING or GONE */
/* May a request use it (sandbox `id`)? 0; -1 with 410 when it is NULL,
 * dead, ending or gone; 503 (Retry-After 2) while suspended. Takes
 * g->lock. */
int fleet_guest_usable(struct fleet_guest *g, const char *id, struct sbx_error *err);

#endif
