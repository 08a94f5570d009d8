/* util: errors, logging, time, bounded buffers, random ids, text encodings,
 * the byte-channel vocabulary shared by vmm/ and agentless/, and the
 * supervisor and the bounded pool that run periodic and blocking work.
 *
 * Depends on nothing in the project (libc and OpenSSL's RAND/EVP only).
 * Every function here is thread-safe unless it says otherwise.
 */
#ifndef SBX_UTIL_H
#define SBX_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- errors */

/* One table: code, HTTP status, stable `type` string (API.md "Conventions").
 * Only api/ turns a code into a response; everything else just fills
 * struct sbx_error. */
#define SBX_FOR_EACH_ERROR(X)                                                                      \
	X(SBX_OK, 200, "ok")                                                                       \
	X(SBX_E_INVALID_REQUEST, 400, "invalid_request")                                           \
	X(SBX_E_AUTHENTICATION, 401, "authentication_error")                                       \
	X(SBX_E_INSUFFICIENT_CREDIT, 402, "insufficient_credit")                                   \
	X(SBX_E_PERMISSION, 403, "permission_error")                                               \
	X(SBX_E_NOT_FOUND, 404, "not_found")                                                       \
	X(SBX_E_METHOD_NOT_ALLOWED, 405, "method_not_allowed")                                     \
	X(SBX_E_IDEMPOTENCY_CONFLICT, 409, "idempotency_conflict")                                 \
	X(SBX_E_TERMINAL_ATTACHED, 409, "terminal_attached")                                       \
	X(SBX_E_SANDBOX_NOT_RUNNING, 410, "sandbox_not_running")                                   \
	X(SBX_E_SANDBOX_PAUSED, 409, "sandbox_paused")                                             \
	X(SBX_E_SNAPSHOT_IN_USE, 409, "snapshot_in_use")                                           \
	X(SBX_E_PAYLOAD_TOO_LARGE, 413, "payload_too_large")                                       \
	X(SBX_E_UNSUPPORTED_MEDIA_TYPE, 415, "unsupported_media_type")                             \
	X(SBX_E_IDEMPOTENCY_MISMATCH, 422, "idempotency_mismatch")                                 \
	X(SBX_E_RATE_LIMITED, 429, "rate_limited")                                                 \
	X(SBX_E_CONCURRENCY_LIMIT, 429, "concurrency_limit")                                       \
	X(SBX_E_INTERNAL, 500, "api_error")                                                        \
	X(SBX_E_SANDBOX_ERROR, 500, "sandbox_error")                                               \
	X(SBX_E_SERVICE_UNAVAILABLE, 503, "service_unavailable")                                   \
	X(SBX_E_FILE_NOT_FOUND, 404, "file_not_found")                                             \
	X(SBX_E_RANGE_NOT_SATISFIABLE, 416, "range_not_satisfiable")                               \
	X(SBX_E_INSUFFICIENT_STORAGE, 507, "insufficient_storage")                                 \
	X(SBX_E_PORT_UNREACHABLE, 502, "port_unreachable")                                         \
	X(SBX_E_PORT_TIMEOUT, 504, "port_timeout")

enum sbx_code {
#define SBX_X_ENUM(code, status, type) code,
	SBX_FOR_EACH_ERROR(SBX_X_ENUM)
#undef SBX_X_ENUM
	    SBX_CODE_COUNT
};

/* An error travels up as the last argument of every fallible call.
 * `message` is one lowercase sentence safe to show a tenant (no host paths,
 * SQL or XML); details for operators go to the log instead. */
struct sbx_error {
	enum sbx_code code;
	char message[256];
	char param[64];	   /* field to blame, "" when none */
	int retry_after_s; /* for 429/503, 0 when none */
};

/* HTTP status / stable type string of a code. */
int sbx_code_status(enum sbx_code code);
const char *sbx_code_type(enum sbx_code code);

/* Fill `err` (which may be NULL) and return -1, so callers can write
 * `return sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such sandbox '%s'", id);`.
 * `param` may be NULL. */
int sbx_error_set(struct sbx_error *err, enum sbx_code code, const char *param, const char *fmt,
		  ...) __attribute__((format(printf, 4, 5)));
/* Reset to SBX_OK. */
void sbx_error_clear(struct sbx_error *err);

