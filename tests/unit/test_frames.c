/* Unit tests of the frame budget (agentless.h, AGENTLESS_FRAMES_PER_S):
 * a fake guest on a socketpair floods the host with 1-byte output frames.
 * Over the real socket channel (vmm/channel.c, which can hold its input)
 * the host takes no more frames than the budget allows and the rest wait
 * in the socket, none lost; over a channel that cannot hold its input (as
 * the stream transport) a guest that runs far past the budget breaks its
 * own channel. The fake guest is a test of the host's protocol handling. */
#include <errno.h>
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
#include "vmm/vmm-priv.h"

/* The most frames one read of the socket channel can hold (64 KiB reads):
 * the host sees a read whole before it can hold the next. */
#define FRAMES_PER_READ (64 * 1024 / (WIRE_HEADER_LEN + 1) + 1)

struct fx {
	struct agentless_conn *conn;
	int gfd;
	pthread_mutex_t lock;
	uint64_t delivered; /* output bytes handed to on_output */
	int broken;
	char why[256];
	int done_calls;
	bool done_ok;
	struct agentless_exec_result res;
};

static void fx_on_broken(void *opaque, const char *why)
{
	struct fx *fx = opaque;

	pthread_mutex_lock(&fx->lock);
	fx->broken++;
	snprintf(fx->why, sizeof fx->why, "%s", why);
	pthread_mutex_unlock(&fx->lock);
}

static bool fx_output(void *opaque, uint32_t exec_id, bool is_stderr, const void *data, size_t len)
{
	struct fx *fx = opaque;

	(void)exec_id, (void)is_stderr, (void)data;
	pthread_mutex_lock(&fx->lock);
	fx->delivered += len;
	pthread_mutex_unlock(&fx->lock);
	return false;
}

static void fx_done(void *opaque, struct agentless_exec_result *res, const struct sbx_error *err)
{
	struct fx *fx = opaque;

	(void)err;
	pthread_mutex_lock(&fx->lock);
	fx->done_calls++;
	fx->done_ok = res != NULL;
	if (res) {
		fx->res = *res;
		memset(res, 0, sizeof(*res));
	}
	pthread_mutex_unlock(&fx->lock);
}

static uint64_t fx_delivered(struct fx *fx)
{
	pthread_mutex_lock(&fx->lock);
	uint64_t n = fx->delivered;
	pthread_mutex_unlock(&fx->lock);
	return n;
}

/* Wait (up to 30 s) until the exec is done or the channel broke. */
static void fx_wait_end(struct fx *fx)
{
	for (int i = 0; i < 30000; i++) {
		pthread_mutex_lock(&fx->lock);
		bool end = fx->done_calls > 0 && (fx->done_ok || fx->broken > 0);
		pthread_mutex_unlock(&fx->lock);
		if (end)
			return;
		usleep(1000);
	}
}

static void guest_write(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return; /* the host closed: the rest goes nowhere */
		p += n;
		len -= (size_t)n;
	}
}

static void guest_send(int fd, uint8_t type, uint32_t id, const void *payload, size_t len)
{
	uint8_t buf[256];
	struct wire_header h = {.type = type, .id = id, .len = (uint32_t)len};

	assert_true(len <= sizeof buf - WIRE_HEADER_LEN);
	wire_header_encode(&h, buf);
	memcpy(buf + WIRE_HEADER_LEN, payload, len);
	guest_write(fd, buf, WIRE_HEADER_LEN + len);
}

/* Read one host frame of type `type`; its id. */
static uint32_t guest_expect(int fd, uint8_t type)
{
	uint8_t hdr[WIRE_HEADER_LEN], skip[4096];
	struct wire_header h;
	size_t got = 0;

	while (got < sizeof hdr) {
		ssize_t n = read(fd, hdr + got, sizeof hdr - got);

		assert_true(n > 0);
		got += (size_t)n;
	}
	assert_int_equal(wire_header_decode(hdr, WIRE_MAX_PAYLOAD, &h), 0);
	assert_int_equal(h.type, type);
	for (size_t left = h.len; left > 0;) {
		ssize_t n = read(fd, skip, SBX_MIN(left, sizeof skip));

		assert_true(n > 0);
		left -= (size_t)n;
	}
	return h.id;
}

/* A conn over the real socket channel (hold_rx on, unless `no_hold`),
 * past its handshake, with one streamed exec whose id goes to *id. */
static struct fx *fx_new(bool no_hold, uint32_t cap, uint32_t *id)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	struct agentless_exec_req req = {
	    .command = "flood",
	    .command_len = 5,
	    .cwd = "/",
	    .timeout_ms = 60000,
	    .stdout_cap = cap,
	    .stderr_cap = 1024,
	    .on_output = fx_output,
	};
	uint8_t hello[64];
	struct wire_writer w;
	struct sbx_error err;
	struct sbx_channel ch;
	int fds[2];

	assert_non_null(fx);
	pthread_mutex_init(&fx->lock, NULL);
	fx->conn = agentless_conn_new(NULL, fx_on_broken, fx);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
	assert_int_equal(
	    vmm_chan_sock_from_fd(fds[0], "t", agentless_conn_recv, fx->conn, &ch, &err), 0);
	assert_non_null(ch.hold_rx);
	if (no_hold)
		ch.hold_rx = NULL; /* as the stream transport */
	fx->gfd = fds[1];
	agentless_conn_attach(fx->conn, ch, false);

	wire_writer_init(&w, hello, sizeof hello);
	wire_put_u32(&w, WIRE_T_VERSION, WIRE_VERSION);
	wire_put_u32(&w, WIRE_T_VERSION_MIN, WIRE_VERSION_MIN);
	guest_send(fx->gfd, WIRE_HELLO, 0, hello, w.len);
	assert_int_equal(agentless_conn_wait_hello(fx->conn, sbx_mono_ms() + 5000, &err), 0);
	guest_expect(fx->gfd, WIRE_WELCOME);
	assert_int_equal(agentless_exec_start(fx->conn, &req, fx_done, fx, &err), 0);
	*id = guest_expect(fx->gfd, WIRE_EXEC);
	return fx;
}

