/* The front door is shared fairly (issue 13): long requests run on a
 * bounded pool with per-account caps and leave the HTTP workers free; a
 * request must arrive whole within the receive deadline (slowloris);
 * connections per client address are limited; one account's parked
 * requests cannot take the host's connections.
 *
 * Executions run with the dev-process runner (`sh` on the host, no
 * guest), so most groups need libvirt only for the daemon to start; the
 * "creates and execs" group boots one tiny guest for the create and exec
 * caps. Other loopback addresses (127.0.0.2, ...) act as other clients.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <pthread.h>
#include <strings.h>
#include <poll.h>
#include <sys/time.h>

#include "harness.h"

static struct daemon d;
static char key_b[128], key_c[128]; /* two more accounts */

static bool has_header(const struct http_reply *r, const char *name)
{
	char pat[80];

	snprintf(pat, sizeof(pat), "\r\n%s:", name);
	return strcasestr(r->headers, pat) != NULL;
}

/* A second account on the daemon: its key into key. */
static void account_new(char key[128])
{
	json_object *o = daemon_admin(&d, "create-account --name other --credit-usd 10"), *v;

	assert_non_null(o);
	assert_true(json_object_object_get_ex(o, "api_key", &v));
	snprintf(key, 128, "%s", json_object_get_string(v));
	json_object_put(o);
}

/* A TCP connection to the daemon from source address `src` (a loopback
 * address such as "127.0.0.2": each is a client address of its own for
 * the per-address limit), or from the default one when NULL. -1 when the
 * connection cannot be made. */
static int connect_from(const char *src)
{
	struct sockaddr_in sa = {.sin_family = AF_INET}, me = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	if (src) {
		inet_pton(AF_INET, src, &me.sin_addr);
		if (bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0) {
			close(fd);
			return -1;
		}
	}
	sa.sin_port = htons((uint16_t)d.port);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Read what the server sends until it closes (at most 16 MiB, 30 s);
 * the bytes read, or -1 when nothing came before the close. */
static ssize_t read_to_close(int fd, struct sbx_buf *in)
{
	struct timeval tv = {.tv_sec = 30};
	char chunk[65536];

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	sbx_buf_init(in, 16u * 1024 * 1024);
	for (;;) {
		ssize_t got = read(fd, chunk, sizeof(chunk));

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0 || sbx_buf_append(in, chunk, (size_t)got) < 0)
			break;
	}
	return in->len ? (ssize_t)in->len : -1;
}

/* Parse one reply (status line, headers, body) from `in`. 0 or -1. */
static int reply_parse(const struct sbx_buf *in, struct http_reply *r)
{
	const char *sep;

	memset(r, 0, sizeof(*r));
	if (!in->data || sscanf(in->data, "HTTP/1.1 %d", &r->status) != 1 ||
	    !(sep = strstr(in->data, "\r\n\r\n")))
		return -1;
	snprintf(r->headers, sizeof(r->headers), "%.*s", (int)(sep - in->data), in->data);
	r->body_len = in->len - (size_t)(sep + 4 - in->data);
	r->body = malloc(r->body_len + 1);
	memcpy(r->body, sep + 4, r->body_len);
	r->body[r->body_len] = '\0';
	r->json = json_tokener_parse(r->body);
	return 0;
}

/* The harness's http_request, from source address `src`. */
static int request_from(const char *src, const char *method, const char *path, const char *key,
			const char *body, struct http_reply *r)
{
	char head[2048];
	struct sbx_buf in;
	int fd = connect_from(src), n, rc;

	memset(r, 0, sizeof(*r));
	if (fd < 0)
		return -1;
	n = snprintf(head, sizeof(head),
		     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s%s%s"
		     "Content-Length: %zu\r\n\r\n%s",
		     method, path, key ? "Authorization: Bearer " : "", key ? key : "",
		     key ? "\r\n" : "", body ? strlen(body) : (size_t)0, body ? body : "");
	if (write(fd, head, (size_t)n) != n) {
		close(fd);
		return -1;
	}
	read_to_close(fd, &in);
	close(fd);
	rc = reply_parse(&in, r);
	sbx_buf_release(&in);
	return rc;
}

/* One request on a thread of its own. */
struct call {
	const char *method;
	const char *path;
	const char *key;
	const char *body;
	const char *src; /* source address, NULL = default */
	struct http_reply r;
	int rc;
	int64_t ms;
	pthread_t t;
};

