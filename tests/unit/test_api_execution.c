/* api/execution_json.c: the 200 body of POST /v1/sandbox/executions from
 * the plain result sandbox_execution_run returns (a struct in, JSON out):
 * every field, the exact canonical bytes (the database keeps them and GET
 * answers them byte for byte), and the stored copy's flag. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "api/api-priv.h"

#define HASH                                                                                       \
	"0x"                                                                                       \
	"1111111111111111111111111111111111111111111111111111111111111111"
#define SALT                                                                                       \
	"0x"                                                                                       \
	"2222222222222222222222222222222222222222222222222222222222222222"
#define SIGNER                                                                                     \
	"0x"                                                                                       \
	"3333333333333333333333333333333333333333333333333333333333333333"
#define SIG                                                                                        \
	"0x"                                                                                       \
	"4444444444444444444444444444444444444444444444444444444444444444"                         \
	"5555555555555555555555555555555555555555555555555555555555555555"

static void result_fill(struct sandbox_execution_result *r, char *out, char *err)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->id, sizeof r->id, "sbxr_0123456789ab");
	r->status = SANDBOX_EXECUTION_TIMED_OUT;
	r->exit_code = 137;
	r->out = out, r->out_len = strlen(out);
	r->err = err, r->err_len = strlen(err);
	r->out_truncated = true;
	r->err_truncated = false;
	r->duration_ms = 1234;
	r->billed_ms = 2001;
	r->cost_micro = 1234567;
	r->runner = CONFIG_RUNNER_LIBVIRT;
	r->warm = true;
	r->prestarted = true;
	snprintf(r->receipt.id, sizeof r->receipt.id, "rcpt_ba9876543210");
	snprintf(r->receipt.hash, sizeof r->receipt.hash, HASH);
	snprintf(r->receipt.signature, sizeof r->receipt.signature, SIG);
	snprintf(r->receipt.signer, sizeof r->receipt.signer, SIGNER);
	snprintf(r->receipt.salt, sizeof r->receipt.salt, SALT);
	snprintf(r->metadata, sizeof r->metadata, "{\"job\":\"4711\",\"team\":\"a\\\"b\"}");
}

static const char *str_of(struct json_object *o, const char *k)
{
	struct json_object *v;

	assert_true(json_object_object_get_ex(o, k, &v));
	assert_true(json_object_is_type(v, json_type_string));
	return json_object_get_string(v);
}

static int64_t int_of(struct json_object *o, const char *k)
{
	struct json_object *v;

	assert_true(json_object_object_get_ex(o, k, &v));
	assert_true(json_object_is_type(v, json_type_int));
	return json_object_get_int64(v);
}

static int bool_of(struct json_object *o, const char *k)
{
	struct json_object *v;

	assert_true(json_object_object_get_ex(o, k, &v));
	assert_true(json_object_is_type(v, json_type_boolean));
	return json_object_get_boolean(v);
}

/* Every field of the struct reaches its member, and nothing else is there. */
static void test_every_field(void **state)
{
	char out[] = "a \"quoted\" line\n\xc3\xa9", err[] = "tab\there";
	struct sandbox_execution_result r;
	struct sbx_error e;
	struct json_object *o, *rc, *bill;
	size_t len = 0;
	char *text;

	(void)state;
	sbx_error_clear(&e);
	result_fill(&r, out, err);
	text = api_execution_render(&r, &len, &e);
	assert_non_null(text);
	assert_int_equal(len, strlen(text));
	o = json_tokener_parse(text);
	assert_non_null(o);
	assert_int_equal(json_object_object_length(o), 15);
	assert_string_equal(str_of(o, "id"), "sbxr_0123456789ab");
	assert_string_equal(str_of(o, "object"), "sandbox.execution");
	assert_string_equal(str_of(o, "status"), "timed_out");
	assert_int_equal(int_of(o, "exit_code"), 137);
	assert_string_equal(str_of(o, "stdout"), out);
	assert_string_equal(str_of(o, "stderr"), err);
	assert_int_equal(bool_of(o, "stdout_truncated"), 1);
	assert_int_equal(bool_of(o, "stderr_truncated"), 0);
	assert_int_equal(int_of(o, "duration_ms"), 1234);
	assert_string_equal(str_of(o, "runner"), "libvirt");
	assert_string_equal(str_of(o, "startup_path"), "warm");
	assert_int_equal(bool_of(o, "prestarted"), 1);
	assert_false(json_object_object_get_ex(o, "stored_truncated", NULL));
	struct json_object *md;
	assert_true(json_object_object_get_ex(o, "metadata", &md));
	assert_int_equal(json_object_object_length(md), 2);
	assert_string_equal(str_of(md, "job"), "4711");
	assert_string_equal(str_of(md, "team"), "a\"b");
	assert_true(json_object_object_get_ex(o, "receipt", &rc));
	assert_int_equal(json_object_object_length(rc), 6);
	assert_string_equal(str_of(rc, "id"), "rcpt_ba9876543210");
	assert_string_equal(str_of(rc, "hash"), HASH);
	assert_string_equal(str_of(rc, "signature"), SIG);
	assert_string_equal(str_of(rc, "signer"), SIGNER);
	assert_string_equal(str_of(rc, "url"), "/v1/receipts/rcpt_ba9876543210");
	assert_string_equal(str_of(rc, "fingerprint_salt"), SALT);
	assert_true(json_object_object_get_ex(o, "billing", &bill));
	assert_int_equal(json_object_object_length(bill), 3);
	assert_int_equal(int_of(bill, "cost_micro_usd"), 1234567);
	assert_int_equal(int_of(bill, "billed_ms"), 2001);
	assert_string_equal(str_of(bill, "cost_usd"), "1.234567");
	json_object_put(o);
	free(text);

	/* the other values of the enums and flags */
	r.status = SANDBOX_EXECUTION_COMPLETED;
	r.runner = CONFIG_RUNNER_DEV_PROCESS;
	r.warm = r.prestarted = r.out_truncated = false;
	r.err_truncated = true;
	r.stored_truncated = true;
	text = api_execution_render(&r, &len, &e);
	assert_non_null(text);
	o = json_tokener_parse(text);
	assert_non_null(o);
	assert_int_equal(json_object_object_length(o), 16);
	assert_string_equal(str_of(o, "status"), "completed");
	assert_string_equal(str_of(o, "runner"), "dev-process");
	assert_string_equal(str_of(o, "startup_path"), "cold");
	assert_int_equal(bool_of(o, "prestarted"), 0);
	assert_int_equal(bool_of(o, "stdout_truncated"), 0);
	assert_int_equal(bool_of(o, "stderr_truncated"), 1);
	assert_int_equal(bool_of(o, "stored_truncated"), 1);
	json_object_put(o);
	free(text);
}

