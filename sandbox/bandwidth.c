/* sandbox/bandwidth.c: a sandbox's network bandwidth (docs/network.md
 * "Limits"): one token bucket per sandbox of network.bandwidth_bytes_per_s,
 * shared by everything that moves its bytes to or from outside it (its
 * egress relays, egress.c; connections to its ports, ports.c), so the cap
 * is the sandbox's and not a connection's.
 *
 * A bucket is made by its first user and freed by its last put. It holds
 * a quarter second's worth plus one buffer at most (the burst). Bytes are
 * taken before they move and the part that did not move is given back.
 *
 * The waker: a caller that is not a thread of its own (a port connection,
 * parked in the HTTP server until its stream wakes it) asks to be called
 * back when its bucket has bytes again. One thread calls the due waiters,
 * without the lock; sandbox_bw_cancel returns only when no call of that
 * waiter is running or coming, so its owner may free it then.
 *
 * Locking: bw->mu is a leaf (no call out of this file under it).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sandbox-priv.h"

#define MOD "sandbox"

/* The bytes a bucket starts with and holds beyond a quarter second's. */
#define BW_BUF (64u * 1024)

struct sandbox_bucket {
	struct sandbox_bucket *next;
	char id[SANDBOX_ID_MAX];
	int refs;
	double tokens; /* bytes it may move now */
	int64_t at_ms; /* its last refill */
};

struct sandbox_bw {
	pthread_mutex_t mu;
	pthread_cond_t cond; /* the waker's: a new waiter, a stop, a call done */
	struct sandbox_bucket *buckets;
	struct sandbox_bw_waiter *waiters; /* by nothing in particular: few */
	struct sandbox_bw_waiter *calling; /* the waiter being called now */
	pthread_t thread;
	bool started, stopping;
};

static void *waker_main(void *arg);

int sandbox_bw_init(struct sandbox_svc *svc)
{
	struct sandbox_bw *bw = calloc(1, sizeof(*bw));
	pthread_condattr_t ca;

	if (!bw)
		return -1;
	pthread_mutex_init(&bw->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&bw->cond, &ca);
	pthread_condattr_destroy(&ca);
	svc->bw = bw;
	if (pthread_create(&bw->thread, NULL, waker_main, bw) != 0) {
		sandbox_bw_free(svc);
		return -1;
	}
	bw->started = true;
	return 0;
}

void sandbox_bw_free(struct sandbox_svc *svc)
{
	struct sandbox_bw *bw = svc->bw;

	if (!bw)
		return;
	pthread_mutex_lock(&bw->mu);
	bw->stopping = true;
	pthread_cond_broadcast(&bw->cond);
	pthread_mutex_unlock(&bw->mu);
	if (bw->started)
		pthread_join(bw->thread, NULL);
	while (bw->buckets) {
		struct sandbox_bucket *b = bw->buckets;

		bw->buckets = b->next;
		free(b);
	}
	pthread_cond_destroy(&bw->cond);
	pthread_mutex_destroy(&bw->mu);
	free(bw);
	svc->bw = NULL;
}

/* ------------------------------------------------------------ buckets */

struct sandbox_bucket *sandbox_bucket_get(struct sandbox_svc *svc, const char *id)
{
	struct sandbox_bw *bw = svc->bw;
	struct sandbox_bucket *b;

	pthread_mutex_lock(&bw->mu);
	for (b = bw->buckets; b; b = b->next)
		if (strcmp(b->id, id) == 0)
			break;
	if (!b && (b = calloc(1, sizeof(*b)))) {
		snprintf(b->id, sizeof b->id, "%s", id);
		b->tokens = BW_BUF;
		b->at_ms = sbx_mono_ms();
		b->next = bw->buckets;
		bw->buckets = b;
	}
	if (b)
		b->refs++;
	pthread_mutex_unlock(&bw->mu);
	return b;
}

void sandbox_bucket_put(struct sandbox_svc *svc, struct sandbox_bucket *b)
{
	struct sandbox_bw *bw = svc->bw;

	if (!b)
		return;
	pthread_mutex_lock(&bw->mu);
	if (--b->refs == 0)
		for (struct sandbox_bucket **pp = &bw->buckets; *pp; pp = &(*pp)->next)
			if (*pp == b) {
				*pp = b->next;
				free(b);
				break;
			}
	pthread_mutex_unlock(&bw->mu);
}

