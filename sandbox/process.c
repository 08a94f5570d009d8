/* sandbox/process.c: background processes (docs/api.md "Processes").
 *
 * The processes, their output rings and their list live in the guest
 * (guest/proc.c, protocol v3): this file keeps no state per
 * process. It checks the account may see the sandbox and that it runs,
 * and hands one typed request to agentless/process.c, which encodes it and
 * checks the guest's answer.
 *
 * Threads: sandbox_proc_call pins the live with a ref only while it sends
 * (as exec does); the reply callback runs on the channel's thread (or the
 * timer's, or an ender's) with no lock held. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../agentless/agentless.h"
#include "sandbox-priv.h"

#define MOD "sandbox"

_Static_assert(SANDBOX_PROC_RING_BYTES == AGENTLESS_PROC_RING &&
		   SANDBOX_PROC_CHUNK == AGENTLESS_PROC_CHUNK &&
		   SANDBOX_PROC_MAX == AGENTLESS_PROC_MAX,
	       "sandbox.h mirrors the protocol's process constants");
_Static_assert((int)SANDBOX_PROC_START == (int)AGENTLESS_PROC_START &&
		   (int)SANDBOX_PROC_SIGNAL == (int)AGENTLESS_PROC_SIGNAL,
	       "the ops are agentless'");

/* How long the guest gets to answer a PROC (it answers at once). */
#define PROC_ANSWER_MS 10000

struct proc_call {
	sandbox_proc_done_fn done;
	void *opaque;
	enum sandbox_proc_op op;
	int max_procs;
};

static void proc_done(void *opaque, struct agentless_proc_result *ares, const struct sbx_error *err)
{
	struct proc_call *call = opaque;

	if (!ares) {
		struct sbx_error e;

		/* the guest's BUSY for a START: its limit of running ones */
		if (err && err->code == SBX_E_RATE_LIMITED && call->op == SANDBOX_PROC_START) {
			sbx_error_set(&e, SBX_E_RATE_LIMITED, NULL,
				      "this sandbox already runs %d background processes "
				      "(max_processes_per_sandbox); wait for one to end",
				      call->max_procs);
			e.retry_after_s = 1;
			err = &e;
		}
		call->done(call->opaque, NULL, err);
		free(call);
		return;
	}
	/* the answer goes up as agentless/ decoded it, moved */
	call->done(call->opaque, ares, NULL);
	free(call);
}

/* ----------------------------------------------------------------- call */

int sandbox_proc_call(struct sandbox_svc *svc, const char *account_id, const char *id,
		      const struct sandbox_proc_req *req, sandbox_proc_done_fn done, void *opaque,
		      struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	const struct sandbox_exec_req *x = req->start;
	struct agentless_proc_req areq = {
	    .op = (enum agentless_proc_op)req->op,
	    .answer_ms = PROC_ANSWER_MS,
	    .pid = req->pid,
	    .user = strcmp(cfg->exec_user, "root") == 0 ? NULL : cfg->exec_user,
	    .max_procs = (uint32_t)cfg->max_processes_per_sandbox,
	    .stdout_offset = req->stdout_offset,
	    .stderr_offset = req->stderr_offset,
	    .data = req->data,
	    .data_len = req->data_len,
	    .close = req->close,
	    .signal = req->signal,
	};
	struct store_sandbox row;
	struct proc_call *call;
	struct fleet_guest *l;
	int64_t now = sbx_wall_ms();
	int rc;

	if (sandbox_running_row(svc, account_id, id, now, &row, err) < 0)
		return -1;
	if (req->op == SANDBOX_PROC_START && req->start->has_timeout &&
	    (req->start->timeout_ms < 1 ||
	     (int64_t)req->start->timeout_ms > row.expires_at_ms - now))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "timeout_ms",
				     "timeout_ms must be 1..%lld (the time left in the session); "
				     "leave it out to run until the sandbox ends",
				     (long long)(row.expires_at_ms - now));
	if (req->op == SANDBOX_PROC_SIGNAL && req->signal != 2 && req->signal != 9 &&
	    req->signal != 15)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "signal",
				     "signal must be \"INT\", \"KILL\" or \"TERM\"");
	if (x) {
		areq.command = x->command;
		areq.command_len = x->command_len;
		areq.cwd = x->cwd;
		areq.env = x->env;
		areq.n_env = x->n_env;
		areq.has_timeout = x->has_timeout;
		areq.timeout_ms = x->timeout_ms;
	}
	/* the reply, JSON-encoded at its worst, until the caller sent it */
	if (req->hold) {
		sandbox_output_hold_init(req->hold, svc->output, account_id);
		if (sandbox_output_charge(
			req->hold, 2 * (uint64_t)SANDBOX_PROC_CHUNK * SANDBOX_REPLY_COST_UTF8,
			SANDBOX_OUTPUT_WITHIN, &sandbox_exec_output_words, err) < 0)
			return -1;
	}
	call = calloc(1, sizeof(*call));
	if (!call) {
		sandbox_output_release(req->hold);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	}
	call->done = done;
	call->opaque = opaque;
	call->op = req->op;
	call->max_procs = cfg->max_processes_per_sandbox;

	l = sandbox_pin(svc, id, err);
	if (!l) {
		free(call);
		sandbox_output_release(req->hold);
		return -1;
	}
	rc = agentless_proc(l->conn, &areq, proc_done, call, err);
	/* ended between the pin and the call (its channel closed): as if
	 * the pin had come after the end */
	if (rc < 0 && fleet_guest_over(l))
		fleet_guest_usable(l, id, err);
	fleet_live_unpin(l);
	if (rc < 0) {
		free(call);
		sandbox_output_release(req->hold);
		return -1;
	}
	return 0;
}
