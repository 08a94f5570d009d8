/* agentless: the host side of the exec protocol. See agentless.h for the
 * contract and wire.h for the format.
 *
 * Locking: `lock` guards the state (execs, handshake, reassembly, ping
 * waiters, the unsolicited-frame budget). The channel's send() never
 * blocks (it queues; vmm/ enforces the deadline) and is called without
 * `lock`; no callback (done, on_broken) runs with `lock` held. Lock order:
 * a caller's own locks may be held when calling in here only if its
 * callbacks do not take them (sandbox/ and api/ call in with none held);
 * `lock` is taken before the channel's internal lock (vmm/channel.c), never
 * after. A channel is closed only once no sender uses it any more
 * (`senders` drops to 0), so send() never touches a freed ctx. Each file
 * transfer (xfer.c) has its own mutex, a leaf taken under `lock` or alone,
 * never held across a send or a wake.
 *
 * Frames the host did not ask for (a HELLO after the first, a PONG nobody
 * waits for, late frames of an exec the host gave up on) are allowed at
 * UNSOLICITED_PER_S with a burst of UNSOLICITED_BURST; past that the guest
 * is flooding, which is a protocol violation.
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

/* One output stream of an exec: the head the guest shipped, <= cap bytes
 * (only counted in `len`, not kept, for a streamed exec). */
struct stream_buf {
	char *data;
	size_t len;
	size_t alloc;
	uint32_t cap;
	bool count_only;
};

struct exec {
	struct exec *next;
	uint32_t id;
	agentless_exec_done_fn done;
	agentless_output_fn on_output; /* NULL: output is buffered */
	/* set for a PROC request instead of an exec: its reply */
	agentless_proc_done_fn proc_done;
	void *opaque;
	struct stream_buf out;
	struct stream_buf err;
	char cwd[GUEST_TEXT_MAX + 1]; /* sanitised, for the cwd error */
	int64_t deadline_ms;	      /* monotonic backstop */
	int64_t started_ms;	      /* monotonic, when the EXEC was sent */
	bool killed;		      /* KILL sent once already */
	bool paused;		      /* PAUSE sent, no RESUME since */
	bool in_output;		      /* the recv thread is inside on_output */
	bool resume_wanted;	      /* resume asked for while in_output */
};

struct ping_waiter {
	struct ping_waiter *next;
	int64_t sent_us, answered_us; /* monotonic */
	uint32_t id;
	const uint8_t *payload;
	size_t len;
	bool answered;
};

/* ------------------------------------------------------------- helpers */

static void *xcalloc(size_t n, size_t size)
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

static int64_t now_mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Wait on c->cond until the sbx_mono_ms() deadline. Returns ETIMEDOUT once
 * the deadline has passed. Call with c->lock held. */
static int conn_wait_until(struct agentless_conn *c, int64_t deadline_ms)
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

static void stream_init(struct stream_buf *s, uint32_t cap)
{
	memset(s, 0, sizeof(*s));
	s->cap = cap;
}

/* Append; -1 when the stream would pass its cap. Aborts on ENOMEM. */
static int stream_append(struct stream_buf *s, const void *data, size_t len)
{
	size_t need;

	if (len == 0)
		return 0;
	if (len > s->cap || s->len > s->cap - len)
		return -1;
	if (s->count_only) {
		s->len += len;
		return 0;
	}
	need = s->len + len + 1;
	if (need > s->alloc) {
		size_t n = s->alloc ? s->alloc : 4096;
		char *p;

		while (n < need)
			n *= 2;
		n = SBX_MIN(n, (size_t)s->cap + 1);
		p = realloc(s->data, n);
		if (!p)
			abort();
		s->data = p;
		s->alloc = n;
	}
	memcpy(s->data + s->len, data, len);
	s->len += len;
	s->data[s->len] = '\0';
	return 0;
}

/* Hand the stream's bytes over as a NUL-terminated buffer. */
static char *stream_steal(struct stream_buf *s, size_t *len)
{
	char *p = s->data;

	if (!p) {
		p = xcalloc(1, 1);
	}
	*len = s->count_only ? 0 : s->len;
	s->data = NULL;
	s->len = s->alloc = 0;
	return p;
}

