/* api/http-priv.h: what the files of the HTTP server (api/http*.c,
 * routes.c, reply.c, metrics.c) share: the server and request structs, the
 * route table, the reply helpers and the entry points of each use case's
 * file. Not for other modules (tests/unit/test_routes.c and test_api_http.c
 * read the route table).
 *
 * Locking: srv->lock guards the server's counters, the list of suspended
 * requests and every request's exec state (state, result, refs). It is
 * held around MHD_suspend_connection/MHD_resume_connection so that a
 * completion never resumes a connection that is not (yet) suspended.
 *
 * Threads: the work of exec, processes and files finishes on a lower
 * thread (the channel's, libvirt's, the timer's, an ender's). That thread
 * runs no api/ code but api_complete(): it moves the result into the
 * request's completion and wakes the request (MHD_resume_connection is
 * thread-safe). Everything else (the per-account count, the rendering,
 * freeing the request) runs on MHD's thread when the handler or the
 * content reader drains the completion (api_on_mhd_thread() says so), or
 * on api's own pool thread for a request whose connection went away. */
#ifndef SBX_API_HTTP_PRIV_H
#define SBX_API_HTTP_PRIV_H

#include <pthread.h>
#include <stdbool.h>

#include <microhttpd.h>

#include "api-priv.h"
#include "reqctx.h"

enum route {
	R_NONE,
	R_SANDBOXES,	  /* /v1/sandboxes */
	R_SANDBOX,	  /* /v1/sandboxes/{id} */
	R_EXEC,		  /* /v1/sandboxes/{id}/exec */
	R_EXTEND,	  /* /v1/sandboxes/{id}/extend */
	R_USAGE,	  /* /v1/usage */
	R_LIMITS,	  /* /v1/limits */
	R_RUNTIMES,	  /* /v1/runtimes */
	R_KEYS,		  /* /v1/api_keys */
	R_KEY,		  /* /v1/api_keys/{id} */
	R_EXECUTIONS,	  /* /v1/sandbox/executions */
	R_EXECUTION,	  /* /v1/sandbox/executions/{id} */
	R_RECEIPT,	  /* /v1/receipts/{id} */
	R_RECEIPT_KEY,	  /* /v1/receipts/public-key */
	R_PROCESSES,	  /* /v1/sandboxes/{id}/processes */
	R_PROCESS_OUTPUT, /* /v1/sandboxes/{id}/processes/{pid}/output */
	R_PROCESS_STDIN,  /* /v1/sandboxes/{id}/processes/{pid}/stdin */
	R_PROCESS_SIGNAL, /* /v1/sandboxes/{id}/processes/{pid}/signal */
	R_FILES,	  /* /v1/sandboxes/{id}/files (http_files.c) */
	R_METRICS,	  /* /v1/sandboxes/{id}/metrics */
	R_PAUSE,	  /* /v1/sandboxes/{id}/pause */
	R_RESUME,	  /* /v1/sandboxes/{id}/resume */
	R_TERMINAL,	  /* /v1/sandboxes/{id}/terminal (http_terminal.c) */
	R_NETWORK,	  /* /v1/sandboxes/{id}/network */
	R_PORTS,	  /* /v1/sandboxes/{id}/ports/{port}/{path} (http_ports.c) */
	R_PREVIEWS,	  /* /v1/sandboxes/{id}/ports/{port}/previews (http_previews.c) */
	R_PREVIEW,	  /* /v1/sandboxes/{id}/previews/{preview_id} */
	R_SNAPSHOT_TAKE,  /* /v1/sandboxes/{id}/snapshots (http_snapshots.c) */
	R_SNAPSHOTS,	  /* /v1/snapshots */
	R_SNAPSHOT,	  /* /v1/snapshots/{id} */
	R_PREVIEW_HOST,	  /* a preview's host name, no API request (http_previews.c) */
	R_STATIC,	  /* a compiled-in file (http_static.c): r->asset */
};
#define R_COUNT (R_STATIC + 1)

