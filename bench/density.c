/* bench/density: idle guests of the small size (2 vCPU, 4 GiB, tiny image)
 * started one by one through vmm/ (the daemon's own boot path, without
 * HTTP) until SBX_DENSITY_N (default 6) answer HELLO; then, after
 * SBX_DENSITY_IDLE_S (default 10) seconds idle, for each qemu process:
 * VmRSS, and from /proc/PID/smaps what it is made of: guest RAM (the
 * mapping as large as the guest's memory), the TCG code cache (the
 * executable anonymous mapping QEMU translates into), and the rest (QEMU's
 * heap, which holds its copy of the kernel and initramfs, libraries);
 * and CPU per guest over the idle window (utime+stime from /proc/PID/stat).
 * Then the after-work phase (SBX_DENSITY_WORK_MIB, default 1024, 0 = skip):
 * each guest writes that many MiB into /tmp (tmpfs, so guest RAM) and
 * deletes them, and 5 s and 30 s later the mean RSS again: what free page
 * reporting gives back (it reports in rounds 2 s apart). Repeated with free page reporting on and
 * off (SBX_DENSITY_FPR, a list of 1/0, default "1,0"; the last line is the ratio of the after-work
 * RSS on / off), for each TCG translation-cache size in SBX_DENSITY_TB (a list, default "32", the
 * daemon's default; 0 = QEMU's), and for each extra guest kernel command line in
 * SBX_DENSITY_CMDLINES (a '|'-separated list, default one empty entry).
 * Also per guest: PSS (/proc/PID/smaps_rollup, which splits pages shared
 * with other qemus, e.g. by KSM or the page cache of the kernel file), and
 * per run: the host's MemAvailable drop per guest from before the first
 * boot to the end of the idle window, and when KSM runs
 * (/sys/kernel/mm/ksm/run = 1) the pages it shares and ksmd's CPU.
 *
 * Environment: SBX_TEST_IMAGE_DIR (default build/images/tiny). Prints
 * figures; never fails on them. Exit 1 only when it cannot run. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "agentless/agentless.h"
#include "vmm/vmm.h"

#define MAX_GUESTS 64

static long ksm_value(const char *name)
{
	char path[128];
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/kernel/mm/ksm/%s", name);
	f = fopen(path, "re");
	if (!f)
		return -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

static long cpu_ticks(int pid)
{
	char path[64], buf[2048];
	unsigned long ut = 0, st = 0;
	FILE *f;
	char *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	if (!fgets(buf, sizeof(buf), f)) {
		fclose(f);
		return -1;
	}
	fclose(f);
	p = strrchr(buf, ')');
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (long)(ut + st);
}

static void mem_add(struct qemu_mem *sum, const struct qemu_mem *m)
{
	sum->rss_kib += m->rss_kib;
	sum->guest_kib += m->guest_kib;
	sum->tcg_kib += m->tcg_kib;
	sum->rest_kib += m->rest_kib;
	sum->pss_kib += m->pss_kib;
}

/* The after-work phase: every guest writes work_mib MiB into /tmp (tmpfs,
 * so guest RAM) and deletes it; 5 s and 30 s later the mean RSS again.
 * Returns the mean RSS 30 s after in KiB, -1 when an exec failed. */
static long after_work(struct agentless_conn **conns, const int *pids, int started, int work_mib,
		       uint64_t guest_mib)
{
	char cmd[160];
	struct qemu_mem sum = {0};

	snprintf(cmd, sizeof(cmd),
		 "dd if=/dev/zero of=/tmp/fill bs=1M count=%d 2>/dev/null && rm -f /tmp/fill",
		 work_mib);
	for (int i = 0; i < started; i++) {
		struct agentless_exec_req req = {.command = cmd,
						 .command_len = strlen(cmd),
						 .cwd = "/",
						 .timeout_ms = 300000,
						 .stdout_cap = 4096,
						 .stderr_cap = 4096};
		struct agentless_exec_result res = {0};
		struct sbx_error err = {0};

		if (agentless_exec(conns[i], &req, &res, &err) < 0 || res.exit_code != 0) {
			fprintf(stderr, "density: guest %d: '%s' failed: %s\n", i + 1, cmd,
				err.message[0] ? err.message : res.stderr_buf);
			agentless_exec_result_release(&res);
			return -1;
		}
		agentless_exec_result_release(&res);
	}
	/* Reporting runs in rounds 2 s apart, a budget of blocks per round. */
	for (int waited = 0, step = 5; waited < 30; waited += step, step = 25) {
		sleep((unsigned)step);
		memset(&sum, 0, sizeof(sum));
		for (int i = 0; i < started; i++) {
			struct qemu_mem m;

			qemu_mem_of(pids[i], guest_mib, &m);
			mem_add(&sum, &m);
		}
		printf(
		    "  after each wrote and deleted %d MiB in /tmp, %2d s later: mean RSS %ld MiB "
		    "(guest RAM %ld), PSS %ld MiB\n",
		    work_mib, waited + step, sum.rss_kib / 1024 / started,
		    sum.guest_kib / 1024 / started, sum.pss_kib / 1024 / started);
	}
	return sum.rss_kib / started;
}

