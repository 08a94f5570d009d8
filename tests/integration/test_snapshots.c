/* Disk snapshots and templates (issue 29) in real guests of the full
 * image: one daemon, one source sandbox shared by the cases, in order.
 *
 *  1. a file written before a snapshot of the running source is in the
 *     snapshot, and so is a local wheel pip installed before it; the source keeps running (a file
 * written after is not in the snapshot); the snapshot's file is 0600 in the run dir, backed by the
 * base image only;
 *  2. two sandboxes created from it at once both have the file, neither
 *     has the later one, each has its own boot id (and neither is the
 *     source's); both are cold boots; a snapshot of one of them is backed
 *     by the base only and a sandbox from it has that one's writes;
 *  3. another account gets 404 on every route (take, get, delete, a
 *     create from it) and an empty list;
 *  4. a snapshot of the paused source; a sandbox from it has the file;
 *  5. delete: 409 snapshot_in_use while sandboxes start from it, 200 once
 *     they are gone, then 404 and the file gone; the storage was charged
 *     once (its holds and charges equal the row's charge_micro and the
 *     cost of its bytes over its life) and the ledger invariants hold;
 *  6. caps: past max_snapshots 429 concurrency_limit; /v1/limits shows
 *     the caps and the price;
 *  6b. the CLI: sbx snapshot create|list|get|delete, sbx create --snapshot;
 *  6c. a sandbox without a disk (the tiny image, its own daemon): 400;
 *  7. a crash after the copy (fault snapshot.after_copy) leaves no row and
 *     no file after the restart; a domain left suspended (a crash during
 *     the copy, made here with virsh) is resumed by the restart and its
 *     sandbox answers; a crash in a delete (snapshot_delete.after_begin)
 *     is finished by the restart: file gone, row deleted, charged once.
 *
 * Snapshot and create-from-snapshot times and file sizes are printed
 * (figures, not assertions). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "billing/billing.h"
#include "harness.h"

static struct daemon d;
static char other_key[128];
static char src[64];
static char snap1[64]; /* of the running source, case 1 */

#define BASE_CFG                                                                                   \
	"\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": 512, \"disk_gib\": 2, "             \
	"\"price_micro_usd_per_hour\": 90000}}, \"http_threads\": 4, \"destroy_on_exit\": true, "  \
	"\"transport\": \"socket\", \"max_snapshots\": 3, "                                        \
	"\"snapshot_storage_micro_per_gib_hour\": 100000000"

static void start_with(const char *more)
{
	char extra[1024];

	snprintf(extra, sizeof(extra), "%s%s%s", BASE_CFG, more[0] ? ", " : "", more);
	assert_int_equal(daemon_config_full(&d, extra), 0);
	assert_int_equal(daemon_start(&d), 0);
}

static int setup(void **state)
{
	(void)state;
	memset(&d, 0, sizeof(d));
	if (daemon_up_full_second_account(&d, "test_snapshots", BASE_CFG, "other", "10", other_key,
					  sizeof(other_key)) < 0)
		return -1;
	return daemon_create_sandbox(&d, src, sizeof(src));
}

static int teardown(void **state)
{
	(void)state;
	return daemon_down(&d);
}

static struct http_reply call(const char *key, const char *method, const char *path,
			      const char *body)
{
	struct http_reply r;

	if (http_request(&d, method, path, key, NULL, body, 0, &r) < 0)
		fail_msg("no answer to %s %s", method, path);
	return r;
}

/* stdout of `cmd` in sandbox id (exit 0 asserted) into out. */
static void run_in(const char *id, const char *cmd, char *out, size_t n)
{
	struct http_reply r;

	assert_int_equal(sandbox_command(&d, id, "exec", cmd, 60000, &r), 0);
	if (r.status != 200 || jint(r.json, "exit_code") != 0)
		fail_msg("exec '%s' in %s: %d %s", cmd, id, r.status, r.body);
	snprintf(out, n, "%s", jstr(r.json, "stdout"));
	http_reply_free(&r);
}

/* The reply's "id" (asserted present), borrowed. */
static const char *jid(json_object *o)
{
	const char *id = jstr(o, "id");

	assert_non_null(id);
	return id ? id : "";
}

