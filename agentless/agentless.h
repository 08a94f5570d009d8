/* agentless: the host side of the exec protocol (wire format in wire.h)
 * over a struct sbx_channel that vmm/ provides. Never sees a libvirt type.
 *
 * One struct agentless_conn per guest. It is multiplexed: many execs may be
 * in flight, each tagged with an id the host picks; frames from the guest
 * are matched to in-flight execs by id and anything else (unknown id,
 * unsolicited type, oversized or malformed frame) is a protocol violation
 * that breaks the connection. The guest is hostile: every length is checked
 * before allocation, and each exec's buffered output never exceeds the caps
 * the host asked for (bytes beyond are a violation too).
 *
 * Flow control toward the guest (protocol v4): the WELCOME to a v4 guest
 * over a channel that has the window ops (the stream transport) opens the
 * channel's credit window (sbx_channel.send_window, 128 KiB) and
 * the guest's CREDIT frames move it (sbx_channel.credit), so a guest that
 * stops reading never has more than the window in flight outside the
 * channel's own queue; a CREDIT the channel refuses (back, or past what
 * was written) is a violation. A guest that does not CREDIT (older than
 * v4, or saying v3 or nothing after a reattach) gets the same window,
 * confirmed by the host's own PINGs (a PONG proves every byte before its
 * PING read; docs/protocol.md), and is refused frames over half the
 * window. Channels without those ops (the socket transport) send
 * unbounded; their WELCOME has no WINDOW.
 *
 * Threads: agentless_conn_recv() runs on the channel provider's thread;
 * everything else may be called from any thread. Completion callbacks run on
 * the recv thread, or on the thread that calls agentless_conn_tick() or
 * agentless_conn_free(), never with an internal lock held.
 */
#ifndef SBX_AGENTLESS_H
#define SBX_AGENTLESS_H

#include <stdbool.h>
#include <stdint.h>

#include "../util/util.h"

struct agentless_conn;

struct agentless_limits {
	/* Extra time the host waits past an exec's timeout_ms before it gives
	 * up on the guest (sends KILL, then fails the exec with
	 * SBX_E_SANDBOX_ERROR). ms. */
	uint32_t backstop_grace_ms;
	/* Max execs in flight on this connection; more -> SBX_E_RATE_LIMITED. */
	uint32_t max_inflight;
	/* A file transfer that waits this long on the guest (its credit
	 * unused, its answer not given) fails with SBX_E_SANDBOX_ERROR and is
	 * aborted; the sandbox keeps working. ms; 0 = 30000. */
	uint32_t xfer_stall_ms;
};

/* The frame budget (docs/protocol.md, "The frame budget"). Every frame
 * from the guest costs the host the same parsing and dispatch, however
 * little it carries, so a connection takes at most AGENTLESS_FRAMES_PER_S
 * frames a second from its guest, with bursts of AGENTLESS_FRAME_BURST.
 * Past that it holds the channel's input (sbx_channel.hold_rx) until the
 * guest is back within the budget: the guest's bytes stay unread, its own
 * writes block, and the flood costs its own vCPUs. A channel that cannot
 * hold its input (no hold_rx: the stream transport, where libvirt queues
 * whatever the guest sends) lets a guest run AGENTLESS_FRAME_DEBT_MAX
 * frames past the budget at most: then it is flooding, a protocol
 * violation. The guest's own agent ships output in frames of up to
 * WIRE_MAX_CHUNK bytes and never comes near the budget. */
#define AGENTLESS_FRAMES_PER_S	 100000
#define AGENTLESS_FRAME_BURST	 100000
#define AGENTLESS_FRAME_DEBT_MAX (2 * AGENTLESS_FRAMES_PER_S)

/* Called once, on the recv thread, when the channel breaks (EOF, I/O error)
 * or the guest violates the protocol, after every in-flight exec was failed
 * with SBX_E_SANDBOX_ERROR. `why` is for the log. Must not free the conn. */
