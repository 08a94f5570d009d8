/* The exec channel's wire format, shared by the host (agentless.c) and the
 * guest init (guest/init.c). Pure encode/decode: no I/O, no allocation
 * beyond what the caller passes, no dependency but libc, so the static
 * guest init links it too.
 *
 * A frame is a 12-byte header followed by `len` payload bytes:
 *
 *     u8  type        (enum wire_type)
 *     u8  flags       (0; receivers ignore unknown bits)
 *     u16 reserved    (0)
 *     u32 id          (exec id; 0 for connection-level frames)
 *     u32 len         (payload bytes, <= WIRE_MAX_PAYLOAD)
 *
 * All integers are big-endian. A payload is a sequence of TLV fields:
 *
 *     u16 tag, u32 len, len bytes of value
 *
 * Integers inside values are big-endian u32/u64 (exit code: u32 holding an
 * int32). Strings are raw bytes without NUL (a receiver must reject NUL in
 * cwd and env). Unknown tags are skipped, so a newer peer may add fields.
 *
 * Versions: the guest sends HELLO with its version and the oldest it can
 * speak; the host answers WELCOME with the version it picked. A host speaks
 * [WIRE_VERSION_MIN, WIRE_VERSION] so guests booted by the previous daemon
 * keep working after an upgrade.
 *
 * Version 2 added WIRE_T_STDIN and WIRE_T_USER to EXEC. A version-1 guest
 * skips unknown tags (it would run the command with stdin at EOF, or as
 * root), so a host sends them only to guests that negotiated version >= 2.
 *
 * Version 3 added file transfer (FILE_OPEN .. FILE_ABORT below). A transfer
 * has an id from the same space as execs. Bytes flow in FILE_DATA frames
 * (<= WIRE_MAX_CHUNK each) under a credit window in both directions: the
 * sender keeps at most WIRE_FILE_WINDOW bytes past the last FILE_ACK it got,
 * so neither side buffers more than that per transfer. A host sends
 * FILE_OPEN only to guests that negotiated version >= 3.
 * Version 3 also (issue 16, streamed output) added WIRE_T_STREAM to EXEC and the
 * PAUSE/RESUME flow-control frames. Their numbers are taken from the TOP of
 * the free ranges, counting down (frame types from 255, tags from 65535),
 * so that frames other branches add from the bottom never collide.
 *
 * Version 4 added the channel's credit window: WELCOME (v4) carries
 * WINDOW and, as its id, a non-zero credit epoch; from the end of that
 * WELCOME on, the guest counts the bytes it reads from its port and
 * reports them in CREDIT frames (id = the epoch). The host writes at most
 * WINDOW bytes past the last credit, so libvirtd never holds more for a
 * guest than the guest has read (docs/vmm.md). A host opens the window
 * only for a guest that negotiated version >= 4.
 *
 * Version 5 added terminals: an EXEC with ROWS and COLS runs the exec
 * user's login shell on a pseudo-terminal (its output as STDOUT frames,
 * streamed, without a cap); PTY_INPUT carries keystrokes to it within
 * WIRE_PTY_WINDOW bytes past the guest's last PTY_ACK, PTY_RESIZE sets its
 * window size, and a KILL hangs it up (SIGHUP, then the cgroup's SIGKILL a
 * second later). A host sends them only to guests that negotiated >= 5.
 *
 * Version 6 added TCP streams (TCP_OPEN .. TCP_CLOSE): a byte stream between
 * the host and a TCP connection the guest's agent holds to its own
 * loopback (127.0.0.1:PORT), with a credit window per stream and per
 * direction (WIRE_TCP_WINDOW past the receiver's last TCP_ACK). Streams the
 * host opens take ids from its exec id space (top bit clear); ids with
 * WIRE_TCP_GUEST_BIT set are reserved for streams a guest opens. A host
 * sends TCP_* only to guests that negotiated >= 6.
 *
 * Version 7 added streams the guest opens (egress, docs/network.md): the
 * guest's agent sends TCP_OPEN {HOST, PORT} with an id of its own
 * (WIRE_TCP_GUEST_BIT set), and the host answers TCP_OPENED once its
 * connection to HOST:PORT is up under the sandbox's policy, or ERROR
 * (FORBIDDEN: the policy refuses; REFUSED: the connect failed; TIMEOUT;
 * BUSY: too many at once). The guest sends nothing for the stream before
 * the answer but TCP_CLOSE with ABORT (its client went away). From
 * TCP_OPENED on, the stream is as above. A guest opens streams only
 * towards a host that negotiated >= 7; an older host would break the
 * channel on a guest-opened id.
 */
