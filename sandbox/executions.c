/* executions: one-shot executions with signed receipts (issue 8), the use
 * case. See sandbox.h, docs/api.md and docs/receipts.md; the runtimes, the
 * runners and the execution pool beneath it are execution.c.
 *
 * The steps: check the request -> hold the cost of the whole timeout -> run
 * (a guest from the execution pool, else a boot; the code on stdin) ->
 * sign the receipt -> render the 200 body (api/'s renderer, called here:
 * sandbox.h says why) -> charge the started seconds and release the rest
 * (one transaction, with the stored response and the receipt) -> return
 * the plain result, while the guest is still being torn down. A run that
 * could not happen releases the whole hold. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../billing/billing.h"
#include "../receipt/receipt.h"
#include "../store/store.h"
#include "sandbox-priv.h"
#include "sandbox.h"

#define MOD "execution"

/* ------------------------------------------------------------ statuses */

/* ------------------------------------------------------------ the use case */

/* Everything one execution carries from step to step. */
struct xrun {
	const struct sandbox_execution_req *req;
	const struct sandbox_runtime *rt;
	const char *account_id;
	sandbox_execution_render_fn render;
	struct sandbox_execution_result *out; /* the caller's: what it ran */
	struct store_execution row;
	struct sandbox_run_result res;
	char *canon_body;   /* the signed receipt body */
	char *canon_stored; /* what the database keeps, when it differs */
	int64_t price, started, ended;
	int64_t t_req, t_reserved, t_signed; /* mono ms, for the steps' log */
};

static void xrun_release(struct xrun *x)
{
	free(x->canon_body);
	free(x->canon_stored);
	sandbox_run_result_release(&x->res);
}

void sandbox_execution_result_release(struct sandbox_execution_result *res)
{
	free(res->out);
	free(res->err);
	free(res->body);
	memset(res, 0, sizeof(*res));
}

/* Step 1: room on the disk, the ids, and the hold of the whole timeout. */
static int xrun_hold(struct sandbox_svc *svc, struct xrun *x, struct sbx_error *err)
{
	struct sandbox_exec_receipt *rc = &x->out->receipt;

	/* A warm guest is admitted already; the disk must still leave the
	 * ledger its room before anything is written for this run. */
	bool disk_ok = !svc->fleet || fleet_disk_fits(svc->fleet); /* admin: no guest */
	if (!disk_ok) {
		sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
			      "this node is low on disk space; retry later");
		err->retry_after_s = 30;
		return -1;
	}
	if (sbx_random_id("sbxr_", 12, x->row.id, sizeof x->row.id) < 0 ||
	    sbx_random_id("rcpt_", 12, rc->id, sizeof rc->id) < 0 ||
	    receipt_salt_new(rc->salt, err) < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "no randomness available");
	snprintf(x->out->id, sizeof x->out->id, "%s", x->row.id);
	snprintf(x->row.account_id, sizeof x->row.account_id, "%s", x->account_id);
	snprintf(x->row.runtime, sizeof x->row.runtime, "%s", sandbox_runtime_name(x->rt));
	snprintf(x->row.runner, sizeof x->row.runner, "%s", config_runner_name(x->out->runner));
	x->row.timeout_seconds = x->req->timeout_seconds;
	if (sandbox_metadata_json(x->req->metadata, false, x->out->metadata,
				  sizeof x->out->metadata) < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "metadata",
				     "metadata is too large");
	snprintf(x->row.metadata, sizeof x->row.metadata, "%s", x->out->metadata);
	x->row.price_micro_per_second = x->price;
	x->row.requested_at_ms = x->started = sbx_wall_ms();
	if (store_execution_reserve(svc->store, &x->row,
				    billing_execution_hold(x->price, x->req->timeout_seconds),
				    err) < 0)
		return -1;
	x->t_reserved = sbx_mono_ms();
	return 0;
}

/* Step 3: the streams as returned (into the result), their fingerprints,
 * the signed receipt body. */
