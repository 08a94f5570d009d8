/* sandbox/exec.c: the exec use case (POST /v1/sandboxes/{id}/exec); its
 * replies draw on the output budget (budget.c).
 *
 * 1. check the sandbox and the timeout, hold the start's share of the
 *    output budget, pin the live only while the exec starts;
 * 2. the guest's answer (struct agentless_exec_result) comes back on
 *    whichever thread finished it (the channel's thread, the timer, an
 *    ender) with no sandbox lock held: host_ms clamped to the timeout, a
 *    receipt signed from the result's own bytes when asked for;
 * 3. the same value is handed to the caller's done, moved, not copied
 *    (api/ stores it in its request's completion and renders it on its
 *    own thread). A failure asks the guest only how the sandbox ended.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../agentless/agentless.h"
#include "../receipt/receipt.h"
#include "../store/store.h"
#include "sandbox-priv.h"

#define MOD "sandbox"

#define EXEC_CWD "/home/sandbox" /* an exec's cwd unless it names one */

const struct sandbox_output_words sandbox_exec_output_words = {
    .account = "the output of this account's running commands would pass its buffer budget "
	       "(%llu MiB); wait for one to finish",
    .host = "this node is buffering too much command output right now; retry shortly",
};

/* ------------------------------------------------------------------ exec */

char *sandbox_exec_stream_text(const char *buf, size_t len, bool base64, bool cut, size_t *out_len)
{
	char *enc;

	if (!buf)
		len = 0;
	if (!base64)
		return sbx_utf8_sanitize(buf ? buf : "", len, cut, out_len);
	enc = sbx_base64_encode(buf ? buf : "", len);
	*out_len = enc ? strlen(enc) : 0;
	return enc;
}

/* Sign and store the receipt of one exec (sandbox.h struct
 * sandbox_exec_receipt): out/errs are the streams as the reply carries
 * them. 0, or -1 with err. */
static int exec_receipt_sign(struct sandbox_svc *svc, const char *account_id,
			     const char *sandbox_id, const struct sandbox_exec_req *req,
			     int exit_code, const char *out, size_t out_len, const char *errs,
			     size_t errs_len, uint32_t host_ms, bool timed_out,
			     struct sandbox_exec_receipt *r, struct sbx_error *err)
{
	struct receipt_signer *sg = sandbox_receipt_signer(svc, err);
	struct receipt_json *in, *env, *outj, *body;
	char fin[RECEIPT_HEX32_LEN], fout[RECEIPT_HEX32_LEN], ts_start[32], ts_end[32];
	const char *cwd = req->cwd ? req->cwd : EXEC_CWD;
	int64_t ended = sbx_wall_ms(), started = ended - (int64_t)host_ms;
	char *canon = NULL;
	int rc = -1;