/* One setting: boot, idle, measure, work, measure, destroy. Returns the
 * mean RSS per guest after the work phase in KiB, -1 without one. */
static long one_config(unsigned tb, const char *cmdline, bool fpr, int n, int idle_s, int work_mib,
		       const char *img)
{
	long after = -1;
	char state[256], run[300], kernel[400], initrd[400], prefix[64];
	struct vmm_vm *vms[MAX_GUESTS] = {0};
	struct agentless_conn *conns[MAX_GUESTS] = {0};
	int pids[MAX_GUESTS], started = 0;
	long ticks0[MAX_GUESTS];
	struct sbx_error err = {0};
	struct agentless_limits lim = {.backstop_grace_ms = 10000, .max_inflight = 8};
	struct vmm_guest_spec spec = {.vcpus = 2, .memory_mib = 4096};
	int64_t boot_ms[MAX_GUESTS];

	snprintf(state, sizeof(state), "/var/lib/sandboxd-test/density-%d", (int)getpid());
	snprintf(run, sizeof(run), "%s/run", state);
	snprintf(prefix, sizeof(prefix), "d%d-", (int)getpid());
	snprintf(kernel, sizeof(kernel), "%s/vmlinux", state);
	snprintf(initrd, sizeof(initrd), "%s/initramfs.cpio.gz", state);
	{
		char cmd[2048];

		snprintf(cmd, sizeof(cmd),
			 "mkdir -p -m 0755 /var/lib/sandboxd-test %s %s && cp %s/vmlinux "
			 "%s/initramfs.cpio.gz %s/ && chmod 0755 %s",
			 state, run, img, img, state, state);
		if (system(cmd) != 0) {
			fprintf(stderr, "density: cannot prepare %s\n", state);
			return -1;
		}
	}
	struct vmm_config cfg = bench_vmm_config(prefix, kernel, initrd, run);

	cfg.tb_cache_mib = tb;
	cfg.free_page_reporting = fpr;
	cfg.cmdline = cmdline[0] ? cmdline : NULL;
	struct vmm *v = vmm_new(&cfg, &err);

	if (!v) {
		fprintf(stderr, "density: %s\n", err.message);
		return -1;
	}
	long avail0 = proc_kib("/proc/meminfo", "MemAvailable");
	int ksmd = -1;
	long ksmd0 = -1;
	{
		FILE *p = popen("pgrep -x ksmd", "r");

		if (p) {
			if (fscanf(p, "%d", &ksmd) != 1)
				ksmd = -1;
			pclose(p);
		}
	}
	if (ksmd > 0)
		ksmd0 = cpu_ticks(ksmd);
	for (int i = 0; i < n; i++) {
		struct sbx_channel ch;
		int64_t t0 = sbx_mono_ms();

		vms[i] = vmm_vm_start(v, &spec, &err);
		if (!vms[i])
			break;
		conns[i] = agentless_conn_new(&lim, NULL, NULL);
		if (vmm_vm_open_channel(vms[i], agentless_conn_recv, conns[i], &ch, &err) < 0)
			break;
		agentless_conn_attach(conns[i], ch, false);
		if (agentless_conn_wait_hello(conns[i], sbx_mono_ms() + 120000, &err) < 0)
			break;
		boot_ms[i] = sbx_mono_ms() - t0;
		pids[i] = qemu_pid(vmm_vm_name(vms[i]));
		started++;
	}
	if (started < n)
		fprintf(stderr, "density: guest %d did not start: %s\n", started + 1, err.message);
	sleep(2);
	for (int i = 0; i < started; i++)
		ticks0[i] = cpu_ticks(pids[i]);
	sleep((unsigned)idle_s);
	long hz = sysconf(_SC_CLK_TCK);
	struct qemu_mem sum = {0};
	double cpu_sum = 0;
	long avail1 = proc_kib("/proc/meminfo", "MemAvailable");
	if (tb)
		printf("tb-cache %u MiB, free page reporting %s, cmdline '%s': %d idle small "
		       "guest(s)\n",
		       tb, fpr ? "on" : "off", cmdline, started);
	else
		printf("tb-cache QEMU default, free page reporting %s, cmdline '%s': %d idle "
		       "small guest(s)\n",
		       fpr ? "on" : "off", cmdline, started);
	for (int i = 0; i < started; i++) {
		struct qemu_mem m;
		long t1 = cpu_ticks(pids[i]);
		double cpu = (double)(t1 - ticks0[i]) / (double)hz / idle_s * 100.0;

		qemu_mem_of(pids[i], spec.memory_mib, &m);
		printf(
		    "  guest %2d: boot %5lld ms, RSS %4ld MiB = guest RAM %4ld + TCG cache %3ld + "
		    "rest %3ld; PSS %4ld MiB; CPU %.1f%% of a core\n",
		    i + 1, (long long)boot_ms[i], m.rss_kib / 1024, m.guest_kib / 1024,
		    m.tcg_kib / 1024, m.rest_kib / 1024, m.pss_kib / 1024, cpu);
		mem_add(&sum, &m);
		cpu_sum += cpu;
	}
	if (started) {
		printf(
		    "  mean per guest: RSS %ld MiB (guest RAM %ld, TCG cache %ld, rest %ld), PSS "
		    "%ld MiB, CPU %.1f%% of a core\n",
		    sum.rss_kib / 1024 / started, sum.guest_kib / 1024 / started,
		    sum.tcg_kib / 1024 / started, sum.rest_kib / 1024 / started,
		    sum.pss_kib / 1024 / started, cpu_sum / started);
		printf("  host MemAvailable drop per guest: %ld MiB (noisy: other jobs share the "
		       "host)\n",
		       (avail0 - avail1) / 1024 / started);
	}
	if (ksm_value("run") == 1 && ksmd0 >= 0) {
		long el = cpu_ticks(ksmd) - ksmd0;

		printf("  KSM: pages_shared %ld, pages_sharing %ld, full_scans %ld; ksmd CPU "
		       "%.2f s during the run\n",
		       ksm_value("pages_shared"), ksm_value("pages_sharing"),
		       ksm_value("full_scans"), (double)el / (double)hz);
	}
	if (started && work_mib > 0)
		after = after_work(conns, pids, started, work_mib, spec.memory_mib);
	fflush(stdout);
	for (int i = 0; i < n; i++) {
		if (conns[i])
			agentless_conn_free(conns[i], "bench done");
		if (vms[i]) {
			vmm_vm_destroy(vms[i], &err);
			vmm_vm_free(vms[i]);
		}
	}
	vmm_free(v);
	{
		char cmd[400];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", state);
		if (system(cmd) != 0)
			fprintf(stderr, "density: could not remove %s\n", state);
	}
	return after;
}

