/* Several hosts (issue 20, docs/hosts.md): one daemon, two hosts "a" and
 * "b" on this machine's qemu:///system, each with its own state dir (the
 * tiny image copied into it) and domain prefix.
 *
 *   a: max_guests 4, memory_mib 256   b: max_guests 4, memory_mib 768
 *   sizes: tiny (256 MiB, the default) and huge (1024 MiB, fits nowhere)
 *
 * Tests, in order (they share the daemon and its sandboxes):
 *   1. creates spread by free memory; full hosts and a size too big for
 *      every host answer 503 with Retry-After;
 *   2. `sandboxd admin drain b` moves new creates to a while b's sandbox
 *      keeps working; undrain brings b back;
 *   3. restart with a warm pool: the reconcile per host fails the row on
 *      b whose domain vanished, destroys an orphan domain on a and
 *      reattaches the rest; drained offline (store only), b gets no pool;
 *      a create is served warm by a's pooled guest although b has more
 *      free memory; the ledger check passes;
 *   4. a host that really stops answering: b is reached through a unix
 *      socket proxy to libvirtd (qemu+unix:///system?socket=...) that the
 *      test kills: b's sandbox ends failed, billed to when b went silent,
 *      a keeps serving and takes the creates; the proxy back, b is
 *      reconciled (its orphaned domain destroyed) and placed on again;
 *      the ledger check passes.
 * Where a sandbox runs is read from the database's sandboxes.host.
 */
#include <poll.h>
#include <sys/un.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"

static struct daemon d;
static char sd_a[300], sd_b[300], pfx_a[40], pfx_b[40];
static char s1[64], s6[64], s7[64]; /* s1, s7 on b, s6 on a (test 2) */

static char b_uri[400] = "qemu:///system";
static int a_mib = 256;
static struct daemon metrics; /* d, on metrics_listen */

static void write_config(const char *extra)
{
	char hosts[2048];

	snprintf(
	    hosts, sizeof(hosts),
	    "\"sizes\": {\"tiny\": {\"vcpus\": 1, \"memory_mib\": 256, \"disk_gib\": 1, "
	    "\"price_micro_usd_per_hour\": 90000}, \"huge\": {\"vcpus\": 1, \"memory_mib\": "
	    "1024, \"disk_gib\": 1, \"price_micro_usd_per_hour\": 90000}}, "
	    "\"default_size\": \"tiny\", \"host_check_interval_ms\": 200, "
	    "\"metrics_listen\": \"127.0.0.1:%d\", "
	    "\"hosts\": [{\"name\": \"a\", \"uri\": \"qemu:///system\", \"state_dir\": \"%s\", "
	    "\"domain_prefix\": \"%s\", \"max_guests\": 4, \"memory_mib\": %d, "
	    "\"disk_gib\": 10}, {\"name\": \"b\", \"uri\": \"%s\", "
	    "\"state_dir\": \"%s\", \"domain_prefix\": \"%s\", \"max_guests\": 4, "
	    "\"memory_mib\": 768, \"disk_gib\": 10}]%s%s",
	    metrics.port, sd_a, pfx_a, a_mib, b_uri, sd_b, pfx_b, extra[0] ? ", " : "", extra);
	daemon_config(&d, hosts);
}

/* Copy the tiny image the daemon's config names into a host's state dir
 * (the same layout: <state_dir>/images/...). */
static void host_dir(const char *dir)
{
	char cmd[1400];

	snprintf(cmd, sizeof(cmd),
		 "mkdir -p -m 0755 %s/images && chmod 0755 %s && "
		 "install -m 0644 %s/images/vmlinux %s/images/initramfs.cpio.gz %s/images/",
		 dir, dir, d.state_dir, d.state_dir, dir);
	assert_int_equal(run_cmd(cmd), 0);
}

static int group_setup(void **state)
{
	(void)state;
	/* daemon_config sets the state dir and prefix; the hosts live under
	 * it with prefixes under the run's own */
	daemon_config(&d, "");
	snprintf(sd_a, sizeof(sd_a), "%s/host-a", d.state_dir);
	snprintf(sd_b, sizeof(sd_b), "%s/host-b", d.state_dir);
	snprintf(pfx_a, sizeof(pfx_a), "%sa-", d.prefix);
	snprintf(pfx_b, sizeof(pfx_b), "%sb-", d.prefix);
	metrics.port = free_port();
	write_config("");
	host_dir(sd_a);
	host_dir(sd_b);
	return daemon_up(&d);
}

static int group_teardown(void **state)
{
	(void)state;
	return daemon_down(&d);
}

