/* vmm/channel.c: the byte transports to a guest's exec port (the
 * struct sbx_channel of util.h): a libvirt stream (virDomainOpenChannel)
 * or the channel's unix socket. Knows nothing of the protocol on top. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "vmm-priv.h"

#define MOD		      "vmm"
#define VMM_CHUNK	      (64 * 1024)
#define VMM_SEND_TIMEOUT_MS   10000
#define VMM_SOCKET_CONNECT_MS 5000

/* ------------------------------------------------- channel: libvirt stream */

/* One stream channel. Its callback runs on the event-loop thread; close()
 * may run on any other thread. libvirt 9.0's remote driver never calls the
 * virFreeCallback of a stream callback (fixed upstream in 2025, "remote/
 * stream-event: Fix a memory leak in remoteStreamCallbackFree()"), so the
 * struct is freed by a zero timeout on the event loop instead: that runs
 * after any dispatch that was already in progress when close() removed the
 * callback. */
struct vmm_stream_chan {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool closed; /* close() started: deliver nothing more */
	bool in_cb;  /* a recv delivery is running */
	bool eof;    /* EOF delivered or the stream broke */
	bool cb_registered;
	virStreamPtr st;
	sbx_recv_fn recv;
	void *opaque;
	char name[VMM_NAME_MAX + 1];
};

static void vmm_stream_chan_free(struct vmm_stream_chan *c)
{
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static void vmm_stream_deferred_free(int timer, void *opaque)
{
	virEventRemoveTimeout(timer);
	vmm_stream_chan_free(opaque);
}

/* Runs on the event-loop thread. */
static void vmm_stream_event(virStreamPtr st, int events, void *opaque)
{
	struct vmm_stream_chan *c = opaque;
	pthread_mutex_lock(&c->lock);
	if (c->closed || c->eof) {
		pthread_mutex_unlock(&c->lock);
		return;
	}
	c->in_cb = true;
	pthread_mutex_unlock(&c->lock);

	char buf[VMM_CHUNK];
	bool eof = false;
	if (events &
	    (VIR_STREAM_EVENT_READABLE | VIR_STREAM_EVENT_HANGUP | VIR_STREAM_EVENT_ERROR)) {
		for (;;) {
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
	if (eof) {
		c->recv(c->opaque, NULL, 0);
		virStreamEventRemoveCallback(st);
	}

	pthread_mutex_lock(&c->lock);
	if (eof) {
		c->eof = true;
		c->cb_registered = false;
	}
	c->in_cb = false;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

static int vmm_stream_send(void *ctx, const void *buf, size_t len)
{
	struct vmm_stream_chan *c = ctx;
	const char *p = buf;
	int64_t deadline = sbx_mono_ms() + VMM_SEND_TIMEOUT_MS;
	while (len > 0) {
		size_t n = len > VMM_CHUNK ? VMM_CHUNK : len;
		int r = virStreamSend(c->st, p, n);
		if (r == -2) {
			/* The stream's buffer is full: the guest is not reading.
			 * Bounded wait, then give up. */
			if (sbx_mono_ms() > deadline) {
				sbx_warn(MOD, "channel of '%s': send timed out", c->name);
				return -1;
			}
			struct timespec ts = {0, 1000 * 1000};
			nanosleep(&ts, NULL);
			continue;
		}
		if (r <= 0) {
			sbx_warn(MOD, "channel of '%s': send: %s", c->name, vmm_lv_msg());
			return -1;
		}
		p += r;
		len -= (size_t)r;
		deadline = sbx_mono_ms() + VMM_SEND_TIMEOUT_MS;
	}
	return 0;
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
	c->cb_registered = true;
	if (virStreamEventAddCallback(
		c->st, VIR_STREAM_EVENT_READABLE | VIR_STREAM_EVENT_ERROR | VIR_STREAM_EVENT_HANGUP,
		vmm_stream_event, c, NULL) < 0) {
		sbx_err(MOD, "stream callback for '%s': %s", name, vmm_lv_msg());
		c->cb_registered = false;
		virStreamAbort(c->st);
		goto err_stream;
	}
	out->ctx = c;
	out->send = vmm_stream_send;
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

struct vmm_sock_chan {
	int fd;
	pthread_t reader;
	atomic_bool closed;
	sbx_recv_fn recv;
	void *opaque;
	char name[VMM_NAME_MAX + 1];
};

static void *vmm_sock_reader(void *arg)
{
	struct vmm_sock_chan *c = arg;
	char *buf = malloc(VMM_CHUNK);
	for (;;) {
		if (!buf)
			break;
		ssize_t n = read(c->fd, buf, VMM_CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (atomic_load(&c->closed))
			break;
		c->recv(c->opaque, buf, (size_t)n);
	}
	free(buf);
	/* EOF only when the channel broke on its own, not during close(). */
	if (!atomic_load(&c->closed))
		c->recv(c->opaque, NULL, 0);
	return NULL;
}

static int vmm_sock_send(void *ctx, const void *buf, size_t len)
{
	struct vmm_sock_chan *c = ctx;
	const char *p = buf;
	while (len > 0) {
		ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			sbx_warn(MOD, "channel socket of '%s': send: %s", c->name, strerror(errno));
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static void vmm_sock_close(void *ctx)
{
	struct vmm_sock_chan *c = ctx;
	atomic_store(&c->closed, true);
	shutdown(c->fd, SHUT_RDWR);
	pthread_join(c->reader, NULL);
	close(c->fd);
	free(c);
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
	struct vmm_sock_chan *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	}
	c->fd = fd;
	c->recv = recv;
	c->opaque = opaque;
	atomic_init(&c->closed, false);
	snprintf(c->name, sizeof(c->name), "%s", name);
	if (pthread_create(&c->reader, NULL, vmm_sock_reader, c) != 0) {
		close(fd);
		free(c);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "cannot start a reader thread");
	}
	out->ctx = c;
	out->send = vmm_sock_send;
	out->close = vmm_sock_close;
	return 0;
}

