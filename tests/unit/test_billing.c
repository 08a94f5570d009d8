/* billing/: the formula from API.md, USD text, settlement and the live
 * balance over a real SQLite store in a mkdtemp dir. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "billing/billing.h"
#include "store/store.h"
#include "util/util.h"

#define SMALL  90000 /* µ$/hour */
#define MEDIUM 280000
#define LARGE  550000

static void test_formula_examples(void **state)
{
	(void)state;
	/* API.md: small for 300.2 s -> 301 s -> 7525 µ$ */
	assert_int_equal(billing_cost(300200, SMALL), 7525);
	/* minimum one second; started seconds */
	assert_int_equal(billing_cost(0, SMALL), 25);
	assert_int_equal(billing_cost(-5, SMALL), 25);
	assert_int_equal(billing_cost(1, SMALL), 25);
	assert_int_equal(billing_cost(1000, SMALL), 25);
	assert_int_equal(billing_cost(1001, SMALL), 50);
	assert_int_equal(billing_cost(2000, SMALL), 50);
	/* outer ceil: medium is 77.78 µ$/s */
	assert_int_equal(billing_cost(1000, MEDIUM), 78);
	assert_int_equal(billing_cost(9000, MEDIUM), 700);  /* 9*280000/3600 = 700 exactly */
	assert_int_equal(billing_cost(10000, MEDIUM), 778); /* 777.7 -> 778 */
	assert_int_equal(billing_cost(3600 * 1000, LARGE), LARGE);
	assert_int_equal(billing_cost(3601 * 1000, LARGE), LARGE + 153); /* 152.7 -> 153 */
	assert_int_equal(billing_cost(24 * 3600 * 1000, SMALL), 24 * SMALL);
	assert_int_equal(billing_cost(1000, 0), 0);
	assert_int_equal(billing_cost(1000, 1), 1); /* ceil(1/3600) */
	/* no overflow: saturates instead of wrapping negative */
	assert_true(billing_cost(INT64_MAX, SMALL) > 0);
	assert_int_equal(billing_cost(INT64_MAX, INT64_MAX), INT64_MAX);
	assert_true(billing_cost(1000, INT64_MAX) > 0);
	/* the split computation equals the direct one where that fits */
	for (int64_t ms = 0; ms < 20 * 3600 * 1000; ms += 7777777) {
		int64_t secs = ms / 1000 + (ms % 1000 != 0);
		if (secs < 1)
			secs = 1;
		int64_t direct = (secs * MEDIUM + 3599) / 3600;
		assert_int_equal(billing_cost(ms, MEDIUM), direct);
	}
}

static void test_holds(void **state)
{
	(void)state;
	assert_int_equal(billing_hold_for_minutes(15, SMALL), 22500);
	assert_int_equal(billing_hold_for_minutes(1, MEDIUM), 4667); /* 4666.7 */
	assert_int_equal(billing_hold_for_minutes(1440, LARGE), 24 * LARGE);
	assert_int_equal(billing_hold_for_minutes(0, SMALL), 0);
	assert_int_equal(billing_hold_for_minutes(-3, SMALL), 0);
	assert_true(billing_hold_for_minutes(INT64_MAX, SMALL) > 0);
}

/* One-shot executions: started seconds (min 1) at the per-second price,
 * never more than the hold of the whole timeout. */
static void test_execution_cost(void **state)
{
	(void)state;
	assert_int_equal(billing_execution_hold(100, 30), 3000);
	assert_int_equal(billing_execution_hold(0, 30), 0);
	assert_int_equal(billing_execution_cost(0, 100, 30), 100); /* min 1 s */
	assert_int_equal(billing_execution_cost(1, 100, 30), 100);
	assert_int_equal(billing_execution_cost(1000, 100, 30), 100);
	assert_int_equal(billing_execution_cost(1001, 100, 30), 200); /* started */
	assert_int_equal(billing_execution_cost(29999, 100, 30), 3000);
	assert_int_equal(billing_execution_cost(45000, 100, 30), 3000); /* the hold */
	assert_int_equal(billing_execution_cost(UINT32_MAX, 1000000000, 3600),
			 billing_execution_hold(1000000000, 3600));
	assert_int_equal(billing_execution_cost(5000, 0, 30), 0);
}

