/* sandbox: how a sandbox ends (sandbox_end: its guest torn down through
 * the fleet, its row settled), and ends that must land (docs/billing.md
 * "Settlement"). A settle
 * that the store refuses for a while (SQLITE_BUSY past busy_timeout while
 * another process holds the write lock, a full disk) is not dropped: it is
 * kept here with the moment and status it was decided with and tried again
 * by the timer (sandbox_settles_retry) until the store takes it. The store
 * settles a row at most once, so a retry that finds it ended is done.
 *
 * And the rule for a sandbox whose guest was lost while nobody watched
 * (sandbox_lost_end): its bill stops at the last moment the host saw it
 * answer (last_seen_at, persisted by the heartbeat or the liveness ping),
 * never later than its expiry. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../billing/billing.h"
#include "../store/store.h"
#include "sandbox-priv.h"
#include "sandbox.h"

#define MOD "settle"

enum settle_kind {
	SETTLE_SANDBOX,
	SETTLE_EXECUTION,
};

struct settle_retry {
	struct settle_retry *next;
	enum settle_kind kind;
	char id[SANDBOX_ID_MAX];
	enum store_status status;		   /* a sandbox's */
	enum sandbox_execution_status exec_status; /* an execution's */
	int64_t at_ms;
	int64_t charge_micro; /* an execution's */
	int attempts;
};

/* The pending end of `id`, or NULL. Call with lock. */
static struct settle_retry *find_locked(struct sandbox_svc *svc, const char *id)
{
	for (struct settle_retry *r = svc->retries; r; r = r->next)
		if (strcmp(r->id, id) == 0)
			return r;
	return NULL;
}

/* Keep `want` (copied) unless an end of its id is pending already. */
static void queue(struct sandbox_svc *svc, const struct settle_retry *want, const char *why)
{
	struct settle_retry *r;

	pthread_mutex_lock(&svc->lock);
	if (find_locked(svc, want->id)) {
		pthread_mutex_unlock(&svc->lock);
		return;
	}
	r = calloc(1, sizeof(*r));
	if (r) {
		*r = *want;
		r->next = svc->retries;
		svc->retries = r;
		svc->n_retries++;
	}
	pthread_mutex_unlock(&svc->lock);
	if (!r)
		sbx_err(MOD,
			"%s: settling failed (%s) and cannot be kept for a retry: out of memory",
			want->id, why);
	else
		sbx_warn(MOD, "%s: settling failed (%s); retrying until the store takes it",
			 want->id, why);
}

static void unqueue(struct sandbox_svc *svc, const char *id)
{
	pthread_mutex_lock(&svc->lock);
	for (struct settle_retry **p = &svc->retries; *p; p = &(*p)->next) {
		if (strcmp((*p)->id, id) == 0) {
			struct settle_retry *r = *p;

			*p = r->next;
			svc->n_retries--;
			free(r);
			break;
		}
	}
	pthread_mutex_unlock(&svc->lock);
}

/* One try: 1 = it landed (or there was nothing left to settle), 0 = not. */
static int try_one(struct sandbox_svc *svc, const struct settle_retry *r, struct store_sandbox *out,
		   struct sbx_error *err)
{
	if (r->kind == SETTLE_SANDBOX)
		return billing_settle(svc->store, r->id, r->status, r->at_ms, out, err) >= 0 ||
		       err->code == SBX_E_NOT_FOUND;
	if (store_execution_settle(svc->store, r->id, sandbox_execution_status_name(r->exec_status),
				   r->at_ms, r->charge_micro, NULL, NULL, NULL, err) == 0)
		return 1;
	return err->code == SBX_E_NOT_FOUND; /* not running: settled already */
}

int sandbox_settle(struct sandbox_svc *svc, const char *id, enum store_status status, int64_t at_ms,
		   struct store_sandbox *out, struct sbx_error *err)
{
	struct settle_retry want = {.kind = SETTLE_SANDBOX, .status = status, .at_ms = at_ms};
	struct sbx_error e;
	int rc;

	if (!err)
		err = &e;
	snprintf(want.id, sizeof want.id, "%s", id);
	/* An end decided earlier that did not land yet wins: its moment. */
	pthread_mutex_lock(&svc->lock);
	struct settle_retry *pending = find_locked(svc, id);
	if (pending && pending->kind == SETTLE_SANDBOX) {
		want.status = pending->status;
		want.at_ms = pending->at_ms;
	}
	pthread_mutex_unlock(&svc->lock);
	rc = billing_settle(svc->store, id, want.status, want.at_ms, out, err);
	if (rc >= 0) {
		if (pending)
			unqueue(svc, id);
		return rc;
	}
	if (err->code != SBX_E_NOT_FOUND)
		queue(svc, &want, err->message);
	return -1;
}

