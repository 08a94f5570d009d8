/* bench/create: how fast a sandbox starts, against the floor.
 *
 * Starts real daemons the way the integration tests do (harness.h: own
 * state dir, domain prefix, account; tiny image; default size small,
 * 2 vCPU / 4 GiB) and prints, in one run:
 *   1. cold create through the API (POST /v1/sandboxes with no pool, then
 *      DELETE; n=SBX_BENCH_CREATES, default 10) interleaved with the floor:
 *      the same domain XML (vmm_domain_xml) given to virDomainCreateXML by
 *      this tool, which then connects to the channel socket itself and
 *      waits for the guest's HELLO frame; median, p95, and the ratio;
 *   2. warm create through the API with a pool of 2 small guests, each made
 *      after the pool refilled: the client's round trip and the part spent
 *      in the daemon (startup_ms), p50 and p95;
 *   3. a burst of 20 concurrent creates, without a pool and with a pool of
 *      2: the time until all 20 are ready.
 *
 * With SBX_BENCH_REMOTE_URI (a remote host's qemu+tls:// URI, e.g. from
 * scripts/remote-host.sh) and SBX_BENCH_REMOTE_STATE (that host's state
 * dir, holding images/tiny/{vmlinux,initramfs.cpio.gz}), a second daemon
 * on that host (transport stream, database here) runs the same cold
 * creates interleaved with the local ones in 1., and warm creates
 * alternating with the local ones in 2.; printed with remote/local ratios.
 *
 * With SBX_BENCH_BASE_BIN (a sandboxd built before a change, bench.h), a
 * daemon on that binary runs the cold creates of 1. and the warm creates
 * of 2. interleaved with SBX_BIN's, each printed before/after (the bursts
 * and the floor run on SBX_BIN's only).
 *
 * Environment: SBX_BIN, SBX_TEST_IMAGE_DIR, SBX_BENCH_CREATES,
 * SBX_BENCH_BURST (default 20), SBX_BENCH_BASE_BIN. Prints figures; never fails on timing.
 * Exit 1 only when it cannot run. */
#include <libvirt/libvirt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "bench.h"
#include "../tests/integration/harness.h"
#include "agentless/wire.h"
#include "vmm/vmm.h"

static struct daemon d;
/* The remote host's daemon (SBX_BENCH_REMOTE_URI), and the one the API
 * helpers below talk to. */
static struct daemon rd;
static struct daemon *cur = &d;
/* With SBX_BENCH_BASE_BIN: the daemon on the build before (bench.h). */
static struct daemon bd = {.tag = "b"};

/* Start the base daemon with the same extra config; false when there is
 * none or it did not start. */
static bool base_start(const char *extra)
{
	if (!(bd.bin = bench_base_bin()))
		return false;
	daemon_config(&bd, extra);
	daemon_create_account(&bd, "100");
	if (daemon_start(&bd) < 0) {
		fprintf(stderr, "create bench: the base daemon (%s) did not start\n", bd.bin);
		return false;
	}
	return true;
}

static void base_stop(void)
{
	daemon_stop(&bd);
	destroy_own_domains(&bd);
}

static int env_int(const char *name, int def)
{
	return env_int_max(name, def, 99999);
}

/* POST /v1/sandboxes; fills id, startup_ms; returns the status. */
static int api_create(char id[64], int64_t *startup_ms, char path[8])
{
	struct http_reply r;
	int st;

	if (http_request(cur, "POST", "/v1/sandboxes", cur->key, NULL, "{\"timeout_minutes\": 10}",
			 0, &r) < 0)
		return -1;
	st = r.status;
	if (st == 201) {
		snprintf(id, 64, "%s", jstr(r.json, "id"));
		if (startup_ms)
			*startup_ms = jint(r.json, "startup_ms");
		if (path)
			snprintf(path, 8, "%s",
				 jstr(r.json, "startup_path") ? jstr(r.json, "startup_path") : "");
	} else {
		fprintf(stderr, "create: %d %s\n", st, r.body);
	}
	http_reply_free(&r);
	return st;
}

static void api_delete(const char *id)
{
	struct http_reply r;
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	if (http_request(cur, "DELETE", path, cur->key, NULL, NULL, 0, &r) == 0)
		http_reply_free(&r);
}

static int pool_ready(void)
{
	struct http_reply r;
	json_object *st, *pool, *small;
	int n = -1;

	if (http_request(cur, "GET", "/v1/limits", NULL, NULL, NULL, 0, &r) < 0)
		return -1;
	if (json_object_object_get_ex(r.json, "startup", &st) &&
	    json_object_object_get_ex(st, "pool", &pool) &&
	    json_object_object_get_ex(pool, "small", &small))
		n = (int)jint(small, "ready");
	http_reply_free(&r);
	return n;
}