static void test_charge_for_row(void **state)
{
	(void)state;
	struct store_sandbox r = {0};
	r.price_micro_per_hour = SMALL;
	r.status = STORE_CREATING;
	r.hold_micro = 22500;
	/* never ready: free */
	assert_int_equal(billing_charge_for_row(&r, 999999), 0);
	assert_int_equal(billing_cost_so_far(&r, 999999), 0);
	r.status = STORE_RUNNING;
	r.created_at_ms = 1000000;
	r.expires_at_ms = r.created_at_ms + 15 * 60000;
	assert_int_equal(billing_charge_for_row(&r, r.created_at_ms + 300200), 7525);
	/* capped at expires_at */
	assert_int_equal(billing_charge_for_row(&r, r.created_at_ms + 60 * 60000), 22500);
	/* ended before created (clock skew): the minimum second */
	assert_int_equal(billing_charge_for_row(&r, r.created_at_ms - 5), 25);
	/* running: cost so far is what ending now would charge */
	assert_int_equal(billing_cost_so_far(&r, r.created_at_ms + 300200), 7525);
	assert_int_equal(billing_cost_so_far(&r, r.created_at_ms + 99 * 60000), 22500);
	/* ended: the posted charge, whatever the time */
	r.status = STORE_DESTROYED;
	r.charge_micro = 1234;
	assert_int_equal(billing_cost_so_far(&r, INT64_MAX), 1234);
	r.status = STORE_ABORTED;
	assert_int_equal(billing_cost_so_far(&r, INT64_MAX), 0);
}

/* Storage of a paused sandbox: bytes x time x price per GiB-hour, rounded
 * up to a whole micro-USD. */
static void test_storage_cost(void **state)
{
	const int64_t gib = INT64_C(1) << 30, hour = 3600000;

	(void)state;
	assert_int_equal(billing_storage_cost(gib, hour, 1000), 1000);
	assert_int_equal(billing_storage_cost(2 * gib, hour / 2, 1000), 1000);
	assert_int_equal(billing_storage_cost(gib / 2, hour, 1000), 500);
	/* the smallest piece is one micro-USD, never 0 once something is kept */
	assert_int_equal(billing_storage_cost(1, 1, 1), 1);
	assert_int_equal(billing_storage_cost(gib, hour + 1, 1000), 1001);
	/* free when any factor is 0 (the default price) */
	assert_int_equal(billing_storage_cost(gib, hour, 0), 0);
	assert_int_equal(billing_storage_cost(0, hour, 1000), 0);
	assert_int_equal(billing_storage_cost(gib, 0, 1000), 0);
	assert_int_equal(billing_storage_cost(-1, hour, 1000), 0);
	/* no overflow: saturates */
	assert_int_equal(billing_storage_cost(INT64_MAX, INT64_MAX, INT64_MAX), INT64_MAX);
	assert_true(billing_storage_cost(INT64_MAX, hour, 1) > 0);
}

/* Egress: bytes x price per GB (10^9 bytes), rounded up. */
static void test_network_cost(void **state)
{
	(void)state;
	assert_int_equal(billing_network_cost(1000000000, 50000), 50000);
	assert_int_equal(billing_network_cost(1, 1), 1); /* rounded up */
	assert_int_equal(billing_network_cost(1500000000, 3), 5);
	assert_int_equal(billing_network_cost(123456789, 0), 0); /* the default price */
	assert_int_equal(billing_network_cost(0, 50000), 0);
	assert_int_equal(billing_network_cost(-5, 50000), 0);
	assert_int_equal(billing_network_cost(INT64_MAX, INT64_MAX), INT64_MAX);
}

