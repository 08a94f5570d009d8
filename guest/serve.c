/* sandboxd-init: the exec protocol (wire.h) on the guest side.
 *
 * One poll() loop owns everything: a signalfd (SIGCHLD to reap, SIGIO for
 * host connect/disconnect on the port), the port, the stdout/stderr pipes
 * of running execs and the pipes background processes kept after their
 * exec ended. Nothing here blocks and nothing sleeps in a loop.
 *
 * Connection state. The port reports POLLHUP while no host is connected, so
 * it is only polled while connected; the driver raises SIGIO (O_ASYNC) on
 * every host open/close, and on each SIGIO the state is re-read. (A close
 * and re-open faster than the guest's loop turn, a few ms, can coalesce
 * into one SIGIO and go unseen; real reconnects take far longer.) On connect
 * the guest sends HELLO. On disconnect the outbound queue and the input
 * reassembly are dropped (a frame cannot be resumed on a new connection),
 * and running execs are detached: exec ids belong to a connection, so a
 * detached exec keeps running to its end or deadline, its output is read
 * and dropped, and no frame about it is ever sent again.
 *
 * Exec lifecycle: EXEC -> validate -> cgroup sbx-exec-<id>.<n> -> fork
 * (setsid, join cgroup, chdir, stdin /dev/null, execve /bin/sh -c: these
 * steps are guest_spawn()'s, in spawn.c) ->
 * STDOUT/STDERR frames (the first cap bytes of each stream) -> the sh is
 * reaped -> drain the pipes -> EXIT. Pipes still held by background
 * processes stay in the poll set (read and dropped) until EOF; the cgroup
 * is removed once empty.
 *
 * Version 4: the credit window. After a WELCOME that opens one, every byte
 * read from the port counts, and CREDIT frames report the count (each
 * WINDOW/4 bytes, and whenever the port is drained), so the host never
 * has more than WINDOW bytes unread in flight.
 *
 * Version 3: a streamed exec (STREAM) ships each read at once, and PAUSE /
 * RESUME take its pipes out of the poll set and back. Background processes
 * (PROC) are proc.c's: serve.c hands it their frames, polls their pipes
 * for it, and tells it which children were reaped; both start commands
 * with guest_spawn(). The execs themselves (their slots, pipes, EXIT and
 * the orphaned pipes) are exec.c's; this file polls them and routes.
 */
#include "guest/init.h"
#include "agentless/wire.h"
#include "guest/exec-priv.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SBX_GUEST_MIN(a, b) ((a) < (b) ? (a) : (b))
#define QUEUE_SOFT	    (8u << 20)	/* stop reading exec pipes above this */
#define QUEUE_HARD	    (32u << 20) /* never queue beyond this */
static struct {
	int port;
	bool connected;
	bool in_bad;	       /* framing lost: discard input until reconnect */
	bool rehello_sent;     /* HELLO repeated after a low WELCOME (welcome_check) */
	uint32_t host_version; /* the last WELCOME's (0: none on this connection) */
	int sfd;

	/* outbound bytes: frames back to back, [head, len) unsent */
	uint8_t *q;
	size_t q_head, q_len, q_cap;

	/* inbound reassembly */
	uint8_t in[WIRE_HEADER_LEN + WIRE_MAX_PAYLOAD];
	size_t in_len;

	/* v4 credit: bytes read from the port on this connection, the
	 * position where the current epoch's count starts (the end of its
	 * WELCOME), what was last reported, every how many bytes */
	uint64_t rx_total;
	uint64_t frame_end; /* position of the end of the frame being handled */
	bool credit_on;
	uint32_t credit_epoch;
	uint64_t credit_origin, credit_sent;
	uint32_t credit_step;

	uint8_t scratch[64 * 1024];
} S = {.port = -1, .sfd = -1};

/* ------------------------------------------------------------ out queue */

static size_t queue_size(void)
{
	return S.q_len - S.q_head;
}

