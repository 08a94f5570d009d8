/* sandbox/supervise.c: the periodic work on live guests and who runs the
 * blocking work. The service has one supervisor (util's sbx_cron, thread
 * "sbx-cron") whose tasks tick every live's channel (exec deadlines) and
 * queue the end of every live found dead or past its expiry, write
 * heartbeats, retry the ends the store refused and sync guest clocks, and
 * the fleet's passes: the hosts' health checks, the warm pool's upkeep and
 * the liveness pings and the metrics' sampling (fleet/hosts.c, pool.c,
 * liveness.c, metrics.c); and one bounded
 * pool (util's sbx_workpool, threads "sbx-block") that runs the blocking
 * work: the queued ends (sandbox_end, settle.c), the teardowns of
 * execution guests (execution.c), and the fleet's jobs (health checks and
 * reconciles, pool boots and recycles, ping and sampling rounds).
 * docs/lifecycle.md
 * "Threads" says what runs where. See sandbox-priv.h for the locks.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../agentless/agentless.h"
#include "../store/store.h"
#include "sandbox-priv.h"

#define MOD		   "sandbox"
#define TICK_MS		   200 /* the supervisor's base tick; the lives pass's period */
#define HEARTBEAT_MS	   5000
#define SETTLE_RETRY_MS	   1000
#define TIME_SYNC_MS	   60000
#define PAUSED_TTL_MS	   5000	 /* paused sandboxes past paused_ttl_minutes (pause.c) */
#define SNAPSHOT_SETTLE_MS 60000 /* snapshots' storage charged up to now (snapshots.c) */

/* --------------------------------------------------------- the passes */

static void end_queue(struct sandbox_svc *svc, struct fleet_guest *l, enum store_status status,
		      int64_t at_ms);

/* Pin (a ref each) every live that is neither dead nor past its expiry;
 * with `queue_ends`, queue the end of the others. The caller uses them
 * with no lock held, then fleet_lives_unpin. */
static struct fleet_guest **lives_pin(struct sandbox_svc *svc, int64_t now, bool queue_ends,
				      size_t *n)
{
	size_t all, kept = 0;
	struct fleet_guest **picked = fleet_lives_pin(svc->fleet, &all);

	for (size_t i = 0; i < all; i++) {
		struct fleet_guest *l = picked[i];
		bool dead;
		int64_t dead_at, expires;

		pthread_mutex_lock(&l->lock);
		dead = l->dead;
		dead_at = l->dead_at_ms;
		expires = l->expires_at_ms;
		pthread_mutex_unlock(&l->lock);
		if (dead || expires <= now) {
			/* A guest that died after its expiry is billed to expiry
			 * (billing caps at expires_at anyway). */
			if (queue_ends)
				end_queue(svc, l, dead ? STORE_FAILED : STORE_EXPIRED,
					  dead ? dead_at : expires);
			fleet_guest_unref(l);
			continue;
		}
		picked[kept++] = l;
	}
	*n = kept;
	return picked;
}

/* Drop the pins, no lock held (a last unref frees the guest). */
static void lives_unpin(struct fleet_guest **picked, size_t n)
{
	fleet_lives_unpin(picked, n);
}

/* Every tick: queue the ends of dead and expired lives, and tick the
 * others' channels (exec deadlines). A tick may complete execs: their
 * callbacks run here, no lock held. */
static void lives_pass(void *opaque, int64_t now_mono)
{
	struct sandbox_svc *svc = opaque;
	size_t n;
	struct fleet_guest **picked = lives_pin(svc, sbx_wall_ms(), true, &n);

	for (size_t i = 0; i < n; i++)
		agentless_conn_tick(picked[i]->conn, now_mono);
	lives_unpin(picked, n);
}

/* The guests that answer are seen: last_seen_at. With liveness on,
 * last_seen_at moves on answered pings only. */
static void heartbeat_pass(void *opaque, int64_t now_mono)
{
	struct sandbox_svc *svc = opaque;
	int64_t now = sbx_wall_ms();
	size_t n;
	struct fleet_guest **picked;

	if (svc->cfg.liveness_interval_ms)
		return;
	picked = lives_pin(svc, now, false, &n);
	for (size_t i = 0; i < n; i++)
		if (agentless_conn_alive(picked[i]->conn))
			store_sandbox_touch(svc->store, picked[i]->id, now, NULL);
	lives_unpin(picked, n);
}

