/* api/http.c: the libmicrohttpd server. The check order of API.md (route,
 * method, auth, scope, declared length; body, fields; then sandbox/ for
 * the rest) applied from the route table (routes.c), the request's body,
 * the list of parked connections, the per-account counts and the server's
 * life. The handlers are http_short.c's (the short requests), http_exec.c
 * (exec), http_async.c (create, DELETE, executions), http_processes.c,
 * http_files.c and http_static.c; the replies are reply.c's (http-priv.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "http-priv.h"

#define MOD "api"
/* Idle timeout: mainly a client that stops reading its reply (the receive
 * deadline, http_conn.c, bounds the time to send a request). */
#define API_IDLE_TIMEOUT_S 120
#define API_TOKEN_MAX	   128
/* The most of a refused request's body read and dropped so that its client
 * can read the answer (api_reply_reject). */
#define API_DRAIN_MAX_BYTES (16u * 1024 * 1024)

/* ------------------------------------------------------------------- auth */

/* "Bearer aas_sk_..." -> the token (borrowed slice copied to out). */
static bool bearer_token(const char *h, char out[API_TOKEN_MAX + 1])
{
	size_t n;

	if (!h)
		return false;
	while (*h == ' ' || *h == '\t')
		h++;
	if (strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t'))
		return false;
	h += 6;
	while (*h == ' ' || *h == '\t')
		h++;
	n = strcspn(h, " \t");
	if (n < 8 || n > API_TOKEN_MAX || strncmp(h, "aas_sk_", 7) != 0)
		return false;
	for (const char *p = h + n; *p; p++)
		if (*p != ' ' && *p != '\t')
			return false;
	for (size_t i = 0; i < n; i++)
		if (h[i] < 0x21 || h[i] > 0x7e)
			return false;
	memcpy(out, h, n);
	out[n] = '\0';
	return true;
}

/* One key lookup per request: the account and the key's scopes. */
/* ws: a WebSocket route, which also takes the key from
 * Sec-WebSocket-Protocol when there is no Authorization (http_wsauth.c). */
static int authenticate(struct api_server *srv, struct MHD_Connection *c, bool ws, char *account_id,
			unsigned *scopes, struct sbx_error *err)
{
	const char *h =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	char token[API_TOKEN_MAX + 1];
	struct sbx_error e;
	bool have;

	sbx_error_clear(&e);
	if (!h && ws) {
		int k = api_ws_key(c, token, sizeof token, &e);

		if (k == -2) {
			*err = e;
			return -1;
		}
		have = k == 1;
	} else {
		have = bearer_token(h, token);
	}
	if (have && sandbox_authenticate_scopes(srv->svc, token, account_id, scopes, &e) == 0)
		return 0;
	if (e.code != SBX_OK && e.code != SBX_E_AUTHENTICATION) {
		*err = e; /* the store failed: not the tenant's fault */
		return -1;
	}
	return sbx_error_set(err, SBX_E_AUTHENTICATION, NULL,
			     "missing or invalid API key; send 'Authorization: Bearer "
			     "aas_sk_...' with a valid, unrevoked key");
}

static bool media_type_is(const char *ct, const char *type)
{
	size_t n = strlen(type);

	while (*ct == ' ' || *ct == '\t')
		ct++;
	if (strncasecmp(ct, type, n) != 0)
		return false;
	ct += n;
	while (*ct == ' ' || *ct == '\t')
		ct++;
	return *ct == '\0' || *ct == ';';
}

/* A Content-Type we read as JSON: application/json (parameters such as
 * charset allowed), or application/x-www-form-urlencoded, which is what
 * `curl -d` sends when the caller forgot -H 'Content-Type: ...': the body
 * is still parsed as JSON (docs/api.md). */
static bool content_type_json(const char *ct)
{
	return media_type_is(ct, "application/json") ||
	       media_type_is(ct, "application/x-www-form-urlencoded");
}

/* ------------------------------------------------------- parked requests */

void api_parked_remove(struct api_server *srv, struct req *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else if (srv->suspended == r)
		srv->suspended = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->prev = r->next = NULL;
}

/* Park a request's connection until its work finishes (exec, create,
 * DELETE): no worker thread waits meanwhile. Call with srv->lock held,
 * state EXEC_RUNNING. */
void api_park_locked(struct api_server *srv, struct req *r)
{
	MHD_suspend_connection(r->conn);
	r->state = EXEC_SUSPENDED;
	r->next = srv->suspended;
	if (r->next)
		r->next->prev = r;
	srv->suspended = r;
}

/* The work of a running or parked request finished: wake its connection
 * (MHD calls the handler again) if it was parked. srv->lock held. */
void api_finish_locked(struct api_server *srv, struct req *r)
{
	if (r->state == EXEC_SUSPENDED) {
		api_parked_remove(srv, r);
		MHD_resume_connection(r->conn);
	}
	r->state = EXEC_DONE;
}

/* ------------------------------------------------- per-account counts */

static const struct {
	const char *what;
	int retry_after_s;
} slot_kinds[API_INFLIGHT_KINDS] = {
    [API_INFLIGHT_CREATE] = {"creates", 2},
    [API_INFLIGHT_DELETE] = {"DELETEs, pauses and resumes", 1},
    [API_INFLIGHT_EXECUTION] = {"executions", 2},
    [API_INFLIGHT_EXEC] = {"execs", 1},
    [API_INFLIGHT_FILES] = {"file transfers", 1},
    [API_INFLIGHT_PROCESS] = {"processes calls", 1}, /* docs/api.md "Fair share" */
};

static int slot_cap(const struct sandbox_config *cfg, enum api_inflight_kind kind)
{
	switch (kind) {
	case API_INFLIGHT_CREATE:
		return cfg->max_creates_in_flight_per_account;
	case API_INFLIGHT_DELETE:
		return cfg->max_deletes_in_flight_per_account;
	case API_INFLIGHT_EXECUTION:
		return cfg->max_executions_in_flight_per_account;
	case API_INFLIGHT_FILES:
		return cfg->max_files_in_flight_per_account;
	case API_INFLIGHT_PROCESS:
		return cfg->max_processes_in_flight_per_account;
	default:
		return cfg->max_execs_in_flight_per_account;
	}
}

int api_req_slot_take(struct req *r, enum api_inflight_kind kind, struct sbx_error *err)
{
	int cap = slot_cap(r->srv->cfg, kind);

	if (!api_inflight_take(r->srv->per_account, r->account_id, kind, cap)) {
		sbx_error_set(err, SBX_E_RATE_LIMITED, NULL,
			      "this account has %d %s in flight, the most it may have at once "
			      "(GET /v1/limits); retry when one of them has finished",
			      cap, slot_kinds[kind].what);
		err->retry_after_s = slot_kinds[kind].retry_after_s;
		return -1;
	}
	r->slot = (int)kind;
	return 0;
}

void api_req_slot_put(struct req *r)
{
	if (r->slot < 0)
		return;
	api_inflight_put(r->srv->per_account, r->account_id, (enum api_inflight_kind)r->slot);
	r->slot = -1;
}

/* First call for a request: headers only. Route, method, auth and the
 * declared length are checked here, before any body is read. */
static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static enum MHD_Result request_begin(struct api_server *srv, struct MHD_Connection *c,
				     const char *url, const char *method, void **con_cls)
{
	struct req *r = calloc(1, sizeof(*r));
	const struct api_route *rt;
	struct sbx_error err;
	const char *cl;

	if (!r)
		return MHD_NO;
	r->srv = srv;
	r->conn = c;
	r->refs = 1;
	r->slot = -1;
	r->started_us = now_us();
	sbx_buf_init(&r->body, srv->cfg->max_body_bytes);
	pthread_mutex_lock(&srv->lock);
	srv->inflight++;
	srv->live_reqs++;
	pthread_mutex_unlock(&srv->lock);
	*con_cls = r;
	api_reqctx_begin(c, r->request_id);

	sbx_error_clear(&err);
	r->method = api_method_bit(method);
	/* a preview's host name is no API request: before any route and key */
	if (api_preview_host_is(srv->cfg, c))
		return api_preview_host_begin(r, url, method);
	r->route = api_route_resolve(url, r->id, &r->pid);
	if (r->route == R_PORTS)
		r->port_tail = api_ports_tail(url);
	if (r->route == R_PREVIEW) /* the last segment: {preview_id} */
		snprintf(r->sub_id, sizeof r->sub_id, "%s", strrchr(url, '/') + 1);
	if (r->route == R_NONE && (r->asset = api_static_find(url)) >= 0)
		r->route = R_STATIC;
	rt = api_route_get(r->route);
	if (r->route == R_NONE) {
		char shown[80];
		size_t i = 0;
		for (; url[i] && i < 64; i++)
			shown[i] =
			    (url[i] > 0x20 && url[i] < 0x7f && url[i] != '\'') ? url[i] : '?';
		shown[i] = '\0';
		sbx_error_set(
		    &err, SBX_E_NOT_FOUND, NULL,
		    "unknown endpoint '%s %s'; the endpoints are listed at /reference.html",
		    strlen(method) < 10 ? method : "?", shown);
		return api_reply_reject(c, &err, NULL);
	}
	if (!(rt->methods & r->method)) {
		sbx_error_set(&err, SBX_E_METHOD_NOT_ALLOWED, NULL,
			      "method not allowed here; use %s", api_methods_allow(rt->methods));
		return api_reply_reject(c, &err, api_methods_allow(rt->methods));
	}
	if ((rt->flags & API_ROUTE_AUTH) &&
	    authenticate(srv, c, r->route == R_TERMINAL, r->account_id, &r->scopes, &err) < 0)
		return api_reply_reject(c, &err, NULL);
	if (api_route_scope_check(rt, r->scopes, &err) < 0)
		return api_reply_reject(c, &err, NULL);
	if (rt->flags & API_ROUTE_STREAM)
		return rt->handler(r); /* it reads the body itself */
	cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (cl) {
		char *end;
		unsigned long long n;
		errno = 0;
		n = strtoull(cl, &end, 10);
		if (errno == ERANGE || (end != cl && n > srv->cfg->max_body_bytes)) {
			sbx_error_set(&err, SBX_E_PAYLOAD_TOO_LARGE, NULL,
				      "the request body is larger than %zu bytes",
				      srv->cfg->max_body_bytes);
			return api_reply_reject(c, &err, NULL);
		}
	}
	return MHD_YES;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *upload_data,
			      size_t *upload_data_size, void **con_cls)
{
	struct api_server *srv = cls;
	struct req *r = *con_cls;
	const struct api_route *rt;
	struct sbx_error err;

	if (!r)
		return request_begin(srv, c, url, method, con_cls);
	api_reqctx_enter(r->request_id, r->account_id, r->id);
	if (r->files) /* a STREAM route's; a refused one drains like any other */
		return api_files_step(r->files, upload_data, upload_data_size);
	if (r->port)
		return api_ports_step(r->port, upload_data, upload_data_size);
	if (*upload_data_size) {
		r->body_bytes += *upload_data_size;
		/* Keep at most max_body_bytes; past that (a chunked body
		 * declares no length), read and drop, up to the drain cap. */
		if (!r->too_large && sbx_buf_append(&r->body, upload_data, *upload_data_size) < 0) {
			r->too_large = true;
			sbx_buf_release(&r->body);
		}
		*upload_data_size = 0;
		if (r->too_large && r->body_bytes > API_DRAIN_MAX_BYTES) {
			sbx_info(MOD,
				 "closed a connection whose refused request body passed %u "
				 "bytes",
				 API_DRAIN_MAX_BYTES);
			return MHD_NO;
		}
		return MHD_YES;
	}
	api_conn_received(c);	   /* the whole request is in: no deadline from here */
	if (r->state != EXEC_NONE) /* resumed */
		return r->is_async ? api_async_answer(r) : api_exec_answer(r);

	sbx_error_clear(&err);
	if (r->too_large) {
		sbx_error_set(&err, SBX_E_PAYLOAD_TOO_LARGE, NULL,
			      "the request body is larger than %zu bytes",
			      srv->cfg->max_body_bytes);
		return api_reply_error_ex(c, &err, NULL, true);
	}
	rt = api_route_get(r->route);
	if (r->body.len > 0 && (rt->flags & API_ROUTE_BODY) && r->method == API_POST) {
		const char *ct =
		    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
		if (ct && !content_type_json(ct))
			return api_reply_new_error(
			    c, SBX_E_UNSUPPORTED_MEDIA_TYPE, NULL,
			    "send the body as 'Content-Type: application/json'");
	}
	/* R_NONE, or a STREAM route that request_begin refused (its files
	 * handler ran there): nothing to run */
	if (!rt->handler || (rt->flags & API_ROUTE_STREAM))
		return api_reply_new_error(c, SBX_E_NOT_FOUND, NULL, "unknown endpoint");
	return rt->handler(r);
}

/* MHD's access handler: handle(), then note the status it answered. */
static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
			       const char *method, const char *version, const char *upload_data,
			       size_t *upload_data_size, void **con_cls)
{
	enum MHD_Result ret;
	unsigned status;

	(void)api_metrics_take_status();
	api_mark_mhd_thread();
	ret = handle(cls, c, url, method, version, upload_data, upload_data_size, con_cls);
	status = api_metrics_take_status();
	if (status && *con_cls)
		((struct req *)*con_cls)->status = status;
	return ret;
}

