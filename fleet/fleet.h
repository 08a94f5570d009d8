/* fleet: the guests and where they run, beneath the use cases in sandbox/.
 * It keeps the hosts (their libvirt connections, capacity, health and
 * drains), places guests on them, boots them within boot slots, keeps the
 * warm pools, the customers' live guests and the liveness ping; it knows
 * no store, no account, no bill. sandbox/ calls it; what the fleet must ask
 * of its owner (a host's reconcile, the drained hosts, an execution
 * guest's launcher, a guest seen alive) goes through struct fleet_hooks.
 * It includes nothing of sandbox/ or store/ (scripts/lint.sh).
 *
 * Files, from the top: lives.c (the fleet object, the customers' live
 * guests), acquire.c (a guest for a sandbox or an execution: placement,
 * a pooled one or a boot), pool.c (the warm pools' upkeep: boots,
 * recycling), liveness.c (the ping), metrics.c (the guests' sampled
 * CPU, memory and disk), boot.c (a guest's boot within a boot
 * slot, the seam beneath it), hosts.c (hosts: capacity, health checks,
 * drains), pooled.c (the pools' list), guest.c (the live guest: refs,
 * state, channel, end), samples.c (a guest's ring of metrics samples),
 * place.c (the placement rule), registry.c (guests
 * by id), slots.c (boot slots).
 *
 * Lock order (a lock may be taken while holding the ones left of it):
 *
 *   fleet lock  ->  fleet_guest lock
 *   fleet lock  ->  agentless conn lock  ->  vmm channel lock
 *   fleet lock  ->  fleet_slots lock
 *   fleet lock  ->  the work pool's lock
 *
 * The fleet lock guards the lists (lives, registry, pool), every host's
 * state and counters and the fleet's own flags. With it held only
 * agentless_conn_alive() (a query taking the conn's leaf lock) may be
 * called into agentless/, never a send, a close, an unref, a libvirt
 * call or a hook: lower modules call back (a broken channel, a stopped
 * domain) with none of their locks held and take the fleet lock
 * themselves. The guest and slots locks are leaves. A guest's end and its
 * last unref call into agentless/ and vmm/: no lock may be held there.
 * The owner's locks are never held while calling into the fleet.
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
struct vmm;
struct vmm_vm;
struct vmm_guest_spec;
struct sbx_channel;
struct fleet;

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
	FLEET_END_OTHER,  /* pooled, execution over, service stopping */
	FLEET_END_PAUSED, /* its sandbox is being paused (409 sandbox_paused) */
};

struct fleet_host;    /* the host it runs on (below) */
struct prestart;      /* an execution guest's waiting launcher (its owner's) */
struct agentless_tcp; /* a stream of the guest's channel (agentless.h) */
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
 *  - the fleet lock: its links (next, node) and pooled_at_mono;
 *  - g->lock, a leaf: its state and health, and the owner's bookkeeping
 *    (expires_at_ms, end_queued). */
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
	struct fleet *fleet; /* the fleet it belongs to */
	struct prestart *prestart;
	fleet_prestart_free_fn prestart_free;

	/* the fleet lock */
	int64_t pooled_at_mono; /* when it said HELLO (pool_max_idle_s) */
	struct fleet_guest *next;
	struct fleet_node node; /* in the registry (key = id) while linked */

	/* g->lock */
	pthread_mutex_t lock;
	int64_t expires_at_ms; /* the owner's: a sandbox's, cached from its row */
	bool end_queued;       /* the owner's: an end for it waits for an ender */
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

	/* Its metrics' samples (metrics.c), NULL until the first round that
	 * read it. Freed by the last unref. */
	struct fleet_metrics *metrics;

	int refs; /* atomic (__atomic builtins) */
};

/* A new guest in state BOOTING with one ref (the caller's). Never NULL
 * (aborts on ENOMEM). */