/* A row's charge with pauses: runtime without the paused time, plus the
 * storage of each pause; the current pause stops runtime at paused_at. */
static void test_charge_with_pauses(void **state)
{
	struct store_sandbox r;
	const int64_t t = 1000000, gib = INT64_C(1) << 30;

	(void)state;
	memset(&r, 0, sizeof r);
	r.status = STORE_RUNNING;
	r.price_micro_per_hour = SMALL;
	r.created_at_ms = t;
	r.expires_at_ms = t + 15 * 60000;
	r.hold_micro = 22500;
	/* paused at +100 s: runtime stops there whatever the end */
	r.status = STORE_PAUSED;
	r.paused_at_ms = t + 100000;
	r.paused_bytes = gib;
	r.storage_price_micro = 3600; /* 1 µ$ per GiB-second */
	assert_int_equal(billing_charge_for_row(&r, t + 100000), billing_cost(100000, SMALL));
	assert_int_equal(billing_charge_for_row(&r, t + 160000), billing_cost(100000, SMALL) + 60);
	assert_int_equal(billing_cost_so_far(&r, t + 160000), billing_cost(100000, SMALL) + 60);
	assert_int_equal(billing_pause_cost(&r, t + 160000), 60);
	/* resumed at +160 s (what store_sandbox_resume writes): 60 s out of
	 * the runtime, expires_at 60 s later, the storage kept */
	r.status = STORE_RUNNING;
	r.paused_at_ms = 0;
	r.paused_ms = 60000;
	r.expires_at_ms += 60000;
	r.storage_micro = 60;
	assert_int_equal(billing_pause_cost(&r, t + 999999), 0);
	assert_int_equal(billing_charge_for_row(&r, t + 460200),
			 billing_cost(400200, SMALL) + 60); /* 401 s + storage */
	/* capped at the moved expiry: the whole timeout, never more */
	assert_int_equal(billing_charge_for_row(&r, t + 99 * 60000), 22500 + 60);
}

static void test_format_usd(void **state)
{
	(void)state;
	char buf[32];
	billing_format_usd(7525, buf);
	assert_string_equal(buf, "0.007525");
	billing_format_usd(0, buf);
	assert_string_equal(buf, "0.000000");
	billing_format_usd(1, buf);
	assert_string_equal(buf, "0.000001");
	billing_format_usd(10000000, buf);
	assert_string_equal(buf, "10.000000");
	billing_format_usd(-1500000, buf);
	assert_string_equal(buf, "-1.500000");
	billing_format_usd(INT64_MAX, buf);
	assert_string_equal(buf, "9223372036854.775807");
	billing_format_usd(INT64_MIN, buf);
	assert_string_equal(buf, "-9223372036854.775808");
}

static void test_parse_usd(void **state)
{
	(void)state;
	int64_t m = -1;
	assert_int_equal(billing_parse_usd("10", &m), 0);
	assert_int_equal(m, 10000000);
	assert_int_equal(billing_parse_usd("10.5", &m), 0);
	assert_int_equal(m, 10500000);
	assert_int_equal(billing_parse_usd("0.000001", &m), 0);
	assert_int_equal(m, 1);
	assert_int_equal(billing_parse_usd("0", &m), 0);
	assert_int_equal(m, 0);
	assert_int_equal(billing_parse_usd("007.250000", &m), 0);
	assert_int_equal(m, 7250000);
	assert_int_equal(billing_parse_usd("9223372036854.775807", &m), 0);
	assert_int_equal(m, INT64_MAX);
	m = 42;
	const char *bad[] = {"",
			     ".5",
			     "10.",
			     "-1",
			     "+1",
			     " 1",
			     "1 ",
			     "1e3",
			     "0.0000001",
			     "1.2.3",
			     "abc",
			     "1,5",
			     "0x10",
			     "1.-5",
			     "9223372036854.775808",
			     "99999999999999999999",
			     "NaN"};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		if (billing_parse_usd(bad[i], &m) != -1)
			fail_msg("accepted '%s'", bad[i]);
	}
	assert_int_equal(m, 42); /* untouched on failure */
	assert_int_equal(billing_parse_usd(NULL, &m), -1);
	/* round trip */
	char buf[32];
	for (int64_t v = 0; v < 5000000000; v += 123456789) {
		billing_format_usd(v, buf);
		assert_int_equal(billing_parse_usd(buf, &m), 0);
		assert_int_equal(m, v);
	}
}

