/* sbx: main, configuration, options, the HTTP call (libcurl) and output
 * helpers (sbx.h). */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "../util/util.h"
#include "sbx.h"

#define CLI_VERSION "0.1"

static const char main_help[] =
    "usage: sbx [--url URL] [--key KEY] [--json] COMMAND [ARGS]\n"
    "\n"
    "sandboxes:\n"
    "  create [--size S] [--timeout MIN] [--idempotency-key K]   create one, print its id\n"
    "         [--snapshot SNAP_ID]                               (its disk from a snapshot)\n"
    "         [--network none|allow_list|open] [--allow R]... [--deny R]...\n"
    "  ls [--status S] [--limit N] [--starting-after ID]        list sandboxes\n"
    "  get ID                                                    show one\n"
    "  extend ID MIN                                             make it expire MIN minutes from "
    "now\n"
    "  pause ID | resume ID                                      save it and stop its billing; "
    "bring it back\n"
    "  snapshot create ID [--name N] | list | get SNAP | delete SNAP  its disk, kept; "
    "a template\n"
    "  metrics ID [--last N]                                     its CPU, memory and disk "
    "samples\n"
    "  network ID [--network E] [--allow R]... [--deny R]...     show or set its egress policy\n"
    "  rm ID...                                                  destroy them\n"
    "  exec ID [--cwd D] [--env K=V]... [--timeout-ms N] -- CMD...\n"
    "                                                            run CMD, exit with its code\n"
    "  cp LOCAL ID:/path | cp ID:/path LOCAL [--mode OCTAL]      copy a file or a directory\n"
    "                                                            (LOCAL '-': stdin or stdout)\n"
    "  shell ID                                                  an interactive shell in it\n"
    "  port ID PORT [PATH] [--url-only]                          GET a server in it (its port)\n"
    "  port ID PORT --preview [--ttl SECONDS]                    a preview URL for a browser\n"
    "one-shot executions and receipts:\n"
    "  run (--python | --node | --runtime R) FILE|- [--timeout S]\n"
    "  receipt get RCPT_ID | receipt public-key\n"
    "  receipt verify RECEIPT.json (--signer 0xHEX | --public-key PEM) [--execution F]\n"
    "          [--code FILE --runtime R | --input F]             offline check\n"
    "account:\n"
    "  usage [--from T] [--to T] [--granularity day|hour]        balance and usage\n"
    "  keys [list] | keys create [--scope S,...] | keys revoke ID  API keys\n"
    "\n"
    "Configuration: --url/--key, else SANDBOXD_URL/SANDBOXD_KEY, else\n"
    "$XDG_CONFIG_HOME/sandboxd/config (lines 'url = ...', 'key = ...').\n"
    "--json prints the API's JSON. 'sbx COMMAND --help' for one command.\n"
    "Exit: 0 ok, 1 API error, 2 usage, 3 unreachable, 4 auth, 5 not found,\n"
    "6 retry later; exec/run: the command's code, 124 timed out, 125 sbx failed.\n";

/* ------------------------------------------------------------ options */

struct cli_opt *cli_opt_get(struct cli_opt *opts, const char *name)
{
	for (; opts && opts->name; opts++)
		if (strcmp(opts->name, name) == 0)
			return opts;
	return NULL;
}

