/* bench/snapshot: how long a pause, a resume and a disk snapshot take, how
 * long a sandbox made from a snapshot takes to be ready beside a cold
 * create of the same size, and how large the files are, in one run
 * (docs/lifecycle.md "Pause and resume", "Snapshots and templates").
 *
 * Full image only (SBX_TEST_FULL_IMAGE_DIR; the tiny image has no disk:
 * skipped when not built). One daemon as the integration tests start it
 * (harness.h), one source sandbox of 512 MiB and a 2 GiB disk that writes
 * SBX_BENCH_SNAPSHOT_MIB MiB (default 64) of random data and syncs; then
 * SBX_BENCH_SNAPSHOTS rounds (default 3) of: a pause and a resume of the
 * source (client round trips; paused_bytes; its qemu's RSS before the
 * pause and after the resume: what a restore holds against a boot), POST
 * .../snapshots of the
 * running source (client round trip; the snapshot's bytes and its file's
 * allocated size), a create from it and a cold create (each until the
 * guest accepts commands; the warm pool is off, so both boot), both
 * deleted, then the snapshot. Prints figures; never fails on timing. Exit
 * 1 only when it cannot run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"
#include "../tests/integration/harness.h"

static int call(struct daemon *d, const char *method, const char *path, const char *body,
		struct http_reply *r, int64_t *ms)
{
	int64_t t0 = sbx_mono_ms();

	if (http_request(d, method, path, d->key, NULL, body, 0, r) < 0)
		return -1;
	*ms = sbx_mono_ms() - t0;
	if (r->status != 200 && r->status != 201) {
		fprintf(stderr, "bench/snapshot: %s %s: %d %s\n", method, path, r->status, r->body);
		http_reply_free(r);
		return -1;
	}
	return 0;
}

/* POST /v1/sandboxes with body: the id into id; its time into *ms. */
static int create(struct daemon *d, const char *body, char *id, size_t n, int64_t *ms)
{
	struct http_reply r;

	if (call(d, "POST", "/v1/sandboxes", body, &r, ms) < 0)
		return -1;
	snprintf(id, n, "%s", jstr(r.json, "id") ? jstr(r.json, "id") : "");
	http_reply_free(&r);
	return 0;
}

static int delete_at(struct daemon *d, const char *path)
{
	struct http_reply r;
	int64_t ms;

	if (call(d, "DELETE", path, NULL, &r, &ms) < 0)
		return -1;
	http_reply_free(&r);
	return 0;
}

/* One round's figures. */
struct round {
	int64_t pause_ms, resume_ms, paused_bytes, snap_ms, from_ms, cold_ms, bytes, file;
	int64_t rss_before, rss_after; /* the source's qemu, KiB: booted, restored */
};

/* VmRSS (KiB) of the qemu of sandbox `id`; -1 unknown. */
static int64_t qemu_rss_of(struct daemon *d, const char *id)
{
	char dom[64];
	struct qemu_mem m;
	int pid;

	if (daemon_db_text(d, "SELECT domain FROM sandboxes WHERE id = ?1", id, dom, sizeof(dom)) <
		0 ||
	    (pid = qemu_pid(dom)) < 0 || qemu_mem_of(pid, 512, &m) < 0)
		return -1;
	return m.rss_kib;
}

/* Pause the source and resume it: the times and what the pause kept. */
static int pause_resume(struct daemon *d, const char *src, struct round *o)
{
	char path[700];
	struct http_reply r;

	o->rss_before = qemu_rss_of(d, src);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/pause", src);
	if (call(d, "POST", path, NULL, &r, &o->pause_ms) < 0)
		return -1;
	o->paused_bytes = jint(r.json, "paused_bytes");
	http_reply_free(&r);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/resume", src);
	if (call(d, "POST", path, NULL, &r, &o->resume_ms) < 0)
		return -1;
	http_reply_free(&r);
	o->rss_after = qemu_rss_of(d, src);
	return 0;
}

