/* Long jobs (issue 16) in real guests: a streamed exec (events as the guest
 * writes them, interleaved as written, timeouts, a slow reader that holds
 * the daemon's memory to its budget while the guest prints 500 MB), and
 * background processes (polled to completion with offsets and compared
 * with the guest's own log, stdin, a signal to a process tree, the ring's
 * overflow, the per-sandbox limit, a daemon restart that keeps them), and
 * another account's 404 on every route.
 *
 * One daemon, the tiny image, a 1 vCPU / 512 MiB size. Event arrival times
 * are printed; assertions are orderings and gaps far larger than any
 * scheduling noise (a gap the guest itself makes with `sleep`). */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"

#define OUTPUT_CAP (1024 * 1024)

static struct daemon d;
static char other_key[128];
static char sbx_a[64];

static int setup(void **state)
{
	struct daemon other;

	(void)state;
	daemon_config(&d, "\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": 512, "
			  "\"disk_gib\": 1, \"price_micro_usd_per_hour\": 90000}}, "
			  "\"http_threads\": 2, \"destroy_on_exit\": true, "
			  "\"max_processes_per_sandbox\": 4");
	other = d;
	daemon_create_account(&other, "10");
	snprintf(other_key, sizeof(other_key), "%s", other.key);
	if (daemon_up(&d) < 0)
		return -1;
	return daemon_create_sandbox(&d, sbx_a, sizeof(sbx_a));
}

static int teardown(void **state)
{
	(void)state;
	return daemon_down(&d);
}

/* ------------------------------------------------------- a streaming client */

#define EVENTS_MAX 4096

struct event {
	int64_t at_ms; /* arrival, monotonic, since the request was sent */
	json_object *o;
};

struct stream {
	int status;
	char headers[4096];
	struct event ev[EVENTS_MAX];
	int n;
	size_t data_bytes[2]; /* decoded stdout / stderr bytes */
	int64_t t0;
	struct sbx_buf raw;  /* the HTTP bytes not parsed yet */
	struct sbx_buf body; /* de-chunked body, not yet split into lines */
	bool head_done, chunks_done;
};

static void stream_release(struct stream *s)
{
	for (int i = 0; i < s->n; i++)
		json_object_put(s->ev[i].o);
	sbx_buf_release(&s->raw);
	sbx_buf_release(&s->body);
}

static void stream_lines(struct stream *s)
{
	char *nl;

	while (s->body.len && (nl = memchr(s->body.data, '\n', s->body.len))) {
		size_t n = (size_t)(nl - s->body.data);
		json_object *o, *v = NULL;
		const char *line = s->body.data;

		*nl = '\0';
		/* SSE: the JSON is on the "data: " line */
		if (strncmp(line, "data: ", 6) == 0)
			line += 6;
		o = json_tokener_parse(line);
		if (o && s->n < EVENTS_MAX) {
			const char *type = jstr(o, "type");

			if (type && (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) &&
			    json_object_object_get_ex(o, "data", &v))
				s->data_bytes[type[3] == 'e'] +=
				    (size_t)json_object_get_string_len(v);
			/* keep only small events: a big stream is counted, not kept */
			if (v && json_object_get_string_len(v) > 4096 && s->n > 16) {
				json_object_put(o);
			} else {
				s->ev[s->n].at_ms = sbx_mono_ms() - s->t0;
				s->ev[s->n++].o = o;
			}
		} else if (o) {
			json_object_put(o);
		}
		memmove(s->body.data, nl + 1, s->body.len - n - 1);
		s->body.len -= n + 1;
	}
}

