/* agentless/exec.c: executions and background-process requests on an
 * exec connection: starting them (EXEC, PROC), their output, EXIT, ERROR
 * and PROC_REPLY frames, their deadlines (KILL, then give up) and the
 * synchronous wrapper. The connection itself (channel, handshake,
 * reassembly, pings) is agentless.c's; the locking is the one written
 * there, with `lock` guarding the exec table.
 */
#include "agentless/agentless.h"
#include "agentless/agentless-priv.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "agentless/wire.h"

#define MOD "agentless"

static void stream_init(struct stream_buf *s, uint64_t cap)
{
	memset(s, 0, sizeof(*s));
	s->cap = cap;
}

/* Append; -1 when the stream would pass its cap. Aborts on ENOMEM. */
static int stream_append(struct stream_buf *s, const void *data, size_t len)
{
	size_t need;

	if (len == 0)
		return 0;
	if (len > s->cap || s->shipped > s->cap - len)
		return -1;
	s->shipped += len;
	if (s->count_only || s->full)
		return 0;
	need = s->len + len + 1;
	if (need > s->alloc) {
		size_t n = s->alloc ? s->alloc : 4096;
		char *p;

		while (n < need)
			n *= 2;
		if (s->cap < SIZE_MAX)
			n = (size_t)SBX_MIN((uint64_t)n, s->cap + 1);
		p = realloc(s->data, n);
		if (!p)
			abort();
		s->data = p;
		s->alloc = n;
	}
	memcpy(s->data + s->len, data, len);
	s->len += len;
	s->data[s->len] = '\0';
	return 0;
}

/* Hand the stream's bytes over as a NUL-terminated buffer. */
static char *stream_steal(struct stream_buf *s, size_t *len)
{
	char *p = s->data;

	if (!p) {
		p = xcalloc(1, 1);
	}
	*len = s->len;
	s->data = NULL;
	s->len = s->alloc = 0;
	return p;
}

static void exec_free(struct exec *e)
{
	if (!e)
		return;
	free(e->out.data);
	free(e->err.data);
	free(e);
}

/* Call with c->lock held. Unlinks and returns the exec, or NULL. */
static struct exec *conn_exec_take(struct agentless_conn *c, uint32_t id)
{
	struct exec **pp;

	for (pp = &c->execs; *pp; pp = &(*pp)->next) {
		struct exec *e = *pp;

		if (e->id == id) {
			*pp = e->next;
			e->next = NULL;
			c->n_execs--;
			return e;
		}
	}
	return NULL;
}

static struct exec *conn_exec_find(struct agentless_conn *c, uint32_t id)
{
	struct exec *e;

	for (e = c->execs; e; e = e->next)
		if (e->id == id)
			return e;
	return NULL;
}

struct exec *exec_find_locked(struct agentless_conn *c, uint32_t id)
{
	return conn_exec_find(c, id);
}

bool conn_id_used_locked(struct agentless_conn *c, uint32_t id)
{
	return conn_exec_find(c, id) || xfer_find_locked(c, id) || tcp_find_locked(c, id);
}

/* Fail a list of execs (already unlinked) with err; no lock held. */
/* Fail one exec or PROC request (its callback, whichever it has). */
static void exec_fail_one(struct exec *e, const struct sbx_error *err)
{
	if (e->proc_done)
		e->proc_done(e->opaque, NULL, 0, err);
	else
		e->done(e->opaque, NULL, err);
}

void execs_fail(struct exec *list, const struct sbx_error *err)
{
	while (list) {
		struct exec *next = list->next;

		exec_fail_one(list, err);
		exec_free(list);
		list = next;
	}
}

/* Pass `len` bytes of e's output to its on_output (e found under the
 * lock, which is released here), then PAUSE / RESUME as asked. */
