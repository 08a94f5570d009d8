/* sandboxd-init: TCP streams (protocol v6), the guest side.
 *
 * A TCP_OPEN from the host makes the agent connect, non-blocking, to
 * 127.0.0.1:PORT (only the guest's own loopback: the address is not the
 * host's to choose). Bytes then flow both ways under a credit window per
 * direction: what the host sends waits in a buffer of at most
 * WIRE_TCP_WINDOW bytes until the socket takes it (polled for POLLOUT),
 * reported in TCP_ACK frames as it is consumed; the socket is read only
 * while the host's credit (its last TCP_ACK + WIRE_TCP_WINDOW) allows and
 * the outbound queue is under its soft limit. PID 1 never blocks on a
 * server that does not read or a host that does not ack.
 *
 * Every frame from the host is checked: an unknown id is ignored (a stream
 * the guest already closed), bytes past the window are dropped (the
 * host's fault), an ACKED past what was sent is ignored. At most
 * WIRE_TCP_MAX streams are open; more get ERROR BUSY.
 *
 * Streams the guest opens (v7, egress): the proxy (proxy.c) hands over a
 * client socket with the destination it asked for; the stream sends
 * TCP_OPEN {HOST, PORT} with an id of its own (WIRE_TCP_GUEST_BIT) and
 * waits, the socket unpolled, for the host's TCP_OPENED (then a CONNECT
 * client gets its "200", and what the proxy kept for the server, the
 * request head or early bytes, goes first) or ERROR (the client gets an
 * HTTP error that says why). At most GUEST_OPEN_MAX of them at once, so
 * the host's connections to the guest's ports keep room.
 */
#include "guest/init.h"
#include "agentless/wire.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TCP_READ_BUDGET (256u << 10) /* bytes per stream per loop turn */
#define GUEST_OPEN_MAX	(WIRE_TCP_MAX / 2)
#define TCP_MIN(a, b)	((a) < (b) ? (a) : (b))

static struct tcp {
	bool used;
	bool connecting; /* connect in progress: poll for POLLOUT */
	bool host_fin;	 /* the host sent FIN: shut the socket's write side */
	bool wr_shut;	 /* shutdown(SHUT_WR) done */
	bool rd_eof;	 /* the socket said EOF: FIN sent to the host */
	uint32_t id;
	int fd;
	uint8_t *buf; /* host -> socket, WIRE_TCP_WINDOW bytes */
	size_t len;
	uint64_t done, acked;  /* host bytes consumed, reported */
	uint64_t sent, credit; /* socket bytes shipped, the host's ACKED */
	/* guest-opened (egress) */
	bool guest;    /* opened by the proxy */
	bool awaiting; /* TCP_OPEN sent, no answer yet: not polled */
	bool tunnel;   /* CONNECT: answer "200" at TCP_OPENED */
	uint8_t *pre;  /* bytes for the server first (malloc'd) */
	size_t pre_len;
} T[WIRE_TCP_MAX];

static uint32_t next_guest_id = 1;

static size_t (*queue_size)(void);
static size_t queue_soft;

void guest_tcp_init(size_t (*qsize)(void), size_t soft)
{
	queue_size = qsize;
	queue_soft = soft;
	for (int i = 0; i < WIRE_TCP_MAX; i++)
		T[i].fd = -1;
}

static struct tcp *tcp_find(uint32_t id)
{
	for (int i = 0; i < WIRE_TCP_MAX; i++)
		if (T[i].used && T[i].id == id)
			return &T[i];
	return NULL;
}

static void tcp_free(struct tcp *t)
{
	if (t->fd >= 0)
		close(t->fd);
	free(t->buf);
	free(t->pre);
	memset(t, 0, sizeof(*t));
	t->fd = -1;
}

static void send_close(struct tcp *t, bool abort_it)
{
	uint8_t b[16];
	struct wire_writer w;

	wire_writer_init(&w, b, sizeof b);
	if (abort_it)
		wire_put_u32(&w, WIRE_T_ABORT, 1);
	guest_frame_send(WIRE_TCP_CLOSE, t->id, w.buf, w.len);
}

/* The stream broke (reset, error): tell the host and forget it. */
static void tcp_reset(struct tcp *t)
{
	send_close(t, true);
	tcp_free(t);
}