	if (!sg)
		return -1;
	memset(r, 0, sizeof(*r));
	if (sbx_random_id("rcpt_", 12, r->id, sizeof r->id) < 0 ||
	    receipt_salt_new(r->salt, err) < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "no randomness available");
	in = receipt_json_object();
	receipt_json_set_str(in, "command", req->command, strlen(req->command));
	receipt_json_set_str(in, "cwd", cwd, strlen(cwd));
	env = receipt_json_object();
	for (size_t i = 0; i < req->n_env; i++) {
		const char *eq = strchr(req->env[i], '=');
		char key[256];

		if (!eq || (size_t)(eq - req->env[i]) >= sizeof key)
			continue;
		snprintf(key, sizeof key, "%.*s", (int)(eq - req->env[i]), req->env[i]);
		receipt_json_set_str(env, key, eq + 1, strlen(eq + 1));
	}
	receipt_json_set_obj(in, "env", env);
	outj = receipt_json_object();
	receipt_json_set_int(outj, "exit_code", exit_code);
	receipt_json_set_str(outj, "stdout", out, out_len);
	receipt_json_set_str(outj, "stderr", errs, errs_len);
	body = receipt_json_object();
	if (receipt_fingerprint(r->salt, in, fin, err) < 0 ||
	    receipt_fingerprint(r->salt, outj, fout, err) < 0)
		goto out;
	sbx_rfc3339(started, ts_start);
	sbx_rfc3339(ended, ts_end);
	receipt_json_set_str(body, "id", r->id, strlen(r->id));
	receipt_json_set_str(body, "object", "receipt", 7);
	receipt_json_set_int(body, "version", 1);
	receipt_json_set_str(body, "operation", "sandbox.exec", 12);
	receipt_json_set_str(body, "sandbox_id", sandbox_id, strlen(sandbox_id));
	receipt_json_set_str(body, "account_id", account_id, strlen(account_id));
	receipt_json_set_null(body, "model");
	receipt_json_set_str(body, "status", timed_out ? "timed_out" : "completed", 9);
	receipt_json_set_int(body, "input_tokens", 0);
	receipt_json_set_int(body, "output_tokens", 0);
	receipt_json_set_int(body, "latency_ms", host_ms);
	receipt_json_set_str(body, "input_fingerprint", fin, strlen(fin));
	receipt_json_set_str(body, "output_fingerprint", fout, strlen(fout));
	/* the sandbox's seconds are billed with the sandbox, not per exec */
	receipt_json_set_int(body, "cost_micro_usd", 0);
	receipt_json_set_str(body, "started_at", ts_start, strlen(ts_start));
	receipt_json_set_str(body, "completed_at", ts_end, strlen(ts_end));
	receipt_json_set_str(body, "signer", receipt_signer_public(sg),
			     strlen(receipt_signer_public(sg)));
	if (!(canon = receipt_sign(sg, body, r->hash, r->signature, err)))
		goto out;
	snprintf(r->signer, sizeof r->signer, "%s", receipt_signer_public(sg));
	struct store_receipt_keep keep = sandbox_receipt_keep(&svc->cfg, ended);
	if (store_receipt_insert(svc->store, r->id, account_id, sandbox_id, canon, r->hash,
				 r->signature, r->signer, ended, &keep, err) < 0)
		goto out;
	rc = 0;
out:
	free(canon);
	receipt_json_free(in);
	receipt_json_free(outj);
	receipt_json_free(body);
	return rc;
}

struct exec_call {
	struct sandbox_svc *svc;
	sandbox_exec_done_fn done;
	sandbox_exec_output_fn on_output;
	void (*on_pty_ack)(void *opaque);
	void *opaque;
	/* The guest it runs on: a ref of the call's own, dropped when the
	 * call is freed (after done). */
	struct fleet_guest *l;
	/* The budget held for the reply: the caller's (req->hold), given back
	 * by the caller, or own_hold, given back after done returns. */
	struct sandbox_output_hold own_hold;
	bool own;
	struct sandbox_output_hold *hold; /* the one in use (own_hold or the caller's) */
	unsigned cost;			  /* budget bytes per output byte (buffered) */
	uint32_t timeout_ms;		  /* the timeout the exec runs with (host_ms's bound) */
	/* with a receipt: the caller's request (valid until done) */
	const struct sandbox_exec_req *receipt_req;
	char account_id[SANDBOX_ID_MAX];
	/* A terminal: its id in the guest and its place in svc->terminals
	 * (under svc->lock, while listed). Two refs (atomic): the starter's
	 * until it listed the call, done's until it ran. */
	uint32_t exec_id;
	bool pty, listed, ended;
	struct exec_call *tnext;
	int refs;
};