/* Append one frame. Frames are dropped while no host is connected (they
 * belong to a connection) or above QUEUE_HARD (never reached in practice:
 * producers stop at QUEUE_SOFT). */
static void frame_send(uint8_t type, uint32_t id, const void *payload, size_t len)
{
	struct wire_header h = {.type = type, .id = id, .len = (uint32_t)len};
	size_t need = WIRE_HEADER_LEN + len;

	if (!S.connected || len > WIRE_MAX_GUEST_PAYLOAD)
		return;
	if (queue_size() + need > QUEUE_HARD) {
		guest_log("outbound queue full, frame type %u dropped", type);
		return;
	}
	if (S.q_head > 0 && (S.q_head == S.q_len || S.q_len + need > S.q_cap)) {
		memmove(S.q, S.q + S.q_head, S.q_len - S.q_head);
		S.q_len -= S.q_head;
		S.q_head = 0;
	}
	if (S.q_len + need > S.q_cap) {
		size_t cap = S.q_cap ? S.q_cap : 256 * 1024;
		uint8_t *nq;

		while (cap < S.q_len + need)
			cap *= 2;
		nq = realloc(S.q, cap);
		if (!nq) {
			guest_log("out of memory queueing a frame");
			return;
		}
		S.q = nq;
		S.q_cap = cap;
	}
	wire_header_encode(&h, S.q + S.q_len);
	if (len)
		memcpy(S.q + S.q_len + WIRE_HEADER_LEN, payload, len);
	S.q_len += need;
}

static void frame_send_w(uint8_t type, uint32_t id, const struct wire_writer *w)
{
	if (w->overflow) {
		guest_log("frame type %u overflowed its buffer", type);
		return;
	}
	frame_send(type, id, w->buf, w->len);
}

static void queue_drop(void)
{
	S.q_head = S.q_len = 0;
	if (S.q_cap > (1u << 20)) {
		free(S.q);
		S.q = NULL;
		S.q_cap = 0;
	}
}

/* Write what the port takes now (virtio_console takes <= 32 KiB a call). */
static void queue_flush(void)
{
	while (S.connected && queue_size() > 0) {
		ssize_t n = write(S.port, S.q + S.q_head, queue_size());

		if (n > 0) {
			S.q_head += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		break; /* EAGAIN: wait for POLLOUT; other errors: SIGIO/POLLHUP tell */
	}
	if (S.q_head == S.q_len)
		S.q_head = S.q_len = 0;
}

/* --------------------------------------------------------------- replies */

static void send_hello(void)
{
	uint8_t buf[64];
	struct wire_writer w;
	int64_t boot = guest_boot_ms();
	uint32_t version = guest_hostile_hello_version(WIRE_VERSION);

	if (version == 0)
		return;
	wire_writer_init(&w, buf, sizeof(buf));
	wire_put_u32(&w, WIRE_T_VERSION, version);
	wire_put_u32(&w, WIRE_T_VERSION_MIN, WIRE_VERSION_MIN);
	wire_put_u32(&w, WIRE_T_BOOT_MS, boot > UINT32_MAX ? UINT32_MAX : (uint32_t)boot);
	frame_send_w(WIRE_HELLO, 0, &w);
}

void guest_send_error(uint32_t id, uint32_t kind, const char *param, const char *msg)
{
	uint8_t buf[512];
	struct wire_writer w;

	wire_writer_init(&w, buf, sizeof(buf));
	wire_put_u32(&w, WIRE_T_ERROR_KIND, kind);
	if (param)
		wire_put_str(&w, WIRE_T_PARAM, param);
	wire_put_str(&w, WIRE_T_MESSAGE, msg);
	frame_send_w(WIRE_ERROR, id, &w);
}

void guest_frame_send(uint8_t type, uint32_t id, const void *payload, size_t len)
{
	frame_send(type, id, payload, len);
}

/* ----------------------------------------------------------- host input */

static void set_clock(const uint8_t *p, size_t len)
{
	struct wire_reader rd;
	struct wire_field f;
	uint64_t ns;

	wire_reader_init(&rd, p, len);
	while (wire_next(&rd, &f) == 1) {
		if (f.tag != WIRE_T_TIME_NS || wire_field_u64(&f, &ns) < 0 || ns == 0)
			continue;
		/* Only PID 1 of a guest owns its clock: the same code running on a
		 * host (the fuzz target, a test) must never set the host's. */
		if (getpid() != 1)
			continue;
		struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
				      .tv_nsec = (long)(ns % 1000000000u)};
		if (clock_settime(CLOCK_REALTIME, &ts) < 0)
			guest_log("clock_settime: %s", strerror(errno));
	}
}

