/* Per-sandbox metrics (issue 32) in a real guest: GET
 * /v1/sandboxes/{id}/metrics shows a `yes > /dev/null` as CPU near a core
 * (host-observed: it agrees with the guest's qemu process in /proc), 1 GiB
 * written into tmpfs (/dev/shm) as the guest's reported memory, and 1 GiB
 * written into /tmp as disk (the full image's /tmp is its root disk: the
 * overlay grows on the host); the period is /v1/limits'; another account
 * gets 404, an ended sandbox 410.
 *
 * One daemon, the full image (a root disk), ONE guest of 1 vCPU / 3 GiB
 * (tmpfs takes at most half: 1.5 GiB) sampled every second. Figures are
 * printed; the assertions leave wide margins (TCG on a shared host). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

#define INTERVAL_MS 1000

static struct daemon d;
static char other_key[128];
static char sbx[64];

static int setup(void **state)
{
	struct daemon other;

	(void)state;
	if (daemon_config_full(&d, "\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": 3072, "
				   "\"disk_gib\": 2, \"price_micro_usd_per_hour\": 90000}}, "
				   "\"http_threads\": 2, \"destroy_on_exit\": true, "
				   "\"metrics_interval_ms\": 1000") < 0) {
		fprintf(stderr, "test_sandbox_metrics: no full image (make image-full)\n");
		return -1;
	}
	other = d;
	daemon_create_account(&other, "10");
	snprintf(other_key, sizeof(other_key), "%s", other.key);
	if (daemon_up(&d) < 0)
		return -1;
	return daemon_create_sandbox(&d, sbx, sizeof(sbx));
}

static int teardown(void **state)
{
	(void)state;
	return daemon_down(&d);
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* Run a command that must exit 0. */
static void run(const char *cmd)
{
	struct http_reply r;
	json_object *o = json_object_new_object();
	char path[128];

	json_object_object_add(o, "command", json_object_new_string(cmd));
	json_object_object_add(o, "timeout_ms", json_object_new_int(120000));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", sbx);
	assert_int_equal(
	    http_request(&d, "POST", path, d.key, NULL, json_object_to_json_string(o), 0, &r), 0);
	json_object_put(o);
	if (r.status != 200 || jint(r.json, "exit_code") != 0)
		fprintf(stderr, "exec '%s': %d %s\n", cmd, r.status, r.body);
	assert_int_equal(r.status, 200);
	assert_int_equal(jint(r.json, "exit_code"), 0);
	http_reply_free(&r);
}

/* GET the metrics as `key`: the reply (the caller frees). */
static struct http_reply metrics_as(const char *key, const char *id)
{
	struct http_reply r;
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/metrics", id);
	assert_int_equal(http_request(&d, "GET", path, key, NULL, NULL, 0, &r), 0);
	return r;
}

/* The samples array of a 200 (borrowed from r). */
static json_object *samples_of(struct http_reply *r)
{
	json_object *a;

	if (r->status != 200)
		fprintf(stderr, "metrics: %d %s\n", r->status, r->body);
	assert_int_equal(r->status, 200);
	assert_true(json_object_object_get_ex(r->json, "samples", &a));
	assert_true(json_object_is_type(a, json_type_array));
	return a;
}

/* The newest sample's integer `key` (-1 when null), after waiting for
 * `wait` new samples. */
static int64_t newest_after(const char *key, int wait)
{
	struct http_reply r;
	json_object *a, *s, *v;
	int64_t out;

	sleep_ms(wait * INTERVAL_MS + 300);
	r = metrics_as(d.key, sbx);
	a = samples_of(&r);
	assert_true(json_object_array_length(a) > 0);
	s = json_object_array_get_idx(a, json_object_array_length(a) - 1);
	assert_true(json_object_object_get_ex(s, key, &v));
	out = v ? json_object_get_int64(v) : -1;
	http_reply_free(&r);
	return out;
}

/* The shape: the period, newest last, a second apart, the memory marked
 * as the guest's own; the period in /v1/limits too. */
