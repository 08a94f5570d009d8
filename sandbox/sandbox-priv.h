/* sandbox: what the module's files share (not for other modules).
 *
 * Files: sandbox.c (the service, accounts, create, get/list/destroy/extend,
 * usage), acquire.c (a guest for a sandbox or an execution, the boot),
 * live.c (the customers' live guests, how one ends), supervise.c (the supervisor's passes, the
 * blocking pool, the ends), exec.c (exec), budget.c (the output budget: its own object and lock),
 * execution.c (one-shot executions: runtimes, the libvirt runner, the execution pool), runner_dev.c
 * (the mock and dev-process runners), pool.c (the warm pool), liveness.c (the ping), host.c (the
 * hosts: capacity, placement, health and drain), reconcile.c (a host's domains and the store's
 * rows made to agree, at a restart and when a host comes back), settle.c (ends the store
 * refused, retried; how a lost guest's bill ends).
 *
 * Lock order (a lock may be taken while holding the ones left of it):
 *
 *   svc->lock  ->  fleet_guest lock (a leaf, fleet.h)
 *   svc->lock  ->  agentless conn lock  ->  vmm channel lock
 *   svc->lock  ->  the work pool's lock (a leaf: sandbox_end_queue_locked)
 *
 * svc->lock guards lives, pool, counters and the end queue, and every
 * host's state and counters (struct fleet_host: no lock of its own); a
 * guest's own lock guards its state and health (dead, suspended, conn_gen,
 * breaks). With svc->lock held only agentless_conn_alive() and
 * agentless_conn_inflight() (queries that take the conn's leaf lock) may
 * be called: never a send, a tick, a close, an unref, an exec start, a
 * libvirt call, a store call or a callback. Completions (exec done,
 * on_broken, domain stopped) are called by lower modules with none of
 * their locks held and take svc->lock themselves; so nothing may call into
 * agentless/ or vmm/ with svc->lock held, or they deadlock. A guest's last
 * unref frees its conn: drop refs with no lock held.
 * The store has its own mutex, taken with no sandbox lock held. The
 * output budget's lock (budget.c) is a leaf: it may be taken holding any
 * of these, and nothing is taken or called under it; svc->lock does not
 * guard the budget. */
#ifndef SBX_SANDBOX_PRIV_H
#define SBX_SANDBOX_PRIV_H

#include <pthread.h>
#include <stdbool.h>

#include "../agentless/agentless.h"
#include "../fleet/fleet.h"
#include "../receipt/receipt.h"
#include "../store/store.h"
#include "../vmm/vmm.h"
#include "sandbox.h"

struct prestart; /* execution.c (a fleet_guest holds one: fleet.h) */

/* A libvirt host guests are placed on (host.c, docs/hosts.md). Its config
 * and vmm are set before the service's threads start and never change;
 * the fields below `vmm` are under svc->lock. */
enum host_state {
	HOST_UP,
	HOST_DOWN, /* did not answer for host_down_after_ms (or never opened) */
};

struct fleet_host {
	struct sandbox_svc *svc;
	const struct sandbox_host_config *cfg; /* in svc->cfg.hosts */
	bool local;			       /* this machine: sysinfo and statvfs apply */
	/* Its libvirt connection; NULL while it could not be opened (the host
	 * health check retries). Set under svc->lock, before state turns UP; used
	 * without the lock by whoever saw the host UP or holds a live on it. */
	struct vmm *vmm;

	enum host_state state;
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
	 * sandbox_hosts_measure_disk() with no lock held (statvfs is I/O). */
	bool disk_measured;
	uint64_t disk_free_mib;	    /* the state dir's filesystem (local host) */
	uint64_t db_free_mib;	    /* the database's filesystem */
	bool db_own_fs;		    /* the database is on another filesystem */
	int64_t disk_measured_mono; /* when */
};

/* The service's blocking pool (supervise.c): its fixed threads, and the
 * threads' names (/proc/PID/task/TID/comm), the supervisor's too. */
