/* Ports (issue 28) in a real guest: /v1/sandboxes/{id}/ports/{port}/{path}
 * proxies HTTP/1.1 over the exec channel (TCP streams, protocol v6) to a
 * server on the sandbox's loopback. One full-image sandbox for every case:
 *
 * - python3 -m http.server (a background process) serves a 3 MB random
 *   file: the bytes that come back through the daemon's socket have the
 *   sha256 the guest computed, at no more than the sandbox's bandwidth
 *   (network.bandwidth_bytes_per_s, 1 MB/s here: at most 1.5x that);
 * - a small echo server (written with the files API) gets a POST with a
 *   body, a path with an escaped byte and a query: it sees them as sent,
 *   no Authorization and no Cookie; its Set-Cookie never reaches the
 *   client, its other headers do;
 * - a chunked answer arrives de-chunked, whole;
 * - a port nobody listens on: 502 port_unreachable; another account: 404;
 *   port 0, 65536, "abc": 400 param port; /v1/limits publishes the caps.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <openssl/evp.h>

#include "harness.h"

static struct daemon d;
static char other_key[128];
static char sbx[64];

/* The echo server: POST answers JSON of what it got; GET /chunked answers
 * in three chunks; every answer tries to set a cookie. */
static const char echo_py[] =
    "import http.server, json\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    protocol_version = 'HTTP/1.1'\n"
    "    def log_message(self, *a):\n"
    "        pass\n"
    "    def do_POST(self):\n"
    "        n = int(self.headers.get('Content-Length', '0'))\n"
    "        body = self.rfile.read(n).decode()\n"
    "        out = json.dumps({'method': self.command, 'path': self.path, 'body': body,\n"
    "                          'auth': self.headers.get('Authorization'),\n"
    "                          'cookie': self.headers.get('Cookie'),\n"
    "                          'xtest': self.headers.get('X-Test'),\n"
    "                          'prefix': self.headers.get('X-Forwarded-Prefix'),\n"
    "                          'xff': self.headers.get('X-Forwarded-For'),\n"
    "                          'te': self.headers.get('Transfer-Encoding'),\n"
    "                          'cl': self.headers.get('Content-Length')}).encode()\n"
    "        self.send_response(201)\n"
    "        self.send_header('Content-Type', 'application/json')\n"
    "        self.send_header('Content-Length', str(len(out)))\n"
    "        self.send_header('Set-Cookie', 'session=guest; Path=/')\n"
    "        self.send_header('X-Echo', 'yes')\n"
    "        self.end_headers()\n"
    "        self.wfile.write(out)\n"
    "    do_PATCH = do_OPTIONS = do_POST\n"
    "    def do_HEAD(self):\n"
    "        self.send_response(200)\n"
    "        self.send_header('Content-Length', '1234')\n"
    "        self.send_header('X-Echo', 'head')\n"
    "        self.end_headers()\n"
    "    def do_GET(self):\n"
    "        self.send_response(200)\n"
    "        self.send_header('Transfer-Encoding', 'chunked')\n"
    "        self.send_header('Set-Cookie', 'session=guest')\n"
    "        self.end_headers()\n"
    "        for part in (b'hello ', b'chunked ', b'z' * 70000):\n"
    "            self.wfile.write(b'%x\\r\\n' % len(part) + part + b'\\r\\n')\n"
    "            self.wfile.flush()\n"
    "        self.wfile.write(b'0\\r\\n\\r\\n')\n"
    "http.server.HTTPServer(('127.0.0.1', 8001), H).serve_forever()\n";

/* A server (port 8005) whose every answer is 100 interim (1xx) heads,
 * then a 200. */
static const char interim_py[] =
    "import socket\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('127.0.0.1', 8005)); s.listen(8)\n"
    "while True:\n"
    "    c, _ = s.accept(); c.recv(65536)\n"
    "    c.sendall(b'HTTP/1.1 100 Continue\\r\\n\\r\\n' * 100 +\n"
    "              b'HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nok')\n"
    "    c.close()\n";

/* A WebSocket echo server (RFC 6455, stdlib only): each message comes back
 * as "echo: " + it; a request without a key gets 426. */
