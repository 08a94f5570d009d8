/* sandbox: the hosts guests are placed on (docs/hosts.md).
 *
 * svc->hosts holds one struct fleet_host per entry of the config's `hosts` (or
 * the one "local" host made from the top-level keys). Each has its own
 * vmm (libvirt connection, run dir, images), its capacity counters and
 * its share of the warm pool (pooled guests carry their host). Every
 * guest operation goes through the live's host.
 *
 * Placement (fleet_place, fleet/place.c) is a pure function over snapshots taken under
 * svc->lock; the supervisor's "hosts" task (sandbox_hosts_pass) queues,
 * every host_check_interval_ms, a check of each host's connection (a job
 * of the blocking pool, no lock held, never two of one host at once) and
 * a read of the drained hosts from the store; a check marks a host that has not answered for
 * host_down_after_ms down (its sandboxes end failed at its last answer, its pool goes) and
 * reconciles a host that answers again before placing on it.
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

#include "../billing/billing.h"
#include "sandbox-priv.h"

#define MOD "host"

/* ------------------------------------------------------------- vmm */

/* A new vmm for host h (no lock held: it connects). NULL with err. */
static struct vmm *host_vmm_new(struct sandbox_svc *svc, struct fleet_host *h,
				struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
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
	vmm_set_stopped_callback(v, sandbox_on_domain_stopped, svc);
	sbx_info(MOD, "host %s: libvirt %s, accelerator %s%s", hc->name, hc->uri, vmm_accel_name(v),
		 strcmp(vmm_accel_name(v), "tcg") == 0
		     ? " (TCG is no security boundary: development only)"
		     : "");
	return v;
}

struct fleet_host *sandbox_host_find(struct sandbox_svc *svc, const char *name)
{
	for (size_t i = 0; i < svc->n_hosts; i++)
		if (strcmp(svc->hosts[i].cfg->name, name) == 0)
			return &svc->hosts[i];
	return NULL;
}

/* ------------------------------------------------------------ capacity */

uint64_t sandbox_host_disk_gib(const struct fleet_host *h, const struct sandbox_size *size)
{
	return h->cfg->base_image[0] && size ? size->disk_gib : 0;
}

static uint64_t disk_gib_of(const struct fleet_host *h, const char *size)
{
	return sandbox_host_disk_gib(h, sandbox_config_size(&h->svc->cfg, size));
}

/* Guests, memory and disk host h holds now (lives, boots; the pool apart). */
static void host_used_locked(struct fleet_host *h, int *guests, uint64_t *mib, uint64_t *gib)
{
	*guests = h->booting;
	*mib = h->booting_mib;
	*gib = h->cfg->base_image[0] ? h->booting_disk_gib : 0;
	for (struct fleet_guest *l = h->svc->lives; l; l = l->next) {
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
			  h->svc->cfg.memory_overcommit);
}

void sandbox_hosts_measure_disk(struct sandbox_svc *svc)
{
	struct {
		bool ok, db_own_fs;
		uint64_t free_mib, db_free_mib;
	} m[SANDBOX_MAX_HOSTS];
	struct statvfs db = {0};
	bool db_ok = statvfs(svc->cfg.db_path, &db) == 0;
	int64_t now = sbx_mono_ms();

	memset(m, 0, sizeof(m));
	for (size_t i = 0; i < svc->n_hosts && i < SANDBOX_MAX_HOSTS; i++) {
		struct statvfs st;

		if (!svc->hosts[i].local || statvfs(svc->hosts[i].cfg->state_dir, &st) != 0) {
			m[i].db_own_fs = true;
		} else {
			m[i].ok = true;
			m[i].free_mib = (uint64_t)st.f_bavail * st.f_frsize / (1024 * 1024);
			m[i].db_own_fs = db.f_fsid != st.f_fsid;
		}
		m[i].db_free_mib =
		    db_ok ? (uint64_t)db.f_bavail * db.f_frsize / (1024 * 1024) : UINT64_MAX;
	}
	pthread_mutex_lock(&svc->lock);
	for (size_t i = 0; i < svc->n_hosts && i < SANDBOX_MAX_HOSTS; i++) {
		struct fleet_host *h = &svc->hosts[i];

		h->disk_measured = m[i].ok;
		h->disk_free_mib = m[i].free_mib;
		h->db_free_mib = m[i].db_free_mib;
		h->db_own_fs = m[i].db_own_fs;
		h->disk_measured_mono = now;
	}
	pthread_mutex_unlock(&svc->lock);
}

