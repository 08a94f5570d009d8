/* api/http_stream.c: POST /v1/sandboxes/{id}/exec asked for as a stream
 * (an Accept header naming application/x-ndjson or text/event-stream).
 *
 * The reply starts at once (200, chunked) and carries events as the guest
 * produces them: `stdout`/`stderr` chunks, then one `exit` (or `error`).
 * The exec's output callback (the channel's thread) encodes each chunk and
 * appends it to the request's pending bytes; MHD's content reader sends
 * them and, when none are ready, suspends the connection, which the next
 * chunk or the completion resumes. The completion only stores the result
 * (api_complete): the reader renders the `exit` event on MHD's thread. No
 * thread waits on a guest.
 *
 * Why a chunk is encoded on the channel's thread, not on MHD's with the
 * `exit`: the output callback's answer is the pause, decided as the
 * chunk arrives, by what it costs once encoded: the budget is charged the
 * event's exact size (docs/api.md "Output budget": the encoded events
 * waiting) and STREAM_HIGH/STREAM_MAX count encoded bytes. Queuing the raw
 * bytes for MHD's thread would have to charge an estimate on arrival (x10
 * for UTF-8, the buffered reply's worst case: streams paused and refused
 * sooner, a change of behaviour) and hold a chunk twice (raw in the queue,
 * then encoded past what one read takes); and it would move the
 * encoding's CPU (base64 or UTF-8 repair and JSON escaping, up to 64 KiB a
 * chunk) from the guest's channel (with the socket transport, its own
 * reader thread) onto the few HTTP threads every tenant shares.
 *
 * Bounds: the exec holds of the output budget what is pending, encoded
 * (docs/api.md "Output budget"): each event is charged when it is
 * appended and given back as the client reads it. Above STREAM_HIGH
 * pending bytes, or when the budget refuses an event, the exec is paused
 * (the guest stops reading its pipes, protocol v3); below STREAM_LOW it
 * runs again. A guest that goes on shipping while paused, past the budget
 * or past STREAM_MAX pending bytes, fails the stream: an `error` event
 * ends it and the rest of the command's output is dropped. Tiny frames
 * arrive gathered (agentless), so they do not cost an event each.
 *
 * Locking: the stream's state is guarded by srv->lock, like the rest of a
 * request's exec state (http-priv.h); nothing is encoded and nothing is
 * called in sandbox/ with it held. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http-priv.h"

#define MOD "api"

/* Pause the command above this many pending bytes, resume below LOW. */
#define STREAM_HIGH (256u << 10)
#define STREAM_LOW  (64u << 10)
/* Pending bytes past which a paused stream fails. */
#define STREAM_MAX (8u << 20)
/* Bytes held back per stream: an incomplete UTF-8 sequence at a chunk's
 * end waits for the rest in the next chunk. */
#define CARRY_MAX 3

struct api_stream {
	bool sse;    /* text/event-stream framing, else NDJSON */
	bool base64; /* "encoding": "base64" */
	/* pending reply bytes [off, len) of buf; guarded by srv->lock */
	char *buf;
	size_t off, len, alloc;
	bool paused; /* the command was asked to pause */
	bool ended;  /* the final event is in buf */
	bool failed; /* past its bounds: output dropped, the error event sent */
	uint32_t exec_id;
	/* channel thread only (calls for one exec never overlap) */
	uint8_t carry[2][CARRY_MAX];
	size_t carry_len[2];
	char *scratch; /* carry + one chunk */
};

bool api_stream_wanted(struct MHD_Connection *c, bool *sse)
{
	const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);

	if (!a)
		return false;
	if (strcasestr(a, "application/x-ndjson")) {
		*sse = false;
		return true;
	}
	if (strcasestr(a, "text/event-stream")) {
		*sse = true;
		return true;
	}
	return false;
}

/* How many bytes at the end of p[0..n) start a UTF-8 sequence that the
 * next chunk may complete (0..3). */
size_t api_utf8_incomplete_tail(const uint8_t *p, size_t n)
{
	for (size_t i = 1; i <= CARRY_MAX && i <= n; i++) {
		uint8_t b = p[n - i];
		size_t need;

		if ((b & 0xC0) == 0x80)
			continue; /* continuation byte: look further back */
		if (b < 0xC0)
			return 0; /* ASCII (or a stray byte): nothing pending */
		need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
		return need > i ? i : 0;
	}
	return 0;
}