static const char ws_py[] =
    "import socket, hashlib, base64, threading\n"
    "s = socket.socket()\n"
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('127.0.0.1', 8003))\n"
    "s.listen(8)\n"
    "def serve(c):\n"
    "    data = b''\n"
    "    while b'\\r\\n\\r\\n' not in data:\n"
    "        data += c.recv(4096)\n"
    "    head, buf = data.split(b'\\r\\n\\r\\n', 1)\n"
    "    keys = [l.split(b':', 1)[1].strip() for l in head.split(b'\\r\\n')\n"
    "            if l.lower().startswith(b'sec-websocket-key:')]\n"
    "    if not keys:\n"
    "        c.sendall(b'HTTP/1.1 426 Upgrade Required\\r\\nContent-Length: 0\\r\\n\\r\\n')\n"
    "        c.close()\n"
    "        return\n"
    "    acc = base64.b64encode(hashlib.sha1(keys[0] + "
    "b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest())\n"
    "    c.sendall(b'HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\n'\n"
    "              b'Connection: Upgrade\\r\\nSec-WebSocket-Accept: ' + acc + b'\\r\\n\\r\\n')\n"
    "    def need(n):\n"
    "        nonlocal buf\n"
    "        while len(buf) < n:\n"
    "            d = c.recv(65536)\n"
    "            if not d:\n"
    "                raise EOFError\n"
    "            buf += d\n"
    "        r, buf = buf[:n], buf[n:]\n"
    "        return r\n"
    "    while True:\n"
    "        b0, b1 = need(2)\n"
    "        op, n = b0 & 15, b1 & 127\n"
    "        if n == 126:\n"
    "            n = int.from_bytes(need(2), 'big')\n"
    "        mask = need(4)\n"
    "        p = bytes(x ^ mask[i % 4] for i, x in enumerate(need(n)))\n"
    "        if op == 8:\n"
    "            c.sendall(b'\\x88\\x00')\n"
    "            break\n"
    "        out = b'echo: ' + p\n"
    "        ln = bytes([len(out)]) if len(out) < 126 else bytes([126]) + len(out).to_bytes(2, "
    "'big')\n"
    "        c.sendall(bytes([0x80 | op]) + ln + out)\n"
    "    c.close()\n"
    "while True:\n"
    "    c, _ = s.accept()\n"
    "    threading.Thread(target=serve, args=(c,), daemon=True).start()\n";

static void path_of(char *out, size_t n, int port, const char *tail)
{
	snprintf(out, n, "/v1/sandboxes/%s/ports/%d%s", sbx, port, tail);
}

/* Run a command in the sandbox; its stdout into out. */
static void run(const char *cmd, char *out, size_t n)
{
	struct http_reply r;

	assert_int_equal(sandbox_command(&d, sbx, "exec", cmd, 0, &r), 0);
	if (r.status != 200 || jint(r.json, "exit_code") != 0)
		fail_msg("exec %s: %d %s", cmd, r.status, r.body);
	if (out)
		snprintf(out, n, "%s", jstr(r.json, "stdout"));
	http_reply_free(&r);
}

static void start_process(const char *cmd)
{
	struct http_reply r;

	assert_int_equal(sandbox_command(&d, sbx, "processes", cmd, 0, &r), 0);
	if (r.status != 201)
		fail_msg("process %s: %d %s", cmd, r.status, r.body);
	http_reply_free(&r);
}

/* Ask through the proxy until the server answers (not 502): it may take a
 * few seconds to start under TCG. */
static void wait_listening(int port)
{
	char path[160];

	path_of(path, sizeof path, port, "/");
	for (int i = 0; i < 240; i++) {
		struct http_reply r;

		assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
		if (r.status != 502) {
			http_reply_free(&r);
			return;
		}
		assert_string_equal(jerr(r.json, "type"), "port_unreachable");
		http_reply_free(&r);
		usleep(250 * 1000);
	}
	fail_msg("nothing listened on port %d", port);
}

