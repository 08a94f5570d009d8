/* vmm/channel.c: the byte transports to a guest's exec port (the
 * struct sbx_channel of util.h): a libvirt stream (virDomainOpenChannel)
 * or the channel's unix socket. Knows nothing of the protocol on top.
 *
 * Sending never blocks the caller. send() appends the bytes to the
 * channel's outgoing queue (at most VMM_SENDQ_MAX bytes) with a deadline
 * VMM_SEND_DEADLINE_MS away, and the channel's own thread (the socket's
 * I/O thread, or libvirt's event loop for a stream) drains the queue as the
 * guest reads. A guest that stops reading costs only its own channel: when
 * the oldest queued bytes pass their deadline, or the queue would pass its
 * bound, the channel breaks and delivers EOF (recv with len 0) on its own
 * thread, like any broken channel.
 *
 * Credit window (send_window/credit; the stream transport, and the socket
 * transport of vmm_chan_sock_from_fd for tests): once the protocol
 * above opens a window, the channel writes at most that many bytes past
 * what the guest acknowledged having read; the rest waits in the queue,
 * under the same deadline. Over a stream this keeps libvirtd from ever
 * holding more for a guest than the chardev socket takes without blocking
 * (a blocked write there stalls libvirtd's whole client connection, every
 * guest's). Writes gather queued frames into one write of at most
 * VMM_CHUNK bytes, so small frames do not each cost a socket buffer's
 * per-write overhead in libvirtd.
 *
 * Input back-pressure (hold_rx, the socket transport): the receiver
 * (agentless' frame budget) may ask for no more input for a while; the
 * I/O thread then stops its burst of reads and leaves POLLIN out of its
 * poll until the hold ends, so the guest's bytes wait in the socket, in
 * qemu's virtio-serial queue and finally in the guest's own writes. A
 * stream has no hold_rx: libvirt's client queues a stream's packets
 * whether or not they are read (docs/vmm.md).
 *
 * Locking: each channel has one mutex (`lock`) guarding its queue and its
 * flags. It is a leaf: nothing else is locked while it is held, and no
 * socket or libvirt call is made with it held. Reads and writes on the
 * socket or stream happen only on the channel's own thread (the socket's
 * I/O thread, or the event loop), so the head of the queue is stable
 * there without the lock: other threads only append. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "vmm-priv.h"

#define MOD		      "vmm"
#define VMM_CHUNK	      (64 * 1024)
#define VMM_SOCKET_CONNECT_MS 5000
/* Reads per wake-up before the thread looks at its other work: a guest
 * that floods output cannot keep the thread (or libvirt's event loop,
 * which serves every guest) to itself. */
#define VMM_READS_PER_WAKE 16
/* Under a credit window, what the writes not yet acknowledged may cost the
 * socket buffer libvirtd writes them to (a unix socket: 208 KiB by
 * default, counted in sk_buff truesize). A write of n bytes is charged
 * VMM_WRITE_COST(n): its bytes; up to 4 KiB more for a small write's
 * kmalloc'd head rounded up to a power of two; 1 KiB for the sk_buff; and
 * 5 KiB for each further sk_buff of a large write (a unix socket splits
 * one into pieces of ~36 KiB, each a head and whole pages). So neither a
 * window of big writes nor one of tiny frames written one by one adds up
 * past the buffer. */
#define VMM_WINDOW_COST_MAX (160 * 1024)
#define VMM_WRITE_COST(n)                                                                          \
	((uint64_t)(n) + SBX_MIN((uint64_t)(n), (uint64_t)4096) + 1024 +                           \
	 (uint64_t)(n) / 32768 * 5120)
#define VMM_WINDOW_WRITES (VMM_WINDOW_COST_MAX / 1024)
/* How often the stream transport looks at its deadline while bytes wait. */
#define VMM_STREAM_TICK_MS 100

/* ------------------------------------------------------ outgoing queue */

struct outq_chunk {
	struct outq_chunk *next;
	int64_t deadline_ms; /* sbx_mono_ms() by which it must be written */
	size_t len, off;
	uint8_t data[];
};