/* POST /v1/sandboxes/ID/snapshots as key: the reply (caller frees). */
static struct http_reply take(const char *key, const char *id, const char *body)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/snapshots", id);
	return call(key, "POST", path, body);
}

static void snap_path(const char *id, char *out, size_t n)
{
	snprintf(out, n, "%s/run/%s.qcow2", d.state_dir, id);
}

/* A wheel made by hand in the guest (no network, no build tools: a wheel
 * is a zip with its metadata and RECORD) and installed with pip, as a
 * user installs a local package before making a template. */
#define INSTALL_A_LOCAL_WHEEL                                                                      \
	"set -e; cat > /tmp/mkwheel.py <<'EOF'\n"                                                  \
	"import base64, hashlib, zipfile\n"                                                        \
	"files = {'sbxwheel/__init__.py': 'answer = 42\\n',\n"                                     \
	"         'sbxwheel-1.0.dist-info/METADATA': 'Metadata-Version: 2.1\\nName: "              \
	"sbxwheel\\nVersion: 1.0\\n',\n"                                                           \
	"         'sbxwheel-1.0.dist-info/WHEEL': 'Wheel-Version: 1.0\\nGenerator: "               \
	"hand\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n'}\n"                                  \
	"rec = []\n"                                                                               \
	"with zipfile.ZipFile('/tmp/sbxwheel-1.0-py3-none-any.whl', 'w') as z:\n"                  \
	"    for n, c in files.items():\n"                                                         \
	"        z.writestr(n, c)\n"                                                               \
	"        h = base64.urlsafe_b64encode(hashlib.sha256(c.encode()).digest())\n"              \
	"        rec.append('%s,sha256=%s,%d' % (n, h.rstrip(b'=').decode(), len(c)))\n"           \
	"    rec.append('sbxwheel-1.0.dist-info/RECORD,,')\n"                                      \
	"    z.writestr('sbxwheel-1.0.dist-info/RECORD', '\\n'.join(rec) + '\\n')\n"               \
	"EOF\n"                                                                                    \
	"python3 /tmp/mkwheel.py\n"                                                                \
	"python3 -m pip install -q --no-index --break-system-packages "                            \
	"/tmp/sbxwheel-1.0-py3-none-any.whl\n"                                                     \
	"python3 -c 'import sbxwheel; print(sbxwheel.answer)'\n"

static void snapshot_of_a_running_sandbox(void **state)
{
	char out[256], path[512], cmd[700];
	struct http_reply r;
	struct stat st;
	int64_t t0;

	(void)state;
	run_in(src, INSTALL_A_LOCAL_WHEEL, out, sizeof(out));
	assert_string_equal(out, "42\n");
	run_in(src, "echo before-snapshot > /root/snap-file && sync", out, sizeof(out));
	t0 = sbx_mono_ms();
	r = take(d.key, src, "{\"name\": \"with the file\"}");
	print_message("snapshot of a running sandbox: %lld ms: %s\n",
		      (long long)(sbx_mono_ms() - t0), r.body);
	assert_int_equal(r.status, 201);
	assert_string_equal(jstr(r.json, "object"), "snapshot");
	assert_true(strncmp(jstr(r.json, "id"), "snap_", 5) == 0);
	assert_string_equal(jstr(r.json, "name"), "with the file");
	assert_string_equal(jstr(r.json, "sandbox_id"), src);
	assert_int_equal(jint(r.json, "disk_gib"), 2);
	assert_true(jint(r.json, "bytes") > 0);
	snprintf(snap1, sizeof(snap1), "%s", jid(r.json));
	http_reply_free(&r);

	/* one file, 0600, whose only backing is the base image */
	snap_path(snap1, path, sizeof(path));
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	snprintf(cmd, sizeof(cmd),
		 "qemu-img info -U --backing-chain '%s' | grep -c '^backing file:'", path);
	assert_int_equal(cmd_out(cmd, out, sizeof(out)), 0);
	assert_int_equal(atoi(out), 1);
	print_message("snapshot file: %lld bytes on disk\n", (long long)st.st_blocks * 512);

	/* the source runs on */
	run_in(src, "cat /root/snap-file && echo after-snapshot > /root/later-file", out,
	       sizeof(out));
	assert_string_equal(out, "before-snapshot\n");

	/* the source's disk is the image's */
	{
		char sp[128];

		snprintf(sp, sizeof(sp), "/v1/sandboxes/%s", src);
		r = call(d.key, "GET", sp, NULL);
		assert_int_equal(r.status, 200);
		assert_true(jis_null(r.json, "snapshot"));
		http_reply_free(&r);
	}
	/* a bad name: 400 naming it */
	r = take(d.key, src, "{\"name\": 7}");
	assert_int_equal(r.status, 400);
	http_reply_free(&r);
	r = take(d.key, src, "{\"nom\": \"x\"}");
	assert_int_equal(r.status, 400);
	http_reply_free(&r);
}

