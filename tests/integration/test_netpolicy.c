/* Egress policies (docs/network.md), the daemon's half, in two groups.
 *
 * The connector (network/net_connect) against the tests' own "internet"
 * (scripts/netlab.sh: a network namespace on a veth pair with a DNS
 * server and web servers; traffic only to this machine's lab), its names
 * resolved by the lab's DNS: the allowed name connects and its server
 * answers the request; another name on the same address is refused
 * before any connect; a request whose Host names another server is
 * refused on its first bytes, and so is a real ClientHello (openssl
 * s_client) naming the other server, while the honest one is relayed and
 * answered by the lab's TLS server; names resolving to 127.0.0.1, to the
 * metadata address or to this machine's own address are refused even
 * under "open"; a name the DNS does not know fails at once; a connect
 * that gets no answer ends by its deadline (figures printed, no timed
 * assertion). The same names through network.nameservers (libresolv,
 * net_resolve_nameservers) pointed at the lab's DNS, no dig: the allowed
 * name resolves and connects, an unknown name in the zone (NXDOMAIN) and
 * a name outside it (REFUSED) fail at once, a nameserver that does not
 * answer (an unused address of the lab's /24) ends by the deadline.
 * Skips where network namespaces cannot be made.
 *
 * The API on a real daemon and a real guest (tiny image), its config
 * naming nameservers: /v1/limits publishes the network limits (not the
 * nameservers); a create with a policy shows it
 * (canonical), a create without one gets the configured default; bad
 * policies are 400 naming the param, "open" is refused where the config
 * forbids it, a one-shot execution with a network is 400; the policy
 * changes with POST /v1/sandboxes/{id}/network, survives a daemon
 * restart, and cannot change once the sandbox ended (410).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "network/network.h"

/* ------------------------------------------------------------ connector */

static char nl_dir[256], nl_ns[16], nl_net[32];
static int nl_skip;

/* The lab's DNS as the resolver: `dig` with a 1 s bound, one try. */
static int lab_resolve(void *ctx, const char *name, uint32_t timeout_ms, struct net_range *out,
		       size_t cap, size_t *n, bool *timed_out)
{
	char cmd[512], ans[1024];

	(void)ctx;
	(void)timeout_ms;
	*n = 0;
	*timed_out = false;
	snprintf(cmd, sizeof(cmd), "dig +short +time=1 +tries=1 @%s.53 '%s' A", nl_net, name);
	if (cmd_out(cmd, ans, sizeof(ans)) != 0) {
		*timed_out = true;
		return -1;
	}
	for (char *l = strtok(ans, "\n"); l && *n < cap; l = strtok(NULL, "\n"))
		if (net_addr_parse(l, &out[*n]) == 0)
			(*n)++;
	return *n ? 0 : -1;
}

static int lab_setup(void **state)
{
	char cmd[1024];
	int id = (int)(getpid() % 10000);

	(void)state;
	if (!netns_usable("test_netpolicy", "openssl nginx dnsmasq dig curl")) {
		nl_skip = 1;
		return 0;
	}
	snprintf(nl_ns, sizeof(nl_ns), "sbxnp%d", id);
	snprintf(nl_net, sizeof(nl_net), "198.19.%d", 1 + id % 250);
	setenv("SBX_NL_NS", nl_ns, 1);
	setenv("SBX_NL_VETH", nl_ns, 1);
	setenv("SBX_NL_NET", nl_net, 1);
	unsetenv("SBX_NL_ZONE");
	snprintf(nl_dir, sizeof(nl_dir), "/var/lib/sandboxd-test/netpolicy-%d", (int)getpid());
	snprintf(cmd, sizeof(cmd),
		 "mkdir -p -m 0755 /var/lib/sandboxd-test && scripts/netlab.sh up %s >/dev/null",
		 nl_dir);
	if (run_cmd(cmd) != 0) {
		fprintf(stderr, "test_netpolicy: scripts/netlab.sh up failed (logs in %s/log)\n",
			nl_dir);
		snprintf(cmd, sizeof(cmd), "scripts/netlab.sh down %s", nl_dir);
		run_cmd(cmd);
		return -1;
	}
	return 0;
}

