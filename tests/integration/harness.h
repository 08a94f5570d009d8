/* Integration-test harness: a real daemon (bin/sandboxd serve) on a free
 * loopback port with its own state dir and domain-name prefix, real guests
 * under qemu:///system, and a minimal HTTP/1.1 client over a real socket.
 *
 * Environment: SBX_BIN (path to bin/sandboxd), SBX_TEST_IMAGE_DIR (vmlinux
 * and initramfs.cpio.gz), SBX_TEST_FULL_IMAGE_DIR (the same plus
 * base.qcow2 and base.sha256, for daemon_config_full()). Header-only:
 * each test program includes it once.
 */
#ifndef SBX_TEST_HARNESS_H
#define SBX_TEST_HARNESS_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agentless/wire.h"
#include "store/store.h"
#include "util/util.h"

struct daemon {
	pid_t pid;
	int port;
	char state_dir[256];
	char config[300];
	char db[300];
	char prefix[32];
	char key[128];
	char account_id[64];
	/* Benches that compare two builds (bench/bench.h, SBX_BENCH_BASE_BIN):
	 * the binary this daemon runs (NULL = SBX_BIN), and a tag that keeps
	 * its state dir and domain prefix apart from the other daemon's of
	 * the same process ("" = none). */
	const char *bin;
	char tag[8];
};

struct http_reply {
	int status;
	char headers[4096];
	char *body; /* NUL-terminated */
	size_t body_len;
	json_object *json; /* parsed body or NULL */
};

static inline void http_reply_free(struct http_reply *r)
{
	free(r->body);
	if (r->json)
		json_object_put(r->json);
	memset(r, 0, sizeof(*r));
}

static inline int run_cmd(const char *cmd)
{
	int rc = system(cmd);

	return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* `cmd`'s stdout into out (at most n - 1 bytes, trailing newlines and
 * spaces trimmed); its exit status, -1 when it cannot run. */
