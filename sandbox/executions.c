/* executions: one-shot executions with signed receipts (issue 8), the use
 * case. See sandbox.h, docs/api.md and docs/receipts.md; the runtimes, the
 * runners and the execution pool beneath it are execution.c.
 *
 * The steps: check the request -> hold the cost of the whole timeout -> run
 * (a guest from the execution pool, else a boot; the code on stdin) ->
 * sign the receipt -> render the 200 body -> charge the started seconds and
 * release the rest (one transaction, with the stored response and the
 * receipt) -> reply, while the guest is still being torn down. A run that
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

static const char *const status_names[] = {
    [SANDBOX_EXECUTION_RUNNING] = "running",
    [SANDBOX_EXECUTION_COMPLETED] = "completed",
    [SANDBOX_EXECUTION_TIMED_OUT] = "timed_out",
    [SANDBOX_EXECUTION_FAILED] = "failed",
};

const char *sandbox_execution_status_name(enum sandbox_execution_status status)
{
	return (size_t)status < SBX_ARRAY_SIZE(status_names) ? status_names[status] : "failed";
}

enum sandbox_execution_status sandbox_execution_status_of(const char *name)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(status_names); i++)
		if (strcmp(name, status_names[i]) == 0)
			return (enum sandbox_execution_status)i;
	return SANDBOX_EXECUTION_FAILED;
}

/* ------------------------------------------------------------ the use case */

/* Everything one execution carries from step to step. */
struct xrun {
	const struct sandbox_execution_req *req;
	const struct sandbox_runtime *rt;
	const char *runner, *account_id;
	struct store_execution row;
	struct sandbox_run_result res;
	char salt[RECEIPT_HEX32_LEN], hash[RECEIPT_HEX32_LEN], sig[RECEIPT_SIG_HEX_LEN],
	    rcpt[SANDBOX_ID_MAX];
	char *sout, *serr; /* the streams as returned */
	size_t sout_len, serr_len;
	bool out_trunc, err_trunc, warm, prestarted;
	char *canon_body;   /* the signed receipt body */
	char *canon_resp;   /* the 200 body */
	char *canon_stored; /* what the database keeps, when it differs */
	int64_t price, started, ended, cost;
	enum sandbox_execution_status status;
	int64_t t_req, t_reserved, t_signed; /* mono ms, for the steps' log */
};

static void xrun_release(struct xrun *x)
{
	free(x->canon_body);
	free(x->canon_resp);
	free(x->canon_stored);
	free(x->sout);
	free(x->serr);
	sandbox_run_result_release(&x->res);
}

/* Step 1: room on the disk, the ids, and the hold of the whole timeout. */
static int xrun_hold(struct sandbox_svc *svc, struct xrun *x, struct sbx_error *err)
{
	/* A warm guest is admitted already; the disk must still leave the
	 * ledger its room before anything is written for this run. */
	sandbox_hosts_measure_disk(svc);
	pthread_mutex_lock(&svc->lock);
	bool disk_ok = sandbox_disk_fits_locked(svc);
	pthread_mutex_unlock(&svc->lock);
	if (!disk_ok) {
		sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
			      "this node is low on disk space; retry later");
		err->retry_after_s = 30;
		return -1;
	}
	if (sbx_random_id("sbxr_", 12, x->row.id, sizeof x->row.id) < 0 ||
	    sbx_random_id("rcpt_", 12, x->rcpt, sizeof x->rcpt) < 0 ||
	    receipt_salt_new(x->salt, err) < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "no randomness available");
	snprintf(x->row.account_id, sizeof x->row.account_id, "%s", x->account_id);
	snprintf(x->row.runtime, sizeof x->row.runtime, "%s", sandbox_runtime_name(x->rt));
	snprintf(x->row.runner, sizeof x->row.runner, "%s", x->runner);
	x->row.timeout_seconds = x->req->timeout_seconds;
	x->row.price_micro_per_second = x->price;
	x->row.requested_at_ms = x->started = sbx_wall_ms();
	if (store_execution_reserve(svc->store, &x->row,
				    billing_execution_hold(x->price, x->req->timeout_seconds),
				    err) < 0)
		return -1;
	x->t_reserved = sbx_mono_ms();
	return 0;
}

