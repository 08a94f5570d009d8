/* agentless/process.c: the host side of background processes (protocol v3,
 * WIRE_PROC in wire.h): encode one request, decode the guest's PROC_REPLY.
 * The guest is hostile: pids, offsets, lengths, flags and exit codes are
 * bounded and cross-checked, and a reply that does not add up fails the
 * call with SBX_E_SANDBOX_ERROR, never a crash or an overread. No state is
 * kept per process (the guest keeps it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentless/agentless.h"
#include "agentless/wire.h"

#define MOD	     "agentless"
#define MSG_NONSENSE "the sandbox's guest answered a process request with nonsense"

_Static_assert((int)AGENTLESS_PROC_START == (int)WIRE_PROC_START &&
		   (int)AGENTLESS_PROC_SIGNAL == (int)WIRE_PROC_SIGNAL,
	       "the ops are the wire's");

struct proc_call {
	agentless_proc_result_fn done;
	void *opaque;
	struct agentless_proc_req req; /* its pointers are not kept */
};

void agentless_proc_result_release(struct agentless_proc_result *r)
{
	if (!r)
		return;
	free(r->list);
	free(r->out.data);
	free(r->err.data);
	memset(r, 0, sizeof(*r));
}

/* ------------------------------------------------------------- decoding */

static int64_t ns_to_ms(uint64_t ns)
{
	return (int64_t)(ns / 1000000u);
}

/* One process of a LIST, or the head of an OUTPUT/START reply. */
static int info_decode(const uint8_t *p, size_t len, struct agentless_proc_info *info)
{
	struct wire_reader rd;
	struct wire_field f;
	uint32_t running = 0, code = 0;
	uint64_t ns = 0;
	bool have_pid = false;
	int rc;

	memset(info, 0, sizeof(*info));
	wire_reader_init(&rd, p, len);
	while ((rc = wire_next(&rd, &f)) == 1) {
		int bad = 0;

		switch (f.tag) {
		case WIRE_T_PID:
			bad = wire_field_u32(&f, &info->pid);
			have_pid = true;
			break;
		case WIRE_T_COMMAND:
			info->command_len = SBX_MIN((size_t)f.len, (size_t)AGENTLESS_PROC_CMD_HEAD);
			memcpy(info->command, f.value, info->command_len);
			info->command[info->command_len] = '\0';
			break;
		case WIRE_T_TIME_NS:
			bad = wire_field_u64(&f, &ns);
			break;
		case WIRE_T_RUNNING:
			bad = wire_field_u32(&f, &running) || running > 1;
			break;
		case WIRE_T_EXIT_CODE:
			bad = wire_field_u32(&f, &code) || code > 255;
			break;
		default:
			break;
		}
		if (bad)
			return -1;
	}
	if (rc < 0 || !have_pid || info->pid <= 1)
		return -1;
	info->started_at_ms = ns_to_ms(ns);
	info->running = running == 1;
	info->exit_code = (int)code;
	return 0;
}

static int list_decode(const uint8_t *p, size_t len, struct agentless_proc_result *res)
{
	struct wire_reader rd;
	struct wire_field f;
	int rc;

	res->list = calloc(AGENTLESS_PROC_MAX, sizeof(*res->list));
	if (!res->list)
		return -1;
	wire_reader_init(&rd, p, len);
	while ((rc = wire_next(&rd, &f)) == 1) {
		if (f.tag != WIRE_T_PROC_ENTRY)
			continue;
		if (res->n_list == AGENTLESS_PROC_MAX ||
		    info_decode(f.value, f.len, &res->list[res->n_list]) < 0)
			return -1;
		res->n_list++;
	}
	return rc < 0 ? -1 : 0;
}

/* One stream of an OUTPUT reply, checked against the offset asked for:
 * the data starts there, or (the ring wrapped) at the oldest byte kept,
 * or at the end (asked past it); it never runs past the end. */
