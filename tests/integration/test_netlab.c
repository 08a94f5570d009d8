/* The tests' own "internet" (scripts/netlab.sh): a network namespace on a
 * veth pair with a DNS server and two web servers, which the network tests
 * of guest egress will stand on. This test checks the lab itself, without
 * a daemon or a guest.
 *
 * Proves: the DNS answers every name of the zone with its address (two
 * names on one address, a wildcard, names on this machine's address, on
 * loopback and on the metadata address), answers NXDOMAIN for another name
 * of the zone and REFUSED outside it without waiting for a timeout; the
 * web servers answer HTTP and HTTPS on both addresses and say which Host
 * and SNI they were asked for; HTTPS verifies with the lab's test CA and
 * only with it; /100M is 100 MiB; `name` changes an answer at once; `up`
 * again changes nothing; `down` leaves no namespace, link, process or file.
 * Skips (does not fail) where network namespaces cannot be made or a tool
 * is missing. Everything it starts is torn down in the group teardown,
 * also after a failure (SBX_TEST_KEEP=1 keeps a lab that failed to come
 * up, for its logs).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

static char nl_dir[256], nl_ns[16], nl_net[32];
static int nl_skip;

/* dig's answer (A) for NAME.lab.test from the lab's DNS: one try, a 2 s
 * bound, so a server that does not answer fails (dig exits 9) instead of
 * stalling the test. */
static int dig_short(const char *name, char *out, size_t n)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd), "dig +short +time=2 +tries=1 @%s.53 %s.lab.test A", nl_net,
		 name);
	return cmd_out(cmd, out, n);
}

/* The response code dig saw for fqdn (NOERROR, NXDOMAIN, REFUSED...). */
static int dig_status(const char *fqdn, char *out, size_t n)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd),
		 "dig +time=2 +tries=1 @%s.53 %s A | "
		 "sed -n 's/.*status: \\([A-Z]*\\),.*/\\1/p'",
		 nl_net, fqdn);
	return cmd_out(cmd, out, n);
}

static int setup(void **state)
{
	(void)state;
	char cmd[1024];
	int id = (int)(getpid() % 10000);

	if (!netns_usable("test_netlab", "openssl nginx dnsmasq dig curl")) {
		nl_skip = 1;
		return 0;
	}
	/* Names and a /24 of this run only, so two runs cannot collide. */
	snprintf(nl_ns, sizeof(nl_ns), "sbxnl%d", id);
	snprintf(nl_net, sizeof(nl_net), "198.18.%d", 1 + id % 250);
	setenv("SBX_NL_NS", nl_ns, 1);
	setenv("SBX_NL_VETH", nl_ns, 1);
	setenv("SBX_NL_NET", nl_net, 1);
	unsetenv("SBX_NL_ZONE");
	snprintf(nl_dir, sizeof(nl_dir), "/var/lib/sandboxd-test/netlab-%d", (int)getpid());
	snprintf(cmd, sizeof(cmd),
		 "mkdir -p -m 0755 /var/lib/sandboxd-test && scripts/netlab.sh up %s >/dev/null",
		 nl_dir);
	if (run_cmd(cmd) != 0) {
		fprintf(stderr, "test_netlab: scripts/netlab.sh up failed (logs in %s/log)\n",
			nl_dir);
		/* cmocka runs no group teardown after a failed setup. */
		if (!getenv("SBX_TEST_KEEP")) {
			snprintf(cmd, sizeof(cmd), "scripts/netlab.sh down %s", nl_dir);
			run_cmd(cmd);
		}
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[1024];

	if (nl_skip || !nl_dir[0])
		return 0;
	snprintf(cmd, sizeof(cmd), "scripts/netlab.sh down %s", nl_dir);
	return run_cmd(cmd) == 0 ? 0 : -1;
}

static void dns_answers_every_name_of_the_zone(void **state)
{
	(void)state;
	static const struct {
		const char *name, *addr; /* addr: a host part of nl_net, or whole */
	} want[] = {
	    {"allowed", ".10"},	       {"other", ".10"},
	    {"x.cdn", ".10"},	       {"a.b.cdn", ".10"},
	    {"second", ".11"},	       {"host", ".1"},
	    {"loopback", "127.0.0.1"}, {"metadata", "169.254.169.254"},
	};
	char out[256], addr[64];

	if (nl_skip)
		skip();
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		if (want[i].addr[0] == '.')
			snprintf(addr, sizeof(addr), "%s%s", nl_net, want[i].addr);
		else
			snprintf(addr, sizeof(addr), "%s", want[i].addr);
		assert_int_equal(dig_short(want[i].name, out, sizeof(out)), 0);
		assert_string_equal(out, addr);
	}
}

