/* Unit tests of TCP streams (protocol v6, agentless/tcp.c), the host side,
 * against a fake guest on a socketpair: the open, credit both ways, FIN
 * and reset, the refusal of an old guest, the deadlines, and the guest's
 * violations that break its channel; streams the guest opens (v7): the
 * callee accepts (bytes both ways, FIN) or refuses (an ERROR with its kind
 * and message), a conn without a callee and a guest past its cap get an
 * ERROR and no stream, a guest may reset its open before the answer, and
 * its TCP_OPENED for its own stream breaks the channel. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "agentless/agentless.h"
#include "agentless/wire.h"

#include "fake_guest.h"

/* ------------------------------------------------------------- fixture */

struct fx {
	struct agentless_conn *conn;
	int gfd;
	int broken;
	int wakes;
	pthread_mutex_t lock;
};

static void fx_on_broken(void *opaque, const char *why)
{
	struct fx *fx = opaque;

	(void)why;
	pthread_mutex_lock(&fx->lock);
	fx->broken++;
	pthread_mutex_unlock(&fx->lock);
}

static void fx_wake(void *opaque)
{
	struct fx *fx = opaque;

	pthread_mutex_lock(&fx->lock);
	fx->wakes++;
	pthread_mutex_unlock(&fx->lock);
}

static int fx_broken(struct fx *fx)
{
	int n;

	pthread_mutex_lock(&fx->lock);
	n = fx->broken;
	pthread_mutex_unlock(&fx->lock);
	return n;
}

static struct fx *fx_new(uint32_t version)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	struct agentless_limits lim = {.backstop_grace_ms = 1000, .max_inflight = 8};
	struct sbx_error err;
	struct wire_header h;
	uint8_t buf[64], *p;
	struct wire_writer w;

	assert_non_null(fx);
	pthread_mutex_init(&fx->lock, NULL);
	fx->conn = agentless_conn_new(&lim, fx_on_broken, fx);
	agentless_conn_attach(fx->conn, sock_chan_new(fx->conn, &fx->gfd), false);
	wire_writer_init(&w, buf, sizeof buf);
	wire_put_u32(&w, WIRE_T_VERSION, version);
	wire_put_u32(&w, WIRE_T_VERSION_MIN, 1);
	guest_send(fx->gfd, WIRE_HELLO, 0, buf, w.len);
	assert_int_equal(agentless_conn_wait_hello(fx->conn, sbx_mono_ms() + 5000, &err), 0);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_WELCOME);
	free(p);
	return fx;
}

static void fx_free(struct fx *fx)
{
	agentless_conn_free(fx->conn, "test over");
	close(fx->gfd);
	pthread_mutex_destroy(&fx->lock);
	free(fx);
}

/* Wait (bounded) until the stream's status satisfies `cond`. */
#define WAIT_STATUS(t, st, cond)                                                                   \
	do {                                                                                       \
		for (int i_ = 0; i_ < 5000; i_++) {                                                \
			agentless_tcp_status((t), &(st));                                          \
			if (cond)                                                                  \
				break;                                                             \
			usleep(1000);                                                              \
		}                                                                                  \
		agentless_tcp_status((t), &(st));                                                  \
	} while (0)

static uint64_t payload_u64(const uint8_t *p, size_t len, uint16_t tag, bool *have)
{
	struct wire_reader r;
	struct wire_field f;
	uint64_t v = 0;

	*have = false;
	wire_reader_init(&r, p, len);
	while (wire_next(&r, &f) == 1)
		if (f.tag == tag && (f.len == 4 || f.len == 8)) {
			uint32_t v32;

			if (f.len == 4 && wire_field_u32(&f, &v32) == 0)
				v = v32;
			else
				assert_int_equal(wire_field_u64(&f, &v), 0);
			*have = true;
		}
	return v;
}

static void guest_ack(int fd, uint32_t id, uint64_t acked)
{
	uint8_t b[16];
	struct wire_writer w;

	wire_writer_init(&w, b, sizeof b);
	wire_put_u64(&w, WIRE_T_ACKED, acked);
	guest_send(fd, WIRE_TCP_ACK, id, b, w.len);
}

