/* api/http_conn.c: the receive deadline of every connection. From the
 * moment a connection is accepted, or has sent its previous reply, the
 * client has http_receive_timeout_ms to deliver a whole request (headers
 * and body). libmicrohttpd's own timeout is an idle timeout that every byte
 * resets, so a client sending one byte every few seconds would hold the
 * connection for ever (slowloris); a sweeping thread shuts down the socket
 * of every connection past its deadline instead. Time spent parked or
 * sending the reply does not count.
 *
 * The table learns of connections through MHD_OPTION_NOTIFY_CONNECTION:
 * MHD calls it with CLOSED before it closes the socket, and that call
 * takes t->lock, so the sweeper never shuts down a descriptor that was
 * closed (and maybe reused).
 *
 * The same thread closes lingering (api_conn_linger): a connection
 * answered before its body was read keeps a duplicate of its socket past
 * MHD's close; the thread reads and drops what the client still sends
 * until it stops, LINGER_MAX_BYTES were read or LINGER_MS passed, then
 * closes it. At most LINGER_MAX sockets linger at once; past that a
 * connection closes at once, as libmicrohttpd alone would.
 *
 * Locking: t->lock is a leaf. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http-priv.h"

#define MOD		 "api"
#define LINGER_MAX	 64
#define LINGER_MS	 10000
#define LINGER_MAX_BYTES (16u * 1024 * 1024)

struct lingering {
	int fd;
	int64_t until_ms;
	uint64_t read;
};

struct api_conn {
	struct api_conns *tab;
	int fd;
	int64_t since_ms;  /* the current receive window started */
	uint32_t limit_ms; /* the window's length when not the table's (0) */
	bool receiving;	   /* the window is open (not parked, not replying) */
	bool cut;	   /* shut down at its deadline */
	bool upgraded;	   /* a WebSocket now (http_terminal.c): no deadline */
	int linger_fd;	   /* a duplicate of fd to linger on after MHD's close, or -1 */
	struct api_conn *prev, *next;
};

struct api_conns {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	uint32_t timeout_ms;
	struct api_conn *head;
	struct lingering linger[LINGER_MAX];
	int n_linger, n_reserved; /* lingering; duplicates held by open conns */
	bool stop;
	bool started;
	pthread_t sweeper;
};

/* Read and drop what one lingering socket has: true when it is done (the
 * client finished or failed, or the socket read its most). */
static bool linger_drain_one(struct lingering *g)
{
	char buf[65536];

	for (;;) {
		ssize_t n = recv(g->fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (n > 0) {
			g->read += (uint64_t)n;
			if (g->read >= LINGER_MAX_BYTES)
				return true;
			continue;
		}
		if (n == 0)
			return true;
		if (errno == EINTR)
			continue;
		return errno != EAGAIN && errno != EWOULDBLOCK;
	}
}

/* Drain every lingering socket; close those done or past their time. */
static void linger_drain_locked(struct api_conns *t, int64_t now)
{
	for (int i = 0; i < t->n_linger;) {
		struct lingering *g = &t->linger[i];

		if (now < g->until_ms && !linger_drain_one(g)) {
			i++;
			continue;
		}
		close(g->fd);
		t->linger[i] = t->linger[--t->n_linger];
	}
}

/* Wait up to step_ms for the stop, or for a lingering socket to have
 * something (polled without the lock). t->lock held. */
static void sweeper_wait_locked(struct api_conns *t, int64_t step_ms)
{
	struct pollfd p[LINGER_MAX];
	int n = t->n_linger;

	if (n == 0) {
		struct timespec ts = sbx_timespec_in(CLOCK_REALTIME, step_ms);

		pthread_cond_timedwait(&t->wake, &t->lock, &ts);
		return;
	}
	/* only this thread closes lingering sockets: the fds stay valid */
	for (int i = 0; i < n; i++)
		p[i] = (struct pollfd){.fd = t->linger[i].fd, .events = POLLIN};
	pthread_mutex_unlock(&t->lock);
	poll(p, (nfds_t)n, (int)SBX_MIN(step_ms, (int64_t)50));
	pthread_mutex_lock(&t->lock);
}

static void *sweeper_main(void *arg)
{
	struct api_conns *t = arg;
	int64_t step = SBX_MAX((int64_t)50, SBX_MIN((int64_t)500, (int64_t)t->timeout_ms / 4));

	pthread_mutex_lock(&t->lock);
	while (!t->stop) {
		int64_t now;
		int cut = 0;

		sweeper_wait_locked(t, step);
		now = sbx_mono_ms();
		linger_drain_locked(t, now);
		for (struct api_conn *k = t->head; k; k = k->next) {
			uint32_t limit = k->limit_ms ? k->limit_ms : t->timeout_ms;

			if (!k->receiving || k->cut || now - k->since_ms < (int64_t)limit)
				continue;
			/* MHD reads end-of-file next and closes the connection. */
			shutdown(k->fd, SHUT_RDWR);
			k->cut = true;
			cut++;
		}
		if (cut)
			sbx_info(MOD,
				 "closed %d connection(s) past their deadline (a whole request "
				 "within %u ms, a file transfer within its own)",
				 cut, t->timeout_ms);
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

struct api_conns *api_conns_new(uint32_t timeout_ms, struct sbx_error *err)
{
	struct api_conns *t = calloc(1, sizeof(*t));

	if (!t) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		return NULL;
	}
	t->timeout_ms = timeout_ms;
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->wake, NULL);
	if (pthread_create(&t->sweeper, NULL, sweeper_main, t) != 0) {
		api_conns_free(t);
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "cannot start the connection sweeper");
		return NULL;
	}
	t->started = true;
	return t;
}