#ifndef SBX_WIRE_H
#define SBX_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define WIRE_VERSION	 7
#define WIRE_VERSION_MIN 1
#define WIRE_PORT_NAME	 "org.sandboxd.exec.0"

#define WIRE_HEADER_LEN 12
/* Largest payload either side may send (an EXEC carries a command of up to
 * the configured cap, default 256 KiB, plus env). Receivers check the
 * header's len against their own limit before allocating. */
#define WIRE_MAX_PAYLOAD (1024 * 1024)
/* The guest ships output in chunks of at most this many bytes, and the host
 * refuses any guest frame longer than WIRE_MAX_GUEST_PAYLOAD. */
#define WIRE_MAX_CHUNK	       (60 * 1024)
#define WIRE_MAX_GUEST_PAYLOAD (64 * 1024)
/* File transfer credit: data bytes a sender may have in flight past the
 * receiver's last FILE_ACK (v3). */
#define WIRE_FILE_WINDOW (2u * 1024 * 1024)
/* The channel's credit window (v4): bytes the host writes past the
 * guest's last CREDIT. Under what the qemu chardev socket buffers without
 * blocking libvirtd (a unix socket's ~208 KiB; the host also bounds what
 * its writes cost there, docs/vmm.md). */
#define WIRE_CHANNEL_WINDOW (128u * 1024)
/* Most entries one FILE_OP_LIST may return (the host sends LIMIT <= it). */
#define WIRE_FILE_LIST_MAX 10000
/* Terminal input (v5): bytes of PTY_INPUT the host has in flight past the
 * guest's last PTY_ACK; the guest buffers at most this much per terminal. */
#define WIRE_PTY_WINDOW (64u * 1024)
/* A terminal's window size (v5): 1..WIRE_PTY_DIM_MAX rows and columns. */
#define WIRE_PTY_DIM_MAX 1000
/* TCP streams (v6): data bytes a sender may have in flight past the
 * receiver's last TCP_ACK, per stream and direction; streams a guest holds
 * at once (more TCP_OPENs get ERROR BUSY); the id bit of guest-opened
 * streams (reserved). */
#define WIRE_TCP_WINDOW	   (256u * 1024)
#define WIRE_TCP_MAX	   64
#define WIRE_TCP_GUEST_BIT 0x80000000u
/* v7: the longest HOST of a guest's TCP_OPEN (a DNS name's 253) */
#define WIRE_TCP_HOST_MAX 253

