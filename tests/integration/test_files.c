/* Files in and out of a sandbox (issue 15), in real guests (the tiny
 * image): a 100 MiB random file round trip checked by SHA-256, ranges, a
 * tree through tar and back (nested and empty dirs, symlinks, modes, a
 * non-UTF-8 name), ownership and modes seen by exec, list and delete,
 * concurrent uploads beside a running exec, every error of docs/api.md,
 * another account's sandbox, a full disk that leaves nothing behind, and a
 * guest that stalls a download (failed by file_stall_timeout_ms while the
 * sandbox keeps working).
 *
 * First group, the tiny image (busybox tar, files in RAM): one daemon with
 * exec_user "sandbox" (so ownership shows), a 1 vCPU / 768 MiB size,
 * max_file_bytes 128 MiB, the hostile-guest kit for the stall,
 * file_stall_timeout_ms 3000. Second group, the full image, only where it
 * differs: the tree through GNU tar, and a full ext4 root disk (exec_user
 * root, so the fill takes the reserved blocks too). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"

#define MAX_FILE (128ull * 1024 * 1024)
#define BIG	 (100u * 1024 * 1024)

static struct daemon d;
static char sbx[64], sbx_other[64], key_b[128];
/* the owner a tar upload's files get: exec_user of the running group */
static const char *owner = "sandbox";

static int create_sandbox(const char *key, char *id, size_t idlen)
{
	return daemon_create_sandbox_as(&d, key, 20, id, idlen);
}

static int setup(void **state)
{
	json_object *o, *v;

	(void)state;
	daemon_config(&d, "\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": 768, "
			  "\"disk_gib\": 1, \"price_micro_usd_per_hour\": 90000}}, "
			  "\"exec_user\": \"sandbox\", \"max_file_bytes\": 134217728, "
			  "\"file_stall_timeout_ms\": 3000, \"test_hostile_guests\": true, "
			  "\"output_budget_account_mib\": 5, "
			  "\"output_cap_bytes\": 65536, "
			  "\"http_threads\": 2, \"destroy_on_exit\": true");
	daemon_create_account(&d, "10");
	o = daemon_admin(&d, "create-account --name other --credit-usd 10");
	if (!o || !json_object_object_get_ex(o, "api_key", &v))
		return -1;
	snprintf(key_b, sizeof(key_b), "%s", json_object_get_string(v));
	json_object_put(o);
	if (daemon_start(&d) < 0)
		return -1;
	if (create_sandbox(d.key, sbx, sizeof(sbx)) < 0 ||
	    create_sandbox(key_b, sbx_other, sizeof(sbx_other)) < 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return daemon_down(&d);
}

/* ----------------------------------------------------------- helpers */

/* Percent-encode a guest path for the query (every byte outside
 * [A-Za-z0-9/._-]). */
static void qpath(const char *p, size_t len, char *out, size_t cap)
{
	size_t o = 0;

	for (size_t i = 0; i < len && o + 4 < cap; i++) {
		unsigned char c = (unsigned char)p[i];

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '/' || c == '.' || c == '_' || c == '-')
			out[o++] = (char)c;
		else
			o += (size_t)snprintf(out + o, cap - o, "%%%02X", c);
	}
	out[o] = '\0';
}

/* METHOD /v1/sandboxes/{id}/files?path=P&extra with key; body may be
 * binary (len given; NULL for none). */
static int files(const char *key, const char *id, const char *method, const char *path,
		 const char *extra_query, const char *headers, const void *body, size_t len,
		 struct http_reply *r)
{
	char url[8192], q[4096];

	qpath(path, strlen(path), q, sizeof(q));
	snprintf(url, sizeof(url), "/v1/sandboxes/%s/files?path=%s%s%s", id, q,
		 extra_query ? "&" : "", extra_query ? extra_query : "");
	return http_request(&d, method, url, key, headers, body, len, r);
}

static struct http_reply exec_cmd(const char *id, const char *cmd)
{
	struct http_reply r;
	json_object *o = json_object_new_object();
	char path[128];

	json_object_object_add(o, "command", json_object_new_string(cmd));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", id);
	assert_int_equal(
	    http_request(&d, "POST", path, d.key, NULL, json_object_to_json_string(o), 0, &r), 0);
	json_object_put(o);
	return r;
}

/* stdout of a command that must exit 0. */
static char *exec_out(const char *cmd)
{
	struct http_reply r = exec_cmd(sbx, cmd);
	char *s;

	if (r.status != 200 || jint(r.json, "exit_code") != 0)
		fprintf(stderr, "exec '%s': %d %s\n", cmd, r.status, r.body);
	assert_int_equal(r.status, 200);
	assert_int_equal(jint(r.json, "exit_code"), 0);
	s = strdup(jstr(r.json, "stdout"));
	http_reply_free(&r);
	return s;
}