#define SANDBOX_WORK_THREADS	 8
#define SANDBOX_WORK_THREAD_NAME "sbx-block"
#define SANDBOX_CRON_THREAD_NAME "sbx-cron"

struct startup_ring {
	int64_t ms[SANDBOX_STARTUP_WINDOW];
	size_t n;   /* samples held, <= window */
	size_t pos; /* next slot to write */
};

struct sandbox_svc {
	struct sandbox_config cfg;
	struct store *store;
	struct receipt_signer *signer; /* the node's receipt key */
	struct fleet_host hosts[SANDBOX_MAX_HOSTS];
	size_t n_hosts;
	/* a host's check / the drains read queued or running (host.c) */
	bool host_check_busy[SANDBOX_MAX_HOSTS];
	bool drains_busy;

	pthread_mutex_t lock; /* lives, pool, booting, stop, startup rings, retries */
	pthread_cond_t cond;  /* boot slot freed, guest died, threads' wake */
	struct fleet_guest *lives;
	struct fleet_registry by_id; /* the lives by sandbox id */
	struct fleet_slots slots;    /* boot slots (customers and pool) */
	bool stop;
	int64_t started_wall_ms; /* this daemon's start: older pending keys are orphans */
	/* The periodic passes (one thread) and the blocking work (a bounded
	 * pool: ends, execution teardowns), supervise.c. NULL for an admin
	 * service. */
	struct sbx_cron *cron;
	struct sbx_workpool *work;

	/* Warm pool (pool.c). */
	struct fleet_guest *pool; /* ready pooled guests of every host (l->host) */
	bool pool_recycling;	  /* a teardown job of pooled guests in flight */

	struct startup_ring startup_warm, startup_cold;
	/* Executions (request received -> result known), per path: a pooled
	 * guest whose interpreter waited, a pooled guest, a booted guest. */
	struct startup_ring exec_prestarted, exec_warm, exec_cold;

	/* The output budget (budget.c): its own object and leaf lock. */
	struct sandbox_output_budget *output;

	/* Ends the store did not take yet (settle.c), retried by the supervisor. */
	struct settle_retry *retries;
	size_t n_retries;

	/* Liveness ping (liveness.c): NULL when liveness_interval_ms is 0. */
	struct sandbox_liveness *liveness;

	/* The calls acquire.c makes into vmm/ and agentless/ for one guest:
	 * NULL = sandbox_guest_ops_real. Only unit tests set it (a fake with
	 * no guest: tests/unit/test_acquire.c); never a config key. Set
	 * before any guest is acquired, then read-only. */
	const struct sandbox_guest_ops *guest_ops;
};

/* acquire.c */

/* The seam beneath acquisition and the boot: what they ask of vmm/ and
 * agentless/ for one guest l (l->host, l->conn set by the caller). Each
 * returns 0, or -1 with err. No lock held in any. */
struct sandbox_guest_ops {
	/* Start l's domain on l->host per spec: set l->vm, l->domain and
	 * l->conn_gen (vmm_vm_start). Nothing is left on failure. */
	int (*start)(struct fleet_guest *l, const struct vmm_guest_spec *spec,
		     struct sbx_error *err);
	/* Open l's channel into l->conn (vmm_vm_open_channel); the caller
	 * attaches *ch. */
	int (*open_channel)(struct fleet_guest *l, struct sbx_channel *ch, struct sbx_error *err);
	/* Wait for l's HELLO until deadline_mono (agentless_conn_wait_hello). */
	int (*wait_hello)(struct fleet_guest *l, int64_t deadline_mono, struct sbx_error *err);
	/* Name sandbox `id` in a pooled guest's domain metadata
	 * (vmm_vm_set_sandbox_id). */
	int (*set_sandbox_id)(struct fleet_guest *l, const char *id, struct sbx_error *err);
	/* End l (channel closed, domain destroyed) and drop the caller's ref
	 * (sandbox_live_teardown). */
	void (*teardown)(struct fleet_guest *l, const char *why);
};
/* The real ones (svc->guest_ops NULL). */
extern const struct sandbox_guest_ops sandbox_guest_ops_real;

