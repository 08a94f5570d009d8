/* Egress (issue 27) end to end: a real guest (full image) reaches the
 * tests' own "internet" (scripts/netlab.sh: a network namespace on a veth
 * pair with a DNS server and web servers over HTTP and HTTPS with a test
 * CA) through the agent's proxy, the exec channel and the daemon's relay,
 * under the sandbox's policy. The daemon resolves through the lab's DNS
 * (network.nameservers). One sandbox, its policy changed between cases:
 *
 * - egress none: curl over http and https fails at once with the proxy's
 *   403 naming the policy (figures printed);
 * - allow_list [allowed.lab.test]: http and https (the lab's TLS server
 *   sees the SNI) answer; other.lab.test, the same address, is 403;
 * - a spoofed SNI or Host toward the allowed name's address is cut on its
 *   first bytes (python in the guest, raw CONNECT);
 * - open: second.lab.test answers; names resolving to 127.0.0.1, the
 *   metadata address or this machine, this machine's address and port of
 *   the daemon's API, and a private address are 403 all the same;
 * - the bandwidth cap holds (8 MiB at a 2 MB/s cap: the rate printed,
 *   at most 1.5x the cap) and the bytes show on the sandbox;
 * - the account's connection cap: the 4th connection held at once is 429;
 * - a hostile guest: no interface but lo (a raw packet goes nowhere,
 *   another guest has no address), 200 tunnels asked for back to back
 *   are answered (200 or 429, never a broken channel) and the relay
 *   still relays;
 * - at a price of 1 µ$ a byte, a download is cut at the hold and the next
 *   connection is refused (the daemon restarted with that price).
 * Skips where network namespaces cannot be made.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

static struct daemon d;
static char sbx[64];
static char nl_dir[256], nl_ns[16], nl_net[32];
static int skip;

#define BANDWIDTH 2000000

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Run a command in the sandbox: its stdout (and stderr after it) in out;
 * its exit code. */
static int run(const char *cmd, char *out, size_t n)
{
	struct http_reply r;
	int code;

	assert_int_equal(sandbox_command(&d, sbx, "exec", cmd, 120000, &r), 0);
	if (r.status != 200)
		fail_msg("exec %s: %d %s", cmd, r.status, r.body);
	code = (int)jint(r.json, "exit_code");
	snprintf(out, n, "%s%s", jstr(r.json, "stdout"), jstr(r.json, "stderr"));
	http_reply_free(&r);
	return code;
}

/* A python script in the sandbox (printed); it must exit 0. */
static void run_py(const char *script, char *out, size_t n)
{
	char cmd[4096];

	snprintf(cmd, sizeof cmd, "python3 - <<'EOF'\n%sEOF\n", script);
	assert_int_equal(run(cmd, out, n), 0);
	printf("%s", out);
}

static void policy(const char *json)
{
	struct http_reply r;
	char path[128];

	snprintf(path, sizeof path, "/v1/sandboxes/%s/network", sbx);
	assert_int_equal(http_request(&d, "POST", path, d.key, NULL, json, 0, &r), 0);
	if (r.status != 200)
		fail_msg("policy %s: %d %s", json, r.status, r.body);
	http_reply_free(&r);
}

/* The daemon's config: the lab's DNS, caps the tests can reach, and a
 * price of a GB (0 but for the last case). */
static void config_extra(char *out, size_t n, long long price_micro_per_gb)
{
	snprintf(out, n,
		 "\"http_threads\": 4, \"destroy_on_exit\": true, "
		 "\"network\": {\"allow_open\": true, \"nameservers\": [\"%s.53\"], "
		 "\"bandwidth_bytes_per_s\": %d, \"connections_per_account\": 3, "
		 "\"connect_timeout_ms\": 3000, \"price_micro_per_gb\": %lld}",
		 nl_net, BANDWIDTH, price_micro_per_gb);
}

