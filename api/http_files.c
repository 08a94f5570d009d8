/* api/http_files.c: GET/PUT/DELETE /v1/sandboxes/{id}/files (docs/api.md
 * "Files"). See api-priv.h ("files") for the streaming and the locking. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "http-priv.h"

#define MOD	      "api"
#define FILE_PATH_MAX 4096

enum fkind { FK_PUT, FK_TAR_PUT, FK_GET, FK_TAR_GET, FK_LIST, FK_DELETE };

struct api_files_ctx {
	struct sandbox_svc *svc;
	const struct sandbox_config *cfg;
	pthread_mutex_t lock;
	bool stopping;
	struct api_files *parked;
};

struct api_files {
	struct api_files_ctx *ctx;
	struct MHD_Connection *conn;
	enum fkind kind;
	struct sandbox_file *f;
	char path[FILE_PATH_MAX];

	/* ctx->lock */
	bool parked, woke;
	struct api_files *prev, *next;

	/* upload */
	uint64_t received;
	bool drop; /* failed: read and drop the rest of the body, then answer err */
	struct sbx_error err;
	bool ended;
	EVP_MD_CTX *md;

	/* the minimum-progress rule: bytes moved since win_start_ms */
	int64_t win_start_ms;
	uint64_t win_bytes;

	/* LIST: the page's cursor (a name's raw bytes), "" for the first */
	char after[256];

	/* download */
	bool gzip; /* TAR_GET */
	bool ranged;
	uint64_t range_start, range_len;
	bool cut; /* the body was cut short: said once, MHD may ask again */
};

/* ---------------------------------------------------------------- replies */

static enum MHD_Result reply_stopping(struct MHD_Connection *c)
{
	struct sbx_error e;

	sbx_error_clear(&e);
	sbx_error_set(&e, SBX_E_SERVICE_UNAVAILABLE, NULL,
		      "the service is shutting down; retry on the restarted service");
	e.retry_after_s = 5;
	return api_reply_error(c, &e);
}

/* ------------------------------------------------------------ parking */

static void parked_unlink_locked(struct api_files_ctx *ctx, struct api_files *fr)
{
	if (fr->prev)
		fr->prev->next = fr->next;
	else if (ctx->parked == fr)
		ctx->parked = fr->next;
	if (fr->next)
		fr->next->prev = fr->prev;
	fr->prev = fr->next = NULL;
	fr->parked = false;
}

/* The transfer moved on (any thread, no lock held). */
static void files_wake(void *opaque)
{
	struct api_files *fr = opaque;
	struct api_files_ctx *ctx = fr->ctx;

	pthread_mutex_lock(&ctx->lock);
	fr->woke = true;
	if (fr->parked) {
		parked_unlink_locked(ctx, fr);
		MHD_resume_connection(fr->conn);
	}
	pthread_mutex_unlock(&ctx->lock);
}

/* Suspend the connection until the next wake and return true; or, when a
 * wake came since the last look (or the server stops), return false: the
 * caller looks again at once. libmicrohttpd must never be left with
 * unread upload data and a connection that is not suspended (it would not
 * call again until the client sends more). On MHD's thread. */
static bool park(struct api_files *fr)
{
	struct api_files_ctx *ctx = fr->ctx;

	pthread_mutex_lock(&ctx->lock);
	if (fr->woke || ctx->stopping) {
		fr->woke = false;
		pthread_mutex_unlock(&ctx->lock);
		return false;
	}
	MHD_suspend_connection(fr->conn);
	fr->parked = true;
	fr->next = ctx->parked;
	if (fr->next)
		fr->next->prev = fr;
	ctx->parked = fr;
	pthread_mutex_unlock(&ctx->lock);
	return true;
}

static bool stopping(struct api_files *fr)
{
	bool s;

	pthread_mutex_lock(&fr->ctx->lock);
	s = fr->ctx->stopping;
	pthread_mutex_unlock(&fr->ctx->lock);
	return s;
}

/* The minimum-progress rule (docs/api.md "Fair share"): n more bytes
 * moved. False when the transfer moved fewer than SANDBOX_FILE_MIN_PROGRESS
 * bytes in the last file_stall_timeout_ms: a guest that trickles a
 * download, or a client that trickles an upload or reads a download that
 * slowly, holds a connection and a slot for nothing. */
