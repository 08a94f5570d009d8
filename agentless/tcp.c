/* agentless/tcp.c: TCP streams over the exec channel (protocol v6), the
 * host side: a byte stream to a connection the guest's agent holds to its
 * own loopback. See agentless.h ("TCP streams") for the contract and
 * wire.h for the frames.
 *
 * Locking: as xfer.c. conn->lock guards the conn's list of streams
 * (membership, `aborted`); each stream's `mu` guards the rest and is a
 * leaf taken after conn->lock, never before. Frames are sent and wakes
 * called with neither held. A stream is reference-counted (the conn's
 * list, the caller's handle, a frame being handled).
 *
 * The guest is hostile: TCP_OPENED twice or unasked, TCP_DATA before
 * TCP_OPENED, after its FIN or past the credit the host granted, a TCP_ACK
 * past what was sent or going back, a second FIN, a stream id the host did
 * not open (guest-opened ids are not accepted yet) are protocol violations
 * that break this guest's channel. A guest that does not answer the open
 * within open_ms, or a stream that moves no byte either way for idle_ms,
 * fails only that stream.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentless/agentless-priv.h"

#define MOD	       "agentless"
#define TCP_LISTED_MAX (2 * WIRE_TCP_MAX)
/* An aborted stream stays listed this long, absorbing late frames. */
#define TCP_ABORT_KEEP_MS 10000
#define TCP_LATE_FRAMES	  64
#define TCP_ACK_STEP	  (WIRE_TCP_WINDOW / 4)
/* A guest-opened stream the callee has not answered by then is reset (the
 * callee's own deadlines are shorter: this is a backstop). */
#define TCP_ACCEPT_BACKSTOP_MS 120000
#define MSG_OLD_VERSION                                                                            \
	"this sandbox's guest speaks exec protocol v%u, which has no TCP streams; create a new "   \
	"sandbox"

_Static_assert(AGENTLESS_TCP_WINDOW == WIRE_TCP_WINDOW, "one window");
_Static_assert(AGENTLESS_TCP_MAX == WIRE_TCP_MAX, "one stream cap");
_Static_assert(AGENTLESS_TCP_HOST_MAX == WIRE_TCP_HOST_MAX, "one host length");

struct agentless_tcp {
	struct agentless_tcp *next; /* conn->tcps; conn->lock */
	uint32_t id;
	bool guest_opened; /* fixed: an egress stream (v7) */
	agentless_tcp_wake_fn wake;
	void *opaque;

	/* conn->lock */
	bool listed;
	bool aborted;
	int64_t aborted_at_ms;
	uint64_t late_bytes;
	unsigned late_frames;

	pthread_mutex_t mu;
	pthread_cond_t cond;
	int refs;
	unsigned waking;
	bool released;

	enum agentless_tcp_state state;
	struct sbx_error err;
	int64_t open_deadline_ms;  /* OPENING */
	int64_t first_deadline_ms; /* no byte from the guest yet: 0 = none */
	uint32_t first_byte_ms;
	uint32_t idle_ms;
	int64_t progress_ms;

	/* host -> guest */
	uint64_t sent, acked;
	bool fin_sent;
	/* guest -> host */
	uint8_t *ring; /* WIRE_TCP_WINDOW bytes, at the first data */
	size_t ring_head, ring_len;
	uint64_t received, consumed, ack_sent;
	bool fin_got;
};

static void tcp_unref(struct agentless_tcp *t)
{
	bool last;

	pthread_mutex_lock(&t->mu);
	last = --t->refs == 0;
	pthread_mutex_unlock(&t->mu);
	if (!last)
		return;
	free(t->ring);
	pthread_cond_destroy(&t->cond);
	pthread_mutex_destroy(&t->mu);
	free(t);
}

static void tcp_wake(struct agentless_tcp *t)
{
	bool run;

	pthread_mutex_lock(&t->mu);
	run = !t->released && t->wake;
	if (run)
		t->waking++;
	pthread_mutex_unlock(&t->mu);
	if (!run)
		return;
	t->wake(t->opaque);
	pthread_mutex_lock(&t->mu);
	if (--t->waking == 0)
		pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->mu);
}

