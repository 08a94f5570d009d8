/* One daemon against a remote libvirt host reached over TLS: a second
 * libvirtd in its own network and mount namespaces on a veth pair
 * (scripts/remote-host.sh, docs/remote-hosts.md). The daemon's
 * libvirt_uri is that host's qemu+tls:// URI with a client certificate
 * (pkipath), its state_dir (images, overlays, console logs) is the host's;
 * only its database is the gateway's.
 *
 * Proves: create + exec run on the remote host (its libvirtd lists the
 * domain, the machine's own qemu:///system does not; a snapshot of its
 * disk is refused, 400), files go both ways
 * over the stream, DELETE removes the domain and its overlay volume, and a
 * client certificate not on the host's tls_allowed_dn_list (or from
 * another CA) is refused, and a
 * lost connection (veth down: keepalive; libvirtd killed: end of file) is
 * seen by vmm within VMM_KEEPALIVE_BOUND_MS while the daemon keeps
 * answering HTTP; vmm_reconnect brings it back, and a guest that outlived
 * its libvirtd is found again and answers on a reopened stream channel.
 * The console tail of a guest on the host is read through the storage pool
 * and deleted with it.
 *
 * Then the daemon restarts with two hosts, this machine's qemu:///system
 * ("local") and the TLS host ("remote"): creates spread by free memory;
 * exec, files and a one-shot execution on the remote host; the remote
 * host killed mid-exec (its end of the veth down): the exec answers a 5xx,
 * its sandbox ends failed, the host shows down, local keeps serving, the
 * ledger holds; the link back: reconciled (no orphan domain, no running
 * row left there) and placed on again; drained: creates go to local;
 * libvirtd on the host killed and restarted, then a network blip shorter
 * than host_down_after_ms: the remote sandboxes survive both (the command
 * in flight answers 503, execs then answer on reopened channels).
 * Skips (does not fail)
 * where network namespaces cannot be made. Everything it starts is torn
 * down in the group teardown, also after a failure.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"
#include "agentless/wire.h"
#include "vmm/vmm.h"

static struct daemon d;
static char rh_dir[256], rh_uri[512], rh_veth[16], sbx[64];
static char local_base[320]; /* the full image's base on this machine */
static bool rh_skip;

/* Does `virsh -c URI list --name` show a running domain of ours? */
static bool virsh_lists_ours(const char *uri)
{
	char cmd[1024], out[4096];

	snprintf(cmd, sizeof(cmd), "virsh -c '%s' list --name 2>/dev/null", uri);
	if (cmd_out(cmd, out, sizeof(out)) != 0)
		return false;
	for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n"))
		if (strncmp(l, d.prefix, strlen(d.prefix)) == 0)
			return true;
	return false;
}

/* The volumes of our pool on the remote host (after a refresh), one a
 * line, into out. */
static void remote_volumes(char *out, size_t n)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd),
		 "u='%s'; for p in $(virsh -c \"$u\" pool-list --name | grep '^sandboxd-run-'); do "
		 "virsh -c \"$u\" pool-refresh $p >/dev/null; "
		 "virsh -c \"$u\" vol-list $p | awk 'NR>2 && $1 {print $1}'; done",
		 rh_uri);
	assert_int_equal(cmd_out(cmd, out, n), 0);
}

static int setup(void **state)
{
	(void)state;
	char cmd[4096], base[320];
	int id = (int)(getpid() % 10000);

	if (!netns_usable("test_remote", "unshare nsenter openssl")) {
		rh_skip = true;
		return 0;
	}
	/* Names and a /24 of this run only, so two runs cannot collide. */
	snprintf(rh_veth, sizeof(rh_veth), "sbxrh%d", id);
	char net[32];
	snprintf(net, sizeof(net), "10.77.%d", 1 + id % 250);
	setenv("SBX_RH_NS", rh_veth, 1);
	setenv("SBX_RH_VETH", rh_veth, 1);
	snprintf(cmd, sizeof(cmd), "%s.1", net);
	setenv("SBX_RH_GW", cmd, 1);
	snprintf(cmd, sizeof(cmd), "%s.2", net);
	setenv("SBX_RH_ADDR", cmd, 1);
	snprintf(rh_dir, sizeof(rh_dir), "/var/lib/sandboxd-test/remote-%d", (int)getpid());
	snprintf(cmd, sizeof(cmd),
		 "mkdir -p -m 0755 /var/lib/sandboxd-test && "
		 "scripts/remote-host.sh up %s >/dev/null",
		 rh_dir);
	if (run_cmd(cmd) != 0) {
		fprintf(stderr, "test_remote: scripts/remote-host.sh up failed\n");
		return -1;
	}
	snprintf(cmd, sizeof(cmd), "%s/uri", rh_dir);
	FILE *f = fopen(cmd, "r");
	if (!f || !fgets(rh_uri, sizeof(rh_uri), f))
		abort();
	fclose(f);
	rh_uri[strcspn(rh_uri, "\n")] = '\0';
	/* A run killed before its teardown (a sanitizer's halt) leaves the
	 * host up: `scripts/remote-host.sh down DIR` removes it. */
	fprintf(stderr, "test_remote: remote host %s in %s\n", rh_uri, rh_dir);

	/* The operator's step: the images onto the host, in its state dir
	 * (state_dir/images/tiny/ for the kernel and initramfs). The full
	 * image's base goes too, so the guest has an overlay: it is a
	 * read-only file, so a hard link of the harness's shared copy is as
	 * good as a copy. */
	if (daemon_config_full(&d, "") != 0) {
		fprintf(stderr, "test_remote: no full image (SBX_TEST_FULL_IMAGE_DIR)\n");
		return -1;
	}
	snprintf(cmd, sizeof(cmd), "sed -n 's/.*\"base_image\": \"\\([^\"]*\\)\".*/\\1/p' %s",
		 d.config);
	if (cmd_out(cmd, local_base, sizeof(local_base)) != 0 || !local_base[0])
		return -1;
	snprintf(base, sizeof(base), "%s/state/images/base.qcow2", rh_dir);
	snprintf(cmd, sizeof(cmd),
		 "set -e; mkdir -p %s/state/images/tiny; "
		 "install -m 0644 %s/images/vmlinux %s/images/initramfs.cpio.gz "
		 "%s/state/images/tiny/; "
		 "ln -f '%s' %s 2>/dev/null || cp '%s' %s",
		 rh_dir, d.state_dir, d.state_dir, rh_dir, local_base, base, local_base, base);
	if (run_cmd(cmd) != 0)
		return -1;
	/* The daemon's config: everything about guests on the remote host;
	 * the database on the gateway (this machine's state dir). */
	f = fopen(d.config, "w");
	if (!f)
		abort();
	fprintf(f,
		"{\"state_dir\": \"%s/state\", \"db_path\": \"%s\", \"libvirt_uri\": \"%s\", "
		"\"transport\": \"stream\", \"domain_prefix\": \"%s\", \"accel\": \"tcg\", "
		"\"allow_tcg\": true, \"base_image\": \"%s\"}\n",
		rh_dir, d.db, rh_uri, d.prefix, base);
	fclose(f);
	return daemon_up(&d);
}

