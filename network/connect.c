/* network/connect.c: the resolver with a deadline and the connector
 * (network.h). Lock: `resolve_lock` guards `in_flight` and each request's
 * done/abandoned flags; it is never held across getaddrinfo.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "network.h"

/* Resolver threads in flight at once (late ones included). */
#define RESOLVE_MAX_IN_FLIGHT 64
/* Addresses of one name that are tried at most. */
#define RESOLVE_MAX_ADDRS 16

static pthread_mutex_t resolve_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t resolve_cond = PTHREAD_COND_INITIALIZER;
static int in_flight;

struct resolve_req {
	char name[NET_NAME_MAX];
	struct net_range addrs[RESOLVE_MAX_ADDRS];
	size_t n;
	int rc;
	bool done, abandoned; /* under resolve_lock */
};

static void *resolve_worker(void *arg)
{
	struct resolve_req *q = arg;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL, *i;
	size_t n = 0;
	bool free_it;
	int rc;

	rc = getaddrinfo(q->name, NULL, &hints, &res);
	for (i = rc == 0 ? res : NULL; i && n < RESOLVE_MAX_ADDRS; i = i->ai_next) {
		struct net_range *a = &q->addrs[n];

		memset(a, 0, sizeof(*a));
		if (i->ai_family == AF_INET) {
			a->family = 4;
			a->prefix = 32;
			memcpy(a->addr, &((struct sockaddr_in *)(void *)i->ai_addr)->sin_addr, 4);
		} else if (i->ai_family == AF_INET6) {
			a->family = 6;
			a->prefix = 128;
			memcpy(a->addr, &((struct sockaddr_in6 *)(void *)i->ai_addr)->sin6_addr,
			       16);
		} else {
			continue;
		}
		n++;
	}
	if (res)
		freeaddrinfo(res);
	pthread_mutex_lock(&resolve_lock);
	q->n = n;
	q->rc = rc == 0 && n > 0 ? 0 : -1;
	q->done = true;
	free_it = q->abandoned;
	in_flight--;
	pthread_cond_broadcast(&resolve_cond);
	pthread_mutex_unlock(&resolve_lock);
	if (free_it)
		free(q);
	return NULL;
}

int net_resolve_system(void *ctx, const char *name, uint32_t timeout_ms, struct net_range *out,
		       size_t cap, size_t *n, bool *timed_out)
{
	struct resolve_req *q = calloc(1, sizeof(*q));
	pthread_attr_t attr;
	pthread_t t;
	struct timespec until;
	int rc = -1;

	*n = 0;
	*timed_out = false;
	if (!q || strlen(name) >= sizeof(q->name)) {
		free(q);
		return -1;
	}
	snprintf(q->name, sizeof(q->name), "%s", name);
	pthread_mutex_lock(&resolve_lock);
	if (in_flight >= RESOLVE_MAX_IN_FLIGHT) {
		pthread_mutex_unlock(&resolve_lock);
		free(q);
		return -1;
	}
	in_flight++;
	pthread_mutex_unlock(&resolve_lock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	if (pthread_create(&t, &attr, resolve_worker, q) != 0) {
		pthread_attr_destroy(&attr);
		pthread_mutex_lock(&resolve_lock);
		in_flight--;
		pthread_mutex_unlock(&resolve_lock);
		free(q);
		return -1;
	}
	pthread_attr_destroy(&attr);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&resolve_lock);
	while (!q->done)
		if (pthread_cond_timedwait(&resolve_cond, &resolve_lock, &until) == ETIMEDOUT)
			break;
	if (!q->done) {
		q->abandoned = true; /* the worker frees it */
		*timed_out = true;
		pthread_mutex_unlock(&resolve_lock);
		return -1;
	}
	pthread_mutex_unlock(&resolve_lock);
	for (size_t i = 0; i < q->n && *n < cap; i++)
		out[(*n)++] = q->addrs[i];
	rc = q->rc;
	free(q);
	return rc;
}