typedef void (*agentless_broken_fn)(void *opaque, const char *why);

/* Create a connection object. The channel is attached later (the channel
 * needs the conn as its recv target). `on_broken` may be NULL. Never NULL
 * (aborts on ENOMEM). */
struct agentless_conn *agentless_conn_new(const struct agentless_limits *lim,
					  agentless_broken_fn on_broken, void *opaque);

/* Give the conn its channel; the conn owns it from now on and closes it in
 * agentless_conn_free() (or at once when the channel broke). Resets any
 * previous handshake state: the host waits for a fresh HELLO, or, when
 * `reattach` is set (reconnecting to a guest that already said HELLO to a
 * previous daemon or channel), sends WELCOME right away. */
void agentless_conn_attach(struct agentless_conn *c, struct sbx_channel ch, bool reattach);

/* The sbx_recv_fn to hand to vmm/ with the conn as opaque. */
void agentless_conn_recv(void *conn, const void *buf, size_t len);

/* Block until the guest's HELLO was received and answered with WELCOME
 * (which carries the host's wall clock), or until the monotonic deadline
 * (ms, sbx_mono_ms()). 0, or -1 with SBX_E_SANDBOX_ERROR (channel broke,
 * bad version) / SBX_E_SERVICE_UNAVAILABLE (deadline). */
int agentless_conn_wait_hello(struct agentless_conn *c, int64_t deadline_ms, struct sbx_error *err);

/* Round trip of a PING with `len` bytes of payload (the raw echo floor).
 * Returns the round trip in microseconds, or -1. */
int64_t agentless_conn_ping(struct agentless_conn *c, size_t len, int64_t deadline_ms,
			    struct sbx_error *err);

/* The same in two steps, so one thread can have many pings in flight:
 * send a PING (no payload) and return its handle, or NULL with err; then
 * wait for its PONG until the deadline, which also frees the handle (call
 * it exactly once per handle, before agentless_conn_free). */
struct agentless_ping;
struct agentless_ping *agentless_conn_ping_send(struct agentless_conn *c, struct sbx_error *err);
int64_t agentless_conn_ping_wait(struct agentless_conn *c, struct agentless_ping *p,
				 int64_t deadline_ms, struct sbx_error *err);

/* Send the host's wall clock (WIRE_TIME). 0 or -1. */
int agentless_conn_send_time(struct agentless_conn *c, struct sbx_error *err);

/* The protocol version negotiated with the guest (0 before HELLO). */
uint32_t agentless_conn_version(struct agentless_conn *c);

/* True while the channel works and the handshake is done. */
bool agentless_conn_alive(struct agentless_conn *c);

/* The output of a streamed exec as it arrives: called on the recv thread
 * with no agentless lock held, with the bytes of one or more STDOUT (or
 * STDERR) frames of the exec that arrived back to back (gathered: len <=
 * WIRE_MAX_CHUNK), in order, never concurrently with another call
 * for the same exec and always before its done. `opaque` is done's. Must
 * not block. Return true to ask the guest to stop reading the exec's pipes
 * (PAUSE, protocol v3; an older guest keeps shipping, still within the
 * caps) until agentless_exec_resume(). */
typedef bool (*agentless_output_fn)(void *opaque, uint32_t exec_id, bool is_stderr,
				    const void *data, size_t len);

/* The cost of output as it arrives: called on the recv thread with no
 * agentless lock held, before the bytes of a STDOUT/STDERR frame of the
 * exec are kept (or passed to on_output), with their count. Return false
 * when they cannot be paid for: a buffered exec then keeps no more of
 * that stream (the result says truncated, as at a cap); a streamed exec
 * passes them on all the same (its consumer bounds itself). Must not
 * block. */
typedef bool (*agentless_charge_fn)(void *opaque, bool is_stderr, size_t len);