/* Open port 8000 and read the TCP_OPEN: its id. */
static uint32_t open_port(struct fx *fx, struct agentless_tcp **t,
			  const struct agentless_tcp_req *req)
{
	struct agentless_tcp_req def = {.port = 8000};
	struct sbx_error err;
	struct wire_header h;
	uint8_t *p;
	bool have;

	assert_int_equal(agentless_tcp_open(fx->conn, req ? req : &def, fx_wake, fx, t, &err), 0);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_TCP_OPEN);
	assert_true(h.id != 0 && !(h.id & WIRE_TCP_GUEST_BIT));
	assert_int_equal(payload_u64(p, h.len, WIRE_T_PORT, &have), req ? req->port : 8000);
	assert_true(have);
	free(p);
	return h.id;
}

/* --------------------------------------------------------------- tests */

static void test_open_credit_both_ways_and_close(void **state)
{
	struct fx *fx = fx_new(WIRE_VERSION);
	struct agentless_tcp *t;
	struct agentless_tcp_status st;
	static uint8_t big[300 * 1024];
	uint64_t got = 0;
	struct wire_header h;
	uint8_t *p, buf[64];
	uint32_t id;
	bool have;

	(void)state;
	id = open_port(fx, &t, NULL);
	agentless_tcp_status(t, &st);
	assert_int_equal(st.state, AGENTLESS_TCP_OPENING);
	assert_int_equal(agentless_tcp_write(fx->conn, t, "x", 1), 0); /* not open yet */
	guest_send(fx->gfd, WIRE_TCP_OPENED, id, NULL, 0);
	WAIT_STATUS(t, st, st.state == AGENTLESS_TCP_OPEN);
	assert_int_equal(st.state, AGENTLESS_TCP_OPEN);
	assert_int_equal(st.writable, AGENTLESS_TCP_WINDOW);

	/* host -> guest: the window, then nothing until the guest acks (in
	 * pieces: the fake guest reads on this thread) */
	memset(big, 'b', sizeof big);
	for (;;) {
		long n = agentless_tcp_write(fx->conn, t, big, 64 * 1024);
		uint64_t want = got + (uint64_t)n;

		assert_true(n >= 0);
		if (n == 0)
			break;
		while (got < want) {
			guest_recv(fx->gfd, &h, &p);
			assert_int_equal(h.type, WIRE_TCP_DATA);
			assert_int_equal(h.id, id);
			assert_true(h.len > 0 && h.len <= WIRE_MAX_CHUNK);
			got += h.len;
			free(p);
		}
	}
	assert_int_equal(got, AGENTLESS_TCP_WINDOW);
	guest_ack(fx->gfd, id, 100000);
	WAIT_STATUS(t, st, st.writable == 100000);
	assert_int_equal(st.writable, 100000);

	/* guest -> host: the bytes read, then acked */
	guest_send(fx->gfd, WIRE_TCP_DATA, id, "hello", 5);
	WAIT_STATUS(t, st, st.buffered == 5);
	assert_int_equal(agentless_tcp_read(fx->conn, t, buf, sizeof buf), 5);
	assert_memory_equal(buf, "hello", 5);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_TCP_ACK);
	assert_int_equal(payload_u64(p, h.len, WIRE_T_ACKED, &have), 5);
	free(p);

	/* FIN each way: closed */
	guest_send(fx->gfd, WIRE_TCP_CLOSE, id, NULL, 0);
	WAIT_STATUS(t, st, st.eof);
	assert_true(st.eof);
	assert_int_equal(agentless_tcp_shutdown(fx->conn, t), 0);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_TCP_CLOSE);
	payload_u64(p, h.len, WIRE_T_ABORT, &have);
	assert_false(have); /* a FIN, not a reset */
	free(p);
	agentless_tcp_status(t, &st);
	assert_int_equal(st.state, AGENTLESS_TCP_CLOSED);
	assert_int_equal(agentless_tcp_write(fx->conn, t, "x", 1), -1);
	agentless_tcp_release(t);
	assert_int_equal(fx_broken(fx), 0);
	assert_true(agentless_conn_alive(fx->conn));
	fx_free(fx);
}