/* A WELCOME below our version may be a host that reattached without
 * seeing our HELLO (a reconnect this loop did not notice) and assumed the
 * oldest version: say HELLO once more on this connection so it learns the
 * real one. Once only: an older host answers the same again. */
static void welcome_check(uint32_t id, const uint8_t *p, size_t len)
{
	struct wire_reader rd;
	struct wire_field f;
	uint32_t v = 0, window = 0;

	wire_reader_init(&rd, p, len);
	while (wire_next(&rd, &f) == 1) {
		if (f.tag == WIRE_T_VERSION && wire_field_u32(&f, &v) == 0 && v < WIRE_VERSION &&
		    !S.rehello_sent) {
			S.rehello_sent = true;
			send_hello();
		}
		if (f.tag == WIRE_T_WINDOW && wire_field_u32(&f, &window) < 0)
			window = 0;
	}
	S.host_version = v;
	/* v4 with a window and an epoch: count from the end of this frame,
	 * unless it repeats the epoch we count for (a WELCOME answering a
	 * repeated HELLO: the host's window goes on); anything else: report
	 * nothing (an older host, or a channel without a window) */
	if (S.credit_on && window >= 4 && id == S.credit_epoch)
		return;
	S.credit_on = v >= 4 && window >= 4 && id != 0;
	S.credit_epoch = id;
	S.credit_origin = S.frame_end;
	S.credit_sent = 0;
	S.credit_step = window / 4;
}

/* Report what was read since the last CREDIT: once a step's worth is
 * unreported, or (drained) whenever any is. */
static void credit_report(bool drained)
{
	uint8_t buf[16];
	struct wire_writer w;
	uint64_t acked = S.rx_total - S.credit_origin;

	if (!S.credit_on || acked == S.credit_sent ||
	    (!drained && acked - S.credit_sent < S.credit_step))
		return;
	wire_writer_init(&w, buf, sizeof(buf));
	wire_put_u64(&w, WIRE_T_ACKED, acked);
	frame_send_w(WIRE_CREDIT, S.credit_epoch, &w);
	S.credit_sent = acked;
	queue_flush(); /* now, not at the end of the loop's turn */
}

static void frame_handle(const struct wire_header *h, const uint8_t *p)
{
	switch (h->type) {
	case WIRE_WELCOME:
		welcome_check(h->id, p, h->len);
		set_clock(p, h->len);
		break;
	case WIRE_TIME:
		set_clock(p, h->len);
		break;
	case WIRE_PING:
		if (h->len <= WIRE_MAX_GUEST_PAYLOAD)
			frame_send(WIRE_PONG, h->id, p, h->len);
		break;
	case WIRE_EXEC:
		if (!guest_hostile_exec(h->id, p, h->len))
			guest_exec_start(h->id, p, h->len);
		break;
	case WIRE_KILL:
		guest_exec_kill_req(h->id);
		break;
	case WIRE_FILE_OPEN:
	case WIRE_FILE_DATA:
	case WIRE_FILE_END:
	case WIRE_FILE_ACK:
	case WIRE_FILE_ABORT:
		guest_files_frame(h->type, h->id, p, h->len);
		break;
	case WIRE_PAUSE:
	case WIRE_RESUME:
		guest_exec_pause_req(h->id, h->type == WIRE_PAUSE);
		break;
	case WIRE_PROC:
		guest_proc_request(h->id, p, h->len);
		break;
	case WIRE_PTY_INPUT:
	case WIRE_PTY_RESIZE:
		guest_pty_frame(h->type, h->id, p, h->len);
		break;
	case WIRE_TCP_OPEN:
	case WIRE_TCP_OPENED:
	case WIRE_TCP_DATA:
	case WIRE_TCP_ACK:
	case WIRE_TCP_CLOSE:
		guest_tcp_frame(h->type, h->id, p, h->len);
		break;
	case WIRE_ERROR: /* v7: the host refused a stream the guest opened */
		if (h->id & WIRE_TCP_GUEST_BIT)
			guest_tcp_frame(h->type, h->id, p, h->len);
		break;
	default:
		break; /* unknown or guest-bound types: ignore */
	}
}