/* ------------------------------------------------- over a real store */

struct fx {
	char dir[64];
	struct store *s;
	struct store_account a;
};

static int fx_setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	char path[96];
	snprintf(f->dir, sizeof f->dir, "/tmp/t-billing-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(path, sizeof path, "%s/db", f->dir);
	struct sbx_error err = {0};
	f->s = store_open(path, &err);
	if (!f->s || store_account_create(f->s, "carol", 5000000, &f->a, &err) < 0)
		return -1;
	*state = f;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *f = *state;
	char cmd[128];
	store_close(f->s);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
	if (system(cmd) != 0)
		return -1;
	free(f);
	return 0;
}

static void start(struct fx *f, int64_t t, int minutes, struct store_sandbox *r)
{
	struct sbx_error err = {0};
	memset(r, 0, sizeof *r);
	snprintf(r->account_id, sizeof r->account_id, "%s", f->a.id);
	snprintf(r->size, sizeof r->size, "small");
	r->timeout_minutes = minutes;
	r->price_micro_per_hour = SMALL;
	r->requested_at_ms = t;
	assert_int_equal(
	    store_sandbox_reserve(f->s, r, billing_hold_for_minutes(minutes, SMALL), 20, &err), 0);
	assert_int_equal(store_sandbox_activate(f->s, r->id, r->id, t, t + minutes * 60000LL, &err),
			 0);
}

static void assert_ledger_ok(struct fx *f, int64_t now);

/* A sandbox's network (migration 12) on real SQLite: its policy stored at
 * reserve and replaced while live (not once ended, not by another
 * account), its bytes counted while live only, and billed at the price
 * of its create exactly once, in the settle. */
