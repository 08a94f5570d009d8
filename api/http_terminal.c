/* api/http_terminal.c: GET /v1/sandboxes/{id}/terminal, a terminal over a
 * WebSocket (docs/api.md "Terminal"). The handler checks the upgrade
 * request, takes the terminal's place in the per-sandbox and per-account
 * counts, starts the exec user's login shell on a pseudo-terminal in the
 * guest (a streamed exec with pty_rows/pty_cols, protocol v5) and answers
 * 101; libmicrohttpd then hands the socket over and one thread per
 * terminal moves bytes both ways (RFC 6455 framing in util/ws.c):
 *
 *   client -> guest: binary and text messages are keystrokes, a text
 *     message {"type":"resize","rows":R,"cols":C} resizes. The socket is
 *     read only while the guest's input window (AGENTLESS_PTY_WINDOW, its
 *     PTY_ACKs) has room, so a paste waits in the client's TCP buffer.
 *   guest -> client: the shell's output (on_output, the channel's thread)
 *     is kept in the terminal's buffer; past TERM_OUT_PAUSE the guest is
 *     asked to stop reading the pty (PAUSE) until the client has taken it
 *     (RESUME below TERM_OUT_RESUME). What arrives after the PAUSE (the
 *     guest's queued frames) is bounded by TERM_OUT_HARD: past it the
 *     client is too slow and its terminal ends. So a client that never
 *     reads costs its own terminal's buffer and nothing else.
 *
 * The end: the shell exits -> {"type":"exit","exit_code":N} and a close
 * frame 1000 "exit N"; the client closes (or goes away, or is idle for
 * terminal_idle_timeout_ms, or the server stops) -> the shell is hung up
 * (SIGHUP, then its cgroup is killed). A terminal struct lives until both
 * its thread and its exec's done are through (refs); its place in the
 * counts is given back then.
 *
 * Locking: reg.lock (the registry) and each terminal's t->lock are leaves,
 * never held together, never across a sandbox/ call or socket I/O.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <json-c/json.h>

#include "http-priv.h"

#define MOD "api"

#define TERM_FRAME_MAX	  (64u * 1024) /* a client frame's payload */
#define TERM_TEXT_MAX	  (64u * 1024) /* a client text message */
#define TERM_IN_BUF	  (TERM_FRAME_MAX + WS_HEADER_MAX)
#define TERM_PEND_MAX	  (64u * 1024)	      /* keystrokes waiting for the window */
#define TERM_OUT_PAUSE	  (256u * 1024)	      /* PAUSE the guest above this */
#define TERM_OUT_RESUME	  (64u * 1024)	      /* RESUME it below this */
#define TERM_OUT_HARD	  (16u * 1024 * 1024) /* past this the client is too slow */
#define TERM_CHUNK	  (16u * 1024)	      /* output bytes per frame to the client */
#define TERM_CTRL_MAX	  1024		      /* queued control frames (pongs) */
#define TERM_FLUSH_MS	  2000		      /* the last frames' chance to leave */
#define TERM_HOST_MAX	  1024		      /* terminals on this host, whatever the config */
#define TERM_DEFAULT_ROWS 24
#define TERM_DEFAULT_COLS 80

struct term {
	pthread_mutex_t lock;
	int refs; /* the thread's (or the handler's before it) + the exec's */
	struct sandbox_svc *svc;
	uint32_t idle_ms;
	char account_id[SANDBOX_ID_MAX];
	char sandbox_id[SANDBOX_ID_MAX];
	uint32_t exec_id;
	int efd; /* eventfd: wakes the thread */

	/* guest -> client, under lock */
	uint8_t *out;
	size_t out_len, out_cap;
	bool upgraded; /* the socket is the thread's */
	bool paused;   /* on_output asked the guest to PAUSE */
	bool too_slow; /* out passed TERM_OUT_HARD */
	bool done;     /* the exec ended: exit_code, or failed with err */
	bool failed;
	int exit_code;
	struct sbx_error err;