enum wire_type {
	/* guest -> host, id 0: {VERSION, VERSION_MIN, BOOT_MS} once at start */
	WIRE_HELLO = 1,
	/* host -> guest, id 0 (v4: the credit epoch): {VERSION, TIME_NS,
	 * WINDOW? (v4)}: version picked, wall clock, credit window */
	WIRE_WELCOME = 2,
	/* host -> guest, id 0: {TIME_NS}: periodic wall clock */
	WIRE_TIME = 3,
	/* host -> guest: payload echoed back verbatim as PONG (same id) */
	WIRE_PING = 4,
	WIRE_PONG = 5,
	/* host -> guest, id = exec id (non-zero, unique per connection):
	 * {COMMAND, CWD, ENV*, TIMEOUT_MS, STDOUT_CAP, STDERR_CAP, STDIN?,
	 * USER?, STREAM?} */
	WIRE_EXEC = 10,
	/* guest -> host: raw bytes of the stream, <= WIRE_MAX_CHUNK, only the
	 * first STDOUT_CAP/STDERR_CAP bytes of each stream are ever shipped */
	WIRE_STDOUT = 11,
	WIRE_STDERR = 12,
	/* guest -> host, ends an exec: {EXIT_CODE, DURATION_MS, TIMED_OUT,
	 * STDOUT_TOTAL, STDERR_TOTAL} (totals count dropped bytes too) */
	WIRE_EXIT = 13,
	/* guest -> host, ends an exec that could not start:
	 * {ERROR_KIND, PARAM?, MESSAGE} */
	WIRE_ERROR = 14,
	/* host -> guest: kill the exec's whole cgroup now (host backstop);
	 * the guest still answers with EXIT (timed_out = 1) */
	WIRE_KILL = 15,
	/* v3 file transfer; id = transfer id (same space as exec ids).
	 * host -> guest: {FILE_OP, PATH, MODE?, USER?, OFFSET?, LENGTH?,
	 * RECURSIVE?, GZIP?, LIMIT?}; the guest answers with FILE_DONE or
	 * ERROR, after FILE_META + FILE_DATA* (GET, TAR_GET) or FILE_ENTRY*
	 * (LIST) */
	WIRE_FILE_OPEN = 16,
	/* both ways: raw bytes of the file or tar stream, <= WIRE_MAX_CHUNK,
	 * within the receiver's credit (FILE_ACK) */
	WIRE_FILE_DATA = 17,
	/* host -> guest: an upload's bytes are all sent: {SIZE} (their total) */
	WIRE_FILE_END = 18,
	/* both ways: {ACKED}: data bytes of this transfer consumed so far
	 * (cumulative); the peer may send up to ACKED + WIRE_FILE_WINDOW */
	WIRE_FILE_ACK = 19,
	/* guest -> host, once, before a download's data: {SIZE (bytes that
	 * follow; absent for TAR_GET), TOTAL (file size), MODE, MTIME_S} */
	WIRE_FILE_META = 20,
	/* guest -> host: one directory entry {NAME, FILE_TYPE, SIZE, MODE,
	 * MTIME_S}, at most LIMIT of them */
	WIRE_FILE_ENTRY = 21,
	/* guest -> host, ends a transfer that succeeded: {SIZE (bytes written
	 * or sent), MODE?, TRUNCATED? (LIST)} */
	WIRE_FILE_DONE = 22,
	/* host -> guest: give the transfer up (remove a partial upload, stop
	 * a helper); the guest sends nothing more for it */
	WIRE_FILE_ABORT = 23,
	/* v4, guest -> host, id = the credit epoch (WELCOME's id): {ACKED}:
	 * bytes of the port read since the end of that WELCOME (cumulative).
	 * Sent once WINDOW/4 bytes are unreported, and whenever the port is
	 * drained with any unreported. */
	WIRE_CREDIT = 24,
	/* v5, host -> guest, id = a terminal's exec id: raw bytes for the
	 * terminal (keystrokes), <= WIRE_MAX_CHUNK, within WIRE_PTY_WINDOW
	 * past the last PTY_ACK. Ignored for an unknown id. */
	WIRE_PTY_INPUT = 25,
	/* v5, host -> guest: {ROWS, COLS}: the terminal's new window size */
	WIRE_PTY_RESIZE = 26,
	/* v5, guest -> host: {ACKED}: PTY_INPUT bytes of this terminal the
	 * guest consumed (written to the terminal) so far, cumulative */
	WIRE_PTY_ACK = 27,
	/* v6, host -> guest, id = the stream's: {PORT}: connect to
	 * 127.0.0.1:PORT. Answered with TCP_OPENED, or ERROR (REFUSED: nobody
	 * listens or the connect failed; BUSY: WIRE_TCP_MAX streams open).
	 * v7, guest -> host, id with WIRE_TCP_GUEST_BIT: {HOST, PORT}: egress
	 * to HOST:PORT; answered the same way by the host (FORBIDDEN, REFUSED,
	 * TIMEOUT, BUSY). */
	WIRE_TCP_OPEN = 28,
	/* v6, guest -> host, empty: the connection is up; data may flow */
	WIRE_TCP_OPENED = 29,
	/* v6, both ways: raw bytes of the stream, <= WIRE_MAX_CHUNK, within
	 * WIRE_TCP_WINDOW past the receiver's last TCP_ACK */
	WIRE_TCP_DATA = 30,
	/* v6, both ways: {ACKED}: TCP_DATA bytes of this stream the receiver
	 * consumed so far (cumulative) */
	WIRE_TCP_ACK = 31,
	/* v6, both ways: {ABORT?}: without ABORT, the sender's half is done
	 * (FIN: it sends no more TCP_DATA); with ABORT = 1, the stream is
	 * gone at once (reset; the sender sends nothing more for it and the
	 * receiver drops what it holds) */
	WIRE_TCP_CLOSE = 32,
	/* v3, host -> guest, id = exec id, empty payload: stop reading the
	 * exec's pipes (its writers then block on a full pipe) until RESUME.
	 * Flow control for a slow consumer of a streamed exec; the deadline
	 * still runs. Ignored for an unknown id. */
	WIRE_RESUME = 254,
	WIRE_PAUSE = 255,
	/* v3, host -> guest, id = a request id (from the exec id space):
	 * {PROC_OP, ...} on background processes (enum wire_proc_op). The
	 * guest answers PROC_REPLY, or ERROR (kind NO_PROCESS for a pid it
	 * does not know). */
	WIRE_PROC = 253,
	/* v3, guest -> host, id = the PROC's: the op's result (wire_proc_op) */
	WIRE_PROC_REPLY = 252,
};