struct outq {
	struct outq_chunk *head, *tail;
	size_t bytes;	  /* queued and not yet written */
	uint64_t pushed;  /* bytes ever queued */
	uint64_t written; /* bytes ever written */
	/* the credit window: 0 = none; else writes stop at
	 * win_origin + win_acked + window (offsets counted like pushed) */
	size_t window;
	uint64_t win_origin, win_acked;
	/* each write not yet acknowledged (a ring, under a window): where it
	 * ends, what it costs; and their total cost */
	uint64_t wr_end[VMM_WINDOW_WRITES];
	uint32_t wr_cost[VMM_WINDOW_WRITES];
	unsigned wr_head, wr_n;
	uint64_t wr_cost_sum;
};

/* Append a copy of buf. -1 past VMM_SENDQ_MAX or on ENOMEM. */
static int outq_push(struct outq *q, const void *buf, size_t len, int64_t deadline_ms)
{
	struct outq_chunk *c;

	if (len > VMM_SENDQ_MAX || q->bytes > VMM_SENDQ_MAX - len)
		return -1;
	c = malloc(sizeof(*c) + len);
	if (!c)
		return -1;
	c->next = NULL;
	c->deadline_ms = deadline_ms;
	c->len = len;
	c->off = 0;
	memcpy(c->data, buf, len);
	if (q->tail)
		q->tail->next = c;
	else
		q->head = c;
	q->tail = c;
	q->bytes += len;
	q->pushed += len;
	return 0;
}

/* send_window's `window` for a plain send: leave the window as it is. */
#define VMM_WINDOW_KEEP SIZE_MAX

/* Bytes the window lets through now (SIZE_MAX without a window). */
static size_t outq_allowance(const struct outq *q)
{
	if (q->window == 0)
		return SIZE_MAX;
	uint64_t limit = q->win_origin + q->win_acked + q->window;
	if (q->wr_n == VMM_WINDOW_WRITES || limit <= q->written ||
	    q->wr_cost_sum + VMM_WRITE_COST(1) > VMM_WINDOW_COST_MAX)
		return 0;
	uint64_t n = limit - q->written;
	/* the most bytes whose cost still fits (cost(n) <= n * 1.16 + 5 KiB) */
	uint64_t room = VMM_WINDOW_COST_MAX - q->wr_cost_sum - 1024;
	n = SBX_MIN(n, room > 8192 ? (room - 4096) * 32768 / (32768 + 5120) : room / 2);
	return (size_t)n;
}

/* Is there something to write that the window lets through? */
static bool outq_writable(const struct outq *q)
{
	return q->head && outq_allowance(q) > 0;
}

/* Open (window > 0) or drop the window at the end of what is queued. */
static void outq_window_start(struct outq *q, size_t window)
{
	q->window = window;
	q->win_origin = q->pushed;
	q->win_acked = 0;
	/* writes before the new origin are not counted (the peer reports
	 * from the origin on): at most a window's worth more for a moment */
	q->wr_n = 0;
	q->wr_cost_sum = 0;
}

/* The peer consumed `acked` bytes past win_origin. -1 on a lie. */
static int outq_credit(struct outq *q, uint64_t acked)
{
	if (q->window == 0 || acked < q->win_acked || q->written < q->win_origin ||
	    acked > q->written - q->win_origin)
		return -1;
	q->win_acked = acked;
	while (q->wr_n > 0 && q->wr_end[q->wr_head] <= q->win_origin + acked) {
		q->wr_cost_sum -= q->wr_cost[q->wr_head];
		q->wr_head = (q->wr_head + 1) % VMM_WINDOW_WRITES;
		q->wr_n--;
	}
	return 0;
}

/* Copy up to `max` bytes from the head on (across chunks, within the
 * window) into buf; the count. Call with the channel's lock. */
static size_t outq_gather(const struct outq *q, uint8_t *buf, size_t max)
{
	size_t n = 0;

	max = SBX_MIN(max, outq_allowance(q));
	for (const struct outq_chunk *c = q->head; c && n < max; c = c->next) {
		size_t k = SBX_MIN(c->len - c->off, max - n);
		memcpy(buf + n, c->data + c->off, k);
		n += k;
	}
	return n;
}

