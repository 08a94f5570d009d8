/* sandbox: disk snapshots and templates (docs/api.md "Snapshots",
 * docs/lifecycle.md "Snapshots and templates", docs/billing.md
 * "Snapshots").
 *
 * Snapshot: 1. claim the sandbox (the transit set: no pause, resume or
 * other snapshot of it meanwhile) and read its row inside the claim;
 * 2. the row, CREATING, within the account's caps; 3. a running guest
 * syncs its filesystems (an exec of `sync` over its channel), then vmm
 * suspends the domain, copies the disk into one file backed only by the
 * base image and resumes it (a paused sandbox's overlay is quiescent: no
 * suspend), within one of the host's save-and-restore slots; 4. the row
 * READY with the file's host-observed bytes (the bytes cap checked again).
 * A failure after 2 removes the file and the row; a crash leaves a
 * CREATING row that the next start rolls back (sandbox_reconcile_snapshots).
 *
 * Delete: the row DELETING unless a live sandbox is backed by it (409),
 * the file removed, then the final storage charge in the transaction that
 * marks it DELETED. Storage is also charged by a periodic pass, each
 * moving billed_until, so no period is charged twice.
 *
 * No lock of its own; no lock is held across libvirt, the copy or the
 * store. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../agentless/agentless.h"
#include "../billing/billing.h"
#include "sandbox-priv.h"

#define MOD "sandbox"
/* How long the guest's `sync` may take before the snapshot gives up. */
#define SYNC_TIMEOUT_MS 20000

static void view_from_row(const struct store_snapshot *r, int64_t now_ms,
			  struct sandbox_snapshot *v)
{
	memset(v, 0, sizeof(*v));
	snprintf(v->id, sizeof(v->id), "%s", r->id);
	snprintf(v->name, sizeof(v->name), "%s", r->name);
	snprintf(v->sandbox_id, sizeof(v->sandbox_id), "%s", r->sandbox_id);
	v->disk_gib = r->disk_gib;
	v->bytes = r->bytes;
	v->created_at_ms = r->created_at_ms;
	v->cost_micro = r->charge_micro;
	if (r->status == STORE_SNAP_READY && now_ms > r->billed_until_ms)
		v->cost_micro += billing_storage_cost(r->bytes, now_ms - r->billed_until_ms,
						      r->price_micro_per_gib_hour);
}

static int name_check(const char *name, struct sbx_error *err)
{
	size_t n = name ? strlen(name) : 0;

	for (size_t i = 0; i < n; i++)
		if ((unsigned char)name[i] < 0x20 || (unsigned char)name[i] > 0x7e)
			n = SIZE_MAX;
	if (n > SANDBOX_SNAPSHOT_NAME_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "name",
				     "name must be at most %d printable ASCII characters",
				     SANDBOX_SNAPSHOT_NAME_MAX);
	return 0;
}

int sandbox_guest_sync(struct sandbox_svc *svc, const char *id, struct sbx_error *err)
{
	struct fleet_guest *g = fleet_live_get(svc->fleet, id);
	struct agentless_exec_req rq = {
	    .command = "sync",
	    .command_len = 4,
	    .cwd = "/",
	    .timeout_ms = SYNC_TIMEOUT_MS,
	    .stdout_cap = 256,
	    .stderr_cap = 256,
	};
	struct agentless_exec_result rr;
	struct sbx_error e;
	int rc;

	if (!g)
		return sbx_error_set(err, SBX_E_SANDBOX_NOT_RUNNING, NULL,
				     "sandbox '%s' is no longer running", id);
	rc = agentless_exec(g->conn, &rq, &rr, &e);
	fleet_guest_unref(g);
	if (rc == 0) {
		rc = rr.exit_code == 0 ? 0 : -1;
		agentless_exec_result_release(&rr);
	}
	if (rc < 0)
		return sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				     "the guest did not sync its disk for the snapshot; retry");
	return 0;
}

/* How long a copy may take: snapshot_timeout_ms, and for a running guest
 * (suspended meanwhile: it answers no ping) less than the liveness rule
 * takes to call it dead (liveness_misses - 1 silent rounds). */
static uint32_t snapshot_deadline_ms(const struct sandbox_config *cfg, bool running)
{
	uint64_t t = cfg->snapshot_timeout_ms, live;

	if (running && cfg->liveness_interval_ms && cfg->liveness_misses > 1) {
		live = (uint64_t)cfg->liveness_interval_ms * (uint64_t)(cfg->liveness_misses - 1);
		t = t < live ? t : live;
	}
	return (uint32_t)t;
}

