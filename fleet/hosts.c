/* fleet: the hosts guests are placed on (docs/hosts.md).
 *
 * f->hosts holds one struct fleet_host per entry of the config's `hosts`
 * (or the one "local" host made from the top-level keys). Each has its own
 * vmm (libvirt connection, run dir, images), its capacity counters and
 * its share of the warm pool (pooled guests carry their host). Every
 * guest operation goes through the guest's host.
 *
 * Placement (fleet_place, place.c) is a pure function over snapshots
 * taken under the fleet lock; the supervisor's "hosts" pass
 * (fleet_hosts_pass) queues, every host_check_interval_ms, a check of
 * each host's connection (a job of the work pool, no lock held, never two
 * of one host at once) and a read of the drained hosts (the drains_read
 * hook); a check marks a host that has not answered for
 * host_down_after_ms down (its guests are marked dead at its last answer,
 * its pool goes) and has a host that answers again reconciled by its
 * owner (the host_back hook) before placing on it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <time.h>

#include "../agentless/agentless.h"
#include "../vmm/vmm.h"
#include "fleet-priv.h"

#define MOD "fleet"

/* ------------------------------------------------------------- vmm */

/* A new vmm for host h (no lock held: it connects). NULL with err. */
static struct vmm *host_vmm_new(struct fleet *f, struct fleet_host *h, struct sbx_error *err)
{
	const struct sandbox_config *cfg = f->cfg;
	const struct sandbox_host_config *hc = h->cfg;
	char run_dir[PATH_MAX + 8];
	char cmdline[sizeof(cfg->kernel_cmdline) + 32];
	struct vmm *v;

	snprintf(run_dir, sizeof(run_dir), "%s/run", hc->state_dir);
	snprintf(cmdline, sizeof(cmdline), "%s%s%s", cfg->kernel_cmdline,
		 cfg->kernel_cmdline[0] && cfg->test_hostile_guests ? " " : "",
		 cfg->test_hostile_guests ? "sandboxd.test_hostile=1" : "");
	struct vmm_config vc = {
	    .uri = hc->uri,
	    .name_prefix = hc->domain_prefix,
	    .accel = cfg->accel,
	    .allow_tcg = cfg->allow_tcg,
	    .kernel = hc->kernel,
	    .initrd = hc->initrd,
	    .base_image = hc->base_image[0] ? hc->base_image : NULL,
	    .cmdline = cmdline[0] ? cmdline : NULL,
	    .run_dir = run_dir,
	    .transport = config_transport_vmm(hc->transport),
	    .tb_cache_mib = cfg->tb_cache_mib,
	    .free_page_reporting = cfg->free_page_reporting,
	    /* the guests' reported memory, read by the metrics' rounds */
	    .balloon_stats_period_s = (cfg->metrics_interval_ms + 999) / 1000,
	    .console_log_max = 1024 * 1024,
	};
	/* A local host's run dir is ours to make (a remote one is made there
	 * by its operator, docs/hosts.md). */
	if (h->local && (sbx_mkdir_p(hc->state_dir, SANDBOX_STATE_DIR_MODE) < 0 ||
			 sbx_mkdir_p(run_dir, SANDBOX_STATE_DIR_MODE) < 0 ||
			 chmod(run_dir, SANDBOX_STATE_DIR_MODE) < 0)) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "host %s: cannot create %s: %s", hc->name,
			      run_dir, strerror(errno));
		return NULL;
	}
	v = vmm_new(&vc, err);
	if (!v)
		return NULL;
	vmm_set_stopped_callback(v, fleet_on_domain_stopped, h);
	sbx_info(MOD, "host %s: libvirt %s, accelerator %s%s", hc->name, hc->uri, vmm_accel_name(v),
		 strcmp(vmm_accel_name(v), "tcg") == 0
		     ? " (TCG is no security boundary: development only)"
		     : "");
	return v;
}

struct fleet_host *fleet_host_find(struct fleet *f, const char *name)
{
	for (size_t i = 0; i < f->n_hosts; i++)
		if (strcmp(f->hosts[i].cfg->name, name) == 0)
			return &f->hosts[i];
	return NULL;
}

/* ------------------------------------------------------------ capacity */

static uint64_t disk_gib_of(const struct fleet_host *h, const char *size)
{
	return fleet_host_disk_gib(h, sandbox_config_size(h->fleet->cfg, size));
}