static inline int cmd_out(const char *cmd, char *out, size_t n)
{
	FILE *p = popen(cmd, "r");
	size_t got = 0;

	out[0] = '\0';
	if (!p)
		return -1;
	while (got + 1 < n) {
		size_t r = fread(out + got, 1, n - 1 - got, p);

		if (r == 0)
			break;
		got += r;
	}
	out[got] = '\0';
	while (got > 0 && (out[got - 1] == '\n' || out[got - 1] == ' '))
		out[--got] = '\0';
	int rc = pclose(p);

	return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Can this test make network namespaces (root, and `ip netns add` of a
 * probe works) and run `tools` (program names, space-separated)? If not,
 * says why on stderr ("WHO: SKIP: ...") and returns false: the caller
 * skips its tests. Each tool is looked up on its own: `command -v a b` in
 * dash (/bin/sh) looks up a only. */
static inline bool netns_usable(const char *who, const char *tools)
{
	char cmd[1024];
	int id = (int)(getpid() % 10000);

	if (geteuid() != 0) {
		fprintf(stderr, "%s: SKIP: needs root to make network namespaces\n", who);
		return false;
	}
	snprintf(cmd, sizeof(cmd),
		 "ip netns add sbxprobe%d 2>/dev/null && ip netns del sbxprobe%d && "
		 "for t in %s; do command -v \"$t\" >/dev/null || exit 1; done",
		 id, id, tools);
	if (run_cmd(cmd) != 0) {
		fprintf(stderr,
			"%s: SKIP: this machine cannot make network namespaces "
			"(ip netns add failed) or lacks one of %s (scripts/deps.sh)\n",
			who, tools);
		return false;
	}
	return true;
}

static inline int copy_file(const char *from, const char *to)
{
	char cmd[2100];

	snprintf(cmd, sizeof(cmd), "install -m 0644 '%s' '%s'", from, to);
	return run_cmd(cmd);
}

/* Write the test config for the image in `img` (vmlinux,
 * initramfs.cpio.gz): own prefix and state dir, TCG allowed, `base_image`
 * (a path qemu can read, or NULL for none) plus `extra` JSON members (e.g.
 * "\"max_sandboxes_per_account\": 3") or "". */
static inline void daemon_config_image(struct daemon *d, const char *img, const char *base_image,
				       const char *extra)
{
	char path[512];
	FILE *f;

	snprintf(d->prefix, sizeof(d->prefix), "t%d%s-", (int)getpid(), d->tag);
	snprintf(d->state_dir, sizeof(d->state_dir), "/var/lib/sandboxd-test/%d%s", (int)getpid(),
		 d->tag);
	snprintf(path, sizeof(path), "mkdir -p -m 0755 /var/lib/sandboxd-test %s/images",
		 d->state_dir);
	if (run_cmd(path) != 0)
		abort();
	chmod(d->state_dir, 0755);
	snprintf(path, sizeof(path), "%s/vmlinux", img);
	char dst[512];
	snprintf(dst, sizeof(dst), "%s/images/vmlinux", d->state_dir);
	if (copy_file(path, dst) != 0)
		abort();
	snprintf(path, sizeof(path), "%s/initramfs.cpio.gz", img);
	snprintf(dst, sizeof(dst), "%s/images/initramfs.cpio.gz", d->state_dir);
	if (copy_file(path, dst) != 0)
		abort();
	snprintf(d->config, sizeof(d->config), "%s/config.json", d->state_dir);
	snprintf(d->db, sizeof(d->db), "%s/sandboxd.db", d->state_dir);
	f = fopen(d->config, "w");
	if (!f)
		abort();
	/* SBX_TEST_TRANSPORT=stream|socket picks the exec channel of any
	 * test that does not set one itself */
	const char *t = getenv("SBX_TEST_TRANSPORT");
	char transport[64] = "";
	if (t && (strcmp(t, "stream") == 0 || strcmp(t, "socket") == 0) &&
	    !(extra && strstr(extra, "\"transport\"")))
		snprintf(transport, sizeof(transport), ", \"transport\": \"%s\"", t);
	fprintf(f,
		"{\"state_dir\": \"%s\", \"domain_prefix\": \"%s\", \"accel\": \"tcg\", "
		"\"allow_tcg\": true, \"kernel\": \"%s/images/vmlinux\", "
		"\"initrd\": \"%s/images/initramfs.cpio.gz\", \"base_image\": \"%s\"%s%s%s}\n",
		d->state_dir, d->prefix, d->state_dir, d->state_dir, base_image ? base_image : "",
		extra && extra[0] ? ", " : "", extra ? extra : "", transport);
	fclose(f);
}

/* The tiny image (SBX_TEST_IMAGE_DIR, default build/images/tiny). */
static inline void daemon_config(struct daemon *d, const char *extra)
{
	const char *img = getenv("SBX_TEST_IMAGE_DIR");

	daemon_config_image(d, img ? img : "build/images/tiny", NULL, extra);
}

/* The full image (SBX_TEST_FULL_IMAGE_DIR, default build/images/full: its
 * base.qcow2 and versions.json are installed once per digest into
 * /var/lib/sandboxd-test/full-<digest>/ where qemu can read it and every
 * test run of that image shares it; runs of different images, e.g. from
 * two worktrees, do not replace each other's, and concurrent installs of
 * one copy to temporary names). Returns -1 when the image was not built. */
static inline int daemon_config_full(struct daemon *d, const char *extra)
{
	const char *img = getenv("SBX_TEST_FULL_IMAGE_DIR");
	char cmd[2048], base[128];
	FILE *f;
	char sum[17] = "";

	if (!img)
		img = "build/images/full";
	snprintf(cmd, sizeof(cmd), "%s/base.sha256", img);
	f = fopen(cmd, "r");
	if (!f || fscanf(f, "%16[0-9a-f]", sum) != 1 || strlen(sum) != 16) {
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	snprintf(base, sizeof(base), "/var/lib/sandboxd-test/full-%s", sum);
	snprintf(cmd, sizeof(cmd),
		 "set -e; test -f '%s/base.qcow2'; b=%s; "
		 "mkdir -p -m 0755 /var/lib/sandboxd-test $b; "
		 "if ! test -f $b/base.qcow2; then t=$(mktemp $b/base.qcow2.XXXXXX); "
		 "cp '%s/base.qcow2' $t; chmod 0444 $t; mv -f $t $b/base.qcow2; fi; "
		 "if test -f '%s/versions.json' && ! test -f $b/versions.json; then "
		 "t=$(mktemp $b/versions.json.XXXXXX); cp '%s/versions.json' $t; chmod 0444 $t; "
		 "mv -f $t $b/versions.json; fi",
		 img, base, img, img, img);
	if (run_cmd(cmd) != 0)
		return -1;
	snprintf(cmd, sizeof(cmd), "%s/base.qcow2", base);
	daemon_config_image(d, img, cmd, extra);
	return 0;
}

/* A loopback port nobody listens on now (bind 0, read it, close). */
static inline int free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof sa;
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static inline const char *sbx_bin(void)
{
	const char *b = getenv("SBX_BIN");

	return b ? b : "bin/sandboxd";
}

/* Run `sandboxd admin ARGS` and return its stdout parsed as JSON. */
static inline json_object *daemon_admin(struct daemon *d, const char *args)
{
	char cmd[1024], out[8192];
	size_t n;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "%s admin %s --config %s", d->bin ? d->bin : sbx_bin(), args,
		 d->config);
	p = popen(cmd, "r");
	if (!p)
		return NULL;
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	if (pclose(p) != 0)
		return NULL;
	return json_tokener_parse(out);
}

static inline void daemon_create_account(struct daemon *d, const char *credit_usd)
{
	char args[256];
	json_object *o, *v;

	snprintf(args, sizeof(args), "create-account --name test --credit-usd %s", credit_usd);
	o = daemon_admin(d, args);
	if (!o || !json_object_object_get_ex(o, "api_key", &v))
		abort();
	snprintf(d->key, sizeof(d->key), "%s", json_object_get_string(v));
	if (json_object_object_get_ex(o, "account_id", &v))
		snprintf(d->account_id, sizeof(d->account_id), "%s", json_object_get_string(v));
	json_object_put(o);
}

/* Start `sandboxd serve --listen 127.0.0.1:0` and read the bound port
 * from its first stdout line. */
static inline int daemon_start(struct daemon *d)
{
	int fds[2];
	char line[256];
	FILE *f;

	if (pipe(fds) < 0)
		return -1;
	d->pid = fork();
	if (d->pid == 0) {
		/* a test that dies (an assertion, a sanitizer) takes its
		 * daemon with it instead of leaving it and its guests */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		execl(d->bin ? d->bin : sbx_bin(), "sandboxd", "serve", "--config", d->config,
		      "--listen", "127.0.0.1:0", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	f = fdopen(fds[0], "r");
	if (!f || !fgets(line, sizeof(line), f))
		return -1;
	/* keep the pipe open but drained by nobody: the daemon prints little */
	if (sscanf(line, "listening on http://127.0.0.1:%d", &d->port) != 1)
		return -1;
	return 0;
}

/* SIGTERM and wait; returns the exit status (or -1). */
static inline int daemon_stop(struct daemon *d)
{
	int st;

	if (d->pid <= 0)
		return -1;
	kill(d->pid, SIGTERM);
	if (waitpid(d->pid, &st, 0) < 0)
		return -1;
	d->pid = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static inline void daemon_kill9(struct daemon *d)
{
	if (d->pid > 0) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
		d->pid = 0;
	}
}

/* Domains of this test run known to libvirt (`all`: also the defined but
 * stopped ones; else running only): their number, and the first `cap`
 * names into names (NULL for none). -1 when virsh cannot run. */
static inline int list_own_domains(const struct daemon *d, bool all, char (*names)[64], int cap)
{
	char cmd[256], line[256];
	int n = 0;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "virsh -c qemu:///system list %s--name 2>/dev/null",
		 all ? "--all " : "");
	p = popen(cmd, "r");
	if (!p)
		return -1;
	while (fgets(line, sizeof(line), p)) {
		line[strcspn(line, "\n")] = '\0';
		if (strncmp(line, d->prefix, strlen(d->prefix)) != 0)
			continue;
		if (names && n < cap)
			snprintf(names[n], 64, "%.63s", line);
		n++;
	}
	pclose(p);
	return n;
}

/* Domains of this test run still known to libvirt. */
static inline int count_own_domains(const struct daemon *d)
{
	return list_own_domains(d, true, NULL, 0);
}

/* The number a shell command prints (0 when it prints none), -1 when it
 * cannot run. */
static inline long long cmd_number(const char *cmd)
{
	long long n = 0;
	FILE *p = popen(cmd, "r");

	if (!p)
		return -1;
	if (fscanf(p, "%lld", &n) != 1)
		n = 0;
	pclose(p);
	return n;
}

/* qemu processes of this test run (their command line names the domain). */
static inline int count_own_qemus(const struct daemon *d)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "pgrep -fc '[q]emu-system.*guest=%s' 2>/dev/null", d->prefix);
	return (int)cmd_number(cmd);
}