static void *call_main(void *arg)
{
	struct call *c = arg;
	int64_t t0 = sbx_mono_ms();

	c->rc = request_from(c->src, c->method, c->path, c->key, c->body, &c->r);
	c->ms = sbx_mono_ms() - t0;
	return NULL;
}

static void call_start(struct call *c, const char *method, const char *path, const char *key,
		       const char *body)
{
	c->method = method;
	c->path = path;
	c->key = key;
	c->body = body;
	assert_int_equal(pthread_create(&c->t, NULL, call_main, c), 0);
}

static void call_join(struct call *c)
{
	pthread_join(c->t, NULL);
}

/* A request that must answer at once: its status, and its time in *ms. */
static int quick(const char *method, const char *path, const char *key, int64_t *ms)
{
	struct call c = {0};
	int status;

	c.method = method;
	c.path = path;
	c.key = key;
	call_main(&c);
	if (ms)
		*ms = c.ms;
	status = c.rc < 0 ? -1 : c.r.status;
	http_reply_free(&c.r);
	return status;
}

#define SLEEP3 "{\"runtime\": \"sh\", \"timeout_seconds\": 20, \"code\": \"sleep 3; echo slept\"}"

/* ------------------------------------- group 1: the pool and the caps */

static int pool_setup(void **state)
{
	/* One HTTP worker: a long request on it would stall every other. */
	daemon_config(&d, "\"http_threads\": 1, \"execution_runner\": \"dev-process\", "
			  "\"execution_test_shell_runtime\": true, "
			  "\"max_executions_in_flight_per_account\": 2, "
			  "\"http_work_threads\": 3, \"http_work_queue\": 1");
	if (daemon_up(&d) < 0)
		return -1;
	account_new(key_b);
	account_new(key_c);
	return 0;
}

static int group_teardown(void **state)
{
	return daemon_down(&d);
}

static void limits_publish_the_caps(void **state)
{
	struct http_reply r;

	assert_int_equal(http_request(&d, "GET", "/v1/limits", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_int_equal(jint(r.json, "executions_in_flight_per_account"), 2);
	assert_int_equal(jint(r.json, "creates_in_flight_per_account"), 4);
	assert_int_equal(jint(r.json, "deletes_in_flight_per_account"), 8);
	assert_int_equal(jint(r.json, "execs_in_flight_per_account"), 32);
	/* every route class that holds a connection has its cap (issue 24) */
	assert_int_equal(jint(r.json, "files_in_flight_per_account"), 8);
	assert_int_equal(jint(r.json, "processes_in_flight_per_account"), 8);
	assert_int_equal(jint(r.json, "connections_per_ip"), 64);
	assert_int_equal(jint(r.json, "request_receive_timeout_ms"), 30000);
	http_reply_free(&r);
}

/* The dev-process runner has no guest: it reads the runtimes' bootstraps
 * from the checkout it was built in (images/runtimes/, sandbox/execution.c).
 * Node's run.cjs, copied next to the code, makes main.js the main module. */
static void dev_process_finds_the_bootstraps(void **state)
{
	const char *body = "{\"runtime\": \"node\", \"timeout_seconds\": 20, \"code\": "
			   "\"console.log(process.argv.length, require.main === module, "
			   "require('fs').readdirSync(__dirname).join(','))\"}";
	struct http_reply r;

	if (run_cmd("command -v node >/dev/null 2>&1") != 0) {
		print_message("no node on this host: skipped\n");
		skip();
	}
	assert_int_equal(
	    http_request(&d, "POST", "/v1/sandbox/executions", d.key, NULL, body, 0, &r), 0);
	if (r.status != 200 || jint(r.json, "exit_code") != 0)
		print_message("node on dev-process: %d %.600s\n", r.status, r.body);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "runner"), "dev-process");
	assert_int_equal(jint(r.json, "exit_code"), 0);
	assert_string_equal(jstr(r.json, "stdout"), "2 true main.js,run.cjs\n");
	http_reply_free(&r);
}

/* Four executions of one account at once, cap 2: two run, two are 429
 * rate_limited with Retry-After at once; meanwhile the single HTTP worker
 * answers everyone else in milliseconds. */