	/* the thread's own */
	MHD_socket sock;
	int reg_sock; /* sock while the thread has it open; under reg.lock */
	/* what out holds, charged to the output budget (sandbox.h) */
	struct sandbox_output_hold hold;
	struct MHD_UpgradeResponseHandle *urh;
	uint8_t in[TERM_IN_BUF];
	size_t in_len;
	uint8_t pend[TERM_PEND_MAX];
	size_t pend_len;
	uint8_t *text; /* a text message being assembled (TERM_TEXT_MAX) */
	size_t text_len;
	bool in_text;	/* inside a fragmented text message */
	bool in_binary; /* inside a fragmented binary message */
	uint8_t wq[WS_HEADER_MAX + TERM_CHUNK + TERM_CTRL_MAX];
	size_t wq_len, wq_off;
	int64_t active_ms; /* last byte either way */

	struct term *prev, *next; /* the registry's list */
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct term *head;
	unsigned n;	  /* terminals counted (until freed) */
	unsigned threads; /* threads whose socket is still open */
	bool stopping;
} reg = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static void wake(struct term *t)
{
	uint64_t one = 1;

	if (write(t->efd, &one, sizeof one) < 0) {
		/* the counter is full: it is awake already */
	}
}

/* ------------------------------------------------------------ registry */

/* Count t against its sandbox's and account's limits. 0, or -1 with 429. */
static int reg_add(struct term *t, const struct sandbox_config *cfg, struct sbx_error *err)
{
	int per_sb = 0, per_acct = 0;

	pthread_mutex_lock(&reg.lock);
	for (struct term *o = reg.head; o; o = o->next) {
		if (strcmp(o->account_id, t->account_id) != 0)
			continue;
		per_acct++;
		if (strcmp(o->sandbox_id, t->sandbox_id) == 0)
			per_sb++;
	}
	if (reg.stopping || reg.n >= TERM_HOST_MAX || per_sb >= cfg->max_terminals_per_sandbox ||
	    per_acct >= cfg->max_terminals_per_account) {
		bool sb = per_sb >= cfg->max_terminals_per_sandbox;
		bool acct = per_acct >= cfg->max_terminals_per_account;
		bool stopping = reg.stopping;

		pthread_mutex_unlock(&reg.lock);
		if (stopping)
			return sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
					     "the server is stopping");
		if (!sb && !acct)
			sbx_error_set(
			    err, SBX_E_CONCURRENCY_LIMIT, NULL,
			    "this server has %d terminals open (its limit); try again later",
			    TERM_HOST_MAX);
		else if (sb)
			sbx_error_set(err, SBX_E_CONCURRENCY_LIMIT, NULL,
				      "sandbox '%s' has %d terminals open (the limit); close one",
				      t->sandbox_id, per_sb);
		else
			sbx_error_set(err, SBX_E_CONCURRENCY_LIMIT, NULL,
				      "this account has %d terminals open (the limit); close one",
				      per_acct);
		err->retry_after_s = 1;
		return -1;
	}
	t->next = reg.head;
	if (reg.head)
		reg.head->prev = t;
	reg.head = t;
	reg.n++;
	pthread_mutex_unlock(&reg.lock);
	return 0;
}

static void term_unref(struct term *t)
{
	bool last;

	pthread_mutex_lock(&t->lock);
	last = --t->refs == 0;
	pthread_mutex_unlock(&t->lock);
	if (!last)
		return;
	pthread_mutex_lock(&reg.lock);
	if (t->prev)
		t->prev->next = t->next;
	else
		reg.head = t->next;
	if (t->next)
		t->next->prev = t->prev;
	reg.n--;
	pthread_cond_broadcast(&reg.cond);
	pthread_mutex_unlock(&reg.lock);
	close(t->efd);
	sandbox_output_release(&t->hold);
	free(t->out);
	free(t->text);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

void api_terminals_stop(void)
{
	int64_t deadline = sbx_mono_ms() + 5000;

	pthread_mutex_lock(&reg.lock);
	reg.stopping = true;
	for (struct term *t = reg.head; t; t = t->next)
		wake(t);
	/* every thread is gone before the server (and the service its
	 * terminals call) is: past 5 s their sockets are shut, which ends
	 * any wait on the client, and the wait goes on */
	for (;;) {
		if (reg.threads == 0)
			break;
		if (sbx_mono_ms() >= deadline) {
			for (struct term *t = reg.head; t; t = t->next)
				if (t->reg_sock >= 0)
					shutdown(t->reg_sock, SHUT_RDWR);
			deadline = INT64_MAX;
		}
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&reg.cond, &reg.lock, &ts);
	}
	pthread_mutex_unlock(&reg.lock);
}

