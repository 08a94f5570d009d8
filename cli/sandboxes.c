/* sbx: the sandbox commands (create, ls, get, extend, pause, resume,
 * metrics, rm, exec). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/util.h"
#include "sbx.h"

/* A sandbox as two aligned columns. */
static void print_sandbox(json_object *s)
{
	struct cli_table *t = cli_table_new(2, "id", cli_str(s, "id"));
	char startup[64];

	cli_table_row(t, "status", cli_str(s, "status"));
	cli_table_row(t, "size", cli_str(s, "size"));
	cli_table_row(t, "created_at", cli_str(s, "created_at"));
	cli_table_row(t, "expires_at", cli_str(s, "expires_at"));
	cli_table_row(t, "ended_at", cli_str(s, "ended_at")[0] ? cli_str(s, "ended_at") : "-");
	cli_table_row(t, "cost_usd", cli_str(s, "cost_usd"));
	if (cli_str(s, "startup_path")[0])
		snprintf(startup, sizeof(startup), "%s, %lld ms", cli_str(s, "startup_path"),
			 (long long)cli_int(s, "startup_ms"));
	else
		snprintf(startup, sizeof(startup), "-");
	cli_table_row(t, "startup", startup);
	json_object *md;
	if (json_object_object_get_ex(s, "metadata", &md) &&
	    json_object_is_type(md, json_type_object)) {
		char labels[2048] = "";

		json_object_object_foreach(md, k, v)
		{
			snprintf(labels + strlen(labels), sizeof(labels) - strlen(labels),
				 "%s%s=%s", labels[0] ? " " : "", k, json_object_get_string(v));
		}
		cli_table_row(t, "metadata", labels[0] ? labels : "-");
	}
	cli_table_print(t);
}

/* --label K=V options into a metadata object (*out, NULL when none).
 * false, with the usage message printed, on one that is not K=V. */
static bool labels_parse(struct cli *c, const struct cli_opt *o, json_object **out)
{
	*out = NULL;
	for (size_t i = 0; i < o->n; i++) {
		const char *kv = o->vals[i], *eq = strchr(kv, '=');
		char key[64];

		if (!eq || eq == kv || eq - kv >= (ptrdiff_t)sizeof(key)) {
			json_object_put(*out);
			*out = NULL;
			cli_usage(c, "--label '%.60s' is not KEY=VALUE", kv);
			return false;
		}
		snprintf(key, sizeof(key), "%.*s", (int)(eq - kv), kv);
		if (!*out)
			*out = json_object_new_object();
		json_object_object_add(*out, key, json_object_new_string(eq + 1));
	}
	return true;
}

/* Append s to a query, percent-encoded but for RFC 3986's unreserved
 * characters. false when it does not fit. */
static bool query_append(char *q, size_t n, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t len = strlen(q);

	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			     (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_' ||
			     ch == '~';

		if (len + 4 > n)
			return false;
		if (plain) {
			q[len++] = (char)ch;
		} else {
			q[len++] = '%';
			q[len++] = hex[ch >> 4];
			q[len++] = hex[ch & 15];
		}
	}
	q[len] = '\0';
	return true;
}

/* ------------------------------------------------------------- create */

static const char create_help[] =
    "usage: sbx create [--size S] [--timeout MIN] [--label K=V]... [--idempotency-key K]\n"
    "                  [--network none|allow_list|open] [--allow RULE]... [--deny RULE]...\n"
    "                  [--snapshot SNAP_ID] [--timeout-action expire|pause] [--json]\n"
    "Create a sandbox and wait until it accepts commands; print its id (--json:\n"
    "the sandbox object). --timeout: minutes until it expires (the daemon's\n"
    "default when absent). --label: a metadata pair (repeatable; docs/api.md,\n"
    "Metadata). --idempotency-key: a retry with the same key returns the same\n"
    "sandbox instead of creating another. --network, --allow, --deny: its\n"
    "egress policy (docs/network.md; --allow alone means allow_list); without\n"
    "them, the daemon's default. --snapshot: its disk starts as that snapshot's\n"
    "(sbx snapshot; a cold boot). --timeout-action pause: at its expiry it is\n"
    "paused instead of ended (`sbx resume ID` gives it time again).\n";