struct fleet_guest *fleet_guest_new(struct fleet *f, struct fleet_host *host, const char *id);
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
/* Pause it instead (docs/lifecycle.md "Pause and resume"): begin its end
 * as FLEET_END_PAUSED if nobody did, close its channel (in-flight execs
 * and transfers fail), save its domain's memory beside its overlay
 * (vmm_vm_save within timeout_ms: *bytes the host-observed size), state
 * GONE. The caller took it out of the lives (fleet_live_take_alive). 0,
 * or -1 with err: the domain then runs on, to be reattached
 * (fleet_guest_reattach). Does not drop a ref. No lock held. */
int fleet_guest_save(struct fleet_guest *g, const char *why, uint32_t timeout_ms, int64_t *bytes,
		     struct sbx_error *err);
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

/* Claim the guest's end for the owner's ender (end_queued): true once,
 * false while one is claimed. fleet_guest_end_unclaim gives a claim back
 * (the ender could not be queued). Take g->lock. */
bool fleet_guest_end_claim(struct fleet_guest *g);
void fleet_guest_end_unclaim(struct fleet_guest *g);

/* ----------------------------------------------------------- metrics */

/* A running guest's figures over time (docs/api.md "Metrics"): every
 * metrics_interval_ms a round of the work pool reads each live guest's
 * stats from libvirt (vmm_vm_stats, no lock held) and adds one sample to
 * the guest's ring (under g->lock, a leaf). A ring holds the last
 * FLEET_METRICS_HISTORY samples: a fixed allocation per live guest, so
 * their memory is bounded by max_guests. */
#define FLEET_METRICS_HISTORY 720 /* an hour at the default 5 s */

/* One sample. cpu_cores is host-observed (the domain's CPU time over the
 * wall time since the previous reading: 1.0 = one host core busy);
 * memory_used_mib is the guest's own word (its balloon driver's MemTotal
 * less MemAvailable, clamped to its size's memory), -1 when it did not
 * report; disk_used_mib is host-observed (what its overlay takes on the
 * host), -1 without a disk. */
struct fleet_metrics_sample {
	int64_t at_ms; /* wall clock */
	double cpu_cores;
	int64_t memory_used_mib;
	int64_t disk_used_mib;
};

/* One reading of a guest's stats, as the round hands it to the ring. */
struct fleet_metrics_reading {
	int64_t mono_ms, wall_ms; /* when it was read */
	bool has_cpu;
	uint64_t cpu_ns;			/* the domain's CPU time since it started */
	int64_t memory_used_mib, disk_used_mib; /* -1: none */
};

/* A ring of samples (samples.c). No lock of its own: its guest's. */
struct fleet_metrics;
/* A ring of `cap` samples (1..FLEET_METRICS_HISTORY). NULL out of memory. */
struct fleet_metrics *fleet_metrics_new(size_t cap);
void fleet_metrics_free(struct fleet_metrics *m);
/* Add a reading: a sample when a previous reading with CPU time gives
 * the delta (the first reading, one without CPU time, or one whose CPU
 * time or clock went back only becomes the base of the next); the oldest
 * sample goes when the ring is full. true when a sample was added. */
bool fleet_metrics_add(struct fleet_metrics *m, const struct fleet_metrics_reading *r);
/* The samples held (at most max), oldest first, into out; the count. */
size_t fleet_metrics_copy(const struct fleet_metrics *m, struct fleet_metrics_sample *out,
			  size_t max);

/* The samples of the live guest of sandbox `id`, oldest first, into
 * *out (malloc'd, the caller frees; NULL when none yet) and *n. -1 with
 * 410 when no guest of `id` is live. Takes g->lock. */
int fleet_live_metrics(struct fleet *f, const char *id, struct fleet_metrics_sample **out,
		       size_t *n, struct sbx_error *err);

/* ---------------------------------------------------------------- hosts */

/* A libvirt host guests are placed on (hosts.c). cfg, local and the
 * fleet are fixed; vmm is set under the fleet lock before the host turns
 * UP, then used without the lock by whoever saw the host UP or holds a
 * guest on it; the rest is under the fleet lock. */
enum fleet_host_state {
	FLEET_HOST_UP,
	FLEET_HOST_DOWN, /* did not answer for host_down_after_ms (or never opened) */
};

