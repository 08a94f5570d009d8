/* bench/executions: one-shot `print(1)` and `console.log(1)` through the
 * API (POST /v1/sandbox/executions, full image), in one run, three ways:
 *   1. warm, interpreter waiting: "execution_pool": {"python": 1, "node": 1}
 *      (each request sent once /v1/limits shows that runtime's guest ready);
 *   2. warm, the old way: "pool": {"small": 1}, a pooled guest in which the
 *      launcher starts the interpreter on request (sent once ready);
 *   3. cold: no pool, a guest booted per request.
 * For each: the client's round trip p50/p95 (min..max) and billing.billed_ms
 * p50; then the host memory (qemu VmRSS, PSS) of the pooled guests of 1
 * and 2, and the load average at start and end (the host is shared).
 * The image's runtime versions (GET /v1/runtimes) head the output, and each
 * node row is followed by Node 18's figures for the same way from
 * docs/benchmarks.md (the image before issue 30), for comparison.
 *
 * With SBX_BENCH_BASE_BIN (a sandboxd built before a change, bench.h), a
 * second daemon on that binary with the same pools runs every way too, its
 * requests interleaved with SBX_BIN's, and each row is followed by the
 * before figures and after/before.
 *
 * Environment: SBX_BIN, SBX_TEST_FULL_IMAGE_DIR, SBX_BENCH_N (default 10
 * per runtime and way), SBX_BENCH_WAYS (default "waiting,old,cold": the
 * ways to run, for a quick look at one), SBX_BENCH_BASE_BIN. Prints figures; never fails on timing.
 * Exit 1 only when it cannot run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "../tests/integration/harness.h"

static struct daemon d;
/* With SBX_BENCH_BASE_BIN: the daemon on the build before; cur is the one
 * the helpers below talk to. */
static struct daemon bd = {.tag = "b"};
static struct daemon *cur = &d;

static void loadavg(const char *when)
{
	char buf[128] = "";
	FILE *f = fopen("/proc/loadavg", "r");

	if (f) {
		if (!fgets(buf, sizeof buf, f))
			buf[0] = '\0';
		fclose(f);
	}
	printf("load average %s: %s", when, buf[0] ? buf : "?\n");
}

/* startup.executions.pool.<rt>.ready, or startup.pool.small.ready when
 * rt is NULL; -1 on error. */
static int ready(const char *rt)
{
	struct http_reply r;
	json_object *st, *x, *pool, *e;
	int n = -1;

	if (http_request(cur, "GET", "/v1/limits", NULL, NULL, NULL, 0, &r) < 0)
		return -1;
	if (r.status == 200 && json_object_object_get_ex(r.json, "startup", &st) &&
	    (rt ? json_object_object_get_ex(st, "executions", &x) : (x = st, true)) &&
	    json_object_object_get_ex(x, "pool", &pool) &&
	    json_object_object_get_ex(pool, rt ? rt : "small", &e))
		n = (int)jint(e, "ready");
	http_reply_free(&r);
	return n;
}

static int wait_ready(const char *rt)
{
	int64_t end = sbx_mono_ms() + 600000;

	while (sbx_mono_ms() < end) {
		if (ready(rt) >= 1)
			return 0;
		usleep(100 * 1000);
	}
	return -1;
}

/* wait_ready on d, and on bd when it runs. */
static int wait_ready_all(const char *rt)
{
	int rc = wait_ready(rt);

	if (rc == 0 && bd.pid > 0) {
		cur = &bd;
		rc = wait_ready(rt);
		cur = &d;
	}
	return rc;
}

/* One execution; round trip and billed ms; -1 unless 200 with stdout 1. */
static int run_one(const char *runtime, const char *code, int64_t *rt_ms, int64_t *billed,
		   bool *prestarted)
{
	char body[256];
	struct http_reply r;
	json_object *bill;
	int64_t t0 = sbx_mono_ms();
	int rc = -1;

	snprintf(body, sizeof body, "{\"runtime\":\"%s\",\"timeout_seconds\":30,\"code\":\"%s\"}",
		 runtime, code);
	if (http_request(cur, "POST", "/v1/sandbox/executions", cur->key, NULL, body, 0, &r) < 0)
		return -1;
	*rt_ms = sbx_mono_ms() - t0;
	if (r.status == 200 && jstr(r.json, "stdout") &&
	    strcmp(jstr(r.json, "stdout"), "1\n") == 0 &&
	    json_object_object_get_ex(r.json, "billing", &bill)) {
		*billed = jint(bill, "billed_ms");
		*prestarted = jbool(r.json, "prestarted");
		rc = 0;
	} else {
		fprintf(stderr, "execution: %d %.300s\n", r.status, r.body);
	}
	http_reply_free(&r);
	return rc;
}