static void dns_refuses_other_names_at_once(void **state)
{
	(void)state;
	char out[64];

	if (nl_skip)
		skip();
	/* With one try and a 2 s bound, a resolver that waited for an
	 * upstream would print no status at all. */
	assert_int_equal(dig_status("nope.lab.test", out, sizeof(out)), 0);
	assert_string_equal(out, "NXDOMAIN");
	assert_int_equal(dig_status("deb.debian.org", out, sizeof(out)), 0);
	assert_string_equal(out, "REFUSED");
}

static void web_says_what_it_was_asked(void **state)
{
	(void)state;
	static const char *names[] = {"allowed", "other", "second", "x.cdn"};
	char cmd[1024], out[512], want[512];

	if (nl_skip)
		skip();
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const char *host = strcmp(names[i], "second") == 0 ? ".11" : ".10";

		snprintf(cmd, sizeof(cmd),
			 "curl -sS -m 5 --cacert %s/pki/ca.pem --resolve %s.lab.test:443:%s%s "
			 "https://%s.lab.test/",
			 nl_dir, names[i], nl_net, host, names[i]);
		assert_int_equal(cmd_out(cmd, out, sizeof(out)), 0);
		snprintf(want, sizeof(want), "host=%s.lab.test sni=%s.lab.test addr=%s%s", names[i],
			 names[i], nl_net, host);
		assert_string_equal(out, want);
	}
	/* Plain HTTP: the Host header as sent, no SNI. */
	snprintf(cmd, sizeof(cmd), "curl -sS -m 5 -H 'Host: spoofed.example' http://%s.11/",
		 nl_net);
	assert_int_equal(cmd_out(cmd, out, sizeof(out)), 0);
	snprintf(want, sizeof(want), "host=spoofed.example sni= addr=%s.11", nl_net);
	assert_string_equal(out, want);
	/* An SNI that names no one still gets an answer, and says so: what
	 * to refuse is the policy's business, not the internet's. */
	snprintf(cmd, sizeof(cmd),
		 "curl -sS -m 5 -k --resolve spoofed.example:443:%s.10 https://spoofed.example/",
		 nl_net);
	assert_int_equal(cmd_out(cmd, out, sizeof(out)), 0);
	snprintf(want, sizeof(want), "host=spoofed.example sni=spoofed.example addr=%s.10", nl_net);
	assert_string_equal(out, want);
}

static void https_verifies_with_the_lab_ca_only(void **state)
{
	(void)state;
	char cmd[1024], out[256];

	if (nl_skip)
		skip();
	/* Without the lab's CA: the system's store does not know it (60). */
	snprintf(cmd, sizeof(cmd),
		 "curl -sS -m 5 -o /dev/null --resolve allowed.lab.test:443:%s.10 "
		 "https://allowed.lab.test/ 2>/dev/null",
		 nl_net);
	assert_int_equal(run_cmd(cmd), 60);
	/* With it, but a name the certificate does not carry (60 too). */
	snprintf(cmd, sizeof(cmd),
		 "curl -sS -m 5 -o /dev/null --cacert %s/pki/ca.pem "
		 "--resolve spoofed.example:443:%s.10 https://spoofed.example/ 2>/dev/null",
		 nl_dir, nl_net);
	assert_int_equal(run_cmd(cmd), 60);
	/* The big file, whole. */
	snprintf(cmd, sizeof(cmd),
		 "curl -sS -m 60 -o /dev/null -w '%%{size_download}' --cacert %s/pki/ca.pem "
		 "--resolve allowed.lab.test:443:%s.10 https://allowed.lab.test/100M",
		 nl_dir, nl_net);
	assert_int_equal(cmd_out(cmd, out, sizeof(out)), 0);
	assert_string_equal(out, "104857600");
}

