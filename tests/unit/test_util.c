/* util: encodings, time, bounded buffers, ids. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/util.h"

static void utf8_valid_kept(void **state)
{
	const char in[] = "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80";
	size_t n;
	char *out = sbx_utf8_sanitize(in, sizeof(in) - 1, false, &n);

	assert_int_equal(n, sizeof(in) - 1);
	assert_memory_equal(out, in, n);
	free(out);
}

static void utf8_invalid_replaced_nul_kept(void **state)
{
	const char in[] = {'a', '\0',	    (char)0xFF, 'b',	   (char)0xC3,
			   'c', (char)0xED, (char)0xA0, (char)0x80};
	size_t n;
	char *out = sbx_utf8_sanitize(in, sizeof(in), false, &n);
	/* 0xFF -> FFFD; lone C3 -> FFFD; ED A0 80 (surrogate) -> 3x FFFD */
	const char want[] = "a\0\xEF\xBF\xBD"
			    "b\xEF\xBF\xBD"
			    "c\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD";

	assert_int_equal(n, sizeof(want) - 1);
	assert_memory_equal(out, want, n);
	free(out);
}

static void utf8_cut_tail(void **state)
{
	const char in[] = "ab\xE2\x82"; /* euro sign cut after 2 bytes */
	size_t n;
	char *cut = sbx_utf8_sanitize(in, 4, true, &n);

	assert_int_equal(n, 2);
	assert_string_equal(cut, "ab");
	free(cut);
	cut = sbx_utf8_sanitize(in, 4, false, &n);
	assert_int_equal(n, 5); /* "ab" + one U+FFFD for the incomplete prefix */
	free(cut);
}

static void base64_vectors(void **state)
{
	/* RFC 4648 section 10 */
	const char *vec[][2] = {{"", ""},
				{"f", "Zg=="},
				{"fo", "Zm8="},
				{"foo", "Zm9v"},
				{"foob", "Zm9vYg=="},
				{"fooba", "Zm9vYmE="},
				{"foobar", "Zm9vYmFy"}};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(vec); i++) {
		char *out = sbx_base64_encode(vec[i][0], strlen(vec[i][0]));
		size_t n = 99;
		char *back = sbx_base64_decode(vec[i][1], strlen(vec[i][1]), &n);

		assert_string_equal(out, vec[i][1]);
		assert_non_null(back);
		assert_int_equal(n, strlen(vec[i][0]));
		assert_memory_equal(back, vec[i][0], n);
		free(out);
		free(back);
	}
	/* not base64: bad length, bad characters, '=' inside */
	static const char *const bad[] = {"Zg=", "Zm9v!A==", "Zg==Zg==", "Z===", "====", "Zm9"};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		size_t n;

		assert_null(sbx_base64_decode(bad[i], strlen(bad[i]), &n));
	}
}

static void rfc3339_round_trip(void **state)
{
	char buf[32];
	int64_t ms;

	sbx_rfc3339(1787409060000LL, buf);
	assert_string_equal(buf, "2026-08-22T14:31:00Z");
	assert_int_equal(sbx_rfc3339_parse("2026-08-22T14:31:00Z", &ms), 0);
	assert_int_equal(ms, 1787409060000LL);
	assert_int_equal(sbx_rfc3339_parse("2026-08-22T16:31:00.5+02:00", &ms), 0);
	assert_int_equal(ms, 1787409060500LL);
	assert_int_equal(sbx_rfc3339_parse("2026-08-22", &ms), -1);
	assert_int_equal(sbx_rfc3339_parse("2026-13-22T14:31:00Z", &ms), -1);
	assert_int_equal(sbx_rfc3339_parse("2026-08-22T14:31:00Zjunk", &ms), -1);
}

static void buf_bounded(void **state)
{
	struct sbx_buf b;

	sbx_buf_init(&b, 8);
	assert_int_equal(sbx_buf_append(&b, "12345", 5), 0);
	assert_int_equal(sbx_buf_append(&b, "6789", 4), -1);
	assert_int_equal(b.len, 5);
	assert_int_equal(sbx_buf_append(&b, "678", 3), 0);
	assert_string_equal(b.data, "12345678");
	assert_int_equal(sbx_buf_printf(&b, "x"), -1);
	sbx_buf_release(&b);
}

