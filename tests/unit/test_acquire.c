/* fleet/acquire.c and boot.c with no guest: fleet_acquire driven through a fake
 * behind its seam (struct fleet_guest_ops, fleet.h). The
 * fake "creates" a domain per start (a name, no vmm_vm), hands out a fake
 * channel and feeds the guest's HELLO into the real agentless conn (or
 * not: the real wait times out), and counts every teardown per domain.
 * For every failure step it asserts the undo: the host's booting
 * counters are back to zero, no boot slot is held, no guest is left in
 * the lives or the registry, and every domain created was destroyed
 * exactly once; and the success paths (warm take, cold boot, eviction).
 *
 * The fleet: a bare one (no store, no thread), its one host UP by hand
 * with no vmm opened: its vmm is a sentinel that nothing may call (every
 * vmm call of acquisition goes through the fake). The execution pool's
 * boot (pool.c) runs on a work pool of the test's, with a fake launcher
 * behind the prestart hook: a launcher that fails destroys its guest
 * once and gives everything back; one that starts puts its guest in the
 * pool for an execution to take. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentless/agentless.h"
#include "agentless/wire.h"
#include "fleet/fleet-priv.h"

#define MAX_DOMAINS 16

/* ------------------------------------------------------------ the fake */

struct fake_ch {
	bool closed;
	size_t sent;
};

static struct fake {
	/* what goes wrong */
	bool fail_start, fail_open, no_hello, fail_set_id;
	/* what it saw */
	int started;		    /* domains created */
	int destroyed[MAX_DOMAINS]; /* teardowns per domain */
	struct fake_ch ch[MAX_DOMAINS];
	int set_ids;
} K;

static int domain_index(const struct fleet_guest *l)
{
	int i = -1;

	assert_int_equal(sscanf(l->domain, "fake-%d", &i), 1);
	assert_true(i >= 0 && i < K.started);
	return i;
}

static int fake_send(void *ctx, const void *buf, size_t len)
{
	struct fake_ch *f = ctx;

	(void)buf;
	if (f->closed)
		return -1;
	f->sent += len;
	return 0;
}

static void fake_close(void *ctx)
{
	((struct fake_ch *)ctx)->closed = true;
}

/* The guest's HELLO, as if it came over the channel. */
static void feed_hello(struct agentless_conn *c)
{
	uint8_t buf[WIRE_HEADER_LEN + 64];
	struct wire_writer w;
	struct wire_header h = {.type = WIRE_HELLO};

	wire_writer_init(&w, buf + WIRE_HEADER_LEN, 64);
	wire_put_u32(&w, WIRE_T_VERSION, WIRE_VERSION);
	wire_put_u32(&w, WIRE_T_VERSION_MIN, WIRE_VERSION_MIN);
	h.len = (uint32_t)w.len;
	wire_header_encode(&h, buf);
	agentless_conn_recv(c, buf, WIRE_HEADER_LEN + w.len);
}

static int fake_start(struct fleet_guest *l, const struct vmm_guest_spec *spec,
		      struct sbx_error *err)
{
	assert_non_null(spec->sandbox_id);
	if (K.fail_start)
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "fake: domain create failed");
	assert_true(K.started < MAX_DOMAINS);
	snprintf(l->domain, sizeof(l->domain), "fake-%d", K.started++);
	return 0;
}

static int fake_open_channel(struct fleet_guest *l, struct sbx_channel *ch, struct sbx_error *err)
{
	int i = domain_index(l);

	if (K.fail_open)
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "fake: channel open failed");
	*ch = (struct sbx_channel){.ctx = &K.ch[i], .send = fake_send, .close = fake_close};
	return 0;
}

static int fake_wait_hello(struct fleet_guest *l, int64_t deadline_mono, struct sbx_error *err)
{
	if (!K.no_hello)
		feed_hello(l->conn);
	return agentless_conn_wait_hello(l->conn, deadline_mono, err); /* the real wait */
}

static int fake_set_sandbox_id(struct fleet_guest *l, const char *id, struct sbx_error *err)
{
	domain_index(l);
	K.set_ids++;
	if (K.fail_set_id)
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "fake: domain not found");
	return 0;
}