int cmd_create(struct cli *c, int argc, char **argv)
{
	struct cli_opt opts[] = {{.name = "size", .arg = true},
				 {.name = "timeout", .arg = true},
				 {.name = "idempotency-key", .arg = true},
				 {.name = "label", .arg = true, .multi = true},
				 {.name = "network", .arg = true},
				 {.name = "allow", .arg = true, .multi = true},
				 {.name = "deny", .arg = true, .multi = true},
				 {.name = "snapshot", .arg = true},
				 {.name = "timeout-action", .arg = true},
				 {0}};
	json_object *body, *labels, *net;
	bool bad;
	struct cli_reply r;
	const char *pos[1];
	long long minutes;
	int npos, rc;

	if ((rc = cli_begin(c, argc, argv, opts, pos, 0, &npos, NULL, NULL, create_help)) >= 0)
		return rc;
	if (!labels_parse(c, &opts[3], &labels))
		return CLI_EXIT_USAGE;
	net = cli_network_policy(c, &opts[4], &opts[5], &opts[6], &bad);
	if (bad) {
		json_object_put(labels);
		return CLI_EXIT_USAGE;
	}
	body = json_object_new_object();
	if (net)
		json_object_object_add(body, "network", net);
	if (labels)
		json_object_object_add(body, "metadata", labels);
	if (opts[0].set)
		json_object_object_add(body, "size", json_object_new_string(opts[0].value));
	if (opts[7].set)
		json_object_object_add(body, "snapshot", json_object_new_string(opts[7].value));
	if (opts[8].set)
		json_object_object_add(body, "timeout_action",
				       json_object_new_string(opts[8].value));
	if (opts[1].set) {
		if (!cli_parse_int(opts[1].value, 1, INT_MAX, &minutes)) {
			json_object_put(body);
			return cli_usage(c, "--timeout must be a whole number of minutes >= 1");
		}
		json_object_object_add(body, "timeout_minutes", json_object_new_int64(minutes));
	}
	rc = cli_call(c, "POST", "/v1/sandboxes", body, opts[2].value, "creating sandbox", &r);
	json_object_put(body);
	if (rc)
		return rc;
	if (r.status != 200 && r.status != 201)
		rc = cli_fail(c, &r);
	else if (c->json)
		cli_print_json(r.json);
	else
		printf("%s\n", cli_str(r.json, "id"));
	cli_reply_free(&r);
	return rc;
}

/* ----------------------------------------------------------------- ls */

static const char ls_help[] =
    "usage: sbx ls [--status running|paused|destroyed|expired|failed] [--limit N]\n"
    "              [--label K=V]... [--starting-after ID] [--json]\n"
    "List sandboxes, newest first (one page: --limit, default 20, at most 100).\n"
    "--label: only those whose metadata has every pair given.\n"
    "When there are more, stderr says how to get the next page: the same\n"
    "command with --starting-after the last id shown.\n";

