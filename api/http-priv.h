/* api/http-priv.h: what the files of the HTTP server (api/http*.c) share:
 * the server and request structs, the reply helpers and the entry points of
 * each use case's file. Not for other modules.
 *
 * Locking: srv->lock guards the server's counters, the list of suspended
 * requests and every request's exec state (state, result, refs). It is
 * held around MHD_suspend_connection/MHD_resume_connection so that a
 * completion never resumes a connection that is not (yet) suspended. */
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
	R_STATIC,	  /* a compiled-in file (http_static.c): r->asset */
};

enum exec_state {
	EXEC_NONE,	/* no exec started */
	EXEC_RUNNING,	/* started, connection not suspended (yet) */
	EXEC_SUSPENDED, /* connection suspended, waiting for the callback */
	EXEC_DONE,	/* callback ran: res or exec_err holds the outcome */
	EXEC_ABORTED,	/* the server is stopping: answered 503 */
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
	struct api_workpool *pool;	  /* runs create, DELETE, executions */
	struct api_inflight *per_account; /* their counts (and execs') per account */
	struct api_files_ctx *files;	  /* the files routes (http_files.c) */
	struct api_runtimes runtimes;	  /* read at start, then constant */
};

struct req {
	struct api_server *srv;
	struct MHD_Connection *conn;
	enum route route;
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
	struct sandbox_exec_result res; /* buffers owned when has_res */
	bool has_res;
	struct sbx_error exec_err;
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
	struct api_files *files; /* R_FILES */
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

/* ---------------------------------------------------------- api/http.c */

/* Queue a JSON reply (takes `o`; NULL answers 500 out of memory), with
 * Retry-After when retry_after_s > 0 and Allow when `allow` is set. */
enum MHD_Result api_reply_json(struct MHD_Connection *c, unsigned status, struct json_object *o,
			       int retry_after_s, const char *allow);
/* The error reply of err (its status, type and message; 5xx detail logged). */
enum MHD_Result api_reply_error(struct MHD_Connection *c, const struct sbx_error *err);
enum MHD_Result api_reply_error_allow(struct MHD_Connection *c, const struct sbx_error *err,
				      const char *allow);
enum MHD_Result api_reply_new_error(struct MHD_Connection *c, enum sbx_code code, const char *param,
				    const char *msg);
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

/* POST /v1/sandboxes/{id}/exec: start the command and park the connection. */
enum MHD_Result api_exec_handle(struct req *r);
/* Take r's per-account exec count and start its decoded exec with `done`
 * (opaque r, holding a ref of r). 0, or -1 with err (count given back). */
int api_exec_begin(struct req *r, sandbox_exec_done_fn done, struct sbx_error *err);
/* The reply of a finished (or aborted) exec, when MHD calls again. */
enum MHD_Result api_exec_answer(struct req *r);

/* ------------------------------------------------ api/http_processes.c */

/* The route of "/v1/sandboxes/{id}/processes" + rest (the pid into *pid),
 * or R_NONE. */
enum route api_processes_resolve(const char *rest, uint32_t *pid);
/* Every processes route: decode, ask the guest, park the connection. */
enum MHD_Result api_processes_handle(struct req *r, const char *method);

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

/* --------------------------------------------------- api/http_static.c */

/* The index in api_assets[] of the file served at `url`, or -1. */
int api_static_find(const char *url);
/* 200 with that file (GET; no auth). */
enum MHD_Result api_static_reply(struct MHD_Connection *c, int asset);
/* nosniff, a Content-Security-Policy (a page's when `page`, else one that
 * allows nothing), no framing, no referrer: on every reply. */
void api_security_headers(struct MHD_Response *resp, bool page);
/* GET /v1/sandbox/executions?limit=: the account's newest executions
 * (what the dashboard lists; no stdout, see GET .../executions/{id}). */
enum MHD_Result api_execution_list_handle(struct req *r);

/* ---------------------------------------------------- api/http_async.c */

/* POST /v1/sandboxes: decode, then api_async_run. */
enum MHD_Result api_create_handle(struct req *r);
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

#endif