/* Parse every complete frame in S.in. */
static void input_parse(void)
{
	size_t off = 0;

	while (!S.in_bad && S.in_len - off >= WIRE_HEADER_LEN) {
		struct wire_header h;

		if (wire_header_decode(S.in + off, WIRE_MAX_PAYLOAD, &h) < 0) {
			guest_log("bad frame header from host: discarding input until reconnect");
			S.in_bad = true;
			S.in_len = 0;
			return;
		}
		if (S.in_len - off < WIRE_HEADER_LEN + (size_t)h.len)
			break;
		/* where this frame ends in the port's byte stream */
		S.frame_end = S.rx_total - (S.in_len - off - WIRE_HEADER_LEN - h.len);
		frame_handle(&h, S.in + off + WIRE_HEADER_LEN);
		off += WIRE_HEADER_LEN + h.len;
	}
	if (off) {
		memmove(S.in, S.in + off, S.in_len - off);
		S.in_len -= off;
	}
}

#ifdef SBX_GUEST_FUZZ
int guest_fuzz_input(const uint8_t *data, size_t len)
{
	/* Not connected: every reply frame is dropped, nothing is written. */
	S.connected = false;
	S.in_bad = false;
	S.in_len = 0;
	while (len > 0 && !S.in_bad) {
		size_t n = SBX_GUEST_MIN(len, sizeof(S.in) - S.in_len);

		memcpy(S.in + S.in_len, data, n);
		S.in_len += n;
		data += n;
		len -= n;
		input_parse();
		if (S.in_len == sizeof(S.in))
			break; /* a full buffer without a whole frame: header said <= max */
	}
	S.in_len = 0;
	return 0;
}
#endif