void api_terminals_start(void)
{
	pthread_mutex_lock(&reg.lock);
	reg.stopping = false;
	pthread_mutex_unlock(&reg.lock);
}

static bool reg_stopping(void)
{
	bool s;

	pthread_mutex_lock(&reg.lock);
	s = reg.stopping;
	pthread_mutex_unlock(&reg.lock);
	return s;
}

/* ------------------------------------------------------ exec callbacks */

/* The shell's output (the channel's thread): keep it; PAUSE past the mark. */
static bool term_output(void *opaque, uint32_t exec_id, bool is_stderr, const void *data,
			size_t len)
{
	struct term *t = opaque;
	bool pause;
	/* what is kept for the client counts against its account's and the
	 * host's output budgets, like a streamed exec's (a guest ignoring
	 * PAUSE meets them; then the terminal ends as too slow) */
	bool paid = sandbox_output_charge(&t->hold, len, SANDBOX_OUTPUT_WITHIN, NULL, NULL) == 0;

	pthread_mutex_lock(&t->lock);
	if (!paid || t->too_slow || t->out_len + len > TERM_OUT_HARD) {
		if (paid)
			sandbox_output_shrink(&t->hold, len);
		t->too_slow = true; /* dropped: the terminal ends */
	} else {
		if (t->out_len + len > t->out_cap) {
			size_t cap = t->out_cap ? t->out_cap : 64 * 1024;
			uint8_t *p;

			while (cap < t->out_len + len)
				cap *= 2;
			p = realloc(t->out, cap);
			if (!p) {
				t->too_slow = true;
				sandbox_output_shrink(&t->hold, len);
				goto out;
			}
			t->out = p;
			t->out_cap = cap;
		}
		memcpy(t->out + t->out_len, data, len);
		t->out_len += len;
	}
out:
	pause = t->out_len >= TERM_OUT_PAUSE || t->too_slow;
	if (pause)
		t->paused = true;
	pthread_mutex_unlock(&t->lock);
	wake(t);
	return pause;
}

static void term_ack(void *opaque)
{
	wake(opaque);
}

static void term_done(void *opaque, struct agentless_exec_result *res,
		      const struct sandbox_exec_receipt *receipt, const struct sbx_error *err)
{
	struct term *t = opaque;

	pthread_mutex_lock(&t->lock);
	t->done = true;
	if (res) {
		t->exit_code = res->exit_code;
	} else {
		t->failed = true;
		t->err = *err;
	}
	pthread_mutex_unlock(&t->lock);
	if (res)
		agentless_exec_result_release(res);
	wake(t);
	term_unref(t);
}

/* ------------------------------------------------------- client frames */

/* Queue a frame to the client (server frames are never masked). */
static void wq_frame(struct term *t, uint8_t op, const void *p, size_t len)
{
	if (t->wq_len + WS_HEADER_MAX + len > sizeof t->wq)
		return; /* only control frames can: a pong too many is dropped */
	t->wq_len += ws_header_encode(t->wq + t->wq_len, op, true, len, NULL);
	memcpy(t->wq + t->wq_len, p, len);
	t->wq_len += len;
}

static void wq_close(struct term *t, uint16_t code, const char *reason)
{
	uint8_t p[WS_CONTROL_MAX];
	size_t n = strlen(reason);

	n = n > WS_CONTROL_MAX - 2 ? WS_CONTROL_MAX - 2 : n;
	p[0] = (uint8_t)(code >> 8);
	p[1] = (uint8_t)code;
	memcpy(p + 2, reason, n);
	wq_frame(t, WS_OP_CLOSE, p, n + 2);
}

