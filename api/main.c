/* sandboxd: the program. `serve` runs the HTTP API; `admin ...` manages
 * accounts and keys against the same database (API.md "Operating").
 * Exit codes: 0 ok, 1 runtime failure, 2 usage or config error. */
#include <ctype.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include "../receipt/verify.h"
#include "api-priv.h"
#include "api.h"

#define EXIT_RUNTIME	 1
#define EXIT_USAGE	 2
#define DRAIN_TIMEOUT_MS 10000

static const char usage_text[] =
    "usage:\n"
    "  sandboxd serve [--config FILE] [--listen HOST:PORT] [--db PATH] [--state-dir DIR]\n"
    "  sandboxd admin create-account --name NAME --credit-usd AMOUNT [options]\n"
    "  sandboxd admin add-credit ACCOUNT_ID --credit-usd AMOUNT [options]\n"
    "  sandboxd admin create-key ACCOUNT_ID [--scope SCOPE[,SCOPE...]] [options]\n"
    "  sandboxd admin revoke-key KEY_ID [options]\n"
    "  sandboxd admin list-accounts [options]\n"
    "  sandboxd admin set-scopes KEY_ID --scope SCOPE[,SCOPE...] [options]\n"
    "  sandboxd admin drain HOST [options]      (no new guests on HOST)\n"
    "  sandboxd admin undrain HOST [options]\n"
    "  sandboxd admin hosts [options]           (the config's hosts, drained or not)\n"
    "admin options: [--config FILE] [--db PATH] [--state-dir DIR]\n"
    "scopes: sandboxes (/v1/sandbox/executions), keys (/v1/api_keys); '' = none;\n"
    "  default (no --scope): sandboxes,keys\n"
    "  sandboxd verify-receipt RECEIPT.json (--signer 0xHEX | --public-key PEM)\n"
    "      [--execution RESPONSE.json] [--code FILE --runtime NAME | --input INPUT.json]\n";

struct opts {
	const char *config;
	const char *listen;
	const char *db;
	const char *state_dir;
	const char *name;
	const char *credit_usd;
	const char *scope;
	const char *signer;
	const char *public_key;
	const char *execution;
	const char *code;
	const char *runtime;
	const char *input;
	const char *positional[2];
	int n_positional;
};

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "sandboxd: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see 'sandboxd --help')\n");
	return EXIT_USAGE;
}

/* Parse "--key VALUE" / "--key=VALUE" options and positionals from argv[i..].
 * `allowed` lists the long options this command takes. */
static int parse_opts(int argc, char **argv, int i, const char *const *allowed, struct opts *o)
{
	for (; i < argc; i++) {
		const char *a = argv[i], *val = NULL;
		char name[32];
		size_t n;
		bool ok = false;

		if (strncmp(a, "--", 2) != 0) {
			if (o->n_positional == (int)SBX_ARRAY_SIZE(o->positional))
				return usage_error("unexpected argument '%s'", a);
			o->positional[o->n_positional++] = a;
			continue;
		}
		n = strcspn(a + 2, "=");
		if (n == 0 || n >= sizeof(name))
			return usage_error("unknown option '%s'", a);
		memcpy(name, a + 2, n);
		name[n] = '\0';
		for (const char *const *p = allowed; *p; p++)
			ok = ok || strcmp(*p, name) == 0;
		if (!ok)
			return usage_error("unknown option '%s'", a);
		if (a[2 + n] == '=')
			val = a + 3 + n;
		else if (i + 1 < argc)
			val = argv[++i];
		else
			return usage_error("option '%s' needs a value", a);
		if (strcmp(name, "config") == 0)
			o->config = val;
		else if (strcmp(name, "listen") == 0)
			o->listen = val;
		else if (strcmp(name, "db") == 0)
			o->db = val;
		else if (strcmp(name, "state-dir") == 0)
			o->state_dir = val;
		else if (strcmp(name, "name") == 0)
			o->name = val;
		else if (strcmp(name, "credit-usd") == 0)
			o->credit_usd = val;
		else if (strcmp(name, "scope") == 0)
			o->scope = val;
		else if (strcmp(name, "signer") == 0)
			o->signer = val;
		else if (strcmp(name, "public-key") == 0)
			o->public_key = val;
		else if (strcmp(name, "execution") == 0)
			o->execution = val;
		else if (strcmp(name, "code") == 0)
			o->code = val;
		else if (strcmp(name, "runtime") == 0)
			o->runtime = val;
		else if (strcmp(name, "input") == 0)
			o->input = val;
	}
	return 0;
}