static void name_changes_an_answer_at_once(void **state)
{
	(void)state;
	char cmd[1024], out[64];

	if (nl_skip)
		skip();
	assert_int_equal(dig_short("rebind", out, sizeof(out)), 0);
	assert_string_equal(out, ""); /* not there yet */
	snprintf(cmd, sizeof(cmd), "scripts/netlab.sh name %s rebind.lab.test 192.168.122.7",
		 nl_dir);
	assert_int_equal(run_cmd(cmd), 0);
	/* dnsmasq re-reads on SIGHUP, which `name` sent before returning;
	 * the re-read itself is asynchronous, so allow it a moment. */
	for (int i = 0; i < 50; i++) {
		dig_short("rebind", out, sizeof(out));
		if (strcmp(out, "192.168.122.7") == 0)
			break;
		usleep(100 * 1000);
	}
	assert_string_equal(out, "192.168.122.7");
	snprintf(cmd, sizeof(cmd), "scripts/netlab.sh name %s rebind.lab.test 127.0.0.1", nl_dir);
	assert_int_equal(run_cmd(cmd), 0);
	for (int i = 0; i < 50; i++) {
		dig_short("rebind", out, sizeof(out));
		if (strcmp(out, "127.0.0.1") == 0)
			break;
		usleep(100 * 1000);
	}
	assert_string_equal(out, "127.0.0.1"); /* replaced, not added */
}

static void up_again_changes_nothing(void **state)
{
	(void)state;
	char cmd[1024], before[64], after[64];

	if (nl_skip)
		skip();
	snprintf(cmd, sizeof(cmd), "cat %s/nginx/nginx.pid %s/dnsmasq.pid | tr '\\n' ' '", nl_dir,
		 nl_dir);
	assert_int_equal(cmd_out(cmd, before, sizeof(before)), 0);
	char up[1024];

	snprintf(up, sizeof(up), "scripts/netlab.sh up %s >/dev/null", nl_dir);
	assert_int_equal(run_cmd(up), 0);
	assert_int_equal(cmd_out(cmd, after, sizeof(after)), 0);
	assert_string_equal(before, after);
	snprintf(cmd, sizeof(cmd), "scripts/netlab.sh status %s >/dev/null", nl_dir);
	assert_int_equal(run_cmd(cmd), 0);
}

static void down_leaves_nothing(void **state)
{
	(void)state;
	char cmd[1024], pids[64], out[64];

	if (nl_skip)
		skip();
	snprintf(cmd, sizeof(cmd), "ip netns pids %s | tr '\\n' ' '", nl_ns);
	assert_int_equal(cmd_out(cmd, pids, sizeof(pids)), 0);
	assert_true(strlen(pids) > 0); /* nginx (master, worker) and dnsmasq */
	snprintf(cmd, sizeof(cmd), "scripts/netlab.sh down %s", nl_dir);
	assert_int_equal(run_cmd(cmd), 0);
	snprintf(cmd, sizeof(cmd), "test -e /run/netns/%s || ip link show %s >/dev/null 2>&1",
		 nl_ns, nl_ns);
	assert_int_not_equal(run_cmd(cmd), 0);
	/* Each gone, or exited and waiting only for the machine's init to
	 * reap it (state Z): its parent is not this test. */
	for (char *p = strtok(pids, " "); p; p = strtok(NULL, " ")) {
		char pstate[16];

		snprintf(cmd, sizeof(cmd), "sed 's/.*) //; s/ .*//' /proc/%s/stat 2>/dev/null", p);
		cmd_out(cmd, pstate, sizeof(pstate));
		assert_true(pstate[0] == '\0' || strcmp(pstate, "Z") == 0);
	}
	struct stat st;

	assert_int_not_equal(stat(nl_dir, &st), 0);
	/* And `status` says so, without making the directory again. */
	snprintf(cmd, sizeof(cmd), "scripts/netlab.sh status %s 2>&1", nl_dir);
	assert_int_equal(cmd_out(cmd, out, sizeof(out)), 1);
	assert_int_not_equal(stat(nl_dir, &st), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(dns_answers_every_name_of_the_zone),
	    cmocka_unit_test(dns_refuses_other_names_at_once),
	    cmocka_unit_test(web_says_what_it_was_asked),
	    cmocka_unit_test(https_verifies_with_the_lab_ca_only),
	    cmocka_unit_test(name_changes_an_answer_at_once),
	    cmocka_unit_test(up_again_changes_nothing),
	    cmocka_unit_test(down_leaves_nothing),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
