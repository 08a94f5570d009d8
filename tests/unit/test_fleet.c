/* Unit tests of fleet/ with no guest: the boot slots (customers wait,
 * the pool yields to a waiting customer, stop fails waiters) and the
 * registry of live guests by id. The
 * placement rule's own tests are in test_placement.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "fleet/fleet.h"
#include "util/util.h"

/* Slots up to max are handed out at once; the next customer waits until
 * its deadline and gets a 503 with Retry-After 5. */
static void test_slots_cap(void **state)
{
	struct fleet_slots s;
	struct sbx_error err;

	(void)state;
	fleet_slots_init(&s, 2);
	assert_int_equal(fleet_slot_acquire(&s, sbx_mono_ms() + 1000, &err), 0);
	assert_true(fleet_slot_try_pool(&s));
	assert_int_equal(fleet_slots_active(&s), 2);
	assert_false(fleet_slot_try_pool(&s));
	sbx_error_clear(&err);
	assert_int_equal(fleet_slot_acquire(&s, sbx_mono_ms() + 150, &err), -1);
	assert_int_equal(err.code, SBX_E_SERVICE_UNAVAILABLE);
	assert_int_equal(err.retry_after_s, 5);
	fleet_slot_release(&s);
	assert_int_equal(fleet_slots_active(&s), 1);
	assert_int_equal(fleet_slot_acquire(&s, sbx_mono_ms() + 1000, &err), 0);
	fleet_slot_release(&s);
	fleet_slot_release(&s);
	assert_int_equal(fleet_slots_active(&s), 0);
	fleet_slots_destroy(&s);
}

struct waiter {
	struct fleet_slots *s;
	int64_t deadline;
	int rc;
	struct sbx_error err;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;

	w->rc = fleet_slot_acquire(w->s, w->deadline, &w->err);
	return NULL;
}

static void wait_for_waiting(struct fleet_slots *s)
{
	for (;;) {
		int n;

		pthread_mutex_lock(&s->lock);
		n = s->waiting;
		pthread_mutex_unlock(&s->lock);
		if (n > 0)
			return;
		usleep(1000);
	}
}

/* A customer waiting for a slot: the pool may not take the one freed;
 * the customer gets it. */
static void test_slots_customer_first(void **state)
{
	struct fleet_slots s;
	struct sbx_error err;
	struct waiter w = {.s = &s};
	pthread_t t;

	(void)state;
	fleet_slots_init(&s, 1);
	assert_int_equal(fleet_slot_acquire(&s, sbx_mono_ms() + 1000, &err), 0);
	w.deadline = sbx_mono_ms() + 60000;
	assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
	wait_for_waiting(&s);
	assert_false(fleet_slot_try_pool(&s));
	/* the moment between a release and the waiter waking: a slot is free
	 * but a customer still waits, so the pool may not take it */
	pthread_mutex_lock(&s.lock);
	s.active--;
	pthread_mutex_unlock(&s.lock);
	assert_false(fleet_slot_try_pool(&s));
	pthread_mutex_lock(&s.lock);
	s.active++;
	pthread_mutex_unlock(&s.lock);
	fleet_slot_release(&s);
	pthread_join(t, NULL);
	assert_int_equal(w.rc, 0);
	assert_int_equal(fleet_slots_active(&s), 1);
	assert_false(fleet_slot_try_pool(&s));
	fleet_slot_release(&s);
	assert_true(fleet_slot_try_pool(&s));
	fleet_slot_release(&s);
	fleet_slots_destroy(&s);
}

/* Stop fails a waiting customer long before its deadline, and every
 * later one that would wait; the pool takes no slot once stopped. */
static void test_slots_stop(void **state)
{
	struct fleet_slots s;
	struct sbx_error err;
	struct waiter w = {.s = &s};
	pthread_t t;
	int64_t t0;

	(void)state;
	fleet_slots_init(&s, 1);
	assert_int_equal(fleet_slot_acquire(&s, sbx_mono_ms() + 1000, &err), 0);
	w.deadline = sbx_mono_ms() + 600000;
	assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
	wait_for_waiting(&s);
	fleet_slots_stop(&s);
	pthread_join(t, NULL);
	assert_int_equal(w.rc, -1);
	assert_int_equal(w.err.code, SBX_E_SERVICE_UNAVAILABLE);
	/* a later customer that would wait fails at once, not at its deadline */
	t0 = sbx_mono_ms();
	assert_int_equal(fleet_slot_acquire(&s, t0 + 600000, &err), -1);
	assert_true(sbx_mono_ms() - t0 < 300000);
	fleet_slot_release(&s);
	assert_false(fleet_slot_try_pool(&s));
	assert_int_equal(fleet_slots_active(&s), 0);
	fleet_slots_destroy(&s);
}

/* The registry finds every guest linked by its id through growth, and
 * none once it is unlinked. */
static void test_registry(void **state)
{
	enum { N = 500 };
	static struct fleet_node nodes[N];
	static char keys[N][16];
	struct fleet_registry r;

	(void)state;
	assert_int_equal(fleet_registry_init(&r), 0);
	assert_null(fleet_registry_get(&r, "sbx_0"));
	for (int i = 0; i < N; i++) {
		snprintf(keys[i], sizeof(keys[i]), "sbx_%d", i);
		nodes[i].key = keys[i];
		fleet_registry_put(&r, &nodes[i]);
	}
	assert_int_equal(r.count, N);
	assert_true(r.n_buckets >= N);
	for (int i = 0; i < N; i++)
		assert_ptr_equal(fleet_registry_get(&r, keys[i]), &nodes[i]);
	assert_null(fleet_registry_get(&r, "sbx_500"));
	assert_null(fleet_registry_del(&r, "sbx_500"));
	for (int i = 0; i < N; i += 2)
		assert_ptr_equal(fleet_registry_del(&r, keys[i]), &nodes[i]);
	assert_int_equal(r.count, N / 2);
	for (int i = 0; i < N; i++) {
		if (i % 2)
			assert_ptr_equal(fleet_registry_get(&r, keys[i]), &nodes[i]);
		else
			assert_null(fleet_registry_get(&r, keys[i]));
	}
	assert_null(fleet_registry_del(&r, keys[0]));
	fleet_registry_free(&r);
	assert_null(fleet_registry_get(&r, keys[1]));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_slots_cap),
	    cmocka_unit_test(test_slots_customer_first),
	    cmocka_unit_test(test_slots_stop),
	    cmocka_unit_test(test_registry),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
