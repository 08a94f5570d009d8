/* Crash safety against a real daemon and real guests: the daemon dies
 * (`_exit(137)`, as abrupt as kill -9) at each named fault point
 * (sandbox/fault.h, config key test_fault_point), a new daemon starts on
 * the same state dir without the fault, and libvirt and the database must
 * agree:
 *   - every domain of this run's prefix belongs to a running row, and every
 *     running row has its domain (no orphan guest, no ghost sandbox);
 *   - no row is left `creating`;
 *   - reserved == the sum of the holds of running sandboxes (no stray hold);
 *   - store_ledger_check() passes.
 * Then kill -9 during 10 concurrent creates, the same checks, and after
 * deleting everything reserved == 0. Then a libvirtd restart while a
 * sandbox runs (skipped while other daemons share libvirtd) and a frozen
 * guest caught by the liveness ping. Tiny image, 1 vCPU / 256 MiB guests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <pthread.h>

#include "harness.h"
#include "store/store.h"

#define BASE_CFG                                                                                   \
	"\"max_concurrent_boots\": 2, \"liveness_interval_ms\": 1000, \"liveness_misses\": 3, "    \
	"\"max_creates_in_flight_per_account\": 10, "                                              \
	"\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": 256, \"disk_gib\": 1, "             \
	"\"price_micro_usd_per_hour\": 90000}}"

static struct daemon d;
static char sbx_kept[64]; /* the sandbox that lives from after_activate to delete */

/* (Re)write the config with `fault` ("" = none) and `more` keys ("" =
 * none) and start the daemon. */
static void start_with_more(const char *fault, const char *more)
{
	char extra[1024];

	snprintf(extra, sizeof(extra), "%s%s%s%s%s%s", BASE_CFG,
		 fault[0] ? ", \"test_fault_point\": \"" : "", fault, fault[0] ? "\"" : "",
		 more[0] ? ", " : "", more);
	daemon_config(&d, extra);
	assert_int_equal(daemon_start(&d), 0);
}

static void start_with(const char *fault)
{
	start_with_more(fault, "");
}

/* Wait for the daemon to die on its own; returns its exit status. */
static int wait_dead(int timeout_ms)
{
	int64_t t0 = sbx_mono_ms();
	int st;

	while (sbx_mono_ms() - t0 < timeout_ms) {
		pid_t p = waitpid(d.pid, &st, WNOHANG);

		if (p == d.pid) {
			d.pid = 0;
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		}
		usleep(20000);
	}
	return -1;
}

static int setup(void **state)
{
	daemon_config(&d, BASE_CFG);
	daemon_create_account(&d, "10");
	return 0;
}

static int teardown(void **state)
{
	return daemon_down(&d);
}

/* The invariants, checked on the SQLite file and libvirt while the
 * restarted daemon runs. Returns the number of running sandboxes. */