static void output_deliver(struct agentless_conn *c, struct exec *e, uint32_t id, bool is_stderr,
			   const uint8_t *p, size_t len)
{
	agentless_output_fn fn = e->on_output;
	void *opaque = e->opaque;
	bool pause, send_pause, resume;

	/* Only this thread ends an exec while in_output is set (tick skips
	 * it; attach and free close the channel, which waits for us; a
	 * failed launch waits on `cond`), so e stays valid across the
	 * unlocked call. */
	e->in_output = true;
	pthread_mutex_unlock(&c->lock);
	pause = fn(opaque, id, is_stderr, p, len);
	pthread_mutex_lock(&c->lock);
	send_pause = pause && !e->paused && c->version >= 3;
	if (send_pause)
		e->paused = true;
	pthread_mutex_unlock(&c->lock);
	/* in_output stays set until PAUSE is queued: a resume asked for in
	 * the meantime (the consumer drained) is sent after it, never before */
	if (send_pause)
		conn_send(c, WIRE_PAUSE, id, NULL, 0);
	pthread_mutex_lock(&c->lock);
	e->in_output = false;
	pthread_cond_broadcast(&c->cond); /* conn_launch may wait for it */
	resume = e->resume_wanted && e->paused;
	e->resume_wanted = false;
	if (resume)
		e->paused = false;
	pthread_mutex_unlock(&c->lock);
	if (resume)
		conn_send(c, WIRE_RESUME, id, NULL, 0);
}

void exec_output_flush(struct agentless_conn *c)
{
	struct exec *e;

	pthread_mutex_lock(&c->lock);
	e = c->co_len ? conn_exec_find(c, c->co_id) : NULL;
	if (!e) {
		c->co_len = 0;
		pthread_mutex_unlock(&c->lock);
		return;
	}
	/* co_buf is the recv thread's own: no copy */
	output_deliver(c, e, c->co_id, c->co_type == WIRE_STDERR, c->co_buf, c->co_len);
	pthread_mutex_lock(&c->lock);
	c->co_len = 0;
	pthread_mutex_unlock(&c->lock);
}

static void handle_output(struct agentless_conn *c, const struct wire_header *h, const uint8_t *p,
			  size_t len)
{
	bool is_stderr = h->type == WIRE_STDERR;
	agentless_charge_fn charge;
	struct stream_buf *s;
	struct exec *e;
	void *opaque;
	bool paid = true;
	int rc;

	pthread_mutex_lock(&c->lock);
	e = conn_exec_find(c, h->id);
	if (!e) {
		bool abandoned = conn_is_abandoned(c, h->id);
		bool dropped = abandoned && conn_unsolicited_ok_locked(c);

		pthread_mutex_unlock(&c->lock);
		if (!dropped)
			conn_violation(c, "output for %s exec id %u",
				       abandoned ? "(flooding) abandoned" : "unknown", h->id);
		return;
	}
	s = is_stderr ? &e->err : &e->out;
	charge = len > 0 && !s->full ? e->charge : NULL;
	opaque = e->opaque;
	if (charge) {
		/* kept valid as for on_output (output_deliver) */
		e->in_output = true;
		pthread_mutex_unlock(&c->lock);
		paid = charge(opaque, is_stderr, len);
		pthread_mutex_lock(&c->lock);
		e->in_output = false;
		pthread_cond_broadcast(&c->cond);
		if (!paid && !e->on_output)
			s->full = true; /* keep no more: truncated */
	}
	rc = stream_append(s, p, len);
	if (rc < 0) {
		pthread_mutex_unlock(&c->lock);
		conn_violation(c, "exec %u: %s past the cap the host asked for", h->id,
			       is_stderr ? "stderr" : "stdout");
		return;
	}
	if (!e->on_output || len == 0) {
		pthread_mutex_unlock(&c->lock);
		return;
	}
	/* gather back-to-back frames of one stream into one on_output call */
	if (c->co_len > 0 &&
	    (c->co_id != h->id || c->co_type != h->type || c->co_len + len > sizeof c->co_buf)) {
		pthread_mutex_unlock(&c->lock);
		exec_output_flush(c);
		pthread_mutex_lock(&c->lock);
		if (conn_exec_find(c, h->id) != e) { /* ended meanwhile */
			pthread_mutex_unlock(&c->lock);
			return;
		}
	}
	if (len > sizeof c->co_buf) {
		output_deliver(c, e, h->id, is_stderr, p, len); /* unlocks */
		return;
	}
	memcpy(c->co_buf + c->co_len, p, len);
	c->co_len += len;
	c->co_id = h->id;
	c->co_type = h->type;
	pthread_mutex_unlock(&c->lock);
}