struct bg_create {
	pthread_t t;
	const char *snap;
	int status;
	char id[64];
	int64_t ms;
};

static void *bg_create_main(void *arg)
{
	struct bg_create *b = arg;
	struct http_reply r;
	char body[128];
	int64_t t0 = sbx_mono_ms();

	snprintf(body, sizeof(body), "{\"snapshot\": \"%s\", \"timeout_minutes\": 10}", b->snap);
	if (http_request(&d, "POST", "/v1/sandboxes", d.key, NULL, body, 0, &r) < 0)
		return NULL;
	b->ms = sbx_mono_ms() - t0;
	b->status = r.status;
	if (r.status == 201) {
		snprintf(b->id, sizeof(b->id), "%s", jstr(r.json, "id"));
		if (strcmp(jstr(r.json, "startup_path"), "cold") != 0)
			b->status = -2;
		if (!jstr(r.json, "snapshot") || strcmp(jstr(r.json, "snapshot"), b->snap) != 0)
			b->status = -3; /* the object names its snapshot */
	} else {
		print_message("create from %s: %d %s\n", b->snap, r.status, r.body);
	}
	http_reply_free(&r);
	return NULL;
}

static char made[2][64];

static void two_sandboxes_from_one_snapshot(void **state)
{
	struct bg_create b[2] = {{.snap = snap1}, {.snap = snap1}};
	char src_boot[64], boot[2][64], out[256];

	(void)state;
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&b[i].t, NULL, bg_create_main, &b[i]), 0);
	for (int i = 0; i < 2; i++) {
		pthread_join(b[i].t, NULL);
		print_message("create from a snapshot (at once with another): %lld ms\n",
			      (long long)b[i].ms);
		assert_int_equal(b[i].status, 201);
		snprintf(made[i], sizeof(made[i]), "%s", b[i].id);
	}
	run_in(src, "cat /proc/sys/kernel/random/boot_id", src_boot, sizeof(src_boot));
	for (int i = 0; i < 2; i++) {
		run_in(made[i],
		       "cat /root/snap-file; test -e /root/later-file || echo no-later-file", out,
		       sizeof(out));
		assert_string_equal(out, "before-snapshot\nno-later-file\n");
		/* the wheel pip installed in the source before the snapshot */
		run_in(made[i], "python3 -c 'import sbxwheel; print(sbxwheel.answer)'", out,
		       sizeof(out));
		assert_string_equal(out, "42\n");
		run_in(made[i], "cat /proc/sys/kernel/random/boot_id", boot[i], sizeof(boot[i]));
		assert_string_not_equal(boot[i], src_boot);
		/* writes stay its own */
		snprintf(out, sizeof(out), "echo %d > /root/snap-file", i);
		run_in(made[i], out, out, sizeof(out));
	}
	assert_string_not_equal(boot[0], boot[1]);
	run_in(made[0], "cat /root/snap-file", out, sizeof(out));
	assert_string_equal(out, "0\n");
	run_in(src, "cat /root/snap-file", out, sizeof(out));
	assert_string_equal(out, "before-snapshot\n");

	/* a snapshot of a template flattens its chain: backed by the base
	 * only, with its own writes and its snapshot's files */
	{
		struct http_reply r = take(d.key, made[0], NULL);
		struct bg_create b2 = {0};
		char snap[64], path[512], cmd[700], path2[128];

		assert_int_equal(r.status, 201);
		snprintf(snap, sizeof(snap), "%s", jid(r.json));
		http_reply_free(&r);
		snap_path(snap, path, sizeof(path));
		snprintf(cmd, sizeof(cmd),
			 "qemu-img info -U --backing-chain '%s' | grep -c '^backing file:'", path);
		assert_int_equal(cmd_out(cmd, out, sizeof(out)), 0);
		assert_int_equal(atoi(out), 1);
		b2.snap = snap;
		bg_create_main(&b2);
		assert_int_equal(b2.status, 201);
		run_in(b2.id, "cat /root/snap-file; test -e /root/later-file || echo no-later-file",
		       out, sizeof(out));
		assert_string_equal(out, "0\nno-later-file\n");
		assert_int_equal(daemon_delete_sandbox(&d, b2.id, NULL, 0), 200);
		snprintf(path2, sizeof(path2), "/v1/snapshots/%s", snap);
		r = call(d.key, "DELETE", path2, NULL);
		assert_int_equal(r.status, 200);
		http_reply_free(&r);
	}
}