/* The last of api_server_stop and the requests that outlive it (a late
 * exec callback) frees the server. */
static void server_free(struct api_server *srv)
{
	sbx_workpool_free(srv->pool);
	api_inflight_free(srv->per_account);
	api_files_ctx_free(srv->files);
	api_ports_ctx_free(srv->ports);
	api_conns_free(srv->conns);
	pthread_mutex_destroy(&srv->lock);
	pthread_cond_destroy(&srv->idle);
	free(srv);
}

void api_req_free(struct req *r)
{
	struct api_server *srv = r->srv;
	bool free_srv;

	api_req_slot_put(r); /* a no-op unless its work never ran */
	sbx_buf_release(&r->body);
	api_files_free(r->files);
	api_ports_free(r->port);
	free(r->port_tail);
	api_terminal_req_free(r->term);
	api_exec_body_release(&r->exec);
	api_stream_free(r->stream);
	free(r->proc_data);
	api_completion_release(&r->done);
	if (r->has_execution)
		free(r->execution.code);
	/* the reply was sent (or never will be): its budget goes back */
	sandbox_output_release(&r->hold);
	free(r->out_body);
	free(r);
	pthread_mutex_lock(&srv->lock);
	free_srv = --srv->live_reqs == 0 && srv->released;
	pthread_mutex_unlock(&srv->lock);
	if (free_srv)
		server_free(srv);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	struct api_server *srv = cls;
	struct req *r = *con_cls;
	bool free_now;

	if (!r)
		return;
	*con_cls = NULL;
	if (r->status)
		api_metrics_request(r->route, r->status, now_us() - r->started_us);
	pthread_mutex_lock(&srv->lock);
	if (r->state == EXEC_SUSPENDED)
		api_parked_remove(srv, r);
	if (r->state == EXEC_RUNNING || r->state == EXEC_SUSPENDED)
		r->state = EXEC_ABORTED; /* the late callback only drops its ref */
	api_conn_rearm(c);		 /* the next request on this connection starts now */
	free_now = --r->refs == 0;
	srv->inflight--;
	pthread_cond_broadcast(&srv->idle);
	pthread_mutex_unlock(&srv->lock);
	if (free_now)
		api_req_free(r);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[512];
	size_t n;

	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n && line[n - 1] == '\n')
		line[--n] = '\0';
	sbx_warn(MOD, "libmicrohttpd: %s", line);
}