void sandbox_execution_settle(struct sandbox_svc *svc, const char *id,
			      enum sandbox_execution_status status, int64_t ended_at_ms,
			      int64_t charge_micro)
{
	struct settle_retry want = {
	    .kind = SETTLE_EXECUTION, .at_ms = ended_at_ms, .charge_micro = charge_micro};
	struct sbx_error err;

	snprintf(want.id, sizeof want.id, "%s", id);
	want.exec_status = status;
	sbx_error_clear(&err);
	if (!try_one(svc, &want, NULL, &err))
		queue(svc, &want, err.message);
}

size_t sandbox_settles_retry(struct sandbox_svc *svc)
{
	struct settle_retry *snap = NULL;
	size_t n = 0, left;

	pthread_mutex_lock(&svc->lock);
	if (svc->n_retries && (snap = calloc(svc->n_retries, sizeof(*snap)))) {
		for (struct settle_retry *r = svc->retries; r; r = r->next) {
			r->attempts++;
			snap[n++] = *r;
		}
	}
	pthread_mutex_unlock(&svc->lock);
	for (size_t i = 0; i < n; i++) {
		struct sbx_error err;

		sbx_error_clear(&err);
		if (try_one(svc, &snap[i], NULL, &err)) {
			sbx_info(MOD, "%s: settled at the retry (attempt %d)", snap[i].id,
				 snap[i].attempts);
			unqueue(svc, snap[i].id);
		} else if (snap[i].attempts % 30 == 0) {
			sbx_warn(MOD, "%s: settling still fails after %d retries: %s", snap[i].id,
				 snap[i].attempts, err.message);
		}
	}
	free(snap);
	pthread_mutex_lock(&svc->lock);
	left = svc->n_retries;
	pthread_mutex_unlock(&svc->lock);
	return left;
}

void sandbox_settles_free(struct sandbox_svc *svc)
{
	while (svc->retries) {
		struct settle_retry *r = svc->retries;

		sbx_err(
		    MOD,
		    "%s: settling never landed; the next start's reconcile ends it (a sandbox at "
		    "its last answer, an execution released)",
		    r->id);
		svc->retries = r->next;
		free(r);
	}
	svc->n_retries = 0;
}

void sandbox_lost_end(const struct store_sandbox *row, bool domain_alive, int64_t now,
		      enum store_status *status, int64_t *at_ms)
{
	int64_t seen = row->last_seen_at_ms ? row->last_seen_at_ms : row->created_at_ms;

	if (domain_alive && row->expires_at_ms <= now) {
		/* it ran on, unwatched, to its expiry */
		*status = STORE_EXPIRED;
		*at_ms = row->expires_at_ms;
	} else if (seen >= row->expires_at_ms) {
		*status = STORE_EXPIRED;
		*at_ms = row->expires_at_ms;
	} else {
		*status = STORE_FAILED;
		*at_ms = seen;
	}
}

/* ------------------------------------------------------------- the end */

static enum fleet_end end_of(enum store_status status)
{
	switch (status) {
	case STORE_FAILED:
		return FLEET_END_FAILED;
	case STORE_EXPIRED:
		return FLEET_END_EXPIRED;
	case STORE_DESTROYED:
		return FLEET_END_DELETED;
	default:
		return FLEET_END_OTHER;
	}
}

/* End a sandbox: tear its guest down (if this node runs it), then settle
 * the row with `status` at ended_at_ms. Safe to call concurrently and
 * repeatedly: the store settles exactly once. */
int sandbox_end(struct sandbox_svc *svc, const char *id, enum store_status status,
		int64_t ended_at_ms, const char *why, struct store_sandbox *out,
		struct sbx_error *err)
{
	struct fleet_guest *l;

	l = svc->fleet ? fleet_live_take(svc->fleet, id, end_of(status)) : NULL;
	if (status != STORE_DESTROYED) {
		/* Expired or failed: the moment is known; record it first so the
		 * status reads right at once, then destroy the domain (~1 s). A
		 * crash in between leaves a domain without a live row, which
		 * reconcile destroys. */
		int rc = sandbox_settle(svc, id, status, ended_at_ms, out, err);

		if (l)
			fleet_guest_teardown(l, why);
		return rc < 0 ? -1 : 0;
	}
	if (l)
		fleet_guest_teardown(l, why);
	sandbox_fault_hit(&svc->cfg, SANDBOX_FAULT_DELETE_AFTER_DESTROY);
	if (sandbox_settle(svc, id, status, ended_at_ms, out, err) < 0)
		return -1;
	return 0;
}

int sandbox_end_paused(struct sandbox_svc *svc, const struct store_sandbox *row,
		       enum store_status status, int64_t at_ms, struct store_sandbox *out,
		       struct sbx_error *err)
{
	struct fleet_host *h = svc->fleet ? fleet_host_find(svc->fleet, row->host) : NULL;
	struct store_sandbox kept = *row;

	if (sandbox_settle(svc, row->id, status, at_ms, out, err) < 0)
		return -1;
	/* the row is final: its files go (a crash first leaves them to the
	 * next start, which deletes the save files no live row names) */
	if (h && h->vmm && kept.domain[0])
		vmm_destroy_by_name(h->vmm, kept.domain, NULL);
	return 0;
}
