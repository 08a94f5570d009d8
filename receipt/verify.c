/* receipt/verify: the offline receipt check (verify.h). */
#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <json-c/json.h>

#include "receipt.h"
#include "verify.h"

#define VERIFY_FILE_MAX (64u * 1024 * 1024)
#define VERIFY_DEPTH	8

/* The whole file (NUL-terminated, at most VERIFY_FILE_MAX bytes). */
static char *file_read(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	struct sbx_buf b;
	char chunk[65536];
	size_t n;

	if (!f)
		return NULL;
	sbx_buf_init(&b, VERIFY_FILE_MAX);
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		if (sbx_buf_append(&b, chunk, n) < 0) {
			fclose(f);
			sbx_buf_release(&b);
			return NULL;
		}
	fclose(f);
	if (sbx_buf_append(&b, "", 0) < 0 || !b.data) {
		sbx_buf_release(&b);
		return NULL;
	}
	return sbx_buf_steal(&b, len);
}

static struct json_object *json_file(const char *path, const char **why)
{
	_cleanup_free_ char *data = NULL;
	struct json_tokener *tok;
	struct json_object *o;
	size_t len = 0;

	if (!(data = file_read(path, &len))) {
		*why = "cannot read it (or it is over 64 MiB)";
		return NULL;
	}
	tok = json_tokener_new_ex(64);
	o = tok ? json_tokener_parse_ex(tok, data, (int)len) : NULL;
	if (!o || json_tokener_get_error(tok) != json_tokener_success ||
	    !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		o = NULL;
		*why = "not a JSON object";
	}
	json_tokener_free(tok);
	return o;
}

/* A parsed JSON object as the receipt module's value (strings, integers,
 * booleans, null, objects); NULL when it holds floats or arrays. */
static struct receipt_json *receipt_json_from(struct json_object *o, int depth)
{
	struct receipt_json *r;

	if (depth > VERIFY_DEPTH || !json_object_is_type(o, json_type_object))
		return NULL;
	r = receipt_json_object();
	json_object_object_foreach(o, key, val)
	{
		struct receipt_json *child;

		switch (val ? json_object_get_type(val) : json_type_null) {
		case json_type_null:
			receipt_json_set_null(r, key);
			break;
		case json_type_boolean:
			receipt_json_set_bool(r, key, json_object_get_boolean(val));
			break;
		case json_type_int:
			receipt_json_set_int(r, key, json_object_get_int64(val));
			break;
		case json_type_string:
			receipt_json_set_str(r, key, json_object_get_string(val),
					     (size_t)json_object_get_string_len(val));
			break;
		case json_type_object:
			if (!(child = receipt_json_from(val, depth + 1)))
				goto err_free;
			receipt_json_set_obj(r, key, child);
			break;
		default:
			goto err_free;
		}
	}
	return r;
err_free:
	receipt_json_free(r);
	return NULL;
}