static void exec_free(struct exec *e)
{
	if (!e)
		return;
	free(e->out.data);
	free(e->err.data);
	free(e);
}

/* Call with c->lock held. Unlinks and returns the exec, or NULL. */
static struct exec *conn_exec_take(struct agentless_conn *c, uint32_t id)
{
	struct exec **pp;

	for (pp = &c->execs; *pp; pp = &(*pp)->next) {
		struct exec *e = *pp;

		if (e->id == id) {
			*pp = e->next;
			e->next = NULL;
			c->n_execs--;
			return e;
		}
	}
	return NULL;
}

static struct exec *conn_exec_find(struct agentless_conn *c, uint32_t id)
{
	struct exec *e;

	for (e = c->execs; e; e = e->next)
		if (e->id == id)
			return e;
	return NULL;
}

bool conn_id_used_locked(struct agentless_conn *c, uint32_t id)
{
	return conn_exec_find(c, id) || xfer_find_locked(c, id);
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

/* Fail a list of execs (already unlinked) with err; no lock held. */
/* Fail one exec or PROC request (its callback, whichever it has). */
static void exec_fail_one(struct exec *e, const struct sbx_error *err)
{
	if (e->proc_done)
		e->proc_done(e->opaque, NULL, 0, err);
	else
		e->done(e->opaque, NULL, err);
}

static void execs_fail(struct exec *list, const struct sbx_error *err)
{
	while (list) {
		struct exec *next = list->next;

		exec_fail_one(list, err);
		exec_free(list);
		list = next;
	}
}

static void reasm_reset(struct agentless_conn *c)
{
	c->hdr_got = 0;
	c->payload_got = 0;
	memset(&c->cur, 0, sizeof(c->cur));
}

/* ------------------------------------------------------------- sending */

/* Queue one frame on the channel (never blocks: the channel has its own
 * deadline). -1 when there is no usable channel or its queue refused. */
int conn_send(struct agentless_conn *c, uint8_t type, uint32_t id, const uint8_t *payload,
	      size_t len)
{
	struct wire_header h = {.type = type, .id = id, .len = (uint32_t)len};
	_cleanup_free_ uint8_t *frame = NULL;
	struct sbx_channel ch;
	int rc;

	if (len > WIRE_MAX_PAYLOAD)
		return -1;
	frame = malloc(WIRE_HEADER_LEN + len);
	if (!frame)
		return -1;
	wire_header_encode(&h, frame);
	if (len > 0)
		memcpy(frame + WIRE_HEADER_LEN, payload, len);

	pthread_mutex_lock(&c->lock);
	if (!c->have_ch || c->ch_eof) {
		pthread_mutex_unlock(&c->lock);
		return -1;
	}
	ch = c->ch;
	c->senders++;
	pthread_mutex_unlock(&c->lock);

	rc = ch.send(ch.ctx, frame, WIRE_HEADER_LEN + len);

	pthread_mutex_lock(&c->lock);
	c->senders--;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	return rc == 0 ? 0 : -1;
}

static int conn_send_welcome(struct agentless_conn *c, uint32_t version)
{
	uint8_t buf[32];
	struct wire_writer w;

	wire_writer_init(&w, buf, sizeof buf);
	wire_put_u32(&w, WIRE_T_VERSION, version);
	wire_put_u64(&w, WIRE_T_TIME_NS, now_realtime_ns());
	return conn_send(c, WIRE_WELCOME, 0, buf, w.len);
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
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);

	sbx_warn(MOD, "exec channel broken: %s", why);
	sbx_counter_add(SBX_C_CHANNEL_BROKEN, 1);
	sbx_error_set(&err, SBX_E_SANDBOX_ERROR, NULL, "%s", tenant_msg);
	execs_fail(list, &err);
	xfer_fail_list(xlist, &err);
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

static void handle_pong(struct agentless_conn *c, uint32_t id, const uint8_t *p, size_t len)
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

static void handle_output(struct agentless_conn *c, const struct wire_header *h, const uint8_t *p,
			  size_t len)
{
	struct exec *e;
	agentless_output_fn fn;
	void *opaque;
	bool pause, send_pause, resume;
	int rc;

	pthread_mutex_lock(&c->lock);
	e = conn_exec_find(c, h->id);
	if (!e) {
		bool abandoned = conn_is_abandoned(c, h->id);
		bool dropped = abandoned && conn_unsolicited_ok_locked(c);

		pthread_mutex_unlock(&c->lock);
		if (!dropped)
			conn_violation(c, "output for %s exec id %u",
				       abandoned ? "(flooding) abandoned" : "unknown", h->id);
		return;
	}
	rc = stream_append(h->type == WIRE_STDOUT ? &e->out : &e->err, p, len);
	fn = rc == 0 && len > 0 ? e->on_output : NULL;
	opaque = e->opaque;
	/* Only this thread ends an exec while in_output is set (tick skips
	 * it; attach and free close the channel, which waits for us), so e
	 * stays valid across the unlocked call. */
	e->in_output = fn != NULL;
	pthread_mutex_unlock(&c->lock);
	if (rc < 0) {
		conn_violation(c, "exec %u: %s past the cap the host asked for", h->id,
			       h->type == WIRE_STDOUT ? "stdout" : "stderr");
		return;
	}
	if (!fn)
		return;
	pause = fn(opaque, h->id, h->type == WIRE_STDERR, p, len);
	pthread_mutex_lock(&c->lock);
	send_pause = pause && !e->paused && c->version >= 3;
	if (send_pause)
		e->paused = true;
	pthread_mutex_unlock(&c->lock);
	/* in_output stays set until PAUSE is queued: a resume asked for in
	 * the meantime (the consumer drained) is sent after it, never before */
	if (send_pause)
		conn_send(c, WIRE_PAUSE, h->id, NULL, 0);
	pthread_mutex_lock(&c->lock);
	e->in_output = false;
	resume = e->resume_wanted && e->paused;
	e->resume_wanted = false;
	if (resume)
		e->paused = false;
	pthread_mutex_unlock(&c->lock);
	if (resume)
		conn_send(c, WIRE_RESUME, h->id, NULL, 0);
}

/* Take the in-flight exec a final frame (EXIT, ERROR) names. NULL when
 * there is none: a frame for an exec the host gave up on is dropped, any
 * other is a protocol violation. */
static struct exec *conn_exec_finish(struct agentless_conn *c, uint32_t id, const char *what)
{
	struct exec *e;

	pthread_mutex_lock(&c->lock);
	e = conn_exec_take(c, id);
	if (!e) {
		bool abandoned = conn_is_abandoned(c, id);
		bool dropped = abandoned && conn_unsolicited_ok_locked(c);

		pthread_mutex_unlock(&c->lock);
		if (!dropped)
			conn_violation(c, "%s for %s exec id %u", what,
				       abandoned ? "(flooding) abandoned" : "unknown", id);
		return NULL;
	}
	pthread_mutex_unlock(&c->lock);
	return e;
}

static void handle_exit(struct agentless_conn *c, const struct wire_header *h, const uint8_t *p,
			size_t len)
{
	struct agentless_exec_result res;
	struct wire_reader r;
	struct wire_field f;
	uint32_t code = 0, duration = 0, timed_out = 0;
	uint64_t out_total = 0, err_total = 0;
	bool have_code = false;
	struct exec *e;
	int rc;

	wire_reader_init(&r, p, len);
	while ((rc = wire_next(&r, &f)) == 1) {
		int bad = 0;

		switch (f.tag) {
		case WIRE_T_EXIT_CODE:
			bad = wire_field_u32(&f, &code);
			have_code = true;
			break;
		case WIRE_T_DURATION_MS:
			bad = wire_field_u32(&f, &duration);
			break;
		case WIRE_T_TIMED_OUT:
			bad = wire_field_u32(&f, &timed_out);
			break;
		case WIRE_T_STDOUT_TOTAL:
			bad = wire_field_u64(&f, &out_total);
			break;
		case WIRE_T_STDERR_TOTAL:
			bad = wire_field_u64(&f, &err_total);
			break;
		default:
			break;
		}
		if (bad)
			rc = -1;
		if (rc < 0)
			break;
	}

	e = conn_exec_finish(c, h->id, "EXIT");
	if (!e)
		return;
	sbx_hist_observe_us(SBX_H_EXEC, (sbx_mono_ms() - e->started_ms) * 1000);
	if (e->proc_done)
		rc = -1; /* a PROC is answered by PROC_REPLY, never EXIT */

	/* The guest is hostile: an exit status is 0..255 (128+signal when
	 * killed), timed_out a flag; anything else is a forged frame. */
	if (code > 255 || timed_out > 1)
		rc = -1;
	if (rc < 0 || !have_code) {
		/* put nothing back: conn_violation fails the rest, we fail this */
		struct sbx_error err;

		sbx_error_set(&err, SBX_E_SANDBOX_ERROR, NULL, MSG_VIOLATION);
		exec_fail_one(e, &err);
		exec_free(e);
		conn_violation(c, "malformed EXIT for exec %u", h->id);
		return;
	}

	memset(&res, 0, sizeof(res));
	/* shipped bytes (kept, or only counted when streamed) */
	uint64_t out_shipped = e->out.len, err_shipped = e->err.len;

	res.stdout_buf = stream_steal(&e->out, &res.stdout_len);
	res.stderr_buf = stream_steal(&e->err, &res.stderr_len);
	res.exit_code = (int)(int32_t)code;
	/* The guest's own measure, but never longer than the host saw the
	 * exec run (plus a second for clock noise). */
	int64_t seen = sbx_mono_ms() - e->started_ms + 1000;
	res.duration_ms = (int64_t)duration > seen ? (uint32_t)seen : duration;
	/* The host's own measure; the caller clamps it to the timeout. */
	res.host_ms = (uint32_t)SBX_MIN(sbx_mono_ms() - e->started_ms, (int64_t)UINT32_MAX);
	res.timed_out = timed_out != 0;
	/* never report fewer bytes than we hold */
	res.stdout_total = SBX_MAX(out_total, out_shipped);
	res.stderr_total = SBX_MAX(err_total, err_shipped);
	res.truncated = res.stdout_total > out_shipped || res.stderr_total > err_shipped;
	e->done(e->opaque, &res, NULL);
	exec_free(e);
}

static void handle_proc_reply(struct agentless_conn *c, const struct wire_header *h,
			      const uint8_t *p, size_t len)
{
	struct exec *e = conn_exec_finish(c, h->id, "PROC_REPLY");
	struct sbx_error err;

	if (!e)
		return;
	if (!e->proc_done) {
		sbx_error_set(&err, SBX_E_SANDBOX_ERROR, NULL, MSG_VIOLATION);
		exec_fail_one(e, &err);
		exec_free(e);
		conn_violation(c, "PROC_REPLY for exec %u", h->id);
		return;
	}
	/* the payload is checked by the caller, which knows its op */
	e->proc_done(e->opaque, p, len, NULL);
	exec_free(e);
}

static bool param_known(const char *param)
{
	static const char *const known[] = {"command", "cwd", "env", "timeout_ms", "pid", "signal"};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(known); i++)
		if (strcmp(param, known[i]) == 0)
			return true;
	return false;
}

