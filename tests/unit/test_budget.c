/* Unit tests of the output budget (sandbox/budget.c) with no service and
 * no guest: a first charge (reserve) and later ones (grow) within the
 * account's and the host's caps, forced past them, shrink to the floor,
 * release, an account's entry freed at 0, the caller's words in the
 * 429/503, and concurrent charges and releases (make tsan). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "sandbox/sandbox.h"
#include "util/util.h"

#define MIB (1ull << 20)

static const struct sandbox_output_words words = {
    .account = "account over its budget (%llu MiB); wait",
    .host = "host buffering too much; retry",
};

/* A first charge reserves: the hold, its account and the host hold it;
 * later charges grow it; release gives all back and the account's entry
 * goes. */
static void test_reserve_grow_release(void **state)
{
	struct sandbox_output_budget *b = sandbox_output_budget_new(2 * MIB, 4 * MIB);
	struct sandbox_output_hold h1, h2;
	struct sbx_error err;
	uint64_t host, acct;

	(void)state;
	assert_non_null(b);
	sandbox_output_hold_init(&h1, b, "acct_a");
	sandbox_output_hold_init(&h2, b, "acct_a");
	sbx_error_clear(&err);
	assert_int_equal(sandbox_output_charge(&h1, 1000, SANDBOX_OUTPUT_WITHIN, &words, &err), 0);
	assert_int_equal(err.code, SBX_OK);
	assert_int_equal(h1.bytes, 1000);
	assert_int_equal(sandbox_output_charge(&h1, 500, SANDBOX_OUTPUT_WITHIN, NULL, NULL), 0);
	assert_int_equal(sandbox_output_charge(&h2, 300, SANDBOX_OUTPUT_WITHIN, &words, &err), 0);
	assert_int_equal(sandbox_output_charge(&h2, 0, SANDBOX_OUTPUT_WITHIN, NULL, NULL), 0);
	assert_int_equal(sandbox_output_held(b, "acct_a", &host, &acct), 1);
	assert_int_equal(host, 1800);
	assert_int_equal(acct, 1800);
	assert_int_equal(h1.bytes, 1500);

	sandbox_output_release(&h1);
	assert_int_equal(h1.bytes, 0);
	assert_int_equal(sandbox_output_held(b, "acct_a", &host, &acct), 1);
	assert_int_equal(host, 300);
	assert_int_equal(acct, 300);
	sandbox_output_release(&h1); /* twice: nothing */
	sandbox_output_release(&h2);
	/* at 0 the account's entry is freed */
	assert_int_equal(sandbox_output_held(b, "acct_a", &host, &acct), 0);
	assert_int_equal(host, 0);
	assert_int_equal(acct, 0);
	/* a released hold may be charged again */
	assert_int_equal(sandbox_output_charge(&h1, 10, SANDBOX_OUTPUT_WITHIN, &words, &err), 0);
	assert_int_equal(sandbox_output_held(b, "acct_a", &host, &acct), 1);
	assert_int_equal(acct, 10);
	sandbox_output_release(&h1);
	assert_int_equal(sandbox_output_held(b, NULL, &host, NULL), 0);
	sandbox_output_budget_free(b);
}

/* Past the account's cap: 429 in the caller's words (its MiB filled in),
 * Retry-After 1, nothing held; another account is served. */