int cli_usage(struct cli *c, const char *fmt, ...)
{
	va_list ap;

	if (c->cmd)
		fprintf(stderr, "sbx %s: ", c->cmd);
	else
		fputs("sbx: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (c->cmd)
		fprintf(stderr, " (see 'sbx %s --help')\n", c->cmd);
	else
		fprintf(stderr, " (see 'sbx --help')\n");
	return CLI_EXIT_USAGE;
}

/* The global options, valid in every command. */
static int global_opt(struct cli *c, const char *name, const char *val, bool *takes)
{
	*takes = strcmp(name, "url") == 0 || strcmp(name, "key") == 0;
	if (strcmp(name, "json") == 0) {
		c->json = true;
		return 1;
	}
	if (!*takes)
		return 0;
	if (!val)
		return 1;
	char *dst = strcmp(name, "url") == 0 ? c->url : c->key;
	size_t size = strcmp(name, "url") == 0 ? sizeof(c->url) : sizeof(c->key);
	if (strlen(val) >= size)
		return cli_usage(c, "--%s is too long", name), -1;
	snprintf(dst, size, "%s", val);
	return 1;
}

int cli_parse(struct cli *c, int argc, char **argv, struct cli_opt *opts, const char **pos,
	      int maxpos, int *npos, char ***rest, int *nrest)
{
	*npos = 0;
	if (rest) {
		*rest = NULL;
		*nrest = 0;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = NULL, *eq;
		char name[40];
		struct cli_opt *o;
		bool takes;

		if (strcmp(a, "--") == 0) {
			if (!rest)
				return cli_usage(c, "%s", "'--' is not expected here");
			*rest = argv + i + 1;
			*nrest = argc - i - 1;
			return 0;
		}
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
			return -1;
		if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
			if (a[0] == '-' && a[1] != '\0')
				return cli_usage(c, "unknown option '%s'", a);
			if (*npos == maxpos)
				return cli_usage(c, "unexpected argument '%s'", a);
			pos[(*npos)++] = a;
			continue;
		}
		eq = strchr(a, '=');
		snprintf(name, sizeof(name), "%.*s", (int)(eq ? eq - a - 2 : (long)strlen(a + 2)),
			 a + 2);
		o = cli_opt_get(opts, name);
		takes = o && o->arg;
		if (!o && global_opt(c, name, NULL, &takes) == 0)
			return cli_usage(c, "unknown option '--%s'", name);
		if (takes) {
			if (eq)
				val = eq + 1;
			else if (i + 1 < argc)
				val = argv[++i];
			else
				return cli_usage(c, "--%s needs a value", name);
		} else if (eq) {
			return cli_usage(c, "--%s takes no value", name);
		}
		if (!o) {
			if (global_opt(c, name, val, &takes) < 0)
				return CLI_EXIT_USAGE;
			continue;
		}
		if (o->set && !o->multi)
			return cli_usage(c, "--%s given twice", name);
		if (o->multi) {
			if (o->n == SBX_ARRAY_SIZE(o->vals))
				return cli_usage(c, "--%s given more than %zu times", name,
						 SBX_ARRAY_SIZE(o->vals));
			o->vals[o->n++] = val;
		}
		o->set = true;
		o->value = val;
	}
	return 0;
}

/* An id that may go into a URL path as is (the API's ids are
 * [a-z]+_[0-9a-f]+; anything else could not exist anyway). */
bool cli_id_ok(const char *id)
{
	size_t n = strlen(id);

	if (n == 0 || n > 39)
		return false;
	for (; *id; id++)
		if (!((*id >= 'a' && *id <= 'z') || (*id >= 'A' && *id <= 'Z') ||
		      (*id >= '0' && *id <= '9') || *id == '_' || *id == '-'))
			return false;
	return true;
}

/* A positive integer option or argument; false when not one. */
bool cli_parse_int(const char *s, long long min, long long max, long long *out)
{
	char *end;

	errno = 0;
	*out = strtoll(s, &end, 10);
	return s[0] && *end == '\0' && errno == 0 && *out >= min && *out <= max;
}

/* Parse, print the help on --help, check the configuration. Returns -1 to
 * go on, else the exit code. */
int cli_begin(struct cli *c, int argc, char **argv, struct cli_opt *opts, const char **pos,
	      int maxpos, int *npos, char ***rest, int *nrest, const char *help)
{
	int rc = cli_parse(c, argc, argv, opts, pos, maxpos, npos, rest, nrest);

	if (rc < 0) {
		fputs(help, stdout);
		return 0;
	}
	if (rc > 0)
		return rc;
	return cli_config(c, true) ? CLI_EXIT_USAGE : -1;
}

/* ------------------------------------------------------- configuration */