static void another_account_gets_404(void **state)
{
	char path[128], body[128];
	struct http_reply r;

	(void)state;
	r = take(other_key, src, NULL);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);
	snprintf(path, sizeof(path), "/v1/snapshots/%s", snap1);
	r = call(other_key, "GET", path, NULL);
	assert_int_equal(r.status, 404);
	assert_string_equal(jerr(r.json, "type"), "not_found");
	http_reply_free(&r);
	r = call(other_key, "DELETE", path, NULL);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);
	snprintf(body, sizeof(body), "{\"snapshot\": \"%s\"}", snap1);
	r = call(other_key, "POST", "/v1/sandboxes", body);
	assert_int_equal(r.status, 404);
	assert_string_equal(jerr(r.json, "param"), "snapshot");
	http_reply_free(&r);
	r = call(other_key, "GET", "/v1/snapshots", NULL);
	assert_int_equal(r.status, 200);
	assert_int_equal(json_object_array_length(json_object_object_get(r.json, "data")), 0);
	http_reply_free(&r);
	/* the owner sees it, and it is still there */
	r = call(d.key, "GET", path, NULL);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "id"), snap1);
	http_reply_free(&r);
}

static void snapshot_of_a_paused_sandbox(void **state)
{
	char path[128], body[128], snap2[64], out[256];
	struct http_reply r;
	struct bg_create b = {0};

	(void)state;
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/pause", src);
	r = call(d.key, "POST", path, NULL);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	r = take(d.key, src, NULL);
	print_message("snapshot of a paused sandbox: %s\n", r.body);
	assert_int_equal(r.status, 201);
	assert_string_equal(jstr(r.json, "name"), "");
	snprintf(snap2, sizeof(snap2), "%s", jid(r.json));
	http_reply_free(&r);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/resume", src);
	r = call(d.key, "POST", path, NULL);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);

	b.snap = snap2;
	bg_create_main(&b);
	assert_int_equal(b.status, 201);
	run_in(b.id, "cat /root/later-file", out, sizeof(out));
	assert_string_equal(out, "after-snapshot\n");
	assert_int_equal(daemon_delete_sandbox(&d, b.id, NULL, 0), 200);
	snprintf(path, sizeof(path), "/v1/snapshots/%s", snap2);
	r = call(d.key, "DELETE", path, NULL);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	/* a create of a deleted snapshot: 404 */
	snprintf(body, sizeof(body), "{\"snapshot\": \"%s\"}", snap2);
	r = call(d.key, "POST", "/v1/sandboxes", body);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);
}

