/* sbx: the command-line client of sandboxd (docs/cli.md). It speaks the
 * public HTTP API through libcurl and nothing else: no daemon code, no
 * database. Only `sbx receipt verify` uses the project's receipt/ library
 * (offline, no server).
 *
 * Files: sbx.c (main, configuration, options, the HTTP call, output
 * helpers), sandboxes.c (create, ls, get, extend, metrics, rm, exec),
 * network.c (network, and create's policy options), account.c
 * (run, receipt, usage, keys), snapshots.c (snapshot), shell.c (shell: a terminal over a
 * WebSocket). One thread; nothing here is thread-safe.
 */
#ifndef SBX_CLI_H
#define SBX_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

/* Exit codes (docs/cli.md, "Exit codes"). `sbx exec` and `sbx run` exit
 * with the command's own code instead, and use CLI_EXIT_TIMEOUT and
 * CLI_EXIT_EXEC_FAILED for their own outcomes. */
enum {
	CLI_EXIT_OK = 0,
	CLI_EXIT_API = 1,	    /* the API refused or failed (400, 402, 409, 422, 5xx...) */
	CLI_EXIT_USAGE = 2,	    /* bad flags or configuration; nothing was sent */
	CLI_EXIT_CONNECT = 3,	    /* the daemon could not be reached, or replied garbage */
	CLI_EXIT_AUTH = 4,	    /* 401 / 403 */
	CLI_EXIT_NOT_FOUND = 5,	    /* 404 / 410 */
	CLI_EXIT_RETRY = 6,	    /* 429 / 503: try again later */
	CLI_EXIT_TIMEOUT = 124,	    /* exec/run: the command timed out */
	CLI_EXIT_EXEC_FAILED = 125, /* exec/run: sbx could not run it (any code above) */
};

/* Largest reply body sbx accepts (bytes). An exec reply with the default
 * 1 MiB output cap is a few MiB. */
#define CLI_REPLY_MAX (256u * 1024 * 1024)

struct cli {
	char url[512];	 /* base URL without a trailing slash */
	char key[256];	 /* API key, "" when none */
	bool json;	 /* --json: print the API's JSON */
	bool progress;	 /* stderr is a terminal: progress lines allowed */
	const char *cmd; /* the command's name, for messages */
};

/* One reply. Free with cli_reply_free. */
struct cli_reply {
	long status;
	char *body; /* NUL-terminated, body_len bytes */
	size_t body_len;
	json_object *json; /* parsed body, NULL when not JSON */
	char request_id[80];
};
void cli_reply_free(struct cli_reply *r);

/* One option of a command. `arg` options take a value (`--name V` or
 * `--name=V`); `multi` ones may repeat (values in vals[0..n)). */
struct cli_opt {
	const char *name;
	bool arg;
	bool multi;
	/* filled by cli_parse */
	bool set;
	const char *value;
	const char *vals[64];
	size_t n;
};

/* Parse argv[1..argc) of a command: its options (NULL-name terminated),
 * the global ones (--url, --key, --json, --help), positionals into
 * pos[0..*npos) (at most maxpos), and, when `rest` is non-NULL, everything
 * after "--" into rest/nrest. Returns 0, CLI_EXIT_USAGE after printing why,
 * or -1 when --help was asked (the caller prints its help, exits 0). */
int cli_parse(struct cli *c, int argc, char **argv, struct cli_opt *opts, const char **pos,
	      int maxpos, int *npos, char ***rest, int *nrest);
struct cli_opt *cli_opt_get(struct cli_opt *opts, const char *name);

/* cli_parse, then the help on --help, then cli_config (a key needed).
 * Returns -1 to go on, else the exit code (0 after the help). */
int cli_begin(struct cli *c, int argc, char **argv, struct cli_opt *opts, const char **pos,
	      int maxpos, int *npos, char ***rest, int *nrest, const char *help);
/* An id that may go into a URL path as is: 1..39 bytes of [A-Za-z0-9_-]. */
bool cli_id_ok(const char *id);
/* A decimal integer in [min, max]; false when not one. */
bool cli_parse_int(const char *s, long long min, long long max, long long *out);

/* Finish the configuration after cli_parse: flags over SANDBOXD_URL /
 * SANDBOXD_KEY over the config file. `need_key`: fail without a key.
 * 0 or CLI_EXIT_USAGE (printed). */
int cli_config(struct cli *c, bool need_key);

/* One HTTP request to `path` (starting with "/v1/"), with `body` as JSON
 * (NULL: none) and an Idempotency-Key (NULL: none). `progress` (NULL:
 * none) labels a progress line shown on a terminal after one second.
 * Returns 0 with any status in r, or CLI_EXIT_CONNECT after printing why
 * (r is then empty). */