static void random_bytes(void *buf, size_t len)
{
	int fd = open("/dev/urandom", O_RDONLY);
	size_t off = 0;

	assert_true(fd >= 0);
	while (off < len) {
		ssize_t n = read(fd, (char *)buf + off, len - off);

		assert_true(n > 0);
		off += (size_t)n;
	}
	close(fd);
}

/* Undo HTTP/1.1 chunked transfer coding in place (a tar stream's length
 * is not known up front). Returns the decoded length, or -1. */
static long dechunk(char *body, size_t len)
{
	size_t in = 0, out = 0;

	for (;;) {
		char *end;
		unsigned long n = strtoul(body + in, &end, 16);
		char *crlf = strstr(body + in, "\r\n");

		if (!crlf || end == body + in)
			return -1;
		in = (size_t)(crlf - body) + 2;
		if (n == 0)
			return (long)out;
		if (in + n + 2 > len)
			return -1;
		memmove(body + out, body + in, n);
		out += n;
		in += n + 2;
	}
}

static void expect_error(const struct http_reply *r, int status, const char *type,
			 const char *param)
{
	if (r->status != status)
		fprintf(stderr, "expected %d, got %d %s\n", status, r->status, r->body);
	assert_int_equal(r->status, status);
	assert_string_equal(jerr(r->json, "type"), type);
	if (param)
		assert_string_equal(jerr(r->json, "param"), param);
}

/* ------------------------------------------------------------- tests */

/* 100 MiB of random bytes up and down, the same SHA-256 on all three
 * sides (the test, the daemon's answer, the guest's sha256sum); a range. */
