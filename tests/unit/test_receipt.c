/* receipt/: JCS (RFC 8785 examples that apply: no floats, no arrays),
 * salted fingerprints, Ed25519 sign/verify and tampering. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "receipt/receipt.h"

static char *canon(const struct receipt_json *v)
{
	struct sbx_error err = {0};
	size_t len;
	char *s = receipt_json_canonical(v, &len, &err);

	assert_non_null(s);
	assert_int_equal(strlen(s), len);
	return s;
}

/* RFC 8785 3.2.3: sorting by UTF-16 code units puts U+1F600 (surrogates
 * D83D DE00) before U+FB33, unlike sorting by code points. */
static void test_jcs_rfc_sorting(void **state)
{
	struct receipt_json *o = receipt_json_object();
	char *s;

	receipt_json_set_str(o, "\xe2\x82\xac", "Euro Sign", 9);
	receipt_json_set_str(o, "\r", "Carriage Return", 15);
	receipt_json_set_str(o, "\xef\xac\xb3", "Hebrew Letter Dalet With Dagesh", 31);
	receipt_json_set_str(o, "1", "One", 3);
	receipt_json_set_str(o, "\xf0\x9f\x98\x80", "Emoji: Grinning Face", 20);
	receipt_json_set_str(o, "\xc2\x80", "Control", 7);
	receipt_json_set_str(o, "\xc3\xb6", "Latin Small Letter O With Diaeresis", 35);
	s = canon(o);
	assert_string_equal(s,
			    "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\xc2\x80\":\"Control\","
			    "\"\xc3\xb6\":\"Latin Small Letter O With Diaeresis\","
			    "\"\xe2\x82\xac\":\"Euro Sign\",\"\xf0\x9f\x98\x80\":\"Emoji: Grinning "
			    "Face\",\"\xef\xac\xb3\":\"Hebrew Letter Dalet With Dagesh\"}");
	free(s);
	receipt_json_free(o);
}

/* RFC 8785 3.2.2.2 string escaping: only ", \, and controls; the RFC's
 * example string "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/" becomes
 * "€$\u000f\nA'B\"\\\\\"/". Literals true/false/null as is. */
static void test_jcs_rfc_strings_literals(void **state)
{
	struct receipt_json *o = receipt_json_object();
	const char in[] = "\xe2\x82\xac$\x0f\nA'B\"\\\\\"/";
	char *s;

	receipt_json_set_str(o, "string", in, sizeof(in) - 1);
	receipt_json_set_bool(o, "literals_t", true);
	receipt_json_set_bool(o, "literals_f", false);
	receipt_json_set_null(o, "literals_n");
	s = canon(o);
	assert_string_equal(s, "{\"literals_f\":false,\"literals_n\":null,\"literals_t\":true,"
			       "\"string\":\"\xe2\x82\xac$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}");
	free(s);
	receipt_json_free(o);
}

static void test_jcs_nesting_ints_nul_and_refusals(void **state)
{
	struct receipt_json *o = receipt_json_object(), *in = receipt_json_object();
	struct sbx_error err = {0};
	char *s;

	receipt_json_set_int(in, "b", -42);
	receipt_json_set_int(in, "a", 9007199254740991LL);
	receipt_json_set_obj(o, "z", in);
	receipt_json_set_str(o, "y", "a\0b\x7f\b\f\t", 7);
	receipt_json_set_int(o, "x", 1);
	receipt_json_set_int(o, "x", 0); /* last set wins */
	s = canon(o);
	assert_string_equal(s, "{\"x\":0,\"y\":\"a\\u0000b\x7f\\b\\f\\t\","
			       "\"z\":{\"a\":9007199254740991,\"b\":-42}}");
	free(s);

	receipt_json_set_int(o, "x", 9007199254740992LL);
	assert_null(receipt_json_canonical(o, NULL, &err));
	assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
	receipt_json_set_int(o, "x", 0);
	receipt_json_set_str(o, "bad", "\xff", 1);
	assert_null(receipt_json_canonical(o, NULL, &err));
	receipt_json_set_str(o, "bad", "\xed\xa0\x80", 3); /* a UTF-8 encoded surrogate */
	assert_null(receipt_json_canonical(o, NULL, &err));
	receipt_json_set_str(o, "bad", "\xe2\x82", 2); /* truncated */
	assert_null(receipt_json_canonical(o, NULL, &err));
	receipt_json_free(o);
}

/* fingerprint = SHA-256(salt bytes || JCS): checked against an independent
 * computation (`printf ... | openssl dgst -sha256` gave the constant). */
/* RFC 3629 strictly: json-c lets the overlong, surrogate and F5..F7 forms
 * through, so this is the check POST /v1/sandbox/executions relies on. */