static int xrun_sign(struct sandbox_svc *svc, struct xrun *x, struct sbx_error *err)
{
	const struct sandbox_run_result *res = &x->res;
	struct sandbox_execution_result *o = x->out;
	const char *status = sandbox_execution_status_name(o->status);
	const char *runner = config_runner_name(o->runner);
	const char *signer = receipt_signer_public(svc->signer);
	struct receipt_json *in, *outj, *body;
	char fin[RECEIPT_HEX32_LEN], fout[RECEIPT_HEX32_LEN], ts_start[32], ts_end[32];
	int rc = -1;

	o->exit_code = res->exit_code;
	o->duration_ms = res->duration_ms;
	o->billed_ms = res->host_ms;
	o->out_truncated = res->out_total > res->out_len;
	o->err_truncated = res->err_total > res->err_len;
	o->out = sbx_utf8_sanitize(res->out, res->out_len, o->out_truncated, &o->out_len);
	o->err = sbx_utf8_sanitize(res->errb, res->err_len, o->err_truncated, &o->err_len);
	snprintf(o->receipt.signer, sizeof o->receipt.signer, "%s", signer);
	if (!o->out || !o->err)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	in = receipt_json_object();
	receipt_json_set_str(in, "code", x->req->code, x->req->code_len);
	receipt_json_set_str(in, "runtime", sandbox_runtime_name(x->rt),
			     strlen(sandbox_runtime_name(x->rt)));
	outj = receipt_json_object();
	receipt_json_set_int(outj, "exit_code", res->exit_code);
	receipt_json_set_str(outj, "stdout", o->out, o->out_len);
	receipt_json_set_str(outj, "stderr", o->err, o->err_len);
	body = receipt_json_object();
	if (receipt_fingerprint(o->receipt.salt, in, fin, err) < 0 ||
	    receipt_fingerprint(o->receipt.salt, outj, fout, err) < 0) {
		if (err->param[0] == '\0')
			err->code = SBX_E_INVALID_REQUEST,
			snprintf(err->param, sizeof err->param, "code");
		goto out;
	}
	sbx_rfc3339(x->started, ts_start);
	sbx_rfc3339(x->ended, ts_end);
	receipt_json_set_str(body, "id", o->receipt.id, strlen(o->receipt.id));
	receipt_json_set_str(body, "object", "receipt", 7);
	receipt_json_set_int(body, "version", 1);
	receipt_json_set_str(body, "operation", "sandbox.execute", 15);
	receipt_json_set_str(body, "execution_id", x->row.id, strlen(x->row.id));
	receipt_json_set_str(body, "account_id", x->account_id, strlen(x->account_id));
	receipt_json_set_null(body, "model");
	receipt_json_set_str(body, "runtime", sandbox_runtime_name(x->rt),
			     strlen(sandbox_runtime_name(x->rt)));
	receipt_json_set_str(body, "runner", runner, strlen(runner));
	receipt_json_set_str(body, "status", status, strlen(status));
	receipt_json_set_int(body, "input_tokens", 0);
	receipt_json_set_int(body, "output_tokens", 0);
	receipt_json_set_int(body, "latency_ms", res->host_ms);
	receipt_json_set_str(body, "input_fingerprint", fin, strlen(fin));
	receipt_json_set_str(body, "output_fingerprint", fout, strlen(fout));
	receipt_json_set_int(body, "cost_micro_usd", o->cost_micro);
	receipt_json_set_str(body, "started_at", ts_start, strlen(ts_start));
	receipt_json_set_str(body, "completed_at", ts_end, strlen(ts_end));
	receipt_json_set_str(body, "signer", signer, strlen(signer));
	if (!(x->canon_body =
		  receipt_sign(svc->signer, body, o->receipt.hash, o->receipt.signature, err)))
		goto out;
	x->t_signed = sbx_mono_ms();
	rc = 0;
out:
	receipt_json_free(in);
	receipt_json_free(outj);
	receipt_json_free(body);
	return rc;
}

/* Step 4: the 200 body (api/'s renderer: sandbox.h says why it is called
 * here), and what the database keeps of it: the same bytes, unless they
 * pass execution_store_max_bytes; then a second render of the head of
 * each stream (1/16 of the cap: JSON escapes at most 6 bytes per byte) and
 * stored_truncated. */
