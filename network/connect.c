/* network/connect.c: the resolvers with a deadline and the connector
 * (network.h). Lock: `resolve_lock` guards `in_flight` and each request's
 * results and done/abandoned flags; it is never held across getaddrinfo
 * or res_nquery.
 */
#include <arpa/nameser.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <resolv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "network.h"

/* Resolver threads in flight at once (late ones included), both kinds. */
#define RESOLVE_MAX_IN_FLIGHT 64
/* Addresses of one name that are tried at most. */
#define RESOLVE_MAX_ADDRS 16
/* One DNS answer as read (a longer one is cut, and then not parsed). */
#define RESOLVE_ANSWER_MAX 4096

static pthread_mutex_t resolve_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t resolve_cond = PTHREAD_COND_INITIALIZER;
static int in_flight;

struct resolve_req;
/* A lookup, on the worker thread: fill a[0..*n) (*n <= RESOLVE_MAX_ADDRS);
 * 0 or -1. It may publish a partial answer (resolve_publish) before. */
typedef int (*lookup_fn)(struct resolve_req *q, struct net_range *a, size_t *n);

struct resolve_req {
	char name[NET_NAME_MAX];
	lookup_fn lookup;
	struct net_nameserver ns[NET_NAMESERVERS_MAX]; /* lookup_servers: a copy */
	size_t n_ns;
	int64_t until;	/* the caller's deadline, sbx_mono_ms */
	bool no_answer; /* the lookup's: a server did not answer in time */
	/* under resolve_lock: */
	struct net_range addrs[RESOLVE_MAX_ADDRS];
	size_t n; /* a partial answer while !done */
	int rc;
	bool done, abandoned;
};

static void resolve_publish(struct resolve_req *q, const struct net_range *a, size_t n)
{
	pthread_mutex_lock(&resolve_lock);
	memcpy(q->addrs, a, n * sizeof(*a));
	q->n = n;
	pthread_mutex_unlock(&resolve_lock);
}

static void *resolve_worker(void *arg)
{
	struct resolve_req *q = arg;
	struct net_range a[RESOLVE_MAX_ADDRS];
	size_t n = 0;
	bool free_it;
	int rc = q->lookup(q, a, &n);

	pthread_mutex_lock(&resolve_lock);
	memcpy(q->addrs, a, n * sizeof(*a));
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

/* Start q's worker (the pool's bound: -1 at once beyond it). From then
 * on q is shared with the worker (resolve_run). */
static int resolve_start(struct resolve_req *q)
{
	pthread_attr_t attr;
	pthread_t t;
	int rc;

	pthread_mutex_lock(&resolve_lock);
	if (in_flight >= RESOLVE_MAX_IN_FLIGHT) {
		pthread_mutex_unlock(&resolve_lock);
		return -1;
	}
	in_flight++;
	pthread_mutex_unlock(&resolve_lock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	rc = pthread_create(&t, &attr, resolve_worker, q);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		pthread_mutex_lock(&resolve_lock);
		in_flight--;
		pthread_mutex_unlock(&resolve_lock);
		return -1;
	}
	return 0;
}

/* Run q (calloc'd, name and lookup set) on the pool and wait until
 * timeout_ms: its answer into out, q freed here or, when late, by its
 * worker. A late lookup with a partial answer (the A addresses) counts
 * as answered. */
static int resolve_run(struct resolve_req *q, uint32_t timeout_ms, struct net_range *out,
		       size_t cap, size_t *n, bool *timed_out)
{
	struct timespec until;
	int rc;

	if (resolve_start(q) < 0) {
		free(q);
		return -1;
	}
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
	for (size_t i = 0; i < q->n && *n < cap; i++)
		out[(*n)++] = q->addrs[i];
	if (!q->done) {
		q->abandoned = true; /* the worker frees it */
		*timed_out = *n == 0;
		pthread_mutex_unlock(&resolve_lock);
		return *n > 0 ? 0 : -1;
	}
	pthread_mutex_unlock(&resolve_lock);
	rc = q->rc;
	*timed_out = rc < 0 && q->no_answer;
	free(q);
	return rc;
}

static struct resolve_req *resolve_req_new(const char *name, lookup_fn lookup)
{
	struct resolve_req *q;

	if (strlen(name) >= NET_NAME_MAX || !(q = calloc(1, sizeof(*q))))
		return NULL;
	snprintf(q->name, sizeof(q->name), "%s", name);
	q->lookup = lookup;
	return q;
}

/* ------------------------------------------------------ getaddrinfo */

static int lookup_system(struct resolve_req *q, struct net_range *out, size_t *n)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL, *i;
	int rc = getaddrinfo(q->name, NULL, &hints, &res);

	for (i = rc == 0 ? res : NULL; i && *n < RESOLVE_MAX_ADDRS; i = i->ai_next) {
		struct net_range *a = &out[*n];

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
		(*n)++;
	}
	if (res)
		freeaddrinfo(res);
	return rc == 0 ? 0 : -1;
}