/* A text column (host, domain) of a sandbox's row ("" when none). */
static void row_col(const char *id, const char *col, char *out, size_t n)
{
	char sql[96];

	snprintf(sql, sizeof(sql), "SELECT %s FROM sandboxes WHERE id = ?1", col);
	assert_int_equal(daemon_db_text(&d, sql, id, out, n), 0);
}

static void ledger_ok(void)
{
	struct sbx_error err;

	if (daemon_ledger_check(&d, &err) < 0)
		fail_msg("ledger check: %s", err.message);
}

/* Create a sandbox of `size`; expect `status`; on 201 its id into id and
 * check it runs on host `host`. The reply's startup_path into path. */
static void create_on(const char *size, int status, const char *host, char *id, char *path)
{
	struct http_reply r;
	char body[96], got[32];

	snprintf(body, sizeof(body), "{\"size\": \"%s\", \"timeout_minutes\": 10}", size);
	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", d.key, NULL, body, 0, &r), 0);
	if (r.status != status)
		fail_msg("create %s: %d, not %d: %s", size, r.status, status, r.body);
	if (status == 503) {
		assert_string_equal(jerr(r.json, "type"), "service_unavailable");
		assert_non_null(strcasestr(r.headers, "Retry-After:"));
	} else {
		snprintf(id, 64, "%s", jstr(r.json, "id"));
		if (path)
			snprintf(path, 16, "%s", jstr(r.json, "startup_path"));
		row_col(id, "host", got, sizeof(got));
		if (strcmp(got, host) != 0)
			fail_msg("sandbox %s went to host '%s', not '%s'", id, got, host);
	}
	http_reply_free(&r);
}

static void delete_sandbox(const char *id)
{
	char st[32];

	assert_int_equal(daemon_delete_sandbox(&d, id, st, sizeof(st)), 200);
	assert_string_equal(st, "destroyed");
}

static void exec_ok(const char *id)
{
	struct http_reply r;
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", id);
	assert_int_equal(http_request(&d, "POST", path, d.key, NULL,
				      "{\"command\": \"echo alive-$((6*7))\"}", 0, &r),
			 0);
	if (r.status != 200)
		fail_msg("exec in %s: %d %s", id, r.status, r.body);
	assert_string_equal(jstr(r.json, "stdout"), "alive-42\n");
	http_reply_free(&r);
}

static const char *status_of(const char *id, char *buf, size_t n)
{
	assert_int_equal(daemon_sandbox_status(&d, id, buf, n), 200);
	return buf;
}

static void admin_drain(const char *cmd, const char *host, bool want)
{
	assert_int_equal(daemon_drain(&d, cmd, host), want);
}

static bool domain_running(const char *name)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd),
		 "virsh -c qemu:///system list --name 2>/dev/null | grep -cx '%s'", name);
	return cmd_number(cmd) == 1;
}

/* 1. b has the most free memory until it has as little as a. */
static void creates_spread_by_capacity(void **state)
{
	char s2[64], s3[64], s4[64], none[64];

	(void)state;
	create_on("huge", 503, NULL, none, NULL); /* 1024 MiB fits no host */
	create_on("tiny", 201, "b", s1, NULL);	  /* b 768 free > a 256 */
	create_on("tiny", 201, "b", s2, NULL);	  /* b 512 > a 256 */
	create_on("tiny", 201, "a", s3, NULL);	  /* tie 256 = 256: a, listed first */
	create_on("tiny", 201, "b", s4, NULL);	  /* a full */
	create_on("tiny", 503, NULL, none, NULL); /* both full */
	exec_ok(s3);
	exec_ok(s4);
	/* leave s1 on b: b 512 free, a 256 */
	delete_sandbox(s2);
	delete_sandbox(s3);
	delete_sandbox(s4);
}

