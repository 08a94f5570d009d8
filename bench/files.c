/* bench/files: file transfer through the whole service, against the raw
 * channel, in one run.
 *
 * Starts a real daemon the way the integration tests do (harness.h) with
 * one sandbox (tiny image, 1 vCPU, 1 GiB: the file lives in the guest's
 * RAM), and a second guest of the same size booted through vmm/ and spoken
 * to through agentless/ without HTTP. Then prints:
 *   - PUT and GET of SBX_BENCH_FILE_MIB (default 256) MiB of random bytes
 *     through the API (wall time, MB/s; the SHA-256 checked both ways);
 *   - the same transfer on the raw connection (agentless_xfer_* straight
 *     to the channel: what the protocol and the guest cost without HTTP),
 *     and the raw echo floor: 60 KiB PINGs one after another (MB/s of
 *     payload each way);
 *   - the API / raw ratios (the goal: >= 0.5);
 *   - the daemon's VmRSS before and after, and its VmHWM.
 *
 * Environment: SBX_BIN, SBX_TEST_IMAGE_DIR (as for the integration tests),
 * SBX_BENCH_FILE_MIB, SBX_BENCH_TRANSPORT (socket, the default, or stream:
 * the daemon's and the raw guest's exec channel). Prints figures; never fails on timing. Exit 1
 * only when it cannot run. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "bench.h"
#include "../tests/integration/harness.h"
#include "agentless/agentless.h"
#include "agentless/wire.h"
#include "vmm/vmm.h"

static struct daemon d;
static char sbx[64];

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static long daemon_kib(const char *field)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/status", (int)d.pid);
	return proc_kib(path, field);
}

static double mbps(size_t bytes, int64_t us)
{
	return us > 0 ? (double)bytes / (double)us : 0; /* bytes/us = MB/s */
}

/* ------------------------------------------------------------ the API */

