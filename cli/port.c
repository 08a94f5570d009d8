/* sbx port: ask a server in a sandbox through the ports route (docs/api.md
 * "Ports"), with the API key, as curl would; print the route's URL; or
 * create a preview URL for a browser (docs/api.md "Previews"). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbx.h"

static const char port_help[] =
    "usage: sbx port ID PORT [PATH] [--url-only]\n"
    "       sbx port ID PORT --preview [--ttl SECONDS]\n"
    "GET PATH (default /) from the server listening on 127.0.0.1:PORT inside\n"
    "the sandbox, through the API's ports route, and write the answer's body\n"
    "to stdout (a server's non-2xx: its status on stderr, exit 1). PATH may\n"
    "carry a query. --url-only prints the route's URL instead, for a client\n"
    "that sends the API key itself (Authorization: Bearer KEY).\n"
    "--preview creates a preview URL of the port for a browser (no key needed:\n"
    "the URL is the secret, shown once), live --ttl SECONDS (default 3600),\n"
    "and prints it (docs/api.md \"Previews\"); with --json the whole answer.\n";

/* PORT: 1..65535, digits only. */
static int port_of(const char *s)
{
	char *end;
	long v;

	if (!*s || strspn(s, "0123456789") != strlen(s) || (s[0] == '0'))
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	return errno || *end || v < 1 || v > 65535 ? -1 : (int)v;
}

/* PATH: no bytes a URL cannot carry as they are (space, control, '#'). */
static bool path_ok(const char *p)
{
	for (; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == 0x7f || *p == '#')
			return false;
	return true;
}

/* POST .../ports/PORT/previews: print the URL (the answer with --json). */
static int preview(struct cli *c, const char *id, int port, const char *ttl)
{
	json_object *body = NULL;
	struct cli_reply r;
	char path[160];
	long long v;
	int rc;

	if (ttl) {
		if (!cli_parse_int(ttl, -1000000000LL, 1000000000LL, &v))
			return cli_usage(c, "--ttl '%s' is not a number of seconds", ttl);
		body = json_object_new_object();
		json_object_object_add(body, "expires_in_seconds", json_object_new_int64(v));
	}
	snprintf(path, sizeof path, "/v1/sandboxes/%s/ports/%d/previews", id, port);
	rc = cli_call(c, "POST", path, body, NULL, NULL, &r);
	json_object_put(body);
	if (rc)
		return rc;
	if (r.status != 201)
		rc = cli_fail(c, &r);
	else if (c->json)
		cli_print_json(r.json);
	else
		printf("%s\n", cli_str(r.json, "url"));
	cli_reply_free(&r);
	return rc;
}

int cmd_port(struct cli *c, int argc, char **argv)
{
	struct cli_opt opts[] = {
	    {.name = "url-only"}, {.name = "preview"}, {.name = "ttl", .arg = true}, {0}};
	const char *pos[3], *path;
	struct cli_stream s = {.download = stdout, .accept = "*/*"};
	struct cli_reply r;
	char url[8192];
	int npos, rc, port;

	if ((rc = cli_begin(c, argc, argv, opts, pos, 3, &npos, NULL, NULL, port_help)) >= 0)
		return rc;
	if (npos < 2 || !cli_id_ok(pos[0]))
		return cli_usage(c, "%s", "give a sandbox id and a port");
	if ((port = port_of(pos[1])) < 0)
		return cli_usage(c, "port '%s' is not 1..65535", pos[1]);
	if (opts[2].set && !opts[1].set)
		return cli_usage(c, "%s", "--ttl goes with --preview");
	if (opts[1].set) {
		if (npos > 2 || opts[0].set)
			return cli_usage(c, "%s", "--preview takes no PATH and no --url-only");
		return preview(c, pos[0], port, opts[2].set ? opts[2].value : NULL);
	}
	path = npos == 3 ? pos[2] : "/";
	if (!path_ok(path))
		return cli_usage(c, "%s", "the path has a space, a control byte or '#'");
	if (snprintf(url, sizeof url, "/v1/sandboxes/%s/ports/%d%s%s", pos[0], port,
		     path[0] == '/' ? "" : "/", path) >= (int)sizeof url)
		return cli_usage(c, "%s", "the path is too long");
	if (opts[0].set) {
		printf("%s%s\n", c->url, url);
		return 0;
	}
	if ((rc = cli_call_stream(c, "GET", url, NULL, &s, NULL, &r)))
		return rc;
	if (fflush(stdout) != 0) {
		fprintf(stderr, "sbx: cannot write stdout: %s\n", strerror(errno));
		cli_reply_free(&r);
		return CLI_EXIT_USAGE;
	}
	if (r.status >= 200 && r.status < 300)
		rc = 0;
	else if (r.json && json_object_object_get_ex(r.json, "error", NULL))
		rc = cli_fail(c, &r); /* the daemon's (or a look-alike's) error */
	else {
		fprintf(stderr, "sbx: the server answered %ld\n", r.status);
		if (r.body_len)
			fwrite(r.body, 1, r.body_len, stdout);
		rc = 1;
	}
	cli_reply_free(&r);
	return rc;
}