/* Guests, memory and disk host h holds now (lives, boots; the pool apart). */
static void host_used_locked(struct fleet_host *h, int *guests, uint64_t *mib, uint64_t *gib)
{
	*guests = h->booting;
	*mib = h->booting_mib;
	*gib = h->cfg->base_image[0] ? h->booting_disk_gib : 0;
	for (struct fleet_guest *l = h->fleet->lives; l; l = l->next) {
		if (l->host != h)
			continue;
		(*guests)++;
		*mib += l->memory_mib;
		*gib += disk_gib_of(h, l->size);
	}
}

static uint64_t host_mem_total(const struct fleet_host *h)
{
	struct sysinfo si;

	if (h->cfg->memory_mib)
		return h->cfg->memory_mib;
	if (sysinfo(&si) != 0)
		return UINT64_MAX;
	return (uint64_t)((double)si.totalram * si.mem_unit / (1024.0 * 1024.0) *
			  h->fleet->cfg->memory_overcommit);
}

void fleet_hosts_measure_disk(struct fleet *f)
{
	struct {
		bool ok, db_own_fs;
		uint64_t free_mib, db_free_mib;
	} m[SANDBOX_MAX_HOSTS];
	struct statvfs db = {0};
	bool db_ok = statvfs(f->cfg->db_path, &db) == 0;
	int64_t now = sbx_mono_ms();

	memset(m, 0, sizeof(m));
	for (size_t i = 0; i < f->n_hosts && i < SANDBOX_MAX_HOSTS; i++) {
		struct statvfs st;

		if (!f->hosts[i].local || statvfs(f->hosts[i].cfg->state_dir, &st) != 0) {
			m[i].db_own_fs = true;
		} else {
			m[i].ok = true;
			m[i].free_mib = (uint64_t)st.f_bavail * st.f_frsize / (1024 * 1024);
			m[i].db_own_fs = db.f_fsid != st.f_fsid;
		}
		m[i].db_free_mib =
		    db_ok ? (uint64_t)db.f_bavail * db.f_frsize / (1024 * 1024) : UINT64_MAX;
	}
	pthread_mutex_lock(&f->lock);
	for (size_t i = 0; i < f->n_hosts && i < SANDBOX_MAX_HOSTS; i++) {
		struct fleet_host *h = &f->hosts[i];

		h->disk_measured = m[i].ok;
		h->disk_free_mib = m[i].free_mib;
		h->db_free_mib = m[i].db_free_mib;
		h->db_own_fs = m[i].db_own_fs;
		h->disk_measured_mono = now;
	}
	pthread_mutex_unlock(&f->lock);
}

/* The free-space rule (docs/configuration.md "Disk") on a local host's
 * state dir with `gib` GiB of guest disks placed there and a file of
 * file_mib about to be written there (a pause's save, a snapshot), and
 * min_free_disk_mib on the database's filesystem, from the figures
 * fleet_hosts_measure_disk() kept. Call with lock. */
static bool disk_rule_file_locked(struct fleet_host *h, uint64_t gib, uint64_t file_mib)
{
	const struct sandbox_config *cfg = h->fleet->cfg;
	uint64_t need_mib;

	need_mib = cfg->min_free_disk_mib + file_mib +
		   (uint64_t)((double)gib * 1024.0 / cfg->disk_overcommit);
	if (h->disk_measured && h->disk_free_mib < need_mib) {
		/* the pool asks on every tick: say it once a minute */
		if (sbx_mono_ms() - h->disk_warned_mono >= 60000) {
			h->disk_warned_mono = sbx_mono_ms();
			sbx_warn(MOD,
				 "host %s: disk: %llu MiB free in the state dir, %llu "
				 "needed (%llu GiB of guest disks / %.1f + "
				 "min_free_disk_mib %llu): refusing",
				 h->cfg->name, (unsigned long long)h->disk_free_mib,
				 (unsigned long long)need_mib, (unsigned long long)gib,
				 cfg->disk_overcommit, (unsigned long long)cfg->min_free_disk_mib);
		}
		return false;
	}
	if (h->db_own_fs && h->db_free_mib < cfg->min_free_disk_mib) {
		sbx_warn(MOD,
			 "disk: the database's filesystem has less than %llu MiB free: "
			 "refusing",
			 (unsigned long long)cfg->min_free_disk_mib);
		return false;
	}
	return true;
}

static bool disk_rule_locked(struct fleet_host *h, uint64_t gib)
{
	return disk_rule_file_locked(h, gib, 0);
}

