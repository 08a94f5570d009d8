/* Unit tests of the host side of the exec protocol (agentless/agentless.c)
 * against a fake guest on a socketpair. The fake guest is explicitly a test
 * of the host's protocol handling; nothing here claims to run a command. */
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "agentless/agentless.h"
#include "agentless/wire.h"
#include "sandbox/sandbox-priv.h"
#include "vmm/vmm-priv.h"

#include "fake_guest.h"

static void guest_hello(int fd, uint32_t version, uint32_t version_min)
{
	uint8_t buf[64];
	struct wire_writer w;

	wire_writer_init(&w, buf, sizeof buf);
	wire_put_u32(&w, WIRE_T_VERSION, version);
	wire_put_u32(&w, WIRE_T_VERSION_MIN, version_min);
	wire_put_u32(&w, WIRE_T_BOOT_MS, 1234);
	guest_send(fd, WIRE_HELLO, 0, buf, w.len);
}

static uint32_t field_u32(const uint8_t *p, size_t len, uint16_t tag)
{
	struct wire_reader r;
	struct wire_field f;
	uint32_t v;

	wire_reader_init(&r, p, len);
	while (wire_next(&r, &f) == 1) {
		if (f.tag == tag) {
			assert_int_equal(wire_field_u32(&f, &v), 0);
			return v;
		}
	}
	fail_msg("tag %u missing", tag);
	return 0;
}

static void guest_exit(int fd, uint32_t id, int32_t code, uint64_t out_total, uint64_t err_total,
		       uint32_t timed_out)
{
	uint8_t buf[128];
	struct wire_writer w;

	wire_writer_init(&w, buf, sizeof buf);
	wire_put_u32(&w, WIRE_T_EXIT_CODE, (uint32_t)code);
	wire_put_u32(&w, WIRE_T_DURATION_MS, 42);
	wire_put_u32(&w, WIRE_T_TIMED_OUT, timed_out);
	wire_put_u64(&w, WIRE_T_STDOUT_TOTAL, out_total);
	wire_put_u64(&w, WIRE_T_STDERR_TOTAL, err_total);
	guest_send(fd, WIRE_EXIT, id, buf, w.len);
}

static void guest_error(int fd, uint32_t id, uint32_t kind, const char *param, const char *msg)
{
	uint8_t buf[1024];
	struct wire_writer w;

	wire_writer_init(&w, buf, sizeof buf);
	wire_put_u32(&w, WIRE_T_ERROR_KIND, kind);
	if (param)
		wire_put_str(&w, WIRE_T_PARAM, param);
	if (msg)
		wire_put_str(&w, WIRE_T_MESSAGE, msg);
	assert_false(w.overflow);
	guest_send(fd, WIRE_ERROR, id, buf, w.len);
}

/* Read the next EXEC frame and return its id. */
static uint32_t guest_expect_exec(int fd)
{
	struct wire_header h;
	uint8_t *p;

	guest_recv(fd, &h, &p);
	assert_int_equal(h.type, WIRE_EXEC);
	assert_int_not_equal(h.id, 0);
	free(p);
	return h.id;
}

/* ---------------------------------------------------- completion probe */

struct probe {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int calls;
	bool ok;
	struct agentless_exec_result res;
	struct sbx_error err;
};

static void probe_init(struct probe *p)
{
	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
}

static void probe_release(struct probe *p)
{
	agentless_exec_result_release(&p->res);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
}

static void probe_done(void *opaque, struct agentless_exec_result *res, const struct sbx_error *err)
{
	struct probe *p = opaque;

	pthread_mutex_lock(&p->lock);
	p->calls++;
	if (res) {
		p->ok = true;
		p->res = *res;
		memset(res, 0, sizeof(*res));
	} else {
		p->ok = false;
		p->err = *err;
	}
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

/* Wait up to 5 s for the first completion. */
static void probe_wait(struct probe *p)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 5;
	pthread_mutex_lock(&p->lock);
	while (p->calls == 0)
		if (pthread_cond_timedwait(&p->cond, &p->lock, &ts) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&p->lock);
	assert_int_equal(p->calls, 1);
}

/* ------------------------------------------------------------- fixture */

struct fx {
	struct agentless_conn *conn;
	int gfd;
	int broken_calls;
	char broken_why[256];
	pthread_mutex_t lock;
};

static void fx_on_broken(void *opaque, const char *why)
{
	struct fx *fx = opaque;

	pthread_mutex_lock(&fx->lock);
	fx->broken_calls++;
	snprintf(fx->broken_why, sizeof fx->broken_why, "%s", why);
	pthread_mutex_unlock(&fx->lock);
}

static int fx_broken_calls(struct fx *fx)
{
	int n;

	pthread_mutex_lock(&fx->lock);
	n = fx->broken_calls;
	pthread_mutex_unlock(&fx->lock);
	return n;
}

/* on_broken runs after waiters are woken: give it a moment. */
static void fx_wait_broken(struct fx *fx)
{
	for (int i = 0; i < 2000 && fx_broken_calls(fx) == 0; i++)
		usleep(1000);
}

static struct fx *fx_new(uint32_t grace_ms, uint32_t max_inflight)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	struct agentless_limits lim = {.backstop_grace_ms = grace_ms, .max_inflight = max_inflight};

	assert_non_null(fx);
	pthread_mutex_init(&fx->lock, NULL);
	fx->conn = agentless_conn_new(&lim, fx_on_broken, fx);
	agentless_conn_attach(fx->conn, sock_chan_new(fx->conn, &fx->gfd), false);
	return fx;
}

/* HELLO, wait_hello, and read the WELCOME. */
static void fx_handshake(struct fx *fx)
{
	struct sbx_error err;
	struct wire_header h;
	uint8_t *p;

	assert_false(agentless_conn_alive(fx->conn));
	guest_hello(fx->gfd, WIRE_VERSION, WIRE_VERSION_MIN);
	assert_int_equal(agentless_conn_wait_hello(fx->conn, sbx_mono_ms() + 5000, &err), 0);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_WELCOME);
	assert_int_equal(h.id, 0); /* this channel has no window: no epoch */
	assert_int_equal(field_u32(p, h.len, WIRE_T_VERSION), WIRE_VERSION);
	free(p);
	assert_true(agentless_conn_alive(fx->conn));
}

static void fx_free(struct fx *fx)
{
	agentless_conn_free(fx->conn, "test over");
	if (fx->gfd >= 0)
		close(fx->gfd);
	pthread_mutex_destroy(&fx->lock);
	free(fx);
}

static const struct agentless_exec_req *simple_req(void)
{
	static const char *const env[] = {"A=1", "B=two words"};
	static const struct agentless_exec_req req = {
	    .command = "echo hi",
	    .command_len = 7,
	    .cwd = "/home/sandbox",
	    .env = env,
	    .n_env = 2,
	    .timeout_ms = 60000,
	    .stdout_cap = 1024,
	    .stderr_cap = 1024,
	};
	return &req;
}

static void start(struct fx *fx, const struct agentless_exec_req *req, struct probe *p)
{
	struct sbx_error err;

	assert_int_equal(agentless_exec_start(fx->conn, req, probe_done, p, &err), 0);
}

/* --------------------------------------------------------------- tests */

/* Protocol v2: STDIN travels as its own field, byte-exact; a guest that
 * only speaks v1 would ignore it, so the host refuses before sending. */
static void test_stdin_v2_and_v1_refusal(void **state)
{
	static const char data[] = "print(1)\n\0tail";
	struct agentless_exec_req req = *simple_req();
	struct fx *fx = fx_new(1000, 4), *old = fx_new(1000, 4);
	struct sbx_error err;
	struct wire_header h;
	struct wire_reader rd;
	struct wire_field f;
	uint8_t *p;
	int seen = 0;

	req.stdin_data = data;
	req.stdin_len = sizeof(data) - 1;
	fx_handshake(fx);
	assert_int_equal(agentless_conn_version(fx->conn), WIRE_VERSION);
	struct probe first;
	probe_init(&first);
	assert_int_equal(agentless_exec_start(fx->conn, &req, probe_done, &first, &err), 0);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_EXEC);
	wire_reader_init(&rd, p, h.len);
	while (wire_next(&rd, &f) == 1) {
		if (f.tag == WIRE_T_STDIN) {
			assert_int_equal(f.len, sizeof(data) - 1);
			assert_memory_equal(f.value, data, f.len);
			seen++;
		}
	}
	assert_int_equal(seen, 1);
	free(p);
	fx_free(fx);
	probe_wait(&first); /* failed by the close */
	assert_false(first.ok);
	probe_release(&first);

	guest_hello(old->gfd, 1, 1);
	assert_int_equal(agentless_conn_wait_hello(old->conn, sbx_mono_ms() + 5000, &err), 0);
	guest_recv(old->gfd, &h, &p);
	assert_int_equal(field_u32(p, h.len, WIRE_T_VERSION), 1);
	free(p);
	assert_int_equal(agentless_exec_start(old->conn, &req, probe_done, NULL, &err), -1);
	assert_int_equal(err.code, SBX_E_SANDBOX_ERROR);
	req.stdin_data = NULL; /* v1 still runs plain commands */
	struct probe pr;
	probe_init(&pr);
	start(old, &req, &pr);
	guest_exit(old->gfd, guest_expect_exec(old->gfd), 0, 0, 0, 0);
	probe_wait(&pr);
	assert_true(pr.ok);
	probe_release(&pr);
	fx_free(old);
}

/* Protocol v5 terminals: the EXEC carries ROWS and COLS; keystrokes go
 * within a 64 KiB window that the guest's PTY_ACKs move; a resize is a
 * PTY_RESIZE; a PTY_ACK going back is a violation; a v4 guest is refused
 * a terminal before anything is sent. */
static bool pty_sink(void *opaque, uint32_t exec_id, bool is_stderr, const void *data, size_t len)
{
	return false;
}

static void guest_pty_ack(int fd, uint32_t id, uint64_t acked)
{
	uint8_t buf[16];
	struct wire_writer w;

	wire_writer_init(&w, buf, sizeof buf);
	wire_put_u64(&w, WIRE_T_ACKED, acked);
	guest_send(fd, WIRE_PTY_ACK, id, buf, w.len);
}