/* Destroy leftovers of this run (for cleanup after a failed test). */
static inline void destroy_own_domains(const struct daemon *d)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd),
		 "for n in $(virsh -c qemu:///system list --name 2>/dev/null | grep '^%s'); do "
		 "virsh -c qemu:///system destroy $n >/dev/null 2>&1; done",
		 d->prefix);
	run_cmd(cmd);
}

/* POST /v1/sandboxes {"timeout_minutes": 10} with d's key; the new id
 * into id. 0, or -1 (the reply printed). */
static inline int daemon_create_sandbox(const struct daemon *d, char *id, size_t idlen);

/* The common setup after daemon_config*(): an account with $10, then
 * `serve`. 0 or -1. */
static inline int daemon_up(struct daemon *d)
{
	daemon_create_account(d, "10");
	return daemon_start(d);
}

/* The SDK tests' setup: a daemon on the full image with `extra` config,
 * up, and a second account `name` with `credit_usd` whose API key goes to
 * key2 (key2_len bytes). -1, said on stderr naming `who`, when the full
 * image is missing or any step fails. */
static inline int daemon_up_full_second_account(struct daemon *d, const char *who,
						const char *extra, const char *name,
						const char *credit_usd, char *key2, size_t key2_len)
{
	char args[256];
	json_object *o, *v;
	int rc = -1;

	if (daemon_config_full(d, extra) < 0) {
		fprintf(stderr, "%s: no full image (make image-full)\n", who);
		return -1;
	}
	if (daemon_up(d) < 0)
		return -1;
	snprintf(args, sizeof(args), "create-account --name %s --credit-usd %s", name, credit_usd);
	o = daemon_admin(d, args);
	if (o && json_object_object_get_ex(o, "api_key", &v)) {
		snprintf(key2, key2_len, "%s", json_object_get_string(v));
		rc = 0;
	}
	if (o)
		json_object_put(o);
	return rc;
}