/* Mark n bytes from the head on written; free the chunks that are done. */
static void outq_advance(struct outq *q, size_t n)
{
	q->bytes -= n;
	q->written += n;
	if (q->window > 0) {
		unsigned i = (q->wr_head + q->wr_n) % VMM_WINDOW_WRITES;

		q->wr_end[i] = q->written;
		q->wr_cost[i] = (uint32_t)VMM_WRITE_COST(n);
		q->wr_cost_sum += q->wr_cost[i];
		q->wr_n++;
	}
	while (n > 0) {
		struct outq_chunk *c = q->head;
		size_t k = SBX_MIN(n, c->len - c->off);

		c->off += k;
		n -= k;
		if (c->off < c->len)
			return;
		q->head = c->next;
		if (!q->head)
			q->tail = NULL;
		free(c);
	}
}

static bool outq_overdue(const struct outq *q, int64_t now_ms)
{
	return q->head && now_ms >= q->head->deadline_ms;
}

static void outq_clear(struct outq *q)
{
	while (q->head) {
		struct outq_chunk *c = q->head;

		q->head = c->next;
		free(c);
	}
	q->tail = NULL;
	q->bytes = 0;
}

/* ------------------------------------------------- channel: libvirt stream */

/* One stream channel. Its callbacks (stream events and a timer) run on the
 * event-loop thread; send() and close() run on any other thread. libvirt
 * 9.0's remote driver never calls the virFreeCallback of a stream callback
 * (fixed upstream in 2025, "remote/stream-event: Fix a memory leak in
 * remoteStreamCallbackFree()"), so the struct is freed by a zero timeout
 * on the event loop instead: that runs after any dispatch that was already
 * in progress when close() removed the callback. */
struct vmm_stream_chan {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool closed; /* close() started: deliver nothing more */
	bool in_cb;  /* a callback is running on the event loop */
	bool eof;    /* EOF delivered or the stream broke */
	bool failed; /* the queue passed its bound: break on the loop */
	bool cb_registered;
	bool want_write; /* WRITABLE is in the callback's events */
	int timer;	 /* event-loop timer: flush, deadline */
	struct outq q;
	uint8_t wbuf[VMM_CHUNK]; /* one gathered write (event loop only) */
	virStreamPtr st;
	sbx_recv_fn recv;
	void *opaque;
	char name[VMM_NAME_MAX + 1];
};

#define VMM_STREAM_EVENTS                                                                          \
	(VIR_STREAM_EVENT_READABLE | VIR_STREAM_EVENT_ERROR | VIR_STREAM_EVENT_HANGUP)