/* One event as reply bytes: an NDJSON line, or an SSE event. Takes o. */
static char *event_text(const struct api_stream *s, const char *type, struct json_object *o,
			size_t *len)
{
	const char *json;
	size_t jl = 0;
	char *out = NULL;
	int n;

	if (!o)
		return NULL;
	json = json_object_to_json_string_length(
	    o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &jl);
	if (s->sse)
		n = asprintf(&out, "event: %s\ndata: %.*s\n\n", type, (int)jl, json);
	else
		n = asprintf(&out, "%.*s\n", (int)jl, json);
	json_object_put(o);
	if (n < 0)
		return NULL;
	*len = (size_t)n;
	return out;
}

static char *data_event(const struct api_stream *s, bool is_stderr, const char *data, size_t len,
			bool cut, size_t *out_len)
{
	const char *type = is_stderr ? "stderr" : "stdout";
	struct json_object *o = json_object_new_object();
	char *enc;
	size_t n;

	if (s->base64) {
		enc = sbx_base64_encode(data, len);
		n = enc ? strlen(enc) : 0;
	} else {
		enc = sbx_utf8_sanitize(data, len, cut, &n);
	}
	if (!enc || n > INT_MAX) {
		free(enc);
		json_object_put(o);
		return NULL;
	}
	json_object_object_add(o, "type", json_object_new_string(type));
	json_object_object_add(o, "data", json_object_new_string_len(enc, (int)n));
	free(enc);
	return event_text(s, type, o, out_len);
}

/* Wake a reader parked for want of bytes. srv->lock held. */
static void stream_wake_locked(struct api_server *srv, struct req *r)
{
	if (r->state == EXEC_SUSPENDED) {
		api_parked_remove(srv, r);
		MHD_resume_connection(r->conn);
		r->state = EXEC_RUNNING;
	}
}

/* Append text (taken) to the pending bytes; false when the request is gone
 * or out of memory. srv->lock held. */
static bool stream_append_locked(struct req *r, char *text, size_t len)
{
	struct api_stream *s = r->stream;

	if (!text)
		return false;
	if (r->state != EXEC_RUNNING && r->state != EXEC_SUSPENDED) {
		free(text);
		return false;
	}
	if (s->off > 0 && s->off == s->len)
		s->off = s->len = 0;
	if (s->len + len > s->alloc) {
		size_t n = s->alloc ? s->alloc : 16384;
		char *p;

		while (n < s->len + len)
			n *= 2;
		if (s->off > 0) { /* compact first */
			memmove(s->buf, s->buf + s->off, s->len - s->off);
			s->len -= s->off;
			s->off = 0;
		}
		if (s->len + len > s->alloc) {
			p = realloc(s->buf, n);
			if (!p) {
				free(text);
				return false;
			}
			s->buf = p;
			s->alloc = n;
		}
	}
	memcpy(s->buf + s->len, text, len);
	s->len += len;
	free(text);
	stream_wake_locked(r->srv, r);
	return true;
}

/* The guest goes on shipping past the stream's bounds though paused:
 * drop `text` and what follows, end the reply with an error event. The
 * command runs on in the guest to its end. Returns true (stay paused). */
static bool stream_fail(struct req *r, char *text)
{
	struct api_server *srv = r->srv;
	struct api_stream *s = r->stream;
	struct json_object *o;
	struct sbx_error e;
	size_t el = 0;
	char *etext;

	free(text);
	sbx_error_clear(&e);
	sbx_error_set(&e, SBX_E_RATE_LIMITED, NULL,
		      "the command's output passed what this stream may buffer (the client "
		      "does not read it fast enough, and the guest did not pause); the rest "
		      "of its output was dropped");
	o = api_error_encode(&e);
	json_object_object_add(o, "type", json_object_new_string("error"));
	etext = event_text(s, "error", o, &el);
	if (etext)
		sandbox_output_charge(&r->hold, el, SANDBOX_OUTPUT_FORCE, NULL, NULL);
	pthread_mutex_lock(&srv->lock);
	if (!s->failed) {
		s->failed = true;
		if (etext)
			stream_append_locked(r, etext, el);
		etext = NULL;
		s->ended = true; /* the reply ends after the error */
		stream_wake_locked(srv, r);
	}
	pthread_mutex_unlock(&srv->lock);
	free(etext);
	return true;
}