static void delete_waits_for_its_sandboxes_and_charges_once(void **state)
{
	char path[128], file[512], buf[64];
	struct http_reply r;
	struct sbx_error err;
	struct stat st;
	int64_t charged;

	(void)state;
	snprintf(path, sizeof(path), "/v1/snapshots/%s", snap1);
	r = call(d.key, "DELETE", path, NULL);
	print_message("delete while sandboxes start from it: %d %s\n", r.status, r.body);
	assert_int_equal(r.status, 409);
	assert_string_equal(jerr(r.json, "type"), "snapshot_in_use");
	http_reply_free(&r);
	for (int i = 0; i < 2; i++)
		assert_int_equal(daemon_delete_sandbox(&d, made[i], NULL, 0), 200);
	r = call(d.key, "DELETE", path, NULL);
	assert_int_equal(r.status, 200);
	charged = jint(r.json, "cost_micro_usd");
	print_message("snapshot deleted, its storage cost %lld µ$\n", (long long)charged);
	assert_true(charged > 0);
	http_reply_free(&r);
	snap_path(snap1, file, sizeof(file));
	assert_int_not_equal(stat(file, &st), 0);
	r = call(d.key, "GET", path, NULL);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);
	r = call(d.key, "DELETE", path, NULL);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);

	/* charged once: its charges (one per minute-settle and the delete's,
	 * each with its hold) add up to the row's charge and to the cost of
	 * its bytes from created_at to the delete, each settle rounding up at
	 * most 1 µ$ */
	int64_t n_charges, sum, want;
	assert_int_equal(daemon_db_text(&d,
					"SELECT count(*) || ' ' || SUM(amount_micro) FROM ledger"
					" WHERE snapshot_id = ?1 AND kind = 'charge'",
					snap1, buf, sizeof(buf)),
			 0);
	assert_int_equal(sscanf(buf, "%" SCNd64 " %" SCNd64, &n_charges, &sum), 2);
	assert_true(n_charges >= 1);
	assert_int_equal(sum, charged);
	assert_int_equal(daemon_db_text(&d,
					"SELECT SUM(amount_micro) FROM ledger"
					" WHERE snapshot_id = ?1 AND kind = 'hold'",
					snap1, buf, sizeof(buf)),
			 0);
	assert_int_equal(atoll(buf), charged);
	assert_int_equal(
	    daemon_db_text(&d,
			   "SELECT charge_micro || ' ' || bytes || ' ' ||"
			   " (deleted_at_ms - created_at_ms) || ' ' || price_micro_per_gib_hour"
			   " FROM snapshots WHERE id = ?1 AND status = 'deleted'",
			   snap1, buf, sizeof(buf)),
	    0);
	int64_t row_charge, bytes, ms, price;
	assert_int_equal(sscanf(buf, "%" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64, &row_charge,
				&bytes, &ms, &price),
			 4);
	assert_int_equal(row_charge, charged);
	want = billing_storage_cost(bytes, ms, price);
	print_message("%lld charges, %lld µ$; one for the whole time: %lld µ$\n",
		      (long long)n_charges, (long long)sum, (long long)want);
	assert_true(sum >= want && sum <= want + n_charges - 1);
	assert_int_equal(daemon_ledger_check(&d, &err), 0);
}

static void caps_and_limits(void **state)
{
	char ids[3][64];
	struct http_reply r;
	int i;

	(void)state;
	r = call(NULL, "GET", "/v1/limits", NULL);
	assert_int_equal(r.status, 200);
	assert_int_equal(jint(r.json, "snapshots"), 3);
	assert_int_equal(jint(r.json, "snapshot_bytes"), 10LL << 30);
	assert_string_equal(jstr(r.json, "snapshot_storage_usd_per_gib_hour"), "100.000000");
	http_reply_free(&r);
	for (i = 0; i < 3; i++) {
		r = take(d.key, src, NULL);
		assert_int_equal(r.status, 201);
		snprintf(ids[i], sizeof(ids[i]), "%s", jid(r.json));
		http_reply_free(&r);
	}
	r = take(d.key, src, NULL);
	print_message("past max_snapshots: %d %s\n", r.status, r.body);
	assert_int_equal(r.status, 429);
	assert_string_equal(jerr(r.json, "type"), "concurrency_limit");
	http_reply_free(&r);
	r = call(d.key, "GET", "/v1/snapshots", NULL);
	assert_int_equal(json_object_array_length(json_object_object_get(r.json, "data")), 3);
	http_reply_free(&r);
	for (i = 0; i < 3; i++) {
		char path[256];

		snprintf(path, sizeof(path), "/v1/snapshots/%s", ids[i]);
		r = call(d.key, "DELETE", path, NULL);
		assert_int_equal(r.status, 200);
		http_reply_free(&r);
	}
}

/* `sbx ARGS` against the daemon: its stdout into out; its exit code. */
static int sbx_cli(char *out, size_t n, const char *args)
{
	const char *bin = sbx_bin(), *slash = strrchr(bin, '/');
	char cmd[1024];

	snprintf(cmd, sizeof(cmd),
		 "env -i PATH=/usr/bin:/bin SANDBOXD_URL=http://127.0.0.1:%d SANDBOXD_KEY=%s "
		 "%.*s%ssbx %s 2>/dev/null",
		 d.port, d.key, slash ? (int)(slash - bin) : 3, slash ? bin : "bin", "/", args);
	return cmd_out(cmd, out, n);
}