/* Parse what arrived: the head, then chunks into body lines. */
static void stream_parse(struct stream *s)
{
	for (;;) {
		char *p = s->raw.data, *crlf;
		size_t used;

		if (!s->head_done) {
			char *sep = s->raw.len ? strstr(p, "\r\n\r\n") : NULL;

			if (!sep)
				return;
			sscanf(p, "HTTP/1.1 %d", &s->status);
			snprintf(s->headers, sizeof(s->headers), "%.*s", (int)(sep - p), p);
			used = (size_t)(sep + 4 - p);
			s->head_done = true;
			if (!strcasestr(s->headers, "chunked")) {
				/* an error reply: the rest is one JSON body */
				sbx_buf_append(&s->body, sep + 4, s->raw.len - used);
				sbx_buf_append(&s->body, "\n", 1);
				s->raw.len = 0;
				s->chunks_done = true;
				stream_lines(s);
				return;
			}
		} else {
			unsigned long size;

			crlf = s->raw.len ? strstr(p, "\r\n") : NULL;
			if (!crlf)
				return;
			size = strtoul(p, NULL, 16);
			if (size == 0) {
				s->chunks_done = true;
				return;
			}
			if ((size_t)(crlf + 2 - p) + size + 2 > s->raw.len)
				return;
			sbx_buf_append(&s->body, crlf + 2, size);
			used = (size_t)(crlf + 2 - p) + size + 2;
			stream_lines(s);
		}
		memmove(s->raw.data, s->raw.data + used, s->raw.len - used);
		s->raw.len -= used;
		s->raw.data[s->raw.len] = '\0';
	}
}

/* POST body to /exec of `id` with `accept`, reading the reply as it comes;
 * read_delay_ms > 0 reads 4 KiB at a time with that pause (a slow client).
 * on_event (may be NULL) runs after each read. */
static int stream_exec(const char *key, const char *id, const char *accept, const char *body,
		       int read_delay_ms, struct stream *s, void (*on_read)(struct stream *))
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	char head[1024], chunk[65536], path[128];
	int fd, n, rcvbuf = 4096;

	memset(s, 0, sizeof(*s));
	sbx_buf_init(&s->raw, 64u << 20);
	sbx_buf_init(&s->body, 64u << 20);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", id);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (read_delay_ms > 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	sa.sin_port = htons((uint16_t)d.port);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	n = snprintf(head, sizeof(head),
		     "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
		     "Authorization: Bearer %s\r\nAccept: %s\r\nContent-Type: application/json\r\n"
		     "Content-Length: %zu\r\n\r\n",
		     path, key, accept, strlen(body));
	s->t0 = sbx_mono_ms();
	if (write(fd, head, (size_t)n) != n ||
	    write(fd, body, strlen(body)) != (ssize_t)strlen(body)) {
		close(fd);
		return -1;
	}
	while (!s->chunks_done) {
		size_t want = read_delay_ms > 0 ? 4096 : sizeof(chunk);
		ssize_t got = read(fd, chunk, want);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		sbx_buf_append(&s->raw, chunk, (size_t)got);
		stream_parse(s);
		if (on_read)
			on_read(s);
		if (read_delay_ms > 0)
			usleep((useconds_t)read_delay_ms * 1000);
	}
	close(fd);
	return 0;
}

static const char *ev_type(const struct stream *s, int i)
{
	return jstr(s->ev[i].o, "type");
}

static void stream_print(const struct stream *s)
{
	for (int i = 0; i < s->n && i < 40; i++)
		print_message("  +%5lld ms %s\n", (long long)s->ev[i].at_ms,
			      json_object_to_json_string_ext(s->ev[i].o, JSON_C_TO_STRING_PLAIN));
}

/* The index of the first data event whose data contains `text`, or -1. */
static int ev_find(const struct stream *s, const char *type, const char *text)
{
	for (int i = 0; i < s->n; i++) {
		const char *t = ev_type(s, i), *data = jstr(s->ev[i].o, "data");

		if (t && strcmp(t, type) == 0 && data && strstr(data, text))
			return i;
	}
	return -1;
}

static json_object *ev_last(const struct stream *s)
{
	return s->n ? s->ev[s->n - 1].o : NULL;
}

/* ------------------------------------------------------------- 1. streaming */

