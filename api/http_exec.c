/* api/http_exec.c: POST /v1/sandboxes/{id}/exec, and the completion that
 * exec and processes calls are delivered into (http-priv.h "Threads").
 * The handler starts the command and suspends the HTTP connection; the
 * completion (any thread) moves the result into the request and resumes
 * it, and MHD calls the handler again, which renders the result on MHD's
 * thread; no worker thread waits on a guest. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "http-priv.h"

#define MOD "api"

/* ------------------------------------------------------------ completion */

static __thread bool on_mhd_thread;

bool api_on_mhd_thread(void)
{
	return on_mhd_thread;
}

void api_mark_mhd_thread(void)
{
	on_mhd_thread = true;
}

/* A job of srv->pool: free a request whose connection went away before
 * its work ended (cancelled at shutdown: the same). */
static void reap_job(void *arg, bool cancelled)
{
	(void)cancelled;
	api_req_free(arg);
}

void api_completion_release(struct api_completion *c)
{
	if (c->has_exec)
		agentless_exec_result_release(&c->exec);
	if (c->has_proc)
		agentless_proc_result_release(&c->proc);
	c->has_exec = c->has_proc = c->has_receipt = false;
}

void api_complete(struct req *r, struct agentless_exec_result *exec,
		  const struct sandbox_exec_receipt *receipt, struct agentless_proc_result *proc,
		  const struct sbx_error *err)
{
	struct api_server *srv = r->srv;
	bool free_here = false;

	pthread_mutex_lock(&srv->lock);
	if (r->state == EXEC_RUNNING || r->state == EXEC_SUSPENDED) {
		if (exec) {
			r->done.exec = *exec; /* moved: its buffers are the request's */
			memset(exec, 0, sizeof(*exec));
			r->done.has_exec = true;
		}
		if (receipt) {
			r->done.receipt = *receipt;
			r->done.has_receipt = true;
		}
		if (proc) {
			r->done.proc = *proc;
			memset(proc, 0, sizeof(*proc));
			r->done.has_proc = true;
		}
		if (!exec && !proc) {
			if (err)
				r->exec_err = *err;
			else
				sbx_error_set(&r->exec_err, SBX_E_INTERNAL, NULL,
					      "the command ended without a result");
		}
		r->done.completed = true;
		if (r->stream) { /* its reader drains it; it stays RUNNING */
			if (r->state == EXEC_SUSPENDED) {
				api_parked_remove(srv, r);
				MHD_resume_connection(r->conn);
				r->state = EXEC_RUNNING;
			}
		} else {
			api_finish_locked(srv, r);
		}
	}
	if (--r->refs == 0) /* the connection went: nothing to wake */
		free_here =
		    srv->stopping || !srv->pool || sbx_workpool_submit(srv->pool, reap_job, r) < 0;
	pthread_mutex_unlock(&srv->lock);
	/* a result nobody waits for any more */
	if (exec)
		agentless_exec_result_release(exec);
	if (proc)
		agentless_proc_result_release(proc);
	if (free_here)
		api_req_free(r);
}

/* ------------------------------------------------------------------ exec */

/* Completion of sandbox_exec_start: any thread, maybe before it returned. */
static void exec_done(void *opaque, struct agentless_exec_result *res,
		      const struct sandbox_exec_receipt *receipt, const struct sbx_error *err)
{
	api_complete(opaque, res, receipt, NULL, err);
}

/* The receipt signed in sandbox/: {"id", "hash", "signature", "signer",
 * "url", "fingerprint_salt"} (docs/receipts.md). */
static struct json_object *exec_receipt_encode(const struct sandbox_exec_receipt *rc)
{
	struct json_object *j = json_object_new_object();
	char url[96];

	snprintf(url, sizeof(url), "/v1/receipts/%s", rc->id);
	json_object_object_add(j, "id", json_object_new_string(rc->id));
	json_object_object_add(j, "hash", json_object_new_string(rc->hash));
	json_object_object_add(j, "signature", json_object_new_string(rc->signature));
	json_object_object_add(j, "signer", json_object_new_string(rc->signer));
	json_object_object_add(j, "url", json_object_new_string(url));
	json_object_object_add(j, "fingerprint_salt", json_object_new_string(rc->salt));
	return j;
}

/* The reply of a finished (or aborted) exec: MHD's thread drains the
 * completion and renders it. */
enum MHD_Result api_exec_answer(struct req *r)
{
	struct api_server *srv = r->srv;
	struct api_completion done;
	enum exec_state state;
	struct sbx_error err;
	struct json_object *o;

	assert(api_on_mhd_thread());
	/* The account may start another exec once this one has answered
	 * (before the reply goes out: a client that sends its next request
	 * as soon as it reads this one finds the count freed). */
	api_req_slot_put(r);
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
			      "the service is shutting down; the command may still be running, "
			      "retry on the restarted service");
		err.retry_after_s = 5;
		return api_reply_error(r->conn, &err);
	}
	if (!done.has_exec)
		return api_reply_error(r->conn, &err);
	o = api_exec_result_encode(&done.exec, r->exec.base64);
	if (o && done.has_receipt)
		json_object_object_add(o, "receipt", exec_receipt_encode(&done.receipt));
	/* the raw streams are copied into o: let them go before the reply is
	 * held for a slow reader */
	api_completion_release(&done);
	return api_reply_json(r->conn, 200, o, 0, NULL);
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
	r->exec.req.receipt = r->exec.receipt; /* signed in sandbox/ */
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
