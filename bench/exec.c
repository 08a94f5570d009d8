/* bench/exec: exec through the whole service, against the channel floor.
 *
 * Starts a real daemon the way the integration tests do (harness.h: own
 * state dir, domain prefix, account) and one sandbox of the default size,
 * then prints, in one run:
 *   - `true` round trips through the API (POST /exec, n=SBX_BENCH_EXECS,
 *     default 50: median, p95) beside the raw PING round trip over the same
 *     transport (socket, the daemon's default), measured the way
 *     bench/channel does: a second guest of the same size booted through
 *     vmm/ and PING/PONG through agentless_conn_ping() (n=SBX_BENCH_PINGS,
 *     default 1000), plus `true` over that raw connection (agentless_exec,
 *     no HTTP), and the ratios;
 *   - a command printing 50 MB: wall time and the daemon's VmRSS / VmHWM;
 *   - 200 concurrent `sleep 5` execs on one sandbox (max_execs_per_sandbox
 *     and max_execs_in_flight_per_account raised to 256, no per-address
 *     connection cap): how many the guest ran at once, how many came back
 *     200, the wall time, and the daemon's thread count while they ran.
 *
 * With SBX_BENCH_BASE_BIN (a sandboxd built before a change, bench.h), a
 * daemon on that binary with its own sandbox runs the API measurements too:
 * the `true` round trips interleaved with SBX_BIN's, the 50 MB and the
 * concurrent execs after SBX_BIN's, each printed before/after (the raw
 * floor is measured once).
 *
 * Environment: SBX_BIN, SBX_TEST_IMAGE_DIR (as for the integration tests),
 * SBX_BENCH_BASE_BIN.
 * Prints figures; never fails on timing. Exit 1 only when it cannot run. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "../tests/integration/harness.h"
#include "agentless/agentless.h"
#include "vmm/vmm.h"

#define N_CONCURRENT 200

static struct daemon d;
static char sbx[64];
/* With SBX_BENCH_BASE_BIN: the daemon on the build before and its
 * sandbox; cur/cur_sbx are the ones the API helpers talk to. */
static struct daemon bd = {.tag = "b"};
static char bsbx[64];
static struct daemon *cur = &d;
static const char *cur_sbx = sbx;

static void use(struct daemon *dm)
{
	cur = dm;
	cur_sbx = dm == &d ? sbx : bsbx;
}

static int env_int(const char *name, int def)
{
	return env_int_max(name, def, 999999);
}

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static long daemon_status_kib(const char *field)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/status", (int)cur->pid);
	return proc_kib(path, field);
}

