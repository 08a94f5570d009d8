/* api/http_ports_ws.c: an upgrade (WebSocket) through the ports route
 * (docs/api.md "Ports"). The request went to the guest with its Upgrade
 * header; when the server there answers 101, the client gets the 101 with
 * the server's headers (Sec-WebSocket-Accept...) and libmicrohttpd hands
 * the socket over: a thread per connection then moves raw bytes both ways
 * between it and the stream, without looking into them (the WebSocket
 * framing is the two ends' business). Each direction is bounded: the
 * client's bytes wait in one buffer until the stream's credit takes them
 * (the socket is not read meanwhile), the guest's in one buffer until the
 * socket takes them (the stream's credit is not granted meanwhile). The
 * stream's idle deadline (port_idle_timeout_ms) ends a quiet connection;
 * the guest's end (FIN or reset), the client's, or the server stopping
 * end it too. The connection keeps its place in the limits until then.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http-priv.h"

#define MOD	      "api"
#define RELAY_BUF     (64u * 1024)
#define RELAY_POLL_MS 1000 /* how often a relay looks at the server stopping */
#define RELAY_STOP_MS 3000 /* the most a stopping server waits for relays */

struct relay {
	struct api_port *ap;
	char in[RELAY_BUF]; /* client -> guest, [in_off, in_len) not yet taken */
	size_t in_len, in_off;
	char out[RELAY_BUF]; /* guest -> client */
	size_t out_len, out_off;
	bool client_eof, fin_sent;
};

static bool relay_stopping(struct api_port *ap)
{
	bool s;

	pthread_mutex_lock(&ap->ctx->lock);
	s = ap->ctx->stopping;
	pthread_mutex_unlock(&ap->ctx->lock);
	return s;
}

/* One round of moving bytes; false when the connection is over. */
static bool relay_move(struct relay *rl, short revents)
{
	struct api_port *ap = rl->ap;
	struct sandbox_port_status st;

	if ((revents & POLLIN) && rl->in_len == 0 && !rl->client_eof) {
		ssize_t n = recv(ap->sock, rl->in, sizeof rl->in, 0);

		if (n > 0) {
			rl->in_len = (size_t)n;
			rl->in_off = 0;
		} else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
			rl->client_eof = true;
		}
	}
	if (rl->in_off < rl->in_len) {
		long n = sandbox_port_write(ap->p, rl->in + rl->in_off, rl->in_len - rl->in_off);

		if (n < 0)
			return false;
		rl->in_off += (size_t)n;
		if (rl->in_off == rl->in_len)
			rl->in_len = rl->in_off = 0;
	}
	if (rl->client_eof && rl->in_len == 0 && !rl->fin_sent) {
		rl->fin_sent = true;
		sandbox_port_shutdown(ap->p);
	}
	if (rl->out_off == rl->out_len) {
		rl->out_off = 0;
		rl->out_len = ports_raw_take(ap, rl->out, sizeof rl->out);
	}
	while (rl->out_off < rl->out_len) {
		ssize_t n =
		    send(ap->sock, rl->out + rl->out_off, rl->out_len - rl->out_off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0)
			return false; /* the client went away */
		rl->out_off += (size_t)n;
	}
	sandbox_port_status(ap->p, &st);
	if (st.state == SANDBOX_PORT_FAILED)
		return false;
	/* the guest's side ended and all it sent went out */
	if ((st.eof || st.state == SANDBOX_PORT_CLOSED) && st.buffered == 0 &&
	    rl->out_off == rl->out_len && ap->hdr_end + ap->pre_off >= ap->hdr_len)
		return false;
	return !(rl->client_eof && rl->fin_sent && st.state == SANDBOX_PORT_CLOSED);
}