int cmd_ls(struct cli *c, int argc, char **argv)
{
	struct cli_opt opts[] = {{.name = "status", .arg = true},
				 {.name = "limit", .arg = true},
				 {.name = "starting-after", .arg = true},
				 {.name = "label", .arg = true, .multi = true},
				 {0}};
	char path[4096] = "/v1/sandboxes";
	struct cli_table *t;
	struct cli_reply r;
	json_object *data = NULL;
	const char *pos[1], *sep = "?";
	long long limit;
	int npos, rc;

	if ((rc = cli_begin(c, argc, argv, opts, pos, 0, &npos, NULL, NULL, ls_help)) >= 0)
		return rc;
	if (opts[0].set) {
		if (!cli_id_ok(opts[0].value))
			return cli_usage(c, "%s", "unknown --status");
		snprintf(path + strlen(path), sizeof(path) - strlen(path), "%sstatus=%s", sep,
			 opts[0].value);
		sep = "&";
	}
	if (opts[1].set) {
		if (!cli_parse_int(opts[1].value, 1, 100, &limit))
			return cli_usage(c, "%s", "--limit must be 1..100");
		snprintf(path + strlen(path), sizeof(path) - strlen(path), "%slimit=%lld", sep,
			 limit);
		sep = "&";
	}
	if (opts[2].set) {
		if (!cli_id_ok(opts[2].value))
			return cli_usage(c, "%s", "--starting-after is not a sandbox id");
		snprintf(path + strlen(path), sizeof(path) - strlen(path), "%sstarting_after=%s",
			 sep, opts[2].value);
		sep = "&";
	}
	for (size_t i = 0; i < opts[3].n; i++) {
		const char *kv = opts[3].vals[i], *eq = strchr(kv, '=');
		char key[64];

		if (!eq || eq == kv || eq - kv >= (ptrdiff_t)sizeof(key))
			return cli_usage(c, "--label '%.60s' is not KEY=VALUE", kv);
		snprintf(key, sizeof(key), "%.*s", (int)(eq - kv), kv);
		snprintf(path + strlen(path), sizeof(path) - strlen(path), "%smetadata%%5B", sep);
		if (!query_append(path, sizeof(path), key) || strlen(path) + 4 > sizeof(path))
			return cli_usage(c, "%s", "the --label filters are too long");
		strcat(path, "%5D=");
		if (!query_append(path, sizeof(path), eq + 1))
			return cli_usage(c, "%s", "the --label filters are too long");
		sep = "&";
	}
	if ((rc = cli_get_human(c, path, &r)) >= 0)
		return rc;
	t = cli_table_new(6, "ID", "STATUS", "SIZE", "CREATED", "EXPIRES", "COST_USD");
	if (json_object_object_get_ex(r.json, "data", &data) &&
	    json_object_is_type(data, json_type_array))
		for (size_t i = 0; i < json_object_array_length(data); i++) {
			json_object *s = json_object_array_get_idx(data, i);
			cli_table_row(t, cli_str(s, "id"), cli_str(s, "status"), cli_str(s, "size"),
				      cli_str(s, "created_at"), cli_str(s, "expires_at"),
				      cli_str(s, "cost_usd"));
		}
	cli_table_print(t);
	if (cli_bool(r.json, "has_more") && data && json_object_is_type(data, json_type_array) &&
	    json_object_array_length(data) > 0) {
		json_object *last =
		    json_object_array_get_idx(data, json_object_array_length(data) - 1);
		const char *last_id = cli_str(last, "id");

		/* the same query, one page on (ids are [A-Za-z0-9_-]: no quoting;
		 * a label's value is shown in single quotes, without them when it
		 * holds one) */
		fprintf(stderr, "sbx: more sandboxes: sbx ls%s%s%s%s",
			opts[0].set ? " --status " : "", opts[0].set ? opts[0].value : "",
			opts[1].set ? " --limit " : "", opts[1].set ? opts[1].value : "");
		for (size_t i = 0; i < opts[3].n; i++)
			fprintf(stderr,
				strchr(opts[3].vals[i], '\'') ? " --label %s" : " --label '%s'",
				opts[3].vals[i]);
		fprintf(stderr, " --starting-after %s\n", cli_id_ok(last_id) ? last_id : "ID");
	}
	cli_reply_free(&r);
	return 0;
}

/* ---------------------------------------------------- get, extend, rm */

static const char get_help[] = "usage: sbx get ID [--json]\nShow one sandbox.\n";

static const char extend_help[] =
    "usage: sbx extend ID MINUTES [--json]\n"
    "Set the sandbox to expire MINUTES from now (within the daemon's lifetime\n"
    "cap); prints the new expiry.\n";

static const char pause_help[] =
    "usage: sbx pause ID [--json]\n"
    "Pause the sandbox: its memory is saved on its host, runtime billing and\n"
    "its session clock stop; commands answer 409 until `sbx resume ID`.\n";

static const char resume_help[] =
    "usage: sbx resume ID [--timeout MIN] [--json]\n"
    "Resume a paused sandbox: its files, processes and clock as they were;\n"
    "its expiry moves out by the time it was paused. --timeout: run at least\n"
    "MIN minutes from now (held like an extend); without it, a sandbox paused\n"
    "at its expiry (--timeout-action pause) gets the daemon's default.\n";

static const char rm_help[] =
    "usage: sbx rm ID... [--json]\n"
    "Destroy each sandbox and print its final cost. Goes on past failures and\n"
    "exits with the code of the last one that failed.\n";

