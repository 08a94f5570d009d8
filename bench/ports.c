/* bench/ports: a server in a sandbox reached through the ports route
 * (docs/api.md "Ports"), beside the same work through the exec channel's
 * own routes, in one run.
 *
 * One daemon (harness.h) on the full image with one sandbox running
 * `python3 -m http.server` on its loopback. Then prints:
 *   - requests: SBX_BENCH_REQUESTS (default 100) GETs of a 1 KiB file
 *     through the proxy, one after another (each a new stream to the
 *     guest's port), p50/p95 and requests/s; beside them as many
 *     `exec cat` of the same file and as many `GET /files` of it (one
 *     exec request and one file transfer each: the per-request floor of
 *     the channel), and the proxy's ratios to both;
 *   - bytes: a SBX_BENCH_PORT_MIB (default 64) MiB random file through
 *     the proxy and through GET /files (the channel's file transfer, its
 *     fastest way out of the guest), three times each: MB/s (median), the
 *     ratio, and whether the bytes matched (SHA-256 against the guest's);
 *   - the daemon's VmHWM before and after.
 *
 *   make bench && SBX_TEST_IMAGE_DIR=$PWD/build/images/tiny \
 *     SBX_TEST_FULL_IMAGE_DIR=$PWD/build/images/full \
 *     SBX_BIN=$PWD/bin/sandboxd build/bench/ports
 *
 * Prints figures; never fails on them. Exit 1 only when it cannot run. */
#include <openssl/evp.h>

#include "../tests/integration/harness.h"
#include "bench.h"

#define MAX_REQUESTS 2000

static struct daemon d;
static char sbx[64];

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* POST `path` with {"command": cmd}; the reply's status (-1: no reply). */
static int post_command(const char *route, const char *cmd, struct http_reply *r)
{
	json_object *body = json_object_new_object();
	char path[160];
	int rc;

	json_object_object_add(body, "command", json_object_new_string(cmd));
	snprintf(path, sizeof path, "/v1/sandboxes/%s/%s", sbx, route);
	rc = http_request(&d, "POST", path, d.key, NULL, json_object_to_json_string(body), 0, r);
	json_object_put(body);
	return rc < 0 ? -1 : r->status;
}

/* exec cmd; its stdout into out (when out). 0, or -1. */
static int run(const char *cmd, char *out, size_t n)
{
	struct http_reply r;
	int st = post_command("exec", cmd, &r);
	int ok = st == 200 && r.json && jint(r.json, "exit_code") == 0;

	if (ok && out)
		snprintf(out, n, "%s", jstr(r.json, "stdout"));
	if (st >= 0)
		http_reply_free(&r);
	return ok ? 0 : -1;
}

static int get(const char *path, struct http_reply *r)
{
	return http_request(&d, "GET", path, d.key, NULL, NULL, 0, r) < 0 ? -1 : r->status;
}