/* Ends the store refused: again, about every second. */
static void settle_retry_pass(void *opaque, int64_t now_mono)
{
	sandbox_settles_retry(opaque);
}

/* Guest clocks, and the idempotency keys past their keep. */
static void time_sync_pass(void *opaque, int64_t now_mono)
{
	struct sandbox_svc *svc = opaque;
	int64_t now = sbx_wall_ms();
	size_t n;
	struct fleet_guest **picked = lives_pin(svc, now, false, &n);

	for (size_t i = 0; i < n; i++)
		agentless_conn_send_time(picked[i]->conn, NULL);
	lives_unpin(picked, n);
	store_idem_prune(svc->store, now - SANDBOX_IDEMPOTENCY_KEEP_MS, NULL);
}

/* The fleet's passes: each queues its blocking part as jobs, each once
 * (fleet/hosts.c, pool.c, liveness.c, metrics.c). */
static void hosts_pass(void *opaque, int64_t now_mono)
{
	struct sandbox_svc *svc = opaque;

	fleet_hosts_pass(svc->fleet);
}

static void pool_pass(void *opaque, int64_t now_mono)
{
	struct sandbox_svc *svc = opaque;

	fleet_pool_pass(svc->fleet);
}

static void liveness_pass(void *opaque, int64_t now_mono)
{
	struct sandbox_svc *svc = opaque;

	fleet_liveness_pass(svc->fleet);
}

static void metrics_pass(void *opaque, int64_t now_mono)
{
	struct sandbox_svc *svc = opaque;

	fleet_metrics_pass(svc->fleet);
}

/* ------------------------------------------------------------ the ends */

/* A sandbox a pass found dead or expired, for the pool. */
struct end_job {
	struct sandbox_svc *svc;
	char id[SANDBOX_ID_MAX];
	enum store_status status;
	int64_t at_ms;
};

/* Close the channel, destroy the domain, settle, with no lock held. A
 * libvirt call that hangs holds one pool thread, never the supervisor's
 * ticks or a request. Cancelled (the pool stopped before a thread took
 * it): the end still runs, here. */
static void end_job_run(void *arg, bool cancelled)
{
	struct end_job *j = arg;
	struct sbx_error err;
	const char *why = j->status == STORE_FAILED ? "the sandbox's guest stopped unexpectedly"
						    : "the sandbox expired while the command ran";

	if (j->status == STORE_EXPIRED) {
		/* timeout_action "pause": paused at its expiry, not ended */
		int rc = sandbox_timeout_pause(j->svc, j->id, j->at_ms);

		if (rc < 0) {
			/* another pause, resume or snapshot of it runs: the
			 * next pass queues this end again */
			struct fleet_guest *l = fleet_live_get(j->svc->fleet, j->id);

			if (l) {
				fleet_guest_end_unclaim(l);
				fleet_guest_unref(l);
			}
		}
		if (rc != 0) {
			free(j);
			return;
		}
	}
	sbx_info(MOD, "sandbox %s: ending as %s", j->id, store_status_name(j->status));
	if (sandbox_end(j->svc, j->id, j->status, j->at_ms, why, NULL, &err) < 0)
		sbx_err(MOD, "sandbox %s: settling failed: %s", j->id, err.message);
	free(j);
}

/* Queue the end of a live sandbox (dead: FAILED at dead_at_ms; expired:
 * EXPIRED at expires_at_ms) as a job of the blocking pool; once per live
 * (fleet_guest_end_claim; when the pool refuses it, the next pass tries
 * again). No lock held. */
static void end_queue(struct sandbox_svc *svc, struct fleet_guest *l, enum store_status status,
		      int64_t at_ms)
{
	struct end_job *j;

	if (!svc->work || !fleet_guest_end_claim(l))
		return;
	j = calloc(1, sizeof(*j));
	if (!j) {
		fleet_guest_end_unclaim(l); /* the next pass tries again */
		return;
	}
	j->svc = svc;
	snprintf(j->id, sizeof(j->id), "%s", l->id);
	j->status = status;
	j->at_ms = at_ms;
	if (sbx_workpool_submit(svc->work, end_job_run, j) < 0) {
		free(j); /* the pool is full or stops: the next pass tries again */
		fleet_guest_end_unclaim(l);
	}
}

