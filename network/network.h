/* network: a sandbox's egress policy (docs/network.md) and the daemon's
 * side of enforcing it. Guests have no network interface; a connection a
 * guest asks for reaches the daemon as "name:port" and leaves from the
 * daemon's host only if the policy, the forbidden set and the first bytes
 * of the connection (TLS SNI or HTTP Host) all agree.
 *
 * - policy.c: the policy (egress none | allow_list | open, allow[] and
 *   deny[] rules), parsed from and written back to JSON, and the rules'
 *   matching.
 * - addr.c:   addresses: the forbidden set (loopback, link-local and
 *   metadata, private, ULA, CGNAT, multicast, unspecified, the host's own
 *   addresses), the operator's internal ranges, and net_decide().
 * - sniff.c:  the first client bytes: TLS ClientHello -> SNI, HTTP/1.x
 *   request -> Host, bounded (NET_SNIFF_MAX).
 * - connect.c: a resolver with a deadline (a bounded pool of detached
 *   threads, never a 30 s stall): the system's (getaddrinfo) or the
 *   operator's nameservers (libresolv); and net_connect().
 * - apt.c:    hostnames of the apt sources (the development default).
 *
 * Depends on util/ and json-c only. No locks are held across calls: the
 * resolver's one mutex (connect.c) guards its in-flight count and each
 * request's state, and is never held across getaddrinfo, res_nquery,
 * connect or poll.
 * A struct net_policy and a struct net_env are plain values: read-only
 * once built, safe to share between threads.
 */
#ifndef SBX_NETWORK_H
#define SBX_NETWORK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "../util/util.h"

/* Rules per list (allow, deny) at most; config network.max_rules may
 * lower it (default 32). */
#define NET_RULES_MAX 64
/* A domain name (253 characters) and its NUL. */
#define NET_NAME_MAX 254
/* One rule as text: "[v6/len]:lo-hi" or "*.name:lo-hi", with its NUL. */
#define NET_RULE_TEXT_MAX 272
/* The policy as canonical JSON, with its NUL: the sandbox row's column
 * and the sandbox object's "network". */
#define NET_POLICY_JSON_MAX 4096
/* The policy {"egress": "none"} as net_policy_json writes it. */
#define NET_POLICY_NONE_JSON "{\"egress\":\"none\",\"allow\":[],\"deny\":[]}"
/* Internal ranges the operator may list (network.internal_ranges). */
#define NET_INTERNAL_MAX 16
/* DNS servers the operator may name (network.nameservers; MAXNS). */
#define NET_NAMESERVERS_MAX 3
/* Host addresses the forbidden set remembers (getifaddrs). */
#define NET_HOST_ADDRS_MAX 64
/* The first client bytes net_sniff() looks at, at most. */
#define NET_SNIFF_MAX 16384

enum net_egress { NET_EGRESS_NONE, NET_EGRESS_ALLOW_LIST, NET_EGRESS_OPEN };

enum net_rule_kind {
	NET_RULE_NAME,	 /* example.com: that name only */
	NET_RULE_SUFFIX, /* *.example.com: any name below it, not itself */
	NET_RULE_CIDR,	 /* 203.0.113.7, 203.0.113.0/24, 2001:db8::/32 */
};

/* An address (or a range of them, with prefix). family: 4 or 6; a v4
 * address sits in addr[0..3]. */
struct net_range {
	int family;
	uint8_t addr[16];
	unsigned prefix; /* 0..32 or 0..128 */
};

struct net_rule {
	enum net_rule_kind kind;
	char name[NET_NAME_MAX];   /* NAME and SUFFIX: lowercase, no trailing dot;
				      SUFFIX without its "*." */
	struct net_range range;	   /* CIDR */
	uint16_t port_lo, port_hi; /* 0, 0: any port */
};

struct net_policy {
	enum net_egress egress;
	size_t n_allow, n_deny;
	struct net_rule allow[NET_RULES_MAX];
	struct net_rule deny[NET_RULES_MAX];
};