static int wait_pool(int want, int64_t timeout_ms)
{
	int64_t end = sbx_mono_ms() + timeout_ms;

	while (sbx_mono_ms() < end) {
		if (pool_ready() >= want)
			return 0;
		usleep(100 * 1000);
	}
	return -1;
}

/* ------------------------------------------------------------ the floor */

struct floor_ctx {
	virConnectPtr conn;
	struct vmm_config cfg;
	char kernel[512], initrd[512], run[512];
	int seq;
};

/* Create the daemon's domain XML directly and wait for HELLO on the
 * channel socket. Returns ms, or -1. */
static int64_t floor_once(struct floor_ctx *f)
{
	struct vmm_guest_spec spec = {.vcpus = 2, .memory_mib = 4096};
	char name[64], sock[600];
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	uint8_t hdr[WIRE_HEADER_LEN];
	struct wire_header h;
	int64_t t0, ms = -1;
	virDomainPtr dom;
	char *xml;
	int fd = -1;
	size_t got = 0;

	snprintf(name, sizeof(name), "%sfloor-%d", d.prefix, f->seq++);
	xml = vmm_domain_xml(&f->cfg, name, &spec, false);
	if (!xml)
		return -1;
	snprintf(sock, sizeof(sock), "%s/%s.sock", f->run, name);
	if (strlen(sock) >= sizeof(sun.sun_path)) {
		free(xml);
		return -1;
	}
	t0 = sbx_mono_ms();
	dom = virDomainCreateXML(f->conn, xml, 0);
	free(xml);
	if (!dom)
		return -1;
	memcpy(sun.sun_path, sock, strlen(sock) + 1);
	while (sbx_mono_ms() - t0 < 60000) {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0)
			break;
		close(fd);
		fd = -1;
		usleep(2000);
	}
	while (fd >= 0 && got < sizeof(hdr)) {
		ssize_t n = read(fd, hdr + got, sizeof(hdr) - got);

		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (got == sizeof(hdr) && wire_header_decode(hdr, 1 << 20, &h) == 0 && h.type == WIRE_HELLO)
		ms = sbx_mono_ms() - t0;
	if (fd >= 0)
		close(fd);
	virDomainDestroy(dom);
	virDomainFree(dom);
	unlink(sock);
	return ms;
}

/* ------------------------------------------------------------ the burst */

struct burst_call {
	pthread_t t;
	int status;
	char id[64];
	char path[8];
	int64_t done_ms;
	int64_t t0;
};

static void *burst_main(void *arg)
{
	struct burst_call *c = arg;

	c->status = api_create(c->id, NULL, c->path);
	c->done_ms = sbx_mono_ms() - c->t0;
	return NULL;
}

static void burst(const char *label, int n)
{
	struct burst_call *c = calloc((size_t)n, sizeof(*c));
	int64_t t0 = sbx_mono_ms(), last = 0;
	int ok = 0, warm = 0;

	for (int i = 0; i < n; i++) {
		c[i].t0 = t0;
		pthread_create(&c[i].t, NULL, burst_main, &c[i]);
	}
	for (int i = 0; i < n; i++) {
		pthread_join(c[i].t, NULL);
		if (c[i].status == 201) {
			ok++;
			warm += strcmp(c[i].path, "warm") == 0;
			if (c[i].done_ms > last)
				last = c[i].done_ms;
		}
	}
	int64_t first = INT64_MAX;
	for (int i = 0; i < n; i++)
		if (c[i].status == 201 && c[i].done_ms < first)
			first = c[i].done_ms;
	printf("burst of %d creates, %s: %d ready (%d warm), all ready after %lld ms (first "
	       "after %lld ms)\n",
	       n, label, ok, warm, (long long)last, (long long)(ok ? first : -1));
	for (int i = 0; i < n; i++)
		if (c[i].status == 201)
			api_delete(c[i].id);
	free(c);
}

/* Start rd against the remote host: its state dir (images, overlays,
 * console logs) and URI; the database stays on this machine. `extra` are
 * more config members or "". 0 or -1. */