/* Take the in-flight exec a final frame (EXIT, ERROR) names. NULL when
 * there is none: a frame for an exec the host gave up on is dropped, any
 * other is a protocol violation. */
static struct exec *conn_exec_finish(struct agentless_conn *c, uint32_t id, const char *what)
{
	struct exec *e;

	pthread_mutex_lock(&c->lock);
	e = conn_exec_take(c, id);
	if (!e) {
		bool abandoned = conn_is_abandoned(c, id);
		bool dropped = abandoned && conn_unsolicited_ok_locked(c);

		pthread_mutex_unlock(&c->lock);
		if (!dropped)
			conn_violation(c, "%s for %s exec id %u", what,
				       abandoned ? "(flooding) abandoned" : "unknown", id);
		return NULL;
	}
	pthread_mutex_unlock(&c->lock);
	return e;
}

static void handle_exit(struct agentless_conn *c, const struct wire_header *h, const uint8_t *p,
			size_t len)
{
	struct agentless_exec_result res;
	struct wire_reader r;
	struct wire_field f;
	uint32_t code = 0, duration = 0, timed_out = 0;
	uint64_t out_total = 0, err_total = 0;
	bool have_code = false;
	struct exec *e;
	int rc;

	wire_reader_init(&r, p, len);
	while ((rc = wire_next(&r, &f)) == 1) {
		int bad = 0;

		switch (f.tag) {
		case WIRE_T_EXIT_CODE:
			bad = wire_field_u32(&f, &code);
			have_code = true;
			break;
		case WIRE_T_DURATION_MS:
			bad = wire_field_u32(&f, &duration);
			break;
		case WIRE_T_TIMED_OUT:
			bad = wire_field_u32(&f, &timed_out);
			break;
		case WIRE_T_STDOUT_TOTAL:
			bad = wire_field_u64(&f, &out_total);
			break;
		case WIRE_T_STDERR_TOTAL:
			bad = wire_field_u64(&f, &err_total);
			break;
		default:
			break;
		}
		if (bad)
			rc = -1;
		if (rc < 0)
			break;
	}

	e = conn_exec_finish(c, h->id, "EXIT");
	if (!e)
		return;
	sbx_hist_observe_us(SBX_H_EXEC, (sbx_mono_ms() - e->started_ms) * 1000);
	if (e->proc_done)
		rc = -1; /* a PROC is answered by PROC_REPLY, never EXIT */

	/* The guest is hostile: an exit status is 0..255 (128+signal when
	 * killed), timed_out a flag; anything else is a forged frame. */
	if (code > 255 || timed_out > 1)
		rc = -1;
	if (rc < 0 || !have_code) {
		/* put nothing back: conn_violation fails the rest, we fail this */
		struct sbx_error err;

		sbx_error_set(&err, SBX_E_SANDBOX_ERROR, NULL, MSG_VIOLATION);
		exec_fail_one(e, &err);
		exec_free(e);
		conn_violation(c, "malformed EXIT for exec %u", h->id);
		return;
	}

	memset(&res, 0, sizeof(res));
	/* shipped bytes (kept, or only counted when streamed) */
	uint64_t out_shipped = e->out.shipped, err_shipped = e->err.shipped;
	/* a stream cut by its charge lacks the bytes shipped after it */
	uint64_t out_kept = e->out.count_only ? out_shipped : e->out.len;
	uint64_t err_kept = e->err.count_only ? err_shipped : e->err.len;

	res.stdout_buf = stream_steal(&e->out, &res.stdout_len);
	res.stderr_buf = stream_steal(&e->err, &res.stderr_len);
	res.exit_code = (int)(int32_t)code;
	/* The guest's own measure, but never longer than the host saw the
	 * exec run (plus a second for clock noise). */
	int64_t seen = sbx_mono_ms() - e->started_ms + 1000;
	res.duration_ms = (int64_t)duration > seen ? (uint32_t)seen : duration;
	/* The host's own measure; the caller clamps it to the timeout. */
	res.host_ms = (uint32_t)SBX_MIN(sbx_mono_ms() - e->started_ms, (int64_t)UINT32_MAX);
	res.timed_out = timed_out != 0;
	/* never report fewer bytes than we hold */
	res.stdout_total = SBX_MAX(out_total, out_shipped);
	res.stderr_total = SBX_MAX(err_total, err_shipped);
	res.truncated = res.stdout_total > out_kept || res.stderr_total > err_kept;
	e->done(e->opaque, &res, NULL);
	exec_free(e);
}