struct fleet_host {
	struct fleet *fleet;
	const struct sandbox_host_config *cfg; /* in the fleet's config */
	bool local;			       /* this machine: sysinfo and statvfs apply */
	struct vmm *vmm;		       /* NULL while it could not be opened */

	enum fleet_host_state state;
	bool draining;		/* `sandboxd admin drain`: no placements, no pool */
	bool reconcile_due;	/* came back: its health check reconciles it */
	int64_t last_seen_mono; /* the last health check it answered */
	int64_t last_seen_wall;
	/* Guests being booted or run by executions (booting) and pool boots
	 * (pool_booting), counted for capacity until they are live, pooled
	 * or torn down. */
	int booting;
	uint64_t booting_mib, booting_disk_gib;
	int pool_booting;
	uint64_t pool_booting_mib, pool_booting_disk_gib;
	int64_t pool_backoff_until_mono; /* after a failed pool boot */
	int64_t disk_warned_mono;	 /* last "refusing: disk" warning */
	/* The free space the disk rule reads, measured by
	 * fleet_hosts_measure_disk() with no lock held (statvfs is I/O). */
	bool disk_measured;
	uint64_t disk_free_mib;	    /* the state dir's filesystem (local host) */
	uint64_t db_free_mib;	    /* the database's filesystem */
	bool db_own_fs;		    /* the database is on another filesystem */
	int64_t disk_measured_mono; /* when */
};

/* What an operator sees of a host (sandboxd admin hosts, /v1/admin). */
struct fleet_host_view {
	const char *name, *uri; /* the config's */
	enum fleet_host_state state;
	bool draining;
	int guests, max_guests;
	uint64_t memory_used_mib, memory_total_mib;
	uint64_t disk_used_gib, disk_total_gib;
	int pool_ready, pool_booting;
	int64_t last_seen_ms_ago;
};

/* ---------------------------------------------------------- the fleet */

struct prestart;
/* What the fleet asks of its owner. Each is called with no lock held. */
struct fleet_hooks {
	void *opaque; /* the owner, passed to each */
	/* Host h answers again: make its domains and the owner's records
	 * agree before anything is placed on it. 0, or -1 with err (the
	 * health check retries). */
	int (*host_back)(void *opaque, struct fleet_host *h, struct sbx_error *err);
	/* Which hosts are drained: drained[i] for the config's hosts[i] (n of
	 * them). 0, or -1 (the fleet keeps what it knew). */
	int (*drains_read)(void *opaque, bool *drained, size_t n);
	/* The guest of sandbox `id` answered a liveness ping at at_ms. */
	void (*guest_seen)(void *opaque, const char *id, int64_t at_ms);
	/* An execution pool's guest g booted: start `runtime`'s launcher in it
	 * and wait until the interpreter waits (g->prestart, g->runtime set),
	 * until deadline_mono. 0, or -1 with err. */
	int (*prestart)(void *opaque, struct fleet_guest *g, const char *runtime,
			int64_t deadline_mono, struct sbx_error *err);
	/* Does the prestart still wait (its exec not finished)? Takes only
	 * the prestart's leaf lock: called with the fleet lock held. */
	bool (*prestart_waiting)(struct prestart *ps);
	/* Free a prestart (a guest's last unref, after its conn). */
	fleet_prestart_free_fn prestart_free;
	/* A test point: a boot's domain started, no HELLO yet. May be NULL. */
	void (*boot_started)(void *opaque);
	/* Guest g opened a stream to host:port (egress, agentless.h
	 * "Streams the guest opens"): answer it, on a thread of the owner's
	 * (this runs on the channel's recv thread, no lock held; take a ref
	 * on g to keep it). NULL: every guest's egress is refused. */
	void (*egress_open)(void *opaque, struct fleet_guest *g, struct agentless_tcp *t,
			    const char *host, uint16_t port);
};

/* A new fleet for cfg (borrowed: it outlives the fleet) with one host
 * per cfg->hosts, none opened. NULL out of memory. */
struct fleet *fleet_new(const struct sandbox_config *cfg, const struct fleet_hooks *hooks);
/* Free it: every guest gone, every thread stopped (fleet_stop first). */
void fleet_free(struct fleet *f);
/* The blocking pool the fleet queues its jobs on (boots, health checks,
 * ping rounds, recycling); set before its passes run. */