static int remote_start(const char *uri, const char *state, const char *extra)
{
	char cmd[600];

	snprintf(rd.prefix, sizeof(rd.prefix), "r%d-", (int)getpid());
	snprintf(rd.state_dir, sizeof(rd.state_dir), "/var/lib/sandboxd-test/%d-remote",
		 (int)getpid());
	snprintf(cmd, sizeof(cmd), "mkdir -p -m 0755 %s", rd.state_dir);
	if (run_cmd(cmd) != 0)
		return -1;
	snprintf(rd.config, sizeof(rd.config), "%s/config.json", rd.state_dir);
	snprintf(rd.db, sizeof(rd.db), "%s/sandboxd.db", rd.state_dir);
	FILE *f = fopen(rd.config, "w");
	if (!f)
		return -1;
	fprintf(f,
		"{\"state_dir\": \"%s\", \"db_path\": \"%s\", \"libvirt_uri\": \"%s\", "
		"\"transport\": \"stream\", \"domain_prefix\": \"%s\", \"accel\": \"tcg\", "
		"\"allow_tcg\": true, \"boot_timeout_ms\": 300000%s%s}\n",
		state, rd.db, uri, rd.prefix, extra[0] ? ", " : "", extra);
	fclose(f);
	daemon_create_account(&rd, "100");
	if (daemon_start(&rd) < 0) {
		fprintf(stderr, "create bench: the remote daemon did not start\n");
		return -1;
	}
	return 0;
}

/* One cold create + delete through `dm`: ms, or -1. */
static int64_t cold_once(struct daemon *dm)
{
	char id[64];
	int64_t t0 = sbx_mono_ms(), ms = -1;

	cur = dm;
	if (api_create(id, NULL, NULL) == 201) {
		ms = sbx_mono_ms() - t0;
		api_delete(id);
	}
	cur = &d;
	return ms;
}

/* Destroy what rd left on the remote host (its pool's guests). */
static void remote_destroy(const char *uri)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd),
		 "for n in $(virsh -c '%s' list --name 2>/dev/null | grep '^%s'); do "
		 "virsh -c '%s' destroy $n >/dev/null 2>&1; done",
		 uri, rd.prefix, uri);
	run_cmd(cmd);
}

static void print_ratio(const char *label, struct stats s, struct stats base)
{
	printf("%s: n=%d median %lld ms, p95 %lld ms (min %lld, max %lld); remote/local median "
	       "%.3f\n",
	       label, s.n, (long long)s.median, (long long)s.p95, (long long)s.min,
	       (long long)s.max, base.median > 0 ? (double)s.median / (double)base.median : 0.0);
}

