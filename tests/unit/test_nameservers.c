/* network/: net_resolve_nameservers (network.nameservers) against a DNS
 * server of the test's own on loopback (127.0.0.1 and ::1, ports the
 * kernel picks; nothing leaves the machine), which answers by the name
 * asked: addresses (A and AAAA), a CNAME chain with a stray record that
 * must be ignored, NXDOMAIN, REFUSED, SERVFAIL, a name with no AAAA, a
 * name whose AAAA never comes, and silence; and a second socket that
 * never answers at all. NXDOMAIN, REFUSED and SERVFAIL end a lookup
 * after one query (no AAAA, no other server); a silent server ends it at
 * the deadline; a silent first server leaves the lookup to the second;
 * net_connect asks the env's nameservers (a name only they know).
 * Figures printed, no timed assertion.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <resolv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "network/network.h"

enum fake_kind {
	F_ADDR,
	F_CNAME,
	F_NX,
	F_REFUSED,
	F_SERVFAIL,
	F_SILENT,
	F_V4ONLY,
	F_SLOW_AAAA,
	F_LOOP
};

static const struct {
	const char *name;
	enum fake_kind kind;
} fake_names[] = {
    {"a.test", F_ADDR},		    /* 198.18.0.10, 198.18.0.11; 2001:db8::10 */
    {"cname.test", F_CNAME},	    /* -> a.test, with a stray other.test record */
    {"nx.test", F_NX},		    /* NXDOMAIN */
    {"refused.test", F_REFUSED},    /* REFUSED */
    {"servfail.test", F_SERVFAIL},  /* SERVFAIL */
    {"silent.test", F_SILENT},	    /* never answered */
    {"v4only.test", F_V4ONLY},	    /* 198.18.0.12; no AAAA (NOERROR, none) */
    {"slowaaaa.test", F_SLOW_AAAA}, /* 198.18.0.13; the AAAA never answered */
    {"loop.test", F_LOOP},	    /* 127.0.0.1 */
};

static struct {
	int fd4, fd6, quiet; /* answering (v4, v6: -1 without ::1); never read */
	uint16_t port4, port6, quiet_port;
	int stop[2];
	pthread_t thread;
	pthread_mutex_t lock;
	int asked[SBX_ARRAY_SIZE(fake_names)]; /* queries per name, any type */
} fk = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t put_name(uint8_t *p, const char *name)
{
	size_t o = 0;

	while (*name) {
		size_t l = strcspn(name, ".");

		p[o++] = (uint8_t)l;
		memcpy(p + o, name, l);
		o += l;
		name += l + (name[l] == '.');
	}
	p[o++] = 0;
	return o;
}

/* One record at p: owner (NULL: the question's name, by pointer), type,
 * rdata; its length. */
static size_t put_rr(uint8_t *p, const char *owner, int type, const void *rdata, size_t rdlen)
{
	size_t o = 0;

	if (owner) {
		o = put_name(p, owner);
	} else {
		p[o++] = 0xc0;
		p[o++] = NS_HFIXEDSZ;
	}
	ns_put16(type, p + o);
	ns_put16(ns_c_in, p + o + 2);
	ns_put32(60, p + o + 4);
	ns_put16(rdlen, p + o + 8);
	memcpy(p + o + 10, rdata, rdlen);
	return o + 10 + rdlen;
}

static size_t put_addr(uint8_t *p, const char *owner, int type, const char *text)
{
	uint8_t a[16];

	assert_int_equal(inet_pton(type == ns_t_a ? AF_INET : AF_INET6, text, a), 1);
	return put_rr(p, owner, type, a, type == ns_t_a ? 4 : 16);
}

/* The answer section for a name of kind k asked as type; *rcode set; the
 * number of records (-1: no reply at all). */