static int setup(void **state)
{
	char path[160];
	struct http_reply r;

	(void)state;
	if (daemon_up_full_second_account(&d, "test_ports",
					  "\"http_threads\": 2, \"destroy_on_exit\": true, "
					  "\"max_port_conns_per_sandbox\": 4, "
					  "\"port_response_timeout_ms\": 3000, "
					  "\"network\": {\"bandwidth_bytes_per_s\": 1000000}",
					  "other", "10", other_key, sizeof(other_key)) < 0)
		return -1;
	if (daemon_create_sandbox(&d, sbx, sizeof(sbx)) < 0)
		return -1;
	snprintf(path, sizeof path, "/v1/sandboxes/%s/files?path=/srv/echo.py", sbx);
	if (http_request(&d, "PUT", path, d.key, "Content-Type: application/octet-stream\r\n",
			 echo_py, sizeof echo_py - 1, &r) < 0 ||
	    r.status != 201) {
		fprintf(stderr, "upload echo.py: %d %s\n", r.status, r.body);
		return -1;
	}
	http_reply_free(&r);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return daemon_down(&d);
}

static void sha256_hex(const void *p, size_t n, char out[65])
{
	unsigned char md[32];
	unsigned len = 0;

	assert_int_equal(EVP_Digest(p, n, md, &len, EVP_sha256(), NULL), 1);
	for (unsigned i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static int64_t mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void get_file_bytes(void **state)
{
	char want[128] = "", got[65], path[160], v[64];
	struct http_reply r;
	int64_t t0;
	double rate;

	(void)state;
	run("mkdir -p /srv/www && head -c 3000000 /dev/urandom > /srv/www/big.bin && "
	    "sha256sum /srv/www/big.bin | cut -c1-64",
	    want, sizeof want);
	want[64] = '\0';
	start_process("cd /srv/www && exec python3 -m http.server 8000 --bind 127.0.0.1");
	wait_listening(8000);

	path_of(path, sizeof path, 8000, "/big.bin");
	t0 = mono_us();
	assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
	rate = 3.0 / ((mono_us() - t0) / 1e6);
	printf("# 3 MB through the proxy in %.0f ms (%.2f MB/s; the sandbox's cap: 1 MB/s)\n",
	       (mono_us() - t0) / 1000.0, rate);
	/* the bucket's burst (a quarter second's worth and 64 KiB) is all that
	 * may pass above the rate; without the cap this route moves ~28 MB/s */
	assert_true(rate < 1.5);
	assert_int_equal(r.status, 200);
	assert_int_equal(r.body_len, 3000000);
	sha256_hex(r.body, r.body_len, got);
	assert_string_equal(got, want);
	header_value(r.headers, "Content-Length", v, sizeof v);
	assert_string_equal(v, "3000000");
	http_reply_free(&r);
	/* metered like egress, by the daemon: the 3 MB and the answer's head
	 * out of the guest, the request into it (added when the connection is
	 * released, just after its last byte went out) */
	int64_t out = 0, in = 0;
	for (int i = 0; i < 50 && out < 3000000; i++) {
		snprintf(path, sizeof path, "/v1/sandboxes/%s", sbx);
		assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
		out = jint(r.json, "net_bytes_out");
		in = jint(r.json, "net_bytes_in");
		http_reply_free(&r);
		if (out < 3000000)
			usleep(100 * 1000);
	}
	printf("# metered: %lld bytes out of the guest, %lld in\n", (long long)out, (long long)in);
	assert_true(out > 3000000 && out < 3100000);
	assert_true(in > 50 && in < 4096);
	/* the same bytes through the files API, for comparison (a figure) */
	snprintf(path, sizeof path, "/v1/sandboxes/%s/files?path=/srv/www/big.bin", sbx);
	t0 = mono_us();
	assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
	printf("# the same 3 MB through GET /files in %.0f ms (%.1f MB/s)\n",
	       (mono_us() - t0) / 1000.0, 3.0 / ((mono_us() - t0) / 1e6));
	assert_int_equal(r.status, 200);
	assert_int_equal(r.body_len, 3000000);
	http_reply_free(&r);
	path_of(path, sizeof path, 8000, "/big.bin");
	assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
	header_value(r.headers, "Content-Security-Policy", v, sizeof v);
	assert_true(strncmp(v, "sandbox", 7) == 0);
	http_reply_free(&r);

	/* the port's root with and without the slash: the directory listing */
	path_of(path, sizeof path, 8000, "");
	assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "big.bin"));
	http_reply_free(&r);
	/* a file that is not there: the server's own 404, passed on */
	path_of(path, sizeof path, 8000, "/nope.txt");
	assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 404);
	assert_null(jerr(r.json, "type")); /* not the API's error shape */
	http_reply_free(&r);
}

