/* Unit tests of the per-sandbox metrics with no guest (fleet/metrics.c):
 * the ring (the CPU delta over the wall time, the first reading only a
 * base, a CPU time that goes back, the oldest sample dropped when full,
 * copies newest last), the memory figure from the guest's balloon report
 * (clamped, stale or absent is none: a hostile guest's numbers stay in
 * bounds) and the config key's bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "fleet/fleet-priv.h"
#include "sandbox/sandbox.h"
#include "vmm/vmm.h"

static struct fleet_metrics_reading reading(int64_t mono_ms, uint64_t cpu_ns)
{
	return (struct fleet_metrics_reading){
	    .mono_ms = mono_ms,
	    .wall_ms = 1700000000000 + mono_ms,
	    .has_cpu = true,
	    .cpu_ns = cpu_ns,
	    .memory_used_mib = 100,
	    .disk_used_mib = -1,
	};
}

/* cpu_cores = CPU time since the previous reading / wall time since it;
 * the first reading gives no sample. */
static void test_cpu_delta(void **state)
{
	struct fleet_metrics *m = fleet_metrics_new(8);
	struct fleet_metrics_sample out[8];
	struct fleet_metrics_reading r;

	(void)state;
	assert_non_null(m);
	r = reading(1000, 5000000000ull);
	assert_false(fleet_metrics_add(m, &r));
	assert_int_equal(fleet_metrics_copy(m, out, 8), 0);
	/* 2 s of CPU in 2 s: one core */
	r = reading(3000, 7000000000ull);
	assert_true(fleet_metrics_add(m, &r));
	/* 1.5 s in 3 s: half a core */
	r = reading(6000, 8500000000ull);
	assert_true(fleet_metrics_add(m, &r));
	/* nothing in 1 s: idle */
	r = reading(7000, 8500000000ull);
	assert_true(fleet_metrics_add(m, &r));
	assert_int_equal(fleet_metrics_copy(m, out, 8), 3);
	assert_true(out[0].cpu_cores > 0.999 && out[0].cpu_cores < 1.001);
	assert_true(out[1].cpu_cores > 0.499 && out[1].cpu_cores < 0.501);
	assert_true(out[2].cpu_cores == 0.0);
	assert_int_equal(out[0].at_ms, 1700000003000);
	assert_int_equal(out[2].at_ms, 1700000007000);
	assert_int_equal(out[1].memory_used_mib, 100);
	assert_int_equal(out[1].disk_used_mib, -1);
	fleet_metrics_free(m);
}

/* A CPU time that goes back (another domain, a confused driver) or a
 * clock that did not move gives no sample: the reading is the new base. A
 * reading without CPU time leaves the base alone. */
static void test_cpu_back_and_missing(void **state)
{
	struct fleet_metrics *m = fleet_metrics_new(8);
	struct fleet_metrics_sample out[8];
	struct fleet_metrics_reading r;

	(void)state;
	r = reading(1000, 9000000000ull);
	assert_false(fleet_metrics_add(m, &r));
	r = reading(2000, 1000000000ull); /* back: no negative figure */
	assert_false(fleet_metrics_add(m, &r));
	r = reading(2000, 1500000000ull); /* no time passed */
	assert_false(fleet_metrics_add(m, &r));
	r = reading(3000, 0);
	r.has_cpu = false;
	assert_false(fleet_metrics_add(m, &r));
	/* from the base of 2000 ms / 1.5 s: 0.25 s in 2 s */
	r = reading(4000, 1750000000ull);
	assert_true(fleet_metrics_add(m, &r));
	assert_int_equal(fleet_metrics_copy(m, out, 8), 1);
	assert_true(out[0].cpu_cores > 0.1249 && out[0].cpu_cores < 0.1251);
	fleet_metrics_free(m);
}

/* A full ring drops its oldest sample; a copy gives the newest, oldest
 * first, at most as many as asked. */