static void tcp_fail_locked(struct agentless_tcp *t, const struct sbx_error *err)
{
	if (t->state == AGENTLESS_TCP_FAILED || t->state == AGENTLESS_TCP_CLOSED)
		return;
	t->state = AGENTLESS_TCP_FAILED;
	t->err = *err;
}

struct agentless_tcp *tcp_find_locked(struct agentless_conn *c, uint32_t id)
{
	for (struct agentless_tcp *t = c->tcps; t; t = t->next)
		if (t->id == id)
			return t;
	return NULL;
}

/* Streams the host opened in use: neither reset nor given back (a released one is reset at
 * the next tick and no longer counts). conn->lock held. */
static unsigned tcp_active_locked(struct agentless_conn *c)
{
	unsigned n = 0;

	for (struct agentless_tcp *t = c->tcps; t; t = t->next) {
		bool released;

		if (t->aborted || t->guest_opened)
			continue;
		pthread_mutex_lock(&t->mu);
		released = t->released;
		pthread_mutex_unlock(&t->mu);
		n += !released;
	}
	return n;
}

static void tcp_unlink_locked(struct agentless_conn *c, struct agentless_tcp *t)
{
	for (struct agentless_tcp **pp = &c->tcps; *pp; pp = &(*pp)->next) {
		if (*pp == t) {
			*pp = t->next;
			t->next = NULL;
			t->listed = false;
			c->n_tcps--;
			return;
		}
	}
}

static void tcp_mark_aborted_locked(struct agentless_tcp *t, int64_t now_ms)
{
	t->aborted = true;
	t->aborted_at_ms = now_ms;
	t->late_bytes = WIRE_TCP_WINDOW;
	t->late_frames = 0;
}

static void send_close(struct agentless_conn *c, uint32_t id, bool abort_it)
{
	uint8_t b[16];
	struct wire_writer w;

	wire_writer_init(&w, b, sizeof b);
	if (abort_it)
		wire_put_u32(&w, WIRE_T_ABORT, 1);
	conn_send(c, WIRE_TCP_CLOSE, id, b, w.len);
}

static void send_ack(struct agentless_conn *c, uint32_t id, uint64_t acked)
{
	uint8_t b[16];
	struct wire_writer w;

	wire_writer_init(&w, b, sizeof b);
	wire_put_u64(&w, WIRE_T_ACKED, acked);
	conn_send(c, WIRE_TCP_ACK, id, b, w.len);
}

void tcp_fail_list(struct agentless_tcp *list, const struct sbx_error *err)
{
	while (list) {
		struct agentless_tcp *next = list->next;

		list->next = NULL;
		list->listed = false;
		pthread_mutex_lock(&list->mu);
		tcp_fail_locked(list, err);
		pthread_mutex_unlock(&list->mu);
		tcp_wake(list);
		tcp_unref(list);
		list = next;
	}
}

/* ------------------------------------------------------------ receiving */

struct verdict {
	char violation[160];
	bool final; /* over both ways: unlink */
};

/* Both halves closed: the stream is over. mu held. */
static void maybe_closed(struct agentless_tcp *t, struct verdict *v)
{
	if (t->fin_sent && t->fin_got && t->state == AGENTLESS_TCP_OPEN) {
		t->state = AGENTLESS_TCP_CLOSED;
		v->final = true;
	}
}

static void ring_put(struct agentless_tcp *t, const uint8_t *p, size_t len)
{
	size_t tail = (t->ring_head + t->ring_len) % WIRE_TCP_WINDOW;
	size_t first = SBX_MIN(len, (size_t)WIRE_TCP_WINDOW - tail);

	memcpy(t->ring + tail, p, first);
	memcpy(t->ring, p + first, len - first);
	t->ring_len += len;
}