/* ------------------------------------------------------------ lifecycle */

int api_listen_parse(const char *listen, struct sockaddr_in *sa, struct sbx_error *err)
{
	const char *colon = listen ? strrchr(listen, ':') : NULL;
	char host[64];
	char *end;
	unsigned long port;
	size_t hl;

	memset(sa, 0, sizeof(*sa));
	if (!colon || colon == listen || colon[1] == '\0')
		goto bad;
	hl = (size_t)(colon - listen);
	if (hl >= sizeof(host))
		goto bad;
	memcpy(host, listen, hl);
	host[hl] = '\0';
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (*end || errno || port > 65535 || colon[1] < '0' || colon[1] > '9')
		goto bad;
	if (strcmp(host, "localhost") == 0)
		strcpy(host, "127.0.0.1");
	if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
		goto bad;
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)port);
	return 0;
bad:
	return sbx_error_set(err, SBX_E_INVALID_REQUEST, "listen",
			     "listen must be IPV4:PORT, like '127.0.0.1:8080'");
}

struct api_server *api_server_start(struct sandbox_svc *svc, struct sbx_error *err)
{
	const struct sandbox_config *cfg = sandbox_svc_config(svc);
	struct api_server *srv;
	struct sockaddr_in sa;
	const union MHD_DaemonInfo *info;
	unsigned threads = cfg->http_threads > 0 ? (unsigned)cfg->http_threads : 4;

