/* sbx cp: files in and out of a sandbox through the files API
 * (docs/api.md "Files"). Bytes stream both ways (libcurl reads the upload
 * from the file and writes the download to it): sbx holds no whole file.
 * A local directory goes up as a tar stream made by the system's `tar`;
 * a remote directory comes down as one and is unpacked by it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>

#include "sbx.h"

static const char cp_help[] =
    "usage: sbx cp LOCAL ID:/abs/path      upload a file, or a directory (as tar)\n"
    "       sbx cp ID:/abs/path LOCAL      download a file, or a directory (as tar)\n"
    "  --mode OCTAL   mode of an uploaded file (default: the local file's;\n"
    "                 0644 from stdin)\n"
    "LOCAL '-' is stdin (upload: its bytes become the remote file) or stdout\n"
    "(download: the file's bytes, or a remote directory as a tar stream).\n"
    "As with cp(1), a file copied onto an existing directory lands inside it\n"
    "under its own name. A directory's contents are copied into the target\n"
    "directory, which is created.\n"
    "Exit: 0 ok, 1 API error, 2 usage or a local file problem, 3 unreachable,\n"
    "4 auth, 5 not found (the sandbox or the remote path), 6 retry later.\n";

/* The last component of a path ("" for "/"). */
static const char *base_name(const char *p)
{
	size_t n = strlen(p);

	while (n > 1 && p[n - 1] == '/')
		n--;
	while (n > 0 && p[n - 1] != '/')
		n--;
	return p + n;
}

/* "ID:/path" -> id and path; false when `s` is not one. */
static bool remote_split(const char *s, char id[64], const char **path)
{
	const char *colon = strchr(s, ':');

	if (!colon || colon == s || (size_t)(colon - s) >= 64 || colon[1] != '/')
		return false;
	snprintf(id, 64, "%.*s", (int)(colon - s), s);
	if (!cli_id_ok(id))
		return false;
	*path = colon + 1;
	return true;
}

/* "/v1/sandboxes/ID/files?path=ESCAPED" + extra into out. -1 on ENOMEM. */
static int files_url(const char *id, const char *path, const char *extra, char *out, size_t len)
{
	char *esc = curl_easy_escape(NULL, path, 0);

	if (!esc)
		return -1;
	snprintf(out, len, "/v1/sandboxes/%s/files?path=%s%s", id, esc, extra ? extra : "");
	curl_free(esc);
	return 0;
}

/* Print what sbx did, or the JSON with --json; the exit code. */
static int done(struct cli *c, struct cli_reply *r, const char *what)
{
	int rc = 0;

	if (r->status < 200 || r->status >= 300)
		rc = cli_fail(c, r);
	else if (c->json && r->json)
		cli_print_json(r->json);
	else if (!c->json)
		fprintf(stderr, "%s\n", what);
	cli_reply_free(r);
	return rc;
}

/* Is the remote path a directory? (A download of one is refused with 400
 * naming it; ask the listing instead of parsing messages.) 1, 0, or -1
 * with the exit code in *rc. */
static int remote_is_dir(struct cli *c, const char *id, const char *path, int *rc)
{
	struct cli_reply r;
	char url[8192];

	if (files_url(id, path, "&list=true", url, sizeof url) < 0)
		return *rc = CLI_EXIT_USAGE, -1;
	if ((*rc = cli_call(c, "GET", url, NULL, NULL, NULL, &r)) != 0)
		return -1;
	if (r.status == 200) {
		cli_reply_free(&r);
		return 1;
	}
	cli_reply_free(&r);
	return 0; /* not a directory (or missing: the download says so) */
}

/* `sbx cp - ID:/path`: stdin's bytes, sent chunked as they are read. */
static int upload_stdin(struct cli *c, const char *id, const char *path, const char *mode)
{
	struct cli_stream s = {.upload = stdin, .upload_size = -1};
	struct cli_reply r;
	char url[8192], extra[32], what[8400];
	int rc = 0, is_dir = remote_is_dir(c, id, path, &rc);

	if (is_dir < 0)
		return rc;
	if (is_dir)
		return cli_usage(c, "'%s' is a directory; stdin needs the remote file's own path",
				 path);
	snprintf(extra, sizeof extra, "&mode=%s", mode ? mode : "0644");
	if (files_url(id, path, extra, url, sizeof url) < 0)
		return CLI_EXIT_USAGE;
	if ((rc = cli_call_stream(c, "PUT", url, NULL, &s, "uploading", &r)))
		return rc;
	if (ferror(stdin)) {
		fprintf(stderr, "sbx: cannot read stdin\n");
		cli_reply_free(&r);
		return CLI_EXIT_USAGE;
	}
	snprintf(what, sizeof what, "copied stdin to %s:%s (%lld bytes)", id, path,
		 (long long)cli_int(r.json, "size"));
	return done(c, &r, what);
}