static void test_pty_window_and_acks(void **state)
{
	static uint8_t keys[100 * 1024];
	struct agentless_exec_req req = *simple_req();
	struct fx *fx = fx_new(1000, 4), *old = fx_new(1000, 4);
	struct sbx_error err;
	struct wire_header h;
	struct probe pr;
	uint32_t id = 0;
	size_t sent = 0;
	uint8_t *p;
	long n;

	(void)state;
	req.on_output = pty_sink;
	req.pty_rows = 33;
	req.pty_cols = 101;
	req.id_out = &id;
	fx_handshake(fx);
	probe_init(&pr);
	start(fx, &req, &pr);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_EXEC);
	assert_int_equal(h.id, id);
	assert_int_equal(field_u32(p, h.len, WIRE_T_ROWS), 33);
	assert_int_equal(field_u32(p, h.len, WIRE_T_COLS), 101);
	free(p);
	/* the window: 64 KiB in frames of at most 60 KiB, then nothing */
	while ((n = agentless_pty_write(fx->conn, id, keys + sent, sizeof keys - sent)) > 0) {
		guest_recv(fx->gfd, &h, &p);
		assert_int_equal(h.type, WIRE_PTY_INPUT);
		assert_int_equal(h.len, (uint32_t)n);
		free(p);
		sent += (size_t)n;
	}
	assert_int_equal(n, 0);
	assert_int_equal(sent, AGENTLESS_PTY_WINDOW);
	assert_int_equal(agentless_pty_write(fx->conn, id + 1, keys, 1), -1); /* no such terminal */
	/* an ACK opens it again */
	guest_pty_ack(fx->gfd, id, 4096);
	for (int i = 0; i < 2000 && (n = agentless_pty_write(fx->conn, id, keys, 8192)) == 0; i++)
		usleep(1000);
	assert_int_equal(n, 4096);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.len, 4096);
	free(p);
	assert_int_equal(agentless_pty_resize(fx->conn, id, 50, 132), 0);
	assert_int_equal(agentless_pty_resize(fx->conn, id, 0, 132), -1);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_PTY_RESIZE);
	assert_int_equal(field_u32(p, h.len, WIRE_T_ROWS), 50);
	assert_int_equal(field_u32(p, h.len, WIRE_T_COLS), 132);
	free(p);
	/* going back is a violation: the exec fails, the conn breaks */
	guest_pty_ack(fx->gfd, id, 100);
	fx_wait_broken(fx);
	assert_int_equal(fx_broken_calls(fx), 1);
	probe_wait(&pr);
	assert_false(pr.ok);
	assert_int_equal(pr.err.code, SBX_E_SANDBOX_ERROR);
	probe_release(&pr);
	fx_free(fx);

	guest_hello(old->gfd, 4, 1);
	assert_int_equal(agentless_conn_wait_hello(old->conn, sbx_mono_ms() + 5000, &err), 0);
	guest_recv(old->gfd, &h, &p);
	free(p);
	assert_int_equal(agentless_exec_start(old->conn, &req, probe_done, NULL, &err), -1);
	assert_int_equal(err.code, SBX_E_SANDBOX_ERROR);
	assert_non_null(strstr(err.message, "open a terminal"));
	fx_free(old);
}

/* Protocol v3 streaming: output reaches on_output as it arrives (in order,
 * before done, not buffered), the EXEC carries STREAM, and a consumer that
 * asks for a pause gets PAUSE sent, then RESUME; a v2 guest gets no
 * flow-control frame it would not understand. */
struct sink {
	pthread_mutex_t lock;
	char bytes[64];
	size_t len;
	int calls;
	uint32_t id;
	bool pause_at_second;
};

static bool sink_output(void *opaque, uint32_t exec_id, bool is_stderr, const void *data,
			size_t len)
{
	struct probe *pr = opaque;
	struct sink *s = *(struct sink **)(pr + 1);
	bool pause;

	pthread_mutex_lock(&s->lock);
	if (s->len + len + 1 < sizeof(s->bytes)) {
		s->bytes[s->len++] = is_stderr ? 'E' : 'O';
		memcpy(s->bytes + s->len, data, len);
		s->len += len;
	}
	s->id = exec_id;
	pause = ++s->calls == 2 && s->pause_at_second;
	pthread_mutex_unlock(&s->lock);
	return pause;
}

static void test_stream_output_and_flow_control(void **state)
{
	for (uint32_t version = WIRE_VERSION; version >= 2; version--) {
		struct fx *fx = fx_new(1000, 0);
		struct agentless_exec_req req = *simple_req();
		struct {
			struct probe pr;
			struct sink *s;
		} ctx;
		struct sink s = {.pause_at_second = true};
		struct sbx_error err;
		struct wire_header h;
		uint8_t *p;
		uint32_t id;

		(void)state;
		pthread_mutex_init(&s.lock, NULL);
		ctx.s = &s;
		if (version == WIRE_VERSION) {
			fx_handshake(fx);
		} else {
			guest_hello(fx->gfd, version, WIRE_VERSION_MIN);
			assert_int_equal(
			    agentless_conn_wait_hello(fx->conn, sbx_mono_ms() + 5000, &err), 0);
			guest_recv(fx->gfd, &h, &p); /* WELCOME */
			free(p);
		}
		req.on_output = sink_output;
		probe_init(&ctx.pr);
		start(fx, &req, &ctx.pr);
		guest_recv(fx->gfd, &h, &p);
		assert_int_equal(h.type, WIRE_EXEC);
		assert_int_equal(field_u32(p, h.len, WIRE_T_STREAM), 1);
		id = h.id;
		free(p);
		guest_send(fx->gfd, WIRE_STDOUT, id, "hello", 5);
		guest_send(fx->gfd, WIRE_STDERR, id, "world!", 6);
		if (version >= 3) {
			guest_recv(fx->gfd, &h, &p);
			assert_int_equal(h.type, WIRE_PAUSE);
			assert_int_equal(h.id, id);
			assert_int_equal(h.len, 0);
			free(p);
			agentless_exec_resume(fx->conn, id);
			guest_recv(fx->gfd, &h, &p);
			assert_int_equal(h.type, WIRE_RESUME);
			assert_int_equal(h.id, id);
			free(p);
		}
		/* not paused (any more): no frame; the next one is the PING */
		agentless_exec_resume(fx->conn, id);
		struct agentless_ping *ping = agentless_conn_ping_send(fx->conn, &err);
		assert_non_null(ping);
		guest_recv(fx->gfd, &h, &p);
		assert_int_equal(h.type, WIRE_PING);
		guest_send(fx->gfd, WIRE_PONG, h.id, NULL, 0);
		free(p);
		assert_true(agentless_conn_ping_wait(fx->conn, ping, sbx_mono_ms() + 5000, &err) >=
			    0);
		guest_exit(fx->gfd, id, 0, 5, 9, 0);
		probe_wait(&ctx.pr);
		assert_true(ctx.pr.ok);
		pthread_mutex_lock(&s.lock);
		assert_int_equal(s.calls, 2);
		assert_int_equal(s.id, id);
		assert_memory_equal(s.bytes, "OhelloEworld!", 13);
		pthread_mutex_unlock(&s.lock);
		/* streamed, not buffered; the totals still tell the truncation */
		assert_int_equal(ctx.pr.res.stdout_len, 0);
		assert_int_equal(ctx.pr.res.stderr_len, 0);
		assert_int_equal(ctx.pr.res.stdout_total, 5);
		assert_true(ctx.pr.res.truncated); /* 9 written, 6 shipped */
		probe_release(&ctx.pr);
		fx_free(fx);
		pthread_mutex_destroy(&s.lock);
	}
}

static void check_violation(struct fx *fx, struct probe *pr, const char *msg_part);

/* Protocol v3 PROC requests: the payload travels as given, PROC_REPLY
 * answers it (once), ERROR NO_PROCESS is 404, a v2 guest is refused before
 * sending, and a PROC_REPLY for an exec is a violation. */
struct proc_probe {
	pthread_mutex_t lock;
	int calls;
	uint8_t payload[64];
	size_t len;
	struct sbx_error err;
	bool ok;
};

static void proc_probe_done(void *opaque, const uint8_t *payload, size_t len,
			    const struct sbx_error *err)
{
	struct proc_probe *pp = opaque;

	pthread_mutex_lock(&pp->lock);
	pp->calls++;
	pp->ok = payload != NULL;
	if (payload && len <= sizeof(pp->payload)) {
		memcpy(pp->payload, payload, len);
		pp->len = len;
	}
	if (err)
		pp->err = *err;
	pthread_mutex_unlock(&pp->lock);
}

static int proc_probe_calls(struct proc_probe *pp)
{
	int64_t deadline = sbx_mono_ms() + 5000;
	int n;

	for (;;) {
		pthread_mutex_lock(&pp->lock);
		n = pp->calls;
		pthread_mutex_unlock(&pp->lock);
		if (n || sbx_mono_ms() > deadline)
			return n;
		usleep(1000);
	}
}

static void test_proc_call(void **state)
{
	struct fx *fx = fx_new(1000, 0), *old = fx_new(1000, 0);
	struct proc_probe pp = {.lock = PTHREAD_MUTEX_INITIALIZER};
	uint8_t req[32], rep[32];
	struct wire_writer w;
	struct sbx_error err;
	struct wire_header h;
	struct probe pr;
	uint8_t *p;

	(void)state;
	fx_handshake(fx);
	wire_writer_init(&w, req, sizeof req);
	wire_put_u32(&w, WIRE_T_PROC_OP, WIRE_PROC_LIST);
	assert_int_equal(
	    agentless_proc_call(fx->conn, req, w.len, 1000, proc_probe_done, &pp, &err), 0);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_PROC);
	assert_int_equal(field_u32(p, h.len, WIRE_T_PROC_OP), WIRE_PROC_LIST);
	free(p);
	wire_writer_init(&w, rep, sizeof rep);
	wire_put_u32(&w, WIRE_T_PID, 42);
	guest_send(fx->gfd, WIRE_PROC_REPLY, h.id, rep, w.len);
	assert_int_equal(proc_probe_calls(&pp), 1);
	assert_true(pp.ok);
	assert_int_equal(pp.len, w.len);
	assert_memory_equal(pp.payload, rep, w.len);
	assert_int_equal(agentless_conn_inflight(fx->conn), 0);

	/* an unknown pid */
	memset(&pp, 0, sizeof(pp));
	pthread_mutex_init(&pp.lock, NULL);
	assert_int_equal(agentless_proc_call(fx->conn, req, 10, 1000, proc_probe_done, &pp, &err),
			 0);
	guest_recv(fx->gfd, &h, &p);
	free(p);
	guest_error(fx->gfd, h.id, WIRE_ERR_NO_PROCESS, "pid", "no such process");
	assert_int_equal(proc_probe_calls(&pp), 1);
	assert_false(pp.ok);
	assert_int_equal(pp.err.code, SBX_E_NOT_FOUND);

	/* a PROC_REPLY answering an exec breaks the protocol */
	probe_init(&pr);
	start(fx, simple_req(), &pr);
	guest_send(fx->gfd, WIRE_PROC_REPLY, guest_expect_exec(fx->gfd), NULL, 0);
	check_violation(fx, &pr, "broke the exec protocol");
	probe_release(&pr);
	fx_free(fx);

	/* a v2 guest: refused with a clear error, nothing sent */
	guest_hello(old->gfd, 2, 1);
	assert_int_equal(agentless_conn_wait_hello(old->conn, sbx_mono_ms() + 5000, &err), 0);
	guest_recv(old->gfd, &h, &p);
	free(p);
	assert_int_equal(agentless_proc_call(old->conn, req, 10, 1000, proc_probe_done, &pp, &err),
			 -1);
	assert_int_equal(err.code, SBX_E_SANDBOX_ERROR);
	assert_non_null(strstr(err.message, "v3"));
	fx_free(old);
}