/* One request on /v1/sandboxes/ID[suffix]; prints per `how`. */
static int sandbox_call(struct cli *c, const char *method, const char *id, const char *suffix,
			json_object *body, char how)
{
	struct cli_reply r;
	char path[128];
	int rc;

	if (!cli_id_ok(id))
		return cli_usage(c, "'%.60s' is not a sandbox id", id);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s%s", id, suffix);
	if ((rc = cli_call(c, method, path, body, NULL, NULL, &r)))
		return rc;
	if (r.status != 200)
		rc = cli_fail(c, &r);
	else if (c->json)
		cli_print_json(r.json);
	else if (how == 'g')
		print_sandbox(r.json);
	else if (how == 'e')
		printf("%s expires at %s\n", cli_str(r.json, "id"), cli_str(r.json, "expires_at"));
	else if (how == 'p' && cli_str(r.json, "paused_at")[0])
		printf("%s %s since %s (%lld bytes kept on its host)\n", cli_str(r.json, "id"),
		       cli_str(r.json, "status"), cli_str(r.json, "paused_at"),
		       (long long)cli_int(r.json, "paused_bytes"));
	else if (how == 'p')
		printf("%s %s, expires at %s\n", cli_str(r.json, "id"), cli_str(r.json, "status"),
		       cli_str(r.json, "expires_at"));
	else
		printf("%s %s, cost %s USD\n", cli_str(r.json, "id"), cli_str(r.json, "status"),
		       cli_str(r.json, "cost_usd"));
	cli_reply_free(&r);
	return rc;
}

int cmd_get(struct cli *c, int argc, char **argv)
{
	const char *pos[1];
	int npos, rc;

	if ((rc = cli_begin(c, argc, argv, NULL, pos, 1, &npos, NULL, NULL, get_help)) >= 0)
		return rc;
	if (npos != 1)
		return cli_usage(c, "%s", "give one sandbox id");
	return sandbox_call(c, "GET", pos[0], "", NULL, 'g');
}

int cmd_extend(struct cli *c, int argc, char **argv)
{
	const char *pos[2];
	long long minutes;
	json_object *body;
	int npos, rc;

	if ((rc = cli_begin(c, argc, argv, NULL, pos, 2, &npos, NULL, NULL, extend_help)) >= 0)
		return rc;
	if (npos != 2)
		return cli_usage(c, "%s", "give a sandbox id and a number of minutes");
	if (!cli_parse_int(pos[1], 1, INT_MAX, &minutes))
		return cli_usage(c, "%s", "MINUTES must be a whole number >= 1");
	body = json_object_new_object();
	json_object_object_add(body, "timeout_minutes", json_object_new_int64(minutes));
	rc = sandbox_call(c, "POST", pos[0], "/extend", body, 'e');
	json_object_put(body);
	return rc;
}

int cmd_pause(struct cli *c, int argc, char **argv)
{
	const char *pos[1];
	int npos, rc;

	if ((rc = cli_begin(c, argc, argv, NULL, pos, 1, &npos, NULL, NULL, pause_help)) >= 0)
		return rc;
	if (npos != 1)
		return cli_usage(c, "%s", "give one sandbox id");
	return sandbox_call(c, "POST", pos[0], "/pause", NULL, 'p');
}

int cmd_resume(struct cli *c, int argc, char **argv)
{
	struct cli_opt opts[] = {{.name = "timeout", .arg = true}, {0}};
	json_object *body = NULL;
	const char *pos[1];
	long long minutes;
	int npos, rc;

	if ((rc = cli_begin(c, argc, argv, opts, pos, 1, &npos, NULL, NULL, resume_help)) >= 0)
		return rc;
	if (npos != 1)
		return cli_usage(c, "%s", "give one sandbox id");
	if (opts[0].set) {
		if (!cli_parse_int(opts[0].value, 1, INT_MAX, &minutes))
			return cli_usage(c, "%s",
					 "--timeout must be a whole number of minutes >= 1");
		body = json_object_new_object();
		json_object_object_add(body, "timeout_minutes", json_object_new_int64(minutes));
	}
	rc = sandbox_call(c, "POST", pos[0], "/resume", body, 'p');
	json_object_put(body);
	return rc;
}