/* What the operator allows a policy to say (config network.*). */
struct net_limits {
	bool allow_open; /* egress "open" accepted */
	int max_rules;	 /* per list, 1..NET_RULES_MAX */
};

const char *net_egress_name(enum net_egress e);

/* The policy {"egress": "none"}. */
void net_policy_none(struct net_policy *p);

/* Parse one policy object (`param` names it in errors: "network", so a
 * bad rule is "network.allow[2]"). Unknown keys, a wrong type, a bad
 * rule, more than lim->max_rules rules in a list, "open" when
 * !lim->allow_open, allow[] or deny[] with egress "none", an empty
 * allow[] with "allow_list", or a policy longer than NET_POLICY_JSON_MAX
 * as JSON: SBX_E_INVALID_REQUEST naming the param. lim NULL: no operator
 * limit beyond NET_RULES_MAX (stored policies). */
int net_policy_from_json(struct json_object *o, const char *param, const struct net_limits *lim,
			 struct net_policy *out, struct sbx_error *err);
/* The same from JSON text. */
int net_policy_parse(const char *text, size_t len, const char *param, const struct net_limits *lim,
		     struct net_policy *out, struct sbx_error *err);
/* The canonical JSON ({"egress":..,"allow":[..],"deny":[..]}, rules as
 * written back by net_rule_text) into out; its length, or -1 when it does
 * not fit. */
int net_policy_json(const struct net_policy *p, char *out, size_t cap);
/* One rule (`text`) into *out; param names it in the error. */
int net_rule_parse(const char *text, const char *param, struct net_rule *out,
		   struct sbx_error *err);
/* A rule's canonical text. */
void net_rule_text(const struct net_rule *r, char out[NET_RULE_TEXT_MAX]);
/* A domain name as the policy compares it: lowercase, no trailing dot,
 * LDH labels of 1..63, at most 253 in all. -1 for anything else (IDN in
 * UTF-8 included: the xn-- form is the way). */
int net_name_normalize(const char *in, char out[NET_NAME_MAX]);
/* Does the rule match this name (normalized) and port? */
bool net_rule_match_name(const struct net_rule *r, const char *name, uint16_t port);
/* Does the rule match this address and port? */
bool net_rule_match_addr(const struct net_rule *r, const struct net_range *addr, uint16_t port);

/* ------------------------------------------------------------ addresses */

/* A literal address ("203.0.113.7", "2001:db8::1") into *out (prefix the
 * full length); -1 when it is none. */
int net_addr_parse(const char *s, struct net_range *out);
/* A CIDR ("10.0.0.0/8", "fd00::/8", or a lone address) into *out; the
 * bits past the prefix must be zero. */
int net_cidr_parse(const char *s, struct net_range *out);
void net_addr_text(const struct net_range *a, char *out, size_t cap);
bool net_range_contains(const struct net_range *range, const struct net_range *addr);

/* A DNS server: an address (prefix full) and its UDP port. */
struct net_nameserver {
	struct net_range addr;
	uint16_t port;
};

/* One nameserver as the config writes it: "198.18.0.53", "2001:db8::53"
 * (port 53), "198.18.0.53:5353" or "[2001:db8::53]:5353". An address
 * only (a name would need a resolver to find the resolver); any address
 * but the unspecified one (0.0.0.0, ::), loopback included (a local
 * caching resolver). -1 for anything else. */
int net_nameserver_parse(const char *text, struct net_nameserver *out);
/* Its text, as parsed ("198.18.0.53:53", "[2001:db8::53]:53"). */
void net_nameserver_text(const struct net_nameserver *ns, char *out, size_t cap);

/* Resolution, injectable for tests: fill out[0..*n) (*n <= cap) with the
 * addresses of name (prefix full), within timeout_ms. 0, or -1 with
 * *timed_out set when the deadline passed. */