static void test_handshake_and_welcome(void **state)
{
	struct fx *fx = fx_new(1000, 0);
	struct sbx_error err;
	struct wire_header h;
	struct wire_reader r;
	struct wire_field f;
	uint64_t ns = 0;
	uint8_t *p;
	struct timespec now;

	(void)state;
	/* exec before the handshake is refused */
	assert_int_equal(agentless_exec_start(fx->conn, simple_req(), probe_done, NULL, &err), -1);
	assert_int_equal(err.code, SBX_E_SANDBOX_ERROR);
	/* no HELLO yet: the deadline passes */
	assert_int_equal(agentless_conn_wait_hello(fx->conn, sbx_mono_ms() + 50, &err), -1);
	assert_int_equal(err.code, SBX_E_SERVICE_UNAVAILABLE);

	/* a newer guest that still speaks ours: we pick ours */
	guest_hello(fx->gfd, WIRE_VERSION + 1, WIRE_VERSION_MIN);
	assert_int_equal(agentless_conn_wait_hello(fx->conn, sbx_mono_ms() + 5000, &err), 0);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_WELCOME);
	assert_int_equal(field_u32(p, h.len, WIRE_T_VERSION), WIRE_VERSION);
	wire_reader_init(&r, p, h.len);
	while (wire_next(&r, &f) == 1)
		if (f.tag == WIRE_T_TIME_NS)
			assert_int_equal(wire_field_u64(&f, &ns), 0);
	clock_gettime(CLOCK_REALTIME, &now);
	assert_true(ns / 1000000000ULL + 5 >= (uint64_t)now.tv_sec);
	assert_true(ns / 1000000000ULL <= (uint64_t)now.tv_sec);
	free(p);
	assert_true(agentless_conn_alive(fx->conn));

	/* WIRE_TIME goes out on request */
	assert_int_equal(agentless_conn_send_time(fx->conn, &err), 0);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_TIME);
	free(p);

	/* a repeated HELLO is answered again and is not a violation */
	guest_hello(fx->gfd, WIRE_VERSION, WIRE_VERSION_MIN);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_WELCOME);
	free(p);
	assert_int_equal(fx_broken_calls(fx), 0);
	fx_free(fx);
}

static void test_version_mismatch(void **state)
{
	struct fx *fx = fx_new(1000, 0);
	struct sbx_error err;

	(void)state;
	guest_hello(fx->gfd, WIRE_VERSION + 5, WIRE_VERSION + 2);
	assert_int_equal(agentless_conn_wait_hello(fx->conn, sbx_mono_ms() + 5000, &err), -1);
	assert_int_equal(err.code, SBX_E_SANDBOX_ERROR);
	assert_non_null(strstr(err.message, "version"));
	fx_wait_broken(fx);
	assert_int_equal(fx_broken_calls(fx), 1);
	assert_false(agentless_conn_alive(fx->conn));
	fx_free(fx);
}

static void test_exec_round_trip(void **state)
{
	struct fx *fx = fx_new(1000, 0);
	struct probe pr;
	struct wire_header h;
	struct wire_reader r;
	struct wire_field f;
	uint8_t *p, burst[256];
	size_t n = 0;
	int envs = 0;
	uint32_t v;

	(void)state;
	fx_handshake(fx);
	probe_init(&pr);
	start(fx, simple_req(), &pr);
	assert_int_equal(agentless_conn_inflight(fx->conn), 1);

	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_EXEC);
	assert_int_not_equal(h.id, 0);
	wire_reader_init(&r, p, h.len);
	while (wire_next(&r, &f) == 1) {
		switch (f.tag) {
		case WIRE_T_COMMAND:
			assert_int_equal(f.len, 7);
			assert_memory_equal(f.value, "echo hi", 7);
			break;
		case WIRE_T_CWD:
			assert_int_equal(f.len, strlen("/home/sandbox"));
			assert_memory_equal(f.value, "/home/sandbox", f.len);
			break;
		case WIRE_T_ENV:
			assert_memory_equal(f.value, envs == 0 ? "A=1" : "B=two words", f.len);
			envs++;
			break;
		case WIRE_T_TIMEOUT_MS:
			assert_int_equal(wire_field_u32(&f, &v), 0);
			assert_int_equal(v, 60000);
			break;
		case WIRE_T_STDOUT_CAP:
		case WIRE_T_STDERR_CAP:
			assert_int_equal(wire_field_u32(&f, &v), 0);
			assert_int_equal(v, 1024);
			break;
		default:
			fail_msg("unexpected tag %u", f.tag);
		}
	}
	assert_int_equal(envs, 2);

	/* a header split byte by byte */
	{
		uint8_t one[64];
		size_t len = frame_build(one, WIRE_STDOUT, h.id, "hello ", 6);

		for (size_t i = 0; i < len; i++) {
			guest_write(fx->gfd, one + i, 1);
			usleep(200);
		}
	}
	/* several frames in one write, binary bytes included */
	n += frame_build(burst + n, WIRE_STDOUT, h.id, "wor\0ld", 6);
	n += frame_build(burst + n, WIRE_STDERR, h.id, "oops", 4);
	guest_write(fx->gfd, burst, n);
	guest_exit(fx->gfd, h.id, 3, 12, 4, 0);
	free(p);

	probe_wait(&pr);
	assert_true(pr.ok);
	assert_int_equal(pr.res.stdout_len, 12);
	assert_memory_equal(pr.res.stdout_buf, "hello wor\0ld", 12);
	assert_int_equal(pr.res.stdout_buf[12], '\0');
	assert_string_equal(pr.res.stderr_buf, "oops");
	assert_int_equal(pr.res.exit_code, 3);
	assert_int_equal(pr.res.duration_ms, 42);
	assert_false(pr.res.truncated);
	assert_false(pr.res.timed_out);
	assert_int_equal(agentless_conn_inflight(fx->conn), 0);
	probe_release(&pr);

	/* totals beyond what was shipped: truncated; timed_out passes through */
	probe_init(&pr);
	start(fx, simple_req(), &pr);
	v = guest_expect_exec(fx->gfd);
	guest_send(fx->gfd, WIRE_STDOUT, v, "x", 1);
	guest_exit(fx->gfd, v, 137, 5000000, 0, 1);
	probe_wait(&pr);
	assert_true(pr.ok);
	assert_true(pr.res.truncated);
	assert_true(pr.res.timed_out);
	assert_int_equal(pr.res.exit_code, 137);
	assert_int_equal(pr.res.stdout_total, 5000000);
	assert_int_equal(pr.res.stderr_len, 0);
	assert_non_null(pr.res.stderr_buf);
	probe_release(&pr);

	assert_int_equal(fx_broken_calls(fx), 0);
	fx_free(fx);
}

static void test_interleaved(void **state)
{
	struct fx *fx = fx_new(1000, 0);
	struct probe a, b;
	uint32_t ida, idb;

	(void)state;
	fx_handshake(fx);
	probe_init(&a);
	probe_init(&b);
	start(fx, simple_req(), &a);
	start(fx, simple_req(), &b);
	ida = guest_expect_exec(fx->gfd);
	idb = guest_expect_exec(fx->gfd);
	assert_int_not_equal(ida, idb);
	assert_int_equal(agentless_conn_inflight(fx->conn), 2);

	guest_send(fx->gfd, WIRE_STDOUT, idb, "B1", 2);
	guest_send(fx->gfd, WIRE_STDOUT, ida, "A1", 2);
	guest_send(fx->gfd, WIRE_STDERR, idb, "b-err", 5);
	guest_send(fx->gfd, WIRE_STDOUT, ida, "A2", 2);
	guest_exit(fx->gfd, idb, 2, 2, 5, 0);
	guest_send(fx->gfd, WIRE_STDOUT, ida, "A3", 2);
	guest_exit(fx->gfd, ida, 0, 6, 0, 0);

	probe_wait(&a);
	probe_wait(&b);
	assert_true(a.ok && b.ok);
	assert_string_equal(a.res.stdout_buf, "A1A2A3");
	assert_string_equal(a.res.stderr_buf, "");
	assert_int_equal(a.res.exit_code, 0);
	assert_string_equal(b.res.stdout_buf, "B1");
	assert_string_equal(b.res.stderr_buf, "b-err");
	assert_int_equal(b.res.exit_code, 2);
	probe_release(&a);
	probe_release(&b);
	fx_free(fx);
}

/* Billing and receipts use the host's own measure: a guest that claims
 * 42 ms for an exec the host saw take 300 ms or more changes nothing. */
static void test_host_time_not_the_guests(void **state)
{
	struct fx *fx = fx_new(1000, 0);
	struct probe pr;
	uint32_t id;

	(void)state;
	fx_handshake(fx);
	probe_init(&pr);
	start(fx, simple_req(), &pr);
	id = guest_expect_exec(fx->gfd);
	usleep(300 * 1000);
	guest_exit(fx->gfd, id, 0, 0, 0, 0);
	probe_wait(&pr);
	assert_true(pr.ok);
	assert_int_equal(pr.res.duration_ms, 42);
	assert_true(pr.res.host_ms >= 300);
	probe_release(&pr);
	fx_free(fx);
}

static void test_guest_errors(void **state)
{
	struct fx *fx = fx_new(1000, 0);
	struct probe pr;
	struct agentless_exec_req req = *simple_req();
	char longmsg[600];
	uint32_t id;

	(void)state;
	fx_handshake(fx);

	/* cwd -> 400 param cwd, naming the path */
	req.cwd = "/nope";
	probe_init(&pr);
	start(fx, &req, &pr);
	id = guest_expect_exec(fx->gfd);
	guest_error(fx->gfd, id, WIRE_ERR_CWD, "cwd", "no such directory");
	probe_wait(&pr);
	assert_false(pr.ok);
	assert_int_equal(pr.err.code, SBX_E_INVALID_REQUEST);
	assert_string_equal(pr.err.param, "cwd");
	assert_non_null(strstr(pr.err.message, "'/nope'"));
	probe_release(&pr);

	/* bad request with a known param and a hostile message */
	memset(longmsg, 'm', sizeof longmsg - 1);
	longmsg[sizeof longmsg - 1] = '\0';
	longmsg[3] = '\n';
	longmsg[4] = '\x1b';
	probe_init(&pr);
	start(fx, simple_req(), &pr);
	id = guest_expect_exec(fx->gfd);
	guest_error(fx->gfd, id, WIRE_ERR_BAD_REQUEST, "env", longmsg);
	probe_wait(&pr);
	assert_int_equal(pr.err.code, SBX_E_INVALID_REQUEST);
	assert_string_equal(pr.err.param, "env");
	assert_null(strchr(pr.err.message, '\n'));
	assert_null(strchr(pr.err.message, '\x1b'));
	/* at most 200 guest bytes made it into the message */
	assert_true(strspn(strstr(pr.err.message, "mmm?"), "m?") <= 200);
	probe_release(&pr);

	/* an unknown param is not echoed */
	probe_init(&pr);
	start(fx, simple_req(), &pr);
	id = guest_expect_exec(fx->gfd);
	guest_error(fx->gfd, id, WIRE_ERR_BAD_REQUEST, "x-secret", "bad");
	probe_wait(&pr);
	assert_int_equal(pr.err.code, SBX_E_INVALID_REQUEST);
	assert_string_equal(pr.err.param, "");
	probe_release(&pr);

	probe_init(&pr);
	start(fx, simple_req(), &pr);
	id = guest_expect_exec(fx->gfd);
	guest_error(fx->gfd, id, WIRE_ERR_BUSY, NULL, "busy");
	probe_wait(&pr);
	assert_int_equal(pr.err.code, SBX_E_RATE_LIMITED);
	probe_release(&pr);

	probe_init(&pr);
	start(fx, simple_req(), &pr);
	id = guest_expect_exec(fx->gfd);
	guest_error(fx->gfd, id, WIRE_ERR_SPAWN, NULL, "fork failed");
	probe_wait(&pr);
	assert_int_equal(pr.err.code, SBX_E_SANDBOX_ERROR);
	probe_release(&pr);

	/* none of that breaks the connection */
	assert_int_equal(fx_broken_calls(fx), 0);
	assert_true(agentless_conn_alive(fx->conn));
	fx_free(fx);
}

/* An execution's cold run (sandbox_execution_run_cold) on a fake guest:
 * once the EXEC frame carried the code, an ERROR frame of a kind the guest
 * picks does not make the run free. */
struct cold_run {
	struct agentless_conn *conn;
	struct agentless_exec_req req;
	struct agentless_exec_result out;
	uint32_t host_ms;
	bool billable;
	int rc;
	struct sbx_error err;
};