/* Step 3: the streams as returned, their fingerprints, the signed receipt
 * body. */
static int xrun_sign(struct sandbox_svc *svc, struct xrun *x, struct sbx_error *err)
{
	const struct sandbox_run_result *res = &x->res;
	const char *status = sandbox_execution_status_name(x->status);
	const char *signer = receipt_signer_public(svc->signer);
	struct receipt_json *in, *outj, *body;
	char fin[RECEIPT_HEX32_LEN], fout[RECEIPT_HEX32_LEN], ts_start[32], ts_end[32];
	int rc = -1;

	x->out_trunc = res->out_total > res->out_len;
	x->err_trunc = res->err_total > res->err_len;
	x->sout = sbx_utf8_sanitize(res->out, res->out_len, x->out_trunc, &x->sout_len);
	x->serr = sbx_utf8_sanitize(res->errb, res->err_len, x->err_trunc, &x->serr_len);
	if (!x->sout || !x->serr)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	in = receipt_json_object();
	receipt_json_set_str(in, "code", x->req->code, x->req->code_len);
	receipt_json_set_str(in, "runtime", sandbox_runtime_name(x->rt),
			     strlen(sandbox_runtime_name(x->rt)));
	outj = receipt_json_object();
	receipt_json_set_int(outj, "exit_code", res->exit_code);
	receipt_json_set_str(outj, "stdout", x->sout, x->sout_len);
	receipt_json_set_str(outj, "stderr", x->serr, x->serr_len);
	body = receipt_json_object();
	if (receipt_fingerprint(x->salt, in, fin, err) < 0 ||
	    receipt_fingerprint(x->salt, outj, fout, err) < 0) {
		if (err->param[0] == '\0')
			err->code = SBX_E_INVALID_REQUEST,
			snprintf(err->param, sizeof err->param, "code");
		goto out;
	}
	sbx_rfc3339(x->started, ts_start);
	sbx_rfc3339(x->ended, ts_end);
	receipt_json_set_str(body, "id", x->rcpt, strlen(x->rcpt));
	receipt_json_set_str(body, "object", "receipt", 7);
	receipt_json_set_int(body, "version", 1);
	receipt_json_set_str(body, "operation", "sandbox.execute", 15);
	receipt_json_set_str(body, "execution_id", x->row.id, strlen(x->row.id));
	receipt_json_set_str(body, "account_id", x->account_id, strlen(x->account_id));
	receipt_json_set_null(body, "model");
	receipt_json_set_str(body, "runtime", sandbox_runtime_name(x->rt),
			     strlen(sandbox_runtime_name(x->rt)));
	receipt_json_set_str(body, "runner", x->runner, strlen(x->runner));
	receipt_json_set_str(body, "status", status, strlen(status));
	receipt_json_set_int(body, "input_tokens", 0);
	receipt_json_set_int(body, "output_tokens", 0);
	receipt_json_set_int(body, "latency_ms", res->host_ms);
	receipt_json_set_str(body, "input_fingerprint", fin, strlen(fin));
	receipt_json_set_str(body, "output_fingerprint", fout, strlen(fout));
	receipt_json_set_int(body, "cost_micro_usd", x->cost);
	receipt_json_set_str(body, "started_at", ts_start, strlen(ts_start));
	receipt_json_set_str(body, "completed_at", ts_end, strlen(ts_end));
	receipt_json_set_str(body, "signer", signer, strlen(signer));
	if (!(x->canon_body = receipt_sign(svc->signer, body, x->hash, x->sig, err)))
		goto out;
	x->t_signed = sbx_mono_ms();
	rc = 0;
out:
	receipt_json_free(in);
	receipt_json_free(outj);
	receipt_json_free(body);
	return rc;
}

/* The receipt object of the 200 body. */
static struct receipt_json *xrun_receipt_ref(struct sandbox_svc *svc, const struct xrun *x)
{
	const char *signer = receipt_signer_public(svc->signer);
	struct receipt_json *r = receipt_json_object();
	char url[96];

