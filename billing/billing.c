/* billing: the per-second formula, holds, settlement and USD text, in
 * integer micro-USD only (no floating point anywhere near money). Every
 * product that could overflow int64 saturates at INT64_MAX instead.
 */
#include "billing.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define MOD		   "billing"
#define BILLING_MS_PER_S   1000
#define BILLING_S_PER_HOUR 3600

static int64_t billing_mul_sat(int64_t a, int64_t b)
{
	int64_t r;
	if (__builtin_mul_overflow(a, b, &r))
		return INT64_MAX;
	return r;
}

static int64_t billing_add_sat(int64_t a, int64_t b)
{
	int64_t r;
	if (__builtin_add_overflow(a, b, &r))
		return INT64_MAX;
	return r;
}

int64_t billing_cost(int64_t runtime_ms, int64_t price_micro_per_hour)
{
	if (price_micro_per_hour <= 0)
		return 0;
	if (runtime_ms < 0)
		runtime_ms = 0;
	/* Started seconds, at least one. */
	int64_t secs = runtime_ms / BILLING_MS_PER_S + (runtime_ms % BILLING_MS_PER_S != 0);
	if (secs < 1)
		secs = 1;
	/* ceil(secs * price / 3600) without forming secs * price: split secs
	 * into whole hours and the rest (< 3600), so only rest * price can
	 * get large, and that only for absurd prices (saturated). */
	int64_t hours = secs / BILLING_S_PER_HOUR;
	int64_t rest = secs % BILLING_S_PER_HOUR;
	int64_t part = billing_mul_sat(rest, price_micro_per_hour);
	if (part == INT64_MAX)
		return INT64_MAX;
	int64_t rest_cost = part / BILLING_S_PER_HOUR + (part % BILLING_S_PER_HOUR != 0);
	return billing_add_sat(billing_mul_sat(hours, price_micro_per_hour), rest_cost);
}

int64_t billing_hold_for_minutes(int64_t minutes, int64_t price_micro_per_hour)
{
	if (minutes <= 0)
		return 0;
	return billing_cost(billing_mul_sat(minutes, 60 * BILLING_MS_PER_S), price_micro_per_hour);
}

int64_t billing_execution_hold(int64_t price_micro_per_second, int timeout_seconds)
{
	return price_micro_per_second * timeout_seconds;
}

int64_t billing_execution_cost(uint32_t host_ms, int64_t price_micro_per_second,
			       int timeout_seconds)
{
	int64_t seconds = SBX_MAX((int64_t)1, ((int64_t)host_ms + 999) / 1000);

	return SBX_MIN(seconds * price_micro_per_second,
		       billing_execution_hold(price_micro_per_second, timeout_seconds));
}

int64_t billing_storage_cost(int64_t bytes, int64_t ms, int64_t price_micro_per_gib_hour)
{
	if (bytes <= 0 || ms <= 0 || price_micro_per_gib_hour <= 0)
		return 0;
	/* ceil(bytes * ms * price / (GiB * ms per hour)) in 128 bits:
	 * each factor is below 2^63, so the product of two fits, and the
	 * third is applied after a division only when it would overflow. */
	const unsigned __int128 den = (unsigned __int128)(INT64_C(1) << 30) * 3600000u;
	unsigned __int128 a = (unsigned __int128)bytes * (uint64_t)ms;
	unsigned __int128 lim = ~(unsigned __int128)0 / (uint64_t)price_micro_per_gib_hour;
	if (a > lim)
		return INT64_MAX;
	unsigned __int128 num = a * (uint64_t)price_micro_per_gib_hour;
	unsigned __int128 q = num / den + (num % den != 0);
	return q > (unsigned __int128)INT64_MAX ? INT64_MAX : (int64_t)q;
}

int64_t billing_network_cost(int64_t bytes, int64_t price_micro_per_gb)
{
	if (bytes <= 0 || price_micro_per_gb <= 0)
		return 0;
	unsigned __int128 num = (unsigned __int128)bytes * (uint64_t)price_micro_per_gb;
	unsigned __int128 q = num / 1000000000u + (num % 1000000000u != 0);
	return q > (unsigned __int128)INT64_MAX ? INT64_MAX : (int64_t)q;
}

int64_t billing_pause_cost(const struct store_sandbox *row, int64_t at_ms)
{
	if (!row || row->paused_at_ms <= 0 || at_ms <= row->paused_at_ms)
		return 0;
	return billing_storage_cost(row->paused_bytes, at_ms - row->paused_at_ms,
				    row->storage_price_micro);
}

