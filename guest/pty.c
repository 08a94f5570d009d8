/* sandboxd-init: terminals (protocol v5), the input side.
 *
 * A terminal is an exec (serve.c) whose command is the exec user's login
 * shell on a pseudo-terminal (spawn.c opens it): its output is the exec's
 * stdout, read from a dup of the master like any pipe. What is here is the
 * other direction: PTY_INPUT bytes wait in a buffer of at most
 * WIRE_PTY_WINDOW bytes per terminal until the master takes them (written
 * non-blocking, polled for POLLOUT), and the bytes consumed are reported
 * in PTY_ACK frames, so the host never has more than the window in flight
 * and PID 1 never blocks on a shell that does not read. PTY_RESIZE sets the
 * window size (the kernel sends SIGWINCH to the foreground job).
 */
#include "guest/init.h"
#include "agentless/wire.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#define PTY_MAX 64 /* terminals at once (the host allows fewer) */

static struct pty {
	bool used;
	bool detached; /* its connection is gone: no acks, input ignored */
	uint32_t id;
	int fd; /* the master, owned */
	uint8_t *buf;
	size_t len;
	uint64_t done, acked; /* bytes consumed (written or dropped), reported */
} T[PTY_MAX];

int guest_pty_add(uint32_t id, int fd)
{
	for (int i = 0; i < PTY_MAX; i++) {
		if (!T[i].used) {
			T[i] = (struct pty){.used = true, .id = id, .fd = fd};
			return i;
		}
	}
	return -1;
}

void guest_pty_remove(int slot)
{
	struct pty *t;

	if (slot < 0 || slot >= PTY_MAX || !T[slot].used)
		return;
	t = &T[slot];
	close(t->fd);
	free(t->buf);
	memset(t, 0, sizeof(*t));
}

static struct pty *pty_find(uint32_t id)
{
	for (int i = 0; i < PTY_MAX; i++)
		if (T[i].used && !T[i].detached && T[i].id == id)
			return &T[i];
	return NULL;
}

/* Write what the master takes now. A master that fails for good (EIO once
 * the shell and its children closed the slave) consumes the rest. */
static void pty_write(struct pty *t)
{
	while (t->len > 0) {
		ssize_t n = write(t->fd, t->buf, t->len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0)
			n = (ssize_t)t->len;
		memmove(t->buf, t->buf + n, t->len - (size_t)n);
		t->len -= (size_t)n;
		t->done += (uint64_t)n;
	}
}

static void pty_input(struct pty *t, const uint8_t *p, size_t len)
{
	size_t room = WIRE_PTY_WINDOW - t->len, take = len < room ? len : room;

	if (!t->buf && !(t->buf = malloc(WIRE_PTY_WINDOW)))
		take = 0;
	memcpy(t->buf + t->len, p, take);
	t->len += take;
	t->done += len - take; /* past the window (a host's fault): dropped */
	pty_write(t);
}

static void pty_resize(struct pty *t, const uint8_t *p, size_t len)
{
	struct wire_reader rd;
	struct wire_field f;
	uint32_t rows = 0, cols = 0, v;
	struct winsize ws;

	wire_reader_init(&rd, p, len);
	while (wire_next(&rd, &f) == 1) {
		if ((f.tag != WIRE_T_ROWS && f.tag != WIRE_T_COLS) || wire_field_u32(&f, &v) < 0)
			continue;
		if (f.tag == WIRE_T_ROWS)
			rows = v;
		else
			cols = v;
	}
	if (rows < 1 || rows > WIRE_PTY_DIM_MAX || cols < 1 || cols > WIRE_PTY_DIM_MAX)
		return;
	ws = (struct winsize){.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
	ioctl(t->fd, TIOCSWINSZ, &ws);
}

void guest_pty_frame(uint8_t type, uint32_t id, const uint8_t *p, size_t len)
{
	struct pty *t = pty_find(id);

	if (!t)
		return;
	if (type == WIRE_PTY_INPUT)
		pty_input(t, p, len);
	else if (type == WIRE_PTY_RESIZE)
		pty_resize(t, p, len);
}

unsigned guest_pty_pollfds(struct pollfd *pfd, unsigned *slot, unsigned max)
{
	unsigned n = 0;

	for (unsigned i = 0; i < PTY_MAX && n < max; i++) {
		if (!T[i].used || T[i].len == 0)
			continue;
		pfd[n] = (struct pollfd){.fd = T[i].fd, .events = POLLOUT};
		slot[n++] = i;
	}
	return n;
}

void guest_pty_ready(unsigned slot)
{
	if (slot < PTY_MAX && T[slot].used)
		pty_write(&T[slot]);
}

void guest_pty_acks(void)
{
	for (int i = 0; i < PTY_MAX; i++) {
		struct pty *t = &T[i];
		uint8_t buf[16];
		struct wire_writer w;

		if (!t->used || t->detached || t->done == t->acked)
			continue;
		wire_writer_init(&w, buf, sizeof(buf));
		wire_put_u64(&w, WIRE_T_ACKED, t->done);
		guest_frame_send(WIRE_PTY_ACK, t->id, buf, w.len);
		t->acked = t->done;
	}
}

void guest_pty_disconnected(void)
{
	for (int i = 0; i < PTY_MAX; i++) {
		if (!T[i].used)
			continue;
		T[i].detached = true;
		T[i].done += T[i].len;
		T[i].len = 0;
	}
}
