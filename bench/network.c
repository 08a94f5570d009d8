/* bench/network: egress through the policy (docs/network.md), beside the
 * same from the host, in one run.
 *
 * The tests' own "internet" (scripts/netlab.sh: a network namespace on a
 * veth pair, nginx, dnsmasq), one daemon (harness.h) on the full image
 * resolving through the lab's DNS, one sandbox under
 * {"egress": "allow_list", "allow": ["allowed.lab.test"]} and a bandwidth
 * cap high enough not to bind (network.bandwidth_bytes_per_s 10^10).
 * Prints:
 *   - download: SBX_BENCH_NET_MIB (default 100) MiB from the lab's nginx
 *     with curl in the guest (through the agent's proxy, the exec channel
 *     and the daemon's relay) and with curl on the host, three times each:
 *     MB/s (median) and the ratio;
 *   - set-up: SBX_BENCH_NET_CONNS (default 20) small GETs one after
 *     another, each a new connection (the guest's: proxy, stream, policy,
 *     resolve, connect, first-bytes check), p50/p95 ms from curl's own
 *     time_total, beside the host's;
 *   - the daemon's VmHWM before and after, and the bytes the sandbox
 *     shows (net_bytes_in).
 *
 *   make bench && SBX_TEST_IMAGE_DIR=$PWD/build/images/tiny \
 *     SBX_TEST_FULL_IMAGE_DIR=$PWD/build/images/full \
 *     SBX_BIN=$PWD/bin/sandboxd build/bench/network
 *
 * Prints figures; never fails on them. Exit 1 only when it cannot run. */
#include "../tests/integration/harness.h"
#include "bench.h"

#define MAX_CONNS 500

static struct daemon d;
static char sbx[64];
static char nl_dir[256], nl_net[32];

