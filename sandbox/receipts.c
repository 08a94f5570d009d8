/* receipts: the node's signing key (the service's, from sandbox_svc_new),
 * what is kept of receipts, and reading a stored receipt back
 * (GET /v1/receipts/{id}). docs/receipts.md; an exec's receipt is signed
 * in exec.c, an execution's in executions.c. */
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

/* ------------------------------------------------------ what is kept */

struct store_receipt_keep sandbox_receipt_keep(const struct sandbox_config *cfg, int64_t now_ms)
{
	return (struct store_receipt_keep){
	    .created_before_ms = now_ms - (int64_t)cfg->execution_retention_hours * 3600 * 1000,
	    .account_max = cfg->max_receipts_per_account,
	};
}

/* The service's signer, for the exec use case (exec.c signs an exec's
 * receipt before its completion is delivered). */
struct receipt_signer *sandbox_receipt_signer(struct sandbox_svc *svc, struct sbx_error *err)
{
	if (!svc->signer)
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "the node has no receipt key");
	return svc->signer;
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