/* Write what the socket takes now: 0, or -1 when it is gone. */
static int wq_flush(struct term *t)
{
	while (t->wq_off < t->wq_len) {
		ssize_t n = send(t->sock, t->wq + t->wq_off, t->wq_len - t->wq_off, MSG_NOSIGNAL);

		if (n > 0) {
			t->wq_off += (size_t)n;
			t->active_ms = sbx_mono_ms();
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		return -1;
	}
	t->wq_off = t->wq_len = 0;
	return 0;
}

/* A complete text message: a resize, or keystrokes. */
static void text_message(struct term *t)
{
	struct json_tokener *tok;
	struct json_object *o = NULL, *v;
	int64_t rows = 0, cols = 0;

	if (t->text_len > 0 && t->text[0] == '{') {
		tok = json_tokener_new();
		if (tok) {
			o = json_tokener_parse_ex(tok, (const char *)t->text, (int)t->text_len);
			json_tokener_free(tok);
		}
	}
	if (o && json_object_is_type(o, json_type_object) &&
	    json_object_object_get_ex(o, "type", &v) && json_object_is_type(v, json_type_string) &&
	    strcmp(json_object_get_string(v), "resize") == 0) {
		if (json_object_object_get_ex(o, "rows", &v) &&
		    json_object_is_type(v, json_type_int))
			rows = json_object_get_int64(v);
		if (json_object_object_get_ex(o, "cols", &v) &&
		    json_object_is_type(v, json_type_int))
			cols = json_object_get_int64(v);
		if (rows >= 1 && rows <= AGENTLESS_PTY_DIM_MAX && cols >= 1 &&
		    cols <= AGENTLESS_PTY_DIM_MAX)
			sandbox_pty_resize(t->svc, t->sandbox_id, t->exec_id, (uint32_t)rows,
					   (uint32_t)cols);
		/* a malformed resize is ignored: the terminal goes on */
	} else {
		memcpy(t->pend + t->pend_len, t->text, t->text_len);
		t->pend_len += t->text_len;
	}
	json_object_put(o);
	t->text_len = 0;
}

/* Parse the complete frames in t->in while the keystrokes fit. Returns 0,
 * or a close code (the client broke the protocol, or closed: 1000). */
static int in_parse(struct term *t)
{
	size_t off = 0;
	int rc = 0;

	while (off < t->in_len) {
		struct ws_frame f;
		uint8_t *p;
		int pr = ws_frame_parse(t->in + off, t->in_len - off, true, TERM_FRAME_MAX, &f);

		if (pr < 0) {
			rc = WS_CLOSE_PROTOCOL;
			break;
		}
		if (pr == 0 || t->in_len - off < f.hdr_len + f.len)
			break;
		p = t->in + off + f.hdr_len;
		if (f.opcode == WS_OP_BINARY || f.opcode == WS_OP_TEXT || f.opcode == WS_OP_CONT) {
			bool text =
			    f.opcode == WS_OP_TEXT || (f.opcode == WS_OP_CONT && t->in_text);

			if ((f.opcode == WS_OP_CONT && !t->in_text && !t->in_binary) ||
			    (f.opcode != WS_OP_CONT && (t->in_text || t->in_binary))) {
				rc = WS_CLOSE_PROTOCOL;
				break;
			}
			if (text && t->text_len + f.len > TERM_TEXT_MAX) {
				rc = WS_CLOSE_TOO_BIG;
				break;
			}
			/* a text message ends as keystrokes: they must fit */
			if (t->pend_len + (text ? t->text_len : 0) + f.len > TERM_PEND_MAX)
				break;
			ws_mask(p, (size_t)f.len, f.mask, 0);
			if (text) {
				memcpy(t->text + t->text_len, p, (size_t)f.len);
				t->text_len += (size_t)f.len;
				t->in_text = !f.fin;
				if (f.fin)
					text_message(t);
			} else {
				memcpy(t->pend + t->pend_len, p, (size_t)f.len);
				t->pend_len += (size_t)f.len;
				t->in_binary = !f.fin;
			}
		} else if (f.opcode == WS_OP_PING) {
			ws_mask(p, (size_t)f.len, f.mask, 0);
			wq_frame(t, WS_OP_PONG, p, (size_t)f.len);
		} else if (f.opcode == WS_OP_CLOSE) {
			rc = WS_CLOSE_NORMAL;
			off += f.hdr_len + (size_t)f.len;
			break;
		}
		off += f.hdr_len + (size_t)f.len;
	}
	memmove(t->in, t->in + off, t->in_len - off);
	t->in_len -= off;
	return rc;
}

/* --------------------------------------------------------------- thread */

/* Take the next chunk of output into wq (when empty) and RESUME the guest
 * once the buffer ran low. */
static void out_pump(struct term *t)
{
	bool resume = false;
	size_t n;

	if (t->wq_len > 0)
		return;
	pthread_mutex_lock(&t->lock);
	n = t->out_len < TERM_CHUNK ? t->out_len : TERM_CHUNK;
	if (n > 0) {
		t->wq_len = ws_header_encode(t->wq, WS_OP_BINARY, true, n, NULL);
		memcpy(t->wq + t->wq_len, t->out, n);
		t->wq_len += n;
		memmove(t->out, t->out + n, t->out_len - n);
		t->out_len -= n;
		sandbox_output_shrink(&t->hold, n);
	}
	if (t->paused && !t->too_slow && t->out_len < TERM_OUT_RESUME) {
		t->paused = false;
		resume = true;
	}
	pthread_mutex_unlock(&t->lock);
	if (resume)
		sandbox_exec_resume(t->svc, t->sandbox_id, t->exec_id);
}

/* The last frames, until `until` (sbx_mono_ms). */
static void final_flush(struct term *t, int64_t until)
{
	while (t->wq_off < t->wq_len && sbx_mono_ms() < until) {
		struct pollfd p = {.fd = t->sock, .events = POLLOUT};

		if (wq_flush(t) < 0)
			return;
		if (t->wq_off < t->wq_len && poll(&p, 1, 100) < 0 && errno != EINTR)
			return;
	}
}

/* The exec ended: what is left of the output, then how it ended. */
static void term_finish(struct term *t)
{
	char reason[64];
	struct json_object *o;
	/* one deadline for all that is left: a client reading a chunk now
	 * and then does not hold the thread (and the server's stop) */
	int64_t until = sbx_mono_ms() + TERM_FLUSH_MS;

	for (;;) {
		out_pump(t);
		if (t->wq_len == 0)
			break;
		final_flush(t, until);
		if (t->wq_off < t->wq_len)
			return; /* the client does not read: no goodbye */
	}
	o = json_object_new_object();
	if (t->failed) {
		struct json_object *e = json_object_new_object();

		json_object_object_add(e, "type",
				       json_object_new_string(sbx_code_type(t->err.code)));
		json_object_object_add(e, "message", json_object_new_string(t->err.message));
		json_object_object_add(o, "type", json_object_new_string("error"));
		json_object_object_add(o, "error", e);
		snprintf(reason, sizeof reason, "%s", sbx_code_type(t->err.code));
	} else {
		json_object_object_add(o, "type", json_object_new_string("exit"));
		json_object_object_add(o, "exit_code", json_object_new_int(t->exit_code));
		snprintf(reason, sizeof reason, "exit %d", t->exit_code);
	}
	/* whole, however long the escaped message: a cut one is no JSON */
	size_t len = 0;
	const char *msg = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN, &len);
	wq_frame(t, WS_OP_TEXT, msg, len);
	json_object_put(o);
	wq_close(t, t->failed ? WS_CLOSE_INTERNAL : WS_CLOSE_NORMAL, reason);
	final_flush(t, sbx_mono_ms() + TERM_FLUSH_MS);
}

