/* sandbox/egress.c: a guest's connections out (docs/network.md), relayed
 * by the daemon under the sandbox's policy.
 *
 * The guest's agent opens a stream (protocol v7) naming host:port; the
 * fleet hands it here (fleet_hooks.egress_open) on the channel's recv
 * thread, and each stream gets a thread of its own (detached, bounded:
 * connections_per_sandbox per guest by agentless, connections_per_account
 * per account and EGRESS_THREADS_MAX in all, here). The thread reads the
 * sandbox's row (an execution has none: refused, one-shot executions
 * never get a network), judges and connects with net_connect (policy,
 * forbidden set, a deadline), answers the stream, and relays:
 *
 *   guest -> server: held until the first bytes name what was asked for
 *                    (net_sniff_decide: TLS SNI, HTTP Host), then sent;
 *   server -> guest: at once (a server that speaks first, ssh, works).
 *
 * Both directions take bytes from the sandbox's token bucket
 * (bandwidth.c: bandwidth_bytes_per_s, shared by its connections and
 * its ports'). The bytes are added
 * to the sandbox's net_bytes_in/out every EGRESS_METER_STEP and at the
 * end, counted here, never by the guest's word; once the hold is spent
 * (sandbox_hold_spent) every connection of the sandbox ends.
 *
 * Locking: one leaf mutex (struct sandbox_egress.mu) guards the account
 * counts, the thread count and `stopping`; it is
 * never held across a call out of this file. A relay's own state is its
 * thread's; the stream's wake only writes the relay's eventfd.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../agentless/agentless.h"
#include "../store/store.h"
#include "sandbox-priv.h"

#define MOD "egress"

#define EGRESS_THREADS_MAX 1024
#define EGRESS_METER_STEP  (1u << 20)
#define EGRESS_BUF	   (64u * 1024)
#define EGRESS_STACK	   (256u * 1024)
/* How often a relay looks at its sandbox's hold and the daemon's stop. */
#define EGRESS_CHECK_MS 1000

/* An account's count of relays. */
struct egress_key {
	struct egress_key *next;
	char key[SANDBOX_ID_MAX];
	int refs; /* relays holding it */
};

struct sandbox_egress {
	pthread_mutex_t mu;
	pthread_cond_t cond; /* threads == 0 */
	struct egress_key *keys;
	int threads;
	bool stopping;
};

struct relay {
	struct sandbox_svc *svc;
	struct fleet_guest *g; /* a ref of the relay's */
	struct agentless_tcp *t;
	struct egress_key *account;
	struct sandbox_bucket *bucket;
	char id[SANDBOX_ID_MAX];
	char host[AGENTLESS_TCP_HOST_MAX + 1];
	char requested[NET_NAME_MAX]; /* normalized name or address literal */
	uint16_t port;
	int fd, efd;
	bool sniffed;  /* the first client bytes passed */
	bool fin_sent; /* agentless_tcp_shutdown done */
	bool starved;  /* the bucket was empty this turn */
	bool up_eof;   /* the guest's half is over: SHUT_WR done */
	bool down_eof; /* the server's half is over: FIN sent to the guest */
	uint8_t *up;   /* guest -> server, NET_SNIFF_MAX */
	size_t up_len;
	uint8_t *down; /* server -> guest, EGRESS_BUF */
	size_t down_off, down_len;
	uint64_t in, out;		  /* to the guest, from the guest */
	uint64_t metered_in, metered_out; /* of them added to the row */
	int64_t checked_ms;
};

int sandbox_egress_init(struct sandbox_svc *svc)
{
	struct sandbox_egress *e = calloc(1, sizeof(*e));

	if (!e)
		return -1;
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cond, NULL);
	svc->egress = e;
	return 0;
}

void sandbox_egress_stop(struct sandbox_svc *svc)
{
	struct sandbox_egress *e = svc->egress;

	if (!e)
		return;
	pthread_mutex_lock(&e->mu);
	e->stopping = true;
	while (e->threads > 0)
		pthread_cond_wait(&e->cond, &e->mu);
	pthread_mutex_unlock(&e->mu);
}

void sandbox_egress_free(struct sandbox_svc *svc)
{
	struct sandbox_egress *e = svc->egress;

	if (!e)
		return;
	sandbox_egress_stop(svc);
	while (e->keys) {
		struct egress_key *k = e->keys;

		e->keys = k->next;
		free(k);
	}
	pthread_cond_destroy(&e->cond);
	pthread_mutex_destroy(&e->mu);
	free(e);
	svc->egress = NULL;
}

/* ------------------------------------------------------------- the keys */

/* Take a ref on an account's count, made if new (mu held); NULL out of
 * memory or when the account is at its cap. */
static struct egress_key *key_take_locked(struct sandbox_egress *e, const char *key, int cap)
{
	struct egress_key *k;