void fleet_set_work(struct fleet *f, struct sbx_workpool *work);
/* Stop: no pool boot and no job queued after this; boot slot waiters
 * fail. */
void fleet_stop(struct fleet *f);

/* Open every host's libvirt connection (a host that does not answer
 * starts DOWN). 0, or -1 with the last error when none answers. No
 * lock held. */
int fleet_hosts_open(struct fleet *f, struct sbx_error *err);
/* Free every host's vmm (after every guest is gone). */
void fleet_hosts_close(struct fleet *f);
size_t fleet_n_hosts(const struct fleet *f);
struct fleet_host *fleet_host_at(struct fleet *f, size_t i);
/* The host named `name`, or NULL. */
struct fleet_host *fleet_host_find(struct fleet *f, const char *name);
/* The GiB an overlay of `size` may grow to on host h (0 without a base
 * image there). */
static inline uint64_t fleet_host_disk_gib(const struct fleet_host *h,
					   const struct sandbox_size *size)
{
	return h->cfg->base_image[0] && size ? size->disk_gib : 0;
}
/* Read the free space of every local host's state dir and of the
 * database's filesystem (statvfs) with no lock held, and keep it for the
 * disk rule. Acquisitions call it before they admit; the passes when the
 * figures are older than FLEET_DISK_MEASURE_MS. */
#define FLEET_DISK_MEASURE_MS 1000
void fleet_hosts_measure_disk(struct fleet *f);
/* Do the guests already admitted leave min_free_disk_mib for the ledger
 * on every local host's state dir and the database's filesystem (the
 * disk rule, adding no guest)? Measures first. No lock held. */
bool fleet_disk_fits(struct fleet *f);
/* Before a file of up to `bytes` is written in local host h's state dir
 * (a pause's save file, a snapshot): does the disk rule still hold with
 * it (min_free_disk_mib kept, and room for the disks of the guests h
 * holds)? 0, or -1 with SBX_E_INSUFFICIENT_STORAGE (507). Remote hosts: 0.
 * Measures first. No lock held. */
int fleet_host_disk_room(struct fleet *f, struct fleet_host *h, int64_t bytes,
			 struct sbx_error *err);
/* The drained hosts, read now through the drains_read hook (before the
 * first placement). No lock held. */
void fleet_hosts_read_drains(struct fleet *f);
/* Up to max host views; the count. */
size_t fleet_hosts_view(struct fleet *f, struct fleet_host_view *out, size_t max);

/* The supervisor's fleet passes; each queues its blocking part as jobs of
 * the work pool, each once, and never waits on libvirt or a guest.
 * hosts: every host's health check (a reconcile through host_back for a
 * host that came back) and the drains read. pool: the teardown of dead
 * and idle pooled guests and the boots the pools lack. liveness: a ping
 * round (none when liveness_interval_ms is 0). No lock held. */
void fleet_hosts_pass(struct fleet *f);
void fleet_pool_pass(struct fleet *f);
void fleet_liveness_pass(struct fleet *f);
/* metrics: a sampling round (none when metrics_interval_ms is 0). */
void fleet_metrics_pass(struct fleet *f);
/* Does the config ask for pooled guests (warm or execution)? Logs how
 * many. */
bool fleet_pool_configured(const struct fleet *f);
/* Destroy the pooled guests (after the work pool drained: no boot in
 * flight). After fleet_stop, no lock held. */
void fleet_pool_stop(struct fleet *f);
/* Ready guests of the plain pool of `size` (runtime NULL) or of the
 * execution pool of `runtime`, on every host. */
int fleet_pool_ready(struct fleet *f, const char *size, const char *runtime);

/* What the fleet holds now, for the metrics: the running and the ready
 * pooled guests of `size`; the boots in flight (customers', the pools'). */
void fleet_size_counts(struct fleet *f, const char *size, int *running, int *pooled);
void fleet_boots(struct fleet *f, int *booting, int *pool_booting);

