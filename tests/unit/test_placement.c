/* Unit tests of several hosts (docs/hosts.md): the `hosts` config key
 * (parse, defaults, validation) and the placement rule (fleet_place,
 * a pure function over host snapshots). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "api/api-priv.h"
#include "sandbox/sandbox-priv.h"
#include "util/util.h"

/* Static: a struct sandbox_config with its hosts is ~150 KiB. */
static struct sandbox_config C;

static int parse(const char *json, struct sbx_error *err)
{
	sandbox_config_defaults(&C);
	sbx_error_clear(err);
	if (api_config_parse(json, strlen(json), &C, err) < 0)
		return -1;
	sandbox_config_resolve(&C);
	return sandbox_config_validate(&C, err);
}

/* No `hosts`: one host "local" from the top-level keys, as before. */
static void test_implicit_local_host(void **state)
{
	struct sbx_error err;

	(void)state;
	assert_int_equal(parse("{\"state_dir\": \"/srv/sbx\", \"libvirt_uri\": \"qemu:///session\","
			       " \"max_guests\": 5, \"transport\": \"stream\","
			       " \"base_image\": \"/srv/sbx/images/full/base.qcow2\"}",
			       &err),
			 0);
	assert_int_equal(C.n_hosts, 1);
	assert_string_equal(C.hosts[0].name, "local");
	assert_string_equal(C.hosts[0].uri, "qemu:///session");
	assert_string_equal(C.hosts[0].state_dir, "/srv/sbx");
	assert_string_equal(C.hosts[0].domain_prefix, "sbx-");
	assert_int_equal(C.hosts[0].transport, CONFIG_TRANSPORT_STREAM);
	assert_string_equal(C.hosts[0].kernel, "/srv/sbx/images/tiny/vmlinux");
	assert_string_equal(C.hosts[0].base_image, "/srv/sbx/images/full/base.qcow2");
	assert_int_equal(C.hosts[0].max_guests, 5);
	assert_int_equal(C.hosts[0].memory_mib, 0); /* RAM x memory_overcommit */
	assert_true(C.hosts[0].implicit);
	assert_int_equal(C.host_down_after_ms, 30000);
}

static void test_hosts_list(void **state)
{
	struct sbx_error err;

	(void)state;
	assert_int_equal(
	    parse("{\"state_dir\": \"/srv/gw\", \"kernel\": \"/srv/gw/images/tiny/vmlinux\","
		  " \"base_image\": \"/opt/base.qcow2\", \"host_down_after_ms\": 5000, \"hosts\": ["
		  "{\"name\": \"a\", \"uri\": \"qemu:///system\", \"state_dir\": \"/srv/a\","
		  " \"max_guests\": 4, \"memory_mib\": 8192, \"disk_gib\": 100,"
		  " \"domain_prefix\": \"sbxa-\"},"
		  "{\"name\": \"h2\", \"uri\": \"qemu+tls://10.77.0.2/system\","
		  " \"state_dir\": \"/var/lib/sandboxd-h2\", \"max_guests\": 8,"
		  " \"memory_mib\": 16384, \"disk_gib\": 200}]}",
		  &err),
	    0);
	assert_int_equal(C.n_hosts, 2);
	assert_string_equal(C.hosts[0].name, "a");
	assert_int_equal(C.hosts[0].transport,
			 CONFIG_TRANSPORT_SOCKET); /* local: the top-level one */
	assert_string_equal(C.hosts[0].kernel, "/srv/a/images/tiny/vmlinux");
	assert_string_equal(C.hosts[0].base_image, "/opt/base.qcow2");	 /* not under state_dir */
	assert_int_equal(C.hosts[1].transport, CONFIG_TRANSPORT_STREAM); /* remote: stream */
	assert_string_equal(C.hosts[1].domain_prefix, "sbx-");
	assert_string_equal(C.hosts[1].initrd,
			    "/var/lib/sandboxd-h2/images/tiny/initramfs.cpio.gz");
	assert_int_equal(C.hosts[1].memory_mib, 16384);
	assert_int_equal(C.hosts[1].disk_gib, 200);
	assert_false(C.hosts[1].implicit);
	assert_int_equal(C.host_down_after_ms, 5000);
	assert_string_equal(C.db_path, "/srv/gw/sandboxd.db"); /* stays on the gateway */
}

