/* Preview URLs (issue 28, docs/api.md "Previews") in a real guest: one
 * full-image sandbox runs a small site on port 8010 (a page whose script
 * sets document.title and whose absolute link /second loads; every answer
 * sets a host-only cookie and tries a Domain one; the Cookie it got and
 * the path it saw come back in headers) and a raw upgrade echo on 8012.
 *
 * - a preview's host name (Host: 8010-TOKEN.preview.localhost:PORT, no
 *   API key) reaches the page with its path as sent, its host-only
 *   Set-Cookie (never the Domain one), the client's Cookie, no CSP
 *   sandbox; a WebSocket-style upgrade is relayed both ways;
 * - the list shows no token and no url; a token on another port's host
 *   name, an unknown token, the bare domain: 404 not_found, never
 *   proxied; a revoked one 404; an expired one (1 s) 404; the bytes are
 *   metered on the sandbox;
 * - another account cannot create, list or revoke (404); the body's
 *   errors name expires_in_seconds; the per-sandbox cap is 429;
 * - `sbx port ID PORT --preview` prints a URL that works;
 * - chromium (tests/browser/preview.mjs, playwright-core) opens the URL:
 *   the script ran (the title) and the absolute link loaded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"

static struct daemon d;
static char other_key[128];
static char sbx[64];
static char host[160]; /* the first preview's host name, with the port */
static char url[256];  /* ... and its URL */

static const char site_py[] =
    "import http.server\n"
    "PAGE = b'''<!doctype html><html><head><title>loading</title></head><body>\n"
    "<script>document.title = 'script ran on ' + location.hostname.split('-')[0];</script>\n"
    "<a id=\"next\" href=\"/second\">second</a></body></html>'''\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    protocol_version = 'HTTP/1.1'\n"
    "    def log_message(self, *a):\n"
    "        pass\n"
    "    def do_HEAD(self):\n"
    "        self.send_response(200)\n"
    "        self.send_header('Content-Length', '12')\n"
    "        self.end_headers()\n"
    "    def do_GET(self):\n"
    "        body = PAGE if self.path == '/' else (\n"
    "            b'<!doctype html><title>second page</title><p id=\"p\">second</p>'\n"
    "            if self.path.startswith('/second') else b'other')\n"
    "        self.send_response(200)\n"
    "        self.send_header('Content-Type', 'text/html')\n"
    "        self.send_header('Content-Length', str(len(body)))\n"
    "        self.send_header('Set-Cookie', 'guest=1; Path=/')\n"
    "        self.send_header('Set-Cookie', 'shared=1; Domain=preview.localhost; Path=/')\n"
    "        self.send_header('X-Path', self.path)\n"
    "        self.send_header('X-Got-Cookie', self.headers.get('Cookie') or '-')\n"
    "        self.send_header('X-Got-Prefix', self.headers.get('X-Forwarded-Prefix') or '-')\n"
    "        self.end_headers()\n"
    "        self.wfile.write(body)\n"
    "http.server.ThreadingHTTPServer(('127.0.0.1', 8010), H).serve_forever()\n";

/* Answers a request that asks for an upgrade 101 and then echoes raw
 * bytes; any other 200 "plain". */
static const char upgrade_py[] =
    "import socket, threading\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('127.0.0.1', 8012)); s.listen(8)\n"
    "def serve(c):\n"
    "    data = b''\n"
    "    while b'\\r\\n\\r\\n' not in data:\n"
    "        data += c.recv(4096)\n"
    "    if b'upgrade: websocket' not in data.lower():\n"
    "        c.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Length: 5\\r\\n\\r\\nplain')\n"
    "        c.close()\n"
    "        return\n"
    "    c.sendall(b'HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\n'\n"
    "              b'Connection: Upgrade\\r\\n\\r\\n' + data.split(b'\\r\\n\\r\\n', 1)[1])\n"
    "    while True:\n"
    "        b = c.recv(4096)\n"
    "        if not b:\n"
    "            break\n"
    "        c.sendall(b)\n"
    "    c.close()\n"
    "while True:\n"
    "    c, _ = s.accept()\n"
    "    threading.Thread(target=serve, args=(c,), daemon=True).start()\n";

