/* Tenants share the host fairly and get no more rights than they were
 * given (issue 13, items 5-8), against a real daemon over a real socket:
 * key scopes cannot be escalated, the files the daemon writes are its
 * owner's only, concurrent extends never shorten a sandbox. Each test
 * starts its own daemon (its own config), with the tiny image. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <pthread.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#include "harness.h"
#include "store/store.h"

#define SMALL_SIZE                                                                                 \
	"\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": 256, \"disk_gib\": 1, "             \
	"\"price_micro_usd_per_hour\": 90000}}"

static struct daemon d;

static int teardown_each(void **state)
{
	daemon_down(&d);
	memset(&d, 0, sizeof(d));
	return 0;
}

static void req(const char *key, const char *method, const char *path, const char *body,
		struct http_reply *r)
{
	assert_int_equal(http_request(&d, method, path, key, NULL, body, 0, r), 0);
}

static void create_ok(const char *body, char id[64])
{
	struct http_reply r;

	req(d.key, "POST", "/v1/sandboxes", body, &r);
	if (r.status != 201)
		fail_msg("create: %d %s", r.status, r.body);
	snprintf(id, 64, "%s", jstr(r.json, "id"));
	http_reply_free(&r);
}

/* ------------------------------------------------------ item 5: scopes */

/* `admin create-key ACCOUNT --scope SCOPES`: the secret into key, its id
 * into id. */
static void admin_key(const char *scopes, char key[128], char id[64])
{
	char args[256];
	json_object *o;

	snprintf(args, sizeof(args), "create-key %s --scope '%s'", d.account_id, scopes);
	o = daemon_admin(&d, args);
	assert_non_null(o);
	const char *secret = jstr(o, "api_key"), *key_id = jstr(o, "key_id");
	assert_non_null(secret);
	assert_non_null(key_id);
	snprintf(key, 128, "%s", secret);
	snprintf(id, 64, "%s", key_id);
	json_object_put(o);
}

/* POST /v1/api_keys with `key`; on 201 the secret and id of the new key. */
static int new_key(const char *key, const char *body, char out[128], char id[64], char scopes[64])
{
	struct http_reply r;
	json_object *sc;
	int status;

	req(key, "POST", "/v1/api_keys", body, &r);
	status = r.status;
	if (status == 201) {
		snprintf(out, 128, "%s", jstr(r.json, "secret"));
		snprintf(id, 64, "%s", jstr(r.json, "id"));
		scopes[0] = '\0';
		assert_true(json_object_object_get_ex(r.json, "scopes", &sc));
		for (size_t i = 0; i < json_object_array_length(sc); i++)
			snprintf(scopes + strlen(scopes), 64 - strlen(scopes), "%s%s", i ? " " : "",
				 json_object_get_string(json_object_array_get_idx(sc, i)));
	} else {
		assert_int_equal(status, 403);
		assert_string_equal(jerr(r.json, "type"), "permission_error");
	}
	http_reply_free(&r);
	return status;
}

static int status_of(const char *key, const char *method, const char *path, const char *body)
{
	struct http_reply r;
	int status;

	req(key, method, path, body, &r);
	status = r.status;
	http_reply_free(&r);
	return status;
}

/* A key gets no right it was not given: what it creates has at most its
 * scopes, key management needs the 'keys' scope, and it cannot revoke a
 * key that has a scope it lacks. */