static void fake_teardown(struct fleet_guest *l, const char *why)
{
	K.destroyed[domain_index(l)]++;
	fleet_guest_teardown(l, why); /* vm NULL: only the conn is closed */
}

static const struct fleet_guest_ops fake_ops = {
    .start = fake_start,
    .open_channel = fake_open_channel,
    .wait_hello = fake_wait_hello,
    .set_sandbox_id = fake_set_sandbox_id,
    .teardown = fake_teardown,
};

/* ------------------------------------------------------------- fixture */

static struct {
	struct sandbox_config cfg; /* ~150 KiB: static */
	struct fleet *fleet;
	struct fleet_host *h;
	struct sbx_workpool *work; /* the pool tests' (NULL otherwise) */
	const struct sandbox_size *small, *medium;
} F;

static int sentinel_vmm; /* never called: the fake replaces every vmm call */

static int setup(void **state)
{
	(void)state;
	memset(&K, 0, sizeof(K));
	sandbox_config_defaults(&F.cfg);
	F.cfg.transport = CONFIG_TRANSPORT_SOCKET;
	sandbox_config_resolve(&F.cfg);
	F.cfg.max_concurrent_boots = 2;
	F.cfg.boot_timeout_ms = 5000;
	/* one host, room for 2 guests */
	F.cfg.hosts[0].max_guests = 2;
	F.cfg.hosts[0].memory_mib = 64 * 1024;
	F.cfg.hosts[0].base_image[0] = '\0';
	F.fleet = fleet_new(&F.cfg, NULL);
	if (!F.fleet || fleet_n_hosts(F.fleet) != 1)
		return -1;
	fleet_set_guest_ops(F.fleet, &fake_ops);
	/* UP, not this machine (no statvfs) */
	F.h = fleet_host_at(F.fleet, 0);
	F.h->local = false;
	F.h->vmm = (struct vmm *)&sentinel_vmm;
	F.h->state = FLEET_HOST_UP;
	F.small = sandbox_config_size(&F.cfg, "small");
	F.medium = sandbox_config_size(&F.cfg, "medium");
	return F.small && F.medium ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	/* what a test left pooled, as fleet_pool_stop would (it needs hosts) */
	while (F.fleet->pool) {
		struct fleet_guest *p = F.fleet->pool;

		F.fleet->pool = p->next;
		fake_teardown(p, "the test is over");
	}
	F.h->vmm = NULL; /* the host has no vmm to close */
	if (F.work) {
		sbx_workpool_drain(F.work);
		sbx_workpool_free(F.work);
		F.work = NULL;
	}
	fleet_free(F.fleet);
	return 0;
}

/* A ready pooled guest of `size` on the host, booted through the fake
 * (its domain counted like any other). */
static struct fleet_guest *plant_pooled(const struct sandbox_size *size)
{
	struct fleet_guest *l;
	struct sbx_error err;

	sbx_error_clear(&err);
	assert_int_equal(fleet_slot_acquire(&F.fleet->slots, sbx_mono_ms() + 1000, &err), 0);
	assert_int_equal(
	    fleet_guest_boot(F.fleet, F.h, size, "pool:x", NULL, sbx_mono_ms() + 5000, &l, &err),
	    0);
	fleet_slot_release(&F.fleet->slots);
	assert_int_equal(fleet_guest_set_state(l, FLEET_GUEST_POOLED), 0);
	pthread_mutex_lock(&F.fleet->lock);
	l->pooled_at_mono = sbx_mono_ms();
	l->next = F.fleet->pool;
	F.fleet->pool = l;
	pthread_mutex_unlock(&F.fleet->lock);
	return l;
}

static int pool_len(void)
{
	int n = 0;

	pthread_mutex_lock(&F.fleet->lock);
	for (struct fleet_guest *p = F.fleet->pool; p; p = p->next)
		n++;
	pthread_mutex_unlock(&F.fleet->lock);
	return n;
}

/* Nothing counted, no slot held, no guest linked, and every domain the
 * fake created destroyed exactly once, but the `alive` still pooled. */