/* What a sandbox or an execution asks of sandbox_guest_acquire (in) and
 * gets (out). */
struct sandbox_acquire {
	const struct sandbox_size *size;
	const char *runtime;	     /* an execution's: its pre-started guests first; else NULL */
	const char *marker;	     /* the id its domain's metadata names */
	int64_t queue_deadline_mono; /* a boot slot by then, or 503 */
	int64_t boot_deadline_mono;  /* HELLO by then; 0: boot_timeout_ms after the slot */
	const char *why_failed;	     /* logged when a guest taken is torn down */
	struct fleet_guest *l;	     /* out: id = marker, not linked anywhere */
	struct fleet_host *h;	     /* out: where it runs, counted booting there */
	bool warm;		     /* out: taken from the pool */
	bool no_room;		     /* out (failure): no host has room (503) */
};
/* Place and get a guest: a pooled one, or a cold boot within a boot slot.
 * On success it stays counted as booting on a->h until the caller links
 * it or calls sandbox_guest_uncount. -1 with err: nothing is left behind,
 * capacity given back. No lock held. */
int sandbox_guest_acquire(struct sandbox_svc *svc, struct sandbox_acquire *a,
			  struct sbx_error *err);
/* Stop counting a guest of `size` as booting on h (undo of the
 * acquisition's capacity). No lock held. */
void sandbox_guest_uncount(struct sandbox_svc *svc, struct fleet_host *h,
			   const struct sandbox_size *size);
/* Boot a guest of `size` with `marker` as the sandbox id in its metadata,
 * open its channel and wait for HELLO until deadline_mono. On success *out
 * is a new struct fleet_guest (not linked anywhere; id empty). The caller holds a
 * boot slot. -1 with err; nothing is left behind. */
int sandbox_guest_boot(struct sandbox_svc *svc, struct fleet_host *h,
		       const struct sandbox_size *size, const char *marker, int64_t deadline_mono,
		       struct fleet_guest **out, struct sbx_error *err);
/* Wait for one of max_concurrent_boots slots (boots are CPU-bound here:
 * queue them rather than thrash), counted as a customer waiting so that the
 * pool's refill yields. No lock held. 0, or -1 with a 503 (retry_after_s 5)
 * past deadline_mono or at stop. Every customer boot, sandbox or
 * execution, takes its slot here and gives it back with
 * sandbox_boot_slot_release(). (fleet_slot_acquire on svc->slots.) */
int sandbox_boot_slot_acquire(struct sandbox_svc *svc, int64_t deadline_mono,
			      struct sbx_error *err);
void sandbox_boot_slot_release(struct sandbox_svc *svc);
/* live.c: the customers' guests (svc->lives, svc->by_id). Each is a
 * fleet_guest (fleet.h) the list holds a ref of. */

/* The guest of sandbox `id` (borrowed: take a ref to use it after
 * unlocking), or NULL. Call with lock. */
struct fleet_guest *sandbox_live_find_locked(struct sandbox_svc *svc, const char *id);
/* Link guest l (id set; the caller's ref becomes the list's) into
 * svc->lives and the registry, state RUNNING. Call with lock. */
void sandbox_live_link_locked(struct sandbox_svc *svc, struct fleet_guest *l);
/* Unlink the guest of `id` and begin its end (state ENDING, `end` kept
 * for the requests it cuts short). Returns it with the list's ref, now the
 * caller's (end it, then unref), or NULL when another ender took it.
 * Never waits: pinned callers keep their refs, their calls fail once the
 * channel is closed. Call with lock. */
struct fleet_guest *sandbox_live_take_locked(struct sandbox_svc *svc, const char *id,
					     enum fleet_end end);
/* Pin the guest of a running sandbox (a ref) to call into its conn with
 * no lock held; NULL with 410 when it is gone, dead or ending, 503 while
 * suspended (fleet_guest_usable). Unpin with sandbox_live_unpin. No lock
 * held. */
