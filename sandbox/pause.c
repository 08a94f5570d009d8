/* sandbox: pause and resume (docs/lifecycle.md "Pause and resume",
 * docs/billing.md "Pause").
 *
 * Pause: the guest is taken out of the lives (no request reaches it, the
 * supervisor no longer ticks or expires it), its channel closed, its
 * domain saved beside its overlay (vmm_vm_save), then the row moves to
 * paused in one transaction that stops runtime billing and holds the
 * storage of its paused retention. Resume: the domain is restored
 * (vmm_vm_restore), the row moves back to running in one transaction that
 * adds the storage cost and the paused time (runtime billing restarts,
 * expires_at moves out by the pause), and the guest is reattached like
 * after a daemon restart (fleet_guest_reattach: the WELCOME carries the
 * host's clock, which the guest's PID 1 sets).
 *
 * The host's state is changed first, the row after, so that a crash in
 * between leaves a host state the next start reads back (reconcile):
 *   row running, domain gone, save file  -> paused at last_seen_at
 *   row paused, domain running           -> resumed at the restart
 *   row paused, save file                -> stays paused
 *   row paused, neither                  -> ends failed at paused_at
 * Each of those moves is the same store transaction as the live one, so
 * billing switches exactly once each way.
 *
 * One pause, resume or retention end per sandbox at a time (the transit
 * set, under svc->lock, a leaf). No lock is held across libvirt or the
 * store.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../billing/billing.h"
#include "sandbox-priv.h"

#define MOD "sandbox"
/* How long a resume waits for the restored guest's first answer. */
#define RESUME_PING_MS 10000
/* How long a pause waits for the EXITs of the terminals it hung up. */
#define TERMINAL_HANGUP_MS 3000
/* What a save file may hold beyond the guest's memory (device state). */
#define SAVE_MARGIN_BYTES (INT64_C(16) << 20)
/* How often a pause at an expiry asks again for a busy host's slot. */
#define HOST_JOB_WAIT_STEP_MS 500

/* ------------------------------------------------------------ helpers */

/* A live guest again for the running domain of `row` on h (restored, or
 * never saved): relinked; one whose row ended meanwhile goes. 0 or -1. */
static int relink(struct sandbox_svc *svc, struct fleet_host *h, const struct store_sandbox *row,
		  struct sbx_error *err)
{
	if (sandbox_relink(svc, h, row, err) < 0)
		return -1;
	/* A DELETE (or the paused retention) that ended the row meanwhile
	 * found no guest to end: this one is unbilled, so it goes now. */
	struct store_sandbox now_row;
	struct sbx_error e = {0};
	if (store_sandbox_get(svc->store, NULL, row->id, &now_row, &e) == 0 &&
	    now_row.status != STORE_RUNNING) {
		struct fleet_guest *g = fleet_live_take(svc->fleet, row->id, FLEET_END_DELETED);

		sbx_warn(MOD, "sandbox %s: ended (%s) while it was relinked: its guest goes",
			 row->id, store_status_name(now_row.status));
		if (g)
			fleet_guest_teardown(g, "the sandbox ended while it was relinked");
		return sbx_error_set(err, SBX_E_SANDBOX_NOT_RUNNING, NULL,
				     "sandbox '%s' is %s; create a new one", row->id,
				     store_status_name(now_row.status));
	}
	return 0;
}

/* The storage hold of a pause of `bytes`: its whole paused retention. */
static int64_t storage_hold(const struct sandbox_config *cfg, int64_t bytes)
{
	return billing_storage_cost(bytes,
				    (int64_t)cfg->paused_ttl_minutes * sandbox_minute_ms(cfg),
				    (int64_t)cfg->paused_storage_micro_per_gib_hour);
}

/* 410 for a sandbox that ended while it was being paused or resumed. */
static int ended_meanwhile(const struct store_sandbox *row, struct sbx_error *err)
{
	return sbx_error_set(err, SBX_E_SANDBOX_NOT_RUNNING, NULL,
			     "sandbox '%s' is %s; create a new one", row->id,
			     store_status_name(row->status));
}