static void test_roundtrip_100mib(void **state)
{
	char *data = malloc(BIG), want[65], got[65], *out;
	struct http_reply r;

	(void)state;
	assert_non_null(data);
	random_bytes(data, BIG);
	sbx_sha256_hex(data, BIG, want);
	assert_int_equal(files(d.key, sbx, "PUT", "/home/sandbox/big.bin", NULL,
			       "Content-Type: application/octet-stream\r\n", data, BIG, &r),
			 0);
	if (r.status != 201)
		fprintf(stderr, "put: %d %s\n", r.status, r.body);
	assert_int_equal(r.status, 201);
	assert_string_equal(jstr(r.json, "sha256"), want);
	assert_int_equal(jint(r.json, "size"), BIG);
	assert_string_equal(jstr(r.json, "mode"), "0644");
	http_reply_free(&r);

	out = exec_out("sha256sum /home/sandbox/big.bin | cut -d' ' -f1");
	assert_memory_equal(out, want, 64);
	free(out);

	assert_int_equal(files(d.key, sbx, "GET", "/home/sandbox/big.bin", NULL, NULL, NULL, 0, &r),
			 0);
	assert_int_equal(r.status, 200);
	assert_int_equal(r.body_len, BIG);
	sbx_sha256_hex(r.body, r.body_len, got);
	assert_string_equal(got, want);
	assert_non_null(strcasestr(r.headers, "Content-Length: 104857600"));
	http_reply_free(&r);

	assert_int_equal(files(d.key, sbx, "GET", "/home/sandbox/big.bin", NULL,
			       "Range: bytes=1000-1999\r\n", NULL, 0, &r),
			 0);
	assert_int_equal(r.status, 206);
	assert_int_equal(r.body_len, 1000);
	assert_memory_equal(r.body, data + 1000, 1000);
	assert_non_null(strcasestr(r.headers, "Content-Range: bytes 1000-1999/104857600"));
	http_reply_free(&r);

	assert_int_equal(files(d.key, sbx, "GET", "/home/sandbox/big.bin", NULL,
			       "Range: bytes=104857000-\r\n", NULL, 0, &r),
			 0);
	assert_int_equal(r.status, 206);
	assert_int_equal(r.body_len, 600);
	assert_memory_equal(r.body, data + 104857000, 600);
	http_reply_free(&r);

	assert_int_equal(files(d.key, sbx, "GET", "/home/sandbox/big.bin", NULL,
			       "Range: bytes=104857600-\r\n", NULL, 0, &r),
			 0);
	expect_error(&r, 416, "range_not_satisfiable", "range");
	http_reply_free(&r);

	assert_int_equal(
	    files(d.key, sbx, "DELETE", "/home/sandbox/big.bin", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	free(data);
}

/* An upload is the exec user's, with its mode and new parents; a file
 * made by exec comes back byte for byte; an empty file too. */
static void test_owner_mode_and_exec(void **state)
{
	struct http_reply r;
	char *out;

	(void)state;
	assert_int_equal(files(d.key, sbx, "PUT", "/home/sandbox/new/deep/x.sh", "mode=0750", NULL,
			       "#!/bin/sh\necho up\n", 0, &r),
			 0);
	assert_int_equal(r.status, 201);
	assert_string_equal(jstr(r.json, "mode"), "0750");
	http_reply_free(&r);
	out = exec_out("stat -c '%U %a' /home/sandbox/new/deep/x.sh /home/sandbox/new/deep "
		       "/home/sandbox/new && /home/sandbox/new/deep/x.sh");
	assert_string_equal(out, "sandbox 750\nsandbox 755\nsandbox 755\nup\n");
	free(out);

	/* replaced atomically: the new bytes, no temporary left */
	assert_int_equal(
	    files(d.key, sbx, "PUT", "/home/sandbox/new/deep/x.sh", NULL, NULL, "second", 0, &r),
	    0);
	assert_int_equal(r.status, 201);
	assert_string_equal(jstr(r.json, "mode"), "0644");
	http_reply_free(&r);
	out = exec_out("cat /home/sandbox/new/deep/x.sh; ls -a /home/sandbox/new/deep | wc -l");
	assert_string_equal(out, "second3\n");
	free(out);

	out = exec_out("printf 'made\\000by exec' > /tmp/made.bin; : > /tmp/empty");
	free(out);
	assert_int_equal(files(d.key, sbx, "GET", "/tmp/made.bin", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_int_equal(r.body_len, 12);
	assert_memory_equal(r.body, "made\0by exec", 12);
	http_reply_free(&r);
	assert_int_equal(files(d.key, sbx, "GET", "/tmp/empty", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_int_equal(r.body_len, 0);
	http_reply_free(&r);
}

static json_object *find_entry(json_object *list, const char *name)
{
	json_object *data, *e;

	if (!json_object_object_get_ex(list, "data", &data))
		return NULL;
	for (size_t i = 0; i < json_object_array_length(data); i++) {
		e = json_object_array_get_idx(data, i);
		if (jstr(e, "name") && strcmp(jstr(e, "name"), name) == 0)
			return e;
	}
	return NULL;
}

static void test_list_and_delete(void **state)
{
	struct http_reply r;
	json_object *e;
	char *out;

	(void)state;
	out = exec_out("mkdir -p /tmp/ls/sub && printf abc > /tmp/ls/f && "
		       "chmod 0604 /tmp/ls/f && ln -s f /tmp/ls/link");
	free(out);
	assert_int_equal(files(d.key, sbx, "GET", "/tmp/ls", "list=true", NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_int_equal(jbool(r.json, "has_more"), 0);
	e = find_entry(r.json, "f");
	assert_non_null(e);
	assert_string_equal(jstr(e, "type"), "file");
	assert_int_equal(jint(e, "size"), 3);
	assert_string_equal(jstr(e, "mode"), "0604");
	assert_non_null(jstr(e, "mtime"));
	assert_string_equal(jstr(find_entry(r.json, "sub"), "type"), "dir");
	assert_string_equal(jstr(find_entry(r.json, "link"), "type"), "symlink");
	http_reply_free(&r);

	/* a non-empty directory needs recursive=true */
	assert_int_equal(files(d.key, sbx, "DELETE", "/tmp/ls", NULL, NULL, NULL, 0, &r), 0);
	expect_error(&r, 400, "invalid_request", "recursive");
	http_reply_free(&r);
	assert_int_equal(files(d.key, sbx, "DELETE", "/tmp/ls/f", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_int_equal(jbool(r.json, "deleted"), 1);
	http_reply_free(&r);
	assert_int_equal(files(d.key, sbx, "GET", "/tmp/ls/f", NULL, NULL, NULL, 0, &r), 0);
	expect_error(&r, 404, "file_not_found", "path");
	http_reply_free(&r);
	assert_int_equal(
	    files(d.key, sbx, "DELETE", "/tmp/ls", "recursive=true", NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	out = exec_out("test -e /tmp/ls && echo still || echo gone");
	assert_string_equal(out, "gone\n");
	free(out);
}

/* A tree with nested and empty dirs, a symlink, modes and a name that is
 * not UTF-8, made on the host, through tar into the guest and back. */
static void test_tar_tree(void **state)
{
	char dir[512], cmd[8192], path[600], *out;
	struct http_reply r;
	size_t len = 0;
	char *tar;
	FILE *f;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/tree", d.state_dir);
	snprintf(cmd, sizeof(cmd),
		 "set -e; rm -rf %s %s.back; mkdir -p %s/a/b/c %s/empty %s.back; cd %s; "
		 "printf 'nested' > a/b/c/deep.txt; printf 'run' > a/run.sh; chmod 0755 a/run.sh; "
		 "printf 'secret' > a/b/private; chmod 0600 a/b/private; ln -s b/c/deep.txt "
		 "a/link; printf 'latin1' > \"$(printf 'caf\\351.txt')\"; chmod 0700 empty; "
		 "tar -cf %s.tar --format=gnu --owner=4242 --group=4242 -C %s .",
		 dir, dir, dir, dir, dir, dir, dir, dir);
	assert_int_equal(run_cmd(cmd), 0);
	snprintf(path, sizeof(path), "%s.tar", dir);
	f = fopen(path, "r");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	len = (size_t)ftell(f);
	rewind(f);
	tar = malloc(len);
	assert_int_equal(fread(tar, 1, len, f), len);
	fclose(f);

	assert_int_equal(files(d.key, sbx, "PUT", "/home/sandbox/tree", NULL,
			       "Content-Type: application/x-tar\r\n", tar, len, &r),
			 0);
	if (r.status != 200)
		fprintf(stderr, "tar put: %d %s\n", r.status, r.body);
	assert_int_equal(r.status, 200);
	assert_int_equal(jint(r.json, "size"), (int64_t)len);
	http_reply_free(&r);
	free(tar);
	out =
	    exec_out("cd /home/sandbox/tree && cat a/link && stat -c '%a %U' a/run.sh a/b/private "
		     "empty && readlink a/link && printf '%s/' * | od -An -tx1 | tr -d ' \\n'");
	snprintf(cmd, sizeof(cmd), "nested755 %s\n600 %s\n700 %s\nb/c/deep.txt\n", owner, owner,
		 owner);
	if (!strstr(out, cmd))
		fprintf(stderr, "guest tree: %s\n", out);
	assert_non_null(strstr(out, cmd));
	/* "caf\xe9.txt" */
	if (!strstr(out, "636166e92e747874"))
		fprintf(stderr, "guest tree: %s\n", out);
	assert_non_null(strstr(out, "636166e92e747874"));
	free(out);

	/* and back, gzip this time: the same tree */
	assert_int_equal(files(d.key, sbx, "GET", "/home/sandbox/tree", "format=tar&gzip=true",
			       NULL, NULL, 0, &r),
			 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strcasestr(r.headers, "Content-Type: application/gzip"));
	assert_non_null(strcasestr(r.headers, "Transfer-Encoding: chunked"));
	long tlen = dechunk(r.body, r.body_len);
	assert_true(tlen > 0);
	snprintf(path, sizeof(path), "%s.back.tgz", dir);
	assert_int_equal(file_write(path, r.body, (size_t)tlen), 0);
	http_reply_free(&r);
	snprintf(cmd, sizeof(cmd),
		 "set -e; tar -xzf %s.back.tgz -C %s.back; cd %s && find . -printf '%%p %%y %%m "
		 "%%l %%s\\n' | sort > ../tree.a; cd %s.back && find . -printf '%%p %%y %%m %%l "
		 "%%s\\n' | sort > ../tree.b; cmp ../tree.a ../tree.b; diff -r --no-dereference %s "
		 "%s.back",
		 dir, dir, dir, dir, dir, dir);
	assert_int_equal(run_cmd(cmd), 0);

	/* a directory where a file is expected, and the reverse */
	assert_int_equal(files(d.key, sbx, "GET", "/home/sandbox/tree", NULL, NULL, NULL, 0, &r),
			 0);
	expect_error(&r, 400, "invalid_request", "path");
	http_reply_free(&r);
	assert_int_equal(files(d.key, sbx, "GET", "/home/sandbox/tree/a/run.sh", "format=tar", NULL,
			       NULL, 0, &r),
			 0);
	expect_error(&r, 400, "invalid_request", "path");
	http_reply_free(&r);
}

struct up {
	int n;
	char sha[65];
	int status;
	char got[65];
	size_t len;
};

static void *upload_main(void *arg)
{
	struct up *u = arg;
	char *data = malloc(u->len), path[64];
	struct http_reply r;

	random_bytes(data, u->len);
	sbx_sha256_hex(data, u->len, u->sha);
	snprintf(path, sizeof(path), "/tmp/conc-%d.bin", u->n);
	if (files(d.key, sbx, "PUT", path, NULL, NULL, data, u->len, &r) == 0) {
		u->status = r.status;
		if (jstr(r.json, "sha256"))
			snprintf(u->got, sizeof(u->got), "%s", jstr(r.json, "sha256"));
		http_reply_free(&r);
	}
	free(data);
	return NULL;
}

static void *exec_main(void *arg)
{
	struct http_reply *r = arg;

	*r = exec_cmd(sbx, "sleep 2; echo slept");
	return NULL;
}

/* Four 8 MiB uploads at once while an exec runs: all complete, in order,
 * with their own bytes. */
static void test_concurrent_uploads_and_exec(void **state)
{
	struct up u[4];
	pthread_t t[4], te;
	struct http_reply er;
	char *out;

	(void)state;
	assert_int_equal(pthread_create(&te, NULL, exec_main, &er), 0);
	for (int i = 0; i < 4; i++) {
		memset(&u[i], 0, sizeof(u[i]));
		u[i].n = i;
		u[i].len = (8u << 20) + (size_t)i * 4097;
		assert_int_equal(pthread_create(&t[i], NULL, upload_main, &u[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(u[i].status, 201);
		assert_string_equal(u[i].got, u[i].sha);
	}
	pthread_join(te, NULL);
	assert_int_equal(er.status, 200);
	assert_string_equal(jstr(er.json, "stdout"), "slept\n");
	http_reply_free(&er);
	out = exec_out("for i in 0 1 2 3; do sha256sum /tmp/conc-$i.bin | cut -c1-64; done; rm "
		       "/tmp/conc-*");
	for (int i = 0; i < 4; i++)
		assert_memory_equal(out + i * 65, u[i].sha, 64);
	free(out);
}

/* One request with a raw head (for a Content-Length with no body). */
static int raw_head(const char *head, struct http_reply *r)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	char buf[8192];
	size_t got = 0;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	memset(r, 0, sizeof(*r));
	sa.sin_port = htons((uint16_t)d.port);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    write(fd, head, strlen(head)) != (ssize_t)strlen(head))
		return -1;
	for (ssize_t n;
	     got < sizeof(buf) - 1 && (n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0;)
		got += (size_t)n;
	close(fd);
	buf[got] = '\0';
	if (sscanf(buf, "HTTP/1.1 %d", &r->status) != 1)
		return -1;
	char *b = strstr(buf, "\r\n\r\n");
	r->json = b ? json_tokener_parse(b + 4) : NULL;
	return 0;
}

static void test_errors(void **state)
{
	struct http_reply r;
	char url[256], head[1024];

	(void)state;
	/* a relative path, a NUL byte, no path */
	snprintf(url, sizeof(url), "/v1/sandboxes/%s/files?path=home/x", sbx);
	assert_int_equal(http_request(&d, "GET", url, d.key, NULL, NULL, 0, &r), 0);
	expect_error(&r, 400, "invalid_request", "path");
	http_reply_free(&r);
	snprintf(url, sizeof(url), "/v1/sandboxes/%s/files?path=/tmp/a%%00b", sbx);
	assert_int_equal(http_request(&d, "PUT", url, d.key, NULL, "x", 0, &r), 0);
	expect_error(&r, 400, "invalid_request", "path");
	http_reply_free(&r);
	snprintf(url, sizeof(url), "/v1/sandboxes/%s/files", sbx);
	assert_int_equal(http_request(&d, "GET", url, d.key, NULL, NULL, 0, &r), 0);
	expect_error(&r, 400, "invalid_request", "path");
	http_reply_free(&r);
	/* missing */
	assert_int_equal(files(d.key, sbx, "GET", "/nope/none", NULL, NULL, NULL, 0, &r), 0);
	expect_error(&r, 404, "file_not_found", "path");
	http_reply_free(&r);
	assert_int_equal(files(d.key, sbx, "GET", "/nope", "list=true", NULL, NULL, 0, &r), 0);
	expect_error(&r, 404, "file_not_found", "path");
	http_reply_free(&r);
	assert_int_equal(files(d.key, sbx, "DELETE", "/nope", NULL, NULL, NULL, 0, &r), 0);
	expect_error(&r, 404, "file_not_found", "path");
	http_reply_free(&r);
	/* a directory where a file goes, a file where a directory goes */
	assert_int_equal(files(d.key, sbx, "PUT", "/home/sandbox", NULL, NULL, "x", 0, &r), 0);
	expect_error(&r, 400, "invalid_request", "path");
	http_reply_free(&r);
	assert_int_equal(files(d.key, sbx, "PUT", "/etc/passwd/child", NULL, NULL, "x", 0, &r), 0);
	expect_error(&r, 400, "invalid_request", "path");
	http_reply_free(&r);
	/* bad mode; too large by its Content-Length (no body is read) */
	assert_int_equal(files(d.key, sbx, "PUT", "/tmp/m", "mode=999", NULL, "x", 0, &r), 0);
	expect_error(&r, 400, "invalid_request", "mode");
	http_reply_free(&r);
	snprintf(head, sizeof(head),
		 "PUT /v1/sandboxes/%s/files?path=/tmp/huge HTTP/1.1\r\nHost: x\r\n"
		 "Authorization: Bearer %s\r\nContent-Length: %llu\r\nConnection: close\r\n\r\n",
		 sbx, d.key, MAX_FILE + 1);
	assert_int_equal(raw_head(head, &r), 0);
	expect_error(&r, 413, "payload_too_large", NULL);
	http_reply_free(&r);
	/* a download larger than max_file_bytes: 413 naming Range */
	char *out = exec_out("dd if=/dev/zero of=/tmp/huge bs=1M count=1 seek=128 2>/dev/null; "
			     "echo ok");
	free(out);
	assert_int_equal(files(d.key, sbx, "GET", "/tmp/huge", NULL, NULL, NULL, 0, &r), 0);
	expect_error(&r, 413, "payload_too_large", "path");
	http_reply_free(&r);
	assert_int_equal(
	    files(d.key, sbx, "GET", "/tmp/huge", NULL, "Range: bytes=0-9\r\n", NULL, 0, &r), 0);
	assert_int_equal(r.status, 206);
	assert_int_equal(r.body_len, 10);
	http_reply_free(&r);
	out = exec_out("rm /tmp/huge; echo ok");
	free(out);
	/* what is no regular file is the caller's mistake, said as such (issue
	 * 24: it was 500 sandbox_error), and so is a /proc file whose size
	 * reads 0 (it was a silent empty 200) */
	out = exec_out("rm -f /tmp/fifo; mkfifo /tmp/fifo; echo ok");
	free(out);
	static const char *const not_regular[][2] = {
	    {"/tmp/fifo", "not a regular file: fifo"},
	    {"/dev/null", "not a regular file: character device"},
	    {"/proc/version", "pseudo-filesystems"},
	};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(not_regular); i++) {
		assert_int_equal(
		    files(d.key, sbx, "GET", not_regular[i][0], NULL, NULL, NULL, 0, &r), 0);
		expect_error(&r, 400, "invalid_request", "path");
		if (!strstr(r.body, not_regular[i][1]))
			fprintf(stderr, "%s: %s\n", not_regular[i][0], r.body);
		assert_non_null(strstr(r.body, not_regular[i][1]));
		http_reply_free(&r);
	}
	/* method */
	assert_int_equal(files(d.key, sbx, "POST", "/tmp/x", NULL, NULL, "x", 0, &r), 0);
	assert_int_equal(r.status, 405);
	http_reply_free(&r);
}

/* Another account's sandbox is 404 on every files route; a sandbox that
 * is not running answers as exec does (410). */
static void test_other_account_and_not_running(void **state)
{
	static const char *const methods[] = {"GET", "PUT", "DELETE"};
	struct http_reply r, e;
	char other[64], url[256];

	(void)state;
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(files(d.key, sbx_other, methods[i], "/tmp/x", NULL, NULL,
				       strcmp(methods[i], "PUT") == 0 ? "x" : NULL, 0, &r),
				 0);
		expect_error(&r, 404, "not_found", NULL);
		http_reply_free(&r);
		assert_int_equal(files(key_b, sbx, methods[i], "/tmp/x", "list=true", NULL,
				       strcmp(methods[i], "PUT") == 0 ? "x" : NULL, 0, &r),
				 0);
		expect_error(&r, 404, "not_found", NULL);
		http_reply_free(&r);
	}
	assert_int_equal(create_sandbox(d.key, other, sizeof(other)), 0);
	snprintf(url, sizeof(url), "/v1/sandboxes/%s", other);
	assert_int_equal(http_request(&d, "DELETE", url, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	e = exec_cmd(other, "true");
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(files(d.key, other, methods[i], "/tmp/x", NULL, NULL,
				       strcmp(methods[i], "PUT") == 0 ? "x" : NULL, 0, &r),
				 0);
		assert_int_equal(r.status, e.status);
		assert_string_equal(jerr(r.json, "type"), jerr(e.json, "type"));
		http_reply_free(&r);
	}
	assert_int_equal(e.status, 410);
	http_reply_free(&e);
}

/* A full disk (the guest's /dev/shm tmpfs, filled by exec): 507 and no
 * partial file or temporary left; the sandbox goes on. */
static void test_disk_full(void **state)
{
	size_t len = 4u << 20;
	char *data = calloc(1, len), *out;
	struct http_reply r;

	(void)state;
	out = exec_out("dd if=/dev/zero of=/dev/shm/fill bs=1M 2>/dev/null; df -k /dev/shm | tail "
		       "-1 | awk '{print $4}'");
	assert_string_equal(out, "0\n");
	free(out);
	assert_int_equal(files(d.key, sbx, "PUT", "/dev/shm/x.bin", NULL, NULL, data, len, &r), 0);
	expect_error(&r, 507, "insufficient_storage", NULL);
	http_reply_free(&r);
	out = exec_out("ls -a /dev/shm");
	assert_string_equal(out, ".\n..\nfill\n");
	free(out);
	out = exec_out("rm /dev/shm/fill; echo ok");
	free(out);
	assert_int_equal(files(d.key, sbx, "PUT", "/dev/shm/x.bin", NULL, NULL, data, len, &r), 0);
	assert_int_equal(r.status, 201);
	http_reply_free(&r);
	free(data);
}

/* A guest that stops sending a download's data: the transfer fails by
 * file_stall_timeout_ms (the body is cut short), and the sandbox still
 * answers exec and smaller requests. Runs last: the kit stays on. */
static void test_stalled_download(void **state)
{
	struct http_reply r, e;
	json_object *o = json_object_new_object(), *env = json_object_new_object();
	char url[128];
	char *out;
	int64_t t0;

	(void)state;
	out = exec_out("dd if=/dev/zero of=/tmp/stall bs=1M count=8 2>/dev/null; echo ok");
	free(out);
	json_object_object_add(env, "SBX_TEST_HOSTILE", json_object_new_string("file_stall"));
	json_object_object_add(o, "command", json_object_new_string("true"));
	json_object_object_add(o, "env", env);
	snprintf(url, sizeof(url), "/v1/sandboxes/%s/exec", sbx);
	assert_int_equal(
	    http_request(&d, "POST", url, d.key, NULL, json_object_to_json_string(o), 0, &e), 0);
	assert_int_equal(e.status, 200);
	http_reply_free(&e);
	json_object_put(o);
	t0 = sbx_mono_ms();
	assert_int_equal(files(d.key, sbx, "GET", "/tmp/stall", NULL, NULL, NULL, 0, &r), 0);
	/* the status line and length went out with the guest's META: the
	 * body stops short */
	assert_int_equal(r.status, 200);
	assert_true(r.body_len < 8u << 20);
	fprintf(stderr, "stalled download cut after %lld ms with %zu bytes\n",
		(long long)(sbx_mono_ms() - t0), r.body_len);
	http_reply_free(&r);
	e = exec_cmd(sbx, "echo alive");
	assert_int_equal(e.status, 200);
	assert_string_equal(jstr(e.json, "stdout"), "alive\n");
	http_reply_free(&e);
	assert_int_equal(files(d.key, sbx, "GET", "/tmp", "list=true", NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
}

/* A connection that sent `head` and reads nothing (a slow client). */
static int open_silent(const char *head)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	int small = 4096;

	sa.sin_port = htons((uint16_t)d.port);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	/* a small receive buffer: the download stays in the daemon */
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) < 0 ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    write(fd, head, strlen(head)) != (ssize_t)strlen(head)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* Issue 24: transfers count against the account's cap of files requests
 * in flight (an upload whose body never comes holds one), and downloads a
 * client does not read hold their ring of the account's output budget;
 * another account is served meanwhile. The default cap (8 transfers);
 * an output budget of 5 MiB. */
static void test_fair_share(void **state)
{
	char head[1024];
	int fds[8];
	struct http_reply r;
	char *out;

	(void)state;
	/* eight uploads that declared a body and send none */
	for (int i = 0; i < 8; i++) {
		snprintf(head, sizeof(head),
			 "PUT /v1/sandboxes/%s/files?path=/tmp/idle%d HTTP/1.1\r\nHost: x\r\n"
			 "Authorization: Bearer %s\r\nContent-Length: 1000\r\n\r\n",
			 sbx, i, d.key);
		fds[i] = open_silent(head);
		assert_true(fds[i] >= 0);
	}
	usleep(300 * 1000);
	assert_int_equal(files(d.key, sbx, "GET", "/tmp", "list=true", NULL, NULL, 0, &r), 0);
	expect_error(&r, 429, "rate_limited", NULL);
	assert_non_null(strstr(r.body, "file transfers"));
	assert_non_null(strcasestr(r.headers, "Retry-After: 1"));
	http_reply_free(&r);
	assert_int_equal(files(key_b, sbx_other, "GET", "/tmp", "list=true", NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	for (int i = 0; i < 8; i++)
		close(fds[i]);

	/* downloads nobody reads: two rings (2 MiB + 64 KiB each) fit in 5 MiB,
	 * a third does not */
	out = exec_out("dd if=/dev/zero of=/tmp/slow bs=1M count=16 2>/dev/null; echo ok");
	free(out);
	for (int i = 0; i < 2; i++) {
		snprintf(head, sizeof(head),
			 "GET /v1/sandboxes/%s/files?path=/tmp/slow HTTP/1.1\r\nHost: x\r\n"
			 "Authorization: Bearer %s\r\n\r\n",
			 sbx, d.key);
		for (int k = 0; k < 50; k++) { /* the uploads' slots go back as they close */
			fds[i] = open_silent(head);
			assert_true(fds[i] >= 0);
			usleep(200 * 1000);
			char peek[16] = "";
			if (recv(fds[i], peek, sizeof(peek) - 1, MSG_PEEK | MSG_DONTWAIT) > 0 &&
			    strncmp(peek, "HTTP/1.1 200", 12) == 0)
				break;
			close(fds[i]);
			fds[i] = -1;
		}
		assert_true(fds[i] >= 0);
	}
	assert_int_equal(files(d.key, sbx, "GET", "/tmp/slow", NULL, NULL, NULL, 0, &r), 0);
	expect_error(&r, 429, "rate_limited", NULL);
	assert_non_null(strstr(r.body, "output budget"));
	http_reply_free(&r);
	assert_int_equal(files(key_b, sbx_other, "GET", "/etc/hostname", NULL, NULL, NULL, 0, &r),
			 0);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	close(fds[0]);
	close(fds[1]);
	/* read or hung up, the budget comes back */
	for (int k = 0; k < 50; k++) {
		assert_int_equal(files(d.key, sbx, "GET", "/tmp/slow", NULL, "Range: bytes=0-9\r\n",
				       NULL, 0, &r),
				 0);
		if (r.status == 206)
			break;
		http_reply_free(&r);
		usleep(200 * 1000);
	}
	assert_int_equal(r.status, 206);
	http_reply_free(&r);
}

/* Issue 24: a directory is listed a page at a time, in name order, with
 * a cursor; names of control bytes (the dearest in JSON) page like any. */
static void test_list_pages(void **state)
{
	struct http_reply r;
	char cursor[600] = "", q[700], prev[300] = "";
	int total = 0, pages = 0;
	char *out;

	(void)state;
	out = exec_out("rm -rf /tmp/pg && mkdir /tmp/pg && cd /tmp/pg && i=0; while [ $i -lt 50 ]; "
		       "do touch \"n$(printf '\\001\\002')$i\"; i=$((i+1)); done; echo ok");
	free(out);
	do {
		json_object *data;

		snprintf(q, sizeof(q), "list=true&limit=7%s%s", cursor[0] ? "&cursor=" : "",
			 cursor);
		assert_int_equal(files(d.key, sbx, "GET", "/tmp/pg", q, NULL, NULL, 0, &r), 0);
		assert_int_equal(r.status, 200);
		assert_true(json_object_object_get_ex(r.json, "data", &data));
		assert_true(json_object_array_length(data) <= 7);
		for (size_t i = 0; i < json_object_array_length(data); i++) {
			const char *name = jstr(json_object_array_get_idx(data, i), "name");

			assert_true(strcmp(prev, name) < 0); /* sorted, no repeats */
			snprintf(prev, sizeof(prev), "%s", name);
			total++;
		}
		if (jbool(r.json, "has_more")) {
			assert_int_equal(json_object_array_length(data), 7);
			snprintf(cursor, sizeof(cursor), "%s", jstr(r.json, "next_cursor"));
		} else {
			assert_true(jis_null(r.json, "next_cursor"));
			cursor[0] = '\0';
		}
		http_reply_free(&r);
		pages++;
	} while (cursor[0] && pages < 20);
	assert_int_equal(total, 50);
	assert_int_equal(pages, 8);
	assert_int_equal(
	    files(d.key, sbx, "GET", "/tmp/pg", "list=true&limit=1001", NULL, NULL, 0, &r), 0);
	expect_error(&r, 400, "invalid_request", "limit");
	http_reply_free(&r);
	assert_int_equal(
	    files(d.key, sbx, "GET", "/tmp/pg", "list=true&cursor=zz", NULL, NULL, 0, &r), 0);
	expect_error(&r, 400, "invalid_request", "cursor");
	http_reply_free(&r);
}

/* ------------------------------------------------ the full image (GNU tar,
 * ext4) */

static int setup_full(void **state)
{
	(void)state;
	owner = "root";
	if (daemon_config_full(&d, "\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": 1024, "
				   "\"disk_gib\": 1, \"price_micro_usd_per_hour\": 90000}}, "
				   "\"http_threads\": 2, \"destroy_on_exit\": true") < 0) {
		fprintf(stderr, "the full image is not built (make image-full)\n");
		return -1;
	}
	daemon_create_account(&d, "10");
	if (daemon_start(&d) < 0)
		return -1;
	return create_sandbox(d.key, sbx, sizeof(sbx));
}

/* The root disk (ext4, 1 GiB) filled by exec as root (the reserved blocks
 * too): 507, no temporary left in the directory; then room again. */
static void test_full_disk_ext4(void **state)
{
	size_t len = 8u << 20;
	char *data = calloc(1, len), *out;
	struct http_reply r;

	(void)state;
	out = exec_out("mkdir -p /srv/up && fallocate -l $(( $(df -B1 --output=avail / | tail -1) "
		       "+ 0 )) /fill; sync; df -B1 --output=avail / | tail -1 | tr -d ' '");
	fprintf(stderr, "free after the fill: %s", out);
	free(out);
	assert_int_equal(files(d.key, sbx, "PUT", "/srv/up/x.bin", NULL, NULL, data, len, &r), 0);
	expect_error(&r, 507, "insufficient_storage", NULL);
	http_reply_free(&r);
	out = exec_out("ls -a /srv/up");
	assert_string_equal(out, ".\n..\n");
	free(out);
	out = exec_out("rm /fill; echo ok");
	free(out);
	assert_int_equal(files(d.key, sbx, "PUT", "/srv/up/x.bin", NULL, NULL, data, len, &r), 0);
	assert_int_equal(r.status, 201);
	http_reply_free(&r);
	free(data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_roundtrip_100mib),
	    cmocka_unit_test(test_owner_mode_and_exec),
	    cmocka_unit_test(test_list_and_delete),
	    cmocka_unit_test(test_tar_tree),
	    cmocka_unit_test(test_concurrent_uploads_and_exec),
	    cmocka_unit_test(test_errors),
	    cmocka_unit_test(test_other_account_and_not_running),
	    cmocka_unit_test(test_disk_full),
	    cmocka_unit_test(test_stalled_download),
	    cmocka_unit_test(test_fair_share),
	    cmocka_unit_test(test_list_pages),
	};

	const struct CMUnitTest full_tests[] = {
	    cmocka_unit_test(test_tar_tree),
	    cmocka_unit_test(test_full_disk_ext4),
	};
	if (getenv("SBX_TEST_FILTER"))
		cmocka_set_test_filter(getenv("SBX_TEST_FILTER"));
	int failed = cmocka_run_group_tests_name("tiny image", tests, setup, teardown);

	/* the full image only where it matters: GNU tar, a real ext4 disk */
	return failed + cmocka_run_group_tests_name("full image", full_tests, setup_full, teardown);
}
