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
 * Locking: t->lock is a leaf. */
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "http-priv.h"

#define MOD "api"

struct api_conn {
	struct api_conns *tab;
	int fd;
	int64_t since_ms; /* the current receive window started */
	bool receiving;	  /* the window is open (not parked, not replying) */
	bool cut;	  /* shut down at its deadline */
	struct api_conn *prev, *next;
};

struct api_conns {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	uint32_t timeout_ms;
	struct api_conn *head;
	bool stop;
	bool started;
	pthread_t sweeper;
};

static void *sweeper_main(void *arg)
{
	struct api_conns *t = arg;
	int64_t step = SBX_MAX((int64_t)50, SBX_MIN((int64_t)500, (int64_t)t->timeout_ms / 4));

	pthread_mutex_lock(&t->lock);
	while (!t->stop) {
		struct timespec ts = sbx_timespec_in(CLOCK_REALTIME, step);
		int64_t now;
		int cut = 0;

		pthread_cond_timedwait(&t->wake, &t->lock, &ts);
		now = sbx_mono_ms();
		for (struct api_conn *k = t->head; k; k = k->next) {
			if (!k->receiving || k->cut || now - k->since_ms < (int64_t)t->timeout_ms)
				continue;
			/* MHD reads end-of-file next and closes the connection. */
			shutdown(k->fd, SHUT_RDWR);
			k->cut = true;
			cut++;
		}
		if (cut)
			sbx_info(MOD,
				 "closed %d connection(s) that sent no whole request within %u ms",
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
	while (t->head) {
		struct api_conn *k = t->head;

		t->head = k->next;
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
	k->receiving = true;
	pthread_mutex_unlock(&k->tab->lock);
}