enum exec_state {
	EXEC_NONE,	/* no exec started */
	EXEC_RUNNING,	/* started, connection not suspended (yet) */
	EXEC_SUSPENDED, /* connection suspended, waiting for the callback */
	EXEC_DONE,	/* callback ran: res or exec_err holds the outcome */
	EXEC_ABORTED,	/* the server is stopping: answered 503 */
};

/* A request's completion: what its work left for MHD's thread to render
 * (guarded by srv->lock; see "Threads" above). The exec's result is
 * agentless/'s own value, moved up unchanged through sandbox/. */
struct api_completion {
	bool has_exec;
	struct agentless_exec_result exec; /* buffers owned when has_exec */
	bool has_receipt;
	struct sandbox_exec_receipt receipt; /* signed in sandbox/ */
	bool has_proc;
	struct agentless_proc_result proc; /* owned when has_proc */
	bool completed;			   /* delivered */
	bool drained;			   /* a stream's reader took it */
};

struct api_server {
	struct sandbox_svc *svc;
	const struct sandbox_config *cfg;
	struct MHD_Daemon *daemon;
	unsigned port;
	MHD_socket listen_fd; /* owned after quiesce */
	bool quiesced;

	pthread_mutex_t lock;
	pthread_cond_t idle;
	int inflight;  /* requests received and not yet completed */
	int live_reqs; /* struct req alive (some may wait on a late exec callback) */
	bool stopping;
	bool released; /* api_server_stop returned: the last req frees srv */
	struct req *suspended;

	struct api_conns *conns;	  /* receive deadlines (http_conn.c) */
	struct sbx_workpool *pool;	  /* runs create, DELETE, executions */
	struct api_inflight *per_account; /* their counts (and execs') per account */
	struct api_files_ctx *files;	  /* the files routes (http_files.c) */
	struct api_ports_ctx *ports;	  /* the ports route (http_ports.c) */
	struct api_runtimes runtimes;	  /* read at start, then constant */
};

struct req {
	struct api_server *srv;
	struct MHD_Connection *conn;
	enum route route;
	unsigned method; /* its enum api_method bit (0: none of them) */
	char id[SANDBOX_ID_MAX];
	char account_id[SANDBOX_ID_MAX];
	unsigned scopes;		     /* the key's (enum sandbox_scope bits) */
	char request_id[API_REQUEST_ID_MAX]; /* X-Request-Id, api/reqctx.h */
	int64_t started_us;		     /* received (metrics) */
	unsigned status;		     /* the status answered, 0 until then (metrics) */
	int asset;			     /* R_STATIC: index in api_assets[] */
	struct sbx_buf body;
	bool too_large;
	uint64_t body_bytes; /* of the body, read so far (kept or dropped) */

	/* exec; guarded by srv->lock from the moment the exec starts */
	struct api_exec_body exec;
	enum exec_state state;
	struct api_completion done;	 /* the outcome, until drained */
	struct sbx_error exec_err;	 /* ... or why there is none */
	struct sandbox_output_hold hold; /* the reply's output budget, until api_req_free */
	struct api_stream *stream;	 /* a streamed exec's events (http_stream.c) */

	/* the processes routes (http_processes.c) */
	uint32_t pid; /* from the path */
	int proc_op;  /* enum sandbox_proc_op */
	char *proc_data;
	size_t proc_data_len;
	bool proc_close;
	const char *proc_signal_name; /* static */
	int refs;		      /* MHD's (until completed) + the exec callback's */

	/* The per-account count this request holds until its work ends
	 * (enum api_inflight_kind), or -1. */
	int slot;