int main(void)
{
	int n = env_int("SBX_BENCH_CREATES", 10), nburst = env_int("SBX_BENCH_BURST", 20);
	int64_t *api = calloc((size_t)n, sizeof(int64_t)),
		*flo = calloc((size_t)n, sizeof(int64_t));
	int64_t *warm_rt = calloc((size_t)n, sizeof(int64_t));
	int64_t *warm_d = calloc((size_t)n, sizeof(int64_t));
	int64_t *rcold = calloc((size_t)n, sizeof(int64_t)),
		*rwarm = calloc((size_t)n, sizeof(int64_t));
	int64_t *bcold = calloc((size_t)n, sizeof(int64_t)),
		*bwarm_rt = calloc((size_t)n, sizeof(int64_t)),
		*bwarm_d = calloc((size_t)n, sizeof(int64_t));
	int na = 0, nf = 0, nw = 0, nrc = 0, nrw = 0, nbc = 0, nbw = 0;
	bool base;
	struct floor_ctx f = {0};
	const char *ruri = getenv("SBX_BENCH_REMOTE_URI");
	const char *rstate = getenv("SBX_BENCH_REMOTE_STATE");
	bool remote = ruri && ruri[0] && rstate && rstate[0];

	/* 1. Cold through the API vs the floor, interleaved. */
	daemon_config(&d, "\"boot_timeout_ms\": 300000");
	daemon_create_account(&d, "100");
	if (daemon_start(&d) < 0) {
		fprintf(stderr, "create bench: daemon did not start\n");
		return 1;
	}
	snprintf(f.kernel, sizeof(f.kernel), "%s/images/vmlinux", d.state_dir);
	snprintf(f.initrd, sizeof(f.initrd), "%s/images/initramfs.cpio.gz", d.state_dir);
	snprintf(f.run, sizeof(f.run), "%s/run", d.state_dir);
	f.cfg = bench_vmm_config(d.prefix, f.kernel, f.initrd, f.run);
	f.conn = virConnectOpen("qemu:///system");
	if (!f.conn) {
		fprintf(stderr, "create bench: libvirt unreachable\n");
		return 1;
	}
	/* 1b. With a remote host: its daemon's cold creates interleaved too. */
	if (remote && remote_start(ruri, rstate, "") < 0)
		remote = false;
	/* 1c. With a base binary: its cold creates interleaved too. */
	base = base_start("\"boot_timeout_ms\": 300000");
	/* one warm-up of each */
	{
		char id[64];

		if (api_create(id, NULL, NULL) == 201)
			api_delete(id);
		if (base)
			cold_once(&bd);
		floor_once(&f);
		if (remote)
			cold_once(&rd);
	}
	for (int i = 0; i < n; i++) {
		char id[64];
		int64_t t0 = sbx_mono_ms(), ms;

		if (api_create(id, NULL, NULL) == 201) {
			api[na++] = sbx_mono_ms() - t0;
			api_delete(id);
		}
		ms = floor_once(&f);
		if (ms >= 0)
			flo[nf++] = ms;
		if (remote && (ms = cold_once(&rd)) >= 0)
			rcold[nrc++] = ms;
		if (base && (ms = cold_once(&bd)) >= 0)
			bcold[nbc++] = ms;
	}
	struct stats sa = stats_of(api, na), sf = stats_of(flo, nf);
	printf("cold create via API  : n=%d median %lld ms, p95 %lld ms (min %lld, max %lld)\n",
	       sa.n, (long long)sa.median, (long long)sa.p95, (long long)sa.min, (long long)sa.max);
	printf("floor (CreateXML+HELLO): n=%d median %lld ms, p95 %lld ms (min %lld, max %lld)\n",
	       sf.n, (long long)sf.median, (long long)sf.p95, (long long)sf.min, (long long)sf.max);
	if (sf.median > 0 && sf.p95 > 0)
		printf("ratio API/floor      : median %.3f, p95 %.3f\n",
		       (double)sa.median / (double)sf.median, (double)sa.p95 / (double)sf.p95);
	if (remote) {
		print_ratio("remote cold create   ", stats_of(rcold, nrc), sa);
		daemon_stop(&rd);
		remote_destroy(ruri);
	}
	if (base) {
		bench_before_after("cold create via API", stats_of(bcold, nbc), sa, 1, "ms");
		base_stop();
	}
	fflush(stdout);
	burst("no pool", nburst);
	fflush(stdout);
	virConnectClose(f.conn);
	daemon_stop(&d);
	destroy_own_domains(&d);

	/* 2. Warm through the API with a pool of 2; 3. the burst with it. */
	daemon_config(&d, "\"pool\": {\"small\": 2}, \"boot_timeout_ms\": 300000");
	daemon_create_account(&d, "100");
	if (daemon_start(&d) < 0) {
		fprintf(stderr, "create bench: daemon did not start\n");
		return 1;
	}
	if (remote && remote_start(ruri, rstate, "\"pool\": {\"small\": 2}") < 0)
		remote = false;
	base = base_start("\"pool\": {\"small\": 2}, \"boot_timeout_ms\": 300000");
	for (int i = 0; i < n; i++) {
		char id[64], path[8];
		int64_t t0, sm = -1;

		if (wait_pool(2, 120000) < 0)
			break;
		t0 = sbx_mono_ms();
		if (api_create(id, &sm, path) == 201) {
			warm_rt[nw] = sbx_mono_ms() - t0;
			warm_d[nw++] = sm;
			if (strcmp(path, "warm") != 0)
				printf("(create %d took the %s path)\n", i, path);
			api_delete(id);
		}
		cur = &rd;
		if (remote && wait_pool(2, 120000) == 0) {
			t0 = sbx_mono_ms();
			if (api_create(id, NULL, path) == 201) {
				rwarm[nrw++] = sbx_mono_ms() - t0;
				if (strcmp(path, "warm") != 0)
					printf("(remote create %d took the %s path)\n", i, path);
				api_delete(id);
			}
		}
		cur = &d;
		if (!base)
			continue;
		cur = &bd;
		if (wait_pool(2, 120000) == 0) {
			int64_t bsm = -1;

			t0 = sbx_mono_ms();
			if (api_create(id, &bsm, path) == 201) {
				bwarm_rt[nbw] = sbx_mono_ms() - t0;
				bwarm_d[nbw++] = bsm;
				if (strcmp(path, "warm") != 0)
					printf("(base create %d took the %s path)\n", i, path);
				api_delete(id);
			}
		}
		cur = &d;
	}
	struct stats wr = stats_of(warm_rt, nw), wd = stats_of(warm_d, nw);
	printf("warm create via API  : n=%d round trip p50 %lld ms, p95 %lld ms; in the daemon "
	       "(startup_ms) p50 %lld ms, p95 %lld ms\n",
	       nw, (long long)wr.median, (long long)wr.p95, (long long)wd.median,
	       (long long)wd.p95);
	if (remote) {
		print_ratio("remote warm create   ", stats_of(rwarm, nrw), wr);
		daemon_stop(&rd);
		remote_destroy(ruri);
	}
	if (base) {
		bench_before_after("warm create round trip", stats_of(bwarm_rt, nbw), wr, 1, "ms");
		bench_before_after("warm create startup_ms", stats_of(bwarm_d, nbw), wd, 1, "ms");
		base_stop();
	}
	fflush(stdout);
	wait_pool(2, 120000);
	burst("pool of 2 (full)", nburst);
	daemon_stop(&d);
	destroy_own_domains(&d);
	return 0;
}