struct fleet_guest *sandbox_live_pin(struct sandbox_svc *svc, const char *id,
				     struct sbx_error *err);
void sandbox_live_unpin(struct fleet_guest *l);
/* End guest l (close its channel, destroy its domain) and drop the
 * caller's ref. No lock held. */
void sandbox_live_teardown(struct fleet_guest *l, const char *why);
/* agentless_broken_fn of every customer and pooled guest (opaque = the
 * guest): marks it dead, or suspended when sandbox_live_host_lost() says
 * its channel went with its host's connection. */
void sandbox_on_conn_broken(void *opaque, const char *why);
/* Did guest l's channel die with its host's libvirt connection (a
 * customer guest in svc->lives on a stream-transport host whose
 * connection is down or was replaced since the channel opened)? No lock
 * held: asks vmm. */
bool sandbox_live_host_lost(struct fleet_guest *l);
/* Open guest l's channel on its vmm_vm into its own conn (which resets and
 * sends WELCOME: the guest said HELLO long ago) and note the connection
 * generation it is on in *gen. The restart reconcile and the resume after
 * a dropped connection share it. No lock held; the caller holds a ref. */
int sandbox_live_channel_reopen(struct fleet_guest *l, unsigned *gen, struct sbx_error *err);
/* vmm_stopped_fn (opaque = svc). */
void sandbox_on_domain_stopped(void *opaque, const char *name);
/* End a sandbox: tear its guest down (if this node runs it), settle the
 * row with `status` at ended_at_ms. Safe concurrently and repeatedly: the
 * store settles once. No lock held. */
int sandbox_end(struct sandbox_svc *svc, const char *id, enum store_status status,
		int64_t ended_at_ms, const char *why, struct store_sandbox *out,
		struct sbx_error *err);

/* supervise.c */

/* Make and start the supervisor (its passes: lives every tick, heartbeat,
 * settle retry, time sync) and the blocking pool (SANDBOX_WORK_THREADS
 * threads, one waiting job per guest the hosts may hold). 0, or -1 with
 * err and nothing left. */
int sandbox_supervise_start(struct sandbox_svc *svc, struct sbx_error *err);
/* Stop the supervisor (no pass after this), then drain the pool: the
 * queued ends and teardowns run, and none runs when this returns (later
 * submits fail). Call with svc->stop set, no lock held, after the API
 * stopped. */
void sandbox_supervise_stop(struct sandbox_svc *svc);
/* Free both (after sandbox_supervise_stop, or on a failed start). */
void sandbox_supervise_free(struct sandbox_svc *svc);
/* Run fn(arg, cancelled) on the blocking pool. 0, or -1 (fn never called)
 * when the pool is full or stopped: the caller does the work itself or
 * tries again later. A job does its work even when cancelled. Any lock
 * may be held (the pool's lock is a leaf). */
int sandbox_work_submit(struct sandbox_svc *svc, sbx_workpool_fn fn, void *arg);
/* Queue the end of a live sandbox (dead: FAILED at dead_at_ms; expired:
 * EXPIRED at expires_at_ms) as a job of the blocking pool; once per live
 * (when the pool refuses it, the next pass tries again). Call with
 * lock. */
void sandbox_end_queue_locked(struct sandbox_svc *svc, struct fleet_guest *l,
			      enum store_status status, int64_t at_ms);

/* execution.c: the runtimes and the runners beneath the executions use
 * case (executions.c). */