static void samples_have_their_shape(void **state)
{
	struct http_reply r;
	json_object *a, *v;
	int64_t prev = 0;
	size_t n;

	(void)state;
	sleep_ms(4 * INTERVAL_MS);
	r = metrics_as(d.key, sbx);
	a = samples_of(&r);
	assert_int_equal(jint(r.json, "interval_ms"), INTERVAL_MS);
	assert_string_equal(jstr(r.json, "sandbox_id"), sbx);
	n = json_object_array_length(a);
	print_message("%zu samples after ~4 s: %s\n", n, r.body);
	assert_true(n >= 2);
	for (size_t i = 0; i < n; i++) {
		json_object *s = json_object_array_get_idx(a, i);
		int64_t at;

		assert_int_equal(sbx_rfc3339_parse(jstr(s, "at"), &at), 0);
		assert_true(at >= prev);
		prev = at;
		assert_true(json_object_object_get_ex(s, "cpu_cores", &v));
		assert_true(json_object_is_type(v, json_type_double) ||
			    json_object_is_type(v, json_type_int));
		assert_int_equal(jbool(s, "memory_guest_reported"), 1);
		/* the balloon reports (free page reporting is on by default) */
		assert_true(jint(s, "memory_used_mib") > 0);
		assert_true(jint(s, "memory_used_mib") <= 3072);
		assert_true(jint(s, "disk_used_mib") >= 0);
	}
	http_reply_free(&r);

	assert_int_equal(http_request(&d, "GET", "/v1/limits", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_int_equal(jint(r.json, "metrics_interval_ms"), INTERVAL_MS);
	http_reply_free(&r);
}

/* The smallest, largest and mean cpu_cores of the samples taken from
 * from_ms to to_ms. */
static void cpu_range(int64_t from_ms, int64_t to_ms, double *lo, double *hi, double *mean, int *n)
{
	struct http_reply r = metrics_as(d.key, sbx);
	json_object *a = samples_of(&r);

	*lo = 1e9;
	*hi = -1;
	*mean = 0;
	*n = 0;
	for (size_t i = 0; i < json_object_array_length(a); i++) {
		json_object *s = json_object_array_get_idx(a, i), *v;
		int64_t at;
		double c;

		assert_int_equal(sbx_rfc3339_parse(jstr(s, "at"), &at), 0);
		if (at < from_ms || at > to_ms)
			continue;
		assert_true(json_object_object_get_ex(s, "cpu_cores", &v));
		c = json_object_get_double(v);
		*lo = c < *lo ? c : *lo;
		*hi = c > *hi ? c : *hi;
		*mean += c;
		(*n)++;
	}
	if (*n)
		*mean /= *n;
	http_reply_free(&r);
}

/* The CPU time the host's /proc gives this run's qemu process (utime +
 * stime), in clock ticks; -1 when it cannot be read. */
static long long qemu_ticks(void)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd),
		 "p=$(pgrep -f '[q]emu-system.*guest=%s' | head -1); "
		 "test -n \"$p\" && awk '{print $14 + $15}' /proc/$p/stat || echo -1",
		 d.prefix);
	return cmd_number(cmd);
}

/* An idle guest shows little CPU; `yes > /dev/null` a busy core, as much
 * as the host's /proc says its qemu used. */