static void stream_delivers_output_as_it_is_written(void **state)
{
	struct stream s;
	int i1, i3;

	(void)state;
	assert_int_equal(
	    stream_exec(d.key, sbx_a, "application/x-ndjson",
			"{\"command\": \"for i in 1 2 3; do echo line$i; sleep 1; done\"}", 0, &s,
			NULL),
	    0);
	print_message("stream of 1 2 3:\n");
	stream_print(&s);
	assert_int_equal(s.status, 200);
	assert_non_null(strcasestr(s.headers, "application/x-ndjson"));
	/* the security headers of every other reply (issue 24) */
	assert_non_null(strcasestr(s.headers, "X-Content-Type-Options: nosniff"));
	assert_non_null(strcasestr(s.headers, "X-Frame-Options: DENY"));
	i1 = ev_find(&s, "stdout", "line1");
	i3 = ev_find(&s, "stdout", "line3");
	assert_true(i1 >= 0 && i3 > i1);
	/* Two one-second sleeps lie between the two lines in the guest: had
	 * the output been held until the end, both would arrive together. */
	assert_true(s.ev[i3].at_ms - s.ev[i1].at_ms >= 1000);
	assert_string_equal(jstr(ev_last(&s), "type"), "exit");
	assert_int_equal(jint(ev_last(&s), "exit_code"), 0);
	assert_int_equal(jbool(ev_last(&s), "timed_out"), 0);
	assert_int_equal(jbool(ev_last(&s), "truncated"), 0);
	stream_release(&s);
}

static void stream_interleaves_stdout_and_stderr_as_written(void **state)
{
	static const char *const want[][2] = {
	    {"stdout", "o1"}, {"stderr", "e1"}, {"stdout", "o2"}, {"stderr", "e2"}};
	struct stream s;
	int last = -1;

	(void)state;
	assert_int_equal(
	    stream_exec(d.key, sbx_a, "text/event-stream",
			"{\"command\": \"echo o1; sleep 0.3; echo e1 >&2; sleep 0.3; echo o2; "
			"sleep 0.3; echo e2 >&2; exit 3\"}",
			0, &s, NULL),
	    0);
	print_message("interleaved (SSE):\n");
	stream_print(&s);
	assert_int_equal(s.status, 200);
	assert_non_null(strcasestr(s.headers, "text/event-stream"));
	for (size_t k = 0; k < 4; k++) {
		int i = ev_find(&s, want[k][0], want[k][1]);

		assert_true(i > last);
		last = i;
	}
	assert_string_equal(jstr(ev_last(&s), "type"), "exit");
	assert_int_equal(jint(ev_last(&s), "exit_code"), 3);
	stream_release(&s);
}

static void stream_past_its_timeout_ends_timed_out(void **state)
{
	struct stream s;

	(void)state;
	assert_int_equal(
	    stream_exec(d.key, sbx_a, "application/x-ndjson",
			"{\"command\": \"echo started; sleep 60\", \"timeout_ms\": 2000}", 0, &s,
			NULL),
	    0);
	stream_print(&s);
	assert_int_equal(s.status, 200);
	assert_true(ev_find(&s, "stdout", "started") >= 0);
	assert_string_equal(jstr(ev_last(&s), "type"), "exit");
	assert_int_equal(jbool(ev_last(&s), "timed_out"), 1);
	assert_int_equal(jint(ev_last(&s), "exit_code"), 137);
	stream_release(&s);
}

static void stream_base64_decodes_each_event(void **state)
{
	struct stream s;
	const char *data;
	int i;

	(void)state;
	assert_int_equal(
	    stream_exec(d.key, sbx_a, "application/x-ndjson",
			"{\"command\": \"printf 'a\\\\000b'\", \"encoding\": \"base64\"}", 0, &s,
			NULL),
	    0);
	stream_print(&s);
	i = ev_find(&s, "stdout", "");
	assert_true(i >= 0);
	data = jstr(s.ev[i].o, "data");
	assert_string_equal(data, "YQBi"); /* "a\0b" */
	stream_release(&s);
}

static long rss_base, rss_peak;

static void rss_sample(struct stream *s)
{
	long v = daemon_proc_kib(&d, "VmRSS");

	(void)s;
	if (v > rss_peak)
		rss_peak = v;
}