static int setup(void **state)
{
	char cmd[1024], extra[512], ca[8192];
	struct http_reply r;
	int id = (int)(getpid() % 10000);
	FILE *f;
	size_t n;

	(void)state;
	if (!netns_usable("test_egress", "openssl nginx dnsmasq dig curl")) {
		skip = 1;
		return 0;
	}
	snprintf(nl_ns, sizeof nl_ns, "sbxeg%d", id);
	snprintf(nl_net, sizeof nl_net, "198.19.%d", 1 + (id + 125) % 250);
	setenv("SBX_NL_NS", nl_ns, 1);
	setenv("SBX_NL_VETH", nl_ns, 1);
	setenv("SBX_NL_NET", nl_net, 1);
	unsetenv("SBX_NL_ZONE");
	snprintf(nl_dir, sizeof nl_dir, "/var/lib/sandboxd-test/egress-%d", (int)getpid());
	snprintf(cmd, sizeof cmd,
		 "mkdir -p -m 0755 /var/lib/sandboxd-test && scripts/netlab.sh up %s >/dev/null",
		 nl_dir);
	if (run_cmd(cmd) != 0) {
		fprintf(stderr, "test_egress: scripts/netlab.sh up failed (logs in %s/log)\n",
			nl_dir);
		return -1;
	}
	config_extra(extra, sizeof extra, 0);
	if (daemon_config_full(&d, extra) < 0 || daemon_up(&d) < 0)
		return -1;
	if (daemon_create_sandbox(&d, sbx, sizeof sbx) < 0)
		return -1;
	snprintf(cmd, sizeof cmd, "%s/pki/ca.pem", nl_dir);
	f = fopen(cmd, "r");
	if (!f)
		return -1;
	n = fread(ca, 1, sizeof ca, f);
	fclose(f);
	snprintf(cmd, sizeof cmd, "/v1/sandboxes/%s/files?path=/tmp/ca.pem", sbx);
	if (http_request(&d, "PUT", cmd, d.key, "Content-Type: application/octet-stream\r\n", ca, n,
			 &r) < 0 ||
	    r.status != 201)
		return -1;
	http_reply_free(&r);
	return 0;
}

static int teardown(void **state)
{
	char cmd[512];

	(void)state;
	if (skip)
		return 0;
	daemon_down(&d);
	snprintf(cmd, sizeof cmd, "scripts/netlab.sh down %s", nl_dir);
	run_cmd(cmd);
	return 0;
}

#define SKIP_IF_NO_LAB()                                                                           \
	do {                                                                                       \
		if (skip)                                                                          \
			skip();                                                                    \
	} while (0)

static void egress_none_fails_fast(void **state)
{
	char out[4096];
	int64_t t0;
	int rc;

	(void)state;
	SKIP_IF_NO_LAB();
	policy("{\"egress\": \"none\"}");
	t0 = now_ms();
	rc = run("curl -sS -w ' code=%{http_code}' http://allowed.lab.test/", out, sizeof out);
	printf("# none, http: curl rc=%d in %lld ms: %s\n", rc, (long long)(now_ms() - t0), out);
	assert_non_null(strstr(out, "code=403"));
	assert_non_null(strstr(out, "egress none"));
	t0 = now_ms();
	rc = run("curl -sS --cacert /tmp/ca.pem https://allowed.lab.test/", out, sizeof out);
	printf("# none, https: curl rc=%d in %lld ms: %s\n", rc, (long long)(now_ms() - t0), out);
	assert_int_not_equal(rc, 0);
	assert_non_null(strstr(out, "403"));
}

static void allow_list_reaches_the_name_only(void **state)
{
	char out[4096];
	int rc;

	(void)state;
	SKIP_IF_NO_LAB();
	policy("{\"egress\": \"allow_list\", \"allow\": [\"allowed.lab.test\"]}");
	rc = run("curl -sS http://allowed.lab.test/", out, sizeof out);
	printf("# allow_list, http: %s", out);
	assert_int_equal(rc, 0);
	assert_non_null(strstr(out, "host=allowed.lab.test"));
	rc = run("curl -sS --cacert /tmp/ca.pem https://allowed.lab.test/", out, sizeof out);
	printf("# allow_list, https: %s", out);
	assert_int_equal(rc, 0);
	assert_non_null(strstr(out, "sni=allowed.lab.test"));
	rc = run("curl -sS -w ' code=%{http_code}' http://other.lab.test/", out, sizeof out);
	printf("# allow_list, another name on the same address: %s\n", out);
	assert_non_null(strstr(out, "code=403"));
	assert_non_null(strstr(out, "not_allowed"));
}