/* What a runner saw of one execution. */
struct sandbox_run_result {
	char *out, *errb;
	size_t out_len, err_len;
	uint64_t out_total, err_total;
	int exit_code;
	uint32_t duration_ms; /* as the runner reports it (the guest's own) */
	/* Host-observed run time (monotonic), <= the timeout: what is billed
	 * and signed. Set on a guest-caused failure too (guest_failed). */
	uint32_t host_ms;
	bool timed_out;
	bool guest_failed; /* the run started and the guest broke it */
	/* Where the time went (monotonic ms; 0 = not reached), for the log
	 * line: guest taken (pool or boot), code delivered, result in. */
	int64_t t_guest, t_delivered, t_result;
};
void sandbox_run_result_release(struct sandbox_run_result *r);
struct sandbox_runtime;
const char *sandbox_runtime_name(const struct sandbox_runtime *rt);
/* The request's checks (sandbox_execution_check) and its runtime. */
int sandbox_execution_check_req(const struct sandbox_config *cfg,
				const struct sandbox_execution_req *req,
				const struct sandbox_runtime **rt, struct sbx_error *err);
/* Run the code on the configured runner (mock, dev-process or libvirt:
 * *warm / *prestarted say how the guest was had). -1 with err when it did
 * not run; res->guest_failed when the guest broke a started run. */
int sandbox_execution_runner_run(struct sandbox_svc *svc, const char *id,
				 const struct sandbox_runtime *rt,
				 const struct sandbox_execution_req *req,
				 struct sandbox_run_result *res, bool *warm, bool *prestarted,
				 struct sbx_error *err);

/* runner_dev.c: the runners without a guest (execution.c picks them). */

/* mock: the code is not run; res holds a fixed line. 0, or -1 out of
 * memory. */
int sandbox_run_mock(struct sandbox_run_result *res);
/* dev-process: run `launcher` (/bin/sh -c) as a host process with the code
 * (code_len bytes) on stdin, stdout and stderr kept up to cap bytes each, killed at
 * timeout_ms (res->timed_out, exit 137). 0, or -1 with err when it could
 * not be started. */
int sandbox_run_dev_process(const char *launcher, const char *code, size_t code_len,
			    uint32_t timeout_ms, size_t cap, struct sandbox_run_result *res,
			    struct sbx_error *err);

/* The cwd an exec starts in unless it names one, and an execution's. */
#define SANDBOX_EXEC_CWD "/home/sandbox"

/* receipts.c */

/* The node's receipt signing key, state_dir/receipt-ed25519.pem, loaded or
 * created (sandbox_svc_new owns it). */
struct receipt_signer *sandbox_receipt_signer_open(const struct sandbox_config *cfg,
						   struct sbx_error *err);

/* sandbox.c */

/* The row of a sandbox this account may see (a creating one is 404). */
int sandbox_visible_row(struct sandbox_svc *svc, const char *account_id, const char *id,
			struct store_sandbox *row, struct sbx_error *err);

/* sandbox_visible_row, and the sandbox runs at `now` (wall ms): else 410
 * sandbox_not_running. */
int sandbox_running_row(struct sandbox_svc *svc, const char *account_id, const char *id,
			int64_t now, struct store_sandbox *row, struct sbx_error *err);
/* create's parameter checks and defaults (size, timeout_minutes), for
 * idempotency.c's canonical request. */
int sandbox_create_params(const struct sandbox_config *cfg, const struct sandbox_create_req *req,
			  const struct sandbox_size **size_out, int *minutes_out,
			  struct sbx_error *err);
/* A sandbox's view from its row, its cost accrued to now_ms. */
void sandbox_view_from_row(const struct store_sandbox *row, int64_t now_ms, struct sandbox_view *v);
/* Do the guests already admitted leave min_free_disk_mib for the ledger
 * on every local host's state dir and the database's filesystem (the
 * disk rule, adding no guest)? Call with lock. */
bool sandbox_disk_fits_locked(struct sandbox_svc *svc);

/* reconcile.c */

/* The restart reconcile (from sandbox_hosts_open, the hosts opened): what
 * no host owns (interrupted creates and executions, retention, rows on
 * hosts gone or down), then each host that answers. No lock held. 0, or
 * -1 with err when the only host cannot be reconciled. */
int sandbox_reconcile_all(struct sandbox_svc *svc, struct sbx_error *err);
/* Host h answers again (the host thread, before placing on it): destroy
 * its domains without a guest alive here, end its running rows without
 * one. No lock held. 0 or -1 with err (the host thread retries). */
