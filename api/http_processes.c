/* api/http_processes.c: background processes (docs/api.md "Processes").
 *
 *   POST /v1/sandboxes/{id}/processes                 start -> 201 process
 *   GET  /v1/sandboxes/{id}/processes                 list
 *   GET  /v1/sandboxes/{id}/processes/{pid}/output    output since offsets
 *   POST /v1/sandboxes/{id}/processes/{pid}/stdin     write (and close)
 *   POST /v1/sandboxes/{id}/processes/{pid}/signal    TERM, KILL or INT
 *
 * Every call asks the guest (sandbox_proc_call). Like exec, no worker
 * thread waits for it: the handler parks the connection and the answer
 * (any thread) leaves the reply in the request (out_body) and resumes it;
 * http_async.c's answer sends it. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http-priv.h"

#define MOD "api"
/* Bytes of stdin one call may write (what one frame carries, with room). */
#define STDIN_MAX (64 * 1024)

/* ------------------------------------------------------------- encoding */

static struct json_object *text_encode(const char *s, size_t len, bool base64)
{
	struct json_object *o;
	char *enc;
	size_t n;

	if (base64) {
		enc = sbx_base64_encode(s, len);
		n = enc ? strlen(enc) : 0;
	} else {
		enc = sbx_utf8_sanitize(s, len, false, &n);
	}
	if (!enc)
		return NULL;
	o = json_object_new_string_len(enc, (int)n);
	free(enc);
	return o;
}

/* "status" and "exit_code" (null while running) of a process. */
static void state_add(struct json_object *o, const struct agentless_proc_info *info)
{
	json_object_object_add(o, "status",
			       json_object_new_string(info->running ? "running" : "exited"));
	json_object_object_add(o, "exit_code",
			       info->running ? NULL : json_object_new_int(info->exit_code));
}

static struct json_object *process_encode(const struct agentless_proc_info *p)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "object", json_object_new_string("process"));
	json_object_object_add(o, "pid", json_object_new_int64(p->pid));
	json_object_object_add(o, "command", text_encode(p->command, p->command_len, false));
	json_object_object_add(o, "started_at", api_time_encode(p->started_at_ms));
	state_add(o, p);
	return o;
}

/* One stream of an output reply. A UTF-8 character cut by the chunk's end
 * is left for the next call (its next offset points at it), unless the
 * process ended and these are its last bytes. */
static void output_stream_add(struct json_object *o, const char *name,
			      const struct agentless_proc_stream *s, bool base64, bool ended)
{
	char key[40];
	size_t len = s->len;

	if (!base64 && !(ended && s->offset + len == s->end))
		len -= api_utf8_incomplete_tail((const uint8_t *)s->data, len);
	json_object_object_add(o, name, text_encode(s->data, len, base64));
	snprintf(key, sizeof(key), "%s_offset", name);
	json_object_object_add(o, key, json_object_new_int64((int64_t)s->offset));
	snprintf(key, sizeof(key), "%s_next_offset", name);
	json_object_object_add(o, key, json_object_new_int64((int64_t)(s->offset + len)));
	snprintf(key, sizeof(key), "%s_lost_bytes", name);
	json_object_object_add(o, key, json_object_new_int64((int64_t)s->lost));
	snprintf(key, sizeof(key), "%s_total", name);
	json_object_object_add(o, key, json_object_new_int64((int64_t)s->end));
}