/* The free-space rule (docs/configuration.md "Disk") on a local host's
 * state dir with `gib` GiB of guest disks placed there, and
 * min_free_disk_mib on the database's filesystem, from the figures
 * sandbox_hosts_measure_disk() kept. Call with lock. */
static bool disk_rule_locked(struct fleet_host *h, uint64_t gib)
{
	const struct sandbox_config *cfg = &h->svc->cfg;
	uint64_t need_mib;

	need_mib = cfg->min_free_disk_mib + (uint64_t)((double)gib * 1024.0 / cfg->disk_overcommit);
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

/* What placement needs of host h for a guest of `size` (runtime: an
 * execution's pre-started guests count as warm). Call with lock. */
static void host_snapshot_locked(struct fleet_host *h, const struct sandbox_size *size,
				 const char *runtime, struct fleet_host_snapshot *s)
{
	uint64_t add = sandbox_host_disk_gib(h, size);

	memset(s, 0, sizeof(*s));
	s->up = h->state == HOST_UP && h->vmm;
	s->draining = h->draining;
	s->max_guests = h->cfg->max_guests;
	s->mem_total_mib = host_mem_total(h);
	s->disk_total_gib = h->cfg->disk_gib
				? (uint64_t)((double)h->cfg->disk_gib * h->svc->cfg.disk_overcommit)
				: 0;
	host_used_locked(h, &s->guests, &s->mem_used_mib, &s->disk_used_gib);
	sandbox_pool_count_locked(h->svc, h, &s->pool_guests, &s->pool_mib, &s->pool_disk_gib);
	if (!h->cfg->base_image[0])
		s->pool_disk_gib = 0;
	s->warm = sandbox_pool_ready_locked(h->svc, h, runtime ? NULL : size->name, runtime);
	if (runtime && !s->warm)
		s->warm = sandbox_pool_ready_locked(h->svc, h, size->name, NULL);
	if (!s->up || s->draining)
		return; /* no statvfs for a host nothing goes to */
	s->disk_ok = disk_rule_locked(h, s->disk_used_gib + s->pool_disk_gib + add);
	s->disk_ok_evicting = s->disk_ok || disk_rule_locked(h, s->disk_used_gib + add);
}

bool sandbox_host_fits_locked(struct fleet_host *h, const struct sandbox_size *size)
{
	struct fleet_host_snapshot s;
	enum fleet_place_how how;

	host_snapshot_locked(h, size, NULL, &s);
	s.warm = 0;
	return fleet_place(&s, 1, size->memory_mib, sandbox_host_disk_gib(h, size), &how) == 0 &&
	       how == FLEET_PLACE_ROOM;
}

bool sandbox_disk_fits_locked(struct sandbox_svc *svc)
{
	for (size_t i = 0; i < svc->n_hosts; i++) {
		struct fleet_host *h = &svc->hosts[i];
		int guests;
		uint64_t mib, gib, pool_mib, pool_gib;

		if (h->state != HOST_UP)
			continue;
		host_used_locked(h, &guests, &mib, &gib);
		sandbox_pool_count_locked(svc, h, &guests, &pool_mib, &pool_gib);
		if (!disk_rule_locked(h, gib + (h->cfg->base_image[0] ? pool_gib : 0)))
			return false;
	}
	return true;
}

void sandbox_host_booting_locked(struct fleet_host *h, const struct sandbox_size *size, int sign)
{
	h->booting += sign;
	h->booting_mib += (uint64_t)sign * size->memory_mib;
	h->booting_disk_gib += (uint64_t)sign * size->disk_gib;
}

/* ----------------------------------------------------------- placement */

struct fleet_host *sandbox_host_admit_locked(struct sandbox_svc *svc,
					     const struct sandbox_size *size, const char *runtime,
					     struct fleet_guest **warm_out,
					     struct fleet_guest **evicted, struct sbx_error *err)
{
	struct fleet_host_snapshot snaps[SANDBOX_MAX_HOSTS];
	enum fleet_place_how how = FLEET_PLACE_ROOM;
	struct fleet_host *h;
	int i;

	*warm_out = NULL;
	for (size_t k = 0; k < svc->n_hosts; k++)
		host_snapshot_locked(&svc->hosts[k], size, runtime, &snaps[k]);
	i = fleet_place(snaps, svc->n_hosts, size->memory_mib, size->disk_gib, &how);
	if (i < 0) {
		sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
			      "no host has capacity for another guest of size '%s' right now; "
			      "retry later",
			      size->name);
		err->retry_after_s = 10;
		return NULL;
	}
	h = &svc->hosts[i];
	if (how == FLEET_PLACE_WARM) {
		if (runtime)
			*warm_out = sandbox_pool_take_locked(svc, h, NULL, runtime);
		if (!*warm_out)
			*warm_out = sandbox_pool_take_locked(svc, h, size->name, NULL);
		if (!*warm_out)
			how = FLEET_PLACE_EVICT; /* its one warm guest was not usable */
	}
	if (how == FLEET_PLACE_EVICT) {
		while (!sandbox_host_fits_locked(h, size)) {
			struct fleet_guest *p = sandbox_pool_evict_locked(svc, h);

			if (!p) {
				sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
					      "no host has capacity for another guest of size "
					      "'%s' right now; retry later",
					      size->name);
				err->retry_after_s = 10;
				return NULL;
			}
			p->next = *evicted;
			*evicted = p;
		}
	}
	sandbox_host_booting_locked(h, size, +1);
	return h;
}

