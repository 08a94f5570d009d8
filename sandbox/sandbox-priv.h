/* sandbox: what the module's files share (not for other modules).
 *
 * Files: service.c (the service, its figures), sandboxes.c (create,
 * get/list/destroy/extend), accounts.c, keys.c, usage.c, idempotency.c, receipts.c (their
 * use cases), exec.c, files.c, process.c (calls into a running guest),
 * executions.c (one-shot executions), execution.c (their runtimes, the
 * libvirt runner, the launcher pre-started in a pooled guest),
 * runner_dev.c (the mock and dev-process runners), budget.c (the output
 * budget: its own object and lock), supervise.c (the supervisor's passes,
 * the blocking pool, the ends), settle.c (how a sandbox ends; ends the
 * store refused, retried), reconcile.c (a host's domains and the store's
 * rows made to agree), hosts.c (the fleet's hooks, the operators' host
 * calls), status.c (an execution's status names), config.c, fault.c.
 *
 * The guests, hosts, pools and boots are the fleet's (fleet/fleet.h): the
 * service holds one struct fleet and calls it with no lock of its own
 * held; the fleet calls back through struct fleet_hooks (hosts.c) with
 * none of its locks held.
 *
 * svc->lock guards only the service's own figures (the startup rings) and
 * the ends the store refused (settle.c); it is a leaf: nothing is called
 * with it held. The store has its own mutex, taken with no sandbox lock
 * held. The output budget's lock (budget.c) is a leaf too.
 */
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

/* The service's blocking pool (supervise.c): at most this many threads,
 * started on demand and ending after SBX_WORKPOOL_IDLE_MS without a job,
 * and the threads' names (/proc/PID/task/TID/comm), the supervisor's too. */
#define SANDBOX_WORK_THREADS	 8
#define SANDBOX_WORK_THREAD_NAME "sbx-block"
#define SANDBOX_CRON_THREAD_NAME "sbx-cron"

/* Pauses and resumes in flight at once (pause.c); more answer 503. */
#define SANDBOX_TRANSIT_MAX 64
struct exec_call; /* exec.c */

/* A "minute" of the session clocks: 60 s, or test_minute_ms in tests. */
static inline int64_t sandbox_minute_ms(const struct sandbox_config *cfg)
{
	return cfg->test_minute_ms ? (int64_t)cfg->test_minute_ms : 60000;
}

struct startup_ring {
	int64_t ms[SANDBOX_STARTUP_WINDOW];
	size_t n;   /* samples held, <= window */
	size_t pos; /* next slot to write */
};

struct sandbox_svc {
	struct sandbox_config cfg;
	struct store *store;
	struct receipt_signer *signer; /* the node's receipt key */
	struct fleet *fleet;	       /* the guests and their hosts; NULL for an admin service */

	pthread_mutex_t lock;	 /* a leaf: the startup rings, the kept ends */
	int64_t started_wall_ms; /* this daemon's start: older pending keys are orphans */
	/* The periodic passes (one thread) and the blocking work (a bounded
	 * pool: ends, execution teardowns, the fleet's jobs), supervise.c.
	 * NULL for an admin service. */
	struct sbx_cron *cron;
	struct sbx_workpool *work;

	struct startup_ring startup_warm, startup_cold;
	/* Executions (request received -> result known), per path: a pooled
	 * guest whose interpreter waited, a pooled guest, a booted guest. */
	struct startup_ring exec_prestarted, exec_warm, exec_cold;

	/* The output budget (budget.c): its own object and leaf lock. */
	struct sandbox_output_budget *output;

	/* Ends the store did not take yet (settle.c), retried by the supervisor. */
	struct settle_retry *retries;
	size_t n_retries;

	/* Sandboxes being paused, resumed or ended after their paused
	 * retention (pause.c), under svc->lock: one such operation per
	 * sandbox at a time; calls into them answer 409 meanwhile. */
	char transit[SANDBOX_TRANSIT_MAX][SANDBOX_ID_MAX];
	size_t n_transit;
	bool ttl_queued;	 /* under svc->lock: a paused-retention job is queued */
	bool snap_settle_queued; /* under svc->lock: a snapshots' settle job is queued */