/* sandbox_exec_output_fn: the channel's thread, no lock held. */
static bool stream_output(void *opaque, uint32_t exec_id, bool is_stderr, const void *data,
			  size_t len)
{
	struct req *r = opaque;
	struct api_server *srv = r->srv;
	struct api_stream *s = r->stream;
	int k = is_stderr ? 1 : 0;
	size_t n = s->carry_len[k], tail, tl = 0;
	char *text;
	bool pause = false;

	if (!s->scratch && !(s->scratch = malloc(CARRY_MAX + 64 * 1024)))
		return false;
	if (len > 64 * 1024)
		len = 64 * 1024; /* agentless never passes more (WIRE_MAX_CHUNK) */
	memcpy(s->scratch, s->carry[k], n);
	memcpy(s->scratch + n, data, len);
	n += len;
	tail = s->base64 ? 0 : api_utf8_incomplete_tail((const uint8_t *)s->scratch, n);
	memcpy(s->carry[k], s->scratch + n - tail, tail);
	s->carry_len[k] = tail;
	if (n == tail)
		return false;
	text = data_event(s, is_stderr, s->scratch, n - tail, false, &tl);
	if (!text)
		return false;

	pthread_mutex_lock(&srv->lock);
	s->exec_id = exec_id;
	bool failed = s->failed, paused = s->paused;
	size_t pending = s->len - s->off;
	pthread_mutex_unlock(&srv->lock);
	if (failed) {
		free(text);
		return true;
	}
	/* what is buffered is charged, encoded: past the budget, once more
	 * after asking for a pause (frames already on their way), not again */
	bool paid = sandbox_output_charge(&r->hold, tl, SANDBOX_OUTPUT_WITHIN, NULL, NULL) == 0;
	if (!paid || pending + tl > STREAM_MAX) {
		if (paused) {
			if (paid)
				sandbox_output_shrink(&r->hold, tl);
			return stream_fail(r, text);
		}
		if (!paid)
			sandbox_output_charge(&r->hold, tl, SANDBOX_OUTPUT_FORCE, NULL, NULL);
		pause = true;
	}

	pthread_mutex_lock(&srv->lock);
	if (stream_append_locked(r, text, tl) && !s->paused &&
	    (pause || s->len - s->off > STREAM_HIGH)) {
		s->paused = true;
		pause = true;
	}
	pthread_mutex_unlock(&srv->lock);
	return pause;
}

/* sandbox_exec_done_fn: any thread, after the last stream_output. Only
 * delivers: stream_read renders the end on MHD's thread. */
static void stream_done(void *opaque, struct agentless_exec_result *res,
			const struct sandbox_exec_receipt *receipt, const struct sbx_error *err)
{
	api_complete(opaque, res, receipt, NULL, err);
}

/* The exec ended (MHD's thread, no lock held): render the end of the
 * reply from its completion: what an incomplete UTF-8 sequence held back,
 * then the `exit` (or `error`) event. `done` is taken. */
static void stream_end(struct req *r, struct api_completion *done, struct sbx_error err)
{
	struct api_server *srv = r->srv;
	struct api_stream *s = r->stream;
	char *text[3] = {NULL, NULL, NULL};
	size_t tl[3] = {0, 0, 0};
	const struct agentless_exec_result *res = done->has_exec ? &done->exec : NULL;

	assert(api_on_mhd_thread());

	/* the channel's thread is done with the carry: it ran before the
	 * completion, which srv->lock ordered before this */
	for (int k = 0; k < 2; k++)
		if (s->carry_len[k])
			text[k] = data_event(s, k == 1, (const char *)s->carry[k], s->carry_len[k],
					     res && res->truncated, &tl[k]);
	if (res) {
		struct json_object *o = json_object_new_object();

		json_object_object_add(o, "type", json_object_new_string("exit"));
		json_object_object_add(o, "exit_code", json_object_new_int(res->exit_code));
		json_object_object_add(o, "duration_ms", json_object_new_int64(res->duration_ms));
		json_object_object_add(o, "truncated", json_object_new_boolean(res->truncated));
		json_object_object_add(o, "timed_out", json_object_new_boolean(res->timed_out));
		text[2] = event_text(s, "exit", o, &tl[2]);
	} else {
		struct json_object *o;

		if (err.code == SBX_E_INTERNAL)
			snprintf(err.message, sizeof(err.message),
				 "the service failed to handle the request; retry later");
		o = api_error_encode(&err);
		json_object_object_add(o, "type", json_object_new_string("error"));
		text[2] = event_text(s, "error", o, &tl[2]);
	}
	api_completion_release(done);

	for (int i = 0; i < 3; i++)
		if (text[i])
			sandbox_output_charge(&r->hold, tl[i], SANDBOX_OUTPUT_FORCE, NULL, NULL);
	pthread_mutex_lock(&srv->lock);
	for (int i = 0; i < 3; i++)
		if (text[i])
			stream_append_locked(r, text[i], tl[i]);
	s->ended = true;
	pthread_mutex_unlock(&srv->lock);
}

