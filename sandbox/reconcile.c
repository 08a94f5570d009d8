/* sandbox: reconcile, a host's domains and the store's rows made to agree
 * (DESIGN.md "Crash safety", docs/lifecycle.md "Restart and reconcile").
 *
 * At a restart (sandbox_reconcile_all, from sandbox_svc_new):
 *   1. read the live rows (creating and running) once;
 *   2. free the idempotency keys of interrupted creates, release the holds
 *      of interrupted executions, drop stored results and receipts past
 *      execution_retention_hours;
 *   3. each creating row: its create is rolled back (its domain, if any,
 *      is an orphan for step 4);
 *      each running row on a host no longer configured or not answering:
 *      it ends (settle_lost); a paused one stays paused on a host that
 *      does not answer (its saved guest is on that host's disk) and ends
 *      failed at its pause on a host no longer configured;
 *   4. each host that answers (reconcile_host, restart):
 *      a. list its domains of ours: one naming a running row here is kept,
 *         the rest are orphans and destroyed;
 *      b. each running row here: past its expiry it ends at the expiry
 *         (its domain destroyed), without its domain it ends at
 *         last_seen_at, else it is reattached (a live guest on a new
 *         channel) or, failing that, destroyed and ended failed;
 *      c. the stale files of stopped guests are pruned.
 *
 * When a host answers again (sandbox_reconcile_host, from the host thread):
 *   1. read the live rows;
 *   2. reconcile_host, not a restart: a domain is kept only if its row's
 *      guest is still alive here, the rest are destroyed; each running row
 *      here without a live guest ends failed at last_seen_at (its guest
 *      was failed when the host went down); stale files are pruned.
 *
 * No lock is held across a libvirt or store call; the fleet finds and
 * links the live guests.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox-priv.h"

#define MOD "host" /* its log lines keep the host module's name */

struct live_rows {
	struct store_sandbox *rows;
	size_t n;
};

struct reconcile_ctx {
	struct sandbox_svc *svc;
	struct fleet_host *h;
	const struct live_rows *lr;
	bool restart;
	char (*orphans)[64];
	size_t n_orphans;
	char (*kept)[64];
	size_t n_kept;
	size_t cap;
};

static const struct store_sandbox *row_of(const struct reconcile_ctx *rc, const char *domain,
					  const char *sandbox_id)
{
	for (size_t i = 0; i < rc->lr->n; i++) {
		const struct store_sandbox *r = &rc->lr->rows[i];

		if ((r->status == STORE_RUNNING || r->status == STORE_PAUSED) &&
		    strcmp(r->host, rc->h->cfg->name) == 0 && strcmp(r->domain, domain) == 0 &&
		    strcmp(r->id, sandbox_id) == 0)
			return r;
	}
	return NULL;
}

static void reconcile_domain(void *opaque, const char *name, const char *sandbox_id)
{
	struct reconcile_ctx *rc = opaque;
	const struct store_sandbox *row = row_of(rc, name, sandbox_id);

	/* At a restart a running row keeps its domain (reattached below);
	 * on a host that came back only a guest still alive here does, or
	 * one being paused or resumed (sandbox/pause.c) right now. */
	if (row && (rc->restart || fleet_live_alive(rc->svc->fleet, row->id) ||
		    sandbox_in_transit(rc->svc, row->id))) {
		if (rc->n_kept < rc->cap)
			snprintf(rc->kept[rc->n_kept++], 64, "%s", name);
		return;
	}
	if (rc->n_orphans < rc->cap)
		snprintf(rc->orphans[rc->n_orphans++], 64, "%s", name);
}

/* End a running row whose guest cannot be used (sandbox_lost_end): one
 * whose domain ran on past its expiry at the expiry, the rest at their last
 * answer (last_seen_at), never later than their expiry. */
static void settle_lost(struct sandbox_svc *svc, const struct store_sandbox *row, int64_t now,
			bool domain_alive, const char *why)
{
	enum store_status status;
	int64_t at;

	sandbox_lost_end(row, domain_alive, now, &status, &at);
	sbx_info(MOD, "reconcile: %s %s; ending %s", row->id, why,
		 at == row->expires_at_ms ? "as expired at expires_at" : "at last_seen_at");
	sandbox_settle(svc, row->id, status, at, NULL, NULL);
}

struct saved_ctx {
	struct sandbox_svc *svc;
	struct fleet_host *h;
	struct store_sandbox *rows;
	size_t n;
};

