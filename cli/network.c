/* sbx: egress policies (docs/network.md): `sbx network ID ...` and the
 * policy options `sbx create` shares (--network, --allow, --deny). The
 * daemon checks the rules; sbx only builds the JSON. */
#include <stdio.h>
#include <string.h>

#include "sbx.h"

json_object *cli_network_policy(struct cli *c, const struct cli_opt *egress,
				const struct cli_opt *allow, const struct cli_opt *deny, bool *bad)
{
	const char *e = egress->set ? egress->value : allow->n ? "allow_list" : NULL;
	json_object *p, *a, *d;

	*bad = false;
	if (!e && !deny->n)
		return NULL; /* nothing said: the daemon's default */
	if (!e) {
		*bad = true;
		cli_usage(c, "%s", "--deny needs --network allow_list|open (or an --allow)");
		return NULL;
	}
	if (strcmp(e, "none") != 0 && strcmp(e, "allow_list") != 0 && strcmp(e, "open") != 0) {
		*bad = true;
		cli_usage(c, "--network '%.40s': none, allow_list or open", e);
		return NULL;
	}
	p = json_object_new_object();
	a = json_object_new_array();
	d = json_object_new_array();
	for (size_t i = 0; i < allow->n; i++)
		json_object_array_add(a, json_object_new_string(allow->vals[i]));
	for (size_t i = 0; i < deny->n; i++)
		json_object_array_add(d, json_object_new_string(deny->vals[i]));
	json_object_object_add(p, "egress", json_object_new_string(e));
	json_object_object_add(p, "allow", a);
	json_object_object_add(p, "deny", d);
	return p;
}

/* "allow_list allow=a,b deny=c" */
static void print_network(json_object *s)
{
	json_object *n = cli_obj(s, "network"), *l;
	static const char *const lists[] = {"allow", "deny"};

	printf("%s egress %s", cli_str(s, "id"), cli_str(n, "egress"));
	for (size_t k = 0; k < 2; k++) {
		if (!json_object_object_get_ex(n, lists[k], &l) || !json_object_array_length(l))
			continue;
		printf(" %s=", lists[k]);
		for (size_t i = 0; i < json_object_array_length(l); i++)
			printf("%s%s", i ? "," : "",
			       json_object_get_string(json_object_array_get_idx(l, i)));
	}
	printf(" (bytes in %lld, out %lld)\n", (long long)cli_int(s, "net_bytes_in"),
	       (long long)cli_int(s, "net_bytes_out"));
}

static const char network_help[] =
    "usage: sbx network ID [--network none|allow_list|open] [--allow RULE]...\n"
    "                   [--deny RULE]... [--json]\n"
    "Show the sandbox's egress policy, or replace it (docs/network.md). A rule\n"
    "is a domain (example.com), a wildcard (*.example.com), an address or a\n"
    "CIDR, each with an optional :port or :lo-hi. --allow alone means\n"
    "--network allow_list. New connections obey a new policy at once.\n";

int cmd_network(struct cli *c, int argc, char **argv)
{
	struct cli_opt opts[] = {{.name = "network", .arg = true},
				 {.name = "allow", .arg = true, .multi = true},
				 {.name = "deny", .arg = true, .multi = true},
				 {0}};
	const char *pos[1];
	char path[128];
	json_object *body;
	struct cli_reply r;
	bool bad;
	int npos, rc;

	if ((rc = cli_begin(c, argc, argv, opts, pos, 1, &npos, NULL, NULL, network_help)) >= 0)
		return rc;
	if (npos != 1 || !cli_id_ok(pos[0]))
		return cli_usage(c, "%s", "give one sandbox id");
	body = cli_network_policy(c, &opts[0], &opts[1], &opts[2], &bad);
	if (bad)
		return CLI_EXIT_USAGE;
	snprintf(path, sizeof(path), "/v1/sandboxes/%s%s", pos[0], body ? "/network" : "");
	rc = cli_call(c, body ? "POST" : "GET", path, body, NULL, NULL, &r);
	json_object_put(body);
	if (rc)
		return rc;
	if (r.status != 200)
		rc = cli_fail(c, &r);
	else if (c->json)
		cli_print_json(r.json);
	else
		print_network(r.json);
	cli_reply_free(&r);
	return rc;
}