static void fx_free(struct fx *fx)
{
	agentless_conn_free(fx->conn, "test over");
	close(fx->gfd);
	agentless_exec_result_release(&fx->res);
	pthread_mutex_destroy(&fx->lock);
	free(fx);
}

/* The fake guest: `n` 1-byte STDOUT frames for `id` as fast as the socket
 * takes them, then EXIT. */
struct flood {
	int fd;
	uint32_t id, n;
};

static void *flood_main(void *arg)
{
	struct flood *f = arg;
	size_t frame = WIRE_HEADER_LEN + 1, len = (size_t)f->n * frame;
	uint8_t *buf = malloc(len), exit_p[64];
	struct wire_header h = {.type = WIRE_STDOUT, .id = f->id, .len = 1};
	struct wire_writer w;

	if (!buf)
		return NULL;
	for (uint32_t i = 0; i < f->n; i++) {
		wire_header_encode(&h, buf + i * frame);
		buf[i * frame + WIRE_HEADER_LEN] = 't';
	}
	guest_write(f->fd, buf, len);
	free(buf);
	wire_writer_init(&w, exit_p, sizeof exit_p);
	wire_put_u32(&w, WIRE_T_EXIT_CODE, 0);
	wire_put_u64(&w, WIRE_T_STDOUT_TOTAL, f->n);
	guest_send(f->fd, WIRE_EXIT, f->id, exit_p, w.len);
	return NULL;
}

/* Over the socket channel the host takes at most the burst, the budget's
 * rate and one read's frames past it; the guest's writes wait meanwhile
 * (nothing is dropped: the exec ends with every byte), and nothing
 * breaks. */
static void test_budget_holds_the_guest(void **state)
{
	const uint32_t n = AGENTLESS_FRAME_BURST + 2 * AGENTLESS_FRAMES_PER_S;
	struct flood f = {.n = n};
	pthread_t t;
	uint32_t id;

	(void)state;
	struct fx *fx = fx_new(false, n, &id);
	f.fd = fx->gfd;
	f.id = id;
	int64_t t0 = sbx_mono_ms();
	assert_int_equal(pthread_create(&t, NULL, flood_main, &f), 0);
	usleep(400 * 1000);
	uint64_t seen = fx_delivered(fx);
	int64_t elapsed = sbx_mono_ms() - t0;
	/* an upper bound only: a slow machine takes fewer */
	uint64_t allowed = AGENTLESS_FRAME_BURST +
			   (uint64_t)elapsed * AGENTLESS_FRAMES_PER_S / 1000 + FRAMES_PER_READ;
	print_message("after %lld ms: %llu frames taken, at most %llu allowed\n",
		      (long long)elapsed, (unsigned long long)seen, (unsigned long long)allowed);
	assert_true(seen > 0);
	assert_true(seen <= allowed);

	pthread_join(t, NULL);
	fx_wait_end(fx);
	pthread_mutex_lock(&fx->lock);
	assert_int_equal(fx->broken, 0);
	assert_int_equal(fx->done_calls, 1);
	assert_true(fx->done_ok);
	assert_int_equal(fx->delivered, n);
	assert_int_equal(fx->res.stdout_total, n);
	pthread_mutex_unlock(&fx->lock);
	fx_free(fx);
}

/* Over a channel that cannot hold its input, a guest that goes
 * AGENTLESS_FRAME_DEBT_MAX frames past the budget breaks its channel (a
 * protocol violation) and its exec fails; the host stops taking its
 * frames. */
static void test_flood_without_hold_breaks(void **state)
{
	const uint32_t n = 2 * (AGENTLESS_FRAME_BURST + AGENTLESS_FRAME_DEBT_MAX);
	struct flood f = {.n = n};
	pthread_t t;
	uint32_t id;

	(void)state;
	struct fx *fx = fx_new(true, n, &id);
	f.fd = fx->gfd;
	f.id = id;
	assert_int_equal(pthread_create(&t, NULL, flood_main, &f), 0);
	pthread_join(t, NULL);
	fx_wait_end(fx);
	pthread_mutex_lock(&fx->lock);
	assert_int_equal(fx->broken, 1);
	assert_non_null(strstr(fx->why, "flood of frames"));
	assert_int_equal(fx->done_calls, 1);
	assert_false(fx->done_ok);
	assert_true(fx->delivered < n);
	pthread_mutex_unlock(&fx->lock);
	fx_free(fx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_budget_holds_the_guest),
	    cmocka_unit_test(test_flood_without_hold_breaks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
