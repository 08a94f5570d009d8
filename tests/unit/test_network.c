/* network/ (docs/network.md): rules and policies parsed from JSON with
 * errors naming the param and written back canonically; name matching
 * (exact vs *.suffix, case, trailing dot, IDN refused); CIDR v4/v6; the
 * forbidden set with internal ranges and the host's own addresses; the
 * decision table (deny wins, open obeys deny and the forbidden set); the
 * SNI/Host parser on a real ClientHello, on truncations and on hostile
 * bytes; the connector's name-only refusals and its resolver deadline;
 * the apt sources' hostnames; network.nameservers entries, in the env
 * and in the config (the resolver that asks them:
 * test_nameservers.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api-priv.h"
#include "clienthello.h"
#include "network/network.h"
#include "sandbox/sandbox.h"

static int policy(const char *json, const struct net_limits *lim, struct net_policy *p,
		  struct sbx_error *err)
{
	return net_policy_parse(json, strlen(json), "network", lim, p, err);
}

static void rule_ok(const char *in, const char *canon)
{
	struct net_rule r;
	struct sbx_error err = {0};
	char t[NET_RULE_TEXT_MAX];

	assert_int_equal(net_rule_parse(in, "r", &r, &err), 0);
	net_rule_text(&r, t);
	assert_string_equal(t, canon);
}

static void rule_bad(const char *in)
{
	struct net_rule r;
	struct sbx_error err = {0};

	if (net_rule_parse(in, "network.allow[0]", &r, &err) == 0)
		fail_msg("rule '%s' was accepted", in);
	assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
	assert_string_equal(err.param, "network.allow[0]");
}

static void test_rules(void **state)
{
	(void)state;
	rule_ok("Example.COM.", "example.com");
	rule_ok("*.Example.com", "*.example.com");
	rule_ok("example.com:443", "example.com:443");
	rule_ok("example.com:8000-8999", "example.com:8000-8999");
	rule_ok("203.0.113.7", "203.0.113.7");
	rule_ok("203.0.113.0/24:80", "203.0.113.0/24:80");
	rule_ok("2001:db8::/32", "2001:db8::/32");
	rule_ok("[2001:DB8::1]:443", "[2001:db8::1]:443");
	rule_ok("[2001:db8::/32]:1-1024", "[2001:db8::/32]:1-1024");
	rule_ok("xn--bcher-kva.example", "xn--bcher-kva.example");
	rule_bad("");
	rule_bad("bücher.example"); /* IDN: the xn-- form only */
	rule_bad("ex ample.com");
	rule_bad("*.");
	rule_bad("a.*.example.com");
	rule_bad("*example.com");
	rule_bad("-a.example.com");
	rule_bad("a-.example.com");
	rule_bad("a..example.com");
	rule_bad("example.com:0");
	rule_bad("example.com:65536");
	rule_bad("example.com:90-80");
	rule_bad("example.com:");
	rule_bad("203.0.113.7/24"); /* host bits set */
	rule_bad("203.0.113.0/33");
	rule_bad("1.2.3");
	rule_bad("300.1.1.1");
	rule_bad("[2001:db8::1");
	rule_bad("2001:db8::/129");
	char longname[300];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	rule_bad(longname);
	memset(longname, 'a', 64);
	strcpy(longname + 64, ".com"); /* a label of 64 */
	rule_bad(longname);
}