/* Copy a path flag into a config field, made absolute. */
static int set_path(char *field, size_t size, const char *val, const char *flag)
{
	char cwd[PATH_MAX];
	int n;

	if (!val[0])
		return usage_error("%s must not be empty", flag);
	if (val[0] == '/') {
		n = snprintf(field, size, "%s", val);
	} else {
		if (!getcwd(cwd, sizeof(cwd)))
			return usage_error("cannot resolve %s: no working directory", flag);
		n = snprintf(field, size, "%s/%s", cwd, val);
	}
	if (n < 0 || (size_t)n >= size)
		return usage_error("%s is too long", flag);
	return 0;
}

/* defaults -> config file -> flags -> resolve -> validate. */
static int load_config(const struct opts *o, struct sandbox_config *cfg)
{
	struct sbx_error err;
	int rc;

	sbx_error_clear(&err);
	sandbox_config_defaults(cfg);
	if (o->config && api_config_load(o->config, cfg, &err) < 0) {
		fprintf(stderr, "sandboxd: %s: %s\n", o->config, err.message);
		return EXIT_USAGE;
	}
	if (o->listen) {
		if (strlen(o->listen) >= sizeof(cfg->listen))
			return usage_error("--listen '%s' is too long", o->listen);
		snprintf(cfg->listen, sizeof(cfg->listen), "%s", o->listen);
	}
	if (o->state_dir &&
	    (rc = set_path(cfg->state_dir, sizeof(cfg->state_dir), o->state_dir, "--state-dir")))
		return rc;
	if (o->db && (rc = set_path(cfg->db_path, sizeof(cfg->db_path), o->db, "--db")))
		return rc;
	sandbox_config_resolve(cfg);
	if (sandbox_config_validate(cfg, &err) < 0) {
		fprintf(stderr, "sandboxd: invalid config (%s): %s\n",
			err.param[0] ? err.param : "config", err.message);
		return EXIT_USAGE;
	}
	return 0;
}

static void print_json(struct json_object *o)
{
	printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
							     JSON_C_TO_STRING_NOSLASHESCAPE));
	fflush(stdout);
	json_object_put(o);
}

static int runtime_error(const char *what, const struct sbx_error *err)
{
	fprintf(stderr, "sandboxd: %s: %s\n", what, err->message);
	return EXIT_RUNTIME;
}

static int cmd_serve(int argc, char **argv)
{
	static const char *const allowed[] = {"config", "listen", "db", "state-dir", NULL};
	struct opts o = {0};
	struct sandbox_config cfg;
	struct sandbox_svc *svc;
	struct api_server *srv;
	struct api_metrics *metrics = NULL;
	struct sbx_error err;
	sigset_t set;
	char host[64];
	int rc, sig = 0, left;

	if ((rc = parse_opts(argc, argv, 2, allowed, &o)))
		return rc;
	if (o.n_positional)
		return usage_error("unexpected argument '%s'", o.positional[0]);
	if ((rc = load_config(&o, &cfg)))
		return rc;
	{
		struct sockaddr_in sa;
		sbx_error_clear(&err);
		if (api_listen_parse(cfg.listen, &sa, &err) < 0)
			return usage_error("--listen: %s", err.message);
	}

	/* Block the stop signals in every thread (they inherit the mask);
	 * main takes them with sigwait. */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	sbx_error_clear(&err);
	sbx_log_set_format(cfg.log_format);
	svc = sandbox_svc_new(&cfg, SANDBOX_SVC_FULL, &err);
	if (!svc)
		return runtime_error("cannot start the service", &err);
	srv = api_server_start(svc, &err);
	if (!srv) {
		sandbox_svc_free(svc);
		return runtime_error("cannot start the HTTP server", &err);
	}
	if (cfg.metrics_listen[0]) {
		metrics = api_metrics_start(srv, cfg.metrics_listen, &err);
		if (!metrics) {
			api_server_stop(srv);
			sandbox_svc_free(svc);
			return runtime_error("cannot start the metrics server", &err);
		}
	}
	snprintf(host, sizeof(host), "%.*s", (int)(strrchr(cfg.listen, ':') - cfg.listen),
		 cfg.listen);
	printf("listening on http://%s:%u\n", host, api_server_port(srv));
	fflush(stdout);
	sbx_info("main", "listening on http://%s:%u", host, api_server_port(srv));
	sbx_notify("READY=1");

	while (sigwait(&set, &sig) != 0)
		;
	sbx_info("main", "signal %d: stopping (draining up to %d ms)", sig, DRAIN_TIMEOUT_MS);
	sbx_notify("STOPPING=1");
	api_server_quiesce(srv);
	left = api_server_drain(srv, DRAIN_TIMEOUT_MS);
	if (left)
		sbx_warn("main", "%d request(s) still in flight at the deadline", left);
	api_metrics_stop(metrics);
	api_server_stop(srv);
	sandbox_svc_free(svc);
	sbx_info("main", "stopped");
	return 0;
}