static void executions_past_the_cap_are_429_and_the_api_stays_fast(void **state)
{
	struct call c[4] = {0};
	int64_t ms_limits, ms_usage;
	int ok = 0, limited = 0;

	for (int i = 0; i < 4; i++)
		call_start(&c[i], "POST", "/v1/sandbox/executions", d.key, SLEEP3);
	usleep(700 * 1000);
	assert_int_equal(quick("GET", "/v1/limits", NULL, &ms_limits), 200);
	assert_int_equal(quick("GET", "/v1/usage", key_b, &ms_usage), 200);
	for (int i = 0; i < 4; i++)
		call_join(&c[i]);
	print_message("4 executions: %d %lld ms, %d %lld ms, %d %lld ms, %d %lld ms; meanwhile "
		      "/v1/limits %lld ms, /v1/usage %lld ms\n",
		      c[0].r.status, (long long)c[0].ms, c[1].r.status, (long long)c[1].ms,
		      c[2].r.status, (long long)c[2].ms, c[3].r.status, (long long)c[3].ms,
		      (long long)ms_limits, (long long)ms_usage);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(c[i].rc, 0);
		if (c[i].r.status == 200) {
			ok++;
			assert_string_equal(jstr(c[i].r.json, "stdout"), "slept\n");
		} else {
			assert_int_equal(c[i].r.status, 429);
			assert_string_equal(jerr(c[i].r.json, "type"), "rate_limited");
			assert_true(has_header(&c[i].r, "Retry-After"));
			assert_true(c[i].ms < 1000);
			limited++;
		}
		http_reply_free(&c[i].r);
	}
	assert_int_equal(ok, 2);
	assert_int_equal(limited, 2);
	assert_true(ms_limits < 500);
	assert_true(ms_usage < 500);
	/* The counts came back: the account runs two again. */
	struct call again[2] = {0};
	for (int i = 0; i < 2; i++)
		call_start(&again[i], "POST", "/v1/sandbox/executions", d.key, SLEEP3);
	for (int i = 0; i < 2; i++) {
		call_join(&again[i]);
		assert_int_equal(again[i].r.status, 200);
		http_reply_free(&again[i].r);
	}
}

/* The pool has 3 threads and room for 1 more job: A runs 2, B runs 1 and
 * queues 1, C's is 503 with Retry-After, and B's queued one runs once a
 * thread is free. */
static void a_full_pool_queue_is_503(void **state)
{
	struct call a[2] = {0}, b[2] = {0}, cc = {0};

	for (int i = 0; i < 2; i++)
		call_start(&a[i], "POST", "/v1/sandbox/executions", d.key, SLEEP3);
	call_start(&b[0], "POST", "/v1/sandbox/executions", key_b, SLEEP3);
	usleep(500 * 1000);
	call_start(&b[1], "POST", "/v1/sandbox/executions", key_b, SLEEP3);
	usleep(500 * 1000);
	call_start(&cc, "POST", "/v1/sandbox/executions", key_c, SLEEP3);
	call_join(&cc);
	print_message("C with the pool full: %d in %lld ms %s\n", cc.r.status, (long long)cc.ms,
		      cc.r.body);
	assert_int_equal(cc.r.status, 503);
	assert_string_equal(jerr(cc.r.json, "type"), "service_unavailable");
	assert_true(has_header(&cc.r, "Retry-After"));
	assert_true(cc.ms < 1000);
	http_reply_free(&cc.r);
	for (int i = 0; i < 2; i++) {
		call_join(&a[i]);
		call_join(&b[i]);
		assert_int_equal(a[i].r.status, 200);
		assert_int_equal(b[i].r.status, 200);
		http_reply_free(&a[i].r);
		http_reply_free(&b[i].r);
	}
	print_message("B's queued execution answered after %lld ms\n", (long long)b[1].ms);
	assert_true(b[1].ms >= 4000); /* it waited for a thread */
}

static void flood_leaves_connections_for_others(const char *path, const char *body);

/* ---------------------------------------- group 2: creates and execs */

static char sbx_a[64];
static char exec_path[128];

static int guests_setup(void **state)
{
	daemon_config(&d, "\"max_creates_in_flight_per_account\": 1, "
			  "\"max_execs_in_flight_per_account\": 2, \"http_max_connections\": 16, "
			  "\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": 256, "
			  "\"disk_gib\": 1, \"price_micro_usd_per_hour\": 90000}}");
	if (daemon_up(&d) < 0)
		return -1;
	account_new(key_b);
	return 0;
}