/* Node 18.20.4 (Debian 12's, the image before issue 30) on a quiet host,
 * docs/benchmarks.md "bench/executions" (2026-11-30 20:42): p50, p95 ms. */
static const struct {
	const char *way;
	int p50, p95;
} node18[] = {
    {"warm, interpreter waiting", 403, 632},
    {"warm, the old way (started on request)", 3691, 3950},
    {"cold (guest booted per request)", 6530, 7240},
};

/* GET /v1/runtimes, one line. */
static void runtimes(void)
{
	struct http_reply r;
	json_object *v;

	if (http_request(cur, "GET", "/v1/runtimes", NULL, NULL, NULL, 0, &r) == 0 &&
	    r.status == 200 && json_object_object_get_ex(r.json, "versions", &v))
		printf("image runtimes (GET /v1/runtimes): %s\n",
		       json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
	else
		printf("image runtimes: GET /v1/runtimes failed (%d)\n", r.status);
	http_reply_free(&r);
}

/* The samples of one series on one daemon. */
struct samples {
	int64_t rt[256], billed[256];
	int got, pre;
	bool stop;
};

/* One request of a series on cur, after waiting for its pool. */
static void sample(struct samples *x, const char *runtime, const char *code, const char *wait_rt,
		   bool wait_plain)
{
	bool p = false;

	if ((wait_rt && wait_ready(wait_rt) < 0) || (wait_plain && wait_ready(NULL) < 0)) {
		fprintf(stderr, "the pool did not refill\n");
		x->stop = true;
		return;
	}
	if (!wait_rt && !wait_plain)
		sleep(2); /* let the last guest's teardown pass */
	if (run_one(runtime, code, &x->rt[x->got], &x->billed[x->got], &p) == 0) {
		x->pre += p;
		x->got++;
	}
}

static void print_row(const char *way, const char *runtime, struct samples *x, struct stats *s)
{
	struct stats b;

	*s = stats_of(x->rt, x->got);
	b = stats_of(x->billed, x->got);
	printf("%-34s %-7s n=%-3d p50 %6lld ms  p95 %6lld ms  (%lld..%lld)  billed p50 %5lld ms"
	       "  [%d with the interpreter waiting]\n",
	       way, runtime, x->got, (long long)s->median, (long long)s->p95, (long long)s->min,
	       (long long)s->max, (long long)b.median, x->pre);
}

static void series(const char *way, const char *runtime, const char *code, const char *wait_rt,
		   bool wait_plain, int n)
{
	static struct samples after, before;
	bool base = bd.pid > 0;
	struct stats s, sb;

	memset(&after, 0, sizeof after);
	memset(&before, 0, sizeof before);
	for (int i = 0; i < n && i < 256 && !after.stop && !(base && before.stop); i++) {
		sample(&after, runtime, code, wait_rt, wait_plain);
		if (!base)
			continue;
		cur = &bd;
		sample(&before, runtime, code, wait_rt, wait_plain);
		cur = &d;
	}
	print_row(way, runtime, &after, &s);
	if (base) {
		print_row("  (before)", runtime, &before, &sb);
		bench_before_after(runtime, sb, s, 1, "ms");
	}
	for (size_t i = 0; strcmp(runtime, "node") == 0 && i < SBX_ARRAY_SIZE(node18); i++)
		if (strcmp(node18[i].way, way) == 0)
			printf("%-34s %-7s       p50 %6d ms  p95 %6d ms  (Node 18.20.4, "
			       "docs/benchmarks.md, 2026-11-30)\n",
			       "", "node 18", node18[i].p50, node18[i].p95);
	fflush(stdout);
}

/* Sum of qemu VmRSS and PSS of this daemon's domains (MiB). */
static void pool_memory(const char *what)
{
	char names[16][64];
	int n = list_own_domains(cur, false, names, 16);
	long rss = 0, pss = 0;

	for (int i = 0; i < n; i++) {
		struct qemu_mem m;
		char name[64];
		int pid;

		snprintf(name, sizeof name, "%.60s", names[i]);
		pid = qemu_pid(name);

		if (pid > 0 && qemu_mem_of(pid, 4096, &m) == 0) {
			rss += m.rss_kib;
			pss += m.pss_kib;
			printf(
			    "  %s: %s qemu VmRSS %ld MiB (guest RAM %ld, TCG %ld, rest %ld), PSS "
			    "%ld MiB\n",
			    what, names[i], m.rss_kib / 1024, m.guest_kib / 1024, m.tcg_kib / 1024,
			    m.rest_kib / 1024, m.pss_kib / 1024);
		}
	}
	printf("  %s: %d guest(s), VmRSS %ld MiB, PSS %ld MiB in all\n", what, n, rss / 1024,
	       pss / 1024);
}

static int up(const char *extra)
{
	static bool shown;
	char cfg[256];

	snprintf(cfg, sizeof cfg, "%s%s\"disk_overcommit\": 16.0", extra, extra[0] ? ", " : "");
	if (daemon_config_full(&d, cfg) < 0) {
		fprintf(stderr, "bench/executions: no full image (make image-full)\n");
		return -1;
	}
	if (daemon_up(&d) < 0)
		return -1;
	if (!shown)
		runtimes();
	shown = true;
	if ((bd.bin = bench_base_bin())) {
		daemon_config_full(&bd, cfg);
		if (daemon_up(&bd) < 0)
			fprintf(stderr, "bench/executions: the base daemon (%s) did not start\n",
				bd.bin);
	}
	return 0;
}

/* Stop d, and bd when it runs. */
static void down(void)
{
	daemon_down(&d);
	if (bd.bin)
		daemon_down(&bd);
}

/* pool_memory of d, and of bd when it runs. */
static void pool_memory_all(const char *what)
{
	pool_memory(what);
	if (bd.pid > 0) {
		cur = &bd;
		printf("  (before)\n");
		pool_memory(what);
		cur = &d;
	}
}

/* Is `name` one of the comma-separated ways? ("cold" holds "old": match
 * whole names.) */
static bool way_on(const char *ways, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = ways; (p = strstr(p, name)); p += n)
		if ((p == ways || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
			return true;
	return false;
}

int main(void)
{
	int n = env_int_max("SBX_BENCH_N", 10, 256);
	static const char py[] = "print(1)", js[] = "console.log(1)";
	const char *ways = getenv("SBX_BENCH_WAYS") ? getenv("SBX_BENCH_WAYS") : "waiting,old,cold";

	loadavg("at start");
	if (way_on(ways, "waiting")) {
		if (up("\"execution_pool\": {\"python\": 1, \"node\": 1}") < 0)
			return 1;
		if (wait_ready_all("python") < 0 || wait_ready_all("node") < 0)
			return 1;
		sleep(5); /* let both interpreters settle */
		pool_memory_all("execution pool (python + node waiting)");
		series("warm, interpreter waiting", "python", py, "python", false, n);
		series("warm, interpreter waiting", "node", js, "node", false, n);
		down();
	}
	if (way_on(ways, "old")) {
		if (up("\"pool\": {\"small\": 1}") < 0)
			return 1;
		if (wait_ready_all(NULL) < 0)
			return 1;
		sleep(5);
		pool_memory_all("plain pool (one small guest)");
		series("warm, the old way (started on request)", "python", py, NULL, true, n);
		series("warm, the old way (started on request)", "node", js, NULL, true, n);
		down();
	}
	if (way_on(ways, "cold")) {
		if (up("") < 0)
			return 1;
		series("cold (guest booted per request)", "python", py, NULL, false, n);
		series("cold (guest booted per request)", "node", js, NULL, false, n);
		down();
	}
	loadavg("at end");
	return 0;
}