/* Claim `id` for a pause or a resume and read its row again inside the
 * claim (another one may have just committed). 0 with the claim held, or
 * -1 with none. */
static int claim(struct sandbox_svc *svc, const char *account_id, const char *id,
		 struct store_sandbox *row, struct sbx_error *err)
{
	if (!svc->fleet)
		return sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				     "this service runs no guests");
	if (sandbox_transit_enter(svc, id, err) < 0)
		return -1;
	if (sandbox_visible_row(svc, account_id, id, row, err) < 0) {
		sandbox_transit_leave(svc, id);
		return -1;
	}
	return 0;
}

/* One of host h's pause_jobs_per_host save-or-restore slots: 0, or -1
 * with 429 rate_limited (saves and restores are I/O heavy: one account
 * must not take a host's disk). svc->lock, a leaf. */
int sandbox_host_job_enter(struct sandbox_svc *svc, struct fleet_host *h, struct sbx_error *err)
{
	const char *name = h->cfg->name;
	size_t i, free_i = SANDBOX_MAX_HOSTS;
	int rc = -1;

	pthread_mutex_lock(&svc->lock);
	/* the host's entry while it has jobs, else a free one */
	for (i = 0; i < SANDBOX_MAX_HOSTS; i++) {
		if (!svc->host_jobs[i].n)
			free_i = free_i < i ? free_i : i;
		else if (strcmp(svc->host_jobs[i].host, name) == 0)
			break;
	}
	if (i == SANDBOX_MAX_HOSTS && free_i < SANDBOX_MAX_HOSTS) {
		i = free_i;
		snprintf(svc->host_jobs[i].host, sizeof(svc->host_jobs[i].host), "%s", name);
	}
	if (i < SANDBOX_MAX_HOSTS && svc->host_jobs[i].n < svc->cfg.pause_jobs_per_host) {
		svc->host_jobs[i].n++;
		rc = 0;
	}
	pthread_mutex_unlock(&svc->lock);
	if (rc < 0) {
		sbx_error_set(err, SBX_E_RATE_LIMITED, NULL,
			      "the sandbox's host is at its limit of saves and restores at once "
			      "(%d); retry shortly",
			      svc->cfg.pause_jobs_per_host);
		if (err)
			err->retry_after_s = 5;
	}
	return rc;
}

void sandbox_host_job_leave(struct sandbox_svc *svc, struct fleet_host *h)
{
	pthread_mutex_lock(&svc->lock);
	for (size_t i = 0; i < SANDBOX_MAX_HOSTS; i++) {
		if (svc->host_jobs[i].n && strcmp(svc->host_jobs[i].host, h->cfg->name) == 0) {
			svc->host_jobs[i].n--;
			break;
		}
	}
	pthread_mutex_unlock(&svc->lock);
}

/* ------------------------------------------------------------- pause */

/* The largest save this guest may make and keep: its whole memory,
 * device state and its disk overlay now (no save file yet). */
static int64_t pause_max_bytes(struct sandbox_svc *svc, struct fleet_host *h,
			       const struct store_sandbox *row)
{
	const struct sandbox_size *size = sandbox_config_size(&svc->cfg, row->size);
	int64_t bytes = vmm_saved_bytes(h->vmm, row->domain);

	return (bytes > 0 ? bytes : 0) + SAVE_MARGIN_BYTES +
	       (size ? (int64_t)size->memory_mib << 20 : 0);
}

/* Before the save: can the account hold the storage of the largest save
 * (pause_max_bytes) for the paused retention? 0, or -1 with 402 (it
 * keeps running, nothing was written). The hold itself is taken on what
 * was saved, in the pause's transaction. */