/* Drain the completion once it came (MHD's thread): the count goes back
 * and, unless its bounds already ended the reply, the end is rendered. */
static void stream_drain(struct req *r)
{
	struct api_server *srv = r->srv;
	struct api_completion done;
	struct sbx_error err;
	bool failed;

	pthread_mutex_lock(&srv->lock);
	if (!r->done.completed || r->done.drained) {
		pthread_mutex_unlock(&srv->lock);
		return;
	}
	done = r->done;
	memset(&r->done, 0, sizeof(r->done));
	r->done.completed = r->done.drained = true;
	err = r->exec_err;
	failed = r->stream->failed;
	pthread_mutex_unlock(&srv->lock);
	api_req_slot_put(r);
	if (failed) /* its error event ended the reply */
		api_completion_release(&done);
	else
		stream_end(r, &done, err);
}

/* MHD's content reader: the bytes ready, or park the connection. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct req *r = cls;
	struct api_server *srv = r->srv;
	struct api_stream *s = r->stream;
	bool resume = false;
	uint32_t exec_id;
	ssize_t n = 0;

	(void)pos;
	api_mark_mhd_thread();
	pthread_mutex_lock(&srv->lock);
again:
	if (r->done.completed && !r->done.drained) { /* the exec ended */
		pthread_mutex_unlock(&srv->lock);
		stream_drain(r);
		pthread_mutex_lock(&srv->lock);
		goto again;
	}
	if (s->len > s->off) {
		n = (ssize_t)SBX_MIN(max, s->len - s->off);
		memcpy(buf, s->buf + s->off, (size_t)n);
		s->off += (size_t)n;
		if (s->paused && s->len - s->off < STREAM_LOW) {
			s->paused = false;
			resume = true;
		}
	} else if (s->ended) {
		n = MHD_CONTENT_READER_END_OF_STREAM;
	} else if (r->state == EXEC_ABORTED) {
		/* the server stops: the command may still run */
		n = MHD_CONTENT_READER_END_WITH_ERROR;
	} else {
		api_park_locked(srv, r); /* until output, the end or a stop */
	}
	exec_id = s->exec_id;
	pthread_mutex_unlock(&srv->lock);
	if (n > 0) /* read: no longer buffered */
		sandbox_output_shrink(&r->hold, (uint64_t)n);
	if (resume)
		sandbox_exec_resume(srv->svc, r->id, exec_id);
	return n;
}

static void stream_response_free(void *cls)
{
	struct req *r = cls;
	struct api_server *srv = r->srv;
	bool free_now;

	pthread_mutex_lock(&srv->lock);
	free_now = --r->refs == 0;
	pthread_mutex_unlock(&srv->lock);
	if (free_now)
		api_req_free(r);
}

void api_stream_free(struct api_stream *s)
{
	if (!s)
		return;
	free(s->buf);
	free(s->scratch);
	free(s);
}

enum MHD_Result api_stream_start(struct req *r, bool sse)
{
	struct api_server *srv = r->srv;
	struct MHD_Response *resp;
	struct sbx_error err;
	enum MHD_Result ret;

	sbx_error_clear(&err);
	if (r->exec.receipt)
		return api_reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "receipt",
					   "a streamed exec cannot be signed; leave out receipt "
					   "or ask for the buffered reply");
	r->stream = calloc(1, sizeof(*r->stream));
	if (!r->stream)
		return api_reply_new_error(r->conn, SBX_E_INTERNAL, NULL, "out of memory");
	r->stream->sse = sse;
	r->stream->base64 = r->exec.base64;
	r->exec.req.on_output = stream_output;
	if (api_exec_begin(r, stream_done, &err) < 0)
		return api_reply_error(r->conn, &err);
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, r,
						 stream_response_free);
	if (!resp)
		return MHD_NO; /* the exec runs on; its callbacks drop their ref */
	pthread_mutex_lock(&srv->lock);
	r->refs++; /* the response's */
	pthread_mutex_unlock(&srv->lock);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				sse ? "text/event-stream" : "application/x-ndjson");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	api_security_headers(resp, false);
	api_reqctx_header(resp);
	ret = api_queue_response(r->conn, 200, resp);
	MHD_destroy_response(resp);
	return ret;
}