static int check_invariants(const char *when)
{
	char doms[64][64];
	int n_doms = list_own_domains(&d, false, doms, 64), running = 0;
	struct store_sandbox *rows = NULL;
	struct store_balance bal;
	struct sbx_error err;
	struct http_reply r;
	int64_t holds = 0;
	size_t n = 0;
	struct store *s;

	if (n_doms > 64) /* never here: a run has a handful */
		n_doms = 64;
	sbx_error_clear(&err);
	s = store_open(d.db, &err);
	assert_non_null(s);
	assert_int_equal(store_sandbox_list_live(s, &rows, &n, &err), 0);
	for (size_t i = 0; i < n; i++) {
		bool found = false;

		if (rows[i].status == STORE_CREATING)
			fail_msg("%s: row %s is still creating", when, rows[i].id);
		running++;
		holds += rows[i].hold_micro;
		for (int k = 0; k < n_doms; k++)
			found |= strcmp(doms[k], rows[i].domain) == 0;
		if (!found)
			fail_msg("%s: running row %s has no domain %s", when, rows[i].id,
				 rows[i].domain);
	}
	for (int k = 0; k < n_doms; k++) {
		bool found = false;

		for (size_t i = 0; i < n; i++)
			found |= strcmp(doms[k], rows[i].domain) == 0;
		if (!found)
			fail_msg("%s: orphan domain %s (no running row)", when, doms[k]);
	}
	free(rows);
	assert_int_equal(store_balance_get(s, d.account_id, &bal, &err), 0);
	if (bal.reserved_micro != holds)
		fail_msg("%s: reserved %lld != holds of running sandboxes %lld", when,
			 (long long)bal.reserved_micro, (long long)holds);
	if (store_ledger_check(s, NULL, &err) < 0)
		fail_msg("%s: ledger: %s", when, err.message);
	store_close(s);

	/* The API agrees with the file. */
	assert_int_equal(http_request(&d, "GET", "/v1/sandboxes?status=running&limit=100", d.key,
				      NULL, NULL, 0, &r),
			 0);
	assert_int_equal(r.status, 200);
	json_object *data;
	assert_true(json_object_object_get_ex(r.json, "data", &data));
	assert_int_equal((int)json_object_array_length(data), running);
	http_reply_free(&r);
	fprintf(stderr, "# %s: %d running, %d domains, reserved == holds, ledger ok\n", when,
		running, n_doms);
	return running;
}

/* DELETE id on a daemon started with the fault `point` armed: it dies
 * (137) before it answers and leaves no domain; restarted clean, the
 * invariants hold with no sandbox running. */
static void delete_dies_at(const char *id, const char *point)
{
	struct http_reply r;
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	assert_int_equal(http_request(&d, "DELETE", path, d.key, NULL, NULL, 0, &r), -1);
	assert_int_equal(wait_dead(20000), 137);
	assert_int_equal(count_own_domains(&d), 0);
	start_with("");
	assert_int_equal(check_invariants(point), 0);
}

static void sbx_req(const char *method, const char *id, const char *sub, const char *body,
		    struct http_reply *r)
{
	char path[160];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s%s", id, sub ? sub : "");
	assert_int_equal(http_request(&d, method, path, d.key, NULL, body, 0, r), 0);
}

static void exec_ok(const char *id)
{
	struct http_reply r;

	sbx_req("POST", id, "/exec", "{\"command\": \"echo alive\"}", &r);
	if (r.status != 200)
		fail_msg("exec on %s: %d %s", id, r.status, r.body);
	assert_string_equal(jstr(r.json, "stdout"), "alive\n");
	http_reply_free(&r);
}

/* A create under a fault point: the connection drops, the daemon exits
 * 137. Returns how many domains of this run exist right after the crash. */
static int create_and_die(const char *idem)
{
	struct http_reply r;
	char hdr[128];

	snprintf(hdr, sizeof(hdr), "Idempotency-Key: %s\r\n", idem);
	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", d.key, hdr, "{}", 0, &r), -1);
	assert_int_equal(wait_dead(10000), 137);
	return count_own_domains(&d);
}

/* Creates cut before the row became running: nothing survives, the key is
 * freed (the retry creates, not replays), nothing was charged. */