static int pause_credit_check(struct sandbox_svc *svc, const struct store_sandbox *row,
			      int64_t bytes, struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	struct store_balance b;
	int64_t hold;
	char need[32], have[32];

	if (!cfg->paused_storage_micro_per_gib_hour)
		return 0;
	hold = storage_hold(cfg, bytes);
	if (store_balance_get(svc->store, row->account_id, &b, err) < 0)
		return -1;
	if (b.available_micro >= hold)
		return 0;
	billing_format_usd(hold, need);
	billing_format_usd(b.available_micro > 0 ? b.available_micro : 0, have);
	return sbx_error_set(err, SBX_E_INSUFFICIENT_CREDIT, NULL,
			     "insufficient credit: the storage of this pause (up to %lld MiB for "
			     "%d minutes) needs $%s reserved but $%s is available; add credit",
			     (long long)(bytes >> 20), cfg->paused_ttl_minutes, need, have);
}

/* The guest could not be saved, or the row not paused: bring it back
 * (restore when it was saved) and link it with its row as it is now (an
 * extend may have landed meanwhile); failing that it ends failed. */
static void pause_undo(struct sandbox_svc *svc, struct fleet_host *h,
		       const struct store_sandbox *row, bool saved)
{
	struct sbx_error e;
	struct store_sandbox cur;

	if (saved) {
		bool late = false;
		struct vmm_vm *vm =
		    vmm_vm_restore(h->vmm, row->domain, svc->cfg.pause_timeout_ms, &late, &e);

		if (!vm && late) {
			/* by rule (docs/lifecycle.md): a restore past its
			 * deadline ends the sandbox failed, billed until now */
			sbx_err(MOD, "sandbox %s: no restore in time after a refused pause",
				row->id);
			vmm_destroy_by_name(h->vmm, row->domain, NULL);
			sandbox_settle(svc, row->id, STORE_FAILED, sbx_wall_ms(), NULL, NULL);
			return;
		}
		if (!vm) {
			/* the save file stays: the next start finds the row
			 * running with a save file and pauses it */
			sbx_err(MOD, "sandbox %s: cannot resume after a refused pause: %s", row->id,
				e.message);
			return;
		}
		vmm_vm_free(vm);
	}
	if (store_sandbox_get(svc->store, NULL, row->id, &cur, &e) < 0)
		cur = *row;
	if (relink(svc, h, &cur, &e) < 0) {
		sbx_err(MOD, "sandbox %s: cannot reattach after a failed pause: %s", row->id,
			e.message);
		vmm_destroy_by_name(h->vmm, row->domain, NULL);
		sandbox_settle(svc, row->id, STORE_FAILED, sbx_wall_ms(), NULL, NULL);
	}
}

/* With the host's save slot held. at_ms: when runtime billing stops, if
 * earlier than the save's start (a pause at the expiry), else 0. */
static int pause_saved(struct sandbox_svc *svc, struct fleet_host *h, struct store_sandbox *row,
		       int64_t at_ms, struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	struct fleet_guest *g;
	int64_t t0, t1, bytes = 0;
	int rc;

	/* not a dead one: the supervisor ends that (failed) */
	g = fleet_live_take_alive(svc->fleet, row->id, FLEET_END_PAUSED);
	if (!g)
		return sbx_error_set(err, SBX_E_SANDBOX_NOT_RUNNING, NULL,
				     "sandbox '%s' is no longer running", row->id);
	/* its terminals end here (the API said so); their shells must not
	 * be saved with the guest, holding its PTYs */
	sandbox_terminals_hangup(svc, g, sbx_mono_ms() + TERMINAL_HANGUP_MS);
	sandbox_fault_hit(cfg, SANDBOX_FAULT_PAUSE_BEFORE_SAVE);
	t0 = sbx_wall_ms();
	rc = fleet_guest_save(g, "the sandbox was paused", cfg->pause_timeout_ms, &bytes, err);
	fleet_guest_unref(g);
	if (rc < 0) {
		pause_undo(svc, h, row, false);
		return -1;
	}
	t1 = sbx_wall_ms();
	sandbox_fault_hit(cfg, SANDBOX_FAULT_PAUSE_AFTER_SAVE);
	rc = store_sandbox_pause(svc->store, row->id, at_ms && at_ms < t0 ? at_ms : t0, bytes,
				 (int64_t)cfg->paused_storage_micro_per_gib_hour,
				 storage_hold(cfg, bytes), row, err);
	if (rc < 0) {
		pause_undo(svc, h, row, true);
		return -1;
	}
	if (rc == 0) {
		/* it ended meanwhile: its files go with it */
		vmm_destroy_by_name(h->vmm, row->domain, NULL);
		return ended_meanwhile(row, err);
	}
	sbx_info(MOD, "sandbox %s: paused in %lld ms (%lld bytes saved with its overlay)", row->id,
		 (long long)(t1 - t0), (long long)bytes);
	return 0;
}