static void handle_proc_reply(struct agentless_conn *c, const struct wire_header *h,
			      const uint8_t *p, size_t len)
{
	struct exec *e = conn_exec_finish(c, h->id, "PROC_REPLY");
	struct sbx_error err;

	if (!e)
		return;
	if (!e->proc_done) {
		sbx_error_set(&err, SBX_E_SANDBOX_ERROR, NULL, MSG_VIOLATION);
		exec_fail_one(e, &err);
		exec_free(e);
		conn_violation(c, "PROC_REPLY for exec %u", h->id);
		return;
	}
	/* the payload is checked by the caller, which knows its op */
	e->proc_done(e->opaque, p, len, NULL);
	exec_free(e);
}

static bool param_known(const char *param)
{
	static const char *const known[] = {"command", "cwd", "env", "timeout_ms", "pid", "signal"};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(known); i++)
		if (strcmp(param, known[i]) == 0)
			return true;
	return false;
}

int conn_error_parse(const uint8_t *p, size_t len, uint32_t *kind, char *param, size_t param_len,
		     char *msg, size_t msg_len)
{
	struct wire_reader r;
	struct wire_field f;
	bool have_kind = false;
	int rc;

	wire_reader_init(&r, p, len);
	while ((rc = wire_next(&r, &f)) == 1) {
		if (f.tag == WIRE_T_ERROR_KIND) {
			if (wire_field_u32(&f, kind) < 0)
				return -1;
			have_kind = true;
		} else if (f.tag == WIRE_T_PARAM && param) {
			sanitize_text(f.value, f.len, param, param_len);
		} else if (f.tag == WIRE_T_MESSAGE && msg) {
			sanitize_text(f.value, f.len, msg, msg_len);
		}
	}
	return rc < 0 || !have_kind ? -1 : 0;
}

