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

/* --------------------------------------------------------- output budget */

static struct output_account **output_account_find_locked(struct sandbox_svc *svc,
							  const char *account_id)
{
	struct output_account **pp;

	for (pp = &svc->output_accounts; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->id, account_id) == 0)
			break;
	return pp;
}

/* Take `bytes` of the account's and the host's budget into *hold. 0, or
 * -1 with 429 (account) / 503 (host). */
int sandbox_output_reserve(struct sandbox_svc *svc, const char *account_id, uint64_t bytes,
			   struct sandbox_output_hold *hold, struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	uint64_t acct_max = cfg->output_budget_account_mib << 20;
	uint64_t host_max = cfg->output_budget_host_mib << 20;
	struct output_account **pp, *a;
	int rc = 0;

	pthread_mutex_lock(&svc->lock);
	pp = output_account_find_locked(svc, account_id);
	a = *pp;
	if ((a ? a->held : 0) + bytes > acct_max) {
		rc = sbx_error_set(err, SBX_E_RATE_LIMITED, NULL,
				   "the output of this account's running commands would pass its "
				   "buffer budget (%llu MiB); wait for one to finish",
				   (unsigned long long)cfg->output_budget_account_mib);
	} else if (svc->output_held + bytes > host_max) {
		rc = sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				   "this node is buffering too much command output right now; "
				   "retry shortly");
	} else if (!a && !(a = calloc(1, sizeof(*a)))) {
		rc = sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	} else {
		if (!*pp) {
			snprintf(a->id, sizeof(a->id), "%s", account_id);
			*pp = a;
		}
		a->held += bytes;
		svc->output_held += bytes;
		snprintf(hold->account_id, sizeof(hold->account_id), "%s", account_id);
		hold->bytes = bytes;
	}
	pthread_mutex_unlock(&svc->lock);
	if (rc < 0 && err)
		err->retry_after_s = 1;
	return rc;
}

int sandbox_output_grow(struct sandbox_svc *svc, struct sandbox_output_hold *hold, uint64_t bytes,
			bool force)
{
	const struct sandbox_config *cfg = &svc->cfg;
	uint64_t acct_max = cfg->output_budget_account_mib << 20;
	uint64_t host_max = cfg->output_budget_host_mib << 20;
	struct output_account *a;
	int rc = -1;

	if (!hold || !hold->account_id[0])
		return -1;
	if (bytes == 0)
		return 0;
	pthread_mutex_lock(&svc->lock);
	a = *output_account_find_locked(svc, hold->account_id);
	/* a hold that holds something has its account's entry */
	if (a && (force || (a->held + bytes <= acct_max && svc->output_held + bytes <= host_max))) {
		a->held += bytes;
		svc->output_held += bytes;
		hold->bytes += bytes;
		rc = 0;
	}
	pthread_mutex_unlock(&svc->lock);
	return rc;
}

void sandbox_output_shrink(struct sandbox_svc *svc, struct sandbox_output_hold *hold,
			   uint64_t bytes)
{
	struct output_account *a;

	if (!hold)
		return;
	pthread_mutex_lock(&svc->lock);
	/* never below the start's share: release gives that back */
	bytes = SBX_MIN(bytes, hold->bytes > SANDBOX_EXEC_HOLD_START
				   ? hold->bytes - SANDBOX_EXEC_HOLD_START
				   : 0);
	a = *output_account_find_locked(svc, hold->account_id);
	if (a && bytes > 0) {
		a->held -= SBX_MIN(a->held, bytes);
		svc->output_held -= SBX_MIN(svc->output_held, bytes);
		hold->bytes -= bytes;
	}
	pthread_mutex_unlock(&svc->lock);
}

void sandbox_output_release(struct sandbox_svc *svc, struct sandbox_output_hold *hold)
{
	struct output_account **pp, *a;

	if (!hold || !hold->bytes)
		return;
	pthread_mutex_lock(&svc->lock);
	pp = output_account_find_locked(svc, hold->account_id);
	a = *pp;
	if (a) {
		a->held -= SBX_MIN(a->held, hold->bytes);
		if (a->held == 0) {
			*pp = a->next;
			free(a);
		}
	}
	svc->output_held -= SBX_MIN(svc->output_held, hold->bytes);
	pthread_mutex_unlock(&svc->lock);
	hold->bytes = 0;
}

void sandbox_output_held(struct sandbox_svc *svc, const char *account_id, uint64_t *host,
			 uint64_t *account)
{
	struct output_account *a;

	pthread_mutex_lock(&svc->lock);
	a = *output_account_find_locked(svc, account_id);
	*host = svc->output_held;
	*account = a ? a->held : 0;
	pthread_mutex_unlock(&svc->lock);
}

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
	sandbox_exec_output_fn on_output;
	void *opaque;
	/* Valid for every exec_done call: a live is freed only after
	 * agentless_conn_free() has failed all of its execs. */
	struct live *l;
	/* The budget held for the reply: the caller's (req->hold), given back
	 * by the caller, or own_hold, given back after done returns. */
	struct sandbox_output_hold own_hold;
	bool own;
	struct sandbox_output_hold *hold; /* the one in use (own_hold or the caller's) */
	unsigned cost;			  /* budget bytes per output byte (buffered) */
	uint32_t timeout_ms;		  /* the timeout the exec runs with (host_ms's bound) */
};