static int round_once(struct daemon *d, const char *src, struct round *o)
{
	char path[700], snap[64], id[64], body[128];
	struct http_reply r;
	struct stat st;

	if (pause_resume(d, src, o) < 0)
		return -1;
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/snapshots", src);
	if (call(d, "POST", path, NULL, &r, &o->snap_ms) < 0)
		return -1;
	snprintf(snap, sizeof(snap), "%s", jstr(r.json, "id") ? jstr(r.json, "id") : "");
	o->bytes = jint(r.json, "bytes");
	http_reply_free(&r);
	snprintf(path, sizeof(path), "%s/run/%s.qcow2", d->state_dir, snap);
	o->file = stat(path, &st) == 0 ? (int64_t)st.st_blocks * 512 : -1;
	snprintf(body, sizeof(body), "{\"snapshot\": \"%s\", \"timeout_minutes\": 5}", snap);
	if (create(d, body, id, sizeof(id), &o->from_ms) < 0)
		return -1;
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	if (delete_at(d, path) < 0)
		return -1;
	if (create(d, "{\"timeout_minutes\": 5}", id, sizeof(id), &o->cold_ms) < 0)
		return -1;
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	if (delete_at(d, path) < 0)
		return -1;
	snprintf(path, sizeof(path), "/v1/snapshots/%s", snap);
	return delete_at(d, path);
}

static void line(const char *what, const int64_t *v, int n, double div, const char *unit)
{
	struct stats s = stats_of((int64_t *)v, n);

	printf("  %-30s median %8.1f %s  (min %.1f, max %.1f)\n", what, (double)s.median / div,
	       unit, (double)s.min / div, (double)s.max / div);
}

int main(void)
{
	int mib = env_int_range("SBX_BENCH_SNAPSHOT_MIB", 64, 0, 1024);
	int rounds = env_int_range("SBX_BENCH_SNAPSHOTS", 3, 1, 16);
	struct round o[16];
	int64_t v[16], ms;
	struct daemon d;
	struct http_reply r;
	char src[64], cmd[256];
	int n = 0, rc = 1;

	memset(&d, 0, sizeof(d));
	snprintf(d.tag, sizeof(d.tag), "sn");
	if (daemon_config_full(&d, "\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": 512, "
				   "\"disk_gib\": 2, \"price_micro_usd_per_hour\": 90000}}, "
				   "\"destroy_on_exit\": true, \"max_snapshots\": 4, "
				   "\"disk_overcommit\": 16.0") < 0) {
		printf("bench/snapshot: the full image is not built (make image-full): skipped\n");
		return 0;
	}
	if (daemon_up(&d) < 0 || create(&d, "{\"timeout_minutes\": 30}", src, sizeof(src), &ms) < 0)
		goto out;
	snprintf(cmd, sizeof(cmd),
		 "head -c %dM /dev/urandom > /root/data && sync && du -m /root/data | cut -f1",
		 mib);
	if (sandbox_command(&d, src, "exec", cmd, 600000, &r) < 0 || r.status != 200)
		goto out;
	http_reply_free(&r);
	for (n = 0; n < rounds; n++)
		if (round_once(&d, src, &o[n]) < 0)
			goto out;
	printf("full image, 512 MiB guest, 2 GiB disk, %d MiB written by the source, %d rounds:\n",
	       mib, n);
#define LINE(what, field, div, unit)                                                               \
	do {                                                                                       \
		for (int i = 0; i < n; i++)                                                        \
			v[i] = o[i].field;                                                         \
		line(what, v, n, div, unit);                                                       \
	} while (0)
	LINE("pause of the source", pause_ms, 1, "ms");
	LINE("resume of the source", resume_ms, 1, "ms");
	LINE("paused_bytes (save + overlay)", paused_bytes, 1048576.0, "MiB");
	LINE("source qemu RSS before pause", rss_before, 1024.0, "MiB");
	LINE("source qemu RSS after resume", rss_after, 1024.0, "MiB");
	LINE("snapshot of a running sandbox", snap_ms, 1, "ms");
	LINE("create from the snapshot", from_ms, 1, "ms");
	LINE("cold create, same size", cold_ms, 1, "ms");
	LINE("snapshot bytes (the API's)", bytes, 1048576.0, "MiB");
	LINE("snapshot file (allocated)", file, 1048576.0, "MiB");
#undef LINE
	rc = 0;
out:
	daemon_down(&d);
	return rc;
}
