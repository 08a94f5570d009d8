/* sbx shell ID: an interactive terminal in a sandbox (docs/cli.md), over
 * GET /v1/sandboxes/{id}/terminal (docs/api.md "Terminal"). Debian's
 * libcurl (7.88) is built without WebSocket support, so this is a small
 * RFC 6455 client over a plain TCP socket, with the framing of util/ws.c:
 * the local terminal in raw mode, keystrokes as binary frames (masked, as
 * a client must), a resize message on SIGWINCH, the screen's bytes to
 * stdout, and the shell's exit code as sbx's. With stdin not a terminal
 * its bytes are typed as they are, and its end is a Ctrl-D. A connection
 * that drops before the shell ended is reattached once (?attach= with the
 * id of the server's first message), within the server's grace. http://
 * URLs only (no TLS here yet).
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "../util/util.h"
#include "sbx.h"

static const char shell_help[] =
    "usage: sbx shell ID\n"
    "\n"
    "An interactive shell in sandbox ID: the exec user's login shell on a\n"
    "terminal of this window's size (resized with it). Exits with the\n"
    "shell's exit code. With stdin not a terminal, its bytes are typed and\n"
    "its end is a Ctrl-D. A dropped connection is reattached once.\n"
    "http:// URLs only.\n";

static int winch_pipe[2] = {-1, -1};
static struct termios saved;
static bool raw_on;

static void on_winch(int sig)
{
	int e = errno;

	(void)sig;
	if (write(winch_pipe[1], "w", 1) < 0) {
	}
	errno = e;
}

static void raw_restore(void)
{
	if (raw_on)
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
	raw_on = false;
}

static void raw_enter(void)
{
	struct termios t;

	if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved) < 0)
		return;
	t = saved;
	cfmakeraw(&t);
	if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &t) == 0)
		raw_on = true;
}

static void win_size(unsigned *rows, unsigned *cols)
{
	struct winsize ws;

	*rows = 24;
	*cols = 80;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
		*rows = ws.ws_row > 1000 ? 1000 : ws.ws_row;
		*cols = ws.ws_col > 1000 ? 1000 : ws.ws_col;
	}
}

static int send_all(int fd, const void *p, size_t n)
{
	const char *b = p;

	while (n > 0) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* One masked frame to the server. */
static int ws_send(int fd, uint8_t op, const void *p, size_t len)
{
	uint8_t buf[WS_HEADER_MAX + 4096], key[4];
	size_t h;

	if (len > 4096 || RAND_bytes(key, 4) != 1)
		return -1;
	h = ws_header_encode(buf, op, true, len, key);
	memcpy(buf + h, p, len);
	ws_mask(buf + h, len, key, 0);
	return send_all(fd, buf, h + len);
}

static int connect_to(const char *host, const char *port)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *ai;
	int fd = -1;

	if (getaddrinfo(host, port, &hints, &res) != 0)
		return -1;
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return fd;
}

#define SHELL_BUSY (-409) /* shell_open's rc: 409 terminal_attached */

/* The handshake. Returns the socket (bytes read past the head in
 * extra/extra_len), or -1 with *rc the exit code (an error reply printed). */
