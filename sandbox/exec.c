/* sandbox/exec.c: the exec use case (POST /v1/sandboxes/{id}/exec) and
 * the output budget its replies draw on.
 *
 * An exec pins its live with a ref only while it starts; the completion
 * runs on whichever thread finished it (the channel's thread, the timer,
 * an ender) with no sandbox lock held, and takes svc->lock only to read
 * how the sandbox ended.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../agentless/agentless.h"
#include "../store/store.h"
#include "sandbox-priv.h"

#define MOD "sandbox"

/* ------------------------------------------------------------------ exec */

void sandbox_exec_result_release(struct sandbox_exec_result *r)
{
	if (!r)
		return;
	free(r->stdout_buf);
	free(r->stderr_buf);
	memset(r, 0, sizeof(*r));
}

struct exec_call {
	sandbox_exec_done_fn done;
	void *opaque;
	/* Valid for every exec_done call: a live is freed only after
	 * agentless_conn_free() has failed all of its execs. */
	struct live *l;
};

static void exec_done(void *opaque, struct agentless_exec_result *res, const struct sbx_error *aerr)
{
	struct exec_call *call = opaque;
	struct sandbox_exec_result out = {0};

	if (!res) {
		struct sandbox_svc *svc = call->l->svc;
		enum store_status ending;
		struct sbx_error e;

		pthread_mutex_lock(&svc->lock);
		ending = call->l->ending;
		pthread_mutex_unlock(&svc->lock);
		/* Cut short because the sandbox expired or was deleted: the
		 * sandbox is not running (410), not broken (500). */
		if (ending == STORE_EXPIRED || ending == STORE_DESTROYED) {
			sbx_error_clear(&e);
			sbx_error_set(&e, SBX_E_SANDBOX_NOT_RUNNING, NULL,
				      "sandbox '%s' %s while the command ran; create a new one",
				      call->l->id,
				      ending == STORE_EXPIRED ? "expired" : "was deleted");
			aerr = &e;
		}
		call->done(call->opaque, NULL, aerr);
		free(call);
		return;
	}
	out.stdout_buf = TAKE_PTR(res->stdout_buf);
	out.stdout_len = res->stdout_len;
	out.stderr_buf = TAKE_PTR(res->stderr_buf);
	out.stderr_len = res->stderr_len;
	out.exit_code = res->exit_code;
	out.duration_ms = res->duration_ms;
	out.timed_out = res->timed_out;
	out.truncated = res->truncated;
	agentless_exec_result_release(res);
	call->done(call->opaque, &out, NULL);
	free(call);
}

int sandbox_exec_start(struct sandbox_svc *svc, const char *account_id, const char *id,
		       const struct sandbox_exec_req *req, sandbox_exec_done_fn done, void *opaque,
		       struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	struct store_sandbox row;
	struct exec_call *call;
	struct live *l;
	int64_t now = sbx_wall_ms(), left_ms;
	uint32_t timeout;
	int rc;

	if (sandbox_visible_row(svc, account_id, id, &row, err) < 0)
		return -1;
	if (row.status != STORE_RUNNING || row.expires_at_ms <= now)
		return sbx_error_set(
		    err, SBX_E_SANDBOX_NOT_RUNNING, NULL, "sandbox '%s' is %s; create a new one",
		    id, row.status == STORE_RUNNING ? "expired" : store_status_name(row.status));
	left_ms = row.expires_at_ms - now;
	if (req->has_timeout) {
		if (req->timeout_ms < 1 || (int64_t)req->timeout_ms > left_ms)
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "timeout_ms",
					     "timeout_ms must be 1..%lld (the time left in the "
					     "session); extend the sandbox for more",
					     (long long)left_ms);
		timeout = req->timeout_ms;
	} else {
		/* Default: 60 s, or the time left less a second, so that a
		 * command still running at expiry ends with its own 200
		 * timed_out reply and its output, not a 410 at the expiry. */
		int64_t margin = left_ms > 2000 ? 1000 : left_ms / 2;
		timeout = (uint32_t)SBX_MAX(
		    (int64_t)1, SBX_MIN((int64_t)cfg->default_exec_timeout_ms, left_ms - margin));
	}
	struct agentless_exec_req areq = {
	    .command = req->command,
	    .command_len = req->command_len,
	    .cwd = req->cwd ? req->cwd : "/home/sandbox",
	    .env = req->env,
	    .n_env = req->n_env,
	    .timeout_ms = timeout,
	    .stdout_cap = (uint32_t)cfg->output_cap_bytes,
	    .stderr_cap = (uint32_t)cfg->output_cap_bytes,
	    .user = strcmp(cfg->exec_user, "root") == 0 ? NULL : cfg->exec_user,
	};
	call = calloc(1, sizeof(*call));
	if (!call)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	call->done = done;
	call->opaque = opaque;

	pthread_mutex_lock(&svc->lock);
	l = sandbox_live_find_locked(svc, id);
	if (!l || l->dead) {
		pthread_mutex_unlock(&svc->lock);
		free(call);
		return sbx_error_set(err, SBX_E_SANDBOX_NOT_RUNNING, NULL,
				     "sandbox '%s' is no longer running", id);
	}
	l->refs++;
	call->l = l;
	pthread_mutex_unlock(&svc->lock);

	rc = agentless_exec_start(l->conn, &areq, exec_done, call, err);

	pthread_mutex_lock(&svc->lock);
	sandbox_live_unref_locked(svc, l);
	pthread_mutex_unlock(&svc->lock);
	if (rc < 0) {
		free(call);
		if (err && err->code == SBX_E_RATE_LIMITED) {
			sbx_error_set(err, SBX_E_RATE_LIMITED, NULL,
				      "sandbox '%s' already runs %d commands; wait for one to "
				      "finish",
				      id, cfg->max_execs_per_sandbox);
			err->retry_after_s = 1;
		}
		return -1;
	}
	return 0;
}