static void assert_undone(int alive)
{
	int destroyed = 0, booting, by_id;
	uint64_t booting_mib, booting_disk_gib;
	bool lives;

	/* read under the lock, assert without it (a failed assert jumps) */
	pthread_mutex_lock(&F.fleet->lock);
	booting = F.h->booting;
	booting_mib = F.h->booting_mib;
	booting_disk_gib = F.h->booting_disk_gib;
	lives = F.fleet->lives != NULL;
	by_id = (int)F.fleet->by_id.count;
	pthread_mutex_unlock(&F.fleet->lock);
	assert_int_equal(booting, 0);
	assert_int_equal(booting_mib, 0);
	assert_int_equal(booting_disk_gib, 0);
	assert_false(lives);
	assert_int_equal(by_id, 0);
	assert_int_equal(fleet_slots_active(&F.fleet->slots), 0);
	assert_int_equal(pool_len(), alive);
	for (int i = 0; i < K.started; i++) {
		assert_in_range(K.destroyed[i], 0, 1);
		destroyed += K.destroyed[i];
	}
	assert_int_equal(destroyed, K.started - alive);
}

static struct fleet_acquire acq(const struct sandbox_size *size, int64_t boot_ms)
{
	int64_t now = sbx_mono_ms();

	return (struct fleet_acquire){
	    .size = size,
	    .marker = "sbx_test",
	    .queue_deadline_mono = now + 2000,
	    .boot_deadline_mono = now + boot_ms,
	    .why_failed = "the test's guest failed",
	};
}

/* The caller's part after a success: tear the guest down, uncount it. */
static void give_back(struct fleet_acquire *a)
{
	fake_teardown(a->g, "the test is over");
	fleet_guest_uncount(F.fleet, a->h, a->size);
}

/* ---------------------------------------------------------------- tests */

/* A cold boot: counted booting on the host until the caller uncounts it,
 * its slot already given back; the guest RUNNING, named by the marker,
 * linked nowhere. */
static void test_cold_boot(void **state)
{
	struct fleet_acquire a = acq(F.small, 5000);
	struct sbx_error err;

	(void)state;
	sbx_error_clear(&err);
	assert_int_equal(fleet_acquire(F.fleet, &a, &err), 0);
	assert_false(a.warm);
	assert_ptr_equal(a.h, F.h);
	assert_non_null(a.g);
	assert_string_equal(a.g->id, "sbx_test");
	assert_int_equal(fleet_guest_state(a.g), FLEET_GUEST_RUNNING);
	assert_true(agentless_conn_alive(a.g->conn));
	assert_int_equal(K.started, 1);
	assert_int_equal(K.destroyed[0], 0);
	assert_int_equal(F.h->booting, 1);
	assert_int_equal(F.h->booting_mib, F.small->memory_mib);
	assert_int_equal(fleet_slots_active(&F.fleet->slots), 0);
	assert_null(F.fleet->lives);
	give_back(&a);
	assert_undone(0);
}

/* A warm take: the pooled guest itself, no boot, no slot, named by the
 * marker, counted booting like a cold one. */
static void test_warm_take(void **state)
{
	struct fleet_guest *p = plant_pooled(F.small);
	struct fleet_acquire a = acq(F.small, 5000);
	struct sbx_error err;

	(void)state;
	sbx_error_clear(&err);
	assert_int_equal(fleet_acquire(F.fleet, &a, &err), 0);
	assert_true(a.warm);
	assert_ptr_equal(a.g, p);
	assert_string_equal(p->id, "sbx_test");
	assert_int_equal(fleet_guest_state(p), FLEET_GUEST_RUNNING);
	assert_int_equal(K.started, 1); /* the pooled one only */
	assert_int_equal(K.set_ids, 1);
	assert_int_equal(F.h->booting, 1);
	assert_int_equal(pool_len(), 0);
	give_back(&a);
	assert_undone(0);
}

