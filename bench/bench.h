/* What the benchmarks share: order statistics of a sample, integer knobs
 * from the environment, the memory of a qemu process, and the vmm_config
 * of a guest booted the daemon's way. Header-only; each bench includes it once.
 * Benchmarks print figures and never fail on them (STYLE.md). */
#ifndef SBX_BENCH_H
#define SBX_BENCH_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sandbox/sandbox.h"
#include "vmm/vmm.h"
#include "agentless/agentless.h"

static inline int bench_cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* Median, p95 (nearest rank), min and max of n samples (any unit). */
struct stats {
	int64_t median, p95, min, max;
	int n;
};

/* Sorts v in place. n <= 0 gives all zeros. */
static inline struct stats stats_of(int64_t *v, int n)
{
	struct stats s = {0};
	int i95;

	if (n <= 0)
		return s;
	qsort(v, (size_t)n, sizeof(*v), bench_cmp_i64);
	s.n = n;
	s.min = v[0];
	s.max = v[n - 1];
	s.median = v[n / 2];
	i95 = (n * 95 + 99) / 100 - 1;
	s.p95 = v[i95 < 0 ? 0 : i95 >= n ? n - 1 : i95];
	return s;
}

/* An integer in [min, max] from the environment; def when unset. A value
 * that is not such an integer is refused: the bench says so and exits 1
 * rather than measuring something else than asked. */
static inline int env_int_range(const char *name, int def, long min, long max)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s)
		return def;
	v = strtol(s, &end, 10);
	if (*end || v < min || v > max) {
		fprintf(stderr, "%s=%s: want an integer in %ld..%ld\n", name, s, min, max);
		exit(1);
	}
	return (int)v;
}

/* A positive integer from the environment, at most max; def when unset. */
static inline int env_int_max(const char *name, int def, long max)
{
	return env_int_range(name, def, 1, max);
}

/* ------------------------------------------ the memory of a qemu process */