static void vmm_stream_chan_free(struct vmm_stream_chan *c)
{
	outq_clear(&c->q);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static void vmm_stream_deferred_free(int timer, void *opaque)
{
	virEventRemoveTimeout(timer);
	vmm_stream_chan_free(opaque);
}

/* Enter a callback: false when the channel is closing or done. */
static bool vmm_stream_enter(struct vmm_stream_chan *c)
{
	pthread_mutex_lock(&c->lock);
	if (c->closed || c->eof) {
		pthread_mutex_unlock(&c->lock);
		return false;
	}
	c->in_cb = true;
	pthread_mutex_unlock(&c->lock);
	return true;
}

/* Write what the stream (and the window) takes now. -1 when the stream
 * failed. Event loop. */
static int vmm_stream_flush(struct vmm_stream_chan *c)
{
	for (;;) {
		pthread_mutex_lock(&c->lock);
		size_t n = outq_gather(&c->q, c->wbuf, sizeof(c->wbuf));
		pthread_mutex_unlock(&c->lock);
		if (n == 0)
			return 0; /* empty, or the window is shut until a credit */
		int r = virStreamSend(c->st, (const char *)c->wbuf, n);
		if (r == -2)
			return 0; /* full: WRITABLE will tell */
		if (r <= 0) {
			sbx_warn(MOD, "channel of '%s': send: %s", c->name, vmm_lv_msg());
			return -1;
		}
		pthread_mutex_lock(&c->lock);
		outq_advance(&c->q, (size_t)r);
		pthread_mutex_unlock(&c->lock);
	}
}

/* After a callback's work: break the channel (deliver EOF) when asked,
 * else make the events and the timer match the queue. Event loop. */
static void vmm_stream_leave(struct vmm_stream_chan *c, bool eof)
{
	int64_t now = sbx_mono_ms();

	pthread_mutex_lock(&c->lock);
	if (!eof && c->failed) {
		sbx_warn(MOD, "channel of '%s': more than %d bytes wait for the guest", c->name,
			 VMM_SENDQ_MAX);
		eof = true;
	}
	if (!eof && outq_overdue(&c->q, now)) {
		sbx_warn(MOD, "channel of '%s': the guest stopped reading (send deadline)",
			 c->name);
		sbx_counter_add(SBX_C_CHANNEL_SEND_DEADLINES, 1);
		eof = true;
	}
	/* WRITABLE only while the window lets bytes through; the timer ticks
	 * while any wait, for their deadline */
	bool want = !eof && outq_writable(&c->q);
	bool waiting = !eof && c->q.head;
	bool update = !eof && want != c->want_write;
	c->want_write = want;
	pthread_mutex_unlock(&c->lock);

	if (eof) {
		c->recv(c->opaque, NULL, 0);
		virStreamEventRemoveCallback(c->st);
		virEventUpdateTimeout(c->timer, -1);
	} else {
		if (update)
			virStreamEventUpdateCallback(
			    c->st, VMM_STREAM_EVENTS | (want ? VIR_STREAM_EVENT_WRITABLE : 0));
		virEventUpdateTimeout(c->timer, waiting ? VMM_STREAM_TICK_MS : -1);
	}

	pthread_mutex_lock(&c->lock);
	if (eof) {
		c->eof = true;
		c->cb_registered = false;
		outq_clear(&c->q);
	}
	c->in_cb = false;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

/* Stream events. Runs on the event-loop thread. */
static void vmm_stream_event(virStreamPtr st, int events, void *opaque)
{
	struct vmm_stream_chan *c = opaque;
	if (!vmm_stream_enter(c))
		return;

	char buf[VMM_CHUNK];
	bool eof = false;
	if (events & VMM_STREAM_EVENTS) {
		for (int i = 0; i < VMM_READS_PER_WAKE; i++) {
			int n = virStreamRecv(st, buf, sizeof(buf));
			if (n == -2)
				break;
			if (n <= 0) {
				if (n < 0)
					sbx_warn(MOD, "channel of '%s': %s", c->name, vmm_lv_msg());
				eof = true;
				break;
			}
			c->recv(c->opaque, buf, (size_t)n);
		}
	}
	if (!eof && (events & (VIR_STREAM_EVENT_HANGUP | VIR_STREAM_EVENT_ERROR)))
		eof = true;
	if (!eof && vmm_stream_flush(c) < 0)
		eof = true;
	vmm_stream_leave(c, eof);
}

/* The channel's timer: a kick from send() (timeout 0) or the deadline
 * tick while bytes wait. Runs on the event-loop thread. */
static void vmm_stream_timer(int timer, void *opaque)
{
	struct vmm_stream_chan *c = opaque;
	(void)timer;
	if (!vmm_stream_enter(c))
		return;
	vmm_stream_leave(c, vmm_stream_flush(c) < 0);
}

static int vmm_stream_send_window(void *ctx, const void *buf, size_t len, size_t window)
{
	struct vmm_stream_chan *c = ctx;
	int rc = 0;

	pthread_mutex_lock(&c->lock);
	if (c->closed || c->eof || c->failed)
		rc = -1;
	else if (outq_push(&c->q, buf, len, sbx_mono_ms() + VMM_SEND_DEADLINE_MS) < 0)
		rc = -1, c->failed = true;
	else if (window != VMM_WINDOW_KEEP)
		outq_window_start(&c->q, window);
	pthread_mutex_unlock(&c->lock);
	/* The event loop writes (or, failed, breaks the channel) soon. */
	virEventUpdateTimeout(c->timer, 0);
	return rc;
}

static int vmm_stream_send(void *ctx, const void *buf, size_t len)
{
	return vmm_stream_send_window(ctx, buf, len, VMM_WINDOW_KEEP);
}

static int vmm_stream_credit(void *ctx, uint64_t acked)
{
	struct vmm_stream_chan *c = ctx;

	pthread_mutex_lock(&c->lock);
	int rc = outq_credit(&c->q, acked);
	pthread_mutex_unlock(&c->lock);
	/* on the event loop (from recv) the flush follows; elsewhere, kick */
	virEventUpdateTimeout(c->timer, 0);
	return rc;
}

static void vmm_stream_close(void *ctx)
{
	struct vmm_stream_chan *c = ctx;
	pthread_mutex_lock(&c->lock);
	c->closed = true;
	while (c->in_cb)
		pthread_cond_wait(&c->cond, &c->lock);
	bool registered = c->cb_registered;
	c->cb_registered = false;
	pthread_mutex_unlock(&c->lock);
	virEventRemoveTimeout(c->timer);
	if (registered)
		virStreamEventRemoveCallback(c->st);
	virStreamAbort(c->st);
	virStreamFree(c->st);
	c->st = NULL;
	if (virEventAddTimeout(0, vmm_stream_deferred_free, c, NULL) < 0)
		sbx_warn(MOD, "channel of '%s': cannot schedule its release (leaked)", c->name);
}

int vmm_chan_stream_open(virConnectPtr conn, virDomainPtr dom, const char *port, const char *name,
			 sbx_recv_fn recv, void *opaque, struct sbx_channel *out,
			 struct sbx_error *err)
{
	struct vmm_stream_chan *c = calloc(1, sizeof(*c));
	if (!c)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	c->recv = recv;
	c->opaque = opaque;
	c->timer = -1;
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->st = dom ? virStreamNew(conn, VIR_STREAM_NONBLOCK) : NULL;
	if (!c->st) {
		sbx_err(MOD, "stream for '%s': %s", name, vmm_lv_msg());
		goto err_free;
	}
	if (virDomainOpenChannel(dom, port, c->st, VIR_DOMAIN_CHANNEL_FORCE) < 0) {
		sbx_err(MOD, "open channel of '%s': %s", name, vmm_lv_msg());
		goto err_stream;
	}
	c->timer = virEventAddTimeout(-1, vmm_stream_timer, c, NULL);
	if (c->timer < 0) {
		sbx_err(MOD, "channel timer for '%s': %s", name, vmm_lv_msg());
		virStreamAbort(c->st);
		goto err_stream;
	}
	c->cb_registered = true;
	if (virStreamEventAddCallback(c->st, VMM_STREAM_EVENTS, vmm_stream_event, c, NULL) < 0) {
		sbx_err(MOD, "stream callback for '%s': %s", name, vmm_lv_msg());
		c->cb_registered = false;
		virEventRemoveTimeout(c->timer);
		virStreamAbort(c->st);
		goto err_stream;
	}
	out->ctx = c;
	out->send = vmm_stream_send;
	out->send_window = vmm_stream_send_window;
	out->credit = vmm_stream_credit;
	/* no hold_rx: libvirt's client queues a stream's packets whether we
	 * read them or not, so holding would only move the flood into our
	 * memory; agentless breaks a channel that floods past its budget */
	out->hold_rx = NULL;
	out->close = vmm_stream_close;
	return 0;

err_stream:
	virStreamFree(c->st);
err_free:
	vmm_stream_chan_free(c);
	return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL,
			     "could not connect to the sandbox's guest");
}

/* ------------------------------------------------- channel: unix socket */

/* One socket channel: a thread of its own polls the socket for input and,
 * while bytes wait, for output, and an eventfd for send() and close(). */
struct vmm_sock_chan {
	int fd;
	int wake; /* eventfd */
	pthread_t thread;
	pthread_mutex_t lock; /* q, failed */
	struct outq q;
	uint8_t *wbuf; /* one gathered write (I/O thread only) */
	bool failed;
	atomic_bool closed;
	/* hold_rx: no reads before this sbx_mono_ms() (0: none) */
	_Atomic int64_t hold_until;
	sbx_recv_fn recv;
	void *opaque;
	char name[VMM_NAME_MAX + 1];
};

static void vmm_sock_wake(struct vmm_sock_chan *c)
{
	uint64_t one = 1;
	ssize_t n = write(c->wake, &one, sizeof one);
	(void)n; /* EAGAIN: a wake-up is already pending */
}

/* Is input held (hold_rx) at `now`? */
static bool vmm_sock_held(struct vmm_sock_chan *c, int64_t now)
{
	return now < atomic_load(&c->hold_until);
}

/* Read what is there (at most VMM_READS_PER_WAKE chunks, fewer when the
 * receiver holds input). -1 on EOF or a broken socket. */
static int vmm_sock_read(struct vmm_sock_chan *c, char *buf)
{
	for (int i = 0; i < VMM_READS_PER_WAKE; i++) {
		ssize_t n = recv(c->fd, buf, VMM_CHUNK, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n <= 0)
			return -1;
		if (atomic_load(&c->closed))
			return 0;
		c->recv(c->opaque, buf, (size_t)n);
		if (vmm_sock_held(c, sbx_mono_ms()))
			return 0;
	}
	return 0;
}

/* Write what the socket (and the window) takes now. -1 on a broken
 * socket. */
static int vmm_sock_flush(struct vmm_sock_chan *c)
{
	for (;;) {
		pthread_mutex_lock(&c->lock);
		size_t len = outq_gather(&c->q, c->wbuf, VMM_CHUNK);
		pthread_mutex_unlock(&c->lock);
		if (len == 0)
			return 0; /* empty, or the window is shut until a credit */
		ssize_t n = send(c->fd, c->wbuf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n <= 0) {
			sbx_warn(MOD, "channel socket of '%s': send: %s", c->name, strerror(errno));
			return -1;
		}
		pthread_mutex_lock(&c->lock);
		outq_advance(&c->q, (size_t)n);
		pthread_mutex_unlock(&c->lock);
	}
}

static void *vmm_sock_main(void *arg)
{
	struct vmm_sock_chan *c = arg;
	char *buf = malloc(VMM_CHUNK);
	bool eof = !buf || !c->wbuf;

	while (!eof && !atomic_load(&c->closed)) {
		int64_t now = sbx_mono_ms();
		int timeout = -1;

		pthread_mutex_lock(&c->lock);
		bool failed = c->failed, overdue = outq_overdue(&c->q, now);
		/* POLLOUT only while the window lets bytes through; the
		 * deadline of waiting bytes holds either way */
		bool want_out = outq_writable(&c->q);
		if (c->q.head)
			timeout = (int)SBX_MAX((int64_t)0, c->q.head->deadline_ms - now);
		pthread_mutex_unlock(&c->lock);
		/* input held: no POLLIN (the guest's bytes wait in the socket,
		 * then in qemu, then in the guest) until the hold ends */
		int64_t hold = atomic_load(&c->hold_until);
		bool held = now < hold;
		if (held && (timeout < 0 || hold - now < timeout))
			timeout = (int)(hold - now);
		if (failed || overdue) {
			sbx_counter_add(SBX_C_CHANNEL_SEND_DEADLINES, 1);
			sbx_warn(MOD, "channel socket of '%s': %s", c->name,
				 failed ? "too many bytes wait for the guest"
					: "the guest stopped reading (send deadline)");
			break;
		}

		struct pollfd p[2] = {
		    {.fd = c->fd, .events = (held ? 0 : POLLIN) | (want_out ? POLLOUT : 0)},
		    {.fd = c->wake, .events = POLLIN},
		};
		if (poll(p, 2, timeout) < 0) {
			if (errno == EINTR)
				continue;
			sbx_warn(MOD, "channel socket of '%s': poll: %s", c->name, strerror(errno));
			break;
		}
		if (p[1].revents & POLLIN) {
			uint64_t v;
			ssize_t n = read(c->wake, &v, sizeof v);
			(void)n;
		}
		if (atomic_load(&c->closed))
			break;
		if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && vmm_sock_read(c, buf) < 0)
			eof = true;
		if (!eof && vmm_sock_flush(c) < 0)
			eof = true;
	}
	free(buf);
	/* EOF only when the channel broke on its own, not during close(). */
	if (!atomic_load(&c->closed))
		c->recv(c->opaque, NULL, 0);
	/* Nothing more is sent on a broken channel. */
	pthread_mutex_lock(&c->lock);
	c->failed = true;
	outq_clear(&c->q);
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

static int vmm_sock_send_window(void *ctx, const void *buf, size_t len, size_t window)
{
	struct vmm_sock_chan *c = ctx;
	int rc = 0;

	pthread_mutex_lock(&c->lock);
	if (c->failed)
		rc = -1;
	else if (outq_push(&c->q, buf, len, sbx_mono_ms() + VMM_SEND_DEADLINE_MS) < 0)
		rc = -1, c->failed = true; /* the I/O thread breaks the channel */
	else if (window != VMM_WINDOW_KEEP)
		outq_window_start(&c->q, window);
	pthread_mutex_unlock(&c->lock);
	vmm_sock_wake(c);
	return rc;
}

static int vmm_sock_send(void *ctx, const void *buf, size_t len)
{
	return vmm_sock_send_window(ctx, buf, len, VMM_WINDOW_KEEP);
}

static int vmm_sock_credit(void *ctx, uint64_t acked)
{
	struct vmm_sock_chan *c = ctx;

	pthread_mutex_lock(&c->lock);
	int rc = outq_credit(&c->q, acked);
	pthread_mutex_unlock(&c->lock);
	vmm_sock_wake(c);
	return rc;
}

static void vmm_sock_hold_rx(void *ctx, int64_t ms)
{
	struct vmm_sock_chan *c = ctx;

	atomic_store(&c->hold_until, sbx_mono_ms() + SBX_MAX(ms, (int64_t)0));
	vmm_sock_wake(c); /* a poll waiting for POLLIN drops it */
}

static void vmm_sock_close(void *ctx)
{
	struct vmm_sock_chan *c = ctx;
	atomic_store(&c->closed, true);
	vmm_sock_wake(c);
	shutdown(c->fd, SHUT_RDWR);
	pthread_join(c->thread, NULL);
	close(c->fd);
	close(c->wake);
	outq_clear(&c->q);
	pthread_mutex_destroy(&c->lock);
	free(c->wbuf);
	free(c);
}

/* The socket transport over a connected fd; `windowed` exposes the credit
 * window ops (send_window, credit). */
static int vmm_chan_sock_new(int fd, const char *name, bool windowed, sbx_recv_fn recv,
			     void *opaque, struct sbx_channel *out, struct sbx_error *err)
{
	struct vmm_sock_chan *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	}
	c->fd = fd;
	c->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (c->wake < 0) {
		close(fd);
		free(c);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "eventfd: %s", strerror(errno));
	}
	pthread_mutex_init(&c->lock, NULL);
	c->wbuf = malloc(VMM_CHUNK); /* NULL: the thread breaks the channel */
	c->recv = recv;
	c->opaque = opaque;
	atomic_init(&c->closed, false);
	atomic_init(&c->hold_until, 0);
	snprintf(c->name, sizeof(c->name), "%s", name);
	if (pthread_create(&c->thread, NULL, vmm_sock_main, c) != 0) {
		close(fd);
		close(c->wake);
		pthread_mutex_destroy(&c->lock);
		free(c->wbuf);
		free(c);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "cannot start a channel thread");
	}
	out->ctx = c;
	out->send = vmm_sock_send;
	out->send_window = windowed ? vmm_sock_send_window : NULL;
	out->credit = windowed ? vmm_sock_credit : NULL;
	out->hold_rx = vmm_sock_hold_rx;
	out->close = vmm_sock_close;
	return 0;
}