/* CONNECT to the allowed name, then TLS naming another server, or HTTP
 * with another Host: the relay cuts it before the server sees a byte. */
static const char spoof_py[] =
    "import socket, ssl, sys\n"
    "def tunnel(port):\n"
    "    s = socket.create_connection(('127.0.0.1', 3128), timeout=30)\n"
    "    s.sendall(b'CONNECT allowed.lab.test:%d HTTP/1.1\\r\\n\\r\\n' % port)\n"
    "    head = s.recv(4096)\n"
    "    assert head.startswith(b'HTTP/1.1 200'), head\n"
    "    return s\n"
    "ctx = ssl.create_default_context(cafile='/tmp/ca.pem')\n"
    "for sni in ('allowed.lab.test', 'other.lab.test'):\n"
    "    s = tunnel(443)\n"
    "    try:\n"
    "        t = ctx.wrap_socket(s, server_hostname=sni)\n"
    "        t.sendall(b'GET / HTTP/1.1\\r\\nHost: ' + sni.encode() + "
    "b'\\r\\nConnection: close\\r\\n\\r\\n')\n"
    "        print('tls', sni, 'ANSWERED', t.recv(4096).split(b'\\r\\n\\r\\n')[-1])\n"
    "    except Exception as e:\n"
    "        print('tls', sni, 'CUT', type(e).__name__)\n"
    "for host in ('allowed.lab.test', 'other.lab.test'):\n"
    "    s = tunnel(80)\n"
    "    s.sendall(b'GET / HTTP/1.1\\r\\nHost: ' + host.encode() + "
    "b'\\r\\nConnection: close\\r\\n\\r\\n')\n"
    "    try:\n"
    "        data = s.recv(4096)\n"
    "        print('http', host, 'ANSWERED' if data else 'CUT', data[-40:])\n"
    "    except Exception as e:\n"
    "        print('http', host, 'CUT', type(e).__name__)\n";

static void spoofed_sni_and_host_cut(void **state)
{
	char out[4096];

	(void)state;
	SKIP_IF_NO_LAB();
	policy("{\"egress\": \"allow_list\", \"allow\": [\"allowed.lab.test\"]}");
	run_py(spoof_py, out, sizeof out);
	assert_non_null(strstr(out, "tls allowed.lab.test ANSWERED"));
	assert_non_null(strstr(out, "tls other.lab.test CUT"));
	assert_non_null(strstr(out, "http allowed.lab.test ANSWERED"));
	assert_non_null(strstr(out, "http other.lab.test CUT"));
}

static void forbidden_even_when_open(void **state)
{
	char out[4096], cmd[512];
	const char *names[] = {"loopback.lab.test", "metadata.lab.test", "host.lab.test",
			       "10.0.0.1", "127.0.0.1"};
	int rc;

	(void)state;
	SKIP_IF_NO_LAB();
	policy("{\"egress\": \"open\"}");
	rc = run("curl -sS http://second.lab.test/", out, sizeof out);
	printf("# open, second.lab.test: %s", out);
	assert_int_equal(rc, 0);
	assert_non_null(strstr(out, "host=second.lab.test"));
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		/* 127.0.0.1 through the proxy: the daemon's loopback, not the guest's */
		snprintf(cmd, sizeof cmd,
			 "curl -sS --noproxy '' -x http://127.0.0.1:3128 -w ' code=%%{http_code}' "
			 "http://%s/",
			 names[i]);
		rc = run(cmd, out, sizeof out);
		printf("# open, %s: %s\n", names[i], out);
		assert_non_null(strstr(out, "code=403"));
		assert_non_null(strstr(out, "forbidden_address"));
	}
	/* this machine's side of the lab, at the daemon's API port */
	snprintf(cmd, sizeof cmd, "curl -sS -w ' code=%%{http_code}' http://%s.1:%d/v1/limits",
		 nl_net, d.port);
	run(cmd, out, sizeof out);
	printf("# open, the daemon's own API: %s\n", out);
	assert_non_null(strstr(out, "code=403"));
	assert_null(strstr(out, "\"network\""));
}