	if (api_listen_parse(cfg->listen, &sa, err) < 0)
		return NULL;
	srv = calloc(1, sizeof(*srv));
	if (!srv) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		return NULL;
	}
	srv->svc = svc;
	srv->cfg = cfg;
	srv->listen_fd = MHD_INVALID_SOCKET;
	api_runtimes_load(&srv->runtimes, cfg->base_image);
	pthread_mutex_init(&srv->lock, NULL);
	pthread_cond_init(&srv->idle, NULL);
	srv->pool = sbx_workpool_new(API_WORKPOOL_THREAD_NAME, cfg->http_work_threads,
				     cfg->http_work_queue, 0);
	srv->per_account = api_inflight_new();
	srv->files = api_files_ctx_new(svc, cfg);
	srv->ports = api_ports_ctx_new(svc, cfg);
	if (!srv->pool || !srv->per_account || !srv->files) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		server_free(srv);
		return NULL;
	}
	srv->conns = api_conns_new(cfg->http_receive_timeout_ms, err);
	if (!srv->conns) {
		server_free(srv);
		return NULL;
	}

	api_terminals_start();
	srv->daemon = MHD_start_daemon(
	    MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
		MHD_USE_ITC | MHD_ALLOW_UPGRADE,
	    ntohs(sa.sin_port), NULL, NULL, handler, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv,
	    MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)&sa, MHD_OPTION_THREAD_POOL_SIZE,
	    threads, MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->http_max_connections,
	    MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->http_connections_per_ip,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)API_IDLE_TIMEOUT_S,
	    MHD_OPTION_NOTIFY_CONNECTION, api_conn_notify, srv->conns, MHD_OPTION_NOTIFY_COMPLETED,
	    completed, srv, MHD_OPTION_END);
	if (!srv->daemon) {
		sbx_error_set(err, SBX_E_INTERNAL, "listen", "cannot listen on '%s': %s",
			      cfg->listen, strerror(errno));
		server_free(srv);
		return NULL;
	}
	info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
	srv->port = info ? info->port : ntohs(sa.sin_port);
	return srv;
}