/* Both halves done: the slot is free. */
static void tcp_maybe_done(struct tcp *t)
{
	if (t->used && t->rd_eof && t->wr_shut)
		tcp_free(t);
}

static void tcp_open(uint32_t id, const uint8_t *p, size_t len)
{
	struct wire_reader rd;
	struct wire_field f;
	struct sockaddr_in sa;
	uint32_t port = 0, v;
	struct tcp *t = NULL;
	char msg[96];
	int fd;

	if ((id & WIRE_TCP_GUEST_BIT) || id == 0 || tcp_find(id)) {
		guest_send_error(id, WIRE_ERR_BAD_REQUEST, "id", "bad stream id");
		return;
	}
	wire_reader_init(&rd, p, len);
	while (wire_next(&rd, &f) == 1)
		if (f.tag == WIRE_T_PORT && wire_field_u32(&f, &v) == 0)
			port = v;
	if (port < 1 || port > 65535) {
		guest_send_error(id, WIRE_ERR_BAD_REQUEST, "port", "port must be 1..65535");
		return;
	}
	for (int i = 0; i < WIRE_TCP_MAX && !t; i++)
		if (!T[i].used)
			t = &T[i];
	if (!t) {
		guest_send_error(id, WIRE_ERR_BUSY, NULL, "too many TCP streams");
		return;
	}
#ifdef SBX_GUEST_FUZZ
	return; /* the fuzzer checks decoding only: connect nowhere */
#endif
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(msg, sizeof msg, "socket: %s", strerror(errno));
		guest_send_error(id, WIRE_ERR_REFUSED, NULL, msg);
		return;
	}
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	*t = (struct tcp){.used = true, .id = id, .fd = fd};
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
		guest_frame_send(WIRE_TCP_OPENED, id, NULL, 0);
		return;
	}
	if (errno == EINPROGRESS || errno == EINTR) {
		t->connecting = true;
		return;
	}
	snprintf(msg, sizeof msg, "connect to 127.0.0.1:%u: %s", port, strerror(errno));
	guest_send_error(id, WIRE_ERR_REFUSED, NULL, msg);
	tcp_free(t);
}

/* Write what the socket takes now. */
static void tcp_write(struct tcp *t)
{
	while (t->len > 0) {
		ssize_t n = write(t->fd, t->buf, t->len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			tcp_reset(t);
			return;
		}
		memmove(t->buf, t->buf + n, t->len - (size_t)n);
		t->len -= (size_t)n;
		t->done += (uint64_t)n;
	}
	if (t->host_fin && !t->wr_shut) {
		shutdown(t->fd, SHUT_WR);
		t->wr_shut = true;
		tcp_maybe_done(t);
	}
}

static void tcp_data(struct tcp *t, const uint8_t *p, size_t len)
{
	size_t room = WIRE_TCP_WINDOW - t->len, take = len < room ? len : room;

	if (t->connecting || t->host_fin)
		return; /* before OPENED or after FIN: the host's fault */
	if (!t->buf && !(t->buf = malloc(WIRE_TCP_WINDOW)))
		take = 0;
	memcpy(t->buf + t->len, p, take);
	t->len += take;
	t->done += len - take; /* past the window: dropped */
	tcp_write(t);
}

/* Write a short answer to a proxy client (its socket is fresh: it takes
 * it whole) and close. */
void guest_proxy_answer(int fd, int code, const char *reason, const char *msg)
{
	char b[512];
	int n = snprintf(b, sizeof b,
			 "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nConnection: close\r\n"
			 "Content-Length: %zu\r\n\r\nsandboxd: %s\n",
			 code, reason, strlen(msg) + 11, msg);

	if (n > 0)
		(void)!write(fd, b, TCP_MIN((size_t)n, sizeof b - 1));
	close(fd);
}