static int config_file(struct cli *c, char *url, size_t urlsz, char *key, size_t keysz)
{
	const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
	char path[1024], line[1024];
	struct stat st;
	int lineno = 0;
	FILE *f;

	if (xdg && xdg[0] == '/')
		snprintf(path, sizeof(path), "%s/sandboxd/config", xdg);
	else if (home && home[0])
		snprintf(path, sizeof(path), "%s/.config/sandboxd/config", home);
	else
		return 0;
	if (!(f = fopen(path, "r")))
		return errno == ENOENT ? 0 : (cli_usage(c, "cannot read '%s'", path), -1);
	if (fstat(fileno(f), &st) == 0 && (st.st_mode & 0077))
		fprintf(stderr, "sbx: warning: '%s' is readable by others; chmod 600 it\n", path);
	while (fgets(line, sizeof(line), f)) {
		char *k = line, *v, *end;

		lineno++;
		line[strcspn(line, "\r\n")] = '\0';
		while (isspace((unsigned char)*k))
			k++;
		if (*k == '\0' || *k == '#')
			continue;
		if (!(v = strchr(k, '='))) {
			fclose(f);
			return cli_usage(c, "%s:%d: expected 'name = value'", path, lineno), -1;
		}
		for (end = v; end > k && isspace((unsigned char)end[-1]); end--)
			;
		*end = '\0';
		for (v++; isspace((unsigned char)*v); v++)
			;
		for (end = v + strlen(v); end > v && isspace((unsigned char)end[-1]); end--)
			;
		*end = '\0';
		if (strcmp(k, "url") == 0 && strlen(v) < urlsz)
			snprintf(url, urlsz, "%s", v);
		else if (strcmp(k, "key") == 0 && strlen(v) < keysz)
			snprintf(key, keysz, "%s", v);
		else {
			fclose(f);
			return cli_usage(c,
					 "%s:%d: unknown name '%.40s' or value too long (known: "
					 "url, key)",
					 path, lineno, k),
			       -1;
		}
	}
	fclose(f);
	return 0;
}

int cli_config(struct cli *c, bool need_key)
{
	char furl[sizeof(c->url)] = "", fkey[sizeof(c->key)] = "";
	const char *eurl = getenv("SANDBOXD_URL"), *ekey = getenv("SANDBOXD_KEY");
	size_t n;

	if (config_file(c, furl, sizeof(furl), fkey, sizeof(fkey)) < 0)
		return CLI_EXIT_USAGE;
	if (!c->url[0])
		snprintf(c->url, sizeof(c->url), "%s",
			 eurl && eurl[0] ? eurl
			 : furl[0]	 ? furl
					 : "http://127.0.0.1:8080");
	if (!c->key[0])
		snprintf(c->key, sizeof(c->key), "%s", ekey && ekey[0] ? ekey : fkey);
	if (strncmp(c->url, "http://", 7) != 0 && strncmp(c->url, "https://", 8) != 0)
		return cli_usage(c, "the URL '%s' must start with http:// or https://", c->url);
	for (n = strlen(c->url); n > 0 && c->url[n - 1] == '/'; n--)
		c->url[n - 1] = '\0';
	for (const char *p = c->key; *p; p++)
		if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
			return cli_usage(c, "%s", "the API key holds a space or control byte");
	if (need_key && !c->key[0])
		return cli_usage(c, "%s",
				 "no API key: set SANDBOXD_KEY, put 'key = ...' in "
				 "$XDG_CONFIG_HOME/sandboxd/config, or pass --key");
	return 0;
}

/* ---------------------------------------------------------------- HTTP */

void cli_reply_free(struct cli_reply *r)
{
	free(r->body);
	if (r->json)
		json_object_put(r->json);
	memset(r, 0, sizeof(*r));
}

struct call_ctx {
	struct cli *c;
	CURL *cu;
	FILE *download; /* a 2xx body goes here (cli_call_stream) */
	bool (*sink)(void *opaque, const char *data, size_t len);
	void *sink_opaque;
	bool download_failed;
	struct sbx_buf buf;
	struct cli_reply *r;
	const char *progress;
	int64_t start_ms;
	bool shown;
};

static size_t on_body(char *data, size_t size, size_t n, void *opaque)
{
	struct call_ctx *x = opaque;
	long status = 0;

	if (x->download || x->sink) {
		curl_easy_getinfo(x->cu, CURLINFO_RESPONSE_CODE, &status);
		if (status >= 200 && status < 300 && x->sink) {
			if (!x->sink(x->sink_opaque, data, size * n)) {
				x->download_failed = true;
				return 0;
			}
			return size * n;
		}
		if (status >= 200 && status < 300) {
			if (fwrite(data, 1, size * n, x->download) != size * n) {
				x->download_failed = true;
				return 0;
			}
			return size * n;
		}
	}
	return sbx_buf_append(&x->buf, data, size * n) < 0 ? 0 : size * n;
}