static int stream_check(struct agentless_proc_stream *s, uint64_t asked, const uint8_t *data,
			size_t len)
{
	bool at_ask = s->offset == asked;
	bool wrapped = asked < s->offset && s->end >= AGENTLESS_PROC_RING &&
		       s->offset == s->end - AGENTLESS_PROC_RING;
	bool past = asked > s->end && s->offset == s->end;

	if (len > AGENTLESS_PROC_CHUNK || s->offset > s->end || len > s->end - s->offset ||
	    !(at_ask || wrapped || past))
		return -1;
	s->lost = wrapped ? s->offset - asked : 0;
	s->data = malloc(len + 1);
	if (!s->data)
		return -1;
	memcpy(s->data, data ? data : (const uint8_t *)"", len);
	s->data[len] = '\0';
	s->len = len;
	return 0;
}

static int output_decode(const uint8_t *p, size_t len, const struct agentless_proc_req *req,
			 struct agentless_proc_result *res)
{
	struct wire_reader rd;
	struct wire_field f;
	const uint8_t *d[2] = {NULL, NULL};
	size_t dl[2] = {0, 0};
	bool have[2] = {false, false};
	int rc;

	if (info_decode(p, len, &res->info) < 0 || res->info.pid != req->pid)
		return -1;
	wire_reader_init(&rd, p, len);
	while ((rc = wire_next(&rd, &f)) == 1) {
		int bad = 0;

		switch (f.tag) {
		case WIRE_T_OUT_OFFSET:
			bad = wire_field_u64(&f, &res->out.offset);
			have[0] = true;
			break;
		case WIRE_T_ERR_OFFSET:
			bad = wire_field_u64(&f, &res->err.offset);
			have[1] = true;
			break;
		case WIRE_T_OUT_END:
			bad = wire_field_u64(&f, &res->out.end);
			break;
		case WIRE_T_ERR_END:
			bad = wire_field_u64(&f, &res->err.end);
			break;
		case WIRE_T_OUT_DATA:
			d[0] = f.value;
			dl[0] = f.len;
			break;
		case WIRE_T_ERR_DATA:
			d[1] = f.value;
			dl[1] = f.len;
			break;
		default:
			break;
		}
		if (bad)
			return -1;
	}
	if (rc < 0 || !have[0] || !have[1])
		return -1;
	if (stream_check(&res->out, req->stdout_offset, d[0], dl[0]) < 0 ||
	    stream_check(&res->err, req->stderr_offset, d[1], dl[1]) < 0)
		return -1;
	return 0;
}

static int reply_decode(const struct agentless_proc_req *req, const uint8_t *p, size_t len,
			struct agentless_proc_result *res)
{
	struct wire_reader rd;
	struct wire_field f;
	int rc;

	switch (req->op) {
	case AGENTLESS_PROC_START:
		return info_decode(p, len, &res->info);
	case AGENTLESS_PROC_LIST:
		return list_decode(p, len, res);
	case AGENTLESS_PROC_OUTPUT:
		return output_decode(p, len, req, res);
	case AGENTLESS_PROC_STDIN:
		wire_reader_init(&rd, p, len);
		while ((rc = wire_next(&rd, &f)) == 1)
			if (f.tag == WIRE_T_WRITTEN &&
			    (wire_field_u32(&f, &res->written) < 0 || res->written > req->data_len))
				return -1;
		return rc < 0 ? -1 : 0;
	case AGENTLESS_PROC_SIGNAL:
		return info_decode(p, len, &res->info);
	}
	return -1;
}

static void proc_reply(void *opaque, const uint8_t *payload, size_t len,
		       const struct sbx_error *aerr)
{
	struct proc_call *call = opaque;
	struct agentless_proc_result res;
	struct sbx_error err;

	memset(&res, 0, sizeof(res));
	if (!payload) {
		call->done(call->opaque, NULL, aerr);
	} else if (reply_decode(&call->req, payload, len, &res) < 0) {
		sbx_warn(MOD, "malformed PROC_REPLY (op %d, %zu bytes)", (int)call->req.op, len);
		agentless_proc_result_release(&res);
		sbx_error_set(&err, SBX_E_SANDBOX_ERROR, NULL, MSG_NONSENSE);
		call->done(call->opaque, NULL, &err);
	} else {
		call->done(call->opaque, &res, NULL);
	}
	free(call);
}