static size_t ring_get(struct agentless_tcp *t, uint8_t *out, size_t max)
{
	size_t n = SBX_MIN(max, t->ring_len);
	size_t first = SBX_MIN(n, (size_t)WIRE_TCP_WINDOW - t->ring_head);

	memcpy(out, t->ring + t->ring_head, first);
	memcpy(out + first, t->ring, n - first);
	t->ring_head = (t->ring_head + n) % WIRE_TCP_WINDOW;
	t->ring_len -= n;
	return n;
}

static void on_opened(struct agentless_tcp *t, size_t len, struct verdict *v)
{
	if (t->state != AGENTLESS_TCP_OPENING || len != 0 || t->guest_opened) {
		snprintf(v->violation, sizeof v->violation, "TCP_OPENED for stream %u", t->id);
		return;
	}
	t->state = AGENTLESS_TCP_OPEN;
}

static void on_data(struct agentless_tcp *t, const uint8_t *p, size_t len, struct verdict *v)
{
	if (t->state == AGENTLESS_TCP_OPENING || t->fin_got || len == 0) {
		snprintf(v->violation, sizeof v->violation, "TCP_DATA for stream %u", t->id);
		return;
	}
	if (t->received + len > t->ack_sent + WIRE_TCP_WINDOW) {
		snprintf(v->violation, sizeof v->violation,
			 "stream %u: data past the credit the host gave", t->id);
		return;
	}
	t->received += len;
	t->first_deadline_ms = 0;
	if (t->state != AGENTLESS_TCP_OPEN)
		return; /* failed meanwhile (the host gave up): dropped */
	if (!t->ring && !(t->ring = malloc(WIRE_TCP_WINDOW)))
		abort();
	ring_put(t, p, len);
}

static void on_ack(struct agentless_tcp *t, const uint8_t *p, size_t len, struct verdict *v)
{
	struct wire_reader r;
	struct wire_field f;
	uint64_t acked = 0;
	bool have = false;
	int rc;

	wire_reader_init(&r, p, len);
	while ((rc = wire_next(&r, &f)) == 1)
		if (f.tag == WIRE_T_ACKED) {
			if (wire_field_u64(&f, &acked) < 0)
				rc = -1;
			if (rc < 0)
				break;
			have = true;
		}
	if (rc < 0 || !have || acked > t->sent || acked < t->acked) {
		snprintf(v->violation, sizeof v->violation, "bad TCP_ACK for stream %u", t->id);
		return;
	}
	t->acked = acked;
}

static void on_close(struct agentless_tcp *t, const uint8_t *p, size_t len, struct verdict *v)
{
	struct wire_reader r;
	struct wire_field f;
	uint32_t ab = 0;
	int rc;

	wire_reader_init(&r, p, len);
	while ((rc = wire_next(&r, &f)) == 1)
		if (f.tag == WIRE_T_ABORT && (wire_field_u32(&f, &ab) < 0 || ab > 1)) {
			rc = -1;
			break;
		}
	if (rc < 0 || (t->state == AGENTLESS_TCP_OPENING && !(t->guest_opened && ab)) ||
	    (t->fin_got && !ab)) {
		snprintf(v->violation, sizeof v->violation, "bad TCP_CLOSE for stream %u", t->id);
		return;
	}
	if (ab) {
		struct sbx_error e;

		sbx_error_clear(&e);
		sbx_error_set(&e, SBX_E_PORT_UNREACHABLE, NULL, "%s",
			      t->guest_opened ? "the sandbox reset the connection"
					      : "the connection to the sandbox's port was reset");
		tcp_fail_locked(t, &e);
		v->final = true;
		return;
	}
	t->fin_got = true;
	t->first_deadline_ms = 0;
	maybe_closed(t, v);
}

