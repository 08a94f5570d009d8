/* sbx snapshot: disk snapshots of sandboxes (docs/cli.md, docs/api.md
 * "Snapshots"); `sbx create --snapshot` is in sandboxes.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbx.h"

static const char snapshot_help[] =
    "usage: sbx snapshot create ID [--name N] | list | get SNAP_ID | delete SNAP_ID [--json]\n"
    "Snapshots of sandboxes' disks (docs/api.md, Snapshots). create: snapshot\n"
    "running or paused sandbox ID (it runs on) and print the snapshot's id.\n"
    "list: the account's snapshots. get: one. delete: remove one (refused while\n"
    "sandboxes made from it live). 'sbx create --snapshot SNAP_ID' makes a\n"
    "sandbox whose disk starts as the snapshot's.\n";

static void print_one(json_object *o)
{
	char usd[32];

	printf("id          %s\nname        %s\nsandbox_id  %s\ndisk_gib    %lld\n"
	       "bytes       %lld\ncreated_at  %s\ncost_usd    %s\n",
	       cli_str(o, "id"), cli_str(o, "name"), cli_str(o, "sandbox_id"),
	       (long long)cli_int(o, "disk_gib"), (long long)cli_int(o, "bytes"),
	       cli_str(o, "created_at"), cli_usd(cli_int(o, "cost_micro_usd"), usd));
}

static void print_list(json_object *o)
{
	json_object *a = NULL;
	size_t n =
	    json_object_object_get_ex(o, "data", &a) && json_object_is_type(a, json_type_array)
		? json_object_array_length(a)
		: 0;
	struct cli_table *t =
	    cli_table_new(6, "ID", "NAME", "SANDBOX", "BYTES", "CREATED", "COST_USD");

	for (size_t i = 0; i < n; i++) {
		json_object *e = json_object_array_get_idx(a, i);
		char bytes[32], usd[32];

		snprintf(bytes, sizeof(bytes), "%lld", (long long)cli_int(e, "bytes"));
		cli_table_row(t, cli_str(e, "id"), cli_str(e, "name"), cli_str(e, "sandbox_id"),
			      bytes, cli_str(e, "created_at"),
			      cli_usd(cli_int(e, "cost_micro_usd"), usd));
	}
	cli_table_print(t);
}

int cmd_snapshot(struct cli *c, int argc, char **argv)
{
	struct cli_opt opts[] = {{.name = "name", .arg = true}, {0}};
	const char *pos[2], *verb;
	struct cli_reply r;
	json_object *body = NULL;
	char path[128];
	int npos, rc;

	if ((rc = cli_begin(c, argc, argv, opts, pos, 2, &npos, NULL, NULL, snapshot_help)) >= 0)
		return rc;
	verb = npos ? pos[0] : "list";
	if (opts[0].set && strcmp(verb, "create") != 0)
		return cli_usage(c, "%s", "--name belongs to 'snapshot create'");
	if (npos == 2 && !cli_id_ok(pos[1]))
		return cli_usage(c, "'%.60s' is not an id", pos[1]);
	if (strcmp(verb, "list") == 0 && npos <= 1) {
		rc = cli_call(c, "GET", "/v1/snapshots", NULL, NULL, NULL, &r);
	} else if (strcmp(verb, "create") == 0 && npos == 2) {
		body = json_object_new_object();
		if (opts[0].set)
			json_object_object_add(body, "name", json_object_new_string(opts[0].value));
		snprintf(path, sizeof(path), "/v1/sandboxes/%s/snapshots", pos[1]);
		rc = cli_call(c, "POST", path, body, NULL, "taking the snapshot", &r);
		json_object_put(body);
	} else if ((strcmp(verb, "get") == 0 || strcmp(verb, "delete") == 0) && npos == 2) {
		snprintf(path, sizeof(path), "/v1/snapshots/%s", pos[1]);
		rc = cli_call(c, verb[0] == 'g' ? "GET" : "DELETE", path, NULL, NULL, NULL, &r);
	} else {
		return cli_usage(c, "%s", "give create ID, list, get SNAP_ID or delete SNAP_ID");
	}
	if (rc)
		return rc;
	if (r.status != 200 && r.status != 201)
		rc = cli_fail(c, &r);
	else if (c->json)
		cli_print_json(r.json);
	else if (verb[0] == 'c')
		printf("%s\n", cli_str(r.json, "id"));
	else if (verb[0] == 'd')
		printf("%s deleted\n", cli_str(r.json, "id"));
	else if (verb[0] == 'g')
		print_one(r.json);
	else
		print_list(r.json);
	cli_reply_free(&r);
	return rc;
}
