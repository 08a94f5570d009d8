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
    "usage: sbx usage [--from RFC3339] [--to RFC3339] [--granularity day|hour] [--json]\n"
    "Balance, what is reserved and consumed, usage by size over the period (the\n"
    "current month by default), and one row per day or hour with --granularity.\n";

int cmd_usage(struct cli *c, int argc, char **argv)
{
	struct cli_opt opts[] = {{.name = "from", .arg = true},
				 {.name = "to", .arg = true},
				 {.name = "granularity", .arg = true},
				 {0}};
	char path[512] = "/v1/usage", a[32], b[32], running[48], period[96];
	json_object *by, *buckets;
	struct cli_table *t;
	struct cli_reply r;
	const char *pos[1], *sep = "?";
	int npos, rc;

	if ((rc = cli_begin(c, argc, argv, opts, pos, 0, &npos, NULL, NULL, usage_help)) >= 0)
		return rc;
	for (int i = 0; i < 3; i++) {
		char *esc;
		if (!opts[i].set)
			continue;
		if (strlen(opts[i].value) > 64)
			return cli_usage(c, "--%s is too long", opts[i].name);
		if (!(esc = curl_easy_escape(NULL, opts[i].value, 0)))
			return CLI_EXIT_USAGE;
		snprintf(path + strlen(path), sizeof(path) - strlen(path), "%s%s=%s", sep,
			 opts[i].name, esc);
		curl_free(esc);
		sep = "&";
	}
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
    "usage: sbx keys [list]          the account's API keys (never their secrets)\n"
    "       sbx keys create          a new key; its secret is printed once, on stdout\n"
    "       sbx keys revoke KEY_ID   revoke a key (it is refused from then on)\n";

int cmd_keys(struct cli *c, int argc, char **argv)
{
	const char *pos[2], *verb;
	struct cli_reply r;
	json_object *data;
	char path[128];
	int npos, rc;

	if ((rc = cli_begin(c, argc, argv, NULL, pos, 2, &npos, NULL, NULL, keys_help)) >= 0)
		return rc;
	verb = npos ? pos[0] : "list";
	if (strcmp(verb, "list") == 0 && npos <= 1)
		rc = cli_call(c, "GET", "/v1/api_keys", NULL, NULL, NULL, &r);
	else if (strcmp(verb, "create") == 0 && npos == 1)
		rc = cli_call(c, "POST", "/v1/api_keys", NULL, NULL, NULL, &r);
	else if (strcmp(verb, "revoke") == 0 && npos == 2 && cli_id_ok(pos[1])) {
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
		fprintf(stderr, "sbx: created key %s; its secret is shown only now:\n",
			cli_str(r.json, "id"));
		printf("%s\n", cli_str(r.json, "secret"));
	} else if (verb[0] == 'r') {
		printf("%s revoked\n", cli_str(r.json, "id"));
	} else {
		struct cli_table *t = cli_table_new(4, "ID", "PREFIX", "CREATED", "REVOKED");
		if (json_object_object_get_ex(r.json, "data", &data) &&
		    json_object_is_type(data, json_type_array))
			for (size_t i = 0; i < json_object_array_length(data); i++) {
				json_object *k = json_object_array_get_idx(data, i);
				cli_table_row(t, cli_str(k, "id"), cli_str(k, "prefix"),
					      cli_str(k, "created_at"),
					      cli_bool(k, "revoked") ? cli_str(k, "revoked_at")
								     : "-");
			}
		cli_table_print(t);
	}
	cli_reply_free(&r);
	return rc;
}