/* The host's answer to a stream the guest opened. */
static void egress_answer(struct tcp *t, uint8_t type, const uint8_t *p, size_t len)
{
	static const char est[] = "HTTP/1.1 200 Connection established\r\n\r\n";
	struct wire_reader rd;
	struct wire_field f;
	uint32_t kind = 0, v;
	char msg[256] = "the host refused the connection";
	static const struct {
		uint32_t kind;
		int code;
		const char *reason;
	} map[] = {
	    {WIRE_ERR_FORBIDDEN, 403, "Forbidden"},
	    {WIRE_ERR_TIMEOUT, 504, "Gateway Timeout"},
	    {WIRE_ERR_BUSY, 429, "Too Many Requests"},
	    {WIRE_ERR_BAD_REQUEST, 400, "Bad Request"},
	};
	int code = 502;
	const char *reason = "Bad Gateway";

	if (type == WIRE_TCP_OPENED) {
		t->awaiting = false;
		if (t->tunnel && write(t->fd, est, sizeof est - 1) != (ssize_t)(sizeof est - 1)) {
			tcp_reset(t);
			return;
		}
		if (t->pre_len) {
			guest_frame_send(WIRE_TCP_DATA, t->id, t->pre, t->pre_len);
			t->sent += t->pre_len;
		}
		free(t->pre);
		t->pre = NULL;
		t->pre_len = 0;
		return;
	}
	wire_reader_init(&rd, p, len);
	while (wire_next(&rd, &f) == 1) {
		if (f.tag == WIRE_T_ERROR_KIND && wire_field_u32(&f, &v) == 0)
			kind = v;
		if (f.tag == WIRE_T_MESSAGE && f.len > 0) {
			size_t n = TCP_MIN((size_t)f.len, sizeof msg - 1);

			memcpy(msg, f.value, n);
			msg[n] = '\0';
			for (size_t i = 0; i < n; i++)
				if (msg[i] < ' ' || msg[i] > '~')
					msg[i] = '?';
		}
	}
	if (type == WIRE_TCP_CLOSE)
		snprintf(msg, sizeof msg, "the host gave up on the connection");
	else if (type != WIRE_ERROR)
		return; /* nothing else is due before the answer */
	for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
		if (map[i].kind == kind) {
			code = map[i].code;
			reason = map[i].reason;
		}
	guest_proxy_answer(t->fd, code, reason, msg);
	t->fd = -1;
	tcp_free(t);
}

int guest_tcp_egress(int fd, const char *host, uint16_t port, bool tunnel, const uint8_t *pre,
		     size_t pre_len)
{
	uint8_t b[WIRE_TCP_HOST_MAX + 32];
	struct wire_writer w;
	struct tcp *t = NULL;
	unsigned mine = 0;
	uint32_t id;

	for (int i = 0; i < WIRE_TCP_MAX; i++) {
		mine += T[i].used && T[i].guest;
		if (!T[i].used && !t)
			t = &T[i];
	}
	if (!t || mine >= GUEST_OPEN_MAX || strlen(host) > WIRE_TCP_HOST_MAX)
		return -1;
	do {
		id = WIRE_TCP_GUEST_BIT | next_guest_id++;
		if (next_guest_id >= WIRE_TCP_GUEST_BIT)
			next_guest_id = 1;
	} while (tcp_find(id));
	*t = (struct tcp){
	    .used = true, .id = id, .fd = fd, .guest = true, .awaiting = true, .tunnel = tunnel};
	if (pre_len) {
		t->pre = malloc(pre_len);
		if (!t->pre) {
			*t = (struct tcp){.fd = -1};
			return -1;
		}
		memcpy(t->pre, pre, pre_len);
		t->pre_len = pre_len;
	}
	wire_writer_init(&w, b, sizeof b);
	wire_put_bytes(&w, WIRE_T_HOST, host, strlen(host));
	wire_put_u32(&w, WIRE_T_PORT, port);
	guest_frame_send(WIRE_TCP_OPEN, id, w.buf, w.len);
	return 0;
}

void guest_tcp_frame(uint8_t type, uint32_t id, const uint8_t *p, size_t len)
{
	struct wire_reader rd;
	struct wire_field f;
	struct tcp *t;
	uint64_t acked;
	uint32_t v;
	bool abort_it = false;

	if (type == WIRE_TCP_OPEN) {
		tcp_open(id, p, len);
		return;
	}
	t = tcp_find(id);
	if (!t)
		return;
	if (t->awaiting) {
		egress_answer(t, type, p, len);
		return;
	}
	switch (type) {
	case WIRE_TCP_DATA:
		tcp_data(t, p, len);
		break;
	case WIRE_TCP_ACK:
		wire_reader_init(&rd, p, len);
		while (wire_next(&rd, &f) == 1)
			if (f.tag == WIRE_T_ACKED && wire_field_u64(&f, &acked) == 0 &&
			    acked <= t->sent && acked >= t->credit)
				t->credit = acked;
		break;
	case WIRE_TCP_CLOSE:
		wire_reader_init(&rd, p, len);
		while (wire_next(&rd, &f) == 1)
			if (f.tag == WIRE_T_ABORT && wire_field_u32(&f, &v) == 0 && v == 1)
				abort_it = true;
		if (abort_it) {
			tcp_free(t); /* the host forgot it: nothing more is sent */
			break;
		}
		t->host_fin = true;
		if (!t->connecting)
			tcp_write(t);
		break;
	default:
		break;
	}
}