static void test_refused_deadline_and_old_guest(void **state)
{
	struct fx *fx = fx_new(WIRE_VERSION);
	struct agentless_tcp_req quick = {.port = 9, .open_ms = 50};
	struct agentless_tcp *t;
	struct agentless_tcp_status st;
	struct sbx_error err;
	struct wire_header h;
	uint8_t b[128], *p;
	struct wire_writer w;
	uint32_t id;
	bool have;

	(void)state;
	/* nobody listens: 502, and the channel lives on */
	id = open_port(fx, &t, NULL);
	wire_writer_init(&w, b, sizeof b);
	wire_put_u32(&w, WIRE_T_ERROR_KIND, WIRE_ERR_REFUSED);
	wire_put_str(&w, WIRE_T_MESSAGE, "Connection refused");
	guest_send(fx->gfd, WIRE_ERROR, id, b, w.len);
	WAIT_STATUS(t, st, st.state == AGENTLESS_TCP_FAILED);
	assert_int_equal(st.state, AGENTLESS_TCP_FAILED);
	assert_int_equal(st.err.code, SBX_E_PORT_UNREACHABLE);
	agentless_tcp_release(t);
	assert_true(agentless_conn_alive(fx->conn));

	/* an open the guest never answers: 504 at the tick, and a reset */
	open_port(fx, &t, &quick);
	agentless_conn_tick(fx->conn, sbx_mono_ms() + 1000);
	agentless_tcp_status(t, &st);
	assert_int_equal(st.state, AGENTLESS_TCP_FAILED);
	assert_int_equal(st.err.code, SBX_E_PORT_TIMEOUT);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_TCP_CLOSE);
	assert_int_equal(payload_u64(p, h.len, WIRE_T_ABORT, &have), 1);
	free(p);
	/* its late OPENED is absorbed, not a violation */
	guest_send(fx->gfd, WIRE_TCP_OPENED, h.id, NULL, 0);
	agentless_tcp_release(t);
	sbx_error_clear(&err);
	assert_int_equal(agentless_tcp_open(fx->conn, &(struct agentless_tcp_req){.port = 0},
					    fx_wake, fx, &t, &err),
			 -1);
	assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
	usleep(20000);
	assert_int_equal(fx_broken(fx), 0);
	fx_free(fx);

	/* a v5 guest has no TCP streams: 500, "create a new sandbox" */
	fx = fx_new(5);
	sbx_error_clear(&err);
	assert_int_equal(agentless_tcp_open(fx->conn, &(struct agentless_tcp_req){.port = 80},
					    fx_wake, fx, &t, &err),
			 -1);
	assert_int_equal(err.code, SBX_E_SANDBOX_ERROR);
	assert_non_null(strstr(err.message, "create a new sandbox"));
	assert_true(agentless_conn_alive(fx->conn));
	fx_free(fx);
}

/* What a hostile guest may not do: each breaks its channel and fails the
 * stream with 500. */
enum bad { DATA_BEFORE_OPENED, DATA_PAST_CREDIT, ACK_PAST_SENT, FIN_TWICE, GUEST_OPEN };

static void one_violation(enum bad how)
{
	struct fx *fx = fx_new(WIRE_VERSION);
	struct agentless_tcp *t;
	struct agentless_tcp_status st;
	static uint8_t chunk[WIRE_MAX_CHUNK];
	uint32_t id = open_port(fx, &t, NULL);

	if (how != DATA_BEFORE_OPENED)
		guest_send(fx->gfd, WIRE_TCP_OPENED, id, NULL, 0);
	switch (how) {
	case DATA_BEFORE_OPENED:
		guest_send(fx->gfd, WIRE_TCP_DATA, id, "early", 5);
		break;
	case DATA_PAST_CREDIT:
		for (uint64_t sent = 0; sent <= AGENTLESS_TCP_WINDOW; sent += sizeof chunk)
			guest_send(fx->gfd, WIRE_TCP_DATA, id, chunk, sizeof chunk);
		break;
	case ACK_PAST_SENT:
		guest_ack(fx->gfd, id, 1);
		break;
	case FIN_TWICE:
		guest_send(fx->gfd, WIRE_TCP_CLOSE, id, NULL, 0);
		guest_send(fx->gfd, WIRE_TCP_CLOSE, id, NULL, 0);
		break;
	case GUEST_OPEN:
		/* a guest's open must carry the guest bit */
		guest_send(fx->gfd, WIRE_TCP_OPEN, 7, NULL, 0);
		break;
	}
	for (int i = 0; i < 5000 && !fx_broken(fx); i++)
		usleep(1000);
	assert_int_equal(fx_broken(fx), 1);
	agentless_tcp_status(t, &st);
	assert_int_equal(st.state, AGENTLESS_TCP_FAILED);
	assert_int_equal(st.err.code, SBX_E_SANDBOX_ERROR);
	agentless_tcp_release(t);
	fx_free(fx);
}

