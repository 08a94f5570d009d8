/* Previews (docs/api.md "Previews") below the API: the store's rows
 * (migration 13: only a token's hash, the per-sandbox cap counting live
 * rows, a revoke kept to its account and sandbox, the lookup by hash, the
 * dead rows dropped at the next insert) and the config's preview keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api-priv.h"
#include "store/store.h"
#include "util/util.h"

#include "store_fx.h"

static int fx_setup(void **state)
{
	struct fx *f;
	struct sbx_error err = {0};
	int64_t t = sbx_wall_ms();

	if (fx_open(state, "previews", 1000000) < 0)
		return -1;
	f = *state;
	snprintf(f->sb.account_id, sizeof f->sb.account_id, "%s", f->a.id);
	snprintf(f->sb.size, sizeof f->sb.size, "small");
	f->sb.timeout_minutes = 15;
	f->sb.price_micro_per_hour = 90000;
	f->sb.requested_at_ms = t;
	if (store_sandbox_reserve(f->s, &f->sb, 22500, 20, &err) < 0 ||
	    store_sandbox_activate(f->s, f->sb.id, f->sb.id, t, t + 15 * 60000, &err) < 0)
		return -1;
	return 0;
}

/* A row of sandbox f->sb, port 3000, live for ttl_ms from now. */
static int insert(struct fx *f, const char *id, int64_t ttl_ms, const char *token, int max,
		  struct sbx_error *err)
{
	struct store_preview p = {0};
	char hash[65];

	snprintf(p.id, sizeof p.id, "%s", id);
	snprintf(p.account_id, sizeof p.account_id, "%s", f->a.id);
	snprintf(p.sandbox_id, sizeof p.sandbox_id, "%s", f->sb.id);
	p.port = 3000;
	p.created_at_ms = sbx_wall_ms();
	p.expires_at_ms = p.created_at_ms + ttl_ms;
	sbx_sha256_hex(token, strlen(token), hash);
	sbx_error_clear(err);
	return store_preview_insert(f->s, &p, hash, max, err);
}

static int64_t rows(struct fx *f)
{
	sqlite3 *db;
	sqlite3_stmt *q;
	int64_t n;

	assert_int_equal(sqlite3_open_v2(f->path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*) FROM previews", -1, &q, NULL),
			 SQLITE_OK);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	n = sqlite3_column_int64(q, 0);
	sqlite3_finalize(q);
	sqlite3_close(db);
	return n;
}

static void test_store_rows(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	struct store_preview got, *list = NULL;
	char hash[65];
	size_t n = 0;

	assert_int_equal(insert(f, "pv_1", 60000, "token-one", 2, &err), 0);
	assert_int_equal(insert(f, "pv_2", 60000, "token-two", 2, &err), 0);
	/* the cap counts live rows */
	assert_int_equal(insert(f, "pv_3", 60000, "token-three", 2, &err), -1);
	assert_int_equal(err.code, SBX_E_CONCURRENCY_LIMIT);
	/* found by the hash of the token; the token itself is nowhere */
	sbx_sha256_hex("token-one", 9, hash);
	assert_int_equal(store_preview_find(f->s, hash, &got, &err), 0);
	assert_string_equal(got.id, "pv_1");
	assert_int_equal(got.port, 3000);
	assert_string_equal(got.sandbox_id, f->sb.id);
	sbx_sha256_hex("token-none", 10, hash);
	assert_int_equal(store_preview_find(f->s, hash, &got, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	/* listed newest first, for the account only */
	assert_int_equal(
	    store_preview_list(f->s, f->a.id, f->sb.id, 3000, sbx_wall_ms(), 10, &list, &n, &err),
	    0);
	assert_int_equal(n, 2);
	free(list);
	assert_int_equal(
	    store_preview_list(f->s, f->b.id, f->sb.id, 0, sbx_wall_ms(), 10, &list, &n, &err), 0);
	assert_int_equal(n, 0);
	free(list);
	/* another account cannot revoke; the owner can, twice, keeping the
	 * first time */
	assert_int_equal(
	    store_preview_revoke(f->s, f->b.id, f->sb.id, "pv_1", sbx_wall_ms(), &got, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_int_equal(store_preview_revoke(f->s, f->a.id, f->sb.id, "pv_1", 1000, &got, &err),
			 0);
	assert_int_equal(got.revoked_at_ms, 1000);
	assert_int_equal(store_preview_revoke(f->s, f->a.id, f->sb.id, "pv_1", 2000, &got, &err),
			 0);
	assert_int_equal(got.revoked_at_ms, 1000);
	/* a revoked row frees its place, and the next insert drops it */
	assert_int_equal(insert(f, "pv_3", 1, "token-three", 2, &err), 0);
	assert_int_equal(rows(f), 2);
	usleep(5000);
	/* pv_3 expired: its place is free, and it goes at the next insert */
	assert_int_equal(insert(f, "pv_4", 60000, "token-four", 2, &err), 0);
	assert_int_equal(rows(f), 2);
	/* a token's hash is unique */
	assert_int_equal(insert(f, "pv_5", 60000, "token-four", 5, &err), -1);
}

static void test_config_keys(void **state)
{
	static const struct {
		const char *json, *param;
	} bad[] = {
	    {"{\"preview_domain\": \"Preview.Example.com\"}", "preview_domain"},
	    {"{\"preview_domain\": \"a..b\"}", "preview_domain"},
	    {"{\"preview_domain\": \".example.com\"}", "preview_domain"},
	    {"{\"preview_domain\": \"\"}", "preview_domain"},
	    {"{\"preview_domain\": \"localhost\"}", "preview_domain"},
	    {"{\"preview_domain\": \"under_score.com\"}", "preview_domain"},
	    {"{\"preview_max_ttl_seconds\": 59}", "preview_max_ttl_seconds"},
	    {"{\"max_previews_per_sandbox\": 0}", "max_previews_per_sandbox"},
	    {"{\"preview_public_port\": 65536}", "preview_public_port"},
	};
	struct sandbox_config c;
	struct sbx_error err;

	(void)state;
	sandbox_config_defaults(&c);
	assert_string_equal(c.preview_domain, "preview.localhost");
	assert_int_equal(c.preview_max_ttl_seconds, 86400);
	assert_int_equal(c.max_previews_per_sandbox, 20);
	assert_int_equal(c.preview_public_port, 0);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		sandbox_config_defaults(&c);
		sbx_error_clear(&err);
		if (api_config_parse(bad[i].json, strlen(bad[i].json), &c, &err) == 0) {
			sandbox_config_resolve(&c);
			assert_int_equal(sandbox_config_validate(&c, &err), -1);
		}
		if (strcmp(err.param, bad[i].param) != 0)
			fail_msg("%s: param '%s'", bad[i].json, err.param);
	}
	sandbox_config_defaults(&c);
	{
		const char *ok = "{\"preview_domain\": \"preview.example.com\", "
				 "\"preview_public_port\": 443}";

		assert_int_equal(api_config_parse(ok, strlen(ok), &c, &err), 0);
	}
	sandbox_config_resolve(&c);
	assert_int_equal(sandbox_config_validate(&c, &err), 0);
	assert_string_equal(c.preview_domain, "preview.example.com");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_store_rows, fx_setup, fx_teardown),
	    cmocka_unit_test(test_config_keys),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