static void test_account_cap(void **state)
{
	struct sandbox_output_budget *b = sandbox_output_budget_new(2 * MIB, 4 * MIB);
	struct sandbox_output_hold a1, a2, o;
	struct sbx_error err;
	uint64_t host, acct;

	(void)state;
	sandbox_output_hold_init(&a1, b, "acct_a");
	sandbox_output_hold_init(&a2, b, "acct_a");
	sandbox_output_hold_init(&o, b, "acct_b");
	assert_int_equal(
	    sandbox_output_charge(&a1, 2 * MIB - 10, SANDBOX_OUTPUT_WITHIN, &words, NULL), 0);
	sbx_error_clear(&err);
	assert_int_equal(sandbox_output_charge(&a2, 11, SANDBOX_OUTPUT_WITHIN, &words, &err), -1);
	assert_int_equal(err.code, SBX_E_RATE_LIMITED);
	assert_int_equal(err.retry_after_s, 1);
	assert_string_equal(err.message, "account over its budget (2 MiB); wait");
	assert_int_equal(a2.bytes, 0);
	/* exactly at the cap is within it */
	assert_int_equal(sandbox_output_charge(&a2, 10, SANDBOX_OUTPUT_WITHIN, &words, &err), 0);
	/* a grow past it fails without words; forced it passes */
	assert_int_equal(sandbox_output_charge(&a1, 1, SANDBOX_OUTPUT_WITHIN, NULL, NULL), -1);
	assert_int_equal(sandbox_output_charge(&a1, 1, SANDBOX_OUTPUT_FORCE, NULL, NULL), 0);
	assert_int_equal(sandbox_output_held(b, "acct_a", &host, &acct), 1);
	assert_int_equal(acct, 2 * MIB + 1);
	assert_int_equal(sandbox_output_charge(&o, MIB, SANDBOX_OUTPUT_WITHIN, &words, &err), 0);
	assert_int_equal(sandbox_output_held(b, "acct_b", &host, &acct), 2);
	assert_int_equal(acct, MIB);
	assert_int_equal(host, 3 * MIB + 1);
	sandbox_output_release(&a1);
	sandbox_output_release(&a2);
	sandbox_output_release(&o);
	assert_int_equal(sandbox_output_held(b, NULL, &host, NULL), 0);
	assert_int_equal(host, 0);
	sandbox_output_budget_free(b);
}

/* Past the host's cap (each account within its own): 503 in the caller's
 * words, Retry-After 1; the account's cap is checked first. */
static void test_host_cap(void **state)
{
	struct sandbox_output_budget *b = sandbox_output_budget_new(2 * MIB, 3 * MIB);
	struct sandbox_output_hold h[3];
	struct sbx_error err;
	uint64_t host;
	const struct sandbox_output_words plain = {.account = "plain account", .host = "plain"};

	(void)state;
	sandbox_output_hold_init(&h[0], b, "acct_a");
	sandbox_output_hold_init(&h[1], b, "acct_b");
	sandbox_output_hold_init(&h[2], b, "acct_c");
	assert_int_equal(sandbox_output_charge(&h[0], 2 * MIB, SANDBOX_OUTPUT_WITHIN, &words, NULL),
			 0);
	assert_int_equal(sandbox_output_charge(&h[1], MIB, SANDBOX_OUTPUT_WITHIN, &words, NULL), 0);
	sbx_error_clear(&err);
	assert_int_equal(sandbox_output_charge(&h[2], 1, SANDBOX_OUTPUT_WITHIN, &words, &err), -1);
	assert_int_equal(err.code, SBX_E_SERVICE_UNAVAILABLE);
	assert_int_equal(err.retry_after_s, 1);
	assert_string_equal(err.message, "host buffering too much; retry");
	/* the account's cap first: 429, in words without a "%llu" */
	sbx_error_clear(&err);
	assert_int_equal(
	    sandbox_output_charge(&h[2], 2 * MIB + 1, SANDBOX_OUTPUT_WITHIN, &plain, &err), -1);
	assert_int_equal(err.code, SBX_E_RATE_LIMITED);
	assert_string_equal(err.message, "plain account");
	/* the refused account holds nothing: no entry */
	assert_int_equal(sandbox_output_held(b, "acct_c", &host, NULL), 2);
	/* forced past the host's cap */
	assert_int_equal(sandbox_output_charge(&h[2], 5, SANDBOX_OUTPUT_FORCE, &words, &err), 0);
	assert_int_equal(sandbox_output_held(b, NULL, &host, NULL), 3);
	assert_int_equal(host, 3 * MIB + 5);
	sandbox_output_release(&h[1]);
	assert_int_equal(sandbox_output_charge(&h[1], MIB - 5, SANDBOX_OUTPUT_WITHIN, &words, &err),
			 0);
	for (int i = 0; i < 3; i++)
		sandbox_output_release(&h[i]);
	assert_int_equal(sandbox_output_held(b, NULL, &host, NULL), 0);
	sandbox_output_budget_free(b);
}

