/* billing: prices, metering, holds and settlement, over store/.
 *
 * The formula is API.md's "Billing": a sandbox is billed per started second
 * of runtime, from created_at to ended_at capped at expires_at, minimum one
 * second, at its size's hourly price:
 *
 *   cost = ceil( ceil(runtime_ms / 1000) * price_micro_per_hour / 3600 )
 *
 * in integer micro-USD (e.g. small, 90000 µ$/h, 300.2 s -> 301 s -> 7525 µ$).
 * The hold for a timeout is the same formula over the whole timeout.
 */
#ifndef SBX_BILLING_H
#define SBX_BILLING_H

#include <stdint.h>

#include "../store/store.h"
#include "../util/util.h"

/* Cost of `runtime_ms` (>= 0; billed as at least 1 s) at an hourly price. */
int64_t billing_cost(int64_t runtime_ms, int64_t price_micro_per_hour);

/* Hold needed for `minutes` of runtime at an hourly price. */
int64_t billing_hold_for_minutes(int64_t minutes, int64_t price_micro_per_hour);

/* A one-shot execution (docs/executions.md "Billing") is billed per
 * started second of host-observed run time, minimum one, at a per-second
 * price, at most its hold:
 *
 *   hold = price_micro_per_second * timeout_seconds
 *   cost = min( max(1, ceil(host_ms / 1000)) * price_micro_per_second, hold )
 */
int64_t billing_execution_hold(int64_t price_micro_per_second, int timeout_seconds);
int64_t billing_execution_cost(uint32_t host_ms, int64_t price_micro_per_second,
			       int timeout_seconds);

/* Storage of a paused sandbox (docs/billing.md "Pause"): `bytes` kept
 * `ms` long at a price per GiB-hour, rounded up to a whole micro-USD;
 * 0 when any is <= 0; saturates at INT64_MAX. */
int64_t billing_storage_cost(int64_t bytes, int64_t ms, int64_t price_micro_per_gib_hour);
/* Egress (docs/billing.md "Network"): `bytes` relayed (both ways) at a
 * price per GB (10^9 bytes), rounded up to a whole micro-USD; 0 when
 * either is <= 0; saturates at INT64_MAX. */
int64_t billing_network_cost(int64_t bytes, int64_t price_micro_per_gb);
/* The storage cost of a paused row's current pause up to at_ms (a
 * store_pause_cost_fn); 0 when it is not paused. */
int64_t billing_pause_cost(const struct store_sandbox *row, int64_t at_ms);
/* The final charge of a row ended at ended_at_ms (a store_charge_fn):
 * runtime (without the time it was paused) at its price, plus the
 * storage of its pauses, plus its network bytes (in + out) at its price;
 * runtime from created_at to min(ended_at, expires_at); 0 for a row that
 * never became ready. */
int64_t billing_charge_for_row(const struct store_sandbox *row, int64_t ended_at_ms);

/* Cost so far of a sandbox at wall time now_ms: the final charge when it
 * has ended, else the charge it would get if it ended now. */
int64_t billing_cost_so_far(const struct store_sandbox *row, int64_t now_ms);

/* "0.007525": micro-USD as a decimal USD string with 6 places (negative
 * values get a leading '-'). buf >= 32 bytes. */
void billing_format_usd(int64_t micro, char buf[static 32]);

/* Parse a decimal USD amount ("10", "10.5", "0.000001"; at most 6
 * decimals, >= 0) into micro-USD. 0 or -1. */
int billing_parse_usd(const char *s, int64_t *micro);

/* Settle a sandbox: end it with `status` at ended_at_ms and post its charge
 * and release in one transaction (store_sandbox_end with
 * billing_charge_for_row). Returns 1 if this call ended it, 0 if it had
 * already ended; *out gets the final row. */
int billing_settle(struct store *s, const char *sandbox_id, enum store_status status,
		   int64_t ended_at_ms, struct store_sandbox *out, struct sbx_error *err);

/* Lifetime balance figures of an account including the cost accrued so
 * far by its running sandboxes (counted as consumed and taken out of the
 * balance and the reserve, as if settled now). */
int billing_balance(struct store *s, const char *account_id, int64_t now_ms,
		    struct store_balance *out, struct sbx_error *err);
/* The same accrual applied to ledger totals `b` read together with the
 * account's running sandboxes `running` (store_usage_snapshot). */
void billing_balance_accrue(struct store_balance *b, const struct store_sandbox *running, size_t n,
			    int64_t now_ms);

#endif