static void on_error(struct agentless_tcp *t, const uint8_t *p, size_t len, struct verdict *v)
{
	uint32_t kind = 0;
	char msg[GUEST_TEXT_MAX + 1] = "";
	struct sbx_error e;

	v->final = true;
	if (t->state != AGENTLESS_TCP_OPENING || t->guest_opened ||
	    conn_error_parse(p, len, &kind, NULL, 0, msg, sizeof msg) < 0) {
		snprintf(v->violation, sizeof v->violation, "ERROR for stream %u", t->id);
		return;
	}
	sbx_error_clear(&e);
	if (kind == WIRE_ERR_REFUSED) {
		sbx_error_set(&e, SBX_E_PORT_UNREACHABLE, NULL,
			      "nothing in the sandbox accepts connections on the port (%s)",
			      msg[0] ? msg : "refused");
	} else if (kind == WIRE_ERR_BUSY) {
		sbx_error_set(&e, SBX_E_RATE_LIMITED, NULL,
			      "the sandbox holds too many port connections at once; retry shortly");
		e.retry_after_s = 1;
	} else {
		sbx_error_set(&e, SBX_E_SANDBOX_ERROR, NULL,
			      "the sandbox could not open the port: %s", msg[0] ? msg : "failed");
	}
	tcp_fail_locked(t, &e);
}

static bool late_ok_locked(struct agentless_conn *c, struct agentless_tcp *t,
			   const struct wire_header *h)
{
	if (h->type == WIRE_TCP_DATA && h->len <= t->late_bytes) {
		t->late_bytes -= h->len;
		return true;
	}
	if (t->late_frames < TCP_LATE_FRAMES) {
		t->late_frames++;
		return true;
	}
	return conn_unsolicited_ok_locked(c);
}

/* The guest's TCP_OPEN {HOST, PORT}: a bad id breaks the channel; a bad
 * destination, a conn without a callee or too many streams get an ERROR
 * and no stream; else a stream is listed and handed to the callee. */
static void guest_open(struct agentless_conn *c, uint32_t id, const uint8_t *p, size_t len)
{
	char host[WIRE_TCP_HOST_MAX + 1] = "";
	struct wire_reader r;
	struct wire_field f;
	struct agentless_tcp *t;
	uint32_t port = 0, kind = 0;
	const char *why = NULL;
	unsigned mine = 0;
	int rc;

	wire_reader_init(&r, p, len);
	while ((rc = wire_next(&r, &f)) == 1) {
		if (f.tag == WIRE_T_PORT && wire_field_u32(&f, &port) < 0)
			port = 0;
		if (f.tag == WIRE_T_HOST && f.len >= 1 && f.len <= WIRE_TCP_HOST_MAX) {
			memcpy(host, f.value, f.len);
			host[f.len] = '\0';
		}
	}
	for (const char *q = host; *q; q++)
		if (*q <= ' ' || *q > '~')
			host[0] = '\0';
	pthread_mutex_lock(&c->lock);
	if (!(id & WIRE_TCP_GUEST_BIT) || tcp_find_locked(c, id)) {
		pthread_mutex_unlock(&c->lock);
		conn_violation(c, "TCP_OPEN from the guest with stream id %u", id);
		return;
	}
	for (t = c->tcps; t; t = t->next)
		mine += t->guest_opened && !t->aborted;
	if (rc < 0 || !host[0] || port < 1 || port > 65535)
		kind = WIRE_ERR_BAD_REQUEST, why = "TCP_OPEN needs HOST and PORT 1..65535";
	else if (!c->tcp_accept || c->version < 7)
		kind = WIRE_ERR_FORBIDDEN, why = "this sandbox has no network";
	else if (mine >= c->tcp_accept_max || c->n_tcps >= TCP_LISTED_MAX)
		kind = WIRE_ERR_BUSY, why = "too many connections from this sandbox at once";
	if (why) {
		pthread_mutex_unlock(&c->lock);
		conn_send_error(c, id, kind, why);
		return;
	}
	t = xcalloc(1, sizeof(*t));
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->cond, NULL);
	t->id = id;
	t->guest_opened = true;
	t->refs = 2; /* the list's, the callee's */
	t->state = AGENTLESS_TCP_OPENING;
	t->open_deadline_ms = sbx_mono_ms() + TCP_ACCEPT_BACKSTOP_MS;
	t->idle_ms = 60000;
	t->progress_ms = sbx_mono_ms();
	t->listed = true;
	t->next = c->tcps;
	c->tcps = t;
	c->n_tcps++;
	pthread_mutex_unlock(&c->lock);
	c->tcp_accept(c->tcp_accept_opaque, t, host, (uint16_t)port);
}