	snprintf(url, sizeof url, "/v1/receipts/%s", x->rcpt);
	receipt_json_set_str(r, "id", x->rcpt, strlen(x->rcpt));
	receipt_json_set_str(r, "hash", x->hash, strlen(x->hash));
	receipt_json_set_str(r, "signature", x->sig, strlen(x->sig));
	receipt_json_set_str(r, "signer", signer, strlen(signer));
	receipt_json_set_str(r, "url", url, strlen(url));
	/* beside the receipt it serves, as on exec (docs/receipts.md) */
	receipt_json_set_str(r, "fingerprint_salt", x->salt, strlen(x->salt));
	return r;
}

/* Step 4: the 200 body (canonical JSON too: stable bytes for GET), and
 * what the database keeps of it. */
static int xrun_render(struct sandbox_svc *svc, struct xrun *x, struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	const char *status = sandbox_execution_status_name(x->status);
	struct receipt_json *resp = receipt_json_object(), *bill;
	char usd[32];
	int rc = -1;

	billing_format_usd(x->cost, usd);
	receipt_json_set_str(resp, "id", x->row.id, strlen(x->row.id));
	receipt_json_set_str(resp, "object", "sandbox.execution", 17);
	receipt_json_set_str(resp, "status", status, strlen(status));
	receipt_json_set_int(resp, "exit_code", x->res.exit_code);
	receipt_json_set_str(resp, "stdout", x->sout, x->sout_len);
	receipt_json_set_str(resp, "stderr", x->serr, x->serr_len);
	receipt_json_set_bool(resp, "stdout_truncated", x->out_trunc);
	receipt_json_set_bool(resp, "stderr_truncated", x->err_trunc);
	receipt_json_set_int(resp, "duration_ms", x->res.duration_ms);
	receipt_json_set_str(resp, "runner", x->runner, strlen(x->runner));
	receipt_json_set_str(resp, "startup_path", x->warm ? "warm" : "cold", 4);
	receipt_json_set_bool(resp, "prestarted", x->prestarted);
	receipt_json_set_obj(resp, "receipt", xrun_receipt_ref(svc, x));
	bill = receipt_json_object();
	/* An integer, as all money in API.md (the seed's example shows a
	 * string; API.md is the contract). */
	receipt_json_set_int(bill, "cost_micro_usd", x->cost);
	receipt_json_set_int(bill, "billed_ms", x->res.host_ms);
	receipt_json_set_str(bill, "cost_usd", usd, strlen(usd));
	receipt_json_set_obj(resp, "billing", bill);
	if (!(x->canon_resp = receipt_json_canonical(resp, NULL, err)))
		goto out;
	/* What the database keeps: the same bytes, unless they pass
	 * execution_store_max_bytes; then the head of each stream (1/16 of
	 * the cap: JSON escapes at most 6 bytes per byte) and a flag. */
	if (strlen(x->canon_resp) > cfg->execution_store_max_bytes) {
		size_t keep = cfg->execution_store_max_bytes / 16, n_out, n_err;
		char *o = sbx_utf8_sanitize(x->sout, SBX_MIN(keep, x->sout_len), true, &n_out),
		     *e = sbx_utf8_sanitize(x->serr, SBX_MIN(keep, x->serr_len), true, &n_err);

		if (o && e) {
			receipt_json_set_str(resp, "stdout", o, n_out);
			receipt_json_set_str(resp, "stderr", e, n_err);
			receipt_json_set_bool(resp, "stored_truncated", true);
		}
		free(o);
		free(e);
		if (!o || !e || !(x->canon_stored = receipt_json_canonical(resp, NULL, err)))
			goto out;
	}
	rc = 0;
out:
	receipt_json_free(resp);
	return rc;
}

/* Step 5: receipt, charge + release + response in one transaction (which
 * also drops what retention no longer keeps): one commit. */
