/* bench/pause: how long a pause and a resume take and what a paused
 * sandbox keeps on its host (docs/lifecycle.md "Pause and resume").
 *
 * For the tiny image (SBX_TEST_IMAGE_DIR: initramfs only, no disk) and the
 * full image (SBX_TEST_FULL_IMAGE_DIR: Debian on a qcow2 overlay, skipped
 * when not built), one daemon each as the integration tests start them
 * (harness.h), one guest of SBX_BENCH_PAUSE_MIB MiB (default 512) and one
 * vCPU with a background process ticking; then SBX_BENCH_PAUSES (default 3)
 * rounds of: POST .../pause (client round trip; the answer's paused_bytes:
 * save file + overlay, host-observed), the save file's allocated size,
 * POST .../resume (round trip, which waits for the guest's first answer),
 * and the first exec after it. The cold create of the same guest is
 * printed beside them. Prints figures; never fails on timing. Exit 1 only
 * when it cannot run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"
#include "../tests/integration/harness.h"

static int post(struct daemon *d, const char *id, const char *what, const char *body,
		struct http_reply *r, int64_t *ms)
{
	char path[256];
	int64_t t0 = sbx_mono_ms();

	snprintf(path, sizeof(path), "/v1/sandboxes/%s%s", id, what);
	if (http_request(d, "POST", path, d->key, NULL, body, 0, r) < 0)
		return -1;
	*ms = sbx_mono_ms() - t0;
	if (r->status != 200 && r->status != 201) {
		fprintf(stderr, "bench/pause: %s: %d %s\n", what, r->status, r->body);
		http_reply_free(r);
		return -1;
	}
	return 0;
}

static int run_image(const char *label, bool full, int mib, int rounds)
{
	struct daemon d;
	char extra[512], id[64], dom[64], path[512];
	int64_t create_ms, pause_ms[32], resume_ms[32], exec_ms[32], kept[32], save[32];
	struct http_reply r;
	int n = 0, rc = -1;

	memset(&d, 0, sizeof(d));
	snprintf(d.tag, sizeof(d.tag), "p%s", full ? "f" : "t");
	snprintf(extra, sizeof(extra),
		 "\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": %d, \"disk_gib\": 2, "
		 "\"price_micro_usd_per_hour\": 90000}}, \"destroy_on_exit\": true, "
		 "\"disk_overcommit\": 16.0",
		 mib);
	if (full) {
		if (daemon_config_full(&d, extra) < 0) {
			printf("%s: not built (make image-full): skipped\n", label);
			return 0;
		}
	} else {
		daemon_config(&d, extra);
	}
	if (daemon_up(&d) < 0)
		goto out;
	int64_t t0 = sbx_mono_ms();
	if (daemon_create_sandbox(&d, id, sizeof(id)) < 0)
		goto out;
	create_ms = sbx_mono_ms() - t0;
	if (daemon_db_text(&d, "SELECT domain FROM sandboxes WHERE id = ?1", id, dom, sizeof(dom)) <
	    0)
		goto out;
	if (post(&d, id, "/processes",
		 "{\"command\": \"i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done\"}",
		 &r, &t0) < 0)
		goto out;
	http_reply_free(&r);
	snprintf(path, sizeof(path), "%s/run/%s.save", d.state_dir, dom);
	for (n = 0; n < rounds; n++) {
		struct stat st;

		sleep(1);
		if (post(&d, id, "/pause", NULL, &r, &pause_ms[n]) < 0)
			goto out;
		kept[n] = jint(r.json, "paused_bytes");
		http_reply_free(&r);
		save[n] = stat(path, &st) == 0 ? (int64_t)st.st_blocks * 512 : -1;
		sleep(1);
		if (post(&d, id, "/resume", NULL, &r, &resume_ms[n]) < 0)
			goto out;
		http_reply_free(&r);
		if (post(&d, id, "/exec", "{\"command\": \"echo back\"}", &r, &exec_ms[n]) < 0)
			goto out;
		http_reply_free(&r);
	}
	printf("%s, %d MiB guest, %d rounds (cold create of the same guest: %lld ms):\n", label,
	       mib, n, (long long)create_ms);
	struct stats p = stats_of(pause_ms, n), q = stats_of(resume_ms, n),
		     e = stats_of(exec_ms, n), k = stats_of(kept, n), s = stats_of(save, n);
	printf("  pause             median %5lld ms  (min %lld, max %lld)\n", (long long)p.median,
	       (long long)p.min, (long long)p.max);
	printf("  resume            median %5lld ms  (min %lld, max %lld)\n", (long long)q.median,
	       (long long)q.min, (long long)q.max);
	printf("  first exec after  median %5lld ms\n", (long long)e.median);
	printf("  save file         median %5.1f MiB (min %.1f, max %.1f)\n",
	       (double)s.median / 1048576.0, (double)s.min / 1048576.0, (double)s.max / 1048576.0);
	printf("  paused_bytes      median %5.1f MiB (save file + overlay)\n",
	       (double)k.median / 1048576.0);
	rc = 0;
out:
	daemon_down(&d);
	return rc;
}

int main(void)
{
	int mib = env_int_range("SBX_BENCH_PAUSE_MIB", 512, 128, 16384);
	int rounds = env_int_range("SBX_BENCH_PAUSES", 3, 1, 32);

	if (run_image("tiny image", false, mib, rounds) < 0)
		return 1;
	if (run_image("full image", true, mib, rounds) < 0)
		return 1;
	return 0;
}
