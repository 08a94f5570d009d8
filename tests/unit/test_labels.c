/* Labels (issue 32): the checks of a metadata pair and its canonical JSON
 * (sandbox/metadata.c), the request's metadata object (api/labels.c), and
 * the store's labels on a real SQLite file: kept at create, filtered (AND
 * of pairs), updated (set, remove, clear, bounds), per account, across a
 * reopen, and usage grouped by a key adding up to the rollups exactly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api-priv.h"
#include "sandbox/sandbox.h"
#include "store/store.h"
#include "util/util.h"

#include "store_fx.h"

static int add(struct sandbox_metadata *m, const char *k, const char *v, struct sbx_error *err)
{
	return sandbox_metadata_add(m, "metadata", k, strlen(k), v, v ? strlen(v) : 0, err);
}

static void test_pair_rules(void **state)
{
	struct sandbox_metadata m = {0};
	struct sbx_error err = {0};
	char big[300], json[SANDBOX_METADATA_JSON_MAX];

	(void)state;
	assert_int_equal(add(&m, "job", "4711", &err), 0);
	assert_int_equal(add(&m, "A-z_0.9", "", &err), 0); /* "" = remove */
	assert_true(m.pairs[1].remove);
	assert_int_equal(add(&m, "gone", NULL, &err), 0);
	assert_true(m.pairs[2].remove);
	/* each rule refuses, naming the param */
	assert_int_equal(add(&m, "", "x", &err), -1);
	assert_string_equal(err.param, "metadata");
	assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
	memset(big, 'k', 41);
	big[41] = '\0';
	assert_int_equal(add(&m, big, "x", &err), -1);
	big[40] = '\0';
	assert_int_equal(add(&m, big, "x", &err), 0);
	assert_int_equal(add(&m, "a b", "x", &err), -1);
	assert_int_equal(add(&m, "a/b", "x", &err), -1);
	assert_int_equal(add(&m, "job", "again", &err), -1); /* twice */
	assert_non_null(strstr(err.message, "twice"));
	memset(big, 'v', 257);
	big[257] = '\0';
	assert_int_equal(add(&m, "v", big, &err), -1);
	big[256] = '\0';
	assert_int_equal(add(&m, "v", big, &err), 0);
	assert_int_equal(add(&m, "ctl", "a\nb", &err), -1);
	assert_int_equal(add(&m, "del", "a\x7f", &err), -1);
	assert_int_equal(add(&m, "utf", "\xc3\x28", &err), -1);
	assert_int_equal(add(&m, "utf8", "caf\xc3\xa9 \"q\" \\", &err), 0);

	/* canonical: keys sorted, removals left out, or null in a patch */
	struct sandbox_metadata c = {0};
	assert_int_equal(add(&c, "zeta", "1", &err), 0);
	assert_int_equal(add(&c, "alpha", "a\"b/c", &err), 0);
	assert_int_equal(add(&c, "mid", NULL, &err), 0);
	assert_int_equal(sandbox_metadata_json(&c, false, json, sizeof(json)), 0);
	assert_string_equal(json, "{\"alpha\":\"a\\\"b/c\",\"zeta\":\"1\"}");
	assert_int_equal(sandbox_metadata_json(&c, true, json, sizeof(json)), 0);
	assert_string_equal(json, "{\"alpha\":\"a\\\"b/c\",\"mid\":null,\"zeta\":\"1\"}");
	assert_int_equal(sandbox_metadata_json(NULL, false, json, sizeof(json)), 0);
	assert_string_equal(json, "{}");
	assert_int_equal(sandbox_metadata_json(&c, false, json, 8), -1);
	char v[SANDBOX_METADATA_VALUE_MAX + 1];
	assert_true(
	    sandbox_metadata_lookup("{\"alpha\":\"a\\\"b\",\"z\":\"1\"}", "alpha", v, sizeof v));
	assert_string_equal(v, "a\"b");
	assert_false(sandbox_metadata_lookup("{\"alpha\":\"a\"}", "beta", v, sizeof v));
	assert_false(sandbox_metadata_lookup("", "alpha", v, sizeof v));
}