static struct json_object *accounts_encode(const struct sandbox_account *a, size_t n)
{
	struct json_object *arr = json_object_new_array();

	for (size_t i = 0; i < n; i++)
		json_object_array_add(arr, api_account_encode(&a[i]));
	return arr;
}

/* What one admin command needs: its options, the config, the credit. */
struct admin_args {
	const struct opts *o;
	const struct sandbox_config *cfg;
	int64_t credit;
};

/* Each returns 0 after printing its JSON, or -1 with err set (its
 * caller reports it under the command's name). */
static int admin_create_account(struct sandbox_svc *svc, const struct admin_args *a,
				struct sbx_error *err)
{
	struct sandbox_account acct;
	struct sandbox_key k;
	char secret[80];
	if (sandbox_account_create(svc, a->o->name, a->credit, &acct, &k, secret, err) < 0)
		return -1;
	struct json_object *j = json_object_new_object();
	json_object_object_add(j, "account_id", json_object_new_string(acct.id));
	json_object_object_add(j, "api_key", json_object_new_string(secret));
	json_object_object_add(j, "key_id", json_object_new_string(k.id));
	print_json(j);
	explicit_bzero(secret, sizeof(secret));
	return 0;
}

static int admin_add_credit(struct sandbox_svc *svc, const struct admin_args *a,
			    struct sbx_error *err)
{
	struct sandbox_account acct;
	if (sandbox_account_add_credit(svc, a->o->positional[0], a->credit, &acct, err) < 0)
		return -1;
	print_json(api_account_encode(&acct));
	return 0;
}

static int admin_create_key(struct sandbox_svc *svc, const struct admin_args *a,
			    struct sbx_error *err)
{
	const struct opts *o = a->o;
	struct sandbox_key k;
	char secret[80];
	unsigned scopes = 0;
	/* no --scope: SANDBOX_SCOPES_DEFAULT; the key is stored with its
	 * scopes in one insert, or not at all */
	if ((o->scope && sandbox_scopes_parse(o->scope, &scopes, err) < 0) ||
	    sandbox_key_create(svc, o->positional[0], o->scope ? &scopes : NULL, NULL, &k, secret,
			       err) < 0)
		return -1;
	struct json_object *j = json_object_new_object();
	json_object_object_add(j, "key_id", json_object_new_string(k.id));
	json_object_object_add(j, "api_key", json_object_new_string(secret));
	json_object_object_add(j, "account_id", json_object_new_string(k.account_id));
	json_object_object_add(j, "scopes", api_scopes_encode(k.scopes));
	print_json(j);
	explicit_bzero(secret, sizeof(secret));
	return 0;
}

static int admin_set_scopes(struct sandbox_svc *svc, const struct admin_args *a,
			    struct sbx_error *err)
{
	const struct opts *o = a->o;
	unsigned scopes = 0;
	if (sandbox_scopes_parse(o->scope, &scopes, err) < 0 ||
	    sandbox_key_set_scopes(svc, o->positional[0], scopes, err) < 0 ||
	    sandbox_key_scopes(svc, o->positional[0], &scopes, err) < 0)
		return -1;
	struct json_object *j = json_object_new_object();
	json_object_object_add(j, "key_id", json_object_new_string(o->positional[0]));
	json_object_object_add(j, "scopes", api_scopes_encode(scopes));
	print_json(j);
	return 0;
}

static int admin_revoke_key(struct sandbox_svc *svc, const struct admin_args *a,
			    struct sbx_error *err)
{
	if (sandbox_key_revoke(svc, NULL, a->o->positional[0], NULL, err) < 0)
		return -1;
	struct json_object *j = json_object_new_object();
	json_object_object_add(j, "key_id", json_object_new_string(a->o->positional[0]));
	json_object_object_add(j, "revoked", json_object_new_boolean(true));
	print_json(j);
	return 0;
}