static int xrun_render(struct sandbox_svc *svc, struct xrun *x, struct sbx_error *err)
{
	size_t cap = svc->cfg.execution_store_max_bytes, keep = cap / 16, n;
	struct sandbox_execution_result *o = x->out, st;
	int rc = -1;

	if (!(o->body = x->render(o, &o->body_len, err)))
		return -1;
	if (o->body_len <= cap)
		return 0;
	st = *o;
	st.body = NULL;
	st.stored_truncated = true;
	st.out = sbx_utf8_sanitize(o->out, SBX_MIN(keep, o->out_len), true, &st.out_len);
	st.err = sbx_utf8_sanitize(o->err, SBX_MIN(keep, o->err_len), true, &st.err_len);
	if (!st.out || !st.err)
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	else if ((x->canon_stored = x->render(&st, &n, err)))
		rc = 0;
	free(st.out);
	free(st.err);
	return rc;
}

/* Step 5: receipt, charge + release + response in one transaction (which
 * also drops what retention no longer keeps): one commit. */
static int xrun_store(struct sandbox_svc *svc, struct xrun *x, struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	const struct sandbox_execution_result *o = x->out;
	struct store_receipt_keep rkeep = sandbox_receipt_keep(cfg, x->ended);
	struct store_execution_keep keep = {
	    .account_max_bytes = cfg->execution_store_account_max_bytes,
	    .ended_before_ms = x->ended - (int64_t)cfg->execution_retention_hours * 3600 * 1000,
	    .receipts = &rkeep,
	};
	struct store_receipt sr = {
	    .id = o->receipt.id,
	    .account_id = x->account_id,
	    .body = x->canon_body,
	    .hash = o->receipt.hash,
	    .signature = o->receipt.signature,
	    .signer = o->receipt.signer,
	    .created_at_ms = x->ended,
	};

	if (store_execution_settle_receipt(
		svc->store, x->row.id, sandbox_execution_status_name(o->status), x->ended,
		o->cost_micro, &sr, x->canon_stored ? x->canon_stored : o->body, &keep, err) < 0)
		return -1;
	if (o->runner == CONFIG_RUNNER_LIBVIRT) {
		pthread_mutex_lock(&svc->lock);
		sandbox_execution_record_locked(svc, o->warm, o->prestarted,
						sbx_mono_ms() - x->t_req);
		pthread_mutex_unlock(&svc->lock);
	}
	return 0;
}

static void xrun_log(const struct xrun *x)
{
	const struct sandbox_run_result *res = &x->res;
	const struct sandbox_execution_result *o = x->out;
	int64_t t_stored = sbx_mono_ms();

	sbx_info(MOD, "execution %s: %s %s exit %d in %u ms (guest says %u; %s), %lld micro-USD",
		 x->row.id, config_runner_name(o->runner), sandbox_runtime_name(x->rt),
		 res->exit_code, res->host_ms, res->duration_ms,
		 o->prestarted ? "warm, interpreter waiting"
		 : o->warm     ? "warm"
			       : "cold",
		 (long long)o->cost_micro);
	if (res->t_guest)
		sbx_info(MOD,
			 "execution %s: steps (ms) reserve %lld, guest %lld, deliver %lld, "
			 "run %lld, receipt %lld, store %lld; %lld in all",
			 x->row.id, (long long)(x->t_reserved - x->t_req),
			 (long long)(res->t_guest - x->t_reserved),
			 (long long)(res->t_delivered - res->t_guest),
			 (long long)(res->t_result - res->t_delivered),
			 (long long)(x->t_signed - res->t_result),
			 (long long)(t_stored - x->t_signed), (long long)(t_stored - x->t_req));
}

int sandbox_execution_run(struct sandbox_svc *svc, const char *account_id,
			  const struct sandbox_execution_req *req,
			  sandbox_execution_render_fn render, struct sandbox_execution_result *out,
			  struct sbx_error *err)
{
	struct xrun x = {
	    .req = req,
	    .account_id = account_id,
	    .render = render,
	    .out = out,
	    .price = (int64_t)svc->cfg.execution_price_micro_per_second,
	    .t_req = sbx_mono_ms(),
	};

	memset(out, 0, sizeof(*out));
	out->runner = sandbox_execution_runner(&svc->cfg);
	/* 1. Check the request; hold the cost of the whole timeout. */
	if (sandbox_execution_check_req(&svc->cfg, req, &x.rt, err) < 0 ||
	    xrun_hold(svc, &x, err) < 0)
		return -1;

