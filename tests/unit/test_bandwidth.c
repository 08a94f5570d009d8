/* Unit tests of a sandbox's bandwidth (sandbox/bandwidth.c) with no
 * guest: one bucket per sandbox id, shared by its users and freed by the
 * last; what a take gives (the starting buffer, then nothing, then the
 * rate's worth) and a refund; the waker calls a listed waiter once the
 * bucket has had time to refill, and a cancelled one never. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "sandbox/sandbox-priv.h"
#include "util/util.h"

#define RATE 1000000 /* bytes per second */

static struct sandbox_svc svc;

static int setup(void **state)
{
	(void)state;
	memset(&svc, 0, sizeof svc);
	svc.cfg.net_bandwidth_bytes_per_s = RATE;
	return sandbox_bw_init(&svc);
}

static int teardown(void **state)
{
	(void)state;
	sandbox_bw_free(&svc);
	return 0;
}

/* Two users of one sandbox share its bucket: what one takes the other
 * does not get; another sandbox has its own. */
static void shared_per_sandbox(void **state)
{
	struct sandbox_bucket *a = sandbox_bucket_get(&svc, "sbx_a");
	struct sandbox_bucket *a2 = sandbox_bucket_get(&svc, "sbx_a");
	struct sandbox_bucket *b = sandbox_bucket_get(&svc, "sbx_b");
	int wait = 5000;
	size_t got;

	(void)state;
	assert_non_null(a);
	assert_ptr_equal(a, a2);
	assert_ptr_not_equal(a, b);
	/* it starts with one buffer (64 KiB): all of it, then nothing */
	got = sandbox_bucket_take(&svc, a, 1u << 20, &wait);
	assert_true(got >= 65536 && got < 65536 + RATE / 100);
	assert_int_equal(wait, 5000);
	assert_true(sandbox_bucket_take(&svc, a2, 1u << 20, &wait) < RATE / 100);
	/* the other sandbox is untouched */
	assert_true(sandbox_bucket_take(&svc, b, 1u << 20, NULL) >= 65536);
	/* a refund is there for the next take */
	sandbox_bucket_refund(&svc, a, 30000);
	assert_true(sandbox_bucket_take(&svc, a2, 30000, NULL) == 30000);
	/* empty: the wait is about when 4 KiB come back (RATE: ~5 ms) */
	(void)sandbox_bucket_take(&svc, a, 1u << 20, NULL);
	wait = 5000;
	if (sandbox_bucket_take(&svc, a, 1u << 20, &wait) == 0)
		assert_true(wait > 0 && wait <= 1000);
	/* after a tenth of a second, a tenth of the rate (and not much more) */
	usleep(100 * 1000);
	got = sandbox_bucket_take(&svc, a, 1u << 20, NULL);
	assert_true(got >= RATE / 20 && got <= RATE / 4 + 65536);
	sandbox_bucket_put(&svc, a);
	sandbox_bucket_put(&svc, a2);
	sandbox_bucket_put(&svc, b);
	/* the last put freed it: a new one starts full again */
	a = sandbox_bucket_get(&svc, "sbx_a");
	assert_true(sandbox_bucket_take(&svc, a, 1u << 20, NULL) >= 65536);
	sandbox_bucket_put(&svc, a);
}

static int calls;

static void count(void *opaque)
{
	(void)opaque;
	__atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
}

/* A listed waiter is called once (listing it twice before it is due is
 * one call); a cancelled one is not called. */
static void waker_calls_once_and_cancel_holds(void **state)
{
	struct sandbox_bw_waiter w = {.fn = count}, c = {.fn = count};

	(void)state;
	calls = 0;
	sandbox_bw_wake_later(&svc, &w);
	sandbox_bw_wake_later(&svc, &w);
	for (int i = 0; i < 200 && __atomic_load_n(&calls, __ATOMIC_SEQ_CST) == 0; i++)
		usleep(10 * 1000);
	usleep(50 * 1000);
	assert_int_equal(__atomic_load_n(&calls, __ATOMIC_SEQ_CST), 1);
	assert_false(w.listed);
	sandbox_bw_cancel(&svc, &w); /* not listed: a no-op */

	sandbox_bw_wake_later(&svc, &c);
	sandbox_bw_cancel(&svc, &c);
	assert_false(c.listed);
	usleep(100 * 1000); /* well past its due time (~5 ms) */
	assert_int_equal(__atomic_load_n(&calls, __ATOMIC_SEQ_CST), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(shared_per_sandbox, setup, teardown),
	    cmocka_unit_test_setup_teardown(waker_calls_once_and_cancel_holds, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