static void test_count_and_bytes(void **state)
{
	struct sandbox_metadata m = {0};
	struct sbx_error err = {0};
	char k[8], v[SANDBOX_METADATA_VALUE_MAX + 1];

	(void)state;
	for (int i = 0; i < SANDBOX_METADATA_KEYS_MAX; i++) {
		snprintf(k, sizeof k, "k%02d", i);
		assert_int_equal(add(&m, k, "v", &err), 0);
	}
	assert_int_equal(add(&m, "k16", "v", &err), -1);
	assert_non_null(strstr(err.message, "16 keys"));
	/* 4 x (3 + 256) = 1036 > 1024 bytes of keys and values */
	memset(&m, 0, sizeof m);
	memset(v, 'x', 256);
	v[256] = '\0';
	for (int i = 0; i < 3; i++) {
		snprintf(k, sizeof k, "k%02d", i);
		assert_int_equal(add(&m, k, v, &err), 0);
	}
	assert_int_equal(add(&m, "k03", v, &err), -1);
	assert_non_null(strstr(err.message, "1024 bytes"));
	assert_int_equal(add(&m, "k03", "short", &err), 0);
}

static void test_api_decode(void **state)
{
	struct sandbox_metadata m;
	struct sbx_error err = {0};
	bool clear = true;
	const char *body;

	(void)state;
	body = "{\"metadata\":{\"job\":\"4711\",\"old\":null,\"gone\":\"\"}}";
	assert_int_equal(api_update_decode(body, strlen(body), &m, &clear, &err), 0);
	assert_false(clear);
	assert_int_equal(m.n, 3);
	assert_false(m.pairs[0].remove);
	assert_true(m.pairs[1].remove);
	assert_true(m.pairs[2].remove);
	body = "{\"metadata\":null}";
	assert_int_equal(api_update_decode(body, strlen(body), &m, &clear, &err), 0);
	assert_true(clear);
	body = "{\"metadata\":\"\"}";
	clear = false;
	assert_int_equal(api_update_decode(body, strlen(body), &m, &clear, &err), 0);
	assert_true(clear);
	const char *bad[] = {
	    "{}",
	    "{\"metadata\":[]}",
	    "{\"metadata\":\"x\"}",
	    "{\"metadata\":{\"a\":1}}",
	    "{\"metadata\":{\"a b\":\"1\"}}",
	    "{\"metadata\":{\"a\":\"x\\u0000y\"}}",
	    "{\"metadata\":{\"a\":{}}}",
	};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		sbx_error_clear(&err);
		assert_int_equal(api_update_decode(bad[i], strlen(bad[i]), &m, &clear, &err), -1);
		assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
		assert_string_equal(err.param, "metadata");
	}
	body = "{\"metadata\":{},\"size\":\"small\"}";
	assert_int_equal(api_update_decode(body, strlen(body), &m, &clear, &err), -1);
	assert_string_equal(err.param, "size");
	/* a create's metadata: null is not "clear everything" there */
	struct json_object *o = json_tokener_parse("null");
	assert_int_equal(api_metadata_decode(o, &m, NULL, &err), -1);
	o = json_tokener_parse("{\"b\":\"2\",\"a\":\"1\"}");
	assert_int_equal(api_metadata_decode(o, &m, NULL, &err), 0);
	assert_int_equal(m.n, 2);
	json_object_put(o);
	/* a stored object back into a view */
	o = api_metadata_encode("{\"a\":\"1\"}");
	assert_string_equal(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN),
			    "{\"a\":\"1\"}");
	json_object_put(o);
	o = api_metadata_encode("");
	assert_string_equal(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN), "{}");
	json_object_put(o);
}

/* ------------------------------------------------------------ the store */

static int fx_setup(void **state)
{
	return fx_open(state, "labels", 100000000);
}

/* A running sandbox of account a with metadata (JSON, may be "") ready at
 * created_ms. */