/* One turn's poll: the socket (reading while keystrokes can go on, writing
 * while frames wait) and the eventfd, until the idle deadline. */
static int term_poll(struct term *t, bool done)
{
	struct pollfd p[2] = {{.fd = t->efd, .events = POLLIN}, {.fd = t->sock}};
	int64_t left = t->active_ms + (int64_t)t->idle_ms - sbx_mono_ms();
	int rc;

	if (t->pend_len == 0 && t->in_len < sizeof t->in && !done)
		p[1].events |= POLLIN;
	if (t->wq_len > t->wq_off)
		p[1].events |= POLLOUT;
	rc = poll(p, 2, left <= 0 ? 0 : left > 1000 ? 1000 : (int)left);
	if (rc > 0 && (p[0].revents & POLLIN)) {
		uint64_t v;

		if (read(t->efd, &v, sizeof v) < 0) {
		}
	}
	if (rc > 0 && (p[1].revents & (POLLERR | POLLHUP)) && !(p[1].revents & POLLIN))
		return -1;
	return 0;
}

/* Read what the client sent and parse it. 0, -1 (gone), or a close code. */
static int term_read(struct term *t)
{
	ssize_t n = recv(t->sock, t->in + t->in_len, sizeof t->in - t->in_len, 0);

	if (n == 0)
		return -1;
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
	t->in_len += (size_t)n;
	t->active_ms = sbx_mono_ms();
	return in_parse(t);
}