	for (k = e->keys; k; k = k->next)
		if (strcmp(k->key, key) == 0)
			break;
	if (k && k->refs >= cap)
		return NULL;
	if (!k) {
		k = calloc(1, sizeof(*k));
		if (!k)
			return NULL;
		snprintf(k->key, sizeof k->key, "%s", key);
		k->next = e->keys;
		e->keys = k;
	}
	k->refs++;
	return k;
}

static void key_drop_locked(struct sandbox_egress *e, struct egress_key *k)
{
	if (!k || --k->refs > 0)
		return;
	for (struct egress_key **pp = &e->keys; *pp; pp = &(*pp)->next)
		if (*pp == k) {
			*pp = k->next;
			free(k);
			return;
		}
}

/* Bytes the sandbox's bucket (bandwidth.c) gives now, at most want (0:
 * none yet; *wait_ms says when some will be). */
static size_t bucket_take(struct relay *r, size_t want, int *wait_ms)
{
	size_t got = sandbox_bucket_take(r->svc, r->bucket, want, wait_ms);

	if (!got)
		r->starved = true;
	return got;
}

/* ------------------------------------------------------------ the relay */

static void relay_wake(void *opaque)
{
	struct relay *r = opaque;
	uint64_t one = 1;

	if (write(r->efd, &one, sizeof one) < 0 && errno != EAGAIN)
		sbx_debug(MOD, "eventfd: %s", strerror(errno));
}

/* Add what moved since the last step to the row (or all, at the end).
 * 1 when the sandbox's hold is spent: the relay ends. */
static int relay_meter(struct relay *r, bool final)
{
	uint64_t in = r->in - r->metered_in, out = r->out - r->metered_out;

	if ((!final && in + out < EGRESS_METER_STEP) || in + out == 0)
		return 0;
	r->metered_in += in;
	r->metered_out += out;
	return sandbox_net_count(r->svc, r->id, "egress", in, out, !final) ? 1 : 0;
}

/* Should the relay stop (the daemon stops, the guest ends)? */
static bool relay_over(struct relay *r)
{
	struct sandbox_egress *e = r->svc->egress;
	bool stop;

	pthread_mutex_lock(&e->mu);
	stop = e->stopping;
	pthread_mutex_unlock(&e->mu);
	return stop || fleet_guest_over(r->g);
}

/* guest -> server: take what the stream holds (up to the sniff buffer),
 * judge the first bytes, write what the socket takes. -1: end (reset). */
static int relay_up(struct relay *r, const struct agentless_tcp_status *st, int *wait_ms)
{
	if (st->buffered > 0 && r->up_len < NET_SNIFF_MAX) {
		size_t want =
		    bucket_take(r, SBX_MIN(st->buffered, NET_SNIFF_MAX - r->up_len), wait_ms);
		size_t got =
		    want ? agentless_tcp_read(r->g->conn, r->t, r->up + r->up_len, want) : 0;

		r->up_len += got;
		sandbox_bucket_refund(r->svc, r->bucket, want - got);
	}
	if (!r->sniffed && r->up_len > 0) {
		int v = net_sniff_decide(r->up, r->up_len, r->requested);

		if (v == -1 && r->up_len < NET_SNIFF_MAX && !st->eof)
			return 0;
		if (v == -1)
			v = NET_DENY_NAME_MISSING;
		if (v != NET_ALLOW) {
			sbx_info(MOD,
				 "sandbox %s: connection to %s:%u refused on its first bytes: %s",
				 r->id, r->host, r->port, net_verdict_name((enum net_verdict)v));
			return -1;
		}
		r->sniffed = true;
	}
	if (r->sniffed && r->up_len > 0) {
		ssize_t n = send(r->fd, r->up, r->up_len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -1;
		if (n > 0) {
			memmove(r->up, r->up + n, r->up_len - (size_t)n);
			r->up_len -= (size_t)n;
			r->out += (uint64_t)n;
		}
	}
	if (st->eof && st->buffered == 0 && r->up_len == 0 && !r->up_eof) {
		shutdown(r->fd, SHUT_WR);
		r->up_eof = true;
	}
	return 0;
}

/* server -> guest: read what the bucket and the stream's credit allow,
 * hand it to the stream. -1: end (reset). *wait_ms lowered when the bucket
 * is empty. */
static int relay_down(struct relay *r, const struct agentless_tcp_status *st, int *wait_ms)
{
	if (r->down_len == 0 && !r->down_eof && st->writable > 0) {
		size_t want = bucket_take(r, SBX_MIN((uint64_t)EGRESS_BUF, st->writable), wait_ms);
		ssize_t n = want ? recv(r->fd, r->down, want, MSG_DONTWAIT) : 0;

		if (want && n == 0) {
			r->down_eof = true;
		} else if (n > 0) {
			r->down_off = 0;
			r->down_len = (size_t)n;
		} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
			return -1;
		}
		sandbox_bucket_refund(r->svc, r->bucket, want - (n > 0 ? (size_t)n : 0));
	}
	if (r->down_len > 0 && st->writable > 0) {
		long n = agentless_tcp_write(r->g->conn, r->t, r->down + r->down_off, r->down_len);

		if (n < 0)
			return -1;
		r->down_off += (size_t)n;
		r->down_len -= (size_t)n;
		r->in += (uint64_t)n;
	}
	if (r->down_eof && r->down_len == 0 && !r->fin_sent) {
		if (agentless_tcp_shutdown(r->g->conn, r->t) < 0)
			return -1;
		r->fin_sent = true;
	}
	return 0;
}