static void *cold_run_main(void *arg)
{
	struct cold_run *c = arg;

	c->rc = sandbox_execution_run_cold(c->conn, &c->req, &c->out, &c->host_ms, &c->billable,
					   &c->err);
	return NULL;
}

static void test_execution_guest_error_is_billed(void **state)
{
	static const uint32_t kinds[] = {WIRE_ERR_BUSY, WIRE_ERR_CWD, WIRE_ERR_BAD_REQUEST,
					 WIRE_ERR_SPAWN};
	struct fx *fx = fx_new(1000, 4);

	(void)state;
	fx_handshake(fx);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(kinds); i++) {
		struct cold_run c = {.conn = fx->conn, .req = *simple_req()};
		pthread_t t;

		c.req.stdin_data = "print(1)\n";
		c.req.stdin_len = 9;
		c.req.timeout_ms = 5000;
		assert_int_equal(pthread_create(&t, NULL, cold_run_main, &c), 0);
		uint32_t id = guest_expect_exec(fx->gfd);
		usleep(200 * 1000); /* the code "runs" a while */
		guest_error(fx->gfd, id, kinds[i], NULL, "the guest says so");
		pthread_join(t, NULL);
		assert_int_equal(c.rc, -1);
		assert_true(c.billable);
		assert_true(c.host_ms >= 200 && c.host_ms <= 5000);
	}
	fx_free(fx);

	/* a guest that never took the code (the frame could not leave): free */
	fx = fx_new(1000, 4);
	struct cold_run c = {.conn = fx->conn, .req = *simple_req()};
	cold_run_main(&c);
	assert_int_equal(c.rc, -1);
	assert_false(c.billable);
	assert_int_equal(c.host_ms, 0);
	fx_free(fx);
}

/* A guest misbehaviour: the in-flight exec fails with SANDBOX_ERROR, the
 * conn breaks once and refuses further execs. */
static void check_violation(struct fx *fx, struct probe *pr, const char *msg_part)
{
	struct sbx_error err;

	probe_wait(pr);
	assert_false(pr->ok);
	assert_int_equal(pr->err.code, SBX_E_SANDBOX_ERROR);
	assert_non_null(strstr(pr->err.message, msg_part));
	fx_wait_broken(fx);
	assert_int_equal(fx_broken_calls(fx), 1);
	assert_false(agentless_conn_alive(fx->conn));
	assert_int_equal(agentless_exec_start(fx->conn, simple_req(), probe_done, NULL, &err), -1);
	assert_int_equal(err.code, SBX_E_SANDBOX_ERROR);
	assert_int_equal(agentless_conn_inflight(fx->conn), 0);
}

static void test_violation_oversized_header(void **state)
{
	struct fx *fx = fx_new(1000, 0);
	struct probe pr;
	uint8_t hdr[WIRE_HEADER_LEN];
	struct wire_header h = {.type = WIRE_STDOUT, .len = WIRE_MAX_GUEST_PAYLOAD + 1};

	(void)state;
	fx_handshake(fx);
	probe_init(&pr);
	start(fx, simple_req(), &pr);
	h.id = guest_expect_exec(fx->gfd);
	wire_header_encode(&h, hdr);
	guest_write(fx->gfd, hdr, sizeof hdr);
	check_violation(fx, &pr, "broke the exec protocol");
	/* more garbage after the break is ignored, not a second break */
	guest_write(fx->gfd, hdr, sizeof hdr);
	usleep(20000);
	assert_int_equal(fx_broken_calls(fx), 1);
	probe_release(&pr);
	fx_free(fx);
}

static void test_violation_unknown_id(void **state)
{
	struct fx *fx = fx_new(1000, 0);
	struct probe pr;
	uint32_t id;

	(void)state;
	fx_handshake(fx);
	probe_init(&pr);
	start(fx, simple_req(), &pr);
	id = guest_expect_exec(fx->gfd);
	guest_send(fx->gfd, WIRE_STDOUT, id + 1000, "x", 1);
	check_violation(fx, &pr, "broke the exec protocol");
	assert_non_null(strstr(fx->broken_why, "unknown exec id"));
	probe_release(&pr);
	fx_free(fx);
}

static void test_violation_past_cap(void **state)
{
	struct fx *fx = fx_new(1000, 0);
	struct agentless_exec_req req = *simple_req();
	struct probe pr;
	uint32_t id;

	(void)state;
	fx_handshake(fx);
	req.stdout_cap = 10;
	probe_init(&pr);
	start(fx, &req, &pr);
	id = guest_expect_exec(fx->gfd);
	guest_send(fx->gfd, WIRE_STDOUT, id, "0123456789", 10); /* exactly the cap: fine */
	guest_send(fx->gfd, WIRE_STDOUT, id, "!", 1);		/* one past */
	check_violation(fx, &pr, "broke the exec protocol");
	assert_non_null(strstr(fx->broken_why, "cap"));
	probe_release(&pr);
	fx_free(fx);
}

static void test_violation_unknown_type(void **state)
{
	struct fx *fx = fx_new(1000, 0);
	struct probe pr;

	(void)state;
	fx_handshake(fx);
	probe_init(&pr);
	start(fx, simple_req(), &pr);
	(void)guest_expect_exec(fx->gfd);
	guest_send(fx->gfd, WIRE_EXEC, 7, NULL, 0); /* host-only type */
	check_violation(fx, &pr, "broke the exec protocol");
	probe_release(&pr);
	fx_free(fx);
}

static void test_violation_duplicate_exit(void **state)
{
	struct fx *fx = fx_new(1000, 0);
	struct probe a, b;
	uint32_t id;

	(void)state;
	fx_handshake(fx);
	probe_init(&a);
	probe_init(&b);
	start(fx, simple_req(), &a);
	id = guest_expect_exec(fx->gfd);
	guest_exit(fx->gfd, id, 0, 0, 0, 0);
	probe_wait(&a);
	assert_true(a.ok);
	start(fx, simple_req(), &b);
	(void)guest_expect_exec(fx->gfd);
	guest_exit(fx->gfd, id, 0, 0, 0, 0); /* again */
	check_violation(fx, &b, "broke the exec protocol");
	assert_int_equal(a.calls, 1);
	probe_release(&a);
	probe_release(&b);
	fx_free(fx);
}

/* A forged EXIT (an exit status outside 0..255, timed_out not a flag) is a
 * violation, not a result. */
static void test_violation_forged_exit(void **state)
{
	const int32_t codes[] = {-1, 256, 0};
	const uint32_t flags[] = {0, 0, 7};

	(void)state;
	for (size_t i = 0; i < 3; i++) {
		struct fx *fx = fx_new(1000, 0);
		struct probe a;

		fx_handshake(fx);
		probe_init(&a);
		start(fx, simple_req(), &a);
		guest_exit(fx->gfd, guest_expect_exec(fx->gfd), codes[i], 0, 0, flags[i]);
		check_violation(fx, &a, "broke the exec protocol");
		probe_release(&a);
		fx_free(fx);
	}
}

static void test_eof_mid_exec(void **state)
{
	struct fx *fx = fx_new(1000, 0);
	struct probe pr;
	uint32_t id;

	(void)state;
	fx_handshake(fx);
	probe_init(&pr);
	start(fx, simple_req(), &pr);
	id = guest_expect_exec(fx->gfd);
	guest_send(fx->gfd, WIRE_STDOUT, id, "partial", 7);
	close(fx->gfd);
	fx->gfd = -1;
	check_violation(fx, &pr, "stopped responding");
	assert_string_equal(fx->broken_why, "channel closed");
	probe_release(&pr);
	fx_free(fx);
}

static void test_backstop(void **state)
{
	struct fx *fx = fx_new(50, 0);
	struct agentless_exec_req req = *simple_req();
	struct probe pr, ok;
	struct wire_header h;
	uint8_t *p;
	uint32_t id;
	int64_t now;

	(void)state;
	fx_handshake(fx);
	req.timeout_ms = 10;
	probe_init(&pr);
	start(fx, &req, &pr);
	id = guest_expect_exec(fx->gfd);

	/* before the backstop nothing happens */
	agentless_conn_tick(fx->conn, sbx_mono_ms());
	assert_int_equal(pr.calls, 0);

	/* past it: KILL, exec still in flight */
	now = sbx_mono_ms() + 1000;
	agentless_conn_tick(fx->conn, now);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_KILL);
	assert_int_equal(h.id, id);
	free(p);
	assert_int_equal(pr.calls, 0);
	assert_int_equal(agentless_conn_inflight(fx->conn), 1);

	/* within the second grace: still waiting */
	agentless_conn_tick(fx->conn, now + 10);
	assert_int_equal(pr.calls, 0);

	/* past the second grace: failed */
	agentless_conn_tick(fx->conn, now + 51);
	probe_wait(&pr);
	assert_false(pr.ok);
	assert_int_equal(pr.err.code, SBX_E_SANDBOX_ERROR);
	assert_non_null(strstr(pr.err.message, "deadline"));
	assert_int_equal(agentless_conn_inflight(fx->conn), 0);

	/* the guest's late frames for that id are dropped, not a violation */
	guest_send(fx->gfd, WIRE_STDOUT, id, "late", 4);
	guest_exit(fx->gfd, id, 137, 4, 0, 1);
	probe_init(&ok);
	start(fx, simple_req(), &ok);
	id = guest_expect_exec(fx->gfd);
	guest_exit(fx->gfd, id, 0, 0, 0, 0);
	probe_wait(&ok);
	assert_true(ok.ok);
	assert_int_equal(fx_broken_calls(fx), 0);
	assert_int_equal(pr.calls, 1);
	probe_release(&pr);
	probe_release(&ok);
	fx_free(fx);
}

static void test_limits(void **state)
{
	struct fx *fx = fx_new(1000, 1);
	struct agentless_exec_req req = *simple_req();
	struct sbx_error err;
	struct probe pr;
	char *big;

	(void)state;
	fx_handshake(fx);
	probe_init(&pr);
	start(fx, simple_req(), &pr);
	assert_int_equal(agentless_exec_start(fx->conn, simple_req(), probe_done, NULL, &err), -1);
	assert_int_equal(err.code, SBX_E_RATE_LIMITED);

	big = calloc(1, WIRE_MAX_PAYLOAD);
	assert_non_null(big);
	req.command = big;
	req.command_len = WIRE_MAX_PAYLOAD - 20;
	agentless_conn_free(fx->conn, "the sandbox was destroyed");
	fx->conn =
	    agentless_conn_new(&(struct agentless_limits){.backstop_grace_ms = 10}, NULL, NULL);
	close(fx->gfd);
	agentless_conn_attach(fx->conn, sock_chan_new(fx->conn, &fx->gfd), true);
	assert_int_equal(agentless_exec_start(fx->conn, &req, probe_done, NULL, &err), -1);
	assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
	assert_string_equal(err.param, "command");
	free(big);

	/* free failed the first exec exactly once, with the given reason */
	assert_int_equal(pr.calls, 1);
	assert_false(pr.ok);
	assert_int_equal(pr.err.code, SBX_E_SANDBOX_ERROR);
	assert_string_equal(pr.err.message, "the sandbox was destroyed");
	probe_release(&pr);
	fx_free(fx);
}