static void *term_main(void *arg)
{
	struct term *t = arg;
	uint16_t close_code = 0;
	const char *close_reason = "";

	t->active_ms = sbx_mono_ms();
	if (t->in_len > 0)
		close_code = (uint16_t)in_parse(t);
	while (!close_code) {
		bool done, too_slow;
		int rc;

		if (t->pend_len > 0) {
			long n = sandbox_pty_write(t->svc, t->sandbox_id, t->exec_id, t->pend,
						   t->pend_len);

			if (n < 0) {
				t->pend_len = 0; /* it ended: done follows */
			} else if (n > 0) {
				memmove(t->pend, t->pend + n, t->pend_len - (size_t)n);
				t->pend_len -= (size_t)n;
			}
			if (t->pend_len == 0 && t->in_len > 0 && (rc = in_parse(t)) != 0) {
				close_code = (uint16_t)rc;
				break;
			}
		}
		out_pump(t);
		if (wq_flush(t) < 0)
			break;
		pthread_mutex_lock(&t->lock);
		done = t->done;
		too_slow = t->too_slow;
		pthread_mutex_unlock(&t->lock);
		if (done) {
			term_finish(t);
			goto closed;
		}
		if (too_slow) {
			close_code = WS_CLOSE_POLICY;
			close_reason = "the client does not read its terminal";
			break;
		}
		if (reg_stopping()) {
			close_code = WS_CLOSE_GOING;
			close_reason = "the server is stopping";
			break;
		}
		if (sbx_mono_ms() - t->active_ms >= (int64_t)t->idle_ms) {
			close_code = WS_CLOSE_GOING;
			close_reason = "idle timeout";
			break;
		}
		if (term_poll(t, done) < 0)
			break;
		if (t->pend_len == 0 && t->in_len < sizeof t->in) {
			rc = term_read(t);
			if (rc < 0)
				break;
			if (rc > 0) {
				close_code = (uint16_t)rc;
				close_reason = rc == WS_CLOSE_NORMAL	? ""
					       : rc == WS_CLOSE_TOO_BIG ? "message too big"
									: "protocol error";
			}
		}
	}
	/* the client closed, broke the protocol, went away, idled, or the
	 * server stops: hang the shell up (its done follows) */
	sandbox_pty_hangup(t->svc, t->sandbox_id, t->exec_id);
	if (close_code) {
		int64_t until = sbx_mono_ms() + TERM_FLUSH_MS;

		/* a frame half sent is finished first: the close must not land
		 * inside its payload */
		if (t->wq_off > 0)
			final_flush(t, until);
		t->wq_len = t->wq_off = 0;
		wq_close(t, close_code, close_reason);
		final_flush(t, until);
	}
closed:
	pthread_mutex_lock(&reg.lock);
	t->reg_sock = -1; /* closed below: its number may be reused */
	pthread_mutex_unlock(&reg.lock);
	MHD_upgrade_action(t->urh, MHD_UPGRADE_ACTION_CLOSE);
	pthread_mutex_lock(&reg.lock);
	reg.threads--;
	pthread_cond_broadcast(&reg.cond);
	pthread_mutex_unlock(&reg.lock);
	term_unref(t);
	return NULL;
}

