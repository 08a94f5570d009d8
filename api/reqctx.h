/* api/reqctx: the request id of every HTTP request (X-Request-Id) and
 * the log context of the thread that handles it. Kept out of http.c so
 * that the HTTP handler needs only three calls:
 *
 *   api_reqctx_begin(c, r->request_id)   when a request arrives
 *   api_reqctx_enter(rid, account, id)   at each later handler call
 *   api_reqctx_header(resp)              before each MHD_queue_response
 *
 * Thread-safe: the context is thread-local (util's sbx_log_context_set).
 */
#ifndef SBX_API_REQCTX_H
#define SBX_API_REQCTX_H

#include <microhttpd.h>

/* Room for a request id and its NUL. */
#define API_REQUEST_ID_MAX 65

/* The client's X-Request-Id when sane (1..64 bytes of [A-Za-z0-9._:/+=-]),
 * else a new "req_" + 24 hex digits, into out; also makes it this thread's
 * log context. */
void api_reqctx_begin(struct MHD_Connection *c, char out[static API_REQUEST_ID_MAX]);
/* Make a known request this thread's log context again (a handler call
 * may run on another worker thread than the last one). `account_id` and
 * `sandbox_id` may be "" or NULL. */
void api_reqctx_enter(const char *request_id, const char *account_id, const char *sandbox_id);
/* Add "X-Request-Id: <this thread's request id>" to a response (nothing
 * when the thread has none). */
void api_reqctx_header(struct MHD_Response *resp);

#endif