static void crash_in_create_before_running(const char *fault, int doms_at_crash)
{
	struct http_reply r;
	char idem[64], hdr[128];

	start_with(fault);
	snprintf(idem, sizeof(idem), "k-%s", fault);
	assert_int_equal(create_and_die(idem), doms_at_crash);
	start_with("");
	assert_int_equal(check_invariants(fault), 0);
	assert_int_equal(count_own_domains(&d), 0);
	/* The key was freed: the retry creates a new sandbox. */
	snprintf(hdr, sizeof(hdr), "Idempotency-Key: %s\r\n", idem);
	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", d.key, hdr, "{}", 0, &r), 0);
	assert_int_equal(r.status, 201);
	assert_null(strstr(r.headers, "Idempotent-Replayed"));
	char id[64];
	snprintf(id, sizeof(id), "%s", jstr(r.json, "id"));
	http_reply_free(&r);
	sbx_req("DELETE", id, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	assert_int_equal(check_invariants(fault), 0);
	daemon_stop(&d);
}

static void crash_after_reserve(void **state)
{
	crash_in_create_before_running("create.after_reserve", 0);
}

static void crash_after_domain_start(void **state)
{
	crash_in_create_before_running("create.after_domain_start", 1);
}

static void crash_after_hello(void **state)
{
	crash_in_create_before_running("create.after_hello", 1);
}

/* The row is running when the daemon dies: the restart reattaches it. */
static void crash_after_activate(void **state)
{
	struct store_sandbox *rows = NULL;
	struct sbx_error err;
	struct store *s;
	size_t n = 0;

	start_with("create.after_activate");
	assert_int_equal(create_and_die("k-activate"), 1);
	start_with("");
	assert_int_equal(check_invariants("create.after_activate"), 1);
	s = store_open(d.db, &err);
	assert_non_null(s);
	assert_int_equal(store_sandbox_list_live(s, &rows, &n, &err), 0);
	assert_int_equal(n, 1);
	snprintf(sbx_kept, sizeof(sbx_kept), "%s", rows[0].id);
	free(rows);
	store_close(s);
	exec_ok(sbx_kept);

	/* The key stayed bound to the activated sandbox: a retry with it gets
	 * that sandbox (replayed), never a second machine; and again, byte for
	 * byte. */
	struct http_reply r1, r2;
	const char *hdr = "Idempotency-Key: k-activate\r\n";

	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", d.key, hdr, "{}", 0, &r1), 0);
	assert_int_equal(r1.status, 201);
	assert_non_null(strstr(r1.headers, "Idempotent-Replayed: true"));
	assert_string_equal(jstr(r1.json, "id"), sbx_kept);
	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", d.key, hdr, "{}", 0, &r2), 0);
	assert_int_equal(r2.status, 201);
	assert_string_equal(r2.body, r1.body);
	http_reply_free(&r1);
	http_reply_free(&r2);
	assert_int_equal(count_own_domains(&d), 1);
	daemon_stop(&d);
}

/* The extra hold and the new expiry commit together: after the crash the
 * sandbox runs with the later expiry and reserved covers it. */
static void crash_after_extend_hold(void **state)
{
	struct http_reply r;
	int64_t hold_before, hold_after;
	struct store_sandbox row;
	struct sbx_error err;
	struct store *s;

	assert_true(sbx_kept[0]);
	s = store_open(d.db, &err);
	assert_int_equal(store_sandbox_get(s, d.account_id, sbx_kept, &row, &err), 0);
	hold_before = row.hold_micro;
	int64_t expires_before = row.expires_at_ms;
	store_close(s);

	start_with("extend.after_hold");
	char path[128];
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/extend", sbx_kept);
	assert_int_equal(
	    http_request(&d, "POST", path, d.key, NULL, "{\"timeout_minutes\": 60}", 0, &r), -1);
	assert_int_equal(wait_dead(10000), 137);
	start_with("");
	assert_int_equal(check_invariants("extend.after_hold"), 1);
	s = store_open(d.db, &err);
	assert_int_equal(store_sandbox_get(s, d.account_id, sbx_kept, &row, &err), 0);
	hold_after = row.hold_micro;
	store_close(s);
	assert_true(hold_after > hold_before);
	assert_true(row.expires_at_ms > expires_before);
	exec_ok(sbx_kept);
	daemon_stop(&d);
}

/* The domain is destroyed but the row not settled: the restart finds a
 * running row without a domain and ends it as failed at last_seen_at
 * (never later than the DELETE). */
static void crash_after_delete_destroy(void **state)
{
	struct http_reply r;
	int64_t t_delete;

	assert_true(sbx_kept[0]);
	start_with("delete.after_destroy");
	t_delete = sbx_wall_ms();
	delete_dies_at(sbx_kept, "delete.after_destroy");
	sbx_req("GET", sbx_kept, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "failed");
	char ended[32];
	sbx_rfc3339(t_delete + 1000, ended);
	assert_true(strcmp(jstr(r.json, "ended_at"), ended) <= 0);
	http_reply_free(&r);
	/* DELETE now answers 200 with the final object, status unchanged. */
	sbx_req("DELETE", sbx_kept, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "failed");
	http_reply_free(&r);
	daemon_stop(&d);
}

/* Settled and destroyed, only the reply was lost: DELETE repeats 200. */
static void crash_after_delete_settle(void **state)
{
	struct http_reply r;
	char id[64];

	start_with("delete.after_settle");
	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", d.key, NULL, "{}", 0, &r), 0);
	assert_int_equal(r.status, 201);
	snprintf(id, sizeof(id), "%s", jstr(r.json, "id"));
	http_reply_free(&r);
	delete_dies_at(id, "delete.after_settle");
	sbx_req("DELETE", id, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "destroyed");
	http_reply_free(&r);
	daemon_stop(&d);
}

/* The same cut, but the daemon comes back only after the sandbox's expiry
 * passed: billed to its last answer (<= the DELETE), not to the expiry
 * (docs/lifecycle.md "Restart and reconcile"). One "minute" is 4 s. */
static void crash_after_delete_destroy_restart_past_expiry(void **state)
{
	struct http_reply r;
	char id[64], path[128], ended[32], expires[40];
	int64_t t_delete;

	start_with_more("delete.after_destroy", "\"test_minute_ms\": 4000");
	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", d.key, NULL,
				      "{\"timeout_minutes\": 1}", 0, &r),
			 0);
	assert_int_equal(r.status, 201);
	snprintf(id, sizeof(id), "%s", jstr(r.json, "id"));
	snprintf(expires, sizeof(expires), "%s", jstr(r.json, "expires_at"));
	http_reply_free(&r);
	t_delete = sbx_wall_ms();
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	assert_int_equal(http_request(&d, "DELETE", path, d.key, NULL, NULL, 0, &r), -1);
	assert_int_equal(wait_dead(20000), 137);
	assert_int_equal(count_own_domains(&d), 0);
	usleep(6 * 1000 * 1000); /* past expires_at (<= 4 s after the 201) */
	start_with("");
	assert_int_equal(check_invariants("delete.after_destroy, restart past expiry"), 0);
	sbx_req("GET", id, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "failed");
	sbx_rfc3339(t_delete + 1000, ended);
	if (strcmp(jstr(r.json, "ended_at"), ended) > 0)
		fail_msg("ended_at %s is after the DELETE (%s); expires_at %s",
			 jstr(r.json, "ended_at"), ended, expires);
	assert_true(strcmp(jstr(r.json, "ended_at"), expires) < 0);
	http_reply_free(&r);
	daemon_stop(&d);
}

