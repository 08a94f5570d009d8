/* usage: GET /v1/usage, an account's balance and its usage per size and
 * per day or hour bucket, settled rows plus the running sandboxes' cost so
 * far, from one store snapshot. See sandbox.h. */
#include "sandbox.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../billing/billing.h"
#include "../store/store.h"
#include "sandbox-priv.h"

static int64_t month_start_utc(int64_t now_ms)
{
	time_t t = (time_t)(now_ms / 1000);
	struct tm tm;

	gmtime_r(&t, &tm);
	tm.tm_mday = 1;
	tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
	return (int64_t)timegm(&tm) * 1000;
}

static int64_t next_month_utc(int64_t month_ms)
{
	time_t t = (time_t)(month_ms / 1000);
	struct tm tm;

	gmtime_r(&t, &tm);
	tm.tm_mon += 1;
	return (int64_t)timegm(&tm) * 1000;
}

/* Add a share of usage to its size and, with buckets, to the bucket that
 * holds start_ms (rows and pieces never straddle a bucket). */
static void usage_add(struct sandbox_usage *u, int64_t step, const char *size, int64_t start_ms,
		      int64_t seconds, int64_t cost)
{
	if (start_ms < u->from_ms || start_ms >= u->to_ms)
		return;
	for (size_t k = 0; k < u->n_sizes; k++) {
		if (strcmp(u->by_size[k].size, size) == 0) {
			u->by_size[k].seconds += seconds;
			u->by_size[k].cost_micro += cost;
		}
	}
	if (step && u->n_buckets) {
		size_t b = (size_t)((start_ms - u->from_ms) / step);
		if (b < u->n_buckets) {
			u->buckets[b].seconds += seconds;
			u->buckets[b].cost_micro += cost;
		}
	}
}

struct usage_live {
	struct sandbox_usage *u;
	int64_t step;
	const char *size;
};

static int usage_live_piece(void *arg, int64_t hour_ms, int64_t seconds, int64_t cost)
{
	struct usage_live *l = arg;

	usage_add(l->u, l->step, l->size, hour_ms, seconds, cost);
	return 0;
}

/* The running sandboxes of an account (bounded by its live cap): their
 * cost so far, split over hours the way settlement will split it. */
static void usage_add_running(const struct store_sandbox *rows, size_t n, int64_t now, int64_t step,
			      struct sandbox_usage *u)
{
	for (size_t i = 0; i < n; i++) {
		const struct store_sandbox *r = &rows[i];
		int64_t end = r->expires_at_ms && now > r->expires_at_ms ? r->expires_at_ms : now;
		struct usage_live l = {u, step, r->size};

		if (end < r->created_at_ms)
			end = r->created_at_ms;
		store_usage_split(r->created_at_ms, end,
				  store_billed_seconds(end - r->created_at_ms),
				  billing_cost_so_far(r, now), usage_live_piece, &l);
	}
}

/* ------------------------------------------------------ grouped by a label */

/* One sandbox's share of the period, and its label. */
struct usage_share {
	bool labeled;
	const char *value;
	int64_t seconds, cost;
	int64_t from_ms, to_ms;
};

static int usage_share_piece(void *arg, int64_t hour_ms, int64_t seconds, int64_t cost)
{
	struct usage_share *sh = arg;

	if (hour_ms >= sh->from_ms && hour_ms < sh->to_ms) {
		sh->seconds += seconds;
		sh->cost += cost;
	}
	return 0;
}

static int share_cmp(const void *a, const void *b)
{
	const struct usage_share *x = a, *y = b;

	if (x->labeled != y->labeled)
		return x->labeled ? 1 : -1;
	return x->labeled ? strcmp(x->value, y->value) : 0;
}

/* Whether by_size counts a size (a configured one). */
static bool usage_size_known(const struct sandbox_usage *u, const char *size)
{
	for (size_t k = 0; k < u->n_sizes; k++)
		if (strcmp(u->by_size[k].size, size) == 0)
			return true;
	return false;
}

/* The shares of the settled sandboxes and the running ones (the running
 * ones' labels read from their rows: same snapshot), sorted by value and
 * summed into out->groups; as by_size, only sizes configured now. */
static int usage_groups(const struct store_usage_snapshot *snap, const char *key, int64_t now,
			struct sandbox_usage *out, struct sbx_error *err)
{
	size_t n = snap->n_settled + snap->n_running, g = 0;
	struct usage_share *sh = calloc(n ? n : 1, sizeof(*sh));
	char(*vals)[SANDBOX_METADATA_VALUE_MAX + 1] = calloc(n ? n : 1, sizeof(*vals));