/* ---------------------------------------------------- the live guests */

/* The customers' guests (fleet.c): each linked guest is held by the list
 * (a ref), found by id through the registry. */

/* Link guest g (id set; the caller's ref becomes the list's), state
 * RUNNING. */
void fleet_live_link(struct fleet *f, struct fleet_guest *g);
/* Link a guest acquired on host h (fleet_acquire) and stop counting it as
 * booting there, in one step; a host that went down while it booted
 * marks it dead at the host's last answer (not before created_at_ms). */
void fleet_live_adopt(struct fleet *f, struct fleet_guest *g, struct fleet_host *h,
		      const struct sandbox_size *size, int64_t created_at_ms);
/* Unlink the guest of `id` and begin its end (ENDING, `end` kept for the
 * requests it cuts short). Returns it with the list's ref, now the
 * caller's (end it, then unref), or NULL when another ender took it.
 * Never waits: pinned callers' calls fail once the channel is closed. */
struct fleet_guest *fleet_live_take(struct fleet *f, const char *id, enum fleet_end end);
/* The same for a guest that is to live on (a pause saves it, a resume or
 * a relink hands it on): NULL, and the guest left linked for the
 * supervisor to end, when it is dead (its channel broke, its domain
 * stopped) or already ending. */
struct fleet_guest *fleet_live_take_alive(struct fleet *f, const char *id, enum fleet_end end);
/* A ref on the guest of `id` whatever its health, or NULL. */
struct fleet_guest *fleet_live_get(struct fleet *f, const char *id);
/* Is the guest of `id` linked and not dead? */
bool fleet_live_alive(struct fleet *f, const char *id);
/* Pin the guest of a running sandbox (a ref) to call into its conn with
 * no lock held; NULL with 410 when it is gone, dead or ending, 503 while
 * suspended (fleet_guest_usable). Unpin with fleet_live_unpin. */
struct fleet_guest *fleet_live_pin(struct fleet *f, const char *id, struct sbx_error *err);
void fleet_live_unpin(struct fleet_guest *g);
/* Refs on every linked guest (*n of them; NULL when none): the caller
 * uses them with no lock held, then fleet_lives_unpin. */
struct fleet_guest **fleet_lives_pin(struct fleet *f, size_t *n);
void fleet_lives_unpin(struct fleet_guest **gs, size_t n);
/* The id of one linked guest into id (SANDBOX_ID_MAX): false when none. */
bool fleet_live_any(struct fleet *f, char *id);
/* End guest g (close its channel, destroy its domain) and drop the
 * caller's ref. No lock held. */
void fleet_guest_teardown(struct fleet_guest *g, const char *why);
/* A guest for the running domain `domain` of sandbox `id` (of `size`) on
 * host h, left by a previous daemon: its channel reopened, not linked. 0 (*out), or -1
 * with err and nothing left. */
int fleet_guest_reattach(struct fleet *f, struct fleet_host *h, const char *id, const char *domain,
			 const char *size, struct fleet_guest **out, struct sbx_error *err);

/* -------------------------------------------------------- acquisition */

/* The calls acquisition and the boot make into vmm/ and agentless/ for
 * one guest g (g->host, g->conn set by the caller). Each returns 0, or -1
 * with err. No lock held in any. */
struct fleet_guest_ops {
	/* Start g's domain on g->host per spec: set g->vm, g->domain and
	 * g->conn_gen. Nothing is left on failure. */
	int (*start)(struct fleet_guest *g, const struct vmm_guest_spec *spec,
		     struct sbx_error *err);
	/* Open g's channel into g->conn; the caller attaches *ch. */
	int (*open_channel)(struct fleet_guest *g, struct sbx_channel *ch, struct sbx_error *err);
	/* Wait for g's HELLO until deadline_mono. */
	int (*wait_hello)(struct fleet_guest *g, int64_t deadline_mono, struct sbx_error *err);
	/* Name sandbox `id` in a pooled guest's domain metadata. */
	int (*set_sandbox_id)(struct fleet_guest *g, const char *id, struct sbx_error *err);
	/* End g and drop the caller's ref (fleet_guest_teardown). */
	void (*teardown)(struct fleet_guest *g, const char *why);
};
/* The real ones (the default). */
extern const struct fleet_guest_ops fleet_guest_ops_real;
/* Replace them (unit tests only: a fake with no guest; never a config
 * key). Before any guest is acquired. */
