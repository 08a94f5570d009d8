/* sbx: one-shot executions, receipts, usage and API keys. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "../receipt/verify.h"
#include "../util/util.h"
#include "sbx.h"

/* Largest code file `sbx run` reads (the daemon caps it lower). */
#define RUN_CODE_MAX (4u * 1024 * 1024)

/* ---------------------------------------------------------------- run */

static const char run_help[] =
    "usage: sbx run (--python | --node | --runtime NAME) FILE|- [--timeout SECONDS] [--json]\n"
    "Run the code in FILE (- reads stdin) once in a fresh sandbox, for at most\n"
    "--timeout seconds (default 30; the daemon caps it). Its stdout\n"
    "and stderr go to sbx's own; then one line on stderr names the signed\n"
    "receipt ('sbx: receipt rcpt_... (execution sbxr_..., cost ... USD)').\n"
    "Exits with the program's code; 124 when it timed out; 125 when sbx could\n"
    "not run it. --json prints the API's reply (keep it to check the receipt's\n"
    "output fingerprint later: sbx receipt verify --execution).\n";

/* Write a JSON string member (which may hold NUL) to a stream. */
static void put_str(json_object *o, const char *key, FILE *f)
{
	json_object *v;

	if (o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string))
		fwrite(json_object_get_string(v), 1, (size_t)json_object_get_string_len(v), f);
}

int cmd_run(struct cli *c, int argc, char **argv)
{
	struct cli_opt opts[] = {{.name = "python"},
				 {.name = "node"},
				 {.name = "runtime", .arg = true},
				 {.name = "timeout", .arg = true},
				 {0}};
	_cleanup_free_ char *code = NULL;
	const char *pos[1], *runtime;
	json_object *body, *rcpt;
	struct cli_reply r;
	size_t len = 0;
	long long secs;
	int npos, rc;

	if ((rc = cli_begin(c, argc, argv, opts, pos, 1, &npos, NULL, NULL, run_help)) >= 0)
		return rc ? CLI_EXIT_EXEC_FAILED : 0;
	if (opts[0].set + opts[1].set + opts[2].set != 1)
		return cli_usage(c, "%s", "give one of --python, --node, --runtime NAME"),
		       CLI_EXIT_EXEC_FAILED;
	runtime = opts[0].set ? "python" : opts[1].set ? "node" : opts[2].value;
	if (npos != 1)
		return cli_usage(c, "%s", "give the code's FILE, or - for stdin"),
		       CLI_EXIT_EXEC_FAILED;
	if (!(code = cli_read_file(pos[0], RUN_CODE_MAX, &len))) {
		fprintf(stderr, "sbx run: cannot read '%s' (or it is over %u MiB)\n", pos[0],
			RUN_CODE_MAX >> 20);
		return CLI_EXIT_EXEC_FAILED;
	}
	body = json_object_new_object();
	json_object_object_add(body, "runtime", json_object_new_string(runtime));
	json_object_object_add(body, "code", json_object_new_string_len(code, (int)len));
	if (!cli_parse_int(opts[3].set ? opts[3].value : "30", 1, 86400, &secs)) {
		json_object_put(body);
		return cli_usage(c, "%s", "--timeout must be a whole number of seconds >= 1"),
		       CLI_EXIT_EXEC_FAILED;
	}
	json_object_object_add(body, "timeout_seconds", json_object_new_int64(secs));
	rc = cli_call(c, "POST", "/v1/sandbox/executions", body, NULL, "running", &r);
	json_object_put(body);
	if (rc)
		return CLI_EXIT_EXEC_FAILED;
	if (r.status != 200) {
		cli_fail(c, &r);
		cli_reply_free(&r);
		return CLI_EXIT_EXEC_FAILED;
	}
	if (c->json) {
		cli_print_json(r.json);
	} else {
		put_str(r.json, "stdout", stdout);
		fflush(stdout);
		put_str(r.json, "stderr", stderr);
	}
	if (cli_bool(r.json, "stdout_truncated") || cli_bool(r.json, "stderr_truncated"))
		fprintf(stderr, "sbx: the output was truncated at the daemon's output cap\n");
	rcpt = cli_obj(r.json, "receipt");
	fprintf(stderr, "sbx: receipt %s (execution %s, cost %s USD)\n",
		cli_str(rcpt, "id")[0] ? cli_str(rcpt, "id") : "none", cli_str(r.json, "id"),
		cli_str(cli_obj(r.json, "billing"), "cost_usd"));
	rc = (int)(cli_int(r.json, "exit_code") & 0xff);
	if (strcmp(cli_str(r.json, "status"), "timed_out") == 0) {
		fprintf(stderr, "sbx: the program timed out\n");
		rc = CLI_EXIT_TIMEOUT;
	}
	cli_reply_free(&r);
	return rc;
}

