/* api/http_terminal.c: a terminal's thread (docs/api.md "Terminal"; the
 * object and the locking are api/terminal-priv.h's). libmicrohttpd hands
 * the socket over after the 101 and one thread per terminal moves bytes
 * both ways (RFC 6455 framing in util/ws.c):
 *
 *   client -> guest: binary and text messages are keystrokes, a text
 *     message {"type":"resize","rows":R,"cols":C} resizes. The socket is
 *     read only while the guest's input window (AGENTLESS_PTY_WINDOW, its
 *     PTY_ACKs) has room, so a paste waits in the client's TCP buffer.
 *   guest -> client: the shell's output (term_output, the channel's
 *     thread) is kept in the terminal's buffer; past TERM_OUT_PAUSE the
 *     guest is asked to stop reading the pty (PAUSE) until the client has
 *     taken it (RESUME below TERM_OUT_RESUME). What arrives after the
 *     PAUSE (the guest's queued frames) is bounded by TERM_OUT_HARD: past
 *     it the client is too slow and its terminal ends. So a client that
 *     never reads costs its own terminal's buffer and nothing else.
 *
 * Each client's first frame is {"type":"terminal","id":...}: the id a
 * client that lost its connection reattaches with. The client's turn
 * ends: the shell exits -> {"type":"exit","exit_code":N} and a close frame
 * 1000 "exit N"; the client closes, breaks the protocol, is idle for
 * terminal_idle_timeout_ms, or the server stops -> the shell is hung up
 * (SIGHUP, then its cgroup is killed); the connection drops without a
 * close frame -> the terminal is detached: the thread waits up to
 * terminal_reconnect_grace_ms for a reattached client's socket
 * (term_reattached) and serves it like the first, its kept output first;
 * past the grace the shell is hung up. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <json-c/json.h>

#include "terminal-priv.h"

#define MOD "api"

#define TERM_FLUSH_MS 2000 /* the last frames' chance to leave */
/* A client gone without a FIN (its network vanished) is seen within about
 * TERM_KA_IDLE_S + TERM_KA_INTVL_S * TERM_KA_CNT seconds by TCP's
 * keepalives, or TERM_USER_TIMEOUT_MS after unacknowledged output: then
 * it is detached and a reattach is no longer refused with 409. */
#define TERM_KA_IDLE_S	     10
#define TERM_KA_INTVL_S	     5
#define TERM_KA_CNT	     3
#define TERM_USER_TIMEOUT_MS 25000

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

/* The first frame of every client: the terminal's id, for a reattach. */
static void term_hello(struct term *t)
{
	char msg[192];
	int n = snprintf(msg, sizeof msg,
			 "{\"type\":\"terminal\",\"id\":\"%s\",\"reconnect_grace_ms\":%u,"
			 "\"reattached\":%s}",
			 t->id, t->grace_ms, t->reattached ? "true" : "false");

	wq_frame(t, WS_OP_TEXT, msg, (size_t)n);
}

/* TCP keepalives on the client's socket (a UNIX socket ignores them). */
static void sock_keepalive(MHD_socket fd)
{
	int on = 1, idle = TERM_KA_IDLE_S, intvl = TERM_KA_INTVL_S, cnt = TERM_KA_CNT;
	unsigned tmo = TERM_USER_TIMEOUT_MS;

	if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) < 0)
		return;
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &tmo, sizeof tmo);
}

/* Keystrokes that wait for the guest's window: what it takes now. */
static void pend_write(struct term *t)
{
	long n;

	if (t->pend_len == 0)
		return;
	n = sandbox_pty_write(t->svc, t->sandbox_id, t->exec_id, t->pend, t->pend_len);
	if (n < 0) {
		t->pend_len = 0; /* it ended: done follows */
	} else if (n > 0) {
		memmove(t->pend, t->pend + n, t->pend_len - (size_t)n);
		t->pend_len -= (size_t)n;
	}
}

enum serve_end {
	SERVE_FINISHED, /* the exec ended and the client was told */
	SERVE_CLOSED,	/* a close frame went (the shell was hung up) */
	SERVE_DROPPED,	/* the connection is gone: no close frame either way */
};

/* One client's turn on the terminal. */
static enum serve_end term_serve(struct term *t)
{
	uint16_t close_code = 0;
	const char *close_reason = "";