/* A host slot for the pause at a sandbox's expiry: it waits for one, up
 * to pause_timeout_ms (a busy host must not end it). 0 or -1 (429). */
static int host_job_wait(struct sandbox_svc *svc, struct fleet_host *h, struct sbx_error *err)
{
	int64_t until = sbx_mono_ms() + svc->cfg.pause_timeout_ms;

	while (sandbox_host_job_enter(svc, h, err) < 0) {
		if (sbx_mono_ms() >= until)
			return -1;
		sbx_error_clear(err);
		sbx_sleep_ms(HOST_JOB_WAIT_STEP_MS);
	}
	return 0;
}

/* at_ms: 0 for a pause asked for now; a sandbox's expiry for the pause
 * its timeout_action asks for (it waits for a host slot). */
static int pause_locked(struct sandbox_svc *svc, struct store_sandbox *row, int64_t at_ms,
			struct sbx_error *err)
{
	struct fleet_host *h = fleet_host_find(svc->fleet, row->host);
	int rc;

	if (!h || !h->vmm)
		return sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				     "the host of sandbox '%s' does not answer; retry", row->id);
	/* the money and the disk first: a refused pause must not have cost a
	 * save, nor filled the disk the ledger writes to */
	int64_t most = pause_max_bytes(svc, h, row);
	if (pause_credit_check(svc, row, most, err) < 0 ||
	    fleet_host_disk_room(svc->fleet, h, most, err) < 0)
		return -1;
	/* its disk as the guest sees it: what a snapshot of the paused
	 * sandbox copies (best effort: the save keeps the page cache anyway) */
	struct sbx_error se;
	if (sandbox_guest_sync(svc, row->id, &se) < 0)
		sbx_warn(MOD, "sandbox %s: no sync before its pause: %s", row->id, se.message);
	if ((at_ms ? host_job_wait(svc, h, err) : sandbox_host_job_enter(svc, h, err)) < 0)
		return -1;
	rc = pause_saved(svc, h, row, at_ms, err);
	sandbox_host_job_leave(svc, h);
	return rc;
}

int sandbox_pause(struct sandbox_svc *svc, const char *account_id, const char *id,
		  struct sandbox_view *out, struct sbx_error *err)
{
	struct store_sandbox row;
	int rc = 0;

	if (sandbox_visible_row(svc, account_id, id, &row, err) < 0)
		return -1;
	if (row.status != STORE_PAUSED) {
		if (sandbox_running_row(svc, account_id, id, sbx_wall_ms(), &row, err) < 0 ||
		    claim(svc, account_id, id, &row, err) < 0)
			return -1;
		if (row.status != STORE_PAUSED) {
			rc = sandbox_running_row(svc, account_id, id, sbx_wall_ms(), &row, err);
			if (rc == 0)
				rc = pause_locked(svc, &row, 0, err);
		}
		sandbox_transit_leave(svc, id);
		if (rc < 0)
			return -1;
	}
	sandbox_view_from_row(&row, sbx_wall_ms(), out);
	return 0;
}