	if (!sh || !vals) {
		free(sh);
		free(vals);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	}
	for (size_t i = 0; i < snap->n_settled; i++) {
		const struct store_usage_labeled *u = &snap->settled[i];

		sh[i] = (struct usage_share){u->labeled, u->value, 0, 0, out->from_ms, out->to_ms};
		if (usage_size_known(out, u->size))
			store_usage_split_sandbox(u, usage_share_piece, &sh[i]);
	}
	for (size_t i = 0; i < snap->n_running; i++) {
		const struct store_sandbox *r = &snap->running[i];
		struct usage_share *x = &sh[snap->n_settled + i];
		int64_t end = r->expires_at_ms && now > r->expires_at_ms ? r->expires_at_ms : now;

		if (end < r->created_at_ms)
			end = r->created_at_ms;
		*x = (struct usage_share){false, "", 0, 0, out->from_ms, out->to_ms};
		x->labeled = sandbox_metadata_lookup(r->metadata, key, vals[i], sizeof(vals[i]));
		x->value = vals[i];
		/* as usage_add_running splits it */
		if (usage_size_known(out, r->size))
			store_usage_split(r->created_at_ms, end,
					  store_billed_seconds(end - r->created_at_ms),
					  billing_cost_so_far(r, now), usage_share_piece, x);
	}
	qsort(sh, n, sizeof(*sh), share_cmp);
	out->groups = calloc(n ? n : 1, sizeof(*out->groups));
	if (!out->groups) {
		free(sh);
		free(vals);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		if (sh[i].seconds == 0 && sh[i].cost == 0)
			continue;
		if (g == 0 || out->groups[g - 1].labeled != sh[i].labeled ||
		    strcmp(out->groups[g - 1].value, sh[i].value) != 0) {
			out->groups[g].labeled = sh[i].labeled;
			snprintf(out->groups[g].value, sizeof(out->groups[g].value), "%s",
				 sh[i].labeled ? sh[i].value : "");
			g++;
		}
		out->groups[g - 1].seconds += sh[i].seconds;
		out->groups[g - 1].cost_micro += sh[i].cost;
	}
	out->n_groups = g;
	free(sh);
	free(vals);
	return 0;
}

int sandbox_usage(struct sandbox_svc *svc, const char *account_id, int64_t from_ms, int64_t to_ms,
		  const char *granularity, struct sandbox_usage *out, struct sbx_error *err)
{
	return sandbox_usage_grouped(svc, account_id, from_ms, to_ms, granularity, NULL, out, err);
}

int sandbox_usage_grouped(struct sandbox_svc *svc, const char *account_id, int64_t from_ms,
			  int64_t to_ms, const char *granularity, const char *group_key,
			  struct sandbox_usage *out, struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	struct store_usage_snapshot snap;
	int64_t now = sbx_wall_ms(), step = 0, align;

	memset(out, 0, sizeof(*out));
	if (granularity && strcmp(granularity, "day") == 0)
		step = STORE_DAY_MS;
	else if (granularity && strcmp(granularity, "hour") == 0)
		step = STORE_HOUR_MS;
	else if (granularity)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "granularity",
				     "granularity must be 'day' or 'hour'");
	if (!from_ms)
		from_ms = month_start_utc(to_ms ? to_ms - 1 : now);
	if (!to_ms)
		to_ms = next_month_utc(month_start_utc(from_ms));
	if (to_ms <= from_ms)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "to", "'to' must be after 'from'");
	/* Usage is kept per UTC hour (per UTC day for daily buckets): the
	 * period widens to whole ones. */
	align = step ? step : STORE_HOUR_MS;
	from_ms -= ((from_ms % align) + align) % align;
	to_ms += (align - ((to_ms % align) + align) % align) % align;
	if (step && (to_ms - from_ms) / step > 10000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "granularity",
				     "that period has more than 10000 buckets; narrow it");

	/* Settled rows, totals, live count and running list in one snapshot:
	 * a sandbox that ends meanwhile counts once, settled or running. */
	if (group_key) {
		struct sandbox_metadata check = {0};

		if (sandbox_metadata_add(&check, "group_by", group_key, strlen(group_key), NULL, 0,
					 err) < 0)
			return -1;
	}
	if (store_usage_snapshot_grouped(svc->store, account_id, from_ms, to_ms, step, group_key,
					 &snap, err) < 0)
		return -1;
	billing_balance_accrue(&snap.balance, snap.running, snap.n_running, now);
	out->balance_micro = snap.balance.balance_micro;
	out->reserved_micro = snap.balance.reserved_micro;
	out->available_micro = snap.balance.available_micro;
	out->consumed_micro = snap.balance.consumed_micro;
	out->running = snap.live;
	out->limit = cfg->max_sandboxes_per_account;
	out->from_ms = from_ms;
	out->to_ms = to_ms;
	out->n_sizes = cfg->n_sizes;
	for (size_t i = 0; i < cfg->n_sizes; i++)
		snprintf(out->by_size[i].size, sizeof(out->by_size[i].size), "%s",
			 cfg->sizes[i].name);
	if (step) {
		out->n_buckets = (size_t)((to_ms - from_ms) / step);
		out->buckets = calloc(out->n_buckets, sizeof(*out->buckets));
		if (!out->buckets) {
			store_usage_snapshot_release(&snap);
			return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		}
		for (size_t b = 0; b < out->n_buckets; b++)
			out->buckets[b].start_ms = from_ms + (int64_t)b * step;
	}
	for (size_t i = 0; i < snap.n_rows; i++)
		usage_add(out, step, snap.rows[i].size, snap.rows[i].start_ms, snap.rows[i].seconds,
			  snap.rows[i].cost_micro);
	usage_add_running(snap.running, snap.n_running, now, step, out);
	out->net_bytes_in = snap.net_bytes_in;
	out->net_bytes_out = snap.net_bytes_out;
	for (size_t i = 0; i < snap.n_running; i++) {
		out->net_bytes_in += snap.running[i].net_bytes_in;
		out->net_bytes_out += snap.running[i].net_bytes_out;
	}
	if (group_key && usage_groups(&snap, group_key, now, out, err) < 0) {
		store_usage_snapshot_release(&snap);
		sandbox_usage_release(out);
		return -1;
	}
	store_usage_snapshot_release(&snap);
	return 0;
}

void sandbox_usage_release(struct sandbox_usage *u)
{
	free(u->buckets);
	u->buckets = NULL;
	u->n_buckets = 0;
	free(u->groups);
	u->groups = NULL;
	u->n_groups = 0;
}