enum wire_file_op {
	WIRE_FILE_OP_PUT = 1,	  /* write PATH atomically (temp + rename) */
	WIRE_FILE_OP_GET = 2,	  /* read PATH from OFFSET, LENGTH bytes */
	WIRE_FILE_OP_LIST = 3,	  /* the entries of directory PATH */
	WIRE_FILE_OP_DELETE = 4,  /* unlink PATH, or a tree with RECURSIVE */
	WIRE_FILE_OP_TAR_PUT = 5, /* extract the tar stream into directory PATH */
	WIRE_FILE_OP_TAR_GET = 6, /* a tar stream of directory PATH */
};

enum wire_file_type {
	WIRE_FTYPE_FILE = 1,
	WIRE_FTYPE_DIR = 2,
	WIRE_FTYPE_SYMLINK = 3,
	WIRE_FTYPE_OTHER = 4,
};

/* PROC_OP values and their fields (request -> reply). */
enum wire_proc_op {
	/* {COMMAND, CWD?, ENV*, USER?, TIMEOUT_MS? (absent: none), MAX_PROCS}
	 * -> {PID, TIME_NS (started, guest clock), RUNNING (1)} */
	WIRE_PROC_START = 1,
	/* {} -> {PROC*}, each a nested payload {PID, COMMAND (head, <= 256
	 * bytes), TIME_NS, RUNNING, EXIT_CODE?} */
	WIRE_PROC_LIST = 2,
	/* {PID, OUT_OFFSET, ERR_OFFSET} -> {PID, RUNNING, EXIT_CODE?, OUT_OFFSET,
	 * OUT_DATA, OUT_END, ERR_OFFSET, ERR_DATA, ERR_END}: the bytes of each
	 * stream from max(asked, oldest kept) (OUT_OFFSET in the reply), at
	 * most WIRE_PROC_CHUNK of each; *_END = bytes written so far */
	WIRE_PROC_OUTPUT = 3,
	/* {PID, DATA?, CLOSE?} -> {WRITTEN}: bytes the pipe took now */
	WIRE_PROC_STDIN = 4,
	/* {PID, SIGNAL (2, 9 or 15)} -> {}: to its process group */
	WIRE_PROC_SIGNAL = 5,
};

/* Background processes: each stream's ring in the guest, the most output
 * one OUTPUT reply carries per stream, the guest's own table size. */
#define WIRE_PROC_RING	(1024 * 1024)
#define WIRE_PROC_CHUNK (30 * 1024)
#define WIRE_PROC_MAX	64