static struct json_object *result_encode(const struct req *r,
					 const struct agentless_proc_result *res, unsigned *status)
{
	struct json_object *o, *data;

	assert(api_on_mhd_thread()); /* never on the thread that answered */
	*status = 200;
	switch (r->route) {
	case R_PROCESSES:
		if (r->proc_op == SANDBOX_PROC_START) {
			struct agentless_proc_info info = res->info;

			/* the guest answers the pid; the command is the request's */
			info.command_len =
			    SBX_MIN(r->exec.req.command_len, (size_t)SANDBOX_PROC_CMD_HEAD);
			memcpy(info.command, r->exec.req.command, info.command_len);
			info.command[info.command_len] = '\0';
			*status = 201;
			return process_encode(&info);
		}
		o = json_object_new_object();
		data = json_object_new_array();
		for (size_t i = 0; i < res->n_list; i++)
			json_object_array_add(data, process_encode(&res->list[i]));
		json_object_object_add(o, "object", json_object_new_string("list"));
		json_object_object_add(o, "data", data);
		return o;
	case R_PROCESS_OUTPUT:
		o = json_object_new_object();
		json_object_object_add(o, "object", json_object_new_string("process_output"));
		json_object_object_add(o, "pid", json_object_new_int64(res->info.pid));
		state_add(o, &res->info);
		output_stream_add(o, "stdout", &res->out, r->exec.base64, !res->info.running);
		output_stream_add(o, "stderr", &res->err, r->exec.base64, !res->info.running);
		return o;
	case R_PROCESS_STDIN:
		o = json_object_new_object();
		json_object_object_add(o, "object", json_object_new_string("process_stdin"));
		json_object_object_add(o, "pid", json_object_new_int64(r->pid));
		json_object_object_add(o, "written", json_object_new_int64(res->written));
		json_object_object_add(
		    o, "closed",
		    json_object_new_boolean(r->proc_close && res->written == r->proc_data_len));
		return o;
	default:
		o = json_object_new_object();
		json_object_object_add(o, "object", json_object_new_string("process_signal"));
		json_object_object_add(o, "pid", json_object_new_int64(r->pid));
		json_object_object_add(o, "signal", json_object_new_string(r->proc_signal_name));
		/* a process that had already exited got nothing */
		json_object_object_add(o, "sent", json_object_new_boolean(res->info.running));
		state_add(o, &res->info);
		return o;
	}
}

/* sandbox_proc_done_fn: any thread, no lock held. Only delivers. */
static void proc_done(void *opaque, struct agentless_proc_result *res, const struct sbx_error *err)
{
	api_complete(opaque, NULL, NULL, res, err);
}

enum MHD_Result api_processes_answer(struct req *r)
{
	struct api_server *srv = r->srv;
	struct api_completion done;
	enum exec_state state;
	struct sbx_error err;
	struct json_object *o;
	unsigned status = 500;

	assert(api_on_mhd_thread());
	api_req_slot_put(r); /* the account may make another call */
	pthread_mutex_lock(&srv->lock);
	state = r->state;
	done = r->done;
	memset(&r->done, 0, sizeof(r->done));
	err = r->exec_err;
	pthread_mutex_unlock(&srv->lock);
	if (state == EXEC_ABORTED) {
		api_completion_release(&done);
		sbx_error_clear(&err);
		sbx_error_set(&err, SBX_E_SERVICE_UNAVAILABLE, NULL,
			      "the service is shutting down; retry on the restarted service");
		err.retry_after_s = 5;
		return api_reply_error(r->conn, &err);
	}
	if (!done.has_proc)
		return api_reply_error(r->conn, &err);
	o = result_encode(r, &done.proc, &status);
	api_completion_release(&done);
	return api_reply_json(r->conn, status, o, 0, NULL);
}

/* ------------------------------------------------------------- decoding */

static int u64_arg(struct MHD_Connection *c, const char *name, uint64_t *out, struct sbx_error *err)
{
	const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
	char *end;

	*out = 0;
	if (!v)
		return 0;
	errno = 0;
	*out = strtoull(v, &end, 10);
	if (v[0] < '0' || v[0] > '9' || *end || errno || strlen(v) > 19)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, name,
				     "%s must be a non-negative integer (a byte offset)", name);
	return 0;
}

static int output_decode(struct req *r, struct sandbox_proc_req *pr, struct sbx_error *err)
{
	const char *enc = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "encoding");

	if (enc && strcmp(enc, "base64") != 0 && strcmp(enc, "utf-8") != 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "encoding",
				     "encoding must be \"utf-8\" or \"base64\"");
	r->exec.base64 = enc && strcmp(enc, "base64") == 0;
	if (u64_arg(r->conn, "stdout_offset", &pr->stdout_offset, err) < 0 ||
	    u64_arg(r->conn, "stderr_offset", &pr->stderr_offset, err) < 0)
		return -1;
	return 0;
}