bool tcp_frame(struct agentless_conn *c, const struct wire_header *h, const uint8_t *p, size_t len)
{
	struct verdict v = {0};
	struct agentless_tcp *t;
	bool is_tcp = h->type >= WIRE_TCP_OPEN && h->type <= WIRE_TCP_CLOSE;

	if (!is_tcp && h->type != WIRE_ERROR)
		return false;
	if (h->type == WIRE_TCP_OPEN) {
		guest_open(c, h->id, p, len);
		return true;
	}
	pthread_mutex_lock(&c->lock);
	t = tcp_find_locked(c, h->id);
	if (!t) {
		bool abandoned = conn_is_abandoned(c, h->id);
		bool dropped = abandoned && is_tcp && conn_unsolicited_ok_locked(c);

		pthread_mutex_unlock(&c->lock);
		if (!is_tcp)
			return false;
		if (!dropped)
			conn_violation(c, "frame type %u for %s stream id %u", h->type,
				       abandoned ? "(flooding) abandoned" : "unknown", h->id);
		return true;
	}
	if (t->aborted) {
		bool ok = late_ok_locked(c, t, h);

		pthread_mutex_unlock(&c->lock);
		if (!ok)
			conn_violation(c, "a flood of frames for aborted stream %u", h->id);
		return true;
	}
	pthread_mutex_lock(&t->mu);
	t->refs++;
	t->progress_ms = sbx_mono_ms();
	switch (h->type) {
	case WIRE_TCP_OPENED:
		on_opened(t, len, &v);
		break;
	case WIRE_TCP_DATA:
		on_data(t, p, len, &v);
		break;
	case WIRE_TCP_ACK:
		on_ack(t, p, len, &v);
		break;
	case WIRE_TCP_CLOSE:
		on_close(t, p, len, &v);
		break;
	default: /* WIRE_ERROR */
		on_error(t, p, len, &v);
		break;
	}
	pthread_mutex_unlock(&t->mu);
	if (v.violation[0]) {
		pthread_mutex_unlock(&c->lock);
		conn_violation(c, "%s", v.violation);
		tcp_unref(t);
		return true;
	}
	if (v.final) {
		tcp_unlink_locked(c, t);
		conn_abandon(c, t->id);
		tcp_unref(t); /* the list's */
	}
	pthread_mutex_unlock(&c->lock);
	tcp_wake(t);
	tcp_unref(t);
	return true;
}

/* -------------------------------------------------------------- public */

int agentless_tcp_open(struct agentless_conn *c, const struct agentless_tcp_req *req,
		       agentless_tcp_wake_fn wake, void *opaque, struct agentless_tcp **out,
		       struct sbx_error *err)
{
	uint8_t b[16];
	struct wire_writer w;
	struct agentless_tcp *t;
	unsigned max =
	    req->max_streams && req->max_streams < WIRE_TCP_MAX ? req->max_streams : WIRE_TCP_MAX;
	uint32_t id;
	int64_t now = sbx_mono_ms();