static int connect_daemon(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_port = htons((uint16_t)d.port);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* GET the file and hash it as it streams (the bench holds no copy). */
static int api_get(size_t len, char sha[65], int64_t *us)
{
	char head[1024], buf[256 * 1024], *body;
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	unsigned char dig[32];
	unsigned int dlen = 0;
	size_t got = 0, hlen = 0;
	int64_t t0 = now_us();
	int fd = connect_daemon(), n;
	ssize_t r;
	bool in_body = false;

	if (fd < 0 || !md)
		return -1;
	n = snprintf(head, sizeof(head),
		     "GET /v1/sandboxes/%s/files?path=/tmp/bench.bin HTTP/1.1\r\nHost: x\r\n"
		     "Authorization: Bearer %s\r\nConnection: close\r\n\r\n",
		     sbx, d.key);
	if (write(fd, head, (size_t)n) != n)
		return -1;
	EVP_DigestInit_ex(md, EVP_sha256(), NULL);
	while ((r = read(fd, buf + hlen, sizeof(buf) - hlen)) > 0) {
		if (!in_body) {
			hlen += (size_t)r;
			buf[hlen < sizeof(buf) ? hlen : sizeof(buf) - 1] = '\0';
			body = strstr(buf, "\r\n\r\n");
			if (!body)
				continue;
			if (strncmp(buf, "HTTP/1.1 200", 12) != 0) {
				fprintf(stderr, "files bench: GET: %.200s\n", buf);
				return -1;
			}
			in_body = true;
			body += 4;
			EVP_DigestUpdate(md, body, hlen - (size_t)(body - buf));
			got += hlen - (size_t)(body - buf);
			hlen = 0;
			continue;
		}
		EVP_DigestUpdate(md, buf, (size_t)r);
		got += (size_t)r;
	}
	close(fd);
	*us = now_us() - t0;
	EVP_DigestFinal_ex(md, dig, &dlen);
	EVP_MD_CTX_free(md);
	sbx_hex(dig, dlen, sha);
	return got == len ? 0 : -1;
}

/* ------------------------------------------------- the raw connection */

struct raw {
	struct bench_raw g;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned wakes;
};

static void raw_wake(void *opaque)
{
	struct raw *raw = opaque;

	pthread_mutex_lock(&raw->lock);
	raw->wakes++;
	pthread_cond_broadcast(&raw->cond);
	pthread_mutex_unlock(&raw->lock);
}

/* Wait for the next wake after `seen` (or 100 ms; the tick drives the
 * stall deadline, so call it too). */
static unsigned raw_wait(struct raw *raw, unsigned seen)
{
	struct timespec ts = sbx_timespec_in(CLOCK_REALTIME, 100);

	pthread_mutex_lock(&raw->lock);
	if (raw->wakes == seen)
		pthread_cond_timedwait(&raw->cond, &raw->lock, &ts);
	seen = raw->wakes;
	pthread_mutex_unlock(&raw->lock);
	agentless_conn_tick(raw->g.conn, sbx_mono_ms());
	return seen;
}

/* The raw guest lives in raw->g (bench.h); the lock and wakes are the
 * transfer's. */
static void raw_release(struct raw *raw)
{
	bench_raw_free(&raw->g);
}

static int raw_start(struct raw *raw, const struct vmm_guest_spec *spec)
{
	return bench_raw_boot(&raw->g, d.state_dir, d.prefix, spec, "files");
}

/* PUT then GET `len` bytes over the raw connection; 0 or -1. */
static int raw_transfer(struct raw *raw, const uint8_t *data, size_t len, int64_t *put_us,
			int64_t *get_us)
{
	struct agentless_file_req put = {
	    .op = WIRE_FILE_OP_PUT, .path = "/tmp/raw.bin", .mode = 0644};
	struct agentless_file_req get = {.op = WIRE_FILE_OP_GET, .path = "/tmp/raw.bin"};
	struct agentless_xfer_status st;
	struct agentless_xfer *x;
	struct sbx_error err = {0};
	static uint8_t sink[256 * 1024];
	size_t off = 0, got = 0;
	unsigned seen = 0;
	int64_t t0 = now_us();

	if (agentless_xfer_start(raw->g.conn, &put, raw_wake, raw, &x, &err) < 0)
		return -1;
	while (off < len) {
		long n = agentless_xfer_write(raw->g.conn, x, data + off, len - off);

		if (n < 0)
			break;
		off += (size_t)n;
		if (off < len)
			seen = raw_wait(raw, seen);
	}
	agentless_xfer_end(raw->g.conn, x);
	do {
		agentless_xfer_status(x, &st);
		if (st.state == AGENTLESS_XFER_OPEN)
			seen = raw_wait(raw, seen);
	} while (st.state == AGENTLESS_XFER_OPEN);
	agentless_xfer_release(x);
	*put_us = now_us() - t0;
	if (st.state != AGENTLESS_XFER_DONE)
		return -1;

	t0 = now_us();
	if (agentless_xfer_start(raw->g.conn, &get, raw_wake, raw, &x, &err) < 0)
		return -1;
	for (;;) {
		size_t n = agentless_xfer_read(raw->g.conn, x, sink, sizeof sink);

		got += n;
		agentless_xfer_status(x, &st);
		if (st.state != AGENTLESS_XFER_OPEN && st.buffered == 0)
			break;
		if (n == 0)
			seen = raw_wait(raw, seen);
	}
	agentless_xfer_release(x);
	*get_us = now_us() - t0;
	return st.state == AGENTLESS_XFER_DONE && got == len ? 0 : -1;
}

/* 60 KiB PINGs back to back: payload MB/s each way. */
static double raw_echo(struct raw *raw, int n)
{
	struct sbx_error err = {0};
	int64_t total = 0;
	int done = 0;

	for (int i = 0; i < n; i++) {
		int64_t us =
		    agentless_conn_ping(raw->g.conn, WIRE_MAX_CHUNK, sbx_mono_ms() + 5000, &err);

		if (us < 0)
			break;
		total += us;
		done++;
	}
	return total > 0 ? (double)done * WIRE_MAX_CHUNK / (double)total : 0;
}

int main(void)
{
	int mib = env_int_range("SBX_BENCH_FILE_MIB", 256, 1, 900);
	size_t len = (size_t)mib << 20;
	struct vmm_guest_spec spec = {.vcpus = 1, .memory_mib = 1024};
	uint8_t *data = malloc(len);
	char want[65], got_sha[65], url[256];
	struct http_reply r;
	struct raw raw = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
	int64_t put_us = 0, get_us = 0, rput_us = 0, rget_us = 0;
	long rss0, rss1, rss2, hwm;
	int rc = 1;
	FILE *f = fopen("/dev/urandom", "r");

	if (!data || !f || fread(data, 1, len, f) != len)
		return 1;
	fclose(f);
	sbx_sha256_hex(data, len, want);
	sbx_log_set_level(SBX_LOG_WARN);
	const char *transport = bench_transport_stream() ? "stream" : "socket";
	char cfg[512];
	snprintf(cfg, sizeof(cfg),
		 "\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": 1024, "
		 "\"disk_gib\": 1, \"price_micro_usd_per_hour\": 90000}}, "
		 "\"max_file_bytes\": 1073741824, \"destroy_on_exit\": true, \"transport\": \"%s\"",
		 transport);
	daemon_config(&d, cfg);
	daemon_create_account(&d, "10");
	if (daemon_start(&d) < 0) {
		fprintf(stderr, "files bench: daemon did not start\n");
		return 1;
	}
	if (http_request(&d, "POST", "/v1/sandboxes", d.key, NULL, "{\"timeout_minutes\": 30}", 0,
			 &r) < 0 ||
	    r.status != 201) {
		fprintf(stderr, "files bench: create: %d %s\n", r.status, r.body ? r.body : "");
		goto out;
	}
	snprintf(sbx, sizeof(sbx), "%s", jstr(r.json, "id"));
	http_reply_free(&r);
	printf("sandbox %s: tiny image, 1 vCPU, 1 GiB, TCG, transport %s; file %d MiB\n", sbx,
	       transport, mib);

	rss0 = daemon_kib("VmRSS");
	snprintf(url, sizeof(url), "/v1/sandboxes/%s/files?path=/tmp/bench.bin", sbx);
	int64_t t0 = now_us();
	if (http_request(&d, "PUT", url, d.key, NULL, (const char *)data, len, &r) < 0 ||
	    r.status != 201 || !jstr(r.json, "sha256") || strcmp(jstr(r.json, "sha256"), want)) {
		fprintf(stderr, "files bench: PUT: %d %s\n", r.status, r.body ? r.body : "");
		goto out;
	}
	put_us = now_us() - t0;
	http_reply_free(&r);
	rss1 = daemon_kib("VmRSS");
	if (api_get(len, got_sha, &get_us) < 0 || strcmp(got_sha, want) != 0) {
		fprintf(stderr, "files bench: GET failed or its bytes differ\n");
		goto out;
	}
	rss2 = daemon_kib("VmRSS");
	hwm = daemon_kib("VmHWM");

	if (raw_start(&raw, &spec) < 0)
		goto out;
	double echo = raw_echo(&raw, 200);
	if (raw_transfer(&raw, data, len, &rput_us, &rget_us) < 0) {
		fprintf(stderr, "files bench: raw transfer failed\n");
		raw_release(&raw);
		goto out;
	}
	raw_release(&raw);

	printf("API PUT  %d MiB: %.2f s, %.1f MB/s (sha256 checked)\n", mib, put_us / 1e6,
	       mbps(len, put_us));
	printf("API GET  %d MiB: %.2f s, %.1f MB/s (sha256 checked)\n", mib, get_us / 1e6,
	       mbps(len, get_us));
	printf("raw PUT  %d MiB: %.2f s, %.1f MB/s (agentless, no HTTP)\n", mib, rput_us / 1e6,
	       mbps(len, rput_us));
	printf("raw GET  %d MiB: %.2f s, %.1f MB/s (agentless, no HTTP)\n", mib, rget_us / 1e6,
	       mbps(len, rget_us));
	printf("raw echo: 60 KiB PINGs one at a time: %.1f MB/s each way\n", echo);
	printf("ratio API / raw transfer: PUT %.2f, GET %.2f; API / raw echo: PUT %.2f, GET "
	       "%.2f\n",
	       mbps(len, put_us) / mbps(len, rput_us), mbps(len, get_us) / mbps(len, rget_us),
	       mbps(len, put_us) / echo, mbps(len, get_us) / echo);
	printf("daemon VmRSS: %ld KiB before, %ld after PUT, %ld after GET; VmHWM %ld KiB\n", rss0,
	       rss1, rss2, hwm);
	rc = 0;
out:
	daemon_stop(&d);
	daemon_down(&d);
	free(data);
	return rc;
}