/* `sbx port`: the same server through the CLI, bytes on stdout; a server's
 * 404 is exit 1 with its status said; a port nobody listens on is the
 * daemon's 502 (exit 1, the API's message); --url-only prints the route. */
static void sbx_port_fetches(void **state)
{
	char cmd[512], out[256], want[128] = "";
	int n;
#define SBX_PORT_CLI "bin/sbx --url http://127.0.0.1:%d --key %s port %s"

	(void)state;
	run("sha256sum /srv/www/big.bin | cut -c1-64", want, sizeof want);
	want[64] = '\0';
	n = snprintf(cmd, sizeof cmd, SBX_PORT_CLI, d.port, d.key, sbx);
	snprintf(cmd + n, sizeof cmd - (size_t)n, " 8000 /big.bin | sha256sum | cut -c1-64");
	assert_int_equal(cmd_out(cmd, out, sizeof out), 0);
	assert_string_equal(out, want);
	n = snprintf(cmd, sizeof cmd, SBX_PORT_CLI, d.port, d.key, sbx);
	snprintf(cmd + n, sizeof cmd - (size_t)n, " 8000 /nope.txt 2>&1 >/dev/null");
	assert_int_equal(cmd_out(cmd, out, sizeof out), 1);
	assert_non_null(strstr(out, "answered 404"));
	n = snprintf(cmd, sizeof cmd, SBX_PORT_CLI, d.port, d.key, sbx);
	snprintf(cmd + n, sizeof cmd - (size_t)n, " 8999 2>&1");
	assert_int_equal(cmd_out(cmd, out, sizeof out), 1);
	assert_non_null(strstr(out, "accepts connections"));
	n = snprintf(cmd, sizeof cmd, SBX_PORT_CLI, d.port, d.key, sbx);
	snprintf(cmd + n, sizeof cmd - (size_t)n, " 8000 'a/b?c=1' --url-only");
	assert_int_equal(cmd_out(cmd, out, sizeof out), 0);
	snprintf(want, sizeof want, "http://127.0.0.1:%d/v1/sandboxes/%s/ports/8000/a/b?c=1",
		 d.port, sbx);
	assert_string_equal(out, want);
}