int conn_error_parse(const uint8_t *p, size_t len, uint32_t *kind, char *param, size_t param_len,
		     char *msg, size_t msg_len)
{
	struct wire_reader r;
	struct wire_field f;
	bool have_kind = false;
	int rc;

	wire_reader_init(&r, p, len);
	while ((rc = wire_next(&r, &f)) == 1) {
		if (f.tag == WIRE_T_ERROR_KIND) {
			if (wire_field_u32(&f, kind) < 0)
				return -1;
			have_kind = true;
		} else if (f.tag == WIRE_T_PARAM && param) {
			sanitize_text(f.value, f.len, param, param_len);
		} else if (f.tag == WIRE_T_MESSAGE && msg) {
			sanitize_text(f.value, f.len, msg, msg_len);
		}
	}
	return rc < 0 || !have_kind ? -1 : 0;
}

static void handle_error(struct agentless_conn *c, const struct wire_header *h, const uint8_t *p,
			 size_t len)
{
	uint32_t kind = 0;
	char param[32] = "";
	char msg[GUEST_TEXT_MAX + 1] = "";
	struct sbx_error err;
	struct exec *e;
	int rc;

	rc = conn_error_parse(p, len, &kind, param, sizeof param, msg, sizeof msg);

	e = conn_exec_finish(c, h->id, "ERROR");
	if (!e)
		return;

	if (rc < 0) {
		sbx_error_set(&err, SBX_E_SANDBOX_ERROR, NULL, MSG_VIOLATION);
		exec_fail_one(e, &err);
		exec_free(e);
		conn_violation(c, "malformed ERROR for exec %u", h->id);
		return;
	}

	switch (kind) {
	case WIRE_ERR_CWD:
		sbx_error_set(&err, SBX_E_INVALID_REQUEST, "cwd",
			      "cwd '%s' does not exist or is not a directory in the sandbox",
			      e->cwd);
		break;
	case WIRE_ERR_BAD_REQUEST:
		sbx_error_set(&err, SBX_E_INVALID_REQUEST, param_known(param) ? param : NULL,
			      "the sandbox refused the command: %s",
			      msg[0] ? msg : "malformed request");
		break;
	case WIRE_ERR_BUSY:
		sbx_error_set(&err, SBX_E_RATE_LIMITED, NULL,
			      "the sandbox is running too many commands at once; retry shortly");
		err.retry_after_s = 1;
		break;
	case WIRE_ERR_SPAWN:
		sbx_error_set(&err, SBX_E_SANDBOX_ERROR, NULL,
			      "the sandbox could not start the command: %s",
			      msg[0] ? msg : "spawn failed");
		break;
	case WIRE_ERR_NO_PROCESS:
		sbx_error_set(&err, SBX_E_NOT_FOUND, NULL, "no such process in the sandbox");
		break;
	default:
		sbx_error_set(&err, SBX_E_SANDBOX_ERROR, NULL,
			      "the sandbox could not run the command");
		break;
	}
	sbx_debug(MOD, "exec %u refused by the guest (kind %u): %s", h->id, kind, msg);
	exec_fail_one(e, &err);
	exec_free(e);
}