	/* create, DELETE and executions take seconds (a boot, a domain
	 * destroy, a program): they run on srv->pool (async_job) and leave
	 * the answer here. */
	bool is_async;
	struct api_files *files;     /* R_FILES */
	struct term_req *term;	     /* R_TERMINAL (http_terminal_reg.c) */
	struct api_port *port;	     /* R_PORTS (http_ports.c) */
	char *port_tail;	     /* R_PORTS: the path after the port, without its '/' */
	char sub_id[SANDBOX_ID_MAX]; /* R_PREVIEW: {preview_id} */
	struct api_create_body create;
	struct api_execution_body execution; /* code owned when has_execution */
	bool has_execution;
	char idem_key[256];
	bool has_idem_key;
	int op_rc; /* 0, or -1 with exec_err */
	unsigned out_status;
	char *out_body;
	size_t out_len;
	bool out_replayed;
	struct req *prev, *next;
};

/* ------------------------------------------------------- api/routes.c */

/* The methods a route answers, as bits (in the order of an Allow header). */
enum api_method {
	API_GET = 1u << 0,
	API_PUT = 1u << 1,
	API_POST = 1u << 2,
	API_DELETE = 1u << 3,
	/* the ports route's only (the guest's server answers them) */
	API_HEAD = 1u << 4,
	API_PATCH = 1u << 5,
	API_OPTIONS = 1u << 6,
};

enum api_route_flag {
	API_ROUTE_AUTH = 1u << 0, /* a valid API key, or 401 */
	API_ROUTE_BODY = 1u << 1, /* its POST carries a JSON body (else 415) */
	/* the handler runs on the headers (after auth) and reads the body
	 * itself, with no max_body_bytes (the files routes) */
	API_ROUTE_STREAM = 1u << 2,
};

/* A route's handler: r->route, r->method, r->id, r->pid, r->account_id and
 * the body (unless STREAM) are set; it queues the reply, or parks r. */
typedef enum MHD_Result (*api_handler_fn)(struct req *r);

/* One row of the route table. */
struct api_route {
	const char *path; /* as docs/openapi.yaml writes it; NULL for R_NONE, R_STATIC */
	unsigned methods; /* enum api_method bits */
	unsigned flags;	  /* enum api_route_flag bits */
	unsigned scope;	  /* enum sandbox_scope bits a key needs (0: none); read
			   * only by api_route_scope_check */
	api_handler_fn handler;
	const char *metric; /* its route="..." in /metrics, unique */
};

/* The table, indexed by enum route (R_COUNT rows): R_NONE first, R_STATIC
 * (the compiled-in files of api/assets.h) last. Static storage. */
const struct api_route *api_routes(size_t *n);
/* Its row for r (R_NONE's when out of range). */
const struct api_route *api_route_get(enum route r);
/* The route of a path (no query), its {id} or {key_id} into id and its
 * {pid} into *pid; R_NONE when none (a literal path wins over a pattern). */
enum route api_route_resolve(const char *url, char id[SANDBOX_ID_MAX], uint32_t *pid);
/* The Allow header of a 405 for these methods ("GET, POST"; "" for none). */
const char *api_methods_allow(unsigned methods);
/* The methods the server answers on `url` (a path without query), as an
 * Allow header: "" when no route has it. */
const char *api_route_methods(const char *url);
/* "GET" -> API_GET; 0 for a method no route answers. */
unsigned api_method_bit(const char *method);
/* API_GET -> "GET"; "" for anything else. */
const char *api_method_name(unsigned bit);
/* The key's scopes (from the auth) must include the route's (403
 * permission_error). 0 or -1 with err. */
int api_route_scope_check(const struct api_route *rt, unsigned scopes, struct sbx_error *err);

/* -------------------------------------------------------- api/reply.c */

/* Queue a JSON reply (takes `o`; NULL answers 500 out of memory), with
 * Retry-After when retry_after_s > 0 and Allow when `allow` is set. */
enum MHD_Result api_reply_json(struct MHD_Connection *c, unsigned status, struct json_object *o,
			       int retry_after_s, const char *allow);
/* The error reply of err (its status, type and message; 5xx detail logged). */
enum MHD_Result api_reply_error(struct MHD_Connection *c, const struct sbx_error *err);
enum MHD_Result api_reply_error_allow(struct MHD_Connection *c, const struct sbx_error *err,
				      const char *allow);