static void test_utf8_valid(void **state)
{
	static const struct {
		const char *s;
		size_t len;
		bool ok;
	} cases[] = {
	    {"", 0, true},
	    {"print(1)\n", 9, true},
	    {"a\0b", 3, true},		    /* NUL is valid UTF-8 */
	    {"\xc3\xa9", 2, true},	    /* U+00E9 */
	    {"\xe2\x9c\x93", 3, true},	    /* U+2713 */
	    {"\xed\x9f\xbf", 3, true},	    /* U+D7FF, below the surrogates */
	    {"\xf4\x8f\xbf\xbf", 4, true},  /* U+10FFFF */
	    {"\xc0\x80", 2, false},	    /* overlong NUL */
	    {"\xc1\xbf", 2, false},	    /* overlong U+007F */
	    {"\xe0\x80\xaf", 3, false},	    /* overlong '/' */
	    {"\xf0\x8f\xbf\xbf", 4, false}, /* overlong U+FFFF */
	    {"\xed\xa0\x80", 3, false},	    /* U+D800, a surrogate */
	    {"\xed\xbf\xbf", 3, false},	    /* U+DFFF */
	    {"\xf4\x90\x80\x80", 4, false}, /* U+110000 */
	    {"\xf5\x80\x80\x80", 4, false}, /* F5 lead */
	    {"\xf7\xbf\xbf\xbf", 4, false}, /* F7 lead */
	    {"\xff", 1, false},
	    {"\x80", 1, false},	      /* lone continuation */
	    {"\xc3", 1, false},	      /* truncated */
	    {"ok\xe2\x9c", 4, false}, /* truncated at the end */
	    {"# -*- coding: latin-1 -*-\n\xe9", 27, false},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (receipt_utf8_valid(cases[i].s, cases[i].len) != cases[i].ok)
			fail_msg("case %zu: expected %s", i, cases[i].ok ? "valid" : "invalid");
}

static void test_fingerprint(void **state)
{
	struct receipt_json *o = receipt_json_object();
	struct sbx_error err = {0};
	char fp[RECEIPT_HEX32_LEN], fp2[RECEIPT_HEX32_LEN], salt[RECEIPT_HEX32_LEN];
	const char *zero = "0x0000000000000000000000000000000000000000000000000000000000000000";

	receipt_json_set_str(o, "runtime", "python", 6);
	receipt_json_set_str(o, "code", "print(1)", 8);
	assert_int_equal(receipt_fingerprint(zero, o, fp, &err), 0);
	assert_string_equal(fp,
			    "0xc11a41eb7b4995f6472981df959fff6cdb688f78a0c75805c92eb1b4a5bf976d");
	assert_int_equal(receipt_salt_new(salt, &err), 0);
	assert_int_equal(strlen(salt), 66);
	assert_int_equal(receipt_fingerprint(salt, o, fp2, &err), 0);
	assert_string_not_equal(fp, fp2);
	assert_int_equal(receipt_fingerprint("0x12", o, fp2, &err), -1);
	assert_string_equal(err.param, "fingerprint_salt");
	receipt_json_free(o);
}

static void test_sign_verify_tamper(void **state)
{
	char dir[] = "/tmp/t-receipt-XXXXXX", path[256], hash[RECEIPT_HEX32_LEN],
	     sig[RECEIPT_SIG_HEX_LEN];
	struct sbx_error err = {0};
	struct receipt_signer *sg, *again;
	struct receipt_json *body = receipt_json_object();
	struct stat st;
	char *jcs, *pem;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/receipt.pem", dir);
	sg = receipt_signer_load_or_create(path, &err);
	assert_non_null(sg);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	again = receipt_signer_load_or_create(path, &err);
	assert_non_null(again);
	assert_string_equal(receipt_signer_public(sg), receipt_signer_public(again));
	pem = receipt_signer_public_pem(sg);
	assert_non_null(strstr(pem, "BEGIN PUBLIC KEY"));
	free(pem);

	receipt_json_set_str(body, "operation", "sandbox.execute", 15);
	receipt_json_set_int(body, "latency_ms", 412);
	jcs = receipt_sign(sg, body, hash, sig, &err);
	assert_non_null(jcs);
	assert_int_equal(
	    receipt_verify(jcs, strlen(jcs), hash, sig, receipt_signer_public(sg), &err), 0);
	/* a changed body fails on the hash ... */
	char keep = jcs[strlen(jcs) - 2];

	jcs[strlen(jcs) - 2] = 'X';
	assert_int_equal(
	    receipt_verify(jcs, strlen(jcs), hash, sig, receipt_signer_public(sg), &err), -1);
	assert_string_equal(err.param, "hash");
	jcs[strlen(jcs) - 2] = keep;
	/* ... a changed signature or another signer on the signature */
	sig[10] = sig[10] == 'a' ? 'b' : 'a';
	assert_int_equal(
	    receipt_verify(jcs, strlen(jcs), hash, sig, receipt_signer_public(sg), &err), -1);
	assert_string_equal(err.param, "signature");

	/* a key file readable by others is refused */
	chmod(path, 0644);
	assert_null(receipt_signer_load_or_create(path, &err));
	unlink(path);
	rmdir(dir);
	free(jcs);
	receipt_json_free(body);
	receipt_signer_free(sg);
	receipt_signer_free(again);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_jcs_rfc_sorting),
	    cmocka_unit_test(test_jcs_rfc_strings_literals),
	    cmocka_unit_test(test_jcs_nesting_ints_nul_and_refusals),
	    cmocka_unit_test(test_utf8_valid),
	    cmocka_unit_test(test_fingerprint),
	    cmocka_unit_test(test_sign_verify_tamper),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