struct agentless_exec_req {
	const char *command; /* bytes, not NUL-terminated necessarily */
	size_t command_len;
	const char *cwd;	/* NUL-terminated absolute path */
	const char *const *env; /* "KEY=VALUE" strings, validated by the caller */
	size_t n_env;
	uint32_t timeout_ms; /* >= 1 */
	uint32_t stdout_cap; /* bytes kept per stream */
	uint32_t stderr_cap;
	/* Optional (protocol v2): bytes the command reads on stdin, then EOF;
	 * NULL = stdin at EOF. A guest that negotiated version 1 cannot take
	 * it: agentless_exec_start() refuses with SBX_E_SANDBOX_ERROR. */
	const char *stdin_data;
	size_t stdin_len;
	/* Optional (protocol v2): run as this user of the guest (a name in its
	 * /etc/passwd); NULL = root. Refused like stdin_data on a v1 guest. */
	const char *user;
	/* Optional: stream the output to this callback instead of buffering
	 * it; the result's buffers are then empty (totals and truncated still
	 * hold). The caps hold as for a buffered exec. A v3 guest ships each
	 * read at once (STREAM); an older one in full chunks and at the end. */
	agentless_output_fn on_output;
	/* Optional: charge each frame's bytes before they are kept. */
	agentless_charge_fn charge;
	/* Optional (protocol v5): a terminal. With rows and cols (1..
	 * AGENTLESS_PTY_DIM_MAX) the guest runs the user's login shell on a
	 * pseudo-terminal instead of the command (command is then ignored but
	 * sent), its output streamed to on_output (required) with no cap;
	 * agentless_pty_write / _resize reach it. Refused with
	 * SBX_E_SANDBOX_ERROR on an older guest. */
	uint32_t pty_rows, pty_cols;
	/* Optional: a terminal's input window moved (the guest consumed
	 * bytes): on the recv thread, no lock held, opaque = done's; must not
	 * block. */
	void (*on_pty_ack)(void *opaque);
	/* Optional: the exec's id is written here before its EXEC is sent. */
	uint32_t *id_out;
};

/* The outcome of one exec. Buffers are owned by the result: free with
 * agentless_exec_result_release(). stdout/stderr hold the kept head of
 * each stream (raw bytes, may contain NUL, NUL-terminated for
 * convenience). */
struct agentless_exec_result {
	char *stdout_buf;
	size_t stdout_len;
	char *stderr_buf;
	size_t stderr_len;
	int exit_code;	      /* status, or 128+signal; 137 on timeout */
	uint32_t duration_ms; /* measured in the guest: informative only */
	/* Measured on the host (monotonic): EXEC sent -> EXIT received, in
	 * ms. May pass timeout_ms by up to the backstop grace plus transit:
	 * clamp it to the timeout before billing or signing it. */
	uint32_t host_ms;
	bool timed_out;
	bool truncated;	       /* either stream was cut at its cap */
	uint64_t stdout_total; /* bytes the command wrote, kept or not */
	uint64_t stderr_total;
};
void agentless_exec_result_release(struct agentless_exec_result *r);

/* Called exactly once per started exec. On success `err` is NULL and the
 * callback takes ownership of *res (move it out, then release it). On
 * failure `res` is NULL and err says why: SBX_E_INVALID_REQUEST (+param,
 * e.g. "cwd") when the guest refused the request, SBX_E_SANDBOX_ERROR when
 * the guest died or broke the protocol or missed the backstop deadline. */
typedef void (*agentless_exec_done_fn)(void *opaque, struct agentless_exec_result *res,
				       const struct sbx_error *err);

/* Start an exec. Returns 0 and later calls done exactly once (possibly
 * before this returns, on another thread); or returns -1 with err filled
 * (SBX_E_RATE_LIMITED at max_inflight, SBX_E_SANDBOX_ERROR when the channel
 * is down) and never calls done. */
int agentless_exec_start(struct agentless_conn *c, const struct agentless_exec_req *req,
			 agentless_exec_done_fn done, void *opaque, struct sbx_error *err);