/* One complete frame from the guest. */
static void conn_handle_frame(struct agentless_conn *c, const struct wire_header *h,
			      const uint8_t *p, size_t len)
{
	if (xfer_frame(c, h, p, len))
		return;
	switch (h->type) {
	case WIRE_HELLO:
		handle_hello(c, p, len);
		break;
	case WIRE_PONG:
		handle_pong(c, h->id, p, len);
		break;
	case WIRE_STDOUT:
	case WIRE_STDERR:
		handle_output(c, h, p, len);
		break;
	case WIRE_EXIT:
		handle_exit(c, h, p, len);
		break;
	case WIRE_ERROR:
		handle_error(c, h, p, len);
		break;
	case WIRE_PROC_REPLY:
		handle_proc_reply(c, h, p, len);
		break;
	default:
		conn_violation(c, "unexpected frame type %u from the guest", h->type);
		break;
	}
}

static void conn_eof(struct agentless_conn *c)
{
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

void agentless_conn_recv(void *conn, const void *buf, size_t len)
{
	struct agentless_conn *c = conn;
	const uint8_t *in = buf;

	if (len == 0) {
		conn_eof(c);
		return;
	}
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
	return c;
}

void agentless_conn_attach(struct agentless_conn *c, struct sbx_channel ch, bool reattach)
{
	struct sbx_channel old;
	bool had_old, old_live, welcome;
	struct exec *list;
	struct agentless_xfer *xlist;
	struct sbx_error err;
	uint32_t version;

	pthread_mutex_lock(&c->lock);
	old_live = c->have_ch && !c->ch_eof;
	had_old = conn_detach_channel(c, &old);
	pthread_mutex_unlock(&c->lock);
	if (had_old)
		old.close(old.ctx); /* no recv callback of the old channel after this */

	pthread_mutex_lock(&c->lock);
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

	if (list || xlist) {
		sbx_error_set(&err, SBX_E_SANDBOX_ERROR, NULL, MSG_GONE);
		execs_fail(list, &err);
		xfer_fail_list(xlist, &err);
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
	if (c->next_ping == 0)
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

void agentless_exec_result_release(struct agentless_exec_result *r)
{
	if (!r)
		return;
	free(r->stdout_buf);
	free(r->stderr_buf);
	memset(r, 0, sizeof(*r));
}

/* Encoded EXEC payload size, or SIZE_MAX past WIRE_MAX_PAYLOAD. */
static size_t exec_payload_size(const struct agentless_exec_req *req)
{
	size_t n = 6 + req->command_len + 6 + strlen(req->cwd) + 4 * (6 + 4);

	if (req->stdin_data)
		n += 6 + SBX_MIN(req->stdin_len, (size_t)WIRE_MAX_PAYLOAD + 1);
	if (req->user)
		n += 6 + strlen(req->user);
	if (req->command_len > WIRE_MAX_PAYLOAD || n > WIRE_MAX_PAYLOAD)
		return SIZE_MAX;
	for (size_t i = 0; i < req->n_env; i++) {
		n += 6 + strlen(req->env[i]);
		if (n > WIRE_MAX_PAYLOAD)
			return SIZE_MAX;
	}
	return n;
}

/* Put e in flight and send its frame: the channel must be up, the guest
 * must speak `need_version` (`too_old` says what an older one cannot do)
 * and max_inflight not be reached; e gets a fresh id and its backstop at
 * timeout_ms + backstop_grace_ms. 0: e's callback will run; -1 with err:
 * e was freed and no callback runs. */
static int conn_launch(struct agentless_conn *c, struct exec *e, uint8_t type, const void *payload,
		       size_t len, uint32_t timeout_ms, uint32_t need_version, const char *too_old,
		       struct sbx_error *err)
{
	uint32_t id;

	pthread_mutex_lock(&c->lock);
	if (!c->have_ch || c->ch_eof || c->broken || !c->ready) {
		char msg[sizeof c->broken_msg];

		snprintf(msg, sizeof msg, "%s", c->broken_msg[0] ? c->broken_msg : MSG_GONE);
		pthread_mutex_unlock(&c->lock);
		exec_free(e);
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "%s", msg);
	}
	if (c->version < need_version && c->version_assumed &&
	    sbx_mono_ms() < c->assumed_until_ms) {
		/* the guest's HELLO (it says one whenever a host connects)
		 * will tell its real version in a moment */
		pthread_mutex_unlock(&c->lock);
		exec_free(e);
		sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
			      "the sandbox's guest is reconnecting; retry in a second");
		if (err)
			err->retry_after_s = 1;
		return -1;
	}
	if (c->version < need_version) {
		uint32_t v = c->version;

		pthread_mutex_unlock(&c->lock);
		exec_free(e);
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL,
				     "this sandbox's guest speaks exec protocol v%u, which cannot "
				     "%s (v%u); create a new sandbox",
				     v, too_old, need_version);
	}
	if (c->n_execs >= c->lim.max_inflight) {
		pthread_mutex_unlock(&c->lock);
		exec_free(e);
		sbx_error_set(err, SBX_E_RATE_LIMITED, NULL,
			      "too many commands are running in this sandbox at once (limit %u)",
			      c->lim.max_inflight);
		if (err)
			err->retry_after_s = 1;
		return -1;
	}
	/* ids are never 0 and never reused while in flight */
	do {
		id = c->next_id++;
		if (c->next_id == 0)
			c->next_id = 1;
	} while (id == 0 || conn_id_used_locked(c, id));
	e->id = id;
	e->started_ms = sbx_mono_ms();
	e->deadline_ms = e->started_ms + (int64_t)timeout_ms + c->lim.backstop_grace_ms;
	/* in the table before the frame leaves, so a fast reply finds it */
	e->next = c->execs;
	c->execs = e;
	c->n_execs++;
	pthread_mutex_unlock(&c->lock);

	if (conn_send(c, type, id, payload, len) == 0)
		return 0;

	/* not sent: unless someone already failed it (and called its
	 * callback), take it back and report the error to the caller */
	pthread_mutex_lock(&c->lock);
	e = conn_exec_take(c, id);
	if (e)
		conn_abandon(c, id);
	pthread_mutex_unlock(&c->lock);
	if (!e)
		return 0;
	exec_free(e);
	return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, MSG_GONE);
}