/* Both halves over and nothing held: the connection is done. */
static bool relay_done(const struct relay *r, const struct agentless_tcp_status *st)
{
	return st->state == AGENTLESS_TCP_CLOSED && st->buffered == 0 && r->down_len == 0 &&
	       r->up_len == 0;
}

static void relay_loop(struct relay *r)
{
	for (;;) {
		struct agentless_tcp_status st;
		struct pollfd pf[2];
		int wait = EGRESS_CHECK_MS;
		int64_t now = sbx_mono_ms();
		uint64_t drain;

		agentless_tcp_status(r->t, &st);
		if (st.state == AGENTLESS_TCP_FAILED || relay_done(r, &st))
			return;
		if (now - r->checked_ms >= EGRESS_CHECK_MS) {
			r->checked_ms = now;
			if (relay_over(r))
				return;
		}
		r->starved = false;
		if (relay_up(r, &st, &wait) < 0 || relay_down(r, &st, &wait) < 0)
			return;
		if (relay_meter(r, false) == 1) {
			sbx_info(MOD, "sandbox %s: its hold is spent: its connection to %s:%u ends",
				 r->id, r->host, r->port);
			return;
		}
		agentless_tcp_status(r->t, &st);
		if (st.state == AGENTLESS_TCP_FAILED || relay_done(r, &st))
			return;
		pf[0] = (struct pollfd){.fd = r->fd};
		if (r->down_len == 0 && !r->down_eof && st.writable > 0 && !r->starved)
			pf[0].events |= POLLIN;
		if (r->sniffed && r->up_len > 0)
			pf[0].events |= POLLOUT;
		pf[1] = (struct pollfd){.fd = r->efd, .events = POLLIN};
		/* more to do at once: bytes wait on the stream or for it */
		if (!r->starved && ((st.buffered > 0 && r->up_len < NET_SNIFF_MAX && r->sniffed) ||
				    (r->down_len > 0 && st.writable > 0)))
			wait = 0;
		if (poll(pf, 2, wait) < 0 && errno != EINTR)
			return;
		if (pf[1].revents & POLLIN)
			(void)!read(r->efd, &drain, sizeof drain);
	}
}

/* ----------------------------------------------------------- the thread */

static enum agentless_refusal verdict_kind(enum net_verdict v)
{
	switch (v) {
	case NET_DENY_TIMEOUT:
		return AGENTLESS_REFUSE_TIMEOUT;
	case NET_DENY_CONNECT:
	case NET_DENY_RESOLVE:
		return AGENTLESS_REFUSE_FAILED;
	default:
		return AGENTLESS_REFUSE_FORBIDDEN;
	}
}

/* Check the sandbox, its policy and the account's cap, connect. The
 * socket, or -1 with kind and msg for the guest. */