/* ------------------------------------------------- kill -9, 10 creates */

struct par {
	int status;
	char id[64];
};

static void *par_create(void *arg)
{
	struct par *p = arg;
	struct http_reply r;

	if (http_request(&d, "POST", "/v1/sandboxes", d.key, NULL, "{}", 0, &r) < 0) {
		p->status = -1;
		return NULL;
	}
	p->status = r.status;
	if (r.status == 201)
		snprintf(p->id, sizeof(p->id), "%s", jstr(r.json, "id"));
	http_reply_free(&r);
	return NULL;
}

static void kill9_during_ten_creates(void **state)
{
	struct par ps[10] = {0};
	pthread_t t[10];
	int64_t t0;
	int ok = 0, cut = 0, running;

	start_with("");
	for (int i = 0; i < 10; i++)
		pthread_create(&t[i], NULL, par_create, &ps[i]);
	/* Kill once a few guests are up and others are still booting. */
	t0 = sbx_mono_ms();
	while (count_own_domains(&d) < 5 && sbx_mono_ms() - t0 < 60000)
		usleep(100000);
	daemon_kill9(&d);
	for (int i = 0; i < 10; i++) {
		pthread_join(t[i], NULL);
		ok += ps[i].status == 201;
		cut += ps[i].status == -1;
	}
	fprintf(stderr,
		"# kill -9 with 10 creates in flight: %d answered 201, %d cut, %d domains\n", ok,
		cut, count_own_domains(&d));
	assert_int_equal(ok + cut, 10);
	assert_true(cut > 0);
	start_with("");
	running = check_invariants("kill -9 during 10 creates");
	/* Every 201 the clients saw is still running. */
	assert_true(running >= ok);
	for (int i = 0; i < 10; i++)
		if (ps[i].status == 201)
			exec_ok(ps[i].id);

	/* Delete everything: nothing stays reserved. */
	struct store_sandbox *rows = NULL;
	struct sbx_error err;
	size_t n = 0;
	struct store *s = store_open(d.db, &err);
	assert_int_equal(store_sandbox_list_live(s, &rows, &n, &err), 0);
	store_close(s);
	for (size_t i = 0; i < n; i++) {
		struct http_reply r;

		sbx_req("DELETE", rows[i].id, NULL, NULL, &r);
		assert_int_equal(r.status, 200);
		http_reply_free(&r);
	}
	free(rows);
	assert_int_equal(check_invariants("after deleting everything"), 0);
	s = store_open(d.db, &err);
	struct store_balance bal;
	assert_int_equal(store_balance_get(s, d.account_id, &bal, &err), 0);
	assert_int_equal(bal.reserved_micro, 0);
	store_close(s);
	daemon_stop(&d);
}