/* libmicrohttpd hands the socket over (the 101 was sent). */
static void term_upgraded(void *cls, struct MHD_Connection *c, void *req_cls, const char *extra_in,
			  size_t extra_in_size, MHD_socket sock,
			  struct MHD_UpgradeResponseHandle *urh)
{
	struct term *t = cls;
	pthread_attr_t attr;
	pthread_t th;

	api_conn_upgraded(c);
	pthread_mutex_lock(&t->lock);
	t->upgraded = true;
	t->refs++; /* the thread's */
	pthread_mutex_unlock(&t->lock);
	t->sock = sock;
	t->urh = urh;
	fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
	if (extra_in_size > sizeof t->in)
		extra_in_size = 0; /* more than a frame before the 101: refused below */
	memcpy(t->in, extra_in, extra_in_size);
	t->in_len = extra_in_size;
	pthread_mutex_lock(&reg.lock);
	reg.threads++;
	t->reg_sock = sock;
	pthread_mutex_unlock(&reg.lock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	if (pthread_create(&th, &attr, term_main, t) != 0) {
		sbx_warn(MOD, "terminal: no thread: %s", strerror(errno));
		sandbox_pty_hangup(t->svc, t->sandbox_id, t->exec_id);
		pthread_mutex_lock(&reg.lock);
		t->reg_sock = -1;
		pthread_mutex_unlock(&reg.lock);
		MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
		pthread_mutex_lock(&reg.lock);
		reg.threads--;
		pthread_cond_broadcast(&reg.cond);
		pthread_mutex_unlock(&reg.lock);
		term_unref(t);
	}
	pthread_attr_destroy(&attr);
}

/* ---------------------------------------------------------------- route */

static bool header_has_token(struct MHD_Connection *c, const char *name, const char *token)
{
	const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
	size_t tl = strlen(token);

	while (v && *v) {
		size_t n;

		v += strspn(v, " \t,");
		n = strcspn(v, " \t,");
		if (n == tl && strncasecmp(v, token, tl) == 0)
			return true;
		v += n;
	}
	return false;
}

/* rows or cols from the query: default, or 1..AGENTLESS_PTY_DIM_MAX. */
static int dim_arg(struct MHD_Connection *c, const char *name, uint32_t def, uint32_t *out,
		   struct sbx_error *err)
{
	const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
	char *end;
	unsigned long n;

	*out = def;
	if (!v)
		return 0;
	errno = 0;
	n = strtoul(v, &end, 10);
	if (!*v || *end || errno || v[0] < '0' || v[0] > '9' || n < 1 || n > AGENTLESS_PTY_DIM_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, name,
				     "%s must be an integer 1..%d", name, AGENTLESS_PTY_DIM_MAX);
	*out = (uint32_t)n;
	return 0;
}

/* The upgrade request's own headers: Sec-WebSocket-Accept into accept. */
static int upgrade_check(struct MHD_Connection *c, char accept[WS_ACCEPT_LEN + 1],
			 struct sbx_error *err)
{
	const char *ver = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Version");
	const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Key");

	if (!header_has_token(c, MHD_HTTP_HEADER_UPGRADE, "websocket") ||
	    !header_has_token(c, MHD_HTTP_HEADER_CONNECTION, "upgrade"))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "Upgrade",
				     "a terminal is a WebSocket: send 'Connection: Upgrade' and "
				     "'Upgrade: websocket'");
	if (!ver || strcmp(ver, "13") != 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "Sec-WebSocket-Version",
				     "Sec-WebSocket-Version must be 13");
	if (ws_accept(key, accept) < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "Sec-WebSocket-Key",
				     "Sec-WebSocket-Key must be 16 bytes in base64");
	return 0;
}