static void handle_error(struct agentless_conn *c, const struct wire_header *h, const uint8_t *p,
			 size_t len)
{
	uint32_t kind = 0;
	char param[32] = "";
	char msg[GUEST_TEXT_MAX + 1] = "";
	struct sbx_error err;
	struct exec *e;
	int rc;

	rc = conn_error_parse(p, len, &kind, param, sizeof param, msg, sizeof msg);

	e = conn_exec_finish(c, h->id, "ERROR");
	if (!e)
		return;

	if (rc < 0) {
		sbx_error_set(&err, SBX_E_SANDBOX_ERROR, NULL, MSG_VIOLATION);
		exec_fail_one(e, &err);
		exec_free(e);
		conn_violation(c, "malformed ERROR for exec %u", h->id);
		return;
	}

	switch (kind) {
	case WIRE_ERR_CWD:
		sbx_error_set(&err, SBX_E_INVALID_REQUEST, "cwd",
			      "cwd '%s' does not exist or is not a directory in the sandbox",
			      e->cwd);
		break;
	case WIRE_ERR_BAD_REQUEST:
		sbx_error_set(&err, SBX_E_INVALID_REQUEST, param_known(param) ? param : NULL,
			      "the sandbox refused the command: %s",
			      msg[0] ? msg : "malformed request");
		break;
	case WIRE_ERR_BUSY:
		sbx_error_set(&err, SBX_E_RATE_LIMITED, NULL,
			      "the sandbox is running too many commands at once; retry shortly");
		err.retry_after_s = 1;
		break;
	case WIRE_ERR_SPAWN:
		sbx_error_set(&err, SBX_E_SANDBOX_ERROR, NULL,
			      "the sandbox could not start the command: %s",
			      msg[0] ? msg : "spawn failed");
		break;
	case WIRE_ERR_NO_PROCESS:
		sbx_error_set(&err, SBX_E_NOT_FOUND, NULL, "no such process in the sandbox");
		break;
	default:
		sbx_error_set(&err, SBX_E_SANDBOX_ERROR, NULL,
			      "the sandbox could not run the command");
		break;
	}
	sbx_debug(MOD, "exec %u refused by the guest (kind %u): %s", h->id, kind, msg);
	exec_fail_one(e, &err);
	exec_free(e);
}

/* One frame of an exec or a PROC request: true when handled here. Recv
 * thread, no lock held. */
bool exec_frame(struct agentless_conn *c, const struct wire_header *h, const uint8_t *p, size_t len)
{
	switch (h->type) {
	case WIRE_STDOUT:
	case WIRE_STDERR:
		handle_output(c, h, p, len);
		return true;
	case WIRE_EXIT:
		handle_exit(c, h, p, len);
		return true;
	case WIRE_ERROR:
		handle_error(c, h, p, len);
		return true;
	case WIRE_PROC_REPLY:
		handle_proc_reply(c, h, p, len);
		return true;
	case WIRE_PTY_ACK:
		pty_ack_frame(c, h, p, len);
		return true;
	default:
		return false;
	}
}

void agentless_exec_result_release(struct agentless_exec_result *r)
{
	if (!r)
		return;
	free(r->stdout_buf);
	free(r->stderr_buf);
	memset(r, 0, sizeof(*r));
}

/* Encoded EXEC payload size, or SIZE_MAX past WIRE_MAX_PAYLOAD. */
static size_t exec_payload_size(const struct agentless_exec_req *req)
{
	size_t n = 6 + req->command_len + 6 + strlen(req->cwd) + 4 * (6 + 4);

	if (req->stdin_data)
		n += 6 + SBX_MIN(req->stdin_len, (size_t)WIRE_MAX_PAYLOAD + 1);
	if (req->user)
		n += 6 + strlen(req->user);
	if (req->pty_rows)
		n += 2 * (6 + 4);
	if (req->command_len > WIRE_MAX_PAYLOAD || n > WIRE_MAX_PAYLOAD)
		return SIZE_MAX;
	for (size_t i = 0; i < req->n_env; i++) {
		n += 6 + strlen(req->env[i]);
		if (n > WIRE_MAX_PAYLOAD)
			return SIZE_MAX;
	}
	return n;
}

/* Put e in flight and send its frame: the channel must be up, the guest
 * must speak `need_version` (`too_old` says what an older one cannot do)
 * and max_inflight not be reached; e gets a fresh id and its backstop at
 * timeout_ms + backstop_grace_ms. 0: e's callback will run; -1 with err:
 * e was freed and no callback runs. */
static int conn_launch(struct agentless_conn *c, struct exec *e, uint8_t type, const void *payload,
		       size_t len, uint32_t timeout_ms, uint32_t need_version, const char *too_old,
		       struct sbx_error *err)
{
	uint32_t id;