static int admin_drain_set(struct sandbox_svc *svc, const struct admin_args *a, bool drain,
			   struct sbx_error *err)
{
	if (sandbox_host_drain(svc, a->o->positional[0], drain, err) < 0)
		return -1;
	struct json_object *j = json_object_new_object();
	json_object_object_add(j, "host", json_object_new_string(a->o->positional[0]));
	json_object_object_add(j, "drained", json_object_new_boolean(drain));
	/* the serving daemon reads it within host_check_interval_ms */
	json_object_object_add(j, "applies_within_ms",
			       json_object_new_int64(a->cfg->host_check_interval_ms));
	print_json(j);
	return 0;
}

static int admin_drain(struct sandbox_svc *svc, const struct admin_args *a, struct sbx_error *err)
{
	return admin_drain_set(svc, a, true, err);
}

static int admin_undrain(struct sandbox_svc *svc, const struct admin_args *a, struct sbx_error *err)
{
	return admin_drain_set(svc, a, false, err);
}

static int admin_hosts(struct sandbox_svc *svc, const struct admin_args *a, struct sbx_error *err)
{
	const struct sandbox_config *cfg = a->cfg;
	struct json_object *arr = json_object_new_array();
	for (size_t i = 0; i < cfg->n_hosts; i++) {
		const struct sandbox_host_config *h = &cfg->hosts[i];
		int d = sandbox_host_drained(svc, h->name, err);
		if (d < 0) {
			json_object_put(arr);
			return -1;
		}
		struct json_object *j = json_object_new_object();
		json_object_object_add(j, "name", json_object_new_string(h->name));
		json_object_object_add(j, "uri", json_object_new_string(h->uri));
		json_object_object_add(j, "state_dir", json_object_new_string(h->state_dir));
		json_object_object_add(j, "max_guests", json_object_new_int(h->max_guests));
		json_object_object_add(j, "memory_mib",
				       json_object_new_int64((int64_t)h->memory_mib));
		json_object_object_add(j, "disk_gib", json_object_new_int64((int64_t)h->disk_gib));
		json_object_object_add(j, "drained", json_object_new_boolean(d == 1));
		json_object_array_add(arr, j);
	}
	print_json(arr);
	return 0;
}

static int admin_list_accounts(struct sandbox_svc *svc, const struct admin_args *a,
			       struct sbx_error *err)
{
	struct sandbox_account *acct = NULL;
	size_t n = 0;
	if (sandbox_account_list(svc, &acct, &n, err) < 0)
		return -1;
	print_json(accounts_encode(acct, n));
	free(acct);
	return 0;
}

/* The admin commands: how many positional arguments each takes, which of
 * --credit-usd, --scope and --name it takes, and what runs it. */
enum {
	ADMIN_CREDIT = 1 << 0,	     /* --credit-usd required (else refused) */
	ADMIN_SCOPE = 1 << 1,	     /* --scope taken */
	ADMIN_SCOPE_NEEDED = 1 << 2, /* --scope required */
	ADMIN_NAME = 1 << 3,	     /* --name required (else refused) */
};

static const struct admin_cmd {
	const char *name;
	int n_positional;
	unsigned flags;
	int (*run)(struct sandbox_svc *svc, const struct admin_args *a, struct sbx_error *err);
} admin_cmds[] = {
    {"create-account", 0, ADMIN_CREDIT | ADMIN_NAME, admin_create_account},
    {"list-accounts", 0, 0, admin_list_accounts},
    {"hosts", 0, 0, admin_hosts},
    {"add-credit", 1, ADMIN_CREDIT, admin_add_credit},
    {"create-key", 1, ADMIN_SCOPE, admin_create_key},
    {"revoke-key", 1, 0, admin_revoke_key},
    {"set-scopes", 1, ADMIN_SCOPE | ADMIN_SCOPE_NEEDED, admin_set_scopes},
    {"drain", 1, 0, admin_drain},
    {"undrain", 1, 0, admin_undrain},
};