/* Two creates of one account at once, cap 1: one boots, one is 429
 * rate_limited at once; then the account may create again. */
static void creates_past_the_cap_are_429(void **state)
{
	struct call c[2] = {0};
	int ok = -1;

	for (int i = 0; i < 2; i++)
		call_start(&c[i], "POST", "/v1/sandboxes", d.key, "{\"timeout_minutes\": 10}");
	for (int i = 0; i < 2; i++)
		call_join(&c[i]);
	print_message("2 creates: %d in %lld ms, %d in %lld ms\n", c[0].r.status,
		      (long long)c[0].ms, c[1].r.status, (long long)c[1].ms);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(c[i].rc, 0);
		if (c[i].r.status == 201) {
			ok = i;
			snprintf(sbx_a, sizeof(sbx_a), "%s", jstr(c[i].r.json, "id"));
		}
	}
	assert_true(ok >= 0);
	assert_int_equal(c[1 - ok].r.status, 429);
	assert_string_equal(jerr(c[1 - ok].r.json, "type"), "rate_limited");
	assert_true(has_header(&c[1 - ok].r, "Retry-After"));
	assert_true(c[1 - ok].ms < 1000);
	for (int i = 0; i < 2; i++)
		http_reply_free(&c[i].r);
	snprintf(exec_path, sizeof(exec_path), "/v1/sandboxes/%s/exec", sbx_a);
}

/* Six execs of one account at once, cap 2: two are parked and run, four
 * are 429 at once (their connections close), and the rest of the API is
 * unaffected meanwhile. */
static void execs_past_the_cap_are_429(void **state)
{
	struct call c[6] = {0};
	int64_t ms_usage;
	int ok = 0, limited = 0;

	for (int i = 0; i < 6; i++)
		call_start(&c[i], "POST", exec_path, d.key,
			   "{\"command\": \"sleep 3; echo slept\"}");
	usleep(700 * 1000);
	assert_int_equal(quick("GET", "/v1/usage", key_b, &ms_usage), 200);
	for (int i = 0; i < 6; i++) {
		call_join(&c[i]);
		assert_int_equal(c[i].rc, 0);
		if (c[i].r.status == 200) {
			ok++;
			assert_string_equal(jstr(c[i].r.json, "stdout"), "slept\n");
		} else {
			print_message("exec %d: %d %s\n", i, c[i].r.status, c[i].r.body);
			assert_int_equal(c[i].r.status, 429);
			assert_string_equal(jerr(c[i].r.json, "type"), "rate_limited");
			assert_true(has_header(&c[i].r, "Retry-After"));
			assert_true(c[i].ms < 1000);
			limited++;
		}
		http_reply_free(&c[i].r);
	}
	assert_int_equal(ok, 2);
	assert_int_equal(limited, 4);
	assert_true(ms_usage < 500);
}

/* The case: execs park their connection for as long as they run;
 * one account cannot park enough of them to take the host's connections. */
static void parked_execs_cannot_take_the_connections(void **state)
{
	flood_leaves_connections_for_others(exec_path, "{\"command\": \"sleep 3; echo slept\"}");
}

static void delete_the_sandbox(void **state)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", sbx_a);
	assert_int_equal(quick("DELETE", path, d.key, NULL), 200);
}

/* ------------------------------------------------ group 3: connections */

#define RECEIVE_MS 2000

static int conns_setup(void **state)
{
	daemon_config(&d, "\"http_receive_timeout_ms\": 2000, \"http_connections_per_ip\": 4, "
			  "\"http_max_connections\": 16, \"execution_runner\": \"dev-process\", "
			  "\"execution_test_shell_runtime\": true, "
			  "\"max_executions_in_flight_per_account\": 2");
	if (daemon_up(&d) < 0)
		return -1;
	account_new(key_b);
	return 0;
}

/* Write `head`, then one `byte` every 300 ms, as a slowloris does, until
 * the server closes the connection: the ms that took, or -1 when it was
 * still open after max_ms. */
static int64_t dribble(const char *head, char byte, int64_t max_ms)
{
	int fd = connect_from(NULL);
	int64_t t0 = sbx_mono_ms();

	assert_true(fd >= 0);
	if (head[0])
		assert_int_equal(send(fd, head, strlen(head), MSG_NOSIGNAL), (ssize_t)strlen(head));
	while (sbx_mono_ms() - t0 < max_ms) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		char c;

		if (poll(&p, 1, 300) > 0 && recv(fd, &c, 1, MSG_DONTWAIT) <= 0)
			break; /* the server closed (nothing is ever answered here) */
		if (byte && send(fd, &byte, 1, MSG_NOSIGNAL) != 1)
			break;
	}
	close(fd);
	return sbx_mono_ms() - t0 < max_ms ? sbx_mono_ms() - t0 : -1;
}