static void test_guest_violations_break_its_channel(void **state)
{
	(void)state;
	one_violation(DATA_BEFORE_OPENED);
	one_violation(DATA_PAST_CREDIT);
	one_violation(ACK_PAST_SENT);
	one_violation(FIN_TWICE);
	one_violation(GUEST_OPEN);
}

/* ------------------------------------------------- guest-opened (v7) */

struct callee {
	pthread_mutex_t lock;
	struct agentless_tcp *t[8];
	char host[8][64];
	uint16_t port[8];
	int n;
};

static void callee_take(void *opaque, struct agentless_tcp *t, const char *host, uint16_t port)
{
	struct callee *c = opaque;

	pthread_mutex_lock(&c->lock);
	if (c->n < 8) {
		c->t[c->n] = t;
		snprintf(c->host[c->n], sizeof c->host[0], "%s", host);
		c->port[c->n] = port;
		c->n++;
	}
	pthread_mutex_unlock(&c->lock);
}

static struct agentless_tcp *callee_wait(struct callee *c, int k)
{
	struct agentless_tcp *t = NULL;

	for (int i = 0; i < 5000 && !t; i++) {
		pthread_mutex_lock(&c->lock);
		t = c->n > k ? c->t[k] : NULL;
		pthread_mutex_unlock(&c->lock);
		if (!t)
			usleep(1000);
	}
	assert_non_null(t);
	return t;
}

static void guest_open_send(int fd, uint32_t id, const char *host, uint32_t port)
{
	uint8_t b[320];
	struct wire_writer w;

	wire_writer_init(&w, b, sizeof b);
	if (host)
		wire_put_bytes(&w, WIRE_T_HOST, host, strlen(host));
	wire_put_u32(&w, WIRE_T_PORT, port);
	guest_send(fd, WIRE_TCP_OPEN, id, b, w.len);
}

/* The next frame for id that is not an ACK: its type; the ERROR's kind. */
static uint8_t guest_next(int fd, uint32_t id, uint32_t *kind, char *msg, size_t cap)
{
	for (;;) {
		struct wire_header h;
		uint8_t *p;
		bool have;

		guest_recv(fd, &h, &p);
		if (h.id != id || h.type == WIRE_TCP_ACK) {
			free(p);
			continue;
		}
		if (h.type == WIRE_ERROR) {
			struct wire_reader r;
			struct wire_field f;

			*kind = (uint32_t)payload_u64(p, h.len, WIRE_T_ERROR_KIND, &have);
			wire_reader_init(&r, p, h.len);
			while (wire_next(&r, &f) == 1)
				if (f.tag == WIRE_T_MESSAGE && msg)
					snprintf(msg, cap, "%.*s", (int)f.len,
						 (const char *)f.value);
		}
		free(p);
		return h.type;
	}
}