/* --------------------------------------------------------- liveness ping */

/* The one running domain of this run and its sandbox id. */
static void only_sandbox(char id[64], char dom[64])
{
	struct store_sandbox *rows = NULL;
	struct sbx_error err;
	size_t n = 0;
	struct store *s = store_open(d.db, &err);

	assert_non_null(s);
	assert_int_equal(store_sandbox_list_live(s, &rows, &n, &err), 0);
	assert_int_equal(n, 1);
	snprintf(id, 64, "%s", rows[0].id);
	snprintf(dom, 64, "%s", rows[0].domain);
	free(rows);
	store_close(s);
}

static int64_t row_ms(const char *id, int which)
{
	struct store_sandbox row;
	struct sbx_error err;
	struct store *s = store_open(d.db, &err);

	assert_int_equal(store_sandbox_get(s, d.account_id, id, &row, &err), 0);
	store_close(s);
	return which == 0 ? row.ended_at_ms : row.last_seen_at_ms;
}

/* Poll GET until the status is `want` or timeout; returns ms waited or -1. */
static int64_t wait_status(const char *id, const char *want, int timeout_ms)
{
	int64_t t0 = sbx_mono_ms();

	while (sbx_mono_ms() - t0 < timeout_ms) {
		struct http_reply r;
		bool hit;

		sbx_req("GET", id, NULL, NULL, &r);
		hit = r.status == 200 && jstr(r.json, "status") &&
		      strcmp(jstr(r.json, "status"), want) == 0;
		http_reply_free(&r);
		if (hit)
			return sbx_mono_ms() - t0;
		usleep(100000);
	}
	return -1;
}

/* A guest frozen from the host (its vCPUs paused: no lifecycle event, the
 * channel stays open) stops answering pings: with 3 misses of 1 s the
 * sandbox is failed within a few seconds, billed to its last answer, and
 * its domain destroyed. */