static size_t on_header(char *data, size_t size, size_t n, void *opaque)
{
	struct call_ctx *x = opaque;
	size_t len = size * n, nl = sizeof("X-Request-Id:") - 1;

	if (len > nl && strncasecmp(data, "X-Request-Id:", nl) == 0) {
		const char *v = data + nl;
		size_t vl = len - nl;

		while (vl && (*v == ' ' || *v == '\t'))
			v++, vl--;
		while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
			vl--;
		snprintf(x->r->request_id, sizeof(x->r->request_id), "%.*s", (int)vl, v);
	}
	return len;
}

/* A progress line on a terminal for waits over a second; libcurl calls
 * this at least once a second while the request is in flight. */
static int on_progress(void *opaque, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	struct call_ctx *x = opaque;
	int64_t el = sbx_mono_ms() - x->start_ms;

	if (x->progress && x->c->progress && el >= 1000) {
		fprintf(stderr, "\r%s... %llds", x->progress, (long long)(el / 1000));
		fflush(stderr);
		x->shown = true;
	}
	return 0;
}

static int call(struct cli *c, const char *method, const char *path, json_object *body,
		const char *idempotency_key, const struct cli_stream *s, const char *progress,
		struct cli_reply *r)
{
	struct call_ctx x = {.c = c,
			     .r = r,
			     .progress = progress,
			     .start_ms = sbx_mono_ms(),
			     .download = s ? s->download : NULL,
			     .sink = s ? s->sink : NULL,
			     .sink_opaque = s ? s->sink_opaque : NULL};
	struct curl_slist *h = NULL;
	char url[2048], line[512], errbuf[CURL_ERROR_SIZE] = "";
	CURLcode rc;
	CURL *cu;