static const char metrics_help[] =
    "usage: sbx metrics ID [--last N] [--json]\n"
    "A running sandbox's sampled CPU (host cores, as the host measured it),\n"
    "memory (MiB, as the guest reported it: '-' when it did not) and disk use\n"
    "(MiB its disk takes on the host: '-' without a disk), the newest last.\n"
    "--last: the newest N samples only (default 10; 0: all the node keeps).\n";

int cmd_metrics(struct cli *c, int argc, char **argv)
{
	struct cli_opt opts[] = {{.name = "last", .arg = true}, {0}};
	struct cli_reply r;
	struct cli_table *t;
	json_object *a;
	const char *pos[1];
	char path[128];
	long long last = 10;
	size_t n, from;
	int npos, rc;

	if ((rc = cli_begin(c, argc, argv, opts, pos, 1, &npos, NULL, NULL, metrics_help)) >= 0)
		return rc;
	if (npos != 1)
		return cli_usage(c, "%s", "give one sandbox id");
	if (!cli_id_ok(pos[0]))
		return cli_usage(c, "'%.60s' is not a sandbox id", pos[0]);
	if (opts[0].set && !cli_parse_int(opts[0].value, 0, 1000000, &last))
		return cli_usage(c, "%s", "--last must be a whole number >= 0");
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/metrics", pos[0]);
	if ((rc = cli_get_human(c, path, &r)) >= 0)
		return rc;
	a = NULL;
	json_object_object_get_ex(r.json, "samples", &a);
	n = a && json_object_is_type(a, json_type_array) ? json_object_array_length(a) : 0;
	from = last && (size_t)last < n ? n - (size_t)last : 0;
	if (cli_int(r.json, "interval_ms") == 0)
		fprintf(stderr, "sbx: this node samples no metrics (metrics_interval_ms is 0)\n");
	t = cli_table_new(4, "AT", "CPU_CORES", "MEMORY_MIB(GUEST)", "DISK_MIB");
	for (size_t i = from; i < n; i++) {
		json_object *e = json_object_array_get_idx(a, i), *v;
		char cpu[32], mem[32], disk[32];

		snprintf(cpu, sizeof(cpu), "%.2f",
			 json_object_object_get_ex(e, "cpu_cores", &v) ? json_object_get_double(v)
								       : 0.0);
		if (json_object_object_get_ex(e, "memory_used_mib", &v) && v)
			snprintf(mem, sizeof(mem), "%lld", (long long)json_object_get_int64(v));
		else
			snprintf(mem, sizeof(mem), "-");
		if (json_object_object_get_ex(e, "disk_used_mib", &v) && v)
			snprintf(disk, sizeof(disk), "%lld", (long long)json_object_get_int64(v));
		else
			snprintf(disk, sizeof(disk), "-");
		cli_table_row(t, cli_str(e, "at"), cpu, mem, disk);
	}
	cli_table_print(t);
	cli_reply_free(&r);
	return 0;
}

int cmd_rm(struct cli *c, int argc, char **argv)
{
	const char *pos[64];
	int npos, rc, worst = 0;

	if ((rc = cli_begin(c, argc, argv, NULL, pos, 64, &npos, NULL, NULL, rm_help)) >= 0)
		return rc;
	if (npos == 0)
		return cli_usage(c, "%s", "give at least one sandbox id (at most 64)");
	for (int i = 0; i < npos; i++)
		if ((rc = sandbox_call(c, "DELETE", pos[i], "", NULL, 'r')))
			worst = rc;
	return worst;
}

/* --------------------------------------------------------------- exec */

static const char exec_help[] =
    "usage: sbx exec ID [--cwd DIR] [--env K=V]... [--timeout-ms N] [--json] -- CMD...\n"
    "Run CMD in the sandbox with /bin/sh -c (several words are joined with\n"
    "spaces, as ssh does: quote what the guest's shell should see). Its stdout\n"
    "and stderr go to sbx's stdout and stderr, byte for byte, and sbx exits\n"
    "with its exit code. The output arrives when the command ends (the API has\n"
    "no streamed exec yet). A timeout exits 124, output cut at the daemon's cap\n"
    "is said on stderr; 125 when sbx could not run the command at all.\n"
    "--json prints the API's reply instead (and still exits with the code).\n";