/* ... with 'Connection: close' when `close`. */
enum MHD_Result api_reply_error_ex(struct MHD_Connection *c, const struct sbx_error *err,
				   const char *allow, bool close);
enum MHD_Result api_reply_new_error(struct MHD_Connection *c, enum sbx_code code, const char *param,
				    const char *msg);
/* Refuse a request from its headers alone: the error, 'Connection: close',
 * and a lingering close that drops what the client still sends. */
enum MHD_Result api_reply_reject(struct MHD_Connection *c, const struct sbx_error *err,
				 const char *allow);
/* 200 (or status) with `body` (taken, freed) as it is, of type `type`. */
enum MHD_Result api_reply_text(struct MHD_Connection *c, unsigned status, char *body,
			       const char *type);
/* {"object":"list","data":data,"has_more":...} (takes data). */
struct json_object *api_list_encode(struct json_object *data, bool has_more);
/* nosniff, a Content-Security-Policy (a page's when `page`, else one that
 * allows nothing), no framing, no referrer: on every reply. */
void api_security_headers(struct MHD_Response *resp, bool page);

/* --------------------------------------------------- api/http_short.c */

/* The handlers of the route table that are not another file's: the short
 * requests (one sandbox/ call, answered on MHD's thread) and the routes
 * whose methods go to different files. */
enum MHD_Result api_sandboxes_handle(struct req *r); /* GET list, POST create */
enum MHD_Result api_sandbox_handle(struct req *r);   /* GET, POST (update), DELETE (async) */
/* GET /v1/sandboxes's label filter, metadata[KEY]=VALUE (labels.c): the
 * pairs into *m (none: m->n 0). 0, or -1 with a 400 param "metadata". */
int api_metadata_filter(struct MHD_Connection *c, struct sandbox_metadata *m,
			struct sbx_error *err);
enum MHD_Result api_extend_handle(struct req *r);
enum MHD_Result api_network_handle(struct req *r); /* POST: replace the policy */
enum MHD_Result api_sandbox_metrics_handle(struct req *r);
enum MHD_Result api_usage_handle(struct req *r);
enum MHD_Result api_limits_handle(struct req *r);
enum MHD_Result api_runtimes_handle(struct req *r);
enum MHD_Result api_keys_handle(struct req *r); /* GET list, POST create */
enum MHD_Result api_key_revoke_handle(struct req *r);
enum MHD_Result api_executions_handle(struct req *r); /* GET list, POST run */
enum MHD_Result api_execution_get_handle(struct req *r);
enum MHD_Result api_receipt_handle(struct req *r);
enum MHD_Result api_receipt_key_handle(struct req *r);
enum MHD_Result api_processes_route(struct req *r); /* -> http_processes.c */
enum MHD_Result api_files_route(struct req *r);	    /* -> http_files.c (STREAM) */
enum MHD_Result api_static_route(struct req *r);    /* -> http_static.c */
/* ------------------------ api/http_terminal.c, api/http_terminal_reg.c */
/* GET /v1/sandboxes/{id}/terminal (Upgrade: websocket): a terminal, or
 * with ?attach=<id> a detached one's new client (api/terminal-priv.h). */
enum MHD_Result api_terminal_handle(struct req *r);
/* End every open terminal (their WebSockets closed, their shells hung
 * up) and wait until none is left; before MHD_stop_daemon. */
void api_terminals_stop(void);
/* A server starts: terminals may open again (after a stop in this process). */
void api_terminals_start(void);
/* The request of a terminal is freed: its reference goes (a new terminal
 * whose 101 never went out is hung up; a reattach's claim ends). NULL:
 * nothing. */
struct term_req;
void api_terminal_req_free(struct term_req *q);