/* Background processes live in the guest (wire.h WIRE_PROC): each output
 * stream keeps its last AGENTLESS_PROC_RING bytes there, an OUTPUT reply
 * carries at most AGENTLESS_PROC_CHUNK bytes of each, and the guest keeps at
 * most AGENTLESS_PROC_MAX processes (running and ended). */
#define AGENTLESS_PROC_RING  (1024 * 1024)
#define AGENTLESS_PROC_CHUNK (30 * 1024)
#define AGENTLESS_PROC_MAX   64

/* The answer to a PROC request (protocol v3, wire.h): on success `payload`
 * (len bytes, borrowed for the call: the PROC_REPLY's, not yet checked:
 * the caller decodes it for its op and treats anything odd as the guest's
 * fault) and err NULL; otherwise payload NULL and err: SBX_E_NOT_FOUND
 * (the guest keeps no such pid), SBX_E_RATE_LIMITED (guest at its limit),
 * SBX_E_INVALID_REQUEST, SBX_E_SANDBOX_ERROR. Called exactly once, like
 * an exec's done (same threads, no lock held). */
typedef void (*agentless_proc_done_fn)(void *opaque, const uint8_t *payload, size_t len,
				       const struct sbx_error *err);

/* Send a PROC request (payload: its TLV fields, PROC_OP first). It counts
 * as an exec in flight (max_inflight) until answered; the backstop fails it
 * at timeout_ms + backstop_grace_ms. 0 and later done once, or -1 with err
 * and never done (SBX_E_SANDBOX_ERROR when the guest is older than v3:
 * "create a new sandbox"). */
int agentless_proc_call(struct agentless_conn *c, const void *payload, size_t len,
			uint32_t timeout_ms, agentless_proc_done_fn done, void *opaque,
			struct sbx_error *err);

/* Typed PROC calls (agentless/process.c): the request encoded, the reply
 * decoded and checked. */
#define AGENTLESS_PROC_CMD_HEAD 256 /* bytes of a command the list shows */

enum agentless_proc_op {
	AGENTLESS_PROC_START = 1, /* = WIRE_PROC_START ... */
	AGENTLESS_PROC_LIST,
	AGENTLESS_PROC_OUTPUT,
	AGENTLESS_PROC_STDIN,
	AGENTLESS_PROC_SIGNAL,
};

struct agentless_proc_req {
	enum agentless_proc_op op;
	uint32_t answer_ms; /* how long the guest gets to answer (backstop) */
	uint32_t pid;	    /* OUTPUT, STDIN, SIGNAL */
	/* START: like an exec's (no caps); timeout only when has_timeout */
	const char *command;
	size_t command_len;
	const char *cwd; /* NULL = /home/sandbox */
	const char *const *env;
	size_t n_env;
	bool has_timeout;
	uint32_t timeout_ms;
	const char *user;   /* NULL = root */
	uint32_t max_procs; /* running processes the guest may have */
	/* OUTPUT */
	uint64_t stdout_offset, stderr_offset;
	/* STDIN */
	const char *data;
	size_t data_len;
	bool close;
	/* SIGNAL: 2, 9 or 15 */
	int signal;
};

struct agentless_proc_info {
	uint32_t pid; /* > 1 */
	char command[AGENTLESS_PROC_CMD_HEAD + 1];
	size_t command_len;
	int64_t started_at_ms; /* guest wall clock */
	bool running;
	int exit_code; /* 0..255 once ended */
};

struct agentless_proc_stream {
	uint64_t offset; /* where data starts: the offset asked, the oldest
			  * byte kept (wrapped), or the end (asked past it) */
	uint64_t lost;	 /* offset - asked when the ring wrapped, else 0 */
	uint64_t end;	 /* bytes written so far */
	char *data;	 /* owned, NUL-terminated, len <= AGENTLESS_PROC_CHUNK */
	size_t len;
};