static bool progress_ok(struct api_files *fr, size_t n)
{
	int64_t now = sbx_mono_ms();

	fr->win_bytes += n;
	if (now - fr->win_start_ms < (int64_t)fr->ctx->cfg->file_stall_timeout_ms)
		return true;
	if (fr->win_bytes < SANDBOX_FILE_MIN_PROGRESS)
		return false;
	fr->win_start_ms = now;
	fr->win_bytes = 0;
	return true;
}

/* ------------------------------------------------------------- the query */

/* The query value of `key` with its length (so a %00 inside shows). */
static const char *query_n(struct MHD_Connection *c, const char *key, size_t *len)
{
	const char *v = NULL;

	if (MHD_lookup_connection_value_n(c, MHD_GET_ARGUMENT_KIND, key, strlen(key), &v, len) !=
	    MHD_YES)
		return NULL;
	return v;
}

/* "true"/"false" (absent = false). -1 when neither. */
static int query_bool(struct MHD_Connection *c, const char *key, bool *out)
{
	size_t n;
	const char *v = query_n(c, key, &n);

	*out = false;
	if (!v)
		return 0;
	if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
		*out = true;
	else if (strcmp(v, "false") != 0 && strcmp(v, "0") != 0)
		return -1;
	return 0;
}

static bool media_type_is(const char *ct, const char *type)
{
	size_t n = strlen(type);

	if (!ct)
		return false;
	while (*ct == ' ' || *ct == '\t')
		ct++;
	if (strncasecmp(ct, type, n) != 0)
		return false;
	ct += n;
	while (*ct == ' ' || *ct == '\t')
		ct++;
	return *ct == '\0' || *ct == ';';
}

/* "bytes=A-B" or "bytes=A-" (one range). 0, 1 when absent, -1 when bad. */
static int parse_range(const char *h, uint64_t *start, uint64_t *len)
{
	char *end;
	unsigned long long a, b;

	if (!h)
		return 1;
	if (strncmp(h, "bytes=", 6) != 0 || h[6] < '0' || h[6] > '9')
		return -1;
	errno = 0;
	a = strtoull(h + 6, &end, 10);
	if (errno || *end != '-')
		return -1;
	if (end[1] == '\0') {
		*start = a;
		*len = 0;
		return 0;
	}
	if (end[1] < '0' || end[1] > '9')
		return -1;
	b = strtoull(end + 1, &end, 10);
	if (errno || *end || b < a)
		return -1;
	*start = a;
	*len = b - a + 1;
	return 0;
}

/* LIST's limit (1..SANDBOX_FILE_PAGE_MAX, default the most) and cursor
 * (the hex of the last name of the previous page) into req. 0 or -1. */
static int list_parse(struct api_files *fr, struct sandbox_file_req *req, struct sbx_error *err)
{
	size_t n;
	const char *v = query_n(fr->conn, "limit", &n);

	req->list_limit = SANDBOX_FILE_PAGE_MAX;
	if (v) {
		char *end;
		unsigned long l;

		errno = 0;
		l = strtoul(v, &end, 10);
		if (n == 0 || *end || errno || v[0] < '0' || v[0] > '9' || l < 1 ||
		    l > SANDBOX_FILE_PAGE_MAX)
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "limit",
					     "limit must be 1..%d", SANDBOX_FILE_PAGE_MAX);
		req->list_limit = (uint32_t)l;
	}
	v = query_n(fr->conn, "cursor", &n);
	if (!v)
		return 0;
	if (n == 0 || n % 2 || n / 2 >= sizeof(fr->after))
		goto bad;
	for (size_t i = 0; i < n / 2; i++) {
		unsigned b;

		if (sscanf(v + 2 * i, "%2x", &b) != 1 || !strchr("0123456789abcdef", v[2 * i]) ||
		    !strchr("0123456789abcdef", v[2 * i + 1]) || b == 0 || b == '/')
			goto bad;
		fr->after[i] = (char)b;
	}
	fr->after[n / 2] = '\0';
	req->list_after = fr->after;
	return 0;