/* The exact bytes: RFC 8785 (keys sorted, no whitespace, JCS escapes), the
 * form the database keeps and GET answers. */
static void test_canonical_bytes(void **state)
{
	char out[] = "hi\n", err[] = "";
	struct sandbox_execution_result r;
	struct sbx_error e;
	size_t len = 0;
	char *text;

	(void)state;
	sbx_error_clear(&e);
	result_fill(&r, out, err);
	r.status = SANDBOX_EXECUTION_COMPLETED;
	r.exit_code = 0;
	r.out_truncated = false;
	r.runner = CONFIG_RUNNER_MOCK;
	r.warm = r.prestarted = false;
	r.cost_micro = 100;
	text = api_execution_render(&r, &len, &e);
	assert_non_null(text);
	assert_string_equal(
	    text,
	    "{\"billing\":{\"billed_ms\":2001,\"cost_micro_usd\":100,\"cost_usd\":\"0.000100\"},"
	    "\"duration_ms\":1234,\"exit_code\":0,\"id\":\"sbxr_0123456789ab\","
	    "\"metadata\":{\"job\":\"4711\",\"team\":\"a\\\"b\"},"
	    "\"object\":\"sandbox.execution\",\"prestarted\":false,"
	    "\"receipt\":{\"fingerprint_salt\":\"" SALT "\",\"hash\":\"" HASH "\","
	    "\"id\":\"rcpt_ba9876543210\",\"signature\":\"" SIG "\",\"signer\":\"" SIGNER "\","
	    "\"url\":\"/v1/receipts/rcpt_ba9876543210\"},\"runner\":\"mock\","
	    "\"startup_path\":\"cold\",\"status\":\"completed\",\"stderr\":\"\","
	    "\"stderr_truncated\":false,\"stdout\":\"hi\\n\",\"stdout_truncated\":false}");
	free(text);
}

/* A stream that is not UTF-8 (sandbox/ sanitises; a renderer given one
 * anyway) is an error, not a body that could not be signed or stored. */
static void test_invalid_utf8_refused(void **state)
{
	char out[] = "\xff", err[] = "";
	struct sandbox_execution_result r;
	struct sbx_error e;
	size_t len = 0;

	(void)state;
	sbx_error_clear(&e);
	result_fill(&r, out, err);
	assert_null(api_execution_render(&r, &len, &e));
	assert_int_equal(e.code, SBX_E_INVALID_REQUEST);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_field),
	    cmocka_unit_test(test_canonical_bytes),
	    cmocka_unit_test(test_invalid_utf8_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