enum wire_tag {
	WIRE_T_VERSION = 1,	  /* u32 */
	WIRE_T_VERSION_MIN = 2,	  /* u32 */
	WIRE_T_TIME_NS = 3,	  /* u64, ns since the epoch, UTC */
	WIRE_T_BOOT_MS = 4,	  /* u32, guest uptime at HELLO */
	WIRE_T_COMMAND = 10,	  /* bytes, run as /bin/sh -c COMMAND */
	WIRE_T_CWD = 11,	  /* bytes, absolute path */
	WIRE_T_ENV = 12,	  /* bytes "KEY=VALUE", repeatable, merged over defaults */
	WIRE_T_TIMEOUT_MS = 13,	  /* u32 */
	WIRE_T_STDOUT_CAP = 14,	  /* u32 bytes */
	WIRE_T_STDERR_CAP = 15,	  /* u32 bytes */
	WIRE_T_STDIN = 16,	  /* bytes (v2): the command's whole stdin, then EOF */
	WIRE_T_USER = 17,	  /* bytes (v2): run as this user of the guest's
				   * /etc/passwd (uid, gid, HOME); absent = root */
	WIRE_T_EXIT_CODE = 20,	  /* u32 holding int32: status, or 128+signal */
	WIRE_T_DURATION_MS = 21,  /* u32, measured in the guest */
	WIRE_T_TIMED_OUT = 22,	  /* u32, 0 or 1 */
	WIRE_T_STDOUT_TOTAL = 23, /* u64 bytes the command wrote to stdout */
	WIRE_T_STDERR_TOTAL = 24, /* u64 */
	WIRE_T_ERROR_KIND = 30,	  /* u32, enum wire_error_kind */
	WIRE_T_PARAM = 31,	  /* bytes, the request field to blame */
	WIRE_T_MESSAGE = 32,	  /* bytes, one sentence */
	WIRE_T_FILE_OP = 40,	  /* u32, enum wire_file_op (v3) */
	WIRE_T_PATH = 41,	  /* bytes, absolute path, no NUL */
	WIRE_T_MODE = 42,	  /* u32, permission bits (07777) */
	WIRE_T_OFFSET = 43,	  /* u64 */
	WIRE_T_LENGTH = 44,	  /* u64; absent = to the end */
	WIRE_T_RECURSIVE = 45,	  /* u32, 0 or 1 */
	WIRE_T_GZIP = 46,	  /* u32, 0 or 1: the tar stream is gzip */
	WIRE_T_LIMIT = 47,	  /* u32, most entries wanted */
	WIRE_T_SIZE = 48,	  /* u64 bytes */
	WIRE_T_TOTAL = 49,	  /* u64 bytes */
	WIRE_T_MTIME_S = 50,	  /* u64, seconds since the epoch */
	WIRE_T_FILE_TYPE = 51,	  /* u32, enum wire_file_type */
	WIRE_T_NAME = 52,	  /* bytes, one entry name (<= 255, no '/' or NUL) */
	WIRE_T_ACKED = 53,	  /* u64, cumulative data bytes consumed */
	WIRE_T_TRUNCATED = 54,	  /* u32, 0 or 1 */
	WIRE_T_WINDOW = 55,	  /* u32 bytes (v4, WELCOME): the credit window */
	WIRE_T_AFTER = 56,	  /* bytes (LIST): only names after this one, in
				   * byte order; the entries come sorted */
	WIRE_T_ROWS = 57,	  /* u32 (v5, EXEC, PTY_RESIZE): terminal rows */
	WIRE_T_COLS = 58,	  /* u32 (v5): terminal columns */
	WIRE_T_PORT = 59,	  /* u32 (v6, TCP_OPEN): 1..65535 */
	WIRE_T_ABORT = 60,	  /* u32 (v6, TCP_CLOSE): 1 = reset, not FIN */
	WIRE_T_HOST = 61,	  /* bytes (v7, guest's TCP_OPEN): a name or an
				     address literal, <= 253 bytes */
	/* v3 (counting down from the top of the range, see above) */
	WIRE_T_STREAM = 65535,	   /* u32 1 in EXEC: ship output as soon as it is
				    * read instead of batching it into full chunks */
	WIRE_T_PROC_OP = 65534,	   /* u32, enum wire_proc_op */
	WIRE_T_PID = 65533,	   /* u32, a guest pid (> 1) */
	WIRE_T_OUT_OFFSET = 65532, /* u64, a byte offset into stdout */
	WIRE_T_ERR_OFFSET = 65531, /* u64 */
	WIRE_T_OUT_END = 65530,	   /* u64, stdout bytes written so far */
	WIRE_T_ERR_END = 65529,	   /* u64 */
	WIRE_T_OUT_DATA = 65528,   /* bytes */
	WIRE_T_ERR_DATA = 65527,   /* bytes */
	WIRE_T_DATA = 65526,	   /* bytes for a process's stdin */
	WIRE_T_CLOSE = 65525,	   /* u32 1: close its stdin after DATA */
	WIRE_T_SIGNAL = 65524,	   /* u32 signal number */
	WIRE_T_PROC_ENTRY = 65523, /* bytes: one process, a nested payload */
	WIRE_T_RUNNING = 65522,	   /* u32 0/1 */
	WIRE_T_MAX_PROCS = 65521,  /* u32, the host's limit of running ones */
	WIRE_T_WRITTEN = 65520,	   /* u32 bytes */
};