	/* Egress (network.c): the default policy and the forbidden set's
	 * variable part (internal ranges, this host's addresses). Built at
	 * sandbox_svc_new, read-only after. */
	char net_default[NET_POLICY_JSON_MAX];
	struct net_env net;
	/* The relays of guests' connections out (egress.c): its own leaf lock. */
	struct sandbox_egress *egress;
	/* Each sandbox's bandwidth bucket and the waker (bandwidth.c): its
	 * own leaf lock. */
	struct sandbox_bw *bw;
	/* Saves and restores running per host (pause.c), under svc->lock:
	 * at most cfg.pause_jobs_per_host each (more answer 429). */
	struct {
		char host[SANDBOX_HOST_NAME_MAX];
		int n;
	} host_jobs[SANDBOX_MAX_HOSTS];
	/* The terminals open in the guests (exec.c), under svc->lock, so that
	 * a pause can hang them up first; term_cond (with svc->lock) is
	 * signalled when one ends. */
	struct exec_call *terminals; /* a list through exec_call's tnext */
	pthread_cond_t term_cond;    /* CLOCK_MONOTONIC */
};

/* egress.c: the relays (docs/network.md). init at sandbox_svc_new (-1:
 * out of memory); stop waits for every relay to end (after fleet_stop);
 * free after that. */
struct agentless_tcp;
int sandbox_egress_init(struct sandbox_svc *svc);
void sandbox_egress_stop(struct sandbox_svc *svc);
void sandbox_egress_free(struct sandbox_svc *svc);
/* fleet_hooks.egress_open */
void sandbox_egress_open(void *opaque, struct fleet_guest *g, struct agentless_tcp *t,
			 const char *host, uint16_t port);

/* bandwidth.c: a sandbox's bandwidth, one token bucket of
 * network.bandwidth_bytes_per_s shared by its egress relays and its port
 * connections (docs/network.md "Limits"). init at sandbox_svc_new (-1: out
 * of memory or no thread); free last. */
struct sandbox_bucket;
int sandbox_bw_init(struct sandbox_svc *svc);
void sandbox_bw_free(struct sandbox_svc *svc);
/* A ref on sandbox id's bucket (made if new); NULL out of memory. */
struct sandbox_bucket *sandbox_bucket_get(struct sandbox_svc *svc, const char *id);
void sandbox_bucket_put(struct sandbox_svc *svc, struct sandbox_bucket *b);
/* Take up to want bytes: how many (0: none now; *wait_ms, may be NULL, is
 * lowered to when some will be). Give back what did not move. */
size_t sandbox_bucket_take(struct sandbox_svc *svc, struct sandbox_bucket *b, size_t want,
			   int *wait_ms);
void sandbox_bucket_refund(struct sandbox_svc *svc, struct sandbox_bucket *b, size_t n);
/* Has it less than a byte now? */
bool sandbox_bucket_empty(struct sandbox_svc *svc, struct sandbox_bucket *b);
/* A callback for when the buckets have refilled: sandbox_bw_wake_later
 * lists it (once; fn is called once, from the waker's thread, no lock
 * held); sandbox_bw_cancel unlists it and returns once no call of it runs. */
struct sandbox_bw_waiter {
	struct sandbox_bw_waiter *next; /* bw->mu */
	int64_t due_ms;			/* bw->mu */
	bool listed;			/* bw->mu */
	void (*fn)(void *opaque);
	void *opaque;
};
void sandbox_bw_wake_later(struct sandbox_svc *svc, struct sandbox_bw_waiter *w);
void sandbox_bw_cancel(struct sandbox_svc *svc, struct sandbox_bw_waiter *w);

/* network.c: the default policy and svc->net (at sandbox_svc_new). */
int sandbox_network_init(struct sandbox_svc *svc, struct sbx_error *err);