/* Headers a byte at a time, a body a byte at a time, or nothing at all:
 * each connection is closed at its receive deadline (2 s here), though
 * every byte would reset an idle timeout. */
static void slow_requests_are_cut_at_the_deadline(void **state)
{
	char head[512];
	int64_t t_head, t_body, t_idle;

	t_head = dribble("GET /v1/limits HTTP/1.1\r\nHost: x\r\nX-Slow: ", 'a', 10000);
	snprintf(head, sizeof(head),
		 "POST /v1/sandboxes/sbx_0000000000000000/extend HTTP/1.1\r\nHost: x\r\n"
		 "Authorization: Bearer %s\r\nContent-Length: 200\r\n\r\n{",
		 d.key);
	t_body = dribble(head, ' ', 10000);
	t_idle = dribble("", 0, 10000);
	print_message("closed after: slow headers %lld ms, slow body %lld ms, idle %lld ms\n",
		      (long long)t_head, (long long)t_body, (long long)t_idle);
	assert_true(t_head >= RECEIVE_MS - 100 && t_head < RECEIVE_MS + 1500);
	assert_true(t_body >= RECEIVE_MS - 100 && t_body < RECEIVE_MS + 1500);
	assert_true(t_idle >= RECEIVE_MS - 100 && t_idle < RECEIVE_MS + 1500);
}

/* One reply on a kept-alive connection: headers, then Content-Length
 * bytes. 0 or -1. */
static int read_one_reply(int fd, struct http_reply *r)
{
	struct sbx_buf in;
	char chunk[4096];
	const char *sep = NULL, *cl;
	size_t want = 0;
	int rc;

	sbx_buf_init(&in, 1024 * 1024);
	for (;;) {
		ssize_t got = read(fd, chunk, sizeof(chunk));

		if (got <= 0 || sbx_buf_append(&in, chunk, (size_t)got) < 0)
			break;
		if (!sep && (sep = strstr(in.data, "\r\n\r\n")) != NULL) {
			cl = strcasestr(in.data, "\r\nContent-Length:");
			want = (size_t)(sep + 4 - in.data) + (cl ? strtoul(cl + 17, NULL, 10) : 0);
		}
		if (sep && in.len >= want)
			break;
	}
	rc = sep && in.len >= want ? reply_parse(&in, r) : -1;
	sbx_buf_release(&in);
	return rc;
}

/* The deadline stops once the request is in: an execution parked longer
 * than the deadline still answers, a second request on the same kept-alive
 * connection is served, and the idle connection is closed at the deadline
 * after the last reply. */
