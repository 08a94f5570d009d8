/* receipts: the node's signing key (the service's, from sandbox_svc_new),
 * exec receipts (operation "sandbox.exec"), and reading a stored receipt
 * back (GET /v1/receipts/{id}). docs/receipts.md; executions sign theirs
 * in execution.c. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../receipt/receipt.h"
#include "../store/store.h"
#include "sandbox-priv.h"
#include "sandbox.h"

/* ------------------------------------------------------- the node key */

struct receipt_signer *sandbox_receipt_signer_open(const struct sandbox_config *cfg,
						   struct sbx_error *err)
{
	char path[PATH_MAX + 32];

	snprintf(path, sizeof path, "%s/receipt-ed25519.pem", cfg->state_dir);
	sbx_mkdir_p(cfg->state_dir, SANDBOX_STATE_DIR_MODE);
	return receipt_signer_load_or_create(path, err);
}

int sandbox_receipt_public_key(struct sandbox_svc *svc, char **hex, char **pem,
			       struct sbx_error *err)
{
	struct receipt_signer *sg = svc->signer;

	*hex = strdup(receipt_signer_public(sg));
	*pem = receipt_signer_public_pem(sg);
	if (!*hex || !*pem) {
		free(*hex);
		free(*pem);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	}
	return 0;
}

/* ------------------------------------------------------ exec receipts */

struct store_receipt_keep sandbox_receipt_keep(const struct sandbox_config *cfg, int64_t now_ms)
{
	return (struct store_receipt_keep){
	    .created_before_ms = now_ms - (int64_t)cfg->execution_retention_hours * 3600 * 1000,
	    .account_max = cfg->max_receipts_per_account,
	};
}

int sandbox_exec_receipt_sign(struct sandbox_svc *svc, const char *account_id,
			      const char *sandbox_id, const struct sandbox_exec_req *req,
			      int exit_code, const char *out, size_t out_len, const char *errs,
			      size_t errs_len, uint32_t host_ms, bool timed_out,
			      struct sandbox_exec_receipt *r, struct sbx_error *err)
{
	struct receipt_signer *sg = svc->signer;
	struct receipt_json *in, *env, *outj, *body;
	char fin[RECEIPT_HEX32_LEN], fout[RECEIPT_HEX32_LEN], ts_start[32], ts_end[32];
	const char *cwd = req->cwd ? req->cwd : SANDBOX_EXEC_CWD;
	int64_t ended = sbx_wall_ms(), started = ended - (int64_t)host_ms;
	char *canon = NULL;
	int rc = -1;

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

/* ------------------------------------------------------ stored receipts */

int sandbox_receipt_get(struct sandbox_svc *svc, const char *account_id, const char *id,
			char **json, struct sbx_error *err)
{
	_cleanup_free_ char *body = NULL, *hash = NULL, *sig = NULL, *signer_hex = NULL;
	struct sbx_buf b;

	if (store_receipt_get(svc->store, account_id, id, &body, &hash, &sig, &signer_hex, err) < 0)
		return -1;
	/* body is canonical JSON we wrote; the others are hex: splice. */
	sbx_buf_init(&b, 1024 * 1024);
	if (sbx_buf_printf(&b,
			   "{\"object\":\"receipt\",\"id\":\"%s\",\"hash\":\"%s\",\"signature\":"
			   "\"%s\",\"signer\":\"%s\",\"body\":%s}",
			   id, hash, sig, signer_hex, body) < 0) {
		sbx_buf_release(&b);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "receipt too large");
	}
	*json = sbx_buf_steal(&b, NULL);
	return 0;
}