/* The common teardown: stop the daemon if it runs, destroy whatever
 * domain of this run is left, and remove the run's state dir (its copy of
 * the kernel and initramfs, database, overlays: ~55 MB a run) unless
 * SBX_TEST_KEEP is set. Always 0 (cmocka's group teardown). */
static inline int daemon_down(struct daemon *d)
{
	static const char root[] = "/var/lib/sandboxd-test/";
	char cmd[512];

	if (d->pid > 0)
		daemon_stop(d);
	destroy_own_domains(d);
	if (!getenv("SBX_TEST_KEEP") && strncmp(d->state_dir, root, sizeof(root) - 1) == 0 &&
	    !strchr(d->state_dir, '\'')) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->state_dir);
		run_cmd(cmd);
	}
	return 0;
}

/* The value of header `name` (case-insensitive) in raw "Name: value\r\n"
 * lines, copied to out ("" when absent). */
static inline void header_value(const char *lines, const char *name, char *out, size_t len)
{
	size_t n = strlen(name);

	out[0] = '\0';
	for (const char *p = lines; p && *p; p = strstr(p, "\n") ? strstr(p, "\n") + 1 : NULL) {
		while (*p == '\r' || *p == '\n')
			p++;
		if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
			p += n + 1;
			while (*p == ' ')
				p++;
			snprintf(out, len, "%.*s", (int)strcspn(p, "\r\n"), p);
			return;
		}
	}
}