struct agentless_proc_result {
	struct agentless_proc_info info;  /* START (pid, started), OUTPUT, SIGNAL (state before) */
	struct agentless_proc_info *list; /* LIST: n_list, owned */
	size_t n_list;
	struct agentless_proc_stream out, err; /* OUTPUT */
	uint32_t written;		       /* STDIN, <= data_len */
};
void agentless_proc_result_release(struct agentless_proc_result *r);

/* Called once: res (the callback owns it) or err; no lock held. */
typedef void (*agentless_proc_result_fn)(void *opaque, struct agentless_proc_result *res,
					 const struct sbx_error *err);
/* 0 and later done once, or -1 with err (agentless_proc_call's errors;
 * SBX_E_INVALID_REQUEST "command" when START's fields exceed
 * WIRE_MAX_PAYLOAD). */
int agentless_proc(struct agentless_conn *c, const struct agentless_proc_req *req,
		   agentless_proc_result_fn done, void *opaque, struct sbx_error *err);

/* Terminals (protocol v5, wire.h): keystrokes and the window size. The
 * host keeps at most AGENTLESS_PTY_WINDOW bytes of input in flight past the
 * guest's last PTY_ACK (a PTY_ACK that goes back or past what was sent is
 * a violation). */
#define AGENTLESS_PTY_WINDOW  (64u * 1024)
#define AGENTLESS_PTY_DIM_MAX 1000
/* Send up to len bytes to terminal exec_id: how many the window took now
 * (0: wait for on_pty_ack), or -1 when it is not an open terminal. Any
 * thread, one writer per terminal; never blocks. */
long agentless_pty_write(struct agentless_conn *c, uint32_t exec_id, const void *data, size_t len);
/* Set its window size (1..AGENTLESS_PTY_DIM_MAX each). 0, or -1. */
int agentless_pty_resize(struct agentless_conn *c, uint32_t exec_id, uint32_t rows, uint32_t cols);
/* Hang terminal exec_id up: KILL now (the guest sends SIGHUP, then kills
 * its cgroup a second later); it fails one backstop grace later if the
 * guest does not answer. 0, or -1 (not an open terminal). Never blocks. */
int agentless_pty_hangup(struct agentless_conn *c, uint32_t exec_id);

/* Let a streamed exec that its on_output paused run again (RESUME). A no-op
 * when the exec is not in flight (ended, unknown) or not paused. Any thread;
 * never blocks. */
void agentless_exec_resume(struct agentless_conn *c, uint32_t exec_id);

/* Synchronous wrapper for tools and tests. 0 and fills *res, or -1. */
int agentless_exec(struct agentless_conn *c, const struct agentless_exec_req *req,
		   struct agentless_exec_result *res, struct sbx_error *err);

/* Enforce host backstop deadlines (timeout_ms + backstop_grace_ms) at
 * monotonic time now_ms: KILL and fail overdue execs. Call every ~250 ms. */
void agentless_conn_tick(struct agentless_conn *c, int64_t now_ms);

/* Move the host backstop of the in-flight exec that was started with
 * `opaque` to deadline_ms (monotonic, sbx_mono_ms()): the first tick at or
 * after it sends KILL (the guest answers EXIT with timed_out set), and one
 * backstop_grace_ms later the exec fails with SBX_E_SANDBOX_ERROR. For an
 * exec started long before its program's run begins (a pre-started
 * interpreter). 0, or -1 when no such exec is in flight (or KILL was sent
 * already). */