	if (req->port < 1 || req->port > 65535)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "port",
				     "port must be a number 1..65535");
	t = xcalloc(1, sizeof(*t));
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->cond, NULL);
	t->wake = wake;
	t->opaque = opaque;
	t->refs = 2;
	t->state = AGENTLESS_TCP_OPENING;
	t->open_deadline_ms = now + (req->open_ms ? req->open_ms : 10000);
	t->first_byte_ms = req->first_byte_ms;
	t->idle_ms = req->idle_ms ? req->idle_ms : 60000;
	t->progress_ms = now;

	pthread_mutex_lock(&c->lock);
	if (!c->have_ch || c->ch_eof || c->broken || !c->ready) {
		char msg[sizeof c->broken_msg];

		snprintf(msg, sizeof msg, "%s", c->broken_msg[0] ? c->broken_msg : MSG_GONE);
		pthread_mutex_unlock(&c->lock);
		sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "%s", msg);
		goto err_free;
	}
	if (c->version < 6) {
		uint32_t v = c->version;

		pthread_mutex_unlock(&c->lock);
		sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, MSG_OLD_VERSION, v);
		goto err_free;
	}
	if (tcp_active_locked(c) >= max || c->n_tcps >= TCP_LISTED_MAX) {
		pthread_mutex_unlock(&c->lock);
		sbx_error_set(err, SBX_E_RATE_LIMITED, NULL,
			      "too many connections to this sandbox's ports at once (limit %u)",
			      max);
		if (err)
			err->retry_after_s = 1;
		goto err_free;
	}
	do {
		id = c->next_id++;
		if (c->next_id == 0 || c->next_id >= WIRE_TCP_GUEST_BIT)
			c->next_id = 1;
	} while (id == 0 || (id & WIRE_TCP_GUEST_BIT) || conn_id_used_locked(c, id));
	t->id = id;
	t->listed = true;
	t->next = c->tcps;
	c->tcps = t;
	c->n_tcps++;
	*out = t;
	pthread_mutex_unlock(&c->lock);

	wire_writer_init(&w, b, sizeof b);
	wire_put_u32(&w, WIRE_T_PORT, req->port);
	if (conn_send(c, WIRE_TCP_OPEN, id, b, w.len) < 0) {
		struct sbx_error e;

		sbx_error_clear(&e);
		sbx_error_set(&e, SBX_E_SANDBOX_ERROR, NULL, MSG_GONE);
		pthread_mutex_lock(&t->mu);
		tcp_fail_locked(t, &e);
		pthread_mutex_unlock(&t->mu);
	}
	return 0;

err_free:
	pthread_cond_destroy(&t->cond);
	pthread_mutex_destroy(&t->mu);
	free(t);
	return -1;
}

long agentless_tcp_write(struct agentless_conn *c, struct agentless_tcp *t, const void *data,
			 size_t len)
{
	const uint8_t *p = data;
	uint64_t credit;
	size_t n, off = 0;

	pthread_mutex_lock(&t->mu);
	if (t->state == AGENTLESS_TCP_FAILED || t->state == AGENTLESS_TCP_CLOSED || t->fin_sent) {
		pthread_mutex_unlock(&t->mu);
		return -1;
	}
	if (t->state == AGENTLESS_TCP_OPENING) {
		pthread_mutex_unlock(&t->mu);
		return 0;
	}
	credit = t->acked + WIRE_TCP_WINDOW - t->sent;
	n = (size_t)SBX_MIN((uint64_t)len, credit);
	t->sent += n;
	if (n)
		t->progress_ms = sbx_mono_ms();
	pthread_mutex_unlock(&t->mu);
	/* one writer per stream (its HTTP request's thread): frames in order */
	while (off < n) {
		size_t k = SBX_MIN(n - off, (size_t)WIRE_MAX_CHUNK);

		if (conn_send(c, WIRE_TCP_DATA, t->id, p + off, k) < 0)
			return -1;
		off += k;
	}
	return (long)n;
}

void agentless_tcp_await(struct agentless_tcp *t)
{
	pthread_mutex_lock(&t->mu);
	if (t->first_byte_ms && t->received == 0 && !t->fin_got && !t->first_deadline_ms)
		t->first_deadline_ms = sbx_mono_ms() + t->first_byte_ms;
	pthread_mutex_unlock(&t->mu);
}