/* {"data": string, "encoding"?: "utf-8"|"base64", "close"?: bool} */
static int stdin_decode(struct req *r, struct sandbox_proc_req *pr, struct sbx_error *err)
{
	struct json_object *o = api_json_parse_object(r->body.data, r->body.len, err), *v;
	const char *data = "";
	size_t len = 0;
	bool base64 = false;
	int rc = -1;

	if (!o)
		return -1;
	json_object_object_foreach(o, key, val)
	{
		(void)val;
		if (strcmp(key, "data") != 0 && strcmp(key, "encoding") != 0 &&
		    strcmp(key, "close") != 0) {
			sbx_error_set(err, SBX_E_INVALID_REQUEST, key, "unknown field '%.40s'",
				      key);
			goto out;
		}
	}
	if (json_object_object_get_ex(o, "encoding", &v)) {
		const char *e =
		    json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";
		if (strcmp(e, "base64") != 0 && strcmp(e, "utf-8") != 0) {
			sbx_error_set(err, SBX_E_INVALID_REQUEST, "encoding",
				      "encoding must be \"utf-8\" or \"base64\"");
			goto out;
		}
		base64 = strcmp(e, "base64") == 0;
	}
	if (json_object_object_get_ex(o, "close", &v)) {
		if (!json_object_is_type(v, json_type_boolean)) {
			sbx_error_set(err, SBX_E_INVALID_REQUEST, "close",
				      "close must be a boolean");
			goto out;
		}
		r->proc_close = json_object_get_boolean(v);
	}
	if (json_object_object_get_ex(o, "data", &v)) {
		if (!json_object_is_type(v, json_type_string)) {
			sbx_error_set(err, SBX_E_INVALID_REQUEST, "data", "data must be a string");
			goto out;
		}
		data = json_object_get_string(v);
		len = (size_t)json_object_get_string_len(v);
	} else if (!r->proc_close) {
		sbx_error_set(err, SBX_E_INVALID_REQUEST, "data", "data (or close) is required");
		goto out;
	}
	if (base64) {
		r->proc_data = sbx_base64_decode(data, len, &r->proc_data_len);
		if (!r->proc_data) {
			sbx_error_set(err, SBX_E_INVALID_REQUEST, "data",
				      "data is not valid base64");
			goto out;
		}
	} else {
		r->proc_data = malloc(len + 1);
		if (!r->proc_data) {
			sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
			goto out;
		}
		memcpy(r->proc_data, data, len);
		r->proc_data_len = len;
	}
	if (r->proc_data_len > STDIN_MAX) {
		sbx_error_set(err, SBX_E_INVALID_REQUEST, "data",
			      "data carries at most %d bytes per call", STDIN_MAX);
		goto out;
	}
	pr->data = r->proc_data;
	pr->data_len = r->proc_data_len;
	pr->close = r->proc_close;
	rc = 0;
out:
	json_object_put(o);
	return rc;
}

/* {"signal": "TERM" | "KILL" | "INT"}, also with a SIG prefix, in any
 * case, or as its number (a string or an integer): TERM, sigterm, SIGTERM,
 * "15" and 15 are the same. The reply names it "TERM". */