	pthread_mutex_lock(&c->lock);
	if (!c->have_ch || c->ch_eof || c->broken || !c->ready) {
		char msg[sizeof c->broken_msg];

		snprintf(msg, sizeof msg, "%s", c->broken_msg[0] ? c->broken_msg : MSG_GONE);
		pthread_mutex_unlock(&c->lock);
		exec_free(e);
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "%s", msg);
	}
	if (c->version < need_version && c->version_assumed &&
	    sbx_mono_ms() < c->assumed_until_ms) {
		/* the guest's HELLO (it says one whenever a host connects)
		 * will tell its real version in a moment */
		pthread_mutex_unlock(&c->lock);
		exec_free(e);
		sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
			      "the sandbox's guest is reconnecting; retry in a second");
		if (err)
			err->retry_after_s = 1;
		return -1;
	}
	if (c->version < need_version) {
		uint32_t v = c->version;

		pthread_mutex_unlock(&c->lock);
		exec_free(e);
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL,
				     "this sandbox's guest speaks exec protocol v%u, which cannot "
				     "%s (v%u); create a new sandbox",
				     v, too_old, need_version);
	}
	if (c->ping_window && len > WIN_FRAME_MAX) {
		uint32_t v = c->version;

		pthread_mutex_unlock(&c->lock);
		exec_free(e);
		return sbx_error_set(
		    err, SBX_E_SANDBOX_ERROR, NULL,
		    "this sandbox's guest speaks exec protocol v%u, which cannot "
		    "take a request of more than %u KiB over this host's transport "
		    "(v4); create a new sandbox",
		    v, WIN_FRAME_MAX / 1024);
	}
	if (c->n_execs >= c->lim.max_inflight) {
		pthread_mutex_unlock(&c->lock);
		exec_free(e);
		sbx_error_set(err, SBX_E_RATE_LIMITED, NULL,
			      "too many commands are running in this sandbox at once (limit %u)",
			      c->lim.max_inflight);
		if (err)
			err->retry_after_s = 1;
		return -1;
	}
	/* ids are never 0 and never reused while in flight */
	do {
		id = c->next_id++;
		if (c->next_id == 0)
			c->next_id = 1;
	} while (id == 0 || conn_id_used_locked(c, id));
	e->id = id;
	if (e->id_out)
		*e->id_out = id;
	e->started_ms = sbx_mono_ms();
	e->deadline_ms = e->started_ms + (int64_t)timeout_ms + c->lim.backstop_grace_ms;
	/* in the table before the frame leaves, so a fast reply finds it */
	e->next = c->execs;
	c->execs = e;
	c->n_execs++;
	pthread_mutex_unlock(&c->lock);

	if (conn_send(c, type, id, payload, len) == 0)
		return 0;

	/* not sent: unless someone already failed it (and called its
	 * callback), take it back and report the error to the caller. A
	 * hostile guest may have guessed the id and be inside its on_output
	 * on the recv thread right now: wait for that call to return (it
	 * never blocks), so that neither e nor the caller's opaque is used
	 * once we return -1. */
	pthread_mutex_lock(&c->lock);
	e = conn_exec_take(c, id);
	if (e) {
		conn_abandon(c, id);
		while (e->in_output)
			pthread_cond_wait(&c->cond, &c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	if (!e)
		return 0;
	exec_free(e);
	return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, MSG_GONE);
}