static void test_network_settle(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	struct store_sandbox r, out;
	struct store_account other;
	int64_t t = 1700000000000, now = t + 300200;
	const char *pol = "{\"egress\":\"allow_list\",\"allow\":[\"a.test\"],\"deny\":[]}";

	memset(&r, 0, sizeof r);
	snprintf(r.account_id, sizeof r.account_id, "%s", f->a.id);
	snprintf(r.size, sizeof r.size, "small");
	snprintf(r.network, sizeof r.network, "%s", pol);
	r.timeout_minutes = 60;
	r.price_micro_per_hour = SMALL;
	r.requested_at_ms = t;
	r.net_price_micro_per_gb = 50000;
	assert_int_equal(
	    store_sandbox_reserve(f->s, &r, billing_hold_for_minutes(60, SMALL), 20, &err), 0);
	/* not live for the tenant while creating */
	assert_int_equal(store_sandbox_network_set(f->s, f->a.id, r.id, pol, &out, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_int_equal(store_sandbox_activate(f->s, r.id, r.id, t, t + 3600000LL, &err), 0);
	assert_int_equal(store_sandbox_get(f->s, f->a.id, r.id, &out, &err), 0);
	assert_string_equal(out.network, pol);
	assert_int_equal(out.net_price_micro_per_gb, 50000);
	assert_int_equal(
	    store_sandbox_network_set(f->s, f->a.id, r.id, STORE_NETWORK_NONE, &out, &err), 0);
	assert_string_equal(out.network, STORE_NETWORK_NONE);
	assert_int_equal(store_account_create(f->s, "mallory", 0, &other, &err), 0);
	sbx_error_clear(&err);
	assert_int_equal(store_sandbox_network_set(f->s, other.id, r.id, pol, &out, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	/* 0.6 GB in, 0.4 GB out: 1 GB at 50000 µ$ */
	assert_int_equal(store_sandbox_net_add(f->s, r.id, 600000000, 300000000, &err), 1);
	assert_int_equal(store_sandbox_net_add(f->s, r.id, 0, 100000000, &err), 1);
	assert_int_equal(store_sandbox_get(f->s, f->a.id, r.id, &out, &err), 0);
	assert_int_equal(out.net_bytes_in, 600000000);
	assert_int_equal(out.net_bytes_out, 400000000);
	assert_int_equal(billing_cost_so_far(&out, now), 7525 + 50000);
	assert_int_equal(billing_settle(f->s, r.id, STORE_DESTROYED, now, &out, &err), 1);
	assert_int_equal(out.charge_micro, 7525 + 50000);
	assert_ledger_ok(f, now);
	/* after the settle: no more bytes, no second charge, no change */
	assert_int_equal(store_sandbox_net_add(f->s, r.id, 5, 5, &err), 0);
	assert_int_equal(billing_settle(f->s, r.id, STORE_DESTROYED, now + 1000, &out, &err), 0);
	assert_int_equal(out.charge_micro, 7525 + 50000);
	assert_int_equal(out.net_bytes_in, 600000000);
	sbx_error_clear(&err);
	assert_int_equal(store_sandbox_network_set(f->s, f->a.id, r.id, pol, &out, &err), -1);
	assert_int_equal(err.code, SBX_E_SANDBOX_NOT_RUNNING);
	/* usage: in the period it ended in, not in another */
	{
		struct store_usage_snapshot u;
		int64_t h = t - t % 3600000; /* whole UTC hours */
		assert_int_equal(store_usage_snapshot(f->s, f->a.id, h, h + 7200000, 0, &u, &err),
				 0);
		assert_int_equal(u.net_bytes_in, 600000000);
		assert_int_equal(u.net_bytes_out, 400000000);
		store_usage_snapshot_release(&u);
		assert_int_equal(
		    store_usage_snapshot(f->s, f->a.id, h + 7200000, h + 10800000, 0, &u, &err), 0);
		assert_int_equal(u.net_bytes_in, 0);
		store_usage_snapshot_release(&u);
	}
	/* a reopen keeps the policy and the counts */
	{
		char path[96];
		store_close(f->s);
		snprintf(path, sizeof path, "%s/db", f->dir);
		f->s = store_open(path, &err);
		assert_non_null(f->s);
		assert_int_equal(store_sandbox_get(f->s, f->a.id, r.id, &out, &err), 0);
		assert_string_equal(out.network, STORE_NETWORK_NONE);
		assert_int_equal(out.net_bytes_out, 400000000);
	}
}

static void assert_ledger_ok(struct fx *f, int64_t now)
{
	struct sbx_error err = {0};
	if (store_ledger_check(f->s, NULL, &err) != 0)
		fail_msg("ledger: %s", err.message);
	struct store_balance b;
	assert_int_equal(billing_balance(f->s, f->a.id, now, &b, &err), 0);
	assert_int_equal(b.credits_micro, b.balance_micro + b.consumed_micro);
	assert_int_equal(b.available_micro, b.balance_micro - b.reserved_micro);
	assert_true(b.available_micro >= 0);
	assert_true(b.reserved_micro >= 0);
}

static void test_settle_and_balance(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	int64_t t = 1700000000000;
	struct store_sandbox r1, r2, out;
	start(f, t, 15, &r1);
	start(f, t + 1000, 60, &r2);
	int64_t held = 22500 + 90000;

	/* Live figures at t + 300.2 s: r1 accrued 7525, r2 accrued 299.2 s -> 300 s -> 7500. */
	int64_t now = t + 300200;
	struct store_balance b;
	assert_int_equal(billing_balance(f->s, f->a.id, now, &b, &err), 0);
	assert_int_equal(b.credits_micro, 5000000);
	assert_int_equal(b.consumed_micro, 7525 + 7500);
	assert_int_equal(b.balance_micro, 5000000 - 7525 - 7500);
	assert_int_equal(b.reserved_micro, held - 7525 - 7500);
	assert_int_equal(b.available_micro, 5000000 - held);
	assert_ledger_ok(f, now);

	/* Settle r1 at that moment: the settled figures equal the live ones. */
	assert_int_equal(billing_settle(f->s, r1.id, STORE_DESTROYED, now, &out, &err), 1);
	assert_int_equal(out.charge_micro, 7525);
	assert_int_equal(out.status, STORE_DESTROYED);
	struct store_balance b2;
	assert_int_equal(billing_balance(f->s, f->a.id, now, &b2, &err), 0);
	assert_int_equal(b2.consumed_micro, b.consumed_micro);
	assert_int_equal(b2.balance_micro, b.balance_micro);
	assert_int_equal(b2.available_micro, 5000000 - 90000 - 7525);
	/* Never twice. */
	assert_int_equal(billing_settle(f->s, r1.id, STORE_DESTROYED, now + 50000, &out, &err), 0);
	assert_int_equal(out.charge_micro, 7525);
	assert_int_equal(billing_cost_so_far(&out, now + 99999999), 7525);
	assert_ledger_ok(f, now);

	/* r2 left past its expiry: accrued stops at the hold, settles as expired. */
	int64_t late = t + 5 * 3600000LL;
	assert_int_equal(billing_balance(f->s, f->a.id, late, &b, &err), 0);
	assert_int_equal(b.consumed_micro, 7525 + 90000);
	assert_int_equal(b.reserved_micro, 0);
	assert_int_equal(billing_settle(f->s, r2.id, STORE_EXPIRED, late, &out, &err), 1);
	assert_int_equal(out.charge_micro, 90000);
	assert_int_equal(billing_balance(f->s, f->a.id, late, &b2, &err), 0);
	assert_int_equal(b2.consumed_micro, b.consumed_micro);
	assert_int_equal(b2.balance_micro, 5000000 - 7525 - 90000);
	assert_int_equal(b2.available_micro, b2.balance_micro);
	assert_ledger_ok(f, late);

	assert_int_equal(billing_balance(f->s, "acct_nope", late, &b, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
}

static void test_balance_many_running(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	int64_t t = 1700000000000;
	struct store_sandbox r;
	/* More running sandboxes than fit in one list page? Cap is 20; use all of them. */
	for (int i = 0; i < 20; i++)
		start(f, t + i, 15, &r);
	struct store_balance b;
	int64_t now = t + 10000 + 19; /* every one has run <= 10.019 s -> 11 s or 10 s */
	assert_int_equal(billing_balance(f->s, f->a.id, now, &b, &err), 0);
	int64_t expect = 0;
	for (int i = 0; i < 20; i++)
		expect += billing_cost(now - (t + i), SMALL);
	assert_int_equal(b.consumed_micro, expect);
	assert_int_equal(b.available_micro, 5000000 - 20 * 22500);
	assert_ledger_ok(f, now);
}

/* The store's pause and resume: one transaction each, billing switched
 * once each way, a storage hold checked against credit, ended paused
 * rows settled exactly; the ledger invariants after each step. */
static void test_pause_resume_ledger(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	const int64_t t = 1700000000000, gib = INT64_C(1) << 30;
	struct store_sandbox r, out;
	struct store_balance b;
	enum store_status paused = STORE_PAUSED, running = STORE_RUNNING;
	struct store_sandbox *rows = NULL;
	size_t n = 0;
	bool more;

	start(f, t, 15, &r);
	/* paused at +100 s with a storage hold of 1000 */
	assert_int_equal(store_sandbox_pause(f->s, r.id, t + 100000, gib, 3600, 1000, &out, &err),
			 1);
	assert_int_equal(out.status, STORE_PAUSED);
	assert_int_equal(out.hold_micro, 22500 + 1000);
	/* read back as paused; listed as paused, not running */
	assert_int_equal(store_sandbox_get(f->s, f->a.id, r.id, &out, &err), 0);
	assert_int_equal(out.status, STORE_PAUSED);
	assert_int_equal(
	    store_sandbox_list(f->s, f->a.id, &paused, 10, NULL, &rows, &n, &more, &err), 0);
	assert_int_equal(n, 1);
	free(rows);
	assert_int_equal(
	    store_sandbox_list(f->s, f->a.id, &running, 10, NULL, &rows, &n, &more, &err), 0);
	assert_int_equal(n, 0);
	free(rows);
	/* a second pause does nothing; extend is refused while paused */
	assert_int_equal(store_sandbox_pause(f->s, r.id, t + 110000, gib, 3600, 1000, &out, &err),
			 0);
	assert_int_equal(out.hold_micro, 22500 + 1000);
	assert_int_equal(store_sandbox_extend(f->s, f->a.id, r.id, t + 99 * 60000, 10, &err), -1);
	assert_int_equal(err.code, SBX_E_SANDBOX_PAUSED);
	/* the accrued cost does not move while paused (beyond storage) */
	assert_int_equal(billing_balance(f->s, f->a.id, t + 160000, &b, &err), 0);
	assert_int_equal(b.consumed_micro, billing_cost(100000, SMALL) + 60);
	assert_ledger_ok(f, t + 160000);
	/* resumed at +160 s: 60 s paused, expiry moved, 60 µ$ of storage */
	assert_int_equal(
	    store_sandbox_resume(f->s, r.id, t + 160000, billing_pause_cost, 0, 0, &out, &err), 1);
	assert_int_equal(out.status, STORE_RUNNING);
	assert_int_equal(out.paused_ms, 60000);
	assert_int_equal(out.storage_micro, 60);
	assert_int_equal(out.expires_at_ms, t + 15 * 60000 + 60000);
	assert_int_equal(
	    store_sandbox_resume(f->s, r.id, t + 170000, billing_pause_cost, 0, 0, &out, &err), 0);
	assert_int_equal(out.paused_ms, 60000);
	assert_ledger_ok(f, t + 170000);
	/* a storage hold the account cannot cover: 402, still running */
	assert_int_equal(
	    store_sandbox_pause(f->s, r.id, t + 200000, gib, 3600, 999999999, &out, &err), -1);
	assert_int_equal(err.code, SBX_E_INSUFFICIENT_CREDIT);
	assert_int_equal(store_sandbox_get(f->s, f->a.id, r.id, &out, &err), 0);
	assert_int_equal(out.status, STORE_RUNNING);
	/* paused again at +400.2 s and deleted at +500 s while paused: one
	 * charge, 400.2 - 60 = 340.2 s of runtime + 60 + 99.8 s of storage */
	assert_int_equal(store_sandbox_pause(f->s, r.id, t + 400200, gib, 3600, 1000, &out, &err),
			 1);
	assert_int_equal(billing_settle(f->s, r.id, STORE_DESTROYED, t + 500000, &out, &err), 1);
	assert_int_equal(out.charge_micro, billing_cost(340200, SMALL) + 60 + 100);
	assert_int_equal(billing_settle(f->s, r.id, STORE_DESTROYED, t + 600000, &out, &err), 0);
	assert_ledger_ok(f, t + 600000);
	assert_int_equal(billing_balance(f->s, f->a.id, t + 600000, &b, &err), 0);
	assert_int_equal(b.reserved_micro, 0);
	assert_int_equal(b.consumed_micro, billing_cost(340200, SMALL) + 160);
}

/* timeout_action "pause": paused at its expiry, resumed 5 min later with
 * 10 more minutes; the added time is held in the resume's transaction, a
 * hold the account cannot make leaves it paused, and the one charge is
 * 25 min of runtime plus the storage of the pause. */
static void test_resume_grants_time(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	const int64_t t = 1700000000000, gib = INT64_C(1) << 30, min = 60000;
	const int64_t exp = t + 15 * min, back = exp + 5 * min;
	struct store_sandbox r, out;
	struct store_balance b;

	start(f, t, 15, &r);
	assert_int_equal(store_sandbox_pause(f->s, r.id, exp, gib, 3600, 1000, &out, &err), 1);
	/* more than the balance: refused, nothing written */
	assert_int_equal(store_sandbox_resume(f->s, r.id, back, billing_pause_cost, back + 10 * min,
					      INT64_C(1) << 50, &out, &err),
			 -1);
	assert_int_equal(err.code, SBX_E_INSUFFICIENT_CREDIT);
	assert_int_equal(store_sandbox_get(f->s, f->a.id, r.id, &out, &err), 0);
	assert_int_equal(out.status, STORE_PAUSED);
	assert_int_equal(out.hold_micro, 22500 + 1000);
	/* granted: expiry 10 min from the resume, its cost held */
	assert_int_equal(store_sandbox_resume(f->s, r.id, back, billing_pause_cost, back + 10 * min,
					      billing_cost(10 * min, SMALL), &out, &err),
			 1);
	assert_int_equal(out.status, STORE_RUNNING);
	assert_int_equal(out.expires_at_ms, back + 10 * min);
	assert_int_equal(out.paused_ms, 5 * min);
	assert_int_equal(out.hold_micro, 22500 + 1000 + billing_cost(10 * min, SMALL));
	assert_ledger_ok(f, back);
	/* an expiry earlier than the time it has left changes nothing */
	assert_int_equal(store_sandbox_pause(f->s, r.id, back + min, gib, 3600, 0, &out, &err), 1);
	assert_int_equal(store_sandbox_resume(f->s, r.id, back + 2 * min, billing_pause_cost,
					      back + 3 * min, 999, &out, &err),
			 1);
	assert_int_equal(out.expires_at_ms, back + 11 * min);
	assert_int_equal(out.hold_micro, 22500 + 1000 + billing_cost(10 * min, SMALL));
	/* expired at its new expiry: 15 + 1 + 9 min of runtime, 5 + 1 min stored */
	assert_int_equal(billing_settle(f->s, r.id, STORE_EXPIRED, back + 11 * min, &out, &err), 1);
	assert_int_equal(out.charge_micro,
			 billing_cost(25 * min, SMALL) + billing_storage_cost(gib, 6 * min, 3600));
	assert_ledger_ok(f, back + 11 * min);
	assert_int_equal(billing_balance(f->s, f->a.id, back + 11 * min, &b, &err), 0);
	assert_int_equal(b.reserved_micro, 0);
}

int main(void)
{
	sbx_log_set_level(SBX_LOG_ERROR);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_formula_examples),
	    cmocka_unit_test(test_holds),
	    cmocka_unit_test(test_execution_cost),
	    cmocka_unit_test(test_charge_for_row),
	    cmocka_unit_test(test_format_usd),
	    cmocka_unit_test(test_parse_usd),
	    cmocka_unit_test_setup_teardown(test_settle_and_balance, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_balance_many_running, fx_setup, fx_teardown),
	    cmocka_unit_test(test_storage_cost),
	    cmocka_unit_test(test_network_cost),
	    cmocka_unit_test_setup_teardown(test_network_settle, fx_setup, fx_teardown),
	    cmocka_unit_test(test_charge_with_pauses),
	    cmocka_unit_test_setup_teardown(test_pause_resume_ledger, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_resume_grants_time, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