/* The most the snapshot of `sb` can take on its host: its overlay (and a
 * paused guest's save file, which is not copied: an overestimate) and the
 * snapshot its disk started from, both flattened into the new file. */
static int64_t snapshot_max_bytes(struct sandbox_svc *svc, struct fleet_host *h,
				  const struct store_sandbox *sb)
{
	int64_t bytes = vmm_saved_bytes(h->vmm, sb->domain);
	struct store_snapshot parent;

	bytes = bytes > 0 ? bytes : 0;
	if (sb->snapshot_id[0] &&
	    store_snapshot_get(svc->store, NULL, sb->snapshot_id, &parent, NULL) == 0)
		bytes += parent.bytes;
	return bytes;
}

/* Steps 3 and 4 with the row CREATING: 0, or -1 (the row and file gone). */
static int snapshot_write(struct sandbox_svc *svc, struct fleet_host *h,
			  const struct store_sandbox *sb, struct store_snapshot *snap,
			  struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	bool running = sb->status != STORE_PAUSED;
	int64_t bytes = 0, t0 = sbx_mono_ms();
	int rc;

	sandbox_fault_hit(cfg, SANDBOX_FAULT_SNAPSHOT_AFTER_INSERT);
	/* the disk rule with the file written: 507, nothing synced or copied */
	rc = fleet_host_disk_room(svc->fleet, h, snapshot_max_bytes(svc, h, sb), err);
	if (rc == 0 && running)
		rc = sandbox_guest_sync(svc, sb->id, err);
	if (rc == 0 && (rc = sandbox_host_job_enter(svc, h, err)) == 0) {
		rc = vmm_snapshot_take(h->vmm, sb->domain, running, snap->id,
				       snapshot_deadline_ms(cfg, running), &bytes, err);
		sandbox_host_job_leave(svc, h);
	}
	if (rc == 0) {
		sandbox_fault_hit(cfg, SANDBOX_FAULT_SNAPSHOT_AFTER_COPY);
		snap->created_at_ms = sbx_wall_ms();
		rc = store_snapshot_ready(svc->store, snap->id, bytes, snap->created_at_ms,
					  (int64_t)cfg->max_snapshot_bytes, err);
		if (rc < 0)
			vmm_snapshot_delete(h->vmm, snap->id);
	}
	if (rc < 0) {
		store_snapshot_forget(svc->store, snap->id, NULL);
		return -1;
	}
	snap->bytes = bytes;
	snap->status = STORE_SNAP_READY;
	snap->billed_until_ms = snap->created_at_ms;
	sbx_info(MOD, "snapshot %s of %s (%s): %lld bytes in %lld ms", snap->id, sb->id,
		 running ? "running" : "paused", (long long)bytes, (long long)(sbx_mono_ms() - t0));
	return 0;
}

static int snapshot_locked(struct sandbox_svc *svc, const char *account_id,
			   const struct store_sandbox *sb, const char *name,
			   struct store_snapshot *snap, struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	const struct sandbox_size *size = sandbox_config_size(cfg, sb->size);
	struct fleet_host *h = fleet_host_find(svc->fleet, sb->host);

	if (!h || !h->vmm)
		return sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				     "the host of sandbox '%s' does not answer; retry", sb->id);
	/* vmm refuses it too; here before anything is written or synced */
	if (!vmm_uri_is_local(h->cfg->uri))
		return sbx_error_set(
		    err, SBX_E_INVALID_REQUEST, NULL,
		    "sandbox '%s' runs on a remote host: snapshots are taken only "
		    "of sandboxes on the service's own host (docs/api.md, Snapshots)",
		    sb->id);
	memset(snap, 0, sizeof(*snap));
	if (sbx_random_id("snap_", 12, snap->id, sizeof(snap->id)) < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "no randomness available");
	snprintf(snap->account_id, sizeof(snap->account_id), "%s", account_id);
	snprintf(snap->name, sizeof(snap->name), "%s", name ? name : "");
	snprintf(snap->sandbox_id, sizeof(snap->sandbox_id), "%s", sb->id);
	snprintf(snap->host, sizeof(snap->host), "%s", sb->host);
	snap->disk_gib = (int64_t)fleet_host_disk_gib(h, size);
	snap->price_micro_per_gib_hour = (int64_t)cfg->snapshot_storage_micro_per_gib_hour;
	snap->created_at_ms = sbx_wall_ms();
	if (!snap->disk_gib)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
				     "sandbox '%s' has no disk to snapshot (its image has none)",
				     sb->id);
	if (store_snapshot_insert(svc->store, snap, cfg->max_snapshots,
				  (int64_t)cfg->max_snapshot_bytes, err) < 0)
		return -1;
	return snapshot_write(svc, h, sb, snap, err);
}