int sandbox_timeout_pause(struct sandbox_svc *svc, const char *id, int64_t expires_at_ms)
{
	struct store_sandbox row;
	struct sbx_error err = {0}, e;
	int rc;

	if (!svc->fleet || store_sandbox_get(svc->store, NULL, id, &row, &err) < 0 ||
	    row.timeout_action != STORE_ON_TIMEOUT_PAUSE)
		return 0;
	if (claim(svc, NULL, id, &row, &err) < 0)
		return -1; /* a snapshot of it is under way: the next pass */
	if (row.status == STORE_RUNNING && row.expires_at_ms > sbx_wall_ms()) {
		/* an extend landed after the pass found it expired: the next
		 * pass reads its new expiry */
		sandbox_transit_leave(svc, id);
		return -1;
	}
	rc = 1;
	if (row.status == STORE_RUNNING && pause_locked(svc, &row, expires_at_ms, &err) < 0) {
		/* not paused (no credit for its storage, no save): it ends as
		 * any sandbox at its expiry, inside the claim, so that no other
		 * end of it tries the pause again meanwhile */
		sbx_warn(MOD, "sandbox %s: not paused at its expiry (%s): it ends expired", id,
			 err.message);
		if (sandbox_end(svc, id, STORE_EXPIRED, expires_at_ms, "the sandbox expired", NULL,
				&e) < 0)
			sbx_err(MOD, "sandbox %s: settling failed: %s", id, e.message);
	} else if (row.status == STORE_PAUSED) {
		sbx_info(MOD, "sandbox %s: paused at its expiry (timeout_action pause)", id);
	}
	sandbox_transit_leave(svc, id);
	return rc;
}

/* ------------------------------------------------------------ resume */

/* Restore the domain of `row` with host h's slot held: a handle, or NULL
 * with err; a restore past pause_timeout_ms ends the sandbox failed
 * (docs/lifecycle.md: runtime billed until the pause, its storage until
 * now). */
static struct vmm_vm *resume_restore(struct sandbox_svc *svc, struct fleet_host *h,
				     struct store_sandbox *row, struct sbx_error *err)
{
	struct vmm_vm *vm;
	bool late = false;

	if (sandbox_host_job_enter(svc, h, err) < 0)
		return NULL;
	vm = vmm_vm_restore(h->vmm, row->domain, svc->cfg.pause_timeout_ms, &late, err);
	sandbox_host_job_leave(svc, h);
	if (!vm && late) {
		sbx_err(MOD, "sandbox %s: not restored within pause_timeout_ms: ends failed",
			row->id);
		sandbox_end_paused(svc, row, STORE_FAILED, sbx_wall_ms(), row, NULL);
	}
	return vm;
}

/* The expiry a resume at at_ms gives the paused `row`: the time it had
 * left, moved out by the pause (*exp = 0), or, when that is earlier, at
 * least `minutes` from at_ms; with no minutes asked, the default timeout
 * when it had no time left (it was paused at its expiry). *extra: the
 * hold of the time added (as an extend). 400 past the lifetime, 402 when
 * the account cannot hold it (nothing done). */
static int resume_expiry(struct sandbox_svc *svc, const struct store_sandbox *row, int64_t at_ms,
			 int minutes, int64_t *exp, int64_t *extra, struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	int64_t moved = row->expires_at_ms + (at_ms - row->paused_at_ms), want;
	struct store_balance b;

	*exp = *extra = 0;
	if (!minutes && row->expires_at_ms <= row->paused_at_ms)
		minutes = cfg->default_timeout_minutes;
	want = at_ms + (int64_t)minutes * sandbox_minute_ms(cfg);
	if (!minutes || want <= moved)
		return 0;
	if (sandbox_lifetime_check(cfg, row, at_ms, want, err) < 0)
		return -1;
	*exp = want;
	*extra = billing_cost(want - moved, row->price_micro_per_hour);
	if (store_balance_get(svc->store, row->account_id, &b, err) < 0)
		return -1;
	if (b.available_micro < *extra) {
		char need[32], have[32];

		billing_format_usd(*extra, need);
		billing_format_usd(b.available_micro > 0 ? b.available_micro : 0, have);
		return sbx_error_set(
		    err, SBX_E_INSUFFICIENT_CREDIT, NULL,
		    "insufficient credit: the %d minutes this resume grants need $%s "
		    "reserved but $%s is available; add credit (it stays paused)",
		    minutes, need, have);
	}
	return 0;
}