bad:
	return sbx_error_set(err, SBX_E_INVALID_REQUEST, "cursor",
			     "cursor must be a list's next_cursor, as it was given");
}

/* Validate the query into req/fr. 0, or -1 with err. */
static int request_parse(struct api_files *fr, const char *method, struct sandbox_file_req *req,
			 struct sbx_error *err)
{
	struct MHD_Connection *c = fr->conn;
	size_t plen = 0, n;
	const char *path = query_n(c, "path", &plen), *v;
	bool list, tar, gzip, recursive;

	if (!path || plen == 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "path",
				     "path is required: ?path=/absolute/path");
	if (path[0] != '/' || memchr(path, '\0', plen) || plen >= FILE_PATH_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "path",
				     "path must be an absolute path without NUL bytes, shorter "
				     "than %d bytes",
				     FILE_PATH_MAX);
	memcpy(fr->path, path, plen + 1);
	if (query_bool(c, "list", &list) < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "list",
				     "list must be true or false");
	if (query_bool(c, "gzip", &gzip) < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "gzip",
				     "gzip must be true or false");
	if (query_bool(c, "recursive", &recursive) < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "recursive",
				     "recursive must be true or false");
	v = query_n(c, "format", &n);
	if (v && strcmp(v, "tar") != 0 && strcmp(v, "raw") != 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "format",
				     "format must be 'raw' or 'tar'");
	tar = v && strcmp(v, "tar") == 0;

	memset(req, 0, sizeof(*req));
	req->path = fr->path;
	req->max_bytes = fr->ctx->cfg->max_file_bytes;
	if (strcmp(method, "DELETE") == 0) {
		fr->kind = FK_DELETE;
		req->op = SANDBOX_FILE_DELETE;
		req->recursive = recursive;
		return 0;
	}
	if (strcmp(method, "GET") == 0) {
		if (list) {
			fr->kind = FK_LIST;
			req->op = SANDBOX_FILE_LIST;
			return list_parse(fr, req, err);
		}
		fr->kind = tar ? FK_TAR_GET : FK_GET;
		req->op = tar ? SANDBOX_FILE_TAR_GET : SANDBOX_FILE_GET;
		req->gzip = tar && gzip;
		fr->gzip = req->gzip;
		if (!tar) {
			const char *h =
			    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_RANGE);
			int rc = parse_range(h, &fr->range_start, &fr->range_len);

			if (rc < 0)
				return sbx_error_set(err, SBX_E_RANGE_NOT_SATISFIABLE, "range",
						     "Range must be 'bytes=START-END' or "
						     "'bytes=START-' (one range)");
			fr->ranged = rc == 0;
			req->offset = fr->range_start;
			req->length = fr->range_len;
		}
		return 0;
	}
	/* PUT */
	const char *ct =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
	bool ct_tar = media_type_is(ct, "application/x-tar");
	bool ct_gz =
	    media_type_is(ct, "application/gzip") || media_type_is(ct, "application/x-gzip");

	fr->kind = ct_tar || ct_gz ? FK_TAR_PUT : FK_PUT;
	req->op = fr->kind == FK_TAR_PUT ? SANDBOX_FILE_TAR_PUT : SANDBOX_FILE_PUT;
	req->gzip = ct_gz || (ct_tar && gzip);
	req->mode = 0644;
	v = query_n(c, "mode", &n);
	if (v) {
		char *end;
		unsigned long m;

		errno = 0;
		m = strtoul(v, &end, 8);
		if (fr->kind == FK_TAR_PUT || n == 0 || n > 5 || *end || errno || m > 07777 ||
		    v[0] < '0' || v[0] > '7')
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "mode",
					     "mode must be octal permission bits like 0644 (files "
					     "only; a tar carries its own modes)");
		req->mode = (uint32_t)m;
	}
	v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (v) {
		char *end;
		unsigned long long len;

		errno = 0;
		len = strtoull(v, &end, 10);
		if (errno == ERANGE || (end != v && len > fr->ctx->cfg->max_file_bytes))
			return sbx_error_set(err, SBX_E_PAYLOAD_TOO_LARGE, NULL,
					     "the file is larger than max_file_bytes (%llu bytes)",
					     (unsigned long long)fr->ctx->cfg->max_file_bytes);
	}
	fr->md = EVP_MD_CTX_new();
	if (!fr->md || EVP_DigestInit_ex(fr->md, EVP_sha256(), NULL) != 1)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	return 0;
}