int sandbox_snapshot_create(struct sandbox_svc *svc, const char *account_id, const char *id,
			    const char *name, struct sandbox_snapshot *out, struct sbx_error *err)
{
	struct store_sandbox row;
	struct store_snapshot snap;
	int rc;

	if (name_check(name, err) < 0)
		return -1;
	if (!svc->fleet)
		return sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				     "this service runs no guests");
	if (sandbox_visible_row(svc, account_id, id, &row, err) < 0)
		return -1;
	if (row.status != STORE_PAUSED &&
	    sandbox_running_row(svc, account_id, id, sbx_wall_ms(), &row, err) < 0)
		return -1;
	if (sandbox_transit_enter(svc, id, err) < 0)
		return -1;
	/* again inside the claim: a pause or resume may have just committed */
	rc = sandbox_visible_row(svc, account_id, id, &row, err);
	if (rc == 0 && row.status != STORE_PAUSED)
		rc = sandbox_running_row(svc, account_id, id, sbx_wall_ms(), &row, err);
	if (rc == 0)
		rc = snapshot_locked(svc, account_id, &row, name, &snap, err);
	sandbox_transit_leave(svc, id);
	if (rc < 0)
		return -1;
	view_from_row(&snap, sbx_wall_ms(), out);
	return 0;
}

int sandbox_snapshot_list(struct sandbox_svc *svc, const char *account_id,
			  struct sandbox_snapshot **out, size_t *n, struct sbx_error *err)
{
	struct store_snapshot *rows = NULL;
	size_t count = 0;
	int64_t now = sbx_wall_ms();

	*out = NULL;
	*n = 0;
	if (store_snapshot_list(svc->store, account_id, (size_t)svc->cfg.max_snapshots + 1, &rows,
				&count, err) < 0)
		return -1;
	if (count) {
		*out = calloc(count, sizeof(**out));
		if (!*out) {
			free(rows);
			return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		}
	}
	for (size_t i = 0; i < count; i++)
		view_from_row(&rows[i], now, &(*out)[i]);
	*n = count;
	free(rows);
	return 0;
}

int sandbox_snapshot_get(struct sandbox_svc *svc, const char *account_id, const char *snap_id,
			 struct sandbox_snapshot *out, struct sbx_error *err)
{
	struct store_snapshot row;

	if (store_snapshot_get(svc->store, account_id, snap_id, &row, err) < 0)
		return -1;
	view_from_row(&row, sbx_wall_ms(), out);
	return 0;
}

/* The file of a DELETING row goes, then its final charge and DELETED. */
static int delete_finish(struct sandbox_svc *svc, struct store_snapshot *row, int64_t at_ms,
			 struct sbx_error *err)
{
	struct fleet_host *h = svc->fleet ? fleet_host_find(svc->fleet, row->host) : NULL;
	int64_t charged = 0;

	if (h && h->vmm)
		vmm_snapshot_delete(h->vmm, row->id);
	if (store_snapshot_settle(svc->store, row->id, at_ms, true, billing_storage_cost, &charged,
				  err) < 0)
		return -1;
	row->charge_micro += charged;
	row->billed_until_ms = at_ms;
	row->status = STORE_SNAP_DELETED;
	return 0;
}

int sandbox_snapshot_delete(struct sandbox_svc *svc, const char *account_id, const char *snap_id,
			    struct sandbox_snapshot *out, struct sbx_error *err)
{
	struct store_snapshot row;

	if (store_snapshot_delete_begin(svc->store, account_id, snap_id, &row, err) < 0)
		return -1;
	sandbox_fault_hit(&svc->cfg, SANDBOX_FAULT_SNAPSHOT_DELETE_AFTER_BEGIN);
	if (delete_finish(svc, &row, sbx_wall_ms(), err) < 0)
		return -1;
	view_from_row(&row, sbx_wall_ms(), out);
	sbx_info(MOD, "snapshot %s: deleted", snap_id);
	return 0;
}

int sandbox_snapshot_for_create(struct sandbox_svc *svc, const char *account_id,
				const char *snap_id, const struct sandbox_size *size,
				struct store_snapshot *out, struct sbx_error *err)
{
	struct fleet_host *h;