/* Restore, switch the row back to running and relink, on h (admitted). */
static int resume_on(struct sandbox_svc *svc, struct fleet_host *h, struct store_sandbox *row,
		     int minutes, struct sbx_error *err)
{
	struct vmm_vm *vm;
	int64_t t0 = sbx_mono_ms(), t1, paused_at = row->paused_at_ms, exp, extra;
	int rc;

	/* the money first: a refused resume must not have cost a restore */
	if (resume_expiry(svc, row, sbx_wall_ms(), minutes, &exp, &extra, err) < 0)
		return -1;
	vm = resume_restore(svc, h, row, err);
	if (!vm)
		return -1;
	vmm_vm_free(vm); /* the reattach looks it up again */
	t1 = sbx_wall_ms();
	sandbox_fault_hit(&svc->cfg, SANDBOX_FAULT_RESUME_AFTER_RESTORE);
	/* the same rule at the moment the row switches */
	rc = resume_expiry(svc, row, t1, minutes, &exp, &extra, err);
	if (rc == 0)
		rc = store_sandbox_resume(svc->store, row->id, t1, billing_pause_cost, exp, extra,
					  row, err);
	if (rc < 0) {
		/* the row stays paused: so must the guest */
		struct sbx_error e;
		struct vmm_vm *again = vmm_vm_lookup(h->vmm, row->domain, &e);

		if (!again || vmm_vm_save(again, svc->cfg.pause_timeout_ms, NULL, &e) < 0)
			sbx_err(MOD, "sandbox %s: runs while its row says paused: %s", row->id,
				e.message);
		vmm_vm_free(again);
		return -1;
	}
	if (rc == 0) {
		/* ended meanwhile (a DELETE, its retention): the guest goes */
		vmm_destroy_by_name(h->vmm, row->domain, NULL);
		return ended_meanwhile(row, err);
	}
	if (relink(svc, h, row, err) < 0) {
		sbx_err(MOD, "sandbox %s: resumed but cannot be reattached", row->id);
		vmm_destroy_by_name(h->vmm, row->domain, NULL);
		sandbox_settle(svc, row->id, STORE_FAILED, sbx_wall_ms(), row, NULL);
		return -1;
	}
	/* answer once the guest answers: its HELLO (said whenever a host
	 * connects) comes before the PONG, so requests after this reply
	 * find the protocol settled */
	struct fleet_guest *l = fleet_live_get(svc->fleet, row->id);
	struct sbx_error pe;

	if (l && agentless_conn_ping(l->conn, 0, sbx_mono_ms() + RESUME_PING_MS, &pe) < 0)
		sbx_warn(MOD, "sandbox %s: no answer from the guest after resume: %s", row->id,
			 pe.message);
	if (l)
		fleet_guest_unref(l);
	sbx_info(MOD, "sandbox %s: resumed in %lld ms after %lld s paused", row->id,
		 (long long)(sbx_mono_ms() - t0), (long long)((t1 - paused_at) / 1000));
	return 0;
}

/* Its memory was free while it was paused, and the host may have given
 * it away (a create, the pool): room first (fleet_host_admit), counted as
 * booting until the restore is relinked or has failed. */
static int resume_locked(struct sandbox_svc *svc, struct store_sandbox *row, int minutes,
			 struct sbx_error *err)
{
	const struct sandbox_size *size = sandbox_config_size(&svc->cfg, row->size);
	struct fleet_host *h = fleet_host_find(svc->fleet, row->host);
	int rc;

