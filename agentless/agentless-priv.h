/* agentless-priv: what agentless.c (the connection), exec.c (executions)
 * and xfer.c (file transfers) share (not for other modules). The
 * connection's state and the helpers each side needs from the others; the
 * locking is agentless.c's (its header comment), with each transfer's own
 * mutex as a leaf below `lock`.
 */
#ifndef SBX_AGENTLESS_PRIV_H
#define SBX_AGENTLESS_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "agentless/agentless.h"
#include "agentless/wire.h"

#define MSG_VIOLATION "the sandbox's guest broke the exec protocol"
#define MSG_GONE      "the sandbox's guest stopped responding"
/* Guest-supplied text echoed into an error is cut to this many bytes. */
#define GUEST_TEXT_MAX 200

/* Ids of execs the host gave up on (backstop, reconnect) whose late frames
 * are dropped silently instead of counting as a violation. */
#define ABANDONED_MAX 64

/* The PING-confirmed window (struct agentless_conn, ping_window): a PING
 * every WIN_PING_EVERY bytes, at most WIN_PINGS_MAX unanswered, ids with
 * WIN_PING_BIT set (the host's own pings never have it), and no frame
 * larger than WIN_FRAME_MAX (a frame past the window could never be
 * confirmed). */
#define WIN_PING_EVERY (WIRE_CHANNEL_WINDOW / 4)
#define WIN_PINGS_MAX  64
#define WIN_PING_BIT   0x80000000u
#define WIN_FRAME_MAX  (WIRE_CHANNEL_WINDOW / 2)

/* One output stream of an exec: the head the guest shipped, <= cap bytes
 * (only counted in `len`, not kept, for a streamed exec). */
struct stream_buf {
	char *data;
	size_t len; /* bytes kept (0 when count_only) */
	size_t alloc;
	uint64_t shipped; /* bytes the guest shipped, <= cap */
	uint64_t cap;	  /* a terminal's: UINT64_MAX */
	bool count_only;
	bool full; /* the exec's charge was refused: keep no more */
};

struct exec {
	struct exec *next;
	uint32_t id;
	agentless_exec_done_fn done;
	agentless_output_fn on_output; /* NULL: output is buffered */
	agentless_charge_fn charge;    /* NULL: nothing to charge */
	/* set for a PROC request instead of an exec: its reply */
	agentless_proc_done_fn proc_done;
	void *opaque;
	struct stream_buf out;
	struct stream_buf err;
	char cwd[GUEST_TEXT_MAX + 1]; /* sanitised, for the cwd error */
	int64_t deadline_ms;	      /* monotonic backstop */
	int64_t started_ms;	      /* monotonic, when the EXEC was sent */
	bool killed;		      /* KILL sent once already */
	bool paused;		      /* PAUSE sent, no RESUME since */
	bool in_output;		      /* the recv thread is inside on_output */
	bool resume_wanted;	      /* resume asked for while in_output */
	/* v5 terminal (pty.c): input bytes sent and acknowledged */
	bool pty;
	uint64_t in_sent, in_acked;
	void (*on_pty_ack)(void *opaque);
	uint32_t *id_out; /* the id is written here when it is chosen */
};

struct ping_waiter; /* ping.c */

struct agentless_conn {
	pthread_mutex_t lock;
	/* held by a sender from counting its frame to queueing the frame and
	 * the window PING that confirms it, so frames are counted in the
	 * order they are queued and a PING always follows its own frame
	 * (agentless.c, "Locking") */
	pthread_mutex_t send_lock;
	pthread_cond_t cond; /* handshake, pongs, senders */

	struct agentless_limits lim;
	agentless_broken_fn on_broken;
	void *opaque;

	struct sbx_channel ch;
	bool have_ch;
	bool ch_eof;	  /* the attached channel reported EOF */
	unsigned senders; /* threads inside ch.send() */

