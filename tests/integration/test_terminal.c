/* Terminals (issue 32) in a real guest: GET /v1/sandboxes/{id}/terminal
 * over a WebSocket, driven by a real client (the RFC 6455 framing of
 * util/ws.c over a TCP socket, masking its frames as a client must).
 *
 * One daemon, the full image (python3), ONE guest shared by every case:
 * `stty size` reads back the rows and cols asked for, and the new ones
 * after a resize message; the python3 REPL answers print(6*7); Ctrl-C
 * (0x03) interrupts a `sleep 100` and the prompt comes back; `exit 3`
 * ends the terminal with {"type":"exit","exit_code":3} and a close frame
 * "exit 3"; another account gets 404, a request without the upgrade 400,
 * bad rows 400, past the per-sandbox limit 429; a browser's key in the
 * subprotocol opens one (401 when wrong, 403 from another Origin, the key
 * never echoed); closing the WebSocket
 * hangs the shell up (its `sleep` is gone from the guest); dropping it
 * (no close frame) detaches it for the grace (8 s here): ?attach= with
 * the id of its first message reattaches the same shell (a variable set
 * before the drop, the output printed meanwhile), 404 for another
 * account or an unknown id, 409 while attached, 404 past the grace, whose
 * end hangs the shell up; `sbx shell` through a relay whose connections
 * are cut reattaches by itself; and a terminal
 * nobody reads while the guest prints 100 MB keeps the daemon's VmRSS
 * within 64 MiB of where it started, after which its output flows again
 * when read. Figures are printed; the throughput to a reading client is
 * bench/terminal's; what a pause does to terminals is test_pause's. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "relay.h"

static struct daemon d;
static char other_key[128];
static char sbx[64];

static int setup(void **state)
{
	(void)state;
	if (daemon_up_full_second_account(
		&d, "test_terminal",
		"\"http_threads\": 2, \"destroy_on_exit\": true, \"max_terminals_per_sandbox\": 3, "
		"\"terminal_reconnect_grace_ms\": 8000",
		"other", "10", other_key, sizeof(other_key)) < 0)
		return -1;
	return daemon_create_sandbox(&d, sbx, sizeof(sbx));
}

static int teardown(void **state)
{
	(void)state;
	return daemon_down(&d);
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------- client */

struct tc {
	int fd;
	uint8_t in[256 * 1024];
	size_t in_len;
	char *screen; /* what came since the last clear, NUL-terminated */
	size_t screen_len, screen_cap;
	uint64_t total; /* screen bytes ever */
	bool ended;
	int exit_code; /* from {"type":"exit"}, -1 */
	int close_code;
	char close_reason[128];
	char term_id[64]; /* from {"type":"terminal"} */
	int grace_ms;	  /* its reconnect_grace_ms, -1 */
	bool reattached;  /* its reattached */
};

/* Open a terminal as `key` (NULL: none) with `extra` header lines (each
 * ending in CRLF; NULL: none); *status is the HTTP status (101 when open).
 * The reply's body goes to body (when not 101), its head to head (when
 * not NULL, at most 8 KiB). */
