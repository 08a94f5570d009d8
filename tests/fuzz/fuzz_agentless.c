/* Fuzz target: the host side of the exec protocol fed arbitrary guest
 * bytes, with one exec (id 1), one download (id 2, GET, at most 1 MiB)
 * and one upload (id 3, PUT, 100 bytes sent) in flight on a v3 connection,
 * over a channel that drops what the host sends. Byte 0 steers the run (chunk size, EOF at the end,
 * a backstop tick halfway); the rest is the guest's byte stream. Whatever arrives, the exec's
 * completion runs exactly once, a download never holds more than its
 * credit window, and nothing crashes or leaks. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agentless/agentless.h"
#include "agentless/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int null_send(void *ctx, const void *buf, size_t len)
{
	(void)ctx;
	(void)buf;
	(void)len;
	return 0;
}

static void null_close(void *ctx)
{
	(void)ctx;
}

static void count_done(void *opaque, struct agentless_exec_result *res, const struct sbx_error *err)
{
	int *calls = opaque;

	if ((res == NULL) == (err == NULL))
		abort();
	if (res) {
		if (res->stdout_len > 4096 || res->stderr_len > 512)
			abort(); /* never more than the caps asked for */
		if (res->stdout_buf[res->stdout_len] != '\0')
			abort();
		agentless_exec_result_release(res);
	}
	(*calls)++;
}

/* A streamed exec's consumer: every other chunk asks for a pause, and the
 * next call resumes (from inside the callback, the in_output path). */
struct stream_sink {
	struct agentless_conn *c;
	int *calls; /* the done count: output after done is a bug */
	unsigned n;
};

static bool sink_output(void *opaque, uint32_t exec_id, bool is_stderr, const void *data,
			size_t len)
{
	struct stream_sink *s = opaque;

	(void)is_stderr;
	(void)data;
	if (*s->calls != 0 || len == 0 || len > 64 * 1024)
		abort();
	if (s->n++ % 2)
		agentless_exec_resume(s->c, exec_id);
	return s->n % 2;
}

static void sink_done(void *opaque, struct agentless_exec_result *res, const struct sbx_error *err)
{
	struct stream_sink *s = opaque;

	if (res && (res->stdout_len || res->stderr_len))
		abort(); /* streamed output is never buffered */
	count_done(s->calls, res, err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t chunks[] = {1, 2, 5, 11, 12, 13, 64, 100, 1000, 4096, 65536, 1 << 20};
	const struct agentless_limits lim = {.backstop_grace_ms = 10, .max_inflight = 4};
	struct agentless_exec_req req = {
	    .command = "true",
	    .command_len = 4,
	    .cwd = "/",
	    .timeout_ms = 1000,
	    .stdout_cap = 4096,
	    .stderr_cap = 512,
	};
	/* HELLO {VERSION 3, VERSION_MIN 1} */
	static const uint8_t hello_v3[] = {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 20, 0, 1, 0, 0,
					   0, 4, 0, 0, 0, 3, 0, 2, 0, 0, 0, 4,	0, 0, 0, 1};
	const struct agentless_file_req get = {
	    .op = WIRE_FILE_OP_GET, .path = "/f", .max_bytes = 1 << 20};
	const struct agentless_file_req put = {.op = WIRE_FILE_OP_PUT, .path = "/g", .mode = 0644};
	static uint8_t ones[100], sink[4096];
	struct agentless_xfer *down = NULL, *up = NULL;
	struct sbx_channel ch = {.ctx = NULL, .send = null_send, .close = null_close};
	struct agentless_conn *c;
	struct sbx_error err;
	int calls = 0;
	uint8_t ctl;
	size_t chunk, off = 1;
	bool ticked = false;

	if (size < 1)
		return 0;
	sbx_log_set_level(SBX_LOG_ERROR);
	ctl = data[0];
	chunk = chunks[ctl % SBX_ARRAY_SIZE(chunks)];

	c = agentless_conn_new(&lim, NULL, NULL);
	agentless_conn_attach(c, ch, true); /* ready at once: WELCOME to nowhere */
	struct stream_sink ssink = {.c = c, .calls = &calls};

	agentless_conn_recv(c, hello_v3, sizeof hello_v3);
	/* bit 0x20: a streamed exec (protocol v3 output callback) */
	if (ctl & 0x20)
		req.on_output = sink_output;
	if (agentless_exec_start(c, &req, (ctl & 0x20) ? sink_done : count_done,
				 (ctl & 0x20) ? (void *)&ssink : (void *)&calls, &err) < 0 ||
	    agentless_xfer_start(c, &get, NULL, NULL, &down, &err) < 0 ||
	    agentless_xfer_start(c, &put, NULL, NULL, &up, &err) < 0 ||
	    agentless_xfer_write(c, up, ones, sizeof ones) != (long)sizeof ones)
		abort();
	while (off < size) {
		size_t n = SBX_MIN(chunk, size - off);
		struct agentless_xfer_status st;

		agentless_conn_recv(c, data + off, n);
		off += n;
		agentless_xfer_status(down, &st);
		if (st.buffered > WIRE_FILE_WINDOW ||
		    (st.have_meta && st.size != UINT64_MAX && st.received > st.size))
			abort();
		agentless_xfer_read(c, down, sink, sizeof sink);
		if ((ctl & 0x40) && !ticked && off >= size / 2) {
			/* twice past the backstop: KILL, then give up */
			agentless_conn_tick(c, sbx_mono_ms() + 100000);
			agentless_conn_tick(c, sbx_mono_ms() + 200000);
			ticked = true;
		}
	}
	if (ctl & 0x80)
		agentless_conn_recv(c, NULL, 0);
	if (calls > 1)
		abort();
	agentless_xfer_release(down);
	agentless_xfer_release(up);
	agentless_conn_free(c, "fuzz over");
	if (calls != 1)
		abort();
	return 0;
}