static void bandwidth_capped_and_metered(void **state)
{
	char out[4096], path[128];
	struct http_reply r;
	double size = 0, secs = 0;
	int rc;

	(void)state;
	SKIP_IF_NO_LAB();
	policy("{\"egress\": \"allow_list\", \"allow\": [\"allowed.lab.test\"]}");
	rc = run("curl -sS -r 0-8388607 -o /dev/null -w '%{size_download} %{time_total}' "
		 "http://allowed.lab.test/100M",
		 out, sizeof out);
	assert_int_equal(rc, 0);
	assert_int_equal(sscanf(out, "%lf %lf", &size, &secs), 2);
	printf("# 8 MiB at a cap of %d B/s: %.0f bytes in %.2f s = %.0f B/s (x%.2f of the cap)\n",
	       BANDWIDTH, size, secs, size / secs, size / secs / BANDWIDTH);
	assert_true(size == 8388608);
	assert_true(size / secs <= 1.5 * BANDWIDTH);
	snprintf(path, sizeof path, "/v1/sandboxes/%s", sbx);
	for (int i = 0; i < 50; i++) {
		assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
		if (jint(r.json, "net_bytes_in") >= 8388608)
			break;
		http_reply_free(&r);
		r.json = NULL;
		usleep(100000);
	}
	assert_non_null(r.json);
	printf("# the sandbox: net_bytes_in %lld, net_bytes_out %lld\n",
	       (long long)jint(r.json, "net_bytes_in"), (long long)jint(r.json, "net_bytes_out"));
	assert_true(jint(r.json, "net_bytes_in") >= 8388608);
	assert_true(jint(r.json, "net_bytes_out") > 0);
	http_reply_free(&r);
}

/* Three tunnels held open (the account's cap), a fourth: 429. */
static const char cap_py[] = "import socket\n"
			     "held = []\n"
			     "for i in range(4):\n"
			     "    s = socket.create_connection(('127.0.0.1', 3128), timeout=30)\n"
			     "    s.sendall(b'CONNECT allowed.lab.test:80 HTTP/1.1\\r\\n\\r\\n')\n"
			     "    print(i, s.recv(4096).split(b'\\r\\n')[0].decode())\n"
			     "    held.append(s)\n";

static void account_connection_cap(void **state)
{
	char out[4096];

	(void)state;
	SKIP_IF_NO_LAB();
	policy("{\"egress\": \"allow_list\", \"allow\": [\"allowed.lab.test\"]}");
	run_py(cap_py, out, sizeof out);
	assert_non_null(strstr(out, "2 HTTP/1.1 200"));
	assert_non_null(strstr(out, "3 HTTP/1.1 429"));
}

/* No interface but lo: a raw packet has nowhere to go, and another
 * guest has no address to be reached at. */
static const char raw_py[] =
    "import os, socket\n"
    "print('ifaces', sorted(os.listdir('/sys/class/net')))\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)\n"
    "try:\n"
    "    s.sendto(b'\\x08\\x00\\xf7\\xff\\x00\\x00\\x00\\x00', ('%s.10', 0))\n"
    "    print('raw SENT')\n"
    "except OSError as e:\n"
    "    print('raw', e.strerror)\n";

/* 200 tunnels asked for as fast as the guest can, each closed once
 * answered: the answers counted. */