static void exec_call_free(struct exec_call *call)
{
	if (call->own)
		sandbox_output_release(call->l->svc, &call->own_hold);
	free(call);
}

static bool exec_output(void *opaque, uint32_t exec_id, bool is_stderr, const void *data,
			size_t len)
{
	struct exec_call *call = opaque;

	return call->on_output(call->opaque, exec_id, is_stderr, data, len);
}

/* agentless_charge_fn of a buffered exec: its reply will cost `cost`
 * budget bytes per output byte at worst; past the budget the exec keeps
 * no more (truncated). */
static bool exec_charge(void *opaque, bool is_stderr, size_t len)
{
	struct exec_call *call = opaque;

	return sandbox_output_grow(call->l->svc, call->hold, (uint64_t)len * call->cost, false) ==
	       0;
}

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
		} else if (aerr && aerr->code == SBX_E_SANDBOX_ERROR &&
			   sandbox_live_host_lost(call->l)) {
			/* The channel went with the host's connection: the
			 * sandbox survives it (docs/hosts.md), this command's
			 * outcome is unknown. */
			sbx_error_clear(&e);
			sbx_error_set(
			    &e, SBX_E_SERVICE_UNAVAILABLE, NULL,
			    "the connection to the host of sandbox '%s' was lost while the "
			    "command ran; its outcome is unknown; the sandbox keeps "
			    "running",
			    call->l->id);
			e.retry_after_s = 2;
			aerr = &e;
		}
		call->done(call->opaque, NULL, aerr);
		exec_call_free(call);
		return;
	}
	out.stdout_buf = TAKE_PTR(res->stdout_buf);
	out.stdout_len = res->stdout_len;
	out.stderr_buf = TAKE_PTR(res->stderr_buf);
	out.stderr_len = res->stderr_len;
	out.exit_code = res->exit_code;
	out.duration_ms = res->duration_ms;
	/* the time the exec could run at most: the timeout it ran with */
	out.host_ms = SBX_MIN(res->host_ms, call->timeout_ms);
	out.timed_out = res->timed_out;
	out.truncated = res->truncated;
	agentless_exec_result_release(res);
	call->done(call->opaque, &out, NULL);
	exec_call_free(call);
}

int sandbox_exec_start(struct sandbox_svc *svc, const char *account_id, const char *id,
		       const struct sandbox_exec_req *req, sandbox_exec_done_fn done, void *opaque,
		       struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	struct store_sandbox row;
	struct exec_call *call;
	struct sandbox_output_hold *hold;
	struct live *l;
	int64_t now = sbx_wall_ms(), left_ms;
	uint32_t timeout;
	int rc;

	if (sandbox_running_row(svc, account_id, id, now, &row, err) < 0)
		return -1;
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
	    .on_output = req->on_output ? exec_output : NULL,
	    /* a streamed exec's consumer charges what it buffers itself */
	    .charge = req->on_output ? NULL : exec_charge,
	};
	call = calloc(1, sizeof(*call));
	if (!call)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	call->done = done;
	call->on_output = req->on_output;
	call->opaque = opaque;
	call->timeout_ms = timeout;
	call->own = !req->hold;
	hold = req->hold ? req->hold : &call->own_hold;
	call->hold = hold;
	call->cost = req->base64 ? SANDBOX_REPLY_COST_BASE64 : SANDBOX_REPLY_COST_UTF8;
	/* the start's share; the output's is charged as it arrives */
	if (sandbox_output_reserve(svc, account_id, SANDBOX_EXEC_HOLD_START, hold, err) < 0) {
		free(call);
		return -1;
	}

	l = sandbox_live_pin(svc, id, err);
	if (!l) {
		sandbox_output_release(svc, hold);
		free(call);
		return -1;
	}
	call->l = l;
	rc = agentless_exec_start(l->conn, &areq, exec_done, call, err);
	sandbox_live_unpin(svc, l);
	if (rc < 0) {
		sandbox_output_release(svc, hold);
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

struct live *sandbox_live_pin(struct sandbox_svc *svc, const char *id, struct sbx_error *err)
{
	struct live *l;

	pthread_mutex_lock(&svc->lock);
	l = sandbox_live_find_locked(svc, id);
	if (sandbox_live_usable_locked(l, id, err) < 0) {
		pthread_mutex_unlock(&svc->lock);
		return NULL;
	}
	l->refs++;
	pthread_mutex_unlock(&svc->lock);
	return l;
}

void sandbox_live_unpin(struct sandbox_svc *svc, struct live *l)
{
	pthread_mutex_lock(&svc->lock);
	sandbox_live_unref_locked(svc, l);
	pthread_mutex_unlock(&svc->lock);
}

void sandbox_exec_resume(struct sandbox_svc *svc, const char *sandbox_id, uint32_t exec_id)
{
	struct live *l = sandbox_live_pin(svc, sandbox_id, NULL);

	if (!l)
		return;
	agentless_exec_resume(l->conn, exec_id);
	sandbox_live_unpin(svc, l);
}