int main(void)
{
	const char *img = getenv("SBX_TEST_IMAGE_DIR");
	const char *tbs = getenv("SBX_DENSITY_TB");
	const char *cls = getenv("SBX_DENSITY_CMDLINES");
	const char *fprs = getenv("SBX_DENSITY_FPR");
	int n = env_int_max("SBX_DENSITY_N", 6, MAX_GUESTS),
	    idle = env_int_max("SBX_DENSITY_IDLE_S", 10, 3600);
	int work = env_int_range("SBX_DENSITY_WORK_MIB", 1024, 0, 3072);
	char list[128], cmdlines[1024], fprlist[16];

	snprintf(list, sizeof(list), "%s", tbs && *tbs ? tbs : "32");
	snprintf(fprlist, sizeof(fprlist), "%s", fprs && *fprs ? fprs : "1,0");
	if (strspn(fprlist, "01,") != strlen(fprlist) || !strpbrk(fprlist, "01")) {
		fprintf(stderr, "SBX_DENSITY_FPR=%s: want a list of 1 and 0, e.g. 1,0\n", fprlist);
		return 1;
	}
	snprintf(cmdlines, sizeof(cmdlines), "%s", cls ? cls : "");
	for (char *save = NULL, *t = strtok_r(list, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		/* '|'-separated, empty entries kept (strsep). */
		char copy[1024], *cur = copy, *c;

		snprintf(copy, sizeof(copy), "%s", cmdlines);
		while ((c = strsep(&cur, "|"))) {
			long after[2] = {-1, -1}; /* [fpr off, fpr on] */

			for (const char *f = fprlist; *f; f++)
				if (*f == '0' || *f == '1')
					after[*f == '1'] = one_config(
					    (unsigned)strtoul(t, NULL, 10), c, *f == '1', n, idle,
					    work, img ? img : "build/images/tiny");
			if (after[0] > 0 && after[1] > 0)
				printf(
				    "RSS after work, free page reporting on / off: %ld / %ld MiB, "
				    "ratio %.2f\n",
				    after[1] / 1024, after[0] / 1024,
				    (double)after[1] / (double)after[0]);
		}
	}
	return 0;
}