static void keys_cannot_escalate(void **state)
{
	char k_keys[128], id_keys[64], k_none[128], id_none[64], k2[128], id2[64], k3[128], id3[64],
	    sc[64], path[160], full_id[64] = "";
	struct http_reply r;
	json_object *data;

	daemon_config(&d, "");
	assert_int_equal(daemon_up(&d), 0);
	/* no scope: no key management at all (it could mint a key with
	 * 'sandboxes' before) */
	admin_key("", k_none, id_none);
	assert_int_equal(new_key(k_none, "{}", k3, id3, sc), 403);
	assert_int_equal(status_of(k_none, "GET", "/v1/api_keys", NULL), 403);
	assert_int_equal(status_of(k_none, "GET", "/v1/sandboxes", NULL), 200);

	/* the account's first key (create-account): both scopes, listed */
	req(d.key, "GET", "/v1/api_keys", NULL, &r);
	assert_int_equal(r.status, 200);
	assert_true(json_object_object_get_ex(r.json, "data", &data));
	const char *first = jstr(json_object_array_get_idx(data, 1), "id"); /* oldest last */
	assert_non_null(first);
	snprintf(full_id, sizeof(full_id), "%s", first);
	assert_non_null(strstr(r.body, "\"scopes\":[\"sandboxes\",\"keys\"]"));
	http_reply_free(&r);

	admin_key("keys", k_keys, id_keys);
	snprintf(path, sizeof(path), "/v1/api_keys/%s", id_keys);
	assert_int_equal(status_of(k_none, "DELETE", path, NULL), 403);

	/* keys-only: a new key inherits its scopes, not more */
	assert_int_equal(new_key(k_keys, "{}", k2, id2, sc), 201);
	assert_string_equal(sc, "keys");
	assert_int_equal(status_of(k2, "POST", "/v1/sandbox/executions", "{}"), 403);
	assert_int_equal(new_key(k_keys, "{\"scopes\": [\"sandboxes\"]}", k3, id3, sc), 403);
	assert_int_equal(new_key(k_keys, "{\"scopes\": [\"keys\", \"sandboxes\"]}", k3, id3, sc),
			 403);
	/* ... and cannot revoke the stronger key, only its equals */
	snprintf(path, sizeof(path), "/v1/api_keys/%s", full_id);
	assert_int_equal(status_of(k_keys, "DELETE", path, NULL), 403);
	assert_int_equal(status_of(d.key, "GET", "/v1/sandboxes", NULL), 200);
	snprintf(path, sizeof(path), "/v1/api_keys/%s", id2);
	assert_int_equal(status_of(k_keys, "DELETE", path, NULL), 200);
	assert_int_equal(status_of(k2, "GET", "/v1/sandboxes", NULL), 401);

	/* the full key may hand out less, and revoke anything */
	assert_int_equal(new_key(d.key, "{\"scopes\": [\"sandboxes\"]}", k3, id3, sc), 201);
	assert_string_equal(sc, "sandboxes");
	assert_int_equal(status_of(k3, "GET", "/v1/api_keys", NULL), 403);
	req(d.key, "POST", "/v1/api_keys", "{\"scopes\": [\"admin\"]}", &r);
	assert_int_equal(r.status, 400);
	assert_string_equal(jerr(r.json, "param"), "scopes");
	http_reply_free(&r);
	snprintf(path, sizeof(path), "/v1/api_keys/%s", id_keys);
	assert_int_equal(status_of(d.key, "DELETE", path, NULL), 200);
	assert_int_equal(status_of(k_keys, "GET", "/v1/api_keys", NULL), 401);
}

/* --------------------------------------------- item 4: host-timed money */

#define EXEC_PRICE 1000 /* micro-USD per second: 1 s is plain in the totals */

static void exec_daemon_with(const char *extra)
{
	char cfg[1024];

	snprintf(cfg, sizeof(cfg),
		 "\"execution_test_shell_runtime\": true, "
		 "\"execution_price_micro_per_second\": 1000, " SMALL_SIZE "%s",
		 extra);
	daemon_config(&d, cfg);
	assert_int_equal(daemon_up(&d), 0);
}

static void exec_daemon(void)
{
	exec_daemon_with("");
}

static void execute(const char *code, int timeout_s, struct http_reply *r)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "runtime", json_object_new_string("sh"));
	json_object_object_add(o, "timeout_seconds", json_object_new_int(timeout_s));
	json_object_object_add(o, "code", json_object_new_string(code));
	req(d.key, "POST", "/v1/sandbox/executions", json_object_to_json_string(o), r);
	json_object_put(o);
}

static void usage(int64_t *consumed, int64_t *reserved)
{
	struct http_reply r;

	req(d.key, "GET", "/v1/usage", NULL, &r);
	assert_int_equal(r.status, 200);
	*consumed = jint(r.json, "consumed_micro_usd");
	*reserved = jint(r.json, "reserved_micro_usd");
	http_reply_free(&r);
}