/* ------------------------------------------- the supervisor and the pool */

int sandbox_supervise_start(struct sandbox_svc *svc, struct sbx_error *err)
{
	int guests = 0, fleet_jobs;

	for (size_t i = 0; i < svc->cfg.n_hosts; i++)
		guests += svc->cfg.hosts[i].max_guests;
	/* An end, a teardown or a pool boot is one job per guest the hosts
	 * hold (a pool boot counts on its host while queued: pool_booting).
	 * The fleet's passes add at most one job each of their own, as each
	 * is queued once (a key each): a health check per host and the
	 * drains read, a liveness round, a metrics round, a recycling of
	 * pooled guests. With
	 * the threads' worth on top, none of these is refused. Threads start
	 * on demand and end after a while idle. */
	fleet_jobs = (int)svc->cfg.n_hosts + 1 + 1 + 1 + 1 + 1 +
		     1; /* + the paused-ttl job, the snapshots' settle job */
	svc->work = sbx_workpool_new(SANDBOX_WORK_THREAD_NAME, SANDBOX_WORK_THREADS,
				     guests + fleet_jobs + SANDBOX_WORK_THREADS, 0);
	svc->cron = sbx_cron_new(SANDBOX_CRON_THREAD_NAME, TICK_MS);
	fleet_set_work(svc->fleet, svc->work);
	if (!svc->work || !svc->cron ||
	    sbx_cron_add(svc->cron, "lives", TICK_MS, lives_pass, svc) < 0 ||
	    sbx_cron_add(svc->cron, "heartbeat", HEARTBEAT_MS, heartbeat_pass, svc) < 0 ||
	    sbx_cron_add(svc->cron, "settle-retry", SETTLE_RETRY_MS, settle_retry_pass, svc) < 0 ||
	    sbx_cron_add(svc->cron, "time-sync", TIME_SYNC_MS, time_sync_pass, svc) < 0 ||
	    sbx_cron_add(svc->cron, "paused-ttl", PAUSED_TTL_MS, sandbox_paused_ttl_pass, svc) <
		0 ||
	    sbx_cron_add(svc->cron, "snapshots-settle", SNAPSHOT_SETTLE_MS,
			 sandbox_snapshots_settle_pass, svc) < 0 ||
	    sbx_cron_add(svc->cron, "hosts", svc->cfg.host_check_interval_ms, hosts_pass, svc) <
		0 ||
	    (fleet_pool_configured(svc->fleet) &&
	     sbx_cron_add(svc->cron, "pool", TICK_MS, pool_pass, svc) < 0) ||
	    (svc->cfg.liveness_interval_ms &&
	     sbx_cron_add(svc->cron, "liveness", svc->cfg.liveness_interval_ms, liveness_pass,
			  svc) < 0) ||
	    (svc->cfg.metrics_interval_ms &&
	     sbx_cron_add(svc->cron, "metrics", svc->cfg.metrics_interval_ms, metrics_pass, svc) <
		 0) ||
	    sbx_cron_start(svc->cron) < 0) {
		sandbox_supervise_free(svc);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL,
				     "cannot start the supervisor or the work pool");
	}
	return 0;
}

void sandbox_supervise_stop(struct sandbox_svc *svc)
{
	sbx_cron_stop(svc->cron);
	/* no pass queues an end any more: run the queued ones, and wait for
	 * the execution guests' teardowns */
	if (svc->work) {
		struct sbx_workpool_stats st;

		sbx_workpool_stats(svc->work, &st);
		if (st.queued + st.running > 0)
			sbx_info(MOD, "waiting for %d end(s) and teardown(s)",
				 st.queued + st.running);
		sbx_workpool_drain(svc->work);
	}
}

void sandbox_supervise_free(struct sandbox_svc *svc)
{
	sbx_cron_free(svc->cron);
	svc->cron = NULL;
	if (svc->fleet)
		fleet_set_work(svc->fleet, NULL);
	sbx_workpool_free(svc->work);
	svc->work = NULL;
}