/* What placement needs of host h for a guest of `size` (runtime: an
 * execution's pre-started guests count as warm). Call with lock. */
/* As fleet_host_snapshot_locked; drained_too: a draining host as if it
 * were not (a resume on its own host). */
static void snapshot_locked(struct fleet_host *h, const struct sandbox_size *size,
			    const char *runtime, bool drained_too, struct fleet_host_snapshot *s)
{
	uint64_t add = fleet_host_disk_gib(h, size);

	memset(s, 0, sizeof(*s));
	s->up = h->state == FLEET_HOST_UP && h->vmm;
	s->draining = h->draining && !drained_too;
	s->max_guests = h->cfg->max_guests;
	s->mem_total_mib = host_mem_total(h);
	s->disk_total_gib =
	    h->cfg->disk_gib ? (uint64_t)((double)h->cfg->disk_gib * h->fleet->cfg->disk_overcommit)
			     : 0;
	host_used_locked(h, &s->guests, &s->mem_used_mib, &s->disk_used_gib);
	fleet_pool_count_locked(h->fleet, h, &s->pool_guests, &s->pool_mib, &s->pool_disk_gib);
	if (!h->cfg->base_image[0])
		s->pool_disk_gib = 0;
	s->warm = fleet_pool_ready_locked(h->fleet, h, runtime ? NULL : size->name, runtime);
	if (runtime && !s->warm)
		s->warm = fleet_pool_ready_locked(h->fleet, h, size->name, NULL);
	if (!s->up || s->draining)
		return; /* no statvfs for a host nothing goes to */
	s->disk_ok = disk_rule_locked(h, s->disk_used_gib + s->pool_disk_gib + add);
	s->disk_ok_evicting = s->disk_ok || disk_rule_locked(h, s->disk_used_gib + add);
}

void fleet_host_snapshot_locked(struct fleet_host *h, const struct sandbox_size *size,
				const char *runtime, struct fleet_host_snapshot *s)
{
	snapshot_locked(h, size, runtime, false, s);
}

bool fleet_host_room_locked(struct fleet_host *h, const struct sandbox_size *size, bool drained_too,
			    enum fleet_place_how *how)
{
	struct fleet_host_snapshot s;

	snapshot_locked(h, size, NULL, drained_too, &s);
	s.warm = 0;
	return fleet_place(&s, 1, size->memory_mib, fleet_host_disk_gib(h, size), how) == 0;
}

bool fleet_host_fits_locked(struct fleet_host *h, const struct sandbox_size *size)
{
	enum fleet_place_how how;

	return fleet_host_room_locked(h, size, false, &how) && how == FLEET_PLACE_ROOM;
}

/* The disk rule with the guests admitted now. Call with lock. */
static bool disk_fits_locked(struct fleet *f)
{
	for (size_t i = 0; i < f->n_hosts; i++) {
		struct fleet_host *h = &f->hosts[i];
		int guests;
		uint64_t mib, gib, pool_mib, pool_gib;

		if (h->state != FLEET_HOST_UP)
			continue;
		host_used_locked(h, &guests, &mib, &gib);
		fleet_pool_count_locked(f, h, &guests, &pool_mib, &pool_gib);
		if (!disk_rule_locked(h, gib + (h->cfg->base_image[0] ? pool_gib : 0)))
			return false;
	}
	return true;
}

bool fleet_disk_fits(struct fleet *f)
{
	bool ok;

	fleet_hosts_measure_disk(f);
	pthread_mutex_lock(&f->lock);
	ok = disk_fits_locked(f);
	pthread_mutex_unlock(&f->lock);
	return ok;
}

int fleet_host_disk_room(struct fleet *f, struct fleet_host *h, int64_t bytes,
			 struct sbx_error *err)
{
	uint64_t mib = bytes > 0 ? ((uint64_t)bytes + (1u << 20) - 1) >> 20 : 0, gib, mem;
	int guests;
	bool ok;

	if (!h->local)
		return 0; /* its pool's own rules: libvirt refuses when full */
	fleet_hosts_measure_disk(f);
	pthread_mutex_lock(&f->lock);
	host_used_locked(h, &guests, &mem, &gib);
	ok = disk_rule_file_locked(h, h->cfg->base_image[0] ? gib : 0, mib);
	pthread_mutex_unlock(&f->lock);
	if (ok)
		return 0;
	return sbx_error_set(err, SBX_E_INSUFFICIENT_STORAGE, NULL,
			     "host %s has no room on its disk for a file of up to %llu MiB (it "
			     "keeps min_free_disk_mib free and room for its guests' disks); "
			     "nothing was written",
			     h->cfg->name, (unsigned long long)mib);
}