static void upload(const char *name, const char *text)
{
	char path[160];
	struct http_reply r;

	snprintf(path, sizeof path, "/v1/sandboxes/%s/files?path=/srv/%s", sbx, name);
	assert_int_equal(http_request(&d, "PUT", path, d.key,
				      "Content-Type: application/octet-stream\r\n", text,
				      strlen(text), &r),
			 0);
	assert_int_equal(r.status, 201);
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

/* POST .../ports/{port}/previews with body (NULL: none) as key. */
static void preview_create(const char *key, int port, const char *body, struct http_reply *r)
{
	char path[160];

	snprintf(path, sizeof path, "/v1/sandboxes/%s/ports/%d/previews", sbx, port);
	assert_int_equal(http_request(&d, "POST", path, key,
				      body ? "Content-Type: application/json\r\n" : NULL, body, 0,
				      r),
			 0);
}

/* The host name of a preview URL ("http://HOST/" -> HOST). */
static void host_of(const char *u, char *out, size_t n)
{
	const char *h = strstr(u, "://");

	assert_non_null(h);
	snprintf(out, n, "%.*s", (int)strcspn(h + 3, "/"), h + 3);
}

static int setup(void **state)
{
	(void)state;
	if (daemon_up_full_second_account(&d, "test_previews",
					  "\"http_threads\": 2, \"destroy_on_exit\": true, "
					  "\"max_previews_per_sandbox\": 4",
					  "other", "10", other_key, sizeof(other_key)) < 0)
		return -1;
	return daemon_create_sandbox(&d, sbx, sizeof(sbx)) < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	(void)state;
	return daemon_down(&d);
}

/* Create one, then reach the guest's site through its host name. */
static void create_and_browse(void **state)
{
	char want[160], v[256], token[40];
	struct http_reply r;

	(void)state;
	upload("site.py", site_py);
	start_process("exec python3 /srv/site.py");
	preview_create(d.key, 8010, NULL, &r);
	assert_int_equal(r.status, 201);
	assert_string_equal(jstr(r.json, "object"), "preview");
	assert_int_equal(jint(r.json, "port"), 8010);
	assert_string_equal(jstr(r.json, "sandbox_id"), sbx);
	assert_true(strncmp(jstr(r.json, "id"), "pv_", 3) == 0);
	assert_non_null(jstr(r.json, "expires_at"));
	snprintf(url, sizeof url, "%s", jstr(r.json, "url"));
	http_reply_free(&r);
	/* http://8010-<32 hex>.preview.localhost:PORT/ */
	assert_int_equal(sscanf(url, "http://8010-%32[0-9a-f].", token), 1);
	assert_int_equal(strlen(token), 32);
	snprintf(want, sizeof want, "http://8010-%s.preview.localhost:%d/", token, d.port);
	assert_string_equal(url, want);
	host_of(url, host, sizeof host);

	/* no API key: the host name is the key; retried while python starts */
	for (int i = 0; i < 240; i++) {
		assert_int_equal(http_request_host(&d, host, "GET", "/", NULL, NULL, NULL, 0, &r),
				 0);
		if (r.status != 502)
			break;
		http_reply_free(&r);
		usleep(250 * 1000);
	}
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "document.title"));
	assert_non_null(strstr(r.headers, "Set-Cookie: guest=1; Path=/"));
	assert_null(strstr(r.headers, "shared=1")); /* a Domain cookie never passes */
	header_value(r.headers, "Content-Security-Policy", v, sizeof v);
	assert_string_equal(v, ""); /* its own origin: scripts run */
	header_value(r.headers, "X-Got-Prefix", v, sizeof v);
	assert_string_equal(v, "-"); /* the path is the guest's own */
	http_reply_free(&r);

	/* an absolute path and a query as sent; the guest's cookie comes back,
	 * the host name in any case and without the port */
	snprintf(v, sizeof v, "8010-%s.PREVIEW.localhost", token);
	assert_int_equal(http_request_host(&d, v, "GET", "/second?x=1", NULL, "Cookie: guest=1\r\n",
					   NULL, 0, &r),
			 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "second page"));
	header_value(r.headers, "X-Path", v, sizeof v);
	assert_string_equal(v, "/second?x=1");
	header_value(r.headers, "X-Got-Cookie", v, sizeof v);
	assert_string_equal(v, "guest=1");
	http_reply_free(&r);
	/* HEAD: the head only */
	assert_int_equal(http_request_host(&d, host, "HEAD", "/", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_int_equal(r.body_len, 0);
	http_reply_free(&r);
	/* a method no server gets: 405 */
	assert_int_equal(http_request_host(&d, host, "TRACE", "/", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 405);
	http_reply_free(&r);
	/* an API key sent to a preview's host stays out of the guest */
	assert_int_equal(http_request_host(&d, host, "GET", "/", d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	/* an API path on a preview's host is the guest's path, not the API */
	assert_int_equal(http_request_host(&d, host, "GET", "/v1/limits", NULL, NULL, NULL, 0, &r),
			 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "other");
	http_reply_free(&r);
}

/* The list shows neither the token nor the url; /v1/limits the caps. */
static void list_and_limits(void **state)
{
	char path[160], token[40];
	struct http_reply r;
	json_object *data;

	(void)state;
	assert_int_equal(sscanf(url, "http://8010-%32[0-9a-f].", token), 1);
	snprintf(path, sizeof path, "/v1/sandboxes/%s/ports/8010/previews", sbx);
	assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_true(json_object_object_get_ex(r.json, "data", &data));
	assert_int_equal(json_object_array_length(data), 1);
	assert_null(strstr(r.body, token));
	assert_null(strstr(r.body, "\"url\""));
	http_reply_free(&r);
	/* another port's list is empty */
	snprintf(path, sizeof path, "/v1/sandboxes/%s/ports/8011/previews", sbx);
	assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "\"data\":[]"));
	http_reply_free(&r);
	assert_int_equal(http_request(&d, "GET", "/v1/limits", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(jint(r.json, "previews_per_sandbox"), 4);
	assert_int_equal(jint(r.json, "preview_max_ttl_seconds"), 86400);
	assert_string_equal(jstr(r.json, "preview_domain"), "preview.localhost");
	http_reply_free(&r);
	/* the pages' bytes were metered on the sandbox, as the ports route's */
	snprintf(path, sizeof path, "/v1/sandboxes/%s", sbx);
	assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
	assert_true(jint(r.json, "net_bytes_out") > 300);
	assert_true(jint(r.json, "net_bytes_in") > 100);
	http_reply_free(&r);
}

/* A GET asking for an upgrade through a preview: 101, then bytes both
 * ways. */
static void upgrade_relayed(void **state)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d.port)};
	char req[512], head[2048], h8012[160], buf[64];
	struct http_reply r;
	size_t hl = 0;
	char *end;
	int fd;

	(void)state;
	upload("upgrade.py", upgrade_py);
	start_process("exec python3 /srv/upgrade.py");
	preview_create(d.key, 8012, "{\"expires_in_seconds\": 600}", &r);
	assert_int_equal(r.status, 201);
	host_of(jstr(r.json, "url"), h8012, sizeof h8012);
	http_reply_free(&r);
	for (int i = 0; i < 240; i++) { /* until it listens */
		assert_int_equal(http_request_host(&d, h8012, "GET", "/", NULL, NULL, NULL, 0, &r),
				 0);
		if (r.status != 502)
			break;
		http_reply_free(&r);
		usleep(250 * 1000);
	}
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "plain");
	http_reply_free(&r);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	snprintf(req, sizeof req,
		 "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
		 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
		 h8012);
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	while (!(end = memmem(head, hl, "\r\n\r\n", 4))) {
		ssize_t k = read(fd, head + hl, sizeof head - 1 - hl);

		assert_true(k > 0);
		hl += (size_t)k;
	}
	assert_int_equal(atoi(head + 9), 101);
	assert_int_equal(write(fd, "ping through a preview", 22), 22);
	hl = 0;
	while (hl < 22) {
		ssize_t k = read(fd, buf + hl, sizeof buf - hl);

		assert_true(k > 0);
		hl += (size_t)k;
	}
	assert_memory_equal(buf, "ping through a preview", 22);
	close(fd);
}