/* pause.c: one of host h's pause_jobs_per_host slots for a save, a
 * restore or a snapshot's copy (I/O heavy): 0, or -1 with 429. Leave it
 * after. svc->lock, a leaf. */
int sandbox_host_job_enter(struct sandbox_svc *svc, struct fleet_host *h, struct sbx_error *err);
void sandbox_host_job_leave(struct sandbox_svc *svc, struct fleet_host *h);
/* snapshots.c: the account's READY snapshot `snap_id` for a create of
 * `size` (its disk at least the snapshot's): 0, or -1 with 404 or 400
 * naming "snapshot". */
int sandbox_snapshot_for_create(struct sandbox_svc *svc, const char *account_id,
				const char *snap_id, const struct sandbox_size *size,
				struct store_snapshot *out, struct sbx_error *err);
/* snapshots.c: ask running sandbox id's guest to write its dirty pages
 * to its disk (an exec of `sync`, at most 20 s): 0, or -1 with 410 (no
 * live guest) or 503. */
int sandbox_guest_sync(struct sandbox_svc *svc, const char *id, struct sbx_error *err);
/* snapshots.c, at a restart (no snapshot in flight): host h's snapshot
 * rows CREATING are rolled back (file and row), DELETING ones finished;
 * files in its run_dir no row names are deleted. */
void sandbox_reconcile_snapshots(struct sandbox_svc *svc, struct fleet_host *h);
/* snapshots.c: a cron pass: charge every snapshot's storage up to now. */
void sandbox_snapshots_settle_pass(void *opaque, int64_t now_mono);

/* rows.c: is sandbox `id` being paused or resumed? (svc->lock) */
bool sandbox_in_transit(struct sandbox_svc *svc, const char *id);
/* 409 sandbox_paused into err for a sandbox being paused or resumed. */
int sandbox_transit_error(const char *id, struct sbx_error *err);
/* Claim `id` for one pause, resume or retention end: 0, or -1 with 409
 * (another one runs) or 503 (too many at once); leave it after. */
int sandbox_transit_enter(struct sandbox_svc *svc, const char *id, struct sbx_error *err);
void sandbox_transit_leave(struct sandbox_svc *svc, const char *id);
/* rows.c: a live guest again for the running domain of `row` on h (a
 * daemon restart, a resume, an undone pause): reattached and linked with
 * the row's expires_at. 0, or -1 with err. */
int sandbox_relink(struct sandbox_svc *svc, struct fleet_host *h, const struct store_sandbox *row,
		   struct sbx_error *err);
/* exec.c: hang up every terminal open in guest g (a pause, before the
 * save: the guest's shells and their PTYs must not be saved with it) and
 * wait for their EXITs until deadline_mono. The number still open. No
 * lock held. */
size_t sandbox_terminals_hangup(struct sandbox_svc *svc, struct fleet_guest *g,
				int64_t deadline_mono);

/* An admin service (SANDBOX_SVC_ADMIN) has no fleet: no guest runs
 * there. These answer for it as a fleet with no guest and no host would:
 * a pin 410, an acquisition 503 (no room). */

/* rows.c: the live guest of sandbox id, pinned (fleet_live_pin), or NULL
 * with err (409 sandbox_paused while it is being paused or resumed). */
struct fleet_guest *sandbox_pin(struct sandbox_svc *svc, const char *id, struct sbx_error *err);

static inline int sandbox_acquire(struct sandbox_svc *svc, struct fleet_acquire *a,
				  struct sbx_error *err)
{
	if (svc->fleet)
		return fleet_acquire(svc->fleet, a, err);
	a->g = NULL;
	a->h = NULL;
	a->warm = false;
	a->no_room = true;
	sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL, "this service runs no guests");
	if (err)
		err->retry_after_s = 10;
	return -1;
}

/* settle.c: how a sandbox ends */

/* End a sandbox: tear its guest down (if this node runs it), settle the
 * row with `status` at ended_at_ms. Safe concurrently and repeatedly: the
 * store settles once. No lock held. */