/* exec cmd in the sandbox; its stdout into out. 0, or -1. */
static int run(const char *cmd, char *out, size_t n)
{
	struct http_reply r;
	int rc;

	if (sandbox_command(&d, sbx, "exec", cmd, 300000, &r) < 0)
		return -1;
	rc = r.status == 200 && jint(r.json, "exit_code") == 0 ? 0 : -1;
	if (rc < 0)
		fprintf(stderr, "bench/network: '%s': %d %s\n", cmd, r.status, r.body);
	else
		snprintf(out, n, "%s", jstr(r.json, "stdout"));
	http_reply_free(&r);
	return rc;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Lines of numbers (seconds) in text into v (ms); how many. */
static size_t parse_times(char *text, double *v, size_t cap)
{
	size_t n = 0;

	for (char *l = strtok(text, "\n"); l && n < cap; l = strtok(NULL, "\n"))
		v[n++] = atof(l) * 1000.0;
	qsort(v, n, sizeof v[0], cmp_double);
	return n;
}

/* How curl reaches allowed.lab.test: in the guest, through the proxy
 * (its environment); on the host, straight to the lab's address. */
static void curl_to_lab(bool in_guest, char *out, size_t n)
{
	if (in_guest)
		snprintf(out, n, "curl -sS");
	else
		snprintf(out, n, "curl -sS --noproxy '*' --resolve allowed.lab.test:80:%s.10",
			 nl_net);
}

/* Three downloads of mib MiB (guest or host): median MB/s, 0 on failure. */
static double download(bool in_guest, int mib)
{
	char curl[160], cmd[512], out[4096];
	double rates[3];

	curl_to_lab(in_guest, curl, sizeof curl);
	snprintf(cmd, sizeof cmd,
		 "%s -r 0-%lld -o /dev/null -w '%%{size_download} %%{time_total}' "
		 "http://allowed.lab.test/100M",
		 curl, (long long)mib * 1048576 - 1);
	for (int i = 0; i < 3; i++) {
		double size = 0, secs = 0;

		if (in_guest ? run(cmd, out, sizeof out) < 0 : cmd_out(cmd, out, sizeof out) != 0)
			return 0;
		if (sscanf(out, "%lf %lf", &size, &secs) != 2 || secs <= 0)
			return 0;
		rates[i] = size / secs / 1e6;
	}
	qsort(rates, 3, sizeof rates[0], cmp_double);
	return rates[1];
}

/* n small GETs, one connection each: their times (ms), sorted. */
static size_t setups(bool in_guest, int n, double *v)
{
	static char out[MAX_CONNS * 16 + 64];
	char curl[160], cmd[512];

	curl_to_lab(in_guest, curl, sizeof curl);
	snprintf(cmd, sizeof cmd,
		 "for i in $(seq %d); do %s -o /dev/null -w '%%{time_total}\\n' "
		 "http://allowed.lab.test/; done",
		 n, curl);
	if (in_guest ? run(cmd, out, sizeof out) < 0 : cmd_out(cmd, out, sizeof out) != 0)
		return 0;
	return parse_times(out, v, MAX_CONNS);
}

static int lab_up(void)
{
	char cmd[512];
	int id = (int)(getpid() % 10000);

	if (!netns_usable("bench/network", "openssl nginx dnsmasq dig curl"))
		return -1;
	snprintf(cmd, sizeof cmd, "sbxbn%d", id);
	setenv("SBX_NL_NS", cmd, 1);
	setenv("SBX_NL_VETH", cmd, 1);
	snprintf(nl_net, sizeof nl_net, "198.19.%d", 1 + (id + 60) % 250);
	setenv("SBX_NL_NET", nl_net, 1);
	unsetenv("SBX_NL_ZONE");
	snprintf(nl_dir, sizeof nl_dir, "/var/lib/sandboxd-test/bench-network-%d", (int)getpid());
	snprintf(cmd, sizeof cmd,
		 "mkdir -p -m 0755 /var/lib/sandboxd-test && scripts/netlab.sh up %s >/dev/null",
		 nl_dir);
	return run_cmd(cmd) == 0 ? 0 : -1;
}

static void lab_down(void)
{
	char cmd[512];

	snprintf(cmd, sizeof cmd, "scripts/netlab.sh down %s >/dev/null", nl_dir);
	run_cmd(cmd);
}

static int bench(int mib, int conns)
{
	double g_rate, h_rate, g[MAX_CONNS], h[MAX_CONNS];
	size_t ng, nh;
	long hwm0 = daemon_proc_kib(&d, "VmHWM");
	char path[160];
	struct http_reply r;

	g_rate = download(true, mib);
	h_rate = download(false, mib);
	printf("download %d MiB (median of 3): guest through the relay %.1f MB/s, host %.1f MB/s, "
	       "ratio x%.2f\n",
	       mib, g_rate, h_rate, h_rate > 0 ? g_rate / h_rate : 0);
	ng = setups(true, conns, g);
	nh = setups(false, conns, h);
	if (ng && nh)
		printf("set-up, %d GETs one connection each: guest p50 %.1f ms p95 %.1f ms, "
		       "host p50 %.1f ms p95 %.1f ms, ratio x%.1f (p50)\n",
		       conns, g[ng / 2], g[ng * 95 / 100], h[nh / 2], h[nh * 95 / 100],
		       h[nh / 2] > 0 ? g[ng / 2] / h[nh / 2] : 0);
	snprintf(path, sizeof path, "/v1/sandboxes/%s", sbx);
	if (http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r) == 0) {
		printf("the sandbox: net_bytes_in %lld, net_bytes_out %lld\n",
		       (long long)jint(r.json, "net_bytes_in"),
		       (long long)jint(r.json, "net_bytes_out"));
		http_reply_free(&r);
	}
	printf("daemon VmHWM: %ld KiB before, %ld KiB after\n", hwm0, daemon_proc_kib(&d, "VmHWM"));
	return g_rate > 0 && h_rate > 0 && ng && nh ? 0 : -1;
}

int main(void)
{
	int mib = getenv("SBX_BENCH_NET_MIB") ? atoi(getenv("SBX_BENCH_NET_MIB")) : 100;
	int conns = getenv("SBX_BENCH_NET_CONNS") ? atoi(getenv("SBX_BENCH_NET_CONNS")) : 20;
	char extra[512];
	int rc = 1;

	if (mib < 1 || mib > 100)
		mib = 100;
	if (conns < 1 || conns > MAX_CONNS)
		conns = 20;
	if (lab_up() < 0) {
		fprintf(stderr, "bench/network: cannot make the lab (network namespaces, nginx, "
				"dnsmasq)\n");
		return 1;
	}
	snprintf(extra, sizeof extra,
		 "\"http_threads\": 4, \"destroy_on_exit\": true, \"network\": {\"nameservers\": "
		 "[\"%s.53\"], \"bandwidth_bytes_per_s\": 10000000000, \"default_policy\": "
		 "{\"egress\": \"allow_list\", \"allow\": [\"allowed.lab.test\"]}}",
		 nl_net);
	if (daemon_config_full(&d, extra) < 0 || daemon_up(&d) < 0 ||
	    daemon_create_sandbox(&d, sbx, sizeof sbx) < 0) {
		fprintf(stderr, "bench/network: no daemon or sandbox (make image-full?)\n");
		goto out;
	}
	rc = bench(mib, conns) == 0 ? 0 : 1;
out:
	daemon_down(&d);
	lab_down();
	return rc;
}