/* ------------------------------------------------------------ receipt */

static const char receipt_help[] =
    "usage: sbx receipt get RCPT_ID          print the signed receipt (JSON)\n"
    "       sbx receipt public-key            print the node's signer key (PEM;\n"
    "                                         --json: the object with its hex)\n"
    "       sbx receipt verify RECEIPT.json (--signer 0xHEX | --public-key PEM)\n"
    "               [--execution REPLY.json] [--code FILE --runtime NAME | --input F]\n"
    "verify works offline (no daemon, no key): the hash and Ed25519 signature\n"
    "against the pinned signer, then the output and input fingerprints when the\n"
    "files are given. Prints 'valid: ...' (exit 0) or 'invalid: why' (exit 1).\n";

static int receipt_verify_cmd(struct cli *c, struct cli_opt *opts, const char **pos, int npos)
{
	struct receipt_check chk = {
	    .receipt_path = npos == 2 ? pos[1] : NULL,
	    .signer = cli_opt_get(opts, "signer")->value,
	    .public_key_path = cli_opt_get(opts, "public-key")->value,
	    .execution_path = cli_opt_get(opts, "execution")->value,
	    .code_path = cli_opt_get(opts, "code")->value,
	    .runtime = cli_opt_get(opts, "runtime")->value,
	    .input_path = cli_opt_get(opts, "input")->value,
	};
	enum receipt_check_result res;
	char msg[512];

	if (npos > 2)
		return cli_usage(c, "%s", "verify takes one RECEIPT.json");
	res = receipt_check_files(&chk, msg, sizeof(msg));
	if (res == RECEIPT_CHECK_USAGE)
		return cli_usage(c, "%s", msg);
	if (c->json) {
		json_object *o = json_object_new_object();
		json_object_object_add(o, "valid", json_object_new_boolean(res == 0));
		json_object_object_add(o, "message", json_object_new_string(msg));
		cli_print_json(o);
		json_object_put(o);
	} else {
		printf("%s: %s\n", res == RECEIPT_CHECK_VALID ? "valid" : "invalid", msg);
	}
	return res == RECEIPT_CHECK_VALID ? 0 : CLI_EXIT_API;
}

int cmd_receipt(struct cli *c, int argc, char **argv)
{
	struct cli_opt opts[] = {{.name = "signer", .arg = true},
				 {.name = "public-key", .arg = true},
				 {.name = "execution", .arg = true},
				 {.name = "code", .arg = true},
				 {.name = "runtime", .arg = true},
				 {.name = "input", .arg = true},
				 {0}};
	const char *pos[3];
	struct cli_reply r;
	char path[128];
	int npos, rc = cli_parse(c, argc, argv, opts, pos, 3, &npos, NULL, NULL);

	if (rc < 0) {
		fputs(receipt_help, stdout);
		return 0;
	}
	if (rc)
		return rc;
	if (npos == 0)
		return cli_usage(c, "%s", "give get, public-key or verify");
	if (strcmp(pos[0], "verify") == 0)
		return receipt_verify_cmd(c, opts, pos, npos);
	for (struct cli_opt *o = opts; o->name; o++)
		if (o->set)
			return cli_usage(c, "--%s belongs to 'receipt verify'", o->name);
	if ((rc = cli_config(c, true)))
		return rc;
	if (strcmp(pos[0], "get") == 0 && npos == 2 && cli_id_ok(pos[1]))
		snprintf(path, sizeof(path), "/v1/receipts/%s", pos[1]);
	else if (strcmp(pos[0], "public-key") == 0 && npos == 1)
		snprintf(path, sizeof(path), "/v1/receipts/public-key");
	else
		return cli_usage(c, "%s", "give 'get RCPT_ID', 'public-key' or 'verify ...'");
	if ((rc = cli_call(c, "GET", path, NULL, NULL, NULL, &r)))
		return rc;
	if (r.status != 200)
		rc = cli_fail(c, &r);
	else if (strcmp(pos[0], "public-key") == 0 && !c->json)
		fputs(cli_str(r.json, "public_key_pem"), stdout);
	else /* the receipt as the daemon sent it, byte for byte */
		printf("%s\n", r.body);
	cli_reply_free(&r);
	return rc;
}