static void exec_call_put(struct exec_call *call)
{
	if (__atomic_sub_fetch(&call->refs, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	if (call->own)
		sandbox_output_release(&call->own_hold);
	fleet_guest_unref(call->l);
	free(call);
}

/* ---------------------------------------------------------- terminals */

/* List a started terminal (unless it already ended). svc->lock taken. */
static void terminal_list(struct exec_call *call, uint32_t exec_id)
{
	struct sandbox_svc *svc = call->svc;

	pthread_mutex_lock(&svc->lock);
	if (!call->ended) {
		call->exec_id = exec_id;
		call->listed = true;
		call->tnext = svc->terminals;
		svc->terminals = call;
	}
	pthread_mutex_unlock(&svc->lock);
}

/* It ended: out of the list, and a pause waiting for it is woken. */
static void terminal_ended(struct exec_call *call)
{
	struct sandbox_svc *svc = call->svc;

	pthread_mutex_lock(&svc->lock);
	call->ended = true;
	if (call->listed) {
		for (struct exec_call **pp = &svc->terminals; *pp; pp = &(*pp)->tnext) {
			if (*pp == call) {
				*pp = call->tnext;
				break;
			}
		}
		call->listed = false;
		pthread_cond_broadcast(&svc->term_cond);
	}
	pthread_mutex_unlock(&svc->lock);
}

/* The terminals of guest g still listed; up to cap exec ids into ids. */
static size_t terminals_of(struct sandbox_svc *svc, struct fleet_guest *g, uint32_t *ids,
			   size_t cap)
{
	size_t n = 0;

	for (struct exec_call *c = svc->terminals; c; c = c->tnext) {
		if (c->l != g)
			continue;
		if (ids && n < cap)
			ids[n] = c->exec_id;
		n++;
	}
	return n;
}

size_t sandbox_terminals_hangup(struct sandbox_svc *svc, struct fleet_guest *g,
				int64_t deadline_mono)
{
	uint32_t ids[64];
	size_t n, left;

	pthread_mutex_lock(&svc->lock);
	n = terminals_of(svc, g, ids, sizeof(ids) / sizeof(ids[0]));
	pthread_mutex_unlock(&svc->lock);
	if (!n)
		return 0;
	/* KILL each (never blocks): the guest sends SIGHUP, then kills the
	 * terminal's cgroup, and answers with its EXIT */
	for (size_t i = 0; i < n && i < sizeof(ids) / sizeof(ids[0]); i++)
		agentless_pty_hangup(g->conn, ids[i]);
	pthread_mutex_lock(&svc->lock);
	while ((left = terminals_of(svc, g, NULL, 0)) > 0) {
		struct timespec ts = {.tv_sec = deadline_mono / 1000,
				      .tv_nsec = (long)(deadline_mono % 1000) * 1000000L};

		if (pthread_cond_timedwait(&svc->term_cond, &svc->lock, &ts) != 0)
			break;
	}
	left = terminals_of(svc, g, NULL, 0);
	pthread_mutex_unlock(&svc->lock);
	sbx_info(MOD, "sandbox %s: %zu terminal(s) hung up before the pause, %zu not ended", g->id,
		 n, left);
	return left;
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
static void exec_pty_ack(void *opaque)
{
	struct exec_call *call = opaque;

	call->on_pty_ack(call->opaque);
}

static bool exec_charge(void *opaque, bool is_stderr, size_t len)
{
	struct exec_call *call = opaque;

	return sandbox_output_charge(call->hold, (uint64_t)len * call->cost, SANDBOX_OUTPUT_WITHIN,
				     NULL, NULL) == 0;
}

/* The error an exec that ended without a result answers: cut short
 * because the sandbox expired or was deleted (410, not broken: 500), or
 * because the host's connection went (503: the sandbox survives it,
 * docs/hosts.md; this command's outcome is unknown). *e is the storage. */
static const struct sbx_error *exec_failure(struct exec_call *call, const struct sbx_error *aerr,
					    struct sbx_error *e)
{
	enum fleet_end ending = fleet_guest_end_why(call->l);

	if (ending == FLEET_END_PAUSED) {
		sbx_error_clear(e);
		sbx_error_set(e, SBX_E_SANDBOX_PAUSED, NULL,
			      "sandbox '%s' was paused while the command ran; its outcome is "
			      "unknown",
			      call->l->id);
		return e;
	}

	if (ending == FLEET_END_EXPIRED || ending == FLEET_END_DELETED) {
		sbx_error_clear(e);
		sbx_error_set(e, SBX_E_SANDBOX_NOT_RUNNING, NULL,
			      "sandbox '%s' %s while the command ran; create a new one",
			      call->l->id, ending == FLEET_END_EXPIRED ? "expired" : "was deleted");
		return e;
	}
	if (aerr && aerr->code == SBX_E_SANDBOX_ERROR && fleet_guest_host_lost(call->l)) {
		sbx_error_clear(e);
		sbx_error_set(e, SBX_E_SERVICE_UNAVAILABLE, NULL,
			      "the connection to the host of sandbox '%s' was lost while the "
			      "command ran; its outcome is unknown; the sandbox keeps "
			      "running",
			      call->l->id);
		e->retry_after_s = 2;
		return e;
	}
	return aerr;
}

/* Sign the receipt of res from its own bytes, encoded as the reply will
 * carry them. 0, or -1 with err (500: the command ran, its receipt could
 * not be signed). */
static int exec_receipt(struct exec_call *call, const struct agentless_exec_result *res,
			struct sandbox_exec_receipt *rc, struct sbx_error *err)
{
	const struct sandbox_exec_req *req = call->receipt_req;
	size_t out_len = 0, errs_len = 0;
	char *out = sandbox_exec_stream_text(res->stdout_buf, res->stdout_len, req->base64,
					     res->truncated, &out_len);
	char *errs = sandbox_exec_stream_text(res->stderr_buf, res->stderr_len, req->base64,
					      res->truncated, &errs_len);
	int rc_ = -1;

	sbx_error_clear(err);
	if (!out || !errs)
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	else
		rc_ = exec_receipt_sign(call->svc, call->account_id, call->l->id, req,
					res->exit_code, out, out_len, errs, errs_len, res->host_ms,
					res->timed_out, rc, err);
	free(out);
	free(errs);
	if (rc_ < 0) {
		sbx_warn(MOD, "sandbox %s: exec receipt: %s", call->l->id, err->message);
		sbx_error_clear(err);
		sbx_error_set(err, SBX_E_INTERNAL, NULL,
			      "the command ran but its receipt could not be signed");
	}
	return rc_;
}

/* agentless_exec_done_fn: the result goes up as it came (host_ms clamped),
 * its receipt signed first when asked for. */
static void exec_done(void *opaque, struct agentless_exec_result *res, const struct sbx_error *aerr)
{
	struct exec_call *call = opaque;
	struct sandbox_exec_receipt rc;
	struct sbx_error e;

	if (call->pty)
		terminal_ended(call);
	/* a terminal a pause hung up: the client is told the sandbox was
	 * paused, as for one whose channel the pause closed */
	if (res && call->pty && fleet_guest_end_why(call->l) == FLEET_END_PAUSED) {
		agentless_exec_result_release(res);
		res = NULL;
	}
	if (!res) {
		call->done(call->opaque, NULL, NULL, exec_failure(call, aerr, &e));
		exec_call_put(call);
		return;
	}
	/* the time the exec could run at most: the timeout it ran with */
	res->host_ms = SBX_MIN(res->host_ms, call->timeout_ms);
	if (call->receipt_req && exec_receipt(call, res, &rc, &e) < 0) {
		agentless_exec_result_release(res);
		call->done(call->opaque, NULL, NULL, &e);
	} else {
		call->done(call->opaque, res, call->receipt_req ? &rc : NULL, NULL);
	}
	exec_call_put(call);
}

int sandbox_exec_start(struct sandbox_svc *svc, const char *account_id, const char *id,
		       const struct sandbox_exec_req *req, sandbox_exec_done_fn done, void *opaque,
		       struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	struct store_sandbox row;
	struct exec_call *call;
	struct sandbox_output_hold *hold;
	struct fleet_guest *l;
	int64_t now = sbx_wall_ms(), left_ms;
	uint32_t timeout, exec_id = 0;
	int rc;

	if (sandbox_running_row(svc, account_id, id, now, &row, err) < 0)
		return -1;
	left_ms = row.expires_at_ms - now;
	if (req->pty_rows) {
		/* a terminal lasts the session, less a margin for its EXIT */
		timeout = (uint32_t)SBX_MAX(
		    (int64_t)1, SBX_MIN((int64_t)UINT32_MAX / 2,
					left_ms - (left_ms > 2000 ? 1000 : left_ms / 2)));
	} else if (req->has_timeout) {
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
	    .pty_rows = req->pty_rows,
	    .pty_cols = req->pty_cols,
	    .on_pty_ack = req->on_pty_ack ? exec_pty_ack : NULL,
	    .id_out = req->exec_id ? req->exec_id : &exec_id,
	};
	call = calloc(1, sizeof(*call));
	if (!call)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	call->svc = svc;
	call->done = done;
	call->on_output = req->on_output;
	call->on_pty_ack = req->on_pty_ack;
	call->pty = req->pty_rows != 0;
	call->refs = call->pty ? 2 : 1; /* a terminal: the starter lists it */
	call->opaque = opaque;
	call->timeout_ms = timeout;
	if (req->receipt && !req->on_output)
		call->receipt_req = req;
	snprintf(call->account_id, sizeof(call->account_id), "%s", account_id);
	call->own = !req->hold;
	hold = req->hold ? req->hold : &call->own_hold;
	call->hold = hold;
	call->cost = req->base64 ? SANDBOX_REPLY_COST_BASE64 : SANDBOX_REPLY_COST_UTF8;
	/* the start's share; the output's is charged as it arrives */
	sandbox_output_hold_init(hold, svc->output, account_id);
	if (sandbox_output_charge(hold, SANDBOX_EXEC_HOLD_START, SANDBOX_OUTPUT_WITHIN,
				  &sandbox_exec_output_words, err) < 0) {
		free(call);
		return -1;
	}

	l = sandbox_pin(svc, id, err);
	if (!l) {
		sandbox_output_release(hold);
		free(call);
		return -1;
	}
	call->l = l; /* the pin becomes the call's ref */
	rc = agentless_exec_start(l->conn, &areq, exec_done, call, err);
	if (rc < 0) {
		/* ended between the pin and the start (its channel closed):
		 * as if the pin had come after the end */
		if (fleet_guest_over(l))
			fleet_guest_usable(l, id, err);
		fleet_live_unpin(l);
		sandbox_output_release(hold);
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
	if (call->pty) {
		terminal_list(call, *areq.id_out);
		exec_call_put(call);
	}
	return 0;
}

void sandbox_exec_resume(struct sandbox_svc *svc, const char *sandbox_id, uint32_t exec_id)
{
	struct fleet_guest *l = sandbox_pin(svc, sandbox_id, NULL);

	if (!l)
		return;
	agentless_exec_resume(l->conn, exec_id);
	fleet_live_unpin(l);
}

long sandbox_pty_write(struct sandbox_svc *svc, const char *sandbox_id, uint32_t exec_id,
		       const void *data, size_t len)
{
	struct fleet_guest *l = sandbox_pin(svc, sandbox_id, NULL);
	long n;

	if (!l)
		return -1;
	n = agentless_pty_write(l->conn, exec_id, data, len);
	fleet_live_unpin(l);
	return n;
}

int sandbox_pty_resize(struct sandbox_svc *svc, const char *sandbox_id, uint32_t exec_id,
		       uint32_t rows, uint32_t cols)
{
	struct fleet_guest *l = sandbox_pin(svc, sandbox_id, NULL);
	int rc;

	if (!l)
		return -1;
	rc = agentless_pty_resize(l->conn, exec_id, rows, cols);
	fleet_live_unpin(l);
	return rc;
}

void sandbox_pty_hangup(struct sandbox_svc *svc, const char *sandbox_id, uint32_t exec_id)
{
	struct fleet_guest *l = sandbox_pin(svc, sandbox_id, NULL);

	if (!l)
		return;
	agentless_pty_hangup(l->conn, exec_id);
	fleet_live_unpin(l);
}