	memset(r, 0, sizeof(*r));
	if (!(cu = curl_easy_init())) {
		fprintf(stderr, "sbx: cannot start libcurl\n");
		return CLI_EXIT_CONNECT;
	}
	sbx_buf_init(&x.buf, CLI_REPLY_MAX);
	snprintf(url, sizeof(url), "%s%s", c->url, path);
	if (c->key[0]) {
		snprintf(line, sizeof(line), "Authorization: Bearer %s", c->key);
		h = curl_slist_append(h, line);
	}
	if (idempotency_key) {
		snprintf(line, sizeof(line), "Idempotency-Key: %s", idempotency_key);
		h = curl_slist_append(h, line);
	}
	if (s && s->accept) {
		snprintf(line, sizeof(line), "Accept: %s", s->accept);
		h = curl_slist_append(h, line);
	} else {
		h = curl_slist_append(h, "Accept: application/json");
	}
	h = curl_slist_append(h, "Expect:");
	if (body)
		h = curl_slist_append(h, "Content-Type: application/json");
	x.cu = cu;
	curl_easy_setopt(cu, CURLOPT_URL, url);
	if (s && s->upload) {
		snprintf(line, sizeof(line), "Content-Type: %s",
			 s->content_type ? s->content_type : "application/octet-stream");
		h = curl_slist_append(h, line);
		curl_easy_setopt(cu, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(cu, CURLOPT_READDATA, s->upload);
		if (s->upload_size >= 0)
			curl_easy_setopt(cu, CURLOPT_INFILESIZE_LARGE, (curl_off_t)s->upload_size);
		else
			h = curl_slist_append(h, "Transfer-Encoding: chunked");
		if (strcmp(method, "PUT") != 0)
			curl_easy_setopt(cu, CURLOPT_CUSTOMREQUEST, method);
	} else if (strcmp(method, "GET") == 0) {
		curl_easy_setopt(cu, CURLOPT_HTTPGET, 1L);
	} else if (strcmp(method, "POST") == 0) {
		curl_easy_setopt(cu, CURLOPT_POSTFIELDS,
				 body ? json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN)
				      : "");
	} else {
		curl_easy_setopt(cu, CURLOPT_CUSTOMREQUEST, method);
	}
	curl_easy_setopt(cu, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(cu, CURLOPT_USERAGENT, "sbx/" CLI_VERSION);
	curl_easy_setopt(cu, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(cu, CURLOPT_WRITEDATA, &x);
	curl_easy_setopt(cu, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(cu, CURLOPT_HEADERDATA, &x);
	curl_easy_setopt(cu, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(cu, CURLOPT_XFERINFODATA, &x);
	curl_easy_setopt(cu, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(cu, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
	curl_easy_setopt(cu, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(cu, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(cu, CURLOPT_PROTOCOLS_STR, "http,https");
	rc = curl_easy_perform(cu);
	if (x.shown)
		fprintf(stderr, "\r\033[K");
	if (rc == CURLE_OK)
		curl_easy_getinfo(cu, CURLINFO_RESPONSE_CODE, &r->status);
	curl_easy_cleanup(cu);
	curl_slist_free_all(h);
	if (rc != CURLE_OK) {
		sbx_buf_release(&x.buf);
		if (rc == CURLE_WRITE_ERROR && x.download_failed && x.sink)
			fprintf(stderr, "sbx: the daemon's event stream was malformed\n");
		else if (rc == CURLE_WRITE_ERROR && x.download_failed)
			fprintf(stderr, "sbx: cannot write the download: %s\n", strerror(errno));
		else if (rc == CURLE_WRITE_ERROR)
			fprintf(stderr, "sbx: the reply is larger than %u MiB\n",
				CLI_REPLY_MAX >> 20);
		else
			fprintf(stderr, "sbx: cannot reach %s: %s\n", c->url,
				errbuf[0] ? errbuf : curl_easy_strerror(rc));
		return CLI_EXIT_CONNECT;
	}
	if (sbx_buf_append(&x.buf, "", 0) < 0 || !(r->body = sbx_buf_steal(&x.buf, &r->body_len))) {
		r->body = strdup("");
		r->body_len = 0;
	}
	r->json = json_tokener_parse(r->body);
	if (!r->json && r->status >= 200 && r->status < 300 && !x.download && !x.sink) {
		fprintf(stderr, "sbx: %s replied %ld with a body that is not JSON\n", c->url,
			r->status);
		cli_reply_free(r);
		return CLI_EXIT_CONNECT;
	}
	return 0;
}

int cli_fail(struct cli *c, const struct cli_reply *r)
{
	json_object *e = cli_obj(r->json, "error");
	const char *msg = cli_str(e, "message"), *type = cli_str(e, "type"),
		   *param = cli_str(e, "param");
	long s = r->status;

	if (c->json && r->json)
		fprintf(stderr, "%s\n",
			json_object_to_json_string_ext(r->json, JSON_C_TO_STRING_PLAIN));
	else if (msg[0])
		fprintf(stderr, "sbx: %s (%ld %s%s%s%s%s)\n", msg, s, type,
			param[0] ? ", param " : "", param, r->request_id[0] ? ", request " : "",
			r->request_id);
	else
		fprintf(stderr, "sbx: the daemon answered %ld: %.200s\n", s, r->body);
	if (s == 401 || s == 403)
		return CLI_EXIT_AUTH;
	if (s == 404 || s == 410)
		return CLI_EXIT_NOT_FOUND;
	if (s == 429 || s == 503)
		return CLI_EXIT_RETRY;
	return CLI_EXIT_API;
}

int cli_get_human(struct cli *c, const char *path, struct cli_reply *r)
{
	int rc = cli_call(c, "GET", path, NULL, NULL, NULL, r);

	if (rc)
		return rc;
	if (r->status != 200)
		rc = cli_fail(c, r);
	else if (c->json)
		cli_print_json(r->json);
	else
		return -1;
	cli_reply_free(r);
	return rc;
}

/* ------------------------------------------------------------- output */

void cli_print_json(json_object *o)
{
	printf("%s\n",
	       json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
						     JSON_C_TO_STRING_NOSLASHESCAPE));
}

json_object *cli_obj(json_object *o, const char *key)
{
	json_object *v;

	return o && json_object_object_get_ex(o, key, &v) &&
		       json_object_is_type(v, json_type_object)
		   ? v
		   : NULL;
}

const char *cli_str(json_object *o, const char *key)
{
	json_object *v;

	return o && json_object_object_get_ex(o, key, &v) &&
		       json_object_is_type(v, json_type_string)
		   ? json_object_get_string(v)
		   : "";
}

int64_t cli_int(json_object *o, const char *key)
{
	json_object *v;

	return o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_int)
		   ? json_object_get_int64(v)
		   : 0;
}

bool cli_bool(json_object *o, const char *key)
{
	json_object *v;

	return o && json_object_object_get_ex(o, key, &v) &&
	       json_object_is_type(v, json_type_boolean) && json_object_get_boolean(v);
}

const char *cli_usd(int64_t micro, char buf[static 32])
{
	uint64_t m = micro < 0 ? (uint64_t)0 - (uint64_t)micro : (uint64_t)micro;

	snprintf(buf, 32, "%s%llu.%06llu", micro < 0 ? "-" : "", (unsigned long long)(m / 1000000),
		 (unsigned long long)(m % 1000000));
	return buf;
}

#define TABLE_MAX_COLS 16

struct cli_table {
	int ncols;
	size_t nrows, cap;
	char **cells; /* nrows * ncols */
	size_t width[TABLE_MAX_COLS];
};

static void table_add(struct cli_table *t, va_list ap)
{
	if (t->nrows == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 16;
		t->cells = realloc(t->cells, t->cap * (size_t)t->ncols * sizeof(char *));
		if (!t->cells)
			abort();
	}
	for (int i = 0; i < t->ncols; i++) {
		const char *s = va_arg(ap, const char *);
		char *copy = strdup(s ? s : "");
		size_t w = 0;

		if (!copy)
			abort();
		for (const char *p = copy; *p; p++) /* display width of UTF-8 */
			w += ((unsigned char)*p & 0xc0) != 0x80;
		t->cells[t->nrows * (size_t)t->ncols + (size_t)i] = copy;
		t->width[i] = SBX_MAX(t->width[i], w);
	}
	t->nrows++;
}

struct cli_table *cli_table_new(int ncols, ...)
{
	struct cli_table *t = calloc(1, sizeof(*t));
	va_list ap;

	if (!t || ncols < 1 || ncols > TABLE_MAX_COLS)
		abort();
	t->ncols = ncols;
	va_start(ap, ncols);
	table_add(t, ap);
	va_end(ap);
	return t;
}

void cli_table_row(struct cli_table *t, ...)
{
	va_list ap;

	va_start(ap, t);
	table_add(t, ap);
	va_end(ap);
}

void cli_table_print(struct cli_table *t)
{
	for (size_t r = 0; r < t->nrows; r++) {
		for (int i = 0; i < t->ncols; i++) {
			char *s = t->cells[r * (size_t)t->ncols + (size_t)i];
			size_t w = 0;

			for (const char *p = s; *p; p++)
				w += ((unsigned char)*p & 0xc0) != 0x80;
			fputs(s, stdout);
			if (i + 1 < t->ncols)
				printf("%*s", (int)(t->width[i] - w + 2), "");
			free(s);
		}
		putchar('\n');
	}
	free(t->cells);
	free(t);
}

char *cli_read_file(const char *path, size_t max, size_t *len)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	struct sbx_buf b;
	char chunk[65536];
	size_t n;
	bool ok = true;

	if (!f)
		return NULL;
	sbx_buf_init(&b, max);
	while (ok && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		ok = sbx_buf_append(&b, chunk, n) == 0;
	ok = ok && !ferror(f) && sbx_buf_append(&b, "", 0) == 0;
	if (f != stdin)
		fclose(f);
	if (!ok || !b.data) {
		sbx_buf_release(&b);
		return ok ? strdup("") : NULL;
	}
	return sbx_buf_steal(&b, len);
}

unsigned char *cli_base64_decode(const char *s, size_t len, size_t *out_len)
{
	unsigned char *out;
	int n;

	if (len % 4 != 0 || len > INT32_MAX)
		return NULL;
	if (!(out = malloc(len / 4 * 3 + 1)))
		return NULL;
	if (len == 0) {
		*out_len = 0;
		return out;
	}
	if ((n = EVP_DecodeBlock(out, (const unsigned char *)s, (int)len)) < 0) {
		free(out);
		return NULL;
	}
	/* EVP_DecodeBlock counts the padding as zero bytes */
	n -= (s[len - 1] == '=') + (s[len - 2] == '=');
	*out_len = (size_t)n;
	return out;
}

int cli_call(struct cli *c, const char *method, const char *path, json_object *body,
	     const char *idempotency_key, const char *progress, struct cli_reply *r)
{
	return call(c, method, path, body, idempotency_key, NULL, progress, r);
}

int cli_call_stream(struct cli *c, const char *method, const char *path, json_object *body,
		    const struct cli_stream *s, const char *progress, struct cli_reply *r)
{
	return call(c, method, path, body, NULL, s, progress, r);
}

/* --------------------------------------------------------------- main */

static const struct {
	const char *name;
	int (*fn)(struct cli *, int, char **);
} commands[] = {
    {"create", cmd_create},	{"ls", cmd_ls},		  {"get", cmd_get},
    {"extend", cmd_extend},	{"rm", cmd_rm},		  {"exec", cmd_exec},
    {"run", cmd_run},		{"receipt", cmd_receipt}, {"usage", cmd_usage},
    {"keys", cmd_keys},		{"cp", cmd_cp},		  {"metrics", cmd_metrics},
    {"snapshot", cmd_snapshot}, {"pause", cmd_pause},	  {"resume", cmd_resume},
    {"shell", cmd_shell},	{"network", cmd_network}, {"port", cmd_port},
};

/* Edit distance between a and b (both short: command names and what was
 * typed, the latter cut at 31 bytes). */
static size_t edit_distance(const char *a, const char *b)
{
	size_t la = SBX_MIN(strlen(a), (size_t)31), lb = SBX_MIN(strlen(b), (size_t)31);
	size_t row[32];

	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];

		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j];

			row[j] = SBX_MIN(SBX_MIN(row[j] + 1, row[j - 1] + 1),
					 diag + (a[i - 1] != b[j - 1]));
			diag = up;
		}
	}
	return row[lb];
}

/* "unknown command", with the nearest command when one is close (at most
 * two edits, and fewer than the word's length). */
static int unknown_command(struct cli *c, const char *word)
{
	const char *best = NULL;
	size_t best_d = 3;

	for (size_t k = 0; k < SBX_ARRAY_SIZE(commands); k++) {
		size_t d = edit_distance(word, commands[k].name);

		if (d < best_d && d < strlen(word)) {
			best_d = d;
			best = commands[k].name;
		}
	}
	if (best)
		return cli_usage(c, "unknown command '%.40s'; did you mean '%s'?", word, best);
	return cli_usage(c, "unknown command '%.40s'", word);
}

int main(int argc, char **argv)
{
	struct cli c = {.progress = isatty(STDERR_FILENO) == 1};
	int i, rc;

	/* global options before the command */
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *eq = strchr(a, '=');
		char name[16];
		bool takes;

		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0 || strcmp(a, "help") == 0) {
			fputs(main_help, stdout);
			return 0;
		}
		if (strcmp(a, "--version") == 0) {
			printf("sbx %s\n", CLI_VERSION);
			return 0;
		}
		if (strncmp(a, "--", 2) != 0)
			break;
		snprintf(name, sizeof(name), "%.*s", (int)(eq ? eq - a - 2 : (long)strlen(a + 2)),
			 a + 2);
		if (global_opt(&c, name, NULL, &takes) == 0)
			return cli_usage(&c, "unknown option '%s'", a);
		if (takes && !eq && i + 1 == argc)
			return cli_usage(&c, "--%s needs a value", name);
		if (takes && global_opt(&c, name, eq ? eq + 1 : argv[++i], &takes) < 0)
			return CLI_EXIT_USAGE;
	}
	if (i == argc) {
		fputs(main_help, stderr);
		return CLI_EXIT_USAGE;
	}
	for (size_t k = 0; k < SBX_ARRAY_SIZE(commands); k++)
		if (strcmp(argv[i], commands[k].name) == 0) {
			c.cmd = commands[k].name;
			curl_global_init(CURL_GLOBAL_DEFAULT);
			rc = commands[k].fn(&c, argc - i, argv + i);
			curl_global_cleanup();
			fflush(stdout);
			return rc;
		}
	return unknown_command(&c, argv[i]);
}
