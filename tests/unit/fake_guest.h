/* A fake guest for unit tests of agentless/ (test_agentless.c,
 * test_agentless_tcp.c): a channel over a socketpair whose reader thread
 * feeds the conn, and the guest's end that writes and reads raw frames.
 * Include after <cmocka.h> (it asserts). It is a test of the host's
 * protocol handling; nothing here runs a command. */
#ifndef SBX_TESTS_FAKE_GUEST_H
#define SBX_TESTS_FAKE_GUEST_H

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agentless/agentless.h"
#include "agentless/wire.h"

/* ------------------------------------------------ a socketpair channel */

struct sock_chan {
	int fd;
	struct agentless_conn *conn;
	pthread_t reader;
	int closing;
};

static inline void *sock_chan_reader(void *arg)
{
	struct sock_chan *s = arg;
	uint8_t buf[3000]; /* odd size: frames straddle reads */

	for (;;) {
		ssize_t n = read(s->fd, buf, sizeof buf);

		if (__atomic_load_n(&s->closing, __ATOMIC_SEQ_CST))
			return NULL;
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			agentless_conn_recv(s->conn, NULL, 0);
			return NULL;
		}
		agentless_conn_recv(s->conn, buf, (size_t)n);
	}
}

static inline int sock_chan_send(void *ctx, const void *buf, size_t len)
{
	struct sock_chan *s = ctx;
	const uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = send(s->fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static inline void sock_chan_close(void *ctx)
{
	struct sock_chan *s = ctx;

	__atomic_store_n(&s->closing, 1, __ATOMIC_SEQ_CST);
	shutdown(s->fd, SHUT_RDWR);
	pthread_join(s->reader, NULL);
	close(s->fd);
	free(s);
}

/* Channel over fds[0]; the fake guest gets *guest_fd. */
static inline struct sbx_channel sock_chan_new(struct agentless_conn *conn, int *guest_fd)
{
	int fds[2];
	struct sock_chan *s = calloc(1, sizeof(*s));

	assert_non_null(s);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
	s->fd = fds[0];
	s->conn = conn;
	*guest_fd = fds[1];
	assert_int_equal(pthread_create(&s->reader, NULL, sock_chan_reader, s), 0);
	return (struct sbx_channel){.ctx = s, .send = sock_chan_send, .close = sock_chan_close};
}

/* ------------------------------------------------------ the fake guest */

static inline void guest_write(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		assert_true(n > 0);
		p += n;
		len -= (size_t)n;
	}
}

/* Build a frame into out (header + payload); returns its length. */
static inline size_t frame_build(uint8_t *out, uint8_t type, uint32_t id, const void *payload,
				 size_t len)
{
	struct wire_header h = {.type = type, .id = id, .len = (uint32_t)len};

	wire_header_encode(&h, out);
	if (len)
		memcpy(out + WIRE_HEADER_LEN, payload, len);
	return WIRE_HEADER_LEN + len;
}

static inline void guest_send(int fd, uint8_t type, uint32_t id, const void *payload, size_t len)
{
	uint8_t *buf = malloc(WIRE_HEADER_LEN + len);

	assert_non_null(buf);
	guest_write(fd, buf, frame_build(buf, type, id, payload, len));
	free(buf);
}

static inline void read_exact(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len > 0) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		ssize_t n;

		assert_int_equal(poll(&pfd, 1, 5000), 1);
		n = read(fd, p, len);
		assert_true(n > 0);
		p += n;
		len -= (size_t)n;
	}
}

/* Read one host frame; the payload (malloc'd) goes to *payload. */
static inline void guest_recv(int fd, struct wire_header *h, uint8_t **payload)
{
	uint8_t hdr[WIRE_HEADER_LEN];

	read_exact(fd, hdr, sizeof hdr);
	assert_int_equal(wire_header_decode(hdr, WIRE_MAX_PAYLOAD, h), 0);
	*payload = malloc(h->len + 1);
	assert_non_null(*payload);
	read_exact(fd, *payload, h->len);
}

#endif