static void test_policy_json(void **state)
{
	struct net_policy p;
	struct sbx_error err = {0};
	struct net_limits lim = {.allow_open = false, .max_rules = 2};
	char out[NET_POLICY_JSON_MAX];

	(void)state;
	assert_int_equal(policy("{\"egress\":\"allow_list\",\"allow\":[\"Deb.Debian.org\","
				"\"*.npmjs.org:443\"],\"deny\":[\"10.0.0.0/8\"]}",
				&lim, &p, &err),
			 0);
	assert_int_equal(p.egress, NET_EGRESS_ALLOW_LIST);
	assert_int_equal(p.n_allow, 2);
	assert_int_equal(p.n_deny, 1);
	assert_true(net_policy_json(&p, out, sizeof(out)) > 0);
	assert_string_equal(out, "{\"egress\":\"allow_list\",\"allow\":[\"deb.debian.org\","
				 "\"*.npmjs.org:443\"],\"deny\":[\"10.0.0.0/8\"]}");
	/* what is written back parses to the same */
	{
		struct net_policy q;
		char out2[NET_POLICY_JSON_MAX];
		assert_int_equal(policy(out, NULL, &q, &err), 0);
		net_policy_json(&q, out2, sizeof(out2));
		assert_string_equal(out, out2);
	}
	assert_int_equal(net_policy_json(&p, out, 20), -1); /* does not fit */

	static const struct {
		const char *json, *param;
	} bad[] = {
	    {"[]", "network"},
	    {"{}", "network.egress"},
	    {"{\"egress\":\"some\"}", "network.egress"},
	    {"{\"egress\":1}", "network.egress"},
	    {"{\"egress\":\"open\"}", "network.egress"}, /* the operator forbids it */
	    {"{\"egress\":\"none\",\"allow\":[\"a.com\"]}", "network.egress"},
	    {"{\"egress\":\"allow_list\"}", "network.allow"},
	    {"{\"egress\":\"allow_list\",\"allow\":[]}", "network.allow"},
	    {"{\"egress\":\"allow_list\",\"allow\":\"a.com\"}", "network.allow"},
	    {"{\"egress\":\"allow_list\",\"allow\":[\"a.com\",\"b.com\",\"c.com\"]}",
	     "network.allow"},
	    {"{\"egress\":\"allow_list\",\"allow\":[\"a.com\",\"b..com\"]}", "network.allow[1]"},
	    {"{\"egress\":\"allow_list\",\"allow\":[\"a.com\"],\"deny\":[7]}", "network.deny[0]"},
	    {"{\"egress\":\"allow_list\",\"allow\":[\"a.com\"],\"proxy\":true}", "network.proxy"},
	    {"{\"egress\":\"allow_list\",\"allow\":[\"a\\u0000.com\"]}", "network.allow[0]"},
	    {"{\"egress\":", "network"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sbx_error_clear(&err);
		if (policy(bad[i].json, &lim, &p, &err) == 0)
			fail_msg("accepted %s", bad[i].json);
		assert_int_equal(err.code, SBX_E_INVALID_REQUEST);
		assert_string_equal(err.param, bad[i].param);
	}
	lim.allow_open = true;
	assert_int_equal(policy("{\"egress\":\"open\",\"deny\":[\"*.evil.test\"]}", &lim, &p, &err),
			 0);
	assert_int_equal(p.egress, NET_EGRESS_OPEN);
	/* the JSON bound: 64 rules of 250 bytes do not fit 4 KiB */
	{
		char *big = malloc(70000), name[260];
		size_t at = 0;
		at += (size_t)sprintf(big, "{\"egress\":\"allow_list\",\"allow\":[");
		for (int i = 0; i < 60; i++) {
			memset(name, 'a', 60);
			sprintf(name + 60, ".%d.example.com", i);
			at += (size_t)sprintf(big + at, "%s\"%s\"", i ? "," : "", name);
		}
		sprintf(big + at, "]}");
		sbx_error_clear(&err);
		assert_int_equal(policy(big, NULL, &p, &err), -1);
		assert_string_equal(err.param, "network");
		free(big);
	}
}

static void test_match(void **state)
{
	struct net_rule r;
	struct net_range a;
	struct sbx_error err = {0};

	(void)state;
	assert_int_equal(net_rule_parse("example.com", "r", &r, &err), 0);
	assert_true(net_rule_match_name(&r, "example.com", 443));
	assert_false(net_rule_match_name(&r, "www.example.com", 443));
	assert_false(net_rule_match_name(&r, "xexample.com", 443));
	assert_int_equal(net_rule_parse("*.example.com:443", "r", &r, &err), 0);
	assert_true(net_rule_match_name(&r, "www.example.com", 443));
	assert_true(net_rule_match_name(&r, "a.b.example.com", 443));
	assert_false(net_rule_match_name(&r, "example.com", 443)); /* not the apex */
	assert_false(net_rule_match_name(&r, "badexample.com", 443));
	assert_false(net_rule_match_name(&r, "www.example.com", 80));
	char n[NET_NAME_MAX];
	assert_int_equal(net_name_normalize("WWW.Example.COM.", n), 0);
	assert_true(net_rule_match_name(&r, n, 443));
	assert_int_equal(net_name_normalize("example.com..", n), -1);
	assert_int_equal(net_rule_parse("203.0.113.0/25:80-81", "r", &r, &err), 0);
	assert_int_equal(net_addr_parse("203.0.113.127", &a), 0);
	assert_true(net_rule_match_addr(&r, &a, 81));
	assert_false(net_rule_match_addr(&r, &a, 82));
	assert_int_equal(net_addr_parse("203.0.113.128", &a), 0);
	assert_false(net_rule_match_addr(&r, &a, 80));
	assert_int_equal(net_rule_parse("2001:db8:8000::/33", "r", &r, &err), 0);
	assert_int_equal(net_addr_parse("2001:db8:ffff::1", &a), 0);
	assert_true(net_rule_match_addr(&r, &a, 1));
	assert_int_equal(net_addr_parse("2001:db8:7fff::1", &a), 0);
	assert_false(net_rule_match_addr(&r, &a, 1));
	assert_int_equal(net_addr_parse("203.0.113.1", &a), 0);
	assert_false(net_rule_match_addr(&r, &a, 1)); /* another family */
}

static bool forbidden(const struct net_env *env, const char *s)
{
	struct net_range a;

	assert_int_equal(net_addr_parse(s, &a), 0);
	return net_addr_forbidden(env, &a);
}

static void test_forbidden(void **state)
{
	struct net_env env;
	struct sbx_error err = {0};
	static const char *const never[] = {
	    "127.0.0.1",
	    "127.255.0.9",
	    "0.0.0.0",
	    "10.1.2.3",
	    "172.16.0.1",
	    "172.31.255.255",
	    "192.168.122.1",
	    "100.64.0.1",
	    "100.100.100.200",
	    "169.254.169.254",
	    "169.254.0.1",
	    "224.0.0.251",
	    "255.255.255.255",
	    "::",
	    "::1",
	    "fe80::1",
	    "fd00:ec2::254",
	    "fc00::1",
	    "ff02::1",
	    "::ffff:127.0.0.1",
	    "::ffff:169.254.169.254",
	    "64:ff9b::10.0.0.1",
	    "2002:7f00:1::1",
	};
	static const char *const fine[] = {
	    "203.0.113.10", "198.51.100.7", "192.0.2.1",    "198.18.3.10",	   "93.184.216.34",
	    "172.32.0.1",   "2001:db8::1",  "2a00:1450::1", "::ffff:203.0.113.10",
	};

	(void)state;
	net_env_init(&env);
	for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++)
		if (!forbidden(&env, never[i]))
			fail_msg("%s is reachable", never[i]);
	for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++)
		if (forbidden(&env, fine[i]))
			fail_msg("%s is forbidden", fine[i]);
	/* an internal range opens its part of the private set, not loopback */
	assert_int_equal(
	    net_env_add_internal(&env, "10.20.0.0/16", "network.internal_ranges[0]", &err), 0);
	assert_false(forbidden(&env, "10.20.1.1"));
	assert_true(forbidden(&env, "10.21.1.1"));
	assert_int_equal(net_env_add_internal(&env, "10.20.0.1/16", "x", &err), -1);
	assert_string_equal(err.param, "x");
	/* the host's own addresses: loopback at least, and never reachable
	 * even inside an internal range */
	assert_true(net_env_host_addrs(&env) >= 1);
	env.host[0] = (struct net_range){.family = 4, .addr = {10, 20, 0, 5}, .prefix = 32};
	assert_true(forbidden(&env, "10.20.0.5"));
	env.host[1] = (struct net_range){.family = 4, .addr = {203, 0, 113, 99}, .prefix = 32};
	if (env.n_host < 2)
		env.n_host = 2;
	assert_true(forbidden(&env, "203.0.113.99"));
}