typedef int (*net_resolve_fn)(void *ctx, const char *name, uint32_t timeout_ms,
			      struct net_range *out, size_t cap, size_t *n, bool *timed_out);

/* The daemon's side: the forbidden set's variable part and the resolver.
 * Build with net_env_init, then net_env_add_internal,
 * net_env_add_nameserver and net_env_host_addrs; read-only after. */
struct net_env {
	struct net_range internal[NET_INTERNAL_MAX]; /* network.internal_ranges */
	size_t n_internal;
	struct net_range host[NET_HOST_ADDRS_MAX]; /* this host's own addresses */
	size_t n_host;
	struct net_nameserver nameservers[NET_NAMESERVERS_MAX]; /* network.nameservers */
	size_t n_nameservers;
	/* NULL: net_resolve_nameservers (ctx: this env) when n_nameservers,
	 * else net_resolve_system. */
	net_resolve_fn resolve;
	void *resolve_ctx;
};

void net_env_init(struct net_env *env);
/* Add an internal range (CIDR text); SBX_E_INVALID_REQUEST (param) when
 * it is not a CIDR or there are NET_INTERNAL_MAX already. */
int net_env_add_internal(struct net_env *env, const char *cidr, const char *param,
			 struct sbx_error *err);
/* Add a nameserver (net_nameserver_parse's text); SBX_E_INVALID_REQUEST
 * (param) when it is none or there are NET_NAMESERVERS_MAX already. */
int net_env_add_nameserver(struct net_env *env, const char *text, const char *param,
			   struct sbx_error *err);
/* Remember every address of this host's interfaces (getifaddrs); the
 * count, or -1. */
int net_env_host_addrs(struct net_env *env);

/* Why a connection is allowed or refused (docs/network.md). */
#define NET_FOR_EACH_VERDICT(X)                                                                    \
	X(NET_ALLOW, "allowed")                                                                    \
	X(NET_DENY_EGRESS_NONE, "egress_none")                                                     \
	X(NET_DENY_NOT_ALLOWED, "not_allowed")                                                     \
	X(NET_DENY_DENY_LIST, "deny_list")                                                         \
	X(NET_DENY_FORBIDDEN, "forbidden_address")                                                 \
	X(NET_DENY_BAD_NAME, "bad_name")                                                           \
	X(NET_DENY_RESOLVE, "resolve_failed")                                                      \
	X(NET_DENY_TIMEOUT, "timeout")                                                             \
	X(NET_DENY_CONNECT, "connect_failed")                                                      \
	X(NET_DENY_NAME_MISMATCH, "name_mismatch")                                                 \
	X(NET_DENY_NAME_MISSING, "name_missing")

enum net_verdict {
#define NET_X_ENUM(v, s) v,
	NET_FOR_EACH_VERDICT(NET_X_ENUM)
#undef NET_X_ENUM
	    NET_VERDICT_COUNT
};

const char *net_verdict_name(enum net_verdict v);

/* Is the address in the forbidden set (whatever a policy says)? An
 * address inside an internal range is not; v4-mapped and NAT64 IPv6
 * addresses are judged by the IPv4 address they carry. */
bool net_addr_forbidden(const struct net_env *env, const struct net_range *addr);
/* Is it in one of the operator's internal ranges? */
bool net_addr_internal(const struct net_env *env, const struct net_range *addr);

/* The decision for one connection: to `name` (normalized, or an address
 * literal) on `port`, about to use `addr`. In order: egress none; the
 * forbidden set; the deny list (name or address); an internal address
 * needs an allow rule even under "open"; "open" allows; "allow_list"
 * needs an allow rule matching the name or the address. */
enum net_verdict net_decide(const struct net_policy *p, const struct net_env *env, const char *name,
			    uint16_t port, const struct net_range *addr);
/* The name-only half (before resolution): egress none, deny list by
 * name, allow list by name. An address literal yields NET_ALLOW here;
 * net_decide judges it. */