/* sandboxes.c: 0 when a sandbox's expiry may be want_ms at now_ms: at
 * most max_lifetime_minutes of running from its creation (the time it
 * spent paused is not counted); else 400 param timeout_minutes naming
 * the latest expiry allowed. */
int sandbox_lifetime_check(const struct sandbox_config *cfg, const struct store_sandbox *row,
			   int64_t now_ms, int64_t want_ms, struct sbx_error *err);

/* pause.c: the expiry of a sandbox made with timeout_action "pause" (an
 * end job of supervise.c, on the blocking pool): it is paused, runtime
 * billed to its expiry, instead of ended; a pause that cannot be made (no
 * credit for its storage, the save failed) ends it expired by rule. 1
 * when it was handled so (or is no longer running), 0 when it is not such
 * a sandbox (the caller ends it), -1 when another pause, resume or
 * snapshot of it is under way, or an extend moved its expiry meanwhile
 * (the next pass looks again). */
int sandbox_timeout_pause(struct sandbox_svc *svc, const char *id, int64_t expires_at_ms);

int sandbox_end(struct sandbox_svc *svc, const char *id, enum store_status status,
		int64_t ended_at_ms, const char *why, struct store_sandbox *out,
		struct sbx_error *err);

/* settle.c: end a paused sandbox (DELETE, its paused retention): settle
 * the row with `status` at at_ms, then delete its save file and overlay.
 * *out (may be NULL) gets the row. No lock held. */
int sandbox_end_paused(struct sandbox_svc *svc, const struct store_sandbox *row,
		       enum store_status status, int64_t at_ms, struct store_sandbox *out,
		       struct sbx_error *err);
/* pause.c: the supervisor's paused-retention pass: queue one job that
 * ends the paused sandboxes past paused_ttl_minutes. No lock held. */
void sandbox_paused_ttl_pass(void *opaque, int64_t now_mono);
/* pause.c, for reconcile: make a paused or running row and what its host
 * holds agree at a restart (the domain runs / a save file / neither). */
void sandbox_reconcile_paused(struct sandbox_svc *svc, struct fleet_host *h,
			      const struct store_sandbox *row, bool domain_runs);

/* supervise.c */

/* Make and start the supervisor (its passes: lives every tick, heartbeat,
 * settle retry, time sync) and the blocking pool (up to
 * SANDBOX_WORK_THREADS threads, one waiting job per guest the hosts may
 * hold). 0, or -1 with
 * err and nothing left. */
int sandbox_supervise_start(struct sandbox_svc *svc, struct sbx_error *err);
/* Stop the supervisor (no pass after this), then drain the pool: the
 * queued ends and teardowns run, and none runs when this returns (later
 * submits fail). Call with svc->stop set, no lock held, after the API
 * stopped. */
void sandbox_supervise_stop(struct sandbox_svc *svc);
/* Free both (after sandbox_supervise_stop, or on a failed start). */
void sandbox_supervise_free(struct sandbox_svc *svc);
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

/* rows.c */

/* The row of a sandbox this account may see (a creating one is 404). */
int sandbox_visible_row(struct sandbox_svc *svc, const char *account_id, const char *id,
			struct store_sandbox *row, struct sbx_error *err);

/* sandbox_visible_row, and the sandbox runs at `now` (wall ms): else 410
 * sandbox_not_running. */
int sandbox_running_row(struct sandbox_svc *svc, const char *account_id, const char *id,
			int64_t now, struct store_sandbox *row, struct sbx_error *err);
/* A sandbox's view from its row, its cost accrued to now_ms. */
void sandbox_view_from_row(const struct store_sandbox *row, int64_t now_ms, struct sandbox_view *v);
/* Has the sandbox's cost so far (runtime and the bytes counted) reached
 * what its hold covers, with bytes priced? Past it a byte would go
 * unbilled (docs/billing.md "Network"): no more bytes through it. */