static enum net_verdict decide(const char *json, const struct net_env *env, const char *name,
			       uint16_t port, const char *addr)
{
	struct net_policy p;
	struct net_range a;
	struct sbx_error err = {0};

	assert_int_equal(policy(json, NULL, &p, &err), 0);
	assert_int_equal(net_addr_parse(addr, &a), 0);
	return net_decide(&p, env, name, port, &a);
}

static void test_decide(void **state)
{
	struct net_env env;
	struct sbx_error err = {0};
	const char *al = "{\"egress\":\"allow_list\",\"allow\":[\"allowed.lab.test:443\","
			 "\"*.cdn.lab.test\",\"198.51.100.0/24\",\"internal.lab.test\"],"
			 "\"deny\":[\"bad.cdn.lab.test\",\"198.51.100.66\"]}";
	const char *open = "{\"egress\":\"open\",\"deny\":[\"*.evil.test\",\"203.0.113.66\"]}";
	static const struct {
		int pol; /* 0 none, 1 al, 2 open */
		const char *name;
		uint16_t port;
		const char *addr;
		enum net_verdict want;
	} table[] = {
	    {0, "allowed.lab.test", 443, "203.0.113.10", NET_DENY_EGRESS_NONE},
	    {1, "allowed.lab.test", 443, "203.0.113.10", NET_ALLOW},
	    {1, "allowed.lab.test", 80, "203.0.113.10", NET_DENY_NOT_ALLOWED},
	    {1, "other.lab.test", 443, "203.0.113.10", NET_DENY_NOT_ALLOWED},
	    {1, "x.cdn.lab.test", 80, "203.0.113.10", NET_ALLOW},
	    {1, "bad.cdn.lab.test", 80, "203.0.113.10", NET_DENY_DENY_LIST}, /* deny wins */
	    {1, "allowed.lab.test", 443, "127.0.0.1", NET_DENY_FORBIDDEN},
	    {1, "allowed.lab.test", 443, "169.254.169.254", NET_DENY_FORBIDDEN},
	    {1, "allowed.lab.test", 443, "10.0.0.7", NET_DENY_FORBIDDEN},
	    {1, "198.51.100.7", 22, "198.51.100.7", NET_ALLOW},		   /* by CIDR */
	    {1, "other.lab.test", 443, "198.51.100.7", NET_ALLOW},	   /* resolves into it */
	    {1, "198.51.100.66", 22, "198.51.100.66", NET_DENY_DENY_LIST}, /* deny wins */
	    {1, "192.0.2.1", 80, "192.0.2.1", NET_DENY_NOT_ALLOWED},
	    {1, "internal.lab.test", 80, "10.20.0.9", NET_ALLOW}, /* internal, allowed by name */
	    {2, "anything.example", 443, "203.0.113.10", NET_ALLOW},
	    {2, "a.evil.test", 443, "203.0.113.10", NET_DENY_DENY_LIST},
	    {2, "fine.example", 443, "203.0.113.66", NET_DENY_DENY_LIST},
	    {2, "fine.example", 443, "127.0.0.1", NET_DENY_FORBIDDEN},
	    {2, "fine.example", 443, "::ffff:169.254.169.254", NET_DENY_FORBIDDEN},
	    {2, "fine.example", 443, "10.20.0.9", NET_DENY_NOT_ALLOWED}, /* internal needs allow */
	    {2, "fine.example", 0, "203.0.113.10", NET_DENY_BAD_NAME},
	};

	(void)state;
	net_env_init(&env);
	assert_int_equal(net_env_add_internal(&env, "10.20.0.0/16", "x", &err), 0);
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		const char *j = table[i].pol == 0   ? "{\"egress\":\"none\"}"
				: table[i].pol == 1 ? al
						    : open;
		enum net_verdict v = decide(j, &env, table[i].name, table[i].port, table[i].addr);
		if (v != table[i].want)
			fail_msg("row %zu (%s:%u at %s): %s, want %s", i, table[i].name,
				 table[i].port, table[i].addr, net_verdict_name(v),
				 net_verdict_name(table[i].want));
	}
}