static void test_reattach(void **state)
{
	struct fx *fx = fx_new(1000, 0);
	struct wire_header h;
	struct probe pr;
	uint8_t *p;
	int oldfd;

	(void)state;
	fx_handshake(fx);
	probe_init(&pr);
	start(fx, simple_req(), &pr);
	(void)guest_expect_exec(fx->gfd);

	/* a new channel to a guest that already said HELLO */
	oldfd = fx->gfd;
	agentless_conn_attach(fx->conn, sock_chan_new(fx->conn, &fx->gfd), true);
	close(oldfd);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_WELCOME);
	free(p);
	assert_true(agentless_conn_alive(fx->conn));
	/* the exec of the old channel was failed, once */
	probe_wait(&pr);
	assert_int_equal(pr.err.code, SBX_E_SANDBOX_ERROR);
	probe_release(&pr);
	/* and the new channel works */
	probe_init(&pr);
	start(fx, simple_req(), &pr);
	guest_exit(fx->gfd, guest_expect_exec(fx->gfd), 0, 0, 0, 0);
	probe_wait(&pr);
	assert_true(pr.ok);
	probe_release(&pr);
	fx_free(fx);
}

/* A daemon that reattaches to a running guest without its HELLO assumes
 * version 1: a request that needs v3 is told to retry (503), not refused,
 * until the guest's HELLO tells the real version. */
static void test_reattach_version_assumed(void **state)
{
	struct fx *fx = fx_new(1000, 0);
	struct proc_probe pp = {.lock = PTHREAD_MUTEX_INITIALIZER};
	uint8_t req[16];
	struct wire_writer w;
	struct sbx_error err;
	struct wire_header h;
	uint8_t *p;
	int oldfd = fx->gfd;

	(void)state;
	agentless_conn_attach(fx->conn, sock_chan_new(fx->conn, &fx->gfd), true);
	close(oldfd);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_WELCOME);
	assert_int_equal(field_u32(p, h.len, WIRE_T_VERSION), WIRE_VERSION_MIN);
	free(p);
	wire_writer_init(&w, req, sizeof req);
	wire_put_u32(&w, WIRE_T_PROC_OP, WIRE_PROC_LIST);
	assert_int_equal(
	    agentless_proc_call(fx->conn, req, w.len, 1000, proc_probe_done, &pp, &err), -1);
	assert_int_equal(err.code, SBX_E_SERVICE_UNAVAILABLE);
	assert_int_equal(err.retry_after_s, 1);
	/* the guest says HELLO (as a v3 guest does on a low WELCOME) */
	guest_hello(fx->gfd, WIRE_VERSION, WIRE_VERSION_MIN);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(field_u32(p, h.len, WIRE_T_VERSION), WIRE_VERSION);
	free(p);
	assert_int_equal(agentless_conn_version(fx->conn), WIRE_VERSION);
	assert_int_equal(
	    agentless_proc_call(fx->conn, req, w.len, 1000, proc_probe_done, &pp, &err), 0);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_PROC);
	free(p);
	guest_send(fx->gfd, WIRE_PROC_REPLY, h.id, NULL, 0);
	assert_int_equal(proc_probe_calls(&pp), 1);
	assert_true(pp.ok);
	fx_free(fx);
}

/* A guest thread that echoes PINGs and answers EXECs, for the blocking
 * calls. */
static void *echo_guest(void *arg)
{
	int fd = *(int *)arg;

	for (;;) {
		uint8_t hdr[WIRE_HEADER_LEN], *p;
		struct wire_header h;
		ssize_t n = recv(fd, hdr, sizeof hdr, MSG_WAITALL);

		if (n != (ssize_t)sizeof hdr || wire_header_decode(hdr, WIRE_MAX_PAYLOAD, &h) < 0)
			return NULL;
		p = malloc(h.len + 1);
		if (!p || (h.len && recv(fd, p, h.len, MSG_WAITALL) != (ssize_t)h.len)) {
			free(p);
			return NULL;
		}
		if (h.type == WIRE_PING) {
			guest_send(fd, WIRE_PONG, h.id, p, h.len);
		} else if (h.type == WIRE_EXEC) {
			guest_send(fd, WIRE_STDOUT, h.id, "sync", 4);
			guest_exit(fd, h.id, 7, 4, 0, 0);
		}
		free(p);
	}
}

static void test_ping_and_sync_exec(void **state)
{
	struct fx *fx = fx_new(1000, 0);
	struct agentless_exec_result res;
	struct sbx_error err;
	pthread_t t;
	int64_t us;

	(void)state;
	fx_handshake(fx);
	assert_int_equal(pthread_create(&t, NULL, echo_guest, &fx->gfd), 0);
	us = agentless_conn_ping(fx->conn, 0, sbx_mono_ms() + 5000, &err);
	assert_true(us >= 0 && us < 5000000);
	us = agentless_conn_ping(fx->conn, 4096, sbx_mono_ms() + 5000, &err);
	assert_true(us >= 0 && us < 5000000);
	assert_int_equal(
	    agentless_conn_ping(fx->conn, WIRE_MAX_GUEST_PAYLOAD + 1, sbx_mono_ms() + 5000, &err),
	    -1);

	/* Two pings in flight from one thread, answered out of order: the
	 * guest answers the second before the first. */
	shutdown(fx->gfd, SHUT_RDWR);
	pthread_join(t, NULL);
	fx_free(fx);
	fx = fx_new(1000, 0);
	fx_handshake(fx);
	struct agentless_ping *p1 = agentless_conn_ping_send(fx->conn, &err);
	struct agentless_ping *p2 = agentless_conn_ping_send(fx->conn, &err);
	struct wire_header h1, h2;
	uint8_t *b1, *b2;
	assert_non_null(p1);
	assert_non_null(p2);
	guest_recv(fx->gfd, &h1, &b1);
	guest_recv(fx->gfd, &h2, &b2);
	assert_int_equal(h1.type, WIRE_PING);
	assert_int_equal(h2.type, WIRE_PING);
	guest_send(fx->gfd, WIRE_PONG, h2.id, NULL, 0);
	assert_true(agentless_conn_ping_wait(fx->conn, p2, sbx_mono_ms() + 5000, &err) >= 0);
	/* the first is unanswered: it times out at its deadline */
	assert_int_equal(agentless_conn_ping_wait(fx->conn, p1, sbx_mono_ms() + 50, &err), -1);
	free(b1);
	free(b2);
	assert_int_equal(pthread_create(&t, NULL, echo_guest, &fx->gfd), 0);

	assert_int_equal(agentless_exec(fx->conn, simple_req(), &res, &err), 0);
	assert_string_equal(res.stdout_buf, "sync");
	assert_int_equal(res.exit_code, 7);
	agentless_exec_result_release(&res);

	shutdown(fx->gfd, SHUT_RDWR);
	pthread_join(t, NULL);
	fx_free(fx);
}

/* A guest that floods HELLOs (or PONGs nobody asked for) without reading
 * its port: the host never blocks answering it, and past the unsolicited
 * budget the flood is a violation that fails the in-flight exec. */
static void test_violation_flood(void **state)
{
	(void)state;
	for (int kind = 0; kind < 2; kind++) {
		struct fx *fx = fx_new(1000, 0);
		struct probe pr;

		fx_handshake(fx);
		probe_init(&pr);
		start(fx, simple_req(), &pr);
		(void)guest_expect_exec(fx->gfd);
		for (int i = 0; i < 200 && fx_broken_calls(fx) == 0; i++) {
			if (kind == 0)
				guest_hello(fx->gfd, WIRE_VERSION, WIRE_VERSION_MIN);
			else
				guest_send(fx->gfd, WIRE_PONG, 9999, NULL, 0);
		}
		check_violation(fx, &pr, "broke the exec protocol");
		assert_non_null(strstr(fx->broken_why, "flood"));
		probe_release(&pr);
		fx_free(fx);
	}
}

/* ------------------------------------------------------- file transfer */

struct wakes {
	pthread_mutex_t lock;
	int n;
};

static void count_wake(void *opaque)
{
	struct wakes *w = opaque;

	pthread_mutex_lock(&w->lock);
	w->n++;
	pthread_mutex_unlock(&w->lock);
}

/* Wait until the transfer is no longer open (or its status says so). */
static void xfer_wait(struct agentless_xfer *x, struct agentless_xfer_status *st,
		      bool (*cond)(const struct agentless_xfer_status *))
{
	for (int i = 0; i < 5000; i++) {
		agentless_xfer_status(x, st);
		if (cond(st))
			return;
		usleep(1000);
	}
	fail_msg("transfer did not get there");
}

static bool not_open(const struct agentless_xfer_status *st)
{
	return st->state != AGENTLESS_XFER_OPEN;
}

static bool has_meta(const struct agentless_xfer_status *st)
{
	return st->have_meta || st->state != AGENTLESS_XFER_OPEN;
}

static bool writable(const struct agentless_xfer_status *st)
{
	return st->writable > 0 || st->state != AGENTLESS_XFER_OPEN;
}

static bool has_data(const struct agentless_xfer_status *st)
{
	return st->buffered > 0 || st->state != AGENTLESS_XFER_OPEN;
}

static void guest_u64(int fd, uint8_t type, uint32_t id, uint16_t tag, uint64_t v)
{
	uint8_t buf[32];
	struct wire_writer w;

	wire_writer_init(&w, buf, sizeof buf);
	wire_put_u64(&w, tag, v);
	guest_send(fd, type, id, buf, w.len);
}

static void guest_meta(int fd, uint32_t id, uint64_t size)
{
	uint8_t buf[64];
	struct wire_writer w;

	wire_writer_init(&w, buf, sizeof buf);
	wire_put_u64(&w, WIRE_T_SIZE, size);
	wire_put_u64(&w, WIRE_T_TOTAL, size);
	wire_put_u32(&w, WIRE_T_MODE, 0640);
	wire_put_u64(&w, WIRE_T_MTIME_S, 1700000000);
	guest_send(fd, WIRE_FILE_META, id, buf, w.len);
}

/* A guest that negotiated v2 has no file transfer: a clear refusal. */
static void test_xfer_v2_guest_refused(void **state)
{
	struct fx *fx = fx_new(1000, 4);
	struct agentless_file_req req = {.op = WIRE_FILE_OP_GET, .path = "/etc/hostname"};
	struct agentless_xfer *x = NULL;
	struct sbx_error err;
	struct wire_header h;
	uint8_t *p;

	(void)state;
	guest_hello(fx->gfd, 2, 1);
	assert_int_equal(agentless_conn_wait_hello(fx->conn, sbx_mono_ms() + 5000, &err), 0);
	guest_recv(fx->gfd, &h, &p);
	free(p);
	sbx_error_clear(&err);
	assert_int_equal(agentless_xfer_start(fx->conn, &req, NULL, NULL, &x, &err), -1);
	assert_int_equal(err.code, SBX_E_SANDBOX_ERROR);
	assert_non_null(strstr(err.message, "protocol v2"));
	assert_null(x);
	fx_free(fx);
}

struct writer {
	struct agentless_conn *c;
	struct agentless_xfer *x;
	const uint8_t *data;
	size_t len;
	long n;
};

/* The test channel writes synchronously: write from another thread while
 * the "guest" reads. */
static void *writer_main(void *arg)
{
	struct writer *wr = arg;

	wr->n = agentless_xfer_write(wr->c, wr->x, wr->data, wr->len);
	return NULL;
}

static long write_async(struct agentless_conn *c, struct agentless_xfer *x, const uint8_t *data,
			size_t len, int fd, size_t *got, const uint8_t *base)
{
	struct writer wr = {.c = c, .x = x, .data = data, .len = len};
	struct wire_header h;
	pthread_t t;
	uint8_t *p;

	assert_int_equal(pthread_create(&t, NULL, writer_main, &wr), 0);
	for (;;) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};

		if (poll(&pfd, 1, 300) != 1)
			break; /* the writer is done and nothing more comes */
		guest_recv(fd, &h, &p);
		assert_int_equal(h.type, WIRE_FILE_DATA);
		assert_true(h.len <= WIRE_MAX_CHUNK);
		assert_memory_equal(p, base + *got, h.len);
		*got += h.len;
		free(p);
	}
	pthread_join(t, NULL);
	return wr.n;
}