/* -------------------------------------------------------------- usage */

static const char usage_help[] =
    "usage: sbx usage [--from T] [--to T] [--granularity day|hour] [--json]\n"
    "Balance, what is reserved and consumed, usage by size over the period, and\n"
    "one row per day or hour with --granularity. T is an RFC 3339 time\n"
    "(2026-08-01T12:00:00Z) or a UTC date (2026-08-01): --from DATE starts at\n"
    "that day's beginning, --to DATE ends at that day's end (the day included).\n"
    "The period by default: the current month; with --granularity it ends now\n"
    "(no rows for the future), and --granularity hour without --from shows the\n"
    "24 hours up to its end.\n";

/* --from/--to: an RFC 3339 time, or a plain UTC date YYYY-MM-DD (its
 * midnight; with `end`, the next midnight, so the day is included).
 * -1 when neither. */
static int usage_time(const char *s, bool end, int64_t *ms)
{
	char buf[40];
	unsigned y, mo, d;
	int n = 0;

	if (strlen(s) == 10 && sscanf(s, "%4u-%2u-%2u%n", &y, &mo, &d, &n) == 3 && n == 10) {
		char back[32];

		snprintf(buf, sizeof(buf), "%sT00:00:00Z", s);
		if (sbx_rfc3339_parse(buf, ms) < 0)
			return -1;
		/* 2026-02-30 would roll over to March: refuse it */
		sbx_rfc3339(*ms, back);
		if (strncmp(back, s, 10) != 0)
			return -1;
		if (end)
			*ms += 86400000;
		return 0;
	}
	return sbx_rfc3339_parse(s, ms) < 0 || *ms <= 0 ? -1 : 0;
}

/* The query of `sbx usage` after defaults (usage_help) into path. */
static int usage_query(struct cli *c, struct cli_opt *opts, char *path, size_t size)
{
	const char *gran = opts[2].set ? opts[2].value : NULL;
	bool buckets = gran && (strcmp(gran, "hour") == 0 || strcmp(gran, "day") == 0);
	int64_t from = 0, to = 0, now = sbx_wall_ms();
	char from_s[32], to_s[32], *esc;

	if (opts[0].set && usage_time(opts[0].value, false, &from) < 0)
		return cli_usage(c, "--from takes a date like 2026-08-01 or an RFC 3339 time "
				    "like 2026-08-01T12:00:00Z");
	if (opts[1].set && usage_time(opts[1].value, true, &to) < 0)
		return cli_usage(c, "--to takes a date like 2026-08-31 or an RFC 3339 time "
				    "like 2026-08-31T12:00:00Z");
	if (buckets && !to && (!from || from < now))
		to = now;
	if (buckets && !from && strcmp(gran, "hour") == 0) /* 24 hours up to `to` */
		from = (to - 1) - (to - 1) % 3600000 - 23 * 3600000LL;
	snprintf(path, size, "/v1/usage");
	if (from) {
		sbx_rfc3339(from, from_s);
		snprintf(path + strlen(path), size - strlen(path), "?from=%s", from_s);
	}
	if (to) {
		sbx_rfc3339(to, to_s);
		snprintf(path + strlen(path), size - strlen(path), "%sto=%s", from ? "&" : "?",
			 to_s);
	}
	if (gran) {
		if (strlen(gran) > 64 || !(esc = curl_easy_escape(NULL, gran, 0)))
			return cli_usage(c, "%s", "--granularity is day or hour");
		snprintf(path + strlen(path), size - strlen(path), "%sgranularity=%s",
			 from || to ? "&" : "?", esc);
		curl_free(esc);
	}
	return 0;
}