void fleet_host_booting_locked(struct fleet_host *h, const struct sandbox_size *size, int sign)
{
	h->booting += sign;
	h->booting_mib += (uint64_t)sign * size->memory_mib;
	h->booting_disk_gib += (uint64_t)sign * size->disk_gib;
}

/* ------------------------------------------------------------ lifecycle */

int fleet_hosts_open(struct fleet *f, struct sbx_error *err)
{
	size_t up = 0;
	struct sbx_error last = {0};

	for (size_t i = 0; i < f->n_hosts; i++) {
		struct fleet_host *h = &f->hosts[i];
		struct sbx_error e;

		h->vmm = host_vmm_new(f, h, &e);
		if (!h->vmm) {
			sbx_warn(MOD, "host %s (%s) does not answer: %s; it starts down",
				 h->cfg->name, h->cfg->uri, e.message);
			last = e;
			continue;
		}
		h->state = FLEET_HOST_UP;
		h->last_seen_mono = sbx_mono_ms();
		h->last_seen_wall = sbx_wall_ms();
		up++;
	}
	if (up == 0) {
		*err = last;
		return -1;
	}
	fleet_hosts_measure_disk(f);
	return 0;
}

void fleet_hosts_close(struct fleet *f)
{
	for (size_t i = 0; i < f->n_hosts; i++) {
		vmm_free(f->hosts[i].vmm);
		f->hosts[i].vmm = NULL;
	}
}

/* --------------------------------------- the health checks (supervisor) */

/* Read the drained hosts (`sandboxd admin drain`) through the hook. */
static void drains_read(struct fleet *f)
{
	bool is[SANDBOX_MAX_HOSTS] = {0};
	struct fleet_guest *dropped = NULL;

	if (!f->hooks.drains_read || f->hooks.drains_read(f->hooks.opaque, is, f->n_hosts) < 0)
		return; /* keep what we knew */
	pthread_mutex_lock(&f->lock);
	for (size_t i = 0; i < f->n_hosts; i++) {
		struct fleet_host *h = &f->hosts[i];
		bool drained = is[i];

		if (drained != h->draining)
			sbx_info(MOD, "host %s: %s", h->cfg->name,
				 drained ? "draining: no new placements, running sandboxes "
					   "run to their end"
					 : "undrained: placements resume");
		h->draining = drained;
		if (drained) {
			struct fleet_guest *p = fleet_pool_drop_host_locked(f, h);

			while (p) {
				struct fleet_guest *next = p->next;

				p->next = dropped;
				dropped = p;
				p = next;
			}
		}
	}
	pthread_mutex_unlock(&f->lock);
	fleet_guest_end_chain(dropped, "its host is drained");
}

/* Host h stopped answering: its sandboxes end failed at its last answer
 * (the supervisor queues their ends, as for a guest liveness gave up on), its pool
 * goes. Call with lock; the dropped pool is returned for teardown. */
static struct fleet_guest *host_down_locked(struct fleet *f, struct fleet_host *h,
					    int64_t silent_ms)
{
	int n = 0;

	h->state = FLEET_HOST_DOWN;
	for (struct fleet_guest *l = f->lives; l; l = l->next)
		if (l->host == h && fleet_guest_mark_dead(l, h->last_seen_wall))
			n++;
	sbx_err(MOD,
		"host %s: no answer for %lld ms: down; %d sandbox(es) end failed at its last "
		"answer, new guests go to other hosts",
		h->cfg->name, (long long)silent_ms, n);
	return fleet_pool_drop_host_locked(f, h);
}

/* A host that answers again: reconcile it, then place on it. No lock. */
static void host_back(struct fleet *f, struct fleet_host *h)
{
	struct sbx_error e;

	if (f->hooks.host_back && f->hooks.host_back(f->hooks.opaque, h, &e) < 0) {
		sbx_warn(MOD, "host %s answers again but reconcile failed: %s; retrying",
			 h->cfg->name, e.message);
		return;
	}
	pthread_mutex_lock(&f->lock);
	h->state = FLEET_HOST_UP;
	h->reconcile_due = false;
	pthread_mutex_unlock(&f->lock);
	sbx_info(MOD, "host %s: up again, reconciled", h->cfg->name);
}

