/* agentless: the host side of the exec protocol, its connection: the
 * channel, sending, the handshake, frame reassembly and dispatch, pings and
 * breaking. Executions are exec.c's, file transfers xfer.c's, background
 * process replies process.c's. See agentless.h for the contract and wire.h
 * for the format.
 *
 * Locking: `lock` guards the state (execs, handshake, reassembly, ping
 * waiters, the unsolicited-frame budget). The channel's send() never
 * blocks (it queues; vmm/ enforces the deadline) and is called without
 * `lock`; no callback (done, on_broken) runs with `lock` held. Lock order:
 * a caller's own locks may be held when calling in here only if its
 * callbacks do not take them (sandbox/ and api/ call in with none held);
 * `lock` is taken before the channel's internal lock (vmm/channel.c), never
 * after. `send_lock` serialises senders (count, queue the frame, queue its
 * window PING): it is taken first, before `lock` and the channel's lock,
 * by conn_send_ex alone, and is held only across send() calls that queue
 * and never block. Without it a PING could be queued behind another
 * sender's frame that the window holds back, and never reach the guest
 * whose PONG would open the window. A channel is closed only once no sender uses it any more
 * (`senders` drops to 0), so send() never touches a freed ctx. Each file
 * transfer (xfer.c) has its own mutex, a leaf taken under `lock` or alone,
 * never held across a send or a wake.
 *
 * Frames the host did not ask for (a HELLO after the first, a PONG nobody
 * waits for, late frames of an exec the host gave up on) are allowed at
 * UNSOLICITED_PER_S with a burst of UNSOLICITED_BURST; past that the guest
 * is flooding, which is a protocol violation.
 *
 * Every frame counts against the frame budget (agentless.h,
 * conn_frame_budget): past it the recv thread asks the channel to hold
 * its input (hold_rx, called unlocked and counted as a sender so the
 * channel is not detached under it), or, on a channel without hold_rx,
 * breaks the connection once the guest is far past it.
 */
#include "agentless/agentless.h"
#include "agentless/agentless-priv.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "agentless/wire.h"

#define MOD		     "agentless"
#define DEFAULT_MAX_INFLIGHT 64

_Static_assert(AGENTLESS_PROC_RING == WIRE_PROC_RING && AGENTLESS_PROC_CHUNK == WIRE_PROC_CHUNK &&
		   AGENTLESS_PROC_MAX == WIRE_PROC_MAX,
	       "agentless.h mirrors wire.h's process constants");
/* After a reattach without HELLO, how long a request that needs a newer
 * version than the assumed oldest one is told to retry (503) rather than
 * refused (500): the guest says HELLO when a host connects, or when a
 * WELCOME names an older version than its own. */
#define VERSION_WAIT_MS 10000
/* Unsolicited frames: a token bucket per connection. */
#define UNSOLICITED_BURST 32
#define UNSOLICITED_PER_S 8

/* ------------------------------------------------------------- helpers */

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n, size);

	if (!p)
		abort();
	return p;
}

/* Printable ASCII only, at most GUEST_TEXT_MAX bytes, into out. */
void sanitize_text(const void *in, size_t len, char *out, size_t outlen)
{
	const unsigned char *s = in;
	size_t n = SBX_MIN(len, (size_t)GUEST_TEXT_MAX);
	size_t i;

	if (outlen == 0)
		return;
	n = SBX_MIN(n, outlen - 1);
	for (i = 0; i < n; i++)
		out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? (char)s[i] : '?';
	out[i] = '\0';
}