/* ------------------------------------------------------ api/http_ports.c */
/* ANY /v1/sandboxes/{id}/ports/{port}/{path}: an HTTP/1.1 proxy to the
 * sandbox's loopback port ({port} in r->pid, 0 when not 1..65535; the
 * path in r->port_tail). STREAM: it reads the body itself. */
enum MHD_Result api_ports_route(struct req *r);
/* The path after /v1/sandboxes/{id}/ports/{port}/ in url (malloc'd, ""
 * for none; NULL on ENOMEM). */
char *api_ports_tail(const char *url);
struct api_port;
struct api_ports_ctx;
/* Start proxying r to port r->pid of sandbox r->id of account
 * r->account_id: method as the client sent it, tail the path without its
 * '/'. preview: it came on a preview's host name (http_previews.c), the
 * guest's own origin: its Set-Cookie and the client's Cookie pass, no
 * X-Forwarded-Prefix and no CSP sandbox (docs/api.md "Previews"). */
enum MHD_Result api_ports_begin(struct api_ports_ctx *ctx, struct req *r, const char *method,
				const char *tail, bool preview, struct api_port **out);
/* Each later call of MHD's handler for the request. */
enum MHD_Result api_ports_step(struct api_port *ap, const char *upload_data,
			       size_t *upload_data_size);
void api_ports_free(struct api_port *ap);
struct api_ports_ctx *api_ports_ctx_new(struct sandbox_svc *svc, const struct sandbox_config *cfg);
/* Wake every parked proxy (they answer 503 or cut their body). */
void api_ports_ctx_stop(struct api_ports_ctx *ctx);
void api_ports_ctx_free(struct api_ports_ctx *ctx);

/* --------------------------------------------------- api/http_snapshots.c */
/* POST /v1/sandboxes/{id}/snapshots: on the pool (api_async_run), whose
 * job runs api_snapshot_take_work. */
enum MHD_Result api_snapshot_take_handle(struct req *r);
int api_snapshot_take_work(struct req *r, struct sbx_error *err);
/* GET /v1/snapshots; GET, DELETE /v1/snapshots/{id}. */
enum MHD_Result api_snapshots_handle(struct req *r);
enum MHD_Result api_snapshot_handle(struct req *r);
struct json_object *api_snapshot_encode(const struct sandbox_snapshot *s);
/* http_async.c: render o (consumed) into r's answer with `status`. 0 or
 * -1 (out of memory). */
int api_async_out_json(struct req *r, unsigned status, struct json_object *o);

/* ---------------------------------------------------- api/http_previews.c */
/* POST, GET /v1/sandboxes/{id}/ports/{port}/previews ({port} in r->pid). */
enum MHD_Result api_previews_handle(struct req *r);
/* DELETE /v1/sandboxes/{id}/previews/{preview_id} (r->sub_id). */
enum MHD_Result api_preview_revoke_handle(struct req *r);
/* Whether the request's Host is a preview's (PORT-TOKEN.<preview_domain>,
 * any port after it, any case), or preview_domain itself: then it is no
 * API request, and api_preview_host_begin answers it. */
bool api_preview_host_is(const struct sandbox_config *cfg, struct MHD_Connection *c);
/* Proxy the request (the path as it came) to the port the preview names,
 * or answer 404 not_found (an unknown, expired or revoked token, or one of
 * another port). Before any route and any API key. */
enum MHD_Result api_preview_host_begin(struct req *r, const char *url, const char *method);
/* R_PREVIEW_HOST's handler: never reached (STREAM, answered by
 * api_preview_host_begin), 404 if it were. */
enum MHD_Result api_preview_host_route(struct req *r);

/* What http_ports.c (the proxy) and http_ports_ws.c (its upgraded
 * connections) share. ctx->lock is a leaf, never held across a sandbox/
 * call or socket I/O. */
