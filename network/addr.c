/* network/addr.c: addresses and ranges, the forbidden set, the operator's
 * internal ranges, the host's own addresses and the decision (network.h).
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "network.h"

int net_addr_parse(const char *s, struct net_range *out)
{
	memset(out, 0, sizeof(*out));
	if (inet_pton(AF_INET, s, out->addr) == 1) {
		out->family = 4;
		out->prefix = 32;
		return 0;
	}
	if (inet_pton(AF_INET6, s, out->addr) == 1) {
		out->family = 6;
		out->prefix = 128;
		return 0;
	}
	return -1;
}

/* Are the bits of a past `prefix` all zero? */
static bool host_bits_zero(const struct net_range *a)
{
	unsigned bits = a->family == 4 ? 32 : 128;

	for (unsigned i = a->prefix; i < bits; i++)
		if (a->addr[i / 8] & (0x80 >> (i % 8)))
			return false;
	return true;
}

int net_cidr_parse(const char *s, struct net_range *out)
{
	char a[64];
	const char *slash = strchr(s, '/');
	unsigned long len = 0;

	if (!slash)
		return net_addr_parse(s, out);
	if ((size_t)(slash - s) >= sizeof(a) || !slash[1] || strlen(slash + 1) > 3)
		return -1;
	memcpy(a, s, (size_t)(slash - s));
	a[slash - s] = '\0';
	for (const char *p = slash + 1; *p; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		len = len * 10 + (unsigned long)(*p - '0');
	}
	if (net_addr_parse(a, out) < 0 || len > (out->family == 4 ? 32u : 128u))
		return -1;
	out->prefix = (unsigned)len;
	return host_bits_zero(out) ? 0 : -1;
}

void net_addr_text(const struct net_range *a, char *out, size_t cap)
{
	if (!inet_ntop(a->family == 4 ? AF_INET : AF_INET6, a->addr, out, (socklen_t)cap))
		snprintf(out, cap, "?");
}

bool net_range_contains(const struct net_range *range, const struct net_range *addr)
{
	unsigned p = range->prefix;

	if (range->family != addr->family)
		return false;
	if (memcmp(range->addr, addr->addr, p / 8) != 0)
		return false;
	if (p % 8) {
		uint8_t m = (uint8_t)(0xff << (8 - p % 8));
		if ((range->addr[p / 8] & m) != (addr->addr[p / 8] & m))
			return false;
	}
	return true;
}

/* "53" (1..65535, digits only) into *port. */
static int port_parse(const char *s, uint16_t *port)
{
	unsigned long v = 0;

	if (!*s || strlen(s) > 5)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (unsigned long)(*s - '0');
	}
	if (v < 1 || v > 65535)
		return -1;
	*port = (uint16_t)v;
	return 0;
}

int net_nameserver_parse(const char *text, struct net_nameserver *out)
{
	static const uint8_t zero[16];
	char a[64];
	const char *port = NULL, *end;
	size_t len = strlen(text);
	bool bracketed = text[0] == '[';

	memset(out, 0, sizeof(*out));
	out->port = 53;
	if (bracketed) { /* [v6] or [v6]:port */
		end = strchr(text, ']');
		if (!end || (end[1] && end[1] != ':'))
			return -1;
		port = end[1] ? end + 2 : NULL;
		text++;
		len = (size_t)(end - text);
	} else if (strchr(text, ':') == strrchr(text, ':') && strchr(text, ':')) {
		end = strchr(text, ':'); /* v4:port (one colon) */
		port = end + 1;
		len = (size_t)(end - text);
	}
	if (len == 0 || len >= sizeof(a))
		return -1;
	memcpy(a, text, len);
	a[len] = '\0';
	if (net_addr_parse(a, &out->addr) < 0 || (port && port_parse(port, &out->port) < 0))
		return -1;
	/* brackets hold an IPv6 address only; nobody answers at 0.0.0.0 or :: */
	if ((bracketed && out->addr.family != 6) ||
	    !memcmp(out->addr.addr, zero, out->addr.family == 4 ? 4 : 16))
		return -1;
	return 0;
}

void net_nameserver_text(const struct net_nameserver *ns, char *out, size_t cap)
{
	char a[64];

	net_addr_text(&ns->addr, a, sizeof(a));
	snprintf(out, cap, ns->addr.family == 6 ? "[%s]:%u" : "%s:%u", a, (unsigned)ns->port);
}