/* ------------------------------------------------------------ lifecycle */

int sandbox_hosts_open(struct sandbox_svc *svc, struct sbx_error *err)
{
	size_t up = 0;
	struct sbx_error last = {0};

	svc->n_hosts = svc->cfg.n_hosts;
	for (size_t i = 0; i < svc->n_hosts; i++) {
		struct fleet_host *h = &svc->hosts[i];
		struct sbx_error e;

		h->svc = svc;
		h->cfg = &svc->cfg.hosts[i];
		h->local = vmm_uri_is_local(h->cfg->uri);
		h->state = HOST_DOWN;
		h->vmm = host_vmm_new(svc, h, &e);
		if (!h->vmm) {
			sbx_warn(MOD, "host %s (%s) does not answer: %s; it starts down",
				 h->cfg->name, h->cfg->uri, e.message);
			last = e;
			continue;
		}
		h->state = HOST_UP;
		h->last_seen_mono = sbx_mono_ms();
		h->last_seen_wall = sbx_wall_ms();
		up++;
	}
	if (up == 0) {
		*err = last;
		return -1;
	}
	sandbox_hosts_measure_disk(svc);
	return sandbox_reconcile_all(svc, err);
}

void sandbox_hosts_close(struct sandbox_svc *svc)
{
	for (size_t i = 0; i < svc->n_hosts; i++) {
		vmm_free(svc->hosts[i].vmm);
		svc->hosts[i].vmm = NULL;
	}
}

/* --------------------------------------- the health checks (supervisor) */

/* Read the drained hosts from the store (`sandboxd admin drain`). */
static void drains_read(struct sandbox_svc *svc)
{
	char names[SANDBOX_MAX_HOSTS * 4][STORE_HOST_MAX];
	struct fleet_guest *dropped = NULL;
	size_t n = 0;

	if (store_host_drains_list(svc->store, names, SBX_ARRAY_SIZE(names), &n, NULL) < 0)
		return; /* keep what we knew */
	pthread_mutex_lock(&svc->lock);
	for (size_t i = 0; i < svc->n_hosts; i++) {
		struct fleet_host *h = &svc->hosts[i];
		bool drained = false;

		for (size_t k = 0; k < n; k++)
			drained |= strcmp(names[k], h->cfg->name) == 0;
		if (drained != h->draining)
			sbx_info(MOD, "host %s: %s", h->cfg->name,
				 drained ? "draining: no new placements, running sandboxes "
					   "run to their end"
					 : "undrained: placements resume");
		h->draining = drained;
		if (drained) {
			struct fleet_guest *p = sandbox_pool_drop_host_locked(svc, h);

			while (p) {
				struct fleet_guest *next = p->next;

				p->next = dropped;
				dropped = p;
				p = next;
			}
		}
	}
	pthread_mutex_unlock(&svc->lock);
	fleet_guest_end_chain(dropped, "its host is drained");
}

/* Host h stopped answering: its sandboxes end failed at its last answer
 * (the supervisor queues their ends, as for a guest liveness gave up on), its pool
 * goes. Call with lock; the dropped pool is returned for teardown. */
static struct fleet_guest *host_down_locked(struct sandbox_svc *svc, struct fleet_host *h,
					    int64_t silent_ms)
{
	int n = 0;

	h->state = HOST_DOWN;
	for (struct fleet_guest *l = svc->lives; l; l = l->next)
		if (l->host == h && fleet_guest_mark_dead(l, h->last_seen_wall))
			n++;
	sbx_err(MOD,
		"host %s: no answer for %lld ms: down; %d sandbox(es) end failed at its last "
		"answer, new guests go to other hosts",
		h->cfg->name, (long long)silent_ms, n);
	pthread_cond_broadcast(&svc->cond);
	return sandbox_pool_drop_host_locked(svc, h);
}