int sandbox_reconcile_host(struct sandbox_svc *svc, struct fleet_host *h, struct sbx_error *err);

/* host.c */

/* Open every host's vmm (a host that does not answer starts DOWN; none
 * answering fails) and reconcile each against the store. 0 or -1. */
int sandbox_hosts_open(struct sandbox_svc *svc, struct sbx_error *err);
/* The supervisor's "hosts" task: queue each host's health check (and
 * the reconcile of a host that came back) and the read of the drained
 * hosts as jobs of the blocking pool, each once (one in flight is not
 * queued again). Never waits on libvirt. No lock held. */
void sandbox_hosts_pass(struct sandbox_svc *svc);
/* Read the drained hosts now (before the first placement). No lock. */
void sandbox_hosts_read_drains(struct sandbox_svc *svc);
/* Free every host's vmm (after every guest is gone). */
void sandbox_hosts_close(struct sandbox_svc *svc);
/* The GiB an overlay of `size` may grow to on host h (0 without a base
 * image there). */
uint64_t sandbox_host_disk_gib(const struct fleet_host *h, const struct sandbox_size *size);
/* Read the free space of every local host's state dir and of the
 * database's filesystem (statvfs) with no lock held, and keep it in the
 * hosts for the disk rule. Creates and executions call it before they
 * take the lock to admit; the pool and hosts passes when the
 * figures are older than SANDBOX_DISK_MEASURE_MS. */
#define SANDBOX_DISK_MEASURE_MS 1000
void sandbox_hosts_measure_disk(struct sandbox_svc *svc);
/* Would one more guest of `size` fit host h's capacity (guests, memory,
 * disk), counting its customers' guests, boots and pool? Call with lock
 * (the disk rule reads what sandbox_hosts_measure_disk kept). */
bool sandbox_host_fits_locked(struct fleet_host *h, const struct sandbox_size *size);
/* Count a guest of `size` as booting on h (sign +1) or stop counting it
 * (-1). Call with lock. */
void sandbox_host_booting_locked(struct fleet_host *h, const struct sandbox_size *size, int sign);
/* Place a guest of `size` (an execution of `runtime`: its pre-started
 * guests first; NULL for a sandbox) per docs/hosts.md and count it as
 * booting there. A pooled guest taken is returned in *warm_out (else
 * NULL: boot one on the host returned), pooled guests evicted to make
 * room are chained on *evicted (tear them down without the lock). NULL
 * with a 503 (Retry-After 10) when no host has room. Call with lock. */
struct fleet_host *sandbox_host_admit_locked(struct sandbox_svc *svc,
					     const struct sandbox_size *size, const char *runtime,
					     struct fleet_guest **warm_out,
					     struct fleet_guest **evicted, struct sbx_error *err);
/* The host named `name`, or NULL. */
struct fleet_host *sandbox_host_find(struct sandbox_svc *svc, const char *name);

/* exec.c */

/* What an exec's (or a process call's) reply refused for the output
 * budget answers. */
extern const struct sandbox_output_words sandbox_exec_output_words;

/* execution.c */

/* The execution keys of a config: runner known, dev-process and the test
 * shell runtime refused in production, price and caps in range. */
int sandbox_execution_config_validate(const struct sandbox_config *cfg, struct sbx_error *err);
/* Execution pool: start `runtime`'s launcher in the freshly booted guest l
 * (its interpreter starts and waits for the code) and wait until the
 * interpreter waits, at most until deadline_mono. On success l->prestart
 * and l->runtime are set. No lock held. 0 or -1 with err. */
int sandbox_execution_prestart(struct sandbox_svc *svc, struct fleet_guest *l, const char *runtime,
			       int64_t deadline_mono, struct sbx_error *err);
/* Is the pre-started launcher still waiting (its exec not finished)? Takes
 * only the prestart's leaf lock: callable with svc->lock held. */