#define PORT_OUT_MAX	 (64u * 1024) /* a request head, or one body piece */
#define PORT_RAW_MAX	 (32u * 1024) /* raw body bytes being de-chunked */
#define PORT_LINE_MAX	 1024	      /* a chunk-size or trailer line */
#define PORT_HOST_MAX	 1024	      /* connections on this server, whatever the config */
#define PORT_INTERIM_MAX 8	      /* 1xx answers skipped before the final one */
#define PORT_TRAILER_MAX (8u * 1024)  /* trailer bytes of a chunked answer */

struct api_ports_ctx {
	struct sandbox_svc *svc;
	const struct sandbox_config *cfg;
	pthread_mutex_t lock;
	bool stopping;
	struct api_port *parked;
	struct api_port *live; /* counted against the limits */
	unsigned n_live;
	unsigned relays; /* upgraded connections' relay threads running */
	pthread_cond_t relays_done;
};

enum chunk_state { CH_SIZE, CH_DATA, CH_DATA_END, CH_TRAILER, CH_DONE };

struct api_port {
	struct api_ports_ctx *ctx;
	struct MHD_Connection *conn;
	struct sandbox_port *p;
	char account_id[SANDBOX_ID_MAX];
	char sandbox_id[SANDBOX_ID_MAX];
	bool preview; /* on a preview's host name (api_ports_begin) */

	/* ctx->lock */
	bool parked, woke, counted;
	struct api_port *prev, *next;	/* parked list */
	struct api_port *lprev, *lnext; /* live list */

	/* request: bytes waiting for the stream's credit */
	char *out;
	size_t out_len, out_off;
	bool chunked_in; /* re-chunk the client's body */
	bool body_done;
	bool drop; /* failed: drop the rest of the body, then answer err */
	struct sbx_error err;

	/* response head */
	unsigned interims; /* 1xx answers skipped */
	char *hdr;
	size_t hdr_len, hdr_end; /* bytes in hdr; where the body starts */
	size_t pre_off;		 /* body bytes of hdr handed on */
	bool answered;

	/* response body */
	bool has_length, chunked_out;
	uint64_t remaining;
	enum chunk_state ch;
	uint64_t ch_left;
	size_t line_len;
	unsigned ch_digits;
	uint32_t trailer_bytes;
	bool ch_ext;
	char raw[PORT_RAW_MAX];
	size_t raw_len, raw_off;

	/* an upgrade (WebSocket, http_ports_ws.c): after the 101 a thread
	 * relays raw bytes between the client's socket and the stream */
	bool upgrade;
	char upgrade_proto[64];
	int refs; /* ctx->lock: the request's, the relay thread's */
	int efd;  /* ctx->lock: the relay's wake (an eventfd), -1 before */
	MHD_socket sock;
	struct MHD_UpgradeResponseHandle *urh;
};

/* http_ports.c */
/* Raw body bytes of the answer: what came with its head first, then the
 * stream's. */
size_t ports_raw_take(struct api_port *ap, char *dst, size_t max);
/* Copy the guest's end-to-end headers (hdr) onto resp. */
void ports_head_copy(struct api_port *ap, struct MHD_Response *resp);
/* Drop a reference (ctx->lock not held); the last frees ap. */
void ports_unref(struct api_port *ap);

/* http_ports_chunked.c */
/* De-chunk ap->raw into buf: bytes produced; -1 when malformed. */
ssize_t ports_dechunk(struct api_port *ap, char *buf, size_t max);

/* http_ports_ws.c */
/* The guest answered 101 to an upgrade: answer the client 101 and relay
 * the connection's bytes both ways on a thread of its own. */
enum MHD_Result ports_answer_upgrade(struct api_port *ap);
/* The server stops: wake every relay and wait (bounded) for them to end. */
void ports_relays_stop(struct api_ports_ctx *ctx);

/* ---------------------------------------------------- api/http_wsauth.c */
/* The subprotocol a browser's terminal WebSocket offers, and the one the
 * server answers with (docs/api.md "Terminal"). */
#define API_WS_PROTOCOL "sandboxd.v1"
/* Whether the Sec-WebSocket-Protocol value `header` (NULL: none) lists
 * `proto` (exact, case-sensitive). */