void api_conns_free(struct api_conns *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	t->stop = true;
	pthread_cond_broadcast(&t->wake);
	pthread_mutex_unlock(&t->lock);
	if (t->started)
		pthread_join(t->sweeper, NULL);
	for (int i = 0; i < t->n_linger; i++)
		close(t->linger[i].fd);
	while (t->head) {
		struct api_conn *k = t->head;

		t->head = k->next;
		if (k->linger_fd >= 0)
			close(k->linger_fd);
		free(k);
	}
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->wake);
	free(t);
}

void api_conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
		     enum MHD_ConnectionNotificationCode toe)
{
	struct api_conns *t = cls;
	struct api_conn *k = *socket_context;

	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
		    MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);

		/* Untracked (out of memory): only MHD's idle timeout applies. */
		if (!ci || !(k = calloc(1, sizeof(*k))))
			return;
		k->tab = t;
		k->fd = ci->connect_fd;
		k->since_ms = sbx_mono_ms();
		k->receiving = true;
		k->linger_fd = -1;
		pthread_mutex_lock(&t->lock);
		k->next = t->head;
		if (k->next)
			k->next->prev = k;
		t->head = k;
		pthread_mutex_unlock(&t->lock);
		*socket_context = k;
		return;
	}
	if (!k)
		return;
	pthread_mutex_lock(&t->lock);
	if (k->prev)
		k->prev->next = k->next;
	else
		t->head = k->next;
	if (k->next)
		k->next->prev = k->prev;
	if (k->linger_fd >= 0) {
		/* MHD sent the answer and closes its descriptor next: the FIN
		 * goes now, the socket stays open on the duplicate */
		t->n_reserved--;
		shutdown(k->linger_fd, SHUT_WR);
		t->linger[t->n_linger++] =
		    (struct lingering){.fd = k->linger_fd, .until_ms = sbx_mono_ms() + LINGER_MS};
		pthread_cond_broadcast(&t->wake);
	}
	pthread_mutex_unlock(&t->lock);
	*socket_context = NULL;
	free(k);
}

static struct api_conn *conn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

void api_conn_received(struct MHD_Connection *c)
{
	struct api_conn *k = conn_of(c);

	if (!k)
		return;
	pthread_mutex_lock(&k->tab->lock);
	k->receiving = false;
	pthread_mutex_unlock(&k->tab->lock);
}

void api_conn_rearm(struct MHD_Connection *c)
{
	struct api_conn *k = conn_of(c);

	if (!k)
		return;
	pthread_mutex_lock(&k->tab->lock);
	k->since_ms = sbx_mono_ms();
	k->limit_ms = 0;
	k->receiving = !k->upgraded;
	pthread_mutex_unlock(&k->tab->lock);
}

void api_conn_upgraded(struct MHD_Connection *c)
{
	struct api_conn *k = conn_of(c);

	if (!k)
		return;
	pthread_mutex_lock(&k->tab->lock);
	k->upgraded = true;
	k->receiving = false;
	pthread_mutex_unlock(&k->tab->lock);
}

void api_conn_linger(struct MHD_Connection *c)
{
	struct api_conn *k = conn_of(c);
	struct api_conns *t;

	if (!k)
		return;
	t = k->tab;
	pthread_mutex_lock(&t->lock);
	if (k->linger_fd < 0 && t->n_linger + t->n_reserved < LINGER_MAX) {
		k->linger_fd = fcntl(k->fd, F_DUPFD_CLOEXEC, 0);
		if (k->linger_fd >= 0)
			t->n_reserved++;
	}
	pthread_mutex_unlock(&t->lock);
}

void api_conn_deadline(struct MHD_Connection *c, uint32_t ms)
{
	struct api_conn *k = conn_of(c);

	if (!k)
		return;
	pthread_mutex_lock(&k->tab->lock);
	k->since_ms = sbx_mono_ms();
	k->limit_ms = ms;
	k->receiving = true;
	pthread_mutex_unlock(&k->tab->lock);
}