static void sha256_hex(const void *p, size_t n, char out[65])
{
	unsigned char md[32];
	unsigned len = 0;

	EVP_Digest(p, n, md, &len, EVP_sha256(), NULL);
	for (unsigned i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* Until the server answers through the proxy (not 502), up to 60 s. */
static int wait_listening(void)
{
	char path[160];

	snprintf(path, sizeof path, "/v1/sandboxes/%s/ports/8000/small.txt", sbx);
	for (int i = 0; i < 240; i++) {
		struct http_reply r;
		int st = get(path, &r);

		if (st >= 0)
			http_reply_free(&r);
		if (st == 200)
			return 0;
		usleep(250 * 1000);
	}
	return -1;
}

/* n requests of one kind: 0 GET path, 1 exec cmd. Latencies (us) into
 * v; failures counted. Returns the wall time (us). */
static int64_t requests(int kind, const char *what, int n, int64_t *v, int *failed)
{
	int64_t t0 = now_us();

	*failed = 0;
	for (int i = 0; i < n; i++) {
		struct http_reply r;
		int64_t s = now_us();
		int st = kind == 0 ? get(what, &r) : post_command("exec", what, &r);

		v[i] = now_us() - s;
		*failed += st != 200;
		if (st >= 0)
			http_reply_free(&r);
	}
	return now_us() - t0;
}

static double per_s(int n, int64_t us)
{
	return us > 0 ? n * 1e6 / (double)us : 0;
}

/* One download of path: MB/s, and whether its bytes hash to want. */
static double download(const char *path, size_t want_len, const char *want, bool *same)
{
	struct http_reply r;
	int64_t t0 = now_us();
	int st = get(path, &r);
	int64_t us = now_us() - t0;
	char got[65] = "";

	*same = false;
	if (st < 0)
		return 0;
	if (st == 200 && r.body_len == want_len) {
		sha256_hex(r.body, r.body_len, got);
		*same = strcmp(got, want) == 0;
	}
	http_reply_free(&r);
	return st == 200 && us > 0 ? (double)want_len / (double)us : 0; /* bytes/us = MB/s */
}

static long daemon_kib(const char *field)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/status", (int)d.pid);
	return proc_kib(path, field);
}

int main(void)
{
	int n = env_int_range("SBX_BENCH_REQUESTS", 100, 1, MAX_REQUESTS);
	int mib = env_int_range("SBX_BENCH_PORT_MIB", 64, 1, 1024);
	static int64_t vp[MAX_REQUESTS], ve[MAX_REQUESTS], vf[MAX_REQUESTS];
	char cmd[256], want[80] = "", path_small[160], path_files_small[160], path_big[160],
		       path_files_big[160];
	int fp, fe, ff;

	if (daemon_config_full(&d, "\"destroy_on_exit\": true, "
				   "\"network\": {\"bandwidth_bytes_per_s\": 1000000000}") < 0 ||
	    daemon_up(&d) < 0 || daemon_create_sandbox(&d, sbx, sizeof sbx) < 0) {
		fprintf(stderr, "ports bench: no full image, daemon or sandbox\n");
		daemon_down(&d);
		return 1;
	}
	snprintf(cmd, sizeof cmd,
		 "mkdir -p /srv/www && head -c 1024 /dev/urandom > /srv/www/small.txt && "
		 "head -c %d /dev/urandom > /srv/www/big.bin && sha256sum /srv/www/big.bin | "
		 "cut -c1-64",
		 mib << 20);
	struct http_reply r;
	if (run(cmd, want, sizeof want) < 0 ||
	    post_command("processes",
			 "cd /srv/www && exec python3 -m http.server 8000 --bind 127.0.0.1",
			 &r) != 201) {
		fprintf(stderr, "ports bench: the server did not start\n");
		daemon_down(&d);
		return 1;
	}
	http_reply_free(&r);
	want[64] = '\0';
	if (wait_listening() < 0) {
		fprintf(stderr, "ports bench: nothing listened on port 8000\n");
		daemon_down(&d);
		return 1;
	}
	snprintf(path_small, sizeof path_small, "/v1/sandboxes/%s/ports/8000/small.txt", sbx);
	snprintf(path_files_small, sizeof path_files_small,
		 "/v1/sandboxes/%s/files?path=/srv/www/small.txt", sbx);
	snprintf(path_big, sizeof path_big, "/v1/sandboxes/%s/ports/8000/big.bin", sbx);
	snprintf(path_files_big, sizeof path_files_big,
		 "/v1/sandboxes/%s/files?path=/srv/www/big.bin", sbx);
	long hwm0 = daemon_kib("VmHWM");

	int64_t tp = requests(0, path_small, n, vp, &fp);
	int64_t te = requests(1, "cat /srv/www/small.txt", n, ve, &fe);
	int64_t tf = requests(0, path_files_small, n, vf, &ff);
	struct stats sp = stats_of(vp, n), se = stats_of(ve, n), sf = stats_of(vf, n);

	printf("%d requests of a 1 KiB file, one after another\n", n);
	printf("  through the proxy  p50 %6.1f ms  p95 %6.1f ms  %6.1f req/s  failed %d\n",
	       sp.median / 1000.0, sp.p95 / 1000.0, per_s(n, tp), fp);
	printf("  exec cat           p50 %6.1f ms  p95 %6.1f ms  %6.1f req/s  failed %d\n",
	       se.median / 1000.0, se.p95 / 1000.0, per_s(n, te), fe);
	printf("  GET /files         p50 %6.1f ms  p95 %6.1f ms  %6.1f req/s  failed %d\n",
	       sf.median / 1000.0, sf.p95 / 1000.0, per_s(n, tf), ff);
	printf("  proxy / exec req/s x%.2f, proxy / files req/s x%.2f\n",
	       per_s(n, te) > 0 ? per_s(n, tp) / per_s(n, te) : 0,
	       per_s(n, tf) > 0 ? per_s(n, tp) / per_s(n, tf) : 0);

	int64_t mp[3], mf[3];
	int same_p = 0, same_f = 0;
	for (int i = 0; i < 3; i++) {
		bool s;

		mp[i] = (int64_t)(download(path_big, (size_t)mib << 20, want, &s) * 1000);
		same_p += s;
		mf[i] = (int64_t)(download(path_files_big, (size_t)mib << 20, want, &s) * 1000);
		same_f += s;
	}
	struct stats bp = stats_of(mp, 3), bf = stats_of(mf, 3);
	printf("%d MiB of random bytes, three times each (MB/s, median [min..max])\n", mib);
	printf("  through the proxy  %6.1f [%.1f..%.1f]  bytes matched %d of 3\n",
	       bp.median / 1000.0, bp.min / 1000.0, bp.max / 1000.0, same_p);
	printf("  GET /files         %6.1f [%.1f..%.1f]  bytes matched %d of 3\n",
	       bf.median / 1000.0, bf.min / 1000.0, bf.max / 1000.0, same_f);
	printf("  proxy / files x%.2f\n",
	       bf.median > 0 ? (double)bp.median / (double)bf.median : 0);
	printf("daemon VmHWM %ld KiB before, %ld KiB after\n", hwm0, daemon_kib("VmHWM"));
	daemon_down(&d);
	return 0;
}