int vmm_chan_sock_from_fd(int fd, const char *name, sbx_recv_fn recv, void *opaque,
			  struct sbx_channel *out, struct sbx_error *err)
{
	return vmm_chan_sock_new(fd, name, true, recv, opaque, out, err);
}

int vmm_chan_sock_open(const char *path, const char *name, sbx_recv_fn recv, void *opaque,
		       struct sbx_channel *out, struct sbx_error *err)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	int len = snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	if (len < 0 || (size_t)len >= sizeof(sun.sun_path))
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "channel socket path too long");
	int fd = -1;
	int64_t deadline = sbx_mono_ms() + VMM_SOCKET_CONNECT_MS;
	for (;;) {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return sbx_error_set(err, SBX_E_INTERNAL, NULL, "socket: %s",
					     strerror(errno));
		if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0)
			break;
		int e = errno;
		close(fd);
		fd = -1;
		if ((e != ENOENT && e != ECONNREFUSED && e != EINTR) || sbx_mono_ms() > deadline) {
			sbx_err(MOD, "connect '%s': %s", sun.sun_path, strerror(e));
			return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL,
					     "could not connect to the sandbox's guest");
		}
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	/* no window: nothing but qemu is between the daemon and the guest,
	 * and a full socket is the send deadline's business (docs/vmm.md) */
	return vmm_chan_sock_new(fd, name, false, recv, opaque, out, err);
}
