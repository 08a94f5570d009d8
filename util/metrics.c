/* util/metrics.c: process-wide counters and latency histograms, rendered
 * as Prometheus text by api/metrics.c. Lock-free: every cell is an atomic,
 * so any thread (the channel threads, libvirt's event loop, the store)
 * may count without taking a lock. */
#include <stdatomic.h>
#include <stdio.h>

#include "util.h"

/* Bucket bounds in seconds, shared by every histogram (boots take
 * seconds under TCG, store transactions a millisecond). */
static const double bucket_s[SBX_HIST_BUCKETS] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.25,
						  0.5,	 1,	2.5,  5,    10,	 30};

static const struct {
	const char *name, *help;
} counter_info[SBX_C_COUNT] = {
    [SBX_C_CHANNEL_VIOLATIONS] = {"sandboxd_channel_violations_total",
				  "Guests that broke the exec protocol (the sandbox failed)."},
    [SBX_C_CHANNEL_SEND_DEADLINES] = {"sandboxd_channel_send_deadlines_total",
				      "Channels broken because the guest stopped reading."},
    [SBX_C_CHANNEL_BROKEN] = {"sandboxd_channel_broken_total",
			      "Exec channels that broke for any reason."},
    [SBX_C_BOOT_FAILURES] = {"sandboxd_boot_failures_total", "Guests that did not become ready."},
};

static const struct {
	const char *name, *help;
} hist_info[SBX_H_COUNT] = {
    [SBX_H_BOOT] = {"sandboxd_boot_duration_seconds",
		    "Domain start to the guest's HELLO, cold boots (pool and customers)."},
    [SBX_H_EXEC] = {"sandboxd_exec_duration_seconds",
		    "Exec calls, EXEC sent to EXIT received (host time)."},
    [SBX_H_STORE_TX] = {"sandboxd_store_transaction_seconds",
			"Write transactions of the store, BEGIN to COMMIT."},
};

static _Atomic uint64_t counters[SBX_C_COUNT];
static struct {
	_Atomic uint64_t bucket[SBX_HIST_BUCKETS]; /* cumulative at render */
	_Atomic uint64_t count;
	_Atomic uint64_t sum_us;
} hists[SBX_H_COUNT];

void sbx_counter_add(enum sbx_counter c, uint64_t n)
{
	if ((unsigned)c < SBX_C_COUNT)
		atomic_fetch_add_explicit(&counters[c], n, memory_order_relaxed);
}

uint64_t sbx_counter_get(enum sbx_counter c)
{
	return (unsigned)c < SBX_C_COUNT ? atomic_load(&counters[c]) : 0;
}

size_t sbx_hist_bucket_of(int64_t us)
{
	for (size_t i = 0; i < SBX_HIST_BUCKETS; i++)
		if ((double)us <= bucket_s[i] * 1e6)
			return i;
	return SBX_HIST_BUCKETS; /* only +Inf */
}

void sbx_hist_observe_us(enum sbx_hist h, int64_t us)
{
	if ((unsigned)h >= SBX_H_COUNT)
		return;
	if (us < 0)
		us = 0;
	size_t i = sbx_hist_bucket_of(us);
	if (i < SBX_HIST_BUCKETS)
		atomic_fetch_add_explicit(&hists[h].bucket[i], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&hists[h].count, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&hists[h].sum_us, (uint64_t)us, memory_order_relaxed);
}

int sbx_hist_render(struct sbx_buf *b, const char *name, const char *labels,
		    const uint64_t bucket[SBX_HIST_BUCKETS], uint64_t count, uint64_t sum_us)
{
	uint64_t cum = 0;
	int r = 0;

	for (size_t i = 0; i < SBX_HIST_BUCKETS; i++) {
		cum += bucket[i];
		r |= sbx_buf_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels,
				    labels[0] ? "," : "", bucket_s[i], (unsigned long long)cum);
	}
	r |= sbx_buf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels,
			    labels[0] ? "," : "", (unsigned long long)count);
	r |= sbx_buf_printf(b, "%s_sum%s%s%s %.6f\n", name, labels[0] ? "{" : "", labels,
			    labels[0] ? "}" : "", (double)sum_us / 1e6);
	r |= sbx_buf_printf(b, "%s_count%s%s%s %llu\n", name, labels[0] ? "{" : "", labels,
			    labels[0] ? "}" : "", (unsigned long long)count);
	return r ? -1 : 0;
}

int sbx_metrics_render(struct sbx_buf *b)
{
	int r = 0;

	for (size_t c = 0; c < SBX_C_COUNT; c++)
		r |= sbx_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n",
				    counter_info[c].name, counter_info[c].help,
				    counter_info[c].name, counter_info[c].name,
				    (unsigned long long)atomic_load(&counters[c]));
	for (size_t h = 0; h < SBX_H_COUNT; h++) {
		uint64_t bucket[SBX_HIST_BUCKETS];

		for (size_t i = 0; i < SBX_HIST_BUCKETS; i++)
			bucket[i] = atomic_load(&hists[h].bucket[i]);
		r |= sbx_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", hist_info[h].name,
				    hist_info[h].help, hist_info[h].name);
		r |= sbx_hist_render(b, hist_info[h].name, "", bucket, atomic_load(&hists[h].count),
				     atomic_load(&hists[h].sum_us));
	}
	return r ? -1 : 0;
}