static int exec_api(const char *command, const char *extra, struct http_reply *r)
{
	char path[128], body[1024];
	json_object *o = json_object_new_object();

	json_object_object_add(o, "command", json_object_new_string(command));
	snprintf(body, sizeof(body), "%s",
		 json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
	if (extra) {
		body[strlen(body) - 1] = '\0';
		snprintf(body + strlen(body), sizeof(body) - strlen(body), ", %s}", extra);
	}
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", cur_sbx);
	return http_request(cur, "POST", path, cur->key, NULL, body, 0, r);
}

/* ------------------------------------------------- the raw channel floor */

struct raw {
	struct bench_raw g;
};

static void raw_release(struct raw *raw)
{
	bench_raw_free(&raw->g);
}

static int raw_start(struct raw *raw, const struct vmm_guest_spec *spec)
{
	return bench_raw_boot(&raw->g, d.state_dir, d.prefix, spec, "exec");
}

static struct stats raw_ping(struct raw *raw, int n)
{
	int64_t *v = calloc((size_t)n, sizeof(*v));
	struct sbx_error err = {0};
	int done = 0;

	for (int i = 0; v && i < n / 10; i++) /* warm-up */
		agentless_conn_ping(raw->g.conn, 8, sbx_mono_ms() + 5000, &err);
	for (int i = 0; v && i < n; i++) {
		int64_t us = agentless_conn_ping(raw->g.conn, 8, sbx_mono_ms() + 5000, &err);

		if (us < 0)
			break;
		v[done++] = us;
	}
	struct stats s = stats_of(v, done);
	free(v);
	return s;
}

static struct stats raw_exec_true(struct raw *raw, int n)
{
	int64_t *v = calloc((size_t)n, sizeof(*v));
	struct agentless_exec_req req = {
	    .command = "true",
	    .command_len = 4,
	    .cwd = "/",
	    .timeout_ms = 10000,
	    .stdout_cap = 1 << 20,
	    .stderr_cap = 1 << 20,
	};
	int done = 0;

	for (int i = 0; v && i < n; i++) {
		struct agentless_exec_result res;
		struct sbx_error err = {0};
		int64_t t0 = now_us();

		if (agentless_exec(raw->g.conn, &req, &res, &err) < 0)
			break;
		v[done++] = now_us() - t0;
		agentless_exec_result_release(&res);
	}
	struct stats s = stats_of(v, done);
	free(v);
	return s;
}

/* ------------------------------------------------------------ the API */

/* One `true` through the API of cur: microseconds, or -1. */
static int64_t exec_true_us(void)
{
	struct http_reply r;
	int64_t t0 = now_us();
	int rc = exec_api("true", NULL, &r);
	int64_t us = now_us() - t0;

	if (rc < 0 || r.status != 200) {
		fprintf(stderr, "exec true: %d %s\n", r.status, r.body ? r.body : "");
		us = -1;
	}
	http_reply_free(&r);
	return us;
}

/* n `true` round trips on d, and with base on bd interleaved (*before). */
static struct stats api_exec_true(int n, bool base, struct stats *before)
{
	int64_t *v = calloc((size_t)n, sizeof(*v)), *bv = calloc((size_t)n, sizeof(*bv));
	int done = 0, bdone = 0;
	bool ok = true, bok = base;

	for (int i = 0; v && bv && (ok || bok) && i < n + 3; i++) {
		int64_t us;

		if (ok && (us = exec_true_us()) < 0)
			ok = false;
		else if (ok && i >= 3) /* the first few warm the path up */
			v[done++] = us;
		use(&bd);
		if (bok && (us = exec_true_us()) < 0)
			bok = false;
		else if (bok && i >= 3)
			bv[bdone++] = us;
		use(&d);
	}
	struct stats s = stats_of(v, done);
	*before = stats_of(bv, bdone);
	free(v);
	free(bv);
	return s;
}

struct job {
	int status;
	int64_t ms;
};

static void *job_run(void *arg)
{
	struct job *j = arg;
	struct http_reply r;
	int64_t t0 = sbx_mono_ms();

	j->status = exec_api("sleep 5", NULL, &r) < 0 ? -1 : r.status;
	j->ms = sbx_mono_ms() - t0;
	http_reply_free(&r);
	return NULL;
}

static void print_stats(const char *what, struct stats s)
{
	printf("%-34s n=%-5d median %8.3f ms  p95 %8.3f ms  min %8.3f ms\n", what, s.n,
	       (double)s.median / 1000.0, (double)s.p95 / 1000.0, (double)s.min / 1000.0);
}

/* 2. 50 MB of output (763 x 64 KiB = 50003968 bytes; busybox head -c
 * is itself slow under TCG), beside the same bytes piped to cat in the
 * guest, on cur: the round trip in ms (-1). */
static int64_t big_output(void)
{
	struct http_reply r;

	int64_t ms_out = -1;
	{
		long rss0 = daemon_status_kib("VmRSS"), hwm0 = daemon_status_kib("VmHWM");
		int64_t base = -1, t0;

		if (exec_api("dd if=/dev/zero bs=65536 count=763 2>/dev/null | cat >/dev/null",
			     "\"timeout_ms\": 120000", &r) == 0) {
			base = jint(r.json, "duration_ms");
			http_reply_free(&r);
		}
		t0 = sbx_mono_ms();
		if (exec_api("dd if=/dev/zero bs=65536 count=763 2>/dev/null",
			     "\"timeout_ms\": 120000", &r) == 0) {
			int64_t ms = sbx_mono_ms() - t0;

			ms_out = ms;
			printf("%s50 MB to stdout: %d in %lld ms round trip (%lld ms in the guest, "
			       "%.1f MB/s; in-guest pipe to cat: %lld ms), truncated %d; daemon "
			       "VmRSS %ld -> %ld KiB, VmHWM %ld -> %ld KiB\n",
			       cur == &bd ? "(before) " : "", r.status, (long long)ms,
			       (long long)jint(r.json, "duration_ms"),
			       50.004 * 1000.0 / (double)(ms ? ms : 1), (long long)base,
			       jbool(r.json, "truncated"), rss0, daemon_status_kib("VmRSS"), hwm0,
			       daemon_status_kib("VmHWM"));
			http_reply_free(&r);
		}
	}
	return ms_out;
}

/* 3. 200 concurrent `sleep 5` on cur's sandbox: the wall time in ms. */
static int64_t concurrent(void)
{
	struct http_reply r;
	int64_t wall = -1;

	{
		static struct job jobs[N_CONCURRENT];
		static pthread_t th[N_CONCURRENT];
		long threads0 = daemon_status_kib("Threads"), threads_peak = 0;
		int64_t t0 = sbx_mono_ms();
		int ok = 0, started = 0;
		long in_guest = -1;

		for (int i = 0; i < N_CONCURRENT; i++)
			if (pthread_create(&th[i], NULL, job_run, &jobs[i]) == 0)
				started++;
		for (int k = 0; k < 15; k++) {
			long t;

			usleep(200 * 1000);
			t = daemon_status_kib("Threads");
			if (t > threads_peak)
				threads_peak = t;
		}
		if (exec_api("ps -o args | grep -c '^sleep 5'", NULL, &r) == 0) {
			if (r.status == 200 && jstr(r.json, "stdout"))
				in_guest = strtol(jstr(r.json, "stdout"), NULL, 10);
			else
				fprintf(stderr, "count: %d %s\n", r.status, r.body);
			http_reply_free(&r);
		}
		for (int i = 0; i < started; i++)
			pthread_join(th[i], NULL);
		for (int i = 0; i < started; i++)
			ok += jobs[i].status == 200;
		wall = sbx_mono_ms() - t0;
		printf(
		    "%s%d concurrent `sleep 5`: %d x 200 in %lld ms; %ld running in the guest at "
		    "once; daemon threads %ld idle, %ld peak while they ran\n",
		    cur == &bd ? "(before) " : "", started, ok, (long long)wall, in_guest, threads0,
		    threads_peak);
		for (int i = 0, shown = 0; i < started && shown < 3; i++)
			if (jobs[i].status != 200) {
				fprintf(stderr, "  job %d: status %d after %lld ms\n", i,
					jobs[i].status, (long long)jobs[i].ms);
				shown++;
			}
	}
	return wall;
}

/* Start dm and create its sandbox (id into id[64]); -1 on failure. Part 3
 * measures concurrency: no cap below its 200 execs (in the sandbox, per
 * account, per client address); boot_timeout_ms: two daemons boot on a
 * shared host. */
static int up(struct daemon *dm, char *id)
{
	struct http_reply r;

	daemon_config(dm, "\"max_execs_per_sandbox\": 256, \"max_execs_in_flight_per_account\": "
			  "256, \"http_connections_per_ip\": 0, \"destroy_on_exit\": true, "
			  "\"boot_timeout_ms\": 300000");
	daemon_create_account(dm, "10");
	if (daemon_start(dm) < 0) {
		fprintf(stderr, "exec bench: daemon %s did not start\n", dm->bin ? dm->bin : "");
		return -1;
	}
	if (http_request(dm, "POST", "/v1/sandboxes", dm->key, NULL, "{\"timeout_minutes\": 15}", 0,
			 &r) < 0 ||
	    r.status != 201) {
		fprintf(stderr, "exec bench: create: %d %s\n", r.status, r.body ? r.body : "");
		http_reply_free(&r);
		return -1;
	}
	snprintf(id, 64, "%s", jstr(r.json, "id"));
	http_reply_free(&r);
	return 0;
}

/* One sample as stats (for bench_before_after). */
static struct stats one(int64_t v)
{
	struct stats s = {0};

	if (v >= 0)
		s = (struct stats){.median = v, .p95 = v, .min = v, .max = v, .n = 1};
	return s;
}

int main(void)
{
	int n_exec = env_int("SBX_BENCH_EXECS", 50), n_ping = env_int("SBX_BENCH_PINGS", 1000);
	struct vmm_guest_spec spec = {.vcpus = 2, .memory_mib = 4096, .sandbox_id = "bench"};
	struct raw raw;
	struct stats api_before;
	bool base = false;
	int rc = 1;

	sbx_log_set_level(SBX_LOG_WARN);
	if (up(&d, sbx) < 0)
		goto out_daemon;
	printf("sandbox %s: size small (2 vCPU, 4 GiB), TCG, transport socket\n", sbx);
	if ((bd.bin = bench_base_bin())) {
		base = up(&bd, bsbx) == 0;
		if (base)
			printf("before: %s, sandbox %s\n", bd.bin, bsbx);
	}

	/* 1. round trips */
	struct stats api = api_exec_true(n_exec, base, &api_before);
	if (raw_start(&raw, &spec) < 0)
		goto out_daemon;
	struct stats ping = raw_ping(&raw, n_ping);
	struct stats rawx = raw_exec_true(&raw, n_exec);
	raw_release(&raw);
	print_stats("exec `true` via API (HTTP)", api);
	print_stats("exec `true` raw (agentless)", rawx);
	print_stats("PING raw (agentless, socket)", ping);
	if (ping.median > 0 && rawx.median > 0)
		printf("ratio API exec / PING: median %.1f, p95 %.1f; API exec / raw exec: "
		       "median %.2f\n",
		       (double)api.median / (double)ping.median, (double)api.p95 / (double)ping.p95,
		       (double)api.median / (double)rawx.median);
	if (base)
		bench_before_after("exec `true` via API", api_before, api, 1000.0, "ms");

	/* 2. 50 MB of output; 3. 200 concurrent sleep 5 */
	int64_t mb50 = big_output(), conc = concurrent();
	if (base) {
		use(&bd);
		int64_t bmb50 = big_output(), bconc = concurrent();
		use(&d);
		bench_before_after("50 MB to stdout round trip", one(bmb50), one(mb50), 1, "ms");
		bench_before_after("200 concurrent sleep 5 wall", one(bconc), one(conc), 1, "ms");
	}
	rc = 0;

out_daemon:
	daemon_stop(&d);
	destroy_own_domains(&d);
	if (bd.bin) {
		daemon_stop(&bd);
		destroy_own_domains(&bd);
	}
	return rc;
}
