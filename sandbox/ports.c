/* sandbox/ports.c: TCP connections to a port of a running sandbox (the
 * ports route of docs/api.md), over agentless' TCP streams (protocol v6).
 *
 * Who owns what, as files.c: a struct sandbox_port holds its agentless
 * stream and a ref on the sandbox's guest, dropped at release; `open` is
 * cleared by the stream's wake once it is over, and a call on a guest that
 * is ending or gone answers as the ended stream would, so nothing here
 * delays a delete, a pause or an expiry.
 *
 * Metering: the bytes a connection moves (to the guest: what it took;
 * from it: what it sent) are added to the sandbox's net_bytes_in/out, as
 * egress is, every PORT_METER_STEP and at release, so the settle bills
 * them with its runtime. Counted by the daemon, never by the guest's word.
 * A step not yet added when the sandbox ends under the connection (at most
 * PORT_METER_STEP bytes) is not billed: the ended row takes no more.
 *
 * Bandwidth: both directions take bytes from the sandbox's bucket
 * (bandwidth.c), the one its egress takes from. While it is empty a read
 * or a write moves nothing and the status shows nothing to move (so the
 * HTTP side parks), and the bucket's waker wakes the connection when it
 * has refilled.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../agentless/agentless.h"
#include "../store/store.h"
#include "sandbox-priv.h"

#define MOD "sandbox"

#define PORT_METER_STEP (1u << 20)

struct sandbox_port {
	struct sandbox_svc *svc;
	char id[SANDBOX_ID_MAX];
	/* meter_lock: bytes taken by the guest so far, and what of them and
	 * of the guest's (status.received) was added to the row */
	pthread_mutex_t meter_lock;
	uint64_t sent, metered_in, metered_out;
	bool spent;	       /* atomic: the sandbox's hold is spent: no more bytes */
	struct fleet_guest *l; /* a ref of the stream's own */
	bool open;	       /* atomic: the stream is not over (the wake clears it) */
	struct agentless_tcp *t;
	struct sandbox_bucket *bucket;
	struct sandbox_bw_waiter waiter; /* calls wake(opaque) */
	sandbox_port_wake_fn wake;
	void *opaque;
};

_Static_assert(SANDBOX_PORT_WINDOW == AGENTLESS_TCP_WINDOW, "one window");
_Static_assert(SANDBOX_PORT_GUEST_MAX == AGENTLESS_TCP_MAX, "one stream cap");

static void port_wake(void *opaque)
{
	struct sandbox_port *p = opaque;
	struct agentless_tcp_status st;

	agentless_tcp_status(p->t, &st);
	if (st.state == AGENTLESS_TCP_FAILED || st.state == AGENTLESS_TCP_CLOSED)
		__atomic_store_n(&p->open, false, __ATOMIC_RELEASE);
	p->wake(p->opaque);
}

/* Add what moved since the last step to the sandbox's row, when a step's
 * worth did (or always, at release). No lock held across the store. */
static void port_meter(struct sandbox_port *p, uint64_t sent_now, bool final)
{
	struct agentless_tcp_status st;
	uint64_t in, out;

	agentless_tcp_status(p->t, &st);
	pthread_mutex_lock(&p->meter_lock);
	p->sent += sent_now;
	in = p->sent - p->metered_in;
	out = st.received - p->metered_out;
	if ((!final && in + out < PORT_METER_STEP) || in + out == 0) {
		pthread_mutex_unlock(&p->meter_lock);
		return;
	}
	/* claimed before the write: a concurrent step does not add them too */
	p->metered_in += in;
	p->metered_out += out;
	pthread_mutex_unlock(&p->meter_lock);
	/* what is billed stops at the hold: so do the bytes */
	if (sandbox_net_count(p->svc, p->id, "port", in, out, !final) &&
	    !__atomic_exchange_n(&p->spent, true, __ATOMIC_ACQ_REL)) {
		sbx_info(MOD, "sandbox %s: its hold is spent: its port connection ends", p->id);
		p->wake(p->opaque);
	}
}

static struct fleet_guest *port_guest(struct sandbox_port *p)
{
	if (!__atomic_load_n(&p->open, __ATOMIC_ACQUIRE) || fleet_guest_over(p->l) ||
	    __atomic_load_n(&p->spent, __ATOMIC_ACQUIRE))
		return NULL;
	return p->l;
}

int sandbox_port_open(struct sandbox_svc *svc, const char *account_id, const char *id,
		      uint32_t port, sandbox_port_wake_fn wake, void *opaque,
		      struct sandbox_port **out, struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	struct agentless_tcp_req req = {
	    .port = port,
	    .max_streams = (uint32_t)cfg->max_port_conns_per_sandbox,
	    .open_ms = 10000,
	    .first_byte_ms = cfg->port_response_timeout_ms,
	    .idle_ms = cfg->port_idle_timeout_ms,
	};
	struct store_sandbox row;
	struct sandbox_port *p;
	struct fleet_guest *l;

	if (sandbox_running_row(svc, account_id, id, sbx_wall_ms(), &row, err) < 0)
		return -1;
	if (sandbox_hold_spent(&row, sbx_wall_ms()))
		return sbx_error_set(err, SBX_E_INSUFFICIENT_CREDIT, NULL,
				     "sandbox '%s' has spent what its hold covers (its runtime and "
				     "bytes); extend it for more",
				     id);
	p = calloc(1, sizeof(*p));
	if (!p)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	p->svc = svc;
	snprintf(p->id, sizeof p->id, "%s", id);
	pthread_mutex_init(&p->meter_lock, NULL);
	p->wake = wake;
	p->opaque = opaque;
	p->waiter.fn = wake;
	p->waiter.opaque = opaque;
	p->bucket = sandbox_bucket_get(svc, id);
	l = p->bucket ? sandbox_pin(svc, id, err) : NULL;
	if (!l) {
		if (!p->bucket)
			sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		sandbox_bucket_put(svc, p->bucket);
		pthread_mutex_destroy(&p->meter_lock);
		free(p);
		return -1;
	}
	p->l = l; /* the pin becomes the stream's ref */
	p->open = true;
	if (agentless_tcp_open(l->conn, &req, port_wake, p, &p->t, err) < 0) {
		if (fleet_guest_over(l))
			fleet_guest_usable(l, id, err);
		fleet_live_unpin(l);
		sandbox_bucket_put(svc, p->bucket);
		pthread_mutex_destroy(&p->meter_lock);
		free(p);
		return -1;
	}
	*out = p;
	return 0;
}