/* Is customer guest l suspended, alive and not ending, on a connection
 * other than cur (other_gen) or on cur (!other_gen)? Call with f->lock
 * (takes l->lock). */
static bool suspended_on(struct fleet_guest *l, unsigned cur, bool other_gen)
{
	bool yes;

	pthread_mutex_lock(&l->lock);
	yes = l->suspended && !l->dead && l->state == FLEET_GUEST_RUNNING &&
	      (other_gen ? l->conn_gen != cur : l->conn_gen == cur);
	pthread_mutex_unlock(&l->lock);
	return yes;
}

/* Host h answers on a connection: reopen the channels of its sandboxes
 * that went with an earlier connection (docs/hosts.md "A dropped
 * connection"), through the restart reconcile's reattach step. One whose
 * channel broke while the connection stayed up, or whose guest cannot be
 * reached any more, ends failed at the break. Each is pinned with a ref
 * while its conn gets the new channel (requests meanwhile answer 503; an
 * end closing it meanwhile makes the attach close the new channel). No
 * lock held. */
static void host_resume(struct fleet *f, struct fleet_host *h)
{
	struct vmm *v = h->vmm;
	size_t rounds = 0;

	pthread_mutex_lock(&f->lock);
	for (struct fleet_guest *l = f->lives; l; l = l->next)
		rounds++;
	pthread_mutex_unlock(&f->lock);
	while (rounds-- > 0) {
		struct fleet_guest *l;
		/* asked before the lock: vmm is not called under it */
		unsigned seq = 0, gen, cur = vmm_conn_gen(v);
		bool up = vmm_connected(v);
		struct sbx_error e = {0};
		int rc = -1;

		if (!up)
			return; /* lost again: wait for the next connection */
		pthread_mutex_lock(&f->lock);
		for (l = f->lives; l; l = l->next)
			if (l->host == h && suspended_on(l, cur, true))
				break;
		if (!l) {
			/* a break on the connection in use: the guest's doing */
			for (l = f->lives; l; l = l->next)
				if (l->host == h && suspended_on(l, cur, false))
					break;
			if (l) {
				pthread_mutex_lock(&l->lock);
				if (!l->dead) {
					l->dead = true;
					l->dead_at_ms = l->suspended_at_ms;
				}
				pthread_mutex_unlock(&l->lock);
				sbx_warn(MOD, "sandbox %s: exec channel broke on a live connection",
					 l->id);
				pthread_mutex_unlock(&f->lock);
				continue;
			}
			pthread_mutex_unlock(&f->lock);
			return;
		}
		fleet_guest_ref(l);
		pthread_mutex_lock(&l->lock);
		seq = l->breaks;
		pthread_mutex_unlock(&l->lock);
		pthread_mutex_unlock(&f->lock);

		rc = fleet_guest_channel_reopen(l, &gen, &e);

		pthread_mutex_lock(&l->lock);
		if (rc == 0) {
			l->conn_gen = gen;
			if (l->breaks == seq) {
				l->suspended = false;
				sbx_info(MOD,
					 "sandbox %s: exec channel reopened on host %s's new "
					 "connection",
					 l->id, h->cfg->name);
			}
		} else if (!l->dead) {
			l->dead = true;
			l->dead_at_ms = l->suspended_at_ms;
			sbx_warn(MOD, "sandbox %s: cannot reopen its channel on host %s: %s", l->id,
				 h->cfg->name, e.message);
		}
		pthread_mutex_unlock(&l->lock);
		fleet_guest_unref(l);
	}
}

static void host_check(struct fleet *f, struct fleet_host *h)
{
	struct vmm *v;
	bool ok;
	struct fleet_guest *dropped = NULL;

	pthread_mutex_lock(&f->lock);
	v = h->vmm;
	pthread_mutex_unlock(&f->lock);
	if (!v) {
		struct sbx_error e;

		v = host_vmm_new(f, h, &e);
		if (!v)
			return;
		pthread_mutex_lock(&f->lock);
		h->vmm = v;
		h->reconcile_due = true;
		pthread_mutex_unlock(&f->lock);
	}
	vmm_conn_check(v);
	ok = vmm_connected(v);
	pthread_mutex_lock(&f->lock);
	int64_t mono = sbx_mono_ms();
	if (ok) {
		h->last_seen_mono = mono;
		h->last_seen_wall = sbx_wall_ms();
		if (h->state == FLEET_HOST_DOWN)
			h->reconcile_due = true;
	} else if (h->state == FLEET_HOST_UP &&
		   mono - h->last_seen_mono >= (int64_t)f->cfg->host_down_after_ms) {
		dropped = host_down_locked(f, h, mono - h->last_seen_mono);
	}
	bool back = ok && h->reconcile_due;
	bool resume = ok && !back && h->state == FLEET_HOST_UP;
	pthread_mutex_unlock(&f->lock);
	fleet_guest_end_chain(dropped, "its host is down");
	if (back)
		host_back(f, h);
	else if (resume)
		host_resume(f, h);
}