int agentless_exec_set_deadline(struct agentless_conn *c, const void *opaque, int64_t deadline_ms);
/* ------------------------------------------------------- file transfer
 *
 * Protocol v3 (wire.h FILE_*). A transfer streams: an upload takes bytes
 * only while the guest's credit allows (at most WIRE_FILE_WINDOW unacked),
 * a download holds at most WIRE_FILE_WINDOW bytes the caller has not read,
 * so memory per transfer is bounded whatever the file's size.
 *
 * Lifetime: agentless_xfer_start() gives the caller a handle, released
 * with agentless_xfer_release() exactly once. The calls that take `c`
 * need the conn alive (not freed); the caller guarantees it (sandbox/ pins
 * the guest). `wake` runs with no lock held on the recv thread, the tick's
 * thread or the thread freeing the conn, whenever the transfer may have
 * changed (credit, data, meta, end); it must not call
 * agentless_xfer_release(). No wake runs after release returns. */

struct agentless_xfer;

/* wire.h's WIRE_FILE_WINDOW and WIRE_FILE_LIST_MAX, for the modules above */
#define AGENTLESS_FILE_WINDOW	(2u * 1024 * 1024)
#define AGENTLESS_FILE_LIST_MAX 10000

struct agentless_file_req {
	uint32_t op;	  /* enum wire_file_op (1 PUT .. 6 TAR_GET) */
	const char *path; /* absolute, NUL-terminated */
	uint32_t mode;	  /* PUT: permission bits (0..07777) */
	const char *user; /* PUT, TAR_PUT: owner (exec user); NULL = root */
	uint64_t offset;  /* GET */
	uint64_t length;  /* GET; 0 = to the end */
	bool recursive;	  /* DELETE */
	bool gzip;	  /* TAR_*: the stream is gzip */
	/* GET, TAR_GET: the most bytes the host accepts; a larger file fails
	 * the transfer with SBX_E_PAYLOAD_TOO_LARGE. 0 = no limit. */
	uint64_t max_bytes;
	uint32_t list_limit;	/* LIST: most entries, <= WIRE_FILE_LIST_MAX */
	const char *list_after; /* LIST: only names after this one, or NULL */
};

enum agentless_xfer_state {
	AGENTLESS_XFER_OPEN,
	AGENTLESS_XFER_DONE,   /* the guest said FILE_DONE */
	AGENTLESS_XFER_FAILED, /* err says why */
};

struct agentless_xfer_status {
	enum agentless_xfer_state state;
	struct sbx_error err; /* FAILED */
	/* downloads, once have_meta: bytes that follow (UINT64_MAX = unknown,
	 * TAR_GET), the file's size, mode and mtime */
	bool have_meta;
	uint64_t size, total;
	uint32_t mode;
	uint64_t mtime_s;
	/* DONE: bytes written (PUT, TAR_PUT) or sent, mode set (PUT), and
	 * whether a LIST was cut at its limit */
	uint64_t done_size;
	uint32_t done_mode;
	bool truncated;
	size_t buffered;   /* downloads: bytes ready for agentless_xfer_read */
	uint64_t received; /* downloads: data bytes the guest sent so far */
	uint64_t writable; /* uploads: bytes agentless_xfer_write takes now */
};

struct agentless_file_entry {
	char *name;    /* raw bytes, NUL-terminated, no '/' or NUL inside */
	uint32_t type; /* enum wire_file_type */
	uint32_t mode;
	uint64_t size;
	uint64_t mtime_s;
};

typedef void (*agentless_xfer_wake_fn)(void *opaque);

/* Send FILE_OPEN. 0 and *out, or -1: SBX_E_SANDBOX_ERROR (channel down, or
 * a guest older than protocol v3), SBX_E_RATE_LIMITED (too many transfers
 * on this conn), SBX_E_INVALID_REQUEST (param "path"). */
int agentless_xfer_start(struct agentless_conn *c, const struct agentless_file_req *req,
			 agentless_xfer_wake_fn wake, void *opaque, struct agentless_xfer **out,
			 struct sbx_error *err);
/* Upload: send up to len bytes as FILE_DATA, as many as the credit allows
 * (possibly 0: wait for a wake). Returns bytes taken, or -1 (the transfer
 * failed: see status). */
long agentless_xfer_write(struct agentless_conn *c, struct agentless_xfer *x, const void *data,
			  size_t len);