static void the_cli(void **state)
{
	char snap[64], sbx2[64], out[1024], args[256];

	(void)state;
	snprintf(args, sizeof(args), "snapshot create %s --name from-cli", src);
	assert_int_equal(sbx_cli(snap, sizeof(snap), args), 0);
	assert_true(strncmp(snap, "snap_", 5) == 0);
	assert_int_equal(sbx_cli(out, sizeof(out), "snapshot list"), 0);
	assert_non_null(strstr(out, snap));
	assert_non_null(strstr(out, "from-cli"));
	snprintf(args, sizeof(args), "snapshot get %s", snap);
	assert_int_equal(sbx_cli(out, sizeof(out), args), 0);
	assert_non_null(strstr(out, src));
	snprintf(args, sizeof(args), "create --snapshot %s --timeout 5", snap);
	assert_int_equal(sbx_cli(sbx2, sizeof(sbx2), args), 0);
	assert_true(strncmp(sbx2, "sbx_", 4) == 0);
	run_in(sbx2, "cat /root/snap-file", out, sizeof(out));
	assert_string_equal(out, "before-snapshot\n");
	snprintf(args, sizeof(args), "snapshot delete %s", snap);
	assert_int_equal(sbx_cli(out, sizeof(out), args), 1); /* 409: in use */
	assert_int_equal(daemon_delete_sandbox(&d, sbx2, NULL, 0), 200);
	assert_int_equal(sbx_cli(out, sizeof(out), args), 0);
	assert_non_null(strstr(out, "deleted"));
	snprintf(args, sizeof(args), "snapshot get %s", snap);
	assert_int_equal(sbx_cli(out, sizeof(out), args), 5); /* 404 */
}

/* `method path` under test_fault_point `fault`: the daemon dies at the
 * point (exit 137, no answer); it is not started again. */
static void die_at(const char *fault, const char *method, const char *path)
{
	char more[128];
	struct http_reply r;
	int st = -1;

	daemon_kill9(&d);
	snprintf(more, sizeof(more), "\"test_fault_point\": \"%s\"", fault);
	start_with(more);
	if (http_request(&d, method, path, d.key, NULL, NULL, 0, &r) == 0) {
		print_message("%s %s answered %d %s\n", method, path, r.status, r.body);
		http_reply_free(&r);
		fail();
	}
	for (int i = 0; i < 500 && d.pid > 0; i++) {
		if (waitpid(d.pid, &st, WNOHANG) == d.pid) {
			d.pid = 0;
			break;
		}
		usleep(20000);
	}
	assert_int_equal(d.pid, 0);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 137);
}

static void a_crash_mid_snapshot_leaves_nothing(void **state)
{
	char buf[64], cmd[600], path[128];
	struct sbx_error err;

	(void)state;
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/snapshots", src);
	die_at("snapshot.after_copy", "POST", path);
	/* the row is there, CREATING, and so is its file */
	char cut[64], file[512];
	struct stat fst;

	assert_int_equal(daemon_db_text(&d, "SELECT id FROM snapshots WHERE status = ?1",
					"creating", cut, sizeof(cut)),
			 0);
	assert_true(strncmp(cut, "snap_", 5) == 0);
	snap_path(cut, file, sizeof(file));
	assert_int_equal(stat(file, &fst), 0);
	/* a crash between the suspend and the resume leaves the domain
	 * suspended: the restart resumes it before the reattach */
	{
		char dom[64], vcmd[256];

		assert_int_equal(daemon_db_text(&d, "SELECT domain FROM sandboxes WHERE id = ?1",
						src, dom, sizeof(dom)),
				 0);
		snprintf(vcmd, sizeof(vcmd), "virsh -q -c qemu:///system suspend %s >/dev/null",
			 dom);
		assert_int_equal(run_cmd(vcmd), 0);
	}
	start_with("");
	assert_int_equal(daemon_db_text(&d, "SELECT count(*) FROM snapshots WHERE status = ?1",
					"creating", buf, sizeof(buf)),
			 0);
	assert_string_equal(buf, "0");
	assert_int_not_equal(stat(file, &fst), 0);
	/* and no file any row does not name */
	snprintf(cmd, sizeof(cmd), "ls %s/run | grep -c '^snap_.*qcow2$'", d.state_dir);
	cmd_out(cmd, buf, sizeof(buf));
	assert_int_equal(atoi(buf), 0);
	/* the source was resumed by the restart's reattach, or runs on */
	run_in(src, "cat /root/snap-file", buf, sizeof(buf));
	assert_string_equal(buf, "before-snapshot\n");
	assert_int_equal(daemon_ledger_check(&d, &err), 0);
}