static int lab_teardown(void **state)
{
	char cmd[1024];

	(void)state;
	if (nl_skip || !nl_dir[0])
		return 0;
	snprintf(cmd, sizeof(cmd), "scripts/netlab.sh down %s", nl_dir);
	return run_cmd(cmd) == 0 ? 0 : -1;
}

static void env_lab(struct net_env *env)
{
	net_env_init(env);
	assert_true(net_env_host_addrs(env) > 0); /* this machine's side: NET.1 */
	env->resolve = lab_resolve;
}

static void policy_of(const char *json, struct net_policy *p)
{
	struct sbx_error err = {0};

	if (net_policy_parse(json, strlen(json), "network", NULL, p, &err) < 0)
		fail_msg("%s: %s", json, err.message);
}

/* GET / as `host` over fd, the body the lab's nginx answers. */
static void get(int fd, const char *host, char *out, size_t n)
{
	char req[256];
	size_t got = 0;
	ssize_t r;
	int len = snprintf(req, sizeof(req),
			   "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host);

	assert_int_equal(write(fd, req, (size_t)len), len);
	while (got + 1 < n && (r = read(fd, out + got, n - 1 - got)) > 0)
		got += (size_t)r;
	out[got] = '\0';
}

static void allowed_name_connects(void **state)
{
	struct net_policy p;
	struct net_env env;
	struct net_connect_result res;
	char body[4096], want[64];
	const char *req = "GET / HTTP/1.1\r\nHost: allowed.lab.test\r\n\r\n";
	int fd;

	(void)state;
	if (nl_skip)
		skip();
	env_lab(&env);
	policy_of("{\"egress\":\"allow_list\",\"allow\":[\"allowed.lab.test:80\"]}", &p);
	fd = net_connect(&p, &env, "Allowed.Lab.Test.", 80, 3000, &res);
	if (fd < 0)
		fail_msg("refused: %s", net_verdict_name(res.verdict));
	snprintf(want, sizeof(want), "%s.10", nl_net);
	net_addr_text(&res.addr, body, sizeof(body));
	assert_string_equal(body, want);
	printf("# allowed.lab.test:80 connected: resolve %d ms, connect %d ms\n", res.resolve_ms,
	       res.connect_ms);
	/* the first bytes agree with the name asked for */
	assert_int_equal(net_sniff_decide((const uint8_t *)req, strlen(req), "allowed.lab.test"),
			 NET_ALLOW);
	get(fd, "allowed.lab.test", body, sizeof(body));
	close(fd);
	assert_non_null(strstr(body, "200 OK"));
	assert_non_null(strstr(body, "host=allowed.lab.test"));
	/* the port is part of the rule */
	assert_int_equal(net_connect(&p, &env, "allowed.lab.test", 443, 3000, &res), -1);
	assert_int_equal(res.verdict, NET_DENY_NOT_ALLOWED);
}

static void other_name_same_address_refused(void **state)
{
	struct net_policy p;
	struct net_env env;
	struct net_connect_result res;
	const char *spoof = "GET / HTTP/1.1\r\nHost: other.lab.test\r\n\r\n";
	int fd;

	(void)state;
	if (nl_skip)
		skip();
	env_lab(&env);
	policy_of("{\"egress\":\"allow_list\",\"allow\":[\"allowed.lab.test\"]}", &p);
	/* other.lab.test resolves to the very same address */
	assert_int_equal(net_connect(&p, &env, "other.lab.test", 80, 3000, &res), -1);
	assert_int_equal(res.verdict, NET_DENY_NOT_ALLOWED);
	/* and through the allowed name, a request for the other one is
	 * refused on its first bytes (never forwarded) */
	fd = net_connect(&p, &env, "allowed.lab.test", 80, 3000, &res);
	assert_true(fd >= 0);
	assert_int_equal(
	    net_sniff_decide((const uint8_t *)spoof, strlen(spoof), "allowed.lab.test"),
	    NET_DENY_NAME_MISMATCH);
	close(fd);
	/* a deny rule wins over the wildcard that allows it */
	policy_of("{\"egress\":\"allow_list\",\"allow\":[\"*.lab.test\"],"
		  "\"deny\":[\"other.lab.test\"]}",
		  &p);
	assert_int_equal(net_connect(&p, &env, "other.lab.test", 80, 3000, &res), -1);
	assert_int_equal(res.verdict, NET_DENY_DENY_LIST);
}

/* A real ClientHello from `openssl s_client -servername sni`, caught on a
 * loopback listener of this test: its bytes into buf, their count. */
static size_t client_hello(const char *sni, uint8_t *buf, size_t cap)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), c;
	char cmd[256], name[NET_NAME_MAX];
	size_t got = 0;
	FILE *p;

	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(l, 1), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&sa, &sl), 0);
	snprintf(cmd, sizeof(cmd),
		 "sleep 3 | timeout 5 openssl s_client -connect 127.0.0.1:%d -servername %s "
		 ">/dev/null 2>&1",
		 ntohs(sa.sin_port), sni);
	p = popen(cmd, "r");
	assert_non_null(p);
	c = accept(l, NULL, NULL);
	assert_true(c >= 0);
	while (got < cap && net_sniff(buf, got, name) == NET_SNIFF_MORE) {
		ssize_t r = read(c, buf + got, cap - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(c);
	close(l);
	pclose(p);
	return got;
}

static void real_tls_sni_checked(void **state)
{
	struct net_policy p;
	struct net_env env;
	struct net_connect_result res;
	uint8_t hello[NET_SNIFF_MAX], reply[16];
	size_t n;
	ssize_t r;
	int fd;

	(void)state;
	if (nl_skip)
		skip();
	env_lab(&env);
	policy_of("{\"egress\":\"allow_list\",\"allow\":[\"allowed.lab.test:443\"]}", &p);
	/* toward the allowed name, a ClientHello naming the other server on
	 * the same address is refused on its first bytes */
	n = client_hello("other.lab.test", hello, sizeof(hello));
	assert_true(n > 0);
	assert_int_equal(net_sniff_decide(hello, n, "allowed.lab.test"), NET_DENY_NAME_MISMATCH);
	/* the honest one goes through: relayed to the lab's nginx, which
	 * answers with a TLS handshake record (its ServerHello) */
	n = client_hello("allowed.lab.test", hello, sizeof(hello));
	assert_int_equal(net_sniff_decide(hello, n, "allowed.lab.test"), NET_ALLOW);
	fd = net_connect(&p, &env, "allowed.lab.test", 443, 3000, &res);
	if (fd < 0)
		fail_msg("refused: %s", net_verdict_name(res.verdict));
	assert_int_equal(write(fd, hello, n), (ssize_t)n);
	r = read(fd, reply, sizeof(reply));
	close(fd);
	assert_true(r >= 5);
	assert_int_equal(reply[0], 0x16); /* handshake */
	assert_int_equal(reply[1], 0x03);
}

static void forbidden_answers_refused(void **state)
{
	static const char *const names[] = {"loopback.lab.test", "metadata.lab.test",
					    "host.lab.test"};
	static const char *const policies[] = {
	    "{\"egress\":\"allow_list\",\"allow\":[\"*.lab.test\"]}",
	    "{\"egress\":\"open\"}",
	};
	struct net_policy p;
	struct net_env env;
	struct net_connect_result res;
	char a[64];

	(void)state;
	if (nl_skip)
		skip();
	env_lab(&env);
	for (size_t i = 0; i < SBX_ARRAY_SIZE(policies); i++) {
		policy_of(policies[i], &p);
		for (size_t j = 0; j < SBX_ARRAY_SIZE(names); j++) {
			assert_int_equal(net_connect(&p, &env, names[j], 80, 3000, &res), -1);
			net_addr_text(&res.addr, a, sizeof(a));
			if (res.verdict != NET_DENY_FORBIDDEN)
				fail_msg("%s (%s) under %s: %s", names[j], a, policies[i],
					 net_verdict_name(res.verdict));
		}
		/* the host's address as a literal too */
		snprintf(a, sizeof(a), "%s.1", nl_net);
		assert_int_equal(net_connect(&p, &env, a, 80, 3000, &res), -1);
		assert_int_equal(res.verdict, NET_DENY_FORBIDDEN);
	}
}

static void unknown_name_and_deadline(void **state)
{
	struct net_policy p;
	struct net_env env;
	struct net_connect_result res;
	char lit[64], json[256];
	int64_t t0;

	(void)state;
	if (nl_skip)
		skip();
	env_lab(&env);
	policy_of("{\"egress\":\"open\"}", &p);
	t0 = sbx_mono_ms();
	assert_int_equal(net_connect(&p, &env, "nope.lab.test", 80, 3000, &res), -1);
	assert_int_equal(res.verdict, NET_DENY_RESOLVE);
	printf("# NXDOMAIN refused after %lld ms\n", (long long)(sbx_mono_ms() - t0));
	/* an address of the lab's /24 that nobody holds: no answer */
	snprintf(lit, sizeof(lit), "%s.99", nl_net);
	snprintf(json, sizeof(json), "{\"egress\":\"allow_list\",\"allow\":[\"%s/32\"]}", lit);
	policy_of(json, &p);
	t0 = sbx_mono_ms();
	assert_int_equal(net_connect(&p, &env, lit, 80, 700, &res), -1);
	assert_true(res.verdict == NET_DENY_TIMEOUT || res.verdict == NET_DENY_CONNECT);
	printf("# connect to %s with a 700 ms deadline ended after %lld ms (%s)\n", lit,
	       (long long)(sbx_mono_ms() - t0), net_verdict_name(res.verdict));
}

/* An env whose resolver is network.nameservers = [ns] (no dig). */
static void env_nameserver(struct net_env *env, const char *ns)
{
	struct sbx_error err = {0};

	net_env_init(env);
	assert_true(net_env_host_addrs(env) > 0);
	if (net_env_add_nameserver(env, ns, "network.nameservers", &err) < 0)
		fail_msg("%s: %s", ns, err.message);
}

static void nameservers_resolve(void **state)
{
	struct net_policy p;
	struct net_env env;
	struct net_connect_result res;
	struct net_range a[16];
	char ns[64], want[64], got[64], body[4096];
	size_t n = 0;
	bool timed_out;
	int64_t t0;
	int fd;

	(void)state;
	if (nl_skip)
		skip();
	snprintf(ns, sizeof(ns), "%s.53", nl_net); /* port 53 by default */
	env_nameserver(&env, ns);
	snprintf(want, sizeof(want), "%s.10", nl_net);
	t0 = sbx_mono_ms();
	assert_int_equal(net_resolve_nameservers(&env, "allowed.lab.test", 3000, a,
						 SBX_ARRAY_SIZE(a), &n, &timed_out),
			 0);
	assert_int_equal(n, 1); /* one A, no AAAA in the lab */
	net_addr_text(&a[0], got, sizeof(got));
	assert_string_equal(got, want);
	printf("# allowed.lab.test via %s: %s in %lld ms\n", ns, got,
	       (long long)(sbx_mono_ms() - t0));
	/* net_connect asks the env's nameservers, and the server answers */
	policy_of("{\"egress\":\"allow_list\",\"allow\":[\"allowed.lab.test:80\"]}", &p);
	fd = net_connect(&p, &env, "allowed.lab.test", 80, 3000, &res);
	if (fd < 0)
		fail_msg("refused: %s", net_verdict_name(res.verdict));
	net_addr_text(&res.addr, got, sizeof(got));
	assert_string_equal(got, want);
	get(fd, "allowed.lab.test", body, sizeof(body));
	close(fd);
	assert_non_null(strstr(body, "host=allowed.lab.test"));
	printf("# connected: resolve %d ms, connect %d ms\n", res.resolve_ms, res.connect_ms);
	/* NXDOMAIN in the zone, REFUSED outside it: at once, not timed out */
	static const char *const refused[] = {"nope.lab.test", "example.com"};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(refused); i++) {
		t0 = sbx_mono_ms();
		assert_int_equal(net_resolve_nameservers(&env, refused[i], 3000, a,
							 SBX_ARRAY_SIZE(a), &n, &timed_out),
				 -1);
		assert_false(timed_out);
		assert_int_equal(n, 0);
		printf("# %s failed after %lld ms\n", refused[i], (long long)(sbx_mono_ms() - t0));
	}
	policy_of("{\"egress\":\"open\"}", &p);
	assert_int_equal(net_connect(&p, &env, "nope.lab.test", 80, 3000, &res), -1);
	assert_int_equal(res.verdict, NET_DENY_RESOLVE);
}