/* Upload: all bytes were written; send FILE_END. 0 or -1. */
int agentless_xfer_end(struct agentless_conn *c, struct agentless_xfer *x);
/* Download: copy up to max buffered bytes into buf; returns how many (0 =
 * none now). Grants the guest credit for what was read; `c` may be NULL
 * once the transfer is no longer OPEN. */
size_t agentless_xfer_read(struct agentless_conn *c, struct agentless_xfer *x, void *buf,
			   size_t max);
void agentless_xfer_status(struct agentless_xfer *x, struct agentless_xfer_status *st);
/* LIST, once DONE: the entries (owned by x, valid until release). */
const struct agentless_file_entry *agentless_xfer_entries(struct agentless_xfer *x, size_t *n);
/* Give the handle back. A transfer still open is aborted (FILE_ABORT at
 * the next tick: a partial upload is removed in the guest). Never touches
 * the conn. */
void agentless_xfer_release(struct agentless_xfer *x);

/* ------------------------------------------------------------ TCP streams
 *
 * Protocol v6 (wire.h TCP_*): a byte stream to a TCP connection the
 * guest's agent opens to its own loopback, 127.0.0.1:port. Each direction
 * has a credit window of AGENTLESS_TCP_WINDOW bytes: agentless_tcp_write
 * takes only what the guest's TCP_ACKs allow, and the guest sends only what
 * the host's reads freed, so memory per stream stays bounded whatever
 * either end does. Lifetime and wakes as for transfers (above): the handle
 * is released exactly once, `wake` runs with no lock held on the recv
 * thread, the tick's or the freeing thread, never after release returns.
 * A stream released before both halves closed is reset in the guest
 * (TCP_CLOSE with ABORT) at the next tick. */
struct agentless_tcp;

#define AGENTLESS_TCP_WINDOW (256u * 1024)
#define AGENTLESS_TCP_MAX    64

struct agentless_tcp_req {
	uint32_t port;	      /* 1..65535, on the guest's 127.0.0.1 */
	uint32_t max_streams; /* open at once on this conn; 0 or more = AGENTLESS_TCP_MAX */
	uint32_t open_ms;     /* the guest answers the open within; 0 = 10000 */
	/* the first byte from the guest within (from agentless_tcp_await);
	 * 0 = no limit */
	uint32_t first_byte_ms;
	uint32_t idle_ms; /* no byte either way for this long fails it; 0 = 60000 */
};

enum agentless_tcp_state {
	AGENTLESS_TCP_OPENING,
	AGENTLESS_TCP_OPEN,
	AGENTLESS_TCP_CLOSED, /* both halves closed (FIN each way) */
	AGENTLESS_TCP_FAILED, /* err: SBX_E_PORT_UNREACHABLE (refused, reset),
			       * SBX_E_PORT_TIMEOUT (open, first byte, idle),
			       * SBX_E_RATE_LIMITED, SBX_E_SANDBOX_ERROR */
};

struct agentless_tcp_status {
	enum agentless_tcp_state state;
	struct sbx_error err; /* FAILED */
	size_t buffered;      /* bytes agentless_tcp_read gives now */
	bool eof;	      /* the guest's half is closed (after the buffered bytes) */
	uint64_t received;    /* bytes the guest sent so far */
	uint64_t writable;    /* bytes agentless_tcp_write takes now (OPEN) */
};

typedef void (*agentless_tcp_wake_fn)(void *opaque);

/* Send TCP_OPEN. 0 and *out, or -1: SBX_E_SANDBOX_ERROR (channel down, a
 * guest older than v6: "create a new sandbox"), SBX_E_RATE_LIMITED
 * (max_streams open), SBX_E_INVALID_REQUEST (port). */
int agentless_tcp_open(struct agentless_conn *c, const struct agentless_tcp_req *req,
		       agentless_tcp_wake_fn wake, void *opaque, struct agentless_tcp **out,
		       struct sbx_error *err);