/* A host that answers again: reconcile it, then place on it. No lock. */
static void host_back(struct sandbox_svc *svc, struct fleet_host *h)
{
	struct sbx_error e;

	if (sandbox_reconcile_host(svc, h, &e) < 0) {
		sbx_warn(MOD, "host %s answers again but reconcile failed: %s; retrying",
			 h->cfg->name, e.message);
		return;
	}
	pthread_mutex_lock(&svc->lock);
	h->state = HOST_UP;
	h->reconcile_due = false;
	pthread_cond_broadcast(&svc->cond); /* the pool refills it */
	pthread_mutex_unlock(&svc->lock);
	sbx_info(MOD, "host %s: up again, reconciled", h->cfg->name);
}

/* Is customer guest l suspended, alive and not ending, on a connection
 * other than cur (other_gen) or on cur (!other_gen)? Call with svc->lock
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
static void host_resume(struct sandbox_svc *svc, struct fleet_host *h)
{
	struct vmm *v = h->vmm;
	size_t rounds = 0;

	pthread_mutex_lock(&svc->lock);
	for (struct fleet_guest *l = svc->lives; l; l = l->next)
		rounds++;
	pthread_mutex_unlock(&svc->lock);
	while (rounds-- > 0) {
		struct fleet_guest *l;
		/* asked before the lock: vmm is not called under it */
		unsigned seq = 0, gen, cur = vmm_conn_gen(v);
		bool up = vmm_connected(v);
		struct sbx_error e = {0};
		int rc = -1;

		if (!up)
			return; /* lost again: wait for the next connection */
		pthread_mutex_lock(&svc->lock);
		for (l = svc->lives; l; l = l->next)
			if (l->host == h && suspended_on(l, cur, true))
				break;
		if (!l) {
			/* a break on the connection in use: the guest's doing */
			for (l = svc->lives; l; l = l->next)
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
				pthread_cond_broadcast(&svc->cond);
				pthread_mutex_unlock(&svc->lock);
				continue;
			}
			pthread_mutex_unlock(&svc->lock);
			return;
		}
		fleet_guest_ref(l);
		pthread_mutex_lock(&l->lock);
		seq = l->breaks;
		pthread_mutex_unlock(&l->lock);
		pthread_mutex_unlock(&svc->lock);

		rc = sandbox_live_channel_reopen(l, &gen, &e);

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
		pthread_mutex_lock(&svc->lock);
		pthread_cond_broadcast(&svc->cond);
		pthread_mutex_unlock(&svc->lock);
	}
}

static void host_check(struct sandbox_svc *svc, struct fleet_host *h)
{
	struct vmm *v;
	bool ok;
	struct fleet_guest *dropped = NULL;

	pthread_mutex_lock(&svc->lock);
	v = h->vmm;
	pthread_mutex_unlock(&svc->lock);
	if (!v) {
		struct sbx_error e;

		v = host_vmm_new(svc, h, &e);
		if (!v)
			return;
		pthread_mutex_lock(&svc->lock);
		h->vmm = v;
		h->reconcile_due = true;
		pthread_mutex_unlock(&svc->lock);
	}
	ok = vmm_connected(v);
	pthread_mutex_lock(&svc->lock);
	int64_t mono = sbx_mono_ms();
	if (ok) {
		h->last_seen_mono = mono;
		h->last_seen_wall = sbx_wall_ms();
		if (h->state == HOST_DOWN)
			h->reconcile_due = true;
	} else if (h->state == HOST_UP &&
		   mono - h->last_seen_mono >= (int64_t)svc->cfg.host_down_after_ms) {
		dropped = host_down_locked(svc, h, mono - h->last_seen_mono);
	}
	bool back = ok && h->reconcile_due;
	bool resume = ok && !back && h->state == HOST_UP;
	pthread_mutex_unlock(&svc->lock);
	fleet_guest_end_chain(dropped, "its host is down");
	if (back)
		host_back(svc, h);
	else if (resume)
		host_resume(svc, h);
}

/* A job: one host's health check (a libvirt call, perhaps a reconnect,
 * a reconcile or channel reopens). Its flag keeps it queued once. */
struct host_check_job {
	struct sandbox_svc *svc;
	struct fleet_host *h;
};