/* A nameserver that does not answer: an address of the lab's /24 that
 * nobody holds (not .99: unknown_name_and_deadline left its neighbour
 * entry failing). The lookup ends by the deadline: timed out while the
 * neighbour is unresolved, or at once (resolve_failed) once the kernel
 * has given up on it and says the host is unreachable. */
static void nameservers_silent(void **state)
{
	struct net_policy p;
	struct net_env env;
	struct net_connect_result res;
	struct net_range a[16];
	char ns[64];
	size_t n = 0;
	bool timed_out = false;
	int64_t t0;
	int rc;

	(void)state;
	if (nl_skip)
		skip();
	snprintf(ns, sizeof(ns), "%s.98:53", nl_net);
	env_nameserver(&env, ns);
	t0 = sbx_mono_ms();
	rc = net_resolve_nameservers(&env, "allowed.lab.test", 700, a, SBX_ARRAY_SIZE(a), &n,
				     &timed_out);
	assert_int_equal(rc, -1);
	assert_int_equal(n, 0);
	printf("# nameserver %s, deadline 700 ms: ended after %lld ms (%s)\n", ns,
	       (long long)(sbx_mono_ms() - t0), timed_out ? "timed out" : "failed");
	policy_of("{\"egress\":\"open\"}", &p);
	t0 = sbx_mono_ms();
	assert_int_equal(net_connect(&p, &env, "allowed.lab.test", 80, 1500, &res), -1);
	assert_true(res.verdict == NET_DENY_TIMEOUT || res.verdict == NET_DENY_RESOLVE);
	printf("# net_connect through it, deadline 1500 ms: %s after %lld ms (resolve %d ms)\n",
	       net_verdict_name(res.verdict), (long long)(sbx_mono_ms() - t0), res.resolve_ms);
}