static struct term *term_new(struct req *r)
{
	struct term *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->text = malloc(TERM_TEXT_MAX);
	t->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!t->text || t->efd < 0) {
		if (t->efd >= 0)
			close(t->efd);
		free(t->text);
		free(t);
		return NULL;
	}
	pthread_mutex_init(&t->lock, NULL);
	t->svc = r->srv->svc;
	t->idle_ms = r->srv->cfg->terminal_idle_timeout_ms;
	t->sock = MHD_INVALID_SOCKET;
	t->reg_sock = -1;
	snprintf(t->account_id, sizeof t->account_id, "%s", r->account_id);
	snprintf(t->sandbox_id, sizeof t->sandbox_id, "%s", r->id);
	return t;
}

/* An upgrade refused: the error, with 'Connection: close'. Answered on a
 * keep-alive connection, a request that asked for 'Connection: Upgrade'
 * left libmicrohttpd holding the connection without telling the
 * connection table it closed (api_conn_notify): 30 s on, the receive
 * deadline shut down whatever connection had reused its descriptor
 * (tests/unit/test_api_http.c). err NULL: out of memory. */
static enum MHD_Result term_refuse(struct req *r, const struct sbx_error *err)
{
	struct sbx_error oom;

	if (!err) {
		sbx_error_set(&oom, SBX_E_INTERNAL, NULL, "out of memory");
		err = &oom;
	}
	return api_reply_error_ex(r->conn, err, NULL, true);
}

enum MHD_Result api_terminal_handle(struct req *r)
{
	static const char login[] = "exec \"$SHELL\" -l"; /* ignored by the guest */
	char accept[WS_ACCEPT_LEN + 1];
	struct MHD_Response *resp;
	struct sbx_error err;
	uint32_t rows, cols;
	enum MHD_Result ret;
	struct term *t;

	sbx_error_clear(&err);
	if (upgrade_check(r->conn, accept, &err) < 0 ||
	    dim_arg(r->conn, "rows", TERM_DEFAULT_ROWS, &rows, &err) < 0 ||
	    dim_arg(r->conn, "cols", TERM_DEFAULT_COLS, &cols, &err) < 0)
		return term_refuse(r, &err);
	t = term_new(r);
	if (!t)
		return term_refuse(r, NULL);
	t->refs = 1; /* the request's (api_terminal_req_free) */
	if (reg_add(t, r->srv->cfg, &err) < 0) {
		close(t->efd);
		free(t->text);
		pthread_mutex_destroy(&t->lock);
		free(t);
		return term_refuse(r, &err);
	}

	struct sandbox_exec_req req = {
	    .command = login,
	    .command_len = sizeof login - 1,
	    .on_output = term_output,
	    .pty_rows = rows,
	    .pty_cols = cols,
	    .on_pty_ack = term_ack,
	    .exec_id = &t->exec_id,
	    .hold = &t->hold,
	};
	t->refs++; /* the exec's, dropped by term_done */
	if (sandbox_exec_start(t->svc, t->account_id, t->sandbox_id, &req, term_done, t, &err) <
	    0) {
		t->refs--;
		term_unref(t);
		return term_refuse(r, &err);
	}
	r->term = t; /* a 101 never sent hangs the shell up (api_terminal_req_free) */
	resp = MHD_create_response_for_upgrade(term_upgraded, t);
	if (!resp)
		return term_refuse(r, NULL);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, "websocket");
	MHD_add_response_header(resp, "Sec-WebSocket-Accept", accept);
	/* a browser's offer (http_wsauth.c): answered with this one only,
	 * never with its bearer.<key> entry */
	if (api_ws_protocol_offered(
		MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Sec-WebSocket-Protocol"),
		API_WS_PROTOCOL))
		MHD_add_response_header(resp, "Sec-WebSocket-Protocol", API_WS_PROTOCOL);
	ret = MHD_queue_response(r->conn, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
	MHD_destroy_response(resp);
	return ret;
}

void api_terminal_req_free(struct term *t)
{
	bool upgraded;

	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	upgraded = t->upgraded;
	pthread_mutex_unlock(&t->lock);
	if (!upgraded) /* the client never got its socket */
		sandbox_pty_hangup(t->svc, t->sandbox_id, t->exec_id);
	term_unref(t);
}