static void port_read(void)
{
	for (int turns = 0; turns < 64 && S.connected; turns++) {
		uint8_t *dst = S.in_bad ? S.scratch : S.in + S.in_len;
		size_t room = S.in_bad ? sizeof(S.scratch) : sizeof(S.in) - S.in_len;
		ssize_t n = read(S.port, dst, room);

		if (n > 0) {
			S.rx_total += (size_t)n;
			/* the bytes are ours now: report them before handling
			 * the frames (a file write may take a while) */
			credit_report(false);
			if (!S.in_bad) {
				S.in_len += (size_t)n;
				input_parse();
				guest_files_acks();
			}
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		/* EAGAIN (drained), or 0/error meaning the host left (POLLHUP
		 * follows) */
		credit_report(true);
		return;
	}
}

/* ----------------------------------------------------------- connection */

static void port_disconnected(void)
{
	ssize_t n;

	S.connected = false;
	S.in_bad = false;
	S.in_len = 0;
	S.credit_on = false;
	queue_drop();
	guest_files_disconnected();
	guest_pty_disconnected();
	guest_tcp_disconnected();
	/* What the old host sent and we did not read is not for the next one. */
	while ((n = read(S.port, S.scratch, sizeof(S.scratch))) > 0 || (n < 0 && errno == EINTR))
		;
	for (unsigned i = 0; i < EXEC_MAX; i++)
		if (X.execs[i].used) {
			X.execs[i].detached = true;
			X.execs[i].out.chunk_len = X.execs[i].err.chunk_len = 0;
		}
	guest_log("host disconnected");
}

static void port_connected(void)
{
	S.connected = true;
	S.in_bad = false;
	S.in_len = 0;
	S.rehello_sent = false;
	S.host_version = 0;
	S.credit_on = false;
	S.rx_total = 0;
	send_hello();
	queue_flush();
}

/* Re-read the host connection state (after SIGIO or POLLHUP). */
static void port_check(void)
{
	struct pollfd p = {.fd = S.port, .events = POLLIN | POLLOUT};

	if (poll(&p, 1, 0) < 0)
		return;
	if ((p.revents & POLLHUP) && S.connected)
		port_disconnected();
	else if (!(p.revents & POLLHUP) && !S.connected)
		port_connected();
}

static int signals_setup(void)
{
	struct sigaction sa;
	sigset_t set;
	int flags;

	memset(&sa, 0, sizeof(sa));
	/* PID 1 drops signals left at SIG_DFL; blocked ones still reach the
	 * signalfd, and the no-op handler makes sure of it. */
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGIO);
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
		return -1;
	S.sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (S.sfd < 0)
		return -1;
	if (fcntl(S.port, F_SETOWN, getpid()) < 0)
		return -1;
	flags = fcntl(S.port, F_GETFL);
	if (flags < 0 || fcntl(S.port, F_SETFL, flags | O_ASYNC | O_NONBLOCK) < 0)
		return -1;
	return 0;
}

static void signals_read(void)
{
	struct signalfd_siginfo si[16];
	bool chld = false, io = false;
	ssize_t n;

	while ((n = read(S.sfd, si, sizeof(si))) > 0) {
		for (size_t i = 0; i < (size_t)n / sizeof(si[0]); i++) {
			if (si[i].ssi_signo == SIGCHLD)
				chld = true;
			else if (si[i].ssi_signo == SIGIO)
				io = true;
		}
	}
	if (chld)
		guest_exec_reap();
	if (io)
		port_check();
}

/* ------------------------------------------------------------ the loop */

enum pfd_kind {
	PK_SIG,
	PK_PORT,
	PK_OUT,
	PK_ERR,
	PK_ORPHAN,
	PK_FILE,
	PK_PROC,
	PK_PTY,
	PK_TCP,
	PK_PROXY
};
#define PROXY_POLL_MAX 17

#define FILES_POLL_MAX 64

#define NOHOST_RECHECK_MS 500

/* The poll set of one loop turn: who[i] says what pfd[i] is. */
static struct {
	struct pollfd pfd[2 + 2 * EXEC_MAX + ORPHAN_MAX + FILES_POLL_MAX + 3 * WIRE_PROC_MAX +
			  WIRE_TCP_MAX + PROXY_POLL_MAX];
	unsigned file_slot[FILES_POLL_MAX];
	unsigned proxy_slot[PROXY_POLL_MAX];
	unsigned proc_tags[2 * WIRE_PROC_MAX];
	unsigned tcp_slot[WIRE_TCP_MAX];
	struct {
		enum pfd_kind kind;
		unsigned idx;
	} who[2 + 2 * EXEC_MAX + ORPHAN_MAX + FILES_POLL_MAX + 3 * WIRE_PROC_MAX + WIRE_TCP_MAX +
	      PROXY_POLL_MAX];
} P;

/* Fill P with what to poll this turn; lower *next to the earliest
 * deadline (execs', processes', the hostile kit's). Returns the count. */
