/* fleet: the liveness ping (docs/lifecycle.md "Liveness").
 *
 * A guest that hangs without dying (PID 1 wedged, vCPUs paused) sends no
 * lifecycle event and its channel does not break. A round pings every
 * live guest over its channel every liveness_interval_ms, each ping
 * waiting at most that long; liveness_misses misses in a row mark the
 * sandbox dead at its last answered moment, and the supervisor's lives
 * pass queues its end as failed there (domain destroyed, billing stopped
 * at that moment). An
 * answered ping is also the heartbeat (the guest_seen hook: the owner
 * moves last_seen_at only when the guest answers), so a daemon restart ends a frozen guest's row
 * where it stopped answering, not where it stopped being watched.
 *
 * The supervisor's "liveness" task (every liveness_interval_ms) queues a
 * round as a job of the blocking pool, never two at once (a round still
 * in flight skips that pass): the task itself never waits on a guest. A
 * round pings every guest first (sends only queue), then awaits each
 * answer until one common deadline, so it takes at most one interval
 * however many guests stay silent. A live is pinned with refs while its
 * ping is in flight so no end frees its conn under us.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../agentless/agentless.h"
#include "fleet-priv.h"

#define MOD	     "fleet"
#define LIVENESS_MAX 4096 /* guests watched per round (>> max_guests) */
#define TOUCH_MS     5000 /* tell guest_seen at most this often */

struct watch {
	char id[SANDBOX_ID_MAX];
	int misses;
	int64_t last_ok_ms;    /* wall clock of the last answer (or first sight) */
	int64_t last_touch_ms; /* wall clock of the last store write */
	bool seen;	       /* still live this round */
};

struct pinned {
	struct fleet_guest *l;
	struct watch *w;
	struct agentless_ping *ping; /* NULL when it could not be sent */
};

static struct watch *watch_find(struct watch *ws, size_t n, const char *id)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(ws[i].id, id) == 0)
			return &ws[i];
	return NULL;
}

static void liveness_round(struct fleet *f, struct watch *ws, size_t *n_ws, struct pinned *pins)
{
	const uint32_t interval = f->cfg->liveness_interval_ms;
	size_t n_pins = 0, kept = 0;
	int64_t now = sbx_wall_ms();

	/* 1. Pin every live guest; forget the watches of guests that left. */
	for (size_t i = 0; i < *n_ws; i++)
		ws[i].seen = false;
	pthread_mutex_lock(&f->lock);
	for (struct fleet_guest *l = f->lives; l && n_pins < LIVENESS_MAX; l = l->next) {
		struct watch *w;

		if (fleet_guest_dead(l))
			continue;
		w = watch_find(ws, *n_ws, l->id);
		if (!w && *n_ws < LIVENESS_MAX) {
			w = &ws[(*n_ws)++];
			memset(w, 0, sizeof(*w));
			snprintf(w->id, sizeof(w->id), "%s", l->id);
			w->last_ok_ms = now;
			w->last_touch_ms = now;
		}
		if (!w)
			continue;
		w->seen = true;
		fleet_guest_ref(l);
		pins[n_pins].l = l;
		pins[n_pins].w = w;
		n_pins++;
	}
	pthread_mutex_unlock(&f->lock);

	/* 2. Ping them all without the lock, then collect the answers until
	 * one deadline. */
	int64_t deadline = sbx_mono_ms() + interval;
	for (size_t i = 0; i < n_pins; i++)
		pins[i].ping = agentless_conn_ping_send(pins[i].l->conn, NULL);
	for (size_t i = 0; i < n_pins; i++) {
		struct fleet_guest *l = pins[i].l;
		struct watch *w = pins[i].w;
		int64_t rtt, t;

		rtt = pins[i].ping ? agentless_conn_ping_wait(l->conn, pins[i].ping, deadline, NULL)
				   : -1;
		t = sbx_wall_ms();
		if (rtt >= 0) {
			w->misses = 0;
			w->last_ok_ms = t;
			if (t - w->last_touch_ms >= TOUCH_MS) {
				if (f->hooks.guest_seen)
					f->hooks.guest_seen(f->hooks.opaque, w->id, t);
				w->last_touch_ms = t;
			}
		} else if (agentless_conn_alive(l->conn)) {
			/* A broken channel is on_conn_broken's business; only a
			 * channel that works but gets no answer is a miss. */
			w->misses++;
			sbx_warn(MOD, "sandbox %s: liveness ping unanswered (%d of %d)", w->id,
				 w->misses, f->cfg->liveness_misses);
		}
		if (w->misses >= f->cfg->liveness_misses && !fleet_guest_over(l) &&
		    fleet_guest_mark_dead(l, w->last_ok_ms)) {
			sbx_warn(MOD,
				 "sandbox %s: guest stopped answering; failing it as of its last "
				 "answer %lld ms ago",
				 w->id, (long long)(t - w->last_ok_ms));
		}
		fleet_guest_unref(l);
	}

	/* 3. Compact: keep the watches of guests still live. */
	for (size_t i = 0; i < *n_ws; i++)
		if (ws[i].seen)
			ws[kept++] = ws[i];
	*n_ws = kept;
}

/* The pinger's memory between rounds: only the round in flight (one at
 * a time) touches the watches and the pins. */
struct fleet_liveness {
	struct watch ws[LIVENESS_MAX];
	struct pinned pins[LIVENESS_MAX];
	size_t n_ws;
};

/* A job: one round (it waits up to an interval on the answers). Skipped
 * when the pool stopped before it ran. */
static void liveness_job_run(void *arg, bool cancelled)
{
	struct fleet *f = arg;
	struct fleet_liveness *lv = f->liveness;

	if (!cancelled)
		liveness_round(f, lv->ws, &lv->n_ws, lv->pins);
}

void fleet_liveness_pass(struct fleet *f)
{
	struct fleet_liveness *lv = f->liveness;

	if (!lv)
		return;
	pthread_mutex_lock(&f->lock);
	bool stop = f->stop;
	pthread_mutex_unlock(&f->lock);
	if (stop)
		return;
	/* one round at a time (its key busy until it returned); refused
	 * (full, stopping): the next pass tries again */
	fleet_work_submit_once(f, lv, liveness_job_run, f);
}

int fleet_liveness_init(struct fleet *f)
{
	if (!f->cfg->liveness_interval_ms)
		return 0;
	f->liveness = calloc(1, sizeof(*f->liveness));
	return f->liveness ? 0 : -1;
}

void fleet_liveness_free(struct fleet *f)
{
	free(f->liveness);
	f->liveness = NULL;
}