bool sandbox_hold_spent(const struct store_sandbox *row, int64_t now_ms);
/* Add bytes a connection moved (in: to the guest, out: from it) to
 * sandbox id's row (`what` names them in the warning when the store
 * refuses); with check_hold, then whether the hold is spent (true: no
 * more bytes). The metering step of the ports route and of egress. */
bool sandbox_net_count(struct sandbox_svc *svc, const char *id, const char *what, uint64_t in,
		       uint64_t out, bool check_hold);

/* sandboxes.c */

/* create's parameter checks and defaults (size, timeout_minutes), for
 * idempotency.c's canonical request. */
int sandbox_create_params(const struct sandbox_config *cfg, const struct sandbox_create_req *req,
			  const struct sandbox_size **size_out, int *minutes_out,
			  struct sbx_error *err);

/* reconcile.c */

/* The restart reconcile (at the service's start, the hosts opened): what
 * no host owns (interrupted creates and executions, retention, rows on
 * hosts gone or down), then each host that answers. No lock held. 0, or
 * -1 with err when the only host cannot be reconciled. */
int sandbox_reconcile_all(struct sandbox_svc *svc, struct sbx_error *err);
/* Host h answers again (the fleet's host_back hook, before placing on it): destroy
 * its domains without a guest alive here, end its running rows without
 * one. No lock held. 0 or -1 with err (the host thread retries). */
int sandbox_reconcile_host(struct sandbox_svc *svc, struct fleet_host *h, struct sbx_error *err);

/* hosts.c */

/* The hooks the service gives its fleet (opaque = the service). */
extern const struct fleet_hooks sandbox_fleet_hooks;

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
 * only the prestart's leaf lock: callable with the fleet lock held (the prestart_waiting hook). */
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
/* Record one create's startup for /v1/limits (service.c). Call with
 * lock. */
void sandbox_startup_record_locked(struct sandbox_svc *svc, bool warm, int64_t ms);
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

/* ---------------------------------------------------- fault injection
 * A named point in a use case where a test may make the daemon die as
 * abruptly as `kill -9` (`_exit(137)`: no atexit, no cleanup). The config
 * key `test_fault_point` names at most one point; production mode refuses
 * it (sandbox_config_validate). docs/configuration.md and
 * docs/lifecycle.md list the points and what a restart makes of each. */
/* The points, in the order a sandbox meets them. The names are in
 * fault.c, the only list of them. */
enum sandbox_fault {
	SANDBOX_FAULT_CREATE_AFTER_RESERVE,	   /* row CREATING + hold committed */
	SANDBOX_FAULT_CREATE_AFTER_DOMAIN_START,   /* domain started, no HELLO yet */
	SANDBOX_FAULT_CREATE_AFTER_HELLO,	   /* guest ready, row still CREATING */
	SANDBOX_FAULT_CREATE_AFTER_ACTIVATE,	   /* row RUNNING, key not yet done */
	SANDBOX_FAULT_EXTEND_AFTER_HOLD,	   /* extra hold + new expiry committed */
	SANDBOX_FAULT_DELETE_AFTER_DESTROY,	   /* domain destroyed, row not settled */
	SANDBOX_FAULT_DELETE_AFTER_SETTLE,	   /* row settled, reply not sent */
	SANDBOX_FAULT_PAUSE_BEFORE_SAVE,	   /* guest out of the lives, not saved yet */
	SANDBOX_FAULT_PAUSE_AFTER_SAVE,		   /* domain saved and gone, row running */
	SANDBOX_FAULT_RESUME_AFTER_RESTORE,	   /* domain restored, row still paused */
	SANDBOX_FAULT_SNAPSHOT_AFTER_INSERT,	   /* snapshot row CREATING, no file yet */
	SANDBOX_FAULT_SNAPSHOT_AFTER_COPY,	   /* file written, row still CREATING */
	SANDBOX_FAULT_SNAPSHOT_DELETE_AFTER_BEGIN, /* row DELETING, file still there */
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
