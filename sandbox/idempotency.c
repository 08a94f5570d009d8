/* idempotency: POST /v1/sandboxes with an Idempotency-Key (docs/api.md
 * "Idempotency"): claim the key, replay a remembered answer, wait for a
 * first request still creating, or create; api/ completes the key with the
 * rendered answer. See sandbox.h. */
#include "sandbox.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../billing/billing.h"
#include "../store/store.h"
#include "sandbox-priv.h"

#define MOD "idempotency"

void sandbox_create_result_release(struct sandbox_create_result *res)
{
	if (!res)
		return;
	free(res->body);
	res->body = NULL;
	res->body_len = 0;
}

static bool idempotency_key_valid(const char *key)
{
	size_t n = 0;

	for (; key[n]; n++)
		if ((unsigned char)key[n] < 0x20 || (unsigned char)key[n] > 0x7e)
			return false;
	return n >= 1 && n <= STORE_IDEM_KEY_MAX;
}

int sandbox_create_idempotent(struct sandbox_svc *svc, const char *account_id,
			      const struct sandbox_create_req *req,
			      struct sandbox_create_result *res, struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	const struct sandbox_size *size;
	struct store_idem row = {0};
	char canon[128 + SANDBOX_ID_MAX + SANDBOX_METADATA_JSON_MAX + NET_POLICY_JSON_MAX],
	    hash[65];
	int minutes, claimed;
	int64_t deadline;

	memset(res, 0, sizeof(*res));
	if (sandbox_create_params(cfg, req, &size, &minutes, err) < 0)
		return -1;
	if (!req->idempotency_key)
		return sandbox_create(svc, account_id, req, &res->view, err);
	if (!idempotency_key_valid(req->idempotency_key))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "Idempotency-Key",
				     "the Idempotency-Key header must be 1..%d printable ASCII "
				     "characters",
				     STORE_IDEM_KEY_MAX);
	/* The same request = the same parameters after defaults. */
	snprintf(canon, sizeof(canon), "POST /v1/sandboxes\nsize=%s\ntimeout_minutes=%d",
		 size->name, minutes);
	/* Metadata only when there is some: a request without it hashes as
	 * before labels existed (keys remembered across the upgrade). */
	if (req->metadata) {
		char meta[SANDBOX_METADATA_JSON_MAX];
		size_t used = strlen(canon);

		if (sandbox_metadata_json(req->metadata, false, meta, sizeof(meta)) < 0)
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "metadata",
					     "metadata is too large");
		if (strcmp(meta, "{}") != 0)
			snprintf(canon + used, sizeof(canon) - used, "\nmetadata=%s", meta);
	}
	/* The network only when named: a request without it hashes as before
	 * policies existed (the default may change with the config). */
	if (req->network) {
		size_t used = strlen(canon);
		snprintf(canon + used, sizeof(canon) - used, "\nnetwork=%s", req->network);
	}
	/* The snapshot only when named, likewise. */
	if (req->snapshot) {
		size_t used = strlen(canon);
		snprintf(canon + used, sizeof(canon) - used, "\nsnapshot=%s", req->snapshot);
	}
	sbx_sha256_hex(canon, strlen(canon), hash);

	deadline = sbx_mono_ms() + cfg->boot_timeout_ms + 5000;
	for (;;) {
		claimed = store_idem_claim(svc->store, account_id, req->idempotency_key, hash,
					   sbx_wall_ms(), SANDBOX_IDEMPOTENCY_KEEP_MS, &row, err);
		if (claimed != 0)
			break;
		if (strcmp(row.request_hash, hash) != 0) {
			store_idem_release_row(&row);
			return sbx_error_set(err, SBX_E_IDEMPOTENCY_MISMATCH, "Idempotency-Key",
					     "this Idempotency-Key was used with other "
					     "parameters; use a new key for a new request");
		}
		if (row.done) {
			res->replayed = true;
			res->status = row.response_status;
			res->body = TAKE_PTR(row.response_body);
			res->body_len = row.response_len;
			if (!res->body) {
				res->body = strdup("");
				if (!res->body)
					return sbx_error_set(err, SBX_E_INTERNAL, NULL,
							     "out of memory");
			}
			return 0;
		}
		if (row.sandbox_id[0] && row.created_at_ms < svc->started_wall_ms) {
			/* Its create activated a sandbox, then the daemon died
			 * before the answer was remembered: answer with that
			 * sandbox (api/ renders and completes the key). */
			struct store_sandbox sb;

			if (store_sandbox_get(svc->store, account_id, row.sandbox_id, &sb, NULL) ==
				0 &&
			    sb.status != STORE_CREATING) {
				store_idem_release_row(&row);
				sandbox_view_from_row(&sb, sbx_wall_ms(), &res->view);
				res->replayed = true;
				res->status = 201;
				return 0;
			}
		}
		store_idem_release_row(&row);
		/* The first request is still creating: wait for it. */
		if (sbx_mono_ms() >= deadline) {
			sbx_error_set(err, SBX_E_IDEMPOTENCY_CONFLICT, "Idempotency-Key",
				      "a request with this Idempotency-Key is still being "
				      "processed; retry later");
			err->retry_after_s = 2;
			return -1;
		}
		sbx_sleep_ms(100);
	}
	if (claimed < 0)
		return -1;
	if (sandbox_create(svc, account_id, req, &res->view, err) < 0) {
		/* A failed request is not remembered. */
		store_idem_release(svc->store, account_id, req->idempotency_key, NULL);
		return -1;
	}
	return 0;
}

int sandbox_idempotency_complete(struct sandbox_svc *svc, const char *account_id, const char *key,
				 const char *sandbox_id, int status, const char *body, size_t len,
				 struct sbx_error *err)
{
	if (status >= 400) {
		store_idem_release(svc->store, account_id, key, NULL);
		return 0;
	}
	if (store_idem_complete(svc->store, account_id, key, sandbox_id, status, body, len, err) <
	    0) {
		sbx_err(MOD, "idempotency key of %s (sandbox %s) could not be stored: %s",
			account_id, sandbox_id ? sandbox_id : "-", err ? err->message : "");
		return -1;
	}
	return 0;
}

void sandbox_idempotency_release(struct sandbox_svc *svc, const char *account_id, const char *key)
{
	store_idem_release(svc->store, account_id, key, NULL);
}