static int xrun_store(struct sandbox_svc *svc, struct xrun *x, struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	struct store_receipt_keep rkeep = sandbox_receipt_keep(cfg, x->ended);
	struct store_execution_keep keep = {
	    .account_max_bytes = cfg->execution_store_account_max_bytes,
	    .ended_before_ms = x->ended - (int64_t)cfg->execution_retention_hours * 3600 * 1000,
	    .receipts = &rkeep,
	};
	struct store_receipt sr = {
	    .id = x->rcpt,
	    .account_id = x->account_id,
	    .body = x->canon_body,
	    .hash = x->hash,
	    .signature = x->sig,
	    .signer = receipt_signer_public(svc->signer),
	    .created_at_ms = x->ended,
	};

	if (store_execution_settle_receipt(
		svc->store, x->row.id, sandbox_execution_status_name(x->status), x->ended, x->cost,
		&sr, x->canon_stored ? x->canon_stored : x->canon_resp, &keep, err) < 0)
		return -1;
	if (sandbox_execution_runner(&svc->cfg) == CONFIG_RUNNER_LIBVIRT) {
		pthread_mutex_lock(&svc->lock);
		sandbox_execution_record_locked(svc, x->warm, x->prestarted,
						sbx_mono_ms() - x->t_req);
		pthread_mutex_unlock(&svc->lock);
	}
	return 0;
}

static void xrun_log(const struct xrun *x)
{
	const struct sandbox_run_result *res = &x->res;
	int64_t t_stored = sbx_mono_ms();

	sbx_info(MOD, "execution %s: %s %s exit %d in %u ms (guest says %u; %s), %lld micro-USD",
		 x->row.id, x->runner, sandbox_runtime_name(x->rt), res->exit_code, res->host_ms,
		 res->duration_ms,
		 x->prestarted ? "warm, interpreter waiting"
		 : x->warm     ? "warm"
			       : "cold",
		 (long long)x->cost);
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
			  const struct sandbox_execution_req *req, char **response,
			  struct sbx_error *err)
{
	struct xrun x = {
	    .req = req,
	    .account_id = account_id,
	    .runner = config_runner_name(
		sandbox_execution_runner(&svc->cfg)), /* the word, for rows and receipts */
	    .price = (int64_t)svc->cfg.execution_price_micro_per_second,
	    .t_req = sbx_mono_ms(),
	};

	*response = NULL;
	/* 1. Check the request; hold the cost of the whole timeout. */
	if (sandbox_execution_check_req(&svc->cfg, req, &x.rt, err) < 0 ||
	    xrun_hold(svc, &x, err) < 0)
		return -1;

	/* 2. Run. */
	if (sandbox_execution_runner_run(svc, x.row.id, x.rt, req, &x.res, &x.warm, &x.prestarted,
					 err) < 0) {
		x.ended = sbx_wall_ms();
		/* A run the guest broke is charged for the time it used; one
		 * that could not start (no capacity, no boot) costs nothing. */
		x.cost = x.res.guest_failed
			     ? billing_execution_cost(x.res.host_ms, x.price, req->timeout_seconds)
			     : 0;
		sbx_warn(MOD, "execution %s: could not run: %s (%s, charged %lld micro-USD)",
			 x.row.id, err->message,
			 x.res.guest_failed ? "the guest broke it" : "it did not start",
			 (long long)x.cost);
		sandbox_execution_settle(svc, x.row.id, SANDBOX_EXECUTION_FAILED, x.ended, x.cost);
		xrun_release(&x);
		return -1;
	}

	x.ended = sbx_wall_ms();
	/* 3. The result as returned, its fingerprints, the receipt; 4. the
	 * 200 body; 5. one commit. From here every end is billed the host
	 * time the run used. */
	x.cost = billing_execution_cost(x.res.host_ms, x.price, req->timeout_seconds);
	x.status = x.res.timed_out ? SANDBOX_EXECUTION_TIMED_OUT : SANDBOX_EXECUTION_COMPLETED;
	if (xrun_sign(svc, &x, err) < 0 || xrun_render(svc, &x, err) < 0 ||
	    xrun_store(svc, &x, err) < 0) {
		/* the code ran: what went wrong after it is the host's, the
		 * time the guest used is still billed (docs/billing.md) */
		sbx_warn(MOD, "execution %s: failed after the run: %s (charged %lld micro-USD)",
			 x.row.id, err->message, (long long)x.cost);
		sandbox_execution_settle(svc, x.row.id, SANDBOX_EXECUTION_FAILED, x.ended, x.cost);
		xrun_release(&x);
		return -1;
	}
	xrun_log(&x);
	*response = TAKE_PTR(x.canon_resp);
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
