/* api/http_async.c: create, DELETE and one-shot executions, which take
 * seconds to minutes (a boot, a domain destroy, a program): they run on the
 * server's bounded pool (util's sbx_workpool) while the connection is parked,
 * counted against their account's cap, and leave their answer in the
 * request. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http-priv.h"

#define MOD "api"

/* ---------------------------------------------------------------- create */

/* Render a JSON object into r->out_body (owned). 0 or -1. */
int api_async_out_json(struct req *r, unsigned status, struct json_object *o)
{
	const char *text;
	size_t len = 0;

	if (!o)
		return -1;
	text = json_object_to_json_string_length(
	    o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
	r->out_body = text ? malloc(len + 1) : NULL;
	if (r->out_body) {
		memcpy(r->out_body, text, len + 1);
		r->out_len = len;
		r->out_status = status;
	}
	json_object_put(o);
	return r->out_body ? 0 : -1;
}

/* POST /v1/sandboxes, on its own thread. With an Idempotency-Key the 201
 * body is rendered here, handed to sandbox/ to remember byte for byte,
 * then sent; a replay sends the remembered bytes with
 * 'Idempotent-Replayed: true'. Rendering and remembering happen on this
 * thread, so a client that hung up still leaves the key completed. */
static int create_work(struct req *r, struct sbx_error *err)
{
	struct api_server *srv = r->srv;
	struct sandbox_create_result res;
	const char *key = r->has_idem_key ? r->idem_key : NULL;

	r->create.req.idempotency_key = key;
	if (sandbox_create_idempotent(srv->svc, r->account_id, &r->create.req, &res, err) < 0)
		return -1;
	if (res.replayed && !res.body) {
		/* The first create's sandbox, whose answer a crash lost: render
		 * it now and remember it, so later replays are these bytes. */
		if (api_async_out_json(r, 201, api_sandbox_encode(&res.view)) < 0) {
			sandbox_create_result_release(&res);
			return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		}
		r->out_replayed = true;
		sandbox_idempotency_complete(srv->svc, r->account_id, key, res.view.id, 201,
					     r->out_body, r->out_len, NULL);
		sandbox_create_result_release(&res);
		return 0;
	}
	if (res.replayed) {
		r->out_body = malloc(res.body_len + 1);
		if (r->out_body) {
			memcpy(r->out_body, res.body, res.body_len);
			r->out_body[res.body_len] = '\0';
			r->out_len = res.body_len;
			r->out_status = (unsigned)res.status;
			r->out_replayed = true;
		}
		sandbox_create_result_release(&res);
		return r->out_body ? 0 : sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	}
	if (api_async_out_json(r, 201, api_sandbox_encode(&res.view)) < 0) {
		if (key)
			sandbox_idempotency_release(srv->svc, r->account_id, key);
		sandbox_create_result_release(&res);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	}
	if (key && sandbox_idempotency_complete(srv->svc, r->account_id, key, res.view.id, 201,
						r->out_body, r->out_len, err) < 0)
		sbx_warn(MOD, "sandbox %s: its Idempotency-Key was not remembered", res.view.id);
	sandbox_create_result_release(&res);
	return 0;
}

static int delete_work(struct req *r, struct sbx_error *err)
{
	struct sandbox_view v;

	memset(&v, 0, sizeof(v));
	if (sandbox_destroy(r->srv->svc, r->account_id, r->id, &v, err) < 0)
		return -1;
	if (api_async_out_json(r, 200, api_sandbox_encode(&v)) < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	return 0;
}

/* POST /v1/sandboxes/{id}/pause | resume: a save or a restore. */
static int pause_work(struct req *r, struct sbx_error *err)
{
	struct sandbox_view v;
	int rc, minutes = 0;

	memset(&v, 0, sizeof(v));
	if (r->route == R_PAUSE)
		rc = sandbox_pause(r->srv->svc, r->account_id, r->id, &v, err);
	else
		rc = api_timeout_decode(r->body.data, r->body.len, r->srv->cfg, false, &minutes,
					err) < 0
			 ? -1
			 : sandbox_resume(r->srv->svc, r->account_id, r->id, minutes, &v, err);
	if (rc < 0)
		return -1;
	if (api_async_out_json(r, 200, api_sandbox_encode(&v)) < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	return 0;
}

enum MHD_Result api_pause_handle(struct req *r)
{
	return api_async_run(r);
}

/* POST /v1/sandbox/executions: the whole run (a boot or a warm guest, the
 * program, up to execution_max_timeout_seconds). sandbox/ renders the 200
 * body with api_execution_render before its commit (it keeps those bytes);
 * the reply is those bytes. */
static int execution_work(struct req *r, struct sbx_error *err)
{
	struct sandbox_execution_result res;

	if (sandbox_execution_run(r->srv->svc, r->account_id, &r->execution.req,
				  api_execution_render, &res, err) < 0)
		return -1;
	r->out_body = TAKE_PTR(res.body);
	r->out_len = res.body_len;
	r->out_status = 200;
	sandbox_execution_result_release(&res);
	return 0;
}

/* A job of srv->pool: the work, then the answer for the parked connection.
 * A job cancelled at shutdown answers 503 without doing the work. */
static void async_job(void *arg, bool cancelled)
{
	struct req *r = arg;
	struct api_server *srv = r->srv;
	struct sbx_error err;
	bool free_now;
	int rc;

	sbx_error_clear(&err);
	if (cancelled) {
		rc = sbx_error_set(&err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				   "the service is shutting down; retry on the restarted service");
		err.retry_after_s = 5;
	} else if (r->route == R_SANDBOXES) {
		rc = create_work(r, &err);
	} else if (r->route == R_EXECUTIONS) {
		rc = execution_work(r, &err);
	} else if (r->route == R_PAUSE || r->route == R_RESUME) {
		rc = pause_work(r, &err);
	} else if (r->route == R_SNAPSHOT_TAKE) {
		rc = api_snapshot_take_work(r, &err);
	} else {
		rc = delete_work(r, &err);
	}
	/* Before the reply goes out: a client that sends its next request as
	 * soon as it reads this one must find the count freed. */
	api_req_slot_put(r);
	pthread_mutex_lock(&srv->lock);
	r->op_rc = rc;
	if (rc < 0)
		r->exec_err = err;
	if (r->state == EXEC_RUNNING || r->state == EXEC_SUSPENDED)
		api_finish_locked(srv, r);
	free_now = --r->refs == 0;
	pthread_mutex_unlock(&srv->lock);
	if (free_now)
		api_req_free(r);
}

/* The answer of a finished create/DELETE/execution (on MHD's thread). */
enum MHD_Result api_async_answer(struct req *r)
{
	struct api_server *srv = r->srv;
	struct MHD_Response *resp;
	enum exec_state state;
	struct sbx_error err;
	enum MHD_Result ret;

	if (r->proc_op) /* a processes call: its result is in r->done */
		return api_processes_answer(r);
	pthread_mutex_lock(&srv->lock);
	state = r->state;
	err = r->exec_err;
	pthread_mutex_unlock(&srv->lock);
	if (state == EXEC_ABORTED) {
		sbx_error_clear(&err);
		sbx_error_set(&err, SBX_E_SERVICE_UNAVAILABLE, NULL,
			      "the service is shutting down; retry on the restarted service");
		err.retry_after_s = 5;
		return api_reply_error(r->conn, &err);
	}
	if (r->op_rc < 0)
		return api_reply_error(r->conn, &err);
	/* The exact bytes (an idempotent create's remembered answer); MHD
	 * takes them over. */
	resp = MHD_create_response_from_buffer(r->out_len, r->out_body, MHD_RESPMEM_MUST_FREE);
	if (!resp)
		return MHD_NO;
	r->out_body = NULL;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	if (r->out_replayed)
		MHD_add_response_header(resp, "Idempotent-Replayed", "true");
	api_security_headers(resp, false);
	api_reqctx_header(resp);
	ret = api_queue_response(r->conn, r->out_status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* Queue the work on the bounded pool and park the connection (like exec):
 * a burst of creates then waits for boot slots in sandbox/ on pool
 * threads, not on HTTP workers, and GETs keep being answered. */
enum MHD_Result api_async_run(struct req *r)
{
	struct api_server *srv = r->srv;
	enum api_inflight_kind kind = r->route == R_SANDBOXES	 ? API_INFLIGHT_CREATE
				      : r->route == R_EXECUTIONS ? API_INFLIGHT_EXECUTION
								 : API_INFLIGHT_DELETE;
	struct sbx_error err;

	sbx_error_clear(&err);
	pthread_mutex_lock(&srv->lock);
	if (srv->stopping) {
		pthread_mutex_unlock(&srv->lock);
		return api_reply_new_error(r->conn, SBX_E_SERVICE_UNAVAILABLE, NULL,
					   "the service is shutting down; retry shortly");
	}
	pthread_mutex_unlock(&srv->lock);
	if (api_req_slot_take(r, kind, &err) < 0)
		return api_reply_error(r->conn, &err);

	pthread_mutex_lock(&srv->lock);
	r->is_async = true;
	r->state = EXEC_RUNNING;
	r->refs++;
	pthread_mutex_unlock(&srv->lock);
	if (sbx_workpool_submit(srv->pool, async_job, r) < 0) {
		pthread_mutex_lock(&srv->lock);
		r->is_async = false;
		r->state = EXEC_NONE;
		r->refs--;
		pthread_mutex_unlock(&srv->lock);
		api_req_slot_put(r);
		sbx_error_set(&err, SBX_E_SERVICE_UNAVAILABLE, NULL,
			      "the service is busy with long requests; retry shortly");
		err.retry_after_s = 2;
		return api_reply_error(r->conn, &err);
	}
	pthread_mutex_lock(&srv->lock);
	if (r->state == EXEC_DONE) {
		pthread_mutex_unlock(&srv->lock);
		return api_async_answer(r);
	}
	api_park_locked(srv, r);
	pthread_mutex_unlock(&srv->lock);
	return MHD_YES;
}

enum MHD_Result api_create_handle(struct req *r)
{
	struct sbx_error err;
	const char *key;

	sbx_error_clear(&err);
	if (api_create_decode(r->body.data, r->body.len, r->srv->cfg, &r->create, &err) < 0)
		return api_reply_error(r->conn, &err);
	key = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Idempotency-Key");
	if (key) {
		/* The key must outlive the connection (the create thread may).
		 * One longer than 255 characters cannot be a valid key: keep it
		 * invalid (a non-printable byte) so sandbox/ answers 400. */
		size_t n = strlen(key);

		if (n >= sizeof(r->idem_key)) {
			memcpy(r->idem_key, key, sizeof(r->idem_key) - 2);
			r->idem_key[sizeof(r->idem_key) - 2] = '\x01';
			r->idem_key[sizeof(r->idem_key) - 1] = '\0';
		} else {
			memcpy(r->idem_key, key, n + 1);
		}
		r->has_idem_key = true;
	}
	return api_async_run(r);
}

enum MHD_Result api_execution_handle(struct req *r)
{
	struct sbx_error err;

	sbx_error_clear(&err);
	if (api_execution_decode(r->body.data, r->body.len, &r->execution, &err) < 0)
		return api_reply_error(r->conn, &err);
	r->has_execution = true;
	/* refused here, before a work thread, a hold or a guest */
	if (sandbox_execution_check(r->srv->svc, &r->execution.req, &err) < 0)
		return api_reply_error(r->conn, &err);
	return api_async_run(r);
}