	bool ready;		  /* HELLO answered with WELCOME */
	bool hello_pending;	  /* HELLO arrived with no usable channel yet */
	uint32_t version;	  /* negotiated */
	bool version_assumed;	  /* reattached without a HELLO yet: WIRE_VERSION_MIN */
	int64_t assumed_until_ms; /* sbx_mono_ms(): the guest's HELLO is due by then */
	bool broken;		  /* no execs until the next attach */
	bool closed;		  /* agentless_conn_close: no attach any more */
	bool rx_dead;		  /* ignore input until EOF or the next attach */
	char broken_msg[128];

	/* frame reassembly */
	uint8_t hdr[WIRE_HEADER_LEN];
	size_t hdr_got;
	struct wire_header cur;
	uint8_t *payload;
	size_t payload_alloc;
	size_t payload_got;

	struct exec *execs;
	unsigned n_execs;
	uint32_t next_id;
	uint32_t abandoned[ABANDONED_MAX];
	unsigned n_abandoned;
	unsigned abandoned_pos;

	struct ping_waiter *pings;
	uint32_t next_ping;

	/* file transfers (xfer.c): in flight, and aborted ones kept a while
	 * to absorb the frames the guest had already sent */
	struct agentless_xfer *xfers;
	unsigned n_xfers;
	/* TCP streams (tcp.c), open and reset ones absorbing late frames */
	struct agentless_tcp *tcps;
	unsigned n_tcps;
	/* v7: who takes the streams the guest opens (NULL: refused), and
	 * how many it may hold at once */
	agentless_tcp_accept_fn tcp_accept;
	void *tcp_accept_opaque;
	unsigned tcp_accept_max;

	/* v4 credit window: the epoch of the open one (0: none) and the
	 * next to hand out (both per connection) */
	uint32_t credit_epoch;
	uint32_t next_epoch;
	/* The same window for a guest that does not CREDIT (older than v4,
	 * or not heard from since a reattach): the host confirms what it
	 * wrote with PINGs of its own, WIN_PING_EVERY bytes apart; a PONG
	 * proves the guest read every byte queued before its PING.
	 * win_sent counts the bytes of frames queued whole since the window
	 * opened, win_pings the PINGs in flight (id, win_sent when sent). */
	bool ping_window;
	uint64_t win_sent, win_pinged;
	/* where a v4 guest's CREDITs count from, past the window's start:
	 * 0, or the end of the WELCOME that moved a PING-confirmed window to
	 * CREDITs (as counted, never past where it really ends) */
	uint64_t credit_base;
	/* the most credited to the channel, and the guest's last ACKED */
	uint64_t win_credited, guest_acked;
	struct {
		uint32_t id;
		uint64_t mark;
	} win_pings[WIN_PINGS_MAX];
	unsigned win_ping_head, win_ping_n;
	uint32_t next_win_ping;

	/* A streamed exec's output frames that arrive back to back (one
	 * read's worth of tiny frames) go to its on_output as one chunk: the
	 * recv thread gathers them here and hands them on before any other
	 * frame, and before agentless_conn_recv returns (so nothing waits). */
	uint32_t co_id;
	uint8_t co_type;
	size_t co_len;
	uint8_t co_buf[WIRE_MAX_CHUNK];

	/* the frame budget (agentless.h): a bucket refilled at
	 * AGENTLESS_FRAMES_PER_S, negative while the guest is past it; the
	 * frames of the read being parsed (recv thread only); the last time
	 * a hold was logged */
	double frame_tokens;
	int64_t frame_at_ms;
	unsigned rx_frames;
	int64_t frame_logged_ms;

	unsigned hellos;	   /* HELLOs on this channel */
	double unsolicited_tokens; /* bucket, refilled at UNSOLICITED_PER_S */
	int64_t unsolicited_at_ms; /* last refill, sbx_mono_ms() */
};

/* agentless.c */
/* Queue one frame on the channel (never blocks). 0, or -1 without a usable
 * channel. No lock held. */
int conn_send(struct agentless_conn *c, uint8_t type, uint32_t id, const uint8_t *payload,
	      size_t len);