/* A "Key: N kB" line of a /proc file, in KiB; -1 when absent. */
static inline long proc_kib(const char *path, const char *key)
{
	char line[256];
	size_t kl = strlen(key);
	long v = -1;
	FILE *f = fopen(path, "re");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
			v = strtol(line + kl + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

/* PID of the qemu of the domain whose name starts with `name` (its
 * command line carries guest=NAME,...), -1 when none. */
static inline int qemu_pid(const char *name)
{
	char cmd[256];
	FILE *p;
	int pid = -1;

	snprintf(cmd, sizeof(cmd), "pgrep -f '[q]emu-system.*guest=%s' | head -1", name);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	if (fscanf(p, "%d", &pid) != 1)
		pid = -1;
	pclose(p);
	return pid;
}

struct qemu_mem {
	long rss_kib, guest_kib, tcg_kib, rest_kib, pss_kib;
};

/* VmRSS of a qemu process split by /proc/PID/smaps: guest RAM (mappings at
 * least as large as the guest's memory, guest_mib), the TCG code cache
 * (executable anonymous mappings) and the rest (heap, libraries, QEMU's
 * mapping of the kernel file); and PSS from smaps_rollup. KiB. 0 or -1. */
static inline int qemu_mem_of(int pid, uint64_t guest_mib, struct qemu_mem *m)
{
	char path[64], line[512];
	unsigned long lo = 0, hi = 0;
	char perms[8] = "";
	int is_anon = 0;
	FILE *f;

	memset(m, 0, sizeof(*m));
	snprintf(path, sizeof(path), "/proc/%d/smaps", pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char rest[400] = "";
		long kib;

		if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %399[^\n]", &lo, &hi, perms, rest) >= 3 &&
		    strchr(line, '-') < strchr(line, ' ')) {
			is_anon = rest[0] == '\0';
			continue;
		}
		if (sscanf(line, "Rss: %ld kB", &kib) == 1) {
			m->rss_kib += kib;
			if (hi - lo >= guest_mib * 1024 * 1024)
				m->guest_kib += kib;
			else if (is_anon && perms[2] == 'x')
				m->tcg_kib += kib;
			else
				m->rest_kib += kib;
		}
	}
	fclose(f);
	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", pid);
	m->pss_kib = proc_kib(path, "Pss");
	return 0;
}

/* ------------------------------------------------ a guest as the daemon boots it */

/* SBX_BENCH_TRANSPORT: "stream" or "socket" (the default). */
static inline bool bench_transport_stream(void)
{
	const char *t = getenv("SBX_BENCH_TRANSPORT");
	return t && strcmp(t, "stream") == 0;
}

/* A vmm_config for TCG guests on qemu:///system with the daemon's built-in
 * defaults (sandbox_config_defaults: socket transport unless
 * SBX_BENCH_TRANSPORT=stream, tb_cache_mib,
 * free_page_reporting), so that a floor measured through it gets the
 * daemon's domain XML. The strings are borrowed; callers override fields
 * they vary. */
static inline struct vmm_config bench_vmm_config(const char *prefix, const char *kernel,
						 const char *initrd, const char *run_dir)
{
	struct sandbox_config d;

	sandbox_config_defaults(&d);
	return (struct vmm_config){
	    .uri = "qemu:///system",
	    .name_prefix = prefix,
	    .accel = VMM_ACCEL_TCG,
	    .allow_tcg = true,
	    .kernel = kernel,
	    .initrd = initrd,
	    .run_dir = run_dir,
	    .transport = bench_transport_stream() ? VMM_TRANSPORT_STREAM : VMM_TRANSPORT_SOCKET,
	    .tb_cache_mib = d.tb_cache_mib,
	    .free_page_reporting = d.free_page_reporting,
	    .console_log_max = 1 << 20,
	};
}

/* ------------------------------------------------ a guest without the daemon */

/* A guest of the daemon's shape booted straight through vmm/ and agentless/
 * (no HTTP, no store): the floor a bench compares the service against.
 * Its files live under STATE_DIR/bench-raw, its domain is named PREFIX"raw-"
 * + hex. 0, or -1 after printing why (`who` names the bench) with nothing
 * left behind. Free with bench_raw_free(). */
struct bench_raw {
	struct vmm *v;
	struct vmm_vm *vm;
	struct agentless_conn *conn;
};

static inline void bench_raw_free(struct bench_raw *raw)
{
	struct sbx_error err = {0};

	if (raw->conn)
		agentless_conn_free(raw->conn, "bench done");
	if (raw->vm) {
		vmm_vm_destroy(raw->vm, &err);
		vmm_vm_free(raw->vm);
	}
	if (raw->v)
		vmm_free(raw->v);
	memset(raw, 0, sizeof(*raw));
}

static inline int bench_raw_boot(struct bench_raw *raw, const char *state_dir, const char *prefix,
				 const struct vmm_guest_spec *spec, const char *who)
{
	char kernel[512], initrd[512], run[512], raw_prefix[64];
	struct sbx_error err = {0};
	struct sbx_channel ch;
	struct agentless_limits lim = {.backstop_grace_ms = 10000, .max_inflight = 64};

	snprintf(kernel, sizeof(kernel), "%s/images/vmlinux", state_dir);
	snprintf(initrd, sizeof(initrd), "%s/images/initramfs.cpio.gz", state_dir);
	snprintf(run, sizeof(run), "%s/bench-raw", state_dir);
	snprintf(raw_prefix, sizeof(raw_prefix), "%sraw-", prefix);
	mkdir(run, 0755);
	struct vmm_config cfg = bench_vmm_config(raw_prefix, kernel, initrd, run);

	memset(raw, 0, sizeof(*raw));
	raw->v = vmm_new(&cfg, &err);
	if (!raw->v)
		goto err;
	raw->vm = vmm_vm_start(raw->v, spec, &err);
	if (!raw->vm)
		goto err;
	raw->conn = agentless_conn_new(&lim, NULL, NULL);
	if (vmm_vm_open_channel(raw->vm, agentless_conn_recv, raw->conn, &ch, &err) < 0)
		goto err;
	agentless_conn_attach(raw->conn, ch, false);
	if (agentless_conn_wait_hello(raw->conn, sbx_mono_ms() + 120000, &err) < 0)
		goto err;
	return 0;
err:
	fprintf(stderr, "%s bench: raw guest: %s\n", who, err.message);
	bench_raw_free(raw);
	return -1;
}

/* Before/after in one run (docs/benchmarks.md): SBX_BENCH_BASE_BIN names a
 * sandboxd built from the code before a change. When set, bench/create,
 * bench/exec and bench/executions start a second daemon on it (its own
 * state dir and domain prefix, harness.h's `bin` and `tag`), run the same
 * measurements against it interleaved with SBX_BIN's, and print both and
 * after/before. NULL when unset or empty. */
static inline const char *bench_base_bin(void)
{
	const char *b = getenv("SBX_BENCH_BASE_BIN");

	return b && b[0] ? b : NULL;
}

/* One figure before and after: median and p95 of each (in `unit`, values
 * divided by div: 1 for ms, 1000 for us -> ms) and after/before. */
static inline void bench_before_after(const char *what, struct stats before, struct stats after,
				      double div, const char *unit)
{
	int prec = div > 1 ? 3 : 0; /* whole ms, or ms from us */

	printf("  before/after %-30s before n=%d median %.*f %s p95 %.*f %s | after n=%d median "
	       "%.*f %s p95 %.*f %s | after/before median %.2f p95 %.2f\n",
	       what, before.n, prec, (double)before.median / div, unit, prec,
	       (double)before.p95 / div, unit, after.n, prec, (double)after.median / div, unit,
	       prec, (double)after.p95 / div, unit,
	       before.median > 0 ? (double)after.median / (double)before.median : 0.0,
	       before.p95 > 0 ? (double)after.p95 / (double)before.p95 : 0.0);
}

#endif