int cmd_usage(struct cli *c, int argc, char **argv)
{
	struct cli_opt opts[] = {{.name = "from", .arg = true},
				 {.name = "to", .arg = true},
				 {.name = "granularity", .arg = true},
				 {0}};
	char path[512], a[32], b[32], running[48], period[96];
	json_object *by, *buckets;
	struct cli_table *t;
	struct cli_reply r;
	const char *pos[1];
	int npos, rc;

	if ((rc = cli_begin(c, argc, argv, opts, pos, 0, &npos, NULL, NULL, usage_help)) >= 0)
		return rc;
	if ((rc = usage_query(c, opts, path, sizeof(path))))
		return rc;
	if ((rc = cli_get_human(c, path, &r)) >= 0)
		return rc;
	t = cli_table_new(2, "balance_usd", cli_usd(cli_int(r.json, "balance_micro_usd"), a));
	cli_table_row(t, "reserved_usd", cli_usd(cli_int(r.json, "reserved_micro_usd"), a));
	cli_table_row(t, "available_usd", cli_usd(cli_int(r.json, "available_micro_usd"), a));
	cli_table_row(t, "consumed_usd", cli_usd(cli_int(r.json, "consumed_micro_usd"), a));
	snprintf(running, sizeof(running), "%lld of %lld",
		 (long long)cli_int(cli_obj(r.json, "sandboxes"), "running"),
		 (long long)cli_int(cli_obj(r.json, "sandboxes"), "limit"));
	cli_table_row(t, "running", running);
	snprintf(period, sizeof(period), "%s .. %s", cli_str(cli_obj(r.json, "period"), "from"),
		 cli_str(cli_obj(r.json, "period"), "to"));
	cli_table_row(t, "period", period);
	cli_table_print(t);
	putchar('\n');
	t = cli_table_new(3, "SIZE", "SECONDS", "COST_USD");
	if ((by = cli_obj(r.json, "by_size"))) {
		json_object_object_foreach(by, name, v)
		{
			snprintf(b, sizeof(b), "%lld", (long long)cli_int(v, "seconds"));
			cli_table_row(t, name, b, cli_usd(cli_int(v, "cost_micro_usd"), a));
		}
	}
	cli_table_print(t);
	if (json_object_object_get_ex(r.json, "buckets", &buckets) &&
	    json_object_is_type(buckets, json_type_array)) {
		putchar('\n');
		t = cli_table_new(3, "START", "SECONDS", "COST_USD");
		for (size_t i = 0; i < json_object_array_length(buckets); i++) {
			json_object *k = json_object_array_get_idx(buckets, i);
			snprintf(b, sizeof(b), "%lld", (long long)cli_int(k, "seconds"));
			cli_table_row(t, cli_str(k, "start"), b,
				      cli_usd(cli_int(k, "cost_micro_usd"), a));
		}
		cli_table_print(t);
	}
	cli_reply_free(&r);
	return 0;
}

/* --------------------------------------------------------------- keys */

static const char keys_help[] =
    "usage: sbx keys [list]          the account's API keys with their scopes\n"
    "                                (never their secrets)\n"
    "       sbx keys create [--scope SCOPE[,SCOPE...]]...\n"
    "                                a new key; its secret is printed once, on stdout.\n"
    "                                Scopes: sandboxes, keys; --scope '' makes a key\n"
    "                                with none; without --scope, this key's scopes\n"
    "       sbx keys revoke KEY_ID   revoke a key (it is refused from then on)\n";

/* The scopes of --scope (repeatable, comma-separated) as the body of
 * POST /v1/api_keys; NULL after a usage error. */