unsigned guest_tcp_pollfds(struct pollfd *pfd, unsigned *slot, unsigned max)
{
	bool backpressure = queue_size && queue_size() > queue_soft;
	unsigned n = 0;

	for (unsigned i = 0; i < WIRE_TCP_MAX && n < max; i++) {
		struct tcp *t = &T[i];
		short ev = 0;

		if (!t->used || t->awaiting)
			continue;
		if (t->connecting) {
			ev = POLLOUT;
		} else {
			if (!t->rd_eof && !backpressure && t->sent - t->credit < WIRE_TCP_WINDOW)
				ev |= POLLIN;
			if (t->len > 0)
				ev |= POLLOUT;
		}
		if (!ev)
			continue;
		pfd[n] = (struct pollfd){.fd = t->fd, .events = ev};
		slot[n++] = i;
	}
	return n;
}

static void connect_done(struct tcp *t)
{
	int soerr = 0;
	socklen_t sl = sizeof soerr;
	char msg[96];

	if (getsockopt(t->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
		soerr = errno;
	if (soerr == EINPROGRESS || soerr == EALREADY)
		return;
	if (soerr) {
		snprintf(msg, sizeof msg, "connect to the port: %s", strerror(soerr));
		guest_send_error(t->id, WIRE_ERR_REFUSED, NULL, msg);
		tcp_free(t);
		return;
	}
	t->connecting = false;
	guest_frame_send(WIRE_TCP_OPENED, t->id, NULL, 0);
	if (t->host_fin)
		tcp_write(t);
}

/* Read what the host's credit allows, up to a budget per turn. */
static void tcp_read(struct tcp *t)
{
	static uint8_t chunk[WIRE_MAX_CHUNK];
	size_t budget = TCP_READ_BUDGET;

	while (t->used && !t->rd_eof && budget > 0) {
		uint64_t credit = t->credit + WIRE_TCP_WINDOW - t->sent;
		size_t want = sizeof chunk;
		ssize_t n;

		if (credit == 0)
			return;
		if (want > credit)
			want = (size_t)credit;
		if (want > budget)
			want = budget;
		n = read(t->fd, chunk, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n < 0) {
			tcp_reset(t);
			return;
		}
		if (n == 0) {
			t->rd_eof = true;
			send_close(t, false);
			tcp_maybe_done(t);
			return;
		}
		guest_frame_send(WIRE_TCP_DATA, t->id, chunk, (size_t)n);
		t->sent += (uint64_t)n;
		budget -= (size_t)n;
	}
}

void guest_tcp_ready(unsigned slot, short revents)
{
	struct tcp *t;

	if (slot >= WIRE_TCP_MAX || !T[slot].used || T[slot].awaiting)
		return;
	t = &T[slot];
	if (t->connecting) {
		connect_done(t);
		return;
	}
	if (revents & POLLOUT)
		tcp_write(t);
	if (t->used && (revents & (POLLIN | POLLHUP | POLLERR)))
		tcp_read(t);
}

void guest_tcp_acks(void)
{
	for (int i = 0; i < WIRE_TCP_MAX; i++) {
		struct tcp *t = &T[i];
		uint8_t b[16];
		struct wire_writer w;

		if (!t->used || t->done == t->acked)
			continue;
		if (t->done - t->acked < WIRE_TCP_WINDOW / 4 && t->len > 0)
			continue;
		wire_writer_init(&w, b, sizeof b);
		wire_put_u64(&w, WIRE_T_ACKED, t->done);
		guest_frame_send(WIRE_TCP_ACK, t->id, w.buf, w.len);
		t->acked = t->done;
	}
}

void guest_tcp_disconnected(void)
{
	for (int i = 0; i < WIRE_TCP_MAX; i++)
		if (T[i].used)
			tcp_free(&T[i]);
}