static uint64_t now_realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int64_t now_mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int conn_wait_until(struct agentless_conn *c, int64_t deadline_ms)
{
	int64_t left = deadline_ms - sbx_mono_ms();
	struct timespec ts;

	if (left <= 0)
		return ETIMEDOUT;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += left / 1000;
	ts.tv_nsec += (left % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(&c->cond, &c->lock, &ts);
	return 0;
}

void conn_abandon(struct agentless_conn *c, uint32_t id)
{
	c->abandoned[c->abandoned_pos] = id;
	c->abandoned_pos = (c->abandoned_pos + 1) % ABANDONED_MAX;
	if (c->n_abandoned < ABANDONED_MAX)
		c->n_abandoned++;
}

bool conn_is_abandoned(struct agentless_conn *c, uint32_t id)
{
	for (unsigned i = 0; i < c->n_abandoned; i++)
		if (c->abandoned[i] == id)
			return true;
	return false;
}

/* Take one token for an unsolicited frame: false when the guest is
 * flooding. Call with c->lock held. */
bool conn_unsolicited_ok_locked(struct agentless_conn *c)
{
	int64_t now = sbx_mono_ms();

	c->unsolicited_tokens += (double)(now - c->unsolicited_at_ms) * UNSOLICITED_PER_S / 1000.0;
	if (c->unsolicited_tokens > UNSOLICITED_BURST)
		c->unsolicited_tokens = UNSOLICITED_BURST;
	c->unsolicited_at_ms = now;
	if (c->unsolicited_tokens < 1.0)
		return false;
	c->unsolicited_tokens -= 1.0;
	return true;
}

static void reasm_reset(struct agentless_conn *c)
{
	c->hdr_got = 0;
	c->payload_got = 0;
	memset(&c->cur, 0, sizeof(c->cur));
}

/* ------------------------------------------------------------- sending */

/* Queue one frame on the channel (never blocks: the channel has its own
 * deadline); with `set_window`, the channel's credit window restarts at
 * the frame's end with `window` bytes (0: none). -1 when there is no
 * usable channel or its queue refused. */
static int conn_send_ex(struct agentless_conn *c, uint8_t type, uint32_t id, const uint8_t *payload,
			size_t len, bool set_window, size_t window)
{
	struct wire_header h = {.type = type, .id = id, .len = (uint32_t)len};
	_cleanup_free_ uint8_t *frame = NULL;
	struct sbx_channel ch;
	uint32_t epoch, ping_id = 0;
	bool counted;
	int rc;

	if (len > WIRE_MAX_PAYLOAD)
		return -1;
	frame = malloc(WIRE_HEADER_LEN + len);
	if (!frame)
		return -1;
	wire_header_encode(&h, frame);
	if (len > 0)
		memcpy(frame + WIRE_HEADER_LEN, payload, len);

	pthread_mutex_lock(&c->send_lock);
	pthread_mutex_lock(&c->lock);
	if (!c->have_ch || c->ch_eof) {
		pthread_mutex_unlock(&c->lock);
		pthread_mutex_unlock(&c->send_lock);
		return -1;
	}
	if (c->ping_window && !set_window && len > WIN_FRAME_MAX) {
		/* it could never be confirmed: the window would stay shut */
		pthread_mutex_unlock(&c->lock);
		pthread_mutex_unlock(&c->send_lock);
		return -1;
	}
	ch = c->ch;
	c->senders++;
	/* counted only when it is queued wholly after the window opened */
	counted = c->ping_window && !set_window;
	epoch = c->credit_epoch;
	pthread_mutex_unlock(&c->lock);

	if (set_window && ch.send_window)
		rc = ch.send_window(ch.ctx, frame, WIRE_HEADER_LEN + len, window);
	else
		rc = ch.send(ch.ctx, frame, WIRE_HEADER_LEN + len);

	pthread_mutex_lock(&c->lock);
	if (rc == 0 && counted && c->ping_window && c->credit_epoch == epoch) {
		c->win_sent += WIRE_HEADER_LEN + len;
		if (c->win_sent - c->win_pinged >= WIN_PING_EVERY &&
		    c->win_ping_n < WIN_PINGS_MAX) {
			unsigned i = (c->win_ping_head + c->win_ping_n++) % WIN_PINGS_MAX;

			ping_id = WIN_PING_BIT | c->next_win_ping++;
			c->win_pings[i].id = ping_id;
			c->win_pings[i].mark = c->win_sent;
			c->win_pinged = c->win_sent;
		}
	}
	pthread_mutex_unlock(&c->lock);
	/* its PONG confirms every byte counted so far, all queued before it:
	 * still under send_lock, so nothing is queued in between */
	if (ping_id != 0) {
		struct wire_header ph = {.type = WIRE_PING, .id = ping_id, .len = 0};
		uint8_t ping[WIRE_HEADER_LEN];

		wire_header_encode(&ph, ping);
		if (ch.send(ch.ctx, ping, sizeof ping) == 0) {
			pthread_mutex_lock(&c->lock);
			if (c->ping_window && c->credit_epoch == epoch)
				c->win_sent += sizeof ping;
			pthread_mutex_unlock(&c->lock);
		}
	}
	pthread_mutex_lock(&c->lock);
	c->senders--;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_unlock(&c->send_lock);
	return rc == 0 ? 0 : -1;
}

int conn_send(struct agentless_conn *c, uint8_t type, uint32_t id, const uint8_t *payload,
	      size_t len)
{
	return conn_send_ex(c, type, id, payload, len, false, 0);
}

void conn_send_error(struct agentless_conn *c, uint32_t id, uint32_t kind, const char *msg)
{
	uint8_t b[WIRE_HEADER_LEN + 256];
	struct wire_writer w;

	wire_writer_init(&w, b, sizeof b);
	wire_put_u32(&w, WIRE_T_ERROR_KIND, kind);
	wire_put_bytes(&w, WIRE_T_MESSAGE, msg, SBX_MIN(strlen(msg), (size_t)200));
	conn_send(c, WIRE_ERROR, id, b, w.len);
}

/* WELCOME: to a v4 guest over a channel with a window (the stream
 * transport) the first one opens a credit window under a fresh epoch (the
 * channel starts counting at the WELCOME's end, as the guest does); later
 * ones on the same channel repeat that epoch and leave the window alone,
 * so a guest cannot reopen it by saying HELLO again (or another version)
 * while it does not read. Without a window: id 0, no WINDOW. */
static int conn_send_welcome(struct agentless_conn *c, uint32_t version)
{
	uint8_t buf[48];
	struct wire_writer w;
	uint32_t epoch, id;
	bool open_now = false, switched = false, credit;

	pthread_mutex_lock(&c->lock);
	/* Only a channel that can hold bytes back (the stream transport)
	 * has a window, and there every guest gets one, whatever it says or
	 * does not say: a v4 guest CREDITs, any other one is confirmed by
	 * PINGs (ping_window). The window opens once per channel (reopening
	 * it would forget what is in flight), and moves from PINGs to CREDITs
	 * once, when a v4 HELLO comes (after a reattach): the guest's count
	 * then starts at this WELCOME's end (credit_base). Never back, and
	 * never reopened by another HELLO. */
	credit = version >= 4;
	if (c->have_ch && c->ch.send_window && c->credit_epoch == 0) {
		c->ping_window = !credit;
		c->win_sent = c->win_pinged = 0;
		c->win_ping_head = c->win_ping_n = 0;
		c->credit_base = 0;
		c->win_credited = c->guest_acked = 0;
		open_now = true;
	} else if (c->have_ch && c->ch.send_window && c->ping_window && credit) {
		c->ping_window = false; /* counting stops: win_sent stays */
		switched = true;
	}
	if (open_now || switched) {
		epoch = ++c->next_epoch;
		if (epoch == 0)
			epoch = ++c->next_epoch;
		c->credit_epoch = epoch;
	}
	epoch = c->credit_epoch;
	/* the guest learns of the window only when it can CREDIT */
	id = c->ping_window ? 0 : epoch;
	wire_writer_init(&w, buf, sizeof buf);
	wire_put_u32(&w, WIRE_T_VERSION, version);
	wire_put_u64(&w, WIRE_T_TIME_NS, now_realtime_ns());
	if (id != 0)
		wire_put_u32(&w, WIRE_T_WINDOW, WIRE_CHANNEL_WINDOW);
	/* the WELCOME lands at or after what was counted; a CREDIT of
	 * this epoch cannot come before it is sent */
	if (switched)
		c->credit_base = c->win_sent + WIRE_HEADER_LEN + w.len;
	pthread_mutex_unlock(&c->lock);

	return conn_send_ex(c, WIRE_WELCOME, id, buf, w.len, open_now, WIRE_CHANNEL_WINDOW);
}

/* Detach the channel once nobody sends on it; the caller closes it. Call
 * with c->lock held; returns with it held. */
static bool conn_detach_channel(struct agentless_conn *c, struct sbx_channel *out)
{
	if (!c->have_ch)
		return false;
	c->ch_eof = true; /* no new senders */
	while (c->senders > 0)
		pthread_cond_wait(&c->cond, &c->lock);
	*out = c->ch;
	memset(&c->ch, 0, sizeof(c->ch));
	c->have_ch = false;
	return true;
}

/* ------------------------------------------------------------- breaking */

/* Mark the connection broken (once per channel), fail every in-flight exec
 * with SBX_E_SANDBOX_ERROR and tell the owner. Called on the recv thread
 * without locks. */
static void conn_break(struct agentless_conn *c, const char *tenant_msg, const char *why)
{
	struct sbx_error err;
	struct exec *list;
	struct agentless_xfer *xlist;
	struct agentless_tcp *tlist;

	pthread_mutex_lock(&c->lock);
	c->rx_dead = true;
	if (c->broken) {
		pthread_mutex_unlock(&c->lock);
		return;
	}
	c->broken = true;
	c->ready = false;
	c->hello_pending = false;
	snprintf(c->broken_msg, sizeof c->broken_msg, "%s", tenant_msg);
	list = c->execs;
	c->execs = NULL;
	c->n_execs = 0;
	xlist = c->xfers;
	c->xfers = NULL;
	c->n_xfers = 0;
	tlist = c->tcps;
	c->tcps = NULL;
	c->n_tcps = 0;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);

	sbx_warn(MOD, "exec channel broken: %s", why);
	sbx_counter_add(SBX_C_CHANNEL_BROKEN, 1);
	sbx_error_set(&err, SBX_E_SANDBOX_ERROR, NULL, "%s", tenant_msg);
	execs_fail(list, &err);
	xfer_fail_list(xlist, &err);
	tcp_fail_list(tlist, &err);
	if (c->on_broken)
		c->on_broken(c->opaque, why);
}

