/* fleet: the live guests' metrics (fleet.h "metrics", docs/api.md
 * "Metrics").
 *
 * The supervisor's "metrics" task (every metrics_interval_ms) queues a
 * round as a job of the work pool, never two at once (a round still in
 * flight skips that pass), and never waits itself. A round pins every
 * live guest with a ref, reads its stats from libvirt with no lock held
 * (vmm_vm_stats: one call per guest, each bounded by its host's
 * connection keepalive), and adds one sample to the guest's ring under
 * the guest's leaf lock. The ring is the guest's: it goes with its last
 * unref, so an ended sandbox has no samples any more.
 *
 * What is whose: CPU time and disk use are the host's figures; memory is
 * the guest's own word through its balloon driver, which a hostile guest
 * makes up at will: it is clamped to the guest's size, shown marked as
 * guest-reported, and never used for money or for any decision.
 */
#include <stdlib.h>
#include <string.h>

#include "../vmm/vmm.h"
#include "fleet-priv.h"

#define MOD "fleet"
/* Balloon figures QEMU received longer ago than this many periods (and
 * at least STALE_MIN_MS) are a driver that stopped reporting: none. */
#define STALE_PERIODS 4
#define STALE_MIN_MS  30000

int fleet_live_metrics(struct fleet *f, const char *id, struct fleet_metrics_sample **out,
		       size_t *n, struct sbx_error *err)
{
	struct fleet_guest *g = fleet_live_get(f, id);
	struct fleet_metrics_sample *buf;

	*out = NULL;
	*n = 0;
	if (!g)
		return sbx_error_set(err, SBX_E_SANDBOX_NOT_RUNNING, NULL,
				     "sandbox '%s' is not running", id);
	/* allocated before the lock (the ring's size is fixed) */
	buf = malloc(FLEET_METRICS_HISTORY * sizeof(*buf));
	if (!buf) {
		fleet_guest_unref(g);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	}
	pthread_mutex_lock(&g->lock);
	if (g->metrics)
		*n = fleet_metrics_copy(g->metrics, buf, FLEET_METRICS_HISTORY);
	pthread_mutex_unlock(&g->lock);
	fleet_guest_unref(g);
	if (*n == 0)
		free(buf);
	else
		*out = buf;
	return 0;
}

/* --------------------------------------------------------------- round */

int64_t fleet_metrics_memory_mib(const struct vmm_vm_stats *st, uint64_t size_mib,
				 uint32_t interval_ms, int64_t now_ms)
{
	int64_t stale_ms = (int64_t)interval_ms * STALE_PERIODS;
	uint64_t used_kib, used;

	if (stale_ms < STALE_MIN_MS)
		stale_ms = STALE_MIN_MS;
	/* a driver that never reported, or stopped: QEMU keeps its last
	 * figures, they say nothing of now */
	if (!st->has_memory || st->memory_reported_s <= 0 ||
	    st->memory_reported_s > INT64_MAX / 1000 ||
	    st->memory_reported_s * 1000 < now_ms - stale_ms)
		return -1;
	/* the guest's word: bounded by what its size gives it */
	used_kib = st->memory_total_kib > st->memory_available_kib
		       ? st->memory_total_kib - st->memory_available_kib
		       : 0;
	used = used_kib / 1024;
	if (size_mib && used > size_mib)
		used = size_mib;
	return (int64_t)used;
}

/* A reading of guest g's stats as the ring takes it. */
static void reading_from(struct fleet *f, struct fleet_guest *g, const struct vmm_vm_stats *st,
			 struct fleet_metrics_reading *r)
{
	memset(r, 0, sizeof(*r));
	r->mono_ms = sbx_mono_ms();
	r->wall_ms = sbx_wall_ms();
	r->has_cpu = st->has_cpu;
	r->cpu_ns = st->cpu_ns;
	r->memory_used_mib =
	    fleet_metrics_memory_mib(st, g->memory_mib, f->cfg->metrics_interval_ms, r->wall_ms);
	r->disk_used_mib = st->has_disk ? (int64_t)((st->disk_bytes + (1u << 20) - 1) >> 20) : -1;
}

/* One guest: read, then add under its lock (the ring made first, before
 * the lock, when it has none). No lock held. */
static void sample_guest(struct fleet *f, struct fleet_guest *g)
{
	struct vmm_vm_stats st;
	struct fleet_metrics_reading r;
	struct fleet_metrics *fresh = NULL;
	struct sbx_error e = {0};

	if (!g->vm || fleet_guest_over(g))
		return;
	if (vmm_vm_stats(g->vm, &st, &e) < 0) {
		sbx_debug(MOD, "sandbox %s: no stats: %s", g->id, e.message);
		return;
	}
	reading_from(f, g, &st, &r);
	pthread_mutex_lock(&g->lock);
	bool has_ring = g->metrics != NULL;
	pthread_mutex_unlock(&g->lock);
	if (!has_ring && !(fresh = fleet_metrics_new(FLEET_METRICS_HISTORY)))
		return;
	pthread_mutex_lock(&g->lock);
	if (!g->metrics) {
		g->metrics = fresh;
		fresh = NULL;
	}
	fleet_metrics_add(g->metrics, &r);
	pthread_mutex_unlock(&g->lock);
	fleet_metrics_free(fresh);
}

/* A job: one round over the live guests. Skipped when the pool stopped
 * before it ran. */
static void metrics_job_run(void *arg, bool cancelled)
{
	struct fleet *f = arg;
	size_t n;
	struct fleet_guest **gs;

	if (cancelled)
		return;
	gs = fleet_lives_pin(f, &n);
	for (size_t i = 0; i < n; i++)
		sample_guest(f, gs[i]);
	fleet_lives_unpin(gs, n);
}

void fleet_metrics_pass(struct fleet *f)
{
	if (!f->cfg->metrics_interval_ms)
		return;
	pthread_mutex_lock(&f->lock);
	bool stop = f->stop;
	pthread_mutex_unlock(&f->lock);
	if (stop)
		return;
	/* one round at a time (its key busy until it returned); refused
	 * (full, stopping): the next pass tries again */
	fleet_work_submit_once(f, &f->metrics_key, metrics_job_run, f);
}