int agentless_exec_start(struct agentless_conn *c, const struct agentless_exec_req *req,
			 agentless_exec_done_fn done, void *opaque, struct sbx_error *err)
{
	_cleanup_free_ uint8_t *payload = NULL;
	struct wire_writer w;
	struct exec *e;
	size_t size;

	bool pty = req && (req->pty_rows || req->pty_cols);

	if (!req || !done || (!req->command && req->command_len) || !req->cwd ||
	    (req->n_env && !req->env) ||
	    (pty &&
	     (!req->on_output || req->pty_rows < 1 || req->pty_cols < 1 ||
	      req->pty_rows > AGENTLESS_PTY_DIM_MAX || req->pty_cols > AGENTLESS_PTY_DIM_MAX)))
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "bad exec request");
	size = exec_payload_size(req);
	if (size == SIZE_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "command",
				     "the command, cwd, env and stdin together exceed %d bytes",
				     WIRE_MAX_PAYLOAD);
	payload = xcalloc(1, size);
	wire_writer_init(&w, payload, size);
	wire_put_bytes(&w, WIRE_T_COMMAND, req->command, req->command_len);
	wire_put_str(&w, WIRE_T_CWD, req->cwd);
	for (size_t i = 0; i < req->n_env; i++)
		wire_put_str(&w, WIRE_T_ENV, req->env[i]);
	wire_put_u32(&w, WIRE_T_TIMEOUT_MS, req->timeout_ms);
	wire_put_u32(&w, WIRE_T_STDOUT_CAP, req->stdout_cap);
	wire_put_u32(&w, WIRE_T_STDERR_CAP, req->stderr_cap);
	if (req->stdin_data)
		wire_put_bytes(&w, WIRE_T_STDIN, req->stdin_data, req->stdin_len);
	if (req->user)
		wire_put_str(&w, WIRE_T_USER, req->user);
	/* a v1/v2 guest skips the tag and batches: later, never wrong */
	if (req->on_output)
		wire_put_u32(&w, WIRE_T_STREAM, 1);
	if (pty) {
		wire_put_u32(&w, WIRE_T_ROWS, req->pty_rows);
		wire_put_u32(&w, WIRE_T_COLS, req->pty_cols);
	}
	if (w.overflow)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "exec request encoding overflow");

	e = xcalloc(1, sizeof(*e));
	e->done = done;
	e->on_output = req->on_output;
	e->charge = req->charge;
	e->opaque = opaque;
	stream_init(&e->out, pty ? UINT64_MAX : req->stdout_cap);
	stream_init(&e->err, pty ? 0 : req->stderr_cap);
	e->out.count_only = e->err.count_only = req->on_output != NULL;
	e->pty = pty;
	e->on_pty_ack = req->on_pty_ack;
	e->id_out = req->id_out;
	sanitize_text(req->cwd, strlen(req->cwd), e->cwd, sizeof e->cwd);

	return conn_launch(c, e, WIRE_EXEC, payload, w.len, req->timeout_ms,
			   pty				  ? 5
			   : req->stdin_data || req->user ? 2
							  : 1,
			   pty	       ? "open a terminal"
			   : req->user ? "pass a user"
				       : "pass stdin",
			   err);
}

void agentless_exec_resume(struct agentless_conn *c, uint32_t exec_id)
{
	struct exec *e;
	bool send;

	pthread_mutex_lock(&c->lock);
	e = conn_exec_find(c, exec_id);
	if (e && e->in_output) {
		e->resume_wanted = true; /* handle_output sends it */
		pthread_mutex_unlock(&c->lock);
		return;
	}
	send = e && e->paused && c->ready && !c->broken;
	if (send)
		e->paused = false;
	pthread_mutex_unlock(&c->lock);
	if (send)
		conn_send(c, WIRE_RESUME, exec_id, NULL, 0);
}

int agentless_proc_call(struct agentless_conn *c, const void *payload, size_t len,
			uint32_t timeout_ms, agentless_proc_done_fn done, void *opaque,
			struct sbx_error *err)
{
	struct exec *e;

	if (!done || len > WIRE_MAX_PAYLOAD)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, NULL,
				     "the request exceeds %d bytes", WIRE_MAX_PAYLOAD);
	e = xcalloc(1, sizeof(*e));
	e->proc_done = done;
	e->opaque = opaque;
	stream_init(&e->out, 0); /* output for a PROC id is a violation */
	stream_init(&e->err, 0);
	return conn_launch(c, e, WIRE_PROC, payload, len, timeout_ms, 3, "run background processes",
			   err);
}

struct sync_exec {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	struct agentless_exec_result res;
	struct sbx_error err;
	bool failed;
};