static void sandbox_new(struct fx *f, const char *account, const char *json, int64_t created_ms,
			struct store_sandbox *r)
{
	struct sbx_error err = {0};

	memset(r, 0, sizeof *r);
	snprintf(r->account_id, sizeof r->account_id, "%s", account);
	snprintf(r->size, sizeof r->size, "small");
	snprintf(r->metadata, sizeof r->metadata, "%s", json);
	r->timeout_minutes = 600;
	r->price_micro_per_hour = 90000;
	r->requested_at_ms = created_ms - 1000;
	assert_int_equal(store_sandbox_reserve(f->s, r, 900000, 100, &err), 0);
	assert_int_equal(
	    store_sandbox_activate(f->s, r->id, "d", created_ms, created_ms + 600 * 60000LL, &err),
	    0);
}

static size_t list_ids(struct fx *f, const char *account, const char *labels,
		       char ids[][STORE_ID_MAX], size_t max)
{
	struct store_sandbox *rows = NULL;
	struct sbx_error err = {0};
	size_t n = 0;
	bool more;

	assert_int_equal(store_sandbox_list_labeled(f->s, account, NULL, labels, 100, NULL, &rows,
						    &n, &more, &err),
			 0);
	assert_true(n <= max);
	for (size_t i = 0; i < n; i++)
		snprintf(ids[i], STORE_ID_MAX, "%s", rows[i].id);
	free(rows);
	return n;
}

static int64_t charge_25_per_s(const struct store_sandbox *row, int64_t ended_at_ms)
{
	return 25 * store_billed_seconds(ended_at_ms - row->created_at_ms);
}