static void stream_slow_reader_holds_memory_to_the_budget(void **state)
{
	struct stream s;
	json_object *last;

	(void)state;
	rss_base = rss_peak = daemon_proc_kib(&d, "VmRSS");
	/* 500 MB of output, read at ~4 KiB per 2 ms by the client. */
	assert_int_equal(
	    stream_exec(
		d.key, sbx_a, "application/x-ndjson",
		"{\"command\": \"head -c 500000000 /dev/zero | tr '\\\\0' x; echo done >&2\", "
		"\"timeout_ms\": 240000}",
		2, &s, rss_sample),
	    0);
	last = ev_last(&s);
	print_message("slow reader: %zu stdout bytes, %d events kept, RSS %ld -> peak %ld KiB; "
		      "last %s\n",
		      s.data_bytes[0], s.n, rss_base, rss_peak,
		      json_object_to_json_string_ext(last, JSON_C_TO_STRING_PLAIN));
	assert_int_equal(s.status, 200);
	assert_string_equal(jstr(last, "type"), "exit");
	assert_int_equal(jbool(last, "truncated"), 1);
	assert_int_equal(jbool(last, "timed_out"), 0);
	/* the cap, as for the buffered reply */
	assert_int_equal(s.data_bytes[0], OUTPUT_CAP);
	/* The exec's budget share is 2 x cap x 10 = 20 MiB; the daemon grew
	 * by less than that. */
	assert_true(rss_peak - rss_base < 20 * 1024);
	stream_release(&s);
}

static void stream_of_another_account_is_404(void **state)
{
	struct stream s;

	(void)state;
	assert_int_equal(stream_exec(other_key, sbx_a, "application/x-ndjson",
				     "{\"command\": \"echo no\"}", 0, &s, NULL),
			 0);
	assert_int_equal(s.status, 404);
	stream_release(&s);
}

/* ------------------------------------------------- 2. background processes */

/* A buffered exec of `cmd` in sbx_a. */
static struct http_reply exec_json(const char *cmd)
{
	json_object *o = json_object_new_object();
	struct http_reply r;
	char path[128];

	json_object_object_add(o, "command", json_object_new_string(cmd));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", sbx_a);
	assert_int_equal(
	    http_request(&d, "POST", path, d.key, NULL, json_object_to_json_string(o), 0, &r), 0);
	json_object_put(o);
	return r;
}

static struct http_reply proc_req(const char *key, const char *method, const char *suffix,
				  const char *body)
{
	struct http_reply r;
	char path[256];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes%s", sbx_a, suffix);
	assert_int_equal(http_request(&d, method, path, key, NULL, body, 0, &r), 0);
	return r;
}

/* POST /processes {"command": cmd}: the pid (the reply must be 201). */
static long proc_start(const char *cmd)
{
	json_object *o = json_object_new_object();
	struct http_reply r;
	long pid;

	json_object_object_add(o, "command", json_object_new_string(cmd));
	r = proc_req(d.key, "POST", "", json_object_to_json_string(o));
	json_object_put(o);
	if (r.status != 201)
		print_message("start: %d %s\n", r.status, r.body);
	assert_int_equal(r.status, 201);
	assert_string_equal(jstr(r.json, "status"), "running");
	assert_true(jis_null(r.json, "exit_code"));
	assert_int_equal(strncmp(jstr(r.json, "command"), cmd, 256), 0);
	pid = (long)jint(r.json, "pid");
	assert_true(pid > 1);
	http_reply_free(&r);
	return pid;
}

/* Poll the output until the process exited and every byte was read:
 * the concatenated stdout into *out (owned), the exit code returned. */
static int proc_drain(long pid, struct sbx_buf *out, uint64_t *lost, int *polls)
{
	int64_t so = 0, eo = 0;
	char suffix[128];

	sbx_buf_init(out, 64u << 20);
	*lost = 0;
	*polls = 0;
	for (int i = 0; i < 2000; i++) {
		struct http_reply r;
		json_object *v;
		bool done;
		int code;

		snprintf(suffix, sizeof(suffix),
			 "/%ld/output?stdout_offset=%lld&stderr_offset=%lld", pid, (long long)so,
			 (long long)eo);
		r = proc_req(d.key, "GET", suffix, NULL);
		assert_int_equal(r.status, 200);
		(*polls)++;
		*lost += (uint64_t)jint(r.json, "stdout_lost_bytes");
		assert_true(json_object_object_get_ex(r.json, "stdout", &v));
		sbx_buf_append(out, json_object_get_string(v),
			       (size_t)json_object_get_string_len(v));
		so = jint(r.json, "stdout_next_offset");
		eo = jint(r.json, "stderr_next_offset");
		done = strcmp(jstr(r.json, "status"), "exited") == 0 &&
		       so == jint(r.json, "stdout_total") && eo == jint(r.json, "stderr_total");
		code = (int)jint(r.json, "exit_code");
		http_reply_free(&r);
		if (done)
			return code;
		usleep(100 * 1000);
	}
	fail_msg("process %ld never finished", pid);
	return -1;
}

