/* bench/tcg: what the TCG translation-cache size (`tb_cache_mib`) costs in
 * real work. For each size in SBX_BENCH_TB (a list of MiB, default
 * "0,32,16"; 0 = QEMU's default, a 1 GiB cap; the first entry is the
 * baseline), a daemon as the integration tests start it with the full
 * image (SBX_TEST_FULL_IMAGE_DIR) and that `tb_cache_mib`, one small
 * sandbox, and four code-heavy commands through `POST .../exec`: one
 * warm-up, then SBX_BENCH_RUNS (default 3) timed runs each; the figure is
 * the guest's own `duration_ms`, median of the runs. Then the resident
 * size of the qemu process's TCG code cache (its executable anonymous
 * mappings in /proc/PID/smaps). Prints each size's medians and their ratio
 * to the baseline's. Under KVM there is no TCG cache; this bench is for
 * TCG hosts (docs/benchmarks.md). Prints figures; never fails on them.
 * Exit 1 only when it cannot run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "../tests/integration/harness.h"

#define MAX_TB	 8
#define MAX_RUNS 15

static const char *const workloads[] = {
    "python3 -c 'import json, email, http.client, asyncio, sqlite3, xml.dom.minidom, "
    "argparse, decimal'",
    "node -e \"require('http'); require('crypto'); require('zlib'); console.log(1)\"",
    "echo 'int main(void){return 0;}' > /tmp/b.c && gcc -O2 -o /tmp/b /tmp/b.c && /tmp/b",
    "python3 -m compileall -f -q /usr/lib/python3.11/email /usr/lib/python3.11/json "
    "/usr/lib/python3.11/asyncio",
};
static const char *const labels[] = {"python3 imports", "node require", "gcc -O2 + run",
				     "compileall"};
#define N_WORK (sizeof(workloads) / sizeof(workloads[0]))

struct result {
	unsigned tb;
	int64_t median_ms[N_WORK];
	long tcg_kib;
	bool ok;
};

/* Resident KiB of the TCG code cache of the qemu of the daemon's one
 * guest, -1 when not found. */
static long tcg_kib(const struct daemon *d, uint64_t guest_mib)
{
	struct qemu_mem m;
	int pid = qemu_pid(d->prefix);

	if (pid <= 0 || qemu_mem_of(pid, guest_mib, &m) < 0)
		return -1;
	return m.tcg_kib;
}

/* One exec through the API; the guest's duration_ms, or -1. */
static int64_t exec_ms(struct daemon *d, const char *sbx, const char *command)
{
	char path[128];
	struct http_reply r = {0};
	json_object *o = json_object_new_object();
	int64_t ms = -1;

	json_object_object_add(o, "command", json_object_new_string(command));
	json_object_object_add(o, "timeout_ms", json_object_new_int(600000));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", sbx);
	if (http_request(d, "POST", path, d->key, NULL,
			 json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN), 0, &r) == 0 &&
	    r.status == 200 && jint(r.json, "exit_code") == 0)
		ms = jint(r.json, "duration_ms");
	else
		fprintf(stderr, "tcg: '%s': HTTP %d %s\n", command, r.status, r.body ? r.body : "");
	json_object_put(o);
	http_reply_free(&r);
	return ms;
}

static void one_size(unsigned tb, int runs, struct result *res)
{
	struct daemon d = {0};
	struct http_reply r = {0};
	char extra[64], sbx[64] = "", path[128];

	memset(res, 0, sizeof(*res));
	res->tb = tb;
	snprintf(extra, sizeof(extra), "\"tb_cache_mib\": %u", tb);
	if (daemon_config_full(&d, extra) < 0) {
		fprintf(stderr, "tcg: no full image (make image-full)\n");
		return;
	}
	if (daemon_up(&d) < 0) {
		fprintf(stderr, "tcg: daemon did not start\n");
		daemon_down(&d);
		return;
	}
	if (http_request(&d, "POST", "/v1/sandboxes", d.key, NULL, "{\"size\": \"small\"}", 0,
			 &r) == 0 &&
	    r.status == 201 && jstr(r.json, "id"))
		snprintf(sbx, sizeof(sbx), "%s", jstr(r.json, "id"));
	http_reply_free(&r);
	if (!sbx[0]) {
		fprintf(stderr, "tcg: create failed\n");
		daemon_down(&d);
		return;
	}
	res->ok = true;
	for (size_t w = 0; w < N_WORK; w++) {
		int64_t v[MAX_RUNS];
		int n = 0;

		exec_ms(&d, sbx, workloads[w]); /* warm-up: page cache, first translation */
		for (int i = 0; i < runs; i++) {
			int64_t ms = exec_ms(&d, sbx, workloads[w]);

			if (ms >= 0)
				v[n++] = ms;
		}
		res->median_ms[w] = n ? stats_of(v, n).median : -1;
		res->ok = res->ok && n == runs;
	}
	res->tcg_kib = tcg_kib(&d, 4096); /* small: 4 GiB */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", sbx);
	http_request(&d, "DELETE", path, d.key, NULL, NULL, 0, &r);
	http_reply_free(&r);
	daemon_down(&d);
}

int main(void)
{
	const char *env = getenv("SBX_BENCH_TB");
	int runs = env_int_max("SBX_BENCH_RUNS", 3, MAX_RUNS);
	char list[128];
	struct result res[MAX_TB];
	unsigned tb[MAX_TB];
	int n = 0;

	snprintf(list, sizeof(list), "%s", env && *env ? env : "0,32,16");
	/* The whole list is checked before the first daemon starts. */
	for (char *save = NULL, *t = strtok_r(list, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		char *end;
		unsigned long v = strtoul(t, &end, 10);

		if (*end || t[0] == '-' || v > 4096 || n == MAX_TB) {
			fprintf(stderr, "SBX_BENCH_TB=%s: want up to %d sizes in MiB (0..4096)\n",
				env, MAX_TB);
			return 1;
		}
		tb[n++] = (unsigned)v;
	}
	for (int i = 0; i < n; i++)
		one_size(tb[i], runs, &res[i]);
	if (n == 0 || !res[0].ok) {
		fprintf(stderr, "tcg: the baseline did not run\n");
		return 1;
	}
	printf("TCG translation cache vs work (full image, small sandbox, guest duration_ms, "
	       "median of %d after a warm-up; ratio to tb-cache %s)\n",
	       runs, res[0].tb ? "first entry" : "QEMU default");
	for (int i = 0; i < n; i++) {
		char name[32];

		if (res[i].tb)
			snprintf(name, sizeof(name), "%u MiB", res[i].tb);
		else
			snprintf(name, sizeof(name), "QEMU default");
		printf("tb-cache %-12s  TCG cache resident after: %ld MiB%s\n", name,
		       res[i].tcg_kib / 1024, res[i].ok ? "" : "  (some runs failed)");
		for (size_t w = 0; w < N_WORK; w++)
			printf("  %-16s %7lld ms  ratio %.2f\n", labels[w],
			       (long long)res[i].median_ms[w],
			       res[0].median_ms[w] > 0
				   ? (double)res[i].median_ms[w] / (double)res[0].median_ms[w]
				   : 0.0);
	}
	return 0;
}
