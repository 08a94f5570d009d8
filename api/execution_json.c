/* api/execution_json.c: the 200 body of POST /v1/sandbox/executions
 * (docs/api.md "Executions"), rendered from the plain result that
 * sandbox_execution_run returns. Canonical JSON (receipt_json_canonical:
 * sorted keys, one escaping), so the bytes are stable: the database keeps
 * them and GET /v1/sandbox/executions/{id} answers them byte for byte.
 * sandbox_execution_run calls this renderer itself, on the caller's thread
 * (an api work-pool thread), before its commit: sandbox.h says why. */
#include <stdio.h>
#include <string.h>

#include "../receipt/receipt.h"
#include "api-priv.h"

#define SET_STR(o, k, s) receipt_json_set_str((o), (k), (s), strlen(s))

/* {"id", "hash", "signature", "signer", "url", "fingerprint_salt"}: the
 * receipt signed in sandbox/ (docs/receipts.md), as on exec. */
static struct receipt_json *receipt_ref(const struct sandbox_exec_receipt *rc)
{
	struct receipt_json *r = receipt_json_object();
	char url[96];

	snprintf(url, sizeof url, "/v1/receipts/%s", rc->id);
	SET_STR(r, "id", rc->id);
	SET_STR(r, "hash", rc->hash);
	SET_STR(r, "signature", rc->signature);
	SET_STR(r, "signer", rc->signer);
	SET_STR(r, "url", url);
	/* beside the receipt it serves, as on exec (docs/receipts.md) */
	SET_STR(r, "fingerprint_salt", rc->salt);
	return r;
}

/* The request's metadata, as an object of the canonical JSON. */
static struct receipt_json *metadata_object(const char *json)
{
	struct receipt_json *m = receipt_json_object();
	struct json_object *o = api_metadata_encode(json);

	json_object_object_foreach(o, key, val)
	{
		if (json_object_is_type(val, json_type_string))
			receipt_json_set_str(m, key, json_object_get_string(val),
					     (size_t)json_object_get_string_len(val));
	}
	json_object_put(o);
	return m;
}

char *api_execution_render(const struct sandbox_execution_result *res, size_t *len,
			   struct sbx_error *err)
{
	struct receipt_json *o = receipt_json_object(), *bill = receipt_json_object();
	char usd[32];
	char *text;

	api_usd_format(res->cost_micro, usd);
	SET_STR(o, "id", res->id);
	SET_STR(o, "object", "sandbox.execution");
	SET_STR(o, "status", sandbox_execution_status_name(res->status));
	receipt_json_set_int(o, "exit_code", res->exit_code);
	receipt_json_set_str(o, "stdout", res->out, res->out_len);
	receipt_json_set_str(o, "stderr", res->err, res->err_len);
	receipt_json_set_bool(o, "stdout_truncated", res->out_truncated);
	receipt_json_set_bool(o, "stderr_truncated", res->err_truncated);
	receipt_json_set_int(o, "duration_ms", res->duration_ms);
	SET_STR(o, "runner", config_runner_name(res->runner));
	SET_STR(o, "startup_path", res->warm ? "warm" : "cold");
	receipt_json_set_bool(o, "prestarted", res->prestarted);
	receipt_json_set_obj(o, "receipt", receipt_ref(&res->receipt));
	receipt_json_set_obj(o, "metadata", metadata_object(res->metadata));
	/* An integer, as all money in docs/api.md. */
	receipt_json_set_int(bill, "cost_micro_usd", res->cost_micro);
	receipt_json_set_int(bill, "billed_ms", res->billed_ms);
	SET_STR(bill, "cost_usd", usd);
	receipt_json_set_obj(o, "billing", bill);
	if (res->stored_truncated)
		receipt_json_set_bool(o, "stored_truncated", true);
	text = receipt_json_canonical(o, len, err);
	receipt_json_free(o);
	return text;
}