static int signal_decode(struct req *r, struct sandbox_proc_req *pr, struct sbx_error *err)
{
	static const struct {
		const char *name, *num_s;
		int num;
	} sigs[] = {{"TERM", "15", 15}, {"KILL", "9", 9}, {"INT", "2", 2}};
	struct json_object *o = api_json_parse_object(r->body.data, r->body.len, err), *v = NULL;
	char num_buf[24];
	const char *s = "";
	int rc = -1;

	if (!o)
		return -1;
	json_object_object_foreach(o, key, val)
	{
		(void)val;
		if (strcmp(key, "signal") != 0) {
			sbx_error_set(err, SBX_E_INVALID_REQUEST, key, "unknown field '%.40s'",
				      key);
			goto out;
		}
	}
	if (json_object_object_get_ex(o, "signal", &v) && json_object_is_type(v, json_type_string))
		s = json_object_get_string(v);
	else if (v && json_object_is_type(v, json_type_int)) {
		snprintf(num_buf, sizeof(num_buf), "%lld", (long long)json_object_get_int64(v));
		s = num_buf;
	}
	if (strncasecmp(s, "SIG", 3) == 0)
		s += 3;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(sigs); i++)
		if (strcasecmp(s, sigs[i].name) == 0 || strcmp(s, sigs[i].num_s) == 0) {
			pr->signal = sigs[i].num;
			r->proc_signal_name = sigs[i].name;
			rc = 0;
		}
	if (rc < 0)
		sbx_error_set(err, SBX_E_INVALID_REQUEST, "signal",
			      "signal must be \"TERM\" (15), \"KILL\" (9) or \"INT\" (2); "
			      "\"SIGTERM\", lower case and the number are accepted too");
out:
	json_object_put(o);
	return rc;
}

/* ------------------------------------------------------------- handling */

enum MHD_Result api_processes_handle(struct req *r, const char *method)
{
	struct api_server *srv = r->srv;
	struct sandbox_proc_req pr;
	struct sbx_error err;
	int rc = 0;

	sbx_error_clear(&err);
	memset(&pr, 0, sizeof(pr));
	pr.pid = r->pid;
	pr.hold = &r->hold;
	switch (r->route) {
	case R_PROCESSES:
		if (strcmp(method, "GET") == 0) {
			pr.op = SANDBOX_PROC_LIST;
			break;
		}
		pr.op = SANDBOX_PROC_START;
		rc = api_exec_decode(r->body.data, r->body.len, srv->cfg, &r->exec, &err);
		if (rc == 0 && r->exec.receipt)
			rc = sbx_error_set(&err, SBX_E_INVALID_REQUEST, "receipt",
					   "a background process has no receipt");
		pr.start = &r->exec.req;
		break;
	case R_PROCESS_OUTPUT:
		pr.op = SANDBOX_PROC_OUTPUT;
		rc = output_decode(r, &pr, &err);
		break;
	case R_PROCESS_STDIN:
		pr.op = SANDBOX_PROC_STDIN;
		rc = stdin_decode(r, &pr, &err);
		break;
	default:
		pr.op = SANDBOX_PROC_SIGNAL;
		rc = signal_decode(r, &pr, &err);
		break;
	}
	if (rc < 0)
		return api_reply_error(r->conn, &err);
	r->proc_op = (int)pr.op;
	/* a call parks its connection: one account may park only so many */
	if (api_req_slot_take(r, API_INFLIGHT_PROCESS, &err) < 0)
		return api_reply_error(r->conn, &err);

	pthread_mutex_lock(&srv->lock);
	if (srv->stopping) {
		pthread_mutex_unlock(&srv->lock);
		return api_reply_new_error(r->conn, SBX_E_SERVICE_UNAVAILABLE, NULL,
					   "the service is shutting down; retry shortly");
	}
	r->is_async = true; /* answered by api_processes_answer (via api_async_answer) */
	r->state = EXEC_RUNNING;
	r->refs++;
	pthread_mutex_unlock(&srv->lock);
	if (sandbox_proc_call(srv->svc, r->account_id, r->id, &pr, proc_done, r, &err) < 0) {
		pthread_mutex_lock(&srv->lock);
		r->state = EXEC_NONE;
		r->is_async = false;
		r->refs--;
		pthread_mutex_unlock(&srv->lock);
		api_req_slot_put(r);
		return api_reply_error(r->conn, &err);
	}
	pthread_mutex_lock(&srv->lock);
	if (r->state == EXEC_DONE || srv->stopping) {
		if (r->state != EXEC_DONE)
			r->state = EXEC_ABORTED;
		pthread_mutex_unlock(&srv->lock);
		return api_async_answer(r);
	}
	api_park_locked(srv, r);
	pthread_mutex_unlock(&srv->lock);
	return MHD_YES;
}