/* With SBX_TEST_RECORD=DIR, every exchange of http_request() is appended
 * to DIR/PID.jsonl as one JSON line: method, path (with its query),
 * request_type and request (the body when it is JSON), status, type and
 * reply (the body when it is JSON). tests/contract/check-exchanges.mjs
 * validates them against docs/openapi.yaml (docs/api.md, "How the
 * description is checked"). Other bodies (files, streams) are not kept. */
static inline void http_record(const char *method, const char *path, const char *extra_headers,
			       const char *body, size_t body_len, const struct http_reply *r)
{
	const char *dir = getenv("SBX_TEST_RECORD");
	json_object *o, *req = NULL;
	char file[512], ct[128];
	const char *line;
	FILE *f;

	if (!dir || !*dir)
		return;
	o = json_object_new_object();
	json_object_object_add(o, "method", json_object_new_string(method));
	json_object_object_add(o, "path", json_object_new_string(path));
	header_value(extra_headers, "Content-Type", ct, sizeof(ct));
	if (body && body_len) {
		struct json_tokener *tok = json_tokener_new();

		req = json_tokener_parse_ex(tok, body, (int)body_len);
		if (json_tokener_get_error(tok) != json_tokener_success ||
		    tok->char_offset != (int)body_len) {
			json_object_put(req);
			req = NULL;
		}
		json_tokener_free(tok);
		if (!ct[0])
			snprintf(ct, sizeof(ct), "%s", req ? "application/json" : "");
	}
	json_object_object_add(o, "request_type", json_object_new_string(ct));
	json_object_object_add(o, "request_bytes",
			       json_object_new_int64(body ? (int64_t)body_len : 0));
	json_object_object_add(o, "request", req);
	json_object_object_add(o, "status", json_object_new_int(r->status));
	header_value(r->headers, "Content-Type", ct, sizeof(ct));
	json_object_object_add(o, "type", json_object_new_string(ct));
	json_object_object_add(o, "reply", r->json ? json_object_get(r->json) : NULL);
	line = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	snprintf(file, sizeof(file), "%s/", dir);
	for (char *slash = strchr(file + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = '\0'; /* mkdir -p */
		mkdir(file, 0755);
		*slash = '/';
	}
	snprintf(file, sizeof(file), "%s/%d.jsonl", dir, (int)getpid());
	f = fopen(file, "a");
	if (f) {
		fprintf(f, "%s\n", line);
		fclose(f);
	}
	json_object_put(o);
}

/* One HTTP/1.1 request over a fresh TCP connection (Connection: close)
 * to the daemon, with Host: host. `auth` NULL sends no Authorization
 * header; `extra_headers` is raw "Name: value\r\n" lines or NULL. Returns
 * 0 and fills r, or -1. */
static inline int http_request_host(const struct daemon *d, const char *host, const char *method,
				    const char *path, const char *auth, const char *extra_headers,
				    const char *body, size_t body_len, struct http_reply *r)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct sbx_buf in;
	char head[2048], chunk[65536];
	int fd, n;
	char *sep;

	memset(r, 0, sizeof(*r));
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	sa.sin_port = htons((uint16_t)d->port);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	if (body && body_len == 0)
		body_len = strlen(body);
	n = snprintf(head, sizeof(head),
		     "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n%s%s%s%s"
		     "Content-Length: %zu\r\n\r\n",
		     method, path, host, auth ? "Authorization: Bearer " : "", auth ? auth : "",
		     auth ? "\r\n" : "", extra_headers ? extra_headers : "",
		     body ? body_len : (size_t)0);
	if (write(fd, head, (size_t)n) != n ||
	    (body && body_len && write(fd, body, body_len) != (ssize_t)body_len)) {
		close(fd);
		return -1;
	}
	sbx_buf_init(&in, 256u * 1024 * 1024);
	for (;;) {
		ssize_t got = read(fd, chunk, sizeof(chunk));

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		if (sbx_buf_append(&in, chunk, (size_t)got) < 0)
			break;
	}
	close(fd);
	if (!in.data || sscanf(in.data, "HTTP/1.1 %d", &r->status) != 1) {
		sbx_buf_release(&in);
		return -1;
	}
	sep = strstr(in.data, "\r\n\r\n");
	if (!sep) {
		sbx_buf_release(&in);
		return -1;
	}
	snprintf(r->headers, sizeof(r->headers), "%.*s", (int)(sep - in.data), in.data);
	r->body_len = in.len - (size_t)(sep + 4 - in.data);
	r->body = malloc(r->body_len + 1);
	memcpy(r->body, sep + 4, r->body_len);
	r->body[r->body_len] = '\0';
	sbx_buf_release(&in);
	r->json = json_tokener_parse(r->body);
	if (strcmp(host, "127.0.0.1") == 0) /* the API's, not a preview's */
		http_record(method, path, extra_headers, body, body_len, r);
	return 0;
}

