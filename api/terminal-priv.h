/* api/terminal-priv.h: a terminal's object, shared by the two files of
 * GET /v1/sandboxes/{id}/terminal (docs/api.md "Terminal"):
 *
 *   http_terminal.c      the terminal's thread: WebSocket frames both ways
 *                        with the client it has, and between clients the
 *                        wait for a reattach (the reconnect grace);
 *   http_terminal_reg.c  the registry (ids, counts, the server's stop),
 *                        the exec's callbacks, and the route (a new
 *                        terminal, or ?attach=<id>).
 *
 * A terminal is one shell (a streamed pty exec) and one thread, from the
 * first 101 to its end; its clients come and go. A client's WebSocket
 * that drops (no close frame) detaches it: the shell goes on for
 * terminal_reconnect_grace_ms, keeping at most TERM_DETACHED_TAIL bytes
 * of its output for the next client (past that the guest is PAUSEd: the
 * shell blocks on its writes), and GET ...?attach=<id> of the same
 * account and sandbox hands a new socket to the thread. Past the grace
 * the shell is hung up as when the client closes.
 *
 * Locking. Lock order: reg.lock (http_terminal_reg.c), then t->lock;
 * only term_claim takes both, in that order. Neither is held across
 * socket I/O, MHD_upgrade_action or a sandbox/ call, but for
 * sandbox_output_shrink under t->lock (the output budget's own leaf
 * lock: it calls nothing back). */
#ifndef SBX_API_TERMINAL_PRIV_H
#define SBX_API_TERMINAL_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "http-priv.h"

#define TERM_FRAME_MAX	   (64u * 1024) /* a client frame's payload */
#define TERM_TEXT_MAX	   (64u * 1024) /* a client text message */
#define TERM_IN_BUF	   (TERM_FRAME_MAX + WS_HEADER_MAX)
#define TERM_PEND_MAX	   (64u * 1024)	       /* keystrokes waiting for the window */
#define TERM_OUT_PAUSE	   (256u * 1024)       /* PAUSE the guest above this */
#define TERM_OUT_RESUME	   (64u * 1024)	       /* RESUME it below this */
#define TERM_OUT_HARD	   (16u * 1024 * 1024) /* past this the client is too slow */
#define TERM_DETACHED_TAIL (64u * 1024)	       /* output kept while no client is there */
#define TERM_CHUNK	   (16u * 1024)	       /* output bytes per frame to the client */
#define TERM_CTRL_MAX	   1024		       /* queued control frames (pongs, hello) */
#define TERM_ID_MAX	   32		       /* "term_" + 24 hex + NUL */

/* Who has the terminal's client side (under t->lock). */
enum term_client {
	TERM_CLAIMED,  /* a request between its handler and its 101 */
	TERM_ATTACHED, /* the thread has a client's socket */
	TERM_DETACHED, /* no client: the grace runs */
};

struct term {
	pthread_mutex_t lock;
	int refs; /* the thread's, the exec's, each request's */
	struct sandbox_svc *svc;
	uint32_t idle_ms;
	uint32_t grace_ms; /* terminal_reconnect_grace_ms; 0: no reattach */
	char id[TERM_ID_MAX];
	char account_id[SANDBOX_ID_MAX];
	char sandbox_id[SANDBOX_ID_MAX];
	uint32_t exec_id;
	int efd; /* eventfd: wakes the thread */

	/* under lock */
	uint8_t *out; /* guest -> client */
	size_t out_len, out_cap;
	bool paused;   /* term_output asked the guest to PAUSE */
	bool too_slow; /* out passed TERM_OUT_HARD */
	bool done;     /* the exec ended: exit_code, or failed with err */
	bool failed;
	int exit_code;
	struct sbx_error err;
	bool detached;		 /* no client reads: out keeps a tail */
	bool ended;		 /* no client can attach any more */
	enum term_client client; /* see above */
	uint64_t claim_seq;	 /* the last claim's number */
	/* a reattached client's socket, for the thread to take */
	bool hand_ready;
	MHD_socket hand_sock;
	struct MHD_UpgradeResponseHandle *hand_urh;
	uint8_t *hand_in; /* bytes that came before the 101 (malloc'd) */
	size_t hand_in_len;

	/* the thread's own */
	MHD_socket sock;
	int reg_sock; /* sock while the thread has it open; under reg.lock */
	/* what out holds, charged to the output budget (sandbox.h) */
	struct sandbox_output_hold hold;
	struct MHD_UpgradeResponseHandle *urh;
	uint8_t in[TERM_IN_BUF];
	size_t in_len;
	uint8_t pend[TERM_PEND_MAX];
	size_t pend_len;
	uint8_t *text; /* a text message being assembled (TERM_TEXT_MAX) */
	size_t text_len;
	bool in_text;	/* inside a fragmented text message */
	bool in_binary; /* inside a fragmented binary message */
	uint8_t wq[WS_HEADER_MAX + TERM_CHUNK + TERM_CTRL_MAX];
	size_t wq_len, wq_off;
	int64_t active_ms; /* last byte either way */
	bool reattached;   /* the client of this turn came by ?attach= */

	struct term *prev, *next; /* the registry's list, under reg.lock */
};

/* One request's hold on a terminal (struct req's term): the request's
 * reference, and whether its 101 went out (under t->lock). */
struct term_req {
	struct term *t;
	uint64_t seq; /* its claim (t->claim_seq when it claimed) */
	bool attach;  /* ?attach=: the thread exists already */
	bool upgraded;
};

/* http_terminal_reg.c */
void term_wake(struct term *t);
void term_unref(struct term *t);
bool term_reg_stopping(void);
/* The thread's socket, as the registry's stop sees it (-1: none). */
void term_reg_sock(struct term *t, int sock);
/* A terminal's thread is counted from before it starts until it ends
 * (api_terminals_stop waits for none). */
void term_reg_thread_enter(void);
void term_reg_thread_exit(void);

/* http_terminal.c: the upgrade callbacks (cls: the request's struct
 * term_req) of a new terminal (its thread starts) and of a reattach (the
 * socket goes to the waiting thread). */
void term_upgraded(void *cls, struct MHD_Connection *c, void *req_cls, const char *extra_in,
		   size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh);
void term_reattached(void *cls, struct MHD_Connection *c, void *req_cls, const char *extra_in,
		     size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh);
/* Trim what is kept to the detached tail (call with t->lock held). */
void term_out_trim(struct term *t, size_t keep);

#endif