bool api_ws_protocol_offered(const char *header, const char *proto);
/* The key of a `bearer.<key>` entry of `header`, taken only beside
 * API_WS_PROTOCOL: 1 and out (NUL-terminated, under cap), 0 none, -1 a
 * malformed key or two of them. */
int api_ws_protocol_key(const char *header, char *out, size_t cap);
/* Whether Origin (NULL: none, true) is http:// or https:// and then
 * exactly Host (case-insensitive). */
bool api_origin_is_host(const char *origin, const char *host);
/* The terminal's key from the request's Sec-WebSocket-Protocol: 1 (out),
 * 0 none, -1 malformed (a 401), -2 a foreign Origin (err: 403). */
int api_ws_key(struct MHD_Connection *c, char *out, size_t cap, struct sbx_error *err);

/* ---------------------------------------------------------- api/http.c */

/* Free a request once its last reference is gone. */
void api_req_free(struct req *r);
/* Park a request's connection until its work finishes (exec, create,
 * DELETE): no worker thread waits meanwhile. Call with srv->lock held,
 * state EXEC_RUNNING. */
void api_park_locked(struct api_server *srv, struct req *r);
/* The work of a running or parked request finished: wake its connection
 * (MHD calls the handler again) if it was parked. srv->lock held. */
void api_finish_locked(struct api_server *srv, struct req *r);
/* Take a request off the list of parked ones. srv->lock held. */
void api_parked_remove(struct api_server *srv, struct req *r);
/* Count r against its account's cap of `kind` (the config's
 * max_*_in_flight_per_account) until api_req_slot_put. 0, or -1 with 429
 * rate_limited (Retry-After) when the account is at the cap. */
int api_req_slot_take(struct req *r, enum api_inflight_kind kind, struct sbx_error *err);
/* Give r's count back (no-op when it holds none). Any thread. */
void api_req_slot_put(struct req *r);

/* ----------------------------------------------------- api/http_exec.c */

/* Deliver the outcome of r's exec or processes call (any thread, no lock
 * held): move *exec (its receipt copied) or *proc into r->done, or err
 * into r->exec_err, wake the request and drop the work's reference. That
 * is all it does: a request whose connection went away is freed on api's
 * pool (or, once the server stops, here). */
void api_complete(struct req *r, struct agentless_exec_result *exec,
		  const struct sandbox_exec_receipt *receipt, struct agentless_proc_result *proc,
		  const struct sbx_error *err);
/* Give back what a completion holds that was not drained. */
void api_completion_release(struct api_completion *c);
/* True on a thread that runs MHD's handler or content reader (set by
 * them): where api/ renders replies. */
bool api_on_mhd_thread(void);
void api_mark_mhd_thread(void);

/* POST /v1/sandboxes/{id}/exec: start the command and park the connection. */
enum MHD_Result api_exec_handle(struct req *r);
/* Take r's per-account exec count and start its decoded exec with `done`
 * (opaque r, holding a ref of r). 0, or -1 with err (count given back). */
int api_exec_begin(struct req *r, sandbox_exec_done_fn done, struct sbx_error *err);
/* The reply of a finished (or aborted) exec, when MHD calls again. */
enum MHD_Result api_exec_answer(struct req *r);

/* ------------------------------------------------ api/http_processes.c */

/* Every processes route: decode, ask the guest, park the connection. */
enum MHD_Result api_processes_handle(struct req *r, const char *method);
/* The reply of a finished (or aborted) processes call (MHD's thread):
 * drains the completion and renders it. */
enum MHD_Result api_processes_answer(struct req *r);

/* --------------------------------------------------- api/http_stream.c */

/* Bytes at the end of p[0..n) that begin a UTF-8 character the next bytes
 * may complete (0..3). */
size_t api_utf8_incomplete_tail(const uint8_t *p, size_t n);