/* ------------------------------------------------------------------ API */

static struct daemon d;

static int api_setup(void **state)
{
	(void)state;
	daemon_config(&d, "\"network\": {\"max_rules\": 4, \"price_micro_per_gb\": 50000,"
			  " \"nameservers\": [\"127.0.0.53\", \"[2001:db8::53]:5353\"],"
			  " \"default_policy\": {\"egress\": \"allow_list\","
			  " \"allow\": [\"registry.npmjs.org:443\"]}}");
	return daemon_up(&d);
}

static int api_teardown(void **state)
{
	(void)state;
	return daemon_down(&d);
}

static json_object *jget(json_object *o, const char *k)
{
	json_object *v = NULL;

	json_object_object_get_ex(o, k, &v);
	return v;
}

static const char *network_of(json_object *sandbox)
{
	return json_object_to_json_string_ext(jget(sandbox, "network"), JSON_C_TO_STRING_PLAIN);
}

static void bad(const char *method, const char *path, const char *body, const char *param)
{
	struct http_reply r;

	assert_int_equal(http_request(&d, method, path, d.key, NULL, body, 0, &r), 0);
	if (r.status != 400 || strcmp(jerr(r.json, "param"), param) != 0)
		fail_msg("%s %s %s: %d %s (want 400 %s)", method, path, body, r.status, r.body,
			 param);
	http_reply_free(&r);
}