static void busy_vcpu_shows_as_a_core(void **state)
{
	double lo, hi, mean, host;
	int n;
	int64_t t0, t1;
	long long k0, k1;

	(void)state;
	t0 = sbx_wall_ms();
	sleep_ms(4 * INTERVAL_MS);
	cpu_range(t0 + INTERVAL_MS, INT64_MAX, &lo, &hi, &mean, &n);
	print_message("idle: %d samples, cpu_cores %.3f..%.3f\n", n, lo, hi);
	assert_true(n >= 2);
	assert_true(lo < 0.5);

	k0 = qemu_ticks();
	t0 = sbx_wall_ms();
	run("timeout 8 yes > /dev/null; true");
	t1 = sbx_wall_ms();
	k1 = qemu_ticks();
	/* the samples whose whole second lies in the run */
	sleep_ms(INTERVAL_MS + 300);
	cpu_range(t0 + 2 * INTERVAL_MS, t1, &lo, &hi, &mean, &n);
	host = (double)(k1 - k0) / (double)sysconf(_SC_CLK_TCK) / ((double)(t1 - t0) / 1000.0);
	print_message("yes: %d samples, cpu_cores %.3f..%.3f (mean %.3f); the host's /proc: "
		      "%.3f cores over the run\n",
		      n, lo, hi, mean, host);
	assert_true(k0 > 0 && k1 > k0);
	assert_true(n >= 4);
	assert_true(hi > 0.5);
	/* the same figure the host sees, give or take the edges */
	assert_true(mean > host - 0.25 && mean < host + 0.25);
}

/* 1 GiB in tmpfs shows in the guest's reported memory; deleted, it goes
 * again. */
static void tmpfs_write_shows_as_memory(void **state)
{
	int64_t m0, m1, m2;

	(void)state;
	m0 = newest_after("memory_used_mib", 1);
	run("dd if=/dev/zero of=/dev/shm/fill bs=1M count=1024 2>/dev/null");
	m1 = newest_after("memory_used_mib", 3);
	run("rm /dev/shm/fill");
	m2 = newest_after("memory_used_mib", 3);
	print_message("memory_used_mib: %lld before, %lld with 1 GiB in /dev/shm, %lld after rm\n",
		      (long long)m0, (long long)m1, (long long)m2);
	assert_true(m0 > 0);
	assert_true(m1 >= m0 + 900);
	assert_true(m2 < m1 - 900);
}

/* 1 GiB written into /tmp (the root disk) grows the overlay on the host;
 * it is disk, not memory (page cache is not counted as used). */
static void disk_write_shows_as_disk(void **state)
{
	int64_t d0, d1, m0, m1;

	(void)state;
	d0 = newest_after("disk_used_mib", 1);
	m0 = newest_after("memory_used_mib", 0);
	run("dd if=/dev/zero of=/tmp/fill bs=1M count=1024 conv=fsync 2>/dev/null");
	d1 = newest_after("disk_used_mib", 3);
	m1 = newest_after("memory_used_mib", 0);
	print_message("disk_used_mib: %lld before, %lld after 1 GiB in /tmp; memory_used_mib "
		      "%lld -> %lld\n",
		      (long long)d0, (long long)d1, (long long)m0, (long long)m1);
	assert_true(d0 >= 0);
	assert_true(d1 >= d0 + 900);
	assert_true(m1 < m0 + 500);
}

/* Another account's key: 404, as for a sandbox that does not exist; no
 * key: 401; a sandbox ended: 410. */
static void owner_only_and_running_only(void **state)
{
	struct http_reply r;
	char buf[64];

	(void)state;
	r = metrics_as(other_key, sbx);
	assert_int_equal(r.status, 404);
	assert_string_equal(jerr(r.json, "type"), "not_found");
	http_reply_free(&r);
	r = metrics_as(d.key, "sbx_doesnotexist");
	assert_int_equal(r.status, 404);
	http_reply_free(&r);
	r = metrics_as(NULL, sbx);
	assert_int_equal(r.status, 401);
	http_reply_free(&r);

	assert_int_equal(daemon_delete_sandbox(&d, sbx, buf, sizeof(buf)), 200);
	r = metrics_as(d.key, sbx);
	assert_int_equal(r.status, 410);
	assert_string_equal(jerr(r.json, "type"), "sandbox_not_running");
	http_reply_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(samples_have_their_shape),
	    cmocka_unit_test(busy_vcpu_shows_as_a_core),
	    cmocka_unit_test(tmpfs_write_shows_as_memory),
	    cmocka_unit_test(disk_write_shows_as_disk),
	    cmocka_unit_test(owner_only_and_running_only),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