	if (!h || !h->vmm)
		return sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				     "the host of sandbox '%s' does not answer; it stays paused: "
				     "retry",
				     row->id);
	if (!size)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "sandbox '%s': unknown size '%s'",
				     row->id, row->size);
	if (fleet_host_admit(svc->fleet, h, size, err) < 0) {
		int retry = err->retry_after_s;

		sbx_info(MOD, "sandbox %s: stays paused: %s", row->id, err->message);
		sbx_error_clear(err);
		sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
			      "the host of sandbox '%s' has no room to restore it now (its memory "
			      "went to other guests while it was paused); it stays paused: retry",
			      row->id);
		err->retry_after_s = retry;
		return -1;
	}
	rc = resume_on(svc, h, row, minutes, err);
	fleet_guest_uncount(svc->fleet, h, size);
	return rc;
}

int sandbox_resume(struct sandbox_svc *svc, const char *account_id, const char *id,
		   int timeout_minutes, struct sandbox_view *out, struct sbx_error *err)
{
	struct store_sandbox row;
	int64_t ttl = (int64_t)svc->cfg.paused_ttl_minutes * sandbox_minute_ms(&svc->cfg);
	int rc = 0;

	if (timeout_minutes < 0 || timeout_minutes > svc->cfg.max_timeout_minutes)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "timeout_minutes",
				     "timeout_minutes must be 1..%d", svc->cfg.max_timeout_minutes);

	if (sandbox_visible_row(svc, account_id, id, &row, err) < 0)
		return -1;
	if (row.status != STORE_PAUSED) {
		/* running: as it is; ended (or past its expiry): 410, as pause */
		if (sandbox_running_row(svc, account_id, id, sbx_wall_ms(), &row, err) < 0)
			return -1;
		if (sandbox_in_transit(svc, id))
			return sandbox_transit_error(id, err);
		sandbox_view_from_row(&row, sbx_wall_ms(), out);
		return 0;
	}
	if (claim(svc, account_id, id, &row, err) < 0)
		return -1;
	if (row.status == STORE_PAUSED && row.paused_at_ms + ttl <= sbx_wall_ms()) {
		/* past its retention (the pass had not come yet): it ends as
		 * the pass would have ended it */
		rc =
		    sandbox_end_paused(svc, &row, STORE_EXPIRED, row.paused_at_ms + ttl, &row, err);
		if (rc == 0)
			rc = sbx_error_set(err, SBX_E_SANDBOX_NOT_RUNNING, NULL,
					   "sandbox '%s' was paused longer than its retention and "
					   "has expired",
					   id);
	} else if (row.status == STORE_PAUSED) {
		rc = resume_locked(svc, &row, timeout_minutes, err);
	} else if (row.status != STORE_RUNNING) {
		rc = ended_meanwhile(&row, err);
	}
	sandbox_transit_leave(svc, id);
	if (rc < 0)
		return -1;
	sandbox_view_from_row(&row, sbx_wall_ms(), out);
	return 0;
}

/* ------------------------------------------------ paused retention */

static void ttl_job(void *arg, bool cancelled)
{
	struct sandbox_svc *svc = arg;
	struct store_sandbox *rows = NULL;
	size_t n = 0;
	int64_t now = sbx_wall_ms(),
		ttl = (int64_t)svc->cfg.paused_ttl_minutes * sandbox_minute_ms(&svc->cfg);
	struct sbx_error err;

	if (!cancelled && store_sandbox_list_live(svc->store, &rows, &n, &err) == 0) {
		for (size_t i = 0; i < n; i++) {
			const struct store_sandbox *r = &rows[i];

			struct store_sandbox cur;

			if (r->status != STORE_PAUSED || r->paused_at_ms + ttl > now ||
			    sandbox_transit_enter(svc, r->id, NULL) < 0)
				continue;
			/* read again inside the claim: a resume may have just
			 * committed (it is running again, or paused anew) */
			if (store_sandbox_get(svc->store, NULL, r->id, &cur, &err) < 0 ||
			    cur.status != STORE_PAUSED || cur.paused_at_ms != r->paused_at_ms) {
				sandbox_transit_leave(svc, r->id);
				continue;
			}
			sbx_info(MOD, "sandbox %s: paused longer than paused_ttl_minutes; ending",
				 r->id);
			if (sandbox_end_paused(svc, r, STORE_EXPIRED, r->paused_at_ms + ttl, NULL,
					       &err) < 0)
				sbx_err(MOD, "sandbox %s: ending failed: %s", r->id, err.message);
			sandbox_transit_leave(svc, r->id);
		}
	}
	free(rows);
	pthread_mutex_lock(&svc->lock);
	svc->ttl_queued = false;
	pthread_mutex_unlock(&svc->lock);
}