static void test_sniff_tls(void **state)
{
	char name[NET_NAME_MAX];
	uint8_t buf[NET_SNIFF_MAX + 8];

	(void)state;
	assert_int_equal(net_sniff(clienthello, clienthello_len, name), NET_SNIFF_NAME);
	assert_string_equal(name, "allowed.lab.test");
	assert_int_equal(net_sniff_decide(clienthello, clienthello_len, "allowed.lab.test"),
			 NET_ALLOW);
	/* the same ClientHello toward another requested name: spoofed SNI */
	assert_int_equal(net_sniff_decide(clienthello, clienthello_len, "other.lab.test"),
			 NET_DENY_NAME_MISMATCH);
	assert_int_equal(net_sniff_decide(clienthello, clienthello_len, "203.0.113.10"),
			 NET_DENY_NAME_MISMATCH);
	/* every prefix needs more bytes, never a wrong answer */
	for (size_t i = 1; i < clienthello_len; i++)
		if (net_sniff(clienthello, i, name) != NET_SNIFF_MORE)
			fail_msg("prefix of %zu bytes", i);
	assert_int_equal(net_sniff_decide(clienthello, 10, "allowed.lab.test"), -1);
	/* split into two records: still found */
	{
		size_t body = clienthello_len - 5, cut = 50;
		memcpy(buf, clienthello, 5 + cut);
		buf[3] = (uint8_t)(cut >> 8);
		buf[4] = (uint8_t)cut;
		memcpy(buf + 5 + cut, clienthello, 5);
		buf[5 + cut + 3] = (uint8_t)((body - cut) >> 8);
		buf[5 + cut + 4] = (uint8_t)(body - cut);
		memcpy(buf + 10 + cut, clienthello + 5 + cut, body - cut);
		assert_int_equal(net_sniff(buf, clienthello_len + 5, name), NET_SNIFF_NAME);
		assert_string_equal(name, "allowed.lab.test");
	}
	/* each byte flipped: whatever it reads, it stays in bounds and never
	 * names a name that is not in the bytes */
	for (size_t i = 0; i < clienthello_len; i++) {
		memcpy(buf, clienthello, clienthello_len);
		buf[i] ^= 0xff;
		if (net_sniff(buf, clienthello_len, name) == NET_SNIFF_NAME && !strstr(name, "lab"))
			fail_msg("byte %zu: %s", i, name);
	}
	/* a ClientHello without SNI: allowed toward an address, not a name */
	{
		static const uint8_t nosni[] = {0x16, 0x03, 0x01, 0x00, 0x2d, 0x01,
						0x00, 0x00, 0x29, 0x03, 0x03, [11 ... 42] = 0x11,
						0x00, 0x00, 0x02, 0x13, 0x01, 0x01,
						0x00};
		assert_int_equal(net_sniff(nosni, sizeof(nosni), name), NET_SNIFF_NO_NAME);
		assert_int_equal(net_sniff_decide(nosni, sizeof(nosni), "a.test"),
				 NET_DENY_NAME_MISSING);
		assert_int_equal(net_sniff_decide(nosni, sizeof(nosni), "203.0.113.10"), NET_ALLOW);
	}
	/* an extension list of 1 byte whose first extension's header runs past
	 * it: refused, not read on past the list (the name after it is not
	 * the hello's) */
	{
		static const uint8_t cross[] = {0x16, 0x03, 0x01, 0x00, 0x3d, 0x01,
						0x00, 0x00, 0x39, 0x03, 0x03, [11 ... 42] = 0x11,
						0x00, 0x00, 0x02, 0x13, 0x01, 0x01,
						0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
						0x0a, 0x00, 0x08, 0x00, 0x00, 0x05,
						'e',  'v',  'i',  'l',	'x'};
		assert_int_equal(net_sniff(cross, sizeof(cross), name), NET_SNIFF_BAD);
	}
	/* a record past the bound */
	memset(buf, 0, sizeof(buf));
	buf[0] = 0x16, buf[1] = 3, buf[2] = 1, buf[3] = 0xff, buf[4] = 0xff;
	assert_int_equal(net_sniff(buf, sizeof(buf), name), NET_SNIFF_BAD);
}