	/* 2. Run. */
	if (sandbox_execution_runner_run(svc, x.row.id, x.rt, req, &x.res, &out->warm,
					 &out->prestarted, err) < 0) {
		x.ended = sbx_wall_ms();
		/* A run the guest broke is charged for the time it used; one
		 * that could not start (no capacity, no boot) costs nothing. */
		out->cost_micro =
		    x.res.guest_failed
			? billing_execution_cost(x.res.host_ms, x.price, req->timeout_seconds)
			: 0;
		sbx_warn(MOD, "execution %s: could not run: %s (%s, charged %lld micro-USD)",
			 x.row.id, err->message,
			 x.res.guest_failed ? "the guest broke it" : "it did not start",
			 (long long)out->cost_micro);
		sandbox_execution_settle(svc, x.row.id, SANDBOX_EXECUTION_FAILED, x.ended,
					 out->cost_micro);
		xrun_release(&x);
		sandbox_execution_result_release(out);
		return -1;
	}

	x.ended = sbx_wall_ms();
	/* 3. The result as returned, its fingerprints, the receipt; 4. the
	 * 200 body; 5. one commit. From here every end is billed the host
	 * time the run used. */
	out->cost_micro = billing_execution_cost(x.res.host_ms, x.price, req->timeout_seconds);
	out->status = x.res.timed_out ? SANDBOX_EXECUTION_TIMED_OUT : SANDBOX_EXECUTION_COMPLETED;
	if (xrun_sign(svc, &x, err) < 0 || xrun_render(svc, &x, err) < 0 ||
	    xrun_store(svc, &x, err) < 0) {
		/* the code ran: what went wrong after it is the host's, the
		 * time the guest used is still billed (docs/billing.md) */
		sbx_warn(MOD, "execution %s: failed after the run: %s (charged %lld micro-USD)",
			 x.row.id, err->message, (long long)out->cost_micro);
		sandbox_execution_settle(svc, x.row.id, SANDBOX_EXECUTION_FAILED, x.ended,
					 out->cost_micro);
		xrun_release(&x);
		sandbox_execution_result_release(out);
		return -1;
	}
	xrun_log(&x);
	xrun_release(&x);
	return 0;
}

int sandbox_execution_get(struct sandbox_svc *svc, const char *account_id, const char *id,
			  char **response, struct sbx_error *err)
{
	struct store_execution row;

	if (store_execution_get(svc->store, account_id, id, &row, err) < 0)
		return -1;
	if (!row.response && sandbox_execution_status_of(row.status) == SANDBOX_EXECUTION_RUNNING)
		return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such execution '%.40s'", id);
	if (!row.response)
		return sbx_error_set(
		    err, SBX_E_NOT_FOUND, NULL,
		    "the result of execution '%.40s' is no longer stored (results "
		    "are kept %d hours, at most %llu bytes per account)",
		    id, svc->cfg.execution_retention_hours,
		    (unsigned long long)svc->cfg.execution_store_account_max_bytes);
	*response = row.response;
	return 0;
}

int sandbox_execution_list(struct sandbox_svc *svc, const char *account_id, int limit,
			   struct sandbox_execution_view **out, size_t *n, bool *has_more,
			   struct sbx_error *err)
{
	_cleanup_free_ struct store_execution *rows = NULL;
	size_t count = 0;

	if (store_execution_list(svc->store, account_id, limit, &rows, &count, has_more, err) < 0)
		return -1;
	*out = calloc(count ? count : 1, sizeof(**out));
	if (!*out)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	for (size_t i = 0; i < count; i++) {
		struct sandbox_execution_view *v = &(*out)[i];

		snprintf(v->id, sizeof(v->id), "%s", rows[i].id);
		snprintf(v->runtime, sizeof(v->runtime), "%s", rows[i].runtime);
		v->status = sandbox_execution_status_of(rows[i].status);
		snprintf(v->receipt_id, sizeof(v->receipt_id), "%s", rows[i].receipt_id);
		v->requested_at_ms = rows[i].requested_at_ms;
		v->ended_at_ms = rows[i].ended_at_ms;
		v->cost_micro = rows[i].charge_micro;
		v->has_exit_code = rows[i].has_exit_code;
		v->exit_code = rows[i].exit_code;
	}
	*n = count;
	return 0;
}