static void parked_requests_outlive_the_deadline(void **state)
{
	int fd = connect_from(NULL);
	char req[1024];
	struct http_reply r;
	int64_t t0;
	char c;
	int n;

	assert_true(fd >= 0);
	n = snprintf(req, sizeof(req),
		     "POST /v1/sandbox/executions HTTP/1.1\r\nHost: x\r\n"
		     "Authorization: Bearer %s\r\nContent-Length: %zu\r\n\r\n%s",
		     d.key, strlen(SLEEP3), SLEEP3);
	t0 = sbx_mono_ms();
	assert_int_equal(write(fd, req, (size_t)n), n);
	assert_int_equal(read_one_reply(fd, &r), 0);
	print_message("execution on a kept-alive connection: %d after %lld ms\n", r.status,
		      (long long)(sbx_mono_ms() - t0));
	assert_int_equal(r.status, 200);
	assert_true(sbx_mono_ms() - t0 > RECEIVE_MS);
	http_reply_free(&r);
	usleep(1000 * 1000);
	n = snprintf(req, sizeof(req), "GET /v1/limits HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_int_equal(write(fd, req, (size_t)n), n);
	assert_int_equal(read_one_reply(fd, &r), 0);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	t0 = sbx_mono_ms();
	assert_true(read(fd, &c, 1) <= 0); /* closed while idle */
	print_message("idle kept-alive connection closed after %lld ms\n",
		      (long long)(sbx_mono_ms() - t0));
	assert_true(sbx_mono_ms() - t0 < RECEIVE_MS + 1500);
	close(fd);
}

/* 4 connections per client address: a fifth from the same address is
 * closed unanswered, another address is served, and once one of the four
 * is gone the address may connect again. */
static void connections_per_address_are_limited(void **state)
{
	int fds[4];
	struct http_reply r;
	int rc;

	for (int i = 0; i < 4; i++)
		assert_true((fds[i] = connect_from("127.0.0.2")) >= 0);
	usleep(100 * 1000);
	rc = request_from("127.0.0.2", "GET", "/v1/limits", NULL, NULL, &r);
	print_message("fifth connection from 127.0.0.2: %s %d\n", rc < 0 ? "closed" : "answered",
		      r.status);
	assert_int_equal(rc, -1);
	http_reply_free(&r);
	assert_int_equal(request_from("127.0.0.3", "GET", "/v1/limits", NULL, NULL, &r), 0);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	close(fds[0]);
	usleep(200 * 1000);
	assert_int_equal(request_from("127.0.0.2", "GET", "/v1/limits", NULL, NULL, &r), 0);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	for (int i = 1; i < 4; i++)
		close(fds[i]);
}

/* One account sends 20 long requests at once from 10 addresses (2 per
 * address): if they all stayed parked they would hold all of the host's 16
 * connections, and every other client would wait in the listen backlog
 * until they end. Its cap (2 here) keeps 2 parked and answers the rest 429
 * at once, so another account's 12 requests from 4 addresses are all
 * served meanwhile, each in well under a second. `path`/`body`: the long
 * request (3 s). */
static void flood_leaves_connections_for_others(const char *path, const char *body)
{
	enum { N_A = 20, N_B = 12 };
	char src_a[N_A][16], src_b[N_B][16];
	struct call a[N_A] = {0}, b[N_B] = {0};
	int parked = 0, limited = 0, served = 0;
	int64_t slowest = 0;

	for (int i = 0; i < N_A; i++) {
		snprintf(src_a[i], sizeof(src_a[i]), "127.0.0.%d", 10 + i / 2);
		a[i].src = src_a[i];
		call_start(&a[i], "POST", path, d.key, body);
	}
	usleep(800 * 1000);
	for (int i = 0; i < N_B; i++) {
		snprintf(src_b[i], sizeof(src_b[i]), "127.0.0.%d", 30 + i / 3);
		b[i].src = src_b[i];
		call_start(&b[i], "GET", "/v1/usage", key_b, NULL);
	}
	for (int i = 0; i < N_B; i++) {
		call_join(&b[i]);
		served += b[i].rc == 0 && b[i].r.status == 200 && b[i].ms < 1000;
		slowest = SBX_MAX(slowest, b[i].ms);
		http_reply_free(&b[i].r);
	}
	for (int i = 0; i < N_A; i++) {
		call_join(&a[i]);
		parked += a[i].rc == 0 && a[i].r.status == 200;
		limited += a[i].rc == 0 && a[i].r.status == 429;
		http_reply_free(&a[i].r);
	}
	print_message("account A: %d ran, %d answered 429; account B: %d of %d served within "
		      "1 s (slowest %lld ms)\n",
		      parked, limited, served, N_B, (long long)slowest);
	assert_int_equal(parked, 2);
	assert_int_equal(limited, N_A - 2);
	assert_int_equal(served, N_B);
}

static void parked_executions_cannot_take_the_connections(void **state)
{
	flood_leaves_connections_for_others("/v1/sandbox/executions", SLEEP3);
}

/* ------------------------------------------- refusals before the body */

/* Python's http.client and urllib send the whole body before they read:
 * each refusal decided from the headers (401, 404, 405, 413 by
 * Content-Length, 413 of a chunked body) of a 4 MiB body must be readable,
 * not "Connection reset" or "Broken pipe". Prints "NAME STATUS CONNECTION"
 * per request, or "NAME EXC ..." */
static const char python_probe[] =
    "import http.client, sys, urllib.request, urllib.error\n"
    "port, key = int(sys.argv[1]), sys.argv[2]\n"
    "big = b'{' + b' ' * (4 * 1024 * 1024 - 2) + b'}'\n"
    "def hc(name, method, path, auth, chunked=False):\n"
    "    c = http.client.HTTPConnection('127.0.0.1', port, timeout=20)\n"
    "    h = {'Content-Type': 'application/json'}\n"
    "    if auth: h['Authorization'] = 'Bearer ' + key\n"
    "    try:\n"
    "        if chunked:\n"
    "            parts = (big[i:i + 65536] for i in range(0, len(big), 65536))\n"
    "            c.request(method, path, body=parts, headers=h, encode_chunked=True)\n"
    "        else:\n"
    "            c.request(method, path, body=big, headers=h)\n"
    "        r = c.getresponse(); r.read()\n"
    "        print(name, r.status, r.getheader('Connection'))\n"
    "    except Exception as e:\n"
    "        print(name, 'EXC', repr(e))\n"
    "hc('noauth', 'POST', '/v1/sandboxes', False)\n"
    "hc('unknown', 'POST', '/v1/nothing/here', True)\n"
    "hc('method', 'POST', '/v1/limits', False)\n"
    "hc('toolarge', 'POST', '/v1/sandboxes/sbx_0000000000000000/extend', True)\n"
    "hc('chunked', 'POST', '/v1/sandboxes/sbx_0000000000000000/extend', True, True)\n"
    "try:\n"
    "    urllib.request.urlopen(urllib.request.Request(\n"
    "        'http://127.0.0.1:%d/v1/sandboxes' % port, data=big,\n"
    "        headers={'Content-Type': 'application/json'}), timeout=20)\n"
    "    print('urllib 200 -')\n"
    "except urllib.error.HTTPError as e:\n"
    "    print('urllib', e.code, e.headers.get('Connection'))\n"
    "except Exception as e:\n"
    "    print('urllib EXC', repr(e))\n";

static void python_clients_read_early_refusals(void **state)
{
	static const struct {
		const char *name;
		int status;
	} want[] = {{"noauth", 401},   {"unknown", 404}, {"method", 405},
		    {"toolarge", 413}, {"chunked", 413}, {"urllib", 401}};
	char path[400], cmd[800], line[512];
	int seen = 0;
	FILE *f, *p;

	snprintf(path, sizeof(path), "%s/probe.py", d.state_dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(python_probe, f);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "python3 %s %d %s 2>&1", path, d.port, d.key);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p)) {
		char name[32], conn[32];
		int status;

		print_message("python: %s", line);
		if (sscanf(line, "%31s %d %31s", name, &status, conn) != 3)
			continue;
		for (size_t i = 0; i < SBX_ARRAY_SIZE(want); i++) {
			if (strcmp(name, want[i].name) != 0)
				continue;
			assert_int_equal(status, want[i].status);
			/* Nothing of the refused body is read as a next request. */
			assert_string_equal(conn, "close");
			seen++;
		}
	}
	assert_int_equal(pclose(p), 0);
	assert_int_equal(seen, (int)SBX_ARRAY_SIZE(want));
}