static void frozen_guest_fails_by_liveness(void **state)
{
	char id[64], dom[64], cmd[256];
	struct http_reply r;
	int64_t t_freeze, waited, ended, c1, c2;

	start_with("");
	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", d.key, NULL, "{}", 0, &r), 0);
	assert_int_equal(r.status, 201);
	http_reply_free(&r);
	only_sandbox(id, dom);
	exec_ok(id);
	sleep(3); /* a few answered pings */
	snprintf(cmd, sizeof(cmd), "virsh -c qemu:///system suspend %s >/dev/null", dom);
	t_freeze = sbx_wall_ms();
	assert_int_equal(run_cmd(cmd), 0);
	waited = wait_status(id, "failed", 30000);
	fprintf(stderr, "# frozen guest: failed %lld ms after the suspend\n", (long long)waited);
	assert_true(waited >= 0);
	/* 3 misses of 1 s: not before ~3 s, well before 3 rounds of slack. */
	assert_true(waited >= 2000 && waited <= 12000);
	ended = row_ms(id, 0);
	fprintf(stderr, "# frozen guest: ended_at = suspend %+lld ms\n",
		(long long)(ended - t_freeze));
	/* Billed to the last answered ping: before the freeze, at most one
	 * interval (plus a ping's time) earlier. */
	assert_true(ended <= t_freeze + 200 && ended >= t_freeze - 2500);
	/* The domain is destroyed, and the cost no longer moves. */
	int64_t t0 = sbx_mono_ms();
	while (count_own_domains(&d) > 0 && sbx_mono_ms() - t0 < 10000)
		usleep(100000);
	assert_int_equal(count_own_domains(&d), 0);
	sbx_req("GET", id, NULL, NULL, &r);
	c1 = jint(r.json, "cost_micro_usd");
	http_reply_free(&r);
	sleep(2);
	sbx_req("GET", id, NULL, NULL, &r);
	c2 = jint(r.json, "cost_micro_usd");
	http_reply_free(&r);
	assert_int_equal(c1, c2);
	sbx_req("POST", id, "/exec", "{\"command\": \"true\"}", &r);
	assert_int_equal(r.status, 410);
	http_reply_free(&r);
	check_invariants("frozen guest");
	daemon_stop(&d);
}

/* ------------------------------------------------- libvirtd restart */

static pid_t libvirtd_pid(void)
{
	char comm[64] = "", path[64];
	FILE *f = fopen("/run/libvirtd.pid", "r");
	int pid = 0;

	if (!f)
		return 0;
	if (fscanf(f, "%d", &pid) != 1)
		pid = 0;
	fclose(f);
	snprintf(path, sizeof(path), "/proc/%d/comm", pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (!fgets(comm, sizeof(comm), f))
		comm[0] = '\0';
	fclose(f);
	return strncmp(comm, "libvirtd", 8) == 0 ? (pid_t)pid : 0;
}

static int count_log(const char *log, const char *needle)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "grep -c -- '%s' %s", needle, log);
	return (int)cmd_number(cmd);
}

/* libvirtd restarts while two sandboxes run: the daemon reconnects, exec
 * still works, DELETE destroys the domain, and a guest killed after the
 * restart is noticed through the lifecycle event on the new connection.
 * libvirtd is shared: skipped while another sandboxd serves. */