/* Refill by the time passed (mu held). */
static void refill_locked(struct sandbox_svc *svc, struct sandbox_bucket *b)
{
	double rate = (double)svc->cfg.net_bandwidth_bytes_per_s;
	int64_t now = sbx_mono_ms();

	b->tokens += rate * (double)(now - b->at_ms) / 1000.0;
	b->at_ms = now;
	if (b->tokens > rate / 4 + BW_BUF)
		b->tokens = rate / 4 + BW_BUF;
}

/* When a bucket with less than a byte will have some (4 KiB's worth). */
static int refill_wait_ms(struct sandbox_svc *svc)
{
	return (int)SBX_MIN(1000.0, 1000.0 * 4096 / (double)svc->cfg.net_bandwidth_bytes_per_s + 1);
}

size_t sandbox_bucket_take(struct sandbox_svc *svc, struct sandbox_bucket *b, size_t want,
			   int *wait_ms)
{
	struct sandbox_bw *bw = svc->bw;
	size_t got;

	pthread_mutex_lock(&bw->mu);
	refill_locked(svc, b);
	got = b->tokens >= 1 ? (size_t)SBX_MIN((double)want, b->tokens) : 0;
	b->tokens -= (double)got;
	pthread_mutex_unlock(&bw->mu);
	if (!got && want && wait_ms)
		*wait_ms = SBX_MIN(*wait_ms, refill_wait_ms(svc));
	return got;
}

void sandbox_bucket_refund(struct sandbox_svc *svc, struct sandbox_bucket *b, size_t n)
{
	struct sandbox_bw *bw = svc->bw;

	if (!n)
		return;
	pthread_mutex_lock(&bw->mu);
	b->tokens += (double)n;
	pthread_mutex_unlock(&bw->mu);
}

bool sandbox_bucket_empty(struct sandbox_svc *svc, struct sandbox_bucket *b)
{
	struct sandbox_bw *bw = svc->bw;
	bool empty;

	pthread_mutex_lock(&bw->mu);
	refill_locked(svc, b);
	empty = b->tokens < 1;
	pthread_mutex_unlock(&bw->mu);
	return empty;
}

/* ------------------------------------------------------------- the waker */

void sandbox_bw_wake_later(struct sandbox_svc *svc, struct sandbox_bw_waiter *w)
{
	struct sandbox_bw *bw = svc->bw;
	int64_t due = sbx_mono_ms() + refill_wait_ms(svc);

	pthread_mutex_lock(&bw->mu);
	if (!w->listed) {
		w->due_ms = due;
		w->listed = true;
		w->next = bw->waiters;
		bw->waiters = w;
		pthread_cond_broadcast(&bw->cond);
	} else if (due < w->due_ms) {
		w->due_ms = due;
	}
	pthread_mutex_unlock(&bw->mu);
}

static void unlist_locked(struct sandbox_bw *bw, struct sandbox_bw_waiter *w)
{
	for (struct sandbox_bw_waiter **pp = &bw->waiters; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	w->next = NULL;
	w->listed = false;
}

void sandbox_bw_cancel(struct sandbox_svc *svc, struct sandbox_bw_waiter *w)
{
	struct sandbox_bw *bw = svc->bw;

	pthread_mutex_lock(&bw->mu);
	if (w->listed)
		unlist_locked(bw, w);
	while (bw->calling == w)
		pthread_cond_wait(&bw->cond, &bw->mu);
	pthread_mutex_unlock(&bw->mu);
}

static void *waker_main(void *arg)
{
	struct sandbox_bw *bw = arg;

	pthread_mutex_lock(&bw->mu);
	while (!bw->stopping) {
		int64_t now = sbx_mono_ms(), next = now + 60000;
		struct sandbox_bw_waiter *due = NULL;
		for (struct sandbox_bw_waiter *w = bw->waiters; w; w = w->next)
			if (w->due_ms <= now) {
				due = w;
				break;
			} else if (w->due_ms < next) {
				next = w->due_ms;
			}
		if (due) {
			unlist_locked(bw, due);
			bw->calling = due;
			pthread_mutex_unlock(&bw->mu);
			due->fn(due->opaque);
			pthread_mutex_lock(&bw->mu);
			bw->calling = NULL;
			pthread_cond_broadcast(&bw->cond);
			continue;
		}
		struct timespec ts = sbx_timespec_in(CLOCK_MONOTONIC, next - now);

		pthread_cond_timedwait(&bw->cond, &bw->mu, &ts);
	}
	pthread_mutex_unlock(&bw->mu);
	return NULL;
}