static void post_with_body(void **state)
{
	char path[200], v[64];
	struct http_reply r;

	(void)state;
	start_process("exec python3 /srv/echo.py");
	wait_listening(8001);
	path_of(path, sizeof path, 8001, "/echo/a%20b?q=1&r=x%2Fy");
	assert_int_equal(http_request(&d, "POST", path, d.key,
				      "X-Test: yes\r\nCookie: api=secret\r\n"
				      "Content-Type: text/plain\r\n",
				      "hello through the channel", 0, &r),
			 0);
	assert_int_equal(r.status, 201);
	assert_non_null(r.json);
	assert_string_equal(jstr(r.json, "method"), "POST");
	assert_string_equal(jstr(r.json, "path"), "/echo/a%20b?q=1&r=x%2Fy");
	assert_string_equal(jstr(r.json, "body"), "hello through the channel");
	assert_true(jis_null(r.json, "auth"));	 /* the API key stays out */
	assert_true(jis_null(r.json, "cookie")); /* and so do the client's cookies */
	assert_string_equal(jstr(r.json, "xtest"), "yes");
	assert_non_null(strstr(jstr(r.json, "prefix"), sbx));
	assert_string_equal(jstr(r.json, "xff"), "127.0.0.1");
	header_value(r.headers, "X-Echo", v, sizeof v);
	assert_string_equal(v, "yes");
	header_value(r.headers, "Set-Cookie", v, sizeof v);
	assert_string_equal(v, ""); /* a guest never sets cookies on the API's origin */
	http_reply_free(&r);
	/* PATCH and OPTIONS reach the server as they are; HEAD gets the head */
	assert_int_equal(http_request(&d, "PATCH", path, d.key, "Content-Type: text/plain\r\n",
				      "patched", 0, &r),
			 0);
	assert_int_equal(r.status, 201);
	assert_string_equal(jstr(r.json, "method"), "PATCH");
	assert_string_equal(jstr(r.json, "body"), "patched");
	http_reply_free(&r);
	assert_int_equal(http_request(&d, "OPTIONS", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 201);
	assert_string_equal(jstr(r.json, "method"), "OPTIONS");
	http_reply_free(&r);
	assert_int_equal(http_request(&d, "HEAD", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_int_equal(r.body_len, 0);
	header_value(r.headers, "X-Echo", v, sizeof v);
	assert_string_equal(v, "head");
	http_reply_free(&r);
	/* a method no server gets: 405, the route's methods in Allow */
	assert_int_equal(http_request(&d, "TRACE", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 405);
	header_value(r.headers, "Allow", v, sizeof v);
	assert_string_equal(v, "GET, PUT, POST, DELETE, HEAD, PATCH, OPTIONS");
	http_reply_free(&r);
	/* and no other route answers them */
	assert_int_equal(http_request(&d, "PATCH", "/v1/sandboxes", d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 405);
	http_reply_free(&r);
}

/* A guest that streams interim answers is cut at a few (502: it would
 * hold a shared thread); a request with both Transfer-Encoding and
 * Content-Length reaches the guest framed as chunked only, as the daemon
 * read it (a disagreeing length would smuggle a second request). */
static void hostile_framing(void **state)
{
	char path[200];
	struct http_reply r;

	(void)state;
	snprintf(path, sizeof path, "/v1/sandboxes/%s/files?path=/srv/interim.py", sbx);
	assert_int_equal(http_request(&d, "PUT", path, d.key,
				      "Content-Type: application/octet-stream\r\n", interim_py,
				      sizeof interim_py - 1, &r),
			 0);
	assert_int_equal(r.status, 201);
	http_reply_free(&r);
	start_process("exec python3 /srv/interim.py");
	path_of(path, sizeof path, 8005, "/");
	for (int i = 0; i < 240; i++) {
		assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
		if (r.status != 502 || strstr(r.body, "interim"))
			break;
		http_reply_free(&r);
		usleep(250 * 1000);
	}
	assert_int_equal(r.status, 502);
	assert_string_equal(jerr(r.json, "type"), "port_unreachable");
	assert_non_null(strstr(r.body, "interim"));
	http_reply_free(&r);

	path_of(path, sizeof path, 8001, "/te");
	assert_int_equal(http_request(&d, "POST", path, d.key, "Transfer-Encoding: chunked\r\n",
				      "5\r\nhello\r\n0\r\n\r\n", 0, &r),
			 0);
	printf("# Transfer-Encoding with Content-Length: %d\n", r.status);
	if (r.status == 201) {
		assert_string_equal(jstr(r.json, "te"), "chunked");
		assert_true(jis_null(r.json, "cl"));
	} else {
		assert_int_equal(r.status, 400); /* refused whole: as good */
	}
	http_reply_free(&r);
}

/* Undo the daemon's own chunked framing of a body (in place). */
static void dechunk_body(struct http_reply *r)
{
	char *in = r->body, *end = r->body + r->body_len, *out = r->body;

	for (;;) {
		char *eol = strstr(in, "\r\n");
		size_t n;

		assert_non_null(eol);
		n = strtoul(in, NULL, 16);
		in = eol + 2;
		if (n == 0)
			break;
		assert_true(in + n + 2 <= end);
		memmove(out, in, n);
		out += n;
		in += n + 2;
	}
	r->body_len = (size_t)(out - r->body);
}

static void chunked_reply(void **state)
{
	char path[160], v[64];
	struct http_reply r;

	(void)state;
	path_of(path, sizeof path, 8001, "/chunked");
	assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	/* the guest's chunks were undone; the daemon frames the body itself */
	header_value(r.headers, "Transfer-Encoding", v, sizeof v);
	assert_string_equal(v, "chunked");
	dechunk_body(&r);
	assert_int_equal(r.body_len, 6 + 8 + 70000);
	assert_memory_equal(r.body, "hello chunked zzz", 17);
	for (size_t i = 14; i < r.body_len; i++)
		if (r.body[i] != 'z')
			fail_msg("byte %zu is %d", i, r.body[i]);
	header_value(r.headers, "Set-Cookie", v, sizeof v);
	assert_string_equal(v, "");
	http_reply_free(&r);
}

static void refusals(void **state)
{
	static const char *const bad[] = {"0", "65536", "abc", "08000"};
	char path[200];
	struct http_reply r;

	(void)state;
	/* nobody listens */
	path_of(path, sizeof path, 8009, "/");
	assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 502);
	assert_string_equal(jerr(r.json, "type"), "port_unreachable");
	http_reply_free(&r);
	/* another account's sandbox, a sandbox that does not exist */
	path_of(path, sizeof path, 8000, "/big.bin");
	assert_int_equal(http_request(&d, "GET", path, other_key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 404);
	assert_string_equal(jerr(r.json, "type"), "not_found");
	http_reply_free(&r);
	assert_int_equal(http_request(&d, "GET", "/v1/sandboxes/sbx_nosuchsandbox/ports/8000/",
				      d.key, NULL, NULL, 0, &r),
			 0);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);
	/* no key */
	assert_int_equal(http_request(&d, "GET", path, NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 401);
	http_reply_free(&r);
	/* not a port */
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		snprintf(path, sizeof path, "/v1/sandboxes/%s/ports/%s/", sbx, bad[i]);
		assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
		assert_int_equal(r.status, 400);
		assert_string_equal(jerr(r.json, "param"), "port");
		http_reply_free(&r);
	}
	/* the limits are published */
	assert_int_equal(http_request(&d, "GET", "/v1/limits", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_int_equal(jint(r.json, "port_conns_per_sandbox"), 4);
	assert_int_equal(jint(r.json, "port_conns_per_account"), 64);
	assert_int_equal(jint(r.json, "port_header_max_bytes"), 65536);
	http_reply_free(&r);
}

/* Send a GET over a fresh socket and return it, the answer not read. */
static int send_only(const char *path)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d.port)};
	char req[512];
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	snprintf(req, sizeof req,
		 "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
		 "Connection: close\r\n\r\n",
		 path, d.key);
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	return fd;
}

/* The status of the answer on fd (read to its end), then closed. */
static int read_status(int fd)
{
	char buf[4096];
	size_t got = 0;
	ssize_t n;

	while (got < sizeof buf - 1 && (n = read(fd, buf + got, sizeof buf - 1 - got)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
	close(fd);
	return got > 12 ? atoi(buf + 9) : -1;
}

/* A server that accepts and never answers: 504 port_timeout after
 * port_response_timeout_ms (3 s here); while 4 such requests wait, the
 * sandbox is at max_port_conns_per_sandbox and a 5th is 429. */
static void silent_server_and_the_limit(void **state)
{
	char path[160];
	struct http_reply r;
	int fds[4];

	(void)state;
	start_process("exec python3 -c \"import socket, time; s = socket.socket(); "
		      "s.bind(('127.0.0.1', 8002)); s.listen(64); time.sleep(100000)\"");
	path_of(path, sizeof path, 8002, "/");
	for (int i = 0; i < 240; i++) { /* until it listens: 504, not 502 */
		assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
		if (r.status != 502)
			break;
		http_reply_free(&r);
		usleep(250 * 1000);
	}
	assert_int_equal(r.status, 504);
	assert_string_equal(jerr(r.json, "type"), "port_timeout");
	http_reply_free(&r);

	for (int i = 0; i < 4; i++)
		fds[i] = send_only(path);
	sleep(1); /* they are taken in well within the 3 s they wait */
	assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 429);
	assert_string_equal(jerr(r.json, "type"), "concurrency_limit");
	http_reply_free(&r);
	for (int i = 0; i < 4; i++)
		assert_int_equal(read_status(fds[i]), 504);
	/* the places are given back */
	path_of(path, sizeof path, 8000, "/");
	assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
}

static void read_n(int fd, uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t k = read(fd, p, n);

		assert_true(k > 0);
		p += k;
		n -= (size_t)k;
	}
}

/* One masked client frame. */
static void ws_send(int fd, uint8_t op, const uint8_t *data, size_t n)
{
	static const uint8_t mask[4] = {1, 2, 3, 4};
	uint8_t *f = malloc(n + 8);
	size_t h = 0;

	assert_non_null(f);
	f[h++] = 0x80 | op;
	if (n < 126) {
		f[h++] = 0x80 | (uint8_t)n;
	} else {
		f[h++] = 0x80 | 126;
		f[h++] = (uint8_t)(n >> 8);
		f[h++] = (uint8_t)n;
	}
	memcpy(f + h, mask, 4);
	h += 4;
	for (size_t i = 0; i < n; i++)
		f[h + i] = data[i] ^ mask[i % 4];
	assert_int_equal(write(fd, f, h + n), (ssize_t)(h + n));
	free(f);
}

/* One server frame: its opcode; the payload into buf (its length in *n). */
static uint8_t ws_recv(int fd, uint8_t *buf, size_t cap, size_t *n)
{
	uint8_t h[2], ext[2];

	read_n(fd, h, 2);
	assert_int_equal(h[1] & 0x80, 0); /* a server never masks */
	*n = h[1] & 127;
	if (*n == 126) {
		read_n(fd, ext, 2);
		*n = (size_t)ext[0] << 8 | ext[1];
	}
	assert_true(*n <= cap);
	read_n(fd, buf, *n);
	return h[0] & 15;
}

/* A WebSocket through the route: the upgrade reaches the guest's server,
 * its 101 (with its Sec-WebSocket-Accept) the client, and messages go both
 * ways as they are, a 50 KB one included; a close is answered. */
static void websocket_echo(void **state)
{
	static uint8_t big[50000], got[60000];
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d.port)};
	char path[200], req[1024], head[4096];
	struct http_reply r;
	size_t hl = 0, n;
	char *end;
	int fd;

	(void)state;
	snprintf(path, sizeof path, "/v1/sandboxes/%s/files?path=/srv/ws.py", sbx);
	assert_int_equal(http_request(&d, "PUT", path, d.key,
				      "Content-Type: application/octet-stream\r\n", ws_py,
				      sizeof ws_py - 1, &r),
			 0);
	assert_int_equal(r.status, 201);
	http_reply_free(&r);
	start_process("exec python3 /srv/ws.py");
	wait_listening(8003); /* its 426 to a plain GET */

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	snprintf(req, sizeof req,
		 "GET /v1/sandboxes/%s/ports/8003/chat HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		 "Authorization: Bearer %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
		 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
		 sbx, d.key);
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	while (!(end = memmem(head, hl, "\r\n\r\n", 4))) {
		ssize_t k = read(fd, head + hl, sizeof head - 1 - hl);

		assert_true(k > 0);
		hl += (size_t)k;
	}
	*end = '\0';
	assert_int_equal(atoi(head + 9), 101);
	assert_non_null(strstr(head, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")); /* RFC 6455's */
	assert_int_equal(hl, (size_t)(end + 4 - head)); /* nothing before our first frame */

	ws_send(fd, 1, (const uint8_t *)"hello ws", 8);
	assert_int_equal(ws_recv(fd, got, sizeof got, &n), 1);
	assert_int_equal(n, 14);
	assert_memory_equal(got, "echo: hello ws", 14);
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (uint8_t)('a' + i % 26);
	ws_send(fd, 2, big, sizeof big);
	assert_int_equal(ws_recv(fd, got, sizeof got, &n), 2);
	assert_int_equal(n, 6 + sizeof big);
	assert_memory_equal(got + 6, big, sizeof big);
	ws_send(fd, 8, NULL, 0);
	assert_int_equal(ws_recv(fd, got, sizeof got, &n), 8);
	close(fd);
}

/* After all that, the sandbox's exec channel still works. */
static void channel_still_works(void **state)
{
	char out[64] = "";

	(void)state;
	run("echo alive", out, sizeof out);
	assert_string_equal(out, "alive\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(get_file_bytes),
	    cmocka_unit_test(sbx_port_fetches),
	    cmocka_unit_test(post_with_body),
	    cmocka_unit_test(hostile_framing),
	    cmocka_unit_test(chunked_reply),
	    cmocka_unit_test(refusals),
	    cmocka_unit_test(silent_server_and_the_limit),
	    cmocka_unit_test(websocket_echo),
	    cmocka_unit_test(channel_still_works),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