static struct tc *tc_open_ex(const char *key, const char *id, const char *query, bool upgrade,
			     const char *extra, int *status, char *body, size_t body_len,
			     char *head_out)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d.port)};
	char req[1024], head[8192];
	size_t hl = 0;
	struct tc *t = calloc(1, sizeof(*t));
	char *end;

	assert_non_null(t);
	t->exit_code = -1;
	t->grace_ms = -1;
	t->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(connect(t->fd, (struct sockaddr *)&sa, sizeof sa), 0);
	snprintf(req, sizeof req,
		 "GET /v1/sandboxes/%s/terminal%s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%s%s%s"
		 "%s%s\r\n",
		 id, query, d.port, key ? "Authorization: Bearer " : "", key ? key : "",
		 key ? "\r\n" : "",
		 upgrade ? "Upgrade: websocket\r\nConnection: Upgrade\r\n"
			   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
			   "Sec-WebSocket-Version: 13\r\n"
			 : "",
		 extra ? extra : "");
	assert_int_equal(send(t->fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
	while (!(end = memmem(head, hl, "\r\n\r\n", 4))) {
		ssize_t n = recv(t->fd, head + hl, sizeof head - 1 - hl, 0);

		assert_true(n > 0);
		hl += (size_t)n;
	}
	head[hl] = '\0';
	*status = atoi(head + 9);
	if (head_out)
		snprintf(head_out, 8192, "%.*s", (int)(end + 2 - head), head);
	if (*status == 101) {
		assert_non_null(strstr(head, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")); /* RFC 6455's */
		t->in_len = hl - (size_t)(end + 4 - head);
		memcpy(t->in, end + 4, t->in_len);
		return t;
	}
	if (body) {
		char *cl = strcasestr(head, "Content-Length:");
		size_t want = cl ? (size_t)atol(cl + 15) : 0, have = hl - (size_t)(end + 4 - head);

		while (have < want && hl < sizeof head - 1) {
			ssize_t n = recv(t->fd, head + hl, sizeof head - 1 - hl, 0);

			if (n <= 0)
				break;
			hl += (size_t)n;
			have += (size_t)n;
		}
		head[hl] = '\0';
		snprintf(body, body_len, "%s", end + 4);
	}
	close(t->fd);
	free(t);
	return NULL;
}

static struct tc *tc_open(const char *key, const char *id, const char *query, bool upgrade,
			  int *status, char *body, size_t body_len)
{
	return tc_open_ex(key, id, query, upgrade, NULL, status, body, body_len, NULL);
}

static void tc_frame(struct tc *t, uint8_t op, const void *p, size_t len)
{
	static const uint8_t key[4] = {0x12, 0x34, 0x56, 0x78};
	uint8_t buf[WS_HEADER_MAX + 4096];
	size_t h = ws_header_encode(buf, op, true, len, key);

	assert_true(len <= 4096);
	memcpy(buf + h, p, len);
	ws_mask(buf + h, len, key, 0);
	assert_int_equal(send(t->fd, buf, h + len, MSG_NOSIGNAL), (ssize_t)(h + len));
}

static void tc_type(struct tc *t, const char *s)
{
	tc_frame(t, WS_OP_BINARY, s, strlen(s));
}

static void tc_resize(struct tc *t, int rows, int cols)
{
	char msg[96];

	snprintf(msg, sizeof msg, "{\"type\":\"resize\",\"rows\":%d,\"cols\":%d}", rows, cols);
	tc_frame(t, WS_OP_TEXT, msg, strlen(msg));
}

static void screen_add(struct tc *t, const uint8_t *p, size_t n, bool keep)
{
	t->total += n;
	if (!keep)
		return;
	if (t->screen_len + n + 1 > t->screen_cap) {
		t->screen_cap = (t->screen_len + n + 1) * 2;
		t->screen = realloc(t->screen, t->screen_cap);
		assert_non_null(t->screen);
	}
	memcpy(t->screen + t->screen_len, p, n);
	t->screen_len += n;
	t->screen[t->screen_len] = '\0';
}

/* Handle the complete frames in t->in. */
static void tc_parse(struct tc *t, bool keep)
{
	size_t off = 0;

	while (!t->ended) {
		struct ws_frame f;
		int rc = ws_frame_parse(t->in + off, t->in_len - off, false, sizeof t->in, &f);

		assert_true(rc >= 0);
		if (rc == 0 || t->in_len - off < f.hdr_len + f.len)
			break;
		const uint8_t *p = t->in + off + f.hdr_len;

		if (f.opcode == WS_OP_BINARY) {
			screen_add(t, p, (size_t)f.len, keep);
		} else if (f.opcode == WS_OP_TEXT) {
			char msg[512];

			snprintf(msg, sizeof msg, "%.*s", (int)f.len, (const char *)p);
			fprintf(stderr, "terminal message: %s\n", msg);
			if (strstr(msg, "\"type\":\"exit\""))
				t->exit_code = atoi(strstr(msg, "\"exit_code\":") + 12);
			if (strstr(msg, "\"type\":\"terminal\"")) {
				const char *id = strstr(msg, "\"id\":\"");
				const char *g = strstr(msg, "\"reconnect_grace_ms\":");

				assert_non_null(id);
				assert_non_null(g);
				snprintf(t->term_id, sizeof t->term_id, "%.*s",
					 (int)strcspn(id + 6, "\""), id + 6);
				t->grace_ms = atoi(g + 21);
				t->reattached = strstr(msg, "\"reattached\":true") != NULL;
			}
		} else if (f.opcode == WS_OP_CLOSE) {
			t->ended = true;
			t->close_code = f.len >= 2 ? p[0] << 8 | p[1] : 0;
			snprintf(t->close_reason, sizeof t->close_reason, "%.*s",
				 f.len >= 2 ? (int)f.len - 2 : 0, (const char *)p + 2);
		}
		off += f.hdr_len + (size_t)f.len;
	}
	memmove(t->in, t->in + off, t->in_len - off);
	t->in_len -= off;
}

/* Read for at most ms; false at EOF. */
static bool tc_read(struct tc *t, int ms, bool keep)
{
	struct pollfd p = {.fd = t->fd, .events = POLLIN};
	ssize_t n;

	tc_parse(t, keep);
	if (t->ended)
		return false;
	if (poll(&p, 1, ms) <= 0)
		return true;
	n = recv(t->fd, t->in + t->in_len, sizeof t->in - t->in_len, 0);
	if (n <= 0) {
		t->ended = true;
		return false;
	}
	t->in_len += (size_t)n;
	tc_parse(t, keep);
	return true;
}

/* Read until `needle` is on the screen (since the last clear). */
static void tc_until(struct tc *t, const char *needle, int timeout_ms)
{
	int64_t end = mono_ms() + timeout_ms;

	while (!(t->screen && strstr(t->screen, needle))) {
		if (mono_ms() > end || !tc_read(t, 200, true)) {
			fprintf(stderr, "terminal: '%s' not seen; screen: %s\n", needle,
				t->screen ? t->screen : "");
			fail();
		}
	}
}

static void tc_clear(struct tc *t)
{
	t->screen_len = 0;
	if (t->screen)
		t->screen[0] = '\0';
}

/* The client closes (a close frame 1000, then the socket): the shell is
 * hung up. */
static void tc_free(struct tc *t)
{
	static const uint8_t key[4] = {1, 2, 3, 4};
	uint8_t f[WS_HEADER_MAX + 2];
	size_t h;

	if (!t)
		return;
	h = ws_header_encode(f, WS_OP_CLOSE, true, 2, key);
	f[h] = 0x03;
	f[h + 1] = 0xe8;
	ws_mask(f + h, 2, key, 0);
	if (send(t->fd, f, h + 2, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
		/* gone already */
	}
	close(t->fd);
	free(t->screen);
	free(t);
}

/* Open one (a terminal closed just before counts until its shell ended:
 * a 429 is retried for a while). */
static struct tc *open_ok(const char *query)
{
	int status;
	char body[512] = "";
	int64_t end = mono_ms() + 20000;
	struct tc *t;

	while (!(t = tc_open(d.key, sbx, query, true, &status, body, sizeof body)) &&
	       status == 429 && mono_ms() < end)
		usleep(200 * 1000);

	if (status != 101)
		fprintf(stderr, "terminal: %d %s\n", status, body);
	assert_int_equal(status, 101);
	return t;
}

/* ---------------------------------------------------------------- cases */

/* stty size says what the URL asked for, then the resize. */
static void stty_size_and_resize(void **state)
{
	struct tc *t = open_ok("?rows=33&cols=101");

	(void)state;
	tc_type(t, "stty size; echo MARK$((40+2))\r");
	tc_until(t, "MARK42", 120000);
	assert_non_null(strstr(t->screen, "33 101"));
	tc_clear(t);
	tc_resize(t, 50, 132);
	tc_type(t, "stty size; echo MARK$((40+3))\r");
	tc_until(t, "MARK43", 60000);
	assert_non_null(strstr(t->screen, "50 132"));
	tc_free(t);
}

/* The python3 REPL, and Ctrl-C interrupting a sleep: the prompt returns. */
static void repl_and_ctrl_c(void **state)
{
	struct tc *t = open_ok("");
	int64_t t0;

	(void)state;
	tc_type(t, "python3 -q\r");
	tc_until(t, ">>> ", 120000);
	tc_clear(t);
	tc_type(t, "print(6*7)\r");
	tc_until(t, "42", 60000);
	tc_until(t, ">>> ", 60000);
	tc_type(t, "exit()\r");
	tc_clear(t);
	tc_type(t, "echo READY$((1+1))\r");
	tc_until(t, "READY2", 60000);
	tc_clear(t);
	tc_type(t, "sleep 100; echo SL\"\"EPT\r");
	usleep(1500 * 1000);
	t0 = mono_ms();
	tc_type(t, "\x03");
	tc_type(t, "echo BACK$((2+2))\r");
	tc_until(t, "BACK4", 60000);
	fprintf(stderr, "Ctrl-C to the prompt: %lld ms\n", (long long)(mono_ms() - t0));
	assert_null(strstr(t->screen, "SLEPT"));
	tc_free(t);
}

/* exit 3: the exit message, then a close frame saying so. */
static void exit_code_closes(void **state)
{
	struct tc *t = open_ok("?rows=24&cols=80");
	int64_t end = mono_ms() + 60000;

	(void)state;
	tc_type(t, "exit 3\r");
	while (!t->ended && mono_ms() < end)
		tc_read(t, 200, true);
	assert_true(t->ended);
	assert_int_equal(t->exit_code, 3);
	assert_int_equal(t->close_code, 1000);
	assert_string_equal(t->close_reason, "exit 3");
	tc_free(t);
}

/* Another account: 404 as on every sandbox route; no upgrade: 400; bad
 * rows: 400; past max_terminals_per_sandbox (3): 429. */
static void refusals(void **state)
{
	struct tc *open[3];
	char body[512];
	int status;

	(void)state;
	assert_null(tc_open(other_key, sbx, "", true, &status, body, sizeof body));
	assert_int_equal(status, 404);
	assert_non_null(strstr(body, "not_found"));
	assert_null(tc_open(d.key, sbx, "", false, &status, body, sizeof body));
	assert_int_equal(status, 400);
	assert_null(tc_open(d.key, sbx, "?rows=0", true, &status, body, sizeof body));
	assert_int_equal(status, 400);
	assert_non_null(strstr(body, "\"rows\""));
	assert_null(tc_open(NULL, sbx, "", true, &status, body, sizeof body));
	assert_int_equal(status, 401);
	for (int i = 0; i < 3; i++)
		open[i] = open_ok("");
	assert_null(tc_open(d.key, sbx, "", true, &status, body, sizeof body));
	assert_int_equal(status, 429);
	for (int i = 0; i < 3; i++)
		tc_free(open[i]);
}

/* A browser's way in (api/http_wsauth.c): the key as a `bearer.<key>`
 * subprotocol entry beside sandboxd.v1, from the daemon's own Origin: 101
 * answering sandboxd.v1 only (the key in no header of the reply), and the
 * terminal works; a wrong key is 401 and another site's Origin 403, both
 * before any upgrade. */
static void browser_subprotocol(void **state)
{
	char extra[512], head[8192], body[512];
	int status;
	struct tc *t;

	(void)state;
	snprintf(
	    extra, sizeof extra,
	    "Origin: http://127.0.0.1:%d\r\nSec-WebSocket-Protocol: sandboxd.v1, bearer.%s\r\n",
	    d.port, d.key);
	int64_t until = mono_ms() + 20000; /* the terminals closed before count a while */
	while (!(t = tc_open_ex(NULL, sbx, "", true, extra, &status, body, sizeof body, head)) &&
	       status == 429 && mono_ms() < until)
		usleep(200 * 1000);
	if (status != 101)
		fprintf(stderr, "terminal: %d %s\n", status, body);
	assert_int_equal(status, 101);
	assert_non_null(strcasestr(head, "\r\nSec-WebSocket-Protocol: sandboxd.v1\r\n"));
	assert_null(strstr(head, d.key + 7));
	assert_null(strstr(head, "bearer."));
	tc_type(t, "echo MARK$((40+4))\r");
	tc_until(t, "MARK44", 60000);
	tc_free(t);

	snprintf(extra, sizeof extra,
		 "Origin: http://127.0.0.1:%d\r\nSec-WebSocket-Protocol: sandboxd.v1, "
		 "bearer.aas_sk_00000000000000000000000000000000000000000000\r\n",
		 d.port);
	assert_null(tc_open_ex(NULL, sbx, "", true, extra, &status, body, sizeof body, head));
	assert_int_equal(status, 401);
	assert_null(strstr(head, "aas_sk_0000"));
	assert_null(strstr(body, "aas_sk_0000"));

	snprintf(extra, sizeof extra,
		 "Origin: https://attacker.example\r\nSec-WebSocket-Protocol: sandboxd.v1, "
		 "bearer.%s\r\n",
		 d.key);
	assert_null(tc_open_ex(NULL, sbx, "", true, extra, &status, body, sizeof body, head));
	assert_int_equal(status, 403);
	assert_non_null(strstr(body, "permission_error"));
	assert_null(strstr(head, d.key + 7));
	assert_null(strstr(body, d.key + 7));
}

/* Count the guest's processes named `sleep N`. */
static int sleepers_of(int n_arg)
{
	struct http_reply r;
	char path[128], body[160];
	int n;

	snprintf(path, sizeof path, "/v1/sandboxes/%s/exec", sbx);
	snprintf(body, sizeof body, "{\"command\": \"ps -eo args | grep -c '^sleep %d' || true\"}",
		 n_arg);
	assert_int_equal(http_request(&d, "POST", path, d.key, NULL, body, 0, &r), 0);
	assert_int_equal(r.status, 200);
	n = atoi(jstr(r.json, "stdout"));
	http_reply_free(&r);
	return n;
}

static int sleepers(void)
{
	return sleepers_of(4242);
}

/* Closing the WebSocket hangs the shell up: its foreground job ends. */
static void close_hangs_up(void **state)
{
	struct tc *t = open_ok("");
	int64_t end;

	(void)state;
	tc_type(t, "sleep 4242\r");
	end = mono_ms() + 60000;
	while (sleepers() < 1 && mono_ms() < end)
		usleep(300 * 1000);
	assert_int_equal(sleepers(), 1);
	tc_frame(t, WS_OP_CLOSE, "\x03\xe8", 2);
	tc_free(t);
	end = mono_ms() + 30000;
	while (sleepers() > 0 && mono_ms() < end)
		usleep(300 * 1000);
	assert_int_equal(sleepers(), 0);
}

/* The connection drops without a close frame (the network went away). */
static void tc_drop(struct tc *t)
{
	close(t->fd);
	free(t->screen);
	free(t);
}

/* GET ...terminal?attach=id as key: the client (101), or NULL with
 * *status and the body. The 101's head carries X-Terminal-Id. */
static struct tc *tc_attach(const char *key, const char *id, int *status, char *body, size_t len)
{
	char q[128], head[8192];
	struct tc *t;

	snprintf(q, sizeof q, "?attach=%s", id);
	t = tc_open_ex(key, sbx, q, true, NULL, status, body, len, head);
	if (t) {
		char want[96];

		snprintf(want, sizeof want, "\r\nX-Terminal-Id: %s\r\n", id);
		assert_non_null(strcasestr(head, want));
	}
	return t;
}

/* A dropped connection leaves the shell running: the same shell comes
 * back by ?attach= (a variable set before the drop is still set), with
 * what it printed meanwhile first; another account's attach and an
 * unknown id are 404, a second client while one is attached 409. */
static void reattach_after_drop(void **state)
{
	struct tc *t = open_ok("?rows=30&cols=90"), *t2 = NULL;
	char id[64], body[512];
	int status = 0;
	int64_t end;

	(void)state;
	tc_type(t, "export GRACE_VAR=kept$((1+1)); echo SET$((5+5))\r");
	tc_until(t, "SET10", 120000);
	assert_int_equal(strncmp(t->term_id, "term_", 5), 0);
	assert_int_equal(t->grace_ms, 8000);
	assert_false(t->reattached);
	snprintf(id, sizeof id, "%s", t->term_id);
	/* printed while nobody is attached: kept for the next client */
	tc_type(t, "sleep 1; echo WHILE$((2+3))\r");
	tc_until(t, "WHILE$((2+3))", 60000); /* the line's echo: it was taken */
	tc_drop(t);

	assert_null(tc_attach(other_key, id, &status, body, sizeof body));
	assert_int_equal(status, 404);
	assert_non_null(strstr(body, "not_found"));
	assert_null(tc_attach(d.key, "term_000000000000000000000000", &status, body, sizeof body));
	assert_int_equal(status, 404);
	usleep(2500 * 1000);
	/* the server may not have seen the drop yet: 409 until it has */
	end = mono_ms() + 4000;
	while (!(t2 = tc_attach(d.key, id, &status, body, sizeof body)) && status == 409 &&
	       mono_ms() < end)
		usleep(100 * 1000);
	if (status != 101)
		fprintf(stderr, "attach: %d %s\n", status, body);
	assert_int_equal(status, 101);
	assert_null(tc_attach(d.key, id, &status, body, sizeof body));
	assert_int_equal(status, 409);
	assert_non_null(strstr(body, "terminal_attached"));

	tc_until(t2, "WHILE5", 30000);
	assert_string_equal(t2->term_id, id);
	assert_true(t2->reattached);
	tc_clear(t2);
	tc_type(t2, "echo back $GRACE_VAR\r");
	tc_until(t2, "back kept2", 60000);
	tc_free(t2);
}

/* Past the grace (8 s here) nobody can reattach and the shell is hung up:
 * its foreground job is gone; within it, the job still ran and the
 * detached terminal counted against the per-sandbox limit. */
static void grace_over_hangs_up(void **state)
{
	struct tc *t = open_ok(""), *more[2];
	char id[64], body[512];
	int64_t end, dropped;
	int status;

	(void)state;
	tc_type(t, "sleep 4343\r");
	end = mono_ms() + 60000;
	while (sleepers_of(4343) < 1 && mono_ms() < end)
		usleep(300 * 1000);
	assert_int_equal(sleepers_of(4343), 1);
	end = mono_ms() + 10000;
	while (!t->term_id[0] && mono_ms() < end && tc_read(t, 200, true))
		;
	assert_true(t->term_id[0] != '\0');
	snprintf(id, sizeof id, "%s", t->term_id);
	tc_drop(t);
	dropped = mono_ms();
	usleep(1000 * 1000);
	assert_int_equal(sleepers_of(4343), 1); /* detached, not hung up */
	/* it still counts: 2 more make max_terminals_per_sandbox (3) */
	more[0] = open_ok("");
	more[1] = open_ok("");
	assert_null(tc_open(d.key, sbx, "", true, &status, body, sizeof body));
	assert_int_equal(status, 429);
	tc_free(more[0]);
	tc_free(more[1]);
	assert_true(mono_ms() - dropped < 8000);
	while (mono_ms() - dropped < 8000 + 1500)
		usleep(100 * 1000);
	assert_null(tc_attach(d.key, id, &status, body, sizeof body));
	assert_int_equal(status, 404);
	end = mono_ms() + 30000;
	while (sleepers_of(4343) > 0 && mono_ms() < end)
		usleep(300 * 1000);
	assert_int_equal(sleepers_of(4343), 0);
}

/* The guest file /tmp/ctr's number (-1 when there is none); read again
 * when caught between the loop's truncation and its write. */
static long guest_counter(void)
{
	struct http_reply r;
	char path[128];
	long n = -1;

	snprintf(path, sizeof path, "/v1/sandboxes/%s/exec", sbx);
	for (int i = 0; i < 10; i++) {
		bool empty;

		assert_int_equal(
		    http_request(&d, "POST", path, d.key, NULL,
				 "{\"command\": \"cat /tmp/ctr 2>/dev/null || echo -1\"}", 0, &r),
		    0);
		assert_int_equal(r.status, 200);
		empty = jstr(r.json, "stdout")[0] == '\0';
		n = atol(jstr(r.json, "stdout"));
		http_reply_free(&r);
		if (!empty)
			break;
	}
	return n;
}

/* Detached, the shell is stopped by the guest's PAUSE once the kept tail
 * is full (a loop printing 500-byte lines stops counting), and goes on
 * once a client is back and reads. */
static void detached_output_stops_the_shell(void **state)
{
	struct tc *t = open_ok(""), *t2 = NULL;
	char id[64], body[512];
	long c1, c2, c3;
	int status = 0;
	int64_t end;
	uint64_t got0;

	(void)state;
	tc_type(t, "stty -echo; pad=$(printf '%0500d' 0); i=0; "
		   "while :; do i=$((i+1)); echo $i > /tmp/ctr; echo \"$i $pad\"; done\r");
	end = mono_ms() + 60000;
	while (t->total < 200000 && mono_ms() < end)
		tc_read(t, 200, false);
	assert_true(t->total >= 200000);
	snprintf(id, sizeof id, "%s", t->term_id);
	tc_drop(t);
	usleep(2000 * 1000);
	c1 = guest_counter();
	usleep(1000 * 1000);
	c2 = guest_counter();
	fprintf(stderr, "detached: counter %ld, then %ld\n", c1, c2);
	assert_true(c1 > 0);
	assert_int_equal(c1, c2); /* blocked on its terminal */
	end = mono_ms() + 4000;
	while (!(t2 = tc_attach(d.key, id, &status, body, sizeof body)) && status == 409 &&
	       mono_ms() < end)
		usleep(100 * 1000);
	assert_int_equal(status, 101);
	got0 = t2->total;
	end = mono_ms() + 60000;
	while (t2->total - got0 < 256 * 1024 && mono_ms() < end)
		tc_read(t2, 200, false);
	assert_true(t2->total - got0 >= 256 * 1024); /* more than the tail: it ran again */
	c3 = guest_counter();
	fprintf(stderr, "reattached: %llu bytes read, counter %ld\n",
		(unsigned long long)(t2->total - got0), c3);
	assert_true(c3 > c2);
	tc_type(t2, "\x03");
	tc_free(t2);
}

/* sbx shell with stdin not a terminal: its bytes typed, 24 x 80, and sbx
 * exits with the shell's code. */
static void sbx_shell_exit_code(void **state)
{
	const char *bin = sbx_bin(), *slash = strrchr(bin, '/');
	char cmd[1024], out[8192];
	FILE *p;
	size_t n;
	int st;

	(void)state;
	snprintf(
	    cmd, sizeof cmd,
	    "printf 'stty size; echo SH$((3+4))\\nexit 7\\n' | SANDBOXD_URL=http://127.0.0.1:%d "
	    "SANDBOXD_KEY=%s %.*ssbx shell %s",
	    d.port, d.key, slash ? (int)(slash - bin + 1) : 0, bin, sbx);
	p = popen(cmd, "r");
	assert_non_null(p);
	n = fread(out, 1, sizeof out - 1, p);
	out[n] = '\0';
	st = pclose(p);
	fprintf(stderr, "sbx shell: %s\n", out);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 7);
	assert_non_null(strstr(out, "24 80"));
	assert_non_null(strstr(out, "SH7"));
}

/* tmux's pane for session `s` of server `sock`: does it show `want`? */
static bool pane_shows(const char *sock, const char *want)
{
	char cmd[256], out[16384];

	snprintf(cmd, sizeof cmd, "tmux -L %s capture-pane -p -t s 2>/dev/null", sock);
	return cmd_out(cmd, out, sizeof out) == 0 && strstr(out, want);
}

static void pane_wait(const char *sock, const char *want)
{
	char cmd[256], out[16384] = "";

	for (int i = 0; i < 600 && !pane_shows(sock, want); i++)
		usleep(100 * 1000);
	if (pane_shows(sock, want))
		return;
	snprintf(cmd, sizeof cmd, "tmux -L %s capture-pane -p -t s 2>&1", sock);
	cmd_out(cmd, out, sizeof out);
	fail_msg("the pane never showed '%s'; it shows:\n%s", want, out);
}

/* `sbx shell` on a real terminal, tmux's: raw mode (keys go one by one,
 * the guest's shell echoes them), the window's size at the start and
 * after a resize (SIGWINCH), and the shell's exit code as sbx's. */
static void sbx_shell_in_tmux(void **state)
{
	const char *bin = sbx_bin(), *slash = strrchr(bin, '/');
	char sock[32], cmd[1024], exitf[64], out[64] = "";

	(void)state;
	assert_int_equal(run_cmd("command -v tmux >/dev/null"), 0); /* scripts/deps.sh */
	snprintf(sock, sizeof sock, "sbxt%d", (int)getpid());
	snprintf(exitf, sizeof exitf, "/tmp/%s.exit", sock);
	unlink(exitf);
	snprintf(cmd, sizeof cmd,
		 "tmux -L %s new-session -d -s s -x 100 -y 30 "
		 "\"SANDBOXD_URL=http://127.0.0.1:%d SANDBOXD_KEY=%s %.*ssbx shell %s; "
		 "echo \\$? > %s; sleep 30\"",
		 sock, d.port, d.key, slash ? (int)(slash - bin + 1) : 0, bin, sbx, exitf);
	assert_int_equal(run_cmd(cmd), 0);
	/* typed again until the shell answers: keys that come before sbx set
	 * its raw mode are flushed with the switch (TCSAFLUSH) */
	snprintf(cmd, sizeof cmd, "tmux -L %s send-keys -t s 'echo READY$((40+2))' Enter", sock);
	for (int i = 0; i < 30 && !pane_shows(sock, "READY42"); i++) {
		assert_int_equal(run_cmd(cmd), 0);
		for (int j = 0; j < 20 && !pane_shows(sock, "READY42"); j++)
			usleep(100 * 1000);
	}
	pane_wait(sock, "READY42");
	snprintf(cmd, sizeof cmd, "tmux -L %s send-keys -t s 'stty size' Enter", sock);
	assert_int_equal(run_cmd(cmd), 0);
	pane_wait(sock, "30 100");
	snprintf(cmd, sizeof cmd,
		 "tmux -L %s resize-window -t s -x 120 -y 40 && "
		 "tmux -L %s send-keys -t s 'clear; stty size' Enter",
		 sock, sock);
	assert_int_equal(run_cmd(cmd), 0);
	pane_wait(sock, "40 120");
	snprintf(cmd, sizeof cmd, "tmux -L %s send-keys -t s 'exit 3' Enter", sock);
	assert_int_equal(run_cmd(cmd), 0);
	for (int i = 0; i < 300 && access(exitf, F_OK) != 0; i++)
		usleep(100 * 1000);
	snprintf(cmd, sizeof cmd, "cat %s 2>/dev/null; tmux -L %s kill-server", exitf, sock);
	cmd_out(cmd, out, sizeof out);
	unlink(exitf);
	assert_string_equal(out, "3");
}

/* `sbx shell` through a relay whose connections are cut while the shell
 * runs: sbx says it reattaches, and the same shell answers (a variable
 * set before the cut); its exit code is still sbx's. */
static void sbx_shell_reattaches(void **state)
{
	const char *bin = sbx_bin(), *slash = strrchr(bin, '/');
	char sock[32], cmd[1024], exitf[64], out[64] = "";
	int rport;
	pid_t relay = relay_start(d.port, &rport);

	(void)state;
	snprintf(sock, sizeof sock, "sbxr%d", (int)getpid());
	snprintf(exitf, sizeof exitf, "/tmp/%s.exit", sock);
	unlink(exitf);
	snprintf(cmd, sizeof cmd,
		 "tmux -L %s new-session -d -s s -x 100 -y 30 "
		 "\"SANDBOXD_URL=http://127.0.0.1:%d SANDBOXD_KEY=%s %.*ssbx shell %s; "
		 "echo \\$? > %s; sleep 30\"",
		 sock, rport, d.key, slash ? (int)(slash - bin + 1) : 0, bin, sbx, exitf);
	assert_int_equal(run_cmd(cmd), 0);
	snprintf(cmd, sizeof cmd,
		 "tmux -L %s send-keys -t s 'export RV=kept$((3+4)); echo RV-$RV' Enter", sock);
	for (int i = 0; i < 30 && !pane_shows(sock, "RV-kept7"); i++) {
		assert_int_equal(run_cmd(cmd), 0);
		for (int j = 0; j < 20 && !pane_shows(sock, "RV-kept7"); j++)
			usleep(100 * 1000);
	}
	pane_wait(sock, "RV-kept7");
	kill(relay, SIGUSR1); /* the drop */
	pane_wait(sock, "reattaching");
	snprintf(cmd, sizeof cmd, "tmux -L %s send-keys -t s 'echo again-$RV' Enter", sock);
	assert_int_equal(run_cmd(cmd), 0);
	pane_wait(sock, "again-kept7");
	snprintf(cmd, sizeof cmd, "tmux -L %s send-keys -t s 'exit 5' Enter", sock);
	assert_int_equal(run_cmd(cmd), 0);
	for (int i = 0; i < 300 && access(exitf, F_OK) != 0; i++)
		usleep(100 * 1000);
	snprintf(cmd, sizeof cmd, "cat %s 2>/dev/null; tmux -L %s kill-server", exitf, sock);
	cmd_out(cmd, out, sizeof out);
	unlink(exitf);
	kill(relay, SIGKILL);
	waitpid(relay, NULL, 0);
	assert_string_equal(out, "5");
}

/* Nobody reads while the guest prints 100 MB: the daemon's VmRSS stays
 * within 64 MiB of where it was; then the output flows again once the
 * client reads (the next 4 MB; reading all of it would take minutes at
 * this host's TCG pty rate; bench/terminal prints the rate of a whole
 * stream). */
static void unread_terminal_keeps_memory_flat(void **state)
{
	struct tc *t = open_ok("");
	long rss0 = daemon_proc_kib(&d, "VmRSS"), peak = rss0, rss;
	int64_t t0, end;
	uint64_t got0;

	(void)state;
	tc_type(t, "stty -echo; yes | head -c 100000000; echo; echo END$((6*7))\r");
	t0 = mono_ms();
	while (mono_ms() - t0 < 15000) { /* not reading */
		rss = daemon_proc_kib(&d, "VmRSS");
		peak = rss > peak ? rss : peak;
		usleep(250 * 1000);
	}
	fprintf(stderr, "unread 15 s: VmRSS %ld -> peak %ld KiB\n", rss0, peak);
	assert_true(peak - rss0 < 64 * 1024);
	/* now read: what was held, then the guest's output again */
	got0 = t->total;
	t0 = mono_ms();
	end = t0 + 300000;
	tc_clear(t);
	while (mono_ms() < end && t->total - got0 < 4000000ull) {
		if (!tc_read(t, 500, true))
			break;
		if (t->screen_len > 1024 * 1024) {
			memmove(t->screen, t->screen + t->screen_len - 16, 16);
			t->screen_len = 16;
			t->screen[16] = '\0';
		}
		rss = daemon_proc_kib(&d, "VmRSS");
		peak = rss > peak ? rss : peak;
	}
	fprintf(stderr, "then read %llu bytes in %lld ms; VmRSS peak %ld KiB (start %ld)\n",
		(unsigned long long)(t->total - got0), (long long)(mono_ms() - t0), peak, rss0);
	assert_true(t->total - got0 >= 4000000ull);
	assert_true(peak - rss0 < 64 * 1024);
	tc_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(stty_size_and_resize),
	    cmocka_unit_test(repl_and_ctrl_c),
	    cmocka_unit_test(exit_code_closes),
	    cmocka_unit_test(refusals),
	    cmocka_unit_test(browser_subprotocol),
	    cmocka_unit_test(close_hangs_up),
	    cmocka_unit_test(reattach_after_drop),
	    cmocka_unit_test(grace_over_hangs_up),
	    cmocka_unit_test(detached_output_stops_the_shell),
	    cmocka_unit_test(sbx_shell_exit_code),
	    cmocka_unit_test(sbx_shell_in_tmux),
	    cmocka_unit_test(sbx_shell_reattaches),
	    cmocka_unit_test(unread_terminal_keeps_memory_flat),
	};

	if (getenv("SBX_TEST_FILTER"))
		cmocka_set_test_filter(getenv("SBX_TEST_FILTER"));
	return cmocka_run_group_tests(tests, setup, teardown);
}