static nfds_t poll_build(bool backpressure, int64_t now, int64_t *next)
{
	nfds_t n = 0;
	unsigned nf;

	P.pfd[n] = (struct pollfd){.fd = S.sfd, .events = POLLIN};
	P.who[n].kind = PK_SIG;
	n++;
	if (S.connected) {
		short ev = backpressure || guest_hostile_deaf() ? 0 : POLLIN;

		if (queue_size() > 0)
			ev |= POLLOUT;
		P.pfd[n] = (struct pollfd){.fd = S.port, .events = ev};
		P.who[n].kind = PK_PORT;
		n++;
	}
	for (unsigned i = 0; i < EXEC_MAX; i++) {
		struct exec *e = &X.execs[i];

		if (!e->used)
			continue;
		if (!e->reaped && (*next < 0 || e->deadline_ms < *next))
			*next = e->deadline_ms;
		if ((backpressure || e->paused) && !e->detached)
			continue;
		if (e->out.fd >= 0) {
			P.pfd[n] = (struct pollfd){.fd = e->out.fd, .events = POLLIN};
			P.who[n].kind = PK_OUT;
			P.who[n].idx = i;
			n++;
		}
		if (e->err.fd >= 0) {
			P.pfd[n] = (struct pollfd){.fd = e->err.fd, .events = POLLIN};
			P.who[n].kind = PK_ERR;
			P.who[n].idx = i;
			n++;
		}
	}
	for (unsigned i = 0; i < X.n_orphans; i++) {
		P.pfd[n] = (struct pollfd){.fd = X.orphans[i], .events = POLLIN};
		P.who[n].kind = PK_ORPHAN;
		P.who[n].idx = i;
		n++;
	}
	nf = guest_files_pollfds(P.pfd + n, P.file_slot, FILES_POLL_MAX);
	for (unsigned i = 0; i < nf; i++) {
		P.who[n + i].kind = PK_FILE;
		P.who[n + i].idx = P.file_slot[i];
	}
	n += nf;
	{
		unsigned k = guest_proc_pollfds(P.pfd + n, P.proc_tags, 2 * WIRE_PROC_MAX);
		int64_t pnext = guest_proc_tick(now);

		for (unsigned j = 0; j < k; j++) {
			P.who[n + j].kind = PK_PROC;
			P.who[n + j].idx = P.proc_tags[j];
		}
		n += k;
		k = guest_pty_pollfds(P.pfd + n, P.proc_tags, WIRE_PROC_MAX);
		for (unsigned j = 0; j < k; j++) {
			P.who[n + j].kind = PK_PTY;
			P.who[n + j].idx = P.proc_tags[j];
		}
		n += k;
		k = S.connected ? guest_tcp_pollfds(P.pfd + n, P.tcp_slot, WIRE_TCP_MAX) : 0;
		for (unsigned j = 0; j < k; j++) {
			P.who[n + j].kind = PK_TCP;
			P.who[n + j].idx = P.tcp_slot[j];
		}
		n += k;
		k = guest_proxy_pollfds(P.pfd + n, P.proxy_slot, PROXY_POLL_MAX, next);
		for (unsigned j = 0; j < k; j++) {
			P.who[n + j].kind = PK_PROXY;
			P.who[n + j].idx = P.proxy_slot[j];
		}
		n += k;
		if (pnext >= 0 && (*next < 0 || pnext < *next))
			*next = pnext;
		pnext = guest_hostile_wake_ms();
		if (pnext >= 0 && (*next < 0 || pnext < *next))
			*next = pnext;
	}
	return n;
}

/* poll()'s timeout for the earliest deadline `next` (-1: none). */
static int poll_timeout(int64_t next, int64_t now, bool more_files, bool backpressure)
{
	int timeout = next < 0		     ? -1
		      : next <= now	     ? 0
		      : next - now > INT_MAX ? INT_MAX
					     : (int)(next - now);

	/* While no host is connected, the connect is normally signalled by
	 * SIGIO; a connect that lands between open() and F_SETOWN, or two
	 * back to back, can go unsignalled and the guest would never say
	 * HELLO. So also look again every NOHOST_RECHECK_MS (an idle
	 * wake-up twice a second, only while nobody is connected). */
	if (!S.connected && (timeout < 0 || timeout > NOHOST_RECHECK_MS))
		timeout = NOHOST_RECHECK_MS;
	if (more_files && !backpressure)
		timeout = 0;
	return timeout;
}