int64_t billing_charge_for_row(const struct store_sandbox *row, int64_t ended_at_ms)
{
	if (!row || row->created_at_ms <= 0)
		return 0;
	int64_t end = ended_at_ms;
	if (row->expires_at_ms > 0 && end > row->expires_at_ms)
		end = row->expires_at_ms;
	/* runtime stops at a pause (the row's expiry is the one before it,
	 * later than the pause) and its time is not runtime */
	if (row->paused_at_ms > 0 && end > row->paused_at_ms)
		end = row->paused_at_ms;
	int64_t runtime = end - row->created_at_ms - row->paused_ms;
	if (runtime < 0)
		runtime = 0;
	int64_t c = billing_cost(runtime, row->price_micro_per_hour);
	c = billing_add_sat(c, row->storage_micro);
	c = billing_add_sat(
	    c, billing_network_cost(billing_add_sat(row->net_bytes_in, row->net_bytes_out),
				    row->net_price_micro_per_gb));
	return billing_add_sat(c, billing_pause_cost(row, ended_at_ms));
}

int64_t billing_cost_so_far(const struct store_sandbox *row, int64_t now_ms)
{
	if (!row)
		return 0;
	switch (row->status) {
	case STORE_DESTROYED:
	case STORE_EXPIRED:
	case STORE_FAILED:
		return row->charge_micro;
	case STORE_RUNNING:
	case STORE_PAUSED: {
		/* What store_sandbox_end would post now: capped at the hold. */
		int64_t c = billing_charge_for_row(row, now_ms);
		return c > row->hold_micro ? row->hold_micro : c;
	}
	case STORE_CREATING:
	case STORE_ABORTED:
	default:
		return 0;
	}
}

void billing_format_usd(int64_t micro, char buf[static 32])
{
	uint64_t m = micro < 0 ? (uint64_t)0 - (uint64_t)micro : (uint64_t)micro;
	snprintf(buf, 32, "%s%" PRIu64 ".%06" PRIu64, micro < 0 ? "-" : "", m / 1000000,
		 m % 1000000);
}

int billing_parse_usd(const char *s, int64_t *micro)
{
	if (!s || !micro)
		return -1;
	const char *p = s;
	int64_t whole = 0;
	size_t ndigits = 0;
	for (; *p >= '0' && *p <= '9'; p++, ndigits++) {
		if (__builtin_mul_overflow(whole, 10, &whole) ||
		    __builtin_add_overflow(whole, *p - '0', &whole))
			return -1;
	}
	if (ndigits == 0)
		return -1; /* "", ".5", "-1", " 1" */
	int64_t frac = 0;
	if (*p == '.') {
		p++;
		size_t nfrac = 0;
		for (; *p >= '0' && *p <= '9'; p++, nfrac++) {
			if (nfrac == 6)
				return -1; /* more than micro-USD precision */
			frac = frac * 10 + (*p - '0');
		}
		if (nfrac == 0)
			return -1; /* "10." */
		for (; nfrac < 6; nfrac++)
			frac *= 10;
	}
	if (*p != '\0')
		return -1;
	int64_t r;
	if (__builtin_mul_overflow(whole, 1000000, &r) || __builtin_add_overflow(r, frac, &r))
		return -1;
	*micro = r;
	return 0;
}

int billing_settle(struct store *s, const char *sandbox_id, enum store_status status,
		   int64_t ended_at_ms, struct store_sandbox *out, struct sbx_error *err)
{
	return store_sandbox_end(s, sandbox_id, status, ended_at_ms, billing_charge_for_row, out,
				 err);
}

/* Take accrued cost out of the balance and the reserve, as if settled. */
static void billing_balance_add_accrued(struct store_balance *b, int64_t accrued)
{
	b->consumed_micro += accrued;
	b->balance_micro -= accrued;
	b->reserved_micro -= accrued;
	b->available_micro = b->balance_micro - b->reserved_micro;
}

void billing_balance_accrue(struct store_balance *b, const struct store_sandbox *running, size_t n,
			    int64_t now_ms)
{
	int64_t accrued = 0;
	for (size_t i = 0; i < n; i++)
		accrued = billing_add_sat(accrued, billing_cost_so_far(&running[i], now_ms));
	billing_balance_add_accrued(b, accrued);
}

int billing_balance(struct store *s, const char *account_id, int64_t now_ms,
		    struct store_balance *out, struct sbx_error *err)
{
	struct store_balance b;
	if (store_balance_get(s, account_id, &b, err) < 0)
		return -1;
	/* Accrued cost of running sandboxes, a page at a time. Read after the
	 * ledger: a sandbox that ends in between is briefly under-counted,
	 * never counted twice. */
	int64_t accrued = 0;
	static const enum store_status live[] = {STORE_RUNNING, STORE_PAUSED};
	for (size_t k = 0; k < SBX_ARRAY_SIZE(live); k++) {
		char after[STORE_ID_MAX] = "";
		for (;;) {
			_cleanup_free_ struct store_sandbox *rows = NULL;
			size_t n = 0;
			bool more = false;
			if (store_sandbox_list(s, account_id, &live[k], 100, *after ? after : NULL,
					       &rows, &n, &more, err) < 0)
				return -1;
			for (size_t i = 0; i < n; i++)
				accrued =
				    billing_add_sat(accrued, billing_cost_so_far(&rows[i], now_ms));
			if (!more || n == 0)
				break;
			snprintf(after, sizeof after, "%s", rows[n - 1].id);
		}
	}
	billing_balance_add_accrued(&b, accrued);
	*out = b;
	return 0;
}