enum wire_error_kind {
	WIRE_ERR_BAD_REQUEST = 1, /* malformed EXEC; PARAM names the field */
	WIRE_ERR_CWD = 2,	  /* cwd missing or not a directory */
	WIRE_ERR_BUSY = 3,	  /* guest at its own in-flight limit */
	WIRE_ERR_SPAWN = 4,	  /* fork/exec/cgroup failed in the guest */
	/* v3, transfers only */
	WIRE_ERR_NOT_FOUND = 5,	 /* PATH (or a parent) does not exist */
	WIRE_ERR_IS_DIR = 6,	 /* a directory where a file is expected */
	WIRE_ERR_NOT_DIR = 7,	 /* a file where a directory is expected */
	WIRE_ERR_NO_SPACE = 8,	 /* the guest's disk is full (nothing left behind) */
	WIRE_ERR_IO = 9,	 /* any other failure; MESSAGE says which */
	WIRE_ERR_NOT_EMPTY = 10, /* DELETE of a non-empty directory without RECURSIVE */
	WIRE_ERR_RANGE = 11,	 /* OFFSET past the end of the file */
	/* GET of a path that is no regular file; MESSAGE is what it is: "fifo",
	 * "socket", "character device", "block device", "other", or "pseudo"
	 * (a /proc or /sys file whose size reads 0) */
	WIRE_ERR_NOT_REGULAR = 12,
	/* v6, TCP_OPEN: nobody listens on the port, or the connect failed;
	 * MESSAGE says how */
	WIRE_ERR_REFUSED = 13,
	/* v7, host -> guest, a guest-opened TCP_OPEN: the sandbox's policy
	 * refuses the destination (MESSAGE says why) */
	WIRE_ERR_FORBIDDEN = 14,
	/* v7: the destination did not answer within the host's deadline */
	WIRE_ERR_TIMEOUT = 15,
	/* v3 (top of the range): a PROC named a pid the guest does not keep */
	WIRE_ERR_NO_PROCESS = 255,
};

struct wire_header {
	uint8_t type;
	uint8_t flags;
	uint32_t id;
	uint32_t len;
};

/* Encode a header into out[WIRE_HEADER_LEN]. */
void wire_header_encode(const struct wire_header *h, uint8_t out[WIRE_HEADER_LEN]);
/* Decode in[WIRE_HEADER_LEN]. Returns 0, or -1 when len > max_payload
 * (the caller's own limit) or reserved bits are set. */
int wire_header_decode(const uint8_t in[WIRE_HEADER_LEN], uint32_t max_payload,
		       struct wire_header *h);

/* A payload under construction in a caller-owned buffer. Appends that do
 * not fit set `overflow` and are dropped; check it before sending. */
struct wire_writer {
	uint8_t *buf;
	size_t cap;
	size_t len;
	int overflow;
};
void wire_writer_init(struct wire_writer *w, uint8_t *buf, size_t cap);
void wire_put_bytes(struct wire_writer *w, uint16_t tag, const void *v, size_t len);
void wire_put_str(struct wire_writer *w, uint16_t tag, const char *s);
void wire_put_u32(struct wire_writer *w, uint16_t tag, uint32_t v);
void wire_put_u64(struct wire_writer *w, uint16_t tag, uint64_t v);

/* Iterate the TLV fields of a received payload. */
struct wire_reader {
	const uint8_t *buf;
	size_t len;
	size_t off;
};
struct wire_field {
	uint16_t tag;
	uint32_t len;
	const uint8_t *value; /* points into the payload */
};
void wire_reader_init(struct wire_reader *r, const void *payload, size_t len);
/* 1 and fills f when a field was read; 0 at the clean end; -1 when the
 * payload is malformed (a field runs past the end). */
int wire_next(struct wire_reader *r, struct wire_field *f);
/* Value of an integer field; -1 when the field's length is wrong. */
int wire_field_u32(const struct wire_field *f, uint32_t *v);
int wire_field_u64(const struct wire_field *f, uint64_t *v);

#endif