/* Bytes the bucket gives for a move of up to want (0: none now, and the
 * waker will wake the connection). */
static size_t port_take(struct sandbox_port *p, size_t want)
{
	size_t got = want ? sandbox_bucket_take(p->svc, p->bucket, want, NULL) : 0;

	if (want && !got)
		sandbox_bw_wake_later(p->svc, &p->waiter);
	return got;
}

long sandbox_port_write(struct sandbox_port *p, const void *data, size_t len)
{
	struct fleet_guest *l = port_guest(p);
	size_t got;
	long n;

	if (!l)
		return -1;
	if (!(got = port_take(p, len)))
		return 0;
	n = agentless_tcp_write(l->conn, p->t, data, got);
	sandbox_bucket_refund(p->svc, p->bucket, got - (n > 0 ? (size_t)n : 0));
	if (n > 0)
		port_meter(p, (uint64_t)n, false);
	return n;
}

void sandbox_port_await(struct sandbox_port *p)
{
	agentless_tcp_await(p->t);
}

int sandbox_port_shutdown(struct sandbox_port *p)
{
	struct fleet_guest *l = port_guest(p);

	return l ? agentless_tcp_shutdown(l->conn, p->t) : -1;
}

size_t sandbox_port_read(struct sandbox_port *p, void *buf, size_t max)
{
	struct fleet_guest *l = port_guest(p);
	struct agentless_tcp_status st;
	size_t got, n;

	agentless_tcp_status(p->t, &st);
	if (!(got = port_take(p, SBX_MIN(max, st.buffered))))
		return 0;
	n = agentless_tcp_read(l ? l->conn : NULL, p->t, buf, got);
	sandbox_bucket_refund(p->svc, p->bucket, got - n);
	if (n > 0)
		port_meter(p, 0, false);
	return n;
}

void sandbox_port_status(struct sandbox_port *p, struct sandbox_port_status *out)
{
	struct agentless_tcp_status st;
	enum fleet_end ending;

	agentless_tcp_status(p->t, &st);
	memset(out, 0, sizeof(*out));
	out->state = st.state == AGENTLESS_TCP_OPENING	? SANDBOX_PORT_OPENING
		     : st.state == AGENTLESS_TCP_OPEN	? SANDBOX_PORT_OPEN
		     : st.state == AGENTLESS_TCP_CLOSED ? SANDBOX_PORT_CLOSED
							: SANDBOX_PORT_FAILED;
	out->err = st.err;
	out->buffered = st.buffered;
	out->eof = st.eof;
	out->received = st.received;
	out->writable = st.writable;
	if (__atomic_load_n(&p->spent, __ATOMIC_ACQUIRE)) {
		out->state = SANDBOX_PORT_FAILED;
		out->buffered = 0;
		out->writable = 0;
		sbx_error_clear(&out->err);
		sbx_error_set(&out->err, SBX_E_INSUFFICIENT_CREDIT, NULL,
			      "the sandbox spent what its hold covers during the request; extend "
			      "it for more");
		return;
	}
	if (out->state != SANDBOX_PORT_FAILED) {
		/* nothing moves until the bucket refills: nothing to do */
		if ((out->buffered || out->writable) && sandbox_bucket_empty(p->svc, p->bucket)) {
			if (out->buffered && out->state == SANDBOX_PORT_CLOSED)
				out->state = SANDBOX_PORT_OPEN;
			out->eof = out->eof && !out->buffered;
			out->buffered = 0;
			out->writable = 0;
			sandbox_bw_wake_later(p->svc, &p->waiter);
		}
		return;
	}
	ending = fleet_guest_end_why(p->l);
	if (ending == FLEET_END_PAUSED) {
		sbx_error_clear(&out->err);
		sbx_error_set(&out->err, SBX_E_SANDBOX_PAUSED, NULL,
			      "the sandbox was paused during the request");
	} else if (ending == FLEET_END_EXPIRED || ending == FLEET_END_DELETED) {
		sbx_error_clear(&out->err);
		sbx_error_set(&out->err, SBX_E_SANDBOX_NOT_RUNNING, NULL,
			      "the sandbox %s during the request",
			      ending == FLEET_END_EXPIRED ? "expired" : "was deleted");
	}
}

void sandbox_port_release(struct sandbox_port *p)
{
	if (!p)
		return;
	port_meter(p, 0, true);
	sandbox_bw_cancel(p->svc, &p->waiter);
	agentless_tcp_release(p->t); /* no wake after this */
	sandbox_bucket_put(p->svc, p->bucket);
	fleet_guest_unref(p->l);
	pthread_mutex_destroy(&p->meter_lock);
	free(p);
}