/* POST/GET .../processes/{pid}/{what}. */
static struct http_reply proc_pid_req(const char *method, long pid, const char *what,
				      const char *body)
{
	char suffix[64];

	snprintf(suffix, sizeof(suffix), "/%ld/%s", pid, what);
	return proc_req(d.key, method, suffix, body);
}

/* Drain pid: it exits with `code`, and its whole stdout is `want` (NULL:
 * not checked). */
static void drain_expect(long pid, int code, const char *want)
{
	struct sbx_buf out;
	uint64_t lost;
	int polls;

	assert_int_equal(proc_drain(pid, &out, &lost, &polls), code);
	if (want) {
		assert_int_equal(out.len, strlen(want));
		assert_memory_equal(out.data, want, out.len);
	}
	sbx_buf_release(&out);
}

static void process_polled_to_completion_equals_its_log(void **state)
{
	struct sbx_buf out;
	struct http_reply r;
	uint64_t lost;
	int polls;
	long pid;

	(void)state;
	/* ~140 KB in bursts: several polls, each bounded */
	pid = proc_start(
	    "i=0; while [ $i -lt 8000 ]; do echo \"build step $i of 8000\"; "
	    "i=$((i+1)); [ $((i % 1000)) -eq 0 ] && sleep 0.2; done | tee /tmp/build.log; "
	    "echo finished >&2");
	/* it is listed while it runs or after */
	r = proc_req(d.key, "GET", "", NULL);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "build step"));
	http_reply_free(&r);

	assert_int_equal(proc_drain(pid, &out, &lost, &polls), 0);
	print_message("polled %zu bytes in %d polls, %llu lost\n", out.len, polls,
		      (unsigned long long)lost);
	assert_int_equal(lost, 0);
	assert_true(polls >= 5); /* > 4 x 30 KiB: it came in pieces */
	r = exec_json("cat /tmp/build.log");
	assert_int_equal(r.status, 200);
	assert_int_equal(out.len, strlen(jstr(r.json, "stdout")));
	assert_memory_equal(out.data, jstr(r.json, "stdout"), out.len);
	http_reply_free(&r);
	sbx_buf_release(&out);

	/* the list shows it ended, with its exit code and command */
	r = proc_req(d.key, "GET", "", NULL);
	assert_int_equal(r.status, 200);
	{
		json_object *data, *p;
		bool seen = false;

		assert_true(json_object_object_get_ex(r.json, "data", &data));
		for (size_t i = 0; i < json_object_array_length(data); i++) {
			p = json_object_array_get_idx(data, i);
			if (jint(p, "pid") != pid)
				continue;
			seen = true;
			assert_string_equal(jstr(p, "status"), "exited");
			assert_int_equal(jint(p, "exit_code"), 0);
			assert_non_null(strstr(jstr(p, "command"), "build step"));
			assert_non_null(jstr(p, "started_at"));
		}
		assert_true(seen);
	}
	http_reply_free(&r);
}

static void process_stdin_reaches_the_process(void **state)
{
	struct http_reply r;
	long pid;

	(void)state;
	pid = proc_start("read line; echo \"got:$line\"");
	r = proc_pid_req("POST", pid, "stdin", "{\"data\": \"hello there\\n\"}");
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "object"), "process_stdin");
	assert_int_equal(jint(r.json, "written"), 12);
	http_reply_free(&r);
	drain_expect(pid, 0, "got:hello there\n");

	/* base64 bytes, then close: cat sees EOF and ends */
	pid = proc_start("cat; echo '<eof>'");
	r = proc_pid_req("POST", pid, "stdin",
			 "{\"data\": \"YWJj\", \"encoding\": \"base64\", \"close\": true}");
	assert_int_equal(r.status, 200);
	assert_int_equal(jint(r.json, "written"), 3);
	assert_int_equal(jbool(r.json, "closed"), 1);
	http_reply_free(&r);
	drain_expect(pid, 0, "abc<eof>\n");
}