void conn_violation(struct agentless_conn *c, const char *fmt, ...)
{
	char detail[192], why[256];
	va_list ap;

	va_start(ap, fmt);
	if (vsnprintf(detail, sizeof detail, fmt, ap) < 0)
		detail[0] = '\0';
	va_end(ap);
	snprintf(why, sizeof why, "protocol violation: %s", detail);
	sbx_counter_add(SBX_C_CHANNEL_VIOLATIONS, 1);
	conn_break(c, MSG_VIOLATION, why);
}

/* ------------------------------------------------------------ receiving */

static void handle_hello(struct agentless_conn *c, const uint8_t *p, size_t len)
{
	struct wire_reader r;
	struct wire_field f;
	uint32_t gver = 0, gmin = 0, boot_ms = 0;
	bool have_ver = false, have_min = false, send_now;
	uint32_t version;
	bool flood;
	int rc;

	/* One HELLO per channel is the handshake; more are unsolicited. */
	pthread_mutex_lock(&c->lock);
	flood = ++c->hellos > 1 && !conn_unsolicited_ok_locked(c);
	pthread_mutex_unlock(&c->lock);
	if (flood) {
		conn_violation(c, "a flood of HELLOs");
		return;
	}
	wire_reader_init(&r, p, len);
	while ((rc = wire_next(&r, &f)) == 1) {
		int bad = 0;

		if (f.tag == WIRE_T_VERSION) {
			bad = wire_field_u32(&f, &gver);
			have_ver = true;
		} else if (f.tag == WIRE_T_VERSION_MIN) {
			bad = wire_field_u32(&f, &gmin);
			have_min = true;
		} else if (f.tag == WIRE_T_BOOT_MS) {
			bad = wire_field_u32(&f, &boot_ms);
		}
		if (bad) {
			conn_violation(c, "HELLO field %u has length %u", f.tag, f.len);
			return;
		}
	}
	if (rc < 0 || !have_ver) {
		conn_violation(c, "malformed HELLO");
		return;
	}
	if (!have_min)
		gmin = gver;
	version = SBX_MIN(gver, (uint32_t)WIRE_VERSION);
	if (version < WIRE_VERSION_MIN || gmin > WIRE_VERSION || gmin > gver) {
		char why[128];

		snprintf(why, sizeof why, "guest speaks protocol [%u, %u], host [%u, %u]", gmin,
			 gver, WIRE_VERSION_MIN, WIRE_VERSION);
		conn_break(c, "the sandbox's guest speaks an unsupported exec protocol version",
			   why);
		return;
	}
	sbx_debug(MOD, "HELLO version %u (guest [%u, %u]), guest up %u ms", version, gmin, gver,
		  boot_ms);

	pthread_mutex_lock(&c->lock);
	c->version = version;
	c->version_assumed = false;
	send_now = c->have_ch && !c->ch_eof;
	if (!send_now)
		c->hello_pending = true;
	pthread_mutex_unlock(&c->lock);
	if (!send_now)
		return;

	if (conn_send_welcome(c, version) < 0) {
		/* the channel is going away; its EOF breaks the conn */
		sbx_warn(MOD, "could not send WELCOME");
		return;
	}
	pthread_mutex_lock(&c->lock);
	if (!c->broken) {
		c->ready = true;
		c->hello_pending = false;
	}
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

/* CREDIT (v4): the guest read `ACKED` bytes since the WELCOME of epoch
 * `id`. One of an older epoch (sent before the guest read the newest
 * WELCOME) is unsolicited; one that goes back or claims more than was
 * written is a lie that breaks the channel. */
static void handle_credit(struct agentless_conn *c, uint32_t id, const uint8_t *p, size_t len)
{
	struct wire_reader r;
	struct wire_field f;
	uint64_t acked = 0, base, credited, gacked;
	bool have = false, stale, flood = false;
	struct sbx_channel ch;
	int rc;

	wire_reader_init(&r, p, len);
	while ((rc = wire_next(&r, &f)) == 1)
		if (f.tag == WIRE_T_ACKED) {
			if (wire_field_u64(&f, &acked) < 0) {
				rc = -1;
				break;
			}
			have = true;
		}
	if (rc < 0 || !have) {
		conn_violation(c, "malformed CREDIT");
		return;
	}
	pthread_mutex_lock(&c->lock);
	stale = c->credit_epoch == 0 || c->ping_window || id != c->credit_epoch || !c->have_ch ||
		c->ch_eof;
	if (stale)
		flood = !conn_unsolicited_ok_locked(c);
	else
		c->senders++; /* keeps ch.ctx alive, as in conn_send */
	ch = c->ch;
	base = c->credit_base;
	credited = c->win_credited;
	gacked = c->guest_acked;
	pthread_mutex_unlock(&c->lock);
	if (stale) {
		if (flood)
			conn_violation(c, "a flood of CREDITs for epoch %u", id);
		return;
	}
	/* a PONG of a PING sent before the window moved to CREDITs may have
	 * credited more already: the channel's count only goes forward */
	rc = acked < gacked || acked > UINT64_MAX - base ? -1 : 0;
	if (rc == 0 && ch.credit && base + acked > credited)
		rc = ch.credit(ch.ctx, base + acked);
	pthread_mutex_lock(&c->lock);
	if (rc == 0) {
		c->guest_acked = acked;
		c->win_credited = SBX_MAX(c->win_credited, base + acked);
	}
	c->senders--;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	if (rc < 0)
		conn_violation(c, "CREDIT of %llu bytes: more than was sent, or less than before",
			       (unsigned long long)acked);
}

/* The PONG of a window PING (ping_window): the guest read every byte
 * counted before it; the channel may write a window past that. */
static void handle_win_pong(struct agentless_conn *c, uint32_t id, size_t len)
{
	uint64_t mark = 0, credited;
	bool found = false, flood = false;
	struct sbx_channel ch;
	int rc;

	pthread_mutex_lock(&c->lock);
	/* answered in order: older ones are confirmed by this one too */
	for (unsigned k = 0; k < c->win_ping_n && len == 0; k++) {
		unsigned i = (c->win_ping_head + k) % WIN_PINGS_MAX;

		if (c->win_pings[i].id == id) {
			mark = c->win_pings[i].mark;
			c->win_ping_head = (i + 1) % WIN_PINGS_MAX;
			c->win_ping_n -= k + 1;
			found = true;
			break;
		}
	}
	if (!found)
		flood = !conn_unsolicited_ok_locked(c);
	/* still after the move to CREDITs: what is held back behind the
	 * WELCOME that tells the guest so needs them to get through */
	found = found && c->credit_epoch != 0 && c->have_ch && !c->ch_eof;
	if (found)
		c->senders++; /* keeps ch.ctx alive, as in conn_send */
	ch = c->ch;
	credited = c->win_credited;
	pthread_mutex_unlock(&c->lock);
	if (!found) {
		if (flood)
			conn_violation(c, "a flood of unsolicited PONGs");
		return;
	}
	rc = 0;
	if (ch.credit && mark > credited)
		rc = ch.credit(ch.ctx, mark);
	pthread_mutex_lock(&c->lock);
	if (rc == 0)
		c->win_credited = SBX_MAX(c->win_credited, mark);
	c->senders--;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	if (rc < 0)
		sbx_warn(MOD, "window PONG: the channel refused a credit of %llu bytes",
			 (unsigned long long)mark);
}

/* One complete frame from the guest. */
static void conn_handle_frame(struct agentless_conn *c, const struct wire_header *h,
			      const uint8_t *p, size_t len)
{
	if (h->type != WIRE_STDOUT && h->type != WIRE_STDERR)
		exec_output_flush(c); /* gathered output comes before this */
	if (xfer_frame(c, h, p, len) || tcp_frame(c, h, p, len) || exec_frame(c, h, p, len))
		return;
	switch (h->type) {
	case WIRE_HELLO:
		handle_hello(c, p, len);
		break;
	case WIRE_PONG:
		if (h->id & WIN_PING_BIT)
			handle_win_pong(c, h->id, len);
		else
			conn_ping_answered(c, h->id, p, len);
		break;
	case WIRE_CREDIT:
		handle_credit(c, h->id, p, len);
		break;
	default:
		conn_violation(c, "unexpected frame type %u from the guest", h->type);
		break;
	}
}

static void conn_eof(struct agentless_conn *c)
{
	exec_output_flush(c);
	pthread_mutex_lock(&c->lock);
	c->ch_eof = true;
	reasm_reset(c);
	pthread_mutex_unlock(&c->lock);
	conn_break(c, MSG_GONE, "channel closed");
	/* whatever arrives next comes from a new channel */
	pthread_mutex_lock(&c->lock);
	c->rx_dead = false;
	c->hello_pending = false;
	pthread_mutex_unlock(&c->lock);
}

static void conn_recv_frames(struct agentless_conn *c, const uint8_t *in, size_t len);

/* Charge the frames of one read to the frame budget (agentless.h); past
 * it, hold the channel's input until the bucket is back at 0, or, on a
 * channel that cannot hold, break it once the guest is too far past.
 * Recv thread, no lock held; the channel's hold_rx is called unlocked, as
 * a sender (a detach waits for it). */
static void conn_frame_budget(struct agentless_conn *c, unsigned frames)
{
	int64_t now = sbx_mono_ms(), hold_ms = 0;
	struct sbx_channel ch = {0};
	bool flood = false, log = false;
	double debt;

	pthread_mutex_lock(&c->lock);
	c->frame_tokens += (double)(now - c->frame_at_ms) * AGENTLESS_FRAMES_PER_S / 1000.0;
	c->frame_tokens = SBX_MIN(c->frame_tokens, (double)AGENTLESS_FRAME_BURST);
	c->frame_at_ms = now;
	c->frame_tokens -= frames;
	debt = -c->frame_tokens;
	if (debt > 0 && c->have_ch && !c->ch_eof && !c->rx_dead) {
		if (c->ch.hold_rx) {
			ch = c->ch;
			c->senders++;
			hold_ms = (int64_t)(debt * 1000.0 / AGENTLESS_FRAMES_PER_S) + 1;
			log = now - c->frame_logged_ms >= 10000;
			if (log)
				c->frame_logged_ms = now;
		} else {
			flood = debt > AGENTLESS_FRAME_DEBT_MAX;
		}
	}
	pthread_mutex_unlock(&c->lock);

	if (flood) {
		conn_violation(c, "a flood of frames (past %d a second)", AGENTLESS_FRAMES_PER_S);
		return;
	}
	if (!ch.hold_rx)
		return;
	if (log)
		sbx_info(MOD, "guest past its frame budget (%d a second): its input waits %lld ms",
			 AGENTLESS_FRAMES_PER_S, (long long)hold_ms);
	ch.hold_rx(ch.ctx, hold_ms);
	pthread_mutex_lock(&c->lock);
	c->senders--;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

void agentless_conn_recv(void *conn, const void *buf, size_t len)
{
	struct agentless_conn *c = conn;

	if (len == 0) {
		conn_eof(c);
		return;
	}
	c->rx_frames = 0;
	conn_recv_frames(c, buf, len);
	exec_output_flush(c); /* nothing gathered waits for the next read */
	conn_frame_budget(c, c->rx_frames);
}

static void conn_recv_frames(struct agentless_conn *c, const uint8_t *in, size_t len)
{
	/* The recv thread is the only one that touches the reassembly state
	 * (besides attach/free after the channel closed), so it is read
	 * without the lock; the lock only guards the hand-off points. */
	while (len > 0) {
		struct wire_header h;
		size_t n;
		bool dead;

		pthread_mutex_lock(&c->lock);
		dead = c->rx_dead;
		pthread_mutex_unlock(&c->lock);
		if (dead)
			return;

		if (c->hdr_got < WIRE_HEADER_LEN) {
			n = SBX_MIN(len, WIRE_HEADER_LEN - c->hdr_got);
			memcpy(c->hdr + c->hdr_got, in, n);
			c->hdr_got += n;
			in += n;
			len -= n;
			if (c->hdr_got < WIRE_HEADER_LEN)
				return;
			if (wire_header_decode(c->hdr, WIRE_MAX_GUEST_PAYLOAD, &c->cur) < 0) {
				uint32_t claimed = (uint32_t)c->hdr[8] << 24 |
						   (uint32_t)c->hdr[9] << 16 |
						   (uint32_t)c->hdr[10] << 8 | c->hdr[11];

				reasm_reset(c);
				conn_violation(c, "bad frame header (type %u, len %u)",
					       (unsigned)c->hdr[0], claimed);
				return;
			}
			c->payload_got = 0;
			if (c->cur.len > c->payload_alloc) {
				uint8_t *p = realloc(c->payload, c->cur.len);

				if (!p)
					abort();
				c->payload = p;
				c->payload_alloc = c->cur.len;
			}
		}
		n = SBX_MIN(len, (size_t)c->cur.len - c->payload_got);
		if (n > 0) {
			memcpy(c->payload + c->payload_got, in, n);
			c->payload_got += n;
			in += n;
			len -= n;
		}
		if (c->payload_got < c->cur.len)
			return;
		h = c->cur;
		reasm_reset(c);
		c->rx_frames++;
		conn_handle_frame(c, &h, c->payload, h.len);
	}
}

/* -------------------------------------------------------------- public */

struct agentless_conn *agentless_conn_new(const struct agentless_limits *lim,
					  agentless_broken_fn on_broken, void *opaque)
{
	struct agentless_conn *c = xcalloc(1, sizeof(*c));
	pthread_condattr_t attr;

	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->send_lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cond, &attr);
	pthread_condattr_destroy(&attr);
	if (lim)
		c->lim = *lim;
	if (c->lim.max_inflight == 0)
		c->lim.max_inflight = DEFAULT_MAX_INFLIGHT;
	c->on_broken = on_broken;
	c->opaque = opaque;
	c->next_id = 1;
	c->next_ping = 1;
	c->unsolicited_tokens = UNSOLICITED_BURST;
	c->unsolicited_at_ms = sbx_mono_ms();
	c->frame_tokens = AGENTLESS_FRAME_BURST;
	c->frame_at_ms = c->unsolicited_at_ms;
	return c;
}

void agentless_conn_attach(struct agentless_conn *c, struct sbx_channel ch, bool reattach)
{
	struct sbx_channel old;
	bool had_old, old_live, welcome;
	struct exec *list;
	struct agentless_xfer *xlist;
	struct agentless_tcp *tlist;
	struct sbx_error err;
	uint32_t version;

	pthread_mutex_lock(&c->lock);
	if (c->closed) {
		pthread_mutex_unlock(&c->lock);
		ch.close(ch.ctx); /* closed for good: nothing is received any more */
		return;
	}
	old_live = c->have_ch && !c->ch_eof;
	had_old = conn_detach_channel(c, &old);
	pthread_mutex_unlock(&c->lock);
	if (had_old)
		old.close(old.ctx); /* no recv callback of the old channel after this */

	pthread_mutex_lock(&c->lock);
	if (c->closed) { /* closed meanwhile */
		pthread_mutex_unlock(&c->lock);
		ch.close(ch.ctx);
		return;
	}
	if (old_live) {
		/* the old channel may have stopped mid-frame */
		reasm_reset(c);
		c->hello_pending = false;
	}
	c->ch = ch;
	c->have_ch = true;
	c->ch_eof = false;
	c->broken = false;
	c->rx_dead = false;
	c->broken_msg[0] = '\0';
	c->ready = false;
	c->hellos = 0;
	c->credit_epoch = 0; /* the new channel has no window yet */
	c->ping_window = false;
	c->win_ping_n = 0;
	c->co_len = 0;
	c->unsolicited_tokens = UNSOLICITED_BURST;
	c->unsolicited_at_ms = sbx_mono_ms();
	/* execs sent over the old channel cannot be trusted to finish */
	list = c->execs;
	c->execs = NULL;
	c->n_execs = 0;
	for (struct exec *e = list; e; e = e->next)
		conn_abandon(c, e->id);
	xlist = c->xfers;
	c->xfers = NULL;
	c->n_xfers = 0;
	tlist = c->tcps;
	c->tcps = NULL;
	c->n_tcps = 0;
	welcome = reattach || c->hello_pending;
	/* A guest we did not hear HELLO from is assumed to speak only the
	 * oldest version (it may have been booted by an older daemon). */
	if (reattach && c->version == 0) {
		c->version = WIRE_VERSION_MIN;
		c->version_assumed = true;
		c->assumed_until_ms = sbx_mono_ms() + VERSION_WAIT_MS;
	}
	version = c->version;
	pthread_mutex_unlock(&c->lock);

	if (list || xlist || tlist) {
		sbx_error_set(&err, SBX_E_SANDBOX_ERROR, NULL, MSG_GONE);
		execs_fail(list, &err);
		xfer_fail_list(xlist, &err);
		tcp_fail_list(tlist, &err);
	}
	if (welcome) {
		if (conn_send_welcome(c, version) < 0) {
			sbx_warn(MOD, "could not send WELCOME on attach");
			return;
		}
		pthread_mutex_lock(&c->lock);
		if (!c->broken) {
			c->ready = true;
			c->hello_pending = false;
		}
		pthread_cond_broadcast(&c->cond);
		pthread_mutex_unlock(&c->lock);
	}
}

int agentless_conn_wait_hello(struct agentless_conn *c, int64_t deadline_ms, struct sbx_error *err)
{
	int rc = 0;

	pthread_mutex_lock(&c->lock);
	while (!c->ready && !c->broken) {
		if (conn_wait_until(c, deadline_ms) == ETIMEDOUT)
			break;
	}
	if (c->ready)
		rc = 0;
	else if (c->broken)
		rc = sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "%s",
				   c->broken_msg[0] ? c->broken_msg : MSG_GONE);
	else
		rc = sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				   "the sandbox's guest did not become ready in time; retry later");
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int agentless_conn_send_time(struct agentless_conn *c, struct sbx_error *err)
{
	uint8_t buf[16];
	struct wire_writer w;
	bool ok;

	pthread_mutex_lock(&c->lock);
	ok = c->ready && !c->broken;
	pthread_mutex_unlock(&c->lock);
	if (!ok)
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, MSG_GONE);
	wire_writer_init(&w, buf, sizeof buf);
	wire_put_u64(&w, WIRE_T_TIME_NS, now_realtime_ns());
	if (conn_send(c, WIRE_TIME, 0, buf, w.len) < 0)
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, MSG_GONE);
	return 0;
}

