/* api/inflight.c: the per-account counts of long requests. (The bounded
 * pool they run on is util's sbx_workpool: tests/unit/test_work.c, which
 * holds this file's former pool tests, pool_is_bounded and
 * pool_stop_cancels_the_queue.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <unistd.h>

#include "api/api-priv.h"

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
	    cmocka_unit_test(inflight_caps_per_account_and_kind),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