static int fake_answer(enum fake_kind k, int type, uint8_t *p, size_t *len, int *rcode)
{
	uint8_t target[64];
	size_t tl;
	bool a = type == ns_t_a;

	*rcode = ns_r_noerror;
	*len = 0;
	switch (k) {
	case F_ADDR:
		if (!a) {
			*len = put_addr(p, NULL, ns_t_aaaa, "2001:db8::10");
			return 1;
		}
		*len = put_addr(p, NULL, ns_t_a, "198.18.0.10");
		*len += put_addr(p + *len, NULL, ns_t_a, "198.18.0.11");
		return 2;
	case F_CNAME:
		tl = put_name(target, "a.test");
		*len = put_rr(p, NULL, ns_t_cname, target, tl);
		*len += put_addr(p + *len, "other.test", type, a ? "198.18.0.66" : "2001:db8::66");
		*len += put_addr(p + *len, "a.test", type, a ? "198.18.0.10" : "2001:db8::10");
		return 3;
	case F_NX:
		*rcode = ns_r_nxdomain;
		return 0;
	case F_REFUSED:
		*rcode = ns_r_refused;
		return 0;
	case F_SERVFAIL:
		*rcode = ns_r_servfail;
		return 0;
	case F_SILENT:
		return -1;
	case F_V4ONLY:
		if (!a)
			return 0;
		*len = put_addr(p, NULL, ns_t_a, "198.18.0.12");
		return 1;
	case F_SLOW_AAAA:
		if (!a)
			return -1;
		*len = put_addr(p, NULL, ns_t_a, "198.18.0.13");
		return 1;
	case F_LOOP:
		if (!a)
			return 0;
		*len = put_addr(p, NULL, ns_t_a, "127.0.0.1");
		return 1;
	}
	return -1;
}

/* Answer one query read from fd (unknown names: REFUSED). */
static void fake_serve(int fd)
{
	uint8_t q[512], r[1024];
	struct sockaddr_storage from;
	socklen_t fl = sizeof(from);
	ssize_t n = recvfrom(fd, q, sizeof(q), 0, (struct sockaddr *)&from, &fl);
	ns_msg m;
	ns_rr rr;
	size_t qend, alen = 0, i;
	int count = 0, rcode = ns_r_refused;

	if (n < NS_HFIXEDSZ || ns_initparse(q, (int)n, &m) < 0 ||
	    ns_parserr(&m, ns_s_qd, 0, &rr) < 0)
		return;
	qend = NS_HFIXEDSZ + put_name(r, ns_rr_name(rr)) + 4;
	if (qend > (size_t)n)
		return;
	for (i = 0; i < SBX_ARRAY_SIZE(fake_names); i++)
		if (strcmp(ns_rr_name(rr), fake_names[i].name) == 0)
			break;
	if (i < SBX_ARRAY_SIZE(fake_names)) {
		pthread_mutex_lock(&fk.lock);
		fk.asked[i]++;
		pthread_mutex_unlock(&fk.lock);
		count = fake_answer(fake_names[i].kind, ns_rr_type(rr), r + qend, &alen, &rcode);
		if (count < 0)
			return;
	}
	memmove(r + NS_HFIXEDSZ, q + NS_HFIXEDSZ, qend - NS_HFIXEDSZ);
	memcpy(r, q, 2);		    /* id */
	r[2] = 0x80 | 0x04 | (q[2] & 0x01); /* QR, AA, RD as asked */
	r[3] = 0x80 | (uint8_t)rcode;	    /* RA */
	ns_put16(1, r + 4);
	ns_put16(count, r + 6);
	ns_put16(0, r + 8);
	ns_put16(0, r + 10);
	sendto(fd, r, qend + alen, 0, (struct sockaddr *)&from, fl);
}

static void *fake_loop(void *arg)
{
	struct pollfd p[3] = {{.fd = fk.stop[0], .events = POLLIN},
			      {.fd = fk.fd4, .events = POLLIN},
			      {.fd = fk.fd6, .events = POLLIN}};

	(void)arg;
	for (;;) {
		if (poll(p, 3, -1) < 0)
			continue;
		if (p[0].revents)
			return NULL;
		for (int i = 1; i < 3; i++)
			if (p[i].fd >= 0 && (p[i].revents & POLLIN))
				fake_serve(p[i].fd);
	}
}