static int teardown(void **state)
{
	(void)state;
	char cmd[1024];

	if (rh_skip)
		return 0;
	if (d.pid > 0)
		daemon_stop(&d);
	if (rh_dir[0]) {
		/* Its guests, libvirtd, virtlogd, namespace and veth. */
		snprintf(cmd, sizeof(cmd), "scripts/remote-host.sh down %s", rh_dir);
		run_cmd(cmd);
		if (!getenv("SBX_TEST_KEEP")) {
			snprintf(cmd, sizeof(cmd), "rm -rf '%s'", rh_dir);
			run_cmd(cmd);
		}
	}
	return daemon_down(&d);
}

/* POST /v1/sandboxes/ID/exec of `cmd`: the reply. */
static struct http_reply exec_reply(const char *id, const char *cmd)
{
	struct http_reply r;
	char path[128];
	json_object *o = json_object_new_object();

	json_object_object_add(o, "command", json_object_new_string(cmd));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", id);
	assert_int_equal(
	    http_request(&d, "POST", path, d.key, NULL, json_object_to_json_string(o), 0, &r), 0);
	json_object_put(o);
	return r;
}

static struct http_reply exec_cmd(const char *cmd)
{
	return exec_reply(sbx, cmd);
}

static void create_and_exec_run_on_the_remote_host(void **state)
{
	(void)state;
	if (rh_skip)
		skip();
	assert_int_equal(daemon_create_sandbox(&d, sbx, sizeof(sbx)), 0);
	/* The remote libvirtd runs it; the machine's own does not. */
	assert_true(virsh_lists_ours(rh_uri));
	assert_false(virsh_lists_ours("qemu:///system"));

	struct http_reply r = exec_cmd("echo remote; cat /proc/cmdline");
	assert_int_equal(r.status, 200);
	assert_int_equal(jint(r.json, "exit_code"), 0);
	assert_non_null(strstr(jstr(r.json, "stdout"), "remote\n"));
	/* Its root is the overlay over the base image (the full image). */
	assert_non_null(strstr(jstr(r.json, "stdout"), "sandboxd.root=/dev/vda"));
	http_reply_free(&r);

	/* The overlay is a volume of the host's pool. */
	char vols[4096];
	remote_volumes(vols, sizeof(vols));
	char want[96];
	snprintf(want, sizeof(want), "%s", d.prefix);
	assert_non_null(strstr(vols, want));
	assert_non_null(strstr(vols, ".qcow2"));

	/* No snapshot of a remote host's disk (docs/api.md "Snapshots"):
	 * 400 naming why, nothing kept */
	char path[128];
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/snapshots", sbx);
	assert_int_equal(http_request(&d, "POST", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 400);
	assert_non_null(strstr(jerr(r.json, "message"), "remote host"));
	http_reply_free(&r);
	remote_volumes(vols, sizeof(vols));
	assert_null(strstr(vols, "snap_"));
}

static void files_go_both_ways_over_the_stream(void **state)
{
	(void)state;
	if (rh_skip)
		skip();
	size_t len = 3 * 1024 * 1024 + 17;
	unsigned char *data = malloc(len);
	uint32_t x = 2463534242u;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		data[i] = (unsigned char)x;
	}
	char url[256];
	struct http_reply r;
	snprintf(url, sizeof(url), "/v1/sandboxes/%s/files?path=/tmp/remote.bin", sbx);
	assert_int_equal(http_request(&d, "PUT", url, d.key, NULL, (const char *)data, len, &r), 0);
	assert_int_equal(r.status, 201);
	http_reply_free(&r);
	r = exec_cmd("wc -c < /tmp/remote.bin");
	assert_int_equal(jint(r.json, "exit_code"), 0);
	assert_int_equal(atoll(jstr(r.json, "stdout")), (long long)len);
	http_reply_free(&r);
	assert_int_equal(http_request(&d, "GET", url, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_int_equal(r.body_len, len);
	assert_memory_equal(r.body, data, len);
	http_reply_free(&r);
	free(data);
}

static void delete_removes_the_domain_and_its_overlay(void **state)
{
	(void)state;
	if (rh_skip)
		skip();
	char path[128], vols[4096];
	struct http_reply r;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", sbx);
	assert_int_equal(http_request(&d, "DELETE", path, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	assert_false(virsh_lists_ours(rh_uri));
	/* No volume of that domain is left (overlay, console log). */
	remote_volumes(vols, sizeof(vols));
	assert_null(strstr(vols, d.prefix));
}

/* Identity: a client certificate from the same CA whose DN is not on the
 * host's tls_allowed_dn_list is refused, and so is one from another CA;
 * the listed one gets in. */
static void only_the_listed_client_certificate_gets_in(void **state)
{
	(void)state;
	if (rh_skip)
		skip();
	char cmd[4096], out[1024];
	const char *addr = getenv("SBX_RH_ADDR");

	snprintf(
	    cmd, sizeof(cmd),
	    "set -e; p=%s/pki; t=%s/intruder; mkdir -p $t/same $t/other; "
	    "printf 'basicConstraints=critical,CA:FALSE\\nkeyUsage=critical,"
	    "digitalSignature,keyEncipherment\\nextendedKeyUsage=clientAuth\\n' > $t/ext; "
	    "openssl req -newkey rsa:2048 -nodes -subj '/O=sandboxd test/CN=intruder' "
	    "-keyout $t/same/clientkey.pem -out $t/same.csr 2>/dev/null; "
	    "openssl x509 -req -in $t/same.csr -CA $p/ca/cacert.pem -CAkey $p/ca/cakey.pem "
	    "-CAcreateserial -days 1 -extfile $t/ext -out $t/same/clientcert.pem 2>/dev/null; "
	    "cp $p/ca/cacert.pem $t/same/; "
	    "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj '/CN=other CA' "
	    "-keyout $t/other/cakey.pem -out $t/other/ca.pem 2>/dev/null; "
	    "openssl req -newkey rsa:2048 -nodes -subj '/O=sandboxd test/CN=gateway' "
	    "-keyout $t/other/clientkey.pem -out $t/other.csr 2>/dev/null; "
	    "openssl x509 -req -in $t/other.csr -CA $t/other/ca.pem -CAkey $t/other/cakey.pem "
	    "-CAcreateserial -days 1 -extfile $t/ext -out $t/other/clientcert.pem 2>/dev/null; "
	    "cp $p/ca/cacert.pem $t/other/",
	    rh_dir, rh_dir);
	assert_int_equal(run_cmd(cmd), 0);
	for (int i = 0; i < 2; i++) {
		snprintf(cmd, sizeof(cmd),
			 "virsh -c 'qemu+tls://%s/system?pkipath=%s/intruder/%s' list 2>&1", addr,
			 rh_dir, i == 0 ? "same" : "other");
		assert_int_not_equal(cmd_out(cmd, out, sizeof(out)), 0);
		assert_non_null(strstr(out, "failed to connect"));
	}
	snprintf(cmd, sizeof(cmd), "virsh -c '%s' list >/dev/null 2>&1", rh_uri);
	assert_int_equal(run_cmd(cmd), 0);
}

/* What a channel delivered, kept whole (the test reads frames from it). */
struct rx {
	pthread_mutex_t lock;
	uint8_t buf[65536];
	size_t len;
	bool eof;
};

static void rx_recv(void *opaque, const void *buf, size_t len)
{
	struct rx *r = opaque;
	pthread_mutex_lock(&r->lock);
	if (len == 0)
		r->eof = true;
	size_t n = len < sizeof(r->buf) - r->len ? len : sizeof(r->buf) - r->len;
	memcpy(r->buf + r->len, buf, n);
	r->len += n;
	pthread_mutex_unlock(&r->lock);
}

static void rx_clear(struct rx *r)
{
	pthread_mutex_lock(&r->lock);
	r->len = 0;
	r->eof = false;
	pthread_mutex_unlock(&r->lock);
}

/* Is there a frame of `type` (and `id`, unless 0) in what arrived? */
static bool rx_has(struct rx *r, uint8_t type, uint32_t id)
{
	bool found = false;
	pthread_mutex_lock(&r->lock);
	for (size_t off = 0; off + WIRE_HEADER_LEN <= r->len && !found;) {
		struct wire_header h;
		if (wire_header_decode(r->buf + off, sizeof(r->buf), &h) < 0)
			break;
		found = h.type == type && (id == 0 || h.id == id);
		off += WIRE_HEADER_LEN + h.len;
	}
	pthread_mutex_unlock(&r->lock);
	return found;
}

static bool rx_wait(struct rx *r, uint8_t type, uint32_t id, int timeout_ms)
{
	int64_t end = sbx_mono_ms() + timeout_ms;
	while (!rx_has(r, type, id)) {
		if (sbx_mono_ms() > end)
			return false;
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return true;
}

struct lost {
	pthread_mutex_t lock;
	int n;
	int64_t at_ms;
	char why[64];
};

static void on_lost(void *opaque, const char *why)
{
	struct lost *l = opaque;
	pthread_mutex_lock(&l->lock);
	l->n++;
	l->at_ms = sbx_mono_ms();
	snprintf(l->why, sizeof(l->why), "%s", why);
	pthread_mutex_unlock(&l->lock);
}

/* Wait until the lost callback ran (or limit_ms); its time since t0, or
 * -1. */
static int64_t wait_lost(struct lost *l, int64_t t0, int64_t limit_ms)
{
	for (;;) {
		pthread_mutex_lock(&l->lock);
		int n = l->n;
		int64_t at = l->at_ms;
		pthread_mutex_unlock(&l->lock);
		if (n > 0)
			return at - t0;
		if (sbx_mono_ms() - t0 > limit_ms)
			return -1;
		struct timespec ts = {0, 50 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

static void daemon_answers(void)
{
	struct http_reply r;
	assert_int_equal(http_request(&d, "GET", "/v1/sandboxes", d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
}

static void a_lost_connection_is_seen_within_the_bound(void **state)
{
	(void)state;
	if (rh_skip)
		skip();
	char kernel[300], initrd[300], run_dir[300], cmd[512];
	struct sbx_error err = {0};
	struct lost l = {.lock = PTHREAD_MUTEX_INITIALIZER};

	snprintf(kernel, sizeof(kernel), "%s/state/images/tiny/vmlinux", rh_dir);
	snprintf(initrd, sizeof(initrd), "%s/state/images/tiny/initramfs.cpio.gz", rh_dir);
	snprintf(run_dir, sizeof(run_dir), "%s/state/run", rh_dir);
	struct vmm_config vc = {
	    .uri = rh_uri,
	    .name_prefix = d.prefix,
	    .accel = VMM_ACCEL_TCG,
	    .allow_tcg = true,
	    .kernel = kernel,
	    .initrd = initrd,
	    .run_dir = run_dir,
	    .transport = VMM_TRANSPORT_STREAM,
	};
	struct vmm *v = vmm_new(&vc, &err);
	assert_non_null(v);
	vmm_set_conn_lost_cb(v, on_lost, &l);
	assert_true(vmm_connected(v));

	/* The console log is the host's file: read through the pool. */
	struct vmm_guest_spec spec = {.vcpus = 1, .memory_mib = 256};
	struct vmm_vm *vm = vmm_vm_start(v, &spec, &err);
	assert_non_null(vm);
	char *tail = NULL;
	for (int i = 0; i < 600 && !(tail && strstr(tail, "sandboxd-init")); i++) {
		free(tail);
		struct timespec ts = {0, 100 * 1000 * 1000};
		nanosleep(&ts, NULL);
		tail = vmm_vm_console_tail(vm, 4096);
	}
	assert_non_null(tail);
	assert_non_null(strstr(tail, "sandboxd-init"));
	assert_true(strlen(tail) <= 4096);
	free(tail);
	/* Its exec channel as a stream: HELLO arrives. */
	struct rx rx = {.lock = PTHREAD_MUTEX_INITIALIZER};
	struct sbx_channel ch;
	assert_int_equal(vmm_vm_open_channel(vm, rx_recv, &rx, &ch, &err), 0);
	assert_true(rx_wait(&rx, WIRE_HELLO, 0, 60000));
	ch.close(ch.ctx);

	/* The host goes silent (its end of the link down; the gateway's end
	 * keeps its route, so packets vanish instead of going elsewhere):
	 * only keepalive can tell. */
	snprintf(cmd, sizeof(cmd), "ip -n %s link set %sp down", rh_veth, rh_veth);
	assert_int_equal(run_cmd(cmd), 0);
	int64_t t0 = sbx_mono_ms();
	int64_t ms = wait_lost(&l, t0, VMM_KEEPALIVE_BOUND_MS + 3000);
	fprintf(stderr, "test_remote: link down seen after %lld ms (%s), bound %d ms\n",
		(long long)ms, l.why, VMM_KEEPALIVE_BOUND_MS);
	assert_true(ms >= 0);
	assert_false(vmm_connected(v));
	daemon_answers();
	/* Still down: a reconnect gives up within its bound. */
	t0 = sbx_mono_ms();
	assert_int_equal(vmm_reconnect(v, 1500, &err), -1);
	assert_int_equal(err.code, SBX_E_SERVICE_UNAVAILABLE);
	assert_true(sbx_mono_ms() - t0 < 1500 + 1000);
	assert_false(vmm_connected(v));

	/* Back up: reconnect. */
	snprintf(cmd, sizeof(cmd), "ip -n %s link set %sp up", rh_veth, rh_veth);
	assert_int_equal(run_cmd(cmd), 0);
	assert_int_equal(vmm_reconnect(v, 20000, &err), 0);
	assert_true(vmm_connected(v));

	/* libvirtd killed: the socket closes, seen at once (well within the
	 * bound). */
	pthread_mutex_lock(&l.lock);
	l.n = 0;
	pthread_mutex_unlock(&l.lock);
	snprintf(cmd, sizeof(cmd),
		 "p=$(cat %s/libvirtd.pid) && kill -9 $p && "
		 "while kill -0 $p 2>/dev/null; do sleep 0.05; done",
		 rh_dir);
	t0 = sbx_mono_ms();
	assert_int_equal(run_cmd(cmd), 0);
	ms = wait_lost(&l, t0, VMM_KEEPALIVE_BOUND_MS + 3000);
	fprintf(stderr, "test_remote: libvirtd killed seen after %lld ms (%s)\n", (long long)ms,
		l.why);
	assert_true(ms >= 0 && ms < VMM_KEEPALIVE_BOUND_MS);
	assert_false(vmm_connected(v));
	daemon_answers();

	/* The host comes back (remote-host.sh up is idempotent). */
	snprintf(cmd, sizeof(cmd), "scripts/remote-host.sh up %s >/dev/null", rh_dir);
	assert_int_equal(run_cmd(cmd), 0);
	assert_int_equal(vmm_reconnect(v, 20000, &err), 0);
	assert_true(vmm_connected(v));

	/* The guest outlived its libvirtd; the handle finds it on the new
	 * connection and a reopened stream channel answers a PING. */
	assert_true(vmm_vm_is_running(vm));
	rx_clear(&rx);
	assert_int_equal(vmm_vm_open_channel(vm, rx_recv, &rx, &ch, &err), 0);
	bool pong = false;
	assert_int_equal(chan_send_welcome(&ch), 0);
	for (uint32_t id = 1; id <= 20 && !pong; id++) {
		assert_int_equal(chan_send_frame(&ch, WIRE_PING, id, (const uint8_t *)"x", 1), 0);
		pong = rx_wait(&rx, WIRE_PONG, id, 1000);
	}
	assert_true(pong);
	ch.close(ch.ctx);
	assert_int_equal(vmm_vm_destroy(vm, &err), 0);
	vmm_vm_free(vm);
	char vols[4096];
	remote_volumes(vols, sizeof(vols));
	assert_null(strstr(vols, d.prefix)); /* its console log went too */
	vmm_free(v);
	daemon_answers();
}

/* ------------------------------------------- two hosts: local and remote
 * The daemon restarted with `hosts` = [local (qemu:///system), remote (the
 * TLS host)], small capacities so placement shows, and a short
 * host_down_after_ms. Where a sandbox runs is its row's `host` and the
 * libvirtd that lists its domain. */

#define TWO_DOWN_AFTER_MS 15000

static char s_a[64], s_b[64], s_c[64], s_d[64], s_e[64];
static char dom_a[64];	      /* s_a's domain on the remote host */
static struct daemon metrics; /* d, on metrics_listen */

static void two_host_config(void)
{
	FILE *f = fopen(d.config, "w");

	assert_non_null(f);
	fprintf(f,
		"{\"state_dir\": \"%s\", \"db_path\": \"%s\", \"domain_prefix\": \"%s\", "
		"\"accel\": \"tcg\", \"allow_tcg\": true, \"kernel\": \"%s/images/vmlinux\", "
		"\"initrd\": \"%s/images/initramfs.cpio.gz\", \"base_image\": \"%s\", "
		"\"sizes\": {\"tiny\": {\"vcpus\": 1, \"memory_mib\": 256, \"disk_gib\": 1, "
		"\"price_micro_usd_per_hour\": 90000}}, \"default_size\": \"tiny\", "
		"\"execution_test_shell_runtime\": true, \"host_check_interval_ms\": 200, "
		"\"host_down_after_ms\": %d, \"metrics_listen\": \"127.0.0.1:%d\", \"hosts\": ["
		"{\"name\": \"local\", \"uri\": \"qemu:///system\", \"state_dir\": \"%s\", "
		"\"domain_prefix\": \"%sl-\", \"max_guests\": 3, \"memory_mib\": 512, "
		"\"disk_gib\": 10}, "
		"{\"name\": \"remote\", \"uri\": \"%s\", \"state_dir\": \"%s/state\", "
		"\"domain_prefix\": \"%sr-\", \"max_guests\": 3, \"memory_mib\": 768, "
		"\"disk_gib\": 10, \"kernel\": \"%s/state/images/tiny/vmlinux\", "
		"\"initrd\": \"%s/state/images/tiny/initramfs.cpio.gz\", "
		"\"base_image\": \"%s/state/images/base.qcow2\"}]}\n",
		d.state_dir, d.db, d.prefix, d.state_dir, d.state_dir, local_base,
		TWO_DOWN_AFTER_MS, metrics.port, d.state_dir, d.prefix, rh_uri, rh_dir, d.prefix,
		rh_dir, rh_dir, rh_dir);
	fclose(f);
}

/* A query's first column as text (?1 bound to id, or none). */
static void db_text(const char *sql, const char *id, char *out, size_t n)
{
	assert_int_equal(daemon_db_text(&d, sql, id, out, n), 0);
}

static void ledger_ok(void)
{
	struct sbx_error err;

	if (daemon_ledger_check(&d, &err) < 0)
		fail_msg("ledger check: %s", err.message);
}

/* Does the libvirtd at uri run domain `name`? */
static bool runs_domain(const char *uri, const char *name)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd), "virsh -c '%s' list --name 2>/dev/null | grep -cx '%s'", uri,
		 name);
	return cmd_number(cmd) == 1;
}

/* POST /v1/sandboxes; its status. On 201 the id into id, checked to run on
 * `host` (its row, and that host's libvirtd lists its domain). */
static int create_on(const char *host, char *id)
{
	struct http_reply r;
	char got[32], dom[64];
	int status;

	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", d.key, NULL,
				      "{\"timeout_minutes\": 10}", 0, &r),
			 0);
	status = r.status;
	if (status == 201) {
		snprintf(id, 64, "%s", jstr(r.json, "id"));
		db_text("SELECT host FROM sandboxes WHERE id = ?1", id, got, sizeof(got));
		if (strcmp(got, host) != 0)
			fail_msg("sandbox %s went to host '%s', not '%s'", id, got, host);
		db_text("SELECT domain FROM sandboxes WHERE id = ?1", id, dom, sizeof(dom));
		bool remote = strcmp(host, "remote") == 0;
		assert_true(runs_domain(rh_uri, dom) == remote);
		assert_true(runs_domain("qemu:///system", dom) == !remote);
	} else if (status != 503) {
		fail_msg("create: %d %s", status, r.body);
	}
	http_reply_free(&r);
	return status;
}

static void exec_in(const char *id, const char *cmd, const char *want_stdout)
{
	struct http_reply r = exec_reply(id, cmd);

	if (r.status != 200)
		fail_msg("exec in %s: %d %s", id, r.status, r.body);
	assert_string_equal(jstr(r.json, "stdout"), want_stdout);
	http_reply_free(&r);
}

static const char *status_of(const char *id, char *buf, size_t n)
{
	assert_int_equal(daemon_sandbox_status(&d, id, buf, n), 200);
	return buf;
}

static void delete_sandbox(const char *id)
{
	assert_int_equal(daemon_delete_sandbox(&d, id, NULL, 0), 200);
}

/* `sandboxd admin drain|undrain HOST`, then wait for the daemon to read it
 * (host_check_interval_ms 200). */
static void admin_drain(const char *cmd, const char *host)
{
	assert_int_equal(daemon_drain(&d, cmd, host), strcmp(cmd, "drain") == 0);
	usleep(800 * 1000);
}

/* The host's end of the veth up or down: the host goes silent (packets
 * vanish; only keepalive can tell) or comes back. */
static void remote_link(bool up)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "ip -n %s link set %sp %s", rh_veth, rh_veth,
		 up ? "up" : "down");
	assert_int_equal(run_cmd(cmd), 0);
}

static void two_hosts_spread_and_serve(void **state)
{
	(void)state;
	if (rh_skip)
		skip();
	struct http_reply r;
	char url[160], st[32];

	assert_int_equal(daemon_stop(&d), 0);
	metrics.port = free_port();
	two_host_config();
	assert_int_equal(daemon_start(&d), 0);

	/* Spread by free memory: remote 768 > local 512, then a tie (512 =
	 * 512): the first listed. */
	assert_int_equal(create_on("remote", s_a), 201);
	assert_int_equal(create_on("local", s_b), 201);
	exec_in(s_a, "echo on-$((40+2))", "on-42\n");
	exec_in(s_b, "echo on-$((40+3))", "on-43\n");

	/* Files both ways in the remote guest. */
	snprintf(url, sizeof(url), "/v1/sandboxes/%s/files?path=/tmp/two.txt", s_a);
	assert_int_equal(http_request(&d, "PUT", url, d.key, NULL, "two hosts\n", 0, &r), 0);
	assert_int_equal(r.status, 201);
	http_reply_free(&r);
	exec_in(s_a, "cat /tmp/two.txt", "two hosts\n");
	assert_int_equal(http_request(&d, "GET", url, d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "two hosts\n");
	http_reply_free(&r);

	/* A one-shot execution with local drained: only the remote host may
	 * take it. */
	admin_drain("drain", "local");
	assert_int_equal(http_request(&d, "POST", "/v1/sandbox/executions", d.key, NULL,
				      "{\"runtime\": \"sh\", \"timeout_seconds\": 60, "
				      "\"code\": \"echo ran-$((6*7))\"}",
				      0, &r),
			 0);
	if (r.status != 200)
		fail_msg("execution: %d %s", r.status, r.body);
	assert_string_equal(jstr(r.json, "stdout"), "ran-42\n");
	http_reply_free(&r);
	admin_drain("undrain", "local");
	assert_string_equal(status_of(s_a, st, sizeof(st)), "running");
	ledger_ok();
}

struct bg_exec {
	pthread_t t;
	char id[64];
	int status; /* 0 until answered; -1: no HTTP answer */
	char body[512];
	pthread_mutex_t lock;
};

static void *bg_exec_main(void *arg)
{
	struct bg_exec *b = arg;
	struct http_reply r;
	char path[128];
	int st = -1;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", b->id);
	if (http_request(&d, "POST", path, d.key, NULL,
			 "{\"command\": \"touch /tmp/started; sleep 100; echo late\", "
			 "\"timeout_ms\": 150000}",
			 0, &r) == 0) {
		st = r.status;
		pthread_mutex_lock(&b->lock);
		snprintf(b->body, sizeof(b->body), "%s", r.body ? r.body : "");
		pthread_mutex_unlock(&b->lock);
		http_reply_free(&r);
	}
	pthread_mutex_lock(&b->lock);
	b->status = st;
	pthread_mutex_unlock(&b->lock);
	return NULL;
}

static int bg_status(struct bg_exec *b)
{
	pthread_mutex_lock(&b->lock);
	int st = b->status;
	pthread_mutex_unlock(&b->lock);
	return st;
}

/* Start a long exec in sandbox id on a thread of its own and wait
 * (bounded) until its command runs in the guest. */
static void bg_exec_begin(struct bg_exec *b, const char *id)
{
	int64_t end = sbx_mono_ms() + 30000;
	bool started = false;

	snprintf(b->id, sizeof(b->id), "%s", id);
	assert_int_equal(pthread_create(&b->t, NULL, bg_exec_main, b), 0);
	while (!started && sbx_mono_ms() < end) {
		struct http_reply r = exec_reply(id, "test -f /tmp/started && echo y");

		started = r.status == 200 && strcmp(jstr(r.json, "stdout"), "y\n") == 0;
		http_reply_free(&r);
		if (!started)
			usleep(200 * 1000);
	}
	assert_true(started);
	assert_int_equal(bg_status(b), 0);
}

/* Wait (bounded) until sandbox id's status is `want`. */
static void wait_status(const char *id, const char *want, int64_t limit_ms)
{
	char st[32];
	int64_t end = sbx_mono_ms() + limit_ms;

	while (strcmp(status_of(id, st, sizeof(st)), want) != 0 && sbx_mono_ms() < end)
		usleep(200 * 1000);
	if (strcmp(st, want) != 0)
		fail_msg("%s is %s, not %s", id, st, want);
}

/* The value of the operator's /metrics line that starts with `line`
 * (e.g. `sandboxd_host_up{host="remote"`) from its first `label="` on
 * (the label's value) or, with label NULL, the number after it ("" when
 * the line is missing). */
static void metric_of(const char *line, const char *label, char *out, size_t n)
{
	struct http_reply r;
	const char *p;

	out[0] = '\0';
	assert_int_equal(http_request(&metrics, "GET", "/metrics", NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	p = strstr(r.body, line);
	if (p) {
		size_t len = strcspn(p, "\n");
		const char *v = label ? memmem(p, len, label, strlen(label)) : memchr(p, ' ', len);

		if (v && label)
			snprintf(out, n, "%.*s", (int)strcspn(v + strlen(label), "\""),
				 v + strlen(label));
		else if (v)
			snprintf(out, n, "%.*s", (int)(p + len - v - 1), v + 1);
	}
	http_reply_free(&r);
}

/* The remote host's state on /metrics: "up", "down", "draining". */
static void remote_state(char *out, size_t n)
{
	metric_of("sandboxd_host_up{host=\"remote\"", "state=\"", out, n);
}

static void remote_killed_mid_exec(void **state)
{
	(void)state;
	if (rh_skip)
		skip();
	struct bg_exec b = {.lock = PTHREAD_MUTEX_INITIALIZER};
	char ended[32];
	int64_t end;

	db_text("SELECT domain FROM sandboxes WHERE id = ?1", s_a, dom_a, sizeof(dom_a));
	bg_exec_begin(&b, s_a);

	int64_t killed = sbx_wall_ms();
	remote_link(false);
	/* The exec in flight gets an error answer, not a hang. */
	end = sbx_mono_ms() + VMM_KEEPALIVE_BOUND_MS + TWO_DOWN_AFTER_MS + 30000;
	while (bg_status(&b) == 0 && sbx_mono_ms() < end)
		usleep(100 * 1000);
	fprintf(stderr, "test_remote: exec in flight at the drop answered %d after %lld ms: %s\n",
		bg_status(&b), (long long)(sbx_wall_ms() - killed), b.body);
	assert_true(bg_status(&b) >= 500 && bg_status(&b) < 600);
	pthread_join(b.t, NULL);

	/* The remote sandbox ends failed once the host is down, billed to the
	 * host's last answer: before keepalive closed the connection. */
	wait_status(s_a, "failed", VMM_KEEPALIVE_BOUND_MS + TWO_DOWN_AFTER_MS + 30000);
	fprintf(stderr, "test_remote: remote sandbox failed %lld ms after the drop\n",
		(long long)(sbx_wall_ms() - killed));
	db_text("SELECT ended_at_ms FROM sandboxes WHERE id = ?1", s_a, ended, sizeof(ended));
	assert_true(atoll(ended) >= killed - 1000);
	assert_true(atoll(ended) <= killed + VMM_KEEPALIVE_BOUND_MS + TWO_DOWN_AFTER_MS);
	/* ... and the host is marked down (its last answer host_down_after_ms
	 * ago): creates go to local. */
	char hs[16];
	end = sbx_mono_ms() + VMM_KEEPALIVE_BOUND_MS + TWO_DOWN_AFTER_MS + 30000;
	while ((remote_state(hs, sizeof(hs)), strcmp(hs, "down") != 0) && sbx_mono_ms() < end)
		usleep(200 * 1000);
	assert_string_equal(hs, "down");

	/* The local host keeps serving: execs and a create (remote is down). */
	exec_in(s_b, "echo still-$((1+1))", "still-2\n");
	assert_int_equal(create_on("local", s_c), 201);
	exec_in(s_c, "echo new-$((2+2))", "new-4\n");
	ledger_ok();
}

static void remote_back_reconciled_then_drained(void **state)
{
	(void)state;
	if (rh_skip)
		skip();
	char n[32];
	int64_t end;

	remote_link(true);
	/* Reconciled: the guest of the failed sandbox, which ran on through
	 * the outage, is destroyed (no orphan); no running row is left on the
	 * remote host (no ghost). */
	end = sbx_mono_ms() + 90000;
	while (virsh_lists_ours(rh_uri) && sbx_mono_ms() < end)
		usleep(300 * 1000);
	assert_false(virsh_lists_ours(rh_uri));
	assert_false(runs_domain(rh_uri, dom_a));
	db_text("SELECT count(*) FROM sandboxes WHERE host = 'remote' AND status = 'running'", NULL,
		n, sizeof(n));
	assert_string_equal(n, "0");
	end = sbx_mono_ms() + 30000;
	char hs[16];
	while ((remote_state(hs, sizeof(hs)), strcmp(hs, "up") != 0) && sbx_mono_ms() < end)
		usleep(200 * 1000);
	assert_string_equal(hs, "up");

	/* Placed on again (local has 0 MiB free). */
	assert_int_equal(create_on("remote", s_d), 201);
	exec_in(s_d, "echo back-$((3+4))", "back-7\n");

	/* Drained, the remote host (more free memory: 512 > 256) gets no
	 * create; its sandbox keeps working. */
	admin_drain("drain", "remote");
	delete_sandbox(s_c);
	assert_int_equal(create_on("local", s_e), 201);
	exec_in(s_d, "echo drained-$((4+4))", "drained-8\n");
	admin_drain("undrain", "remote");

	delete_sandbox(s_b);
	delete_sandbox(s_d);
	delete_sandbox(s_e);
	assert_false(virsh_lists_ours(rh_uri));
	ledger_ok();
}

/* libvirtd on the remote host killed and started again (as a restart on a
 * real host) while one sandbox there is idle and another runs a command:
 * their stream channels die with the connection, yet both sandboxes keep
 * running; the command in flight answers 503, and once vmm has reconnected
 * and the host thread reopened the channels (docs/hosts.md "A dropped
 * connection") execs answer again in both. */
static void a_libvirtd_restart_is_survived(void **state)
{
	(void)state;
	if (rh_skip)
		skip();
	struct bg_exec b = {.lock = PTHREAD_MUTEX_INITIALIZER};
	char f[64], g[64], cmd[1024], st[32];
	int64_t end;

	admin_drain("drain", "local"); /* both on the remote host */
	assert_int_equal(create_on("remote", f), 201);
	assert_int_equal(create_on("remote", g), 201);
	admin_drain("undrain", "local");
	exec_in(f, "echo before > /tmp/mark; cat /tmp/mark", "before\n");
	bg_exec_begin(&b, g);

	snprintf(cmd, sizeof(cmd),
		 "p=$(cat %s/libvirtd.pid) && kill -9 $p && "
		 "while kill -0 $p 2>/dev/null; do sleep 0.05; done && "
		 "scripts/remote-host.sh up %s >/dev/null",
		 rh_dir, rh_dir);
	assert_int_equal(run_cmd(cmd), 0);

	/* The command in flight at the drop: a clear 503, not a hang. */
	end = sbx_mono_ms() + 60000;
	while (bg_status(&b) == 0 && sbx_mono_ms() < end)
		usleep(100 * 1000);
	fprintf(stderr, "test_remote: exec in flight at the libvirtd restart: %d %s\n",
		bg_status(&b), b.body);
	assert_int_equal(bg_status(&b), 503);
	assert_non_null(strstr(b.body, "connection"));
	pthread_join(b.t, NULL);

	/* Execs answer again (503 "retry" until the channel is reopened),
	 * with the guest's state intact. */
	for (int i = 0; i < 2; i++) {
		const char *id = i == 0 ? f : g;
		struct http_reply r;

		end = sbx_mono_ms() + 60000;
		for (;;) {
			r = exec_reply(id, "cat /tmp/mark 2>/dev/null; test -f /tmp/started && "
					   "echo started; echo after-$((5*5))");
			if (r.status != 503 || sbx_mono_ms() > end)
				break;
			http_reply_free(&r);
			usleep(200 * 1000);
		}
		if (r.status != 200)
			fail_msg("exec in %s after the restart: %d %s", id, r.status, r.body);
		assert_string_equal(jstr(r.json, "stdout"),
				    i == 0 ? "before\nafter-25\n" : "started\nafter-25\n");
		http_reply_free(&r);
		assert_string_equal(status_of(id, st, sizeof(st)), "running");
	}
	ledger_ok();

	/* A network blip: the host's end of the link down until the daemon
	 * has lost the connection (keepalive, 8 s; the host's last answer
	 * then ages on /metrics), up again well before host_down_after_ms. */
	char seen[32];
	remote_link(false);
	end = sbx_mono_ms() + VMM_KEEPALIVE_BOUND_MS + 20000;
	do {
		usleep(200 * 1000);
		metric_of("sandboxd_host_last_seen_seconds{host=\"remote\"}", NULL, seen,
			  sizeof(seen));
	} while (atof(seen) < 1.0 && sbx_mono_ms() < end);
	remote_link(true);
	assert_true(atof(seen) >= 1.0);
	end = sbx_mono_ms() + 60000;
	for (;;) {
		struct http_reply r = exec_reply(f, "cat /tmp/mark");
		int code = r.status;

		if (code == 200)
			assert_string_equal(jstr(r.json, "stdout"), "before\n");
		else if (code != 503 || sbx_mono_ms() > end)
			fail_msg("exec after the blip: %d %s", code, r.body);
		http_reply_free(&r);
		if (code == 200)
			break;
		usleep(200 * 1000);
	}
	remote_state(seen, sizeof(seen));
	assert_string_equal(seen, "up"); /* never marked down */
	assert_string_equal(status_of(f, st, sizeof(st)), "running");
	assert_string_equal(status_of(g, st, sizeof(st)), "running");
	ledger_ok();
	delete_sandbox(f);
	delete_sandbox(g);
	assert_false(virsh_lists_ours(rh_uri));
	ledger_ok();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(create_and_exec_run_on_the_remote_host),
	    cmocka_unit_test(files_go_both_ways_over_the_stream),
	    cmocka_unit_test(delete_removes_the_domain_and_its_overlay),
	    cmocka_unit_test(only_the_listed_client_certificate_gets_in),
	    cmocka_unit_test(a_lost_connection_is_seen_within_the_bound),
	    cmocka_unit_test(two_hosts_spread_and_serve),
	    cmocka_unit_test(remote_killed_mid_exec),
	    cmocka_unit_test(remote_back_reconciled_then_drained),
	    cmocka_unit_test(a_libvirtd_restart_is_survived),
	};
	sbx_log_set_level(SBX_LOG_ERROR + 1);
	return cmocka_run_group_tests(tests, setup, teardown);
}
