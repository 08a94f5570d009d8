/* api/http_exec.c: POST /v1/sandboxes/{id}/exec. The handler starts the
 * command and suspends the HTTP connection; the completion (any thread)
 * resumes it and MHD calls the handler again to send the result, so no
 * worker thread waits on a guest. */
#include <stdio.h>
#include <string.h>

#include "http-priv.h"

#define MOD "api"

/* Completion of sandbox_exec_start: any thread, maybe before it returned. */
static void exec_done(void *opaque, struct sandbox_exec_result *res, const struct sbx_error *err)
{
	struct req *r = opaque;
	struct api_server *srv = r->srv;
	bool free_now;

	/* The account may start another exec once this one has answered. */
	api_req_slot_put(r);
	/* *res is the caller's struct; its buffers become ours. */
	pthread_mutex_lock(&srv->lock);
	if (r->state == EXEC_RUNNING || r->state == EXEC_SUSPENDED) {
		if (res) {
			r->res = *res;
			r->has_res = true;
			res = NULL;
		} else {
			if (err)
				r->exec_err = *err;
			else
				sbx_error_set(&r->exec_err, SBX_E_INTERNAL, NULL,
					      "exec ended without a result");
		}
		api_finish_locked(srv, r);
	}
	free_now = --r->refs == 0;
	pthread_mutex_unlock(&srv->lock);
	if (res)
		sandbox_exec_result_release(res);
	if (free_now)
		api_req_free(r);
}

/* "receipt": true: sign the reply's exit_code/stdout/stderr as encoded in
 * `o` and add {"id", "hash", "signature", "signer", "url",
 * "fingerprint_salt"} (docs/receipts.md). */
static int exec_receipt_add(struct req *r, struct json_object *o,
			    const struct sandbox_exec_result *res, struct sbx_error *err)
{
	struct sandbox_exec_receipt rc;
	struct json_object *out = NULL, *errs = NULL, *j;
	char url[96];

	json_object_object_get_ex(o, "stdout", &out);
	json_object_object_get_ex(o, "stderr", &errs);
	sbx_error_clear(err);
	if (!out || !errs ||
	    sandbox_exec_receipt_sign(
		r->srv->svc, r->account_id, r->id, &r->exec.req, res->exit_code,
		json_object_get_string(out), (size_t)json_object_get_string_len(out),
		json_object_get_string(errs), (size_t)json_object_get_string_len(errs),
		res->host_ms, res->timed_out, &rc, err) < 0) {
		sbx_warn(MOD, "sandbox %s: exec receipt: %s", r->id, err->message);
		sbx_error_clear(err);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL,
				     "the command ran but its receipt could not be signed");
	}
	snprintf(url, sizeof(url), "/v1/receipts/%s", rc.id);
	j = json_object_new_object();
	json_object_object_add(j, "id", json_object_new_string(rc.id));
	json_object_object_add(j, "hash", json_object_new_string(rc.hash));
	json_object_object_add(j, "signature", json_object_new_string(rc.signature));
	json_object_object_add(j, "signer", json_object_new_string(rc.signer));
	json_object_object_add(j, "url", json_object_new_string(url));
	json_object_object_add(j, "fingerprint_salt", json_object_new_string(rc.salt));
	json_object_object_add(o, "receipt", j);
	return 0;
}

enum MHD_Result api_exec_answer(struct req *r)
{
	struct api_server *srv = r->srv;
	struct sandbox_exec_result res;
	enum exec_state state;
	struct sbx_error err;
	enum MHD_Result ret;
	bool has_res;

	pthread_mutex_lock(&srv->lock);
	state = r->state;
	res = r->res;
	has_res = r->has_res;
	r->has_res = false;
	memset(&r->res, 0, sizeof(r->res));
	err = r->exec_err;
	pthread_mutex_unlock(&srv->lock);
	if (state == EXEC_ABORTED) {
		if (has_res)
			sandbox_exec_result_release(&res);
		sbx_error_clear(&err);
		sbx_error_set(&err, SBX_E_SERVICE_UNAVAILABLE, NULL,
			      "the service is shutting down; the command may still be running, "
			      "retry on the restarted service");
		err.retry_after_s = 5;
		return api_reply_error(r->conn, &err);
	}
	if (!has_res)
		return api_reply_error(r->conn, &err);
	struct json_object *o = api_exec_result_encode(&res, r->exec.base64);
	if (o && r->exec.receipt && exec_receipt_add(r, o, &res, &err) < 0) {
		json_object_put(o);
		sandbox_exec_result_release(&res);
		return api_reply_error(r->conn, &err);
	}
	/* the raw streams are copied into o: let them go before the reply is
	 * held for a slow reader */
	sandbox_exec_result_release(&res);
	ret = api_reply_json(r->conn, 200, o, 0, NULL);
	return ret;
}

int api_exec_begin(struct req *r, sandbox_exec_done_fn done, struct sbx_error *err)
{
	struct api_server *srv = r->srv;

	/* Parked execs hold connections: one account may park only so many
	 * (max_execs_in_flight_per_account, well below the host's limit). */
	if (api_req_slot_take(r, API_INFLIGHT_EXEC, err) < 0)
		return -1;
	pthread_mutex_lock(&srv->lock);
	r->state = EXEC_RUNNING;
	r->refs++; /* the exec's callbacks */
	pthread_mutex_unlock(&srv->lock);
	if (sandbox_exec_start(srv->svc, r->account_id, r->id, &r->exec.req, done, r, err) < 0) {
		pthread_mutex_lock(&srv->lock);
		r->state = EXEC_NONE;
		r->refs--;
		pthread_mutex_unlock(&srv->lock);
		api_req_slot_put(r);
		return -1;
	}
	return 0;
}

enum MHD_Result api_exec_handle(struct req *r)
{
	struct api_server *srv = r->srv;
	struct sbx_error err;
	bool sse = false;

	sbx_error_clear(&err);
	if (api_exec_decode(r->body.data, r->body.len, srv->cfg, &r->exec, &err) < 0)
		return api_reply_error(r->conn, &err);
	r->exec.req.base64 = r->exec.base64;
	r->exec.req.hold = &r->hold;

	pthread_mutex_lock(&srv->lock);
	if (srv->stopping) {
		pthread_mutex_unlock(&srv->lock);
		return api_reply_new_error(r->conn, SBX_E_SERVICE_UNAVAILABLE, NULL,
					   "the service is shutting down; retry shortly");
	}
	pthread_mutex_unlock(&srv->lock);
	if (api_stream_wanted(r->conn, &sse))
		return api_stream_start(r, sse);
	if (api_exec_begin(r, exec_done, &err) < 0)
		return api_reply_error(r->conn, &err);

	pthread_mutex_lock(&srv->lock);
	if (r->state == EXEC_DONE) {
		pthread_mutex_unlock(&srv->lock);
		return api_exec_answer(r);
	}
	if (srv->stopping) {
		r->state = EXEC_ABORTED;
		pthread_mutex_unlock(&srv->lock);
		return api_exec_answer(r);
	}
	/* No worker thread waits on the guest: MHD parks the connection until
	 * exec_done resumes it, then calls the handler again. */
	api_park_locked(srv, r);
	pthread_mutex_unlock(&srv->lock);
	return MHD_YES;
}