/* --------------------------------------------------------- forbidden set */

/* Never reachable, whatever the policy (docs/network.md "Never
 * reachable"). The documentation ranges (192.0.2/24, 198.51.100/24,
 * 203.0.113/24, 2001:db8::/32) are not here: a deployment may serve its
 * mirror from one. */
static const char *const forbidden_text[] = {
    "0.0.0.0/8",      /* "this network", unspecified */
    "10.0.0.0/8",     /* RFC 1918 */
    "100.64.0.0/10",  /* CGNAT (and cloud metadata 100.100.100.200) */
    "127.0.0.0/8",    /* loopback */
    "169.254.0.0/16", /* link-local, metadata 169.254.169.254 */
    "172.16.0.0/12",  /* RFC 1918 */
    "192.0.0.0/24",   /* IETF protocol assignments */
    "192.168.0.0/16", /* RFC 1918 */
    "224.0.0.0/4",    /* multicast */
    "240.0.0.0/4",    /* reserved, broadcast */
    "::/128",	      /* unspecified */
    "::1/128",	      /* loopback */
    "fc00::/7",	      /* ULA (and metadata fd00:ec2::254) */
    "fe80::/10",      /* link-local */
    "ff00::/8",	      /* multicast */
    "2002::/16",      /* 6to4: an IPv4 address the host may route to */
    "2001::/32",      /* Teredo */
};

static struct net_range forbidden[SBX_ARRAY_SIZE(forbidden_text)];
static int forbidden_ready;

static void forbidden_init(void)
{
	if (__atomic_load_n(&forbidden_ready, __ATOMIC_ACQUIRE))
		return;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(forbidden_text); i++)
		if (net_cidr_parse(forbidden_text[i], &forbidden[i]) < 0)
			abort(); /* a typo above */
	__atomic_store_n(&forbidden_ready, 1, __ATOMIC_RELEASE);
}

/* The IPv4 address a v4-mapped (::ffff:0:0/96) or NAT64 (64:ff9b::/96)
 * address carries, into v4; false for any other. */
static bool embedded_v4(const struct net_range *a, struct net_range *v4)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};

	if (a->family != 6 || (memcmp(a->addr, mapped, 12) && memcmp(a->addr, nat64, 12)))
		return false;
	memset(v4, 0, sizeof(*v4));
	v4->family = 4;
	v4->prefix = 32;
	memcpy(v4->addr, a->addr + 12, 4);
	return true;
}

void net_env_init(struct net_env *env)
{
	memset(env, 0, sizeof(*env));
	forbidden_init();
}

int net_env_add_internal(struct net_env *env, const char *cidr, const char *param,
			 struct sbx_error *err)
{
	if (env->n_internal >= NET_INTERNAL_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, param,
				     "at most %d internal ranges", NET_INTERNAL_MAX);
	if (net_cidr_parse(cidr, &env->internal[env->n_internal]) < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, param,
				     "'%.80s' is not a CIDR (host bits must be zero)", cidr);
	env->n_internal++;
	return 0;
}

int net_env_add_nameserver(struct net_env *env, const char *text, const char *param,
			   struct sbx_error *err)
{
	if (env->n_nameservers >= NET_NAMESERVERS_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, param, "at most %d nameservers",
				     NET_NAMESERVERS_MAX);
	if (net_nameserver_parse(text, &env->nameservers[env->n_nameservers]) < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, param,
				     "'%.80s' is not a nameserver address such as \"198.18.0.53\" "
				     "or \"[2001:db8::53]:5353\"",
				     text);
	env->n_nameservers++;
	return 0;
}