/* Send up to len bytes within the credit: how many were taken (0: wait for
 * a wake; also while OPENING), or -1 (failed, closed or shut down). */
long agentless_tcp_write(struct agentless_conn *c, struct agentless_tcp *t, const void *data,
			 size_t len);
/* The host's request is all sent: the guest's first byte is due within
 * the request's first_byte_ms from now (504 port_timeout past it). A no-op
 * once a byte came. */
void agentless_tcp_await(struct agentless_tcp *t);
/* The host's half is done (FIN). 0, or -1 when not OPEN. */
int agentless_tcp_shutdown(struct agentless_conn *c, struct agentless_tcp *t);
/* Copy up to max buffered bytes; grants the guest credit for them. `c` may
 * be NULL once the stream is over. */
size_t agentless_tcp_read(struct agentless_conn *c, struct agentless_tcp *t, void *buf, size_t max);
void agentless_tcp_status(struct agentless_tcp *t, struct agentless_tcp_status *st);
/* Give the handle back (never touches the conn). */
void agentless_tcp_release(struct agentless_tcp *t);

/* Streams the guest opens (protocol v7, egress: docs/network.md). The
 * guest's TCP_OPEN {HOST, PORT} makes a stream in AGENTLESS_TCP_OPENING
 * and calls `accept` on the recv thread, with no lock held: it must not
 * block (hand the stream to a thread of its own). The callee then owns a
 * handle (agentless_tcp_release, exactly once) and answers exactly once:
 * agentless_tcp_accept (the destination is connected: TCP_OPENED, the
 * stream is OPEN, `wake` runs from now on) or agentless_tcp_refuse. Until
 * then the stream fails only if the guest resets it or the channel goes;
 * an answer then is a no-op. A guest past `max` streams of its own at
 * once, or on a conn without a callee, gets ERROR BUSY or FORBIDDEN and
 * no stream. Set once, before the guest can speak (no lock guards it
 * against a concurrent change). */
typedef void (*agentless_tcp_accept_fn)(void *opaque, struct agentless_tcp *t, const char *host,
					uint16_t port);
void agentless_set_tcp_accept(struct agentless_conn *c, agentless_tcp_accept_fn accept,
			      void *opaque, unsigned max);
/* -1 when the stream failed meanwhile (nothing sent) or c is down. */
int agentless_tcp_accept(struct agentless_conn *c, struct agentless_tcp *t,
			 agentless_tcp_wake_fn wake, void *opaque, uint32_t idle_ms);
/* Why a guest's stream is refused (the guest's proxy answers 403, 502,
 * 504 or 429); msg is one line. */
enum agentless_refusal {
	AGENTLESS_REFUSE_FORBIDDEN, /* the policy says no */
	AGENTLESS_REFUSE_FAILED,    /* resolve or connect failed */
	AGENTLESS_REFUSE_TIMEOUT,   /* no answer in time */
	AGENTLESS_REFUSE_BUSY,	    /* too many at once */
};
void agentless_tcp_refuse(struct agentless_conn *c, struct agentless_tcp *t,
			  enum agentless_refusal why, const char *msg);
/* The longest host a guest's stream may name (a DNS name's 253). */
#define AGENTLESS_TCP_HOST_MAX 253

/* Number of execs in flight. */
unsigned agentless_conn_inflight(struct agentless_conn *c);

/* Close the channel and fail every in-flight exec, transfer and ping with
 * SBX_E_SANDBOX_ERROR (message `why`). Every later call fails at once with
 * the same message (an attach closes the channel it is given); the conn's
 * memory stays until agentless_conn_free. Idempotent; callbacks run on the
 * calling thread, with no lock of the conn held. */
void agentless_conn_close(struct agentless_conn *c, const char *why);
/* agentless_conn_close (if not done yet), then free the conn. */
void agentless_conn_free(struct agentless_conn *c, const char *why);

#endif