static int shell_open(struct cli *c, const char *id, const char *attach, unsigned rows,
		      unsigned cols, uint8_t *extra, size_t *extra_len, int *rc)
{
	char host[256], port[8] = "80", req[1024], att[64] = "", head[16384],
			accept[WS_ACCEPT_LEN + 1], *end;
	const char *h = c->url + 7, *slash, *colon;
	uint8_t nonce[16];
	char *key;
	size_t hl = 0;
	int fd;

	*rc = CLI_EXIT_CONNECT;
	if (strncmp(c->url, "http://", 7) != 0) {
		*rc = cli_usage(c, "%s", "sbx shell speaks plain http:// only (no TLS yet)");
		return -1;
	}
	slash = strchr(h, '/');
	colon = memchr(h, ':', slash ? (size_t)(slash - h) : strlen(h));
	snprintf(host, sizeof host, "%.*s",
		 (int)(colon   ? colon - h
		       : slash ? slash - h
			       : (long)strlen(h)),
		 h);
	if (colon)
		snprintf(port, sizeof port, "%.*s",
			 (int)(slash ? slash - colon - 1 : (long)strlen(colon + 1)), colon + 1);
	if (RAND_bytes(nonce, sizeof nonce) != 1 || !(key = sbx_base64_encode(nonce, sizeof nonce)))
		return -1;
	if (ws_accept(key, accept) < 0 || (fd = connect_to(host, port)) < 0) {
		fprintf(stderr, "sbx: cannot reach %s\n", c->url);
		free(key);
		return -1;
	}
	if (attach)
		snprintf(att, sizeof att, "attach=%.40s&", attach);
	snprintf(req, sizeof req,
		 "GET %s/v1/sandboxes/%s/terminal?%srows=%u&cols=%u HTTP/1.1\r\nHost: %s:%s\r\n"
		 "Authorization: Bearer %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
		 "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nUser-Agent: sbx\r\n\r\n",
		 slash ? slash : "", id, att, rows, cols, host, port, c->key, key);
	free(key);
	if (send_all(fd, req, strlen(req)) < 0)
		goto gone;
	while (!(end = memmem(head, hl, "\r\n\r\n", 4))) {
		ssize_t n = recv(fd, head + hl, sizeof head - 1 - hl, 0);

		if (n <= 0)
			goto gone;
		hl += (size_t)n;
	}
	head[hl] = '\0';
	if (strncmp(head, "HTTP/1.1 101", 12) == 0) {
		if (!strcasestr(head, accept))
			goto gone;
		*extra_len = hl - (size_t)(end + 4 - head);
		memcpy(extra, end + 4, *extra_len);
		return fd;
	}
	{
		struct cli_reply r = {.status = atol(head + 9)};
		const char *cl = strcasestr(head, "Content-Length:");
		size_t want = cl ? (size_t)atol(cl + 15) : 0, off = (size_t)(end + 4 - head);

		while (hl - off < want && hl < sizeof head - 1) {
			ssize_t n = recv(fd, head + hl, sizeof head - 1 - hl, 0);

			if (n <= 0)
				break;
			hl += (size_t)n;
		}
		head[hl] = '\0';
		if (attach && r.status == 409) { /* the server has not seen the drop yet */
			*rc = SHELL_BUSY;
			close(fd);
			return -1;
		}
		r.body = head + off;
		r.body_len = hl - off;
		r.json = json_tokener_parse(r.body);
		*rc = cli_fail(c, &r);
		json_object_put(r.json);
		close(fd);
		return -1;
	}
gone:
	fprintf(stderr, "sbx: %s did not open a terminal\n", c->url);
	close(fd);
	return -1;
}

struct shell {
	int fd;
	uint8_t in[WS_HEADER_MAX + 128 * 1024];
	size_t in_len;
	char text[4096];
	size_t text_len;
	int exit_code;	  /* -1 until {"type":"exit"} */
	char term_id[48]; /* from {"type":"terminal"}: for a reattach */
	long grace_ms;	  /* its reconnect_grace_ms */
	bool failed;
	bool closed;
};

/* A complete text message from the server. */
static void shell_text(struct shell *s)
{
	json_object *o = json_tokener_parse(s->text), *v, *e;

	if (o && json_object_object_get_ex(o, "type", &v)) {
		if (strcmp(json_object_get_string(v), "terminal") == 0 &&
		    json_object_object_get_ex(o, "id", &e))
			snprintf(s->term_id, sizeof s->term_id, "%s", json_object_get_string(e));
		if (strcmp(json_object_get_string(v), "terminal") == 0 &&
		    json_object_object_get_ex(o, "reconnect_grace_ms", &e))
			s->grace_ms = (long)json_object_get_int64(e);
		if (strcmp(json_object_get_string(v), "exit") == 0 &&
		    json_object_object_get_ex(o, "exit_code", &v))
			s->exit_code = json_object_get_int(v);
		if (strcmp(json_object_get_string(v), "error") == 0 &&
		    json_object_object_get_ex(o, "error", &e) &&
		    json_object_object_get_ex(e, "message", &v)) {
			raw_restore();
			fprintf(stderr, "\r\nsbx: the terminal failed: %s\n",
				json_object_get_string(v));
			s->failed = true;
		}
	}
	json_object_put(o);
	s->text_len = 0;
}

/* Handle the complete frames read. -1 on a protocol error. */
static int shell_frames(struct shell *s)
{
	size_t off = 0;

	while (!s->closed) {
		struct ws_frame f;
		int rc = ws_frame_parse(s->in + off, s->in_len - off, false, sizeof s->in - 16, &f);
		const uint8_t *p;

		if (rc < 0)
			return -1;
		if (rc == 0 || s->in_len - off < f.hdr_len + f.len)
			break;
		p = s->in + off + f.hdr_len;
		if (f.opcode == WS_OP_BINARY) {
			for (size_t w = 0; w < f.len;) {
				ssize_t n = write(STDOUT_FILENO, p + w, (size_t)f.len - w);

				if (n < 0 && errno == EINTR)
					continue;
				if (n <= 0)
					return -1;
				w += (size_t)n;
			}
		} else if (f.opcode == WS_OP_TEXT || f.opcode == WS_OP_CONT) {
			size_t n = SBX_MIN((size_t)f.len, sizeof s->text - 1 - s->text_len);

			memcpy(s->text + s->text_len, p, n);
			s->text_len += n;
			s->text[s->text_len] = '\0';
			if (f.fin)
				shell_text(s);
		} else if (f.opcode == WS_OP_PING) {
			ws_send(s->fd, WS_OP_PONG, p, (size_t)f.len);
		} else if (f.opcode == WS_OP_CLOSE) {
			ws_send(s->fd, WS_OP_CLOSE, p, f.len >= 2 ? 2 : 0);
			s->closed = true;
		}
		off += f.hdr_len + (size_t)f.len;
	}
	memmove(s->in, s->in + off, s->in_len - off);
	s->in_len -= off;
	return 0;
}