static void test_ring_bounded(void **state)
{
	struct fleet_metrics *m = fleet_metrics_new(3);
	struct fleet_metrics_sample out[8];
	struct fleet_metrics_reading r;

	(void)state;
	assert_null(fleet_metrics_new(0));
	assert_null(fleet_metrics_new(FLEET_METRICS_HISTORY + 1));
	for (int i = 0; i <= 7; i++) {
		r = reading(1000 * (i + 1), 0);
		r.disk_used_mib = i;
		fleet_metrics_add(m, &r);
	}
	assert_int_equal(fleet_metrics_copy(m, out, 8), 3);
	assert_int_equal(out[0].disk_used_mib, 5);
	assert_int_equal(out[1].disk_used_mib, 6);
	assert_int_equal(out[2].disk_used_mib, 7);
	assert_int_equal(fleet_metrics_copy(m, out, 2), 2);
	assert_int_equal(out[0].disk_used_mib, 6);
	assert_int_equal(out[1].disk_used_mib, 7);
	fleet_metrics_free(m);
}

/* The guest's word: MemTotal less MemAvailable, never below 0 nor above
 * its size; none when it never reported or stopped reporting. */
static void test_memory_from_balloon(void **state)
{
	const int64_t now = 1700000100000;
	struct vmm_vm_stats st = {
	    .has_memory = true,
	    .memory_total_kib = 4000 * 1024,
	    .memory_available_kib = 2976 * 1024,
	    .memory_reported_s = now / 1000 - 2,
	};

	(void)state;
	assert_int_equal(fleet_metrics_memory_mib(&st, 4096, 5000, now), 1024);
	/* available above total (a lie): 0, not a huge unsigned */
	st.memory_available_kib = st.memory_total_kib + 1;
	assert_int_equal(fleet_metrics_memory_mib(&st, 4096, 5000, now), 0);
	/* more than its size: its size */
	st.memory_total_kib = UINT64_MAX;
	st.memory_available_kib = 0;
	assert_int_equal(fleet_metrics_memory_mib(&st, 4096, 5000, now), 4096);
	/* stale: older than 4 periods and 30 s */
	st.memory_total_kib = 4000 * 1024;
	st.memory_reported_s = now / 1000 - 29;
	assert_int_equal(fleet_metrics_memory_mib(&st, 4096, 5000, now), 4000);
	st.memory_reported_s = now / 1000 - 31;
	assert_int_equal(fleet_metrics_memory_mib(&st, 4096, 5000, now), -1);
	assert_int_equal(fleet_metrics_memory_mib(&st, 4096, 10000, now), 4000);
	/* never reported, a time from the far future, no balloon */
	st.memory_reported_s = 0;
	assert_int_equal(fleet_metrics_memory_mib(&st, 4096, 5000, now), -1);
	st.memory_reported_s = INT64_MAX;
	assert_int_equal(fleet_metrics_memory_mib(&st, 4096, 5000, now), -1);
	st.memory_reported_s = now / 1000;
	st.has_memory = false;
	assert_int_equal(fleet_metrics_memory_mib(&st, 4096, 5000, now), -1);
}

/* metrics_interval_ms: 5000 by default; 0 (off) or 1000..3600000. */
static void test_config_bounds(void **state)
{
	static const struct {
		uint32_t ms;
		int rc;
	} cases[] = {{0, 0}, {1000, 0}, {5000, 0}, {3600000, 0}, {999, -1}, {3600001, -1}};
	struct sandbox_config c;
	struct sbx_error err;

	(void)state;
	sandbox_config_defaults(&c);
	assert_int_equal(c.metrics_interval_ms, 5000);
	snprintf(c.state_dir, sizeof(c.state_dir), "/tmp/t-guest-metrics");
	sandbox_config_resolve(&c);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		c.metrics_interval_ms = cases[i].ms;
		sbx_error_clear(&err);
		assert_int_equal(sandbox_config_validate(&c, &err), cases[i].rc);
		if (cases[i].rc)
			assert_string_equal(err.param, "metrics_interval_ms");
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cpu_delta),	  cmocka_unit_test(test_cpu_back_and_missing),
	    cmocka_unit_test(test_ring_bounded),  cmocka_unit_test(test_memory_from_balloon),
	    cmocka_unit_test(test_config_bounds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