static enum net_sniff http(const char *s, char name[NET_NAME_MAX])
{
	return net_sniff((const uint8_t *)s, strlen(s), name);
}

static void test_sniff_http(void **state)
{
	char name[NET_NAME_MAX];

	(void)state;
	assert_int_equal(http("GET / HTTP/1.1\r\nHost: Allowed.Lab.Test:8080\r\n\r\n", name),
			 NET_SNIFF_NAME);
	assert_string_equal(name, "allowed.lab.test");
	assert_int_equal(
	    http("GET http://x/ HTTP/1.0\r\nUser-Agent: a\r\nhOsT:  x.test. \r\n\r\n", name),
	    NET_SNIFF_NAME);
	assert_string_equal(name, "x.test");
	assert_int_equal(http("\r\nPOST /a HTTP/1.1\r\nHost: [2001:DB8::1]:80\r\n\r\n", name),
			 NET_SNIFF_NAME);
	assert_string_equal(name, "2001:db8::1");
	assert_int_equal(http("GET / HTTP/1.0\r\n\r\n", name), NET_SNIFF_NO_NAME);
	assert_int_equal(http("GE", name), NET_SNIFF_MORE);
	assert_int_equal(http("GET / HTTP/1.1\r\nHost: a.test\r\n", name), NET_SNIFF_MORE);
	assert_int_equal(http("SSH-2.0-OpenSSH_9.2\r\n", name), NET_SNIFF_OTHER);
	assert_int_equal(http("get / HTTP/1.1\r\n\r\n", name), NET_SNIFF_OTHER);
	/* hostile shapes: refused, not OTHER */
	assert_int_equal(http("GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", name),
			 NET_SNIFF_BAD);
	assert_int_equal(http("GET / HTTP/1.1\r\nHost: a b\r\n\r\n", name), NET_SNIFF_BAD);
	assert_int_equal(http("GET / HTTP/1.1\r\nX: 1\r\n  Host: b.test\r\n\r\n", name),
			 NET_SNIFF_BAD);
	assert_int_equal(http("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", name), NET_SNIFF_BAD);
	assert_int_equal(http("GET / HTTP/2\r\nHost: a.test\r\n\r\n", name), NET_SNIFF_BAD);
	assert_int_equal(http("\r\nSSH-2.0\r\n", name), NET_SNIFF_BAD);
	/* decisions */
	const char *req = "GET / HTTP/1.1\r\nHost: allowed.lab.test\r\n\r\n";
	assert_int_equal(net_sniff_decide((const uint8_t *)req, strlen(req), "allowed.lab.test"),
			 NET_ALLOW);
	assert_int_equal(net_sniff_decide((const uint8_t *)req, strlen(req), "other.lab.test"),
			 NET_DENY_NAME_MISMATCH);
	req = "GET / HTTP/1.1\r\nHost: 203.0.113.10\r\n\r\n";
	assert_int_equal(net_sniff_decide((const uint8_t *)req, strlen(req), "203.0.113.10"),
			 NET_ALLOW);
	req = "GET / HTTP/1.0\r\n\r\n";
	assert_int_equal(net_sniff_decide((const uint8_t *)req, strlen(req), "a.test"),
			 NET_DENY_NAME_MISSING);
	req = "SSH-2.0-x\r\n";
	assert_int_equal(net_sniff_decide((const uint8_t *)req, strlen(req), "a.test"), NET_ALLOW);
	/* no end of headers within the bound */
	{
		char *big = malloc(NET_SNIFF_MAX + 100);
		memset(big, 'a', NET_SNIFF_MAX + 99);
		memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
		big[NET_SNIFF_MAX + 99] = '\0';
		assert_int_equal(http(big, name), NET_SNIFF_BAD);
		free(big);
	}
}