/* A UDP socket on loopback (v6: ::1) and its port; -1 when it cannot be. */
static int udp_bound(bool v6, uint16_t *port)
{
	struct sockaddr_storage ss = {0};
	socklen_t sl;
	int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	if (v6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_addr = in6addr_loopback;
		sl = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		sl = sizeof(*s4);
	}
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		close(fd);
		return -1;
	}
	*port = ntohs(v6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
			 : ((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

static int fake_up(void **state)
{
	(void)state;
	fk.fd4 = udp_bound(false, &fk.port4);
	fk.fd6 = udp_bound(true, &fk.port6); /* -1 where ::1 is missing */
	fk.quiet = udp_bound(false, &fk.quiet_port);
	if (fk.fd4 < 0 || fk.quiet < 0 || pipe(fk.stop) < 0)
		return -1;
	return pthread_create(&fk.thread, NULL, fake_loop, NULL) == 0 ? 0 : -1;
}

static int fake_down(void **state)
{
	(void)state;
	if (write(fk.stop[1], "x", 1) != 1)
		return -1;
	pthread_join(fk.thread, NULL);
	close(fk.fd4);
	if (fk.fd6 >= 0)
		close(fk.fd6);
	close(fk.quiet);
	close(fk.stop[0]);
	close(fk.stop[1]);
	return 0;
}

static int asked(const char *name)
{
	int n = -1;

	pthread_mutex_lock(&fk.lock);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(fake_names); i++)
		if (strcmp(fake_names[i].name, name) == 0)
			n = fk.asked[i];
	pthread_mutex_unlock(&fk.lock);
	return n;
}

/* An env whose nameservers are the texts given ("4": the fake on
 * 127.0.0.1, "6": on ::1, "quiet": the socket that never answers). */
static void env_of(struct net_env *env, const char *const *which, size_t n)
{
	struct sbx_error err = {0};
	char text[64];

	net_env_init(env);
	for (size_t i = 0; i < n; i++) {
		if (strcmp(which[i], "6") == 0)
			snprintf(text, sizeof(text), "[::1]:%u", fk.port6);
		else
			snprintf(text, sizeof(text), "127.0.0.1:%u",
				 strcmp(which[i], "quiet") == 0 ? fk.quiet_port : fk.port4);
		if (net_env_add_nameserver(env, text, "network.nameservers", &err) < 0)
			fail_msg("%s: %s", text, err.message);
	}
}

/* Resolve name through env; the addresses as "a b c" into out. */
static int resolve(const struct net_env *env, const char *name, uint32_t ms, char *out, size_t cap,
		   bool *timed_out, int64_t *took)
{
	struct net_range a[16];
	size_t n = 0, o = 0;
	int64_t t0 = sbx_mono_ms();
	int rc =
	    net_resolve_nameservers((void *)env, name, ms, a, SBX_ARRAY_SIZE(a), &n, timed_out);

	*took = sbx_mono_ms() - t0;
	out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		char t[64];

		net_addr_text(&a[i], t, sizeof(t));
		o += (size_t)snprintf(out + o, cap - o, "%s%s", i ? " " : "", t);
	}
	return rc;
}

static void test_answers(void **state)
{
	static const char *const v4[] = {"4"}, *const v6[] = {"6"};
	struct net_env env;
	char got[256];
	bool to;
	int64_t ms;

	(void)state;
	env_of(&env, v4, 1);
	assert_int_equal(resolve(&env, "a.test", 3000, got, sizeof(got), &to, &ms), 0);
	assert_string_equal(got, "198.18.0.10 198.18.0.11 2001:db8::10");
	assert_false(to);
	assert_int_equal(asked("a.test"), 2); /* A, AAAA */
	printf("# a.test: %s in %lld ms\n", got, (long long)ms);
	/* the CNAME chain is followed; a record for another name is not */
	assert_int_equal(resolve(&env, "cname.test", 3000, got, sizeof(got), &to, &ms), 0);
	assert_string_equal(got, "198.18.0.10 2001:db8::10");
	/* a name without AAAA: its A */
	assert_int_equal(resolve(&env, "v4only.test", 3000, got, sizeof(got), &to, &ms), 0);
	assert_string_equal(got, "198.18.0.12");
	assert_int_equal(asked("v4only.test"), 2);
	if (fk.fd6 < 0) {
		printf("# no ::1 here: the IPv6 server is not tried\n");
		return;
	}
	env_of(&env, v6, 1);
	assert_int_equal(resolve(&env, "a.test", 3000, got, sizeof(got), &to, &ms), 0);
	assert_string_equal(got, "198.18.0.10 198.18.0.11 2001:db8::10");
	assert_int_equal(asked("a.test"), 4);
}

/* NXDOMAIN, REFUSED and SERVFAIL: one query, then the lookup ends, with
 * a second server listed that is never asked. */
static void test_refusals_end_at_once(void **state)
{
	static const char *const two[] = {"4", "4"};
	static const char *const names[] = {"nx.test", "refused.test", "servfail.test"};
	struct net_env env;
	char got[256];
	bool to;
	int64_t ms;

	(void)state;
	env_of(&env, two, 2);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(names); i++) {
		assert_int_equal(resolve(&env, names[i], 5000, got, sizeof(got), &to, &ms), -1);
		assert_false(to);
		assert_string_equal(got, "");
		if (asked(names[i]) != 1)
			fail_msg("%s asked %d times", names[i], asked(names[i]));
		printf("# %s failed after %lld ms, asked once\n", names[i], (long long)ms);
	}
}