static void *relay_main(void *arg)
{
	struct relay *rl = arg;
	struct api_port *ap = rl->ap;
	struct api_ports_ctx *ctx = ap->ctx;
	bool go = true;
	short revents = 0;

	while (go && !relay_stopping(ap)) {
		struct pollfd pfd[2] = {
		    {.fd = ap->sock, .events = 0},
		    {.fd = ap->efd, .events = POLLIN},
		};
		uint64_t v;

		go = relay_move(rl, revents);
		if (!go)
			break;
		if (rl->in_len == 0 && !rl->client_eof)
			pfd[0].events |= POLLIN;
		if (rl->out_off < rl->out_len)
			pfd[0].events |= POLLOUT;
		if (poll(pfd, 2, RELAY_POLL_MS) < 0 && errno != EINTR)
			break;
		revents = pfd[0].revents;
		if (revents & (POLLERR | POLLNVAL))
			break;
		if (revents & POLLHUP)
			revents |= POLLIN; /* read the EOF */
		if (pfd[1].revents & POLLIN && read(ap->efd, &v, sizeof v) < 0) {
			/* reset or not, the next round looks at everything */
		}
	}
	MHD_upgrade_action(ap->urh, MHD_UPGRADE_ACTION_CLOSE);
	free(rl);
	pthread_mutex_lock(&ctx->lock);
	ctx->relays--;
	pthread_cond_broadcast(&ctx->relays_done);
	pthread_mutex_unlock(&ctx->lock);
	ports_unref(ap);
	return NULL;
}

static void upgraded(void *cls, struct MHD_Connection *c, void *req_cls, const char *extra_in,
		     size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	struct api_port *ap = cls;
	struct api_ports_ctx *ctx = ap->ctx;
	struct relay *rl = calloc(1, sizeof(*rl));
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_attr_t attr;
	pthread_t th;

	(void)req_cls;
	api_conn_upgraded(c);
	if (!rl || efd < 0 || extra_in_size > sizeof rl->in) {
		free(rl);
		if (efd >= 0)
			close(efd);
		MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
		return;
	}
	fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
	rl->ap = ap;
	memcpy(rl->in, extra_in, extra_in_size); /* the client's bytes sent early */
	rl->in_len = extra_in_size;
	pthread_mutex_lock(&ctx->lock);
	ap->sock = sock;
	ap->urh = urh;
	ap->efd = efd;
	ap->refs++; /* the thread's */
	ctx->relays++;
	pthread_mutex_unlock(&ctx->lock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	if (pthread_create(&th, &attr, relay_main, rl) != 0) {
		sbx_warn(MOD, "port upgrade: no thread: %s", strerror(errno));
		MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
		free(rl);
		pthread_mutex_lock(&ctx->lock);
		ctx->relays--;
		pthread_cond_broadcast(&ctx->relays_done);
		pthread_mutex_unlock(&ctx->lock);
		ports_unref(ap);
	}
	pthread_attr_destroy(&attr);
}

enum MHD_Result ports_answer_upgrade(struct api_port *ap)
{
	struct MHD_Response *resp = MHD_create_response_for_upgrade(upgraded, ap);
	enum MHD_Result ret;

	if (!resp)
		return MHD_NO;
	ports_head_copy(ap, resp);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, ap->upgrade_proto);
	api_reqctx_header(resp);
	ap->answered = true;
	ret = api_queue_response(ap->conn, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
	MHD_destroy_response(resp);
	return ret;
}

void ports_relays_stop(struct api_ports_ctx *ctx)
{
	int64_t deadline = sbx_mono_ms() + RELAY_STOP_MS;
	uint64_t one = 1;

	pthread_mutex_lock(&ctx->lock);
	for (struct api_port *ap = ctx->live; ap; ap = ap->lnext) /* wake them now */
		if (ap->efd >= 0 && write(ap->efd, &one, sizeof one) < 0) {
			/* the counter is full: it is awake already */
		}
	while (ctx->relays > 0 && sbx_mono_ms() < deadline) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&ctx->relays_done, &ctx->lock, &ts);
	}
	pthread_mutex_unlock(&ctx->lock);
}