/* Per-host detail on the operator's /metrics, none on /v1/limits. */
static void operators_see_hosts(void)
{
	struct http_reply r;

	assert_int_equal(http_request(&metrics, "GET", "/metrics", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "sandboxd_host_up{host=\"b\",uri=\"qemu:///system\","
				       "state=\"draining\"} 1\n"));
	assert_non_null(strstr(r.body, "sandboxd_host_up{host=\"a\",uri=\"qemu:///system\","
				       "state=\"up\"} 1\n"));
	assert_non_null(strstr(r.body, "sandboxd_host_memory_mib{host=\"a\",of=\"used\"} 256\n"));
	assert_non_null(strstr(r.body, "sandboxd_host_memory_mib{host=\"b\",of=\"total\"} 768\n"));
	assert_non_null(strstr(r.body, "sandboxd_host_guests{host=\"b\",of=\"used\"} 1\n"));
	http_reply_free(&r);
	assert_int_equal(http_request(&d, "GET", "/v1/limits", d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_null(strstr(r.body, "qemu"));
	assert_null(strstr(r.body, "\"hosts\""));
	assert_null(strstr(r.body, d.state_dir)); /* no host's state dir either */
	http_reply_free(&r);
}

/* 2. Drained, b (with more free memory) gets nothing; its sandbox runs on. */
static void drain_moves_creates(void **state)
{
	char none[64];

	(void)state;
	admin_drain("drain", "b", true);
	usleep(800 * 1000);			  /* read within host_check_interval_ms (200) */
	create_on("tiny", 201, "a", s6, NULL);	  /* b would win undrained */
	create_on("tiny", 503, NULL, none, NULL); /* a full, b drained */
	exec_ok(s1);				  /* b's sandbox keeps working */
	exec_ok(s6);
	operators_see_hosts();
	admin_drain("undrain", "b", false);
	usleep(800 * 1000);
	create_on("tiny", 201, "b", s7, NULL);
}

/* 3. Restart: reconcile per host, pools per host, warm first. */
static void restart_reconciles_each_host(void **state)
{
	char dom1[64], dom6[64], orphan[80], cmd[1024], st[32], warm_id[64], path[16];

	(void)state;
	row_col(s1, "domain", dom1, sizeof(dom1));
	row_col(s6, "domain", dom6, sizeof(dom6));
	assert_true(strncmp(dom1, pfx_b, strlen(pfx_b)) == 0);
	assert_true(strncmp(dom6, pfx_a, strlen(pfx_a)) == 0);
	assert_int_equal(daemon_stop(&d), 0); /* guests stay for the next start */

	/* while it is down: s1's guest on b vanishes; an orphan appears on
	 * a (a copy of s6's domain under another name, no row names it) */
	snprintf(cmd, sizeof(cmd), "virsh -c qemu:///system destroy %s >/dev/null", dom1);
	assert_int_equal(run_cmd(cmd), 0);
	snprintf(orphan, sizeof(orphan), "%sorphan", pfx_a);
	snprintf(cmd, sizeof(cmd),
		 "virsh -c qemu:///system dumpxml %s | sed -e 's/%s/%s/g' -e '/<uuid>/d' "
		 "> %s/orphan.xml && virsh -c qemu:///system create %s/orphan.xml >/dev/null",
		 dom6, dom6, orphan, d.state_dir, d.state_dir);
	assert_int_equal(run_cmd(cmd), 0);
	assert_true(domain_running(orphan));
	/* drained with no daemon running: the store keeps it */
	admin_drain("drain", "b", true);

	write_config("\"pool\": {\"tiny\": 1}");
	assert_int_equal(daemon_start(&d), 0);
	assert_string_equal(status_of(s1, st, sizeof(st)), "failed"); /* ghost row: gone */
	assert_false(domain_running(orphan));			      /* orphan: destroyed */
	assert_false(domain_running(dom1));
	exec_ok(s6); /* reattached on a */
	exec_ok(s7); /* reattached on b */
	delete_sandbox(s6);

	/* a's pool fills (b is drained: none there); then, undrained, b has
	 * 512 MiB free and a none after its pooled guest, yet a create is
	 * served by a's warm guest */
	int64_t end = sbx_mono_ms() + 120000;
	bool ready = false;
	while (!ready && sbx_mono_ms() < end) {
		struct http_reply r;
		json_object *startup, *pool, *tiny;

		assert_int_equal(http_request(&d, "GET", "/v1/limits", d.key, NULL, NULL, 0, &r),
				 0);
		ready = json_object_object_get_ex(r.json, "startup", &startup) &&
			json_object_object_get_ex(startup, "pool", &pool) &&
			json_object_object_get_ex(pool, "tiny", &tiny) && jint(tiny, "ready") == 1;
		http_reply_free(&r);
		if (!ready)
			usleep(200 * 1000);
	}
	assert_true(ready);
	admin_drain("undrain", "b", false);
	usleep(400 * 1000); /* undrain read; b's own pool boot needs seconds more */
	create_on("tiny", 201, "a", warm_id, path);
	assert_string_equal(path, "warm");
	exec_ok(warm_id);
	delete_sandbox(warm_id);
	delete_sandbox(s7);

	ledger_ok(); /* the money is whole */
}

/* ------------------------------------------------ a host that goes silent */

static pid_t proxy_pid;

/* Relay one accepted connection to libvirtd's socket until either side
 * closes; dies with the proxy (PDEATHSIG). */
static void relay(int c)
{
	struct sockaddr_un up = {.sun_family = AF_UNIX};
	int u = socket(AF_UNIX, SOCK_STREAM, 0);
	char buf[65536];

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	snprintf(up.sun_path, sizeof(up.sun_path), "/run/libvirt/libvirt-sock");
	if (u < 0 || connect(u, (struct sockaddr *)&up, sizeof(up)) < 0)
		_exit(1);
	for (;;) {
		struct pollfd p[2] = {{.fd = c, .events = POLLIN}, {.fd = u, .events = POLLIN}};

		if (poll(p, 2, -1) < 0)
			_exit(1);
		for (int i = 0; i < 2; i++) {
			if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			ssize_t n = read(p[i].fd, buf, sizeof(buf));
			if (n <= 0 || write(p[1 - i].fd, buf, (size_t)n) != n)
				_exit(0);
		}
	}
}

/* A unix socket at `path` that forwards to libvirtd: host b's libvirt as
 * the daemon sees it. proxy_stop() kills it and every relay: b goes
 * silent as a remote host whose network dropped. */
static void proxy_start(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int l = socket(AF_UNIX, SOCK_STREAM, 0);

	unlink(path);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	assert_true(l >= 0);
	assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(l, 16), 0);
	proxy_pid = fork();
	assert_true(proxy_pid >= 0);
	if (proxy_pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		signal(SIGCHLD, SIG_IGN);
		for (;;) {
			int c = accept(l, NULL, NULL);

			if (c < 0)
				continue;
			if (fork() == 0) {
				close(l);
				relay(c);
			}
			close(c);
		}
	}
	close(l);
}

static void proxy_stop(void)
{
	kill(proxy_pid, SIGKILL);
	waitpid(proxy_pid, NULL, 0);
	proxy_pid = 0;
}

static int64_t ended_at(const char *id)
{
	struct http_reply r;
	char path[128];
	int64_t t = 0;
	json_object *v;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	assert_int_equal(http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r), 0);
	if (json_object_object_get_ex(r.json, "ended_at", &v) &&
	    json_object_is_type(v, json_type_string)) {
		struct tm tm = {0};
		const char *s = json_object_get_string(v);

		if (strptime(s, "%Y-%m-%dT%H:%M:%S", &tm))
			t = (int64_t)timegm(&tm) * 1000;
	}
	http_reply_free(&r);
	return t;
}