static void test_store_labels(void **state)
{
	struct fx *f = *state;
	struct store_sandbox r1, r2, r3, rb, got;
	struct sbx_error err = {0};
	char ids[8][STORE_ID_MAX];
	int64_t t = sbx_wall_ms() - 3600000;

	sandbox_new(f, f->a.id, "{\"job\":\"4711\",\"team\":\"x\"}", t, &r1);
	sandbox_new(f, f->a.id, "{\"job\":\"4711\"}", t + 1000, &r2);
	sandbox_new(f, f->a.id, "", t + 2000, &r3);
	sandbox_new(f, f->b.id, "{\"job\":\"4711\"}", t + 3000, &rb);
	assert_int_equal(store_sandbox_get(f->s, f->a.id, r1.id, &got, &err), 0);
	assert_string_equal(got.metadata, "{\"job\":\"4711\",\"team\":\"x\"}");
	assert_int_equal(store_sandbox_get(f->s, f->a.id, r3.id, &got, &err), 0);
	assert_string_equal(got.metadata, "{}");

	/* the filter: one pair, two (AND), none matching; per account */
	assert_int_equal(list_ids(f, f->a.id, "{\"job\":\"4711\"}", ids, 8), 2);
	assert_string_equal(ids[0], r2.id); /* newest first */
	assert_string_equal(ids[1], r1.id);
	assert_int_equal(list_ids(f, f->a.id, "{\"job\":\"4711\",\"team\":\"x\"}", ids, 8), 1);
	assert_string_equal(ids[0], r1.id);
	assert_int_equal(list_ids(f, f->a.id, "{\"job\":\"4712\"}", ids, 8), 0);
	assert_int_equal(list_ids(f, f->a.id, "{\"team\":\"x\",\"zz\":\"1\"}", ids, 8), 0);
	assert_int_equal(list_ids(f, f->b.id, "{\"job\":\"4711\"}", ids, 8), 1);
	assert_string_equal(ids[0], rb.id);
	assert_int_equal(list_ids(f, f->a.id, NULL, ids, 8), 3);

	/* update: set, replace, remove by null and by "" */
	assert_int_equal(store_sandbox_metadata_update(f->s, f->a.id, r3.id, false,
						       "{\"job\":\"9\",\"b\":\"2\"}", &got, &err),
			 0);
	assert_string_equal(got.metadata, "{\"b\":\"2\",\"job\":\"9\"}");
	assert_int_equal(store_sandbox_metadata_update(f->s, f->a.id, r3.id, false,
						       "{\"job\":\"4711\",\"b\":null}", &got, &err),
			 0);
	assert_string_equal(got.metadata, "{\"job\":\"4711\"}");
	assert_int_equal(list_ids(f, f->a.id, "{\"job\":\"4711\"}", ids, 8), 3);
	assert_int_equal(list_ids(f, f->a.id, "{\"b\":\"2\"}", ids, 8), 0);
	assert_int_equal(store_sandbox_metadata_update(f->s, f->a.id, r1.id, false,
						       "{\"team\":\"\"}", &got, &err),
			 0);
	assert_string_equal(got.metadata, "{\"job\":\"4711\"}");
	/* clear, then set in the same call */
	assert_int_equal(
	    store_sandbox_metadata_update(f->s, f->a.id, r2.id, true, "{\"n\":\"1\"}", &got, &err),
	    0);
	assert_string_equal(got.metadata, "{\"n\":\"1\"}");

	/* bounds on the result: nothing changes */
	char patch[1024] = "{";
	for (int i = 0; i < 16; i++)
		snprintf(patch + strlen(patch), sizeof patch - strlen(patch), "%s\"k%02d\":\"v\"",
			 i ? "," : "", i);
	strcat(patch, "}");
	assert_int_equal(
	    store_sandbox_metadata_update(f->s, f->a.id, r2.id, false, patch, &got, &err), -1);
	assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
	assert_string_equal(err.param, "metadata");
	assert_int_equal(store_sandbox_get(f->s, f->a.id, r2.id, &got, &err), 0);
	assert_string_equal(got.metadata, "{\"n\":\"1\"}");
	assert_int_equal(list_ids(f, f->a.id, "{\"k00\":\"v\"}", ids, 8), 0);

	/* another account's sandbox, an unknown one: not found, unchanged */
	sbx_error_clear(&err);
	assert_int_equal(
	    store_sandbox_metadata_update(f->s, f->b.id, r1.id, false, "{\"x\":\"1\"}", &got, &err),
	    -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_int_equal(
	    store_sandbox_metadata_update(f->s, f->a.id, "sbx_nope", false, "{}", &got, &err), -1);
	assert_int_equal(err.code, SBX_E_NOT_FOUND);

	/* an ended sandbox can still be labelled; all of it survives a reopen */
	assert_int_equal(
	    store_sandbox_end(f->s, r1.id, STORE_DESTROYED, t + 5000, charge_25_per_s, NULL, &err),
	    1);
	assert_int_equal(store_sandbox_metadata_update(f->s, f->a.id, r1.id, false,
						       "{\"done\":\"y\"}", &got, &err),
			 0);
	assert_string_equal(got.metadata, "{\"done\":\"y\",\"job\":\"4711\"}");
	store_close(f->s);
	f->s = store_open(f->path, &err);
	assert_non_null(f->s);
	assert_int_equal(store_sandbox_get(f->s, f->a.id, r2.id, &got, &err), 0);
	assert_string_equal(got.metadata, "{\"n\":\"1\"}");
	assert_int_equal(list_ids(f, f->a.id, "{\"job\":\"4711\"}", ids, 8), 2);
	assert_int_equal(store_ledger_check(f->s, NULL, &err), 0);
}

/* ---------------------------------------------------- usage by a label */

struct sum {
	int64_t from, to, seconds, cost;
};

static int sum_piece(void *arg, int64_t hour_ms, int64_t seconds, int64_t cost)
{
	struct sum *s = arg;

	if (hour_ms >= s->from && hour_ms < s->to) {
		s->seconds += seconds;
		s->cost += cost;
	}
	return 0;
}

/* Sandboxes that ran across hour and day edges, some labelled: the
 * settled ones read grouped add up, per group, to the rollups' rows. */
static void test_usage_grouped(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	struct store_sandbox r;
	const int64_t day = 86400000, base = (sbx_wall_ms() / day - 3) * day;
	const struct {
		const char *json;
		int64_t start, len;
	} runs[] = {
	    {"{\"job\":\"a\"}", base + 3599000, 7000},	     /* across an hour */
	    {"{\"job\":\"b\"}", base + day - 1500, 4000000}, /* across a day */
	    {"", base + 7200000, 61500},		     /* unlabelled */
	    {"{\"other\":\"a\"}", base + 9000000, 1},	     /* another key only */
	    {"{\"job\":\"a\"}", base - 5 * 3600000, 20000},  /* before the period */
	    {"{\"job\":\"a\"}", base - 3610000, 20000},	     /* across its start */
	};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(runs); i++) {
		sandbox_new(f, f->a.id, runs[i].json, runs[i].start, &r);
		assert_int_equal(store_sandbox_end(f->s, r.id, STORE_DESTROYED,
						   runs[i].start + runs[i].len, charge_25_per_s,
						   NULL, &err),
				 1);
	}
	/* bob's labelled run is not alice's */
	sandbox_new(f, f->b.id, "{\"job\":\"a\"}", base + 1000, &r);
	assert_int_equal(store_sandbox_end(f->s, r.id, STORE_DESTROYED, base + 9000,
					   charge_25_per_s, NULL, &err),
			 1);

	int64_t from = base - 3600000, to = base + 2 * day;
	struct store_usage_snapshot snap;
	assert_int_equal(
	    store_usage_snapshot_grouped(f->s, f->a.id, from, to, 0, "job", &snap, &err), 0);
	int64_t rows_s = 0, rows_c = 0;
	for (size_t i = 0; i < snap.n_rows; i++) {
		rows_s += snap.rows[i].seconds;
		rows_c += snap.rows[i].cost_micro;
	}
	struct sum all = {from, to, 0, 0}, a = {from, to, 0, 0}, none = {from, to, 0, 0};
	for (size_t i = 0; i < snap.n_settled; i++) {
		const struct store_usage_labeled *u = &snap.settled[i];
		store_usage_split_sandbox(u, sum_piece, &all);
		if (u->labeled && strcmp(u->value, "a") == 0)
			store_usage_split_sandbox(u, sum_piece, &a);
		if (!u->labeled)
			store_usage_split_sandbox(u, sum_piece, &none);
	}
	assert_true(rows_s > 0);
	assert_int_equal(all.seconds, rows_s);
	assert_int_equal(all.cost, rows_c);
	assert_int_equal(a.seconds, 7 + 10);	/* not the run before the period */
	assert_int_equal(none.seconds, 62 + 1); /* unlabelled, and the other key's */
	assert_int_equal(none.cost, 25 * 63);
	store_usage_snapshot_release(&snap);
	/* the same with hourly rows over a window cutting the day-long run */
	assert_int_equal(store_usage_snapshot_grouped(f->s, f->a.id, base + day,
						      base + day + 3600000, STORE_HOUR_MS, "job",
						      &snap, &err),
			 0);
	struct sum cut = {base + day, base + day + 3600000, 0, 0};
	rows_s = rows_c = 0;
	for (size_t i = 0; i < snap.n_rows; i++) {
		rows_s += snap.rows[i].seconds;
		rows_c += snap.rows[i].cost_micro;
	}
	for (size_t i = 0; i < snap.n_settled; i++)
		store_usage_split_sandbox(&snap.settled[i], sum_piece, &cut);
	assert_true(rows_s > 0 && rows_s < 4000);
	assert_int_equal(cut.seconds, rows_s);
	assert_int_equal(cut.cost, rows_c);
	store_usage_snapshot_release(&snap);
}

int main(void)
{
	sbx_log_set_level(SBX_LOG_ERROR + 1);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pair_rules),
	    cmocka_unit_test(test_count_and_bytes),
	    cmocka_unit_test(test_api_decode),
	    cmocka_unit_test_setup_teardown(test_store_labels, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_usage_grouped, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