bool agentless_conn_alive(struct agentless_conn *c)
{
	bool alive;

	pthread_mutex_lock(&c->lock);
	alive = c->have_ch && !c->ch_eof && !c->broken && c->ready;
	pthread_mutex_unlock(&c->lock);
	return alive;
}

void agentless_conn_close(struct agentless_conn *c, const char *why)
{
	struct sbx_channel ch;
	struct exec *list;
	struct agentless_xfer *xlist;
	struct agentless_tcp *tlist;
	struct sbx_error err;
	bool had;

	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->closed = true; /* no attach from now on */
	had = conn_detach_channel(c, &ch);
	pthread_mutex_unlock(&c->lock);
	if (had)
		ch.close(ch.ctx); /* after this no recv callback runs */

	pthread_mutex_lock(&c->lock);
	list = c->execs;
	c->execs = NULL;
	c->n_execs = 0;
	xlist = c->xfers;
	c->xfers = NULL;
	c->n_xfers = 0;
	tlist = c->tcps;
	c->tcps = NULL;
	c->n_tcps = 0;
	/* later calls (and waiters: hello, pings) fail at once with `why` */
	if (!c->broken) {
		c->broken = true;
		snprintf(c->broken_msg, sizeof c->broken_msg, "%s", why ? why : MSG_GONE);
	}
	c->ready = false;
	c->hello_pending = false;
	c->rx_dead = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	sbx_error_set(&err, SBX_E_SANDBOX_ERROR, NULL, "%s", why ? why : MSG_GONE);
	execs_fail(list, &err);
	xfer_fail_list(xlist, &err);
	tcp_fail_list(tlist, &err);
}

void agentless_conn_free(struct agentless_conn *c, const char *why)
{
	if (!c)
		return;
	agentless_conn_close(c, why);
	free(c->payload);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->send_lock);
	free(c);
}

uint32_t agentless_conn_version(struct agentless_conn *c)
{
	uint32_t v;

	pthread_mutex_lock(&c->lock);
	v = c->version;
	pthread_mutex_unlock(&c->lock);
	return v;
}