int agentless_tcp_shutdown(struct agentless_conn *c, struct agentless_tcp *t)
{
	struct verdict v = {0};

	pthread_mutex_lock(&t->mu);
	if (t->state != AGENTLESS_TCP_OPEN || t->fin_sent) {
		pthread_mutex_unlock(&t->mu);
		return -1;
	}
	t->fin_sent = true;
	maybe_closed(t, &v);
	pthread_mutex_unlock(&t->mu);
	send_close(c, t->id, false);
	if (v.final) {
		pthread_mutex_lock(&c->lock);
		if (t->listed && !t->aborted) {
			tcp_unlink_locked(c, t);
			conn_abandon(c, t->id);
			pthread_mutex_unlock(&c->lock);
			tcp_unref(t);
		} else {
			pthread_mutex_unlock(&c->lock);
		}
	}
	return 0;
}

size_t agentless_tcp_read(struct agentless_conn *c, struct agentless_tcp *t, void *buf, size_t max)
{
	size_t n = 0;
	uint64_t ack = 0;
	bool send = false;

	pthread_mutex_lock(&t->mu);
	if (t->ring && t->ring_len)
		n = ring_get(t, buf, max);
	t->consumed += n;
	if (n)
		t->progress_ms = sbx_mono_ms();
	if (t->state == AGENTLESS_TCP_OPEN && !t->fin_got && t->consumed > t->ack_sent &&
	    (t->consumed - t->ack_sent >= TCP_ACK_STEP || t->ring_len == 0)) {
		t->ack_sent = t->consumed;
		ack = t->ack_sent;
		send = true;
	}
	pthread_mutex_unlock(&t->mu);
	if (send && c)
		send_ack(c, t->id, ack);
	return n;
}

void agentless_tcp_status(struct agentless_tcp *t, struct agentless_tcp_status *st)
{
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&t->mu);
	st->state = t->state;
	st->err = t->err;
	st->buffered = t->ring_len;
	st->eof = t->fin_got;
	st->received = t->received;
	if (t->state == AGENTLESS_TCP_OPEN && !t->fin_sent)
		st->writable = t->acked + WIRE_TCP_WINDOW - t->sent;
	pthread_mutex_unlock(&t->mu);
}

void agentless_tcp_release(struct agentless_tcp *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	t->released = true;
	while (t->waking > 0)
		pthread_cond_wait(&t->cond, &t->mu);
	pthread_mutex_unlock(&t->mu);
	/* a stream still listed is reset by the next tick */
	tcp_unref(t);
}

void agentless_set_tcp_accept(struct agentless_conn *c, agentless_tcp_accept_fn accept,
			      void *opaque, unsigned max)
{
	pthread_mutex_lock(&c->lock);
	c->tcp_accept = accept;
	c->tcp_accept_opaque = opaque;
	c->tcp_accept_max = max && max < WIRE_TCP_MAX ? max : WIRE_TCP_MAX;
	pthread_mutex_unlock(&c->lock);
}

int agentless_tcp_accept(struct agentless_conn *c, struct agentless_tcp *t,
			 agentless_tcp_wake_fn wake, void *opaque, uint32_t idle_ms)
{
	pthread_mutex_lock(&t->mu);
	if (!t->guest_opened || t->state != AGENTLESS_TCP_OPENING) {
		pthread_mutex_unlock(&t->mu);
		return -1;
	}
	t->state = AGENTLESS_TCP_OPEN;
	t->wake = wake;
	t->opaque = opaque;
	t->idle_ms = idle_ms ? idle_ms : 60000;
	t->progress_ms = sbx_mono_ms();
	pthread_mutex_unlock(&t->mu);
	return conn_send(c, WIRE_TCP_OPENED, t->id, NULL, 0);
}

void agentless_tcp_refuse(struct agentless_conn *c, struct agentless_tcp *t,
			  enum agentless_refusal why, const char *msg)
{
	static const uint32_t kinds[] = {
	    [AGENTLESS_REFUSE_FORBIDDEN] = WIRE_ERR_FORBIDDEN,
	    [AGENTLESS_REFUSE_FAILED] = WIRE_ERR_REFUSED,
	    [AGENTLESS_REFUSE_TIMEOUT] = WIRE_ERR_TIMEOUT,
	    [AGENTLESS_REFUSE_BUSY] = WIRE_ERR_BUSY,
	};
	uint32_t kind = kinds[why];
	struct sbx_error e;
	bool was_opening;