static void host_check_job_run(void *arg, bool cancelled)
{
	struct host_check_job *j = arg;
	struct sandbox_svc *svc = j->svc;

	if (!cancelled)
		host_check(svc, j->h);
	pthread_mutex_lock(&svc->lock);
	svc->host_check_busy[j->h - svc->hosts] = false;
	pthread_mutex_unlock(&svc->lock);
	free(j);
}

/* A job: the drained hosts, from the store (a drained host's pool is torn
 * down here). */
static void drains_job_run(void *arg, bool cancelled)
{
	struct sandbox_svc *svc = arg;

	if (!cancelled)
		drains_read(svc);
	pthread_mutex_lock(&svc->lock);
	svc->drains_busy = false;
	pthread_mutex_unlock(&svc->lock);
}

/* Submit the job unless it is in flight; its flag is set here. Call with
 * lock. */
static void hosts_submit_locked(struct sandbox_svc *svc, bool *busy, sbx_workpool_fn fn, void *arg)
{
	if (*busy)
		return;
	if (sandbox_work_submit(svc, fn, arg) == 0)
		*busy = true;
	else if (arg != svc)
		free(arg); /* full or stopping: the next pass tries again */
}

void sandbox_hosts_pass(struct sandbox_svc *svc)
{
	sandbox_hosts_measure_disk(svc); /* statvfs, kept for a while: not libvirt */
	pthread_mutex_lock(&svc->lock);
	hosts_submit_locked(svc, &svc->drains_busy, drains_job_run, svc);
	for (size_t i = 0; i < svc->n_hosts; i++) {
		struct host_check_job *j;

		if (svc->host_check_busy[i] || !(j = malloc(sizeof(*j))))
			continue;
		j->svc = svc;
		j->h = &svc->hosts[i];
		hosts_submit_locked(svc, &svc->host_check_busy[i], host_check_job_run, j);
	}
	pthread_mutex_unlock(&svc->lock);
}

void sandbox_hosts_read_drains(struct sandbox_svc *svc)
{
	drains_read(svc);
}

/* ------------------------------------------------------------- operators */

int sandbox_host_drain(struct sandbox_svc *svc, const char *name, bool drained,
		       struct sbx_error *err)
{
	bool known = false;

	for (size_t i = 0; i < svc->cfg.n_hosts; i++)
		known |= strcmp(svc->cfg.hosts[i].name, name) == 0;
	if (!known)
		return sbx_error_set(err, SBX_E_NOT_FOUND, "host",
				     "no host '%.40s' in the config's hosts", name);
	return store_host_drain_set(svc->store, name, drained, sbx_wall_ms(), err);
}

int sandbox_host_drained(struct sandbox_svc *svc, const char *name, struct sbx_error *err)
{
	char names[SANDBOX_MAX_HOSTS * 4][STORE_HOST_MAX];
	size_t n = 0;

	if (store_host_drains_list(svc->store, names, SBX_ARRAY_SIZE(names), &n, err) < 0)
		return -1;
	for (size_t k = 0; k < n; k++)
		if (strcmp(names[k], name) == 0)
			return 1;
	return 0;
}

size_t sandbox_hosts_view(struct sandbox_svc *svc, struct sandbox_host_view *out, size_t max)
{
	size_t n = 0;

	pthread_mutex_lock(&svc->lock);
	for (size_t i = 0; i < svc->n_hosts && n < max; i++) {
		struct fleet_host *h = &svc->hosts[i];
		struct sandbox_host_view *v = &out[n++];
		int pool_guests;
		uint64_t pool_mib, pool_gib;

		memset(v, 0, sizeof(*v));
		snprintf(v->name, sizeof(v->name), "%s", h->cfg->name);
		snprintf(v->uri, sizeof(v->uri), "%s", h->cfg->uri);
		snprintf(v->state, sizeof(v->state), "%s",
			 h->state != HOST_UP ? "down"
			 : h->draining	     ? "draining"
					     : "up");
		v->max_guests = h->cfg->max_guests;
		v->memory_total_mib = host_mem_total(h);
		v->disk_total_gib = h->cfg->disk_gib;
		host_used_locked(h, &v->guests, &v->memory_used_mib, &v->disk_used_gib);
		sandbox_pool_count_locked(svc, h, &pool_guests, &pool_mib, &pool_gib);
		v->pool_booting = h->pool_booting;
		v->pool_ready = pool_guests - h->pool_booting;
		v->guests += pool_guests;
		v->memory_used_mib += pool_mib;
		v->disk_used_gib += h->cfg->base_image[0] ? pool_gib : 0;
		v->last_seen_ms_ago = sbx_mono_ms() - h->last_seen_mono;
	}
	pthread_mutex_unlock(&svc->lock);
	return n;
}