static void test_guest_opened_streams(void **state)
{
	struct fx *fx = fx_new(WIRE_VERSION);
	struct callee c = {.lock = PTHREAD_MUTEX_INITIALIZER};
	struct agentless_tcp_status st;
	struct agentless_tcp *t;
	uint32_t kind = 0, id = WIRE_TCP_GUEST_BIT | 1;
	char msg[256] = "", buf[16];

	(void)state;
	/* no callee: FORBIDDEN, no stream, the channel lives */
	guest_open_send(fx->gfd, id, "example.com", 443);
	assert_int_equal(guest_next(fx->gfd, id, &kind, msg, sizeof msg), WIRE_ERROR);
	assert_int_equal(kind, WIRE_ERR_FORBIDDEN);
	assert_non_null(strstr(msg, "no network"));

	agentless_set_tcp_accept(fx->conn, callee_take, &c, 2);
	/* accepted: bytes both ways, then FIN each way */
	guest_open_send(fx->gfd, ++id, "example.com", 443);
	t = callee_wait(&c, 0);
	assert_string_equal(c.host[0], "example.com");
	assert_int_equal(c.port[0], 443);
	assert_int_equal(agentless_tcp_accept(fx->conn, t, fx_wake, fx, 5000), 0);
	assert_int_equal(guest_next(fx->gfd, id, &kind, NULL, 0), WIRE_TCP_OPENED);
	guest_send(fx->gfd, WIRE_TCP_DATA, id, "hello", 5);
	WAIT_STATUS(t, st, st.buffered == 5);
	assert_int_equal(agentless_tcp_read(fx->conn, t, buf, sizeof buf), 5);
	assert_memory_equal(buf, "hello", 5);
	assert_int_equal(agentless_tcp_write(fx->conn, t, "world", 5), 5);
	assert_int_equal(guest_next(fx->gfd, id, &kind, NULL, 0), WIRE_TCP_DATA);
	guest_send(fx->gfd, WIRE_TCP_CLOSE, id, NULL, 0);
	assert_int_equal(agentless_tcp_shutdown(fx->conn, t), 0);
	WAIT_STATUS(t, st, st.state == AGENTLESS_TCP_CLOSED);
	assert_int_equal(st.state, AGENTLESS_TCP_CLOSED);
	agentless_tcp_release(t);

	/* refused: the guest gets the kind and the message */
	guest_open_send(fx->gfd, ++id, "10.0.0.1", 22);
	t = callee_wait(&c, 1);
	agentless_tcp_refuse(fx->conn, t, AGENTLESS_REFUSE_FORBIDDEN, "forbidden_address");
	assert_int_equal(guest_next(fx->gfd, id, &kind, msg, sizeof msg), WIRE_ERROR);
	assert_int_equal(kind, WIRE_ERR_FORBIDDEN);
	assert_string_equal(msg, "forbidden_address");
	agentless_tcp_release(t);

	/* the guest resets its open before the answer: the accept is a no-op */
	guest_open_send(fx->gfd, ++id, "example.org", 80);
	t = callee_wait(&c, 2);
	{
		uint8_t b[16];
		struct wire_writer w;

		wire_writer_init(&w, b, sizeof b);
		wire_put_u32(&w, WIRE_T_ABORT, 1);
		guest_send(fx->gfd, WIRE_TCP_CLOSE, id, b, w.len);
	}
	WAIT_STATUS(t, st, st.state == AGENTLESS_TCP_FAILED);
	assert_int_equal(st.state, AGENTLESS_TCP_FAILED);
	assert_int_equal(agentless_tcp_accept(fx->conn, t, fx_wake, fx, 5000), -1);

	agentless_tcp_release(t);

	/* a bad destination: BAD_REQUEST, no stream */
	guest_open_send(fx->gfd, ++id, "bad host", 80);
	assert_int_equal(guest_next(fx->gfd, id, &kind, msg, sizeof msg), WIRE_ERROR);
	assert_int_equal(kind, WIRE_ERR_BAD_REQUEST);
	/* past the cap (2 unanswered held): BUSY */
	guest_open_send(fx->gfd, ++id, "example.net", 80);
	(void)callee_wait(&c, 3);
	guest_open_send(fx->gfd, ++id, "example.net", 81);
	(void)callee_wait(&c, 4);
	guest_open_send(fx->gfd, ++id, "example.net", 82);
	assert_int_equal(guest_next(fx->gfd, id, &kind, msg, sizeof msg), WIRE_ERROR);
	assert_int_equal(kind, WIRE_ERR_BUSY);
	assert_int_equal(fx_broken(fx), 0);
	agentless_tcp_refuse(fx->conn, c.t[3], AGENTLESS_REFUSE_FAILED, "no");
	agentless_tcp_release(c.t[3]);

	/* the guest's TCP_OPENED for its own stream breaks the channel */
	guest_send(fx->gfd, WIRE_TCP_OPENED, id - 1, NULL, 0);
	for (int i = 0; i < 5000 && !fx_broken(fx); i++)
		usleep(1000);
	assert_int_equal(fx_broken(fx), 1);
	agentless_tcp_status(c.t[4], &st);
	assert_int_equal(st.state, AGENTLESS_TCP_FAILED);
	agentless_tcp_release(c.t[4]);
	fx_free(fx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_open_credit_both_ways_and_close),
	    cmocka_unit_test(test_refused_deadline_and_old_guest),
	    cmocka_unit_test(test_guest_violations_break_its_channel),
	    cmocka_unit_test(test_guest_opened_streams),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