/* the sandboxes of the API group: one created with a policy, one without */
static char id[64], id2[64];

static void api_create_with_policy(void **state)
{
	struct http_reply r;
	char path[128];
	const char *want = "{\"egress\":\"allow_list\",\"allow\":[\"allowed.lab.test:443\","
			   "\"203.0.113.0\\/24\"],\"deny\":[\"*.evil.test\"]}";

	(void)state;
	assert_int_equal(http_request(&d, "GET", "/v1/limits", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_false(jbool(jget(r.json, "network"), "allow_open"));
	assert_int_equal(jint(jget(r.json, "network"), "max_rules"), 4);
	assert_string_equal(jstr(jget(r.json, "network"), "usd_per_gb"), "0.050000");
	assert_null(jget(jget(r.json, "network"), "nameservers")); /* the operator's only */
	http_reply_free(&r);
	assert_int_equal(http_request(&d, "GET", "/v1/usage", d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_int_equal(jint(jget(r.json, "network"), "bytes_in"), 0);
	assert_int_equal(jint(jget(r.json, "network"), "bytes_out"), 0);
	http_reply_free(&r);

	/* refused before any guest boots */
	bad("POST", "/v1/sandboxes", "{\"network\": {\"egress\": \"open\"}}", "network.egress");
	bad("POST", "/v1/sandboxes",
	    "{\"network\": {\"egress\": \"allow_list\", \"allow\": [\"a.test\", \"b..test\"]}}",
	    "network.allow[1]");
	bad("POST", "/v1/sandboxes",
	    "{\"network\": {\"egress\": \"allow_list\", \"allow\": [\"a\", \"b\", \"c\", \"d\", "
	    "\"e\"]}}",
	    "network.allow");
	bad("POST", "/v1/sandboxes", "{\"network\": {\"egress\": \"none\", \"deny\": [\"a\"]}}",
	    "network.egress");
	bad("POST", "/v1/sandbox/executions",
	    "{\"runtime\": \"python\", \"timeout_seconds\": 5, \"code\": \"print(1)\", "
	    "\"network\": {\"egress\": \"none\"}}",
	    "network");

	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", d.key, NULL,
				      "{\"timeout_minutes\": 10, \"network\": {\"egress\": "
				      "\"allow_list\", \"allow\": [\"Allowed.Lab.Test.:443\", "
				      "\"203.0.113.0/24\"], \"deny\": [\"*.EVIL.test\"]}}",
				      0, &r),
			 0);
	assert_int_equal(r.status, 201);
	snprintf(id, sizeof(id), "%s", jstr(r.json, "id"));
	assert_string_equal(network_of(r.json), want);
	assert_int_equal(jint(r.json, "net_bytes_in"), 0);
	assert_int_equal(jint(r.json, "net_bytes_out"), 0);
	http_reply_free(&r);

	/* without a network: the configured default */
	assert_int_equal(daemon_create_sandbox(&d, id2, sizeof(id2)), 0);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id2);
	assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
	assert_string_equal(network_of(r.json), "{\"egress\":\"allow_list\",\"allow\":["
						"\"registry.npmjs.org:443\"],\"deny\":[]}");
	http_reply_free(&r);
}

static void api_change_restart_end(void **state)
{
	struct http_reply r;
	char path[128];

	(void)state;
	if (!id[0] || !id2[0])
		skip(); /* api_create_with_policy failed */
	/* change it */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/network", id);
	bad("POST", path, "{\"egress\": \"allow_list\", \"allow\": [\"10.0.0.1/8\"]}",
	    "network.allow[0]");
	bad("POST", path, "{\"egress\": \"open\"}", "network.egress");
	bad("POST", path, "", "network.egress");
	assert_int_equal(
	    http_request(&d, "POST", path, d.key, NULL,
			 "{\"egress\": \"allow_list\", \"allow\": [\"*.cdn.lab.test\"]}", 0, &r),
	    0);
	assert_int_equal(r.status, 200);
	assert_string_equal(network_of(r.json), "{\"egress\":\"allow_list\",\"allow\":["
						"\"*.cdn.lab.test\"],\"deny\":[]}");
	http_reply_free(&r);
	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes/sbx_nope/network", d.key, NULL,
				      "{\"egress\": \"none\"}", 0, &r),
			 0);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);

	/* the CLI: show, set, a refused rule named (exit 1) */
	{
		char cmd[512], out[1024];

		snprintf(cmd, sizeof(cmd), "bin/sbx --url http://127.0.0.1:%d --key %s network %s",
			 d.port, d.key, id);
		assert_int_equal(cmd_out(cmd, out, sizeof(out)), 0);
		assert_non_null(strstr(out, "egress allow_list allow=*.cdn.lab.test"));
		snprintf(cmd, sizeof(cmd),
			 "bin/sbx --url http://127.0.0.1:%d --key %s network %s --allow a.test "
			 "--allow 'b..test' 2>&1",
			 d.port, d.key, id);
		assert_int_equal(cmd_out(cmd, out, sizeof(out)), 1);
		assert_non_null(strstr(out, "network.allow[1]"));
		snprintf(cmd, sizeof(cmd),
			 "bin/sbx --url http://127.0.0.1:%d --key %s network %s --allow "
			 "'*.cdn.lab.test' --deny bad.cdn.lab.test",
			 d.port, d.key, id);
		assert_int_equal(cmd_out(cmd, out, sizeof(out)), 0);
		assert_non_null(strstr(out, "allow=*.cdn.lab.test deny=bad.cdn.lab.test"));
		snprintf(cmd, sizeof(cmd),
			 "bin/sbx --url http://127.0.0.1:%d --key %s network %s --allow "
			 "'*.cdn.lab.test'",
			 d.port, d.key, id);
		assert_int_equal(cmd_out(cmd, out, sizeof(out)), 0);
	}

	/* a restart keeps every policy */
	assert_int_equal(daemon_stop(&d), 0);
	assert_int_equal(daemon_start(&d), 0);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(network_of(r.json), "{\"egress\":\"allow_list\",\"allow\":["
						"\"*.cdn.lab.test\"],\"deny\":[]}");
	http_reply_free(&r);

	/* once ended, it cannot change */
	assert_int_equal(http_request(&d, "DELETE", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(network_of(r.json), "{\"egress\":\"allow_list\",\"allow\":["
						"\"*.cdn.lab.test\"],\"deny\":[]}");
	http_reply_free(&r);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/network", id);
	assert_int_equal(
	    http_request(&d, "POST", path, d.key, NULL, "{\"egress\": \"none\"}", 0, &r), 0);
	assert_int_equal(r.status, 410);
	http_reply_free(&r);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id2);
	assert_int_equal(http_request(&d, "DELETE", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
}

int main(void)
{
	const struct CMUnitTest lab[] = {
	    cmocka_unit_test(allowed_name_connects),
	    cmocka_unit_test(other_name_same_address_refused),
	    cmocka_unit_test(real_tls_sni_checked),
	    cmocka_unit_test(forbidden_answers_refused),
	    cmocka_unit_test(unknown_name_and_deadline),
	    cmocka_unit_test(nameservers_resolve),
	    cmocka_unit_test(nameservers_silent),
	};
	const struct CMUnitTest api[] = {
	    cmocka_unit_test(api_create_with_policy),
	    cmocka_unit_test(api_change_restart_end),
	};
	int rc;

	if (getenv("SBX_TEST_FILTER"))
		cmocka_set_test_filter(getenv("SBX_TEST_FILTER"));
	rc = cmocka_run_group_tests_name("connector", lab, lab_setup, lab_teardown);
	rc |= cmocka_run_group_tests_name("api", api, api_setup, api_teardown);
	return rc;
}