bool sandbox_execution_prestart_waiting(struct prestart *ps);
/* Free a prestart once its conn is freed (NULL is fine). */
void sandbox_execution_prestart_free(struct prestart *ps);
/* The cold path of a run on an execution guest's conn: start the launcher
 * (ar->stdin_data carries the code in the EXEC frame), tick the conn until
 * it ends, and take its result into *out (release it). *billable tells
 * whether the code was delivered (the EXEC frame left): then every end,
 * whatever the guest answered, is billed *host_ms (host-observed, <=
 * ar->timeout_ms); when the frame never left, *billable is false and the
 * run costs nothing. 0, or -1 with err (the guest's error as it came). */
int sandbox_execution_run_cold(struct agentless_conn *conn, const struct agentless_exec_req *ar,
			       struct agentless_exec_result *out, uint32_t *host_ms, bool *billable,
			       struct sbx_error *err);
/* What the store keeps of an account's receipts at now_ms: the newest
 * max_receipts_per_account of the last execution_retention_hours. */
struct store_receipt_keep sandbox_receipt_keep(const struct sandbox_config *cfg, int64_t now_ms);
/* The node's receipt signer (the service's, made in sandbox_svc_new), or
 * NULL with err (receipts.c). */
struct receipt_signer;
struct receipt_signer *sandbox_receipt_signer(struct sandbox_svc *svc, struct sbx_error *err);
/* Record one execution's latency for /v1/limits. Call with lock. */
void sandbox_execution_record_locked(struct sandbox_svc *svc, bool warm, bool prestarted,
				     int64_t ms);

/* settle.c: ends that must land */

/* Settle sandbox `id` as billing_settle does. When the store refuses (any
 * error but SBX_E_NOT_FOUND: SQLITE_BUSY past busy_timeout, a full disk)
 * the end is kept, with this status and moment, and retried by
 * sandbox_settles_retry until it lands; an end of `id` already kept wins
 * over this call's status and moment. Returns billing_settle's value (-1
 * with err when it did not land now). No lock held. */
int sandbox_settle(struct sandbox_svc *svc, const char *id, enum store_status status, int64_t at_ms,
		   struct store_sandbox *out, struct sbx_error *err);
/* store_execution_settle(id, status, ended_at_ms, charge_micro) without a
 * response or receipt, kept and retried the same way when it fails. */
void sandbox_execution_settle(struct sandbox_svc *svc, const char *id,
			      enum sandbox_execution_status status, int64_t ended_at_ms,
			      int64_t charge_micro);
/* Try every kept end once (the supervisor, about every second). Returns how
 * many are still kept. No lock held. */
size_t sandbox_settles_retry(struct sandbox_svc *svc);
/* Free what is still kept (logged: the next start's reconcile ends those
 * rows). At svc free, threads stopped. */
void sandbox_settles_free(struct sandbox_svc *svc);
/* How a running row whose guest nobody watched ends (reconcile): with its
 * domain alive and past expiry, expired at expires_at (it ran on); else
 * at min(last_seen_at, expires_at), the last moment the host saw it
 * answer: expired when that is its expiry, failed otherwise. Pure. */
void sandbox_lost_end(const struct store_sandbox *row, bool domain_alive, int64_t now,
		      enum store_status *status, int64_t *at_ms);

/* liveness.c */

/* The pinger's state (none when liveness_interval_ms is 0). 0 or -1. */
int sandbox_liveness_init(struct sandbox_svc *svc, struct sbx_error *err);
/* Free it (after the blocking pool drained). */
void sandbox_liveness_free(struct sandbox_svc *svc);
/* The supervisor's "liveness" task: queue a ping round as a job of the
 * blocking pool unless one is in flight. Never waits on a guest. No lock
 * held. */
void sandbox_liveness_pass(struct sandbox_svc *svc);

/* pool.c */

/* Does the config ask for pooled guests (warm or execution)? Logs how
 * many. */