	sbx_error_clear(&e);
	sbx_error_set(&e, SBX_E_PORT_UNREACHABLE, NULL, "%s", msg);
	pthread_mutex_lock(&t->mu);
	was_opening = t->guest_opened && t->state == AGENTLESS_TCP_OPENING;
	if (was_opening)
		tcp_fail_locked(t, &e);
	pthread_mutex_unlock(&t->mu);
	if (!was_opening)
		return;
	pthread_mutex_lock(&c->lock);
	if (t->listed && !t->aborted) {
		tcp_unlink_locked(c, t);
		conn_abandon(c, t->id);
		pthread_mutex_unlock(&c->lock);
		tcp_unref(t); /* the list's */
	} else {
		pthread_mutex_unlock(&c->lock);
	}
	conn_send_error(c, t->id, kind, msg);
}

/* ------------------------------------------------------------------ tick */

/* Why a live stream fails now (mu held), or NULL. */
static const char *overdue_locked(const struct agentless_tcp *t, int64_t now_ms,
				  enum sbx_code *code)
{
	*code = SBX_E_PORT_TIMEOUT;
	if (t->state == AGENTLESS_TCP_OPENING && now_ms >= t->open_deadline_ms)
		return t->guest_opened
			   ? "the host did not answer the sandbox's connection in time"
			   : "the sandbox did not open the connection to the port in time";
	if (t->state != AGENTLESS_TCP_OPEN)
		return NULL;
	if (t->first_deadline_ms && now_ms >= t->first_deadline_ms)
		return "the server in the sandbox did not answer in time";
	if (now_ms - t->progress_ms >= (int64_t)t->idle_ms)
		return "the connection to the sandbox's port was idle too long";
	return NULL;
}

void tcp_tick(struct agentless_conn *c, int64_t now_ms)
{
	uint32_t reset_ids[TCP_LISTED_MAX];
	struct agentless_tcp *woken[TCP_LISTED_MAX];
	size_t n_reset = 0, n_woken = 0;
	struct agentless_tcp **pp;

	pthread_mutex_lock(&c->lock);
	pp = &c->tcps;
	while (*pp) {
		struct agentless_tcp *t = *pp;
		enum sbx_code code;
		const char *why;
		bool released;

		if (t->aborted) {
			if (now_ms - t->aborted_at_ms >= TCP_ABORT_KEEP_MS) {
				*pp = t->next;
				t->next = NULL;
				t->listed = false;
				c->n_tcps--;
				conn_abandon(c, t->id);
				pthread_mutex_unlock(&c->lock);
				tcp_unref(t);
				pthread_mutex_lock(&c->lock);
				pp = &c->tcps;
				continue;
			}
			pp = &t->next;
			continue;
		}
		pthread_mutex_lock(&t->mu);
		released = t->released;
		why = released ? NULL : overdue_locked(t, now_ms, &code);
		if (why) {
			struct sbx_error e;

			sbx_error_clear(&e);
			sbx_error_set(&e, code, NULL, "%s", why);
			tcp_fail_locked(t, &e);
			t->refs++;
		}
		pthread_mutex_unlock(&t->mu);
		if ((released || why) && n_reset < TCP_LISTED_MAX) {
			tcp_mark_aborted_locked(t, now_ms);
			reset_ids[n_reset++] = t->id;
			if (why)
				woken[n_woken++] = t;
		}
		pp = &t->next;
	}
	pthread_mutex_unlock(&c->lock);
	for (size_t i = 0; i < n_reset; i++)
		send_close(c, reset_ids[i], true);
	for (size_t i = 0; i < n_woken; i++) {
		tcp_wake(woken[i]);
		tcp_unref(woken[i]);
	}
}