int agentless_exec_start(struct agentless_conn *c, const struct agentless_exec_req *req,
			 agentless_exec_done_fn done, void *opaque, struct sbx_error *err)
{
	_cleanup_free_ uint8_t *payload = NULL;
	struct wire_writer w;
	struct exec *e;
	size_t size;

	if (!req || !done || (!req->command && req->command_len) || !req->cwd ||
	    (req->n_env && !req->env))
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "bad exec request");
	size = exec_payload_size(req);
	if (size == SIZE_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "command",
				     "the command, cwd, env and stdin together exceed %d bytes",
				     WIRE_MAX_PAYLOAD);
	payload = xcalloc(1, size);
	wire_writer_init(&w, payload, size);
	wire_put_bytes(&w, WIRE_T_COMMAND, req->command, req->command_len);
	wire_put_str(&w, WIRE_T_CWD, req->cwd);
	for (size_t i = 0; i < req->n_env; i++)
		wire_put_str(&w, WIRE_T_ENV, req->env[i]);
	wire_put_u32(&w, WIRE_T_TIMEOUT_MS, req->timeout_ms);
	wire_put_u32(&w, WIRE_T_STDOUT_CAP, req->stdout_cap);
	wire_put_u32(&w, WIRE_T_STDERR_CAP, req->stderr_cap);
	if (req->stdin_data)
		wire_put_bytes(&w, WIRE_T_STDIN, req->stdin_data, req->stdin_len);
	if (req->user)
		wire_put_str(&w, WIRE_T_USER, req->user);
	/* a v1/v2 guest skips the tag and batches: later, never wrong */
	if (req->on_output)
		wire_put_u32(&w, WIRE_T_STREAM, 1);
	if (w.overflow)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "exec request encoding overflow");

	e = xcalloc(1, sizeof(*e));
	e->done = done;
	e->on_output = req->on_output;
	e->opaque = opaque;
	stream_init(&e->out, req->stdout_cap);
	stream_init(&e->err, req->stderr_cap);
	e->out.count_only = e->err.count_only = req->on_output != NULL;
	sanitize_text(req->cwd, strlen(req->cwd), e->cwd, sizeof e->cwd);

	return conn_launch(c, e, WIRE_EXEC, payload, w.len, req->timeout_ms,
			   req->stdin_data || req->user ? 2 : 1,
			   req->user ? "pass a user" : "pass stdin", err);
}