/* The bill and the signed latency are the host's measure (billing.billed_ms),
 * not the guest's duration_ms: cost = started seconds of billed_ms. */
static void execution_bills_and_signs_host_time(void **state)
{
	struct http_reply r, g;
	json_object *bill, *rc, *body;
	int64_t billed, consumed, reserved;
	char path[160];

	exec_daemon();
	execute("sleep 2; echo done", 10, &r);
	if (r.status != 200)
		fail_msg("execute: %d %s", r.status, r.body);
	assert_string_equal(jstr(r.json, "stdout"), "done\n");
	assert_true(json_object_object_get_ex(r.json, "billing", &bill));
	assert_true(json_object_object_get_ex(r.json, "receipt", &rc));
	billed = jint(bill, "billed_ms");
	print_message("billed %lld ms, guest says %lld ms\n", (long long)billed,
		      (long long)jint(r.json, "duration_ms"));
	assert_true(billed >= 2000 && billed <= 10000);
	assert_int_equal(jint(bill, "cost_micro_usd"), (billed + 999) / 1000 * EXEC_PRICE);
	snprintf(path, sizeof(path), "/v1/receipts/%s", jstr(rc, "id"));
	req(d.key, "GET", path, NULL, &g);
	assert_int_equal(g.status, 200);
	assert_true(json_object_object_get_ex(g.json, "body", &body));
	assert_int_equal(jint(body, "latency_ms"), billed);
	assert_int_equal(jint(body, "cost_micro_usd"), jint(bill, "cost_micro_usd"));
	http_reply_free(&g);
	usage(&consumed, &reserved);
	assert_int_equal(consumed, jint(bill, "cost_micro_usd"));
	assert_int_equal(reserved, 0);
	http_reply_free(&r);
}

/* A guest that reboots itself mid-run breaks the execution (500), and the
 * time it used is charged: before, the whole hold was released. */
static void guest_that_reboots_pays_for_its_time(void **state)
{
	struct http_reply r;
	int64_t consumed, reserved;

	exec_daemon();
	execute("sleep 2; echo b > /proc/sysrq-trigger; reboot -f; sleep 30", 10, &r);
	print_message("reboot: %d %s\n", r.status, r.body);
	assert_int_equal(r.status, 500);
	assert_string_equal(jerr(r.json, "type"), "sandbox_error");
	http_reply_free(&r);
	usage(&consumed, &reserved);
	print_message("consumed %lld reserved %lld\n", (long long)consumed, (long long)reserved);
	assert_int_equal(reserved, 0);
	assert_true(consumed >= 2 * EXEC_PRICE && consumed <= 10 * EXEC_PRICE);
}

/* ------------------------------------------------- item 6: host disk */

#define FS_MIB	     1400 /* the state dir's own filesystem in this test */
#define MIN_FREE_MIB 128

static bool fs_mounted;

static int teardown_fs(void **state)
{
	char dir[256];

	snprintf(dir, sizeof(dir), "%s", d.state_dir);
	teardown_each(state);
	if (fs_mounted) {
		umount2(dir, MNT_DETACH);
		rmdir(dir);
		fs_mounted = false;
	}
	return 0;
}

static uint64_t fs_free_mib(const char *path)
{
	struct statvfs st;

	assert_int_equal(statvfs(path, &st), 0);
	return (uint64_t)st.f_bavail * st.f_frsize / (1024 * 1024);
}

static void create_status(const char *body, int want, char id[64])
{
	struct http_reply r;

	req(d.key, "POST", "/v1/sandboxes", body, &r);
	if (r.status != want)
		fail_msg("create %s: %d %s", body, r.status, r.body);
	if (want == 201)
		snprintf(id, 64, "%s", jstr(r.json, "id"));
	else
		assert_non_null(strstr(r.headers, "Retry-After"));
	http_reply_free(&r);
}