/* ------------------------------------------------------------- connect */

static socklen_t to_sockaddr(const struct net_range *a, uint16_t port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (a->family == 4) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		memcpy(&s->sin_addr, a->addr, 4);
		return sizeof(*s);
	}
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
	s6->sin6_family = AF_INET6;
	s6->sin6_port = htons(port);
	memcpy(&s6->sin6_addr, a->addr, 16);
	return sizeof(*s6);
}

/* Connect to one (already judged) address before `until` (sbx_mono_ms):
 * the fd, or -1 (*timed_out when the deadline passed). */
static int connect_one(const struct net_range *a, uint16_t port, int64_t until, bool *timed_out)
{
	struct sockaddr_storage ss;
	socklen_t sl = to_sockaddr(a, port, &ss);
	int fd = socket(a->family == 4 ? AF_INET : AF_INET6,
			SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int soerr = 0;
	socklen_t el = sizeof(soerr);

	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&ss, sl) < 0) {
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		int r = -1;

		if (errno != EINPROGRESS)
			goto fail;
		while (r < 0) {
			int64_t left = until - sbx_mono_ms();
			if (left <= 0) {
				*timed_out = true;
				goto fail;
			}
			r = poll(&p, 1, (int)left);
			if (r < 0 && errno != EINTR)
				goto fail;
			if (r == 0) {
				*timed_out = true;
				goto fail;
			}
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &el) < 0 || soerr)
			goto fail;
	}
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0)
		goto fail;
	return fd;
fail:
	close(fd);
	return -1;
}

int net_connect(const struct net_policy *p, const struct net_env *env, const char *name,
		uint16_t port, uint32_t timeout_ms, struct net_connect_result *res)
{
	struct net_range addrs[RESOLVE_MAX_ADDRS];
	char norm[NET_NAME_MAX];
	size_t n = 0;
	int64_t start = sbx_mono_ms(), until = start + timeout_ms, t1;
	bool timed_out = false;
	enum net_verdict last = NET_DENY_RESOLVE;

	memset(res, 0, sizeof(*res));
	if (net_addr_parse(name, &addrs[0]) == 0) {
		n = 1;
		net_addr_text(&addrs[0], norm, sizeof(norm));
	} else if (net_name_normalize(name, norm) < 0) {
		res->verdict = NET_DENY_BAD_NAME;
		return -1;
	}
	res->verdict = net_decide_name(p, norm, port);
	if (res->verdict != NET_ALLOW)
		return -1;
	if (n == 0) {
		net_resolve_fn fn = env && env->resolve ? env->resolve : net_resolve_system;
		int rc = fn(env ? env->resolve_ctx : NULL, norm, timeout_ms, addrs,
			    RESOLVE_MAX_ADDRS, &n, &timed_out);
		if (rc < 0 || n == 0) {
			res->resolve_ms = (int)(sbx_mono_ms() - start);
			res->verdict = timed_out ? NET_DENY_TIMEOUT : NET_DENY_RESOLVE;
			return -1;
		}
	}
	t1 = sbx_mono_ms();
	res->resolve_ms = (int)(t1 - start);
	/* Every address is judged right before it is used: what is checked
	 * is what is connected to. */
	for (size_t i = 0; i < n; i++) {
		enum net_verdict v = net_decide(p, env, norm, port, &addrs[i]);
		int fd;

		res->addr = addrs[i];
		if (v != NET_ALLOW) {
			last = v;
			continue;
		}
		fd = connect_one(&addrs[i], port, until, &timed_out);
		res->connect_ms = (int)(sbx_mono_ms() - t1);
		if (fd >= 0) {
			res->verdict = NET_ALLOW;
			return fd;
		}
		last = timed_out ? NET_DENY_TIMEOUT : NET_DENY_CONNECT;
		if (timed_out)
			break;
	}
	res->verdict = last;
	return -1;
}