void agentless_exec_resume(struct agentless_conn *c, uint32_t exec_id)
{
	struct exec *e;
	bool send;

	pthread_mutex_lock(&c->lock);
	e = conn_exec_find(c, exec_id);
	if (e && e->in_output) {
		e->resume_wanted = true; /* handle_output sends it */
		pthread_mutex_unlock(&c->lock);
		return;
	}
	send = e && e->paused && c->ready && !c->broken;
	if (send)
		e->paused = false;
	pthread_mutex_unlock(&c->lock);
	if (send)
		conn_send(c, WIRE_RESUME, exec_id, NULL, 0);
}

int agentless_proc_call(struct agentless_conn *c, const void *payload, size_t len,
			uint32_t timeout_ms, agentless_proc_done_fn done, void *opaque,
			struct sbx_error *err)
{
	struct exec *e;

	if (!done || len > WIRE_MAX_PAYLOAD)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
				     "the request exceeds %d bytes", WIRE_MAX_PAYLOAD);
	e = xcalloc(1, sizeof(*e));
	e->proc_done = done;
	e->opaque = opaque;
	stream_init(&e->out, 0); /* output for a PROC id is a violation */
	stream_init(&e->err, 0);
	return conn_launch(c, e, WIRE_PROC, payload, len, timeout_ms, 3, "run background processes",
			   err);
}