#define HOSTC(n, guests, mem, disk, extra)                                                         \
	"{\"name\": \"" n "\", \"uri\": \"qemu:///system\", \"state_dir\": \"/srv/" n "\","        \
	" \"max_guests\": " #guests ", \"memory_mib\": " #mem ", \"disk_gib\": " #disk extra "}"
#define HOST(n, extra) HOSTC(n, 2, 1024, 10, extra)

static void test_hosts_refused(void **state)
{
	static const struct {
		const char *json, *why;
	} bad[] = {
	    {"{\"hosts\": []}", "lists 1.."},
	    {"{\"hosts\": {}}", "a list"},
	    {"{\"hosts\": [" HOST("a", ", \"colour\": 1") "]}", "unknown key"},
	    {"{\"hosts\": [" HOST("a", "") "," HOST("a", ", \"domain_prefix\": \"x-\"") "]}",
	     "two hosts are named"},
	    {"{\"hosts\": [" HOST("a", "") ", {\"name\": \"b\", \"uri\": \"qemu:///system\","
					   " \"state_dir\": \"/srv/a\", \"max_guests\": 1, "
					   "\"memory_mib\": 1, \"disk_gib\": 1,"
					   " \"domain_prefix\": \"b-\"}]}",
	     "share a state_dir"},
	    {"{\"hosts\": [" HOST("a", "") "," HOST("b", ", \"domain_prefix\": \"sbx-b\"") "]}",
	     "domain prefixes"},
	    {"{\"hosts\": [" HOSTC("a", 2, 0, 10, "") "]}", "must be > 0"},
	    {"{\"hosts\": [" HOSTC("a", 0, 1024, 10, "") "]}", "must be > 0"},
	    {"{\"hosts\": [" HOSTC("a", 2, 1024, 0, "") "]}", "must be > 0"},
	    {"{\"hosts\": [" HOST("Bad name", "") "]}", "host name"},
	    {"{\"hosts\": [{\"name\": \"r\", \"uri\": \"qemu+tls://h/system\", \"state_dir\":"
	     " \"/srv/r\", \"max_guests\": 1, \"memory_mib\": 1, \"disk_gib\": 1,"
	     " \"transport\": \"socket\"}]}",
	     "needs a local URI"},
	    {"{\"mode\": \"production\", \"accel\": \"kvm\", \"hosts\": [{\"name\": \"r\","
	     " \"uri\": \"qemu+tcp://10.0.0.2/system\", \"state_dir\": \"/srv/r\","
	     " \"max_guests\": 1, \"memory_mib\": 1, \"disk_gib\": 1}]}",
	     "plain-text"},
	};
	struct sbx_error err;

	(void)state;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
		if (parse(bad[i].json, &err) == 0)
			fail_msg("accepted: %s", bad[i].json);
		if (!strstr(err.message, bad[i].why))
			fail_msg("%s: '%s' does not say '%s'", bad[i].json, err.message,
				 bad[i].why);
	}
	/* the same plain-text URI is fine outside production */
	assert_int_equal(
	    parse("{\"hosts\": [{\"name\": \"r\", \"uri\": \"qemu+tcp://10.0.0.2/system\","
		  " \"state_dir\": \"/srv/r\", \"max_guests\": 1, \"memory_mib\": 1,"
		  " \"disk_gib\": 1}]}",
		  &err),
	    0);
}