/* `sbx cp ID:/path -`: the file's bytes, or a directory's tar stream, on
 * stdout. */
static int download_stdout(struct cli *c, const char *id, const char *path)
{
	struct cli_stream s = {.download = stdout};
	struct cli_reply r;
	char url[8192], what[8400];
	int rc = 0, dir = remote_is_dir(c, id, path, &rc);

	if (dir < 0)
		return rc;
	if (files_url(id, path, dir ? "&format=tar" : NULL, url, sizeof url) < 0)
		return CLI_EXIT_USAGE;
	if ((rc = cli_call_stream(c, "GET", url, NULL, &s, "downloading", &r)))
		return rc;
	if (fflush(stdout) != 0) {
		fprintf(stderr, "sbx: cannot write stdout: %s\n", strerror(errno));
		cli_reply_free(&r);
		return CLI_EXIT_USAGE;
	}
	snprintf(what, sizeof what, "copied %s%s:%s to stdout", dir ? "directory " : "", id, path);
	return done(c, &r, what);
}

static int upload(struct cli *c, const char *local, const char *id, const char *path,
		  const char *mode)
{
	struct cli_stream s = {.upload_size = -1};
	struct cli_reply r;
	struct stat st;
	char url[8192], extra[32] = "", cmd[8192], what[8400], target[4096];
	int rc = 0;

	if (strcmp(local, "-") == 0)
		return upload_stdin(c, id, path, mode);
	if (stat(local, &st) < 0) {
		fprintf(stderr, "sbx: %s: %s\n", local, strerror(errno));
		return CLI_EXIT_USAGE;
	}
	if (!S_ISDIR(st.st_mode)) {
		/* onto an existing remote directory: inside it, under the file's
		 * own name (cp(1)) */
		int is_dir = remote_is_dir(c, id, path, &rc);

		if (is_dir < 0)
			return rc;
		if (is_dir) {
			size_t n = strlen(path);

			snprintf(target, sizeof target, "%s%s%s", path,
				 n && path[n - 1] == '/' ? "" : "/", base_name(local));
			path = target;
		}
	}
	if (S_ISDIR(st.st_mode)) {
		/* the directory's contents into PATH: a tar stream from tar */
		char *q = NULL;
		size_t ql = 0;
		FILE *m = open_memstream(&q, &ql);

		if (!m)
			return CLI_EXIT_USAGE;
		fputs("tar -C '", m);
		for (const char *p = local; *p; p++)
			*p == '\'' ? fputs("'\\''", m) : fputc(*p, m);
		fputs("' -cf - .", m);
		fclose(m);
		snprintf(cmd, sizeof cmd, "%s", q);
		free(q);
		s.upload = popen(cmd, "r");
		s.content_type = "application/x-tar";
		snprintf(what, sizeof what, "copied directory %s to %s:%s", local, id, path);
	} else {
		s.upload = fopen(local, "rb");
		s.upload_size = (long long)st.st_size;
		snprintf(extra, sizeof extra, "&mode=%s", mode ? mode : "");
		if (!mode)
			snprintf(extra, sizeof extra, "&mode=%04o", (unsigned)(st.st_mode & 07777));
		snprintf(what, sizeof what, "copied %s to %s:%s (%lld bytes)", local, id, path,
			 (long long)st.st_size);
	}
	if (!s.upload) {
		fprintf(stderr, "sbx: %s: %s\n", local, strerror(errno));
		return CLI_EXIT_USAGE;
	}
	if (files_url(id, path, extra, url, sizeof url) < 0) {
		S_ISDIR(st.st_mode) ? pclose(s.upload) : fclose(s.upload);
		return CLI_EXIT_USAGE;
	}
	rc = cli_call_stream(c, "PUT", url, NULL, &s, "uploading", &r);
	if (S_ISDIR(st.st_mode)) {
		if (pclose(s.upload) != 0 && rc == 0 && r.status < 300) {
			fprintf(stderr, "sbx: tar could not read %s\n", local);
			cli_reply_free(&r);
			return CLI_EXIT_USAGE;
		}
	} else {
		fclose(s.upload);
	}
	return rc ? rc : done(c, &r, what);
}