/* Silence: the deadline ends it, timed out; a silent first server leaves
 * the name to the second; an A that came is the answer when the AAAA
 * does not. */
static void test_silence(void **state)
{
	static const char *const quiet[] = {"quiet"}, *const quiet_first[] = {"quiet", "4"},
				 *const v4[] = {"4"};
	struct net_env env;
	char got[256];
	bool to;
	int64_t ms;

	(void)state;
	env_of(&env, quiet, 1);
	assert_int_equal(resolve(&env, "a.test", 600, got, sizeof(got), &to, &ms), -1);
	assert_true(to);
	printf("# a silent server, deadline 600 ms: ended after %lld ms\n", (long long)ms);
	env_of(&env, v4, 1);
	assert_int_equal(resolve(&env, "silent.test", 600, got, sizeof(got), &to, &ms), -1);
	assert_true(to);
	assert_int_equal(asked("silent.test"), 1); /* one try */
	/* libresolv waits 1 s at least: the caller's deadline comes first */
	assert_int_equal(resolve(&env, "slowaaaa.test", 800, got, sizeof(got), &to, &ms), 0);
	assert_string_equal(got, "198.18.0.13");
	assert_false(to);
	printf("# A answered, AAAA silent, deadline 800 ms: %s after %lld ms\n", got,
	       (long long)ms);
	env_of(&env, quiet_first, 2);
	assert_int_equal(resolve(&env, "a.test", 4000, got, sizeof(got), &to, &ms), 0);
	assert_string_equal(got, "198.18.0.10 198.18.0.11 2001:db8::10");
	printf("# a silent first server, deadline 4000 ms: the second answered after %lld ms\n",
	       (long long)ms);
}

/* net_connect resolves through the env's nameservers when it has some
 * (and no resolver of its own): loop.test is only the fake's. */
static void test_connect_uses_env(void **state)
{
	static const char *const v4[] = {"4"}, *const quiet[] = {"quiet"};
	struct net_policy p;
	struct net_env env;
	struct net_connect_result res;
	struct sbx_error err = {0};
	const char *json = "{\"egress\":\"allow_list\",\"allow\":[\"*.test\"]}";
	char a[64];

	(void)state;
	assert_int_equal(net_policy_parse(json, strlen(json), "network", NULL, &p, &err), 0);
	env_of(&env, v4, 1);
	assert_int_equal(net_connect(&p, &env, "loop.test", 80, 2000, &res), -1);
	assert_int_equal(res.verdict, NET_DENY_FORBIDDEN);
	net_addr_text(&res.addr, a, sizeof(a));
	assert_string_equal(a, "127.0.0.1");
	assert_int_equal(net_connect(&p, &env, "nx.test", 80, 2000, &res), -1);
	assert_int_equal(res.verdict, NET_DENY_RESOLVE);
	env_of(&env, quiet, 1);
	assert_int_equal(net_connect(&p, &env, "loop.test", 80, 500, &res), -1);
	assert_int_equal(res.verdict, NET_DENY_TIMEOUT);
	printf("# net_connect, a silent nameserver, deadline 500 ms: %s after %d ms\n",
	       net_verdict_name(res.verdict), res.resolve_ms);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_answers),
	    cmocka_unit_test(test_refusals_end_at_once),
	    cmocka_unit_test(test_silence),
	    cmocka_unit_test(test_connect_uses_env),
	};
	return cmocka_run_group_tests(tests, fake_up, fake_down);
}