int net_resolve_system(void *ctx, const char *name, uint32_t timeout_ms, struct net_range *out,
		       size_t cap, size_t *n, bool *timed_out)
{
	struct resolve_req *q = resolve_req_new(name, lookup_system);

	*n = 0;
	*timed_out = false;
	return q ? resolve_run(q, timeout_ms, out, cap, n, timed_out) : -1;
}

/* ------------------------------------------------------- nameservers */

/* The operator's servers in place of resolv.conf's. glibc keeps an IPv6
 * server in _u._ext.nsaddrs[i] (malloc'd, freed by res_nclose) with
 * nsaddr_list[i].sin_family 0; an IPv4 one in nsaddr_list[i]. */
static int resolver_servers(struct __res_state *st, const struct resolve_req *q)
{
	for (int i = 0; i < MAXNS; i++) {
		free(st->_u._ext.nsaddrs[i]);
		st->_u._ext.nsaddrs[i] = NULL;
		st->_u._ext.nssocks[i] = -1;
	}
	st->_u._ext.nscount = 0;
	st->nscount = 0;
	for (size_t i = 0; i < q->n_ns && i < MAXNS; i++) {
		const struct net_nameserver *ns = &q->ns[i];
		struct sockaddr_in *s4 = &st->nsaddr_list[i];

		memset(s4, 0, sizeof(*s4));
		if (ns->addr.family == 4) {
			s4->sin_family = AF_INET;
			s4->sin_port = htons(ns->port);
			memcpy(&s4->sin_addr, ns->addr.addr, 4);
		} else {
			struct sockaddr_in6 *s6 = calloc(1, sizeof(*s6));

			if (!s6)
				return -1;
			s6->sin6_family = AF_INET6;
			s6->sin6_port = htons(ns->port);
			memcpy(&s6->sin6_addr, ns->addr.addr, 16);
			st->_u._ext.nsaddrs[i] = s6;
		}
		st->nscount++;
	}
	/* whatever resolv.conf or RES_OPTIONS said: no search list, no
	 * rotation, no TCP (a truncated answer is parsed as it is), one try
	 * per server */
	st->options = RES_INIT | RES_RECURSE | RES_IGNTC;
	st->retry = 1;
	/* pfcode non-zero ("called from dig"): glibc's res_send hands a
	 * REFUSED or SERVFAIL answer back as it is instead of asking the
	 * next server, so a refusal ends the lookup at once and tells itself
	 * from silence. The flag only prints in res_debug's functions,
	 * which are not called. */
	st->pfcode = RES_PRF_STATS;
	return 0;
}

/* The A or AAAA records of an answer for name, or for the names its
 * CNAME records lead to (in the answer's order), appended to out. */
static void answer_addrs(const unsigned char *ans, int len, const char *name, int type,
			 struct net_range *out, size_t *n)
{
	char want[NS_MAXDNAME];
	ns_msg msg;
	ns_rr rr;

	if (ns_initparse(ans, len, &msg) < 0)
		return;
	snprintf(want, sizeof(want), "%s", name);
	for (int i = 0; i < ns_msg_count(msg, ns_s_an) && *n < RESOLVE_MAX_ADDRS; i++) {
		struct net_range *a = &out[*n];

		if (ns_parserr(&msg, ns_s_an, i, &rr) < 0)
			return;
		if (ns_rr_class(rr) != ns_c_in || strcasecmp(ns_rr_name(rr), want) != 0)
			continue;
		if (ns_rr_type(rr) == ns_t_cname) {
			if (dn_expand(ns_msg_base(msg), ns_msg_end(msg), ns_rr_rdata(rr), want,
				      sizeof(want)) < 0)
				return;
			continue;
		}
		if ((int)ns_rr_type(rr) != type || ns_rr_rdlen(rr) != (type == ns_t_a ? 4 : 16))
			continue;
		memset(a, 0, sizeof(*a));
		a->family = type == ns_t_a ? 4 : 6;
		a->prefix = type == ns_t_a ? 32 : 128;
		memcpy(a->addr, ns_rr_rdata(rr), ns_rr_rdlen(rr));
		(*n)++;
	}
}