static void process_signal_kills_its_tree(void **state)
{
	struct http_reply r;
	long pid;

	(void)state;
	pid = proc_start("sleep 981 & sleep 982 & echo started; wait");
	r = proc_pid_req("POST", pid, "signal", "{\"signal\": \"QUIT\"}");
	assert_int_equal(r.status, 400);
	assert_string_equal(jerr(r.json, "param"), "signal");
	http_reply_free(&r);
	/* other spellings of signals it does not send stay refused */
	r = proc_pid_req("POST", pid, "signal", "{\"signal\": \"SIGQUIT\"}");
	assert_int_equal(r.status, 400);
	http_reply_free(&r);
	r = proc_pid_req("POST", pid, "signal", "{\"signal\": 3}");
	assert_int_equal(r.status, 400);
	http_reply_free(&r);
	r = proc_pid_req("POST", pid, "signal", "{\"signal\": \"SIG\"}");
	assert_int_equal(r.status, 400);
	http_reply_free(&r);
	/* both children exist before the signal: under TCG a forked child
	 * can take a while to exec sleep, so look until both show (10 s) */
	for (int i = 0;; i++) {
		r = exec_json("ps -o args | grep -c '^[s]leep 98[12]'");
		bool both = strcmp(jstr(r.json, "stdout"), "2\n") == 0;
		if (both || i == 20)
			assert_string_equal(jstr(r.json, "stdout"), "2\n");
		http_reply_free(&r);
		if (both)
			break;
		usleep(500 * 1000);
	}
	/* SIGTERM, sigterm, "15" and 15 are TERM; the reply names it TERM */
	r = proc_pid_req("POST", pid, "signal", "{\"signal\": \"SIGTERM\"}");
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "object"), "process_signal");
	assert_string_equal(jstr(r.json, "signal"), "TERM");
	assert_int_equal(jbool(r.json, "sent"), 1);
	assert_string_equal(jstr(r.json, "status"), "running");
	assert_true(jis_null(r.json, "exit_code"));
	http_reply_free(&r);
	drain_expect(pid, 128 + 15, "started\n");
	r = exec_json("sleep 0.5; ps -o args | grep -c '^[s]leep 98[12]'");
	assert_string_equal(jstr(r.json, "stdout"), "0\n");
	http_reply_free(&r);

	/* a process that has exited is not signalled again, and says so */
	r = proc_pid_req("POST", pid, "signal", "{\"signal\": 9}");
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "signal"), "KILL");
	assert_int_equal(jbool(r.json, "sent"), 0);
	http_reply_free(&r);
	r = proc_pid_req("POST", pid, "signal", "{\"signal\": \"sigint\"}");
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "signal"), "INT");
	assert_int_equal(jbool(r.json, "sent"), 0);
	http_reply_free(&r);
	r = proc_pid_req("POST", pid, "signal", "{\"signal\": \"15\"}");
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "signal"), "TERM");
	assert_int_equal(jbool(r.json, "sent"), 0);
	assert_string_equal(jstr(r.json, "status"), "exited");
	assert_int_equal(jint(r.json, "exit_code"), 128 + 15);
	http_reply_free(&r);
}

static void process_ring_overflow_is_reported(void **state)
{
	char suffix[128];
	struct http_reply r;
	struct sbx_buf out;
	uint64_t lost;
	int polls;
	long pid;

	(void)state;
	pid = proc_start("head -c 3000000 /dev/zero | tr '\\0' a; echo end >&2");
	/* wait for the end without reading stdout (only stderr) */
	for (int i = 0; i < 600; i++) {
		snprintf(suffix, sizeof(suffix), "/%ld/output?stdout_offset=3000000", pid);
		r = proc_req(d.key, "GET", suffix, NULL);
		bool ended = strcmp(jstr(r.json, "status"), "exited") == 0;
		http_reply_free(&r);
		if (ended)
			break;
		usleep(200 * 1000);
	}
	snprintf(suffix, sizeof(suffix), "/%ld/output?stdout_offset=0", pid);
	r = proc_req(d.key, "GET", suffix, NULL);
	print_message("overflow: %s\n", strlen(r.body) > 400 ? "(long)" : r.body);
	assert_int_equal(r.status, 200);
	assert_int_equal(jint(r.json, "stdout_total"), 3000000);
	assert_int_equal(jint(r.json, "stdout_lost_bytes"), 3000000 - 1048576);
	assert_int_equal(jint(r.json, "stdout_offset"), 3000000 - 1048576);
	http_reply_free(&r);
	/* read on from there: exactly the ring's bytes, then the end */
	assert_int_equal(proc_drain(pid, &out, &lost, &polls), 0);
	assert_int_equal(lost, 3000000 - 1048576);
	assert_int_equal(out.len, 1048576);
	sbx_buf_release(&out);
}