/* --------------------------------------------------------------- logging */

enum sbx_log_level { SBX_LOG_DEBUG, SBX_LOG_INFO, SBX_LOG_WARN, SBX_LOG_ERROR };
/* Lines go to stderr, one per call. SBX_LOG_TEXT (the default):
 * "2026-11-29T19:40:00.123Z level module: message", then " request_id=R"
 * (and account_id=, sandbox_id=) when this thread has a log context.
 * SBX_LOG_JSON: one object per line, {"time","level","module","message"}
 * plus "request_id", "account_id", "sandbox_id" when known. Set the
 * format once at start, before other threads log. */
enum sbx_log_format { SBX_LOG_TEXT, SBX_LOG_JSON };
void sbx_log_set_level(enum sbx_log_level level);
void sbx_log_set_format(enum sbx_log_format format);
/* The calling thread's log context (thread-local): lines it logs carry
 * these until the next call. Each string is copied (at most 63 bytes);
 * NULL or "" = unknown. The HTTP handler sets it per request. */
void sbx_log_context_set(const char *request_id, const char *account_id, const char *sandbox_id);
/* This thread's request id, "" when none (borrowed, thread-local). */
const char *sbx_log_request_id(void);
void sbx_log(enum sbx_log_level level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define sbx_debug(mod, ...) sbx_log(SBX_LOG_DEBUG, mod, __VA_ARGS__)
#define sbx_info(mod, ...)  sbx_log(SBX_LOG_INFO, mod, __VA_ARGS__)
#define sbx_warn(mod, ...)  sbx_log(SBX_LOG_WARN, mod, __VA_ARGS__)
#define sbx_err(mod, ...)   sbx_log(SBX_LOG_ERROR, mod, __VA_ARGS__)

/* ------------------------------------------------------------------ time */

/* Milliseconds: monotonic clock (deadlines, durations). */
int64_t sbx_mono_ms(void);
/* Milliseconds since the Unix epoch, UTC wall clock. */
int64_t sbx_wall_ms(void);
/* Sleep `ms` milliseconds (negative = 0), the whole of it across signals. */
void sbx_sleep_ms(int64_t ms);
/* The instant `ms` milliseconds (negative = 0) from now on `clock`, as
 * pthread_cond_timedwait wants it: CLOCK_REALTIME for a default condition
 * variable, CLOCK_MONOTONIC for one set up with pthread_condattr_setclock. */
struct timespec sbx_timespec_in(clockid_t clock, int64_t ms);
/* "2026-08-22T14:31:00Z" (seconds precision, UTC) into buf (>= 21 bytes). */
void sbx_rfc3339(int64_t epoch_ms, char buf[static 32]);
/* Parse an RFC 3339 timestamp ("...Z" or with numeric offset, optional
 * fraction) into epoch ms. Returns 0, or -1 when malformed. */
int sbx_rfc3339_parse(const char *s, int64_t *epoch_ms);

/* --------------------------------------------------------------- cleanup */

static inline void sbx_freep(void *p)
{
	free(*(void **)p);
}
static inline void sbx_closep(int *fd)
{
	if (*fd >= 0)
		close(*fd);
}
#define _cleanup_(f)	__attribute__((cleanup(f)))
#define _cleanup_free_	_cleanup_(sbx_freep)
#define _cleanup_close_ _cleanup_(sbx_closep)
/* Hand ownership on: returns the pointer and NULLs the variable. */
#define TAKE_PTR(p)                                                                                \
	({                                                                                         \
		__typeof__(p) take_ptr_tmp_ = (p);                                                 \
		(p) = NULL;                                                                        \
		take_ptr_tmp_;                                                                     \
	})

/* ------------------------------------------------------- bounded buffers */

/* A growable byte buffer that never grows past `max` bytes (curl dynbuf).
 * The data is always followed by a NUL that `len` does not count. */
struct sbx_buf {
	char *data;
	size_t len;
	size_t cap;
	size_t max;
};
void sbx_buf_init(struct sbx_buf *b, size_t max);
/* Append; returns 0, or -1 (nothing appended) if it would exceed max or
 * memory runs out. */
int sbx_buf_append(struct sbx_buf *b, const void *data, size_t len);
int sbx_buf_printf(struct sbx_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Give the caller the data (free() it); the buffer is empty afterwards. */
char *sbx_buf_steal(struct sbx_buf *b, size_t *len);
void sbx_buf_release(struct sbx_buf *b);

/* --------------------------------------------------------- random & ids */

/* Cryptographically random bytes (OpenSSL RAND_bytes). 0 or -1. */
int sbx_random_bytes(void *out, size_t len);
/* `prefix` followed by 2*nbytes lowercase hex digits into out (size outlen).
 * e.g. sbx_random_id("sbx_", 12, buf, sizeof buf) -> "sbx_1f..(24 hex)". */
int sbx_random_id(const char *prefix, size_t nbytes, char *out, size_t outlen);
/* Lowercase hex of `len` bytes into out (2*len+1 bytes). */
void sbx_hex(const void *in, size_t len, char *out);
/* SHA-256 of data as 64 lowercase hex digits + NUL. */
void sbx_sha256_hex(const void *data, size_t len, char out[static 65]);
/* Constant-time comparison of two equal-length byte strings. */
bool sbx_ct_equal(const void *a, const void *b, size_t len);

/* ------------------------------------------------------------- encodings */

/* Copy `len` bytes as valid UTF-8 into a new NUL-terminated string:
 * each byte that is not part of a well-formed sequence (RFC 3629) becomes
 * U+FFFD; NUL bytes are kept (so use *out_len, not strlen). When
 * `cut_tail` is set, an incomplete sequence at the very end (a cap that cut
 * a character) is dropped instead of replaced. Returns NULL on ENOMEM. */
char *sbx_utf8_sanitize(const char *in, size_t len, bool cut_tail, size_t *out_len);
/* Standard base64 (RFC 4648, with padding) as a new NUL-terminated string. */
char *sbx_base64_encode(const void *in, size_t len);
/* Decode standard padded base64 (length a multiple of 4, '=' only at the
 * end) into new bytes (NUL-terminated for convenience, *out_len without
 * it). NULL when the text is not such base64, or on ENOMEM. */
char *sbx_base64_decode(const char *in, size_t len, size_t *out_len);

/* ------------------------------------------------------ the byte channel */

/* A byte pipe to one guest's exec port. vmm/ provides it (a libvirt stream
 * or a unix socket); agentless/ speaks the protocol over it and never sees
 * what is underneath.
 *
 * Inbound bytes are pushed: the provider calls `sbx_recv_fn` from its own
 * thread with each chunk it reads (len > 0), in order, never concurrently,
 * and once with len == 0 when the channel is closed or broken (EOF). After
 * the EOF call, or after `close` returns, it is never called again. */
typedef void (*sbx_recv_fn)(void *opaque, const void *buf, size_t len);

struct sbx_channel {
	void *ctx;
	/* Queue all `len` bytes for the guest, in order, without blocking:
	 * one call's bytes are never interleaved with another's, so a whole
	 * frame goes in one call. 0, or -1 on a broken channel or a full
	 * queue (which breaks it). Bytes the guest does not read by the
	 * provider's deadline break the channel: recv then gets EOF. Any
	 * thread, but not after `close`. */
	int (*send)(void *ctx, const void *buf, size_t len);
	/* Flow control by the peer's credit (both NULL for a provider without
	 * it). `send_window` queues like send, then starts a window at the
	 * end of those bytes: from there on at most `window` bytes are written
	 * past what the peer acknowledged (window 0: no limit again). Bytes
	 * beyond the window wait in the queue under the same deadline.
	 * `credit`: the peer has consumed `acked` bytes past the start of the
	 * window (cumulative). 0, or -1 when no window is open, when acked is
	 * below an earlier credit, or when it is more than was written since
	 * the start (a lie: the caller breaks the channel). Any thread. */
	int (*send_window)(void *ctx, const void *buf, size_t len, size_t window);
	int (*credit)(void *ctx, uint64_t acked);
	/* Back-pressure on input (NULL for a provider without it): deliver
	 * nothing more for `ms` milliseconds and leave the peer's bytes
	 * unread meanwhile, so a peer that keeps writing blocks. Called from
	 * inside the recv callback (the provider stops its current burst of
	 * reads too) or from any thread while the channel is open. */
	void (*hold_rx)(void *ctx, int64_t ms);
	/* Stop delivery, wait until no recv callback is running, free ctx.
	 * Must not be called from inside the recv callback. */
	void (*close)(void *ctx);
};

/* ----------------------------------------------------- service manager */

/* Tell the service manager (systemd, Type=notify) about a state change,
 * e.g. "READY=1" or "STOPPING=1", with the sd_notify(3) datagram protocol
 * on the AF_UNIX socket named by $NOTIFY_SOCKET (a path, or "@name" for
 * the abstract namespace). No libsystemd. Returns 1 when sent, 0 when
 * $NOTIFY_SOCKET is unset (not run by systemd), -1 on an error. */
int sbx_notify(const char *state);

/* ---------------------------------------------------------------- misc */

#define SBX_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define SBX_MIN(a, b)	  ((a) < (b) ? (a) : (b))
#define SBX_MAX(a, b)	  ((a) > (b) ? (a) : (b))

/* Create a directory and its parents with exactly `mode` (chmod after
 * mkdir: the process umask does not narrow it); existing ones are left as
 * they are. */
int sbx_mkdir_p(const char *path, unsigned mode);
/* Read a whole small file (up to max bytes) into a new NUL-terminated
 * string. NULL with errno on failure or when larger than max. */
char *sbx_read_file(const char *path, size_t max, size_t *len);
/* Write data to path atomically (tmp + rename) with `mode`. 0 or -1. */
int sbx_write_file(const char *path, const void *data, size_t len, unsigned mode);

/* ------------------------------------------------------------- metrics
 * Process-wide counters and latency histograms (util/metrics.c), lock-free
 * so any thread may count. api/metrics.c serves them as Prometheus text on
 * the operator's address (docs/operations.md). */

enum sbx_counter {
	SBX_C_CHANNEL_VIOLATIONS,     /* guests that broke the exec protocol */
	SBX_C_CHANNEL_SEND_DEADLINES, /* channels broken: the guest stopped reading */
	SBX_C_CHANNEL_BROKEN,	      /* channels broken for any reason */
	SBX_C_BOOT_FAILURES,	      /* guests that did not become ready */
	SBX_C_COUNT
};
enum sbx_hist {
	SBX_H_BOOT,	/* domain start -> HELLO */
	SBX_H_EXEC,	/* EXEC sent -> EXIT received */
	SBX_H_STORE_TX, /* a write transaction, BEGIN -> COMMIT */
	SBX_H_COUNT
};
#define SBX_HIST_BUCKETS 12 /* 1 ms .. 30 s, plus +Inf */

void sbx_counter_add(enum sbx_counter c, uint64_t n);
uint64_t sbx_counter_get(enum sbx_counter c);
/* Record one observation, in microseconds. */
void sbx_hist_observe_us(enum sbx_hist h, int64_t us);
/* The bucket index of an observation (SBX_HIST_BUCKETS: above the last). */
size_t sbx_hist_bucket_of(int64_t us);
/* One histogram as Prometheus text lines (`labels` "" or `k="v",...`);
 * bucket[] holds per-bucket (not cumulative) counts. 0 or -1. */
int sbx_hist_render(struct sbx_buf *b, const char *name, const char *labels,
		    const uint64_t bucket[SBX_HIST_BUCKETS], uint64_t count, uint64_t sum_us);
/* Every counter and histogram above, with HELP and TYPE lines. 0 or -1. */
int sbx_metrics_render(struct sbx_buf *b);

/* ------------------------------------------- periodic work, blocking work
 * Two mechanisms every module may use for work that is not a request's:
 * a supervisor (util/cron.c) runs registered periodic tasks on one thread,
 * and a bounded pool (util/workpool.c) runs blocking jobs on a bounded set
 * of threads. docs/lifecycle.md "Threads" says which work goes where. */

/* A supervisor: one thread wakes every tick_ms and runs, in the order they
 * were added, the tasks whose period has passed (redis's serverCron with
 * run_with_period). A task is armed by the first pass that sees it and
 * runs first one period later, then once per period: due when now_mono
 * reaches its last due time plus its period; a task that fell a whole
 * period behind (a slow pass) runs once and counts its period from now
 * (no burst of catch-up runs). A period shorter than the tick means every
 * tick. A task runs with no lock of the supervisor held and must not
 * block for long: it delays every task behind it (blocking work goes to
 * a pool). Locking: the supervisor's lock is a leaf. */
typedef void (*sbx_cron_fn)(void *opaque, int64_t now_mono);
struct sbx_cron;
#define SBX_CRON_MAX_TASKS 16
/* A supervisor whose thread (named `thread_name`, <= 15 bytes) is not
 * started yet. NULL on ENOMEM. */
struct sbx_cron *sbx_cron_new(const char *thread_name, int64_t tick_ms);
/* Register task `name` (kept, not copied: a literal), run every period_ms
 * (>= 1) as fn(opaque, now_mono). Before or after start, any thread. 0, or
 * -1 when SBX_CRON_MAX_TASKS are registered or period_ms < 1. */
int sbx_cron_add(struct sbx_cron *c, const char *name, int64_t period_ms, sbx_cron_fn fn,
		 void *opaque);
/* Start the thread (once): its first pass, arming every task, runs at
 * once. 0, or -1 when the thread cannot be started. */
int sbx_cron_start(struct sbx_cron *c);
/* One pass at now_mono: arm the new tasks, run the due ones. The thread
 * calls it every tick; tests call it with made-up times on a supervisor
 * that is not started. Returns how many tasks ran. */
int sbx_cron_pass(struct sbx_cron *c, int64_t now_mono);
/* How many times task `name` ran (0 for an unknown name). */
uint64_t sbx_cron_runs(struct sbx_cron *c, const char *name);
/* Stop the thread: the pass under way finishes, none runs after this
 * returns. Idempotent; not from a task (it joins the thread). */
void sbx_cron_stop(struct sbx_cron *c);
/* Stop, then free. NULL is a no-op. */
void sbx_cron_free(struct sbx_cron *c);

/* A bounded pool for blocking work: at most `threads` jobs run at once;
 * jobs past the free threads wait in a FIFO of at most queue_max. Threads
 * start as jobs need them and each ends after idle_ms without a job (an
 * idle pool holds none), or all start at creation and stay with
 * SBX_WORKPOOL_EAGER (a fixed set). Every job accepted by submit is called
 * exactly once: fn(arg, false) on a pool thread, or fn(arg, true) on the
 * thread that stops the pool when it stops before the job ran (then the
 * job does its work there, or only releases arg: its owner's rule).
 * Stopping: sbx_workpool_stop cancels what waits (fn(arg, true));
 * sbx_workpool_drain lets the threads run what waits. Either refuses new
 * jobs from then on. Locking: the pool's lock is a leaf (taking it with
 * any other lock held is fine); jobs run without it. */
typedef void (*sbx_workpool_fn)(void *arg, bool cancelled);
struct sbx_workpool;
enum { SBX_WORKPOOL_EAGER = 1 };
/* How long a thread of a pool that is not eager waits for a job before it
 * ends, unless sbx_workpool_set_idle_ms said otherwise. */
#define SBX_WORKPOOL_IDLE_MS 30000
/* A pool of `threads` (>= 1) threads named `thread_name` (<= 15 bytes,
 * /proc/PID/task/TID/comm). NULL on ENOMEM, or when an EAGER pool could
 * not start its threads. */
struct sbx_workpool *sbx_workpool_new(const char *thread_name, int threads, int queue_max,
				      unsigned flags);
/* Queue a job. 0, or -1 (fn never called) when every thread is busy and
 * queue_max jobs already wait, or the pool stops. */
int sbx_workpool_submit(struct sbx_workpool *p, sbx_workpool_fn fn, void *arg);
/* Queue a job at most once per key: the periodic jobs (a health check
 * per host, a liveness round) that must never be queued twice. key (not
 * NULL; compared by pointer, never read: the object the job is for) is
 * busy from a submit that returned 0 until that job's fn returned, run or
 * cancelled; so a job that submits itself again under its own key from
 * inside fn gets 1 (the next pass queues it). 0: queued; 1: a job with
 * this key is queued or running, fn not called and arg untouched (the
 * caller frees it); -1: as sbx_workpool_submit (also for a NULL key), fn
 * not called. A stopping pool answers -1 whatever the key. */
int sbx_workpool_submit_once(struct sbx_workpool *p, const void *key, sbx_workpool_fn fn,
			     void *arg);
/* A thread of a pool that is not eager ends after idle_ms (>= 1) without
 * a job; threads idle now count from the new value. Any time. */
void sbx_workpool_set_idle_ms(struct sbx_workpool *p, int64_t idle_ms);
struct sbx_workpool_stats {
	int threads; /* started and not ended: running a job, or idle */
	int running; /* jobs running */
	int queued;  /* jobs waiting for a thread */
	int keyed;   /* of those queued or running (or being cancelled), the
		      * ones submit_once queued: keys busy */
};
void sbx_workpool_stats(struct sbx_workpool *p, struct sbx_workpool_stats *st);
/* Refuse new jobs and cancel the queued ones (fn(arg, true), on this
 * thread); running jobs go on. Idempotent. */
void sbx_workpool_stop(struct sbx_workpool *p);
/* Refuse new jobs, and wait until the threads have run every queued job
 * and none runs. Idempotent; not from a job (it would wait for itself). */
void sbx_workpool_drain(struct sbx_workpool *p);
/* Stop, wait for the running jobs, join the threads, free. NULL is a no-op. */
void sbx_workpool_free(struct sbx_workpool *p);

/* ------------------------------------------------------------ WebSocket
 * util/ws.c: WebSocket framing (RFC 6455), shared by the daemon's terminal
 * route (api/http_terminal.c) and the CLI's client (cli/shell.c). Pure
 * encode/decode over caller buffers: no I/O, no allocation.
 *
 * A frame: byte 0 FIN (0x80), RSV1-3 (must be 0: no extension is ever
 * negotiated), opcode; byte 1 MASK (0x80) and a 7-bit length (126: a u16
 * follows, 127: a u64 whose top bit is 0); the 4-byte mask key when MASK;
 * then the payload, XORed with the key when masked. Clients must mask,
 * servers must not (a peer that breaks this is refused). Control frames
 * (close, ping, pong) carry at most 125 bytes and are never fragmented.
 */
enum ws_opcode {
	WS_OP_CONT = 0x0,
	WS_OP_TEXT = 0x1,
	WS_OP_BINARY = 0x2,
	WS_OP_CLOSE = 0x8,
	WS_OP_PING = 0x9,
	WS_OP_PONG = 0xA,
};

/* Close codes used here. */
#define WS_CLOSE_NORMAL	  1000
#define WS_CLOSE_GOING	  1001
#define WS_CLOSE_PROTOCOL 1002
#define WS_CLOSE_TOO_BIG  1009
#define WS_CLOSE_POLICY	  1008
#define WS_CLOSE_INTERNAL 1011
#define WS_HEADER_MAX	  14 /* 2 + 8 (length) + 4 (mask) */
#define WS_CONTROL_MAX	  125
#define WS_ACCEPT_LEN	  28 /* base64 of a SHA-1 */

struct ws_frame {
	bool fin;
	uint8_t opcode;
	bool masked;
	uint8_t mask[4];
	uint64_t len;	/* payload bytes */
	size_t hdr_len; /* bytes of the header (payload starts there) */
};

/* Parse a frame header from buf[0..n). `want_mask`: 1 the frame must be
 * masked (a server reading a client), 0 it must not (a client reading a
 * server). Returns 1 and fills f; 0 when more bytes are needed; -1 when
 * malformed: RSV bits, an unknown opcode, a control frame fragmented or
 * over 125 bytes, a 64-bit length with its top bit set or a length not in
 * its shortest form, the wrong masking, or a payload over max_payload. */
int ws_frame_parse(const uint8_t *buf, size_t n, bool want_mask, uint64_t max_payload,
		   struct ws_frame *f);
/* XOR p[0..len) with the key, starting at payload offset `offset`. */
void ws_mask(uint8_t *p, size_t len, const uint8_t key[4], uint64_t offset);
/* Encode a frame header into out (WS_HEADER_MAX bytes); `key` NULL for an
 * unmasked frame. Returns its length. The caller masks the payload. */
size_t ws_header_encode(uint8_t out[WS_HEADER_MAX], uint8_t opcode, bool fin, uint64_t len,
			const uint8_t *key);
/* Sec-WebSocket-Accept of a Sec-WebSocket-Key: out gets 28 chars + NUL.
 * 0, or -1 when the key is not 24 chars of base64 (16 bytes). */
int ws_accept(const char *key, char out[WS_ACCEPT_LEN + 1]);

#endif