/* Queue an ERROR {ERROR_KIND, MESSAGE} for id. No lock held. */
void conn_send_error(struct agentless_conn *c, uint32_t id, uint32_t kind, const char *msg);
/* Break the connection for a protocol violation. No lock held. */
void conn_violation(struct agentless_conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* One token of the unsolicited-frame budget; false when flooding. Lock. */
bool conn_unsolicited_ok_locked(struct agentless_conn *c);
/* Remember an id the host gave up on (its late frames are dropped). Lock. */
void conn_abandon(struct agentless_conn *c, uint32_t id);
bool conn_is_abandoned(struct agentless_conn *c, uint32_t id);
/* True when an exec or a transfer uses `id`. Lock. */
bool conn_id_used_locked(struct agentless_conn *c, uint32_t id);
/* Printable ASCII only, at most GUEST_TEXT_MAX bytes, into out. */
void sanitize_text(const void *in, size_t len, char *out, size_t outlen);
/* Decode an ERROR payload: its kind, and PARAM / MESSAGE sanitised into
 * param / msg (either may be NULL). 0, or -1 when malformed or without a
 * kind. */
int conn_error_parse(const uint8_t *p, size_t len, uint32_t *kind, char *param, size_t param_len,
		     char *msg, size_t msg_len);

/* calloc that aborts on ENOMEM (as everywhere in this module). */
void *xcalloc(size_t n, size_t size);
/* CLOCK_MONOTONIC in microseconds. */
int64_t now_mono_us(void);
/* Wait on c->cond until the sbx_mono_ms() deadline. Returns ETIMEDOUT once
 * the deadline has passed. Call with c->lock held. */
int conn_wait_until(struct agentless_conn *c, int64_t deadline_ms);

/* ping.c */
/* A PONG to one of the host's own PINGs (not a window PING): wakes its
 * waiter; a PONG nobody waits for is dropped, a flood of them breaks the
 * conn. Recv thread, no lock held. */
void conn_ping_answered(struct agentless_conn *c, uint32_t id, const uint8_t *p, size_t len);

/* exec.c */
/* A frame of an exec or a PROC request (STDOUT, STDERR, EXIT, ERROR,
 * PROC_REPLY): true when handled here. Recv thread, no lock held. */
bool exec_frame(struct agentless_conn *c, const struct wire_header *h, const uint8_t *p,
		size_t len);
/* Hand gathered output (co_*) to its exec's on_output. Recv thread (or
 * after the channel closed), no lock held. */
void exec_output_flush(struct agentless_conn *c);
/* The exec in flight with this id, or NULL. Lock. */
struct exec *exec_find_locked(struct agentless_conn *c, uint32_t id);
/* Fail each exec of the list (already unlinked) with err and free it. No
 * lock held. */
void execs_fail(struct exec *list, const struct sbx_error *err);

/* pty.c */
/* A PTY_ACK from the guest. Recv thread, no lock held. */
void pty_ack_frame(struct agentless_conn *c, const struct wire_header *h, const uint8_t *p,
		   size_t len);

/* xfer.c */
/* The transfer (in flight or aborted) with this id, or NULL. Lock. */
struct agentless_xfer *xfer_find_locked(struct agentless_conn *c, uint32_t id);
/* A frame for a transfer (FILE_*, or ERROR naming a transfer's id): true
 * when handled here. Recv thread, no lock held. */
bool xfer_frame(struct agentless_conn *c, const struct wire_header *h, const uint8_t *p,
		size_t len);
/* Fail every transfer of the list (already unlinked from the conn) with
 * err, and drop the conn's references. No lock held. */
void xfer_fail_list(struct agentless_xfer *list, const struct sbx_error *err);
/* Transfers' deadlines and releases, from agentless_conn_tick. */
void xfer_tick(struct agentless_conn *c, int64_t now_ms);

/* tcp.c */
struct agentless_tcp *tcp_find_locked(struct agentless_conn *c, uint32_t id);
/* A TCP_* frame, or an ERROR naming a stream: true when handled here.
 * Recv thread, no lock held. */
bool tcp_frame(struct agentless_conn *c, const struct wire_header *h, const uint8_t *p, size_t len);
/* Fail every stream of the list (unlinked already). No lock held. */
void tcp_fail_list(struct agentless_tcp *list, const struct sbx_error *err);
/* Streams' deadlines and resets, from agentless_conn_tick. */
void tcp_tick(struct agentless_conn *c, int64_t now_ms);

#endif