/* The state dir and the database on a small filesystem of their own
 * (tmpfs, FS_MIB). A guest whose disk could outgrow what is free (2 GiB)
 * is refused up front; one that fits (1 GiB) writes every block of its
 * disk, and the filesystem still has min_free_disk_mib for the ledger:
 * further creates get 503, the delete settles, the ledger checks out. */
static void a_full_guest_disk_leaves_the_ledger_room(void **state)
{
	char id[64], other[64], path[160], cmd[512];
	struct http_reply r;
	struct sbx_error err;
	struct store *s;

	/* the harness's state dir, mounted before it copies the images in */
	snprintf(d.state_dir, sizeof(d.state_dir), "/var/lib/sandboxd-test/%d", (int)getpid());
	snprintf(cmd, sizeof(cmd), "mkdir -p -m 0755 %s", d.state_dir);
	assert_int_equal(run_cmd(cmd), 0);
	snprintf(cmd, sizeof(cmd), "size=%dm,mode=0755", FS_MIB);
	assert_int_equal(mount("tmpfs", d.state_dir, "tmpfs", 0, cmd), 0);
	fs_mounted = true;
	if (daemon_config_full(&d, "\"min_free_disk_mib\": 128, \"default_size\": \"small\", "
				   "\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": 512, "
				   "\"disk_gib\": 1, \"price_micro_usd_per_hour\": 90000}, "
				   "\"big\": {\"vcpus\": 1, \"memory_mib\": 512, \"disk_gib\": 2, "
				   "\"price_micro_usd_per_hour\": 90000}}") < 0)
		fail_msg("no full image (make image-full)");
	assert_int_equal(daemon_up(&d), 0);
	print_message("%llu MiB free on the state dir's filesystem\n",
		      (unsigned long long)fs_free_mib(d.state_dir));

	/* 2 GiB of guest disk cannot be covered: refused before anything */
	create_status("{\"size\": \"big\"}", 503, NULL);
	create_status("{\"size\": \"small\"}", 201, id);
	/* ... and a second 1 GiB once the first is admitted */
	create_status("{\"size\": \"small\"}", 503, NULL);

	/* the tenant writes every block of its disk (the raw device) */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", id);
	req(d.key, "POST", path,
	    "{\"command\": \"dd if=/dev/zero of=/dev/vda bs=1M oflag=direct 2>&1 | tail -1\", "
	    "\"timeout_ms\": 240000}",
	    &r);
	print_message("fill: %d %.300s\n", r.status, r.body);
	http_reply_free(&r);
	print_message("%llu MiB free after the fill\n",
		      (unsigned long long)fs_free_mib(d.state_dir));
	assert_true(fs_free_mib(d.state_dir) >= MIN_FREE_MIB);
	create_status("{\"size\": \"small\"}", 503, NULL);

	/* the ledger still writes: the delete settles */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	req(d.key, "DELETE", path, NULL, &r);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	req(d.key, "GET", "/v1/usage", NULL, &r);
	assert_int_equal(r.status, 200);
	assert_int_equal(jint(r.json, "reserved_micro_usd"), 0);
	http_reply_free(&r);
	sbx_error_clear(&err);
	s = store_open(d.db, &err);
	assert_non_null(s);
	if (store_ledger_check(s, NULL, &err) < 0)
		fail_msg("ledger: %s", err.message);
	store_close(s);
	/* the room came back with the overlay */
	create_status("{\"size\": \"small\"}", 201, other);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", other);
	req(d.key, "DELETE", path, NULL, &r);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
}

/* What the database keeps of execution results is bounded: one stored copy
 * at most execution_store_max_bytes (the reply itself is whole), at most
 * execution_store_account_max_bytes per account, the oldest dropped. */