/* Host names that name no live preview of that port: 404 in the API's
 * shape, whatever the path. */
static void refused_hosts(void **state)
{
	char token[40], h[200];
	struct http_reply r;
	const char *bad[4];

	(void)state;
	assert_int_equal(sscanf(url, "http://8010-%32[0-9a-f].", token), 1);
	snprintf(h, sizeof h, "8012-%s.preview.localhost", token); /* port B's name */
	bad[0] = h;
	bad[1] = "8010-00000000000000000000000000000000.preview.localhost";
	bad[2] = "preview.localhost";
	bad[3] = "a.b.preview.localhost";
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(
		    http_request_host(&d, bad[i], "GET", "/", d.key, NULL, NULL, 0, &r), 0);
		if (r.status != 404)
			fail_msg("%s: %d %s", bad[i], r.status, r.body);
		assert_string_equal(jerr(r.json, "type"), "not_found");
		http_reply_free(&r);
	}
}

/* The body's errors, another account, the cap. */
static void create_refusals(void **state)
{
	char path[200];
	struct http_reply r;
	const char *bodies[] = {"{\"expires_in_seconds\": 0}", "{\"expires_in_seconds\": 86401}",
				"{\"expires_in_seconds\": \"1\"}"};

	(void)state;
	for (size_t i = 0; i < 3; i++) {
		preview_create(d.key, 8010, bodies[i], &r);
		assert_int_equal(r.status, 400);
		assert_string_equal(jerr(r.json, "param"), "expires_in_seconds");
		http_reply_free(&r);
	}
	preview_create(d.key, 8010, "{\"ttl\": 5}", &r);
	assert_int_equal(r.status, 400);
	http_reply_free(&r);
	snprintf(path, sizeof path, "/v1/sandboxes/%s/ports/0/previews", sbx);
	assert_int_equal(http_request(&d, "POST", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 400);
	assert_string_equal(jerr(r.json, "param"), "port");
	http_reply_free(&r);
	/* another account: 404 for create, list and revoke */
	preview_create(other_key, 8010, NULL, &r);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);
	snprintf(path, sizeof path, "/v1/sandboxes/%s/ports/8010/previews", sbx);
	assert_int_equal(http_request(&d, "GET", path, other_key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);
	assert_int_equal(http_request(&d, "GET", path, NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 401);
	http_reply_free(&r);
	/* 2 live so far (8010, 8012): 2 more, then the cap of 4 */
	for (int i = 0; i < 2; i++) {
		preview_create(d.key, 8011, NULL, &r);
		assert_int_equal(r.status, 201);
		http_reply_free(&r);
	}
	preview_create(d.key, 8011, NULL, &r);
	assert_int_equal(r.status, 429);
	assert_string_equal(jerr(r.json, "type"), "concurrency_limit");
	http_reply_free(&r);
	/* free two places: revoke the 8011 ones */
	assert_int_equal(http_request(&d, "GET", "/v1/sandboxes/x/ports/8011/previews", d.key, NULL,
				      NULL, 0, &r),
			 0);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);
	snprintf(path, sizeof path, "/v1/sandboxes/%s/ports/8011/previews", sbx);
	assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	{
		json_object *data, *it, *id;

		assert_true(json_object_object_get_ex(r.json, "data", &data));
		assert_int_equal(json_object_array_length(data), 2);
		for (size_t i = 0; i < 2; i++) {
			struct http_reply x;
			char del[200];

			it = json_object_array_get_idx(data, i);
			assert_true(json_object_object_get_ex(it, "id", &id));
			snprintf(del, sizeof del, "/v1/sandboxes/%s/previews/%s", sbx,
				 json_object_get_string(id));
			assert_int_equal(http_request(&d, "DELETE", del, d.key, NULL, NULL, 0, &x),
					 0);
			assert_int_equal(x.status, 200);
			assert_int_equal(jbool(x.json, "revoked"), 1);
			http_reply_free(&x);
		}
	}
	http_reply_free(&r);
}

/* Revoked: 404 on its host name at once; another account cannot. */
static void revoked(void **state)
{
	char path[200], id[64], h[160];
	struct http_reply r;

	(void)state;
	preview_create(d.key, 8010, NULL, &r);
	assert_int_equal(r.status, 201);
	snprintf(id, sizeof id, "%s", jstr(r.json, "id"));
	host_of(jstr(r.json, "url"), h, sizeof h);
	http_reply_free(&r);
	assert_int_equal(http_request_host(&d, h, "GET", "/", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	snprintf(path, sizeof path, "/v1/sandboxes/%s/previews/%s", sbx, id);
	assert_int_equal(http_request(&d, "DELETE", path, other_key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);
	assert_int_equal(http_request_host(&d, h, "GET", "/", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200); /* still live */
	http_reply_free(&r);
	assert_int_equal(http_request(&d, "DELETE", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "id"), id);
	http_reply_free(&r);
	assert_int_equal(http_request_host(&d, h, "GET", "/", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 404);
	assert_string_equal(jerr(r.json, "type"), "not_found");
	http_reply_free(&r);
	snprintf(path, sizeof path, "/v1/sandboxes/%s/previews/pv_nosuch", sbx);
	assert_int_equal(http_request(&d, "DELETE", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);
}

/* Expired: a preview of 1 s works, then 2 s later is 404. */
static void expiry(void **state)
{
	char h[160];
	struct http_reply r;

	(void)state;
	preview_create(d.key, 8010, "{\"expires_in_seconds\": 1}", &r);
	assert_int_equal(r.status, 201);
	host_of(jstr(r.json, "url"), h, sizeof h);
	http_reply_free(&r);
	sleep(2);
	assert_int_equal(http_request_host(&d, h, "GET", "/", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);
}

/* `sbx port ID PORT --preview` prints a URL whose host name works. */
static void cli_preview(void **state)
{
	char cmd[512], out[256], h[160];
	struct http_reply r;

	(void)state;
	snprintf(cmd, sizeof cmd,
		 "bin/sbx --url http://127.0.0.1:%d --key %s port %s 8010 --preview --ttl 120",
		 d.port, d.key, sbx);
	assert_int_equal(cmd_out(cmd, out, sizeof out), 0);
	assert_true(strncmp(out, "http://8010-", 12) == 0);
	host_of(out, h, sizeof h);
	assert_int_equal(http_request_host(&d, h, "GET", "/second", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "second page"));
	http_reply_free(&r);
	snprintf(cmd, sizeof cmd,
		 "bin/sbx --url http://127.0.0.1:%d --key %s port %s 8010 --preview --ttl 0 2>&1",
		 d.port, d.key, sbx);
	assert_int_equal(cmd_out(cmd, out, sizeof out), 1);
	assert_non_null(strstr(out, "expires_in_seconds"));
}

/* Chromium opens the preview URL: its script ran, its absolute link
 * loaded (tests/browser/preview.mjs). */
static void browser(void **state)
{
	const char *node = getenv("NODE") ? getenv("NODE") : "node";
	char cmd[1024];

	(void)state;
	snprintf(cmd, sizeof cmd, "SBX_PREVIEW_URL='%s' '%s' tests/browser/preview.mjs", url, node);
	assert_int_equal(run_cmd(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(create_and_browse),
	    cmocka_unit_test(list_and_limits),
	    cmocka_unit_test(upgrade_relayed),
	    cmocka_unit_test(refused_hosts),
	    cmocka_unit_test(create_refusals),
	    cmocka_unit_test(revoked),
	    cmocka_unit_test(expiry),
	    cmocka_unit_test(cli_preview),
	    cmocka_unit_test(browser),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
