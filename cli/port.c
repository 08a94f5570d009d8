/* sbx port: ask a server in a sandbox through the ports route (docs/api.md
 * "Ports"), with the API key, as curl would; or print the route's URL. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbx.h"

static const char port_help[] =
    "usage: sbx port ID PORT [PATH] [--url-only]\n"
    "GET PATH (default /) from the server listening on 127.0.0.1:PORT inside\n"
    "the sandbox, through the API's ports route, and write the answer's body\n"
    "to stdout (a server's non-2xx: its status on stderr, exit 1). PATH may\n"
    "carry a query. --url-only prints the route's URL instead, for a client\n"
    "that sends the API key itself (Authorization: Bearer KEY). Browser\n"
    "preview links are not built yet (docs/api.md \"Ports\").\n";

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

int cmd_port(struct cli *c, int argc, char **argv)
{
	struct cli_opt opts[] = {{.name = "url-only"}, {0}};
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