/* One query (ns_t_a or ns_t_aaaa), bounded by q->until: 0 (answered,
 * addresses or none), -1 (NXDOMAIN, REFUSED, SERVFAIL, no answer in
 * time: then q->no_answer; the lookup ends). libresolv's timeout is
 * whole seconds per server (the first server retrans s, the others
 * about as much), so retrans is what is left shared among the servers,
 * 1 s at least. */
static int query_one(struct __res_state *st, struct resolve_req *q, int type, struct net_range *out,
		     size_t *n)
{
	unsigned char ans[RESOLVE_ANSWER_MAX];
	int64_t left = q->until - sbx_mono_ms();
	int len;

	if (left <= 0) {
		q->no_answer = true;
		return -1;
	}
	st->retrans = (int)(left / 1000 / (int64_t)q->n_ns);
	if (st->retrans < 1)
		st->retrans = 1;
	errno = 0;
	len = res_nquery(st, q->name, ns_c_in, type, ans, sizeof(ans));
	if (len < 0 && st->res_h_errno == NO_DATA)
		return 0;
	if (len < 0) {
		/* an answer (NXDOMAIN, REFUSED: NO_RECOVERY, SERVFAIL:
		 * TRY_AGAIN) leaves errno alone; no answer: TRY_AGAIN with
		 * ETIMEDOUT (ECONNREFUSED: an ICMP refusal, at once) */
		q->no_answer = st->res_h_errno == TRY_AGAIN && errno == ETIMEDOUT;
		return -1;
	}
	if (len > (int)sizeof(ans))
		return 0; /* cut: not parsed */
	answer_addrs(ans, len, q->name, type, out, n);
	return 0;
}

static int lookup_servers(struct resolve_req *q, struct net_range *out, size_t *n)
{
	struct __res_state st;
	int rc = -1;

	memset(&st, 0, sizeof(st));
	if (res_ninit(&st) < 0)
		return -1;
	if (resolver_servers(&st, q) < 0 || query_one(&st, q, ns_t_a, out, n) < 0)
		goto out;
	if (*n > 0)
		resolve_publish(q, out, *n); /* the answer, should AAAA be late */
	rc = 0;
	if (*n < RESOLVE_MAX_ADDRS && query_one(&st, q, ns_t_aaaa, out, n) < 0 && *n == 0)
		rc = -1;
out:
	res_nclose(&st);
	return rc;
}

int net_resolve_nameservers(void *ctx, const char *name, uint32_t timeout_ms, struct net_range *out,
			    size_t cap, size_t *n, bool *timed_out)
{
	const struct net_env *env = ctx;
	struct resolve_req *q;

	*n = 0;
	*timed_out = false;
	if (!env || env->n_nameservers == 0 || !(q = resolve_req_new(name, lookup_servers)))
		return -1;
	q->n_ns = env->n_nameservers;
	memcpy(q->ns, env->nameservers, q->n_ns * sizeof(q->ns[0]));
	q->until = sbx_mono_ms() + timeout_ms;
	return resolve_run(q, timeout_ms, out, cap, n, timed_out);
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

/* The env's resolver: its own (tests), its nameservers, or the system's. */
static int env_resolve(const struct net_env *env, const char *name, uint32_t timeout_ms,
		       struct net_range *out, size_t *n, bool *timed_out)
{
	if (env && env->resolve)
		return env->resolve(env->resolve_ctx, name, timeout_ms, out, RESOLVE_MAX_ADDRS, n,
				    timed_out);
	if (env && env->n_nameservers > 0)
		return net_resolve_nameservers((void *)env, name, timeout_ms, out,
					       RESOLVE_MAX_ADDRS, n, timed_out);
	return net_resolve_system(NULL, name, timeout_ms, out, RESOLVE_MAX_ADDRS, n, timed_out);
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
		int rc = env_resolve(env, norm, timeout_ms, addrs, &n, &timed_out);
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