enum net_verdict net_decide_name(const struct net_policy *p, const char *name, uint16_t port);

/* ------------------------------------------------------------- connect */

/* The system resolver with a deadline: getaddrinfo on a detached worker
 * thread (at most 64 in flight, shared with net_resolve_nameservers;
 * beyond: -1 at once); the caller waits until timeout_ms and leaves a
 * late worker to free itself. ctx unused. */
int net_resolve_system(void *ctx, const char *name, uint32_t timeout_ms, struct net_range *out,
		       size_t cap, size_t *n, bool *timed_out);
/* The same pool and deadline, asking the operator's nameservers
 * (ctx: a const struct net_env * with n_nameservers > 0; copied, so the
 * env may go before a late worker ends) instead of /etc/resolv.conf:
 * libresolv (res_nquery, one UDP try per server in order, truncated
 * answers used as they are: never TCP), A then AAAA, each answer's A and
 * AAAA records for the name or its CNAME chain. NXDOMAIN, REFUSED or
 * SERVFAIL end the lookup at once (-1, not timed out); a name with no
 * address is -1 too. Servers that do not answer end it at the deadline
 * (*timed_out); its worker gives up within about a second per server
 * past it (libresolv counts whole seconds). When the A answer came but
 * the AAAA one is late, the A addresses are the answer. */
int net_resolve_nameservers(void *ctx, const char *name, uint32_t timeout_ms, struct net_range *out,
			    size_t cap, size_t *n, bool *timed_out);

struct net_connect_result {
	enum net_verdict verdict;
	struct net_range addr; /* the address connected to (or refused last) */
	int resolve_ms, connect_ms;
};

/* Resolve name (an address literal is used as is), judge EVERY address
 * with net_decide before it is used (what was checked is what is
 * connected to: a rebinding answer gains nothing), connect non-blocking
 * to the first allowed one that answers, all within timeout_ms. The
 * connected fd (blocking, close-on-exec), or -1 with res->verdict. */
int net_connect(const struct net_policy *p, const struct net_env *env, const char *name,
		uint16_t port, uint32_t timeout_ms, struct net_connect_result *res);

/* --------------------------------------------------------------- sniff */

enum net_sniff {
	NET_SNIFF_NAME,	   /* name filled: the SNI or the Host */
	NET_SNIFF_NO_NAME, /* TLS without SNI, HTTP without Host */
	NET_SNIFF_MORE,	   /* a prefix of TLS or HTTP: need more bytes */
	NET_SNIFF_OTHER,   /* neither TLS nor HTTP/1.x */
	NET_SNIFF_BAD,	   /* malformed TLS/HTTP, a bad name, two Hosts, h2c, or
			      no answer within NET_SNIFF_MAX bytes */
};

/* Look at the first len client bytes (hostile, bounded: only the first
 * NET_SNIFF_MAX count). name gets the SNI or the Host (port stripped),
 * normalized (an address literal in its inet_ntop form). */
enum net_sniff net_sniff(const uint8_t *buf, size_t len, char name[NET_NAME_MAX]);
/* The connection's verdict on its first bytes, requested as `requested`
 * (normalized name or address literal): NET_SNIFF_MORE as -1; TLS/HTTP
 * naming another name, or BAD -> NAME_MISMATCH; TLS/HTTP without a name
 * toward a requested name -> NAME_MISSING; anything else (OTHER: ssh,
 * git://...) NET_ALLOW: the address was judged at connect. */
int net_sniff_decide(const uint8_t *buf, size_t len, const char *requested);

/* ----------------------------------------------------------------- apt */

/* The hostnames of the apt sources: "URIs:" lines of dir's *.sources
 * (deb822) and the "deb"/"deb-src" lines of list_file (either may be
 * NULL or missing). Unique, normalized, at most cap; the count. */
size_t net_apt_hosts(const char *dir, const char *list_file, char (*out)[NET_NAME_MAX], size_t cap);

#endif