static int cmd_admin(int argc, char **argv)
{
	static const char *const allowed[] = {"config",	    "db",    "state-dir", "name",
					      "credit-usd", "scope", NULL};
	const char *sub = argc > 2 ? argv[2] : NULL;
	const struct admin_cmd *c = NULL;
	struct opts o = {0};
	struct sandbox_config cfg;
	struct sandbox_svc *svc;
	struct sbx_error err;
	struct admin_args args = {.o = &o, .cfg = &cfg};
	int rc;

	if (!sub)
		return usage_error("%s", "admin needs a command");
	for (size_t i = 0; i < SBX_ARRAY_SIZE(admin_cmds) && !c; i++)
		if (strcmp(sub, admin_cmds[i].name) == 0)
			c = &admin_cmds[i];
	if (!c)
		return usage_error("unknown admin command '%s'", sub);
	if ((rc = parse_opts(argc, argv, 3, allowed, &o)))
		return rc;
	if (o.n_positional != c->n_positional)
		return usage_error("%s", c->n_positional
					     ? "this command takes one id or host name"
					     : "this command takes no positional argument");
	bool needs_credit = c->flags & ADMIN_CREDIT;
	if (needs_credit != (o.credit_usd != NULL))
		return usage_error("--credit-usd %s",
				   needs_credit ? "is required" : "is not taken here");
	if (o.scope && !(c->flags & ADMIN_SCOPE))
		return usage_error("%s", "--scope is taken by create-key and set-scopes only");
	if (!o.scope && (c->flags & ADMIN_SCOPE_NEEDED))
		return usage_error("%s", "--scope is required");
	if (!!(c->flags & ADMIN_NAME) != (o.name != NULL))
		return usage_error("--name %s", o.name ? "is not taken here" : "is required");
	if (o.name && (!o.name[0] || strlen(o.name) >= sizeof(((struct sandbox_account *)0)->name)))
		return usage_error("--name must be 1..%s bytes", "127");
	sbx_error_clear(&err);
	if (o.credit_usd && api_usd_parse(o.credit_usd, &args.credit, &err) < 0)
		return usage_error("--credit-usd: %s", err.message);
	if (o.n_positional && strlen(o.positional[0]) >= SANDBOX_ID_MAX)
		return usage_error("no such id '%s'", o.positional[0]);
	if ((rc = load_config(&o, &cfg)))
		return rc;

	svc = sandbox_svc_new(&cfg, SANDBOX_SVC_ADMIN, &err);
	if (!svc)
		return runtime_error("cannot open the service", &err);
	rc = c->run(svc, &args, &err) < 0 ? runtime_error(c->name, &err) : 0;
	sandbox_svc_free(svc);
	return rc;
}

/* ------------------------------------------------------- verify-receipt */

/* verify-receipt: receipt/verify.c recomputes everything from what the
 * user holds; nothing is asked of the server. Exit 0 valid, 1 invalid,
 * 2 usage. */
static int cmd_verify_receipt(int argc, char **argv)
{
	static const char *const allowed[] = {"signer",	 "public-key", "execution", "code",
					      "runtime", "input",      NULL};
	struct opts o = {0};
	char msg[512];
	int rc;

	if ((rc = parse_opts(argc, argv, 2, allowed, &o)))
		return rc;
	if (o.n_positional != 1)
		return usage_error("%s", "verify-receipt takes one RECEIPT.json");
	switch (receipt_check_files(&(struct receipt_check){.receipt_path = o.positional[0],
							    .signer = o.signer,
							    .public_key_path = o.public_key,
							    .execution_path = o.execution,
							    .code_path = o.code,
							    .runtime = o.runtime,
							    .input_path = o.input},
				    msg, sizeof(msg))) {
	case RECEIPT_CHECK_VALID:
		printf("valid: %s\n", msg);
		return 0;
	case RECEIPT_CHECK_INVALID:
		printf("invalid: %s\n", msg);
		return EXIT_RUNTIME;
	default:
		return usage_error("%s", msg);
	}
}

int main(int argc, char **argv)
{
	/* Everything the daemon creates (database and its -wal/-shm, overlays
	 * through qemu-img, keys, directories) is its owner's only; libvirt's
	 * DAC relabelling gives qemu what it needs (docs/configuration.md). */
	umask(077);
	if (argc < 2)
		return usage_error("%s", "a command is required");
	if (strcmp(argv[1], "serve") == 0)
		return cmd_serve(argc, argv);
	if (strcmp(argv[1], "admin") == 0)
		return cmd_admin(argc, argv);
	if (strcmp(argv[1], "verify-receipt") == 0)
		return cmd_verify_receipt(argc, argv);
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		fputs(usage_text, stdout);
		return 0;
	}
	return usage_error("unknown command '%s'", argv[1]);
}