/* A shrink never goes below the first charge (the floor); a zeroed hold
 * cannot be charged and releases nothing. */
static void test_shrink_floor(void **state)
{
	struct sandbox_output_budget *b = sandbox_output_budget_new(MIB, MIB);
	struct sandbox_output_hold h, zero;
	struct sbx_error err;
	uint64_t host, acct;

	(void)state;
	sandbox_output_hold_init(&h, b, "acct_a");
	assert_int_equal(
	    sandbox_output_charge(&h, SANDBOX_EXEC_HOLD_START, SANDBOX_OUTPUT_WITHIN, &words, NULL),
	    0);
	assert_int_equal(sandbox_output_charge(&h, 1000, SANDBOX_OUTPUT_WITHIN, NULL, NULL), 0);
	sandbox_output_shrink(&h, 400);
	assert_int_equal(h.bytes, SANDBOX_EXEC_HOLD_START + 600);
	sandbox_output_shrink(&h, 5000);
	assert_int_equal(h.bytes, SANDBOX_EXEC_HOLD_START);
	assert_int_equal(sandbox_output_held(b, "acct_a", &host, &acct), 1);
	assert_int_equal(acct, SANDBOX_EXEC_HOLD_START);
	assert_int_equal(host, SANDBOX_EXEC_HOLD_START);
	sandbox_output_release(&h);
	assert_int_equal(sandbox_output_held(b, "acct_a", &host, &acct), 0);

	memset(&zero, 0, sizeof(zero));
	sbx_error_clear(&err);
	assert_int_equal(sandbox_output_charge(&zero, 10, SANDBOX_OUTPUT_FORCE, &words, &err), -1);
	sandbox_output_shrink(&zero, 10);
	sandbox_output_release(&zero);
	sandbox_output_release(NULL);
	assert_int_equal(sandbox_output_held(b, NULL, &host, NULL), 0);
	assert_int_equal(host, 0);
	sandbox_output_budget_free(b);
}

/* Many threads reserve, grow, shrink and release on a few accounts at
 * once; within-charges never pass the caps and all comes back to 0. */
#define WORKERS 4
#define ROUNDS	20000

struct worker {
	struct sandbox_output_budget *b;
	int n;
	int over; /* a figure seen past a cap */
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	static const char *const ids[] = {"acct_a", "acct_b", "acct_c"};
	struct sandbox_output_hold h[2];
	uint64_t host, acct;

	for (int i = 0; i < ROUNDS; i++) {
		const char *id = ids[(i + w->n) % 3];

		sandbox_output_hold_init(&h[0], w->b, id);
		sandbox_output_hold_init(&h[1], w->b, ids[(i + w->n + 1) % 3]);
		if (sandbox_output_charge(&h[0], 600, SANDBOX_OUTPUT_WITHIN, &words, NULL) == 0)
			sandbox_output_charge(&h[0], 500, SANDBOX_OUTPUT_WITHIN, NULL, NULL);
		sandbox_output_charge(&h[1], 300, SANDBOX_OUTPUT_WITHIN, &words, NULL);
		sandbox_output_shrink(&h[0], 200);
		sandbox_output_held(w->b, id, &host, &acct);
		w->over += host > 3000 || acct > 2000;
		sandbox_output_release(&h[i % 2]);
		sandbox_output_release(&h[(i + 1) % 2]);
	}
	return NULL;
}

static void test_concurrent(void **state)
{
	struct sandbox_output_budget *b = sandbox_output_budget_new(2000, 3000);
	struct worker w[WORKERS];
	pthread_t t[WORKERS];
	uint64_t host;

	(void)state;
	for (int i = 0; i < WORKERS; i++) {
		w[i] = (struct worker){.b = b, .n = i};
		assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
	}
	for (int i = 0; i < WORKERS; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(w[i].over, 0);
	}
	assert_int_equal(sandbox_output_held(b, NULL, &host, NULL), 0);
	assert_int_equal(host, 0);
	sandbox_output_budget_free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_reserve_grow_release),
	    cmocka_unit_test(test_account_cap),
	    cmocka_unit_test(test_host_cap),
	    cmocka_unit_test(test_shrink_floor),
	    cmocka_unit_test(test_concurrent),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