void fleet_set_guest_ops(struct fleet *f, const struct fleet_guest_ops *ops);

/* What a sandbox or an execution asks of fleet_acquire (in) and gets
 * (out). */
struct fleet_acquire {
	const struct sandbox_size *size;
	const char *runtime;	     /* an execution's: its pre-started guests first; else NULL */
	const char *marker;	     /* the id its domain's metadata names */
	int64_t queue_deadline_mono; /* a boot slot by then, or 503 */
	int64_t boot_deadline_mono;  /* HELLO by then; 0: boot_timeout_ms after the slot */
	const char *why_failed;	     /* logged when a guest taken is torn down */
	/* A template's create (docs/lifecycle.md "Snapshots and templates"):
	 * a cold boot on host `host` only (no pooled guest: theirs is the
	 * base image's disk), its overlay backed by the snapshot's file.
	 * NULL for any host and the base image. */
	const char *snapshot_id;
	const char *host;
	struct fleet_guest *g; /* out: id = marker, not linked anywhere */
	struct fleet_host *h;  /* out: where it runs, counted booting there */
	bool warm;	       /* out: taken from the pool */
	bool no_room;	       /* out (failure): no host has room (503) */
};
/* Place and get a guest (docs/hosts.md): a pooled one, or a cold boot
 * within a boot slot (pooled guests of the host evicted first if need
 * be). On success it stays counted as booting on a->h until the caller
 * adopts it (fleet_live_adopt) or calls fleet_guest_uncount. -1 with
 * err: nothing is left behind, capacity given back. No lock held. */
int fleet_acquire(struct fleet *f, struct fleet_acquire *a, struct sbx_error *err);
/* Stop counting a guest of `size` as booting on h. */
void fleet_guest_uncount(struct fleet *f, struct fleet_host *h, const struct sandbox_size *size);
/* Room on h itself for a guest of `size` that exists already (a paused
 * sandbox's, to be restored there: docs/lifecycle.md "Pause and resume"),
 * counted as booting on h until fleet_guest_uncount: as placement judges
 * a cold boot (memory, guests, disk), pooled guests of h evicted first if
 * need be, a draining host included (a drain stops placements, not the
 * sandboxes it holds). -1 with a 503 (Retry-After 10) when h has no room
 * or is not up. No lock held. */
int fleet_host_admit(struct fleet *f, struct fleet_host *h, const struct sandbox_size *size,
		     struct sbx_error *err);
/* Boot a guest of `size` on h with `marker` as the sandbox id in its
 * metadata (its disk backed by snapshot_id's file, NULL: the base), open its channel and wait for
 * HELLO until deadline_mono. On success *out is a new guest (BOOTING, not linked, id = marker). The
 * caller holds a boot slot. -1 with err; nothing is left behind. */
int fleet_guest_boot(struct fleet *f, struct fleet_host *h, const struct sandbox_size *size,
		     const char *marker, const char *snapshot_id, int64_t deadline_mono,
		     struct fleet_guest **out, struct sbx_error *err);
/* The boot slots (fleet_slot_acquire as a customer; release wakes). */
int fleet_boot_slot_acquire(struct fleet *f, int64_t deadline_mono, struct sbx_error *err);
void fleet_boot_slot_release(struct fleet *f);
int fleet_boot_slots_active(struct fleet *f);

/* Did guest g's channel die with its host's libvirt connection (a
 * customer's guest on a stream-transport host whose connection is down
 * or was replaced since the channel opened)? No lock held: asks vmm. */
bool fleet_guest_host_lost(struct fleet_guest *g);
/* agentless_broken_fn of every guest (opaque = the guest): marks it
 * dead, or suspended when its channel went with its host's libvirt
 * connection (docs/hosts.md "A dropped connection"). */
void fleet_on_conn_broken(void *opaque, const char *why);

#endif