/* ------------------------------------------------------------- encoding */

static uint8_t *start_encode(const struct agentless_proc_req *x, size_t *len)
{
	const char *cwd = x->cwd ? x->cwd : "/home/sandbox";
	size_t n = 4 * (6 + 4) + 6 + x->command_len + 6 + strlen(cwd) +
		   (x->user ? 6 + strlen(x->user) : 0);
	struct wire_writer w;
	uint8_t *p;

	for (size_t i = 0; i < x->n_env; i++)
		n += 6 + strlen(x->env[i]);
	if (n > WIRE_MAX_PAYLOAD || !(p = malloc(n)))
		return NULL;
	wire_writer_init(&w, p, n);
	wire_put_u32(&w, WIRE_T_PROC_OP, WIRE_PROC_START);
	wire_put_bytes(&w, WIRE_T_COMMAND, x->command, x->command_len);
	wire_put_str(&w, WIRE_T_CWD, cwd);
	for (size_t i = 0; i < x->n_env; i++)
		wire_put_str(&w, WIRE_T_ENV, x->env[i]);
	if (x->has_timeout)
		wire_put_u32(&w, WIRE_T_TIMEOUT_MS, x->timeout_ms);
	wire_put_u32(&w, WIRE_T_MAX_PROCS, x->max_procs);
	if (x->user)
		wire_put_str(&w, WIRE_T_USER, x->user);
	if (w.overflow) {
		free(p);
		return NULL;
	}
	*len = w.len;
	return p;
}

static uint8_t *req_encode(const struct agentless_proc_req *req, size_t *len, struct sbx_error *err)
{
	struct wire_writer w;
	size_t n = 64 + req->data_len;
	uint8_t *p;

	if (req->op == AGENTLESS_PROC_START) {
		p = start_encode(req, len);
		if (!p)
			sbx_error_set(err, SBX_E_INVALID_REQUEST, "command",
				      "the command, cwd and env together exceed %d bytes",
				      WIRE_MAX_PAYLOAD);
		return p;
	}
	p = malloc(n);
	if (!p) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		return NULL;
	}
	wire_writer_init(&w, p, n);
	wire_put_u32(&w, WIRE_T_PROC_OP, (uint32_t)req->op);
	if (req->op != AGENTLESS_PROC_LIST)
		wire_put_u32(&w, WIRE_T_PID, req->pid);
	if (req->op == AGENTLESS_PROC_OUTPUT) {
		wire_put_u64(&w, WIRE_T_OUT_OFFSET, req->stdout_offset);
		wire_put_u64(&w, WIRE_T_ERR_OFFSET, req->stderr_offset);
	} else if (req->op == AGENTLESS_PROC_STDIN) {
		if (req->data_len)
			wire_put_bytes(&w, WIRE_T_DATA, req->data, req->data_len);
		if (req->close)
			wire_put_u32(&w, WIRE_T_CLOSE, 1);
	} else if (req->op == AGENTLESS_PROC_SIGNAL) {
		wire_put_u32(&w, WIRE_T_SIGNAL, (uint32_t)req->signal);
	}
	*len = w.len;
	return p;
}

int agentless_proc(struct agentless_conn *c, const struct agentless_proc_req *req,
		   agentless_proc_result_fn done, void *opaque, struct sbx_error *err)
{
	_cleanup_free_ uint8_t *payload = NULL;
	struct proc_call *call;
	size_t len = 0;

	payload = req_encode(req, &len, err);
	if (!payload)
		return -1;
	call = calloc(1, sizeof(*call));
	if (!call)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	call->done = done;
	call->opaque = opaque;
	call->req = *req;
	call->req.command = call->req.cwd = call->req.user = call->req.data = NULL;
	call->req.env = NULL;
	if (agentless_proc_call(c, payload, len, req->answer_ms, proc_reply, call, err) < 0) {
		free(call);
		return -1;
	}
	return 0;
}