/* Hand each ready fd of P's first n to its owner. */
static void poll_dispatch(nfds_t n)
{
	for (nfds_t i = 0; i < n; i++) {
		short re = P.pfd[i].revents;

		if (!re)
			continue;
		switch (P.who[i].kind) {
		case PK_SIG:
			signals_read();
			break;
		case PK_PORT:
			if (!S.connected)
				break;
			if (re & POLLHUP) {
				/* The state may have changed again since (a
				 * SIGIO handled above): ask, do not assume. */
				port_check();
				break;
			}
			if (re & POLLIN)
				port_read();
			if (re & POLLOUT)
				queue_flush();
			break;
		case PK_OUT:
		case PK_ERR: {
			struct exec *e = &X.execs[P.who[i].idx];

			if (e->used)
				guest_stream_read(e, P.who[i].kind == PK_OUT ? &e->out : &e->err,
						  READ_BUDGET);
			break;
		}
		case PK_PROC:
			guest_proc_ready(P.who[i].idx);
			break;
		case PK_ORPHAN:
			if (!guest_orphan_read(X.orphans[P.who[i].idx]))
				X.orphans[P.who[i].idx] = -1;
			break;
		case PK_FILE:
			guest_files_ready(P.who[i].idx);
			break;
		case PK_PTY:
			guest_pty_ready(P.who[i].idx);
			break;
		case PK_TCP:
			if (S.connected)
				guest_tcp_ready(P.who[i].idx, re);
			break;
		case PK_PROXY:
			guest_proxy_ready(P.who[i].idx, S.connected ? S.host_version : 0);
			break;
		}
	}
}

/* The end of a loop turn: compact closed orphans, kill the overdue execs,
 * finish the reaped, write what the port takes. */
static void turn_end(void)
{
	unsigned j = 0;
	int64_t now;

	for (unsigned i = 0; i < X.n_orphans; i++)
		if (X.orphans[i] >= 0)
			X.orphans[j++] = X.orphans[i];
	X.n_orphans = j;

	now = guest_mono_ms();
	guest_proxy_tick(now);
	for (unsigned i = 0; i < EXEC_MAX; i++) {
		struct exec *e = &X.execs[i];

		if (!e->used)
			continue;
		if (!e->reaped && e->deadline_ms <= now) {
			e->timed_out = true;
			e->deadline_ms = now + KILL_RETRY_MS;
			guest_exec_kill(e);
		}
		if (e->reaped)
			guest_exec_finish(e);
	}
	if (S.connected) {
		guest_pty_acks();
		guest_tcp_acks();
	}
	queue_flush();
}

int guest_serve(int port_fd)
{
	unsigned poll_errors = 0;

	S.port = port_fd;
	guest_hostile_init(frame_send, send_hello, queue_size);
	guest_files_init(frame_send, queue_size, QUEUE_SOFT);
	guest_tcp_init(queue_size, QUEUE_SOFT);
	guest_proxy_init();
	if (signals_setup() < 0) {
		guest_log("signal setup failed: %s", strerror(errno));
		return -1;
	}
	port_check();

	for (;;) {
		nfds_t n;
		int64_t now = guest_mono_ms(), next = -1;
		bool backpressure, more_files;
		int timeout;

		guest_hostile_tick();
		more_files = S.connected && guest_files_pump();
		backpressure = queue_size() > QUEUE_SOFT;
		n = poll_build(backpressure, now, &next);
		timeout = poll_timeout(next, now, more_files, backpressure);

		if (poll(P.pfd, n, timeout) < 0) {
			if (errno == EINTR)
				continue;
			guest_log("poll: %s", strerror(errno));
			if (++poll_errors > 100)
				return -1;
			continue;
		}
		poll_errors = 0;
		if (!S.connected)
			port_check();
		poll_dispatch(n);
		turn_end();
	}
}