static void stored_results_are_bounded(void **state)
{
	struct http_reply r[3], g;
	char path[3][160];

	exec_daemon_with(", \"execution_store_max_bytes\": 4096, "
			 "\"execution_store_account_max_bytes\": 8192");
	execute("head -c 20000 /dev/zero | tr '\\0' a", 10, &r[0]);
	execute("head -c 3000 /dev/zero | tr '\\0' b", 10, &r[1]);
	execute("head -c 3000 /dev/zero | tr '\\0' c", 10, &r[2]);
	for (int i = 0; i < 3; i++) {
		if (r[i].status != 200)
			fail_msg("execute %d: %d %s", i, r[i].status, r[i].body);
		snprintf(path[i], sizeof(path[i]), "/v1/sandbox/executions/%s",
			 jstr(r[i].json, "id"));
	}
	/* the reply had it all */
	assert_int_equal(strlen(jstr(r[0].json, "stdout")), 20000);
	/* the oldest stored copy made room for the newer two (1.1 + 3.8 + 3.8
	 * KB > 8 KiB) */
	req(d.key, "GET", path[0], NULL, &g);
	print_message("oldest: %d %s\n", g.status, g.body);
	assert_int_equal(g.status, 404);
	assert_non_null(strstr(jerr(g.json, "message"), "no longer stored"));
	http_reply_free(&g);
	for (int i = 1; i < 3; i++) {
		req(d.key, "GET", path[i], NULL, &g);
		assert_int_equal(g.status, 200);
		assert_string_equal(g.body, r[i].body); /* the same bytes */
		http_reply_free(&g);
		http_reply_free(&r[i]);
	}
	http_reply_free(&r[0]);

	/* a big one alone: kept cut to the cap, flagged */
	execute("head -c 20000 /dev/zero | tr '\\0' d", 10, &r[0]);
	assert_int_equal(r[0].status, 200);
	snprintf(path[0], sizeof(path[0]), "/v1/sandbox/executions/%s", jstr(r[0].json, "id"));
	req(d.key, "GET", path[0], NULL, &g);
	assert_int_equal(g.status, 200);
	print_message("stored copy: %zu bytes of %zu\n", g.body_len, r[0].body_len);
	assert_true(g.body_len <= 4096);
	assert_int_equal(jbool(g.json, "stored_truncated"), 1);
	assert_int_equal(strlen(jstr(g.json, "stdout")), 4096 / 16);
	assert_string_equal(jstr(g.json, "id"), jstr(r[0].json, "id"));
	http_reply_free(&g);
	http_reply_free(&r[0]);
}

/* ------------------------------------------------- item 7: file modes */

static unsigned mode_of(const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0)
		fail_msg("stat %s: %s", path, strerror(errno));
	return st.st_mode & 07777;
}

/* Every file the daemon made under run/ is its owner's only. */
static int check_run_dir(const char *run, int *overlays)
{
	char cmd[512], line[600];
	int n = 0;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "find '%s' -mindepth 1 -printf '%%m %%u %%p\\n'", run);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p)) {
		unsigned m = (unsigned)strtoul(line, NULL, 8);

		print_message("  %s", line);
		if (strstr(line, ".qcow2"))
			(*overlays)++;
		/* the channel socket is qemu's (its own umask): connecting needs
		 * write permission, which others lack; files have no bit for
		 * group or others at all */
		if (strstr(line, ".sock\n") ? (m & 002) != 0 : (m & 077) != 0)
			n++;
	}
	pclose(p);
	return n;
}

/* The daemon runs with umask 077: the database (and -wal/-shm), overlays
 * and the run dir's files are the owner's only, the state and run
 * directories 0711 (qemu, as libvirt-qemu, needs only to reach the files
 * libvirt relabels for it), and a guest with a 0600 overlay still boots
 * and writes its disk. */
static void files_are_the_owners_only(void **state)
{
	char id[64], path[600], run[300];
	struct http_reply r;
	int overlays = 0;

	if (daemon_config_full(&d, "\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": 512, "
				   "\"disk_gib\": 2, \"price_micro_usd_per_hour\": 90000}}") < 0)
		fail_msg("no full image (make image-full)");
	assert_int_equal(daemon_up(&d), 0);
	create_ok("{}", id);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", id);
	req(d.key, "POST", path, "{\"command\": \"echo hi > /root/x && cat /root/x\"}", &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "stdout"), "hi\n");
	http_reply_free(&r);

	snprintf(run, sizeof(run), "%s/run", d.state_dir);
	print_message("state dir %o, run dir %o, db %o\n", mode_of(d.state_dir), mode_of(run),
		      mode_of(d.db));
	assert_int_equal(mode_of(d.state_dir), 0711);
	assert_int_equal(mode_of(run), 0711);
	assert_int_equal(mode_of(d.db), 0600);
	snprintf(path, sizeof(path), "%s-wal", d.db);
	assert_int_equal(mode_of(path), 0600);
	snprintf(path, sizeof(path), "%s-shm", d.db);
	assert_int_equal(mode_of(path), 0600);
	assert_int_equal(check_run_dir(run, &overlays), 0);
	assert_int_equal(overlays, 1);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	req(d.key, "DELETE", path, NULL, &r);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
}