/* An upload takes exactly the credit window, then more after FILE_ACK; its
 * frames carry the bytes in order; FILE_END names the total; DONE ends it. */
static void test_xfer_upload_credit(void **state)
{
	struct fx *fx = fx_new(1000, 4);
	struct wakes wk = {.lock = PTHREAD_MUTEX_INITIALIZER};
	struct agentless_file_req req = {
	    .op = WIRE_FILE_OP_PUT, .path = "/tmp/f", .mode = 0600, .user = "sandbox"};
	size_t total = WIRE_FILE_WINDOW + 100000, got = 0;
	uint8_t *data = malloc(total), *p;
	struct agentless_xfer_status st;
	struct agentless_xfer *x;
	struct sbx_error err;
	struct wire_header h;
	long n;

	(void)state;
	for (size_t i = 0; i < total; i++)
		data[i] = (uint8_t)(i * 7);
	fx_handshake(fx);
	assert_int_equal(agentless_xfer_start(fx->conn, &req, count_wake, &wk, &x, &err), 0);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_FILE_OPEN);
	assert_int_equal(field_u32(p, h.len, WIRE_T_FILE_OP), WIRE_FILE_OP_PUT);
	assert_int_equal(field_u32(p, h.len, WIRE_T_MODE), 0600);
	free(p);
	n = write_async(fx->conn, x, data, total, fx->gfd, &got, data);
	assert_int_equal(n, WIRE_FILE_WINDOW);
	assert_int_equal(got, WIRE_FILE_WINDOW);
	assert_int_equal(agentless_xfer_write(fx->conn, x, data + n, total - (size_t)n), 0);
	guest_u64(fx->gfd, WIRE_FILE_ACK, h.id, WIRE_T_ACKED, got);
	xfer_wait(x, &st, writable);
	assert_true(wk.n >= 1);
	assert_int_equal(write_async(fx->conn, x, data + got, total - got, fx->gfd, &got, data),
			 (long)(total - WIRE_FILE_WINDOW));
	assert_int_equal(got, total);
	assert_int_equal(agentless_xfer_end(fx->conn, x), 0);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_FILE_END);
	free(p);
	/* a FILE_DONE that claims another size is a lie: here the right one */
	guest_u64(fx->gfd, WIRE_FILE_DONE, h.id, WIRE_T_SIZE, total);
	xfer_wait(x, &st, not_open);
	assert_int_equal(st.state, AGENTLESS_XFER_DONE);
	assert_int_equal(st.done_size, total);
	agentless_xfer_release(x);
	assert_true(agentless_conn_alive(fx->conn));
	fx_free(fx);
	free(data);
}

/* A download holds what the guest sent until read; reading grants credit
 * (FILE_ACK); data past the announced size breaks the connection. */
static void test_xfer_download_bounds(void **state)
{
	struct fx *fx = fx_new(1000, 4);
	struct agentless_file_req req = {.op = WIRE_FILE_OP_GET, .path = "/f", .max_bytes = 1000};
	struct agentless_xfer_status st;
	struct agentless_xfer *x;
	struct sbx_error err;
	struct wire_header h;
	uint8_t *p, buf[200], chunk[100];

	(void)state;
	memset(chunk, 'z', sizeof chunk);
	fx_handshake(fx);
	assert_int_equal(agentless_xfer_start(fx->conn, &req, NULL, NULL, &x, &err), 0);
	guest_recv(fx->gfd, &h, &p);
	free(p);
	guest_meta(fx->gfd, h.id, 150);
	xfer_wait(x, &st, has_meta);
	assert_true(st.have_meta);
	assert_int_equal(st.size, 150);
	assert_int_equal(st.mode, 0640);
	guest_send(fx->gfd, WIRE_FILE_DATA, h.id, chunk, 100);
	xfer_wait(x, &st, has_data);
	assert_int_equal(agentless_xfer_read(fx->conn, x, buf, sizeof buf), 100);
	{
		struct wire_header a;

		guest_recv(fx->gfd, &a, &p); /* the buffer ran dry: credit */
		assert_int_equal(a.type, WIRE_FILE_ACK);
		free(p);
	}
	guest_send(fx->gfd, WIRE_FILE_DATA, h.id, chunk, 100); /* 200 > 150 */
	fx_wait_broken(fx);
	assert_int_equal(fx_broken_calls(fx), 1);
	agentless_xfer_status(x, &st);
	assert_int_equal(st.state, AGENTLESS_XFER_FAILED);
	assert_int_equal(st.err.code, SBX_E_SANDBOX_ERROR);
	agentless_xfer_release(x);
	fx_free(fx);
}

/* Larger than max_bytes: 413 and an abort, not a violation; a guest
 * error kind maps to its API error. */
static void test_xfer_too_large_and_errors(void **state)
{
	struct fx *fx = fx_new(1000, 4);
	struct agentless_file_req req = {.op = WIRE_FILE_OP_GET, .path = "/f", .max_bytes = 10};
	struct agentless_xfer_status st;
	struct agentless_xfer *x;
	struct sbx_error err;
	struct wire_header h, a;
	uint8_t *p, buf[512];
	struct wire_writer w;
	static const struct {
		uint32_t kind;
		enum sbx_code code;
	} kinds[] = {{WIRE_ERR_NOT_FOUND, SBX_E_FILE_NOT_FOUND},
		     {WIRE_ERR_NO_SPACE, SBX_E_INSUFFICIENT_STORAGE},
		     {WIRE_ERR_IS_DIR, SBX_E_INVALID_REQUEST},
		     {WIRE_ERR_RANGE, SBX_E_RANGE_NOT_SATISFIABLE}};

	(void)state;
	fx_handshake(fx);
	assert_int_equal(agentless_xfer_start(fx->conn, &req, NULL, NULL, &x, &err), 0);
	guest_recv(fx->gfd, &h, &p);
	free(p);
	guest_meta(fx->gfd, h.id, 11);
	xfer_wait(x, &st, not_open);
	assert_int_equal(st.err.code, SBX_E_PAYLOAD_TOO_LARGE);
	guest_recv(fx->gfd, &a, &p);
	assert_int_equal(a.type, WIRE_FILE_ABORT);
	assert_int_equal(a.id, h.id);
	free(p);
	agentless_xfer_release(x);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(kinds); i++) {
		req.op = WIRE_FILE_OP_DELETE;
		assert_int_equal(agentless_xfer_start(fx->conn, &req, NULL, NULL, &x, &err), 0);
		guest_recv(fx->gfd, &h, &p);
		free(p);
		wire_writer_init(&w, buf, sizeof buf);
		wire_put_u32(&w, WIRE_T_ERROR_KIND, kinds[i].kind);
		wire_put_str(&w, WIRE_T_MESSAGE, "no");
		guest_send(fx->gfd, WIRE_ERROR, h.id, buf, w.len);
		xfer_wait(x, &st, not_open);
		assert_int_equal(st.err.code, kinds[i].code);
		agentless_xfer_release(x);
	}
	assert_true(agentless_conn_alive(fx->conn));
	fx_free(fx);
}

/* A guest that never answers: the tick fails the transfer at
 * xfer_stall_ms and sends FILE_ABORT; the connection lives on. */
static void test_xfer_stall(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	struct agentless_limits lim = {.backstop_grace_ms = 1000, .xfer_stall_ms = 100};
	struct agentless_file_req req = {.op = WIRE_FILE_OP_LIST, .path = "/"};
	struct agentless_xfer_status st;
	struct agentless_xfer *x;
	struct sbx_error err;
	struct wire_header h;
	uint8_t *p;

	(void)state;
	pthread_mutex_init(&fx->lock, NULL);
	fx->conn = agentless_conn_new(&lim, fx_on_broken, fx);
	agentless_conn_attach(fx->conn, sock_chan_new(fx->conn, &fx->gfd), false);
	fx_handshake(fx);
	assert_int_equal(agentless_xfer_start(fx->conn, &req, NULL, NULL, &x, &err), 0);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(field_u32(p, h.len, WIRE_T_LIMIT), WIRE_FILE_LIST_MAX);
	free(p);
	agentless_conn_tick(fx->conn, sbx_mono_ms());
	agentless_xfer_status(x, &st);
	assert_int_equal(st.state, AGENTLESS_XFER_OPEN);
	agentless_conn_tick(fx->conn, sbx_mono_ms() + 200);
	agentless_xfer_status(x, &st);
	assert_int_equal(st.state, AGENTLESS_XFER_FAILED);
	assert_non_null(strstr(st.err.message, "stalled"));
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_FILE_ABORT);
	free(p);
	/* its late answer is dropped, not a violation */
	guest_u64(fx->gfd, WIRE_FILE_DONE, h.id, WIRE_T_SIZE, 0);
	agentless_xfer_release(x);
	usleep(50000);
	assert_int_equal(fx_broken_calls(fx), 0);
	assert_true(agentless_conn_alive(fx->conn));
	fx_free(fx);
}

/* Bytes the fake guest can read within ms (0 when none came). */
static size_t guest_drain(int fd, size_t cap, int ms)
{
	static uint8_t buf[1 << 20];
	size_t have = 0;
	struct pollfd pfd = {.fd = fd, .events = POLLIN};

	while (have < cap && poll(&pfd, 1, ms) == 1) {
		ssize_t n = read(fd, buf, SBX_MIN(sizeof buf, cap - have));
		if (n <= 0)
			break;
		have += (size_t)n;
	}
	return have;
}

static void guest_credit(int fd, uint32_t epoch, uint64_t acked)
{
	uint8_t buf[16];
	struct wire_writer w;

	wire_writer_init(&w, buf, sizeof buf);
	wire_put_u64(&w, WIRE_T_ACKED, acked);
	guest_send(fd, WIRE_CREDIT, epoch, buf, w.len);
}

/* A fixture over vmm/'s real socket channel (with its credit window). */
static struct fx *fx_new_vmm_chan(void)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	struct sbx_error err;
	struct sbx_channel ch;
	int fds[2];

	assert_non_null(fx);
	pthread_mutex_init(&fx->lock, NULL);
	fx->conn = agentless_conn_new(NULL, fx_on_broken, fx);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
	assert_int_equal(
	    vmm_chan_sock_from_fd(fds[0], "t", agentless_conn_recv, fx->conn, &ch, &err), 0);
	fx->gfd = fds[1];
	agentless_conn_attach(fx->conn, ch, false);
	return fx;
}

/* Protocol v4 over the real socket channel (vmm/): the host writes at most
 * WIRE_CHANNEL_WINDOW past the WELCOME and no more until the guest's
 * CREDIT; a CREDIT of another epoch grants nothing and breaks nothing; a
 * CREDIT for more than was written breaks the channel. */
