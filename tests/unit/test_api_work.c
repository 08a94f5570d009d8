/* api/workpool.c and api/inflight.c: the bounded pool of long requests
 * (threads, queue bound, cancel at stop) and the per-account counts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <unistd.h>

#include "api/api-priv.h"

/* Jobs that block until released. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool gate_open;
static int ran, cancelled;

static void gated_job(void *arg, bool was_cancelled)
{
	(void)arg;
	pthread_mutex_lock(&gate_lock);
	if (was_cancelled) {
		cancelled++;
	} else {
		while (!gate_open)
			pthread_cond_wait(&gate_cond, &gate_lock);
		ran++;
	}
	pthread_mutex_unlock(&gate_lock);
}

static int ran_now(void)
{
	int n;

	pthread_mutex_lock(&gate_lock);
	n = ran;
	pthread_mutex_unlock(&gate_lock);
	return n;
}

static void gate_set(bool open)
{
	pthread_mutex_lock(&gate_lock);
	gate_open = open;
	ran = cancelled = 0;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
}

static void wait_running(struct api_workpool *p, int n)
{
	struct api_workpool_stats st;

	for (int i = 0; i < 500; i++) {
		api_workpool_stats(p, &st);
		if (st.running == n)
			return;
		usleep(2000);
	}
	fail_msg("%d jobs never ran", n);
}

/* 2 threads and 1 waiting job: the fourth busy job is refused. */
static void pool_is_bounded(void **state)
{
	struct api_workpool *p = api_workpool_new(2, 1);
	struct api_workpool_stats st;

	(void)state;
	gate_set(false);
	assert_non_null(p);
	api_workpool_stats(p, &st);
	assert_int_equal(st.threads, 0); /* started as needed */
	assert_int_equal(api_workpool_submit(p, gated_job, NULL), 0);
	assert_int_equal(api_workpool_submit(p, gated_job, NULL), 0);
	wait_running(p, 2);
	assert_int_equal(api_workpool_submit(p, gated_job, NULL), 0);
	assert_int_equal(api_workpool_submit(p, gated_job, NULL), -1);
	api_workpool_stats(p, &st);
	assert_int_equal(st.threads, 2);
	assert_int_equal(st.queued, 1);
	pthread_mutex_lock(&gate_lock);
	gate_open = true;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
	/* The waiting one runs as soon as a thread is free. */
	for (int i = 0; i < 500 && ran_now() < 3; i++)
		usleep(2000);
	api_workpool_free(p);
	assert_int_equal(ran, 3);
	assert_int_equal(cancelled, 0);
}

/* Stop cancels what waits and lets what runs finish. */
static void stop_cancels_the_queue(void **state)
{
	struct api_workpool *p = api_workpool_new(1, 4);

	(void)state;
	gate_set(false);
	assert_int_equal(api_workpool_submit(p, gated_job, NULL), 0);
	wait_running(p, 1);
	for (int i = 0; i < 3; i++)
		assert_int_equal(api_workpool_submit(p, gated_job, NULL), 0);
	api_workpool_stop(p);
	assert_int_equal(cancelled, 3);
	assert_int_equal(api_workpool_submit(p, gated_job, NULL), -1);
	pthread_mutex_lock(&gate_lock);
	gate_open = true;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
	api_workpool_free(p);
	assert_int_equal(ran, 1);
}

static void inflight_caps_per_account_and_kind(void **state)
{
	struct api_inflight *t = api_inflight_new();

	(void)state;
	assert_true(api_inflight_take(t, "acct_a", API_INFLIGHT_EXEC, 2));
	assert_true(api_inflight_take(t, "acct_a", API_INFLIGHT_EXEC, 2));
	assert_false(api_inflight_take(t, "acct_a", API_INFLIGHT_EXEC, 2));
	/* Other kinds and other accounts have their own counts. */
	assert_true(api_inflight_take(t, "acct_a", API_INFLIGHT_CREATE, 1));
	assert_false(api_inflight_take(t, "acct_a", API_INFLIGHT_CREATE, 1));
	assert_true(api_inflight_take(t, "acct_b", API_INFLIGHT_EXEC, 2));
	assert_int_equal(api_inflight_count(t, "acct_a", API_INFLIGHT_EXEC), 2);
	api_inflight_put(t, "acct_a", API_INFLIGHT_EXEC);
	assert_true(api_inflight_take(t, "acct_a", API_INFLIGHT_EXEC, 2));
	for (int i = 0; i < 2; i++)
		api_inflight_put(t, "acct_a", API_INFLIGHT_EXEC);
	api_inflight_put(t, "acct_a", API_INFLIGHT_CREATE);
	api_inflight_put(t, "acct_a", API_INFLIGHT_CREATE); /* one too many: ignored */
	assert_int_equal(api_inflight_count(t, "acct_a", API_INFLIGHT_CREATE), 0);
	assert_int_equal(api_inflight_count(t, "acct_b", API_INFLIGHT_EXEC), 1);
	api_inflight_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(pool_is_bounded),
	    cmocka_unit_test(stop_cancels_the_queue),
	    cmocka_unit_test(inflight_caps_per_account_and_kind),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