void sandbox_paused_ttl_pass(void *opaque, int64_t now_mono)
{
	struct sandbox_svc *svc = opaque;
	bool queue;

	(void)now_mono;
	if (!svc->work)
		return;
	pthread_mutex_lock(&svc->lock);
	queue = !svc->ttl_queued;
	svc->ttl_queued = true;
	pthread_mutex_unlock(&svc->lock);
	if (queue && sbx_workpool_submit(svc->work, ttl_job, svc) < 0) {
		pthread_mutex_lock(&svc->lock);
		svc->ttl_queued = false; /* the next pass tries again */
		pthread_mutex_unlock(&svc->lock);
	}
}

/* ------------------------------------------------------- at a restart */

void sandbox_reconcile_paused(struct sandbox_svc *svc, struct fleet_host *h,
			      const struct store_sandbox *row, bool domain_runs)
{
	const struct sandbox_config *cfg = &svc->cfg;
	int64_t now = sbx_wall_ms();
	struct sbx_error e;
	struct store_sandbox r = *row;

	if (row->status == STORE_PAUSED) {
		if (domain_runs) {
			/* cut between the restore and its row: resumed now */
			if (store_sandbox_resume(svc->store, row->id, now, billing_pause_cost, 0, 0,
						 &r, &e) < 0 ||
			    relink(svc, h, &r, &e) < 0) {
				sbx_warn(MOD, "reconcile: %s cannot be resumed: %s", row->id,
					 e.message);
				vmm_destroy_by_name(h->vmm, row->domain, NULL);
				sandbox_settle(svc, row->id, STORE_FAILED, now, NULL, NULL);
				return;
			}
			sbx_info(MOD, "reconcile: %s was being resumed; resumed", row->id);
		} else if (vmm_saved(h->vmm, row->domain) == 1) {
			sbx_info(MOD, "reconcile: %s stays paused", row->id);
		} else {
			sbx_info(MOD, "reconcile: %s lost its saved guest; ending at its pause",
				 row->id);
			sandbox_settle(svc, row->id, STORE_FAILED, row->paused_at_ms, NULL, NULL);
		}
		return;
	}
	/* a running row whose domain is gone but saved: cut between the save
	 * and its row; paused at its last answer (no later than the save) */
	int64_t at =
	    row->last_seen_at_ms > row->created_at_ms ? row->last_seen_at_ms : row->created_at_ms;
	int64_t bytes = vmm_saved_bytes(h->vmm, row->domain);

	if (bytes < 0)
		bytes = 0;
	int rc = store_sandbox_pause(svc->store, row->id, at, bytes,
				     (int64_t)cfg->paused_storage_micro_per_gib_hour,
				     storage_hold(cfg, bytes), &r, &e);
	if (rc == 1) {
		sbx_info(MOD, "reconcile: %s was being paused; paused", row->id);
		return;
	}
	/* the storage cannot be held: running again, as before the pause */
	sbx_warn(MOD, "reconcile: %s cannot be paused (%s); resuming", row->id,
		 rc < 0 ? e.message : "not running");
	pause_undo(svc, h, row, true);
}