struct sync_exec {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	struct agentless_exec_result res;
	struct sbx_error err;
	bool failed;
};

static void sync_exec_done(void *opaque, struct agentless_exec_result *res,
			   const struct sbx_error *err)
{
	struct sync_exec *s = opaque;

	pthread_mutex_lock(&s->lock);
	if (res) {
		s->res = *res;
		memset(res, 0, sizeof(*res));
	} else {
		s->failed = true;
		if (err)
			s->err = *err;
	}
	s->done = true;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

int agentless_exec(struct agentless_conn *c, const struct agentless_exec_req *req,
		   struct agentless_exec_result *res, struct sbx_error *err)
{
	struct sync_exec s;
	pthread_condattr_t attr;
	int rc = 0;

	memset(&s, 0, sizeof(s));
	pthread_mutex_init(&s.lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&s.cond, &attr);
	pthread_condattr_destroy(&attr);

	if (agentless_exec_start(c, req, sync_exec_done, &s, err) < 0) {
		rc = -1;
		goto out_destroy;
	}
	pthread_mutex_lock(&s.lock);
	while (!s.done) {
		struct timespec ts;

		/* tick ourselves, so the backstop holds without a timer thread */
		ts = sbx_timespec_in(CLOCK_MONOTONIC, 250);
		if (pthread_cond_timedwait(&s.cond, &s.lock, &ts) == ETIMEDOUT && !s.done) {
			pthread_mutex_unlock(&s.lock);
			agentless_conn_tick(c, sbx_mono_ms());
			pthread_mutex_lock(&s.lock);
		}
	}
	pthread_mutex_unlock(&s.lock);
	if (s.failed) {
		if (err)
			*err = s.err;
		rc = -1;
	} else {
		*res = s.res;
	}
out_destroy:
	pthread_cond_destroy(&s.cond);
	pthread_mutex_destroy(&s.lock);
	return rc;
}

void agentless_conn_tick(struct agentless_conn *c, int64_t now_ms)
{
	uint32_t kill_ids[64];
	size_t n_kill = 0;
	struct exec *failed = NULL, **pp;
	struct sbx_error err;

	pthread_mutex_lock(&c->lock);
	pp = &c->execs;
	while (*pp) {
		struct exec *e = *pp;

		if (now_ms < e->deadline_ms || e->in_output) {
			pp = &e->next;
			continue;
		}
		if (!e->killed && n_kill < SBX_ARRAY_SIZE(kill_ids)) {
			e->killed = true;
			e->deadline_ms = now_ms + c->lim.backstop_grace_ms;
			kill_ids[n_kill++] = e->id;
			pp = &e->next;
			continue;
		}
		if (!e->killed) { /* KILL batch full: next tick */
			pp = &e->next;
			continue;
		}
		*pp = e->next;
		c->n_execs--;
		conn_abandon(c, e->id);
		e->next = failed;
		failed = e;
	}
	pthread_mutex_unlock(&c->lock);

	for (size_t i = 0; i < n_kill; i++) {
		sbx_warn(MOD, "exec %u missed its deadline: sending KILL", kill_ids[i]);
		conn_send(c, WIRE_KILL, kill_ids[i], NULL, 0);
	}
	xfer_tick(c, now_ms);
	if (failed) {
		sbx_warn(MOD, "giving up on execs the guest did not finish after KILL");
		sbx_error_set(&err, SBX_E_SANDBOX_ERROR, NULL,
			      "the command did not finish by its deadline and the guest did "
			      "not answer");
		execs_fail(failed, &err);
	}
}

int agentless_exec_set_deadline(struct agentless_conn *c, const void *opaque, int64_t deadline_ms)
{
	int rc = -1;

	pthread_mutex_lock(&c->lock);
	for (struct exec *e = c->execs; e; e = e->next)
		if (e->opaque == opaque && !e->killed) {
			e->deadline_ms = deadline_ms;
			rc = 0;
			break;
		}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

unsigned agentless_conn_inflight(struct agentless_conn *c)
{
	unsigned n;

	pthread_mutex_lock(&c->lock);
	n = c->n_execs;
	pthread_mutex_unlock(&c->lock);
	return n;
}

void agentless_conn_free(struct agentless_conn *c, const char *why)
{
	struct sbx_channel ch;
	struct exec *list;
	struct agentless_xfer *xlist;
	struct sbx_error err;
	bool had;

	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
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
	pthread_mutex_unlock(&c->lock);
	sbx_error_set(&err, SBX_E_SANDBOX_ERROR, NULL, "%s", why ? why : MSG_GONE);
	execs_fail(list, &err);
	xfer_fail_list(xlist, &err);

	free(c->payload);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
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