static void process_limit_and_limits_endpoint(void **state)
{
	struct http_reply r;
	long pids[4];

	(void)state;
	r = proc_req(NULL, "GET", "", NULL); /* no key: 401 */
	assert_int_equal(r.status, 401);
	http_reply_free(&r);
	assert_int_equal(http_request(&d, "GET", "/v1/limits", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(jint(r.json, "processes_per_sandbox"), 4);
	assert_int_equal(jint(r.json, "process_output_ring_bytes"), 1048576);
	http_reply_free(&r);
	for (int i = 0; i < 4; i++)
		pids[i] = proc_start("sleep 300");
	r = proc_req(d.key, "POST", "", "{\"command\": \"true\"}");
	assert_int_equal(r.status, 429);
	http_reply_free(&r);
	for (int i = 0; i < 4; i++) {
		r = proc_pid_req("POST", pids[i], "signal", "{\"signal\": \"KILL\"}");
		assert_int_equal(r.status, 200);
		http_reply_free(&r);
	}
	/* an unknown pid is 404 */
	r = proc_req(d.key, "GET", "/4000000/output", NULL);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);
}

static void process_routes_of_another_account_are_404(void **state)
{
	static const char *const routes[][3] = {
	    {"GET", "", NULL},
	    {"POST", "", "{\"command\": \"true\"}"},
	    {"GET", "/2/output", NULL},
	    {"POST", "/2/stdin", "{\"data\": \"x\"}"},
	    {"POST", "/2/signal", "{\"signal\": \"KILL\"}"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		struct http_reply r = proc_req(other_key, routes[i][0], routes[i][1], routes[i][2]);

		if (r.status != 404)
			print_message("%s %s -> %d %s\n", routes[i][0], routes[i][1], r.status,
				      r.body);
		assert_int_equal(r.status, 404);
		http_reply_free(&r);
	}
}

static void process_survives_a_daemon_restart(void **state)
{
	char suffix[128];
	struct http_reply r;
	long pid;

	(void)state;
	pid = proc_start("i=0; while [ $i -lt 120 ]; do echo tick $i; i=$((i+1)); sleep 0.5; done");
	sleep(2);
	daemon_kill9(&d);
	assert_int_equal(daemon_start(&d), 0);
	/* reconcile reattached the channel: the process and its output */
	snprintf(suffix, sizeof(suffix), "/%ld/output?stdout_offset=0", pid);
	for (int i = 0; i < 100; i++) {
		r = proc_req(d.key, "GET", suffix, NULL);
		if (r.status == 200)
			break;
		print_message("after restart: %d %s\n", r.status, r.body);
		http_reply_free(&r);
		usleep(300 * 1000);
	}
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "running");
	assert_non_null(strstr(jstr(r.json, "stdout"), "tick 0\ntick 1\n"));
	http_reply_free(&r);
	r = proc_pid_req("POST", pid, "signal", "{\"signal\": \"KILL\"}");
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
}

/* ------------------------------------------- 3. the full image: gcc, python3 */

static int setup_full(void **state)
{
	(void)state;
	memset(&d, 0, sizeof(d));
	if (daemon_config_full(&d, "\"http_threads\": 2, \"destroy_on_exit\": true") < 0) {
		print_message("the full image is not built (make image-full)\n");
		return -1;
	}
	if (daemon_up(&d) < 0)
		return -1;
	return daemon_create_sandbox(&d, sbx_a, sizeof(sbx_a));
}

static int teardown_full(void **state)
{
	(void)state;
	return daemon_down(&d);
}

static void process_c_build_polled_equals_its_log(void **state)
{
	static const char *const prepare =
	    "mkdir -p /tmp/proj && cd /tmp/proj && "
	    "for i in 1 2 3 4 5 6; do echo \"int f$i(int x) { return x * $i; }\" > u$i.c; done && "
	    "echo '#include <stdio.h>' > main.c && echo 'int f2(int);' >> main.c && "
	    "printf '%s\\n' 'int main(void) { printf(\"%d\\n\", f2(21)); return 0; }' "
	    ">> main.c";
	struct sbx_buf out;
	struct http_reply r;
	uint64_t lost;
	int polls;
	long pid;

	(void)state;
	r = exec_json(prepare);
	assert_int_equal(r.status, 200);
	assert_int_equal(jint(r.json, "exit_code"), 0);
	http_reply_free(&r);
	/* gcc -v is chatty: ~20 KB, polled while the build runs */
	pid = proc_start("cd /tmp/proj && (for i in 1 2 3 4 5 6; do echo \"== unit $i\"; "
			 "gcc -v -O2 -c u$i.c -o u$i.o 2>&1; done; "
			 "gcc -o app main.c u*.o 2>&1 && ./app) | tee build.log");
	assert_int_equal(proc_drain(pid, &out, &lost, &polls), 0);
	print_message("C build: %zu bytes in %d polls\n", out.len, polls);
	assert_int_equal(lost, 0);
	/* gcc -v's chatter, read while the build ran: in several pieces */
	assert_true(out.len > 10 * 1024);
	assert_true(polls > 1);
	if (out.len < 3 || memcmp(out.data + out.len - 3, "42\n", 3) != 0)
		fail_msg("the build did not end with the program's 42: ...%s",
			 out.len > 300 ? out.data + out.len - 300 : out.data);
	r = exec_json("cat /tmp/proj/build.log");
	assert_int_equal(r.status, 200);
	assert_int_equal(out.len, strlen(jstr(r.json, "stdout")));
	assert_memory_equal(out.data, jstr(r.json, "stdout"), out.len);
	http_reply_free(&r);
	sbx_buf_release(&out);
}

static void process_python_reads_stdin(void **state)
{
	struct http_reply r;
	long pid;

	(void)state;
	pid = proc_start("python3 -c 'print(input())'");
	r = proc_pid_req("POST", pid, "stdin", "{\"data\": \"hello from stdin\\n\"}");
	assert_int_equal(r.status, 200);
	assert_int_equal(jint(r.json, "written"), 17);
	http_reply_free(&r);
	drain_expect(pid, 0, "hello from stdin\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(stream_delivers_output_as_it_is_written),
	    cmocka_unit_test(stream_interleaves_stdout_and_stderr_as_written),
	    cmocka_unit_test(stream_past_its_timeout_ends_timed_out),
	    cmocka_unit_test(stream_base64_decodes_each_event),
	    cmocka_unit_test(stream_slow_reader_holds_memory_to_the_budget),
	    cmocka_unit_test(stream_of_another_account_is_404),
	    cmocka_unit_test(process_polled_to_completion_equals_its_log),
	    cmocka_unit_test(process_stdin_reaches_the_process),
	    cmocka_unit_test(process_signal_kills_its_tree),
	    cmocka_unit_test(process_ring_overflow_is_reported),
	    cmocka_unit_test(process_limit_and_limits_endpoint),
	    cmocka_unit_test(process_routes_of_another_account_are_404),
	    cmocka_unit_test(process_survives_a_daemon_restart),
	};

	const struct CMUnitTest full[] = {
	    cmocka_unit_test(process_c_build_polled_equals_its_log),
	    cmocka_unit_test(process_python_reads_stdin),
	};
	int failed;

	if (getenv("SBX_TEST_FILTER"))
		cmocka_set_test_filter(getenv("SBX_TEST_FILTER"));
	failed = cmocka_run_group_tests(tests, setup, teardown);
	return failed + cmocka_run_group_tests(full, setup_full, teardown_full);
}