/* http_request_host with Host: 127.0.0.1 (an API request). */
static inline int http_request(const struct daemon *d, const char *method, const char *path,
			       const char *auth, const char *extra_headers, const char *body,
			       size_t body_len, struct http_reply *r)
{
	return http_request_host(d, "127.0.0.1", method, path, auth, extra_headers, body, body_len,
				 r);
}

/* POST /v1/sandboxes {"timeout_minutes": minutes} as `key`: the new id
 * into id, or -1 (the reply said on stderr). */
static inline int daemon_create_sandbox_as(const struct daemon *d, const char *key, int minutes,
					   char *id, size_t idlen)
{
	struct http_reply r;
	char body[64];
	int ok;

	snprintf(body, sizeof(body), "{\"timeout_minutes\": %d}", minutes);
	if (http_request(d, "POST", "/v1/sandboxes", key, NULL, body, 0, &r) < 0)
		return -1;
	ok = r.status == 201 && r.json && json_object_object_get_ex(r.json, "id", NULL);
	if (ok)
		snprintf(id, idlen, "%s",
			 json_object_get_string(json_object_object_get(r.json, "id")));
	else
		fprintf(stderr, "create: %d %s\n", r.status, r.body);
	http_reply_free(&r);
	return ok ? 0 : -1;
}

static inline int daemon_create_sandbox(const struct daemon *d, char *id, size_t idlen)
{
	return daemon_create_sandbox_as(d, d->key, 10, id, idlen);
}

/* POST /v1/sandboxes/{id}/{route} (exec, processes) with {"command": cmd}
 * and, when timeout_ms > 0, its timeout_ms, as d's key. 0 and the reply
 * in *r (the caller frees it), or -1 when no reply came. */
static inline int sandbox_command(const struct daemon *d, const char *id, const char *route,
				  const char *cmd, int timeout_ms, struct http_reply *r)
{
	json_object *body = json_object_new_object();
	char path[192];
	int rc;

	json_object_object_add(body, "command", json_object_new_string(cmd));
	if (timeout_ms > 0)
		json_object_object_add(body, "timeout_ms", json_object_new_int(timeout_ms));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/%s", id, route);
	rc = http_request(d, "POST", path, d->key, NULL, json_object_to_json_string(body), 0, r);
	json_object_put(body);
	return rc;
}

/* A "Field: N kB" line of the daemon's /proc/PID/status (VmRSS, VmHWM), in
 * KiB, or -1. */