unsigned api_server_port(const struct api_server *srv)
{
	return srv->port;
}

void api_server_quiesce(struct api_server *srv)
{
	if (!srv || srv->quiesced)
		return;
	srv->quiesced = true;
	/* MHD takes the socket out of every worker's epoll set before it
	 * returns it, so closing it now makes new connections fail fast. */
	srv->listen_fd = MHD_quiesce_daemon(srv->daemon);
	/* terminals last as long as their users: they end now (1001) */
	api_terminals_stop();
	if (srv->listen_fd != MHD_INVALID_SOCKET)
		close(srv->listen_fd);
	srv->listen_fd = MHD_INVALID_SOCKET;
}

int api_server_drain(struct api_server *srv, int64_t timeout_ms)
{
	int64_t deadline = sbx_mono_ms() + timeout_ms;
	int left;

	pthread_mutex_lock(&srv->lock);
	while (srv->inflight > 0) {
		int64_t now = sbx_mono_ms();
		struct timespec ts;
		if (now >= deadline)
			break;
		/* Poll in short steps (the condvar uses the wall clock). */
		clock_gettime(CLOCK_REALTIME, &ts);
		int64_t step = SBX_MIN(deadline - now, 100);
		ts.tv_nsec += (long)(step * 1000000);
		ts.tv_sec += ts.tv_nsec / 1000000000;
		ts.tv_nsec %= 1000000000;
		pthread_cond_timedwait(&srv->idle, &srv->lock, &ts);
	}
	left = srv->inflight;
	pthread_mutex_unlock(&srv->lock);
	return left;
}

void api_server_stop(struct api_server *srv)
{
	bool free_srv;
	int n = 0;

	if (!srv)
		return;
	pthread_mutex_lock(&srv->lock);
	srv->stopping = true;
	pthread_mutex_unlock(&srv->lock);
	/* Long requests still waiting for a pool thread never start: they
	 * answer 503 (async_job, cancelled). */
	sbx_workpool_stop(srv->pool);
	pthread_mutex_lock(&srv->lock);
	while (srv->suspended) {
		struct req *r = srv->suspended;
		api_parked_remove(srv, r);
		r->state = EXEC_ABORTED;
		MHD_resume_connection(r->conn);
		n++;
	}
	pthread_mutex_unlock(&srv->lock);
	api_files_ctx_stop(srv->files);
	api_ports_ctx_stop(srv->ports);
	api_terminals_stop();
	if (n)
		sbx_warn(MOD, "answered %d running exec(s) with 503 at shutdown", n);
	/* Let the 503s (and anything else in flight) go out. */
	api_server_drain(srv, 2000);
	/* Running creates, DELETEs and executions still use the service,
	 * which the caller frees next: wait for them (a boot ends by
	 * boot_timeout_ms, an execution by its timeout). */
	sbx_workpool_free(srv->pool);
	srv->pool = NULL;
	MHD_stop_daemon(srv->daemon);
	srv->daemon = NULL;
	api_conns_free(srv->conns); /* MHD told it of every close */
	srv->conns = NULL;
	if (srv->listen_fd != MHD_INVALID_SOCKET)
		close(srv->listen_fd);
	srv->listen_fd = MHD_INVALID_SOCKET;
	pthread_mutex_lock(&srv->lock);
	srv->released = true;
	free_srv = srv->live_reqs == 0;
	pthread_mutex_unlock(&srv->lock);
	if (free_srv)
		server_free(srv);
}