int net_env_host_addrs(struct net_env *env)
{
	struct ifaddrs *ifa, *i;

	if (getifaddrs(&ifa) < 0)
		return -1;
	env->n_host = 0;
	for (i = ifa; i && env->n_host < NET_HOST_ADDRS_MAX; i = i->ifa_next) {
		struct net_range *h = &env->host[env->n_host];

		if (!i->ifa_addr)
			continue;
		memset(h, 0, sizeof(*h));
		if (i->ifa_addr->sa_family == AF_INET) {
			h->family = 4;
			h->prefix = 32;
			memcpy(h->addr, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, 4);
		} else if (i->ifa_addr->sa_family == AF_INET6) {
			h->family = 6;
			h->prefix = 128;
			memcpy(h->addr, &((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr,
			       16);
		} else {
			continue;
		}
		env->n_host++;
	}
	freeifaddrs(ifa);
	return (int)env->n_host;
}

bool net_addr_internal(const struct net_env *env, const struct net_range *addr)
{
	struct net_range v4;

	if (embedded_v4(addr, &v4))
		addr = &v4;
	for (size_t i = 0; env && i < env->n_internal; i++)
		if (net_range_contains(&env->internal[i], addr))
			return true;
	return false;
}

bool net_addr_forbidden(const struct net_env *env, const struct net_range *addr)
{
	struct net_range v4;

	forbidden_init();
	if (embedded_v4(addr, &v4))
		addr = &v4;
	/* The host's own addresses, even inside an internal range: its API
	 * port, libvirtd and sshd listen there. */
	for (size_t i = 0; env && i < env->n_host; i++)
		if (net_range_contains(&env->host[i], addr))
			return true;
	if (net_addr_internal(env, addr))
		return false;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(forbidden); i++)
		if (net_range_contains(&forbidden[i], addr))
			return true;
	return false;
}

/* ------------------------------------------------------------- decision */

const char *net_verdict_name(enum net_verdict v)
{
	static const char *const names[] = {
#define NET_X_NAME(v, s) s,
	    NET_FOR_EACH_VERDICT(NET_X_NAME)
#undef NET_X_NAME
	};
	return (unsigned)v < NET_VERDICT_COUNT ? names[v] : "unknown";
}

static bool is_literal(const char *name)
{
	struct net_range a;

	return net_addr_parse(name, &a) == 0;
}

static bool any_name(const struct net_rule *r, size_t n, const char *name, uint16_t port)
{
	for (size_t i = 0; i < n; i++)
		if (net_rule_match_name(&r[i], name, port))
			return true;
	return false;
}

static bool any_addr(const struct net_rule *r, size_t n, const struct net_range *a, uint16_t port)
{
	struct net_range v4;

	if (embedded_v4(a, &v4) && any_addr(r, n, &v4, port))
		return true;
	for (size_t i = 0; i < n; i++)
		if (net_rule_match_addr(&r[i], a, port))
			return true;
	return false;
}

enum net_verdict net_decide_name(const struct net_policy *p, const char *name, uint16_t port)
{
	if (p->egress == NET_EGRESS_NONE)
		return NET_DENY_EGRESS_NONE;
	if (port == 0)
		return NET_DENY_BAD_NAME;
	if (is_literal(name))
		return NET_ALLOW;
	if (any_name(p->deny, p->n_deny, name, port))
		return NET_DENY_DENY_LIST;
	if (p->egress == NET_EGRESS_ALLOW_LIST && !any_name(p->allow, p->n_allow, name, port)) {
		/* No name rule matches: refuse before resolving, unless an
		 * address rule may still allow what the name resolves to. */
		for (size_t i = 0; i < p->n_allow; i++)
			if (p->allow[i].kind == NET_RULE_CIDR)
				return NET_ALLOW;
		return NET_DENY_NOT_ALLOWED;
	}
	return NET_ALLOW;
}

enum net_verdict net_decide(const struct net_policy *p, const struct net_env *env, const char *name,
			    uint16_t port, const struct net_range *addr)
{
	bool literal = is_literal(name), by_name, by_addr;
	enum net_verdict v = net_decide_name(p, name, port);

	if (v != NET_ALLOW)
		return v;
	if (net_addr_forbidden(env, addr))
		return NET_DENY_FORBIDDEN;
	if (any_addr(p->deny, p->n_deny, addr, port))
		return NET_DENY_DENY_LIST;
	by_name = !literal && any_name(p->allow, p->n_allow, name, port);
	by_addr = any_addr(p->allow, p->n_allow, addr, port);
	if (net_addr_internal(env, addr))
		return by_name || by_addr ? NET_ALLOW : NET_DENY_NOT_ALLOWED;
	if (p->egress == NET_EGRESS_OPEN)
		return NET_ALLOW;
	return by_name || by_addr ? NET_ALLOW : NET_DENY_NOT_ALLOWED;
}