static void test_uri_kinds(void **state)
{
	(void)state;
	assert_true(vmm_uri_is_local("qemu:///system"));
	assert_true(vmm_uri_is_local("qemu:///session"));
	assert_false(vmm_uri_is_local("qemu+tls://10.77.0.2/system"));
	assert_false(vmm_uri_is_local("qemu://host/system"));
	assert_true(vmm_uri_is_plaintext("qemu+tcp://10.0.0.2/system"));
	assert_false(vmm_uri_is_plaintext("qemu+tls://10.0.0.2/system"));
	assert_false(vmm_uri_is_plaintext("qemu+ssh://root@h/system"));
	assert_false(vmm_uri_is_plaintext("qemu://h/system")); /* TLS by default */
	assert_false(vmm_uri_is_plaintext("qemu:///system"));
}

/* A host with `total` MiB of guest memory, `used` of it placed. */
static struct fleet_host_snapshot snap(uint64_t used, uint64_t total)
{
	return (struct fleet_host_snapshot){
	    .up = true,
	    .max_guests = 10,
	    .mem_used_mib = used,
	    .mem_total_mib = total,
	    .disk_ok = true,
	    .disk_ok_evicting = true,
	};
}

static void test_place(void **state)
{
	struct fleet_host_snapshot h[3];
	enum fleet_place_how how;

	(void)state;
	/* the most free memory wins, the first listed on a tie */
	h[0] = snap(0, 1024), h[1] = snap(0, 2048), h[2] = snap(2048, 3072);
	assert_int_equal(fleet_place(h, 3, 512, 1, &how), 1);
	assert_int_equal(how, FLEET_PLACE_ROOM);
	h[1].mem_used_mib = 1024;
	assert_int_equal(fleet_place(h, 3, 512, 1, &how), 0);
	/* only where it fits: A full, so B */
	h[0].mem_used_mib = 1024;
	assert_int_equal(fleet_place(h, 2, 512, 1, &how), 1);
	/* too big for every host: none */
	assert_int_equal(fleet_place(h, 3, 4096, 1, &how), -1);
	/* a warm guest wins over more free memory elsewhere */
	h[0] = snap(900, 1024), h[1] = snap(0, 2048);
	h[0].warm = 1;
	assert_int_equal(fleet_place(h, 2, 512, 1, &how), 0);
	assert_int_equal(how, FLEET_PLACE_WARM);
	/* ... unless that host is drained or down */
	h[0].draining = true;
	assert_int_equal(fleet_place(h, 2, 512, 1, &how), 1);
	assert_int_equal(how, FLEET_PLACE_ROOM);
	h[0].draining = false, h[0].up = false;
	assert_int_equal(fleet_place(h, 2, 512, 1, &how), 1);
	h[1].draining = true;
	assert_int_equal(fleet_place(h, 2, 512, 1, &how), -1);
	/* guest slots and the disk cap count */
	h[0] = snap(0, 4096), h[1] = snap(0, 1024);
	h[0].guests = h[0].max_guests;
	assert_int_equal(fleet_place(h, 2, 512, 1, &how), 1);
	h[0].guests = 0, h[0].disk_total_gib = 10, h[0].disk_used_gib = 10;
	assert_int_equal(fleet_place(h, 2, 512, 1, &how), 1);
	h[0].disk_total_gib = 0, h[0].disk_ok = h[0].disk_ok_evicting = false;
	assert_int_equal(fleet_place(h, 2, 512, 1, &how), 1);
	/* a pool that fills a host gives way when no host has room */
	h[0] = snap(0, 1024), h[1] = snap(768, 1024);
	h[0].pool_guests = 2, h[0].pool_mib = 1024;
	assert_int_equal(fleet_place(h, 2, 512, 1, &how), 0);
	assert_int_equal(how, FLEET_PLACE_EVICT);
	h[1].mem_used_mib = 0;
	assert_int_equal(fleet_place(h, 2, 512, 1, &how), 1);
	assert_int_equal(how, FLEET_PLACE_ROOM);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_implicit_local_host),
	    cmocka_unit_test(test_hosts_list),
	    cmocka_unit_test(test_hosts_refused),
	    cmocka_unit_test(test_uri_kinds),
	    cmocka_unit_test(test_place),
	};

	sbx_log_set_level(SBX_LOG_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