static void sync_exec_done(void *opaque, struct agentless_exec_result *res,
			   const struct sbx_error *err)
{
	struct sync_exec *s = opaque;

	pthread_mutex_lock(&s->lock);
	if (res) {
		s->res = *res;
		memset(res, 0, sizeof(*res));
	} else {
		s->failed = true;
		if (err)
			s->err = *err;
	}
	s->done = true;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

int agentless_exec(struct agentless_conn *c, const struct agentless_exec_req *req,
		   struct agentless_exec_result *res, struct sbx_error *err)
{
	struct sync_exec s;
	pthread_condattr_t attr;
	int rc = 0;

	memset(&s, 0, sizeof(s));
	pthread_mutex_init(&s.lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&s.cond, &attr);
	pthread_condattr_destroy(&attr);

	if (agentless_exec_start(c, req, sync_exec_done, &s, err) < 0) {
		rc = -1;
		goto out_destroy;
	}
	pthread_mutex_lock(&s.lock);
	while (!s.done) {
		struct timespec ts;

		/* tick ourselves, so the backstop holds without a timer thread */
		ts = sbx_timespec_in(CLOCK_MONOTONIC, 250);
		if (pthread_cond_timedwait(&s.cond, &s.lock, &ts) == ETIMEDOUT && !s.done) {
			pthread_mutex_unlock(&s.lock);
			agentless_conn_tick(c, sbx_mono_ms());
			pthread_mutex_lock(&s.lock);
		}
	}
	pthread_mutex_unlock(&s.lock);
	if (s.failed) {
		if (err)
			*err = s.err;
		rc = -1;
	} else {
		*res = s.res;
	}
out_destroy:
	pthread_cond_destroy(&s.cond);
	pthread_mutex_destroy(&s.lock);
	return rc;
}

void agentless_conn_tick(struct agentless_conn *c, int64_t now_ms)
{
	uint32_t kill_ids[64];
	size_t n_kill = 0;
	struct exec *failed = NULL, **pp;
	struct sbx_error err;

	pthread_mutex_lock(&c->lock);
	pp = &c->execs;
	while (*pp) {
		struct exec *e = *pp;

		if (now_ms < e->deadline_ms || e->in_output) {
			pp = &e->next;
			continue;
		}
		if (!e->killed && n_kill < SBX_ARRAY_SIZE(kill_ids)) {
			e->killed = true;
			e->deadline_ms = now_ms + c->lim.backstop_grace_ms;
			kill_ids[n_kill++] = e->id;
			pp = &e->next;
			continue;
		}
		if (!e->killed) { /* KILL batch full: next tick */
			pp = &e->next;
			continue;
		}
		*pp = e->next;
		c->n_execs--;
		conn_abandon(c, e->id);
		e->next = failed;
		failed = e;
	}
	pthread_mutex_unlock(&c->lock);

	for (size_t i = 0; i < n_kill; i++) {
		sbx_warn(MOD, "exec %u missed its deadline: sending KILL", kill_ids[i]);
		conn_send(c, WIRE_KILL, kill_ids[i], NULL, 0);
	}
	xfer_tick(c, now_ms);
	tcp_tick(c, now_ms);
	if (failed) {
		sbx_warn(MOD, "giving up on execs the guest did not finish after KILL");
		sbx_error_set(&err, SBX_E_SANDBOX_ERROR, NULL,
			      "the command did not finish by its deadline and the guest did "
			      "not answer");
		execs_fail(failed, &err);
	}
}

int agentless_exec_set_deadline(struct agentless_conn *c, const void *opaque, int64_t deadline_ms)
{
	int rc = -1;

	pthread_mutex_lock(&c->lock);
	for (struct exec *e = c->execs; e; e = e->next)
		if (e->opaque == opaque && !e->killed) {
			e->deadline_ms = deadline_ms;
			rc = 0;
			break;
		}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

unsigned agentless_conn_inflight(struct agentless_conn *c)
{
	unsigned n;

	pthread_mutex_lock(&c->lock);
	n = c->n_execs;
	pthread_mutex_unlock(&c->lock);
	return n;
}