static json_object *keys_create_body(struct cli *c, struct cli_opt *scope)
{
	json_object *body = json_object_new_object(), *list = json_object_new_array();

	json_object_object_add(body, "scopes", list);
	for (size_t i = 0; i < scope->n; i++) {
		const char *p = scope->vals[i];

		while (*p) {
			size_t n = strcspn(p, ",");

			if (n == 0 || n > 32) {
				json_object_put(body);
				cli_usage(c, "--scope takes names like 'sandboxes,keys'");
				return NULL;
			}
			json_object_array_add(list, json_object_new_string_len(p, (int)n));
			p += n + (p[n] == ',');
		}
	}
	return body;
}

/* "sandboxes,keys", "-" for none, into buf. */
static const char *scopes_text(json_object *k, char *buf, size_t size)
{
	json_object *a;
	size_t used = 0;

	buf[0] = '\0';
	if (json_object_object_get_ex(k, "scopes", &a) && json_object_is_type(a, json_type_array))
		for (size_t i = 0; i < json_object_array_length(a) && used < size; i++)
			used += (size_t)snprintf(
			    buf + used, size - used, "%s%s", used ? "," : "",
			    json_object_get_string(json_object_array_get_idx(a, i)));
	return buf[0] ? buf : "-";
}

int cmd_keys(struct cli *c, int argc, char **argv)
{
	struct cli_opt opts[] = {{.name = "scope", .arg = true, .multi = true}, {0}};
	const char *pos[2], *verb;
	struct cli_reply r;
	json_object *data, *body = NULL;
	char path[128], scopes[256];
	int npos, rc;

	if ((rc = cli_begin(c, argc, argv, opts, pos, 2, &npos, NULL, NULL, keys_help)) >= 0)
		return rc;
	verb = npos ? pos[0] : "list";
	if (opts[0].set && strcmp(verb, "create") != 0)
		return cli_usage(c, "%s", "--scope belongs to 'keys create'");
	if (strcmp(verb, "list") == 0 && npos <= 1)
		rc = cli_call(c, "GET", "/v1/api_keys", NULL, NULL, NULL, &r);
	else if (strcmp(verb, "create") == 0 && npos == 1) {
		if (opts[0].set && !(body = keys_create_body(c, &opts[0])))
			return CLI_EXIT_USAGE;
		rc = cli_call(c, "POST", "/v1/api_keys", body, NULL, NULL, &r);
		json_object_put(body);
	} else if (strcmp(verb, "revoke") == 0 && npos == 2 && cli_id_ok(pos[1])) {
		snprintf(path, sizeof(path), "/v1/api_keys/%s", pos[1]);
		rc = cli_call(c, "DELETE", path, NULL, NULL, NULL, &r);
	} else
		return cli_usage(c, "%s", "give list, create or revoke KEY_ID");
	if (rc)
		return rc;
	if (r.status != 200 && r.status != 201) {
		rc = cli_fail(c, &r);
	} else if (c->json) {
		cli_print_json(r.json);
	} else if (verb[0] == 'c') {
		fprintf(stderr, "sbx: created key %s (scopes %s); its secret is shown only now:\n",
			cli_str(r.json, "id"), scopes_text(r.json, scopes, sizeof(scopes)));
		printf("%s\n", cli_str(r.json, "secret"));
	} else if (verb[0] == 'r') {
		printf("%s revoked\n", cli_str(r.json, "id"));
	} else {
		struct cli_table *t =
		    cli_table_new(5, "ID", "PREFIX", "SCOPES", "CREATED", "REVOKED");
		if (json_object_object_get_ex(r.json, "data", &data) &&
		    json_object_is_type(data, json_type_array))
			for (size_t i = 0; i < json_object_array_length(data); i++) {
				json_object *k = json_object_array_get_idx(data, i);
				cli_table_row(t, cli_str(k, "id"), cli_str(k, "prefix"),
					      scopes_text(k, scopes, sizeof(scopes)),
					      cli_str(k, "created_at"),
					      cli_bool(k, "revoked") ? cli_str(k, "revoked_at")
								     : "-");
			}
		cli_table_print(t);
	}
	cli_reply_free(&r);
	return rc;
}