static void saved_one(void *opaque, const char *name)
{
	struct saved_ctx *c = opaque;

	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->rows[i].domain, name) == 0 &&
		    strcmp(c->rows[i].host, c->h->cfg->name) == 0)
			return;
	sbx_info(MOD, "reconcile: host %s: deleting the saved guest %s (no live sandbox)",
		 c->h->cfg->name, name);
	vmm_destroy_by_name(c->h->vmm, name, NULL);
}

/* Delete the save files (and the rest of the files) of names no live row
 * on h names, read after the rows were reconciled. */
static void prune_saved(struct sandbox_svc *svc, struct fleet_host *h)
{
	struct saved_ctx c = {.svc = svc, .h = h};

	if (store_sandbox_list_live(svc->store, &c.rows, &c.n, NULL) < 0)
		return;
	vmm_list_saved(h->vmm, saved_one, &c);
	free(c.rows);
}

/* Make host h's domains and its running rows agree (DESIGN.md "Crash
 * safety"): domains of ours without a live row are destroyed (on a host
 * that came back: without a guest still alive here); at a restart,
 * running rows past expiry end there, those whose domain is gone end at
 * last_seen_at and the rest are reattached; on a host that came back
 * every row without a live guest here ends failed at last_seen_at (their
 * guests were failed when it went down). No lock held. */
static int reconcile_host(struct sandbox_svc *svc, struct fleet_host *h, const struct live_rows *lr,
			  bool restart, struct sbx_error *err)
{
	struct reconcile_ctx rc = {.svc = svc, .h = h, .lr = lr, .restart = restart, .cap = 4096};
	int64_t now = sbx_wall_ms();

	int rcode = -1;

	rc.orphans = calloc(rc.cap, sizeof(*rc.orphans));
	rc.kept = calloc(rc.cap, sizeof(*rc.kept));
	if (!rc.orphans || !rc.kept) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		goto out;
	}
	if (vmm_list_domains(h->vmm, reconcile_domain, &rc, err) < 0)
		goto out;
	for (size_t i = 0; i < rc.n_orphans; i++) {
		sbx_info(MOD, "reconcile: host %s: destroying domain %s (no live sandbox)",
			 h->cfg->name, rc.orphans[i]);
		vmm_destroy_by_name(h->vmm, rc.orphans[i], NULL);
	}
	for (size_t i = 0; i < lr->n; i++) {
		const struct store_sandbox *row = &lr->rows[i];
		bool has_domain = false;
		struct sbx_error e;

		if (strcmp(row->host, h->cfg->name) != 0)
			continue;
		if (row->status == STORE_PAUSED) {
			/* no guest while paused: only a restart looks at it */
			if (restart) {
				for (size_t k = 0; k < rc.n_kept; k++)
					if (strcmp(rc.kept[k], row->domain) == 0)
						has_domain = true;
				sandbox_reconcile_paused(svc, h, row, has_domain);
			}
			continue;
		}
		if (row->status != STORE_RUNNING)
			continue;
		if (!restart) {
			if (!fleet_live_alive(svc->fleet, row->id) &&
			    !sandbox_in_transit(svc, row->id))
				settle_lost(svc, row, now, false, "ran on a host that was down");
			continue;
		}
		for (size_t k = 0; k < rc.n_kept; k++)
			if (strcmp(rc.kept[k], row->domain) == 0)
				has_domain = true;
		if (row->expires_at_ms <= now) {
			if (has_domain)
				vmm_destroy_by_name(h->vmm, row->domain, NULL);
			settle_lost(svc, row, now, has_domain, "expired while the daemon was down");
		} else if (!has_domain && vmm_saved(h->vmm, row->domain) == 1) {
			sandbox_reconcile_paused(svc, h, row, false);
		} else if (!has_domain) {
			settle_lost(svc, row, now, false, "lost its guest");
		} else {
			/* a snapshot's copy the crash cut left it suspended */
			if (vmm_resume_suspended(h->vmm, row->domain) == 1)
				sbx_info(MOD, "reconcile: %s was suspended for a snapshot; resumed",
					 row->id);
			if (sandbox_relink(svc, h, row, &e) < 0) {
				sbx_warn(MOD, "reconcile: %s cannot be reattached: %s", row->id,
					 e.message);
				vmm_destroy_by_name(h->vmm, row->domain, NULL);
				sandbox_settle(svc, row->id, STORE_FAILED, now, NULL, NULL);
			}
		}
	}
	/* Save files no paused sandbox names any more (ended while the
	 * daemon was down, or cut before their row): at a restart no pause
	 * is in flight. */
	if (restart) {
		prune_saved(svc, h);
		sandbox_reconcile_snapshots(svc, h);
	}
	/* Overlays, sockets and logs of guests that died while nobody
	 * watched (host crash, kill -9): no create is in flight here yet. */
	int pruned = vmm_prune_files(h->vmm, NULL);
	if (pruned > 0)
		sbx_info(MOD, "reconcile: host %s: removed %d stale files of stopped guests",
			 h->cfg->name, pruned);
	rcode = 0;