/* Write all of buf to fd. */
static void write_all(int fd, const unsigned char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		buf += n;
		len -= (size_t)n;
	}
}

/* Decode a base64 member of the reply and write it to fd. false when it is
 * not base64. */
static bool write_b64(json_object *o, const char *key, int fd)
{
	json_object *v;
	unsigned char *bytes;
	size_t n = 0;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return false;
	if (!(bytes = cli_base64_decode(json_object_get_string(v),
					(size_t)json_object_get_string_len(v), &n)))
		return false;
	write_all(fd, bytes, n);
	free(bytes);
	return true;
}

/* The streamed exec's NDJSON events (docs/api.md "Streamed exec"): output
 * is written as it arrives, the final event is kept. */
struct exec_events {
	struct sbx_buf line;
	json_object *final; /* the exit or error event */
	bool bad;
};

static bool exec_event(struct exec_events *ev, const char *text, size_t len)
{
	json_object *o = json_tokener_parse(text);
	const char *type = cli_str(o, "type");
	bool ok = true;

	(void)len;
	if (!o)
		return false;
	if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
		ok = write_b64(o, "data",
			       strcmp(type, "stdout") == 0 ? STDOUT_FILENO : STDERR_FILENO);
		json_object_put(o);
	} else if ((strcmp(type, "exit") == 0 || strcmp(type, "error") == 0) && !ev->final) {
		ev->final = o;
	} else {
		json_object_put(o);
		ok = false;
	}
	return ok;
}

static bool exec_sink(void *opaque, const char *data, size_t len)
{
	struct exec_events *ev = opaque;

	for (size_t i = 0; i < len; i++) {
		if (data[i] != '\n') {
			if (sbx_buf_append(&ev->line, data + i, 1) < 0)
				return ev->bad = true, false;
			continue;
		}
		if (ev->line.len && (sbx_buf_append(&ev->line, "", 0) < 0 ||
				     !exec_event(ev, ev->line.data, ev->line.len)))
			return ev->bad = true, false;
		ev->line.len = 0;
	}
	return true;
}

/* Print the result of a streamed exec from its final event; the exit code. */
static int exec_finish(struct cli *c, json_object *fin)
{
	int rc;

	if (!fin) {
		fprintf(stderr, "sbx: the stream ended without an exit event\n");
		return CLI_EXIT_EXEC_FAILED;
	}
	if (strcmp(cli_str(fin, "type"), "error") == 0) {
		json_object *e = cli_obj(fin, "error");
		const char *param = cli_str(e, "param");

		fprintf(stderr, "sbx: %s (%s%s%s)\n", cli_str(e, "message"), cli_str(e, "type"),
			param[0] ? ", param " : "", param);
		return CLI_EXIT_EXEC_FAILED;
	}
	rc = (int)(cli_int(fin, "exit_code") & 0xff);
	if (cli_bool(fin, "truncated"))
		fprintf(stderr, "sbx: the output was truncated at the daemon's output cap\n");
	if (cli_bool(fin, "timed_out")) {
		fprintf(stderr, "sbx: the command timed out after %lld ms\n",
			(long long)cli_int(fin, "duration_ms"));
		rc = CLI_EXIT_TIMEOUT;
	}
	return rc;
}

