/* agentless: the host's PINGs (agentless.h "ping"): a waiter per PING
 * in flight on the conn's list, answered by its PONG (the same id and
 * payload), and waited for until a deadline. The window's PINGs
 * (WIN_PING_BIT) are agentless.c's. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "agentless-priv.h"

#define MOD "agentless"

struct ping_waiter {
	struct ping_waiter *next;
	int64_t sent_us, answered_us; /* monotonic */
	uint32_t id;
	const uint8_t *payload;
	size_t len;
	bool answered;
};

void conn_ping_answered(struct agentless_conn *c, uint32_t id, const uint8_t *p, size_t len)
{
	struct ping_waiter *w;

	pthread_mutex_lock(&c->lock);
	for (w = c->pings; w; w = w->next) {
		if (w->id == id && !w->answered && w->len == len &&
		    (len == 0 || memcmp(w->payload, p, len) == 0)) {
			w->answered = true;
			w->answered_us = now_mono_us();
			pthread_cond_broadcast(&c->cond);
			break;
		}
	}
	/* a PONG nobody waits for (late, duplicate) is dropped, unless they
	 * come as a flood */
	bool flood = !w && !conn_unsolicited_ok_locked(c);
	pthread_mutex_unlock(&c->lock);
	if (flood)
		conn_violation(c, "a flood of unsolicited PONGs");
}

/* Register a waiter and send its PING. The waiter is heap-owned by the
 * conn's list until ping_finish takes it out. */
static struct ping_waiter *ping_begin(struct agentless_conn *c, size_t len, struct sbx_error *err)
{
	struct ping_waiter *w;
	uint8_t *payload;
	bool ok;

	if (len > WIRE_MAX_GUEST_PAYLOAD) {
		sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL, "a ping carries at most %d bytes",
			      WIRE_MAX_GUEST_PAYLOAD);
		return NULL;
	}
	w = xcalloc(1, sizeof(*w) + (len ? len : 1));
	payload = (uint8_t *)(w + 1);
	pthread_mutex_lock(&c->lock);
	ok = c->ready && !c->broken;
	w->id = c->next_ping++;
	if (c->next_ping >= WIN_PING_BIT)
		c->next_ping = 1;
	if (ok) {
		for (size_t i = 0; i < len; i++)
			payload[i] = (uint8_t)(w->id * 31u + i * 7u);
		w->payload = payload;
		w->len = len;
		w->sent_us = now_mono_us();
		w->next = c->pings;
		c->pings = w;
	}
	pthread_mutex_unlock(&c->lock);
	if (!ok || conn_send(c, WIRE_PING, w->id, payload, len) < 0) {
		if (ok) {
			pthread_mutex_lock(&c->lock);
			for (struct ping_waiter **pp = &c->pings; *pp; pp = &(*pp)->next)
				if (*pp == w) {
					*pp = w->next;
					break;
				}
			pthread_mutex_unlock(&c->lock);
		}
		free(w);
		sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, MSG_GONE);
		return NULL;
	}
	return w;
}

/* Wait for w's PONG until the deadline, unlink and free w. RTT in us or -1. */
static int64_t ping_finish(struct agentless_conn *c, struct ping_waiter *w, int64_t deadline_ms,
			   struct sbx_error *err)
{
	int64_t rtt = -1;

	pthread_mutex_lock(&c->lock);
	while (!w->answered && !c->broken)
		if (conn_wait_until(c, deadline_ms) == ETIMEDOUT)
			break;
	if (w->answered)
		rtt = w->answered_us - w->sent_us;
	for (struct ping_waiter **pp = &c->pings; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	pthread_mutex_unlock(&c->lock);
	free(w);
	if (rtt < 0)
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, MSG_GONE);
	return rtt;
}

int64_t agentless_conn_ping(struct agentless_conn *c, size_t len, int64_t deadline_ms,
			    struct sbx_error *err)
{
	struct ping_waiter *w = ping_begin(c, len, err);

	return w ? ping_finish(c, w, deadline_ms, err) : -1;
}

struct agentless_ping *agentless_conn_ping_send(struct agentless_conn *c, struct sbx_error *err)
{
	return (struct agentless_ping *)ping_begin(c, 0, err);
}

int64_t agentless_conn_ping_wait(struct agentless_conn *c, struct agentless_ping *p,
				 int64_t deadline_ms, struct sbx_error *err)
{
	return ping_finish(c, (struct ping_waiter *)p, deadline_ms, err);
}