/* ------------------------------------------------------------- answers */

static const char *type_name(enum sandbox_file_type t)
{
	switch (t) {
	case SANDBOX_FTYPE_FILE:
		return "file";
	case SANDBOX_FTYPE_DIR:
		return "dir";
	case SANDBOX_FTYPE_SYMLINK:
		return "symlink";
	default:
		return "other";
	}
}

static struct json_object *mode_string(uint32_t mode)
{
	char m[8];

	snprintf(m, sizeof(m), "%04o", mode & 07777);
	return json_object_new_string(m);
}

/* A guest path as JSON text (bytes that are not UTF-8 become U+FFFD). */
static struct json_object *path_string(const char *p)
{
	size_t n = 0;
	char *s = sbx_utf8_sanitize(p, strlen(p), false, &n);
	struct json_object *o = s ? json_object_new_string_len(s, (int)n) : NULL;

	free(s);
	return o;
}

static enum MHD_Result answer_put(struct api_files *fr, const struct sandbox_file_status *st)
{
	struct json_object *o = json_object_new_object();
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	char hex[2 * EVP_MAX_MD_SIZE + 1];

	EVP_DigestFinal_ex(fr->md, md, &mdlen);
	sbx_hex(md, mdlen, hex);
	json_object_object_add(o, "object",
			       json_object_new_string(fr->kind == FK_PUT ? "file" : "tree"));
	json_object_object_add(o, "path", path_string(fr->path));
	json_object_object_add(o, "size", json_object_new_int64((int64_t)st->done_size));
	if (fr->kind == FK_PUT)
		json_object_object_add(o, "mode", mode_string(st->done_mode));
	json_object_object_add(o, "sha256", json_object_new_string(hex));
	return api_reply_json(fr->conn, fr->kind == FK_PUT ? 201 : 200, o, 0, NULL);
}

static enum MHD_Result answer_list(struct api_files *fr, const struct sandbox_file_status *st)
{
	struct json_object *o = json_object_new_object(), *data = json_object_new_array();
	const struct agentless_file_entry *e;
	size_t n = 0;

	e = sandbox_file_entries(fr->f, &n);
	for (size_t i = 0; i < n; i++) {
		struct json_object *j = json_object_new_object();
		char ts[32];

		sbx_rfc3339((int64_t)SBX_MIN(e[i].mtime_s, (uint64_t)INT64_MAX / 1000) * 1000, ts);
		json_object_object_add(j, "name", path_string(e[i].name));
		json_object_object_add(j, "type", json_object_new_string(type_name(e[i].type)));
		json_object_object_add(j, "size", json_object_new_int64((int64_t)e[i].size));
		json_object_object_add(j, "mode", mode_string(e[i].mode));
		json_object_object_add(j, "mtime", json_object_new_string(ts));
		json_object_array_add(data, j);
	}
	json_object_object_add(o, "object", json_object_new_string("list"));
	json_object_object_add(o, "path", path_string(fr->path));
	json_object_object_add(o, "data", data);
	json_object_object_add(o, "has_more", json_object_new_boolean(st->truncated && n > 0));
	if (st->truncated && n > 0) {
		size_t len = strlen(e[n - 1].name);
		char *hex = malloc(2 * len + 1);

		if (hex)
			sbx_hex((const unsigned char *)e[n - 1].name, len, hex);
		json_object_object_add(o, "next_cursor", hex ? json_object_new_string(hex) : NULL);
		free(hex);
	} else {
		json_object_object_add(o, "next_cursor", NULL);
	}
	return api_reply_json(fr->conn, 200, o, 0, NULL);
}

static enum MHD_Result answer_delete(struct api_files *fr)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "object", json_object_new_string("file"));
	json_object_object_add(o, "path", path_string(fr->path));
	json_object_object_add(o, "deleted", json_object_new_boolean(true));
	return api_reply_json(fr->conn, 200, o, 0, NULL);
}