int cmd_exec(struct cli *c, int argc, char **argv)
{
	struct cli_opt opts[] = {{.name = "cwd", .arg = true},
				 {.name = "env", .arg = true, .multi = true},
				 {.name = "timeout-ms", .arg = true},
				 {0}};
	json_object *body, *env = NULL;
	struct sbx_buf cmd;
	struct cli_reply r;
	const char *pos[1];
	char **rest, path[128];
	long long ms;
	int npos, nrest, rc;

	if ((rc = cli_begin(c, argc, argv, opts, pos, 1, &npos, &rest, &nrest, exec_help)) >= 0)
		return rc ? CLI_EXIT_EXEC_FAILED : 0;
	if (npos != 1 || nrest == 0)
		return cli_usage(c, "%s", "give a sandbox id, then -- and the command"),
		       CLI_EXIT_EXEC_FAILED;
	if (!cli_id_ok(pos[0]))
		return cli_usage(c, "'%.60s' is not a sandbox id", pos[0]), CLI_EXIT_EXEC_FAILED;
	body = json_object_new_object();
	sbx_buf_init(&cmd, 4u * 1024 * 1024);
	for (int i = 0; i < nrest; i++)
		if ((i && sbx_buf_append(&cmd, " ", 1) < 0) ||
		    sbx_buf_append(&cmd, rest[i], strlen(rest[i])) < 0) {
			sbx_buf_release(&cmd);
			json_object_put(body);
			return cli_usage(c, "%s", "the command is over 4 MiB"),
			       CLI_EXIT_EXEC_FAILED;
		}
	json_object_object_add(body, "command", json_object_new_string_len(cmd.data, (int)cmd.len));
	sbx_buf_release(&cmd);
	if (opts[0].set)
		json_object_object_add(body, "cwd", json_object_new_string(opts[0].value));
	for (size_t i = 0; i < opts[1].n; i++) {
		const char *kv = opts[1].vals[i], *eq = strchr(kv, '=');
		if (!eq || eq == kv) {
			json_object_put(body);
			json_object_put(env);
			return cli_usage(c, "--env '%.60s' is not KEY=VALUE", kv),
			       CLI_EXIT_EXEC_FAILED;
		}
		if (!env)
			env = json_object_new_object();
		char key[256];
		snprintf(key, sizeof(key), "%.*s", (int)SBX_MIN((size_t)(eq - kv), 255), kv);
		json_object_object_add(env, key, json_object_new_string(eq + 1));
	}
	if (env)
		json_object_object_add(body, "env", env);
	if (opts[2].set) {
		if (!cli_parse_int(opts[2].value, 1, UINT32_MAX, &ms)) {
			json_object_put(body);
			return cli_usage(c, "%s", "--timeout-ms must be a whole number >= 1"),
			       CLI_EXIT_EXEC_FAILED;
		}
		json_object_object_add(body, "timeout_ms", json_object_new_int64(ms));
	}
	/* base64 gives the exact bytes; --json shows the readable form */
	if (!c->json)
		json_object_object_add(body, "encoding", json_object_new_string("base64"));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", pos[0]);
	if (!c->json) {
		/* the output as it arrives: the streamed exec */
		struct exec_events ev = {0};
		struct cli_stream s = {
		    .sink = exec_sink, .sink_opaque = &ev, .accept = "application/x-ndjson"};

		sbx_buf_init(&ev.line, 16u * 1024 * 1024);
		rc = cli_call_stream(c, "POST", path, body, &s, NULL, &r);
		json_object_put(body);
		sbx_buf_release(&ev.line);
		if (rc || ev.bad) {
			json_object_put(ev.final);
			if (!rc)
				cli_reply_free(&r);
			return CLI_EXIT_EXEC_FAILED;
		}
		if (r.status != 200) {
			cli_fail(c, &r);
			cli_reply_free(&r);
			json_object_put(ev.final);
			return CLI_EXIT_EXEC_FAILED;
		}
		cli_reply_free(&r);
		rc = exec_finish(c, ev.final);
		json_object_put(ev.final);
		return rc;
	}
	rc = cli_call(c, "POST", path, body, NULL, NULL, &r);
	json_object_put(body);
	if (rc)
		return CLI_EXIT_EXEC_FAILED;
	if (r.status != 200) {
		cli_fail(c, &r);
		cli_reply_free(&r);
		return CLI_EXIT_EXEC_FAILED;
	}
	rc = (int)(cli_int(r.json, "exit_code") & 0xff);
	if (c->json) {
		cli_print_json(r.json);
	} else if (!write_b64(r.json, "stdout", STDOUT_FILENO) ||
		   !write_b64(r.json, "stderr", STDERR_FILENO)) {
		fprintf(stderr, "sbx: the reply's output is not base64\n");
		rc = CLI_EXIT_EXEC_FAILED;
	}
	if (cli_bool(r.json, "truncated"))
		fprintf(stderr, "sbx: the output was truncated at the daemon's output cap\n");
	if (cli_bool(r.json, "timed_out")) {
		fprintf(stderr, "sbx: the command timed out after %lld ms\n",
			(long long)cli_int(r.json, "duration_ms"));
		rc = CLI_EXIT_TIMEOUT;
	}
	cli_reply_free(&r);
	return rc;
}