/* A job: one host's health check (a libvirt call, perhaps a reconnect,
 * a reconcile or channel reopens). Its flag keeps it queued once. */
struct host_check_job {
	struct fleet *f;
	struct fleet_host *h;
};

static void host_check_job_run(void *arg, bool cancelled)
{
	struct host_check_job *j = arg;
	struct fleet *f = j->f;

	if (!cancelled)
		host_check(f, j->h);
	free(j);
}

/* A job: the drained hosts, from the store (a drained host's pool is torn
 * down here). */
static void drains_job_run(void *arg, bool cancelled)
{
	struct fleet *f = arg;

	if (!cancelled)
		drains_read(f);
}

void fleet_hosts_pass(struct fleet *f)
{
	fleet_hosts_measure_disk(f); /* statvfs, kept for a while: not libvirt */
	/* each job once: one in flight (its key busy) is not queued again;
	 * one refused (full, stopping) is queued by the next pass */
	fleet_work_submit_once(f, &f->hooks.drains_read, drains_job_run, f);
	for (size_t i = 0; i < f->n_hosts; i++) {
		struct host_check_job *j = malloc(sizeof(*j));

		if (!j)
			continue;
		j->f = f;
		j->h = &f->hosts[i];
		if (fleet_work_submit_once(f, j->h, host_check_job_run, j) != 0)
			free(j);
	}
}

void fleet_hosts_read_drains(struct fleet *f)
{
	drains_read(f);
}

size_t fleet_hosts_view(struct fleet *f, struct fleet_host_view *out, size_t max)
{
	size_t n = 0;

	pthread_mutex_lock(&f->lock);
	for (size_t i = 0; i < f->n_hosts && n < max; i++) {
		struct fleet_host *h = &f->hosts[i];
		struct fleet_host_view *v = &out[n++];
		int pool_guests;
		uint64_t pool_mib, pool_gib;

		memset(v, 0, sizeof(*v));
		v->name = h->cfg->name;
		v->uri = h->cfg->uri;
		v->state = h->state;
		v->draining = h->draining;
		v->max_guests = h->cfg->max_guests;
		v->memory_total_mib = host_mem_total(h);
		v->disk_total_gib = h->cfg->disk_gib;
		host_used_locked(h, &v->guests, &v->memory_used_mib, &v->disk_used_gib);
		fleet_pool_count_locked(f, h, &pool_guests, &pool_mib, &pool_gib);
		v->pool_booting = h->pool_booting;
		v->pool_ready = pool_guests - h->pool_booting;
		v->guests += pool_guests;
		v->memory_used_mib += pool_mib;
		v->disk_used_gib += h->cfg->base_image[0] ? pool_gib : 0;
		v->last_seen_ms_ago = sbx_mono_ms() - h->last_seen_mono;
	}
	pthread_mutex_unlock(&f->lock);
	return n;
}

/* ------------------------------------------------------------- the rest */

size_t fleet_n_hosts(const struct fleet *f)
{
	return f->n_hosts;
}

struct fleet_host *fleet_host_at(struct fleet *f, size_t i)
{
	return i < f->n_hosts ? &f->hosts[i] : NULL;
}

void fleet_on_domain_stopped(void *opaque, const char *name)
{
	struct fleet_host *h = opaque;
	struct fleet *f = h->fleet;

	pthread_mutex_lock(&f->lock);
	for (struct fleet_guest *g = f->lives; g; g = g->next) {
		if (g->host == h && strcmp(g->domain, name) == 0 &&
		    fleet_guest_mark_dead(g, sbx_wall_ms()))
			sbx_warn(MOD, "sandbox %s: domain %s stopped", g->id, name);
	}
	fleet_pool_domain_stopped_locked(f, name);
	pthread_mutex_unlock(&f->lock);
}