static void libvirtd_restart_is_survived(void **state)
{
	char log[320], a[64], b[64], c[64], dom_a[64], dom_b[64], dom_c[64], cmd[512];
	struct http_reply r;
	int saved, fd;
	pid_t lv;

	if (run_cmd("test $(pgrep -fc '[s]andboxd serve') -eq 0") != 0) {
		fprintf(stderr, "# SKIP libvirtd restart: other sandboxd daemons share libvirtd\n");
		skip();
	}
	snprintf(log, sizeof(log), "%s/daemon.log", d.state_dir);
	daemon_config(&d, BASE_CFG);
	fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	saved = dup(2);
	dup2(fd, 2);
	int started = daemon_start(&d);
	dup2(saved, 2);
	close(saved);
	close(fd);
	assert_int_equal(started, 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(
		    http_request(&d, "POST", "/v1/sandboxes", d.key, NULL, "{}", 0, &r), 0);
		assert_int_equal(r.status, 201);
		snprintf(i == 0 ? a : i == 1 ? b : c, 64, "%s", jstr(r.json, "id"));
		http_reply_free(&r);
	}
	struct store_sandbox row;
	struct sbx_error err;
	struct store *s = store_open(d.db, &err);
	assert_int_equal(store_sandbox_get(s, d.account_id, a, &row, &err), 0);
	snprintf(dom_a, sizeof(dom_a), "%s", row.domain);
	assert_int_equal(store_sandbox_get(s, d.account_id, b, &row, &err), 0);
	snprintf(dom_b, sizeof(dom_b), "%s", row.domain);
	assert_int_equal(store_sandbox_get(s, d.account_id, c, &row, &err), 0);
	snprintf(dom_c, sizeof(dom_c), "%s", row.domain);
	store_close(s);

	lv = libvirtd_pid();
	assert_true(lv > 0);
	int64_t t0 = sbx_mono_ms();
	kill(lv, SIGTERM);
	while (kill(lv, 0) == 0 && sbx_mono_ms() - t0 < 15000)
		usleep(50000);
	/* C's guest dies while libvirtd is away: nobody gets its event. */
	snprintf(cmd, sizeof(cmd), "/run/libvirt/qemu/%s.pid", dom_c);
	FILE *pf = fopen(cmd, "r");
	int qpid = 0;
	assert_non_null(pf);
	assert_int_equal(fscanf(pf, "%d", &qpid), 1);
	fclose(pf);
	assert_true(qpid > 1);
	assert_int_equal(kill(qpid, SIGKILL), 0);
	assert_int_equal(run_cmd("./scripts/libvirt-up.sh"), 0);
	fprintf(stderr, "# libvirtd restarted in %lld ms\n", (long long)(sbx_mono_ms() - t0));
	/* The daemon reconnects on its own. */
	t0 = sbx_mono_ms();
	while (count_log(log, "reconnected to") < 1 && sbx_mono_ms() - t0 < 15000)
		usleep(100000);
	assert_int_equal(count_log(log, "reconnected to"), 1);
	fprintf(stderr, "# daemon reconnected %lld ms after libvirtd answered\n",
		(long long)(sbx_mono_ms() - t0));
	assert_int_equal(count_own_domains(&d), 2);
	/* C was reported after the reconnect and ends failed. */
	assert_true(wait_status(c, "failed", 10000) >= 0);
	snprintf(cmd, sizeof(cmd), "domain '%s' stopped while libvirtd was away", dom_c);
	fprintf(stderr,
		"# guest killed while libvirtd was down: reported after reconnect %d time(s)\n",
		count_log(log, cmd));
	exec_ok(a);
	exec_ok(b);
	/* DELETE goes through the new connection. */
	sbx_req("DELETE", a, NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "destroyed");
	http_reply_free(&r);
	assert_int_equal(count_own_domains(&d), 1);
	/* A guest killed now is noticed by a lifecycle event on the new
	 * connection (the log names it) and fails. */
	snprintf(cmd, sizeof(cmd), "virsh -c qemu:///system destroy %s >/dev/null", dom_b);
	assert_int_equal(run_cmd(cmd), 0);
	assert_true(wait_status(b, "failed", 10000) >= 0);
	char needle[128];
	snprintf(needle, sizeof(needle), "domain .%s.: lifecycle event", dom_b);
	t0 = sbx_mono_ms();
	while (count_log(log, needle) < 1 && sbx_mono_ms() - t0 < 5000)
		usleep(100000);
	assert_true(count_log(log, needle) >= 1);
	/* A's DELETE went through the new connection too. */
	snprintf(needle, sizeof(needle), "domain .%s.: lifecycle event", dom_a);
	assert_true(count_log(log, needle) >= 1);
	check_invariants("libvirtd restart");
	daemon_stop(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(crash_after_reserve),
	    cmocka_unit_test(crash_after_domain_start),
	    cmocka_unit_test(crash_after_hello),
	    cmocka_unit_test(crash_after_activate),
	    cmocka_unit_test(crash_after_extend_hold),
	    cmocka_unit_test(crash_after_delete_destroy),
	    cmocka_unit_test(crash_after_delete_settle),
	    cmocka_unit_test(crash_after_delete_destroy_restart_past_expiry),
	    cmocka_unit_test(kill9_during_ten_creates),
	    cmocka_unit_test(frozen_guest_fails_by_liveness),
	    cmocka_unit_test(libvirtd_restart_is_survived),
	};
	if (getenv("SBX_TEST_FILTER"))
		cmocka_set_test_filter(getenv("SBX_TEST_FILTER"));
	return cmocka_run_group_tests(tests, setup, teardown);
}