bool sandbox_pool_configured(const struct sandbox_svc *svc);
/* The supervisor's "pool" task: queue the teardown of dead and idle
 * pooled guests and the boots the pools lack, as jobs of the blocking
 * pool. Never waits on libvirt. No lock held. */
void sandbox_pool_pass(struct sandbox_svc *svc);
/* Destroy the pooled guests (after the blocking pool drained: no boot in
 * flight). Call with svc->stop set, lock not held. */
void sandbox_pool_stop(struct sandbox_svc *svc);
/* Take a ready pooled guest of host h (NULL: any host) out of the pool:
 * a plain one of `size` (runtime NULL) or an execution guest whose
 * `runtime` interpreter waits (size NULL). NULL if none. The guest is
 * never put back. Call with lock. */
struct fleet_guest *sandbox_pool_take_locked(struct sandbox_svc *svc, struct fleet_host *h,
					     const char *size, const char *runtime);
/* Ready guests of the plain pool of `size` (runtime NULL) or of the
 * execution pool of `runtime`, on host h (NULL: every host). Call with
 * lock. */
int sandbox_pool_ready_locked(struct sandbox_svc *svc, struct fleet_host *h, const char *size,
			      const char *runtime);
/* Unlink one pooled guest of host h to free capacity for a customer;
 * NULL when it has none. The caller tears it down without the lock. */
struct fleet_guest *sandbox_pool_evict_locked(struct sandbox_svc *svc, struct fleet_host *h);
/* Guests, memory and disk host h's pool holds (ready and booting). Call
 * with lock. */
void sandbox_pool_count_locked(struct sandbox_svc *svc, struct fleet_host *h, int *guests,
			       uint64_t *mib, uint64_t *disk_gib);
/* Unlink every pooled guest of host h into a chain (a host that went
 * down or is drained): the caller tears them down without the lock. */
struct fleet_guest *sandbox_pool_drop_host_locked(struct sandbox_svc *svc, struct fleet_host *h);
/* Mark pooled guests of domain `name` dead. Call with lock. */
void sandbox_pool_domain_stopped_locked(struct sandbox_svc *svc, const char *name);

/* ---------------------------------------------------- fault injection
 * A named point in a use case where a test may make the daemon die as
 * abruptly as `kill -9` (`_exit(137)`: no atexit, no cleanup). The config
 * key `test_fault_point` names at most one point; production mode refuses
 * it (sandbox_config_validate). docs/configuration.md and
 * docs/lifecycle.md list the points and what a restart makes of each. */
/* The points, in the order a sandbox meets them. The names are in
 * fault.c, the only list of them. */
enum sandbox_fault {
	SANDBOX_FAULT_CREATE_AFTER_RESERVE,	 /* row CREATING + hold committed */
	SANDBOX_FAULT_CREATE_AFTER_DOMAIN_START, /* domain started, no HELLO yet */
	SANDBOX_FAULT_CREATE_AFTER_HELLO,	 /* guest ready, row still CREATING */
	SANDBOX_FAULT_CREATE_AFTER_ACTIVATE,	 /* row RUNNING, key not yet done */
	SANDBOX_FAULT_EXTEND_AFTER_HOLD,	 /* extra hold + new expiry committed */
	SANDBOX_FAULT_DELETE_AFTER_DESTROY,	 /* domain destroyed, row not settled */
	SANDBOX_FAULT_DELETE_AFTER_SETTLE,	 /* row settled, reply not sent */
	SANDBOX_FAULT_COUNT
};

/* The point's name ("create.after_hello"); NULL when out of range. */
const char *sandbox_fault_name(enum sandbox_fault point);
/* True when `name` is "" (no fault) or one of the point names. */
bool sandbox_fault_name_valid(const char *name);
/* If the config names `point`, log one line to stderr and _exit(137); with
 * test_fault_pause_ms set, sleep that long instead, at the first hit only
 * (a race made deterministic: the first request waits there while another
 * passes the same point). Otherwise return at once. Call with no lock held. */
void sandbox_fault_hit(const struct sandbox_config *cfg, enum sandbox_fault point);

#endif