	t->active_ms = sbx_mono_ms();
	if (t->grace_ms > 0)
		sock_keepalive(t->sock);
	term_hello(t);
	if (t->in_len > 0)
		close_code = (uint16_t)in_parse(t);
	while (!close_code) {
		bool done, too_slow;
		int rc;

		if (t->pend_len > 0) {
			pend_write(t);
			if (t->pend_len == 0 && t->in_len > 0 && (rc = in_parse(t)) != 0) {
				close_code = (uint16_t)rc;
				break;
			}
		}
		out_pump(t);
		if (wq_flush(t) < 0)
			return SERVE_DROPPED;
		pthread_mutex_lock(&t->lock);
		done = t->done;
		too_slow = t->too_slow;
		pthread_mutex_unlock(&t->lock);
		if (done) {
			term_finish(t);
			return SERVE_FINISHED;
		}
		if (too_slow) {
			close_code = WS_CLOSE_POLICY;
			close_reason = "the client does not read its terminal";
			break;
		}
		if (term_reg_stopping()) {
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
			return SERVE_DROPPED;
		if (t->pend_len == 0 && t->in_len < sizeof t->in) {
			rc = term_read(t);
			if (rc < 0)
				return SERVE_DROPPED;
			if (rc > 0) {
				close_code = (uint16_t)rc;
				close_reason = rc == WS_CLOSE_NORMAL	? ""
					       : rc == WS_CLOSE_TOO_BIG ? "message too big"
									: "protocol error";
			}
		}
	}
	/* the client closed, broke the protocol, idled, was too slow, or
	 * the server stops: hang the shell up (its done follows) */
	sandbox_pty_hangup(t->svc, t->sandbox_id, t->exec_id);
	int64_t until = sbx_mono_ms() + TERM_FLUSH_MS;

	/* a frame half sent is finished first: the close must not land
	 * inside its payload */
	if (t->wq_off > 0)
		final_flush(t, until);
	t->wq_len = t->wq_off = 0;
	wq_close(t, close_code, close_reason);
	final_flush(t, until);
	return SERVE_CLOSED;
}

/* The client's socket goes back to libmicrohttpd, which closes it. */
static void term_sock_close(struct term *t)
{
	term_reg_sock(t, -1); /* closed below: its number may be reused */
	MHD_upgrade_action(t->urh, MHD_UPGRADE_ACTION_CLOSE);
	t->urh = NULL;
	t->sock = MHD_INVALID_SOCKET;
}

/* Keep at most `keep` bytes of the output, the newest (t->lock held). */
void term_out_trim(struct term *t, size_t keep)
{
	size_t drop;

	if (t->out_len <= keep)
		return;
	drop = t->out_len - keep;
	memmove(t->out, t->out + drop, keep);
	t->out_len = keep;
	sandbox_output_shrink(&t->hold, drop);
}

/* A reattached client's socket becomes the thread's (t->lock held). */
static void take_client(struct term *t)
{
	t->sock = t->hand_sock;
	t->urh = t->hand_urh;
	memcpy(t->in, t->hand_in, t->hand_in_len);
	t->in_len = t->hand_in_len;
	free(t->hand_in);
	t->hand_in = NULL;
	t->hand_in_len = 0;
	t->hand_ready = false;
	t->detached = false;
	t->in_text = t->in_binary = false;
	t->text_len = 0;
	t->wq_len = t->wq_off = 0;
	t->reattached = true;
}

/* The client dropped: wait for a reattached one until the grace is over.
 * true: the thread has the new client's socket; false: the terminal ends
 * (t->ended set). A claimed terminal (a 101 on its way) is waited for
 * past the grace: its request ends the claim either way. */
static bool term_detach_wait(struct term *t)
{
	int64_t until = sbx_mono_ms() + (int64_t)t->grace_ms;

	pthread_mutex_lock(&t->lock);
	t->detached = true;
	term_out_trim(t, TERM_DETACHED_TAIL);
	t->client = TERM_DETACHED;
	pthread_mutex_unlock(&t->lock);
	for (;;) {
		bool stopping = term_reg_stopping();
		int64_t now = sbx_mono_ms();
		struct pollfd p = {.fd = t->efd, .events = POLLIN};
		int64_t left = until - now;

		pthread_mutex_lock(&t->lock);
		if (t->hand_ready) {
			take_client(t);
			pthread_mutex_unlock(&t->lock);
			term_reg_sock(t, t->sock);
			return true;
		}
		if (stopping || (t->client != TERM_CLAIMED && left <= 0)) {
			t->ended = true;
			pthread_mutex_unlock(&t->lock);
			return false;
		}
		pthread_mutex_unlock(&t->lock);
		pend_write(t);
		if (poll(&p, 1, left <= 0 || left > 1000 ? 1000 : (int)left) > 0) {
			uint64_t v;

			if (read(t->efd, &v, sizeof v) < 0) {
			}
		}
	}
}

static void *term_main(void *arg)
{
	struct term *t = arg;
	bool hangup = false, done;

	for (;;) {
		enum serve_end e = term_serve(t);

		if (e != SERVE_DROPPED) {
			pthread_mutex_lock(&t->lock);
			t->ended = true;
			pthread_mutex_unlock(&t->lock);
		}
		term_sock_close(t);
		if (e != SERVE_DROPPED)
			break;
		if (t->grace_ms == 0 || !term_detach_wait(t)) {
			hangup = true;
			break;
		}
	}
	pthread_mutex_lock(&t->lock);
	t->ended = true;
	done = t->done;
	pthread_mutex_unlock(&t->lock);
	/* the grace is over (or there is none, or the server stops) */
	if (hangup && !done)
		sandbox_pty_hangup(t->svc, t->sandbox_id, t->exec_id);
	term_reg_thread_exit();
	term_unref(t);
	return NULL;
}

/* libmicrohttpd hands a new terminal's socket over (the 101 was sent):
 * its thread starts. */
void term_upgraded(void *cls, struct MHD_Connection *c, void *req_cls, const char *extra_in,
		   size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	struct term_req *q = cls;
	struct term *t = q->t;
	pthread_attr_t attr;
	pthread_t th;

	api_conn_upgraded(c);
	pthread_mutex_lock(&t->lock);
	q->upgraded = true;
	t->client = TERM_ATTACHED;
	t->refs++; /* the thread's */
	pthread_mutex_unlock(&t->lock);
	t->sock = sock;
	t->urh = urh;
	fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
	if (extra_in_size > sizeof t->in)
		extra_in_size = 0; /* more than a frame before the 101: refused below */
	memcpy(t->in, extra_in, extra_in_size);
	t->in_len = extra_in_size;
	term_reg_thread_enter();
	term_reg_sock(t, sock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	if (pthread_create(&th, &attr, term_main, t) != 0) {
		sbx_warn(MOD, "terminal: no thread: %s", strerror(errno));
		pthread_mutex_lock(&t->lock);
		t->ended = true;
		pthread_mutex_unlock(&t->lock);
		sandbox_pty_hangup(t->svc, t->sandbox_id, t->exec_id);
		term_sock_close(t);
		term_reg_thread_exit();
		term_unref(t);
	}
	pthread_attr_destroy(&attr);
}

/* libmicrohttpd hands a reattached client's socket over: it goes to the
 * terminal's waiting thread, or is closed when the terminal ended since
 * the claim (the server stops). */
void term_reattached(void *cls, struct MHD_Connection *c, void *req_cls, const char *extra_in,
		     size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	struct term_req *q = cls;
	struct term *t = q->t;
	uint8_t *in = NULL;
	bool ok;

	api_conn_upgraded(c);
	fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
	if (extra_in_size > TERM_IN_BUF)
		extra_in_size = 0; /* more than a frame before the 101 */
	if (extra_in_size > 0 && (in = malloc(extra_in_size)))
		memcpy(in, extra_in, extra_in_size);
	pthread_mutex_lock(&t->lock);
	q->upgraded = true;
	ok = !t->ended && (extra_in_size == 0 || in);
	if (ok) {
		t->hand_sock = sock;
		t->hand_urh = urh;
		t->hand_in = in;
		t->hand_in_len = in ? extra_in_size : 0;
		t->hand_ready = true;
		t->client = TERM_ATTACHED;
	} else if (t->client == TERM_CLAIMED && t->claim_seq == q->seq) {
		t->client = TERM_DETACHED;
	}
	pthread_mutex_unlock(&t->lock);
	if (!ok) {
		free(in);
		MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
	}
	term_wake(t);
}