/* Raw bytes: a refused body made of requests yields one reply (401, then
 * close), never replies to the requests inside it; a client that waits
 * for '100 Continue' gets the refusal at once instead; a refused body that
 * never ends is read only up to the drain cap (16 MiB) and cut. */
static void refused_bodies_are_dropped_and_bounded(void **state)
{
	static const char inner[] = "GET /v1/limits HTTP/1.1\r\nHost: x\r\n\r\n";
	size_t n_inner = 20000, len = n_inner * (sizeof(inner) - 1), sent = 0;
	char head[256], *body = malloc(len), chunk_head[32], *chunk;
	struct sbx_buf in;
	int fd, n, replies = 0;

	assert_non_null(body);
	for (size_t i = 0; i < n_inner; i++)
		memcpy(body + i * (sizeof(inner) - 1), inner, sizeof(inner) - 1);
	fd = connect_from(NULL);
	n = snprintf(head, sizeof(head),
		     "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n", len);
	assert_int_equal(write(fd, head, (size_t)n), n);
	assert_int_equal(write(fd, body, len), (ssize_t)len);
	assert_true(read_to_close(fd, &in) > 0);
	for (const char *p = in.data; (p = strstr(p, "HTTP/1.1 ")) != NULL; p++)
		replies++;
	print_message("a %zu-byte refused body of requests: %d reply, '%.25s'\n", len, replies,
		      in.data);
	assert_int_equal(replies, 1);
	assert_true(strncmp(in.data, "HTTP/1.1 401", 12) == 0);
	assert_non_null(strcasestr(in.data, "\r\nConnection: close"));
	sbx_buf_release(&in);
	close(fd);
	free(body);

	/* a client that waits for the answer before it sends its body, with
	 * no 'Expect: 100-continue', gets it at once (issue 24: nothing came
	 * until the receive deadline closed the connection), then may send
	 * the body without a reset */
	fd = connect_from(NULL);
	n = snprintf(head, sizeof(head),
		     "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n");
	assert_int_equal(write(fd, head, (size_t)n), n);
	{
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		char got[64] = "";

		assert_int_equal(poll(&pf, 1, 5000), 1);
		assert_true(recv(fd, got, sizeof(got) - 1, MSG_PEEK) > 12);
		assert_true(strncmp(got, "HTTP/1.1 401", 12) == 0);
		char *late = malloc(1000000);

		assert_non_null(late);
		memset(late, 'x', 1000000);
		/* the daemon drops it (lingering close): no reset before the
		 * answer was read */
		assert_int_equal(send(fd, late, 1000000, MSG_NOSIGNAL), 1000000);
		free(late);
		assert_true(read_to_close(fd, &in) > 0);
		assert_true(strncmp(in.data, "HTTP/1.1 401", 12) == 0);
		sbx_buf_release(&in);
		close(fd);
	}

	fd = connect_from(NULL);
	n = snprintf(head, sizeof(head),
		     "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n"
		     "Expect: 100-continue\r\n\r\n");
	assert_int_equal(write(fd, head, (size_t)n), n);
	assert_true(read_to_close(fd, &in) > 0);
	assert_true(strncmp(in.data, "HTTP/1.1 401", 12) == 0);
	sbx_buf_release(&in);
	close(fd);

	fd = connect_from(NULL);
	n = snprintf(head, sizeof(head),
		     "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n"
		     "Transfer-Encoding: chunked\r\n\r\n");
	assert_int_equal(write(fd, head, (size_t)n), n);
	chunk = calloc(1, 1024 * 1024);
	memset(chunk, ' ', 1024 * 1024);
	n = snprintf(chunk_head, sizeof(chunk_head), "%x\r\n", 1024 * 1024);
	while (sent < 256u * 1024 * 1024) {
		if (send(fd, chunk_head, (size_t)n, MSG_NOSIGNAL) != n ||
		    send(fd, chunk, 1024 * 1024, MSG_NOSIGNAL) != 1024 * 1024 ||
		    send(fd, "\r\n", 2, MSG_NOSIGNAL) != 2)
			break;
		sent += 1024 * 1024;
	}
	print_message("an endless refused chunked body: cut after %zu MiB sent\n",
		      sent / (1024 * 1024));
	assert_true(sent < 64u * 1024 * 1024);
	free(chunk);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest pool[] = {
	    cmocka_unit_test(limits_publish_the_caps),
	    cmocka_unit_test(dev_process_finds_the_bootstraps),
	    cmocka_unit_test(executions_past_the_cap_are_429_and_the_api_stays_fast),
	    cmocka_unit_test(a_full_pool_queue_is_503),
	};
	const struct CMUnitTest guests[] = {
	    cmocka_unit_test(creates_past_the_cap_are_429),
	    cmocka_unit_test(execs_past_the_cap_are_429),
	    cmocka_unit_test(parked_execs_cannot_take_the_connections),
	    cmocka_unit_test(delete_the_sandbox),
	};
	const struct CMUnitTest conns[] = {
	    cmocka_unit_test(slow_requests_are_cut_at_the_deadline),
	    cmocka_unit_test(parked_requests_outlive_the_deadline),
	    cmocka_unit_test(connections_per_address_are_limited),
	    cmocka_unit_test(parked_executions_cannot_take_the_connections),
	    cmocka_unit_test(python_clients_read_early_refusals),
	    cmocka_unit_test(refused_bodies_are_dropped_and_bounded),
	};
	int fails = 0;

	if (getenv("SBX_TEST_FILTER"))
		cmocka_set_test_filter(getenv("SBX_TEST_FILTER"));
	fails += cmocka_run_group_tests_name("frontdoor: pool and caps", pool, pool_setup,
					     group_teardown);
	fails += cmocka_run_group_tests_name("frontdoor: connections", conns, conns_setup,
					     group_teardown);
	fails += cmocka_run_group_tests_name("frontdoor: creates and execs", guests, guests_setup,
					     group_teardown);
	return fails;
}