/* No host has room: 503, nothing counted, no domain created. */
static void test_no_room(void **state)
{
	struct fleet_acquire a = acq(F.small, 5000), b = acq(F.small, 5000);
	struct fleet_acquire c = acq(F.small, 5000);
	struct sbx_error err;

	(void)state;
	sbx_error_clear(&err);
	assert_int_equal(fleet_acquire(F.fleet, &a, &err), 0);
	assert_int_equal(fleet_acquire(F.fleet, &b, &err), 0);
	assert_int_equal(fleet_acquire(F.fleet, &c, &err), -1);
	assert_true(c.no_room);
	assert_null(c.g);
	assert_int_equal(err.code, SBX_E_SERVICE_UNAVAILABLE);
	assert_int_equal(err.retry_after_s, 10);
	assert_int_equal(K.started, 2);
	assert_int_equal(F.h->booting, 2);
	give_back(&a);
	give_back(&b);
	assert_undone(0);
}

/* Every boot slot held past the queue deadline: 503, nothing counted,
 * no domain created. */
static void test_slot_deadline(void **state)
{
	struct fleet_acquire a = acq(F.small, 5000);
	struct sbx_error err;

	(void)state;
	sbx_error_clear(&err);
	for (int i = 0; i < F.cfg.max_concurrent_boots; i++)
		assert_int_equal(fleet_slot_acquire(&F.fleet->slots, sbx_mono_ms() + 1000, &err),
				 0);
	a.queue_deadline_mono = sbx_mono_ms() + 100;
	assert_int_equal(fleet_acquire(F.fleet, &a, &err), -1);
	assert_false(a.no_room);
	assert_int_equal(err.code, SBX_E_SERVICE_UNAVAILABLE);
	assert_int_equal(K.started, 0);
	assert_int_equal(F.h->booting, 0);
	for (int i = 0; i < F.cfg.max_concurrent_boots; i++)
		fleet_slot_release(&F.fleet->slots);
	assert_undone(0);
}

/* The domain create fails: nothing to destroy, everything given back. */
static void test_start_fails(void **state)
{
	struct fleet_acquire a = acq(F.small, 5000);
	struct sbx_error err;

	(void)state;
	K.fail_start = true;
	sbx_error_clear(&err);
	assert_int_equal(fleet_acquire(F.fleet, &a, &err), -1);
	assert_null(a.g);
	assert_int_equal(K.started, 0);
	assert_undone(0);
}

/* The channel does not open: the domain is destroyed once. */
static void test_channel_fails(void **state)
{
	struct fleet_acquire a = acq(F.small, 5000);
	struct sbx_error err;

	(void)state;
	K.fail_open = true;
	sbx_error_clear(&err);
	assert_int_equal(fleet_acquire(F.fleet, &a, &err), -1);
	assert_null(a.g);
	assert_int_equal(K.started, 1);
	assert_undone(0);
}

/* No HELLO by the boot deadline: 500 (not the host's capacity), the
 * domain destroyed once, its channel closed. */
static void test_hello_times_out(void **state)
{
	struct fleet_acquire a = acq(F.small, 200);
	struct sbx_error err;

	(void)state;
	K.no_hello = true;
	sbx_error_clear(&err);
	assert_int_equal(fleet_acquire(F.fleet, &a, &err), -1);
	assert_int_equal(err.code, SBX_E_SANDBOX_ERROR);
	assert_int_equal(K.started, 1);
	assert_true(K.ch[0].closed);
	assert_undone(0);
}

/* A pooled guest taken that turns out dead (its domain is gone when it is
 * named): torn down once, given back; no cold boot instead. */
static void test_warm_dead(void **state)
{
	struct fleet_acquire a = acq(F.small, 5000);
	struct sbx_error err;

	(void)state;
	plant_pooled(F.small);
	K.fail_set_id = true;
	sbx_error_clear(&err);
	assert_int_equal(fleet_acquire(F.fleet, &a, &err), -1);
	assert_null(a.g);
	assert_int_equal(K.set_ids, 1);
	assert_int_equal(K.started, 1);
	assert_undone(0);
}

/* A pooled guest already marked dead is not taken: a cold boot instead,
 * and the dead one stays for the pool to reap. */