static inline long daemon_proc_kib(const struct daemon *d, const char *field)
{
	char path[64], line[256];
	size_t fl = strlen(field);
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)d->pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, field, fl) == 0 && line[fl] == ':')
			v = strtol(line + fl + 1, NULL, 10);
	fclose(f);
	return v;
}

/* Convenience: string / int member of the reply's JSON (NULL / -1). */
static inline const char *jstr(json_object *o, const char *key)
{
	json_object *v;

	if (!o || !json_object_object_get_ex(o, key, &v) ||
	    !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

static inline int64_t jint(json_object *o, const char *key)
{
	json_object *v;

	if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return -1;
	return json_object_get_int64(v);
}

static inline int jbool(json_object *o, const char *key)
{
	json_object *v;

	if (!o || !json_object_object_get_ex(o, key, &v) ||
	    !json_object_is_type(v, json_type_boolean))
		return -1;
	return json_object_get_boolean(v);
}

/* True when the member exists and is JSON null. */
static inline bool jis_null(json_object *o, const char *key)
{
	json_object *v = NULL;

	return o && json_object_object_get_ex(o, key, &v) && v == NULL;
}

/* error.type / error.param of an error reply (NULL when absent). */
static inline const char *jerr(json_object *o, const char *key)
{
	json_object *e;

	if (!o || !json_object_object_get_ex(o, "error", &e))
		return NULL;
	return jstr(e, key);
}

/* Write `len` bytes of `data` to `path` (created or truncated). 0 or -1. */
static inline int file_write(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "w");
	int rc = 0;

	if (!f)
		return -1;
	if (fwrite(data, 1, len, f) != len)
		rc = -1;
	if (fclose(f) != 0)
		rc = -1;
	return rc;
}

/* Keep what the caller of one execution keeps, in STATE_DIR/<sub>/ (made
 * afresh; its path into dir, PATH_MAX-ish): r.json (the 200 reply `r`),
 * `code_name` (the code as sent) and receipt.json (GET of the reply's
 * receipt.url). 0, or -1 when a step fails. */
static inline int execution_keep(struct daemon *d, const struct http_reply *r, const char *code,
				 const char *code_name, const char *sub, char *dir, size_t dir_len)
{
	struct http_reply g;
	json_object *rc;
	char path[1024];
	int ret = -1;

	snprintf(dir, dir_len, "%s/%s", d->state_dir, sub);
	snprintf(path, sizeof(path), "rm -rf '%s' && mkdir -p '%s'", dir, dir);
	if (run_cmd(path) != 0)
		return -1;
	snprintf(path, sizeof(path), "%s/r.json", dir);
	if (file_write(path, r->body, r->body_len) < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/%s", dir, code_name);
	if (file_write(path, code, strlen(code)) < 0)
		return -1;
	if (!json_object_object_get_ex(r->json, "receipt", &rc) || !jstr(rc, "url") ||
	    http_request(d, "GET", jstr(rc, "url"), d->key, NULL, NULL, 0, &g) < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/receipt.json", dir);
	if (g.status == 200 && file_write(path, g.body, g.body_len) == 0)
		ret = 0;
	http_reply_free(&g);
	return ret;
}

/* One wire frame on a vmm channel, for tests and benches that speak the
 * exec protocol themselves: `len` (<= 4096) bytes of payload p. The
 * channel's send result (0 or -1). */
static inline int chan_send_frame(struct sbx_channel *ch, uint8_t type, uint32_t id,
				  const uint8_t *p, size_t len)
{
	uint8_t frame[WIRE_HEADER_LEN + 4096];
	if (len > sizeof(frame) - WIRE_HEADER_LEN)
		return -1;
	struct wire_header h = {.type = type, .id = id, .len = (uint32_t)len};
	wire_header_encode(&h, frame);
	memcpy(frame + WIRE_HEADER_LEN, p, len);
	return ch->send(ch->ctx, frame, WIRE_HEADER_LEN + len);
}

/* WELCOME as agentless sends it (version, host time; docs/protocol.md). */
static inline int chan_send_welcome(struct sbx_channel *ch)
{
	uint8_t p[64];
	struct wire_writer w;
	wire_writer_init(&w, p, sizeof(p));
	wire_put_u32(&w, WIRE_T_VERSION, WIRE_VERSION);
	wire_put_u64(&w, WIRE_T_TIME_NS, (uint64_t)sbx_wall_ms() * 1000000u);
	return chan_send_frame(ch, WIRE_WELCOME, 0, p, w.len);
}

/* The first column of the first row of `sql` on the daemon's database,
 * read-only beside the running daemon, with ?1 bound to `arg` (NULL: no
 * parameter), as text into out ("" when no row or NULL). 0, or -1 when the
 * query cannot run. */
static inline int daemon_db_text(const struct daemon *d, const char *sql, const char *arg,
				 char *out, size_t n)
{
	sqlite3 *db;
	sqlite3_stmt *q;
	int rc = -1;

	out[0] = '\0';
	if (sqlite3_open_v2(d->db, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		sqlite3_close(db);
		return -1;
	}
	sqlite3_busy_timeout(db, 5000);
	if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK) {
		if (arg)
			sqlite3_bind_text(q, 1, arg, -1, SQLITE_TRANSIENT);
		rc = sqlite3_step(q);
		if (rc == SQLITE_ROW && sqlite3_column_text(q, 0))
			snprintf(out, n, "%s", (const char *)sqlite3_column_text(q, 0));
		rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
		sqlite3_finalize(q);
	}
	sqlite3_close(db);
	return rc;
}

/* `sandboxd admin drain|undrain HOST` (cmd "drain" or "undrain"): 1 or 0,
 * what it says of the host's drained flag, or -1 when it failed or named
 * another host. */
static inline int daemon_drain(struct daemon *d, const char *cmd, const char *host)
{
	char args[96];
	json_object *o;
	int rc = -1;

	snprintf(args, sizeof(args), "%s %s", cmd, host);
	o = daemon_admin(d, args);
	if (o && jstr(o, "host") && strcmp(jstr(o, "host"), host) == 0)
		rc = jbool(o, "drained");
	json_object_put(o);
	return rc;
}

/* store_ledger_check on the daemon's database (read alongside the running
 * daemon). 0, or -1 with err. */
static inline int daemon_ledger_check(const struct daemon *d, struct sbx_error *err)
{
	struct store *s = store_open(d->db, err);
	int rc;

	if (!s)
		return -1;
	rc = store_ledger_check(s, NULL, err);
	store_close(s);
	return rc < 0 ? -1 : 0;
}

/* GET /v1/sandboxes/ID: its "status" into buf ("" when none); the HTTP
 * status, or -1 when no answer. */
static inline int daemon_sandbox_status(const struct daemon *d, const char *id, char *buf, size_t n)
{
	struct http_reply r;
	char path[128];
	int st;

	buf[0] = '\0';
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	if (http_request(d, "GET", path, d->key, NULL, NULL, 0, &r) < 0)
		return -1;
	st = r.status;
	if (r.json && jstr(r.json, "status"))
		snprintf(buf, n, "%s", jstr(r.json, "status"));
	http_reply_free(&r);
	return st;
}

/* DELETE /v1/sandboxes/ID: the HTTP status, or -1 when no answer; the
 * reply's "status" into buf when buf is not NULL. */
static inline int daemon_delete_sandbox(const struct daemon *d, const char *id, char *buf, size_t n)
{
	struct http_reply r;
	char path[192];
	int st;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	if (http_request(d, "DELETE", path, d->key, NULL, NULL, 0, &r) < 0)
		return -1;
	st = r.status;
	if (buf)
		snprintf(buf, n, "%s",
			 r.json && jstr(r.json, "status") ? jstr(r.json, "status") : "");
	http_reply_free(&r);
	return st;
}

#endif