static int relay_connect(struct relay *r, enum agentless_refusal *kind, char *msg, size_t cap)
{
	struct sandbox_svc *svc = r->svc;
	struct sandbox_egress *e = svc->egress;
	struct store_sandbox *row = malloc(sizeof(*row));
	struct net_policy *pol = malloc(sizeof(*pol));
	struct net_connect_result res;
	struct net_range lit;
	int fd = -1;

	*kind = AGENTLESS_REFUSE_FORBIDDEN;
	if (!row || !pol) {
		*kind = AGENTLESS_REFUSE_BUSY;
		snprintf(msg, cap, "the daemon is out of memory");
		goto out;
	}
	if (store_sandbox_get(svc->store, NULL, r->id, row, NULL) < 0 ||
	    row->status != STORE_RUNNING) {
		snprintf(msg, cap, "one-shot executions have no network");
		goto out;
	}
	if (sandbox_hold_spent(row, sbx_wall_ms())) {
		snprintf(msg, cap, "the sandbox spent what its hold covers; extend it");
		goto out;
	}
	if (net_policy_parse(row->network, strlen(row->network), "network", NULL, pol, NULL) < 0)
		net_policy_none(pol);
	if (pol->egress == NET_EGRESS_NONE) {
		snprintf(msg, cap, "the sandbox's network policy is egress none");
		goto out;
	}
	if (net_addr_parse(r->host, &lit) == 0)
		net_addr_text(&lit, r->requested, sizeof r->requested);
	else if (net_name_normalize(r->host, r->requested) < 0) {
		snprintf(msg, cap, "'%s' is not a host name", r->host);
		goto out;
	}
	pthread_mutex_lock(&e->mu);
	r->account = key_take_locked(e, row->account_id, svc->cfg.net_connections_per_account);
	pthread_mutex_unlock(&e->mu);
	if (r->account)
		r->bucket = sandbox_bucket_get(svc, r->id);
	if (!r->account || !r->bucket) {
		*kind = AGENTLESS_REFUSE_BUSY;
		snprintf(msg, cap, "the account has %d connections open (its limit)",
			 svc->cfg.net_connections_per_account);
		goto out;
	}
	fd = net_connect(pol, &svc->net, r->requested, r->port, svc->cfg.net_connect_timeout_ms,
			 &res);
	if (fd < 0) {
		char a[64] = "";

		*kind = verdict_kind(res.verdict);
		if (res.addr.family)
			net_addr_text(&res.addr, a, sizeof a);
		snprintf(msg, cap, "%s:%u: %s%s%s", r->requested, r->port,
			 net_verdict_name(res.verdict), a[0] ? " at " : "", a);
	}
out:
	free(row);
	free(pol);
	return fd;
}

/* Give back what a relay holds: its keys, its thread's count (counted:
 * it was counted in e->threads), its fds and buffers. */
static void relay_free(struct relay *r, bool counted)
{
	struct sandbox_egress *e = r->svc->egress;

	sandbox_bucket_put(r->svc, r->bucket);
	pthread_mutex_lock(&e->mu);
	key_drop_locked(e, r->account);
	if (counted && --e->threads == 0)
		pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->mu);
	if (r->fd >= 0)
		close(r->fd);
	if (r->efd >= 0)
		close(r->efd);
	free(r->up);
	free(r->down);
	free(r);
}

static void *relay_main(void *arg)
{
	struct relay *r = arg;
	char msg[600];
	enum agentless_refusal kind;

	r->fd = relay_connect(r, &kind, msg, sizeof msg);
	if (r->fd < 0) {
		sbx_info(MOD, "sandbox %s: connection to %s:%u refused: %s", r->id, r->host,
			 r->port, msg);
		agentless_tcp_refuse(r->g->conn, r->t, kind, msg);
	} else if (agentless_tcp_accept(r->g->conn, r->t, relay_wake, r,
					r->svc->cfg.net_idle_timeout_ms) == 0) {
		sbx_debug(MOD, "sandbox %s: connected to %s:%u", r->id, r->requested, r->port);
		r->checked_ms = sbx_mono_ms();
		relay_loop(r);
		relay_meter(r, true);
	}
	agentless_tcp_release(r->t); /* no wake after this; reset if not closed */
	fleet_guest_unref(r->g);
	relay_free(r, true);
	return NULL;
}

/* fleet_hooks.egress_open: on the channel's recv thread; never blocks. */
void sandbox_egress_open(void *opaque, struct fleet_guest *g, struct agentless_tcp *t,
			 const char *host, uint16_t port)
{
	struct sandbox_svc *svc = opaque;
	struct sandbox_egress *e = svc->egress;
	struct relay *r = calloc(1, sizeof(*r));
	pthread_attr_t attr;
	pthread_t th;
	bool ok = false;

	if (r) {
		r->svc = svc;
		r->fd = -1;
		r->up = malloc(NET_SNIFF_MAX);
		r->down = malloc(EGRESS_BUF);
		r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		pthread_mutex_lock(&e->mu);
		ok = r->up && r->down && r->efd >= 0 && !e->stopping &&
		     e->threads < EGRESS_THREADS_MAX;
		e->threads += ok;
		pthread_mutex_unlock(&e->mu);
	}
	if (ok) {
		r->g = g;
		r->t = t;
		r->port = port;
		snprintf(r->id, sizeof r->id, "%s", g->id);
		snprintf(r->host, sizeof r->host, "%s", host);
		fleet_guest_ref(g);
		pthread_attr_init(&attr);
		pthread_attr_setstacksize(&attr, EGRESS_STACK);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		ok = pthread_create(&th, &attr, relay_main, r) == 0;
		pthread_attr_destroy(&attr);
		if (ok)
			return;
		fleet_guest_unref(g);
		relay_free(r, true);
	} else if (r) {
		relay_free(r, false);
	}
	agentless_tcp_refuse(g->conn, t, AGENTLESS_REFUSE_BUSY,
			     "the daemon holds too many connections at once; retry shortly");
	agentless_tcp_release(t);
}