static void test_dead_pooled_skipped(void **state)
{
	struct fleet_guest *p = plant_pooled(F.small);
	struct fleet_acquire a = acq(F.small, 5000);
	struct sbx_error err;

	(void)state;
	fleet_guest_mark_dead(p, sbx_wall_ms());
	sbx_error_clear(&err);
	assert_int_equal(fleet_acquire(F.fleet, &a, &err), 0);
	assert_false(a.warm);
	assert_ptr_not_equal(a.g, p);
	assert_int_equal(K.started, 2);
	assert_int_equal(K.set_ids, 0);
	give_back(&a);
	assert_undone(1);
}

/* Both of the host's places held by pooled guests of another size: they
 * are evicted (each destroyed once) to make room for a cold boot. */
static void test_evict(void **state)
{
	struct fleet_acquire a = acq(F.small, 5000);
	struct sbx_error err;

	(void)state;
	plant_pooled(F.medium);
	plant_pooled(F.medium);
	sbx_error_clear(&err);
	assert_int_equal(fleet_acquire(F.fleet, &a, &err), 0);
	assert_false(a.warm);
	assert_int_equal(K.started, 3);
	assert_int_equal(K.destroyed[0] + K.destroyed[1], 1); /* one place was enough */
	assert_int_equal(K.destroyed[2], 0);
	assert_int_equal(F.h->booting, 1);
	give_back(&a);
	assert_undone(1);
}

/* A resume's room on its own host (fleet_host_admit): with the host full
 * of running guests it is a 503 and nothing is counted; pooled guests are
 * evicted for it; a draining host still takes it; a host that is down
 * does not. Counted as booting until uncounted. */
static void test_admit_on_host(void **state)
{
	struct fleet_acquire a = acq(F.small, 5000), b = acq(F.small, 5000);
	struct sbx_error err;

	(void)state;
	sbx_error_clear(&err);
	assert_int_equal(fleet_acquire(F.fleet, &a, &err), 0);
	assert_int_equal(fleet_acquire(F.fleet, &b, &err), 0);
	/* full (2 of 2): refused, nothing counted */
	assert_int_equal(fleet_host_admit(F.fleet, F.h, F.small, &err), -1);
	assert_int_equal(err.code, SBX_E_SERVICE_UNAVAILABLE);
	assert_int_equal(err.retry_after_s, 10);
	assert_non_null(strstr(err.message, "no room"));
	assert_int_equal(F.h->booting, 2);
	give_back(&b);
	/* a pooled guest holds the room left: evicted for the resume */
	plant_pooled(F.small);
	sbx_error_clear(&err);
	F.h->draining = true;
	assert_int_equal(fleet_host_admit(F.fleet, F.h, F.small, &err), 0);
	F.h->draining = false;
	assert_int_equal(pool_len(), 0);
	assert_int_equal(K.destroyed[2], 1);
	assert_int_equal(F.h->booting, 2);
	fleet_guest_uncount(F.fleet, F.h, F.small);
	/* a host that is down takes nothing */
	F.h->state = FLEET_HOST_DOWN;
	assert_int_equal(fleet_host_admit(F.fleet, F.h, F.small, &err), -1);
	F.h->state = FLEET_HOST_UP;
	give_back(&a);
	assert_undone(0);
}

/* Eviction, then the boot fails: the evicted guest and the new domain are
 * each destroyed once, nothing stays counted. */
static void test_evict_then_boot_fails(void **state)
{
	struct fleet_acquire a = acq(F.small, 200);
	struct sbx_error err;

	(void)state;
	plant_pooled(F.medium);
	plant_pooled(F.medium);
	K.no_hello = true;
	sbx_error_clear(&err);
	assert_int_equal(fleet_acquire(F.fleet, &a, &err), -1);
	assert_int_equal(K.started, 3);
	assert_int_equal(K.destroyed[2], 1);
	assert_undone(1);
}

/* ------------------------------------------------ the execution pool */

/* The prestart hook (the owner's launcher): fails, or starts "python". */
static bool prestart_fails;
static int prestarts;