/* A resolver of the test's own: a.test -> 203.0.113.10, slow.test never
 * answers in time, loop.test -> 127.0.0.1. */
static int fake_resolve(void *ctx, const char *name, uint32_t timeout_ms, struct net_range *out,
			size_t cap, size_t *n, bool *timed_out)
{
	(void)ctx;
	*n = 0;
	*timed_out = false;
	if (strcmp(name, "slow.test") == 0) {
		*timed_out = true;
		return -1;
	}
	if (strcmp(name, "loop.test") == 0)
		return net_addr_parse("127.0.0.1", &out[(*n)++]);
	return -1;
}

static void test_connect_refusals(void **state)
{
	struct net_policy p;
	struct net_env env;
	struct net_connect_result res;
	struct sbx_error err = {0};
	int64_t t0;

	(void)state;
	net_env_init(&env);
	net_env_host_addrs(&env);
	env.resolve = fake_resolve;
	assert_int_equal(policy("{\"egress\":\"none\"}", NULL, &p, &err), 0);
	assert_int_equal(net_connect(&p, &env, "a.test", 443, 1000, &res), -1);
	assert_int_equal(res.verdict, NET_DENY_EGRESS_NONE);
	assert_int_equal(
	    policy("{\"egress\":\"allow_list\",\"allow\":[\"*.test\"]}", NULL, &p, &err), 0);
	assert_int_equal(net_connect(&p, &env, "b.example", 443, 1000, &res), -1);
	assert_int_equal(res.verdict, NET_DENY_NOT_ALLOWED);
	assert_int_equal(net_connect(&p, &env, "bad name", 443, 1000, &res), -1);
	assert_int_equal(res.verdict, NET_DENY_BAD_NAME);
	assert_int_equal(net_connect(&p, &env, "loop.test", 443, 1000, &res), -1);
	assert_int_equal(res.verdict, NET_DENY_FORBIDDEN);
	assert_int_equal(net_connect(&p, &env, "slow.test", 443, 1000, &res), -1);
	assert_int_equal(res.verdict, NET_DENY_TIMEOUT);
	assert_int_equal(net_connect(&p, &env, "nx.test", 443, 1000, &res), -1);
	assert_int_equal(res.verdict, NET_DENY_RESOLVE);
	/* the system resolver: localhost is loopback, refused after resolving */
	env.resolve = NULL;
	assert_int_equal(
	    policy("{\"egress\":\"allow_list\",\"allow\":[\"localhost\"]}", NULL, &p, &err), 0);
	t0 = sbx_mono_ms();
	assert_int_equal(net_connect(&p, &env, "localhost", 8080, 2000, &res), -1);
	assert_int_equal(res.verdict, NET_DENY_FORBIDDEN);
	printf("# localhost refused after %lld ms (resolve %d ms)\n",
	       (long long)(sbx_mono_ms() - t0), res.resolve_ms);
}