static void test_credit_window(void **state)
{
	static char cmd[40000];
	struct agentless_exec_req req = *simple_req();
	struct fx *fx = fx_new_vmm_chan();
	struct sbx_error err;
	struct wire_header h;
	struct probe pr[4];
	uint8_t *p;

	(void)state;
	guest_hello(fx->gfd, WIRE_VERSION, WIRE_VERSION_MIN);
	assert_int_equal(agentless_conn_wait_hello(fx->conn, sbx_mono_ms() + 5000, &err), 0);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_WELCOME);
	uint32_t epoch = h.id;
	assert_int_not_equal(epoch, 0);
	assert_int_equal(field_u32(p, h.len, WIRE_T_WINDOW), WIRE_CHANNEL_WINDOW);
	free(p);

	/* four EXECs of ~40 KiB: more than the window */
	memset(cmd, 'x', sizeof cmd);
	req.command = cmd;
	req.command_len = sizeof cmd;
	for (int i = 0; i < 4; i++) {
		probe_init(&pr[i]);
		start(fx, &req, &pr[i]);
	}
	size_t total = guest_drain(fx->gfd, SIZE_MAX, 500);
	assert_true(total > 0 && total <= WIRE_CHANNEL_WINDOW);
	/* another epoch's credit: nothing more, nothing broken */
	guest_credit(fx->gfd, epoch + 1, WIRE_CHANNEL_WINDOW);
	assert_int_equal(guest_drain(fx->gfd, SIZE_MAX, 300), 0);
	assert_int_equal(fx_broken_calls(fx), 0);
	/* a HELLO again (or with another version) does not reopen the window */
	guest_hello(fx->gfd, 3, 1);
	guest_hello(fx->gfd, WIRE_VERSION, WIRE_VERSION_MIN);
	assert_int_equal(guest_drain(fx->gfd, SIZE_MAX, 300), 0);
	/* this epoch's: at most a window more each time, until all is there
	 * (the four EXECs and the two WELCOMEs) */
	for (;;) {
		guest_credit(fx->gfd, epoch, total);
		size_t more = guest_drain(fx->gfd, SIZE_MAX, 500);
		assert_true(more <= WIRE_CHANNEL_WINDOW);
		if (more == 0)
			break;
		total += more;
	}
	assert_true(total > 4 * sizeof cmd);
	assert_int_equal(fx_broken_calls(fx), 0);
	/* a lie: one byte more than was written */
	guest_credit(fx->gfd, epoch, total + 1);
	for (int i = 0; i < 4; i++) {
		probe_wait(&pr[i]);
		assert_false(pr[i].ok);
		probe_release(&pr[i]);
	}
	fx_wait_broken(fx);
	assert_int_equal(fx_broken_calls(fx), 1);
	assert_non_null(strstr(fx->broken_why, "CREDIT"));
	fx_free(fx);

	/* a v3 guest: test_window_without_credit */
}

/* ------------------------------------ a channel whose EXEC send fails */

/* A fake channel: the WELCOME goes through; an EXEC frame is refused (as
 * a queue past its cap, or a channel closing in a reopen, refuses it),
 * but only after a hostile guest that guessed the exec's id got a STDOUT
 * frame for it into the recv thread, whose on_output is still running
 * when send() returns. */
struct failing_chan {
	struct agentless_conn *conn;
	pthread_t rx;
	bool rx_started;
	uint32_t exec_id;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool in_output;	      /* on_output entered */
	bool output_returned; /* on_output returned */
	unsigned done_calls;
};

static void *failing_chan_rx(void *arg)
{
	struct failing_chan *f = arg;
	uint8_t buf[WIRE_HEADER_LEN + 4];

	agentless_conn_recv(f->conn, buf, frame_build(buf, WIRE_STDOUT, f->exec_id, "out!", 4));
	return NULL;
}

static int failing_chan_send(void *ctx, const void *buf, size_t len)
{
	struct failing_chan *f = ctx;
	struct wire_header h;

	assert_true(len >= WIRE_HEADER_LEN);
	assert_int_equal(wire_header_decode(buf, WIRE_MAX_PAYLOAD, &h), 0);
	if (h.type != WIRE_EXEC)
		return 0;
	f->exec_id = h.id;
	assert_int_equal(pthread_create(&f->rx, NULL, failing_chan_rx, f), 0);
	f->rx_started = true;
	pthread_mutex_lock(&f->lock);
	while (!f->in_output)
		pthread_cond_wait(&f->cond, &f->lock);
	pthread_mutex_unlock(&f->lock);
	return -1;
}

static void failing_chan_close(void *ctx)
{
	struct failing_chan *f = ctx;

	if (f->rx_started)
		pthread_join(f->rx, NULL);
	f->rx_started = false;
}

static bool failing_on_output(void *opaque, uint32_t id, bool is_stderr, const void *data,
			      size_t len)
{
	struct failing_chan *f = opaque;

	pthread_mutex_lock(&f->lock);
	f->in_output = true;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
	usleep(300 * 1000); /* still inside when the launch fails */
	pthread_mutex_lock(&f->lock);
	f->output_returned = true;
	pthread_mutex_unlock(&f->lock);
	return false;
}

static void failing_done(void *opaque, struct agentless_exec_result *res,
			 const struct sbx_error *err)
{
	struct failing_chan *f = opaque;

	pthread_mutex_lock(&f->lock);
	f->done_calls++;
	pthread_mutex_unlock(&f->lock);
	agentless_exec_result_release(res);
}

/* When agentless_exec_start() fails because the EXEC could not be sent,
 * nothing of that exec runs any more once it returns -1: not its
 * on_output (the caller frees the opaque) and not on freed memory (ASan
 * saw the recv thread write into the freed exec). */
static void test_launch_send_fails_during_output(void **state)
{
	struct failing_chan f = {0};
	struct agentless_exec_req req = *simple_req();
	struct sbx_error err;
	uint8_t hello[64], frame[128];
	struct wire_writer w;

	(void)state;
	pthread_mutex_init(&f.lock, NULL);
	pthread_cond_init(&f.cond, NULL);
	f.conn = agentless_conn_new(NULL, NULL, NULL);
	agentless_conn_attach(
	    f.conn,
	    (struct sbx_channel){.ctx = &f, .send = failing_chan_send, .close = failing_chan_close},
	    false);
	wire_writer_init(&w, hello, sizeof hello);
	wire_put_u32(&w, WIRE_T_VERSION, 3);
	wire_put_u32(&w, WIRE_T_VERSION_MIN, 1);
	agentless_conn_recv(f.conn, frame, frame_build(frame, WIRE_HELLO, 0, hello, w.len));
	assert_int_equal(agentless_conn_wait_hello(f.conn, sbx_mono_ms() + 5000, &err), 0);

	req.on_output = failing_on_output;
	assert_int_equal(agentless_exec_start(f.conn, &req, failing_done, &f, &err), -1);
	assert_int_equal(err.code, SBX_E_SANDBOX_ERROR);
	pthread_mutex_lock(&f.lock);
	assert_true(f.in_output);
	assert_true(f.output_returned); /* not running any more */
	pthread_mutex_unlock(&f.lock);
	pthread_join(f.rx, NULL);
	f.rx_started = false;
	assert_int_equal(f.done_calls, 0);
	assert_int_equal(agentless_conn_inflight(f.conn), 0);
	agentless_conn_free(f.conn, "test over");
	assert_int_equal(f.done_calls, 0);
	pthread_cond_destroy(&f.cond);
	pthread_mutex_destroy(&f.lock);
}

/* Read what the host writes for `ms` (until quiet) into buf at *have;
 * the bytes read. */
static size_t guest_collect(int fd, uint8_t *buf, size_t cap, size_t *have, int ms)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	size_t start = *have;

	while (*have < cap && poll(&pfd, 1, ms) == 1) {
		ssize_t n = read(fd, buf + *have, cap - *have);
		if (n <= 0)
			break;
		*have += (size_t)n;
	}
	return *have - start;
}

/* Walk the whole frames of buf from *off on: answer each window PING
 * (the host's own, id with the top bit) with its PONG; count EXECs. */
static void guest_answer_pings(int fd, const uint8_t *buf, size_t have, size_t *off,
			       unsigned *execs, unsigned *pings, uint32_t *epoch,
			       size_t *welcome_end)
{
	struct wire_header h;

	while (have - *off >= WIRE_HEADER_LEN) {
		assert_int_equal(wire_header_decode(buf + *off, WIRE_MAX_PAYLOAD, &h), 0);
		if (have - *off < WIRE_HEADER_LEN + h.len)
			return;
		if (h.type == WIRE_PING && (h.id & 0x80000000u)) {
			guest_send(fd, WIRE_PONG, h.id, buf + *off + WIRE_HEADER_LEN, h.len);
			(*pings)++;
		}
		if (h.type == WIRE_EXEC)
			(*execs)++;
		*off += WIRE_HEADER_LEN + h.len;
		if (h.type == WIRE_WELCOME && h.id != 0 && epoch) {
			*epoch = h.id;
			*welcome_end = *off;
		}
	}
}

/* Senders at once on a window a v3 guest confirms by PINGs: each PING is
 * queued right behind its own frame, never behind another sender's frame
 * that the window holds back (there it would never reach the guest, no
 * PONG would come, and the send deadline would break a channel whose guest
 * reads everything). */
struct burst {
	struct fx *fx;
	const struct agentless_exec_req *req;
	struct probe *pr;
	pthread_barrier_t *go;
};

static void *burst_start(void *arg)
{
	struct burst *b = arg;

	pthread_barrier_wait(b->go);
	start(b->fx, b->req, b->pr);
	return NULL;
}

static void test_window_pings_follow_their_frames(void **state)
{
	enum { N = 8 };
	static char cmd[60000];
	static uint8_t buf[1 << 20];
	struct agentless_exec_req req = *simple_req();
	struct fx *fx = fx_new_vmm_chan();
	struct sbx_error err;
	struct wire_header h;
	struct probe pr[N];
	struct burst b[N];
	pthread_t t[N];
	pthread_barrier_t go;
	size_t have = 0, off = 0;
	unsigned execs = 0, pings = 0;
	uint8_t *p;

	(void)state;
	memset(cmd, 'x', sizeof cmd);
	req.command = cmd;
	req.command_len = sizeof cmd;
	guest_hello(fx->gfd, 3, 1);
	assert_int_equal(agentless_conn_wait_hello(fx->conn, sbx_mono_ms() + 5000, &err), 0);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_WELCOME);
	free(p);
	pthread_barrier_init(&go, NULL, N);
	for (int i = 0; i < N; i++) {
		probe_init(&pr[i]);
		b[i] = (struct burst){.fx = fx, .req = &req, .pr = &pr[i], .go = &go};
		assert_int_equal(pthread_create(&t[i], NULL, burst_start, &b[i]), 0);
	}
	for (int i = 0; i < N; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&go);
	/* the guest reads all and answers every PING: all 8 EXECs arrive */
	for (int round = 0; round < 40 && execs < N; round++) {
		guest_collect(fx->gfd, buf, sizeof buf, &have, 250);
		guest_answer_pings(fx->gfd, buf, have, &off, &execs, &pings, NULL, NULL);
	}
	assert_int_equal(execs, N);
	assert_true(pings > 0);
	assert_int_equal(fx_broken_calls(fx), 0);
	fx_free(fx);
	for (int i = 0; i < N; i++) {
		probe_wait(&pr[i]);
		probe_release(&pr[i]);
	}
}

/* Over a channel with a window, a guest that does not CREDIT (it says v3,
 * or after a reattach says nothing, or says v3 then) still never has more
 * than the window in flight: the host confirms with PINGs of its own and
 * writes a window past what their PONGs confirm. */