int cli_call(struct cli *c, const char *method, const char *path, json_object *body,
	     const char *idempotency_key, const char *progress, struct cli_reply *r);

/* A request whose body streams from a file and/or whose 2xx body streams
 * to one (files routes). */
struct cli_stream {
	FILE *upload;		  /* request body (NULL: none) */
	long long upload_size;	  /* its size, -1 unknown (sent chunked) */
	const char *content_type; /* of the upload; NULL: application/octet-stream */
	FILE *download;		  /* a 2xx body is written here; r->body stays empty */
	/* Or: a 2xx body is handed to sink as it arrives (false: stop). */
	bool (*sink)(void *opaque, const char *data, size_t len);
	void *sink_opaque;
	const char *accept; /* the Accept header; NULL: application/json */
};
/* cli_call with streamed bodies (and a JSON `body` when no upload); the
 * same returns (a failed write of the download is CLI_EXIT_CONNECT). */
int cli_call_stream(struct cli *c, const char *method, const char *path, json_object *body,
		    const struct cli_stream *s, const char *progress, struct cli_reply *r);

/* GET path for a command with a human form: returns -1 with a 200 reply
 * in r for the caller to print (and free); else the exit code, after
 * printing the error, or the JSON with --json (r is then freed). */
int cli_get_human(struct cli *c, const char *path, struct cli_reply *r);

/* Print the API's error of a non-2xx reply (stderr; the JSON as is with
 * --json) and return the exit code of its status. */
int cli_fail(struct cli *c, const struct cli_reply *r);

/* A usage error of the current command (stderr); returns CLI_EXIT_USAGE. */
int cli_usage(struct cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Print the reply's JSON on stdout, pretty, one trailing newline. */
void cli_print_json(json_object *o);

/* Members of a JSON object: "" / 0 when missing or of another type. */
const char *cli_str(json_object *o, const char *key);
int64_t cli_int(json_object *o, const char *key);
bool cli_bool(json_object *o, const char *key);
json_object *cli_obj(json_object *o, const char *key);

/* "12.345678" from micro-USD into buf (>= 32 bytes); returns buf. */
const char *cli_usd(int64_t micro, char buf[static 32]);

/* A table printed with aligned columns: add rows of `ncols` cells (copied),
 * then print. At most 16 columns. */
struct cli_table;
struct cli_table *cli_table_new(int ncols, ...);
void cli_table_row(struct cli_table *t, ...);
void cli_table_print(struct cli_table *t); /* prints and frees */

/* Read a whole file ("-" = stdin), at most `max` bytes. NULL when it
 * cannot be read or is larger. */
char *cli_read_file(const char *path, size_t max, size_t *len);

/* Decode standard base64 into a new buffer (len in *out_len); NULL when
 * malformed. */
unsigned char *cli_base64_decode(const char *s, size_t len, size_t *out_len);

/* The commands: argc/argv start at the command's name. */
int cmd_create(struct cli *c, int argc, char **argv);
int cmd_ls(struct cli *c, int argc, char **argv);
int cmd_get(struct cli *c, int argc, char **argv);
int cmd_extend(struct cli *c, int argc, char **argv);
int cmd_pause(struct cli *c, int argc, char **argv);
int cmd_resume(struct cli *c, int argc, char **argv);
int cmd_metrics(struct cli *c, int argc, char **argv);
int cmd_rm(struct cli *c, int argc, char **argv);
int cmd_exec(struct cli *c, int argc, char **argv);
int cmd_run(struct cli *c, int argc, char **argv);
int cmd_receipt(struct cli *c, int argc, char **argv);
int cmd_usage(struct cli *c, int argc, char **argv);
int cmd_keys(struct cli *c, int argc, char **argv);
int cmd_cp(struct cli *c, int argc, char **argv);
int cmd_shell(struct cli *c, int argc, char **argv);	/* shell.c */
int cmd_network(struct cli *c, int argc, char **argv);	/* network.c */
int cmd_port(struct cli *c, int argc, char **argv);	/* port.c */
int cmd_snapshot(struct cli *c, int argc, char **argv); /* snapshots.c */

/* network.c: an egress policy from --network/--allow/--deny (a new
 * object), or NULL when none was given (*bad: a usage error, printed). */
json_object *cli_network_policy(struct cli *c, const struct cli_opt *egress,
				const struct cli_opt *allow, const struct cli_opt *deny, bool *bad);

#endif