/* member `key` of o as a string, or NULL */
static const char *jget_str(struct json_object *o, const char *key)
{
	struct json_object *v;

	if (!o || !json_object_object_get_ex(o, key, &v) ||
	    !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

static struct json_object *jget_obj(struct json_object *o, const char *key)
{
	struct json_object *v;

	if (!o || !json_object_object_get_ex(o, key, &v) ||
	    !json_object_is_type(v, json_type_object))
		return NULL;
	return v;
}

/* Fill msg and return `result`. */
static enum receipt_check_result say(enum receipt_check_result result, char *msg, size_t msglen,
				     const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static enum receipt_check_result say(enum receipt_check_result result, char *msg, size_t msglen,
				     const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, msglen, fmt, ap);
	va_end(ap);
	return result;
}

/* Recompute a salted fingerprint of `obj` and compare it with want. */
static bool fingerprint_matches(const char *salt, struct receipt_json *obj, const char *want)
{
	char fp[RECEIPT_HEX32_LEN];
	struct sbx_error err;

	sbx_error_clear(&err);
	return want && receipt_fingerprint(salt, obj, fp, &err) == 0 && strcmp(fp, want) == 0;
}

/* The options: one receipt, a pinned signer (its hex into signer), and the
 * input options that go together. RECEIPT_CHECK_VALID (and msg untouched)
 * when the check can go on. */
static enum receipt_check_result
check_args(const struct receipt_check *c, char signer[RECEIPT_HEX32_LEN], char *msg, size_t msglen)
{
	struct sbx_error err;

	if (!c->receipt_path)
		return say(RECEIPT_CHECK_USAGE, msg, msglen, "%s", "give one RECEIPT.json");
	if (!c->signer == !c->public_key_path)
		return say(RECEIPT_CHECK_USAGE, msg, msglen, "%s",
			   "pin the signer: give --signer 0xHEX or --public-key PEM "
			   "(from GET /v1/receipts/public-key, fetched once)");
	if ((c->code_path || c->runtime) && (!c->code_path || !c->runtime || c->input_path))
		return say(RECEIPT_CHECK_USAGE, msg, msglen, "%s",
			   "--code and --runtime go together, instead of --input");
	if ((c->code_path || c->input_path) && !c->execution_path)
		return say(RECEIPT_CHECK_USAGE, msg, msglen, "%s",
			   "checking the input needs --execution (its salt)");
	sbx_error_clear(&err);
	if (c->public_key_path) {
		_cleanup_free_ char *pem = NULL;
		size_t len = 0;
		if (!(pem = file_read(c->public_key_path, &len)))
			return say(RECEIPT_CHECK_USAGE, msg, msglen,
				   "--public-key: cannot read '%s'", c->public_key_path);
		if (receipt_public_pem_to_hex(pem, len, signer, &err) < 0)
			return say(RECEIPT_CHECK_USAGE, msg, msglen, "--public-key: %s",
				   err.message);
	} else {
		if (strlen(c->signer) != RECEIPT_HEX32_LEN - 1 || strncmp(c->signer, "0x", 2) != 0)
			return say(RECEIPT_CHECK_USAGE, msg, msglen, "%s",
				   "--signer must be 0x and 64 hex digits");
		for (size_t i = 0; c->signer[i]; i++)
			signer[i] =
			    (char)(i < 2 ? c->signer[i] : tolower((unsigned char)c->signer[i]));
		signer[RECEIPT_HEX32_LEN - 1] = '\0';
	}
	return RECEIPT_CHECK_VALID;
}

/* The receipt file read into *out (the caller's to put), its body
 * canonicalised and its signature checked against the pinned signer. */
static enum receipt_check_result check_signed(const struct receipt_check *c, const char *signer,
					      struct json_object **out, char *msg, size_t msglen)
{
	struct json_object *body;
	struct receipt_json *rbody = NULL;
	_cleanup_free_ char *canon = NULL;
	const char *why = NULL, *hash, *sig, *rid;
	struct sbx_error err;
	size_t canon_len = 0;
	enum receipt_check_result rc = RECEIPT_CHECK_VALID;

	sbx_error_clear(&err);
	if (!(*out = json_file(c->receipt_path, &why)))
		return say(RECEIPT_CHECK_INVALID, msg, msglen, "%s: %s", c->receipt_path, why);
	body = jget_obj(*out, "body");
	hash = jget_str(*out, "hash");
	sig = jget_str(*out, "signature");
	rid = jget_str(*out, "id");
	if (!body || !hash || !sig || !rid)
		return say(RECEIPT_CHECK_INVALID, msg, msglen,
			   "%s is not a receipt (GET /v1/receipts/{id}: id, hash, "
			   "signature, body)",
			   c->receipt_path);
	if (!(rbody = receipt_json_from(body, 0)) ||
	    !(canon = receipt_json_canonical(rbody, &canon_len, &err)))
		rc = say(RECEIPT_CHECK_INVALID, msg, msglen,
			 "the receipt body is not canonicalisable (floats, arrays or "
			 "bad UTF-8)");
	else if (!jget_str(body, "id") || strcmp(jget_str(body, "id"), rid) != 0)
		rc = say(RECEIPT_CHECK_INVALID, msg, msglen,
			 "the receipt id '%.40s' is not the one in its signed body", rid);
	else if (!jget_str(body, "signer") || strcasecmp(jget_str(body, "signer"), signer) != 0)
		rc = say(RECEIPT_CHECK_INVALID, msg, msglen,
			 "signed by %.70s, not by the pinned signer %s",
			 jget_str(body, "signer") ? jget_str(body, "signer") : "nobody", signer);
	else if (receipt_verify(canon, canon_len, hash, sig, signer, &err) < 0)
		rc = say(RECEIPT_CHECK_INVALID, msg, msglen, "%s", err.message);
	receipt_json_free(rbody);
	return rc;
}

/* The execution reply read into *out (the caller's to put; *salt points
 * into it): it carries this receipt, and its exit code and output match
 * the receipt's output_fingerprint. */
static enum receipt_check_result check_output(const struct receipt_check *c,
					      struct json_object *body, const char *rid,
					      struct json_object **out, const char **salt,
					      char *msg, size_t msglen)
{
	struct json_object *ex, *rr, *bill, *v;
	struct receipt_json *outj = NULL;
	const char *why = NULL, *op = jget_str(body, "operation"),
		   *exid = jget_str(body, "execution_id");
	enum receipt_check_result rc = RECEIPT_CHECK_VALID;

	if (!(ex = *out = json_file(c->execution_path, &why)))
		return say(RECEIPT_CHECK_INVALID, msg, msglen, "%s: %s", c->execution_path, why);
	rr = jget_obj(ex, "receipt");
	bill = jget_obj(ex, "billing");
	/* receipt.fingerprint_salt; billing.fingerprint_salt in the
	 * replies of executions made before it moved there */
	*salt = jget_str(rr, "fingerprint_salt");
	if (!*salt)
		*salt = jget_str(bill, "fingerprint_salt");
	if (!rr || !jget_str(rr, "id") || strcmp(jget_str(rr, "id"), rid) != 0 || !*salt)
		return say(RECEIPT_CHECK_INVALID, msg, msglen,
			   "%s does not carry this receipt (receipt.id) and its "
			   "fingerprint_salt",
			   c->execution_path);
	if (op && strcmp(op, "sandbox.execute") == 0 &&
	    (!exid || !jget_str(ex, "id") || strcmp(exid, jget_str(ex, "id")) != 0))
		return say(RECEIPT_CHECK_INVALID, msg, msglen,
			   "the receipt is for execution '%.40s', not '%.40s'", exid ? exid : "?",
			   jget_str(ex, "id") ? jget_str(ex, "id") : "?");
	outj = receipt_json_object();
	if (!json_object_object_get_ex(ex, "exit_code", &v) ||
	    !json_object_is_type(v, json_type_int) || !jget_str(ex, "stdout") ||
	    !jget_str(ex, "stderr")) {
		rc = say(RECEIPT_CHECK_INVALID, msg, msglen, "%s lacks exit_code, stdout or stderr",
			 c->execution_path);
		goto out;
	}
	receipt_json_set_int(outj, "exit_code", json_object_get_int64(v));
	json_object_object_get_ex(ex, "stdout", &v);
	receipt_json_set_str(outj, "stdout", json_object_get_string(v),
			     (size_t)json_object_get_string_len(v));
	json_object_object_get_ex(ex, "stderr", &v);
	receipt_json_set_str(outj, "stderr", json_object_get_string(v),
			     (size_t)json_object_get_string_len(v));
	if (!fingerprint_matches(*salt, outj, jget_str(body, "output_fingerprint")))
		rc = say(RECEIPT_CHECK_INVALID, msg, msglen,
			 "the output (exit_code, stdout, stderr) in %s does not "
			 "match the receipt's output_fingerprint",
			 c->execution_path);
out:
	receipt_json_free(outj);
	return rc;
}

/* The input (--code and --runtime, or --input) against the receipt's
 * input_fingerprint; *checked says whether there was one. */
static enum receipt_check_result check_input(const struct receipt_check *c,
					     struct json_object *body, const char *salt,
					     bool *checked, char *msg, size_t msglen)
{
	struct json_object *inp = NULL;
	struct receipt_json *inj = NULL;
	_cleanup_free_ char *code = NULL;
	const char *why = NULL;
	size_t code_len = 0;
	enum receipt_check_result rc = RECEIPT_CHECK_VALID;

	*checked = false;
	if (c->code_path) {
		if (!(code = file_read(c->code_path, &code_len)))
			return say(RECEIPT_CHECK_USAGE, msg, msglen, "--code: cannot read '%s'",
				   c->code_path);
		inj = receipt_json_object();
		receipt_json_set_str(inj, "code", code, code_len);
		receipt_json_set_str(inj, "runtime", c->runtime, strlen(c->runtime));
	} else if (c->input_path) {
		if (!(inp = json_file(c->input_path, &why)) || !(inj = receipt_json_from(inp, 0))) {
			rc = say(RECEIPT_CHECK_INVALID, msg, msglen, "%s: %s", c->input_path,
				 why ? why : "floats or arrays");
			goto out;
		}
	}
	if (inj) {
		if (!fingerprint_matches(salt, inj, jget_str(body, "input_fingerprint"))) {
			rc = say(RECEIPT_CHECK_INVALID, msg, msglen,
				 "the input in %s does not match the receipt's "
				 "input_fingerprint",
				 c->code_path ? c->code_path : c->input_path);
			goto out;
		}
		*checked = true;
	}
out:
	receipt_json_free(inj);
	json_object_put(inp);
	return rc;
}

enum receipt_check_result receipt_check_files(const struct receipt_check *c, char *msg,
					      size_t msglen)
{
	struct json_object *rc_json = NULL, *ex = NULL;
	char signer[RECEIPT_HEX32_LEN], what[160] = "hash, signature";
	const char *salt = NULL, *rid;
	enum receipt_check_result rc;
	bool input_checked;

	if ((rc = check_args(c, signer, msg, msglen)) != RECEIPT_CHECK_VALID)
		return rc;
	if ((rc = check_signed(c, signer, &rc_json, msg, msglen)) != RECEIPT_CHECK_VALID)
		goto out;
	rid = jget_str(rc_json, "id");
	if (c->execution_path) {
		rc = check_output(c, jget_obj(rc_json, "body"), rid, &ex, &salt, msg, msglen);
		if (rc != RECEIPT_CHECK_VALID)
			goto out;
		snprintf(what + strlen(what), sizeof(what) - strlen(what), ", output fingerprint");
	}
	rc = check_input(c, jget_obj(rc_json, "body"), salt, &input_checked, msg, msglen);
	if (rc != RECEIPT_CHECK_VALID)
		goto out;
	if (input_checked)
		snprintf(what + strlen(what), sizeof(what) - strlen(what), ", input fingerprint");
	rc = say(RECEIPT_CHECK_VALID, msg, msglen, "receipt %s signed by %s (%s verified)", rid,
		 signer, what);
out:
	json_object_put(rc_json);
	json_object_put(ex);
	return rc;
}