static void test_apt_hosts(void **state)
{
	char dir[] = "/tmp/sbx-apt-XXXXXX", path[300];
	char hosts[8][NET_NAME_MAX];
	size_t n;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/debian.sources", dir);
	f = fopen(path, "w");
	fputs("Types: deb\n# http://snapshot.debian.org/x\nURIs: http://Deb.Debian.org/debian "
	      "https://mirror.example.org:8443/d\nSuites: bookworm\n\nTypes: deb\n"
	      "URIs: http://deb.debian.org/debian-security\n",
	      f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/extra.list", dir);
	f = fopen(path, "w");
	fputs("# deb http://commented.example/ x\ndeb [arch=amd64 signed-by=/k] "
	      "https://user:pw@pkgs.example.net/apt stable main\ndeb file:/srv/repo ./\n",
	      f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/sources.list", dir);
	f = fopen(path, "w");
	fputs("deb-src http://src.example.com/debian bookworm main\n", f);
	fclose(f);
	n = net_apt_hosts(dir, path, hosts, 8);
	assert_int_equal(n, 4);
	/* readdir order is not fixed: look each up */
	const char *want[] = {"deb.debian.org", "mirror.example.org", "pkgs.example.net",
			      "src.example.com"};
	for (size_t i = 0; i < 4; i++) {
		bool found = false;
		for (size_t j = 0; j < n; j++)
			found |= strcmp(hosts[j], want[i]) == 0;
		if (!found)
			fail_msg("%s not found", want[i]);
	}
	assert_int_equal(net_apt_hosts("/nonexistent", NULL, hosts, 8), 0);
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	assert_int_equal(system(path), 0);
}

/* The config's "network" object (api/config.c) and the default policy
 * built from it (sandbox/network.c): etc/dev.json's allow list plus the
 * apt sources' hosts; bad keys named. */
static void test_config_default(void **state)
{
	struct sandbox_config *cfg = malloc(sizeof(*cfg));
	struct sbx_error err = {0};
	char dir[] = "/tmp/sbx-apt-XXXXXX", path[300], out[NET_POLICY_JSON_MAX];
	size_t len = 0;
	char *dev = sbx_read_file("etc/dev.json", 65536, &len);
	FILE *f;

	(void)state;
	assert_non_null(dev);
	sandbox_config_defaults(cfg);
	assert_int_equal(sandbox_network_default_build(cfg, NULL, NULL, out, &err), 0);
	assert_string_equal(out, NET_POLICY_NONE_JSON); /* production's default */
	assert_int_equal(api_config_parse(dev, len, cfg, &err), 0);
	free(dev);
	assert_true(cfg->net_default_apt_sources);
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/debian.sources", dir);
	f = fopen(path, "w");
	fputs("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n", f);
	fclose(f);
	assert_int_equal(sandbox_network_default_build(cfg, dir, NULL, out, &err), 0);
	assert_string_equal(out, "{\"egress\":\"allow_list\",\"allow\":[\"registry.npmjs.org\","
				 "\"deb.debian.org\"],\"deny\":[]}");
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	assert_int_equal(system(path), 0);

	static const struct {
		const char *json, *param;
	} bad[] = {
	    {"{\"network\": {\"allow_open\": 1}}", "network.allow_open"},
	    {"{\"network\": {\"surprise\": 1}}", "network"},
	    {"{\"network\": {\"internal_ranges\": [\"10.0.0.1/8\"]}}", "network.internal_ranges"},
	    {"{\"network\": {\"default_policy\": {\"egress\": \"allow_list\"}}}",
	     "network.default_policy.allow"},
	    {"{\"network\": []}", "network"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sandbox_config_defaults(cfg);
		sbx_error_clear(&err);
		if (api_config_parse(bad[i].json, strlen(bad[i].json), cfg, &err) == 0)
			fail_msg("accepted %s", bad[i].json);
		assert_string_equal(err.param, bad[i].param);
	}
	/* "open" as the default needs allow_open */
	sandbox_config_defaults(cfg);
	const char *open = "{\"network\": {\"default_policy\": {\"egress\": \"open\"}}}";
	assert_int_equal(api_config_parse(open, strlen(open), cfg, &err), 0);
	assert_int_equal(sandbox_network_default_build(cfg, NULL, NULL, out, &err), -1);
	assert_string_equal(err.param, "network.default_policy");
	free(cfg);
}

/* network.nameservers entries: the forms the config takes, written back
 * with their port; anything else refused, names included. */
static void test_nameserver_parse(void **state)
{
	static const char *const good[][2] = {
	    {"198.18.0.53", "198.18.0.53:53"},
	    {"198.18.0.53:5353", "198.18.0.53:5353"},
	    {"127.0.0.53", "127.0.0.53:53"}, /* a local caching resolver */
	    {"2001:db8::53", "[2001:db8::53]:53"},
	    {"[2001:db8::53]", "[2001:db8::53]:53"},
	    {"[2001:db8::53]:5353", "[2001:db8::53]:5353"},
	    {"[::1]:65535", "[::1]:65535"},
	    /* a bare IPv6 address never carries a port: this is an address */
	    {"2001:db8::53:5353", "[2001:db8::53:5353]:53"},
	};
	static const char *const bad[] = {
	    "",
	    "dns.example",
	    "dns.example:53",
	    "198.18.0.53:",
	    "198.18.0.53:0",
	    "198.18.0.53:65536",
	    "198.18.0.53:53x",
	    "198.18.0.53:+53",
	    "198.18.0.53:123456",
	    "198.18.0.53/32",
	    " 198.18.0.53",
	    "198.18.0.53 ",
	    "198.18.0",
	    "[198.18.0.53]:53",
	    "[2001:db8::53",
	    "[2001:db8::53]5353",
	    "[2001:db8::53]:",
	    "[]:53",
	    "0.0.0.0",
	    "::",
	    "[::]:53",
	    "fe80::1%eth0",
	};
	struct net_nameserver ns;
	char text[80];

	(void)state;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(good); i++) {
		if (net_nameserver_parse(good[i][0], &ns) < 0)
			fail_msg("refused '%s'", good[i][0]);
		net_nameserver_text(&ns, text, sizeof(text));
		assert_string_equal(text, good[i][1]);
	}
	assert_int_equal(net_nameserver_parse("[2001:db8::53]:5353", &ns), 0);
	assert_int_equal(ns.addr.family, 6);
	assert_int_equal(ns.port, 5353);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++)
		if (net_nameserver_parse(bad[i], &ns) == 0)
			fail_msg("accepted '%s'", bad[i]);
}

/* The env takes at most NET_NAMESERVERS_MAX, each checked, errors naming
 * the param; the config key the same, read into the config's strings. */
static void test_nameservers_config(void **state)
{
	struct sandbox_config *cfg = malloc(sizeof(*cfg));
	struct sbx_error err = {0};
	struct net_env env;
	const char *ok = "{\"network\": {\"nameservers\": [\"198.18.0.53\", "
			 "\"[2001:db8::53]:5353\", \"127.0.0.53:53\"]}}";

	(void)state;
	net_env_init(&env);
	assert_int_equal(env.n_nameservers, 0); /* the system resolver */
	assert_int_equal(net_env_add_nameserver(&env, "dns.example", "network.nameservers", &err),
			 -1);
	assert_string_equal(err.param, "network.nameservers");
	assert_non_null(strstr(err.message, "'dns.example'"));
	assert_int_equal(env.n_nameservers, 0);
	assert_int_equal(net_env_add_nameserver(&env, "198.18.0.53", "x", &err), 0);
	assert_int_equal(net_env_add_nameserver(&env, "[2001:db8::53]:5353", "x", &err), 0);
	assert_int_equal(net_env_add_nameserver(&env, "198.18.0.54:53", "x", &err), 0);
	assert_int_equal(env.n_nameservers, NET_NAMESERVERS_MAX);
	assert_int_equal(env.nameservers[1].port, 5353);
	sbx_error_clear(&err);
	assert_int_equal(net_env_add_nameserver(&env, "198.18.0.55", "network.nameservers", &err),
			 -1);
	assert_string_equal(err.param, "network.nameservers");
	assert_non_null(strstr(err.message, "at most 3"));

	sandbox_config_defaults(cfg);
	assert_int_equal(cfg->n_net_nameservers, 0);
	assert_int_equal(api_config_parse(ok, strlen(ok), cfg, &err), 0);
	assert_int_equal(cfg->n_net_nameservers, 3);
	assert_string_equal(cfg->net_nameservers[0], "198.18.0.53");
	assert_string_equal(cfg->net_nameservers[1], "[2001:db8::53]:5353");
	assert_string_equal(cfg->net_nameservers[2], "127.0.0.53:53");

	static const struct {
		const char *json, *says;
	} bad[] = {
	    {"{\"network\": {\"nameservers\": \"198.18.0.53\"}}", "a list of addresses"},
	    {"{\"network\": {\"nameservers\": [53]}}", "nameservers[0]"},
	    {"{\"network\": {\"nameservers\": [\"198.18.0.53\", \"dns.example\"]}}",
	     "nameservers[1]"},
	    {"{\"network\": {\"nameservers\": [\"198.18.0.53:99999\"]}}", "nameservers[0]"},
	    {"{\"network\": {\"nameservers\": [\"1.1.1.1\", \"1.0.0.1\", \"9.9.9.9\", "
	     "\"8.8.8.8\"]}}",
	     "at most 3"},
	};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		sandbox_config_defaults(cfg);
		sbx_error_clear(&err);
		if (api_config_parse(bad[i].json, strlen(bad[i].json), cfg, &err) == 0)
			fail_msg("accepted %s", bad[i].json);
		assert_string_equal(err.param, "network.nameservers");
		if (!strstr(err.message, bad[i].says))
			fail_msg("%s: '%s' does not say '%s'", bad[i].json, err.message,
				 bad[i].says);
		assert_int_equal(cfg->n_net_nameservers, 0);
	}
	free(cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rules),
	    cmocka_unit_test(test_policy_json),
	    cmocka_unit_test(test_match),
	    cmocka_unit_test(test_forbidden),
	    cmocka_unit_test(test_decide),
	    cmocka_unit_test(test_sniff_tls),
	    cmocka_unit_test(test_sniff_http),
	    cmocka_unit_test(test_connect_refusals),
	    cmocka_unit_test(test_apt_hosts),
	    cmocka_unit_test(test_config_default),
	    cmocka_unit_test(test_nameserver_parse),
	    cmocka_unit_test(test_nameservers_config),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