out:
	free(rc.orphans);
	free(rc.kept);
	return rcode;
}

/* The restart reconcile: what no host owns (interrupted creates and
 * executions, rows on hosts no longer configured or down), then each host
 * that answers. */
int sandbox_reconcile_all(struct sandbox_svc *svc, struct sbx_error *err)
{
	struct live_rows lr = {0};
	int64_t now = sbx_wall_ms();
	int cut;

	if (store_sandbox_list_live(svc->store, &lr.rows, &lr.n, err) < 0)
		return -1;
	/* No create survives a restart: their keys are freed (API.md). */
	if (store_idem_release_pending(svc->store, NULL) > 0)
		sbx_info(MOD, "reconcile: freed the idempotency keys of interrupted creates");
	/* Nor does a one-shot execution: release its hold, charge nothing. */
	cut = store_execution_fail_unfinished(svc->store, now, NULL);
	if (cut > 0)
		sbx_info(MOD, "reconcile: released the holds of %d interrupted execution(s)", cut);
	/* Stored results past their retention (execution_retention_hours). */
	cut = store_execution_prune(
	    svc->store, now - (int64_t)svc->cfg.execution_retention_hours * 3600 * 1000, NULL);
	if (cut > 0)
		sbx_info(MOD, "reconcile: dropped %d stored execution result(s) past retention",
			 cut);
	cut = store_receipt_prune(
	    svc->store, now - (int64_t)svc->cfg.execution_retention_hours * 3600 * 1000, NULL);
	if (cut > 0)
		sbx_info(MOD, "reconcile: dropped %d receipt(s) past retention", cut);
	for (size_t i = 0; i < lr.n; i++) {
		const struct store_sandbox *row = &lr.rows[i];
		struct fleet_host *h = fleet_host_find(svc->fleet, row->host);

		if (row->status == STORE_CREATING) {
			/* its domain, if any, names a creating row: an orphan */
			sbx_info(MOD, "reconcile: rolling back create of %s", row->id);
			store_sandbox_abort(svc->store, row->id, NULL);
		} else if (row->status == STORE_PAUSED && !h) {
			/* its saved guest is out of reach for good: as a paused
			 * row whose files are lost, at its pause */
			sbx_warn(MOD,
				 "reconcile: %s was paused on host %s, no longer configured; "
				 "ending it failed at its pause",
				 row->id, row->host);
			sandbox_settle(svc, row->id, STORE_FAILED, row->paused_at_ms, NULL, NULL);
		} else if (row->status == STORE_PAUSED && !h->vmm) {
			/* its saved guest is on that host's disk: it stays
			 * paused, its resume answers 503 until the host does */
			sbx_warn(MOD,
				 "reconcile: %s is paused on host %s, which does not answer: "
				 "it stays paused (a resume answers 503 until the host answers)",
				 row->id, row->host);
		} else if (!h) {
			settle_lost(svc, row, now, false, "ran on a host no longer configured");
		} else if (!h->vmm) {
			settle_lost(svc, row, now, false, "runs on a host that does not answer");
		}
	}
	for (size_t i = 0; i < fleet_n_hosts(svc->fleet); i++) {
		struct fleet_host *h = fleet_host_at(svc->fleet, i);
		struct sbx_error e;

		if (h->vmm && reconcile_host(svc, h, &lr, true, &e) < 0) {
			sbx_warn(MOD, "reconcile: host %s: %s", h->cfg->name, e.message);
			if (fleet_n_hosts(svc->fleet) == 1) {
				*err = e;
				free(lr.rows);
				return -1;
			}
		}
	}
	free(lr.rows);
	return 0;
}

/* A host that answers again: reconcile it against the live rows. */
int sandbox_reconcile_host(struct sandbox_svc *svc, struct fleet_host *h, struct sbx_error *err)
{
	struct live_rows lr = {0};
	int rc = -1;

	if (store_sandbox_list_live(svc->store, &lr.rows, &lr.n, err) == 0)
		rc = reconcile_host(svc, h, &lr, false, err);
	free(lr.rows);
	return rc;
}