/* ------------------------------------------------- item 8: extend race */

struct bg_extend {
	char path[160];
	const char *body;
	struct http_reply r;
};

static void *bg_extend_main(void *arg)
{
	struct bg_extend *b = arg;

	if (http_request(&d, "POST", b->path, d.key, NULL, b->body, 0, &b->r) < 0)
		b->r.status = -1;
	return NULL;
}

/* Two extends race: the first (to now + 8 "minutes") is held by the pause
 * fault right after its hold committed, before it publishes the new expiry
 * in memory; the second (to now + 60) completes meanwhile. When the first
 * resumes, the in-memory expiry must stay at the later one: the sandbox is
 * still running after the first one's expiry has passed. */
static void concurrent_extends_never_shorten(void **state)
{
	struct bg_extend b = {.body = "{\"timeout_minutes\": 8}"};
	struct http_reply r;
	char id[64], exp0[40], path[160];
	pthread_t t;
	int64_t t_b;
	bool moved = false;

	daemon_config(&d, "\"test_minute_ms\": 1000, \"test_fault_point\": \"extend.after_hold\", "
			  "\"test_fault_pause_ms\": 4000, " SMALL_SIZE);
	assert_int_equal(daemon_up(&d), 0);
	create_ok("{\"timeout_minutes\": 5}", id);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	req(d.key, "GET", path, NULL, &r);
	snprintf(exp0, sizeof(exp0), "%s", jstr(r.json, "expires_at"));
	http_reply_free(&r);

	snprintf(b.path, sizeof(b.path), "/v1/sandboxes/%s/extend", id);
	t_b = sbx_mono_ms();
	assert_int_equal(pthread_create(&t, NULL, bg_extend_main, &b), 0);
	/* The first extend's row update is visible: it is now in the pause. */
	for (int i = 0; i < 200 && !moved; i++) {
		req(d.key, "GET", path, NULL, &r);
		moved = strcmp(jstr(r.json, "expires_at"), exp0) != 0;
		http_reply_free(&r);
		if (!moved)
			usleep(20000);
	}
	assert_true(moved);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/extend", id);
	req(d.key, "POST", path, "{\"timeout_minutes\": 60}", &r);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	pthread_join(t, NULL);
	assert_int_equal(b.r.status, 200);
	http_reply_free(&b.r);

	/* Past the first extend's expiry (+8 s) and a few timer ticks. */
	while (sbx_mono_ms() - t_b < 8000 + 3000)
		usleep(100000);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	req(d.key, "GET", path, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "running");
	http_reply_free(&r);
	assert_int_equal(count_own_domains(&d), 1);
	req(d.key, "DELETE", path, NULL, &r);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(keys_cannot_escalate, teardown_each),
	    cmocka_unit_test_teardown(execution_bills_and_signs_host_time, teardown_each),
	    cmocka_unit_test_teardown(guest_that_reboots_pays_for_its_time, teardown_each),
	    cmocka_unit_test_teardown(concurrent_extends_never_shorten, teardown_each),
	    cmocka_unit_test_teardown(files_are_the_owners_only, teardown_each),
	    cmocka_unit_test_teardown(a_full_guest_disk_leaves_the_ledger_room, teardown_fs),
	    cmocka_unit_test_teardown(stored_results_are_bounded, teardown_each),
	};
	if (getenv("SBX_TEST_FILTER"))
		cmocka_set_test_filter(getenv("SBX_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