static const char flood_py[] =
    "import socket, collections\n"
    "seen = collections.Counter()\n"
    "for i in range(200):\n"
    "    s = socket.create_connection(('127.0.0.1', 3128), timeout=30)\n"
    "    s.sendall(b'CONNECT allowed.lab.test:80 HTTP/1.1\\r\\n\\r\\n')\n"
    "    seen[s.recv(64).split(b' ')[1].decode()] += 1\n"
    "    s.close()\n"
    "print('answers', dict(seen))\n";

static void hostile_guest_costs_only_itself(void **state)
{
	char out[4096], script[1024];
	int64_t t0;

	(void)state;
	SKIP_IF_NO_LAB();
	policy("{\"egress\": \"open\"}");
	snprintf(script, sizeof script, raw_py, nl_net);
	run_py(script, out, sizeof out);
	assert_non_null(strstr(out, "ifaces ['lo']"));
	assert_non_null(strstr(out, "raw Network is unreachable"));
	t0 = now_ms();
	run_py(flood_py, out, sizeof out);
	printf("# 200 tunnels in %lld ms\n", (long long)(now_ms() - t0));
	assert_null(strstr(out, "'502'"));
	assert_non_null(strstr(out, "'200'"));
	/* the daemon and the sandbox still answer; the relay still relays */
	assert_int_equal(run("curl -sS http://allowed.lab.test/", out, sizeof out), 0);
	assert_non_null(strstr(out, "host=allowed.lab.test"));
}

/* With a price of 1 µ$ a byte the sandbox's hold covers a few KB: a
 * download is cut at the relay's first metering step (a MiB) and the next
 * connection is refused: no byte goes unbilled past the hold. The daemon
 * restarts with that price for a sandbox of its own (prices are taken at
 * create). */
static void bytes_stop_at_the_hold(void **state)
{
	char extra[512], out[4096], path[128];
	struct http_reply r;
	long long got = 0;

	(void)state;
	SKIP_IF_NO_LAB();
	assert_int_equal(daemon_stop(&d), 0);
	config_extra(extra, sizeof extra, 1000000000);
	assert_int_equal(daemon_config_full(&d, extra), 0);
	assert_int_equal(daemon_start(&d), 0);
	assert_int_equal(daemon_create_sandbox(&d, sbx, sizeof sbx), 0);
	policy("{\"egress\": \"allow_list\", \"allow\": [\"allowed.lab.test\"]}");
	run("curl -sS -o /dev/null -w 'size=%{size_download}' http://allowed.lab.test/100M", out,
	    sizeof out);
	assert_non_null(strstr(out, "size="));
	got = atoll(strstr(out, "size=") + 5);
	printf("# at 1 µ$ a byte: the download stopped after %lld bytes: %s\n", got, out);
	assert_true(got < 4 * 1048576);
	run("curl -sS -w ' code=%{http_code}' http://allowed.lab.test/", out, sizeof out);
	printf("# the next connection: %s\n", out);
	assert_non_null(strstr(out, "code=403"));
	assert_non_null(strstr(out, "hold"));
	snprintf(path, sizeof path, "/v1/sandboxes/%s", sbx);
	assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
	printf("# the sandbox: net_bytes_in %lld, cost_micro_usd %lld\n",
	       (long long)jint(r.json, "net_bytes_in"), (long long)jint(r.json, "cost_micro_usd"));
	assert_true(jint(r.json, "net_bytes_in") >= 1048576);
	http_reply_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(egress_none_fails_fast),
	    cmocka_unit_test(allow_list_reaches_the_name_only),
	    cmocka_unit_test(spoofed_sni_and_host_cut),
	    cmocka_unit_test(forbidden_even_when_open),
	    cmocka_unit_test(bandwidth_capped_and_metered),
	    cmocka_unit_test(account_connection_cap),
	    cmocka_unit_test(hostile_guest_costs_only_itself),
	    cmocka_unit_test(bytes_stop_at_the_hold),
	};

	if (getenv("SBX_TEST_FILTER"))
		cmocka_set_test_filter(getenv("SBX_TEST_FILTER"));
	return cmocka_run_group_tests(tests, setup, teardown);
}