static int download(struct cli *c, const char *id, const char *path, const char *local)
{
	struct cli_stream s = {0};
	struct cli_reply r;
	char url[8192], what[8400], target[4096], *tmp = NULL;
	int rc = 0, dir;

	if (strcmp(local, "-") == 0)
		return download_stdout(c, id, path);
	if ((dir = remote_is_dir(c, id, path, &rc)) < 0)
		return rc;
	if (dir) {
		/* unpack the directory's tar stream into LOCAL */
		char *q = NULL;
		size_t ql = 0;
		FILE *m;

		if (mkdir(local, 0777) < 0 && errno != EEXIST) {
			fprintf(stderr, "sbx: %s: %s\n", local, strerror(errno));
			return CLI_EXIT_USAGE;
		}
		m = open_memstream(&q, &ql);
		if (!m)
			return CLI_EXIT_USAGE;
		fputs("tar -C '", m);
		for (const char *p = local; *p; p++)
			*p == '\'' ? fputs("'\\''", m) : fputc(*p, m);
		fputs("' -xf -", m);
		fclose(m);
		s.download = popen(q, "w");
		free(q);
		if (files_url(id, path, "&format=tar", url, sizeof url) < 0)
			return CLI_EXIT_USAGE;
		snprintf(what, sizeof what, "copied directory %s:%s to %s", id, path, local);
	} else {
		/* onto an existing local directory: inside it, under the remote
		 * file's own name (cp(1)) */
		struct stat lst;

		if (stat(local, &lst) == 0 && S_ISDIR(lst.st_mode)) {
			size_t n = strlen(local);

			snprintf(target, sizeof target, "%s%s%s", local,
				 n && local[n - 1] == '/' ? "" : "/", base_name(path));
			local = target;
		}
		/* into a temporary name beside LOCAL, renamed at the end: a failed
		 * download leaves nothing half-written */
		if (asprintf(&tmp, "%s.sbx-partial", local) < 0)
			return CLI_EXIT_USAGE;
		s.download = fopen(tmp, "wb");
		if (files_url(id, path, NULL, url, sizeof url) < 0) {
			free(tmp);
			return CLI_EXIT_USAGE;
		}
		snprintf(what, sizeof what, "copied %s:%s to %s", id, path, local);
	}
	if (!s.download) {
		fprintf(stderr, "sbx: %s: %s\n", local, strerror(errno));
		free(tmp);
		return CLI_EXIT_USAGE;
	}
	rc = cli_call_stream(c, "GET", url, NULL, &s, "downloading", &r);
	if (dir) {
		if (pclose(s.download) != 0 && rc == 0 && r.status < 300) {
			fprintf(stderr, "sbx: tar could not unpack into %s\n", local);
			cli_reply_free(&r);
			return CLI_EXIT_USAGE;
		}
	} else {
		bool ok = fclose(s.download) == 0 && rc == 0 && r.status >= 200 && r.status < 300;

		if (ok && rename(tmp, local) < 0) {
			fprintf(stderr, "sbx: %s: %s\n", local, strerror(errno));
			ok = false;
			rc = rc ? rc : CLI_EXIT_USAGE;
		}
		if (!ok)
			unlink(tmp);
		free(tmp);
	}
	return rc ? rc : done(c, &r, what);
}

int cmd_cp(struct cli *c, int argc, char **argv)
{
	struct cli_opt opts[] = {{.name = "mode", .arg = true}, {0}};
	const char *pos[2], *path, *mode;
	char id[64];
	int npos = 0, rc;

	if ((rc = cli_begin(c, argc, argv, opts, pos, 2, &npos, NULL, NULL, cp_help)) >= 0)
		return rc;
	if (npos != 2)
		return cli_usage(c, "give a source and a destination");
	mode = cli_opt_get(opts, "mode")->set ? cli_opt_get(opts, "mode")->value : NULL;
	if (mode && (strspn(mode, "01234567") != strlen(mode) || !*mode || strlen(mode) > 5))
		return cli_usage(c, "--mode takes octal digits, like 0644");
	if (remote_split(pos[1], id, &path) &&
	    !remote_split(pos[0], (char[64]){0}, &(const char *){0}))
		return upload(c, pos[0], id, path, mode);
	if (remote_split(pos[0], id, &path) &&
	    !remote_split(pos[1], (char[64]){0}, &(const char *){0}))
		return download(c, id, path, pos[1]);
	return cli_usage(c, "exactly one side is ID:/absolute/path");
}