/* The download's body, pulled by MHD as the client reads. */
static ssize_t download_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct api_files *fr = cls;
	struct sandbox_file_status st;
	size_t n;

	(void)pos;
	if (fr->cut)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	for (;;) {
		n = sandbox_file_read(fr->f, buf, max);
		if (!progress_ok(fr, n)) {
			sbx_warn(MOD, "download cut short: fewer than %u bytes in %u ms",
				 SANDBOX_FILE_MIN_PROGRESS, fr->ctx->cfg->file_stall_timeout_ms);
			fr->cut = true;
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		if (n > 0)
			return (ssize_t)n;
		sandbox_file_status(fr->f, &st);
		if (st.buffered > 0) /* raced with a frame: take it now */
			continue;
		if (st.state == SANDBOX_FILE_DONE)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (st.state == SANDBOX_FILE_FAILED || stopping(fr)) {
			/* the status line went out already: cut the body
			 * short, the client sees a truncated transfer */
			sbx_warn(MOD, "download cut short: %s",
				 st.state == SANDBOX_FILE_FAILED ? st.err.message
								 : "shutting down");
			fr->cut = true;
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		if (park(fr))
			return 0; /* resumed by the next wake */
	}
}

static enum MHD_Result answer_download(struct api_files *fr, const struct sandbox_file_status *st)
{
	bool tar = fr->kind == FK_TAR_GET;
	struct MHD_Response *resp;
	enum MHD_Result ret;
	char h[96];
	unsigned status = 200;

	fr->win_start_ms = sbx_mono_ms(); /* the body's window starts */
	fr->win_bytes = 0;
	resp = MHD_create_response_from_callback(tar ? MHD_SIZE_UNKNOWN : st->size, 64 * 1024,
						 download_read, fr, NULL);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				tar ? (fr->gzip ? "application/gzip" : "application/x-tar")
				    : "application/octet-stream");
	snprintf(h, sizeof(h), "%04o", st->mode & 07777);
	MHD_add_response_header(resp, "X-File-Mode", h);
	if (!tar) {
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
		if (fr->ranged) {
			status = 206;
			snprintf(
			    h, sizeof(h), "bytes %llu-%llu/%llu",
			    (unsigned long long)fr->range_start,
			    (unsigned long long)(fr->range_start + st->size - (st->size ? 1 : 0)),
			    (unsigned long long)st->total);
			MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, h);
		}
	}
	api_security_headers(resp, false);
	api_reqctx_header(resp);
	ret = api_queue_response(fr->conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* ------------------------------------------------------------ the steps */

enum MHD_Result api_files_begin(struct api_files_ctx *ctx, struct MHD_Connection *c,
				const char *method, const char *account_id, const char *id,
				struct api_files **out)
{
	struct api_files *fr = calloc(1, sizeof(*fr));
	struct sandbox_file_req req;
	struct sbx_error err;

	*out = NULL;
	if (!fr)
		return MHD_NO;
	fr->ctx = ctx;
	fr->conn = c;
	fr->win_start_ms = sbx_mono_ms();
	sbx_error_clear(&err);
	if (request_parse(fr, method, &req, &err) < 0 ||
	    sandbox_file_start(ctx->svc, account_id, id, &req, files_wake, fr, &fr->f, &err) < 0) {
		api_files_free(fr);
		/* answered before an upload's body: close lingering (http.c) */
		if (strcmp(method, "PUT") == 0)
			api_conn_linger(c);
		return api_reply_error(c, &err);
	}
	*out = fr;
	return MHD_YES;
}

/* One piece of an upload's body. */
static enum MHD_Result upload_piece(struct api_files *fr, const char *data, size_t *size)
{
	uint64_t max = fr->ctx->cfg->max_file_bytes;
	long n;

	if (fr->drop) {
		*size = 0;
		return MHD_YES;
	}
	if (fr->received + *size > max) {
		sbx_error_set(&fr->err, SBX_E_PAYLOAD_TOO_LARGE, NULL,
			      "the file is larger than max_file_bytes (%llu bytes)",
			      (unsigned long long)max);
		fr->drop = true;
		*size = 0;
		return MHD_YES;
	}
	for (;;) {
		n = sandbox_file_write(fr->f, data, *size, &fr->err);
		if (n < 0) {
			fr->drop = true;
			*size = 0;
			return MHD_YES;
		}
		EVP_DigestUpdate(fr->md, data, (size_t)n);
		fr->received += (uint64_t)n;
		if (!progress_ok(fr, (size_t)n)) {
			sbx_info(MOD, "closed an upload that moved fewer than %u bytes in %u ms",
				 SANDBOX_FILE_MIN_PROGRESS, fr->ctx->cfg->file_stall_timeout_ms);
			return MHD_NO;
		}
		data += n;
		*size -= (size_t)n;
		if (*size == 0)
			return MHD_YES;
		/* the guest's credit is used up: wait for its FILE_ACK */
		if (stopping(fr)) {
			sbx_error_set(&fr->err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				      "the service is shutting down; retry on the restarted "
				      "service");
			fr->err.retry_after_s = 5;
			fr->drop = true;
			*size = 0;
			return MHD_YES;
		}
		if (park(fr))
			return MHD_YES; /* MHD calls again with the rest */
	}
}

enum MHD_Result api_files_step(struct api_files *fr, const char *upload_data,
			       size_t *upload_data_size)
{
	struct sandbox_file_status st;

	if (!fr) { /* begin answered already */
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (*upload_data_size) {
		if (fr->kind != FK_PUT && fr->kind != FK_TAR_PUT) {
			*upload_data_size = 0; /* a body on GET/DELETE: ignored */
			return MHD_YES;
		}
		return upload_piece(fr, upload_data, upload_data_size);
	}
	if (fr->drop)
		return api_reply_error(fr->conn, &fr->err);
	if ((fr->kind == FK_PUT || fr->kind == FK_TAR_PUT) && !fr->ended) {
		fr->ended = true;
		if (sandbox_file_end(fr->f, &fr->err) < 0)
			return api_reply_error(fr->conn, &fr->err);
	}
	for (;;) {
		sandbox_file_status(fr->f, &st);
		if (st.state == SANDBOX_FILE_FAILED)
			return api_reply_error(fr->conn, &st.err);
		if (stopping(fr))
			return reply_stopping(fr->conn);
		if (fr->kind == FK_GET || fr->kind == FK_TAR_GET) {
			if (st.have_meta)
				return answer_download(fr, &st);
		} else if (st.state == SANDBOX_FILE_DONE) {
			if (fr->kind == FK_LIST)
				return answer_list(fr, &st);
			if (fr->kind == FK_DELETE)
				return answer_delete(fr);
			return answer_put(fr, &st);
		}
		if (park(fr))
			return MHD_YES; /* MHD calls again once woken */
	}
}

void api_files_free(struct api_files *fr)
{
	if (!fr)
		return;
	/* after this no wake runs: then the parked list can let go */
	sandbox_file_release(fr->f);
	pthread_mutex_lock(&fr->ctx->lock);
	if (fr->parked)
		parked_unlink_locked(fr->ctx, fr);
	pthread_mutex_unlock(&fr->ctx->lock);
	if (fr->md)
		EVP_MD_CTX_free(fr->md);
	free(fr);
}

/* ------------------------------------------------------------ lifecycle */

struct api_files_ctx *api_files_ctx_new(struct sandbox_svc *svc, const struct sandbox_config *cfg)
{
	struct api_files_ctx *ctx = calloc(1, sizeof(*ctx));

	if (!ctx)
		abort();
	ctx->svc = svc;
	ctx->cfg = cfg;
	pthread_mutex_init(&ctx->lock, NULL);
	return ctx;
}

void api_files_ctx_stop(struct api_files_ctx *ctx)
{
	pthread_mutex_lock(&ctx->lock);
	ctx->stopping = true;
	while (ctx->parked) {
		struct api_files *fr = ctx->parked;

		parked_unlink_locked(ctx, fr);
		MHD_resume_connection(fr->conn);
	}
	pthread_mutex_unlock(&ctx->lock);
}

void api_files_ctx_free(struct api_files_ctx *ctx)
{
	if (!ctx)
		return;
	pthread_mutex_destroy(&ctx->lock);
	free(ctx);
}