static void test_window_without_credit(void **state)
{
	static char cmd[40000];
	static uint8_t buf[1 << 20];
	struct agentless_exec_req req = *simple_req();
	struct fx *fx = fx_new_vmm_chan();
	struct sbx_error err;
	struct wire_header h;
	struct probe pr[4];
	size_t have = 0, off = 0;
	unsigned execs = 0, pings = 0;
	uint8_t *p;

	(void)state;
	memset(cmd, 'x', sizeof cmd);
	req.command = cmd;
	req.command_len = sizeof cmd;

	/* a v3 guest: WELCOME id 0, no WINDOW, but a window all the same */
	guest_hello(fx->gfd, 3, 1);
	assert_int_equal(agentless_conn_wait_hello(fx->conn, sbx_mono_ms() + 5000, &err), 0);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_WELCOME);
	assert_int_equal(h.id, 0);
	free(p);
	for (int i = 0; i < 4; i++) {
		probe_init(&pr[i]);
		start(fx, &req, &pr[i]);
	}
	size_t first = guest_collect(fx->gfd, buf, sizeof buf, &have, 500);
	assert_true(first > 0 && first <= WIRE_CHANNEL_WINDOW);
	/* answering the PINGs lets the rest through */
	do {
		guest_answer_pings(fx->gfd, buf, have, &off, &execs, &pings, NULL, NULL);
	} while (guest_collect(fx->gfd, buf, sizeof buf, &have, 500) > 0);
	guest_answer_pings(fx->gfd, buf, have, &off, &execs, &pings, NULL, NULL);
	assert_int_equal(execs, 4);
	assert_true(pings > 0);
	assert_int_equal(fx_broken_calls(fx), 0);
	/* a request larger than such a window can confirm is refused */
	static char big[WIRE_CHANNEL_WINDOW];
	memset(big, 'y', sizeof big);
	req.command = big;
	req.command_len = sizeof big;
	assert_int_equal(agentless_exec_start(fx->conn, &req, probe_done, &pr[0], &err), -1);
	assert_int_equal(err.code, SBX_E_SANDBOX_ERROR);
	assert_non_null(strstr(err.message, "create a new sandbox"));
	req.command = cmd;
	req.command_len = sizeof cmd;
	fx_free(fx);
	for (int i = 0; i < 4; i++) {
		probe_wait(&pr[i]);
		probe_release(&pr[i]);
	}

	/* a reopen (daemon restart, host reconnect) to a guest that says
	 * nothing: the same */
	fx = fx_new_vmm_chan();
	int fds[2], oldfd = fx->gfd;
	struct sbx_channel ch;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
	assert_int_equal(
	    vmm_chan_sock_from_fd(fds[0], "t2", agentless_conn_recv, fx->conn, &ch, &err), 0);
	fx->gfd = fds[1];
	agentless_conn_attach(fx->conn, ch, true);
	close(oldfd);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_WELCOME);
	free(p);
	for (int i = 0; i < 4; i++) {
		probe_init(&pr[i]);
		start(fx, &req, &pr[i]);
	}
	have = 0;
	first = guest_collect(fx->gfd, buf, sizeof buf, &have, 500);
	assert_true(first > 0 && first <= WIRE_CHANNEL_WINDOW);
	/* then says v3: the window stays */
	guest_hello(fx->gfd, 3, 1);
	assert_true(guest_collect(fx->gfd, buf, sizeof buf, &have, 300) < 100); /* a WELCOME */
	assert_int_equal(fx_broken_calls(fx), 0);
	/* then v4 (as a v4 guest does after a reattach): the window moves to
	 * its CREDITs, counted from the end of the WELCOME that says so */
	guest_hello(fx->gfd, WIRE_VERSION, WIRE_VERSION_MIN);
	uint32_t epoch = 0;
	size_t welcome_end = 0;
	off = 0;
	execs = pings = 0;
	for (int round = 0; round < 100; round++) {
		guest_answer_pings(fx->gfd, buf, have, &off, &execs, &pings, &epoch, &welcome_end);
		if (epoch != 0)
			guest_credit(fx->gfd, epoch, have - welcome_end);
		if (guest_collect(fx->gfd, buf, sizeof buf, &have, 500) == 0)
			break;
	}
	guest_answer_pings(fx->gfd, buf, have, &off, &execs, &pings, &epoch, &welcome_end);
	assert_int_not_equal(epoch, 0);
	assert_int_equal(execs, 4);
	assert_int_equal(fx_broken_calls(fx), 0);
	/* more EXECs now flow by the CREDITs alone */
	struct probe pr2[3];
	for (int i = 0; i < 3; i++) {
		probe_init(&pr2[i]);
		start(fx, &req, &pr2[i]);
	}
	for (int round = 0; round < 100; round++) {
		guest_credit(fx->gfd, epoch, have - welcome_end);
		if (guest_collect(fx->gfd, buf, sizeof buf, &have, 500) == 0)
			break;
	}
	guest_answer_pings(fx->gfd, buf, have, &off, &execs, &pings, &epoch, &welcome_end);
	assert_int_equal(execs, 7);
	assert_int_equal(fx_broken_calls(fx), 0);
	fx_free(fx);
	for (int i = 0; i < 3; i++) {
		probe_wait(&pr2[i]);
		probe_release(&pr2[i]);
	}
	for (int i = 0; i < 4; i++) {
		probe_wait(&pr[i]);
		probe_release(&pr[i]);
	}
}

/* A sink that keeps what on_output gets: 'O'/'E' then the bytes, per call. */
struct gsink {
	pthread_mutex_t lock;
	char bytes[8192];
	size_t len;
	int calls;
	uint64_t charged, charge_max;
};

struct gctx {
	struct probe pr; /* first: done's opaque is the probe */
	struct gsink *g;
};

static bool gsink_output(void *opaque, uint32_t exec_id, bool is_stderr, const void *data,
			 size_t len)
{
	struct gsink *g = ((struct gctx *)opaque)->g;

	pthread_mutex_lock(&g->lock);
	if (g->len + len + 1 < sizeof g->bytes) {
		g->bytes[g->len++] = is_stderr ? 'E' : 'O';
		memcpy(g->bytes + g->len, data, len);
		g->len += len;
	}
	g->calls++;
	pthread_mutex_unlock(&g->lock);
	return false;
}

static bool gsink_charge(void *opaque, bool is_stderr, size_t len)
{
	struct gsink *g = ((struct gctx *)opaque)->g;
	bool ok;

	pthread_mutex_lock(&g->lock);
	ok = g->charged + len <= g->charge_max;
	if (ok)
		g->charged += len;
	pthread_mutex_unlock(&g->lock);
	return ok;
}

/* Tiny output frames that arrive back to back reach on_output gathered
 * (a guest's 1-byte frames do not cost an event each), in order, stdout
 * and stderr apart; a buffered exec whose charge is refused keeps no more
 * of that stream and says truncated. */
static void test_output_gathered_and_charged(void **state)
{
	static uint8_t frames[2000 * (WIRE_HEADER_LEN + 1)];
	struct fx *fx = fx_new(1000, 0);
	struct agentless_exec_req req = *simple_req();
	struct gsink g = {.charge_max = UINT64_MAX};
	struct gctx ctx = {.g = &g};
	struct wire_header h;
	uint8_t *p, chunk[60];
	size_t n = 0;

	(void)state;
	pthread_mutex_init(&g.lock, NULL);
	fx_handshake(fx);
	req.on_output = gsink_output;
	req.stdout_cap = req.stderr_cap = 4096;
	probe_init(&ctx.pr);
	start(fx, &req, &ctx.pr);
	guest_recv(fx->gfd, &h, &p);
	assert_int_equal(h.type, WIRE_EXEC);
	free(p);
	for (int i = 0; i < 2000; i++)
		n += frame_build(frames + n, i == 1000 ? WIRE_STDERR : WIRE_STDOUT, h.id, "a", 1);
	guest_write(fx->gfd, frames, n); /* one write: the reader takes 3000 bytes a time */
	guest_exit(fx->gfd, h.id, 0, 1999, 1, 0);
	probe_wait(&ctx.pr);
	assert_true(ctx.pr.ok);
	probe_release(&ctx.pr);
	pthread_mutex_lock(&g.lock);
	assert_true(g.calls >= 3 && g.calls <= 40); /* one per frame before */
	assert_int_equal(g.len, 2000 + (size_t)g.calls);
	/* in order: stdout's first 1000, then stderr's one, then the rest */
	size_t outs = 0;
	bool seen_err = false;
	for (size_t i = 0; i < g.len;) {
		char k = g.bytes[i++];
		assert_true(k == 'O' || k == 'E');
		while (i < g.len && g.bytes[i] == 'a') {
			if (k == 'O')
				outs++;
			i++;
			if (k == 'E')
				break;
		}
		if (k == 'E') {
			assert_int_equal(outs, 1000);
			seen_err = true;
		}
	}
	assert_true(seen_err);
	assert_int_equal(outs, 1999);
	pthread_mutex_unlock(&g.lock);

	/* buffered, charged: the second 60 bytes are refused */
	req.on_output = NULL;
	req.charge = gsink_charge;
	g.charge_max = 100;
	probe_init(&ctx.pr);
	start(fx, &req, &ctx.pr);
	guest_recv(fx->gfd, &h, &p);
	free(p);
	memset(chunk, 'b', sizeof chunk);
	for (int i = 0; i < 3; i++)
		guest_send(fx->gfd, WIRE_STDOUT, h.id, chunk, sizeof chunk);
	guest_exit(fx->gfd, h.id, 0, 180, 0, 0);
	probe_wait(&ctx.pr);
	assert_true(ctx.pr.ok);
	assert_int_equal(ctx.pr.res.stdout_len, 60);
	assert_int_equal(ctx.pr.res.stdout_total, 180);
	assert_true(ctx.pr.res.truncated);
	assert_int_equal(g.charged, 60);
	probe_release(&ctx.pr);
	fx_free(fx);
	pthread_mutex_destroy(&g.lock);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_handshake_and_welcome),
	    cmocka_unit_test(test_execution_guest_error_is_billed),
	    cmocka_unit_test(test_credit_window),
	    cmocka_unit_test(test_launch_send_fails_during_output),
	    cmocka_unit_test(test_window_without_credit),
	    cmocka_unit_test(test_window_pings_follow_their_frames),
	    cmocka_unit_test(test_output_gathered_and_charged),
	    cmocka_unit_test(test_version_mismatch),
	    cmocka_unit_test(test_exec_round_trip),
	    cmocka_unit_test(test_interleaved),
	    cmocka_unit_test(test_guest_errors),
	    cmocka_unit_test(test_violation_oversized_header),
	    cmocka_unit_test(test_violation_unknown_id),
	    cmocka_unit_test(test_violation_past_cap),
	    cmocka_unit_test(test_violation_unknown_type),
	    cmocka_unit_test(test_violation_duplicate_exit),
	    cmocka_unit_test(test_violation_forged_exit),
	    cmocka_unit_test(test_violation_flood),
	    cmocka_unit_test(test_eof_mid_exec),
	    cmocka_unit_test(test_backstop),
	    cmocka_unit_test(test_limits),
	    cmocka_unit_test(test_reattach),
	    cmocka_unit_test(test_stdin_v2_and_v1_refusal),
	    cmocka_unit_test(test_stream_output_and_flow_control),
	    cmocka_unit_test(test_pty_window_and_acks),
	    cmocka_unit_test(test_proc_call),
	    cmocka_unit_test(test_reattach_version_assumed),
	    cmocka_unit_test(test_ping_and_sync_exec),
	    cmocka_unit_test(test_host_time_not_the_guests),
	    cmocka_unit_test(test_xfer_v2_guest_refused),
	    cmocka_unit_test(test_xfer_upload_credit),
	    cmocka_unit_test(test_xfer_download_bounds),
	    cmocka_unit_test(test_xfer_too_large_and_errors),
	    cmocka_unit_test(test_xfer_stall),
	};

	sbx_log_set_level(SBX_LOG_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