/* A crash between a delete's first step and its file's removal
 * (snapshot_delete.after_begin): the restart finishes it, charged once. */
static void a_crash_mid_delete_finishes_it(void **state)
{
	char snap[64], file[512], path[128], buf[64];
	struct http_reply r;
	struct sbx_error err;
	struct stat fst;

	(void)state;
	r = take(d.key, src, NULL);
	assert_int_equal(r.status, 201);
	snprintf(snap, sizeof(snap), "%s", jid(r.json));
	http_reply_free(&r);
	snap_path(snap, file, sizeof(file));
	snprintf(path, sizeof(path), "/v1/snapshots/%s", snap);
	die_at("snapshot_delete.after_begin", "DELETE", path);
	assert_int_equal(daemon_db_text(&d, "SELECT status FROM snapshots WHERE id = ?1", snap, buf,
					sizeof(buf)),
			 0);
	assert_string_equal(buf, "deleting");
	assert_int_equal(stat(file, &fst), 0);
	start_with("");
	assert_int_equal(daemon_db_text(&d, "SELECT status FROM snapshots WHERE id = ?1", snap, buf,
					sizeof(buf)),
			 0);
	assert_string_equal(buf, "deleted");
	assert_int_not_equal(stat(file, &fst), 0);
	r = call(d.key, "GET", path, NULL);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);
	/* its storage charged once: the charges are the row's */
	assert_int_equal(
	    daemon_db_text(&d,
			   "SELECT (SELECT COALESCE(SUM(amount_micro), 0) FROM ledger"
			   " WHERE snapshot_id = ?1 AND kind = 'charge') = charge_micro"
			   " AND charge_micro > 0 FROM snapshots WHERE id = ?1",
			   snap, buf, sizeof(buf)),
	    0);
	assert_string_equal(buf, "1");
	assert_int_equal(daemon_ledger_check(&d, &err), 0);
}

/* The tiny image has no disk: 400, nothing kept. A second daemon. */
static void no_disk_no_snapshot(void **state)
{
	struct daemon t;
	struct http_reply r;
	char id[64], path[128], buf[32];

	(void)state;
	memset(&t, 0, sizeof(t));
	snprintf(t.tag, sizeof(t.tag), "t");
	daemon_config(&t, "\"destroy_on_exit\": true");
	assert_int_equal(daemon_up(&t), 0);
	assert_int_equal(daemon_create_sandbox(&t, id, sizeof(id)), 0);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/snapshots", id);
	assert_int_equal(http_request(&t, "POST", path, t.key, NULL, NULL, 0, &r), 0);
	print_message("snapshot without a disk: %d %s\n", r.status, r.body);
	assert_int_equal(r.status, 400);
	assert_string_equal(jerr(r.json, "type"), "invalid_request");
	http_reply_free(&r);
	assert_int_equal(daemon_db_text(&t, "SELECT count(*) FROM snapshots WHERE ?1 = ?1", "x",
					buf, sizeof(buf)),
			 0);
	assert_string_equal(buf, "0");
	daemon_down(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(snapshot_of_a_running_sandbox),
	    cmocka_unit_test(two_sandboxes_from_one_snapshot),
	    cmocka_unit_test(another_account_gets_404),
	    cmocka_unit_test(snapshot_of_a_paused_sandbox),
	    cmocka_unit_test(delete_waits_for_its_sandboxes_and_charges_once),
	    cmocka_unit_test(caps_and_limits),
	    cmocka_unit_test(the_cli),
	    cmocka_unit_test(no_disk_no_snapshot),
	    cmocka_unit_test(a_crash_mid_snapshot_leaves_nothing),
	    cmocka_unit_test(a_crash_mid_delete_finishes_it),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