	if (store_snapshot_get(svc->store, account_id, snap_id, out, err) < 0) {
		if (err && err->code == SBX_E_NOT_FOUND)
			snprintf(err->param, sizeof(err->param), "snapshot");
		return -1;
	}
	h = svc->fleet ? fleet_host_find(svc->fleet, out->host) : NULL;
	if (h && (int64_t)fleet_host_disk_gib(h, size) < out->disk_gib)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "size",
				     "size '%s' has a smaller disk than snapshot '%s' (%lld GiB); "
				     "pick a size with at least that disk",
				     size->name, snap_id, (long long)out->disk_gib);
	return 0;
}

/* ------------------------------------------------- restart and billing */

struct files_seen {
	struct sandbox_svc *svc;
	struct fleet_host *h;
	const struct store_snapshot *rows;
	size_t n;
};

static void file_seen(void *opaque, const char *snap_id)
{
	struct files_seen *fs = opaque;

	for (size_t i = 0; i < fs->n; i++)
		if (strcmp(fs->rows[i].id, snap_id) == 0 &&
		    strcmp(fs->rows[i].host, fs->h->cfg->name) == 0)
			return;
	sbx_info(MOD, "reconcile: host %s: deleting snapshot file %s (no row names it)",
		 fs->h->cfg->name, snap_id);
	vmm_snapshot_delete(fs->h->vmm, snap_id);
}

void sandbox_reconcile_snapshots(struct sandbox_svc *svc, struct fleet_host *h)
{
	struct store_snapshot *rows = NULL;
	size_t n = 0, kept = 0;
	struct sbx_error e;

	if (store_snapshot_list_all(svc->store, &rows, &n, &e) < 0) {
		sbx_warn(MOD, "reconcile: snapshots not read: %s", e.message);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct store_snapshot *r = &rows[i];

		if (strcmp(r->host, h->cfg->name) != 0 || r->status == STORE_SNAP_READY) {
			rows[kept++] = *r;
			continue;
		}
		if (r->status == STORE_SNAP_CREATING) {
			sbx_info(MOD, "reconcile: snapshot %s was being taken; rolled back", r->id);
			vmm_snapshot_delete(h->vmm, r->id);
			store_snapshot_forget(svc->store, r->id, NULL);
		} else if (r->status == STORE_SNAP_DELETING) {
			sbx_info(MOD, "reconcile: snapshot %s was being deleted; deleted", r->id);
			if (delete_finish(svc, r, sbx_wall_ms(), &e) < 0)
				sbx_warn(MOD, "reconcile: snapshot %s: %s", r->id, e.message);
		}
	}
	struct files_seen fs = {svc, h, rows, kept};
	vmm_list_snapshots(h->vmm, file_seen, &fs);
	free(rows);
}

/* A job of svc->work: charge every READY snapshot's storage up to now. */
static void settle_job(void *arg, bool cancelled)
{
	struct sandbox_svc *svc = arg;
	struct store_snapshot *rows = NULL;
	size_t n = 0;
	int64_t now = sbx_wall_ms();
	struct sbx_error e;

	if (!cancelled && store_snapshot_list_all(svc->store, &rows, &n, &e) == 0) {
		for (size_t i = 0; i < n; i++)
			if (rows[i].status == STORE_SNAP_READY &&
			    store_snapshot_settle(svc->store, rows[i].id, now, false,
						  billing_storage_cost, NULL, &e) < 0)
				sbx_warn(MOD, "snapshot %s: storage not settled: %s", rows[i].id,
					 e.message);
	}
	free(rows);
	pthread_mutex_lock(&svc->lock);
	svc->snap_settle_queued = false;
	pthread_mutex_unlock(&svc->lock);
}

void sandbox_snapshots_settle_pass(void *opaque, int64_t now_mono)
{
	struct sandbox_svc *svc = opaque;
	bool queue;

	(void)now_mono;
	if (!svc->work || !svc->cfg.snapshot_storage_micro_per_gib_hour)
		return;
	pthread_mutex_lock(&svc->lock);
	queue = !svc->snap_settle_queued;
	svc->snap_settle_queued = true;
	pthread_mutex_unlock(&svc->lock);
	if (queue && sbx_workpool_submit(svc->work, settle_job, svc) < 0) {
		pthread_mutex_lock(&svc->lock);
		svc->snap_settle_queued = false; /* the next pass tries again */
		pthread_mutex_unlock(&svc->lock);
	}
}