/* Does the request ask for a streamed exec (Accept: application/x-ndjson,
 * or text/event-stream: *sse)? */
bool api_stream_wanted(struct MHD_Connection *c, bool *sse);
/* Start the decoded exec of r as a stream and queue its 200 reply, whose
 * events follow as the guest produces them. */
enum MHD_Result api_stream_start(struct req *r, bool sse);
void api_stream_free(struct api_stream *s);

/* ----------------------------------------------------- api/http_conn.c */

/* The receive deadlines of the server's connections: a thread shuts down
 * every connection that has not delivered a whole request within
 * timeout_ms of being accepted or of sending its previous reply. */
struct api_conns;
struct api_conns *api_conns_new(uint32_t timeout_ms, struct sbx_error *err);
/* Stop the sweeper and free; after MHD_stop_daemon. NULL is a no-op. */
void api_conns_free(struct api_conns *t);
/* MHD_OPTION_NOTIFY_CONNECTION with the table as cls. */
void api_conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
		     enum MHD_ConnectionNotificationCode toe);
/* The request on c is in (or answered): its deadline stops. */
void api_conn_received(struct MHD_Connection *c);
/* The reply on c went out: the next request's window starts now. */
void api_conn_rearm(struct MHD_Connection *c);
/* c is answered before its body was read and closes after the answer:
 * once libmicrohttpd has sent it, read and drop what the client still
 * sends, for a bounded time and number of bytes, before the socket goes
 * (a lingering close), so that a client still sending reads the answer
 * rather than a reset. */
void api_conn_linger(struct MHD_Connection *c);
/* From now, the request on c (its body, its work and its reply) has `ms`
 * in all, whatever it does meanwhile (a file transfer). */
void api_conn_deadline(struct MHD_Connection *c, uint32_t ms);
/* The connection was upgraded to a WebSocket (its own thread keeps its
 * deadlines): no receive deadline from now on. */
void api_conn_upgraded(struct MHD_Connection *c);

/* --------------------------------------------------- api/http_static.c */

/* The index in api_assets[] of the file served at `url`, or -1. */
int api_static_find(const char *url);
/* 200 with that file (GET; no auth). */
enum MHD_Result api_static_reply(struct MHD_Connection *c, int asset);
/* GET /v1/sandbox/executions?limit=: the account's newest executions
 * (what the dashboard lists; no stdout, see GET .../executions/{id}). */
enum MHD_Result api_execution_list_handle(struct req *r);

/* ---------------------------------------------------- api/http_async.c */

/* POST /v1/sandboxes: decode, then api_async_run. */
enum MHD_Result api_create_handle(struct req *r);
/* POST /v1/sandboxes/{id}/pause and .../resume: api_async_run (a save
 * or a restore takes seconds). */
enum MHD_Result api_pause_handle(struct req *r);
/* POST /v1/sandbox/executions: decode, then api_async_run. */
enum MHD_Result api_execution_handle(struct req *r);
/* Count r against its account's cap for its route, queue its create,
 * DELETE or execution on srv->pool and park the connection. 429 at the
 * cap, 503 when the pool's queue is full or the server stops. */
enum MHD_Result api_async_run(struct req *r);
/* The reply of a finished (or aborted) create/DELETE/execution. */
enum MHD_Result api_async_answer(struct req *r);

/* ------------------------------------------------------- api/metrics.c */

/* MHD_queue_response that remembers the status for the request metrics
 * (every reply of the tenant server goes through it). */
enum MHD_Result api_queue_response(struct MHD_Connection *c, unsigned status,
				   struct MHD_Response *resp);
/* The status this thread queued since the last call (0 = none). */
unsigned api_metrics_take_status(void);
/* Count one answered request: its route, status and time (us). */
void api_metrics_request(int route, unsigned status, int64_t us);
/* The request series of /metrics (by route and status, the latency
 * histograms), one per route that answered, into b. 0 or -1. */
int api_metrics_render_requests(struct sbx_buf *b);

#endif