static int shell_loop(struct shell *s)
{
	bool stdin_open = true;
	char buf[4096];

	if (shell_frames(s) < 0)
		return -1;
	while (!s->closed) {
		struct pollfd p[3] = {{.fd = s->fd, .events = POLLIN},
				      {.fd = winch_pipe[0], .events = POLLIN},
				      {.fd = stdin_open ? STDIN_FILENO : -1, .events = POLLIN}};
		ssize_t n;

		if (poll(p, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (p[1].revents & POLLIN) {
			unsigned rows, cols;
			char msg[96];

			while (read(winch_pipe[0], buf, sizeof buf) > 0)
				;
			win_size(&rows, &cols);
			snprintf(msg, sizeof msg, "{\"type\":\"resize\",\"rows\":%u,\"cols\":%u}",
				 rows, cols);
			if (ws_send(s->fd, WS_OP_TEXT, msg, strlen(msg)) < 0)
				return -1;
		}
		if (p[2].revents & (POLLIN | POLLHUP)) {
			n = read(STDIN_FILENO, buf, sizeof buf);
			if (n > 0 && ws_send(s->fd, WS_OP_BINARY, buf, (size_t)n) < 0)
				return -1;
			if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
				stdin_open = false; /* the end of the input: a Ctrl-D */
				if (ws_send(s->fd, WS_OP_BINARY, "\x04", 1) < 0)
					return -1;
			}
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			n = recv(s->fd, s->in + s->in_len, sizeof s->in - s->in_len, 0);
			if (n <= 0)
				return s->exit_code >= 0 ? 0 : -1;
			s->in_len += (size_t)n;
			if (shell_frames(s) < 0)
				return -1;
		}
	}
	return 0;
}

/* The connection dropped with the shell running: once more, by its id
 * (docs/api.md "Terminal", reattach), a 409 (the server has not seen the
 * drop yet) retried each second within the grace. The loop's result, or
 * -1. */
static int shell_reattach(struct cli *c, struct shell *s, const char *id)
{
	unsigned rows, cols;
	int rc;

	if (s->grace_ms <= 0)
		return -1;
	fprintf(stderr, "\r\nsbx: the terminal's connection dropped; reattaching\r\n");
	close(s->fd);
	for (long waited = 0;; waited += 1000) {
		s->in_len = s->text_len = 0;
		win_size(&rows, &cols);
		s->fd = shell_open(c, id, s->term_id, rows, cols, s->in, &s->in_len, &rc);
		if (s->fd >= 0)
			break;
		if (rc != SHELL_BUSY || waited + 1000 > s->grace_ms)
			return -1;
		sleep(1);
	}
	return shell_loop(s);
}

int cmd_shell(struct cli *c, int argc, char **argv)
{
	struct sigaction sa = {.sa_handler = on_winch, .sa_flags = SA_RESTART};
	const char *pos[1];
	struct shell *s;
	unsigned rows, cols;
	int npos, rc, loop;

	if ((rc = cli_begin(c, argc, argv, NULL, pos, 1, &npos, NULL, NULL, shell_help)) >= 0)
		return rc;
	if (npos != 1)
		return cli_usage(c, "%s", "give one sandbox id");
	if (!cli_id_ok(pos[0]))
		return cli_usage(c, "'%.60s' is not a sandbox id", pos[0]);
	s = calloc(1, sizeof(*s));
	if (!s || pipe2(winch_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		free(s);
		return CLI_EXIT_CONNECT;
	}
	s->exit_code = -1;
	win_size(&rows, &cols);
	s->fd = shell_open(c, pos[0], NULL, rows, cols, s->in, &s->in_len, &rc);
	if (s->fd < 0) {
		free(s);
		return rc;
	}
	sigaction(SIGWINCH, &sa, NULL);
	raw_enter();
	loop = shell_loop(s);
	if (loop < 0 && s->exit_code < 0 && !s->failed && !s->closed && s->term_id[0])
		loop = shell_reattach(c, s, pos[0]);
	raw_restore();
	if (s->fd >= 0)
		close(s->fd);
	rc = s->exit_code >= 0 ? s->exit_code : s->failed ? CLI_EXIT_API : CLI_EXIT_CONNECT;
	if (loop < 0 && s->exit_code < 0 && !s->failed)
		fprintf(stderr, "sbx: the terminal's connection was lost\n");
	free(s);
	return rc;
}