static int fake_prestart(void *opaque, struct fleet_guest *g, const char *runtime,
			 int64_t deadline_mono, struct sbx_error *err)
{
	(void)opaque;
	(void)deadline_mono;
	prestarts++;
	if (prestart_fails)
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL,
				     "fake: launcher did not start");
	snprintf(g->runtime, sizeof(g->runtime), "%s", runtime);
	return 0;
}

static bool fake_prestart_waiting(struct prestart *ps)
{
	(void)ps;
	return true;
}

/* An execution pool of one "python" guest, a work pool to boot it, and
 * one pool pass; returns once the boot job ended (nothing booting). */
static void pool_pass_until_booted(void)
{
	int booting = 1;

	F.cfg.n_execution_pool = 1;
	snprintf(F.cfg.execution_pool[0].runtime, sizeof(F.cfg.execution_pool[0].runtime), "%s",
		 "python");
	F.cfg.execution_pool[0].count = 1;
	snprintf(F.cfg.execution_size, sizeof(F.cfg.execution_size), "%s", "small");
	F.fleet->hooks.prestart = fake_prestart;
	F.fleet->hooks.prestart_waiting = fake_prestart_waiting;
	if (!F.work) {
		F.work = sbx_workpool_new("t-acquire", 2, 16, 0);
		assert_non_null(F.work);
		fleet_set_work(F.fleet, F.work);
	}
	fleet_pool_pass(F.fleet);
	for (int i = 0; i < 500 && booting; i++) {
		pthread_mutex_lock(&F.fleet->lock);
		booting = F.h->pool_booting;
		pthread_mutex_unlock(&F.fleet->lock);
		if (booting)
			usleep(10 * 1000);
	}
	assert_int_equal(booting, 0);
}

/* A pool boot whose launcher does not start: its guest is destroyed once,
 * nothing joins the pool, its slot and capacity are given back, and the
 * host backs off (the next pass boots nothing at once). */
static void test_pool_prestart_fails(void **state)
{
	int64_t backoff;
	int booting_now;

	(void)state;
	prestart_fails = true;
	prestarts = 0;
	pool_pass_until_booted();
	assert_int_equal(prestarts, 1);
	assert_int_equal(K.started, 1);
	assert_int_equal(K.destroyed[0], 1);
	pthread_mutex_lock(&F.fleet->lock);
	backoff = F.h->pool_backoff_until_mono;
	pthread_mutex_unlock(&F.fleet->lock);
	assert_true(backoff > sbx_mono_ms());
	fleet_pool_pass(F.fleet); /* backing off: queues no boot */
	pthread_mutex_lock(&F.fleet->lock);
	booting_now = F.h->pool_booting;
	pthread_mutex_unlock(&F.fleet->lock);
	assert_int_equal(booting_now, 0);
	assert_undone(0);
}

/* A pool boot whose launcher starts: the guest joins the execution pool
 * (POOLED, its runtime set) and an execution of that runtime takes it
 * warm, with no boot. */
static void test_pool_prestart_joins(void **state)
{
	struct fleet_acquire a = acq(F.small, 5000);
	struct sbx_error err;

	(void)state;
	prestart_fails = false;
	prestarts = 0;
	pool_pass_until_booted();
	assert_int_equal(prestarts, 1);
	assert_int_equal(fleet_pool_ready(F.fleet, NULL, "python"), 1);
	assert_int_equal(pool_len(), 1);
	assert_int_equal(fleet_guest_state(F.fleet->pool), FLEET_GUEST_POOLED);
	a.runtime = "python";
	sbx_error_clear(&err);
	assert_int_equal(fleet_acquire(F.fleet, &a, &err), 0);
	assert_true(a.warm);
	assert_string_equal(a.g->runtime, "python");
	assert_int_equal(K.started, 1);
	give_back(&a);
	assert_undone(0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_cold_boot, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_warm_take, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_no_room, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_slot_deadline, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_start_fails, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_channel_fails, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_hello_times_out, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_warm_dead, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_dead_pooled_skipped, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_evict, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_admit_on_host, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_evict_then_boot_fails, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pool_prestart_fails, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pool_prestart_joins, setup, teardown),
	};

	sbx_log_set_level(SBX_LOG_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
