/* sandbox/supervise.c: the periodic work on live guests and who runs the
 * ends. The timer ticks every live's channel (exec deadlines), writes
 * heartbeats, retries the ends the store refused, syncs guest clocks and
 * queues the end of every live found dead or past its expiry; ender
 * threads run the queued ends (sandbox_end, live.c) with no lock held.
 * See sandbox-priv.h for the lock order.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../agentless/agentless.h"
#include "../store/store.h"
#include "sandbox-priv.h"

#define MOD		"sandbox"
#define TICK_MS		200
#define HEARTBEAT_MS	5000
#define SETTLE_RETRY_MS 1000
#define TIME_SYNC_MS	60000

/* ------------------------------------------------------------ the timer */

/* The timer picks, under the lock, which sandboxes must end (queued for
 * the enders) and which guests to tick, each pinned with a ref; it ticks
 * them, writes heartbeats and syncs clocks with no lock held. A tick may
 * complete execs: their callbacks take svc->lock themselves. */
static void timer_pass(struct sandbox_svc *svc, int64_t *last_beat, int64_t *last_sync,
		       int64_t *last_retry)
{
	int64_t now = sbx_wall_ms(), mono = sbx_mono_ms();
	bool beat = mono - *last_beat >= HEARTBEAT_MS, sync = mono - *last_sync >= TIME_SYNC_MS;
	_cleanup_free_ struct live **picked = NULL;
	size_t n = 0, cap = 0;

	pthread_mutex_lock(&svc->lock);
	for (struct live *l = svc->lives; l; l = l->next)
		cap++;
	picked = cap ? calloc(cap, sizeof(*picked)) : NULL;
	for (struct live *l = svc->lives; l; l = l->next) {
		if (l->dead || l->expires_at_ms <= now) {
			/* A guest that died after its expiry is billed to expiry
			 * (billing caps at expires_at anyway). */
			sandbox_end_queue_locked(svc, l, l->dead ? STORE_FAILED : STORE_EXPIRED,
						 l->dead ? l->dead_at_ms : l->expires_at_ms);
			continue;
		}
		if (picked && n < cap) {
			l->refs++;
			picked[n++] = l;
		}
	}
	pthread_mutex_unlock(&svc->lock);

	for (size_t i = 0; i < n; i++) {
		struct live *l = picked[i];

		agentless_conn_tick(l->conn, mono);
		/* With liveness on, last_seen_at moves on answered pings only. */
		if (beat && !svc->cfg.liveness_interval_ms && agentless_conn_alive(l->conn))
			store_sandbox_touch(svc->store, l->id, now, NULL);
		if (sync)
			agentless_conn_send_time(l->conn, NULL);
	}

	pthread_mutex_lock(&svc->lock);
	for (size_t i = 0; i < n; i++)
		sandbox_live_unref_locked(svc, picked[i]);
	pthread_mutex_unlock(&svc->lock);
	/* ends the store refused: again, about every second */
	if (mono - *last_retry >= SETTLE_RETRY_MS) {
		*last_retry = mono;
		sandbox_settles_retry(svc);
	}
	if (beat)
		*last_beat = mono;
	if (sync) {
		*last_sync = mono;
		store_idem_prune(svc->store, now - SANDBOX_IDEMPOTENCY_KEEP_MS, NULL);
	}
}

void *sandbox_timer_main(void *arg)
{
	struct sandbox_svc *svc = arg;
	int64_t last_beat = sbx_mono_ms(), last_sync = sbx_mono_ms(), last_retry = sbx_mono_ms();

	for (;;) {
		struct timespec ts;

		pthread_mutex_lock(&svc->lock);
		if (svc->stop) {
			pthread_mutex_unlock(&svc->lock);
			break;
		}
		ts = sbx_timespec_in(CLOCK_REALTIME, TICK_MS);
		pthread_cond_timedwait(&svc->cond, &svc->lock, &ts);
		bool stop = svc->stop;
		pthread_mutex_unlock(&svc->lock);
		if (stop)
			break;
		timer_pass(svc, &last_beat, &last_sync, &last_retry);
	}
	return NULL;
}

/* ------------------------------------------------------------ the enders */

void sandbox_end_queue_locked(struct sandbox_svc *svc, struct live *l, enum store_status status,
			      int64_t at_ms)
{
	struct end_job *j;

	if (l->end_queued || l->unlinked)
		return;
	j = calloc(1, sizeof(*j));
	if (!j)
		return; /* the next timer pass tries again */
	l->end_queued = true;
	snprintf(j->id, sizeof(j->id), "%s", l->id);
	j->status = status;
	j->at_ms = at_ms;
	*svc->ends_tail = j;
	svc->ends_tail = &j->next;
	pthread_cond_broadcast(&svc->cond);
}

/* An ender: takes queued ends one at a time and runs them with no lock
 * held (closing the channel, destroying the domain, settling). A libvirt
 * call that hangs delays only the ends behind it, never the timer's ticks
 * or a request. At stop it finishes the queue, then returns. */
void *sandbox_ender_main(void *arg)
{
	struct sandbox_svc *svc = arg;
	struct sbx_error err;

	pthread_mutex_lock(&svc->lock);
	for (;;) {
		struct end_job *j = svc->ends;

		if (!j) {
			if (svc->stop)
				break;
			pthread_cond_wait(&svc->cond, &svc->lock);
			continue;
		}
		svc->ends = j->next;
		if (!svc->ends)
			svc->ends_tail = &svc->ends;
		pthread_mutex_unlock(&svc->lock);

		const char *why = j->status == STORE_FAILED
				      ? "the sandbox's guest stopped unexpectedly"
				      : "the sandbox expired while the command ran";
		sbx_info(MOD, "sandbox %s: ending as %s", j->id, store_status_name(j->status));
		if (sandbox_end(svc, j->id, j->status, j->at_ms, why, NULL, &err) < 0)
			sbx_err(MOD, "sandbox %s: settling failed: %s", j->id, err.message);
		free(j);
		pthread_mutex_lock(&svc->lock);
	}
	pthread_mutex_unlock(&svc->lock);
	return NULL;
}