static void host_down_and_back(void **state)
{
	char sa[64], sb[64], sc[64], dom_b[64], sock[300], st[32];
	int64_t killed, end;

	(void)state;
	assert_int_equal(daemon_stop(&d), 0);
	snprintf(sock, sizeof(sock), "%s/libvirt-proxy.sock", d.state_dir);
	snprintf(b_uri, sizeof(b_uri), "qemu+unix:///system?socket=%s", sock);
	a_mib = 768; /* room on a for what b loses */
	proxy_start(sock);
	write_config("\"host_down_after_ms\": 1500");
	assert_int_equal(daemon_start(&d), 0);

	create_on("tiny", 201, "a", sa, NULL); /* 768 = 768: a, listed first */
	create_on("tiny", 201, "b", sb, NULL);
	exec_ok(sb); /* over the stream transport, through the proxy */
	row_col(sb, "domain", dom_b, sizeof(dom_b));

	killed = sbx_wall_ms();
	proxy_stop();
	end = sbx_mono_ms() + 30000;
	while (strcmp(status_of(sb, st, sizeof(st)), "failed") != 0 && sbx_mono_ms() < end)
		usleep(200 * 1000);
	assert_string_equal(st, "failed");
	/* billed to when b went silent (the API shows whole seconds) */
	assert_true(ended_at(sb) <= killed + 1000);
	exec_ok(sa);			       /* a keeps serving */
	create_on("tiny", 201, "a", sc, NULL); /* b is down: a, with less room */
	assert_true(domain_running(dom_b));    /* its guest still runs, unreachable */

	proxy_start(sock);
	end = sbx_mono_ms() + 60000;
	while (domain_running(dom_b) && sbx_mono_ms() < end)
		usleep(300 * 1000);
	assert_false(domain_running(dom_b)); /* reconciled: the orphan destroyed */
	usleep(500 * 1000);
	create_on("tiny", 201, "b", sb, NULL); /* up again: b has the most room */
	exec_ok(sb);
	delete_sandbox(sa);
	delete_sandbox(sb);
	delete_sandbox(sc);
	assert_int_equal(daemon_stop(&d), 0);
	proxy_stop();
	ledger_ok();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(creates_spread_by_capacity),
	    cmocka_unit_test(drain_moves_creates),
	    cmocka_unit_test(restart_reconciles_each_host),
	    cmocka_unit_test(host_down_and_back),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