static void ids_and_errors(void **state)
{
	char a[64], b[64], digest[65];
	struct sbx_error err;

	assert_int_equal(sbx_random_id("sbx_", 12, a, sizeof(a)), 0);
	assert_int_equal(sbx_random_id("sbx_", 12, b, sizeof(b)), 0);
	assert_int_equal(strlen(a), 28);
	assert_string_not_equal(a, b);
	assert_int_equal(sbx_random_id("sbx_", 12, a, 10), -1);
	sbx_sha256_hex("abc", 3, digest);
	assert_string_equal(digest,
			    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	assert_int_equal(sbx_error_set(&err, SBX_E_SANDBOX_NOT_RUNNING, "id", "gone '%s'", "x"),
			 -1);
	assert_int_equal(sbx_code_status(err.code), 410);
	assert_string_equal(sbx_code_type(err.code), "sandbox_not_running");
	assert_string_equal(err.param, "id");
	assert_string_equal(err.message, "gone 'x'");
	assert_int_equal(sbx_code_status(SBX_E_CONCURRENCY_LIMIT), 429);
}

static void timespec_in_carries_and_clamps(void **state)
{
	struct timespec now, a, b, c;

	clock_gettime(CLOCK_MONOTONIC, &now);
	a = sbx_timespec_in(CLOCK_MONOTONIC, 1999);
	b = sbx_timespec_in(CLOCK_MONOTONIC, -5);
	c = sbx_timespec_in(CLOCK_REALTIME, 0);
	assert_true(a.tv_nsec >= 0 && a.tv_nsec < 1000000000L);
	/* 1.999 s later: one or two seconds on, never past now + 2 s + slack */
	int64_t ns = (int64_t)(a.tv_sec - now.tv_sec) * 1000000000LL + (a.tv_nsec - now.tv_nsec);
	assert_true(ns >= 1999000000LL && ns < 2999000000LL);
	/* negative = now */
	ns = (int64_t)(b.tv_sec - now.tv_sec) * 1000000000LL + (b.tv_nsec - now.tv_nsec);
	assert_true(ns >= 0 && ns < 1000000000LL);
	assert_true(c.tv_sec > 1700000000); /* the wall clock, not the monotonic one */
}

/* The log line's context and its JSON form: stderr redirected to a file. */
static void log_context_and_json(void **state)
{
	char path[] = "/tmp/sbx-test-log-XXXXXX", *text;
	int fd = mkstemp(path), saved = dup(2);
	size_t n;

	assert_true(fd >= 0 && saved >= 0);
	fflush(stderr);
	dup2(fd, 2);
	sbx_log_context_set("req_1", "acct_2", NULL);
	sbx_info("mod", "plain %d", 1);
	sbx_log_set_format(SBX_LOG_JSON);
	sbx_warn("mod", "quote \" tab \t");
	sbx_log_context_set(NULL, NULL, NULL);
	sbx_err("m2", "none");
	sbx_log_set_format(SBX_LOG_TEXT);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	close(fd);
	assert_non_null(text = sbx_read_file(path, 1 << 16, &n));
	unlink(path);
	char *l2 = strchr(text, '\n') + 1, *l3 = strchr(l2, '\n') + 1;
	assert_non_null(strstr(text, " info mod: plain 1 request_id=req_1 account_id=acct_2\n"));
	assert_int_equal(strncmp(l2, "{\"time\":\"", 9), 0);
	assert_non_null(strstr(l2, "\"level\":\"warn\",\"module\":\"mod\",\"message\":\"quote "
				   "\\\" tab \\u0009\",\"request_id\":\"req_1\",\"account_id\":"
				   "\"acct_2\"}\n"));
	assert_null(strstr(l3, "request_id"));
	assert_non_null(strstr(l3, "\"message\":\"none\"}\n"));
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(utf8_valid_kept),
	    cmocka_unit_test(utf8_invalid_replaced_nul_kept),
	    cmocka_unit_test(utf8_cut_tail),
	    cmocka_unit_test(base64_vectors),
	    cmocka_unit_test(rfc3339_round_trip),
	    cmocka_unit_test(buf_bounded),
	    cmocka_unit_test(log_context_and_json),
	    cmocka_unit_test(ids_and_errors),
	    cmocka_unit_test(timespec_in_carries_and_clamps),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
